"""scikit-learn style estimators for in-memory arrays.

They run the solvers of `streamfit train` through the same driver: the arrays are wrapped in an
InMemoryStore (a dense X stays dense until a solver reads it as CSR), the solver runs on
Engine(mode="inprocess") without checkpoints (per-sample state in memory; an estimator never
resumes, so nothing is copied or written) and a MetricsLog kept in `history_`.

scikit-learn is not a dependency, so the estimators do not inherit its BaseEstimator and
ClassifierMixin; they implement what those give: `get_params` / `set_params` by its rules,
`score` as accuracy (subset accuracy for multilabel targets), and `__sklearn_tags__`, the
estimator tags scikit-learn ≥ 1.6 reads through `sklearn.utils.get_tags` (classifier, y
required, sparse input accepted). The tags import scikit-learn only when scikit-learn asks for
them, so `clone`, `cross_val_score`, `GridSearchCV` and `Pipeline` work, and importing
streamfit still does not import scikit-learn. (`_estimator_type` serves scikit-learn < 1.6.)

Input is checked as scikit-learn's `validate_data` does, with its error messages (so its
`check_estimator` passes): X must be 2-D, numeric, real, finite and non-empty, with the
feature count of fit at predict time (scipy.sparse X stays sparse: only its stored values are
checked); y must hold discrete class labels (not continuous, NaN or inf) of at least two
classes, or a 0/1 label indicator; a column y of shape (n, 1) is raveled with a
DataConversionWarning. A pandas DataFrame's column names (all strings) are kept as
feature_names_in_, and X scored later must name the same columns in the same order (a
ValueError names the first difference; names on one side only warn), as scikit-learn checks. A fit that stops at max_iter before the solver's stopping test holds
(model_.info["converged"] false: bcd, fbpd, ppdsparse) issues a ConvergenceWarning naming the
test that failed, its one report (the CLI logs the same words instead, a line on stderr). Methods of
an unfitted estimator raise NotFittedError. Outputs follow
scikit-learn's conventions: decision_function is (n,) for two classes (positive means
classes_[1]) and, for label indicators, scores whose sign is predict's; multilabel predict has
the dtype of the fitted label indicator, and is CSR where that was scipy.sparse (scikit-learn's
OneVsRestClassifier's rule). classes_ and predict keep y's label type (int, float, bool, string),
and so does model_ (its classes_ and predict; saved, its model.json records the dtype).

StagewiseLSRegressor is the regressor (RegressorMixin's conventions): y real and finite, of shape
(n,) or (n, k); predict has y's shape; score is R² averaged over the outputs; the tags say
regressor and multi-output; it has no decision_function, predict_proba or classes_.
"""

from __future__ import annotations

import functools
import inspect
import sys
import types
import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar, NamedTuple

import numpy as np
import scipy.sparse as sp
from pydantic import ValidationError

from streamfit.engine import Engine
from streamfit.errors import NotFittedError
from streamfit.model import ALL_ZERO_WEIGHTS, all_weights_zero, missing_as_nan
from streamfit.objectives import objective_for
from streamfit.runlog import MetricsLog
from streamfit.solvers.base import Solver, SolverParams, parameter_lines
from streamfit.solvers.bcd import BCDSolver
from streamfit.solvers.fbpd import FBPDSolver
from streamfit.solvers.multiboost import MultiBoostSolver
from streamfit.solvers.ppdsparse import PPDSparseSolver
from streamfit.solvers.stagewise import StagewiseSolver
from streamfit.store import DEFAULT_CHUNK_ROWS, InMemoryStore

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails


class DataConversionWarning(UserWarning):
    """fit raveled a column y of shape (n, 1) to the (n,) class labels it holds (scikit-learn's
    warning of that name; once scikit-learn is imported, the one issued is also its class)."""


class ConvergenceWarning(UserWarning):
    """fit stopped at max_iter before the solver's stopping test held: model_.info["converged"] is
    False (scikit-learn's warning of that name; once scikit-learn is imported, the one issued is
    also its class)."""


_SKLEARN_TWINS = {
    "NotFittedError": NotFittedError,
    "DataConversionWarning": DataConversionWarning,
    "ConvergenceWarning": ConvergenceWarning,
}


@functools.cache
def _sklearn_twin(name: str) -> type:
    """A subclass of streamfit's class `name` and of sklearn.exceptions.`name`, so that an
    `except` clause or a warnings filter naming either one matches."""
    from sklearn import exceptions

    base = _SKLEARN_TWINS[name]
    return type(
        name,
        (base, getattr(exceptions, name)),
        {
            "__module__": __name__,
            "__qualname__": f"_sklearn_{name}",
            "__doc__": f"streamfit's {name} that is also sklearn.exceptions.{name}.",
        },
    )


def _compatible(name: str) -> type:
    """streamfit's class `name`; its scikit-learn twin when scikit-learn is already imported (only
    then can a caller name scikit-learn's class; streamfit never imports scikit-learn for it)."""
    if "sklearn.exceptions" in sys.modules:
        return _sklearn_twin(name)
    return _SKLEARN_TWINS[name]


def __getattr__(name: str):
    """The twins by their qualified names, as unpickling an exception in another process asks."""
    if name.startswith("_sklearn_") and name[len("_sklearn_") :] in _SKLEARN_TWINS:
        return _sklearn_twin(name[len("_sklearn_") :])
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _seed(random_state) -> int:
    """The solvers' integer seed from scikit-learn's random_state conventions: an int as is; None:
    drawn from numpy's global RNG; a RandomState or Generator: drawn from it."""
    if random_state is None:
        return int(np.random.randint(2**31 - 1))
    if isinstance(random_state, np.random.RandomState):
        return int(random_state.randint(2**31 - 1))
    if isinstance(random_state, np.random.Generator):
        return int(random_state.integers(2**31 - 1))
    return random_state  # validated by the solver's parameters


def _outside_this_module() -> int:
    """The stacklevel of the first frame outside this module, for warnings.warn called by this
    helper's caller: a warning is attributed to the user's call (score, predict, a pipeline's
    step), however many of the estimators' methods lie between."""
    frame: types.FrameType | None = sys._getframe(1)
    level = 1
    while frame is not None and frame.f_globals.get("__name__") == __name__:
        frame, level = frame.f_back, level + 1
    return level


