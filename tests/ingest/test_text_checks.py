"""Text that decodes without an error but is not what its writer meant (streamfit.ingest.text_checks):
a NUL in a record's text is a bad record naming FILE:LINE, C1 controls read as latin-1 are one
warning naming --encoding cp1252; counts in = counts out either way."""

import json
import os

import pytest

from streamfit.errors import InputError
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.pipeline import IngestOptions, ingest
from streamfit.store import open_store

DOCS = [
    ("food", "caf\u00e9 au lait and croissants for breakfast"),
    ("food", "a na\u00efve baker sells \u201cfresh\u201d bread"),
    ("city", "Z\u00fcrich is a city by the lake"),
    ("city", "the train to Z\u00fcrich leaves at noon \u2013 on time"),
    ("food", "sm\u00f8rrebr\u00f8d costs 10 \u20ac today"),
    ("city", "streets of the old town are busy"),
]


def _csv(path, encoding="utf-8", docs=DOCS):
    with open(path, "w", encoding=encoding, newline="") as f:
        f.write("text,label\n")
        for label, text in docs:
            f.write(f'"{text}",{label}\n')
    return str(path)


def _folder(root, encoding="utf-8", docs=DOCS, nul_in=None):
    for i, (label, text) in enumerate(docs):
        os.makedirs(root / label, exist_ok=True)
        data = text.encode(encoding)
        if i == nul_in:
            data = data.replace(b"train", b"tr\x00ain")
        (root / label / f"{i:03d}.txt").write_bytes(data)
    return str(root)


def _ingest(inputs, out, **options):
    return ingest(IngestOptions([inputs], str(out), hashing=HashingConfig(), progress=False, **options))


def _warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]


def _chunks(store):
    return [c["sha256"] for c in json.loads(open(os.path.join(store, "manifest.json")).read())["chunks"]]


def test_a_nul_in_text_is_a_bad_record_named_by_file_and_line(tmp_path):
    """qa32: a NUL inside a CSV cell or a folder document was read as a word break without a word
    (the word cut in two). It is a bad record: one error naming FILE:LINE and the likely cause,
    nothing written; skipped, it is counted."""
    nul = tmp_path / "nul.csv"
    nul.write_bytes(open(_csv(tmp_path / "plain.csv"), "rb").read().replace(b"train", b"tr\x00ain"))
    with pytest.raises(InputError) as raised:
        _ingest(str(nul), tmp_path / "s")
    assert str(raised.value).startswith(f"{nul}:5: a NUL character in the text (read as utf-8): likely a binary file")
    assert "--encoding utf-16" in str(raised.value) and not (tmp_path / "s").exists()
    report = _ingest(str(nul), tmp_path / "s", on_bad_record="skip")
    assert (report.read, report.written, report.skipped) == (6, 5, 1)
    folder = _folder(tmp_path / "docs", nul_in=3)
    with pytest.raises(InputError, match=r"city/003\.txt: a NUL character in the text"):
        _ingest(folder, tmp_path / "f")
    # ASCII text in UTF-16 without a byte order mark decodes as UTF-8: every other character a NUL
    utf16 = tmp_path / "utf16.csv"
    utf16.write_bytes('text,label\n"plain ascii words",a\n'.encode("utf-16-le"))
    with pytest.raises(
        InputError, match=r"utf16\.csv:1: no column 'text'.*likely UTF-16 text read as utf-8: pass --encoding utf-16"
    ):
        _ingest(str(utf16), tmp_path / "u")
    line = tmp_path / "line.csv"  # one line, no header: its record reaches the check
    line.write_bytes("plain ascii words,a".encode("utf-16-le"))
    no_header = {"header": False, "text_field": "0", "label_field": "1"}
    with pytest.raises(InputError, match=r"line\.csv:1: a NUL character in the text \(read as utf-8\): likely UTF-16"):
        _ingest(str(line), tmp_path / "u", source_options=no_header)
    report = _ingest(str(utf16), tmp_path / "u", source_options={"encoding": "utf-16-le"})
    assert (report.read, report.written) == (1, 1)


def test_c1_controls_read_as_latin1_are_one_warning_naming_cp1252(tmp_path, caplog):
    """qa32: cp1252 text read with --encoding latin-1 kept its quotes, dashes and € as C1 control
    characters in the words, without a word. Now one warning counts the records, names the first
    and --encoding cp1252; the records are kept (12 in, 12 out), and read as cp1252 they give the
    store of the same text in UTF-8. latin-1 text without them, and other encodings, warn nothing."""
    cp1252 = _csv(tmp_path / "w.csv", "cp1252")
    report = _ingest(cp1252, tmp_path / "s", source_options={"encoding": "latin-1"})
    assert (report.read, report.written, report.skipped) == (6, 6, 0)
    assert _warnings(caplog) == [
        f"3 records read as latin-1 hold C1 control characters (U+0080–U+009F; the first: {cp1252}:3), which "
        "latin-1 text does not use and Windows text in cp1252 becomes when read as latin-1 (its quotes, dashes "
        "and €): if the input is such text, ingest it again with --encoding cp1252"
    ]
    caplog.clear()
    _ingest(cp1252, tmp_path / "c", source_options={"encoding": "cp1252"})
    _ingest(_csv(tmp_path / "u.csv"), tmp_path / "u")
    assert _chunks(tmp_path / "c") == _chunks(tmp_path / "u")
    latin = [(label, text) for label, text in DOCS if all(ord(c) < 256 for c in text)]
    _ingest(_csv(tmp_path / "l.csv", "latin-1", latin), tmp_path / "l", source_options={"encoding": "iso-8859-1"})
    folder = _folder(tmp_path / "docs", "cp1252")
    report = _ingest(folder, tmp_path / "f", source_options={"encoding": "l1"})
    assert (report.read, report.written) == (6, 6)
    warned = _warnings(caplog)
    assert len(warned) == 1 and warned[0].startswith("3 records read as latin-1 hold C1 control characters")
    assert f"the first: {tmp_path / 'docs' / 'city' / '003.txt'})" in warned[0]
    assert open_store(str(tmp_path / "f")).n_rows == 6


