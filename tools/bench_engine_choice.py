"""In process or the embedded cluster: which engine trains faster with a solver's defaults, and
what the auto engine's rule predicts (issue 19, session 34).

    python tools/bench_engine_choice.py make --workdir DIR --set measured|held|held2
    python tools/bench_engine_choice.py noop --workdir DIR [--workers 2] [--chunks 8] [--rounds 40]
    python tools/bench_engine_choice.py run --workdir DIR --stores A,B,... [--solver stagewise]
        [--repeats 3] [--workers 2] [--out FILE.json]

`make` writes the seeded synthetic stores of a set (`SETS`: tools/bench_scaleout.py's
`make_store`, text-like sparse rows of `row_nnz` non-zeros over `used` columns; each shape's
arguments are listed below) under DIR/STORE.zarr. `noop` measures the embedded cluster's own
costs through the engine that `train` uses: its start (Engine.__enter__, workers forked from the
forkserver, which the first start in a process also starts), and a round of `map_reduce` tasks
that do nothing (one per chunk of a store of `--chunks` chunks, summed along the engine's tree),
against the same rounds in process. `run` trains each store (DIR/STORE.zarr, or a path) with the
CLI in a fresh process, `streamfit -q train STORE --out RUN --overwrite --n-workers 0`, then
`--n-workers N` (the embedded cluster), alternating, `--repeats` times each, and records for
each run: wall and CPU seconds of the process tree and its peak RSS (summed every 0.1 s, as
tools/bench_ooc_text.py measures), the steps of metrics.jsonl, the seconds to the first step and
per step after it, whether the two engines' models are bitwise the same (the run directory's
model arrays), and what streamfit.engine.auto_choice says for that store on this machine (its
predicted walls and its choice). The table: median wall per engine, the faster, the rule's
choice and its wall ÷ the faster one's.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ooc_text import measure  # noqa: E402
from bench_scaleout import make_store  # noqa: E402

# make_store(rows, features, used, row_nnz, classes, chunks, own) of each store; "measured": the
# shapes the rule's constants come from; "held": shapes not measured before the rule was written;
# "held2": shapes for the second rule, written after "held" had failed the first.
SETS = {
    "measured": {
        "wide-light": dict(rows=40_000, features=2**18, used=60_000, row_nnz=60, classes=20, chunks=4, own=0.5),
        "heavy-steps": dict(rows=262_144, features=2**16, used=4096, row_nnz=50, classes=20, chunks=16, own=0.5),
        "many-classes": dict(rows=60_000, features=2**16, used=4096, row_nnz=40, classes=200, chunks=8, own=0.5),
        "numeric": dict(rows=200_000, features=64, used=48, row_nnz=40, classes=10, chunks=8, own=0.5),
        "rows-10k": dict(rows=10_000, features=2**16, used=8192, row_nnz=80, classes=20, chunks=4, own=0.5),
    },
    "held": {
        "mid-text": dict(rows=150_000, features=2**17, used=20_000, row_nnz=70, classes=30, chunks=10, own=0.5),
        "tall-narrow": dict(rows=600_000, features=2**12, used=1024, row_nnz=20, classes=8, chunks=24, own=0.5),
        "k100-wide": dict(rows=30_000, features=2**17, used=30_000, row_nnz=50, classes=100, chunks=6, own=0.5),
        "numeric-wide": dict(rows=400_000, features=256, used=200, row_nnz=60, classes=5, chunks=12, own=0.5),
        "rows-1m": dict(rows=1_000_000, features=2**14, used=2048, row_nnz=12, classes=4, chunks=32, own=0.5),
        "rows-800k-k50": dict(rows=800_000, features=2**12, used=4096, row_nnz=20, classes=50, chunks=16, own=0.5),
    },
    # the second check (rule v2: one core left to the driver and the scheduler), after "held" failed
    "held2": {
        "heavy-a": dict(rows=1_200_000, features=2**12, used=4096, row_nnz=16, classes=30, chunks=24, own=0.5),
        "heavy-b": dict(rows=200_000, features=2**14, used=8192, row_nnz=30, classes=100, chunks=12, own=0.5),
        "light-c": dict(rows=80_000, features=2**18, used=40_000, row_nnz=40, classes=10, chunks=8, own=0.5),
    },
}


def make(workdir: Path, which: str) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    for name, spec in SETS[which].items():
        path = workdir / f"{name}.zarr"
        if path.exists():
            print(f"{name}: exists", flush=True)
            continue
        t0 = time.perf_counter()
        nnz = make_store(str(path), **spec)
        print(f"{name}: {spec}, nnz {nnz:,}, {time.perf_counter() - t0:.1f} s", flush=True)


def noop_task(source, chunk_id: int) -> np.ndarray:
    return np.zeros(1)


def noop(workdir: Path, workers: int, chunks: int, rounds: int) -> dict:
    """Seconds of the cluster's start, and per round of no-op map_reduce tasks on each engine."""
    from streamfit.engine import Engine
    from streamfit.store import open_store

    path = workdir / f"noop-{chunks}.zarr"
    if not path.exists():
        make_store(str(path), rows=chunks * 64, features=256, used=64, row_nnz=4, classes=2, chunks=chunks, own=0.5)
    store = open_store(str(path))
    out = {"workers": workers, "chunks": chunks, "rounds": rounds, "load": os.getloadavg()[0]}
    for mode in ("inprocess", "local"):
        t0 = time.perf_counter()
        with Engine(mode=mode, n_workers=workers) as engine:
            started = time.perf_counter()
            engine.map_reduce(noop_task, store, range(store.n_chunks))  # the workers' first task
            t1 = time.perf_counter()
            for _ in range(rounds):
                engine.map_reduce(noop_task, store, range(store.n_chunks))
            t2 = time.perf_counter()
        out[mode] = {"start_s": started - t0, "first_round_s": t1 - started, "round_s": (t2 - t1) / rounds}
    print(json.dumps(out), flush=True)
    return out


