import hashlib
import io
import json
import os
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfit.errors import ScoringInputError, StreamfitError
from streamfit.model import LinearModel, load_model
from streamfit.store import InMemoryStore
from streamfit.store.format import json_digest


def _model(sparse, multilabel=False):
    rng = np.random.default_rng(0)
    W = rng.normal(size=(4, 30)) * (rng.random((4, 30)) < 0.3)
    return LinearModel(
        sp.csr_matrix(W) if sparse else W,
        rng.normal(size=4),
        classes=list("abcd"),
        n_features=30,
        multilabel=multilabel,
        featurizer={"hashing": None},
        solver="test",
        params={"lam": 1.0},
    ), W


@pytest.mark.parametrize("sparse", [False, True])
def test_save_load_scores_identical(tmp_path, sparse):
    m, W = _model(sparse)
    X = sp.random(50, 30, density=0.2, format="csr", random_state=2)
    m.save(str(tmp_path / "model"))
    m2 = load_model(str(tmp_path))  # a run directory works too
    assert sp.issparse(m2.coef_) == sparse
    np.testing.assert_array_equal(m2.decision_function(X), m.decision_function(X))
    np.testing.assert_allclose(m.decision_function(X), X @ W.T + m.intercept_)
    assert list(m2.classes_) == list("abcd") and m2.params == {"lam": 1.0}


@pytest.mark.parametrize(
    "labels",
    [
        np.array([3, 7, 10, 12]),
        np.array([0, 1, 2, 250], np.uint8),
        np.array([-1.0, 0.5, 2.0, 1e20]),
        np.array([0.1, 0.2, 0.3, 7], np.float32),
    ],
)
def test_a_model_records_its_labels_type(tmp_path, labels):
    """A model whose labels were numbers (an estimator's y) predicts them as numbers of their
    dtype, also once saved and loaded; model.json keeps the names (strings) and adds class_dtype;
    a model without it records no class_dtype and predicts names."""
    X = sp.random(20, 30, density=0.3, format="csr", random_state=5)
    named, W = _model(False)
    model = LinearModel(W, named.intercept_, classes=labels, n_features=30)
    assert model.classes_.tolist() == [str(c) for c in labels] and model.class_dtype is None
    model.set_class_dtype(labels.dtype)
    assert model.classes_.dtype == labels.dtype and np.array_equal(model.classes_, labels)
    np.testing.assert_array_equal(model.predict(X), labels[np.argmax(model.decision_function(X), axis=1)])
    model.save(str(tmp_path / "typed"))
    record = json.loads((tmp_path / "typed" / "model.json").read_text())
    assert record["class_dtype"] == labels.dtype.str and record["classes"] == [str(c) for c in labels]
    loaded = load_model(str(tmp_path / "typed"))
    assert loaded.predict(X).dtype == labels.dtype and np.array_equal(loaded.predict(X), model.predict(X))
    assert loaded.class_names.tolist() == record["classes"]
    named.save(str(tmp_path / "named"))
    assert "class_dtype" not in json.loads((tmp_path / "named" / "model.json").read_text())
    assert load_model(str(tmp_path / "named")).predict(X).dtype.kind == "U"


def test_bool_labels_read_back_from_their_names():
    W = np.eye(2, 30)
    model = LinearModel(W, classes=np.array([False, True]), n_features=30)
    model.set_class_dtype(bool)
    assert model.classes_.dtype == bool and model.classes_.tolist() == [False, True]
    with pytest.raises(ValueError, match=re.escape("not labels of dtype '|b1'")):
        LinearModel(W, classes=["no", "yes"], n_features=30).set_class_dtype(bool)
    with pytest.raises(ValueError, match="'007' reads as '7' of dtype '<i8'"):
        LinearModel(W, classes=["007", "8"], n_features=30).set_class_dtype(np.int64)


def test_predict_topk_order_and_store_input():
    m, W = _model(False)
    X = sp.random(40, 30, density=0.3, format="csr", random_state=3)
    S = m.decision_function(X)
    top, scores = m.predict_topk(X, 3)
    assert np.array_equal(top, np.argsort(-S, axis=1)[:, :3])
    assert np.array_equal(m.predict(X), m.classes_[top[:, 0]])
    src = InMemoryStore(X, np.zeros(40, dtype=np.int32), list("abcd"), chunk_rows=7)
    assert np.array_equal(m.decision_function(src), S)


