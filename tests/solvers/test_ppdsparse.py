"""PPDSparse (Yen et al. 2017) against independent optima: scikit-learn's LinearSVC for the pure
ℓ2 one-vs-all objective, a proximal gradient (FISTA) solver written here for the elastic net,
and the primal optimality conditions of (9) checked by a routine written here; plus its
out-of-core contract (workers, kill and resume) and the estimator."""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from fitting import fit_solver, offset_data
from pydantic import ValidationError
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.svm import LinearSVC

import streamfit.solvers.ppdsparse as pp
from streamfit import PPDSparseClassifier
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import ConfigError
from streamfit.model import load_model
from streamfit.objectives import objective_for
from streamfit.runlog import MetricsLog
from streamfit.solvers import get_solver
from streamfit.store import InMemoryStore, StoreWriter, open_store

TIGHT = {"tol": 1e-9, "max_inner": 1000, "max_iter": 10000}


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return sp.csr_matrix(X[:600] / 16.0), y[:600].astype(np.int32)


@pytest.fixture(scope="module")
def multilabel():
    """400 sparse rows, 6 labels: each label fires when a random linear score is high."""
    rng = np.random.default_rng(3)
    X = sp.random(400, 120, density=0.08, random_state=4, format="csr", dtype=np.float64)
    X.data = rng.uniform(0.1, 1.0, X.nnz)
    S = X @ rng.normal(size=(120, 6)) + 0.3 * rng.normal(size=(400, 6))
    Y = (S > np.quantile(S, 0.8, axis=0)).astype(np.float32)
    return X, sp.csr_matrix(Y)


fit = functools.partial(fit_solver, "ppdsparse")  # (model, metrics log) of a run
# the same on the columns as given, for the tests of (9) on the stored columns: digits/16's
# near-empty border pixels spread its columns' standard deviations over 100x (231 on all of
# digits), where standardize="auto" solves on the standardized columns
fit_as_given = functools.partial(fit_solver, "ppdsparse", standardize=False)


def signs(labels, n_classes):
    """±1 one-vs-all targets, n × K."""
    if sp.issparse(labels):
        return np.where(labels.toarray() > 0, 1.0, -1.0)
    return np.where(np.arange(n_classes)[None, :] == np.asarray(labels)[:, None], 1.0, -1.0)


def objective(X, Ys, W, b, lam, tau, loss):
    """F_k of every class k (a vector): lam‖w‖₁ + (tau/2)(‖w‖² + b²) + mean ℓ(y(Xw + b)), from
    streamfit.objectives (the classes' problems are separate: F_k is F of class k alone)."""
    obj = objective_for("ppdsparse", pp.PPDSparseParams(loss=loss, lam=lam, tau=tau))
    return np.array([obj.value(W[:, [k]], np.atleast_1d(b)[[k]], X, Ys[:, [k]] > 0) for k in range(Ys.shape[1])])


def assert_logged_objective(log, X, labels, model, lam, tau, loss="squared_hinge"):
    """The last step's logged objective is Σ_k F_k of the model's weights, evaluated here."""
    Ys = signs(labels, len(model.classes_))
    W, b = dense_weights(model)
    assert log.records[-1]["objective"] == pytest.approx(objective(X, Ys, W, b, lam, tau, loss).sum(), rel=1e-12)


def kkt_violation(X, Ys, W, b, lam, tau, tau_bias=None, s=None):
    """Largest violation of the optimality conditions of the squared-hinge elastic net, per
    class: g = ∇ of the smooth part (ℓ2 weight tau on w, tau_bias on b, default tau); w_j ≠ 0
    needs g_j + lam·sign(w_j) = 0, w_j = 0 needs |g_j| ≤ lam, and the bias g_b = 0. With column
    weights s (d,): the weighted net lam Σ_j s_j|w_j| + (tau/2) Σ_j s_j² w_j², each column's
    violation divided by s_j (that of the standardized column z_j = x_j/s_j)."""
    n = X.shape[0]
    s = np.ones((X.shape[1], 1)) if s is None else np.asarray(s, float)[:, None]
    slack = np.maximum(0.0, 1.0 - Ys * (X @ W + b))
    G = tau * s**2 * W - np.asarray(X.T @ (Ys * slack)) / n
    gb = (tau if tau_bias is None else tau_bias) * b - (Ys * slack).sum(0) / n
    viol = np.where(W != 0, np.abs(G + lam * s * np.sign(W)), np.maximum(np.abs(G) - lam * s, 0.0)) / s
    return np.maximum(viol.max(0), np.abs(gb))


def fista(X, Ys, lam, tau, iters=4000):
    """Accelerated proximal gradient on the squared-hinge elastic net, all classes at once:
    smooth part (tau/2)‖[w; b]‖² + mean ½ max(0, 1 − y(Xw + b))², prox of lam‖w‖₁ (not b)."""
    n, d = X.shape
    A = sp.hstack([X, np.ones((n, 1))], format="csr")
    L = tau + sp.linalg.svds(A, k=1, return_singular_vectors=False)[0] ** 2 / n
    V = np.zeros((d + 1, Ys.shape[1]))
    Z, t = V.copy(), 1.0
    for _ in range(iters):
        slack = np.maximum(0.0, 1.0 - Ys * (A @ Z))
        grad = tau * Z - np.asarray(A.T @ (Ys * slack)) / n
        U = Z - grad / L
        U[:d] = np.sign(U[:d]) * np.maximum(np.abs(U[:d]) - lam / L, 0.0)
        t_next = (1 + np.sqrt(1 + 4 * t * t)) / 2
        Z = U + (t - 1) / t_next * (U - V)
        V, t = U, t_next
    return V[:d], V[d]


def dense_weights(model):
    return model.coef_.toarray().T, model.intercept_


def write_store(path, X, labels, classes, chunk_rows):
    w = StoreWriter(str(path), chunk_rows=chunk_rows, multilabel=sp.issparse(labels))
    w.write_rows(sp.csr_matrix(X, dtype=np.float32), labels)
    w.close(n_features=X.shape[1], classes=classes)
    return open_store(str(path))


def test_registered_and_params():
    assert get_solver("ppdsparse") is pp.PPDSparseSolver
    with pytest.raises(ValidationError):
        pp.PPDSparseParams(loss="logistic")
    with pytest.raises(ValidationError):
        pp.PPDSparseParams(tau=0)
    with pytest.raises(ValidationError):
        pp.PPDSparseParams(kapa=3)


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_pure_l2_equals_linearsvc(digits, loss):
    X, y = digits
    n, tau = X.shape[0], 1e-3
    model, log = fit_as_given(InMemoryStore(X, y, range(10)), loss=loss, lam=0.0, tau=tau, **TIGHT)
    assert_logged_objective(log, X, y, model, 0.0, tau, loss)
    W, b = dense_weights(model)
    Ys = signs(y, 10)
    C = 1 / (n * tau) if loss == "hinge" else 1 / (2 * n * tau)
    for k in (0, 3, 8):
        svc = LinearSVC(loss=loss, C=C, tol=1e-10, max_iter=200_000, dual=True).fit(X, Ys[:, k])
        ours = objective(X, Ys[:, [k]], W[:, [k]], b[[k]], 0.0, tau, loss)[0]
        ref = objective(X, Ys[:, [k]], svc.coef_.T, svc.intercept_, 0.0, tau, loss)[0]
        assert ours <= ref * (1 + 1e-4)
        assert ours == pytest.approx(ref, rel=1e-4)


def test_elastic_net_is_optimal(digits):
    X, y = digits
    lam, tau = 2e-3, 1e-3
    model, log = fit_as_given(InMemoryStore(X, y, range(10), chunk_rows=128), lam=lam, tau=tau, **TIGHT)
    W, b = dense_weights(model)
    Ys = signs(y, 10)
    assert kkt_violation(X, Ys, W, b, lam, tau).max() < 1e-6
    W_ref, b_ref = fista(X, Ys, lam, tau)
    ours, ref = (
        objective(X, Ys, W, b, lam, tau, "squared_hinge"),
        objective(X, Ys, W_ref, b_ref, lam, tau, "squared_hinge"),
    )
    np.testing.assert_allclose(ours, ref, rtol=1e-4)
    assert model.coef_.nnz < 0.5 * W.size  # the ℓ1 term makes W sparse, stored sparse
    # strong duality: the logged dual objectives (−G/n summed) reach the primal optimum
    dual = sum(r["dual_objective"] for r in log.records) / X.shape[0]
    assert dual == pytest.approx(ours.sum(), rel=1e-5)
    # the logged objective: Σ F_k over the classes finished so far (F_k evaluated here), and by
    # weak duality never below the dual objectives logged so far
    done = np.zeros(10, bool)
    dual_so_far = 0.0
    for r in log.records:
        done[r["classes"][0] : r["classes"][1]] = True
        dual_so_far += r["dual_objective"] / X.shape[0]
        assert r["objective"] == pytest.approx(ours[done].sum(), rel=1e-12)
        assert r["objective"] >= dual_so_far * (1 - 1e-12)


def lam_max_reference(X, Ys, tau):
    """λmax_k per class from the dense subgradient condition at w = 0: the bias minimising
    (tau/2) b² + mean ½ max(0, 1 − y b)² (scipy's scalar minimiser, then a Newton step on its
    derivative for full precision; not the closed form), then ‖∇_w‖∞ = ‖(1/n) Xᵀ(y ⊙ (1 − y b)₊)‖∞."""
    from scipy.optimize import minimize_scalar

    n = X.shape[0]
    out = []
    for y in Ys.T:
        b = minimize_scalar(lambda b, y=y: tau * b * b / 2 + np.mean(np.maximum(0, 1 - y * b) ** 2) / 2).x
        b -= (tau * b - np.mean(y * np.maximum(0, 1 - y * b))) / (tau + np.mean(y * b < 1))
        out.append(np.abs(X.T @ (y * np.maximum(0, 1 - y * b))).max() / n)
    return np.array(out)


