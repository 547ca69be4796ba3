"""Reading and writing stores: `open_store`, `Store`, `InMemoryStore`, `StoreWriter`."""

from __future__ import annotations

import errno
import fcntl
import functools
import hashlib
import io
import json
import os
import secrets
import shutil
import threading
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from streamfit import environment, on_worker, shutdown, storage
from streamfit.errors import StoreError, StreamfitError, output_error
from streamfit.store.format import (
    BACKENDS,
    CHUNKS_DIR,
    DEFAULT_CHUNK_ROWS,
    DIGEST_KEY,
    MANIFEST,
    MAX_FEATURES,
    REINGEST,
    ChunkInfo,
    DataMismatch,
    Manifest,
    chunk_digest,
    chunk_name,
    csc_block_digest,
    numeric_target,
)

if TYPE_CHECKING:
    from streamfit.lease import Lease
    from streamfit.store.csc import CscReader

CHUNK_CACHE_BYTES = environment.mebibytes("STREAMFIT_CHUNK_CACHE_MB")


def _chunk_arrays(chunk: Chunk) -> list[np.ndarray]:
    arrays = [chunk.X.data, chunk.X.indices, chunk.X.indptr]
    if isinstance(chunk.labels, np.ndarray):
        return arrays + [chunk.labels]
    return arrays + [chunk.labels.data, chunk.labels.indices, chunk.labels.indptr]


IDF_FILE = "idf.npy"
METADATA_BATCH = 64  # row chunks whose Zarr metadata files `verify` fetches together
ATTEMPT_FILE = "ATTEMPT"  # in a local NAME.partial: the token of the attempt that owns it
INCOMING_DIR = "incoming"  # in a local NAME.partial: chunks being written, before their rename into chunks/


def _backend(backend: str):
    """The module of a backend (zarr_backend or parquet_backend), imported on first use: a Zarr
    store never loads pyarrow, an in-memory one neither."""
    if backend == "zarr":
        from streamfit.store import zarr_backend

        return zarr_backend
    from streamfit.store import parquet_backend

    return parquet_backend


@dataclass
class Chunk:
    """One row chunk: X (CSR, float32), labels (int32 class ids, a CSR 0/1 indicator
    n_rows × n_classes for multilabel, or float64 targets n_rows × k for regression), and where
    it sits in the store."""

    id: int
    row_start: int
    X: sp.csr_matrix
    labels: np.ndarray | sp.csr_matrix

    @property
    def n_rows(self) -> int:
        return self.X.shape[0]

    @functools.cached_property
    def csc(self) -> sp.csc_matrix:
        """X in CSC form, for column access; computed once per chunk object, so it lives as
        long as the chunk stays in the chunk cache."""
        return self.X.tocsc()

    def targets(self, n_classes: int) -> np.ndarray:
        """Dense target matrix T (n_rows × n_classes), float64 (`target_matrix`)."""
        return target_matrix(self.labels, n_classes)


def target_matrix(labels: np.ndarray | sp.csr_matrix, n_classes: int) -> np.ndarray:
    """Dense target matrix T (rows × n_classes), float64, of a chunk's labels: one-hot of class
    ids or the label indicator, or the real-valued targets themselves (regression, n_classes = k
    outputs)."""
    if not isinstance(labels, np.ndarray):  # a sparse indicator
        return labels.toarray().astype(np.float64)
    if labels.ndim == 2:  # regression targets
        return np.asarray(labels, dtype=np.float64)
    T = np.zeros((len(labels), n_classes))
    T[np.arange(len(labels)), labels] = 1.0
    return T


class ChunkSource:
    """What solvers read: a sequence of row chunks with a shape and a class vocabulary (for
    regression: real-valued targets, `classes` naming the outputs)."""

    n_rows: int
    n_features: int
    classes: list[str]
    multilabel: bool
    regression: bool = False
    chunk_rows: int
    n_chunks: int

    @property
    def n_classes(self) -> int:
        return len(self.classes)

    @property
    def value_dtype(self) -> np.dtype:
        """The precision of X's values as the solvers read them: float32 for a store (its chunks
        hold float32 values, canonical_chunk) and for ingest's stages."""
        return np.dtype(np.float32)

    def read_chunk(self, i: int) -> Chunk:
        raise NotImplementedError

    def dense_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray | sp.csr_matrix] | None:
        """(X, labels) of chunk i when the source holds X as a dense array (an InMemoryStore of
        a numpy X), else None: its rows as a C-contiguous float64 array and its labels as
        read_chunk gives them, for readers that want dense rows without the CSR form."""
        return None

    def chunk_bounds(self, i: int) -> tuple[int, int]:
        return i * self.chunk_rows, min((i + 1) * self.chunk_rows, self.n_rows)

    def iter_chunks(self):
        for i in range(self.n_chunks):
            yield self.read_chunk(i)

    def to_scipy(self):
        """(X, labels) of the whole source in memory: only for data that fits."""
        chunks = list(self.iter_chunks())
        if not chunks:
            empty = np.zeros((0, self.n_classes)) if self.regression else np.zeros(0, dtype=np.int32)
            return sp.csr_matrix((0, self.n_features), dtype=np.float32), empty
        X = sp.vstack([c.X for c in chunks], format="csr")
        if self.multilabel:
            return X, sp.vstack([c.labels for c in chunks], format="csr")
        return X, np.concatenate([c.labels for c in chunks])


def _copied(location: storage.Location) -> str | None:
    """The line for a store directory copied file by file (storage.copied_file_by_file), or None."""
    return storage.copied_file_by_file(
        location, MANIFEST, "store", url_fix="ingest to the URL", local_fix="pass that folder"
    )


def _no_manifest(path: str, data: storage.Location) -> str:
    """Why the store directory `data` has no manifest: a local copy of a store behind a URL as it
    lay there (_copied), else an interrupted ingest."""
    copied = _copied(data) if data.local else None
    if copied is not None:
        return copied
    return f"{path}: has no {MANIFEST}; it is not a complete store (an interrupted ingest?). Re-run 'streamfit ingest'"


