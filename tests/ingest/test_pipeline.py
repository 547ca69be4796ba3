"""The ingest pipeline end to end: sources -> featurizer -> stores, checked against scikit-learn."""

import contextlib
import itertools
import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sklearn.datasets import dump_svmlight_file, load_digits, load_svmlight_file
from sklearn.feature_extraction.text import HashingVectorizer, TfidfTransformer

from streamfit.errors import ConfigError, InputError, StoreError, StreamfitError
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.pipeline import IngestOptions, ingest, stratified_test_mask
from streamfit.store import open_store

DOCS = [
    ("the quick brown fox jumps over the lazy dog", "animals"),
    ("stock markets fell sharply as investors sold shares", "finance"),
    ("the central bank raised interest rates again", "finance"),
    ("a cat and a dog shared the sunny garden", "animals"),
    ("bond yields rose after the rate decision", "finance"),
    ("wolves hunt in packs across the snowy forest", "animals"),
    ("quarterly earnings beat analyst expectations", "finance"),
    ("the parrot repeated every word it heard", "animals"),
] * 5


@pytest.fixture(scope="module")
def digits_svm(tmp_path_factory):
    X, y = load_digits(return_X_y=True)
    path = tmp_path_factory.mktemp("svm") / "digits.svm"
    dump_svmlight_file(X, y, str(path), zero_based=False)
    return str(path)


def _jsonl(tmp_path, docs, name="docs.jsonl"):
    path = tmp_path / name
    path.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in docs))
    return str(path)


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_libsvm_no_hash_round_trip_equals_sklearn(tmp_path, digits_svm, backend):
    report = ingest(
        IngestOptions(
            [digits_svm], str(tmp_path / "s"), backend=backend, chunk_rows=256, batch_size=100, progress=False
        )
    )
    assert (report.read, report.written, report.skipped) == (1797, 1797, 0)
    X_ref, y_ref = load_svmlight_file(digits_svm)
    store = open_store(str(tmp_path / "s"))
    X, ids = store.to_scipy()
    assert X.shape == X_ref.shape and abs(X - X_ref).max() == 0
    assert np.array_equal(np.asarray(store.classes, dtype=float)[ids], y_ref)
    assert store.manifest.counts == {"read": 1797, "skipped": 0, "written": 1797}


def test_text_hashing_equals_sklearn_hashing_vectorizer(tmp_path):
    path = _jsonl(tmp_path, DOCS)
    cfg = HashingConfig(n_features=2**10, value="count")
    ingest(IngestOptions([path], str(tmp_path / "s"), hashing=cfg, idf=False, l2_normalize=False, progress=False))
    X, y = open_store(str(tmp_path / "s")).to_scipy()
    ref = HashingVectorizer(n_features=2**10, norm=None, alternate_sign=True).transform([t for t, _ in DOCS])
    ref.eliminate_zeros()
    assert abs(X - ref).max() == 0
    assert open_store(str(tmp_path / "s")).classes == ["animals", "finance"]


