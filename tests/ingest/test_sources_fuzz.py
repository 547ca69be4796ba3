"""Hostile input for the LIBSVM, text and Parquet readers: random lines, NaN/inf, bad indices,
wrong encodings, wrong Parquet column types and contents, truncated files. Every case ends in a
clean InputError naming the file (and row or line) or in counted skips (read = kept + skipped),
never in another exception; where the good records are known, exactly they come out unchanged."""

import gzip
import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, open_source

FUZZ = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(max_size=20),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3),
    max_leaves=6,
)
jsonl_lines = st.one_of(
    st.text(max_size=40).filter(lambda s: "\n" not in s and "\r" not in s),
    st.builds(
        lambda d: json.dumps(d), st.dictionaries(st.sampled_from(["text", "label", "x"]), json_values, max_size=3)
    ),
    st.just('{"text": "a fine document", "label": "ok"}'),
)
GOOD = '{"text": "a fine document", "label": "ok"}'  # the last strategy above


def _drain(path, **options):
    """(records kept, records skipped, n_read) of a skip-mode read; InputError passes through."""
    policy = BadRecordPolicy("skip")
    source = open_source(str(path), policy=policy, **options)
    kept = sum(len(batch.labels) for batch in source)
    return kept, policy.n_skipped, source.n_read


@FUZZ
@given(lines=st.lists(jsonl_lines, max_size=20))
def test_jsonl_garbage_is_skipped_and_counted(tmp_path, lines):
    path = tmp_path / "fuzz.jsonl"
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    kept, skipped, n_read = _drain(path)
    assert kept + skipped == n_read == sum(1 for line in lines if line.encode().strip())  # blank: ASCII whitespace
    assert kept >= lines.count(GOOD)  # well-formed records always survive the garbage around them


csv_cells = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=15)


@FUZZ
@given(rows=st.lists(st.lists(csv_cells, min_size=0, max_size=4), max_size=15))
def test_csv_garbage_never_crashes(tmp_path, rows):
    import csv

    path = tmp_path / "fuzz.csv"
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["text", "label"])
        writer.writerows(rows)
    kept, skipped, n_read = _drain(path)  # valid UTF-8 CSV with the columns: bad rows are skipped, never fatal
    assert kept + skipped == n_read == sum(1 for row in rows if row)  # csv.writer writes [] as a blank line


def _csv_junk_error(path, data):
    """The InputError a skip-mode read of `data` (under 8 KiB: one decoded chunk) as CSV must
    end in, predicted without the reader: (location, problem pattern), or None for a clean read.
    Bytes that are not UTF-8 stop the read naming the line that holds the first of them (line
    breaks \\r\\n, \\r or \\n counted before it); a header without the text or label column
    stops it at line 1. The decoder raises at once on invalid bytes, but holds a sequence cut by
    the end of the file until the end: the rows before it, the header first, are read by then."""
    import csv
    import io
    import re

    decode_problem = r"the bytes .+ are not valid utf-8 text"

    def at(bad_byte):
        breaks = len(re.findall(rb"\r\n|\r|\n", data[:bad_byte]))
        return f"{path}:{breaks + 1}"

    if data and b"\xef\xbb\xbf".startswith(data) and len(data) < 3:
        return None  # Python's incremental utf-8-sig decoder drops a lone BOM prefix at the end: an empty file
    try:
        text, bad_byte = data.decode("utf-8-sig"), None
    except UnicodeDecodeError as e:
        if e.reason != "unexpected end of data":
            return at(e.start), decode_problem
        text, bad_byte = data[: e.start].decode("utf-8-sig"), e.start
        complete = re.match(r"(?s).*(\r\n|\n|\r(?=.))", text)  # lines read before the decoder sees the end
        text = complete.group(0) if complete else ""
    header = next(csv.reader(io.StringIO(text, newline="")), None)
    for column in ("text", "label"):
        if header is not None and column not in header:
            return f"{path}:1", re.escape(f"no column {column!r}")
    return None if bad_byte is None else (at(bad_byte), decode_problem)


