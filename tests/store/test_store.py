import json
import os
import re

import numpy as np
import pytest
import scipy.sparse as sp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from streamfit.errors import StoreError
from streamfit.store import InMemoryStore, Store, StoreWriter, open_store
from streamfit.store.format import chunk_digest, json_digest


def edit_manifest(path, edit, reseal=True):
    """Apply `edit` to the store's manifest.json (as a dict); reseal: update manifest_sha256, as
    someone who knows the format would (otherwise the digest alone refuses the edit)."""
    file = os.path.join(path, "manifest.json")
    m = json.load(open(file))
    edit(m)
    if reseal:
        m["manifest_sha256"] = json_digest(m, "manifest_sha256")
    json.dump(m, open(file, "w"))


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_round_trip_any_batching(digits, write_store, backend):
    X, y, classes = digits
    for batch in (1, 137, 5000):
        path = write_store(X, y, classes, chunk_rows=400, backend=backend, batch=batch)
        s = open_store(path)
        assert (s.n_rows, s.n_features, s.n_chunks, s.classes) == (1797, 64, 5, classes)
        X2, y2 = s.to_scipy()
        assert (X2 != X).nnz == 0 and np.array_equal(y2, y)
        assert [s.chunk_bounds(i) for i in range(5)] == [(0, 400), (400, 800), (800, 1200), (1200, 1600), (1600, 1797)]
        assert s.verify() == []


def test_digests_are_backend_independent(digits, write_store):
    X, y, classes = digits
    a = open_store(write_store(X, y, classes, backend="zarr")).manifest
    b = open_store(write_store(X, y, classes, backend="parquet")).manifest
    assert [c.sha256 for c in a.chunks] == [c.sha256 for c in b.chunks]
    assert a.fingerprint == b.fingerprint


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_multilabel_round_trip(write_store, backend):
    rng = np.random.default_rng(0)
    X = sp.random(300, 40, density=0.2, format="csr", dtype=np.float32, random_state=1)
    Y = sp.csr_matrix((rng.random((300, 7)) < 0.3).astype(np.float32))
    s = open_store(write_store(X, Y, [f"l{i}" for i in range(7)], chunk_rows=64, backend=backend))
    X2, Y2 = s.to_scipy()
    assert s.multilabel and (X2 != X).nnz == 0 and (Y2 != Y).nnz == 0


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_the_manifest_records_each_class_s_rows_for_any_batching(digits, write_store, backend, check_class_rows):
    """Format version 4: class_rows, the rows of each class as the writer counted them from the
    class ids it wrote (a declared class without rows: 0), whatever batches the rows came in;
    null for multilabel and regression stores."""
    X, y, classes = digits
    for batch in (1, 137, 5000):
        path = write_store(X, y, classes + ["spare"], chunk_rows=400, backend=backend, batch=batch)
        check_class_rows(path)
        manifest = open_store(path).manifest
        assert manifest.format_version == 4
        assert manifest.class_rows == np.bincount(y, minlength=11).tolist() and manifest.class_rows[10] == 0
    Y = sp.csr_matrix((np.random.default_rng(0).random((300, 7)) < 0.3).astype(np.float32))
    check_class_rows(write_store(X[:300], Y, [f"l{i}" for i in range(7)], chunk_rows=64, backend=backend))
    writer = StoreWriter(os.path.join(os.path.dirname(path), f"regression.{backend}"), backend=backend, n_outputs=1)
    writer.write_rows(X[:300], np.arange(300.0).reshape(-1, 1))
    writer.close(n_features=64, classes=["t"])
    check_class_rows(writer.path)


def test_a_writer_given_fewer_classes_than_its_ids_is_refused(digits, tmp_path):
    X, y, classes = digits
    writer = StoreWriter(str(tmp_path / "s.zarr"), chunk_rows=400)
    writer.write_rows(X, y)
    with pytest.raises(StoreError, match="class id 9 written, but only 9 classes given"):
        writer.close(n_features=64, classes=classes[:9])
    assert not os.path.exists(tmp_path / "s.zarr")


