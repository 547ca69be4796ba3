"""Would a debiasing refit make ppdsparse's models smaller at LinearSVC's accuracy? (issue 20
item 3b, session 18.) The relaxed lasso (Meinshausen 2007) / post-Lasso (Belloni and
Chernozhukov 2013) as a two-stage estimator per class k: the support S_k = the non-zero columns of
ppdsparse's w_k at ℓ1 weight lam_k (its objective (9), lam "scale" at each --lam-scales value),
then the same loss with the ℓ2 weight tau alone (lam = 0) on the columns S_k and the bias.

The refit is computed by scikit-learn's LinearSVC(loss="squared_hinge", C = 1/(2 n tau),
intercept_scaling=1, tol=1e-5) on X[:, S_k] with the ±1 labels of class k: exactly (9) with
lam = 0 restricted to S_k (LinearSVC penalizes its intercept as a weight, as (9) does the bias;
its squared hinge has no ½, hence the 2), a proxy for ppdsparse's own kernels.
`--refit-tau-ratios` refits with the ℓ2 weight ρ·tau for each ρ given (C = 1/(2 n ρ tau); ρ = 1:
the same tau as the support's solve; ρ → 0 is the unpenalized post-Lasso).

Per set: LinearSVC(C = 1) on all columns (the reference: accuracy, or micro-F1 for a multilabel
set, with P@1), then for each lam_scale ppdsparse's model (solve_group in process on the
training matrix of build_data) and its refit: non-zero weights (intercepts not counted) and
LinearSVC's ÷ them ("x fewer"), Δ points of the metric against LinearSVC's, and CPU seconds
÷ LinearSVC's (ppdsparse's solve; the refit's LinearSVC fits). Multilabel: each model's decision
threshold is fitted on its training margins as ppdsparse's fit_threshold does (the best micro-F1
of score > t, t in MARGIN_GRID); LinearSVC's is 0. `--prune` adds a reference that does not
depend on the ℓ1 path: LinearSVC's own weights cut to the largest |w_kj| of each class (1/5,
1/10 and 1/20 of its non-zeros), as they are and refitted on the kept columns.

Stores are those of tools/bench_walkthrough.py (r8like, ohsumedlike, bibtex:
WORK/NAME-{train,test}.zarr) and tools/bench_defaults.py (news20-5, news20-10, sector, ...:
WORK/NAME.zarr and WORK/NAME-test.zarr), written by them into --work if missing.

    python tools/bench_refit.py [--sets r8like,ohsumedlike,news20-5,news20-10,sector,bibtex]
        [--lam-scales 1e-3,1.5e-3,2e-3,3e-3,5e-3] [--refit-tau-ratios 1,0.3,0.1] [--tau TAU] [--prune]
        [--work DIR] [--data DIR]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp

WALKTHROUGH_SETS = ("r8like", "ohsumedlike", "bibtex", "r8news", "ngfolders")


def stores(name: str, data: Path, work: Path) -> tuple[str, str]:
    """(training store, test store) of a set, ingested into `work` by the tool that defines it."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    if name in WALKTHROUGH_SETS:
        import bench_walkthrough

        train, test = work / f"{name}-train.zarr", work / f"{name}-test.zarr"
        if not test.exists():
            cli = [sys.executable, "-m", "streamfit.cli", "-q", "ingest", "--overwrite"]
            for command in bench_walkthrough.ingest_commands(name, data, work):
                subprocess.run([*cli, *command], check=True, stdout=subprocess.DEVNULL)
        return str(train), str(test)
    import bench_defaults

    return bench_defaults.ingest(name, str(data), str(work))


def fitted_threshold(scores: np.ndarray, truth: np.ndarray) -> float:
    """ppdsparse's fit_threshold on the training margins: the t of MARGIN_GRID with the best micro-F1."""
    from streamfit.metrics import best_threshold, threshold_counts
    from streamfit.solvers.ppdsparse import MARGIN_GRID

    t = best_threshold(threshold_counts(scores, truth, MARGIN_GRID), MARGIN_GRID, center=0.0)
    return 0.0 if t is None else t


