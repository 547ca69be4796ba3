"""Zarr v3 backend: each row chunk its own Zarr group `chunks/<id:06d>/` (see format.py), written
apart from the others, so a Dask worker can write its chunks straight to the store.

The files are written and read here, without zarr-python (whose import, about 0.2 CPU s, and
event-loop writes a small job would pay for every store): a group is one `zarr.json`, an array
its `zarr.json` and its one chunk object (`c/0`, `c/0/0` for 2-D), as the Zarr v3
specification lays them out and, byte for byte, as zarr-python writes them
(tests/store/test_zarr_backend.py compares the two); zarr-python reads the stores."""

from __future__ import annotations

import json
import os

import google_crc32c
import numpy as np
import scipy.sparse as sp
from numcodecs.zstd import Zstd

from streamfit.storage import Location
from streamfit.store.format import CHUNKS_DIR, TARGET_DTYPE, DataMismatch, chunk_name, manifest_copy_difference

ZSTD_LEVEL = 1  # every array: its little-endian bytes, zstd at this level (no frame checksum), then CRC32C
JSON_INDENT = 2  # zarr-python's default layout of zarr.json


def _metadata(document: dict) -> bytes:
    """A `zarr.json` as zarr-python lays it out (its `json_indent` default, NaN allowed)."""
    return json.dumps(document, indent=JSON_INDENT, allow_nan=True).encode()


def group_document(attributes: dict) -> dict:
    """The `zarr.json` document of a Zarr v3 group with these attributes."""
    return {"attributes": attributes, "zarr_format": 3, "node_type": "group"}


def group_metadata(attributes: dict) -> bytes:
    """The `zarr.json` of a Zarr v3 group with these attributes."""
    return _metadata(group_document(attributes))


def array_metadata(shape: tuple[int, ...], dtype: str) -> dict:
    """The `zarr.json` document of a Zarr v3 array of this shape and dtype as array_files writes
    it: one chunk the array's shape (a 0 in the shape: 1), codecs bytes (little-endian), zstd
    (ZSTD_LEVEL, no checksum), crc32c; fill value 0."""
    return {
        "shape": list(shape),
        "data_type": np.dtype(dtype).name,
        "chunk_grid": {"name": "regular", "configuration": {"chunk_shape": [max(n, 1) for n in shape]}},
        "chunk_key_encoding": {"name": "default", "configuration": {"separator": "/"}},
        "fill_value": 0.0 if np.dtype(dtype).kind == "f" else 0,
        "codecs": [
            {"name": "bytes", "configuration": {"endian": "little"}},
            {"name": "zstd", "configuration": {"level": ZSTD_LEVEL, "checksum": False}},
            {"name": "crc32c"},
        ],
        "attributes": {},
        "zarr_format": 3,
        "node_type": "array",
        "storage_transformers": [],
    }


def array_files(name: str, values: np.ndarray) -> dict[str, bytes]:
    """The files of `values` as the Zarr v3 array `name`: {"NAME/zarr.json": metadata
    (array_metadata), "NAME/c/0…": the chunk}. The chunk: the little-endian bytes, zstd, then
    the CRC32C of the compressed bytes (4 bytes little-endian) appended. As zarr-python does by
    default (`write_empty_chunks` false), a chunk whose bytes are all those of the fill value (an
    empty array, all zeros, -0.0 not among them) is not written: a reader takes a missing chunk
    as zeros."""
    values = np.ascontiguousarray(values)
    document = array_metadata(values.shape, values.dtype.name)
    files = {f"{name}/zarr.json": _metadata(document)}
    raw = values.astype(values.dtype.newbyteorder("<"), copy=False).tobytes()
    if np.frombuffer(raw, dtype=np.uint8).any():
        files[_array_key(name, values.ndim)] = encode_chunk(raw)
    return files


def encode_chunk(raw: bytes) -> bytes:
    """An array's chunk object from its little-endian bytes: zstd, then the CRC32C appended."""
    body = Zstd(level=ZSTD_LEVEL, checksum=False).encode(raw)
    return bytes(body) + google_crc32c.value(body).to_bytes(4, "little")