@FUZZ
@given(data=st.binary(max_size=200))
def test_wrong_encoding_and_binary_junk(tmp_path, data):
    """JSONL: every line is read, bad ones are counted. CSV: the read is clean or ends in the
    InputError predicted from the bytes, naming the file and the right line."""
    import re

    path = tmp_path / "junk.jsonl"
    path.write_bytes(data)
    kept, skipped, n_read = _drain(path)
    assert kept + skipped == n_read == sum(1 for line in data.split(b"\n") if line.strip())

    path = tmp_path / "junk.csv"
    path.write_bytes(data)
    expected = _csv_junk_error(path, data)
    if expected is None:
        event("csv junk: clean")
        kept, skipped, n_read = _drain(path)
        assert kept + skipped == n_read
        return
    location, problem = expected
    with pytest.raises(InputError) as raised:
        _drain(path)
    event(f"csv junk: {raised.value.problem.split(' ')[0]}")
    assert raised.value.location == location
    assert re.fullmatch(problem, raised.value.problem), raised.value.problem


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9])
def test_truncated_parquet_and_gzip_are_clean_errors(tmp_path, cut):
    table = pa.table(
        {"text": [f"document number {i}" for i in range(2000)], "label": [str(i % 3) for i in range(2000)]}
    )
    full = tmp_path / "full.parquet"
    pq.write_table(table, str(full), row_group_size=500)
    raw = full.read_bytes()
    cut_path = tmp_path / "cut.parquet"
    cut_path.write_bytes(raw[: int(len(raw) * cut)])
    with pytest.raises(InputError, match="cut.parquet"):
        _drain(cut_path)
    gz = gzip.compress("".join(json.dumps({"text": f"doc {i}", "label": "a"}) + "\n" for i in range(3000)).encode())
    cut_gz = tmp_path / "cut.jsonl.gz"
    cut_gz.write_bytes(gz[: int(len(gz) * cut)])
    with pytest.raises(InputError, match="cut.jsonl.gz"):
        _drain(cut_gz)


# ------------------------------------------------------------------ Parquet content
# Each generated row is good or carries one defect; the reader must skip exactly the defective
# rows (skip mode) or stop at the first one naming its row group, row and column (error mode),
# and hand over the good rows unchanged: indices sorted, values moved with them.

PARQUET_FUZZ = settings(FUZZ, max_examples=200)
ROW_DEFECTS = [
    "null indices",
    "null values",
    "null index",
    "null value",
    "negative index",
    "huge index",
    "nan",
    "inf",
    "-inf",
    "length mismatch",
    "repeated index",
    "null label",
    "empty label",
]
TEXT_DEFECTS = ["null text", "null token", "null label", "empty label"]


@st.composite
def _sparse_row(draw, label_type):
    n = draw(st.integers(0, 5))
    indices = draw(st.lists(st.integers(0, 60), min_size=n, max_size=n, unique=True))
    values = draw(st.lists(st.floats(-1e6, 1e6, allow_nan=False), min_size=n, max_size=n))
    label = draw(st.sampled_from(["a", "b", "ç"]) if label_type == "string" else st.integers(-5, 5))
    defect = draw(st.one_of(st.just(None), st.sampled_from(ROW_DEFECTS)))
    if defect in ("null index", "null value", "negative index", "huge index", "nan", "inf", "-inf") and not n:
        indices, values = [61], [1.0]  # the defect needs an entry
    k = draw(st.integers(0, len(indices) - 1)) if indices else 0
    if defect == "null indices":
        indices = None
    elif defect == "null values":
        values = None
    elif defect == "null index":
        indices[k] = None
    elif defect == "null value":
        values[k] = None
    elif defect in ("negative index", "huge index"):
        indices[k] = draw(
            st.integers(-(2**63), -1) if defect == "negative index" else st.integers(2**62 + 1, 2**63 - 1)
        )
    elif defect in ("nan", "inf", "-inf"):
        values[k] = float(defect)
    elif defect == "length mismatch":
        values = values + [2.0] if draw(st.booleans()) or not values else values[:-1]
    elif defect == "repeated index":
        indices, values = (
            indices + [indices[k] if indices else 7] * (1 if indices else 2),
            values + [3.0] * (1 if indices else 2),
        )
    elif defect == "null label":
        label = None
    elif defect == "empty label":
        label = "" if label_type == "string" else None
    return indices, values, label, defect


@st.composite
def _sparse_table(draw):
    label_type = draw(st.sampled_from(["string", "int64"]))
    value_type = draw(st.sampled_from([pa.float64(), pa.float32()]))
    rows = draw(st.lists(_sparse_row(label_type), max_size=14))
    table = pa.table(
        {
            "indices": pa.array([r[0] for r in rows], type=pa.list_(pa.int64())),
            "values": pa.array([r[1] for r in rows], type=pa.list_(value_type)),
            "label": pa.array([r[2] for r in rows], type=pa.string() if label_type == "string" else pa.int64()),
        }
    )
    return table, rows, value_type


