"""Resumable solver state: per-sample arrays chunk-aligned with the data, and atomic
step checkpoints.

Layout of a run directory's `checkpoints/`:

    state/<name>/v<version>/chunk-<id>.<sha256[:16]>.npy   per-sample state (residuals, margins, duals)
    step-<step>/meta.json                                  counters, RNG state, config hash, store
                                                           fingerprint, versions of the state arrays
    step-<step>/arrays.npz                                 weights and other driver-side arrays
    LATEST                                                 the name of the newest complete step

The run directory is a local path or a URL; every file goes through streamfit.storage. A task
that reads data chunk i reads `state/<name>/v<t>` chunk i and writes `v<t+1>` chunk i (whole:
temporary name and rename on disk, without an fsync; one PUT on an object store; the file name
carries its digest). A step directory is committed by storage's protocol (local: renamed from
`.partial` after fsync; object store: `step-<step>/COMMITTED` naming its attempt prefix), and the
step is complete once LATEST, written after that commit, names it. Resume opens LATEST, checks
every digest, and deletes whatever newer, incomplete state it finds.

Durability of the per-sample state (`ChunkState.write`, `ChunkState.sync`, `Checkpointer.save`).
A task's write is not fsynced: most versions are deleted a step or two later without any
checkpoint counting them, and an fsync in every chunk task (a 2 MiB file per chunk and pass,
16 workers on one disk) was per-task work that grew with the workers. Instead
`Checkpointer.save` syncs, on local disk, every state file of the versions the step refers to
that this run has not synced yet, with their version directories (and, for a version or name
new to the run, the directory above), in a thread while it writes and commits the step (itself
synced): the two overlap, as the state's sync (64 files of 1.9 MiB at 16 workers) waits on the
disk and the step's write is mostly the arrays' hashing. Once both are done it writes LATEST
(fsync, then its directory's); a step whose state failed to sync is deleted again and the
save fails, leaving LATEST on the previous step. So:
- a process killed at any point (kill -9 of the driver or a worker) loses nothing written: the
  kernel's page cache holds every completed write, and a write is whole or absent (the rename);
- after a power loss, LATEST on disk names a step only if that step's files and the state files
  it counts reached the disk before it (the fsyncs above completed before LATEST was written).
  What a power loss can leave damaged (a file missing, empty or cut short under its final name)
  is only state no durable LATEST counts: versions written after the last save, which the
  resume deletes as unreferenced (`keep_only`), and entries appended after it, which
  `restore` deletes (chunk ids beyond the count). A file a checkpoint counts is never written
  again (a version it refers to is only appended to: last paragraph), so a synced file is not
  replaced by an unsynced one; a resumed run, which may write again what a killed save synced
  but never committed, counts nothing as synced (`begin_run`). The resume therefore reads
  only synced files, checks their digests, and replays the steps since, to the same model.
On an object store a PUT is durable when it returns, and `sync` does nothing.

Reads of what this process wrote (`_WRITTEN`). Chunk affinity (streamfit.engine.chunk_workers)
makes the worker that wrote chunk i of version t + 1 the one that reads it in the next pass, so
each process keeps the arrays it wrote (one per (name, chunk): the newest version; at most
`STREAMFIT_STATE_CACHE_MB` in all, default 256), and a read of one of them skips the file read
and its SHA-256: it gets a copy of the bytes that the file holds (the array is rebuilt from
np.save's output, not the caller's array, which the caller may change after the write). A
task's last read of a version (`ChunkState.read_private(last=True)`: it writes the next one)
takes the kept array itself instead, and it is kept no longer. The entries belong to one run (`ChunkState.begin_run`: a fresh id at each start or resume of a run,
carried to the workers with the ChunkState), and within a run a (name, version, chunk) file is
written with one content only (versions only grow; a task run again writes the same bytes), so
a cached array is the file's content. Anything else (another run's versions, a chunk written by
another worker, a resume's verification) reads the file and checks its digest.

What a killed run left in `state/` is deleted before a run writes any state (`Checkpointer.latest`
on resume, the driver's `keep_only(set())` on a fresh run): every version that no kept checkpoint
refers to, and, in the versions they do refer to, the files of chunks they do not count (entries
appended after the checkpoint). After that the run writes only versions and chunks that have no
file yet (a version a checkpoint refers to is never written again, only appended to), so a write
is one PUT, with no listing of its directory; and `keep_only` knows the versions there from its
first listing and the versions kept since, so a save lists nothing either.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import secrets
import threading
import time
import zipfile
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from streamfit import environment, storage
from streamfit.errors import CheckpointError, StreamfitError, output_error

CHECKPOINT_VERSION = 2  # 2: typed solver state (streamfit.solvers.driver) and a digest over meta.json
# bytes of per-sample arrays a process keeps of those it wrote, for its own next reads (_WRITTEN)
STATE_CACHE_BYTES = environment.mebibytes("STREAMFIT_STATE_CACHE_MB")


def config_hash(config: dict) -> str:
    """SHA-256 of a canonical JSON rendering of the settings that determine the model."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


