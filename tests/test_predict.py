"""`streamfit predict` on raw data: read like the training data, unlabeled rows, wrong inputs refused."""

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from streamfit.cli import main
from streamfit.errors import StreamfitError
from streamfit.store.format import json_digest

DOCS = [
    ("the cat sat on the mat", "animals"),
    ("dogs bark at cats", "animals"),
    ("stocks fell sharply today", "finance"),
    ("the market rallied on earnings", "finance"),
]


def run(*args, ok=True):
    result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
    if ok:
        assert result.exit_code == 0, result.output
    return result


def _train(d, name, raw, *ingest_args):
    run("ingest", raw, "--out", d / f"{name}.zarr", "--n-features", "1024", *ingest_args)
    run("train", d / f"{name}.zarr", "--solver", "bcd", "-p", "max_iter=3", "--n-workers", "0", "--out", d / name)
    return d / name


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Models trained on JSONL with fields body/topic and on latin-1 CSV with columns words/cls."""
    d = tmp_path_factory.mktemp("predict")
    (d / "train.jsonl").write_text("".join(json.dumps({"body": t, "topic": c}) + "\n" for t, c in DOCS))
    (d / "train.csv").write_text("words,cls\n" + "".join(f"{t} café,{c}\n" for t, c in DOCS), encoding="latin-1")
    _train(d, "jsonl", d / "train.jsonl", "--text-field", "body", "--label-field", "topic")
    _train(d, "csv", d / "train.csv", "--text-field", "words", "--label-field", "cls", "--encoding", "latin-1")
    return d


def test_unlabeled_jsonl_is_read_with_the_training_field_names(runs, tmp_path):
    raw = tmp_path / "new.jsonl"
    raw.write_text('{"body": "a cat and a dog"}\n{"body": "stocks and the market", "topic": "finance"}\n')
    result = run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.csv")
    assert "2 rows written" in result.output
    assert [r.split(",")[0] for r in (tmp_path / "p.csv").read_text().splitlines()] == [
        "location",
        f"{raw}:1",
        f"{raw}:2",
    ]


def test_unlabeled_csv_is_read_with_the_training_columns_and_encoding(runs, tmp_path):
    raw = tmp_path / "new.csv"
    raw.write_text("id,words\n7,a cat in a café\n", encoding="latin-1")
    run("predict", runs / "csv", raw, "-o", tmp_path / "p.jsonl")
    assert json.loads((tmp_path / "p.jsonl").read_text())["location"] == f"{raw}:2"


@pytest.mark.parametrize("kind", ["zip", "tgz"])
def test_a_zipped_csv_scores_as_the_extracted_file_named_by_its_member(runs, tmp_path, kind):
    """new.zip (or new.tgz) holding new.csv (and a README): the scores of new.csv, each row's
    location new.zip:new.csv:LINE."""
    import tarfile
    import zipfile

    raw = tmp_path / "new.csv"
    raw.write_text("id,words\n7,a cat in a café\n8,stocks and the market\n", encoding="latin-1")
    (tmp_path / "README").write_text("two new rows")
    archive = tmp_path / f"new.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.write(raw, "new.csv")
            zf.write(tmp_path / "README", "README")
    else:
        with tarfile.open(archive, "w:gz") as tf:
            tf.add(raw, "new.csv")
            tf.add(tmp_path / "README", "README")
    run("predict", runs / "csv", raw, "-o", tmp_path / "plain.jsonl")
    run("predict", runs / "csv", archive, "-o", tmp_path / "zipped.jsonl")
    plain = [json.loads(r) for r in (tmp_path / "plain.jsonl").read_text().splitlines()]
    zipped = [json.loads(r) for r in (tmp_path / "zipped.jsonl").read_text().splitlines()]
    assert [r.pop("location") for r in zipped] == [f"{archive}:new.csv:2", f"{archive}:new.csv:3"]
    assert [r.pop("location") for r in plain] == [f"{raw}:2", f"{raw}:3"]
    assert zipped == plain and len(plain) == 2


def test_an_explicit_option_overrides_the_recorded_one(runs, tmp_path):
    raw = tmp_path / "new.jsonl"
    raw.write_text('{"title": "a cat"}\n')
    result = run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.csv", ok=False)
    assert result.exit_code == 2 and "no field 'body'" in result.output
    run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.csv", "--option", "text_field=title")


def test_a_misspelled_option_is_named_with_the_closest_one(runs, tmp_path):
    """qa30: `--option text_fieldd=title` said `not read from jsonl input (it is for  input)`,
    a blank where the formats reading it go. The options are checked as ingest checks them."""
    raw = tmp_path / "new.jsonl"
    raw.write_text('{"title": "a cat"}\n')
    result = run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.csv", "--option", "text_fieldd=title", ok=False)
    assert result.exit_code == 2
    assert "error: unknown source option(s) text_fieldd (did you mean text_field?)" in result.output
    assert not (tmp_path / "p.csv").exists()


def test_a_model_saved_without_source_options_reads_the_default_fields(runs, tmp_path):
    old = tmp_path / "old"
    shutil.copytree(runs / "jsonl", old)
    record = json.loads((old / "model" / "model.json").read_text())
    del record["featurizer"]["input"], record["featurizer"]["source_options"]
    record["record_sha256"] = json_digest(record, "record_sha256")
    (old / "model" / "model.json").write_text(json.dumps(record))
    raw = tmp_path / "new.jsonl"
    raw.write_text('{"text": "a cat", "body": "stocks fell"}\n')
    run("predict", old, raw, "-o", tmp_path / "p.csv")
    # the text the model reads is the default field's, not the training field's: its scores are the
    # original model's on a record whose training field holds that text
    (tmp_path / "same.jsonl").write_text('{"body": "a cat"}\n')
    run("predict", runs / "jsonl", tmp_path / "same.jsonl", "-o", tmp_path / "q.csv")
    got, want = ((tmp_path / f).read_text().splitlines() for f in ("p.csv", "q.csv"))
    assert len(got) == len(want) == 2 and got[0] == want[0]
    assert got[1].split(",")[1:] == want[1].split(",")[1:]


def test_numeric_input_to_a_text_model_is_refused(runs, tmp_path):
    raw = tmp_path / "new.svm"
    raw.write_text("1 3:1 7:2\n")
    result = run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.csv", ok=False)
    assert result.exit_code == 2
    assert "new.svm: holds numeric features, but the model was trained on text features" in result.output
    assert not (tmp_path / "p.csv").exists()


def test_text_input_to_an_unhashed_model_saved_before_the_input_kind_is_refused(tmp_path):
    (tmp_path / "train.svm").write_text("1 1:1 2:1\n2 3:1\n1 2:1\n2 3:1 4:1\n")
    run("ingest", tmp_path / "train.svm", "--no-hash", "--out", tmp_path / "s.zarr")
    run(
        "train", tmp_path / "s.zarr", "--solver", "bcd", "-p", "max_iter=3", "--n-workers", "0", "--out", tmp_path / "r"
    )
    record = json.loads((tmp_path / "r" / "model" / "model.json").read_text())
    del record["featurizer"]["input"]
    record["record_sha256"] = json_digest(record, "record_sha256")
    (tmp_path / "r" / "model" / "model.json").write_text(json.dumps(record))
    (tmp_path / "new.jsonl").write_text('{"text": "a cat"}\n')
    result = run("predict", tmp_path / "r", tmp_path / "new.jsonl", "-o", tmp_path / "p.csv", ok=False)
    assert result.exit_code == 2 and "--no-hash" not in result.output
    assert "holds text features, but the model was trained on numeric features" in result.output


def test_an_input_of_zero_records_is_an_empty_output_and_one_warning(runs, tmp_path, caplog):
    """A daily job's quiet day: an empty JSONL file, a CSV of its header alone, a Parquet file of
    no rows, an empty dataset directory (a partition with no files). Each is exit 0, one warning
    naming the input, and the output of no rows in the columns a scored input gives: the CSV's
    header line, an empty JSONL file, the Parquet schema; with --parts one part of no rows and the
    manifest (was exit 2, "no records found", and no output). evaluate of such a file stays an
    error naming it: no score can be computed."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    full = tmp_path / "full.jsonl"
    full.write_text('{"body": "a cat", "doc": "d1"}\n')
    (tmp_path / "empty.jsonl").write_text("")
    (tmp_path / "head.csv").write_text("doc,body\n")
    pq.write_table(
        pa.table({"doc": pa.array([], pa.string()), "body": pa.array([], pa.string())}), tmp_path / "e.parquet"
    )
    (tmp_path / "day=2026-11-29").mkdir()
    for kind in (".csv", ".jsonl", ".parquet"):
        run("predict", runs / "jsonl", full, "-o", tmp_path / f"scored{kind}", "--id-field", "doc")
    full_schema = pq.read_schema(tmp_path / "scored.parquet")
    for name in ("empty.jsonl", "head.csv", "e.parquet", "day=2026-11-29"):
        for kind in (".csv", ".jsonl", ".parquet"):
            out = tmp_path / f"p-{name}{kind}"
            caplog.clear()
            result = run("predict", runs / "jsonl", tmp_path / name, "-o", out, "--id-field", "doc")
            assert f"0 rows written to {out}" in result.output
            warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
            assert warnings == [
                f"{tmp_path / name}: no records to score (the input is empty, or holds a header row alone); {out} holds "
                + {".csv": "its header line alone", ".jsonl": "no lines", ".parquet": "its columns and no rows"}[kind]
            ], (name, kind)
            if kind == ".csv":
                head = b"location,id,label_1,score_1\r\n"
                assert out.read_bytes() == head and (tmp_path / "scored.csv").read_bytes().startswith(head)
            elif kind == ".jsonl":
                assert out.read_bytes() == b""
            else:
                assert pq.read_table(out).num_rows == 0 and pq.read_schema(out).equals(full_schema)
    caplog.clear()
    run("predict", runs / "jsonl", tmp_path / "head.csv", "-o", tmp_path / "parts.csv", "--parts")
    manifest = json.loads((tmp_path / "parts.csv" / "manifest.json").read_text())
    assert manifest["n_rows"] == 0 and [p["name"] for p in manifest["parts"]] == ["part-00000.csv"]
    assert (tmp_path / "parts.csv" / "part-00000.csv").read_bytes() == b"location,label_1,score_1\r\n"
    assert "(one part, part-00000.csv, and manifest.json)" in caplog.text
    for name in ("empty.jsonl", "head.csv"):
        result = run("evaluate", runs / "jsonl", tmp_path / name, ok=False)
        assert (
            result.exit_code == 2 and result.output.count("\n") == 1 and f"error: {tmp_path / name}:" in result.output
        )


