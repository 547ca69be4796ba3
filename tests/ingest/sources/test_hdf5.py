"""HDF5 reader."""

from unittest import mock

import h5py
import numpy as np
import pytest

from streamfit.errors import InputError
from streamfit.ingest.sources import BadRecordPolicy, DenseBatch, open_source

RNG = np.random.default_rng(0)
X = RNG.normal(size=(10, 4))
Y = np.array([0, 1, 2, 1, 0, 2, 2, 1, 0, 1])


def write(tmp_path, name="data.h5", **datasets):
    path = str(tmp_path / name)
    with h5py.File(path, "w") as f:
        for key, value in datasets.items():
            f.create_dataset(key, data=value)
    return path


@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_good_file(read, tmp_path, batch_size):
    path = write(tmp_path, X=X, y=Y)
    source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size)
    assert source.kind == "dense" and source.multilabel is False
    batches = read.batches(source, batch_size)
    assert all(isinstance(b, DenseBatch) for b in batches)
    assert np.array_equal(np.vstack([b.X for b in batches]), X)
    assert read.labels(batches) == [str(v) for v in Y]
    assert read.locations(batches) == [f"{path}:row {r}" for r in range(10)]
    assert source.n_read == 10


def test_reads_row_slices_only(read, tmp_path):
    path = write(tmp_path, X=X, y=Y)
    slices = []
    getitem = h5py.Dataset.__getitem__

    def spy(self, key):
        slices.append(key)
        return getitem(self, key)

    with mock.patch.object(h5py.Dataset, "__getitem__", spy):
        read.batches(open_source(path, policy=BadRecordPolicy(), batch_size=4))
    assert all(isinstance(k, slice) and k.stop - k.start <= 4 for k in slices)


def test_groups_string_labels_and_integer_x(read, tmp_path):
    path = str(tmp_path / "data.hdf5")
    with h5py.File(path, "w") as f:
        f["train/features"] = np.arange(6, dtype=np.int32).reshape(3, 2)
        f.create_dataset("train/names", data=["a", "b", "é"], dtype=h5py.string_dtype())
        f["fixed"] = np.array([b"x", b"y", b"z"])
    source = open_source(path, policy=BadRecordPolicy(), x_dataset="train/features", y_dataset="train/names")
    batches = read.batches(source)
    assert batches[0].X.dtype == np.float64 and batches[0].X.tolist() == [[0, 1], [2, 3], [4, 5]]
    assert read.labels(batches) == ["a", "b", "é"]
    batches = read.batches(open_source(path, policy=BadRecordPolicy(), x_dataset="train/features", y_dataset="fixed"))
    assert read.labels(batches) == ["x", "y", "z"]


def test_float_labels(read, tmp_path):
    path = write(tmp_path, X=X[:3], y=np.array([1.0, -1.0, 2.5]))
    assert read.labels(read.batches(open_source(path, policy=BadRecordPolicy()))) == ["1", "-1", "2.5"]


def test_indicator_labels_are_multilabel(read, tmp_path):
    indicator = np.array([[1, 0, 1], [0, 0, 0], [0, 1, 0]], dtype=np.int8)
    path = write(tmp_path, X=X[:3], y=indicator)
    source = open_source(path, policy=BadRecordPolicy(), batch_size=2)
    assert source.multilabel is True
    assert read.labels(read.batches(source, 2)) == [["0", "2"], [], ["1"]]


def test_missing_dataset_lists_the_datasets(tmp_path):
    path = write(tmp_path, features=X, y=Y)
    with pytest.raises(InputError) as e:
        open_source(path, policy=BadRecordPolicy())
    assert e.value.location == path and "no dataset 'X'" in e.value.problem
    assert "--x-dataset" in e.value.hint and "features" in e.value.hint and "y" in e.value.hint
    with pytest.raises(InputError, match="no dataset 'labels'.*--y-dataset"):
        open_source(path, policy=BadRecordPolicy(), x_dataset="features", y_dataset="labels")


@pytest.mark.parametrize(
    "x, y, problem",
    [
        (X[0], Y, "not (records, features)"),
        (X, Y[:5], "has 10 rows but dataset 'y' has 5"),
        (X, np.zeros((10, 2, 2)), "not (records,) or (records, classes)"),
        (np.array([["a"]] * 10, dtype="S1"), Y, "not numbers"),
    ],
)
def test_bad_shapes(tmp_path, x, y, problem):
    path = write(tmp_path, X=x, y=y)
    with pytest.raises(InputError, match=problem.replace("(", r"\(").replace(")", r"\)")):
        open_source(path, policy=BadRecordPolicy())


def test_not_hdf5(tmp_path):
    path = tmp_path / "x.h5"
    path.write_text("hello")
    with pytest.raises(InputError, match="x.h5: not a readable HDF5 file"):
        open_source(str(path), policy=BadRecordPolicy())


def bad_file(tmp_path, kind):
    x, y = X.copy(), Y.astype(float)
    if kind == "nan":
        x[4, 1] = np.nan
    elif kind == "inf":
        x[4, 3] = -np.inf
    elif kind == "nan-label":
        y[4] = np.nan
    elif kind == "indicator":
        y = np.eye(10)
        y[4, 2] = 2
    return write(tmp_path, X=x, y=y), x, y


BAD = {
    "nan": "NaN or infinite value",
    "inf": "NaN or infinite value",
    "nan-label": "label is NaN",
    "indicator": "other than 0 and 1",
}