class ChunkState:
    """Versioned per-sample arrays, one file per (name, version, chunk). With root=None the
    arrays live in a dict (in-memory estimators); the interface is the same."""

    def __init__(self, root: str | None, *, run_id: str | None = None):
        self.root = root  # a local path or URL (picklable); None: in memory
        self._location = storage.resolve(root) if root is not None else None
        self._memory: dict[tuple[str, int, int], np.ndarray] = {}
        # the (name, version) directories under root as far as keep_only knows them: None until
        # its first call lists them; then what it kept, and every version kept since (the driver
        # keeps the versions the state refers to after each step, so every version written)
        self._versions: set[tuple[str, int]] | None = None
        # the run whose writes this process's reads may take from _WRITTEN (begin_run)
        self._run_id = run_id or secrets.token_hex(8)
        # what `sync` made durable: the chunk files of each (name, version), and the names
        self._synced: dict[tuple[str, int], set[str]] = {}
        self._synced_names: set[str] = set()

    def __reduce__(self):
        if self.root is None:
            raise TypeError("in-memory ChunkState cannot be sent to Dask workers; give the run a directory")
        return (_unpickled_state, (self.root, self._run_id))

    def begin_run(self) -> None:
        """A run (fresh or resumed) starts: a new run id, so that no array cached under an
        earlier one (by an earlier call with this object, in this process or a worker) is read
        back in place of a file this run writes or a resume deleted (module docstring); and
        nothing counts as synced (a killed save may have synced files that this run replaces)."""
        self._run_id = secrets.token_hex(8)
        self._synced.clear()
        self._synced_names.clear()

    def _dir(self, name: str, version: int) -> storage.Location:
        assert self._location is not None, "in-memory state has no files"
        return self._location.join(name, f"v{version:06d}")

    def _find(self, name: str, version: int, chunk_id: int, *, fresh: bool = False) -> storage.Location:
        """The file of a chunk, from the version directory's listing (`_listing`; fresh: listed again)."""
        found = _listing(self._dir(name, version), fresh=fresh).get(chunk_id)
        if found is None and not fresh:  # written since the listing
            return self._find(name, version, chunk_id, fresh=True)
        if found is None:
            raise CheckpointError(f"{self._dir(name, version)}: state chunk {chunk_id} of {name!r} is missing")
        return found

    def write(self, name: str, version: int, chunk_id: int, array: np.ndarray, *, cache: bool = True) -> None:
        """Writes chunk `chunk_id` of a version whole (one PUT on an object store; on local disk
        a rename, not fsynced: `sync` makes it durable before a checkpoint counts it). The chunk
        must have no file yet, or one of the same bytes (a task run again): a file a killed run
        left is deleted before the run writes (see the module docstring), not here. cache: keep
        the array for this process's next read of it (_WRITTEN); False for arrays only a resume
        reads (the driver's append-only entries)."""
        if self.root is None:
            self._memory[(name, version, chunk_id)] = array.copy()  # the caller may change its array, as with a file
            return
        array = np.ascontiguousarray(array)
        data = _npy_bytes(array)
        digest = hashlib.sha256(data).hexdigest()[:16]
        d = self._dir(name, version)
        d.makedirs()
        d.join(f"chunk-{chunk_id:06d}.{digest}.npy").write_bytes(data, sync=False)
        if cache:
            _keep_written(self._run_id, name, version, chunk_id, _npy_view(data, array))

    def read(self, name: str, version: int, chunk_id: int) -> np.ndarray:
        """Chunk `chunk_id` of a version: a copy of what this process wrote in this run when it
        keeps it (_WRITTEN), else the file, its digest checked. Writable, C-ordered."""
        if self.root is None:
            try:
                return self._memory[(name, version, chunk_id)]
            except KeyError:
                raise CheckpointError(f"state chunk {chunk_id} of {name!r} v{version} is missing") from None
        kept = _written(self._run_id, name, version, chunk_id)
        if kept is not None:
            return kept.copy()
        return self._read_file(name, version, chunk_id)

    def read_private(self, name: str, version: int, chunk_id: int, *, last: bool = False) -> np.ndarray:
        """`read`'s array, for a caller that changes it in place: from a file or this process's
        kept arrays it is a fresh copy already; in memory (root=None) the stored array is copied.
        `last`: this process reads the version of this chunk no more (a task that writes the
        next one), so a kept array is handed over instead of copied: no second array of it, and
        the bytes it kept are the caller's (a later read of it reads the file)."""
        if self.root is None:
            return self.read(name, version, chunk_id).copy()
        if last:
            taken = _take_written(self._run_id, name, version, chunk_id)
            if taken is not None:
                return taken
        return self.read(name, version, chunk_id)

    def _read_file(self, name: str, version: int, chunk_id: int) -> np.ndarray:
        """Chunk `chunk_id` of a version from its file, its digest checked (CheckpointError if
        missing or damaged)."""
        found = self._find(name, version, chunk_id)
        try:
            data = found.read_bytes()
        except FileNotFoundError:  # replaced since the listing (a resumed run rewrote its version)
            found = self._find(name, version, chunk_id, fresh=True)
            data = found.read_bytes()
        path = found.url
        if hashlib.sha256(data).hexdigest()[:16] != found.name.rsplit(".", 2)[-2]:
            raise CheckpointError(f"{path}: fails its checksum; the checkpoint is damaged")
        try:
            return np.load(io.BytesIO(data), allow_pickle=False)
        except Exception as e:  # a .npy error of any kind, object arrays and a cut-short file included
            raise CheckpointError(f"{path}: unreadable ({e}); the checkpoint is damaged") from e

    def restore(self, name: str, version: int, n_chunks: int) -> None:
        """Before a run resumes from a checkpoint that counts `n_chunks` chunks of this version:
        checks every one (CheckpointError if missing or damaged), and deletes the version's files
        of other chunks (entries that a killed run appended after the checkpoint, which the
        resumed run writes again). One listing of the version's directory, fresh."""
        if self.root is None:
            for i in range(n_chunks):
                self.read(name, version, i)
            return
        directory = self._dir(name, version)
        counted = {}
        for f in directory.glob("chunk-*.*.npy"):
            if _chunk_id(f) < n_chunks:
                counted[_chunk_id(f)] = f
            else:
                f.remove()
        _remember(directory, counted)
        self._synced.pop((name, version), None)  # a file deleted here may be written again, unsynced
        for i in range(n_chunks):
            self._read_file(name, version, i)

    def sync(self, versions: Iterable[tuple[str, int]]) -> None:
        """Makes the state files of `versions` ((name, version) pairs) durable, before a
        checkpoint that refers to them is committed (module docstring): on local disk fsyncs
        their chunk files that this object has not synced yet, their version directories, and
        for a version (a name) it had not synced, the directory above it (`state/`), up to
        storage.SYNC_THREADS at once; OSError on failure. Nothing on an object store (a PUT is
        durable) or in memory."""
        if self._location is None or not self._location.local:
            return
        paths: list[str] = []
        synced: dict[tuple[str, int], set[str]] = {}
        for name, version in sorted(versions):
            directory = self._dir(name, version).path
            done = self._synced.get((name, version), set())
            new = [f for f in os.listdir(directory) if f.startswith("chunk-") and f.endswith(".npy") and f not in done]
            if not new:
                continue
            paths += [os.path.join(directory, f) for f in new] + [directory]
            if (name, version) not in self._synced:
                paths.append(os.path.dirname(directory))
            if name not in self._synced_names:
                paths.append(self._location.path)
            synced[(name, version)] = done | set(new)
        storage.sync_paths(sorted(set(paths)))
        self._synced.update(synced)
        self._synced_names.update(name for name, _ in synced)

    def keep_only(self, keep: set[tuple[str, int]]) -> None:
        """Delete every version not in `keep` (pairs of name, version). The first call lists
        the versions there (one LIST on an object store); later calls know them: those kept
        before, which must include every version written since (the driver keeps the versions
        the state refers to after every step)."""
        if self._location is None:
            for key in [k for k in self._memory if (k[0], k[1]) not in keep]:
                del self._memory[key]
            return
        if self._versions is None:
            self._versions = set()
            for d in self._location.glob("*/v*"):
                self._versions.add((d.path.rstrip("/").split("/")[-2], int(d.name[1:])))
        for name, version in sorted(self._versions - keep):
            self._dir(name, version).remove_tree()
            self._synced.pop((name, version), None)
        self._versions = set(keep)