@pytest.mark.slow
def test_the_checks_hold_on_the_embedded_cluster(tmp_path, caplog):
    """The workers' counts reach the driver's warning and the bad records its policy: the same
    lines as in process, the first record named by its line in the whole file."""
    cp1252 = _csv(tmp_path / "w.csv", "cp1252", DOCS * 40)
    report = _ingest(cp1252, tmp_path / "s", source_options={"encoding": "latin-1"}, n_workers=2)
    assert (report.read, report.written) == (240, 240)
    assert [w for w in _warnings(caplog) if "C1" in w] == [
        f"120 records read as latin-1 hold C1 control characters (U+0080–U+009F; the first: {cp1252}:3), which "
        "latin-1 text does not use and Windows text in cp1252 becomes when read as latin-1 (its quotes, dashes "
        "and €): if the input is such text, ingest it again with --encoding cp1252"
    ]
    nul = tmp_path / "nul.csv"
    nul.write_bytes(open(_csv(tmp_path / "p.csv", docs=DOCS * 40), "rb").read().replace(b"train", b"tr\x00ain"))
    report = _ingest(str(nul), tmp_path / "n", on_bad_record="skip", n_workers=2)
    assert (report.read, report.written, report.skipped) == (240, 200, 40)
    with pytest.raises(InputError, match=rf"{nul}:5: a NUL character"):
        _ingest(str(nul), tmp_path / "e", n_workers=2)


def test_a_nul_inside_a_parquet_token_is_a_bad_record_as_in_a_string(tmp_path):
    """A Parquet text column of token lists (list<string>): a NUL inside a token is the bad record
    that a NUL in a string column is (it was looked for as a whole token only, and hashed as a
    word); skipped, it is counted: counts in = counts out."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = str(tmp_path / "tokens.parquet")
    tokens = [["tr\x00ain", "leaves"], ["caf\u00e9", "au", "lait"], ["old", "town"], ["fresh", "bread"]]
    pq.write_table(pa.table({"label": ["city", "food", "city", "food"], "text": tokens}), path)
    with pytest.raises(InputError, match=r"tokens\.parquet:row group 0, row 0: a NUL character .*in the text"):
        _ingest(path, tmp_path / "refused.zarr")
    assert not os.path.exists(tmp_path / "refused.zarr")
    report = _ingest(path, tmp_path / "skipped.zarr", on_bad_record="skip")
    assert (report.read, report.written, report.skipped) == (4, 3, 1)
    assert open_store(str(tmp_path / "skipped.zarr")).n_rows == 3


def test_a_nul_in_text_stored_as_text_names_a_fix_its_format_takes(tmp_path):
    """Parquet strings and tokens and JSON strings are UTF-8 by definition, and those formats take
    no --encoding: a NUL there is named as the file stores it, with the fix of cleaning it where the
    file is written or --on-bad-record (it named --encoding utf-16, which ingest then refused for
    these formats). A CSV's NUL keeps the encoding advice."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = ["the tr\x00ain leaves", "caf\u00e9 au lait"]
    pq.write_table(pa.table({"label": ["city", "food"], "text": texts}), tmp_path / "strings.parquet")
    tokens = [text.split() for text in texts]
    pq.write_table(pa.table({"label": ["city", "food"], "text": tokens}), tmp_path / "tokens.parquet")
    with open(tmp_path / "lines.jsonl", "w") as f:
        f.writelines(json.dumps({"label": label, "text": text}) + "\n" for label, text in zip(["city", "food"], texts))
    fix = (
        "(remove the NULs where the file is written, or skip such records with --on-bad-record skip, or keep "
        "them aside with --on-bad-record quarantine)"
    )
    for name, where in (
        ("strings.parquet", "row group 0, row 0"),
        ("tokens.parquet", "row group 0, row 0"),
        ("lines.jsonl", "1"),
    ):
        with pytest.raises(InputError) as raised:
            _ingest(str(tmp_path / name), tmp_path / "s.zarr")
        assert (
            str(raised.value)
            == f"{tmp_path / name}:{where}: a NUL character (U+0000) in the text as the file stores it {fix}"
        )
        report = _ingest(
            str(tmp_path / name),
            tmp_path / f"{name}.zarr",
            on_bad_record="quarantine",
            quarantine=str(tmp_path / "q.jsonl"),
        )
        assert (report.read, report.written, report.skipped) == (2, 1, 1), name
    quarantined = [json.loads(line) for line in open(tmp_path / "q.jsonl")]
    assert [q["problem"] for q in quarantined] == ["a NUL character (U+0000) in the text as the file stores it"] * 3
