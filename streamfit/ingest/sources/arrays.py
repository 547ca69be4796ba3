"""Row slices of numeric arrays (HDF5 datasets, .npy/.npz arrays) as batches; used by the
hdf5 and numpy sources.

X is 2-D numeric, dense or scipy sparse. y is 1-D (labels: integers and integer-valued floats
written as integers, other floats with repr, strings as they are) or a 2-D 0/1 indicator
(multilabel: the numbers of the columns holding 1, as str); with numeric targets (ingest
--target numeric, `numeric_targets`) a 2-D y holds several outputs, a row's label being the
list of its values (checked by the ingest pipeline). A row with a NaN/inf value, a
NaN/empty label, an indicator value other than 0/1 or (sparse X) a column index outside X's shape is
a bad record at "file:row R" (from 0).
Without y (no labels read, as `streamfit predict` reads unlabeled rows) every label is None.
"""

from __future__ import annotations

import json
import math

import numpy as np
import scipy.sparse as sp

from streamfit.errors import InputError
from streamfit.ingest.sources._util import csr_int64, fits_float32
from streamfit.ingest.sources.batches import DenseBatch, SparseBatch
from streamfit.ingest.sources.policy import BadRecordPolicy


def check_shapes(
    path: str, x_name: str, x_shape, x_dtype, y_name: str, y_shape, y_dtype, hint: str, numeric_targets: bool = False
) -> bool:
    """InputError unless X is (n, d) numeric and y is (n,) or an (n, k) indicator (or, with
    `numeric_targets`, k numeric outputs; or None: no labels); returns whether y is multilabel."""
    if len(x_shape) != 2:
        raise InputError(path, f"{x_name} has shape {tuple(x_shape)}, not (records, features)", hint)
    if x_dtype.kind not in "biuf":
        raise InputError(path, f"{x_name} holds {x_dtype}, not numbers", hint)
    if y_shape is None:
        return False
    if len(y_shape) not in (1, 2):
        raise InputError(path, f"{y_name} has shape {tuple(y_shape)}, not (records,) or (records, classes)", hint)
    if y_dtype.kind not in ("biuf" if len(y_shape) == 2 else "biufSUO"):
        raise InputError(path, f"{y_name} holds {y_dtype}, which cannot be labels", hint)
    if y_shape[0] != x_shape[0]:
        raise InputError(path, f"{x_name} has {x_shape[0]} rows but {y_name} has {y_shape[0]}", hint)
    return len(y_shape) == 2 and not numeric_targets


def check_columns(path: str, x_name: str, x_shape, x_columns: int | None) -> int:
    """X's width (x_shape[1]); InputError unless it is x_columns (None: any). The columns of an
    array are features 0, 1, … by position, hashed or kept as they are, so an array of another
    width than the training data's (recorded in the store's format options as x_columns) holds
    other features: read, it would be scored without a word."""
    width = int(x_shape[1])
    if x_columns is not None and width != x_columns:
        raise InputError(
            path,
            f"{x_name} has {width} columns, the training data {x_columns}",
            "give it the training data's feature columns, in the same order",
        )
    return width


def _label(value) -> str:
    """One label of a 1-D y; ValueError if it is NaN, infinite or empty."""
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("the label is NaN or infinite")
        value = str(int(value)) if value.is_integer() and abs(value) < 2**53 else repr(value)
    elif isinstance(value, bool):
        value = int(value)
    value = str(value)
    if not value:
        raise ValueError("the label is empty")
    return value


def _labels(y: np.ndarray, problems: dict[int, str], numeric_targets: bool) -> list:
    if y.ndim == 2 and numeric_targets:  # several outputs: the pipeline parses and checks the values
        return y.astype(np.float64).tolist()
    if y.ndim == 2:
        bad = ~((y == 0) | (y == 1)).all(axis=1)
        for r in np.flatnonzero(bad).tolist():
            problems[r] = "the label indicator row holds values other than 0 and 1"
        return [[str(j) for j in np.flatnonzero(row).tolist()] for row in y]
    labels = y.tolist()
    for r, value in enumerate(labels):
        try:
            labels[r] = _label(value)
        except UnicodeDecodeError:
            problems[r] = "the label is not valid UTF-8"
        except ValueError as e:
            problems[r] = str(e)
    return labels


