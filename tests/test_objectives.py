"""streamfit.objectives, tested as scikit-learn tests its LinearModelLoss: derivatives against
finite differences, dense == sparse, chunked sums == whole, closed-form values on tiny examples,
weak duality and its equality at an optimum found by a peer library, and the constant
conventions (C ↔ λ) checked by the optimality of scikit-learn's solutions under our gradient."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.optimize import minimize
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.svm import LinearSVC

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.objectives import (
    ChunkSums,
    ClassBlockPenalty,
    ElasticNetWithBias,
    Objective,
    RowPenalty,
    StageRidge,
    objective_for,
)
from streamfit.objectives import penalties as rp
from streamfit.objectives.links import link_residual
from streamfit.objectives.losses import LOSSES, label_lists, loss_sum
from streamfit.runlog import MetricsLog
from streamfit.solvers import get_solver
from streamfit.solvers.bcd import BCDParams
from streamfit.solvers.fbpd import FBPDParams
from streamfit.solvers.ppdsparse import PPDSparseParams
from streamfit.solvers.stagewise import StagewiseParams
from streamfit.store import InMemoryStore

N, D, M = 40, 6, 4
MULTICLASS_ONLY = {"logistic", "crammer_singer_hinge"}


def data(seed=0, n=N, d=D, m=M):
    """(X dense, class ids, CSR 0/1 indicator with 0 to 3 labels per row)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)) * (rng.random((n, d)) < 0.7)
    y = rng.integers(0, m, n)
    Y = sp.csr_matrix((rng.random((n, m)) < 0.35).astype(np.float64))
    return X, y, Y


LOSS_CASES = [(name, ml) for name in LOSSES for ml in (False, True) if not (ml and name in MULTICLASS_ONLY)]

# (solver, params, multilabel): every solver's objective, with smooth and non-smooth penalties
CONFIGS = [
    ("bcd", BCDParams(loss="squared_hinge", penalty="l1/l2", lam=0.1), False),
    ("bcd", BCDParams(loss="squared_hinge", penalty="sparse_group", lam=0.1, l1_ratio=0.3), True),
    ("bcd", BCDParams(loss="multitask_squared_hinge", penalty="l1", lam=0.1), True),
    ("bcd", BCDParams(loss="logistic", penalty="l2", lam=0.3), False),
    ("bcd", BCDParams(loss="logistic", penalty="elasticnet", lam=0.3, l1_ratio=0.6), False),
    ("bcd", BCDParams(loss="squared_hinge", penalty="group_elasticnet", lam=0.2, l1_ratio=0.3), False),
    ("ppdsparse", PPDSparseParams(loss="squared_hinge", lam=0.05, tau=0.2), True),
    ("ppdsparse", PPDSparseParams(loss="hinge", lam=0.0, tau=0.2), False),
    ("fbpd", FBPDParams(penalty="l1", lam=0.1), False),
    ("fbpd", FBPDParams(penalty="l1/l2", lam=0.1, group_size=4), False),
    ("fbpd", FBPDParams(penalty="l1/linf", lam=0.1, group_size=4), False),
    ("fbpd", FBPDParams(penalty="l2", lam=0.3), False),
    ("fbpd", FBPDParams(formulation="constrained", penalty="l1", eta=0.2), False),
    ("stagewise", StagewiseParams(link="identity", lam=0.2), False),
    ("stagewise", StagewiseParams(link="softmax", lam=0.2), False),
    ("stagewise", StagewiseParams(link="softmax", lam=0.2), True),
]
CONFIG_IDS = [f"{s}-{i}" for i, (s, _, _) in enumerate(CONFIGS)]


def point(seed=1, d=D, m=M):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(d, m)) * 0.5, rng.normal(size=m) * 0.3


def nonsmooth_gradient(penalty, W):
    """Gradient of the non-smooth part of P at W without zero entries (where it is differentiable)."""
    if isinstance(penalty, RowPenalty):
        lam, rho = penalty.lam, penalty.rho
        row = W / np.linalg.norm(W, axis=1, keepdims=True)
        return {
            rp.L1L2: lam * row,
            rp.L1: lam * np.sign(W),
            rp.L2: 0 * W,
            rp.ELASTICNET: lam * rho * np.sign(W),
            rp.SPARSE_GROUP: lam * (rho * np.sign(W) + (1 - rho) * row),
            rp.GROUP_ELASTICNET: lam * rho * row,
        }[penalty.code]
    if isinstance(penalty, ElasticNetWithBias):
        return penalty.lam * np.sign(W)
    if isinstance(penalty, ClassBlockPenalty):
        g, w = penalty.group_size, penalty.weight
        if penalty.kind == "l1":
            return w * np.sign(W)
        if penalty.kind == "l2":
            return 0 * W
        out = np.zeros_like(W)
        for k in range(W.shape[1]):
            for j0 in range(0, W.shape[0], g):
                v = W[j0 : j0 + g, k]
                if penalty.kind == "l1/l2":
                    out[j0 : j0 + g, k] = w * v / np.linalg.norm(v)
                else:
                    top = np.argmax(np.abs(v))
                    out[j0 + top, k] = w * np.sign(v[top])
        return out
    return 0 * W


