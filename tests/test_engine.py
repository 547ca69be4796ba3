import contextlib
import functools
import logging
import os
import shutil
import subprocess
import sys
import threading
import time
from types import SimpleNamespace
from typing import NamedTuple

import numpy as np
import psutil
import pytest
import scipy.sparse as sp

from streamfit import engine as engine_mod
from streamfit.engine import (
    Engine,
    add_subtree,
    chunk_workers,
    fold_chunks,
    leaf_chunks,
    sum_tree,
    tree_sum,
)
from streamfit.store import InMemoryStore, open_store


def chunk_gram(source, i, scale=1.0):
    c = source.read_chunk(i)
    X = c.X.toarray().astype(np.float64)
    return X.T @ X * scale, float(c.n_rows)


def chunk_sum_of(source, i, vector):
    return float(vector.sum())


def chunk_sum_of_pair(source, i, pair):
    cols, values = pair
    return float(values[cols].sum())


def chunk_rows(source, i):
    return source.read_chunk(i).row_start


def chunk_floats(source, i, size=3):
    """Values of magnitudes 1e-8 to 1e8 whose sums depend on the order of the additions."""
    rng = np.random.default_rng(i)
    return rng.normal(size=size) * 10.0 ** rng.integers(-8, 8, size=size)


def split_sum(values: list):
    """The fixed tree as the module docstring defines it, recursively: sum(lo, hi) =
    sum(lo, mid) + sum(mid, hi), mid - lo the largest power of two below hi - lo."""
    if len(values) == 1:
        return values[0]
    mid = 1 << ((len(values) - 1).bit_length() - 1)
    return split_sum(values[:mid]) + split_sum(values[mid:])


def test_tree_sum_is_pairwise_fixed():
    vals = [np.float64(1 / (i + 3)) for i in range(7)]
    a, b, c, d, e, f, g = vals
    assert tree_sum(vals) == ((a + b) + (c + d)) + ((e + f) + g)
    rng = np.random.default_rng(1)
    for n in range(1, 70):  # tree_sum's stack of subtrees adds as the recursive definition does
        values = list(rng.normal(size=n) * 10.0 ** rng.integers(-8, 8, size=n))
        assert tree_sum(iter(values)) == split_sum(values), n


def test_subtrees_summed_in_one_task_give_the_same_bits():
    """A cluster's map_reduce sums each subtree of at most leaf_chunks chunks in one task
    (fold_chunks) and the sums above them in tasks of up to `levels` levels of the tree
    (add_subtree: ((a + b) + (c + d)) for 2): for every chunk count, subtree size and levels per
    task, the very same additions as tree_sum (values whose sums depend on their order)."""
    rng = np.random.default_rng(0)
    for n in range(1, 41):
        values = list(rng.normal(size=n) * 10.0 ** rng.integers(-8, 8, size=n))
        ref = tree_sum(values)
        for group in (1, 2, 3, 4, 8, 64):
            leaf = functools.partial(fold_chunks, lambda _, i, values: values[i], None, values=values)
            for levels in (1, 2, 3):
                got = sum_tree(list(range(n)), group, leaf, add_subtree, levels)
                assert got == ref, (n, group, levels)
    naive = sum(values)
    assert naive != ref  # the order matters for these values: the test would see another tree


def test_add_tasks_take_up_to_two_to_the_levels_parts():
    """sum_tree's add tasks: 32 subtrees in 3 levels of tasks of 4 or 2 parts for levels = 2
    (the root's parts from the top of the tree down), 31 binary ones for levels = 1."""
    for levels, fan_ins in ((1, [2] * 31), (2, [2] * 16 + [4] * 5), (3, [4] * 8 + [8])):
        seen: list[int] = []

        def add(shape, *parts, seen=seen):
            seen.append(len(parts))
            return add_subtree(shape, *parts)

        assert sum_tree(list(range(32)), 1, lambda ids: ids[0], add, levels) == sum(range(32))
        assert sorted(seen) == fan_ins, levels
    assert add_subtree(((0, 1), (2, 3)), *"abcd") == "abcd" and add_subtree((0, (1, 2)), 1, 2, 3) == 6


def test_leaf_chunks_leaves_enough_tasks_per_thread():
    assert leaf_chunks(64, 16) == 2 and leaf_chunks(64, 8) == 4 and leaf_chunks(64, 1) == 32
    assert leaf_chunks(16, 16) == 1 and leaf_chunks(18, 2) == 4 and leaf_chunks(1, 4) == 1


class _Sums(NamedTuple):
    gram: np.ndarray
    count: int
    nothing: None


def test_named_results_are_summed_field_by_field():
    parts = [_Sums(np.full((2, 2), float(i)), i, None) for i in range(5)]
    total = tree_sum(parts)
    assert isinstance(total, _Sums) and total.count == 10 and total.nothing is None
    np.testing.assert_array_equal(total.gram, np.full((2, 2), 10.0))


def test_inprocess_map_reduce_equals_dense(digits):
    X, y, classes = digits
    src = InMemoryStore(X, y, classes, chunk_rows=256)
    with Engine(mode="inprocess") as eng:
        G, n = eng.map_reduce(chunk_gram, src, range(src.n_chunks), scale=2.0)
        starts = eng.map(chunk_rows, src, range(src.n_chunks))
    Xd = X.toarray().astype(np.float64)
    np.testing.assert_allclose(G, 2 * Xd.T @ Xd, rtol=1e-12)
    assert n == 1797 and starts == list(range(0, 1797, 256))