@pytest.mark.parametrize("data_name", ["digits", "multilabel"])
def test_lam_ratio_is_relative_to_the_exact_lam_max(request, data_name):
    """lam=None: class k's ℓ1 weight is lam_ratio·λmax_k. Above λmax_k (ratio 1.001) every
    class's weights are all zero; just below (0.99) every class has non-zero weights; at 0.3 the
    model meets the optimality conditions with lam_k = 0.3·λmax_k of the reference and logs
    Σ_k F_k at those weights."""
    X, labels = request.getfixturevalue(data_name)
    n_classes = 10 if data_name == "digits" else 6
    tau = 1e-2
    source = InMemoryStore(X, labels, range(n_classes))
    Ys = signs(labels, n_classes)
    lams = lam_max_reference(X.toarray(), Ys, tau)
    above, _ = fit_as_given(source, lam=None, lam_ratio=1.001, tau=tau, **TIGHT)
    assert above.coef_.nnz == 0
    below, _ = fit_as_given(source, lam=None, lam_ratio=0.99, tau=tau, **TIGHT)
    assert (np.diff(below.coef_.indptr) > 0).all()
    model, log = fit_as_given(source, lam=None, lam_ratio=0.3, tau=tau, **TIGHT)
    np.testing.assert_allclose(
        [model.info["lam_min"], model.info["lam_max"]], 0.3 * lams[[lams.argmin(), lams.argmax()]], rtol=1e-6
    )
    W, b = dense_weights(model)
    assert kkt_violation(X, Ys, W, b, 0.3 * lams, tau).max() < 1e-6
    per_class = [
        objective(X, Ys[:, [k]], W[:, [k]], b[[k]], 0.3 * lams[k], tau, "squared_hinge")[0] for k in range(n_classes)
    ]
    assert log.records[-1]["objective"] == pytest.approx(sum(per_class), rel=1e-12)
    with pytest.raises(ValidationError, match="hinge needs an absolute lam"):
        pp.PPDSparseParams(loss="hinge", lam=None)


def unbalanced(data_name, X, labels):
    """The fixture's classes made unequal in size: digits' class 9 keeps 20 rows (share 0.03),
    the rest go to class 8 (0.17); multilabel label 0 kept on the first 100 rows only (0.05, the
    others 0.2)."""
    if data_name == "digits":
        labels = labels.copy()
        labels[np.flatnonzero(labels == 9)[20:]] = 8
        return labels, 10
    Y = labels.tolil()
    Y[100:, 0] = 0
    return sp.csr_matrix(Y), 6


@pytest.mark.parametrize("data_name", ["digits", "multilabel"])
def test_lam_scale_is_the_mean_row_norm_over_root_n_times_the_label_std_factor(request, data_name):
    """The default lam="scale": class k's ℓ1 weight is lam_scale·L·max(1, 2 std(y_k))·(1/n) Σ_i ‖x_i‖₂ / √n,
    y_k class k's ±1 labels (numpy here), L the mean labels per row (1 for digits; 1.0625 for the
    multilabel fixture: Theorem 3.2's summed ℓ1 bound 2L/lam held at a multiclass set's), on
    classes of unequal size with weights on both sides of the floor; the model meets the
    optimality conditions with those per-class weights. std(y_k) is
    the root mean square of the squared hinge's per-row gradient weights (1 − y_ik b_k) at w = 0
    and its optimal bias b_k (scipy's scalar minimiser, tau → 0: the derivation in scaled_lams).
    Rows scaled by 3 triple the weights; every row twice (n → 2n, same norms and shares) divides
    them by √2."""
    from scipy.optimize import minimize_scalar

    X, labels = request.getfixturevalue(data_name)
    labels, n_classes = unbalanced(data_name, X, labels)
    n = X.shape[0]
    Ys = signs(labels, n_classes)
    factor = np.maximum(1.0, 2 * Ys.std(axis=0))
    assert (factor == 1).any() and (factor > 1.4).any()
    labels_per_row = (Ys > 0).sum() / n
    assert labels_per_row == (1.0 if data_name == "digits" else 1.0625)
    expected = 2e-3 * labels_per_row * factor * np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).mean() / np.sqrt(n)
    for y in Ys.T:
        b = minimize_scalar(lambda b, y=y: np.mean(np.maximum(0, 1 - y * b) ** 2) / 2, bounds=(-1, 1)).x
        assert np.sqrt(np.mean(np.maximum(0, 1 - y * b) ** 2)) == pytest.approx(y.std(), rel=1e-4)
    tau = 1e-2
    data = pp.build_data(InMemoryStore(X, labels, range(n_classes)))
    np.testing.assert_allclose(pp.scaled_lams(data, 0, n_classes, 2e-3), expected, rtol=1e-12)
    np.testing.assert_allclose(pp.scaled_lams(data, 2, 4, 2e-3), expected[2:4], rtol=1e-12)
    assert pp.PPDSparseParams().lam == "scale"
    model, _ = fit_as_given(InMemoryStore(X, labels, range(n_classes)), lam_scale=2e-3, tau=tau, **TIGHT)
    assert [model.info["lam_min"], model.info["lam_max"]] == pytest.approx([expected.min(), expected.max()], rel=1e-12)
    W, b = dense_weights(model)
    assert model.coef_.nnz > 0 and kkt_violation(X, Ys, W, b, expected, tau).max() < 1e-6
    tripled = pp.build_data(InMemoryStore(3 * X, labels, range(n_classes)))
    np.testing.assert_allclose(pp.scaled_lams(tripled, 0, n_classes, 2e-3), 3 * expected, rtol=1e-12)
    twice = sp.vstack([labels, labels]) if sp.issparse(labels) else np.tile(labels, 2)
    doubled = pp.build_data(InMemoryStore(sp.vstack([X, X], format="csr"), twice, range(n_classes)))
    np.testing.assert_allclose(pp.scaled_lams(doubled, 0, n_classes, 2e-3), expected / np.sqrt(2), rtol=1e-12)


@pytest.mark.parametrize("data_name", ["digits", "multilabel"])
def test_lam_positives_multiplies_a_class_weight_by_root_m_over_its_clipped_positives(request, data_name):
    """lam_positives = M: class k's lam "scale" weight times √(M/n⁺_k), n⁺_k its positive rows
    (counted by numpy here) clipped to [M/4, M] (M = 90), on classes inside the clip and (digits) below and above it;
    None leaves the default's weights bitwise; the fitted model meets the optimality conditions
    at those weights."""
    X, labels = request.getfixturevalue(data_name)
    labels, n_classes = unbalanced(data_name, X, labels)
    positives = (signs(labels, n_classes) > 0).sum(axis=0)
    factor = np.sqrt(90 / np.clip(positives, 22.5, 90))
    assert ((factor > 1) & (factor < 2)).any()
    assert data_name == "multilabel" or ((factor == 2).any() and (factor == 1).any())
    data = pp.build_data(InMemoryStore(X, labels, range(n_classes)))
    default = pp.scaled_lams(data, 0, n_classes, 2e-3)
    np.testing.assert_array_equal(pp.scaled_lams(data, 0, n_classes, 2e-3, None), default)
    expected = default * factor
    np.testing.assert_allclose(pp.scaled_lams(data, 0, n_classes, 2e-3, 90), expected, rtol=1e-12)
    np.testing.assert_allclose(pp.scaled_lams(data, n_classes - 3, n_classes, 2e-3, 90), expected[-3:], rtol=1e-12)
    tau = 1e-2
    model, _ = fit_as_given(
        InMemoryStore(X, labels, range(n_classes)), lam_scale=2e-3, lam_positives=90, tau=tau, **TIGHT
    )
    assert [model.info["lam_min"], model.info["lam_max"]] == pytest.approx([expected.min(), expected.max()], rel=1e-12)
    W, b = dense_weights(model)
    assert kkt_violation(X, signs(labels, n_classes), W, b, expected, tau).max() < 1e-6


def test_rows_far_from_unit_norm_are_solved_rescaled(digits):
    """lam not a number: rows of mean norm s > 16 are solved divided by the power of two c that
    brings s into (8, 16] (data_scale), so rows 64 times those of a set with s ≈ 15.5 give its
    model with coef_/64, bitwise, and lam_k 64 times its; those weights meet the optimality
    conditions (written here) of the store's rows with ℓ2 weight tau·64² on w and tau on the
    bias (a bias feature of value 64). Before, such rows were solved as they are: a nearly hard
    margin, whose dual crawled (pendigits, docs/benchmarks.md)."""
    X, y = digits
    X = 4 * X
    s = float(np.sqrt(np.asarray(X.multiply(X).sum(axis=1))).mean())
    assert 8 < s <= 16 and pp.data_scale(s) == 1.0 and pp.data_scale(64 * s) == 64.0
    assert pp.data_scale(1.0) == 1.0 and pp.data_scale(0.0) == 1.0 and pp.data_scale(1e-3) == 1 / 64
    tau = 1e-3
    base, _ = fit_as_given(InMemoryStore(X, y, range(10)), tau=tau, **TIGHT)
    big, _ = fit_as_given(InMemoryStore(64 * X, y, range(10)), tau=tau, **TIGHT)
    assert (big.coef_ != base.coef_ / 64).nnz == 0 and big.coef_.nnz > 0
    np.testing.assert_array_equal(big.intercept_, base.intercept_)
    assert [big.info["lam_min"], big.info["lam_max"]] == [64 * base.info["lam_min"], 64 * base.info["lam_max"]]
    n = X.shape[0]
    Ys = signs(y, 10)
    lams = 1e-3 * np.maximum(1.0, 2 * Ys.std(axis=0)) * 64 * s / np.sqrt(n)
    W, b = dense_weights(big)
    assert kkt_violation(64 * X, Ys, W, b, lams, tau * 64**2, tau_bias=tau).max() < 1e-6 * 64
    assert kkt_violation(64 * X, Ys, W, b, lams, tau).max() > 1e-3  # not the problem of the rows as they are


