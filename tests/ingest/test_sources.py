"""open_source (format inference, options) and BadRecordPolicy."""

import bz2
import gzip
import io
import json
import lzma
import os
import tracemalloc
import types
import typing

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import streamfit.ingest.sources as src
from streamfit.errors import ConfigError, InputError
from streamfit.ingest.sources import FORMATS, BadRecordPolicy, ReadLimits, infer_format, open_source
from streamfit.ingest.sources._util import bounded_lines
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
    (tmp_path / "notes.txt").write_text("just some words\nand more, and more\n")
    assert type(open_source(str(tmp_path / "dna.scale.gz"), policy=BadRecordPolicy())) is LibsvmSource
    assert type(open_source(str(tmp_path / "train.t"), policy=BadRecordPolicy())) is JsonlSource
    with pytest.raises(InputError, match="notes.txt: cannot tell the format .* first lines.*--format"):
        open_source(str(tmp_path / "notes.txt"), policy=BadRecordPolicy())


def test_delimited_text_is_recognised_from_its_lines(tmp_path):
    """R8 ships as `label<TAB>text` lines in .txt.gz (issue 20, item 4): a .txt(.gz) whose lines
    hold the same number of tabs is TSV, of CSV cells CSV."""
    with gzip.open(tmp_path / "r8-train.txt.gz", "wt") as f:
        f.write("earn\tprofit, rose five pct\nacq\tcompany bought shares\n")
    (tmp_path / "table.txt").write_text("label,text\nx,a b\ny,c\n")
    assert type(open_source(str(tmp_path / "r8-train.txt.gz"), policy=BadRecordPolicy())) is TsvSource
    assert type(open_source(str(tmp_path / "table.txt"), policy=BadRecordPolicy())) is CsvSource


# ---- hostile inputs: decompression bombs and endless lines (issue 22, class 3) ----

_COMPRESSORS = {".gz": lambda b: gzip.compress(b, 1), ".bz2": bz2.compress, ".xz": lzma.compress}
_GOOD = {".svm": b"1 1:1\n", ".jsonl": b'{"text": "a b", "label": "x"}\n', ".csv": b"x,a b\n"}
_HEADER = {".svm": b"", ".jsonl": b"", ".csv": b"label,text\n"}


def write_bomb(path, suffix: str, parts: list[bytes | tuple[bytes, int]]) -> str:
    """A compressed file whose decompressed content is `parts` in order, a (block, n) part being
    block repeated n times: every block is compressed once and its stream repeated (gzip, bzip2
    and xz readers join concatenated streams), so 200 MiB of zeros cost a few hundred KiB and
    no time to write."""
    compress = _COMPRESSORS[suffix]
    with open(path, "wb") as f:
        for part in parts:
            block, n = part if isinstance(part, tuple) else (part, 1)
            f.write(compress(block) * n)
    return str(path)


def read_all(source):
    return [record for batch in source for record in batch.locations]


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
@pytest.mark.parametrize("fmt", [".svm", ".jsonl", ".csv"])
def test_an_endless_line_in_a_compressed_file_is_a_bad_record_naming_file_and_line(tmp_path, fmt, suffix):
    """16 MiB of zeros without a newline, with 1 MiB allowed per line: LIBSVM and JSONL skip the
    line as a bad record (or stop at it in error mode), CSV stops the read (rows after a broken
    line cannot be trusted)."""
    path = write_bomb(
        tmp_path / f"bomb{fmt}{suffix}", suffix, [_HEADER[fmt] + _GOOD[fmt], (bytes(1 << 20), 16), b"\n" + _GOOD[fmt]]
    )
    line = 2 if fmt == ".csv" else 1
    limits = ReadLimits(record_bytes=1 << 20)
    with pytest.raises(InputError) as e:
        read_all(open_source(path, policy=BadRecordPolicy(), limits=limits))
    assert str(e.value).startswith(f"{path}:{line + 1}: the line is longer than 1 MiB")
    assert "--max-record-bytes" in str(e.value)
    if fmt != ".csv":
        policy = BadRecordPolicy("skip")
        source = open_source(path, policy=policy, limits=limits)
        assert read_all(source) == [f"{path}:1", f"{path}:3"]
        assert (source.n_read, policy.n_skipped) == (3, 1)


@pytest.mark.parametrize("fmt", [".svm", ".jsonl"])
def test_a_200_mib_line_is_read_in_bounded_memory(tmp_path, fmt):
    """A 200 KiB gzip of a 200 MiB line of zeros: the reader's peak allocation stays near a block
    and the bound (the line itself is never held), far below the line's size."""
    path = write_bomb(tmp_path / f"bomb{fmt}.gz", ".gz", [(bytes(1 << 20), 200), b"\n" + _GOOD[fmt]])
    assert os.path.getsize(path) < 1 << 20
    policy = BadRecordPolicy("skip")
    tracemalloc.start()
    try:
        locations = read_all(open_source(path, policy=policy, limits=ReadLimits(record_bytes=1 << 20)))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert locations == [f"{path}:2"] and policy.n_skipped == 1
    assert peak < 80 << 20, f"peak {peak / 2**20:.0f} MiB"


