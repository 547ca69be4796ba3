"""Stagewise least-squares regression (agarwal2014 Algorithm 3, identity link) on real-valued
targets: against the closed-form ridge solution, a planted linear model's noise ceiling, and
the out-of-core contract (chunking, workers)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import scipy.sparse as sp
from threadpoolctl import threadpool_limits

import streamfit.solvers.stagewise as sw
from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import ConfigError
from streamfit.runlog import MetricsLog
from streamfit.store import InMemoryStore, StoreWriter, open_store


def fit(source, engine=None, run_dir=None, resume=False, stop_after=None, **params):
    solver = sw.StagewiseSolver(sw.StagewiseParams(**params))
    fingerprint = source.manifest.fingerprint if hasattr(source, "manifest") else "in-memory"
    ckpt = Checkpointer(run_dir, config=solver.params.model_dump(), store_fingerprint=fingerprint)
    engine = engine or Engine(mode="inprocess")
    return solver.fit(
        source, engine=engine, checkpointer=ckpt, log=MetricsLog(None), resume=resume, stop_after=stop_after
    )


def planted(n=600, d=12, k=2, noise=0.3, seed=0):
    """X (n × d), Y = X B + c + noise (n × k), and the noise level."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    B = rng.normal(size=(d, k))
    Y = X @ B + rng.normal(size=k) * 3 + noise * rng.normal(size=(n, k))
    return X, Y, noise


def closed_form_ridge(X, Y, lam):
    """argmin (1/n)‖Y − 1b − XW‖² + λ‖W‖² (b unpenalised): center, then (XᵀX + nλI)⁻¹XᵀY."""
    mean_x, mean_y = X.mean(axis=0), Y.mean(axis=0)
    Xc, Yc = X - mean_x, Y - mean_y
    W = np.linalg.solve(Xc.T @ Xc + len(X) * lam * np.eye(X.shape[1]), Xc.T @ Yc)
    return W, mean_y - mean_x @ W


@pytest.mark.parametrize("k", [1, 3])
def test_one_block_of_all_features_is_closed_form_ridge(k):
    X, Y, _ = planted(n=300, d=10, k=k)
    lam = 0.05
    model = fit(
        InMemoryStore(X, Y, [f"y{j}" for j in range(k)], chunk_rows=70),
        generator="sequential",
        block_size=10,
        n_passes=1,
        lam=lam,
    )
    W, b = closed_form_ridge(X, Y, lam)
    assert model.regression
    np.testing.assert_allclose(model.coef_, W.T, rtol=0, atol=1e-8)
    np.testing.assert_allclose(model.intercept_, b, rtol=0, atol=1e-8)
    np.testing.assert_allclose(model.decision_function(X), X @ W + b, rtol=0, atol=1e-8)


def test_r2_of_a_planted_linear_model_reaches_the_noise_ceiling():
    """Fitted on 2000 rows and tested on 2000 fresh ones, blocks of 4 columns over 3 passes: the
    test R² is within 0.01 of the best possible, 1 − σ²/Var(y) (the true model's expected R²)."""
    X, Y, noise = planted(n=4000, d=16, k=1, seed=1)
    model = fit(
        InMemoryStore(X[:2000], Y[:2000], ["y"], chunk_rows=512), generator="random", block_size=4, n_passes=3, lam=1e-6
    )
    pred = model.predict(X[2000:])
    assert pred.shape == (2000,)
    truth = Y[2000:, 0]
    r2 = 1 - ((truth - pred) ** 2).sum() / ((truth - truth.mean()) ** 2).sum()
    ceiling = 1 - noise**2 / truth.var()
    assert ceiling - 0.01 < r2 <= ceiling + 0.01


def stagewise_by_hand(X, Y, lam, block_size, n_passes):
    """Algorithm 3 with the identity link and the sequential generator, on the data: per block
    A = [1, X_b], W = (AᵀA/n + λD)⁻¹ Aᵀ(Y − F)/n, F ← F + AW. The summed (coef, intercept)."""
    n, d = X.shape
    F, coef, intercept = np.zeros_like(Y), np.zeros((d, Y.shape[1])), np.zeros(Y.shape[1])
    for _ in range(n_passes):
        for lo in range(0, d, block_size):
            cols = np.arange(lo, min(d, lo + block_size))
            A = np.hstack([np.ones((n, 1)), X[:, cols]])
            D = np.diag([0.0] + [1.0] * len(cols))
            W = np.linalg.solve(A.T @ A / n + lam * D, A.T @ (Y - F) / n)
            F += A @ W
            coef[cols] += W[1:]
            intercept += W[0]
    return coef, intercept


