"""Tests of streamfit.solvers.stagewise_kernels."""

from fractions import Fraction

import numpy as np
import pytest
import scipy.sparse as sp

from streamfit.solvers.stagewise_kernels import rowwise_matmul, sparse_gram_upper, symmetric_from_upper, upper_triangle

# (rows, inner, columns): the stagewise products ZΩ (PCA'd inputs times a frequency block), AW
# (a design panel times a stage's weights), the calibrations and the predictions' columns, and
# odd sizes around the vector widths.
SHAPES = [(1030, 16, 1000), (1030, 1001, 26), (301, 2000, 10), (257, 27, 26), (64, 26, 10), (33, 5, 1), (9, 1, 7)]


def _operands(shape, dtype, seed=0):
    n, m, k = shape
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, m)).astype(dtype), rng.standard_normal((m, k)).astype(dtype)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape", SHAPES)
def test_rowwise_matmul_row_does_not_depend_on_other_rows(shape, dtype):
    """The property the stagewise promises rest on (scores replayed bitwise in any chunk or batch):
    a row's product is the same bits computed with all rows, alone, within a shuffled subset, an
    odd or even number of rows, at another row offset, or from a non-contiguous view. Checked on
    the property itself, so it fails on any CPU where the kernel would depend on its neighbours
    (as OpenBLAS's SkylakeX kernel does on AVX-512)."""
    A, B = _operands(shape, dtype)
    n = A.shape[0]
    full = rowwise_matmul(A, B)
    assert full.dtype == dtype and full.shape == (n, B.shape[1]) and full.flags.c_contiguous
    rng = np.random.default_rng(1)
    for i in rng.choice(n, size=min(n, 40), replace=False):
        assert np.array_equal(rowwise_matmul(A[i : i + 1], B)[0], full[i])
    subset = rng.permutation(n)[: max(1, n // 3)]
    assert np.array_equal(rowwise_matmul(A[subset], B), full[subset])
    for count in (n - 1, n - 2, max(1, n // 2) | 1, max(2, n // 2) & ~1):  # odd and even row counts
        assert np.array_equal(rowwise_matmul(A[:count], B), full[:count])
    assert np.array_equal(rowwise_matmul(A[3:], B), full[3:])  # another row offset
    assert np.array_equal(rowwise_matmul(A[1::2], B), full[1::2])  # a strided view
    assert np.array_equal(rowwise_matmul(np.asfortranarray(A), np.asfortranarray(B)), full)
    stacked = np.vstack([rng.standard_normal((5, A.shape[1])).astype(dtype), A[:7]])  # other rows before it
    assert np.array_equal(rowwise_matmul(stacked, B)[5:], full[:7])


@pytest.mark.parametrize("shape", SHAPES)
def test_rowwise_matmul_is_the_product(shape):
    """Close to the BLAS product: each element within 1e-12 of it relative to Σ_j |A_ij B_jl|
    (the scale of the rounding of any summation order); float32 operands within 1e-5 of the
    float64 product."""
    A, B = _operands(shape, np.float64)
    scale = np.abs(A) @ np.abs(B)
    assert np.all(np.abs(rowwise_matmul(A, B) - A @ B) <= 1e-12 * scale)
    A32, B32 = A.astype(np.float32), B.astype(np.float32)
    exact32 = A32.astype(np.float64) @ B32.astype(np.float64)
    assert np.all(np.abs(rowwise_matmul(A32, B32) - exact32) <= 1e-5 * scale)


def test_rowwise_matmul_sums_in_column_order():
    """Each element is the left-to-right sum (…((0 + a₀b₀) + a₁b₁) + …), every product and sum
    rounded to float64: checked against that recurrence in exact rational arithmetic, with
    terms whose sum depends on the order (1e16 + 1 − 1e16 is 0 left to right, 1 otherwise) and
    a product whose fused multiply-add would round differently (last row, last column)."""
    A = np.array(
        [[1e16, 1.0, -1e16, 0.5], [1.0, 1e16, 1.0, -1e16], [3.0, -2.0, 0.1, 7.0], [0.1, 0.420571580830845, 0.0, 0.0]]
    )
    B = np.array([[1.0, 2.0, 1.0], [1.0, 3.0, 0.25891675029296335], [1.0, 1.0, 0.0], [1.0, 0.3, 0.0]])
    expected = np.empty((A.shape[0], B.shape[1]))
    for i in range(A.shape[0]):
        for col in range(B.shape[1]):
            s = 0.0
            for j in range(A.shape[1]):
                s = float(Fraction(s) + Fraction(float(Fraction(A[i, j]) * Fraction(B[j, col]))))
            expected[i, col] = s
    assert np.array_equal(rowwise_matmul(A, B), expected)
    assert rowwise_matmul(A, B)[0, 0] == 0.5  # left to right: (1e16 + 1) rounds to 1e16
    assert rowwise_matmul(A, B)[3, 2] == 0.20889302697429674  # fused: 0.20889302697429676


def test_rowwise_matmul_mixed_precision_and_shape_error():
    A, B = _operands((6, 4, 3), np.float32)
    assert rowwise_matmul(A, B.astype(np.float64)).dtype == np.float64  # the wider precision
    with pytest.raises(ValueError, match="do not multiply"):
        rowwise_matmul(A, B.T)


def _row_order_gram(D: np.ndarray, rows) -> np.ndarray:
    """DᵀD summed over `rows` in that order, one rank-one term a row: every product and every sum
    rounded on its own (two numpy ufuncs a row, which no compiler fuses into a multiply-add)."""
    G = np.zeros((D.shape[1], D.shape[1]))
    for i in rows:
        G = G + np.multiply.outer(D[i], D[i])
    return G


def test_sparse_gram_upper_sums_the_rows_in_order():
    """sparse_gram_upper(A) is the upper triangle of AᵀA summed over the rows in increasing
    order, bit for bit (stagewise's AᵀA of a sparse block, whose bits the models depend on),
    and mirrored it is the whole of it: checked against that recurrence in plain IEEE
    arithmetic on the dense rows (a zero entry adds ±0, which changes no sum), with values of
    many magnitudes and signs, so that the reverse order rounds otherwise, rows with no entry,
    rows whose columns are not sorted, and a first column of ones (the intercept); against the
    exact Gram (rational arithmetic) and scipy's product for scale."""
    rng = np.random.default_rng(0)
    n, p = 400, 60
    A = sp.random(n, p, density=0.08, random_state=1, format="csr")
    A.data = rng.standard_normal(A.nnz) * 10.0 ** rng.integers(-8, 9, size=A.nnz)
    A = sp.hstack([np.ones((n, 1)), A], format="csr")
    A = sp.vstack([A[:5], sp.csr_matrix((1, p + 1)), A[6:]], format="csr")  # row 5 without entries
    lo, hi = A.indptr[7], A.indptr[8]
    A.indices[lo:hi], A.data[lo:hi] = A.indices[lo:hi][::-1].copy(), A.data[lo:hi][::-1].copy()  # row 7 unsorted
    A.has_sorted_indices = False
    D = A.toarray()
    in_order = _row_order_gram(D, range(n))
    got = sparse_gram_upper(A)
    assert got.shape == ((p + 1) * (p + 2) // 2,) and np.array_equal(got, in_order[np.triu_indices(p + 1)])
    assert np.array_equal(symmetric_from_upper(got), in_order)
    assert got[0] == n - 1 and not np.array_equal(in_order, _row_order_gram(D, range(n - 1, -1, -1)))
    scale = np.abs(D).T @ np.abs(D)
    assert np.all(np.abs(symmetric_from_upper(got) - (A.T @ A).toarray()) <= 1e-12 * scale)
    exact = float(sum(Fraction(D[i, 3]) * Fraction(D[i, 7]) for i in range(n)))
    assert abs(got[3 * (2 * (p + 1) - 3 - 1) // 2 + 7] - exact) <= 1e-12 * scale[3, 7]


def test_upper_triangle_round_trip():
    M = np.arange(16.0).reshape(4, 4)
    S = M + M.T
    assert np.array_equal(upper_triangle(S), [0, 5, 10, 15, 10, 15, 20, 20, 25, 30])
    assert np.array_equal(symmetric_from_upper(upper_triangle(S)), S)
    with pytest.raises(ValueError, match="no triangle"):
        symmetric_from_upper(np.zeros(4))


def test_symmetric_from_upper_copies_every_bit_to_both_triangles():
    """Against an element-by-element construction, compared as bytes (signed zeros, NaN
    payloads, infinities): M[r, c] = M[c, r] = packed[k] for the k-th pair r <= c, row by row."""
    p = 7
    rng = np.random.default_rng(3)
    packed = rng.standard_normal(p * (p + 1) // 2)
    packed[[1, 4, 9]] = [-0.0, np.inf, -np.inf]
    packed.view(np.int64)[12] = 0x7FF8_0000_0000_0ABC  # a NaN with a payload
    want = np.empty((p, p))
    k = 0
    for r in range(p):
        for c in range(r, p):
            want[r, c] = want[c, r] = packed[k]
            k += 1
    got = symmetric_from_upper(packed)
    assert got.tobytes() == want.tobytes()
    assert upper_triangle(got).tobytes() == packed.tobytes()
    assert upper_triangle(np.asfortranarray(got)).tobytes() == packed.tobytes()


def test_dense_gram_of_a_panel_is_exactly_symmetric():
    """Stagewise keeps the upper triangle of a dense design's PᵀP, summed over panels and
    chunks: the same model only if each PᵀP is exactly symmetric (numpy's A.T @ A is one
    triangle, copied), for float64 and float32 panels and row slices of a larger array."""
    rng = np.random.default_rng(2)
    for dtype in (np.float64, np.float32):
        A = (rng.standard_normal((300, 37)) * 10.0 ** rng.integers(-6, 6, size=37)).astype(dtype)
        for P in (A, A[17:211]):
            G = P.T @ P
            assert np.array_equal(G, G.T), dtype


def test_single_threaded_blas_nests_and_restores():
    """BLAS on one thread inside the context, nested ones included; the threads it found after
    the outermost one, also when the body raises."""
    from threadpoolctl import threadpool_info

    from streamfit.solvers.stagewise_kernels import single_threaded_blas

    def blas_threads():
        return [lib["num_threads"] for lib in threadpool_info() if lib["user_api"] == "blas"]

    before = blas_threads()
    with pytest.raises(KeyError):
        with single_threaded_blas():
            with single_threaded_blas():
                assert set(blas_threads()) <= {1}
            assert set(blas_threads()) <= {1}
            raise KeyError
    assert blas_threads() == before
