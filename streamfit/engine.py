"""Where per-chunk tasks run: in this process, on an embedded local Dask cluster, or on an
existing Dask cluster (`scheduler="tcp://host:8786"`).

Every pass over the data is `map` (one task per chunk, results in chunk order) or
`map_reduce` (the chunk results summed); `imap_unordered` runs tasks that are not chunks
(ppdsparse's class groups) and yields each result as it comes. Sums always follow the same
binary tree over chunk ids -- `sum(lo, hi) = sum(lo, mid) + sum(mid, hi)` with `mid - lo` the
largest power of two below `hi - lo` -- whatever the number of workers, threads or the
completion order, so a run gives bitwise the same numbers on a laptop and on a cluster. On a
cluster, `map_reduce` runs each subtree of at most `leaf_chunks(n_chunks, threads)` chunks as one
task that sums its chunks along the same subtree (`fold_chunks`): fewer tasks to schedule and
fewer partial sums moved between workers, the same additions in the same order. Above them,
each add task computes SUM_LEVELS levels of the tree at once (`add_subtree`: ((a + b) + (c + d))
from four partial sums), so a pass waits for half as many levels of sums, each a round trip
through the scheduler. A pass's tasks, chunk tasks and sums, reach the scheduler as one graph
(`_PassGraph`), not one message per task.

Chunk affinity: on a cluster, chunk i's task asks for the same worker in every pass
(`chunk_workers`: the chunks cut into contiguous ranges, one per worker thread; a subtree task
asks for its middle chunk's), so each worker decodes and caches its own share of the store once
(the store's chunk cache is per process) instead of most of the store in every worker, as when
Dask placed the tasks freely. The request is loose (`allow_other_workers`): a busy or lost worker's chunks run
elsewhere. Where a task runs never changes its result.

Losing a worker: large arguments are scattered, and although `broadcast=True` copies them to
every worker, Dask's active memory manager (its ReduceReplicas policy, on by default) soon drops
all copies but one. If the worker holding that copy dies, the value is gone for good (scattered
data has no recipe to recompute it), and so is every task and partial sum of the pass that
depends on it: Dask cancels them ("... cancelled for reason: already forgotten"). A scatter can
also fail outright when a worker leaves while the scheduler copies a value to it (a KeyError
naming the worker). Such a pass is run again from scratch -- scattered anew, on the workers left
-- up to MAX_ATTEMPTS times, then it is a StreamfitError that points to --resume (`imap_unordered`
submits again only the tasks whose results it has not yielded yet). Tasks are
deterministic and their writes idempotent, so a repeated pass gives the same bits. The client
holds the scattered arguments until its pass has finished, so that Dask itself recomputes the
results of a dead worker whenever the arguments survived. A cluster without workers for
`worker_timeout` seconds is an error, not a silent hang.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import multiprocessing
import os
import signal
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Generator, Iterable, Iterator
from concurrent.futures import CancelledError
from typing import TYPE_CHECKING, Any

from streamfit import on_worker, shutdown
from streamfit.errors import StreamfitError, Terminated, exception_chain

if TYPE_CHECKING:
    from distributed import Client, LocalCluster

log = logging.getLogger(__name__)

# Keyword arguments larger than this (by dask's sizeof) are scattered once to every worker.
# It must stay below the 1e5 bytes above which Client.map turns a keyword argument into a
# graph node keyed by the argument's *name*, so two maps with a large `active=` collide.
BROADCAST_BYTES = 64 * 1024

# How often a pass is run when Dask loses workers under it.
MAX_ATTEMPTS = 3
# How often (seconds) a running pass checks that the cluster still has workers.
WATCH_INTERVAL = 1.0
# What a SIGTERM during the embedded cluster's start leaves (Terminated's message): it also ends
# the worker processes starting in the job's process group, and LocalCluster fails ("Nanny failed
# to start"), which is the stop, not an error of the command
CLUSTER_START_STOPPED = "the embedded Dask cluster was starting, nothing was computed; run the same command again"
# Seconds between looks at the SIGTERM flag while a pass that stops on it waits for its tasks
SIGTERM_POLL = 0.1
# Seconds the close of an embedded cluster whose start a Ctrl-C or a failure ended may take, and
# of one whose start a SIGTERM stopped (its start may still wait for a worker that never comes;
# the process ends after it either way)
UNFINISHED_CLOSE = 10.0
STOPPED_START_CLOSE = 2.0
# Seconds the start waits, after the forkserver was found gone, for the SIGTERM that may have ended it
FORKSERVER_LOST_WAIT = 1.0
# Seconds a cluster may have no workers before the run fails (Engine's worker_timeout, --worker-timeout).
WORKER_TIMEOUT = 60.0
# Seconds Dask's client waits for a --scheduler, at the start and when it reconnects after losing
# it (its `timeout`), where the user's Dask configuration does not set distributed.comm.timeouts.connect
# (CONNECT_TIMEOUT_KEY; Dask's own default is 30 s): a scheduler that is not there is named sooner.
CONNECT_TIMEOUT = 20.0
CONNECT_TIMEOUT_KEY = "distributed.comm.timeouts.connect"
# Seconds, beyond the client's connect timeout (for which it tries to reconnect to a scheduler it
# lost, then closes itself), that Engine._require_scheduler waits at most for that outcome.
RECONNECT_SLACK = 100.0
COMMS_SETTLE = 5.0  # seconds a comms error waits for the client to notice a lost scheduler (Engine.__exit__)
# Where the embedded cluster's dashboard listens (--dashboard-address): this machine only, Dask's usual
# port (Dask takes a free one when it is in use). 0.0.0.0:8787 would open it to the network.
DASHBOARD_ADDRESS = "127.0.0.1:8787"
# Dask's UserWarning when the dashboard's port is taken (another run on this machine) and it listens
# on a free one instead: silenced, as the URL that train logs names the port in use.
PORT_IN_USE_WARNING = r"Port \d+ is already in use"

# `streamfit train` without --n-workers or --scheduler runs in this process when the store's
# non-zeros times its classes are at most this: an embedded cluster costs 3-8 s (start, then
# imports and numba cache loads in every worker) before the first chunk, more than such a fit
# takes on one core (see auto_choice and docs/benchmarks.md, "Small jobs"). A fit that runs in the
# driver (Solver.uses_workers False: bcd's memory mode) runs in this process whatever its size.
AUTO_INPROCESS_WORK = 2**24

# Above that bound, for a solver that estimates its work (Solver.work: rounds of tasks, seconds a
# round in process), the auto engine predicts both walls (predicted_walls) and takes the faster:
#     in process:  rounds × round_s
#     cluster:     CLUSTER_START_S + rounds × (CLUSTER_ROUND_S + round_s / n_eff)
# n_eff = 1 + PARALLEL_GAIN × (n − 1), n = min(cores − 1, chunks): the workers' worth of cores a
# round keeps busy, one core left to the driver and the scheduler, which run beside the workers
# (session 34's first held-out check counted all the cores: on 2 it chose the cluster for rounds
# of ~1.8 s, which took 1.9x the in-process wall; on 2 cores the rule now never picks the cluster).
# Measured in docs/benchmarks.md, "The auto engine: a cluster only where it is faster (session 34)".
# The embedded cluster's start, its first no-op round included: 3.87 s for 2 workers on this 2-core
# machine, the forkserver's own start with it (tools/bench_engine_choice.py noop); 4.3-4.7 s for
# 16 workers on the lent 16-core machine (session 10's table, start + close).
CLUSTER_START_S = 4.0
# A round of tasks on the cluster beyond its compute: scheduling, the step's arguments scattered,
# the chunk results moved and summed, the per-row state through the run directory's files (in
# process it stays in memory). A no-op round of 8 chunks costs 0.044 s on 2 workers
# (tools/bench_engine_choice.py noop); stagewise's rounds cost 0.06-0.38 s beyond their compute
# divided by n_eff on 2 workers (session 34, five stores), 0.26 s a pass at 16 workers
# (session 10: overhead 2.81 s over 11 passes).
CLUSTER_ROUND_S = 0.25
# What each worker beyond the first adds to a round's speed, in cores: compute per task doubles at
# 16 workers (memory bandwidth; session 10: 70.9 s of summed task time at N = 16 against 36.3 s at
# N = 1, efficiency ~0.5), and 1 → 2 workers gave 1.5-1.55x on the same machine (stagewise, bcd).
PARALLEL_GAIN = 0.5


# How the embedded cluster starts its worker processes. "forkserver": one server process imports
# WORKER_PRELOAD once (the first embedded cluster of this process starts it; it lives as long as
# this process), then forks every worker from it, so a worker neither starts a Python nor imports
# Dask, NumPy, SciPy, numba, zarr and the solvers itself (Dask's default, "spawn", does both in
# every worker, at once on every core). A worker gets this process's working directory, sys.path
# and environment at the cluster's start, but the stdout and stderr this process had when the
# forkserver started. "fork" (from this process, whose Dask threads may hold locks) is not safe.
# Where there is no forkserver (Windows), Dask's spawn.
WORKER_START_METHOD = "forkserver" if "forkserver" in multiprocessing.get_all_start_methods() else "spawn"
# What the forkserver imports before it forks: what every solver's chunk tasks run (each solver
# module: `import streamfit.solvers` alone imports none, see streamfit.solvers.SOLVER_NAMES), and
# streamfit.numba_target, which initialises numba's CPU target (1-2 s that each worker's first
# kernel call paid). None of it may start a thread at import (a fork copies one thread only):
# NumPy's BLAS gets one thread (Dask sets OPENBLAS_NUM_THREADS=1 etc. before the server starts),
# numba's initialisation starts none, and pyarrow (a jemalloc thread) is left to the tasks that
# need it (ingest, parquet stores). The Zarr backend (its codecs) is imported here although
# streamfit.store imports it only on a Zarr store's first read: else each worker paid that
# import in its first chunk task, all of them at once (0.3-0.6 s while it imported zarr-python).
WORKER_PRELOAD = (
    # first: the workers ignore SIGINT, a terminal's Ctrl-C is the driver's to report; and so does
    # the forkserver while it imports the rest (seconds), where a Ctrl-C printed its own traceback
    "streamfit.worker_signals",
    "distributed",
    *(f"streamfit.solvers.{name}" for name in ("bcd", "fbpd", "multiboost", "ppdsparse", "stagewise")),
    "streamfit.store",
    "streamfit.store.zarr_backend",
    "streamfit.numba_target",
)

# A cluster's map_reduce cuts the chunks into subtrees of the sum tree, one task each, with at
# least this many tasks per worker thread (some slack for a slow worker; see leaf_chunks).
TASKS_PER_THREAD = 2
# Levels of the fixed binary tree that one add task of a cluster's map_reduce computes
# (`add_subtree`: up to 2^SUM_LEVELS partial sums in, ((a + b) + (c + d)) for 2). Each task level
# costs the pass a round trip through the scheduler and a transfer; 64 chunks on 16 workers (32
# subtree tasks) take 3 levels of sums instead of 5.
SUM_LEVELS = 2


@dataclasses.dataclass(frozen=True)
class Work:
    """A fit's work as its solver estimates it before the run, from the store's manifest and the
    solver's parameters (Solver.work): `rounds` rounds of tasks over the chunks (passes, each a
    round trip through a cluster's scheduler), each `round_s` seconds of compute in this process
    on one core; `step` names one round in the log line ("stage", "iteration")."""

    rounds: int
    round_s: float
    step: str = "round"


@dataclasses.dataclass(frozen=True)
class EngineChoice:
    """`streamfit train`'s engine: `mode` ("inprocess", "local" or "remote"), `why` (the log
    line's reason), and, where the work estimate decided, the predicted walls in seconds."""

    mode: str
    why: str
    inprocess_s: float | None = None
    cluster_s: float | None = None


