"""`streamfit train`: one solver over one store, on an engine, into a run directory.

RUN_DIR/model/         the trained model (streamfit.load_model)
RUN_DIR/checkpoints/   resumable solver state (streamfit.checkpoint)
RUN_DIR/metrics.jsonl  one JSON line per solver step (with `valid`: the validation metrics too)
RUN_DIR/run.json       what was run: solver, parameters, store, engine, timings, and its status:
                       "finished", or "stopped at the time limit" (no model/ then; --resume continues)
"""

from __future__ import annotations

import difflib
import fcntl
import json
import logging
import os
import shutil
import time
from typing import TYPE_CHECKING

import psutil

from streamfit.checkpoint import Checkpointer
from streamfit.engine import WORKER_TIMEOUT, Engine
from streamfit.errors import ConfigError, StreamfitError, TimeLimitReached, output_error
from streamfit.metrics import fit_threshold
from streamfit.model import Model
from streamfit.runlog import MetricsLog, summary
from streamfit.solvers import get_solver
from streamfit.store import open_store
from streamfit.store.format import write_json_atomic

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

log = logging.getLogger(__name__)
HEARTBEAT_SECONDS = 30  # a summary line in the log at most this often (runs whose output goes to a file)


def make_params(solver_name: str, params: dict | None):
    """Validated solver parameters; a bad key or value raises ConfigError naming it."""
    from pydantic import ValidationError

    cls = get_solver(solver_name)
    try:
        return cls.Params(**(params or {}))
    except ValidationError as e:
        problems = "; ".join(_param_problem(err, list(cls.Params.model_fields)) for err in e.errors())
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
    valid_every: int = 1,
    time_limit: float | None = None,
    worker_timeout: float = WORKER_TIMEOUT,
    checkpoint_every: int = 1,
    threshold: float | str | None = None,
) -> Model:
    """Fit `solver` on the store and write RUN_DIR (`out`). `threshold` (multilabel stores): the
    model's decision threshold (streamfit.model.decide), or "fit": the one of the best micro-F1
    on `valid` (streamfit.metrics.fit_threshold); None: the model kind's default. `time_limit` (seconds): stop at the
    first checkpoint after it, raising TimeLimitReached; the same call with resume=True continues.
    `worker_timeout`: seconds the Dask cluster may have no workers before the run fails.
    `checkpoint_every`: solver steps between checkpoints (a kill loses at most that many)."""
    store = open_store(store_path)
    valid_store = open_store(valid) if valid else None
    if valid_store is not None and (valid_store.classes != store.classes or valid_store.n_features != store.n_features):
        raise StreamfitError(
            f"{valid}: its classes or width differ from the training store's; ingest it with --like {store.path}"
        )
    if store.n_rows == 0:
        raise StreamfitError(f"{store.path}: holds no rows; ingest data with at least one row per class")
    if store.n_classes < 2 and not store.multilabel:
        raise StreamfitError(
            f"{store.path}: holds one class ({store.classes[0] if store.classes else 'none'}); a "
            "classifier needs two or more: check the labels (--label-field, the class folders) "
            "and re-ingest"
        )
    p = make_params(solver, params)
    if threshold is not None and not store.multilabel:
        raise ConfigError(f"--threshold {threshold}: applies to multilabel stores, {store.path} is multiclass; drop it")
    if threshold == "fit" and valid_store is None:
        raise ConfigError("--threshold fit: needs a validation store to fit on; pass --valid STORE (ingested --like)")
    if checkpoint_every < 1:
        raise ConfigError(f"checkpoint_every must be >= 1, got {checkpoint_every}")
    out = os.path.abspath(out)
    if resume and overwrite:
        raise StreamfitError("--resume and --overwrite contradict each other: choose one")
    try:
        os.makedirs(out, exist_ok=True)
    except OSError as e:
        raise output_error(out, e) from e
    lock = _lock_run_dir(out)
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
            valid=valid,
            valid_every=valid_every,
            time_limit=time_limit,
            worker_timeout=worker_timeout,
            checkpoint_every=checkpoint_every,
            threshold=threshold,
        )
    finally:
        os.close(lock)


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