def test_lam_scale_same_model_on_any_workers_and_chunking(digits, tmp_path, local_engine):
    """The default lam is computed from the rows in each worker: 2 Dask workers on a store of
    256-row chunks and the in-process engine on 100-row chunks give the same model, bitwise."""
    X, y = digits
    classes = [str(c) for c in range(10)]
    params = {"group_size": 3, "max_iter": 50}
    serial, _ = fit(write_store(tmp_path / "a", X, y, classes, chunk_rows=100), **params)
    parallel, _ = fit(write_store(tmp_path / "b", X, y, classes, chunk_rows=256), engine=local_engine, **params)
    assert serial.info["standardized"] is True  # digits/16: its columns' sums are exact, in any order
    assert serial.coef_.nnz > 0 and (serial.coef_ != parallel.coef_).nnz == 0
    np.testing.assert_array_equal(serial.intercept_, parallel.intercept_)
    assert serial.info["lam_min"] == parallel.info["lam_min"]


def column_std(X):
    """numpy's standard deviation of every column of X over its rows, 1 where it is 0."""
    s = np.asarray(X.toarray() if sp.issparse(X) else X).std(axis=0)
    return np.where(s > 0, s, 1.0)


def scores(model, X):
    return np.asarray(X @ model.coef_.T.toarray()) + model.intercept_


def test_standardized_columns_meet_the_weighted_elastic_net_conditions(digits):
    """standardize=True: the elastic net (9) of the standardized columns z_j = x_j/s_j (s_j the
    column's standard deviation), written back in the stored units, i.e. per class
    lam Σ_j s_j|w_j| + (tau/2)(Σ_j s_j² w_j² + b²) + mean loss: its optimality conditions
    (checked here with the column weights s_j) hold at the model's W, FISTA on X/s (an
    independent solver of that problem) reaches the same objective, and not those of the columns
    as given; lam=None takes λmax_k of the standardized columns (1.001·λmax_k: the empty model,
    0.3·λmax_k logged as lam_k)."""
    X, y = digits
    s = column_std(X)
    Z = sp.csr_matrix(X @ sp.diags(1 / s))
    Ys = signs(y, 10)
    lam, tau = 2e-3, 1e-3
    model, _ = fit(InMemoryStore(X, y, range(10)), standardize=True, lam=lam, tau=tau, **TIGHT)
    assert model.info["standardized"] is True and model.coef_.nnz > 0
    W, b = dense_weights(model)
    assert kkt_violation(X, Ys, W, b, lam, tau, s=s).max() < 1e-6
    assert kkt_violation(X, Ys, W, b, lam, tau).max() > 1e-3  # not the problem of the columns as given
    W_ref, b_ref = fista(Z, Ys, lam, tau)
    ours = objective(Z, Ys, W * s[:, None], b, lam, tau, "squared_hinge")
    np.testing.assert_allclose(ours, objective(Z, Ys, W_ref, b_ref, lam, tau, "squared_hinge"), rtol=1e-4)
    lams = lam_max_reference(Z.toarray(), Ys, tau)
    empty, _ = fit(InMemoryStore(X, y, range(10)), standardize=True, lam=None, lam_ratio=1.001, tau=tau, **TIGHT)
    assert empty.coef_.nnz == 0
    ratio, _ = fit(InMemoryStore(X, y, range(10)), standardize=True, lam=None, lam_ratio=0.3, tau=tau, **TIGHT)
    np.testing.assert_allclose(
        [ratio.info["lam_min"], ratio.info["lam_max"]], 0.3 * lams[[lams.argmin(), lams.argmax()]], rtol=1e-6
    )


def relative_duality_gaps(X, Ys, W, b, lams, l1, l2, tau):
    """(P_k − D_k)/P_k per class for P_k = lam_k Σ_j l1_j|w_j| + (tau/2)(Σ_j l2_j w_j² + b²) + mean
    ½ max(0, 1 − y s)², at the dual point α_i = max(0, 1 − y_i s_i) of the model's margins: the
    Fenchel dual D(α) = (1/n) Σ (α_i − α_i²/2) − Σ_j soft(v_j, lam_k l1_j)²/(2 tau l2_j) − v_b²/(2 tau),
    v = (1/n) Σ_i α_i y_i x_i, v_b = (1/n) Σ_i α_i y_i; D ≤ P* ≤ P (weak duality)."""
    n = X.shape[0]
    alpha = np.maximum(0.0, 1.0 - Ys * (X @ W + b))
    V, vb = X.T @ (alpha * Ys) / n, (alpha * Ys).mean(axis=0)
    P = (
        lams * (l1[:, None] * np.abs(W)).sum(0)
        + tau / 2 * ((l2[:, None] * W * W).sum(0) + b * b)
        + (alpha**2).mean(0) / 2
    )
    soft = np.maximum(np.abs(V) - l1[:, None] * lams, 0.0)
    D = (alpha - alpha**2 / 2).mean(0) - (soft**2 / (2 * tau * l2[:, None])).sum(0) - vb**2 / (2 * tau)
    return (P - D) / P