def test_local_cluster_bitwise_equals_inprocess(digits, write_store, monkeypatch):
    X, y, classes = digits
    store = open_store(write_store(X, y, classes, chunk_rows=100))
    with Engine(mode="inprocess") as eng:
        ref = eng.map_reduce(chunk_gram, store, range(store.n_chunks), scale=2.0)
    with Engine(mode="local", n_workers=2) as eng:
        assert eng.total_threads == 2
        # the default dashboard listens on this machine only (issue 20, item 14; bokeh is in [test]):
        # the scheduler runs in this process, so its listening socket on the dashboard's port is here
        port = eng.client.scheduler_info()["services"]["dashboard"]
        listening = [c.laddr for c in psutil.Process().net_connections("tcp") if c.status == psutil.CONN_LISTEN]
        assert [a.ip for a in listening if a.port == port] == ["127.0.0.1"], listening
        got = eng.map_reduce(chunk_gram, store, range(store.n_chunks), scale=2.0)
        starts = eng.map(chunk_rows, store, range(store.n_chunks))
        # large keyword arguments, twice under the same name (Client.map alone would collide)
        for _ in range(2):
            big = eng.map_reduce(chunk_sum_of, store, range(store.n_chunks), vector=np.arange(200_000.0))
            assert big == store.n_chunks * np.arange(200_000.0).sum()
        # a large tuple (bcd's `commit=(cols, delta)`): one scattered value, the task gets the tuple
        pair = (np.arange(3), np.arange(200_000.0))
        assert eng.map_reduce(chunk_sum_of_pair, store, range(store.n_chunks), pair=pair) == 3.0 * store.n_chunks
        assert eng.map(chunk_sum_of_pair, store, range(2), pair=pair) == [3.0, 3.0]
        # sums whose bits depend on their order, over odd chunk counts, in chunk tasks of several
        # chunks and of one (16 tasks per thread: a deep tree of add tasks, as at 16 workers)
        for tasks_per_thread in (2, 16):
            monkeypatch.setattr(engine_mod, "TASKS_PER_THREAD", tasks_per_thread)
            for n in (37, 5):
                got_floats = eng.map_reduce(chunk_floats, None, range(n), size=5)
                assert np.array_equal(got_floats, fold_chunks(chunk_floats, None, list(range(n)), size=5)), n
        # with a progress bar the client also holds (and counts) the chunk tasks' futures
        eng.progress = True
        got_floats = eng.map_reduce(chunk_floats, None, range(37), desc="floats", size=5)
        assert np.array_equal(got_floats, fold_chunks(chunk_floats, None, list(range(37)), size=5))
    assert np.array_equal(got[0], ref[0]) and got[1] == ref[1]
    assert starts == list(range(0, 1797, 100))


def test_chunk_workers_cut_the_chunks_into_contiguous_ranges_per_thread():
    homes = chunk_workers({"tcp://b": 1, "tcp://a": 2}, 6)
    assert homes == ["tcp://a", "tcp://a", "tcp://a", "tcp://a", "tcp://b", "tcp://b"]
    assert chunk_workers({"w": 1}, 3) == ["w"] * 3 and chunk_workers({}, 3) == []


def _cached_chunks(store):
    return sorted(store._cache)  # unpickled on the worker: the one Store object its tasks used


def _has_work_stealing(dask_scheduler) -> bool:
    return "stealing" in dask_scheduler.extensions


@pytest.mark.slow
def test_each_chunk_is_read_by_one_worker(digits, write_store):
    """Chunk affinity: over several passes every chunk is decoded and cached by one worker, its
    home (without it, Dask spread each pass's tasks freely and both workers cached most chunks).
    Work stealing is off here: the request is loose, so on a loaded machine Dask may steal a
    task for an idle worker, which is right for a run and would make this check flaky."""
    import dask

    X, y, classes = digits
    store = open_store(write_store(X, y, classes, chunk_rows=113))  # 16 chunks
    with dask.config.set({"distributed.scheduler.work-stealing": False}), Engine(mode="local", n_workers=2) as eng:
        for scale in (1.0, 2.0, 3.0):
            eng.map_reduce(chunk_gram, store, range(store.n_chunks), scale=scale)
        cached = eng.client.run(_cached_chunks, store)
        homes = chunk_workers(eng.client.nthreads(), store.n_chunks)
        stealing = eng.client.run_on_scheduler(_has_work_stealing)
    assert not stealing
    assert store.n_chunks == 16
    for address, ids in cached.items():
        assert ids == [i for i, home in enumerate(homes) if home == address]


def test_unreachable_scheduler_is_a_clear_error():
    from streamfit.errors import StreamfitError

    with pytest.raises(StreamfitError, match="cannot reach the Dask scheduler"):
        Engine("tcp://127.0.0.1:9", connect_timeout="1s").start()


def test_the_connect_timeout_is_dasks_where_the_user_set_it(monkeypatch, tmp_path):
    """distributed.comm.timeouts.connect, set by dask.config.set, a DASK_… variable (also to Dask's
    own default, 30 s) or a YAML file, is the --scheduler client's timeout; where nothing sets it,
    streamfit's 20 s (before: 20 s whatever was set). An unreachable scheduler is named after the
    user's time; a value that is no duration is one line naming the setting."""
    import dask

    from streamfit.errors import StreamfitError

    key = "distributed.comm.timeouts.connect"
    monkeypatch.delenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", raising=False)
    for setting, after in ((None, "after 20 s"), ("2s", "after 2 s")):
        with dask.config.set({key: setting} if setting else {}):
            started = time.monotonic()
            with pytest.raises(StreamfitError, match=f"cannot reach the Dask scheduler .*{after}"):
                Engine("tcp://127.0.0.1:9").start()
            assert time.monotonic() - started < (15 if setting else 60)
    assert engine_mod._configured_connect_timeout() is None
    monkeypatch.setenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT", "30s")  # read again by dask.config.collect
    assert engine_mod._configured_connect_timeout() == 30.0
    monkeypatch.delenv("DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT")
    with dask.config.set({key: "1 minute"}):
        assert engine_mod._configured_connect_timeout() == 60.0
    (tmp_path / "dask.yaml").write_text("distributed:\n  comm:\n    timeouts:\n      connect: 30s\n")
    found = subprocess.run(
        [sys.executable, "-c", "from streamfit import engine; print(engine._configured_connect_timeout())"],
        env={**os.environ, "DASK_CONFIG": str(tmp_path)},
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout == "30.0\n"  # a config file's, though it equals Dask's default
    with dask.config.set({key: "soon"}), pytest.raises(StreamfitError, match=f"sets {key} to 'soon', not a duration"):
        Engine("tcp://127.0.0.1:9").start()


def _certificate(folder, name: str, issuer: tuple[str, str] | None = None) -> tuple[str, str]:
    """A certificate for 127.0.0.1 as PEM files NAME.pem and NAME.key in `folder`: (cert, key).
    Without `issuer` a CA's, signed with its own key; else signed by the CA whose (cert, key) it is."""
    import datetime
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"127.0.0.1 {name}")])
    issuer_name, issuer_key = subject, key
    if issuer is not None:
        with open(issuer[0], "rb") as f:
            issuer_name = x509.load_pem_x509_certificate(f.read()).subject
        with open(issuer[1], "rb") as f:
            issuer_key = serialization.load_pem_private_key(f.read(), password=None)
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False)
        .add_extension(x509.BasicConstraints(ca=issuer is None, path_length=None), critical=True)
        .sign(issuer_key, hashes.SHA256())
    )
    (folder / f"{name}.pem").write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    (folder / f"{name}.key").write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return str(folder / f"{name}.pem"), str(folder / f"{name}.key")


def _tls_security(ca: str, cert: str, key: str):
    """Dask's Security of a TLS cluster in this process: its scheduler and workers use (cert, key)
    and trust the CA `ca`."""
    from distributed.security import Security

    sides = ("scheduler", "worker", "client")
    return Security(
        tls_ca_file=ca,
        require_encryption=True,
        **{f"tls_{side}_{part}": path for side in sides for part, path in (("cert", cert), ("key", key))},
    )


