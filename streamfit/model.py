"""Trained models: a self-describing directory with weights, classes and the feature config.

`model/model.json` names the model kind, the classes (for regression: the outputs' names),
the task (`multilabel`, `regression`: predict returns real values), the number of features, the
featurizer (hashing config and transforms, so raw data can be scored the way it was trained),
the solver and its parameters, the SHA-256 of `model/arrays.npz`, and `record_sha256`, the
SHA-256 of model.json's own canonical form (format.json_digest). arrays.npz repeats the classes
(`model_classes`) and the width (`model_n_features`). `load_model` checks both digests, then every field, then the arrays against
the fields: the same classes, numeric and finite values, shapes that fit the classes and
features (one empty row must score to 1 × n_classes and rank). Version 1 had no
`record_sha256` and is refused (retrain). Kinds register themselves in MODEL_KINDS;
`LinearModel` (scores = X Wᵀ + b) is the common one.

The decision rule is stated in the model (model.json's `decision`): multiclass, the top-scored
class among those with training rows (a class that a store declares and no training row holds,
model.json's `classes_without_rows`, is ranked below every other: its score is its offset alone,
which no row's term bounded; see `Model.ranking_scores`); multilabel, every label whose score
is > `decision_threshold`. A kind's default threshold
(`Model.default_threshold`) follows what its scores are: 0 for margins (linear models, logits),
0.5 for scores that estimate probabilities (stagewise's identity link, fitted to 0/1 targets).
`Model.predict`, `streamfit.metrics.evaluate`, `streamfit predict` and the estimators all
apply `decide` with the saved threshold, unless the caller passes another one.
"""

from __future__ import annotations

import hashlib
import io
import json
import sys
from collections.abc import Callable

import numpy as np
import scipy.sparse as sp

from streamfit import storage
from streamfit.errors import ConfigError, ScoringInputError, StreamfitError, output_error
from streamfit.store.format import is_sha256, json_digest

MODEL_FORMAT_VERSION = 3
MODEL_DIGEST_KEY = "record_sha256"
RETRAIN = "the model is damaged, retrain it (or restore it from a copy)"
MODEL_KINDS: dict[str, type[Model]] = {}


def register_model(cls):
    MODEL_KINDS[cls.kind] = cls
    return cls


# numpy kinds of labels whose type a model records (bool, signed and unsigned integers, floats)
CLASS_DTYPE_KINDS = "biuf"


def typed_classes(names, dtype) -> np.ndarray:
    """The class names (strings, as `str` wrote each label) read back as labels of `dtype` (numpy
    bool, integer or float), so that a model fitted on int labels predicts ints: each name is
    parsed (bool: "True"/"False") and must print as itself again, else a ValueError naming it."""
    dtype = np.dtype(dtype)
    if dtype.kind not in CLASS_DTYPE_KINDS:
        raise ValueError(f"class dtype {dtype.str!r}: not a bool, integer or float type")
    parse: Callable[[str], bool | int | float] = int
    if dtype.kind == "b":
        parse = {"True": True, "False": False}.__getitem__
    elif dtype.kind == "f":
        parse = float
    try:
        labels = np.array([parse(str(name)) for name in names], dtype=dtype)
    except (KeyError, ValueError, OverflowError) as e:
        names = [str(name) for name in names]
        raise ValueError(f"class names {names!r:.80} are not labels of dtype {dtype.str!r} ({e})") from None
    for name, label in zip(names, labels):
        if str(label) != name:
            raise ValueError(
                f"class name {str(name)!r} reads as {str(label)!r} of dtype {dtype.str!r}, which is not the same name"
            )
    return labels


def decide(S: np.ndarray, threshold: float) -> np.ndarray:
    """The multilabel decision rule: label r is on for row i when S_ir > threshold (n × k bool)."""
    return S > threshold