def _write_files(location: Location, files: dict[str, bytes]) -> None:
    """Write {path relative to `location`: bytes} inside an attempt: on local disk each a new
    file (storage.write_new_file, synced by the commit), its folders made first; behind a URL
    all of them together, one PUT each (Location.write_files: no HEAD, LIST or GET before)."""
    if not location.local:
        location.write_files(files)
        return
    for name, data in files.items():
        target = location.join(*name.split("/"))
        os.makedirs(os.path.dirname(target.path), exist_ok=True)
        target.write_new(data)


def write_chunk(root: Location, cid: int, X: sp.csr_matrix, labels) -> None:
    """Chunk `cid` of the store whose files are at `root` (its attempt), as the group
    chunks/<cid:06d>: X's CSR arrays (indptr int64 from 0, indices int32, data float32) and
    beside them `y` (int32 class ids), `Y/indptr` + `Y/indices` (multilabel) or `targets`
    (float64 rows × k). X and labels come canonical (store.canonical_chunk)."""
    files = {"zarr.json": group_metadata({})}
    files |= array_files("indptr", np.asarray(X.indptr, dtype=np.int64))  # scipy may hold int32 row pointers
    files |= array_files("indices", np.asarray(X.indices, dtype=np.int32))
    files |= array_files("data", np.asarray(X.data, dtype=np.float32))
    if sp.issparse(labels):
        files["Y/zarr.json"] = group_metadata({})
        files |= array_files("Y/indptr", np.asarray(labels.indptr, dtype=np.int64))
        files |= array_files("Y/indices", np.asarray(labels.indices, dtype=np.int32))
    elif labels.ndim == 2:
        files |= array_files("targets", labels)
    else:
        files |= array_files("y", labels)
    _write_files(root.join(CHUNKS_DIR, chunk_name(cid)), files)


def close(root: Location, manifest_json: str) -> None:
    """The root group (its attributes: a copy of the manifest) and the `chunks` group, written
    once every chunk is: the Zarr hierarchy is complete only then."""
    copy = {"streamfit.manifest": json.loads(manifest_json)}
    _write_files(root, {f"{CHUNKS_DIR}/zarr.json": group_metadata({}), "zarr.json": group_metadata(copy)})


def _array_key(name: str, ndim: int) -> str:
    """The key of the one Zarr chunk of the array `name` of a row chunk's group (default chunk
    key encoding: c/0, c/0/0)."""
    return "/".join([name, "c"] + ["0"] * ndim)


def metadata_problem(
    where: str, raw: bytes | BaseException, expected: dict, ignore: tuple[str, ...] = ()
) -> str | None:
    """What is wrong with the Zarr metadata file `where` (its bytes, or the exception reading it
    raised) against the document the writer writes (`expected`, keys in `ignore` left out), in
    one line; None when it says the same (its JSON layout may differ)."""
    if isinstance(raw, FileNotFoundError):
        return f"{where} is missing"
    if isinstance(raw, BaseException):
        return f"{where} cannot be read ({' '.join(str(raw).split())})"
    try:
        got = json.loads(raw)
    except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
        return f"{where} is not JSON, cut short or overwritten ({e})"
    if not isinstance(got, dict):
        return f"{where} holds a JSON {type(got).__name__}, not a Zarr metadata object"
    differences = []
    for key in [k for k in expected if k not in ignore] + sorted(set(got) - set(expected) - set(ignore)):
        if key not in got:
            differences.append(f"lacks {key!r}")
        elif key not in expected:
            differences.append(f"has the unknown key {key!r}")
        elif got[key] != expected[key]:
            differences.append(f"says {key} {_short(got[key])} where the data is {_short(expected[key])}")
    return f"{where} {'; '.join(differences)}" if differences else None


