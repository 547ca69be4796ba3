"""JSON Lines reader."""

import gzip
import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfit.errors import ConfigError, InputError
from streamfit.ingest.sources import BadRecordPolicy, TextBatch, open_source

RECORDS = [
    {"text": "the rocket launched", "title": "Space", "label": "sci.space"},
    {"text": "a fine goal", "title": "Match", "label": "rec.sport"},
    {"text": "new GPU", "title": "Tech", "label": 3},
    {"text": "", "title": "", "label": "empty"},
    {"text": "unicode: é ü 漢字", "title": "U", "label": "sci.space"},
]


def write_jsonl(tmp_path, lines, name="data.jsonl"):
    path = tmp_path / name
    path.write_bytes(b"".join((json.dumps(x).encode() if not isinstance(x, bytes) else x) + b"\n" for x in lines))
    return str(path)


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_good_file(read, tmp_path, batch_size):
    path = write_jsonl(tmp_path, RECORDS[:2] + [b"", b"  "] + RECORDS[2:])
    source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size)
    batches = read.batches(source, batch_size)
    assert all(isinstance(b, TextBatch) for b in batches)
    assert read.texts(batches) == [r["text"] for r in RECORDS]
    assert read.labels(batches) == ["sci.space", "rec.sport", "3", "empty", "sci.space"]
    assert read.locations(batches) == [f"{path}:{n}" for n in (1, 2, 5, 6, 7)]
    assert source.n_read == 5 and source.multilabel is False


def test_several_text_fields(read, tmp_path):
    path = write_jsonl(tmp_path, RECORDS)
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), text_field="title, text"))
    assert read.texts(batches, "title") == [r["title"] for r in RECORDS]
    assert read.texts(batches, "text") == [r["text"] for r in RECORDS]


def test_other_label_field_and_gzip(read, tmp_path):
    path = str(tmp_path / "data.jsonl.gz")
    with gzip.open(path, "wt") as f:
        for r in RECORDS:
            f.write(json.dumps({"body": r["text"], "y": r["label"]}) + "\n")
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), text_field="body", label_field="y"))
    assert read.texts(batches, "body") == [r["text"] for r in RECORDS]
    assert read.labels(batches) == ["sci.space", "rec.sport", "3", "empty", "sci.space"]


def test_multilabel_from_the_first_record(read, tmp_path):
    lines = [{"text": "a", "label": ["x", 2]}, {"text": "b", "label": "y"}, {"text": "c", "label": []}]
    path = write_jsonl(tmp_path, lines)
    source = open_source(path, policy=BadRecordPolicy(), batch_size=1)
    batches = read.batches(source, 1)
    assert source.multilabel is True
    assert read.labels(batches) == [["x", "2"], ["y"], []]


def test_multilabel_forced(read, tmp_path):
    path = write_jsonl(tmp_path, [{"text": "a", "label": "x"}])
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), multilabel=True))
    assert read.labels(batches) == [["x"]]


def test_nested_fields_by_dotted_path(read, tmp_path):
    """A data engineer's JSON Lines nest their fields: a dotted path names one inside objects, for
    the text, label and id fields alike; a key that holds the dot itself is taken first. Before,
    `--text-field body.text` was "no field 'body.text'" and nested records could not be read."""
    lines = [
        {"id": {"doc": 7}, "meta": {"topic": "space", "lang": "en"}, "body": {"title": "Up", "text": "rocket"}},
        {"id": {"doc": 8}, "meta": {"topic": ["autos"]}, "body": {"title": "Car", "text": "wheel"}, "body.text": "x"},
    ]
    path = write_jsonl(tmp_path, lines)
    options = {"text_field": "body.title,body.text", "label_field": "meta.topic", "id_field": "id.doc"}
    source = open_source(path, policy=BadRecordPolicy(), multilabel=True, **options)
    batches = read.batches(source)
    assert read.texts(batches, "body.title") == ["Up", "Car"]
    assert read.texts(batches, "body.text") == ["rocket", "x"]  # the literal key "body.text" of line 2
    assert read.labels(batches) == [["space"], ["autos"]]
    assert [i for b in batches for i in b.ids] == ["7", "8"]
    with pytest.raises(InputError, match="no field 'body.txt'") as e:
        list(open_source(path, policy=BadRecordPolicy(), text_field="body.txt", label_field="meta.topic"))
    assert (
        e.value.hint
        == "set --text-field; this line has the fields: id.doc, meta.topic, meta.lang, body.title, body.text"
    )


