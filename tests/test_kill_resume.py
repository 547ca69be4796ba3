"""A training run killed with SIGKILL at chosen events (right after the k-th checkpoint, in the
middle of a step with its per-chunk state half written) and resumed ends with the model of an
uninterrupted run, bitwise. Kills land on files the run writes: an ingest's kill is polled for
(each wait bounded, failing with the event that did not come); a training run kills itself at
the event (`KILLED_AT`), so that no scheduling of this process decides where the kill lands."""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from streamfit.model import load_model

EVENT_TIMEOUT_S = 300  # a generous bound for a run on a loaded 2-core machine
POLL_S = 0.005


def _arrays(run_dir):
    m = load_model(str(run_dir))
    return {k: v for k, v in m._arrays().items()}


def _latest_step(run):
    """The step checkpoints/LATEST names, None before the first checkpoint."""
    try:
        return json.loads((run / "checkpoints" / "LATEST").read_text())["step"]
    except FileNotFoundError:
        return None


def _wait_for(proc, event, description):
    """Poll until event() is true while proc runs; fail clearly if it ends or the bound passes."""
    deadline = time.monotonic() + EVENT_TIMEOUT_S
    while not event():
        if proc.poll() is not None:
            pytest.fail(f"the run exited (status {proc.returncode}) before {description}")
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            pytest.fail(f"no {description} within {EVENT_TIMEOUT_S} s")
        time.sleep(POLL_S)


# `python -c KILLED_AT STEP EVENT ARGS...`: streamfit ARGS that SIGKILLs itself once checkpoints/LATEST
# names STEP or later: at once (EVENT "checkpoint"), or at its next write of a state file (EVENT
# "state": in the step after that checkpoint, its per-sample state half written).
KILLED_AT = """
import json, os, signal, sys
from streamfit import storage
from streamfit.cli import main
after, event = int(sys.argv[1]), sys.argv[2]
write, reached = storage.Location.write_bytes, []
def write_bytes(self, data, **kw):
    write(self, data, **kw)
    name = os.path.basename(self.path)
    if name == "LATEST" and json.loads(data)["step"] >= after:
        reached.append(True)
        if event == "checkpoint":
            os.kill(os.getpid(), signal.SIGKILL)
    elif event == "state" and reached and os.sep + "state" + os.sep in self.path:
        os.kill(os.getpid(), signal.SIGKILL)
storage.Location.write_bytes = write_bytes
main(sys.argv[3:], prog_name="streamfit")
"""


def _killed_at(step, event, args, description):
    """Runs `streamfit -q ARGS` until it kills itself at `event` after checkpoint `step`."""
    argv = [sys.executable, "-c", KILLED_AT, str(step), event, "-q", *map(str, args)]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=EVENT_TIMEOUT_S)
    assert done.returncode == -signal.SIGKILL, (
        f"the run ended ({done.returncode}) before the kill {description}: {done.stderr}"
    )


def _sigkill(proc, description):
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL, f"the run had exited ({proc.returncode}) before the kill {description}"


SOLVER_ARGS = {
    "stagewise": [
        "-p",
        "generator=sequential",
        "-p",
        "block_size=6",
        "-p",
        "n_passes=2",
        "-p",
        "link=softmax",
        "-p",
        "max_iter=3",
    ],
    "bcd": ["-p", "mode=chunks", "-p", "group_size=8", "-p", "max_iter=6", "-p", "tol=1e-9"],  # 8 steps a checkpoint
    "fbpd": ["-p", "max_iter=60", "-p", "tol=0", "-p", "gap_tol=0"],
    "multiboost": ["-p", "max_iter=9"],  # restarts at iterations 3, 5, 8, ..., 73, 114
    # one thread: every step saved (on more, a save waits while finished groups do, so where the saves
    # fall depends on the threads' timing, and a run may save no step between k2 and its end)
    "ppdsparse": ["-p", "group_size=1", "-p", "tol=1e-4", "-p", "delta=null", "-p", "threads=1"],
}


