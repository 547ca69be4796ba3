"""The fbpd solver (Chierchia et al. 2015, Algorithms 1 and 2) against the linear-programming
form of the same problems solved by HiGHS, against a dense transcription of Algorithm 1, and
its out-of-core contract (workers, chunking, resume)."""

from __future__ import annotations

import functools
import json
import os
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from fitting import fit_solver
from pydantic import ValidationError
from scipy.optimize import linprog, minimize
from sklearn.datasets import load_iris, load_wine

import streamfit.solvers.fbpd as fb
from streamfit import FBPDClassifier
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import CheckpointError, ConfigError
from streamfit.estimators import ConvergenceWarning
from streamfit.objectives import objective_for
from streamfit.runlog import MetricsLog
from streamfit.solvers import get_solver
from streamfit.store import InMemoryStore, StoreWriter, open_store


def standardized(loader):
    X, y = loader(return_X_y=True)
    return (X - X.mean(axis=0)) / X.std(axis=0), y.astype(np.int32)


@pytest.fixture(scope="module")
def wine():
    return standardized(load_wine)


@pytest.fixture(scope="module")
def iris():
    return standardized(load_iris)


fit = functools.partial(fit_solver, "fbpd")  # (model, metrics log) of a run


def memory_source(X, y, chunk_rows=10_000):
    return InMemoryStore(sp.csr_matrix(X), y, [str(c) for c in range(y.max() + 1)], chunk_rows=chunk_rows)


def write_store(path, X, y, chunk_rows):
    w = StoreWriter(str(path), chunk_rows=chunk_rows)
    w.write_rows(sp.csr_matrix(X, dtype=np.float32), y)
    w.close(n_features=X.shape[1], classes=[str(c) for c in range(y.max() + 1)])
    return open_store(str(path))


def simplex(v, a):
    """Projection onto {u >= 0, Σu = a}, sort-based (Held et al. 1974)."""
    u = np.sort(v)[::-1]
    css = np.cumsum(u) - a
    j = np.flatnonzero(u - css / np.arange(1, len(v) + 1) > 0)[-1]
    return np.maximum(v - css[j] / (j + 1), 0.0)