@pytest.mark.parametrize("suffix", [".gz", ".bz2", ".xz"])
def test_more_than_max_input_bytes_after_decompression_stops_the_read(tmp_path, suffix):
    """64 MiB of blank lines (no records) from a few KiB, with 8 MiB allowed per input."""
    path = write_bomb(tmp_path / f"bomb.svm{suffix}", suffix, [_GOOD[".svm"], (b"\n" * (1 << 20), 64)])
    with pytest.raises(InputError) as e:
        read_all(open_source(path, policy=BadRecordPolicy("skip"), limits=ReadLimits(input_bytes=8 << 20)))
    assert str(e.value).startswith(f"{path}: holds more than 8 MiB after decompression (raise --max-input-bytes")


def test_a_plain_file_counts_towards_max_input_bytes_too(tmp_path):
    path = tmp_path / "a.jsonl"
    path.write_bytes(_GOOD[".jsonl"] * 100)
    size = len(_GOOD[".jsonl"]) * 100
    limits = ReadLimits(input_bytes=size)
    assert len(read_all(open_source(str(path), policy=BadRecordPolicy(), limits=limits))) == 100
    with pytest.raises(InputError, match=rf"a.jsonl: holds more than {size - 1} bytes \(raise --max-input-bytes"):
        read_all(open_source(str(path), policy=BadRecordPolicy(), limits=ReadLimits(input_bytes=size - 1)))


@settings(max_examples=300, deadline=None)
@given(
    data=st.lists(st.sampled_from([b"a", b"bc", b"\n", b"\r", b"\n\n", b"x" * 7]), max_size=30),
    limit=st.integers(1, 12),
)
def test_bounded_lines_are_the_lines_with_the_long_ones_left_out(data, limit):
    """Against bytes.splitlines(keepends=True) cut at b"\\n" only: every line of at most `limit`
    bytes before its newline comes out whole, every longer one as None."""
    text = b"".join(data)
    expected = [ln if len(ln.rstrip(b"\n")) <= limit else None for ln in text.split(b"\n")[:-1]]
    expected = [e if e is None else e + b"\n" for e in expected]
    last = text.split(b"\n")[-1]
    if last:
        expected.append(last if len(last) <= limit else None)
    assert list(bounded_lines(io.BufferedReader(io.BytesIO(text), 4), limit)) == expected


_OPTION_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=8), st.lists(st.integers())
)


@settings(deadline=None)  # a slow example on a loaded machine is not a failure
@given(st.sampled_from(sorted(src._ALL_OPTIONS)), _OPTION_VALUES)
def test_every_format_option_value_is_taken_or_one_config_error_line(name, value):
    """check_options, the one check of format options: a value of the reader's declared type that
    a reader can use passes; anything else is a ConfigError naming the option, on one line."""
    kind = src._OPTION_TYPES[name]
    accepted = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
    usable = type(value) in accepted and value != ""
    try:
        src.check_options({name: value})
    except ConfigError as e:
        assert str(e).startswith(f"format option {name}") and "\n" not in str(e)
        assert not usable or name in (
            "encoding",
            "encoding_errors",
            "text_field",
            "feature_fields",
            "delimiter",
        )  # these also check the value
    else:
        assert usable


@pytest.mark.parametrize(
    "options, fragment",
    [
        ({"encoding": 1}, "encoding=1: expected text"),
        ({"encoding": "no-such"}, "encoding='no-such': not usable"),
        ({"encoding_errors": "loudly"}, "encoding_errors='loudly': not usable"),
        ({"text_field": "title,,body"}, "text_field='title,,body': not usable"),
        ({"feature_fields": "f0,,f1"}, "feature_fields='f0,,f1': not usable"),
        ({"label_separator": ""}, "label_separator: empty"),
        ({"zero_based": "yes"}, "zero_based='yes': expected true or false"),
        ({"multilabel": 2}, "multilabel=2: expected true or false or None"),
    ],
)
def test_a_bad_format_option_is_refused_before_any_read(tmp_path, options, fragment):
    path = tmp_path / "a.csv"
    path.write_text("text,label\na,b\n")
    with pytest.raises(ConfigError, match=f"^format option {fragment}"):
        open_source(str(path), policy=BadRecordPolicy(), **options)
    assert open_source(str(path), policy=BadRecordPolicy(), encoding="latin-1", label_separator=" ").encoding


def test_the_source_registry_imports_no_pyarrow_until_a_parquet_file_is_opened():
    """pyarrow's import (0.1-0.3 s) is paid by Parquet inputs only, not by a text job's ingest."""
    import subprocess
    import sys

    code = "import sys, streamfit.ingest.sources, streamfit.ingest.pipeline; print('pyarrow' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "False"
