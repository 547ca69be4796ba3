"""CSV and TSV readers."""

import bz2
import csv
import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfit.errors import ConfigError, InputError
from streamfit.ingest.limits import ReadLimits
from streamfit.ingest.sources import BadRecordPolicy, open_source

CSV = (
    "id,text,label\r\n"
    "1,the rocket launched,sci.space\r\n"
    '2,"a fine goal, said he",rec.sport\r\n'
    "\r\n"
    '3,"two\nlines ""quoted""",sci.space\r\n'
    "4,,empty\r\n"
)
TEXTS = ["the rocket launched", "a fine goal, said he", 'two\nlines "quoted"', ""]
LABELS = ["sci.space", "rec.sport", "sci.space", "empty"]


def write(tmp_path, text, name="data.csv", encoding="utf-8"):
    path = tmp_path / name
    path.write_bytes(text.encode(encoding))
    return str(path)


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_good_csv(read, tmp_path, batch_size):
    path = write(tmp_path, CSV)
    source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size)
    batches = read.batches(source, batch_size)
    assert read.texts(batches) == TEXTS and read.labels(batches) == LABELS
    assert read.locations(batches) == [f"{path}:{n}" for n in (2, 3, 5, 7)]
    assert source.n_read == 4 and source.multilabel is False


@pytest.mark.parametrize("batch_size", [1, 8192])
def test_good_tsv(read, tmp_path, batch_size):
    text = "label\ttitle\ttext\nspace\tRockets\tthe rocket launched\nsport\tGoal\ta fine goal, said he\n"
    path = write(tmp_path, text, "data.tsv")
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), batch_size=batch_size, text_field="title,text"))
    assert read.texts(batches, "title") == ["Rockets", "Goal"]
    assert read.texts(batches, "text") == ["the rocket launched", "a fine goal, said he"]
    assert read.labels(batches) == ["space", "sport"]


def test_compressed_csv(read, tmp_path):
    path = tmp_path / "data.csv.bz2"
    path.write_bytes(bz2.compress(CSV.encode()))
    batches = read.batches(open_source(str(path), policy=BadRecordPolicy()))
    assert read.texts(batches) == TEXTS


def test_multilabel(read, tmp_path):
    path = write(tmp_path, "text,tags\na,x|y\nb,\nc, z | | w \n")
    source = open_source(path, policy=BadRecordPolicy(), label_field="tags", label_separator="|")
    assert source.multilabel is True
    assert read.labels(read.batches(source)) == [["x", "y"], [], ["z", "w"]]


def test_byte_order_mark_and_other_encoding(read, tmp_path):
    path = write(tmp_path, "\ufefftext,label\nhi,a\n")
    assert read.labels(read.batches(open_source(path, policy=BadRecordPolicy()))) == ["a"]
    path = write(tmp_path, "text,label\nété,a\n", "latin.csv", "latin-1")
    assert read.texts(read.batches(open_source(path, policy=BadRecordPolicy(), encoding="latin-1"))) == ["été"]


def test_wrong_encoding_stops_the_read(tmp_path):
    path = write(tmp_path, "text,label\nété,a\n", "latin.csv", "latin-1")
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy("skip")))
    # the line and the bytes, found by a second read (before: "the text after line 0", the last
    # line read before the chunk the decoder failed in)
    assert e.value.location == f"{path}:2" and e.value.problem == "the bytes b'\\xe9' are not valid utf-8 text"
    assert "--encoding latin-1" in e.value.hint


def test_unknown_encoding():
    with pytest.raises(ConfigError, match="encoding='no-such-codec': not usable; expected a text encoding"):
        open_source(__file__, "csv", policy=BadRecordPolicy(), encoding="no-such-codec")


@pytest.mark.parametrize("header, option", [("id,body,label", "--text-field"), ("id,text,class", "--label-field")])
def test_missing_column_is_an_error_at_the_header(tmp_path, header, option):
    path = write(tmp_path, header + "\n1,x,y\n")
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy("skip")))
    assert e.value.location == f"{path}:1"
    assert option in e.value.hint and "'id'" in e.value.hint