class Scorer:
    """The test metric of score matrices (n_test × K): accuracy (multiclass), or micro-F1 at the
    given threshold and P@1 (multilabel)."""

    def __init__(self, n_classes: int, multilabel: bool, y_test):
        self.n_classes, self.multilabel, self.y_test = n_classes, multilabel, y_test

    def __call__(self, scores: np.ndarray, threshold: float = 0.0) -> tuple[float, float | None]:
        from streamfit.metrics import MetricAccumulator

        acc = MetricAccumulator(self.n_classes, self.multilabel, threshold=threshold)
        acc.update(scores, self.y_test)
        if not self.multilabel:
            return float(acc.result()["accuracy"]), None
        tp, fp, fn = acc.tp.sum(), acc.fp.sum(), acc.fn.sum()
        return float(2 * tp / max(2 * tp + fp + fn, 1)), float(acc.result()["p@1"])


def refit(X: sp.csr_matrix, signs: np.ndarray, support: list[np.ndarray], C: float) -> tuple[np.ndarray, np.ndarray]:
    """The lam = 0 refit of every class k on the columns support[k] (LinearSVC, squared hinge,
    intercept penalized as a weight): dense K × d weights and K biases; a class with an empty
    support gets its closed-form bias ȳ_k/(1 + tau), tau = 1/(2 n C)."""
    from sklearn.svm import LinearSVC

    n, d = X.shape
    K = len(support)
    W, b = np.zeros((K, d)), np.zeros(K)
    for k, S in enumerate(support):
        y = signs[:, k]
        if S.size == 0:
            b[k] = y.mean() / (1 + 1 / (2 * n * C))
            continue
        m = LinearSVC(C=C, loss="squared_hinge", intercept_scaling=1.0, tol=1e-5, max_iter=20000).fit(X[:, S], y)
        W[k, S] = m.coef_.ravel()
        b[k] = m.intercept_[0]
    return W, b


