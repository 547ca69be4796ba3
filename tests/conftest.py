"""Shared fixtures: small real data (scikit-learn's digits ships with scikit-learn) and stores."""

import contextlib
import functools
import logging
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse

import numpy as np
import pytest
import scipy.sparse as sp

BUCKET = "streamfit-test"  # the s3 fixture's bucket
ACCESS_KEY, SECRET_KEY = "AKIDSTREAMFITTEST", "s3cr3t-streamfit-test-key"


@pytest.fixture(autouse=True)
def _sigint_left_as_found():
    """Every test leaves this process's SIGINT handler as it found it, else it fails (and the
    handler is put back). Processes inherit an ignored SIGINT across exec: a test that imported
    streamfit.worker_signals (made for the embedded cluster's forkserver) left the pytest worker
    ignoring Ctrl-C, and with it every process it started later, so the Ctrl-C tests that ran
    after it on the same xdist worker waited out their timeouts (session 27: they failed in some
    full-suite runs only, by the order xdist gave the tests)."""
    before = signal.getsignal(signal.SIGINT)
    yield
    after = signal.getsignal(signal.SIGINT)
    if after != before:
        signal.signal(signal.SIGINT, before)
        pytest.fail(f"the test changed this process's SIGINT handler from {before!r} to {after!r}")


def _terminal_signals_at_their_defaults() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGHUP, signal.SIG_DFL)


@pytest.fixture(scope="session")
def terminal_job():
    """subprocess.Popen's options for a command that a test stops as a terminal's Ctrl-C or its
    closing does: a process group of its own (the test signals the group) with SIGINT and SIGHUP
    at their defaults, as a shell gives its foreground job, whatever this process inherited (a
    test suite started as a background job of a non-interactive shell ignores SIGINT, one under
    nohup SIGHUP, and so would the command)."""
    return {"start_new_session": True, "preexec_fn": _terminal_signals_at_their_defaults}