def predicted_walls(work: Work, cores: int, n_chunks: int) -> tuple[float, float]:
    """(in process, embedded cluster of one worker per core) wall seconds of `work` on a machine
    of `cores` cores and a store of `n_chunks` chunks, by the model above CLUSTER_START_S."""
    n = max(1, min(cores - 1, n_chunks))
    n_eff = 1 + PARALLEL_GAIN * (n - 1)
    inprocess = work.rounds * work.round_s
    cluster = CLUSTER_START_S + work.rounds * (CLUSTER_ROUND_S + work.round_s / n_eff)
    return inprocess, cluster


def auto_choice(
    scheduler: str | None,
    n_workers: int | None,
    nnz: int,
    n_classes: int,
    n_chunks: int,
    uses_workers: bool = True,
    work: Work | None = None,
    cores: int | None = None,
) -> EngineChoice:
    """The engine of a train run: "remote" with a scheduler address, "inprocess" for
    n_workers == 0, "local" (an embedded cluster) for n_workers >= 1. With neither given
    (`auto`): "inprocess" when the solver's fit runs no tasks on workers (`uses_workers` False,
    Solver.uses_workers), nnz × n_classes <= AUTO_INPROCESS_WORK, the store has one chunk (each
    pass is then one task, which one worker runs while the others wait: 20 Newsgroups' 11 314
    rows trained 3–8× slower on two workers, with 2.6–3× the memory, to the same model;
    docs/benchmarks.md, qa29), or the machine has one core (`cores`, default os.cpu_count()).
    Else, when the solver estimates its `work`, the engine of the smaller predicted wall
    (predicted_walls; ties go to this process, which holds less memory); without an estimate,
    "inprocess" on two cores (one is the driver's and the scheduler's, n_eff = 1 in
    predicted_walls: the cluster's costs for no gain, whatever the work; ppdsparse and bcd
    measured in docs/benchmarks.md, session 34), else "local"."""
    if scheduler:
        return EngineChoice("remote", f"the Dask cluster at {scheduler}")
    if n_workers is not None:
        return EngineChoice("inprocess", "--n-workers 0") if n_workers == 0 else EngineChoice("local", "--n-workers")
    cores = cores or os.cpu_count() or 1
    if not uses_workers:
        return EngineChoice("inprocess", "the solver fits in the driver")
    if n_chunks <= 1:
        return EngineChoice("inprocess", "a store of one chunk")
    if nnz * max(n_classes, 1) <= AUTO_INPROCESS_WORK:
        return EngineChoice("inprocess", "a small store")
    if cores == 1:
        return EngineChoice("inprocess", "a machine of one core")
    if work is None:  # n_eff = 1 on two cores (predicted_walls): the cluster's costs for no gain, whatever the work
        if cores == 2:
            return EngineChoice("inprocess", "a machine of 2 cores, one of them the driver's and the scheduler's")
        return EngineChoice("local", f"one worker per core ({cores})")
    inprocess, cluster = predicted_walls(work, cores, n_chunks)
    per_step = f"{work.rounds} {work.step}s of ~{work.round_s:.2g} s each"
    n = cores  # the embedded cluster's workers: one per core
    if cluster < inprocess:
        why = f"{per_step}: ~{cluster:.0f} s predicted on {n} workers against ~{inprocess:.0f} s in this process"
        return EngineChoice("local", why, inprocess, cluster)
    why = (
        f"{per_step}, ~{inprocess:.0f} s predicted; a {n}-worker cluster would take ~{cluster:.0f} s "
        f"(its start and ~{CLUSTER_ROUND_S:g} s a {work.step})"
    )
    return EngineChoice("inprocess", why, inprocess, cluster)


@contextlib.contextmanager
def _worker_start_method():
    """Dask's `distributed.worker.multiprocessing-method` set to WORKER_START_METHOD while the
    embedded cluster runs (restored after it, for the caller's other Dask clusters), with the
    forkserver importing WORKER_PRELOAD, started now (in the caller's thread: _sighup_blocked)
    unless an earlier cluster of this process started it, in the environment a Dask nanny gives
    its workers (_nanny_environment)."""
    import dask
    from distributed.utils import get_mp_context

    with dask.config.set({"distributed.worker.multiprocessing-method": WORKER_START_METHOD}):
        context = get_mp_context()  # Dask sets its own preload list on the first call in a process...
        if WORKER_START_METHOD == "forkserver":
            from multiprocessing import forkserver

            context.set_forkserver_preload(list(WORKER_PRELOAD))  # ...which this replaces (until the server starts)
            os.environ.update(_nanny_environment())
            forkserver.ensure_running()
        yield


def _nanny_environment() -> dict[str, str]:
    """The variables a Dask nanny puts in this process's environment before it starts a worker
    (`distributed.nanny.pre-spawn-environ`, each unless already set: one OpenMP, MKL and OpenBLAS
    thread, malloc's trim threshold; PYTHONHASHSEED 6640 where unset or 0). The forkserver started
    before any nanny must have them as one started by the first nanny had: its WORKER_PRELOAD
    loads NumPy's BLAS, which reads its thread count once, and the workers forked from it keep it.
    With the driver's own count (two threads on a 2-core machine) the workers' BLAS sums came out in another
    order than one thread's, and their models 1e-11 away from the in-process run's."""
    import dask

    environment = {
        key: os.environ.get(key, str(value))
        for key, value in dask.config.get("distributed.nanny.pre-spawn-environ").items()
        if value is not None
    }
    if environment.get("PYTHONHASHSEED") in (None, "0"):
        environment["PYTHONHASHSEED"] = "6640"
    return environment


@contextlib.contextmanager
def _sighup_blocked():
    """SIGHUP blocked in this thread within (where the system has it): the helper processes that
    the embedded cluster's start execs here (multiprocessing's resource tracker, the forkserver)
    keep that mask, so that none ever takes a SIGHUP. A closing terminal's SIGHUP reaches this
    process's whole process group (the shell forwards it to its job); a resource tracker that died
    of it was restarted by the next semaphore, which then printed a KeyError traceback for every
    semaphore the first had registered, and the forkserver was exposed until its WORKER_PRELOAD
    set SIGHUP aside (streamfit.worker_signals). This process takes a SIGHUP that came meanwhile
    as the mask is restored (streamfit.shutdown: a stop request)."""
    sighup = getattr(signal, "SIGHUP", None)
    if sighup is None:  # no such signal (Windows)
        yield
        return
    blocked = signal.pthread_sigmask(signal.SIG_BLOCK, {sighup})
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, blocked)