def test_damaged_model_refused(tmp_path):
    m, _ = _model(False)
    m.save(str(tmp_path / "model"))
    p = tmp_path / "model" / "arrays.npz"
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(StreamfitError, match="checksum"):
        load_model(str(tmp_path / "model"))


def test_wrong_width_refused():
    m, _ = _model(False)
    with pytest.raises(StreamfitError, match="31 features"):
        m.decision_function(sp.csr_matrix((2, 31)))


@pytest.mark.parametrize("sparse", [False, True])
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_non_finite_input_is_refused_naming_its_row(sparse, bad):
    """A loaded model refuses NaN or infinite input values with one line naming the first one's
    row and column: scored, they gave NaN scores, and predict then the first class, without a word."""
    m, _ = _model(False)
    X = np.random.default_rng(1).normal(size=(5, 30))
    X[3, 7] = bad
    X = sp.csr_matrix(X) if sparse else X
    for score in (m.decision_function, m.predict, lambda X: m.predict_topk(X, 2)):
        with pytest.raises(
            ScoringInputError,
            match=r"^input holds 1 NaN or infinite value\(s\), the first in row 3 \(from 0\), column 7; replace or drop them before scoring$",
        ):
            score(X)
    with pytest.raises(ValueError):  # a ValueError too, as scikit-learn raises for such input
        m.decision_function(X)


def test_pd_na_in_a_pandas_frame_is_refused_naming_its_row():
    """A loaded model given a frame of pandas' nullable Float64 dtype holding pd.NA said the input
    "is not a numeric matrix … raw records (text)"; pd.NA is now a missing value, named as NaN is."""
    import pandas as pd

    m, _ = _model(False)
    X = pd.DataFrame(np.random.default_rng(1).normal(size=(5, 30))).astype("Float64")
    np.testing.assert_array_equal(m.decision_function(X), m.decision_function(X.to_numpy(dtype=float)))
    X.iloc[3, 7] = pd.NA
    with pytest.raises(ScoringInputError, match=r"^input holds 1 NaN .* the first in row 3 \(from 0\), column 7;"):
        m.predict(X)


def test_text_input_is_refused_with_the_fix():
    """Raw text given to a loaded model is refused naming what it scores and the command that
    featurizes raw records (it was scipy's 'does not support dtype <U11')."""
    m, _ = _model(False)
    with pytest.raises(
        ScoringInputError, match=r"not a numeric matrix: the model scores numbers, n × 30 .*streamfit predict RUN FILE"
    ):
        m.predict(["a document", "another one"])
    mixed = np.array(
        [[1, 2.5] + [0] * 28, [2, 1] + [3.0] * 28], dtype=object
    )  # numbers as objects, as a frame of mixed dtypes gives
    np.testing.assert_array_equal(m.decision_function(mixed), m.decision_function(mixed.astype(float)))


@pytest.mark.parametrize(
    "n_features, classes, problem",
    [
        (31, list("abcd"), "has 31 features, the model 30"),
        (30, list("abc"), "has 3 classes, the model 4"),
        (30, list("abdc"), "its class 2 is 'd', the model's is 'c'"),
    ],
)
def test_check_store_names_what_differs(n_features, classes, problem):
    m, _ = _model(False)
    store = InMemoryStore(sp.csr_matrix((2, n_features)), np.zeros(2, dtype=np.int64), classes)
    store.path = "test.zarr"
    with pytest.raises(StreamfitError, match=f"test.zarr: {problem}; ingest it with --like TRAIN_STORE"):
        m.check_store(store)
    m.check_store(InMemoryStore(sp.csr_matrix((2, 30)), np.zeros(2, dtype=np.int64), list("abcd")))


def edit_record(model_dir, edit, reseal=True):
    """Apply `edit` to model.json (as a dict); reseal: update record_sha256 to match."""
    file = model_dir / "model.json"
    record = json.loads(file.read_text())
    edit(record)
    if reseal:
        record["record_sha256"] = json_digest(record, "record_sha256")
    file.write_text(json.dumps(record))