@pytest.mark.slow
@pytest.mark.parametrize("solver", sorted(SOLVER_ARGS))
def test_sigkill_then_resume_gives_identical_model(digits_cli_store, cli, tmp_path, solver):
    _kill_twice_then_resume(
        cli, tmp_path, solver, ["train", digits_cli_store, "--solver", solver, *SOLVER_ARGS[solver], "--n-workers", "0"]
    )


@pytest.mark.slow
def test_regression_sigkill_then_resume_gives_identical_model(cli, tmp_path):
    """The same kills on stagewise regression (real-valued targets, two outputs, identity link)."""

    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 12))
    Y = X @ rng.normal(size=(12, 2)) + 0.1 * rng.normal(size=(300, 2))
    with open(tmp_path / "r.svm", "w") as f:
        for x, y in zip(X, Y):
            f.write(
                f"{float(y[0])!r},{float(y[1])!r} "
                + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x.tolist()))
                + "\n"
            )
    store = tmp_path / "r.zarr"
    ingest = ["ingest", tmp_path / "r.svm", "--no-hash", "--target", "numeric", "--chunk-rows", "100", "--out", store]
    subprocess.run(cli(*ingest), check=True, capture_output=True)
    args = ["-p", "generator=gradient", "-p", "block_size=2", "-p", "n_passes=2", "-p", "calibration=predictions"]
    _kill_twice_then_resume(
        cli, tmp_path, "stagewise", ["train", store, "--solver", "stagewise", *args, "--n-workers", "0"]
    )