BAD = [
    (b"{not json", "invalid JSON", ""),
    (b"\xff\xfe{}", "not valid UTF-8", "JSON text is UTF-8: convert the file from its encoding, e.g. iconv"),
    (b"[1, 2]", "the line is a JSON array, not an object", ""),
    (b'"text"', "the line is a JSON string, not an object", ""),
    (
        json.dumps({"body": "x", "label": "a"}).encode(),
        "no field 'text'",
        "--text-field; this line has the fields: body",
    ),
    (
        json.dumps({"text": "x", "cls": "a"}).encode(),
        "no field 'label'",
        "--label-field; this line has the fields: text",
    ),
    (json.dumps({"text": 5, "label": "a"}).encode(), "field 'text' is a JSON integer, not a string", ""),
    # qa33: in JSON's words, not Python's (NoneType, list, bool)
    (json.dumps({"text": None, "label": "a"}).encode(), "field 'text' is a JSON null, not a string", ""),
    (json.dumps({"text": ["a", "b"], "label": "a"}).encode(), "field 'text' is a JSON array, not a string", ""),
    (json.dumps({"text": False, "label": "a"}).encode(), "field 'text' is a JSON boolean, not a string", ""),
    (json.dumps({"text": 2.5, "label": "a"}).encode(), "field 'text' is a JSON number, not a string", ""),
    (
        json.dumps({"text": {"title": "t", "body": "b"}, "label": "a"}).encode(),
        "field 'text' is a JSON object, not a string",
        "name a field inside it: text.title, text.body",
    ),
    (
        json.dumps({"text": "x", "meta": {"topic": "a"}}).encode(),
        "no field 'label'",
        "--label-field; this line has the fields: text, meta.topic",
    ),
    (
        json.dumps({"text": "x", "label": {"topic": "a"}}).encode(),
        "field 'label' is a JSON object, not a label",
        "name a field inside it: label.topic",
    ),
    (
        json.dumps({"text": "x", "label": 1.5}).encode(),
        "label 1.5 is a real number, not a class name",
        "--target numeric",
    ),
    (  # qa30: a class id saved as a real
        json.dumps({"text": "x", "label": 2.0}).encode(),
        "label 2.0 is a real number, not a class name",
        'class ids written as reals: write 2 or "2"; for a real-valued target (regression) pass --target numeric',
    ),
    (json.dumps({"text": "x", "label": True}).encode(), "label true is not a string or a number", ""),
    (json.dumps({"text": "x", "label": None}).encode(), "label null is not", ""),
    (json.dumps({"text": "x", "label": ["a", None]}).encode(), "label null is not", ""),
    (json.dumps({"text": "x", "label": ""}).encode(), "the label is empty", ""),
    (json.dumps({"text": "x", "label": ["a", "b"]}).encode(), "label list in a single-label file", "multilabel=true"),
]


@pytest.mark.parametrize("line, problem, hint", BAD)
def test_bad_record_error_mode(tmp_path, line, problem, hint):
    path = write_jsonl(tmp_path, [RECORDS[0], b"", line, RECORDS[1]])
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:3"
    assert problem in e.value.problem and hint in e.value.hint


@pytest.mark.parametrize("line, problem, hint", BAD)
@pytest.mark.parametrize("batch_size", [1, 2])
def test_bad_record_skip_and_quarantine(read, tmp_path, quarantine, line, problem, hint, batch_size):
    path = write_jsonl(tmp_path, [RECORDS[0], b"", line, RECORDS[1], RECORDS[2]])
    source = open_source(path, policy=quarantine, batch_size=batch_size)
    batches = read.batches(source, batch_size)
    assert source.n_read == 4 and quarantine.n_skipped == 1
    assert read.labels(batches) == ["sci.space", "rec.sport", "3"]
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:3" and problem in entry["problem"]
    assert entry["raw"] == line.decode("utf-8", "backslashreplace")