def test_a_store_without_its_manifest_is_called_incomplete(runs, tmp_path):
    shutil.copytree(runs / "jsonl.zarr", tmp_path / "cut.zarr")
    os.remove(tmp_path / "cut.zarr" / "manifest.json")
    result = run("predict", runs / "jsonl", tmp_path / "cut.zarr", "-o", tmp_path / "p.csv", ok=False)
    assert result.exit_code == 2
    assert "not a complete store (an interrupted ingest?)" in result.output and "class folder" not in result.output


def test_top_k_is_clamped_to_the_classes_and_must_be_positive(runs, tmp_path, caplog):
    run("predict", runs / "jsonl", runs / "jsonl.zarr", "-o", tmp_path / "p.csv", "--top-k", "5")
    assert "--top-k 5: the model has 2 classes; writing 2 per row" in caplog.text
    rows = (tmp_path / "p.csv").read_text().splitlines()
    assert rows[0] == "location,label_1,score_1,label_2,score_2" and all(r.count(",") == 4 for r in rows)
    for k in ("0", "-1"):
        result = run("predict", runs / "jsonl", runs / "jsonl.zarr", "-o", tmp_path / "p.csv", "--top-k", k, ok=False)
        assert result.exit_code == 2 and "Invalid value for '--top-k'" in result.output


def test_unlabeled_numeric_rows_are_scored(tmp_path):
    (tmp_path / "train.svm").write_text("a 1:1 3:2\nb 2:3\na 1:1 2:1\nb 2:2 3:1\n")
    run("ingest", tmp_path / "train.svm", "--no-hash", "--option", "multilabel=false", "--out", tmp_path / "s.zarr")
    run(
        "train", tmp_path / "s.zarr", "--solver", "bcd", "-p", "max_iter=3", "--n-workers", "0", "--out", tmp_path / "r"
    )
    np.save(tmp_path / "new.npy", np.array([[1.0, 0.0, 2.0], [0.0, 3.0, 0.0]]))
    (tmp_path / "new.svm").write_text("1:1 3:2\nb 2:3\n")
    for name in ("new.npy", "new.svm"):
        result = run("predict", tmp_path / "r", tmp_path / name, "-o", tmp_path / "p.csv")
        assert "2 rows written" in result.output


