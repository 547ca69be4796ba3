"""The on-disk store format, version 4: a directory holding `manifest.json` and the data.

A store is a sparse matrix X (n_rows × n_features, CSR, float32 values, int32 column
indices, int64 row pointers) with one label set per row, cut into row chunks of
`chunk_rows` rows (the last may be shorter). Chunk i holds rows
[i * chunk_rows, min((i + 1) * chunk_rows, n_rows)). Per-sample solver state is chunked
the same way, so a task that reads data chunk i also reads and writes state chunk i.

Every chunk is stored apart from the others, under `chunks/` (named by `chunk_name`), so it is
written whole by one writer: the driver in process, or the Dask worker that featurized its rows
(distributed ingest). Backends:
- zarr (Zarr v3): group `chunks/<id:06d>` per chunk, its rows as CSR arrays (`indptr` from 0,
  `indices`, `data`) and beside them `y` (int32 class ids, multiclass), `Y/indptr` + `Y/indices`
  (class ids per row, multilabel) or `targets` (float64, rows × k, regression), each array one
  Zarr chunk (zarr_backend.array_files: zstd, then CRC32C), so damage is caught on read too.
  The backend writes and reads these files itself (byte for byte what zarr-python writes;
  zarr-python reads them). The root group's attributes hold a manifest copy.
- parquet: the Parquet dataset directory `chunks/`: `part-<id:06d>.parquet` per chunk (one row
  group), columns `indices: list<int32>`, `values: list<float32>` and `label: int32`,
  `labels: list<int32>` or `target: fixed_size_list<float64>[k]`; `chunks/_common_metadata`
  holds the schema and a manifest copy under `streamfit.manifest`.

Targets: `task` "multiclass"/"multilabel" stores class ids into `classes` and `target` is null;
task "regression" stores real-valued targets, `classes` names the k outputs and `target` is
{"kind": "numeric", "dtype": "float64", "shape": [n_rows, k]}.

`manifest.json` is written last, then the store is committed (streamfit.storage: an atomic
rename of the whole directory, or `COMMITTED` behind a URL): a directory without it is not a
store. Each chunk records the SHA-256 of its canonical bytes
(`chunk_digest`), identical for both backends. The manifest records the SHA-256 of its own
canonical form (`manifest_sha256`, see `json_digest`); readers check it, then every field
(`Manifest.from_dict`), before trusting any of them. Versions 1 (no such digest) and 2 (the
arrays cut along nnz across chunks, one Parquet file) are refused: re-ingest.

Version 4 adds `class_rows` to the manifest: for task "multiclass" the training rows of each
class (n_classes counts summing to n_rows, 0 for a declared class no row holds), counted by the
writer from the class ids it writes (StoreWriter), so a reader has them without a pass over the
chunks (solvers.base.class_rows); null for the other tasks. Its chunks are version 3's, byte for
byte (the same `chunk_digest`). Version 3 stores (no such field) are still read, their counts
then counted from the chunks; a manifest that a version-3 store rewrites (transpose) stays
version 3.

Optional column copy (both backends, see csc.py): Zarr v3 group `csc/` holding X cut into
feature blocks of `block_features` columns, block b = X[:, b·bf : min((b+1)·bf, n_features)]
over all rows as `csc/block-<b:06d>/{indptr (int64), indices (int32, or int64 when
n_rows >= 2**31), data (float32)}`. The manifest's `csc` entry lists the blocks (id, column
range, nnz, SHA-256 of `csc_block_digest`); stores without one have no column copy.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp

from streamfit.errors import StoreError

# Column indices are stored as int32: columns 0 .. 2**31 - 2, so that the width n_features fits as well.
MAX_FEATURES = 2**31 - 1
# Values are stored as float32: the largest magnitude a store holds (ingest refuses larger ones)
FLOAT32_MAX = float(np.finfo(np.float32).max)
FORMAT_NAME = "streamfit-store"
FORMAT_VERSION = 4  # what this streamfit writes
READ_VERSIONS = (3, 4)  # what it reads: 3 is 4 without `class_rows`
MANIFEST = "manifest.json"
CHUNKS_DIR = "chunks"  # the row chunks, each stored apart
DEFAULT_CHUNK_ROWS = 16384
BACKENDS = ("zarr", "parquet")
TASKS = ("multiclass", "multilabel", "regression")
TARGET_DTYPE = "float64"  # regression targets, in memory and on disk
DIGEST_KEY = "manifest_sha256"
REINGEST = "re-ingest the store"


class DataMismatch(ValueError):
    """The stored data disagrees with the manifest (an array's dtype or length, a file's schema
    or rows, the manifest copy kept with the data)."""


def chunk_name(cid: int) -> str:
    """The name of chunk `cid` under CHUNKS_DIR (six digits or more, so names sort as ids)."""
    return f"{cid:06d}"


def json_digest(record: dict, digest_key: str) -> str:
    """SHA-256 of a JSON record's canonical form: sorted-key compact JSON of every key but
    `digest_key` (the key the digest itself is stored under)."""
    body = {k: v for k, v in record.items() if k != digest_key}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def is_sha256(value) -> bool:
    """Whether `value` is a SHA-256 hex digest (64 lower-case hex digits)."""
    return isinstance(value, str) and len(value) == 64 and all(c in "0123456789abcdef" for c in value)


def is_count(value) -> bool:
    """Whether `value` is a JSON integer >= 0 (not a bool, not a float)."""
    return type(value) is int and value >= 0


@dataclass
class ChunkInfo:
    id: int
    row_start: int
    row_stop: int
    nnz: int
    sha256: str


@dataclass
class Manifest:
    backend: str
    n_rows: int
    n_features: int
    nnz: int
    task: str  # "multiclass" | "multilabel" | "regression"
    classes: list[str]  # class names, or the names of the k outputs (regression)
    chunk_rows: int
    chunks: list[ChunkInfo]
    hashing: dict | None = None  # HashingConfig.to_dict(), or None for unhashed indices
    transform: dict = field(default_factory=dict)  # {"idf": bool, "l2_normalize": bool}
    source: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)  # records read / written / skipped
    csc: dict | None = None  # {"block_features", "blocks": [{id, col_start, col_stop, nnz, sha256}]}
    target: dict | None = None  # regression: {"kind": "numeric", "dtype": "float64", "shape": [n_rows, k]}
    # multiclass: the rows of each class (len(classes) counts, summing to n_rows); else None.
    # Absent from a version-3 manifest (None here: the counts are not recorded)
    class_rows: list[int] | None = None
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    streamfit_version: str = ""

    def to_json(self) -> str:
        """The manifest as JSON, with `manifest_sha256` over the rest (see json_digest); a
        version-3 manifest (read, then rewritten by transpose) without `class_rows`."""
        record = asdict(self)
        if self.format_version == 3:
            del record["class_rows"]
        record[DIGEST_KEY] = json_digest(record, DIGEST_KEY)
        return json.dumps(record, indent=1)

    @classmethod
    def from_dict(cls, d, where: str) -> Manifest:
        """The manifest read from `where`, after checking, in order: format and version, its
        digest, then every field for type and range and every cross-field rule (chunk i holds
        rows [i·chunk_rows, min((i+1)·chunk_rows, n_rows)), nnz is the sum of the chunks',
        the CSC blocks tile [0, n_features), class_rows counts every row once). StoreError
        naming the field otherwise."""
        if not isinstance(d, dict) or d.get("format") != FORMAT_NAME:
            got = d.get("format") if isinstance(d, dict) else type(d).__name__
            raise StoreError(f"{where}: not a streamfit store manifest (format={got!r})")
        if d.get("format_version") not in READ_VERSIONS:
            raise StoreError(
                f"{where}: store format version {d.get('format_version')} is not supported by this "
                f"streamfit (reads versions {READ_VERSIONS[0]} to {READ_VERSIONS[-1]}); re-ingest the data with this "
                "version"
            )
        if not is_sha256(d.get(DIGEST_KEY)):
            raise StoreError(f"{where}: has no {DIGEST_KEY}; the manifest is damaged, {REINGEST}")
        if d[DIGEST_KEY] != json_digest(d, DIGEST_KEY):
            raise StoreError(f"{where}: fails its checksum ({DIGEST_KEY}); it was edited or damaged, {REINGEST}")
        body = {k: v for k, v in d.items() if k != DIGEST_KEY}
        _check_fields(body, where)
        body["chunks"] = [ChunkInfo(**c) for c in body["chunks"]]
        return cls(**body)

    @property
    def fingerprint(self) -> str:
        """SHA-256 over the chunk digests and shape: identifies the data a run was trained on."""
        h = hashlib.sha256(f"{self.n_rows},{self.n_features},{self.task},{self.classes}".encode())
        for c in self.chunks:
            h.update(c.sha256.encode())
        return h.hexdigest()


_FIELD_RULES = {  # field: (check, what it must be)
    "backend": (lambda v: v in BACKENDS, f"one of {', '.join(BACKENDS)}"),
    "n_rows": (is_count, "an integer >= 0"),
    "n_features": (lambda v: is_count(v) and v <= MAX_FEATURES, f"an integer in [0, {MAX_FEATURES}]"),
    "nnz": (is_count, "an integer >= 0"),
    "task": (lambda v: v in TASKS, f"one of {', '.join(TASKS)}"),
    "classes": (
        lambda v: isinstance(v, list) and all(isinstance(c, str) for c in v) and len(set(v)) == len(v),
        "a list of distinct strings",
    ),
    "chunk_rows": (lambda v: is_count(v) and v >= 1, "an integer >= 1"),
    "chunks": (lambda v: isinstance(v, list) and all(isinstance(c, dict) for c in v), "a list of objects"),
    "hashing": (lambda v: v is None or isinstance(v, dict), "null or an object"),
    "transform": (lambda v: isinstance(v, dict), "an object"),
    "source": (lambda v: isinstance(v, dict), "an object"),
    "counts": (lambda v: isinstance(v, dict), "an object"),
    "csc": (lambda v: v is None or (isinstance(v, dict) and isinstance(v.get("blocks"), list)), "null or an object"),
    "target": (lambda v: v is None or isinstance(v, dict), "null or an object"),
    "format": (lambda v: v == FORMAT_NAME, repr(FORMAT_NAME)),
    "class_rows": (lambda v: v is None or (isinstance(v, list) and all(is_count(c) for c in v)), "null or counts"),
    "format_version": (lambda v: v in READ_VERSIONS, " or ".join(map(str, READ_VERSIONS))),
    "streamfit_version": (lambda v: isinstance(v, str), "a string"),
}
_CHUNK_KEYS = ("id", "row_start", "row_stop", "nnz", "sha256")
_BLOCK_KEYS = ("id", "col_start", "col_stop", "nnz", "sha256")


def _check_fields(d: dict, where: str) -> None:
    """StoreError naming the first field of manifest `d` that is missing, unknown, of the wrong
    type or out of range, or that contradicts another field (see Manifest.from_dict)."""

    def damaged(field: str, problem: str) -> StoreError:
        return StoreError(f"{where}: {field} {problem}; {REINGEST}")

    rules = {k: v for k, v in _FIELD_RULES.items() if k != "class_rows" or d.get("format_version") != 3}
    for key in d:
        if key not in rules:
            raise damaged(key, "is not a manifest field")
    for key, (ok, what) in rules.items():
        if key not in d:
            raise damaged(key, "is missing")
        if not ok(d[key]):
            raise damaged(key, f"is {d[key]!r:.80}, expected {what}")
    n_rows, chunk_rows, n_features = d["n_rows"], d["chunk_rows"], d["n_features"]
    _check_tiling(d["chunks"], "chunks", _CHUNK_KEYS, ("row_start", "row_stop"), chunk_rows, n_rows, damaged)
    if sum(c["nnz"] for c in d["chunks"]) != d["nnz"]:
        raise damaged("nnz", f"is {d['nnz']}, but the chunks hold {sum(c['nnz'] for c in d['chunks'])}")
    if d["task"] == "regression":
        want = numeric_target(n_rows, len(d["classes"]))
        if d["target"] != want:
            raise damaged("target", f"is {d['target']!r:.80}, expected {want} for task regression")
    elif d["target"] is not None:
        raise damaged("target", f"is {d['target']!r:.80}, expected null for task {d['task']}")
    if "class_rows" in rules:
        _check_class_rows(d["class_rows"], d["task"], len(d["classes"]), n_rows, damaged)
    if d["transform"].get("idf") and not is_sha256(d["transform"].get("idf_sha256")):
        raise damaged("transform.idf_sha256", "is missing or not a SHA-256 digest")
    if d["hashing"] is not None:
        from streamfit.ingest.hashing import HashingConfig  # the ingest package imports this module

        try:
            hashing = HashingConfig.from_dict(d["hashing"])
        except (TypeError, ValueError) as e:
            raise damaged("hashing", f"is not a hashing configuration ({e})") from e
        if hashing.n_features != n_features:
            raise damaged("n_features", f"is {n_features}, but hashing.n_features is {hashing.n_features}")
    if d["csc"] is not None:
        bf = d["csc"].get("block_features")
        if not (is_count(bf) and bf >= 1):
            raise damaged("csc.block_features", f"is {bf!r}, expected an integer >= 1")
        blocks = d["csc"]["blocks"]
        _check_tiling(blocks, "csc.blocks", _BLOCK_KEYS, ("col_start", "col_stop"), bf, n_features, damaged)
        if sum(b["nnz"] for b in blocks) != d["nnz"]:
            raise damaged("csc.blocks", f"hold {sum(b['nnz'] for b in blocks)} non-zeros, but nnz is {d['nnz']}")


def _check_class_rows(counts: list | None, task: str, n_classes: int, n_rows: int, damaged) -> None:
    """A version-4 manifest's class_rows: n_classes counts summing to n_rows for a multiclass
    store, null for any other."""
    if task != "multiclass":
        if counts is not None:
            raise damaged("class_rows", f"is {counts!r:.80}, expected null for task {task}")
        return
    if counts is None or len(counts) != n_classes:
        got = "null" if counts is None else f"{len(counts)} counts"
        raise damaged("class_rows", f"is {got}, expected one count per class ({n_classes})")
    if sum(counts) != n_rows:
        raise damaged("class_rows", f"count {sum(counts)} rows in all, but n_rows is {n_rows}")


def numeric_target(n_rows: int, n_outputs: int) -> dict:
    """The manifest's `target` entry of a regression store: n_rows × n_outputs float64 targets."""
    return {"kind": "numeric", "dtype": TARGET_DTYPE, "shape": [n_rows, n_outputs]}


