"""A real Dask cluster on loopback (`dask scheduler` + two `dask worker` processes): training
through `--scheduler` gives the model of the embedded default, even when a worker dies."""

import os
import signal
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
from click.testing import CliRunner

from streamfit.cli import main
from streamfit.model import load_model

pytestmark = pytest.mark.slow  # a scheduler and workers in subprocesses: a minute or more a test


def _model_arrays(run_dir):
    return load_model(str(run_dir))._arrays()


PARAMS = ["-p", "generator=sequential", "-p", "block_size=2", "-p", "n_passes=2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def cluster():
    """Yields (address, worker processes); tears everything down afterwards."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_worker",
                address,
                "--nthreads",
                "1",
                "--no-dashboard",
                "--host",
                "127.0.0.1",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(2)
    ]
    procs += workers
    try:
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address, workers
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(timeout=20)
            except subprocess.TimeoutExpired:
                p.kill()


def test_cluster_equals_embedded_and_survives_a_dead_worker(digits_cli_store, cli, tmp_path, cluster):
    store = digits_cli_store
    address, workers = cluster
    subprocess.run(
        cli("train", store, "--solver", "stagewise", *PARAMS, "--n-workers", "0", "--out", tmp_path / "local"),
        check=True,
        capture_output=True,
    )
    ref = _model_arrays(tmp_path / "local")
    subprocess.run(
        cli("train", store, "--solver", "stagewise", *PARAMS, "--scheduler", address, "--out", tmp_path / "cluster"),
        check=True,
        capture_output=True,
    )
    got = _model_arrays(tmp_path / "cluster")
    assert all(np.array_equal(ref[k], got[k]) for k in ref)
    # kill one worker while a run is in flight: Dask reschedules its (idempotent) chunk tasks
    run = subprocess.Popen(
        cli("train", store, "--solver", "stagewise", *PARAMS, "--scheduler", address, "--out", tmp_path / "killed"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    time.sleep(4.0)
    assert run.poll() is None, "the run ended before the worker was killed"
    os.kill(workers[0].pid, signal.SIGKILL)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    got = _model_arrays(tmp_path / "killed")
    assert all(np.array_equal(ref[k], got[k]) for k in ref)


OTHER_SOLVERS = {  # stagewise is above; small runs that still use every engine call of the solver
    "bcd": ["-p", "mode=chunks", "-p", "group_size=16", "-p", "max_iter=2"],
    "fbpd": ["-p", "max_iter=25", "-p", "tol=0", "-p", "gap_tol=0"],
    "multiboost": ["-p", "max_iter=3"],
    "ppdsparse": ["-p", "group_size=3", "-p", "tol=1e-3"],
}


def test_every_solver_on_the_cluster_equals_in_process(digits_cli_store, tmp_path, cluster):
    """`streamfit train` run in this process (CliRunner: no Python start and imports per run; the
    workers are the cluster's own processes)."""
    address, _ = cluster
    for solver, params in OTHER_SOLVERS.items():
        for name, engine in (("local", ["--n-workers", "0"]), ("cluster", ["--scheduler", address])):
            args = ["train", digits_cli_store, "--solver", solver, *params, *engine, "--out", tmp_path / solver / name]
            result = CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)
            assert result.exit_code == 0, (solver, name, result.output)
        ref, got = _model_arrays(tmp_path / solver / "local"), _model_arrays(tmp_path / solver / "cluster")
        assert ref.keys() == got.keys(), solver
        assert all(np.array_equal(ref[k], got[k]) for k in ref), solver