def test_class_counts_edited_with_the_manifest_copy_are_named_by_verify(digits, write_store):
    """An edit of class_rows that keeps its sum, made in manifest.json (resealed) and in the copy
    kept with the data alike, opens; verify counts the chunks' labels and names the class."""
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400)
    edit_manifest(path, _move_a_class_row)
    root = os.path.join(path, "zarr.json")
    meta = json.load(open(root))
    _move_a_class_row(meta["attributes"]["streamfit.manifest"])
    json.dump(meta, open(root, "w"))
    store = open_store(path)
    assert store.to_scipy()[1].shape == (1797,)  # the data itself reads
    problems = store.verify()
    assert any(
        re.search(r"manifest.json records 177 rows of class '0' \(class_rows\), the chunks hold 178; re-ingest", p)
        for p in problems
    ), problems


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_a_version_3_store_is_read_without_class_counts(backend):
    """A store written by streamfit before format version 4 (tests/data/store-v3) opens, reads
    and verifies; its manifest has no class_rows (None), and keeps version 3 when rewritten."""
    path = os.path.join(os.path.dirname(__file__), "..", "data", "store-v3", f"dna400.{backend}")
    store = open_store(path)
    assert (store.manifest.format_version, store.manifest.class_rows) == (3, None)
    assert store.verify() == []
    assert np.bincount(store.to_scipy()[1], minlength=4).tolist() == [88, 99, 213, 0]
    record = json.loads(store.manifest.to_json())
    assert record == json.load(open(os.path.join(path, "manifest.json")))  # rewritten as it was: version 3


def test_chunks_are_stored_apart_and_readable_by_zarr_and_pyarrow(digits, write_store):
    """Chunk i's rows, and only them, are in chunks/<i:06d> (Zarr) or chunks/part-<i:06d>.parquet,
    a Parquet dataset directory that pyarrow reads as one table in row order."""
    import pyarrow.dataset as ds
    import zarr

    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400)
    for i, (lo, hi) in enumerate([(0, 400), (400, 800), (800, 1200), (1200, 1600), (1600, 1797)]):
        g = zarr.open_group(os.path.join(path, "chunks", f"{i:06d}"), mode="r")
        Xi = sp.csr_matrix((g["data"][:], g["indices"][:], g["indptr"][:]), shape=(hi - lo, 64))
        assert (Xi != X[lo:hi]).nnz == 0 and np.array_equal(g["y"][:], y[lo:hi])
    path = write_store(X, y, classes, chunk_rows=400, backend="parquet")
    assert sorted(os.listdir(os.path.join(path, "chunks")))[:2] == ["_common_metadata", "part-000000.parquet"]
    table = ds.dataset(os.path.join(path, "chunks"), format="parquet").to_table()
    assert table.column("label").to_pylist() == list(y)
    assert [len(r) for r in table.column("indices").to_pylist()] == list(np.diff(X.indptr))


def test_a_data_file_where_a_store_goes_says_to_ingest_it(tmp_path):
    """qa33: `evaluate run/ test.csv` (raw data after train): the file is there, so 'no such store
    directory' misled; the line names the ingest command (`--like` for test data)."""
    data = tmp_path / "test.csv"
    data.write_text("label,text\na,some words\n")
    with pytest.raises(StoreError) as raised:
        open_store(str(data))
    assert str(raised.value) == (
        f"{data}: a data file, not a store (the directory 'streamfit ingest' writes): ingest it first, "
        f"streamfit ingest {data} --out STORE (test data: add --like TRAINING_STORE)"
    )
    with pytest.raises(StoreError, match="no such store directory"):  # the control: nothing there
        open_store(str(tmp_path / "missing.zarr"))


def test_incomplete_store_never_opens(tmp_path, digits):
    X, y, classes = digits
    w = StoreWriter(str(tmp_path / "s.zarr"), chunk_rows=100)
    w.write_rows(X[:500], y[:500])  # killed before close: only s.zarr.partial exists
    with pytest.raises(StoreError, match="no such store"):
        open_store(str(tmp_path / "s.zarr"))
    with pytest.raises(StoreError, match="interrupted ingest"):
        open_store(str(tmp_path / "s.zarr.partial"))
    os.close(w._lock)  # what the kernel does when the writer dies (a live writer's .partial is refused)
    w2 = StoreWriter(str(tmp_path / "s.zarr"), chunk_rows=100)  # a re-run clears the leftover
    w2.write_rows(X, y)
    w2.close(n_features=64, classes=classes)
    assert open_store(str(tmp_path / "s.zarr")).n_rows == 1797


