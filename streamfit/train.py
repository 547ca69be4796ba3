"""`streamfit train`: one solver over one store, on an engine, into a run directory.

RUN_DIR/model/         the trained model (streamfit.load_model)
RUN_DIR/checkpoints/   resumable solver state (streamfit.checkpoint)
RUN_DIR/metrics.jsonl  one JSON line per solver step (with `valid`: the validation metrics too)
RUN_DIR/run.json       what was run: solver, parameters, store, engine, timings, and its status:
                       "finished", "stopped at the time limit" or "stopped by SIGTERM" (or
                       SIGHUP: streamfit.shutdown.STOP_SIGNALS; no model/ then; --resume
                       continues from the checkpoint `step`)
"""

from __future__ import annotations

import contextlib
import difflib
import fcntl
import json
import logging
import os
import time
from typing import TYPE_CHECKING

from streamfit import shutdown, storage
from streamfit.checkpoint import STATE_CACHE_BYTES, Checkpointer
from streamfit.config import EVALUATION_FILE, parse_checkpoint_interval, parse_valid_every, refuse_resume_with_overwrite
from streamfit.engine import DASHBOARD_ADDRESS, WORKER_TIMEOUT, Engine, auto_choice
from streamfit.errors import ConfigError, OutputError, StreamfitError, Terminated, TimeLimitReached
from streamfit.metrics import fit_threshold
from streamfit.model import ALL_ZERO_WEIGHTS, Model, all_weights_zero, featurization_differences
from streamfit.precompile import announce_compilation
from streamfit.runlog import DEFAULT_VALID_EVERY, MetricsLog, RunProgress, progress_mode, summary
from streamfit.solvers import get_solver
from streamfit.solvers.base import Solver, allowed_values, available_memory, check_state_memory
from streamfit.store import open_store
from streamfit.store.store import read_lock

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

    from streamfit.lease import Lease

log = logging.getLogger(__name__)


def make_params(solver_name: str, params: dict | None):
    """Validated solver parameters; a bad key or value raises ConfigError naming it."""
    from pydantic import ValidationError

    cls = get_solver(solver_name)
    try:
        return cls.Params(**(params or {}))
    except ValidationError as e:
        by_key: dict[object, list] = {}
        for err in e.errors():
            by_key.setdefault(err["loc"][0] if err["loc"] else "", []).append(err)
        fields = cls.Params.model_fields
        problems = "; ".join(
            # a value that fits none of a union's types (bool | "auto", float | None): one line, what is allowed
            f"{key}: {errs[0]['msg']} ({errs[0]['input']!r}; allowed: {allowed_values(fields[key])})"
            if len(errs) > 1 and key in fields
            else "; ".join(_param_problem(err, list(fields)) for err in errs)
            for key, errs in by_key.items()
        )
        known = ", ".join(cls.Params.model_fields)
        raise ConfigError(f"solver {solver_name!r} parameters: {problems} (its parameters: {known})") from None


def _param_problem(err: ErrorDetails, known: list[str]) -> str:
    """One validation error as 'key: message', with the closest parameter name for an unknown key
    and a word on None where None was given."""
    key = ".".join(map(str, err["loc"])) or "(params)"
    close = difflib.get_close_matches(key, known, n=1) if err["type"] == "extra_forbidden" else []
    hint = (
        f" (did you mean {close[0]}?)"
        if close
        else " (None is not allowed here)"
        if err.get("input", 0) is None
        else ""
    )
    return f"{key}: {err['msg']}{hint}"


