import numpy as np
import pytest
import scipy.sparse as sp

from streamfit.errors import StreamfitError
from streamfit.model import LinearModel, load_model
from streamfit.store import InMemoryStore


def _model(sparse, multilabel=False):
    rng = np.random.default_rng(0)
    W = rng.normal(size=(4, 30)) * (rng.random((4, 30)) < 0.3)
    return LinearModel(
        sp.csr_matrix(W) if sparse else W,
        rng.normal(size=4),
        classes=list("abcd"),
        n_features=30,
        multilabel=multilabel,
        featurizer={"hashing": None},
        solver="test",
        params={"lam": 1.0},
    ), W


@pytest.mark.parametrize("sparse", [False, True])
def test_save_load_scores_identical(tmp_path, sparse):
    m, W = _model(sparse)
    X = sp.random(50, 30, density=0.2, format="csr", random_state=2)
    m.save(str(tmp_path / "model"))
    m2 = load_model(str(tmp_path))  # a run directory works too
    assert sp.issparse(m2.coef_) == sparse
    np.testing.assert_array_equal(m2.decision_function(X), m.decision_function(X))
    np.testing.assert_allclose(m.decision_function(X), X @ W.T + m.intercept_)
    assert list(m2.classes_) == list("abcd") and m2.params == {"lam": 1.0}


def test_predict_topk_order_and_store_input():
    m, W = _model(False)
    X = sp.random(40, 30, density=0.3, format="csr", random_state=3)
    S = m.decision_function(X)
    top, scores = m.predict_topk(X, 3)
    assert np.array_equal(top, np.argsort(-S, axis=1)[:, :3])
    assert np.array_equal(m.predict(X), m.classes_[top[:, 0]])
    src = InMemoryStore(X, np.zeros(40, dtype=np.int32), list("abcd"), chunk_rows=7)
    assert np.array_equal(m.decision_function(src), S)


def test_damaged_model_refused(tmp_path):
    m, _ = _model(False)
    m.save(str(tmp_path / "model"))
    p = tmp_path / "model" / "arrays.npz"
    raw = bytearray(p.read_bytes())
    raw[len(raw) // 2] ^= 1
    p.write_bytes(bytes(raw))
    with pytest.raises(StreamfitError, match="checksum"):
        load_model(str(tmp_path / "model"))


def test_wrong_width_refused():
    m, _ = _model(False)
    with pytest.raises(StreamfitError, match="31 features"):
        m.decision_function(sp.csr_matrix((2, 31)))


@pytest.mark.parametrize(
    "n_features, classes, problem",
    [
        (31, list("abcd"), "has 31 features, the model 30"),
        (30, list("abc"), "has 3 classes, the model 4"),
        (30, list("abdc"), "its class 2 is 'd', the model's is 'c'"),
    ],
)
def test_check_store_names_what_differs(n_features, classes, problem):
    m, _ = _model(False)
    store = InMemoryStore(sp.csr_matrix((2, n_features)), np.zeros(2, dtype=np.int64), classes)
    store.path = "test.zarr"
    with pytest.raises(StreamfitError, match=f"test.zarr: {problem}; ingest it with --like TRAIN_STORE"):
        m.check_store(store)
    m.check_store(InMemoryStore(sp.csr_matrix((2, 30)), np.zeros(2, dtype=np.int64), list("abcd")))