@pytest.mark.slow
def test_wide_regression_sigkill_then_resume_gives_identical_model(cli, tmp_path):
    """stagewise's exact wide fit (real-valued targets, more columns than rows, lam None: one
    step) killed right after init's checkpoint and resumed: the model of an uninterrupted run."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(120, 300)) * (rng.random((120, 300)) < 0.2)
    y = X @ rng.normal(size=300) + rng.normal(size=120)
    with open(tmp_path / "w.svm", "w") as f:
        for x, t in zip(X, y):
            f.write(f"{float(t)!r} " + " ".join(f"{j + 1}:{v!r}" for j, v in enumerate(x.tolist()) if v) + "\n")
    store = tmp_path / "w.zarr"
    ingest = ["ingest", tmp_path / "w.svm", "--no-hash", "--target", "numeric", "--chunk-rows", "50", "--out", store]
    subprocess.run(cli(*ingest), check=True, capture_output=True)
    train = ["train", store, "--solver", "stagewise", "--n-workers", "0", "--checkpoint-interval", "0"]
    subprocess.run(cli(*train, "--out", tmp_path / "ref"), check=True, capture_output=True)
    ref = _arrays(tmp_path / "ref")
    assert load_model(str(tmp_path / "ref")).info["stages"] == 1  # the exact fit, not the stages
    run = tmp_path / "run"
    resume = [*train, "--out", run, "--resume"]
    _killed_at(0, "checkpoint", resume, "after init's checkpoint")
    assert _latest_step(run) == 0
    _resume_to_the_end(cli, resume, run, ref)


@pytest.mark.slow
def test_wide_regression_above_4000_rows_sigkill_then_resume_gives_identical_model(cli, tmp_path):
    """stagewise's wide fit above DUAL_N_MAX rows (streamfit.solvers.stagewise_cg: alpha by a
    held-out fifth, conjugate gradients, one pass a step) killed right after a checkpoint in its
    walk and again in its refit, then resumed: the model of an uninterrupted run, bitwise."""
    import scipy.sparse as sp

    rng = np.random.default_rng(2)
    X = sp.random(4100, 3000, density=0.005, format="csr", random_state=rng, data_rvs=rng.standard_normal)
    y = X @ rng.normal(size=3000) + 0.5 * rng.normal(size=4100)
    with open(tmp_path / "w.svm", "w") as f:
        for i, t in enumerate(y):
            row = X[i]
            f.write(
                f"{float(t)!r} " + " ".join(f"{j + 1}:{v!r}" for j, v in zip(row.indices, row.data.tolist())) + "\n"
            )
    store = tmp_path / "w.zarr"
    ingest = ["ingest", tmp_path / "w.svm", "--no-hash", "--target", "numeric", "--chunk-rows", "1000", "--out", store]
    subprocess.run(cli(*ingest), check=True, capture_output=True)
    train = ["train", store, "--solver", "stagewise", "--n-workers", "0"]
    _kill_twice_then_resume(cli, tmp_path, "stagewise", train, event="checkpoint", steps_left=2)
    info = load_model(str(tmp_path / "ref")).info
    assert info["generator"] == "ridge_cg" and info["cg_iterations"][-1] > 2  # the second kill in the refit


def _resume_to_the_end(cli, resume, run, ref):
    """The resumed run ends normally, with the model arrays `ref` of an uninterrupted run, bitwise."""
    done = subprocess.run(cli(*resume), check=False, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    got = _arrays(run)
    assert ref.keys() == got.keys()
    for key in ref:
        assert np.array_equal(ref[key], got[key]), key


def _kill_twice_then_resume(cli, tmp_path, solver, train, event="state", steps_left=None):
    """Run 1 is killed right after it saves step k1 (about a third of the steps); its resume
    is killed in step k2 + 1 (about two thirds, or `steps_left` before the end), as soon as that
    step has written a state file newer than checkpoint k2 (`event` "checkpoint": right after
    checkpoint k2, for a solver that writes no per-sample state); the second resume runs to the end. The model equals an
    uninterrupted run's, bitwise. Every due step is saved (--checkpoint-interval 0), so that the
    runs reach checkpoints k1 and k2 (tests/solvers/test_driver.py kills under the default policy)."""
    train = [*train, "--checkpoint-interval", "0"]
    subprocess.run(cli(*train, "--out", tmp_path / "ref"), check=True, capture_output=True)
    ref = _arrays(tmp_path / "ref")
    n_steps = _latest_step(tmp_path / "ref")
    assert n_steps >= 6, f"{solver}: {n_steps} checkpointed steps are too few to kill twice before the end"
    k1, k2 = n_steps // 3, 2 * n_steps // 3 if steps_left is None else n_steps - steps_left
    run = tmp_path / "run"
    resume = [*train, "--out", run, "--resume"]

    _killed_at(k1, "checkpoint", resume, f"after checkpoint {k1}")
    assert k1 <= _latest_step(run) < n_steps

    _killed_at(k2, event, resume, f"at the {event} after checkpoint {k2}")
    assert k2 <= _latest_step(run) < n_steps

    _resume_to_the_end(cli, resume, run, ref)


def _write_libsvm(path, n_rows, n_features=5000, seed=0):
    """Random sparse LIBSVM rows (7 classes, about 200 bytes a row)."""
    import scipy.sparse as sp
    from sklearn.datasets import dump_svmlight_file

    rng = np.random.default_rng(seed)
    X = sp.random(n_rows, n_features, density=0.0035, format="csr", random_state=rng, dtype=np.float64)
    dump_svmlight_file(X, np.arange(n_rows) % 7, str(path), zero_based=False)


def _store_content(path):
    """(manifest as a dict, X, labels) of a store: what two equal ingests must share."""
    import json

    from streamfit.store import open_store

    store = open_store(str(path))
    assert store.verify() == []
    with open(os.path.join(store.path, "manifest.json")) as f:
        manifest = json.load(f)
    X, y = store.to_scipy()
    return manifest, X, y


def _assert_same_store(path, reference):
    manifest, X, y = _store_content(path)
    ref_manifest, ref_X, ref_y = reference
    assert manifest == ref_manifest  # chunk digests, counts, shape, classes
    assert (X != ref_X).nnz == 0 and np.array_equal(X.indptr, ref_X.indptr) and np.array_equal(y, ref_y)


def _assert_half_never_opens(path, reference):
    """`path` does not open as a store, or opens as the complete one (the run just renamed it)."""
    from streamfit.errors import StoreError
    from streamfit.store import open_store

    try:
        open_store(str(path))
    except StoreError as e:
        assert "interrupted ingest" in str(e) or "no such store" in str(e), e
    else:
        assert not str(path).endswith(".partial")
        _assert_same_store(path, reference)


def _written_chunks(partial):
    """How many chunks a store being written holds: a folder chunks/<id> per chunk (its labels
    written last: a chunk being written is not counted)."""
    try:
        return sum((partial / "chunks" / name / "y" / "c" / "0").exists() for name in os.listdir(partial / "chunks"))
    except FileNotFoundError:
        return 0


@pytest.mark.slow
def test_ingest_sigkill_then_rerun_gives_identical_store(cli, tmp_path):
    """The ingest is killed once 20 of its 80 chunks are written, its rerun (which replaces the
    dead run's .partial) once 60 are; neither leaves a store that opens, and a third run writes
    the store of an uninterrupted ingest."""
    src = tmp_path / "gen.svm"
    _write_libsvm(src, n_rows=16000)
    ingest = ["ingest", src, "--no-hash", "--chunk-rows", "200", "--batch-size", "2000"]
    subprocess.run(cli(*ingest, "--out", tmp_path / "ref.zarr"), check=True, capture_output=True)
    reference = _store_content(tmp_path / "ref.zarr")
    assert len(reference[0]["chunks"]) == 80
    out, partial = tmp_path / "out.zarr", tmp_path / "out.zarr.partial"
    for n_chunks in (20, 60):  # the second run must get past what the first left to count as its own
        proc = subprocess.Popen(cli(*ingest, "--out", out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        _wait_for(proc, lambda n_chunks=n_chunks: _written_chunks(partial) >= n_chunks, f"chunk {n_chunks} written")
        _assert_half_never_opens(out, reference)  # while it writes
        _sigkill(proc, f"after chunk {n_chunks}")
        assert not out.exists() and _written_chunks(partial) < 80
        _assert_half_never_opens(out, reference)  # after the kill
        _assert_half_never_opens(partial, reference)  # a .partial never opens
    done = subprocess.run(cli(*ingest, "--out", out), check=False, capture_output=True, text=True)  # no clean-up
    assert done.returncode == 0, done.stderr
    assert not partial.exists()
    _assert_same_store(out, reference)


def test_a_live_writer_is_not_clobbered_and_a_dead_ones_partial_is_replaced(tmp_path, digits):
    from streamfit.errors import StoreError
    from streamfit.store import StoreWriter, open_store

    X, y, classes = digits
    path = str(tmp_path / "s.zarr")
    live = StoreWriter(path)  # holds a lock on s.zarr.partial
    with pytest.raises(
        StoreError,
        match=r"s\.zarr: another streamfit ingest is writing this store right now \(.*s\.zarr\.partial is locked\)",
    ):
        StoreWriter(path, overwrite=True)
    stage = str(tmp_path / "u.zarr.pass1.partial")  # ingest's pass-1 stage: the message names the store, u.zarr
    held = StoreWriter(stage, scratch=True)
    with pytest.raises(
        StoreError, match=r"u\.zarr: another streamfit ingest .*u\.zarr\.pass1\.partial\.partial is locked"
    ):
        StoreWriter(stage, scratch=True)
    held.discard()
    live.write_rows(X, y)
    live.close(n_features=X.shape[1], classes=classes)
    assert open_store(path).n_rows == X.shape[0]
    dead = tmp_path / "t.zarr.partial"  # what a killed writer leaves: no lock held
    (dead / "chunks").mkdir(parents=True)
    (dead / "manifest.json").write_text("{}")
    w = StoreWriter(str(tmp_path / "t.zarr"))
    assert not (dead / "manifest.json").exists()
    w.write_rows(X[:10], y[:10])
    w.close(n_features=X.shape[1], classes=classes)
    assert open_store(str(tmp_path / "t.zarr")).n_rows == 10