def _unpickled_state(root: str, run_id: str) -> ChunkState:
    """A ChunkState sent to a Dask worker: the same root and run id (reads hit what the worker wrote in this run)."""
    return ChunkState(root, run_id=run_id)


# (name, chunk id) -> (version, array) of the per-sample arrays this process wrote in run
# `_WRITTEN_RUN` (module docstring): read-only arrays over the .npy bytes written; the newest
# version of each; admitted while they fit in STATE_CACHE_BYTES (none is evicted for another:
# an evicting cache would only thrash under cyclic passes, as the store's chunk cache notes)
_WRITTEN: dict[tuple[str, int], tuple[int, np.ndarray]] = {}
_WRITTEN_RUN: str | None = None
_WRITTEN_BYTES = 0
_WRITTEN_LOCK = threading.Lock()  # a worker may run several task threads


def _npy_bytes(array: np.ndarray) -> bytearray:
    """np.save's output for the C-ordered `array` (its header, then its bytes), one copy of the
    array's bytes allocated at its size; a bytearray, so that a kept array handed over
    (`_take_written`) is writable."""
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(array))
    head = header.getvalue()
    data = bytearray(len(head) + array.nbytes)
    out = np.frombuffer(data, dtype=np.uint8)
    out[: len(head)] = np.frombuffer(head, dtype=np.uint8)
    out[len(head) :] = array.reshape(-1).view(np.uint8)
    return data


