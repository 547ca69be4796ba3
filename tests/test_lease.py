"""streamfit.lease: one writer at a time of a name behind a URL.

Against the real S3 API server of the `s3` fixture (moto on 127.0.0.1, s3fs as the client), with
real processes where the case is about processes (a writer SIGKILLed or stopped by SIGTERM, two
trains at once). The stale time is shortened through streamfit.lease.STALE_AFTER in this process
(the short_leases fixture), never waited out."""

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner

from streamfit import lease, storage
from streamfit.cli import main
from streamfit.errors import StreamfitError
from streamfit.model import load_model
from streamfit.store import StoreWriter, open_store

DATA = os.path.join(os.path.dirname(__file__), "data", "sources", "iris.svm")
BUCKET = "streamfit-test"  # the s3 fixture's bucket (tests/conftest.py)
TRAIN = ["--solver", "fbpd", "-p", "max_iter=12", "-p", "tol=0", "-p", "gap_tol=0", "--checkpoint-interval", "0"]
X = sp.csr_matrix(np.eye(12, dtype=np.float32))
Y = np.arange(12) % 3


def _refusal(url: str, what: str, pid: int) -> str:
    """The refusal of a second writer (of an S3 URL, or another scheme's), as a regular expression."""
    delete = "aws s3 rm " if url.startswith("s3://") else "delete "
    return (
        rf"{re.escape(url)}: another streamfit process is writing this {what} right now \(host \S+, pid {pid}, since "
        rf"\d{{4}}-\d\d-\d\d \d\d:\d\d:\d\d UTC, renewed \d+ s ago\); wait for it to finish\. If it is dead, the same "
        rf"command takes its lease over in \d+ s \(120 s after its last renewal\), or at once after: {delete}"
        rf"{re.escape(url)}/LEASE"
    )


def _cli(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)


def _writer(url: str, **kw) -> StoreWriter:
    w = StoreWriter(url, chunk_rows=5, **kw)
    w.write_rows(X, Y)
    return w


def _close(w: StoreWriter) -> None:
    w.close(n_features=X.shape[1], classes=["a", "b", "c"])


def test_a_second_store_writer_of_one_s3_url_is_refused_before_it_writes_naming_the_first(s3, s3_requests):
    """The first writer takes `NAME/LEASE` with one conditional PUT before it writes and deletes it
    with one DELETE once committed; the second, begun meanwhile, asks whether a store is there (a
    GET of COMMITTED, as before), is refused its lease (412) and names the holder after one HEAD:
    nothing of it is written. After the commit the name is free."""
    url = f"s3://{BUCKET}/leased.zarr"
    with s3_requests() as requests:
        first = _writer(url)
        with s3_requests() as second:
            with pytest.raises(StreamfitError, match=f"^{_refusal(url, 'store', os.getpid())}$"):
                StoreWriter(url, chunk_rows=5)
        _close(first)
    assert second == [("GET", "leased.zarr/COMMITTED"), ("PUT", "leased.zarr/LEASE"), ("HEAD", "leased.zarr/LEASE")]
    leases = [method for method, key in requests if key == "leased.zarr/LEASE"]
    assert leases == ["PUT", "PUT", "HEAD", "DELETE"]  # the first's PUT and DELETE around the second's two
    s3.invalidate_cache()
    assert not s3.exists(f"{BUCKET}/leased.zarr/LEASE") and open_store(url).verify() == []
    _close(_writer(url, overwrite=True))  # free again


def test_a_lease_is_renewed_with_one_conditional_put_per_period_and_released_with_one_delete(s3, monkeypatch):
    monkeypatch.setattr(lease, "RENEW_EVERY", 0.25)
    target = storage.resolve(f"s3://{BUCKET}/renewed")
    held = lease.take(target, "store")
    first = held.version
    time.sleep(1.2)
    renewed = json.loads(s3.cat_file(f"{BUCKET}/renewed/LEASE"))
    assert held.version != first and held.version == s3.info(f"{BUCKET}/renewed/LEASE", refresh=True)["ETag"]
    assert renewed["renewed"] > renewed["started"] and renewed["pid"] == os.getpid() and not held.lost
    held.check()  # asks nothing: renewed within STALE_AFTER / 2
    held.release()
    assert not s3.exists(f"{BUCKET}/renewed/LEASE")
    assert lease.take(target, "store").release() is None  # free again