def check_scoring_options(model: Model, *, threshold=None, per_label: bool = False, top_k: int = 1) -> None:
    """ConfigError for an evaluate or predict option that the model's kind would ignore: a
    decision threshold for a model that is not multilabel (train refuses it for such a store
    too), and per-label metrics or more than one value per row for a regression model."""
    kind = "a regression model" if model.regression else "a multiclass model"
    if threshold is not None and not model.multilabel:
        raise ConfigError(f"--threshold {threshold}: applies to multilabel models, and this is {kind}; drop it")
    if per_label and model.regression:
        raise ConfigError(
            "--per-label: precision, recall and F1 are for class labels, and this is a regression model "
            "(its metrics are given per output); drop it"
        )
    if top_k != 1 and model.regression:
        raise ConfigError(f"--top-k {top_k}: a regression model writes one value per output and row; drop it")


def missing_as_nan(X: np.ndarray) -> np.ndarray:
    """An object array (a pandas frame of nullable dtypes, e.g. Float64 or Int64) with its
    missing values (pd.NA, None) as NaN, so that they meet the NaN check's error, as in
    scikit-learn, instead of float()'s TypeError on pd.NA. Other arrays are returned as they are;
    pandas is only looked up, never imported (an array holding pd.NA comes from it)."""
    pd = sys.modules.get("pandas")
    if X.dtype != object or pd is None:
        return X
    missing = pd.isna(X)
    if not missing.any():
        return X
    X = X.copy()
    X[missing] = np.nan
    return X


def _as_csr(X, n_features: int) -> sp.csr_matrix:
    """X (numpy, a list of rows, pandas, scipy.sparse) as CSR with the model's feature count and
    finite values; raises ScoringInputError otherwise (a NaN would score NaN, and argmax would
    then pick the first class without a word)."""
    if not sp.issparse(X):
        dense = missing_as_nan(np.asarray(X))
        if dense.dtype.kind == "O":  # numbers held as objects (a pandas frame of mixed dtypes)
            try:
                dense = dense.astype(np.float64)
            except (TypeError, ValueError):
                pass
        if dense.dtype.kind not in "biuf":
            raise ScoringInputError(
                f"input of dtype {dense.dtype} is not a numeric matrix: the model scores numbers, "
                f"n × {n_features} (numpy or scipy.sparse); raw records (text) are featurized as the "
                "training store was by `streamfit predict RUN FILE`"
            )
        X = sp.csr_matrix(dense)
    else:
        X = X.tocsr()
    if X.shape[1] != n_features:
        raise ScoringInputError(f"input has {X.shape[1]} features but the model was trained on {n_features}")
    if X.data.dtype.kind == "f":
        with np.errstate(over="ignore", invalid="ignore"):
            finite = np.isfinite(X.data.sum())  # one sum decides in the common all-finite case
        if not finite:
            bad = np.flatnonzero(~np.isfinite(X.data))
            if bad.size:
                row = int(np.searchsorted(X.indptr, bad[0], side="right") - 1)
                raise ScoringInputError(
                    f"input holds {bad.size} NaN or infinite value(s), the first in row {row} (from 0), "
                    f"column {int(X.indices[bad[0]])}; replace or drop them before scoring"
                )
    return X


