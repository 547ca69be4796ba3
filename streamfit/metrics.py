"""Evaluation metrics as reductions over row chunks (never on whole arrays at once).

Per class (multilabel: per label) r, with the model's decision rule (streamfit.model.decide:
multiclass, the top-scored class; multilabel, the labels scored > the threshold) the counts
tp_r, fp_r, fn_r give precision tp/(tp + fp), recall tp/(tp + fn) and F1 = 2tp/(2tp + fp + fn)
(0 where the denominator is 0); macro-F1 is the mean F1 over the classes that occur in the
labels or the predictions, micro-F1 = 2Σtp/(2Σtp + Σfp + Σfn) (multiclass: the accuracy).
Multiclass: accuracy. Multilabel: precision at k, P@k = mean over rows of |top-k scored ∩ true
labels| / k. Log loss, for models whose scores give probabilities (Model.probabilities, p
clipped to [1e-15, 1 − 1e-15] as scikit-learn's log_loss): multiclass −(1/n) Σ_i log p_{i,y_i};
multilabel the mean binary cross-entropy over rows and labels,
−(1/(n k)) Σ_i Σ_r [y_ir log p_ir + (1 − y_ir) log(1 − p_ir)].
Regression: per output j, RMSE = √((1/n) Σ_i (y_ij − ŷ_ij)²), MAE = (1/n) Σ_i |y_ij − ŷ_ij| and
R² = 1 − Σ_i (y_ij − ŷ_ij)² / Σ_i (y_ij − ȳ_j)² (scikit-learn's r2_score; 1 for a constant
target predicted exactly, 0 if predicted inexactly), the centered sum of squares merged over
chunks by Chan et al.'s pairwise update (no cancellation from Σy² − (Σy)²/n).

`evaluate` computes each chunk's sums in a chunk task (`chunk_sums`: one accumulator per chunk)
and adds them with `Engine.map_reduce`, whose fixed binary tree over chunk ids makes the result
the same bits in this process and on any number of Dask workers (`+` of two accumulators: counts
and sums added, the target moments merged pairwise).
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, NamedTuple

import numpy as np
import scipy.sparse as sp

from streamfit.errors import StoreError
from streamfit.model import check_scoring_options, decide

if TYPE_CHECKING:
    from streamfit.engine import Engine

PROBABILITY_CLIP = 1e-15


class MetricAccumulator:
    """Sums of one evaluation. `threshold`: the multilabel decision threshold (ignored for
    multiclass); `update` takes a chunk's scores (n × k), labels (class ids, or a label indicator)
    and, when the model gives them, its probabilities (n × k) for the log loss."""

    def __init__(self, n_classes: int, multilabel: bool, threshold: float = 0.0, ks=(1, 3, 5)):
        self.n_classes, self.multilabel, self.ks = n_classes, multilabel, [k for k in ks if k <= max(n_classes, 1)]
        self.threshold = threshold
        self.n = 0
        self.correct = 0
        self.tp = np.zeros(n_classes, dtype=np.int64)
        self.fp = np.zeros(n_classes, dtype=np.int64)
        self.fn = np.zeros(n_classes, dtype=np.int64)
        self.hits_at = {k: 0.0 for k in self.ks}
        self.log_loss_sum: float | None = None

    def update(self, scores: np.ndarray, labels, probabilities: np.ndarray | None = None) -> None:
        n, K = scores.shape
        self.n += n
        if not self.multilabel:
            pred = np.argmax(scores, axis=1)
            y = np.asarray(labels)
            self.correct += int((pred == y).sum())
            self.tp += np.bincount(y[pred == y], minlength=K)
            self.fp += np.bincount(pred[pred != y], minlength=K)
            self.fn += np.bincount(y[pred != y], minlength=K)
            if probabilities is not None:
                p = np.clip(probabilities[np.arange(n), y], PROBABILITY_CLIP, 1 - PROBABILITY_CLIP)
                self.log_loss_sum = (self.log_loss_sum or 0.0) - float(np.log(p).sum())
            return
        Y = sp.csr_matrix(labels).astype(bool).toarray()
        P = decide(scores, self.threshold)
        self.tp += (P & Y).sum(axis=0)
        self.fp += (P & ~Y).sum(axis=0)
        self.fn += (~P & Y).sum(axis=0)
        order = np.argsort(-scores, axis=1, kind="stable")
        for k in self.ks:
            top = order[:, :k]
            self.hits_at[k] += float(np.take_along_axis(Y, top, axis=1).sum(axis=1).mean() * n / k)
        if probabilities is not None:
            p = np.clip(probabilities, PROBABILITY_CLIP, 1 - PROBABILITY_CLIP)
            self.log_loss_sum = (self.log_loss_sum or 0.0) - float(np.where(Y, np.log(p), np.log1p(-p)).sum() / K)

    def __add__(self, other: MetricAccumulator) -> MetricAccumulator:
        """The sums of both accumulators' rows (of the same model and threshold)."""
        out = MetricAccumulator(self.n_classes, self.multilabel, self.threshold, self.ks)
        out.n, out.correct = self.n + other.n, self.correct + other.correct
        out.tp, out.fp, out.fn = self.tp + other.tp, self.fp + other.fp, self.fn + other.fn
        out.hits_at = {k: self.hits_at[k] + other.hits_at[k] for k in self.ks}
        if self.log_loss_sum is not None or other.log_loss_sum is not None:
            out.log_loss_sum = (self.log_loss_sum or 0.0) + (other.log_loss_sum or 0.0)
        return out

    def per_label(self) -> dict[str, np.ndarray]:
        """precision, recall, f1 and support (tp + fn) per class, each an array of k values."""
        tp, fp, fn = self.tp, self.fp, self.fn
        zeros = np.zeros(self.n_classes)
        return {
            "precision": np.divide(tp, tp + fp, out=zeros.copy(), where=tp + fp > 0),
            "recall": np.divide(tp, tp + fn, out=zeros.copy(), where=tp + fn > 0),
            "f1": np.divide(2 * tp, 2 * tp + fp + fn, out=zeros.copy(), where=2 * tp + fp + fn > 0),
            "support": tp + fn,
        }

    def result(self) -> dict:
        f1 = self.per_label()["f1"]
        present = (2 * self.tp + self.fp + self.fn) > 0
        tp, fp, fn = int(self.tp.sum()), int(self.fp.sum()), int(self.fn.sum())
        out = {
            "n_samples": self.n,
            "macro_f1": float(f1[present].mean()) if present.any() else 0.0,
            "micro_f1": 2 * tp / (2 * tp + fp + fn) if 2 * tp + fp + fn else 0.0,
        }
        if self.multilabel:
            out.update({f"p@{k}": self.hits_at[k] / max(self.n, 1) for k in self.ks})
            out["labels_per_row"] = (tp + fp) / max(self.n, 1)
            out["threshold"] = self.threshold
        else:
            out["accuracy"] = self.correct / max(self.n, 1)
        if self.log_loss_sum is not None:
            out["log_loss"] = self.log_loss_sum / max(self.n, 1)
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
        self._merge_moments(n_b, mean_b, ((targets - mean_b) ** 2).sum(axis=0))

    def _merge_moments(self, n_b: int, mean_b: np.ndarray, m2_b: np.ndarray) -> None:
        """Add n_b targets of mean mean_b and centered sum of squares m2_b (Chan et al.'s pairwise update)."""
        if n_b == 0:
            return
        n_a, n = self.n, self.n + n_b
        delta = mean_b - self.mean
        self.m2 = self.m2 + m2_b + delta**2 * n_a * n_b / n
        self.mean = self.mean + delta * n_b / n
        self.n = n

    def __add__(self, other: RegressionAccumulator) -> RegressionAccumulator:
        """The sums and merged moments of both accumulators' rows."""
        out = RegressionAccumulator(self.outputs)
        out.sse, out.sae = self.sse + other.sse, self.sae + other.sae
        out.n, out.mean, out.m2 = self.n, self.mean, self.m2
        out._merge_moments(other.n, other.mean, other.m2)
        return out

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