def test_idf_from_training_rows_equals_sklearn_tfidf(tmp_path):
    """Text's defaults (issue 20, item 9): log(1 + count) term values, IDF counted on the training
    rows, unit-norm rows: scikit-learn's TfidfTransformer on log1p of HashingVectorizer's counts."""
    path = _jsonl(tmp_path, DOCS)
    cfg = HashingConfig(n_features=2**12, alternate_sign=False)
    ingest(
        IngestOptions(
            [path],
            str(tmp_path / "tr"),
            hashing=cfg,
            test_size=0.25,
            test_out=str(tmp_path / "te"),
            progress=False,
        )
    )
    train, test = open_store(str(tmp_path / "tr")), open_store(str(tmp_path / "te"))
    counts = HashingVectorizer(n_features=2**12, norm=None, alternate_sign=False).transform([t for t, _ in DOCS])
    counts = counts.log1p()
    mask = stratified_test_mask(np.array([0 if lab == "animals" else 1 for _, lab in DOCS]), 0.25, 0)
    tfidf = TfidfTransformer(norm="l2", smooth_idf=True).fit(counts[~mask])
    Xtr, _ = train.to_scipy()
    Xte, _ = test.to_scipy()
    np.testing.assert_allclose(Xtr.toarray(), tfidf.transform(counts[~mask]).toarray(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(Xte.toarray(), tfidf.transform(counts[mask]).toarray(), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(train.idf, tfidf.idf_, rtol=1e-12)


def test_stratified_split_is_exact_and_seeded(tmp_path, digits_svm, check_class_rows):
    opts = dict(test_size=0.2, chunk_rows=300, progress=False)
    ingest(IngestOptions([digits_svm], str(tmp_path / "a"), test_out=str(tmp_path / "at"), **opts))
    ingest(IngestOptions([digits_svm], str(tmp_path / "b"), test_out=str(tmp_path / "bt"), **opts))
    a, at = open_store(str(tmp_path / "a")), open_store(str(tmp_path / "at"))
    assert a.manifest.fingerprint == open_store(str(tmp_path / "b")).manifest.fingerprint
    _, y = load_svmlight_file(digits_svm)
    _, ya = a.to_scipy()
    _, yt = at.to_scipy()
    for c in range(10):
        n_c = int((y == c).sum())
        assert int((yt == a.classes.index(str(c))).sum()) == round(0.2 * n_c)
        assert int((ya == a.classes.index(str(c))).sum()) == n_c - round(0.2 * n_c)
    assert a.n_rows + at.n_rows == 1797 and at.classes == a.classes
    for path in ("a", "at"):  # the class counts each manifest records are its rows'
        check_class_rows(tmp_path / path)


@pytest.mark.parametrize(
    "labels, declare",
    [
        (["Café crème", "東京"], "--classes 'Café crème,東京,new one'"),  # quoted for the shell
        (["a, b", "c"], "in a pipeline's ingest section, `classes:` listing every one (--classes cannot name"),
    ],
)
def test_an_unknown_label_s_fix_can_be_typed_as_given(tmp_path, labels, declare):
    """qa33: the hint's --classes listing was joined unquoted, and for a class with a comma in it
    ('a, b') it named a command that splits that class in two; now quoted, or the pipeline's list."""
    docs = [(f"words of {label}", label) for label in labels for _ in range(3)]
    train = _jsonl(tmp_path, docs, "train.jsonl")
    ingest(IngestOptions([train], str(tmp_path / "tr"), hashing=HashingConfig(n_features=2**10), progress=False))
    test = _jsonl(tmp_path, [("a new topic", "new one")], "t.jsonl")
    with pytest.raises(InputError) as e:
        ingest(IngestOptions([test], str(tmp_path / "te"), like=str(tmp_path / "tr"), progress=False))
    assert e.value.hint.startswith(f"declare every class when ingesting the training data, {declare}")


def test_like_reuses_classes_and_refuses_unknown_labels(tmp_path, check_class_rows):
    train = _jsonl(tmp_path, DOCS, "train.jsonl")
    cfg = HashingConfig(n_features=2**10)
    ingest(IngestOptions([train], str(tmp_path / "tr"), hashing=cfg, idf=True, progress=False))
    test = _jsonl(tmp_path, [("a dog", "animals"), ("rates fell", "finance"), ("a new topic", "sports")], "t.jsonl")
    with pytest.raises(InputError) as e:
        ingest(IngestOptions([test], str(tmp_path / "te"), like=str(tmp_path / "tr"), progress=False))
    # the unknown label named, and the fix on the training ingest (issue 20, item 7)
    assert "t.jsonl:3: label(s) 'sports' not among the 2 classes of the training store ('animals', 'finance')" in str(
        e.value
    )
    assert "--classes animals,finance,sports" in e.value.hint
    assert not os.path.exists(tmp_path / "te") and not os.path.exists(tmp_path / "te.partial")
    report = ingest(
        IngestOptions([test], str(tmp_path / "te"), like=str(tmp_path / "tr"), on_bad_record="skip", progress=False)
    )
    assert (report.read, report.written, report.skipped) == (3, 2, 1)
    te = open_store(str(tmp_path / "te"))
    assert (
        te.classes == ["animals", "finance"]
        and te.featurizer_dict() == open_store(str(tmp_path / "tr")).featurizer_dict()
    )
    assert np.array_equal(te.idf, open_store(str(tmp_path / "tr")).idf)
    check_class_rows(tmp_path / "te")
    assert te.manifest.class_rows == [1, 1]  # the skipped record is not counted


def test_like_reads_with_the_training_stores_source_options(tmp_path):
    train = tmp_path / "train.jsonl"
    train.write_text("".join(json.dumps({"body": t, "topic": lab}) + "\n" for t, lab in DOCS[:8]))
    ingest(
        IngestOptions(
            [str(train)],
            str(tmp_path / "tr"),
            hashing=HashingConfig(n_features=2**10),
            source_options={"text_field": "body", "label_field": "topic"},
            progress=False,
        )
    )
    assert open_store(str(tmp_path / "tr")).featurizer_dict()["source_options"] == {
        "text_field": "body",
        "label_field": "topic",
    }
    test = tmp_path / "test.jsonl"
    test.write_text(json.dumps({"body": "a dog", "topic": "animals", "y": "finance"}) + "\n")
    ingest(IngestOptions([str(test)], str(tmp_path / "te"), like=str(tmp_path / "tr"), progress=False))
    ingest(
        IngestOptions(
            [str(test)],
            str(tmp_path / "te2"),
            like=str(tmp_path / "tr"),
            source_options={"label_field": "y"},
            progress=False,
        )
    )
    assert open_store(str(tmp_path / "te")).to_scipy()[1].tolist() == [0]
    assert open_store(str(tmp_path / "te2")).to_scipy()[1].tolist() == [1]


def test_an_option_the_inputs_format_does_not_read_is_refused(tmp_path, digits_svm):
    """A format option given to ingest that no input's format reads is named with the formats
    that do, before anything is read; it was dropped without a word (feature_fields for a JSONL
    file then failed with "no field 'text'"; n_labels for LIBSVM did nothing). An option that
    some of the inputs read is kept, as are those `--like` carries from a training file of
    another format (the JSONL store's, for a CSV test file here)."""
    jsonl = tmp_path / "a.jsonl"
    jsonl.write_text("".join(json.dumps({"text": t, "label": lab}) + "\n" for t, lab in DOCS[:8]))
    csv_file = tmp_path / "t.csv"
    csv_file.write_text("text,label\n" + "".join(f"{t},{lab}\n" for t, lab in DOCS[:4]))
    for path, options, message in [
        (jsonl, {"feature_fields": "a,b"}, "feature_fields: not read from jsonl input .it is for csv, tsv, parquet"),
        (digits_svm, {"n_labels": 3}, "n_labels: not read from libsvm input .it is for arff input.; drop it"),
    ]:
        with pytest.raises(ConfigError, match=message):
            ingest(IngestOptions([str(path)], str(tmp_path / "s"), source_options=options, progress=False))
        assert not (tmp_path / "s").exists()
    both = IngestOptions(
        [str(csv_file), str(jsonl)],
        str(tmp_path / "both"),
        hashing=HashingConfig(n_features=2**10),
        source_options={"header": True},
        progress=False,
    )
    assert ingest(both).stores == {str(tmp_path / "both"): 12}  # the CSV file reads it
    ingest(
        IngestOptions(
            [str(jsonl)],
            str(tmp_path / "tr"),
            hashing=HashingConfig(n_features=2**10),
            source_options={"text_field": "text"},
            progress=False,
        )
    )
    ingest(IngestOptions([str(csv_file)], str(tmp_path / "te"), like=str(tmp_path / "tr"), progress=False))
    assert open_store(str(tmp_path / "te")).n_rows == 4


def test_like_stores_test_data_with_the_training_stores_backend_and_chunk_rows(tmp_path, digits_svm):
    """`ingest NEW --like TRAIN.pq` wrote a Zarr store whatever TRAIN's backend: backend and
    chunk_rows default to the --like store's, and options given explicitly still win."""
    ingest(IngestOptions([digits_svm], str(tmp_path / "tr.pq"), backend="parquet", chunk_rows=300, progress=False))
    ingest(IngestOptions([digits_svm], str(tmp_path / "te.pq"), like=str(tmp_path / "tr.pq"), progress=False))
    te = open_store(str(tmp_path / "te.pq"))
    assert (te.manifest.backend, te.chunk_rows, te.n_chunks) == ("parquet", 300, 6)
    np.testing.assert_array_equal(
        te.to_scipy()[0].toarray(), open_store(str(tmp_path / "tr.pq")).to_scipy()[0].toarray()
    )
    ingest(
        IngestOptions(
            [digits_svm], str(tmp_path / "te.zarr"), like=str(tmp_path / "tr.pq"), backend="zarr", progress=False
        )
    )
    assert (
        open_store(str(tmp_path / "te.zarr")).manifest.backend,
        open_store(str(tmp_path / "te.zarr")).chunk_rows,
    ) == ("zarr", 300)
    ingest(
        IngestOptions(
            [digits_svm], str(tmp_path / "te2.pq"), like=str(tmp_path / "tr.pq"), chunk_rows=1000, progress=False
        )
    )
    assert (open_store(str(tmp_path / "te2.pq")).manifest.backend, open_store(str(tmp_path / "te2.pq")).chunk_rows) == (
        "parquet",
        1000,
    )
    ingest(IngestOptions([digits_svm], str(tmp_path / "plain"), progress=False))  # no --like: the usual store
    assert (open_store(str(tmp_path / "plain")).manifest.backend, open_store(str(tmp_path / "plain")).chunk_rows) == (
        "zarr",
        16384,
    )


def test_input_kind_is_recorded_and_data_options_are_not(tmp_path, digits_svm):
    for label, name in [("a", "1.txt"), ("b", "2.txt")]:
        os.makedirs(tmp_path / "corpus" / "train" / label)
        (tmp_path / "corpus" / "train" / label / name).write_text("some words")
    ingest(
        IngestOptions(
            [str(tmp_path / "corpus")],
            str(tmp_path / "t"),
            hashing=HashingConfig(n_features=2**10),
            source_options={"subset": "train", "encoding": "latin-1"},
            progress=False,
        )
    )
    ingest(IngestOptions([digits_svm], str(tmp_path / "n"), source_options={"zero_based": False}, progress=False))
    text = open_store(str(tmp_path / "t")).featurizer_dict()
    assert text["input"] == "text" and text["source_options"] == {"encoding": "latin-1"}
    numeric = open_store(str(tmp_path / "n")).featurizer_dict()
    assert numeric["input"] == "numeric" and numeric["source_options"] == {"zero_based": False}


@pytest.mark.parametrize("key, off", [("label_field", None), ("y_dataset", None), ("class_folders", False)])
def test_options_that_read_no_labels_are_refused(tmp_path, key, off):
    with pytest.raises(StreamfitError, match=f"{key}={off} reads no labels, but ingest needs them"):
        ingest(
            IngestOptions(
                [_jsonl(tmp_path, DOCS)],
                str(tmp_path / "s"),
                hashing=HashingConfig(n_features=2**10),
                source_options={key: off},
                progress=False,
            )
        )


def test_bad_line_names_file_and_line_and_loses_nothing(tmp_path):
    path = tmp_path / "bad.svm"
    path.write_text("1 1:0.5 3:1\n2 2:1\n1 4:nan\n2 1:2\n")
    with pytest.raises(InputError, match=r"bad.svm:3"):
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), progress=False))
    assert not os.path.exists(tmp_path / "s")
    with pytest.raises(StoreError):
        open_store(str(tmp_path / "s"))
    report = ingest(IngestOptions([str(path)], str(tmp_path / "s"), on_bad_record="quarantine", progress=False))
    assert (report.read, report.written, report.skipped) == (4, 3, 1)
    quarantined = [json.loads(line) for line in open(str(tmp_path / "s") + ".quarantine.jsonl")]
    assert len(quarantined) == 1 and "bad.svm:3" in quarantined[0]["location"]


