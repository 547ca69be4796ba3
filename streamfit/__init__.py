"""streamfit: out-of-core training of large sparse linear multiclass and multilabel classifiers.

The names below are imported on first use (PEP 562 `__getattr__`), so that `streamfit --help`
or an ingest does not load the solvers and their numba kernels."""

from typing import TYPE_CHECKING

# The one version number: pyproject.toml reads it from here ([tool.setuptools.dynamic]).
__version__ = "0.1.0"

__all__ = [
    "__version__",
    "open_store",
    "load_model",
    "StagewiseLSClassifier",
    "StagewiseLSRegressor",
    "BCDClassifier",
    "FBPDClassifier",
    "MultiBoostClassifier",
    "PPDSparseClassifier",
]

# name -> the module that defines it
_LAZY = {
    "open_store": "streamfit.store",
    "load_model": "streamfit.model",
    "StagewiseLSClassifier": "streamfit.estimators",
    "StagewiseLSRegressor": "streamfit.estimators",
    "BCDClassifier": "streamfit.estimators",
    "FBPDClassifier": "streamfit.estimators",
    "MultiBoostClassifier": "streamfit.estimators",
    "PPDSparseClassifier": "streamfit.estimators",
}

if TYPE_CHECKING:
    from streamfit.estimators import (
        BCDClassifier,
        FBPDClassifier,
        MultiBoostClassifier,
        PPDSparseClassifier,
        StagewiseLSClassifier,
        StagewiseLSRegressor,
    )
    from streamfit.model import load_model
    from streamfit.store import open_store


def __getattr__(name: str):
    if name not in _LAZY:
        raise AttributeError(f"module 'streamfit' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
