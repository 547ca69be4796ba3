"""LIBSVM/SVMlight reader: round trips against scikit-learn, bad records, compression."""

import bz2
import gzip
import lzma
import os
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import load_svmlight_file

from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, SparseBatch, libsvm, open_source


def write(tmp_path, text, name="data.svm"):
    path = tmp_path / name
    path.write_bytes(text.encode() if isinstance(text, str) else text)
    return str(path)


def read_file(read, path, batch_size=8192, mode="error", **options):
    policy = BadRecordPolicy(mode)
    source = open_source(path, policy=policy, batch_size=batch_size, **options)
    batches = read.batches(source, batch_size)
    assert all(isinstance(b, SparseBatch) for b in batches)
    return source, policy, batches


def assert_same_as_sklearn(read, batches, path, multilabel=False, zero_based=False):
    X_ref, y_ref = load_svmlight_file(path, zero_based=zero_based, multilabel=multilabel)
    X = read.sparse(batches)
    if X.nnz:
        assert X.shape == X_ref.shape
    X = read.sparse(batches, X_ref.shape[1])
    assert X.shape == X_ref.shape
    assert (X != X_ref).nnz == 0
    assert np.array_equal(X.indices, X_ref.indices) and np.array_equal(X.indptr, X_ref.indptr)
    labels = read.labels(batches)
    if multilabel:
        assert [sorted(float(v) for v in label) for label in labels] == [sorted(t) for t in y_ref]
    else:
        assert np.array_equal(np.array(labels, dtype=float), y_ref)


# ---------------------------------------------------------------- good files


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_iris_round_trip(read, data_dir, batch_size):
    path = os.path.join(data_dir, "iris.svm")
    source, _, batches = read_file(read, path, batch_size)
    assert_same_as_sklearn(read, batches, path)
    assert source.n_read == 50 and source.multilabel is False
    assert set(read.labels(batches)) == {"1", "2", "3"}
    assert read.locations(batches)[:2] == [f"{path}:5", f"{path}:6"]


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_multilabel_round_trip(read, data_dir, batch_size):
    path = os.path.join(data_dir, "multilabel.svm")
    source, _, batches = read_file(read, path, batch_size, multilabel=True)
    assert_same_as_sklearn(read, batches, path, multilabel=True)
    labels = read.labels(batches)
    assert source.n_read == 40 and [] in labels and ["1", "3"] in labels


def test_multilabel_detected_from_the_first_batch(read, data_dir):
    path = os.path.join(data_dir, "multilabel.svm")
    source = open_source(path, policy=BadRecordPolicy())
    assert source.multilabel is None
    batches = read.batches(source)
    assert source.multilabel is True
    assert_same_as_sklearn(read, batches, path, multilabel=True)


def test_multilabel_decided_too_early_reports_the_line(tmp_path):
    path = write(tmp_path, "1 1:1\n1,2 2:1\n")
    with pytest.raises(InputError, match=r"data.svm:2: label list '1,2' in a single-label file.*multilabel=true"):
        list(open_source(path, policy=BadRecordPolicy(), batch_size=1))


def test_a_label_list_with_multilabel_false_names_the_option_not_the_first_lines(tmp_path):
    path = write(tmp_path, "1,2 1:1\n1 2:1\n")
    with pytest.raises(InputError, match=r"data.svm:1: label list '1,2' .*or --option multilabel=false; pass"):
        list(open_source(path, policy=BadRecordPolicy(), multilabel=False))


def test_a_regression_line_without_its_target_is_a_bad_record_whose_hint_is_not_multilabel(tmp_path):
    """--target numeric: a line without a target is a bad record whose fix is to give it one or
    skip it, not --option multilabel=true (which suited class labels only)."""
    path = write(tmp_path, "1.5 1:1\n 2:1\n2.5 2:1\n")
    with pytest.raises(InputError, match=r"data.svm:2: the line has no label \(--target numeric: every line needs"):
        list(open_source(path, policy=BadRecordPolicy(), numeric_targets=True))


