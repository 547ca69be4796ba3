"""The master problem of MultiBoostcw and FCD (streamfit.solvers.multiboost_master), checked
against scipy's L-BFGS-B and 1-D minimizers on the dense outputs of random learners."""

from __future__ import annotations

import numpy as np
import pytest
from scipy.optimize import minimize, minimize_scalar

from streamfit.solvers import multiboost_kernels as kernels
from streamfit.solvers import multiboost_master as master_problem


def _master_problem(seed=1, m=150, K=4, per_class=5, pool="sign"):
    """Random outputs of `per_class` learners per class of a pool (_pool), labels and the
    coordinates (one per learner, class lrn % K): (bits, H (L × m, the learners' values), labels,
    coord_class, coord_learner, lows, signs). Each learner is informative for its class: its bit
    is set on 80 % of the class's rows, or for a negated learner (ħ = −1 on a set bit) clear."""
    rng = np.random.default_rng(seed)
    L = K * per_class
    lows, signs = _pool(pool, L)
    set_bits = rng.random((L, m)) < 0.5
    labels = rng.integers(0, K, m)
    for lrn in range(L):  # make every learner informative for its class
        c = lrn % K
        set_bits[lrn, labels == c] = (rng.random(int((labels == c).sum())) < 0.8) == (signs[lrn] > 0)
    H = signs[:, None] * np.where(set_bits, 1.0, lows[:, None].astype(float))
    return np.packbits(set_bits, axis=1), H, labels, np.arange(L) % K, np.arange(L), lows, signs


def _dense_objective(H, labels, coord_class, coord_learner, lam, K):
    """(2)/C and its gradient, for L-BFGS-B, from the learners' dense outputs H (L × m, ±1 or 0/1)."""
    m = H.shape[1]
    p = m * (K - 1)

    def value_and_grad(w):
        F = np.zeros((m, K))
        for j, (c, lrn) in enumerate(zip(coord_class, coord_learner)):
            F[:, c] += w[j] * H[lrn]
        mu = np.exp(F - F[np.arange(m), labels][:, None])
        mu[np.arange(m), labels] = 0.0
        grad = np.full(len(w), lam)
        for j, (c, lrn) in enumerate(zip(coord_class, coord_learner)):
            # ∂/∂w_j of (1/p)Σ μ: rows of class c lose F_c (−Σ_y μ), others gain through μ_(i,c)
            own = labels == c
            grad[j] += (-(mu[own].sum(axis=1) * H[lrn, own]).sum() + (mu[~own, c] * H[lrn, ~own]).sum()) / p
        return lam * w.sum() + mu.sum() / p, grad

    return value_and_grad


def _pool(pool: str, L: int) -> tuple[np.ndarray, np.ndarray]:
    """(lows, signs) of L learners: each learner's value where its bit is 0, and its sign (ħ =
    sign·(1 on a set bit, else low)): sign learners ħ ∈ {−1, +1}, indicator learners ħ ∈ {0, 1},
    a mix of both, or a mix of sign stumps, indicators and negated indicators ħ ∈ {0, −1}."""
    lows = {
        "sign": np.full(L, -1),
        "indicator": np.zeros(L),
        "mixed": np.arange(L) % 2 - 1,
        "negated": np.where(np.arange(L) % 3 == 0, -1, 0),
    }[pool]
    signs = np.where((np.arange(L) % 3 == 2) & (pool == "negated"), -1, 1)
    return lows.astype(np.int8), signs.astype(np.int8)