@pytest.mark.parametrize("density", [1.0, 0.2])  # dense BLAS sums, sparse sums
@pytest.mark.parametrize("n_passes", [3, 2])  # 12 ≤ 4 · 3 columns: stages on the normal equations; else data passes
def test_stages_equal_algorithm_3_by_hand(density, n_passes):
    X, Y, _ = planted(n=400, d=12, k=2, seed=3)
    X *= np.random.default_rng(4).random(X.shape) < density
    lam = 1e-2
    model = fit(
        InMemoryStore(sp.csr_matrix(X), Y, ["y0", "y1"], chunk_rows=90),
        generator="sequential",
        block_size=4,
        n_passes=n_passes,
        lam=lam,
        penalty="stage",
    )
    coef, intercept = stagewise_by_hand(X, Y, lam, 4, n_passes)
    assert model.info["data_passes"] == (1 if n_passes == 3 else 1 + 3 * n_passes + 1)  # the scan, then per stage
    np.testing.assert_allclose(model.coef_, coef.T, rtol=0, atol=1e-9)
    np.testing.assert_allclose(model.intercept_, intercept, rtol=0, atol=1e-9)


@pytest.mark.parametrize("normal", [True, False])
def test_total_penalty_converges_to_closed_form_ridge(normal, monkeypatch):
    """penalty="total" (block coordinate descent on the ridge objective of the summed weights)
    reaches the closed-form ridge solution, on the normal equations and with data passes; the
    blocks of 4 of 12 correlated columns alone (penalty="stage") do not."""
    X, Y, _ = planted(n=400, d=12, k=2, seed=7)
    X[:, 6:] += X[:, :6]  # correlated blocks: block coordinate descent needs passes
    lam = 5e-2
    if not normal:
        monkeypatch.setattr(sw, "NORMAL_MODE_MAX_FEATURES", 0)
    source = InMemoryStore(X, Y, ["y0", "y1"], chunk_rows=150)
    params = dict(generator="sequential", block_size=4, n_passes=40, lam=lam)
    model = fit(source, penalty="total", **params)
    assert (model.info["data_passes"] == 1) == normal
    W, b = closed_form_ridge(X, Y, lam)
    np.testing.assert_allclose(model.coef_, W.T, rtol=0, atol=1e-9 * np.abs(W).max())
    np.testing.assert_allclose(model.intercept_, b, rtol=0, atol=1e-9 * np.abs(b).max())
    if normal:
        assert np.abs(fit(source, penalty="stage", **params).coef_ - W.T).max() > 1e-3 * np.abs(W).max()


@pytest.mark.parametrize("generator", ["sequential", "random", "gradient"])
def test_normal_equations_give_the_data_passes_model(generator, monkeypatch):
    """The stages on the scan's normal equations (one pass) against the same stages with a data
    pass each (the normal equations turned off): same blocks, same weights to rounding."""
    X, Y, _ = planted(n=500, d=10, k=2, seed=5)
    source = InMemoryStore(X, Y, ["y0", "y1"], chunk_rows=128)
    params = dict(generator=generator, block_size=3, n_passes=4, lam=1e-3, fit_intercept=generator != "random")
    normal = fit(source, **params)
    monkeypatch.setattr(sw, "NORMAL_MODE_MAX_FEATURES", 0)
    passes = fit(source, **params)
    assert normal.info["data_passes"] == 1 < passes.info["data_passes"]
    for a, b in zip(normal.blocks, passes.blocks, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(normal.weights, passes.weights, strict=True):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-10)


def test_default_generator_on_a_linear_model_fits_the_normal_equations():
    """generator="auto" on real-valued targets is "gradient" over the stored columns and, with 12
    columns, stages on the normal equations: the scan is the only pass. With the defaults (one
    block of all 12 columns, penalty="total") the first stage is the ridge model and the second
    adds nothing: the closed form at λ = 1e-4; with penalty="stage", Algorithm 3's by hand."""
    X, Y, _ = planted(n=600, d=12, k=2, seed=8)
    source = InMemoryStore(X, Y, ["y0", "y1"], chunk_rows=256)
    model = fit(source)
    assert model.info["generator"] == "gradient" and model.info["data_passes"] == 1
    W, b = closed_form_ridge(X, Y, 1e-4)
    np.testing.assert_allclose(model.coef_, W.T, rtol=0, atol=1e-9 * np.abs(W).max())
    np.testing.assert_allclose(model.intercept_, b, rtol=0, atol=1e-9 * np.abs(b).max())
    stage = fit(source, penalty="stage")
    coef, intercept = stagewise_by_hand(X, Y, 1e-4, 512, 2)
    np.testing.assert_allclose(stage.coef_, coef.T, rtol=0, atol=1e-9)
    np.testing.assert_allclose(stage.intercept_, intercept, rtol=0, atol=1e-9)