def test_a_tls_scheduler_is_joined_with_dasks_tls_settings_and_named_without_them(digits, tmp_path):
    """A tls:// scheduler with a self-signed certificate: without TLS settings in Dask's
    configuration, one line naming them (it was Dask's TypeError about an ssl_context, reported
    as an internal error); its address given as tcp://, one line pointing to tls:// (it was
    "cannot reach … start one with 'dask scheduler'"); with the settings, the pass gives the
    in-process bits."""
    import dask
    from distributed import LocalCluster

    from streamfit.errors import StreamfitError

    cert, key = _certificate(tmp_path, "self")
    security = _tls_security(cert, cert, key)
    X, y, classes = digits
    src = InMemoryStore(X, y, classes, chunk_rows=256)
    with Engine(mode="inprocess") as eng:
        ref = eng.map_reduce(chunk_gram, src, range(src.n_chunks))
    with LocalCluster(
        n_workers=1, threads_per_worker=1, processes=False, protocol="tls://", security=security, dashboard_address=":0"
    ) as cluster:
        address = cluster.scheduler_address
        assert address.startswith("tls://")
        with pytest.raises(
            StreamfitError, match="speaks TLS, and Dask's configuration gives this process no certificate"
        ):
            Engine(address).start()
        with pytest.raises(StreamfitError, match="closed the connection .*if it speaks TLS.*tls://HOST:PORT"):
            Engine(address.replace("tls://", "tcp://"), connect_timeout="10s").start()
        settings = {"distributed.comm.tls.ca-file": cert, "distributed.comm.tls.client.cert": cert}
        with dask.config.set({**settings, "distributed.comm.tls.client.key": key}), Engine(address) as eng:
            got = eng.map_reduce(chunk_gram, src, range(src.n_chunks))
    assert np.array_equal(ref[0], got[0]) and ref[1] == got[1]


def test_a_wrong_tls_certificate_is_one_line_naming_the_settings_to_fix(tmp_path):
    """A tls:// scheduler whose certificate CA A signed: a client trusting CA B only, a client
    certificate CA B signed (which the scheduler refuses), a key that is not the certificate's and
    a CA file that is not there are each one line naming the TLS failure and the settings
    distributed.comm.tls.* to set (the first two were "cannot reach … start one with 'dask
    scheduler'", the last two a file system error "check that the location exists, is writable");
    with the right files the engine starts."""
    import dask
    from distributed import LocalCluster

    from streamfit.errors import StreamfitError

    ca_a, ca_b = _certificate(tmp_path, "ca-a"), _certificate(tmp_path, "ca-b")
    scheduler = _certificate(tmp_path, "scheduler", issuer=ca_a)
    client_a, client_b = (
        _certificate(tmp_path, "client-a", issuer=ca_a),
        _certificate(tmp_path, "client-b", issuer=ca_b),
    )
    tls = "distributed.comm.tls"
    with LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=False,
        protocol="tls://",
        security=_tls_security(ca_a[0], *scheduler),
        dashboard_address=":0",
    ) as cluster:
        address = cluster.scheduler_address
        for ca, (cert, key), line in (
            (ca_b[0], client_a, f"has a TLS certificate this process does not trust .*set {tls}.ca-file to the CA"),
            (
                ca_a[0],
                client_b,
                f"ended the TLS handshake, refusing this process's certificate .*set {tls}.client.cert",
            ),
            (ca_a[0], (client_a[0], client_b[1]), "TLS settings .* do not load .*KEY_VALUES_MISMATCH"),
            (str(tmp_path / "none.pem"), client_a, f"do not load \\(no file at {tls}.ca-file; now ca-file="),
        ):
            settings = {f"{tls}.ca-file": ca, f"{tls}.client.cert": cert, f"{tls}.client.key": key}
            with dask.config.set(settings), pytest.raises(StreamfitError, match=line) as raised:
                Engine(address, connect_timeout="10s").start()
            assert "\n" not in str(raised.value) and "start one" not in str(raised.value)
        settings = {f"{tls}.ca-file": ca_a[0], f"{tls}.client.cert": client_a[0], f"{tls}.client.key": client_a[1]}
        with dask.config.set(settings), Engine(address) as eng:
            assert eng.total_threads == 1


# ---- losing workers ------------------------------------------------------------------------------


class _Sum:
    """A partial sum whose last addition (the root of the tree) kills its worker, once: by then the
    leaves are done, so Dask must recompute from lineage or streamfit must run the pass again."""

    def __init__(self, value, n, total, marker):
        self.value, self.n, self.total, self.marker = value, n, total, marker

    def __add__(self, other):
        n = self.n + other.n
        if n == self.total and not os.path.exists(self.marker):
            open(self.marker, "w").close()
            os._exit(1)
        return _Sum(self.value + other.value, n, self.total, self.marker)


def chunk_dies_once(source, i, vector, marker, die_at, total=None):
    """A chunk's sum of `vector` scaled by 1/(i+3); chunk `die_at` kills its worker the first time."""
    if i == die_at and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    value = vector / (i + 3)
    return value if total is None else _Sum(value, 1, total, marker)


def test_local_cluster_survives_killed_workers(tmp_path, caplog):
    """Workers killed under a map, inside a map_reduce's leaves and at its final sum: the work
    runs again on the remaining (or restarted) workers and the result is bitwise the in-process
    one; each lost worker is a warning."""
    vector = np.arange(20_000.0)  # scattered (above BROADCAST_BYTES)
    n = 12
    with Engine(mode="inprocess") as eng:
        ref = eng.map_reduce(chunk_dies_once, None, range(n), vector=vector, marker="", die_at=-1)
        ref_map = eng.map(chunk_dies_once, None, range(n), vector=vector, marker="", die_at=-1)
    with Engine(mode="local", n_workers=2) as eng, caplog.at_level("WARNING", logger="streamfit.engine"):
        got_map = eng.map(chunk_dies_once, None, range(n), vector=vector, marker=str(tmp_path / "a"), die_at=3)
        got = eng.map_reduce(chunk_dies_once, None, range(n), vector=vector, marker=str(tmp_path / "b"), die_at=7)
        root = eng.map_reduce(
            chunk_dies_once, None, range(n), vector=vector, marker=str(tmp_path / "c"), die_at=-1, total=n
        )
    assert all((tmp_path / m).exists() for m in "abc")  # every worker death happened
    during = ("left the cluster during a pass; its tasks run again on the", "left the cluster, and no worker is left")
    left = [m for m in caplog.messages if any(said in m for said in during)]
    assert len(left) == 3, caplog.messages
    assert all(np.array_equal(a, b) for a, b in zip(got_map, ref_map, strict=True))
    assert np.array_equal(got, ref) and np.array_equal(root.value, ref) and root.n == n


