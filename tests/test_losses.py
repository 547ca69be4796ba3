"""streamfit.losses: the label lists the kernels read from a chunk's labels."""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamfit.losses import LOSSES, label_lists, loss_sum


def _read_only(labels):
    for a in (labels.data, labels.indices, labels.indptr):
        a.flags.writeable = False
    return labels


def test_label_lists_of_read_only_multilabel_chunk_labels():
    """A store's chunk labels are read-only (the bcd chunks mode crashed in eliminate_zeros):
    label_lists reads them without writing, explicit zeros dropped."""
    Y = _read_only(sp.csr_matrix((np.array([1, 0, 1, 1], np.int8), np.array([0, 1, 2, 1], np.int32),
                                  np.array([0, 3, 3, 4], np.int32)), shape=(3, 3)))
    before = [a.copy() for a in (Y.data, Y.indices, Y.indptr)]
    ptr, ind = label_lists(Y, 3)
    np.testing.assert_array_equal(ptr, [0, 2, 2, 3])
    np.testing.assert_array_equal(ind, [0, 2, 1])
    assert ptr.dtype == ind.dtype == np.int64
    for a, b in zip((Y.data, Y.indices, Y.indptr), before):
        np.testing.assert_array_equal(a, b)
    S = np.arange(9.0).reshape(3, 3)
    assert loss_sum(LOSSES["squared_hinge"], S, Y) == loss_sum(LOSSES["squared_hinge"], S, sp.csr_matrix(Y.toarray()))


def test_label_lists_of_read_only_class_ids():
    y = np.array([2, 0, 1])
    y.flags.writeable = False
    ptr, ind = label_lists(y, 3)
    np.testing.assert_array_equal(ptr, [0, 1, 2, 3])
    np.testing.assert_array_equal(ind, [2, 0, 1])
