"""bcd's and ppdsparse's defaults on dense columns far from zero in their own spread (qa28):
every column shifted so that its mean is r times its standard deviation, beside LinearSVC on
the same columns. bcd centres such columns (|μ_j| > s_j, bcd's "Centred columns": memory mode
since session 27, chunks mode and FISTA since session 28); ppdsparse does not (standardizing
only divides them), so its intercept has to absorb the shift. The data: scikit-learn's make_classification (4000
rows, 16 columns, 10 informative, 6 classes of 2 clusters, class_sep 1.2, random_state 5),
column j multiplied by 10**u_j, u_j uniform in [-3, 4) (seed 0): columns in other units, which
`standardize="auto"` standardizes; the first 3000 rows train, the last 1000 test.
`base.OFFSET_RATIO` (the warning's threshold) was set from this table.

    OPENBLAS_NUM_THREADS=1 python tools/bench_offset_columns.py [--ratios 0,3,10,30,100,300,1000] \
        [--mode auto|memory|chunks|fista]

`--mode`: bcd's (`BCDClassifier(mode=...)`; fista: `method="fista"`), the defaults otherwise;
auto (the default) is the memory mode on data this small.

`--store-rows N` measures instead the out-of-core cost: the same generator with N training rows
(and 1000 test rows) written to stores of `--chunk-rows` rows per chunk under `--work`, once per
ratio, and bcd's defaults in chunks mode (`-p mode=chunks`, `--max-iter` outer iterations) trained
on each in a fresh process with the in-process engine and a 64 MiB chunk cache: CPU seconds, peak
RSS, the final objective, outer iterations and test accuracy (the Python API, as `streamfit
train --solver bcd -p mode=chunks --n-workers 0` runs it).

    OPENBLAS_NUM_THREADS=1 python tools/bench_offset_columns.py --store-rows 400000 --chunk-rows 50000 \
        --ratios 0,300 --max-iter 30
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import make_classification
from sklearn.svm import LinearSVC

from streamfit import BCDClassifier, PPDSparseClassifier


def data(n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(X, y, units): the generator's n rows, centred (offsets added by the caller), and the
    columns' units 10**u_j."""
    X, y = make_classification(
        n_samples=n,
        n_features=16,
        n_informative=10,
        n_redundant=3,
        n_classes=6,
        n_clusters_per_class=2,
        class_sep=1.2,
        random_state=5,
    )
    return X, y, 10.0 ** np.random.default_rng(0).uniform(-3, 4, size=X.shape[1])


CHILD = """
import json, resource, sys, time
import numpy as np
import streamfit
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.runlog import MetricsLog
from streamfit.solvers.bcd import BCDParams, BCDSolver
from streamfit.store import open_store
store = open_store(sys.argv[1])
test = np.load(sys.argv[2])
p = BCDParams(mode="chunks", max_iter=int(sys.argv[3]))
log = MetricsLog(None)
t0 = time.process_time()
model = BCDSolver(p).fit(store, engine=Engine(mode="inprocess"), log=log,
                         checkpointer=Checkpointer(None, config=p.model_settings(), store_fingerprint="bench"))
cpu = time.process_time() - t0
pred = np.asarray(model.predict(test["X"]))
print(json.dumps({"cpu": cpu, "max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                  "objective": [r["objective"] for r in log.records if "objective" in r][-1],
                  "outer": model.info["outer_iterations"], "converged": model.info["converged"],
                  "centred": model.info.get("centred", False), "accuracy": float((pred.astype(str) == test["y"].astype(str)).mean()),
                  "streamfit": streamfit.__file__}))
"""


def stores(args) -> None:
    """The out-of-core measurement (module docstring, `--store-rows`)."""
    from streamfit.store import StoreWriter

    n = args.store_rows
    X, y, units = data(n + 1000)
    os.makedirs(args.work, exist_ok=True)
    env = {**os.environ, "STREAMFIT_CHUNK_CACHE_MB": "64", "OPENBLAS_NUM_THREADS": "1"}
    print(f"{n} training rows, 16 columns, chunks of {args.chunk_rows} rows; load {os.getloadavg()[0]:.1f}")
    print(
        "| mean/std | CPU s | peak RSS MiB | objective | outer iterations | converged | centred | test accuracy "
        "| streamfit imported |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in (float(v) for v in args.ratios.split(",")):
        A = ((X - X.mean(axis=0) + r * X.std(axis=0)) * units).astype(np.float32)
        path = os.path.join(args.work, f"r{r:g}_{n}_{args.chunk_rows}.zarr")
        if not os.path.exists(path):
            w = StoreWriter(path, chunk_rows=args.chunk_rows)
            w.write_rows(sp.csr_matrix(A[:n]), y[:n].astype(np.int32))
            w.close(n_features=A.shape[1], classes=[str(c) for c in range(6)])
        test = os.path.join(args.work, f"r{r:g}_test.npz")
        np.savez(test, X=A[n:], y=y[n:])
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, path, test, str(args.max_iter)],
            env=env,
            capture_output=True,
            text=True,
            cwd=args.work,  # not the working tree's streamfit ahead of PYTHONPATH's
        )
        if proc.returncode != 0:
            print(f"| {r:g} | FAILED: {proc.stderr.strip().splitlines()[-1:]} |")
            continue
        o = json.loads(proc.stdout.strip().splitlines()[-1])
        print(
            f"| {r:g} | {o['cpu']:.1f} | {o['max_rss_mb']:.0f} | {o['objective']:.6g} | {o['outer']} | "
            f"{o['converged']} | {o['centred']} | {o['accuracy']:.3f} | {o['streamfit']} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", default="0,3,10,30,100,300,1000", help="mean / standard deviation of every column")
    ap.add_argument(
        "--mode", default="auto", choices=["auto", "memory", "chunks", "fista"], help="bcd's mode, or fista"
    )
    ap.add_argument("--store-rows", type=int, default=0, help="training rows of the out-of-core stores (0: the table)")
    ap.add_argument("--chunk-rows", type=int, default=50000, help="rows per chunk of those stores")
    ap.add_argument("--max-iter", type=int, default=30, help="outer iterations of the out-of-core runs")
    ap.add_argument("--work", default="/tmp/bench_offset_columns", help="folder of the out-of-core stores")
    args = ap.parse_args()
    if args.store_rows:
        stores(args)
        return
    bcd = {"method": "fista"} if args.mode == "fista" else {"mode": args.mode}
    X, y, units = data(4000)
    train, test = slice(0, 3000), slice(3000, None)
    print(
        f"| mean/std | bcd ({args.mode}) | ppdsparse | LinearSVC | CPU s (bcd, ppdsparse, LinearSVC) "
        "| bcd: outer iterations, converged, centred |"
    )
    print("|---|---|---|---|---|---|")
    for r in (float(v) for v in args.ratios.split(",")):
        A = (X - X.mean(axis=0) + r * X.std(axis=0)) * units
        scores, cpu = [], []
        est_bcd = BCDClassifier(**bcd)
        for est in (est_bcd, PPDSparseClassifier(), LinearSVC()):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the not-converged warnings: counted in the table's text
                t0 = time.process_time()
                est.fit(A[train], y[train])
                cpu.append(time.process_time() - t0)
            scores.append(est.score(A[test], y[test]))
        info = est_bcd.model_.info
        print(
            f"| {r:g} | " + " | ".join(f"{s:.3f}" for s in scores) + " | " + ", ".join(f"{c:.2f}" for c in cpu) + " | "
            f"{info['outer_iterations']}, {info['converged']}, {info.get('centred', False)} |"
        )


if __name__ == "__main__":
    main()