def _require_semaphores(n_workers: int | None) -> None:
    """StreamfitError where this process cannot make a multiprocessing lock: a POSIX semaphore, on
    Linux a file in /dev/shm (a container's /dev/shm read-only or missing). The embedded cluster's
    nannies make one for each worker process they start, and without it the cluster failed with
    Dask's 'Nanny failed to start' after its error tracebacks."""
    try:
        multiprocessing.get_context(WORKER_START_METHOD).Lock()
    except OSError as e:
        raise StreamfitError(
            f"the embedded Dask cluster (--n-workers {n_workers or 'one per core'}) cannot start its worker "
            f"processes: this system refuses them the semaphores they need ({e.strerror or e}; on Linux they "
            "are files in /dev/shm): give the container a writable /dev/shm (docker run --shm-size 64m, "
            "or --tmpfs /dev/shm), or run in this process (--n-workers 0), or join a cluster with --scheduler"
        ) from None


class _SchedulerLossReported(logging.Filter):
    """Drops Dask's client's ERROR "Failed to reconnect to scheduler …, closing client" and the
    tracebacks of its failed or cancelled reconnection (a comms error or CancelledError logged as
    the message itself): the engine reports a lost scheduler itself, as one error naming it and
    the fix."""

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Failed to reconnect to scheduler"):
            return False
        # the client's reconnection attempt failing or cancelled, logged with its traceback
        # (distributed.utils.log_errors: the exception itself as the message)
        import asyncio  # loaded with distributed, whose client logs these

        reconnecting = record.exc_info is not None and record.exc_info[1] is record.msg
        return not (reconnecting and isinstance(record.msg, (OSError, CancelledError, asyncio.CancelledError)))


_SCHEDULER_LOSS_REPORTED = _SchedulerLossReported()


SYNC_MODULE = os.path.join("distributed", "utils.py")  # where distributed.utils.sync is defined


class _InterruptBeforeStart(logging.Filter):
    """Drops tornado's ERROR "Exception in callback" for a NameError raised by the `cancel` of
    distributed.utils.sync: a Ctrl-C that reaches a blocking Dask call before its coroutine has
    started makes `cancel` read a variable not yet set (distributed 2026.7, whose `sync` cancels
    the coroutine it had not started). Nothing was running, so nothing is lost; the command
    reports the stop itself, in one line."""

    def filter(self, record: logging.LogRecord) -> bool:
        if record.exc_info is None or not isinstance(record.exc_info[1], NameError):
            return True
        tb = record.exc_info[2]
        while tb is not None and tb.tb_next is not None:
            tb = tb.tb_next
        code = tb.tb_frame.f_code if tb is not None else None
        return not (code is not None and code.co_name == "cancel" and code.co_filename.endswith(SYNC_MODULE))


_INTERRUPT_BEFORE_START = _InterruptBeforeStart()


class _ForkserverLost(logging.Filter):
    """While the embedded cluster starts (`_started_unless_stopped`): drops the nanny's ERROR
    "Failed to start process" whose exception is multiprocessing's EOFError (the forkserver ended
    before it forked the worker: a SIGTERM to the whole job, or the kernel's OOM killer) and sets
    `lost`; the start then ends in one line instead of the traceback and distributed's endless
    wait for that worker."""

    def __init__(self):
        super().__init__()
        self.lost = threading.Event()

    def filter(self, record: logging.LogRecord) -> bool:
        if str(record.msg).startswith("Failed to start process") and record.exc_info is not None:
            if isinstance(record.exc_info[1], EOFError):
                self.lost.set()
                return False
        return True


class _WorkerLost(Exception):
    """A pass that Dask could not finish because a worker died under it (internal: retried)."""


def add_results(a, b):
    """Elementwise sum of two task results: arrays, numbers, None for "nothing", or tuples,
    lists and NamedTuples of them (a chunk task's named sums: each field summed)."""
    if isinstance(a, tuple) and hasattr(a, "_fields"):
        return type(a)(*(add_results(x, y) for x, y in zip(a, b)))
    if isinstance(a, (tuple, list)):
        return type(a)(add_results(x, y) for x, y in zip(a, b))
    if a is None and b is None:
        return None
    return a + b