def _npy_view(data: bytearray, array: np.ndarray) -> np.ndarray:
    """The array that `data`, np.save's output for the C-ordered `array`, holds: a read-only view
    of its last array.nbytes bytes (np.save writes the header, then the array's bytes in C order)."""
    offset = len(data) - array.nbytes
    view = np.frombuffer(data, dtype=array.dtype, count=array.size, offset=offset).reshape(array.shape)
    view.flags.writeable = False
    return view


def _keep_written(run_id: str, name: str, version: int, chunk_id: int, array: np.ndarray) -> None:
    """Keeps `array` (read-only) as (name, version, chunk_id) of run `run_id`: entries of another
    run are dropped; an older version of the same chunk is replaced; a new chunk is kept only if
    it fits in STATE_CACHE_BYTES."""
    global _WRITTEN_RUN, _WRITTEN_BYTES
    with _WRITTEN_LOCK:
        if run_id != _WRITTEN_RUN:
            _WRITTEN.clear()
            _WRITTEN_RUN, _WRITTEN_BYTES = run_id, 0
        key = (name, chunk_id)
        old = _WRITTEN.get(key)
        if old is not None:
            if old[0] > version:
                return
            del _WRITTEN[key]
            _WRITTEN_BYTES -= old[1].nbytes
        if _WRITTEN_BYTES + array.nbytes <= STATE_CACHE_BYTES:
            _WRITTEN[key] = (version, array)
            _WRITTEN_BYTES += array.nbytes


def _take_written(run_id: str, name: str, version: int, chunk_id: int) -> np.ndarray | None:
    """`_written`'s array, dropped from _WRITTEN and made writable (its bytes are no one else's)."""
    global _WRITTEN_BYTES
    with _WRITTEN_LOCK:
        kept = _WRITTEN.get((name, chunk_id)) if run_id == _WRITTEN_RUN else None
        if kept is None or kept[0] != version:
            return None
        del _WRITTEN[(name, chunk_id)]
        _WRITTEN_BYTES -= kept[1].nbytes
    array = kept[1]
    array.flags.writeable = True
    return array


def _written(run_id: str, name: str, version: int, chunk_id: int) -> np.ndarray | None:
    """The array this process wrote as (name, version, chunk_id) in run `run_id`, if kept."""
    with _WRITTEN_LOCK:
        if run_id != _WRITTEN_RUN:
            return None
        kept = _WRITTEN.get((name, chunk_id))
    return kept[1] if kept is not None and kept[0] == version else None


# version directory -> {chunk id: file}, the listings ChunkState.read found its files by (per process:
# the driver and each Dask worker). A version is written once per run, so a listing stays good until a
# resumed run writes it again; a file missing from it, or gone, is listed again (`_find`, `read`).
_LISTINGS: dict[str, dict[int, storage.Location]] = {}
_MAX_LISTINGS = 256


