"""The check of Dask workers that join a `--scheduler` cluster during a run.

`Engine.start` checks the workers there at the start (`on_worker.environment`: an error naming a
worker that cannot import the modules of streamfit's tasks or runs another streamfit version).
A worker that joins later would take tasks unchecked: one of another streamfit version could
compute other bits, one without a package was dropped by Dask at its first task. `joiner_check`
makes the Dask worker plugin that the engine registers after its own check: Dask runs its
`setup` in every worker that registers with the scheduler from then on, before the worker
handles any message of the scheduler, so before its first task. A worker that fails the check
pauses (no task starts there; the scheduler sends it none), tells the driver through a Dask event
on TOPIC (the engine logs one warning naming it), and closes with its nanny (which would start
it again otherwise); the run goes on on the other workers.

The plugin's class is made inside `joiner_check`, so that cloudpickle ships its code with it
(by value): a worker whose streamfit is another version, or missing, runs it without importing
streamfit's own copy of it. Its methods import only the standard library and distributed.

A plugin that its driver did not unregister (the driver killed) stays on the scheduler: it does
nothing once the driver's client is gone, which it reads from the scheduler's events of that
client (the scheduler logs "add-client" and "remove-client" under the client's id).

Two drivers of different streamfit versions on one scheduler cannot each keep workers of their
own: Dask gives any client's tasks to any worker (only a restriction on every task, which
streamfit does not place, would keep them apart), so each driver's check closes the workers of
the other's version that join, and a driver finds the other's workers at its start (an error,
Engine._require_worker_environment). This is not made exact; the plugin's name carries its
driver's version and client id (`plugin_name`), and a driver that starts where another
version's driver runs says so in one warning first (`other_drivers`, Engine._check_joiners).
"""

from __future__ import annotations

from typing import Any

# the Dask event topic on which a refused worker tells the driver (its payload: worker, problem)
TOPIC = "streamfit-worker-refused"
PLUGIN_PREFIX = "streamfit-joiners "  # a joiner check's name on the scheduler: this, the version, the client id


def plugin_name(version: str, driver: str) -> str:
    """The name the joiner check of the driver whose Dask client id is `driver` is registered
    under: PLUGIN_PREFIX, its streamfit version, a space, the client id."""
    return f"{PLUGIN_PREFIX}{version} {driver}"


def other_drivers(version: str, dask_scheduler: Any = None) -> list[tuple[str, str]]:
    """Run on the scheduler (Client.run_on_scheduler passes it as `dask_scheduler`): (streamfit
    version, client id) of each driver connected to it whose joiner check is registered there
    and whose version is not `version`."""
    found = []
    for name in dask_scheduler.worker_plugins:
        if name.startswith(PLUGIN_PREFIX):
            theirs, _, driver = name[len(PLUGIN_PREFIX) :].rpartition(" ")
            if theirs != version and driver in dask_scheduler.clients:
                found.append((theirs, driver))
    return sorted(found)


def joiner_check(version: str, modules: tuple[str, ...], driver: str) -> Any:
    """A Dask WorkerPlugin checking each worker it is set up in: streamfit's `version` there
    (this process's) and every module of `modules` importable (on_worker.task_modules); while
    the client whose id is `driver` is connected to the scheduler, a worker that fails is paused,
    named on TOPIC and closed with its nanny."""
    from distributed.diagnostics.plugin import WorkerPlugin

    class JoinerCheck(WorkerPlugin):
        idempotent = True  # registered again under its name: the new one replaces it

        async def setup(self, worker) -> None:
            import importlib

            events = await worker.scheduler.events(topic=driver)  # also its graphs: the last of these two counts
            joins = [
                m["action"]
                for _, m in events
                if isinstance(m, dict) and m.get("action") in ("add-client", "remove-client")
            ]
            if joins[-1:] != ["add-client"]:  # the driver that registered this plugin has gone
                return
            problem = None
            try:
                import streamfit

                theirs = getattr(streamfit, "__version__", "unknown")
                if theirs != version:
                    problem = f"runs streamfit {theirs}, the driver {version}"
                for name in modules if problem is None else ():
                    importlib.import_module(name)
            except ImportError as e:
                problem = f"cannot import {e.name or 'a module'} ({e}), which streamfit's tasks need"
            if problem is None:
                return
            from distributed.core import Status

            worker.status = Status.paused  # no task starts here, and the scheduler sends it none
            worker.log_event(TOPIC, {"worker": worker.address, "problem": problem})
            worker.loop.add_callback(worker.close, nanny=True, reason=f"streamfit: this worker {problem}")

    return JoinerCheck()
