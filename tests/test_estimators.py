"""The in-memory estimators: the scikit-learn API over the out-of-core solvers (StagewiseLSClassifier
in detail; every estimator with scikit-learn's model selection, pipelines and tags)."""

from __future__ import annotations

import contextlib
import logging
import subprocess
import sys
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.base import clone, is_classifier
from sklearn.datasets import load_digits
from sklearn.exceptions import ConvergenceWarning
from sklearn.metrics import accuracy_score
from sklearn.model_selection import GridSearchCV, StratifiedKFold, cross_val_score, train_test_split
from sklearn.pipeline import Pipeline
from sklearn.preprocessing import MaxAbsScaler
from sklearn.utils import estimator_checks, get_tags

import streamfit
from streamfit import BCDClassifier, FBPDClassifier, MultiBoostClassifier, PPDSparseClassifier, StagewiseLSClassifier
from streamfit import StagewiseLSRegressor as Regressor


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
        _ = clf.coef_


def test_linear_model_string_labels_and_sparse_input(digits_split):
    Xtr, Xte, ytr, yte = digits_split
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    clf = StagewiseLSClassifier(generator="sequential", calibrate=False, block_size=16, n_passes=3, lam=1e-3)
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
    runs = {
        "violation": streamfit.BCDClassifier(lam=1e-4, tol=1e-2, max_iter=500, stopping="violation").fit(X_tr, y_tr)
    }
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)  # the default test holds before max_iter
        runs["auto"] = streamfit.BCDClassifier(lam=1e-4, tol=1e-2, max_iter=500, stopping="auto").fit(X_tr, y_tr)
    assert len(runs["violation"].history_) < len(runs["auto"].history_) < 500
    assert runs["auto"].objective(X_tr, y_tr) <= runs["violation"].objective(X_tr, y_tr)


# -- scikit-learn model selection, pipelines and tags, for every estimator ----------------------

# Each estimator with settings small enough for a fit in well under a second on SMALL_ROWS
# digits, and one parameter with two values to search over.
MODEL_SELECTION_CASES = {
    "stagewise": (
        lambda: StagewiseLSClassifier(
            generator="rff", n_components=256, block_size=128, n_passes=1, bandwidth=1.0, lam=3e-2
        ),
        "lam",
        [1e-2, 1e-1],
    ),
    # bcd on the pixels as given: digits' near-empty border pixels spread the columns' scales 231×,
    # so standardize "auto" would take the standardized problem, slower to converge at this λ
    "bcd": (lambda: BCDClassifier(lam=1e-3, tol=1e-2, max_iter=300, standardize=False), "lam", [1e-4, 1e-2]),
    "ppdsparse": (lambda: PPDSparseClassifier(lam=1e-4, tau=1e-2, max_iter=50), "tau", [1e-3, 1e-2]),
    "fbpd": (lambda: FBPDClassifier(penalty="l2", lam=1e-3, tol=1e-3, max_iter=600), "lam", [1e-3, 1e-2]),
}
SMALL_ROWS = 360
ACCURACY_FLOOR = 0.8  # each case's folds and grid means score 0.88–0.96 here (ten classes: chance is 0.1)


@pytest.fixture(scope="module")
def digits_small():
    X, y = load_digits(return_X_y=True)
    return X[:SMALL_ROWS] / 16.0, y[:SMALL_ROWS]


def test_importing_streamfit_does_not_import_sklearn():
    """scikit-learn is a test extra, not a dependency: the tags import it only when asked, and
    without it imported an unfitted estimator raises streamfit's own NotFittedError, a column y
    warns with streamfit's own DataConversionWarning and a fit stopped at max_iter with its own
    ConvergenceWarning."""
    code = (
        "import sys, numpy as np, streamfit\n"
        "assert 'sklearn' not in sys.modules, 'streamfit imported sklearn'\n"
        "from streamfit.errors import NotFittedError\n"
        "try:\n    streamfit.BCDClassifier().predict(np.ones((2, 2)))\n"
        "except NotFittedError as e:\n    assert type(e) is NotFittedError, type(e)\n"
        "import warnings\n"
        "from streamfit.estimators import DataConversionWarning\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    streamfit.BCDClassifier().fit(np.eye(4), np.array([[0], [1], [0], [1]]))\n"
        "assert [type(x.message) for x in w] == [DataConversionWarning], w\n"
        "from streamfit.estimators import ConvergenceWarning\n"
        "with warnings.catch_warnings(record=True) as w:\n"
        "    warnings.simplefilter('always')\n"
        "    streamfit.BCDClassifier(max_iter=1, tol=1e-12).fit(np.eye(4), np.array([0, 1, 0, 1]))\n"
        "assert [type(x.message) for x in w] == [ConvergenceWarning], w\n"
        "assert 'sklearn' not in sys.modules, 'NotFittedError or a warning imported sklearn'\n"
    )
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
        accuracy_score(y[240:], pred, sample_weight=w), abs=1e-12
    )
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


