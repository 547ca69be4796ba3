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