def replace_arrays(model_dir, edit):
    """Apply `edit` to the arrays of arrays.npz and update arrays_sha256 and record_sha256."""
    with np.load(model_dir / "arrays.npz") as z:
        arrays = {k: z[k] for k in z.files}
    edit(arrays)
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    (model_dir / "arrays.npz").write_bytes(buf.getvalue())
    edit_record(model_dir, lambda r: r.update(arrays_sha256=hashlib.sha256(buf.getvalue()).hexdigest()))


def _swap_classes(r):
    r["classes"][0], r["classes"][1] = r["classes"][1], r["classes"][0]


MODEL_EDITS = {
    "swap two classes": _swap_classes,
    "rename a class": lambda r: r["classes"].__setitem__(2, "z"),
    "raise n_features": lambda r: r.update(n_features=31),
    "change the kind": lambda r: r.update(kind="ppdsparse"),
    "drop arrays_sha256": lambda r: r.pop("arrays_sha256"),
}


@pytest.mark.parametrize("edit", sorted(MODEL_EDITS))
def test_an_edited_model_json_fails_its_digest(tmp_path, edit):
    _model(False)[0].save(str(tmp_path / "model"))
    edit_record(tmp_path / "model", MODEL_EDITS[edit], reseal=False)
    with pytest.raises(StreamfitError, match=r"model.json: fails its checksum \(record_sha256\).*retrain it"):
        load_model(str(tmp_path / "model"))


@pytest.mark.parametrize(
    "sparse, edit, problem",
    [
        (False, lambda r: r.update(n_features=31), r"arrays.npz: holds n_features \[30\], .*model.json says 31"),
        (True, lambda r: r.update(n_features=31), r"arrays.npz: holds n_features \[30\], .*model.json says 31"),
        (
            False,
            lambda r: r["classes"].pop(),
            r"arrays.npz: holds classes \['a', 'b', 'c', 'd'\], .*model.json lists others",
        ),
        (False, _swap_classes, "arrays.npz: holds classes .*model.json lists others"),
        (True, lambda r: r.update(n_features=20), r"arrays.npz: holds n_features \[30\], .*model.json says 20"),
        (False, lambda r: r.update(kind="stagewise"), "does not match"),
        (False, lambda r: r.update(kind="forest"), "unknown model kind 'forest'"),
        (False, lambda r: r.update(kind="ppdsparse"), r"does not match .*AttributeError"),  # dense coef_
        (False, lambda r: r.pop("arrays_sha256"), "arrays_sha256 is missing"),
        (False, lambda r: r.update(classes=["a", "a", "b", "c"]), "classes is .*expected a non-empty list of distinct"),
        (False, lambda r: r.update(multilabel="no"), "multilabel is 'no', expected true or false"),
        (False, lambda r: r.update(format_version=1), "model format version 1, this streamfit reads 3; retrain"),
        (False, lambda r: r.update(class_dtype="<i8"), r"does not match .*'a'.* not labels of dtype '<i8'"),
        (False, lambda r: r.update(class_dtype="<U1"), "class_dtype is '<U1', expected a numpy bool, integer or float"),
        (False, lambda r: r.update(class_dtype="int64"), "class_dtype is 'int64', expected"),  # not numpy's spelling
    ],
)
def test_a_resealed_model_json_that_contradicts_its_arrays_is_named(tmp_path, sparse, edit, problem):
    _model(sparse)[0].save(str(tmp_path / "model"))
    edit_record(tmp_path / "model", edit)
    with pytest.raises(StreamfitError, match=problem) as e:
        load_model(str(tmp_path / "model"))
    assert "model.json" in str(e.value) or "arrays.npz" in str(e.value)


def test_a_truncated_model_json_is_named(tmp_path):
    _model(False)[0].save(str(tmp_path / "model"))
    file = tmp_path / "model" / "model.json"
    file.write_bytes(file.read_bytes()[:100])
    with pytest.raises(StreamfitError, match=r"model.json: unreadable \(.*\); the model is damaged, retrain it"):
        load_model(str(tmp_path / "model"))