def test_a_folder_of_unlabeled_documents_is_scored(runs, tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("a cat")
    (tmp_path / "docs" / "b.txt").write_text("the market")
    assert "2 rows written" in run("predict", runs / "jsonl", tmp_path / "docs", "-o", tmp_path / "p.csv").output


@pytest.mark.parametrize("out", ["source", "model", "run"])
def test_an_output_that_overlaps_the_input_or_the_model_is_refused(runs, tmp_path, out):
    from streamfit.model import load_model
    from streamfit.predict import predict_to_file

    source = tmp_path / "docs.jsonl"
    shutil.copy(runs / "train.jsonl", source)
    before = source.read_bytes()
    target = {"source": source, "model": runs / "jsonl" / "model" / "p.csv", "run": runs / "jsonl.csv"}[out]
    if out == "run":  # a run directory named like an output file
        shutil.copytree(runs / "jsonl", target)
    run_dir = target if out == "run" else runs / "jsonl"
    with pytest.raises(StreamfitError, match="overlaps the"):
        predict_to_file(load_model(str(run_dir)), str(source), str(target), model_dir=str(run_dir))
    assert source.read_bytes() == before and not os.path.exists(f"{target}.partial")


def test_an_id_field_is_carried_to_the_predictions(runs, tmp_path):
    """--id-field on predict (CSV, JSONL) or recorded at ingest (headerless TSV): each prediction
    carries its record's id; a format that reads no ids is refused (issue 20, item 8)."""
    raw = tmp_path / "new.csv"
    raw.write_text("id,words\n7,a cat in a café\nx9,stocks fell\n", encoding="latin-1")
    run("predict", runs / "csv", raw, "-o", tmp_path / "p.csv", "--id-field", "id")
    rows = [r.split(",") for r in (tmp_path / "p.csv").read_text().splitlines()]
    assert [r[:2] for r in rows] == [["location", "id"], [f"{raw}:2", "7"], [f"{raw}:3", "x9"]]
    jsonl = tmp_path / "new.jsonl"
    jsonl.write_text('{"body": "a dog", "doc": 12}\n')
    run("predict", runs / "jsonl", jsonl, "-o", tmp_path / "p.jsonl", "--id-field", "doc")
    assert json.loads((tmp_path / "p.jsonl").read_text())["id"] == "12"
    # recorded with the training store: predict carries it without being told
    tsv = tmp_path / "train.tsv"
    tsv.write_text("".join(f"{c}\td{i}\t{t}\n" for i, (t, c) in enumerate(DOCS)))
    model = _train(tmp_path, "tsv", tsv, "--no-header", "--label-field", "0", "--id-field", "1", "--text-field", "2")
    run("predict", model, tsv, "-o", tmp_path / "t.csv")
    assert [r.split(",")[1] for r in (tmp_path / "t.csv").read_text().splitlines()] == ["id", "d0", "d1", "d2", "d3"]
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_text("a cat")
    result = run("predict", runs / "jsonl", tmp_path / "docs", "-o", tmp_path / "f.csv", "--id-field", "x", ok=False)
    assert result.exit_code == 2 and "this format reads no ids (CSV, TSV, JSONL and Parquet do)" in result.output


def test_parquet_ids_are_carried_to_the_predictions(runs, tmp_path):
    """--id-field on a Parquet input: the output's id column equals the input's (integers as
    text), row for row in input order, across row groups and in CSV and Parquet output."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    raw = tmp_path / "new.parquet"
    texts = [DOCS[i % 4][0] for i in range(7)]
    keys = [1000 + 3 * i for i in range(7)]
    pq.write_table(pa.table({"body": texts, "key": keys}), raw, row_group_size=3)
    run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.parquet", "--id-field", "key")
    table = pq.read_table(tmp_path / "p.parquet")
    assert table.column("id").to_pylist() == [str(k) for k in pq.read_table(raw).column("key").to_pylist()]
    assert table.column("location").to_pylist()[3] == f"{raw}:row group 1, row 0"
    run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.csv", "--id-field", "key")
    import csv

    rows = list(csv.reader((tmp_path / "p.csv").read_text().splitlines()))
    assert [r[1] for r in rows] == ["id"] + [str(k) for k in keys]
    assert [r[2] for r in rows[1:]] == table.column("label_1").to_pylist()


def test_a_parquet_dataset_directory_and_a_glob_are_read_as_ingest_reads_them(runs, tmp_path):
    """SOURCE names its files as ingest's inputs do: a dataset directory with hive partitions
    (its `_SUCCESS` left out) and a glob give the rows of its files one after the other, in
    sorted path order (a dataset directory used to be read as a folder corpus of binary files)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    files = []
    for year in (2023, 2024):
        for part in range(2):
            folder = tmp_path / "reviews" / f"year={year}"
            folder.mkdir(parents=True, exist_ok=True)
            texts = [DOCS[(year + part + i) % 4][0] for i in range(3)]
            pq.write_table(
                pa.table({"body": texts, "key": [f"{year}-{part}-{i}" for i in range(3)]}), folder / f"p{part}.parquet"
            )
            files.append(folder / f"p{part}.parquet")
    (tmp_path / "reviews" / "_SUCCESS").write_text("")
    expected = []
    for i, path in enumerate(files):
        run("predict", runs / "jsonl", path, "-o", tmp_path / f"one{i}.csv", "--id-field", "key")
        expected += (tmp_path / f"one{i}.csv").read_text().splitlines()[1:]
    for source in (tmp_path / "reviews", f"{tmp_path}/reviews/*/*.parquet"):
        result = run("predict", runs / "jsonl", source, "-o", tmp_path / "all.csv", "--id-field", "key")
        assert "12 rows written" in result.output
        assert (tmp_path / "all.csv").read_text().splitlines()[1:] == expected
    # the same directory as a file:// URL (it was taken for a store: "has no manifest.json")
    result = run(
        "predict", runs / "jsonl", f"file://{tmp_path}/reviews", "-o", tmp_path / "url.csv", "--id-field", "key"
    )
    assert "12 rows written" in result.output
    assert (tmp_path / "url.csv").read_text().splitlines()[1:] == [
        line.replace(str(tmp_path), f"file://{tmp_path}") for line in expected
    ]
    result = run("predict", runs / "jsonl", f"{tmp_path}/none/*.parquet", "-o", tmp_path / "x.csv", ok=False)
    assert result.exit_code == 2 and "no file matches this pattern" in result.output


def _many_docs(path, n):
    """n JSONL records {"body", "doc"} made of DOCS' texts, ids d0, d1, ..."""
    path.write_text("".join(json.dumps({"body": DOCS[i % 4][0], "doc": f"d{i}"}) + "\n" for i in range(n)))
    return path


def test_parts_are_the_single_file_cut_in_input_order_with_a_manifest(runs, tmp_path, monkeypatch):
    """--parts: one part per input batch, in input order, and a manifest with each part's rows,
    size and SHA-256; each CSV part has the header, and the parts without it concatenate to the
    single file; Parquet (single or parts) holds the CSV's rows, typed."""
    import hashlib

    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamfit import predict

    monkeypatch.setattr(predict, "RAW_BATCH_ROWS", 3)
    raw = _many_docs(tmp_path / "new.jsonl", 8)
    args = ("--id-field", "doc", "--top-k", "2")
    run("predict", runs / "jsonl", raw, "-o", tmp_path / "one.csv", *args)
    assert (
        "8 rows written" in run("predict", runs / "jsonl", raw, "-o", tmp_path / "parts.csv", "--parts", *args).output
    )
    one = (tmp_path / "one.csv").read_bytes()
    header = one.splitlines(keepends=True)[0]
    manifest = json.loads((tmp_path / "parts.csv" / "manifest.json").read_text())
    assert [(p["name"], p["rows"]) for p in manifest["parts"]] == [
        ("part-00000.csv", 3),
        ("part-00001.csv", 3),
        ("part-00002.csv", 2),
    ]
    assert manifest["n_rows"] == 8 and manifest["columns"] == header.decode().strip().split(",")
    body = b""
    for p in manifest["parts"]:
        data = (tmp_path / "parts.csv" / p["name"]).read_bytes()
        assert (hashlib.sha256(data).hexdigest(), len(data)) == (p["sha256"], p["bytes"])
        assert data.startswith(header)
        body += data[len(header) :]
    assert header + body == one
    assert sorted(os.listdir(tmp_path)) == ["new.jsonl", "one.csv", "parts.csv"]  # no .partial left

    run("predict", runs / "jsonl", raw, "-o", tmp_path / "one.parquet", *args)
    run("predict", runs / "jsonl", raw, "-o", tmp_path / "parts.parquet", "--parts", *args)
    table = pq.read_table(tmp_path / "one.parquet")
    parts = json.loads((tmp_path / "parts.parquet" / "manifest.json").read_text())["parts"]
    assert pa.concat_tables([pq.read_table(tmp_path / "parts.parquet" / p["name"]) for p in parts]).equals(table)
    rows = [line.split(",") for line in one.decode().splitlines()[1:]]
    assert table.column_names == header.decode().strip().split(",")
    assert table.column("id").to_pylist() == [f"d{i}" for i in range(8)] == [r[1] for r in rows]
    assert table.column("label_1").to_pylist() == [r[2] for r in rows]
    assert np.allclose(table.column("score_1").to_numpy(), [float(r[3]) for r in rows], atol=5e-7)


def test_a_predict_that_fails_midway_leaves_no_output(runs, tmp_path, monkeypatch):
    """A bad record in the third batch, after two batches were scored and written: neither the
    single file nor the parts directory (nor a .partial) is left."""
    from streamfit import predict

    monkeypatch.setattr(predict, "RAW_BATCH_ROWS", 2)
    raw = _many_docs(tmp_path / "new.jsonl", 4)
    with open(raw, "a") as f:
        f.write('{"body": "a cat"}\n{"body": \n')
    for out, parts in (("p.csv", ()), ("parts.jsonl", ("--parts",))):
        result = run("predict", runs / "jsonl", raw, "-o", tmp_path / out, *parts, ok=False)
        assert result.exit_code == 2 and "new.jsonl:6" in result.output
    assert os.listdir(tmp_path) == ["new.jsonl"]


def test_out_dash_writes_to_stdout_the_bytes_a_file_output_holds(runs, tmp_path, monkeypatch):
    """`--out -`: CSV (or `--out-format jsonl`) on stdout, the same bytes as the file output (also
    with --scheduler: the driver writes), and the count of rows on stderr; rows go out batch by batch, so a bad record part-way leaves the
    batches before it on stdout beside the one error line (exit 2). Parquet, --parts and an
    --out-format that a file's suffix contradicts are one line each (was: `-: the output must end
    in .csv, .jsonl or .parquet`, no way to pipe the predictions on)."""
    from streamfit import predict

    monkeypatch.setattr(predict, "RAW_BATCH_ROWS", 2)
    raw = _many_docs(tmp_path / "new.jsonl", 5)
    model = runs / "jsonl"
    for fmt in ("csv", "jsonl"):
        run("predict", model, raw, "-o", tmp_path / f"p.{fmt}", "--id-field", "doc")
        result = CliRunner().invoke(
            main, ["predict", str(model), str(raw), "--out", "-", "--out-format", fmt, "--id-field", "doc"]
        )
        assert result.exit_code == 0, result.output
        assert (
            result.stdout_bytes == (tmp_path / f"p.{fmt}").read_bytes()
            and result.stderr == "5 rows written to stdout\n"
        )
    from distributed import LocalCluster

    with LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster:  # the driver writes stdout
        result = run("predict", model, raw, "--out", "-", "--id-field", "doc", "--scheduler", cluster.scheduler_address)
    assert result.stdout_bytes == (tmp_path / "p.csv").read_bytes()
    with open(raw, "a") as f:
        f.write('{"body": "a cat"}\n{"body": \n')
    result = CliRunner().invoke(main, ["predict", str(model), str(raw), "--out", "-"])
    assert result.exit_code == 2 and result.stderr == f"error: {raw}:7: " + result.stderr.split(":7: ", 1)[1]
    assert result.stdout.count("\n") == 1 + 6 and "\n" not in result.stderr.rstrip("\n")
    for args, line in (
        (["--out-format", "parquet"], "error: --out - --out-format parquet: stdout takes csv or jsonl; write Parquet"),
        (["--parts"], "error: --out - --parts: parts are files of a directory, stdout one stream;"),
    ):
        result = run("predict", model, raw, "--out", "-", *args, ok=False)
        assert result.exit_code == 2 and result.output.startswith(line) and result.output.count("\n") == 1, args
    result = run("predict", model, raw, "--out", tmp_path / "q.csv", "--out-format", "jsonl", ok=False)
    assert (
        result.exit_code == 2
        and "ends in .csv and --out-format is jsonl: a file's format is its suffix" in result.output
    )
    assert not (tmp_path / "q.csv").exists()


def test_raw_text_is_checked_as_ingest_checks_it(runs, tmp_path, caplog):
    """predict reads raw text through ingest's checks (streamfit.ingest.text_checks): a NUL in a
    record's text is the error ingest gives at the same FILE:LINE, with predict's fix, and nothing
    is written; cp1252 text read as latin-1 (the csv model's recorded encoding) is scored, row for
    row, with ingest's one warning naming predict's fix, and none with --option encoding=cp1252
    (was: both scored without a word, the NUL as a word break). A NUL in JSON or Parquet text (no
    encoding option there) names the fix of cleaning it where the file is written (was: --encoding)."""
    nul = tmp_path / "nul.csv"
    nul.write_bytes(b"words,cls\na cat,animals\nthe tr\x00ain,finance\n")
    result = run("predict", runs / "csv", nul, "-o", tmp_path / "p.csv", ok=False)
    problem = f"{nul}:3: a NUL character in the text (read as latin-1): likely a binary file, or UTF-16 or UTF-32 text"
    assert result.exit_code == 2 and result.output == (
        f"error: {problem} (pass --option encoding=utf-16 (or utf-32) for such text; else convert the file, or drop "
        "such records)\n"
    )
    assert not (tmp_path / "p.csv").exists()
    result = run("ingest", nul, "--like", runs / "csv.zarr", "--out", tmp_path / "s.zarr", ok=False)
    assert result.exit_code == 2 and result.output.startswith(f"error: {problem} (pass --encoding utf-16")
    # JSON and Parquet text is text as written (these formats take no encoding): the fix is the writer's
    import pyarrow as pa
    import pyarrow.parquet as pq

    jsonl = tmp_path / "nul.jsonl"
    jsonl.write_text('{"body": "a cat", "topic": "animals"}\n{"body": "the tr\\u0000ain", "topic": "finance"}\n')
    pq.write_table(pa.table({"body": ["a cat", "the tr\x00ain"]}), tmp_path / "nul.parquet")
    stored = "a NUL character (U+0000) in the text as the file stores it"
    for raw, where in ((jsonl, "2"), (tmp_path / "nul.parquet", "row group 0, row 1")):
        result = run("predict", runs / "jsonl", raw, "-o", tmp_path / "p.csv", ok=False)
        assert result.exit_code == 2 and result.output == (
            f"error: {raw}:{where}: {stored} (remove the NULs, or such records, where the file is written: predict "
            "scores every record or none)\n"
        )
        assert not (tmp_path / "p.csv").exists()
    cp1252 = tmp_path / "w.csv"
    cp1252.write_text("words\n\u201cstocks\u201d fell\nthe market \u2013 today\nplain cats\n", encoding="cp1252")
    caplog.clear()
    run("predict", runs / "csv", cp1252, "-o", tmp_path / "w.jsonl")
    assert len((tmp_path / "w.jsonl").read_text().splitlines()) == 3
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        f"2 records read as latin-1 hold C1 control characters (U+0080–U+009F; the first: {cp1252}:2), which "
        "latin-1 text does not use and Windows text in cp1252 becomes when read as latin-1 (its quotes, dashes "
        "and €): if the input is such text, score it with --option encoding=cp1252 (and if the training data is "
        "such text too, ingest it again with --encoding cp1252 and train again)"
    ]
    caplog.clear()
    run("predict", runs / "csv", cp1252, "-o", tmp_path / "w.jsonl", "--option", "encoding=cp1252")
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def _streamfit(*args, **popen):
    """`python -m streamfit ARGS` in a process of its own (a real stdout), this checkout first."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    return subprocess.Popen([sys.executable, "-m", "streamfit", *map(str, args)], env=env, **popen)


@pytest.mark.parametrize("workers", ["0", "1"])
def test_out_dash_into_a_reader_that_has_gone_ends_silently(runs, tmp_path, workers):
    """`predict … --out - | head`: the reader gone, predict ends without a line and with SIGPIPE's
    status 141, in process and on the embedded cluster (whose pass is ended while it runs: on
    the first try its watch thread and its tasks' generator printed tracebacks after the cluster
    closed); a full stdout is the one line naming stdout."""
    raw = _many_docs(tmp_path / "new.jsonl", 20000)  # 3 batches: some still in flight when the write fails
    args = ("predict", runs / "jsonl", raw, "--out", "-", "--n-workers", workers)
    proc = _streamfit(*args, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=300) == 141 and err == "", err
    if os.path.exists("/dev/full"):
        with open("/dev/full", "w") as full:
            proc = _streamfit(*args, stdout=full, stderr=subprocess.PIPE)
            err = proc.stderr.read().decode()
        assert proc.wait(timeout=300) == 2 and err.startswith(
            "error: stdout: cannot write (No space left on device)"
        ), err


@pytest.mark.parametrize("parts", [False, True])
def test_a_second_predict_to_an_output_being_written_is_refused_and_the_first_completes(
    runs, tmp_path, monkeypatch, parts
):
    """qa27: a second predict to the same --out while the first writes it (a scheduler's retry).
    One file: both wrote OUT.partial at once and the published file mixed both inputs' rows, each
    reporting success. --parts: the second deleted the first's OUT.partial/, whose output then
    lacked its first part while it said "N rows written". The second now stops with one line
    naming the output, and the first's output is whole; a killed writer's leftover is replaced."""
    from streamfit import predict

    monkeypatch.setattr(predict, "RAW_BATCH_ROWS", 2)
    first, other = _many_docs(tmp_path / "first.jsonl", 6), _many_docs(tmp_path / "other.jsonl", 3)
    out = tmp_path / ("parts.csv" if parts else "p.csv")
    flags = ("--parts",) if parts else ()
    run("predict", runs / "jsonl", first, "-o", tmp_path / "solo.csv", *flags)
    until_stopped = predict._until_stopped
    refused = []

    def retried_midway(pieces, where):  # the retry starts once the first has written a piece
        for i, piece in enumerate(until_stopped(pieces, where)):
            yield piece
            if i == 0 and not refused:
                refused.append(run("predict", runs / "jsonl", other, "-o", out, *flags, ok=False))

    monkeypatch.setattr(predict, "_until_stopped", retried_midway)
    assert "6 rows written" in run("predict", runs / "jsonl", first, "-o", out, *flags).output
    assert refused[0].exit_code == 2
    assert f"{out}: another streamfit predict is writing this output right now" in refused[0].output
    solo = tmp_path / "solo.csv"
    if parts:
        for name in sorted(os.listdir(solo)):
            assert (out / name).read_bytes() == (solo / name).read_bytes()
        assert sorted(os.listdir(out)) == sorted(os.listdir(solo))
    else:
        assert out.read_bytes() == solo.read_bytes()
    assert not os.path.exists(f"{out}.partial")
    monkeypatch.setattr(predict, "_until_stopped", until_stopped)
    staging = tmp_path / f"{out.name}.partial"  # a killed writer's leftover: no lock held on it
    if parts:
        staging.mkdir()
        (staging / "part-00000.csv").write_text("junk")
    else:
        staging.write_text("junk\n" * 1000)
    assert "3 rows written" in run("predict", runs / "jsonl", other, "-o", out, *flags).output
    rows = [
        line
        for f in ([out / n for n in sorted(os.listdir(out)) if n.startswith("part-")] if parts else [out])
        for line in f.read_text().splitlines()
        if not line.startswith("location")
    ]
    assert len(rows) == 3 and all(r.startswith(str(other)) or r.startswith("other.jsonl") for r in rows), rows
    assert not staging.exists()


@pytest.mark.parametrize("parts", [False, True])
def test_sigterm_stops_predict_between_pieces_and_leaves_no_output(runs, tmp_path, monkeypatch, sigterm_guard, parts):
    """A SIGTERM while the second of four batches is scored (streamfit.shutdown's guard
    installed, as the CLI does): predict raises Terminated before it asks for the third, and
    neither the file nor the parts directory (nor a .partial) is left."""
    import signal

    from streamfit import predict
    from streamfit.errors import Terminated
    from streamfit.model import load_model

    monkeypatch.setattr(predict, "RAW_BATCH_ROWS", 2)
    raw = _many_docs(tmp_path / "new.jsonl", 8)
    scored = []
    score = predict._score_piece

    def signalled(item, **kw):
        scored.append(item[0])
        if len(scored) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return score(item, **kw)

    monkeypatch.setattr(predict, "_score_piece", signalled)
    out = str(tmp_path / "p.csv")
    with pytest.raises(Terminated, match=f"{out}: not written"):
        predict.predict_to_file(load_model(str(runs / "jsonl")), str(raw), out, parts=parts)
    assert scored == [0, 1] and os.listdir(tmp_path) == ["new.jsonl"]


def test_a_file_with_a_header_row_for_a_model_trained_without_one(tmp_path):
    """The recorded --no-header applies to predict's input too: the error says how to read a
    file that has a header row, and that way works."""
    (tmp_path / "train.tsv").write_text("".join(f"{c}\t{t}\n" for t, c in DOCS))
    headerless = "--no-header --label-field 0 --text-field 1".split()
    run("ingest", tmp_path / "train.tsv", *headerless, "--out", tmp_path / "s")
    run("train", tmp_path / "s", "--solver", "bcd", "-p", "max_iter=3", "--n-workers", "0", "--out", tmp_path / "r")
    (tmp_path / "new.csv").write_text("key,words\nk1,the cat sat\nk2,stocks fell\n")
    result = run(
        "predict", tmp_path / "r", tmp_path / "new.csv", "--id-field", "key", "-o", tmp_path / "p.csv", ok=False
    )
    assert result.exit_code == 2 and "for one with a header row pass --option header=true and the column names" in (
        result.output
    )
    options = ["--option", "header=true", "--option", "text_field=words", "--id-field", "key"]
    run("predict", tmp_path / "r", tmp_path / "new.csv", *options, "-o", tmp_path / "p.csv")
    assert [r.split(",")[1] for r in (tmp_path / "p.csv").read_text().splitlines()] == ["id", "k1", "k2"]


def test_an_estimators_model_scores_numeric_rows_in_its_width_and_refuses_text(tmp_path):
    """An estimator's model_ (fitted on arrays) records no featurization. `predict` read a LIBSVM
    file's rows in the file's width (`input has 4 features but the model was trained on 5` when
    the last column was zero throughout); now in the model's width, as the estimator scores them.
    Raw text is refused naming why and the Python call that scores a featurized matrix (it said
    `drop --no-hash`, an option the user had not given)."""
    from streamfit import StagewiseLSClassifier, load_model

    rng = np.random.default_rng(0)
    X = np.round(rng.normal(size=(40, 5)), 3)
    y = np.repeat(["a", "b"], 20)
    StagewiseLSClassifier(generator="sequential").fit(X, y).model_.save(str(tmp_path / "model"))
    rows = X[:6].copy()
    rows[:, 4] = 0  # the file then names 4 columns
    (tmp_path / "new.svm").write_text(
        "".join("a " + " ".join(f"{j + 1}:{v}" for j, v in enumerate(r) if v) + "\n" for r in rows)
    )
    run("predict", tmp_path / "model", tmp_path / "new.svm", "--out", tmp_path / "p.csv")
    predicted = [line.split(",")[1] for line in (tmp_path / "p.csv").read_text().splitlines()[1:]]
    assert predicted == list(load_model(str(tmp_path / "model")).predict(rows))
    (tmp_path / "new.jsonl").write_text(json.dumps({"text": "the cat sat"}) + "\n")
    result = run("predict", tmp_path / "model", tmp_path / "new.jsonl", "--out", tmp_path / "t.csv", ok=False)
    assert result.exit_code == 2
    assert (
        "new.jsonl: holds text, but the model records no featurization (an estimator's model_, fitted on "
        "in-memory arrays): raw text cannot be turned into its columns here; featurize it as for the fit and "
        "score the matrix with streamfit.load_model(MODEL).predict(X)"
    ) in result.output
    assert not (tmp_path / "t.csv").exists()


@pytest.mark.parametrize("fmt", ["npz", "h5"])
@pytest.mark.parametrize("hashed", [True, False])
def test_arrays_of_another_width_than_the_training_arrays_are_refused(tmp_path, fmt, hashed):
    """An array's columns are features 0, 1, … by position. Before, a NumPy/HDF5 file narrower
    or wider than the training arrays was scored (hashed: wider too) and ingested `--like`
    without a word: scores of other features. Now the training width is recorded with the store
    (x_columns) and a file of another width is refused by predict, `ingest --like` and a second
    training input, naming file and widths; evaluate refuses a store ingested alone from such
    files. The same width reads as before."""
    import h5py
    from sklearn.datasets import load_wine

    from streamfit.store import open_store

    X, y = load_wine(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = X[order], y[order]

    def save(name, rows, labels):
        path = tmp_path / f"{name}.{fmt}"
        if fmt == "npz":
            np.savez(path, X=rows, y=labels)
        else:
            with h5py.File(path, "w") as f:
                f["X"], f["y"] = rows, labels
        return path

    train, same = save("train", X[:120], y[:120]), save("same", X[120:], y[120:])
    narrow, wide = save("narrow", X[120:, :10], y[120:]), save("wide", np.hstack([X[120:], X[120:, :3]]), y[120:])
    hashing = [] if hashed else ["--no-hash"]
    run("-q", "ingest", train, *hashing, "--out", tmp_path / "s.zarr")
    run("-q", "train", tmp_path / "s.zarr", "--solver", "bcd", "-p", "max_iter=3", "--out", tmp_path / "r")
    assert "58 rows written" in run("-q", "predict", tmp_path / "r", same, "-o", tmp_path / "p.csv").output
    run("-q", "ingest", same, "--like", tmp_path / "s.zarr", "--out", tmp_path / "t.zarr")
    for other, width in ((narrow, 10), (wide, 16)):
        x_name = "array 'X'" if fmt == "npz" else "dataset 'X'"
        expected = f"{other.name}: {x_name} has {width} columns, the training data 13 ("
        for args in (
            ["predict", tmp_path / "r", other, "-o", tmp_path / "q.csv"],
            ["ingest", other, "--like", tmp_path / "s.zarr", "--out", tmp_path / "u.zarr"],
            ["ingest", train, other, *hashing, "--out", tmp_path / "v.zarr"],
        ):
            result = run("-q", *args, ok=False)
            assert result.exit_code == 2 and expected in result.output, (args, result.output)
        assert not (tmp_path / "q.csv").exists() and not (tmp_path / "u.zarr").exists()
        classes = ",".join(open_store(str(tmp_path / "s.zarr")).classes)
        run("-q", "ingest", other, *hashing, "--classes", classes, "--out", tmp_path / "alone.zarr", "--overwrite")
        if hashed:  # unhashed, the width differs anyway (n_features); hashed, only the record tells
            result = run("-q", "evaluate", tmp_path / "r", tmp_path / "alone.zarr", ok=False)
            assert result.exit_code == 2 and f"arrays of {width} feature columns (the model's 13" in result.output


@pytest.mark.parametrize("fmt", ["npz", "sparse-npz", "h5", "h5-csr", "arff", "sparse-arff", "csv", "parquet"])
def test_an_unhashed_store_is_as_wide_as_the_input_declares(tmp_path, fmt):
    """Before, a --no-hash store was as wide as the largest non-zero column + 1: training arrays
    whose last column is all zero gave a store (and model) one column short, and a test file of
    the same layout with values there was refused. Now the store takes the width the input
    declares (array columns, ARFF attributes, feature_fields): the training store, a test store
    ingested alone and one ingested --like it are all 13 wide, hold the input's values
    (scipy's reading of the same arrays), and predict scores the test file. bcd's default
    penalty (group lasso plus ridge) has its minimum at a zero weight row for a column without
    data, and the model has that zero row."""
    import h5py
    import pyarrow as pa
    import pyarrow.parquet as pq
    import scipy.sparse as sp
    from sklearn.datasets import load_wine

    from streamfit import load_model
    from streamfit.store import open_store

    X, y = load_wine(return_X_y=True)
    order = np.random.default_rng(0).permutation(len(y))
    X, y = np.round(X[order], 2), y[order]
    X[:120, 12] = 0.0  # the training rows' last column holds no value; the test rows' do
    names = [f"f{j}" for j in range(13)]
    options: list[str] = []

    def save(name, rows, labels):
        ext = {"sparse-npz": "npz", "h5-csr": "h5", "sparse-arff": "arff"}.get(fmt, fmt)
        path = tmp_path / f"{name}.{ext}"
        if fmt == "npz":
            np.savez(path, X=rows, y=labels)
        elif fmt == "sparse-npz":
            sp.save_npz(path, sp.csr_matrix(rows))
            np.save(tmp_path / f"{name}-y.npy", labels)
        elif fmt in ("h5", "h5-csr"):
            with h5py.File(path, "w") as f:
                if fmt == "h5":
                    f["X"] = rows
                else:
                    m = sp.csr_matrix(rows)
                    g = f.create_group("X")
                    g["data"], g["indices"], g["indptr"] = m.data, m.indices, m.indptr
                    g.attrs["encoding-type"], g.attrs["shape"] = "csr_matrix", m.shape
                f["y"] = labels
        elif fmt in ("arff", "sparse-arff"):
            header = "".join(f"@attribute {n} numeric\n" for n in names) + "@attribute class {0,1,2}\n"
            if fmt == "arff":
                body = "".join(",".join(map(repr, r.tolist())) + f",{c}\n" for r, c in zip(rows, labels))
            else:  # {attribute value, ...}: the zeros left out
                body = "".join(
                    "{" + ", ".join([f"{j} {v!r}" for j, v in enumerate(r.tolist()) if v] + [f"13 {c}"]) + "}\n"
                    for r, c in zip(rows, labels)
                )
            path.write_text(f"@relation wine\n{header}@data\n{body}")
        elif fmt == "csv":
            body = "".join(",".join(map(repr, r.tolist())) + f",{c}\n" for r, c in zip(rows, labels))
            path.write_text(",".join(names) + ",label\n" + body)
        else:
            columns = {n: rows[:, j] for j, n in enumerate(names)}
            pq.write_table(pa.table({**columns, "label": labels}), path)
        return path

    if fmt in ("arff", "sparse-arff"):
        options = ["--option", "class_attribute=class"]
    elif fmt in ("csv", "parquet"):
        options = ["--option", "feature_fields=" + ",".join(names)]
    train, test = save("train", X[:120], y[:120]), save("test", X[120:], y[120:])

    def labels(name):  # a scipy sparse .npz holds no labels: they are read from a .npy beside it
        return ["--option", f"y_path={tmp_path / name}-y.npy"] if fmt == "sparse-npz" else []

    run("-q", "ingest", train, "--no-hash", *options, *labels("train"), "--out", tmp_path / "s.zarr")
    run("-q", "ingest", test, "--no-hash", *options, *labels("test"), "--out", tmp_path / "alone.zarr")
    run("-q", "ingest", test, "--like", tmp_path / "s.zarr", *labels("test"), "--out", tmp_path / "t.zarr")
    for name, rows in (("s", X[:120]), ("alone", X[120:]), ("t", X[120:])):
        store = open_store(str(tmp_path / f"{name}.zarr"))
        assert store.n_features == 13, (name, store.n_features)
        stored, _ = store.to_scipy()
        np.testing.assert_array_equal(stored.toarray(), rows.astype(np.float32))
    run("-q", "train", tmp_path / "s.zarr", "--solver", "bcd", "--n-workers", "0", "--out", tmp_path / "r")
    model = load_model(str(tmp_path / "r"))
    assert model.coef_.shape == (3, 13)
    coef = model.coef_.toarray() if sp.issparse(model.coef_) else model.coef_
    assert not coef[:, 12].any() and coef[:, :12].any()
    result = run("-q", "predict", tmp_path / "r", test, "-o", tmp_path / "p.csv")
    assert "58 rows written" in result.output
    with open(tmp_path / "p.csv", newline="") as f:
        predicted = [row["label_1"] for row in csv.DictReader(f)]
    assert predicted == [str(c) for c in model.predict(X[120:].astype(np.float32))]


@pytest.mark.parametrize("kind", ["csv", "jsonl", "parquet"])
def test_an_empty_id_is_refused_at_its_record(runs, tmp_path, kind):
    """An id names its row in the predictions: an empty one (a CSV's empty cell, "" in JSONL or
    Parquet) is refused with its file:line as a null one is, never written as an empty id (qa33:
    the CSV's empty cell was written without a word); no output is left."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    def write(name: str, ids: list) -> Path:
        path = tmp_path / f"{name}.{kind}"
        texts = ["a cat", "stocks fell"]
        if kind == "csv":
            path.write_text("id,words\n" + "".join(f"{i},{t}\n" for i, t in zip(ids, texts)), encoding="latin-1")
        elif kind == "jsonl":
            path.write_text("".join(json.dumps({"body": t, "doc": i}) + "\n" for i, t in zip(ids, texts)))
        else:
            pq.write_table(pa.table({"body": texts, "doc": [str(i) for i in ids]}), path)
        return path

    raw = write("new", [7, " " if kind == "jsonl" else ""])
    model, field = (runs / "csv", "id") if kind == "csv" else (runs / "jsonl", "doc")
    result = run("predict", model, raw, "-o", tmp_path / "p.csv", "--id-field", field, ok=False)
    assert result.exit_code == 2 and f"{raw}:" in result.output and "empty" in result.output
    assert not (tmp_path / "p.csv").exists()
    # the control: every id given, every row written with its id
    run("predict", model, write("good", [7, "8"]), "-o", tmp_path / "g.csv", "--id-field", field)
    assert [r[1] for r in csv.reader((tmp_path / "g.csv").read_text().splitlines())] == ["id", "7", "8"]


def test_a_file_without_the_recorded_id_field_names_how_to_read_no_ids(tmp_path):
    """A model whose training store recorded --id-field, scoring a file without that field: the
    error names the fix that reads no ids (before: "set --id-field", which cannot unset it), and
    that fix scores the rows with no id column."""
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"text": t, "label": c, "doc": i}) + "\n" for i, (t, c) in enumerate(DOCS)))
    model = _train(tmp_path, "m", train, "--id-field", "doc")
    new = tmp_path / "new.jsonl"
    new.write_text(json.dumps({"text": "a cat on the mat"}) + "\n")
    result = run("-q", "predict", model, new, "-o", tmp_path / "p.csv", ok=False)
    assert result.exit_code == 2
    assert "no field 'doc' (set --id-field to this file's id field (or pass --option id_field=None" in result.output
    run("-q", "predict", model, new, "-o", tmp_path / "p.csv", "--option", "id_field=None")
    assert (tmp_path / "p.csv").read_text().splitlines()[0] == "location,label_1,score_1"