def test_the_constructor_is_the_solvers_parameters_with_their_defaults():
    """Each estimator's signature is its solver's Params (calibrate for stagewise's calibration)
    plus chunk_rows, keyword-only, with the solver's defaults; every one of them reaches the solver."""
    import inspect

    from streamfit.store import DEFAULT_CHUNK_ROWS

    for est in (StagewiseLSClassifier, FBPDClassifier, PPDSparseClassifier, BCDClassifier, MultiBoostClassifier):
        fields = est._solver.Params.model_fields
        signature = inspect.signature(est).parameters
        renamed = {"calibration": "calibrate"} if est is StagewiseLSClassifier else {}
        assert list(signature) == [renamed.get(name, name) for name in fields] + ["chunk_rows"]
        assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in signature.values())
        assert signature["chunk_rows"].default == DEFAULT_CHUNK_ROWS
        for name, field in fields.items():
            if name not in renamed:
                assert signature[name].default == field.default, (est.__name__, name)
        with pytest.raises(TypeError):
            est("positional")
    assert inspect.signature(StagewiseLSClassifier).parameters["calibrate"].default == "auto"
    assert BCDClassifier(sigma=0.2)._solver_params().sigma == 0.2  # not offered before
    assert PPDSparseClassifier(threads=2)._solver_params().threads == 2


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
    for calibrate, calibration in [
        (False, "none"),
        (None, "none"),
        ("none", "none"),
        (True, "poly"),
        ("poly", "poly"),
        ("predictions", "predictions"),
    ]:
        assert StagewiseLSClassifier(calibrate=calibrate)._solver_params().calibration == calibration


# -- scikit-learn's full check_estimator, and the behaviours it asks for ------------------------

# Each estimator with settings small enough for check_estimator (≈60 checks, small data sets) to
# take a second or two; stagewise twice, as its two links differ in the multilabel outputs.
CHECK_CASES = {
    "stagewise": lambda: StagewiseLSClassifier(
        generator="rff", n_components=64, block_size=32, n_passes=1, bandwidth=1.0, lam=3e-2
    ),
    "stagewise-softmax": lambda: StagewiseLSClassifier(
        link="softmax",
        generator="rff",
        n_components=64,
        block_size=32,
        n_passes=1,
        bandwidth=1.0,
        lam=3e-2,
        max_iter=10,
    ),
    "bcd": MODEL_SELECTION_CASES["bcd"][0],
    "ppdsparse": MODEL_SELECTION_CASES["ppdsparse"][0],
    "fbpd": MODEL_SELECTION_CASES["fbpd"][0],
    "multiboost": lambda: MultiBoostClassifier(max_iter=10),
}

# The cases that stop at max_iter on some of check_estimator's data sets, so that it warns (scikit-learn's
# own test suite ignores ConvergenceWarning in these checks).
NOT_CONVERGED_IN_CHECKS: set[str] = set()  # fbpd (max_iter 600) converges on all of them; multiboost's
# default (MultiBoostcw-1) is a fixed schedule of max_iter rounds; bcd did not before its memory mode
# centred dense columns (session 27: check_estimator's data sit off the origin)

# The checks each case is expected to fail, and why (check_estimator's expected_failed_checks).
EXPECTED_FAILED_CHECKS = {
    # The identity link fits 0/1 label indicators by least squares: its predict_proba is those fits
    # projected onto [0, 1] (Algorithm 2's clip), so some probabilities are exactly 0 or 1, and
    # equal probabilities there break the ranking agreement with decision_function. The softmax
    # link (sigmoid probabilities) passes both.
    "stagewise": {
        "check_classifiers_multilabel_output_format_predict_proba": "identity link: label probabilities are least-squares fits clipped to [0, 1], some exactly 0 or 1",
        "check_classifier_multioutput": "identity link: probabilities clipped to [0, 1] tie where decision_function does not",
    },
}


@pytest.mark.filterwarnings("ignore:Estimator .* does not inherit from `sklearn.base.BaseEstimator`")  # by design
@pytest.mark.parametrize("case", CHECK_CASES)
def test_check_estimator(case):
    """Every check of scikit-learn's check_estimator passes but the listed expected failures,
    which do fail (an expected failure that starts passing must leave the list)."""
    expected = EXPECTED_FAILED_CHECKS.get(case, {})
    with pytest.warns(ConvergenceWarning) if case in NOT_CONVERGED_IN_CHECKS else contextlib.nullcontext():
        results = estimator_checks.check_estimator(
            CHECK_CASES[case](), expected_failed_checks=expected, on_fail=None, on_skip=None
        )
    failed = {
        r["check_name"]: f"{type(r['exception']).__name__}: {r['exception']}"
        for r in results
        if r["status"] == "failed"
    }
    assert not failed, failed
    assert {r["check_name"] for r in results if r["status"] == "xfail"} == set(expected)
    assert sum(r["status"] == "passed" for r in results) >= 50


