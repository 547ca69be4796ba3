"""The stagewise solver (Agarwal et al. 2014, Algorithms 1-3) against closed forms, scikit-learn,
its own guarantees, and its out-of-core contract (workers, chunking, resume)."""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
from pydantic import ValidationError
from scipy.special import logsumexp
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from threadpoolctl import threadpool_limits

import streamfit.solvers.base as base
import streamfit.solvers.stagewise as sw
import streamfit.solvers.stagewise_features as sf
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import InputError
from streamfit.metrics import best_threshold, threshold_counts
from streamfit.model import load_model
from streamfit.objectives.links import link_loss_sum
from streamfit.runlog import MetricsLog
from streamfit.solvers import get_solver
from streamfit.solvers.stagewise_kernels import (
    project_rows_simplex,
    rff_block,
    rff_features,
    rff_frequencies,
)
from streamfit.store import InMemoryStore, StoreWriter, open_store


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return sp.csr_matrix(X / 16.0), y.astype(np.int32)


def fit(source, run_dir=None, engine=None, resume=False, stop_after=None, **params):
    solver = sw.StagewiseSolver(sw.StagewiseParams(**params))
    fingerprint = source.manifest.fingerprint if hasattr(source, "manifest") else "in-memory"
    ckpt = Checkpointer(run_dir, config=solver.params.model_dump(), store_fingerprint=fingerprint)
    log = MetricsLog(os.path.join(run_dir, "metrics.jsonl") if run_dir else None)
    engine = engine or Engine(mode="inprocess")
    model = solver.fit(source, engine=engine, checkpointer=ckpt, log=log, resume=resume, stop_after=stop_after)
    return model, log, ckpt


def training_scores(source, ckpt, version):
    return np.vstack([ckpt.state.read(sw.SCORES, version, i) for i in range(source.n_chunks)])


def write_store(path, X, labels, classes, chunk_rows, multilabel=False):
    w = StoreWriter(str(path), chunk_rows=chunk_rows, multilabel=multilabel)
    w.write_rows(sp.csr_matrix(X, dtype=np.float32), labels)
    w.close(n_features=X.shape[1], classes=classes)
    return open_store(str(path))


def test_registered():
    assert get_solver("stagewise") is sw.StagewiseSolver


def test_params_validation():
    with pytest.raises(ValidationError):
        sw.StagewiseParams(link="softmax", calibration="poly")
    with pytest.raises(ValidationError):
        sw.StagewiseParams(block_sz=10)
    with pytest.raises(ValidationError):
        sw.StagewiseParams(block_size=0)
    # seeds feed numpy's SeedSequence (non-negative only); infinite λ, σ or L would fail in the solve
    for bad in (
        {"random_state": -1},
        {"lam": float("inf")},
        {"bandwidth": float("inf")},
        {"lipschitz": float("inf")},
        {"lam": float("nan")},
    ):
        with pytest.raises(ValidationError):
            sw.StagewiseParams(**bad)


def test_one_block_identity_is_closed_form_ridge(digits):
    X, y = digits
    n, lam = len(y), 1e-2
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=300)
    params = dict(generator="sequential", calibration="none", block_size=64, n_passes=1, lam=lam)
    model, _, _ = fit(source, standardize=False, **params)  # standardized: test_standardized_penalty_is_ridge_…
    A = np.hstack([np.ones((n, 1)), X.toarray()])
    D = np.eye(65)
    D[0, 0] = 0.0  # the intercept is not penalised
    W = np.linalg.solve(A.T @ A / n + lam * D, A.T @ np.eye(10)[y] / n)
    # inactive (all-zero) pixel columns get weight 0 in both
    np.testing.assert_allclose(model.coef_, W[1:].T, rtol=0, atol=1e-8 * np.abs(W).max())
    np.testing.assert_allclose(model.intercept_, W[0], rtol=1e-8)


def test_default_lam_scales_with_the_rows():
    """lam None: λ = max(LAM_FLOOR, LAM_ROWS/n) for class targets (identity link) on
    low-dimensional dense data, LAM_FLOOR for real-valued targets, the softmax link and sparse or
    wide data; a number is kept."""
    params = sw.StagewiseParams()
    assert params.lam is None
    assert params.lam_for(100, regression=False, low_dense=True) == pytest.approx(sw.LAM_ROWS / 100)
    assert params.lam_for(10**7, regression=False, low_dense=True) == sw.LAM_FLOOR
    assert params.lam_for(100, regression=False, low_dense=False) == sw.LAM_FLOOR
    assert params.lam_for(100, regression=True, low_dense=True) == sw.LAM_FLOOR
    assert sw.StagewiseParams(link="softmax").lam_for(100, regression=False, low_dense=True) == sw.LAM_FLOOR
    assert sw.StagewiseParams(lam=0.5).lam_for(100, regression=False, low_dense=True) == 0.5


def test_default_lam_on_sparse_data_is_the_floor():
    """Text-like data (more than LOW_DIM_MAX_COLUMNS active columns, or under
    LOW_DIM_MIN_DENSITY non-zero) keeps λ = LAM_FLOOR with lam None: the same model, bit for
    bit, as lam=1e-4 given."""
    rng = np.random.default_rng(3)
    X = sp.random(300, 2000, density=0.01, format="csr", random_state=4)
    y = rng.integers(3, size=300)
    source = InMemoryStore(X, y, [0, 1, 2], chunk_rows=100)
    default, _, _ = fit(source, block_size=256)
    given, _, _ = fit(source, block_size=256, lam=sw.LAM_FLOOR)
    assert default.info["lam"] == sw.LAM_FLOOR
    for a, b in zip(default.weights, given.weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_default_lam_is_ridge_with_alpha_lam_rows(digits):
    """With lam None, one block of every column and one pass, the model is scikit-learn's Ridge
    with alpha = n·λ = LAM_ROWS on the 0/1 class indicators (the unpenalised intercept), and the
    model records that λ; the logged objective uses it too."""
    from sklearn.linear_model import Ridge

    X, y = digits
    X, y = X[:300], y[:300]  # n = 300: λ = LAM_ROWS/300 above the floor
    n = len(y)
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=100)
    model, log, _ = fit(
        source, generator="sequential", calibration="none", block_size=64, n_passes=1, standardize=False
    )
    assert model.info["lam"] == pytest.approx(sw.LAM_ROWS / n)
    ridge = Ridge(alpha=sw.LAM_ROWS, solver="cholesky").fit(X.toarray(), np.eye(10)[y])
    np.testing.assert_allclose(model.coef_, ridge.coef_, rtol=0, atol=1e-8 * np.abs(ridge.coef_).max())
    np.testing.assert_allclose(model.intercept_, ridge.intercept_, rtol=0, atol=1e-8)
    S = model.decision_function(X)
    expected = ((np.eye(10)[y] - S) ** 2).sum() / (2 * n) + sw.LAM_ROWS / n / 2 * (ridge.coef_**2).sum()
    assert log.records[-1]["objective"] == pytest.approx(expected, rel=1e-8)


