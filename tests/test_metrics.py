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


def test_micro_f1_per_label_and_log_loss_equal_sklearn():
    """Chunked sums against scikit-learn on the whole arrays: multilabel with the rule S > t
    (micro-F1, per-label precision/recall/F1), and the log losses of probabilities."""
    from sklearn.metrics import log_loss, precision_recall_fscore_support

    rng = np.random.default_rng(1)
    S = rng.normal(size=(400, 5))
    Y = (rng.random((400, 5)) < 0.3).astype(np.int8)
    P = 1 / (1 + np.exp(-S))
    acc = MetricAccumulator(5, multilabel=True, threshold=0.3)
    for lo in range(0, 400, 97):
        acc.update(S[lo : lo + 97], sp.csr_matrix(Y[lo : lo + 97]), P[lo : lo + 97])
    r, table = acc.result(), acc.per_label()
    pred = (S > 0.3).astype(np.int8)
    assert abs(r["micro_f1"] - f1_score(Y, pred, average="micro")) < 1e-12
    precision, recall, f1, support = precision_recall_fscore_support(Y, pred, zero_division=0)
    for name, ours, theirs in (("precision", table["precision"], precision), ("recall", table["recall"], recall)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-12, err_msg=name)
    np.testing.assert_allclose(table["f1"], f1, rtol=1e-12)
    np.testing.assert_array_equal(table["support"], support)
    bce = np.mean([log_loss(Y[:, r], P[:, r], labels=[0, 1]) for r in range(5)])  # mean over rows and labels
    assert abs(r["log_loss"] - bce) < 1e-12
    assert r["labels_per_row"] == pred.sum() / 400

    y = rng.integers(0, 5, 400)
    Q = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    multi = MetricAccumulator(5, multilabel=False)
    for lo in range(0, 400, 97):
        multi.update(S[lo : lo + 97], y[lo : lo + 97], Q[lo : lo + 97])
    out = multi.result()
    assert abs(out["log_loss"] - log_loss(y, Q, labels=range(5))) < 1e-12
    assert out["micro_f1"] == out["accuracy"] == accuracy_score(y, S.argmax(1))


def test_fit_threshold_maximises_micro_f1_over_every_cut():
    """fit_threshold against a brute force over every midpoint between distinct scores."""
    from streamfit.metrics import fit_threshold
    from streamfit.model import LinearModel
    from streamfit.store import InMemoryStore

    rng = np.random.default_rng(2)
    X = rng.normal(size=(60, 4))
    Y = (X @ rng.normal(size=(4, 3)) + rng.normal(size=(60, 3)) > 0.8).astype(np.int8)
    Y[0] = 1
    model = LinearModel(rng.normal(size=(3, 4)), classes=["a", "b", "c"], n_features=4, multilabel=True)
    store = InMemoryStore(sp.csr_matrix(X), sp.csr_matrix(Y), ["a", "b", "c"], chunk_rows=25)
    t, best = fit_threshold(model, store)
    S = X @ model.coef_.T
    levels = np.unique(S)
    cuts = np.r_[levels[0] - 1, (levels[1:] + levels[:-1]) / 2]
    brute = max(f1_score(Y, (S > c).astype(np.int8), average="micro") for c in cuts)
    assert abs(best - brute) < 1e-12
    assert abs(f1_score(Y, (S > t).astype(np.int8), average="micro") - best) < 1e-12


def test_threshold_counts_give_each_grid_thresholds_micro_f1_and_ties_go_to_the_center():
    """threshold_counts summed over two row blocks give, for every threshold t of a grid, the
    micro-F1 of "score > t" (scikit-learn's f1_score); best_threshold takes the best, on ties the
    smallest or the one nearest `center`: scores that a whole gap of the grid separates perfectly
    give every t in the gap F1 = 1, and with center 0 the threshold 0."""
    from streamfit.engine import add_results
    from streamfit.metrics import best_threshold, threshold_counts

    rng = np.random.default_rng(5)
    S = rng.normal(size=(50, 4))
    Y = S + rng.normal(size=(50, 4)) > 0.5
    grid = np.arange(-99, 100) / 100
    counts = add_results(threshold_counts(S[:20], Y[:20], grid), threshold_counts(S[20:], Y[20:], grid))
    f1 = 2 * counts.hits / (counts.on + counts.positives)
    np.testing.assert_allclose(f1, [f1_score(Y, S > t, average="micro") for t in grid], rtol=1e-12)
    assert best_threshold(counts, grid) == grid[int(np.argmax(f1))]
    separated = np.where(Y, 1.5, -1.5)
    counts = threshold_counts(separated, Y, grid)
    assert best_threshold(counts, grid) == -0.99 and best_threshold(counts, grid, center=0.0) == 0.0
    assert best_threshold(threshold_counts(S, np.zeros_like(Y), grid), grid) is None


def test_accumulators_added_along_any_tree_are_the_sums_of_all_rows():
    """evaluate's reduction: per-chunk accumulators added with `+` (as Engine.map_reduce's tree
    adds them) give the counts of one accumulator over all rows exactly, and log loss, RMSE, MAE
    and R² as scikit-learn computes them on the whole arrays."""
    from sklearn.metrics import log_loss, mean_absolute_error, mean_squared_error, r2_score

    from streamfit.engine import tree_sum
    from streamfit.metrics import RegressionAccumulator

    rng = np.random.default_rng(1)
    S = rng.normal(size=(300, 4))
    P = np.exp(S) / np.exp(S).sum(axis=1, keepdims=True)
    y = rng.integers(0, 4, 300)
    cuts = [0, 17, 100, 101, 250, 300]
    parts = []
    for lo, hi in zip(cuts, cuts[1:]):
        part = MetricAccumulator(4, multilabel=False)
        part.update(S[lo:hi], y[lo:hi], P[lo:hi])
        parts.append(part)
    whole = MetricAccumulator(4, multilabel=False)
    whole.update(S, y, P)
    summed = tree_sum(parts)
    assert (summed.n, summed.correct) == (whole.n, whole.correct)
    assert all(np.array_equal(getattr(summed, f), getattr(whole, f)) for f in ("tp", "fp", "fn"))
    assert summed.result()["log_loss"] == pytest.approx(log_loss(y, P), rel=1e-12)

    Y = 1e6 + rng.normal(size=(300, 2))
    Q = Y + 0.1 * rng.normal(size=(300, 2))
    regs = []
    for lo, hi in zip(cuts, cuts[1:]):
        reg = RegressionAccumulator(["a", "b"])
        reg.update(Q[lo:hi], Y[lo:hi])
        regs.append(reg)
    got = tree_sum(regs).result()
    for j, name in enumerate("ab"):
        assert got[f"rmse_{name}"] == pytest.approx(np.sqrt(mean_squared_error(Y[:, j], Q[:, j])), rel=1e-12)
        assert got[f"mae_{name}"] == pytest.approx(mean_absolute_error(Y[:, j], Q[:, j]), rel=1e-12)
        assert got[f"r2_{name}"] == pytest.approx(r2_score(Y[:, j], Q[:, j]), rel=1e-9)
