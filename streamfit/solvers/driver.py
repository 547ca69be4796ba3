"""The one loop every solver runs in: steps, checkpoints, time limit, resume, metrics, warning.

    check_source(source)                                (refuse a store the solver cannot train on)
    state = restore(LATEST) if resume else init()      (init is checkpointed as step 0)
    while not finished(state):
        if SIGTERM asked to stop (streamfit.shutdown): save the state if the last step taken is
                      not saved, and raise Terminated
        fields = step(state)                            (state.step += 1)
        log the step (validation every `valid_every` steps, and on the last one; on the
                      last one only for a solver whose mid_run_models is False), and show
                      it (progress: step of max_steps, elapsed, ETA)
        checkpoint (the metrics log's lines synced first: MetricsLog.sync) at a step that is due
                      (`checkpoint_due`: every `checkpoint_every` steps) once
                      `checkpoint_interval` has passed since the last save (TimedSchedule;
                      "auto": 9 x the last save's duration), and always on the last step,
                      before a pause and at the first step that ends past the time limit,
                      due or not (as SIGTERM saves the step it stops at);
        past the time limit, stop right after that checkpoint (TimeLimitReached): the time
                      limit is overshot by at most one step and one save (bcd's chunks mode:
                      one group's pass, not the rest of its outer iteration)
    warn if the run ended at its budget before its stopping test held
    return to_model(state)

A checkpoint holds the state dataclass field by field (see streamfit.solvers.base for the
kinds), with the schema {field: kind}; a resume refuses a checkpoint whose schema differs from
the solver's State, or whose values have the wrong type, naming the field.

Without a checkpointer (`checkpointer=None`: the estimators on in-memory arrays, which never
resume) there are no checkpoints at all: per-sample state lives in an in-memory ChunkState, the
versions the state no longer refers to are dropped after each step, and nothing is copied or
written. The state goes through the same steps, and its append-only entries are given the same
C-ordered layout a checkpoint gives them, so the model is bitwise the one a checkpointed run ends with.

Where the checkpoints fall never changes the model: entries get their layout after every step,
saved or not, and a resumed run replays the steps since its checkpoint bitwise.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
import time
import typing
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from streamfit import shutdown
from streamfit.checkpoint import ChunkState
from streamfit.errors import CheckpointError, Terminated, TimeLimitReached
from streamfit.schedule import TimedSchedule
from streamfit.solvers.base import Context, PerSample, Solver, SolverState, class_rows

log = logging.getLogger(__name__)

ARRAY, ARRAY_LIST, PER_SAMPLE, VALUE = "array", "array_list", "per_sample", "value"
MAX_WRITE_THREADS = 8  # per-sample files a checkpoint writes at once (_StateSaver._write_entries)


def run(
    solver: Solver,
    source,
    *,
    engine,
    checkpointer,
    metrics: Any,
    resume: bool = False,
    stop_after: int | None = None,
    checkpoint_every: int = 1,
    checkpoint_interval: float | str = "auto",
    log_not_converged: bool | Callable[[str], None] = True,
    valid=None,
):
    """Fit `solver` on `source` (a ChunkSource) with tasks on `engine`, saving through
    `checkpointer` (streamfit.checkpoint.Checkpointer; None: no checkpoints, see the module
    docstring) and logging each step to `metrics` (streamfit.runlog.MetricsLog). resume:
    continue from the newest checkpoint, if any. stop_after: return the current model after that
    many steps in this call (a later call with resume=True continues; for time-boxed jobs and
    tests). checkpoint_every: a step is due for a checkpoint every k steps (Solver.checkpoint_due);
    checkpoint_interval: seconds, or "auto" (streamfit.schedule.TimedSchedule): a due step is saved once that long
    has passed since the last save. Always saved: init (step 0), the last step of the call, and
    the first step that ends past the checkpointer's time limit, due or not (after which
    TimeLimitReached is raised).
    log_not_converged: a run that ends before its stopping test held logs a warning naming the
    test that failed (the CLI's report; the model says so too, info["converged"]); a callable
    is given that test's words instead of the log (the estimators, which issue a
    ConvergenceWarning with them: one report of it in each channel); False: neither. valid: the
    validation store the solver reads (Context.valid; Solver.reads_valid), else None."""
    if checkpoint_every < 1:
        raise ValueError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    schedule = TimedSchedule(checkpoint_interval, "checkpoint_interval")
    if resume and checkpointer is None:
        raise ValueError("resume needs a checkpointer to resume from")
    solver.check_source(source)
    chunk_state = ChunkState(None) if checkpointer is None else checkpointer.state
    chunk_state.begin_run()  # arrays cached by an earlier run through this object are not read back
    rows = class_rows(source, engine)
    ctx = Context(source=source, engine=engine, chunk_state=chunk_state, valid=valid, class_rows=rows)
    without_rows = [] if rows is None else [source.classes[k] for k in np.flatnonzero(rows == 0)]

    def to_model(state: SolverState):
        """The solver's model of `state`, which ranks the classes without training rows last."""
        model = solver.to_model(ctx, state)
        model.set_classes_without_rows(without_rows)
        return model

    saver = _StateSaver(solver.State, checkpointer)
    sync_metrics = getattr(metrics, "sync", None)  # MetricsLog: its lines, unsynced, are made durable by each save

    def save(state: SolverState) -> None:
        started = time.monotonic()
        if sync_metrics is not None and checkpointer is not None:
            sync_metrics()  # the lines of the steps this checkpoint holds, on disk before it counts them
        saver.save(state)
        schedule.took(started, time.monotonic())

    state = None
    if resume:
        ckpt = checkpointer.latest(source.n_chunks)
        if ckpt is not None:
            state = saver.restore(ckpt, solver.name)
            solver.check_resume(ctx, state)
            metrics.truncate_after(ckpt.step)
    if state is None:
        chunk_state.keep_only(set())  # a fresh run: drop per-sample state left in the run directory
        state = solver.init(ctx)
        save(state)
        _check_deadline(checkpointer, state.step)
    saved_at = state.step  # the step of the newest checkpoint
    taken = 0
    metrics.begin(solver.name, state.step, solver.max_steps(state))
    try:
        while not solver.finished(state):
            if shutdown.stop_requested():  # between steps: no task of ours is running
                if checkpointer is None:
                    raise Terminated(f"{solver.name} at step {state.step}, without checkpoints")
                if saved_at != state.step:
                    save(state)
                raise Terminated(
                    f"{checkpointer.run_dir}: checkpoint of step {state.step} saved; the same command plus "
                    "--resume continues"
                )
            fields = solver.step(ctx, state)
            saver.lay_out(state)
            taken += 1
            last = solver.finished(state)
            model = (lambda: to_model(state)) if last or solver.mid_run_models else None
            metrics.log(state.step, model=model, final=last, planned=solver.max_steps(state), **fields)
            pause = stop_after is not None and taken >= stop_after
            if checkpointer is None:  # only the state's per-sample versions stay
                chunk_state.keep_only(saver.references(state))
            elif (
                last
                or pause
                or checkpointer.past_deadline()  # any step: its state is complete, as SIGTERM's save
                or (solver.checkpoint_due(state, checkpoint_every, saved_at) and schedule.waited(time.monotonic()))
            ):
                save(state)
                saved_at = state.step
                _check_deadline(checkpointer, state.step)
            else:  # per-sample versions that neither a kept checkpoint nor the state refers to
                checkpointer.state.keep_only(checkpointer.referenced_versions() | saver.references(state))
            if pause:
                break
    finally:
        metrics.end()
        if checkpointer is not None:
            log.debug("%s: %d checkpoints in %.3f s", solver.name, schedule.count, schedule.seconds)
    if log_not_converged is not False and solver.finished(state) and not solver.converged(state):
        reason = solver.not_converged_reason(state)
        if callable(log_not_converged):
            log_not_converged(reason)
        else:
            log.warning(
                "%s: not converged after %d steps: %s; raise -p max_iter or loosen -p tol",
                solver.name,
                state.step,
                reason,
            )
    return to_model(state)