def unscaled(n=300, d=12, seed=0):
    """A 3-class dense set and the units its columns are given in (10^-3 … 10^3, with offsets, as
    prices, counts or pixel values come): (X in those units, y, units)."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n, d, n_informative=6, n_redundant=2, n_classes=3, random_state=seed)
    units = 10.0 ** np.linspace(-3, 3, d)
    return X * units + 5 * units, y.astype(np.int32), units


def test_standardized_penalty_is_ridge_on_standardized_columns():
    """On dense low-dimensional class data the stages penalise S V (S the columns' standard
    deviations over the training rows): with one block of every column and one pass the model is
    scikit-learn's Ridge(alpha = nλ) fitted to StandardScaler's columns, written back in the
    stored units (coef / s, intercept − mean · coef / s), to 1e-8; standardize=False keeps Ridge
    on the columns as given; the logged objective penalises S V."""
    from sklearn.linear_model import Ridge
    from sklearn.preprocessing import StandardScaler

    X, y, _ = unscaled()
    n, lam = len(y), 0.05
    T = np.eye(3)[y]
    source = InMemoryStore(X, y, [0, 1, 2], chunk_rows=128)
    params = dict(generator="sequential", calibration="none", block_size=12, n_passes=1, lam=lam)
    model, log, _ = fit(source, **params)
    assert model.info["standardized"] is True
    scaler = StandardScaler().fit(X)
    ridge = Ridge(alpha=n * lam, solver="cholesky").fit(scaler.transform(X), T)
    coef = ridge.coef_ / scaler.scale_
    np.testing.assert_allclose(model.coef_ * scaler.scale_, ridge.coef_, rtol=0, atol=1e-8 * np.abs(ridge.coef_).max())
    np.testing.assert_allclose(model.intercept_, ridge.intercept_ - coef @ scaler.mean_, rtol=0, atol=1e-8)
    S = model.decision_function(X)
    expected = ((T - S) ** 2).sum() / (2 * n) + lam / 2 * (ridge.coef_**2).sum()
    assert log.records[-1]["objective"] == pytest.approx(expected, rel=1e-8)
    plain, _, _ = fit(source, standardize=False, **params)
    assert plain.info["standardized"] is False
    ridge = Ridge(alpha=n * lam, solver="cholesky").fit(X, T)
    np.testing.assert_allclose(plain.coef_, ridge.coef_, rtol=0, atol=1e-8 * np.abs(ridge.coef_).max())


@pytest.mark.parametrize(
    "params",
    [
        dict(generator="gradient", block_size=5, n_passes=3),  # calibration "auto" checked, penalty "total"
        dict(generator="random", block_size=4, n_passes=2, penalty="stage", calibration="poly"),
        dict(generator="sequential", block_size=6, n_passes=2, calibration="predictions"),
    ],
)
def test_standardized_fit_is_the_same_in_any_units(params):
    """The penalty on standardized columns (standardize=True) makes the fit invariant to the
    columns' units: the same data with every column in units 10^-3 … 10^3 (and offsets) gives
    the same calibration choice, the same predictions and scores to 1e-8, and weights that are
    the unit-free ones divided by the units; so does one column in 1000 times its units; on the
    columns as given (standardize=False) the units change the model."""
    X, y, units = unscaled(seed=1)
    Z = X / units  # the same columns in their natural units
    fits = {}
    for name, data in (("units", X), ("plain", Z)):
        fits[name] = fit(InMemoryStore(data, y, [0, 1, 2], chunk_rows=100), standardize=True, **params)[0]
    a, b = fits["units"], fits["plain"]
    assert a.info["calibration"] == b.info["calibration"]
    np.testing.assert_array_equal(a.predict(X), b.predict(Z))
    np.testing.assert_allclose(a.decision_function(X), b.decision_function(Z), rtol=0, atol=1e-8)
    if a.is_linear:
        np.testing.assert_allclose(a.coef_ * units, b.coef_, rtol=0, atol=1e-8 * np.abs(b.coef_).max())
    # a column in 1000 times its units gives the same scores
    X1 = Z.copy()
    X1[:, 3] *= 1000.0
    c = fit(InMemoryStore(X1, y, [0, 1, 2], chunk_rows=100), standardize=True, **params)[0]
    np.testing.assert_allclose(c.decision_function(X1), b.decision_function(Z), rtol=0, atol=1e-8)
    raw = fit(InMemoryStore(X, y, [0, 1, 2], chunk_rows=100), standardize=False, **params)[0]
    assert np.abs(raw.decision_function(X) - a.decision_function(X)).max() > 1e-3


def test_standardize_auto_where_the_columns_scales_spread():
    """standardize="auto" (the default) standardizes where the active columns' standard
    deviations span more than SCALE_SPREAD (columns in different units): the data in units
    10^-3 … 10^3 gets standardize=True's model bit for bit, the same columns in comparable units
    (a spread of a few) standardize=False's, and one column in 1000 times its units the
    standardized model of the comparable columns (to 1e-8)."""
    X, y, units = unscaled(seed=3)
    Z = X / units
    params = dict(generator="gradient", block_size=6, n_passes=2)
    stores = {name: InMemoryStore(data, y, [0, 1, 2], chunk_rows=100) for name, data in (("units", X), ("plain", Z))}
    s = Z.std(axis=0)
    assert s.max() / s.min() < base.SCALE_SPREAD < (s * units).max() / (s * units).min()
    for name, standardize in (("units", True), ("plain", False)):
        auto, _, _ = fit(stores[name], **params)
        given, _, _ = fit(stores[name], standardize=standardize, **params)
        assert auto.info["standardized"] is standardize
        for u, v in zip(auto.weights, given.weights, strict=True):
            np.testing.assert_array_equal(u, v)
    X1 = Z.copy()
    X1[:, 3] *= 1000.0
    one, _, _ = fit(InMemoryStore(X1, y, [0, 1, 2], chunk_rows=100), **params)
    scaled, _, _ = fit(stores["plain"], standardize=True, **params)
    assert one.info["standardized"]
    np.testing.assert_allclose(one.decision_function(X1), scaled.decision_function(Z), rtol=0, atol=1e-8)


def test_standardize_leaves_sparse_data_regression_and_softmax_alone(digits):
    """Sparse or wide data (text), real-valued targets and the softmax link keep the penalty on
    the columns as given, even with standardize=True: the same model, bit for bit, as
    standardize=False."""
    rng = np.random.default_rng(3)
    X = sp.random(300, 2000, density=0.01, format="csr", random_state=4)
    y = rng.integers(3, size=300)
    cases = [
        (InMemoryStore(X, y, [0, 1, 2], chunk_rows=100), dict(block_size=256)),
        (
            InMemoryStore(*digits, list(range(10)), chunk_rows=600),
            dict(link="softmax", generator="gradient", max_iter=3),
        ),
    ]
    Xd, _, _ = unscaled(seed=2)
    target = Xd[:, :3] @ np.array([1.0, -2.0, 0.5])
    cases.append((InMemoryStore(Xd, target.reshape(-1, 1), ["t"], chunk_rows=100), {}))
    for source, params in cases:
        default, _, _ = fit(source, standardize=True, **params)
        plain, _, _ = fit(source, standardize=False, **params)
        assert default.info["standardized"] is False
        for u, v in zip(default.weights, plain.weights, strict=True):
            np.testing.assert_array_equal(u, v)


def test_auto_check_uses_the_run_lam(digits, monkeypatch):
    """Generator "auto" compares its candidates at the run's λ (λ = max(1e-4, 10/n) for lam None,
    lam when given), in AUTO_CHECK_FOLDS folds: one ridge solve per candidate and fold
    (docs/benchmarks.md, session 24; at LAM_FLOOR the columns interpolated dna's 300 rows)."""
    X, y = digits
    X, y = X[:300], y[:300]
    seen: dict[str, list[float]] = {"check": [], "stages": []}
    where = ["stages"]
    real_solver, real_check = sw.StagewiseSolver._stage_solver, sw.StagewiseSolver._auto_check

    def solver_spy(self, M, n, lipschitz, data="the training data", lam=None, block=None):
        seen[where[0]].append(self.lam if lam is None else lam)
        return real_solver(self, M, n, lipschitz, data, lam, block)

    def check_spy(self, *args):
        where[0] = "check"
        try:
            return real_check(self, *args)
        finally:
            where[0] = "stages"

    monkeypatch.setattr(sw.StagewiseSolver, "_stage_solver", solver_spy)
    monkeypatch.setattr(sw.StagewiseSolver, "_auto_check", check_spy)
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=100)
    for lam, run in ((None, sw.LAM_ROWS / 300), (3e-3, 3e-3)):
        seen["check"].clear()
        seen["stages"].clear()
        model, _, _ = fit(source, n_components=128, block_size=64, n_passes=1, lam=lam)
        assert model.info["lam"] == pytest.approx(run)
        assert len(seen["check"]) == 3 * sw.AUTO_CHECK_FOLDS  # rff, columns, calibrated columns
        assert seen["check"] == pytest.approx([run] * len(seen["check"]))
        assert seen["stages"] and seen["stages"] == pytest.approx([run] * len(seen["stages"]))