def test_default_generator_never_picks_random_fourier_features_for_regression():
    """On a target that random Fourier features fit far better (y = sin(3x₁)·cos(3x₂), where
    generator="rff" lowers the training error) "auto" still fits the stored columns: a linear
    least-squares fit, one pass; the nonlinear features are an explicit choice."""
    rng = np.random.default_rng(3)
    X = rng.uniform(-1, 1, size=(400, 2))
    y = np.sin(3 * X[:, 0]) * np.cos(3 * X[:, 1])
    source = InMemoryStore(X, y[:, None], ["y"], chunk_rows=256)
    auto = fit(source)
    rff = fit(source, generator="rff", n_components=128, block_size=128, n_passes=1)
    assert auto.info["generator"] == "gradient" and auto.info["data_passes"] == 1
    error = {name: np.mean((np.ravel(m.predict(X)) - y) ** 2) for name, m in (("auto", auto), ("rff", rff))}
    assert error["rff"] < 0.5 * error["auto"]


def test_dense_columns_score_each_row_alike_in_any_batch():
    """Dense column designs (data passes): the model's scores of a row do not depend on the
    rows scored with it (the products AW are row-wise, never BLAS)."""
    X, Y, _ = planted(n=300, d=12, k=2, seed=7)
    model = fit(InMemoryStore(X, Y, ["y0", "y1"], chunk_rows=128), generator="random", block_size=5, n_passes=1)
    assert model.space.dense and model.info["data_passes"] > 1
    S = model.decision_function(X)
    np.testing.assert_array_equal(np.vstack([model.decision_function(X[i : i + 7]) for i in range(0, 300, 7)]), S)


def test_normal_equations_resume_bitwise(tmp_path):
    X, Y, _ = planted(n=300, d=8, k=2, seed=6)
    store = write_store(tmp_path / "s", X, Y, chunk_rows=100)
    params = dict(generator="gradient", block_size=2, n_passes=2, lam=1e-3)
    full = fit(store, **params)
    fit(store, run_dir=str(tmp_path / "run"), stop_after=3, **params)
    resumed = fit(store, run_dir=str(tmp_path / "run"), resume=True, **params)
    a, b = full._arrays(), resumed._arrays()
    assert a.keys() == b.keys() and full.info == resumed.info
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


@pytest.mark.parametrize(
    "params, refused",
    [(dict(link="softmax"), "link=identity"), (dict(calibration="poly"), "calibration=poly")],
)
def test_class_only_options_are_refused(params, refused):
    X, Y, _ = planted(n=50, d=3, k=1)
    with pytest.raises(ConfigError, match=refused):
        fit(InMemoryStore(X, Y, ["y"]), **params)


def write_store(path, X, Y, chunk_rows):
    w = StoreWriter(str(path), chunk_rows=chunk_rows, n_outputs=Y.shape[1])
    w.write_rows(sp.csr_matrix(X, dtype=np.float32), Y)
    w.close(n_features=X.shape[1], classes=[f"y{j}" for j in range(Y.shape[1])])
    return open_store(str(path))


@pytest.fixture(scope="module")
def local_engine():
    with Engine(mode="local", n_workers=2) as engine:
        yield engine


@pytest.mark.slow  # a two-worker Dask cluster
@pytest.mark.parametrize(
    "params",
    [
        dict(generator="gradient", block_size=4, n_passes=2, calibration="predictions"),
        dict(generator="rff", n_components=96, block_size=32, n_passes=2),
        dict(generator="gradient", block_size=4, n_passes=3),  # on the normal equations
        dict(generator="sequential", block_size=4, n_passes=2),  # dense column blocks
    ],
)
def test_same_model_any_workers_and_chunking(tmp_path, local_engine, params):
    X, Y, _ = planted(n=900, d=12, k=2, seed=2)
    store_a = write_store(tmp_path / "a", X, Y, chunk_rows=256)
    store_b = write_store(tmp_path / "b", X, Y, chunk_rows=100)
    with threadpool_limits(1):  # the sums AᵀA, AᵀR are BLAS products: as on the workers, one thread
        serial = fit(store_a, lam=1e-3, **params)
    parallel = fit(store_a, engine=local_engine, run_dir=str(tmp_path / "run"), lam=1e-3, **params)
    rechunked = fit(store_b, lam=1e-3, **params)
    S = serial.decision_function(X)
    np.testing.assert_array_equal(parallel.decision_function(X), S)  # the reduction tree is fixed
    np.testing.assert_allclose(rechunked.decision_function(X), S, rtol=0, atol=1e-9)