def train(
    store_path: str,
    solver: str,
    out: str,
    params: dict | None = None,
    *,
    scheduler: str | None = None,
    n_workers: int | None = None,
    threads_per_worker: int = 1,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    valid: str | None = None,
    valid_every: int | str = DEFAULT_VALID_EVERY,
    time_limit: float | None = None,
    worker_timeout: float = WORKER_TIMEOUT,
    checkpoint_every: int = 1,
    checkpoint_interval: float | str = "auto",
    dashboard_address: str = DASHBOARD_ADDRESS,
    threshold: float | str | None = None,
) -> Model:
    """Fit `solver` on the store and write RUN_DIR (`out`). `threshold` (multilabel stores): the
    model's decision threshold (streamfit.model.decide), or "fit": the one of the best micro-F1
    on `valid` (streamfit.metrics.fit_threshold); None: the model kind's default. `time_limit` (seconds): stop at the
    first checkpoint after it, raising TimeLimitReached; the same call with resume=True continues.
    `worker_timeout`: seconds the Dask cluster may have no workers before the run fails.
    `checkpoint_every`: a checkpoint is due every that many solver steps; `checkpoint_interval`:
    seconds, or "auto" (9x the last save's duration), that must pass after a save before a due
    step is saved (streamfit.schedule.TimedSchedule). A kill loses the steps since the last save.
    `valid_every`: which steps are scored on `valid` (streamfit.runlog.MetricsLog): "auto", a step
    once 9x the last validation's duration has passed (at most 1/10 of the run; the first step
    too), or every N steps; the last step always.
    `progress`: show the run's steps (streamfit.runlog.RunProgress: one bar when stderr is a
    terminal, a log line per step otherwise). `dashboard_address`: HOST:PORT of the embedded
    cluster's Dask dashboard (its URL is logged at the start).

    Everything that can be checked without the data (parameters, the store against the solver)
    is checked before the run directory is made or a cluster starts; a run that fails before its
    first checkpoint removes what it wrote (and the directory, if it made it), and so does an
    error after init's step-0 checkpoint, unless it is a stop (SIGTERM, Ctrl-C, time limit) or a
    failed write (disk full), which --resume continues."""
    store = open_store(store_path)
    valid_store = open_store(valid) if valid else None
    if valid_store is not None and (valid_store.classes != store.classes or valid_store.n_features != store.n_features):
        raise StreamfitError(
            f"{valid}: its classes or width differ from the training store's; ingest it with --like {store.path}"
        )
    if valid_store is not None:
        differences = featurization_differences(
            valid_store.featurizer_dict(), lambda: valid_store.idf, store.featurizer_dict(), store.idf
        )
        if differences:
            raise StreamfitError(
                f"{valid}: its rows were not made as the training store's ({'; '.join(differences)}); "
                f"ingest it with --like {store.path}"
            )
    if store.n_rows == 0:
        raise StreamfitError(f"{store.path}: holds no rows; ingest data with at least one row per class")
    if valid_store is not None and valid_store.n_rows == 0:
        raise StreamfitError(
            f"{valid}: the --valid store holds no rows, so nothing can be validated; ingest rows into it"
        )
    if store.regression and solver != "stagewise":
        raise ConfigError(
            f"{store.path}: holds real-valued targets (regression), which only --solver stagewise fits; the "
            f"{solver} solver fits class labels"
        )
    if store.n_classes < 2 and not store.multilabel and not store.regression:
        raise StreamfitError(
            f"{store.path}: holds one class ({store.classes[0] if store.classes else 'none'}); a "
            "classifier needs two or more: check the labels (--label-field, the class folders) "
            "and re-ingest"
        )
    p = make_params(solver, params)
    get_solver(solver)(p).check_source(store)
    if threshold is not None and not store.multilabel:
        kind = "a regression store" if store.regression else "multiclass"
        raise ConfigError(f"--threshold {threshold}: applies to multilabel stores, {store.path} is {kind}; drop it")
    if threshold == "fit" and valid_store is None:
        raise ConfigError("--threshold fit: needs a validation store to fit on; pass --valid STORE (ingested --like)")
    if checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    checkpoint_interval = parse_checkpoint_interval(checkpoint_interval, "checkpoint_interval")
    valid_every = parse_valid_every(valid_every, "valid_every")
    run = storage.resolve(out)
    out = run.path if run.local else run.url
    refuse_resume_with_overwrite(resume, overwrite)
    made = not run.exists()
    run.makedirs()
    # one train at a time per run directory, for the whole run (--resume too): a flock on local
    # disk, a lease behind a URL (streamfit.lease), taken before anything is written there
    lock = _lock_run_dir(out) if run.local else None
    held = None
    if not run.local:
        from streamfit import lease

        held = lease.take(run, "run directory")
    try:  # the stores stay as they are while they are read: an ingest --overwrite of one is refused (read_lock)
        reading = [fd for s in (store, valid_store) if s is not None and (fd := read_lock(s.path)) is not None]
    except BaseException:
        _unlock_run_dir(lock, held)
        _remove_if_no_checkpoint(out, made)
        raise
    # a checkpoint this call did not write (an earlier run's, which --resume continues) is never removed
    earlier = not overwrite and run.join("checkpoints", "LATEST").exists()
    try:
        return _train_locked(
            store,
            valid_store,
            p,
            solver,
            out,
            scheduler=scheduler,
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            resume=resume,
            overwrite=overwrite,
            progress=progress,
            valid_every=valid_every,
            time_limit=time_limit,
            worker_timeout=worker_timeout,
            checkpoint_every=checkpoint_every,
            checkpoint_interval=checkpoint_interval,
            dashboard_address=dashboard_address,
            threshold=threshold,
        )
    except BaseException as e:
        # resumable by design: a stop, and a write that failed (disk full: its line names --resume)
        resumable = isinstance(e, (TimeLimitReached, Terminated, KeyboardInterrupt, OutputError))
        if held is None or not held.lost:  # a lost lease: the directory is the other writer's now
            _remove_if_no_checkpoint(out, made, keep_initial=earlier or resumable)
        raise
    finally:
        for fd in reading:
            os.close(fd)
        _unlock_run_dir(lock, held)