def test_logged_objective_is_loss_plus_stage_penalties(digits):
    """objective = (1/n) Σ_i ℓ(ŷ_i; y_i) + (λ/2) Σ_t ‖D W_t‖²_F, with ℓ = ½‖y − u‖² for the
    identity link and the multinomial logistic loss for softmax: with one block and one pass
    it is the ridge objective at the closed-form solution; over several stages it is recomputed
    from the model's scores (logsumexp) and its stage weights. loss is the mean of Σ ℓ
    (without the ½ for the identity link: the squared error)."""
    X, y = digits
    n, lam = len(y), 1e-2
    Y = np.eye(10)[y]
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=300)
    _, log, _ = fit(
        source, generator="sequential", calibration="none", block_size=64, n_passes=1, lam=lam, standardize=False
    )
    A = np.hstack([np.ones((n, 1)), X.toarray()])
    D = np.eye(65)
    D[0, 0] = 0.0
    W = np.linalg.solve(A.T @ A / n + lam * D, A.T @ Y / n)
    error = ((Y - A @ W) ** 2).sum() / n
    assert log.records[-1]["loss"] == pytest.approx(error, rel=1e-9)
    assert log.records[-1]["objective"] == pytest.approx(error / 2 + lam / 2 * (W[1:] ** 2).sum(), rel=1e-9)
    for params in (
        dict(generator="sequential", calibration="none", block_size=16, n_passes=2),
        dict(link="softmax", generator="random", block_size=20, n_passes=1, max_iter=3),
    ):
        model, log, _ = fit(source, lam=lam, penalty="stage", standardize=False, **params)
        S = model.decision_function(X)
        if model.link == "identity":
            loss = 0.5 * ((Y - S) ** 2).sum() / n
        else:
            loss = (logsumexp(S, axis=1) - (Y * S).sum(axis=1)).sum() / n
        penalty = lam / 2 * sum((W[1:] ** 2).sum() for W in model.weights)
        assert len(model.weights) == len(log.records) > 1
        assert log.records[-1]["objective"] == pytest.approx(loss + penalty, rel=1e-9)
        assert log.records[-1]["objective"] > loss * (1 + 1e-6)  # the penalty counts


def test_softmax_monotone_and_reaches_sklearn_optimum(digits):
    X, y = digits
    n, lam = len(y), 1e-2
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=1000)
    model, log, _ = fit(
        source, link="softmax", generator="sequential", block_size=64, n_passes=1, lam=lam, max_iter=400, tol=0.0
    )
    f = np.array(log.records[-1]["inner_objective"])
    assert 100 < len(f) <= 401 and np.all(np.diff(f) <= 1e-15)  # tol=0: stops once f stalls
    lr = LogisticRegression(C=1.0 / (n * lam), tol=1e-12, max_iter=10_000).fit(X, y)
    U = X @ lr.coef_.T + lr.intercept_
    f_sk = link_loss_sum(U, np.eye(10)[y], "softmax") / n + lam / 2 * (lr.coef_**2).sum()
    assert abs(f[-1] - f_sk) <= 1e-4 * f_sk
    assert f[-1] >= f_sk * (1 - 1e-9)  # sklearn's is the optimum
    # one stage: the stage's f at its last iterate (the same sum of squares over the summed weights V
    # and over the stage's W, arrays of two layouts whose reductions may differ in the last bit)
    assert log.records[-1]["objective"] == pytest.approx(f[-1], rel=1e-14)


def sparse_text_like(n=120, d=300, k=4, seed=0):
    """Sparse rows with more columns than rows (as text: n < d, where least squares interpolates)."""
    X = sp.random(n, d, density=0.05, random_state=seed, format="csr")
    return X, np.random.default_rng(seed).integers(0, k, n).astype(np.int32)


@pytest.mark.parametrize("generator", ["random", "gradient"])
def test_total_penalty_converges_to_ridge(generator):
    """penalty="total" is block coordinate descent on the ridge objective of the summed weights,
    (1/n)‖Y − 1b − XV‖² + λ‖V‖² (b unpenalised): each stage minimises it exactly over its block,
    so the logged objective (half of it) never increases, and the passes reach the ridge model,
    scikit-learn's Ridge(alpha = nλ) on the 0/1 targets. penalty="stage", which penalises each
    stage's own weights, does not: with n < d its fixed point is the unpenalised least squares."""
    from sklearn.linear_model import Ridge

    X, y = sparse_text_like()
    n, k, lam = X.shape[0], 4, 3e-2
    Y = np.eye(k)[y]
    source = InMemoryStore(X, y, list(range(k)), chunk_rows=50)
    params = dict(generator=generator, block_size=100, n_passes=25, lam=lam)
    model, log, _ = fit(source, penalty="total", **params)
    ridge = Ridge(alpha=n * lam, solver="cholesky").fit(X.toarray(), Y)
    scale = np.abs(ridge.coef_).max()
    np.testing.assert_allclose(model.coef_, ridge.coef_, rtol=0, atol=1e-10 * scale)
    np.testing.assert_allclose(model.intercept_, ridge.intercept_, rtol=0, atol=1e-10 * scale)
    objective = np.array([r["objective"] for r in log.records])
    assert np.all(np.diff(objective) <= 1e-14 * objective[:-1])
    S = model.decision_function(X)
    ridge_objective = ((Y - S) ** 2).sum() / n + lam * (model.coef_**2).sum()
    assert objective[-1] == pytest.approx(ridge_objective / 2, rel=1e-12)
    stage, _, _ = fit(source, penalty="stage", **params)
    assert np.abs(stage.coef_ - ridge.coef_).max() > 0.1 * scale


def test_total_penalty_softmax_reaches_sklearn_optimum(digits):
    """The softmax link with penalty="total": block coordinate descent on the ℓ2-regularised
    logistic loss of the summed weights, whose optimum is scikit-learn's LogisticRegression
    with C = 1/(nλ); the logged objective is that objective and never increases."""
    X, y = digits
    X, y = X[:600], y[:600]
    n, lam = len(y), 3e-2
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=300)
    params = dict(link="softmax", generator="sequential", block_size=32, n_passes=10, max_iter=5, tol=0.0)
    model, log, _ = fit(source, penalty="total", lam=lam, **params)
    objective = np.array([r["objective"] for r in log.records])
    assert len(objective) == 20 and np.all(np.diff(objective) <= 1e-14 * objective[:-1])
    coef = np.zeros((10, 64))  # the summed weights of every column
    for block, W in zip(model.blocks, model.weights):
        coef[:, block] += W[1:].T
    f_model = link_loss_sum(model.decision_function(X), np.eye(10)[y], "softmax") / n + lam / 2 * (coef**2).sum()
    assert objective[-1] == pytest.approx(f_model, rel=1e-10)
    lr = LogisticRegression(C=1.0 / (n * lam), tol=1e-12, max_iter=10_000).fit(X, y)
    U = X @ lr.coef_.T + lr.intercept_
    f_sk = link_loss_sum(U, np.eye(10)[y], "softmax") / n + lam / 2 * (lr.coef_**2).sum()
    assert f_sk * (1 - 1e-9) <= objective[-1] <= f_sk * (1 + 1e-6)


@pytest.mark.parametrize("start", [0.25, 1 / 64])
def test_softmax_backtracking(digits, monkeypatch, start):
    """backtrack=True: steps from L/4, doubled on an increase. The accepted iterates decrease
    f, and within the same number of passes it gets closer to scikit-learn's optimum than the
    paper's fixed step 1/L. Started at L/64, steps get rejected: a pass that is not an iterate."""
    monkeypatch.setattr(sw, "BACKTRACK_START", start)
    X, y = digits
    n, lam = len(y), 1e-3
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=1000)
    params = dict(link="softmax", generator="sequential", block_size=64, n_passes=1, lam=lam, max_iter=30, tol=0.0)
    fixed, fixed_log, _ = fit(source, **params)
    model, log, _ = fit(source, backtrack=True, **params)
    f = np.array(log.records[-1]["inner_objective"])
    assert np.all(np.diff(f[:-1]) < 0) and f[-1] < f[0]
    assert (len(f) < len(fixed_log.records[-1]["inner_objective"])) == (start < 0.25)  # rejected passes
    assert model.info["data_passes"] == fixed.info["data_passes"]
    lr = LogisticRegression(C=1.0 / (n * lam), tol=1e-12, max_iter=10_000).fit(X, y)
    U = X @ lr.coef_.T + lr.intercept_
    f_sk = link_loss_sum(U, np.eye(10)[y], "softmax") / n + lam / 2 * (lr.coef_**2).sum()
    assert f_sk * (1 - 1e-9) <= f[-1] < fixed_log.records[-1]["inner_objective"][-1]


