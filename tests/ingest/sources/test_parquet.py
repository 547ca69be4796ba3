"""Parquet reader: text mode and indexed (sparse) mode."""

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import scipy.sparse as sp

from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, SparseBatch, TextBatch, open_source

TEXTS = ["the rocket launched", "a fine goal", "new GPU", "", "unicode é 漢字", "last one", "more", "and more"]
LABELS = ["space", "sport", "tech", "empty", "space", "sport", "tech", "space"]


def write(tmp_path, columns, name="data.parquet", row_group_size=3, schema=None):
    path = str(tmp_path / name)
    pq.write_table(pa.table(columns, schema=schema), path, row_group_size=row_group_size)
    return path


def location(path, row):
    return f"{path}:row group {row // 3}, row {row % 3}"


@pytest.mark.parametrize("batch_size", [1, 2, 8192])
def test_text_mode(read, tmp_path, batch_size):
    path = write(tmp_path, {"text": TEXTS, "label": LABELS, "other": list(range(8))})
    source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size)
    assert source.kind == "text" and source.multilabel is False
    batches = read.batches(source, batch_size)
    assert all(isinstance(b, TextBatch) for b in batches)
    assert read.texts(batches) == TEXTS and read.labels(batches) == LABELS
    assert read.locations(batches) == [location(path, r) for r in range(8)]
    assert source.n_read == 8


def test_text_fields_integer_labels_and_lists(read, tmp_path):
    path = write(tmp_path, {"title": ["a", "b"], "body": ["x", "y"], "tags": [[1, 2], []]})
    source = open_source(path, policy=BadRecordPolicy(), text_field="title,body", label_field="tags")
    assert source.multilabel is True
    batches = read.batches(source)
    assert read.texts(batches, "title") == ["a", "b"] and read.texts(batches, "body") == ["x", "y"]
    assert read.labels(batches) == [["1", "2"], []]


def indexed_columns():
    rng = np.random.default_rng(0)
    X = sp.random(8, 30, density=0.2, format="lil", random_state=rng)
    X[0, 29] = 0.5  # the widest column in the first row group
    X = X.tocsr()
    indices = [X.indices[X.indptr[i] : X.indptr[i + 1]].tolist() for i in range(8)]
    values = [X.data[X.indptr[i] : X.indptr[i + 1]].tolist() for i in range(8)]
    return X, {"indices": indices, "values": values, "label": list(LABELS)}


@pytest.mark.parametrize("batch_size", [1, 2, 8192])
def test_indexed_mode(read, tmp_path, batch_size):
    X, columns = indexed_columns()
    # reverse each row: the reader sorts indices
    columns["indices"] = [row[::-1] for row in columns["indices"]]
    columns["values"] = [row[::-1] for row in columns["values"]]
    path = write(tmp_path, columns)
    source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size)
    assert source.kind == "sparse"
    batches = read.batches(source, batch_size)
    assert all(isinstance(b, SparseBatch) for b in batches)
    assert (read.sparse(batches, 30) != X).nnz == 0
    assert read.labels(batches) == LABELS and source.n_read == 8


def test_indexed_mode_other_columns_and_types(read, tmp_path):
    schema = pa.schema(
        [("idx", pa.large_list(pa.int32())), ("val", pa.list_(pa.float32())), ("ys", pa.list_(pa.string()))]
    )
    path = write(tmp_path, {"idx": [[0, 4], [2]], "val": [[1.5, 2.0], [3.0]], "ys": [["a", "b"], ["c"]]}, schema=schema)
    source = open_source(path, policy=BadRecordPolicy(), indices_field="idx", values_field="val", labels_field="ys")
    assert source.multilabel is True
    batches = read.batches(source)
    assert read.sparse(batches).toarray().tolist() == [[1.5, 0, 0, 0, 2.0], [0, 0, 3.0, 0, 0]]
    assert read.labels(batches) == [["a", "b"], ["c"]]