@pytest.mark.slow  # a two-worker Dask cluster
@pytest.mark.parametrize("density, above", [(1.0, False), (0.1, False), (0.1, True)])
def test_wide_regression_same_model_any_workers_and_chunking(tmp_path, local_engine, request, density, above):
    """The exact wide fit (lam None) on two workers equals the in-process fit bitwise (the Gram
    blocks are per chunk pair, the weights summed along the fixed tree), and another chunking to
    round-off; `above` DUAL_N_MAX rows (`cg_above`) the fit by conjugate gradients likewise (the
    passes' sums along the fixed tree; the held rows by their global index)."""
    if above:
        request.getfixturevalue("cg_above")
    X, Y = wide(n=150, d=400, k=2, density=density)
    store_a = write_store(tmp_path / "a", X, Y, chunk_rows=64)
    store_b = write_store(tmp_path / "b", X, Y, chunk_rows=25)
    with threadpool_limits(1):  # BLAS products: as on the workers, one thread
        serial = fit(store_a)
    parallel = fit(store_a, engine=local_engine, run_dir=str(tmp_path / "run"))
    rechunked = fit(store_b)
    assert serial.info["wide_ridge_c"] == parallel.info["wide_ridge_c"] == rechunked.info["wide_ridge_c"]
    S = serial.decision_function(X)
    np.testing.assert_array_equal(parallel.decision_function(X), S)
    np.testing.assert_allclose(rechunked.decision_function(X), S, rtol=0, atol=1e-8 * np.abs(S).max())


def _rewrite_latest_meta(run_dir, edit) -> None:
    """Applies `edit` to the newest checkpoint's state meta (as older code would have written
    it) and re-signs the record, so that only the state's layout differs."""
    from streamfit.checkpoint import _record_digest

    latest = json.loads((run_dir / "checkpoints" / "LATEST").read_text())["step"]
    (meta_path,) = (run_dir / "checkpoints").glob(f"step-{latest:06d}*/**/meta.json")
    record = json.loads(meta_path.read_text())
    edit(record["meta"])
    record["record_sha256"] = _record_digest(record)
    meta_path.write_text(json.dumps(record))


def _drop_normal_fields(meta) -> None:  # the state before the normal equations
    for name in ("normal_gram", "normal_rhs", "normal_ysq"):
        del meta["schema"][name]
    del meta["values"]["normal_ysq"]


def _drop_dense_key(meta) -> None:  # a feature space before dense column designs
    del meta["values"]["space"]["dense"]


@pytest.mark.parametrize("edit", [_drop_normal_fields, _drop_dense_key])
def test_checkpoint_of_an_older_state_layout_is_a_one_line_error(tmp_path, edit):
    """Resuming from a stagewise checkpoint that older code wrote (other state fields, or a
    feature space with other keys) fails with one line naming the run and --overwrite."""
    from streamfit.errors import CheckpointError

    X, Y, _ = planted(n=200, d=6, k=1, seed=4)
    store = write_store(tmp_path / "s", X, Y, chunk_rows=100)
    run_dir = tmp_path / "run"
    params = dict(generator="sequential", block_size=2, n_passes=2)
    fit(store, run_dir=str(run_dir), stop_after=1, **params)
    _rewrite_latest_meta(run_dir, edit)
    with pytest.raises(CheckpointError, match="another layout.*--overwrite") as raised:
        fit(store, run_dir=str(run_dir), resume=True, **params)
    assert str(run_dir) in str(raised.value) and "\n" not in str(raised.value)


@pytest.mark.parametrize("density", [1.0, 0.2])  # dense products on the rows; below 1/4 non-zero: CSR sums
def test_the_scan_of_dense_rows_is_the_scan_of_their_csr_form(density):
    """An in-memory dense X is scanned on its rows (no CSR form when they are dense enough for
    dense products): the same column counts and, bitwise, the same normal equations as the scan
    of the same values as CSR (zeros, -0.0 and a NaN among them)."""
    X, Y, _ = planted(n=300, d=9, k=2, seed=9)
    X *= np.random.default_rng(10).random(X.shape) < density
    X[5, 3] = np.nan
    dense, csr = InMemoryStore(X, Y, ["y0", "y1"], chunk_rows=128), InMemoryStore(sp.csr_matrix(X), Y, ["y0", "y1"])
    assert dense.dense_chunk(1) is not None and csr.dense_chunk(0) is None
    csr.chunk_rows, csr.n_chunks = 128, 3
    for chunk in range(3):
        a, b = sw._scan_task(dense, chunk, normal=True), sw._scan_task(csr, chunk, normal=True)
        np.testing.assert_array_equal(a.nnz, b.nnz)
        assert a.nonfinite == b.nonfinite == (chunk == 0)
        for x, y in zip(a.normal, b.normal, strict=True):
            assert np.asarray(x).tobytes() == np.asarray(y).tobytes()
        assert a.sums.tobytes() == b.sums.tobytes() and a.squares.tobytes() == b.squares.tobytes()
        if chunk:  # the column sums (standardized penalties) are the values' sums
            rows = X[128 * chunk : 128 * (chunk + 1)]
            np.testing.assert_allclose(a.sums, rows.sum(axis=0), rtol=1e-12)
            np.testing.assert_allclose(a.squares, (rows * rows).sum(axis=0), rtol=1e-12)
    assert ("X" in vars(dense)) == (density < sw.DENSE_MIN_DENSITY)  # CSR made only for the sparse sums


