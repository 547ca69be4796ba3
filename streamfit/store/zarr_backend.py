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


def _write_group(location: Location, write) -> None:
    """Write a Zarr group at `location` with `write(zarr_store)`. Behind a URL the group is
    built in memory and then each of its objects (metadata and chunks) is put once, together
    (Location.write_files): Zarr writing through the filesystem asks first whether each node
    exists (per row chunk about 8 HEADs, 5 LISTs and 4 GETs besides its 9 PUTs). The objects
    are the same bytes either way."""
    from zarr.storage import LocalStore, MemoryStore

    if location.local:
        write(LocalStore(location.path))
        return

    objects: dict = {}
    write(MemoryStore(objects))
    location.write_files({key: buffer.to_bytes() for key, buffer in objects.items()})


def write_chunk(root: Location, cid: int, X: sp.csr_matrix, labels) -> None:
    """Chunk `cid` of the store whose files are at `root` (its attempt), as the group
    chunks/<cid:06d>: X's CSR arrays (indptr int64 from 0, indices int32, data float32) and
    beside them `y` (int32 class ids), `Y/indptr` + `Y/indices` (multilabel) or `targets`
    (float64 rows × k). X and labels come canonical (store.canonical_chunk)."""
    _write_group(root.join(CHUNKS_DIR, chunk_name(cid)), lambda store: _chunk_group(store, X, labels))


def _chunk_group(store, X: sp.csr_matrix, labels) -> None:
    group = zarr.create_group(store, zarr_format=3)
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
    _write_group(root.join(CHUNKS_DIR), lambda store: zarr.create_group(store, zarr_format=3))
    copy = {"streamfit.manifest": json.loads(manifest_json)}
    _write_group(root, lambda store: zarr.create_group(store, zarr_format=3, attributes=copy))


def _array_key(name: str, ndim: int) -> str:
    """The key of the one Zarr chunk of the array `name` of a row chunk's group (default chunk
    key encoding: c/0, c/0/0)."""
    return "/".join([name, "c"] + ["0"] * ndim)


def decode_chunk(raw: bytes, dtype: str, where: str) -> np.ndarray:
    """The values (1-D) of an array's one Zarr chunk as _put encodes them: the values' little-
    endian bytes (Zarr's bytes codec), zstd-compressed, then the CRC32C of the compressed bytes
    appended (4 bytes, little-endian): COMPRESSORS. ValueError naming `where` when the bytes
    fail their CRC32C or are no zstd frame (damage). The values are a writable array of their
    own."""
    import google_crc32c
    from numcodecs.zstd import Zstd

    body, stored = raw[:-4], raw[-4:]
    if len(raw) < 4 or google_crc32c.value(body) != int.from_bytes(stored, "little"):
        raise ValueError(f"{where} fails its CRC32C")
    try:
        values = Zstd().decode(body)
    except RuntimeError as e:
        raise ValueError(f"{where} is not a zstd frame ({e})") from e
    return np.frombuffer(values, dtype=np.dtype(dtype).newbyteorder("<")).astype(dtype)


class ZarrReader:
    """Reads row chunks of a Zarr v3 store. A chunk's arrays are read as their raw Zarr chunk
    objects, all of them in one concurrent fetch (Location.read_files; behind a URL one GET each), and
    decoded here (decode_chunk): their shapes and dtypes are the manifest's and format 3's, so
    their metadata files are not read; the root group's `zarr.json` (the manifest copy) is read
    once, as one file."""

    def __init__(self, root: Location, multilabel: bool, n_classes: int, regression: bool = False):
        self.root = root
        # the root group's metadata, read as one file (behind a URL one GET; Zarr would ask first
        # whether it exists): a Zarr v3 group whose attributes hold the manifest copy
        meta = json.loads(root.join("zarr.json").read_bytes())
        if not isinstance(meta, dict) or meta.get("zarr_format") != 3 or meta.get("node_type") != "group":
            raise ValueError("zarr.json does not describe a Zarr v3 group")
        attributes = meta.get("attributes")
        copy = attributes.get("streamfit.manifest") if isinstance(attributes, dict) else None
        self.manifest_copy = copy if isinstance(copy, dict) else {}
        self.multilabel, self.regression = multilabel, regression
        self.n_classes = n_classes

    def check(self, manifest) -> None:
        """DataMismatch when the manifest copy in the root attributes disagrees with `manifest`
        (each chunk's arrays are checked when it is read)."""
        differs = manifest_copy_difference(self.manifest_copy, manifest)
        if differs:
            raise DataMismatch(f"the manifest copy in the Zarr root attributes has another {differs}")

    def read(self, cid: int, n_rows: int, nnz: int, n_features: int, n_outputs: int):
        """Chunk cid of n_rows rows and nnz non-zeros: (X, labels). DataMismatch naming the array
        whose values fail their CRC32C, are missing, or whose length disagrees with the manifest."""
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
        group = self.root.join(CHUNKS_DIR, chunk_name(cid))
        fetched = group.read_files([_array_key(name, len(shape or (0,))) for name, _, shape in expected])
        arrays: dict[str, np.ndarray] = {}
        for (name, dtype, shape), raw in zip(expected, fetched):
            # Y/indices: as long as Y/indptr says (read before it), at most a label per row and class
            size = int(np.prod(shape)) if shape is not None else int(arrays["Y/indptr"][-1])
            if shape is None and not 0 <= size <= n_rows * max(self.n_classes, 1):
                raise DataMismatch(f"{where}/Y/indptr ends at {size}, beyond {n_rows} rows × {self.n_classes} classes")
            if isinstance(raw, FileNotFoundError):  # Zarr stores no chunk of fill values (0) only
                values = np.zeros(size, dtype=dtype)
            elif isinstance(raw, BaseException):
                raise raw
            else:
                values = decode_chunk(raw, dtype, f"{where}/{name}")
            if values.size != size:
                raise DataMismatch(f"{where}/{name} holds {values.size} {dtype} values, expected {size}")
            arrays[name] = values.reshape(shape) if shape is not None else values
        indptr = arrays["indptr"]
        if indptr[0] != 0 or indptr[-1] != nnz or np.any(np.diff(indptr) < 0):
            raise DataMismatch(f"{where}/indptr does not run from 0 to nnz={nnz} without decreasing")
        X = sp.csr_matrix((arrays["data"], arrays["indices"], indptr), shape=(n_rows, n_features))
        if self.regression:
            labels = arrays["targets"]
        elif self.multilabel:
            lp, ids = arrays["Y/indptr"], arrays["Y/indices"]
            if lp[0] != 0 or lp[-1] != len(ids) or np.any(np.diff(lp) < 0):
                raise DataMismatch(f"{where}/Y/indptr does not run from 0 to {len(ids)} without decreasing")
            labels = sp.csr_matrix((np.ones(len(ids), dtype=np.float32), ids, lp), shape=(n_rows, self.n_classes))
        else:
            labels = arrays["y"]
        return X, labels