def test_a_file_name_the_locale_cannot_decode_is_written_as_utf8_text(runs, tmp_path):
    """qa33: a file name whose bytes the locale did not decode reaches predict as lone surrogates
    (Python's surrogateescape), which the output's UTF-8 cannot hold: an internal
    UnicodeEncodeError. The location is now the name's bytes read as UTF-8, a byte that is not
    UTF-8 written as \\xNN: a Latin-1 name here, and under LC_ALL=C with UTF-8 mode off (where
    every non-ASCII name is undecoded) a UTF-8 one, in a process of its own."""
    import pyarrow.parquet as pq

    latin = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"t\xe9st.csv"))  # as the command line gives it
    Path(latin).write_text("words\na cat\n", encoding="latin-1")
    where = f"{tmp_path}/t\\xe9st.csv:2"
    for kind in (".csv", ".jsonl", ".parquet"):
        run("-q", "predict", runs / "csv", latin, "-o", tmp_path / f"p{kind}")
    assert (tmp_path / "p.csv").read_text(encoding="utf-8").splitlines()[1].split(",")[0] == where
    assert json.loads((tmp_path / "p.jsonl").read_text(encoding="utf-8"))["location"] == where
    assert pq.read_table(tmp_path / "p.parquet").column("location").to_pylist() == [where]
    (tmp_path / "tést.csv").write_text("words\na cat\n", encoding="latin-1")
    env = {**os.environ, "LC_ALL": "C", "PYTHONUTF8": "0", "PYTHONPATH": os.pathsep.join(sys.path)}
    command = [sys.executable, "-m", "streamfit", "-q", "predict", str(runs / "csv"), "tést.csv", "-o", "c.csv"]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "c.csv").read_text(encoding="utf-8").splitlines()[1].startswith("tést.csv:2,")