def test_sliced_row_groups_keep_offsets_right(read, tmp_path):
    # many small batches inside row groups exercise list-array offsets that do not start at 0
    n = 50
    columns = {
        "indices": [[i, i + 1] for i in range(n)],
        "values": [[float(i), -1.0] for i in range(n)],
        "label": ["a"] * n,
    }
    path = write(tmp_path, columns, row_group_size=7)
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), batch_size=3), 3)
    X = read.sparse(batches)
    assert X.indices.tolist() == [j for i in range(n) for j in (i, i + 1)]
    assert X.data.tolist() == [v for i in range(n) for v in (float(i), -1.0)]


def test_id_field_gives_each_record_its_id(read, tmp_path):
    """id_field: each kept record carries its id column's value as text, in text and indexed
    mode; a null id is a bad record (skipped here), a missing or float id column an InputError."""
    text = write(tmp_path, {"text": ["a", "b", "c"], "key": [7, None, 9]}, name="text.parquet")
    policy = BadRecordPolicy("skip")
    batches = read.batches(open_source(text, policy=policy, label_field=None, id_field="key", batch_size=2))
    assert [i for b in batches for i in b.ids] == ["7", "9"] and read.texts(batches) == ["a", "c"]
    assert policy.n_skipped == 1
    _, columns = indexed_columns()
    columns["doc"] = [f"d{i}" for i in range(8)]
    batches = read.batches(open_source(write(tmp_path, columns), policy=BadRecordPolicy(), id_field="doc"))
    assert [i for b in batches for i in b.ids] == columns["doc"]
    assert all(b.ids is None for b in read.batches(open_source(text, policy=BadRecordPolicy("skip"), label_field=None)))
    with pytest.raises(InputError, match="no column 'doc'.*--id-field"):
        open_source(text, policy=BadRecordPolicy(), label_field=None, id_field="doc")
    floats = write(tmp_path, {"text": ["a"], "key": [1.5]}, name="floats.parquet")
    with pytest.raises(InputError, match="column 'key' holds double, not strings or integers"):
        open_source(floats, policy=BadRecordPolicy(), label_field=None, id_field="key")


def test_a_label_column_of_reals_names_both_fixes(tmp_path):
    """qa30: class ids saved as reals (a pandas integer column with a missing value becomes
    float64) were refused with the regression fix alone; the line names the cast too."""
    path = write(tmp_path, {"text": ["a", "b"], "label": [1.0, 2.0]})
    with pytest.raises(InputError) as e:
        open_source(path, policy=BadRecordPolicy())
    assert e.value.problem == "column 'label' holds double: real numbers, not class names"
    assert e.value.hint == (
        "for a real-valued target (regression) pass --target numeric; class ids saved as reals (1.0, 2.0): cast "
        "the column to integers or strings"
    )


@pytest.mark.parametrize(
    "columns, option",
    [
        ({"body": ["x"], "label": ["a"]}, "--text-field"),
        ({"text": ["x"], "y": ["a"]}, "--label-field"),
        ({"indices": [[1]], "label": ["a"]}, "values_field"),
    ],
)
def test_missing_column(tmp_path, columns, option):
    path = write(tmp_path, columns)
    with pytest.raises(InputError) as e:
        open_source(path, policy=BadRecordPolicy())
    assert e.value.location == path and option in e.value.hint
    assert all(repr(name) in e.value.hint for name in columns)


def test_missing_labels_field(tmp_path):
    path = write(tmp_path, {"text": ["x"], "label": ["a"]})
    with pytest.raises(InputError, match="no column 'tags'.*--option labels_field"):
        open_source(path, policy=BadRecordPolicy(), labels_field="tags")


def test_wrong_column_type(tmp_path):
    path = write(tmp_path, {"text": [1, 2], "label": ["a", "b"]})
    with pytest.raises(InputError, match="column 'text' holds int64, not a string column"):
        open_source(path, policy=BadRecordPolicy())


def test_not_parquet(tmp_path):
    path = tmp_path / "x.parquet"
    path.write_text("hello")
    with pytest.raises(InputError, match="x.parquet: not a readable Parquet file"):
        open_source(str(path), policy=BadRecordPolicy())