def _check_deadline(checkpointer, step: int) -> None:
    if checkpointer is not None and checkpointer.past_deadline():
        raise TimeLimitReached(checkpointer.run_dir, step, checkpointer.time_limit)


_TYPE_HINTS: dict[type, dict[str, Any]] = {}


def _type_hints(state_cls: type[SolverState]) -> dict[str, Any]:
    """The resolved annotations of a state dataclass, resolved once per class (it costs about a
    millisecond, which a small in-memory fit felt twice per fit)."""
    hints = _TYPE_HINTS.get(state_cls)
    if hints is None:
        hints = _TYPE_HINTS[state_cls] = typing.get_type_hints(state_cls)
    return hints


_FIELD_KINDS: dict[type, dict[str, str]] = {}


def field_kinds(state_cls: type[SolverState]) -> dict[str, str]:
    """{field: kind} of a state dataclass, from its annotations (the checkpoint's schema);
    worked out once per class (a copy is returned)."""
    kinds = _FIELD_KINDS.get(state_cls)
    if kinds is None:
        kinds = _FIELD_KINDS[state_cls] = _field_kinds(state_cls)
    return dict(kinds)


def _field_kinds(state_cls: type[SolverState]) -> dict[str, str]:
    hints = _type_hints(state_cls)
    kinds = {}
    for f in dataclasses.fields(state_cls):
        t = hints[f.name]
        args = [a for a in typing.get_args(t) if a is not type(None)] if _is_union(t) else [t]
        base = args[0] if len(args) == 1 else t
        if base is np.ndarray:
            kinds[f.name] = ARRAY
        elif typing.get_origin(base) is list and typing.get_args(base) == (np.ndarray,):
            kinds[f.name] = ARRAY_LIST
        elif base is PerSample:
            kinds[f.name] = PER_SAMPLE
        else:
            kinds[f.name] = VALUE
    return kinds


