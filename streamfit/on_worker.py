"""Errors of streamfit's tasks on Dask workers that name the worker.

With `--scheduler` the workers may run on other machines, with their own credentials, mounts and
disks, so a task can fail on a worker where the same work succeeds in the driver: its object
store refuses the worker's credentials, or a path the driver sees is missing there. Such an
error reaches the driver as the task's error, and says which worker to fix: a store the worker
cannot open (streamfit.store.Store, opened on its first use in a task), and an object store's
refusal of any other read or write of a task (`task`, around every task streamfit submits).
A worker whose Python lacks a package the tasks import (numba, say) is found before any task
(`environment`): Dask would drop such a worker at its first task, unable to unpickle it; one that
joins during a run is checked by streamfit.worker_check.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any

from streamfit.errors import StreamfitError


def where() -> str | None:
    """The words "the Dask worker ADDRESS" when this runs in a task on a Dask worker, else None."""
    if "distributed" not in sys.modules:  # not imported: no Dask worker in this process
        return None
    from distributed import get_worker

    try:
        return f"the Dask worker {get_worker().address}"
    except ValueError:  # no worker here
        return None


# The modules of the functions streamfit runs as tasks, besides each solver's (ingest, predict,
# evaluate): a Dask worker must import them all to run streamfit's tasks (Engine.start checks the
# workers of a --scheduler cluster with `environment`).
TASK_MODULES = ("streamfit.ingest.distributed", "streamfit.predict", "streamfit.metrics")


def task_modules() -> tuple[str, ...]:
    """The modules of every function streamfit runs as a task: TASK_MODULES and each solver's."""
    from streamfit.solvers import SOLVER_NAMES

    return (*TASK_MODULES, *(f"streamfit.solvers.{solver}" for solver in SOLVER_NAMES))


def environment() -> tuple[str, str | None]:
    """On a Dask worker: (streamfit's version there, None) once every module of task_modules()
    imports; (the version, "MODULE (the ImportError)") for the first package missing there
    otherwise. Each module by its own name: a package whose import failed earlier can stay in
    sys.modules half imported."""
    import importlib

    import streamfit

    try:
        for name in task_modules():
            importlib.import_module(name)
    except ImportError as e:
        return streamfit.__version__, f"{e.name or 'a module'} ({e})"
    return streamfit.__version__, None


def call(fn: Callable, /, *args, **kwargs) -> Any:
    """fn(*args, **kwargs), run as a Dask task: an object store's refusal raised in it (a wrong
    key, an expired token, access denied: streamfit.storage.client_error_message) becomes a
    StreamfitError naming this worker, the refusal and the fix, as the driver then reports it.
    Any other error passes unchanged."""
    try:
        return fn(*args, **kwargs)
    except OSError as e:
        from streamfit.storage import client_error_message

        refused = client_error_message(e)
        here = where()
        if refused is None or here is None:
            raise
        raise StreamfitError(f"{here}: {refused}") from e


def task(fn: Callable) -> Callable:
    """`fn` run through `call` (a decorator for the functions submitted to Dask directly); it
    keeps fn's name, so Dask names its tasks after it."""

    @functools.wraps(fn)
    def run(*args, **kwargs):
        return call(fn, *args, **kwargs)

    return run