TEXT_BAD = [
    ("text", None, "null text in 'text'"),
    ("label", None, "null label in 'label'"),
    ("label", "", "empty label"),
]
SPARSE_BAD = [
    ({"indices": None}, "null 'indices'"),
    ({"values": None}, "null 'values'"),
    ({"indices": [1, 2], "values": [1.0]}, "differ in length"),
    ({"indices": [1, -2], "values": [1.0, 1.0]}, "out-of-range index"),
    ({"indices": [1, None], "values": [1.0, 1.0]}, "out-of-range index"),
    ({"indices": [1, 2], "values": [1.0, float("nan")]}, "NaN or infinite value"),
    ({"indices": [1, 2], "values": [1.0, float("inf")]}, "NaN or infinite value"),
    ({"indices": [1, 2], "values": [1.0, 1e300]}, "beyond float32's ±3.4e38"),
    ({"indices": [1, 2], "values": [None, 1.0]}, "null, NaN or infinite value"),
    ({"indices": [3, 1, 3], "values": [1.0, 1.0, 2.0]}, "index repeats"),
    ({"label": None}, "null label"),
]


def text_file_with_bad_row(tmp_path, column, value):
    columns = {"text": list(TEXTS), "label": list(LABELS)}
    columns[column][4] = value
    return write(tmp_path, columns)


def sparse_file_with_bad_row(tmp_path, change):
    _, columns = indexed_columns()
    for key, value in change.items():
        columns[key][4] = value
    return write(tmp_path, columns)


@pytest.mark.parametrize("column, value, problem", TEXT_BAD)
def test_text_bad_record_error_mode(tmp_path, column, value, problem):
    path = text_file_with_bad_row(tmp_path, column, value)
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:row group 1, row 1" and problem in e.value.problem


@pytest.mark.parametrize("change, problem", SPARSE_BAD)
def test_sparse_bad_record_error_mode(tmp_path, change, problem):
    path = sparse_file_with_bad_row(tmp_path, change)
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:row group 1, row 1" and problem in e.value.problem


@pytest.mark.parametrize("column, value, problem", TEXT_BAD)
@pytest.mark.parametrize("batch_size", [1, 2, 8192])
def test_text_bad_record_skip_and_quarantine(read, tmp_path, quarantine, column, value, problem, batch_size):
    path = text_file_with_bad_row(tmp_path, column, value)
    source = open_source(path, policy=quarantine, batch_size=batch_size)
    batches = read.batches(source, batch_size)
    assert read.texts(batches) == TEXTS[:4] + TEXTS[5:] and read.labels(batches) == LABELS[:4] + LABELS[5:]
    assert source.n_read == 8 and quarantine.n_skipped == 1
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:row group 1, row 1" and problem in entry["problem"]
    assert entry["raw"].startswith('{"text": ')


@pytest.mark.parametrize("change, problem", SPARSE_BAD)
@pytest.mark.parametrize("batch_size", [1, 2, 8192])
def test_sparse_bad_record_skip_and_quarantine(read, tmp_path, quarantine, change, problem, batch_size):
    X, _ = indexed_columns()
    path = sparse_file_with_bad_row(tmp_path, change)
    source = open_source(path, policy=quarantine, batch_size=batch_size)
    batches = read.batches(source, batch_size)
    keep = [r for r in range(8) if r != 4]
    assert (read.sparse(batches, 30) != X[keep]).nnz == 0
    assert read.labels(batches) == [LABELS[r] for r in keep]
    assert source.n_read == 8 and quarantine.n_skipped == 1
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:row group 1, row 1" and problem in entry["problem"]
    assert entry["raw"].startswith('{"indices": ')


