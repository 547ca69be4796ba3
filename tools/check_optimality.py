"""Each solver's answer against an independent reference, on data the tests do not use
(docs/benchmarks.md, "Correctness against independent references", session 32).

The references are computed here with numpy, scipy and scikit-learn from the objective each
solver's module docstring states, not with streamfit.objectives:
- bcd: the optimality conditions of the (weighted) group elastic net with the multiclass squared
  hinge (eq. 2) or the one-vs-rest one (eq. 11) and the unpenalised intercept, and the objective
  gap to a run at tol 1e-9 whose conditions hold to rounding;
- ppdsparse: per class, the elastic-net conditions of the half squared hinge with the bias in the
  ridge, and the certified relative duality gap (P − D)/P at the dual point α_i = max(1 − y_i s_i, 0);
- fbpd: the LP of the ℓ1-regularized Crammer–Singer hinge solved by scipy's HiGHS;
- stagewise: scikit-learn's Ridge / LogisticRegression on the problem one block of every column solves;
- multiboost: at the end of column generation, (C/p)·edge − 1 of every sign stump at every threshold
  between two training values (the dual constraint (3b)), θ (16) of the model's coordinates and
  the restricted master problem (2) solved by L-BFGS-B over them;
- workers: bcd (chunks mode), fbpd and ppdsparse on a store, in process and on 2 local Dask workers.

    PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 python tools/check_optimality.py [--only bcd,fbpd,...] [--no-shared]

Data: three generated sets (seeds 11, 12, 13: gen_dense, gen_text, gen_units) and, where
/work/shared/data is present, rows of satimage, pendigits and dna that the tests do not use;
each as a dense array and as CSR. Prints one markdown table per solver.
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import tempfile
import time
import warnings

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog
from sklearn.datasets import load_svmlight_file, make_classification, make_multilabel_classification, make_regression
from sklearn.linear_model import LogisticRegression, Ridge

from streamfit import BCDClassifier, FBPDClassifier, PPDSparseClassifier, StagewiseLSClassifier, StagewiseLSRegressor

SHARED = "/work/shared/data/libsvm"


# -- data (seeds stated; the shared slices are rows the tests never read) ------------------------


def gen_dense():
    """make_classification, 300 × 20, 4 classes, seed 11."""
    return make_classification(
        n_samples=300, n_features=20, n_informative=8, n_classes=4, random_state=11, class_sep=0.8
    )


def gen_units():
    """make_classification, 250 × 10, 3 classes, seed 13, column j multiplied by 10^u_j, u_j ∈ U(−2, 2),
    with an offset of 3 spreads on column 0 (standardize "auto" applies)."""
    X, y = make_classification(n_samples=250, n_features=10, n_informative=6, n_classes=3, random_state=13)
    rng = np.random.default_rng(13)
    X = X * 10.0 ** rng.uniform(-2, 2, X.shape[1])
    X[:, 0] += 3 * X[:, 0].std()
    return X, y


def gen_text():
    """Sparse non-negative rows of unit norm, 400 × 600, 5 classes, seed 12: Zipf background words
    and 8 topic words per class."""
    rng = np.random.default_rng(12)
    n, d, K = 400, 600, 5
    y = rng.integers(0, K, n)
    p = 1.0 / np.arange(1, d + 1)
    p /= p.sum()
    rows = []
    for i in range(n):
        words = np.r_[rng.choice(d, 15, p=p), rng.choice(np.arange(40 + 8 * y[i], 48 + 8 * y[i]), 3)]
        rows.append(np.bincount(words, minlength=d))
    X = np.log1p(np.array(rows, dtype=float))
    X /= np.linalg.norm(X, axis=1, keepdims=True)
    return X, y


def shared(name, path, start, stop, n_features):
    """Rows start … stop − 1 of a shared LIBSVM file, labels renumbered 0 … K − 1."""
    with gzip.open(os.path.join(SHARED, path)) as f:
        X, y = load_svmlight_file(f, n_features=n_features)
    X, y = X[start:stop].toarray(), y[start:stop]
    return X, np.unique(y, return_inverse=True)[1]


def datasets(include_shared=True):
    out = {"gen-dense": gen_dense(), "gen-units": gen_units(), "gen-text": gen_text()}
    if include_shared and os.path.isdir(SHARED):
        out["satimage[2000:2600]"] = shared("satimage", "satimage/satimage.scale.gz", 2000, 2600, 36)
        out["pendigits[3000:3600]"] = shared("pendigits", "pendigits/pendigits.gz", 3000, 3600, 16)
        out["dna[1200:1700]"] = shared("dna", "dna/dna.scale.gz", 1200, 1700, 180)
    return out


def forms(X):
    """(form name, X) pairs: dense and CSR."""
    return [("dense", X), ("csr", sp.csr_matrix(X))]


def column_std(X):
    """The columns' standard deviations over the rows (ddof 0), 1 where constant."""
    X = X.toarray() if sp.issparse(X) else X
    s = X.std(axis=0)
    return np.where(s > 1e-6 * np.sqrt((X * X).mean(axis=0)), s, 1.0)


