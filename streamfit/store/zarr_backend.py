"""Zarr v3 backend: X in the anndata `csr_matrix` encoding, labels beside it (see format.py)."""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from streamfit.storage import Location
from streamfit.store.format import TARGET_DTYPE, manifest_copy_difference

NNZ_CHUNK = 1 << 20  # elements per Zarr chunk along nnz
COMPRESSORS = [ZstdCodec(level=1), Crc32cCodec()]


def _array(group, name, dtype, chunk):
    return group.create_array(name, shape=(0,), chunks=(chunk,), dtype=dtype, compressors=COMPRESSORS)


def open_array(group: zarr.Group, path: str) -> zarr.Array:
    """The array at `path` (e.g. "X/indptr") in `group`; ValueError if the store has a group there."""
    node = group[path]
    if not isinstance(node, zarr.Array):
        raise ValueError(f"{path} is a Zarr group, expected an array")
    return node


def read_range(array: zarr.Array, start: int, stop: int) -> np.ndarray:
    """array[start:stop] of a 1-D array, as a NumPy array."""
    return np.asarray(array[start:stop])


class ZarrWriter:
    """Appends row chunks to a new Zarr v3 group at `root` (local, or an fsspec URL's FsspecStore)."""

    def __init__(self, root: Location, multilabel: bool, chunk_rows: int, n_outputs: int | None = None):
        """n_outputs: the width k of float64 regression targets (None: class labels)."""
        self.group = zarr.open_group(
            root.zarr_store(read_only=False), mode="w-", zarr_format=3
        )  # "w" would recreate the locked directory
        X = self.group.create_group("X")
        self.indptr = _array(X, "indptr", "int64", max(chunk_rows, 1 << 16))
        self.indices = _array(X, "indices", "int32", NNZ_CHUNK)
        self.data = _array(X, "data", "float32", NNZ_CHUNK)
        self.indptr.append(np.zeros(1, dtype=np.int64))
        self.multilabel, self.n_outputs = multilabel, n_outputs
        if n_outputs is not None:
            self.targets = self.group.create_array(
                "targets",
                shape=(0, n_outputs),
                chunks=(chunk_rows, n_outputs),
                dtype=TARGET_DTYPE,
                compressors=COMPRESSORS,
            )
        elif multilabel:
            Y = self.group.create_group("Y")
            self.y_indptr = _array(Y, "indptr", "int64", max(chunk_rows, 1 << 16))
            self.y_indices = _array(Y, "indices", "int32", NNZ_CHUNK)
            self.y_indptr.append(np.zeros(1, dtype=np.int64))
        else:
            self.y = _array(self.group, "y", "int32", chunk_rows)
        self.nnz = 0
        self.n_labels = 0
        self.n_rows = 0

    def append(self, X: sp.csr_matrix, labels) -> None:
        self.indptr.append(np.asarray(X.indptr[1:], dtype=np.int64) - X.indptr[0] + self.nnz)
        if X.nnz:
            self.indices.append(np.asarray(X.indices, dtype=np.int32))
            self.data.append(np.asarray(X.data, dtype=np.float32))
        self.nnz += X.nnz
        self.n_rows += X.shape[0]
        if self.n_outputs is not None:
            self.targets.append(np.asarray(labels, dtype=TARGET_DTYPE), axis=0)
        elif self.multilabel:
            self.y_indptr.append(np.asarray(labels.indptr[1:], dtype=np.int64) + self.n_labels)
            if labels.nnz:
                self.y_indices.append(np.asarray(labels.indices, dtype=np.int32))
            self.n_labels += labels.nnz
        else:
            self.y.append(np.asarray(labels, dtype=np.int32))

    def close(self, n_features: int, manifest_json: str) -> None:
        self.group["X"].attrs.update(
            {"encoding-type": "csr_matrix", "encoding-version": "0.1.0", "shape": [self.n_rows, n_features]}
        )
        self.group.attrs.update({"streamfit.manifest": json.loads(manifest_json)})