def test_importing_predict_does_not_import_tqdm():
    """`run --overwrite` imports streamfit.predict for PARTS_MANIFEST only: tqdm.auto (and the asyncio
    it imports) comes with a progress bar, not with the module."""
    code = "import sys, streamfit.predict; print(sorted(m for m in ('tqdm', 'asyncio') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _corpus_archive(tmp_path, kind: str):
    """corpus/{training,test}/<class>/<doc> as OHSUMED-23 ships it (5 training and 3 test
    documents, one test document a folder deeper), as a folder, a .tar.gz or a .zip."""
    import tarfile
    import zipfile

    docs = {
        "corpus/training/animals/a1": "the cat sat",
        "corpus/training/animals/a2": "dogs bark",
        "corpus/training/finance/f1": "stocks fell",
        "corpus/training/finance/f2": "the market rallied",
        "corpus/training/finance/f3": "earnings rose",
        "corpus/test/animals/t1": "a cat and a dog",
        "corpus/test/finance/t2": "the market fell",
        "corpus/test/finance/more/t3": "stocks and earnings",
    }
    root = tmp_path / "tree"
    for name, text in docs.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    if kind == "folder":
        return root
    archive = tmp_path / f"corpus.{kind}"
    if kind == "zip":
        with zipfile.ZipFile(archive, "w") as zf:
            for name in docs:
                zf.write(root / name, name)
    else:
        with tarfile.open(archive, "w:gz") as tf:
            for name in docs:
                tf.add(root / name, name)
    return archive


