"""A feature-blocked CSC copy of a store's X, built out of core (`streamfit transpose`).

Block b holds the columns [b·bf, min((b+1)·bf, n_features)) of X over all n_rows rows, as CSC:
indptr (int64, width + 1), row indices (int32, or int64 when n_rows >= 2**31) increasing
within each column, values (float32). It lives in the Zarr v3 group `STORE/csc/` as
`block-<b:06d>/{indptr,indices,data}` and is listed in the manifest's `csc` entry
(see format.py); solvers that walk features read it with `Store.read_feature_block(b)`.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import scipy.sparse as sp
import zarr
from zarr.codecs import Crc32cCodec, ZstdCodec

from streamfit import shutdown
from streamfit._jit import kernel
from streamfit.errors import StoreError, output_error
from streamfit.runlog import counted
from streamfit.storage import fsync_path, is_url, resolve
from streamfit.store.format import MANIFEST, DataMismatch, csc_block_digest
from streamfit.store.zarr_backend import ZSTD_LEVEL, group_document, metadata_problem

CSC_DIR = "csc"
NNZ_CHUNK = 1 << 20  # elements per Zarr chunk along nnz of a block's arrays
COMPRESSORS = [ZstdCodec(level=ZSTD_LEVEL), Crc32cCodec()]  # the row chunks' codecs (zarr_backend.array_files)
SPILL_DTYPE = np.dtype([("row", np.int64), ("col", np.int32), ("val", np.float32)])  # col: within the block


def block_name(b: int) -> str:
    return f"block-{b:06d}"


def open_array(group: zarr.Group, path: str) -> zarr.Array:
    """The array at `path` (e.g. "block-000000/indptr") in `group`; DataMismatch when the store
    has a group there."""
    node = group[path]
    if not isinstance(node, zarr.Array):
        raise DataMismatch(f"{path} is a Zarr group, expected an array")
    return node


@kernel(nogil=True)
def _split_by_block(indptr, indices, data, row_start, bf, n_blocks, out_row, out_col, out_val):
    """Scatter a CSR chunk's entries to (global row, column − b·bf, value) grouped by feature
    block b = column // bf (a stable counting sort: row-major order within each block).
    Returns starts: block b's entries are [starts[b], starts[b+1])."""
    starts = np.zeros(n_blocks + 1, dtype=np.int64)
    for k in range(indices.shape[0]):
        starts[indices[k] // bf + 1] += 1
    for b in range(n_blocks):
        starts[b + 1] += starts[b]
    pos = starts[:-1].copy()
    for r in range(indptr.shape[0] - 1):
        for k in range(indptr[r], indptr[r + 1]):
            b = indices[k] // bf
            p = pos[b]
            out_row[p] = row_start + r
            out_col[p] = indices[k] - b * bf
            out_val[p] = data[k]
            pos[b] += 1
    return starts


@kernel(nogil=True)
def _sort_by_column(cols, rows, vals, width, out_rows, out_vals):
    """Stable counting sort of a block's entries by column: out_rows/out_vals in column-major
    order (rows stay increasing within a column when the input is row-major). Returns indptr."""
    indptr = np.zeros(width + 1, dtype=np.int64)
    for k in range(cols.shape[0]):
        indptr[cols[k] + 1] += 1
    for j in range(width):
        indptr[j + 1] += indptr[j]
    pos = indptr[:-1].copy()
    for k in range(cols.shape[0]):
        p = pos[cols[k]]
        out_rows[p] = rows[k]
        out_vals[p] = vals[k]
        pos[cols[k]] += 1
    return indptr


class CscReader:
    """Reads the feature blocks of `STORE/csc/`."""

    def __init__(self, store_path: str):
        self.group = zarr.open_group(os.path.join(store_path, CSC_DIR), mode="r", zarr_format=3)

    def read(self, b: int, n_rows: int, width: int) -> sp.csc_matrix:
        data, indices, indptr = (
            np.asarray(open_array(self.group, f"{block_name(b)}/{name}")[:]) for name in ("data", "indices", "indptr")
        )
        return sp.csc_matrix((data, indices, indptr), shape=(n_rows, width))


def _spill_chunk(X: sp.csr_matrix, row_start: int, bf: int, n_blocks: int) -> tuple[np.ndarray, np.ndarray]:
    """A chunk's entries as spill records grouped by feature block, and the block boundaries."""
    rec = np.empty(X.nnz, dtype=SPILL_DTYPE)
    starts = _split_by_block(X.indptr, X.indices, X.data, row_start, bf, n_blocks, rec["row"], rec["col"], rec["val"])
    return rec, starts


class _Spill:
    """Per-block append-only spill files; records are buffered in memory up to `budget` bytes
    and appended in arrival (chunk) order, so every file stays in row-major order."""

    def __init__(self, root: str, budget: int):
        self.root, self.budget = root, budget
        self.pending: list[tuple[np.ndarray, np.ndarray]] = []
        self.pending_bytes = 0
        os.makedirs(root)

    def path(self, b: int) -> str:
        return os.path.join(self.root, f"{b}.bin")

    def add(self, rec: np.ndarray, starts: np.ndarray) -> None:
        self.pending.append((rec, starts))
        self.pending_bytes += rec.nbytes
        if self.pending_bytes >= self.budget:
            self.flush()

    def flush(self) -> None:
        counts = sum(np.diff(starts) for _, starts in self.pending)
        for b in np.flatnonzero(counts).tolist():
            with open(self.path(b), "ab") as f:
                for rec, starts in self.pending:
                    rec[starts[b] : starts[b + 1]].tofile(f)
        self.pending, self.pending_bytes = [], 0

    def load(self, b: int) -> np.ndarray:
        path = self.path(b)
        if not os.path.exists(path):
            return np.empty(0, dtype=SPILL_DTYPE)
        rec = np.fromfile(path, dtype=SPILL_DTYPE)
        os.remove(path)
        return rec


def _block_from_spill(rec: np.ndarray, n_rows: int, width: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(indptr int64, row indices, values float32) of one block from its row-major spill records."""
    indices = np.empty(len(rec), dtype=np.int32 if n_rows < 2**31 else np.int64)
    data = np.empty(len(rec), dtype=np.float32)
    indptr = _sort_by_column(rec["col"], rec["row"], rec["val"], width, indices, data)
    return indptr, indices, data


def _write_block(group, b: int, arrays: tuple[np.ndarray, np.ndarray, np.ndarray], shape: tuple[int, int]) -> None:
    g = group.create_group(block_name(b), attributes=_block_attributes(shape))
    for name, arr in zip(("indptr", "indices", "data"), arrays):
        g.create_array(name, data=arr, chunks=(max(1, min(len(arr), NNZ_CHUNK)),), compressors=COMPRESSORS)


def _block_attributes(shape: tuple[int, int]) -> dict:
    return {"encoding-type": "csc_matrix", "encoding-version": "0.1.0", "shape": list(shape)}


def _block_metadata(b: int, n_rows: int, width: int, nnz: int) -> dict[str, dict]:
    """The `zarr.json` documents zarr-python writes for block b (n_rows × width, nnz entries) as
    _write_block writes it, by path under `csc/`: its group's and its three arrays' (made with no
    data in a memory store: only the metadata is written)."""
    from zarr.storage import MemoryStore

    objects: dict = {}
    g = zarr.create_group(MemoryStore(objects), zarr_format=3).create_group(
        block_name(b), attributes=_block_attributes((n_rows, width))
    )
    index = np.int32 if n_rows < 2**31 else np.int64
    for name, size, dtype in (("indptr", width + 1, np.int64), ("indices", nnz, index), ("data", nnz, np.float32)):
        g.create_array(
            name, shape=(size,), dtype=dtype, chunks=(max(1, min(size, NNZ_CHUNK)),), compressors=COMPRESSORS
        )
    return {
        key: json.loads(value.to_bytes())
        for key, value in objects.items()
        if key.endswith("zarr.json") and key != "zarr.json"
    }


def metadata_problems(store_path: str, n_rows: int, blocks: list[dict]) -> tuple[list[str], set[int]]:
    """The Zarr metadata of `STORE/csc/` (its group and each block's group and arrays) checked
    against what `streamfit transpose` writes for the blocks the manifest lists: the problems
    (one line per file that is missing, not JSON, or says another shape, dtype, codec, …, named
    by its path under the store) and the ids of the blocks they concern (all of them when
    csc/zarr.json itself is damaged: zarr-python opens no block then)."""
    expected = {"zarr.json": group_document({})}
    owner: dict[str, int] = {}
    for info in blocks:
        for key, document in _block_metadata(
            info["id"], n_rows, info["col_stop"] - info["col_start"], info["nnz"]
        ).items():
            expected[key], owner[key] = document, info["id"]
    fetched = resolve(os.path.join(store_path, CSC_DIR)).read_files(list(expected))
    problems, damaged = [], set()
    for key, raw in zip(expected, fetched):
        problem = metadata_problem(f"{CSC_DIR}/{key}", raw, expected[key])
        if problem:
            problems.append(problem)
            damaged |= {owner[key]} if key in owner else {info["id"] for info in blocks}
    return problems, damaged


def build_csc(
    store_path: str, block_features: int = 65536, progress: bool = False, spill_buffer_bytes: int = 64 << 20
) -> dict:
    """Build (or rebuild) the feature-blocked CSC copy of a store's X; returns the manifest's
    `csc` entry.

    Pass 1 reads the row chunks in order, splits each chunk's entries by feature block
    (b = column // bf, a stable counting sort) and appends them as 16-byte records (row,
    column in block, value) to one spill file per block, buffered up to spill_buffer_bytes.
    Pass 2 loads one block's spill at a time, orders it by column with a stable counting sort
    (rows stay increasing, as the spill is row-major) and writes the CSC block.
    Peak memory ≈ max(spill_buffer_bytes + ~24 B × chunk nnz (spill records + the chunk's
    CSR), ~32 B × block nnz (spill records + CSC arrays + Zarr's encode buffers)), chunks read
    past the chunk cache: choose block_features so one block fits (measured: 9.5M-nnz blocks,
    ~290 MiB above the interpreter's baseline).

    Everything is written under `STORE/csc.partial/` (spill in `csc.partial/spill/`), renamed
    to `STORE/csc/` when complete, and only then named in manifest.json (atomic rewrite); an
    interrupted build leaves the store as it was. A SIGTERM (streamfit.shutdown) stops it
    between chunks and between blocks: Terminated, the partial copy removed.
    """
    from streamfit.store.store import Store

    if not isinstance(block_features, (int, np.integer)) or isinstance(block_features, bool) or block_features < 1:
        raise StoreError(f"block_features must be a positive integer, got {block_features!r}")
    resolve(store_path)  # a broken URL is named as such
    if is_url(store_path):
        raise StoreError(f"{store_path}: the column copy is built on local stores only; transpose a local copy")
    store = Store(store_path)
    root = store.path
    partial, final, old = (os.path.join(root, name) for name in (CSC_DIR + ".partial", CSC_DIR, CSC_DIR + ".old"))
    for leftover in (partial, old):  # left by an interrupted build; never referenced
        shutil.rmtree(leftover, ignore_errors=True)
    bf = int(block_features)
    n_blocks = -(-store.n_features // bf)
    stopped = (
        f"{store_path}: column copy not built (the store is as it was); `streamfit transpose {store_path}` builds it"
    )
    try:
        group = zarr.open_group(partial, mode="w", zarr_format=3)
        spill = _Spill(os.path.join(partial, "spill"), spill_buffer_bytes)
        for i in counted(
            range(store.n_chunks), "transpose: split", unit="chunk", total=store.n_chunks, enabled=progress
        ):
            shutdown.check(stopped)
            chunk = store.read_chunk(i, cache=False)
            spill.add(*_spill_chunk(chunk.X, chunk.row_start, bf, n_blocks))
        spill.flush()
        blocks = []
        for b in counted(range(n_blocks), "transpose: blocks", unit="block", total=n_blocks, enabled=progress):
            shutdown.check(stopped)
            lo, hi = b * bf, min((b + 1) * bf, store.n_features)
            shape = (store.n_rows, hi - lo)
            indptr, indices, data = _block_from_spill(spill.load(b), *shape)
            _write_block(group, b, (indptr, indices, data), shape)
            X = sp.csc_matrix((data, indices, indptr), shape=shape)
            blocks.append({"id": b, "col_start": lo, "col_stop": hi, "nnz": int(X.nnz), "sha256": csc_block_digest(X)})
        shutil.rmtree(spill.root)
        fsync_path(partial)
        manifest = store.manifest
        manifest_path = os.path.join(root, MANIFEST)
        if manifest.csc is not None:  # unlist the old copy before replacing it
            manifest.csc = None
            resolve(manifest_path).write_bytes(manifest.to_json().encode())
        if os.path.exists(final):
            os.replace(final, old)
        os.replace(partial, final)
        fsync_path(root)
        manifest.csc = {"block_features": bf, "blocks": blocks}
        resolve(manifest_path).write_bytes(manifest.to_json().encode())
    except OSError as e:  # disk full, read-only, ...: the store is left as it was
        shutil.rmtree(partial, ignore_errors=True)
        raise output_error(e.filename or partial, e) from e
    except BaseException:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return manifest.csc