def _listing(directory: storage.Location, *, fresh: bool) -> dict[int, storage.Location]:
    """{chunk id: file} of a version directory: one LIST on an object store, cached in _LISTINGS
    (instead of a LIST per chunk read); `fresh`: listed again."""
    found = None if fresh else _LISTINGS.get(directory.url)
    if found is None:
        found = {_chunk_id(f): f for f in directory.glob("chunk-*.*.npy")}
        _remember(directory, found)
    return found


def _remember(directory: storage.Location, found: dict[int, storage.Location]) -> None:
    """Caches {chunk id: file} as the listing of a version directory."""
    if len(_LISTINGS) >= _MAX_LISTINGS:
        _LISTINGS.clear()
    _LISTINGS[directory.url] = found


def _chunk_id(file: storage.Location) -> int:
    """The chunk id of a state file, `chunk-<id>.<digest>.npy`."""
    return int(file.name.split(".")[0][len("chunk-") :])


class Checkpoint:
    def __init__(self, step: int, meta: dict, arrays: dict[str, np.ndarray], state_versions: dict[str, int]):
        self.step, self.meta, self.arrays, self.state_versions = step, meta, arrays, state_versions


class Checkpointer:
    """Saves and restores solver state for one run. `run_dir=None`: nothing goes to disk,
    per-sample state lives in memory, and old versions are still dropped at each save.
    `time_limit` (seconds from now): `past_deadline()` turns True after it; the solver driver
    checks it after each save, so a run stops cleanly at a complete checkpoint."""

    def __init__(
        self,
        run_dir: str | None,
        *,
        config: dict,
        store_fingerprint: str,
        keep: int = 2,
        time_limit: float | None = None,
    ):
        if time_limit is not None and run_dir is None:
            raise ValueError("a time limit needs a run directory to resume from")
        self.run_dir = run_dir
        self.time_limit = time_limit
        self._deadline = None if time_limit is None else time.monotonic() + time_limit
        self.root = storage.resolve(run_dir).join("checkpoints") if run_dir else None
        self.config = json.loads(json.dumps(config, default=str))  # as meta.json stores it (and config_hash reads it)
        self.config_hash = config_hash(config)
        self.store_fingerprint = store_fingerprint
        self.keep = keep
        if self.root:
            self.root.join("state").makedirs()
        self.state = ChunkState(self.root.join("state").url if self.root else None)
        self._kept: list[Checkpoint] = []
        # what this checkpointer knows of its directory (one writer owns a run directory), so that a
        # save reads nothing back (on an object store each read is a request): the complete steps
        # ({step: where their files are}, listed once, then kept up to date by save and the garbage
        # collection), their state versions as their meta.json records them, the step LATEST names
        # once this checkpointer wrote it, and whether the killed attempts were swept
        self._steps: dict[int, storage.Location] | None = None
        self._step_versions: dict[int, dict[str, int]] = {}
        self._latest_written: int | None = None
        self._swept = False

    def _path(self, name: str) -> storage.Location:
        """`name` inside the checkpoint directory (runs without one keep their checkpoints in memory)."""
        assert self.root is not None, "an in-memory checkpointer has no files"
        return self.root.join(name)

    def _step_dir(self, step: int) -> storage.Location:
        return self._path(f"step-{step:06d}")

    def _step_files(self, step: int) -> storage.Location:
        """Where the files of complete step `step` are (storage.committed); CheckpointError if none,
        naming a step copied file by file to or from a URL (storage.copied_file_by_file)."""
        try:
            found = storage.committed(self._step_dir(step))
        except StreamfitError as e:
            raise CheckpointError(f"{e}; the checkpoint is damaged") from None
        if found is None or (found.local and not found.join("meta.json").exists()):
            redo = "resume the run where it was written, or start over with --overwrite"
            copied = storage.copied_file_by_file(
                self._step_dir(step), "meta.json", "checkpoint", url_fix=redo, local_fix=redo
            )
            if copied is not None:  # a run directory copied file by file, to or from a URL
                raise CheckpointError(copied)
        if found is None:
            raise CheckpointError(f"{self._step_dir(step)}: the checkpoint LATEST names is missing or incomplete")
        return found

    def describe(self, step: int) -> str:
        """The checkpoint of `step`, as an error message names it."""
        return self._step_dir(step).url if self.root else f"the in-memory checkpoint of step {step}"

    def past_deadline(self) -> bool:
        return self._deadline is not None and time.monotonic() >= self._deadline

    def save(
        self,
        step: int,
        meta: dict,
        arrays: dict[str, np.ndarray],
        state_versions: dict[str, int],
        state_counts: dict[str, int] | None = None,
    ) -> None:
        """`state_counts`: how many "chunks" a state holds when they are not the data's chunks
        (append-only state such as one file per stage); resume verifies that many."""
        ckpt = Checkpoint(step, meta, arrays, dict(state_versions))
        self._kept = (self._kept + [ckpt])[-self.keep :]
        if self.root is None:
            self.state.keep_only({kv for c in self._kept for kv in c.state_versions.items()})
            return
        # the state files the step counts are synced while the step's own files are written and
        # committed, and both are on disk before LATEST names the step (module docstring)
        with ThreadPoolExecutor(1) as pool:
            state_synced = pool.submit(self.state.sync, state_versions.items())
            attempt, recorded_versions = self._commit_step(step, meta, arrays, state_versions, state_counts)
            try:
                state_synced.result()
            except BaseException as e:  # committed, but counting state that may not be on disk
                attempt.files.remove_tree()
                if isinstance(e, OSError):
                    raise output_error(self.state.root or "", e) from e
                raise
        self._path("LATEST").write_bytes(json.dumps({"step": step}).encode())
        self._latest_written = step
        self._listed_steps()[step] = attempt.files
        self._step_versions[step] = recorded_versions
        self._collect_garbage()

    def _commit_step(
        self,
        step: int,
        meta: dict,
        arrays: dict[str, np.ndarray],
        state_versions: dict[str, int],
        state_counts: dict[str, int] | None,
    ) -> tuple[storage.Attempt, dict[str, int]]:
        """Writes and commits the directory of step `step` (arrays.npz, then meta.json, the
        record with the digests); on any error nothing of it is left. Returns the attempt and
        the state versions as meta.json records them."""
        attempt = storage.begin(self._step_dir(step), what="checkpoint of the run")
        try:
            attempt.location.makedirs()
            arrays_sha256 = _write_arrays(attempt.location.join("arrays.npz"), arrays)
            record = {
                "checkpoint_version": CHECKPOINT_VERSION,
                "step": step,
                "config_hash": self.config_hash,
                "config": self.config,
                "store_fingerprint": self.store_fingerprint,
                "state_versions": state_versions,
                "state_counts": state_counts or {},
                "arrays_sha256": arrays_sha256,
                "meta": meta,
            }
            record = json.loads(json.dumps(record, default=_json_default))
            record["record_sha256"] = _record_digest(record)
            attempt.location.join("meta.json").write_new(json.dumps(record, indent=1).encode())
            attempt.commit()
        except OSError as e:  # disk full, read-only: LATEST still names the previous step
            attempt.abort()
            raise output_error(attempt.location.url, e) from e
        except BaseException:  # any other error (a value meta.json cannot hold, an interrupt): no attempt left
            attempt.abort()
            raise
        return attempt, record["state_versions"]

    def _listed_steps(self) -> dict[int, storage.Location]:
        """{step: where its files are} of the complete steps: listed on first use (on an object
        store a LIST and a GET of each step's COMMITTED), then kept up to date by save and
        _collect_garbage."""
        if self._steps is None:
            assert self.root is not None, "an in-memory checkpointer has no step directories"
            self._steps = {}
            for d in self.root.glob("step-*"):
                files = None if d.name.endswith(".partial") else storage.committed(d)
                if files is not None:
                    self._steps[int(d.name.split("-")[1])] = files
        return self._steps

    def _complete_steps(self) -> list[int]:
        return sorted(self._listed_steps())

    def _state_versions(self, step: int) -> dict[str, int]:
        """The state versions complete step `step` refers to (its meta.json, read once)."""
        if step not in self._step_versions:
            meta = self._listed_steps()[step].join("meta.json")
            self._step_versions[step] = json.loads(meta.read_bytes())["state_versions"]
        return self._step_versions[step]

    def referenced_versions(self) -> set[tuple[str, int]]:
        """The per-sample (name, version) pairs that the kept checkpoints refer to."""
        if self.root is None:
            return {kv for c in self._kept for kv in c.state_versions.items()}
        latest = self.latest_step()
        steps = [s for s in self._complete_steps() if latest is None or s <= latest][-self.keep :]
        keep = set()
        for s in steps:
            keep |= set(self._state_versions(s).items())
        return keep

    def _collect_garbage(self) -> None:
        """Keep the newest `keep` complete steps (up to LATEST) and the state they reference;
        the first time, also delete what killed saves left (`.partial` directories, attempts that
        no COMMITTED names: later ones of this checkpointer's own steps go with their commit)."""
        latest = self.latest_step()
        steps = [s for s in self._complete_steps() if latest is None or s <= latest]
        for s in self._complete_steps():
            if s not in steps[-self.keep :]:
                self._step_dir(s).remove_tree()
                del self._listed_steps()[s]
                self._step_versions.pop(s, None)
        assert self.root is not None, "an in-memory checkpointer has no step directories"
        if not self._swept:
            self._sweep_killed_saves()
            self._swept = True
        self.state.keep_only(self.referenced_versions())

    def _sweep_killed_saves(self) -> None:
        assert self.root is not None, "an in-memory checkpointer has no step directories"
        for d in self.root.glob("step-*"):
            if d.name.endswith(".partial"):
                d.remove_tree()
            elif not d.local:  # attempts that no COMMITTED names (killed saves)
                named = storage.committed(d)
                for attempt in d.glob(f"{storage.ATTEMPT_PREFIX}*"):
                    if named is None or attempt.name != named.name:
                        attempt.remove_tree()

    def latest_step(self) -> int | None:
        """The step LATEST names, or None before the first checkpoint."""
        if self._latest_written is not None:
            return self._latest_written
        latest = self._path("LATEST")
        path = latest.url
        if not latest.exists():
            return None
        try:
            return int(json.loads(latest.read_bytes())["step"])
        except (ValueError, KeyError, TypeError, OSError) as e:
            raise CheckpointError(f"{path}: unreadable ({e}); the checkpoint directory is damaged") from e

    def latest(self, n_chunks: int) -> Checkpoint | None:
        """The newest complete checkpoint, fully verified, or None if the run has none. In
        memory (run_dir None): the newest one saved through this object."""
        if self.root is None:
            return self._kept[-1] if self._kept else None
        step = self.latest_step()
        if step is None:
            return None
        files = self._step_files(step)
        d = self._step_dir(step).url
        record = None
        try:
            record = json.loads(files.join("meta.json").read_bytes())
            data = files.join("arrays.npz").read_bytes()
        except FileNotFoundError as e:
            missing = "arrays.npz" if record is not None else "meta.json"
            raise CheckpointError(
                f"{d}: a checkpoint without its {missing} (a copy of the run directory cut short, or damaged); "
                "copy the run directory again, or start over with --overwrite"
            ) from e
        except (OSError, ValueError) as e:
            raise CheckpointError(f"{d}: unreadable checkpoint ({e})") from e
        if not isinstance(record, dict) or record.get("checkpoint_version") != CHECKPOINT_VERSION:
            version = record.get("checkpoint_version") if isinstance(record, dict) else None
            raise CheckpointError(
                f"{d}/meta.json: checkpoint format {version!r}, this streamfit reads "
                f"{CHECKPOINT_VERSION}; finish the run with the streamfit that started it, or start "
                "over with --overwrite"
            )
        if record.get("record_sha256") != _record_digest(record):
            raise CheckpointError(
                f"{d}/meta.json: fails its checksum (edited or damaged); restore it, or start over with --overwrite"
            )
        if hashlib.sha256(data).hexdigest() != record["arrays_sha256"]:
            raise CheckpointError(f"{d}/arrays.npz: fails its checksum; the checkpoint is damaged")
        if record["config_hash"] != self.config_hash:
            then = record.get("config")
            added = _added_params(then, self.config)
            if added:
                raise CheckpointError(
                    f"{d}: was written by an earlier streamfit, whose {self.config['solver']} had no parameter "
                    f"{', '.join(added)}; finish the run with the streamfit that started it, or start "
                    "over with --overwrite (or in another --out directory)"
                )
            raise CheckpointError(
                f"{d}: was written with a different solver configuration{_config_changes(then, self.config)}; "
                "resume with the run's own settings (repeat its --solver, -p options or --config), or start over "
                "with --overwrite (or in another --out directory)"
            )
        if record["store_fingerprint"] != self.store_fingerprint:
            raise CheckpointError(f"{d}: was written for a different training store; resume on the same store")
        counts = record.get("state_counts", {})
        for name, version in record["state_versions"].items():
            self.state.restore(name, version, counts.get(name, n_chunks))
        try:
            with np.load(io.BytesIO(data), allow_pickle=False) as z:
                arrays = {k: z[k] for k in z.files}
        except Exception as e:  # a zip or .npy error of any kind, object arrays included
            raise CheckpointError(f"{d}/arrays.npz: unreadable ({e}); start over with --overwrite") from e
        self._collect_garbage()  # drop incomplete steps and state newer than LATEST
        ckpt = Checkpoint(step, record["meta"], arrays, record["state_versions"])
        self._kept = [ckpt]
        return ckpt


