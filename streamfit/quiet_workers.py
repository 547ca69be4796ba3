"""A Dask worker plugin for `streamfit -q`: the worker's own log quiet from its start.

Kept apart from streamfit.engine so that a command that runs in process never imports
distributed (the plugin's base class lives there)."""

from __future__ import annotations

from distributed.diagnostics.plugin import WorkerPlugin

from streamfit.logs import silence_dask_worker


class QuietWorkerLog(WorkerPlugin):
    """Sets a worker's "distributed" and "tornado" loggers and their handlers to `level` when
    the worker starts (also one a nanny starts again after a kill): no CommClosedError traceback
    from a worker whose peer went away mid-transfer. A worker process imported distributed in
    the forkserver, which set up its log before any streamfit setting could reach it."""

    idempotent = True

    def __init__(self, level: int):
        self.level = level

    def setup(self, worker) -> None:
        silence_dask_worker(self.level)