def test_empty_file_has_no_records(read, tmp_path):
    source = open_source(write(tmp_path, ""), policy=BadRecordPolicy())
    assert read.batches(source) == [] and source.n_read == 0


BAD = [
    ("5,too,many,cells", "expected 3 cells, found 4"),
    ("5,too few", "expected 3 cells, found 2"),
    ("5,no label,", "the label is empty"),
]


@pytest.mark.parametrize("line, problem", BAD)
def test_bad_record_error_mode(tmp_path, line, problem):
    path = write(tmp_path, f"id,text,label\n1,a,x\n{line}\n2,b,y\n")
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:3" and problem in e.value.problem


@pytest.mark.parametrize("line, problem", BAD)
@pytest.mark.parametrize("batch_size", [1, 2])
def test_bad_record_skip_and_quarantine(read, tmp_path, quarantine, line, problem, batch_size):
    path = write(tmp_path, f"id,text,label\n1,a,x\n\n{line}\n2,b,y\n3,c,z\n")
    source = open_source(path, policy=quarantine, batch_size=batch_size)
    batches = read.batches(source, batch_size)
    assert read.labels(batches) == ["x", "y", "z"] and read.texts(batches) == ["a", "b", "c"]
    assert source.n_read == 4 and quarantine.n_skipped == 1
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:4" and problem in entry["problem"]
    assert entry["raw"] == line


def test_runaway_cell_stops_the_read_at_the_record_limit(tmp_path):
    path = write(tmp_path, 'text,label\na,x\n"unterminated quote,x\n' + "more text\n" * 20000)
    source = open_source(path, "csv", policy=BadRecordPolicy("skip"), limits=ReadLimits(record_bytes=100_000))
    with pytest.raises(InputError, match=r"data.csv:\d+: a cell is longer than .*raise --max-record-bytes"):
        list(source)


def test_a_cell_over_128_kib_reads_whole_under_the_default_limits(read, tmp_path):
    """A long document (here 200 000 characters with quoted newlines) is one cell: the csv module's
    own 128 KiB field limit does not apply, --max-record-bytes does."""
    text = ("word " * 40_000).strip() + "\nsecond paragraph"
    path = tmp_path / "long.tsv"
    with open(path, "w", newline="") as f:
        csv.writer(f, delimiter="\t").writerows([["label", "text"], ["x", text], ["y", "short"]])
    batches = read.batches(open_source(str(path), policy=BadRecordPolicy(), label_field="label", text_field="text"))
    assert read.texts(batches) == [text, "short"] and read.labels(batches) == ["x", "y"]


def test_no_label_field_reads_unlabeled_rows(read, tmp_path):
    path = write(tmp_path, "id,text\n1,the rocket launched\n2,\n")
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), label_field=None))
    assert read.texts(batches) == ["the rocket launched", ""] and read.labels(batches) == [None, None]