def _expected_sparse(row, value_type):
    """(sorted indices, values as the reader must give them, label) of a good row."""
    indices, values, label, _ = row
    order = np.argsort(np.asarray(indices, dtype=np.int64), kind="stable")
    cast = np.asarray(values, dtype=value_type.to_pandas_dtype()).astype(np.float64)
    return np.asarray(indices, dtype=np.int64)[order], cast[order], str(label)


def _first_defect(rows, defect_index, row_group_size):
    """The location of the first defective row, as the reader names it, or None."""
    bad = [i for i, r in enumerate(rows) if r[defect_index] is not None]
    if not bad:
        return None
    return f"row group {bad[0] // row_group_size}, row {bad[0] % row_group_size}"


@PARQUET_FUZZ
@given(case=_sparse_table(), row_group_size=st.integers(1, 6), batch_size=st.integers(1, 5))
def test_parquet_sparse_content_skips_exactly_the_bad_rows(tmp_path, case, row_group_size, batch_size):
    table, rows, value_type = case
    path = tmp_path / "fuzz.parquet"
    pq.write_table(table, str(path), row_group_size=row_group_size)
    policy = BadRecordPolicy("skip")
    source = open_source(str(path), policy=policy, batch_size=batch_size)
    got = []
    for batch in source:
        X = batch.X.tocsr()
        got += [
            (X.indices[X.indptr[r] : X.indptr[r + 1]], X.data[X.indptr[r] : X.indptr[r + 1]], batch.labels[r])
            for r in range(X.shape[0])
        ]
    expected = [_expected_sparse(r, value_type) for r in rows if r[3] is None]
    assert source.n_read == len(rows) and policy.n_skipped == len(rows) - len(expected)
    assert len(got) == len(expected)
    for (gi, gv, gl), (ei, ev, el) in zip(got, expected):
        assert np.array_equal(gi, ei) and np.array_equal(gv, ev) and gl == el
    first = _first_defect(rows, 3, row_group_size)
    try:
        list(open_source(str(path), policy=BadRecordPolicy(), batch_size=batch_size))
    except InputError as e:
        event(f"parquet sparse: error ({rows[[r[3] is not None for r in rows].index(True)][3]})")
        assert e.location == f"{path}:{first}"
        assert any(f"'{c}'" in e.problem for c in ("indices", "values", "label")), e.problem
    else:
        event("parquet sparse: clean")
        assert first is None


@st.composite
def _text_table(draw):
    tokens = draw(st.booleans())
    label_type = draw(st.sampled_from(["string", "int64"]))
    rows = []
    for _ in range(draw(st.integers(0, 12))):
        text = draw(st.lists(st.text(max_size=6), max_size=4) if tokens else st.text(max_size=20))
        label = draw(st.sampled_from(["x", "y", "ü"]) if label_type == "string" else st.integers(0, 3))
        defect = draw(st.one_of(st.just(None), st.sampled_from(TEXT_DEFECTS)))
        if defect == "null text" or (defect == "null token" and not tokens):
            text, defect = None, "null text"
        elif defect == "null token":
            text = text + [None]
        elif defect == "null label" or (defect == "empty label" and label_type != "string"):
            label, defect = None, "null label"
        elif defect == "empty label":
            label = ""
        rows.append((text, label, defect))
    text_type = pa.list_(pa.string()) if tokens else pa.string()
    table = pa.table(
        {
            "text": pa.array([r[0] for r in rows], type=text_type),
            "label": pa.array([r[1] for r in rows], type=pa.string() if label_type == "string" else pa.int64()),
        }
    )
    return table, rows


@PARQUET_FUZZ
@given(case=_text_table(), row_group_size=st.integers(1, 6), batch_size=st.integers(1, 5))
def test_parquet_text_content_skips_exactly_the_bad_rows(tmp_path, case, row_group_size, batch_size):
    table, rows = case
    path = tmp_path / "fuzz.parquet"
    pq.write_table(table, str(path), row_group_size=row_group_size)
    policy = BadRecordPolicy("skip")
    source = open_source(str(path), policy=policy, batch_size=batch_size)
    got = [(t, lab) for batch in source for t, lab in zip(batch.texts["text"], batch.labels)]
    assert got == [(t, str(lab)) for t, lab, defect in rows if defect is None]
    assert source.n_read == len(rows) and policy.n_skipped == len(rows) - len(got)
    first = _first_defect(rows, 2, row_group_size)
    try:
        list(open_source(str(path), policy=BadRecordPolicy(), batch_size=batch_size))
    except InputError as e:
        event("parquet text: error")
        assert e.location == f"{path}:{first}" and ("'text'" in e.problem or "'label'" in e.problem), str(e)
    else:
        event("parquet text: clean")
        assert first is None