def test_existing_store_needs_overwrite(digits, write_store):
    X, y, classes = digits
    path = write_store(X, y, classes)
    with pytest.raises(StoreError, match="--overwrite"):
        StoreWriter(path)
    w = StoreWriter(path, overwrite=True, chunk_rows=1000)
    w.write_rows(X[:10], y[:10])
    w.close(n_features=64, classes=classes)
    assert open_store(path).n_rows == 10


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_flipped_byte_is_detected_and_named(digits, write_store, backend):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400, backend=backend)
    # damage one stored data file (the largest) in the middle
    files = [
        os.path.join(d, f) for d, _, fs in os.walk(path) for f in fs if f != "manifest.json" and not f.endswith(".json")
    ]
    target = max(files, key=os.path.getsize)
    raw = bytearray(open(target, "rb").read())
    raw[len(raw) // 2] ^= 0xFF
    open(target, "wb").write(bytes(raw))
    problems = open_store(path).verify()
    assert problems and all("chunk" in p and path in p for p in problems)


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_a_chunk_digest_that_mismatches_is_named(digits, write_store, backend):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400, backend=backend)
    edit_manifest(path, lambda m: m["chunks"][2].update(sha256="0" * 64))  # the manifest copy disagrees
    s = open_store(path)
    with pytest.raises(StoreError, match="manifest copy in .* has another chunks"):
        s.read_chunk(2)
    assert len(s.verify()) == 1


@pytest.mark.parametrize("content", [b'{"format": "streamfit-store", "n_rows": 1', b"\xff\xfe{}", b"[]", b"null"])
def test_an_unreadable_manifest_is_named(digits, write_store, content):
    X, y, classes = digits
    path = write_store(X, y, classes)
    open(os.path.join(path, "manifest.json"), "wb").write(content)
    with pytest.raises(StoreError, match=r"manifest.json: (unreadable manifest|not a streamfit store manifest)"):
        Store(path)


@pytest.mark.parametrize("version", [1, 2, 99])
def test_unsupported_format_version(digits, write_store, version):
    """Versions 1 (no manifest digest) and 2 (arrays cut along nnz across chunks) are refused with
    the fix, even with the manifest's digest in order."""
    X, y, classes = digits
    path = write_store(X, y, classes)
    edit_manifest(path, lambda m: m.update(format_version=version))
    with pytest.raises(StoreError, match=f"store format version {version} is not supported .*; re-ingest the data"):
        open_store(path)


def test_chunk_digest_depends_on_every_part(digits):
    X, y, _ = digits
    base = chunk_digest(X[:50], y[:50])
    X2 = X[:50].copy()
    X2.data[0] += 1
    y2 = y[:50].copy()
    y2[3] = (y2[3] + 1) % 10
    assert len({base, chunk_digest(X2, y[:50]), chunk_digest(X[:50], y2)}) == 3


def test_in_memory_store_matches_disk_chunks(digits, write_store):
    X, y, classes = digits
    disk = open_store(write_store(X, y, classes, chunk_rows=300))
    mem = InMemoryStore(X, y, classes, chunk_rows=300)
    assert mem.n_chunks == disk.n_chunks
    for i in range(mem.n_chunks):
        a, b = mem.read_chunk(i), disk.read_chunk(i)
        assert a.row_start == b.row_start and (a.X != b.X).nnz == 0 and np.array_equal(a.labels, b.labels)


def test_chunk_cache_keeps_the_first_chunks_that_fit_the_budget(digits, write_store, monkeypatch):
    import streamfit.store.store as store_module

    X, y, classes = digits
    s = open_store(write_store(X, y, classes, chunk_rows=400))
    a, b = s.read_chunk(1), s.read_chunk(1)
    assert a is b and not a.X.data.flags.writeable  # cached, read-only
    sizes = [8 * c.nnz + 12 * (c.row_stop - c.row_start) for c in s.manifest.chunks]
    assert sum(sizes) == s.decoded_bytes
    monkeypatch.setattr(store_module, "CHUNK_CACHE_BYTES", sizes[3] + sizes[1])  # room for chunks 3 and 1
    big = store_module.Store(s.path)
    for i in (3, 1, 0, 2, 4):  # 3 and 1 fill the budget; no chunk is evicted for a later one
        big.read_chunk(i)
    assert sorted(big._cache) == [1, 3]
    assert big.read_chunk(3) is big.read_chunk(3) and big.read_chunk(0) is not big.read_chunk(0)


