"""Distributed ingest: `streamfit ingest DIR --scheduler ADDRESS` on N Dask workers against the
same ingest in this process (N = 0), with the stores checked identical.

    python tools/bench_ingest_workers.py [--mb 300] [--files 32] [--workers 0,1,2] [--modes noidf,idf]
        [--backend zarr] [--chunk-rows N] [--workdir /tmp] [--out-json DIR] [--profile-driver]
        [--timeline] [--pieces-per-thread K]

A seeded JSONL text corpus (tools/bench_ingest.py's CorpusGenerator: Zipf-Mandelbrot words,
20 labels) of --mb MB is written as --files files into a temporary directory (no network, no
../shared data), then ingested, hashed to 2^18 columns, once per N in --workers and mode:
`noidf` (one pass: --no-idf, l2-normalized rows) and `idf` (the text default: a stage store,
then IDF and the final store written by the driver). N = 0 runs in this process; N >= 1 on a
LocalCluster of N single-threaded worker processes started and warmed (streamfit imported, the
hashing kernels compiled) before the clock starts, so the times are the ingest's own; the
cluster's start-up is reported beside them. Reported per run: seconds, MB/s of raw input,
records/s, the speed-up over N = 1 (and over N = 0 when measured), the driver's CPU time as a
share of the run (near 100 %: the driver, which writes the store, is the bottleneck), and
whether the manifest (every chunk digest, classes, IDF digest) equals the first run's of the
same mode, and the time to read the store back in this process (every chunk decoded and
checked against its digest, past the chunk cache: `read s`, the best of 3 passes). --backend
parquet writes Parquet stores, --chunk-rows sets the rows per chunk. With --out-json DIR the
results go to DIR/ingest_workers.json as well.

With --profile-driver, where the driver process's CPU goes during each timed ingest: a thread
samples every thread's stack (sys._current_frames) every 5 ms and counts, for the samples whose
thread used CPU since the previous one (its CPU clock) and is not in a blocking call (select,
a lock's wait), the innermost frame of streamfit's code (or of the Dask scheduler or client,
zarr, pyarrow; else the innermost frame). The top entries are printed per run (share of the
samples that were on the CPU) and saved in the JSON as "driver_profile". The scheduler of the
LocalCluster runs in this process, so its work is in the driver's CPU and profile.

With --timeline, where the workers' time goes (TaskTimeline, a plugin of that scheduler): per
worker, the tasks' compute by kind and the idle gaps, each charged to what the next task waited
for (the driver's submission, a dependency, the dispatch) or to the run's head (before a
worker's first task), its stragglers (after a worker's last task, while others compute) and its
tail (after the last task: manifest, commit); the mean wait of each kind of task from ready to
started; and the driver's own steps (DriverPhases: the engine's start, the plan, pass 1, pass 2,
the stores' close, the pass-1 stage's deletion). Saved in the JSON as "timeline", with every task's row (kind, worker,
submitted, started, ended: "task_rows"). --pieces-per-thread sets the piece plan's
pieces per worker thread (the stores stay identical: the tool checks them).
"""

from __future__ import annotations

import os

# before numba and numpy load: one core per process (the workers inherit it)
os.environ["NUMBA_NUM_THREADS"] = "1"
os.environ["OMP_NUM_THREADS"] = "1"
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse
import collections
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
from distributed.diagnostics.plugin import SchedulerPlugin

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ingest import CorpusGenerator  # noqa: E402 - after the thread variables

from streamfit.ingest.hashing import HashingConfig  # noqa: E402
from streamfit.ingest.pipeline import IngestOptions, ingest  # noqa: E402
from streamfit.store import Store  # noqa: E402

N_FEATURES = 2**18


