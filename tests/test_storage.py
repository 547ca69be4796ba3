"""streamfit.storage: URLs through fsspec and the commit protocol without rename.

The S3 tests run against a real S3 API server on 127.0.0.1 (moto's ThreadedMotoServer, started
once per session) with s3fs as the client, reached through the standard AWS_* environment
variables only, as a user's cluster would: ingest → train killed mid-checkpoint → resumed on a
two-worker loopback cluster reading the store from S3 → evaluate → predict, all on s3:// URLs,
against the same job on local disk; writers killed at their commit; a damaged object."""

import collections
import io
import json
import os
import re
import signal
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from streamfit import storage
from streamfit.cli import main
from streamfit.errors import StoreError, StreamfitError
from streamfit.model import load_model
from streamfit.store import StoreWriter, open_store

DATA = os.path.join(os.path.dirname(__file__), "data", "sources", "iris.svm")
BUCKET = "streamfit-test"  # the s3 fixture's bucket and credentials (tests/conftest.py)
ACCESS_KEY, SECRET_KEY = "AKIDSTREAMFITTEST", "s3cr3t-streamfit-test-key"
TRAIN = ["--solver", "fbpd", "-p", "max_iter=6", "-p", "tol=0", "-p", "gap_tol=0"]

# Runs the streamfit CLI and SIGKILLs the process at the commit of the directory named argv[1]
# (its files all written, only the commit record missing): the latest moment a writer can die.
KILL_AT_COMMIT = """
import os, signal, sys
from streamfit import storage
from streamfit.cli import main
real = storage.Attempt.commit
def commit(self):
    if self.target.name == sys.argv[1]:
        os.kill(os.getpid(), signal.SIGKILL)
    real(self)
storage.Attempt.commit = commit
main(sys.argv[2:])
"""


def _cli(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)


def _killed_at_commit(name, *args):
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AT_COMMIT, name, "-q", *map(str, args)], capture_output=True, text=True
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr


def _attempts(fs, prefix):
    fs.invalidate_cache()
    return sorted({p.split("/")[2] for p in fs.find(f"{BUCKET}/{prefix}") if "/attempt-" in p})


# ------------------------------------------------------------------------------ without a server


def test_a_local_look_up_answers_as_fsspecs_local_info(tmp_path):
    """Location.look_up on local disk is one os.stat (no fsspec imported); its type and size are
    those of fsspec's LocalFileSystem.info, links followed, None where nothing is."""
    from fsspec.implementations.local import LocalFileSystem

    (tmp_path / "folder").mkdir()
    (tmp_path / "file").write_bytes(b"12345")
    os.symlink(tmp_path / "file", tmp_path / "link-to-file")
    os.symlink(tmp_path / "folder", tmp_path / "link-to-folder")
    os.symlink(tmp_path / "gone", tmp_path / "broken-link")
    os.mkfifo(tmp_path / "fifo")
    fs = LocalFileSystem()
    for name in ("folder", "file", "link-to-file", "link-to-folder", "fifo"):
        path = str(tmp_path / name)
        found = storage.resolve(path).look_up()
        assert found is not None and (found["type"], found["size"]) == (fs.info(path)["type"], fs.info(path)["size"])
    assert storage.resolve(str(tmp_path / "file")).look_up()["size"] == 5
    assert storage.resolve(str(tmp_path / "fifo")).look_up()["type"] == "other"
    for name in ("broken-link", "missing"):
        assert storage.resolve(str(tmp_path / name)).look_up() is None
        with pytest.raises(FileNotFoundError):
            fs.info(str(tmp_path / name))


def test_a_url_whose_package_is_missing_is_one_error_line_and_nothing_is_written(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = _cli("ingest", DATA, "--no-hash", "--out", "gs://bucket/iris.zarr")
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: gs://bucket/iris.zarr: gs:// needs the package gcsfs, which is not installed; pip install gcsfs"
    ]
    assert os.listdir(tmp_path) == []  # no ./gs:/bucket/iris.zarr
    with pytest.raises(StreamfitError, match="unknown URL scheme nosuch://"):
        storage.resolve("nosuch://x/y")
    assert storage.public("ftp://user:secret@host/data.jsonl") == "ftp://host/data.jsonl"  # what is recorded


@pytest.mark.parametrize(
    "url, message",
    [
        (
            "s3:/bucket/x.zarr",
            "a URL with a slash missing after 's3:'; write s3://bucket/x.zarr, or ./s3:/bucket/x.zarr for a local path",
        ),
        (
            "gs:bucket/x.zarr",
            "a URL with a slash missing after 'gs:'; write gs://bucket/x.zarr, or ./gs:bucket/x.zarr for a local path",
        ),
        ("s3://", "names no bucket or path; e.g. s3://BUCKET/NAME"),
        ("gs://bucket/x.zarr", "gs:// needs the package gcsfs, which is not installed; pip install gcsfs"),
    ],
)
def test_a_broken_url_is_one_error_line_from_every_command_and_nothing_is_written(tmp_path, monkeypatch, url, message):
    """A URL with a slash missing (which a local path would take, writing ./s3:/bucket/...),
    without a bucket, or of a scheme whose package is missing, given to each command where it
    reads or writes: exit 2, one line naming it and the fix, and nothing made where the command runs."""
    import scipy.sparse as sp

    monkeypatch.chdir(tmp_path)
    store = "s.zarr"
    writer = StoreWriter(store, chunk_rows=4)
    writer.write_rows(sp.csr_matrix(np.eye(4, dtype=np.float32)), np.array([0, 1, 0, 1]))
    writer.close(n_features=4, classes=["a", "b"])
    assert (
        _cli("train", store, "--solver", "bcd", "-p", "max_iter=1", "--n-workers", "0", "--out", "run").exit_code == 0
    )
    made = sorted(os.listdir(tmp_path))
    for argv in (
        ["ingest", DATA, "--no-hash", "--out", url],
        ["ingest", url, "--no-hash", "--out", "o.zarr"],
        ["ingest", DATA, "--no-hash", "--out", "o.zarr", "--test-size", "0.5", "--test-out", url],
        ["inspect", url],
        ["transpose", url],
        ["train", url, "--out", "r"],
        ["train", store, "--solver", "bcd", "--out", url],
        ["train", store, "--solver", "bcd", "--out", "r", "--valid", url],
        ["evaluate", url, store],
        ["evaluate", "run", url],
        ["predict", url, store, "--out", "p.csv"],
        ["predict", "run", url, "--out", "p.csv"],
    ):
        result = _cli(*argv)
        assert result.exit_code == 2, (argv, result.output)
        assert result.stderr.strip().splitlines() == [f"error: {url}: {message}"], (argv, result.stderr)
        assert sorted(os.listdir(tmp_path)) == made, argv
    if url.endswith(".zarr"):  # predict's output: its suffix is checked first
        out = url.replace(".zarr", ".csv")
        result = _cli("predict", "run", store, "--out", out)
        assert result.exit_code == 2, result.stderr
        assert result.stderr.strip().splitlines() == [f"error: {out}: {message.replace('.zarr', '.csv')}"]
        assert sorted(os.listdir(tmp_path)) == made