def coef(model):
    """W (d × m) and b (m,) of a linear model."""
    C = model.coef_.toarray() if sp.issparse(model.coef_) else np.asarray(model.coef_)
    return C.T.astype(float), np.asarray(model.intercept_, dtype=float)


def quiet(fn, *args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn(*args, **kwargs)


# -- bcd -------------------------------------------------------------------------------------


def bcd_gradient(W, b, X, Y, multilabel):
    """(loss, G (d × m), g_b (m,)) of eq. (2) (Y class ids) or eq. (11) (Y 0/1, n × m), averaged."""
    n = X.shape[0]
    S = np.asarray(X @ W) + b
    if multilabel:
        signs = 2.0 * Y - 1.0
        P = np.maximum(1.0 - signs * S, 0.0)
        C = -2.0 * signs * P
    else:
        A = 1.0 - S[np.arange(n), Y][:, None] + S
        A[np.arange(n), Y] = 0.0
        P = np.maximum(A, 0.0)
        C = 2.0 * P
        C[np.arange(n), Y] = -C.sum(axis=1)
    return float((P * P).sum() / n), np.asarray(X.T @ C) / n, C.sum(axis=0) / n


def bcd_measures(model, X, Y, multilabel, rho=0.2):
    """(F, KKT violation / λ, ‖g_b‖ / λ) of the group elastic net λ Σ_j (ρ s_j‖W_j‖ + (1 − ρ)/2 s_j²‖W_j‖²)
    (s_j = 1 unless the model is standardized) at the model: ‖G_j‖ ≤ λρ s_j on zero rows,
    G_j + λρ s_j W_j/‖W_j‖ + λ(1 − ρ) s_j² W_j = 0 on the others, g_b = 0; row j's violation is
    divided by s_j, i.e. taken in the coordinates V = diag(s) W the solver works in."""
    W, b = coef(model)
    lam = model.info["lam"]
    s = column_std(X) if model.info["standardized"] else np.ones(X.shape[1])
    loss, G, gb = bcd_gradient(W, b, X, Y, multilabel)
    norms = np.linalg.norm(W, axis=1)
    F = loss + lam * (rho * (s * norms).sum() + (1 - rho) / 2 * (s * s * norms * norms).sum())
    zero = norms == 0
    R = G + lam * (1 - rho) * (s * s)[:, None] * W
    R[~zero] += lam * rho * s[~zero, None] * W[~zero] / norms[~zero, None]
    viol = np.where(zero, np.maximum(np.linalg.norm(G, axis=1) - lam * rho * s, 0.0), np.linalg.norm(R, axis=1))
    return F, (viol / s).max() / lam, np.linalg.norm(gb) / lam


def check_bcd(data):
    print("\n### bcd\n")
    print("| dataset | form | setting | converged | outer | F | (F − F*)/F* | KKT viol./λ | ‖g_b‖/λ | F* run's KKT/λ |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    settings = [("default", {}), ("standardize=True", {"standardize": True}), ("mode=chunks", {"mode": "chunks"})]
    for name, (X, y) in data.items():
        for form, Xf in forms(X):
            for label, kw in settings:
                if label != "standardize=True" or form == "dense":
                    bcd_row(name, form, label, kw, Xf, y, False)
    X, Y = make_multilabel_classification(n_samples=300, n_features=30, n_classes=6, random_state=14)
    for form, Xf in forms(X.astype(float)):
        bcd_row("multilabel seed 14", form, "default (eq. 11)", {}, Xf, Y, True)


def bcd_row(name, form, label, kw, X, Y, multilabel):
    """One row of bcd's table: the run with options kw against one at tol 1e-9 (F*)."""
    est = quiet(BCDClassifier(**kw).fit, X, Y)
    ref = quiet(BCDClassifier(**kw, tol=1e-9, max_iter=5000).fit, X, Y)
    F, v, vb = bcd_measures(est.model_, X, Y, multilabel)
    Fs, vs, _ = bcd_measures(ref.model_, X, Y, multilabel)
    info = est.model_.info
    print(
        f"| {name} | {form} | {label} | {info['converged']} | {info.get('outer_iterations')} | {F:.6g} "
        f"| {(F - Fs) / Fs:.1e} | {v:.1e} | {vb:.1e} | {vs:.1e} |"
    )


# -- ppdsparse -------------------------------------------------------------------------------


def ppd_weights(X, y, K, lam_scale=1e-3, standardized=False):
    """(lam_k (K,), per-column ℓ1 factor a_j, ℓ2 factor q_j) of the objective in stored units:
    Σ_j lam_k a_j |w_j| + (tau/2) Σ_j q_j w_j² + (tau/2) b² + mean ½ max(1 − y s, 0)², from the
    module docstring: lam_k = lam_scale·max(1, 2σ_k)·s̄/√n on the rows z = x/s (s_j the columns'
    std where standardized, else 1), σ_k = 2√(p_k(1 − p_k)), s̄ the mean row norm of z; the rows
    solved divided by c, the power of two that brings s̄/c into [1/16, 16]."""
    n = X.shape[0]
    s = column_std(X) if standardized else np.ones(X.shape[1])
    Z = (X.toarray() if sp.issparse(X) else X) / s
    mean_norm = np.linalg.norm(Z, axis=1).mean()
    c = 1.0
    if mean_norm > 16:
        while mean_norm / c > 16:
            c *= 2
    elif 0 < mean_norm < 1 / 16:
        while mean_norm / c < 1 / 16:
            c /= 2
    p = np.bincount(y, minlength=K) / n
    sigma = 2 * np.sqrt(p * (1 - p))
    lam = lam_scale * np.maximum(1.0, 2 * sigma) * mean_norm / np.sqrt(n)
    return lam, s, (c * s) ** 2


def ppd_measures(model, X, y, tau=1e-4):
    """Per class k: KKT violation of the elastic net / lam_k and the certified relative duality gap
    (P_k − D_k)/P_k, D_k(α) = (1/n) Σ (α_i − α_i²/2) − Σ_j soft(v_j, lam a_j)²/(2 tau q_j) − v_b²/(2 tau),
    v = (1/n) Σ_i α_i y_i x̂_i, at α_i = max(1 − y_i s_i, 0). Returns (max KKT, max gap, P_k (K,))."""
    W, b = coef(model)
    K = W.shape[1]
    lam, a, q = ppd_weights(X, y, K, standardized=model.info["standardized"])
    n = X.shape[0]
    kkts, gaps, primal = [], [], []
    for k in range(K):
        yk = np.where(y == k, 1.0, -1.0)
        w, bk = W[:, k], b[k]
        m = yk * (np.asarray(X @ w) + bk)
        alpha = np.maximum(1.0 - m, 0.0)
        v = np.asarray(X.T @ (alpha * yk)) / n
        vb = (alpha * yk).sum() / n
        P = lam[k] * (a * np.abs(w)).sum() + tau / 2 * ((q * w * w).sum() + bk * bk) + (alpha * alpha).sum() / (2 * n)
        soft = np.maximum(np.abs(v) - lam[k] * a, 0.0)
        D = (alpha - alpha * alpha / 2).sum() / n - (soft * soft / (2 * tau * q)).sum() - vb * vb / (2 * tau)
        g = -v + tau * q * w  # gradient of the smooth part
        viol = np.where(w != 0, np.abs(g + lam[k] * a * np.sign(w)), np.maximum(np.abs(g) - lam[k] * a, 0.0))
        kkts.append(max(viol.max(), abs(-vb + tau * bk)) / lam[k])
        gaps.append((P - D) / P)
        primal.append(P)
    return max(kkts), max(gaps), np.array(primal)


def check_ppdsparse(data):
    print("\n### ppdsparse\n")
    print(
        "| dataset | form | setting | converged | standardized | max KKT/lam_k | max (P−D)/P "
        "| max (P_k − P_k*)/P_k* | tol=1e-6 run: max (P−D)/P |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, (X, y) in data.items():
        for form, Xf in forms(X):
            ref = quiet(PPDSparseClassifier(tol=1e-6).fit, Xf, y)
            _, ref_gap, P_star = ppd_measures(ref.model_, Xf, y)
            for label, kw in [("default", {}), ("tol=1e-2", {"tol": 1e-2})]:
                est = quiet(PPDSparseClassifier(**kw).fit, Xf, y)
                k, gmax, P = ppd_measures(est.model_, Xf, y)
                info = est.model_.info
                print(
                    f"| {name} | {form} | {label} | {info['converged']} | {info['standardized']} "
                    f"| {k:.1e} | {gmax:.1e} | {((P - P_star) / P_star).max():.1e} | {ref_gap:.1e} |"
                )


# -- fbpd ------------------------------------------------------------------------------------


def cs_hinge_lp(X, y, lam, s):
    """min lam Σ_jk s_j |W_jk| + (1/n) Σ ξ_i, ξ_i ≥ 0, ξ_i ≥ 1 + s_ir − s_iy (r ≠ y), scores XW + b,
    by scipy's HiGHS. Variables [W⁺, W⁻ (d·K, index j·K + k), b (K), ξ (n)]."""
    X = X.toarray() if sp.issparse(X) else X
    n, d = X.shape
    K = int(y.max()) + 1
    nW = d * K
    r_idx, k_idx = np.nonzero(np.arange(K)[None, :] != y[:, None])  # the (i, r ≠ y_i) pairs
    m = len(r_idx)
    # W part: x_i (e_r − e_y), once for W⁺ and negated for W⁻
    rows = np.repeat(np.arange(m), 2 * d)
    cols = np.concatenate([np.r_[np.arange(d) * K + k, np.arange(d) * K + y[i]] for i, k in zip(r_idx, k_idx)])
    vals = np.concatenate([np.r_[X[i], -X[i]] for i in r_idx])
    A_w = sp.csr_matrix((vals, (rows, cols)), shape=(m, nW))
    A_b = sp.csr_matrix(
        (np.r_[np.ones(m), -np.ones(m)], (np.r_[np.arange(m), np.arange(m)], np.r_[k_idx, y[r_idx]])), shape=(m, K)
    )
    A_xi = sp.csr_matrix((-np.ones(m), (np.arange(m), r_idx)), shape=(m, n))
    A = sp.hstack([A_w, -A_w, A_b, A_xi]).tocsr()
    weight = np.repeat(s, K) * lam
    cost = np.r_[weight, weight, np.zeros(K), np.full(n, 1.0 / n)]
    bounds = [(0, None)] * (2 * nW) + [(None, None)] * K + [(0, None)] * n
    res = linprog(cost, A_ub=A, b_ub=-np.ones(m), bounds=bounds, method="highs")
    assert res.status == 0, res.message
    return res.fun


def cs_objective(model, X, y, lam, s):
    W, b = coef(model)
    S = np.asarray(X @ W) + b
    n = len(y)
    M = S - S[np.arange(n), y][:, None] + 1.0
    M[np.arange(n), y] = 0.0
    return lam * (s[:, None] * np.abs(W)).sum() + M.max(axis=1).mean()


def check_fbpd(data):
    print("\n### fbpd\n")
    print(
        "| dataset | form | setting | converged | iterations | standardized | logged (P − D)/P "
        "| logged ‖Σa‖ | (F − F*)/F (LP) | logged P / F |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    settings = [
        ("default", {}),
        ("max_iter=2000", {"max_iter": 2000}),
        ("preconditioning=True", {"preconditioning": True}),
        ("standardize=False", {"standardize": False}),
    ]
    for name, (X, y) in data.items():
        for form, Xf in forms(X):
            for label, kw in settings:
                est = quiet(FBPDClassifier(**kw).fit, Xf, y)
                info = est.model_.info
                s = column_std(Xf) if info["standardized"] else np.ones(X.shape[1])
                F = cs_objective(est.model_, Xf, y, info["lam"], s)
                Fs = cs_hinge_lp(Xf, y, info["lam"], s)
                last = est.history_[-1]
                print(
                    f"| {name} | {form} | {label} | {info['converged']} | {info['iterations']} | {info['standardized']} "
                    f"| {last['gap'] / last['objective']:.1e} | {last['dual_infeasibility']:.1e} | {(F - Fs) / F:.1e} "
                    f"| {last['objective'] / F:.6f} |"
                )


# -- stagewise -------------------------------------------------------------------------------


def rel_dist(A, B):
    return np.linalg.norm(A - B) / max(np.linalg.norm(B), 1e-300)


def softmax_objective(W, b, X, y, lam):
    """(1/n) Σ_i (log Σ_r e^{s_ir} − s_iy) + (λ/2)‖W‖²_F, s = XW + b."""
    S = np.asarray(X @ W) + b
    top = S.max(axis=1)
    lse = top + np.log(np.exp(S - top[:, None]).sum(axis=1))
    return (lse - S[np.arange(len(y)), y]).mean() + lam / 2 * (W * W).sum()


def stage_sums(model):
    """(W (d × k), b) summed over the stages of a stagewise model on stored columns (any link)."""
    W, b = np.zeros((model.n_features, len(model.classes_))), np.zeros(len(model.classes_))
    for block, Wt in zip(model.blocks, model.weights):
        W[block] += Wt[1:]
        b += Wt[0]
    return W, b


def check_stagewise(data):
    print("\n### stagewise\n")
    print("| dataset | form | setting | reference | ‖W − W*‖/‖W*‖ | ‖b − b*‖/‖b*‖ | (f − f_ref)/f_ref |")
    print("|---|---|---|---|---|---|---|")
    for seed, k in ((15, 1), (16, 3)):
        X, Y = make_regression(
            n_samples=400, n_features=25, n_informative=10, n_targets=k, noise=5.0, random_state=seed
        )
        X = X * np.random.default_rng(seed).uniform(0.1, 10, X.shape[1])
        for form, Xf in forms(X):
            est = quiet(StagewiseLSRegressor().fit, Xf, Y)
            lam = est.model_.info["lam"]
            ridge = Ridge(alpha=len(Y) * lam, solver="cholesky", tol=1e-12).fit(X, Y)
            W, b = coef(est.model_)
            print(
                f"| make_regression seed {seed}, {k} output(s) | {form} | default | Ridge(alpha = nλ) "
                f"| {rel_dist(W.T.reshape(ridge.coef_.shape), ridge.coef_):.1e} "
                f"| {rel_dist(b.reshape(np.shape(ridge.intercept_)), ridge.intercept_):.1e} | |"
            )
    X, Y = make_multilabel_classification(n_samples=300, n_features=30, n_classes=6, random_state=14)
    X = X.astype(float)
    for form, Xf in forms(X):
        est = quiet(StagewiseLSClassifier(generator="sequential").fit, Xf, Y)
        ridge = Ridge(alpha=len(Y) * est.model_.info["lam"], solver="cholesky").fit(X, Y)
        W, b = coef(est.model_)
        print(
            f"| multilabel seed 14 | {form} | generator=sequential (calibration auto: none) | Ridge on the 0/1 labels "
            f"| {rel_dist(W, ridge.coef_.T):.1e} | {rel_dist(b, ridge.intercept_):.1e} | |"
        )
    for name, (X, y) in data.items():
        if X.shape[1] > 512:
            continue
        K = int(y.max()) + 1
        Y = np.eye(K)[y]
        for form, Xf in forms(X):
            for label, kw in [
                ("generator=sequential, calibration=none", {"generator": "sequential", "calibrate": "none"}),
                ("… standardize=True", {"generator": "sequential", "calibrate": "none", "standardize": True}),
            ]:
                est = quiet(StagewiseLSClassifier(**kw).fit, Xf, y)
                info = est.model_.info
                s = column_std(X) if info["standardized"] else np.ones(X.shape[1])
                ridge = Ridge(alpha=len(y) * info["lam"], solver="cholesky").fit(X / s, Y)
                W, b = coef(est.model_)
                print(
                    f"| {name} | {form} | {label} (std {info['standardized']}) | Ridge on x/s "
                    f"| {rel_dist(W * s[:, None], ridge.coef_.T):.1e} | {rel_dist(b, ridge.intercept_):.1e} | |"
                )
            lam = 1e-3
            lr = quiet(LogisticRegression(C=1 / (len(y) * lam), tol=1e-12, max_iter=20000).fit, X, y)
            f_lr = softmax_objective(lr.coef_.T, lr.intercept_, X, y, lam)
            for label, kw in [
                ("softmax, sequential, lam 1e-3", {}),
                ("… tol=1e-12, max_iter=500", {"tol": 1e-12, "max_iter": 500}),
            ]:
                est = quiet(StagewiseLSClassifier(link="softmax", generator="sequential", lam=lam, **kw).fit, Xf, y)
                W, b = stage_sums(est.model_)
                f = softmax_objective(W, b, X, y, lam)
                W, b = W - W.mean(axis=1, keepdims=True), b - b.mean()
                print(
                    f"| {name} | {form} | {label} | LogisticRegression(C = 1/(nλ)) "
                    f"| {rel_dist(W, lr.coef_.T):.1e} | {rel_dist(b, lr.intercept_):.1e} | {(f - f_lr) / f_lr:.1e} |"
                )


# -- multiboost ------------------------------------------------------------------------------


def stump_outputs(model, X):
    """n × L outputs of the model's learners, from the BoostedStumpsModel docstring's formula."""
    X = X.toarray() if sp.issparse(X) else X
    above = X[:, model.features] > model.thresholds
    side = above == (model.polarity > 0)
    return model.signs * np.where(side, 1.0, model.lows.astype(float))


def class_weights(mu, y, K):
    """g_c[i] (n × K): Σ_{y≠c} μ_(i,y) on rows of class c, −μ_(i,c) on the others, so that a learner's
    edge for class c is Σ_i g_c[i] ħ(x_i) (the derivative of −p·(loss of (2)) along its weight)."""
    n = len(y)
    G = -mu.copy()
    G[np.arange(n), y] = mu.sum(axis=1)
    return G


def multiboost_measures(model, X, y, lam):
    """(F of (2)/C, restricted master: max |edge/(p·lam) − 1| over w_j > 0 and max (edge/(p·lam) − 1)₊
    over w_j = 0, the pool's largest (C/p)·edge − 1 over every sign stump at a threshold between two
    training values, F of the restricted master by L-BFGS-B)."""
    from scipy.optimize import minimize

    n, K = len(y), int(y.max()) + 1
    p = n * (K - 1)
    H = stump_outputs(model, X)[:, model.coord_learner]  # n × J, one column per coordinate
    onehot = np.eye(K)[model.coord_class]  # J × K

    def objective(w):
        S = H @ (w[:, None] * onehot)
        mu = np.exp(-(S[np.arange(n), y][:, None] - S))
        mu[np.arange(n), y] = 0.0
        edges = ((class_weights(mu, y, K) @ onehot.T) * H).sum(axis=0)
        return lam * w.sum() + mu.sum() / p, lam - edges / p, mu

    w = model.weights
    F, grad, mu = objective(w)
    ratio = (lam - grad) / lam  # (C/p)·edge
    on = w > 0
    master_on = np.abs(ratio[on] - 1).max() if on.any() else 0.0
    master_off = np.maximum(ratio[~on] - 1, 0).max() if (~on).any() else 0.0
    Xd = X.toarray() if sp.issparse(X) else X
    G = class_weights(mu, y, K)
    T = G.sum(axis=0)
    pool = 0.0
    for f in range(Xd.shape[1]):
        order = np.argsort(Xd[:, f], kind="stable")
        xs = Xd[order, f]
        cum = np.cumsum(G[order], axis=0)
        cut = np.nonzero(xs[1:] > xs[:-1])[0]  # thresholds between distinct values
        if len(cut):
            pool = max(pool, np.abs(T - 2 * cum[cut]).max())
    res = minimize(
        lambda v: objective(v)[:2],
        w,
        jac=True,
        method="L-BFGS-B",
        bounds=[(0, None)] * len(w),
        options={"maxiter": 20000, "ftol": 1e-15, "gtol": 1e-12},
    )
    return F, master_on, master_off, pool / (p * lam) - 1, res.fun


def integer_data():
    """{name: (X, y)} of features with few distinct values, so that n_bins = 256 bins hold every
    value and the pool of sign stumps is every threshold between two training values."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    Xg, yg = gen_dense()
    out = {
        "digits[1000:1500]": (X[1000:1500], y[1000:1500]),
        "gen-dense rounded": (np.clip(np.round(2 * Xg), -8, 8), yg),
    }
    if os.path.isdir(SHARED):
        out["pendigits[3000:3600]"] = shared("pendigits", "pendigits/pendigits.gz", 3000, 3600, 16)
    return out


def check_multiboost(_data):
    """On integer_data (features of few values), not the shared sets."""
    from streamfit import MultiBoostClassifier

    print("\n### multiboost\n")
    print(
        "| dataset | setting | converged | iterations | F | master: max |(C/p)edge − 1| on w>0 | (C/p)edge − 1 on w=0 "
        "| pool: max (C/p)edge − 1 | (F − F_LBFGSB)/F_LBFGSB |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    settings = [
        (
            "MultiBoostcw: tau_max=2, exact, sign, lam=1e-3",
            {"tau_max": 2, "update": "exact", "stumps": "sign", "lam": 1e-3, "max_iter": 300},
        ),
        ("… lam=1e-4", {"tau_max": 2, "update": "exact", "stumps": "sign", "lam": 1e-4, "max_iter": 300}),
    ]
    for name, (X, y) in integer_data().items():
        for label, kw in settings:
            est = quiet(MultiBoostClassifier(n_bins=256, **kw).fit, X, y)
            m = est.model_
            F, on, off, pool, Fl = multiboost_measures(m, X, y, kw["lam"])
            print(
                f"| {name} | {label} | {m.info.get('converged')} | {m.info.get('iterations')} | {F:.6g} | {on:.1e} "
                f"| {off:.1e} | {pool:.1e} | {(F - Fl) / Fl:.1e} |"
            )


# -- in process and on 2 Dask workers -----------------------------------------------------------


def check_workers(data):
    """bcd (chunks mode), fbpd and ppdsparse on a store of gen-dense (float32, chunks of 70 rows),
    in process and on 2 local Dask workers: the measures of the two models side by side."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, "tests", "solvers"))
    from fitting import fit_solver

    from streamfit.engine import Engine
    from streamfit.store import StoreWriter, open_store

    X, y = data["gen-dense"]
    X = X.astype(np.float32).astype(float)
    K = int(y.max()) + 1
    weights = {False: np.ones(X.shape[1]), True: column_std(X)}

    def bcd_measure(m):
        F, kkt, _ = bcd_measures(m, X, y, False)
        return f"F {F:.8g}, KKT/λ {kkt:.1e}"

    def fbpd_measure(m):
        return f"F {cs_objective(m, X, y, m.info['lam'], weights[m.info['standardized']]):.8g}"

    def ppd_measure(m):
        kkt, gap, _ = ppd_measures(m, X, y)
        return f"max KKT/lam_k {kkt:.1e}, max (P−D)/P {gap:.1e}"

    measures = {"bcd": ({"mode": "chunks"}, bcd_measure), "fbpd": ({}, fbpd_measure), "ppdsparse": ({}, ppd_measure)}
    print("\n### in process and on 2 workers (gen-dense, a store of float32 rows, chunks of 70)\n")
    print("| solver | in process | 2 workers | max |coef difference| |")
    print("|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp, Engine(mode="local", n_workers=2) as engine:
        w = StoreWriter(os.path.join(tmp, "store"), chunk_rows=70)
        w.write_rows(sp.csr_matrix(X, dtype=np.float32), y)
        w.close(n_features=X.shape[1], classes=list(range(K)))
        store = open_store(os.path.join(tmp, "store"))
        for solver, (params, measure) in measures.items():
            serial, _ = quiet(fit_solver, solver, store, os.path.join(tmp, solver + "-0"), **params)
            parallel, _ = quiet(fit_solver, solver, store, os.path.join(tmp, solver + "-2"), engine=engine, **params)
            diff = np.abs(coef(serial)[0] - coef(parallel)[0]).max()
            print(f"| {solver} {params} | {measure(serial)} | {measure(parallel)} | {diff:.1e} |")


CHECKS = {
    "bcd": check_bcd,
    "ppdsparse": check_ppdsparse,
    "fbpd": check_fbpd,
    "stagewise": check_stagewise,
    "multiboost": check_multiboost,
    "workers": check_workers,
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default=",".join(CHECKS), help="comma-separated: " + ", ".join(CHECKS))
    ap.add_argument("--no-shared", action="store_true", help="the generated sets only")
    args = ap.parse_args()
    data = datasets(not args.no_shared)
    t0 = time.time()
    for part in args.only.split(","):
        CHECKS[part](data)
        print(f"\n({part}: {time.time() - t0:.0f} s so far)")


if __name__ == "__main__":
    main()