def test_columns_used_counts_distinct_columns(write_store):
    rng = np.random.default_rng(0)
    X = sp.random(700, 5000, density=0.002, format="csr", random_state=rng, dtype=np.float32)
    path = write_store(X, rng.integers(0, 3, 700), ["a", "b", "c"], chunk_rows=128)
    assert open_store(path).columns_used() == np.unique(X.indices).size


def _drop_last_chunk(m):
    last = m["chunks"].pop()
    m["n_rows"], m["nnz"] = last["row_start"], m["nnz"] - last["nnz"]


def _move_a_class_row(m):
    m["class_rows"][0] -= 1
    m["class_rows"][1] += 1


def _swap_classes(m):
    m["classes"][0], m["classes"][1] = m["classes"][1], m["classes"][0]


# the edits of issue 22 class 2 and a few more; each makes results differ if it goes through
EDITS = {
    "swap two classes": _swap_classes,
    "rename a class": lambda m: m["classes"].__setitem__(3, "three"),
    "drop the last chunk (n_rows consistent)": _drop_last_chunk,
    "duplicate a chunk entry": lambda m: m["chunks"].insert(2, dict(m["chunks"][2])),
    "raise n_features": lambda m: m.update(n_features=128),
    "lower n_features": lambda m: m.update(n_features=10),
    "change chunk_rows": lambda m: m.update(chunk_rows=500),
    "drop a class": lambda m: m["classes"].pop(),
    "move a row between class counts": _move_a_class_row,
    "class counts dropped": lambda m: m.pop("class_rows"),
    "wrong nnz": lambda m: m.update(nnz=m["nnz"] + 1),
    "missing task": lambda m: m.pop("task"),
    "n_rows a string": lambda m: m.update(n_rows="1797"),
    "chunk nnz moved": lambda m: (
        m["chunks"][0].update(nnz=m["chunks"][0]["nnz"] + 1),
        m["chunks"][1].update(nnz=m["chunks"][1]["nnz"] - 1),
    ),
}


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_an_edited_manifest_fails_its_digest(digits, write_store, backend, edit):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400, backend=backend)
    edit_manifest(path, EDITS[edit], reseal=False)
    with pytest.raises(StoreError, match=r"manifest.json: fails its checksum \(manifest_sha256\); .*re-ingest"):
        open_store(path)


# a resealed edit: what each reader names (at open, or when the data is read or verified)
RESEALED = {
    "drop the last chunk (n_rows consistent)": r"class_rows count 1797 rows in all, but n_rows is 1600",
    "duplicate a chunk entry": r"chunks\[3\] is id 2, row_start 800, row_stop 1200; expected id 3, 1200-1600",
    "raise n_features": "manifest copy in .* has another n_features",
    "lower n_features": "manifest copy in .* has another n_features",
    "change chunk_rows": r"chunks\[0\] is id 0, row_start 0, row_stop 400; expected id 0, 0-500",
    "drop a class": r"class_rows is 10 counts, expected one count per class \(9\)",
    "move a row between class counts": "manifest copy in .* has another class_rows",
    "class counts dropped": "class_rows is missing",
    "wrong nnz": "nnz is 58737, but the chunks hold 58736",
    "missing task": "task is missing",
    "n_rows a string": "n_rows is '1797', expected an integer >= 0",
    "chunk nnz moved": "manifest copy in .* has another chunks",
    "swap two classes": "manifest copy in .* has another classes",  # the copy kept with the data
    "rename a class": "manifest copy in .* has another classes",
}


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
@pytest.mark.parametrize("edit", sorted(EDITS))
def test_a_resealed_edit_is_named_by_open_or_verify(digits, write_store, backend, edit):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400, backend=backend)
    edit_manifest(path, EDITS[edit])
    expected = RESEALED[edit] if isinstance(RESEALED[edit], str) else RESEALED[edit][backend]
    try:
        problems = Store(path).verify()
    except StoreError as e:
        problems = [str(e)]
    assert len(problems) >= 1 and all("re-ingest the store" in p and "\n" not in p for p in problems)
    assert re.search(expected, problems[0]), problems[0]
    with pytest.raises(StoreError):  # and a plain read refuses it too
        Store(path).to_scipy()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_manifest_edit_gives_other_data_or_a_traceback(tmp_path_factory, data):
    """Any one edit of any field of a resealed manifest (a value replaced by another of any JSON
    type, a key or list entry dropped or repeated): the store is refused with a StoreError, or it
    reads back exactly the rows and labels it was written with."""
    rng = np.random.default_rng(1)
    X = sp.random(50, 20, density=0.3, format="csr", dtype=np.float32, random_state=rng)
    y = rng.integers(0, 3, 50).astype(np.int32)
    backend = data.draw(st.sampled_from(["zarr", "parquet"]))
    path = str(tmp_path_factory.mktemp("fuzz") / f"s.{backend}")
    w = StoreWriter(path, backend=backend, chunk_rows=16)
    w.write_rows(X, y)
    w.close(n_features=20, classes=["a", "b", "c"])
    m = json.load(open(os.path.join(path, "manifest.json")))
    leaves = []

    def walk(node, trail):
        items = node.items() if isinstance(node, dict) else enumerate(node)
        for key, value in items:
            leaves.append((node, key))
            if isinstance(value, dict | list):
                walk(value, trail + [key])

    walk({k: v for k, v in m.items() if k != "manifest_sha256"}, [])
    walk(m["chunks"], ["chunks"])
    parent, key = data.draw(st.sampled_from(leaves))
    action = data.draw(st.sampled_from(["replace", "drop", "repeat"]))
    value = data.draw(st.one_of(st.none(), st.booleans(), st.integers(-2, 100), st.floats(), st.text(max_size=3)))

    def edit(manifest):
        target = manifest if parent is m else parent
        if action == "replace":
            target[key] = value
        elif action == "drop":
            del target[key]
        elif isinstance(target, list):
            target.insert(key, target[key])

    edit_manifest(path, edit)
    try:
        s = Store(path)
        problems = s.verify()
        X2, y2 = s.to_scipy()
    except StoreError:
        return
    assert problems == []
    assert s.n_features == 20 and (X2 != X).nnz == 0 and np.array_equal(y2, y)