class ZarrReader:
    """Reads row chunks of a Zarr v3 store."""

    def __init__(self, root: Location, multilabel: bool, n_classes: int, regression: bool = False):
        group = zarr.open_group(root.zarr_store(read_only=True), mode="r", zarr_format=3)
        self.shape_attr = group["X"].attrs.get("shape")
        copy = group.attrs.get("streamfit.manifest")
        self.manifest_copy = copy if isinstance(copy, dict) else {}
        self.indptr = open_array(group, "X/indptr")
        self.indices = open_array(group, "X/indices")
        self.data = open_array(group, "X/data")
        self.multilabel, self.regression = multilabel, regression
        self.n_classes = n_classes
        # per X array: (Zarr chunk id, its decoded values) of the last Zarr chunk read (_nnz_range)
        self._last_block: dict[str, tuple[int, np.ndarray]] = {}
        if regression:
            self.targets = open_array(group, "targets")
        elif multilabel:
            self.y_indptr = open_array(group, "Y/indptr")
            self.y_indices = open_array(group, "Y/indices")
        else:
            self.y = open_array(group, "y")

    def check(self, manifest) -> None:
        """ValueError naming the first array whose dtype or length, or the `X` shape attribute,
        disagrees with `manifest` (a Manifest)."""
        n, nnz = manifest.n_rows, manifest.nnz
        expected = [("X/indptr", self.indptr, "int64", n + 1), ("X/indices", self.indices, "int32", nnz)]
        expected.append(("X/data", self.data, "float32", nnz))
        if self.regression:
            t = self.targets
            if t.dtype != np.dtype(TARGET_DTYPE) or t.shape != (n, manifest.target["shape"][1]):
                raise ValueError(
                    f"targets holds {t.shape} × {t.dtype}, expected {n} × {manifest.target['shape'][1]} × {TARGET_DTYPE}"
                )
        elif self.multilabel:
            expected += [("Y/indptr", self.y_indptr, "int64", n + 1), ("Y/indices", self.y_indices, "int32", None)]
        else:
            expected.append(("y", self.y, "int32", n))
        for name, array, dtype, length in expected:
            if array.dtype != np.dtype(dtype) or array.ndim != 1 or (length is not None and array.shape[0] != length):
                want = f"{length} × {dtype}" if length is not None else dtype
                raise ValueError(f"{name} holds {array.shape} × {array.dtype}, expected {want}")
        shape = self.shape_attr
        if shape != [n, manifest.n_features]:
            raise ValueError(f"X has shape {shape}, but n_rows={n} and n_features={manifest.n_features}")
        differs = manifest_copy_difference(self.manifest_copy, manifest)
        if differs:
            raise ValueError(f"the manifest copy in the Zarr root attributes has another {differs}")

    def _nnz_range(self, name: str, lo: int, hi: int) -> np.ndarray:
        """X/`name`[lo:hi] (name "data" or "indices"), read in whole Zarr chunks of which the
        last stays decoded here. A row chunk's non-zeros straddle Zarr chunks of NNZ_CHUNK
        entries, and a slice decodes every Zarr chunk it touches: a pass over the row chunks
        in order decoded (zstd, CRC32C) each shared Zarr chunk twice, about twice the work of
        decoding the array once. With the last one kept, such a pass decodes each once; reads
        in another order decode what a slice would. Returns a new array (never a view that
        keeps a larger block alive)."""
        array = getattr(self, name)
        size = array.chunks[0]
        if hi <= lo:
            return read_range(array, lo, hi)
        first, last = lo // size, (hi - 1) // size
        parts = []
        cached = self._last_block.get(name)  # one lookup: another thread may replace it meanwhile
        if cached is not None and cached[0] == first:
            parts.append(cached[1][lo - first * size : hi - first * size])
            first += 1
        if first <= last:
            offset = first * size
            block = read_range(array, offset, min((last + 1) * size, array.shape[0]))
            self._last_block[name] = (last, block[(last - first) * size :].copy())
            parts.append(block[max(lo - offset, 0) : hi - offset])
        return np.concatenate(parts) if len(parts) > 1 else parts[0].copy()

    def read(self, row_start: int, row_stop: int, n_features: int, nnz: int | None = None):
        """(X, labels) of rows [row_start, row_stop). nnz: the rows' non-zeros when the caller
        checks the result against a digest that covers them (the manifest's chunk SHA-256):
        the last row's end is then indptr[row_start] + nnz instead of indptr[row_stop], which
        lies in the next rows' Zarr chunk of X/indptr and cost decoding all of it for one number."""
        if nnz is None or row_stop == row_start:
            indptr = read_range(self.indptr, row_start, row_stop + 1)
            lo, hi = int(indptr[0]), int(indptr[-1])
            indptr -= lo
        else:
            starts = read_range(self.indptr, row_start, row_stop)
            lo, hi = int(starts[0]), int(starts[0]) + nnz
            indptr = np.empty(row_stop - row_start + 1, dtype=np.int64)
            np.subtract(starts, lo, out=indptr[:-1])
            indptr[-1] = nnz
        X = sp.csr_matrix(
            (self._nnz_range("data", lo, hi), self._nnz_range("indices", lo, hi), indptr),
            shape=(row_stop - row_start, n_features),
        )
        if self.regression:
            labels = np.asarray(self.targets[row_start:row_stop])
        elif self.multilabel:
            lp = read_range(self.y_indptr, row_start, row_stop + 1)
            ids = read_range(self.y_indices, int(lp[0]), int(lp[-1]))
            labels = sp.csr_matrix(
                (np.ones(len(ids), dtype=np.float32), ids, lp - lp[0]), shape=(row_stop - row_start, self.n_classes)
            )
        else:
            labels = read_range(self.y, row_start, row_stop)
        return X, labels