@pytest.mark.parametrize("mode", ["skip", "quarantine"])
def test_skipped_records_are_named_in_one_warning(tmp_path, caplog, mode):
    """A user who skips bad records learns how many, where the first one is and why, and where
    the quarantine file went, not only a count in the summary."""
    path = tmp_path / "bad.svm"
    path.write_text("1 1:0.5 3:1\n2 2:1\n1 4:nan\n2 1:2\n1 x:1\n")
    ingest(IngestOptions([str(path)], str(tmp_path / "s"), on_bad_record=mode, progress=False))
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    kept = f"; each one is in {tmp_path / 's'}.quarantine.jsonl" if mode == "quarantine" else ""
    assert len(warnings) == 1
    assert warnings[0].startswith(f"2 bad records skipped (the first: {path}:3: ")
    assert warnings[0].endswith(")" + kept) and "nan" in warnings[0].lower()


def test_an_out_that_cannot_be_made_is_named_as_given(tmp_path, digits_svm):
    """The error names --out, not the stage of an IDF or split pass (`OUT.pass1.partial.partial`)."""
    (tmp_path / "file").write_text("")
    out = tmp_path / "file" / "s.zarr"
    with pytest.raises(StreamfitError, match=rf"^{out}: cannot write \(Not a directory\)"):
        ingest(IngestOptions([digits_svm], str(out), test_size=0.2, test_out=str(tmp_path / "t"), progress=False))
    assert not (tmp_path / "t").exists()


def test_out_of_range_index_with_fixed_width(tmp_path):
    path = tmp_path / "wide.svm"
    path.write_text("1 1:1\n2 9:1\n")
    with pytest.raises(InputError, match=r"wide.svm:2: feature index 9 is beyond the 4 features \(indices 1–4\)"):
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), n_features=4, progress=False))


@pytest.mark.parametrize(
    "name, content",
    [("empty.jsonl", ""), ("empty.csv", ""), ("header.csv", "id,label,text\n"), ("bom.csv", "\ufeffid,label,text\r\n")],
)
def test_an_input_without_records_is_an_error_that_says_what_it_holds(tmp_path, name, content):
    """An empty file, or a CSV of its header row alone (with a BOM and CRLF too): one line naming
    the file and both cases (the header-only file was called empty)."""
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    with pytest.raises(
        InputError, match=rf"^.*{name}: no records found: the input is empty, or holds a header row alone"
    ):
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), hashing=HashingConfig(), progress=False))
    assert not (tmp_path / "s").exists()


def test_multilabel_libsvm(tmp_path):
    path = tmp_path / "ml.svm"
    path.write_text("0,2 1:1 2:0.5\n1 3:1\n 2:2\n2,1 1:0.25\n")
    ingest(IngestOptions([str(path)], str(tmp_path / "s"), progress=False))
    s = open_store(str(tmp_path / "s"))
    _, Y = s.to_scipy()
    assert s.multilabel and s.classes == ["0", "2", "1"]
    assert [sorted(s.classes[j] for j in Y[i].indices) for i in range(4)] == [["0", "2"], ["1"], [], ["1", "2"]]


def test_existing_output_needs_overwrite(tmp_path, digits_svm):
    ingest(IngestOptions([digits_svm], str(tmp_path / "s"), progress=False))
    with pytest.raises(StreamfitError, match="--overwrite"):
        ingest(IngestOptions([digits_svm], str(tmp_path / "s"), progress=False))
    ingest(IngestOptions([digits_svm], str(tmp_path / "s"), overwrite=True, progress=False))
    assert open_store(str(tmp_path / "s")).n_rows == 1797


def test_parquet_token_lists_hash_like_the_same_text(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = [t for t, _ in DOCS]
    labels = [lab for _, lab in DOCS]
    # no punctuation in these documents: the tokenizer's tokens are the words of >= 2 letters
    tokens = [[w for w in t.split() if len(w) >= 2] for t in texts]
    pq.write_table(pa.table({"text": tokens, "label": labels}), str(tmp_path / "tok.parquet"))
    pq.write_table(pa.table({"text": texts, "label": labels}), str(tmp_path / "raw.parquet"))
    cfg = HashingConfig(n_features=2**10, value="log1p")
    for name in ("tok", "raw"):
        ingest(IngestOptions([str(tmp_path / f"{name}.parquet")], str(tmp_path / name), hashing=cfg, progress=False))
    X_tok, y_tok = open_store(str(tmp_path / "tok")).to_scipy()
    X_raw, y_raw = open_store(str(tmp_path / "raw")).to_scipy()
    assert X_tok.nnz > 0 and abs(X_tok - X_raw).max() == 0 and np.array_equal(y_tok, y_raw)


@pytest.mark.parametrize("test_size", [None, 0.5])
def test_rows_without_features_are_counted_and_the_first_named(tmp_path, caplog, test_size):
    docs = [("a b c", "x"), ("hello world", "x"), ("I", "y"), ("good day", "y")]
    split = {"test_size": test_size, "test_out": str(tmp_path / "t")} if test_size else {}
    report = ingest(
        IngestOptions(
            [_jsonl(tmp_path, docs)],
            str(tmp_path / "s"),
            hashing=HashingConfig(n_features=2**10),
            progress=False,
            **split,
        )
    )
    assert (report.written, report.empty) == (4, 2)
    assert report.summary().startswith("records read 4, written 4, skipped 0; 2 rows have no features; ")
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        (
            f"2 rows have no features (the first: {tmp_path / 'docs.jsonl'}:1); text rows get features from words of 2 "
            "or more characters (--min-token-length): check --text-field, or lower --min-token-length"
        )
    ]


def test_rows_without_features_in_numeric_data(tmp_path, caplog):
    (tmp_path / "e.svm").write_text("1 1:1\n2\n1 2:1\n")
    report = ingest(IngestOptions([str(tmp_path / "e.svm")], str(tmp_path / "s"), progress=False))
    assert report.empty == 1 and "1 rows have no features" in report.summary()
    assert f"(the first: {tmp_path / 'e.svm'}:2); their records list no features" in caplog.text


def test_no_warning_when_every_row_has_features(tmp_path, caplog, digits_svm):
    report = ingest(IngestOptions([digits_svm], str(tmp_path / "s"), progress=False))
    assert report.empty == 0 and "no features" not in report.summary() + caplog.text


def test_one_class_is_a_warning_at_the_end(tmp_path, caplog):
    path = _jsonl(tmp_path, [("good day", "spam"), ("hello world", "spam")])
    ingest(IngestOptions([path], str(tmp_path / "s"), hashing=HashingConfig(n_features=2**10), progress=False))
    assert [r.getMessage() for r in caplog.records if r.levelname == "WARNING"] == [
        (
            f"{tmp_path / 's'}: only one class: spam; a classifier needs two or more: check the labels (--label-field, "
            "the class folders)"
        )
    ]
    caplog.clear()
    (tmp_path / "m.svm").write_text("a 1:1\na 2:1\n")  # one label per line, read as multilabel
    ingest(
        IngestOptions(
            [str(tmp_path / "m.svm")], str(tmp_path / "m"), source_options={"multilabel": True}, progress=False
        )
    )
    assert "only one class" not in caplog.text


def test_labels_written_two_ways_are_a_warning(tmp_path, caplog):
    """'pos' and 'pos ' (a space after the CSV delimiter), 'Neg' and 'neg', or '7' and '7.0' (qa30:
    integers saved as floats in part of a file) are kept as different classes, as written, with
    one warning naming them; distinct labels give none."""
    (tmp_path / "d.csv").write_text(
        "label,text\npos,good great\npos ,good fine\nneg,bad awful\nNeg,awful day\nother,so so\n"
        "7,seven\n7.0,seven again\n"
    )
    ingest(
        IngestOptions(
            [str(tmp_path / "d.csv")], str(tmp_path / "s"), hashing=HashingConfig(n_features=2**10), progress=False
        )
    )
    assert open_store(str(tmp_path / "s")).classes == ["pos", "pos ", "neg", "Neg", "other", "7", "7.0"]
    warnings = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warnings == [
        f"{tmp_path / 's'}: classes 'pos' and 'pos '; 'neg' and 'Neg'; '7' and '7.0' differ only in white space or "
        "letter case, or are one number written two ways, and are trained as different classes: check the labels "
        "(a space after a CSV delimiter? integers saved as floats?), or ignore this if they differ"
    ]
    caplog.clear()
    (tmp_path / "e.csv").write_text("label,text\npos,good great\nneg,bad awful\n7,seven\n70,seventy\n")
    ingest(
        IngestOptions(
            [str(tmp_path / "e.csv")], str(tmp_path / "e"), hashing=HashingConfig(n_features=2**10), progress=False
        )
    )
    assert "white space" not in caplog.text


