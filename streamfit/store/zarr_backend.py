"""Zarr v3 backend: each row chunk its own Zarr group `chunks/<id:06d>/` (see format.py), written
apart from the others, so a Dask worker can write its chunks straight to the store."""

from __future__ import annotations

import json

import numpy as np
import scipy.sparse as sp
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from streamfit.storage import Location
from streamfit.store.format import CHUNKS_DIR, TARGET_DTYPE, DataMismatch, chunk_name, manifest_copy_difference

NNZ_CHUNK = 1 << 20  # elements per Zarr chunk along nnz (the CSC copy's arrays)
COMPRESSORS = [ZstdCodec(level=1), Crc32cCodec()]


def open_array(group: zarr.Group, path: str) -> zarr.Array:
    """The array at `path` (e.g. "indptr") in `group`; DataMismatch if the store has a group there."""
    node = group[path]
    if not isinstance(node, zarr.Array):
        raise DataMismatch(f"{path} is a Zarr group, expected an array")
    return node


def _put(group: zarr.Group, name: str, values: np.ndarray) -> None:
    """values as array `name` of `group`, one Zarr chunk (an empty array: no chunk at all)."""
    chunks = tuple(max(n, 1) for n in values.shape)
    array = group.create_array(name, shape=values.shape, chunks=chunks, dtype=values.dtype, compressors=COMPRESSORS)
    if values.size:
        array[...] = values


def write_chunk(root: Location, cid: int, X: sp.csr_matrix, labels) -> None:
    """Chunk `cid` of the store whose files are at `root` (its attempt), as the group
    chunks/<cid:06d>: X's CSR arrays (indptr int64 from 0, indices int32, data float32) and
    beside them `y` (int32 class ids), `Y/indptr` + `Y/indices` (multilabel) or `targets`
    (float64 rows × k). X and labels come canonical (store.canonical_chunk)."""
    group = zarr.create_group(root.join(CHUNKS_DIR, chunk_name(cid)).zarr_store(read_only=False), zarr_format=3)
    _put(group, "indptr", np.asarray(X.indptr, dtype=np.int64))  # scipy may hold int32 row pointers
    _put(group, "indices", np.asarray(X.indices, dtype=np.int32))
    _put(group, "data", np.asarray(X.data, dtype=np.float32))
    if sp.issparse(labels):
        Y = group.create_group("Y")
        _put(Y, "indptr", np.asarray(labels.indptr, dtype=np.int64))
        _put(Y, "indices", np.asarray(labels.indices, dtype=np.int32))
    elif labels.ndim == 2:
        _put(group, "targets", labels)
    else:
        _put(group, "y", labels)


def close(root: Location, manifest_json: str) -> None:
    """The root group (its attributes: a copy of the manifest) and the `chunks` group, written
    once every chunk is: the Zarr hierarchy is complete only then."""
    zarr.create_group(root.join(CHUNKS_DIR).zarr_store(read_only=False), zarr_format=3)
    copy = {"streamfit.manifest": json.loads(manifest_json)}
    zarr.create_group(root.zarr_store(read_only=False), zarr_format=3, attributes=copy)


class ZarrReader:
    """Reads row chunks of a Zarr v3 store. The arrays of a chunk are opened on its first read
    (their metadata is one small file each) and kept, so later passes read only the data."""

    def __init__(self, root: Location, multilabel: bool, n_classes: int, regression: bool = False):
        self.root = root
        group = zarr.open_group(root.zarr_store(read_only=True), mode="r", zarr_format=3)
        copy = group.attrs.get("streamfit.manifest")
        self.manifest_copy = copy if isinstance(copy, dict) else {}
        self.multilabel, self.regression = multilabel, regression
        self.n_classes = n_classes
        self._opened: dict[int, dict[str, zarr.Array]] = {}  # chunk id: its arrays

    def check(self, manifest) -> None:
        """DataMismatch when the manifest copy in the root attributes disagrees with `manifest`
        (each chunk's arrays are checked when it is read)."""
        differs = manifest_copy_difference(self.manifest_copy, manifest)
        if differs:
            raise DataMismatch(f"the manifest copy in the Zarr root attributes has another {differs}")

    def _chunk_arrays(self, cid: int) -> dict[str, zarr.Array]:
        arrays = self._opened.get(cid)
        if arrays is None:
            group = zarr.open_group(
                self.root.join(CHUNKS_DIR, chunk_name(cid)).zarr_store(read_only=True), mode="r", zarr_format=3
            )
            names = ["indptr", "indices", "data"]
            names += ["targets"] if self.regression else ["Y/indptr", "Y/indices"] if self.multilabel else ["y"]
            arrays = {name: open_array(group, name) for name in names}
            self._opened[cid] = arrays
        return arrays

    def read(self, cid: int, n_rows: int, nnz: int, n_features: int, n_outputs: int):
        """Chunk cid of n_rows rows and nnz non-zeros: (X, labels). DataMismatch naming the array
        whose dtype or length disagrees with the manifest."""
        arrays = self._chunk_arrays(cid)
        where = f"{CHUNKS_DIR}/{chunk_name(cid)}"
        expected: list[tuple[str, str, tuple[int, ...] | None]] = [
            ("indptr", "int64", (n_rows + 1,)),
            ("indices", "int32", (nnz,)),
            ("data", "float32", (nnz,)),
        ]
        if self.regression:
            expected.append(("targets", TARGET_DTYPE, (n_rows, n_outputs)))
        elif self.multilabel:
            expected += [("Y/indptr", "int64", (n_rows + 1,)), ("Y/indices", "int32", None)]
        else:
            expected.append(("y", "int32", (n_rows,)))
        for name, dtype, shape in expected:
            a = arrays[name]
            if (
                a.dtype != np.dtype(dtype)
                or (shape is not None and a.shape != shape)
                or (shape is None and a.ndim != 1)
            ):
                want = f"{' × '.join(map(str, shape))} × {dtype}" if shape is not None else dtype
                raise DataMismatch(f"{where}/{name} holds {a.shape} × {a.dtype}, expected {want}")
        indptr = np.asarray(arrays["indptr"][:])
        if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
            raise DataMismatch(f"{where}/indptr does not run from 0 to nnz={nnz} without decreasing")
        X = sp.csr_matrix(
            (np.asarray(arrays["data"][:]), np.asarray(arrays["indices"][:]), indptr), shape=(n_rows, n_features)
        )
        if self.regression:
            labels = np.asarray(arrays["targets"][:])
        elif self.multilabel:
            lp = np.asarray(arrays["Y/indptr"][:])
            ids = np.asarray(arrays["Y/indices"][:])
            if lp[0] != 0 or lp[-1] != len(ids) or np.any(np.diff(lp) < 0):
                raise DataMismatch(f"{where}/Y/indptr does not run from 0 to {len(ids)} without decreasing")
            labels = sp.csr_matrix((np.ones(len(ids), dtype=np.float32), ids, lp), shape=(n_rows, self.n_classes))
        else:
            labels = np.asarray(arrays["y"][:])
        return X, labels
