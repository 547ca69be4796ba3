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