@pytest.mark.parametrize("calibration", ["none", "poly", "predictions"])
def test_identity_stages_never_increase_squared_error(digits, calibration):
    X, y = digits
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=500)
    _, log, _ = fit(
        source, calibration=calibration, generator="rff", n_components=600, block_size=100, n_passes=2, lam=1e-3
    )
    err = np.array([r["loss"] for r in log.records])  # Theorem 2's squared error
    assert len(err) == 12
    assert np.all(np.diff(err) <= 1e-12 * err[:-1])
    assert log.records[-1]["train_accuracy"] > 0.97


def test_poly_calibration_stable_when_predictions_reach_vertices():
    """20 classes, 2000 sparse features, 400 rows: the stages memorise the training rows, their
    predictions near the simplex's vertices and G = [1, ỹ, ỹ², ỹ³] becomes singular to working
    precision. The unregularised calibration fit amplified rounding: the squared error rose
    (against Theorem 2) and two chunkings differed by 1e-7."""
    rng = np.random.default_rng(0)
    X = sp.random(400, 2000, density=0.01, random_state=1, format="csr")
    y = rng.integers(0, 20, 400).astype(np.int32)
    runs = [
        fit(
            InMemoryStore(X, y, list(range(20)), chunk_rows=c),
            generator="sequential",
            block_size=100,
            n_passes=1,
            calibration="poly",
            lam=1e-4,
        )
        for c in (400, 77)
    ]
    for _, log, _ in runs:
        error = [r["loss"] for r in log.records]  # the squared error (Theorem 2)
        assert all(b <= a for a, b in itertools.pairwise(error)), error
    S = runs[0][0].decision_function(X)
    np.testing.assert_allclose(runs[1][0].decision_function(X), S, rtol=0, atol=1e-10)
    assert (S.argmax(axis=1) == y).mean() == 1.0  # memorised, as intended


def test_poly_calibration_predictions_on_simplex(digits):
    X, y = digits
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=700)
    model, log, ckpt = fit(source, calibration="poly", generator="random", block_size=20, n_passes=1)
    F = training_scores(source, ckpt, log.records[-1]["stage"] + 1)
    assert F.min() >= 0 and np.allclose(F.sum(axis=1), 1.0)
    np.testing.assert_allclose(model.decision_function(X), F, rtol=0, atol=1e-12)


def test_simplex_projection():
    rng = np.random.default_rng(0)
    V = rng.normal(size=(200, 7)) * 2
    P = project_rows_simplex(V)
    assert np.all(P >= 0) and np.allclose(P.sum(axis=1), 1)
    # optimality (KKT): on the support, v - p is constant and >= v - p off it
    for v, p in zip(V, P):
        gap = v - p
        on = p > 0
        assert np.ptp(gap[on]) < 1e-12 and np.all(v[~on] <= gap[on][0] + 1e-12)


