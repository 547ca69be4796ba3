"""Strong scaling of `streamfit.train.train` on an embedded LocalCluster of N single-threaded
workers, with a breakdown of where the time goes (issue 19).

    python tools/bench_scaleout.py [--rows 49152] [--features 65536] [--used 8192] [--row-nnz 50]
        [--classes 20] [--chunks 16] [--extreme-rows 10000] [--extreme-features 20000]
        [--extreme-classes 1000] [--workers 1,2,...] [--solvers stagewise,bcd,ppdsparse]
        [--time-limit S] [--out FILE.json] [--workdir DIR]

Generates two synthetic stores: a sparse text-like one (`--rows` × `--features`, of which
`--used` columns occur, `--row-nnz` non-zeros a row, half of them from a block of columns typical
of the row's class, rows l2-normalized, `--chunks` equal chunks) for stagewise (gradient, block
1024, 1 pass) and bcd (chunks mode, group 2048, 1 outer iteration), and an "extreme" one
(`--extreme-*`: 10 % of a row's non-zeros from its class's columns) for ppdsparse (defaults).
Every solver runs at every N (default 1, 2, 4, ... up to the cores), the models must be bitwise
identical to N = 1's, and one table row per solver gives the wall times and the efficiency
T(1) / (N T(N)).

The breakdown, per solver and N, splits the wall time of train() into
  start:      Engine.start: the LocalCluster up, its workers registered, the client connected
              (the workers are forked from streamfit's forkserver, started once before the
              timed runs, as in a process that ran a cluster before: its own start, the one
              a CLI run pays, is printed with the warm-ups; tools/bench_worker_start.py
              compares it with Dask's spawn in fresh processes);
  close:      Engine.close;
  checkpoint: Checkpointer.save (in the driver, serial);
  passes:     the engine calls (map, map_reduce, imap_unordered; for imap_unordered also the
              driver's work between results), and inside them, from Dask's task stream, the
              workers' compute in chunk (or class-group) tasks and in the tree's sums, and the
              transfers (all summed over workers); "first pass" is the first engine call alone
              (the workers' first tasks load the numba kernels);
  driver:     the rest, serial work in the driver process (solves, set-up, model, metrics log).
"peak RSS / worker" is the largest worker's peak resident set size (shared pages, such as
ppdsparse's mapped training matrix, count in every process that touched them); "PSS all workers"
the workers' proportional set sizes summed at the end of the run (shared pages counted once);
"cached chunks" the decoded chunks all workers' chunk caches hold at the end (the store's chunk
count when each worker kept to its share, streamfit.engine's chunk affinity); the JSON's
"kept_state" the per-sample state arrays the workers keep of those they wrote (streamfit.checkpoint).
"overhead" is passes − (task + sum compute) / N: scheduling, transfers, stragglers and idle
workers waiting for the driver; "latency / pass" that overhead per engine call (each pass's
critical path beyond its spread compute: tools/bench_pass_latency.py splits it up). The line "predicted N" models T(N) = serial + passes(N) with
serial = start + close + checkpoint + driver (assumed constant) and each pass taking the larger of its
compute / N and its longest task (a map_reduce task sums leaf_chunks(chunks, N) chunks: scaled
to N's), plus its overhead (pass wall − compute / N), all measured at the smallest N run (on a
loaded machine the larger N's compute is inflated by CPU contention). A task that sums several
chunks (streamfit.engine.fold_chunks) counts as chunk-task compute, its sums included.

    --out FILE.json   every run (seconds, breakdown, each pass, peak RSS and USS per worker, PSS
                      of all workers, identical, the model's SHA-256), the settings and the tables, rewritten after
                      each run; --time-limit S: train's time_limit per run (a solver's remaining
                      runs are skipped once one is cut); a run that fails is reported and the others
                      go on. tools/device_scaleout.sh runs it on the lent 16-core machine.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hashlib
import json
import os
import shutil
import tempfile
import time
from collections import defaultdict

import numpy as np
import scipy.sparse as sp

from streamfit import engine as engine_mod
from streamfit.checkpoint import Checkpointer
from streamfit.engine import WORKER_START_METHOD, Engine, leaf_chunks
from streamfit.errors import TimeLimitReached
from streamfit.model import load_model
from streamfit.store import StoreWriter
from streamfit.train import train

SETTINGS = {
    "stagewise": {"generator": "gradient", "block_size": 1024, "n_passes": 1},
    # the penalty and λ of the sessions before bcd's default changed (session 14), for comparable runs
    "bcd": {"mode": "chunks", "group_size": 2048, "max_iter": 1, "penalty": "l1/l2", "lam": 1e-3},
    "ppdsparse": {},
}


def make_store(path: str, rows: int, features: int, used: int, row_nnz: int, classes: int, chunks: int, own: float):
    """Writes a store of `rows` l2-normalized rows (columns sorted): `row_nnz` distinct columns each, a share `own`
    of them from the `used // classes` columns of the row's class, the rest from all `used`
    columns (spread over the `features` by a fixed random map); returns its nnz."""
    rng = np.random.default_rng(0)
    columns = np.sort(rng.choice(features, size=used, replace=False))
    per_class = max(used // classes, 1)
    labels = rng.integers(0, classes, size=rows).astype(np.int32)
    writer = StoreWriter(path, backend="zarr", multilabel=False, chunk_rows=-(-rows // chunks))
    nnz = 0
    batch = 8192
    for lo in range(0, rows, batch):
        y = labels[lo : lo + batch]
        n = len(y)
        n_own = int(round(own * row_nnz))
        own_cols = (y[:, None] * per_class + rng.integers(0, per_class, size=(n, n_own))) % used
        any_cols = rng.integers(0, used, size=(n, row_nnz - n_own))
        cols = columns[np.concatenate([own_cols, any_cols], axis=1)]
        X = sp.csr_matrix(
            (rng.random(cols.size).astype(np.float32) + 0.1, cols.ravel(), np.arange(0, cols.size + 1, row_nnz)),
            shape=(n, features),
        )
        X.sum_duplicates()
        norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
        X = sp.diags(1 / norms).astype(np.float32) @ X
        X.sort_indices()  # each row's columns in order, as ingest writes them
        writer.write_rows(X.tocsr(), y)
        nnz += X.nnz
    writer.close(n_features=features, classes=[f"c{k}" for k in range(classes)])
    return nnz


class Breakdown:
    """Wall time of train()'s parts, collected by wrapping Engine and Checkpointer methods."""

    def __init__(self):
        self.seconds: dict[str, float] = defaultdict(float)
        self.passes: list[tuple[str, float, float]] = []  # (method, start, stop) of each engine call, time.time()
        self.stream = None  # distributed's TaskStream, while a cluster runs
        self.peak_rss: dict[str, float] = {}  # MiB per worker address, read before the cluster closes

    @contextlib.contextmanager
    def installed(self):
        saved = {}

        def timed(cls, name, key):
            original = getattr(cls, name)
            saved[(cls, name)] = original

            @functools.wraps(original)
            def wrapper(*args, **kwargs):
                t0 = time.time()
                try:
                    return original(*args, **kwargs)
                finally:
                    self.seconds[key] += time.time() - t0

            setattr(cls, name, wrapper)

        def timed_pass(name):
            original = getattr(Engine, name)
            saved[(Engine, name)] = original

            @functools.wraps(original)
            def plain(engine, *args, **kwargs):
                t0 = time.time()
                try:
                    return original(engine, *args, **kwargs)
                finally:
                    self.passes.append((name, t0, time.time()))
                    self.seconds["passes"] += time.time() - t0

            @functools.wraps(original)
            def unordered(engine, *args, **kwargs):
                """Counts the time inside the engine's iterator only, not the driver's work
                between its results (checkpoints, model updates)."""
                results = original(engine, *args, **kwargs)
                pairs = results._pairs
                seconds, passes = self.seconds, self.passes

                def timed_pairs():
                    first, inside = time.time(), 0.0
                    try:
                        while True:
                            t0 = time.time()
                            try:
                                item = next(pairs)
                            except StopIteration:
                                break
                            finally:
                                inside += time.time() - t0
                            yield item
                    finally:  # also when the caller closes it after its last result
                        pairs.close()
                        passes.append(("imap_unordered", first, time.time()))
                        seconds["passes"] += inside

                results._pairs = timed_pairs()
                return results

            setattr(Engine, name, unordered if name == "imap_unordered" else plain)

        timed(Engine, "start", "start")
        timed(Engine, "close", "close")
        timed(Checkpointer, "save", "checkpoint")
        timed_pass("map")
        timed_pass("map_reduce")
        timed_pass("imap_unordered")
        try:
            yield self
        finally:
            for (cls, name), original in saved.items():
                setattr(cls, name, original)