@pytest.mark.parametrize(
    "quoted_line, n_lines",
    [('"unterminated, text,x', 3), ('1,"unterminated text,x', 3), ('1,a,"x', 3)],
)
def test_an_unterminated_quote_is_a_bad_record_at_its_line(tmp_path, quoted_line, n_lines):
    """The csv module reads the rest of the file into the quoted cell: with as many cells as
    the header (the quote in the last column) the record was taken silently before."""
    path = write(tmp_path, f"id,text,label\n1,a,x\n{quoted_line}\n2,b,y\n3,c,z\n")
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:3" and "never closed" in e.value.problem
    assert f"{n_lines} line(s)" in e.value.problem
    policy = BadRecordPolicy("skip")
    source = open_source(path, policy=policy)
    rows = [label for batch in source for label in batch.labels]
    assert rows == ["x"] and source.n_read == 2 and policy.n_skipped == 1


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    cells=st.lists(
        st.tuples(st.from_regex(r'a[ab ,"]{0,3}(\na[ab ,"]{0,2})?', fullmatch=True), st.sampled_from(["x", "y"])),
        min_size=1,
        max_size=8,
    ),
    broken=st.integers(0, 7),
)
def test_quoted_cells_read_back_and_an_unterminated_quote_is_counted(tmp_path, cells, broken):
    """csv.writer's output (quotes, delimiters, newlines in cells) reads back exactly. With the
    cells written plain (no quotes, commas or newlines) and record `broken` given an opening
    quote that is never closed, the records before it are read, it is one bad record at its
    line, and nothing after it is taken as data."""
    good = io.StringIO()
    csv.writer(good, lineterminator="\r\n").writerows([("text", "label"), *cells])
    path = write(tmp_path, good.getvalue(), name="good.csv")
    read_back = [
        (t, label) for b in open_source(path, policy=BadRecordPolicy()) for t, label in zip(b.texts["text"], b.labels)
    ]
    assert read_back == cells
    k = broken % len(cells)
    plain = [" ".join(t.replace('"', "").replace(",", " ").split()) + "," + label for t, label in cells]
    plain[k] = '"' + plain[k]  # one quote, never closed
    path = write(tmp_path, "text,label\n" + "".join(line + "\n" for line in plain), name="broken.csv")
    policy = BadRecordPolicy("skip")
    source = open_source(path, policy=policy)
    labels = [label for batch in source for label in batch.labels]
    assert labels == [label for _, label in cells[:k]] and policy.n_skipped == 1 and source.n_read == k + 1
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:{k + 2}" and f"{len(cells) - k} line(s)" in e.value.problem


@settings(max_examples=400, deadline=None)
@given(
    text=st.text(alphabet='ab "\t,\n\r\x00é', max_size=60),
    delimiter=st.sampled_from(["\t", ","]),
)
def test_records_are_the_csv_modules_rows_at_their_lines(text, delimiter):
    """The reader splits the lines that are records by themselves and hands the others to the
    csv module: every record is the csv module's row for the whole file (blank lines as []),
    starts at the line the csv module started it, and a record read by the csv module comes with
    exactly its lines (the unterminated-quote check reads them)."""
    expected, starts, spans = [], [], []
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    previous = 0
    for row in reader:
        expected.append(row)
        starts.append(previous + 1)
        spans.append((previous, reader.line_num))
        previous = reader.line_num
    lines = io.StringIO(text, newline="").readlines()
    source = open_source(__file__, "tsv" if delimiter == "\t" else "csv", policy=BadRecordPolicy())
    got = list(source._records(io.StringIO(text, newline="")))
    assert [cells for cells, _, _ in got] == expected
    assert [first for _, first, _ in got] == starts
    for (_, _, record_lines), (start, stop) in zip(got, spans):
        assert record_lines is None or record_lines == lines[start:stop]
        if record_lines is None:  # split here: one line, and no quote of it left open
            assert stop == start + 1 and not source._unterminated(lines[start:stop])


def test_quoted_and_plain_cells_of_a_long_tsv_read_back_as_written(read, tmp_path):
    """A TSV file as csv.writer writes it (cells with quotes are quoted, their quotes doubled;
    tabs and line breaks inside cells), the lines split without the csv module where they can
    be: every cell reads back as written, at its line."""
    rows = [
        ["x", 'he said "hi"'],
        ["y", "plain text"],
        ["x", '"quoted" at both ends "'],
        ["y", "a tab\tinside"],
        ["x", 'two\nlines, one "quote"'],
        ["y", '""'],
        ["x", 'a"b'],
    ]
    path = tmp_path / "mixed.tsv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        csv.writer(f, delimiter="\t", lineterminator="\n").writerows(rows)
    source = open_source(str(path), policy=BadRecordPolicy(), header=False, label_field="0", text_field="1")
    batches = read.batches(source)
    assert read.texts(batches, "1") == [text for _, text in rows]
    assert read.labels(batches) == [label for label, _ in rows]
    assert read.locations(batches) == [f"{path}:{n}" for n in (1, 2, 3, 4, 5, 7, 8)]