def _is_union(t) -> bool:
    import types

    return typing.get_origin(t) is typing.Union or isinstance(t, types.UnionType)


class _StateSaver:
    """State dataclass ⇄ checkpoint (meta, arrays, per-sample versions). Append-only lists are
    written to the per-sample store under the field's name, version 0, entry i as "chunk" i;
    each entry once, by the first save that holds it. `lay_out` gives new entries the layout
    they are stored in (after every step, saved or not); with checkpointer None, that is all
    `save` does."""

    def __init__(self, state_cls: type[SolverState], checkpointer):
        self.state_cls = state_cls
        self.kinds = field_kinds(state_cls)
        self.hints = _type_hints(state_cls)
        self.checkpointer = checkpointer
        self.lists = [name for name, kind in self.kinds.items() if kind == ARRAY_LIST]
        self.per_sample = [name for name, kind in self.kinds.items() if kind == PER_SAMPLE]
        self.laid_out: dict[str, int] = {}  # entries of each append-only list given their layout
        self.written: dict[str, int] = {}  # entries of each append-only list stored

    def references(self, state: SolverState) -> set[tuple[str, int]]:
        """The per-sample (name, version) pairs that `state` refers to."""
        refs = {(name, 0) for name in self.lists}
        for name in self.per_sample:
            value = getattr(state, name)
            if value is not None and value.written:
                refs.add((value.name, value.version))
        return refs

    def lay_out(self, state: SolverState) -> None:
        """Gives the entries appended to the lists since the last call the C-ordered layout they
        are stored in, so that sums over the entries run in the same order in this run as in one
        resumed from a checkpoint (or in one without checkpoints), wherever the saves fell."""
        for name in self.lists:
            value = getattr(state, name)
            for i in range(self.laid_out.get(name, 0), len(value)):
                value[i] = np.ascontiguousarray(value[i])
            self.laid_out[name] = len(value)

    def _new_entries(self, state: SolverState) -> list[tuple[str, int, np.ndarray]]:
        """(field, index, entry) of the entries appended to the lists since the last save."""
        return [
            (name, i, getattr(state, name)[i])
            for name in self.lists
            for i in range(self.written.get(name, 0), len(getattr(state, name)))
        ]

    def save(self, state: SolverState) -> None:
        self.lay_out(state)
        if self.checkpointer is None:
            return
        entries = self._new_entries(state)
        values, arrays, per_sample = {}, {}, {}
        versions: dict[str, int] = {}
        counts: dict[str, int] = {}
        written: dict[str, int] = {}  # self.written once they are on disk
        in_memory = self.checkpointer.root is None
        for name, kind in self.kinds.items():
            value = getattr(state, name)
            if kind == ARRAY:
                if value is not None:
                    arrays[name] = np.array(value, copy=True) if in_memory else np.asarray(value)
            elif kind == ARRAY_LIST:
                written[name] = len(value)
                if value:
                    versions[name], counts[name] = 0, len(value)
                values[name] = len(value)
            elif kind == PER_SAMPLE:
                per_sample[name] = None if value is None else dataclasses.asdict(value)
                if value is not None and value.written:
                    if versions.get(value.name, value.version) != value.version:
                        raise ValueError(f"{name}: two fields hold versions of per-sample array {value.name!r}")
                    versions[value.name] = value.version
            else:
                values[name] = copy.deepcopy(value) if in_memory else value
        self._write_entries(entries)
        self.written.update(written)
        meta = {"schema": self.kinds, "values": values, "per_sample": per_sample}
        self.checkpointer.save(state.step, meta, arrays, versions, state_counts=counts)

    def _write_entries(self, entries: list[tuple[str, int, np.ndarray]]) -> None:
        """Writes the list entries to the per-sample store before the checkpoint that counts
        them, which syncs them (ChunkState.sync) with its other new state files. Several at once
        from threads (hashing and writing release the GIL). Not kept for reads (`cache=False`):
        only a resume reads them, through a new run."""
        state = self.checkpointer.state
        if len(entries) <= 1 or self.checkpointer.root is None:  # in memory: nothing to overlap
            for name, i, array in entries:
                state.write(name, 0, i, array, cache=False)
            return
        with ThreadPoolExecutor(min(len(entries), MAX_WRITE_THREADS)) as pool:
            futures = [pool.submit(state.write, name, 0, i, array, cache=False) for name, i, array in entries]
            for f in futures:
                f.result()  # an OutputError of any write is raised here

    def restore(self, ckpt, solver_name: str) -> SolverState:
        where = self.checkpointer.describe(ckpt.step)
        meta = ckpt.meta
        in_memory = self.checkpointer.root is None
        schema = meta.get("schema") if isinstance(meta, dict) else None
        if schema != self.kinds:
            raise CheckpointError(
                f"{where}: holds {solver_name} state of another layout ({_schema_diff(schema, self.kinds)}); "
                "it was written by another streamfit version: start over with --overwrite"
            )
        kwargs: dict[str, Any] = {}
        for name, kind in self.kinds.items():
            if kind == ARRAY:
                kwargs[name] = ckpt.arrays.get(name)
                if in_memory and kwargs[name] is not None:  # the checkpoint's arrays stay as saved
                    kwargs[name] = kwargs[name].copy()
                if kwargs[name] is None and not _optional(self.hints[name]):
                    raise CheckpointError(
                        f"{where}: arrays.npz lacks the state field {name!r}; the checkpoint is damaged"
                    )
            elif kind == ARRAY_LIST:
                count = meta["values"].get(name)
                if not isinstance(count, int) or count < 0:
                    raise CheckpointError(
                        f"{where}: meta.json's values.{name} is not a count; the checkpoint is damaged"
                    )
                entries = [self.checkpointer.state.read(name, 0, i) for i in range(count)]
                kwargs[name] = [e.copy() for e in entries] if in_memory else entries
                self.written[name] = self.laid_out[name] = count
            elif kind == PER_SAMPLE:
                record = meta["per_sample"].get(name)
                kwargs[name] = None if record is None else PerSample(**record)
            else:
                if name not in meta["values"]:
                    raise CheckpointError(
                        f"{where}: meta.json lacks the state field {name!r}; the checkpoint is damaged"
                    )
                value = _typed(meta["values"][name], self.hints[name], f"{where}: meta.json's values.{name}")
                kwargs[name] = copy.deepcopy(value) if in_memory else value
        state = self.state_cls(**kwargs)
        if state.step != ckpt.step:
            raise CheckpointError(
                f"{where}: holds the state of step {state.step}, not {ckpt.step}; the checkpoint is damaged"
            )
        return state


