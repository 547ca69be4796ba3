"""Benchmark of the fbpd solver (Chierchia et al. 2015) on the paper's small-sample settings.

Part 1 (§4.2): passes, wall and CPU seconds to a relative iterate change of 1e-5 (the paper's
stopping rule: fbpd runs with tol = 1e-5, as a user would start them) on MNIST L/K = 3 and 10,
lam = 1e-2, ℓ1 penalty, for fbpd with restarts (the default) and plain (the paper's
iteration), beside the same problem as a linear program solved by HiGHS and bcd on the
squared-hinge counterpart (its own stopping rule at tol = 1e-5); ratios to HiGHS in wall and
CPU time (CPU time is what to read on a shared machine). Methods are interleaved per repeat;
the best CPU time of `--repeats` is kept. One more fbpd run per variant with tol = 0 to
`--timing-iter` passes gives the passes after which the objective stays within 1e-4 and 1e-6
of HiGHS' optimum (— = never within the cap).
Part 0 (`--parts passcost`): CPU µs per fbpd pass against a lower bound, the two sparse
products T x and Tᵀ y (scipy X @ W and Xᵀ @ A) that any primal-dual pass needs, and fbpd's
fused chunk kernel alone.

Part 3 (`--parts dense`): fbpd's defaults on dense numeric sets (LIBSVM pendigits, unscaled
0..100; satimage, letter, dna, scaled), preconditioning=auto (the default: centered columns and
one scalar step on dense inputs) beside preconditioning=true (the diagonal steps, the default
before session 14) and LinearSVC (C = 1) in the same run: test accuracy, objective (7), fit
seconds; and, on the sets in `--lp-sets` (default pendigits, satimage, dna), the LP's optimum
(HiGHS) at the default lam, its test accuracy, and each run's objective excess over it.

Part 2 (§4.1): test error (%) of the *converged* solutions of three objectives with the same
ℓ1 penalty lam·‖W‖₁: the exact (Crammer–Singer) hinge, the squared hinge and the logistic loss
(bcd; no offsets, as in Blondel et al.), over one grid of lam/lam_max per loss (lam_max: the
smallest lam giving W = 0, per loss and subset — for the hinge an upper bound; the paper's
λ = 1/α is lam = α/n here) from 0.5 down to 3e-5 (`--grid`), so that each loss's best lam is
interior (with L/K ≤ 10 the training set is separable: below some lam the hinge optimum is
the minimum-ℓ1 separator, with zero loss, and no longer changes);
mean ± sd over random training subsets per L/K, on
- MNIST with L/K = 3, 5, 10 training images per class: only MNIST's 10k test set is
  available, so training subsets are drawn from its first 5000 images and the error is
  measured on the disjoint last 5000; raw pixels / 255 (the paper uses scattering features);
- 20 Newsgroups with L/K = 5, 10 by default (50: `--news-lk 5,10,50`, slow) (log1p tf-idf,
  l2-normalized, hashed to 2^15 columns by `streamfit ingest` from the bydate tarball), error
  on the bydate test split.
The hinge is solved twice: exactly, as the LP of part 1 (HiGHS, built from the sparse rows) —
its error is the one the summary uses — and by fbpd run to a duality gap ≤ `--gap` (1e-3)
relative to the objective (tol = 0, one run continued to acc_iter/16, /4, acc_iter passes), as
an independent check; every cell where fbpd does not reach the gap is listed, with its
objective's excess over the LP optimum. An early-stopped fbpd iterate is denser than the
optimum and can be far more (or less) accurate than it: judge the claim on the LP column.
bcd runs at tol `--bcd-tol` (1e-6); cells where it hits `--bcd-iter` are listed. A summary
per L/K gives each loss's best error over the grid (marked when at the grid's edge) and its
robustness to lam: the mean excess error over the grid and the number of grid values within
1 point of its best.

    python tools/bench_fbpd.py [--parts passcost,timing,mnist,news20] [--subsets 3] [--news-subsets 2]
        [--mnist-lk 3,5,10] [--news-lk 5,10] [--grid ...] [--acc-iter 32000] [--gap 1e-3] [--bcd-tol 1e-6]
        [--bcd-iter 5000] [--repeats 2] [--quick] [--subset-ids 0,1] [--cells FILE.jsonl]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import h5py
import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog

from streamfit import BCDClassifier, FBPDClassifier, open_store
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.runlog import MetricsLog
from streamfit.solvers.fbpd import FBPDParams, FBPDSolver
from streamfit.store import InMemoryStore

DATA = "/work/shared/data"
CACHE = os.path.join(tempfile.gettempdir(), "streamfit-bench-fbpd")
LOSSES = ("hinge", "squared_hinge", "logistic")


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
        subprocess.run(
            [
                "streamfit",
                "ingest",
                tar,
                "--subset",
                "20news-bydate-train",
                *common,
                "--n-features",
                str(2**15),
                "--out",
                train,
            ],
            check=True,
            capture_output=True,
        )
    if not os.path.exists(test):
        subprocess.run(
            [
                "streamfit",
                "ingest",
                tar,
                "--subset",
                "20news-bydate-test",
                "--encoding",
                "latin-1",
                "--like",
                train,
                "--out",
                test,
            ],
            check=True,
            capture_output=True,
        )
    a, b = open_store(train).to_scipy(), open_store(test).to_scipy()
    return a[0].tocsr().astype(np.float64), np.asarray(a[1]), b[0].tocsr().astype(np.float64), np.asarray(b[1])


def subset(y, per_class, seed):
    rng = np.random.default_rng(seed)
    return np.sort(np.concatenate([rng.choice(np.flatnonzero(y == c), per_class, replace=False) for c in np.unique(y)]))


def lam_max(loss, X, y) -> float:
    """‖∇ of the mean loss at W = 0‖∞, the smallest lam with W = 0 optimal under lam·‖W‖₁ (for
    the hinge, from the subgradient of the uniform dual on k ≠ z: an upper bound). Each loss's
    grid is relative to it, since the losses' scales differ (the squared hinge of bcd sums over
    the K − 1 wrong classes)."""
    z = np.unique(y, return_inverse=True)[1]
    K = z.max() + 1
    onehot = np.eye(K)[z]
    if loss == "squared_hinge":  # Σ_{k≠z} max(0, 1 + s_k − s_z)²
        G = 2 * (1 - onehot) - 2 * (K - 1) * onehot
    elif loss == "logistic":
        G = 1.0 / K - onehot
    else:
        G = (1 - onehot) / (K - 1) - onehot
    return float(np.abs(X.T @ G).max() / len(z))


def fit(loss, X, y, lam, **kw):
    if loss == "hinge":
        return FBPDClassifier(penalty="l1", lam=lam, **kw).fit(X, y)
    return BCDClassifier(loss=loss, penalty="l1", lam=lam, fit_intercept=False, **kw).fit(X, y)  # no offsets


# -- part 1: time to 1e-5 ------------------------------------------------------------------


def lp_solution(X, y, lam, column_weights=None):
    """ℓ1-regularized Crammer–Singer hinge as an LP (HiGHS): variables W⁺, W⁻ ≥ 0 (M·K each),
    free offsets b, slacks ξ ≥ 0; ξ_ℓ ≥ 1 + s_ℓk − s_ℓz_ℓ for k ≠ z_ℓ, one row per (ℓ, k ≠ z_ℓ),
    built from X's sparse rows. column_weights s (M): the penalty lam·Σ s_j|W_jk| (fbpd's
    standardized columns). Returns (HiGHS' seconds, W (M × K), b, optimum)."""
    X = sp.csr_matrix(X)
    classes, z = np.unique(y, return_inverse=True)
    n, M = X.shape
    K = len(classes)
    nW = M * K
    ell, k = np.nonzero(np.arange(K)[None, :] != z[:, None])
    R = len(ell)
    rows = X[ell].tocoo()
    r, j, v = rows.row, rows.col, rows.data
    own, true = j * K + k[r], j * K + z[ell][r]
    ii = np.concatenate([r, r, r, r, np.arange(R), np.arange(R), np.arange(R)])
    jj = np.concatenate([own, true, nW + own, nW + true, 2 * nW + k, 2 * nW + z[ell], 2 * nW + K + ell])
    vals = np.concatenate([v, -v, -v, v, np.ones(R), -np.ones(R), -np.ones(R)])
    A = sp.csr_matrix((vals, (ii, jj)), shape=(R, 2 * nW + K + n))
    weights = np.ones(M) if column_weights is None else np.asarray(column_weights, dtype=np.float64)
    penalty = lam * np.repeat(weights, K)
    c = np.concatenate([penalty, penalty, np.zeros(K), np.full(n, 1.0 / n)])
    bounds = [(0, None)] * (2 * nW) + [(None, None)] * K + [(0, None)] * n
    t = time.perf_counter()
    res = linprog(c, A_ub=A, b_ub=-np.ones(R), bounds=bounds, method="highs")
    seconds = time.perf_counter() - t
    assert res.status == 0, res.message
    x = res.x
    return seconds, (x[:nW] - x[nW : 2 * nW]).reshape(M, K), x[2 * nW : 2 * nW + K], res.fun


def lp(X, y, lam):
    """The LP's (seconds, optimum)."""
    seconds, _, _, optimum = lp_solution(X, y, lam)
    return seconds, optimum


def fbpd_trace(X, y, lam, restarts, max_iter):
    """One fbpd run with tol = 0: per pass (wall time, objective, relative change)."""
    t = time.perf_counter()
    clf = FBPDClassifier(penalty="l1", lam=lam, tol=0.0, max_iter=max_iter, restarts=restarts).fit(X, y)
    total = time.perf_counter() - t
    h = clf.history_
    # wall_time counts from the solver's start; the power iteration's share is added back
    offset = total - h[-1]["wall_time"]
    return (
        np.array([r["wall_time"] for r in h]) + offset,
        np.array([r["objective"] for r in h]),
        np.array([r["rel_change"] for r in h]),
    )


def first(mask) -> int | None:
    return int(np.argmax(mask)) if mask.any() else None


def stays(mask) -> int | None:
    """First index from which mask holds to the end."""
    if not mask[-1]:
        return None
    return len(mask) - int(np.argmax(~mask[::-1])) if (~mask).any() else 0


def _timed(fn):
    """(result, wall seconds, CPU seconds of this process) of fn()."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = fn()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def timing_table(data, per_class, lam, repeats, max_iter):
    """Wall and CPU seconds to the paper's stopping rule (fbpd with tol = 1e-5, a run as a user
    would start it), best of `repeats`, interleaved with HiGHS and bcd; then one trace per fbpd
    variant with tol = 0 for the objective error along the way."""
    Xtr, ytr, _, _ = data
    X, y = (a[subset(ytr, per_class, 0)] for a in (Xtr, ytr))
    fit("hinge", X, y, lam, max_iter=3)  # compile
    fit("squared_hinge", X, y, lam, max_iter=2)
    runs = {
        "fbpd": lambda: FBPDClassifier(penalty="l1", lam=lam, tol=1e-5, max_iter=max_iter).fit(X, y),
        "fbpd plain": lambda: FBPDClassifier(penalty="l1", lam=lam, tol=1e-5, max_iter=max_iter, restarts=False).fit(
            X, y
        ),
        "highs": lambda: lp(X, y, lam)[1],
        "bcd": lambda: fit("squared_hinge", X, y, lam, tol=1e-5, max_iter=10_000),
    }
    best = {}
    for _ in range(repeats):  # interleaved
        for name, run in runs.items():
            result = _timed(run)
            if name not in best or result[2] < best[name][2]:
                best[name] = result
    optimum = best["highs"][0]
    traces = {name: fbpd_trace(X, y, lam, name == "fbpd", max_iter) for name in ("fbpd", "fbpd plain")}
    _, highs_wall, highs_cpu = best["highs"]
    print(
        f"\n## MNIST L/K={per_class} (n={len(y)}), lam={lam:g}, ℓ1: time to 1e-5 (best CPU of {repeats}, "
        f"interleaved); load average {os.getloadavg()[0]:.2f}"
    )
    print(
        f"| method | passes to rel. change 1e-5 | wall s | CPU s | objective error there | passes until the "
        f"objective stays within 1e-4 of HiGHS | within 1e-6 | wall / HiGHS | CPU / HiGHS |  (fbpd capped at "
        f"{max_iter} passes)"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in ("fbpd", "fbpd plain"):
        clf, wall, cpu = best[name]
        _, objective, change = traces[name]
        error = np.abs(objective / optimum - 1)
        reached = clf.model_.info["converged"]
        cells = ["—" if i is None else str(i + 1) for i in (stays(error < 1e-4), stays(error < 1e-6))]
        stop = f"{clf.n_iter_}" if reached else f"not in {max_iter}"
        at_stop = f"{abs(clf.objective(X, y) / optimum - 1):.1e}"
        print(
            f"| {name} | {stop} | {wall:.2f} | {cpu:.2f} | {at_stop} | {cells[0]} | {cells[1]} | "
            f"{wall / highs_wall:.2f} | {cpu / highs_cpu:.2f} |"
        )
    print(
        f"| HiGHS (LP, optimum {optimum:.6f}) | (to its optimum) | {highs_wall:.2f} | {highs_cpu:.2f} | 0 | | | 1.00 "
        f"| 1.00 |"
    )
    bcd, wall, cpu = best["bcd"]
    print(
        f"| bcd, squared hinge (its tol 1e-5) | {len(bcd.history_)} outer it. | {wall:.2f} | {cpu:.2f} | other loss "
        f"| | | {wall / highs_wall:.2f} | {cpu / highs_cpu:.2f} |",
        flush=True,
    )
    return best


def pass_cost(data, per_class, lam, passes=2000):
    """CPU µs per fbpd pass (in-memory estimator, tol = 0) beside a lower bound: the two sparse
    products a pass of any primal-dual method needs, T x and Tᵀ y (scipy X @ W and Xᵀ @ A with
    W M × K and A n × K), and fbpd's fused chunk kernel alone (scores at [x̃, x], simplex step
    and adjoint)."""
    try:
        from streamfit.solvers.fbpd_kernels import regularized_chunk_step
    except ImportError:  # an older streamfit (PYTHONPATH) without the fused kernel
        regularized_chunk_step = None

    Xtr, ytr, _, _ = data
    X, y = (a[subset(ytr, per_class, 0)] for a in (Xtr, ytr))
    X = sp.csr_matrix(X)
    z = np.unique(y, return_inverse=True)[1].astype(np.int32)
    n, M = X.shape
    K = z.max() + 1
    rng = np.random.default_rng(0)
    W, W2, A = rng.random((M, K)), rng.random((M, 2 * K)), rng.random((n, K))
    Y, b2 = np.eye(K)[z], np.zeros(2 * K)
    FBPDClassifier(penalty="l1", lam=lam, max_iter=3).fit(X, y)  # compile

    def products():
        for _ in range(passes):
            X @ W
            X.T @ A

    def kernel():
        for _ in range(passes):
            regularized_chunk_step(X.indptr, X.indices, X.data, z, Y, W2, b2, 0.1, np.zeros((M, K)), np.zeros(K), False)

    fbpd = _timed(lambda: FBPDClassifier(penalty="l1", lam=lam, tol=0.0, max_iter=passes).fit(X, y))[2]
    bound = _timed(products)[2]
    fused = "—" if regularized_chunk_step is None else f"{_timed(kernel)[2] * 1e6 / passes:.0f}"
    us = 1e6 / passes
    print(
        f"| MNIST L/K={per_class} (n={n}, nnz={X.nnz}) | {fbpd * us:.0f} | {bound * us:.0f} | {fused} | "
        f"{fbpd / bound:.1f} | {os.getloadavg()[0]:.2f} |",
        flush=True,
    )


# -- part 2: accuracy -----------------------------------------------------------------------


def fbpd_to_gap(X, y, lam, gap_tol, max_iter):
    """fbpd (restarted, ℓ1, tol = 0) continued in blocks to max_iter/16, max_iter/4, max_iter
    passes (resume=True on the same in-memory Checkpointer, so the blocks end where one
    uninterrupted run would), stopping after the first block whose duality gap relative to the
    objective is ≤ gap_tol. Returns ((W, b), passes, relative gap, objective)."""
    classes, z = np.unique(y, return_inverse=True)
    source = InMemoryStore(sp.csr_matrix(X), z.astype(np.int32), list(classes))
    checkpointer = None
    for cap in (max(max_iter // 16, 1), max(max_iter // 4, 1), max_iter):
        solver = FBPDSolver(FBPDParams(penalty="l1", lam=lam, tol=0.0, max_iter=cap))
        resume = checkpointer is not None
        if not resume:
            checkpointer = Checkpointer(None, config=solver.params.model_settings(), store_fingerprint="in-memory")
        log = MetricsLog(None)
        with Engine(mode="inprocess") as engine:
            model = solver.fit(source, engine=engine, checkpointer=checkpointer, log=log, resume=resume)
        last = log.records[-1]
        gap = last["gap"] / last["objective"]
        if gap <= gap_tol:
            break
    return (model.coef_.toarray().T, model.intercept_), model.info["iterations"], gap, last["objective"]


def test_error(W, b, classes, X_test, y_test) -> float:
    return 100 * float(np.mean(classes[np.argmax(np.asarray(X_test @ W) + b, axis=1)] != y_test))


def accuracy(name, data, per_class_list, grid, n_subsets, opts, subset_ids=None):
    """Per (L/K, lam/lam_max, subset): the ℓ1-hinge optimum by HiGHS (the LP) and by fbpd run to a
    relative gap ≤ opts.gap (cap opts.acc_iter), the squared hinge and logistic by bcd at
    tol opts.bcd_tol. The hinge summary uses the LP optimum; fbpd's error is its check."""
    Xtr, ytr, Xte, yte = data
    print(
        f"\n## {name}: test error (%) vs lam, ℓ1 penalty, mean ± sd over {n_subsets} subsets; "
        f"fbpd to gap ≤ {opts.gap:g} (cap {opts.acc_iter} passes), bcd tol {opts.bcd_tol:g} "
        f"(cap {opts.bcd_iter}); load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(
        "| L/K | lam/lam_max | hinge (LP optimum) | hinge (fbpd) | squared hinge (bcd) | logistic (bcd) | "
        "fbpd passes (median) | fbpd gap/objective (max) | fbpd obj / LP obj − 1 (max) | "
        "hinge nnz (LP) | bcd outer it. (max sq / log) |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    columns = ("lp", "fbpd", "squared_hinge", "logistic")
    errors = {}
    flags = []
    subset_ids = list(range(n_subsets)) if subset_ids is None else subset_ids
    for per_class in per_class_list:
        table = {col: np.zeros((len(grid), len(subset_ids))) for col in columns}
        for a, rel in enumerate(grid):
            passes, gaps, obj_err, nnz, bcd_its = [], [], [], [], {"squared_hinge": [], "logistic": []}
            for si, s in enumerate(subset_ids):
                X, y = (v[subset(ytr, per_class, s)] for v in (Xtr, ytr))
                # features absent from the training subset get weight 0 under ℓ1 for every
                # loss: dropping them changes no solution and saves time on hashed text
                used = np.flatnonzero(np.diff(X.tocsc().indptr))
                X, X_test = X[:, used], Xte[:, used]
                classes = np.unique(y)
                lam = rel * lam_max("hinge", X, y)
                _, W, b, optimum = lp_solution(X, y, lam)
                table["lp"][a, si] = test_error(W, b, classes, X_test, yte)
                nnz.append(int((np.abs(W) > 1e-9).sum()))
                (W, b), n_passes, gap, objective = fbpd_to_gap(X, y, lam, opts.gap, opts.acc_iter)
                table["fbpd"][a, si] = test_error(W, b, classes, X_test, yte)
                passes.append(n_passes)
                gaps.append(gap)
                obj_err.append(objective / optimum - 1)
                if gap > opts.gap:
                    flags.append(
                        f"{name} L/K={per_class} lam/lam_max={rel:g} subset {s}: fbpd gap {gap:.1e} "
                        f"after {n_passes} passes (objective {objective / optimum - 1:+.1e} vs LP)"
                    )
                for loss in LOSSES[1:]:
                    clf = fit(loss, X, y, rel * lam_max(loss, X, y), tol=opts.bcd_tol, max_iter=opts.bcd_iter)
                    table[loss][a, si] = 100 * np.mean(clf.predict(X_test) != yte)
                    bcd_its[loss].append(len(clf.history_))
                    if len(clf.history_) >= opts.bcd_iter:
                        flags.append(
                            f"{name} L/K={per_class} lam/lam_max={rel:g} subset {s}: bcd {loss} "
                            f"hit its cap of {opts.bcd_iter} outer iterations"
                        )
                if opts.cells:  # one JSON line per (L/K, lam, subset): merge separate runs' subsets
                    with open(opts.cells, "a") as f:
                        f.write(
                            json.dumps(
                                {
                                    "data": name,
                                    "lk": per_class,
                                    "rel": rel,
                                    "subset": s,
                                    **{col: float(table[col][a, si]) for col in columns},
                                    "fbpd_passes": passes[-1],
                                    "fbpd_gap": gaps[-1],
                                    "fbpd_obj_err": obj_err[-1],
                                }
                            )
                            + "\n"
                        )
            row = " | ".join(f"{table[col][a].mean():.1f} ± {table[col][a].std():.1f}" for col in columns)
            print(
                f"| {per_class} | {rel:g} | {row} | {int(np.median(passes))} | {max(gaps):.1e} | "
                f"{max(obj_err):.1e} | {int(np.median(nnz))} | {max(bcd_its['squared_hinge'])} / "
                f"{max(bcd_its['logistic'])} |",
                flush=True,
            )
        for col in columns:
            errors[per_class, col] = table[col]
    print(f"\n{name}: cells not converged: " + ("none" if not flags else f"{len(flags)}"))
    for flag in flags:
        print(f"- {flag}")
    summarize(name, per_class_list, grid, {key: table.mean(axis=1) for key, table in errors.items()})


def summarize(name, per_class_list, grid, means):
    """Per L/K and loss: best mean error over the grid, mean excess and grid values within 1 pt.
    `means[per_class, column]`: mean error per grid value (NaN: not measured, left out)."""
    columns = ("lp", "fbpd", "squared_hinge", "logistic")
    print(f"\n### {name}: best error over the grid and robustness to lam (hinge: the LP optimum)")
    print("| L/K | loss | best error (lam/lam_max) | mean excess over the grid | grid values within 1 pt |")
    print("|---|---|---|---|---|")
    wins = {"accuracy": 0, "robustness": 0, "count": 0}
    for per_class in per_class_list:
        summary = {}
        for col, label in zip(columns, ("hinge (LP)", "hinge (fbpd)", "squared_hinge", "logistic")):
            mean = np.asarray(means[per_class, col], dtype=float)
            measured = ~np.isnan(mean)
            a = int(np.nanargmin(mean))
            edge = " at the grid's edge" if a in (0, len(grid) - 1) else ""
            excess = mean[measured] - mean[a]
            summary[col] = (mean[a], float(excess.mean()), int((excess <= 1.0).sum()))
            print(
                f"| {per_class} | {label} | {mean[a]:.1f} ({grid[a]:g}{edge}) | {summary[col][1]:.1f} | "
                f"{summary[col][2]}/{int(measured.sum())} |"
            )
        others = columns[2:]
        wins["accuracy"] += summary["lp"][0] <= min(summary[k][0] for k in others)
        wins["robustness"] += summary["lp"][1] <= min(summary[k][1] for k in others)
        wins["count"] += summary["lp"][2] >= max(summary[k][2] for k in others)
    n = len(per_class_list)
    print(
        f"\n{name}: the converged hinge (LP optimum) has the lowest best error in {wins['accuracy']}/{n} L/K "
        f"settings, the lowest mean excess over the lam grid in {wins['robustness']}/{n}, and the most grid "
        f"values within 1 point of its best in {wins['count']}/{n}.",
        flush=True,
    )


def summarize_cells(paths):
    """The accuracy tables from --cells files (runs split over processes or sessions): per
    (data, L/K, lam/lam_max) the mean ± sd over the subsets found (a later line for the same
    subset replaces an earlier one), then the summary."""
    cells = {}
    for path in paths:
        with open(path) as f:
            for line in f:
                if line.strip():
                    c = json.loads(line)
                    cells[c["data"], c["lk"], c["rel"], c["subset"]] = c
    columns = ("lp", "fbpd", "squared_hinge", "logistic")
    for name in sorted({k[0] for k in cells}):
        lks = sorted({k[1] for k in cells if k[0] == name})
        grid = sorted({k[2] for k in cells if k[0] == name}, reverse=True)
        print(f"\n## {name} (from {', '.join(paths)}): test error (%) vs lam, mean ± sd over the subsets found")
        print(
            "| L/K | lam/lam_max | subsets | hinge (LP optimum) | hinge (fbpd) | squared hinge (bcd) | logistic (bcd) | "
            "fbpd gap/objective (max) |"
        )
        print("|---|---|---|---|---|---|---|---|")
        means = {}
        for lk in lks:
            for col in columns:
                means[lk, col] = np.full(len(grid), np.nan)
            for a, rel in enumerate(grid):
                found = [c for k, c in cells.items() if k[:3] == (name, lk, rel)]
                if not found:
                    continue
                row = []
                for col in columns:
                    values = np.array([c[col] for c in found if c.get(col) is not None], dtype=float)
                    means[lk, col][a] = values.mean() if len(values) else np.nan
                    row.append(f"{values.mean():.1f} ± {values.std():.1f}" if len(values) else "—")
                gaps = [c["fbpd_gap"] for c in found if c.get("fbpd_gap") is not None]
                gap = f"{max(gaps):.1e}" if gaps else "—"
                print(f"| {lk} | {rel:g} | {','.join(str(c['subset']) for c in found)} | {' | '.join(row)} | {gap} |")
        summarize(name, lks, grid, means)


DENSE_SETS = {
    "pendigits": ("pendigits/pendigits.gz", "pendigits/pendigits.t.gz"),
    "satimage": ("satimage/satimage.scale.gz", "satimage/satimage.scale.t.gz"),
    "letter": ("letter/letter.scale.gz", "letter/letter.scale.t.gz"),
    "dna": ("dna/dna.scale.gz", "dna/dna.scale.t.gz"),
}


def dense_defaults(names, lp_sets, max_iter=None):
    """Part 3: fbpd's defaults against preconditioning=true, LinearSVC and the LP per set."""
    from sklearn.datasets import load_svmlight_file
    from sklearn.svm import LinearSVC

    print("\n## fbpd's defaults on dense numeric sets (preconditioning auto vs true), LinearSVC, the LP")
    print(
        "| set | run | accuracy | Δ LinearSVC (points) | objective | excess over the LP | seconds | "
        "step kind | iterations |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        train, test = (os.path.join(DATA, "libsvm", f) for f in DENSE_SETS[name])
        X, y = load_svmlight_file(train)
        Xt, yt = load_svmlight_file(test, n_features=X.shape[1])
        X, Xt = X.toarray(), Xt.toarray()  # dense sets (scikit-learn refuses the loader's int64 CSR indices)
        t = time.perf_counter()
        svc = LinearSVC().fit(X, y)
        peer_s, peer = time.perf_counter() - t, svc.score(Xt, yt)
        rows, lam = [], None
        for label, kw in (("defaults (auto)", {}), ("preconditioning=true", {"preconditioning": True})):
            if max_iter:
                kw["max_iter"] = max_iter
            t = time.perf_counter()
            clf = FBPDClassifier(**kw).fit(X, y)
            seconds = time.perf_counter() - t
            info = clf.model_.info
            lam = info["lam"]
            kind = "diagonal" if info["preconditioned"] else "scalar, centered" if info["centered"] else "scalar"
            rows.append((label, clf.score(Xt, yt), clf.history_[-1]["objective"], seconds, kind, info["iterations"]))
        optimum = None
        if name in lp_sets:
            lp_s, W, b, optimum = lp_solution(X, y, lam)
            classes = np.unique(y)
            lp_acc = float(np.mean(classes[np.argmax(np.asarray(Xt @ W) + b, axis=1)] == yt))
            rows.append(("LP (HiGHS), same lam", lp_acc, optimum, lp_s, "—", "—"))
        for label, acc, objective, seconds, kind, iterations in rows:
            excess = f"{objective / optimum - 1:+.2%}" if optimum else "—"
            print(
                f"| {name} | {label} | {acc:.4f} | {100 * (acc - peer):+.2f} | {objective:.5f} | {excess} | "
                f"{seconds:.1f} | {kind} | {iterations} |",
                flush=True,
            )
        print(f"| {name} | LinearSVC | {peer:.4f} | 0 | — | — | {peer_s:.1f} | — | — |", flush=True)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--subsets", type=int, default=3, help="training subsets per L/K (MNIST)")
    ap.add_argument("--news-subsets", type=int, default=2, help="training subsets per L/K (news20)")
    ap.add_argument(
        "--subset-ids",
        default=None,
        help="comma-separated subset seeds to run (instead of 0..n-1), e.g. one per process",
    )
    ap.add_argument("--cells", default=None, help="append one JSON line per accuracy cell to this file")
    ap.add_argument(
        "--summarize", default=None, help="comma-separated --cells files: print their merged accuracy tables and exit"
    )
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--timing-iter", type=int, default=20_000, help="fbpd passes in part 1 (tol = 0)")
    ap.add_argument("--acc-iter", type=int, default=32_000, help="fbpd pass cap in part 2")
    ap.add_argument("--gap", type=float, default=1e-3, help="part 2: fbpd runs to this gap/objective")
    ap.add_argument("--bcd-tol", type=float, default=1e-6, help="part 2: bcd's tol")
    ap.add_argument("--bcd-iter", type=int, default=5000, help="part 2: bcd's outer iteration cap")
    ap.add_argument(
        "--parts",
        default="timing,mnist,news20",
        help="comma-separated: passcost (CPU per pass vs two sparse products), timing, mnist, news20, dense",
    )
    ap.add_argument("--dense-sets", default="pendigits,satimage,letter,dna", help="part 3's sets")
    ap.add_argument("--lp-sets", default="pendigits,satimage,dna", help="part 3: the sets whose LP is solved")
    ap.add_argument("--mnist-lk", default="3,5,10")
    ap.add_argument("--timing-lk", default="3,10", help="MNIST L/K settings of part 1")
    ap.add_argument("--news-lk", default="5,10", help="news20 L/K settings (50 is slow: n = 1000 rows)")
    ap.add_argument("--grid", default="0.5,0.3,0.1,3e-2,1e-2,3e-3,1e-3,3e-4,1e-4,3e-5", help="lam/lam_max values")
    ap.add_argument(
        "--quick",
        action="store_true",
        help="part 1 on L/K=3 only, 5000 passes; part 2: MNIST L/K=3, news20 L/K=5, 4 lams, 2 subsets, fbpd cap 5000",
    )
    args = ap.parse_args(argv)
    if args.summarize:
        summarize_cells(args.summarize.split(","))
        return 0
    started = time.perf_counter()
    print(
        f"# bench_fbpd {' '.join(sys.argv[1:] if argv is None else argv)} "
        f"(load average at start {os.getloadavg()[0]:.2f})"
    )
    parts = set(args.parts.split(","))
    mnist_lk = [int(v) for v in args.mnist_lk.split(",")]
    news_lk = [int(v) for v in args.news_lk.split(",")]
    grid = [float(v) for v in args.grid.split(",")]
    subset_ids = None if args.subset_ids is None else [int(v) for v in args.subset_ids.split(",")]
    if args.quick:
        args.subsets, args.news_subsets = min(args.subsets, 2), min(args.news_subsets, 2)
        args.timing_iter, args.acc_iter = min(args.timing_iter, 5000), min(args.acc_iter, 5000)
        mnist_lk, news_lk, grid = [3], [5], [1e-1, 1e-2, 1e-3, 1e-4]
    if "dense" in parts:
        dense_defaults(args.dense_sets.split(","), set(args.lp_sets.split(",")))
    if parts <= {"dense"}:
        return 0
    mnist = load_mnist()
    if "passcost" in parts:
        print("\n## CPU µs per fbpd pass (ℓ1, lam = 1e-2, in memory) vs the two sparse products T x, Tᵀ y (scipy)")
        print(
            "| data | fbpd pass | lower bound: X @ W + Xᵀ @ A | fbpd's fused chunk kernel alone | fbpd / bound | "
            "load average |"
        )
        print("|---|---|---|---|---|---|")
        for per_class in [3, 10]:
            pass_cost(mnist, per_class, 1e-2)
    if "timing" in parts:
        for per_class in [3] if args.quick else [int(v) for v in args.timing_lk.split(",")]:
            timing_table(mnist, per_class, 1e-2, args.repeats, args.timing_iter)
    if "mnist" in parts:
        accuracy("MNIST", mnist, mnist_lk, grid, args.subsets, args, subset_ids)
    if "news20" in parts:
        accuracy("news20", load_news20(), news_lk, grid, args.news_subsets, args, subset_ids)
    print(f"\ntotal {time.perf_counter() - started:.0f} s; load average {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    sys.exit(main())
