"""Source records -> feature rows: hashing (or kept indices), then IDF weights, then row l2
normalization. The same Featurizer runs at ingest and when a model scores raw data.

Stores hold float32. Readers refuse values beyond float32, but hashing sums the values that
collide in a column and IDF multiplies by weights above 1, so a valid value can overflow
afterwards. Featurizer.out_of_range names the rows whose values would not stay finite through
every step (computed in float64); l2 normalization divides by a norm no smaller than any of
the row's values, so it cannot overflow.
"""

from __future__ import annotations

import numpy as np
import scipy.sparse as sp

from streamfit.errors import InputError, StreamfitError
from streamfit.store.format import FLOAT32_MAX

# The IDF weight ln((1 + n) / (1 + df)) + 1 of a column that a row holds (df >= 1) is below
# 1 + ln(2**63) for any row count n < 2**63: values within FLOAT32_MAX / IDF_WEIGHT_BOUND stay
# finite in float32 whatever the document frequencies turn out to be.
IDF_WEIGHT_BOUND = 1.0 + float(np.log(2.0**63))
SCALE_HINT = "scale the features"


def idf_weights(df: np.ndarray, n_docs: int) -> np.ndarray:
    """Smoothed inverse document frequency, idf_j = ln((1 + n) / (1 + df_j)) + 1."""
    return np.log((1.0 + n_docs) / (1.0 + df)) + 1.0


def l2_normalize_rows(X: sp.csr_matrix) -> sp.csr_matrix:
    """Each non-empty row x divided by its Euclidean norm ‖x‖₂ = sqrt(Σ_j x_j²), computed in float64
    on the stored values only: time and memory follow nnz, never the width."""
    data = np.asarray(X.data, dtype=np.float64)
    rows = np.repeat(np.arange(X.shape[0]), np.diff(X.indptr))
    norms = np.sqrt(np.bincount(rows, weights=data * data, minlength=X.shape[0]))
    scale = np.divide(1.0, norms, out=np.zeros_like(norms), where=norms > 0)
    return sp.csr_matrix(((data * scale[rows]).astype(np.float32), X.indices, X.indptr), shape=X.shape)


def _first_bad_entry_per_row(X: sp.csr_matrix, bad: np.ndarray) -> dict[int, int]:
    """{row: index into X.data of the row's first True entry of bad}."""
    entries = np.flatnonzero(bad)
    rows = np.searchsorted(X.indptr, entries, side="right") - 1
    first: dict[int, int] = {}
    for row, k in zip(rows.tolist(), entries.tolist()):
        first.setdefault(row, k)
    return first