def test_numbers_read_as_classes_that_look_like_a_real_valued_target_are_a_warning(tmp_path, caplog):
    """qa31: diabetes's 442 targets (whole numbers 25 … 346) ingested without --target numeric
    became 214 classes of about 2 rows each, without a word. Now one warning names --target numeric
    when every class is a number and there are more than a quarter as many classes as rows, or some
    class has a fraction; class ids written as numbers (digits' 0 … 9, many rows a class), a
    --target numeric store and a store ingested --like another get none."""
    from sklearn.datasets import load_diabetes

    X, y = load_diabetes(return_X_y=True)
    dump_svmlight_file(X, y, str(tmp_path / "diabetes.svm"), zero_based=False)
    dump_svmlight_file(X[:40], y[:40] / 10, str(tmp_path / "tenths.svm"), zero_based=False)
    digits = load_digits()
    dump_svmlight_file(digits.data, digits.target, str(tmp_path / "digits.svm"), zero_based=False)

    def warnings_of(name, **kw):
        caplog.clear()
        out = tmp_path / f"{name}-{'-'.join(kw)}.zarr"
        ingest(IngestOptions([str(tmp_path / name)], str(out), progress=False, **kw))
        return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

    store = tmp_path / "diabetes.svm-.zarr"
    assert warnings_of("diabetes.svm") == [
        f"{store}: the 214 classes are all numbers (25 … 346), 2.1 rows a class: if the label is a real-valued "
        "target, pass --target numeric (regression); or ignore this if they are class ids"
    ]
    assert open_store(str(store)).n_classes == 214  # kept as classes: the store is what was asked for
    assert warnings_of("tenths.svm") == [
        f"{tmp_path / 'tenths.svm-.zarr'}: the 38 classes are all numbers (4.9 … 34.1), some with a fraction: if "
        "the label is a real-valued target, pass --target numeric (regression); or ignore this if they are "
        "class ids"
    ]
    assert warnings_of("diabetes.svm", target="numeric") == []
    assert warnings_of("digits.svm") == []
    assert warnings_of("diabetes.svm", like=str(store)) == []


LARGEST_COLUMN = 2**31 - 2  # store column indices are int32 and the width, largest + 1, must fit too
# 1-based LIBSVM indices around the int32 boundaries (the columns are one less) and small ones
INDICES = st.one_of(
    st.integers(1, 50),
    st.sampled_from([2**31 - 1, 2**31, 2**31 + 1, 3_000_000_000, 2**32 + 3, 2**40, 2**62]),
)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.sets(INDICES, max_size=4).map(sorted), min_size=1, max_size=6))
def test_no_hash_stores_every_column_as_read_or_names_the_line(tmp_path_factory, rows):
    """Property: with --no-hash a row is stored with exactly its columns (index - 1), or, when one
    of them is beyond the int32 columns of a store, it is a bad record at its line: never a column
    wrapped to another one, never a width taken from anything but the kept rows."""
    d = tmp_path_factory.mktemp("wide")
    path = d / "wide.svm"
    path.write_text(
        "".join(f"{r % 2} " + " ".join(f"{j}:{j % 7 + 1}" for j in row) + "\n" for r, row in enumerate(rows))
    )
    fits = [all(j - 1 <= LARGEST_COLUMN for j in row) for row in rows]
    if not all(fits):
        with pytest.raises(
            InputError, match=rf"wide.svm:{fits.index(False) + 1}: feature column \d+ .*beyond 2147483646"
        ):
            ingest(IngestOptions([str(path)], str(d / "refused"), progress=False))
    if not any(fits):
        return
    report = ingest(IngestOptions([str(path)], str(d / "s"), on_bad_record="skip", progress=False))
    assert (report.written, report.skipped) == (sum(fits), fits.count(False))
    kept = [row for row, ok in zip(rows, fits) if ok]
    s = open_store(str(d / "s"))
    assert s.n_features == max((j for row in kept for j in row), default=0)  # largest column + 1
    X = s.read_chunk(0).X
    assert [X.indices[X.indptr[r] : X.indptr[r + 1]].tolist() for r in range(len(kept))] == [
        [j - 1 for j in row] for row in kept
    ]
    assert [X.data[X.indptr[r] : X.indptr[r + 1]].tolist() for r in range(len(kept))] == [
        [j % 7 + 1 for j in row] for row in kept
    ]
    assert s.verify() == []


@pytest.mark.parametrize("fmt", ["parquet", "npz"])
def test_no_hash_columns_beyond_int32_are_refused_in_every_indexed_format(tmp_path, fmt):
    """Parquet index lists declare no width: a row with a column beyond a store's int32 columns is
    a bad record. A scipy .npz declares its width (the store's, --no-hash): one beyond them is
    refused whole, for any --on-bad-record, unless --n-features cuts it (then its rows beyond it
    are bad records)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    import scipy.sparse as sp

    kwargs: dict = {"progress": False}
    if fmt == "parquet":
        path = str(tmp_path / "wide.parquet")
        pq.write_table(pa.table({"indices": [[0], [4294967299]], "values": [[1.0], [2.0]], "label": ["a", "b"]}), path)
        problem = r"wide.parquet:row group 0, row 1: feature column 4294967299 .*beyond 2147483646"
        width = 1
    else:
        path = str(tmp_path / "wide.npz")
        X = sp.csr_matrix(
            (np.ones(2), np.array([0, 4294967298], dtype=np.int64), np.array([0, 1, 2])), shape=(2, 4294967299)
        )
        sp.save_npz(path, X)
        np.save(tmp_path / "y.npy", np.array([0, 1]))
        kwargs["source_options"] = {"y_path": str(tmp_path / "y.npy")}
        for policy in ("error", "skip"):
            with pytest.raises(InputError, match="wide.npz: 4294967299 feature columns, more than the 2147483647 "):
                ingest(IngestOptions([path], str(tmp_path / "s"), on_bad_record=policy, **kwargs))
        kwargs["n_features"] = width = 2
        problem = r"wide.npz:row 1: feature index 4294967298 is beyond the 2 features \(indices 0–1\)"
    with pytest.raises(InputError, match=problem):
        ingest(IngestOptions([path], str(tmp_path / "s"), **kwargs))
    report = ingest(IngestOptions([path], str(tmp_path / "s"), on_bad_record="skip", **kwargs))
    s = open_store(str(tmp_path / "s"))
    assert (report.written, report.skipped, s.n_features) == (1, 1, width)


def test_no_hash_n_features_beyond_int32_is_refused(tmp_path, digits_svm):
    with pytest.raises(StreamfitError, match="--n-features 2147483648 is above 2147483647"):
        ingest(IngestOptions([digits_svm], str(tmp_path / "s"), n_features=2**31, progress=False))


@contextlib.contextmanager
def _address_space_grows_at_most(extra: int):
    """Lower this process's address-space limit to its present size + extra bytes, for the block."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    size = int(open("/proc/self/statm").read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + extra, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def test_l2_normalize_follows_nnz_not_the_width():
    """Against scikit-learn's normalize, on a matrix as wide as a store can be (the old product
    with a diagonal matrix allocated per column: 20 GB at this width), explicit zeros kept."""
    import scipy.sparse as sp
    from sklearn.preprocessing import normalize

    from streamfit.ingest.featurize import l2_normalize_rows

    rng = np.random.default_rng(0)
    dense = rng.normal(size=(6, 9)) * (rng.random((6, 9)) < 0.5)
    dense[2] = 0.0
    small = sp.csr_matrix(dense, dtype=np.float32)
    small.data[0] = 0.0  # an explicit zero
    wide = sp.csr_matrix((small.data, small.indices * 2**27 + 5, small.indptr), shape=(6, 2**31 - 1))
    with _address_space_grows_at_most(2**30):  # a regression ends in MemoryError, not the OOM killer
        got = l2_normalize_rows(wide)
    want = normalize(small.astype(np.float64), norm="l2")
    assert got.shape == wide.shape and got.dtype == np.float32
    assert np.array_equal(got.indptr, small.indptr) and np.array_equal(got.indices, wide.indices)
    assert np.allclose(got.data, want.data, rtol=1e-6, atol=0)