@pytest.mark.parametrize("kind", BAD)
def test_bad_record_error_mode(tmp_path, kind):
    path, _, _ = bad_file(tmp_path, kind)
    with pytest.raises(InputError) as e:
        list(open_source(path, policy=BadRecordPolicy()))
    assert e.value.location == f"{path}:row 4" and BAD[kind] in e.value.problem


@pytest.mark.parametrize("kind", BAD)
@pytest.mark.parametrize("batch_size", [1, 3, 8192])
def test_bad_record_skip_and_quarantine(read, tmp_path, quarantine, kind, batch_size):
    path, x, _ = bad_file(tmp_path, kind)
    source = open_source(path, policy=quarantine, batch_size=batch_size)
    batches = read.batches(source, batch_size)
    keep = [r for r in range(10) if r != 4]
    assert np.array_equal(np.vstack([b.X for b in batches]), x[keep])
    assert read.locations(batches) == [f"{path}:row {r}" for r in keep]
    assert source.n_read == 10 and quarantine.n_skipped == 1
    [entry] = quarantine.entries()
    assert entry["location"] == f"{path}:row 4" and BAD[kind] in entry["problem"]
    assert entry["raw"].startswith("[") and entry["raw"].count(",") == 3


def test_no_y_dataset_reads_unlabeled_rows(read, tmp_path):
    source = open_source(write(tmp_path, X=X), policy=BadRecordPolicy(), y_dataset=None)
    batches = read.batches(source)
    assert read.labels(batches) == [None] * 10 and np.array_equal(np.vstack([b.X for b in batches]), X)


@pytest.mark.parametrize("empty, flag", [("X", "--x-dataset"), ("y", "--y-dataset")])
def test_a_dataset_without_values_is_named(tmp_path, empty, flag):
    path = tmp_path / "empty.h5"
    with h5py.File(path, "w") as f:
        f["X" if empty == "y" else "y"] = np.ones((3, 4)) if empty == "y" else np.zeros(3)
        f.create_dataset(empty, dtype="f8")  # an HDF5 null dataspace: shape None
    with pytest.raises(InputError, match=f"empty.h5: dataset '{empty}' holds no values .*check {flag}"):
        open_source(str(path), policy=BadRecordPolicy())


def _sparse_group(path, layout, S, y):
    """S (scipy sparse) written as people store a sparse matrix in HDF5: anndata's group
    (encoding-type and shape attributes), h5sparse's (h5sparse_format, h5sparse_shape), or a
    group with a shape attribute only."""
    with h5py.File(path, "w") as f:
        g = f.create_group("X")
        if layout == "anndata":
            g.attrs["encoding-type"], g.attrs["encoding-version"] = S.format + "_matrix", "0.1.0"
            g.attrs["shape"] = S.shape
        elif layout == "h5sparse":
            g.attrs["h5sparse_format"], g.attrs["h5sparse_shape"] = S.format, S.shape
        else:
            g.attrs["shape"] = S.shape
        g["data"], g["indices"], g["indptr"] = S.data, S.indices, S.indptr
        f["y"] = y


@pytest.mark.parametrize("layout", ["anndata", "h5sparse", "shape only"])
@pytest.mark.parametrize("batch_size", [1, 4, 8192])
def test_a_csr_group_is_read_as_sparse_rows_a_slice_at_a_time(read, tmp_path, layout, batch_size):
    """A sparse matrix stored as a CSR group (anndata, h5sparse) reads as the rows scipy holds,
    reading only the rows' slices of indptr and of the entries; before, `--x-dataset X` said
    "no dataset 'X'" for the group."""
    import scipy.sparse as sp

    dense = sp.random(10, 7, density=0.3, random_state=2).toarray()
    dense[3] = 0  # an empty row
    S = sp.csr_matrix(dense)
    path = str(tmp_path / "sparse.h5")
    _sparse_group(path, layout, S, Y)
    slices = []
    getitem = h5py.Dataset.__getitem__

    def spy(self, key):
        slices.append((self.name, key))
        return getitem(self, key)

    with mock.patch.object(h5py.Dataset, "__getitem__", spy):
        source = open_source(path, policy=BadRecordPolicy(), batch_size=batch_size)
        batches = read.batches(source, batch_size)
    assert source.kind == "sparse" and source.x_columns == 7
    got = sp.vstack([b.X for b in batches]).tocsr()
    assert got.shape == (10, 7) and (got != S).nnz == 0
    assert read.labels(batches) == [str(v) for v in Y] and source.n_read == 10
    assert all(isinstance(key, slice) for _, key in slices)
    pointers = [key for name, key in slices if name == "/X/indptr"]
    assert pointers and all(k.stop - k.start <= batch_size + 1 for k in pointers)
    for part in ("/X/data", "/X/indices"):  # every entry read once, a batch's rows at a time
        assert sum(k.stop - k.start for name, k in slices if name == part) == S.nnz


def test_a_csc_group_and_other_groups_are_refused_with_the_fix(tmp_path):
    import scipy.sparse as sp

    S = sp.random(10, 7, density=0.3, format="csc", random_state=2)
    _sparse_group(str(tmp_path / "csc.h5"), "anndata", S, Y)
    with pytest.raises(InputError, match="group 'X' holds a CSC matrix .*write it by rows"):
        open_source(str(tmp_path / "csc.h5"), policy=BadRecordPolicy())
    with h5py.File(tmp_path / "other.h5", "w") as f:
        f["X/values"], f["y"] = X, Y
    with pytest.raises(InputError, match=r"group 'X' is not a CSR matrix .*set --x-dataset"):
        open_source(str(tmp_path / "other.h5"), policy=BadRecordPolicy())
