"""Compiled passes over dense in-memory arrays (InMemoryStore's X): to CSR in two passes
(scipy's `csr_matrix(dense)` goes through COO — a boolean mask, `nonzero`, a gather and a sort
check — which was most of an in-memory fit of a small dense regression: 2.6 of 5.7 ms on a
15 142 × 9 set), and the stored entries and non-finite values per column in one
(`column_counts`: numpy's per-column reductions over a C-ordered array cost ~20 ns a row each)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamfit._jit import kernel


@kernel()
def _row_counts(X: np.ndarray, indptr: np.ndarray) -> None:
    for i in range(X.shape[0]):
        count = 0
        for j in range(X.shape[1]):
            if X[i, j] != 0:  # NaN counts as stored, as in scipy
                count += 1
        indptr[i + 1] = indptr[i] + count


@kernel()
def _fill(X: np.ndarray, indptr: np.ndarray, indices: np.ndarray, data: np.ndarray) -> None:
    for i in range(X.shape[0]):
        k = indptr[i]
        for j in range(X.shape[1]):
            v = X[i, j]
            if v != 0:
                indices[k] = j
                data[k] = v
                k += 1


def dense_to_csr(X) -> sp.csr_matrix:
    """csr_matrix(X, dtype=float64) of a 2-D array-like, element for element: the stored
    entries are X's non-zeros (and NaNs) in row-major order; int32 indices and indptr while
    they fit, as scipy chooses."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    if X.ndim != 2:
        return sp.csr_matrix(X, dtype=np.float64)  # scipy's own error for other shapes
    n, d = X.shape
    index_dtype = np.int32 if n * d < 2**31 and d < 2**31 else np.int64
    indptr = np.zeros(n + 1, dtype=index_dtype)
    _row_counts(X, indptr)
    nnz = int(indptr[-1])
    indices = np.empty(nnz, dtype=index_dtype)
    data = np.empty(nnz, dtype=np.float64)
    _fill(X, indptr, indices, data)
    return sp.csr_matrix((data, indices, indptr), shape=(n, d))


@kernel()
def _column_counts(X: np.ndarray, counts: np.ndarray) -> int:
    nonfinite = 0
    for i in range(X.shape[0]):
        for j in range(X.shape[1]):
            v = X[i, j]
            if v != 0:  # NaN counts as stored, as in scipy
                counts[j] += 1
                if not np.isfinite(v):
                    nonfinite += 1
    return nonfinite


def column_counts(X: np.ndarray) -> tuple[np.ndarray, int]:
    """(entries per column that a CSR form of X stores, int64 (n_features,); NaN and inf values)
    of a 2-D float64 array: the column counts of `dense_to_csr(X)` (its `indices` counted) and
    the non-finite entries among its `data`, without making it."""
    counts = np.zeros(X.shape[1], dtype=np.int64)
    nonfinite = _column_counts(np.ascontiguousarray(X, dtype=np.float64), counts)
    return counts, int(nonfinite)