def test_generators_cover_active_columns(digits):
    X, y = digits
    active = np.flatnonzero(X.getnnz(axis=0))
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=600)
    for generator in ("sequential", "random", "gradient"):
        model, log, _ = fit(source, generator=generator, block_size=16, n_passes=2)
        n_blocks = -(-len(active) // 16)
        assert len(model.blocks) == 2 * n_blocks
        for pass_blocks in (model.blocks[:n_blocks], model.blocks[n_blocks:]):
            np.testing.assert_array_equal(np.sort(np.concatenate(pass_blocks)), active)
        assert [r["n_features"] for r in log.records][n_blocks - 1 :] == [len(active)] * (n_blocks + 1)
    # the gradient generator's first block: the columns with the largest ‖X_jᵀ Y‖, standardized
    # (the columns' standard deviations s_j: digits is dense, so its penalty is on S V)
    assert model.info["standardized"]
    s = X.toarray().std(axis=0)
    G = np.sqrt(((X.T @ np.eye(10)[y]) ** 2).sum(axis=1)) / np.where(s > 0, s, 1.0)
    top = active[np.argsort(-G[active], kind="stable")[:16]]
    np.testing.assert_array_equal(model.blocks[0], top)


def test_the_gradient_order_of_columns_near_1e100_is_their_order(digits):
    """Columns of values near 1e100 (the Python API's float64 arrays; a store refuses values
    beyond float32) have gradient norms beyond float32's range: the cast that compares them made
    them all +inf, with numpy's overflow RuntimeWarning, and the order was the column ids'. The
    norms are now compared after an exact division by a power of two: no warning, and the first
    block of digits × 2^332 (≈ 8.7e99, exact) is that of digits as they are."""
    import warnings

    X, y = digits
    params = dict(generator="gradient", block_size=16, n_passes=1, standardize=False)
    plain = fit(InMemoryStore(X, y, list(range(10)), chunk_rows=600), **params)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        big = fit(InMemoryStore(X * 2.0**332, y, list(range(10)), chunk_rows=600), **params)[0]
    active = np.flatnonzero(X.getnnz(axis=0))
    np.testing.assert_array_equal(big.blocks[0], plain.blocks[0])
    assert not np.array_equal(plain.blocks[0], active[:16])  # the ids' order is not the gradients'


def test_hashed_sparse_multilabel():
    rng = np.random.default_rng(1)
    n, d, k = 600, 1 << 16, 5
    cols = rng.choice(d, size=300, replace=False)  # a hashed store: few active columns
    X = sp.random(n, 300, density=0.05, random_state=2, format="csr")
    X = sp.csr_matrix((X.data, cols[X.indices], X.indptr), shape=(n, d))
    Wtrue = rng.normal(size=(d, k))
    Y = sp.csr_matrix((X @ Wtrue > 0.3).astype(np.float32))
    source = InMemoryStore(X, Y, [f"l{j}" for j in range(k)], chunk_rows=128)
    for link in ("identity", "softmax"):
        model, log, _ = fit(source, link=link, generator="auto", block_size=100, n_passes=3, max_iter=20)
        assert model.info["generator"] == "gradient"
        assert all(len(b) <= 100 and set(b) <= set(cols) for b in model.blocks)
        P1 = np.mean(np.asarray(Y[np.arange(n), np.argmax(model.decision_function(X), axis=1)]).ravel() > 0)
        assert log.records[-1]["train_p_at_1"] == P1 > 0.9  # the logged precision at 1, recomputed
        P = model.predict(X)
        assert P.shape == (n, k) and set(np.unique(P)) <= {0, 1}


def test_auto_checks_rff_against_stored_columns(digits):
    """generator="auto" on dense low-dimensional inputs: random Fourier features where they
    validate better than the stored columns (digits), the stored columns where distances
    concentrate and the classes are linear in the inputs (one-hot sequences, like Statlog dna)."""
    X, y = digits
    model, _, _ = fit(InMemoryStore(X, y, list(range(10)), chunk_rows=500), n_components=256, block_size=128)
    assert model.info["generator"] == "rff"
    rng = np.random.default_rng(4)
    n, positions = 2000, 60
    letters = rng.integers(0, 4, size=(n, positions))  # one-hot in 3 columns, the 4th letter all zero
    X = sp.csr_matrix(np.hstack([(letters == a).astype(float) for a in range(3)]))
    y = (X @ rng.normal(size=X.shape[1]) > 0).astype(np.int32)
    source = InMemoryStore(X[:1500], y[:1500], ["a", "b"], chunk_rows=400)
    model, _, _ = fit(source, n_components=256, block_size=128)
    assert model.info["generator"] == "gradient"
    rff, _, _ = fit(source, generator="rff", n_components=256, block_size=128)
    truth = np.array(["a", "b"])[y[1500:]]
    assert np.mean(model.predict(X[1500:]) == truth) > np.mean(rff.predict(X[1500:]) == truth) + 0.05


@pytest.fixture(scope="module")
def local_engine():
    with Engine(mode="local", n_workers=2) as engine:
        yield engine


@pytest.mark.parametrize(
    "params",
    [
        dict(generator="rff", n_components=200, block_size=100, pca_components=20, n_passes=2),
        dict(
            generator="rff",
            n_components=201,
            block_size=100,
            n_passes=2,
            rff_sampling="orthogonal",
            rff_phases="paired",
            calibration="predictions",
        ),
        dict(generator="gradient", block_size=20, n_passes=2, calibration="predictions"),
        dict(link="softmax", generator="random", block_size=32, n_passes=1, max_iter=5),
        dict(link="softmax", generator="rff", n_components=200, block_size=100, n_passes=2, max_iter=3, backtrack=True),
        dict(generator="sequential", block_size=32, n_passes=1, calibration="poly"),
        dict(
            link="softmax", generator="rff", n_components=200, block_size=100, n_passes=2, max_iter=3, penalty="total"
        ),
        dict(generator="gradient", block_size=20, n_passes=2, calibration="predictions", penalty="total"),
    ],
)
def test_same_model_any_workers_and_chunking(digits, tmp_path, local_engine, params):
    X, y = digits
    X, y = X[:1200], y[:1200]
    classes = [str(c) for c in range(10)]
    store_a = write_store(tmp_path / "a", X, y, classes, chunk_rows=256)
    store_b = write_store(tmp_path / "b", X, y, classes, chunk_rows=100)
    with threadpool_limits(1):  # the sums AᵀA, AᵀR are BLAS products: as on the workers, one thread
        serial, _, _ = fit(store_a, str(tmp_path / "run1"), lam=1e-3, **params)
    parallel, log, ckpt = fit(store_a, str(tmp_path / "run2"), engine=local_engine, lam=1e-3, **params)
    rechunked, _, _ = fit(store_b, str(tmp_path / "run3"), lam=1e-3, **params)
    S = serial.decision_function(X)
    # digits' pixel columns spread their scales over more than SCALE_SPREAD: the identity link's
    # stored-column runs penalise standardized columns, whose s comes from the scan's sums
    assert serial.info["standardized"] == (params.get("link") != "softmax" and params["generator"] != "rff")
    np.testing.assert_array_equal(parallel.decision_function(X), S)  # the reduction tree is fixed
    np.testing.assert_allclose(rechunked.decision_function(X), S, rtol=0, atol=1e-10)
    # scoring replays the stages exactly: the scores of training time
    np.testing.assert_allclose(training_scores(store_a, ckpt, len(log.records)), S, rtol=0, atol=1e-12)


def test_sparse_designs_kept_between_stages_give_the_same_model(digits, tmp_path):
    """A chunk of a store's cache keeps the sparse design its update task built for the next
    stage's block, which that stage then uses (sf._SPARSE_DESIGNS); an in-memory source builds
    every design afresh. The same rows in the same chunks give the same bits either way."""
    X, y = digits
    classes = [str(c) for c in range(10)]
    store = write_store(tmp_path / "s", X[:800], y[:800], classes, chunk_rows=200)
    Xs, ys = store.to_scipy()
    params = dict(generator="gradient", block_size=16, n_passes=2, lam=1e-3)
    with threadpool_limits(1):
        kept, _, _ = fit(store, str(tmp_path / "r1"), **params)
        fresh, _, _ = fit(InMemoryStore(Xs, ys, classes, chunk_rows=200), str(tmp_path / "r2"), **params)
    assert sorted(sf._SPARSE_DESIGNS[store]) == [0, 1, 2, 3]
    np.testing.assert_array_equal(kept.decision_function(X), fresh.decision_function(X))


def test_gradient_order_ignores_chunking_noise(digits):
    """Near-duplicate rows, each with a rare term of its own (as in sector): their columns' gradient
    norms are equal in exact arithmetic and differ in the last bits with the chunking. Ordered by
    those bits they fell on either side of a block boundary depending on chunk_rows, and the
    models differed by ~1e-3; the order must not depend on the chunking."""
    X, y = digits
    rng = np.random.default_rng(0)
    rows = np.repeat(rng.choice(X.shape[0], 60, replace=False), 3)[rng.permutation(180)]
    n = len(rows)
    Xd = sp.hstack([X[rows], sp.csr_matrix((np.full(n, 0.5), (np.arange(n), np.arange(n))))], format="csr")
    models = [
        fit(
            InMemoryStore(Xd, y[rows], list(range(10)), chunk_rows=c),
            generator="gradient",
            block_size=13,
            n_passes=3,
            lam=1e-3,
        )[0]
        for c in (180, 41)
    ]
    for a, b in zip(models[0].blocks, models[1].blocks, strict=True):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_allclose(models[1].decision_function(Xd), models[0].decision_function(Xd), rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "params",
    [
        dict(generator="gradient", block_size=12, n_passes=2, calibration="poly", lam=1e-3),
        dict(generator="sequential", block_size=12, n_passes=3, link="softmax", max_iter=3, lam=1e-3),  # cached AᵀA
        # the summed weights V are recomputed from the stored stages
        dict(generator="random", block_size=12, n_passes=2, calibration="predictions", penalty="total", lam=1e-3),
    ],
)
def test_resume_is_bitwise(digits, tmp_path, monkeypatch, params):
    X, y = digits
    classes = [str(c) for c in range(10)]
    store = write_store(tmp_path / "store", X, y, classes, chunk_rows=400)
    full, full_log, _ = fit(store, str(tmp_path / "full"), **params)

    run = str(tmp_path / "run")
    fit(store, run, stop_after=3, **params)  # a time-boxed first call
    # then a crash in the middle of stage 5's update pass: chunks 0-1 of scores v5 get written
    real_update = sw._update_task

    def crash(source, chunk_id, **kw):
        if kw["version"] == 4 and chunk_id == 2:
            raise KeyboardInterrupt("killed")
        return real_update(source, chunk_id, **kw)

    monkeypatch.setattr(sw, "_update_task", crash)
    with pytest.raises(KeyboardInterrupt):
        fit(store, run, resume=True, **params)
    monkeypatch.setattr(sw, "_update_task", real_update)
    resumed, _, _ = fit(store, run, resume=True, **params)

    a, b = full._arrays(), resumed._arrays()
    assert resumed.info["standardized"] == full.info["standardized"] == (params.get("link") != "softmax")
    assert a.keys() == b.keys()
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
    assert resumed.info["data_passes"] == full.info["data_passes"]
    with open(os.path.join(run, "metrics.jsonl")) as f:
        lines = [json.loads(line) for line in f]
    strip = [{k: v for k, v in r.items() if k != "wall_time"} for r in lines]
    assert strip == [{k: v for k, v in r.items() if k != "wall_time"} for r in full_log.records]


@pytest.mark.parametrize(
    "params",
    [
        {"generator": "rff", "n_components": 300, "block_size": 100, "pca_components": 20, "calibration": "poly"},
        {
            "generator": "rff",
            "n_components": 300,
            "block_size": 100,
            "calibration": "predictions",
            "rff_phases": "paired",
        },
        {"generator": "rff", "n_components": 300, "block_size": 100, "gram_dtype": "float32"},
    ],
)
def test_scoring_replays_training_bitwise_any_batch(digits, params):
    """The issue asks for exactly the training-time scores. BLAS rounds a row depending on the
    other rows of the call (odd chunks of 777 rows, odd scoring batches of 333, panels of 1024,
    its threads, the CPU's kernel): rows differed from training in the last bits (1e-15). The
    row-wise products (`rowwise_matmul`) give the same bits with any batch and BLAS threads,
    float32 designs included."""
    X, y = digits
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=777)
    with threadpool_limits(1):  # trained as on the cluster's single-threaded workers
        model, log, ckpt = fit(source, **params)
    for threads in (1, 2):
        with threadpool_limits(threads):
            S = model.decision_function(X)
            np.testing.assert_array_equal(S, training_scores(source, ckpt, len(log.records)))
            np.testing.assert_array_equal(
                np.vstack([model.decision_function(X[a : a + 333]) for a in range(0, X.shape[0], 333)]), S
            )


