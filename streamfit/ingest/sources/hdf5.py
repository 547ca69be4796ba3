"""HDF5 files (h5py): features in the 2-D dataset x_dataset, labels in y_dataset (None: no
labels), read batch_size rows at a time (see arrays.py for the label rules and bad records).
x_columns: the width X must have (the training data's, recorded by ingest; arrays.check_columns)."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from streamfit.errors import InputError
from streamfit.ingest.sources._util import check_batch_size, require_path
from streamfit.ingest.sources.arrays import array_batches, check_columns, check_shapes
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.storage import is_url, resolve

if TYPE_CHECKING:
    import h5py


class Hdf5Source:
    """Streaming reader of dense rows from an HDF5 file."""

    kind = "dense"

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = 8192,
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
            X = self._dataset(f, x_dataset, "--x-dataset")
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
            X, y = f[self.x_dataset], None if self.y_dataset is None else f[self.y_dataset]
            yield from array_batches(self, X, y)