@pytest.mark.parametrize("bad", [np.nan, np.inf])
@pytest.mark.parametrize("name", ["coef", "intercept"])
def test_non_finite_weights_are_refused_even_with_updated_checksums(tmp_path, bad, name):
    _model(False)[0].save(str(tmp_path / "model"))
    replace_arrays(tmp_path / "model", lambda a: a[name].flat.__setitem__(1, bad))
    with pytest.raises(StreamfitError, match=f"arrays.npz: array '{name}' holds NaN or infinite values"):
        load_model(str(tmp_path / "model"))


@pytest.mark.parametrize(
    "edit, problem",
    [
        (lambda a: a.update(intercept=a["intercept"][:3]), r"intercept_ has shape \(3,\), expected \(4,\)"),
        (lambda a: a.update(coef=a["coef"].astype(object)), "unreadable"),  # allow_pickle=False refuses it
        (lambda a: a.pop("intercept"), "KeyError"),
        (lambda a: a.update(featurizer_idf=np.ones(7)), r"featurizer_idf has shape \(7,\), expected \(30,\)"),
        (
            lambda a: a.update(model_classes=np.array(list("bacd"))),
            "arrays.npz: holds classes .*'b', 'a'.*model.json lists others",
        ),
        (lambda a: a.pop("model_classes"), "arrays.npz: holds classes none"),
    ],
)
def test_arrays_that_do_not_match_model_json_are_named(tmp_path, edit, problem):
    _model(False)[0].save(str(tmp_path / "model"))
    replace_arrays(tmp_path / "model", edit)
    with pytest.raises(StreamfitError, match=problem):
        load_model(str(tmp_path / "model"))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    sparse=st.booleans(),
    key=st.sampled_from(
        ["kind", "classes", "n_features", "multilabel", "featurizer", "extra", "params", "info", "class_dtype"]
    ),
    value=st.one_of(
        st.none(),
        st.booleans(),
        st.integers(-2, 40),
        st.floats(),
        st.text(max_size=4),
        st.lists(st.text(max_size=2), max_size=5),
        st.dictionaries(st.sampled_from(["sparse", "hashing", "x"]), st.booleans(), max_size=2),
    ),
)
def test_no_model_json_edit_gives_a_traceback_or_other_scores(tmp_path_factory, sparse, key, value):
    """Any field of a resealed model.json replaced by a value of any JSON type: load_model
    refuses it with a StreamfitError, or the model scores exactly as the saved one."""
    d = tmp_path_factory.mktemp("m") / "model"
    m, _ = _model(sparse)
    m.save(str(d))
    edit_record(d, lambda r: r.update({key: value}))
    X = sp.random(5, 30, density=0.3, format="csr", random_state=4)
    try:
        loaded = load_model(str(d))
    except StreamfitError as e:
        assert "\n" not in str(e)
        return
    assert loaded.n_features == 30 and loaded.classes_.tolist() == list("abcd")
    assert np.array_equal(loaded.decision_function(X), m.decision_function(X))


