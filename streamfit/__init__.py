"""streamfit: out-of-core training of large sparse linear multiclass and multilabel classifiers."""

__version__ = "0.1.0"

from streamfit.store import open_store  # noqa: E402
from streamfit.model import load_model  # noqa: E402
from streamfit.estimators import StagewiseLSClassifier  # noqa: E402
from streamfit.estimators import BCDClassifier  # noqa: E402
from streamfit.estimators import PPDSparseClassifier  # noqa: E402
from streamfit.estimators import FBPDClassifier  # noqa: E402

__all__ = ["__version__", "open_store", "load_model", "StagewiseLSClassifier", "BCDClassifier", "FBPDClassifier", "PPDSparseClassifier"]