def model_digest(run: Path) -> str:
    """SHA-256 of the model's arrays (model/arrays.npz, by name), the bytes the engines must agree on."""
    h = hashlib.sha256()
    with np.load(run / "model" / "arrays.npz", allow_pickle=False) as arrays:
        for name in sorted(arrays.files):
            h.update(name.encode() + np.ascontiguousarray(arrays[name]).tobytes())
    return h.hexdigest()


def steps_of(run: Path) -> tuple[int, float, float]:
    """(steps, seconds to the first step, seconds per step after it) from metrics.jsonl."""
    lines = [json.loads(s) for s in (run / "metrics.jsonl").read_text().splitlines() if s.strip()]
    times = [r["wall_time"] for r in lines if "wall_time" in r and r.get("step", 0) >= 1]
    if not times:
        return 0, float("nan"), float("nan")
    per = (times[-1] - times[0]) / (len(times) - 1) if len(times) > 1 else float("nan")
    return len(times), times[0], per


def prediction(store_path: str, solver: str, cores: int) -> dict:
    """The auto engine's choice for the store on `cores` cores (streamfit.engine.auto_choice with
    the solver's work estimate), and main's before it (the same without an estimate: the
    cluster above the size bound)."""
    from streamfit.engine import auto_choice
    from streamfit.solvers import get_solver
    from streamfit.store import open_store
    from streamfit.train import make_params

    store = open_store(store_path)
    fitter = get_solver(solver)(make_params(solver, {}))
    size = (store.manifest.nnz, store.n_classes, store.n_chunks, fitter.uses_workers(store))
    choice = auto_choice(None, None, *size, work=fitter.work(store), cores=cores)
    before = auto_choice(None, None, *size, cores=cores)
    return {
        "mode": choice.mode,
        "inprocess_s": choice.inprocess_s,
        "cluster_s": choice.cluster_s,
        "why": choice.why,
        "main_mode": before.mode,
    }


def run(args) -> None:
    workdir = Path(args.workdir)
    results: dict = json.loads(Path(args.out).read_text()) if args.out and Path(args.out).exists() else {}
    for name in args.stores.split(","):
        path = Path(name) if name.endswith(".zarr") else workdir / f"{name}.zarr"
        key = f"{path.stem}/{args.solver}"
        entry = results.setdefault(key, {"runs": []})
        entry["auto"] = prediction(str(path), args.solver, args.workers)
        for rep in range(args.repeats):
            for n in (0, args.workers) if rep % 2 == 0 else (args.workers, 0):
                out = workdir / f"run-{path.stem}-{args.solver}-{n}"
                cmd = [sys.executable, "-m", "streamfit", "-q", "train", str(path), "--out", str(out), "--overwrite"]
                cmd += ["--solver", args.solver, "--n-workers", str(n)]
                load = os.getloadavg()[0]
                m = measure(cmd, log=workdir / "runs.log")
                steps, first, per = steps_of(out) if m["rc"] == 0 else (0, float("nan"), float("nan"))
                r = {
                    "workers": n,
                    "rep": rep,
                    "rc": m["rc"],
                    "wall": m["wall"],
                    "cpu": m["cpu"],
                    "peak_mib": m["peak_mib"],
                    "steps": steps,
                    "first_step_s": first,
                    "per_step_s": per,
                    "load": load,
                    "model": model_digest(out) if m["rc"] == 0 else None,
                }
                entry["runs"].append(r)
                print(key, json.dumps(r), flush=True)
                if args.out:
                    Path(args.out).write_text(json.dumps(results, indent=1) + "\n")
    print(table(results, args.workers))