def test_rows_made_otherwise_than_the_training_rows_are_refused(tmp_path):
    """evaluate, predict on a store and train --valid refuse a store of the model's width and
    classes whose rows were hashed, IDF-weighted or normalized otherwise (ingested without
    --like): it scored without a word (accuracy 0.42 instead of 1.0 with another hash seed)."""
    from click.testing import CliRunner

    from streamfit.cli import main
    from streamfit.metrics import evaluate
    from streamfit.predict import predict_to_file
    from streamfit.store import open_store
    from streamfit.train import train

    def run(*args):
        result = CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)
        assert result.exit_code == 0, result.output

    docs = [(f"w{i % 5} w{i % 3} common", f"c{i % 3}") for i in range(30)]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps({"text": t, "label": c}) + "\n" for t, c in docs))
    (tmp_path / "e.jsonl").write_text("".join(json.dumps({"text": t, "label": c}) + "\n" for t, c in docs[:12]))
    base = ["--n-features", "1024", "--classes", "c0,c1,c2"]
    run("ingest", tmp_path / "d.jsonl", "--out", tmp_path / "train.zarr", *base)
    run("train", tmp_path / "train.zarr", "--n-workers", "0", "--out", tmp_path / "run")
    run("ingest", tmp_path / "e.jsonl", "--like", tmp_path / "train.zarr", "--out", tmp_path / "like.zarr")
    others = {
        "seed": (["--hash-seed", "7"], r"hashing seed=7 \(the model's 0\)"),
        "idf": ([], "IDF weights counted on other training rows"),
        "noidf": (["--no-idf"], r"IDF weights off \(the model's on\)"),
        "value": (["--value", "count"], r"hashing value='count' \(the model's 'log1p'\)"),
    }
    model = load_model(str(tmp_path / "run"))
    assert evaluate(model, open_store(str(tmp_path / "like.zarr")), progress=False)["n_samples"] == 12
    for name, (args, problem) in others.items():
        path = str(tmp_path / f"{name}.zarr")
        run("ingest", tmp_path / "e.jsonl", "--out", path, *base, *args)
        store = open_store(path)
        assert store.n_features == model.n_features and store.classes == model.classes_.tolist()
        with pytest.raises(
            StreamfitError, match=rf"^{path}: its rows were not made as the model's .*{problem}.*--like"
        ):
            evaluate(model, store, progress=False)
        with pytest.raises(StreamfitError, match=problem):
            predict_to_file(model, path, str(tmp_path / "p.csv"))
        with pytest.raises(
            StreamfitError, match=rf"^{path}: its rows were not made as the training store's .*{problem}"
        ):
            train(str(tmp_path / "train.zarr"), "stagewise", str(tmp_path / "v"), valid=path, n_workers=0)
    assert not (tmp_path / "p.csv").exists() and not (tmp_path / "v").exists()


