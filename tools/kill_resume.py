"""Kill-and-resume harness: SIGKILL `streamfit train` (every registered solver) and `streamfit
ingest` at random moments, restart, and compare bitwise with an uninterrupted run.

    python tools/kill_resume.py [--data digits|FILE.svm[.gz]] [--kills 6] [--solvers stagewise,bcd,...]
                                [--n-workers 0] [--chunk-rows 200] [--seed 0] [--workdir DIR]

For each job an uninterrupted reference run is timed (duration D). Then runs are started on one
output (train: with --resume; ingest: the same command again) and killed: even attempts at a
time drawn uniformly from [0, D) after the start, odd attempts as soon as a write is seen in
progress (train: a `step-*.partial` directory or a `*.tmp-*` file under checkpoints/; ingest:
OUT.partial), to hit the writes on purpose. A kill lands if the process was still running. A run
that finishes before its kill ends the chain: it is compared with the reference, and a new chain
starts from an empty output. Each chain ends with a run to completion and a bitwise comparison
(model arrays; for ingest the manifest, chunk digests included, and the arrays), until `--kills`
kills have landed. "kills in a write" counts kills after which partial files were found (train:
the checkpoint markers above or `model.partial`; ingest: OUT.partial).

Data: `digits` (scikit-learn's, written as LIBSVM) or a LIBSVM file, e.g.
../shared/data/libsvm/dna/dna.scale.gz. The store is ingested with --no-hash and --chunk-rows.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from streamfit.model import load_model
from streamfit.solvers import SOLVER_NAMES
from streamfit.store import open_store

SOLVER_PARAMS = {  # small runs that still write many checkpoints
    "stagewise": ["generator=sequential", "block_size=6", "n_passes=2", "link=softmax", "max_iter=3"],
    "bcd": ["mode=chunks", "group_size=8", "max_iter=25", "tol=1e-9"],
    "fbpd": ["max_iter=400", "tol=0"],
    "ppdsparse": ["group_size=1", "tol=1e-4", "delta=null"],
}


def cli(*args) -> list[str]:
    return [sys.executable, "-m", "streamfit.cli", "-q", *map(str, args)]


def partial_files(job: str, out: Path) -> set[tuple[str, int, int]]:
    """Partial files of writes not completed (see the module docstring), as (path, inode,
    ctime): a dead run's leftovers are told apart from those of the run after it."""
    found = [Path(f"{out}.partial")] if job == "ingest" else [out / "model.partial"]
    if job != "ingest":
        for root, dirs, files in os.walk(out / "checkpoints"):
            found += [Path(root, n) for n in dirs if n.endswith(".partial")]
            found += [Path(root, n) for n in files if ".tmp-" in n]
    marks = set()
    for path in found:
        try:
            st = path.stat()
        except OSError:
            continue
        marks.add((str(path), st.st_ino, st.st_ctime_ns))
    return marks


def snapshot(job: str, out: Path):
    """What must be identical: the model's arrays, or the store's manifest and arrays."""
    if job != "ingest":
        return load_model(str(out))._arrays()
    store = open_store(str(out))
    if store.verify():
        raise SystemExit(f"{out}: the re-run store fails verification")
    with open(out / "manifest.json") as f:
        manifest = json.load(f)
    X, y = store.to_scipy()
    return {"manifest": manifest, "indptr": X.indptr, "indices": X.indices, "data": X.data, "labels": y}


