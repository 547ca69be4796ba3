"""ARFF reader: Mulan/Meka multilabel and Weka single-label files, sparse and dense (issue 20, item 6)."""

import os
import re

import numpy as np
import pytest
from click.testing import CliRunner

from streamfit.cli import main
from streamfit.errors import ConfigError, InputError
from streamfit.ingest.sources import BadRecordPolicy, open_source
from streamfit.ingest.sources.arff import ArffSource, header_record
from streamfit.store import open_store

# tests/data/sources/emotions-mini.arff, written out by hand: features f0, 'f 1', f2, f3
X_MINI = np.array([[0.5, 0, 1, 0], [0, -2, 0, 0], [0, 0, 0, 0], [0, 0, 0, 7]])
LABELS_MINI = [["happy", "calm"], ["sad"], [], ["happy", "sad", "calm"]]


def dense(batches):
    return np.vstack([b.X.toarray() for b in batches])


@pytest.mark.parametrize("how", [{"n_labels": 3}, {"labels_xml": "emotions-mini.xml"}])
def test_sparse_multilabel(read, data_dir, how):
    how = {k: os.path.join(data_dir, v) if k == "labels_xml" else v for k, v in how.items()}
    path = os.path.join(data_dir, "emotions-mini.arff")
    source = open_source(path, policy=BadRecordPolicy(), batch_size=3, **how)
    assert isinstance(source, ArffSource)  # from the name
    batches = read.batches(source, 3)
    np.testing.assert_array_equal(dense(batches), X_MINI)
    assert read.labels(batches) == LABELS_MINI and source.multilabel is True
    assert read.locations(batches) == [f"{path}:{n}" for n in (13, 14, 16, 17)]


def test_dense_meka_header_and_first_labels(read, tmp_path):
    """Meka's `-C 2` in the relation name: the first two attributes are the labels."""
    path = tmp_path / "meka.arff"
    path.write_text(
        "@relation 'scene: -C 2'\n@attribute a {0,1}\n@attribute b {0,1}\n@attribute x numeric\n"
        "@data\n1,0,0.25\n0,0,3\n"
    )
    batches = read.batches(open_source(str(path), policy=BadRecordPolicy()))
    np.testing.assert_array_equal(dense(batches), [[0.25], [3]])
    assert read.labels(batches) == [["a"], []]


def test_weka_class_attribute_and_bad_records(read, data_dir):
    policy = BadRecordPolicy("skip")
    path = os.path.join(data_dir, "weather-mini.arff")
    batches = read.batches(open_source(path, policy=policy, class_attribute="play"))
    np.testing.assert_array_equal(dense(batches), [[85, 85], [70, 96]])
    assert read.labels(batches) == ["no", "yes"]
    assert policy.n_skipped == 2  # a missing value (?), a class not declared
    with pytest.raises(InputError, match=r"weather-mini.arff:8: attribute 'humidity': a missing value \(\?\)"):
        list(open_source(path, policy=BadRecordPolicy(), class_attribute="play"))


def test_the_labels_must_be_named(data_dir):
    with pytest.raises(InputError, match="does not say which attributes are the labels.*n_labels=L"):
        list(open_source(os.path.join(data_dir, "emotions-mini.arff"), policy=BadRecordPolicy()))


def test_a_non_numeric_feature_is_refused_at_its_attribute(tmp_path):
    path = tmp_path / "s.arff"
    path.write_text("@relation r\n@attribute name string\n@attribute y {0,1}\n@data\n'x',1\n")
    with pytest.raises(InputError, match=r"s.arff:2: feature attribute 'name' is not numeric"):
        list(open_source(str(path), policy=BadRecordPolicy(), n_labels=1))


def test_cli_ingest_arff_and_like(data_dir, tmp_path):
    """A training store from the ARFF and the same file ingested --like it (the label attributes
    recorded with the store, left out of the features)."""
    path = os.path.join(data_dir, "emotions-mini.arff")
    runner = CliRunner()
    train, test = str(tmp_path / "train.zarr"), str(tmp_path / "test.zarr")
    r = runner.invoke(main, ["ingest", path, "--no-hash", "--option", "n_labels=3", "--out", train, "-q"])
    assert r.exit_code == 0, r.output
    s = open_store(train)
    assert s.multilabel and s.classes == ["happy", "sad", "calm"] and s.n_features == 4
    r = runner.invoke(main, ["ingest", path, "--like", train, "--out", test, "-q"])
    assert r.exit_code == 0, r.output
    assert open_store(test).n_rows == 4