def test_a_line_without_a_label_is_a_bad_record_unless_the_file_is_multilabel(read, tmp_path):
    """One unlabeled line in the first batch used to turn the whole file multilabel (issue 22)."""
    path = write(tmp_path, "1 1:1\n 2:1\n2 2:1\n")
    with pytest.raises(InputError, match=r"data.svm:2: the line has no label \(pass --option multilabel=true"):
        read_file(read, path)
    source, policy, batches = read_file(read, path, mode="skip")
    assert source.multilabel is False and read.labels(batches) == ["1", "2"] and policy.n_skipped == 1
    path = write(tmp_path, " 1:1\n2,1 2:1\n", name="ml.svm")  # a label list: multilabel, [] for no label
    source, _, batches = read_file(read, path)
    assert source.multilabel is True and read.labels(batches) == [[], ["2", "1"]]
    source, _, batches = read_file(read, write(tmp_path, " 1:1\n2 2:1\n", name="opt.svm"), multilabel=True)
    assert read.labels(batches) == [[], ["2"]]


@pytest.mark.parametrize("block", [1, 2, 3, 4, 1 << 20])
@pytest.mark.parametrize("opener", [None, gzip.open])
def test_a_byte_order_mark_at_the_start_is_dropped(read, tmp_path, block, opener):
    """A UTF-8 BOM made a class named '\\ufeff1' (issue 22); one elsewhere stays part of its line."""
    text = b"\xef\xbb\xbf1 1:1\n2 2:1\n\xef\xbb\xbf3 1:2\n"
    path = write(tmp_path, text if opener is None else gzip.compress(text), "data.svm" + (".gz" if opener else ""))
    with mock.patch.object(libsvm, "BLOCK_BYTES", block):
        _, _, batches = read_file(read, path, batch_size=2)
    assert read.labels(batches) == ["1", "2", "\ufeff3"]
    assert read.locations(batches) == [f"{path}:{n}" for n in (1, 2, 3)]
    assert read.sparse(batches).toarray().tolist() == [[1, 0], [0, 1], [2, 0]]


@pytest.mark.parametrize(
    "text, labels, n_read",
    [(b"\xef\xbb\xbf", [], 0), (b"\xef\xbb\xbf\n", [], 0), (b"\xef\xbb", [], 1), (b"1 1:1", ["1"], 1)],
)
def test_files_as_short_as_a_byte_order_mark(read, tmp_path, text, labels, n_read):
    """b"\\xef\\xbb" is a record whose label is not UTF-8 (skipped), not a mark."""
    with mock.patch.object(libsvm, "BLOCK_BYTES", 1):
        source, policy, batches = read_file(read, write(tmp_path, text), mode="skip")
    assert read.labels(batches) == labels and source.n_read == n_read and policy.n_skipped == n_read - len(labels)


def test_single_label_file_read_as_multilabel(read, data_dir):
    _, _, batches = read_file(read, os.path.join(data_dir, "iris.svm"), multilabel=True)
    assert read.labels(batches)[0] == ["1"]


@pytest.mark.parametrize("batch_size", [1, 2, 100])
@pytest.mark.parametrize("block", [1, 7, 64, 1 << 20])
def test_block_and_batch_boundaries(read, data_dir, batch_size, block):
    path = os.path.join(data_dir, "iris.svm")
    with mock.patch.object(libsvm, "BLOCK_BYTES", block):
        _, _, batches = read_file(read, path, batch_size)
    assert_same_as_sklearn(read, batches, path)


@pytest.mark.parametrize("suffix, opener", [(".gz", gzip.open), (".bz2", bz2.open), (".xz", lzma.open)])
def test_compressed(read, data_dir, tmp_path, suffix, opener):
    plain = os.path.join(data_dir, "iris.svm")
    path = str(tmp_path / ("iris.svm" + suffix))
    with open(plain, "rb") as f, opener(path, "wb") as out:
        out.write(f.read())
    _, _, batches = read_file(read, path, 7)
    assert_same_as_sklearn(read, batches, plain)
    assert read.locations(batches)[0] == f"{path}:5"


@pytest.mark.parametrize(
    "suffix, opener, kind", [(".gz", gzip.open, "gzip"), (".bz2", bz2.open, "bz2"), (".xz", lzma.open, "xz")]
)
def test_truncated_compressed_file(tmp_path, data_dir, suffix, opener, kind):
    path = str(tmp_path / ("iris.svm" + suffix))
    with open(os.path.join(data_dir, "iris.svm"), "rb") as f, opener(path, "wb") as out:
        out.write(f.read())
    data = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(InputError, match=f"iris.svm{suffix}: truncated or corrupt {kind} stream"):
        list(open_source(path, policy=BadRecordPolicy("skip")))


def test_corrupt_gzip(tmp_path):
    path = write(tmp_path, b"this is not gzip data\n", "bad.svm.gz")
    with pytest.raises(InputError, match="bad.svm.gz: truncated or corrupt gzip stream"):
        list(open_source(path, policy=BadRecordPolicy()))


