"""Fingerprints of a fixed set of small training runs, to show that a refactoring leaves models
bitwise unchanged: each run's model arrays (`Model._arrays()`, C order) and info are hashed.

    python tools/model_fingerprints.py --out before.json            # on the old commit
    python tools/model_fingerprints.py --compare before.json        # on the new one: lists differences

Runs are in process (Engine mode "inprocess", checkpoints in memory, BLAS on one thread) on
scikit-learn's digits (1797 × 64, 10 classes) cut into chunks of 400 rows, and on a multilabel
set made from it (each digit also labelled by its parity and by whether it is ≥ 5).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys

import numpy as np
import scipy.sparse as sp

RUNS: dict[str, tuple[str, dict, bool]] = {
    "stagewise-sequential": ("stagewise", {"generator": "sequential", "block_size": 16, "n_passes": 2}, False),
    "stagewise-gradient": ("stagewise", {"generator": "gradient", "block_size": 16, "n_passes": 2}, False),
    "stagewise-random-softmax": (
        "stagewise",
        {"generator": "random", "block_size": 32, "link": "softmax", "max_iter": 3},
        False,
    ),
    "stagewise-rff-poly": (
        "stagewise",
        {"generator": "rff", "n_components": 256, "block_size": 128, "calibration": "poly"},
        False,
    ),
    "stagewise-rff-pca-predictions": (
        "stagewise",
        {
            "generator": "rff",
            "n_components": 256,
            "block_size": 128,
            "pca_components": 16,
            "calibration": "predictions",
        },
        False,
    ),
    "stagewise-multilabel": ("stagewise", {"generator": "sequential", "block_size": 32}, True),
    "stagewise-rff-softmax-backtrack": (
        "stagewise",
        {
            "generator": "rff",
            "n_components": 256,
            "block_size": 128,
            "n_passes": 2,
            "link": "softmax",
            "max_iter": 3,
            "backtrack": True,
            "rff_sampling": "orthogonal",
            "rff_phases": "paired",
        },
        False,
    ),
    "stagewise-rff-float32": (
        "stagewise",
        {"generator": "rff", "n_components": 256, "block_size": 128, "n_passes": 2, "gram_dtype": "float32"},
        False,
    ),
    "stagewise-auto": ("stagewise", {"n_components": 256, "block_size": 128}, False),
    "stagewise-multilabel-softmax": (
        "stagewise",
        {"generator": "gradient", "block_size": 32, "link": "softmax", "max_iter": 3},
        True,
    ),
    "bcd-memory-l1l2": ("bcd", {"penalty": "l1/l2", "mode": "memory", "lam": 1e-3, "max_iter": 20}, False),
    "bcd-memory-l1-logistic": (
        "bcd",
        {"mode": "memory", "penalty": "l1", "loss": "logistic", "lam": 1e-3, "max_iter": 20},
        False,
    ),
    "bcd-chunks": ("bcd", {"penalty": "l1/l2", "mode": "chunks", "lam": 1e-3, "max_iter": 5, "group_size": 16}, False),
    "bcd-fista": ("bcd", {"penalty": "l1/l2", "method": "fista", "lam": 1e-3, "max_iter": 20}, False),
    "bcd-multilabel": (
        "bcd",
        {"penalty": "l1/l2", "mode": "memory", "loss": "multitask_squared_hinge", "lam": 1e-3, "max_iter": 20},
        True,
    ),
    "bcd-memory-cst-shrinking": (
        "bcd",
        {"penalty": "l1/l2", "mode": "memory", "variant": "cst", "shrinking": True, "lam": 1e-3, "max_iter": 20},
        False,
    ),
    "bcd-memory-auto-converged": (
        "bcd",
        {"penalty": "l1/l2", "mode": "memory", "lam": 1e-3, "tol": 1e-2, "max_iter": 300},
        False,
    ),
    "bcd-memory-gap": (
        "bcd",
        {
            "penalty": "l1/l2",
            "mode": "memory",
            "stopping": "gap",
            "fit_intercept": False,
            "lam": 1e-2,
            "tol": 1e-2,
            "max_iter": 300,
        },
        False,
    ),
    "bcd-chunks-cst-shrinking": (
        "bcd",
        {
            "penalty": "l1/l2",
            "mode": "chunks",
            "variant": "cst",
            "shrinking": True,
            "lam": 1e-3,
            "max_iter": 5,
            "group_size": 16,
        },
        False,
    ),
    "bcd-chunks-shrinking-converged": (
        "bcd",
        {
            "penalty": "l1/l2",
            "mode": "chunks",
            "shrinking": True,
            "lam": 1e-2,
            "tol": 1e-2,
            "max_iter": 300,
            "group_size": 16,
        },
        False,
    ),
    "bcd-memory-defaults": ("bcd", {"mode": "memory", "max_iter": 20}, False),
    "bcd-fista-cst": (
        "bcd",
        {"penalty": "l1/l2", "method": "fista", "variant": "cst", "lam": 1e-3, "max_iter": 20},
        False,
    ),
    "ppdsparse-squared": ("ppdsparse", {"loss": "squared_hinge", "lam": 1e-5, "threads": 1}, False),
    "ppdsparse-hinge": ("ppdsparse", {"loss": "hinge", "lam": 1e-5, "threads": 1}, False),
    "ppdsparse-multilabel": ("ppdsparse", {"lam": 1e-5, "threads": 1}, True),
    "ppdsparse-auto": ("ppdsparse", {"lam": "auto", "threads": 1}, False),
    "ppdsparse-auto-multilabel": ("ppdsparse", {"lam": "auto", "threads": 1}, True),
    "ppdsparse-scale": ("ppdsparse", {"threads": 1}, False),
    "ppdsparse-scale-multilabel": ("ppdsparse", {"threads": 1}, True),
    # the primal Newton finish: forced on every class, and stalling into the dual's fallback
    "ppdsparse-primal": (
        "ppdsparse",
        {"lam": 2e-3, "tau": 1e-3, "primal_ratio": 1e-9, "max_inner": 1, "threads": 1},
        False,
    ),
    "ppdsparse-primal-fallback": (
        "ppdsparse",
        {"lam": 1e-5, "tau": 1e-5, "primal_ratio": 2.0, "max_inner": 5, "threads": 1},
        False,
    ),
    "fbpd-regularized-l1": ("fbpd", {"penalty": "l1", "lam": 1e-3, "max_iter": 30}, False),
    "fbpd-regularized-l1-scalar": (
        "fbpd",
        {"penalty": "l1", "lam": 1e-3, "max_iter": 30, "preconditioning": False},
        False,
    ),
    "fbpd-constrained": ("fbpd", {"formulation": "constrained", "penalty": "l1/l2", "eta": 0.5, "max_iter": 30}, False),
    "fbpd-plain-l2": ("fbpd", {"penalty": "l2", "restarts": False, "lam": 1e-2, "max_iter": 30}, False),
    "fbpd-regularized-l1linf": ("fbpd", {"penalty": "l1/linf", "group_size": 4, "lam": 1e-3, "max_iter": 30}, False),
    "multiboost": ("multiboost", {"max_iter": 10}, False),
    "fbpd-plain-l2-scalar": (
        "fbpd",
        {"penalty": "l2", "restarts": False, "lam": 1e-2, "max_iter": 30, "preconditioning": False},
        False,
    ),
}


def data(multilabel: bool):
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    X = sp.csr_matrix(X.astype(np.float32) / 16)
    if not multilabel:
        return X, y.astype(np.int32), [str(c) for c in range(10)]
    Y = np.zeros((len(y), 12), dtype=np.int8)
    Y[np.arange(len(y)), y] = 1
    Y[:, 10] = y % 2
    Y[:, 11] = y >= 5
    return X, sp.csr_matrix(Y), [str(c) for c in range(10)] + ["odd", "high"]


def fingerprint(solver: str, params: dict, multilabel: bool) -> dict:
    from streamfit.checkpoint import Checkpointer
    from streamfit.engine import Engine
    from streamfit.runlog import MetricsLog
    from streamfit.solvers import get_solver
    from streamfit.store import InMemoryStore

    X, labels, classes = data(multilabel)
    source = InMemoryStore(X, labels, classes, chunk_rows=400)
    cls = get_solver(solver)
    p = cls.Params(**params)
    ckpt = Checkpointer(None, config=p.model_settings(), store_fingerprint="in-memory")
    with Engine(mode="inprocess") as engine:
        model = cls(p).fit(source, engine=engine, checkpointer=ckpt, log=MetricsLog())
    h = hashlib.sha256()
    for name, array in sorted(model._arrays().items()):
        a = np.ascontiguousarray(array)
        h.update(name.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    return {
        "arrays_sha256": h.hexdigest(),
        "info": json.loads(json.dumps(model.info, default=str)),
        "decision_threshold": model.decision_threshold,  # multilabel: part of the decision, not of the arrays
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", help="write the fingerprints to this JSON file")
    ap.add_argument("--compare", help="compare with the fingerprints in this JSON file; exit 1 on a difference")
    ap.add_argument("--only", help="comma-separated run names or solver names (default: all)")
    args = ap.parse_args()
    from threadpoolctl import threadpool_limits

    wanted = set(args.only.split(",")) if args.only else None
    results = {}
    with threadpool_limits(1):
        for name, (solver, params, multilabel) in RUNS.items():
            if wanted and name not in wanted and solver not in wanted:
                continue
            results[name] = fingerprint(solver, params, multilabel)
            print(f"{name}: {results[name]['arrays_sha256'][:16]}", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1, sort_keys=True)
    if args.compare:
        with open(args.compare) as f:
            before = json.load(f)
        changed = [n for n in results if n in before and results[n] != before[n]]
        for n in changed:
            print(f"DIFFERENT {n}: {before[n]} then, {results[n]} now")
        print(f"{len(results) - len(changed)} of {len(results)} runs bitwise unchanged")
        return 1 if changed else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
