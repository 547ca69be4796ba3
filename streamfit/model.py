"""Trained models: a self-describing directory with weights, classes and the feature config.

`model/model.json` names the model kind, the classes, the task, the number of features, the
featurizer (hashing config and transforms, so raw data can be scored the way it was trained),
the solver and its parameters, and the SHA-256 of `model/arrays.npz`. Kinds register
themselves in MODEL_KINDS; `LinearModel` (scores = X Wᵀ + b) is the common one.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil

import numpy as np
import scipy.sparse as sp

from streamfit.errors import StreamfitError, output_error
from streamfit.store.format import publish_dir, write_bytes

MODEL_FORMAT_VERSION = 1
MODEL_KINDS: dict[str, type[Model]] = {}


def register_model(cls):
    MODEL_KINDS[cls.kind] = cls
    return cls


def _as_csr(X, n_features: int) -> sp.csr_matrix:
    X = sp.csr_matrix(X) if not sp.issparse(X) else X.tocsr()
    if X.shape[1] != n_features:
        raise StreamfitError(f"input has {X.shape[1]} features but the model was trained on {n_features}")
    return X


class Model:
    """Base class. Subclasses define `kind`, `_scores(X)` and their arrays."""

    kind = "base"

    def __init__(
        self,
        *,
        classes,
        n_features: int,
        multilabel: bool = False,
        featurizer: dict | None = None,
        solver: str = "",
        params: dict | None = None,
        info: dict | None = None,
        idf: np.ndarray | None = None,
    ):
        self.classes_ = np.asarray([str(c) for c in classes])
        self.n_features = int(n_features)
        self.multilabel = bool(multilabel)
        self.featurizer = featurizer or {}
        self.solver = solver
        self.params = params or {}
        self.info = info or {}
        self.idf = idf  # the featurizer's IDF weights, when the training store had them

    def check_store(self, store) -> None:
        """StreamfitError naming what differs (width, or classes) when a store is not shaped
        like the training store, as evaluating needs (streamfit.metrics.evaluate calls it)."""
        fix = "ingest it with --like TRAIN_STORE so it shares the training store's hashing and classes"
        if store.n_features != self.n_features:
            raise StreamfitError(f"{store.path}: has {store.n_features} features, the model {self.n_features}; {fix}")
        theirs, ours = list(store.classes), self.classes_.tolist()
        if len(theirs) != len(ours):
            raise StreamfitError(f"{store.path}: has {len(theirs)} classes, the model {len(ours)}; {fix}")
        for i, (a, b) in enumerate(zip(theirs, ours)):
            if a != b:
                raise StreamfitError(f"{store.path}: its class {i} is {a!r}, the model's is {b!r}; {fix}")

    # -- scoring --------------------------------------------------------------------------
    def _scores(self, X: sp.csr_matrix) -> np.ndarray:
        raise NotImplementedError

    def decision_function(self, X) -> np.ndarray:
        """Scores (n_samples × n_classes) for scipy.sparse / numpy input, or a store (chunked)."""
        from streamfit.store import ChunkSource

        if isinstance(X, ChunkSource):
            return np.vstack([self._scores(c.X) for c in X.iter_chunks()])
        return self._scores(_as_csr(X, self.n_features))

    def predict(self, X):
        """Multiclass: the top class per row. Multilabel: a 0/1 indicator of classes scored > 0."""
        S = self.decision_function(X)
        if self.multilabel:
            return (S > 0).astype(np.int8)
        return self.classes_[np.argmax(S, axis=1)]

    def predict_topk(self, X, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """(class indices, scores) of the k best classes per row, best first."""
        S = self.decision_function(X)
        k = min(k, S.shape[1])
        top = np.argpartition(-S, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(S, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        return top, np.take_along_axis(S, top, axis=1)

    # -- persistence ----------------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _extra(self) -> dict:
        return {}

    def save(self, path: str) -> None:
        """Write the model directory atomically (to PATH.partial, then rename)."""
        from streamfit import __version__

        path = os.path.abspath(path)
        tmp = path + ".partial"
        buf = io.BytesIO()
        arrays = self._arrays()
        if self.idf is not None:
            arrays["featurizer_idf"] = self.idf
        # C order always: a solver's arrays may be Fortran-ordered in one run and not after a
        # resume, and the same model must be the same bytes
        np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]  # mypy: a **dict might hold allow_pickle (bool)
        data = buf.getvalue()
        record = {
            "format": "streamfit-model",
            "format_version": MODEL_FORMAT_VERSION,
            "kind": self.kind,
            "classes": self.classes_.tolist(),
            "n_features": self.n_features,
            "multilabel": self.multilabel,
            "featurizer": self.featurizer,
            "solver": self.solver,
            "params": self.params,
            "info": self.info,
            "extra": self._extra(),
            "arrays_sha256": hashlib.sha256(data).hexdigest(),
            "streamfit_version": __version__,
        }
        try:
            shutil.rmtree(tmp, ignore_errors=True)
            os.makedirs(tmp)
            write_bytes(os.path.join(tmp, "arrays.npz"), data)
            write_bytes(os.path.join(tmp, "model.json"), json.dumps(record, indent=1, default=str).encode())
            publish_dir(tmp, path)
        except OSError as e:  # disk full, read-only: no half-written model/ is left behind
            shutil.rmtree(tmp, ignore_errors=True)
            raise output_error(tmp, e) from e

    @classmethod
    def _from_saved(cls, common: dict, arrays: dict, extra: dict) -> Model:
        raise NotImplementedError


@register_model
class LinearModel(Model):
    """scores = X coef_ᵀ + intercept_; coef_ is (n_classes × n_features), dense or scipy.sparse CSR."""

    kind = "linear"

    def __init__(self, coef, intercept=None, **common):
        super().__init__(**common)
        self.coef_ = coef.tocsr() if sp.issparse(coef) else np.asarray(coef)
        k = len(self.classes_)
        self.intercept_ = np.zeros(k) if intercept is None else np.asarray(intercept, dtype=np.float64)
        if self.coef_.shape != (k, self.n_features):
            raise ValueError(f"coef_ has shape {self.coef_.shape}, expected {(k, self.n_features)}")

    def _scores(self, X):
        S = X @ self.coef_.T
        S = S.toarray() if sp.issparse(S) else np.asarray(S)
        return S + self.intercept_

    def _arrays(self):
        if sp.issparse(self.coef_):
            c = self.coef_.tocsr()
            return {
                "coef_data": c.data,
                "coef_indices": c.indices,
                "coef_indptr": c.indptr,
                "intercept": self.intercept_,
            }
        return {"coef": self.coef_, "intercept": self.intercept_}

    def _extra(self):
        return {"sparse": sp.issparse(self.coef_)}

    @classmethod
    def _from_saved(cls, common, arrays, extra):
        if extra.get("sparse"):
            shape = (len(common["classes"]), common["n_features"])
            coef = sp.csr_matrix((arrays["coef_data"], arrays["coef_indices"], arrays["coef_indptr"]), shape=shape)
        else:
            coef = arrays["coef"]
        return cls(coef, arrays["intercept"], **common)


def load_model(path: str) -> Model:
    """Load a model directory (a run directory's `model/`, or the run directory itself)."""
    if os.path.isdir(os.path.join(path, "model")) and not os.path.exists(os.path.join(path, "model.json")):
        path = os.path.join(path, "model")
    meta_path = os.path.join(path, "model.json")
    if not os.path.exists(meta_path):
        raise StreamfitError(f"{path}: no model.json here; point at a run directory or its model/ folder")
    with open(meta_path) as f:
        record = json.load(f)
    if record.get("format") != "streamfit-model" or record.get("format_version") != MODEL_FORMAT_VERSION:
        raise StreamfitError(f"{meta_path}: not a model of format version {MODEL_FORMAT_VERSION}")
    with open(os.path.join(path, "arrays.npz"), "rb") as f:
        data = f.read()
    if hashlib.sha256(data).hexdigest() != record["arrays_sha256"]:
        raise StreamfitError(f"{path}/arrays.npz: fails its checksum; the model is damaged")
    with np.load(io.BytesIO(data), allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    kind = record["kind"]
    if kind not in MODEL_KINDS:
        import streamfit.solvers  # noqa: F401 - solver modules register their model kinds

    if kind not in MODEL_KINDS:
        raise StreamfitError(f"{meta_path}: unknown model kind {kind!r}")
    common = {k: record[k] for k in ("classes", "n_features", "multilabel", "featurizer", "solver", "params", "info")}
    common["idf"] = arrays.pop("featurizer_idf", None)
    return MODEL_KINDS[kind]._from_saved(common, arrays, record.get("extra", {}))
