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
from sklearn.datasets import dump_svmlight_file, load_digits

from streamfit.model import load_model

PARAMS = ["-p", "generator=sequential", "-p", "block_size=2", "-p", "n_passes=2"]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _cli(*args):
    return [sys.executable, "-m", "streamfit.cli", "-q", *map(str, args)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    d = tmp_path_factory.mktemp("cluster")
    X, y = load_digits(return_X_y=True)
    dump_svmlight_file(X, y, str(d / "digits.svm"), zero_based=False)
    subprocess.run(_cli("ingest", d / "digits.svm", "--no-hash", "--out", d / "s.zarr", "--chunk-rows", "200"),
                   check=True, capture_output=True)
    return d / "s.zarr"


@pytest.fixture
def cluster():
    """Yields (address, worker processes); tears everything down afterwards."""
    from distributed import Client

    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_scheduler", "--host", "127.0.0.1",
                               "--port", str(port), "--no-dashboard"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL)]
    workers = [subprocess.Popen([sys.executable, "-m", "distributed.cli.dask_worker", address, "--nthreads", "1",
                                 "--no-dashboard", "--host", "127.0.0.1"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL) for _ in range(2)]
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


def _weights(run_dir):
    return load_model(str(run_dir))._arrays()


def test_cluster_equals_embedded_and_survives_a_dead_worker(store, tmp_path, cluster):
    address, workers = cluster
    subprocess.run(_cli("train", store, "--solver", "stagewise", *PARAMS, "--n-workers", "0", "--out",
                        tmp_path / "local"), check=True, capture_output=True)
    ref = _weights(tmp_path / "local")
    subprocess.run(_cli("train", store, "--solver", "stagewise", *PARAMS, "--scheduler", address, "--out",
                        tmp_path / "cluster"), check=True, capture_output=True)
    got = _weights(tmp_path / "cluster")
    assert all(np.array_equal(ref[k], got[k]) for k in ref)
    # kill one worker while a run is in flight: Dask reschedules its (idempotent) chunk tasks
    run = subprocess.Popen(_cli("train", store, "--solver", "stagewise", *PARAMS, "--scheduler", address, "--out",
                                tmp_path / "killed"), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    time.sleep(4.0)
    assert run.poll() is None, "the run ended before the worker was killed"
    os.kill(workers[0].pid, signal.SIGKILL)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    got = _weights(tmp_path / "killed")
    assert all(np.array_equal(ref[k], got[k]) for k in ref)