# Holds a lease on the store argv[1] (a StoreWriter with one chunk written) and says so, then
# waits to be killed; with argv[2], as a process of the host of that name (another machine).
HOLDER = """
import socket, sys, time
import numpy as np, scipy.sparse as sp
from streamfit.store import StoreWriter
if len(sys.argv) > 2:
    socket.gethostname = lambda: sys.argv[2]
w = StoreWriter(sys.argv[1], chunk_rows=5)
w.write_rows(sp.csr_matrix(np.eye(12, dtype=np.float32)), np.arange(12) % 3)
print("holding", flush=True)
time.sleep(600)
"""


def _killed_holder(url: str, *host: str) -> subprocess.Popen:
    """A HOLDER of a lease on `url` (on `host`, a name, if given), SIGKILLed once it holds it."""
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, url, *host], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "holding\n"
    finally:
        holder.kill()
        holder.wait()
    return holder


def _taken_over(s3, url: str, caplog, warning: str) -> None:
    """A store written to `url` takes its lease over with the warning `warning` (a regular
    expression); it closes verified, its lease released."""
    with caplog.at_level(logging.WARNING, logger="streamfit.lease"):
        w = _writer(url)
    assert re.search(rf"{url}/LEASE: took over a lease {warning}", caplog.text), caplog.text
    _close(w)
    assert open_store(url).verify() == [] and not s3.exists(f"{url[len('s3://') :]}/LEASE")


def test_a_lease_left_by_a_writer_killed_on_this_host_is_taken_over_at_once(s3, caplog):
    """fix33: a writer SIGKILLed on this host leaves its lease; its process is gone, so the next
    writer here takes the lease over at once, where it waited for STALE_AFTER (120 s)."""
    url = f"s3://{BUCKET}/killed-here.zarr"
    holder = _killed_holder(url)
    _taken_over(
        s3, url, caplog, rf"whose writer's process is gone from this host \(host \S+, pid {holder.pid}, since .*\)"
    )


def test_a_lease_left_by_a_sigkilled_writer_refuses_until_it_is_stale_then_is_taken_over(s3, caplog, monkeypatch):
    """A writer killed on another host (its process cannot be looked at from here): refused, with
    the seconds to wait and the command that deletes the lease, until the lease is stale."""
    url = f"s3://{BUCKET}/killed-holder.zarr"
    holder = _killed_holder(url, "another-host")
    with pytest.raises(StreamfitError, match=f"^{_refusal(url, 'store', holder.pid)}$"):
        StoreWriter(url, chunk_rows=5)
    monkeypatch.setattr(lease, "STALE_AFTER", 1.0)
    time.sleep(2.2)  # the object store's clock counts whole seconds
    dead = rf"not renewed for \d+ s: its writer is taken to be dead \(host another-host, pid {holder.pid}, since .*\)"
    _taken_over(s3, url, caplog, dead)


def test_a_writer_whose_renewal_finds_its_lease_taken_over_commits_nothing(s3, monkeypatch):
    """A writer cut off from the object store for longer than STALE_AFTER (here: its renewals
    stopped) whose lease another writer took over: its next renewal is refused (If-Match on its
    own last ETag), so its commit is refused with one line naming the other writer, its attempt
    is deleted, and the other's lease and store stand."""
    url = f"s3://{BUCKET}/taken.zarr"
    monkeypatch.setattr(lease, "RENEW_EVERY", 3600.0)  # this writer's thread never gets to renew
    monkeypatch.setattr(lease, "STALE_AFTER", 1.0)
    cut_off = _writer(url)
    time.sleep(2.2)
    other = _writer(url)  # takes the stale lease over
    with pytest.raises(StreamfitError) as refused:
        _close(cut_off)  # its check renews first (the last renewal is older than STALE_AFTER / 2): refused
    assert re.fullmatch(
        rf"{url}: this process lost its lease to another writer \(host \S+, pid {os.getpid()}, since .* UTC\), which "
        r"took it over after 1 s without a renewal; nothing of this store was committed: check that no other "
        "writer is still writing it, then run this again",
        str(refused.value),
    ), refused.value
    s3.invalidate_cache()
    assert not s3.exists(f"{BUCKET}/taken.zarr/COMMITTED") and not s3.exists(cut_off.attempt.location.path)
    assert s3.exists(f"{BUCKET}/taken.zarr/LEASE")  # the other's, not deleted by the refused writer
    _close(other)
    assert open_store(url).verify() == [] and open_store(url).data.name == other.attempt.location.name
    assert not s3.exists(f"{BUCKET}/taken.zarr/LEASE")