# -- per-sample losses ---------------------------------------------------------------------------


@pytest.mark.parametrize("loss,multilabel", LOSS_CASES)
def test_loss_derivatives_match_finite_differences(loss, multilabel):
    """D = ∂ℓ/∂s against central differences of the loss sum, and H (the generalized second
    derivatives) against central differences of D, at every entry of a random score matrix."""
    _, y, Y = data(n=12)
    labels = Y if multilabel else y
    S = np.random.default_rng(3).normal(size=(12, M))
    obj = Objective(LOSSES[loss], StageRidge(0.0), fit_intercept=False)
    total, Dv, H = obj.derivatives(S, labels, 2)
    assert total == pytest.approx(loss_sum(LOSSES[loss], S, labels), rel=1e-14)
    eps = 1e-6
    for i in range(S.shape[0]):
        for r in range(M):
            E = np.zeros_like(S)
            E[i, r] = eps
            fd = (loss_sum(LOSSES[loss], S + E, labels) - loss_sum(LOSSES[loss], S - E, labels)) / (2 * eps)
            assert abs(fd - Dv[i, r]) <= 1e-6 * max(1.0, abs(fd))
            fd2 = (obj.derivatives(S + E, labels, 1)[1][i, r] - obj.derivatives(S - E, labels, 1)[1][i, r]) / (2 * eps)
            assert abs(fd2 - H[i, r]) <= 1e-5 * max(1.0, abs(fd2))


def test_closed_form_values():
    """Each loss on two tiny score vectors, by hand."""
    S = np.array([[0.0, 0.0, 0.0], [0.2, 0.5, -1.0]])
    y = np.array([2, 0])

    def value(name):
        return loss_sum(LOSSES[name], S, y)

    lse = np.log(np.exp(0.2) + np.exp(0.5) + np.exp(-1.0))
    expected = {
        "squared_hinge": 2.0 + 1.3**2,  # row 2: a = 1 − 0.2 + 0.5 = 1.3, 1 − 0.2 − 1 < 0
        "multitask_squared_hinge": 3.0 + 0.8**2 + 1.5**2,
        "logistic": np.log(3.0) + lse - 0.2,
        "ovr_hinge": 3.0 + 0.8 + 1.5,
        "ovr_half_squared_hinge": 1.5 + 0.5 * (0.8**2 + 1.5**2),
        "crammer_singer_hinge": 1.0 + 1.3,
        "squared": 0.5 + 0.5 * (0.8**2 + 0.5**2 + 1.0),
        "sigmoid_logistic": 3 * np.log(2.0) + sum(np.log1p(np.exp(s)) for s in S[1]) - 0.2,
    }
    assert set(expected) == set(LOSSES)
    for name, v in expected.items():
        assert value(name) == pytest.approx(v, rel=1e-14), name


def test_link_losses_are_the_coded_losses():
    """stagewise's vectorised link losses (eq. 13) and residuals Y − g(U) agree with the coded
    losses and −∂ℓ/∂s (identity: the link sum has no ½)."""
    _, y, Y = data()
    U = np.random.default_rng(4).normal(size=(N, M))
    onehot = np.eye(M)[y]
    for link, name, Yd, labels, factor in (
        ("identity", "squared", onehot, y, 2.0),
        ("softmax", "logistic", onehot, y, 1.0),
        ("sigmoid", "sigmoid_logistic", Y.toarray(), Y, 1.0),
    ):
        R, total = link_residual(U, Yd, link)
        obj = Objective(LOSSES[name], StageRidge(0.0), fit_intercept=False)
        s, Dv, _ = obj.derivatives(U, labels, 1)
        assert total == pytest.approx(factor * s, rel=1e-13), link
        np.testing.assert_allclose(R, -Dv, rtol=1e-13, atol=1e-15)