def test_a_worker_restarted_between_passes_is_a_warning(caplog):
    """A worker that dies between two passes and comes back under its nanny (a new address) is
    not seen by either pass's watch; the next pass's watch compares with the workers the last
    one saw and warns, and the pass's result is still the in-process one."""
    vector = np.arange(50.0)
    with Engine(mode="inprocess") as eng:
        ref = eng.map(chunk_dies_once, None, range(4), vector=vector, marker="", die_at=-1)
    with Engine(mode="local", n_workers=2) as eng, caplog.at_level("WARNING", logger="streamfit.engine"):
        assert eng.client is not None
        eng.map(chunk_dies_once, None, range(4), vector=vector, marker="", die_at=-1)
        before = set(eng.client.nthreads())
        victim = sorted(before)[0]
        with contextlib.suppress(Exception):  # the worker dies under the call
            eng.client.run(os._exit, 1, workers=[victim])
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:  # the nanny starts a new worker process
            now = set(eng.client.nthreads())
            if victim not in now and len(now) == 2:
                break
            time.sleep(0.1)
        assert victim not in now and len(now) == 2, now
        assert not any("left the cluster" in m for m in caplog.messages), caplog.messages
        got = eng.map(chunk_dies_once, None, range(4), vector=vector, marker="", die_at=-1)
    assert [m for m in caplog.messages if "left the cluster" in m] == [
        f"the Dask worker {victim} left the cluster since the last pass; this pass runs on the 2 worker(s) there now"
    ]
    assert all(np.array_equal(a, b) for a, b in zip(got, ref, strict=True))


def test_a_pass_that_keeps_losing_workers_is_a_clear_error(monkeypatch):
    from streamfit import engine as engine_mod
    from streamfit.errors import StreamfitError

    calls = []

    def lost(self, kwargs):
        calls.append(1)
        raise engine_mod._WorkerLost("scatter failed: KeyError: 'tcp://127.0.0.1:1'")

    monkeypatch.setattr(engine_mod.Engine, "_submit_args", lost)
    eng = Engine(mode="inprocess")
    eng.client = SimpleNamespace(status="running")  # as if connected to a scheduler: the Dask path
    with pytest.raises(StreamfitError, match="a Dask worker was lost.*--resume"):
        eng.map_reduce(chunk_rows, None, range(3), desc="test: pass")
    assert len(calls) == engine_mod.MAX_ATTEMPTS
    with pytest.raises(StreamfitError, match="a Dask worker was lost"):
        eng.map(chunk_rows, None, range(3))
    calls.clear()
    with pytest.raises(StreamfitError, match="test: tasks: a Dask worker was lost.*--resume"):
        list(eng.imap_unordered(chunk_rows, range(3), desc="test: tasks"))
    assert len(calls) == engine_mod.MAX_ATTEMPTS


def test_a_comms_error_outside_a_pass_after_the_scheduler_is_lost_is_the_one_error(caplog):
    """A Dask comms error out of the engine's block (a workers query between passes, not
    retried) while the client has lost its scheduler: the error naming the scheduler and the fix,
    not the comms' text; the same error while connected passes through unchanged. Dask's logged
    traceback of its failed reconnection is dropped, its other errors are not."""
    import asyncio

    from distributed.comm import CommClosedError

    from streamfit.errors import StreamfitError

    eng = Engine("tcp://127.0.0.1:1", mode="remote")
    eng.client = SimpleNamespace(status="closed", close=lambda: None)
    with pytest.raises(
        StreamfitError, match="lost the connection to the Dask scheduler at tcp://127.0.0.1:1.*--resume"
    ):
        with eng:
            raise CommClosedError("in <TCP (closed) ConnectionPool.ncores>: ConnectionResetError")
    eng.client = SimpleNamespace(status="running", close=lambda: None)
    with pytest.raises(CommClosedError):
        with eng:
            raise CommClosedError("a task's own comms")

    reported = engine_mod._SCHEDULER_LOSS_REPORTED
    for error, dropped in ((asyncio.CancelledError(), True), (OSError("refused"), True), (ValueError("x"), False)):
        record = logging.LogRecord(
            "distributed.client", logging.ERROR, "utils.py", 1, error, (), (type(error), error, None)
        )
        assert reported.filter(record) is not dropped
    assert reported.filter(logging.LogRecord("distributed.client", logging.ERROR, "c.py", 1, "other", (), None))


def chunk_slow(source, i):
    time.sleep(0.3)
    return float(i)


def test_a_cluster_without_workers_is_a_clear_error():
    """Joining a scheduler that has no workers, and a pass whose last worker went away, fail
    after worker_timeout with what to do, instead of hanging."""
    from distributed import LocalCluster

    from streamfit.errors import StreamfitError

    with LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as cluster:
        address = cluster.scheduler_address
        t = time.monotonic()
        with pytest.raises(StreamfitError, match=f"scheduler at {address} has no workers.*dask worker {address}"):
            Engine(address, worker_timeout=1.0).start()
        assert time.monotonic() - t < 45  # worker_timeout, not the default 60 s, with room for a loaded machine
        cluster.scale(1)
        with Engine(address, worker_timeout=2.0) as eng:
            assert eng.map_reduce(chunk_slow, None, range(2)) == 1.0
            timer = threading.Timer(0.5, cluster.scale, (0,))
            timer.start()
            t = time.monotonic()
            with pytest.raises(StreamfitError, match=f"scheduler at {address} has had no workers.*dask worker"):
                eng.map_reduce(chunk_slow, None, range(40))
            assert time.monotonic() - t < 45
            timer.join()


# ---- imap_unordered: independent tasks, results as they come --------------------------------------


def item_value(item, vector, log_dir, die_at=-1):
    """vector / (item + 3), each run recorded in log_dir. Item `die_at` waits for the file `go` there
    (at most a minute), then kills its worker, the first time."""
    with open(os.path.join(log_dir, f"ran-{item}"), "a") as f:
        f.write("x")
    dead, go = os.path.join(log_dir, "dead"), os.path.join(log_dir, "go")
    if item == die_at and not os.path.exists(dead):
        deadline = time.monotonic() + 60
        while not os.path.exists(go) and time.monotonic() < deadline:
            time.sleep(0.01)
        open(dead, "w").close()
        os._exit(1)
    return vector / (item + 3)


def runs(log_dir, n):
    return [len((log_dir / f"ran-{i}").read_text()) if (log_dir / f"ran-{i}").exists() else 0 for i in range(n)]