@pytest.mark.parametrize("kind", ["folder", "tar.gz", "zip"])
def test_subset_scores_only_the_documents_of_one_folder_as_ingest_names_it(runs, tmp_path, kind):
    """predict --subset on corpus/{training,test}/<class>/<doc> (issue 20, qa27): the rows out are
    the documents in the subset, named from the top or by the last part as ingest names them; an
    unknown subset is one line naming the choices, exit 2, no output written."""
    import csv

    corpus = _corpus_archive(tmp_path, kind)
    out = tmp_path / "p.csv"
    for subset, n in [("corpus/test", 3), ("test", 3), ("training", 5), ("corpus", 8)]:
        assert f"{n} rows written" in run("predict", runs / "jsonl", corpus, "--subset", subset, "-o", out).output
        locations = [row["location"] for row in csv.DictReader(out.open())]
        folder = subset if subset.startswith("corpus") else f"corpus/{subset}"
        assert len(locations) == n and all(f"{folder}/" in loc for loc in locations), locations
    assert "8 rows written" in run("predict", runs / "jsonl", corpus, "-o", out).output  # without: every document
    out.unlink()
    bad = run("predict", runs / "jsonl", corpus, "--subset", "valid", "-o", out, ok=False)
    assert bad.exit_code == 2 and not out.exists()
    [line] = bad.output.strip().splitlines()
    assert line.startswith(f"error: {corpus}: no folder 'valid' (--subset must be one of: corpus/test, "), line
    assert "corpus/training)" in line
    # the very line ingest writes for the same mistake
    same = run("ingest", corpus, "--subset", "valid", "--out", tmp_path / "s.zarr", ok=False)
    assert same.exit_code == 2 and same.output.strip().splitlines() == [line]


