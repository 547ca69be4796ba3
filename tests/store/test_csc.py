"""The feature-blocked CSC copy: exact equality with scipy, damage detection, atomic (re)builds."""

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp
import zarr
from click.testing import CliRunner

import streamfit.store.csc as csc
from streamfit.cli import main
from streamfit.errors import StoreError
from streamfit.store import Store, open_store
from streamfit.store.csc import build_csc
from streamfit.store.format import json_digest


@pytest.fixture(scope="module")
def data():
    """500 × 30 float32 CSR with empty rows and empty columns, 3 classes."""
    X = sp.random(500, 30, density=0.15, format="csr", dtype=np.float32, random_state=3)
    keep = (np.arange(500)[:, None] % 9 != 0) & ~np.isin(np.arange(30), [4, 17])  # every 9th row, 2 columns empty
    X = sp.csr_matrix(X.multiply(keep), dtype=np.float32)
    X.eliminate_zeros()
    assert X.nnz > 1500 and X[:, [4, 17]].nnz == 0
    return X, (np.arange(500) % 3).astype(np.int32), ["a", "b", "c"]


def assert_blocks_equal_scipy(path, X, bf):
    s = open_store(path)
    C = X.tocsc()
    C.sort_indices()
    assert s.n_feature_blocks == -(-X.shape[1] // bf)
    for b in range(s.n_feature_blocks):
        lo, hi = s.feature_block_bounds(b)
        assert (lo, hi) == (b * bf, min((b + 1) * bf, X.shape[1]))
        B, R = s.read_feature_block(b), C[:, lo:hi]
        assert B.format == "csc" and B.shape == R.shape == (X.shape[0], hi - lo) and B.dtype == np.float32
        assert np.array_equal(B.indptr, R.indptr) and np.array_equal(B.indices, R.indices)
        assert np.array_equal(B.data, R.data)
        g = zarr.open_group(os.path.join(path, "csc", f"block-{b:06d}"), mode="r")
        assert (g["indptr"].dtype, g["indices"].dtype, g["data"].dtype) == (np.int64, np.int32, np.float32)
    assert sum(blk["nnz"] for blk in s.manifest.csc["blocks"]) == X.nnz


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
@pytest.mark.parametrize("bf", [1, 7, 64])
def test_blocks_equal_scipy_tocsc(data, write_store, backend, bf):
    X, y, classes = data
    path = write_store(X, y, classes, chunk_rows=64, backend=backend)  # 8 row chunks
    entry = build_csc(path, bf, spill_buffer_bytes=4096)  # several spill flushes
    assert entry["block_features"] == bf
    assert_blocks_equal_scipy(path, X, bf)
    assert open_store(path).verify() == []
    assert sorted(os.listdir(path)) == sorted(
        ["chunks", "csc", "manifest.json"] + (["zarr.json"] if backend == "zarr" else [])
    )


def test_multilabel_store(write_store):
    X = sp.random(200, 25, density=0.2, format="csr", dtype=np.float32, random_state=1)
    Y = sp.csr_matrix((np.random.default_rng(0).random((200, 4)) < 0.4).astype(np.float32))
    path = write_store(X, Y, list("wxyz"), chunk_rows=50)
    build_csc(path, 10)
    assert_blocks_equal_scipy(path, X, 10)


def test_each_block_is_sorted_from_its_own_spill_only(data, write_store, monkeypatch):
    """Memory bound: pass 1 holds one chunk's entries (plus the spill buffer) and does not fill
    the chunk cache; pass 2 holds one block's."""
    X, y, classes = data
    path = write_store(X, y, classes, chunk_rows=64)
    chunk_nnz, block_nnz = [], []
    split, sort = csc._spill_chunk, csc._block_from_spill
    monkeypatch.setattr(csc, "_spill_chunk", lambda Xc, *a: chunk_nnz.append(Xc.nnz) or split(Xc, *a))
    monkeypatch.setattr(csc, "_block_from_spill", lambda rec, *a: block_nnz.append(len(rec)) or sort(rec, *a))
    read = Store.read_chunk
    cached = []
    monkeypatch.setattr(
        Store, "read_chunk", lambda self, i, **kw: cached.append(kw.get("cache", True)) or read(self, i, **kw)
    )
    build_csc(path, 7, spill_buffer_bytes=1)
    s = open_store(path)
    assert chunk_nnz == [c.nnz for c in s.manifest.chunks]
    assert cached == [False] * s.n_chunks  # one pass: the chunk cache is left alone
    assert block_nnz == [b["nnz"] for b in s.manifest.csc["blocks"]] and max(block_nnz) < X.nnz / 3


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_flipped_byte_in_a_block_is_detected_and_named(data, write_store, backend):
    X, y, classes = data
    path = write_store(X, y, classes, chunk_rows=64, backend=backend)
    build_csc(path, 7)
    target = os.path.join(path, "csc", "block-000001", "data", "c", "0")
    raw = bytearray(open(target, "rb").read())
    raw[len(raw) // 2] ^= 0xFF
    open(target, "wb").write(bytes(raw))
    s = open_store(path)
    problems = s.verify()
    assert len(problems) == 1 and "feature block 1 (columns 7-14)" in problems[0] and path in problems[0]
    with pytest.raises(StoreError, match="feature block 1"):
        s.read_feature_block(1)
    s.read_feature_block(0)
    result = CliRunner().invoke(main, ["inspect", path, "--verify"])
    assert result.exit_code == 1 and "feature block 1" in result.output


def test_manifest_checksum_mismatch_is_named(data, write_store):
    X, y, classes = data
    path = write_store(X, y, classes)
    build_csc(path, 7)
    m = json.load(open(os.path.join(path, "manifest.json")))
    m["csc"]["blocks"][3]["sha256"] = "0" * 64
    m["manifest_sha256"] = json_digest(m, "manifest_sha256")  # a manifest consistent in itself
    json.dump(m, open(os.path.join(path, "manifest.json"), "w"))
    with pytest.raises(StoreError, match="feature block 3 .*checksum"):
        open_store(path).read_feature_block(3)


def test_interrupted_build_leaves_the_store_as_it_was(data, write_store, monkeypatch):
    X, y, classes = data
    path = write_store(X, y, classes, chunk_rows=64)
    write = csc._write_block

    def fail_at_block_2(group, b, *a):
        if b == 2:
            raise KeyboardInterrupt
        write(group, b, *a)

    monkeypatch.setattr(csc, "_write_block", fail_at_block_2)
    with pytest.raises(KeyboardInterrupt):
        build_csc(path, 7)
    s = open_store(path)
    assert s.manifest.csc is None and s.n_feature_blocks == 0 and s.verify() == []
    assert sorted(os.listdir(path)) == ["chunks", "manifest.json", "zarr.json"]
    with pytest.raises(StoreError, match="streamfit transpose"):
        s.read_feature_block(0)
    # an interrupted rebuild keeps the earlier copy
    monkeypatch.setattr(csc, "_write_block", write)
    build_csc(path, 10)
    monkeypatch.setattr(csc, "_write_block", fail_at_block_2)
    with pytest.raises(KeyboardInterrupt):
        build_csc(path, 7)
    assert open_store(path).manifest.csc["block_features"] == 10
    assert_blocks_equal_scipy(path, X, 10)


@pytest.mark.parametrize("at", ["split", "blocks"])
def test_sigterm_stops_a_rebuild_between_chunks_or_blocks_and_keeps_the_earlier_copy(
    data, write_store, monkeypatch, sigterm_guard, at
):
    """A SIGTERM (streamfit.shutdown's guard installed, as the CLI does) while the split pass reads
    chunk 1 of 8, or while block 1 of 5 is written: Terminated before the next one, naming how to
    build the copy, csc.partial removed and the earlier copy (10 columns a block) still listed."""
    import signal

    from streamfit.errors import Terminated
    from streamfit.store.store import Store

    X, y, classes = data
    path = write_store(X, y, classes, chunk_rows=64)
    build_csc(path, 10)
    done = []
    read, write = Store.read_chunk, csc._write_block

    def read_signalled(self, i, *a, **k):
        done.append(i)
        if i == 1 and at == "split":
            os.kill(os.getpid(), signal.SIGTERM)
        return read(self, i, *a, **k)

    def write_signalled(group, b, *a):
        done.append(b)
        if b == 1 and at == "blocks":
            os.kill(os.getpid(), signal.SIGTERM)
        write(group, b, *a)

    monkeypatch.setattr(Store, "read_chunk", read_signalled)
    monkeypatch.setattr(csc, "_write_block", write_signalled)
    with pytest.raises(
        Terminated, match=f"^{path}: column copy not built .the store is as it was.; `streamfit transpose"
    ):
        build_csc(path, 7)
    assert done[-2:] == [0, 1] and len(done) == (2 if at == "split" else 8 + 2)
    assert not os.path.exists(os.path.join(path, "csc.partial"))
    assert open_store(path).manifest.csc["block_features"] == 10
    monkeypatch.undo()
    assert_blocks_equal_scipy(path, X, 10)


def test_rebuild_replaces_the_copy_and_open_store_sees_it(data, write_store):
    X, y, classes = data
    path = write_store(X, y, classes, chunk_rows=64)
    assert open_store(path).n_feature_blocks == 0
    build_csc(path, 7)
    assert open_store(path).n_feature_blocks == 5
    build_csc(path, 20)
    assert open_store(path).n_feature_blocks == 2
    assert_blocks_equal_scipy(path, X, 20)
    assert sorted(os.listdir(os.path.join(path, "csc"))) == ["block-000000", "block-000001", "zarr.json"]
    assert not os.path.exists(os.path.join(path, "csc.old"))


def test_stores_without_a_csc_copy_open(data, write_store):
    X, y, classes = data
    path = write_store(X, y, classes)
    assert json.load(open(os.path.join(path, "manifest.json")))["csc"] is None
    s = open_store(path)
    assert s.manifest.csc is None and s.n_feature_blocks == 0 and s.verify() == []


def test_bad_block_size(data, write_store):
    X, y, classes = data
    with pytest.raises(StoreError, match="block_features"):
        build_csc(write_store(X, y, classes), 0)


def test_cli_ingest_transpose_inspect_and_pipeline(tmp_path):
    from sklearn.datasets import dump_svmlight_file, load_digits

    X, y = load_digits(return_X_y=True)
    dump_svmlight_file(X, y, str(tmp_path / "d.svm"), zero_based=False)
    runner = CliRunner()

    def run(*args):
        result = runner.invoke(main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    out = run(
        "ingest",
        tmp_path / "d.svm",
        "--no-hash",
        "--out",
        tmp_path / "d.zarr",
        "--chunk-rows",
        "400",
        "--csc-block-features",
        "16",
    )
    assert "CSC copy: 4 feature blocks" in out
    Xs = open_store(str(tmp_path / "d.zarr")).to_scipy()[0]
    assert_blocks_equal_scipy(str(tmp_path / "d.zarr"), Xs, 16)
    assert "5 feature blocks of 13 columns" in run("transpose", tmp_path / "d.zarr", "--block-features", "13")
    info = json.loads(run("inspect", tmp_path / "d.zarr", "--verify", "--json", "--chunks"))
    assert info["verified"] and info["csc"]["n_blocks"] == 5 and info["csc"]["nnz"] == Xs.nnz
    assert [b["col_start"] for b in info["csc"]["blocks"]] == [0, 13, 26, 39, 52]
    (tmp_path / "p.yaml").write_text(
        "ingest:\n  inputs: [d.svm]\n  out: p.parquet\n  backend: parquet\n  no_hash: true\n  csc_block_features: 32\n"
    )
    run("run", tmp_path / "p.yaml")
    assert_blocks_equal_scipy(str(tmp_path / "p.parquet"), Xs, 32)