def hinge_lp(X, z, *, lam=None, eta=None, linf_groups=None):
    """min lam·g(W) + (1/n)Σξ  or  min g(W) s.t. (1/n)Σξ <= eta, with ξ_ℓ >= 0,
    ξ_ℓ >= 1 + s_ℓk − s_ℓz (k ≠ z), s = XW + b; g = ‖W‖₁, or with linf_groups = G the
    ℓ1,∞ norm Σ_{k,b} max_{j∈b} |W_jk| through one bound t_kb >= |W_jk| per block.
    Variables [W⁺, W⁻ (M·K each, index j·K + k), b (K, free), ξ (n), t]. Returns the optimum."""
    n, M = X.shape
    K = z.max() + 1
    nW = M * K
    n_blocks = -(-M // linf_groups) * K if linf_groups else 0
    nv = 2 * nW + K + n + n_blocks
    rows, cols, vals, rhs = [], [], [], []
    r = 0
    for ell in range(n):  # one constraint per (ℓ, k ≠ z_ℓ)
        for k in range(K):
            if k == z[ell]:
                continue
            j = np.arange(M)
            for sign, offset in ((1.0, 0), (-1.0, nW)):
                rows += [r] * (2 * M)
                cols += list(offset + j * K + k) + list(offset + j * K + z[ell])
                vals += list(sign * X[ell]) + list(-sign * X[ell])
            rows += [r] * 3
            cols += [2 * nW + k, 2 * nW + z[ell], 2 * nW + K + ell]
            vals += [1.0, -1.0, -1.0]
            rhs.append(-1.0)
            r += 1
    c = np.zeros(nv)
    if linf_groups:
        G = linf_groups
        blocks = -(-M // G)
        for k in range(K):
            for blk in range(blocks):
                for j in range(blk * G, min((blk + 1) * G, M)):  # W⁺ + W⁻ <= t
                    rows += [r] * 3
                    cols += [j * K + k, nW + j * K + k, 2 * nW + K + n + k * blocks + blk]
                    vals += [1.0, 1.0, -1.0]
                    rhs.append(0.0)
                    r += 1
        c[2 * nW + K + n :] = 1.0
    else:
        c[: 2 * nW] = 1.0
    if eta is None:
        c *= lam
        c[2 * nW + K : 2 * nW + K + n] = 1.0 / n
    else:
        rows += [r] * n
        cols += list(range(2 * nW + K, 2 * nW + K + n))
        vals += [1.0 / n] * n
        rhs.append(eta)
        r += 1
    A = sp.csr_matrix((vals, (rows, cols)), shape=(r, nv))
    bounds = [(0, None)] * (2 * nW) + [(None, None)] * K + [(0, None)] * (n + n_blocks)
    res = linprog(c, A_ub=A, b_ub=np.array(rhs), bounds=bounds, method="highs")
    assert res.status == 0, res.message
    return res.fun


def regularized_objective(X, z, model, lam, penalty="l1"):
    """F of problem (7) at a fitted model (lam·g(W) + mean Crammer–Singer hinge)."""
    W = model.coef_.toarray() if sp.issparse(model.coef_) else np.asarray(model.coef_)
    params = fb.FBPDParams(penalty=penalty, lam=lam)
    return objective_for("fbpd", params).value(W.T, model.intercept_, X, z)


def hinge_qp(X, z, lam):
    """(W, b) minimising (lam/2)‖W‖² + (1/n)Σξ s.t. ξ_ℓ >= 0, ξ_ℓ >= 1 + s_ℓk − s_ℓz (k ≠ z_ℓ),
    s = XW + b: problem (7) with g = ½‖·‖² as a quadratic program, solved by SLSQP.
    Variables [W (K·M, row k at k·M), b (K), ξ (n)]."""
    n, M = X.shape
    K = z.max() + 1
    nv = K * M + K + n
    A = np.zeros((n * (K - 1), nv))  # rows: s_ℓk − s_ℓz − ξ_ℓ <= −1
    r = 0
    for ell in range(n):
        for k in range(K):
            if k == z[ell]:
                continue
            A[r, k * M : (k + 1) * M] += X[ell]
            A[r, z[ell] * M : (z[ell] + 1) * M] -= X[ell]
            A[r, [K * M + k, K * M + z[ell], K * M + K + ell]] = 1.0, -1.0, -1.0
            r += 1
    weight = np.r_[np.full(K * M, lam), np.zeros(K + n)]
    slack_cost = np.r_[np.zeros(K * M + K), np.full(n, 1.0 / n)]
    res = minimize(
        lambda v: 0.5 * (weight * v) @ v + slack_cost @ v,
        np.r_[np.zeros(K * M + K), np.full(n, 2.0)],
        jac=lambda v: weight * v + slack_cost,
        method="SLSQP",
        constraints=[{"type": "ineq", "fun": lambda v: -1.0 - A @ v, "jac": lambda v: -A}],
        bounds=[(None, None)] * (K * M + K) + [(0, None)] * n,
        options={"ftol": 1e-14, "maxiter": 1000},
    )
    assert res.success, res.message
    return res.x[: K * M].reshape(K, M), res.x[K * M : K * M + K]


def test_registered_and_params():
    assert get_solver("fbpd") is fb.FBPDSolver
    with pytest.raises(ValidationError):
        fb.FBPDParams(penalty="l0")
    with pytest.raises(ValidationError):
        fb.FBPDParams(group_sz=3)
    with pytest.raises(ValidationError):
        fb.FBPDParams(eta=0)


def test_multilabel_refused():
    X = sp.csr_matrix(np.eye(4))
    Y = sp.csr_matrix(np.array([[1, 0], [0, 1], [1, 1], [0, 1]], dtype=np.float32))
    with pytest.raises(ConfigError):
        fit(InMemoryStore(X, Y, ["a", "b"]), max_iter=2)


def separable_topics(n=90, seed=0):
    """Short documents of three topics, each of six words from its own three and three from five
    shared ones (log counts, unit rows): dense enough that fbpd centers them, and separable."""
    rng = np.random.default_rng(seed)
    z = np.arange(n) % 3
    counts = np.zeros((n, 14))
    for i, k in enumerate(z):
        np.add.at(counts[i], 3 * k + rng.integers(0, 3, 6), 1)
        np.add.at(counts[i], 9 + rng.integers(0, 5, 3), 1)
    X = np.log1p(counts)
    return X / np.linalg.norm(X, axis=1, keepdims=True), z.astype(np.int32)


@pytest.mark.parametrize("params", [{}, {"preconditioning": False, "lam": 1e-3}])
def test_a_class_without_rows_is_refused(params):
    """A class that `ingest --classes` declared but no training row holds leaves its offset
    unbounded; fbpd trained such a store to W = 0 and one class for every row, reporting
    converged (accuracy 1/3 where the same rows without the class give 1.0): refused instead,
    naming the class, whether the label-sums pass runs (the defaults) or not."""
    X, z = separable_topics()
    three = InMemoryStore(sp.csr_matrix(X), z, ["a", "b", "c"])
    model, _ = fit(three, **params)
    assert (model.predict(sp.csr_matrix(X)) == np.array(["a", "b", "c"])[z]).mean() == 1.0
    with pytest.raises(ConfigError, match="'spare' have no training rows"):
        fit(InMemoryStore(sp.csr_matrix(X), z, ["a", "b", "c", "spare"]), **params)


@pytest.mark.parametrize("preconditioning", [False, True])
def test_matches_dense_transcription_of_algorithm_1(wine, preconditioning):
    """The chunked solver equals Algorithm 1 written with an explicit T ∈ ℝ^{nK×(M+1)K},
    y ∈ (S_{1/n})^n and a sort-based simplex projection: with τσ‖T‖² = 1/1.01² (‖T‖ from
    numpy's SVD, the solver's from Lanczos), or preconditioned, with Pock and Chambolle's
    diagonal steps τ_i = ρ/(1.01 Σ_r |T_ri|) and σ_r = 1/(1.01ρ Σ_i |T_ri|) (α = 1) from the dense T."""
    X, z = wine
    n, M = X.shape
    K, lam, iters, rho = 3, 0.02, 60, 5.0 if not preconditioning else 50.0
    model, _ = fit(
        memory_source(X, z, chunk_rows=50),
        lam=lam,
        max_iter=iters,
        tol=0.0,
        gap_tol=0.0,
        step_ratio=rho,
        restarts=False,
        preconditioning=preconditioning,
    )
    phi = np.hstack([X, np.ones((n, 1))])
    T = np.zeros((n * K, (M + 1) * K))
    for ell in range(n):
        for k in range(K):
            T[ell * K + k, k * (M + 1) : (k + 1) * (M + 1)] += phi[ell]
            T[ell * K + k, z[ell] * (M + 1) : (z[ell] + 1) * (M + 1)] -= phi[ell]
    r = np.ones(n * K)
    r[np.arange(n) * K + z] = 0.0
    if preconditioning:
        tau = rho / (fb.NORM_SAFETY * np.abs(T).sum(axis=0))
        rows = np.abs(T).sum(axis=1).reshape(n, K).max(axis=1)  # row (ℓ, z_ℓ) is 0: the block's scale
        sigma = np.repeat(1.0 / (fb.NORM_SAFETY * rho * rows), K)
    else:
        L = fb.NORM_SAFETY * np.linalg.norm(T, 2)
        tau, sigma = rho / L, 1.0 / (rho * L)
    penalized = np.ones((M + 1) * K, bool)
    penalized[np.arange(K) * (M + 1) + M] = False

    x = np.zeros((M + 1) * K)
    y = np.zeros(n * K)
    y[np.arange(n) * K + z] = 1.0 / n
    for _ in range(iters):
        v = x - tau * (T.T @ y)
        x_new = v.copy()
        threshold = (tau * lam * np.ones_like(x))[penalized]
        x_new[penalized] = np.sign(v[penalized]) * np.maximum(np.abs(v[penalized]) - threshold, 0.0)
        w = y + sigma * (T @ (2 * x_new - x) + r)
        y = np.concatenate([simplex(w[ell * K : (ell + 1) * K], 1.0 / n) for ell in range(n)])
        x = x_new
    x = x.reshape(K, M + 1)
    if preconditioning:  # the same iteration up to rounding
        atol = 1e-9 * np.abs(x).max()
        assert model.info["norm_T"] == 1.0
    else:  # the Lanczos estimate of ‖T‖ is within its tolerance of the exact norm
        atol = 2e-3 * np.abs(x).max()
        assert abs(model.info["norm_T"] / np.linalg.norm(T, 2) - 1) < 1e-3
    np.testing.assert_allclose(model.coef_.toarray(), x[:, :M], atol=atol)
    np.testing.assert_allclose(model.intercept_, x[:, M], atol=atol)


def test_fused_kernels_match_numpy():
    """The fused pass kernels against a plain numpy transcription: the chunk step (scores at
    [x⁺ x] from the CSR rows, simplex step, adjoint, the residual's dual parts; columns spread
    over a wider numbering and renumbered by `_renumbered`: bitwise the same) and the driver's
    sweeps (ℓ1 prox with [x⁺ x], the Halpern update, its logged norms and x̃'s non-zeros, on
    every row and on the compact used rows)."""
    from streamfit.solvers.fbpd_kernels import l1_primal_step, pairwise_sum, primal_update, regularized_chunk_step

    rng = np.random.default_rng(3)
    n, M, K = 40, 25, 4
    X = sp.random(n, M, density=0.3, format="csr", random_state=3, dtype=np.float32)
    z = rng.integers(0, K, n).astype(np.int32)
    Y = np.vstack([simplex(row, 1.0) for row in rng.standard_normal((n, K))])
    W2, b2, step = rng.standard_normal((M, 2 * K)), rng.standard_normal(2 * K), 0.7
    GW, Gb = np.zeros((M, K)), np.zeros(K)
    Yt, hinge, r_dot, correct, move, coupling, weights = regularized_chunk_step(
        X.indptr, X.indices, X.data, z, Y, W2, b2, step, GW, Gb, False
    )
    spread = np.sort(rng.choice(10 * M, M, replace=False))  # column j of X is column spread[j] of Xs
    Xs = sp.csr_matrix((X.data, spread[X.indices].astype(np.int32), X.indptr), shape=(n, 10 * M))
    position = np.zeros(10 * M, np.int32)
    position[spread] = np.arange(M, dtype=np.int32)
    GWs, Gbs = np.zeros((M, K)), np.zeros(K)
    Xr = fb._renumbered(Xs, position, M)
    renumbered = regularized_chunk_step(Xr.indptr, Xr.indices, Xr.data, z, Y, W2, b2, step, GWs, Gbs, False)
    assert renumbered[0].tobytes() == Yt.tobytes() and renumbered[1:6] == (hinge, r_dot, correct, move, coupling)
    assert GWs.tobytes() == GW.tobytes() and Gbs.tobytes() == Gb.tobytes()
    S = np.asarray(X.astype(np.float64) @ W2) + b2
    rows = np.arange(n)
    new, old = S[:, :K] - S[rows, z][:, None], S[:, K:] - S[rows, K + z][:, None]
    r = np.ones((n, K))
    r[rows, z] = 0.0
    ref = np.vstack([simplex(w, 1.0) for w in Y + step * (2 * new - old + r)])
    np.testing.assert_allclose(Yt, ref, atol=1e-12)
    A = ref.copy()
    A[rows, z] -= ref.sum(axis=1)
    np.testing.assert_allclose(GW, X.T @ A, atol=1e-10)
    np.testing.assert_allclose(Gb, A.sum(axis=0), atol=1e-12)
    assert hinge == pytest.approx((new + r).max(axis=1).sum(), rel=1e-12)
    assert r_dot == pytest.approx((ref * r).sum(), rel=1e-12)
    assert correct == int((S[:, :K].argmax(axis=1) == z).sum())
    assert move == pytest.approx(((Y - ref) ** 2).sum(), rel=1e-12)
    assert coupling == pytest.approx(((Y - ref) * (old - new)).sum(), rel=1e-10)

    W, G, tau, weight = rng.standard_normal((M, K)), rng.standard_normal((M, K)), 0.3, 0.2
    Wt = np.zeros((M, K))
    W2 = l1_primal_step(W, G, np.ones((M, K)), tau, weight / tau, Wt, np.empty((M, 2 * K)))
    V = W - tau * G
    np.testing.assert_array_equal(Wt, np.sign(V) * np.maximum(np.abs(V) - weight, 0.0))
    np.testing.assert_array_equal(W2, np.hstack([Wt, W]))
    Wa, Ga, Wp, Gsum = (rng.standard_normal((M, K)) for _ in range(4))
    a, c = 0.75, 0.25
    positions, values = np.empty(M * K, np.int64), np.empty(M * K)
    for halpern in (True, False):
        Gt, Wn, Gn = np.zeros((M, K)), W.copy(), G.copy()  # W, G: updated in place
        stats = primal_update(
            Wt, Wn, Wa, Gsum, 4.0, Gn, Ga, Wp, np.ones((M, K)), a, c, halpern, Gt, np.arange(M), positions, values
        )
        nnz = int(stats[5])
        np.testing.assert_array_equal(positions[:nnz], np.flatnonzero(Wt))
        np.testing.assert_array_equal(values[:nnz], np.abs(Wt.ravel()[positions[:nnz]]))
        np.testing.assert_allclose(Gt, Gsum / 4.0, rtol=1e-15)
        np.testing.assert_allclose(Wn, a * (2 * Wt - W) + c * Wa if halpern else W, rtol=1e-13)
        np.testing.assert_allclose(Gn, a * (2 * Gt - G) + c * Ga if halpern else G, rtol=1e-13)
        np.testing.assert_allclose(
            stats,
            [
                ((W - Wt) ** 2).sum(),
                ((Wt - Wp) ** 2).sum(),
                (Wt**2).sum(),
                ((Gt - G) ** 2).sum(),
                (Gt**2).sum(),
                np.count_nonzero(Wt),
                np.abs(Gt).max(),
            ],
            rtol=1e-12,
        )
    # on the compact rows `used` of arrays that are 0 elsewhere, bitwise the sweep over every row
    rows, used = np.arange(M), np.array([2, 3, 11, 24])
    others = ~np.isin(rows, used)
    Wt, W, Wa, Gsum, G, Ga, Wp = (np.where(others[:, None], 0.0, A) for A in (Wt, W, Wa, Gsum, G, Ga, Wp))
    every_Wt, only_Wt, ones = np.zeros((M, K)), np.zeros((len(used), K)), np.ones((len(used), K))
    W2 = l1_primal_step(W, G, np.ones((M, K)), tau, weight / tau, every_Wt, np.empty((M, 2 * K)))
    W2_used = l1_primal_step(W[used], G[used], ones, tau, weight / tau, only_Wt, np.empty((len(used), 2 * K)))
    assert W2[used].tobytes() == W2_used.tobytes()
    assert every_Wt[used].tobytes() == only_Wt.tobytes() and not every_Wt[others].any()
    for halpern in (True, False):
        every = [np.zeros((M, K)), W.copy(), G.copy()]  # Gt, W, G
        only = [np.zeros((len(used), K)), W[used], G[used]]
        every_nz, only_nz = (np.empty(M * K, np.int64), np.empty(M * K)), (np.empty(M * K, np.int64), np.empty(M * K))
        every.append(
            primal_update(
                Wt, every[1], Wa, Gsum, 4.0, every[2], Ga, Wp, np.ones((M, K)), a, c, halpern, every[0], rows, *every_nz
            )
        )
        only.append(
            primal_update(
                Wt[used],
                only[1],
                Wa[used],
                Gsum[used],
                4.0,
                only[2],
                Ga[used],
                Wp[used],
                ones,
                a,
                c,
                halpern,
                only[0],
                used,
                *only_nz,
            )
        )
        assert [x[used].tobytes() for x in every[:3]] + [every[3].tobytes()] == [x.tobytes() for x in only]
        assert not any(x[others].any() for x in every[:3])
        nnz = int(only[3][5])
        assert [x[:nnz].tobytes() for x in every_nz] == [x[:nnz].tobytes() for x in only_nz]
        assert pairwise_sum(*only_nz, M * K, nnz) == float(np.abs(Wt).sum())


def fused_chunk_step(indptr, indices, data, z, Y, W2, b2, step, preconditioned):
    """regularized_chunk_step as one loop over the rows, every row's adjoint added whatever its
    a_ℓ, every entry of W2 read (the kernel of session 28), transcribed in Python floats: the
    same operations in the same order, so its results are bitwise the kernel's."""
    from streamfit.projections import simplex_threshold

    n, K = Y.shape
    Yt, GW, Gb, weights = np.zeros((n, K)), np.zeros((W2.shape[0], K)), np.zeros(K), np.ones(n)
    hinge = r_dot = move = coupling = 0.0
    correct = 0
    for i in range(n):
        s, l1 = [0.0] * (2 * K), 0.0
        for p in range(indptr[i], indptr[i + 1]):
            j, v = indices[p], float(data[p])
            l1 += abs(v)
            for k in range(2 * K):
                s[k] += v * float(W2[j, k])
        s = [s[k] + float(b2[k]) for k in range(2 * K)]
        row_step = step
        if preconditioned:
            weights[i] = 2.0 * (l1 + 1.0)
            row_step = step / float(weights[i])
        zi = int(z[i])
        m_new = [s[k] - s[zi] for k in range(K)]
        r = [0.0 if k == zi else 1.0 for k in range(K)]
        hinge += max([0.0] + [m_new[k] + r[k] for k in range(K)])
        correct += int(np.argmax(s[:K]) == zi)
        w = np.array([float(Y[i, k]) + row_step * (2.0 * m_new[k] - (s[K + k] - s[K + zi]) + r[k]) for k in range(K)])
        tau = simplex_threshold(w, 1.0, np.empty(K, np.int64), np.empty(K, np.int64))
        total = 0.0
        for k in range(K):
            y = max(float(w[k]) - tau, 0.0)
            Yt[i, k] = y
            total += y
            r_dot += y * r[k]
            d = float(Y[i, k]) - y
            move += float(weights[i]) * (d * d)
            coupling += d * ((s[K + k] - s[K + zi]) - m_new[k])
        a = [float(Yt[i, k]) for k in range(K)]
        a[zi] -= total
        for k in range(K):
            Gb[k] += a[k]
        for p in range(indptr[i], indptr[i + 1]):
            j, v = indices[p], float(data[p])
            for k in range(K):
                GW[j, k] += v * a[k]
    return Yt, hinge, r_dot, correct, move, coupling, weights, GW, Gb


@pytest.mark.parametrize("preconditioned", [False, True])
def test_chunk_step_is_the_fused_loop_bitwise(preconditioned):
    """regularized_chunk_step, whose adjoint loop leaves out the rows with a_ℓ = 0 and whose
    loops prefetch the rows of W2 and GW, against the single loop that adds every row
    (`fused_chunk_step`), bitwise: rows longer and shorter than PREFETCH_AHEAD, empty rows, W2
    with zero rows and zero entries as x̃ and x have them on text, and a chunk where about half
    the rows have Ỹ_ℓ = e_{z_ℓ} (a_ℓ = 0) and the others not."""
    from streamfit.solvers.fbpd_kernels import PREFETCH_AHEAD, regularized_chunk_step

    rng = np.random.default_rng(30)
    n, U, K = 120, 300, 6
    z = rng.integers(0, K, n).astype(np.int32)
    lengths = rng.choice([0, 1, 3, PREFETCH_AHEAD - 1, PREFETCH_AHEAD, 3 * PREFETCH_AHEAD], n)
    # the even rows also hold column U - K + z_ℓ, whose row of W2 scores class z_ℓ 10 higher
    columns = [
        np.sort(rng.choice(U - K, m, replace=False)).tolist() + ([U - K + z[i]] if i % 2 == 0 else [])
        for i, m in enumerate(lengths)
    ]
    indptr = np.concatenate([[0], np.cumsum([len(c) for c in columns])]).astype(np.int64)
    indices = np.concatenate(columns).astype(np.int32)
    data = rng.random(len(indices)).astype(np.float32) + np.float32(0.5)
    W2 = rng.standard_normal((U, 2 * K)) * (rng.random((U, 2 * K)) < 0.2) * (rng.random((U, 1)) < 0.5)
    W2[U - K :] = 10 * np.hstack([np.eye(K), np.eye(K)])
    b2 = rng.standard_normal(2 * K)
    Y = np.vstack([simplex(row, 1.0) for row in rng.standard_normal((n, K))])
    Y[::2] = np.eye(K)[z[::2]]  # a vertex of the simplex, z_ℓ's margin ≥ 1: the step stays there
    step = 0.05
    GW, Gb = np.zeros((U, K)), np.zeros(K)
    Yt, hinge, r_dot, correct, move, coupling, weights = regularized_chunk_step(
        indptr, indices, data, z, Y, W2, b2, step, GW, Gb, preconditioned
    )
    expected = fused_chunk_step(indptr, indices, data, z, Y, W2, b2, step, preconditioned)
    inactive = (Yt == np.eye(K)[z]).all(axis=1)
    assert 0.3 * n < inactive.sum() < 0.7 * n  # both kinds of rows
    assert Yt.tobytes() == expected[0].tobytes()
    assert (hinge, r_dot, correct, move, coupling) == expected[1:6]
    assert weights.tobytes() == expected[6].tobytes()
    assert GW.tobytes() == expected[7].tobytes() and Gb.tobytes() == expected[8].tobytes()
    assert not np.signbit(GW[GW == 0.0]).any()  # no −0.0 (the reason leaving rows out is exact)


def test_sums_from_the_rows_are_numpys():
    """pairwise_sum (of ‖x̃‖₁'s non-zeros) and scaled_move, from the non-zero entries of the
    compact rows, are bitwise numpy's sums over the whole M × K arrays (its pairwise grouping depends on the length, not on the zeros):
    lengths below one block of 128 to many, rows dense and sparse, D with zeros."""
    from streamfit.solvers.fbpd_kernels import pairwise_sum, scaled_move

    rng = np.random.default_rng(4)
    for M, K, share in [(3, 2, 1.0), (50, 3, 0.5), (997, 7, 0.1), (20_000, 19, 0.12), (40_000, 8, 1.0)]:
        rows = np.flatnonzero(rng.random(M) < share)
        W, Wa = np.zeros((M, K)), np.zeros((M, K))
        W[rows] = rng.standard_normal((len(rows), K)) * (rng.random((len(rows), K)) < 0.3)
        Wa[rows] = rng.standard_normal((len(rows), K)) * (rng.random((len(rows), K)) < 0.5)
        D = np.where(rng.random((M, K)) < 0.1, 0.0, rng.random((M, K)))
        d = W - Wa
        places = np.flatnonzero(W)
        assert pairwise_sum(places, np.abs(W.ravel()[places]), W.size, len(places)) == float(np.abs(W).sum())
        expected = float((d * np.divide(d, D, out=np.zeros_like(d), where=D > 0)).sum())
        assert scaled_move(W[rows], Wa[rows], D[rows], rows, M) == expected


def test_l1_regularized_matches_linprog(wine):
    X, z = wine
    lam = 0.1
    optimum = hinge_lp(X, z, lam=lam)
    model, log = fit(memory_source(X, z, chunk_rows=64), lam=lam, penalty="l1", max_iter=4000, tol=1e-7, gap_tol=0.0)
    objective = regularized_objective(X, z, model, lam)
    assert abs(objective - optimum) <= 1e-4 * optimum
    last = log.records[-1]
    assert last["objective"] == pytest.approx(objective, rel=1e-12)
    # the duality gap of (7)/(11) closes and the offsets' dual constraint is (nearly) met
    assert abs(last["gap"]) < 1e-3 * optimum
    assert last["dual_infeasibility"] < 1e-3
    assert last["dual_objective"] <= optimum * (1 + 1e-4)


def test_restarts_reach_the_lp_optimum_in_fewer_iterations(wine):
    """Restarted Halpern FBPD (the default) against the plain iteration on the same problem
    and the same number of passes: it reaches HiGHS' optimum to 1e-5 with its duality gap
    closed, while the plain iteration is still off by more than 1e-5."""
    X, z = wine
    lam, iters = 0.1, 2000
    optimum = hinge_lp(X, z, lam=lam)
    source = memory_source(X, z, chunk_rows=64)
    scalar = {"tol": 0.0, "gap_tol": 0.0, "preconditioning": False}  # dense standardized data: one step
    fast, fast_log = fit(source, lam=lam, max_iter=iters, **scalar)
    plain, _ = fit(source, lam=lam, max_iter=iters, restarts=False, **scalar)

    def error(model):
        return abs(regularized_objective(X, z, model, lam) - optimum) / optimum

    assert fast.info["restarts"] >= 5 and plain.info["restarts"] == 0
    assert error(fast) < 1e-5 < error(plain)
    last = fast_log.records[-1]
    assert 0 <= last["gap"] < 1e-3 * optimum and last["dual_infeasibility"] < 1e-4
    # the logged fixed-point residual ‖z − F(z)‖_P has fallen by orders of magnitude
    assert last["residual"] < 1e-3 * fast_log.records[0]["residual"]


def text_like(n=90, M=60, K=3, seed=0):
    """Sparse non-negative rows of unit norm whose feature j appears in about 1/(2j) of them
    (Zipf-like, as words), slightly more often in its topic's class."""
    rng = np.random.default_rng(seed)
    z = np.arange(n) % K
    X = (rng.random((n, M)) < 0.5 / np.arange(1, M + 1)) * rng.random((n, M))
    X *= np.where(rng.integers(0, K, M)[None, :] == z[:, None], 2.0, 1.0)
    return X / np.maximum(np.linalg.norm(X, axis=1, keepdims=True), 1e-12), z.astype(np.int32)


def test_preconditioning_reaches_the_lp_optimum_on_sparse_rows():
    """Diagonal steps (the default) on sparse rows with Zipf-like feature frequencies: the run
    stops on its duality-gap rule (gap_tol 1e-3) within 1e-3 of HiGHS' optimum (5e-4 measured,
    after 378 passes), while one scalar step from ‖T‖ is more than 5 times further after the
    same passes (7e-3 measured)."""
    X, z = text_like()
    lam = 0.01
    optimum = hinge_lp(X, z, lam=lam)
    source = memory_source(X, z, chunk_rows=40)
    diagonal, log = fit(source, lam=lam, max_iter=1500, tol=0.0)  # default gap_tol 1e-3

    def error(model):
        return abs(regularized_objective(X, z, model, lam) - optimum) / optimum

    assert diagonal.info["converged"] and diagonal.info["preconditioned"]
    assert diagonal.info["iterations"] < 1500 and error(diagonal) < 1e-3
    assert 0 <= log.records[-1]["gap"] < 1e-3 * log.records[-1]["objective"]
    scalar, _ = fit(source, lam=lam, max_iter=diagonal.info["iterations"], tol=0.0, gap_tol=0.0, preconditioning=False)
    assert not scalar.info["preconditioned"] and error(scalar) > 5 * error(diagonal)


@pytest.mark.parametrize(
    "params",
    [
        {"max_iter": 40},  # l1, lam from λ_ref, diagonal steps
        {"lam": 0.01, "preconditioning": False, "max_iter": 40},  # l1, one step from ‖T‖
        {"penalty": "l2", "lam": 0.01, "max_iter": 40, "restarts": False},
        {"penalty": "l1/l2", "group_size": 4, "lam": 0.01, "max_iter": 40},
        {"formulation": "constrained", "penalty": "l1/linf", "group_size": 4, "eta": 0.5, "max_iter": 40},
    ],
)
def test_unused_columns_skipped_bitwise(monkeypatch, params):
    """Text-like rows whose 40 used columns are spread over 400: the run that updates only the
    used columns (whole blocks of the mixed norms) gives bitwise the model and the log of the
    same run updating all 400 rows of W, the sweep over every row; the columns counted in the
    label sums' pass when init makes it, else in a pass of their own."""
    X_used, z = text_like(n=90, M=40, seed=5)
    M = 400
    X = np.zeros((len(z), M))
    X[:, np.random.default_rng(5).choice(M, 40, replace=False)] = X_used
    source = memory_source(X, z, chunk_rows=32)
    used_rows, counts, from_sums = fb.FBPDSolver.used_rows, [], []

    def counted(self, ctx, mu, sums):
        rows = used_rows(self, ctx, mu, sums)
        counts.append(len(rows))
        from_sums.append(sums is not None)  # the column counts of the label sums' pass, not one of their own
        return rows

    def every_row(self, ctx, mu, sums):
        return np.arange(M, dtype=np.int64)

    monkeypatch.setattr(fb.FBPDSolver, "used_rows", counted)
    model, log = fit(source, **params)
    used = np.flatnonzero(X.any(axis=0))  # 35 of the 40: some never occur in 90 rows
    if "group_size" in params:  # every column of a block with a used column
        used = np.flatnonzero(np.isin(np.arange(M) // 4, used // 4))
    assert counts[0] == len(used) < M / 2
    assert from_sums[0] == (params.get("preconditioning") is not False)
    monkeypatch.setattr(fb.FBPDSolver, "used_rows", every_row)
    reference, reference_log = fit(source, **params)
    for name, array in reference._arrays().items():
        assert np.ascontiguousarray(model._arrays()[name]).tobytes() == np.ascontiguousarray(array).tobytes(), name
    assert model.info == reference.info
    if params.get("penalty", "l1") == "l1" and "formulation" not in params:  # the logged (7): numpy's ‖x̃‖₁
        x = np.ascontiguousarray(model.coef_.toarray().T)
        assert log.records[-1]["objective"] == log.records[-1]["loss"] + model.info["lam"] * float(np.abs(x).sum())
    assert [{k: v for k, v in r.items() if k != "wall_time"} for r in log.records] == [
        {k: v for k, v in r.items() if k != "wall_time"} for r in reference_log.records
    ]


def test_auto_centers_dense_columns_and_reaches_the_lp_optimum():
    """preconditioning=auto on dense uncentered columns (raw iris, all positive, as pendigits'
    0..100): the columns are centered (the offsets absorb μᵀW, so the problem is unchanged) and
    one scalar step is taken. The model it returns, in the stored features' terms, reaches
    HiGHS' optimum of (7) to 1e-4 (1.5e-5 measured after 3000 passes), and after 400 passes it
    is more than 5 times closer to it than the diagonal steps (2.1e-2 against 2.2e-1 measured);
    sparse rows keep the diagonal steps, uncentered."""
    X, y = load_iris(return_X_y=True)
    z, lam = y.astype(np.int32), 0.01
    optimum = hinge_lp(X, z, lam=lam)
    source = memory_source(X, z, chunk_rows=64)

    def error(model):
        return abs(regularized_objective(X, z, model, lam) - optimum) / optimum

    budget = {"lam": lam, "tol": 0.0, "gap_tol": 0.0, "standardize": False}  # g on the columns as given
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        auto, _ = fit(source, max_iter=400, **budget)
        diagonal, _ = fit(source, max_iter=400, preconditioning=True, **budget)
        long, _ = fit(source, max_iter=3000, **budget)
    assert auto.info["centered"] and not auto.info["preconditioned"]
    assert diagonal.info["preconditioned"] and not diagonal.info["centered"]
    assert 5 * error(auto) < error(diagonal)
    assert error(long) < 1e-4
    X_text, z_text = text_like()
    sparse, _ = fit(memory_source(X_text, z_text), lam=lam, max_iter=5)
    assert sparse.info["preconditioned"] and not sparse.info["centered"]


def test_dense_columns_are_standardized_scale_invariant_and_reach_the_lp_optimum():
    """preconditioning=auto with standardize (the defaults) on dense columns of very different
    scales (raw iris, each column times another power of ten, as unscaled wine's 0.1 … 1680):
    the columns are centered and divided by their standard deviations s_j, so g weighs W_jk by
    s_j and λ_ref is taken on the standardized columns. The fit is the same whatever the
    columns' units: the same λ, the same scores and coef_ times the units' ratio (before, λ_ref
    came from the largest column and the default λ left W = 0 on one of the scalings). The
    model reaches HiGHS' optimum of the weighted problem, which is (7) on X/s, to 1e-4, and
    FBPDClassifier.objective is that problem's value, as logged."""
    X, y = load_iris(return_X_y=True)
    z = y.astype(np.int32)
    units = np.array([1e-3, 1.0, 10.0, 1e4])
    budget = {"tol": 0.0, "gap_tol": 0.0, "max_iter": 300}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = FBPDClassifier(**budget).fit(X, z)
        scaled = FBPDClassifier(**budget).fit(X * units, z)
        at_lp = FBPDClassifier(lam=0.05, tol=0.0, gap_tol=0.0, max_iter=1000).fit(X * units, z)
    assert plain.model_.info["standardized"] and plain.model_.info["centered"]
    assert scaled.model_.info["lam"] == pytest.approx(plain.model_.info["lam"], rel=1e-9)
    np.testing.assert_allclose(scaled.decision_function(X * units), plain.decision_function(X), rtol=0, atol=1e-6)
    np.testing.assert_allclose(scaled.coef_.toarray() * units, plain.coef_.toarray(), rtol=0, atol=1e-6)
    assert plain.score(X, z) > 0.95 and scaled.score(X * units, z) == plain.score(X, z)
    s = (X * units).std(axis=0)
    optimum = hinge_lp(X * units / s, z, lam=0.05)  # 2.7e-5 from it measured (lam None, 3000 passes: 1.5e-3)
    objective = at_lp.objective(X * units, z)
    assert objective == pytest.approx(at_lp.history_[-1]["objective"], rel=1e-9)
    assert abs(objective - optimum) / optimum < 1e-4
    W = at_lp.coef_.toarray().T * s[:, None]  # the standardized columns' weights, by hand
    assert objective == pytest.approx(0.05 * np.abs(W).sum() + at_lp.hinge_loss(X * units, z), rel=1e-9)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        as_given = FBPDClassifier(standardize=False, max_iter=5).fit(X * units, z)
    assert not as_given.model_.info["standardized"] and as_given.model_.info["centered"]


def test_l1_linf_regularized_matches_linprog(wine):
    X, z = wine
    lam, G = 0.1, 3
    optimum = hinge_lp(X, z, lam=lam, linf_groups=G)
    clf = FBPDClassifier(penalty="l1/linf", group_size=G, lam=lam, max_iter=9000, tol=1e-7, gap_tol=0.0).fit(X, z)
    W = clf.coef_.toarray()
    g = sum(np.abs(W[k, j : j + G]).max() for k in range(3) for j in range(0, X.shape[1], G))
    objective = lam * g + clf.hinge_loss(X, z)
    assert clf.objective(X, z) == pytest.approx(objective, rel=1e-12)
    assert abs(objective - optimum) <= 1e-4 * optimum


def test_l1_constrained_matches_linprog(iris):
    """Algorithm 2 (epigraphical splitting) reaches the LP optimum of (8) while keeping the
    mean hinge at the bound."""
    X, z = iris
    eta = 0.1
    optimum = hinge_lp(X, z, eta=eta)
    with pytest.warns(ConvergenceWarning, match="did not converge"):  # tol is tighter than the test needs
        clf = FBPDClassifier(
            formulation="constrained", penalty="l1", eta=eta, max_iter=5000, tol=1e-8, gap_tol=0.0
        ).fit(X, z)
    assert abs(clf.objective(X, z) - optimum) <= 2e-3 * optimum
    assert abs(clf.hinge_loss(X, z) - eta) <= 2e-3 * eta
    assert abs(clf.history_[-1]["gap"]) <= 2e-2 * optimum


@pytest.mark.parametrize("penalty", ["l2", "l1/l2"])
def test_smooth_and_group_penalties_reach_duality(wine, penalty):
    """No LP for these: check optimality through the duality gap, recomputed here from the
    final duals read back from the run state (independently of the solver's bookkeeping). The
    Halpern iterate is an affine combination of simplex points: its rows keep their sums and
    leave the simplex by rounding only; their projection is the dual point checked."""
    X, z = wine
    n, M = X.shape
    lam, G = 0.05, 4
    source = memory_source(X, z, chunk_rows=100)
    solver = fb.FBPDSolver(fb.FBPDParams(penalty=penalty, group_size=G, lam=lam, max_iter=6000, tol=1e-9, gap_tol=0.0))
    ckpt = Checkpointer(None, config=solver.params.model_dump(), store_fingerprint="in-memory")
    model = solver.fit(source, engine=Engine(mode="inprocess"), checkpointer=ckpt, log=MetricsLog(None))
    W = model.coef_.toarray() if sp.issparse(model.coef_) else model.coef_
    Y = np.vstack([ckpt.state.read(fb.DUAL, model.info["iterations"], i) for i in range(source.n_chunks)]) / n
    np.testing.assert_allclose(Y.sum(axis=1), 1.0 / n, rtol=1e-10)
    assert Y.min() >= -1e-12 / n
    Y = np.vstack([simplex(row, 1.0 / n) for row in Y])
    A = Y.copy()
    A[np.arange(n), z] -= Y.sum(axis=1)  # T_ℓᵀy_ℓ = (u_ℓ a_ℓᵀ, a_ℓ)
    V, vb = A.T @ X, A.sum(axis=0)
    r_dot = Y.sum() - Y[np.arange(n), z].sum()
    if penalty == "l2":
        primal = lam * 0.5 * (W * W).sum()
        dual = r_dot - (V * V).sum() / (2 * lam)
    else:
        blocks = [(k, j) for k in range(3) for j in range(0, M, G)]
        primal = lam * sum(np.linalg.norm(W[k, j : j + G]) for k, j in blocks)
        dual = min(1.0, lam / max(np.linalg.norm(V[k, j : j + G]) for k, j in blocks)) * r_dot
    primal += objective_for("fbpd", solver.params).mean_loss(W.T, model.intercept_, X, z)
    assert primal - dual < 1e-4 * primal
    assert np.abs(vb).max() < 1e-4


def test_regularized_and_constrained_agree(iris):
    """By Lagrangian duality, (8) with eta = the mean hinge at (7)'s solution has the same
    minimiser W (unique: both objectives are strongly convex in W). Reference: (7) as a quadratic
    program solved by SLSQP; Algorithms 1 and 2, each run until its stopping test holds, reach its W."""
    X, z = iris
    lam = 0.05
    W_ref, b_ref = hinge_qp(X, z, lam)
    eta = objective_for("fbpd", fb.FBPDParams(penalty="l2", lam=lam)).mean_loss(W_ref.T, b_ref, X, z)
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # both converge
        reg = FBPDClassifier(penalty="l2", lam=lam, max_iter=20000, tol=1e-9, gap_tol=0.0).fit(X, z)
        con = FBPDClassifier(
            formulation="constrained", penalty="l2", eta=eta, max_iter=20000, tol=1e-9, gap_tol=0.0
        ).fit(X, z)
    scale = np.abs(W_ref).max()
    np.testing.assert_allclose(reg.coef_, W_ref, rtol=0, atol=1e-6 * scale)  # 4e-8 measured
    np.testing.assert_allclose(con.coef_, W_ref, rtol=0, atol=1e-5 * scale)  # 2e-7 measured
    assert con.objective(X, z) == pytest.approx(0.5 * (W_ref**2).sum(), rel=1e-5)
    assert con.hinge_loss(X, z) <= eta * (1 + 1e-5)


@pytest.fixture(scope="module")
def local_engine():
    with Engine(mode="local", n_workers=2) as engine:
        yield engine


@pytest.mark.parametrize(
    "params",
    [
        {"formulation": "regularized", "penalty": "l1", "lam": 0.05},  # preconditioned
        {"formulation": "regularized", "penalty": "l1/l2", "group_size": 3, "lam": 0.05},
        {"formulation": "constrained", "penalty": "l1/linf", "group_size": 2, "eta": 0.2},
    ],
)
def test_same_model_any_workers_and_chunking(wine, tmp_path, local_engine, params):
    X, z = wine
    store = write_store(tmp_path / "a", X, z, chunk_rows=60)
    serial, log = fit(store, str(tmp_path / "run1"), max_iter=12, **params)
    parallel, _ = fit(store, str(tmp_path / "run2"), engine=local_engine, max_iter=12, **params)
    rechunked, _ = fit(memory_source(X.astype(np.float32), z, chunk_rows=77), max_iter=12, **params)
    assert len(log.records) == 12
    np.testing.assert_array_equal(parallel.coef_.toarray(), serial.coef_.toarray())  # the reduction tree is fixed
    np.testing.assert_array_equal(parallel.intercept_, serial.intercept_)
    np.testing.assert_allclose(rechunked.coef_.toarray(), serial.coef_.toarray(), rtol=0, atol=1e-9)
    np.testing.assert_allclose(rechunked.intercept_, serial.intercept_, rtol=0, atol=1e-9)


@pytest.mark.parametrize(
    "formulation, preconditioning",
    [("regularized", "auto"), ("constrained", "auto"), ("regularized", False)],  # False: used columns only
)
def test_resume_is_bitwise(wine, tmp_path, monkeypatch, formulation, preconditioning):
    X, z = wine
    X = np.hstack([np.zeros((len(z), 20)), X, np.zeros((len(z), 7))])  # unused columns, found again on resume
    store = write_store(tmp_path / "store", X, z, chunk_rows=50)
    params = {
        "formulation": formulation,
        "preconditioning": preconditioning,
        "penalty": "l1",
        "lam": 0.05,
        "eta": 0.2,
        "max_iter": 16,
        "tol": 0.0,
        "gap_tol": 0.0,
    }
    full, full_log = fit(store, str(tmp_path / "full"), **params)
    assert full.info["restarts"] >= 3  # the crash falls between restarts: their state is checkpointed

    run = str(tmp_path / "run")
    fit(store, run, stop_after=5, **params)  # a time-boxed first call
    task = "_regularized_task" if formulation == "regularized" else "_constrained_task"
    real = getattr(fb, task)

    def crash(source, chunk_id, **kw):  # killed in the middle of iteration 10's pass
        if kw["version"] == 9 and chunk_id == 2:
            raise KeyboardInterrupt("killed")
        return real(source, chunk_id, **kw)

    monkeypatch.setattr(fb, task, crash)
    with pytest.raises(KeyboardInterrupt):
        fit(store, run, resume=True, **params)
    monkeypatch.setattr(fb, task, real)
    resumed, _ = fit(store, run, resume=True, **params)

    np.testing.assert_array_equal(resumed.coef_.toarray(), full.coef_.toarray())
    np.testing.assert_array_equal(resumed.intercept_, full.intercept_)
    assert resumed.info == full.info
    with open(os.path.join(run, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    strip = [{k: v for k, v in rec.items() if k != "wall_time"} for rec in lines]
    assert strip == [{k: v for k, v in rec.items() if k != "wall_time"} for rec in full_log.records]


@pytest.mark.parametrize("on_disk", [False, True])
def test_continued_run_ends_where_one_longer_run_ends(wine, tmp_path, on_disk):
    """A run continued with a larger max_iter carries the whole state (duals and anchors, ρ,
    restart counters, the iteration number that the restart schedule and adapt_iters count
    from): a chain of blocks ends bitwise where one uninterrupted run ends, in memory (the same
    Checkpointer object) and on disk. Before, resume in memory silently started over, and on
    disk a larger max_iter was refused as another configuration."""
    X, z = wine
    source = memory_source(X, z, chunk_rows=64)
    params = {"lam": 0.1, "tol": 0.0, "gap_tol": 0.0, "adapt_iters": 70}
    full, full_log = fit(source, max_iter=120, **params)
    assert full.info["restarts"] >= 3

    run_dir = str(tmp_path / "run") if on_disk else None
    ckpt, records = None, []
    for max_iter in (25, 60, 120):  # the middle block crosses adapt_iters, after which ρ is frozen
        solver = fb.FBPDSolver(fb.FBPDParams(max_iter=max_iter, **params))
        if ckpt is None or on_disk:
            ckpt = Checkpointer(run_dir, config=solver.params.model_settings(), store_fingerprint="in-memory")
        log = MetricsLog(None)
        model = solver.fit(source, engine=Engine(mode="inprocess"), checkpointer=ckpt, log=log, resume=max_iter > 25)
        records += log.records
    np.testing.assert_array_equal(model.coef_.toarray(), full.coef_.toarray())
    np.testing.assert_array_equal(model.intercept_, full.intercept_)
    assert model.info == full.info
    strip = [{k: v for k, v in rec.items() if k != "wall_time"} for rec in records]
    assert strip == [{k: v for k, v in rec.items() if k != "wall_time"} for rec in full_log.records]

    # only max_iter may change, and not below where the run is
    for changed, message in (
        ({"max_iter": 200, "lam": 0.2}, "other fbpd parameters|different solver config"),
        ({"max_iter": 100}, "beyond max_iter = 100: .*resume with -p max_iter=120 or more, or start over"),
    ):
        solver = fb.FBPDSolver(fb.FBPDParams(**{**params, **changed}))
        if on_disk:
            ckpt = Checkpointer(run_dir, config=solver.params.model_settings(), store_fingerprint="in-memory")
        with pytest.raises((ConfigError, CheckpointError), match=message):
            solver.fit(source, engine=Engine(mode="inprocess"), checkpointer=ckpt, log=MetricsLog(None), resume=True)


def test_lam_none_is_a_ratio_of_lam_ref_and_w_vanishes_above_it(iris):
    """lam=None weighs g by lam_ratio·λ_ref, λ_ref = ‖(1/n) Σ_ℓ u_ℓ (e_zℓ − π)ᵀ‖∞·K/(K − 1)
    (numpy below); on balanced classes (iris: 50 each) W = 0 solves (7) for lam above λ_ref (a
    bound: λmax ≤ λ_ref, W = 0 still at 0.9·λ_ref on iris), not far below it."""
    X, z = iris
    n, K = len(z), 3
    E = np.eye(K)[z]
    lam_ref = np.abs(X.T @ (E - E.mean(axis=0)) / n).max() * K / (K - 1)
    above = FBPDClassifier(lam_ratio=1.01, max_iter=3000).fit(X, z)
    below = FBPDClassifier(lam_ratio=0.5, max_iter=3000).fit(X, z)
    for clf, ratio in ((above, 1.01), (below, 0.5)):
        assert clf.model_.info["converged"]
        assert clf.model_.info["lam_ref"] == pytest.approx(lam_ref, rel=1e-12)
        assert clf.model_.info["lam"] == pytest.approx(ratio * lam_ref, rel=1e-12)
    assert above.coef_.nnz == 0 and above.objective(X, z) == pytest.approx(1.0, abs=1e-3)
    assert below.coef_.nnz > 0 and below.objective(X, z) < 1.0


def test_stops_on_relative_change_and_estimator_api(wine):
    from sklearn.base import clone

    X, z = wine
    y = np.array(["a", "b", "c"])[z]
    clf = FBPDClassifier(penalty="l1", lam=0.1, tol=1e-4, max_iter=5000)
    clf.fit(X, y)
    changes = [rec["rel_change"] for rec in clf.history_]
    assert changes[-1] < 1e-4 and min(changes[:-1]) >= 1e-4 and clf.n_iter_ < 5000
    assert clf.score(X, y) > 0.95
    assert set(clf.predict(X)) <= set(y)
    assert clf.objective(X, y) == pytest.approx(clf.history_[-1]["objective"], rel=1e-12)
    assert clf.coef_.shape == (3, X.shape[1]) and sp.issparse(clf.coef_)
    c2 = clone(clf).set_params(penalty="l2")
    assert c2.get_params()["penalty"] == "l2" and c2.get_params()["lam"] == 0.1
    with pytest.raises(ValueError):
        FBPDClassifier(penalty="nope").fit(X, y)


def _peak_growth(call) -> int:
    """call()'s peak resident memory above the process's before it, sampled every 0.5 ms by a thread
    (the kernels release the GIL): arrays above glibc's mmap threshold (32 MiB) come and go with
    their pages, so the peak counts the large arrays held at once (or fewer, if a short one is
    missed, never more)."""
    import threading
    import time

    import psutil

    process, peak, done = psutil.Process(), [0], threading.Event()
    base = process.memory_info().rss

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], process.memory_info().rss)
            time.sleep(0.0005)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        call()
    finally:
        done.set()
        sampler.join()
    return max(peak[0], process.memory_info().rss) - base


def test_a_chunk_task_holds_three_arrays_of_rows_by_classes(tmp_path):
    """One Halpern iteration of a chunk (_regularized_task, duals and anchor read from files as on a
    cluster) holds at most three float64 arrays of rows × K at once, the count
    FBPDSolver.row_state_arrays declares and train's memory check multiplies: Y, its anchor and Ỹ,
    which becomes the next duals in place. Before (session 29's many-classes finding), the
    Halpern combination was a fourth array and the file bytes of the written one a fifth, with Y
    and the anchor still held (main: about 5 arrays here)."""
    from streamfit.checkpoint import ChunkState

    K, rows_a_class, M = 1500, 3, 200  # many classes of few rows: rows × K × 8 = 54 MB, above mmap's threshold
    rng = np.random.default_rng(0)
    z = np.repeat(np.arange(K), rows_a_class)
    X = sp.random(len(z), M, density=0.05, random_state=1, format="csr") + sp.csr_matrix(
        (np.ones(len(z)), (np.arange(len(z)), z % M)), shape=(len(z), M)
    )
    source = InMemoryStore(X.tocsr(), z, [str(k) for k in range(K)], chunk_rows=len(z))
    state = ChunkState(str(tmp_path / "state"))
    for name in (fb.DUAL, "anchor_" + fb.DUAL):  # duals on the simplex, as an iteration leaves them
        Y = rng.random((len(z), K))
        state.write(name, 1, 0, Y / Y.sum(axis=1, keepdims=True), cache=False)
    W2 = np.ascontiguousarray(rng.standard_normal((M, 2 * K)) * 0.01)
    args = {"state": state, "version": 1, "W2": W2, "b2": np.zeros(2 * K), "position": np.arange(M, dtype=np.int32)}
    args.update(step=1.0, preconditioned=True, anchor=1, restart=False, a=0.5, c=0.25)
    array = 8 * len(z) * K
    first = fb._regularized_task(source, 0, **args)  # compiles; writes version 2
    assert first.moves[0] > 0 and first.jumps[0] > 0
    growth = _peak_growth(lambda: fb._regularized_task(source, 0, **args))  # the same version again: the same bytes
    assert 2.5 * array < growth < 3.5 * array + 32 * 2**20, growth / array
    assert fb.FBPDSolver.row_state_arrays == 3