@pytest.mark.parametrize("splittable_first", [False, True])
def test_lines_with_quotes_are_tried_while_most_of_them_split(monkeypatch, tmp_path, splittable_first):
    """Lines with a quote go to the splitter while at least half of those tried were split (after
    SPLIT_TRIALS tries), lines without one always; the records are csv.reader's either way."""
    from streamfit.ingest.sources import delimited

    falls_back = ['x,"a, b"'] * (2 * delimited.SPLIT_TRIALS)  # a quoted cell holding the delimiter
    splits = ['y,"he said ""hi"""'] * delimited.SPLIT_TRIALS
    plain = ["z,plain"] * 50
    lines = ["label,text"] + (splits + falls_back if splittable_first else falls_back + splits) + plain
    text = "".join(line + "\n" for line in lines)
    tried = []
    split_here = delimited._plain_cells

    def counted(line, delimiter):
        tried.append(line)
        return split_here(line, delimiter)

    monkeypatch.setattr(delimited, "_plain_cells", counted)
    source = open_source(write(tmp_path, text), policy=BadRecordPolicy())
    got = [cells for cells, _, _ in source._records(io.StringIO(text, newline=""))]
    assert got == list(csv.reader(io.StringIO(text, newline="")))
    with_quote = sum('"' in line for line in tried)
    if splittable_first:  # 100 split, then 200 fall back: tried until the split ones are under half
        assert with_quote == 2 * delimited.SPLIT_TRIALS + 1
    else:  # none of the first 100 split: no line with a quote is tried after them
        assert with_quote == delimited.SPLIT_TRIALS
    assert len(tried) - with_quote == 1 + len(plain)  # the header and the plain lines: always


def test_headerless_tsv_reads_columns_by_number(read, tmp_path):
    """--no-header: --label-field/--text-field are column numbers from 0 (issue 20, item 4)."""
    path = write(tmp_path, "earn\tprofit rose\tQ1\nacq\tbought shares\tQ2\nshort\n", "r8.tsv")
    policy = BadRecordPolicy("skip")
    source = open_source(path, policy=policy, header=False, label_field="0", text_field="1,2")
    batches = read.batches(source)
    assert read.texts(batches, "1") == ["profit rose", "bought shares"]
    assert read.texts(batches, "2") == ["Q1", "Q2"]
    assert read.labels(batches) == ["earn", "acq"]
    assert read.locations(batches) == [f"{path}:1", f"{path}:2"]
    assert policy.n_skipped == 1  # the line with one cell


def test_headerless_needs_column_numbers(tmp_path):
    path = write(tmp_path, "earn\tprofit rose\n", "r8.tsv")
    with pytest.raises(InputError, match="--text-field 'text' names a column, but the file has no header row"):
        list(open_source(path, policy=BadRecordPolicy(), header=False, label_field="0"))


def test_a_missing_column_suggests_no_header(tmp_path):
    path = write(tmp_path, "earn\tprofit rose\n", "r8.tsv")
    with pytest.raises(InputError, match="no column 'text'.*pass --no-header and column numbers"):
        list(open_source(path, policy=BadRecordPolicy()))