def _rewrite_zarr_indices(path: str, chunk: int, position: int, column: int) -> None:
    """Set indices[position] of chunk `chunk` of a Zarr store to `column`, as a writer that wrapped
    its indices would have (the column check runs before the chunk's checksum, so it names the
    problem)."""
    import zarr

    indices = zarr.open_array(os.path.join(path, "chunks", f"{chunk:06d}", "indices"), mode="r+")
    indices[position] = column


@pytest.mark.parametrize("column", [-5, 64, 2**31 - 1])
def test_columns_outside_the_width_fail_reads_and_verify_naming_the_chunk(digits, write_store, column):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400)
    _rewrite_zarr_indices(path, 2, X[800:1200].nnz // 2, column)
    s = open_store(path)
    with pytest.raises(
        StoreError, match=r"chunk 2 \(rows 800-1200\) holds feature columns -?\d+ to \d+, outside 0 to 63"
    ) as e:
        s.read_chunk(2)
    assert f"columns {column} to" in str(e.value) or f"to {column}," in str(e.value)
    with pytest.raises(StoreError, match="chunk 2"):
        s.to_scipy()  # was a segfault for a negative column
    [problem] = s.verify()
    assert "chunk 2" in problem and "outside 0 to 63 (n_features=64)" in problem


@pytest.mark.parametrize("column", [-1, 2**31 - 1, 2**32 + 3])
def test_writer_refuses_columns_int32_cannot_hold(tmp_path, column):
    X = sp.csr_matrix((np.ones(2), np.array([0, column], dtype=np.int64), np.array([0, 1, 2])), shape=(2, 2**33))
    w = StoreWriter(str(tmp_path / "s"), chunk_rows=2)
    with pytest.raises(StoreError, match=rf"feature columns {min(column, 0)} to {max(column, 0)} cannot be stored"):
        w.write_rows(X, np.array([0, 1]))
    w.abort()


def test_cli_train_on_a_store_with_a_negative_column_is_one_line(digits, write_store, cli, tmp_path):
    import subprocess

    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400)
    _rewrite_zarr_indices(path, 0, 5, -1)  # an entry of chunk 0; the digests agree with it
    verify = subprocess.run(cli("inspect", path, "--verify"), capture_output=True, text=True)
    assert verify.returncode == 1 and "chunk 0 (rows 0-400) holds feature columns -1 to" in verify.stdout
    run = subprocess.run(
        cli("train", path, "--solver", "stagewise", "--n-workers", "0", "--out", tmp_path / "run"),
        capture_output=True,
        text=True,
    )
    assert run.returncode == 2 and "Traceback" not in run.stderr
    [line] = run.stderr.strip().splitlines()
    assert "chunk 0 (rows 0-400) holds feature columns -1 to" in line and "re-ingest it" in line


