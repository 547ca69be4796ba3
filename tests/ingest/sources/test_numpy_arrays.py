""".npy/.npz reader, dense and scipy sparse."""

import json

import numpy as np
import pytest
import scipy.sparse as sp

from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, DenseBatch, SparseBatch, open_source

RNG = np.random.default_rng(1)
X = RNG.normal(size=(9, 3))
Y = np.array(["a", "b", "c"] * 3)


@pytest.mark.parametrize("batch_size", [1, 4, 8192])
@pytest.mark.parametrize("compressed", [False, True])
def test_npz(read, tmp_path, batch_size, compressed):
    path = str(tmp_path / "data.npz")
    (np.savez_compressed if compressed else np.savez)(path, X=X, y=Y)
    source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size)
    assert source.kind == "dense" and source.multilabel is False
    batches = read.batches(source, batch_size)
    assert all(isinstance(b, DenseBatch) for b in batches)
    assert np.array_equal(np.vstack([b.X for b in batches]), X)
    assert read.labels(batches) == Y.tolist()
    assert read.locations(batches) == [f"{path}:row {r}" for r in range(9)]
    assert source.n_read == 9


@pytest.mark.parametrize("batch_size", [1, 4, 8192])
def test_npy_pair_is_memory_mapped(read, tmp_path, batch_size, monkeypatch):
    x_path, y_path = str(tmp_path / "X.npy"), str(tmp_path / "y.npy")
    np.save(x_path, X.astype(np.float32))
    np.save(y_path, np.arange(9))
    modes = []
    load = np.load

    def spy(path, *args, **kwargs):
        modes.append(kwargs.get("mmap_mode"))
        return load(path, *args, **kwargs)

    monkeypatch.setattr(np, "load", spy)
    source = open_source(x_path, policy=BadRecordPolicy(), batch_size=batch_size, y_path=y_path)
    batches = read.batches(source, batch_size)
    assert set(modes) == {"r"}
    assert np.array_equal(np.vstack([b.X for b in batches]), X.astype(np.float32).astype(np.float64))
    assert read.labels(batches) == [str(i) for i in range(9)]
    assert not isinstance(batches[0].X, np.memmap)


def test_npy_needs_labels(tmp_path):
    path = str(tmp_path / "X.npy")
    np.save(path, X)
    with pytest.raises(InputError, match="X.npy: a .npy file holds no labels.*y_path"):
        open_source(path, policy=BadRecordPolicy())


def test_npz_keys_and_indicator(read, tmp_path):
    path = str(tmp_path / "data.npz")
    np.savez(path, features=X[:2], targets=np.array([[1, 1], [0, 1]]))
    source = open_source(path, policy=BadRecordPolicy(), x_dataset="features", y_dataset="targets")
    assert source.multilabel is True
    assert read.labels(read.batches(source)) == [["0", "1"], ["1"]]


def test_npz_missing_key(tmp_path):
    path = str(tmp_path / "data.npz")
    np.savez(path, features=X, y=Y)
    with pytest.raises(InputError) as e:
        open_source(path, policy=BadRecordPolicy())
    assert "no array 'X'" in e.value.problem and "--x-dataset" in e.value.hint and "features, y" in e.value.hint


@pytest.mark.parametrize("batch_size", [1, 4, 8192])
def test_scipy_sparse_npz(read, tmp_path, batch_size):
    M = sp.random(9, 40, density=0.2, format="csr", random_state=np.random.default_rng(2))
    path, y_path = str(tmp_path / "m.npz"), str(tmp_path / "y.npy")
    sp.save_npz(path, M)
    np.save(y_path, np.array([0.0, 1.0, 1.5] * 3))
    source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size, y_path=y_path)
    assert source.kind == "sparse"
    batches = read.batches(source, batch_size)
    assert all(isinstance(b, SparseBatch) and b.X.shape[1] == 40 for b in batches)
    assert (read.sparse(batches) != M).nnz == 0
    assert read.labels(batches) == ["0", "1", "1.5"] * 3


def test_scipy_sparse_npz_needs_labels(tmp_path):
    path = str(tmp_path / "m.npz")
    sp.save_npz(path, sp.eye(3, format="csr"))
    with pytest.raises(InputError, match="holds no labels.*y_path"):
        open_source(path, policy=BadRecordPolicy())


def test_not_numpy(tmp_path):
    path = tmp_path / "x.npz"
    path.write_text("hello")
    with pytest.raises(InputError, match="x.npz: not a readable .npy/.npz file"):
        open_source(str(path), policy=BadRecordPolicy())


def test_row_count_mismatch(tmp_path):
    path = str(tmp_path / "data.npz")
    np.savez(path, X=X, y=Y[:3])
    with pytest.raises(InputError, match="has 9 rows but array 'y' has 3"):
        open_source(path, policy=BadRecordPolicy())