def _fitted(case, X=None, y=None):
    if X is None:
        rng = np.random.default_rng(0)
        X = rng.normal(size=(60, 4))
        y = np.repeat([0, 1, 2], 20)
    return CHECK_CASES[case]().fit(X, y)


LABEL_KINDS = {
    "int64": lambda z: z.astype(np.int64),
    "int32": lambda z: z.astype(np.int32) * 7 - 3,
    "uint8": lambda z: z.astype(np.uint8) + 250,
    "bool": lambda z: z > 0,
    "float64": lambda z: z * 2.0 - 1.0 + (z > 1),  # integral floats (others are continuous): -1.0, 1.0, 4.0
    "float32": lambda z: z.astype(np.float32),
    "str": lambda z: np.array(["cat", "dog", "emu"])[z],
}


@pytest.mark.parametrize("kind", LABEL_KINDS)
@pytest.mark.parametrize("case", CHECK_CASES)
def test_labels_keep_their_type(tmp_path, case, kind):
    """classes_ and predict give y's labels in y's dtype, as scikit-learn's LinearSVC does (int,
    bool, float and string labels); so do model_.predict, a pickled estimator and the model
    saved with model_.save and loaded with streamfit.load_model (its model.json records the
    labels' dtype beside their names)."""
    import pickle

    from sklearn.svm import LinearSVC

    rng = np.random.default_rng(6)
    X = rng.normal(size=(60, 4))
    z = np.digitize(X[:, 0], [-0.43, 0.43])
    y = LABEL_KINDS[kind](z if kind != "bool" else (z > 0).astype(int))
    peer = LinearSVC().fit(X, y)
    est = CHECK_CASES[case]().fit(X, y)
    assert est.classes_.dtype == peer.classes_.dtype and np.array_equal(est.classes_, peer.classes_)
    pred = est.predict(X)
    assert pred.dtype == peer.predict(X).dtype and np.mean(pred == y) > 0.7
    again = pickle.loads(pickle.dumps(est))
    est.model_.save(str(tmp_path / "model"))
    loaded = streamfit.load_model(str(tmp_path / "model"))
    for model_pred in (est.model_.predict(X), again.predict(X), again.model_.predict(X), loaded.predict(X)):
        assert model_pred.dtype == pred.dtype
        np.testing.assert_array_equal(model_pred, pred)
    assert loaded.classes_.dtype == est.classes_.dtype and np.array_equal(loaded.classes_, est.classes_)


@pytest.mark.parametrize("case", CHECK_CASES)
def test_not_fitted_error(case):
    """Before fit every method raises NotFittedError: streamfit's (a ValueError and an
    AttributeError, so hasattr is False) and, scikit-learn being imported, scikit-learn's."""
    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    from streamfit.errors import NotFittedError, StreamfitError

    est = CHECK_CASES[case]()
    X = np.ones((3, 4))
    calls = [
        lambda: est.predict(X),
        lambda: est.decision_function(X),
        lambda: est.predict_topk(X),
        lambda: est.score(X, [0, 1, 0]),
        lambda: est.coef_,
        lambda: est.multilabel_,
        lambda: est.n_iter_,
    ]
    if hasattr(est, "predict_proba"):
        calls.append(lambda: est.predict_proba(X))
    for call in calls:
        with pytest.raises(SklearnNotFittedError, match="instance is not fitted yet") as info:
            call()
        assert isinstance(info.value, (NotFittedError, StreamfitError, ValueError, AttributeError))
        assert isinstance(info.value, NotFittedError) and isinstance(info.value, StreamfitError)
    assert not hasattr(est, "coef_")
    with pytest.raises(SklearnNotFittedError):
        estimator_checks.check_is_fitted(est)


def test_not_fitted_error_pickles():
    """The scikit-learn twin of NotFittedError pickles (as joblib workers send it back)."""
    import pickle

    from sklearn.exceptions import NotFittedError as SklearnNotFittedError

    with pytest.raises(SklearnNotFittedError) as info:
        BCDClassifier().predict(np.ones((2, 2)))
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is type(info.value) and str(again) == str(info.value)