def write_corpus(folder: Path, total_bytes: int, n_files: int) -> tuple[int, int]:
    """n_files JSONL files part-00000.jsonl … of about total_bytes together; (documents, bytes)."""
    folder.mkdir(parents=True)
    gen = CorpusGenerator(seed=0)
    buf = np.empty(max(total_bytes // n_files, 1 << 16), dtype=np.uint8)
    docs = written = 0
    for f in range(n_files):
        n, d = gen.fill(buf, f)
        buf[:n].tofile(folder / f"part-{f:05d}.jsonl")
        docs, written = docs + d, written + n
    return docs, written


def _warm() -> None:
    """Import streamfit's ingest path and the store backends, and compile (or load) the hashing
    kernels in this process (streamfit's own --n-workers cluster forks its workers from a
    server that imported them)."""
    from streamfit.ingest.featurize import Featurizer
    from streamfit.ingest.hashing import FeatureHasher
    from streamfit.store import store

    X = FeatureHasher(HashingConfig(n_features=N_FEATURES)).transform_text(["warm up the hasher"])
    Featurizer(HashingConfig(n_features=N_FEATURES), None, l2_normalize=True).finish(X)  # the l2 kernel
    store._backend("zarr"), store._backend("parquet")


class DriverSampler:
    """Where this process's CPU goes: every `interval` s, each thread's innermost frame of
    interest, counted when the thread used CPU since the previous sample (its CPU clock,
    time.pthread_getcpuclockid) and is not blocked in one of WAITS now."""

    WAITS = {"select", "poll", "wait", "acquire", "_wait_for_tstate_lock", "sleep", "accept"}

    def __init__(self, interval: float = 0.005):
        self.interval = interval
        self.counts: collections.Counter = collections.Counter()
        self.samples = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    @staticmethod
    def where(frame) -> str:
        """The innermost frame of streamfit's code, else of Dask's scheduler or client, as
        'file:function' (tools/… and streamfit/… relative), else the innermost frame."""
        innermost = frame
        while frame is not None:
            name = frame.f_code.co_filename
            for marker in ("/streamfit/", "/distributed/scheduler", "/distributed/client", "/zarr/", "/pyarrow/"):
                if marker in name:
                    short = name[name.rindex(marker) + 1 :]
                    return f"{short}:{frame.f_code.co_name}"
            frame = frame.f_back
        return f"{os.path.basename(innermost.f_code.co_filename)}:{innermost.f_code.co_name}"

    def _run(self) -> None:
        me = threading.get_ident()
        clocks: dict[int, float] = {}
        while not self._stop.wait(self.interval):
            for ident, frame in sys._current_frames().items():
                if ident == me:
                    continue
                try:
                    cpu = time.clock_gettime(time.pthread_getcpuclockid(ident))
                except (OSError, ProcessLookupError):
                    continue
                busy = cpu - clocks.get(ident, cpu) > 0.2 * self.interval
                clocks[ident] = cpu
                if busy and frame.f_code.co_name not in self.WAITS:
                    role = "main" if ident == threading.main_thread().ident else "loop"
                    self.counts[f"{role} {self.where(frame)}"] += 1
                    self.samples += 1

    def top(self, n: int = 15) -> list[tuple[str, float]]:
        return [(k, v / max(self.samples, 1)) for k, v in self.counts.most_common(n)]


class TaskTimeline(SchedulerPlugin):
    """A scheduler plugin (the LocalCluster's scheduler runs in this process) that records, per
    task of a timed ingest, when the driver submitted it (it entered the scheduler), the keys it
    waits for, and where and when it ran (its compute and transfer intervals, the workers' clocks:
    the same machine's). `analyse` turns that into where each worker's time went."""

    name = "bench-task-timeline"

    def __init__(self, scheduler):
        super().__init__()
        self.scheduler = scheduler
        self.submitted: dict = {}  # key: time it entered the scheduler
        self.deps: dict = {}  # key: the keys it depends on
        self.ran: dict = {}  # key: (worker, [(action, start, stop)])

    def transition(self, key, start, finish, *args, **kwargs) -> None:
        if start == "released" and key not in self.submitted:
            self.submitted[key] = time.time()
            ts = self.scheduler.tasks.get(key)
            self.deps[key] = [d.key for d in ts.dependencies] if ts is not None else []
        if start == "processing" and finish == "memory":
            self.ran[key] = (kwargs["worker"], [(s["action"], s["start"], s["stop"]) for s in kwargs["startstops"]])

    def clear(self) -> None:
        self.submitted.clear()
        self.deps.clear()
        self.ran.clear()

    def analyse(self, t0: float, t1: float, n_workers: int) -> dict:
        """Where the workers' time went between t0 and t1 (the ingest's start and end, time.time()).
        Per worker, its task compute by kind (the key's function) and transfers, and each idle
        gap before a task, charged to what the task waited for: `submission` (the driver had not
        submitted it yet), `dependency` (a task it needs, on another worker or not done), else
        `dispatch` (it was ready: the scheduler's and the messages' latency). Before a worker's
        first task: `head` (the driver's start: connecting, planning, the first submission); after
        its last: `straggler` (others still computing) and `tail` (after the last task: the
        manifest, the commit). Seconds summed over the workers, and as a share of N x wall; and
        every task as a row (kind, worker, submitted, started, ended) for a plot."""
        from dask.utils import key_split

        by_worker: dict = collections.defaultdict(list)
        for key, (worker, spans) in self.ran.items():
            compute = [(a, b) for action, a, b in spans if action == "compute"]
            transfer = sum(b - a for action, a, b in spans if action == "transfer")
            if compute:
                by_worker[worker].append((compute[0][0], compute[-1][1], key, transfer))
        done = {key: max(b for _, _, b in spans) for key, (_, spans) in self.ran.items()}
        # per kind: how long a task waited, once it was submitted and its inputs were done,
        # for its worker to start it (a summary behind its worker's next piece shows here)
        waited: dict = collections.defaultdict(list)
        for tasks in by_worker.values():
            for a, _, key, _ in tasks:
                ready = max([done.get(d, 0.0) for d in self.deps.get(key, [])] + [self.submitted.get(key, a)])
                waited[key_split(key)].append(max(a - ready, 0.0))
        last = max((b for tasks in by_worker.values() for _, b, _, _ in tasks), default=t1)
        compute: collections.Counter = collections.Counter()
        idle: collections.Counter = collections.Counter()
        for tasks in by_worker.values():
            tasks.sort()
            free = None  # when this worker's previous task ended
            for a, b, key, transfer in tasks:
                compute[key_split(key)] += b - a
                compute["(transfers)"] += transfer
                if free is None:
                    idle["head"] += a - t0
                else:
                    gap = max(a - free, 0.0)
                    submitted = self.submitted.get(key, free)
                    ready = max([done.get(d, free) for d in self.deps.get(key, [])] + [free])
                    waited_submission = min(max(submitted - free, 0.0), gap)
                    waited_dependency = min(max(ready - max(submitted, free), 0.0), gap - waited_submission)
                    idle["submission"] += waited_submission
                    idle["dependency"] += waited_dependency
                    idle["dispatch"] += gap - waited_submission - waited_dependency
                free = b
            idle["straggler"] += last - free
            idle["tail"] += t1 - last
        idle["head"] += (n_workers - len(by_worker)) * (t1 - t0)  # a worker that ran nothing
        capacity = n_workers * (t1 - t0)
        return {
            "wall_s": t1 - t0,
            "first_submission_s": min(self.submitted.values(), default=t1) - t0,
            "last_task_end_s": last - t0,
            "tasks": len(self.ran),
            "compute_s": dict(compute),
            "ready_wait_s": {kind: float(np.mean(w)) for kind, w in waited.items()},
            "idle_s": dict(idle),
            "busy_share": sum(v for k, v in compute.items() if k != "(transfers)") / capacity,
            "idle_share": {k: v / capacity for k, v in idle.items()},
            # the timeline itself: (kind, worker number, submitted, started, ended), s from t0
            "task_rows": sorted(
                (
                    (key_split(key), w, self.submitted.get(key, t0) - t0, a - t0, b - t0)
                    for w, tasks in enumerate(by_worker.values())
                    for a, b, key, _ in tasks
                ),
                key=lambda row: row[3],
            ),
        }


class DriverPhases:
    """Wall seconds of the driver's own steps around the workers' tasks during an ingest: the
    functions named in PHASES wrapped (while entered) to add up their time, by name."""

    PHASES = {
        "engine start": ("streamfit.engine", "Engine", "start"),
        "engine close": ("streamfit.engine", "Engine", "close"),
        "pass 1": ("streamfit.ingest.distributed", None, "run_distributed"),
        "plan": ("streamfit.ingest.distributed", None, "plan_pieces"),
        "pass 2 df": ("streamfit.ingest.distributed", None, "pass2_document_frequencies"),
        "pass 2 write": ("streamfit.ingest.distributed", None, "pass2_write"),
        "merge": ("streamfit.ingest.distributed", None, "merge"),
        "take written": ("streamfit.ingest.distributed", None, "_take_written"),
        "store close": ("streamfit.store.store", "StoreWriter", "close"),
        "stage discard": ("streamfit.store.store", "StoreWriter", "discard"),
    }

    def __init__(self):
        self.seconds: collections.Counter = collections.Counter()
        self._undo: list = []

    def __enter__(self):
        import importlib

        for name, (module, cls, attr) in self.PHASES.items():
            owner = importlib.import_module(module)
            owner = getattr(owner, cls) if cls else owner
            original = getattr(owner, attr)
            setattr(owner, attr, self._timed(name, original))
            self._undo.append((owner, attr, original))
        return self

    def __exit__(self, *exc):
        for owner, attr, original in reversed(self._undo):
            setattr(owner, attr, original)
        self._undo.clear()

    def _timed(self, name: str, fn):
        def timed(*args, **kwargs):
            t = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                self.seconds[name] += time.perf_counter() - t

        return timed


def print_timeline(t: dict) -> None:
    """One run's timeline analysis (TaskTimeline.analyse) as two lines."""
    compute = ", ".join(f"{k} {v:.2f}" for k, v in sorted(t["compute_s"].items(), key=lambda kv: -kv[1]))
    idle = ", ".join(f"{k} {v:.2f} ({t['idle_share'][k]:.0%})" for k, v in t["idle_s"].items())
    print(
        f"  first submission at {t['first_submission_s']:.2f} s, last task's end at {t['last_task_end_s']:.2f} s "
        f"of {t['wall_s']:.2f} s"
    )
    print(f"  tasks {t['tasks']}, workers busy {t['busy_share']:.0%}; compute s: {compute}")
    print(f"  idle worker-s: {idle}")
    print("  mean s from ready to start: " + ", ".join(f"{k} {v:.3f}" for k, v in t["ready_wait_s"].items()))
    print("  driver s: " + ", ".join(f"{k} {v:.2f}" for k, v in t["driver_s"].items()))


def options(corpus: Path, out: Path, mode: str, scheduler: str | None, backend: str, chunk_rows: int | None):
    return IngestOptions(
        inputs=[str(corpus)],
        out=str(out),
        backend=backend,
        chunk_rows=chunk_rows,
        hashing=HashingConfig(n_features=N_FEATURES),
        idf=mode == "idf",
        overwrite=True,
        progress=False,
        scheduler=scheduler,
    )


def read_seconds(path: Path, repeat: int = 3) -> float:
    """Seconds to read every chunk of the store at `path`, decoded and checked, past the cache:
    the best of `repeat` passes, each by a freshly opened store (its first pass opens the chunks)."""
    best = float("inf")
    for _ in range(repeat):
        store = Store(str(path))
        t = time.perf_counter()
        for i in range(store.n_chunks):
            store.read_chunk(i, cache=False)
        best = min(best, time.perf_counter() - t)
    return best


def run(
    corpus: Path,
    work: Path,
    n: int,
    modes: list[str],
    backend: str,
    chunk_rows: int | None,
    profile: bool,
    timeline: bool = False,
) -> list[dict]:
    """Ingest the corpus once per mode on N workers (one cluster for all modes; N = 0: in process)."""
    cluster = client = None
    tasks = None
    startup = 0.0
    results = []
    try:
        if n:
            from distributed import Client, LocalCluster

            t = time.perf_counter()
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0")
            client = Client(cluster)
            client.run(_warm)
            startup = time.perf_counter() - t
            if timeline:
                tasks = TaskTimeline(cluster.scheduler)
                cluster.scheduler.add_plugin(tasks)
        _warm()
        for mode in modes:
            out = work / f"store-{mode}-{n}.zarr"
            sampler = DriverSampler() if profile else contextlib.nullcontext()
            if tasks is not None:
                tasks.clear()
            phases = DriverPhases()
            with sampler, phases if tasks is not None else contextlib.nullcontext():
                t, cpu, t_wall = time.perf_counter(), time.process_time(), time.time()
                report = ingest(
                    options(corpus, out, mode, cluster.scheduler_address if cluster else None, backend, chunk_rows)
                )
                seconds, driver_cpu = time.perf_counter() - t, time.process_time() - cpu
            analysis = tasks.analyse(t_wall, t_wall + seconds, n) if tasks is not None else None
            if analysis is not None:
                analysis["driver_s"] = dict(phases.seconds)
                print(f"timeline, {mode} N={n} ({seconds:.2f} s, driver {driver_cpu:.2f} CPU s):")
                print_timeline(analysis)
            if profile:
                print(f"driver profile, {mode} N={n} ({driver_cpu:.2f} CPU s of {seconds:.2f} s):")
                for where, share in sampler.top():
                    print(f"  {share:6.1%}  {where}")
            results.append(
                {
                    "driver_profile": sampler.top(40) if profile else None,
                    "timeline": analysis,
                    "workers": n,
                    "mode": mode,
                    "seconds": seconds,
                    "driver_cpu_s": driver_cpu,
                    "startup_s": startup,
                    "rows": report.written,
                    "manifest": (out / "manifest.json").read_text(),
                    "read_s": read_seconds(out),
                }
            )
            shutil.rmtree(out)
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()
    return results


def save(folder: str | None, size: int, docs: int, files: int, backend: str, results: list[dict]) -> None:
    """The results as DIR/ingest_workers.json (nothing without --out-json)."""
    if folder:
        os.makedirs(folder, exist_ok=True)
        record = {
            "corpus_mb": size / 1e6,
            "documents": docs,
            "files": files,
            "backend": backend,
            "cpus": os.cpu_count(),
            "results": results,
        }
        with open(os.path.join(folder, "ingest_workers.json"), "w") as f:
            json.dump(record, f, indent=1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mb", type=float, default=300, help="corpus size, MB")
    ap.add_argument("--files", type=int, default=32, help="corpus files")
    ap.add_argument("--workers", default="0,1,2", help="comma-separated worker counts (0: in process)")
    ap.add_argument("--modes", default="noidf,idf", help="noidf (one pass) and/or idf (two passes)")
    ap.add_argument("--backend", default="zarr", choices=["zarr", "parquet"], help="the stores' backend")
    ap.add_argument("--chunk-rows", type=int, default=None, help="rows per store chunk (default: ingest's)")
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--out-json", default=None, help="directory for ingest_workers.json")
    ap.add_argument("--profile-driver", action="store_true", help="sample where the driver's CPU goes")
    ap.add_argument(
        "--pieces-per-thread",
        type=int,
        default=None,
        help="cut the input into at least this many pieces per worker thread "
        "(streamfit.ingest.distributed.PIECES_PER_THREAD; default: its value)",
    )
    ap.add_argument(
        "--timeline", action="store_true", help="per worker: task compute by kind, idle time by what it waited for"
    )
    args = ap.parse_args()
    if args.pieces_per_thread is not None:
        from streamfit.ingest import distributed

        distributed.PIECES_PER_THREAD = args.pieces_per_thread
    work = Path(tempfile.mkdtemp(prefix="bench-ingest-workers-", dir=args.workdir))
    try:
        t = time.perf_counter()
        docs, size = write_corpus(work / "corpus", int(args.mb * 1e6), args.files)
        print(f"corpus: {docs} documents, {size / 1e6:.1f} MB in {args.files} files ({time.perf_counter() - t:.1f} s)")
        results = []
        reference: dict[str, str] = {}  # mode: the manifest of its first run
        for n in (int(w) for w in args.workers.split(",")):
            runs = run(
                work / "corpus",
                work,
                n,
                args.modes.split(","),
                args.backend,
                args.chunk_rows,
                args.profile_driver,
                args.timeline,
            )
            for r in runs:
                manifest = r.pop("manifest")
                r["identical"] = manifest == reference.setdefault(r["mode"], manifest)
                r["mb_per_s"] = size / 1e6 / r["seconds"]
                r["records_per_s"] = docs / r["seconds"]
                results.append(r)
            save(
                args.out_json, size, docs, args.files, args.backend, results
            )  # so far: a run cut short keeps its numbers
        for r in results:
            same = [q for q in results if q["mode"] == r["mode"]]
            one = next((q for q in same if q["workers"] == 1), None)
            zero = next((q for q in same if q["workers"] == 0), None)
            r["speedup_vs_1"] = one["seconds"] / r["seconds"] if one else None
            r["speedup_vs_0"] = zero["seconds"] / r["seconds"] if zero else None
        print(
            f"{'mode':6} {'N':>3} {'s':>8} {'MB/s':>7} {'rec/s':>8} {'vs N=1':>7} {'vs N=0':>7} {'driver':>7} "
            f"{'start s':>7} {'read s':>7} same"
        )
        for r in sorted(results, key=lambda r: (r["mode"], r["workers"])):
            vs1 = f"{r['speedup_vs_1']:.2f}" if r["speedup_vs_1"] else "-"
            vs0 = f"{r['speedup_vs_0']:.2f}" if r["speedup_vs_0"] else "-"
            print(
                f"{r['mode']:6} {r['workers']:>3} {r['seconds']:8.2f} {r['mb_per_s']:7.2f} {r['records_per_s']:8.0f} "
                f"{vs1:>7} {vs0:>7} {r['driver_cpu_s'] / r['seconds']:7.0%} {r['startup_s']:7.1f} {r['read_s']:7.2f} "
                f"{r['identical']}"
            )
        save(args.out_json, size, docs, args.files, args.backend, results)
        if not all(r["identical"] for r in results):
            raise SystemExit("the stores differ between worker counts")
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