class Featurizer:
    """hashing: a HashingConfig, or None to keep numeric indices (`--no-hash`; text sources
    must be hashed). n_features: fixed width, or None to grow to the largest index seen (no-hash)."""

    def __init__(
        self, hashing=None, n_features: int | None = None, idf: np.ndarray | None = None, l2_normalize: bool = False
    ):
        self.hashing = hashing
        self.hasher = None
        if hashing is not None:
            from streamfit.ingest.hashing import FeatureHasher

            self.hasher = FeatureHasher(hashing)
            n_features = hashing.n_features
        self.n_features = n_features
        self.idf = idf
        self.l2_normalize = l2_normalize

    def to_dict(self) -> dict:
        return {
            "hashing": self.hashing.to_dict() if self.hashing is not None else None,
            "n_features": self.n_features,
            "idf": self.idf is not None,
            "l2_normalize": self.l2_normalize,
        }

    @classmethod
    def from_dict(cls, d: dict, idf: np.ndarray | None = None) -> Featurizer:
        hashing = None
        if d.get("hashing") is not None:
            from streamfit.ingest.hashing import HashingConfig

            hashing = HashingConfig.from_dict(d["hashing"])
        return cls(hashing, d.get("n_features"), idf if d.get("idf") else None, bool(d.get("l2_normalize")))

    def raw_rows(self, batch) -> sp.csr_matrix:
        """Hashed or kept-index rows of a TextBatch / SparseBatch / DenseBatch, before IDF/l2."""
        from streamfit.ingest.sources import DenseBatch, SparseBatch, TextBatch

        if isinstance(batch, TextBatch):
            if self.hasher is None:
                raise StreamfitError("raw text must be hashed: drop --no-hash for text sources")
            # one text field hashes with the base seed (as scikit-learn's HashingVectorizer);
            # several fields each get their own namespace seed
            texts = batch.texts if len(batch.texts) > 1 else next(iter(batch.texts.values()))
            if any(isinstance(t, list) for column in batch.texts.values() for t in column[:1]):
                if len(batch.texts) > 1:
                    raise StreamfitError("pre-tokenized text (lists of tokens) is supported in one text field only")
                X = self.hasher.transform_tokens(texts)
            else:
                X = self.hasher.transform_text(texts)
        elif isinstance(batch, SparseBatch):
            X = self.hasher.transform_indices(batch.X) if self.hasher else batch.X.tocsr()
        elif isinstance(batch, DenseBatch):
            X = self.hasher.transform_dense(batch.X) if self.hasher else sp.csr_matrix(batch.X)
        else:
            raise TypeError(f"unknown batch type {type(batch)}")
        X.sum_duplicates()
        X.sort_indices()
        return X

    def out_of_range(self, X: sp.csr_matrix, idf_to_come: bool = False) -> dict[int, tuple[str, str]]:
        """{row: (problem, hint)} for the rows of raw_rows output X holding a value that is not
        finite in float32 (|v| > 3.4e38, the sum of colliding hashed features included), or that
        is not after this featurizer's IDF weights (v × idf_j, in float64). idf_to_come: IDF
        weights are not known yet (the first pass of an --idf ingest), so values are held within
        FLOAT32_MAX / IDF_WEIGHT_BOUND, which no IDF weight can push beyond float32."""
        data = np.asarray(X.data, dtype=np.float64)
        problems: dict[int, tuple[str, str]] = {}
        summed = "features hashed to one column are summed" if self.hasher is not None else "repeated indices summed"
        for row, k in _first_bad_entry_per_row(X, ~(np.abs(data) <= FLOAT32_MAX)).items():
            value = f"feature value {data[k]:.3g}" if np.isfinite(data[k]) else "a feature value"
            problems[row] = (f"{value} is beyond float32's ±3.4e38 ({summed})", SCALE_HINT)
        if self.idf is not None:
            weights = np.ones_like(data)  # indices beyond the IDF weights are refused by the width checks
            known = X.indices < self.idf.size
            weights[known] = self.idf[X.indices[known]]
            with np.errstate(over="ignore"):  # as finish weights them: the float32 values
                weighted = data.astype(np.float32).astype(np.float64) * weights
            for row, k in _first_bad_entry_per_row(X, ~(np.abs(weighted) <= FLOAT32_MAX)).items():
                problems.setdefault(
                    row,
                    (
                        f"feature value {data[k]:.3g} times its IDF weight {weights[k]:.3g} is beyond "
                        "float32's ±3.4e38",
                        SCALE_HINT,
                    ),
                )
        elif idf_to_come:
            limit = FLOAT32_MAX / IDF_WEIGHT_BOUND
            for row, k in _first_bad_entry_per_row(X, ~(np.abs(data) <= limit)).items():
                problems.setdefault(
                    row,
                    (
                        f"feature value {data[k]:.3g} is beyond ±{limit:.3g}, the most that IDF weights "
                        f"(up to {IDF_WEIGHT_BOUND:.3g}) keep within float32",
                        f"{SCALE_HINT}, or drop --idf",
                    ),
                )
        return problems

    def finish(self, X: sp.csr_matrix) -> sp.csr_matrix:
        """IDF weighting and l2 normalization of rows from raw_rows; the rows that out_of_range
        names must be dropped before (in float32 their values would become infinite)."""
        X = sp.csr_matrix(X, dtype=np.float32)
        if self.idf is not None:
            X = sp.csr_matrix(((X.data * self.idf[X.indices]).astype(np.float32), X.indices, X.indptr), shape=X.shape)
        if self.l2_normalize:
            X = l2_normalize_rows(X)
        return X

    def transform(self, batch) -> sp.csr_matrix:
        """Rows of a batch in the model's feature space (width n_features; extra indices refused)."""
        X = self.raw_rows(batch)
        if X.nnz and self.n_features is not None and int(X.indices.max()) >= self.n_features:
            row = int(np.searchsorted(X.indptr, int(np.argmax(X.indices >= self.n_features)), side="right")) - 1
            from streamfit.ingest.sources.batches import beyond_width

            column = int(X.indices[X.indptr[row] : X.indptr[row + 1]].max())
            raise StreamfitError(
                f"{batch.locations[row]}: {beyond_width(batch, column, self.n_features)} the training data was "
                "ingested with; score data of the training data's kind (or retrain with --n-features covering it)"
            )
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], self.n_features or X.shape[1]))
        problems = self.out_of_range(X)
        if problems:
            row = min(problems)
            raise InputError(batch.locations[row], *problems[row])
        return self.finish(X)