def test_l2_normalize_without_n_features_stays_small(tmp_path, cli):
    """`ingest --no-hash --l2-normalize` of a 4-line file with the widest column, under a 3 GiB
    address-space limit (before: 20 GB and the OOM killer)."""
    import resource
    import subprocess

    path = tmp_path / "wide.svm"
    path.write_text("1 1:1 2147483647:2\n0 2:1\n1 3:0.5\n0 1:3\n")

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))

    run = subprocess.run(
        cli("ingest", path, "--no-hash", "--l2-normalize", "--out", tmp_path / "s"),
        capture_output=True,
        text=True,
        preexec_fn=limit,
    )
    assert run.returncode == 0, run.stderr
    s = open_store(str(tmp_path / "s"))
    X = s.read_chunk(0).X
    assert s.n_features == 2**31 - 1 and np.allclose(X.data, [1 / 5**0.5, 2 / 5**0.5, 1, 1, 1])


def test_idf_beyond_the_memory_available_is_refused(tmp_path, monkeypatch):
    import psutil

    path = tmp_path / "wide.svm"
    path.write_text("1 1:1 2147483647:2\n0 2:1\n")
    monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": 2**30})())
    with pytest.raises(
        StreamfitError, match=r"--idf over 2147483647 feature columns needs 64 GiB, more than the 1 GiB"
    ):
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), idf=True, progress=False))
    assert not os.path.exists(tmp_path / "s")