def test_an_overwrite_of_a_store_being_read_is_refused_and_keeps_it(tmp_path):
    """qa27: `ingest --overwrite` of a store that a train reads (its read_lock, a shared flock)
    deleted the store under the train, which failed. It is refused at the start, and again just
    before the rename if a reader came meanwhile; the old store is kept and nothing new is left."""
    from streamfit.store.store import read_lock

    path = str(tmp_path / "s.zarr")
    old = StoreWriter(path, chunk_rows=2)
    old.write_rows(sp.csr_matrix(np.eye(3, dtype=np.float32)), np.array([0, 1, 0]))
    old.close(n_features=3, classes=["a", "b"])
    reading = read_lock(path)
    also = read_lock(path)  # readers share it
    with pytest.raises(
        StoreError, match=r"s\.zarr: in use by another streamfit process right now \(a train reading it"
    ):
        StoreWriter(path, overwrite=True)
    os.close(also)
    os.close(reading)
    late = StoreWriter(path, chunk_rows=2, overwrite=True)  # started before the reader came
    late.write_rows(sp.csr_matrix(np.eye(4, dtype=np.float32)), np.array([0, 1, 0, 1]))
    reading = read_lock(path)
    with pytest.raises(StoreError, match="in use by another streamfit process"):
        late.close(n_features=4, classes=["a", "b"])
    os.close(reading)
    assert open_store(path).n_rows == 3 and sorted(os.listdir(tmp_path)) == ["s.zarr"]
    again = StoreWriter(path, chunk_rows=2, overwrite=True)  # no reader: replaced
    again.write_rows(sp.csr_matrix(np.eye(4, dtype=np.float32)), np.array([0, 1, 0, 1]))
    again.close(n_features=4, classes=["a", "b"])
    assert open_store(path).n_rows == 4


def test_a_writer_refuses_to_publish_over_a_store_written_meanwhile(tmp_path):
    """Without overwrite, PATH is checked again under the writer's lock just before the rename:
    a store another process published meanwhile is kept, and nothing of this one is left."""
    path = str(tmp_path / "s.zarr")
    late = StoreWriter(path, chunk_rows=2)
    late.write_rows(sp.csr_matrix(np.eye(3, dtype=np.float32)), np.array([0, 1, 0]))
    with pytest.raises(StoreError, match="another streamfit ingest is writing"):  # its lock excludes a second writer
        StoreWriter(path, overwrite=True)
    os.makedirs(path)  # published by a writer that took no lock (e.g. a copy): the check at the start is passed
    open(os.path.join(path, "marker"), "w").close()
    with pytest.raises(StoreError, match="was written by another process"):
        late.close(n_features=3, classes=["a", "b"])
    assert os.listdir(path) == ["marker"] and sorted(os.listdir(tmp_path)) == ["s.zarr"]


