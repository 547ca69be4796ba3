"""Benchmark of the fbpd solver (Chierchia et al. 2015) on the paper's small-sample settings.

Part 1 (§4.1): test error of the exact hinge (fbpd, Algorithm 1) beside the squared hinge and
the logistic loss (the bcd solver), all with the same ℓ1 penalty lam·‖W‖₁ and the same lam
grid (the paper's λ = 1/α is lam = α/n here), on
- MNIST subsets with L/K = 3, 5, 10 training images per class: only MNIST's 10k test set is
  available here, so training subsets are drawn from its first 5000 images and the error is
  measured on the last 5000; raw pixels / 255 (the paper uses scattering features);
- 20 Newsgroups subsets with L/K = 5, 10, 50 (tf-idf, log1p, l2-normalized, hashed to 2^15
  columns), error on the bydate test split.
Errors are averaged over `--subsets` random training subsets per L/K.

Part 2 (§4.2): time to a relative iterate change of 1e-5 on MNIST L/K = 10 for fbpd (ℓ1,
hinge), the same problem as a linear program solved by HiGHS, and bcd on the squared-hinge
counterpart (its own stopping rule at tol = 1e-5); interleaved, best of `--repeats`, ratios.

    python tools/bench_fbpd.py [--subsets 3] [--repeats 3] [--max-iter 3000] [--quick]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from streamfit import FBPDClassifier, open_store
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.runlog import MetricsLog
from streamfit.solvers import get_solver
from streamfit.store import InMemoryStore

DATA = "/work/shared/data"
CACHE = os.path.join(tempfile.gettempdir(), "streamfit-bench-fbpd")


def load_mnist():
    with h5py.File(f"{DATA}/mnist_test_only/mnist-t10k.h5") as f:
        X = f["X"][:].astype(np.float64) / 255.0
        y = f["y"][:].astype(np.int64)
    return sp.csr_matrix(X[:5000]), y[:5000], sp.csr_matrix(X[5000:]), y[5000:]


def load_news20():
    os.makedirs(CACHE, exist_ok=True)
    train, test = f"{CACHE}/news.zarr", f"{CACHE}/news-test.zarr"
    tar = f"{DATA}/20newsgroups/20news-bydate.tar.gz"
    common = ["--encoding", "latin-1", "--value", "log1p", "--idf", "--l2-normalize"]
    if not os.path.exists(train):
        subprocess.run(["streamfit", "ingest", tar, "--subset", "20news-bydate-train", *common,
                        "--n-features", str(2 ** 15), "--out", train], check=True, capture_output=True)
    if not os.path.exists(test):
        subprocess.run(["streamfit", "ingest", tar, "--subset", "20news-bydate-test", "--encoding", "latin-1",
                        "--like", train, "--out", test], check=True, capture_output=True)
    a, b = open_store(train).to_scipy(), open_store(test).to_scipy()
    return a[0].tocsr(), np.asarray(a[1]), b[0].tocsr(), np.asarray(b[1])


def subset(y, per_class, seed):
    rng = np.random.default_rng(seed)
    return np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False)
                                   for c in np.unique(y)]))


def fit_bcd(X, y, loss, lam, tol=1e-5, max_iter=1000):
    classes = np.unique(y)
    ids = np.searchsorted(classes, y).astype(np.int32)
    source = InMemoryStore(X, ids, classes)
    cls = get_solver("bcd")
    params = cls.Params(loss=loss, penalty="l1", lam=lam, tol=tol, max_iter=max_iter)
    ckpt = Checkpointer(None, config=params.model_dump(), store_fingerprint="in-memory")
    with Engine(mode="inprocess") as engine:
        model = cls(params).fit(source, engine=engine, checkpointer=ckpt, log=MetricsLog(None))
    return lambda Z: classes[np.argmax(model.decision_function(Z), axis=1)]


def fit_fbpd(X, y, lam, tol=1e-5, max_iter=3000):
    clf = FBPDClassifier(penalty="l1", lam=lam, tol=tol, max_iter=max_iter).fit(X, y)
    return clf.predict, clf


def accuracy_table(name, data, per_class_list, lams, n_subsets, max_iter):
    Xtr, ytr, Xte, yte = data
    print(f"\n## {name}: test error (%) vs lam, ℓ1 penalty, mean over {n_subsets} subsets")
    print("| L/K | lam | hinge (fbpd) | squared hinge (bcd) | logistic (bcd) | fbpd iters |")
    print("|---|---|---|---|---|---|")
    for per_class in per_class_list:
        for lam in lams:
            errs = {"hinge": [], "squared_hinge": [], "logistic": []}
            iters = []
            for s in range(n_subsets):
                idx = subset(ytr, per_class, s)
                X, y = Xtr[idx], ytr[idx]
                predict, clf = fit_fbpd(X, y, lam, max_iter=max_iter)
                iters.append(clf.n_iter_)
                errs["hinge"].append(np.mean(predict(Xte) != yte))
                for loss in ("squared_hinge", "logistic"):
                    errs[loss].append(np.mean(fit_bcd(X, y, loss, lam)(Xte) != yte))
            row = " | ".join(f"{100 * np.mean(errs[k]):.1f}" for k in ("hinge", "squared_hinge", "logistic"))
            print(f"| {per_class} | {lam:g} | {row} | {int(np.mean(iters))} |", flush=True)


def lp_time(X, y, lam):
    """ℓ1-regularized Crammer–Singer hinge as an LP (HiGHS); returns (seconds, optimum)."""
    X = X.toarray()
    classes, z = np.unique(y, return_inverse=True)
    n, M = X.shape
    K = len(classes)
    nW = M * K
    ell, k = np.nonzero(np.arange(K)[None, :] != z[:, None])  # one row per (ℓ, k ≠ z_ℓ)
    R = len(ell)
    j = np.arange(M)
    rr = np.repeat(np.arange(R), M)
    xv = X[ell].ravel()
    rows = np.concatenate([rr, rr, rr, rr, np.arange(R), np.arange(R), np.arange(R)])
    cols = np.concatenate([(j[None, :] * K + k[:, None]).ravel(), (j[None, :] * K + z[ell][:, None]).ravel(),
                           nW + (j[None, :] * K + k[:, None]).ravel(), nW + (j[None, :] * K + z[ell][:, None]).ravel(),
                           2 * nW + k, 2 * nW + z[ell], 2 * nW + K + ell])
    vals = np.concatenate([xv, -xv, -xv, xv, np.ones(R), -np.ones(R), -np.ones(R)])
    A = sp.csr_matrix((vals, (rows, cols)), shape=(R, 2 * nW + K + n))
    c = np.concatenate([np.full(2 * nW, lam), np.zeros(K), np.full(n, 1.0 / n)])
    bounds = [(0, None)] * (2 * nW) + [(None, None)] * K + [(0, None)] * n
    t = time.perf_counter()
    res = linprog(c, A_ub=A, b_ub=-np.ones(R), bounds=bounds, method="highs")
    return time.perf_counter() - t, res.fun


def timing_table(data, per_class, lam, repeats, max_iter):
    Xtr, ytr, _, _ = data
    idx = subset(ytr, per_class, 0)
    X, y = Xtr[idx], ytr[idx]
    fit_fbpd(X, y, lam, max_iter=5)  # compile
    fit_bcd(X, y, "squared_hinge", lam, max_iter=2)
    best = {"fbpd": np.inf, "highs": np.inf, "bcd": np.inf}
    for _ in range(repeats):
        t = time.perf_counter()
        _, clf = fit_fbpd(X, y, lam, max_iter=max_iter)
        best["fbpd"] = min(best["fbpd"], time.perf_counter() - t)
        t_lp, optimum = lp_time(X, y, lam)
        best["highs"] = min(best["highs"], t_lp)
        t = time.perf_counter()
        fit_bcd(X, y, "squared_hinge", lam)
        best["bcd"] = min(best["bcd"], time.perf_counter() - t)
    rel = (clf.objective(X, y) - optimum) / optimum
    print(f"\n## time to 1e-5 relative iterate change, MNIST L/K={per_class}, lam={lam:g} (best of {repeats})")
    print("| method | seconds | ratio to fbpd |")
    print("|---|---|---|")
    for k, v in best.items():
        print(f"| {k} | {v:.3f} | {v / best['fbpd']:.2f} |")
    print(f"fbpd: {clf.n_iter_} iterations (converged: {clf.model_.info['converged']}), objective "
          f"{clf.objective(X, y):.6f} vs HiGHS optimum {optimum:.6f} (relative {rel:.1e})")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subsets", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-iter", type=int, default=3000)
    ap.add_argument("--quick", action="store_true", help="MNIST L/K=3,10 and news20 L/K=5 only, 3 lams")
    args = ap.parse_args(argv)
    lams = [1e-3, 1e-2, 1e-1] if args.quick else [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
    mnist = load_mnist()
    timing_table(mnist, 10, 1e-2, args.repeats, args.max_iter)
    accuracy_table("MNIST", mnist, [3, 10] if args.quick else [3, 5, 10], lams, args.subsets, args.max_iter)
    news = load_news20()
    accuracy_table("news20", news, [5] if args.quick else [5, 10, 50], lams, args.subsets, args.max_iter)


if __name__ == "__main__":
    sys.exit(main())