@pytest.mark.parametrize(
    ("name", "content", "where"),
    [
        ("wrap.svm", "1 1:1 4294967299:2\n", "wrap.svm:1"),
        ("negative.svm", "1 1:1\n0 3000000000:1\n", "negative.svm:2"),
    ],
)
def test_cli_refuses_columns_beyond_int32_in_one_line(tmp_path, cli, name, content, where):
    import subprocess

    (tmp_path / name).write_text(content)
    run = subprocess.run(
        cli("ingest", tmp_path / name, "--no-hash", "--out", tmp_path / "s"), capture_output=True, text=True
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    [line] = run.stderr.strip().splitlines()
    assert where in line and "drop --no-hash" in line
    assert not os.path.exists(tmp_path / "s")


@pytest.mark.parametrize(
    "out, test_out, what",
    [
        ("s", "s/test", "--test-out s/test and --out s overlap"),
        ("s/train", "s", "overlap"),
        ("s", "s", "overlap"),
        ("docs.jsonl", None, "--out docs.jsonl overlaps the input"),
        (".", None, "overlaps the input"),  # the input lies inside --out
        ("s", "docs.jsonl", "--test-out docs.jsonl overlaps the input"),
    ],
)
def test_outputs_that_overlap_each_other_or_an_input_are_refused(tmp_path, monkeypatch, out, test_out, what):
    monkeypatch.chdir(tmp_path)
    source = _jsonl(tmp_path, DOCS)
    before = sorted(os.listdir(tmp_path))
    split = dict(test_out=test_out, test_size=0.25) if test_out else {}
    with pytest.raises(StreamfitError, match=what):
        ingest(IngestOptions([os.path.relpath(source)], out, overwrite=True, progress=False, **split))
    assert sorted(os.listdir(tmp_path)) == before and len(open(source).readlines()) == len(DOCS)


@pytest.mark.parametrize(
    "quarantine, what",
    [("docs.jsonl", "--quarantine docs.jsonl overlaps the input"), ("s/bad.jsonl", "overlaps the --out s")],
)
def test_a_quarantine_file_that_overlaps_an_input_or_output_is_refused(tmp_path, monkeypatch, quarantine, what):
    monkeypatch.chdir(tmp_path)
    source = _jsonl(tmp_path, DOCS)
    before = sorted(os.listdir(tmp_path))
    options = IngestOptions(
        [os.path.relpath(source)], "s", on_bad_record="quarantine", quarantine=quarantine, progress=False
    )
    with pytest.raises(StreamfitError, match=what):
        ingest(options)
    assert sorted(os.listdir(tmp_path)) == before and len(open(source).readlines()) == len(DOCS)


def test_a_store_published_by_another_ingest_meanwhile_is_not_replaced(tmp_path, monkeypatch):
    """Two ingests to one --out both pass the check at the start; the one that finishes second
    is refused (its writer checks --out again under its lock) and the first store stays."""
    import streamfit.ingest.pipeline as pipeline

    first, second = _jsonl(tmp_path, DOCS[:8], "first.jsonl"), _jsonl(tmp_path, DOCS, "second.jsonl")
    out = str(tmp_path / "s")
    batch = pipeline._Pass1._batch

    def other_ingest_finishes_first(self, *args):
        monkeypatch.setattr(pipeline._Pass1, "_batch", batch)
        ingest(IngestOptions([first], out, hashing=HashingConfig(n_features=2**10), progress=False))
        batch(self, *args)

    monkeypatch.setattr(pipeline._Pass1, "_batch", other_ingest_finishes_first)
    with pytest.raises(StoreError, match="already exists"):
        ingest(IngestOptions([second], out, hashing=HashingConfig(n_features=2**10), progress=False))
    assert open_store(out).n_rows == 8 and sorted(os.listdir(tmp_path)) == ["first.jsonl", "s", "second.jsonl"]


def test_a_split_killed_between_its_publishes_is_finished_by_the_same_command(tmp_path, monkeypatch, digits_svm):
    """The test store is published first; a re-run of the same command replaces a lone test
    store and writes the pair exactly as an uninterrupted run; another split is refused."""
    from streamfit.store import StoreWriter

    opts = dict(test_size=0.2, chunk_rows=300, progress=False)
    ingest(IngestOptions([digits_svm], str(tmp_path / "ref"), test_out=str(tmp_path / "ref_test"), **opts))
    close = StoreWriter.close

    def killed_after_the_first_publish(self, **kw):
        if os.path.exists(tmp_path / "test"):
            raise KeyboardInterrupt
        return close(self, **kw)

    monkeypatch.setattr(StoreWriter, "close", killed_after_the_first_publish)
    with pytest.raises(KeyboardInterrupt):
        ingest(IngestOptions([digits_svm], str(tmp_path / "train"), test_out=str(tmp_path / "test"), **opts))
    monkeypatch.setattr(StoreWriter, "close", close)
    assert (tmp_path / "test").is_dir() and not (tmp_path / "train").exists()
    with pytest.raises(StreamfitError, match="already exists"):  # not the same split: not recognised
        ingest(IngestOptions([digits_svm], str(tmp_path / "train"), test_out=str(tmp_path / "test"), **opts, seed=1))
    ingest(IngestOptions([digits_svm], str(tmp_path / "train"), test_out=str(tmp_path / "test"), **opts))
    for name in ("train", "test"):
        ref = open_store(str(tmp_path / f"ref{'_test' if name == 'test' else ''}")).manifest
        assert open_store(str(tmp_path / name)).manifest.chunks == ref.chunks


def _files(path) -> dict[str, bytes]:
    """Every file under path (a store): its bytes, by relative path."""
    return {
        os.path.relpath(os.path.join(top, f), path): open(os.path.join(top, f), "rb").read()
        for top, _, files in os.walk(path)
        for f in files
    }


@pytest.mark.parametrize(
    "case",
    ["text idf", "text idf --test-size", "numeric idf --test-size parquet", "multilabel idf", "regression --test-size"],
)
def test_the_stage_held_in_memory_writes_the_stores_the_disk_stage_writes(tmp_path, digits_svm, monkeypatch, case):
    """A two-pass ingest holds pass 1's stage in memory while it fits in MEMORY_STAGE_BYTES, on
    disk from the start with a limit of 0, and moves it to disk mid-way when it outgrows the
    limit: the three write the same stores, byte for byte (chunks, manifests, idf.npy), and so
    does a test store ingested --like each; only the disk stages write a `.pass1.partial` store."""
    import streamfit.ingest.pipeline as pipeline
    from streamfit.store import StoreWriter

    default = pipeline.MEMORY_STAGE_BYTES
    text = _jsonl(tmp_path, DOCS)
    ml = tmp_path / "ml.svm"
    ml.write_text("".join(f"{i % 3},{(i + 1) % 4} {1 + i % 5}:1 {6 + i % 7}:0.5 {20 + i % 11}:2\n" for i in range(60)))
    digits = tmp_path / "digits.svm"  # 350 of the rows: 50 chunks of 7, every class in the split
    with open(digits_svm) as f:
        digits.write_text("".join(itertools.islice(f, 350)))
    hashed = dict(hashing=HashingConfig(n_features=2**10), batch_size=5)
    inputs, options = {
        "text idf": (text, hashed),
        "text idf --test-size": (text, {**hashed, "test_size": 0.25}),
        "numeric idf --test-size parquet": (
            str(digits),
            dict(idf=True, test_size=0.3, backend="parquet", batch_size=100),
        ),
        "multilabel idf": (str(ml), dict(idf=True, l2_normalize=True, batch_size=8)),
        "regression --test-size": (str(digits), dict(idf=True, target="numeric", test_size=0.2, batch_size=100)),
    }[case]
    out, test_out, like = (str(tmp_path / name) for name in ("s", "t", "like"))
    split = {"test_out": test_out} if "test_size" in options else {}
    stages, added = [], []
    writer_init, add = StoreWriter.__init__, pipeline._MemoryStage.add
    monkeypatch.setattr(
        StoreWriter, "__init__", lambda self, path, **kw: (stages.append(path), writer_init(self, path, **kw))[1]
    )
    monkeypatch.setattr(pipeline._MemoryStage, "add", lambda self, X, y: (added.append(add(self, X, y)), added[-1])[1])

    def run(limit: int) -> list[dict[str, bytes]]:
        monkeypatch.setattr(pipeline, "MEMORY_STAGE_BYTES", limit)
        stages.clear(), added.clear()
        o = IngestOptions([inputs], out, chunk_rows=7, overwrite=True, progress=False, **options, **split)
        ingest(o)
        ingest(IngestOptions([inputs], like, like=out, chunk_rows=7, overwrite=True, progress=False))
        return [_files(out), _files(like)] + ([_files(test_out)] if split else [])

    on_disk = run(0)
    assert not added and sum(p.endswith(".pass1.partial") for p in stages) == 1
    rows = open_store(out).n_rows + (open_store(test_out).n_rows if split else 0)
    assert run(default) == on_disk
    assert added and all(added) and not any(p.endswith(".pass1.partial") for p in stages)
    half = 8 * open_store(out).manifest.nnz // 2 + 6 * rows  # about half of what the stage holds: moved mid-way
    assert run(half) == on_disk
    assert True in added and added[-1] is False and sum(p.endswith(".pass1.partial") for p in stages) == 1
    inputs_there = {"docs.jsonl", "ml.svm", "digits.svm"}
    assert sorted(os.listdir(tmp_path)) == sorted(inputs_there | {"s", "like"} | ({"t"} if split else set()))


def test_the_pass_1_stage_is_scratch_never_synced_and_a_dead_ingests_stage_is_cleaned_by_the_next(
    tmp_path, monkeypatch
):
    """An IDF ingest's pass-1 stage is scratch: never fsynced, never renamed into place (only the
    final store is: its files, folders and its rename, every one synced once), and deleted at the
    end. An ingest that dies between the passes (its stage's deletion and lock lost as with a
    SIGKILL) leaves a `.partial` stage that opens as no store; the next ingest to the same --out
    deletes it and writes the store an uninterrupted ingest writes. (A stage this small is held
    in memory by default: MEMORY_STAGE_BYTES 0 puts it on disk; the next ingest holds its own in
    memory and deletes the dead one all the same.)"""
    import streamfit.ingest.pipeline as pipeline
    from streamfit import storage
    from streamfit.store import StoreWriter

    monkeypatch.setattr(pipeline, "MEMORY_STAGE_BYTES", 0)
    path, out = _jsonl(tmp_path, DOCS), str(tmp_path / "s")
    opts = dict(hashing=HashingConfig(n_features=2**10), chunk_rows=7, progress=False)
    ingest(IngestOptions([path], str(tmp_path / "ref"), **opts))
    synced, fsyncs, renamed = [], [], []
    fsync_path, replace = storage.fsync_path, os.replace
    monkeypatch.setattr(storage, "fsync_path", lambda p: (synced.append(p), fsync_path(p)))
    monkeypatch.setattr(os, "fsync", lambda fd, real=os.fsync: (fsyncs.append(fd), real(fd)))
    monkeypatch.setattr(os, "replace", lambda a, b: (renamed.append(a), replace(a, b)))
    ingest(IngestOptions([path], out, **opts))
    tree = {top for top, _, _ in os.walk(out)} | {os.path.join(top, f) for top, _, fs in os.walk(out) for f in fs}
    assert len(fsyncs) == len(synced) == len(set(synced)) == len(tree) + 1 and synced[-1] == str(tmp_path)
    assert {p.replace(out + ".partial", out, 1) for p in synced[:-1]} == tree
    assert renamed == [out + ".partial"]  # the final store's commit; the stage is never renamed
    assert sorted(os.listdir(tmp_path)) == ["docs.jsonl", "ref", "s"]
    assert open_store(out).manifest.chunks == open_store(str(tmp_path / "ref")).manifest.chunks
    monkeypatch.undo()
    monkeypatch.setattr(pipeline, "MEMORY_STAGE_BYTES", 0)

    def killed_between_the_passes(*args, **kwargs):
        raise KeyboardInterrupt

    lost = StoreWriter.release  # the kernel drops a dead process's lock; its stage stays on disk
    monkeypatch.setattr(pipeline, "_pass2", killed_between_the_passes)
    monkeypatch.setattr(StoreWriter, "abort", lost)
    monkeypatch.setattr(StoreWriter, "discard", lost)
    again = str(tmp_path / "again")
    with pytest.raises(KeyboardInterrupt):
        ingest(IngestOptions([path], again, **opts))
    monkeypatch.undo()
    (stage,) = [name for name in os.listdir(tmp_path) if name.startswith("again")]
    assert stage.endswith(".partial") and os.path.exists(tmp_path / stage / "manifest.json")
    for name in (stage, "again"):
        with pytest.raises(StoreError, match="an incomplete store left by an interrupted ingest|no such store"):
            open_store(str(tmp_path / name))
    monkeypatch.undo()  # the default: the next ingest holds its stage in memory, and deletes the dead one too
    ingest(IngestOptions([path], again, **opts))
    assert sorted(os.listdir(tmp_path)) == ["again", "docs.jsonl", "ref", "s"]
    assert open_store(again).manifest.chunks == open_store(str(tmp_path / "ref")).manifest.chunks


@pytest.mark.parametrize(
    "text, options, problem",
    [
        (  # two valid values hashed into one column (summed)
            "1 1:3e38 2:3e38\n2 3:1\n1 2:1\n",
            {"hashing": HashingConfig(n_features=1, alternate_sign=False)},
            r"data.svm:1: a feature value is beyond float32's ±3.4e38 \(features hashed to one column are summed\)",
        ),
        (  # a valid value times an IDF weight above 1 (the weights are known after the first pass)
            "1 1:3e38\n2 2:1\n1 2:1\n",
            {"idf": True},
            r"data.svm:1: feature value 3e\+38 is beyond ±7.62e\+36, the most that IDF weights \(up to 44.7\)",
        ),
    ],
)
def test_values_that_overflow_after_validation_are_bad_records(tmp_path, text, options, problem):
    """Values that pass the readers' float32 check used to be stored as inf (issue 22)."""
    path = tmp_path / "data.svm"
    path.write_text(text)
    with pytest.raises(InputError, match=problem + r".*\(scale the features"):
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), progress=False, **options))
    report = ingest(IngestOptions([str(path)], str(tmp_path / "s"), on_bad_record="skip", progress=False, **options))
    X, _ = open_store(str(tmp_path / "s")).to_scipy()
    assert (report.read, report.written, report.skipped) == (3, 2, 1) and np.isfinite(X.data).all()