def _short(value, limit: int = 80) -> str:
    """`value` as JSON in at most `limit` characters."""
    text = json.dumps(value, allow_nan=True)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def decode_chunk(raw: bytes, dtype: str, where: str) -> np.ndarray:
    """The values (1-D) of an array's one Zarr chunk as _put encodes them: the values' little-
    endian bytes (Zarr's bytes codec), zstd-compressed, then the CRC32C of the compressed bytes
    appended (4 bytes, little-endian): array_files' codecs. ValueError naming `where` when the bytes
    fail their CRC32C or are no zstd frame (damage). The values are a writable array of their
    own."""
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
        try:
            meta = json.loads(root.join("zarr.json").read_bytes())
        except ValueError as e:  # JSONDecodeError and UnicodeDecodeError
            raise ValueError(f"zarr.json is not JSON, cut short or overwritten ({e})") from None
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

    def _arrays(self, n_rows: int, nnz: int, n_outputs: int) -> list[tuple[str, str, tuple[int, ...] | None]]:
        """(name, dtype, shape) of the arrays of a row chunk's group, as write_chunk writes them;
        the shape None for Y/indices, whose length only Y/indptr tells."""
        arrays: list[tuple[str, str, tuple[int, ...] | None]] = [
            ("indptr", "int64", (n_rows + 1,)),
            ("indices", "int32", (nnz,)),
            ("data", "float32", (nnz,)),
        ]
        if self.regression:
            arrays.append(("targets", TARGET_DTYPE, (n_rows, n_outputs)))
        elif self.multilabel:
            arrays += [("Y/indptr", "int64", (n_rows + 1,)), ("Y/indices", "int32", None)]
        else:
            arrays.append(("y", "int32", (n_rows,)))
        return arrays

    def root_metadata_problems(self) -> list[str]:
        """The Zarr metadata of the root group and of `chunks/` (a group each) checked against
        what the writer writes (close): one line per file that is missing, not JSON, or says
        something else. The root's attributes (the manifest copy) are `check`'s."""
        fetched = self.root.read_files(["zarr.json", f"{CHUNKS_DIR}/zarr.json"])
        root = metadata_problem("zarr.json", fetched[0], group_document({}), ignore=("attributes",))
        chunks = metadata_problem(f"{CHUNKS_DIR}/zarr.json", fetched[1], group_document({}))
        return [p for p in (root, chunks) if p]

    def metadata_problems(self, chunks: list[tuple[int, int, int, int, int | None]]) -> list[str]:
        """The Zarr metadata (`zarr.json`) of each row chunk's group and arrays, checked against
        what write_chunk writes for a chunk of its size; chunks: (id, rows, non-zeros, outputs,
        n_labels) from the manifest, n_labels being Y/indices' length read from the chunk (None
        when unknown: its shape is then not checked). One line per file that is missing, not JSON,
        or says another shape, data type, codec, … . The files of all the chunks are fetched
        together (behind a URL concurrently, one GET each). streamfit's reader does not read these
        files (read() takes the shapes and dtypes from the manifest); zarr-python does."""
        expected: dict[str, dict] = {}
        loose: dict[str, tuple[str, ...]] = {}
        for cid, n_rows, nnz, n_outputs, n_labels in chunks:
            where = f"{CHUNKS_DIR}/{chunk_name(cid)}"
            expected[f"{where}/zarr.json"] = group_document({})
            if self.multilabel:
                expected[f"{where}/Y/zarr.json"] = group_document({})
            for name, dtype, shape in self._arrays(n_rows, nnz, n_outputs):
                key = f"{where}/{name}/zarr.json"
                if shape is None and n_labels is None:
                    loose[key] = ("shape", "chunk_grid")
                expected[key] = array_metadata(shape if shape is not None else (n_labels or 0,), dtype)
        fetched = self.root.read_files(list(expected))
        found = (metadata_problem(key, raw, expected[key], loose.get(key, ())) for key, raw in zip(expected, fetched))
        return [p for p in found if p]

    def read(self, cid: int, n_rows: int, nnz: int, n_features: int, n_outputs: int):
        """Chunk cid of n_rows rows and nnz non-zeros: (X, labels). DataMismatch naming the array
        whose values fail their CRC32C, are missing, or whose length disagrees with the manifest."""
        where = f"{CHUNKS_DIR}/{chunk_name(cid)}"
        expected = self._arrays(n_rows, nnz, n_outputs)
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
