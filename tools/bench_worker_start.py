"""What an embedded cluster costs before and after the work: worker start by Dask's "spawn"
against streamfit's forkserver (issue 19).

    python tools/bench_worker_start.py [--workers 1,2,4,8] [--methods spawn,forkserver]
        [--repeats 3] [--solvers bcd] [--rows 1024] [--chunks 64] [--out FILE.json] [--workdir DIR]

Writes a small text store (tools/bench_scaleout.py's generator: `--rows` rows in `--chunks`
chunks, 2^16 columns of which 8192 used, 20 classes), then, for every repeat, N and solver,
runs `streamfit.train.train(store, solver, n_workers=N)` once per start method, each in a fresh
Python process (as a CLI run: the forkserver, started by the first embedded cluster of a
process, is started anew in each), methods alternating. From bench_scaleout's breakdown of each
run: `start` (Engine.start: the LocalCluster with its workers up and the client connected; with
the forkserver, the server's start and imports included), `first pass` (the first engine call:
with spawn, each worker imports the solver, its kernels and zarr there), `close`
(Engine.close), `wall` (train(), the store already written). The store is small so that these
fixed costs are the run; the models of the two methods must be bitwise identical. The method
`forkserver-numba-cold` is the forkserver without `streamfit.numba_target` in its preload: the
workers' first pass then includes numba's initialisation in every worker.

Prints a table of medians per method and N, with the ratios forkserver / spawn.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PARTS = ("start", "first_pass", "other_passes", "close", "wall")
# a --methods entry: the forkserver without streamfit.numba_target in its preload (as before session
# 12), so that each worker initialises numba's CPU target in its first kernel call
NUMBA_COLD = "forkserver-numba-cold"


def child(method: str, n: int, solver: str, store: str, out: str) -> None:
    """One train() run with the given start method; prints its breakdown as one JSON line."""
    sys.path.insert(0, HERE)
    from bench_scaleout import run_one

    import streamfit.engine

    if method == NUMBA_COLD:
        method = "forkserver"
        streamfit.engine.WORKER_PRELOAD = tuple(
            m for m in streamfit.engine.WORKER_PRELOAD if m != "streamfit.numba_target"
        )
    streamfit.engine.WORKER_START_METHOD = method
    r = run_one(store, solver, n, out, None)
    first = r["per_pass"][0][1] if r["per_pass"] else 0.0
    record = {
        "start": r["start"],
        "first_pass": first,
        "other_passes": r["passes"] - first,
        "close": r["close"],
        "wall": r["wall"],
        "arrays": {k: v.tobytes().hex() for k, v in r["arrays"].items()},
    }
    print("RESULT " + json.dumps(record), flush=True)


def report(runs: dict[str, list[dict]], solvers: list[str], workers: list[int], methods: list[str]) -> str:
    """The table of medians per solver, N and method, the ratios of each other method to the
    first, and whether all models of a solver are bitwise identical."""
    lines = [
        "| solver | N | method | " + " | ".join(PARTS) + " | runs |",
        "|---|---|---|" + "---|" * (len(PARTS) + 1),
    ]
    identical = True
    for solver in solvers:
        for n in workers:
            medians = {}
            for method in methods:
                rs = runs.get(f"{solver}|{n}|{method}", [])
                if not rs:
                    continue
                medians[method] = {k: statistics.median(r[k] for r in rs) for k in PARTS}
                lines.append(
                    f"| {solver} | {n} | {method} | "
                    + " | ".join(f"{medians[method][k]:.2f}" for k in PARTS)
                    + f" | {len(rs)} |"
                )
            a = methods[0]
            for b in methods[1:]:
                if a not in medians or b not in medians:
                    continue
                lines.append(
                    f"| {solver} | {n} | {b} / {a} | "
                    + " | ".join(f"{medians[b][k] / medians[a][k]:.2f}" if medians[a][k] > 0 else "-" for k in PARTS)
                    + " | |"
                )
    for solver in solvers:
        models = [r["arrays"] for key, rs in runs.items() if key.startswith(f"{solver}|") for r in rs]
        identical &= all(m == models[0] for m in models)
    lines.append("")
    lines.append(f"every model bitwise identical to the others of its solver: {identical}")
    return "\n".join(lines)


def save(args, runs: dict[str, list[dict]], table: str) -> None:
    """--out as it stands (after every run: a run killed at a time budget keeps what it measured)."""
    if not args.out:
        return
    slim = {k: [{p: r[p] for p in PARTS} for r in rs] for k, rs in runs.items()}
    with open(args.out + ".partial", "w") as f:
        json.dump({"settings": vars(args), "runs": slim, "table": table}, f, indent=1)
    os.replace(args.out + ".partial", args.out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--workers", default="1,2")
    ap.add_argument("--methods", default="spawn,forkserver")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--solvers", default="bcd")
    ap.add_argument("--rows", type=int, default=1024)
    ap.add_argument("--chunks", type=int, default=64)
    ap.add_argument("--out", default=None, help="also write every run and the table here (JSON)")
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--child", nargs=5, metavar=("METHOD", "N", "SOLVER", "STORE", "OUT"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        method, n, solver, store, out = args.child
        child(method, int(n), solver, store, out)
        return

    sys.path.insert(0, HERE)
    from bench_scaleout import make_store

    work = args.workdir or tempfile.mkdtemp(prefix="bench-worker-start-")
    os.makedirs(work, exist_ok=True)
    store = os.path.join(work, "text.zarr")
    nnz = make_store(store, args.rows, 2**16, 8192, 50, 20, args.chunks, 0.5)
    print(f"store: {args.rows} rows, {nnz} non-zeros, {args.chunks} chunks", flush=True)
    workers = [int(w) for w in args.workers.split(",")]
    methods = args.methods.split(",")
    solvers = args.solvers.split(",")
    runs: dict[str, list[dict]] = {}
    for solver in solvers:  # a warm numba cache for every kernel the runs load (no run compiles)
        subprocess.run(
            [sys.executable, __file__, "--child", "spawn", "0", solver, store, os.path.join(work, "warm")],
            check=True,
            capture_output=True,
        )
    for rep in range(args.repeats):
        for n in workers:
            for solver in solvers:
                order = methods if rep % 2 == 0 else methods[::-1]
                for method in order:
                    cmd = [
                        sys.executable,
                        __file__,
                        "--child",
                        method,
                        str(n),
                        solver,
                        store,
                        os.path.join(work, "run"),
                    ]
                    p = subprocess.run(cmd, capture_output=True, text=True)
                    line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
                    if p.returncode != 0 or not line:
                        print(
                            f"  {solver} N={n} {method}: failed (exit {p.returncode}): {p.stderr[-2000:]}", flush=True
                        )
                        continue
                    r = json.loads(line[0][len("RESULT ") :])
                    runs.setdefault(f"{solver}|{n}|{method}", []).append(r)
                    print(f"  {solver} N={n} {method}: " + ", ".join(f"{k} {r[k]:.2f}" for k in PARTS), flush=True)
                    save(args, runs, report(runs, solvers, workers, methods))
    table = report(runs, solvers, workers, methods)
    print()
    print(table, flush=True)
    save(args, runs, table)
    if not args.workdir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