def test_label_lists_of_read_only_multilabel_chunk_labels():
    """A store's chunk labels are read-only (the bcd chunks mode crashed in eliminate_zeros):
    label_lists reads them without writing, explicit zeros dropped."""
    Y = sp.csr_matrix(
        (np.array([1, 0, 1, 1], np.int8), np.array([0, 1, 2, 1], np.int32), np.array([0, 3, 3, 4], np.int32)),
        shape=(3, 3),
    )
    for a in (Y.data, Y.indices, Y.indptr):
        a.flags.writeable = False
    before = [a.copy() for a in (Y.data, Y.indices, Y.indptr)]
    ptr, ind = label_lists(Y, 3)
    np.testing.assert_array_equal(ptr, [0, 2, 2, 3])
    np.testing.assert_array_equal(ind, [0, 2, 1])
    assert ptr.dtype == ind.dtype == np.int64
    for a, b in zip((Y.data, Y.indices, Y.indptr), before):
        np.testing.assert_array_equal(a, b)
    S = np.arange(9.0).reshape(3, 3)
    assert loss_sum(LOSSES["squared_hinge"], S, Y) == loss_sum(LOSSES["squared_hinge"], S, sp.csr_matrix(Y.toarray()))
    assert loss_sum(LOSSES["squared_hinge"], S, Y) == loss_sum(LOSSES["squared_hinge"], S, Y.toarray())


def test_label_lists_of_read_only_class_ids():
    y = np.array([2, 0, 1])
    y.flags.writeable = False
    ptr, ind = label_lists(y, 3)
    np.testing.assert_array_equal(ptr, [0, 1, 2, 3])
    np.testing.assert_array_equal(ind, [2, 0, 1])


# -- penalties -----------------------------------------------------------------------------------


def test_penalty_closed_form_values():
    W = np.array([[3.0, 4.0], [4.0, 0.0], [1.0, 0.0]])
    b = np.array([1.0, -2.0])
    lam, rho = 0.5, 0.3
    row = {
        "l1/l2": 5 + 4 + 1,
        "l1": 12,
        "l2": 0.5 * 42,
        "elasticnet": rho * 12 + (1 - rho) * 0.5 * 42,
        "sparse_group": rho * 12 + (1 - rho) * 10,
        "group_elasticnet": rho * 10 + (1 - rho) * 0.5 * 42,
    }
    for name, v in row.items():
        assert RowPenalty(rp.PENALTIES[name], lam, rho).value(W, b) == pytest.approx(lam * v, rel=1e-14)
    # blocks of 2 features per class: class 0 [3, 4], [1]; class 1 [4, 0], [0]
    block = {"l1": 12, "l1/l2": 5 + 1 + 4, "l1/linf": 4 + 1 + 4, "l2": 0.5 * 42}
    for kind, v in block.items():
        assert ClassBlockPenalty(kind, 2, lam).value(W, b) == pytest.approx(lam * v, rel=1e-14)
    assert ElasticNetWithBias(lam, 0.2).value(W, b) == pytest.approx(lam * 12 + 0.1 * (42 + 5), rel=1e-14)
    assert StageRidge(lam).value([W, W[:1]], b) == pytest.approx(0.5 * lam * (42 + 25), rel=1e-14)


PROX_CASES = (
    [RowPenalty(code, 0.7, 0.4) for code in rp.PENALTIES.values()]
    + [ClassBlockPenalty(kind, 2, 0.7) for kind in ("l1", "l1/l2", "l1/linf", "l2")]
    + [ElasticNetWithBias(0.7, 0.3), StageRidge(0.7)]
)


@pytest.mark.parametrize("penalty", PROX_CASES, ids=[repr(p) for p in PROX_CASES])
def test_prox_minimizes_its_problem(penalty):
    """prox_{tP}(V) beats a derivative-free minimiser of ½‖W − V‖² + ½‖c − b‖² + tP(W, c) started
    anywhere (b: the intercept, penalised by ppdsparse only)."""
    rng = np.random.default_rng(1)
    t, shape = 0.9, (3, 2)
    for _ in range(4):
        V, b = rng.normal(size=shape) * rng.choice([0.2, 2.0]), rng.normal(size=2)
        P, pb = penalty.prox(V, b, t)

        def f(z, V=V, b=b):
            W, c = z[:6].reshape(shape), z[6:]
            return 0.5 * np.sum((W - V) ** 2) + 0.5 * np.sum((c - b) ** 2) + t * penalty.value(W, c)

        ours = np.concatenate([P.ravel(), pb])
        best = min(
            minimize(f, x0, method="Powell", options={"xtol": 1e-10, "ftol": 1e-14}).fun
            for x0 in (np.concatenate([V.ravel(), b]), np.zeros(8), ours)
        )
        assert f(ours) <= best + 1e-9