def test_regressor_on_dense_arrays_is_the_csr_fit_and_closed_form_ridge():
    """StagewiseLSRegressor on a dense X (normal equations from the dense rows, no checkpoints):
    bitwise the model of the same values given as CSR, for the default and for one block of all
    features, which is the closed-form ridge solution (1e-10)."""
    from streamfit import StagewiseLSRegressor

    X, Y, _ = planted(n=400, d=10, k=1, seed=11)
    y = Y[:, 0]
    for params in ({}, dict(generator="sequential", block_size=10, n_passes=1, lam=0.01)):
        dense = StagewiseLSRegressor(chunk_rows=150, **params).fit(X, y)
        csr = StagewiseLSRegressor(chunk_rows=150, **params).fit(sp.csr_matrix(X), y)
        assert dense.coef_.tobytes() == csr.coef_.tobytes() and dense.intercept_ == csr.intercept_
        assert dense.history_ == [{**r, "wall_time": d["wall_time"]} for r, d in zip(csr.history_, dense.history_)]
    W, b = closed_form_ridge(X, Y, 0.01)
    np.testing.assert_allclose(dense.coef_, W[:, 0], rtol=0, atol=1e-10)
    np.testing.assert_allclose(dense.intercept_, b[0], rtol=0, atol=1e-10)


def test_a_fit_without_checkpoints_is_the_checkpointed_fit(monkeypatch):
    """The driver without a checkpointer (the estimators' path) ends with bitwise the model of a
    run checkpointed in memory, for stages on the normal equations and with data passes."""
    X, Y, _ = planted(n=300, d=8, k=2, seed=12)
    source = InMemoryStore(X, Y, ["y0", "y1"], chunk_rows=100)
    for params in ({}, dict(generator="random", block_size=3, n_passes=2)):
        solver = sw.StagewiseSolver(sw.StagewiseParams(**params))
        with Engine(mode="inprocess") as engine:
            free = solver.fit(source, engine=engine, checkpointer=None, log=MetricsLog(None))
        checkpointed = fit(source, **params)
        a, b = free._arrays(), checkpointed._arrays()
        assert a.keys() == b.keys() and free.info == checkpointed.info
        for key in a:
            assert a[key].tobytes() == b[key].tobytes()


def test_an_in_memory_fit_writes_nothing(tmp_path, monkeypatch):
    """StagewiseLSRegressor.fit on arrays: no checkpointer is made and nothing is written through
    streamfit.storage; the working and temporary directories stay empty."""
    from streamfit import StagewiseLSRegressor, storage
    from streamfit import checkpoint as checkpoint_module

    def refuse(*args, **kwargs):
        raise AssertionError("an in-memory fit wrote or made a checkpointer")

    for name in ("write_bytes", "write_new", "append_text", "makedirs", "publish_file"):
        monkeypatch.setattr(storage.Location, name, refuse)
    monkeypatch.setattr(checkpoint_module.Checkpointer, "__init__", refuse)
    work, temp = tmp_path / "cwd", tmp_path / "tmp"
    work.mkdir(), temp.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr("tempfile.tempdir", None)
    X, Y, _ = planted(n=200, d=6, k=2, seed=13)
    for params in ({}, dict(generator="random", block_size=2)):  # normal equations; data passes with scores
        assert StagewiseLSRegressor(**params).fit(X, Y).score(X, Y) > 0.9
    assert not list(work.iterdir()) and not list(temp.iterdir())


