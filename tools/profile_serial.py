"""Where the driver's serial time goes (issue 19): tools/bench_scaleout.py's runs, with the
checkpoint saves split into their parts and the driver's own work outside the engine calls
sampled by function.

    python tools/profile_serial.py [bench_scaleout.py's flags: --rows, --chunks, --solvers, --workers, ...]
    python tools/profile_serial.py --one-save [--chunk-rows 12288] [--repeats 5]

--one-save: no training; bcd's save on the 16-core store, alone, in this process: 64 per-sample
files of chunk-rows × 20 float64 written unsynced (as the workers write them) and their
ChunkState.sync (the state's sync alone); then three saves of W (65 537 × 20 float64, 10.5 MiB),
each counting a new version of 64 such files written unsynced, which it syncs: the third, as
in a long run, also deletes the first step and its version's synced files (keep = 2);
milliseconds of the sync alone, of the third save and of its garbage collection, per repeat,
in a fresh folder.

Per solver and N, after bench_scaleout's per-run line:
  save parts: wall seconds summed over the run's Checkpointer.save calls, inside it:
      serialise   np.savez of the driver's arrays (weights, ...) into memory (before session 16's
                  one-pass write);
      hash        SHA-256 of those bytes and of the step record (idem);
      arrays      checkpoint._write_arrays: the arrays serialised, hashed and written in one pass;
      state sync  ChunkState.sync: the fsyncs of the per-sample files the step counts;
      write       the step's two files written (no fsync);
      commit      storage.publish_dir: the step directory's fsyncs and rename;
      LATEST      LATEST written (temporary file, fsync, rename, directory fsync);
      gc          the old steps and versions deleted (_collect_garbage);
      rest        the save's time not in the parts above (JSON of the record, ...);
      bytes       everything but state sync, commit, LATEST and gc: what the one-pass write
                  changed, comparable between trees;
  and, outside Checkpointer.save (bench_scaleout counts it in "driver"), the writes of the
  append-only entries a save counts (_StateSaver._write_entries).
  driver: the main thread's stack sampled every 2 ms outside the engine calls, Engine.start/close
      and the saves; each sample counts for the innermost streamfit function on the stack (module
      and name), and the table gives the seconds (samples × 2 ms) of the functions with the most.
      Sampling costs the driver a little CPU (one thread waking every 2 ms).
"""

from __future__ import annotations

import collections
import contextlib
import functools
import os
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import bench_scaleout  # noqa: E402

from streamfit import checkpoint, storage  # noqa: E402
from streamfit.checkpoint import Checkpointer, ChunkState  # noqa: E402
from streamfit.solvers import driver  # noqa: E402

SAMPLE_S = 0.002
OUTSIDE = {"start", "close", "map", "map_reduce", "timed_pairs", "save"}  # frames whose time bench_scaleout counts


class Parts:
    """Seconds per part of the saves, and the driver's samples, of one run."""

    def __init__(self):
        self.seconds: dict[str, float] = collections.defaultdict(float)
        self.samples: collections.Counter[str] = collections.Counter()
        self.in_save = False
        self.saves = 0
        self.array_bytes = 0


PARTS = Parts()


def _timed(owner, name: str, part: str, *, only_in_save: bool = True) -> None:
    """Times owner.name as `part` inside the saves (only_in_save), else everywhere, the calls
    outside the saves as `part (outside saves)`."""
    original = getattr(owner, name)

    @functools.wraps(original)
    def wrapper(*args, **kwargs):
        if only_in_save and not PARTS.in_save:
            return original(*args, **kwargs)
        key = part if PARTS.in_save else f"{part} (outside saves)"
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            PARTS.seconds[key] += time.perf_counter() - t0

    setattr(owner, name, wrapper)


def _install() -> None:
    original_save = Checkpointer.save

    @functools.wraps(original_save)
    def save(self, step, meta, arrays, *args, **kwargs):
        PARTS.saves += 1
        PARTS.array_bytes += sum(a.nbytes for a in arrays.values())
        PARTS.in_save = True
        t0 = time.perf_counter()
        try:
            return original_save(self, step, meta, arrays, *args, **kwargs)
        finally:
            PARTS.in_save = False
            PARTS.seconds["save"] += time.perf_counter() - t0

    Checkpointer.save = save  # type: ignore[method-assign]
    _timed(checkpoint.np, "savez", "serialise")
    _timed(checkpoint.hashlib, "sha256", "hash")
    _timed(ChunkState, "sync", "state sync")
    _timed(storage.Location, "write_new", "write")
    if hasattr(checkpoint, "_write_arrays"):
        _timed(checkpoint, "_write_arrays", "arrays")
    _timed(storage, "publish_dir", "commit")
    _timed(Checkpointer, "_collect_garbage", "gc")
    _timed(ChunkState, "keep_only", "gc: state versions", only_in_save=False)
    _timed(driver._StateSaver, "_write_entries", "entries", only_in_save=False)
    original_write_bytes = storage.Location.write_bytes

    @functools.wraps(original_write_bytes)
    def write_bytes(self, data, **kwargs):
        if not (PARTS.in_save and self.name == "LATEST"):
            return original_write_bytes(self, data, **kwargs)
        t0 = time.perf_counter()
        try:
            return original_write_bytes(self, data, **kwargs)
        finally:
            PARTS.seconds["LATEST"] += time.perf_counter() - t0

    storage.Location.write_bytes = write_bytes  # type: ignore[method-assign]