def test_imap_unordered_submits_again_only_the_items_a_lost_worker_left(tmp_path, caplog):
    """Item 0 holds one worker until three results came back, then kills it. With Dask's
    allowed-failures at 0 its task fails at once (KilledWorker), so the engine must submit the
    items not yielded yet again: every item is yielded once with its value, the ones yielded
    before the death ran once, and item 0 ran twice."""
    import dask
    import distributed  # noqa: F401  (its config defaults, which dask.config.set would drop on exit otherwise)

    vector = np.arange(20_000.0)  # scattered (above BROADCAST_BYTES)
    n = 8
    with Engine(mode="inprocess") as eng:
        ref = list(eng.imap_unordered(item_value, range(n), vector=vector, log_dir=str(tmp_path)))
    assert [i for i, _ in ref] == list(range(n))  # in process: in order
    log_dir = tmp_path / "dask"
    log_dir.mkdir()
    got, before_death = {}, []
    with (
        dask.config.set({"distributed.scheduler.allowed-failures": 0}),
        Engine(mode="local", n_workers=2) as eng,
        caplog.at_level("WARNING", logger="streamfit.engine"),
    ):
        for item, value in eng.imap_unordered(
            item_value, range(n), desc="test: items", vector=vector, log_dir=str(log_dir), die_at=0
        ):
            assert item not in got
            got[item] = value
            if len(got) == 3:
                before_death = list(got)
                (log_dir / "go").touch()
    assert (log_dir / "dead").exists()
    assert sorted(got) == list(range(n)) and all(np.array_equal(got[i], v) for i, v in ref)
    ran = runs(log_dir, n)
    assert ran[0] == 2 and all(ran[i] == 1 for i in before_death)
    [warning] = [
        r.getMessage() for r in caplog.records if r.name == "streamfit.engine" and "was lost" in r.getMessage()
    ]
    assert warning.startswith("test: items: a Dask worker was lost (KilledWorker: ")
    assert warning.endswith("unfinished tasks again (attempt 2 of 3)")


def item_slow(item, log_dir):
    (log_dir / f"ran-{item}").write_text("x")
    time.sleep(0.3)
    return item


def test_closing_imap_unordered_cancels_the_pending_tasks(tmp_path):
    """Also: ready() tells whether a finished result waits (in process: never)."""
    with Engine(mode="inprocess") as eng:
        results = eng.imap_unordered(item_slow, range(2), log_dir=tmp_path)
        next(results)
        assert not results.ready()
    n = 12
    with Engine(mode="local", n_workers=2) as eng:
        quick = tmp_path / "quick"
        quick.mkdir()
        results = eng.imap_unordered(item_slow, range(2), log_dir=quick)
        assert not results.ready()  # nothing submitted before the first next()
        next(results)
        deadline = time.monotonic() + 30
        while not results.ready() and time.monotonic() < deadline:  # the other worker's item
            time.sleep(0.01)
        assert results.ready()
        next(results)
        assert not results.ready()
        results = eng.imap_unordered(item_gated, range(n), log_dir=tmp_path)
        first, _ = next(results)
        results.close()
        # Items 2.. wait for the gate, so no worker finishes one while the cancel travels; the
        # gate opens once the scheduler holds no more tasks than the two workers run.
        deadline = time.monotonic() + 30
        while eng.client.run_on_scheduler(_n_scheduler_tasks) > 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        (tmp_path / "go").touch()
        time.sleep(1.0)  # every item would run in this second, had it not been cancelled
    assert first in (0, 1)
    # Items 0 and 1, the two running at close(), and at most one queued behind each: Dask gives a
    # one-thread worker up to two tasks (worker-saturation 1.1, rounded up), and a queued task's
    # release can reach its worker after the gate opened. Uncancelled, all 12 run in that second.
    assert sum(runs(tmp_path, n)) <= 6


def item_gated(item, log_dir):
    """Items 0 and 1 return at once; the others record that they ran, then wait for log_dir/go."""
    (log_dir / f"ran-{item}").write_text("x")
    while item > 1 and not (log_dir / "go").exists():
        time.sleep(0.01)
    return item


def _n_scheduler_tasks(dask_scheduler):
    return len(dask_scheduler.tasks)


def test_imap_unordered_without_workers_is_a_clear_error(tmp_path):
    from distributed import LocalCluster

    from streamfit.errors import StreamfitError

    with (
        LocalCluster(n_workers=1, processes=False, dashboard_address=":0") as cluster,
        Engine(cluster.scheduler_address, worker_timeout=2.0) as eng,
    ):
        timer = threading.Timer(0.5, cluster.scale, (0,))
        timer.start()
        t = time.monotonic()
        with pytest.raises(StreamfitError, match="has had no workers for 2 s.*dask worker"):
            list(eng.imap_unordered(item_slow, range(40), log_dir=tmp_path))
        assert time.monotonic() - t < 15
        timer.join()


def chunk_results_held(source, i):
    """A vector whose entry i counts the results the worker holds when chunk i starts."""
    from distributed import get_worker

    held = np.zeros(source.n_chunks)
    held[i] = len(get_worker().data)
    return held


def test_map_reduce_frees_chunk_results_once_summed(digits):
    """A worker holds O(log n) chunk results of a pass, not n: the client lets go of each chunk's
    future once it has counted it (the sum that consumes it frees it), and the sums are submitted
    depth first, so the thread adds two results before it starts further chunks."""
    X, y, classes = digits
    src = InMemoryStore(X, y, classes, chunk_rows=56)  # 33 chunks
    with Engine(mode="local", n_workers=1) as eng:
        held = eng.map_reduce(chunk_results_held, src, range(src.n_chunks))
    assert held.shape == (33,)
    # log2(33) + a few (8 at rest; 9 seen at load 4, the client's releases arriving late); when the
    # client kept every chunk's future, up to 32
    assert held.max() <= 12


def chunk_logs_dask_noise(source, i):
    """What a worker logs when a peer dies under a transfer (distributed.worker, ERROR)."""
    import logging

    logging.getLogger("distributed.worker").error("Worker stream died during communication: CommClosedError")
    return i