@pytest.mark.parametrize("batch_size", [1, 2, 8192])
def test_feature_columns_mode(read, tmp_path, batch_size, quarantine):
    """feature_fields: a table of numeric columns is read as features 0, 1, … in the order named
    (other columns ignored; zeros left out), as from Parquet; a cell that is empty, not a number,
    NaN, infinite or beyond float32 is a bad record at its line, with the ids of the others kept.
    Without a header the columns are numbers. Before, the option was dropped for CSV and the file
    was read as text ("no column 'text'")."""
    import numpy as np

    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(8, 3)), 3) * (rng.random((8, 3)) < 0.7)
    cells = [[repr(float(v)) for v in row] for row in X]
    cells[4][1], cells[5][2], cells[6][0] = "", "abc", "nan"
    lines = ["key,b,label,a,c"] + [f"k{r},{b},y{r % 2},{a},{c}" for r, (a, b, c) in enumerate(cells)]
    path = write(tmp_path, "\n".join(lines) + "\n")
    source = open_source(path, policy=quarantine, batch_size=batch_size, feature_fields="a, b,c", id_field="key")
    assert source.kind == "sparse"
    batches = read.batches(source, batch_size)
    kept = [r for r in range(8) if r not in (4, 5, 6)]
    got = read.sparse(batches, 3)
    assert np.array_equal(got.toarray(), X[kept]) and not (got.data == 0).any()
    assert read.labels(batches) == [f"y{r % 2}" for r in kept]
    assert [i for b in batches for i in b.ids] == [f"k{r}" for r in kept]
    assert read.locations(batches) == [f"{path}:{r + 2}" for r in kept]
    assert [(e["location"], e["problem"]) for e in quarantine.entries()] == [
        (f"{path}:6", "column 'b' is empty"),
        (f"{path}:7", "column 'c' holds 'abc', not a number"),
        (f"{path}:8", "column 'a' holds nan: NaN, infinite or beyond float32's ±3.4e38 (scale it)"),
    ]
    with pytest.raises(InputError, match=r"no column 'd' \(set --option feature_fields; the columns are 'key', 'b'"):
        list(open_source(path, policy=BadRecordPolicy(), feature_fields="a,d"))
    tsv = write(tmp_path, "\n".join(line.replace(",", "\t") for line in lines[1:4]) + "\n", name="t.tsv")
    source = open_source(tsv, policy=BadRecordPolicy(), header=False, feature_fields="3,1,4", label_field="2")
    assert np.array_equal(read.sparse(read.batches(source, 8192), 3).toarray(), X[:3])


def test_a_csv_feature_table_is_ingested_as_numbers_from_ingest_to_predict(tmp_path):
    """A CSV table of numeric columns with a real-valued target (`--target numeric --option
    feature_fields=...`) gives the store its LIBSVM file gives: the same values (numeric inputs
    keep them: no IDF, no unit rows, the text defaults being for text) and targets; predict reads
    new rows with the recorded columns and writes their ids."""
    import numpy as np
    from click.testing import CliRunner
    from sklearn.datasets import dump_svmlight_file

    from streamfit.cli import main
    from streamfit.store import open_store

    rng = np.random.default_rng(2)
    X, y = rng.normal(size=(50, 4)), rng.normal(size=50) * 10 + 3
    rows = [f"r{i}," + ",".join(repr(float(v)) for v in X[i]) + f",{float(y[i])!r}" for i in range(50)]
    path = write(tmp_path, "id,f0,f1,f2,f3,price\n" + "\n".join(rows) + "\n")
    dump_svmlight_file(X, y, str(tmp_path / "same.svm"), zero_based=False)

    def streamfit(*args):
        result = CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)
        assert result.exit_code == 0, result.output

    options = ["--option", "feature_fields=f0,f1,f2,f3", "--label-field", "price", "--id-field", "id"]
    streamfit("ingest", path, "--no-hash", "--target", "numeric", *options, "--out", tmp_path / "csv.zarr")
    streamfit("ingest", tmp_path / "same.svm", "--no-hash", "--target", "numeric", "--out", tmp_path / "svm.zarr")
    (Xc, yc), (Xs, ys) = (open_store(str(tmp_path / s)).to_scipy() for s in ("csv.zarr", "svm.zarr"))
    assert np.array_equal(Xc.toarray(), Xs.toarray()) and np.array_equal(Xc.toarray(), X.astype(np.float32))
    assert np.array_equal(yc.ravel(), y) and np.allclose(ys.ravel(), y, rtol=1e-15)  # LIBSVM's file: 16 digits
    assert open_store(str(tmp_path / "csv.zarr")).manifest.transform == {"idf": False, "l2_normalize": False}
    streamfit("train", tmp_path / "csv.zarr", "--n-workers", "0", "--out", tmp_path / "run")
    streamfit("predict", tmp_path / "run", path, "--out", tmp_path / "p.csv")
    lines = (tmp_path / "p.csv").read_text().splitlines()
    assert lines[0] == "location,id,target" and len(lines) == 51 and lines[1].startswith(f"{path}:2,r0,")