def test_a_class_without_training_rows_is_never_the_decision(tmp_path):
    """Class 'spare' had no training rows; its offset (5) beats the other classes' scores on
    every row, so a bare argmax would predict it everywhere. Predict, top-k, evaluate and a saved
    and loaded model rank it last instead, with its score as it is."""
    from streamfit.metrics import evaluate

    classes = ["a", "b", "spare"]
    model = LinearModel(
        np.array([[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]),
        np.array([0.0, 0.0, 5.0]),
        classes=classes,
        n_features=2,
        classes_without_rows=["spare"],
    )
    X = np.array([[1.0, 0.0], [0.0, 2.0], [0.5, 0.1]])
    S = model.decision_function(X)
    assert (S.argmax(axis=1) == 2).all()
    assert model.predict(X).tolist() == ["a", "b", "a"]
    top, scores = model.predict_topk(X, 3)
    assert top.tolist() == [[0, 1, 2], [1, 0, 2], [0, 1, 2]]
    np.testing.assert_array_equal(scores[:, 2], 5.0)
    store = InMemoryStore(sp.csr_matrix(X), np.array([0, 1, 0], np.int32), classes)
    assert evaluate(model, store)["accuracy"] == 1.0
    model.save(str(tmp_path / "m"))
    record = json.loads((tmp_path / "m" / "model.json").read_text())
    assert record["classes_without_rows"] == ["spare"]
    loaded = load_model(str(tmp_path / "m"))
    assert loaded.classes_without_rows == ["spare"]
    assert loaded.predict(X).tolist() == ["a", "b", "a"]
    # a model whose every class had rows writes no such field, and ranks by the scores alone
    model.set_classes_without_rows([])
    assert model.predict(X).tolist() == ["spare"] * 3
    model.save(str(tmp_path / "m2"))
    assert "classes_without_rows" not in json.loads((tmp_path / "m2" / "model.json").read_text())
    with pytest.raises(ValueError, match="not among the model's classes"):
        model.set_classes_without_rows(["c"])


BUCKET = "streamfit-test"  # the s3 fixture's bucket (tests/conftest.py)


def test_a_model_copied_file_by_file_is_named_as_such_with_the_way_to_copy_it(s3, tmp_path):
    """qa32: a run directory or model copied to a URL file by file (aws s3 cp --recursive,
    fsspec's put) has no COMMITTED record, and one behind a URL copied down as it lies there has
    COMMITTED and an attempt folder instead of model.json: each was refused as "no model.json here;
    point at a run directory or its model/ folder", which it was. The lines now say what was found
    and the copy that opens, as a store's do; done as said, it loads the same model."""
    m, _ = _model(True)
    m.save(str(tmp_path / "run" / "model"))
    s3.put(str(tmp_path / "run"), f"{BUCKET}/copied-run", recursive=True)
    url = f"s3://{BUCKET}/copied-run/model"
    for path in (f"s3://{BUCKET}/copied-run", url):
        with pytest.raises(StreamfitError) as refused:
            load_model(path)
        assert str(refused.value) == (
            f"{url}: holds a model's files but no COMMITTED record, as a copy file by file (aws s3 cp --recursive, "
            f"fsspec's put) leaves it: a model behind a URL is read only once committed. Copy the model's files to "
            f'{url}/attempt-copy/ instead and write {url}/COMMITTED holding {{"attempt": "attempt-copy"}}, or train '
            "with --out at the URL"
        )
    s3.put(str(tmp_path / "run" / "model"), f"{BUCKET}/copied-run/model/attempt-copy", recursive=True)
    s3.pipe_file(f"{BUCKET}/copied-run/model/COMMITTED", json.dumps({"attempt": "attempt-copy"}).encode())
    X = sp.random(20, 30, density=0.3, format="csr", random_state=4)
    np.testing.assert_array_equal(load_model(f"s3://{BUCKET}/copied-run").decision_function(X), m.decision_function(X))

    m.save(f"s3://{BUCKET}/run-to-copy/model")
    s3.invalidate_cache()
    s3.get(f"{BUCKET}/run-to-copy", str(tmp_path / "down"), recursive=True)
    model_dir = tmp_path / "down" / "model"
    (attempt,) = [name for name in os.listdir(model_dir) if name != "COMMITTED"]
    for path in (tmp_path / "down", model_dir):
        with pytest.raises(StreamfitError) as refused:
            load_model(str(path))
        assert str(refused.value) == (
            f"{model_dir}: has no model.json but a COMMITTED record naming {attempt}: a model copied from an object "
            f"store as it lies there; its files are in {model_dir / attempt}: pass that folder"
        )
    down = load_model(str(model_dir / attempt))
    np.testing.assert_array_equal(down.decision_function(X), m.decision_function(X))


def test_a_run_directory_without_a_model_yet_says_how_to_finish_it(tmp_path):
    """qa32: `predict`/`evaluate` of a run directory whose train was killed or stopped before its
    model (run.json and checkpoints, no model/) said "no model.json here; point at a run directory
    or its model/ folder", though it was one. The line now says what it is and how to finish it."""
    from click.testing import CliRunner
    from sklearn.datasets import dump_svmlight_file

    from streamfit.cli import main

    rng = np.random.default_rng(3)
    dump_svmlight_file(rng.normal(size=(60, 5)), np.arange(60) % 3, str(tmp_path / "a.svm"), zero_based=False)
    store, run_dir = tmp_path / "s.zarr", tmp_path / "run"
    assert (
        CliRunner().invoke(main, ["ingest", str(tmp_path / "a.svm"), "--no-hash", "--out", str(store)]).exit_code == 0
    )
    endless = ["-p", "max_iter=100000", "-p", "tol=0", "-p", "gap_tol=0"]  # never ends by itself
    stopped = CliRunner().invoke(
        main,
        [
            "train",
            str(store),
            "--solver",
            "fbpd",
            *endless,
            "--n-workers",
            "0",
            "--out",
            str(run_dir),
            "--time-limit",
            "1",
        ],
    )
    assert stopped.exit_code == 3 and not (run_dir / "model").exists(), stopped.output
    with pytest.raises(StreamfitError) as refused:
        load_model(str(run_dir))
    assert str(refused.value) == (
        f"{run_dir}: a run directory without a model yet (its train stopped before the end, or is still running); "
        "the same train command plus --resume finishes it"
    )
    with pytest.raises(StreamfitError, match="no model.json here; point at a run directory or its model/ folder"):
        load_model(str(tmp_path))