@pytest.mark.slow
def test_the_dashboard_listens_on_this_machine_only_and_serves_its_page(capfd, monkeypatch, recwarn):
    """Dask's default ':port' would listen on every interface (0.0.0.0); the embedded cluster's
    dashboard binds 127.0.0.1, and bokeh (streamfit[dashboard]) serves its status page. With its
    port 8787 taken (another run on this machine), it listens on a free one without Dask's "Port
    8787 is already in use" warning: its URL (which train logs) names the port. Without -q, Dask's
    errors in the workers reach stderr (the next test silences them)."""
    import socket
    import urllib.request

    # as a process without -q starts: an earlier `streamfit -q` run in this test process set it
    monkeypatch.setattr(logging.getLogger("distributed"), "level", logging.NOTSET)
    # workers that write to this test's captured stderr: forked ones write to the stderr that the
    # forkserver got when an earlier test started it (in a CLI run, the process's own)
    monkeypatch.setattr("streamfit.engine.WORKER_START_METHOD", "spawn")
    with socket.socket() as taken:
        try:
            taken.bind(("127.0.0.1", 8787))
            taken.listen()
        except OSError:  # taken already, by another process
            pass
        with Engine(mode="local", n_workers=1) as eng:
            assert eng.cluster is not None
            server = eng.cluster.scheduler.http_server
            assert {s.getsockname()[0] for s in server._sockets.values()} == {"127.0.0.1"}
            assert eng.dashboard_link.startswith("http://127.0.0.1:") and eng.dashboard_link.endswith("/status")
            assert f":{server.port}/" in eng.dashboard_link and server.port != 8787
            assert not [w for w in recwarn if "already in use" in str(w.message)], [str(w.message) for w in recwarn]
            with urllib.request.urlopen(eng.dashboard_link, timeout=60) as page:
                assert page.status == 200 and b"bokeh" in page.read().lower()
            assert eng.map(chunk_logs_dask_noise, None, range(1)) == [0]
    err = capfd.readouterr().err
    assert "CommClosedError" in err and "already in use" not in err


@pytest.mark.slow
def test_quiet_silences_the_log_of_the_dask_workers(capfd, monkeypatch):
    from streamfit.logs import set_dask_level

    monkeypatch.setattr("streamfit.engine.WORKER_START_METHOD", "spawn")  # as in the test above

    # what `streamfit -q` asks for during its command (cli._be_quiet; reset when the command ends),
    # in a process that imported distributed already: the embedded cluster's workers get it too
    set_dask_level(logging.CRITICAL)
    try:
        with Engine(mode="local", n_workers=1, dashboard_address="127.0.0.1:0") as eng:
            assert eng.map(chunk_logs_dask_noise, None, range(1)) == [0]
        assert "CommClosedError" not in capfd.readouterr().err
    finally:
        set_dask_level(None)
        logging.getLogger("distributed").setLevel(logging.NOTSET)


QUIET_PROCESS = """
import logging, sys
from streamfit.cli import _be_quiet
from streamfit.logs import configure

configure(logging.WARNING)  # as `streamfit -q COMMAND` starts: distributed not imported yet
_be_quiet({})
from streamfit.engine import Engine


def noisy(source, i):
    logging.getLogger("distributed.worker").error("Worker stream died during communication: CommClosedError")
    return i


if __name__ == "__main__":
    with Engine(mode="local", n_workers=1, dashboard_address="127.0.0.1:0") as eng:
        assert eng.map(noisy, None, range(1)) == [0]
        logging.getLogger("distributed.scheduler").error("Removing worker caused the cluster to lose data")
        logging.getLogger("streamfit.engine").warning("a worker left the cluster")
    print("done")
"""


@pytest.mark.slow
def test_quiet_silences_dask_in_a_fresh_process_with_forked_workers(tmp_path):
    """`streamfit -q` in its own process, as a command line runs it: -q is set before distributed
    is imported (whose import set its logger back to INFO, so the scheduler's ERROR lines came
    through), and the workers are forked from a forkserver that set up Dask's log at its import
    (a surviving worker printed its CommClosedError traceback). Neither reaches stderr now;
    streamfit's own warnings do."""
    import subprocess
    import sys

    (tmp_path / "quiet_job.py").write_text(QUIET_PROCESS)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, str(tmp_path / "quiet_job.py")],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
        cwd=tmp_path,
    )
    assert done.returncode == 0 and done.stdout == "done\n", done.stderr
    assert "WARNING streamfit.engine: a worker left the cluster" in done.stderr
    assert "CommClosedError" not in done.stderr and "lose data" not in done.stderr, done.stderr


def test_auto_choice_runs_small_stores_in_process_and_honours_explicit_choices(monkeypatch):
    from streamfit.engine import AUTO_INPROCESS_WORK, auto_choice

    monkeypatch.setattr("os.cpu_count", lambda: 16)
    small, large = AUTO_INPROCESS_WORK // 10, AUTO_INPROCESS_WORK // 10 + 1  # × 10 classes
    assert auto_choice(None, None, small, 10, 4).mode == "inprocess"
    assert auto_choice(None, None, large, 10, 4).mode == "local"
    assert auto_choice(None, 2, small, 10, 4).mode == "local"  # --n-workers 2: a cluster even for a small store
    assert auto_choice(None, 0, large, 10, 4).mode == "inprocess"
    assert auto_choice("tcp://127.0.0.1:8786", None, small, 10, 4).mode == "remote"
    # a fit in the driver (bcd's memory mode): no cluster under auto, whatever the size...
    assert auto_choice(None, None, large, 10, 4, uses_workers=False).mode == "inprocess"
    # ...unless one is asked for
    assert auto_choice(None, 2, large, 10, 4, uses_workers=False).mode == "local"
    assert auto_choice("tcp://127.0.0.1:8786", None, large, 10, 4, uses_workers=False).mode == "remote"
    # a store of one chunk: each pass is one task, which a cluster cannot share (qa29)
    assert auto_choice(None, None, large, 10, 1).mode == "inprocess"
    assert auto_choice(None, 2, large, 10, 1).mode == "local"
    monkeypatch.setattr("os.cpu_count", lambda: 1)
    assert auto_choice(None, None, large, 10, 4).mode == "inprocess"  # one core: a cluster only adds its start-up