def evaluate(
    model,
    source,
    progress: bool = False,
    threshold: float | None = None,
    per_label: bool = False,
    engine: Engine | None = None,
    sigterm: str | None = None,
) -> dict:
    """Metrics of `model` on every row of a store (or any ChunkSource), with the model's
    decision rule (`threshold` overrides its multilabel threshold). per_label: also
    "per_label", {class name: {precision, recall, f1, support}}. A regression model: n_samples,
    rmse, mae, r2 averaged over the outputs, and per output rmse_NAME, mae_NAME, r2_NAME when
    there are several. `engine`: where the chunk tasks run (default: in this process); the
    model travels to the workers (scattered once), the store by its path or URL, and the result
    is the same bits on any engine (see the module docstring). `sigterm`: given, a SIGTERM
    stops the pass between chunks with Terminated(sigterm) (Engine.stopping_on_sigterm; the
    commands pass it, validation inside a training run does not). A source without rows is a
    StoreError (its metrics would be 0s that mean nothing)."""
    from streamfit.engine import Engine

    check_scoring_options(model, threshold=threshold, per_label=per_label)
    model.check_store(source)
    threshold = model.decision_threshold if threshold is None else threshold
    where = getattr(source, "path", "the evaluation store")
    if source.n_chunks == 0:
        raise StoreError(f"{where}: holds no rows, so there is nothing to evaluate; evaluate on a store with rows")
    engine = engine or Engine(mode="inprocess", progress=progress)
    with engine.stopping_on_sigterm(sigterm) if sigterm is not None else contextlib.nullcontext():
        acc = engine.map_reduce(
            chunk_sums, source, range(source.n_chunks), desc="evaluate", model=model, threshold=threshold
        )
    if acc.n == 0:
        raise StoreError(f"{where}: holds no rows, so there is nothing to evaluate; evaluate on a store with rows")
    out = acc.result()
    if per_label and isinstance(acc, MetricAccumulator):
        table = acc.per_label()
        out["per_label"] = {
            str(name): {key: float(v[r]) if key != "support" else int(v[r]) for key, v in table.items()}
            for r, name in enumerate(model.class_names)
        }
    return out