def targets_counted(n: int, regression: bool) -> str:
    """What a store or model predicts, counted for a message: "3 classes", "1 output", "2 outputs"."""
    if regression:
        return f"{n} output" + ("" if n == 1 else "s")
    return f"{n} class" + ("" if n == 1 else "es")


def earlier_run(out: str) -> StreamfitError:
    """The error of a new run (no --resume, no --overwrite) whose run directory `out` holds a
    checkpoint of an earlier run (checkpoints/LATEST); `streamfit run` checks before its first section."""
    return StreamfitError(
        f"{out}: holds checkpoints of an earlier run; pass --resume to continue it, "
        "--overwrite to start over, or choose another --out"
    )


def remove_run_outputs(run: storage.Location) -> None:
    """What a run directory holds of an earlier run (train --overwrite, and `streamfit run
    --overwrite` before its first section): its checkpoints and model, and with them its metrics,
    run.json and evaluation.json, so that a new run stopped early leaves nothing that looks like
    its result. The marks of completeness go first (checkpoints/LATEST, the model's model.json
    and, behind a URL, its COMMITTED record), so a kill while the rest is deleted leaves nothing
    that a resume or load_model would take as complete. The caller holds the directory's lock
    where there is one (_lock_run_dir)."""
    for mark in (("checkpoints", "LATEST"), ("model", storage.COMMITTED), ("model", "model.json")):
        run.join(*mark).remove()
    run.join("checkpoints").remove_tree()
    run.join("model").remove_tree()
    for name in ("metrics.jsonl", "run.json", EVALUATION_FILE):
        run.join(name).remove()


def _remove_if_no_checkpoint(out: str, made: bool, *, keep_initial: bool = False) -> None:
    """After a run that failed before its first step was checkpointed: remove what it wrote
    (checkpoints/, metrics.jsonl), and the run directory itself if this run made it and
    it is empty then, so that nothing is left that looks like a run. The step-0 checkpoint (the
    solver's init, saved before the first step reads every chunk or the --valid store) counts as
    no run after an error: e.g. a damaged chunk met in step 1 must not leave a run that asks for
    --resume or --overwrite once the store is re-ingested. `keep_initial`: keep it anyway (a run
    stopped by SIGTERM, Ctrl-C or its time limit, or by a failed write such as a full disk, which
    --resume continues as documented, and a checkpoint of an earlier call). A run with a checkpoint of step 1 or later is kept for --resume."""
    run = storage.resolve(out)
    latest = run.join("checkpoints", "LATEST")
    if latest.exists():
        try:
            step = int(json.loads(latest.read_bytes())["step"])
        except (ValueError, KeyError, TypeError, OSError):
            return  # not ours to judge: keep it, resume names the damage
        if keep_initial or step != 0:
            return
        latest.remove()  # the mark of a complete checkpoint goes first (remove_run_outputs)
    run.join("checkpoints").remove_tree()
    run.join("metrics.jsonl").remove()
    if made and run.local and os.path.isdir(run.path) and not os.listdir(run.path):
        os.rmdir(run.path)