@pytest.mark.parametrize("name", list(rp.PENALTIES))
def test_row_prox_diag_minimizes_its_problem_and_is_row_prox_at_equal_curvatures(name):
    """row_prox_diag(w, g, L) beats a derivative-free minimiser of gᵀ(u − w) + ½ Σ_r L_r (u_r −
    w_r)² + P(u) started anywhere (curvatures L_r spread 1000×, as one-vs-rest labels' are); with
    every L_r = L it is row_prox at t = 1/L of v = w − g/L (to 1e-12: another order of the same
    arithmetic); a row whose ‖z‖ is below the group weight is zero."""
    rng = np.random.default_rng(2)
    code, lam, rho = rp.PENALTIES[name], 0.7, 0.4
    for _ in range(5):
        w, g = rng.normal(size=5) * rng.choice([0.2, 2.0]), rng.normal(size=5) * rng.choice([0.3, 3.0])
        L = 10.0 ** rng.uniform(-1.5, 1.5, size=5)
        u = np.empty(5)
        rp.row_prox_diag(code, w, g, L, lam, rho, u)

        def f(z, w=w, g=g, L=L):
            return g @ (z - w) + 0.5 * np.sum(L * (z - w) ** 2) + rp.row_value(code, z, lam, rho)

        best = min(
            minimize(f, x0, method="Powell", options={"xtol": 1e-12, "ftol": 1e-15}).fun for x0 in (w, np.zeros(5), u)
        )
        assert f(u) <= best + 1e-9
        same, expected = np.full(5, L[0]), np.empty(5)
        rp.row_prox_diag(code, w, g, same, lam, rho, u)
        rp.row_prox(code, w - g / L[0], 1.0 / L[0], lam, rho, expected)
        np.testing.assert_allclose(u, expected, rtol=1e-12, atol=1e-12 * np.abs(expected).max())
    if code in (rp.L1L2, rp.GROUP_ELASTICNET):  # ‖z‖ = ‖Lw − g‖ below the group weight: u = 0
        w, g, L = np.zeros(5), np.full(5, 0.01), np.ones(5)
        rp.row_prox_diag(code, w, g, L, lam, rho, u)
        assert np.all(u == 0.0)


# -- objectives ----------------------------------------------------------------------------------


@pytest.mark.parametrize("solver,params,multilabel", CONFIGS, ids=CONFIG_IDS)
def test_gradient_matches_finite_differences(solver, params, multilabel):
    """∇F at a point where F is differentiable (no zero weight, no tie in the hinges): `gradient`
    (loss + P's smooth part) plus the non-smooth part's gradient, against central differences of
    `value` in W and b; and with the penalty removed (λ = 0 where the solver allows it)."""
    X, y, Y = data()
    labels = Y if multilabel else y
    obj = objective_for(solver, params, multilabel)
    if obj.loss_bound is not None:  # constrained (8): F = g(W); the loss's gradient is the constraint's
        obj = Objective(obj.loss, obj.penalty, obj.fit_intercept)
    W, b = point()
    for o in (obj, Objective(obj.loss, StageRidge(0.0), obj.fit_intercept)):
        GW, Gb = o.gradient(W, b, X, labels)
        GW = GW + nonsmooth_gradient(o.penalty, W)
        eps = 1e-6
        for j, r in [(0, 0), (2, 1), (5, 3), (3, 2)]:
            E = np.zeros_like(W)
            E[j, r] = eps
            fd = (o.value(W + E, b, X, labels) - o.value(W - E, b, X, labels)) / (2 * eps)
            assert abs(fd - GW[j, r]) <= 1e-6 * max(1.0, abs(fd))
        if o.fit_intercept:
            for r in range(M):
                e = np.zeros(M)
                e[r] = eps
                fd = (o.value(W, b + e, X, labels) - o.value(W, b - e, X, labels)) / (2 * eps)
                assert abs(fd - Gb[r]) <= 1e-6 * max(1.0, abs(fd))
        else:
            assert Gb is None


@pytest.mark.parametrize("solver,params,multilabel", CONFIGS, ids=CONFIG_IDS)
def test_dense_equals_sparse_and_chunked_equals_whole(solver, params, multilabel):
    X, y, Y = data()
    labels = Y if multilabel else y
    obj = objective_for(solver, params, multilabel)
    W, b = point()
    whole = obj.value(W, b, X, labels)
    assert obj.value(W, b, sp.csr_matrix(X), labels) == pytest.approx(whole, rel=1e-12)
    assert obj.value(W, b, sp.csr_matrix(X, dtype=np.float32), labels) == pytest.approx(
        obj.value(W, b, X.astype(np.float32), labels), rel=1e-12
    )
    for bounds in ([0, N], [0, 1, N], list(range(0, N, 7)) + [N], [0, 13, 14, 27, N], list(range(N + 1))):
        sums = ChunkSums()
        for lo, hi in zip(bounds[:-1], bounds[1:]):
            chunk_labels = labels[lo:hi]
            sums = sums + obj.chunk_sums(W, b, sp.csr_matrix(X[lo:hi]), chunk_labels)
        assert sums.n_rows == N
        assert obj.total(sums, W, b) == pytest.approx(whole, rel=1e-12)


