"""Evaluation metrics as reductions over row chunks (never on whole arrays at once).

Multiclass: accuracy and macro-F1 from per-class true/false positive counts.
Multilabel: precision at k, P@k = mean over rows of |top-k scored ∩ true labels| / k, and
macro-F1 of the labels scored > 0.
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


def evaluate(model, source, progress: bool = False) -> dict:
    """Metrics of `model` on every row of a store (or any ChunkSource), chunk by chunk; a
    source without rows is a StoreError (its metrics would be 0s that mean nothing)."""
    from tqdm.auto import tqdm

    model.check_store(source)
    acc = MetricAccumulator(len(model.classes_), model.multilabel)
    for c in tqdm(source.iter_chunks(), total=source.n_chunks, desc="evaluate", unit="chunk", disable=not progress):
        acc.update(model.decision_function(c.X), c.labels)
    if acc.n == 0:
        where = getattr(source, "path", "the evaluation store")
        raise StoreError(f"{where}: holds no rows, so there is nothing to evaluate; evaluate on a store with rows")
    return acc.result()
