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
    kills = 0
    for attempt in range(4):
        proc = subprocess.Popen(cli(*train, "--out", tmp_path / "run", "--resume"),
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 0.6) * duration)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    done = subprocess.run(cli(*train, "--out", tmp_path / "run", "--resume"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert kills >= 2, "kills did not land: the run finished too fast to test resume"
    print(f"{solver}: {kills} SIGKILLs, then resumed")
    ref, got = _arrays(tmp_path / "ref"), _arrays(tmp_path / "run")
    assert ref.keys() == got.keys()
    for key in ref:
        assert np.array_equal(ref[key], got[key]), key