def test_fbpd_constrained_value_is_the_penalty_and_its_mean_loss_the_constraint():
    X, y, _ = data()
    W, b = point()
    con = objective_for("fbpd", FBPDParams(formulation="constrained", penalty="l1", eta=0.2))
    reg = objective_for("fbpd", FBPDParams(penalty="l1", lam=1.0))
    assert con.value(W, b, X, y) == pytest.approx(np.abs(W).sum(), rel=1e-14)
    S = X @ W + b
    margins = S - S[np.arange(N), y][:, None] + 1.0
    margins[np.arange(N), y] = 0.0
    assert con.mean_loss(W, b, X, y) == pytest.approx(margins.max(axis=1).mean(), rel=1e-14)
    assert reg.value(W, b, X, y) == pytest.approx(np.abs(W).sum() + margins.max(axis=1).mean(), rel=1e-14)


# -- duality -------------------------------------------------------------------------------------


@pytest.mark.parametrize("loss", ["squared_hinge", "multitask_squared_hinge", "logistic"])
@pytest.mark.parametrize("penalty", ["l1/l2", "l1"])
def test_weak_duality(loss, penalty):
    """D(W₁) ≤ F* ≤ F(W₂) for random points W₁, W₂ (the dual point of losses.dual_loss is
    feasible), and D ≤ F at the same point."""
    X, y, _ = data()
    obj = objective_for("bcd", BCDParams(loss=loss, penalty=penalty, lam=0.05))
    rng = np.random.default_rng(5)
    for _ in range(10):
        W1, W2 = rng.normal(size=(2, D, M)) * rng.choice([0.01, 0.3, 3.0], size=2)[:, None, None]
        dual = obj.dual_value(W1, None, X, y)
        assert dual <= obj.value(W1, None, X, y) + 1e-12
        assert dual <= obj.value(W2, None, X, y) + 1e-12


def test_duality_gap_closes_at_linear_svc_optimum():
    """Multitask squared hinge + λ‖W‖₁ (eq. 11) separates into one-vs-rest ℓ1 squared-hinge
    SVMs, LinearSVC(C = 1/(nλ)); at its solution D = F (strong duality), and D ≤ F elsewhere."""
    X, y, _ = data(n=80)
    lam = 0.05
    svc = LinearSVC(
        penalty="l1",
        loss="squared_hinge",
        C=1.0 / (80 * lam),
        fit_intercept=False,
        dual=False,
        tol=1e-10,
        max_iter=100_000,
        random_state=0,
    ).fit(X, y)
    obj = objective_for("bcd", BCDParams(loss="multitask_squared_hinge", penalty="l1", lam=lam))
    W = svc.coef_.T
    F = obj.value(W, None, X, y)
    assert -1e-12 * F <= F - obj.dual_value(W, None, X, y) <= 1e-9 * F  # D ≤ F up to rounding


def test_duality_gap_closes_at_logistic_regression_optimum():
    """Multinomial logistic + λ‖W‖₁ (eq. 12): scikit-learn's LogisticRegression(l1, C = 1/(nλ),
    saga) solution closes the gap."""
    X, y, _ = data(n=80)
    lam = 0.02
    lr = LogisticRegression(
        l1_ratio=1.0,
        C=1.0 / (80 * lam),
        solver="saga",
        fit_intercept=False,
        tol=1e-12,
        max_iter=200_000,
        random_state=0,
    ).fit(X, y)
    obj = objective_for("bcd", BCDParams(loss="logistic", penalty="l1", lam=lam))
    W = lr.coef_.T
    F = obj.value(W, None, X, y)
    assert -1e-12 * F <= F - obj.dual_value(W, None, X, y) <= 1e-9 * F  # D ≤ F up to rounding


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
@pytest.mark.parametrize("multilabel", [False, True])
def test_ppdsparse_weak_duality(loss, multilabel):
    """D at the dual point of (W₁, b₁) ≤ F(W₂, b₂), and ≤ F(W₁, b₁)."""
    X, y, Y = data()
    labels = Y if multilabel else y
    obj = objective_for("ppdsparse", PPDSparseParams(loss=loss, lam=0.05, tau=0.2))
    rng = np.random.default_rng(7)
    for _ in range(10):
        (W1, W2), (b1, b2) = rng.normal(size=(2, D, M)) * rng.choice([0.01, 0.3, 3.0]), rng.normal(size=(2, M))
        dual = obj.dual_value(W1, b1, X, labels)
        assert dual <= obj.value(W1, b1, X, labels) + 1e-12
        assert dual <= obj.value(W2, b2, X, labels) + 1e-12


