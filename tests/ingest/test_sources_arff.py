"""ARFF reader: Mulan/Meka multilabel and Weka single-label files, sparse and dense (issue 20, item 6)."""

import os

import numpy as np
import pytest
from click.testing import CliRunner

from streamfit.cli import main
from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, open_source
from streamfit.ingest.sources.arff import ArffSource
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
    assert s.multilabel and s.classes == ["happy", "calm", "sad"] and s.n_features == 4
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
    assert not s.multilabel and s.classes == ["no", "yes"] and s.n_rows == 14
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
