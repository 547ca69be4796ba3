"""The critical path of one `Engine.map_reduce` pass on an embedded cluster (issue 19, session 16).

    python tools/bench_pass_latency.py [--workers 1,2] [--chunks 64,256] [--result-kb 8,320,8400]
        [--arg-kb 320] [--work-ms 2] [--passes 15] [--tasks-per-thread 2] [--out FILE.json]

A synthetic pass whose time is mostly latency: each of `--chunks` chunk tasks spins `--work-ms`
milliseconds and returns a float64 array of `--result-kb` KiB (8400: a 1025² Gram, stagewise's
AᵀA of a 1024-column block with its bias; 4200: its upper triangle; 320: bcd's 2048 × 20 group
sums), with a keyword argument of `--arg-kb` KiB (a bcd or stagewise weight block: the engine
scatters it to every worker when it is over 64 KiB). On N single-threaded workers (one cluster per
N, one warm-up pass), `--passes` passes each; every pass's sum is checked bitwise against the
in-process sum (streamfit.engine.fold_chunks: the fixed tree).

Each pass's wall time (the map_reduce call in the driver) is split along its critical path, from
Dask's task stream (worker clocks: the same machine's) and the driver's clock:
  scatter:  the driver's Client.scatter of the large keyword arguments (to every worker);
  submit:   the driver's calls that send the tasks to the scheduler (Client._graph_to_futures:
            one per task before session 16, one graph now), summed;
  to first: from the call to the first chunk task's start (the submission, the scheduler's
            handling of the graph, the first worker's start);
  leaves:   from the first chunk task's start to the last one's end;
  tree:     from the last chunk task's end to the root's end (the sum tree's levels above the
            leaves: a transfer and a scheduler round trip each);
  fetch:    from the root's end to the call's return (the result to the driver);
and "latency" = wall − summed task compute / N, the pass's cost beyond perfectly spread work (the
quantity docs/benchmarks.md gives for the 16-core runs). Medians over the passes; the tasks per
pass and their summed compute (chunk tasks and sums apart) alongside, and the CPU seconds of
the driver's process (its client and the embedded scheduler, whose event loop handles every
task's messages one after another: on a machine with idle cores, the serial part of a pass)
and of the workers' processes (tasks and their Dask overhead). On a loaded machine the wall
times stretch with the load; the CPU times much less.

Runs against whatever `streamfit` is importable: run it from a `git archive` of another commit
(with this file copied in) for a before/after on the same machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

import numpy as np
import psutil

from streamfit import engine as engine_mod
from streamfit.engine import Engine, fold_chunks


def spin_chunk(source, chunk_id: int, *, work_s: float, size: int, arg: np.ndarray | None = None) -> np.ndarray:
    """`work_s` seconds of busy work (CPU time of this thread: the same work on a loaded machine),
    then a float64 array of `size` values that depend on the chunk (their sum depends on the order
    of the additions)."""
    end = time.thread_time() + work_s
    while time.thread_time() < end:
        pass
    scale = 1.0 / (chunk_id + 3) + (0.0 if arg is None else float(arg[0]))
    return np.arange(size, dtype=np.float64) * scale + 1.0 / (chunk_id + 7)


class Timed:
    """Sums the seconds the driver spends in the named Client methods while installed."""

    def __init__(self, names: tuple[str, ...]):
        self.names = names
        self.seconds = 0.0
        self.calls = 0
        self._saved: dict[str, object] = {}

    def __enter__(self) -> Timed:
        from distributed import Client

        for name in self.names:
            original = getattr(Client, name, None)
            if original is None:
                continue
            self._saved[name] = original

            def wrapper(*args, _original=original, **kwargs):
                t0 = time.perf_counter()
                try:
                    return _original(*args, **kwargs)
                finally:
                    self.seconds += time.perf_counter() - t0
                    self.calls += 1

            setattr(Client, name, wrapper)
        return self

    def __exit__(self, *exc) -> None:
        from distributed import Client

        for name, original in self._saved.items():
            setattr(Client, name, original)


def is_sum_key(key) -> bool:
    """Whether a task-stream key is one of the sum tree's add tasks (not a chunk task)."""
    name = key[0] if isinstance(key, tuple) else str(key)
    return str(name).lstrip("('\"").startswith("add_")


def _cpu_seconds(process: psutil.Process | None = None) -> float:
    """User and system CPU seconds of `process` (default: this one, all its threads)."""
    times = (process or psutil.Process()).cpu_times()
    return times.user + times.system


def _scheduler_delay(dask_worker) -> float:
    return dask_worker.scheduler_delay


def compute_spans(records: list[dict], delays: dict[str, float], sums: bool) -> list[tuple[float, float]]:
    """(start, stop) on this machine's clock of the chunk tasks' (or, with `sums`, the add
    tasks') compute in task-stream `records`. A worker shifts its times by its estimate of its
    clock's offset from the scheduler's (`scheduler_delay`, from its heartbeats: noise of
    milliseconds on a loaded machine, where the true offset is 0); `delays` undoes it."""
    return [
        (s["start"] - delays.get(r["worker"], 0.0), s["stop"] - delays.get(r["worker"], 0.0))
        for r in records
        if is_sum_key(r["key"]) == sums
        for s in r["startstops"]
        if s["action"] == "compute"
    ]