def bad_inputs(tmp_path, kind):
    x, y = X.copy(), Y.astype(object)
    if kind == "nan":
        x[5, 0] = np.nan
    elif kind == "overflow":  # finite in float64, inf once stored as float32
        x[5, 0] = 1e300
    elif kind == "empty-label":
        y[5] = ""
    path = str(tmp_path / "data.npz")
    np.savez(path, X=x, y=y.astype(str))
    return path, x


def bad_sparse(tmp_path):
    M = sp.random(9, 5, density=0.5, format="csr", random_state=np.random.default_rng(3))
    M.data[M.indptr[5]] = np.inf
    path, y_path = str(tmp_path / "m.npz"), str(tmp_path / "y.npy")
    sp.save_npz(path, M)
    np.save(y_path, np.arange(9))
    return path, y_path, M


BAD = {"nan": "NaN or infinite value", "overflow": "beyond float32's ±3.4e38", "empty-label": "the label is empty"}


@pytest.mark.parametrize("kind", BAD)
def test_bad_record_error_mode(tmp_path, kind):
    path, _ = bad_inputs(tmp_path, kind)
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:row 5" and BAD[kind] in e.value.problem


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("batch_size", [1, 4, 8192])
def test_bad_record_skip_and_quarantine(read, tmp_path, quarantine, kind, batch_size):
    path, x = bad_inputs(tmp_path, kind)
    source = open_source(path, policy=quarantine, batch_size=batch_size)
    batches = read.batches(source, batch_size)
    keep = [r for r in range(9) if r != 5]
    assert np.array_equal(np.vstack([b.X for b in batches]), x[keep])
    assert source.n_read == 9 and quarantine.n_skipped == 1
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:row 5" and BAD[kind] in entry["problem"]


@pytest.mark.parametrize("batch_size", [1, 4, 8192])
def test_sparse_bad_record_skip_and_quarantine(read, tmp_path, quarantine, batch_size):
    path, y_path, M = bad_sparse(tmp_path)
    source = open_source(path, policy=quarantine, batch_size=batch_size, y_path=y_path)
    batches = read.batches(source, batch_size)
    keep = [r for r in range(9) if r != 5]
    assert (read.sparse(batches) != M[keep]).nnz == 0
    assert read.labels(batches) == [str(r) for r in keep]
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:row 5" and "inf" in entry["raw"]
    with pytest.raises(InputError, match="m.npz:row 5: NaN or infinite value"):
        list(open_source(path, policy=BadRecordPolicy(), y_path=y_path))


def test_no_y_dataset_reads_unlabeled_rows(read, tmp_path):
    np.save(tmp_path / "X.npy", X)
    np.savez(tmp_path / "x.npz", X=X)
    sp.save_npz(tmp_path / "s.npz", sp.csr_matrix(X))
    for name in ("X.npy", "x.npz", "s.npz"):
        source = open_source(str(tmp_path / name), policy=BadRecordPolicy(), y_dataset=None)
        batches = read.batches(source)
        assert read.labels(batches) == [None] * 9 and source.multilabel is False
        assert np.allclose(sp.vstack([sp.csr_matrix(b.X) for b in batches]).toarray(), X)


@pytest.mark.parametrize("column", [-1, 5, 2**32 + 1])
def test_scipy_npz_column_outside_its_shape_is_a_bad_record(read, tmp_path, column):
    """A damaged scipy .npz (the loader does not check indices against the shape): the row is
    refused with its location, and the other rows come through untouched."""
    path, y_path = str(tmp_path / "X.npz"), str(tmp_path / "y.npy")
    indices = np.array([0, column, 3, 1], dtype=np.int64)
    M = sp.csr_matrix((np.array([1.0, 2.0, 3.0, 4.0]), indices, np.array([0, 2, 3, 4])), shape=(3, 5))
    sp.save_npz(path, M, compressed=False)
    np.save(y_path, np.array([0, 1, 0]))
    with pytest.raises(InputError, match=rf"X.npz:row 0: column index {column} is outside the matrix's 5 columns"):
        read.batches(open_source(path, policy=BadRecordPolicy(), y_path=y_path), 8192)
    quarantine = BadRecordPolicy("quarantine", str(tmp_path / "q.jsonl"))
    batches = read.batches(open_source(path, policy=quarantine, y_path=y_path), 8192)
    quarantine.close()
    assert quarantine.n_skipped == 1 and read.locations(batches) == [f"{path}:row 1", f"{path}:row 2"]
    assert json.loads(open(tmp_path / "q.jsonl").read())["raw"] == f"0:1.0 {column}:2.0"  # the row as read
    kept = sp.vstack([b.X for b in batches]).toarray()
    assert np.array_equal(kept, [[0, 0, 0, 3, 0], [0, 4, 0, 0, 0]])


def test_an_object_label_array_is_refused_never_unpickled(tmp_path):
    path = tmp_path / "objects.npz"
    np.savez(path, X=np.ones((3, 2)), y=np.array([{"a": 1}, 1, 2], dtype=object))
    with pytest.raises(InputError, match=r"objects.npz: array 'y' holds Python objects, which are not read \(save"):
        open_source(str(path), policy=BadRecordPolicy())
