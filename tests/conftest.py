"""Shared fixtures: small real data (scikit-learn's digits ships with scikit-learn) and stores."""

import numpy as np
import pytest
import scipy.sparse as sp


@pytest.fixture(scope="session")
def digits():
    """(X csr float32, y int32 ids, classes) of the 1797 8×8 digit images."""
    from sklearn.datasets import load_digits

    X, y = load_digits(return_X_y=True)
    return sp.csr_matrix(X.astype(np.float32)), y.astype(np.int32), [str(c) for c in range(10)]


@pytest.fixture
def write_store(tmp_path):
    """write_store(X, labels, classes, chunk_rows=..., backend=...) -> path of a new store."""
    from streamfit.store import StoreWriter

    counter = iter(range(1000))

    def make(X, labels, classes, *, chunk_rows=500, backend="zarr", batch=137):
        path = tmp_path / f"store{next(counter)}.{backend}"
        w = StoreWriter(str(path), backend=backend, multilabel=sp.issparse(labels), chunk_rows=chunk_rows)
        for lo in range(0, X.shape[0], batch):
            w.write_rows(X[lo:lo + batch], labels[lo:lo + batch])
        w.close(n_features=X.shape[1], classes=classes)
        return str(path)

    return make