def test_caches_change_nothing(digits, monkeypatch):
    """Passes after the first reuse each block's AᵀA instead of summing it again, and tasks reuse
    the random Fourier designs kept per chunk: the same bits as recomputing everything."""
    X, y = digits
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=500)
    params = dict(
        generator="rff", n_components=300, block_size=100, n_passes=3, lam=1e-3, link="softmax", max_iter=3, tol=0
    )
    grams, designs = [], []
    real_stats, real_design = sw._block_stats, sf.FeatureSpace.design
    monkeypatch.setattr(sw, "_block_stats", lambda *a: grams.append(a[-1]) or real_stats(*a))
    monkeypatch.setattr(sf.FeatureSpace, "design", lambda *a, **k: designs.append(1) or real_design(*a, **k))
    cached, _, _ = fit(source, **params)
    assert sum(map(bool, grams)) == 3 * source.n_chunks  # one AᵀA per block, not one per stage
    assert len(designs) == 3 * source.n_chunks  # all three blocks fit: each computed once per chunk
    monkeypatch.setattr(sw, "GRAM_CACHE_BYTES", 0)
    monkeypatch.setattr(sf, "CHUNK_CACHE_BYTES", 0)
    designs.clear()
    recomputed, _, _ = fit(source, **params)
    # first stats pass, 2 inner passes per stage, the update's block and the next stage's block
    assert len(designs) == (1 + 9 * 2 + 9 + 8) * source.n_chunks
    for a, b in zip(cached.weights, recomputed.weights, strict=True):
        np.testing.assert_array_equal(a, b)
    # room for two blocks and a spare: blocks cycle through the cache and spare arrays get refilled
    monkeypatch.setattr(sf, "CHUNK_CACHE_BYTES", 3 * source.n_rows * 101 * 8)
    sf._DESIGNS.clear()  # the first fit's designs (the same features) would still be found
    designs.clear()
    cycled, _, _ = fit(source, **params)
    assert len(designs) == 9 * source.n_chunks  # each stage's block once per chunk
    for a, b in zip(cached.weights, cycled.weights, strict=True):
        np.testing.assert_array_equal(a, b)


def test_rff_approximates_gaussian_kernel():
    """E[φ(z)ᵀφ(z')]/p = exp(−‖z − z'‖²/(2σ²)) (Rahimi & Recht): with p = 40 000 features the
    Monte-Carlo error is about 1/√p = 0.005; the polynomial cosine adds ~1e-15."""
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(6, 5))
    sigma = 2.0
    Phi = np.hstack([rff_block(Z, 11, b, 10_000, sigma) for b in range(4)])
    K = Phi @ Phi.T / Phi.shape[1]
    d2 = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(axis=2)
    assert np.abs(K - np.exp(-d2 / (2 * sigma**2))).max() < 0.03
    rng = np.random.default_rng([11, 2])  # block 2's frequencies and phases, in float64
    omega = rng.standard_normal((5, 10_000)) / sigma
    exact = np.sqrt(2.0) * np.cos(Z @ omega + rng.uniform(0, 2 * np.pi, 10_000))
    assert np.abs(rff_block(Z, 11, 2, 10_000, sigma) - exact).max() < 1e-12
    big = Z * 40  # phases of hundreds of radians: the reduction to [−π, π] keeps it exact
    rng = np.random.default_rng([11, 2])
    omega = rng.standard_normal((5, 10_000)) / sigma
    exact = np.sqrt(2.0) * np.cos(big @ omega + rng.uniform(0, 2 * np.pi, 10_000))
    out = np.full((6, 10_003), 7.0)
    rff_block(big, 11, 2, 10_000, sigma, out=out, col=2)  # into columns 2 … 10 001 of a design
    assert np.abs(out[:, 2:-1] - exact).max() < 1e-10
    assert np.all(out[:, :2] == 7.0) and np.all(out[:, -1] == 7.0)


@pytest.mark.parametrize("beta", [np.array([0.1, 2.0]), None])
def test_rff_features_stay_bounded_for_huge_phases(beta):
    """An input far out of scale (1e30 where the median distance is ~1) gives phases whose
    reduction to [−π, π] fails: the features must stay in [−√2, √2], not run off to inf (a
    non-finite AᵀA); ordinary phases keep their exact values."""
    Z = np.array([[1e30], [-3e17], [1e16], [2.5]])
    omega = np.array([[1.0, -1.7]])
    F = rff_features(Z, omega, beta)
    assert np.isfinite(F).all() and np.abs(F).max() <= np.sqrt(2.0) + 1e-12
    phase = Z[-1] @ omega + (0.0 if beta is None else beta)
    exact = np.sqrt(2.0) * (np.cos(phase) if beta is not None else np.r_[np.cos(phase), np.sin(phase)])
    np.testing.assert_allclose(F[-1], exact, rtol=0, atol=1e-14)


def test_outlier_rows_with_rff_and_pca(tmp_path):
    """A stored value of 1e30 is valid float32, but its square overflowed the single-precision
    PCA covariance (eigh on inf) and its phases the cosine polynomial: training finishes, with
    finite scores (the outlier owns the PCA, so only finiteness is asked there; without PCA the
    median trick ignores it and the other rows are fitted as usual)."""
    X, y = load_digits(return_X_y=True)
    X, y = X[:300] / 16.0, y[:300]
    X[7, 10] = 1e30
    store = write_store(tmp_path / "s", X, y, [str(c) for c in range(10)], chunk_rows=100)
    for pca in (8, None):
        model, _, _ = fit(store, generator="rff", pca_components=pca, n_components=256, block_size=128, n_passes=1)
        S = model.decision_function(sp.csr_matrix(X, dtype=np.float32))
        assert np.isfinite(S).all()
    assert (S.argmax(axis=1) == y).mean() > 0.9


def test_non_finite_store_is_a_clear_error(tmp_path):
    """A store can hold inf (written through StoreWriter, or by an older ingest): an InputError
    naming the store, row and feature, not a LinAlgError from the first solve."""
    X, y = load_digits(return_X_y=True)
    X = X[:300] / 16.0
    X[234, 5] = np.inf
    store = write_store(tmp_path / "s", X, y[:300], [str(c) for c in range(10)], chunk_rows=100)
    for generator in ("sequential", "rff"):
        with pytest.raises(InputError, match=r"s, row 234 \(chunk 2\): feature 5 is NaN or infinite"):
            fit(store, generator=generator, n_components=64, block_size=32)


def test_overflowing_gram_is_a_clear_error():
    """In-memory float64 features of 1e200 overflow AᵀA: an InputError saying to scale them."""
    X, y = load_digits(return_X_y=True)
    X = X[:200] / 16.0
    X[3, 20] = 1e200
    for generator in ("sequential", "auto"):
        source = InMemoryStore(sp.csr_matrix(X), y[:200].astype(np.int32), list(range(10)), chunk_rows=64)
        with pytest.raises(InputError, match="overflow float64.*scale the features"):
            fit(source, generator=generator)


