"""stagewise's block designs (streamfit.solvers.stagewise_features); the designs' use in fits,
their caches and their bits across chunks and processes are tested with the solver
(test_stagewise.py)."""

from __future__ import annotations

import tracemalloc

import numpy as np
import scipy.sparse as sp

from streamfit.solvers.stagewise_features import FeatureSpace, with_bias_column


def test_feature_kind_of_saved_models():
    """Models saved before the options existed (no "sampling"/"phases" in the space) load with
    i.i.d. frequencies and random phases: their scores do not change."""
    d = FeatureSpace("rff", True, False, seed=1, block_size=4, n_components=8).to_json()
    assert d["sampling"] == "iid" and d["phases"] == "random"
    del d["sampling"], d["phases"]
    old = FeatureSpace.from_saved(d, {"rff_inputs": np.arange(3)})
    assert (old.sampling, old.phases) == ("iid", "random")


def test_column_designs_are_the_bias_and_the_blocks_columns_sparse_or_dense_and_by_panels():
    """A = [1, X[:, B]] for stored columns, from the CSC base (sparse A) and from the CSR rows
    (dense A, whole or a row panel at a time), against scipy's column selection; a block in any
    order, the chunk with duplicate entries summed as scipy sums them."""
    rng = np.random.default_rng(0)
    X = sp.random(300, 40, density=0.2, format="csr", random_state=1)
    X = sp.csr_matrix((np.r_[X.data, 1.5], np.r_[X.indices, 7], np.r_[X.indptr[:-1], X.nnz + 1]), shape=X.shape)
    assert not X.has_canonical_format  # row 299 holds column 7 twice (or after its last entry)
    block = rng.permutation(40)[:9]
    expected = np.hstack([np.ones((300, 1)), X.toarray()[:, block]])
    sparse = FeatureSpace("columns", True, False)
    A = sparse.design(sparse.base(X), block)
    assert sp.issparse(A) and not sparse.dense_design
    np.testing.assert_array_equal(A.toarray(), expected)
    dense = FeatureSpace("columns", True, False, dense=True)
    base = dense.base(X)
    np.testing.assert_array_equal(dense.design(base, block), expected)
    np.testing.assert_array_equal(dense.panel_design(base, block, 100, 250), expected[100:250])
    no_bias = FeatureSpace("columns", False, False, dense=True)
    np.testing.assert_array_equal(no_bias.design(no_bias.base(X), block), expected[:, 1:])
    assert dense.design_width(block) == 10 and no_bias.design_width(block) == 9


def test_the_bias_column_gives_scipys_hstack_arrays_bitwise():
    """[1, A] as `with_bias_column` writes it: the data, indices, index pointers and index dtype of
    scipy's hstack([ones, A]) (the design every model was trained and scored with), for rows
    without entries, one row, no rows and a block of no entries."""
    rng = np.random.default_rng(3)
    cases = [sp.random(200, 30, density=0.1, format="csr", random_state=2)]
    cases[0].data = rng.standard_normal(cases[0].nnz)  # values of every magnitude and sign
    cases += [cases[0][:1], cases[0][:0], sp.csr_matrix((50, 4)), sp.csr_matrix(np.diag(np.arange(1.0, 6.0)))]
    for A in cases:
        A = sp.csr_matrix(A, dtype=np.float64)
        expected = sp.hstack([np.ones((A.shape[0], 1)), A], format="csr")
        got = with_bias_column(A)
        assert got.shape == expected.shape
        for name in ("data", "indices", "indptr"):
            e, g = getattr(expected, name), getattr(got, name)
            assert g.dtype == e.dtype and g.tobytes() == e.tobytes(), name


def test_a_sparse_design_allocates_little_beyond_the_block_and_itself():
    """Building [1, X[:, B]] from the CSC base holds the block's selection and the design, and
    temporaries below one design more: at most 2.3× the design's bytes at the peak (numpy's
    allocations, traced). scipy's hstack went through COO (row and column arrays of every entry,
    their concatenation, a sort): 3.7× on this chunk (session 33)."""
    X = sp.random(20000, 3000, density=0.02, format="csr", random_state=1, dtype=np.float32)
    space = FeatureSpace("columns", True, False)
    base = space.base(X)
    block = np.arange(0, 3000, 3)
    A = space.design(base, block)
    design_bytes = A.data.nbytes + A.indices.nbytes + A.indptr.nbytes
    del A
    tracemalloc.start()
    try:
        space.design(base, block)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak <= 2.3 * design_bytes, peak / design_bytes