@pytest.mark.parametrize(
    "a, b, overlap",
    [("x", "x", True), ("x", "x/y", True), ("x/y", "x", True), ("x", "xy", False), ("x/y", "x/z", False)],
)
def test_overlaps_is_the_same_path_or_one_inside_the_other(tmp_path, a, b, overlap):
    from streamfit.store.store import overlaps

    assert overlaps(str(tmp_path / a), str(tmp_path / b)) is overlap
    (tmp_path / "link").symlink_to(tmp_path / "x")  # a link to x overlaps x and all inside it
    assert overlaps(str(tmp_path / "link"), str(tmp_path / b)) is (b in ("x", "x/y", "x/z"))


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_local_chunk_writes_stage_in_one_folder_of_the_attempt_and_delete_no_folder(tmp_path, monkeypatch, backend):
    """Each chunk is staged under `incoming/<token>/` and renamed into `chunks/`: no chunk leaves
    a folder of its own to delete (an rmdir waits on the disk), and the staging area goes at the
    close; the store reads back as written."""
    rmdirs = []
    rmdir = os.rmdir
    monkeypatch.setattr(os, "rmdir", lambda p: (rmdirs.append(p), rmdir(p)))
    path = str(tmp_path / "s")
    writer = StoreWriter(path, backend=backend, chunk_rows=2)
    X = sp.csr_matrix(np.arange(1, 13, dtype=np.float32).reshape(6, 2))
    writer.write_rows(X, np.array([0, 1, 0, 1, 0, 1]))
    token = (tmp_path / "s.partial" / "ATTEMPT").read_text()
    assert rmdirs == [] and os.listdir(tmp_path / "s.partial" / "incoming") == [token]
    assert os.listdir(tmp_path / "s.partial" / "incoming" / token / "chunks") == []
    writer.close(n_features=2, classes=["a", "b"])
    assert not os.path.exists(tmp_path / "s" / "incoming") and not os.path.exists(tmp_path / "s" / "ATTEMPT")
    assert (open_store(path).to_scipy()[0] != X).nnz == 0


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
@pytest.mark.parametrize("when", ["after", "during"])
def test_a_chunk_write_of_a_killed_attempt_never_lands_in_the_next_one(tmp_path, monkeypatch, backend, when):
    """Attempt A's driver dies (its lock drops) while a worker still holds A's ChunkSink; attempt
    B starts in the same NAME.partial. A's late chunk write, started after B began ("after") or
    staged before B began and moved in after ("during"), is refused and leaves nothing: B's
    store holds only B's rows and verifies."""
    from streamfit.store import parquet_backend, zarr_backend

    path = str(tmp_path / "s.store")
    a = StoreWriter(path, backend=backend, chunk_rows=2)
    stray = a.sink
    started = []

    def start_b():
        os.close(a._lock)  # what the kernel does when A's driver is SIGKILLed
        started.append(StoreWriter(path, backend=backend, chunk_rows=2))

    if when == "after":
        start_b()
    else:
        module = zarr_backend if backend == "zarr" else parquet_backend
        write_chunk = module.write_chunk

        def write_then_b_starts(root, cid, X, labels):
            write_chunk(root, cid, X, labels)
            start_b()

        monkeypatch.setattr(module, "write_chunk", write_then_b_starts)
    a_rows = sp.csr_matrix(np.full((2, 3), 7.0, dtype=np.float32))
    with pytest.raises(StoreError, match="another ingest replaced this one's attempt"):
        stray.write(0, 0, a_rows, np.array([1, 1]))
    monkeypatch.undo()
    b = started[0]
    assert not os.path.exists(os.path.join(path + ".partial", "chunks"))  # nothing of A's landed
    X = sp.csr_matrix(np.eye(3, dtype=np.float32))
    b.write_rows(X, np.array([0, 1, 0]))
    b.close(n_features=3, classes=["a", "b"])
    s = open_store(path)
    assert s.verify() == []
    X2, y2 = s.to_scipy()
    assert (X2 != X).nnz == 0 and y2.tolist() == [0, 1, 0]
    assert not {"ATTEMPT", "incoming"} & set(os.listdir(path)) and not os.path.exists(path + ".partial")
    with pytest.raises(
        StoreError, match="another ingest replaced this one.s attempt, or this Dask worker"
    ):  # B published: no ATTEMPT
        stray.write(1, 2, a_rows, np.array([1, 1]))
    assert open_store(path).verify() == [] and not os.path.exists(os.path.join(path + ".partial", "chunks"))


@pytest.mark.parametrize("read", ["verify", "columns_used"])
def test_sigterm_stops_a_whole_store_read_between_chunks(digits, write_store, monkeypatch, sigterm_guard, read):
    """`streamfit inspect --verify` / `--occupancy`: a SIGTERM (the CLI's guard installed) while
    chunk 1 of 4 is read stops the read before chunk 2 with Terminated, which says nothing is
    written."""
    import signal

    from streamfit.errors import Terminated

    X, y, classes = digits
    store = open_store(write_store(X, y, classes, chunk_rows=500))
    real, reads = Store._read_from_disk, []

    def signalled(self, i, verify):
        reads.append(i)
        if i == 1:
            os.kill(os.getpid(), signal.SIGTERM)
        return real(self, i, verify)

    monkeypatch.setattr(Store, "_read_from_disk", signalled)
    with pytest.raises(Terminated, match=f"^{store.path}: not read to the end .inspect writes nothing.; run"):
        getattr(store, read)()
    assert reads == [0, 1] and store.n_chunks == 4