def test_comments_blank_lines_and_whitespace(read, tmp_path):
    text = "# header\n\n+1 1:0.5\t3:2 # tail 4:9\n   \n\t# only a comment\r\n-1 2:1e-3\r\n1.0 2:.5 4:5.\n3"
    path = write(tmp_path, text)
    source, _, batches = read_file(read, path)
    assert source.n_read == 4
    assert read.labels(batches) == ["1", "-1", "1", "3"]
    assert [loc.rsplit(":", 1)[1] for loc in read.locations(batches)] == ["3", "6", "7", "8"]
    assert read.sparse(batches).toarray().tolist() == [
        [0.5, 0, 2, 0],
        [0, 1e-3, 0, 0],
        [0, 0.5, 0, 5.0],
        [0, 0, 0, 0],
    ]
    assert_same_as_sklearn(read, batches, path)


def test_label_normalization(read, tmp_path):
    path = write(tmp_path, "+1 1:1\n1.0 1:1\n-1 1:1\n-0 1:1\n1e1 1:1\n2.5 1:1\nspam 1:1\n007 1:1\n")
    _, _, batches = read_file(read, path)
    assert read.labels(batches) == ["1", "1", "-1", "0", "10", "2.5", "spam", "7"]


def test_unsorted_indices_are_sorted(read, tmp_path):
    path = write(tmp_path, "1 5:5 1:1 3:3\n")
    _, _, batches = read_file(read, path)
    X = batches[0].X
    assert X.indices.tolist() == [0, 2, 4] and X.data.tolist() == [1.0, 3.0, 5.0]


def test_explicit_zeros_are_kept(read, tmp_path):
    path = write(tmp_path, "1 1:0 2:-0.0 3:1\n")
    _, _, batches = read_file(read, path)
    assert batches[0].X.nnz == 3
    assert_same_as_sklearn(read, batches, path)


def test_width_grows_to_the_largest_index(read, tmp_path):
    path = write(tmp_path, "1 2:1\n1 9:1\n1 1:1\n")
    _, _, batches = read_file(read, path, 1)
    assert [b.X.shape[1] for b in batches] == [2, 9, 9]


def test_zero_based(read, tmp_path):
    path = write(tmp_path, "1 0:1 2:3\n2 1:2\n")
    _, _, batches = read_file(read, path, zero_based=True)
    assert read.sparse(batches).toarray().tolist() == [[1, 0, 3], [0, 2, 0]]
    assert_same_as_sklearn(read, batches, path, zero_based=True)


def test_qid_is_ignored_with_one_log_line(read, tmp_path, caplog, recwarn):
    path = write(tmp_path, "# ranking data\n1 1:1\n2 qid:1 2:1\n3 qid:2 1:2 qid:3\n")
    _, _, batches = read_file(read, path, 1)
    assert read.sparse(batches).toarray().tolist() == [[1, 0], [0, 1], [2, 0]]
    assert [r.getMessage() for r in caplog.records] == [
        f"{path}:3: qid:N tokens (query ids of ranking data) are ignored; lines with one: 2"
    ]
    assert caplog.records[0].levelname == "WARNING" and not recwarn.list


def test_large_values_and_long_tokens(read, tmp_path):
    # float32's largest value (stores hold float32; beyond it a record is bad, see BAD_LINES), float64's smallest
    values = ["3.4028234663852886e38", "4.9e-324", "0.12345678901234567890123456789012345678", "1234567890123456789012"]
    path = write(tmp_path, "1 " + " ".join(f"{i + 1}:{v}" for i, v in enumerate(values)) + "\n")
    _, _, batches = read_file(read, path)
    assert batches[0].X.data.tolist() == [float(v) for v in values]


def test_empty_file(read, tmp_path):
    source, _, batches = read_file(read, write(tmp_path, "# nothing\n\n"))
    assert batches == [] and source.n_read == 0


def test_iterating_again_starts_over(read, data_dir):
    source = open_source(os.path.join(data_dir, "iris.svm"), policy=BadRecordPolicy(), batch_size=20)
    first, second = read.batches(source), read.batches(source)
    assert read.labels(first) == read.labels(second) and source.n_read == 50


# ---------------------------------------------------------------- bad records

