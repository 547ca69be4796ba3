"""HDF5 files (h5py): features in the 2-D dataset x_dataset, labels in y_dataset (None: no
labels), read batch_size rows at a time (see arrays.py for the label rules and bad records).
x_columns: the width X must have (the training data's, recorded by ingest; arrays.check_columns).

x_dataset may also name a group holding a CSR matrix as people store one: the datasets `data`,
`indices`, `indptr` and its shape in an attribute, `shape` with `encoding-type` csr_matrix
(anndata, scanpy) or `h5sparse_shape` with `h5sparse_format` csr (h5sparse), or `shape` alone;
it is read as sparse rows, a slice of rows at a time (indptr, then the rows' entries). A CSC
group (anndata's csc_matrix) is refused: its rows cannot be read a slice at a time."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from streamfit.errors import InputError
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE
from streamfit.ingest.sources._util import check_batch_size, require_path
from streamfit.ingest.sources.arrays import array_batches, check_columns, check_shapes
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.storage import is_url, resolve

if TYPE_CHECKING:
    import h5py


class _CsrGroup:
    """A CSR matrix stored as an HDF5 group (data, indices, indptr; the module docstring's
    layouts) seen as a 2-D array of rows: shape, dtype, and X[start:stop] as scipy CSR."""

    def __init__(self, path: str, name: str, group: h5py.Group):
        import h5py

        attrs = group.attrs
        encoding = _text(attrs.get("encoding-type", attrs.get("h5sparse_format", "")))
        shape = attrs.get("shape", attrs.get("h5sparse_shape"))
        parts = {k: group.get(k) for k in ("data", "indices", "indptr")}
        if encoding in ("csc_matrix", "csc"):
            raise InputError(
                path,
                f"group {name!r} holds a CSC matrix (stored by columns), whose rows cannot be read a slice at a time",
                "write it by rows, e.g. anndata's X as csr_matrix or scipy's X.tocsr()",
            )
        missing = [k for k, v in parts.items() if not isinstance(v, h5py.Dataset)]
        if missing or shape is None or len(shape) != 2 or encoding not in ("", "csr_matrix", "csr"):
            raise InputError(
                path,
                f"group {name!r} is not a CSR matrix (datasets data, indices, indptr and a shape attribute)",
                "set --x-dataset to a 2-D dataset, or to such a group",
            )
        self.path, self.name = path, name
        self.data, self.indices, self.indptr = parts["data"], parts["indices"], parts["indptr"]
        self.shape = (int(shape[0]), int(shape[1]))
        self.dtype = self.data.dtype
        if self.indptr.shape != (self.shape[0] + 1,) or self.indices.shape != self.data.shape:
            raise InputError(
                path,
                f"group {name!r}: indptr has {self.indptr.shape[0]} entries for {self.shape[0]} rows, or indices "
                f"{self.indices.shape[0]} for {self.data.shape[0]} values",
                "write the matrix again",
            )

    def __getitem__(self, rows: slice) -> sp.csr_matrix:
        start, stop, _ = rows.indices(self.shape[0])
        pointers = np.asarray(self.indptr[start : stop + 1], dtype=np.int64)
        lo, hi = int(pointers[0]), int(pointers[-1])
        if np.any(np.diff(pointers) < 0) or lo < 0 or hi > self.data.shape[0]:
            raise InputError(
                self.path,
                f"group {self.name!r}: indptr of rows {start}-{stop} does not increase within the "
                f"{self.data.shape[0]} values",
                "write the matrix again",
            )
        return sp.csr_matrix(
            (self.data[lo:hi], self.indices[lo:hi], pointers - lo), shape=(stop - start, self.shape[1])
        )


def _text(value) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class Hdf5Source:
    """Streaming reader of dense rows (or CSR rows, of a group) from an HDF5 file."""

    kind = "dense"  # this format's kind for ingest's defaults: numeric (an instance's: "sparse" for a CSR group)

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        numeric_targets: bool = False,
        x_dataset: str = "X",
        y_dataset: str | None = "y",
        x_columns: int | None = None,
    ):
        self.path = os.fspath(path)
        self.url_info = require_path(self.path)  # a URL's look-up, for its open
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.numeric_targets = numeric_targets
        self.x_dataset = x_dataset
        self.y_dataset = y_dataset
        with self._open() as f:
            X = self._matrix(f)
            self.kind = "sparse" if isinstance(X, _CsrGroup) else "dense"
            y = None if y_dataset is None else self._dataset(f, y_dataset, "--y-dataset")
            self.multilabel = check_shapes(
                self.path,
                f"dataset {x_dataset!r}",
                X.shape,
                X.dtype,
                f"dataset {y_dataset!r}",
                None if y is None else y.shape,
                None if y is None else y.dtype,
                "check --x-dataset and --y-dataset",
                numeric_targets,
            )
            self.x_columns = check_columns(self.path, f"dataset {x_dataset!r}", X.shape, x_columns)
        self.n_read = 0

    def _open(self) -> h5py.File:
        try:
            import h5py  # on first use: h5py takes a while to import

            if is_url(self.path):  # h5py reads a file object: fsspec's, by ranged reads
                return h5py.File(resolve(self.path).open_read(info=self.url_info), "r")
            return h5py.File(self.path, "r")
        except OSError as e:
            raise InputError(self.path, f"not a readable HDF5 file ({e})") from None

    def _matrix(self, f: h5py.File) -> h5py.Dataset | _CsrGroup:
        """The feature matrix: the dataset x_dataset, or the CSR matrix its group holds."""
        import h5py

        obj = f.get(self.x_dataset)
        if isinstance(obj, h5py.Group):
            return _CsrGroup(self.path, self.x_dataset, obj)
        return self._dataset(f, self.x_dataset, "--x-dataset")

    def _dataset(self, f: h5py.File, name: str, option: str) -> h5py.Dataset:
        import h5py

        obj = f.get(name)
        if not isinstance(obj, h5py.Dataset):
            names = []
            f.visititems(lambda key, item: names.append(key) if isinstance(item, h5py.Dataset) else None)
            raise InputError(
                self.path, f"no dataset {name!r}", f"set {option}; the datasets are {', '.join(names) or 'none'}"
            )
        if obj.shape is None:  # an HDF5 null dataspace: a dataset declared without values
            raise InputError(self.path, f"dataset {name!r} holds no values (an empty dataspace)", f"check {option}")
        return obj

    def __iter__(self):
        self.n_read = 0
        with self._open() as f:
            X, y = self._matrix(f), None if self.y_dataset is None else f[self.y_dataset]
            yield from array_batches(self, X, y)