@pytest.mark.parametrize("case", ["stagewise", "bcd", "ppdsparse", "fbpd"])
def test_input_checks(case):
    """X: NaN, inf, complex, empty, non-2-D and a changed feature count raise scikit-learn's
    ValueErrors in fit and in every prediction method, for dense and sparse X."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(30, 3))
    y = np.repeat([0, 1, 2], 10)
    est = CHECK_CASES[case]()
    for bad, match in [
        (np.nan, "Input X contains NaN"),
        (np.inf, "Input X contains infinity"),
        (-np.inf, "Input X contains infinity"),
    ]:
        Xb = X.copy()
        Xb[3, 1] = bad
        for Xin in (Xb, sp.csr_matrix(Xb)):
            with pytest.raises(ValueError, match=match):
                clone(est).fit(Xin, y)
    with pytest.raises(ValueError, match="Complex data not supported"):
        clone(est).fit(X + 1j, y)
    with pytest.raises(ValueError, match="Complex data not supported"):
        clone(est).fit(sp.csr_matrix(X + 1j), y)
    with pytest.raises(ValueError, match=r"0 sample\(s\) \(shape=\(0, 3\)\)"):
        clone(est).fit(np.empty((0, 3)), [])
    with pytest.raises(ValueError, match=r"0 feature\(s\) \(shape=\(30, 0\)\)"):
        clone(est).fit(np.empty((30, 0)), y)
    with pytest.raises(ValueError, match=r"0 feature\(s\)"):
        clone(est).fit(sp.csr_matrix((30, 0)), y)
    with pytest.raises(ValueError, match="Expected 2D array, got 1D array"):
        clone(est).fit(X[:, 0], y)

    est.fit(X, y)
    methods = [est.predict, est.decision_function, lambda Z: est.score(Z, y[: Z.shape[0]]), est.predict_topk]
    if hasattr(est, "predict_proba"):
        methods.append(est.predict_proba)
    Xnan = X.copy()
    Xnan[0, 0] = np.nan
    for method in methods:
        for Xin in (X[:, :2], sp.csr_matrix(X[:, :2]), np.hstack([X, X])):
            with pytest.raises(
                ValueError,
                match=f"X has {Xin.shape[1]} features, but {type(est).__name__} is expecting 3 features as input",
            ):
                method(Xin)
        for Xin in (Xnan, sp.csr_matrix(Xnan)):
            with pytest.raises(ValueError, match="Input X contains NaN"):
                method(Xin)
        with pytest.raises(ValueError, match="Reshape your data"):
            method(X[0])
        with pytest.raises(ValueError, match="Complex data not supported"):
            method(X + 1j)
    # object arrays of numbers are numbers; a list of lists too
    np.testing.assert_array_equal(est.predict(X.astype(object)), est.predict(X))
    np.testing.assert_array_equal(est.predict(X.tolist()), est.predict(X))


@pytest.mark.parametrize("case", ["stagewise", "bcd", "ppdsparse", "fbpd", "multiboost", "regressor"])
def test_a_pandas_frame_with_pd_na_meets_the_nan_error(case):
    """qa26: a frame of pandas' nullable dtypes (Float64, Int64) holding pd.NA gave float()'s bare
    `TypeError: … not 'NAType'` in fit and in every prediction method; it is now the NaN error
    (as scikit-learn's check_array gives), and such a frame without pd.NA fits as its float64 copy."""
    import pandas as pd

    rng = np.random.default_rng(3)
    X = pd.DataFrame(rng.normal(size=(30, 3)), columns=["a", "b", "c"]).astype("Float64")
    y = np.repeat([0, 1, 2], 10)
    make = {**CHECK_CASES, "regressor": Regressor}[case]
    target = X["a"].to_numpy(dtype=float) if case == "regressor" else y
    with_na = X.copy()
    with_na.iloc[3, 1] = pd.NA
    counts = X.round().astype("Int64")
    counts.iloc[5, 2] = pd.NA
    for bad in (with_na, counts):
        with pytest.raises(ValueError, match=r"^Input X contains NaN\.$"):
            make().fit(bad, target)
    est = make().fit(X, target)
    plain = make().fit(X.to_numpy(dtype=float), target)
    np.testing.assert_array_equal(est.predict(X), plain.predict(X.to_numpy(dtype=float)))
    for method in (est.predict, est.decision_function if hasattr(est, "decision_function") else est.predict):
        with pytest.raises(ValueError, match=r"^Input X contains NaN\.$"):
            method(with_na)


@pytest.mark.parametrize("case", ["stagewise", "bcd", "ppdsparse", "fbpd", "multiboost", "regressor"])
def test_values_whose_squares_overflow_float64_are_refused_by_the_linear_solvers(case):
    """Finite values so large (|x| about 1e150 or more) that sums of their squares overflow
    float64: bcd and ppdsparse fitted W = 0 without a word (wine scaled by 1e300: every row the
    majority class, accuracy 0.399 where the unscaled fit scores 1.0), fbpd raised SciPy's "array
    must not contain infs or NaNs", stagewise its own error from the first Gram. Each linear
    estimator now refuses X with one ValueError naming the cause and the fix, dense and sparse;
    multiboost, whose stumps only compare values, fits it as the unscaled X."""
    from sklearn.datasets import load_wine

    X, y = load_wine(return_X_y=True)
    X = X / X.max(axis=0)
    make = {**CHECK_CASES, "regressor": Regressor}[case]
    target = X[:, 0] if case == "regressor" else y
    for Xin in (X * 1e300, sp.csr_matrix(X * 1e300)):
        if case == "multiboost":
            assert make().fit(Xin, y).score(Xin, y) == make().fit(X, y).score(X, y)
            continue
        with pytest.raises(ValueError, match=r"^X: the sum of its squared values overflows float64 .*scale X down"):
            make().fit(Xin, target)
    # large, but its squares sum within float64: fitted, with the estimator's defaults, about as
    # well as the unscaled X (the same accuracy; the regressor's ridge λ is not scale-free)
    default = type(make())
    large, unscaled = default().fit(X * 1e100, target), default().fit(X, target)
    assert large.score(X * 1e100, target) >= unscaled.score(X, target) - 0.01


def test_sparse_input_is_checked_without_densifying():
    """A CSR of float32 or float64 reaches the solver as is (its .data is the buffer checked);
    COO becomes CSR; integer CSR becomes float64; a very wide CSR is checked in O(nnz)."""
    est = BCDClassifier()
    X = sp.random(50, 10, density=0.3, format="csr", random_state=0, dtype=np.float32)
    out = est._check_X(X, reset=True)
    assert out is X and out.dtype == np.float32
    out = est._check_X(X.tocoo(), reset=True)
    assert sp.issparse(out) and out.format == "csr"
    out = est._check_X(sp.csr_matrix(np.eye(3, dtype=np.int64)), reset=True)
    assert out.format == "csr" and out.dtype == np.float64
    wide = sp.csr_matrix((np.ones(3), ([0, 1, 2], [5, 10**11, 7])), shape=(3, 10**12))  # 8 TB if dense
    assert est._check_X(wide, reset=True) is wide
    wide.data[1] = np.nan
    with pytest.raises(ValueError, match="Input X contains NaN"):
        est._check_X(wide, reset=True)


@pytest.mark.parametrize("case", ["stagewise", "bcd", "ppdsparse", "fbpd"])
def test_target_checks(case):
    """y: continuous, NaN or inf values, a single class, a length other than X's, and for
    label indicators values other than 0/1, raise ValueErrors (scikit-learn's words)."""
    rng = np.random.default_rng(2)
    X = rng.normal(size=(20, 3))
    est = CHECK_CASES[case]()
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        est.fit(X, rng.normal(size=20))
    with pytest.raises(ValueError, match="Input y contains NaN"):
        est.fit(X, np.r_[np.nan, np.zeros(19)])
    with pytest.raises(ValueError, match="Input y contains infinity"):
        est.fit(X, np.r_[np.inf, np.zeros(19)])
    with pytest.raises(ValueError, match="contains only one class"):
        est.fit(X, np.ones(20))
    with pytest.raises(ValueError, match=r"inconsistent numbers of samples: \[20, 19\]"):
        est.fit(X, np.arange(19) % 2)
    est.fit(X, (np.arange(20) % 2).astype(float))  # integral floats are class labels
    assert est.classes_.dtype.kind == "f" and list(est.classes_) == [0.0, 1.0]
    Y = (rng.normal(size=(20, 3)) > 0).astype(int)
    if case == "fbpd":
        with pytest.raises(ValueError, match="not a label indicator"):
            est.fit(X, Y)
    else:
        with pytest.raises(ValueError, match="Unknown label type"):
            est.fit(X, 2 * Y - 1)  # ±1 is not a 0/1 indicator
        with pytest.raises(ValueError, match="Unknown label type"):
            est.fit(X, sp.csr_matrix(2 * Y))


@pytest.mark.parametrize("case", CHECK_CASES)
def test_binary_decision_function(case):
    """Two classes: decision_function is (n,), positive where predict says classes_[1], and
    the difference of the model's two scores; three or more classes keep n × n_classes."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(80, 4))
    y = np.where(X[:, 0] + 0.3 * rng.normal(size=80) > 0, "yes", "no")
    est = CHECK_CASES[case]().fit(X, y)
    d = est.decision_function(X)
    assert d.shape == (80,) and list(est.classes_) == ["no", "yes"]
    np.testing.assert_array_equal(np.where(d > 0, "yes", "no"), est.predict(X))
    S = est.model_.decision_function(X)
    assert S.shape == (80, 2)
    np.testing.assert_allclose(d, S[:, 1] - S[:, 0], rtol=0, atol=1e-12)
    assert np.mean(est.predict(X) == y) > 0.8
    multi = _fitted(case)
    assert multi.decision_function(np.ones((5, 4))).shape == (5, 3)


@pytest.mark.parametrize("case", ["stagewise", "stagewise-softmax", "bcd", "ppdsparse"])
def test_multilabel_outputs(case):
    """Label indicators: predict has the indicator's dtype; decision_function is n × n_labels,
    positive exactly where predict sets a label (the model's threshold subtracted: the identity
    link's is fitted on the training scores, ppdsparse's on the training margins, other margins' is 0)."""
    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 6))
    Y = (X @ rng.normal(size=(6, 3)) > 0.3).astype(np.int64)
    for dtype in (np.int64, np.int32, np.uint8, bool, np.float64):
        est = CHECK_CASES[case]().fit(X, Y.astype(dtype))
        pred = est.predict(X)
        assert pred.dtype == np.dtype(dtype) and pred.shape == Y.shape
    est = CHECK_CASES[case]().fit(X, Y)
    D = est.decision_function(X)
    assert D.shape == Y.shape
    np.testing.assert_array_equal((D > 0).astype(np.int64), est.predict(X))
    offset = est.model_.decision_threshold
    if est.get_params().get("link") == "identity":
        assert 0 < offset < 1
    elif case == "ppdsparse":
        assert offset in np.arange(-99, 100) / 100
    else:
        assert offset == 0.0
    np.testing.assert_allclose(D, est.model_.decision_function(X) - offset, rtol=0, atol=0)
    sparse_fit = CHECK_CASES[case]().fit(X, sp.csr_matrix(Y))
    np.testing.assert_array_equal(sparse_fit.predict(X).toarray(), est.predict(X))