def test_skip_mode_counts(read, tmp_path):
    policy = BadRecordPolicy("skip")
    path = write_jsonl(tmp_path, [b"{", RECORDS[0], b"[]", b"{"])
    source = open_source(path, policy=policy)
    assert read.labels(read.batches(source)) == ["sci.space"]
    assert policy.n_skipped == 3 and source.n_read == 4


def test_truncated_gzip(tmp_path):
    path = tmp_path / "data.jsonl.gz"
    path.write_bytes(gzip.compress(b"".join(json.dumps(r).encode() + b"\n" for r in RECORDS * 50))[:-30])
    with pytest.raises(InputError, match="data.jsonl.gz: truncated or corrupt gzip stream"):
        list(open_source(str(path), policy=BadRecordPolicy("skip")))


def test_bad_text_field_option():
    with pytest.raises(ConfigError, match="text_field=.a,,b.: not usable"):
        open_source(__file__, "jsonl", policy=BadRecordPolicy(), text_field="a,,b")


def test_no_label_field_reads_unlabeled_records(read, tmp_path):
    path = write_jsonl(tmp_path, [{"text": "a"}, {"text": "b", "label": "x"}])
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), label_field=None))
    assert read.texts(batches) == ["a", "b"] and read.labels(batches) == [None, None]


def test_lone_surrogates_and_text_that_is_not_utf8_are_bad_records(read, tmp_path):
    """JSON can escape a lone surrogate, which no UTF-8 text holds: it made a traceback when the
    text was hashed (issue 22); so did its UTF-8-like encoding, which json.loads(bytes) let pass."""
    lines = [
        b'{"text": "a \\ud800 b", "label": "x"}',
        b'{"text": "fine", "label": "\\udc80"}',
        b'{"text": "a \xed\xa0\x80 b", "label": "x"}',
        b'{"text": "a pair \\ud83d\\ude00", "label": ["y"]}',
    ]
    path = write_jsonl(tmp_path, lines)
    with pytest.raises(
        InputError, match=r"data.jsonl:1: field 'text' holds the lone surrogate '\\ud800', which is not"
    ):
        list(open_source(path, policy=BadRecordPolicy()))
    quarantine = str(tmp_path / "q.jsonl")
    with BadRecordPolicy("quarantine", quarantine) as policy:
        batches = read.batches(open_source(path, policy=policy))
    assert read.texts(batches) == ["a pair \U0001f600"] and read.labels(batches) == [["y"]]
    entries = [json.loads(line) for line in open(quarantine, encoding="utf-8")]
    assert [e["location"] for e in entries] == [f"{path}:{n}" for n in (1, 2, 3)]
    assert [e["problem"] for e in entries] == [
        "field 'text' holds the lone surrogate '\\ud800', which is not text",
        "the label holds the lone surrogate '\\udc80', which is not text",
        "the line is not valid UTF-8",
    ]


def test_a_byte_order_mark_at_the_start_is_dropped(read, tmp_path):
    path = write_jsonl(tmp_path, [b"\xef\xbb\xbf" + json.dumps(RECORDS[0]).encode(), b"\xef\xbb\xbf" + b'{"text": ""}'])
    policy = BadRecordPolicy("skip")
    batches = read.batches(open_source(path, policy=policy))
    assert read.texts(batches) == [RECORDS[0]["text"]] and policy.n_skipped == 1  # not at the start: invalid JSON


_CHARACTERS = st.one_of(st.characters(), st.characters(categories=["Cs"]))  # surrogates are not drawn by default


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=st.text(_CHARACTERS), label=st.text(_CHARACTERS, min_size=1))
def test_property_any_json_string_is_read_as_itself_or_refused_at_its_line(read, tmp_path, text, label):
    """Every str json.dumps can write (lone surrogates included) is read back unchanged when it is
    UTF-8 text, and is otherwise a bad record at its line; nothing else is raised."""
    path = write_jsonl(tmp_path, [{"text": text, "label": label}])
    try:
        batches = read.batches(open_source(path, policy=BadRecordPolicy()))
    except InputError as e:
        assert str(e).startswith(f"{path}:1: ") and "lone surrogate" in str(e)
        assert any(0xD800 <= ord(c) <= 0xDFFF for c in text + label)
        return
    assert read.texts(batches) == [text] and read.labels(batches) == [label]
    (text + label).encode("utf-8")  # no surrogate got through