def _optional(t) -> bool:
    return _is_union(t) and type(None) in typing.get_args(t)


def _typed(value, t, where: str):
    """A JSON value as the field's type: tuples back from lists; scalars checked."""
    if value is None and (t is type(None) or _optional(t)):
        return None
    base = t
    if _is_union(t):
        options = [a for a in typing.get_args(t) if a is not type(None)]
        base = options[0] if len(options) == 1 else None
    if base is None or base is Any:
        return value
    origin = typing.get_origin(base) or base
    if origin is tuple and isinstance(value, list):
        return tuple(value)
    expected = {
        bool: (bool,),
        int: (int,),
        float: (int, float),
        str: (str,),
        list: (list,),
        dict: (dict,),
        tuple: (list, tuple),
    }.get(origin)
    if expected is not None and (
        not isinstance(value, expected) or (origin in (int, float) and isinstance(value, bool))
    ):
        raise CheckpointError(f"{where} is {value!r}, not a {origin.__name__}; the checkpoint is damaged")
    return float(value) if origin is float else value


def _schema_diff(then, now: dict) -> str:
    if not isinstance(then, dict):
        return "no state schema"
    parts = [
        f"{k}: {then.get(k, 'absent')} then, {now.get(k, 'absent')} now"
        for k in sorted(then.keys() | now.keys())
        if then.get(k) != now.get(k)
    ]
    return "; ".join(parts)
