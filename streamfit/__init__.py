"""streamfit: out-of-core training of large sparse linear multiclass and multilabel classifiers."""

from streamfit.estimators import (
    BCDClassifier,
    FBPDClassifier,
    MultiBoostClassifier,
    PPDSparseClassifier,
    StagewiseLSClassifier,
)
from streamfit.model import load_model
from streamfit.store import open_store

# The one version number: pyproject.toml reads it from here ([tool.setuptools.dynamic]).
__version__ = "0.1.0"

__all__ = [
    "__version__",
    "open_store",
    "load_model",
    "StagewiseLSClassifier",
    "BCDClassifier",
    "FBPDClassifier",
    "MultiBoostClassifier",
    "PPDSparseClassifier",
]