def test_object_store_client_errors_are_one_line_with_the_fix(tmp_path, monkeypatch):
    """No credentials anywhere the S3 client looks (the environment, the files, the instance's
    metadata, turned off here): one line saying so and where they go, not an internal error."""
    import s3fs

    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # never reached: the request is not signed
    s3fs.S3FileSystem.clear_instance_cache()
    monkeypatch.chdir(tmp_path)
    result = _cli("ingest", DATA, "--no-hash", "--out", "s3://no-such-bucket/x.zarr")
    s3fs.S3FileSystem.clear_instance_cache()
    assert result.exit_code == 2
    assert result.stderr.strip().splitlines() == [
        "error: Unable to locate credentials; no credentials for the object store: set them where its client reads "
        "them (S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or ~/.aws/credentials)"
    ]
    assert os.listdir(tmp_path) == []


@pytest.fixture
def refusing_s3(tmp_path, monkeypatch, moto_process, point_s3):
    """An S3 API server on 127.0.0.1 (moto's, in its own process) that checks credentials and
    knows none, so every request is refused with InvalidAccessKeyId; the AWS_* variables point at it."""
    with moto_process({"INITIAL_NO_AUTH_ACTION_COUNT": "0"}) as url, point_s3(url, "AKIDWRONG", "wrong"):
        monkeypatch.chdir(tmp_path)
        yield


def test_a_wrong_access_key_is_one_line_naming_the_credentials_not_the_disk(refusing_s3, tmp_path):
    """qa28: a key the object store does not know gave `error: The AWS Access Key Id you provided
    does not exist in our records.; check that the location exists, is writable and has free
    space`, a local disk's hint. Now the line names the refusal's code and where the credentials go."""
    line = (
        "error: The AWS Access Key Id you provided does not exist in our records. (InvalidAccessKeyId); "
        "the object store does not know this access key: check the credentials (S3: AWS_ACCESS_KEY_ID, "
        "AWS_PROFILE or ~/.aws/credentials) and the endpoint (AWS_ENDPOINT_URL)"
    )
    for argv in (
        ["ingest", DATA, "--no-hash", "--out", "s3://qa28-bucket/x.zarr"],
        ["inspect", "s3://qa28-bucket/x.zarr"],
        ["train", "s3://qa28-bucket/x.zarr", "--out", "s3://qa28-bucket/run"],
    ):
        result = _cli(*argv)
        assert result.exit_code == 2, (argv, result.output)
        assert result.stderr.strip().splitlines() == [line], (argv, result.stderr)
    assert os.listdir(tmp_path) == []
    # a Dask task's store opens at its committed attempt on first use: the same cause, where it
    # said "unreadable manifest (…); re-ingest the store" of a store that is fine
    from streamfit.store.store import _shipped

    manifest = "s3://qa28-bucket/x.zarr/attempt-1/manifest.json"
    shipped = _shipped("s3://qa28-bucket/x.zarr", "0" * 64, "attempt-1", False)  # nothing read yet
    with pytest.raises(StoreError) as refused:
        shipped.n_rows  # noqa: B018 - the first use opens it
    assert str(refused.value) == f"{manifest}: {line.removeprefix('error: ')}"


def test_a_refusal_whose_cause_was_lost_on_a_dask_worker_names_the_workers_credentials():
    """A refusal raised on a Dask worker reaches the driver as s3fs's PermissionError('Forbidden')
    of a HEAD request (code 403, no message body), with botocore's ClientError behind it or,
    pickled without tblib's support, with nothing behind it: either way its line names the
    credentials on the workers, where a local PermissionError (with an errno) gets none of this."""
    from botocore.exceptions import ClientError
    from s3fs.errors import translate_boto_error

    refused = translate_boto_error(ClientError({"Error": {"Code": "403", "Message": "Forbidden"}}, "HeadObject"))
    assert isinstance(refused, PermissionError) and refused.__cause__ is not None
    bare = PermissionError("Forbidden")
    assert (
        storage.client_error_message(refused)
        == storage.client_error_message(bare)
        == (
            "Forbidden; the object store refused the request: check the credentials and permissions where the command "
            "runs and, with --scheduler, on the Dask workers (S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE)"
        )
    )
    local = PermissionError(13, "Permission denied", "/root/x")
    assert storage.client_error_message(local) is None


def test_a_local_commit_syncs_every_file_and_folder_of_the_attempt_before_the_rename(tmp_path, monkeypatch):
    """The store's own files and Zarr's (chunks and their metadata) all reach the disk before the
    store appears under its name, then the rename itself (its parent folder's sync)."""
    import scipy.sparse as sp

    synced = []
    real = storage.fsync_path

    def record(path):
        synced.append((path, os.path.exists(tmp_path / "s.zarr")))
        real(path)

    monkeypatch.setattr(storage, "fsync_path", record)
    writer = StoreWriter(str(tmp_path / "s.zarr"), chunk_rows=2)
    writer.write_rows(sp.csr_matrix(np.eye(3, dtype=np.float32)), np.array([0, 1, 0]))
    writer.close(n_features=3, classes=["a", "b"])
    partial = str(tmp_path / "s.zarr.partial")
    final = str(tmp_path / "s.zarr")
    tree = {top for top, _, _ in os.walk(final)} | {os.path.join(top, f) for top, _, fs in os.walk(final) for f in fs}
    before = {path.replace(partial, final, 1) for path, target_exists in synced if not target_exists}
    assert len(tree) > 10 and before == tree  # chunk files among them: zarr writes those itself
    assert synced[-1] == (str(tmp_path), True)