def test_ppdsparse_duality_gap_closes_at_linear_svc_optimum():
    """Squared hinge, lam = 0: LinearSVC(C = 1/(2n·tau)) with a penalised intercept solves each
    class of (9); at its solution the dual point α = max(0, 1 − m) gives D = F."""
    X, y, _ = data(n=80)
    tau = 0.1
    W, b = np.zeros((D, M)), np.zeros(M)
    for k in range(M):
        svc = LinearSVC(
            loss="squared_hinge",
            C=1.0 / (2 * 80 * tau),
            fit_intercept=True,
            intercept_scaling=1.0,
            dual=True,
            tol=1e-10,
            max_iter=1_000_000,
            random_state=0,
        ).fit(X, (y == k).astype(int))
        W[:, k], b[k] = svc.coef_[0], svc.intercept_[0]
    obj = objective_for("ppdsparse", PPDSparseParams(loss="squared_hinge", lam=0.0, tau=tau))
    F = obj.value(W, b, X, y)
    assert -1e-12 * F <= F - obj.dual_value(W, b, X, y) <= 1e-9 * F  # D ≤ F up to rounding


@pytest.mark.parametrize("penalty", ["l1", "l1/l2", "l1/linf", "l2"])
def test_fbpd_weak_duality(penalty):
    """Dual points of (11) with v_b = 0 lie below F at random points: every row starts at its own
    class (a_ℓ = 0), then disjoint pairs (p, q) of rows of classes i ≠ j move a share t of their
    mass to each other's class (a_p = t(e_j − e_i) = −a_q)."""
    rng = np.random.default_rng(8)
    X, z, _ = data()
    obj = objective_for("fbpd", FBPDParams(penalty=penalty, lam=0.05, group_size=4))
    for _ in range(10):
        Yd = np.eye(M)[z]
        order = rng.permutation(N)
        for p, q in zip(order[0::2], order[1::2]):
            if z[p] != z[q]:
                t = rng.random()
                Yd[p] = (1 - t) * np.eye(M)[z[p]] + t * np.eye(M)[z[q]]
                Yd[q] = (1 - t) * np.eye(M)[z[q]] + t * np.eye(M)[z[p]]
        dual, infeasibility = obj.crammer_singer_dual(Yd, X, z)
        assert infeasibility < 1e-14
        W, b = rng.normal(size=(D, M)) * rng.choice([0.01, 0.3, 3.0]), rng.normal(size=M)
        assert dual <= obj.value(W, b, X, z) + 1e-12


# -- conventions: scikit-learn's solutions are stationary points of our F -------------------------


def test_bcd_logistic_l2_convention_is_logistic_regression():
    X, y, _ = data(n=80)
    lam = 0.05
    lr = LogisticRegression(C=1.0 / (80 * lam), fit_intercept=False, tol=1e-12, max_iter=10_000).fit(X, y)
    GW, _ = objective_for("bcd", BCDParams(loss="logistic", penalty="l2", lam=lam)).gradient(lr.coef_.T, None, X, y)
    assert np.abs(GW).max() < 1e-7


@pytest.mark.parametrize("loss", ["squared_hinge", "hinge"])
def test_ppdsparse_convention_is_linear_svc(loss):
    """One class of (9) is LinearSVC with an intercept (penalised, scaling 1), C = 1/(n·tau) for
    the hinge and 1/(2n·tau) for the squared hinge: its solution is stationary (squared hinge)
    or no worse than any nearby point (hinge)."""
    X, y, _ = data(n=80)
    tau, n = 0.1, 80
    z = (y == 1).astype(int)
    C = 1.0 / (n * tau) if loss == "hinge" else 1.0 / (2 * n * tau)
    svc = LinearSVC(
        loss=loss,
        C=C,
        random_state=0,
        fit_intercept=True,
        intercept_scaling=1.0,
        dual=True,
        tol=1e-10,
        max_iter=1_000_000,
    ).fit(X, z)
    obj = objective_for("ppdsparse", PPDSparseParams(loss=loss, lam=0.0, tau=tau))
    W, b, labels = svc.coef_.T, svc.intercept_, z[:, None]
    if loss == "squared_hinge":
        GW, Gb = obj.gradient(W, b, X, labels)
        assert max(np.abs(GW).max(), np.abs(Gb).max()) < 1e-9
    else:
        F = obj.value(W, b, X, labels)
        rng = np.random.default_rng(6)
        for _ in range(20):
            dW, db = rng.normal(size=W.shape) * 1e-3, rng.normal(size=1) * 1e-3
            assert F <= obj.value(W + dW, b + db, X, labels) + 1e-10