class Store(ChunkSource):
    """A store on disk or behind a URL (its committed attempt), opened read-only.

    Sent to a Dask worker, it pickles as its `identity` (path, manifest digest, the attempt it
    opened behind a URL, scratch) and nothing is read as the task arrives (`_shipped`): it opens
    on its first use, inside the task, once per worker process, at the attempt its driver opened
    (no request for COMMITTED per task). A worker that cannot open it (refused credentials, no such
    path, a damaged or different store there) fails that task with a StoreError naming the worker,
    which reaches the driver as the task's error (`_open_shipped`); unpickling it failed the
    worker's receipt of the task instead, and Dask dropped the worker.

    attempt: the committed attempt of a store behind a URL, when the caller has read COMMITTED
    (`open_store`, a shipped Store); None reads it here. scratch: `path` holds the files of a
    scratch store (StoreWriter(scratch=True).files: ingest's pass-1 stage), read where they are,
    with no commit to look for."""

    def __init__(self, path: str, *, scratch: bool = False, attempt: str | None = None):
        location = storage.resolve(path)
        self.path = location.path if location.local else location.url
        if self.path.endswith(".partial") and location.local and not scratch:
            raise StoreError(f"{path}: an incomplete store left by an interrupted ingest; re-run 'streamfit ingest'")
        if location.local and not location.isdir():
            if os.path.isfile(location.path):  # `evaluate run/ test.csv`: raw data where a store goes
                raise StoreError(
                    f"{path}: a data file, not a store (the directory 'streamfit ingest' writes): ingest it "
                    f"first, streamfit ingest {path} --out STORE (test data: add --like TRAINING_STORE)"
                )
            raise StoreError(f"{path}: no such store directory (create one with 'streamfit ingest')")
        if attempt is not None and not location.local:
            data: storage.Location | None = location.join(attempt)
        else:
            data = location if scratch else _committed(location)
        if data is None:
            if not location.exists():
                raise StoreError(f"{path}: no such store (create one with 'streamfit ingest')")
            copied = _copied(location)
            if copied is not None:  # a local store's files copied here one by one
                raise StoreError(copied)
            raise StoreError(
                f"{path}: has no {storage.COMMITTED}; it is not a complete store (an interrupted ingest?). "
                "Re-run 'streamfit ingest'"
            )
        self.data = data  # where the store's files are: the directory, or the committed attempt
        manifest_path = data.join(MANIFEST).url
        try:  # read without asking first whether it exists: behind a URL that would be one more request
            raw = json.loads(data.join(MANIFEST).read_bytes())
        except FileNotFoundError:
            if attempt is not None:
                raise StoreError(
                    f"{path}: its attempt {attempt} is gone (the store was written again while in use); "
                    "run the command again"
                ) from None
            raise StoreError(_no_manifest(path, data)) from None
        except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            refused = storage.client_error_message(e)  # wrong credentials: the store is fine
            if refused is not None:
                raise StoreError(f"{manifest_path}: {refused}") from e
            raise StoreError(f"{manifest_path}: unreadable manifest ({e}); {REINGEST}") from e
        m = Manifest.from_dict(raw, manifest_path)
        self.manifest = m
        # what a pickled copy reopens (`__reduce__`): a checked manifest has its digest
        self.identity = (self.path, raw[DIGEST_KEY], None if data.local else data.name, scratch)
        self.n_rows, self.n_features, self.classes = m.n_rows, m.n_features, list(m.classes)
        self.multilabel = m.task == "multilabel"
        self.regression = m.task == "regression"
        self.chunk_rows, self.n_chunks = m.chunk_rows, len(m.chunks)
        self._reader = None
        self._cache: dict[int, Chunk] = {}
        self._cached_bytes = 0  # the cached chunks' `_decoded_chunk_bytes`
        self._csc_reader: CscReader | None = None  # opened on the first read_feature_block

    def __reduce__(self):
        return (_shipped, self.identity)

    if not TYPE_CHECKING:  # for mypy a Store has the attributes __init__ sets, and no others

        def __getattr__(self, name: str):
            """Reached only for an attribute that is not set: on a store that a task received
            (`_shipped`) and has not used yet, its first use opens it (`_open_shipped`)."""
            if name.startswith("__") or "_unopened" not in self.__dict__:
                raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
            self._open_shipped()
            return getattr(self, name)

    def _open_shipped(self) -> None:
        """Open a shipped store here, as its sender opened it (`identity`); one thread opens it,
        the worker's others wait for it. StoreError when it cannot be opened or holds another
        store than its sender's (another manifest at the same local path), naming the Dask worker
        (on_worker.where); it stays unopened, so each task that uses it fails the same way."""
        with _OPENING:
            if "_unopened" not in self.__dict__:  # opened by another thread meanwhile
                return
            path, digest, attempt, scratch = self.identity
            try:
                opened = Store(path, attempt=attempt, scratch=scratch)
                if opened.identity[1] != digest:
                    raise StoreError(
                        f"{path}: its manifest here is not the one the driver read (another store at the same "
                        "path); put the store on a disk every worker shares, at the same path, or use a URL (s3://…)"
                    )
            except StreamfitError as e:
                where = on_worker.where()
                if where is None:
                    raise
                raise StoreError(f"{path}: {where} cannot open this store, which the driver opened: {e}") from e
            self.__dict__.update(opened.__dict__)
            del self.__dict__["_unopened"]

    @property
    def idf(self) -> np.ndarray | None:
        """The IDF weights the rows were scaled with (from the training rows), or None."""
        if not self.manifest.transform.get("idf"):
            return None
        path = self.data.join(IDF_FILE).url
        try:
            data = self.data.join(IDF_FILE).read_bytes()
        except FileNotFoundError:
            raise StoreError(f"{path} is missing (the manifest says the rows are IDF-weighted); {REINGEST}") from None
        if hashlib.sha256(data).hexdigest() != self.manifest.transform.get("idf_sha256"):
            raise StoreError(f"{path}: fails its checksum; the store is damaged, re-ingest it")
        idf = np.load(io.BytesIO(data), allow_pickle=False)
        if idf.shape != (self.n_features,) or idf.dtype.kind != "f" or not np.all(np.isfinite(idf)):
            raise StoreError(
                f"{path}: holds {idf.dtype} weights of shape {idf.shape}, expected {self.n_features} finite "
                f"floats; {REINGEST}"
            )
        return idf

    def featurizer_dict(self) -> dict:
        """How raw records were turned into these rows (see streamfit.ingest.featurize), with
        how they were read: input ("text" / "numeric" features; None if mixed or not recorded)
        and source_options (field names, delimiter, encoding, ... as given to ingest)."""
        t = self.manifest.transform
        source = self.manifest.source
        return {
            "hashing": self.manifest.hashing,
            "n_features": self.n_features,
            "idf": bool(t.get("idf")),
            "l2_normalize": bool(t.get("l2_normalize")),
            "input": source.get("input"),
            "source_options": source.get("format_options", {}),
        }

    @property
    def reader(self):
        if self._reader is None:
            module = _backend(self.manifest.backend)
            cls = module.ZarrReader if self.manifest.backend == "zarr" else module.ParquetReader
            try:
                reader = cls(self.data, self.multilabel, self.n_classes, self.regression)
            except Exception as e:
                problem = " ".join(str(e).split())
                raise StoreError(
                    f"{self.path}: cannot open the {self.manifest.backend} data ({problem}); {REINGEST}"
                ) from e
            try:
                reader.check(self.manifest)
            except DataMismatch as e:
                raise StoreError(f"{self.path}: {e}; {MANIFEST} does not match the data, {REINGEST}") from e
            self._reader = reader
        return self._reader

    @property
    def hashing(self) -> dict | None:
        return self.manifest.hashing

    def read_chunk(self, i: int, verify: bool = True, cache: bool = True) -> Chunk:
        """Chunk i, checked against its checksum. Decoded chunks stay cached in this process
        (iterative solvers read every chunk many times), with read-only arrays, as long as the
        cached chunks fit in CHUNK_CACHE_BYTES: the first chunks read stay, none is evicted
        (cyclic passes would only thrash an evicting cache), so memory stays bounded and a
        worker that reads only its share of the chunks (streamfit.engine's chunk affinity)
        caches all of it when the share fits. cache=False (one-pass readers: ingest pass 2,
        transpose) skips the cache."""
        cached = self._cache.get(i)
        if cached is not None:
            return cached
        chunk = self._read_from_disk(i, verify)
        size = self._decoded_chunk_bytes(i)
        if cache and verify and self._cached_bytes + size <= CHUNK_CACHE_BYTES:
            for a in _chunk_arrays(chunk):
                a.flags.writeable = False
            self._cache[i] = chunk
            self._cached_bytes += size
        return chunk

    @property
    def decoded_bytes(self) -> int:
        """The whole store in memory: 8 bytes per non-zero (value, index), 12 per row (8 more
        per row and output for regression targets)."""
        return 8 * self.manifest.nnz + 12 * self.n_rows + (8 * self.n_rows * self.n_classes if self.regression else 0)

    def _decoded_chunk_bytes(self, i: int) -> int:
        """Chunk i in memory, counted as `decoded_bytes` counts the store."""
        info = self.manifest.chunks[i]
        rows = info.row_stop - info.row_start
        return 8 * info.nnz + 12 * rows + (8 * rows * self.n_classes if self.regression else 0)

    def _read_from_disk(self, i: int, verify: bool) -> Chunk:
        info: ChunkInfo = self.manifest.chunks[i]
        try:
            X, labels = self.reader.read(i, info.row_stop - info.row_start, info.nnz, self.n_features, self.n_classes)
        except (StoreError, MemoryError):
            raise
        except DataMismatch as e:
            raise StoreError(
                f"{self.path}: chunk {i} (rows {info.row_start}-{info.row_stop}): {e}; {MANIFEST} does not match "
                f"the data, {REINGEST}"
            ) from e
        except Exception as e:
            problem = " ".join(str(e).split())  # one line (pyarrow's messages may hold several)
            raise StoreError(
                f"{self.path}: chunk {i} (rows {info.row_start}-{info.row_stop}) is damaged: {problem}; {REINGEST}"
            ) from e
        if X.nnz and not 0 <= int(X.indices.min()) <= int(X.indices.max()) < self.n_features:
            raise StoreError(
                f"{self.path}: chunk {i} (rows {info.row_start}-{info.row_stop}) holds feature columns "
                f"{int(X.indices.min())} to {int(X.indices.max())}, outside 0 to {self.n_features - 1} "
                f"(n_features={self.n_features}); the store is damaged, re-ingest it"
            )
        if verify and chunk_digest(X, labels) != info.sha256:
            raise StoreError(
                f"{self.path}: chunk {i} (rows {info.row_start}-{info.row_stop}) fails its checksum; "
                "the store is damaged, re-ingest it"
            )
        self._check_chunk(i, X, labels)
        return Chunk(i, info.row_start, X, labels)

    def _check_chunk(self, i: int, X: sp.csr_matrix, labels) -> None:
        """StoreError unless chunk i agrees with the manifest: its nnz, every column index in
        [0, n_features), every class id in [0, n_classes), every regression target finite."""
        info = self.manifest.chunks[i]
        where = f"{self.path}: chunk {i} (rows {info.row_start}-{info.row_stop})"
        if X.nnz != info.nnz:
            raise StoreError(f"{where} holds {X.nnz} non-zeros, {MANIFEST} says chunks[{i}].nnz={info.nnz}; {REINGEST}")
        # the column range was checked by _read_from_disk, before the digest
        if self.regression:
            if not np.all(np.isfinite(labels)):
                raise StoreError(f"{where} holds a NaN or infinite target; {REINGEST}")
            return
        ids = labels.indices if sp.issparse(labels) else labels
        if len(ids) and (int(ids.min()) < 0 or int(ids.max()) >= self.n_classes):
            bad = int(ids.min()) if int(ids.min()) < 0 else int(ids.max())
            raise StoreError(f"{where} holds class id {bad}, but {MANIFEST} lists {self.n_classes} classes; {REINGEST}")

    @property
    def n_feature_blocks(self) -> int:
        """Blocks of the CSC copy (`streamfit transpose`), 0 when the store has none."""
        return len(self.manifest.csc["blocks"]) if self.manifest.csc else 0

    def feature_block_bounds(self, b: int) -> tuple[int, int]:
        """Columns [col_start, col_stop) of feature block b."""
        info = self._feature_block_info(b)
        return info["col_start"], info["col_stop"]

    def _feature_block_info(self, b: int) -> dict:
        if not self.manifest.csc:
            raise StoreError(
                f"{self.path}: has no column (CSC) copy; build one with "
                f"'streamfit transpose {self.path} --block-features N'"
            )
        if not 0 <= b < self.n_feature_blocks:
            raise StoreError(f"{self.path}: no feature block {b} (the CSC copy has {self.n_feature_blocks})")
        return self.manifest.csc["blocks"][b]

    def read_feature_block(self, b: int, verify: bool = True) -> sp.csc_matrix:
        """X[:, col_start:col_stop] of feature block b over all rows, as CSC (n_rows × width),
        its SHA-256 checked against the manifest."""
        info = self._feature_block_info(b)
        lo, hi = info["col_start"], info["col_stop"]
        where = f"{self.path}: feature block {b} (columns {lo}-{hi})"
        try:
            if self._csc_reader is None:
                from streamfit.store.csc import CscReader

                self._csc_reader = CscReader(self.data.path)
            X = self._csc_reader.read(b, self.n_rows, hi - lo)
        except Exception as e:
            raise StoreError(f"{where} is damaged: {e}; rebuild it with 'streamfit transpose'") from e
        if verify and csc_block_digest(X) != info["sha256"]:
            raise StoreError(
                f"{where} fails its checksum; the CSC copy is damaged, rebuild it with 'streamfit transpose'"
            )
        return X

    def columns_used(self, progress: bool = False) -> int:
        """How many columns hold at least one non-zero: one pass over the chunks with a bitmap of
        n_features bits (so 256 MiB at the widest, 2^31 columns); a SIGTERM stops it between chunks."""
        from tqdm.auto import tqdm

        bits = np.zeros((self.n_features + 7) // 8, dtype=np.uint8)
        for i in tqdm(range(self.n_chunks), desc="columns", unit="chunk", disable=not progress):
            check_stop_reading(self.path)
            cols = np.unique(self.read_chunk(i, cache=False).X.indices).astype(np.int64)
            np.bitwise_or.at(bits, cols >> 3, (1 << (cols & 7)).astype(np.uint8))
        popcount = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)
        return int(sum(popcount[bits[lo : lo + 2**24]].sum(dtype=np.int64) for lo in range(0, len(bits), 2**24)))

    def verify(self) -> list[str]:
        """Re-read every chunk and every CSC block and check their checksums and their agreement
        with the manifest (a multiclass store's class_rows too), the IDF weights against theirs,
        and (Zarr) every `zarr.json` against what the writer writes: the metadata other Zarr
        readers (zarr-python) need, which streamfit's reader does not read. Returns the problems found, one line each naming the
        file or chunk and the fix. A SIGTERM stops it between chunks and blocks."""
        try:
            self.reader  # noqa: B018 - opening checks the data's layout against the manifest
        except StoreError as e:
            return [str(e)]
        zarr_metadata = self.manifest.backend == "zarr"
        problems = [self._metadata_problem(p) for p in self.reader.root_metadata_problems()] if zarr_metadata else []
        if self.manifest.transform.get("idf"):
            try:
                self.idf  # noqa: B018 - reading checks the weights' SHA-256 and shape
            except StoreError as e:
                problems.append(str(e))
        sizes: list[tuple[int, int, int, int, int | None]] = []  # chunks whose metadata is to check
        recorded = self.manifest.class_rows
        counted: np.ndarray | None = None if recorded is None else np.zeros(self.n_classes, dtype=np.int64)
        for i in range(self.n_chunks):
            check_stop_reading(self.path)
            n_labels = None
            try:
                chunk = self._read_from_disk(i, verify=True)
                n_labels = int(chunk.labels.nnz) if isinstance(chunk.labels, sp.csr_matrix) else None
                if counted is not None:
                    counted += np.bincount(chunk.labels, minlength=self.n_classes)
            except StoreError as e:
                problems.append(str(e))
                counted = None  # a chunk unread: its counts unknown
            if zarr_metadata:
                info = self.manifest.chunks[i]
                sizes.append((i, info.row_stop - info.row_start, info.nnz, self.n_classes, n_labels))
            if sizes and (len(sizes) == METADATA_BATCH or i == self.n_chunks - 1):
                # fetched a batch at a time: behind a URL one round of concurrent GETs per batch
                problems += [self._metadata_problem(p) for p in self.reader.metadata_problems(sizes)]
                sizes = []
        if counted is not None and recorded is not None and counted.tolist() != recorded:
            k = int(np.flatnonzero(counted != np.asarray(recorded))[0])
            problems.append(
                f"{self.path}: {MANIFEST} records {recorded[k]} rows of class {self.classes[k]!r} (class_rows), "
                f"the chunks hold {int(counted[k])}; {REINGEST}"
            )
        damaged_blocks: set[int] = set()
        if self.manifest.csc:
            from streamfit.store.csc import metadata_problems

            found, damaged_blocks = metadata_problems(self.data.path, self.n_rows, self.manifest.csc["blocks"])
            problems += [
                f"{self.path}/{p}; rebuild the column copy with 'streamfit transpose {self.path}'" for p in found
            ]
        for b in range(self.n_feature_blocks):
            check_stop_reading(self.path)
            if b in damaged_blocks:  # named above; zarr-python would fail on it or misread it
                continue
            try:
                self.read_feature_block(b)
            except StoreError as e:
                problems.append(str(e))
        return problems

    def _metadata_problem(self, problem: str) -> str:
        """A problem of a Zarr metadata file as `verify` reports it: the store, the file, what is
        wrong, what it breaks and the fix."""
        where = self.path if self.data.local else f"{self.path}/{self.data.name}"  # behind a URL: its attempt
        return f"{where}/{problem}; a Zarr reader (zarr-python) would refuse or misread the store; {REINGEST}"