def _sparse_raw(x: sp.csr_matrix, r: int) -> str:
    """Row r of a CSR matrix as "column:value ..." text (the record of a bad-record report)."""
    lo, hi = x.indptr[r], x.indptr[r + 1]
    return " ".join(f"{j}:{v!r}" for j, v in zip(x.indices[lo:hi].tolist(), x.data[lo:hi].tolist()))


def array_batch(
    path: str, x, y: np.ndarray | None, start: int, policy: BadRecordPolicy, numeric_targets: bool = False
) -> DenseBatch | SparseBatch | None:
    """The batch of rows start, start+1, ... given their slices x (dense or CSR) and y (or None;
    a 2-D y holds several numeric outputs with `numeric_targets`, else a 0/1 indicator)."""
    n = x.shape[0]
    locations = [f"{path}:row {start + r}" for r in range(n)]
    problems: dict[int, str] = {}
    labels = [None] * n if y is None else _labels(np.asarray(y), problems, numeric_targets)
    raws: dict[int, str] = {}  # the records as read, of rows whose entries are changed below
    if sp.issparse(x):
        x = sp.csr_matrix(x, dtype=np.float64)
        # a damaged (or hostile) scipy .npz can hold column indices outside its own shape
        outside = (x.indices < 0) | (x.indices >= x.shape[1])
        if outside.any():
            row_of_entry = np.repeat(np.arange(n), np.diff(x.indptr))
            for k in np.flatnonzero(outside).tolist():
                r = int(row_of_entry[k])
                if r not in raws:
                    problems[r] = (
                        f"column index {int(x.indices[k])} is outside the matrix's {x.shape[1]} columns: the matrix is "
                        "damaged, write it again"
                    )
                    raws[r] = _sparse_raw(x, r)
            x.data[outside] = 0.0  # out of the arithmetic below; their rows are dropped
            x.indices[outside] = 0
        x.sum_duplicates()
        nonfinite = np.repeat(np.arange(n), np.diff(x.indptr))[~fits_float32(x.data)]
        bad = np.bincount(nonfinite, minlength=n) > 0
    else:
        x = np.array(x, dtype=np.float64)
        bad = ~fits_float32(x).all(axis=1)  # type: ignore[assignment]  # numpy's stub: bool or array
    for r in np.flatnonzero(bad).tolist():
        problems.setdefault(r, "NaN or infinite value (or beyond float32's ±3.4e38: scale the features)")
    for r in sorted(problems):
        if r in raws:
            raw = raws[r]
        elif sp.issparse(x):
            raw = _sparse_raw(x, r)
        else:
            raw = json.dumps(x[r].tolist())
        policy.bad(locations[r], problems[r], raw)
    kept = [r for r in range(n) if r not in problems]
    if not kept:
        return None
    if problems:
        x = x[kept]
    labels = [labels[r] for r in kept]
    locations = [locations[r] for r in kept]
    if sp.issparse(x):
        return SparseBatch(csr_int64(x.data, x.indices, x.indptr, x.shape[1]), labels, locations)
    return DenseBatch(x, labels, locations)


def array_batches(source, X, y):
    """The batches of `source.batch_size` rows of X and y (None: unlabeled), each slice read when
    its batch is made (an HDF5 dataset is read a slice at a time), by array_batch with the source's
    path, policy and numeric_targets; source.n_read counts the rows read. Used by the hdf5 and
    numpy sources' __iter__."""
    for start in range(0, X.shape[0], source.batch_size):
        stop = min(start + source.batch_size, X.shape[0])
        source.n_read += stop - start
        batch = array_batch(
            source.path,
            X[start:stop],
            None if y is None else y[start:stop],
            start,
            source.policy,
            source.numeric_targets,
        )
        if batch is not None:
            yield batch