def _check_feature_memory(store, solver: str) -> None:
    """StreamfitError when the solver's dense per-feature arrays cannot fit in the memory available
    now (psutil): dense float64 weights, n_features × n_classes × 8 bytes, for solvers with
    Solver.dense_weights; at least one 8-byte value per feature for the others (column counts,
    per-class vectors). A store's width is its largest column + 1, so one stray large --no-hash
    index must end in this message, not in the OOM killer. The bound is a lower one: a run it
    lets through may still need more."""
    dense = get_solver(solver).dense_weights
    need = 8 * store.n_features * (store.n_classes if dense else 1)
    available = psutil.virtual_memory().available
    if need > available:
        what = f"{store.n_classes} classes of dense float64 weights" if dense else "its per-feature arrays"
        raise StreamfitError(
            f"{store.path}: {solver} needs at least {need / 2**30:.3g} GiB for {what} over {store.n_features} "
            f"features, more than the {available / 2**30:.3g} GiB available: re-ingest with hashing (drop "
            "--no-hash), renumber the features from 0, or pass a smaller --n-features"
        )


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
    valid,
    valid_every,
    time_limit,
    worker_timeout,
    checkpoint_every,
    threshold,
) -> Model:
    ckpt_dir = os.path.join(out, "checkpoints")
    if overwrite:  # the old model goes too: a new run stopped early must not leave it looking like its result
        shutil.rmtree(ckpt_dir, ignore_errors=True)
        shutil.rmtree(os.path.join(out, "model"), ignore_errors=True)
        for name in ("metrics.jsonl", "run.json"):
            if os.path.exists(os.path.join(out, name)):
                os.remove(os.path.join(out, name))
    # LATEST marks a run with a complete checkpoint; anything else under checkpoints/ is the state of
    # a run that failed before its first one, which nothing can resume from.
    has_checkpoint = os.path.exists(os.path.join(ckpt_dir, "LATEST"))
    if has_checkpoint and not resume:
        raise StreamfitError(
            f"{out}: holds checkpoints of an earlier run; pass --resume to continue it, "
            "--overwrite to start over, or choose another --out"
        )
    if not has_checkpoint:
        if resume:
            log.warning("%s: nothing to resume, starting a new run", out)
        shutil.rmtree(ckpt_dir, ignore_errors=True)
    config = {"solver": solver, "params": p.model_settings()}
    checkpointer = Checkpointer(out, config=config, store_fingerprint=store.manifest.fingerprint, time_limit=time_limit)
    dense_mb = store.n_features * store.n_classes * 8 / 2**20
    log.info(
        "training %s on %s: %d rows × %d features, %d classes, %d chunks (dense float64 weights would take %.3g MiB)",
        solver,
        store.path,
        store.n_rows,
        store.n_features,
        store.n_classes,
        store.n_chunks,
        dense_mb,
    )
    _check_feature_memory(store, solver)
    metrics = MetricsLog(
        os.path.join(out, "metrics.jsonl"), valid=valid_store, valid_every=valid_every, heartbeat=HEARTBEAT_SECONDS
    )
    if has_checkpoint:
        log.info("resuming from the checkpoint of step %d in %s", checkpointer.latest_step(), ckpt_dir)
    started = time.time()
    mode = "inprocess" if n_workers == 0 and not scheduler else None
    record = {
        "solver": solver,
        "params": p.model_dump(),
        "store": store.path,
        "store_fingerprint": store.manifest.fingerprint,
        "scheduler": scheduler,
        "n_workers": n_workers,
        "threads_per_worker": threads_per_worker,
        "worker_timeout": worker_timeout,
        "resumed": resume,
        "time_limit": time_limit,
        "checkpoint_every": checkpoint_every,
        "threshold": threshold,
    }
    try:
        with Engine(
            scheduler,
            mode=mode,
            n_workers=n_workers,
            threads_per_worker=threads_per_worker,
            progress=progress,
            worker_timeout=worker_timeout,
        ) as engine:
            model = get_solver(solver)(p).fit(
                store,
                engine=engine,
                checkpointer=checkpointer,
                log=metrics,
                resume=resume,
                checkpoint_every=checkpoint_every,
            )
    except TimeLimitReached as e:
        record.update(
            status="stopped at the time limit",
            step=e.step,
            seconds=round(metrics.elapsed, 3),
            session_seconds=round(time.time() - started, 3),
        )
        write_json_atomic(os.path.join(out, "run.json"), json.dumps(record, indent=1))
        raise
    model.featurizer = store.featurizer_dict()
    model.idf = store.idf
    if threshold == "fit":
        model.decision_threshold, micro_f1 = fit_threshold(model, valid_store)
        model.info["threshold_fit"] = {"valid": valid_store.path, "micro_f1": micro_f1}
        log.info("threshold %.6g fitted on %s: micro-F1 %.4f", model.decision_threshold, valid_store.path, micro_f1)
    elif threshold is not None:
        model.decision_threshold = float(threshold)
    model.save(os.path.join(out, "model"))
    record.update(status="finished", seconds=round(metrics.elapsed, 3), session_seconds=round(time.time() - started, 3))
    if metrics.records:
        last = metrics.records[-1]
        log.info(
            "finished at step %d in %.1f s%s",
            last["step"],
            record["seconds"],
            f": {summary(last)}" if summary(last) else "",
        )
    write_json_atomic(os.path.join(out, "run.json"), json.dumps(record, indent=1))
    return model


__all__ = ["ConfigError", "make_params", "train"]