def check_stop_reading(path: str) -> None:
    """Between the chunks of a read of a whole store (`streamfit inspect`: --verify, --occupancy,
    a regression store's target statistics): Terminated if a SIGTERM asked to stop (streamfit.shutdown)."""
    shutdown.check(f"{path}: not read to the end (inspect writes nothing); run the command again")


def _committed(location: storage.Location) -> storage.Location | None:
    """The committed store data at `location` (storage.committed), errors as StoreErrors."""
    try:
        return storage.committed(location)
    except StreamfitError as e:
        raise StoreError(f"{e}; {REINGEST}") from None


@functools.lru_cache(maxsize=16)
def _open_cached(path: str, version: tuple, attempt: str | None = None) -> Store:
    return Store(path, attempt=attempt)


_OPENING = threading.Lock()  # held while a worker's thread opens a shipped store (Store._open_shipped)


@functools.lru_cache(maxsize=16)
def _shipped(path: str, digest: str, attempt: str | None, scratch: bool) -> Store:
    """How a Store is unpickled (a Dask task's argument, on the worker; also in the scheduler,
    which unpickles a graph and pickles each task again): the one Store object of this identity
    in this process, opened on its first use (Store.__getattr__), so nothing is read, and
    nothing can fail, as the task arrives. One object per process, as before: what its tasks
    cache per store (decoded chunks, stagewise's designs) is kept across tasks."""
    store = Store.__new__(Store)
    store.__dict__.update(identity=(path, digest, attempt, scratch), _unopened=True)
    return store