def test_a_renewal_thread_that_finds_its_lease_replaced_marks_it_lost(s3, monkeypatch):
    """The daemon thread's renewal, refused because the object is another writer's now (written
    here as another host's takeover would write it), marks the lease lost: no commit under it."""
    monkeypatch.setattr(lease, "RENEW_EVERY", 0.2)
    target = storage.resolve(f"s3://{BUCKET}/replaced")
    held = lease.take(target, "model")
    bucket, key, _ = s3.split_path(f"{BUCKET}/replaced/LEASE")
    meta = {"host": "elsewhere", "pid": "4242", "started": str(time.time())}
    s3.call_s3("put_object", Bucket=bucket, Key=key, Body=b"{}", Metadata=meta)
    deadline = time.monotonic() + 10
    while not held.lost and time.monotonic() < deadline:
        time.sleep(0.05)
    attempt = storage.begin(target, what="model")
    attempt.location.join("a").write_new(b"late")
    with pytest.raises(StreamfitError, match=r"lost its lease to another writer \(host elsewhere, pid 4242, since "):
        attempt.commit()
    assert storage.committed(target) is None and not s3.exists(attempt.location.path)
    held.release()
    assert s3.exists(f"{BUCKET}/replaced/LEASE")  # the other's stays


def test_memory_urls_get_the_look_then_write_lease():
    """Not atomic (docs: two writers within one round trip can both take it), but a writer that
    comes later is refused as on S3, and a released lease frees the name."""
    url = "memory://leases/x.zarr"
    first = _writer(url)
    with pytest.raises(StreamfitError, match=f"^{_refusal(url, 'store', os.getpid())}$"):
        StoreWriter(url, chunk_rows=5)
    _close(first)
    _close(_writer(url, overwrite=True))


# `python -c SECOND_AT_STEP OUT ARGS…`: `streamfit train ARGS` which, at the commit of its first
# solver step (step-000001), runs `streamfit train ARGS --resume` in another process (a scheduler's
# retry while the first still runs) and writes that one's exit status and stderr to the file OUT.
SECOND_AT_STEP = """
import json, subprocess, sys
from streamfit import storage
from streamfit.cli import main
real, seen = storage.Attempt.commit, []
def commit(self):
    if self.target.name == "step-000001" and not seen:
        seen.append(True)
        done = subprocess.run(
            [sys.executable, "-m", "streamfit.cli", "-q", *sys.argv[2:], "--resume"], capture_output=True, text=True
        )
        open(sys.argv[1], "w").write(json.dumps([done.returncode, done.stderr]))
    real(self)
storage.Attempt.commit = commit
main(["-q", *sys.argv[2:]])
"""


@pytest.mark.slow
def test_a_second_train_of_one_s3_run_directory_is_refused_before_it_writes_and_the_first_completes(s3, tmp_path):
    store, run = f"s3://{BUCKET}/two-trains.zarr", f"s3://{BUCKET}/two-trains-run"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "30").exit_code == 0
    args = ["train", store, *TRAIN, "--n-workers", "0", "--out", run]
    first = subprocess.Popen(
        [sys.executable, "-c", SECOND_AT_STEP, tmp_path / "second.json", *args], stderr=subprocess.PIPE, text=True
    )
    _, stderr = first.communicate(timeout=600)
    assert first.returncode == 0, stderr
    code, second = json.loads((tmp_path / "second.json").read_text())
    assert code == 2 and re.fullmatch(f"error: {_refusal(run, 'run directory', first.pid)}", second.strip()), second
    assert not s3.exists(f"{BUCKET}/two-trains-run/LEASE")
    local = tmp_path / "run"
    assert _cli("train", store, *TRAIN, "--n-workers", "0", "--out", local).exit_code == 0
    ours, ref = load_model(run)._arrays(), load_model(str(local))._arrays()
    assert all(np.array_equal(ours[k], ref[k]) for k in ref)  # the first run, as if alone
    assert _cli("evaluate", run, store).exit_code == 0


