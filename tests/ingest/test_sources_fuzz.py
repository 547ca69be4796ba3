"""Hostile input for the text and Parquet readers: random lines, wrong encodings, truncated
files. Every case ends in a clean InputError or in counted skips (read = kept + skipped),
never in another exception."""

import gzip
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
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
    st.builds(lambda d: json.dumps(d), st.dictionaries(st.sampled_from(["text", "label", "x"]), json_values, max_size=3)),
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
    try:
        kept, skipped, n_read = _drain(path)
    except InputError:
        return
    assert kept + skipped == n_read


@FUZZ
@given(data=st.binary(max_size=200))
def test_wrong_encoding_and_binary_junk(tmp_path, data):
    for name in ("junk.jsonl", "junk.csv"):
        path = tmp_path / name
        path.write_bytes(data)
        try:
            kept, skipped, n_read = _drain(path)
        except InputError:
            continue
        assert kept + skipped == n_read


@pytest.mark.parametrize("cut", [0.1, 0.5, 0.9])
def test_truncated_parquet_and_gzip_are_clean_errors(tmp_path, cut):
    table = pa.table({"text": [f"document number {i}" for i in range(2000)], "label": [str(i % 3) for i in range(2000)]})
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