def _label(frame) -> str | None:
    """The innermost streamfit function on the stack, or None inside what bench_scaleout times."""
    inner = None
    while frame is not None:
        code = frame.f_code
        if code.co_name in OUTSIDE and ("engine" in code.co_filename or "bench_scaleout" in code.co_filename):
            return None
        if code.co_name == "save" and "profile_serial" in code.co_filename:
            return None
        if inner is None and "/streamfit/" in code.co_filename:
            inner = f"{os.path.basename(code.co_filename)[:-3]}.{code.co_name}"
        frame = frame.f_back
    return inner or "other"


@contextlib.contextmanager
def _sampling():
    main = threading.main_thread().ident
    done = threading.Event()

    def sample():
        while not done.wait(SAMPLE_S):
            frame = sys._current_frames().get(main)
            label = _label(frame)
            if label is not None:
                PARTS.samples[label] += 1

    thread = threading.Thread(target=sample, daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()


def _report(solver: str, n: int, result: dict) -> None:
    s = PARTS.seconds
    named = ("serialise", "hash", "arrays", "state sync", "write", "commit", "LATEST", "gc")
    rest = s["save"] - sum(s[k] for k in named)
    print(
        f"    save parts ({solver} N={n}): {PARTS.saves} saves of {PARTS.array_bytes / PARTS.saves / 2**20:.2f} MiB "
        f"of arrays each, total {s['save']:.3f} s = "
        + ", ".join(f"{k} {s[k]:.3f}" for k in named)
        + f" (of it state versions deleted {s['gc: state versions']:.3f}), rest {rest:.3f}, "
        f"bytes {s['save'] - sum(s[k] for k in ('state sync', 'commit', 'LATEST', 'gc')):.3f}; entries written before the saves (in bench's driver) {s['entries (outside saves)']:.3f}, "
        f"state versions deleted between saves (in bench's driver) {s['gc: state versions (outside saves)']:.3f}",
        flush=True,
    )
    total = sum(PARTS.samples.values()) * SAMPLE_S
    top = ", ".join(f"{k} {v * SAMPLE_S:.3f}" for k, v in PARTS.samples.most_common(10))
    print(
        f"    driver samples ({solver} N={n}): {total:.2f} s sampled (bench's driver {result.get('driver', 0.0):.2f} s): {top}",
        flush=True,
    )


def one_save(chunk_rows: int, repeats: int) -> None:
    import tempfile

    import numpy as np

    rng = np.random.default_rng(0)
    arrays = {"W": rng.standard_normal((65537, 20))}
    scores = rng.standard_normal((chunk_rows, 20))
    gc_seconds = []
    collect_garbage = Checkpointer._collect_garbage

    def timed_collect_garbage(self):
        t = time.perf_counter()
        collect_garbage(self)
        gc_seconds.append(time.perf_counter() - t)

    Checkpointer._collect_garbage = timed_collect_garbage  # type: ignore[method-assign]
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as run_dir:
            state = ChunkState(os.path.join(run_dir, "alone"))
            for chunk_id in range(64):
                state.write("scores", 1, chunk_id, scores, cache=False)
            t0 = time.perf_counter()
            state.sync([("scores", 1)])
            alone = time.perf_counter() - t0
            ck = Checkpointer(os.path.join(run_dir, "run"), config={}, store_fingerprint="")
            for step in (1, 2, 3):
                for chunk_id in range(64):
                    ck.state.write("scores", step, chunk_id, scores, cache=False)
                t0 = time.perf_counter()
                ck.save(step, {}, arrays, {"scores": step})
                save = time.perf_counter() - t0
        print(
            f"state sync alone, 64 files of {scores.nbytes / 2**20:.1f} MiB: {1000 * alone:.0f} ms; the third save "
            f"of W ({arrays['W'].nbytes / 2**20:.1f} MiB) counting 64 such files unsynced: {1000 * save:.0f} ms, of "
            f"it the garbage collection (step 1 and its 64 synced files deleted): {1000 * gc_seconds[-1]:.0f} ms",
            flush=True,
        )


def main() -> None:
    if "--one-save" in sys.argv:
        import argparse

        ap = argparse.ArgumentParser(description="one bcd save at the 16-core store's sizes")
        ap.add_argument("--one-save", action="store_true")
        ap.add_argument("--chunk-rows", type=int, default=12288)
        ap.add_argument("--repeats", type=int, default=5)
        args = ap.parse_args()
        one_save(args.chunk_rows, args.repeats)
        return
    _install()
    original_run_one = bench_scaleout.run_one

    original_train = bench_scaleout.train

    def train(*args, **kwargs):
        with _sampling():
            return original_train(*args, **kwargs)

    def run_one(store, solver, n, out, time_limit):
        PARTS.__init__()
        result = original_run_one(store, solver, n, out, time_limit)
        _report(solver, n, result)
        return result

    bench_scaleout.run_one = run_one
    bench_scaleout.train = train
    bench_scaleout.main()


if __name__ == "__main__":
    main()