@pytest.mark.parametrize("columns", [{"text": TEXTS[:2]}, {"indices": [[0, 2], [1]], "values": [[1.0, 2.0], [3.0]]}])
def test_no_label_field_reads_unlabeled_rows(read, tmp_path, columns):
    path = write(tmp_path, columns)
    source = open_source(path, policy=BadRecordPolicy(), label_field=None)
    assert read.labels(read.batches(source)) == [None, None] and source.multilabel is False


def _not_utf8(values: list[bytes]) -> pa.Array:
    """A string column holding the given bytes, valid UTF-8 or not (pyarrow writes them as they are)."""
    return pa.array(values, type=pa.binary()).view(pa.string())


def test_strings_that_are_not_utf8_are_bad_records(read, tmp_path):
    """Invalid UTF-8 in a string column made a UnicodeDecodeError traceback (issue 22)."""
    tokens = pa.ListArray.from_arrays(pa.array([0, 1, 2, 3, 4], pa.int32()), _not_utf8([b"a", b"b\xff", b"c", b"d"]))
    columns = {
        "text": _not_utf8([b"fine", b"bad \xff text", b"fine", b"also fine"]),
        "tokens": tokens,
        "label": _not_utf8([b"x", b"y", b"\xfe", b"\xc3\xa9"]),
    }
    path = write(tmp_path, columns, row_group_size=2)
    with pytest.raises(InputError, match=r"row group 0, row 1: 'text' holds bytes that are not UTF-8 text \(invalid"):
        list(open_source(path, policy=BadRecordPolicy()))
    quarantine = str(tmp_path / "q.jsonl")
    with BadRecordPolicy("quarantine", quarantine) as policy:
        batches = read.batches(open_source(path, policy=policy))
    assert read.texts(batches) == ["fine", "also fine"] and read.labels(batches) == ["x", "é"]
    entries = [json.loads(line) for line in open(quarantine, encoding="utf-8")]
    assert [e["location"] for e in entries] == [f"{path}:row group 0, row 1", f"{path}:row group 1, row 0"]
    assert "'label' holds bytes that are not UTF-8" in entries[1]["problem"]
    assert json.loads(entries[0]["raw"]) == {"text": "bad \\xff text", "label": "y"}  # the columns read
    with BadRecordPolicy("skip") as policy:
        batches = read.batches(open_source(path, policy=policy, text_field="tokens"))
    assert read.texts(batches, "tokens") == [["a"], ["d"]] and policy.n_skipped == 2


@pytest.mark.parametrize("batch_size", [1, 2, 8192])
def test_feature_columns_mode(read, tmp_path, batch_size, quarantine):
    """feature_fields: a table of numeric columns is read as features 0, 1, … in the order named
    (other columns, a text column too, ignored; zeros left out); a null, NaN or infinite cell is a
    bad record at its row, with the ids of the others kept."""
    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(8, 3)), 3) * (rng.random((8, 3)) < 0.7)
    columns = {"b": X[:, 1], "a": X[:, 0].astype(np.float32), "c": (X[:, 2] * 1000).astype(np.int64)}
    columns |= {"text": TEXTS, "label": LABELS, "key": [f"k{r}" for r in range(8)]}
    columns["b"] = columns["b"].tolist()
    columns["b"][4] = None
    columns["a"][6] = np.nan
    path = write(tmp_path, columns)
    source = open_source(path, policy=quarantine, batch_size=batch_size, feature_fields="a, b,c", id_field="key")
    assert source.kind == "sparse"
    batches = read.batches(source, batch_size)
    kept = [r for r in range(8) if r not in (4, 6)]
    expected = np.column_stack([X[:, 0].astype(np.float32), X[:, 1], np.round(X[:, 2] * 1000)])[kept]
    got = read.sparse(batches, 3)
    assert got.shape == (6, 3) and np.array_equal(got.toarray(), expected) and not (got.data == 0).any()
    assert read.labels(batches) == [LABELS[r] for r in kept]
    assert [i for b in batches for i in b.ids] == [f"k{r}" for r in kept]
    assert [(e["location"], e["problem"]) for e in quarantine.entries()] == [
        (location(path, 4), "null in column 'b'"),
        (location(path, 6), "column 'a' holds nan: NaN, infinite or beyond float32's ±3.4e38 (scale it)"),
    ]
    with pytest.raises(InputError, match=r"no column 'd' \(check --option feature_fields; the columns are 'b', 'a'"):
        open_source(path, policy=BadRecordPolicy(), feature_fields="a,d")
    with pytest.raises(InputError, match="column 'text' holds string, not numbers"):
        open_source(path, policy=BadRecordPolicy(), feature_fields="a,text")