BAD_LINES = [
    ("1 3:abc", "value in '3:abc' is not a number"),
    ("1 3:1.5.2", "is not a number"),
    ("1 3:", "is not a number"),
    ("1 3:nan", "value in '3:nan' is not finite"),
    ("1 3:-Infinity", "is not finite"),
    ("1 3:1e400", "value in '3:1e400' is not finite"),
    ("1 3:1e300", "value in '3:1e300' is not finite in float32"),
    ("1 3:-3.5e38", "is not finite in float32"),
    ("1 -3:1", "negative feature index in '-3:1'"),
    ("1 0:1", "feature index 0 in '0:1' but indices are 1-based"),
    ("1 2:1 5:1 2:3", "feature index in '2:3' repeats on the line"),
    ("1 99999999999999999999:1", "is above 2**62"),
    ("1 4611686018427387905:1", "is above 2**62"),
    ("1 abc", "feature 'abc' is not index:value"),
    ("1 x:1", "bad feature index in 'x:1'"),
    ("1 :1", "bad feature index"),
    ("1,2 1:1", "label list '1,2' in a single-label file"),
    (b"\xff 1:1", "label '\\\\xff' is not valid UTF-8"),
]


@pytest.mark.parametrize("line, problem", BAD_LINES)
def test_bad_record_error_mode(tmp_path, line, problem):
    line = line if isinstance(line, bytes) else line.encode()
    path = write(tmp_path, b"1 1:1\n\n" + line + b"\n2 2:2\n")
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy(), batch_size=4, multilabel=False))
    assert e.value.location == f"{path}:3" and problem in e.value.problem
    assert str(e.value).startswith(f"{path}:3: ")


@pytest.mark.parametrize("line, problem", BAD_LINES)
@pytest.mark.parametrize("batch_size", [1, 3])
def test_bad_record_skip_and_quarantine(read, tmp_path, quarantine, line, problem, batch_size):
    line = line if isinstance(line, bytes) else line.encode()
    path = write(tmp_path, b"1 1:1\n\n" + line + b"\n2 2:2\n3 3:3")
    source = open_source(path, policy=quarantine, batch_size=batch_size, multilabel=False)
    batches = read.batches(source, batch_size)
    assert source.n_read == 4 and quarantine.n_skipped == 1
    assert read.labels(batches) == ["1", "2", "3"]
    assert read.sparse(batches).toarray().tolist() == [[1, 0, 0], [0, 2, 0], [0, 0, 3]]
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:3"
    assert entry["raw"] == line.decode("utf-8", "backslashreplace")
    assert problem in entry["problem"]


def test_zero_index_hint(tmp_path):
    path = write(tmp_path, "1 0:1\n")
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.hint == "pass --zero-based"
    assert str(e.value).endswith("(pass --zero-based)")


def test_zero_index_in_zero_based_mode_is_fine(read, tmp_path):
    _, _, batches = read_file(read, write(tmp_path, "1 0:1\n"), zero_based=True)
    assert batches[0].X.indices.tolist() == [0]


def test_missing_label_when_single_label(tmp_path):
    path = write(tmp_path, "1 1:1\n 2:1\n")
    with pytest.raises(InputError, match="data.svm:2: the line has no label"):
        list(open_source(path, policy=BadRecordPolicy(), multilabel=False))


def test_empty_label_in_a_list(tmp_path):
    path = write(tmp_path, "1,,2 1:1\n")
    with pytest.raises(InputError, match="data.svm:1: empty label in the label list"):
        list(open_source(path, policy=BadRecordPolicy()))