def engine_name(workers: int) -> str:
    return "in process" if workers == 0 else "cluster"


def table(results: dict, workers: int) -> str:
    rows = [
        "| store/solver | steps | in process: wall s (median), CPU s, per step s | "
        f"{workers} workers: wall s (median), CPU s, per step s | faster | auto: predicted in process; cluster s | "
        "auto's choice | its wall ÷ the faster | main's auto: choice, wall ÷ the faster | same model |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    ratios: dict[str, list[float]] = {"auto": [], "main": []}
    for key, entry in results.items():
        by = {n: [r for r in entry["runs"] if r["workers"] == n and r["rc"] == 0] for n in (0, workers)}
        if not by[0] or not by[workers]:
            continue
        med = {n: statistics.median(r["wall"] for r in by[n]) for n in by}
        cpu = {n: statistics.median(r["cpu"] for r in by[n]) for n in by}
        per = {n: statistics.median(r["per_step_s"] for r in by[n]) for n in by}
        faster = 0 if med[0] <= med[workers] else workers
        auto = entry["auto"]
        chosen = 0 if auto["mode"] == "inprocess" else workers
        main = 0 if auto["main_mode"] == "inprocess" else workers
        pred = "—" if auto["inprocess_s"] is None else f"{auto['inprocess_s']:.1f}; {auto['cluster_s']:.1f}"
        ratios["auto"].append(med[chosen] / med[faster])
        ratios["main"].append(med[main] / med[faster])
        same = len({r["model"] for n in by for r in by[n]}) == 1
        walls = {n: ", ".join(f"{r['wall']:.1f}" for r in by[n]) for n in by}
        rows.append(
            f"| {key} | {by[0][0]['steps']} | {med[0]:.1f} ({walls[0]}), {cpu[0]:.1f}, {per[0]:.3f} | "
            f"{med[workers]:.1f} ({walls[workers]}), {cpu[workers]:.1f}, {per[workers]:.3f} | "
            f"{engine_name(faster)} | {pred} | {engine_name(chosen)} | {med[chosen] / med[faster]:.2f} | "
            f"{engine_name(main)}, {med[main] / med[faster]:.2f} | {'yes' if same else 'NO'} |"
        )
    if ratios["auto"]:
        rows.append(
            f"\nMean over the {len(ratios['auto'])} stores of the choice's wall ÷ the faster engine's: "
            f"auto {statistics.mean(ratios['auto']):.2f}, main's auto {statistics.mean(ratios['main']):.2f}; "
            f"worst: auto {max(ratios['auto']):.2f}, main's auto {max(ratios['main']):.2f}"
        )
    return "\n".join(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    p = sub.add_parser("make")
    p.add_argument("--workdir", required=True)
    p.add_argument("--set", choices=sorted(SETS), required=True)
    p = sub.add_parser("noop")
    p.add_argument("--workdir", required=True)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--chunks", type=int, default=8)
    p.add_argument("--rounds", type=int, default=40)
    p = sub.add_parser("run")
    p.add_argument("--workdir", required=True)
    p.add_argument("--stores", required=True, help="comma-separated: names of DIR/NAME.zarr, or paths ending .zarr")
    p.add_argument("--solver", default="stagewise")
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--out", default="")
    p = sub.add_parser("table")
    p.add_argument("--out", required=True)
    p.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    if args.command == "make":
        make(Path(args.workdir), args.set)
    elif args.command == "noop":
        noop(Path(args.workdir), args.workers, args.chunks, args.rounds)
    elif args.command == "run":
        run(args)
    else:
        print(table(json.loads(Path(args.out).read_text()), args.workers))


if __name__ == "__main__":
    main()
