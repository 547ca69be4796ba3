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
temporary name, fsync and rename on disk, one PUT on an object store; the file name carries its
digest). A step directory is committed by storage's protocol (local: renamed from `.partial`
after fsync; object store: `step-<step>/COMMITTED` naming its attempt prefix), and the step is
complete once LATEST, written after that commit, names it. Resume opens LATEST, checks every
digest, and deletes whatever newer, incomplete state it finds.

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
import time

import numpy as np

from streamfit import storage
from streamfit.errors import CheckpointError, StreamfitError, output_error

CHECKPOINT_VERSION = 2  # 2: typed solver state (streamfit.solvers.driver) and a digest over meta.json


def config_hash(config: dict) -> str:
    """SHA-256 of a canonical JSON rendering of the settings that determine the model."""
    return hashlib.sha256(json.dumps(config, sort_keys=True, default=str).encode()).hexdigest()


class ChunkState:
    """Versioned per-sample arrays, one file per (name, version, chunk). With root=None the
    arrays live in a dict (in-memory estimators); the interface is the same."""

    def __init__(self, root: str | None):
        self.root = root  # a local path or URL (picklable); None: in memory
        self._location = storage.resolve(root) if root is not None else None
        self._memory: dict[tuple[str, int, int], np.ndarray] = {}
        # the (name, version) directories under root as far as keep_only knows them: None until
        # its first call lists them; then what it kept, and every version kept since (the driver
        # keeps the versions the state refers to after each step, so every version written)
        self._versions: set[tuple[str, int]] | None = None

    def __reduce__(self):
        if self.root is None:
            raise TypeError("in-memory ChunkState cannot be sent to Dask workers; give the run a directory")
        return (ChunkState, (self.root,))

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

    def write(self, name: str, version: int, chunk_id: int, array: np.ndarray) -> None:
        """Writes chunk `chunk_id` of a version whole (one PUT on an object store). The chunk must
        have no file yet, or one of the same bytes (a task run again): a file a killed run left is
        deleted before the run writes (see the module docstring), not here."""
        if self.root is None:
            self._memory[(name, version, chunk_id)] = array
            return
        buf = io.BytesIO()
        np.save(buf, np.ascontiguousarray(array), allow_pickle=False)
        data = buf.getvalue()
        digest = hashlib.sha256(data).hexdigest()[:16]
        d = self._dir(name, version)
        d.makedirs()
        d.join(f"chunk-{chunk_id:06d}.{digest}.npy").write_bytes(data, sync_dir=False)

    def read(self, name: str, version: int, chunk_id: int) -> np.ndarray:
        if self.root is None:
            try:
                return self._memory[(name, version, chunk_id)]
            except KeyError:
                raise CheckpointError(f"state chunk {chunk_id} of {name!r} v{version} is missing") from None
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
        if self.root is not None:
            directory = self._dir(name, version)
            counted = {}
            for f in directory.glob("chunk-*.*.npy"):
                if _chunk_id(f) < n_chunks:
                    counted[_chunk_id(f)] = f
                else:
                    f.remove()
            _remember(directory, counted)
        for i in range(n_chunks):
            self.read(name, version, i)

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
        self._versions = set(keep)


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
        """Where the files of complete step `step` are (storage.committed); CheckpointError if none."""
        try:
            found = storage.committed(self._step_dir(step))
        except StreamfitError as e:
            raise CheckpointError(f"{e}; the checkpoint is damaged") from None
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
        buf = io.BytesIO()
        np.savez(buf, **arrays)  # type: ignore[arg-type]  # mypy: a **dict might hold allow_pickle (bool)
        data = buf.getvalue()
        record = {
            "checkpoint_version": CHECKPOINT_VERSION,
            "step": step,
            "config_hash": self.config_hash,
            "config": self.config,
            "store_fingerprint": self.store_fingerprint,
            "state_versions": state_versions,
            "state_counts": state_counts or {},
            "arrays_sha256": hashlib.sha256(data).hexdigest(),
            "meta": meta,
        }
        record = json.loads(json.dumps(record, default=_json_default))
        record["record_sha256"] = _record_digest(record)
        attempt = storage.begin(self._step_dir(step))
        try:
            attempt.location.makedirs()
            attempt.location.join("arrays.npz").write_new(data)
            attempt.location.join("meta.json").write_new(json.dumps(record, indent=1).encode())
            attempt.commit()
        except OSError as e:  # disk full, read-only: LATEST still names the previous step
            attempt.abort()
            raise output_error(attempt.location.url, e) from e
        self._path("LATEST").write_bytes(json.dumps({"step": step}).encode())
        self._latest_written = step
        self._listed_steps()[step] = attempt.files
        self._step_versions[step] = record["state_versions"]
        self._collect_garbage()

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
        try:
            record = json.loads(files.join("meta.json").read_bytes())
            data = files.join("arrays.npz").read_bytes()
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
            raise CheckpointError(
                f"{d}: was written with a different solver configuration{_config_changes(record.get('config'), self.config)}; "
                "resume with the run's own settings (repeat its --solver, -p options or --config), or start a new run "
                "in another --out directory"
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
    return ": " + "; ".join(changed) if changed else ""


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