def _assert_all_finite(values: np.ndarray, input_name: str) -> None:
    """scikit-learn's errors for NaN and inf; one sum decides in the common all-finite case."""
    if values.size == 0 or values.dtype.kind not in "fc":
        return
    with np.errstate(over="ignore", invalid="ignore"):
        if np.isfinite(values.sum()):
            return
    if np.isnan(values).any():
        raise ValueError(f"Input {input_name} contains NaN.")
    if not np.isfinite(values).all():
        raise ValueError(f"Input {input_name} contains infinity or a value too large for {values.dtype!r}.")


def _check_squares(values: np.ndarray) -> None:
    """A ValueError when the sum of the squares of `values` (X's dense array or CSR data)
    overflows float64. A linear solver sums squared values (row and column norms, Gram matrices),
    which then hold inf: bcd and ppdsparse fitted W = 0 without a word. Every partial sum of these
    non-negative terms is at most the total, so one finite total clears them all."""
    flat = values.reshape(-1)
    with np.errstate(over="ignore", invalid="ignore"):
        total = float(np.dot(flat, flat))
    if not np.isfinite(total):
        raise ValueError(
            "X: the sum of its squared values overflows float64 (values of magnitude about 1e150 or more); "
            "scale X down (e.g. with scikit-learn's MaxAbsScaler or StandardScaler) and fit again"
        )


def _reject_complex(values, input_name: str) -> None:
    if getattr(values, "dtype", None) is not None and values.dtype.kind == "c":
        raise ValueError(f"Complex data not supported (input {input_name} has dtype {values.dtype})")


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
        changed = [f"{k}={v!r}" for k, v in self.get_params().items() if v != defaults[k]]
        return f"{type(self).__name__}({', '.join(changed)})"


class _Renamed(NamedTuple):
    """A solver parameter under another name in an estimator: its name there, its default there,
    and the conversion of the estimator's value to the solver's."""

    name: str
    default: Any
    to_solver: Callable[[Any], Any]


def _calibration(calibrate):
    """StagewiseLSClassifier's `calibrate` as the solver's `calibration`: False/None → "none",
    True → "poly", a string ("auto", the default, among them) as is."""
    if isinstance(calibrate, (bool, np.bool_)) or calibrate is None:
        return "poly" if calibrate else "none"
    return calibrate


# parameters of every estimator that are not the solver's, with their defaults
_ESTIMATOR_ONLY = {"chunk_rows": DEFAULT_CHUNK_ROWS}


def _estimator_signature(params: type[SolverParams], renamed: dict[str, _Renamed]) -> inspect.Signature:
    """`__init__(self, *, <each solver parameter>=<its default>, chunk_rows=...)`: the solver's
    parameters in the order its Params declares them, under the estimator's names (`renamed`)."""
    arguments = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for name, field in params.model_fields.items():
        name, default = (renamed[name].name, renamed[name].default) if name in renamed else (name, field.default)
        arguments.append(inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default))
    arguments += [
        inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default)
        for name, default in _ESTIMATOR_ONLY.items()
    ]
    return inspect.Signature(arguments)


def _estimator_init(signature: inspect.Signature):
    """An __init__ with this signature that stores every argument as an attribute of the same
    name, unchanged (scikit-learn's rule: validation happens in fit). The keyword-only defaults
    are read from the signature once (binding each call cost more than a small fit's solve)."""
    defaults = {name: p.default for name, p in signature.parameters.items() if name != "self"}

    def __init__(self, **kwargs):
        unknown = kwargs.keys() - defaults.keys()
        if unknown:
            raise TypeError(f"{type(self).__name__}() got an unexpected keyword argument {sorted(unknown)[0]!r}")
        for name, default in defaults.items():
            setattr(self, name, kwargs.get(name, default))

    __init__.__signature__ = signature  # type: ignore[attr-defined]  # typeshed's function type lacks __signature__, which inspect.signature reads
    return __init__


def _parameters_doc(params: type[SolverParams], renamed: dict[str, _Renamed]) -> str:
    """The constructor parameters for the class docstring, from the solver's Params."""
    lines = []
    for name, line in zip(params.model_fields, parameter_lines(params)):
        if name in renamed:
            line = f"{renamed[name].name} (default {renamed[name].default}): the solver's {line}"
        lines.append(f"    {line}")
    lines += [
        f"    {name} (default {default}): rows per chunk of the in-memory store"
        for name, default in _ESTIMATOR_ONLY.items()
    ]
    return (
        "\n\n    Parameters (keyword-only; the solver's, as `streamfit train --list-solvers` shows them):\n\n"
        + "\n".join(lines)
        + "\n"
    )