def split_pass(records: list[dict], delays: dict[str, float], t0: float, t1: float) -> dict:
    """The critical path of the pass called at t0 and returned at t1 from its task-stream records."""
    leaves = compute_spans(records, delays, sums=False)
    sums = compute_spans(records, delays, sums=True)
    first = min(a for a, _ in leaves)
    last_leaf = max(b for _, b in leaves)
    root = max([b for _, b in sums] + [last_leaf])
    return {
        "wall": t1 - t0,
        "to_first": first - t0,
        "leaves": last_leaf - first,
        "tree": root - last_leaf,
        "fetch": t1 - root,
        "leaf_compute": sum(b - a for a, b in leaves),
        "sum_compute": sum(b - a for a, b in sums),
        "n_leaves": len(leaves),
        "n_sums": len(sums),
    }


def run(n_workers: int, chunks: int, result_kb: float, arg_kb: float, work_ms: float, passes: int) -> dict:
    from bench_pass_latency import spin_chunk  # by reference in the tasks, as streamfit's own task functions
    from distributed import get_task_stream

    size = max(int(result_kb * 1024 / 8), 1)
    arg = np.full(max(int(arg_kb * 1024 / 8), 1), 1e-9) if arg_kb else None
    kwargs = {"work_s": work_ms / 1000, "size": size, "arg": arg}
    expected = fold_chunks(spin_chunk, None, list(range(chunks)), **kwargs)
    rows = []
    with Engine(mode="local", n_workers=n_workers) as engine:
        engine.map_reduce(spin_chunk, None, range(chunks), **kwargs)  # warm-up
        workers = [psutil.Process(pid) for pid in engine.client.run(os.getpid).values()]
        for _ in range(passes):
            delays = engine.client.run(_scheduler_delay)
            with (
                get_task_stream(engine.client) as stream,
                Timed(("scatter",)) as scatter,
                Timed(("_graph_to_futures",)) as submit,
            ):
                cpu0, workers0 = _cpu_seconds(), sum(_cpu_seconds(w) for w in workers)
                t0 = time.time()
                total = engine.map_reduce(spin_chunk, None, range(chunks), **kwargs)
                t1 = time.time()
                cpu1, workers1 = _cpu_seconds(), sum(_cpu_seconds(w) for w in workers)
            if not np.array_equal(total, expected):
                raise SystemExit(f"N={n_workers}, {chunks} chunks: the sum differs from the in-process sum")
            row = split_pass(stream.data, delays, t0, t1)
            row["driver_cpu"] = cpu1 - cpu0
            row["workers_cpu"] = workers1 - workers0
            row["scatter"] = scatter.seconds
            row["submit"] = submit.seconds
            row["submit_calls"] = submit.calls
            row["latency"] = row["wall"] - (row["leaf_compute"] + row["sum_compute"]) / n_workers
            rows.append(row)
    return {key: statistics.median(r[key] for r in rows) for key in rows[0]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2", help="comma-separated N")
    ap.add_argument("--chunks", default="64,256", help="comma-separated chunk counts")
    ap.add_argument("--result-kb", default="8,320,8400", help="comma-separated result sizes (KiB) of a chunk task")
    ap.add_argument("--arg-kb", type=float, default=320, help="size of the pass's keyword argument (KiB; 0: none)")
    ap.add_argument("--work-ms", type=float, default=2.0, help="busy milliseconds per chunk task")
    ap.add_argument("--passes", type=int, default=15)
    ap.add_argument(
        "--tasks-per-thread",
        type=int,
        default=engine_mod.TASKS_PER_THREAD,
        help="streamfit.engine.TASKS_PER_THREAD for these runs (default %(default)s): 16 at N = 2 gives the "
        "chunk tasks and sum tree of 2 at N = 16 (32 subtree tasks for 64 chunks)",
    )
    ap.add_argument(
        "--out", default=None, help="also write every configuration's medians here (JSON, rewritten after each)"
    )
    args = ap.parse_args()
    engine_mod.TASKS_PER_THREAD = args.tasks_per_thread
    results = []
    header = (
        "| N | chunks | result KiB | wall ms | scatter ms | submit ms (calls) | to first ms | leaves ms | tree ms | fetch ms "
        "| latency ms | tasks (sums) | chunk compute ms | sum compute ms | driver CPU ms | workers CPU ms |"
    )
    print(header + "\n|" + "---|" * (header.count("|") - 1), flush=True)
    for n in (int(w) for w in args.workers.split(",")):
        for chunks in (int(c) for c in args.chunks.split(",")):
            for kb in (float(k) for k in args.result_kb.split(",")):
                m = run(n, chunks, kb, args.arg_kb, args.work_ms, args.passes)
                results.append({"workers": n, "chunks": chunks, "result_kb": kb, **m})
                print(
                    f"| {n} | {chunks} | {kb:g} | {1e3 * m['wall']:.1f} | {1e3 * m['scatter']:.1f} "
                    f"| {1e3 * m['submit']:.1f} ({m['submit_calls']:.0f}) "
                    f"| {1e3 * m['to_first']:.1f} | {1e3 * m['leaves']:.1f} | {1e3 * m['tree']:.1f} | {1e3 * m['fetch']:.1f} "
                    f"| {1e3 * m['latency']:.1f} | {m['n_leaves'] + m['n_sums']:.0f} ({m['n_sums']:.0f}) "
                    f"| {1e3 * m['leaf_compute']:.1f} | {1e3 * m['sum_compute']:.1f} "
                    f"| {1e3 * m['driver_cpu']:.1f} | {1e3 * m['workers_cpu']:.1f} |",
                    flush=True,
                )
                if args.out:  # after every configuration: a run cut by a time limit keeps what it measured
                    with open(args.out, "w") as f:
                        json.dump({"settings": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