def test_standardized_rows_far_from_unit_norm_solve_the_documented_objective_by_a_duality_gap():
    """The defaults where standardize and data_scale both act: 300 dense columns in units 10^u_j
    (u_j ∈ [−1.5, 1.5]) are standardized (z_j = x_j/s_j), whose rows have a mean norm s̄ ≈ 17 > 16,
    so z is solved divided by c = 2 with lam_k = 1e-3·max(1, 2σ_k)·s̄/√n of z (the module
    docstring). In the stored units that is lam_k Σ_j s_j|w_j| + (tau/2)(Σ_j c² s_j² w_j² + b²) +
    mean loss, whose duality gap, computed here, closes at tol 1e-6 (and does not for the problem
    without c, the control)."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=150, n_features=300, n_informative=10, n_classes=3, random_state=21)
    X = X * 10.0 ** np.random.default_rng(21).uniform(-1.5, 1.5, 300)
    model, _ = fit(InMemoryStore(X, y, [0, 1, 2]), tol=1e-6)
    assert model.info["standardized"] is True
    n, tau = len(y), pp.PPDSparseParams().tau
    s = X.std(axis=0)
    mean_norm = np.linalg.norm(X / s, axis=1).mean()
    assert 16 < mean_norm <= 32  # so c = 2
    Ys = signs(y, 3)
    lams = 1e-3 * np.maximum(1.0, 2 * Ys.std(axis=0)) * mean_norm / np.sqrt(n)
    W, b = dense_weights(model)
    assert model.coef_.nnz > 0
    assert relative_duality_gaps(X, Ys, W, b, lams, s, (2 * s) ** 2, tau).max() < 1e-7
    assert relative_duality_gaps(X, Ys, W, b, lams, s, s**2, tau).max() > 1e-2


def test_standardized_fit_is_the_same_in_any_units(digits):
    """The default (standardize auto; digits/16 is standardized already, its columns' standard
    deviations spreading over 100x) on the columns in other units (column j times 10^u_j, u_j
    uniform in [-3, 3]) and with one column times 1000: the same predictions, the scores to 1e-9
    of their range, coef_ times the units to 1e-9 of its largest weight (rounding: x_j·u_j/(s_j·u_j)).
    standardize=False moves the scores."""
    X, y = digits
    source = InMemoryStore(X, y, range(10))
    base, _ = fit(source)
    assert base.info["standardized"] is True
    units = 10.0 ** np.random.default_rng(0).uniform(-3, 3, X.shape[1])
    one = np.ones(X.shape[1])
    one[20] = 1000.0
    for u in (units, one):
        Xu = sp.csr_matrix(X @ sp.diags(u))
        other, _ = fit(InMemoryStore(Xu, y, range(10)))
        assert other.info["standardized"] is True
        np.testing.assert_array_equal(other.predict(Xu), base.predict(X))
        reach = np.abs(scores(base, X)).max()
        np.testing.assert_allclose(scores(other, Xu), scores(base, X), rtol=0, atol=1e-9 * reach)
        W = base.coef_.toarray()
        np.testing.assert_allclose(other.coef_.toarray() * u, W, rtol=0, atol=1e-9 * np.abs(W).max())
    plain, _ = fit_as_given(source)
    plain_one, _ = fit_as_given(InMemoryStore(sp.csr_matrix(X @ sp.diags(one)), y, range(10)))
    moved = np.abs(scores(plain_one, sp.csr_matrix(X @ sp.diags(one))) - scores(plain, X)).max()
    assert moved > 1e-3


def test_standardize_auto_where_the_columns_spread_on_dense_low_dimensional_data(digits, multilabel):
    """auto: standardized where the columns' standard deviations spread over 100x (digits/16:
    True's model, bitwise), the columns as given where they do not (digits divided by its
    columns' standard deviations: spread 1, False's model, bitwise); True on sparse data
    (the multilabel fixture, 8 % non-zero: the same model, bitwise) or wide data (1001 columns)
    keeps the columns as given (text keeps today's objective)."""
    X, y = digits
    params = {"lam": 1e-3, "tau": 1e-3}

    def same(a, b):
        return (a.coef_ != b.coef_).nnz == 0 and np.array_equal(a.intercept_, b.intercept_)

    source = InMemoryStore(X, y, range(10))
    auto, _ = fit(source, **params)
    true, _ = fit(source, standardize=True, **params)
    false, _ = fit(source, standardize=False, **params)
    assert auto.info["standardized"] and same(auto, true) and not same(auto, false)
    given = InMemoryStore(sp.csr_matrix(X @ sp.diags(1 / column_std(X))), y, range(10))
    auto, _ = fit(given, **params)
    false, _ = fit(given, standardize=False, **params)
    assert not auto.info["standardized"] and same(auto, false)
    Xm, Ym = multilabel
    true, _ = fit(InMemoryStore(Xm, Ym, range(6)), standardize=True)
    false, _ = fit(InMemoryStore(Xm, Ym, range(6)), standardize=False)
    assert not true.info["standardized"] and same(true, false)
    wide = sp.random(100, 1001, density=0.5, random_state=6, format="csr")
    wide[:, 0] *= 1e3  # the columns' standard deviations spread over 100x, but 1001 columns
    assert pp.standardized_columns(pp.PPDSparseParams(standardize=True), pp.column_sums(wide), 100) is None


def test_column_sums_over_chunks(digits):
    """init's scan (_scan_task summed by the engine's fixed tree): per column that holds a
    non-zero, its non-zeros, Σx and Σx² as numpy counts them, on any chunking; the columns'
    standard deviations those of numpy; more than 1000 columns: wide (no sums)."""
    X, y = digits
    rng = np.random.default_rng(1)
    Xr = sp.csr_matrix(X @ sp.diags(rng.uniform(0.1, 10, X.shape[1])))
    used = np.flatnonzero(Xr.getnnz(axis=0))
    for rows in (64, 256, 600):
        source = InMemoryStore(Xr, y, range(10), chunk_rows=rows)
        with Engine(mode="inprocess") as engine:
            scan = engine.map_reduce(pp._scan_task, source, range(source.n_chunks))
        np.testing.assert_array_equal(scan.positives, np.bincount(y, minlength=10))
        c = scan.columns
        np.testing.assert_array_equal(c.ids, used)
        np.testing.assert_array_equal(c.nnz, Xr.getnnz(axis=0)[used])
        np.testing.assert_allclose(c.sums, np.asarray(Xr.sum(axis=0)).ravel()[used], rtol=1e-12)
        np.testing.assert_allclose(c.squares, np.asarray(Xr.power(2).sum(axis=0)).ravel()[used], rtol=1e-12)
        ids, scale = pp.standardized_columns(pp.PPDSparseParams(standardize=True), c, Xr.shape[0])
        np.testing.assert_allclose(scale, column_std(Xr)[used], rtol=1e-9)
    wide = sp.random(50, 1001, density=0.9, random_state=2, format="csr")
    assert pp.column_sums(wide).ids is None
    halves = pp.column_sums(wide[:, :600]) + pp.column_sums(sp.csr_matrix(wide[:, 600:].toarray()))
    assert halves.ids is not None and halves.ids.size == 600  # the second's columns are 0..400 again
    assert (
        pp.column_sums(wide[:, :600]) + pp.column_sums(sp.hstack([0 * wide[:, :600], wide[:, 600:]]).tocsr())
    ).ids is None


@pytest.mark.parametrize("data_name", ["digits", "multilabel"])
def test_held_out_rows_are_a_seeded_stratified_disjoint_cut(request, data_name):
    """lam auto's held-out rows: every 5th row of each first label's rows (so each label keeps
    1/5 of them out, ±1), the same for the same seed, another cut for another seed; split_data's
    fit part is build_data of the other rows, and its held-out part those rows, exactly."""
    X, labels = request.getfixturevalue(data_name)
    n_classes = 10 if data_name == "digits" else 6
    data = pp.build_data(InMemoryStore(X, labels, range(n_classes)))
    held = pp.held_out_rows(data, 0.2, seed=7)
    assert np.array_equal(held, pp.held_out_rows(data, 0.2, seed=7))
    assert not np.array_equal(held, pp.held_out_rows(data, 0.2, seed=8))
    Y = labels.toarray() > 0 if sp.issparse(labels) else np.arange(n_classes) == np.asarray(labels)[:, None]
    first = np.where(Y.any(axis=1), Y.argmax(axis=1), n_classes)
    for label in np.unique(first):
        rows = np.flatnonzero(first == label)
        assert abs(np.isin(rows, held).sum() - rows.size / 5) <= 1
    fit_rows = np.setdiff1d(np.arange(X.shape[0]), held)
    split = pp.split_data(data, 0.2, seed=7)
    direct = pp.build_data(InMemoryStore(X[fit_rows], labels[fit_rows], range(n_classes)))
    refit = sp.csr_matrix(
        (split.fit.values, split.fit.col_map[split.fit.indices], split.fit.indptr), (fit_rows.size, X.shape[1])
    )
    assert (refit != X[fit_rows]).nnz == 0
    assert np.array_equal(split.fit.pos_ptr, direct.pos_ptr) and np.array_equal(split.fit.pos_rows, direct.pos_rows)
    held_X = sp.csr_matrix(split.held_X)
    held_X = sp.csr_matrix((held_X.data, data.col_map[held_X.indices], held_X.indptr), (held.size, X.shape[1]))
    assert (held_X != X[held]).nnz == 0
    assert np.array_equal(split.held_Y.toarray() > 0, Y[held])


def test_choose_ratios_takes_the_sparsest_within_one_standard_error(digits, monkeypatch):
    """choose_ratios on scripted held-out losses (held_out_losses replaced): the path stops
    AUTO_PATIENCE points after its best mean loss, and the ratio is the largest whose mean is
    within s(best)/√K of the best's (K = 10 classes); a class whose best is the empty model gets
    ratio 1."""
    X, y = digits
    data = pp.build_data(InMemoryStore(X, y, range(10)))
    split = pp.split_data(data, 0.2, seed=0)
    path = pp.auto_path()
    assert path[0] == 1.0 and path[1] == pp.AUTO_FIRST_RATIO and path[-1] == pytest.approx(pp.AUTO_MIN_RATIO)
    n_held = split.held_X.shape[0]
    spread = np.where(np.arange(n_held) < n_held // 2, -1.0, 1.0)
    spread -= spread.mean()
    spread /= spread.std()  # mean 0, std 1: s = scale/√n_held
    scale = 0.1 * np.sqrt(10) * np.sqrt(n_held)  # s(best)/√K = 0.1
    # class 0: means 1, .5, .29, .2, .21, .25; .29 ≤ .2 + .1 < .5: ratio path[2]
    # class 1: the empty model is best (the means rise): ratio 1
    script = {0: [1.0, 0.5, 0.29, 0.2, 0.21, 0.25, 0.3], 1: [0.1, 0.11, 0.12, 0.13]}
    calls = {0: 0, 1: 0}

    def scripted(split, k, idx, val, bias):
        j = calls[k]
        calls[k] += 1
        return script[k][j] + (scale * spread if (k, j) == (0, 3) else 0.0 * spread)  # s = 0 elsewhere

    monkeypatch.setattr(pp, "held_out_losses", scripted)
    ratios = pp.choose_ratios(split, 0, 2, pp.PPDSparseParams(tau=1e-3))
    assert ratios.tolist() == [path[2], 1.0]
    assert calls == {0: 3 + 1 + pp.AUTO_PATIENCE, 1: 1 + pp.AUTO_PATIENCE}
    script[0][2] = 0.31  # just outside the slack: the next ratio down
    calls.update({0: 0, 1: 0})
    assert pp.choose_ratios(split, 0, 2, pp.PPDSparseParams(tau=1e-3)).tolist() == [path[3], 1.0]


def test_lam_auto_empties_classes_the_held_out_rows_cannot_predict(digits):
    """lam auto: a class whose labels are noise (drawn independently of X) gets the
    empty model w_k = 0 with bias ȳ_k/(1 + tau) (λmax_k's closed form), the digits' classes keep
    non-zero weights at lam_k = r_k·λmax_k with r_k < 1 a point of the path, and the weights meet
    the optimality conditions of (9) at those lam_k (λmax_k by the reference written here)."""
    X, y = digits[0][:300], digits[1][:300]
    noise = np.random.default_rng(5).random(X.shape[0]) < 0.1
    labels = np.where(noise, 10, y).astype(np.int32)
    n, tau = X.shape[0], 1e-3
    p = pp.PPDSparseParams(tau=tau, lam="auto", **TIGHT)
    data = pp.build_data(InMemoryStore(X, labels, range(11)))
    res = pp.solve_group(data, 0, 11, p, n, pp.split_data(data, p.held_out, p.random_state))
    counts = np.diff(res.indptr)
    assert counts[10] == 0 and (counts[:10] > 0).all()
    assert res.bias[10] == pytest.approx((2 * noise.sum() - n) / n / (1 + tau), rel=1e-12)
    Ys = signs(labels, 11)
    lam_k = res.stats[:, 5]
    ratios = lam_k / lam_max_reference(X.toarray(), Ys, tau)
    assert ratios[10] == pytest.approx(1.0, rel=1e-9) and (ratios[:10] < 1).all()
    assert np.abs(np.log10(ratios)[:, None] - np.log10(pp.auto_path())[None, :]).min(axis=1).max() < 1e-9
    W = sp.csr_matrix((res.values, res.indices, res.indptr), (11, X.shape[1])).toarray().T
    assert kkt_violation(X, Ys, W, res.bias, lam_k, tau).max() < 1e-6


@pytest.mark.parametrize(
    "options", [{"delta": 0.05}, {"delta": None, "x_threshold": 0.5}, {"delta": 0.2, "x_threshold": 0.3, "kappa": 3}]
)
def test_sparsified_search_reaches_the_same_optimum(multilabel, options):
    X, Y = multilabel
    lam, tau = 1e-3, 1e-2
    model, log = fit(InMemoryStore(X, Y, range(6)), lam=lam, tau=tau, **TIGHT, **options)
    assert_logged_objective(log, X, Y, model, lam, tau)
    W, b = dense_weights(model)
    Ys = signs(Y, 6)
    assert kkt_violation(X, Ys, W, b, lam, tau).max() < 1e-6
    assert model.multilabel and model.info["not_converged"] == 0


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_shrinking_and_kappa_schedule_reach_the_same_optimum(digits, loss):
    """Shrinking (LIBLINEAR) and the growing κ change the path, not the optimum: the paper's plain
    Algorithm 1 (fixed κ, no shrinking) and the default reach the same objective; the hinge's
    upper bound U = 1 exercises shrinking at both bounds."""
    X, y = digits
    lam, tau = 1e-3, 1e-3
    Ys = signs(y, 10)
    values = {}
    for shrink, growth in [(False, 0.0), (True, 0.0), (True, 1.0)]:
        model, _ = fit_as_given(
            InMemoryStore(X, y, range(10)),
            loss=loss,
            lam=lam,
            tau=tau,
            kappa=16,
            shrink=shrink,
            kappa_growth=growth,
            **TIGHT,
        )
        assert model.info["not_converged"] == 0
        values[shrink, growth] = objective(X, Ys, *dense_weights(model), lam, tau, loss)
    for v in values.values():
        np.testing.assert_allclose(v, values[False, 0.0], rtol=1e-7)
    if loss == "squared_hinge":
        W, b = dense_weights(model)
        assert kkt_violation(X, Ys, W, b, lam, tau).max() < 1e-6


def test_kappa_is_capped_at_the_class_positives(digits):
    """κ, the least number of samples a search adds, is at most the class's positives n⁺_k
    (solve_class): with a fixed κ (kappa_growth = 0) every κ ≥ n⁺_k runs the same path, bitwise,
    where an uncapped κ = 10·n⁺_k ≥ n would have put every row in A at the first search; a κ
    below n⁺_k takes another path (more searches) to the same optimum (the conditions of (9))."""
    X, y = digits
    lam, tau, k = 1e-3, 1e-3, 3
    n_pos = int((y == k).sum())
    Ys = signs(y, 10)[:, [k]]
    runs = {
        kappa: _solve_one(X, y, 10, k, lam, tau, kappa=kappa, kappa_growth=0.0)
        for kappa in (n_pos, 10 * n_pos, n_pos // 4)
    }
    capped, above, below = runs[n_pos], runs[10 * n_pos], runs[n_pos // 4]
    for a, b in zip(capped[:6], above[:6]):
        np.testing.assert_array_equal(a, b)
    assert below[3] > capped[3]  # iterations: a smaller κ needs more searches
    for idx, val, bias, *_ in runs.values():
        W = np.zeros((X.shape[1], 1))
        W[idx, 0] = val
        assert kkt_violation(X, Ys, W, np.array([bias]), lam, tau).max() < 1e-6


def _solve_one(X, labels, n_classes, k, lam, tau, **over):
    """solve_class for class k with TIGHT settings and `over`."""
    from streamfit.objectives.losses import OVR_HALF_SQUARED_HINGE
    from streamfit.solvers.ppdsparse_kernels import make_work, solve_class

    n = X.shape[0]
    data = pp.build_data(InMemoryStore(X, labels, range(n_classes)))
    o = {"kappa": 500, "kappa_growth": 1.0, "max_inner": 1000, "delta": 0.0, "primal_ratio": 0.0, **TIGHT, **over}
    out = solve_class(
        data,
        make_work(n, data.col_map.size),
        k,
        OVR_HALF_SQUARED_HINGE,
        n * lam,
        n * tau,
        o["kappa"],
        o["kappa_growth"],
        o["tol"],
        o["max_iter"],
        o["max_inner"],
        True,
        o["delta"],
        0.0,
        0,
        o["primal_ratio"],
    )
    idx = data.col_map[out[0]]  # the store's feature ids
    order = np.argsort(idx)
    return (idx[order], out[1][order], *out[2:])


@pytest.mark.parametrize("data_name", ["digits", "multilabel"])
def test_primal_newton_finish_reaches_the_optimum(request, data_name):
    """The primal finish (_primal_newton; forced: one epoch per coordinate descent, any active set)
    against the optimality conditions of (9) checked here, FISTA's objective and the dual-only path
    (primal_ratio=0); solve_class reports the Newton steps it took."""
    X, labels = request.getfixturevalue(data_name)
    n_classes = 10 if data_name == "digits" else 6
    lam, tau = (2e-3, 1e-3) if data_name == "digits" else (1e-3, 1e-2)
    Ys = signs(labels, n_classes)
    forced = {"primal_ratio": 1e-9, "max_inner": 1}
    model, _ = fit_as_given(InMemoryStore(X, labels, range(n_classes)), lam=lam, tau=tau, **{**TIGHT, **forced})
    assert model.info["not_converged"] == 0
    W, b = dense_weights(model)
    assert kkt_violation(X, Ys, W, b, lam, tau).max() < 1e-6
    W_ref, b_ref = fista(X, Ys, lam, tau)
    ours = objective(X, Ys, W, b, lam, tau, "squared_hinge")
    np.testing.assert_allclose(ours, objective(X, Ys, W_ref, b_ref, lam, tau, "squared_hinge"), rtol=1e-4)
    dual_only, _ = fit_as_given(InMemoryStore(X, labels, range(n_classes)), lam=lam, tau=tau, primal_ratio=0.0, **TIGHT)
    np.testing.assert_allclose(ours, objective(X, Ys, *dense_weights(dual_only), lam, tau, "squared_hinge"), rtol=1e-7)
    for k in (0, 3):
        idx, val, _, it, _, _, conv, dual, newton = _solve_one(X, labels, n_classes, k, lam, tau, **forced)
        assert conv and newton >= 1 and it == 1  # the Newton finish met the test itself
        np.testing.assert_array_equal(idx, model.coef_[k].indices)
        np.testing.assert_array_equal(val, model.coef_[k].data)
        # strong duality at the returned dual point: −G(α)/n equals F_k
        assert -dual / X.shape[0] == pytest.approx(ours[k], rel=1e-6)
    _, _, _, _, _, _, _, _, newton = _solve_one(X, labels, n_classes, 0, lam, tau)
    assert newton == 0  # primal_ratio=0: the paper's dual Algorithm 1 only


def test_primal_newton_falls_back_to_the_dual(digits, monkeypatch):
    """When the Newton finish stops short of the test (here: one Newton step allowed), Algorithm 1
    continues by coordinate descent from its dual point α = b(w) and still reaches the optimum
    (solve_class, Python, reads the patched step limit when it calls _primal_newton)."""
    import streamfit.solvers.ppdsparse_kernels as kern

    X, y = digits
    lam, tau = 2e-3, 1e-3
    Ys = signs(y, 10)
    monkeypatch.setattr(kern, "PRIMAL_MAX_NEWTON", 1)
    idx, val, bias, it, _, _, conv, _, newton = _solve_one(X, y, 10, 3, lam, tau, primal_ratio=1e-9, max_inner=1)
    assert conv and newton == 1 and it > 1
    w = np.zeros((X.shape[1], 1))
    w[idx, 0] = val
    assert kkt_violation(X, Ys[:, [3]], w, np.array([bias]), lam, tau)[0] < 1e-6


def test_stalled_newton_finish_still_ends_at_the_optimum(digits):
    """With tiny λ and τ the Newton finish stalls short of the test (its dual point's w(α) =
    prox(v)/σ magnifies the residual by 1/σ) on every class here; Algorithm 1 must then converge
    its coordinate descent before any search may end the class. (It used to stop at the first
    search that added no sample: KKT violations of 10²-10³.) primal_ratio = 2: the active set,
    grown from a class's ~60 positives by doubling, passes 2·(d + 1) = 130 samples before its
    coordinate descent converges."""
    X, y = digits
    lam, tau = 1e-5, 1e-5
    Ys = signs(y, 10)
    fell_back = 0
    for k in range(10):
        idx, val, bias, it, _, _, conv, _, newton = _solve_one(X, y, 10, k, lam, tau, primal_ratio=2.0, max_inner=5)
        assert conv and newton >= 1
        fell_back += it > 2
        w = np.zeros((X.shape[1], 1))
        w[idx, 0] = val
        assert kkt_violation(X, Ys[:, [k]], w, np.array([bias]), lam, tau)[0] < 1e-6, k
    assert fell_back >= 5


def test_local_curvature_step_never_increases_the_dual():
    """_local_step (curvature over supp(w) only, safeguarded, applied to v) against G of (10) evaluated here:
    G(α + Δ e_i) ≤ G(α) for every coordinate and state, the step never shorter than that of the
    global bound H_ii, the full local step taken often and, where it would overshoot, a step
    still longer than the global bound's."""
    from streamfit.solvers.ppdsparse_kernels import _local_step

    rng = np.random.default_rng(5)
    n, d, mu, sigma = 30, 12, 0.8, 0.7
    X = sp.random(n, d, density=0.4, random_state=6, format="csr") * 2.0
    y = np.where(rng.random(n) < 0.3, 1.0, -1.0)
    Xh = sp.hstack([X, np.ones((n, 1))]).toarray() * y[:, None]
    rows = X.indptr.astype(np.int64), X.indices.astype(np.int64), X.data

    def G(alpha):  # squared hinge: c = 1, U = ∞
        v = Xh.T @ alpha
        w = np.append(np.sign(v[:d]) * np.maximum(np.abs(v[:d]) - mu, 0.0), v[d]) / sigma
        return 0.5 * sigma * w @ w - alpha.sum() + 0.5 * alpha @ alpha

    taken = longer = 0
    for trial in range(200):
        alpha = rng.exponential(0.5, n) * (rng.random(n) < 0.7)
        v = Xh.T @ alpha
        i = trial % n
        u = np.sign(v[:d]) * np.maximum(np.abs(v[:d]) - mu, 0.0)
        x = X[i].toarray().ravel()
        g = y[i] * (x @ u + v[d]) / sigma - 1.0 + alpha[i]
        h = (x @ x + 1.0) / sigma + 1.0
        h_loc = (x[u != 0] @ x[u != 0] + 1.0) / sigma + 1.0
        a_safe = max(alpha[i] - g / h, 0.0)
        a_new = _local_step(*rows, v, i, alpha[i], g, h_loc, y[i], mu, 1.0 / sigma, 1.0, np.inf)
        full = a_new == max(alpha[i] - g / h_loc, 0.0)
        taken += full
        assert abs(a_new - alpha[i]) >= abs(a_safe - alpha[i]) - 1e-15
        longer += not full and abs(a_new - alpha[i]) > abs(a_safe - alpha[i]) + 1e-12
        moved = alpha.copy()
        moved[i] = a_new
        assert G(moved) <= G(alpha) + 1e-12
        np.testing.assert_allclose(v, Xh.T @ moved, atol=1e-12)  # the step applied to v = X̂ᵀα in place
    assert taken > 20 and longer > 0


def test_sparsification_is_unbiased():
    """Algorithm 3: E[w̃] = w, nnz(w̃) ≤ R, and the search covers only the sampled support."""
    from streamfit.solvers.ppdsparse_kernels import _sparsify, make_work

    work = make_work(5, 50)
    w = np.random.default_rng(0).normal(size=50) * (np.arange(50) % 3 == 0)
    sup = np.flatnonzero(w)
    l1 = np.abs(w).sum()
    delta = np.sqrt(2 / 8) * l1 * (1 + 1e-9)  # R = ⌈2‖w‖₁²/δ²⌉ = 8 < nnz(w) = 17
    total = np.zeros(50)
    reps = 4000
    for r in range(reps):
        work.rng[0] = r + 1
        work.sup_idx[: len(sup)] = sup
        work.sup_val[: len(sup)] = w[sup]
        m = _sparsify(work.sup_idx, work.sup_val, work.cum, work.counts, work.rng, len(sup), l1, delta)
        assert m <= 8
        np.add.at(total, work.sup_idx[:m], work.sup_val[:m])
    np.testing.assert_allclose(total / reps, w, atol=4 * l1 / np.sqrt(8 * reps))


@pytest.fixture(scope="module")
def local_engine():
    with Engine(mode="local", n_workers=2) as engine:
        yield engine


def test_same_model_any_workers_kill_and_resume(digits, tmp_path, local_engine, monkeypatch):
    X, y = digits
    classes = [str(c) for c in range(10)]
    store = write_store(tmp_path / "store", X, y, classes, chunk_rows=256)
    # lam auto: each class's ℓ1 weight chosen on held-out rows; primal_ratio 3: some
    # classes end in the primal Newton finish, the others in the dual alone
    # threads 1: the groups in order, one at a time (the kill below counts the calls)
    params = {"lam": "auto", "tau": 1e-3, "group_size": 2, "kappa": 20, "delta": 0.5, "primal_ratio": 3.0, "threads": 1}
    serial, serial_log = fit(store, str(tmp_path / "serial"), **params)
    parallel, parallel_log = fit(store, str(tmp_path / "parallel"), engine=local_engine, **params)
    threaded, threaded_log = fit(store, str(tmp_path / "threaded"), **{**params, "threads": 3})
    regrouped, _ = fit(store, str(tmp_path / "regrouped"), **{**params, "group_size": 3})
    assert serial.info["standardized"] is True  # digits/16's columns spread over 100x: standardized (auto)
    for other in (parallel, threaded, regrouped):
        assert (serial.coef_ != other.coef_).nnz == 0
        np.testing.assert_array_equal(serial.intercept_, other.intercept_)
    for other_log in (parallel_log, threaded_log):  # summed by class id, whatever the completion order
        assert other_log.records[-1]["objective"] == serial_log.records[-1]["objective"]

    run = str(tmp_path / "run")
    partial, _ = fit(store, run, stop_after=2, **params)  # a time-boxed first call
    assert partial.info["groups_finished"] == 2
    real = pp.solve_group
    calls = []

    def killed(data, lo, hi, *args):
        calls.append(lo)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(data, lo, hi, *args)

    monkeypatch.setattr(pp, "solve_group", killed)
    with pytest.raises(KeyboardInterrupt):
        fit(store, run, resume=True, **params)
    monkeypatch.setattr(pp, "solve_group", real)
    calls.clear()
    monkeypatch.setattr(pp, "solve_group", lambda data, lo, hi, *a: calls.append(lo) or real(data, lo, hi, *a))
    monkeypatch.setattr(pp, "_scan_task", None)  # a resume takes the positives and the columns' s from the state
    resumed, _ = fit(store, run, resume=True, **params)
    assert len(calls) == 5 - 3  # only the unfinished groups were redone
    assert (serial.coef_ != resumed.coef_).nnz == 0
    np.testing.assert_array_equal(serial.intercept_, resumed.intercept_)
    with open(os.path.join(run, "metrics.jsonl")) as f:
        steps = [json.loads(line)["step"] for line in f]
    assert steps == [1, 2, 3, 4, 5] and len(serial_log.records) == 5


def test_pauses_of_one_instance_with_groups_in_flight(digits, tmp_path):
    """threads=3 solve groups ahead of the steps, so a pause leaves groups in flight on the
    solver instance; resuming on the same instance drops them and submits the unfinished groups
    again: the model of an uninterrupted run, each group logged once."""
    X, y = digits
    source = InMemoryStore(X, y, [str(c) for c in range(10)])
    params = {"lam": 1e-3, "tau": 1e-3, "group_size": 2, "kappa": 20, "threads": 3}
    full, _ = fit(source, **params)
    solver = pp.PPDSparseSolver(pp.PPDSparseParams(**params))
    ckpt = Checkpointer(str(tmp_path / "run"), config=solver.params.model_settings(), store_fingerprint="in-memory")
    logged = []
    with Engine(mode="inprocess") as engine:
        for resume in (False, True, True):
            log = MetricsLog(None)
            model = solver.fit(source, engine=engine, checkpointer=ckpt, log=log, resume=resume, stop_after=2)
            logged += [r["group"] for r in log.records]
    assert sorted(logged) == [0, 1, 2, 3, 4] and model.info["converged"]
    assert (full.coef_ != model.coef_).nnz == 0
    np.testing.assert_array_equal(full.intercept_, model.intercept_)


def group_task_dies_once(g, marker, die_at, **kwargs):
    """ppdsparse's group task, except that group `die_at` kills its worker the first time."""
    if g == die_at and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return pp._group_task(g, **kwargs)


def test_a_lost_worker_costs_its_groups_only(digits, tmp_path, local_engine, monkeypatch, caplog):
    """A worker dies under a group (the scheduler's allowed-failures at 0, so its task fails at once
    with KilledWorker instead of Dask rerunning it): the run goes on, the unfinished groups are
    submitted again, and the model is bitwise the undisturbed one."""
    X, y = digits
    store = write_store(tmp_path / "store", X, y, [str(c) for c in range(10)], chunk_rows=256)
    params = {"lam": 1e-3, "tau": 1e-3, "group_size": 2, "kappa": 20, "delta": 0.5, "primal_ratio": 3.0}
    serial, _ = fit(store, str(tmp_path / "serial"), **params)
    marker = tmp_path / "died"
    monkeypatch.setattr(pp, "_group_task", functools.partial(group_task_dies_once, marker=str(marker), die_at=2))
    monkeypatch.setattr(local_engine.cluster.scheduler, "allowed_failures", 0)
    with caplog.at_level("WARNING", logger="streamfit.engine"):
        model, log = fit(store, str(tmp_path / "run"), engine=local_engine, **params)
    assert marker.exists()
    assert (serial.coef_ != model.coef_).nnz == 0
    np.testing.assert_array_equal(serial.intercept_, model.intercept_)
    assert sorted(r["group"] for r in log.records) == [0, 1, 2, 3, 4] and model.info["converged"]
    [warning] = [m for m in caplog.messages if "was lost" in m]  # (besides the worker's "left the cluster")
    assert warning.startswith("ppdsparse: groups: a Dask worker was lost (KilledWorker: ")


@pytest.mark.parametrize("valid_every", [1, 2, 3])
def test_valid_store_is_evaluated_on_the_last_step_only(digits, tmp_path, valid_every):
    """train --valid: a model with some classes untrained means nothing, so only the last step
    (all groups finished) is validated, whatever valid_every (5 groups: step 5 is no multiple of
    2 or 3); it was never validated (logged without the model). A resume validates it too."""
    X, y = digits
    classes = [str(c) for c in range(10)]
    train = InMemoryStore(X[:450], y[:450], classes, chunk_rows=256)
    valid = InMemoryStore(X[450:], y[450:], classes, chunk_rows=256)
    params = {"lam": 1e-3, "tau": 1e-3, "group_size": 2, "kappa": 20}
    model, log = fit(train, valid=valid, valid_every=valid_every, **params)
    assert [r["step"] for r in log.records] == [1, 2, 3, 4, 5]
    assert [r["step"] for r in log.records if any(k.startswith("valid_") for k in r)] == [5]
    assert log.records[-1]["valid_accuracy"] == (model.predict(X[450:]) == np.array(classes)[y[450:]]).mean()
    assert log.valid_every == valid_every
    run = str(tmp_path / "run")
    fit(train, run, stop_after=2, valid=valid, valid_every=valid_every, **params)
    _, resumed = fit(train, run, resume=True, valid=valid, valid_every=valid_every, **params)
    assert [r["step"] for r in resumed.records if "valid_accuracy" in r] == [5]
    assert resumed.records[-1]["valid_accuracy"] == log.records[-1]["valid_accuracy"]


def test_classes_not_converged_warn_and_the_model_says_converged_false(digits, caplog):
    X, y = digits
    source = InMemoryStore(X, y, [str(c) for c in range(10)])
    with caplog.at_level("WARNING", logger="streamfit.solvers.driver"):
        model, log = fit_as_given(
            source, lam=1e-3, tau=1e-3, kappa=5, kappa_growth=0, tol=1e-9, max_iter=2, group_size=1
        )
    assert model.info["converged"] is False and model.info["not_converged"] > 5
    assert sum(r["not_converged"] for r in log.records) == model.info["not_converged"]
    assert_logged_objective(log, X, y, model, 1e-3, 1e-3)  # the primal value, above the dual short of the optimum
    assert log.records[-1]["objective"] > sum(r["dual_objective"] for r in log.records) / X.shape[0] * (1 + 1e-3)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "streamfit.solvers.driver"]
    assert warning.startswith(
        f"ppdsparse: not converged after 10 steps: {model.info['not_converged']} of 10 classes (ids 0, 1, "
    )
    assert warning.endswith(
        ", ...) stopped at max_iter=2 iterations with a projected dual gradient > tol 1e-09; "
        "raise -p max_iter or loosen -p tol"
    )
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamfit.solvers.driver"):
        model, _ = fit_as_given(source, lam=1e-3, tau=1e-3)
        partial, _ = fit_as_given(source, lam=1e-3, tau=1e-3, tol=1e-9, max_iter=2, stop_after=1, group_size=1)
    assert model.info["converged"] is True and model.info["not_converged"] == 0
    assert partial.info["converged"] is False  # not all classes trained
    assert not [r for r in caplog.records if r.name == "streamfit.solvers.driver"]


def test_resume_keeps_the_checkpoints_group_cut(digits, tmp_path, monkeypatch):
    """group_size does not change the model, so it is not part of the checkpointed settings; its
    finished groups are indices of the checkpoint's cut, so a default resume keeps that cut even
    where the default would now cut otherwise, and an explicit other group_size is refused."""
    X, y = digits
    store = write_store(tmp_path / "store", X, y, [str(c) for c in range(10)], chunk_rows=256)
    params = {"lam": 1e-3, "tau": 1e-3, "kappa": 20, "delta": 0.5}
    run = str(tmp_path / "run")
    monkeypatch.setattr(pp, "MIN_GROUP_WORK", 1)  # the default cut by count alone: one class per group
    fit(store, run, stop_after=3, **params)
    monkeypatch.setattr(pp, "DEFAULT_GROUPS", 4)  # a default that would cut groups of 3
    with pytest.raises(ConfigError, match="resume with -p group_size=1"):
        fit(store, run, resume=True, **{**params, "group_size": 3})
    resumed, _ = fit(store, run, resume=True, **params)
    full, _ = fit(store, None, **params)
    assert (full.coef_ != resumed.coef_).nnz == 0
    np.testing.assert_array_equal(full.intercept_, resumed.intercept_)


def test_threads_default_to_the_cpus_of_this_process_in_process_only():
    """threads None: in process, one thread per CPU in this process's affinity mask (what a
    `taskset` or a container's cpuset allows); on a cluster the workers solve the groups, 1."""
    default = pp.PPDSparseParams()
    assert default.threads is None
    in_process = Engine(mode="inprocess")
    assert pp.solver_threads(default, in_process) == len(os.sched_getaffinity(0))
    assert pp.solver_threads(pp.PPDSparseParams(threads=3), in_process) == 3
    assert pp.solver_threads(default, Engine(mode="local")) == 1


def test_default_cut_gives_small_jobs_few_groups(digits):
    """group_size None: about DEFAULT_GROUPS groups, but at least MIN_GROUP_WORK rows × classes a
    group and at least `threads` groups; a small set is one step, with the model of one class
    per group."""
    assert pp.default_group_size(23, 1455, 1) == 23  # sector-23: one group (was 23)
    assert pp.default_group_size(23, 1455, 4) == 6  # 4 threads: 4 groups
    assert pp.default_group_size(105, 6412, 1) == 6  # sector: 18 groups (was 105)
    assert pp.default_group_size(983, 12920, 1) == 16  # delicious: by count, as before
    assert pp.default_group_size(20, 10**6, 1) == 1
    X, y = digits
    source = InMemoryStore(X, y, [str(c) for c in range(10)])
    model, log = fit(source, lam=1e-3, tau=1e-3, threads=1)
    assert [r["classes"] for r in log.records] == [[0, 10]]  # 600 rows × 10 classes: one step
    per_class, log1 = fit(source, lam=1e-3, tau=1e-3, group_size=1)
    assert len(log1.records) == 10
    assert (model.coef_ != per_class.coef_).nnz == 0
    np.testing.assert_array_equal(model.intercept_, per_class.intercept_)
    assert log.records[-1]["objective"] == log1.records[-1]["objective"]


def test_model_topk_and_save_load(digits, tmp_path, monkeypatch):
    X, y = digits
    model, _ = fit(InMemoryStore(X, y, range(10)), lam=1e-3, tau=1e-3)
    S = model.decision_function(X)
    top, scores = model.predict_topk(X, 3)
    np.testing.assert_array_equal(top, np.argsort(-S, axis=1, kind="stable")[:, :3])
    np.testing.assert_allclose(scores, np.take_along_axis(S, top, axis=1))
    assert model.model_size == model.coef_.nnz * 12 + 11 * 8 + 10 * 8
    model.save(str(tmp_path / "m"))
    loaded = load_model(str(tmp_path / "m"))
    assert isinstance(loaded, pp.PPDSparseModel) and sp.issparse(loaded.coef_)
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert (model.predict(X) == np.array([str(c) for c in y])).mean() > 0.95


def test_columns_sorted_by_magnitude_then_row():
    """build_data's CSC (the search's §5.3 early stop): per column decreasing |x_ij|, ties by
    row, the order of a global lexsort over (column, −|x|, row); long columns (argsort) and short
    ones (insertion sort)."""
    rng = np.random.default_rng(2)
    X = sp.hstack(
        [sp.random(300, 20, density=0.2, random_state=3), sp.random(300, 20, density=0.04, random_state=4)],
        format="csr",
    )
    assert (np.diff(X.tocsc().indptr) <= 32).sum() >= 15 and (np.diff(X.tocsc().indptr) > 32).sum() >= 15
    X.data = rng.integers(-3, 4, X.nnz).astype(float) + 0.5  # many ties in |x|, both signs
    data = pp.build_data(InMemoryStore(X, np.zeros(300, np.int32), range(1)), by_magnitude=True)
    counts = np.diff(X.tocsc().indptr)  # the kernels' features: used ones, most frequent first
    np.testing.assert_array_equal(data.col_map, np.lexsort((np.arange(40), -counts))[: np.count_nonzero(counts)])
    C = X.tocsc()[:, data.col_map]
    C.sort_indices()
    order = np.lexsort((C.indices, -np.abs(C.data), np.repeat(np.arange(C.shape[1]), np.diff(C.indptr))))
    np.testing.assert_array_equal(data.col_rows, C.indices[order])
    np.testing.assert_array_equal(data.col_vals, C.data[order])


def test_topk_kernel_matches_a_stable_sort_with_ties():
    """topk_rows against argsort(−S, stable) on scores with many exact ties (equal rows of W,
    integer weights), empty rows, k = K and negative scores."""
    rng = np.random.default_rng(7)
    W = sp.random(40, 30, density=0.2, random_state=8, format="csr")
    W.data = rng.integers(-2, 3, W.nnz).astype(float)
    W = sp.vstack([W, W[:5]], format="csr")  # classes 40-44 tie with 0-4 everywhere
    b = rng.integers(-1, 2, 45).astype(float)
    X = sp.random(60, 30, density=0.1, random_state=9, format="csr")
    X.data = rng.integers(1, 3, X.nnz).astype(float)
    model = pp.PPDSparseModel(W, b, classes=range(45), n_features=30)
    S = (X @ W.T).toarray() + b
    assert 0 < model._by_feature()[4].shape[0] < 30  # features stored dense and sparse both occur
    for k in (1, 5, 45):
        top, scores = model.predict_topk(X, k)
        np.testing.assert_array_equal(top, np.argsort(-S, axis=1, kind="stable")[:, :k])
        np.testing.assert_array_equal(scores, np.take_along_axis(S, top, axis=1))


def test_estimator(multilabel):
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = X / np.abs(X).max(axis=0)
    clf = PPDSparseClassifier(lam=1e-4, tau=1e-3, loss="hinge").fit(X, y + 10)
    assert sp.issparse(clf.coef_) and clf.coef_.shape == (3, 13)
    assert set(clf.predict(X)) <= {10, 11, 12} and clf.score(X, y + 10) > 0.9
    labels, _ = clf.predict_topk(X, 2)
    assert labels.shape == (len(y), 2)
    assert clone(clf).get_params() == clf.get_params()
    # primal_ratio reaches the solver: for 0 (the dual path only) and the default (which may
    # finish by Newton), the estimator's model is bitwise the solver's with that primal_ratio
    sq = {"lam": 1e-5, "tau": 1e-5}
    source = InMemoryStore(sp.csr_matrix(X), y, range(3))
    by_ratio = {}
    for ratio in (0.0, pp.PPDSparseParams().primal_ratio):
        clf = PPDSparseClassifier(primal_ratio=ratio, **sq).fit(X, y)
        by_ratio[ratio], _ = fit(source, primal_ratio=ratio, **sq)
        np.testing.assert_array_equal(clf.coef_.toarray(), by_ratio[ratio].coef_.toarray())
        np.testing.assert_array_equal(clf.intercept_, by_ratio[ratio].intercept_)
    dual_only, default = by_ratio.values()
    assert (dual_only.coef_ != default.coef_).nnz > 0  # the two paths end apart within tol: the check can fail

    # multilabel: the model is the solver's, predict is its scores above its fitted threshold, score the
    # subset accuracy
    Xm, Y = multilabel
    ml = PPDSparseClassifier(lam=1e-4, tau=1e-2).fit(Xm, Y.toarray())
    model, log = fit(InMemoryStore(Xm, Y, range(6)), lam=1e-4, tau=1e-2)
    np.testing.assert_array_equal(ml.coef_.toarray(), model.coef_.toarray())
    np.testing.assert_array_equal(ml.intercept_, model.intercept_)
    assert ml.model_.decision_threshold == model.decision_threshold != 0
    predicted = ml.predict(Xm)
    scores = Xm @ model.coef_.T + model.intercept_
    np.testing.assert_array_equal(predicted, (scores > model.decision_threshold).astype(predicted.dtype))
    assert ml.score(Xm, Y) == np.mean((predicted == Y.toarray()).all(axis=1))
    groups = -(-6 // pp.default_group_size(6, 400, len(os.sched_getaffinity(0))))  # one a thread (threads None)
    assert len(ml.history_) == len(log.records) == groups  # 400 rows × 6 labels: one group a thread


def test_multilabel_threshold_is_the_best_training_micro_f1(multilabel, digits, tmp_path, local_engine):
    """Multilabel, fit_threshold (the default): the model's decision threshold is the t of
    -0.99, -0.98, ..., 0.99 whose rule "score > t" has the best micro-F1 on the training rows
    (scikit-learn's f1_score here, the one nearest 0 on ties), the same on a store of 64-row chunks
    counted by 2 Dask workers; fit_threshold=False and a multiclass model keep 0."""
    from sklearn.metrics import f1_score

    X, Y = multilabel
    params = {"lam": 3e-3, "tau": 1e-2}
    model, _ = fit(InMemoryStore(X, Y, range(6)), **params)
    scores = np.asarray(X @ model.coef_.T + model.intercept_)
    grid = np.arange(-99, 100) / 100
    f1 = np.array([f1_score(Y.toarray(), scores > t, average="micro") for t in grid])
    best = grid[f1 == f1.max()]
    assert f1.max() > f1[99] + 0.01  # the fitted threshold beats 0 here: the test can fail
    assert model.decision_threshold == best[np.argmin(np.abs(best))]
    store = write_store(tmp_path / "ml", X, Y, [str(k) for k in range(6)], chunk_rows=64)
    chunked, _ = fit(store, engine=local_engine, **params)
    assert chunked.decision_threshold == model.decision_threshold
    plain, _ = fit(InMemoryStore(X, Y, range(6)), fit_threshold=False, **params)
    assert plain.decision_threshold == 0.0
    np.testing.assert_array_equal(plain.coef_.toarray(), model.coef_.toarray())
    X, y = digits
    assert fit(InMemoryStore(X, y, range(10)), max_iter=5)[0].decision_threshold == 0.0


def test_saves_wait_while_finished_groups_wait():
    """A checkpoint is put off while the next finished group is already there (Unordered.ready),
    and comes at the first step after which none waits, once `every` steps have passed since
    the last save (`saved_at`, which the driver keeps: a due step it does not save, held back
    by checkpoint_interval, leaves the next step due)."""
    from streamfit.engine import Unordered

    solver = pp.PPDSparseSolver(pp.PPDSparseParams())
    state = pp.PPDSparseState(n_classes=10, group_size=1)
    waiting = [False]
    solver._running = Unordered((x for x in ()), lambda: waiting[0])
    saved_at = [0]

    def due(every, pattern, save=True):
        out = []
        for w in pattern:
            state.step += 1
            waiting[0] = w
            out.append(solver.checkpoint_due(state, every, saved_at[0]))
            if out[-1] and save:  # as the driver does when it saves
                saved_at[0] = state.step
        return out

    assert due(1, [True, True, False, False, True, False]) == [False, False, True, True, False, True]
    assert due(2, [False, False, True, False, False, False]) == [False, True, False, True, False, True]
    assert due(2, [False, False, True, False], save=False) == [False, True, False, True]  # none saved
    solver._running = None  # the last group taken in: nothing in flight
    assert due(1, [True]) == [True]


def test_training_matrix_is_built_once_per_machine_and_mapped(digits, tmp_path, monkeypatch):
    """The first worker process builds the matrix and writes it; the others (here: a second
    call) map the files: the same arrays, writable (numba's compiled signatures), no second build;
    the run's clean-up deletes them."""
    import tempfile

    X, y = digits
    source = InMemoryStore(X, y, [str(c) for c in range(10)])
    built = pp.build_data(source)
    builds = []
    monkeypatch.setattr(pp, "build_data", lambda *a: builds.append(1) or built)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    ref = pp._DataRef(source, "run-0", False, False, None)
    first, second = pp._machine_data(ref), pp._machine_data(ref)
    assert builds == [1]
    for name in pp.Data._fields:
        for got in (getattr(first, name), getattr(second, name)):
            assert got.flags.writeable and type(got) is np.ndarray
            np.testing.assert_array_equal(got, getattr(built, name))
            assert got.dtype == getattr(built, name).dtype
    assert os.path.isdir(pp.shared_data_dir("run-0"))
    pp.drop_shared_data("run-0")
    assert os.listdir(tmp_path) == []


_HUGE_ROWS_FIT = """
from sklearn.datasets import load_wine
from streamfit import PPDSparseClassifier
X, y = load_wine(return_X_y=True)
model = PPDSparseClassifier(lam=1e-3, standardize=False, max_iter=40).fit(X * 1e8, y)
assert model.score(X * 1e8, y) > 0.5
"""


def test_an_unconverged_descent_doubles_its_epoch_budget_a_bounded_number_of_times():
    """Rows of norm ~1e11 with an explicit lam (no data_scale rescaling): Algorithm 2's descent
    never converges within its budget, which each such iteration doubles. Before the cap
    (MAX_INNER_DOUBLINGS) 40 iterations allowed 5·2^40 epochs, a fit that does not end (the qa26
    finding: wine ×1e8 still running after 60 s); now max_iter bounds a class's work (timeout: a
    cold numba cache compiles the kernels first)."""
    warnings_off = {**os.environ, "PYTHONWARNINGS": "ignore"}
    child = subprocess.run(
        [sys.executable, "-c", _HUGE_ROWS_FIT], capture_output=True, text=True, timeout=300, env=warnings_off
    )
    assert child.returncode == 0, child.stderr[-2000:]


def test_columns_far_from_zero_get_one_warning_naming_the_column_and_the_fix(caplog):
    """qa28: ppdsparse's defaults fell to chance (16.7 % on 6 classes) on dense columns with
    offsets, silently; the warning names the column and the fix, and stays quiet on centred data."""
    from streamfit import PPDSparseClassifier

    centred, shifted, y = offset_data()
    with caplog.at_level("WARNING", logger="streamfit.solvers.ppdsparse"):
        PPDSparseClassifier().fit(shifted, y)
    [warning] = [r.getMessage() for r in caplog.records if r.name == "streamfit.solvers.ppdsparse"]
    assert warning.startswith("ppdsparse: 1 of the 4 training columns sit far from zero: column 2's mean is 1e+03×")
    assert warning.endswith("subtract each such column's mean (or a round number near it) before ingest")
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamfit.solvers.ppdsparse"):
        PPDSparseClassifier().fit(centred, y)
    assert not [r for r in caplog.records if r.name == "streamfit.solvers.ppdsparse"]


def test_a_class_without_training_rows_is_never_predicted():
    """tools/check_empty_class.py's seed 2 (session 26): one-vs-rest gives the class without
    rows its bias alone (about -0.94), which beat every real class on one of the 300 rows. The
    model records the class (the driver counts each class's rows) and its predict, top-k kernel
    and scores-based decision rank it last."""
    rng = np.random.default_rng(2)
    X = sp.csr_matrix(rng.random((300, 20)) * (rng.random((300, 20)) < 0.3))
    z = X[:, :3].toarray().argmax(axis=1).astype(np.int32)
    model, _ = fit_solver("ppdsparse", InMemoryStore(X, z, ["a", "b", "c", "spare"]))
    assert model.classes_without_rows == ["spare"]
    assert "spare" not in model.predict(X)
    assert (model.predict_topk(X, 3)[0] != 3).all()
    assert (model.top_k(model.decision_function(X), 3)[0] != 3).all()
    top, scores = model.predict_topk(X, 4)
    assert (top[:, 3] == 3).all()
    np.testing.assert_allclose(scores[:, 3], model.decision_function(X)[:, 3])
    model.set_classes_without_rows([])  # the rule off: the same data then predicts the empty class
    assert (model.predict(X) == "spare").sum() >= 1


def test_default_primal_switch_acts_on_fewer_rows_than_eight_times_the_features(digits):
    """The default primal_ratio (2 since session 29): on 400 digits rows, fewer than 8·(d + 1) =
    520 samples (where the switch at the former default 8 could never act) but more than
    2·(d + 1) = 130, a class whose coordinate descent crawls (tiny λ and τ) is finished by the
    Newton method with the default epoch budget, and ends at the optimum of (9)."""
    X, y = digits
    X, y = X[:400], y[:400]
    defaults = pp.PPDSparseParams()
    assert 2 * (X.shape[1] + 1) <= X.shape[0] < 8 * (X.shape[1] + 1)
    lam, tau = 1e-5, 1e-5
    Ys = signs(y, 10)
    for k in range(3):
        idx, val, bias, _, _, _, conv, _, newton = _solve_one(
            X, y, 10, k, lam, tau, primal_ratio=defaults.primal_ratio, max_inner=defaults.max_inner
        )
        assert conv and newton >= 1, k
        w = np.zeros((X.shape[1], 1))
        w[idx, 0] = val
        assert kkt_violation(X, Ys[:, [k]], w, np.array([bias]), lam, tau)[0] < 1e-6, k
