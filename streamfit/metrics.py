"""Evaluation metrics as reductions over row chunks (never on whole arrays at once).

Multiclass: accuracy and macro-F1 from per-class true/false positive counts.
Multilabel: precision at k, P@k = mean over rows of |top-k scored ∩ true labels| / k, and
macro-F1 of the labels scored > 0.
Regression: per output j, RMSE = √((1/n) Σ_i (y_ij − ŷ_ij)²), MAE = (1/n) Σ_i |y_ij − ŷ_ij| and
R² = 1 − Σ_i (y_ij − ŷ_ij)² / Σ_i (y_ij − ȳ_j)² (scikit-learn's r2_score; 1 for a constant
target predicted exactly, 0 if predicted inexactly), the centered sum of squares merged over
chunks by Chan et al.'s pairwise update (no cancellation from Σy² − (Σy)²/n).
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamfit.errors import StoreError


class MetricAccumulator:
    def __init__(self, n_classes: int, multilabel: bool, ks=(1, 3, 5)):
        self.n_classes, self.multilabel, self.ks = n_classes, multilabel, [k for k in ks if k <= max(n_classes, 1)]
        self.n = 0
        self.correct = 0
        self.tp = np.zeros(n_classes, dtype=np.int64)
        self.fp = np.zeros(n_classes, dtype=np.int64)
        self.fn = np.zeros(n_classes, dtype=np.int64)
        self.hits_at = {k: 0.0 for k in self.ks}

    def update(self, scores: np.ndarray, labels) -> None:
        n, K = scores.shape
        self.n += n
        if not self.multilabel:
            pred = np.argmax(scores, axis=1)
            y = np.asarray(labels)
            self.correct += int((pred == y).sum())
            self.tp += np.bincount(y[pred == y], minlength=K)
            self.fp += np.bincount(pred[pred != y], minlength=K)
            self.fn += np.bincount(y[pred != y], minlength=K)
            return
        Y = sp.csr_matrix(labels).astype(bool).toarray()
        P = scores > 0
        self.tp += (P & Y).sum(axis=0)
        self.fp += (P & ~Y).sum(axis=0)
        self.fn += (~P & Y).sum(axis=0)
        order = np.argsort(-scores, axis=1, kind="stable")
        for k in self.ks:
            top = order[:, :k]
            self.hits_at[k] += float(np.take_along_axis(Y, top, axis=1).sum(axis=1).mean() * n / k)

    def result(self) -> dict:
        denom = 2 * self.tp + self.fp + self.fn
        f1 = np.divide(2 * self.tp, denom, out=np.zeros(self.n_classes), where=denom > 0)
        present = denom > 0
        out = {"n_samples": self.n, "macro_f1": float(f1[present].mean()) if present.any() else 0.0}
        if self.multilabel:
            out.update({f"p@{k}": self.hits_at[k] / max(self.n, 1) for k in self.ks})
        else:
            out["accuracy"] = self.correct / max(self.n, 1)
        return out


class RegressionAccumulator:
    """Per-output sums of squared and absolute errors, and the targets' mean and centered sum
    of squares (merged chunk by chunk), for RMSE, MAE and R² (see the module docstring)."""

    def __init__(self, outputs: list[str]):
        k = len(outputs)
        self.outputs = outputs
        self.n = 0
        self.sse, self.sae = np.zeros(k), np.zeros(k)
        self.mean, self.m2 = np.zeros(k), np.zeros(k)

    def update(self, predictions: np.ndarray, targets: np.ndarray) -> None:
        n_b = targets.shape[0]
        if n_b == 0:
            return
        error = targets - predictions
        self.sse += (error**2).sum(axis=0)
        self.sae += np.abs(error).sum(axis=0)
        mean_b = targets.mean(axis=0)
        m2_b = ((targets - mean_b) ** 2).sum(axis=0)
        n_a, n = self.n, self.n + n_b
        delta = mean_b - self.mean
        self.m2 += m2_b + delta**2 * n_a * n_b / n
        self.mean += delta * n_b / n
        self.n = n

    def result(self) -> dict:
        n = max(self.n, 1)
        rmse, mae = np.sqrt(self.sse / n), self.sae / n
        exact = self.sse == 0
        r2 = np.where(self.m2 > 0, 1.0 - self.sse / np.where(self.m2 > 0, self.m2, 1.0), np.where(exact, 1.0, 0.0))
        out: dict = {"n_samples": self.n, "rmse": float(rmse.mean()), "mae": float(mae.mean()), "r2": float(r2.mean())}
        if len(self.outputs) > 1:  # the lines above average the outputs
            for j, name in enumerate(self.outputs):
                out.update({f"rmse_{name}": float(rmse[j]), f"mae_{name}": float(mae[j]), f"r2_{name}": float(r2[j])})
        return out


def evaluate(model, source, progress: bool = False) -> dict:
    """Metrics of `model` on every row of a store (or any ChunkSource), chunk by chunk (for a
    regression model: n_samples, rmse, mae, r2 averaged over the outputs, and per output
    rmse_NAME, mae_NAME, r2_NAME when there are several); a
    source without rows is a StoreError (its metrics would be 0s that mean nothing)."""
    from tqdm.auto import tqdm

    model.check_store(source)
    acc: MetricAccumulator | RegressionAccumulator = (
        RegressionAccumulator(model.classes_.tolist())
        if model.regression
        else MetricAccumulator(len(model.classes_), model.multilabel)
    )
    for c in tqdm(source.iter_chunks(), total=source.n_chunks, desc="evaluate", unit="chunk", disable=not progress):
        acc.update(model.decision_function(c.X), c.labels)
    if acc.n == 0:
        where = getattr(source, "path", "the evaluation store")
        raise StoreError(f"{where}: holds no rows, so there is nothing to evaluate; evaluate on a store with rows")
    return acc.result()


def target_statistics(source) -> dict:
    """Per output of a regression store: {name: {min, max, mean, std}} over all rows, one pass
    over the chunks (mean and centered sum of squares merged as in RegressionAccumulator)."""
    acc = RegressionAccumulator(list(source.classes))
    low = np.full(source.n_classes, np.inf)
    high = -low
    for c in source.iter_chunks():
        acc.update(c.labels, c.labels)
        if c.n_rows:
            low, high = np.minimum(low, c.labels.min(axis=0)), np.maximum(high, c.labels.max(axis=0))
    std = np.sqrt(acc.m2 / max(acc.n, 1))
    return {
        name: {"min": float(low[j]), "max": float(high[j]), "mean": float(acc.mean[j]), "std": float(std[j])}
        for j, name in enumerate(source.classes)
    }
