"""The in-memory estimators: the scikit-learn API over the out-of-core solvers (StagewiseLSClassifier
in detail; every estimator with scikit-learn's model selection, pipelines and tags)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone, is_classifier
from sklearn.datasets import load_digits
from sklearn.metrics import accuracy_score
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.utils import estimator_checks, get_tags

import streamfit
from streamfit import BCDClassifier, FBPDClassifier, PPDSparseClassifier, StagewiseLSClassifier


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


# -- scikit-learn model selection, pipelines and tags, for every estimator ----------------------

# Each estimator with settings small enough for a fit in well under a second on SMALL_ROWS
# digits, and one parameter with two values to search over.
MODEL_SELECTION_CASES = {
    "stagewise": (lambda: StagewiseLSClassifier(generator="rff", n_components=256, block_size=128, n_passes=1,
                                                bandwidth=1.0, lam=3e-2), "lam", [1e-2, 1e-1]),
    "bcd": (lambda: BCDClassifier(lam=1e-3, tol=1e-2, max_iter=30), "lam", [1e-4, 1e-2]),
    "ppdsparse": (lambda: PPDSparseClassifier(lam=1e-4, tau=1e-2, max_iter=50), "tau", [1e-3, 1e-2]),
    "fbpd": (lambda: FBPDClassifier(penalty="l2", lam=1e-3, tol=1e-3, max_iter=100), "lam", [1e-3, 1e-2]),
}
SMALL_ROWS = 360
ACCURACY_FLOOR = 0.8  # each case's folds and grid means score 0.88–0.96 here (ten classes: chance is 0.1)


@pytest.fixture(scope="module")
def digits_small():
    X, y = load_digits(return_X_y=True)
    return X[:SMALL_ROWS] / 16.0, y[:SMALL_ROWS]


def test_importing_streamfit_does_not_import_sklearn():
    """scikit-learn is a test extra, not a dependency: the tags import it only when asked."""
    code = "import sys, streamfit; assert 'sklearn' not in sys.modules, 'streamfit imported sklearn'"
    subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("case", MODEL_SELECTION_CASES)
def test_sklearn_tags(case):
    est = MODEL_SELECTION_CASES[case][0]()
    tags = get_tags(est)
    assert is_classifier(est) and tags.estimator_type == "classifier"
    assert tags.target_tags.required and tags.input_tags.sparse and tags.requires_fit
    assert tags.classifier_tags.multi_label is (case != "fbpd")  # fbpd's hinge is multiclass only
    assert not get_tags(BCDClassifier(loss="logistic")).classifier_tags.multi_label  # eq. 12: multiclass only
    with pytest.raises(ValueError, match="requires y to be passed"):
        est.fit(np.ones((4, 2)), None)


@pytest.mark.parametrize("case", MODEL_SELECTION_CASES)
def test_cross_val_score(digits_small, case):
    """cross_val_score treats the estimators as classifiers (stratified folds) and scores with
    their accuracy: the same numbers as fitting clones on StratifiedKFold's folds by hand."""
    X, y = digits_small
    est = MODEL_SELECTION_CASES[case][0]()
    scores = cross_val_score(est, X, y, cv=3)
    assert scores.shape == (3,) and np.all(np.isfinite(scores)) and np.all(scores > ACCURACY_FLOOR)
    by_hand = [clone(est).fit(X[tr], y[tr]).score(X[te], y[te]) for tr, te in StratifiedKFold(3).split(X, y)]
    np.testing.assert_allclose(scores, by_hand, rtol=0, atol=1e-12)
    assert not hasattr(est, "model_")  # cross_val_score fitted clones


@pytest.mark.parametrize("case", MODEL_SELECTION_CASES)
def test_grid_search(digits_small, case):
    X, y = digits_small
    make, name, values = MODEL_SELECTION_CASES[case]
    gs = GridSearchCV(make(), {name: values}, cv=3).fit(X, y)
    assert gs.best_params_[name] in values
    res, best = gs.cv_results_, gs.best_index_
    assert list(res[f"param_{name}"]) == values
    splits = [res[f"split{i}_test_score"][best] for i in range(3)]
    assert gs.best_score_ == pytest.approx(np.mean(splits), abs=1e-12)
    assert gs.best_score_ == max(res["mean_test_score"]) and gs.best_score_ > ACCURACY_FLOOR
    # refit on all rows with the chosen value; the search's predict and score are the refitted estimator's
    assert gs.best_estimator_.get_params()[name] == gs.best_params_[name]
    assert list(gs.classes_) == list(range(10)) and gs.n_features_in_ == 64
    np.testing.assert_array_equal(gs.predict(X), gs.best_estimator_.predict(X))
    assert gs.score(X, y) == gs.best_estimator_.score(X, y) > ACCURACY_FLOOR