@pytest.mark.parametrize("case", ["stagewise", "bcd", "ppdsparse"])
def test_a_sparse_indicator_predicts_sparse(case):
    """As scikit-learn's OneVsRestClassifier: a label indicator fitted as scipy.sparse predicts a
    CSR matrix (here in the fitted dtype), a dense one an ndarray; decision_function and
    predict_proba are dense n × n_labels either way, as OneVsRestClassifier's; score takes both."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.multiclass import OneVsRestClassifier

    rng = np.random.default_rng(4)
    X = rng.normal(size=(120, 6))
    Y = (X @ rng.normal(size=(6, 3)) > 0.3).astype(np.int64)
    for fitted in (sp.csr_matrix(Y), sp.csc_matrix(Y.astype(np.float32))):
        peer = OneVsRestClassifier(LogisticRegression()).fit(X, fitted)
        est = CHECK_CASES[case]().fit(X, fitted)
        pred = est.predict(X)
        assert sp.issparse(peer.predict(X)) and isinstance(pred, sp.csr_matrix)
        assert pred.dtype == fitted.dtype and pred.shape == Y.shape
        np.testing.assert_array_equal(pred.toarray(), CHECK_CASES[case]().fit(X, fitted.toarray()).predict(X))
        assert est.decision_function(X).shape == peer.decision_function(X).shape
        if hasattr(est, "predict_proba"):
            assert est.predict_proba(X).shape == peer.predict_proba(X).shape
        assert est.score(X, fitted) == est.score(X, Y) == np.mean(np.all(pred.toarray() == Y, axis=1))
    dense = CHECK_CASES[case]().fit(X, Y)
    assert isinstance(dense.predict(X), np.ndarray)
    assert isinstance(
        CHECK_CASES[case]().fit(X, sp.csr_matrix(Y)).fit(X, Y).predict(X), np.ndarray
    )  # a refit resets it


@pytest.mark.parametrize("case", CHECK_CASES)
def test_column_y_is_raveled_with_a_warning(case):
    """A y of shape (n, 1) holds class labels, not a one-label indicator: it is raveled with
    scikit-learn's DataConversionWarning (also streamfit.estimators.DataConversionWarning)."""
    from sklearn.exceptions import DataConversionWarning as SklearnDataConversionWarning

    from streamfit.estimators import DataConversionWarning

    rng = np.random.default_rng(5)
    X = rng.normal(size=(60, 4))
    y = np.digitize(
        X[:, 0], [-0.43, 0.43]
    )  # three classes by the first feature: every case converges, no other warning
    flat = CHECK_CASES[case]().fit(X, y)
    with pytest.warns(SklearnDataConversionWarning, match="A column-vector y was passed") as record:
        column = CHECK_CASES[case]().fit(X, y[:, None])
    assert all(isinstance(w.message, DataConversionWarning) for w in record)
    assert record[0].filename == __file__  # attributed to the caller of fit
    assert not column.multilabel_ and list(column.classes_) == [0, 1, 2]
    np.testing.assert_array_equal(column.predict(X), flat.predict(X))
    with pytest.warns(SklearnDataConversionWarning, match="A column-vector y was passed"):
        sparse_column = CHECK_CASES[case]().fit(X, sp.csr_matrix(y[:, None]))
    np.testing.assert_array_equal(sparse_column.predict(X), flat.predict(X))