def _latest_written(s3, run_key: str, proc: subprocess.Popen) -> None:
    """Wait until the train `proc` has written a checkpoint (its LATEST) under `run_key`."""
    deadline = time.monotonic() + 300
    while not s3.exists(f"{BUCKET}/{run_key}/checkpoints/LATEST"):
        assert proc.poll() is None and time.monotonic() < deadline, "the run ended before its first checkpoint"
        time.sleep(0.05)
        s3.invalidate_cache()


@pytest.mark.slow
def test_a_train_killed_on_s3_leaves_its_lease_and_a_resume_on_its_host_takes_it_over_at_once(s3, tmp_path, cli):
    """The SIGKILLed train's lease is there; `--resume` on the same host finds its process gone
    and takes the lease over at once (it was refused for 120 s before fix33), to the model of an
    uninterrupted run."""
    store, run = f"s3://{BUCKET}/killed-train.zarr", f"s3://{BUCKET}/killed-train-run"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "30").exit_code == 0
    args = ["train", store, *TRAIN, "--n-workers", "0", "--out", run]
    proc = subprocess.Popen(cli(*args), stderr=subprocess.DEVNULL)
    try:
        _latest_written(s3, "killed-train-run", proc)
    finally:
        proc.kill()
        proc.wait()
    assert proc.returncode == -signal.SIGKILL and s3.exists(f"{BUCKET}/killed-train-run/LEASE")
    assert _cli(*args, "--resume").exit_code == 0
    assert not s3.exists(f"{BUCKET}/killed-train-run/LEASE")
    assert _cli("train", store, *TRAIN, "--n-workers", "0", "--out", tmp_path / "run").exit_code == 0
    ours, ref = load_model(run)._arrays(), load_model(str(tmp_path / "run"))._arrays()
    assert all(np.array_equal(ours[k], ref[k]) for k in ref)


@pytest.mark.slow
def test_a_train_stopped_by_sigterm_on_s3_releases_its_lease_and_resumes_at_once(s3, tmp_path, cli):
    store, run = f"s3://{BUCKET}/stopped-train.zarr", f"s3://{BUCKET}/stopped-train-run"
    assert _cli("ingest", DATA, "--no-hash", "--out", store, "--chunk-rows", "30").exit_code == 0
    args = ["train", store, *TRAIN, "--n-workers", "0", "--out", run]
    proc = subprocess.Popen(cli(*args), stderr=subprocess.PIPE, text=True)
    _latest_written(s3, "stopped-train-run", proc)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert not s3.exists(f"{BUCKET}/stopped-train-run/LEASE")
    assert _cli(*args, "--resume").exit_code == 0


def test_a_second_predict_to_one_s3_output_is_refused_before_it_scores(s3, tmp_path):
    """predict's lease is `OUT.LEASE` (a one-file output holds no objects under its name), in both
    modes, so a one-file and a --parts predict of one output exclude each other too."""
    run = tmp_path / "run"
    store = tmp_path / "iris.zarr"
    assert _cli("ingest", DATA, "--no-hash", "--out", store).exit_code == 0
    assert _cli("train", store, "--solver", "bcd", "--n-workers", "0", "--out", run).exit_code == 0
    out = f"s3://{BUCKET}/pred.csv"
    held = lease.take(storage.resolve(out), "prediction output", key=storage.resolve(out + ".LEASE"))
    try:
        for parts in ([], ["--parts"]):
            refused = _cli("predict", run, store, "--out", out, *parts)
            assert (
                refused.exit_code == 2
                and "another streamfit process is writing this prediction output right now" in (refused.stderr)
            ), refused.stderr
            assert f"aws s3 rm {out}.LEASE" in refused.stderr
        assert not s3.exists(f"{BUCKET}/pred.csv")
    finally:
        held.release()
    assert _cli("predict", run, store, "--out", out).exit_code == 0
    assert not s3.exists(f"{BUCKET}/pred.csv.LEASE")