ARROW_TYPES = {
    "int64": pa.int64(),
    "float64": pa.float64(),
    "string": pa.string(),
    "bool": pa.bool_(),
    "list<int64>": pa.list_(pa.int64()),
    "list<float32>": pa.list_(pa.float32()),
    "list<string>": pa.list_(pa.string()),
    "struct": pa.struct([("a", pa.int64())]),
}
ACCEPTED = {  # what the reader's docstring promises each column may hold
    "text": {"string", "list<string>"},
    "label": {"int64", "string", "list<int64>", "list<string>"},
    "indices": {"list<int64>"},
    "values": {"list<int64>", "list<float32>"},
}


@settings(FUZZ, max_examples=100)
@given(
    kind=st.sampled_from(["text", "sparse"]),
    types=st.fixed_dictionaries(
        {c: st.sampled_from(sorted(ACCEPTED[c])) | st.sampled_from(sorted(ARROW_TYPES)) for c in ACCEPTED}
    ),
    label_field=st.sampled_from(["label", "label", "category"]),
)
def test_parquet_wrong_column_types_are_clean_errors(tmp_path, kind, types, label_field):
    columns = ["text", "label"] if kind == "text" else ["indices", "values", "label"]
    table = pa.table({c: pa.nulls(2, type=ARROW_TYPES[types[c]]) for c in columns})
    path = tmp_path / "typed.parquet"
    pq.write_table(table, str(path))
    wrong = [c for c in columns if types[c] not in ACCEPTED[c]]
    policy = BadRecordPolicy("skip")
    try:
        source = open_source(str(path), policy=policy, label_field=label_field)
        kept = sum(len(batch.labels) for batch in source)
    except InputError as e:
        event("parquet schema: error")
        assert e.location == str(path)
        named = wrong + (["category"] if label_field == "category" else [])
        assert any(f"column '{c}'" in e.problem for c in named), (named, e.problem)
    else:
        event("parquet schema: accepted, null rows skipped")
        assert not wrong and label_field == "label"
        assert kept == 0 and policy.n_skipped == source.n_read == 2  # every value is null


# ------------------------------------------------------- NaN/inf and wrong encodings (text formats)
NONFINITE = ["nan", "NaN", "-nan", "inf", "-inf", "Infinity", "1e999", "-1e400"]
LIBSVM_DEFECTS = ["non-finite value", "index 0", "negative index", "huge index", "latin-1 label", "utf-16 line"]


@st.composite
def _libsvm_line(draw):
    """(line bytes, (columns, values, label) the reader must give, or None for a bad line)."""
    n = draw(st.integers(0, 4))
    indices = sorted(draw(st.lists(st.integers(1, 60), min_size=n, max_size=n, unique=True)))
    values = draw(st.lists(st.floats(-1e9, 1e9, allow_nan=False), min_size=n, max_size=n))
    label = str(draw(st.integers(0, 3)))
    tokens = [f"{i}:{v!r}" for i, v in zip(indices, values)]
    defect = draw(st.one_of(st.just(None), st.sampled_from(LIBSVM_DEFECTS)))
    if defect == "non-finite value":
        tokens.insert(draw(st.integers(0, n)), f"61:{draw(st.sampled_from(NONFINITE))}")
    elif defect == "index 0":
        tokens.append("0:1")
    elif defect == "negative index":
        tokens.append(f"-{draw(st.integers(1, 2**70))}:1")
    elif defect == "huge index":
        tokens.append(f"{draw(st.integers(2**62 + 2, 2**80))}:1")
    line = " ".join([label, *tokens]).encode()
    if defect == "latin-1 label":
        line = b"\xe9" + line
    elif defect == "utf-16 line":
        line = line.decode().encode("utf-16-le")
    expected = (
        None if defect else (np.asarray(indices, dtype=np.int64) - 1, np.asarray(values, dtype=np.float64), label)
    )
    return line, expected