@pytest.mark.parametrize("orthogonal,paired", [(True, False), (False, True), (True, True)])
def test_orthogonal_and_paired_features_approximate_gaussian_kernel(orthogonal, paired):
    """Orthogonal random features (Yu et al. 2016) and paired cos/sin features estimate the same
    kernel: φ(z)ᵀφ(z')/p → exp(−‖z − z'‖²/(2σ²)); Ω's columns come in groups of mutually
    orthogonal directions; the features are √2 cos / √2 sin of ZΩ (checked against numpy); and
    averaged over seeds, the kernel error is below that of i.i.d. frequencies with random phases
    at the same number of features."""
    rng = np.random.default_rng(3)
    Z = rng.normal(size=(6, 5))
    sigma = 2.0
    kind = dict(orthogonal=orthogonal, paired=paired)
    d2 = ((Z[:, None, :] - Z[None, :, :]) ** 2).sum(axis=2)
    K = np.exp(-d2 / (2 * sigma**2))
    Phi = np.hstack([rff_block(Z, 11, b, 10_000, sigma, **kind) for b in range(4)])
    assert np.abs(Phi @ Phi.T / Phi.shape[1] - K).max() < 0.03
    omega, beta = rff_frequencies(11, 2, 5, 11, sigma, **kind)
    assert omega.shape == (5, 6 if paired else 11) and (beta is None) == paired
    if orthogonal:
        G = omega[:, :5].T @ omega[:, :5]  # the first group: 5 orthogonal directions
        np.testing.assert_allclose(G - np.diag(np.diag(G)), 0, atol=1e-12)
    phase = Z @ omega
    exact = np.sqrt(2) * (np.hstack([np.cos(phase), np.sin(phase[:, :5])]) if paired else np.cos(phase + beta))
    assert np.abs(rff_block(Z, 11, 2, 11, sigma, **kind) - exact).max() < 1e-12
    Zs = rng.normal(size=(40, 8)) * np.linspace(2, 0.5, 8)
    d2 = ((Zs[:, None, :] - Zs[None, :, :]) ** 2).sum(axis=2)
    sigma = float(np.sqrt(np.median(d2)))
    Ks = np.exp(-d2 / (2 * sigma**2))

    def mse(**k):
        return np.mean(
            [((lambda P: P @ P.T / 64)(rff_block(Zs, seed, 0, 64, sigma, **k)) - Ks) ** 2 for seed in range(200)]
        )

    assert mse(**kind) < 0.9 * mse()


def test_float32_gram(digits):
    """gram_dtype="float32": random Fourier designs in single precision, and AᵀA, AᵀR, AW from
    single-precision products. The
    squared error still never increases (the Gram's error, ~1e-6 relative, is far below λ and the
    Gram's smallest eigenvalue) and the model matches the float64 one to ~1e-5."""
    X, y = digits
    source = InMemoryStore(X, y, list(range(10)), chunk_rows=2000)  # one chunk: predict is bitwise
    params = dict(generator="rff", n_components=600, block_size=200, n_passes=2, lam=1e-4)
    exact, _, _ = fit(source, **params)
    single, log, ckpt = fit(source, gram_dtype="float32", **params)
    err = np.array([r["loss"] for r in log.records])
    assert np.all(np.diff(err) < 0)
    S, S32 = exact.decision_function(X), single.decision_function(X)
    assert 1e-12 < np.abs(S32 - S).max() < 1e-4 * np.abs(S).max()  # different, but barely
    assert np.mean(S.argmax(axis=1) == S32.argmax(axis=1)) > 0.999
    np.testing.assert_array_equal(training_scores(source, ckpt, len(log.records)), S32)  # predict replays training


def test_model_save_load(digits, tmp_path):
    X, y = digits
    source = InMemoryStore(X, y, [str(c) for c in range(10)], chunk_rows=500)
    for params in (
        dict(generator="rff", n_components=256, block_size=128, pca_components=16),
        dict(generator="sequential", block_size=30),
        dict(generator="rff", n_components=255, block_size=128, rff_sampling="orthogonal", rff_phases="paired"),
        dict(link="softmax", generator="random", max_iter=3, block_size=40),
    ):
        model, _, _ = fit(source, **params)
        model.save(str(tmp_path / "m"))
        loaded = load_model(str(tmp_path / "m"))
        assert loaded.kind == "stagewise"
        np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))
        np.testing.assert_array_equal(loaded.predict(X), model.predict(X))
    assert np.mean(loaded.predict(X) == np.asarray(source.classes)[y]) > 0.9


# -- defaults on small data (issue 20) ----------------------------------------------------------


def test_auto_calibrates_small_dense_multiclass():
    """Least squares on 0/1 class indicators masks iris' middle class (§3.1): the plain ridge
    fit of the stored columns is far below LogisticRegression; calibration "auto" resolves to
    Algorithm 2 there ("poly": it validates better on the row sample than the plain columns),
    and the default model is within one test row (of 45) of it on the mean of three splits."""
    from sklearn.datasets import load_iris
    from sklearn.model_selection import train_test_split

    X, y = load_iris(return_X_y=True)
    ours, plain, peer = [], [], []
    for split in range(3):
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=split, stratify=y)
        source = InMemoryStore(sp.csr_matrix(Xtr), ytr.astype(np.int32), [0, 1, 2], chunk_rows=40)
        model, _, _ = fit(source)
        # never the plain columns; since session 24's 5-fold check at the run's λ, the random
        # Fourier block wins on two of these splits (test accuracy 0.978 and 1.0)
        assert (model.info["generator"], model.info["calibration"]) in {("gradient", "poly"), ("rff", "none")}
        ours.append(np.mean(model.decision_function(sp.csr_matrix(Xte)).argmax(axis=1) == yte))
        linear, _, _ = fit(source, calibration="none", generator="gradient")
        explicit, _, _ = fit(source, generator="sequential")  # "auto" calibration on any stored-column GEN
        assert explicit.info["calibration"] == "poly"
        plain.append(np.mean(linear.decision_function(sp.csr_matrix(Xte)).argmax(axis=1) == yte))
        peer.append(LogisticRegression(max_iter=5000).fit(Xtr, ytr).score(Xte, yte))
    assert np.mean(plain) < np.mean(peer) - 0.1  # the masking the calibration is for
    assert np.mean(ours) >= np.mean(peer) - 1.0 / len(yte) - 1e-12


def test_auto_keeps_random_features_where_classes_are_not_linear():
    """Nested Gaussian shells (make_gaussian_quantiles): no linear model beats chance; the
    "auto" check (held-out rows whose top class is right) picks random Fourier features over the
    calibrated columns, as on digits (test_auto_checks_rff_against_stored_columns)."""
    from sklearn.datasets import make_gaussian_quantiles

    X, y = make_gaussian_quantiles(n_samples=1000, n_features=5, n_classes=3, random_state=5)
    source = InMemoryStore(sp.csr_matrix(X[:700]), y[:700].astype(np.int32), [0, 1, 2], chunk_rows=300)
    model, _, _ = fit(source)
    assert (model.info["generator"], model.info["calibration"]) == ("rff", "none")
    peer = LogisticRegression(max_iter=5000).fit(X[:700], y[:700]).score(X[700:], y[700:])
    assert np.mean(model.decision_function(sp.csr_matrix(X[700:])).argmax(axis=1) == y[700:]) > peer + 0.2