class _SolverEstimator(_ParamsMixin):
    """fit for every estimator: y (class labels, an n × k label indicator for multilabel, or
    real-valued targets for regression, as `_check_y` turns them into the store's labels)
    becomes an InMemoryStore; the solver runs in process with in-memory state.
    A subclass names `_solver`; its constructor parameters are that solver's Params (under the
    names in `_renamed`, where the estimator's name differs) and `chunk_rows`, the rows per chunk
    of the in-memory store (results do not depend on it beyond floating-point rounding)."""

    _solver: ClassVar[type[Solver[Any]]]  # set by each subclass
    _renamed: dict[str, _Renamed] = {}  # solver parameter -> the estimator's name for it
    # fit refuses X whose squared values sum beyond float64 (_check_squares): a linear solver's
    # norms and Gram matrices; multiboost's stumps only compare values
    _sums_squares: ClassVar[bool] = True

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "_solver" not in cls.__dict__:  # an intermediate base (_SolverClassifier)
            return
        cls.__init__ = _estimator_init(_estimator_signature(cls._solver.Params, cls._renamed))
        cls.__doc__ = (cls.__doc__ or "").rstrip() + _parameters_doc(cls._solver.Params, cls._renamed)

    def _solver_params(self) -> SolverParams:
        """The solver's Params from the estimator's attributes; random_state by scikit-learn's
        conventions (`_seed`). A bad value raises one ValueError line naming each bad parameter
        under the estimator's name, the value given and what is allowed (`_param_problem`)."""
        values = {}
        for name in self._solver.Params.model_fields:
            renamed = self._renamed.get(name)
            values[name] = renamed.to_solver(getattr(self, renamed.name)) if renamed else getattr(self, name)
        values["random_state"] = _seed(values["random_state"])
        try:
            return self._solver.Params(**values)
        except ValidationError as e:
            problems = "; ".join(self._param_problem(err) for err in e.errors())
            raise ValueError(f"{type(self).__name__}: {problems}") from None

    def _param_problem(self, err: ErrorDetails) -> str:
        """One pydantic error as 'name=value: what is allowed', under the estimator's name of the
        parameter (a check of several parameters together has no name: its message alone)."""
        message = err["msg"].removeprefix("Value error, ")
        if not err["loc"]:
            return message
        name = str(err["loc"][0])
        renamed = self._renamed.get(name)
        if renamed is None:
            return f"{name}={getattr(self, name, err.get('input'))!r}: {message}"
        return f"{renamed.name}={getattr(self, renamed.name)!r}: {message} (the solver's {name})"

    # -- input checking (scikit-learn's validate_data and its messages, without scikit-learn) --
    def _check_X(self, X, *, reset: bool):
        """X as the solvers and models take it: CSR (float32/float64 kept, other dtypes as
        float64; only the stored values are checked) or a float64 ndarray. Raises scikit-learn's
        ValueErrors for a non-2-D, complex, non-finite or empty X, and (reset=False) for a
        feature count other than fit's. Column names are kept or compared by `_check_feature_names`."""
        name = type(self).__name__
        self._check_feature_names(X, reset=reset)
        if sp.issparse(X):
            if X.ndim != 2:
                raise ValueError(f"Expected a 2D sparse matrix, got {X.ndim}D instead")
            _reject_complex(X, "X")
            X = X.tocsr()
            if X.dtype not in (np.float32, np.float64):
                X = X.astype(np.float64)
            values = X.data
        else:
            X = missing_as_nan(np.asarray(X))
            _reject_complex(X, "X")
            X = X.astype(np.float64, copy=False)  # object arrays of numbers convert; a dict raises TypeError
            if X.ndim < 2:
                raise ValueError(
                    f"Expected 2D array, got {'scalar' if X.ndim == 0 else '1D'} array instead. "
                    "Reshape your data either using array.reshape(-1, 1) if your data has a single "
                    "feature or array.reshape(1, -1) if it contains a single sample."
                )
            if X.ndim > 2:
                raise ValueError(f"Found array with dim {X.ndim}. {name} expected <= 2.")
            values = X
        for axis, what in ((0, "sample"), (1, "feature")):
            if X.shape[axis] == 0:
                raise ValueError(
                    f"Found array with 0 {what}(s) (shape={X.shape}) while a minimum of 1 is required by {name}."
                )
        _assert_all_finite(values, "X")
        if not reset and X.shape[1] != self.n_features_in_:
            raise ValueError(
                f"X has {X.shape[1]} features, but {name} is expecting {self.n_features_in_} features as input."
            )
        return X

    def _check_feature_names(self, X, *, reset: bool) -> None:
        """scikit-learn's rules for column names (pandas DataFrame columns, all strings): fit keeps
        them as feature_names_in_ (and drops those of an earlier fit without them); scoring X whose
        names differ from fit's, or come in another order, raises a ValueError naming the first
        difference (the columns would be matched by position: silently wrong scores); names on one
        side only warn, as scikit-learn does."""
        columns = getattr(X, "columns", None)
        names = None
        if columns is not None and len(columns) and all(isinstance(c, str) for c in columns):
            names = np.asarray(columns, dtype=object)
        if reset:
            if names is not None:
                self.feature_names_in_ = names
            else:
                self.__dict__.pop("feature_names_in_", None)
            return
        fitted = self.__dict__.get("feature_names_in_")
        estimator = type(self).__name__
        if fitted is None and names is not None:
            warnings.warn(
                f"X has feature names, but {estimator} was fitted without feature names",
                UserWarning,
                stacklevel=_outside_this_module(),
            )
        elif fitted is not None and names is None:
            warnings.warn(
                f"X does not have valid feature names, but {estimator} was fitted with feature names",
                UserWarning,
                stacklevel=_outside_this_module(),
            )
        elif fitted is not None and names is not None and not np.array_equal(fitted, names):
            if len(fitted) == len(names) and set(fitted) == set(names):
                j = int(np.flatnonzero(fitted != names)[0])
                difference = f"the same names in another order: column {j} is {names[j]!r}, in fit {fitted[j]!r}"
            else:
                unseen = [c for c in names if c not in set(fitted)]
                missing = [c for c in fitted if c not in set(names)]
                difference = "; ".join(
                    part
                    for part in (
                        f"not seen at fit: {', '.join(map(repr, unseen[:5]))}{' …' if len(unseen) > 5 else ''}"
                        if unseen
                        else "",
                        f"seen at fit, missing now: {', '.join(map(repr, missing[:5]))}{' …' if len(missing) > 5 else ''}"
                        if missing
                        else "",
                    )
                    if part
                )
            raise ValueError(
                f"The feature names should match those that were passed during fit ({difference}); "
                "select X's columns in fit's order: X[estimator.feature_names_in_]"
            )

    def _fitted_model(self):
        """model_, or NotFittedError (scikit-learn's, when scikit-learn is imported) before fit."""
        model = self.__dict__.get("model_")
        if model is None:
            raise _compatible("NotFittedError")(
                f"This {type(self).__name__} instance is not fitted yet. Call 'fit' with appropriate arguments "
                "before using this estimator."
            )
        return model

    def _scores(self, X) -> np.ndarray:
        """The model's scores, n × n_classes, of a checked X."""
        model = self._fitted_model()
        return model.decision_function(self._check_X(X, reset=False))

    def _check_y(self, y, n_samples: int) -> tuple[Any, Any, Any]:
        """(names of the classes or outputs, the store's labels, y's dtype) of a checked y."""
        raise NotImplementedError

    def _set_targets(self, names, y) -> None:
        """Record what fit learned about y (classifiers: classes_)."""
        raise NotImplementedError

    def _fitted_solver(self, solver) -> None:
        """Record what the solver knows after fit beyond its model (FBPDClassifier: g's column weights)."""

    # -- the scikit-learn API -------------------------------------------------------------
    def fit(self, X, y):
        if y is None:  # before X, so that this is the error whatever X is
            self._check_y(y, 0)
        params = self._solver_params()  # a ValueError naming each bad parameter
        X = self._check_X(X, reset=True)
        names, labels, y_dtype = self._check_y(y, X.shape[0])
        if self._sums_squares:
            _check_squares(X.data if sp.issparse(X) else X)
        self._set_targets(names, y)
        source = InMemoryStore(X, labels, names, chunk_rows=self.chunk_rows)
        log = MetricsLog(None)
        reasons: list[str] = []  # the stopping test that failed, in the solver's words
        solver = self._solver(params)
        with Engine(mode="inprocess") as engine:
            self.model_ = solver.fit(
                source, engine=engine, checkpointer=None, log=log, log_not_converged=reasons.append
            )  # the warning below is the one report
        self._fitted_solver(solver)
        # the model predicts the labels in y's type (ints as ints), saved and loaded too
        self.model_.set_class_dtype(np.asarray(names).dtype)
        self.history_ = log.records
        self.n_features_in_ = X.shape[1]
        self._y_dtype = y_dtype
        info = self.model_.info
        if info.get("converged") is False:  # stagewise has no stopping test: no "converged"
            which = f" for {info['not_converged']} of {len(names)} classes" if "not_converged" in info else ""
            reason = f": {reasons[0]}" if reasons else ""
            warnings.warn(
                f"{type(self).__name__} did not converge{which}: max_iter={params.max_iter} iterations ended "
                f"before the stopping test (tol={params.tol:g}) held{reason}; increase max_iter or tol",
                _compatible("ConvergenceWarning"),
                stacklevel=2,
            )
        if all_weights_zero(self.model_):
            warnings.warn(f"{type(self).__name__}: {ALL_ZERO_WEIGHTS}", UserWarning, stacklevel=2)
        return self

    @property
    def coef_(self):
        return self._fitted_model().coef_

    @property
    def intercept_(self) -> np.ndarray:
        return self._fitted_model().intercept_


