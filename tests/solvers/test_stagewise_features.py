"""stagewise's block designs (streamfit.solvers.stagewise_features); the designs' use in fits,
their caches and their bits across chunks and processes are tested with the solver
(test_stagewise.py)."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamfit.solvers.stagewise_features import FeatureSpace


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