def topics(n, seed, d=3000, k=20):
    """A multilabel set that a ridge fit overfits (n < d): two labels ("topics") a row, each
    drawn with 4 of its own 8 words, and 30 noise words from the d − 8k others."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, k, size=(n, 2))
    words = np.hstack([rng.integers(0, 8, size=(n, 4)) + 8 * labels[:, [j]] for j in range(2)])
    words = np.hstack([words, rng.integers(8 * k, d, size=(n, 30))])
    X = sp.csr_matrix((np.ones(words.size), (np.repeat(np.arange(n), words.shape[1]), words.ravel())), shape=(n, d))
    X.sum_duplicates()
    X.data[:] = 1.0
    Y = np.zeros((n, k), dtype=np.float32)
    Y[np.arange(n)[:, None], labels] = 1
    return X, sp.csr_matrix(Y)


def test_multilabel_threshold_on_heldout_scores_predicts_the_label_count():
    """On training rows that the model nearly interpolates, the threshold of the best micro-F1
    on the training scores is 0.005 and predicted 5.6 times the true labels of the test rows
    (micro-F1 0.30); on the held-out scores it predicts about the true count (0.99 times,
    micro-F1 0.99)."""
    X, Y = topics(600, 0)
    Xt, Yt = topics(600, 1)
    source = InMemoryStore(X, Y, [f"t{j}" for j in range(20)], chunk_rows=256)
    model, _, ckpt = fit(source)
    train = best_threshold(
        threshold_counts(training_scores(source, ckpt, model.info["stages"]), Y.toarray() > 0, sw.THRESHOLD_GRID),
        sw.THRESHOLD_GRID,
    )
    assert train < 0.05  # the training scores' own threshold
    P, T = model.predict(Xt) > 0, Yt.toarray() > 0
    assert abs(P.sum() / T.sum() - 1) < 0.15
    assert 2 * (P & T).sum() / (P.sum() + T.sum()) > 0.9


def test_multilabel_heldout_scores_are_leave_one_out_for_one_block():
    """With every column in one block the last pass's stage is the ridge fit on [1, X], and
    F̃ = Y − (Y − F)/(1 − h) are its exact leave-one-out scores: the threshold is the one of
    refits without each row, one at a time (A's Gram with n·λ on the weights, as the stage)."""
    X, Y = topics(150, 2, d=120, k=6)
    n, lam = X.shape[0], 1e-2
    source = InMemoryStore(X, Y, [f"t{j}" for j in range(6)], chunk_rows=64)
    model, _, _ = fit(source, generator="sequential", lam=lam)
    assert len(model.blocks) == 2 and model.info["calibration"] == "none"
    A = np.hstack([np.ones((n, 1)), X.toarray()])
    s = X.toarray().std(axis=0) if model.info["standardized"] else np.ones(X.shape[1])
    D = np.diag(np.r_[0.0, np.where(s > 0, s, 1.0) ** 2])  # the penalty on S V, S from all n rows
    Yd = Y.toarray()
    loo = np.empty_like(Yd)
    for i in range(n):
        keep = np.arange(n) != i
        W = np.linalg.solve(A[keep].T @ A[keep] + n * lam * D, A[keep].T @ Yd[keep])
        loo[i] = A[i] @ W
    expected = best_threshold(threshold_counts(loo, Yd > 0, sw.THRESHOLD_GRID), sw.THRESHOLD_GRID)
    inside = best_threshold(
        threshold_counts(model.decision_function(X), Yd > 0, sw.THRESHOLD_GRID),
        sw.THRESHOLD_GRID,
    )
    assert model.decision_threshold == expected != inside


@pytest.mark.parametrize(
    "params",
    [
        dict(generator="gradient", block_size=40, n_passes=2),
        dict(generator="rff", n_components=96, block_size=32, n_passes=2),
    ],
)
def test_multilabel_heldout_threshold_any_workers_chunking_and_resume(tmp_path, local_engine, monkeypatch, params):
    """κ is summed per row in the last pass's update passes: the same threshold (and model) on
    1 or 2 workers, another chunking, and after a crash in the last pass and a resume."""
    X, Y = topics(400, 3, d=200, k=8)
    classes = [f"t{j}" for j in range(8)]
    store_a = write_store(tmp_path / "a", X, Y, classes, chunk_rows=128, multilabel=True)
    store_b = write_store(tmp_path / "b", X, Y, classes, chunk_rows=90, multilabel=True)
    with threadpool_limits(1):
        serial, _, _ = fit(store_a, str(tmp_path / "run1"), **params)
    parallel, _, _ = fit(store_a, str(tmp_path / "run2"), engine=local_engine, **params)
    rechunked, _, _ = fit(store_b, str(tmp_path / "run3"), **params)
    assert serial.decision_threshold is not None
    assert parallel.decision_threshold == rechunked.decision_threshold == serial.decision_threshold
    np.testing.assert_array_equal(parallel.decision_function(X), serial.decision_function(X))
    stages = serial.info["stages"]
    real_update = sw._update_task

    def crash(source, chunk_id, **kw):  # in the last stage's update pass, after chunk 0
        if kw["version"] == stages - 1 and chunk_id == 1:
            raise KeyboardInterrupt("killed")
        return real_update(source, chunk_id, **kw)

    run = str(tmp_path / "run4")
    monkeypatch.setattr(sw, "_update_task", crash)
    with pytest.raises(KeyboardInterrupt), threadpool_limits(1):
        fit(store_a, run, **params)
    monkeypatch.setattr(sw, "_update_task", real_update)
    with threadpool_limits(1):
        resumed, _, _ = fit(store_a, run, resume=True, **params)
    assert resumed.decision_threshold == serial.decision_threshold
    np.testing.assert_array_equal(resumed.decision_function(X), serial.decision_function(X))


def test_an_update_task_holds_one_array_of_scores_besides_its_write(tmp_path, monkeypatch):
    """Many classes of few rows (qa30's store in small): an update task computes the new scores
    into its own copy of the old ones in row slices, writes them, and computes their residual in
    their place without the one-hot targets (class ids, identity link), so that its traced peak
    is the write's bytes (one array of rows × classes, the scores themselves handed over by the
    state's cache) and a slice: 1.05 arrays here. Before, it held the targets, the old scores'
    copy, A W and the new scores at once: 4.03. The model is the same either way (fingerprints)."""
    import tracemalloc

    k, per_class, d = 300, 2, 60
    n = k * per_class
    labels = np.repeat(np.arange(k), per_class).astype(np.int32)
    X = sp.random(n, d, density=0.1, random_state=1, format="csr") + sp.csr_matrix(
        (np.ones(n), (np.arange(n), labels % d)), shape=(n, d)
    )
    store = write_store(tmp_path / "s.zarr", X, labels, [f"c{i}" for i in range(k)], chunk_rows=n)
    monkeypatch.setattr(sw, "SLICE_BYTES", 1 << 16)  # several slices of this small chunk
    peaks: list[int] = []
    update = sw._update_task

    def traced(*args, **kwargs):
        if kwargs["version"] == 0:  # the first stage's zero scores are one more (mostly unwritten) array
            return update(*args, **kwargs)
        tracemalloc.start()
        try:
            return update(*args, **kwargs)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    monkeypatch.setattr(sw, "_update_task", traced)
    fit(store, run_dir=str(tmp_path / "run"), block_size=8, n_passes=1, generator="sequential")
    scores = 8 * n * k
    assert len(peaks) >= 5
    assert max(peaks) < 1.5 * scores, (max(peaks) / scores, len(peaks))


@pytest.mark.parametrize(
    "params",
    [
        {},
        {"block_size": 256, "generator": "sequential"},
        {"block_size": 256, "n_passes": 3},
        {"block_size": 256, "link": "softmax", "max_iter": 3, "tol": 0},
        {"block_size": 256, "calibration": "poly"},
    ],
)
def test_the_work_estimate_counts_the_passes_a_fit_makes(tmp_path, params):
    """StagewiseSolver.work, from the manifest alone, against the engine calls (rounds of tasks) of
    a real fit on sparse data whose 1500 columns all occur (so min(n_features, nnz) is exact): its
    rounds are the scan and the stages' passes; the fit adds one scoring pass at the end and, with
    the gradient generator, one ranking pass per pass, which the estimate leaves out."""

    class Counting(Engine):
        calls = 0

        def map(self, *args, **kwargs):
            Counting.calls += 1
            return super().map(*args, **kwargs)

        def map_reduce(self, *args, **kwargs):
            Counting.calls += 1
            return super().map_reduce(*args, **kwargs)

    X = sp.random(3000, 1500, density=0.01, random_state=0, format="csr", dtype=np.float32)
    labels = np.random.default_rng(0).integers(0, 5, 3000).astype(np.int32)
    store = write_store(tmp_path / "s.zarr", X, labels, [f"c{k}" for k in range(5)], chunk_rows=1000)
    assert store.columns_used() == 1500
    solver = sw.StagewiseSolver(sw.StagewiseParams(**params))
    work = solver.work(store)
    solver.fit(
        store,
        engine=Counting(mode="inprocess"),
        checkpointer=Checkpointer(None, config={}, store_fingerprint="s"),
        log=MetricsLog(None),
    )
    ranking = solver.params.n_passes if solver.params.generator in ("auto", "gradient") else 0
    assert Counting.calls == work.rounds + 1 + ranking
    assert work.round_s == pytest.approx(sw.STAGE_S + sw.STAGE_ROW_CLASS_S * 3000 * 5)
