"""StagewiseLSClassifier: the scikit-learn API over the out-of-core stagewise solver."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split

import streamfit
from streamfit import StagewiseLSClassifier


@pytest.fixture(scope="module")
def digits_split():
    X, y = load_digits(return_X_y=True)
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def test_exported():
    assert streamfit.StagewiseLSClassifier is StagewiseLSClassifier
    assert callable(streamfit.load_model) and callable(streamfit.open_store)  # as the README uses them


def test_defaults_are_accurate_on_digits(digits_split):
    Xtr, Xte, ytr, yte = digits_split
    clf = StagewiseLSClassifier().fit(Xtr, ytr)
    assert clf.model_.info["generator"] == "rff"  # "auto" on dense low-dimensional data
    assert clf.score(Xte, yte) >= 0.97
    assert clf.n_features_in_ == 64 and list(clf.classes_) == list(range(10))
    P = clf.predict_proba(Xte)
    assert P.shape == (len(yte), 10) and np.all(P >= 0) and np.allclose(P.sum(axis=1), 1)
    assert [r["stage"] for r in clf.history_] == list(range(len(clf.history_)))


@pytest.mark.parametrize("kw", [dict(link="softmax", max_iter=5), dict(calibrate=True), dict(calibrate="predictions")])
def test_variants(digits_split, kw):
    Xtr, Xte, ytr, yte = digits_split
    clf = StagewiseLSClassifier(n_components=1024, **kw).fit(Xtr, ytr)
    assert clf.score(Xte, yte) >= 0.97
    P = clf.predict_proba(Xte)
    assert np.allclose(P.sum(axis=1), 1)
    with pytest.raises(AttributeError):
        clf.coef_


def test_linear_model_string_labels_and_sparse_input(digits_split):
    Xtr, Xte, ytr, yte = digits_split
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    clf = StagewiseLSClassifier(generator="sequential", block_size=16, n_passes=3, lam=1e-3)
    clf.fit(sp.csr_matrix(Xtr), names[ytr])
    assert set(clf.classes_) == set(names)
    S = clf.decision_function(Xte)
    np.testing.assert_allclose(S, Xte @ clf.coef_.T + clf.intercept_, rtol=0, atol=1e-10)
    assert np.mean(clf.predict(Xte) == names[yte]) > 0.9


def test_chunking_does_not_change_the_model(digits_split):
    Xtr, Xte, ytr, _ = digits_split
    a = StagewiseLSClassifier(n_components=512, chunk_rows=10_000).fit(Xtr, ytr)
    b = StagewiseLSClassifier(n_components=512, chunk_rows=97).fit(Xtr, ytr)
    np.testing.assert_allclose(a.decision_function(Xte), b.decision_function(Xte), rtol=0, atol=1e-10)


def test_params_api(digits_split):
    clf = StagewiseLSClassifier(lam=0.5, generator="random")
    assert clf.get_params()["lam"] == 0.5
    c = clone(clf).set_params(block_size=7)
    assert c.block_size == 7 and c.generator == "random" and clf.block_size == 512
    with pytest.raises(ValueError):
        clf.set_params(nope=1)
    Xtr, _, ytr, _ = digits_split
    with pytest.raises(ValueError):
        StagewiseLSClassifier(link="softmax", calibrate=True).fit(Xtr, ytr)
    with pytest.raises(ValueError):
        StagewiseLSClassifier(block_size=0).fit(Xtr, ytr)


def test_multilabel_indicator():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(500, 20))
    Y = (X @ rng.normal(size=(20, 4)) > 0.5).astype(int)
    clf = StagewiseLSClassifier(generator="sequential", block_size=10, n_passes=3).fit(X, Y)
    P = clf.predict(X)
    assert P.shape == Y.shape
    assert np.mean(P == Y) > 0.85
    assert 0 <= clf.score(X, Y) <= 1


def test_gram_dtype_reaches_the_solver(digits_split):
    """float32 Gram products change the model by rounding only (≈1e-6 here), so it must differ
    from the float64 fit, yet agree to well within 1e-4."""
    X_tr, X_te, y_tr, _ = digits_split
    f64 = StagewiseLSClassifier(generator="rff", n_components=512).fit(X_tr, y_tr).decision_function(X_te)
    f32 = StagewiseLSClassifier(generator="rff", n_components=512, gram_dtype="float32").fit(X_tr, y_tr)
    assert f32.get_params()["gram_dtype"] == "float32"
    diff = np.abs(f32.decision_function(X_te) - f64).max()
    assert 0 < diff < 1e-4


def test_bcd_stopping_reaches_the_solver(digits_split):
    """The paper's rule (10) alone stops earlier than the default, which also waits for the
    estimated remaining decrease to fall below tol·F."""
    X_tr, _, y_tr, _ = digits_split
    X_tr = X_tr / 16.0
    runs = {s: streamfit.BCDClassifier(lam=1e-4, tol=1e-2, max_iter=500, stopping=s).fit(X_tr, y_tr)
            for s in ("violation", "auto")}
    assert len(runs["violation"].history_) < len(runs["auto"].history_)
    assert runs["auto"].objective(X_tr, y_tr) <= runs["violation"].objective(X_tr, y_tr)