def _split(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def leaf_chunks(n_chunks: int, threads: int) -> int:
    """The chunks one map_reduce task sums on a cluster of `threads` worker threads: the largest
    power of two g with ⌈n_chunks / g⌉ ≥ TASKS_PER_THREAD · threads (1 when even g = 2 leaves
    fewer tasks). Each subtree of the fixed tree with at most g chunks is one task."""
    g = 1
    while -(-n_chunks // (2 * g)) >= TASKS_PER_THREAD * max(threads, 1):
        g *= 2
    return g


def chunk_workers(nthreads: dict[str, int], n_chunks: int) -> list[str]:
    """The worker address for each of `n_chunks` chunks: the chunks in order cut into as many
    contiguous ranges as there are worker threads (`nthreads`: address -> threads; addresses
    sorted), chunk i to slot ⌊i · slots / n_chunks⌋. The same for every pass of a cluster whose
    workers do not change."""
    slots = [address for address in sorted(nthreads) for _ in range(nthreads[address])]
    return [slots[i * len(slots) // n_chunks] for i in range(n_chunks)] if slots else []


def tree_sum(values: Iterable) -> Any:
    """Sum `values` (any iterable of at least one, consumed once) along the fixed binary tree of the module
    docstring: `sum(lo, hi) = sum(lo, mid) + sum(mid, hi)`, `mid - lo` the largest power of two
    below `hi - lo`. Built left to right with a stack of the complete power-of-two subtrees
    (equal neighbours merged), so that only O(log n) partial sums are held at once; what is left
    on the stack at the end, subtrees of decreasing size, is added right to left."""
    stack: list[tuple[int, Any]] = []
    for value in values:
        stack.append((1, value))
        while len(stack) > 1 and stack[-1][0] == stack[-2][0]:
            (n2, b), (n1, a) = stack.pop(), stack.pop()
            stack.append((n1 + n2, add_results(a, b)))
    _, total = stack.pop()
    while stack:
        _, a = stack.pop()
        total = add_results(a, total)
    return total


def fold_chunks(fn: Callable, source, chunk_ids: list, /, **kwargs) -> Any:
    """Σ fn(source, i, **kwargs) over `chunk_ids` along the fixed tree (tree_sum), each chunk's
    result computed as the sum needs it: one cluster task's subtree of a map_reduce."""
    return tree_sum(fn(source, i, **kwargs) for i in chunk_ids)


def add_subtree(shape, *parts) -> Any:
    """The sum of `parts` that `shape` spells: a position in `parts`, or a pair (left, right) of
    shapes added as add_results(left, right). ((0, 1), (2, 3)) is (p0 + p1) + (p2 + p3): one task
    of the cluster's sum tree computing SUM_LEVELS levels of the fixed tree (`sum_tree`)."""
    if isinstance(shape, int):
        return parts[shape]
    return add_results(add_subtree(shape[0], *parts), add_subtree(shape[1], *parts))


def sum_tree(ids: list, group: int, leaf: Callable[[list], Any], add: Callable[..., Any], levels: int = 1) -> Any:
    """The sum over `ids` along the fixed tree, built depth first, left to right: leaf(sub) for
    each subtree of at most `group` ids (fold_chunks sums one along the same tree), and above
    them add(shape, *parts) for each node of the tree that heads up to `levels` of its levels
    (`add_subtree`'s shape over the parts below: at most 2^levels of them; from the root down,
    so that only the lowest sums may have fewer). With leaf = fold_chunks and add = add_subtree
    this is tree_sum's sum, bitwise, for any group and levels: the same additions in the same
    order."""
    if len(ids) <= group:
        return leaf(ids)
    parts: list = []

    def shape(sub: list, depth: int):
        if len(sub) <= group or depth == 0:
            parts.append(sum_tree(sub, group, leaf, add, levels))
            return len(parts) - 1
        mid = _split(len(sub))
        return (shape(sub[:mid], depth - 1), shape(sub[mid:], depth - 1))

    whole = shape(ids, levels)
    return add(whole, *parts)


class _PassGraph:
    """One pass's tasks, sent to the scheduler as one graph (one Client.get: one message, one
    update of the scheduler's state) rather than a Client.submit per task, each of which the
    scheduler handled on its own. Chunk tasks ask loosely for their worker (Dask's `workers`
    and `allow_other_workers` annotations, one graph layer per worker); the sum tree's add tasks
    go where the scheduler puts them (near their inputs). `args`: the pass's keyword arguments,
    scattered ones as their futures."""

    def __init__(self, args: dict):
        from dask.task_spec import TaskRef
        from distributed import Future

        self._token = uuid.uuid4().hex
        self._args: dict[str, Any] = {k: TaskRef(v.key) if isinstance(v, Future) else v for k, v in args.items()}
        self._chunk_tasks: dict[str | None, dict] = {}  # worker address (None: any) -> key -> task
        self._sums: dict = {}
        self._count = 0

    def _key(self, name: str) -> str:
        """A key new to the cluster: Dask's `name-token-n` (its dashboard groups tasks by name)."""
        self._count += 1
        return f"{name}-{self._token}-{self._count}"

    def chunk_task(self, fn: Callable, source, ids: list, home: list[str]) -> str:
        """fn(source, i, **args) for the one chunk of `ids`, or fold_chunks over several, asking
        for the worker of their middle chunk (`home`: chunk_workers' list; empty: any worker)."""
        from dask.task_spec import Task
        from dask.utils import funcname

        key = self._key(funcname(fn))
        if len(ids) == 1:
            task = Task(key, on_worker.call, fn, source, ids[0], **self._args)
        else:
            task = Task(key, on_worker.call, fold_chunks, fn, source, ids, **self._args)
        worker = home[ids[len(ids) // 2]] if home else None  # a subtree's chunks mostly share its middle chunk's worker
        self._chunk_tasks.setdefault(worker, {})[key] = task
        return key

    @property
    def placed(self) -> set[str]:
        """The workers that chunk tasks asked for."""
        return {worker for worker in self._chunk_tasks if worker is not None}

    def add_task(self, shape, *parts: str) -> str:
        """add_subtree(shape, *the results of the tasks `parts`)."""
        from dask.task_spec import Task, TaskRef

        key = self._key("add_subtree")
        self._sums[key] = Task(key, add_subtree, shape, *(TaskRef(k) for k in parts))
        return key

    def submit(self, client: Client, keys: list[str]) -> list:
        """The graph sent to the scheduler; the futures of `keys` (the client holds those results
        until it lets go of the futures). The scheduler orders the tasks (dask.order: each sum
        right after its parts, depth first), so a worker adds results before it starts further
        chunk tasks and holds O(log n) of them, not n."""
        from dask.highlevelgraph import HighLevelGraph, MaterializedLayer

        layers = {}
        for n, (worker, tasks) in enumerate(self._chunk_tasks.items()):
            where = {"workers": [worker], "allow_other_workers": True} if worker is not None else None
            layers[f"chunks-{n}"] = MaterializedLayer(tasks, annotations=where)
        dependencies: dict[str, set[str]] = {name: set() for name in layers}
        if self._sums:
            layers["sums"] = MaterializedLayer(self._sums)
            dependencies["sums"] = set(dependencies)
        return client.get(HighLevelGraph(layers, dependencies), keys, sync=False)


def _configured_connect_timeout() -> float | None:
    """Seconds of CONNECT_TIMEOUT_KEY where the user's Dask configuration sets it (a YAML file in
    ~/.config/dask or DASK_CONFIG, DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT, dask.config.set), else
    None: Dask's packaged default does not count, unless a file or the environment names it."""
    import dask
    import distributed  # noqa: F401  (registers Dask's distributed defaults)
    from dask.utils import parse_timedelta

    value = dask.config.get(CONNECT_TIMEOUT_KEY)
    default = dask.config.get(CONNECT_TIMEOUT_KEY, config=dask.config.merge(*dask.config.defaults))
    if value == default and dask.config.get(CONNECT_TIMEOUT_KEY, None, config=dask.config.collect()) is None:
        return None
    try:
        seconds = parse_timedelta(value, "s")
    except (TypeError, ValueError, KeyError):
        seconds = None
    if seconds is None or not seconds > 0:
        raise StreamfitError(
            f"Dask's configuration sets {CONNECT_TIMEOUT_KEY} to {value!r}, not a duration: give one such as 60s "
            f"(or drop it for streamfit's {CONNECT_TIMEOUT:g} s)"
        )
    return float(seconds)


# Dask's TLS settings of a client (under TLS_CONFIG), by Security's name for each (client role)
TLS_CONFIG = "distributed.comm.tls"
TLS_SETTINGS = {"ca_file": "ca-file", "cert": "client.cert", "key": "client.key"}
# Words of an SSL error on the client's side by which the scheduler ended the TLS handshake: its
# alert that it refused the client's certificate, or the connection closed without one (TLS 1.3
# clients learn of the refusal on their first read)
TLS_REFUSED = (
    "ALERT_UNKNOWN_CA",
    "ALERT_BAD_CERTIFICATE",
    "ALERT_CERTIFICATE_UNKNOWN",
    "CERTIFICATE_REQUIRED",
    "SSLEOFError",
)


def _tls_files() -> str:
    """Dask's TLS settings of this process's client, as a message names them: 'now ca-file=PATH, …'."""
    from distributed.security import Security

    tls = Security().get_tls_config_for_role("client")
    shown = {part: "(PEM text)" if "\n" in (tls[part] or "") else tls[part] for part in TLS_SETTINGS}
    return "now " + ", ".join(f"{TLS_SETTINGS[part]}={shown[part]}" for part in TLS_SETTINGS)


def _require_tls_settings(scheduler: str | None) -> None:
    """StreamfitError for a tls:// scheduler address when Dask's configuration gives this process
    no TLS settings (Dask's Client would fail with a TypeError about an ssl_context), or settings
    that do not load: a file missing, a key that is not the certificate's (Python's ssl error,
    which the CLI reported as a file system error)."""
    if not (scheduler or "").startswith("tls://"):
        return
    from distributed.security import Security

    try:
        context = Security().get_connection_args("client").get("ssl_context")
    except (OSError, ValueError) as e:
        tls = Security().get_tls_config_for_role("client")
        missing = [
            f"{TLS_CONFIG}.{name}"
            for part, name in TLS_SETTINGS.items()
            if tls[part] and "\n" not in tls[part] and not os.path.exists(tls[part])
        ]
        problem = f"no file at {', '.join(missing)}" if missing else str(e)
        raise StreamfitError(
            f"Dask's TLS settings for the scheduler at {scheduler} do not load ({problem}; {_tls_files()}): "
            "set them to the PEM files of the cluster's CA, and of a certificate it signed with that certificate's key"
        ) from None
    if context is None:
        raise StreamfitError(
            f"the Dask scheduler at {scheduler} speaks TLS, and Dask's configuration gives this process no "
            "certificate: set distributed.comm.tls.ca-file, .client.cert and .client.key (in ~/.config/dask/*.yaml, "
            "or DASK_DISTRIBUTED__COMM__TLS__CA_FILE, DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT and "
            "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY) to the files the cluster's workers use"
        )


def _tls_failure(scheduler: str, error: BaseException) -> StreamfitError | None:
    """For a failed connection to a tls:// scheduler: the StreamfitError naming the TLS failure
    (from the SSL error in `error`'s chain) and the settings that fix it; None for another failure.
    Dask's client checks the scheduler's certificate against its CA, not against the address's
    host name (`check_hostname` off: a cluster's own CA, IP addresses), so a name that differs is
    no failure."""
    import re
    import ssl

    chain = exception_chain(error)
    for e in chain:
        if isinstance(e, ssl.SSLCertVerificationError):
            return StreamfitError(
                f"the Dask scheduler at {scheduler} has a TLS certificate this process does not trust "
                f"({e.verify_message or e}; {_tls_files()}): set {TLS_CONFIG}.ca-file to the CA that signed the "
                "scheduler's certificate (the file its workers use)"
            )
    text = " ".join(str(e) for e in chain)
    if any(word in text for word in TLS_REFUSED):
        found = next((m.group(0) for e in chain if (m := re.search(r"SSL\w*Error: .*", str(e)))), text)
        return StreamfitError(
            f"the Dask scheduler at {scheduler} ended the TLS handshake, refusing this process's certificate "
            f"({found}; {_tls_files()}): set {TLS_CONFIG}.client.cert and .client.key to "
            "a certificate signed by the CA the scheduler trusts (its --tls-ca-file) and its key, as its workers' are"
        )
    return None


def _until_sigterm(pending, sigterm: str) -> Iterator:
    """The futures of `pending` (a distributed.as_completed) as they finish, until a SIGTERM asks
    to stop: then Terminated(sigterm). While none is ready it looks every SIGTERM_POLL seconds,
    as as_completed itself does for the next one."""
    while not pending.is_empty():
        shutdown.check(sigterm)
        if pending.has_ready():
            yield next(pending)
        else:
            time.sleep(SIGTERM_POLL)


def _close_unfinished_clusters(earlier: set, timeout: float) -> None:
    """Close the clusters that a LocalCluster() stopped mid-start (a Ctrl-C, a SIGTERM to the job)
    left behind: those in distributed's SpecCluster._instances that are not in `earlier`, each
    given `timeout` seconds. Their close may fail on a worker still starting; they are dropped
    from the set either way, so that distributed's own atexit close (`close_clusters`) does not
    print its AssertionError's traceback after the command's one line. The worker processes end
    with this one (multiprocessing terminates its children at exit)."""
    from distributed.deploy.spec import SpecCluster

    for cluster in set(SpecCluster._instances) - earlier:
        with contextlib.suppress(Exception):
            cluster.close(timeout=timeout)
        SpecCluster._instances.discard(cluster)


def _started_unless_stopped(start: Callable[[], Any]) -> Any:
    """start() (the embedded cluster's LocalCluster()) in a thread of its own while this thread
    looks at the SIGTERM flag every SIGTERM_POLL seconds: Terminated(CLUSTER_START_STOPPED) once
    a SIGTERM asked to stop, without waiting for the start to end. A SIGTERM to the whole job can
    kill the forkserver before it has forked the last worker; distributed then logs the nanny's
    EOFError and its LocalCluster() waits for that worker for ever (qa32: until the grace period
    ended the process, 30 s). That log is dropped (`_ForkserverLost`); a forkserver lost with no
    SIGTERM within FORKSERVER_LOST_WAIT seconds (the OOM killer) is a StreamfitError saying so.
    The thread is a daemon: a start that never ends is dropped at exit. Without a SIGTERM guard
    (the library used from Python) start() runs here, as it did."""
    if not shutdown.guarded():
        return start()
    outcome: dict[str, Any] = {}

    def run() -> None:
        try:
            outcome["value"] = start()
        except BaseException as e:  # handed to the waiting thread
            outcome["error"] = e

    # left in place if the start fails: the half-started cluster's nannies log as it is closed
    nanny_log, forkserver = logging.getLogger("distributed.nanny"), _ForkserverLost()
    nanny_log.addFilter(forkserver)
    thread = threading.Thread(target=run, name="streamfit-cluster-start", daemon=True)
    thread.start()
    lost_at = None
    while thread.is_alive():
        thread.join(SIGTERM_POLL)
        shutdown.check(CLUSTER_START_STOPPED)
        if forkserver.lost.is_set():
            lost_at = lost_at or time.monotonic()
            if time.monotonic() - lost_at > FORKSERVER_LOST_WAIT:
                raise StreamfitError(
                    "the embedded Dask cluster's forkserver process ended before it had started every "
                    "worker (killed by a signal, or by the kernel when memory ran out); run the command "
                    "again, with fewer --n-workers if memory is short"
                )
    if "error" in outcome:
        raise outcome["error"]
    nanny_log.removeFilter(forkserver)
    return outcome["value"]


class _NoBar:
    """A progress bar that shows nothing and costs nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        pass


_NO_BAR = _NoBar()


class Engine:
    """Runs `fn(source, chunk_id, **kwargs)` for every chunk.

    mode "inprocess": serial, in this process (estimators on in-memory arrays, tests);
    mode "local": an embedded `distributed.LocalCluster` of `n_workers` processes with
    `threads_per_worker` threads each (default: one single-threaded process per core), its
    dashboard at `dashboard_address` (HOST:PORT; bokeh serves the pages);
    a `scheduler` address joins an existing cluster instead. Use as a context manager.
    """

    def __init__(
        self,
        scheduler: str | None = None,
        *,
        mode: str | None = None,
        n_workers: int | None = None,
        threads_per_worker: int = 1,
        memory_limit: str | None = "auto",
        progress: bool = False,
        connect_timeout: str | float | None = None,
        worker_timeout: float = WORKER_TIMEOUT,
        dashboard_address: str = DASHBOARD_ADDRESS,
    ):
        self.mode = "remote" if scheduler else (mode or "local")
        if self.mode not in ("inprocess", "local", "remote"):
            raise ValueError(f"engine mode must be 'inprocess', 'local' or a scheduler address, got {mode!r}")
        if not worker_timeout > 0:
            raise ValueError(f"worker_timeout must be > 0 seconds, got {worker_timeout!r}")
        self.scheduler = scheduler
        self.n_workers = n_workers  # None: one per core (`start`; os.cpu_count reads /sys, not free per fit)
        self.threads_per_worker = threads_per_worker
        self.memory_limit = memory_limit
        self.progress = progress
        self.connect_timeout = connect_timeout  # None: the user's Dask configuration's, else CONNECT_TIMEOUT
        self._client_timeout = 0.0  # seconds: the started client's connect timeout (its reconnection's too)
        self.worker_timeout = worker_timeout
        self.dashboard_address = dashboard_address
        self.client: Client | None = None  # set by start() unless mode is "inprocess"
        self.cluster: LocalCluster | None = None  # mode "local" only
        self._cluster_config = contextlib.ExitStack()  # the Dask settings of the embedded cluster, until close()
        self._sigterm: str | None = None  # while stopping_on_sigterm: Terminated's message
        # (local path, written) that the joined cluster's workers were found to see (require_shared)
        self._seen_by_workers: set[tuple[str, bool]] = set()
        self._workers_at_last_pass: set[str] | None = None  # the workers a watch saw last (_Watch)
        self._plugins: list[str] = []  # the worker plugins this engine registered on a --scheduler cluster
        self._refused: set[str] = set()  # workers that joined and were closed (_check_joiners): no "left" warning

    def __enter__(self) -> Engine:
        self.start()
        return self

    def __exit__(self, kind, error, traceback) -> None:
        # a Dask comms error out of work the passes do not retry (a workers query between passes)
        # while the client has lost its scheduler: the one error naming it, not the comms' text
        lost = isinstance(error, (OSError, RuntimeError, CancelledError)) and self._lost_scheduler(error)
        self.close()
        if lost:
            raise self._scheduler_lost() from error

    def start(self) -> None:
        if self.mode == "inprocess" or self.client is not None:
            return
        from distributed import Client, LocalCluster

        from streamfit.logs import dask_level as asked_dask_level

        dask_log = logging.getLogger("distributed")
        asked = asked_dask_level()
        if asked is not None:  # `streamfit -q`: reset by distributed's import, set again
            dask_log.setLevel(asked)
        elif not log.isEnabledFor(logging.INFO) and dask_log.getEffectiveLevel() < logging.ERROR:
            dask_log.setLevel(logging.ERROR)  # Dask's own INFO chatter only when streamfit is verbose
        # the scheduler's and workers' logs as this process's (`streamfit -q` raises it to CRITICAL)
        dask_level = max(logging.ERROR, dask_log.getEffectiveLevel())

        logging.getLogger("distributed.client").addFilter(_SCHEDULER_LOSS_REPORTED)  # added once
        logging.getLogger("tornado.application").addFilter(_INTERRUPT_BEFORE_START)
        if self.mode == "remote":
            scheduler = self.scheduler
            assert scheduler, "a remote engine has a scheduler address"
            _require_tls_settings(scheduler)
            from dask.utils import parse_timedelta

            given = self.connect_timeout
            self._client_timeout = (
                parse_timedelta(given, "s") if given is not None else _configured_connect_timeout() or CONNECT_TIMEOUT
            )
            try:
                self.client = Client(scheduler, timeout=self._client_timeout)
            except OSError as e:
                tls = _tls_failure(scheduler, e) if scheduler.startswith("tls://") else None
                if tls is not None:
                    raise tls from e
                if "Connection reset" in str(e) and not scheduler.startswith("tls://"):
                    raise StreamfitError(
                        f"the Dask scheduler at {self.scheduler} closed the connection ({e}): if it speaks TLS "
                        "(started with --tls-cert / --tls-key), give its address as tls://HOST:PORT, with Dask's "
                        "TLS settings (distributed.comm.tls.ca-file, .client.cert, .client.key)"
                    ) from e
                raise StreamfitError(
                    f"cannot reach the Dask scheduler at {self.scheduler} ({e}); start one with "
                    "'dask scheduler' and workers with 'dask worker ADDRESS', or drop --scheduler "
                    "to use the embedded local cluster"
                ) from e
            try:
                self._ensure_workers(during=False)
                self._warn_of_other_drivers()
                self._require_worker_environment()
                self._check_joiners()
            except StreamfitError:
                self.close()
                raise
        else:
            with _sighup_blocked():  # the resource tracker (the first semaphore starts it) and the forkserver
                _require_semaphores(self.n_workers)
                # held until close(): the nanny restarts a worker that died with the same method
                self._cluster_config.enter_context(_worker_start_method())
            from distributed.deploy.spec import SpecCluster

            earlier = set(SpecCluster._instances)
            try:
                options = dict(
                    n_workers=self.n_workers or os.cpu_count() or 1,
                    threads_per_worker=self.threads_per_worker,
                    processes=True,
                    memory_limit=self.memory_limit,
                    dashboard_address=self.dashboard_address,
                    silence_logs=dask_level,
                    # forked workers would otherwise have the environment of the forkserver's start
                    env=dict(os.environ),
                )
                with warnings.catch_warnings():  # the URL is logged instead (train's "Dask dashboard: ...")
                    warnings.filterwarnings("ignore", message=PORT_IN_USE_WARNING, category=UserWarning)
                    self.cluster = _started_unless_stopped(lambda: LocalCluster(**options))
                import dask
                from dask.utils import parse_timedelta

                self._client_timeout = parse_timedelta(dask.config.get(CONNECT_TIMEOUT_KEY), "s")  # Client's default
                self.client = Client(self.cluster, timeout=self._client_timeout)
            except BaseException as e:
                self.close()
                # a start stopped while distributed still waits for a worker: its close waits too
                _close_unfinished_clusters(
                    earlier, STOPPED_START_CLOSE if shutdown.stop_requested() else UNFINISHED_CLOSE
                )
                if shutdown.stop_requested():  # a SIGTERM to the whole job also ended a starting worker
                    raise Terminated(CLUSTER_START_STOPPED) from e
                raise
        if dask_level > logging.ERROR:
            # each worker process set up Dask's log at its import, in the forkserver: quieten it
            # there too, on the workers a nanny starts again later as well
            from streamfit.quiet_workers import QuietWorkerLog

            self._register_plugin(QuietWorkerLog(dask_level), "streamfit-quiet-log")
        log.info("dask engine: %s", self.client)

    def close(self) -> None:
        client, self.client = self.client, None
        if client is not None:
            for name in self._plugins:
                try:  # else it stays on the scheduler, set up in every worker that joins after this run
                    client.unregister_worker_plugin(name)
                except Exception as e:  # the scheduler gone, say
                    log.debug("unregistering the Dask worker plugin %s: %s", name, e)
        self._plugins = []
        if client is not None:
            try:
                client.close()
            except (OSError, RuntimeError) as e:  # the scheduler's side went first ("ConnectionPool is closed")
                log.debug("closing the Dask client: %s", e)
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None
        self._cluster_config.close()

    @property
    def dashboard_link(self) -> str | None:
        """The URL of the cluster's Dask dashboard; None in process and for a scheduler that
        serves none. The embedded cluster serves it only with bokeh installed: without, the
        install hint instead of the URL."""
        if self.client is None:
            return None
        import importlib.util

        if self.mode == "local" and importlib.util.find_spec("bokeh") is None:
            return "needs bokeh: pip install 'streamfit[dashboard]'"
        if "dashboard" not in self.client.scheduler_info().get("services", {}):
            return None  # a scheduler started with --no-dashboard, or without bokeh
        return self.client.dashboard_link

    @property
    def total_threads(self) -> int:
        if self.client is None:
            return 1
        return sum(self.client.nthreads().values())

    def _bar(self, n: int, desc: str | None, unit: str = "chunk"):
        if not (self.progress and desc):  # a disabled tqdm still costs ~20 µs, once per pass
            return _NO_BAR
        from tqdm.auto import tqdm

        return tqdm(total=n, desc=desc, unit=unit, leave=False)

    def on_every_worker(self, fn: Callable, *args) -> None:
        """fn(*args) once in every worker process of the cluster (clean-up of what tasks left on
        the workers' machines); nothing in process. A worker that fails it is logged, not raised."""
        if self.client is None:
            return
        try:
            self.client.run(fn, *args)
        except Exception as e:  # a worker gone, or the function's own error: clean-up is best effort
            log.warning("running %s on the Dask workers failed: %s", getattr(fn, "__name__", fn), e)

    def require_shared(self, read: dict[str, str], written: dict[str, str] | None = None) -> None:
        """For a cluster joined with --scheduler: StreamfitError naming the first local path that
        a worker does not see as this process does, the worker and the fix, before any task reads
        or writes it there. read: {path the workers read: what it is, for the message}; written:
        the same for paths they write (streamfit.shared_paths: the same content where read, the
        same folder, by a marker file, where written). Nothing for URLs, in process or on the
        embedded cluster (its workers share this machine's disk); each path is asked once per
        engine. A store that a worker cannot open for another reason fails its first task there,
        naming the worker (Store._open_shipped)."""
        if self.mode != "remote" or self.client is None:
            return
        from streamfit import shared_paths, storage

        asked: dict[tuple[str, bool], str] = {}
        for paths, writes in ((read, False), (written or {}, True)):
            for path, what in paths.items():
                if not storage.is_url(path):
                    key = (shared_paths.nearest_existing(path), writes)
                    if key not in self._seen_by_workers:
                        asked.setdefault(key, what)
        if not asked:
            return
        self._ensure_workers(during=False)
        with contextlib.ExitStack() as markers:
            tokens = {}
            for path, writes in asked:
                if writes and os.path.isdir(path):
                    with contextlib.suppress(OSError):  # a folder not writable here: its writes fail here first
                        marker = markers.enter_context(shared_paths.Marker(path))
                        tokens[path] = (marker.path, marker.token)
            signatures = {path: shared_paths.signature(path) for path, _ in asked if path not in tokens}
            unlike = self.client.run(shared_paths.unlike, signatures, tokens)
        for worker, found in sorted(unlike.items()):
            for (path, _), what in asked.items():
                if path in found:
                    raise StreamfitError(
                        f"{path}: the Dask worker {worker} does not see this {what}{found[path]}: the workers "
                        "of --scheduler read and write local paths as this process names them, so put it on a "
                        "disk every worker shares, at the same path, or use a URL (s3://…)"
                    )
        self._seen_by_workers.update(asked)

    def _require_shared_args(self, *values) -> None:
        """require_shared for the stores (read) and per-sample state directories (written) among a
        pass's arguments."""
        if self.mode != "remote":
            return
        from streamfit.checkpoint import ChunkState
        from streamfit.store.store import Store

        read, written = {}, {}
        for value in values:
            if isinstance(value, Store):
                read[value.path] = "store"
            elif isinstance(value, ChunkState) and value.root is not None:
                written[value.root] = "run directory"
        self.require_shared(read, written)

    def _require_worker_environment(self) -> None:
        """For a cluster joined with --scheduler: StreamfitError naming the first worker that
        cannot import the modules of streamfit's tasks (on_worker.environment) or runs another
        streamfit version than this process, and the fix. Dask would drop such a worker at its
        first task, unable to unpickle it, and the run would end saying the cluster had no
        workers. A worker that joins later is checked by _check_joiners."""
        import streamfit

        assert self.client is not None, "a started engine with a cluster"
        found = self.client.run(on_worker.environment, on_error="return")
        fix = f"install streamfit {streamfit.__version__} with its dependencies in that worker's Python environment, or stop that worker"
        for address, answer in sorted(found.items()):
            if isinstance(answer, OSError):  # it left during the check (killed for its memory, say): passes watch
                log.debug("the Dask worker %s was not checked (%s: %s)", address, type(answer).__name__, answer)
                continue
            if isinstance(answer, BaseException):  # the check could not be unpickled there: another streamfit, or none
                raise StreamfitError(f"the Dask worker {address} cannot run streamfit's tasks ({answer}); {fix}")
            version, missing = answer
            if missing is not None:
                raise StreamfitError(
                    f"the Dask worker {address} cannot import {missing}, which streamfit's tasks need; {fix}"
                )
            if version != streamfit.__version__:
                raise StreamfitError(
                    f"the Dask worker {address} runs streamfit {version}, this process {streamfit.__version__}; "
                    "install the same version on every worker"
                )

    def _check_joiners(self) -> None:
        """For a cluster joined with --scheduler: each worker that joins from now on is checked as
        _require_worker_environment checks those there at the start, before its first task
        (streamfit.worker_check's plugin); one that fails is closed, and named here in a warning,
        and the run goes on on the others."""
        import streamfit
        from streamfit.worker_check import TOPIC, joiner_check, plugin_name

        client = self.client
        assert client is not None, "a started engine with a cluster"

        def refused(event) -> None:
            _, found = event
            self._refused.add(found["worker"])
            log.warning(
                "the Dask worker %s joined the cluster and %s; it was closed, and the run goes on on the other "
                "workers: install streamfit %s with its dependencies in that worker's Python environment",
                found["worker"],
                found["problem"],
                streamfit.__version__,
            )

        client.subscribe_topic(TOPIC, refused)
        check = joiner_check(streamfit.__version__, on_worker.task_modules(), client.id)
        self._register_plugin(check, plugin_name(streamfit.__version__, client.id))

    def _warn_of_other_drivers(self) -> None:
        """For a cluster joined with --scheduler: one warning when another streamfit version's
        driver runs on the scheduler (streamfit.worker_check.other_drivers): the two cannot
        share its workers (that module's docstring)."""
        import streamfit
        from streamfit.worker_check import other_drivers

        assert self.client is not None, "a started engine with a cluster"
        for version, driver in self.client.run_on_scheduler(other_drivers, streamfit.__version__):
            log.warning(
                "the Dask scheduler at %s also serves a streamfit %s driver (its client %s), this process runs %s: "
                "Dask gives any client's tasks to any worker, so each closes the workers of the other's version "
                "that join, and neither runs beside the other's workers; give each version a scheduler of its own",
                self.scheduler,
                version,
                driver,
                streamfit.__version__,
            )

    def _register_plugin(self, plugin, name: str) -> None:
        """Register a Dask worker plugin, set up in every worker now there and to come; on a
        --scheduler cluster, which outlives this engine, it is unregistered by close()."""
        assert self.client is not None, "a started engine with a cluster"
        self.client.register_plugin(plugin, name=name)
        if self.mode == "remote":
            self._plugins.append(name)

    def _address(self) -> str:
        return self.scheduler or (self.cluster.scheduler_address if self.cluster is not None else "?")

    def _no_workers(self, seconds: float, during: bool) -> StreamfitError:
        address = self._address()
        return StreamfitError(
            f"the Dask scheduler at {address} "
            + (f"has had no workers for {seconds:.0f} s" if during else f"has no workers (waited {seconds:g} s)")
            + f"; start one with 'dask worker {address}'"
            + (" (train: then re-run with --resume to continue from the last checkpoint)" if during else "")
        )

    @contextlib.contextmanager
    def watching(self, what: str) -> Iterator[None]:
        """For work that submits its own tasks to the cluster and waits on their futures (the
        distributed ingest), as the passes of map, map_reduce and imap_unordered are watched
        (_Watch): a worker that leaves is a warning (Dask runs its tasks again on the others);
        after worker_timeout seconds without any worker, the client's futures are cancelled and
        the wait ends in StreamfitError (no workers) instead of hanging; a task whose workers kept
        dying (Dask's KilledWorker) is a StreamfitError naming `what`; a lost scheduler (the
        client not connected when the wait fails) is the StreamfitError naming it and the fix
        (`_scheduler_lost`), even if the client reconnects: the work's futures died with it, and
        unlike a pass it is not run again. Nothing in process."""
        from distributed import Future, KilledWorker

        client = self.client
        if client is None:
            yield
            return
        with _Watch(self, lambda: [Future(key, client) for key in list(client.futures)]) as watch:
            try:
                yield
            except (CancelledError, KilledWorker, OSError, RuntimeError) as e:
                if not isinstance(e, (CancelledError, KilledWorker)) and self._connected():
                    raise  # a task's own error, or a path's
                if watch.no_workers_for is not None:
                    raise self._no_workers(watch.no_workers_for, during=True) from e
                if not self._connected():  # the work's futures are lost, even if the client reconnects
                    raise self._scheduler_lost() from e
                if isinstance(e, KilledWorker):
                    raise StreamfitError(
                        f"{what}: Dask workers died under one of its tasks more often than Dask allows ({e}); "
                        "check the workers (memory, crashes), then re-run"
                    ) from e
                raise

    def _ensure_workers(self, during: bool = True) -> None:
        """Return once the cluster has a worker; StreamfitError after worker_timeout seconds without."""
        assert self.client is not None, "only for a started engine with a cluster"
        if self.client.nthreads():
            return
        try:
            self.client.wait_for_workers(1, timeout=self.worker_timeout)
        except TimeoutError:
            raise self._no_workers(self.worker_timeout, during=during) from None

    def _submit_args(self, kwargs: dict) -> dict:
        """kwargs with the large values scattered to the workers. The caller keeps the result
        until its pass has finished: a scattered value the client lets go of is forgotten once
        its tasks ran, and Dask then cannot recompute a result that died with its worker. A
        scatter that fails because a worker went away raises _WorkerLost (the pass is retried)."""
        from dask.sizeof import sizeof

        sizes = {k: sizeof(v) for k, v in kwargs.items()}
        if not any(n > BROADCAST_BYTES for n in sizes.values()):
            return kwargs
        self._ensure_workers()  # a scatter with no workers would wait forever
        client = self.client
        assert client is not None
        try:
            # a timeout: the scheduler's replication can hang on a worker that died under it; each
            # value one future, tuples and lists too (Client.scatter would scatter their items)
            def scattered(value, size: int):
                timeout = self.worker_timeout + size / 10e6
                return client.scatter([value], broadcast=True, hash=False, timeout=timeout)[0]

            return {k: scattered(v, sizes[k]) if sizes[k] > BROADCAST_BYTES else v for k, v in kwargs.items()}
        except (KeyError, OSError, TimeoutError, CancelledError) as e:
            # a worker removed while the scheduler copies the value to it (KeyError: its address)
            raise _WorkerLost(f"scatter failed: {type(e).__name__}: {e}") from e

    def _lost(self, e: BaseException, watch: _Watch) -> BaseException:
        """The exception to raise for a future that was cancelled or whose workers died."""
        if watch.no_workers_for is not None:
            return self._no_workers(watch.no_workers_for, during=True)
        if watch.replaced:
            return _WorkerLost(f"every worker the pass's tasks were placed on has left; {len(watch.placed)} gone")
        return _WorkerLost(f"{type(e).__name__}: {e}")

    def _result(self, get: Callable, watch: _Watch):
        """get(), with Dask's signs of a lost worker turned into _WorkerLost (a task's own
        exception passes through unchanged)."""
        from distributed import KilledWorker

        try:
            return get()
        except (CancelledError, KilledWorker) as e:
            raise self._lost(e, watch) from e

    def _lost_scheduler(self, error: BaseException) -> bool:
        """Whether the client has lost its scheduler, after `error` came out of the engine's
        block. A comms error can come before the client notices the loss (status still
        "running"): then wait up to COMMS_SETTLE seconds for the status to change."""
        if self.client is None:
            return False
        from distributed.comm import CommClosedError

        if isinstance(error, CommClosedError):
            deadline = time.monotonic() + COMMS_SETTLE
            while self.client.status == "running" and time.monotonic() < deadline:
                time.sleep(0.1)
        return not self._connected()

    def _connected(self) -> bool:
        """Whether the client is connected to its scheduler (True in process)."""
        return self.client is None or self.client.status == "running"

    def _require_scheduler(self) -> None:
        """After a pass's futures were lost: return if the client is (again) connected to its
        scheduler, so that the pass can run again; else StreamfitError naming the scheduler. On
        losing the connection Dask's client cancels every future (reason
        "scheduler-connection-lost") and tries to reconnect for its connect timeout before it
        closes itself; this waits for that outcome (at most RECONNECT_SLACK seconds beyond that timeout)."""
        client = self.client
        if client is None:
            return
        deadline = time.monotonic() + self._client_timeout + RECONNECT_SLACK
        while client.status in ("connecting", "newly-created") and time.monotonic() < deadline:
            time.sleep(0.1)
        if client.status != "running":
            raise self._scheduler_lost()

    def _scheduler_lost(self) -> StreamfitError:
        return StreamfitError(
            f"lost the connection to the Dask scheduler at {self._address()} (it stopped, or the network "
            "failed); start it again, or drop --scheduler to use the embedded local cluster (train: then "
            "re-run with --resume to continue from the last checkpoint)"
        )

    def _pass_lost(self, e: BaseException) -> _WorkerLost:
        """For an exception out of a pass (_WorkerLost, or an OSError or RuntimeError of Dask's
        comms): the _WorkerLost to run the pass again on; `e` raised again when it is a task's own
        error or a path's (the client still connected to its scheduler); StreamfitError when the
        scheduler was lost (_require_scheduler)."""
        if not isinstance(e, _WorkerLost) and self._connected():
            raise e
        self._require_scheduler()
        return e if isinstance(e, _WorkerLost) else _WorkerLost(f"{type(e).__name__}: {e}")

    def _retrying(self, attempt: Callable, desc: str | None):
        """attempt(), run again (from scratch) when a worker died under it; StreamfitError when
        the scheduler was lost (_require_scheduler)."""
        for n in range(1, MAX_ATTEMPTS + 1):
            try:
                return attempt()
            except (_WorkerLost, OSError, RuntimeError) as e:
                err = self._pass_lost(e)
                log.warning(
                    "%s: a Dask worker was lost (%s); %s",
                    desc or "pass",
                    e,
                    f"running the pass again (attempt {n + 1} of {MAX_ATTEMPTS})" if n < MAX_ATTEMPTS else "giving up",
                )
        raise self._gave_up(desc, err) from err

    def _gave_up(self, desc: str | None, err: _WorkerLost) -> StreamfitError:
        return StreamfitError(
            f"{desc or 'a pass'}: a Dask worker was lost and the pass failed {MAX_ATTEMPTS} times ({err}); "
            "check the workers (memory, crashes), then re-run with --resume to continue from the last checkpoint"
        )

    def _drain(
        self, pending, bar, watch: _Watch, chunks_of: dict[Any, int] | None = None, sigterm: str | None = None
    ) -> None:
        """Wait for every future of `pending` (a distributed.as_completed, which lets go of each
        future it has yielded), advancing the bar (by `chunks_of[key]`, default 1); raise at the
        first failed one, and (with `sigterm`, see stopping_on_sigterm) Terminated after a SIGTERM."""
        for f in pending if sigterm is None else _until_sigterm(pending, sigterm):
            bar.update(1 if chunks_of is None else chunks_of[f.key])
            if f.status != "finished":
                self._result(f.result, watch)

    def map(self, fn: Callable, source, chunk_ids, desc: str | None = None, **kwargs) -> list:
        """[fn(source, i, **kwargs) for i in chunk_ids], in chunk order."""
        chunk_ids = list(chunk_ids)
        if self.client is None:
            self.start()
        self._require_shared_args(source, *kwargs.values())
        if self.client is None:
            with self._bar(len(chunk_ids), desc) as bar:
                out = []
                for i in chunk_ids:
                    out.append(fn(source, i, **kwargs))
                    bar.update()
                return out

        from distributed import as_completed

        def attempt():
            args = self._submit_args(kwargs)  # held until the results are back
            client = self.client
            assert client is not None, "a started engine with a cluster"
            home = chunk_workers(client.nthreads(), max(chunk_ids, default=-1) + 1)
            graph = _PassGraph(args)
            futures = graph.submit(client, [graph.chunk_task(fn, source, [i], home) for i in chunk_ids])
            with self._bar(len(chunk_ids), desc) as bar, _Watch(self, futures.copy, graph.placed) as watch:
                self._drain(as_completed(futures), bar, watch)
                return self._result(lambda: client.gather(futures), watch)

        return self._retrying(attempt, desc)

    @contextlib.contextmanager
    def stopping_on_sigterm(self, message: str):
        """Within: a SIGTERM (streamfit.shutdown) stops a map_reduce pass with Terminated(message)
        between chunks in process, and on a cluster within SIGTERM_POLL seconds (its tasks are
        cancelled as the engine closes): for a pass that is the whole command (evaluate).
        Outside, a pass runs to its end (the solver driver stops between steps, after a checkpoint)."""
        self._sigterm = message
        try:
            yield self
        finally:
            self._sigterm = None

    def map_reduce(self, fn: Callable, source, chunk_ids, desc: str | None = None, **kwargs) -> Any:
        """The sum over chunks of fn(source, i, **kwargs), along the fixed tree (tree_sum); see
        stopping_on_sigterm."""
        sigterm = self._sigterm
        chunk_ids = list(chunk_ids)
        if not chunk_ids:
            raise ValueError("map_reduce over no chunks")
        if self.client is None:
            self.start()
        self._require_shared_args(source, *kwargs.values())
        if self.client is None:
            return self._reduce_inprocess(fn, source, chunk_ids, desc, sigterm, kwargs)

        from distributed import as_completed

        def attempt():
            args = self._submit_args(kwargs)  # held until the sum is back
            client = self.client
            assert client is not None, "a started engine with a cluster"
            nthreads = client.nthreads()  # the workers now (a retry: those left)
            group = leaf_chunks(len(chunk_ids), sum(nthreads.values()))
            home = chunk_workers(nthreads, max(chunk_ids) + 1)
            graph = _PassGraph(args)
            chunks_of: dict[str, int] = {}  # chunks summed by each chunk task, by its key

            def leaf(ids: list) -> str:
                key = graph.chunk_task(fn, source, ids, home)
                chunks_of[key] = len(ids)
                return key

            root = sum_tree(chunk_ids, group, leaf, graph.add_task, SUM_LEVELS)
            with self._bar(len(chunk_ids), desc) as bar:
                # the chunk tasks' futures only for a bar that counts them or a SIGTERM check
                # between them: a future the client holds costs the scheduler a message when its
                # task ends and another when the client lets go of it; without them, each chunk
                # result is freed as soon as the sum above it has consumed it (Dask keeps the
                # recipes, and the scattered arguments, to recompute any that a lost worker held)
                total, *chunk_futures = graph.submit(
                    client, [root, *chunks_of] if bar is not _NO_BAR or sigterm else [root]
                )
                pending = as_completed(chunk_futures)  # lets go of each future once yielded
                chunk_futures.clear()
                with _Watch(self, lambda: [total], graph.placed) as watch:
                    self._drain(pending, bar, watch, chunks_of, sigterm)
                    return self._result(total.result, watch)

        return self._retrying(attempt, desc)

    def imap_unordered(self, fn: Callable, items, desc: str | None = None, **kwargs) -> Unordered:
        """(item, fn(item, **kwargs)) for every item, as the tasks finish (in process: in order),
        as an `Unordered` iterator. Tasks are submitted in the order of `items`, the first with the
        highest priority. When a worker is lost under them, the items not yet yielded are submitted
        again (their large arguments scattered anew), up to MAX_ATTEMPTS times. Closing the
        iterator cancels the tasks still pending."""
        items = list(items)
        if self.client is None:
            self.start()
        self._require_shared_args(*kwargs.values())
        if self.client is None:
            return Unordered(self._unordered_inprocess(fn, items, desc, kwargs), lambda: False)
        in_flight: list = []  # the distributed.as_completed of the tasks not yielded yet
        return Unordered(
            self._unordered_dask(fn, items, desc, kwargs, in_flight),
            lambda: bool(in_flight) and in_flight[0].has_ready(),
        )

    def _unordered_inprocess(self, fn: Callable, items: list, desc: str | None, kwargs: dict):
        with self._bar(len(items), desc, "task") as bar:
            for item in items:
                yield item, fn(item, **kwargs)
                bar.update()

    def _unordered_dask(self, fn: Callable, items: list, desc: str | None, kwargs: dict, in_flight: list):
        from dask.utils import funcname
        from distributed import as_completed

        name = funcname(fn)  # the tasks' keys: Dask's dashboard groups them by it

        assert self.client is not None, "a started engine with a cluster"
        left = dict.fromkeys(range(len(items)))  # positions not yielded yet, in submission order
        with self._bar(len(items), desc, "task") as bar:
            for n in range(1, MAX_ATTEMPTS + 1):
                futures = {}
                try:
                    args = self._submit_args(kwargs)  # held until the tasks are done
                    futures = {
                        self.client.submit(
                            on_worker.call,
                            fn,
                            items[i],
                            key=f"{name}-{uuid.uuid4().hex}",
                            priority=len(left) - r,
                            **args,
                        ): i
                        for r, i in enumerate(left)
                    }
                    with _Watch(self, futures.keys) as watch:  # the tasks not yielded yet
                        in_flight[:] = [as_completed(list(futures))]
                        for f in in_flight[0]:
                            result = self._result(f.result, watch)
                            i = futures.pop(f)
                            del left[i]
                            bar.update()
                            yield items[i], result
                    return
                except (_WorkerLost, OSError, RuntimeError) as e:
                    err = self._pass_lost(e)
                    log.warning(
                        "%s: a Dask worker was lost (%s); %s",
                        desc or "tasks",
                        e,
                        f"submitting the {len(left)} unfinished tasks again (attempt {n + 1} of {MAX_ATTEMPTS})"
                        if n < MAX_ATTEMPTS
                        else "giving up",
                    )
                finally:
                    in_flight.clear()
                    if futures and self._connected():  # closed early, or failed (a lost scheduler forgot them)
                        self.client.cancel(list(futures))
        raise self._gave_up(desc, err) from err

    def _reduce_inprocess(
        self, fn: Callable, source, chunk_ids, desc: str | None, sigterm: str | None, kwargs: dict
    ) -> Any:
        with self._bar(len(chunk_ids), desc) as bar:

            def counted(source, i, **kw):
                if sigterm is not None:
                    shutdown.check(sigterm)
                out = fn(source, i, **kw)
                bar.update()
                return out

            return fold_chunks(counted, source, chunk_ids, **kwargs)


class Unordered:
    """Results of independent tasks as they finish (Engine.imap_unordered): an iterator of
    (item, result) pairs; `ready()` tells whether the next pair is already there, so that the
    caller can put off slow work (a checkpoint) while results wait; `close()` cancels the tasks
    not started."""

    def __init__(self, pairs: Generator, ready: Callable[[], bool]):
        self._pairs = pairs
        self._ready = ready

    def __iter__(self) -> Unordered:
        return self

    def __next__(self):
        return next(self._pairs)

    def ready(self) -> bool:
        return self._ready()

    def close(self) -> None:
        self._pairs.close()


class _Watch:
    """While a pass runs: every WATCH_INTERVAL seconds, asks the scheduler which workers it
    has. A worker that left (during the pass, or found gone at its end: Dask may recover a short
    pass before the next look) is logged as a warning; Dask runs its tasks again on the others,
    and a pass it could not recover is _WorkerLost, retried. After `engine.worker_timeout`
    seconds without any worker, records it and cancels the pass's pending futures
    (`futures()`), so that the waiting thread wakes up and reports it instead of hanging.

    `placed`: the workers the pass's tasks asked for (`_PassGraph.placed`). Once every one of
    them has left and others are there, the pass's futures are cancelled too (`replaced`), and
    the pass is _WorkerLost, run again on the workers there now: a task that asked for workers
    which all left while the cluster had none waits in Dask's "no-worker" state, and Dask
    (2026.7) does not give it to a worker that joins later, although the task allows others
    (`Scheduler.bulk_schedule_unrunnable_after_adding_worker` checks the restriction alone):
    the pass would wait forever."""

    def __init__(self, engine: Engine, futures: Callable[[], Iterable], placed: Iterable[str] = ()):
        self.engine = engine
        self.futures = futures
        self.placed = set(placed)
        self.no_workers_for: float | None = None
        self.replaced = False
        self._workers: set[str] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="streamfit-worker-watch", daemon=True)

    def __enter__(self) -> _Watch:
        known = self.engine._workers_at_last_pass
        if known is not None:  # a worker gone since the last pass (e.g. restarted by its nanny: a new address)
            self._workers = known
            self._look("since the last pass; this pass runs on the {left} worker(s) there now")
        else:
            self._workers = self._look() or set()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self._look()

    def _look(self, when: str = "during a pass; its tasks run again on the {left} worker(s) left") -> set[str] | None:
        """The workers now, with a warning for each one that left since the last look (`when`
        ends the message); None when the scheduler cannot be asked (it is gone: the waiting
        thread hears of it)."""
        client = self.engine.client
        assert client is not None, "a pass on a cluster starts the watch"
        try:
            now = set(client.nthreads())
        except Exception:
            return None
        for gone in sorted(self._workers - now - self.engine._refused):
            if now:
                log.warning("the Dask worker %s left the cluster %s", gone, when.format(left=len(now)))
            else:
                log.warning(
                    "the Dask worker %s left the cluster, and no worker is left; waiting up to %g s "
                    "(--worker-timeout) for one to join",
                    gone,
                    self.engine.worker_timeout,
                )
        self._workers = now
        self.engine._workers_at_last_pass = now
        return now

    def _run(self) -> None:
        since: float | None = None
        while not self._stop.wait(WATCH_INTERVAL):
            workers = self._look()
            if workers is None:
                return
            if workers and self.placed and not workers & self.placed:
                self.replaced = True
                self._cancel("every worker its tasks were placed on has left")
                return
            if workers:
                since = None
                continue
            now = time.monotonic()
            since = now if since is None else since
            if now - since >= self.engine.worker_timeout:
                self.no_workers_for = now - since
                self._cancel("the cluster has no workers")
                return

    def _cancel(self, reason: str) -> None:
        """Cancel the pass's pending futures: the waiting thread wakes up (CancelledError)."""
        try:
            assert self.engine.client is not None
            self.engine.client.cancel(list(self.futures()), reason=reason)
        except Exception:
            pass