class _HashingWriter:
    """A write-only, unseekable binary file that hashes (SHA-256) the bytes written to `out`
    as they pass, so the bytes are hashed in the same pass that writes them. zipfile, finding it
    unseekable (`seek` fails), writes each member's sizes and CRC after its data (a data
    descriptor) instead of going back to its header."""

    def __init__(self, out):
        self.out, self.sha256, self.written = out, hashlib.sha256(), 0

    def write(self, data) -> int:
        self.sha256.update(data)
        self.written += len(data)
        return self.out.write(data)

    def tell(self) -> int:
        return self.written

    def seek(self, *args):
        raise io.UnsupportedOperation("seek")

    def flush(self) -> None:
        self.out.flush()


def _write_arrays(file: storage.Location, arrays: dict[str, np.ndarray]) -> str:
    """Writes `arrays` to the new file `file` (inside an attempt) as an uncompressed .npz that
    np.load reads: one member NAME.npy per array, as np.savez names them, pickles refused;
    returns the SHA-256 of the file's bytes. On local disk the zip goes straight to the file,
    hashed as it is written (one pass over the bytes, no copy of the file in memory); on an
    object store it is built in memory and sent in one PUT. The bytes differ from np.savez's
    (data descriptors after the members), the arrays do not: `latest` reads either."""
    if file.local:
        digest: list[str] = []
        storage.write_new_file(file.path, lambda f: digest.append(_write_npz(f, arrays)), sync=False)
        return digest[0]
    buf = io.BytesIO()
    sha256 = _write_npz(buf, arrays)
    file.write_new(buf.getvalue())
    return sha256