def test_a_local_tree_is_deleted_a_level_at_a_time_with_deletions_in_flight_together(tmp_path, monkeypatch):
    """remove_local_tree deletes the files, then the folders deepest first, several at once (here
    two sibling folders' rmdirs meet at a barrier: one after the other they never would); links
    are deleted, not followed; errors (a missing tree) are ignored."""
    import threading

    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_bytes(b"x")
    root = tmp_path / "tree"
    for chunk in ("000000", "000001"):
        for array in ("indptr", "data"):
            (root / "chunks" / chunk / array / "c").mkdir(parents=True)
            (root / "chunks" / chunk / array / "c" / "0").write_bytes(b"1")
            (root / "chunks" / chunk / array / "zarr.json").write_bytes(b"{}")
    (root / "manifest.json").write_bytes(b"{}")
    os.symlink(outside, root / "link")
    both = threading.Barrier(2, timeout=10)
    rmdir, removed = os.rmdir, []

    def rmdir_with_a_sibling(path):
        if os.path.basename(path) in ("000000", "000001"):
            both.wait()
        removed.append(path)
        rmdir(path)

    monkeypatch.setattr(os, "rmdir", rmdir_with_a_sibling)
    storage.remove_local_tree(str(root))
    assert not root.exists() and sorted(os.listdir(outside)) == ["kept"]
    depth = [p.count(os.sep) for p in removed]
    assert len(removed) == 12 and depth == sorted(depth, reverse=True)  # every folder, children first
    storage.remove_local_tree(str(root))  # nothing there: nothing happens
    storage.resolve(str(outside)).remove_tree()
    assert not outside.exists()


def test_commit_protocol_on_an_object_store():
    """memory:// has no rename: an attempt is invisible until COMMITTED names it, a later commit
    replaces it and collects every other attempt, and a store whose writer stopped before its
    commit does not open."""
    target = storage.resolve("memory://commit-test/dir")
    first = storage.begin(target)
    first.location.join("a").write_new(b"1")
    assert storage.committed(target) is None
    first.commit()
    assert storage.committed(target) == first.location
    orphan = storage.begin(target)  # a writer that dies before its commit
    orphan.location.join("a").write_new(b"orphan")
    second = storage.begin(target)
    second.location.join("a").write_new(b"2")
    assert storage.committed(target).join("a").read_bytes() == b"1"
    second.commit()
    assert storage.committed(target).join("a").read_bytes() == b"2"
    assert [p.name for p in target.glob("attempt-*")] == [second.location.name]

    writer = StoreWriter("memory://commit-test/store.zarr", chunk_rows=2)
    writer.write_rows(__import__("scipy.sparse").sparse.csr_matrix(np.eye(3, dtype=np.float32)), np.arange(3))
    with pytest.raises(StoreError, match="has no COMMITTED"):
        open_store("memory://commit-test/store.zarr")


def test_a_store_behind_a_url_pickles_as_the_attempt_its_opener_read(monkeypatch):
    """A Dask task's copy of a store behind a URL reopens the attempt its driver opened, without
    reading COMMITTED (a request per task otherwise), on its first use, not as it is unpickled;
    once the store is written again, that attempt is gone and the copy says so instead of
    reading the new store."""
    import pickle

    from streamfit.store import store as store_module

    url = "memory://pickled/iris.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", url, "--chunk-rows", "10").exit_code == 0
    opened = open_store(url)
    blob = pickle.dumps(opened)
    store_module._shipped.cache_clear()  # as in a worker's fresh process
    with monkeypatch.context() as m:
        m.setattr(store_module, "_committed", lambda location: pytest.fail("COMMITTED read again"))
        copy = pickle.loads(blob)
        assert copy.data == opened.data and copy.manifest == opened.manifest
    assert pickle.loads(blob) is copy  # one object per process: what tasks cache per store is kept
    assert _cli("ingest", DATA, "--no-hash", "--out", url, "--chunk-rows", "25", "--overwrite").exit_code == 0
    store_module._shipped.cache_clear()
    again = pickle.loads(blob)  # nothing read yet: no error as the task arrives
    with pytest.raises(StoreError, match=f"its attempt {opened.data.name} is gone"):
        again.n_rows  # noqa: B018 - the first use opens it
    assert open_store(url).n_chunks == 2  # the new commit, opened by its URL


# --------------------------------------------------------------------------------- against S3


@pytest.mark.slow
def test_ingest_train_kill_resume_on_a_cluster_evaluate_predict_on_s3_as_on_local_disk(
    s3_requests, s3, tmp_path, short_leases
):
    store, run = f"s3://{BUCKET}/iris.zarr", f"s3://{BUCKET}/run"
    s3.put(DATA, f"{BUCKET}/raw/iris.svm")
    with s3_requests() as requests:
        assert (
            _cli("ingest", f"s3://{BUCKET}/raw/iris.svm", "--no-hash", "--out", store, "--chunk-rows", "10").exit_code
            == 0
        )
    # the input: is it a folder (a LIST of the keys that start with its name), the reader's look-up (a
    # HEAD) and its read; the open is given the look-up's size and ETag (fsspec's file had asked again)
    assert [r for r in requests if r[1].startswith("raw/")] == [
        ("LIST", "raw/iris.svm"),
        ("HEAD", "raw/iris.svm"),
        ("GET", "raw/iris.svm"),
    ]
    local = tmp_path / "iris.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", local, "--chunk-rows", "10").exit_code == 0
    assert open_store(store).manifest.chunks == open_store(str(local)).manifest.chunks  # every chunk digest

    # killed while committing step 3, its files written: LATEST stays on step 2
    every = ["--checkpoint-interval", "0"]  # "auto" may pass step 3 by (a save's time decides)
    _killed_at_commit("step-000003", "train", store, *TRAIN, *every, "--n-workers", "0", "--out", run)
    latest = json.loads(s3.cat_file(f"{BUCKET}/run/checkpoints/LATEST"))
    assert latest == {"step": 2}
    assert _attempts(s3, "run/checkpoints/step-000003") and not s3.exists(
        f"{BUCKET}/run/checkpoints/step-000003/COMMITTED"
    )
    # resumed on a two-worker cluster on loopback, whose workers read the store from S3, once the
    # killed run's lease is stale (streamfit.lease)
    short_leases()
    assert _cli("train", store, *TRAIN, "--n-workers", "2", "--resume", "--out", run).exit_code == 0
    s3.invalidate_cache()  # the listings s3fs cached before the resume
    assert (
        not s3.exists(f"{BUCKET}/run/checkpoints/step-000003/COMMITTED")
        or len(_attempts(s3, "run/checkpoints/step-000003")) <= 1
    )  # the killed attempt was collected
    assert _cli("train", local, *TRAIN, "--n-workers", "0", "--out", tmp_path / "run").exit_code == 0
    ours, ref = load_model(run)._arrays(), load_model(str(tmp_path / "run"))._arrays()
    assert ours.keys() == ref.keys() and all(np.array_equal(ours[k], ref[k]) for k in ref)

    evaluated = _cli("evaluate", "--json", run, store)
    assert evaluated.exit_code == 0
    assert json.loads(evaluated.output) == json.loads(_cli("evaluate", "--json", tmp_path / "run", local).output)
    assert _cli("predict", run, f"s3://{BUCKET}/raw/iris.svm", "--out", f"s3://{BUCKET}/pred.csv").exit_code == 0
    assert _cli("predict", tmp_path / "run", DATA, "--out", tmp_path / "pred.csv").exit_code == 0
    assert s3.cat_file(f"{BUCKET}/pred.csv").replace(f"s3://{BUCKET}/raw/".encode(), b"") == (
        tmp_path / "pred.csv"
    ).read_bytes().replace(os.path.dirname(DATA).encode() + b"/", b"")
    endpoint = os.environ["AWS_ENDPOINT_URL"].split("//")[1]
    s3.invalidate_cache()  # the listings cached by the checks above name objects deleted since
    for key in s3.find(BUCKET):  # no credential or endpoint recorded anywhere: manifests, records, logs
        text = s3.cat_file(key)
        assert not any(secret.encode() in text for secret in (ACCESS_KEY, SECRET_KEY, endpoint)), key