@pytest.mark.parametrize(
    "weak_learners, pool", [("class", "sign"), ("shared", "sign"), ("class", "mixed"), ("class", "negated"),
                            ("shared", "negated")]
)  # fmt: skip
def test_fcd_solves_the_master_problem_as_lbfgsb_does(weak_learners, pool):
    K, lam = 4, 1e-2
    bits, H, labels, coord_class, coord_learner, lows, signs = _master_problem(K=K, pool=pool)
    if weak_learners == "shared":  # every class weighs every learner (eq. 6's master)
        L = H.shape[0]
        coord_class, coord_learner = np.tile(np.arange(K), L), np.repeat(np.arange(L), K)
    m = H.shape[1]
    w = np.zeros(len(coord_class))
    master = master_problem.Master.in_memory(labels, bits, np.zeros((m, K)), lows, signs)
    C_over_p = 1.0 / (lam * m * (K - 1))
    tol = 1e-9
    tau, worst = master_problem.fcd(
        master, coord_class, coord_learner, w, np.arange(len(w)), C_over_p, tol, 10_000, False, 1.0,
        np.random.default_rng(0),
    )  # fmt: skip
    assert worst is not None and worst <= tol and tau > 1  # the stopping rule (18) held
    _, F = master.scores(0)
    scores = kernels.scores(bits, coord_class, coord_learner, w, K, m, lows, signs)
    np.testing.assert_allclose(F, scores, rtol=0, atol=1e-9)
    np.testing.assert_allclose(  # the scores from the dense outputs
        scores, np.stack([H[coord_learner[coord_class == c]].T @ w[coord_class == c] for c in range(K)], axis=1),
        rtol=1e-12, atol=1e-12,
    )  # fmt: skip
    fresh = master_problem.Master.in_memory(labels, bits, F, lows, signs)  # μ from the final scores, not the running μ
    theta = master_problem.kkt_violations(w, fresh.run_pass(None, coord_learner, coord_class, False), C_over_p)
    assert theta.max() <= 10 * tol
    value_and_grad = _dense_objective(H, labels, coord_class, coord_learner, lam, K)
    ref = minimize(
        value_and_grad, np.zeros(len(w)), jac=True, method="L-BFGS-B", bounds=[(0, None)] * len(w),
        options={"ftol": 1e-15, "gtol": 1e-12, "maxiter": 10_000},
    )  # fmt: skip
    ours = value_and_grad(w)[0]
    assert ours == pytest.approx(ref.fun, rel=1e-6)
    assert ours == pytest.approx(master_problem.objective(scores, labels, w, lam))
    assert np.count_nonzero(w) > 0
    if pool == "negated":  # the negated learners are used
        assert np.count_nonzero(w[signs[coord_learner] < 0]) > 0


@pytest.mark.parametrize("budget", [1 << 40, 0], ids=["in_memory", "streamed"])
@pytest.mark.parametrize("pool", ["mixed", "negated"])
def test_the_difference_pass_for_theta_is_the_gradient_of_the_loss(tmp_path, budget, pool):
    """Master.run_pass with difference (θ's pass, one masked sum per coordinate) gives
    Σ_{D+} μ − Σ_{D−} μ = −∂(Σ_i Σ_{y≠y_i} μ_(i,y))/∂w_j, checked against the dense gradient of
    (2) at random weights, on a mixed pool of sign and indicator learners (and negated
    indicators), chunks not aligned to bytes, in memory and streamed; and equals the difference
    of the two split sums."""
    K, lam = 4, 1e-2
    bits, H, labels, coord_class, coord_learner, lows, signs = _master_problem(K=K, seed=5, pool=pool)
    m, J = H.shape[1], len(coord_class)
    w = np.random.default_rng(6).random(J) * (np.arange(J) % 4 > 0)
    F = kernels.scores(bits, coord_class, coord_learner, w, K, m, lows, signs)
    master = master_problem.Master(K, budget, lows, str(tmp_path), signs)
    set_bits = np.unpackbits(bits, axis=1, count=m)
    for lo, hi in ((0, 45), (45, 101), (101, m)):
        master.add(labels[lo:hi], np.packbits(set_bits[:, lo:hi], axis=1), F[lo:hi])
    difference = master.run_pass(None, coord_learner, coord_class, True)
    split = master.run_pass(None, coord_learner, coord_class, False)
    gradient = _dense_objective(H, labels, coord_class, coord_learner, lam, K)(w)[1]
    p = m * (K - 1)
    np.testing.assert_allclose(difference[:, 0], -p * (gradient - lam), rtol=1e-10, atol=1e-10)
    np.testing.assert_array_equal(difference[:, 1], 0.0)
    np.testing.assert_allclose(difference[:, 0], split[:, 0] - split[:, 1], rtol=1e-12, atol=1e-12)


