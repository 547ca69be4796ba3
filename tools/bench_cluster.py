"""A real two-worker Dask cluster vs the embedded default: same model, wall-time ratio.

    python tools/bench_cluster.py [--data digits,satimage] [--solvers stagewise,bcd,...] [--repeats 2]
                                  [--chunk-rows 200] [--data-dir ../shared/data]

Starts `dask scheduler` and two `dask worker --nthreads 1` processes on 127.0.0.1, ingests each
dataset (`digits`: scikit-learn's; `satimage`, `dna`: the LIBSVM training files under
--data-dir), and trains every solver (parameters of tools/kill_resume.py) with `--scheduler
tcp://127.0.0.1:PORT` and with the embedded default (a LocalCluster of one single-threaded
worker per core: two here), alternating, `--repeats` times each. Models must be bitwise
identical. Times: the wall time of the `streamfit train` process (start-up, and for the
embedded default the LocalCluster start, included) and the solver's own time from run.json;
the ratio is cluster / embedded of the medians.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from kill_resume import SOLVER_PARAMS, cli

from streamfit.model import load_model
from streamfit.solvers import SOLVER_NAMES

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
LIBSVM = {"satimage": "libsvm/satimage/satimage.scale.gz", "dna": "libsvm/dna/dna.scale.gz"}


@contextlib.contextmanager
def loopback_cluster(n_workers: int = 2):
    """Yields the address of a scheduler with n_workers single-threaded workers on 127.0.0.1."""
    from distributed import Client

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    address = f"tcp://127.0.0.1:{port}"
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            **quiet,
        )
    ]
    procs += [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                address,
                "--nthreads",
                "1",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
            ],
            **quiet,
        )
        for _ in range(n_workers)
    ]
    try:
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(n_workers, timeout=60)
        yield address
    finally:
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait(timeout=30)


def train(store: Path, solver: str, out: Path, engine: list[str]) -> tuple[float, float]:
    """(wall seconds of the process, solver seconds from run.json)."""
    import json

    params = [x for p in SOLVER_PARAMS.get(solver, []) for x in ("-p", p)]
    started = time.perf_counter()
    subprocess.run(
        cli("train", store, "--solver", solver, *params, *engine, "--out", out, "--overwrite"),
        check=True,
        capture_output=True,
    )
    wall = time.perf_counter() - started
    with open(out / "run.json") as f:
        return wall, json.load(f)["seconds"]


def same_model(a: Path, b: Path) -> bool:
    x, y = load_model(str(a))._arrays(), load_model(str(b))._arrays()
    return x.keys() == y.keys() and all(np.array_equal(x[k], y[k]) for k in x)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", default="digits,satimage")
    ap.add_argument("--solvers", default=",".join(SOLVER_NAMES))
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--chunk-rows", type=int, default=200)
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_DATA)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-cluster-"))
    stores = {}
    for name in args.data.split(","):
        if name == "digits":
            from sklearn.datasets import dump_svmlight_file, load_digits

            source = work / "digits.svm"
            dump_svmlight_file(*load_digits(return_X_y=True), str(source), zero_based=False)
        else:
            source = args.data_dir / LIBSVM[name]
            if not source.exists():
                raise SystemExit(f"{source}: not found; pass --data-dir (the folder of shared/data/README.md)")
        stores[name] = work / f"{name}.zarr"
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
                stores[name],
            ),
            check=True,
            capture_output=True,
        )
    rows = []
    with loopback_cluster() as address:
        for name, store in stores.items():
            for solver in args.solvers.split(","):
                times = {"embedded": [], "cluster": []}
                engines = {"embedded": [], "cluster": ["--scheduler", address]}
                for _ in range(args.repeats):
                    for kind in ("embedded", "cluster"):  # interleaved
                        times[kind].append(train(store, solver, work / f"{name}-{solver}-{kind}", engines[kind]))
                identical = same_model(work / f"{name}-{solver}-embedded", work / f"{name}-{solver}-cluster")
                med = {k: np.median(np.asarray(v), axis=0) for k, v in times.items()}
                rows.append((name, solver, identical, med["embedded"], med["cluster"], os.getloadavg()[0]))
                print(
                    f"{name} {solver}: identical {identical}, embedded {med['embedded']}, cluster {med['cluster']}",
                    flush=True,
                )
    print(
        f"\n{args.repeats} interleaved runs each, medians; wall = the whole `streamfit train` process, "
        "solver = run.json seconds"
    )
    print(
        "| data | solver | identical | embedded wall (s) | cluster wall (s) | wall ratio cluster/embedded | "
        "embedded solver (s) | cluster solver (s) | solver ratio | load avg |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, solver, identical, e, c, load in rows:
        print(
            f"| {name} | {solver} | {identical} | {e[0]:.1f} | {c[0]:.1f} | {c[0] / e[0]:.2f} | {e[1]:.1f} | "
            f"{c[1]:.1f} | {c[1] / e[1]:.2f} | {load:.2f} |"
        )
    shutil.rmtree(work, ignore_errors=True)
    sys.exit(0 if all(r[2] for r in rows) else 1)


if __name__ == "__main__":
    main()