def test_large_values_within_the_bounds_are_weighted_and_normalized_exactly(tmp_path):
    """1e36 × its IDF weight ln((1 + 3)/(1 + 1)) + 1, and 1e20 squared under --l2-normalize
    (the norm is taken in float64: each of two equal values becomes 1/√2)."""
    path = tmp_path / "data.svm"
    path.write_text("1 1:1e36\n2 2:1\n1 2:1\n")
    ingest(IngestOptions([str(path)], str(tmp_path / "idf"), idf=True, progress=False))
    X, _ = open_store(str(tmp_path / "idf")).to_scipy()
    assert X[0, 0] == np.float32(np.float32(1e36) * (np.log(4 / 2) + 1))
    path.write_text("1 1:1e20 2:-1e20\n2 2:3e38\n")
    ingest(IngestOptions([str(path)], str(tmp_path / "l2"), l2_normalize=True, progress=False))
    X, _ = open_store(str(tmp_path / "l2")).to_scipy()
    assert np.allclose(X.toarray(), [[0.5**0.5, -(0.5**0.5)], [0, 1]], rtol=1e-7, atol=0)


# finite float32 values, none so small that rounding them after a weight is far from the reference
_FLOAT32_VALUES = st.one_of(
    st.builds(
        lambda sign, v: sign * v, st.sampled_from([-1.0, 1.0]), st.floats(2.0**-10, width=32, allow_infinity=False)
    ),
    st.sampled_from([0.0, 3.4e38, -3.4e38, 3e38, 1e37, 7.6e36, -1e20]),
)


@settings(max_examples=150, deadline=None)
@given(
    rows=st.lists(st.lists(st.tuples(st.integers(0, 7), _FLOAT32_VALUES), max_size=6), min_size=1, max_size=5),
    n_features=st.sampled_from([1, 2, 4]),
    alternate_sign=st.booleans(),
    idf=st.sampled_from(["none", "known", "to come"]),
    l2_normalize=st.booleans(),
)
def test_property_featurized_values_are_finite_or_refused(rows, n_features, alternate_sign, idf, l2_normalize):
    """Any finite float32 values, hashed (colliding ones summed), IDF-weighted and normalized,
    either give finite stored values equal to a float64 reference, or their row is named by
    Featurizer.out_of_range. The reference hashes each raw id alone (its column and sign) and
    sums in float64; with IDF weights still to come, values must stay within the bound that keeps
    the largest possible weight (one document in 2**62) finite."""
    import scipy.sparse as sp

    from streamfit.ingest.featurize import FLOAT32_MAX, IDF_WEIGHT_BOUND, Featurizer, idf_weights
    from streamfit.ingest.sources import SparseBatch

    hashing = HashingConfig(n_features=n_features, alternate_sign=alternate_sign)
    weights = np.linspace(1, 40, n_features) if idf == "known" else None
    featurizer = Featurizer(hashing, idf=weights, l2_normalize=l2_normalize)
    entries = [dict(row) for row in rows]  # one value per raw id and row, as readers give them
    X = sp.csr_matrix(
        (
            [v for e in entries for v in e.values()],
            [j for e in entries for j in e],
            np.cumsum([0] + [len(e) for e in entries]),
        ),
        shape=(len(entries), 8),
        dtype=np.float64,
    )
    batch = SparseBatch(X, [None] * len(entries), [f"f:{i + 1}" for i in range(len(entries))])
    raw = featurizer.raw_rows(batch)
    problems = featurizer.out_of_range(raw, idf_to_come=idf == "to come")

    one = featurizer.hasher.transform_indices(sp.csr_matrix(np.eye(8))).toarray().astype(np.float64)  # id j: ±1
    reference = np.zeros((len(entries), n_features))
    for i, e in enumerate(entries):
        for j, v in e.items():
            reference[i] += one[j] * v
    with np.errstate(over="ignore"):
        hashed = reference.astype(np.float32).astype(np.float64)  # the hasher sums in float64, stores float32
        weighted = hashed * (weights if weights is not None else 1)
    limit = FLOAT32_MAX / IDF_WEIGHT_BOUND if idf == "to come" else FLOAT32_MAX
    bad = ~(np.abs(hashed) <= FLOAT32_MAX).all(axis=1) | ~(np.abs(weighted) <= limit).all(axis=1)
    assert sorted(problems) == np.flatnonzero(bad).tolist()
    for problem, hint in problems.values():
        assert "beyond" in problem and hint.startswith("scale the features")

    good = np.flatnonzero(~bad)
    if idf == "to come":  # the worst weight a column can get: one document among 2**62
        featurizer.idf = np.full(n_features, idf_weights(np.array(1), 2**62))
        weighted = hashed * featurizer.idf
    out = featurizer.finish(raw[good]).toarray()
    want = weighted[good]
    if l2_normalize:
        norms = np.linalg.norm(want, axis=1, keepdims=True)
        want = np.divide(want, norms, out=np.zeros_like(want), where=norms > 0)
    assert np.isfinite(out).all()
    np.testing.assert_allclose(out, want, rtol=2e-6, atol=1e-37)  # atol: normalized values below float32's normal range


def test_cli_text_that_is_not_text_and_overflowing_values_end_in_one_line(tmp_path, cli):
    """Each hostile input of issue 22's classes 5 and 6 exits with status 2 and one line naming
    the file, the line or row, and the fix (before: tracebacks, or a wrong store)."""
    import subprocess

    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "surrogate.jsonl").write_bytes(b'{"text": "a \\ud800 b", "label": "x"}\n')
    (tmp_path / "encoded.jsonl").write_bytes(b'{"text": "a", "label": "x"}\n{"text": "\xed\xa0\x80", "label": "y"}\n')
    text = pa.array([b"fine", b"bad \xff"], type=pa.binary()).view(pa.string())
    pq.write_table(pa.table({"text": text, "label": ["x", "y"]}), str(tmp_path / "bytes.parquet"))
    (tmp_path / "unlabeled.svm").write_text("1 1:1\n 2:1\n2 2:1\n")
    (tmp_path / "summed.svm").write_text("1 1:3e38 2:3e38\n")
    (tmp_path / "idf.svm").write_text("1 1:3e38\n2 2:1\n")
    cases = [
        (["surrogate.jsonl"], "surrogate.jsonl:1: field 'text' holds the lone surrogate"),
        (["encoded.jsonl"], "encoded.jsonl:2: the line is not valid UTF-8"),
        (["bytes.parquet"], "bytes.parquet:row group 0, row 1: 'text' holds bytes that are not UTF-8 text"),
        (["unlabeled.svm"], "unlabeled.svm:2: the line has no label (pass --option multilabel=true"),
        (["summed.svm", "--n-features", "1", "--no-alternate-sign"], "summed.svm:1: a feature value is beyond"),
        (["idf.svm", "--no-hash", "--idf"], "idf.svm:1: feature value 3e+38 is beyond ±7.62e+36"),
    ]
    for args, message in cases:
        run = subprocess.run(
            cli("ingest", *[tmp_path / a if i == 0 else a for i, a in enumerate(args)], "--out", tmp_path / "s"),
            capture_output=True,
            text=True,
        )
        lines = run.stderr.strip().splitlines()
        assert run.returncode == 2 and len(lines) == 1 and message in lines[0], (args, run.stderr)
        assert "Traceback" not in run.stderr and not (tmp_path / "s").exists()