def test_the_update_of_a_negated_learner_is_the_minimum_along_its_coordinate():
    """For a coordinate whose learner is negated (ħ = −1[·] ∈ {−1, 0}), the sums (21) of a pass
    give V± whose minimum (12) (and (13) at large C) is the minimum of the master objective (2)
    along that coordinate, found by a 1-D numeric minimizer on the dense outputs; the other
    weights fixed at random values, on a mixed pool with negated indicators."""
    K, lam = 4, 1e-3
    bits, H, labels, coord_class, coord_learner, lows, signs = _master_problem(K=K, seed=7, pool="negated")
    m, J = H.shape[1], len(coord_class)
    C_over_p = 1.0 / (lam * m * (K - 1))
    rng = np.random.default_rng(8)
    value = _dense_objective(H, labels, coord_class, coord_learner, lam, K)
    negated = np.flatnonzero(signs[coord_learner] < 0)
    assert len(negated) >= 4
    moved = 0
    for j in negated:
        w = rng.random(J) * 0.5
        F = kernels.scores(bits, coord_class, coord_learner, w, K, m, lows, signs)
        ((plus, minus),) = master_problem.Master.in_memory(labels, bits, F, lows, signs).run_pass(
            None, coord_learner[j : j + 1], coord_class[j : j + 1], False
        )
        v_plus, v_minus = plus * np.exp(w[j]), minus * np.exp(-w[j])  # (21): μ without w_j's own term

        def along(t, j=j, w=w):
            return value(np.concatenate([w[:j], [t], w[j + 1 :]]))[0]

        ours = kernels.coordinate_minimum(v_plus, v_minus, C_over_p, False)
        ref = minimize_scalar(along, bounds=(0.0, 30.0), method="bounded", options={"xatol": 1e-12})
        assert along(ours) <= ref.fun * (1 + 1e-12)
        assert ours == pytest.approx(max(ref.x, 0.0), abs=1e-5)
        moved += ours > 0
        # (13): the minimum of the loss alone along the coordinate
        large = kernels.coordinate_minimum(v_plus, v_minus, C_over_p, True)
        loss_ref = minimize_scalar(lambda t, along=along: along(t) - lam * t, bounds=(0.0, 30.0), method="bounded",
                                   options={"xatol": 1e-12})  # fmt: skip
        assert large == pytest.approx(max(loss_ref.x, 0.0), abs=1e-5)
    assert moved >= 2  # not all at the bound w = 0


@pytest.mark.parametrize("pool", ["sign", "mixed", "negated"])
def test_fcd_sweeps_in_memory_and_streamed_give_the_identical_iterates(tmp_path, monkeypatch, pool):
    K, lam = 4, 1e-2
    bits, H, labels, coord_class, coord_learner, lows, signs = _master_problem(K=K, pool=pool)
    m, J = H.shape[1], len(coord_class)
    C_over_p = 1.0 / (lam * m * (K - 1))
    set_bits = np.unpackbits(bits, axis=1, count=m)
    calls = []
    real = kernels.fcd_sweep
    monkeypatch.setattr(kernels, "fcd_sweep", lambda *a: calls.append(len(a[3])) or real(*a))
    runs = []
    for budget in (1 << 40, 0):  # every chunk in memory (compiled sweeps), every chunk streamed from files
        master = master_problem.Master(K, budget, lows, str(tmp_path), signs)
        for lo, hi in ((0, 45), (45, 101), (101, m)):  # chunks not aligned to bytes
            master.add(labels[lo:hi], np.packbits(set_bits[:, lo:hi], axis=1), np.zeros((hi - lo, K)))
        w = np.zeros(J)
        tau, worst = master_problem.fcd(master, coord_class, coord_learner, w, np.arange(J), C_over_p, 1e-6, 5, False, 1.0,
                            np.random.default_rng(3))  # fmt: skip
        F = np.concatenate([master.scores(i)[1] for i in range(3)])
        runs.append((w, F, tau, worst, len(master.resident), master.spilled, len(calls)))
        calls.clear()
    (w1, F1, tau1, worst1, *layout1), (w2, F2, tau2, worst2, *layout2) = runs
    assert layout1 == [3, 0, 5] and layout2 == [0, 3, 0]  # one compiled call per working-set iteration; none streamed
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(F1, F2)
    assert (tau1, worst1) == (tau2, worst2) and tau1 == 5 and np.count_nonzero(w1) > 0
    np.testing.assert_allclose(F1, kernels.scores(bits, coord_class, coord_learner, w1, K, m, lows, signs), atol=1e-12)