@pytest.mark.slow
def test_an_ingest_killed_at_its_commit_leaves_nothing_that_opens_and_a_rerun_collects_it(s3, short_leases):
    store = f"s3://{BUCKET}/killed.zarr"
    _killed_at_commit("killed.zarr", "ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "10")
    (attempt,) = _attempts(s3, "killed.zarr")
    assert s3.exists(f"{BUCKET}/killed.zarr/{attempt}/manifest.json")  # every file there but the commit
    with pytest.raises(StoreError, match="has no COMMITTED; it is not a complete store"):
        open_store(store)
    short_leases()  # the killed writer's lease, stale
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "10").exit_code == 0
    assert len(_attempts(s3, "killed.zarr")) == 1 and open_store(store).verify() == []


@pytest.mark.slow
def test_a_two_pass_ingest_on_s3_never_commits_its_stage_and_deletes_it_in_one_batch(
    s3_requests, s3, tmp_path, monkeypatch
):
    """The IDF stage behind a URL is scratch, as on local disk: written under its own attempt
    prefix, never committed (no COMMITTED, no listing for stale attempts), read there by pass 2,
    and deleted at the end by one listing of its prefix and one batched delete. (A stage this
    small is held in memory by default, with no request at all: MEMORY_STAGE_BYTES 0 puts it
    behind the URL.)"""
    import streamfit.ingest.pipeline as pipeline

    default = pipeline.MEMORY_STAGE_BYTES
    monkeypatch.setattr(pipeline, "MEMORY_STAGE_BYTES", 0)
    docs = tmp_path / "docs.jsonl"
    words = ["markets", "rates", "dogs", "cats", "forest", "bonds", "parrots", "yields"]
    docs.write_text(
        "".join(
            json.dumps({"text": " ".join(words[i % 8 :] + words[: i % 3]), "label": str(i % 2)}) + "\n"
            for i in range(40)
        )
    )
    store, stage_prefix = f"s3://{BUCKET}/text.zarr", "text.zarr.pass1.partial/"
    with s3_requests() as requests:
        assert _cli("ingest", docs, "--out", store, "--chunk-rows", "8").exit_code == 0
    stage = {(method, key.split("/attempt-")[0]) for method, key in requests if ".pass1.partial" in key}
    assert stage == {
        ("PUT", "text.zarr.pass1.partial"),
        ("GET", "text.zarr.pass1.partial"),
        ("LIST", stage_prefix),
        ("PUT", "text.zarr.pass1.partial/LEASE"),  # its lease, taken; deleted with the stage (POST below)
    }
    assert [r for r in requests if r == ("LIST", stage_prefix) or r[0] in ("POST", "DELETE")] == [
        ("LIST", stage_prefix),
        ("POST", f"/{BUCKET}"),  # DeleteObjects: up to 1000 keys a request
        ("DELETE", "text.zarr/LEASE"),  # the store's lease, released last
    ]
    s3.invalidate_cache()
    assert not s3.find(f"{BUCKET}/text.zarr.pass1.partial")
    assert _cli("ingest", docs, "--out", tmp_path / "text.zarr", "--chunk-rows", "8").exit_code == 0
    assert open_store(store).manifest.chunks == open_store(str(tmp_path / "text.zarr")).manifest.chunks
    monkeypatch.setattr(pipeline, "MEMORY_STAGE_BYTES", default)
    with s3_requests() as requests:
        assert _cli("ingest", docs, "--out", store, "--chunk-rows", "8", "--overwrite").exit_code == 0
    assert not [r for r in requests if ".pass1.partial" in r[1]]
    assert open_store(store).manifest.chunks == open_store(str(tmp_path / "text.zarr")).manifest.chunks


@pytest.mark.slow
def test_a_store_copied_file_by_file_is_named_as_such_with_the_way_to_copy_it(s3, tmp_path):
    """qa31: a local store copied to a URL file by file (aws s3 cp --recursive, fsspec's put) has
    no COMMITTED record, and a store behind a URL copied to local disk as it lies there has
    COMMITTED and an attempt folder but no manifest at its top; each was refused as "an
    interrupted ingest?  Re-run 'streamfit ingest'". The lines now say what was found and the
    copy that opens: the files under URL/attempt-copy/ with a COMMITTED record naming it (then
    the same store: the same fingerprint, verified), or the local attempt folder."""
    local = tmp_path / "iris.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", local).exit_code == 0
    s3.put(str(local), f"{BUCKET}/plain.zarr", recursive=True)
    with pytest.raises(StoreError) as refused:
        open_store(f"s3://{BUCKET}/plain.zarr")
    assert str(refused.value) == (
        f"s3://{BUCKET}/plain.zarr: holds a store's files but no COMMITTED record, as a copy file by file "
        "(aws s3 cp --recursive, fsspec's put) leaves it: a store behind a URL is read only once committed. Copy "
        f"the store's files to s3://{BUCKET}/plain.zarr/attempt-copy/ instead and write "
        f's3://{BUCKET}/plain.zarr/COMMITTED holding {{"attempt": "attempt-copy"}}, or ingest to the URL'
    )
    s3.put(str(local), f"{BUCKET}/copied.zarr/attempt-copy", recursive=True)
    s3.pipe_file(f"{BUCKET}/copied.zarr/COMMITTED", json.dumps({"attempt": "attempt-copy"}).encode())
    copied = open_store(f"s3://{BUCKET}/copied.zarr")
    assert copied.manifest.fingerprint == open_store(str(local)).manifest.fingerprint and copied.verify() == []

    s3.invalidate_cache()
    s3.get(f"{BUCKET}/copied.zarr", str(tmp_path / "down.zarr"), recursive=True)
    with pytest.raises(StoreError) as refused:
        open_store(str(tmp_path / "down.zarr"))
    assert str(refused.value) == (
        f"{tmp_path / 'down.zarr'}: has no manifest.json but a COMMITTED record naming attempt-copy: a store copied "
        f"from an object store as it lies there; its files are in {tmp_path / 'down.zarr' / 'attempt-copy'}: pass "
        "that folder"
    )
    assert open_store(str(tmp_path / "down.zarr" / "attempt-copy")).manifest.fingerprint == copied.manifest.fingerprint


