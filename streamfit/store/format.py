"""The on-disk store format, version 1: a directory holding `manifest.json` and the data.

A store is a sparse matrix X (n_rows × n_features, CSR, float32 values, int32 column
indices, int64 row pointers) with one label set per row, cut into row chunks of
`chunk_rows` rows (the last may be shorter). Chunk i holds rows
[i * chunk_rows, min((i + 1) * chunk_rows, n_rows)). Per-sample solver state is chunked
the same way, so a task that reads data chunk i also reads and writes state chunk i.

Backends:
- zarr (Zarr v3): group `X` in the anndata `csr_matrix` encoding (`X/indptr`, `X/indices`,
  `X/data`, chunked along nnz), labels `y` (int32 class ids, multiclass) or
  `Y/indptr` + `Y/indices` (class ids per row, multilabel). Every Zarr chunk carries a
  CRC32C codec, so damage is caught by Zarr on read too.
- parquet: `X.parquet`, one row group per row chunk, columns `indices: list<int32>`,
  `values: list<float32>` and `label: int32` or `labels: list<int32>`; the manifest is also
  in the file's key-value metadata under `streamfit.manifest`.

`manifest.json` is written last, by an atomic rename of the whole store directory: a
directory without it is not a store. Each chunk records the SHA-256 of its canonical bytes
(`chunk_digest`), identical for both backends.

Optional column copy (both backends, see csc.py): Zarr v3 group `csc/` holding X cut into
feature blocks of `block_features` columns, block b = X[:, b·bf : min((b+1)·bf, n_features)]
over all rows as `csc/block-<b:06d>/{indptr (int64), indices (int32, or int64 when
n_rows >= 2**31), data (float32)}`. The manifest's `csc` entry lists the blocks (id, column
range, nnz, SHA-256 of `csc_block_digest`); stores without one have no column copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import threading
from dataclasses import asdict, dataclass, field

import numpy as np
import scipy.sparse as sp

from streamfit.errors import StoreError, output_error

# Column indices are stored as int32: columns 0 .. 2**31 - 2, so that the width n_features fits as well.
MAX_FEATURES = 2**31 - 1
FORMAT_NAME = "streamfit-store"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
DEFAULT_CHUNK_ROWS = 16384


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
    task: str  # "multiclass" | "multilabel"
    classes: list[str]
    chunk_rows: int
    chunks: list[ChunkInfo]
    hashing: dict | None = None  # HashingConfig.to_dict(), or None for unhashed indices
    transform: dict = field(default_factory=dict)  # {"idf": bool, "l2_normalize": bool}
    source: dict = field(default_factory=dict)
    counts: dict = field(default_factory=dict)  # records read / written / skipped
    csc: dict | None = None  # {"block_features", "blocks": [{id, col_start, col_stop, nnz, sha256}]}
    format: str = FORMAT_NAME
    format_version: int = FORMAT_VERSION
    streamfit_version: str = ""

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, d: dict, where: str) -> Manifest:
        if d.get("format") != FORMAT_NAME:
            raise StoreError(f"{where}: not a streamfit store manifest (format={d.get('format')!r})")
        if d.get("format_version") != FORMAT_VERSION:
            raise StoreError(
                f"{where}: store format version {d.get('format_version')} is not supported by this "
                f"streamfit (reads version {FORMAT_VERSION}); re-ingest the data with this version"
            )
        try:
            d = dict(d)
            d["chunks"] = [ChunkInfo(**c) for c in d["chunks"]]
            return cls(**d)
        except (KeyError, TypeError) as e:
            raise StoreError(f"{where}: malformed manifest ({e})") from e

    @property
    def fingerprint(self) -> str:
        """SHA-256 over the chunk digests and shape: identifies the data a run was trained on."""
        h = hashlib.sha256(f"{self.n_rows},{self.n_features},{self.task},{self.classes}".encode())
        for c in self.chunks:
            h.update(c.sha256.encode())
        return h.hexdigest()


def chunk_digest(X: sp.csr_matrix, labels) -> str:
    """SHA-256 of a chunk's canonical bytes: indptr relative to the chunk (int64), indices
    (int32), values (float32), then the labels (int32 ids, or indptr+ids for multilabel)."""
    h = hashlib.sha256()
    indptr = np.asarray(X.indptr, dtype=np.int64)
    h.update((indptr - indptr[0]).tobytes())
    h.update(np.ascontiguousarray(X.indices, dtype=np.int32).tobytes())
    h.update(np.ascontiguousarray(X.data, dtype=np.float32).tobytes())
    if sp.issparse(labels):
        lp = np.asarray(labels.indptr, dtype=np.int64)
        h.update((lp - lp[0]).tobytes())
        h.update(np.ascontiguousarray(labels.indices, dtype=np.int32).tobytes())
    else:
        h.update(np.ascontiguousarray(labels, dtype=np.int32).tobytes())
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


def write_bytes(path: str, data: bytes) -> None:
    """Write `data` to a new file at `path` and fsync it (checkpoints, models, manifests)."""
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def write_atomic(path: str, data: bytes, *, sync_dir: bool = True) -> None:
    """Write a file atomically: temporary name, fsync, rename (then fsync the directory).
    On failure (disk full, read-only) the temporary file is removed and OutputError names `path`."""
    tmp = f"{path}.tmp-{os.getpid()}-{threading.get_ident()}"
    try:
        write_bytes(tmp, data)
        os.replace(tmp, path)
        if sync_dir:
            fsync_dir(os.path.dirname(os.path.abspath(path)))
    except OSError as e:
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise output_error(path, e) from e


def write_json_atomic(path: str, text: str) -> None:
    """Write a small text file atomically (see write_atomic)."""
    write_atomic(path, text.encode())


def publish_dir(tmp: str, path: str) -> None:
    """Rename the finished directory `tmp` to `path` (an existing `path` is moved to `path.old`
    first and then deleted), syncing both directories, so `path` is always either the old or
    the complete new directory."""
    fsync_dir(tmp)
    old = path + ".old"
    if os.path.exists(path):
        shutil.rmtree(old, ignore_errors=True)
        os.replace(path, old)
    os.replace(tmp, path)
    shutil.rmtree(old, ignore_errors=True)
    fsync_dir(os.path.dirname(path))


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
