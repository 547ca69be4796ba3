import numpy as np
import pytest
import scipy.sparse as sp
from sklearn.metrics import accuracy_score, f1_score

from streamfit.metrics import MetricAccumulator


def test_multiclass_chunked_equals_sklearn():
    rng = np.random.default_rng(0)
    S = rng.normal(size=(500, 6))
    y = rng.integers(0, 6, 500)
    acc = MetricAccumulator(6, multilabel=False)
    for lo in range(0, 500, 77):
        acc.update(S[lo : lo + 77], y[lo : lo + 77])
    r = acc.result()
    pred = S.argmax(1)
    assert r["accuracy"] == accuracy_score(y, pred)
    assert abs(r["macro_f1"] - f1_score(y, pred, average="macro")) < 1e-12


def test_multilabel_precision_at_k():
    S = np.array([[3.0, 2.0, 1.0, -1.0], [-1.0, 0.5, 2.0, 1.0]])
    Y = sp.csr_matrix(np.array([[1, 0, 1, 0], [0, 0, 0, 1]], dtype=np.float32))
    acc = MetricAccumulator(4, multilabel=True, ks=(1, 3))
    acc.update(S[:1], Y[:1])
    acc.update(S[1:], Y[1:])
    r = acc.result()
    assert r["p@1"] == 0.5  # row 0 top-1 = class 0 (hit), row 1 top-1 = class 2 (miss)
    assert abs(r["p@3"] - (2 / 3 + 1 / 3) / 2) < 1e-12


def test_regression_metrics_merged_over_chunks_equal_scikit_learns():
    """RMSE, MAE and R² per output from chunk-wise sums (targets far from 0, where Σy² − (Σy)²/n
    would cancel) equal scikit-learn's on the whole arrays; a constant output predicted exactly
    has R² 1."""
    from sklearn.metrics import mean_absolute_error, mean_squared_error, r2_score

    from streamfit.metrics import RegressionAccumulator

    rng = np.random.default_rng(0)
    Y = np.column_stack([1e8 + rng.normal(size=500), rng.normal(size=500), np.full(500, 3.0)])
    P = Y + np.column_stack([0.1 * rng.normal(size=500), rng.normal(size=500), np.zeros(500)])
    acc = RegressionAccumulator(["a", "b", "c"])
    for lo in range(0, 500, 73):
        acc.update(P[lo : lo + 73], Y[lo : lo + 73])
    got = acc.result()
    for j, name in enumerate("abc"):
        assert got[f"rmse_{name}"] == pytest.approx(np.sqrt(mean_squared_error(Y[:, j], P[:, j])), rel=1e-12, abs=1e-12)
        assert got[f"mae_{name}"] == pytest.approx(mean_absolute_error(Y[:, j], P[:, j]), rel=1e-12, abs=1e-12)
        assert got[f"r2_{name}"] == pytest.approx(r2_score(Y[:, j], P[:, j]), rel=1e-9, abs=1e-12)
    assert got["r2_c"] == 1.0
    assert got["r2"] == pytest.approx(r2_score(Y, P), rel=1e-9)  # uniform average over the outputs