@pytest.mark.parametrize("case", MODEL_SELECTION_CASES)
def test_pipeline_in_grid_search(digits_small, case):
    """A pipeline's nested parameter (clf__<name>) reaches the estimator; the pipeline's tags are
    the classifier's."""
    X, y = digits_small
    make, name, values = MODEL_SELECTION_CASES[case]
    pipe = Pipeline([("scale", MaxAbsScaler()), ("clf", make())])
    assert is_classifier(pipe)
    gs = GridSearchCV(pipe, {f"clf__{name}": values[::-1]}, cv=2).fit(X * 16.0, y)
    chosen = gs.best_params_[f"clf__{name}"]
    assert chosen in values and gs.best_estimator_.named_steps["clf"].get_params()[name] == chosen
    assert gs.best_score_ > ACCURACY_FLOOR


def test_score_is_accuracy(digits_small):
    """score is scikit-learn's accuracy_score: sample weights; subset accuracy for multilabel."""
    X, y = digits_small
    clf = MODEL_SELECTION_CASES["ppdsparse"][0]().fit(X[:240], y[:240])
    w = np.random.default_rng(0).uniform(0.1, 2.0, size=120)
    pred = clf.predict(X[240:])
    assert clf.score(X[240:], y[240:]) == pytest.approx(accuracy_score(y[240:], pred), abs=1e-12)
    assert clf.score(X[240:], y[240:], sample_weight=w) == pytest.approx(
        accuracy_score(y[240:], pred, sample_weight=w), abs=1e-12)
    with pytest.raises(ValueError):
        clf.score(X[240:], y[240:][:, None])  # a column of labels is not one label per row
    rng = np.random.default_rng(0)
    Xm = rng.normal(size=(400, 20))
    Y = (Xm @ rng.normal(size=(20, 4)) > 0.5).astype(int)
    ml = StagewiseLSClassifier(generator="sequential", block_size=10, n_passes=3).fit(Xm[:300], Y[:300])
    subset = accuracy_score(Y[300:], ml.predict(Xm[300:]))  # rows whose whole label set is right
    assert 0.3 < subset < 1
    assert ml.score(Xm[300:], Y[300:]) == pytest.approx(subset, abs=1e-12)
    assert ml.score(Xm[300:], sp.csr_matrix(Y[300:])) == pytest.approx(subset, abs=1e-12)


def test_stagewise_lipschitz_and_calibrate_reach_the_solver(digits_small):
    X, y = digits_small
    kw = dict(link="softmax", generator="rff", n_components=128, block_size=64, n_passes=1, max_iter=3)
    default = StagewiseLSClassifier(**kw).fit(X, y).decision_function(X)
    half = StagewiseLSClassifier(lipschitz=0.5, **kw)  # the solver's default bound for softmax
    assert half.get_params()["lipschitz"] == 0.5 and "lipschitz=0.5" in repr(half)
    np.testing.assert_array_equal(half.fit(X, y).decision_function(X), default)
    longer_steps = StagewiseLSClassifier(lipschitz=0.25, **kw).fit(X, y).decision_function(X)
    assert np.abs(longer_steps - default).max() > 1e-6
    with pytest.raises(ValueError):
        StagewiseLSClassifier(lipschitz=0.0, **kw).fit(X, y)
    # calibrate: the estimator's name for the solver's calibration
    for calibrate, calibration in [(False, "none"), (None, "none"), ("none", "none"), (True, "poly"),
                                   ("poly", "poly"), ("predictions", "predictions")]:
        assert StagewiseLSClassifier(calibrate=calibrate)._solver_params().calibration == calibration


# scikit-learn's own checks of the estimator API that need no input validation (the estimators do
# not check X for NaN, complex values or a changed feature count, which scikit-learn's full
# check_estimator also requires); the ones this scikit-learn version lacks are skipped.
API_CHECKS = [
    "check_parameters_default_constructible", "check_no_attributes_set_in_init", "check_get_params_invariance",
    "check_set_params", "check_estimator_repr", "check_estimator_cloneable", "check_valid_tag_types",
    "check_mixin_order", "check_estimators_fit_returns_self", "check_fit_score_takes_y",
    "check_dont_overwrite_parameters", "check_estimators_overwrite_params", "check_fit_check_is_fitted",
    "check_estimator_sparse_tag", "check_estimator_sparse_matrix", "check_pipeline_consistency",
    "check_estimators_pickle", "check_requires_y_none",
]


@pytest.mark.parametrize("case", MODEL_SELECTION_CASES)
def test_sklearn_api_checks(case):
    est = MODEL_SELECTION_CASES[case][0]()
    ran = 0
    for check in API_CHECKS:
        fn = getattr(estimator_checks, check, None)
        if fn is not None:
            fn(type(est).__name__, est)
            ran += 1
    assert ran >= 10