@pytest.mark.parametrize("case", ["stagewise", "bcd", "ppdsparse", "fbpd"])
def test_n_iter(case):
    est = _fitted(case)
    assert 1 <= est.n_iter_
    if case != "stagewise":
        assert est.n_iter_ <= est.max_iter
    else:
        assert est.n_iter_ == len(est.history_)  # stages


@pytest.mark.parametrize("case", ["bcd", "ppdsparse", "fbpd"])
def test_a_fit_stopped_at_max_iter_warns(digits_small, case, caplog):
    """A fit whose model says converged: false warns with scikit-learn's ConvergenceWarning (also
    streamfit.estimators.ConvergenceWarning), attributed to the caller of fit, naming the test that
    failed as the CLI's log line does (it gave only max_iter and tol before), and that is its one
    report: no log line besides (the driver logs one for the CLI); a converged fit does not warn.
    (Stagewise has no stopping test: its max_iter caps each softmax stage.)"""
    from streamfit.estimators import ConvergenceWarning as StreamfitConvergenceWarning

    X, y = digits_small
    est = MODEL_SELECTION_CASES[case][0]()
    with warnings.catch_warnings():
        warnings.simplefilter("error", ConvergenceWarning)
        assert clone(est).fit(X, y).model_.info["converged"] is True
    name = type(est).__name__
    which = " for 10 of 10 classes" if case == "ppdsparse" else ""
    with pytest.warns(ConvergenceWarning) as record, caplog.at_level(logging.DEBUG, logger="streamfit"):
        stopped = clone(est).set_params(max_iter=1, tol=1e-12).fit(X, y)
    assert stopped.model_.info["converged"] is False and stopped.n_iter_ == 1
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], caplog.text
    [w] = record
    assert isinstance(w.message, StreamfitConvergenceWarning) and w.filename == __file__
    message = str(w.message)
    assert message.startswith(
        f"{name} did not converge{which}: max_iter=1 iterations ended before the stopping test (tol=1e-12) held: "
    ) and message.endswith("; increase max_iter or tol")
    assert "tol 1e-12" in message.split("held: ", 1)[1]  # the test that failed, in the words the CLI logs