@pytest.mark.parametrize("density", [1.0, 0.2])  # the scan of dense rows, and of CSR chunks
def test_a_constant_target_is_named_in_one_warning_line(tmp_path, caplog, density):
    """Every training row with the same value of a target (here y1 = 7.25 in all 300 rows, over 3
    chunks) trains to that constant: one warning line names the data, the target and its value;
    a target that varies in one row only of another chunk is not named, and a target that varies
    gives no warning."""
    X, Y, _ = planted(n=300, d=6, k=3, seed=4)
    X *= np.random.default_rng(5).random(X.shape) < density
    Y[:, 1] = 7.25
    Y[:, 2] = -1.0
    Y[250, 2] = -0.5  # varies in the last chunk only
    with caplog.at_level("WARNING", logger="streamfit.solvers.stagewise"):
        model = fit(InMemoryStore(X, Y, ["y0", "y1", "y2"], chunk_rows=128))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "streamfit.solvers.stagewise"]
    assert line.startswith("the training data: the target 'y1' is 7.25 in every training row") and "\n" not in line
    assert "'y2'" not in line and "'y0'" not in line
    np.testing.assert_allclose(model.decision_function(X)[:, 1], 7.25, rtol=0, atol=1e-9)
    caplog.clear()
    with caplog.at_level("WARNING", logger="streamfit.solvers.stagewise"):
        fit(write_store(tmp_path / "s", X, Y[:, [0, 2]], chunk_rows=128))
    assert not [r for r in caplog.records if r.name == "streamfit.solvers.stagewise"]
    Y[:, 0] = 0.0
    with caplog.at_level("WARNING", logger="streamfit.solvers.stagewise"):
        fit(write_store(tmp_path / "c", X, Y[:, [0, 1]], chunk_rows=128))
    (line,) = [r.getMessage() for r in caplog.records if r.name == "streamfit.solvers.stagewise"]
    assert line.startswith(f"store {tmp_path / 'c'}: the target 'y0' is 0.0, 'y1' is 7.25 in every training row")


@pytest.mark.parametrize("sparse", [False, True])
def test_wide_regression_at_the_default_lam_is_named_in_one_warning_line(sparse, caplog):
    """At least as many active columns as rows, lam None, stages (here generator="gradient"
    given: the defaults fit the exact wide ridge model instead, with no warning): one warning
    line with the shape and the active columns' mean variance v̄ (numpy's, over the training
    rows); none with lam given or on fewer columns than rows."""
    from streamfit import StagewiseLSRegressor

    rng = np.random.default_rng(3)
    X = rng.normal(size=(120, 300)) * (rng.random((120, 300)) < (0.3 if sparse else 1.0))
    X[:, 7] = 0.0  # not active: left out of the count and of v̄
    y = X @ rng.normal(size=300) + rng.normal(size=120)
    data = sp.csr_matrix(X) if sparse else X
    active = np.flatnonzero(np.abs(X).sum(axis=0))
    v_bar = X[:, active].var(axis=0).mean()

    def warnings(X, **params):
        caplog.clear()
        with caplog.at_level("WARNING", logger="streamfit.solvers.stagewise"):
            StagewiseLSRegressor(**params).fit(X, y)
        return [r.getMessage() for r in caplog.records if r.name == "streamfit.solvers.stagewise"]

    (line,) = warnings(data, generator="gradient")
    assert line.startswith(f"the training data: {len(active)} active columns for 120 training rows: ")
    assert line.endswith(f"mean variance ({v_bar:.3g})") and "lam=0.0001" in line
    assert warnings(data) == []
    assert warnings(data, generator="gradient", lam=v_bar) == []
    assert warnings(data[:, :50], generator="gradient") == []


def wide(n=90, d=240, k=1, density=1.0, seed=5):
    """X (n × d, its values float32's, as a store holds them) and Y = X B + 3 + noise (n × k)."""
    rng = np.random.default_rng(seed)
    X = (rng.normal(size=(n, d)) * (rng.random((n, d)) < density)).astype(np.float32).astype(np.float64)
    Y = X @ rng.normal(size=(d, k)) + 3.0 + rng.normal(size=(n, k))
    return X, Y


@pytest.mark.parametrize("density, k", [(1.0, 1), (0.1, 1), (0.3, 2)])
def test_wide_regression_default_is_ridgecv_on_the_leave_one_out_grid(tmp_path, density, k):
    """lam None on wide data (streamfit.solvers.stagewise_dual): the model is scikit-learn's
    RidgeCV over alphas n · c · v̄ (c of DUAL_GRID, v̄ the columns' mean variance), its exact
    leave-one-out choosing c (summed over the targets), and its coefficients; one stage of every
    active column; the model's info records λ and c. Dense chunks (BLAS products) and CSR
    chunks, three of them."""
    from sklearn.linear_model import RidgeCV

    from streamfit.solvers.stagewise_dual import DUAL_GRID

    X, Y = wide(k=k, density=density)
    n = len(X)
    model = fit(write_store(tmp_path / "s", X, Y, chunk_rows=32))
    v_bar = X[:, np.abs(X).sum(axis=0) > 0].var(axis=0).mean()
    ridge = RidgeCV(alphas=n * DUAL_GRID * v_bar).fit(X, Y)
    assert model.info["wide_ridge_c"] == pytest.approx(ridge.alpha_ / (n * v_bar), rel=1e-12)
    assert model.info["lam"] == pytest.approx(ridge.alpha_ / n, rel=1e-12) and model.info["stages"] == 1
    assert len(model.blocks) == 1 and len(model.blocks[0]) == int((np.abs(X).sum(axis=0) > 0).sum())
    np.testing.assert_allclose(model.coef_, ridge.coef_.reshape(k, -1), rtol=0, atol=1e-9 * np.abs(ridge.coef_).max())
    np.testing.assert_allclose(model.intercept_, np.ravel(ridge.intercept_), rtol=1e-9)