@pytest.mark.parametrize("damage", ["truncated", "missing"])
def test_a_truncated_or_missing_parquet_chunk_is_named_with_the_fix(digits, write_store, damage):
    """A Parquet chunk file cut short (a copy interrupted) or gone: reads and verify name the
    chunk, its rows and the fix on one line (they named no fix before)."""
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400, backend="parquet")
    part = os.path.join(path, "chunks", "part-000001.parquet")
    if damage == "missing":
        os.remove(part)
    else:
        os.truncate(part, os.path.getsize(part) // 2)
    s = open_store(path)
    with pytest.raises(StoreError, match=r"chunk 1 \(rows 400-800\) is damaged: .*; re-ingest the store$") as e:
        s.read_chunk(1)
    assert "\n" not in str(e.value)
    [problem] = s.verify()
    assert problem.startswith(f"{path}: chunk 1 (rows 400-800) is damaged") and problem.endswith("re-ingest the store")


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
@pytest.mark.parametrize("damage", ["missing", "one byte changed"])
def test_verify_checks_the_idf_weights(tmp_path, backend, damage):
    """idf.npy (IDF-weighted rows) is covered by the manifest's idf_sha256, and `verify` checks
    it: before, a deleted or altered idf.npy passed `inspect --verify` (and a deleted one was a
    FileNotFoundError traceback where the weights were read: `--like`, predict)."""
    from click.testing import CliRunner

    from streamfit.cli import main

    data = os.path.join(os.path.dirname(__file__), "..", "data", "walkthrough", "news-train.txt.gz")
    path = str(tmp_path / f"news.{backend}")
    args = ["-q", "ingest", data, "--no-header", "--label-field", "0", "--text-field", "2", "--out", path]
    assert CliRunner().invoke(main, [*args, "--backend", backend]).exit_code == 0
    assert open_store(path).verify() == []
    idf = os.path.join(path, "idf.npy")
    if damage == "missing":
        os.remove(idf)
    else:
        raw = bytearray(open(idf, "rb").read())
        raw[-1] ^= 0x01
        open(idf, "wb").write(bytes(raw))
    [problem] = open_store(path).verify()
    assert problem.startswith(idf) and problem.endswith(("re-ingest the store", "re-ingest it")), problem
    with pytest.raises(StoreError, match="idf.npy"):
        open_store(path).idf  # noqa: B018


def _rows_of_chunk(source, i):
    return source.read_chunk(i).n_rows


def test_a_task_opens_its_store_on_first_use_and_a_worker_that_cannot_is_named(digits, tmp_path):
    """A Store pickles as where it is and its manifest's digest: unpickling reads nothing (a
    worker that cannot open the store used to fail as the task arrived, and Dask dropped it);
    its first use opens it, once per process. Here the store at the path was replaced after the
    driver opened it, as a worker whose disk holds another store at the same path sees it: the
    task fails with the store, the worker and the cause, and the worker stays."""
    import pickle
    import shutil

    from streamfit.engine import Engine
    from streamfit.store import store as store_module

    X, y, classes = digits
    path = str(tmp_path / "s.zarr")

    def write(rows):
        w = StoreWriter(path, chunk_rows=200, overwrite=True)
        w.write_rows(X[rows], y[rows])
        w.close(n_features=X.shape[1], classes=classes)

    write(slice(0, 600))
    store = open_store(path)
    blob = pickle.dumps(store)
    store_module._shipped.cache_clear()  # as in a worker's fresh process
    copy = pickle.loads(blob)
    assert pickle.loads(blob) is copy and "manifest" not in vars(copy)  # one object, nothing read yet
    assert copy.read_chunk(2).n_rows == 200 and copy.manifest == store.manifest
    shutil.rmtree(path)
    write(slice(600, 1200))  # another store at the same path
    store_module._shipped.cache_clear()
    with pytest.raises(StoreError, match="its manifest here is not the one the driver read"):
        pickle.loads(blob).n_rows  # noqa: B018 - the first use opens it
    with Engine(mode="local", n_workers=1, threads_per_worker=2) as engine:
        with pytest.raises(StoreError) as failed:
            engine.map(_rows_of_chunk, store, range(3))
        line = str(failed.value)
        assert line.startswith(f"{path}: the Dask worker tcp://127.0.0.1:") and "\n" not in line
        assert "cannot open this store, which the driver opened: " in line and "not the one the driver read" in line
        assert len(engine.client.nthreads()) == 1  # the worker stays
        assert engine.map(_rows_of_chunk, open_store(path), range(3)) == [200, 200, 200]