def _write_npz(out, arrays: dict[str, np.ndarray]) -> str:
    """The .npz of `_write_arrays` written to the binary file `out`; returns its SHA-256."""
    writer = _HashingWriter(out)
    with zipfile.ZipFile(writer, "w", zipfile.ZIP_STORED, allowZip64=True) as z:  # type: ignore[call-overload]  # a file-like object zipfile writes to
        for name, array in arrays.items():
            with z.open(f"{name}.npy", "w", force_zip64=True) as member:
                np.lib.format.write_array(member, np.asanyarray(array), allow_pickle=False)
    return writer.sha256.hexdigest()


def _config_changes(then: dict | None, now: dict) -> str:
    """': n_passes 2 then, 3 now; …', naming what differs between a checkpoint's config and this
    run's ('' for checkpoints written before configs were recorded)."""
    if then is None:
        return ""
    if then.get("solver") != now.get("solver"):
        return f": solver {then.get('solver')!r} then, {now.get('solver')!r} now"
    old, new = then.get("params", {}), now.get("params", {})
    changed = [
        f"{k} {old.get(k)!r} then, {new.get(k)!r} now"
        for k in sorted(old.keys() | new.keys())
        if old.get(k) != new.get(k)
    ]
    changed += [  # settings beside the parameters (the --valid store a solver reads: its fingerprint)
        f"{k} {then.get(k)!r} then, {now.get(k)!r} now"
        for k in sorted((then.keys() | now.keys()) - {"solver", "params"})
        if then.get(k) != now.get(k)
    ]
    return ": " + "; ".join(changed) if changed else ""


def _added_params(then: dict | None, now: dict) -> list[str]:
    """The solver parameters this run has and a checkpoint's config (of the same solver) lacks:
    parameters added to the solver by a later streamfit."""
    if then is None or then.get("solver") != now.get("solver"):
        return []
    return sorted(now.get("params", {}).keys() - then.get("params", {}).keys())


def _record_digest(record: dict) -> str:
    """SHA-256 of a step record's canonical JSON, without its own digest field."""
    body = {k: v for k, v in record.items() if k != "record_sha256"}
    return hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _json_default(x):
    if isinstance(x, np.integer):
        return int(x)
    if isinstance(x, np.floating):
        return float(x)
    if isinstance(x, np.ndarray):
        return x.tolist()
    raise TypeError(f"not JSON serializable: {type(x)}")