def _worker_memory() -> dict[str, float]:
    """This process's memory in MiB (run on each worker by Client.run before the cluster
    closes): its peak resident set (`peak_rss`, counting every page it touched, shared ones too)
    and now its resident, unique (`uss`: freed if it exited) and proportional (`pss`: shared
    pages divided among the processes that map them; summed over the workers, what they hold
    together) set sizes."""
    import resource

    import psutil

    info = psutil.Process().memory_full_info()
    return {
        "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "rss": info.rss / 2**20,
        "uss": info.uss / 2**20,
        "pss": getattr(info, "pss", 0) / 2**20,
    }


def _cached_chunks() -> int:
    """The decoded chunks this process holds in its stores' chunk caches (run on each worker by
    Client.run before the cluster closes): summed over the workers, the store's chunk count when
    each chunk was decoded by one worker (chunk affinity), up to N times it when not."""
    import gc

    from streamfit.store.store import Store

    return sum(len(o._cache) for o in gc.get_objects() if isinstance(o, Store))


def _kept_state() -> int:
    """The per-sample state arrays this process keeps of those it wrote (streamfit.checkpoint's
    _WRITTEN: a read of one of them skips the file), run on each worker before the cluster
    closes; 0 on a commit without that cache."""
    from streamfit import checkpoint

    return len(getattr(checkpoint, "_WRITTEN", {}))