def test_a_feature_table_from_ingest_to_predict(tmp_path):
    """A Parquet feature table through the CLI: the store holds the columns as given (--no-hash),
    and predict reads new rows with the recorded feature_fields."""
    from click.testing import CliRunner

    from streamfit.cli import main
    from streamfit.store import open_store

    rng = np.random.default_rng(1)
    X = rng.normal(size=(60, 4))
    path = write(
        tmp_path, {**{f"f{j}": X[:, j] for j in range(4)}, "label": (X[:, 0] > 0).astype(int)}, row_group_size=25
    )
    args = ["ingest", path, "--no-hash", "--option", "feature_fields=f0,f1,f2,f3", "--out", tmp_path / "s"]
    for command in (args, ["train", tmp_path / "s", "--n-workers", "0", "--out", tmp_path / "r"]):
        result = CliRunner().invoke(main, ["-q", *map(str, command)], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    Xs, _ = open_store(str(tmp_path / "s")).to_scipy()
    assert np.array_equal(Xs.toarray(), X.astype(np.float32))
    new = write(tmp_path, {f"f{j}": X[:5, j] for j in range(4)}, name="new.parquet")
    result = CliRunner().invoke(main, ["-q", "predict", str(tmp_path / "r"), new, "-o", str(tmp_path / "p.csv")])
    assert result.exit_code == 0, result.output
    assert len((tmp_path / "p.csv").read_text().splitlines()) == 6


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_struct_fields_by_dotted_path(read, tmp_path, batch_size):
    """Nested (struct) columns, as a data engineer's tables often are: text, label, id and
    numeric feature fields named by dotted paths read as the same rows flat columns give; a
    null struct is a null label (a bad record). Before: "no column 'body.text'"."""
    rows = [
        {
            "id": i,
            "meta": {"topic": LABELS[i], "n": {"x": float(i), "y": 0.0 if i % 2 else 2.5}},
            "body": {"t": TEXTS[i]},
        }
        for i in range(8)
    ]
    path = str(tmp_path / "nested.parquet")
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=3)
    flat = write(tmp_path, {"text": TEXTS, "label": LABELS, "id": list(range(8))}, name="flat.parquet")
    nested = read.batches(
        open_source(
            path,
            policy=BadRecordPolicy(),
            batch_size=batch_size,
            text_field="body.t",
            label_field="meta.topic",
            id_field="id",
        ),
        batch_size,
    )
    plain = read.batches(open_source(flat, policy=BadRecordPolicy(), batch_size=batch_size, id_field="id"), batch_size)
    assert read.texts(nested, "body.t") == read.texts(plain) == TEXTS
    assert read.labels(nested) == read.labels(plain) and [i for b in nested for i in b.ids] == [
        str(i) for i in range(8)
    ]
    numeric = open_source(
        path,
        policy=BadRecordPolicy(),
        batch_size=batch_size,
        feature_fields="meta.n.x,meta.n.y",
        label_field="meta.topic",
    )
    X = sp.vstack([b.X for b in read.batches(numeric, batch_size)]).toarray()
    assert np.array_equal(X, [[float(i), 0.0 if i % 2 else 2.5] for i in range(8)])
    rows[2]["meta"] = None
    pq.write_table(pa.Table.from_pylist(rows), path, row_group_size=3)
    with pytest.raises(InputError, match="null label in 'meta.topic'") as e:
        list(open_source(path, policy=BadRecordPolicy(), text_field="body.t", label_field="meta.topic"))
    assert e.value.location == location(path, 2)