def test_two_wide_rows_are_fitted_in_stages():
    """Two rows leave one to predict from one: no λ differs in leave-one-out error, so the exact
    wide fit needs three rows; two are fitted in stages, without a numpy warning."""
    import warnings

    X, Y = wide(n=2, d=8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        model = fit(InMemoryStore(X, Y, ["y0"]))
    assert "wide_ridge_c" not in model.info and model.info["stages"] == 2
    assert "wide_ridge_c" in fit(InMemoryStore(*wide(n=3, d=8), ["y0"])).info


def test_wide_regression_resumed_after_its_init_checkpoint_is_the_same_model(tmp_path):
    """The exact wide fit stopped after init's checkpoint and resumed: the same model, bitwise."""
    X, Y = wide(density=0.2)
    store = write_store(tmp_path / "s", X, Y, chunk_rows=40)
    full = fit(store)
    fit(store, run_dir=str(tmp_path / "run"), stop_after=0)
    resumed = fit(store, run_dir=str(tmp_path / "run"), resume=True)
    a, b = full._arrays(), resumed._arrays()
    assert a.keys() == b.keys() and full.info == resumed.info
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])


@pytest.fixture
def cg_above(monkeypatch):
    """The fit by conjugate gradients (streamfit.solvers.stagewise_cg) on small data: the exact
    wide fit up to 60 rows, each fit stopped at a relative residual of 1e-10 (at most 1000
    iterations)."""
    from streamfit.solvers import stagewise_cg, stagewise_dual

    monkeypatch.setattr(stagewise_dual, "DUAL_N_MAX", 60)
    monkeypatch.setattr(stagewise_cg, "CG_RTOL", 1e-10)
    monkeypatch.setattr(stagewise_cg, "WALK_MAX_ITER", 1000)
    monkeypatch.setattr(stagewise_cg, "REFIT_MAX_ITER", 1000)
    return stagewise_cg


def heldout_errors(X, Y, grid, v_bar):
    """scikit-learn's Ridge (cholesky) on the rows i with i % 5 != 4 at each alpha = n_f · c · v̄,
    and its mean squared error on the others, summed over the targets."""
    from sklearn.linear_model import Ridge

    held = np.arange(len(X)) % 5 == 4
    errors = []
    for c in grid:
        ridge = Ridge(alpha=(~held).sum() * c * v_bar, solver="cholesky").fit(X[~held], Y[~held])
        errors.append(float(((Y[held] - ridge.predict(X[held]).reshape(-1, Y.shape[1])) ** 2).sum()) / held.sum())
    return np.array(errors)