def _weather_expected(path):
    """weather-nominal.arff's features one-hot by hand from scipy's ARFF reader (a peer's parse):
    outlook's three values, temperature, humidity, windy's two values; the class play."""
    from scipy.io import arff

    data, meta = arff.loadarff(path)
    columns = []
    for name in ("outlook", "temperature", "humidity", "windy"):
        kind, values = meta[name]
        if kind == "nominal":
            cells = np.array([v.decode() for v in data[name]])
            columns += [(cells == v).astype(float) for v in values]  # '?' matches none: all 0
        else:
            columns.append(data[name].astype(float))
    return np.column_stack(columns), [v.decode() for v in data["play"]]


@pytest.mark.parametrize("how", [{"class_attribute": "play"}, {"n_labels": 1}])
def test_nominal_features_are_one_hot_beside_numeric_ones(read, data_dir, how):
    """Weka's weather set: `outlook {sunny, overcast, rainy}` and `windy {TRUE, FALSE}` among
    numeric features are one column per declared value; a missing `?` is all 0. With n_labels=1
    the nominal {yes, no} last attribute is the class (a Mulan label would be 0/1)."""
    path = os.path.join(data_dir, "weather-nominal.arff")
    X, y = _weather_expected(path)
    source = open_source(path, policy=BadRecordPolicy(), **how)
    batches = read.batches(source)
    np.testing.assert_array_equal(dense(batches), X)
    assert X.shape == (14, 7) and X[12, :3].tolist() == [0, 0, 0]  # the '?' outlook
    assert read.labels(batches) == y and source.multilabel is False


def test_nominal_features_in_sparse_instances(read, data_dir, tmp_path):
    """The same rows as sparse instances, where Weka omits a nominal attribute at its first value
    (and a zero number): the omitted one-hot attribute turns on its first value's column; a quoted
    value with a space; a value not declared is a bad record naming it."""
    path = os.path.join(data_dir, "weather-nominal.arff")
    X, y = _weather_expected(path)
    header, body = open(path).read().split("@data\n")
    header = header.replace("rainy}", "'light rain'}")
    lines = []
    for cells in (line.split(",") for line in body.split()):
        cells = ["'light rain'" if c == "rainy" else c for c in cells]
        first = {0: "sunny", 3: "TRUE", 4: "yes"}
        lines.append("{" + ",".join(f"{i} {c}" for i, c in enumerate(cells) if first.get(i) != c) + "}")
    sparse_path = tmp_path / "weather-sparse.arff"
    sparse_path.write_text(header + "@data\n" + "\n".join(lines) + "\n{0 snowy,4 no}\n")
    policy = BadRecordPolicy("skip")
    batches = read.batches(open_source(str(sparse_path), policy=policy, class_attribute="play"))
    np.testing.assert_array_equal(dense(batches), X)
    assert read.labels(batches) == y and policy.n_skipped == 1
    with pytest.raises(InputError, match=r"weather-sparse.arff:24: attribute 'outlook': the value 'snowy' is not one"):
        list(open_source(str(sparse_path), policy=BadRecordPolicy(), class_attribute="play"))


def test_n_labels_with_a_nominal_class(read, tmp_path):
    """n_labels=1 on a nominal class {a, b} (dense or sparse) reads it as the class, as
    class_attribute does; n_labels=2 over such an attribute says to pass class_attribute."""
    text = "@relation r\n@attribute x numeric\n@attribute c {a,b}\n@data\n"
    for name, rows in (("dense", "1,a\n2,b\n"), ("sparse", "{0 1}\n{0 2,1 b}\n")):
        path = tmp_path / f"{name}.arff"
        path.write_text(text + rows)
        source = open_source(str(path), policy=BadRecordPolicy(), n_labels=1)
        batches = read.batches(source)
        assert read.labels(batches) == ["a", "b"] and source.multilabel is False
        np.testing.assert_array_equal(dense(batches), [[1], [2]])
    path = tmp_path / "two.arff"
    path.write_text("@relation r\n@attribute x numeric\n@attribute l {0,1}\n@attribute c {a,b}\n@data\n1,0,a\n")
    with pytest.raises(
        InputError, match=r"two.arff:4: label attribute 'c' has the values \{a,b\}, not 0 and 1.*class_attribute=c"
    ):
        list(open_source(str(path), policy=BadRecordPolicy(), n_labels=2))