def test_stagewise_conventions_are_ridge_and_logistic_regression():
    """One stage holding every feature: identity link = Ridge(alpha = nλ) with an unpenalised
    intercept; softmax link = LogisticRegression(C = 1/(nλ)). Both solutions are stationary."""
    X, y, _ = data(n=80)
    lam, n = 0.05, 80
    onehot = np.eye(M)[y]
    ridge = Ridge(alpha=n * lam, fit_intercept=True).fit(X, onehot)
    GW, Gb = objective_for("stagewise", StagewiseParams(link="identity", lam=lam)).gradient(
        ridge.coef_.T, ridge.intercept_, X, y
    )
    assert max(np.abs(GW).max(), np.abs(Gb).max()) < 1e-10
    lr = LogisticRegression(C=1.0 / (n * lam), tol=1e-12, max_iter=10_000).fit(X, y)
    GW, Gb = objective_for("stagewise", StagewiseParams(link="softmax", lam=lam)).gradient(
        lr.coef_.T, lr.intercept_, X, y
    )
    assert max(np.abs(GW).max(), np.abs(Gb).max()) < 1e-7


def test_objective_for_rejects_an_unknown_solver():
    with pytest.raises(ValueError, match="unknown solver 'nope'"):
        objective_for("nope", None)


# -- the solvers log this objective ----------------------------------------------------------

# (solver, params, multilabel): each solver's main configurations; the last step's logged
# `objective` must be objective_for(...) of the final model on the training data
LOGGED = [
    ("bcd", BCDParams(mode="memory", loss="squared_hinge", penalty="l1/l2", lam=1e-2, max_iter=5), False),
    ("bcd", BCDParams(mode="memory", loss="logistic", penalty="l1", lam=1e-2, max_iter=5), False),
    ("bcd", BCDParams(mode="memory", loss="multitask_squared_hinge", penalty="l2", lam=1e-2, max_iter=5), True),
    ("bcd", BCDParams(mode="memory", loss="logistic", penalty="elasticnet", lam=1e-2, max_iter=5), False),
    ("bcd", BCDParams(mode="memory", max_iter=5), False),  # the defaults: group_elasticnet, λ from n
    (
        "bcd",
        BCDParams(
            mode="memory", penalty="l1/l2", lam=1e-1, tol=1e-2, stopping="gap", fit_intercept=False, max_iter=300
        ),
        False,
    ),
    ("bcd", BCDParams(mode="chunks", loss="squared_hinge", penalty="l1/l2", lam=1e-2, max_iter=3, group_size=8), True),
    ("bcd", BCDParams(mode="chunks", loss="logistic", penalty="l1", lam=1e-2, max_iter=3, group_size=8), False),
    ("bcd", BCDParams(method="fista", loss="multitask_squared_hinge", penalty="l1/l2", lam=1e-2, max_iter=5), True),
    ("bcd", BCDParams(method="fista", loss="logistic", penalty="elasticnet", lam=1e-2, max_iter=5), False),
    ("fbpd", FBPDParams(penalty="l1", lam=1e-2, max_iter=10), False),
    ("fbpd", FBPDParams(penalty="l1/l2", lam=1e-2, group_size=4, max_iter=10), False),
    ("fbpd", FBPDParams(penalty="l1/linf", lam=1e-2, group_size=4, max_iter=10), False),
    ("fbpd", FBPDParams(penalty="l2", lam=1e-2, max_iter=10), False),
    ("fbpd", FBPDParams(formulation="constrained", penalty="l1/l2", eta=0.5, max_iter=10), False),
    ("ppdsparse", PPDSparseParams(loss="squared_hinge", lam=1e-2, tau=1e-2, threads=1), False),
    ("ppdsparse", PPDSparseParams(loss="hinge", lam=1e-2, tau=1e-2, threads=1), False),
    ("ppdsparse", PPDSparseParams(loss="squared_hinge", lam=1e-2, tau=1e-2, threads=1), True),
    ("ppdsparse", PPDSparseParams(loss="hinge", lam=1e-2, tau=1e-2, threads=1), True),
    ("stagewise", StagewiseParams(generator="sequential", block_size=8, n_passes=2, lam=1e-2, penalty="stage"), False),
    ("stagewise", StagewiseParams(generator="sequential", block_size=8, lam=1e-2, penalty="stage"), True),
    (
        "stagewise",
        StagewiseParams(generator="sequential", block_size=8, n_passes=2, penalty="stage"),
        False,
    ),  # λ from n
    (
        "stagewise",
        StagewiseParams(generator="gradient", block_size=8, link="softmax", max_iter=3, lam=1e-2, penalty="stage"),
        False,
    ),
    (
        "stagewise",
        StagewiseParams(generator="sequential", block_size=8, link="softmax", max_iter=3, lam=1e-2, penalty="stage"),
        True,
    ),
    (
        "stagewise",
        StagewiseParams(generator="rff", n_components=32, block_size=16, calibration="poly", lam=1e-2, penalty="stage"),
        False,
    ),
]


