"""scikit-learn style estimators for in-memory arrays.

They run exactly the code path of `streamfit train`: the arrays are wrapped in an
InMemoryStore, the solver runs on Engine(mode="inprocess") with Checkpointer(None) (per-sample
state in memory) and a MetricsLog kept in `history_`. scikit-learn itself is not needed;
`get_params` / `set_params` follow its conventions so that `clone`, grid search and pipelines
work.
"""

from __future__ import annotations

import inspect

import numpy as np
import scipy.sparse as sp

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.runlog import MetricsLog
from streamfit.solvers.stagewise import StagewiseParams, StagewiseSolver
from streamfit.store import DEFAULT_CHUNK_ROWS, InMemoryStore


class _ParamsMixin:
    """get_params / set_params from the __init__ signature (scikit-learn's BaseEstimator rules)."""

    @classmethod
    def _param_names(cls) -> list[str]:
        return [name for name in inspect.signature(cls.__init__).parameters if name != "self"]

    def get_params(self, deep: bool = True) -> dict:
        return {name: getattr(self, name) for name in self._param_names()}

    def set_params(self, **params):
        valid = self._param_names()
        for name, value in params.items():
            if name not in valid:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid: {', '.join(valid)}")
            setattr(self, name, value)
        return self

    def __repr__(self) -> str:
        defaults = {k: p.default for k, p in inspect.signature(type(self).__init__).parameters.items()}
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v is not defaults[k]]
        return f"{type(self).__name__}({', '.join(changed)})"


class StagewiseLSClassifier(_ParamsMixin):
    """Stagewise least-squares classifier (Agarwal et al. 2014, Algorithms 1–3); see
    streamfit.solvers.stagewise for the math.

    link: "identity" (ridge least squares per block) or "softmax" (generalized least squares
        on the multinomial logistic loss; per-label logistic for multilabel targets).
    calibrate: False; True or "poly" (Algorithm 2 with G(ŷ) = [ŷ, ŷ², ŷ³] and the projection
        onto the simplex); "predictions" (previous predictions as extra features).
    generator: "auto", "sequential", "random", "gradient" or "rff" (random Fourier features).
    block_size: features per stage (p). n_passes: passes over all blocks.
    n_components: number of random Fourier features (generator "rff").
    pca_components: PCA dimension before the random features (None: no PCA).
    bandwidth: Gaussian kernel width as a multiple of the median pairwise distance.
    lam: λ, with the loss averaged over samples: each stage minimises
        (1/n)‖R − AW‖² + λ‖W‖² (identity) or (1/n)Σ logistic + (λ/2)‖W‖² (softmax);
        the intercept is not penalised.
    max_iter, tol: inner iterations of the softmax link and their early stop.
    chunk_rows: rows per chunk of the in-memory store (results do not depend on it beyond
        floating-point rounding).

    Fit with X (n × d, numpy or scipy.sparse) and y: class labels (n,), or an indicator matrix
    (n × k) for multilabel. Attributes: classes_, model_ (a StagewiseModel, savable with
    model_.save), history_ (one dict per stage), n_features_in_, coef_/intercept_ for linear
    models.
    """

    def __init__(self, link="identity", calibrate=False, block_size=512, n_passes=2, generator="auto",
                 n_components=2048, pca_components=None, bandwidth=0.5, lam=1e-4, max_iter=50, tol=1e-4,
                 fit_intercept=True, random_state=0, chunk_rows=DEFAULT_CHUNK_ROWS):
        self.link = link
        self.calibrate = calibrate
        self.block_size = block_size
        self.n_passes = n_passes
        self.generator = generator
        self.n_components = n_components
        self.pca_components = pca_components
        self.bandwidth = bandwidth
        self.lam = lam
        self.max_iter = max_iter
        self.tol = tol
        self.fit_intercept = fit_intercept
        self.random_state = random_state
        self.chunk_rows = chunk_rows

    def _solver_params(self) -> StagewiseParams:
        calibration = self.calibrate
        if isinstance(calibration, (bool, np.bool_)) or calibration is None:
            calibration = "poly" if calibration else "none"
        return StagewiseParams(
            link=self.link, calibration=calibration, generator=self.generator, block_size=self.block_size,
            n_passes=self.n_passes, n_components=self.n_components, pca_components=self.pca_components,
            bandwidth=self.bandwidth, lam=self.lam, max_iter=self.max_iter, tol=self.tol,
            fit_intercept=self.fit_intercept, random_state=self.random_state,
        )

    def fit(self, X, y):
        params = self._solver_params()  # pydantic's ValidationError is a ValueError
        X = X.tocsr() if sp.issparse(X) else np.asarray(X, dtype=np.float64)
        if X.ndim != 2:
            raise ValueError(f"X must be 2-D, got shape {X.shape}")
        if sp.issparse(y) or np.ndim(y) == 2:
            labels = sp.csr_matrix(y, dtype=np.float32)
            self.classes_ = np.arange(labels.shape[1])
        else:
            self.classes_, ids = np.unique(np.asarray(y), return_inverse=True)
            labels = ids.astype(np.int32)
        if labels.shape[0] != X.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {labels.shape[0]}")
        source = InMemoryStore(X, labels, self.classes_, chunk_rows=self.chunk_rows)
        checkpointer = Checkpointer(None, config=params.model_dump(), store_fingerprint="in-memory")
        log = MetricsLog(None)
        with Engine(mode="inprocess") as engine:
            self.model_ = StagewiseSolver(params).fit(source, engine=engine, checkpointer=checkpointer, log=log)
        self.history_ = log.records
        self.n_features_in_ = X.shape[1]
        return self

    @property
    def multilabel_(self) -> bool:
        return self.model_.multilabel

    def decision_function(self, X) -> np.ndarray:
        return self.model_.decision_function(X)

    def predict(self, X) -> np.ndarray:
        if self.multilabel_:
            return self.model_.predict(X)
        return self.classes_[np.argmax(self.decision_function(X), axis=1)]

    def predict_proba(self, X) -> np.ndarray:
        return self.model_.predict_proba(X)

    def score(self, X, y) -> float:
        """Accuracy (multilabel: the fraction of rows whose label set is predicted exactly)."""
        P = self.predict(X)
        if self.multilabel_:
            Y = y.toarray() if sp.issparse(y) else np.asarray(y)
            return float(np.mean(np.all(P == (Y > 0), axis=1)))
        return float(np.mean(P == np.asarray(y)))

    @property
    def coef_(self) -> np.ndarray:
        return self.model_.coef_

    @property
    def intercept_(self) -> np.ndarray:
        return self.model_.intercept_