def identical(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(a[k] == b[k] if isinstance(a[k], dict) else np.array_equal(a[k], b[k]) for k in a)


def run_job(job: str, command, out_of, kills_wanted: int, rng) -> dict:
    """Reference run, then chains of killed and restarted runs. Returns the table row."""
    ref = out_of("ref")
    started = time.perf_counter()
    subprocess.run(command(ref, resume=False), check=True, capture_output=True)
    duration = time.perf_counter() - started
    reference = snapshot(job, ref)
    row = {"job": job, "ref_s": duration, "kills": 0, "in_write": 0, "missed": 0, "chains": 0, "identical": 0}
    attempt = 0
    while row["kills"] < kills_wanted and attempt < 4 * kills_wanted:
        out = out_of(f"chain{row['chains']}")
        landed_in_chain = 0
        while row["kills"] < kills_wanted and attempt < 4 * kills_wanted:
            attempt += 1
            stale = partial_files(job, out)
            proc = subprocess.Popen(command(out, resume=True), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            start = time.perf_counter()
            if attempt % 2:  # aimed: as soon as this run has a write in progress
                while proc.poll() is None and not partial_files(job, out) - stale:
                    time.sleep(0.001)
            else:
                time.sleep(rng.uniform(0, duration))
            if proc.poll() is not None:
                row["missed"] += 1
                break  # the chain's run finished before the kill
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
            row["kills"] += 1
            landed_in_chain += 1
            in_write = bool(partial_files(job, out) - stale)
            row["in_write"] += in_write
            print(
                f"  {job}: kill {row['kills']} at {time.perf_counter() - start:.2f}s "
                f"({'aimed' if attempt % 2 else 'uniform'}), write in progress: {in_write}",
                flush=True,
            )
        if not complete(job, out):
            done = subprocess.run(command(out, resume=True), check=False, capture_output=True, text=True)
            if done.returncode != 0:
                raise SystemExit(f"{job}: the final run failed:\n{done.stderr}")
        if landed_in_chain:
            row["chains"] += 1
            row["identical"] += identical(reference, snapshot(job, out))
        else:
            shutil.rmtree(out, ignore_errors=True)
    return row


def complete(job: str, out: Path) -> bool:
    return (out / ("manifest.json" if job == "ingest" else "model/model.json")).exists()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="digits", help="digits, or a LIBSVM file")
    ap.add_argument("--kills", type=int, default=6, help="SIGKILLs that must land per job")
    ap.add_argument("--solvers", default=",".join(SOLVER_NAMES), help="comma-separated (default: every registered one)")
    ap.add_argument("--no-ingest", action="store_true", help="skip the ingest job")
    ap.add_argument("--n-workers", default="0", help="train --n-workers (0: in process)")
    ap.add_argument("--chunk-rows", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory, removed at the end")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="kill-resume-"))
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)
    source = Path(args.data).resolve() if args.data != "digits" else work / "digits.svm"
    if args.data == "digits":
        from sklearn.datasets import dump_svmlight_file, load_digits

        dump_svmlight_file(*load_digits(return_X_y=True), str(source), zero_based=False)
    store = work / "train.zarr"
    subprocess.run(
        cli(
            "ingest",
            source,
            "--format",
            "libsvm",
            "--no-hash",
            "--chunk-rows",
            args.chunk_rows,
            "--out",
            store,
            "--overwrite",
        ),
        check=True,
        capture_output=True,
    )
    print(
        f"data {args.data}: {open_store(str(store)).n_rows} rows, {open_store(str(store)).n_chunks} chunks; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )

    rows = []
    for solver in args.solvers.split(","):
        params = [x for p in SOLVER_PARAMS.get(solver, []) for x in ("-p", p)]

        def train(out, resume, solver=solver, params=params):
            return cli(
                "train",
                store,
                "--solver",
                solver,
                *params,
                "--n-workers",
                args.n_workers,
                "--out",
                out,
                *(["--resume"] if resume else []),
            )

        rows.append(run_job(solver, train, lambda name, s=solver: work / s / name, args.kills, rng))
    if not args.no_ingest:

        def ingest(out, resume):  # a re-run is the same command: it replaces a dead run's OUT.partial
            return cli(
                "ingest",
                source,
                "--format",
                "libsvm",
                "--no-hash",
                "--batch-size",
                "64",
                "--chunk-rows",
                "50",
                "--out",
                out,
            )

        rows.append(run_job("ingest", ingest, lambda name: work / "ingest" / f"{name}.zarr", args.kills, rng))

    print(f"\ndata {args.data}, load average {os.getloadavg()[0]:.2f}")
    print("| job | reference run (s) | kills | kills in a write | finished before the kill | resumed identical |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['job']} | {r['ref_s']:.1f} | {r['kills']} | {r['in_write']} | {r['missed']} | "
            f"{r['identical']}/{r['chains']} |"
        )
    total = sum(r["kills"] for r in rows)
    ok = all(r["identical"] == r["chains"] for r in rows)
    print(f"total kills {total}; all identical: {ok}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
