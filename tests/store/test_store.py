import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

from streamfit.errors import StoreError
from streamfit.store import InMemoryStore, StoreWriter, open_store
from streamfit.store.format import chunk_digest


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


def test_zarr_store_readable_as_anndata_csr(digits, write_store):
    import zarr

    X, y, classes = digits
    g = zarr.open_group(write_store(X, y, classes), mode="r")
    attrs = dict(g["X"].attrs)
    assert attrs["encoding-type"] == "csr_matrix" and attrs["shape"] == [1797, 64]
    Xz = sp.csr_matrix((g["X/data"][:], g["X/indices"][:], g["X/indptr"][:]), shape=tuple(attrs["shape"]))
    assert (Xz != X).nnz == 0


def test_incomplete_store_never_opens(tmp_path, digits):
    X, y, classes = digits
    w = StoreWriter(str(tmp_path / "s.zarr"), chunk_rows=100)
    w.write_rows(X[:500], y[:500])  # killed before close: only s.zarr.partial exists
    with pytest.raises(StoreError, match="no such store"):
        open_store(str(tmp_path / "s.zarr"))
    with pytest.raises(StoreError, match="interrupted ingest"):
        open_store(str(tmp_path / "s.zarr.partial"))
    os.remove(tmp_path / "s.zarr.partial" / "zarr.json")
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


def test_manifest_checksum_mismatch_is_named(digits, write_store):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400)
    m = json.load(open(os.path.join(path, "manifest.json")))
    m["chunks"][2]["sha256"] = "0" * 64
    json.dump(m, open(os.path.join(path, "manifest.json"), "w"))
    s = open_store(path)
    with pytest.raises(StoreError, match="chunk 2 .*checksum"):
        s.read_chunk(2)
    assert len(s.verify()) == 1


def test_unsupported_format_version(digits, write_store):
    X, y, classes = digits
    path = write_store(X, y, classes)
    m = json.load(open(os.path.join(path, "manifest.json")))
    m["format_version"] = 99
    json.dump(m, open(os.path.join(path, "manifest.json"), "w"))
    with pytest.raises(StoreError, match="version 99"):
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


def test_chunk_cache_only_when_the_whole_store_fits(digits, write_store, monkeypatch):
    import streamfit.store.store as store_module

    X, y, classes = digits
    s = open_store(write_store(X, y, classes, chunk_rows=400))
    a, b = s.read_chunk(1), s.read_chunk(1)
    assert a is b and not a.X.data.flags.writeable  # cached, read-only
    monkeypatch.setattr(store_module, "CHUNK_CACHE_BYTES", s.decoded_bytes - 1)
    big = store_module.Store(s.path)
    assert big.read_chunk(1) is not big.read_chunk(1)  # larger than the budget: never cached


def test_columns_used_counts_distinct_columns(write_store):
    rng = np.random.default_rng(0)
    X = sp.random(700, 5000, density=0.002, format="csr", random_state=rng, dtype=np.float32)
    path = write_store(X, rng.integers(0, 3, 700), ["a", "b", "c"], chunk_rows=128)
    assert open_store(path).columns_used() == np.unique(X.indices).size


def _rewrite_zarr_indices(path: str, position: int, column: int) -> None:
    """Set X/indices[position] of a Zarr store to `column` and record the chunk's new digest, as a
    writer that wrapped its indices would have: only the column check can tell."""
    import zarr

    indices = zarr.open_array(os.path.join(path, "X", "indices"), mode="r+")
    indices[position] = column
    s = open_store(path)
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    for entry in manifest["chunks"]:
        entry["sha256"] = chunk_digest(*s.reader.read(entry["row_start"], entry["row_stop"], s.n_features))
    json.dump(manifest, open(os.path.join(path, "manifest.json"), "w"))


@pytest.mark.parametrize("column", [-5, 64, 2**31 - 1])
def test_columns_outside_the_width_fail_reads_and_verify_naming_the_chunk(digits, write_store, column):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400)
    _rewrite_zarr_indices(path, X[:800].nnz + X[800:1200].nnz // 2, column)  # an entry of chunk 2
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


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_a_manifest_narrower_than_its_columns_fails_on_read(digits, write_store, backend):
    X, y, classes = digits
    path = write_store(X, y, classes, chunk_rows=400, backend=backend)
    manifest = json.load(open(os.path.join(path, "manifest.json")))
    manifest["n_features"] = 10
    json.dump(manifest, open(os.path.join(path, "manifest.json"), "w"))
    problems = open_store(path).verify()
    assert len(problems) == 5 and all("outside 0 to 9 (n_features=10)" in p for p in problems)


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
    _rewrite_zarr_indices(path, 5, -1)  # an entry of chunk 0; the digests agree with it
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