def manifest_copy_difference(copy: dict, manifest: Manifest) -> str | None:
    """The first field (other than `csc`, added later by transpose, and the digest) in which the
    manifest copy kept with the data (Zarr root attribute or Parquet key-value metadata
    `streamfit.manifest`) differs from `manifest`, or None when they agree."""
    ours = json.loads(manifest.to_json())
    for key in ours:
        if key not in ("csc", DIGEST_KEY) and copy.get(key) != ours[key]:
            return key
    return None


def _check_tiling(entries: list, name: str, keys: tuple, bounds: tuple[str, str], step: int, total: int, damaged):
    """Entries i = 0, 1, … with exactly `keys`, covering [i·step, min((i+1)·step, total)) each
    (contiguous, in order, no gap, no duplicate), all of [0, total) together."""
    expected = -(-total // step)
    for i, entry in enumerate(entries):
        if set(entry) != set(keys):
            raise damaged(f"{name}[{i}]", f"has keys {sorted(entry)}, expected {list(keys)}")
        bad = [k for k in keys[:4] if not is_count(entry[k])]
        if bad:
            raise damaged(f"{name}[{i}].{bad[0]}", f"is {entry[bad[0]]!r}, expected an integer >= 0")
        if not is_sha256(entry["sha256"]):
            raise damaged(f"{name}[{i}].sha256", "is not a SHA-256 digest")
        lo, hi = i * step, min((i + 1) * step, total)
        got = (entry["id"], entry[bounds[0]], entry[bounds[1]])
        if got != (i, lo, hi):
            raise damaged(
                f"{name}[{i}]",
                f"is id {got[0]}, {bounds[0]} {got[1]}, {bounds[1]} {got[2]}; expected id {i}, {lo}-{hi} "
                f"(entries in order, of {step} each, covering 0-{total})",
            )
    if len(entries) != expected:
        raise damaged(name, f"has {len(entries)} entries, {expected} expected to cover 0-{total} in steps of {step}")


def _hash(h, array: np.ndarray, dtype) -> None:
    """h.update with `array`'s bytes as `dtype`, C order, through the buffer protocol: no bytes
    copy, and no copy at all when the array already has that dtype and is contiguous."""
    h.update(np.ascontiguousarray(array, dtype=dtype))  # type: ignore[arg-type]  # an ndarray is a buffer; numpy's stub says so from Python 3.12 on


def chunk_digest(X: sp.csr_matrix, labels) -> str:
    """SHA-256 of a chunk's canonical bytes: indptr relative to the chunk (int64), indices
    (int32), values (float32), then the labels (int32 ids, indptr+ids for multilabel, or the
    float64 targets row by row for regression)."""
    h = hashlib.sha256()
    indptr = np.asarray(X.indptr, dtype=np.int64)
    _hash(h, indptr - indptr[0], np.int64)
    _hash(h, X.indices, np.int32)
    _hash(h, X.data, np.float32)
    if sp.issparse(labels):
        lp = np.asarray(labels.indptr, dtype=np.int64)
        _hash(h, lp - lp[0], np.int64)
        _hash(h, labels.indices, np.int32)
    elif np.asarray(labels).dtype.kind == "f":
        _hash(h, labels, np.float64)
    else:
        _hash(h, labels, np.int32)
    return h.hexdigest()


def csc_block_digest(X: sp.csc_matrix, piece: int = 1 << 20) -> str:
    """SHA-256 of a feature block's canonical bytes: indptr (int64), row indices (int64),
    values (float32), whatever integer width the indices are stored with. Hashed in pieces of
    `piece` entries, so no full-size copy is made."""
    h = hashlib.sha256()
    for arr, dtype in ((X.indptr, np.int64), (X.indices, np.int64), (X.data, np.float32)):
        for lo in range(0, len(arr), piece):
            h.update(np.ascontiguousarray(arr[lo : lo + piece], dtype=dtype))  # type: ignore[arg-type]  # an ndarray is a buffer; numpy's stub says so from Python 3.12 on
    return h.hexdigest()
