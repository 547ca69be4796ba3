"""open_source (format inference, options) and BadRecordPolicy."""

import json

import pytest

from streamfit.errors import ConfigError, InputError
from streamfit.ingest.sources import FORMATS, BadRecordPolicy, infer_format, open_source
from streamfit.ingest.sources.delimited import CsvSource, TsvSource
from streamfit.ingest.sources.folder import FolderSource
from streamfit.ingest.sources.jsonl import JsonlSource
from streamfit.ingest.sources.libsvm import LibsvmSource


@pytest.mark.parametrize(
    "name, fmt",
    [
        ("a.svm", "libsvm"),
        ("a.libsvm.gz", "libsvm"),
        ("A.SVMLIGHT.BZ2", "libsvm"),
        ("a.svm.xz", "libsvm"),
        ("a.jsonl", "jsonl"),
        ("a.ndjson.gz", "jsonl"),
        ("a.csv", "csv"),
        ("a.tsv.gz", "tsv"),
        ("a.parquet", "parquet"),
        ("a.h5", "hdf5"),
        ("a.hdf5", "hdf5"),
        ("a.npy", "numpy"),
        ("a.npz", "numpy"),
        ("20news.tar.gz", "folder"),
        ("20news.tgz", "folder"),
        ("a.tar", "folder"),
        ("a.txt", None),
        ("a.parquet.gz", None),
        ("a", None),
    ],
)
def test_infer_format(name, fmt):
    assert infer_format(name) == fmt


def test_infer_format_directory(tmp_path):
    assert infer_format(str(tmp_path)) == "folder"


def test_open_source_picks_the_reader(tmp_path):
    paths = {"a.svm": LibsvmSource, "a.jsonl": JsonlSource, "a.csv": CsvSource, "a.tsv": TsvSource}
    for name, cls in paths.items():
        (tmp_path / name).write_text("")
        assert type(open_source(str(tmp_path / name), policy=BadRecordPolicy())) is cls
    assert type(open_source(tmp_path, policy=BadRecordPolicy())) is FolderSource


def test_explicit_format_overrides_the_name(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("1 1:0.5\n")
    source = open_source(str(path), "libsvm", policy=BadRecordPolicy())
    assert [b.labels for b in source] == [["1"]]


def test_unknown_extension_lists_the_formats(tmp_path):
    path = tmp_path / "train.txt"
    path.write_text("")
    with pytest.raises(InputError) as e:
        open_source(str(path), policy=BadRecordPolicy())
    assert str(path) in str(e.value) and "--format" in str(e.value)
    assert all(name in str(e.value) for name in FORMATS)


def test_unknown_format_name(tmp_path):
    path = tmp_path / "a.svm"
    path.write_text("")
    with pytest.raises(InputError, match="unknown format 'svm'.*libsvm"):
        open_source(str(path), "svm", policy=BadRecordPolicy())


def test_missing_file(tmp_path):
    path = str(tmp_path / "nope.svm")
    with pytest.raises(InputError, match="nope.svm: no such file"):
        open_source(path, policy=BadRecordPolicy())


def test_unknown_option_is_refused(tmp_path):
    path = tmp_path / "a.svm"
    path.write_text("")
    with pytest.raises(ConfigError, match="zero_base"):
        open_source(str(path), policy=BadRecordPolicy(), zero_base=True)


def test_options_of_other_formats_are_ignored(tmp_path):
    path = tmp_path / "a.svm"
    path.write_text("1 1:2\n")
    source = open_source(str(path), policy=BadRecordPolicy(), text_field="body", x_dataset="X", zero_based=True)
    assert source.zero_based is True


def test_bad_batch_size(tmp_path):
    path = tmp_path / "a.svm"
    path.write_text("")
    with pytest.raises(ValueError, match="batch_size"):
        open_source(str(path), policy=BadRecordPolicy(), batch_size=0)


def test_policy_modes(tmp_path):
    with pytest.raises(ValueError, match="mode"):
        BadRecordPolicy("ignore")
    with pytest.raises(ValueError, match="quarantine_path"):
        BadRecordPolicy("quarantine")
    with pytest.raises(ValueError, match="quarantine_path"):
        BadRecordPolicy("skip", str(tmp_path / "q"))


def test_policy_error_mode_raises():
    with pytest.raises(InputError) as e:
        BadRecordPolicy().bad("f.svm:3", "bad value", b"raw", "fix it")
    assert str(e.value) == "f.svm:3: bad value (fix it)"
    assert (e.value.location, e.value.problem, e.value.hint) == ("f.svm:3", "bad value", "fix it")


def test_policy_skip_counts():
    policy = BadRecordPolicy("skip")
    policy.bad("a:1", "x")
    policy.bad("a:2", "y")
    assert policy.n_skipped == 2


def test_policy_quarantine_appends_json_lines(tmp_path):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"location": "old"}) + "\n")
    with BadRecordPolicy("quarantine", str(path)) as policy:
        policy.bad("a:1", "bad value", b"1 2:\xff", "hint")
        policy.bad("a:2", "other", "text")
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [entry["location"] for entry in lines] == ["old", "a:1", "a:2"]
    assert lines[1] == {"location": "a:1", "problem": "bad value", "hint": "hint", "raw": "1 2:\\xff"}
    assert policy.n_skipped == 2


def test_policy_quarantine_file_only_on_a_bad_record(tmp_path):
    path = tmp_path / "q.jsonl"
    BadRecordPolicy("quarantine", str(path)).close()
    assert not path.exists()


def test_content_decides_when_the_name_does_not(tmp_path):
    """LIBSVM's own data sets are named dna.scale.gz, letter.scale.t and so on."""
    import gzip

    with gzip.open(tmp_path / "dna.scale.gz", "wt") as f:
        f.write("# comment\n3 1:1 7:0.5\n1 2:1\n2,4 qid:3 5:1e-3\n 9:1\n")
    (tmp_path / "train.t").write_text('{"text": "a b", "label": "x"}\n')
    (tmp_path / "table.txt").write_text("label,text\nx,a b\n")
    assert type(open_source(str(tmp_path / "dna.scale.gz"), policy=BadRecordPolicy())) is LibsvmSource
    assert type(open_source(str(tmp_path / "train.t"), policy=BadRecordPolicy())) is JsonlSource
    with pytest.raises(InputError, match="table.txt: cannot tell the format .* first lines.*--format"):
        open_source(str(tmp_path / "table.txt"), policy=BadRecordPolicy())
