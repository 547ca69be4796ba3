"""Stagewise least-squares regression (agarwal2014 Algorithm 3, identity link) on real-valued
targets: against the closed-form ridge solution, a planted linear model's noise ceiling, and
the out-of-core contract (chunking, workers)."""

from __future__ import annotations

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


def fit(source, engine=None, run_dir=None, **params):
    solver = sw.StagewiseSolver(sw.StagewiseParams(**params))
    fingerprint = source.manifest.fingerprint if hasattr(source, "manifest") else "in-memory"
    ckpt = Checkpointer(run_dir, config=solver.params.model_dump(), store_fingerprint=fingerprint)
    return solver.fit(source, engine=engine or Engine(mode="inprocess"), checkpointer=ckpt, log=MetricsLog(None))


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