def test_auto_choice_starts_a_cluster_only_where_the_work_predicts_it_faster():
    """Above the size bound, with the solver's work estimate: many light rounds (the 100 000-document
    text store's 366 stages of ~0.06 s) run in this process on 2 and on 16 cores; few heavy ones
    start the cluster on 16 cores, never on 2 (one core is the driver's and the scheduler's); the
    log line gives both predictions; explicit choices still win."""
    from streamfit.engine import AUTO_INPROCESS_WORK, CLUSTER_ROUND_S, CLUSTER_START_S, Work, auto_choice

    large = AUTO_INPROCESS_WORK  # × 10 classes: above the bound
    light, heavy = Work(366, 0.06, "stage"), Work(32, 2.0, "stage")
    choice = auto_choice(None, None, large, 10, 8, work=light, cores=2)
    assert choice.mode == "inprocess"
    assert choice.inprocess_s == pytest.approx(366 * 0.06)
    # 2 cores: the workers share a round no faster than one core (n_eff 1), and each round costs more
    assert choice.cluster_s == pytest.approx(CLUSTER_START_S + 366 * (CLUSTER_ROUND_S + 0.06))
    assert choice.why.startswith("366 stages of ~0.06 s each, ~22 s predicted; a 2-worker cluster would take ~")
    assert auto_choice(None, None, large, 10, 64, work=light, cores=16).mode == "inprocess"
    assert auto_choice(None, None, large, 10, 8, work=heavy, cores=2).mode == "inprocess"
    # 16 cores, 8 chunks: a round kept busy on 8 workers' worth of cores, shared 1 + 0.5 × 7 = 4.5×
    choice = auto_choice(None, None, large, 10, 8, work=heavy, cores=16)
    assert choice.mode == "local" and choice.inprocess_s == pytest.approx(64.0)
    assert choice.cluster_s == pytest.approx(CLUSTER_START_S + 32 * (CLUSTER_ROUND_S + 2.0 / 4.5))
    assert "predicted on 16 workers against ~64 s in this process" in choice.why
    # the workers a round can keep busy are at most its chunks: 2 chunks on 16 cores share it 1.5x
    two_chunks = auto_choice(None, None, large, 10, 2, work=heavy, cores=16)
    assert two_chunks.cluster_s == pytest.approx(CLUSTER_START_S + 32 * (CLUSTER_ROUND_S + 2.0 / 1.5))
    # explicit choices, small stores, one chunk, one core and fits in the driver ignore the estimate
    assert auto_choice(None, 2, large, 10, 8, work=light, cores=2).mode == "local"
    assert auto_choice(None, 0, large, 10, 8, work=heavy, cores=16).mode == "inprocess"
    assert auto_choice("tcp://127.0.0.1:8786", None, large, 10, 8, work=light).mode == "remote"
    assert auto_choice(None, None, large // 10, 10, 8, work=heavy, cores=16).mode == "inprocess"
    assert auto_choice(None, None, large, 10, 1, work=heavy, cores=16).mode == "inprocess"
    assert auto_choice(None, None, large, 10, 8, work=heavy, cores=1).mode == "inprocess"
    assert auto_choice(None, None, large, 10, 8, False, work=heavy, cores=16).mode == "inprocess"
    # without an estimate (a solver that gives none): the cluster above the bound on more than two
    # cores; on two, n_eff = 1 whatever the work, so this process
    assert auto_choice(None, None, large, 10, 8, cores=3).mode == "local"
    two = auto_choice(None, None, large, 10, 8, cores=2)
    assert two.mode == "inprocess" and two.why == "a machine of 2 cores, one of them the driver's and the scheduler's"
    assert auto_choice(None, 2, large, 10, 8, cores=2).mode == "local"  # unless a cluster is asked for


def forked_worker_facts(source, i, v):
    """What a task sees in its worker: its parent process, whether WORKER_PRELOAD was imported
    before it, an environment variable, and a numba kernel's result there."""
    import sys

    from streamfit.engine import WORKER_PRELOAD
    from streamfit.projections import project_simplex

    preloaded = all(name in sys.modules for name in WORKER_PRELOAD)  # numba_target too: numba's target initialised
    return os.getppid(), preloaded, os.environ.get("STREAMFIT_TEST_ENGINE"), project_simplex(v)


@pytest.mark.slow
def test_workers_are_forked_from_a_server_with_the_solvers_imported(monkeypatch):
    """The embedded cluster forks its workers from a forkserver that imported WORKER_PRELOAD:
    their parent is not this process, the solvers are there before the first task, numba's
    kernels give there the bits they give here (no threads were forked). The forkserver lives
    on, started by the first cluster; a later cluster's workers still get this process's
    environment at its start. Dask's start method is restored once the cluster closed."""
    import dask
    import distributed  # noqa: F401  (registers Dask's distributed.* settings, read below)

    from streamfit import engine as engine_mod
    from streamfit.projections import project_simplex

    if engine_mod.WORKER_START_METHOD != "forkserver":
        pytest.skip("no forkserver on this platform")
    before = dask.config.get("distributed.worker.multiprocessing-method")
    v = np.random.default_rng(0).normal(size=1000)
    ref = project_simplex(v)
    assert abs(ref.sum() - 1.0) < 1e-12 and ref.min() >= 0.0  # a projection onto the simplex
    with Engine(mode="local", n_workers=1, dashboard_address="127.0.0.1:0") as eng:
        assert dask.config.get("distributed.worker.multiprocessing-method") == "forkserver"
        ((parent, preloaded, _, got),) = eng.map(forked_worker_facts, None, range(1), v=v)
    assert parent != os.getpid() and preloaded and np.array_equal(got, ref)
    assert dask.config.get("distributed.worker.multiprocessing-method") == before
    monkeypatch.setenv("STREAMFIT_TEST_ENGINE", "set after the forkserver started")
    with Engine(mode="local", n_workers=2, dashboard_address="127.0.0.1:0") as eng:
        facts = eng.map(forked_worker_facts, None, range(2), v=v)
    assert {f[0] for f in facts} == {parent}  # the same server, still running
    assert all(f[2] == "set after the forkserver started" and np.array_equal(f[3], ref) for f in facts)


def test_the_forkserver_preloads_every_solver_module():
    """`import streamfit.solvers` imports no solver, so the preload names each module: a forked
    worker must not import its solver (numba, scipy.optimize) at its first task."""
    from streamfit.engine import WORKER_PRELOAD
    from streamfit.solvers import SOLVER_NAMES

    assert {f"streamfit.solvers.{name}" for name in SOLVER_NAMES} <= set(WORKER_PRELOAD)


def test_the_forkserver_ignores_sigint_from_its_first_preload_import_on(terminal_job):
    """qa32: a Ctrl-C in the seconds while the embedded cluster's forkserver imported its preload
    (distributed, the solvers, numba's target) printed the forkserver's own KeyboardInterrupt
    traceback (about 60 lines) under the driver's one `stopped:` line, since the module that sets
    SIGINT aside (streamfit.worker_signals) came last. It comes first: in a fresh interpreter
    (SIGINT at its default, as a terminal's job has it) importing WORKER_PRELOAD in order, as
    multiprocessing's forkserver does, SIGINT is ignored after each import."""
    import subprocess
    import sys

    script = (
        "import importlib, signal\n"
        "from streamfit.engine import WORKER_PRELOAD\n"
        "assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
        "for name in WORKER_PRELOAD:\n"
        "    importlib.import_module(name)\n"
        "    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN, name\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120, **terminal_job)


def test_a_zarr_chunk_read_after_the_preload_imports_nothing_more(tmp_path):
    """A worker's first chunk task reads a Zarr store: after WORKER_PRELOAD it imports no module
    of zarr, numcodecs or google_crc32c (the backend's imports, which streamfit.store defers for
    in-process jobs, would otherwise be paid by every worker at once), and the preload starts no
    thread (a fork copies one). A fresh interpreter, as the forkserver is."""
    import subprocess
    import sys

    from streamfit.store import StoreWriter

    path = str(tmp_path / "s.zarr")
    writer = StoreWriter(path, backend="zarr", chunk_rows=4)
    X = sp.random(8, 16, density=0.3, format="csr", random_state=0)
    X.sort_indices()
    writer.write_rows(X, np.arange(8) % 2)
    writer.close(n_features=16, classes=["a", "b"])
    script = (
        "import importlib, sys, threading\n"
        "from streamfit.engine import WORKER_PRELOAD\n"
        "for name in WORKER_PRELOAD: importlib.import_module(name)\n"
        "assert threading.active_count() == 1, threading.enumerate()\n"
        "before = set(sys.modules)\n"
        "from streamfit.store import open_store\n"
        f"assert open_store({path!r}).read_chunk(1).X.shape == (4, 16)\n"
        "late = sorted(m for m in set(sys.modules) - before if m.split('.')[0] in ('zarr', 'numcodecs', 'google_crc32c'))\n"
        "assert not late, late\n"
    )
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def chunk_value(_source, i, *, signal_at=-1, seconds=0.0):
    """Chunk i's value [i]; chunk `signal_at` sends this process SIGTERM first, and every chunk
    takes `seconds`."""
    import signal

    if i == signal_at:
        os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(seconds)
    return np.array([float(i)])


def test_a_map_reduce_that_asks_for_it_stops_between_chunks_after_a_sigterm(sigterm_guard):
    """In process: a SIGTERM during chunk 1 of 6 stops the pass before chunk 2 with Terminated,
    within stopping_on_sigterm (evaluate); outside it the pass runs to its end (a training
    step: the solver driver stops between steps, after a checkpoint)."""
    from streamfit.errors import Terminated

    seen = []

    def counted(source, i, **kw):
        seen.append(i)
        return chunk_value(source, i, **kw)

    with Engine(mode="inprocess") as eng:
        with pytest.raises(Terminated, match="^what is left$"), eng.stopping_on_sigterm("what is left"):
            eng.map_reduce(counted, None, range(6), signal_at=1)
        assert seen == [0, 1]
        assert eng.map_reduce(counted, None, range(6)) == [15.0]  # the stop was asked for, not by this pass


@pytest.mark.slow
def test_a_map_reduce_on_a_cluster_stops_soon_after_a_sigterm(sigterm_guard):
    """On a 2-worker cluster, a SIGTERM 1 s into a pass whose tasks each take 300 s: Terminated
    once the watch sees it (every WATCH_INTERVAL s), the tasks cancelled, not at the pass's end."""
    import signal

    from streamfit.errors import Terminated

    with Engine(mode="local", n_workers=2) as eng:
        eng.map_reduce(chunk_value, None, range(2))  # the workers are up
        timer = threading.Timer(1.0, os.kill, (os.getpid(), signal.SIGTERM))
        started = time.monotonic()
        timer.start()
        with pytest.raises(Terminated, match="^what is left$"), eng.stopping_on_sigterm("what is left"):
            eng.map_reduce(chunk_value, None, range(4), seconds=300.0)
        stopped_after = time.monotonic() - started
    timer.join()
    assert stopped_after < 150, stopped_after  # half a task: a loaded machine's scheduling, never the pass


_INTERRUPT_RACE = """
import logging, os, signal, sys, threading, time
from distributed.utils import LoopRunner, sync
if sys.argv[1] == "filtered":
    from streamfit.engine import _INTERRUPT_BEFORE_START
    logging.getLogger("tornado.application").addFilter(_INTERRUPT_BEFORE_START)
runner = LoopRunner(asynchronous=False)
runner.start()
runner.loop.add_callback(time.sleep, 0.5)  # the loop is busy: sync's coroutine has not started
threading.Timer(0.1, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
async def work():
    return 1
try:
    sync(runner.loop, work)
except KeyboardInterrupt:
    print("interrupted", flush=True)
time.sleep(1.0)  # the loop runs sync's cancel after the sleep
runner.stop()
"""


def test_a_ctrl_c_before_a_dask_call_starts_logs_no_traceback_of_distributed_s_cancel():
    """distributed.utils.sync's `cancel`, run after a Ctrl-C that came before its coroutine started,
    raises NameError in the event loop, which tornado logs with its traceback; the engine's filter
    drops that record (seen as a full-suite failure of the Ctrl-C test under load, session 30).
    The same race without the filter is the control: it shows the traceback."""
    import subprocess
    import sys

    def run(mode: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _INTERRUPT_RACE, mode], capture_output=True, text=True, timeout=60)

    plain, filtered = run("plain"), run("filtered")
    assert "interrupted" in plain.stdout and "interrupted" in filtered.stdout, (plain, filtered)
    assert "NameError: cannot access free variable 'future'" in plain.stderr, plain.stderr
    assert "NameError" not in filtered.stderr and "Traceback" not in filtered.stderr, filtered.stderr


def _with_dev_shm(options: str, code: str) -> subprocess.CompletedProcess:
    """`code` run by this Python in a mount namespace of its own (unshare, as root or in a user
    namespace) where /dev/shm is a fresh tmpfs mounted with `options`: a container's /dev/shm."""
    if shutil.which("unshare") is None:
        pytest.skip("needs unshare (util-linux) to give a process its own /dev/shm")
    user = [] if os.geteuid() == 0 else ["--user", "--map-root-user"]
    mount = f"mount -t tmpfs -o {options} tmpfs /dev/shm"
    probe = subprocess.run(["unshare", *user, "--mount", "sh", "-c", mount], capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip(f"this system lets no process mount its own /dev/shm ({probe.stderr.strip()})")
    command = f'{mount} && exec "$0" -c "$1"'
    return subprocess.run(
        ["unshare", *user, "--mount", "sh", "-c", command, sys.executable, code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
    )


def test_an_embedded_cluster_without_a_writable_dev_shm_is_one_line(tmp_path):
    """A container whose /dev/shm is read-only (or missing): the nannies cannot make the semaphores
    of the worker processes; one line naming /dev/shm and the fixes, before Dask starts (on main,
    Dask's tracebacks and 'RuntimeError: Nanny failed to start.'). With a writable /dev/shm of a
    container's default size the same check passes (the control)."""
    code = (
        "from streamfit.engine import Engine\n"
        "from streamfit.errors import StreamfitError\n"
        "try:\n"
        "    Engine(n_workers=2).start()\n"
        "except StreamfitError as e:\n"
        "    print('refused:', e)\n"
    )
    refused = _with_dev_shm("size=1m,ro", code)
    assert refused.returncode == 0, refused.stderr
    assert refused.stdout.startswith("refused: the embedded Dask cluster (--n-workers 2) cannot start its worker")
    assert "Read-only file system" in refused.stdout and "writable /dev/shm" in refused.stdout
    assert "Nanny" not in refused.stdout + refused.stderr
    control = _with_dev_shm(
        "size=64m",
        "from streamfit.engine import _require_semaphores\n_require_semaphores(2)\nprint('semaphores made')\n",
    )
    assert control.returncode == 0, control.stderr
    assert control.stdout == "semaphores made\n"