def task_times(tasks: list[dict]) -> tuple[float, float, float, list[tuple[float, float, bool]]]:
    """(chunk-task compute, sum compute, transfers) in seconds over all workers, and each task's
    (start, duration, is_sum)."""
    work = sums = transfer = 0.0
    spans = []
    for t in tasks:
        is_sum = str(t["key"]).startswith(("add_", "('add_"))  # add_subtree (add_results before session 16)
        for s in t["startstops"]:
            d = s["stop"] - s["start"]
            if s["action"] == "compute":
                spans.append((s["start"], d, is_sum))
                if is_sum:
                    sums += d
                else:
                    work += d
            elif s["action"] == "transfer":
                transfer += d
    return work, sums, transfer, spans


def run_one(store: str, solver: str, n: int, out: str, time_limit: float | None) -> dict:
    """train() on n workers, with its breakdown; returns the seconds, the workers' memory and
    the model's arrays."""
    from distributed import get_task_stream

    b = Breakdown()
    shutil.rmtree(out, ignore_errors=True)
    memory: dict[str, dict[str, float]] = {}
    cached: dict[str, int] = {}
    kept: dict[str, int] = {}
    with b.installed():
        original_start = Engine.start

        stream = contextlib.ExitStack()

        def start(engine):
            original_start(engine)
            if engine.client is not None:
                b.stream = stream.enter_context(get_task_stream(engine.client))

        original_close = Engine.close

        def close(engine):
            if engine.client is not None:
                memory.update(engine.client.run(_worker_memory))
                cached.update(engine.client.run(_cached_chunks))
                kept.update(engine.client.run(_kept_state))
            stream.close()  # TaskStream collects its records from the scheduler on exit
            original_close(engine)

        Engine.start, Engine.close = start, close  # type: ignore[method-assign]
        try:
            t0 = time.time()
            train(store, solver, out, SETTINGS[solver], n_workers=n, progress=False, time_limit=time_limit)
            wall = time.time() - t0
        finally:
            Engine.start, Engine.close = original_start, original_close  # type: ignore[method-assign]
    tasks = b.stream.data if b.stream is not None else []
    work, sums, transfer, spans = task_times(tasks)
    s = dict(b.seconds)
    per_pass = []
    for method, lo, hi in b.passes:
        inside = [(d, is_sum) for start, d, is_sum in spans if lo <= start <= hi]
        compute = sum(d for d, _ in inside)
        longest = max((d for d, is_sum in inside if not is_sum), default=0.0)
        per_pass.append((method, hi - lo, compute, longest))
    workers = sorted(memory)
    return {
        "wall": wall,
        "start": s.get("start", 0.0),
        "close": s.get("close", 0.0),
        "checkpoint": s.get("checkpoint", 0.0),
        "passes": s.get("passes", 0.0),
        "n_passes": len(b.passes),
        "work": work,
        "sums": sums,
        "transfer": transfer,
        "n_tasks": len(tasks),
        "driver": wall - sum(s.get(k, 0.0) for k in ("start", "close", "checkpoint", "passes")),
        "per_pass": per_pass,
        "peak_rss": max((memory[w]["peak_rss"] for w in workers), default=0.0),
        "peak_rss_per_worker": [memory[w]["peak_rss"] for w in workers],
        "pss_total": sum(memory[w]["pss"] for w in workers),
        "uss_per_worker": [memory[w]["uss"] for w in workers],
        "cached_chunks": sum(cached.values()),
        "kept_state": sum(kept.values()),
        "arrays": load_model(os.path.join(out, "model"))._arrays(),
    }


