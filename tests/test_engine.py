import os
import threading
import time

import numpy as np
import pytest

from streamfit.engine import Engine, tree_sum
from streamfit.store import InMemoryStore, open_store


def chunk_gram(source, i, scale=1.0):
    c = source.read_chunk(i)
    X = c.X.toarray().astype(np.float64)
    return X.T @ X * scale, float(c.n_rows)


def chunk_sum_of(source, i, vector):
    return float(vector.sum())


def chunk_rows(source, i):
    return source.read_chunk(i).row_start


def test_tree_sum_is_pairwise_fixed():
    vals = [np.float64(1 / (i + 3)) for i in range(7)]
    a, b, c, d, e, f, g = vals
    assert tree_sum(vals) == ((a + b) + (c + d)) + ((e + f) + g)


def test_inprocess_map_reduce_equals_dense(digits):
    X, y, classes = digits
    src = InMemoryStore(X, y, classes, chunk_rows=256)
    with Engine(mode="inprocess") as eng:
        G, n = eng.map_reduce(chunk_gram, src, range(src.n_chunks), scale=2.0)
        starts = eng.map(chunk_rows, src, range(src.n_chunks))
    Xd = X.toarray().astype(np.float64)
    np.testing.assert_allclose(G, 2 * Xd.T @ Xd, rtol=1e-12)
    assert n == 1797 and starts == list(range(0, 1797, 256))


def test_local_cluster_bitwise_equals_inprocess(digits, write_store):
    X, y, classes = digits
    store = open_store(write_store(X, y, classes, chunk_rows=100))
    with Engine(mode="inprocess") as eng:
        ref = eng.map_reduce(chunk_gram, store, range(store.n_chunks), scale=2.0)
    with Engine(mode="local", n_workers=2) as eng:
        assert eng.total_threads == 2
        got = eng.map_reduce(chunk_gram, store, range(store.n_chunks), scale=2.0)
        starts = eng.map(chunk_rows, store, range(store.n_chunks))
        # large keyword arguments, twice under the same name (Client.map alone would collide)
        for _ in range(2):
            big = eng.map_reduce(chunk_sum_of, store, range(store.n_chunks), vector=np.arange(200_000.0))
            assert big == store.n_chunks * np.arange(200_000.0).sum()
    assert np.array_equal(got[0], ref[0]) and got[1] == ref[1]
    assert starts == list(range(0, 1797, 100))


def test_unreachable_scheduler_is_a_clear_error():
    from streamfit.errors import StreamfitError

    with pytest.raises(StreamfitError, match="cannot reach the Dask scheduler"):
        Engine("tcp://127.0.0.1:9", connect_timeout="1s").start()


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


def test_local_cluster_survives_killed_workers(tmp_path):
    """Workers killed under a map, inside a map_reduce's leaves and at its final sum: the work
    runs again on the remaining (or restarted) workers and the result is bitwise the in-process one."""
    vector = np.arange(20_000.0)  # scattered (above BROADCAST_BYTES)
    n = 12
    with Engine(mode="inprocess") as eng:
        ref = eng.map_reduce(chunk_dies_once, None, range(n), vector=vector, marker="", die_at=-1)
        ref_map = eng.map(chunk_dies_once, None, range(n), vector=vector, marker="", die_at=-1)
    with Engine(mode="local", n_workers=2) as eng:
        got_map = eng.map(chunk_dies_once, None, range(n), vector=vector, marker=str(tmp_path / "a"), die_at=3)
        got = eng.map_reduce(chunk_dies_once, None, range(n), vector=vector, marker=str(tmp_path / "b"), die_at=7)
        root = eng.map_reduce(chunk_dies_once, None, range(n), vector=vector, marker=str(tmp_path / "c"),
                              die_at=-1, total=n)
    assert all((tmp_path / m).exists() for m in "abc")  # every worker death happened
    assert all(np.array_equal(a, b) for a, b in zip(got_map, ref_map))
    assert np.array_equal(got, ref) and np.array_equal(root.value, ref) and root.n == n


def test_a_pass_that_keeps_losing_workers_is_a_clear_error(monkeypatch):
    from streamfit import engine as engine_mod
    from streamfit.errors import StreamfitError

    calls = []

    def lost(self, kwargs):
        calls.append(1)
        raise engine_mod._WorkerLost("scatter failed: KeyError: 'tcp://127.0.0.1:1'")

    monkeypatch.setattr(engine_mod.Engine, "_submit_args", lost)
    eng = Engine(mode="inprocess")
    eng.client = object()  # as if connected: the Dask path
    with pytest.raises(StreamfitError, match="a Dask worker was lost.*--resume"):
        eng.map_reduce(chunk_rows, None, range(3), desc="test: pass")
    assert len(calls) == engine_mod.MAX_ATTEMPTS
    with pytest.raises(StreamfitError, match="a Dask worker was lost"):
        eng.map(chunk_rows, None, range(3))


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
        assert time.monotonic() - t < 10
        cluster.scale(1)
        with Engine(address, worker_timeout=2.0) as eng:
            assert eng.map_reduce(chunk_slow, None, range(2)) == 1.0
            timer = threading.Timer(0.5, cluster.scale, (0,))
            timer.start()
            t = time.monotonic()
            with pytest.raises(StreamfitError, match=f"scheduler at {address} has had no workers.*dask worker"):
                eng.map_reduce(chunk_slow, None, range(40))
            assert time.monotonic() - t < 15
            timer.join()