def test_scoring_refuses_a_value_that_its_idf_weight_takes_beyond_float32():
    """predict featurizes raw records with the training IDF weights: 1e38 × 4 is refused at its
    location, 1e37 × 4 is stored as float32(4e37)."""
    import scipy.sparse as sp

    from streamfit.ingest.featurize import Featurizer
    from streamfit.ingest.sources import SparseBatch

    featurizer = Featurizer(n_features=2, idf=np.array([1.0, 4.0]))
    X = sp.csr_matrix(np.array([[1e37, 1e38], [3e38, 1.0]]))
    with pytest.raises(InputError, match=r"^f:1: feature value 1e\+38 times its IDF weight 4 is beyond float32's"):
        featurizer.transform(SparseBatch(X, [None, None], ["f:1", "f:2"]))
    got = featurizer.transform(SparseBatch(X[[1]], [None], ["f:2"])).toarray()
    assert got.tolist() == [[np.float32(3e38), 4.0]]
    X = sp.csr_matrix(np.array([[0.0, 1e37]]))
    assert featurizer.transform(SparseBatch(X, [None], ["f:3"])).toarray().tolist() == [
        [0, np.float32(np.float32(1e37) * 4)]
    ]


@settings(deadline=None)  # a slow example on a loaded machine is not a failure
@given(st.lists(st.integers(0, 3), min_size=1, max_size=30), st.floats(0.01, 0.99))
def test_a_split_leaving_a_store_without_rows_is_refused(strata, test_size):
    """stratified_test_mask returns a mask with rows on both sides, or refuses, naming --test-size."""
    strata = np.array(strata)
    expected = sum(round(test_size * n) for n in np.unique(strata, return_counts=True)[1])
    if 0 < expected < len(strata):
        assert stratified_test_mask(strata, test_size, 0).sum() == expected
    else:
        with pytest.raises(ConfigError, match=f"^--test-size {test_size} leaves the (test|training) store without"):
            stratified_test_mask(strata, test_size, 0)


def test_the_text_defaults_are_off_for_numeric_inputs_and_can_be_turned_off(tmp_path, digits_svm):
    def transform(name):
        m = open_store(str(tmp_path / name)).manifest.transform
        return m["idf"], m["l2_normalize"]

    text = _jsonl(tmp_path, DOCS)
    cfg = HashingConfig(n_features=2**10)
    ingest(IngestOptions([text], str(tmp_path / "t"), hashing=cfg, progress=False))
    ingest(IngestOptions([text], str(tmp_path / "raw"), hashing=cfg, idf=False, l2_normalize=False, progress=False))
    ingest(IngestOptions([digits_svm], str(tmp_path / "n"), hashing=None, progress=False))
    assert (transform("t"), transform("raw"), transform("n")) == ((True, True), (False, False), (False, False))


@pytest.mark.parametrize(
    "where, options",
    [
        ("_Pass1._batch", {}),  # pass 1, between source batches
        ("add_document_frequencies", {"test_size": 0.25, "test_out": "t"}),  # pass 2, between stage chunks
    ],
)
def test_sigterm_stops_ingest_between_batches_and_leaves_no_store(
    tmp_path, digits_svm, sigterm_guard, monkeypatch, where, options
):
    """A SIGTERM while ingest reads its second batch of pass 1, or counts the document frequencies
    of pass 2's second chunk (streamfit.shutdown's guard installed, as the CLI does): ingest
    raises Terminated at the next batch or chunk, and leaves no store, test store or stage; the
    same ingest then runs as if none had been."""
    import signal

    from streamfit.errors import Terminated
    from streamfit.ingest import pipeline

    owner, name = (pipeline._Pass1, "_batch") if "." in where else (pipeline, where)
    calls = []
    original = getattr(owner, name)

    def signalled(*args):
        calls.append(1)
        if len(calls) == 2:
            os.kill(os.getpid(), signal.SIGTERM)
        return original(*args)

    out = tmp_path / "s.zarr"
    test_out = {"test_out": str(tmp_path / options["test_out"])} if "test_out" in options else {}
    o = IngestOptions(
        [digits_svm], str(out), chunk_rows=256, batch_size=100, progress=False, idf=True, **{**options, **test_out}
    )
    monkeypatch.setattr(owner, name, signalled)
    with pytest.raises(Terminated, match=f"{out}: not written"):
        ingest(o)
    assert len(calls) == 2  # stopped at the next batch or chunk
    assert os.listdir(tmp_path) == []  # no store, test store, stage or lock
    monkeypatch.undo()
    sigterm_guard.disarm()
    report = ingest(o)
    assert report.written == 1797 and open_store(str(out)).verify() == []


def test_on_a_terminal_one_bar_counts_the_records_of_every_pass(tmp_path, digits_svm, bar_updates, capsys):
    """Issue 20: ingest on a terminal shows one bar, not one per pass that restarts: pass 1's
    records read (no total yet), then pass 2's document frequencies and write over the stage's
    rows, which make the total (records read + 2 x the stage's rows), with one ETA."""
    o = IngestOptions([digits_svm], str(tmp_path / "s"), chunk_rows=256, batch_size=500, idf=True, progress=True)
    ingest(o)
    assert [s for s in bar_updates if s[0] == "begin"] == [("begin", "ingest", "record")]
    counts = [s[1:] for s in bar_updates if s[0] == "count"]
    pass1 = [(500, None), (1000, None), (1500, None), (1797, None), (1797, None)]  # batches, then the last line
    stage_rows = [min(k * 256, 1797) for k in range(1, 9)]  # the stage's 8 chunks
    pass2 = [(1797 + rows, 3 * 1797) for rows in stage_rows] + [(2 * 1797 + rows, 3 * 1797) for rows in stage_rows]
    assert counts == pass1 + pass2
    err = capsys.readouterr().err
    assert "ingest" in err and "document frequencies" not in err and "write" not in err


@pytest.mark.parametrize("mode", ["skip", "quarantine"])
def test_an_input_whose_every_record_is_skipped_says_how_many_and_why(tmp_path, mode):
    """--on-bad-record skip over a file of only bad records (a latin-1 JSONL file, say): the error
    counts them and names the first one's location and problem; before, "no records found: the
    input is empty or every record was skipped", as for an empty file."""
    path = tmp_path / "latin.jsonl"
    path.write_bytes(
        b"".join(json.dumps({"text": "caf\u00e9", "label": "a"}).encode("latin-1") + b"\n" for _ in range(3))
    )
    path.write_bytes(path.read_bytes().replace(b"\\u00e9", b"\xe9"))
    quarantine = str(tmp_path / "q.jsonl") if mode == "quarantine" else None
    options = IngestOptions([str(path)], str(tmp_path / "s"), on_bad_record=mode, quarantine=quarantine, progress=False)
    with pytest.raises(InputError) as e:
        ingest(options)
    assert e.value.problem == (
        f"every one of the 3 records read was a bad record, skipped (the first: {path}:1: the line is not valid UTF-8)"
    )
    assert "--on-bad-record error" in e.value.hint and not os.path.exists(tmp_path / "s")


@pytest.mark.parametrize(
    "zero_based, line, index, indices", [(False, "1 2:1 7:1.5", 7, "1–4"), (True, "1 1:1 4:1", 4, "0–3")]
)
def test_an_index_beyond_the_width_is_named_as_the_file_writes_it(tmp_path, zero_based, line, index, indices):
    """qa33: a 1-based LIBSVM line `7:1.5` beyond --n-features 4 was 'feature index 6 is out of
    range', the column counted from 0, an index the file does not hold; now the file's own index
    and the indices the width allows, in either numbering."""
    path = tmp_path / "wide.svm"
    path.write_text(f"0 1:1\n{line}\n")
    options = dict(n_features=4, source_options={"zero_based": zero_based}, progress=False)
    with pytest.raises(InputError) as raised:
        ingest(IngestOptions([str(path)], str(tmp_path / "s"), **options))
    assert raised.value.location == f"{path}:2"
    assert raised.value.problem == f"feature index {index} is beyond the 4 features (indices {indices})"