@pytest.mark.parametrize("case", MODEL_SELECTION_CASES)
def test_random_state_follows_sklearn_conventions(digits_small, case):
    """None draws a seed from numpy's global RNG, a RandomState or Generator from itself: equal
    RNG states give equal models, and other states other models (each case's fit draws: rff's
    features, bcd's block permutations, ppdsparse's draws, fbpd's Lanczos start for its step), so
    the state is the one used (with an int seed the model is fixed by it)."""
    X, y = digits_small
    make = MODEL_SELECTION_CASES[case][0]

    def coef(random_state):
        return make().set_params(random_state=random_state).fit(X, y).decision_function(X)

    np.random.seed(7)
    first = coef(None)
    np.random.seed(7)
    np.testing.assert_array_equal(coef(None), first)
    np.random.seed(8)
    assert not np.array_equal(coef(None), first)
    for rng in (np.random.RandomState, np.random.default_rng):
        seeded = coef(rng(3))
        np.testing.assert_array_equal(coef(rng(3)), seeded)
        assert not np.array_equal(coef(rng(4)), seeded)


# -- a Python-API user's check (session 20) -----------------------------------------------------


@pytest.mark.parametrize(
    "make, said",
    [
        (
            lambda: StagewiseLSClassifier(max_iter="ten"),
            "StagewiseLSClassifier: max_iter='ten': Input should be a valid integer",
        ),
        (
            lambda: StagewiseLSClassifier(calibrate="bogus"),
            "StagewiseLSClassifier: calibrate='bogus': Input should be 'auto', 'none', 'poly' or 'predictions' (the solver's calibration)",
        ),
        (
            lambda: Regressor(tol=-1),
            "StagewiseLSRegressor: tol=-1: Input should be greater than or equal to 0",
        ),
        (
            lambda: BCDClassifier(lam=float("nan"), max_iter=0),
            "BCDClassifier: lam=nan: Input should be a finite number; max_iter=0: Input should be greater than or equal to 1",
        ),
        (
            lambda: PPDSparseClassifier(random_state=-3),
            "PPDSparseClassifier: random_state=-3: Input should be greater than or equal to 0",
        ),
        (
            lambda: FBPDClassifier(penalty="l3"),
            "FBPDClassifier: penalty='l3': Input should be 'l1', 'l1/l2', 'l1/linf' or 'l2'",
        ),
        (
            lambda: MultiBoostClassifier(learning_rate=0),
            "MultiBoostClassifier: learning_rate=0: Input should be greater than 0",
        ),
        (
            lambda: StagewiseLSClassifier(link="softmax", calibrate=True),
            "StagewiseLSClassifier: calibration (Algorithm 2) refits squared error: use it with link='identity'",
        ),
    ],
)
def test_a_bad_parameter_is_one_line_naming_it(make, said):
    """fit refuses a parameter of the wrong type or range with one ValueError line that names the
    estimator, the parameter under the estimator's name with the value given, and what is allowed
    (it was pydantic's ValidationError: several lines, the solver's Params class, a URL)."""
    X, y = np.random.default_rng(0).normal(size=(20, 3)), np.repeat([0, 1], 10)
    with pytest.raises(ValueError) as info:
        make().fit(X, y)
    assert str(info.value) == said or str(info.value).startswith(said)
    assert "\n" not in str(info.value) and "pydantic" not in str(info.value)