def _lock_run_dir(out: str) -> int:
    """An exclusive advisory lock (flock) on the run directory, held through the returned file
    descriptor until train returns; the kernel drops it if the process dies. Two runs writing one
    directory's checkpoints would delete each other's state (e.g. a cron retry with --resume
    while the first run is still going)."""
    fd = os.open(out, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise StreamfitError(
            f"{out}: another streamfit train is using this run directory right now; wait for it "
            "to finish (--resume then continues it if it stopped early), or choose another --out"
        ) from None
    except OSError as e:  # a filesystem without flock (some network mounts): run unguarded, and say so
        log.warning("%s: cannot lock the run directory (%s); make sure no other train uses it", out, e.strerror)
    return fd


def _unlock_run_dir(lock: int | None, held: Lease | None) -> None:
    """Release the run directory: its flock (local disk) or its lease (behind a URL)."""
    if lock is not None:
        os.close(lock)
    if held is not None:
        held.release()


def _single_threaded_blas(on: bool):
    """BLAS on one thread while an in-process run fits (as in a Dask worker, whose nanny sets
    OMP_NUM_THREADS=1): the model is then the same bits as a cluster's (stagewise sums its Gram
    matrices with BLAS, whose threads change the last bits)."""
    if not on:
        return contextlib.nullcontext()
    from threadpoolctl import threadpool_limits

    return threadpool_limits(limits=1, user_api="blas")


def _check_feature_memory(store, solver: str) -> None:
    """StreamfitError when the solver's dense per-feature arrays cannot fit in the memory available
    now: dense float64 weights, n_features × n_classes × 8 bytes, for solvers with
    Solver.dense_weights; at least one 8-byte value per feature for the others (column counts,
    per-class vectors). A store's width is its largest column + 1, so one stray large --no-hash
    index must end in this message, not in the OOM killer. The bound is a lower one: a run it
    lets through may still need more."""
    dense = get_solver(solver).dense_weights
    need = 8 * store.n_features * (store.n_classes if dense else 1)
    available = available_memory()
    if need > available:
        what = f"{store.n_classes} classes of dense float64 weights" if dense else "its per-feature arrays"
        if store.hashing is not None:  # its width is the hashed --n-features
            advice = "re-ingest with a smaller --n-features"
        else:
            advice = (
                "re-ingest with hashing (drop --no-hash), renumber the features from 0, or pass a smaller --n-features"
            )
        if dense:
            advice += ", or train with --solver ppdsparse, whose weights are sparse"
        raise StreamfitError(
            f"{store.path}: {solver} needs at least {need / 2**30:.3g} GiB for {what} over {store.n_features} "
            f"features, more than the {available / 2**30:.3g} GiB available: {advice}"
        )


def _check_row_state_memory(store, fitter: Solver) -> None:
    """StreamfitError when the solver's per-row state cannot fit in the memory available now, and
    a warning when its estimate takes more than half of it (solvers.base.check_state_memory). The
    refusal counts what one machine holds at once for certain: Solver.row_state_arrays float64
    arrays of a chunk's rows × n_classes (8 · rows · n_classes · arrays bytes, (rows, arrays) =
    Solver.row_state: a chunk's rows, min(n_rows, chunk_rows); bcd's memory mode: the store's.
    One task's scores, residuals or duals; the other chunks' state is in the run directory
    between passes), and the other chunks' arrays that the process which wrote them keeps for its
    next read, as many whole ones as fit in STREAMFIT_STATE_CACHE_MB (`_cached_row_state`). The
    warning's estimate adds Solver.column_state float64 arrays of the store's columns × n_classes
    (stagewise's summed weights, stages and column gradients; the dense weights of bcd and fbpd
    and fbpd's driver arrays), with min(n_features, nnz) columns, which may exceed the columns
    used: so that term only warns. A lower bound, then: it never refuses a run that fits
    (docs/benchmarks.md, sessions 29 and 30, branches mem31, memsw31 and memfm31). A solver whose
    state depends on the data beyond the manifest checks it again in its init (multiboost's
    histograms). Only for state on this machine (in process or on the embedded cluster): train
    does not call it with --scheduler, whose workers run elsewhere."""
    rows, arrays = fitter.row_state(store)
    K = store.n_classes
    task = 8 * rows * K * arrays
    if not task:
        return
    per_chunk = rows <= store.manifest.chunk_rows  # state kept chunk by chunk in the run directory
    need = task + (_cached_row_state(store, 8 * rows * K) if per_chunk else 0)
    columns = min(store.n_features, store.manifest.nnz)
    estimate = need + 8 * columns * K * fitter.column_state(store)
    what = f"per-row state ({arrays} float64 arrays of {rows} rows × {K} classes"
    if need > task:
        what += f", and {(need - task) / 2**30:.3g} GiB of other chunks' kept for the next read"
    counted = what + (f"; with its weights over {columns} columns × {K} classes)" if estimate > need else ")")
    check_state_memory(
        store.path,
        fitter.name,
        (need, what + ")"),
        (estimate, counted),
        "train with --solver ppdsparse (it keeps its per-row state one class at a time), or use fewer classes or a "
        "machine with more memory",
        available_memory(),
        log,
    )


def _cached_row_state(store, chunk_bytes: int) -> int:
    """Bytes of the other chunks' per-row arrays that a process keeps of those it wrote
    (streamfit.checkpoint: whole arrays, at most STATE_CACHE_BYTES in all): none when one chunk's
    array does not fit."""
    others = store.n_chunks - 1
    return min(others, STATE_CACHE_BYTES // chunk_bytes) * chunk_bytes if chunk_bytes else 0


def _train_locked(
    store,
    valid_store,
    p,
    solver: str,
    out: str,
    *,
    scheduler,
    n_workers,
    threads_per_worker,
    resume,
    overwrite,
    progress,
    valid_every,
    time_limit,
    worker_timeout,
    checkpoint_every,
    checkpoint_interval,
    dashboard_address,
    threshold,
) -> Model:
    run = storage.resolve(out)
    ckpt_dir = run.join("checkpoints")
    if overwrite:
        remove_run_outputs(run)
    # LATEST marks a run with a complete checkpoint; anything else under checkpoints/ is the state of
    # a run that failed before its first one, which nothing can resume from.
    has_checkpoint = ckpt_dir.join("LATEST").exists()
    if has_checkpoint and not resume:
        raise earlier_run(out)
    if not has_checkpoint:
        if resume:
            log.warning("%s: nothing to resume, starting a new run", out)
        ckpt_dir.remove_tree()
    fitter = get_solver(solver)(p)
    config = {"solver": solver, "params": p.model_settings()}
    if valid_store is not None and fitter.reads_valid(store):  # the model depends on the validation store
        config["valid_store_fingerprint"] = valid_store.manifest.fingerprint
    checkpointer = Checkpointer(out, config=config, store_fingerprint=store.manifest.fingerprint, time_limit=time_limit)
    dense_mb = store.n_features * store.n_classes * 8 / 2**20
    log.info(
        "training %s on %s: %d rows × %d features, %s, %d chunks (dense float64 weights would take %.3g MiB)",
        solver,
        store.path,
        store.n_rows,
        store.n_features,
        targets_counted(store.n_classes, store.regression),
        store.n_chunks,
        dense_mb,
    )
    _check_feature_memory(store, solver)
    if scheduler is None:  # the per-row state is on this machine
        _check_row_state_memory(store, fitter)
    metrics = MetricsLog(
        run.join("metrics.jsonl").url,
        valid=valid_store,
        valid_every=valid_every,
        progress=RunProgress(progress_mode()) if progress else None,
    )
    if has_checkpoint:
        log.info("resuming from the checkpoint of step %d in %s", checkpointer.latest_step(), ckpt_dir)
    started = time.time()
    choice = auto_choice(
        scheduler,
        n_workers,
        store.manifest.nnz,
        store.n_classes,
        store.n_chunks,
        fitter.uses_workers(store),
        work=fitter.work(store) if scheduler is None and n_workers is None else None,
    )
    mode = choice.mode
    if mode == "inprocess":
        log.info("running in this process (%s)", choice.why)
    elif scheduler is None and n_workers is None:
        log.info("starting an embedded Dask cluster (%s)", choice.why)
    record = {
        "solver": solver,
        "params": p.model_dump(),
        "store": storage.public(store.path),
        "store_fingerprint": store.manifest.fingerprint,
        "scheduler": scheduler,
        "engine": mode,
        "n_workers": n_workers,
        "threads_per_worker": threads_per_worker,
        "worker_timeout": worker_timeout,
        "resumed": resume,
        "time_limit": time_limit,
        "checkpoint_every": checkpoint_every,
        "checkpoint_interval": checkpoint_interval,
        "threshold": threshold,
    }
    try:
        with (
            Engine(
                scheduler,
                mode=mode,
                n_workers=n_workers,
                threads_per_worker=threads_per_worker,
                worker_timeout=worker_timeout,
                dashboard_address=dashboard_address,
            ) as engine,  # no bar per pass: the run's progress is one bar (or line) per step
            _single_threaded_blas(mode == "inprocess"),
            announce_compilation(solver),  # one INFO line if its kernels are not in numba's cache yet
        ):
            if engine.dashboard_link:
                log.info("Dask dashboard: %s", engine.dashboard_link)
            # a joined cluster's workers read the stores and write per-sample state in the run directory
            engine.require_shared(
                {store.path: "store"} | ({valid_store.path: "--valid store"} if valid_store else {}),
                {out: "run directory"},
            )
            model = fitter.fit(
                store,
                engine=engine,
                checkpointer=checkpointer,
                log=metrics,
                resume=resume,
                checkpoint_every=checkpoint_every,
                checkpoint_interval=checkpoint_interval,
                valid=valid_store,
            )
    except (TimeLimitReached, Terminated) as e:
        record.update(
            status="stopped at the time limit"
            if isinstance(e, TimeLimitReached)
            else f"stopped by {shutdown.stop_signal().name}",
            step=e.step if isinstance(e, TimeLimitReached) else checkpointer.latest_step(),
            seconds=round(metrics.elapsed, 3),
            session_seconds=round(time.time() - started, 3),
        )
        run.join("run.json").write_bytes(json.dumps(record, indent=1).encode())
        raise
    model.featurizer = store.featurizer_dict()
    model.idf = store.idf
    if threshold == "fit":
        model.decision_threshold, micro_f1 = fit_threshold(model, valid_store)
        model.info["threshold_fit"] = {"valid": valid_store.path, "micro_f1": micro_f1}
        log.info("threshold %.6g fitted on %s: micro-F1 %.4f", model.decision_threshold, valid_store.path, micro_f1)
    elif threshold is not None:
        model.decision_threshold = float(threshold)
    model.save(run.join("model").url)
    if all_weights_zero(model):
        log.warning(ALL_ZERO_WEIGHTS)
    record.update(status="finished", seconds=round(metrics.elapsed, 3), session_seconds=round(time.time() - started, 3))
    if metrics.records:
        last = metrics.records[-1]
        log.info(
            "finished at step %d in %.1f s%s",
            last["step"],
            record["seconds"],
            f": {summary(last)}" if summary(last) else "",
        )
    run.join("run.json").write_bytes(json.dumps(record, indent=1).encode())
    return model


__all__ = ["ConfigError", "make_params", "train"]