def test_subset_in_a_class_folder_of_another_subset_is_refused_as_ambiguous(runs, tmp_path):
    """Without class folders a subset's last part may name any folder above a document: a class
    folder of that name in another subset makes it ambiguous, and the error asks for the full path."""
    corpus = _corpus_archive(tmp_path, "folder")
    (corpus / "corpus" / "training" / "test").mkdir()
    (corpus / "corpus" / "training" / "test" / "x").write_text("a class named test")
    bad = run("predict", runs / "jsonl", corpus, "--subset", "test", "-o", tmp_path / "p.csv", ok=False)
    assert bad.exit_code == 2 and "matches several folders: corpus/test, corpus/training/test" in bad.output
    full = run("predict", runs / "jsonl", corpus, "--subset", "corpus/test", "-o", tmp_path / "p.csv")
    assert "3 rows written" in full.output


def test_subset_for_input_that_is_not_a_folder_corpus_is_refused_as_ingest_refuses_it(runs, tmp_path):
    """--subset names a folder of a folder corpus: for a CSV file the one line ingest writes, for
    a store a line saying it is read as ingested; exit 2, nothing written (it used to be ignored)."""
    raw = tmp_path / "new.csv"
    raw.write_text("words\na cat\n")
    bad = run("predict", runs / "csv", raw, "--subset", "test", "-o", tmp_path / "p.csv", ok=False)
    same = run("ingest", raw, "--subset", "test", "--out", tmp_path / "s.zarr", ok=False)
    assert bad.exit_code == same.exit_code == 2 and not (tmp_path / "p.csv").exists()
    assert (
        bad.output.strip().splitlines()
        == same.output.strip().splitlines()
        == ["error: format option subset: not read from csv input (it is for folder input); drop it"]
    )
    stored = run("predict", runs / "csv", runs / "csv.zarr", "--subset", "test", "-o", tmp_path / "p.csv", ok=False)
    assert stored.exit_code == 2 and not (tmp_path / "p.csv").exists()
    assert stored.output.strip().splitlines() == [
        f"error: {runs / 'csv.zarr'}: is a store, read as ingested; format option subset is for raw input: drop it"
    ]


def _piped(*args, data: bytes | None, **kwargs) -> subprocess.CompletedProcess:
    """`python -m streamfit ARGS` with `data` on its stdin (a real pipe), stdout and stderr kept."""
    proc = _streamfit(*args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, **kwargs)
    out, err = proc.communicate(data, timeout=600)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_stdin_is_scored_as_the_same_bytes_in_a_file(runs, tmp_path):
    """SOURCE - with --format: JSONL (also gzip-compressed, recognised by its first bytes, and
    scored on a 1-worker embedded cluster), CSV and TSV with a header, LIBSVM; each output the
    bytes the file's output holds, with <stdin> in place of the file's name in the location
    column; every record in is a row out."""
    import gzip

    jsonl = _many_docs(tmp_path / "new.jsonl", 9000)  # two batches
    (tmp_path / "new.csv").write_text("words\n" + "".join(f"{t} café\n" for t, _ in DOCS * 3), encoding="latin-1")
    (tmp_path / "new.tsv").write_text("id\twords\n" + "".join(f"{i}\t{t}\n" for i, (t, _) in enumerate(DOCS)))
    shutil.copy(Path(__file__).parent / "data" / "dna400.libsvm", tmp_path / "new.svm")
    svm_model = _train(tmp_path, "svm", tmp_path / "new.svm", "--no-hash")
    cases = [
        (runs / "jsonl", jsonl, "jsonl", jsonl.read_bytes(), ["--id-field", "doc"]),
        (runs / "jsonl", jsonl, "jsonl", gzip.compress(jsonl.read_bytes()), ["--n-workers", "1"]),
        (runs / "csv", tmp_path / "new.csv", "csv", (tmp_path / "new.csv").read_bytes(), ["--out-format", "jsonl"]),
        (runs / "csv", tmp_path / "new.tsv", "tsv", (tmp_path / "new.tsv").read_bytes(), []),
        (svm_model, tmp_path / "new.svm", "libsvm", (tmp_path / "new.svm").read_bytes(), ["--top-k", "2"]),
    ]
    for model, raw, fmt, data, args in cases:
        kind = "jsonl" if "jsonl" in args else "csv"
        run("predict", model, raw, "--format", fmt, "-o", tmp_path / f"file.{kind}", *args)
        expected = (tmp_path / f"file.{kind}").read_bytes().replace(str(raw).encode(), b"<stdin>")
        done = _piped("predict", model, "-", "--format", fmt, "--out", "-", *args, data=data)
        assert done.returncode == 0, done.stderr
        lines = raw.read_text(encoding="latin-1").splitlines()[fmt in ("csv", "tsv") :]  # less a header line
        records = len([line for line in lines if not line.startswith("#")])  # less LIBSVM's comments
        assert done.stdout == expected and done.stdout.count(b"<stdin>:") == records, (fmt, args)
        assert done.stderr.decode().endswith(f"{records} rows written to stdout\n")