def model_digest(arrays: dict[str, np.ndarray]) -> str:
    """SHA-256 over a model's arrays (names, dtypes, shapes, C-ordered bytes): the same digest in two
    runs (another commit, another machine) is the same model, bit for bit."""
    h = hashlib.sha256()
    for name in sorted(arrays):
        a = np.ascontiguousarray(arrays[name])
        h.update(f"{name} {a.dtype.str} {a.shape}\n".encode())
        h.update(a.tobytes())
    return h.hexdigest()


def predict(r: dict, n: int, workers: int, n_chunks: int) -> float:
    """T(n) from run r (made on `workers` workers): serial parts as measured, each pass the larger
    of compute / n and its longest task at n, plus its measured overhead. A map_reduce task sums
    leaf_chunks(n_chunks, N) chunks on N workers, so its longest task at n is the measured one
    scaled by leaf_chunks(n_chunks, n) / leaf_chunks(n_chunks, workers)."""
    serial = r["start"] + r["close"] + r["checkpoint"] + r["driver"]
    total = serial
    for method, wall, compute, longest in r["per_pass"]:
        overhead = max(wall - compute / workers, 0.0)
        if method == "map_reduce":
            longest *= leaf_chunks(n_chunks, n) / leaf_chunks(n_chunks, workers)
        total += max(compute / n, longest) + overhead
    return total


def make_stores(work: str, args, solvers: list[str], scale: float = 1.0, quiet: bool = False) -> dict[str, str]:
    """The stores each solver trains on, `scale` times the rows (the warm-up's small copies)."""
    stores = {}
    rows = max(int(args.rows * scale), args.chunks)
    extreme_rows = max(int(args.extreme_rows * scale), args.chunks)
    tag = "" if scale == 1 else "-warm"
    if {"stagewise", "bcd"} & set(solvers):
        path = os.path.join(work, f"text{tag}.zarr")
        shutil.rmtree(path, ignore_errors=True)
        nnz = make_store(path, rows, args.features, args.used, args.row_nnz, args.classes, args.chunks, 0.5)
        if not quiet:
            print(
                f"text store: {rows} rows × {args.features} columns ({args.used} used), {nnz} non-zeros, "
                f"{args.classes} classes, {args.chunks} chunks",
                flush=True,
            )
        stores["stagewise"] = stores["bcd"] = path
    if "ppdsparse" in solvers:
        path = os.path.join(work, f"extreme{tag}.zarr")
        shutil.rmtree(path, ignore_errors=True)
        nnz = make_store(
            path,
            extreme_rows,
            args.extreme_features,
            args.extreme_features,
            args.extreme_row_nnz,
            args.extreme_classes,
            args.chunks,
            0.1,
        )
        if not quiet:
            print(
                f"extreme store: {extreme_rows} rows × {args.extreme_features} features, {nnz} non-zeros, "
                f"K = {args.extreme_classes}, {args.chunks} chunks",
                flush=True,
            )
        stores["ppdsparse"] = path
    return stores