@pytest.mark.parametrize("hashed", [False, True])
def test_cli_nominal_arff_to_predictions(data_dir, tmp_path, hashed):
    """ingest (hashed or --no-hash) → train → evaluate → predict on the raw ARFF with nominal
    features: the one-hot width kept without hashing, predict's labels those evaluate scored."""
    path = os.path.join(data_dir, "weather-nominal.arff")
    runner = CliRunner()
    store, run, pred = str(tmp_path / "w.zarr"), str(tmp_path / "run"), str(tmp_path / "p.csv")
    args = ["ingest", path, "--option", "n_labels=1", "--out", store, "-q"] + ([] if hashed else ["--no-hash"])
    r = runner.invoke(main, args)
    assert r.exit_code == 0, r.output
    s = open_store(store)
    assert not s.multilabel and s.classes == ["yes", "no"] and s.n_rows == 14
    assert s.n_features == (262144 if hashed else 7)
    X, _ = s.to_scipy()
    assert X.nnz == 14 * 4 - 1  # outlook, temperature, humidity, windy; one outlook is ?
    r = runner.invoke(main, ["train", store, "--solver", "ppdsparse", "--n-workers", "0", "--out", run, "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["evaluate", run, store])
    assert r.exit_code == 0 and "accuracy=" in r.output, r.output
    r = runner.invoke(main, ["predict", run, path, "--out", pred, "-q"])
    assert r.exit_code == 0, r.output
    assert len(open(pred).read().splitlines()) == 15


# Issue 20's train/test headers: a training file and the same four instances under headers that
# declare the feature attributes (and colour's values) in another order, dense and sparse.
TRAIN_ARFF = (
    "@relation r\n@attribute x numeric\n@attribute colour {red,green,blue}\n@attribute y numeric\n"
    "@attribute play {yes,no}\n@data\n1,red,2,yes\n2,green,0,no\n0,blue,5,yes\n3,?,1,no\n"
)
REORDERED_ARFF = {
    "dense": (
        "@relation r\n@attribute y numeric\n@attribute colour {blue,red,green}\n@attribute x numeric\n"
        "@attribute play {yes,no}\n@data\n2,red,1,yes\n0,green,2,no\n5,blue,0,yes\n1,?,3,no\n"
    ),
    # a sparse instance omits colour at its first value *here* (blue) and zeros
    "sparse": (
        "@relation r\n@attribute y numeric\n@attribute colour {blue,red,green}\n@attribute x numeric\n"
        "@attribute play {yes,no}\n@data\n{0 2,1 red,2 1}\n{1 green,2 2,3 no}\n{0 5}\n{0 1,1 ?,2 3,3 no}\n"
    ),
}
# X of TRAIN_ARFF by hand: x, colour=red, colour=green, colour=blue, y
X_TRAIN = [[1, 1, 0, 0, 2], [2, 0, 1, 0, 0], [0, 0, 0, 1, 5], [3, 0, 0, 0, 1]]


def _ingest(runner, *args):
    r = runner.invoke(main, ["ingest", *args, "-q"])
    assert r.exit_code == 0, r.output
    return open_store(args[args.index("--out") + 1])


def test_the_store_records_the_feature_header(tmp_path, data_dir):
    """The manifest records the feature attributes in order, a one-hot one with its values as
    scipy's ARFF reader (a peer) lists them, numeric ones as None; the class is left out."""
    from scipy.io import arff

    path = os.path.join(data_dir, "weather-nominal.arff")
    store = _ingest(CliRunner(), path, "--option", "n_labels=1", "--no-hash", "--out", str(tmp_path / "w.zarr"))
    recorded = store.featurizer_dict()["source_options"]["arff_header"]
    _, meta = arff.loadarff(path)
    expected = [
        [name, list(meta[name][1]) if meta[name][0] == "nominal" else None] for name in meta.names() if name != "play"
    ]
    assert recorded["features"] == expected
    assert recorded["sha256"] == header_record(expected)["sha256"] != header_record(expected[::-1])["sha256"]


@pytest.mark.parametrize("kind", ["dense", "sparse"])
@pytest.mark.parametrize("hashed", [False, True])
def test_a_reordered_header_is_read_into_the_training_columns(tmp_path, kind, hashed):
    """A test file declaring the training file's attributes and values in another order, ingested
    --like: the training file's rows (dense: the same store, chunk for chunk by sha256); its raw rows
    scored by `predict` as the training file's are; read against the recorded header by the
    source itself, the training file's X."""
    train_path, test_path = tmp_path / "train.arff", tmp_path / f"test-{kind}.arff"
    train_path.write_text(TRAIN_ARFF)
    test_path.write_text(REORDERED_ARFF[kind])
    runner = CliRunner()
    no_hash = [] if hashed else ["--no-hash"]
    train = _ingest(runner, str(train_path), "--option", "n_labels=1", *no_hash, "--out", str(tmp_path / "tr.zarr"))
    test = _ingest(runner, str(test_path), "--like", train.path, "--out", str(tmp_path / "te.zarr"))
    assert test.classes == train.classes
    if kind == "dense":  # a dense instance's zeros are stored, a sparse one's are not: chunks differ
        assert test.manifest.chunks == train.manifest.chunks
    np.testing.assert_array_equal(test.to_scipy()[0].toarray(), train.to_scipy()[0].toarray())
    if not hashed:
        np.testing.assert_array_equal(train.to_scipy()[0].toarray(), X_TRAIN)
    header = train.featurizer_dict()["source_options"]["arff_header"]
    source = open_source(str(test_path), policy=BadRecordPolicy(), n_labels=1, arff_header=header)
    np.testing.assert_array_equal(dense(list(source)), X_TRAIN)
    # read without the record (a store from before): its own header's columns, as before
    own = dense(list(open_source(str(test_path), policy=BadRecordPolicy(), n_labels=1)))
    np.testing.assert_array_equal(own, np.array(X_TRAIN)[:, [4, 3, 1, 2, 0]])
    run = str(tmp_path / "run")
    r = runner.invoke(main, ["train", train.path, "--solver", "ppdsparse", "--n-workers", "0", "--out", run, "-q"])
    assert r.exit_code == 0, r.output
    scored = []
    for path in (train_path, test_path):
        out = str(tmp_path / f"{path.stem}.csv")
        r = runner.invoke(main, ["predict", run, str(path), "--out", out, "-q"])
        assert r.exit_code == 0, r.output
        scored.append([line.split(",", 1)[1] for line in open(out).read().splitlines()[1:]])
    assert scored[0] == scored[1] and len(scored[0]) == 4


@pytest.mark.parametrize(
    "change, problem",
    [
        ("@attribute y numeric\n", r"test.arff: the training file's feature attribute 'y' is missing"),
        ("@attribute z numeric\n", r"test.arff:4: feature attribute 'z' is not in the training file's header"),
        (
            "@attribute y {a,b}\n",
            r"test.arff:4: feature attribute 'y' is nominal \{a,b\}, in the training file's header numeric",
        ),
        (
            "@attribute y {red,green,blue}\n",
            r"test.arff:4: feature attribute 'y' is nominal \{red,green,blue\}, in the training file's header numeric",
        ),
    ],
)
def test_a_different_header_is_refused(tmp_path, change, problem):
    """A missing, extra or otherwise declared feature attribute: ingest --like and predict refuse
    the file in one line naming it, the attribute and the fix."""
    lines = TRAIN_ARFF.splitlines(keepends=True)
    (tmp_path / "train.arff").write_text(TRAIN_ARFF)
    rows = {"@attribute y numeric\n": "x,c,p", "@attribute z numeric\n": "x,c,1,p", "@attribute y {a,b}\n": "x,c,a,p"}
    values = rows.get(change, "x,c,red,p").replace("x", "1").replace("c", "red").replace("p", "yes")
    header = lines[:3] + ([] if change == "@attribute y numeric\n" else [change]) + lines[4:6]
    test_path = tmp_path / "test.arff"
    test_path.write_text("".join(header) + values + "\n")
    runner = CliRunner()
    train = _ingest(runner, str(tmp_path / "train.arff"), "--option", "n_labels=1", "--out", str(tmp_path / "tr"))
    fix = r"give this file the training file's feature @attribute lines"
    r = runner.invoke(main, ["ingest", str(test_path), "--like", train.path, "--out", str(tmp_path / "te"), "-q"])
    assert r.exit_code != 0 and re.search(problem + r".*" + fix, r.output), r.output
    run = str(tmp_path / "run")
    r = runner.invoke(main, ["train", train.path, "--solver", "ppdsparse", "--n-workers", "0", "--out", run, "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["predict", run, str(test_path), "--out", str(tmp_path / "p.csv"), "-q"])
    assert r.exit_code != 0 and re.search(problem, r.output), r.output


def test_a_value_set_that_differs_is_refused_and_a_store_of_another_header_is_not_scored(tmp_path):
    """colour declaring another value: refused at its line by the source; a store ingested on its
    own from a reordered header (its own columns) is refused by evaluate, which names the header."""
    (tmp_path / "train.arff").write_text(TRAIN_ARFF)
    other = tmp_path / "other.arff"
    other.write_text(TRAIN_ARFF.replace("{red,green,blue}", "{red,green,blue,black}"))
    runner = CliRunner()
    train = _ingest(runner, str(tmp_path / "train.arff"), "--option", "n_labels=1", "--out", str(tmp_path / "tr"))
    header = train.featurizer_dict()["source_options"]["arff_header"]
    with pytest.raises(
        InputError, match=r"other.arff:3: feature attribute 'colour' is nominal \{red,green,blue,black\}"
    ):
        list(open_source(str(other), policy=BadRecordPolicy(), n_labels=1, arff_header=header))
    forged = {**header, "features": header["features"][::-1]}  # its digest no longer matches
    with pytest.raises(ConfigError, match="format option arff_header: not a feature header"):
        open_source(str(other), policy=BadRecordPolicy(), n_labels=1, arff_header=forged)
    (tmp_path / "re.arff").write_text(REORDERED_ARFF["dense"])
    alone = _ingest(runner, str(tmp_path / "re.arff"), "--option", "n_labels=1", "--out", str(tmp_path / "re"))
    run = str(tmp_path / "run")
    r = runner.invoke(main, ["train", train.path, "--solver", "ppdsparse", "--n-workers", "0", "--out", run, "-q"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["evaluate", run, alone.path])
    assert r.exit_code != 0 and "ARFF feature attributes or nominal values declared otherwise" in r.output, r.output


def test_several_training_files_are_read_against_the_first_header(tmp_path):
    """Two ARFF inputs of one ingest, the second's header reordered: its rows in the first's columns."""
    (tmp_path / "a.arff").write_text(TRAIN_ARFF)
    (tmp_path / "b.arff").write_text(REORDERED_ARFF["sparse"])
    out = str(tmp_path / "ab")
    store = _ingest(
        CliRunner(),
        str(tmp_path / "a.arff"),
        str(tmp_path / "b.arff"),
        "--option",
        "n_labels=1",
        "--no-hash",
        "--out",
        out,
    )
    np.testing.assert_array_equal(store.to_scipy()[0].toarray(), X_TRAIN + X_TRAIN)


# Issue 20, item 6: the header declares the classes. A Mulan-style file whose label attributes
# are a, b, c in the header, on first as c then a in the rows, and b never on; its test file has
# b on too. And a Weka file whose class {yes,no,maybe} is first no, and never maybe.
def _multilabel_arff(path, n=80, seed=0, with_b=False):
    """Rows x, y in [0, 1): a on for x > 0.5, c for y > 0.5 (c on in the first row, a in the
    second), b (with_b) for x + y > 1.5; written dense, as `x,y,a,b,c`."""
    rng = np.random.default_rng(seed)
    xy = np.vstack([[0.1, 0.9], [0.9, 0.1], rng.random((n - 2, 2))])
    rows = [f"{x:.4f},{y:.4f},{int(x > 0.5)},{int(with_b and x + y > 1.5)},{int(y > 0.5)}" for x, y in xy]
    path.write_text(
        "@relation r\n@attribute x numeric\n@attribute y numeric\n@attribute a {0,1}\n@attribute b {0,1}\n"
        "@attribute c {0,1}\n@data\n" + "\n".join(rows) + "\n"
    )
    return str(path)


def _weka_arff(path, n=60, seed=0):
    """A class play {yes,no,maybe}: no for x < 0.5 (the first row), else yes; never maybe."""
    rng = np.random.default_rng(seed)
    x = np.concatenate([[0.2], rng.random(n - 1)])
    rows = [f"{v:.4f},{1 - v:.4f},{'yes' if v >= 0.5 else 'no'}" for v in x]
    path.write_text(
        "@relation r\n@attribute x numeric\n@attribute y numeric\n@attribute play {yes,no,maybe}\n@data\n"
        + "\n".join(rows)
        + "\n"
    )
    return str(path)


def test_the_header_declares_the_classes_in_its_order(tmp_path):
    """The classes are the header's label attributes (multilabel) or its class's declared values
    (single-label), in header order, whether on in a row or not (first-seen order would be c, a
    and no, yes); --classes still decides when given; the ARFF reader itself says the same."""
    runner = CliRunner()
    ml, weka = _multilabel_arff(tmp_path / "ml.arff"), _weka_arff(tmp_path / "weka.arff")
    s = _ingest(runner, ml, "--no-hash", "--option", "n_labels=3", "--out", str(tmp_path / "ml.zarr"))
    assert s.classes == ["a", "b", "c"] and s.multilabel
    Y = s.to_scipy()[1].toarray()
    assert Y[:, 1].sum() == 0 and Y[0].tolist() == [0, 0, 1] and Y[1].tolist() == [1, 0, 0]
    s = _ingest(runner, weka, "--no-hash", "--option", "class_attribute=play", "--out", str(tmp_path / "w.zarr"))
    assert s.classes == ["yes", "no", "maybe"] and not s.multilabel
    s = _ingest(runner, weka, "--option", "n_labels=1", "--classes", "no,yes", "--out", str(tmp_path / "w2.zarr"))
    assert s.classes == ["no", "yes"]
    assert ArffSource(ml, policy=BadRecordPolicy(), n_labels=3).declared()[1] == ["a", "b", "c"]


def test_one_class_with_rows_beside_declared_ones_is_a_warning(tmp_path, caplog):
    """A Weka class {yes,no,maybe} whose rows are all yes: the store has the three declared classes,
    and ingest warns that only yes has rows (before, it had the one class yes and the warning
    that `streamfit train` refuses it); no warning when two classes have rows."""
    path = tmp_path / "yes.arff"
    path.write_text("@relation r\n@attribute x numeric\n@attribute play {yes,no,maybe}\n@data\n1,yes\n2,yes\n3,yes\n")
    s = _ingest(CliRunner(), str(path), "--option", "n_labels=1", "--out", str(tmp_path / "y.zarr"))
    assert s.classes == ["yes", "no", "maybe"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"{tmp_path / 'y.zarr'}: only one class has rows: yes (the ARFF header declares 2 more: no, maybe); a "
        "classifier needs rows of two or more: check the labels"
    ]
    caplog.clear()
    _ingest(CliRunner(), _weka_arff(tmp_path / "weka.arff"), "--option", "n_labels=1", "--out", str(tmp_path / "w"))
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def _cli(runner, *args):
    r = runner.invoke(main, list(args))
    assert r.exit_code == 0, r.output
    return r.output


def test_a_label_never_on_in_training_is_a_label_of_the_model(tmp_path):
    """The multilabel store with b never on: stagewise, bcd and ppdsparse train it (finite scores,
    b scored below the decision threshold: predict never outputs it); a test file with b on is
    ingested --like it, and evaluate --per-label lists b with its support and recall 0. The
    single-label store with maybe declared and no row of it: stagewise, bcd, ppdsparse and
    multiboost train it with finite scores; fbpd refuses it in one line naming the class."""
    import json

    from streamfit.model import load_model

    runner = CliRunner()
    train = _ingest(
        runner,
        _multilabel_arff(tmp_path / "ml.arff"),
        "--no-hash",
        "--option",
        "n_labels=3",
        "--out",
        str(tmp_path / "ml.zarr"),
    )
    test_arff = _multilabel_arff(tmp_path / "ml-test.arff", n=60, seed=1, with_b=True)
    test = _ingest(runner, test_arff, "--like", train.path, "--out", str(tmp_path / "ml-test.zarr"))
    assert test.classes == ["a", "b", "c"]
    n_b = int(test.to_scipy()[1].toarray()[:, 1].sum())
    assert n_b > 0
    X_test = test.to_scipy()[0]
    for solver in ("stagewise", "bcd", "ppdsparse"):
        run = str(tmp_path / f"run-{solver}")
        _cli(runner, "train", train.path, "--solver", solver, "--n-workers", "0", "--out", run, "-q")
        model = load_model(run)
        assert model.class_names.tolist() == ["a", "b", "c"]
        assert np.isfinite(model.decision_function(X_test)).all()
        table = json.loads(_cli(runner, "evaluate", run, test.path, "--per-label", "--json"))["per_label"]
        assert list(table) == ["a", "b", "c"], solver
        assert table["b"]["support"] == n_b and table["b"]["recall"] == 0.0, (solver, table["b"])
        assert table["a"]["f1"] > 0.8 and table["c"]["f1"] > 0.8, (solver, table)
        out = str(tmp_path / f"{solver}.jsonl")
        _cli(runner, "predict", run, test_arff, "--out", out, "-q")
        predicted = [json.loads(line)["predicted"] for line in open(out)]
        assert len(predicted) == 60 and not any("b" in labels for labels in predicted), solver

    weka = _ingest(
        runner,
        _weka_arff(tmp_path / "weka.arff"),
        "--no-hash",
        "--option",
        "n_labels=1",
        "--out",
        str(tmp_path / "w.zarr"),
    )
    X = weka.to_scipy()[0]
    for solver in ("stagewise", "bcd", "ppdsparse", "multiboost"):
        run = str(tmp_path / f"weka-{solver}")
        _cli(runner, "train", weka.path, "--solver", solver, "--n-workers", "0", "--out", run, "-q")
        model = load_model(run)
        assert model.class_names.tolist() == ["yes", "no", "maybe"]
        assert np.isfinite(model.decision_function(X)).all(), solver
    r = runner.invoke(
        main, ["train", weka.path, "--solver", "fbpd", "--n-workers", "0", "--out", str(tmp_path / "f"), "-q"]
    )
    assert r.exit_code == 2 and len(r.output.strip().splitlines()) == 1, r.output
    assert "fbpd: class(es) 'maybe' have no training rows (declared by ingest --classes or an ARFF header?)" in r.output
    assert not os.path.exists(tmp_path / "f")


def test_a_store_of_first_seen_classes_keeps_them(tmp_path, monkeypatch):
    """A store ingested before the header declared the classes (first-seen order c, a; emulated by
    a header that declares none) keeps its recorded classes: inspect shows them, a test file is
    ingested --like it into them (one with b on is refused, naming b), and `run --resume` keeps
    it (its recorded settings are the section's: the classes were not given either way)."""
    from streamfit.config import load_pipeline
    from streamfit.jobs import run_pipeline

    _multilabel_arff(tmp_path / "ml.arff")
    (tmp_path / "p.yaml").write_text(
        "ingest: {inputs: [ml.arff], out: old.zarr, no_hash: true, source_options: {n_labels: 3}}\n"
        "train: {solver: bcd, out: run, n_workers: 0, params: {max_iter: 3}}\n"
    )
    declared = ArffSource.declared
    with monkeypatch.context() as m:
        m.setattr(ArffSource, "declared", lambda self: (declared(self)[0], []))
        run_pipeline(load_pipeline(str(tmp_path / "p.yaml")), progress=False, say=lambda _: None)
    old = str(tmp_path / "old.zarr")
    manifest = (tmp_path / "old.zarr" / "manifest.json").read_bytes()
    assert open_store(old).classes == ["c", "a"]
    runner = CliRunner()
    assert "classes: ['c', 'a']" in _cli(runner, "inspect", old)
    again = run_pipeline(load_pipeline(str(tmp_path / "p.yaml")), resume=True, progress=False, say=lambda _: None)
    assert again.ingest is None and (tmp_path / "old.zarr" / "manifest.json").read_bytes() == manifest
    test = _ingest(runner, _multilabel_arff(tmp_path / "t.arff", seed=2), "--like", old, "--out", str(tmp_path / "t"))
    assert test.classes == ["c", "a"]
    with_b = _multilabel_arff(tmp_path / "tb.arff", seed=1, with_b=True)
    r = runner.invoke(main, ["ingest", with_b, "--like", old, "--out", str(tmp_path / "tb.zarr"), "-q"])
    assert r.exit_code == 2 and "label(s) 'b' not among the 2 classes of the training store" in r.output, r.output