def featurization_differences(theirs: dict, their_idf, ours: dict, our_idf) -> list[str]:
    """How rows featurized as `theirs` (a store's featurizer_dict) differ from rows featurized as
    `ours` (the training store's, as a model records it): the hashing settings, IDF weights
    (`their_idf`: a function that reads theirs, called only when both have IDF) and row
    normalization, each named with both values, and the ARFF feature header where both record
    one; [] when they agree. Keys that `ours` does not record are not compared."""
    from streamfit.ingest.hashing import HashingConfig

    def hashing(d: dict | None) -> dict | None:
        return None if d is None else HashingConfig.from_dict(dict(d)).to_dict()

    out = []
    if "hashing" in ours:
        a, b = hashing(theirs.get("hashing")), hashing(ours["hashing"])
        if (a is None) != (b is None):
            out.append(f"{'not ' if a is None else ''}hashed (the model's rows {'not ' if b is None else ''}hashed)")
        elif a is not None and b is not None:
            out += [f"hashing {k}={a[k]!r} (the model's {b[k]!r})" for k in b if a.get(k) != b[k]]
    if "l2_normalize" in ours and bool(theirs.get("l2_normalize")) != bool(ours["l2_normalize"]):
        out.append(f"l2_normalize={bool(theirs.get('l2_normalize'))} (the model's {bool(ours['l2_normalize'])})")
    if "idf" in ours:
        if bool(theirs.get("idf")) != bool(ours["idf"]):
            out.append(
                f"IDF weights {'on' if theirs.get('idf') else 'off'} (the model's {'on' if ours['idf'] else 'off'})"
            )
        elif ours["idf"] and our_idf is not None and not np.array_equal(their_idf(), our_idf):
            out.append("IDF weights counted on other training rows")
    # ARFF inputs' columns follow the feature header (streamfit.ingest.sources.arff), recorded since session 21
    a_header = theirs.get("source_options", {}).get("arff_header")
    b_header = ours.get("source_options", {}).get("arff_header")
    if a_header is not None and b_header is not None and a_header["sha256"] != b_header["sha256"]:
        out.append(
            "ARFF feature attributes or nominal values declared otherwise (the model's columns follow another header)"
        )
    # NumPy/HDF5 inputs' width (arrays.check_columns), recorded since session 22
    a_width = theirs.get("source_options", {}).get("x_columns")
    b_width = ours.get("source_options", {}).get("x_columns")
    if a_width is not None and b_width is not None and a_width != b_width:
        out.append(f"arrays of {a_width} feature columns (the model's {b_width}: other features by position)")
    return out