def tables(results: dict, workers: list[int], predict_n: int, n_chunks: int) -> str:
    """The speed-up table and the breakdown table (markdown), from the runs that finished; the
    columns and rows by increasing N, whatever order they ran in."""
    workers = sorted(workers)
    lines = [
        "| solver (settings) | " + " | ".join(f"N={n}" for n in workers) + f" | efficiency at {workers[-1]} | "
        f"predicted N={predict_n} | identical |",
        "|---|" + "---|" * (len(workers) + 3),
    ]
    for solver, rs in results.items():
        settings = ", ".join(f"{k} {v}" for k, v in SETTINGS[solver].items()) or "defaults"
        done = [n for n in workers if "wall" in rs.get(n, {})]
        cells = [
            f"{rs[n]['wall']:.1f} s"
            if n in done
            else ("failed (" + rs[n]["error"].split(":")[0] + ")" if n in rs else "not run")
            for n in workers
        ]
        if done:
            first, last = done[0], done[-1]
            t1, tn = rs[first]["wall"] * first, rs[last]["wall"]
            pred = predict(rs[first], predict_n, first, n_chunks)
            efficiency = f"{t1 / (last * tn):.2f}" + ("" if last == workers[-1] else f" (at {last})")
            prediction = f"{pred:.1f} s (efficiency {t1 / (predict_n * pred):.2f})"
            identical = str(all(rs[n]["identical"] for n in done))
        else:
            efficiency = prediction = identical = "-"
        lines.append(
            f"| {solver} ({settings}) | " + " | ".join(cells) + f" | {efficiency} | {prediction} | {identical} |"
        )
    lines += [
        "",
        "| solver | N | wall | start | close | checkpoint | driver | passes (n) | first pass | task compute | "
        "sum compute | transfers | overhead | latency / pass ms | tasks | peak RSS / worker MiB | PSS all workers MiB "
        "| cached chunks |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for solver, rs in results.items():
        for n, r in sorted(rs.items()):
            if "wall" not in r:
                continue
            overhead = r["passes"] - (r["work"] + r["sums"]) / n
            first_pass = r["per_pass"][0][1] if r["per_pass"] else 0.0
            lines.append(
                f"| {solver} | {n} | {r['wall']:.2f} | {r['start']:.2f} | {r['close']:.2f} | {r['checkpoint']:.2f} | "
                f"{r['driver']:.2f} | {r['passes']:.2f} ({r['n_passes']}) | {first_pass:.2f} | {r['work']:.2f} | {r['sums']:.2f} | {r['transfer']:.2f} | "
                f"{overhead:.2f} | {1e3 * overhead / max(r['n_passes'], 1):.0f} | {r['n_tasks']} | {r['peak_rss']:.0f} | {r['pss_total']:.0f} | {r.get('cached_chunks', '-')} |"
            )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=49152)
    ap.add_argument("--features", type=int, default=2**16)
    ap.add_argument("--used", type=int, default=8192)
    ap.add_argument("--row-nnz", type=int, default=50)
    ap.add_argument("--classes", type=int, default=20)
    ap.add_argument("--chunks", type=int, default=16)
    ap.add_argument("--extreme-rows", type=int, default=10000)
    ap.add_argument("--extreme-features", type=int, default=20000)
    ap.add_argument("--extreme-classes", type=int, default=1000)
    ap.add_argument("--extreme-row-nnz", type=int, default=30)
    cores = os.cpu_count() or 1
    default_workers = ",".join(str(1 << i) for i in range(cores.bit_length()) if 1 << i <= cores)
    ap.add_argument(
        "--workers", default=default_workers, help=f"comma-separated N, run in this order (default {default_workers})"
    )
    ap.add_argument("--solvers", default="stagewise,bcd,ppdsparse")
    ap.add_argument("--predict", type=int, default=16, help="the N to predict from the breakdown")
    ap.add_argument(
        "--time-limit",
        type=float,
        default=None,
        help="seconds per run (train's time_limit): a run past it is reported as not finished and the "
        "solver's remaining runs are skipped",
    )
    ap.add_argument(
        "--out", default=None, help="also write every run's numbers, the tables and the settings here (JSON)"
    )
    ap.add_argument(
        "--tasks-per-thread",
        type=int,
        default=engine_mod.TASKS_PER_THREAD,
        help="streamfit.engine.TASKS_PER_THREAD for these runs: a map_reduce's subtree tasks per worker "
        f"thread (default {engine_mod.TASKS_PER_THREAD}); the model is the same bits for any value",
    )
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    engine_mod.TASKS_PER_THREAD = args.tasks_per_thread
    workers = [int(w) for w in args.workers.split(",")]
    work = args.workdir or tempfile.mkdtemp(prefix="bench-scaleout-")
    os.makedirs(work, exist_ok=True)
    solvers = args.solvers.split(",")
    t_stores = time.time()
    stores = make_stores(work, args, solvers)
    # numba compiles each kernel on first use (tens of seconds, in every worker at once); a run in
    # process on a small store of the same kind fills the cache that the workers then load, so
    # no timed run compiles
    warm = make_stores(work, args, solvers, scale=1 / 64, quiet=True)
    print(f"stores written in {time.time() - t_stores:.1f} s", flush=True)
    # the first embedded cluster of a process starts the worker forkserver (its imports): once
    # here, so that every timed run starts its workers alike
    t0 = time.time()
    with Engine(mode="local", n_workers=1):
        first_cluster = {"method": WORKER_START_METHOD, "start": time.time() - t0}
        t1 = time.time()
    first_cluster["close"] = time.time() - t1
    print(
        f"first cluster of the process (1 worker, {WORKER_START_METHOD}): start {first_cluster['start']:.2f} s, "
        f"close {first_cluster['close']:.2f} s",
        flush=True,
    )

    results: dict[str, dict[int, dict]] = {}

    def save() -> None:
        """--out as it stands (after every run: a benchmark killed at a time budget keeps what it measured)."""
        if not args.out:
            return
        record = {
            "settings": vars(args),
            "solver_settings": SETTINGS,
            "cores": cores,
            "first_cluster": first_cluster,
            "results": {
                solver: {str(n): {k: v for k, v in r.items() if k != "arrays"} for n, r in rs.items()}
                for solver, rs in results.items()
            },
            "tables": tables(results, workers, args.predict, args.chunks),
        }
        with open(args.out + ".partial", "w") as f:
            json.dump(record, f, indent=1)
        os.replace(args.out + ".partial", args.out)

    for solver in solvers:
        results[solver] = {}
        try:
            t0 = time.time()
            train(warm[solver], solver, os.path.join(work, "warm-up"), SETTINGS[solver], n_workers=0, progress=False)
            shutil.rmtree(os.path.join(work, "warm-up"))
            print(f"  {solver} warm-up in process: {time.time() - t0:.1f} s", flush=True)
        except Exception as e:  # reported, and the solver's runs still tried
            print(f"  {solver} warm-up failed: {type(e).__name__}: {e}", flush=True)
        ref = None
        for n in workers:
            try:
                r = run_one(stores[solver], solver, n, os.path.join(work, f"run-{solver}-{n}"), args.time_limit)
            except Exception as e:  # one failed run: reported in the tables, the others still run
                results[solver][n] = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
                print(f"  {solver} N={n}: failed: {results[solver][n]['error']}", flush=True)
                save()
                if isinstance(e, TimeLimitReached):
                    break  # the other N are not slower by design, but the budget is spent
                continue
            ref = r["arrays"] if ref is None else ref
            r["identical"] = ref.keys() == r["arrays"].keys() and all(
                np.array_equal(ref[k], r["arrays"][k]) for k in ref
            )
            r["model_sha256"] = model_digest(r["arrays"])
            results[solver][n] = r
            print(
                f"  {solver} N={n}: {r['wall']:.1f} s, identical to the first: {r['identical']}, "
                f"model {r['model_sha256'][:16]}, state arrays kept by the workers {r['kept_state']}",
                flush=True,
            )
            shutil.rmtree(os.path.join(work, f"run-{solver}-{n}"), ignore_errors=True)
            save()

    print()
    print(tables(results, workers, args.predict, args.chunks), flush=True)
    save()
    if not args.workdir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