def logged_run(solver, params, multilabel):
    """(X, labels, final model, the last logged objective) of an in-process run on 150 rows in
    chunks of 50."""
    X, y, Y = data(seed=5, n=150, d=20, m=M)
    X = sp.csr_matrix(np.abs(X))
    labels = Y if multilabel else y.astype(np.int32)
    store = InMemoryStore(X, labels, [str(k) for k in range(M)], chunk_rows=50)
    log = MetricsLog(None)
    model = get_solver(solver)(params).fit(
        store,
        engine=Engine(mode="inprocess"),
        log=log,
        checkpointer=Checkpointer(None, config=params.model_settings(), store_fingerprint="in-memory"),
    )
    return X, labels, model, [r for r in log.records if "objective" in r][-1]["objective"]


@pytest.mark.parametrize("solver, params, multilabel", LOGGED, ids=[f"{s}-{i}" for i, (s, _, _) in enumerate(LOGGED)])
def test_solvers_log_this_objective(solver, params, multilabel):
    """metrics' `objective` = objective_for(...) of the model (loss + penalty, averaged; fbpd's
    constrained form: g(W); on dense columns, which fbpd standardizes, g of W's rows times the
    columns' standard deviations); stagewise, whose model is a sequence of stages: the loss of the
    model's training scores plus StageRidge over the stages' weights (penalty="stage"; "total"'s
    logged objective is checked against scikit-learn's ridge and logistic optima in
    tests/solvers/test_stagewise.py). Only the order of the floating-point sums differs."""
    X, labels, model, logged = logged_run(solver, params, multilabel)
    if solver == "bcd" and params.lam is None:  # λ = 1/((1 − ρ)n), n = 150, the model says
        assert model.info["lam"] == pytest.approx(1 / ((1 - params.l1_ratio) * 150), rel=1e-15)
        params = params.model_copy(update={"lam": model.info["lam"]})
    if solver == "stagewise" and params.lam is None:  # class targets: λ = max(1e-4, 10/n), n = 150
        assert model.info["lam"] == pytest.approx(10 / 150, rel=1e-15)
        params = params.model_copy(update={"lam": model.info["lam"]})
    objective = objective_for(solver, params, multilabel)
    if solver == "stagewise":
        sums = objective.loss_sums(model._scores(X), labels)
        stages = StageRidge.stage_weights(model.weights, params.fit_intercept)
        if model.info["standardized"]:  # dense columns: the stages' column rows times their s_j
            s = X.toarray().std(axis=0)
            s = np.where(s > 0, s, 1.0)
            stages = [
                P * np.r_[s[block], np.ones(len(P) - len(block))][:, None] for P, block in zip(stages, model.blocks)
            ]
        expected = objective.total(sums, stages, None)
        assert len(model.weights) > 1
    else:
        coef = model.coef_.toarray() if sp.issparse(model.coef_) else np.asarray(model.coef_)
        b = None if model.intercept_ is None else np.asarray(model.intercept_, dtype=np.float64)
        W = coef.T
        if model.info.get("standardized"):  # fbpd on dense columns: g of the standardized columns' weights
            s = X.toarray().std(axis=0)
            W = W * np.where(s > 0, s, 1.0)[:, None]
        expected = objective.total(objective.chunk_sums(coef.T, b, X, labels), W, b)
    assert expected > 0
    assert logged == pytest.approx(expected, rel=1e-10)


def test_stage_ridge_stage_weights_drop_the_bias_row():
    W1, W2 = np.arange(6.0).reshape(3, 2), np.ones((2, 2))
    assert StageRidge(2.0).value(StageRidge.stage_weights([W1, W2], fit_intercept=True)) == (4 + 9 + 16 + 25) + 2
    assert StageRidge(2.0).value(StageRidge.stage_weights([W1, W2], fit_intercept=False)) == (1 + 4 + 9 + 16 + 25) + 4