@pytest.mark.parametrize(
    "dense, k, noise, n", [(True, 1, 0.5, 150), (False, 1, 0.1, 150), (True, 2, 0.3, 150), (False, 1, 0.3, 154)]
)
def test_wide_regression_above_dual_rows_is_ridge_at_the_heldout_choice(tmp_path, cg_above, dense, k, noise, n):
    """lam None on wide data above DUAL_N_MAX rows: the held-out errors of the walk are those of
    scikit-learn's Ridge fitted on the rows i mod 5 ≠ 4 at alpha = n_f · c · v̄ (v̄ the active
    columns' mean variance over all rows) and scored on the others, for c down HOLDOUT_GRID until
    the error has risen twice in a row; c is the least of them, and the model is Ridge at that
    alpha on every row; one stage of every active column; the info records the rule, c, alpha
    and each fit's iterations. Dense chunks and CSR chunks (three of them), one and two targets;
    150 rows, and 154 (n mod 5 = 4: 30 held rows, not 31)."""
    from sklearn.linear_model import Ridge

    X, Y = wide(n=n, d=400, k=k, density=1.0 if dense else 0.1)
    Y += noise * np.abs(Y - Y.mean(axis=0)).mean() * np.random.default_rng(8).normal(size=Y.shape)
    model = fit(write_store(tmp_path / "s", X, Y, chunk_rows=64))
    info, active = model.info, np.abs(X).sum(axis=0) > 0
    v_bar = X[:, active].var(axis=0).mean()
    expected = heldout_errors(X, Y, cg_above.HOLDOUT_GRID, v_bar)
    walked = [e is not None for e in info["wide_ridge_heldout"]]
    rises = np.flatnonzero((np.diff(expected) > 0)[1:] & (np.diff(expected) > 0)[:-1])
    reached = len(expected) if len(rises) == 0 else rises[0] + 3  # through the second rise in a row
    assert walked == [j < reached for j in range(len(expected))]
    got = np.array([e for e in info["wide_ridge_heldout"] if e is not None])
    np.testing.assert_allclose(got, expected[:reached], rtol=1e-8)  # the fits stop at a relative residual of 1e-10
    best = int(np.argmin(expected[:reached]))
    assert 0 < best < len(expected) - 1, "a c inside the grid"
    n_f = int((np.arange(len(X)) % 5 != 4).sum())
    alpha = n_f * cg_above.HOLDOUT_GRID[best] * v_bar
    assert info["wide_ridge_c"] == cg_above.HOLDOUT_GRID[best] and info["stages"] == 1
    assert info["wide_ridge_alpha"] == pytest.approx(alpha, rel=1e-12)
    assert info["lam"] == pytest.approx(alpha / len(X), rel=1e-12) and info["generator"] == "ridge_cg"
    assert info["wide_ridge_rule"] == "alpha by a held-out 1/5 of the rows" and info["cg_relative_residual"] <= 1e-10
    assert len(info["cg_iterations"]) == len(expected) + 1 and all(info["cg_iterations"][:reached])
    # passes: the scan, two starts, the iterations, and the one that scored the walk's last c
    assert info["data_passes"] == 1 + 2 + sum(info["cg_iterations"]) + 1
    assert len(model.blocks) == 1 and len(model.blocks[0]) == int(active.sum())
    ridge = Ridge(alpha=alpha, solver="cholesky").fit(X, Y)
    np.testing.assert_allclose(model.coef_, ridge.coef_.reshape(k, -1), rtol=0, atol=1e-8 * np.abs(ridge.coef_).max())
    np.testing.assert_allclose(model.intercept_, np.ravel(ridge.intercept_), rtol=1e-9)


def test_wide_regression_above_dual_rows_stops_at_the_default_residual(tmp_path, cg_above, monkeypatch):
    """At the default stop (CG_RTOL) the refit ends at its first residual below it, and the
    logged training loss is the model's own (1/n) Σ (y − ŷ)²."""
    from streamfit.solvers import stagewise_cg

    monkeypatch.setattr(stagewise_cg, "CG_RTOL", 1e-4)
    X, Y = wide(n=150, d=400, density=0.3)
    store = write_store(tmp_path / "s", X, Y, chunk_rows=64)
    log = MetricsLog(None)
    solver = sw.StagewiseSolver(sw.StagewiseParams())
    ckpt = Checkpointer(None, config=solver.params.model_dump(), store_fingerprint="s")
    model = solver.fit(store, engine=Engine(mode="inprocess"), checkpointer=ckpt, log=log)
    refit = model.info["cg_iterations"][-1]
    residuals = [r["relative_residual"] for r in log.records if "relative_residual" in r][-refit - 1 :]
    assert residuals[-1] <= 1e-4 < min(residuals[:-1])
    F = model.decision_function(X.astype(np.float32))
    assert log.records[-1]["loss"] == pytest.approx(float(((Y - F) ** 2).sum()) / len(X), rel=1e-6)


@pytest.mark.parametrize("stop", [0, 5, -2])  # after init's checkpoint, in the walk, in the refit
def test_wide_regression_above_dual_rows_resumed_is_the_same_model(tmp_path, cg_above, stop):
    """The fit by conjugate gradients stopped after a checkpoint and resumed: the same model and
    info, bitwise."""
    X, Y = wide(n=150, d=400, density=0.2)
    store = write_store(tmp_path / "s", X, Y, chunk_rows=40)
    full = fit(store)
    steps = 1 + sum(full.info["cg_iterations"]) + 2  # step 0, the iterations, the last score and the refit's start
    stop = stop % steps
    assert 0 <= stop < steps - 1
    fit(store, run_dir=str(tmp_path / "run"), stop_after=stop)
    resumed = fit(store, run_dir=str(tmp_path / "run"), resume=True)
    a, b = full._arrays(), resumed._arrays()
    assert a.keys() == b.keys() and full.info == resumed.info
    for key in a:
        np.testing.assert_array_equal(a[key], b[key])