class Model:
    """Base class. Subclasses define `kind`, `_scores(X)` and their arrays."""

    kind = "base"
    # saved float arrays that may hold +inf by design (load_model refuses NaN and ±inf elsewhere)
    may_hold_plus_infinity: frozenset[str] = frozenset()

    def __init__(
        self,
        *,
        classes,
        n_features: int,
        multilabel: bool = False,
        regression: bool = False,
        featurizer: dict | None = None,
        solver: str = "",
        params: dict | None = None,
        info: dict | None = None,
        idf: np.ndarray | None = None,
        decision_threshold: float | None = None,
        class_dtype: str | None = None,
        classes_without_rows: list[str] | None = None,
    ):
        # the classes' names (strings: stores, model.json, the CLI's outputs) and, where the model
        # records the labels' type (an estimator fitted on ints, floats or bools), the labels
        # themselves in that type: classes_ is what predict returns (see `typed_classes`)
        self.class_names = np.asarray([str(c) for c in classes])
        self.class_dtype = None if class_dtype is None else np.dtype(class_dtype).str
        self.classes_ = self.class_names if class_dtype is None else typed_classes(self.class_names, class_dtype)
        self.n_features = int(n_features)
        self.multilabel = bool(multilabel)
        self.regression = bool(regression)  # real-valued outputs (classes_ names them), not classes
        self.featurizer = featurizer or {}
        self.solver = solver
        self.params = params or {}
        self.info = info or {}
        self.idf = idf  # the featurizer's IDF weights, when the training store had them
        # multilabel: a label is on when its score is > decision_threshold (see `decide`)
        self.decision_threshold = self.default_threshold() if decision_threshold is None else float(decision_threshold)
        self.set_classes_without_rows(classes_without_rows or [])

    def __setstate__(self, state: dict) -> None:
        """Unpickling: a model pickled before models recorded the labels' type has string names
        only, and one pickled before they recorded the classes without rows ranks every class."""
        state.setdefault("class_names", state["classes_"])
        state.setdefault("class_dtype", None)
        state.setdefault("classes_without_rows", [])
        self.__dict__.update(state)

    def set_classes_without_rows(self, names: list[str]) -> None:
        """Record the classes that no training row holds (multiclass; names from class_names):
        the multiclass decision and top-k rank them below every class with rows. ValueError
        for a name that is not a class, or for every class."""
        names = [str(c) for c in names]
        unknown = sorted(set(names) - set(self.class_names.tolist()))
        if unknown:
            raise ValueError(f"classes without rows {unknown!r:.80} are not among the model's classes")
        if names and len(set(names)) >= len(self.class_names):
            raise ValueError("every class is without training rows")
        self.classes_without_rows = [c for c in self.class_names.tolist() if c in set(names)]

    def ranking_scores(self, S: np.ndarray) -> np.ndarray:
        """The scores S (n × k) that the multiclass decision and top-k rank: S itself, except that
        the classes without training rows score -inf (a copy then), so that the top class is
        always one the training rows held. Multilabel and regression scores are returned as
        they are (a label never on in training is decided by the threshold like any other)."""
        unranked = self.unranked_classes()
        if not unranked.size:
            return S
        S = np.array(S, dtype=np.float64)
        S[:, unranked] = -np.inf
        return S

    def unranked_classes(self) -> np.ndarray:
        """The indices of the classes that `ranking_scores` puts last: a multiclass model's
        classes without training rows (int64, ascending; empty for other models)."""
        if self.multilabel or self.regression:
            return np.zeros(0, np.int64)
        return np.flatnonzero(np.isin(self.class_names, self.classes_without_rows))

    def top_class(self, S: np.ndarray) -> np.ndarray:
        """The multiclass decision on scores S (n × k): each row's class index (n,) of the best
        ranking score (`ranking_scores`)."""
        return np.argmax(self.ranking_scores(S), axis=1)

    def set_class_dtype(self, dtype) -> None:
        """Record that the classes are labels of `dtype` (numpy bool, integer or float; an estimator's
        y): classes_ and predict then give them in that type, saved models too (model.json's
        `class_dtype`). Strings and objects keep the names. ValueError when a name does not read
        back as the same label."""
        dtype = np.dtype(dtype)
        if dtype.kind in CLASS_DTYPE_KINDS:
            self.classes_ = typed_classes(self.class_names, dtype)
            self.class_dtype = dtype.str

    score_kind = "margin"  # what the scores are: "margin" (sign decides) or "probability" (0/1 targets fitted)

    def default_threshold(self) -> float:
        """The multilabel threshold that fits the scores' kind: 0 for margins, 0.5 for probabilities."""
        return 0.5 if self.score_kind == "probability" else 0.0

    def probabilities(self, S: np.ndarray) -> np.ndarray | None:
        """Class (multilabel: label) probabilities from the scores S, n × k, for kinds whose scores
        give them (log loss in `evaluate`); None for the others."""
        return None

    def check_store(self, store) -> None:
        """StreamfitError naming what differs (width, or classes) when a store is not shaped
        like the training store, as evaluating needs (streamfit.metrics.evaluate calls it)."""
        fix = "ingest it with --like TRAIN_STORE so it shares the training store's hashing and classes"
        if store.regression != self.regression:
            what = {True: "real-valued targets (regression)", False: "class labels"}
            raise StreamfitError(
                f"{store.path}: holds {what[store.regression]}, the model predicts {what[self.regression]}; {fix}"
            )
        if store.n_features != self.n_features:
            raise StreamfitError(f"{store.path}: has {store.n_features} features, the model {self.n_features}; {fix}")
        theirs, ours = list(store.classes), self.class_names.tolist()
        if len(theirs) != len(ours):
            raise StreamfitError(f"{store.path}: has {len(theirs)} classes, the model {len(ours)}; {fix}")
        for i, (a, b) in enumerate(zip(theirs, ours)):
            if a != b:
                raise StreamfitError(f"{store.path}: its class {i} is {a!r}, the model's is {b!r}; {fix}")
        self.check_features(store)

    def check_features(self, store) -> None:
        """StreamfitError when the store's rows were made otherwise than the training rows (the
        hashing, IDF weights or row normalization that the model records; a width that matches
        does not say so). Nothing for a model or store that records none (the estimators')."""
        if not self.featurizer or not hasattr(store, "featurizer_dict"):
            return
        differences = featurization_differences(store.featurizer_dict(), lambda: store.idf, self.featurizer, self.idf)
        if differences:
            raise StreamfitError(
                f"{store.path}: its rows were not made as the model's training rows ({'; '.join(differences)}); "
                "ingest it with --like TRAIN_STORE so it shares the training store's hashing, IDF and classes"
            )

    # -- scoring --------------------------------------------------------------------------
    def _scores(self, X: sp.csr_matrix) -> np.ndarray:
        raise NotImplementedError

    def decision_function(self, X) -> np.ndarray:
        """Scores (n_samples × n_classes) for scipy.sparse / numpy input, or a store (chunked)."""
        from streamfit.store import ChunkSource

        if isinstance(X, ChunkSource):
            return np.vstack([self._scores(c.X) for c in X.iter_chunks()])
        return self._scores(_as_csr(X, self.n_features))

    def predict(self, X, threshold: float | None = None):
        """Multiclass: the top class per row. Multilabel: a 0/1 indicator (n × k int8) of the
        labels scored > `threshold` (default: the model's decision_threshold). Regression: the
        predicted values, shape (n,) for one output, else (n, k)."""
        S = self.decision_function(X)
        if self.regression:
            return S[:, 0] if S.shape[1] == 1 else S
        if self.multilabel:
            return decide(S, self.decision_threshold if threshold is None else threshold).astype(np.int8)
        return self.classes_[self.top_class(S)]

    def predict_topk(self, X, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """(class indices, scores) of the k best classes per row, best first."""
        return self.top_k(self.decision_function(X), k)

    def top_k(self, S: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(class indices, scores) of the k best classes of each row of S, best first, ranked by
        `ranking_scores` (classes without training rows last); the scores are S's."""
        R = self.ranking_scores(S)
        k = min(k, S.shape[1])
        top = np.argpartition(-R, k - 1, axis=1)[:, :k]
        order = np.argsort(-np.take_along_axis(R, top, axis=1), axis=1, kind="stable")
        top = np.take_along_axis(top, order, axis=1)
        return top, np.take_along_axis(S, top, axis=1)

    # -- persistence ----------------------------------------------------------------------
    def _arrays(self) -> dict[str, np.ndarray]:
        raise NotImplementedError

    def _extra(self) -> dict:
        return {}

    def __sizeof__(self) -> int:
        """Bytes held, the arrays included: what Dask's sizeof reads, so that a model larger than
        streamfit.engine.BROADCAST_BYTES is scattered to the workers once, not sent with every task."""
        return object.__sizeof__(self) + sum(np.asarray(a).nbytes for a in self._arrays().values())

    def save(self, path: str) -> None:
        """Write the model directory (a local path or URL) by storage's commit protocol: it
        appears complete or not at all (local: PATH.partial, then a rename)."""
        from streamfit import __version__

        buf = io.BytesIO()
        arrays = self._arrays()
        if self.idf is not None:
            arrays["featurizer_idf"] = self.idf
        arrays["model_classes"] = self.class_names  # copies covered by arrays_sha256: load_model compares
        arrays["model_n_features"] = np.array([self.n_features], dtype=np.int64)
        # C order always: a solver's arrays may be Fortran-ordered in one run and not after a
        # resume, and the same model must be the same bytes
        np.savez(buf, **{k: np.ascontiguousarray(v) for k, v in arrays.items()})  # type: ignore[arg-type]  # mypy: a **dict might hold allow_pickle (bool)
        data = buf.getvalue()
        record = {
            "format": "streamfit-model",
            "format_version": MODEL_FORMAT_VERSION,
            "kind": self.kind,
            "classes": self.class_names.tolist(),
            **({} if self.class_dtype is None else {"class_dtype": self.class_dtype}),
            **({"classes_without_rows": self.classes_without_rows} if self.classes_without_rows else {}),
            "n_features": self.n_features,
            "multilabel": self.multilabel,
            "regression": self.regression,
            "featurizer": self.featurizer,
            "solver": self.solver,
            "params": self.params,
            "info": self.info,
            "extra": self._extra(),
            "decision": {
                "rule": "multiclass: the top-scored class; multilabel: every label with score > threshold",
                "threshold": self.decision_threshold,
                "scores": self.score_kind,
            },
            "arrays_sha256": hashlib.sha256(data).hexdigest(),
            "streamfit_version": __version__,
        }
        record = json.loads(json.dumps(record, default=str))  # as load_model will see it
        record[MODEL_DIGEST_KEY] = json_digest(record, MODEL_DIGEST_KEY)
        attempt = storage.begin(storage.resolve(path), what="model")
        try:
            attempt.location.makedirs()
            attempt.location.join("arrays.npz").write_new(data)
            attempt.location.join("model.json").write_new(json.dumps(record, indent=1).encode())
            attempt.commit()
        except OSError as e:  # disk full, read-only: no half-written model/ is left behind
            attempt.abort()
            raise output_error(attempt.location.url, e) from e

    @classmethod
    def _from_saved(cls, common: dict, arrays: dict, extra: dict) -> Model:
        raise NotImplementedError


# a fitted linear model (converged, or without a stopping test) whose every weight is 0
ALL_ZERO_WEIGHTS = (
    "every weight of the model is 0: it predicts from its intercepts alone, the same for every row; "
    "the penalty is too strong for this data: lower it (lam, lam_scale or lam_ratio, or their defaults)"
)


def all_weights_zero(model: Model) -> bool:
    """Whether `model` is a linear model, converged or without a stopping test, whose every
    weight is 0 (the case ALL_ZERO_WEIGHTS warns of)."""
    return model.info.get("converged") is not False and isinstance(model, LinearModel) and model.nonzero_weights() == 0


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
        if self.intercept_.shape != (k,):
            raise ValueError(f"intercept_ has shape {self.intercept_.shape}, expected {(k,)}")
        if sp.issparse(self.coef_):
            self.coef_.check_format(full_check=True)  # indptr and column indices in range

    def nonzero_weights(self) -> int:
        """The non-zero entries of coef_."""
        return int(self.coef_.count_nonzero() if sp.issparse(self.coef_) else np.count_nonzero(self.coef_))

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


_RECORD_RULES = {  # model.json field: (check, what it must be)
    "format": (lambda v: v == "streamfit-model", "'streamfit-model'"),
    "format_version": (lambda v: v == MODEL_FORMAT_VERSION, str(MODEL_FORMAT_VERSION)),
    "kind": (lambda v: isinstance(v, str), "a string"),
    "classes": (
        lambda v: isinstance(v, list) and v and all(isinstance(c, str) for c in v) and len(set(v)) == len(v),
        "a non-empty list of distinct strings",
    ),
    "n_features": (lambda v: type(v) is int and v >= 0, "an integer >= 0"),
    "multilabel": (lambda v: isinstance(v, bool), "true or false"),
    "regression": (lambda v: isinstance(v, bool), "true or false"),
    "featurizer": (lambda v: isinstance(v, dict), "an object"),
    "solver": (lambda v: isinstance(v, str), "a string"),
    "params": (lambda v: isinstance(v, dict), "an object"),
    "info": (lambda v: isinstance(v, dict), "an object"),
    "extra": (lambda v: isinstance(v, dict), "an object"),
    "decision": (
        lambda v: (
            isinstance(v, dict)
            and set(v) == {"rule", "threshold", "scores"}
            and type(v["threshold"]) in (int, float)
            and np.isfinite(v["threshold"])
            and v["scores"] in ("margin", "probability")
        ),
        "an object with rule, a finite threshold and scores ('margin' or 'probability')",
    ),
    "arrays_sha256": (is_sha256, "a SHA-256 digest"),
    "streamfit_version": (lambda v: isinstance(v, str), "a string"),
    MODEL_DIGEST_KEY: (is_sha256, "a SHA-256 digest"),
}


def _is_class_dtype(v) -> bool:
    """A numpy dtype string in its own canonical spelling ('<i8', '|b1', '<f4'), of a kind in
    CLASS_DTYPE_KINDS."""
    if not isinstance(v, str):
        return False
    try:
        dtype = np.dtype(v)
    except Exception:  # numpy's parser raises TypeError, ValueError or SyntaxError for odd strings
        return False
    return dtype.kind in CLASS_DTYPE_KINDS and dtype.str == v


_OPTIONAL_RECORD_RULES = {  # model.json fields written only where they apply
    "class_dtype": (_is_class_dtype, "a numpy bool, integer or float dtype such as '<i8' (the labels' type)"),
    "classes_without_rows": (
        lambda v: isinstance(v, list) and v and all(isinstance(c, str) for c in v),
        "a non-empty list of class names (the classes no training row held)",
    ),
}


def _read_record(meta: storage.Location) -> dict:
    """model.json, checked in order: JSON object, format and version, record_sha256, every field."""
    meta_path = meta.url
    try:
        record = json.loads(meta.read_bytes())
    except FileNotFoundError:
        raise StreamfitError(f"{meta_path}: no such file; point at a run directory or its model/ folder") from None
    except (OSError, ValueError) as e:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise StreamfitError(f"{meta_path}: unreadable ({e}); {RETRAIN}") from e
    if not isinstance(record, dict) or record.get("format") != "streamfit-model":
        raise StreamfitError(f"{meta_path}: not a streamfit model description; {RETRAIN}")
    if record.get("format_version") != MODEL_FORMAT_VERSION:
        raise StreamfitError(
            f"{meta_path}: model format version {record.get('format_version')!r}, this streamfit reads "
            f"{MODEL_FORMAT_VERSION}; retrain the model with this version"
        )
    if not is_sha256(record.get(MODEL_DIGEST_KEY)) or record[MODEL_DIGEST_KEY] != json_digest(record, MODEL_DIGEST_KEY):
        raise StreamfitError(
            f"{meta_path}: fails its checksum ({MODEL_DIGEST_KEY}); it was edited or damaged; {RETRAIN}"
        )
    for key in record:
        if key not in _RECORD_RULES and key not in _OPTIONAL_RECORD_RULES:
            raise StreamfitError(f"{meta_path}: {key} is not a model.json field; {RETRAIN}")
    for key, (ok, what) in _RECORD_RULES.items():
        if key not in record or not ok(record[key]):
            got = f"is {record[key]!r:.80}" if key in record else "is missing"
            raise StreamfitError(f"{meta_path}: {key} {got}, expected {what}; {RETRAIN}")
    for key, (ok, what) in _OPTIONAL_RECORD_RULES.items():
        if key in record and not ok(record[key]):
            raise StreamfitError(f"{meta_path}: {key} is {record[key]!r:.80}, expected {what}; {RETRAIN}")
    return record


def _model_files(location: storage.Location) -> storage.Location | None:
    """Where model.json and arrays.npz are: the committed `model/` inside a run directory at
    `location`, or `location` itself when it holds a model (storage.committed)."""
    for candidate in (location.join("model"), location):
        try:
            found = storage.committed(candidate)
        except StreamfitError as e:
            raise StreamfitError(f"{e}; {RETRAIN}") from None
        # behind a URL a committed directory is read, not asked about (a request fewer): a
        # committed one without model.json (a store) is named when load_model reads it
        if found is not None and (not found.local or found.join("model.json").exists()):
            return found
    return None


def load_model(path: str) -> Model:
    """Load a model directory (a run directory's `model/`, or the run directory itself; a local
    path or URL), every field and array checked (see the module docstring); StreamfitError
    naming the file and field."""
    location = storage.resolve(path)
    files = _model_files(location)
    if files is None:
        for candidate in (location.join("model"), location):
            copied = storage.copied_file_by_file(
                candidate, "model.json", "model", url_fix="train with --out at the URL", local_fix="pass that folder"
            )
            if copied is not None:
                raise StreamfitError(copied)
        if location.join("run.json").exists():
            raise StreamfitError(
                f"{path}: a run directory without a model yet (its train stopped before the end, or is still "
                "running); the same train command plus --resume finishes it"
            )
        raise StreamfitError(f"{path}: no model.json here; point at a run directory or its model/ folder")
    meta_path = files.join("model.json").url
    record = _read_record(files.join("model.json"))
    arrays_path = files.join("arrays.npz").url
    try:
        data = files.join("arrays.npz").read_bytes()
    except OSError as e:
        raise StreamfitError(f"{arrays_path}: unreadable ({e.strerror or e}); {RETRAIN}") from e
    if hashlib.sha256(data).hexdigest() != record["arrays_sha256"]:
        raise StreamfitError(f"{arrays_path}: fails its checksum; {RETRAIN}")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            arrays = {k: z[k] for k in z.files}
    except Exception as e:  # a zip or .npy error of any kind, object arrays included
        raise StreamfitError(f"{arrays_path}: unreadable ({e}); {RETRAIN}") from e
    names = arrays.pop("model_classes", None)
    if names is None or names.dtype.kind != "U" or names.tolist() != record["classes"]:
        got = "none" if names is None else f"{names.tolist()!r:.80}"
        raise StreamfitError(f"{arrays_path}: holds classes {got}, {meta_path} lists others; {RETRAIN}")
    width = arrays.pop("model_n_features", None)
    if width is None or width.shape != (1,) or int(width[0]) != record["n_features"]:
        got = "none" if width is None else f"{width.tolist()!r:.40}"
        raise StreamfitError(
            f"{arrays_path}: holds n_features {got}, {meta_path} says {record['n_features']}; {RETRAIN}"
        )
    kind = record["kind"]
    if kind not in MODEL_KINDS:
        from streamfit.solvers import import_model_kind

        import_model_kind(kind)

    if kind not in MODEL_KINDS:
        raise StreamfitError(
            f"{meta_path}: unknown model kind {kind!r} (known: {', '.join(sorted(MODEL_KINDS))}); {RETRAIN}"
        )
    for name, a in arrays.items():
        if a.dtype.kind not in "biuf":
            raise StreamfitError(f"{arrays_path}: array {name!r} is of dtype {a.dtype}, expected numbers; {RETRAIN}")
        if a.dtype.kind == "f":
            bad = ~np.isfinite(a)
            if name in MODEL_KINDS[kind].may_hold_plus_infinity:
                bad &= a != np.inf
            if bad.any():
                raise StreamfitError(f"{arrays_path}: array {name!r} holds NaN or infinite values; {RETRAIN}")
    common = {
        k: record[k]
        for k in ("classes", "n_features", "multilabel", "regression", "featurizer", "solver", "params", "info")
    }
    common["idf"] = arrays.pop("featurizer_idf", None)
    common["decision_threshold"] = record["decision"]["threshold"]
    common["class_dtype"] = record.get("class_dtype")
    common["classes_without_rows"] = record.get("classes_without_rows")
    if common["idf"] is not None and common["idf"].shape != (record["n_features"],):
        raise StreamfitError(
            f"{arrays_path}: featurizer_idf has shape {common['idf'].shape}, expected ({record['n_features']},); {RETRAIN}"
        )
    try:
        model = MODEL_KINDS[kind]._from_saved(common, arrays, record["extra"])
        probe = sp.csr_matrix((1, model.n_features))
        scores = model.decision_function(probe)
        model.predict_topk(probe, 1)
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise StreamfitError(f"{arrays_path}: does not match {meta_path} ({type(e).__name__}: {e}); {RETRAIN}") from e
    if np.shape(scores) != (1, len(model.classes_)):
        raise StreamfitError(
            f"{arrays_path}: scores {np.shape(scores)[1:]} classes, {meta_path} lists {len(model.classes_)}; {RETRAIN}"
        )
    return model