def test_stdin_rows_come_out_before_the_input_ends(runs, tmp_path):
    """A batch of standard input (8192 records) is scored and written while the pipe is still
    open: its first row is read from predict's stdout before stdin is closed; then the rest, and
    as many rows out as records in."""
    import select

    records = _many_docs(tmp_path / "new.jsonl", 8192 + 5).read_bytes().splitlines(keepends=True)
    proc = _streamfit(
        "predict", runs / "jsonl", "-", "--format", "jsonl", "--out", "-",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    proc.stdin.write(b"".join(records[:8192]))
    proc.stdin.flush()
    ready, _, _ = select.select([proc.stdout], [], [], 300)
    assert ready, "no row in 300 s while the input was open"
    assert proc.stdout.readline() == b"location,label_1,score_1\r\n"
    assert proc.stdout.readline().startswith(b"<stdin>:1,")
    assert proc.poll() is None  # still reading
    proc.stdin.write(b"".join(records[8192:]))
    proc.stdin.close()
    rest = proc.stdout.read()
    assert proc.wait(timeout=300) == 0
    assert rest.count(b"\r\n") == 8192 + 5 - 1  # the first row was read above
    assert rest.splitlines()[-1].startswith(b"<stdin>:8197,")


@pytest.mark.parametrize("workers", ["0", "2"])
def test_a_slow_producers_rows_come_within_the_quiet_period_and_as_a_files(runs, tmp_path, workers):
    """`tail -f`: a record at a time into a real pipe. Each record's row is on stdout while the
    pipe is still open, soon after it (stdin.QUIET_S, plus scoring; the bound is for a loaded
    machine; main: no row before 8192 records or the end), in process and on a 2-worker cluster
    (main's cluster also read a whole window of batches first); then the rest at once; the output
    is the bytes the same records in a file give, every record one row."""
    import select

    records = _many_docs(tmp_path / "new.jsonl", 300).read_bytes().splitlines(keepends=True)
    proc = _streamfit(
        "predict", runs / "jsonl", "-", "--format", "jsonl", "--out", "-", "--n-workers", workers,
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    out = b""
    try:
        for i in range(3):
            proc.stdin.write(records[i])
            proc.stdin.flush()
            while out.count(b"\r\n") < i + 2 and select.select([proc.stdout], [], [], 240)[0]:
                out += os.read(proc.stdout.fileno(), 1 << 16)
            assert out.count(b"\r\n") == i + 2, f"no row for record {i + 1} while the pipe was open"
            assert proc.poll() is None
        proc.stdin.write(b"".join(records[3:]))
        proc.stdin.close()
        out += proc.stdout.read()
        assert proc.wait(timeout=300) == 0, proc.stderr.read()
    finally:
        proc.kill()
    run("predict", runs / "jsonl", tmp_path / "new.jsonl", "--out", tmp_path / "p.csv")
    assert out == (tmp_path / "p.csv").read_bytes().replace(str(tmp_path / "new.jsonl").encode(), b"<stdin>")


def test_a_sigterm_while_the_pipe_is_quiet_stops_at_once(runs, tmp_path):
    """`tail -f … | predict`: a SIGTERM while no record comes stops predict with its line and
    143 within the quiet wait's poll (main: the read went on until the watchdog's 30 s grace
    period ended the process); the row of the record before it was written."""
    import select
    import signal
    import time

    proc = _streamfit(
        "predict", runs / "jsonl", "-", "--format", "jsonl", "--out", "-",
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        proc.stdin.write(_many_docs(tmp_path / "new.jsonl", 1).read_bytes())
        proc.stdin.flush()
        assert select.select([proc.stdout], [], [], 240)[0] and proc.stdout.readline().startswith(b"location,")
        assert proc.stdout.readline().startswith(b"<stdin>:1,")
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 143 and time.monotonic() - sent < 20  # stdin still open
        assert (
            proc.stderr.read()
            .decode()
            .endswith(
                "stopped: terminated by SIGTERM; stdout: the rows scored before the stop were written, the others not; "
                "run the command again\n"
            )
        )
    finally:
        proc.kill()


def test_stdin_errors_and_an_empty_stdin_are_as_a_files(runs, tmp_path):
    """A bad record is <stdin>:LINE (exit 2); an empty stdin writes the CSV header alone with the
    empty input's warning (exit 0); no --format, a format a pipe cannot carry, stdin closed (<&-):
    one line each."""
    model = runs / "jsonl"
    data = b"words\n" + b"a cat\n" * 3000 + b"x\xff\n"  # line 3002 is not UTF-8
    done = _piped(
        "predict", runs / "csv", "-", "--format", "csv", "--option", "encoding=utf-8", "--out", "-", data=data
    )
    # read once, not again: the line of the bad bytes all the same, as a file's error names it
    assert done.returncode == 2 and done.stderr.decode().startswith(
        "error: <stdin>:3002: the bytes b'\\xff' are not valid utf-8 text ("
    ), done.stderr
    done = _piped("predict", model, "-", "--format", "jsonl", "--out", "-", data=b'{"body": "a cat"}\n{"body": \n')
    assert done.returncode == 2 and done.stderr.decode().startswith("error: <stdin>:2: invalid JSON")
    done = _piped("predict", model, "-", "--format", "jsonl", "--out", tmp_path / "p.csv", data=b"")
    assert done.returncode == 0 and (tmp_path / "p.csv").read_bytes() == b"location,label_1,score_1\r\n"
    assert "<stdin>: no records to score (the input is empty" in done.stderr.decode()
    for args, line in (
        ([], "error: <stdin>: standard input has no file name to tell its format by (pass --format, one of: jsonl"),
        (["--format", "parquet"], "error: <stdin>: parquet input cannot be read from a pipe (its index is at the end"),
    ):
        done = _piped("predict", model, "-", "--out", "-", *args, data=b'{"body": "a cat"}\n')
        err = done.stderr.decode()
        assert done.returncode == 2 and err.startswith(line) and err.count("\n") == 1 and done.stdout == b"", err
    proc = _streamfit(
        "predict", model, "-", "--format", "jsonl", "--out", "-",
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=lambda: os.close(0),
    )  # fmt: skip
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 2 and out == b""
    assert (
        err.decode()
        == "error: <stdin>: this process has no standard input (closed) (pipe the data in, or name a file)\n"
    )


def test_out_to_dev_stdout_stderr_or_a_fifo_is_written_as_a_stream(runs, tmp_path):
    """--out /dev/stdout is --out - (stdout redirected to a file too: a rename would replace the
    file, a reopening truncate it), /dev/stderr stderr, an existing FIFO the pipe it is (was:
    `the output must end in .csv, .jsonl or .parquet`); the bytes of the file output, the count on stderr."""
    raw = _many_docs(tmp_path / "new.jsonl", 10)
    model = runs / "jsonl"
    run("predict", model, raw, "-o", tmp_path / "file.csv")
    expected = (tmp_path / "file.csv").read_bytes()
    with open(tmp_path / "redirected.csv", "wb") as redirected:
        proc = _streamfit("predict", model, raw, "--out", "/dev/stdout", stdout=redirected, stderr=subprocess.PIPE)
        err = proc.communicate(timeout=600)[1].decode()
    assert proc.returncode == 0 and (tmp_path / "redirected.csv").read_bytes() == expected
    assert err == "10 rows written to stdout\n"
    proc = _streamfit(
        "predict", model, raw, "--out", "/dev/stderr", "-q", stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0 and out == b"" and err == expected + b"10 rows written to stderr\n"
    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    proc = _streamfit("predict", model, raw, "--out", fifo, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    with open(fifo, "rb") as f:  # the FIFO's reader: predict's open of it waits for this one
        rows = f.read()
    err = proc.communicate(timeout=600)[1].decode()
    run("predict", model, raw, "-o", tmp_path / "file.jsonl")
    assert proc.returncode == 0 and rows == (tmp_path / "file.jsonl").read_bytes()  # a FIFO's suffix: its format
    assert err == f"10 rows written to {fifo}\n"
