import numpy as np
import pytest
import scipy.sparse as sp

from streamfit.store.dense_kernels import dense_to_csr


@pytest.mark.parametrize("order", ["C", "F"])
@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int64])
def test_dense_to_csr_is_scipys_csr_matrix_entry_for_entry(order, dtype):
    """The same stored entries (zeros dropped, NaN kept), in the same order, with scipy's index
    dtype, for C and Fortran arrays of several dtypes, empty rows and an all-zero column."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(57, 7)) * (rng.random((57, 7)) < 0.4)
    X[3] = 0
    X[:, 5] = 0
    if dtype is np.int64:
        X = np.round(X * 3)
    else:
        X[10, 2] = np.nan
    X = np.asarray(X, dtype=dtype, order=order)
    ours, theirs = dense_to_csr(X), sp.csr_matrix(X, dtype=np.float64)
    for name in ("indptr", "indices", "data"):
        np.testing.assert_array_equal(getattr(ours, name), getattr(theirs, name))
        assert getattr(ours, name).dtype == getattr(theirs, name).dtype
    assert ours.shape == theirs.shape


def test_dense_to_csr_of_no_rows_and_of_a_non_matrix():
    assert dense_to_csr(np.zeros((0, 4))).shape == (0, 4)
    with pytest.raises(ValueError):
        dense_to_csr(np.zeros((2, 2, 2)))


@pytest.mark.parametrize("order", ["C", "F"])
def test_column_counts_are_those_of_the_csr_form(order):
    """Entries per column that dense_to_csr stores (NaN and inf included, zeros and -0.0 not) and
    the non-finite ones among them."""
    from streamfit.store.dense_kernels import column_counts

    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 6)) * (rng.random((40, 6)) < 0.5)
    X[:, 4] = 0
    X[2, 1], X[3, 1], X[7, 0], X[8, 2] = np.nan, np.inf, -np.inf, -0.0
    X = np.asarray(X, order=order)
    counts, nonfinite = column_counts(X)
    csr = dense_to_csr(X)
    np.testing.assert_array_equal(counts, np.bincount(csr.indices, minlength=6))
    assert counts.dtype == np.int64 and nonfinite == int((~np.isfinite(csr.data)).sum()) == 3
