"""Distributed ingest (--scheduler / --n-workers): the input files featurized on a real two-worker
Dask cluster on loopback give the store of the in-process ingest, byte for byte (manifest,
every chunk digest), with the same bad-record counts, quarantine lines and errors."""

import collections
import json
import random

import numpy as np
import pytest
from dask.utils import key_split
from distributed import Client, get_task_stream
from hypothesis import given, settings
from hypothesis import strategies as st

from streamfit.errors import InputError
from streamfit.ingest.distributed import packed_rows, unpacked_rows
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.pipeline import IngestOptions, ingest
from streamfit.store import open_store

pytestmark = pytest.mark.slow
BUCKET = "streamfit-test"  # made by the s3 fixture (tests/conftest.py)


@pytest.fixture(scope="module")
def cluster(s3):
    """Two worker processes on loopback, started after the s3 fixture set the AWS_* variables."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c.scheduler_address


def _write_files(folder, n_files=4, rows=300, seed=0, bad_every=0):
    """JSONL files whose label sets differ (new classes appear in later files), optionally with
    a line of invalid JSON every `bad_every` lines."""
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(200)]
    folder.mkdir(exist_ok=True)
    for f in range(n_files):
        lines = []
        for r in range(rows):
            if bad_every and r % bad_every == bad_every - 1:
                lines.append("{not json")
            else:
                text = " ".join(rng.choices(words, k=rng.randint(1, 15)))
                lines.append(json.dumps({"text": text, "label": f"c{rng.randint(0, 2 + f)}"}))
        (folder / f"part-{f}.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder / "*.jsonl")


def _manifest(path) -> dict:
    return json.loads(open_store(path).data.join("manifest.json").read_bytes())


def _options(inputs, out, **kw):
    return IngestOptions(inputs=[inputs], out=str(out), hashing=HashingConfig(n_features=2**12), progress=False, **kw)


def test_split_idf_and_skipped_records_give_the_in_process_stores(tmp_path, cluster, monkeypatch, check_class_rows):
    inputs = _write_files(tmp_path / "in", bad_every=97)
    stores = {}
    for name, engine in (("inprocess", {}), ("cluster", {"scheduler": cluster})):
        if engine:  # both passes' chunks written by the workers
            _driver_writes_no_chunk(monkeypatch)
        out = tmp_path / name
        out.mkdir()
        report = ingest(
            _options(
                inputs,
                out / "train.zarr",
                test_size=0.25,
                test_out=str(out / "test.zarr"),
                chunk_rows=128,
                on_bad_record="quarantine",
                quarantine=str(out / "bad.jsonl"),
                **engine,
            )
        )
        assert (report.read, report.skipped) == (1200, 12)
        for store in ("train.zarr", "test.zarr"):  # class_rows as the chunks count them
            check_class_rows(out / store)
        stores[name] = [_manifest(out / "train.zarr"), _manifest(out / "test.zarr"), (out / "bad.jsonl").read_text()]
    assert stores["cluster"] == stores["inprocess"]  # manifests (chunk digests, classes, IDF digest), quarantine
    train = stores["inprocess"][0]
    assert train["classes"][:3] == ["c0", "c1", "c2"] or set(train["classes"]) == {f"c{i}" for i in range(6)}
    assert len(train["chunks"]) > 4 and train["transform"]["idf"]


def test_a_file_that_decides_otherwise_is_read_as_the_first_file_decided(tmp_path, cluster):
    """The first file's first batch decides single-label; a later file of label lists decided
    multilabel for itself, so it is featurized again as the in-process pass reads it."""
    (tmp_path / "a.jsonl").write_text('{"text": "one two", "label": "x"}\n{"text": "three", "label": "y"}\n')
    (tmp_path / "b.jsonl").write_text('{"text": "four five", "label": ["x", "z"]}\n')
    inputs = str(tmp_path / "*.jsonl")
    ingest(_options(inputs, tmp_path / "in.zarr", idf=False))
    ingest(_options(inputs, tmp_path / "cl.zarr", idf=False, scheduler=cluster))
    assert _manifest(tmp_path / "cl.zarr") == _manifest(tmp_path / "in.zarr")
    assert _manifest(tmp_path / "in.zarr")["task"] == "multiclass"


def test_a_bad_record_stops_the_ingest_at_its_file_and_line(tmp_path, cluster):
    inputs = _write_files(tmp_path / "in", n_files=3, rows=50)
    with open(tmp_path / "in" / "part-1.jsonl", "a") as f:
        f.write("[1, 2]\n")
    errors = []
    for engine in ({}, {"scheduler": cluster}):
        with pytest.raises(InputError) as e:
            ingest(_options(inputs, tmp_path / "x.zarr", overwrite=True, **engine))
        errors.append(str(e.value))
    assert errors[0] == errors[1] and "part-1.jsonl:51: the line is a JSON array" in errors[0]


def test_inputs_and_store_on_s3_through_the_cluster(tmp_path, s3, cluster):
    """A glob of s3:// inputs and an s3:// store, the workers reading the files from S3: the
    local in-process store of the same files, but for the paths recorded."""
    inputs = _write_files(tmp_path / "in", n_files=3, rows=200)
    for f in sorted((tmp_path / "in").iterdir()):
        s3.put(str(f), f"{BUCKET}/dist-in/{f.name}")
    ingest(_options(inputs, tmp_path / "local.zarr", chunk_rows=100))
    ingest(
        _options(f"s3://{BUCKET}/dist-in/part-*.jsonl", f"s3://{BUCKET}/dist.zarr", chunk_rows=100, scheduler=cluster)
    )
    local, remote = _manifest(tmp_path / "local.zarr"), _manifest(f"s3://{BUCKET}/dist.zarr")
    assert remote["source"]["paths"] == [f"s3://{BUCKET}/dist-in/part-{i}.jsonl" for i in range(3)]
    for m in (local, remote):
        del m["source"], m["manifest_sha256"]
    assert remote == local


def test_byte_ranges_of_one_large_file_give_the_in_process_store(tmp_path, cluster, monkeypatch):
    """One JSONL file cut into byte ranges at line boundaries: the bad records keep their file
    lines (the quarantine files agree), and the split store is the in-process one."""
    from streamfit.ingest import distributed

    _write_files(tmp_path / "in", n_files=1, rows=600, bad_every=53)
    path = str(tmp_path / "in" / "part-0.jsonl")
    data = open(path, "rb").read()
    o = _options(path, tmp_path / "x.zarr")
    pieces = distributed.plan_pieces([path], o, {}, 4096, 4096)
    assert len(pieces) > 5 and pieces[0].byte_range[0] == 0 and pieces[-1].byte_range[1] == len(data)
    for a, b in zip(pieces, pieces[1:]):
        assert a.byte_range[1] == b.byte_range[0] and data[b.byte_range[0] - 1 : b.byte_range[0]] == b"\n"
    monkeypatch.setattr(distributed, "PIECE_BYTES", 4096)
    stores = {}
    for name, engine in (("inprocess", {}), ("cluster", {"scheduler": cluster})):
        (tmp_path / name).mkdir()
        ingest(
            _options(
                path,
                tmp_path / name / "s.zarr",
                chunk_rows=100,
                test_size=0.3,
                test_out=str(tmp_path / name / "t.zarr"),
                on_bad_record="quarantine",
                quarantine=str(tmp_path / name / "bad.jsonl"),
                **engine,
            )
        )
        bad = [json.loads(line)["location"] for line in open(tmp_path / name / "bad.jsonl")]
        stores[name] = [_manifest(tmp_path / name / "s.zarr"), _manifest(tmp_path / name / "t.zarr"), bad]
    assert stores["cluster"] == stores["inprocess"]
    assert stores["inprocess"][2][-1] == f"{path}:583"  # the 11th bad line, 11 × 53


def test_a_piece_reads_as_its_file_decided_multilabel(tmp_path, cluster, monkeypatch):
    """A LIBSVM file whose first batch has a label list: its later pieces, single labels only,
    decide single-label for themselves and are read again as multilabel."""
    from streamfit.ingest import distributed

    lines = ["1,2 1:1 4:2"] + [f"{i % 3} {1 + i % 7}:0.5 9:1" for i in range(400)]
    (tmp_path / "m.svm").write_text("\n".join(lines) + "\n")
    monkeypatch.setattr(distributed, "PIECE_BYTES", 1024)
    kw = {"hashing": None, "idf": False, "l2_normalize": False, "batch_size": 64}
    for name, engine in (("in.zarr", {}), ("cl.zarr", {"scheduler": cluster})):
        ingest(
            IngestOptions(inputs=[str(tmp_path / "m.svm")], out=str(tmp_path / name), progress=False, **kw, **engine)
        )
    assert _manifest(tmp_path / "cl.zarr") == _manifest(tmp_path / "in.zarr")
    assert _manifest(tmp_path / "in.zarr")["task"] == "multilabel"


@pytest.mark.parametrize("test_size", [None, 0.25])
def test_arff_files_give_the_in_process_store_with_the_header_s_classes(tmp_path, cluster, test_size):
    """Two Mulan ARFF files (labels a, b, c; the first file's rows have c on first, then a, and
    never b; the second's have b): the store of 1 or 2 workers is the in-process one, classes in
    the header's order, b among them."""
    header = "@relation r\n@attribute x numeric\n@attribute a {0,1}\n@attribute b {0,1}\n@attribute c {0,1}\n@data\n"
    (tmp_path / "1.arff").write_text(header + "".join(f"{i},{i % 2},0,{1 - i % 2}\n" for i in range(40)))
    (tmp_path / "2.arff").write_text(header + "".join(f"{i},0,{i % 2},1\n" for i in range(40)))
    inputs = [str(tmp_path / "1.arff"), str(tmp_path / "2.arff")]
    kw = {"hashing": None, "source_options": {"n_labels": 3}, "progress": False, "test_size": test_size}
    for name, engine in (("in", {}), ("cl", {"scheduler": cluster})):
        split = {"test_out": str(tmp_path / f"{name}-t.zarr")} if test_size else {}
        ingest(IngestOptions(inputs=inputs, out=str(tmp_path / f"{name}.zarr"), **kw, **split, **engine))
    assert _manifest(tmp_path / "cl.zarr") == _manifest(tmp_path / "in.zarr")
    assert _manifest(tmp_path / "in.zarr")["classes"] == ["a", "b", "c"]
    if test_size:
        assert _manifest(tmp_path / "cl-t.zarr") == _manifest(tmp_path / "in-t.zarr")


def test_row_groups_of_a_parquet_file_give_the_in_process_store(tmp_path, cluster, monkeypatch):
    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamfit.ingest import distributed

    rng = random.Random(1)
    texts = [" ".join(rng.choices([f"w{i}" for i in range(100)], k=8)) for _ in range(600)]
    labels = [f"c{rng.randint(0, 3 + r // 200)}" for r in range(600)]
    pq.write_table(pa.table({"text": texts, "label": labels}), str(tmp_path / "d.parquet"), row_group_size=50)
    o = _options(str(tmp_path / "d.parquet"), tmp_path / "x.zarr")
    pieces = distributed.plan_pieces([str(tmp_path / "d.parquet")], o, {}, 1024, 1024)
    assert len(pieces) > 3 and [p.row_groups for p in pieces][0][0] == 0 and pieces[-1].row_groups[1] == 12
    monkeypatch.setattr(distributed, "PIECE_BYTES", 1024)
    for name, engine in (("in.zarr", {}), ("cl.zarr", {"scheduler": cluster})):
        ingest(_options(str(tmp_path / "d.parquet"), tmp_path / name, chunk_rows=128, **engine))
    assert _manifest(tmp_path / "cl.zarr") == _manifest(tmp_path / "in.zarr")
    assert _manifest(tmp_path / "in.zarr")["classes"][-1] == "c5"
    # a table of numeric feature columns (feature_fields), with a NaN cell skipped
    values = [[rng.gauss(0, 1) if rng.random() < 0.6 else 0.0 for _ in range(600)] for _ in range(3)]
    values[1][333] = float("nan")
    table = pa.table({"f0": values[0], "f1": values[1], "f2": values[2], "label": labels})
    pq.write_table(table, str(tmp_path / "f.parquet"), row_group_size=50)
    kw = {"source_options": {"feature_fields": "f0,f1,f2"}, "chunk_rows": 128, "on_bad_record": "skip"}
    for name, engine in (("fin.zarr", {}), ("fcl.zarr", {"scheduler": cluster})):
        report = ingest(_options(str(tmp_path / "f.parquet"), tmp_path / name, **kw, **engine))
        assert (report.written, report.skipped) == (599, 1)
    assert _manifest(tmp_path / "fcl.zarr") == _manifest(tmp_path / "fin.zarr")


def test_the_parts_of_an_archive_give_the_in_process_store_for_0_1_2_workers(tmp_path, cluster, monkeypatch):
    """A tar.gz of class folders in parts of a few members: the store (every chunk digest) and
    the quarantined documents are those of N = 0 for N = 1 and 2."""
    import io
    import tarfile

    from streamfit.ingest import distributed

    rng = random.Random(2)
    with tarfile.open(tmp_path / "news.tar.gz", "w:gz") as tar:
        for i in range(90):
            data = " ".join(rng.choices([f"w{j}" for j in range(60)], k=20)).encode() if i % 31 else b"\xff bad"
            info = tarfile.TarInfo(f"train/c{i % (2 + i // 30)}/{i}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    path = str(tmp_path / "news.tar.gz")
    monkeypatch.setattr(distributed, "PIECE_BYTES", 1000)  # archives over it are cut
    monkeypatch.setattr(distributed, "FOLDER_PIECE_BYTES", 600)
    kw = {"chunk_rows": 16, "on_bad_record": "quarantine"}
    stores = {}
    for name, engine in (("n0", {}), ("n1", {"n_workers": 1}), ("n2", {"scheduler": cluster})):
        ingest(_options(path, tmp_path / name, quarantine=str(tmp_path / f"{name}.bad"), **kw, **engine))
        stores[name] = [_manifest(tmp_path / name), (tmp_path / f"{name}.bad").read_text()]
    assert stores["n1"] == stores["n0"] and stores["n2"] == stores["n0"]
    assert len(distributed.plan_pieces([path], _options(path, tmp_path / "x"), {}, 1000, 600)) > 4
    assert len(distributed.plan_pieces([path], _options(path, tmp_path / "x"), {}, 1 << 20, 600)) == 1
    m = stores["n0"][0]
    assert m["n_rows"] == 87 and m["classes"] == ["c1", "c0", "c2", "c3"]  # document 0 is bad
    assert stores["n0"][1].count("\n") == 3


def test_folder_corpora_on_s3_in_a_zip_and_in_a_folder_in_parts_give_the_in_process_store(
    tmp_path, s3, cluster, monkeypatch
):
    """A local folder, a zip and a folder on the S3 server, each cut into parts of a few
    documents (runs of files, of central directory members) and read by the two workers: the
    store (every chunk digest, the skipped documents) of the in-process ingest."""
    import zipfile

    from streamfit.ingest import distributed

    rng = random.Random(3)

    def corpus(k):
        words = [f"w{j}" for j in range(60)]
        docs = {f"c{i % (2 + k)}/{k}-{i:02d}": " ".join(rng.choices(words, k=15)).encode() for i in range(25)}
        return docs | {f"c{k}/bad": b"\xff not utf-8"}

    local, zipped, remote = corpus(0), corpus(1), corpus(2)
    for name, data in local.items():
        (tmp_path / "local" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "local" / name).write_bytes(data)
    with zipfile.ZipFile(tmp_path / "z.zip", "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in zipped.items():
            zf.writestr(name, data)
    for name, data in remote.items():
        s3.pipe(f"{BUCKET}/folders/news/{name}", data)
    inputs = [str(tmp_path / "local"), str(tmp_path / "z.zip"), f"s3://{BUCKET}/folders/news"]
    monkeypatch.setattr(distributed, "FOLDER_PIECE_BYTES", 300)
    kw = {"hashing": HashingConfig(n_features=2**12), "chunk_rows": 16, "on_bad_record": "skip", "progress": False}
    for name, engine in (("n0", {}), ("n2", {"scheduler": cluster})):
        ingest(IngestOptions(inputs=inputs, out=str(tmp_path / name), **kw, **engine))
    assert _manifest(tmp_path / "n2") == _manifest(tmp_path / "n0")
    m = _manifest(tmp_path / "n0")
    assert m["n_rows"] == 75 and m["counts"]["skipped"] == 3 and m["classes"] == ["c0", "c1", "c2", "c3"]
    pieces = distributed.plan_pieces(inputs, _options(inputs[0], tmp_path / "x"), {}, 1 << 20, 300)
    assert len(pieces) == 15 and {p.path for p in pieces} == set(inputs)  # 5 parts of each


def _driver_writes_no_chunk(monkeypatch):
    """Make a chunk written by this process (the driver) an error: the workers must write them."""
    from streamfit.store.store import ChunkSink

    def refuse(*args):
        raise AssertionError("the driver wrote a chunk")

    monkeypatch.setattr(ChunkSink, "write", refuse)


@pytest.mark.parametrize("backend", ["zarr", "parquet"])
def test_the_workers_write_the_chunks_and_the_store_is_the_same_for_0_1_2_workers(
    tmp_path, cluster, monkeypatch, backend
):
    """Pieces of a few hundred bytes and chunks of 50 rows: chunks made of several pieces' rows
    and pieces cut into several chunks. The manifests (every chunk digest) of N = 0 (in process),
    1 (an embedded cluster) and 2 workers agree, with no chunk written by the driver."""
    from streamfit.ingest import distributed

    inputs = _write_files(tmp_path / "in", n_files=3, rows=120, bad_every=41)
    kw = {"chunk_rows": 50, "backend": backend, "idf": False, "on_bad_record": "skip"}
    ingest(_options(inputs, tmp_path / "n0", **kw))
    monkeypatch.setattr(distributed, "PIECE_BYTES", 700)
    _driver_writes_no_chunk(monkeypatch)
    engines = {"n2": {"scheduler": cluster}} | ({"n1": {"n_workers": 1}} if backend == "zarr" else {})
    tasks: collections.Counter = collections.Counter()  # the kinds of task on the 2 workers
    for name, engine in engines.items():
        with Client(cluster) as client, get_task_stream(client) as stream:
            ingest(_options(inputs, tmp_path / name, **kw, **engine))
        tasks.update(key_split(t["key"]) for t in stream.data if name == "n2")
        assert _manifest(tmp_path / name) == _manifest(tmp_path / "n0")
        assert open_store(str(tmp_path / name)).verify() == []
    m = _manifest(tmp_path / "n0")
    assert len(m["chunks"]) == 8 and m["counts"]["skipped"] == 6 and m["n_rows"] == 354
    # on the 2 workers, a piece cost a featurize and a summary task, and the chunks each piece
    # completed one write task: no other tasks (the scheduler's cost is per task)
    files = sorted(str(f) for f in (tmp_path / "in").glob("*.jsonl"))
    n_pieces = len(distributed.plan_pieces(files, _options(inputs, tmp_path / "x"), {}, 700, 1 << 20, 2))
    assert tasks == {"featurize_piece": n_pieces, "summary": n_pieces, "write_chunks": 8} and n_pieces > 16


@pytest.mark.parametrize("test_size", [None, 0.25])
def test_unhashed_arrays_whose_last_column_is_empty_give_the_in_process_store(tmp_path, cluster, test_size):
    """--no-hash arrays are as wide as they declare (an all-zero last column included) on the
    workers too: two .npz pieces whose last column is empty give the in-process store, 6 wide."""
    rng = np.random.default_rng(0)
    for i in range(2):
        X = np.round(rng.normal(size=(60, 6)), 3)
        X[:, 5] = 0.0
        np.savez(tmp_path / f"part-{i}.npz", X=X, y=rng.integers(0, 3, size=60))
    kw = {"hashing": None, "progress": False, "chunk_rows": 25, "test_size": test_size}
    for name, engine in (("n0", {}), ("n2", {"scheduler": cluster})):
        test_out = {"test_out": str(tmp_path / f"{name}-test")} if test_size else {}
        ingest(IngestOptions(inputs=[str(tmp_path / "*.npz")], out=str(tmp_path / name), **kw, **test_out, **engine))
    assert _manifest(tmp_path / "n2") == _manifest(tmp_path / "n0")
    assert open_store(str(tmp_path / "n0")).n_features == 6
    if test_size:
        assert _manifest(tmp_path / "n2-test") == _manifest(tmp_path / "n0-test")
        assert open_store(str(tmp_path / "n0-test")).n_features == 6


@pytest.mark.parametrize("suffix", [".zip", ".tgz"])
def test_an_archive_of_one_data_file_is_one_piece_and_gives_the_in_process_store(tmp_path, cluster, suffix):
    """data.zip / data.tgz holding one JSONL file: its member path is read whole by one worker,
    and the store is the extracted file's, in process and on 2 workers."""
    import tarfile
    import zipfile

    inputs = _write_files(tmp_path / "in", n_files=1, rows=300)
    data = tmp_path / "in" / "part-0.jsonl"
    archive = tmp_path / f"data{suffix}"
    if suffix == ".zip":
        with zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zf:
            zf.write(data, "data/part-0.jsonl")
    else:
        with tarfile.open(archive, "w:gz") as tf:
            tf.add(data, "data/part-0.jsonl")
    kw = {"chunk_rows": 50, "idf": False}
    ingest(_options(inputs, tmp_path / "plain", **kw))
    for name, engine in (("n0", {}), ("n2", {"scheduler": cluster})):
        ingest(_options(str(archive), tmp_path / name, **kw, **engine))
        chunks = [c["sha256"] for c in _manifest(tmp_path / name)["chunks"]]
        assert chunks == [c["sha256"] for c in _manifest(tmp_path / "plain")["chunks"]]
    assert _manifest(tmp_path / "n2") == _manifest(tmp_path / "n0")
    assert _manifest(tmp_path / "n0")["source"]["paths"] == [f"{archive}:data/part-0.jsonl"]


def test_workers_on_other_machines_writing_a_local_store_is_an_error(tmp_path, cluster, monkeypatch):
    """A chunk the driver does not see on its disk (written by a worker to a disk of its own)."""
    from streamfit.errors import StoreError
    from streamfit.store.store import ChunkSink

    inputs = _write_files(tmp_path / "in", n_files=2, rows=40)
    monkeypatch.setattr(ChunkSink, "exists", lambda self, cid: False)
    with pytest.raises(StoreError, match="not on this machine's disk: .*--out must be a URL"):
        ingest(_options(inputs, tmp_path / "x.zarr", idf=False, scheduler=cluster))
    assert not (tmp_path / "x.zarr").exists() and not (tmp_path / "x.zarr.partial").exists()


# Runs the streamfit CLI and SIGKILLs it when it takes the written chunk argv[1] from a worker.
KILL_AT_CHUNK = """
import os, signal, sys
from streamfit.store.store import StoreWriter
from streamfit.cli import main
real = StoreWriter.add_written
def add_written(self, written):
    if written.info.id == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)
    real(self, written)
StoreWriter.add_written = add_written
main(sys.argv[2:])
"""


def test_a_driver_killed_while_the_workers_write_leaves_no_complete_store(tmp_path, s3, cluster, short_leases):
    """Killed with chunks written by the workers under its attempt: the store does not open; a
    re-run (once the killed driver's lease is stale) writes the in-process store and collects the
    killed attempt."""
    import signal
    import subprocess
    import sys

    from streamfit.errors import StoreError

    inputs = _write_files(tmp_path / "in", n_files=3, rows=100)
    store, args = f"s3://{BUCKET}/killed-dist.zarr", ["--no-idf", "--chunk-rows", "50", "--n-features", "4096"]
    cmd = ["-q", "ingest", inputs, *args, "--scheduler", cluster, "--out", store]
    proc = subprocess.run([sys.executable, "-c", KILL_AT_CHUNK, "3", *cmd], capture_output=True, text=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    s3.invalidate_cache()
    written = [p for p in s3.find(f"{BUCKET}/killed-dist.zarr") if "/chunks/" in p]
    assert written and not s3.exists(f"{BUCKET}/killed-dist.zarr/COMMITTED")
    with pytest.raises(StoreError, match="has no COMMITTED; it is not a complete store"):
        open_store(store)
    ingest(_options(inputs, tmp_path / "local.zarr", chunk_rows=50, idf=False))
    short_leases()
    ingest(_options(inputs, store, chunk_rows=50, idf=False, scheduler=cluster))
    s3.invalidate_cache()
    attempts = {p.split("/")[2] for p in s3.find(f"{BUCKET}/killed-dist.zarr") if "/attempt-" in p}
    assert len(attempts) == 1 and open_store(store).verify() == []
    local, remote = _manifest(tmp_path / "local.zarr"), _manifest(store)
    assert [c["sha256"] for c in remote["chunks"]] == [c["sha256"] for c in local["chunks"]]


@pytest.mark.parametrize("target", ["numeric", "multilabel"])
def test_a_split_of_regression_or_multilabel_rows_gives_the_in_process_stores(tmp_path, cluster, monkeypatch, target):
    """Pass 2 on the workers with float targets (rows × 1) and with label sets (sparse indicators)."""
    from streamfit.ingest import distributed

    rng = random.Random(2)
    for f in range(2):
        lines = []
        for _ in range(150):
            labels = {str(rng.randint(0, 4 + f)) for _ in range(rng.randint(1, 2))}  # classes new in file 1
            label = f"{rng.random():.4f}" if target == "numeric" else ",".join(sorted(labels))
            features = " ".join(f"{j}:{rng.random():.3f}" for j in sorted(rng.sample(range(1, 40), 4)))
            lines.append(f"{label} {features}")
        (tmp_path / f"p{f}.svm").write_text("\n".join(lines) + "\n")
    kw = {"hashing": None, "test_size": 0.3, "chunk_rows": 40, "batch_size": 32, "progress": False}
    kw |= {"target": "numeric"} if target == "numeric" else {"source_options": {"multilabel": True}}
    monkeypatch.setattr(distributed, "PIECE_BYTES", 2048)
    stores = {}
    for name, engine in (("in", {}), ("cl", {"scheduler": cluster})):
        if engine:
            _driver_writes_no_chunk(monkeypatch)
        out, test = tmp_path / f"{name}.zarr", tmp_path / f"{name}-test.zarr"
        ingest(IngestOptions(inputs=[str(tmp_path / "*.svm")], out=str(out), test_out=str(test), **kw, **engine))
        stores[name] = [_manifest(out), _manifest(test)]
    assert stores["cl"] == stores["in"]
    assert stores["in"][0]["task"] == ("regression" if target == "numeric" else "multilabel")
    assert stores["in"][0]["class_rows"] is None and stores["in"][1]["class_rows"] is None  # multiclass only


def test_a_file_of_a_few_pieces_sizes_is_cut_into_pieces_per_input(tmp_path, monkeypatch):
    """A LIBSVM / JSONL file smaller than PIECE_BYTES is cut too when the input is small: into
    PIECES_PER_INPUT byte ranges of the input's bytes / PIECES_PER_INPUT (not below
    MIN_PIECE_BYTES) at line boundaries, so an input of one file of a few MB keeps several
    workers busy (it had been one piece at any N); one below MIN_PIECE_BYTES stays whole, and so
    does each file of an input of many (a piece costs the driver; the files are pieces enough)."""
    from streamfit.ingest import distributed

    monkeypatch.setattr(distributed, "MIN_PIECE_BYTES", 2048)  # a file of a few MB, scaled down
    _write_files(tmp_path / "in", n_files=1, rows=1200)
    path = str(tmp_path / "in" / "part-0.jsonl")
    data = open(path, "rb").read()
    assert len(data) > distributed.PIECES_PER_INPUT * 2048
    pieces = distributed.plan_pieces([path], _options(path, tmp_path / "x"), {}, distributed.PIECE_BYTES, 1 << 20)
    assert len(pieces) == distributed.PIECES_PER_INPUT
    assert pieces[0].byte_range[0] == 0 and pieces[-1].byte_range[1] == len(data)
    for a, b in zip(pieces, pieces[1:]):
        assert a.byte_range[1] == b.byte_range[0] and data[b.byte_range[0] - 1 : b.byte_range[0]] == b"\n"
        assert len(data) // distributed.PIECES_PER_INPUT <= a.byte_range[1] - a.byte_range[0] < len(data) // 8
    many = [path] * distributed.PIECES_PER_INPUT  # the same file 16 times: an input 16 times its size
    pieces = distributed.plan_pieces(many, _options(path, tmp_path / "x"), {}, distributed.PIECE_BYTES, 1 << 20)
    assert [p.byte_range for p in pieces] == [None] * len(many)
    monkeypatch.setattr(distributed, "MIN_PIECE_BYTES", len(data))
    [whole] = distributed.plan_pieces([path], _options(path, tmp_path / "x"), {}, distributed.PIECE_BYTES, 1 << 20)
    assert whole.byte_range is None


def test_a_large_cluster_cuts_the_input_into_pieces_per_worker_thread_of_equal_size(tmp_path, monkeypatch):
    """On a cluster of more than PIECES_PER_INPUT / PIECES_PER_THREAD worker threads a file is
    cut into PIECES_PER_THREAD pieces per thread (one piece per thread leaves each worker idle from
    its piece's end to the slowest one's), each file into round(its size / the cut) ranges of
    equal size: a file a little larger than the cut is one piece, not a piece and a sliver."""
    from streamfit.ingest import distributed

    monkeypatch.setattr(distributed, "MIN_PIECE_BYTES", 512)  # a file of a few MB, scaled down
    _write_files(tmp_path / "in", n_files=1, rows=1200)
    path = str(tmp_path / "in" / "part-0.jsonl")
    data = open(path, "rb").read()
    o = _options(path, tmp_path / "x")

    def plan(paths, threads):
        return distributed.plan_pieces(paths, o, {}, distributed.PIECE_BYTES, 1 << 20, threads)

    assert distributed.PIECES_PER_INPUT == 4 * distributed.PIECES_PER_THREAD == 16
    assert len(plan([path], 1)) == len(plan([path], 4)) == 16
    pieces = plan([path], 8)
    assert len(pieces) == 32
    assert pieces[0].byte_range[0] == 0 and pieces[-1].byte_range[1] == len(data)
    for a, b in zip(pieces, pieces[1:]):
        assert a.byte_range[1] == b.byte_range[0] and data[b.byte_range[0] - 1 : b.byte_range[0]] == b"\n"
    sizes = [hi - lo for lo, hi in (p.byte_range for p in pieces)]
    line = max(len(x) for x in data.split(b"\n")) + 1
    assert max(sizes) - min(sizes) <= 32 * line  # the last piece is short by at most a line per cut
    assert max(sizes) <= -(-len(data) // 32) + line
    # 30 such files on 8 threads: the cut is 30/32 of a file, and each file one piece
    assert [p.byte_range for p in plan([path] * 30, 8)] == [None] * 30


def test_progress_on_a_cluster_is_one_bar_over_the_records_of_every_pass(tmp_path, cluster, bar_updates):
    """Issue 20, item 13, with workers as in process: on a terminal one bar over the records of
    every pass: pass 1's pieces merged (no total yet), then pass 2's document frequencies (a run
    of chunks per worker thread) and its write (a chunk at a time), which make the total: records
    read + 2 x the stage's rows. (In a log, the same passes' lines: test_pass_shown_in_a_log.)"""
    from dataclasses import replace

    inputs = _write_files(tmp_path / "in", n_files=4, rows=300)  # 4 pieces, 1200 records: 5 chunks of 256
    ingest(replace(_options(inputs, tmp_path / "bar.zarr", chunk_rows=256, scheduler=cluster), progress=True))
    assert [s for s in bar_updates if s[0] == "begin"] == [("begin", "ingest", "record")]
    pass1 = [(300, None), (600, None), (900, None), (1200, None)]
    document_frequencies = [(1200 + 768, 3600), (2400, 3600)]  # chunks 0-2 and 3-4
    write = [(2400 + min(256 * k, 1200), 3600) for k in range(1, 6)]
    assert [s[1:] for s in bar_updates if s[0] == "count"] == pass1 + document_frequencies + write


def test_pass_shown_in_a_log(caplog):
    """distributed.PassShown off a terminal (no bar, o.progress): a pass's lines, the first and
    the last always, with the count of its pieces or chunks and, from the second, an ETA; nothing
    without o.progress; with ingest's bar, only the bar's records (test above)."""
    from types import SimpleNamespace

    from streamfit.ingest.distributed import PassShown

    with caplog.at_level("INFO", logger="streamfit.runlog"):
        shown = PassShown(SimpleNamespace(progress=True), "write", "chunk", None, 1200, 3600)
        shown.begin(3)
        for _ in range(3):
            shown.add(256)
        quiet = PassShown(SimpleNamespace(progress=False), "write", "chunk", None)
        quiet.begin(2)
        quiet.add(5)
    lines = caplog.messages
    assert lines[0].startswith("write: chunk 1/3, ") and "ETA" not in lines[0], lines
    assert lines[-1].startswith("write: chunk 3/3, ") and "ETA 0:00" in lines[-1], lines
    assert len(lines) in (2, 3) and (shown.k, shown.done) == (3, 1200 + 3 * 256)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.booleans(), min_size=1, max_size=300), st.integers(0, 10**9))
def test_packed_rows_give_back_the_rows_in_about_a_bit_each(mask, offset):
    """Pass 2's row selections travel in the task graph packed (a run of rows as its bounds, else
    a bit mask over their span) and come back exactly."""
    rows = offset + np.flatnonzero(mask).astype(np.int64)
    if rows.size == 0:
        rows = np.array([offset], dtype=np.int64)
    start, stop, bits = packed_rows(rows)
    assert (start, stop) == (rows[0], rows[-1] + 1)
    assert (bits is None) == (stop - start == len(rows))
    assert bits is None or bits.nbytes == -(-(stop - start) // 8)
    back = unpacked_rows(start, stop, bits)
    assert back.dtype == np.int64 and np.array_equal(back, rows)