@pytest.mark.parametrize("make", [StagewiseLSClassifier, Regressor, MultiBoostClassifier])
def test_dataframe_column_names_are_kept_and_checked(make):
    """A DataFrame's column names are kept as feature_names_in_, and scoring a frame whose columns
    are the same names in another order, or other names, raises a ValueError naming the first
    difference: the columns were matched by position, so the scores were silently those of other
    features. Names on one side only warn (scikit-learn's rules); a refit without names drops them."""
    import pandas  # a test extra (DataFrames are how many users hand the estimators their data)

    rng = np.random.default_rng(0)
    frame = pandas.DataFrame(rng.normal(size=(60, 4)), columns=["age", "height", "weight", "income"])
    y = np.repeat([0, 1, 2], 20) if make is not Regressor else rng.normal(size=60)
    est = make().fit(frame, y)
    np.testing.assert_array_equal(est.feature_names_in_, ["age", "height", "weight", "income"])
    assert est.feature_names_in_.dtype == object
    expected = est.predict(frame)
    with pytest.raises(
        ValueError,
        match=r"^The feature names should match those that were passed during fit \(the same names in another "
        r"order: column 0 is 'income', in fit 'age'\); select X's columns in fit's order: X\[estimator.feature_names_in_\]$",
    ):
        est.predict(frame[["income", "height", "weight", "age"]])
    with pytest.raises(ValueError, match=r"\(not seen at fit: 'salary'; seen at fit, missing now: 'income'\)"):
        est.predict(frame.rename(columns={"income": "salary"}))
    np.testing.assert_array_equal(est.predict(frame[est.feature_names_in_]), expected)
    with pytest.warns(
        UserWarning, match="X does not have valid feature names, but .* was fitted with feature names"
    ) as record:
        np.testing.assert_array_equal(est.predict(frame.to_numpy()), expected)
    assert record[0].filename == __file__  # attributed to the caller, not to streamfit
    est.fit(frame.to_numpy(), y)
    assert not hasattr(est, "feature_names_in_")
    with pytest.warns(UserWarning, match="X has feature names, but .* was fitted without feature names"):
        est.predict(frame)


@pytest.mark.filterwarnings("ignore:Estimator .* does not inherit from `sklearn.base.BaseEstimator`")  # by design
def test_check_estimator_regressor():
    """StagewiseLSRegressor with its defaults passes every check of scikit-learn's check_estimator
    (the README says so; the classifiers' cases are in test_check_estimator)."""
    results = estimator_checks.check_estimator(Regressor(), on_fail=None, on_skip=None)
    failed = {
        r["check_name"]: f"{type(r['exception']).__name__}: {r['exception']}"
        for r in results
        if r["status"] == "failed"
    }
    assert not failed, failed
    assert sum(r["status"] == "passed" for r in results) >= 50


@pytest.mark.parametrize("cls", [StagewiseLSClassifier, BCDClassifier, PPDSparseClassifier])
def test_standardize_auto_on_columns_spread_twenty_is_standardize_true(cls):
    """Dense columns of comparable scale with one of them in 20 times its units (a spread of 20,
    as grams beside kilograms; SCALE_SPREAD = 10 since session 26): the default "auto" fits the
    standardized columns, standardize=True's model bit for bit; the same columns with a spread
    of 5 keep standardize=False's model bit for bit."""
    rng = np.random.default_rng(11)
    Z = rng.normal(size=(300, 6))
    Z /= Z.std(axis=0)
    y = (Z[:, :3] @ rng.normal(size=(3, 3))).argmax(axis=1)
    for factor, given in ((20.0, True), (5.0, False)):
        X = Z.copy()
        X[:, 2] *= factor
        auto = cls().fit(X, y)
        same = cls(standardize=given).fit(X, y)
        assert auto.model_.info["standardized"] is given
        dense = [c.toarray() if sp.issparse(c) else c for c in (auto.coef_, same.coef_)]  # ppdsparse: CSR
        np.testing.assert_array_equal(dense[0], dense[1])
        np.testing.assert_array_equal(auto.intercept_, same.intercept_)
