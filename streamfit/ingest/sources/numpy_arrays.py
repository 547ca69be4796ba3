""".npy and .npz files (see arrays.py for the label rules and bad records).

- foo.npy holds X only; y_path names a .npy of labels. Both are memory-mapped, so they stream.
- foo.npz holds X and y under the keys x_dataset and y_dataset (y_path overrides y). numpy
  cannot memory-map an .npz member, so each array is loaded whole when read.
- a scipy.sparse.save_npz file is read as sparse rows (SparseBatch); it holds no labels, so
  y_path is required. The matrix is loaded whole.
- y_dataset=None reads no labels (every label None, as `streamfit predict` reads unlabeled rows).
- x_columns: the width X must have (the training data's, recorded by ingest; arrays.check_columns).
- behind a URL (s3://…, through fsspec) a file is read whole into memory, not memory-mapped.
"""

from __future__ import annotations

import io
import os
import zipfile
from typing import NamedTuple

import numpy as np
import scipy.sparse as sp

from streamfit.errors import InputError
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE
from streamfit.ingest.sources._util import check_batch_size, require_path
from streamfit.ingest.sources.arrays import array_batches, check_columns, check_shapes
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.storage import is_url, resolve

_SCIPY_KEYS = {"format", "shape", "data", "indices", "indptr"}


class _Header(NamedTuple):
    shape: tuple
    dtype: np.dtype
    sparse: bool = False


def _npz_header(npz, key: str) -> _Header:
    """Shape and dtype of an .npz member, read from its header without loading the array."""
    with npz.zip.open(key + ".npy") as f:
        version = np.lib.format.read_magic(f)
        read = np.lib.format.read_array_header_1_0 if version == (1, 0) else np.lib.format.read_array_header_2_0
        shape, _, dtype = read(f)
    return _Header(shape, dtype)


class NumpySource:
    """Streaming reader of rows from .npy/.npz arrays."""

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        numeric_targets: bool = False,
        x_dataset: str = "X",
        y_dataset: str | None = "y",
        y_path: str | None = None,
        x_columns: int | None = None,
    ):
        self.path = os.fspath(path)
        require_path(self.path)
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.numeric_targets = numeric_targets
        self.x_dataset = x_dataset
        self.y_dataset = y_dataset
        self.y_path = None if y_path is None else os.fspath(y_path)
        if self.y_path is not None:
            require_path(self.y_path)
        X, y = self._arrays(load_x=False)
        self.kind = "sparse" if isinstance(X, _Header) and X.sparse else "dense"
        self.multilabel = check_shapes(
            self.path,
            f"array {self.x_dataset!r}" if self._is_npz else "X",
            X.shape,
            X.dtype,
            f"labels {self.y_path!r}" if self.y_path else f"array {self.y_dataset!r}",
            None if y is None else y.shape,
            None if y is None else y.dtype,
            "check --x-dataset, --y-dataset and --option y_path",
            numeric_targets,
        )
        self.x_columns = check_columns(
            self.path, f"array {self.x_dataset!r}" if self._is_npz else "X", X.shape, x_columns
        )
        self.n_read = 0

    @property
    def _is_npz(self) -> bool:
        return self.path.lower().endswith(".npz")

    @staticmethod
    def _file(path: str):
        """path itself, or behind a URL the file's bytes (memory-mapping needs a local file)."""
        return io.BytesIO(resolve(path).read_bytes()) if is_url(path) else path

    def _load(self, path: str, mapped: bool = False):
        """np.load of path: memory-mapped read-only when `mapped` and path is local."""
        try:
            return np.load(self._file(path), mmap_mode="r" if mapped and not is_url(path) else None)
        except (OSError, ValueError, zipfile.BadZipFile) as e:
            raise InputError(path, f"not a readable .npy/.npz file ({e})") from None

    def _arrays(self, load_x: bool = True):
        """(X, y): memory maps for .npy, loaded arrays for .npz (y None without labels); with
        load_x=False, X of an .npz is only described (shape, dtype), so opening a source does not load it."""
        labeled = self.y_dataset is not None
        y = None if self.y_path is None or not labeled else self._load(self.y_path, mapped=True)
        if not self._is_npz:
            if y is None and labeled:
                raise InputError(self.path, "a .npy file holds no labels", "pass --option y_path=LABELS.npy")
            return self._load(self.path, mapped=True), y
        with self._load(self.path) as npz:
            keys = set(npz.files)
            if self.x_dataset not in keys and _SCIPY_KEYS <= keys:
                if y is None and labeled:
                    raise InputError(
                        self.path, "a scipy sparse .npz holds no labels", "pass --option y_path=LABELS.npy"
                    )
                if load_x:
                    return sp.load_npz(self._file(self.path)).tocsr(), y
                return _Header(tuple(npz["shape"]), _npz_header(npz, "data").dtype, True), y
            listed = ", ".join(sorted(keys)) or "none"
            if self.x_dataset not in keys:
                raise InputError(self.path, f"no array {self.x_dataset!r}", f"set --x-dataset; the arrays are {listed}")
            if y is None and self.y_dataset is not None:  # labeled
                if self.y_dataset not in keys:
                    raise InputError(
                        self.path, f"no array {self.y_dataset!r}", f"set --y-dataset; the arrays are {listed}"
                    )
                if _npz_header(npz, self.y_dataset).dtype.hasobject:  # loading it would need unpickling
                    raise InputError(
                        self.path,
                        f"array {self.y_dataset!r} holds Python objects, which are not read",
                        "save the labels as numbers or strings",
                    )
                y = npz[self.y_dataset]
            return (npz[self.x_dataset] if load_x else _npz_header(npz, self.x_dataset)), y

    def __iter__(self):
        self.n_read = 0
        X, y = self._arrays()
        yield from array_batches(self, X, y)