def chunk_sums(source, i: int, *, model, threshold: float) -> MetricAccumulator | RegressionAccumulator:
    """Chunk `i`'s sums of `evaluate` (a chunk task): an accumulator updated with its rows."""
    c = source.read_chunk(i)
    S = model.decision_function(c.X)
    if model.regression:
        reg = RegressionAccumulator(model.class_names.tolist())
        reg.update(S, c.labels)
        return reg
    acc = MetricAccumulator(len(model.classes_), model.multilabel, threshold)
    acc.update(model.ranking_scores(S), c.labels, model.probabilities(S))  # the model's multiclass decision
    return acc


def fit_threshold(model, source) -> tuple[float, float]:
    """(threshold, micro-F1): the multilabel threshold t that maximises micro-F1 of the rule
    S > t on `source` (a validation store), over the midpoints between its distinct scores. The
    micro-F1 of t is 2·tp(t) / (#{S > t} + #positives), so one sort of the n × k scores gives
    it for every t (in memory: n × k floats)."""
    model.check_store(source)
    scores, truth = [], []
    for c in source.iter_chunks():
        scores.append(model.decision_function(c.X).ravel())
        truth.append(sp.csr_matrix(c.labels).astype(bool).toarray().ravel())
    s, y = np.concatenate(scores), np.concatenate(truth)
    if s.size == 0 or not y.any():
        raise StoreError(f"{getattr(source, 'path', source)}: no labelled rows to fit a threshold on")
    order = np.argsort(-s, kind="stable")
    s, y = s[order], y[order]
    last = np.r_[s[1:] != s[:-1], True]  # cutting after position i predicts the i + 1 best scores
    n_on = np.arange(1, s.size + 1)[last]
    tp = np.cumsum(y)[last]
    f1 = 2 * tp / (n_on + y.sum())
    best = int(np.argmax(f1))
    cut = np.flatnonzero(last)[best]
    threshold = (s[cut] + s[cut + 1]) / 2 if cut + 1 < s.size else s[cut] - 1.0
    return float(threshold), float(f1[best])


class ThresholdCounts(NamedTuple):
    """A chunk's share of the training micro-F1 of every threshold t of a grid (ascending): the
    labels scored > t (`on`), those of them that are true (`hits`), and the true labels. Integer
    counts: any chunking and any number of workers give the same sums (Engine.map_reduce adds
    them field by field)."""

    on: np.ndarray
    hits: np.ndarray
    positives: int


def threshold_counts(scores: np.ndarray, truth: np.ndarray, grid: np.ndarray) -> ThresholdCounts:
    """ThresholdCounts of scores S (any shape) against the bool truth of the same shape, for
    every threshold of `grid` (ascending): one searchsorted and two bincounts."""
    above = np.searchsorted(grid, scores.ravel(), side="left")  # thresholds t < s: the first `above`
    bins = len(grid) + 1
    truth = truth.ravel()
    on = np.cumsum(np.bincount(above, minlength=bins)[::-1])[::-1][1:]
    hits = np.cumsum(np.bincount(above[truth], minlength=bins)[::-1])[::-1][1:]
    return ThresholdCounts(on, hits, int(truth.sum()))


def best_threshold(counts: ThresholdCounts, grid: np.ndarray, center: float | None = None) -> float | None:
    """The threshold of `grid` with the best micro-F1 2·hits/(on + positives), or None without
    true labels. On ties the smallest, or with `center` the one nearest it (margins: 0, so
    training rows that every threshold of a gap separates alike keep the margin's own rule)."""
    if counts.positives == 0:
        return None
    f1 = 2 * counts.hits / (counts.on + counts.positives)
    best = np.flatnonzero(f1 == f1.max())
    if center is not None:
        best = best[np.argsort(np.abs(grid[best] - center), kind="stable")]
    return float(grid[best[0]])


def target_statistics(source) -> dict:
    """Per output of a regression store: {name: {min, max, mean, std}} over all rows, one pass
    over the chunks (mean and centered sum of squares merged as in RegressionAccumulator); a
    SIGTERM stops it between chunks."""
    from streamfit.store.store import check_stop_reading

    acc = RegressionAccumulator(list(source.classes))
    low = np.full(source.n_classes, np.inf)
    high = -low
    for c in source.iter_chunks():
        check_stop_reading(getattr(source, "path", "the store"))
        acc.update(c.labels, c.labels)
        if c.n_rows:
            low, high = np.minimum(low, c.labels.min(axis=0)), np.maximum(high, c.labels.max(axis=0))
    std = np.sqrt(acc.m2 / max(acc.n, 1))
    return {
        name: {"min": float(low[j]), "max": float(high[j]), "mean": float(acc.mean[j]), "std": float(std[j])}
        for j, name in enumerate(source.classes)
    }