@settings(FUZZ, max_examples=150)
@given(lines=st.lists(_libsvm_line(), max_size=12), batch_size=st.integers(1, 4))
def test_libsvm_nonfinite_values_bad_indices_and_encodings_skip_exactly_the_bad_lines(tmp_path, lines, batch_size):
    path = tmp_path / "fuzz.svm"
    path.write_bytes(b"\n".join(line for line, _ in lines) + b"\n")
    policy = BadRecordPolicy("skip")
    source = open_source(str(path), policy=policy, batch_size=batch_size, multilabel=False)
    got = []
    for batch in source:
        X = batch.X.tocsr()
        got += [
            (X.indices[X.indptr[r] : X.indptr[r + 1]], X.data[X.indptr[r] : X.indptr[r + 1]], batch.labels[r])
            for r in range(X.shape[0])
        ]
    expected = [e for _, e in lines if e is not None]
    assert source.n_read == len(lines) and policy.n_skipped == len(lines) - len(expected) == len(lines) - len(got)
    for (gi, gv, gl), (ei, ev, el) in zip(got, expected):
        assert np.array_equal(gi, ei) and np.array_equal(gv, ev) and gl == el
    bad = [i for i, (_, e) in enumerate(lines) if e is None]
    try:
        list(open_source(str(path), policy=BadRecordPolicy(), batch_size=batch_size, multilabel=False))
    except InputError as e:
        event("libsvm: error")
        assert e.location == f"{path}:{bad[0] + 1}"
    else:
        event("libsvm: clean")
        assert not bad


JSONL_DEFECTS = {
    "NaN text": b'{"text": NaN, "label": "a"}',
    "inf text": b'{"text": Infinity, "label": "a"}',
    "overflowing text": b'{"text": 1e999, "label": "a"}',
    "NaN label": b'{"text": "t", "label": NaN}',
    "-inf label": b'{"text": "t", "label": -Infinity}',
    "latin-1 line": '{"text": "café", "label": "a"}'.encode("latin-1"),
    "utf-16 line": '{"text": "t", "label": "a"}'.encode("utf-16-le"),
}


@FUZZ
@given(
    records=st.lists(
        st.one_of(
            st.tuples(st.text(max_size=12), st.sampled_from(["a", "NaN", "inf"])),
            st.sampled_from(sorted(JSONL_DEFECTS)),
        ),
        max_size=12,
    )
)
def test_jsonl_nonfinite_numbers_and_wrong_encodings_skip_exactly_the_bad_lines(tmp_path, records):
    lines = [
        JSONL_DEFECTS[r] if isinstance(r, str) else json.dumps({"text": r[0], "label": r[1]}).encode() for r in records
    ]
    path = tmp_path / "fuzz.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    policy = BadRecordPolicy("skip")
    source = open_source(str(path), policy=policy)
    got = [(t, lab) for batch in source for t, lab in zip(batch.texts["text"], batch.labels)]
    assert got == [r for r in records if not isinstance(r, str)]  # "NaN"/"inf" strings stay text
    assert source.n_read == len(records) and policy.n_skipped == len(records) - len(got)
    bad = [i for i, r in enumerate(records) if isinstance(r, str)]
    event("jsonl: bad lines present" if bad else "jsonl: clean")


@FUZZ
@given(
    rows=st.lists(
        st.tuples(st.text(alphabet="abcé ", min_size=1, max_size=8), st.sampled_from(["NaN", "inf", "-Infinity", "a"])),
        min_size=1,
        max_size=10,
    ),
    latin1=st.booleans(),
)
def test_csv_nonfinite_cells_are_text_and_a_wrong_encoding_is_a_clean_error(tmp_path, rows, latin1):
    text = "text,label\n" + "".join(f"{t},{lab}\n" for t, lab in rows)
    path = tmp_path / "fuzz.csv"
    path.write_bytes(text.encode("latin-1" if latin1 else "utf-8"))
    policy = BadRecordPolicy("skip")
    try:
        got = [
            (t, lab)
            for batch in open_source(str(path), policy=policy)
            for t, lab in zip(batch.texts["text"], batch.labels)
        ]
    except InputError as e:
        event("csv: wrong encoding, error")
        assert latin1 and "é" in text and str(path) in str(e) and "--encoding" in str(e)
    else:
        event("csv: read")
        assert not (latin1 and "é" in text)
        assert got == rows and policy.n_skipped == 0