class Reference:
    """A set's training and test matrices and one-vs-rest LinearSVC(C = 1) on them, the reference
    every model's line is measured against (line)."""

    def __init__(self, train: str, test: str):
        from sklearn.multiclass import OneVsRestClassifier
        from sklearn.svm import LinearSVC

        from streamfit.store import open_store

        self.store = open_store(train)
        (X, y), (Xt, yt) = self.store.to_scipy(), open_store(test).to_scipy()
        self.X, self.Xt = sp.csr_matrix(X, dtype=np.float64), sp.csr_matrix(Xt, dtype=np.float64)
        self.multilabel, K = self.store.multilabel, self.store.n_classes
        self.truth = sp.csr_matrix(y).toarray() > 0 if self.multilabel else np.arange(K) == np.asarray(y)[:, None]
        self.score = Scorer(K, self.multilabel, yt)
        started = time.process_time()
        if self.multilabel:
            ovr = OneVsRestClassifier(LinearSVC(C=1.0)).fit(self.X, self.truth.astype(int))
            self.coef = np.vstack([e.coef_ for e in ovr.estimators_])
            self.intercept = np.concatenate([e.intercept_ for e in ovr.estimators_])
        else:
            svc = LinearSVC(C=1.0).fit(self.X, y)
            self.coef, self.intercept = svc.coef_, svc.intercept_
        self.cpu = time.process_time() - started
        self.nnz = int(np.count_nonzero(self.coef))
        self.metric, self.p1 = self.score(self.Xt @ self.coef.T + self.intercept)

    def header(self, name: str) -> str:
        X, K = self.X, self.store.n_classes
        p1 = f", P@1 {self.p1:.4f}" if self.multilabel else ""
        return (
            f"## {name}: {X.shape[0]} train / {self.Xt.shape[0]} test rows, {np.unique(X.indices).size} columns "
            f"used, {K} {'labels' if self.multilabel else 'classes'}; LinearSVC (C = 1) {self.metric:.4f}{p1}, "
            f"{self.nnz} weights, {self.cpu:.2f} s CPU"
        )

    def line(self, label: str, W, b: np.ndarray, cpu: float | None) -> str:
        """A model (K × d weights W, dense or sparse, biases b) against LinearSVC: its non-zero
        weights and LinearSVC's ÷ them, its metric and Δ points (multilabel: at the threshold
        fitted on its training margins, with P@1's Δ), its CPU seconds ÷ LinearSVC's (None: not timed)."""
        nnz = int(W.nnz if sp.issparse(W) else np.count_nonzero(W))
        W = W.toarray() if sp.issparse(W) else W
        threshold = fitted_threshold(np.asarray(self.X @ W.T) + b, self.truth) if self.multilabel else 0.0
        metric, at1 = self.score(np.asarray(self.Xt @ W.T) + b, threshold)
        extra = ""
        if at1 is not None and self.p1 is not None:  # multilabel
            extra = f", P@1 {100 * (at1 - self.p1):+.2f}, t {threshold:+.2f}"
        timed = "" if cpu is None else f", {cpu / self.cpu:.2f}x CPU"
        return (
            f"{label}: {nnz} weights ({self.nnz / max(nnz, 1):.1f}x fewer), {metric:.4f} "
            f"({100 * (metric - self.metric):+.2f}{extra}){timed}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="r8like,ohsumedlike,news20-5,news20-10,sector,bibtex")
    ap.add_argument("--lam-scales", default="1e-3,1.5e-3,2e-3,3e-3,5e-3")
    ap.add_argument("--refit-tau-ratios", default="1", help="the refit's ℓ2 weights ÷ tau, comma-separated")
    ap.add_argument("--tau", type=float, default=None, help="ppdsparse's tau (default: its default)")
    ap.add_argument("--prune", action="store_true", help="also LinearSVC's weights cut to the largest per class")
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_refit"))
    args = ap.parse_args()

    from streamfit.solvers.ppdsparse import PPDSparseParams, build_data, solve_group

    args.work.mkdir(parents=True, exist_ok=True)
    for name in args.sets.split(","):
        ref = Reference(*stores(name, args.data, args.work))
        print(ref.header(name), flush=True)
        X, n, K = ref.X, ref.X.shape[0], ref.store.n_classes
        signs = np.where(ref.truth, 1.0, -1.0)
        data = build_data(ref.store, False, True)
        if data.scale[0] != 1.0:  # (9) on rows divided by c: ℓ2 weights tau·c² and tau, not one C
            raise SystemExit(
                f"{name}: rows of mean norm outside [1/16, 16] (data_scale {data.scale[0]:g}): not supported"
            )
        for lam_scale in (float(s) for s in args.lam_scales.split(",")):
            p = PPDSparseParams(lam_scale=lam_scale, **({} if args.tau is None else {"tau": args.tau}))
            solve_group(data, 0, min(K, 1), p, n)  # compiled before it is timed
            started = time.process_time()
            g = solve_group(data, 0, K, p, n)
            cpu = time.process_time() - started
            W = sp.csr_matrix((g.values, g.indices, g.indptr), shape=(K, X.shape[1]))
            support = [g.indices[g.indptr[k] : g.indptr[k + 1]] for k in range(K)]
            print(f"{name:>11} {lam_scale:<7g}| {ref.line('ppdsparse', W, g.bias, cpu)}", flush=True)
            for ratio in (float(r) for r in args.refit_tau_ratios.split(",")):
                started = time.process_time()
                Wr, br = refit(X, signs, support, 1.0 / (2 * n * p.tau * ratio))
                line = ref.line(f"refit at {ratio:g}·tau", Wr, br, time.process_time() - started)
                print(f"{name:>11} {lam_scale:<7g}| {line} (refit alone)", flush=True)
        if args.prune:
            for factor in (5, 10, 20):
                kept = [np.sort(np.argsort(-np.abs(w))[: max(1, np.count_nonzero(w) // factor)]) for w in ref.coef]
                Wp = np.zeros_like(ref.coef)
                for k, S in enumerate(kept):
                    Wp[k, S] = ref.coef[k, S]
                Wr, br = refit(X, signs, kept, 1.0 / (2 * n * PPDSparseParams().tau))
                print(f"{name:>11} prune/{factor:<3}| {ref.line('LinearSVC cut', Wp, ref.intercept, None)}", flush=True)
                print(f"{name:>11} prune/{factor:<3}| {ref.line('cut + refit', Wr, br, None)}", flush=True)


if __name__ == "__main__":
    main()
