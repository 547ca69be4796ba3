"""A training run killed with SIGKILL at random moments and resumed ends with the model of
an uninterrupted run, bitwise."""

import os
import signal
import subprocess
import time

import numpy as np
import pytest

from streamfit.model import load_model


def _arrays(run_dir):
    m = load_model(str(run_dir))
    return {k: v for k, v in m._arrays().items()}


SOLVER_ARGS = {
    "stagewise": ["-p", "generator=sequential", "-p", "block_size=6", "-p", "n_passes=2", "-p", "link=softmax",
                  "-p", "max_iter=3"],
    "bcd": ["-p", "mode=chunks", "-p", "group_size=8", "-p", "max_iter=25", "-p", "tol=1e-9"],
    "fbpd": ["-p", "max_iter=400", "-p", "tol=0"],
    "ppdsparse": ["-p", "group_size=1", "-p", "tol=1e-4", "-p", "delta=null"],
}


@pytest.mark.parametrize("solver", sorted(SOLVER_ARGS))
def test_sigkill_then_resume_gives_identical_model(digits_cli_store, cli, tmp_path, solver):
    train = ["train", digits_cli_store, "--solver", solver, *SOLVER_ARGS[solver], "--n-workers", "0"]
    started = time.perf_counter()
    subprocess.run(cli(*train, "--out", tmp_path / "ref"), check=True, capture_output=True)
    duration = time.perf_counter() - started
    rng = np.random.default_rng(7)
    ref = _arrays(tmp_path / "ref")
    kills = chains = 0
    for _ in range(8):  # chains of killed runs, each resumed to the end and compared
        run = tmp_path / f"run{chains}"
        latest = run / "checkpoints" / "LATEST"
        before = _identity(latest)
        proc = subprocess.Popen(cli(*train, "--out", run, "--resume"), stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL)
        while proc.poll() is None and _identity(latest) == before:  # until this run has saved a step
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.15) * duration)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        if kills >= 2 or (run / "model").exists():  # enough kills, or the run got to its end
            done = subprocess.run(cli(*train, "--out", run, "--resume"), check=False, capture_output=True, text=True)
            assert done.returncode == 0, done.stderr
            got = _arrays(run)
            assert ref.keys() == got.keys()
            for key in ref:
                assert np.array_equal(ref[key], got[key]), key
            chains += 1
            if kills >= 2:
                break
    assert kills >= 2, "kills did not land: the run finished too fast to test resume"
    print(f"{solver}: {kills} SIGKILLs in {chains} resumed runs, each identical")


def _write_libsvm(path, n_rows=40000, n_features=5000, seed=0):
    """About 8 MB of random sparse LIBSVM rows (7 classes): slow enough to kill mid-ingest."""
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


def _identity(path):
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return None
    return st.st_ino, st.st_ctime_ns


def test_ingest_sigkill_then_rerun_gives_identical_store(cli, tmp_path):
    src = tmp_path / "gen.svm"
    _write_libsvm(src)
    ingest = ["ingest", src, "--no-hash", "--chunk-rows", "500", "--batch-size", "2000"]
    started = time.perf_counter()
    subprocess.run(cli(*ingest, "--out", tmp_path / "ref.zarr"), check=True, capture_output=True)
    duration = time.perf_counter() - started
    reference = _store_content(tmp_path / "ref.zarr")
    out, partial = tmp_path / "out.zarr", tmp_path / "out.zarr.partial"
    rng = np.random.default_rng(11)
    kills = left_partial = 0
    for _ in range(4):
        dead = _identity(partial)  # a dead run's .partial, until this run replaces it
        proc = subprocess.Popen(cli(*ingest, "--out", out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        started = time.perf_counter()
        while proc.poll() is None and _identity(partial) in (None, dead):  # Python start-up: nothing written
            time.sleep(0.01)
        time.sleep(rng.uniform(0.0, 0.8) * max(duration - (time.perf_counter() - started), 0.1))
        if proc.poll() is None:
            _assert_half_never_opens(out, reference)  # while it writes
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
        if (out / "manifest.json").exists():
            break  # it finished (or was killed after the rename): a complete store
        _assert_half_never_opens(out, reference)  # after the kill
        if partial.exists():
            left_partial += 1
            _assert_half_never_opens(partial, reference)  # complete or not, a .partial never opens
    assert kills >= 2 and left_partial >= 1, f"{kills} kills, {left_partial} left a .partial: the ingest ran too fast"
    if not (out / "manifest.json").exists():
        done = subprocess.run(cli(*ingest, "--out", out), check=False, capture_output=True, text=True)  # no clean-up
        assert done.returncode == 0, done.stderr
    assert not partial.exists()
    assert len(reference[0]["chunks"]) == 80
    _assert_same_store(out, reference)


def test_a_live_writer_is_not_clobbered_and_a_dead_ones_partial_is_replaced(tmp_path, digits):
    from streamfit.errors import StoreError
    from streamfit.store import StoreWriter, open_store

    X, y, classes = digits
    path = str(tmp_path / "s.zarr")
    live = StoreWriter(path)  # holds a lock on s.zarr.partial
    with pytest.raises(StoreError, match=r"s\.zarr\.partial: another streamfit ingest is writing"):
        StoreWriter(path, overwrite=True)
    live.write_rows(X, y)
    live.close(n_features=X.shape[1], classes=classes)
    assert open_store(path).n_rows == X.shape[0]
    dead = tmp_path / "t.zarr.partial"  # what a killed writer leaves: no lock held
    (dead / "X").mkdir(parents=True)
    (dead / "manifest.json").write_text("{}")
    w = StoreWriter(str(tmp_path / "t.zarr"))
    assert not (dead / "manifest.json").exists()
    w.write_rows(X[:10], y[:10])
    w.close(n_features=X.shape[1], classes=classes)
    assert open_store(str(tmp_path / "t.zarr")).n_rows == 10