@pytest.mark.parametrize("batch_size", [1, 8192])
def test_another_delimiter_reads_as_the_comma_file(read, tmp_path, batch_size):
    """`--option delimiter=;` (the CSV of a spreadsheet in a European locale), quoted cells holding
    the delimiter, commas and line breaks: the same records as the comma file; without the
    option the error points at it (before: no way to read such a file, and a hint about
    --no-header only)."""
    rows = [["id", "label", "text"], ["1", "a", "x; y, z"], ["2", "b", 'two\nlines "quoted"'], ["3", "a", "plain"]]

    def written(delimiter):
        out = io.StringIO()
        csv.writer(out, delimiter=delimiter).writerows(rows)
        return out.getvalue()

    comma, semi = write(tmp_path, written(","), "comma.csv"), write(tmp_path, written(";"), "semi.csv")
    expected = read.batches(open_source(comma, policy=BadRecordPolicy(), id_field="id", batch_size=batch_size))
    got = read.batches(
        open_source(semi, policy=BadRecordPolicy(), id_field="id", delimiter=";", batch_size=batch_size), batch_size
    )
    assert read.texts(got) == read.texts(expected) == ["x; y, z", 'two\nlines "quoted"', "plain"]
    assert read.labels(got) == read.labels(expected) and read.locations(got) == [f"{semi}:{n}" for n in (2, 3, 5)]
    with pytest.raises(InputError) as e:
        list(open_source(semi, policy=BadRecordPolicy()))
    assert "its header holds ';': for cells separated so, pass --option delimiter=';'" in e.value.hint
    for bad in (";;", '"', "\n"):
        with pytest.raises(ConfigError, match="format option delimiter=.*one character other than a quote"):
            open_source(semi, policy=BadRecordPolicy(), delimiter=bad)


_READ_STDIN = """
import sys
from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, open_source
try:
    for _ in open_source("<stdin>", "csv", policy=BadRecordPolicy(), encoding="utf-8"):
        pass
except InputError as e:
    print(e.location, e.problem, sep="|")
"""


@pytest.mark.parametrize(
    "text",
    [
        "text,label\n" + "a cat,x\n" * 3000 + "b\xff,y\n" + "a dog,x\n" * 5,  # far past the first decoded piece
        "text,label\r\n" + "a cat,x\r\n" * 40 + "b\xff,y\r\n",  # in the first piece, CRLF
        'text,label\n"two\nlines",x\n' * 500 + '"three\nlines\n\xff",y\n',  # inside a quoted record
    ],
)
def test_undecodable_text_on_a_pipe_names_its_line_as_the_files_error_does(tmp_path, text):
    """A CSV read once from a real pipe, whose text does not decode: the error names the line of
    the bad bytes (not the last line read before the piece that holds them), the line the same
    bytes in a file are found at by reading the file again."""
    import subprocess
    import sys

    data = text.encode("latin-1")
    path = tmp_path / "data.csv"
    path.write_bytes(data)
    with pytest.raises(InputError) as e:
        for _ in open_source(str(path), policy=BadRecordPolicy(), encoding="utf-8"):
            pass
    done = subprocess.run([sys.executable, "-c", _READ_STDIN], input=data, capture_output=True, check=True, timeout=300)
    assert done.stdout.decode().strip() == f"<stdin>:{e.value.location.rsplit(':', 1)[1]}|{e.value.problem}"