def test_bad_records_across_a_block_boundary(read, tmp_path):
    lines = [f"{i % 3} {i % 7 + 1}:{i}" if i % 5 else f"{i % 3} {i % 7 + 1}:oops" for i in range(60)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    policy = BadRecordPolicy("skip")
    with mock.patch.object(libsvm, "BLOCK_BYTES", 13):
        source = open_source(path, policy=policy, batch_size=4)
        batches = read.batches(source, 4)
    assert policy.n_skipped == 12 and source.n_read == 60
    assert [int(loc.rsplit(":", 1)[1]) - 1 for loc in read.locations(batches)] == [i for i in range(60) if i % 5]


# ---------------------------------------------------------------- properties

_floats = st.floats(-3e38, 3e38)  # stores hold float32; larger values are bad records
_value_text = st.one_of(
    _floats.map(repr),
    _floats.map(lambda v: f"{v:.17g}"),
    _floats.map(lambda v: f"{v:.3e}"),
    _floats.map(lambda v: f"{v:.6f}"),
    st.integers(-(10**25), 10**25).map(str),
    st.decimals(allow_nan=False, allow_infinity=False, places=8).map(str),
)
_label = st.one_of(st.integers(-3, 3).map(str), st.sampled_from(["+1", "-1", "1.0", "2.5", "1e1"]))
_space = st.sampled_from([" ", "\t", "  ", " \t "])


@st.composite
def _line(draw, multilabel):
    indices = sorted(draw(st.sets(st.integers(1, 40), max_size=6)))
    if multilabel:
        label = ",".join(draw(st.lists(_label, max_size=3)))
    else:
        label = draw(_label)
    parts = [label] + [f"{i}:{draw(_value_text)}" for i in indices]
    line = draw(_space).join(parts)
    if draw(st.booleans()):
        line += draw(_space) + "# " + draw(st.text(alphabet="ab 1:2#", max_size=5))
    return line


@st.composite
def _valid_file(draw, multilabel=False):
    lines = draw(st.lists(st.one_of(_line(multilabel), st.sampled_from(["", "# c", "  "])), max_size=12))
    end = draw(st.sampled_from(["\n", "\r\n"]))
    return end.join(lines) + draw(st.sampled_from(["", end]))


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_valid_file(), batch_size=st.integers(1, 5), block=st.integers(1, 200))
def test_property_valid_files_match_sklearn(read, tmp_path, text, batch_size, block):
    path = write(tmp_path, text)
    with mock.patch.object(libsvm, "BLOCK_BYTES", block):
        _, _, batches = read_file(read, path, batch_size, multilabel=False)
    assert_same_as_sklearn(read, batches, path)


@settings(max_examples=75, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_valid_file(multilabel=True), batch_size=st.integers(1, 5))
def test_property_valid_multilabel_files_match_sklearn(read, tmp_path, text, batch_size):
    path = write(tmp_path, text)
    _, _, batches = read_file(read, path, batch_size, multilabel=True)
    assert_same_as_sklearn(read, batches, path, multilabel=True)


_garbage_line = st.one_of(
    st.text(alphabet="0123456789:,.-+eE #\t\rnaifqd x", max_size=30),
    st.binary(max_size=20).map(lambda b: b.replace(b"\n", b" ").decode("latin-1")),
    _line(False),
)


def _records(text: str) -> int:
    """Lines that hold something before any '#'."""
    return sum(1 for line in text.encode("latin-1").split(b"\n") if line.split(b"#")[0].split())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    lines=st.lists(_garbage_line, max_size=10),
    batch_size=st.integers(1, 4),
    multilabel=st.sampled_from([None, True, False]),
)
def test_property_garbage_never_crashes(read, tmp_path, lines, batch_size, multilabel):
    text = "\n".join(lines)
    path = write(tmp_path, text.encode("latin-1"))
    policy = BadRecordPolicy("skip")
    source = open_source(path, policy=policy, batch_size=batch_size, multilabel=multilabel)
    batches = read.batches(source, batch_size)
    assert source.n_read == _records(text) == policy.n_skipped + len(read.labels(batches))
    for b in batches:
        assert np.isfinite(b.X.data).all() and (b.X.indices >= 0).all()
    try:
        list(open_source(path, policy=BadRecordPolicy(), batch_size=batch_size, multilabel=multilabel))
    except InputError as e:
        assert e.location.startswith(f"{path}:")
    else:
        assert policy.n_skipped == 0


@st.composite
def _decimal_text(draw):
    """Any number in the decimal grammar: sign, digits, fraction, exponent."""
    digits = st.text(alphabet="0123456789", max_size=25)
    whole, fraction = draw(digits), draw(digits)
    if not whole and not fraction:
        whole = "0"
    text = draw(st.sampled_from(["", "+", "-"])) + whole
    if fraction or draw(st.booleans()):
        text += "." + fraction
    if draw(st.booleans()):
        text += draw(st.sampled_from("eE")) + draw(st.sampled_from(["", "+", "-"])) + str(draw(st.integers(0, 400)))
    return text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(values=st.lists(_decimal_text(), min_size=1, max_size=20))
def test_property_values_parse_like_float(read, tmp_path, values):
    path = write(tmp_path, "".join(f"1 1:{v}\n" for v in values))
    policy = BadRecordPolicy("skip")
    batches = read.batches(open_source(path, policy=policy))
    with np.errstate(over="ignore"):  # kept: values finite once stored in float32
        expected = [float(v) for v in values if np.isfinite(np.float32(float(v)))]
    got = read.sparse(batches).data.tolist()
    assert got == expected and np.array_equal(np.signbit(got), np.signbit(expected))
    assert policy.n_skipped == len(values) - len(expected)