def test_a_damaged_object_is_detected(s3):
    store = f"s3://{BUCKET}/damaged.parquet"
    assert (
        _cli("ingest", DATA, "--no-hash", "--backend", "parquet", "--out", store, "--chunk-rows", "10").exit_code == 0
    )
    (attempt,) = _attempts(s3, "damaged.parquet")
    key = f"{BUCKET}/damaged.parquet/{attempt}/chunks/part-000001.parquet"
    raw = bytearray(s3.cat_file(key))
    raw[len(raw) // 3] ^= 0x01
    s3.pipe_file(key, bytes(raw))
    result = _cli("inspect", "--verify", store)
    assert result.exit_code != 0 and "damaged" in (result.output + result.stderr)


# Runs the streamfit CLI (the arguments after argv[1] up to "::"); at the commit of the directory
# named argv[1] (its files all written), first runs the arguments after "::" to their end in another
# process (a second writer of the same URL, begun after this one), prints that one's exit status and
# stderr as a line "OTHER [status, stderr]" (JSON), then commits: two writers overlapping, in a fixed order.
OVERTAKEN_AT_COMMIT = """
import json, subprocess, sys
from streamfit import storage
from streamfit.cli import main
cut = sys.argv.index("::")
ours, other = sys.argv[2:cut], sys.argv[cut + 1 :]
real = storage.Attempt.commit
def commit(self):
    if self.target.name == sys.argv[1]:
        done = subprocess.run([sys.executable, "-m", "streamfit.cli", "-q", *other], capture_output=True, text=True)
        print("OTHER", json.dumps([done.returncode, done.stderr]), flush=True)
    real(self)
storage.Attempt.commit = commit
main(["-q", *ours])
"""

REFUSED = (
    r": another writer committed this {} while this one was writing \(started \d{{4}}-\d\d-\d\d "
    r"\d\d:\d\d:\d\d UTC\); nothing of this attempt was committed: run it again, or write to another --out"
)


def test_of_two_attempts_on_s3_the_later_commit_is_refused_and_the_committed_one_stays_whole(s3):
    """Compare-and-swap commits: two attempts begun where nothing is committed, and two begun
    where a commit is: the first to commit wins, the other's commit is refused (412 from the
    server: If-None-Match, If-Match) with one line, its attempt is deleted, and the committed
    attempt is whole, although the winner's commit collected the loser's half-written files and
    the loser wrote more after. A COMMITTED deleted meanwhile (another writer's uncommit) refuses too."""
    target = storage.resolve(f"s3://{BUCKET}/cas-dir")
    for round_ in range(2):  # nothing committed, then a commit in place
        late, early = storage.begin(target, what="store"), storage.begin(target, what="store")
        assert late.condition == (
            {"mode": "create"}
            if round_ == 0
            else {"IfMatch": s3.info(f"{BUCKET}/cas-dir/COMMITTED", refresh=True)["ETag"]}
        )
        late.location.join("a").write_new(b"late")
        early.location.join("a").write_new(b"early")
        early.location.join("b").write_new(b"early")
        early.commit()
        late.location.join("b").write_new(b"late")  # the writer goes on, its files half collected
        with pytest.raises(StreamfitError, match=f"^s3://{BUCKET}/cas-dir{REFUSED.format('store')}$"):
            late.commit()
        assert storage.committed(target) == early.location
        assert [early.location.join(n).read_bytes() for n in "ab"] == [b"early", b"early"]
        assert _attempts(s3, "cas-dir") == [early.location.name]  # the refused attempt deleted
    gone = storage.begin(target, what="model")
    storage.uncommit(target)
    with pytest.raises(StreamfitError, match=REFUSED.format("model")):
        gone.commit()
    assert storage.committed(target) is None and not _attempts(s3, "cas-dir")


def test_a_writer_committing_on_s3_again_and_again_is_never_refused_and_each_commit_costs_one_head_more(
    s3_requests, s3
):
    """A writer that commits one directory again and again (a model saved again, a checkpoint
    step saved again on resume) looks at COMMITTED as each attempt begins, so its own last commit
    is what it expects: never refused. Requests per commit: the HEAD of COMMITTED as the attempt
    begins (new with the compare-and-swap), the conditional PUT of COMMITTED, the LIST of the
    attempts and, for the attempt it replaces, a LIST of its files and one batched delete."""
    target = storage.resolve(f"s3://{BUCKET}/again-dir")
    names: list[str] = []
    for i in range(4):
        with s3_requests() as requests:
            attempt = storage.begin(target, what="model")
            attempt.location.join("a").write_new(str(i).encode())
            attempt.commit()
        assert storage.committed(target).join("a").read_bytes() == str(i).encode()
        name = attempt.location.name
        expected = [("HEAD", "again-dir/COMMITTED"), ("PUT", f"again-dir/{name}/a"), ("PUT", "again-dir/COMMITTED")]
        expected += [("LIST", "again-dir/attempt-")]
        if names:  # the attempt it replaces
            expected += [("LIST", f"again-dir/{names[-1]}/"), ("POST", f"/{BUCKET}")]
        assert requests == expected, requests
        names.append(name)
    assert _attempts(s3, "again-dir") == names[-1:]


def test_a_conditional_put_refused_after_its_own_first_try_landed_is_the_commit(s3):
    """A PUT of COMMITTED that the client retried after its first try landed (a lost answer) is
    refused by the precondition the first try changed; COMMITTED names the attempt itself, so
    the commit stands (and collects the other attempts) instead of deleting what it committed."""
    target = storage.resolve(f"s3://{BUCKET}/retried")
    other = storage.begin(target)
    other.location.join("a").write_new(b"other")
    attempt = storage.begin(target)
    assert attempt.condition == {"mode": "create"}
    attempt.location.join("a").write_new(b"ours")
    target.join(storage.COMMITTED).write_new(json.dumps({"attempt": attempt.location.name}).encode())  # the first try
    attempt.commit()
    assert storage.committed(target).join("a").read_bytes() == b"ours"
    assert _attempts(s3, "retried") == [attempt.location.name]


def test_a_bucket_deleted_under_a_writer_is_its_error_not_another_writers_commit(s3):
    """S3 answers a PUT into a deleted bucket with 404 NoSuchBucket, which s3fs raises as a
    FileNotFoundError like If-Match on a deleted COMMITTED: the commit says the bucket is gone
    (the caller's one line), not that another writer committed."""
    s3.mkdir("gone-bucket")
    target = storage.resolve("s3://gone-bucket/store")
    attempt = storage.begin(target, what="store")
    assert attempt.condition == {"mode": "create"}
    s3.rmdir("gone-bucket")
    with pytest.raises(FileNotFoundError, match="bucket does not exist"):
        attempt.commit()


def test_memory_urls_keep_the_unconditional_commit():
    """Only S3 has the compare-and-swap: a memory:// attempt carries no precondition and asks nothing as it begins."""
    assert storage.begin(storage.resolve("memory://cas-dir")).condition is None


@pytest.mark.slow
def test_a_second_ingest_overwrite_of_one_s3_store_is_refused_by_the_lease_and_the_first_commits_whole(s3):
    """Two `ingest --overwrite` of one s3:// store overlapping (the second begun while the first
    writes; before the compare-and-swap both exited 0 and the store was damaged, with it the first
    exited 2 at its commit): the second is refused before it reads, exit 2 naming the first
    (streamfit.lease), and the first commits its store whole."""
    store = f"s3://{BUCKET}/two.zarr"
    args = ["ingest", DATA, "--no-hash", "--out", store, "--overwrite", "--chunk-rows"]
    assert _cli(*args, 50).exit_code == 0  # a committed store to replace
    first = subprocess.Popen(
        [sys.executable, "-c", OVERTAKEN_AT_COMMIT, "two.zarr", *args, "25", "::", *args, "10"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    code, other = json.loads(out.split("OTHER ", 1)[1].splitlines()[0])
    assert code == 2 and re.fullmatch(
        rf"error: {store}: another streamfit process is writing this store right now \(host \S+, pid {first.pid}, "
        rf"since .* UTC, renewed \d+ s ago\); wait for it to finish\. If it is dead, the same command takes its lease "
        rf"over in \d+ s \(120 s after its last renewal\), or at once after: aws s3 rm {store}/LEASE",
        other.strip(),
    ), other
    opened = open_store(store)
    assert opened.n_chunks == 2 and opened.verify() == []  # the first's chunks of 25 rows (the second's: 10)
    assert _attempts(s3, "two.zarr") == [opened.data.name] and not s3.exists(f"{BUCKET}/two.zarr/LEASE")


@pytest.mark.slow
def test_a_zarr_store_on_s3_holds_the_local_stores_files_each_put_once(s3_requests, s3, tmp_path):
    """A Zarr store ingested to S3 holds the files of the same store ingested to local disk,
    byte for byte (metadata, chunks, manifest), and each of its chunk objects was written with
    one PUT and nothing else: no HEAD, LIST or GET before it (Zarr asks before each node it
    writes through a filesystem; the chunk groups are built in memory and put)."""
    store = f"s3://{BUCKET}/written.zarr"
    with s3_requests() as requests:
        assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "10").exit_code == 0
    local = tmp_path / "written.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", local, "--chunk-rows", "10").exit_code == 0
    files = {str(p.relative_to(local)): p.read_bytes() for p in local.rglob("*") if p.is_file()}
    (attempt,) = _attempts(s3, "written.zarr")
    prefix = f"{BUCKET}/written.zarr/{attempt}/"
    assert {key.removeprefix(prefix): s3.cat_file(key) for key in s3.find(prefix)} == files
    chunk_requests = [(method, key.split("/chunks/")[1]) for method, key in requests if "/chunks/0" in key]
    chunk_files = sorted(name.removeprefix("chunks/") for name in files if name.startswith("chunks/0"))
    assert sorted(chunk_requests) == [("PUT", name) for name in chunk_files]


@pytest.mark.slow
def test_a_zarr_chunk_is_one_get_per_array_and_a_damaged_one_is_named(s3_requests, s3):
    """A store opens with three GETs (COMMITTED, the manifest, the root group's zarr.json: no
    HEAD); a chunk's first read fetches its four arrays' data objects, one GET each and nothing
    else (no metadata, no HEAD), and a damaged object fails its CRC32C, naming the array."""
    store = f"s3://{BUCKET}/reads.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "10").exit_code == 0
    with s3_requests() as requests:
        opened = open_store(store)
        assert opened.reader.manifest_copy  # the root group opened (its manifest copy)
        assert [(method, key.split("/")[-1]) for method, key in requests] == [
            ("GET", "COMMITTED"),
            ("GET", "manifest.json"),
            ("GET", "zarr.json"),
        ]
        requests.clear()
        opened.read_chunk(1)
    assert [method for method, _ in requests] == ["GET"] * 4
    (attempt,) = _attempts(s3, "reads.zarr")
    key = f"{BUCKET}/reads.zarr/{attempt}/chunks/000002/indices/c/0"
    raw = bytearray(s3.cat_file(key))
    raw[len(raw) // 2] ^= 0x01
    s3.pipe_file(key, bytes(raw))
    with pytest.raises(StoreError, match="chunk 2 .*is damaged: chunks/000002/indices fails its CRC32C"):
        open_store(store).read_chunk(2)


@pytest.mark.slow
def test_verify_on_s3_checks_the_zarr_metadata_that_zarr_python_reads(s3):
    """On S3 `inspect --verify` checks every zarr.json as on local disk: an intact store verifies
    and zarr-python (through fsspec) reads its arrays as streamfit does; a chunk array's
    zarr.json saying another shape, which streamfit's reader never reads, is named by its URL
    under the committed attempt, with the fix."""
    import zarr

    store = f"s3://{BUCKET}/meta.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "40").exit_code == 0
    assert open_store(store).verify() == []
    (attempt,) = _attempts(s3, "meta.zarr")
    group = zarr.open_group(f"{store}/{attempt}", mode="r", storage_options={"skip_instance_cache": True})
    chunk = open_store(store).read_chunk(1)
    assert np.array_equal(group["chunks/000001/indices"][:], chunk.X.indices)
    assert np.array_equal(group["chunks/000001/y"][:], chunk.labels)
    key = f"{BUCKET}/meta.zarr/{attempt}/chunks/000001/indices/zarr.json"
    document = json.loads(s3.cat_file(key))
    s3.pipe_file(key, json.dumps(document | {"shape": [document["shape"][0] + 1]}).encode())
    result = _cli("inspect", "--verify", store)
    assert result.exit_code == 1
    [line] = [line for line in result.stderr.splitlines() if line.startswith("damaged:")]
    assert f"{store}/{attempt}/chunks/000001/indices/zarr.json says shape [" in line
    assert line.endswith("re-ingest the store")


@pytest.fixture(scope="module")
def cluster(s3):
    """A two-worker Dask cluster on loopback, started after `s3` so that its workers have the
    AWS_* variables that reach the S3 server (they share no files with the tests: a store and
    the parts they write go through S3)."""
    from distributed import LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=":0") as c:
        yield c


@pytest.mark.slow
def test_a_store_read_on_a_cluster_reads_its_commit_record_once(s3_requests, s3, cluster, tmp_path):
    """evaluate --scheduler of a store on S3 in 5 chunks: one GET of COMMITTED in all (the
    workers reopen the attempt the driver opened, not COMMITTED per task), the manifest and the
    root group's zarr.json once per process, each chunk's four arrays once, and not one HEAD or
    LIST. The counts of docs/benchmarks.md's "Requests of train, evaluate and predict"."""
    store = f"s3://{BUCKET}/counted.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "10").exit_code == 0
    from streamfit.store import store as store_module

    run = tmp_path / "run"  # the model on local disk: only the store's requests are counted
    assert _cli("train", store, *TRAIN, "--n-workers", "0", "--out", run).exit_code == 0
    store_module._open_cached.cache_clear()  # train opened it in this process: open it as a new driver would
    with s3_requests() as requests:
        result = _cli("evaluate", run, store, "--scheduler", cluster.scheduler_address)
    assert result.exit_code == 0, result.stderr
    assert "chunk_sums" in cluster.scheduler.task_prefixes  # the chunks were scored on the workers
    count = collections.Counter((method, key.split("/", 2)[-1]) for method, key in requests)
    opened = count["GET", "manifest.json"]  # the driver, and each worker that ran a task
    assert 2 <= opened <= 3 and count["GET", "zarr.json"] == opened - 1  # the driver reads no chunk
    chunk_gets = sum(n for (method, key), n in count.items() if method == "GET" and key.startswith("chunks/"))
    assert count["GET", "COMMITTED"] == 1 and chunk_gets == 5 * 4
    assert sum(count.values()) == 1 + opened + opened - 1 + chunk_gets, count  # nothing else: no HEAD, no LIST


@pytest.mark.slow
def test_predict_and_evaluate_on_a_cluster_give_the_in_process_bytes_and_numbers(s3, cluster, tmp_path, monkeypatch):
    """evaluate --scheduler: the same metrics as in process, bit for bit; predict --scheduler
    of a store on S3: the same bytes as in process, as one object and as parts (written to S3
    by the workers, listed with their digests in the manifest; Parquet parts: the in-process
    file's typed rows); raw JSONL on S3 with an id
    column, in several batches, to parts on S3: the same bytes; a predict that fails midway,
    in process or on the cluster, to one object or to parts, leaves nothing on S3."""

    import pyarrow as pa
    import pyarrow.parquet as pq

    from streamfit import predict

    address = cluster.scheduler_address
    store = f"s3://{BUCKET}/scored.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "10").exit_code == 0
    run = tmp_path / "run"
    assert _cli("train", store, *TRAIN, "--n-workers", "0", "--out", run).exit_code == 0

    here = _cli("evaluate", "--json", "--per-label", run, store)
    there = _cli("evaluate", "--json", "--per-label", "--scheduler", address, run, store)
    assert there.exit_code == 0 and json.loads(there.output) == json.loads(here.output)

    assert _cli("predict", run, store, "--out", tmp_path / "here.csv", "--top-k", "2").exit_code == 0
    here_csv = (tmp_path / "here.csv").read_bytes()
    real_write_new = storage.Location.write_new

    def write_new(location, data):  # in this process (the driver) only: the workers write the parts
        assert not location.name.startswith("part-"), f"the driver wrote {location}"
        real_write_new(location, data)

    monkeypatch.setattr(storage.Location, "write_new", write_new)
    for out, parts in (("one.csv", ()), ("parts.csv", ("--parts",))):
        result = _cli(
            "predict", run, store, "--out", f"s3://{BUCKET}/{out}", "--top-k", "2", *parts, "--scheduler", address
        )
        assert result.exit_code == 0, result.stderr
    assert {"chunk_sums", "score_piece"} <= set(cluster.scheduler.task_prefixes)  # scored on the workers
    assert s3.cat_file(f"{BUCKET}/one.csv") == here_csv
    assert _parts(s3, "parts.csv", [10] * 5) == here_csv  # the 50 rows of iris.svm, chunks of 10
    # Parquet parts on S3 hold the typed rows of the in-process file
    assert _cli("predict", run, store, "--out", tmp_path / "here.parquet", "--top-k", "2").exit_code == 0
    result = _cli(
        "predict", run, store, "--out", f"s3://{BUCKET}/p.parquet", "--top-k", "2", "--parts", "--scheduler", address
    )
    assert result.exit_code == 0, result.stderr
    files = storage.committed(storage.resolve(f"s3://{BUCKET}/p.parquet"))
    names = [p["name"] for p in json.loads(files.join("manifest.json").read_bytes())["parts"]]
    tables = [pq.read_table(io.BytesIO(files.join(name).read_bytes())) for name in names]
    assert pa.concat_tables(tables).equals(pq.read_table(tmp_path / "here.parquet"))

    # raw text with ids on S3, read by the driver and scored in batches of 7 records on the workers
    docs = tmp_path / "docs.jsonl"
    words = ["cat", "dog", "stock", "market", "bark", "rally"]
    docs.write_text(
        "".join(
            json.dumps({"text": f"{words[i % 6]} {words[(i * 5) % 6]}", "label": words[i % 6][:1], "doc": f"d{i}"})
            + "\n"
            for i in range(40)
        )
    )
    s3.put(str(docs), f"{BUCKET}/raw/docs.jsonl")
    assert (
        _cli("ingest", docs, "--out", tmp_path / "docs.zarr", "--n-features", "256", "--id-field", "doc").exit_code == 0
    )
    assert _cli("train", tmp_path / "docs.zarr", *TRAIN, "--n-workers", "0", "--out", tmp_path / "text").exit_code == 0
    monkeypatch.setattr(predict, "RAW_BATCH_ROWS", 7)
    assert _cli("predict", tmp_path / "text", docs, "--out", tmp_path / "raw-here.jsonl").exit_code == 0
    lines = (tmp_path / "raw-here.jsonl").read_bytes()
    assert [json.loads(line)["id"] for line in lines.splitlines()] == [f"d{i}" for i in range(40)]
    there = _cli(
        "predict", tmp_path / "text", f"s3://{BUCKET}/raw/docs.jsonl", "--out", f"s3://{BUCKET}/raw.jsonl", "--parts",
        "--scheduler", address,
    )  # fmt: skip
    assert there.exit_code == 0, there.stderr
    remote = _parts(s3, "raw.jsonl", [7] * 5 + [5])
    assert remote.replace(f"s3://{BUCKET}/raw/".encode(), b"") == lines.replace(f"{tmp_path}/".encode(), b"")

    # a bad record in the sixth batch, after five parts went to S3: the attempt is deleted, nothing committed
    monkeypatch.setattr(storage.Location, "write_new", real_write_new)
    with open(docs, "a") as f:
        f.write('{"text": \n')
    for out, how in (
        ("failed.jsonl", ()),
        ("failed-parts.jsonl", ("--parts",)),
        ("failed-there.jsonl", ("--parts", "--scheduler", address)),
    ):
        failed = _cli("predict", tmp_path / "text", docs, "--out", f"s3://{BUCKET}/{out}", *how)
        assert failed.exit_code == 2 and "docs.jsonl:41" in failed.stderr
        assert _attempts(s3, out) == [] and not s3.exists(f"{BUCKET}/{out}")  # _attempts drops s3fs's listings
        assert storage.committed(storage.resolve(f"s3://{BUCKET}/{out}")) is None


def _parts(s3, name: str, rows: list[int]) -> bytes:
    """The --parts output s3://BUCKET/NAME as one file (a CSV's header once), after checking that
    its manifest lists parts of `rows` rows with their SHA-256 digests."""
    import hashlib

    files = storage.committed(storage.resolve(f"s3://{BUCKET}/{name}"))
    manifest = json.loads(files.join("manifest.json").read_bytes())
    assert [p["rows"] for p in manifest["parts"]] == rows
    header = b""
    if name.endswith(".csv"):
        header = files.join(manifest["parts"][0]["name"]).read_bytes().splitlines(keepends=True)[0]
    body = b""
    for p in manifest["parts"]:
        data = files.join(p["name"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == p["sha256"] and data.startswith(header)
        body += data[len(header) :]
    return header + body


@pytest.mark.slow
def test_checkpoint_state_on_s3_is_listed_once_per_run_and_a_resume_sweeps_what_a_killed_run_left(
    short_leases, s3_requests, s3
):
    """train on S3, in process (fbpd, 6 iterations saved at every step, 5 chunks): each
    per-sample version is one PUT per chunk, with no listing per write or per save: state/ is
    listed once (the fresh run's sweep), each version once where it is deleted, and none where
    it is read (the process reads what it wrote from its cache: no GET, no LIST). Killed at its
    step-4 commit and resumed: the resume lists state/ once and each version it restores once
    (and reads those from S3), deletes the killed run's version 4 before it writes it again, and
    ends with the uninterrupted run's model."""
    store, run = f"s3://{BUCKET}/ck.zarr", f"s3://{BUCKET}/ck-run"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "10").exit_code == 0
    every = ["--checkpoint-interval", "0", "--n-workers", "0"]
    with s3_requests() as requests:
        assert _cli("train", store, *TRAIN, *every, "--out", run).exit_code == 0
    state = _state_requests(requests)
    written = [f"/dual/v00000{v}/" for v in range(1, 7)] + ["/anchor_dual/v000002/", "/anchor_dual/v000004/"]
    deleted = written[:4] + written[6:7]
    assert state == collections.Counter(
        {("PUT", f"{v}chunk"): 5 for v in written}
        | {("LIST", v): 1 for v in deleted}
        | {("HEAD", ""): 1, ("LIST", "/"): 3}  # state/*/v*, listed once: nothing there yet
    ), sorted(state.items())
    reference = load_model(run)._arrays()

    s3.rm(f"{BUCKET}/ck-run", recursive=True)
    _killed_at_commit("step-000004", "train", store, *TRAIN, *every, "--out", run)
    assert s3.find(f"{BUCKET}/ck-run/checkpoints/state/dual/v000004")  # the killed run's next version
    short_leases()  # the killed run's lease, stale
    with s3_requests() as requests:
        assert _cli("train", store, *TRAIN, *every, "--resume", "--out", run).exit_code == 0
    state = _state_requests(requests)
    lists = {key: n for (method, key), n in state.items() if method == "LIST"}
    assert lists == {
        "/": 1, "/dual/": 1, "/anchor_dual/": 1,  # state/*/v*, listed once
        "/dual/v000003/chunk-": 1, "/anchor_dual/v000002/chunk-": 1,  # the versions step 3 refers to
        "/dual/v000004/": 2,  # the killed run's, deleted before the resume writes it; then dropped as old
        "/dual/v000002/": 1, "/dual/v000003/": 1, "/anchor_dual/v000002/": 1,  # dropped as old
    }, sorted(state.items())  # fmt: skip
    assert {key: n for (method, key), n in state.items() if method == "PUT"} == {
        f"{v}chunk": 5 for v in ("/dual/v000004/", "/dual/v000005/", "/dual/v000006/", "/anchor_dual/v000004/")
    }
    ours = load_model(run)._arrays()
    assert ours.keys() == reference.keys() and all(np.array_equal(ours[k], reference[k]) for k in reference)


def _state_requests(requests: list[tuple[str, str]]) -> collections.Counter:
    """The requests under a run's checkpoints/state/, by method and key below it (a chunk's file: "chunk")."""
    return collections.Counter(
        (method, re.sub(r"chunk-\d+\.\w+\.npy", "chunk", key.split("/checkpoints/state")[1]))
        for method, key in requests
        if "/checkpoints/state" in key
    )