def open_store(path: str) -> Store:
    """Open a store; within one process the same store is opened once (workers reuse it).
    The cache key includes the manifest's inode, size and ns timestamps on local disk (a
    manifest rewritten by `streamfit transpose`, a new file renamed into place, is seen at
    once), and the committed attempt on an object store (a new commit is seen at once)."""
    location = storage.resolve(path)
    if not location.local:
        data = _committed(location)
        if data is None:
            return Store(path)  # raises the explanatory error
        return _open_cached(location.url, (data.name,), data.name)
    manifest = os.path.join(location.path, MANIFEST)
    try:
        st = os.stat(manifest)
    except OSError:
        return Store(path)  # raises the explanatory error
    return _open_cached(location.path, (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))


class InMemoryStore(ChunkSource):
    """In-memory arrays seen as row chunks: the estimators' path into the same solvers.
    X: scipy.sparse (kept as CSR) or a 2-D array, kept dense (C-contiguous float64) and turned
    into CSR (`dense_to_csr`) only when a reader first asks for `X` or `read_chunk`; until then
    `dense_chunk` serves its rows. labels: class ids (1-D ints), a sparse indicator (multilabel),
    or a 2-D float array of regression targets (n_rows × k, `classes` naming the k outputs)."""

    def __init__(self, X, labels, classes, chunk_rows: int = DEFAULT_CHUNK_ROWS):
        self.dense: np.ndarray | None = None
        if sp.issparse(X):
            self.X = X.tocsr()
        elif np.ndim(X) == 2:
            self.dense = np.ascontiguousarray(X, dtype=np.float64)
        else:  # one row (1-D), or scipy's own error (other shapes)
            self.X = _dense_to_csr(X)
        self.labels = labels
        self.classes = [str(c) for c in classes]
        self.multilabel = sp.issparse(labels)
        self.regression = not self.multilabel and np.ndim(labels) == 2
        self.n_rows, self.n_features = (self.X if self.dense is None else self.dense).shape
        self.chunk_rows = max(1, int(chunk_rows))
        self.n_chunks = max(1, -(-self.n_rows // self.chunk_rows))

    @functools.cached_property
    def X(self) -> sp.csr_matrix:
        """All rows as CSR (float64 values; converted from the dense X on first use)."""
        assert self.dense is not None, "a sparse X is set as CSR by __init__"
        return _dense_to_csr(self.dense)

    @property
    def value_dtype(self) -> np.dtype:
        """float64 for a dense X (kept as float64), else the sparse X's own float32 or float64
        (other dtypes are read as float64)."""
        if self.dense is None and self.X.dtype == np.float32:
            return np.dtype(np.float32)
        return np.dtype(np.float64)

    def read_chunk(self, i: int) -> Chunk:
        lo, hi = self.chunk_bounds(i)
        return Chunk(i, lo, self.X[lo:hi], self.labels[lo:hi])

    def dense_chunk(self, i: int) -> tuple[np.ndarray, np.ndarray | sp.csr_matrix] | None:
        if self.dense is None:
            return None
        lo, hi = self.chunk_bounds(i)
        return self.dense[lo:hi], self.labels[lo:hi]


def _dense_to_csr(X) -> sp.csr_matrix:
    from streamfit.store.dense_kernels import dense_to_csr  # numba: not on the CLI's import path

    return dense_to_csr(X)


def overlaps(a: str, b: str) -> bool:
    """Whether paths `a` and `b` name the same file or directory, or one lies inside the other
    (symbolic links resolved; hard links to one file count as the same). URLs overlap when
    one is the other or a prefix of it up to a `/`; a URL never overlaps a local path."""
    loc_a, loc_b = storage.resolve(a), storage.resolve(b)
    if not (loc_a.local and loc_b.local):
        if loc_a.local or loc_b.local:
            return False
        url_a, url_b = loc_a.url.rstrip("/"), loc_b.url.rstrip("/")
        return url_a == url_b or url_a.startswith(url_b + "/") or url_b.startswith(url_a + "/")
    a, b = loc_a.path, loc_b.path
    real_a, real_b = os.path.realpath(a), os.path.realpath(b)
    if os.path.commonpath([real_a, real_b]) in (real_a, real_b):
        return True
    try:
        return os.path.samefile(a, b)
    except OSError:  # one of them does not exist (yet)
        return False


def canonical_chunk(X: sp.csr_matrix, labels, multilabel: bool, n_outputs: int | None, where: str):
    """(X, labels) of a chunk as stored and digested: X with float32 values, int32 column
    indices (StoreError naming `where` for columns beyond them) and int64 row pointers from 0;
    labels int32 class ids, a float32 CSR indicator (multilabel) or float64 rows × k (regression)."""
    if X.nnz and not 0 <= int(X.indices.min()) <= int(X.indices.max()) < MAX_FEATURES:
        raise StoreError(
            f"{where}: feature columns {int(X.indices.min())} to {int(X.indices.max())} "
            f"cannot be stored: a store holds columns 0 to {MAX_FEATURES - 1} (int32 indices)"
        )
    indptr = np.asarray(X.indptr, dtype=np.int64)
    lo, hi = int(indptr[0]), int(indptr[-1])
    X = sp.csr_matrix((X.data[lo:hi].astype(np.float32), X.indices[lo:hi].astype(np.int32), indptr - lo), shape=X.shape)
    if multilabel:
        return X, sp.csr_matrix(labels, dtype=np.float32)
    if n_outputs is not None:
        return X, np.asarray(labels, dtype=np.float64).reshape(-1, n_outputs)
    return X, np.asarray(labels, dtype=np.int32)


def stack_rows(pending: list[tuple[sp.csr_matrix, object]], multilabel: bool, n_outputs: int | None):
    """(X, labels): the rows of the (X, labels) batches `pending`, one under the other, as a
    writer cuts its chunks from them: X CSR, labels a CSR indicator (multilabel), float64 rows × k
    (regression) or int32 class ids."""
    X = sp.vstack([p[0] for p in pending], format="csr")
    if multilabel:
        return X, sp.vstack([p[1] for p in pending], format="csr")
    if n_outputs is not None:
        return X, np.vstack([np.asarray(p[1], dtype=np.float64).reshape(-1, n_outputs) for p in pending])
    return X, np.concatenate([np.asarray(p[1], dtype=np.int32) for p in pending])


@dataclass(frozen=True)
class WrittenChunk:
    """What the writer of a chunk tells the manifest's writer: its entry, its largest column
    (-1 for none; the width of a --no-hash store) and, multiclass, its rows per class id
    (np.bincount of its class ids: up to its largest id; None for the other tasks)."""

    info: ChunkInfo
    max_index: int
    class_rows: np.ndarray | None


@dataclass(frozen=True)
class ChunkSink:
    """Where and how the chunks of a store being written go: the attempt's files (`root`) and
    the layout. Picklable (a Location pickles as its path or URL), so a Dask worker writes the
    chunks of the rows it featurized itself and returns their WrittenChunk to the driver, which
    writes the manifest (StoreWriter.add_written)."""

    root: storage.Location
    backend: str
    multilabel: bool
    n_outputs: int | None
    name: str  # the store's path or URL, for messages
    token: str | None = None  # local disk: the attempt's token, in `root/ATTEMPT`; None behind a URL

    def write(self, cid: int, row_start: int, X: sp.csr_matrix, labels) -> WrittenChunk:
        """Write rows [row_start, row_start + X.shape[0]) as chunk `cid` (see format.py).

        Behind a URL the attempt's prefix is this writer's own, so the chunk is written in
        place. On local disk every attempt stages in the same `NAME.partial`, so a write still
        running for a killed driver could land in a later attempt's directory: the chunk is
        written under `incoming/<token>/` and renamed into `chunks/` only if `ATTEMPT`
        still holds this sink's token (`_move_in`); otherwise it is deleted and StoreError says
        the attempt was replaced."""
        X, labels = canonical_chunk(X, labels, self.multilabel, self.n_outputs, self.name)
        if self.token is None:
            _backend(self.backend).write_chunk(self.root, cid, X, labels)
        else:
            # one staging folder for all the attempt's chunks: a chunk's rename leaves no empty
            # folder of its own behind (two rmdirs a chunk, each waiting on the disk)
            staged = self.root.join(INCOMING_DIR, self.token)
            try:
                _backend(self.backend).write_chunk(staged, cid, X, labels)
                self._move_in(staged, cid)
            finally:  # after the rename nothing is there; else what this write left
                if self.backend == "zarr":
                    self._chunk(staged, cid).remove_tree()
                else:
                    self._chunk(staged, cid).remove()
        info = ChunkInfo(cid, row_start, row_start + X.shape[0], int(X.nnz), chunk_digest(X, labels))
        class_rows = np.bincount(labels) if not self.multilabel and self.n_outputs is None else None
        return WrittenChunk(info, int(X.indices.max()) if X.nnz else -1, class_rows)

    def _move_in(self, staged: storage.Location, cid: int) -> None:
        """Rename chunk `cid`, written under `staged`, into the attempt's `chunks/`, unless the
        attempt is no longer this sink's. Safe against a later attempt replacing `NAME.partial`
        at any moment: a token read before the replacement means `staged` was in the old
        directory (the write finished before the read), so the rename finds no source."""
        try:
            current = self.root.join(ATTEMPT_FILE).read_text()
        except FileNotFoundError:
            # no attempt at all: a later one published the store, or a Dask worker on a disk of its own
            raise StoreError(
                f"{self.name}: chunk {cid} not written: no ingest attempt at {self.root.path} as this process sees "
                "it: another ingest replaced this one's attempt, or this Dask worker does not share the driver's "
                "disk (with --scheduler, --out must be a URL (s3://…) or on a disk every worker shares at the same "
                "path)"
            ) from None
        if current != self.token:
            raise StoreError(
                f"{self.name}: chunk {cid} not written: another ingest replaced this one's attempt "
                f"({self.root.path}); this ingest's driver has stopped or its store was restarted"
            )
        self.root.join(CHUNKS_DIR).makedirs()
        try:
            os.rename(self._chunk(staged, cid).path, self._chunk(self.root, cid).path)
        except OSError as e:
            if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                raise
            # a retried task of this attempt (a lost worker) wrote it already: the same bytes

    def _chunk(self, root: storage.Location, cid: int) -> storage.Location:
        """Chunk `cid`'s directory (zarr) or file (parquet) in the store whose files are at `root`."""
        if self.backend == "zarr":
            return root.join(CHUNKS_DIR, chunk_name(cid))
        return _backend(self.backend).chunk_file(root, cid)

    def exists(self, cid: int) -> bool:
        """Whether chunk `cid` is where this process sees the store (a worker on another
        machine writing to a local path writes to its own disk)."""
        return self._chunk(self.root, cid).exists()


class StoreWriter:
    """Writes a new store atomically by streamfit.storage's commit protocol: on local disk
    everything goes under `PATH.partial`, and the directory is renamed to PATH only after the
    manifest is written and synced; behind a URL, under `PATH/attempt-…/`, committed by
    `PATH/COMMITTED` once the manifest is written. Rows may come in batches of any size
    (`write_rows`); they are cut into chunks of exactly `chunk_rows` rows, each written apart
    (ChunkSink). Or the chunks are written elsewhere (Dask workers, through `sink`) and
    reported in order with `add_written`.

    `PATH.partial` is locked (flock) from the start to the publish, so two writers of one PATH
    exclude each other; without `overwrite`, PATH is checked again under that lock just before
    the publish, so a store another process finished meanwhile is never replaced. Its random
    token in `PATH.partial/ATTEMPT` keeps a chunk write left running by a killed earlier
    attempt out of this one (ChunkSink.write). Behind an S3 URL a writer that another one
    overtook (its commit came first, after this one began) is refused at its commit
    (storage.Attempt.commit: compare-and-swap), StreamfitError, nothing of it committed.

    scratch: a store that lives only while its writer's process reads it (ingest's pass-1 stage):
    written and locked as above, but `close` writes the manifest and stops there: no fsync, no
    rename, no COMMITTED, so it never looks complete; `files` is where it is read from
    (`Store(writer.files.url, scratch=True)`), and `discard` deletes it. A crash loses it whole,
    and its next writer (the same PATH) deletes what a dead one left, as for any attempt."""

    def __init__(
        self,
        path: str,
        *,
        backend: str = "zarr",
        multilabel: bool = False,
        n_outputs: int | None = None,
        chunk_rows: int = DEFAULT_CHUNK_ROWS,
        overwrite: bool = False,
        scratch: bool = False,
        lease: Lease | None = None,
    ):
        """n_outputs: a regression store of k real-valued targets per row (labels passed to
        write_rows as float n × k arrays); None: class labels. scratch: see the class docstring
        (replaces what is at PATH: overwrite is implied). lease: behind a URL, PATH's lease
        (streamfit.lease) that the caller took and releases (ingest takes it before it reads
        its inputs); None: this writer takes its own and releases it when it is done."""
        if backend not in BACKENDS:
            raise StoreError(f"unknown store backend {backend!r}; choose one of {', '.join(BACKENDS)}")
        if chunk_rows < 1:
            raise StoreError(f"chunk_rows must be >= 1, got {chunk_rows}")
        self.location = storage.resolve(path)
        self.path = self.location.path if self.location.local else self.location.url
        self.overwrite = overwrite or scratch
        self.scratch = scratch
        if not self.overwrite and present(self.location):  # (behind a URL a request: asked only when it matters)
            raise StoreError(f"{path}: already exists; pass --overwrite to replace it")
        self._lock: int | None = None
        token: str | None = None  # local disk: this attempt's, against stray chunk writes (ChunkSink.write)
        if self.location.local:
            self.tmp = self.path + ".partial"
            if os.path.isdir(self.path):  # --overwrite: not while a live ingest reads it (pass 2 locks its stage)
                os.close(lock_dir(self.path))
            remove_dead_partial(self.tmp)
            try:
                os.makedirs(self.tmp)
            except FileExistsError:
                raise _busy(self.tmp) from None
            except OSError as e:
                raise output_error(self.tmp, e) from e
            self._lock = lock_dir(self.tmp)  # released when the store is complete, or by the kernel if we die
            token = secrets.token_hex(8)
            storage.write_new_file(
                os.path.join(self.tmp, ATTEMPT_FILE), token.encode(), sync=False
            )  # synced at the publish
        # object stores: a lease (no locks there), and an attempt prefix of this writer's own (storage.begin)
        self._lease, self._own_lease = lease, lease is None and not self.location.local
        if self._own_lease:
            from streamfit import lease as leases

            self._lease = leases.take(self.location, "store")
        try:
            self.attempt = storage.begin(self.location, clear=False, what="store", scratch=scratch)
        except BaseException:
            self.release()
            raise
        self.tmp = self.attempt.location.path if self.location.local else self.attempt.location.url
        self.backend, self.multilabel, self.chunk_rows = backend, multilabel, chunk_rows
        self.n_outputs = n_outputs
        self.sink = ChunkSink(self.attempt.location, backend, multilabel, n_outputs, self.path, token)
        self._pending: list[tuple[sp.csr_matrix, object]] = []
        self._pending_rows = 0
        self.chunks: list[ChunkInfo] = []
        self.n_rows = 0
        self.nnz = 0
        self.max_index = -1
        self.class_rows = np.zeros(0, dtype=np.int64)  # multiclass: the rows written per class id so far

    def write_rows(self, X: sp.csr_matrix, labels) -> None:
        """Queue rows (CSR with sorted, unique indices) and their labels; write full chunks."""
        if X.shape[0] == 0:
            return
        self._pending.append((X, labels))
        self._pending_rows += X.shape[0]
        while self._pending_rows >= self.chunk_rows:
            self._flush(self.chunk_rows)

    def _flush(self, n: int) -> None:
        X, labels = stack_rows(self._pending, self.multilabel, self.n_outputs)
        rest = X.shape[0] - n
        self._pending = [(X[n:], labels[n:])] if rest else []
        self._pending_rows = rest
        cid = len(self.chunks)
        self._add(self._writing(lambda: self.sink.write(cid, self.n_rows, X[:n], labels[:n])))

    def _add(self, written: WrittenChunk) -> None:
        self.chunks.append(written.info)
        self.max_index = max(self.max_index, written.max_index)
        self.n_rows = written.info.row_stop
        self.nnz += written.info.nnz
        if written.class_rows is not None:
            more = written.class_rows
            if len(more) > len(self.class_rows):
                self.class_rows = np.pad(self.class_rows, (0, len(more) - len(self.class_rows)))
            self.class_rows[: len(more)] += more

    def add_written(self, written: WrittenChunk) -> None:
        """Take chunk `written.info.id`, written through `sink` by another process, into the
        store; chunks come in order, none queued by write_rows. StoreError when it is not where
        this process sees the store (a local --out written by workers on other machines)."""
        info = written.info
        if self._pending_rows or info.id != len(self.chunks) or info.row_start != self.n_rows:
            raise StoreError(f"internal error: chunk {info.id} of {self.path} written out of order; please report this")
        if self.location.local and not self.sink.exists(info.id):
            self.abort()
            raise StoreError(
                f"{self.path}: chunk {info.id}, written by a Dask worker, is not on this machine's disk: the workers "
                "write the store themselves, so with --scheduler --out must be a URL (s3://…) or a shared disk"
            )
        self._add(written)

    def close(
        self,
        *,
        n_features: int | None,
        classes: list[str],
        hashing: dict | None = None,
        transform: dict | None = None,
        source: dict | None = None,
        counts: dict | None = None,
        min_features: int = 0,
    ) -> Manifest:
        """Flush, write the manifest, and commit (local disk: sync and rename into place).
        n_features=None: largest index + 1, at least min_features (the width the inputs declare).
        A scratch store is not committed and stays locked until `discard`, so no other writer of
        PATH starts while its writer still reads it."""
        if self._pending_rows:
            self._flush(self._pending_rows)
        if n_features is None:
            n_features = max(self.max_index + 1, min_features)
        if self.max_index >= n_features:
            self.abort()
            raise StoreError(f"feature index {self.max_index} is out of range for n_features={n_features}")
        from streamfit import __version__

        if self.n_outputs is not None and len(classes) != self.n_outputs:
            self.abort()
            raise StoreError(f"{len(classes)} output names given for {self.n_outputs} regression targets")
        regression = self.n_outputs is not None
        multiclass = not regression and not self.multilabel
        if multiclass and len(self.class_rows) > len(classes):
            self.abort()
            raise StoreError(f"class id {len(self.class_rows) - 1} written, but only {len(classes)} classes given")
        class_rows = np.pad(self.class_rows, (0, len(classes) - len(self.class_rows))).tolist() if multiclass else None
        manifest = Manifest(
            backend=self.backend,
            n_rows=self.n_rows,
            n_features=int(n_features),
            nnz=int(self.nnz),
            task="regression" if regression else "multilabel" if self.multilabel else "multiclass",
            classes=[str(c) for c in classes],
            chunk_rows=self.chunk_rows,
            chunks=self.chunks,
            hashing=hashing,
            transform=transform or {},
            source=source or {},
            counts={**(counts or {}), "written": self.n_rows},
            target=numeric_target(self.n_rows, self.n_outputs) if self.n_outputs is not None else None,
            class_rows=class_rows,
            streamfit_version=__version__,
        )
        module = _backend(self.backend)
        if self.backend == "zarr":
            self._writing(lambda: module.close(self.attempt.location, manifest.to_json()))
        else:
            self._writing(
                lambda: module.close(self.attempt.location, manifest.to_json(), self.multilabel, self.n_outputs)
            )
        self._writing(lambda: self.attempt.location.join(MANIFEST).write_new(manifest.to_json().encode()))
        if self.sink.token is not None:  # every chunk is in: the token and staging area go
            self.attempt.location.join(ATTEMPT_FILE).remove()
            self.attempt.location.join(INCOMING_DIR).remove_tree()
        if self.scratch:  # read in place, then discarded: nothing to make durable or publish
            return manifest
        if not self.overwrite and present(self.location):  # written meanwhile by another process
            self.abort()
            raise StoreError(
                f"{self.path}: was written by another process while this one ran; pass --overwrite to replace "
                "it, or write to another --out"
            )
        # --overwrite of a store that a train reads (read_lock): refused, the old store kept;
        # behind a URL, a lease lost to another writer: refused, nothing of this one committed
        try:
            held = lock_dir(self.path) if self.location.local and os.path.isdir(self.path) else None
            if self._lease is not None:
                self._lease.check()
        except StreamfitError:
            self.abort()
            raise
        try:
            self._writing(self.attempt.commit)  # --overwrite: the old store until the commit
        finally:
            if held is not None:
                os.close(held)
            self.release()  # committed, or refused (the attempt deleted)
        return manifest

    @property
    def files(self) -> storage.Location:
        """Where the store's files are being written (a scratch store's stay there)."""
        return self.attempt.location

    def discard(self) -> None:
        """Delete a scratch store and release it: its files, and behind a URL every attempt under
        PATH (a dead writer's too; on local disk this writer deleted those when it started) and
        its lease with them, which stops being renewed first; a lease lost to another writer
        leaves PATH to it, and only this writer's attempt goes."""
        if self.location.local:
            self.attempt.abort()
        elif self._lease is not None and self._own_lease:
            self._lease.release(delete=False)
            if self._lease.lost:
                self.attempt.abort()
            else:
                self.location.remove_tree()
        else:
            self.location.remove_tree()
        self.release()

    def release(self) -> None:
        """Drop the lock (the flock follows the directory through the rename to PATH), and the
        lease behind a URL if this writer took it."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        if self._lease is not None and self._own_lease:
            self._lease.release()

    def write_file(self, name: str, data: bytes) -> None:
        """An extra file of the store (e.g. idf.npy), listed by the caller in the manifest."""
        self._writing(lambda: self.attempt.location.join(name).write_new(data))

    def _writing(self, write):
        """Run a write into the store; on an OSError (disk full, read-only) abort and raise OutputError."""
        try:
            return write()
        except OSError as e:
            self.abort()
            raise output_error(self.tmp, e) from e

    def abort(self) -> None:
        """Delete the incomplete store and release it."""
        self.attempt.abort()
        self.release()


def present(location: storage.Location) -> bool:
    """Whether something is at `location` that a new store must not silently replace: anything
    on local disk, a committed store on an object store."""
    return location.exists() if location.local else _committed(location) is not None


def remove_dead_partial(path: str) -> None:
    """Delete the local `NAME.partial` directory `path` if a dead writer left it (its lock is
    free); StoreError (`_busy`) if a live writer holds it; nothing if there is none."""
    if os.path.exists(path):
        stale = lock_dir(path)
        shutil.rmtree(path)
        os.close(stale)


def lock_dir(path: str, *, shared: bool = False) -> int:
    """An exclusive advisory lock (flock) on directory `path`, held through the returned file
    descriptor; the kernel drops it when the holder exits or dies. StoreError if a live
    process holds it. shared: a reader's lock (read_lock), which readers share and which
    excludes the exclusive one."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, (fcntl.LOCK_SH if shared else fcntl.LOCK_EX) | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        if shared:
            raise StoreError(
                f"{path}: an ingest --overwrite is replacing this store right now; wait for it to finish"
            ) from None
        raise _busy(path) from None
    except OSError:
        os.close(fd)
        raise
    return fd


def _busy(path: str) -> StoreError:
    """The error of a second writer: named by the store (--out), with the locked path when it is
    a staging directory (`OUT.partial`, or ingest's pass-1 stage `OUT.pass1.partial.partial`)."""
    store = path
    while store.endswith(".partial"):
        store = store.removesuffix(".partial")
    store = store.removesuffix(".pass1")
    if store == path:  # the store itself: its readers hold it too (read_lock)
        return StoreError(
            f"{path}: in use by another streamfit process right now (a train reading it, or an ingest "
            "writing it); wait for it to finish, or write to another --out"
        )
    return StoreError(
        f"{store}: another streamfit ingest is writing this store right now ({path} is locked); wait for it "
        "to finish, or write to another --out"
    )


def read_lock(path: str) -> int | None:
    """A shared advisory lock (flock) on the local store directory `path`, held by a reader
    (train) through the returned descriptor; None for a store behind a URL or not a directory.
    `ingest --overwrite` of the same PATH takes the exclusive lock at its start and again just
    before it replaces the store (StoreWriter), so a retried job's ingest cannot delete the store
    under a train that reads it (it failed then, e.g. "idf.npy is missing"). StoreError while an
    --overwrite is replacing the store right now."""
    if storage.is_url(path) or not os.path.isdir(path):
        return None
    try:
        return lock_dir(path, shared=True)
    except OSError:  # a filesystem without flock: read unguarded (as the run directory's lock)
        return None