class _SolverClassifier(_SolverEstimator):
    """predict, decision_function and score (accuracy) for class labels or label indicators."""

    _estimator_type = "classifier"  # scikit-learn < 1.6 (is_classifier); later versions read the tags

    def _set_targets(self, names, y) -> None:
        self.classes_ = names
        self._sparse_output = sp.issparse(y)  # a sparse label indicator: predict returns CSR

    def _accepts_multilabel(self) -> bool:
        """Whether fit takes an n × k label indicator with these parameters."""
        return True

    def __sklearn_tags__(self):
        """scikit-learn's estimator tags (scikit-learn ≥ 1.6): those of ClassifierMixin on
        BaseEstimator (a classifier; fit requires y), plus scipy.sparse input and, where the
        solver takes label indicators, multilabel targets. scikit-learn is imported here, by
        the time scikit-learn calls this, never when streamfit is imported."""
        from sklearn.utils import ClassifierTags, InputTags, Tags, TargetTags

        multilabel = self._accepts_multilabel()
        return Tags(
            estimator_type="classifier",
            target_tags=TargetTags(required=True, multi_output=multilabel),
            classifier_tags=ClassifierTags(multi_label=multilabel),
            input_tags=InputTags(sparse=True),
        )

    def _check_y(self, y, n_samples: int):
        """(classes_, labels, label dtype): labels are int32 class ids (class labels y), or a
        float32 CSR indicator (a 0/1 label indicator y, n × k with k ≥ 2; classes_ = 0..k-1)."""
        name = type(self).__name__
        if y is None:  # scikit-learn's wording for a classifier fitted without targets
            raise ValueError(f"{name} requires y to be passed, but the target y is None")
        if sp.issparse(y) and y.shape[1] == 1:
            y = y.toarray()  # a column, as dense: class labels, raveled below
        if not sp.issparse(y):
            y = np.asarray(y)
            _reject_complex(y, "y")
            if y.ndim == 2 and y.shape[1] == 1:
                warnings.warn(
                    "A column-vector y was passed when a 1d array was expected. Please change the shape "
                    "of y to (n_samples,), for example using ravel().",
                    _compatible("DataConversionWarning"),
                    stacklevel=3,
                )
                y = y.ravel()
        if y.ndim == 2:
            if not self._accepts_multilabel():
                raise ValueError(
                    f"{name} with these parameters takes class labels y of shape (n_samples,), "
                    f"not a label indicator of shape {y.shape}"
                )
            _reject_complex(y, "y")
            values = y.data if sp.issparse(y) else y
            if y.shape[1] == 0 or not np.isin(values, (0, 1)).all():
                raise ValueError(
                    f"Unknown label type: a 2-D y must be a label indicator of 0s and 1s with at least "
                    f"one column (multilabel-indicator); got shape {y.shape}"
                )
            labels, classes = sp.csr_matrix(y, dtype=np.float32), np.arange(y.shape[1])
        elif y.ndim == 1:
            if y.dtype.kind == "f":
                _assert_all_finite(y, "y")
                if np.any(y != np.round(y)):
                    raise ValueError(
                        "Unknown label type: continuous. Maybe you are trying to fit a classifier, which "
                        "expects discrete classes on a regression target with continuous values."
                    )
            try:
                classes, ids = np.unique(y, return_inverse=True)
            except TypeError as e:  # object labels of mixed types
                raise ValueError(f"Unknown label type: y mixes label types ({e})") from None
            if len(classes) == 1:
                raise ValueError(
                    f"{name} needs samples of at least 2 classes in the data, but the data contains "
                    f"only one class: {classes[0]!r}"
                )
            labels = ids.astype(np.int32)
        else:
            raise ValueError(
                f"y must be class labels of shape (n_samples,) or a label indicator of shape "
                f"(n_samples, n_classes); got shape {y.shape}"
            )
        if labels.shape[0] != n_samples:
            raise ValueError(
                f"Found input variables with inconsistent numbers of samples: [{n_samples}, {labels.shape[0]}]"
            )
        return classes, labels, y.dtype

    @property
    def multilabel_(self) -> bool:
        return self._fitted_model().multilabel

    def decision_function(self, X) -> np.ndarray:
        """scikit-learn's decision_function: the scores, n × n_classes, for three or more
        classes; for two, one score per row, positive for classes_[1] (the difference of the
        model's two scores); for a label indicator, n × n_labels scores positive where predict
        sets the label (the model's scores less its threshold). model_.decision_function gives
        the model's own n × n_classes scores."""
        S = self._scores(X)
        if self.multilabel_:
            threshold = self._fitted_model().decision_threshold  # the model's rule (streamfit.model.decide)
            return S - threshold if threshold else S
        if S.shape[1] == 2:
            return S[:, 1] - S[:, 0]
        return S

    def predict(self, X) -> np.ndarray | sp.csr_matrix:
        """Class labels (multiclass), or the model's 0/1 label indicator in the dtype of the
        fitted one (multilabel): a scipy.sparse CSR matrix when the fitted indicator was sparse
        (as scikit-learn's OneVsRestClassifier), else an ndarray."""
        model = self._fitted_model()
        X = self._check_X(X, reset=False)
        if model.multilabel:
            dtype = getattr(self, "_y_dtype", np.int8)  # int8: an estimator pickled before fit recorded the dtype
            indicator = model.predict(X).astype(dtype, copy=False)
            return sp.csr_matrix(indicator) if getattr(self, "_sparse_output", False) else indicator
        return self.classes_[model.top_class(model.decision_function(X))]

    def predict_topk(self, X, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        """(labels, scores) of the k best classes per row, best first."""
        model = self._fitted_model()
        top, scores = model.predict_topk(self._check_X(X, reset=False), k)
        return self.classes_[top], scores

    def score(self, X, y, sample_weight=None) -> float:
        """Accuracy of predict(X), as scikit-learn's ClassifierMixin.score: the (sample_weight
        weighted) share of rows predicted right; for multilabel targets the subset accuracy,
        the share of rows whose whole predicted label set equals the true one."""
        pred = self.predict(X)
        if self.multilabel_:
            pred = pred.toarray() if isinstance(pred, sp.spmatrix) else pred
            Y = y.toarray() if sp.issparse(y) else np.asarray(y)
            if Y.shape != pred.shape:
                raise ValueError(f"y has shape {Y.shape}; the predicted label indicator has {pred.shape}")
            correct = np.all((Y != 0) == (pred != 0), axis=1)
        else:
            y = np.asarray(y)
            if y.shape != pred.shape:
                raise ValueError(f"y has shape {y.shape}; expected {pred.shape} (one class label per row)")
            correct = pred == y
        return float(np.average(correct, weights=sample_weight))


class StagewiseLSClassifier(_SolverClassifier):
    """Stagewise least-squares classifier (Agarwal et al. 2014, Algorithms 1–3); see
    streamfit.solvers.stagewise for the math.

    Each stage minimises (1/n)‖R − AW‖² + λ‖W‖² (link "identity") or (1/n)Σ logistic +
    (λ/2)‖W‖² (link "softmax"; per-label logistic for multilabel targets) over a block of
    features A; the intercept is not penalised. lam=None (the default): λ = max(1e-4, 10/n)
    for n training rows on dense data of at most 1000 columns, else 1e-4 (model_.info["lam"];
    StagewiseParams.lam_for).
    standardize: with the identity link on that dense data, the penalty on the standardized
        columns, λ‖S W‖² (S the columns' standard deviations over the training rows): "auto"
        (the default) where the standard deviations span more than 10× (columns in different
        units), True always there, False never; coef_ stays in X's units
        (model_.info["standardized"]; the module docstring's "Standardized columns").
    calibrate: the solver's (and the CLI's) `calibration`, under this estimator's name:
        False, None or "none" → calibration="none" (no calibration); True or "poly" →
        calibration="poly" (Algorithm 2 with G(ŷ) = [ŷ, ŷ², ŷ³] and the projection onto the
        simplex); "predictions" → calibration="predictions" (previous predictions as extra
        features); "auto" (the default) → calibration="auto" ("poly" for multiclass targets on
        the stored columns of low-dimensional dense data, in one block, where it validates
        better on a row sample, else "none"). Calibrating needs
        link="identity" ("auto" calibrates nothing with the softmax link).

    Fit with X (n × d, numpy or scipy.sparse) and y: class labels (n,), or an indicator matrix
    (n × k) for multilabel. Attributes: classes_, model_ (a StagewiseModel, savable with
    model_.save), history_ (one dict per stage), n_features_in_, n_iter_ (stages run),
    coef_/intercept_ for linear models. Multilabel with the identity link: predict sets the
    labels scored above model_.decision_threshold, the threshold of 0.005 … 0.995 with the best
    micro-F1 on the training rows' held-out (approximate leave-one-out) scores
    (decision_function subtracts it).
    """

    _solver = StagewiseSolver
    _renamed = {"calibration": _Renamed("calibrate", "auto", _calibration)}

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities, n × n_classes (label probabilities, n × n_labels, multilabel):
        softmax/sigmoid of the margins for the softmax link; for the identity link the scores
        projected onto the simplex ([0, 1]^k multilabel), as Algorithm 2's clip."""
        model = self._fitted_model()
        return model.predict_proba(self._check_X(X, reset=False))

    @property
    def n_iter_(self) -> int:
        """Stages run (n_passes × blocks). max_iter caps the inner iterations of each softmax
        stage instead; history_ records them (inner_objective)."""
        return int(self._fitted_model().info["stages"])


class StagewiseLSRegressor(_SolverEstimator):
    """Stagewise least-squares regression (Agarwal et al. 2014, Algorithm 3 with the identity
    link); see streamfit.solvers.stagewise for the math.

    Each stage fits a block of features A to the residuals R = Y − F by ridge least squares,
    min_W (1/n)‖R − AW‖² + λ‖DW‖² (D leaves the intercept unpenalised), and adds AW to F. With
    generator="sequential" and one block holding every feature (block_size ≥ n_features,
    n_passes=1) this is scikit-learn's Ridge(alpha=n·lam) with an unpenalised intercept (lam
    None, the default, is 1e-4 for real-valued targets). The default generator ("auto") fits the stored columns (gradient-ordered blocks; with up to
    1024 columns all stages run on the normal equations of one pass over X); random Fourier
    features (a nonlinear fit) are generator="rff". link must stay "identity" and calibration "auto" (resolved to "none" for real-valued targets), "none" or "predictions" (fit raises otherwise).
    standardize changes nothing here: real-valued targets keep the penalty on the columns as given.
    On wide data (at least half as many active columns as rows) of at most 4000 rows, lam None
    with the default generator, calibration and penalty fits the exact ridge model in one stage
    of every active column, λ = c · v̄ (v̄ the columns' mean variance, c of 1e-6 … 100) chosen by
    exact leave-one-out as RidgeCV does (model_.info["lam"], model_.info["wide_ridge_c"];
    docs/benchmarks.md, "Exact ridge in dual form for wide regression"). Above 4000 rows the same
    ridge model is fitted by conjugate gradients (one pass over the data an iteration), c chosen by
    the squared error on every 5th row held out from fits on the others, c = 100 down to 1e-6 until
    that error has risen twice in a row, then refitted on all rows (model_.info["wide_ridge_c"],
    ["wide_ridge_alpha"], ["wide_ridge_heldout"], ["cg_iterations"]; docs/benchmarks.md, "Wide
    regression above 4000 rows: alpha by a held-out fifth"). Elsewhere on wide data
    the stages' two passes stop far from the ridge model when y depends on many columns: the
    first blocks interpolate the targets and λ = 1e-4 barely moves weight off them (held-out R²
    0.16-1.84 below RidgeCV's on the generated sets measured; on few informative columns the
    greedy first pass beats Ridge). There, lam of the order of the columns' mean variance gives
    the ridge model at that λ in two passes (docs/benchmarks.md, "Defaults on wide data"); a fit
    in stages at the default lam on at least as many active columns as rows logs one warning line
    saying so, with that mean variance. A y that
    holds one value in every row fits that constant, with one logged warning line naming the target.

    Fit with X (n × d, numpy or scipy.sparse) and real-valued y of shape (n,) or (n, k)
    (several outputs). predict returns y's shape; score is R² (scikit-learn's r2_score,
    averaged over the outputs). Attributes: model_ (a StagewiseModel with regression=True),
    history_ (one dict per stage), n_features_in_, n_iter_ (stages run), coef_/intercept_
    (shape (d,)/() for a 1-D y, else (k, d)/(k,)) for linear models.
    """

    _solver = StagewiseSolver
    _estimator_type = "regressor"  # scikit-learn < 1.6 (is_regressor); later versions read the tags

    def __sklearn_tags__(self):
        """scikit-learn's estimator tags (scikit-learn ≥ 1.6): those of RegressorMixin on
        BaseEstimator (a regressor; fit requires y; several outputs allowed), plus scipy.sparse input."""
        from sklearn.utils import InputTags, RegressorTags, Tags, TargetTags

        return Tags(
            estimator_type="regressor",
            target_tags=TargetTags(required=True, single_output=True, multi_output=True),
            regressor_tags=RegressorTags(),
            input_tags=InputTags(sparse=True),
        )

    def _check_y(self, y, n_samples: int):
        """(output names, float64 targets n × k, y's dtype): y (n,) or (n, k), real and finite."""
        name = type(self).__name__
        if y is None:
            raise ValueError(f"{name} requires y to be passed, but the target y is None")
        if sp.issparse(y):
            y = y.toarray()
        y = np.asarray(y)
        _reject_complex(y, "y")
        try:
            T = y.astype(np.float64)
        except (TypeError, ValueError) as e:
            raise ValueError(f"{name}: y must hold numbers (regression targets); {e}") from None
        if T.ndim not in (1, 2) or (T.ndim == 2 and T.shape[1] == 0):
            raise ValueError(f"y must be of shape (n_samples,) or (n_samples, n_outputs); got shape {y.shape}")
        _assert_all_finite(T, "y")
        T = T.reshape(len(T), -1)
        if T.shape[0] != n_samples:
            raise ValueError(f"Found input variables with inconsistent numbers of samples: [{n_samples}, {T.shape[0]}]")
        if n_samples < 2:  # the "auto" generator's bandwidth and a fit's residuals need two rows
            raise ValueError(f"{name} needs at least 2 samples; got n_samples = {n_samples}")
        names = ["target"] if T.shape[1] == 1 else [f"target_{j}" for j in range(T.shape[1])]
        return names, T, y.dtype

    def _set_targets(self, names, y) -> None:
        self._y_1d = np.asarray(y).ndim == 1  # predict returns (n,) for a 1-D y, (n, k) for a 2-D one

    def predict(self, X) -> np.ndarray:
        """The predicted values, shape (n,) for a 1-D fitted y, else (n, k)."""
        S = self._scores(X)
        return S[:, 0] if self._y_1d else S

    def score(self, X, y, sample_weight=None) -> float:
        """R² of predict(X) (scikit-learn's RegressorMixin.score: 1 − Σw(y − ŷ)²/Σw(y − ȳ)² per
        output, ȳ the weighted mean; 1 for a constant y predicted exactly, else 0 there),
        averaged over the outputs."""
        T = np.asarray(y, dtype=np.float64)
        pred = self.predict(X).reshape(len(T), -1)
        T = T.reshape(len(T), -1)
        if T.shape != pred.shape:
            raise ValueError(f"y has shape {np.shape(y)}; the predictions have {pred.shape}")
        w = np.ones(len(T)) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
        sse = (w[:, None] * (T - pred) ** 2).sum(axis=0)
        sst = (w[:, None] * (T - np.average(T, axis=0, weights=w)) ** 2).sum(axis=0)
        r2 = np.where(sst > 0, 1 - sse / np.where(sst > 0, sst, 1), np.where(sse == 0, 1.0, 0.0))
        return float(r2.mean())

    @property
    def coef_(self) -> np.ndarray:
        coef = self._fitted_model().coef_
        return coef[0] if self._y_1d else coef

    @property
    def intercept_(self):
        b = self._fitted_model().intercept_
        return float(b[0]) if self._y_1d else b

    @property
    def n_iter_(self) -> int:
        """Stages run (n_passes × blocks)."""
        return int(self._fitted_model().info["stages"])


class FBPDClassifier(_SolverClassifier):
    """Sparse multiclass SVM with the exact Crammer–Singer hinge (Chierchia et al. 2015,
    Algorithms 1 and 2); see streamfit.solvers.fbpd for the math.

    formulation "regularized" minimises lam·g(W) + mean hinge (problem (7)); "constrained"
    minimises g(W) subject to mean hinge <= eta (problem (8)). The offsets are not penalised.
    preconditioning="auto" (the default): diagonal steps on sparse X; on dense X (≥ 25 % of the
    used columns' entries non-zero) one scalar step with the columns centered (the same problem:
    the offsets absorb the means; coef_ and intercept_ are for X as given) and, with
    standardize=True (the default), divided by their standard deviations s_j: g then weighs
    W_jk by s_j (as fitting standardized columns does; lam=None takes λ_ref on them too), so
    the fit does not depend on the columns' units; model_.info["standardized"] says which.

    Fit with X (n × d, numpy or scipy.sparse) and class labels y. Attributes: classes_,
    model_ (a LinearModel), coef_ (k × d; CSR for the sparse penalties), intercept_,
    history_ (one dict per iteration: objective, dual_objective, gap, ...), n_iter_.
    """

    _solver = FBPDSolver

    def _accepts_multilabel(self) -> bool:
        return False  # the Crammer–Singer hinge is multiclass only

    @property
    def n_iter_(self) -> int:
        """Iterations run (at most max_iter)."""
        return int(self._fitted_model().info["iterations"])

    def _fitted_solver(self, solver) -> None:
        self._column_scale = solver.column_scale  # None: g on the weights as given

    def _objective(self):
        """Problem (7) or (8) at the weight of g the fit used (lam, or lam_ratio·λ_ref when lam is None)."""
        return objective_for("fbpd", self._solver_params().model_copy(update={"lam": self._fitted_model().info["lam"]}))

    def _weights(self) -> tuple[np.ndarray, np.ndarray]:
        coef = self.coef_
        return (coef.toarray() if sp.issparse(coef) else np.asarray(coef)).T, np.asarray(self.intercept_)

    def hinge_loss(self, X, y) -> float:
        """Mean Crammer–Singer hinge (1/n) Σ_i max_k (s_ik − s_iy_i + [k ≠ y_i]) of the fitted model."""
        W, b = self._weights()
        z = np.searchsorted(self.classes_, np.asarray(y))
        return self._objective().mean_loss(W, b, self._check_X(X, reset=False), z)

    def objective(self, X, y) -> float:
        """The primal objective: lam·g(W) + mean hinge (regularized, (7)), g(W) (constrained,
        (8); its constraint is hinge_loss(X, y) <= eta). Where the fit standardized the columns
        (model_.info["standardized"]), g is taken of the standardized columns' weights, coef_ᵀ's
        rows times the training columns' standard deviations s_j; the hinge is coef_'s on X."""
        W, b = self._weights()
        z = np.searchsorted(self.classes_, np.asarray(y))
        objective = self._objective()
        sums = objective.chunk_sums(W, b, self._check_X(X, reset=False), z)
        scale = getattr(self, "_column_scale", None)
        return objective.total(sums, W if scale is None else W * scale[:, None], b)


class PPDSparseClassifier(_SolverClassifier):
    """One-vs-all elastic-net SVM solved by PPDSparse (Yen et al. 2017, Algorithms 1-3); see
    streamfit.solvers.ppdsparse for the math. Per class k (y = ±1 one-vs-all, bias b):

        lam‖w‖₁ + (tau/2)(‖w‖² + b²) + (1/n) Σ_i ℓ(y_i (⟨w, x_i⟩ + b)),

    ℓ the squared hinge ½max(0, 1 − m)² (loss="squared_hinge") or the hinge max(0, 1 − m).
    lam="scale" (the default) weighs class k by lam_scale·L·max(1, 2 std(y_k))·(mean ‖x_i‖₂)/√n, std(y_k) =
    2√(p_k(1 − p_k)) of its ±1 labels, L the mean labels per row (ppdsparse.scaled_lams; with lam_positives = M
    also times √(M/n⁺_k), n⁺_k class k's positive rows clipped to [M/4, M]);
    a number weighs every class by it; lam="auto" (squared hinge) weighs class k by r_k·λmax_k, λmax_k the smallest lam
    at which w_k = 0 and r_k chosen on a held-out share `held_out` of the rows (ppdsparse.choose_ratios);
    lam=None by lam_ratio·λmax_k. lam = 0 is scikit-learn's LinearSVC(C=1/(n·tau)) for the hinge, C=1/(2n·tau) for the squared hinge
    (with standardize=False where the columns are standardized, below).
    With lam not a number, rows of mean norm s outside [1/16, 16] are solved divided by a power of two c
    (ppdsparse.data_scale): ℓ2 weight tau·c² on w and tau on b for the values as given. On dense data of at
    most 1000 columns whose standard deviations s_j span more than 10x (standardize="auto"), the weights are
    lam·s_j|w_j| and (tau/2)·s_j²w_j² (the fit on the standardized columns, in the stored units). Multilabel:
    predict sets the labels scored above the margin of the best training micro-F1 (fit_threshold;
    model_.decision_threshold), and decision_function is the scores less it.

    Fit with X (n × d, numpy or scipy.sparse) and y: class labels (n,), or a label indicator
    (n × k) for multilabel. Attributes: classes_, model_ (a PPDSparseModel), coef_ (scipy.sparse
    CSR, k × d), intercept_, history_ (one dict per class group), n_features_in_, n_iter_.
    """

    _solver = PPDSparseSolver

    @property
    def n_iter_(self) -> int:
        """Outer iterations (Algorithm 1) of the class that took most (each stops after at most max_iter),
        as LinearSVC's n_iter_."""
        return int(self._fitted_model().info["max_iterations"])


class BCDClassifier(_SolverClassifier):
    """ℓ1/ℓ2-regularized multiclass squared hinge and related objectives by block coordinate
    descent (Blondel, Seki and Uehara 2013); see streamfit.solvers.bcd for the math.

    Minimises F(W, b) = (1/n) Σ_i ℓ_i(Wᵀx_i + b) + P(W) (b an unpenalised intercept; none with
    fit_intercept=False, as in the paper): loss ℓ: eq. 2 (eq. 11, one-vs-rest, for multilabel y;
    label ranking §4.7 with loss="squared_hinge") or eq. 12 (multiclass); penalty P by default
    λ(ρ Σ_j ‖W_{j:}‖₂ + (1 − ρ)/2 ‖W‖²) (group_elasticnet, ρ = l1_ratio = 0.2; lam=None: λ(1 − ρ) =
    1/n, LinearSVC(C=1)'s ridge), or λ Σ_j ‖W_{j:}‖₂ (l1/l2, the paper's), λ‖W‖₁, (λ/2)‖W‖², or
    the ℓ1 mixes with l1_ratio. standardize ("auto"): on dense data of at most 1000 columns whose
    standard deviations s_j spread more than 10× (columns in other units, raw pixels), P is taken
    of diag(s) W (λ Σ_j s_j ‖W_{j:}‖₂ for l1/l2): the fit is the same in any units, coef_ stays on
    the columns as given (model_.info["standardized"] says which).
    mode "chunks" runs the out-of-core algorithm over row chunks of `chunk_rows`.

    Attributes: classes_, coef_ (n_classes × n_features ndarray, i.e. Wᵀ: the features dropped by
    the penalty are exactly-zero columns), intercept_ (b), model_ (a LinearModel; info["lam"] is
    the λ used), history_ (one dict per outer iteration), n_features_in_, n_iter_. `objective(X, y)` is F(W) on (X, y).
    """

    _solver = BCDSolver
    loss: str  # a constructor parameter (BCDParams.loss), set by the generated __init__

    def _accepts_multilabel(self) -> bool:
        return self.loss != "logistic"  # eq. 12 is multiclass only

    def _labels(self, y):
        if sp.issparse(y) or np.ndim(y) == 2:
            return sp.csr_matrix(y, dtype=np.float32)
        index = {c: i for i, c in enumerate(self.classes_)}
        return np.array([index[v] for v in np.asarray(y)], dtype=np.int32)

    @property
    def n_iter_(self) -> int:
        """Outer iterations run (at most max_iter)."""
        return int(self._fitted_model().info["outer_iterations"])

    @property
    def coef_(self) -> np.ndarray:
        c = self._fitted_model().coef_
        return c.toarray() if sp.issparse(c) else np.asarray(c)

    def _fitted_solver(self, solver) -> None:
        self._column_scale = solver.column_scale  # None: P on the weights as given

    def objective(self, X, y) -> float:
        """F(W, b) = (1/n) Σ_i ℓ_i(Wᵀx_i + b) + P(W) on (X, y) at the fit's λ (eq. 2's loss by
        default; b = 0 without fit_intercept). Where the fit standardized the columns
        (model_.info["standardized"]), P is taken of the standardized columns' weights, coef_ᵀ's
        rows times the training columns' standard deviations s_j; the loss is coef_'s on X."""
        W = np.ascontiguousarray(self.coef_.T, dtype=np.float64)
        params = self._solver_params().model_copy(update={"lam": self._fitted_model().info["lam"]})
        objective = objective_for("bcd", params, self.multilabel_)
        X, labels = self._check_X(X, reset=False), self._labels(y)
        b = None if self.intercept_ is None else np.asarray(self.intercept_, dtype=np.float64)
        scale = getattr(self, "_column_scale", None)
        return objective.total(objective.chunk_sums(W, b, X, labels), W if scale is None else W * scale[:, None], b)


class MultiBoostClassifier(_SolverClassifier):
    """Boosted decision stumps, MultiBoostcw (Lin, Shen, van den Hengel and Suter 2012,
    Algorithms 1 and 2); see streamfit.solvers.multiboost for the math.

    Minimises lam·‖w‖₁ + (1/p) Σ_i Σ_{y≠y_i} exp(F_y(x_i) − F_{y_i}(x_i)) over w ≥ 0 (eq. 2
    divided by C = 1/lam; p = n(K−1)), F_c(x) = Σ_j w_cj ħ_cj(x) with stumps ħ ∈ {−1, +1} or
    indicator stumps ħ ∈ {0, 1} (stumps="both", the default; "sign": the paper's pool; "signed": the
    indicators and their negations ħ ∈ {0, −1}; "all": the sign stumps and those): one
    per class per iteration (weak_learners="class") or one shared by all classes ("shared",
    eq. 6); per class the learner of the largest edge (choice="edge", eq. 4) or of the largest
    loss decrease under the line search (choice="gain") or of the largest decrease of the objective
    by the run's own step (choice="decrease"); choice="auto" (the default) is "decrease" for the
    stage-wise tau_max=1 with class-specific learners, else "edge". Multiclass only: a label indicator y is refused. The defaults are the paper's
    MultiBoostcw-1 (tau_max=1, update="large_c", C = 1e8), whose steps learning_rate < 1 shrinks; the totally corrective MultiBoostcw is
    tau_max=2, update="exact" with lam=1/C, or lam="auto": C from 1e2..1e5 by the error on a
    held-out 20 % of the rows, then a refit on all of them. early_stopping=True (or "auto": above
    10 000 rows) holds out validation_fraction of the rows (a seeded hash of the row index; not
    stratified), stops after n_iter_no_change iterations without a lower held-out exponential loss
    and keeps the model of the best iteration (best_iteration_), as LightGBM's early stopping does.

    Fit with X (n × d, numpy or scipy.sparse) and class labels y. Attributes: classes_, model_
    (a BoostedStumpsModel), history_ (one dict per boosting iteration: objective, violation,
    kkt, learners; with early stopping heldout_loss, heldout_error), n_features_in_, n_iter_.
    There is no coef_: the model is not linear.
    """

    _sums_squares = False  # stumps compare values: any finite X

    _solver = MultiBoostSolver

    def _accepts_multilabel(self) -> bool:
        return False  # the margins (1) compare one true class with each other class

    @property
    def n_iter_(self) -> int:
        """Boosting iterations run (at most max_iter)."""
        return int(self._fitted_model().info["iterations"])

    @property
    def best_iteration_(self) -> int:
        """With early stopping: the iteration whose model this is (lowest held-out loss); else n_iter_."""
        info = self._fitted_model().info
        return int(info.get("best_iteration", info["iterations"]))
