"""One way for the solver tests to train a solver through the driver, as `streamfit train` does
(tests/solvers/test_{bcd,fbpd,ppdsparse,multiboost}.py import it), and offset_data, the data of
bcd's and ppdsparse's tests of columns far from zero. pytest puts this folder on sys.path for
its test files."""

from __future__ import annotations

import os

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.model import Model
from streamfit.runlog import MetricsLog
from streamfit.solvers import get_solver


def fit_solver(
    solver: str,
    source,
    run_dir=None,
    *,
    engine: Engine | None = None,
    resume: bool = False,
    stop_after: int | None = None,
    checkpoint_every: int = 1,
    checkpoint_interval: float | str = "auto",
    valid=None,
    valid_every: int = 1,
    time_limit: float | None = None,
    **params,
) -> tuple[Model, MetricsLog]:
    """(model, metrics log) of solver `solver` (a registered name) with parameters `params`
    trained on `source`. Without `run_dir` everything stays in memory; with one, the checkpoints
    and metrics.jsonl go under it, and `resume` continues from them. The checkpoint records the
    model settings (the parameters that determine the model) as train does; in process unless
    `engine` is given; validation on `valid` every `valid_every` steps (and, as train passes it,
    the solver's own reading of it: Solver.reads_valid); `time_limit`: the checkpointer's (seconds)."""
    cls = get_solver(solver)
    instance = cls(cls.Params(**params))
    fingerprint = source.manifest.fingerprint if hasattr(source, "manifest") else "in-memory"
    checkpointer = Checkpointer(
        run_dir, config=instance.params.model_settings(), store_fingerprint=fingerprint, time_limit=time_limit
    )
    metrics = os.path.join(run_dir, "metrics.jsonl") if run_dir else None
    log = MetricsLog(metrics, valid=valid, valid_every=valid_every)
    model = instance.fit(
        source,
        engine=engine or Engine(mode="inprocess"),
        checkpointer=checkpointer,
        log=log,
        resume=resume,
        stop_after=stop_after,
        checkpoint_every=checkpoint_every,
        checkpoint_interval=checkpoint_interval,
        valid=valid,
    )
    return model, log


def offset_data():
    """Three classes on four dense columns; column 2 is shifted to a mean 1000× its spread."""
    from sklearn.datasets import make_classification

    X, y = make_classification(n_samples=400, n_features=4, n_informative=3, n_redundant=0, n_classes=3, random_state=0)
    shifted = X.copy()
    shifted[:, 2] = X[:, 2] + 1000.0 * X[:, 2].std() - X[:, 2].mean()
    return X - X.mean(axis=0), shifted, y