@pytest.fixture(scope="session")
def digits():
    """(X csr float32, y int32 ids, classes) of the 1797 8×8 digit images."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return sp.csr_matrix(X.astype(np.float32)), y.astype(np.int32), [str(c) for c in range(10)]


@pytest.fixture
def write_store(tmp_path):
    """write_store(X, labels, classes, chunk_rows=..., backend=...) -> path of a new store."""
    from streamfit.store import StoreWriter

    counter = iter(range(1000))

    def make(X, labels, classes, *, chunk_rows=500, backend="zarr", batch=137):
        path = tmp_path / f"store{next(counter)}.{backend}"
        w = StoreWriter(str(path), backend=backend, multilabel=sp.issparse(labels), chunk_rows=chunk_rows)
        for lo in range(0, X.shape[0], batch):
            w.write_rows(X[lo : lo + batch], labels[lo : lo + batch])
        w.close(n_features=X.shape[1], classes=classes)
        return str(path)

    return make


@pytest.fixture(scope="session")
def check_class_rows():
    """check_class_rows(path): assert that the store's manifest records, for a multiclass store,
    each class's rows as the chunks' labels count them (np.bincount), and None for any other."""
    from streamfit.store import open_store

    def check(path) -> None:
        store = open_store(str(path))
        recorded = store.manifest.class_rows
        if store.multilabel or store.regression:
            assert recorded is None
            return
        counted = np.zeros(store.n_classes, dtype=np.int64)
        for chunk in store.iter_chunks():
            counted += np.bincount(chunk.labels, minlength=store.n_classes)
        assert recorded == counted.tolist() and sum(recorded) == store.n_rows

    return check


def streamfit_cli(*args) -> list[str]:
    """The argv of a quiet `streamfit` subprocess (the package as installed for this Python)."""
    import sys

    return [sys.executable, "-m", "streamfit.cli", "-q", *map(str, args)]


@pytest.fixture(scope="session")
def cli():
    return streamfit_cli


@pytest.fixture(scope="session")
def digits_cli_store(tmp_path_factory):
    """A Zarr store of the digits, ingested by the CLI from LIBSVM in chunks of 200 rows."""
    import subprocess

    from sklearn.datasets import dump_svmlight_file, load_digits

    d = tmp_path_factory.mktemp("digits-cli")
    X, y = load_digits(return_X_y=True)
    dump_svmlight_file(X, y, str(d / "digits.svm"), zero_based=False)
    subprocess.run(
        streamfit_cli("ingest", d / "digits.svm", "--no-hash", "--out", d / "s.zarr", "--chunk-rows", "200"),
        check=True,
        capture_output=True,
    )
    return d / "s.zarr"


@contextlib.contextmanager
def _pointed_at_s3(mp: pytest.MonkeyPatch, url: str, key_id: str, secret: str):
    """boto pointed at the S3 API server `url` with these credentials, for this process and its
    children (subprocesses, Dask workers), through `mp`; s3fs's cached instances, which hold the
    settings they were made with (an earlier server's, now stopped), dropped on entry and exit."""
    import s3fs

    for name, value in {
        "AWS_ACCESS_KEY_ID": key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": url,
    }.items():
        mp.setenv(name, value)
    s3fs.S3FileSystem.clear_instance_cache()
    try:
        yield
    finally:
        s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture
def point_s3(monkeypatch):
    """`with point_s3(url, key_id, secret):` boto pointed at that S3 server (`_pointed_at_s3`)."""
    return functools.partial(_pointed_at_s3, monkeypatch)


@pytest.fixture(scope="module")
def s3():
    """An S3 API server on 127.0.0.1 and an s3fs client of its bucket; the AWS_* variables that
    point boto at it are set for this process and its children (subprocesses, Dask workers)."""
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # one line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    with pytest.MonkeyPatch.context() as mp, _pointed_at_s3(mp, f"http://{host}:{port}", ACCESS_KEY, SECRET_KEY):
        import s3fs

        fs = s3fs.S3FileSystem(skip_instance_cache=True)
        if not fs.exists(BUCKET):  # moto keeps its buckets for the process: an earlier module's server made it
            fs.mkdir(BUCKET)
        yield fs
    server.stop()


@contextlib.contextmanager
def _s3_requests():
    """The requests the S3 server of the `s3` fixture answers meanwhile (from any process: this
    one, subprocesses, Dask workers), as (method, key) pairs in order; a key is relative to the
    bucket; a listing is ("LIST", its prefix)."""
    requests: list[tuple[str, str]] = []

    class Requests(logging.Handler):
        def emit(self, record):
            # "GET /bucket/key HTTP/1.1" 200 (a 404 in terminal colours)
            method, target = re.search(r"([A-Z]+) (\S+) HTTP/", record.getMessage()).groups()
            path, _, query = urllib.parse.unquote(target).partition("?")
            if "list-type=2" in query:
                method, path = "LIST", query.split("prefix=", 1)[1].split("&")[0] if "prefix=" in query else ""
            requests.append((method, path.removeprefix(f"/{BUCKET}/")))

    werkzeug, level = logging.getLogger("werkzeug"), logging.getLogger("werkzeug").level
    werkzeug.setLevel(logging.INFO)  # the server's access log: a line per request
    werkzeug.addHandler(handler := Requests())
    try:
        yield requests
    finally:
        werkzeug.removeHandler(handler)
        werkzeug.setLevel(level)


@pytest.fixture(scope="session")
def s3_requests():
    """`with s3_requests() as requests:` the S3 server's requests meanwhile (_s3_requests)."""
    return _s3_requests


LEASE_STALE_S = 1.0  # the short_leases fixture's stale time (streamfit.lease.STALE_AFTER: 120 s)


@pytest.fixture
def short_leases(monkeypatch):
    """Leases (streamfit.lease) in this process stale after LEASE_STALE_S instead of minutes; the
    fixture's value, called, waits until a lease that a killed writer left is stale (S3 judges by
    its clock in whole seconds)."""
    from streamfit import lease

    monkeypatch.setattr(lease, "STALE_AFTER", LEASE_STALE_S)
    return lambda: time.sleep(LEASE_STALE_S + 1.2)


@pytest.fixture
def sigterm_guard():
    """streamfit.shutdown's SIGTERM guard, installed in this (the main) thread as the CLI installs
    it, with a grace period no test reaches; disarmed when the test ends, if the test has not (after a
    SIGTERM too, where the CLI leaves it armed until the process exits)."""
    from streamfit.shutdown import SigtermGuard

    guard = SigtermGuard(grace=3600)
    guard.install()
    yield guard
    guard.disarm()


@contextlib.contextmanager
def _moto_process(env: dict | None = None):
    """moto's S3 API server (with IAM and the rest of its services) in a process of its own on
    127.0.0.1, with `env` added to its environment (INITIAL_NO_AUTH_ACTION_COUNT=0: it checks
    every request's credentials); yields its URL and stops it at the end."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
                break
            assert time.monotonic() < deadline and server.poll() is None, "moto's server did not start"
            time.sleep(0.1)
        yield f"http://127.0.0.1:{port}"
    finally:
        server.terminate()
        server.wait()


@pytest.fixture(scope="session")
def moto_process():
    """_moto_process: moto's server in a process of its own (`with moto_process(env) as url:`)."""
    return _moto_process
