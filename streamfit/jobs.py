"""`streamfit run PIPELINE.yaml`: the sections of a pipeline file run in order as one job,
ingest -> ingest_test -> train -> evaluate -> predict (streamfit.config describes the file).
evaluate's results are also written to RUN_DIR/evaluation.json ({"store", "metrics"})."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace

from streamfit import storage
from streamfit.config import EVALUATION_FILE, PipelineConfig, train_options
from streamfit.errors import ConfigError, StreamfitError
from streamfit.ingest.pipeline import IngestOptions, IngestReport, ingest
from streamfit.model import Model

log = logging.getLogger(__name__)


@contextlib.contextmanager
def _flags_as_section_keys(section: str, key: str) -> Iterator[None]:
    """A StreamfitError raised by a section whose fix names a format option's command-line flag
    (`set --text-field`, `--label-field`, `--id-field`, ...) gains where a pipeline writes it:
    under the section's `key` (source_options, or predict's options). The error is raised as it
    is written for the command line; a pipeline has no such flags."""
    from streamfit.ingest.sources import format_option_flags

    try:
        yield
    except StreamfitError as e:
        flags = format_option_flags(str(e))
        if not flags:
            raise
        written = ", ".join(f"{f.replace('-', '_')}: …" for f in flags)
        flag_list = ", ".join(f"--{f}" for f in flags)
        verb = "is" if len(flags) == 1 else "are"
        raise StreamfitError(
            f"{e} (in a pipeline: {flag_list} {verb} the {section} section's {key}: {{{written}}})"
        ) from e


@dataclass
class PipelineResult:
    """What each section produced; None for a section the file lacks or that --resume kept."""

    ingest: IngestReport | None = None
    ingest_test: IngestReport | None = None
    model: Model | None = None
    evaluation: dict | None = None  # streamfit.metrics.evaluate's result
    predictions: int | None = None  # rows written by the predict section


def _stored(path: str) -> bool:
    """Whether a complete store is at `path` (a local path or URL): committed, with a manifest."""
    data = storage.committed(storage.resolve(path))
    return data is not None and data.join("manifest.json").exists()


def ingest_options(section: IngestOptions, *, overwrite: bool, progress: bool) -> IngestOptions:
    """A pipeline's ingest section with the command line's --overwrite (which adds to the
    section's `overwrite`) and progress."""
    return replace(section, overwrite=overwrite or section.overwrite, progress=progress)


def run_pipeline(
    config: PipelineConfig,
    overrides: dict | None = None,
    *,
    resume: bool = False,
    overwrite: bool = False,
    progress: bool = True,
    steps_progress: bool = True,
    say: Callable[[str], None] = log.info,
) -> PipelineResult:
    """Run `config` (from streamfit.config.load_pipeline). `overrides`: TrainOptions given on the
    command line, which beat the train section (streamfit.config.train_options). resume: keep
    stores that exist and continue training from its newest checkpoint; overwrite: replace the
    stores and the run directory. `progress`: bars of the evaluate and predict passes (a terminal's);
    `steps_progress`: the ingest's and the training run's progress (streamfit.runlog.RunProgress:
    a bar on a terminal, lines in a log). `say` gets one
    line per finished section."""
    from streamfit.metrics import evaluate
    from streamfit.store import open_store
    from streamfit.train import train

    _check_before_the_first_section(config, resume, overwrite)
    if not (resume or overwrite):
        _refuse_earlier_outputs(config)
    if overwrite:
        _start_over(config)
    result = PipelineResult()
    warm_up = _warm_up(config, overrides or {}, resume)
    try:
        _ingest_sections(config, result, resume=resume, overwrite=overwrite, steps_progress=steps_progress, say=say)
    except BaseException:
        if warm_up:
            warm_up.stop()
        raise
    if warm_up:
        warm_up.wait()
    if config.train:
        job = config.train
        options = train_options(job.options, overrides or {})
        result.model = train(
            job.store,
            options.solver,
            job.out,
            options.params,
            resume=resume,
            overwrite=overwrite,
            progress=steps_progress,
            **options.engine(),
        )
        say(f"train: model written to {storage.resolve(job.out).join('model')}")
    if config.evaluate:
        from streamfit.model import load_model

        model, store = load_model(config.evaluate.run_dir), open_store(config.evaluate.store)
        stopped = (
            f"{config.evaluate.store}: not evaluated (no {EVALUATION_FILE} written); the same command plus --resume "
            "keeps what is done and evaluates"
        )
        with config.evaluate.cluster.engine(progress) as engine:
            result.evaluation = evaluate(model, store, progress=progress, engine=engine, sigterm=stopped)
        written = write_evaluation(config.evaluate.run_dir, config.evaluate.store, result.evaluation)
        say("evaluate: " + "  ".join(f"{k}={format_metric(v)}" for k, v in result.evaluation.items()) + f" ({written})")
    if config.predict:
        from streamfit.model import load_model
        from streamfit.predict import predict_to_file

        scoring = config.predict
        model = load_model(scoring.run_dir)
        with _flags_as_section_keys("predict", "options"), scoring.predict_options.engine() as engine:
            result.predictions = predict_to_file(
                model,
                scoring.source,
                scoring.out,
                top_k=scoring.top_k,
                fmt=scoring.format,
                options=scoring.options,
                progress=progress,
                model_dir=str(storage.resolve(scoring.run_dir).join("model")),  # the run dir holds the predictions
                parts=scoring.predict_options.parts,
                engine=engine,
            )
        say(f"predict: {result.predictions} rows written to {scoring.out}")
    return result


def _warm_up(config: PipelineConfig, overrides: dict, resume: bool):
    """A background compilation of the train section's solver (streamfit.precompile.WarmUp)
    while the ingest sections run, when there is an ingest to overlap with and the solver's
    kernels are not in numba's cache yet; else None."""
    from streamfit.precompile import warm_up_in_background

    if not config.train or not (config.ingest or config.ingest_test):
        return None
    if resume and all(_stored(s.out) for s in (config.ingest, config.ingest_test) if s):
        return None  # nothing to ingest: nothing to overlap with
    try:
        options = train_options(config.train.options, overrides)
    except Exception:  # the train section reports it in its turn
        return None
    width = None  # the training store's width where the ingest section fixes it
    if config.ingest:
        width = config.ingest.hashing.n_features if config.ingest.hashing else config.ingest.n_features
    return warm_up_in_background(options.solver, options.params, width)


def _ingest_sections(
    config: PipelineConfig,
    result: PipelineResult,
    *,
    resume: bool,
    overwrite: bool,
    steps_progress: bool,
    say: Callable[[str], None],
) -> None:
    """The ingest and ingest_test sections of run_pipeline (their reports into `result`)."""
    from streamfit.store import open_store

    if config.ingest:
        section = config.ingest
        targets = [section.out] + ([section.test_out] if section.test_out else [])
        if resume and all(_stored(t) for t in targets):
            for target in targets:
                _refuse_other_ingest(target, section, "ingest")
            say(f"ingest: {section.out} exists, kept (--resume)")
            csc = open_store(section.out).manifest.csc
            if section.csc_block_features and (csc or {}).get("block_features") != section.csc_block_features:
                from streamfit.store.csc import build_csc

                build_csc(section.out, section.csc_block_features, progress=steps_progress)
                say(f"ingest: CSC copy of {section.out} built")
        else:
            with _flags_as_section_keys("ingest", "source_options"):
                result.ingest = ingest(ingest_options(section, overwrite=overwrite, progress=steps_progress))
            say(f"ingest: {result.ingest.summary()}")
    if config.ingest_test:
        section = config.ingest_test
        if resume and _stored(section.out):
            _refuse_other_ingest(section.out, section, "ingest_test")
            say(f"ingest_test: {section.out} exists, kept (--resume)")
        else:
            with _flags_as_section_keys("ingest_test", "source_options"):
                result.ingest_test = ingest(replace(section, overwrite=overwrite, progress=steps_progress))
            say(f"ingest_test: {result.ingest_test.summary()}")


def _refuse_other_ingest(store: str, section: IngestOptions, name: str) -> None:
    """--resume keeps a complete store only if it was ingested from the inputs the pipeline's
    section `name` names now (its files, globs and dataset directories expanded as ingest expands
    them, compared with the manifest's source paths) and with the settings it gives now
    (streamfit.ingest.pipeline.content_settings, recorded in the manifest): else a ConfigError
    naming the store, what differs (old → new) and the fix, instead of training on rows the
    section no longer describes (another hashing, label field, split, ...). A store that records
    no settings (ingested by a streamfit before they were recorded) is not kept either."""
    from streamfit.ingest.inputs import expand_inputs
    from streamfit.ingest.pipeline import content_settings, settings_differences
    from streamfit.ingest.sources.folder import forget_listings
    from streamfit.store import open_store

    source = open_store(store).manifest.source
    recorded = source.get("paths")
    try:
        named = [storage.public(p) for p in expand_inputs(section.inputs, section.format)]
    finally:
        forget_listings()  # a URL folder's listing is handed over to an ingest, which this is not
    if recorded != named:
        raise ConfigError(
            f"{store}: --resume would keep this store, ingested from {', '.join(recorded or ['?'])}, but the "
            f"pipeline's {name} section names {', '.join(named)}; run with --overwrite to ingest it again"
        )
    if "settings" not in source:
        raise ConfigError(
            f"{store}: --resume cannot tell whether this store was ingested with the pipeline's {name} settings "
            "(it was written by a streamfit that did not record them); run with --overwrite to ingest it again"
        )
    differences = settings_differences(source["settings"], content_settings(section))
    if differences:
        raise ConfigError(
            f"{store}: --resume would keep this store, but the pipeline's {name} section changed since it was "
            f"ingested: {'; '.join(differences)}; run with --overwrite to ingest it again"
        )


def _stores(config: PipelineConfig) -> list[str]:
    """The stores the pipeline's ingest sections write (ingest's out and test_out, ingest_test's out)."""
    stores = []
    if config.ingest:
        stores += [config.ingest.out] + ([config.ingest.test_out] if config.ingest.test_out else [])
    if config.ingest_test:
        stores.append(config.ingest_test.out)
    return stores


def _check_before_the_first_section(config: PipelineConfig, resume: bool, overwrite: bool) -> None:
    """StreamfitError, before the first section, for what a later section would find only after
    the sections before it had done their work (an ingest, a training run): a local input of an
    ingest section or predict's source that is not there (a glob matching no file; a store that an
    ingest section writes is not looked for), a store that train (its store, --valid) or evaluate
    reads that is not there and that no ingest section writes, a predict output that is not
    .csv, .jsonl or .parquet. Inputs behind URLs are left to their sections (each look-up is a
    request, which their reads make once) but with `overwrite`, whose deletions (_start_over)
    follow this check: an ingest input not there must be named before anything is removed. The
    inputs of an ingest section whose stores --resume keeps are left out (they are compared by
    name; the files may be gone since)."""
    from streamfit.ingest.inputs import expand_inputs
    from streamfit.ingest.sources._util import require_path
    from streamfit.predict import OUTPUT_KINDS

    written = _stores(config)
    named: list[tuple[list[str], str | None]] = []
    for job in (config.ingest, config.ingest_test):
        if job is None:
            continue
        looked_up = [p for p in job.inputs if overwrite or not storage.is_url(p)]
        if looked_up and not (resume and all(_stored(t) for t in (job.out, job.test_out) if t)):
            named.append((looked_up, job.format))
    if config.predict:
        if config.predict.source not in written and not storage.is_url(config.predict.source):
            named.append(([config.predict.source], config.predict.format))
        out = config.predict.out
        if os.path.splitext(out.rstrip("/"))[1].lower() not in OUTPUT_KINDS:
            raise StreamfitError(f"{out}: the predict section's output must end in .csv, .jsonl or .parquet")
    for inputs, fmt in named:
        for path in expand_inputs(inputs, fmt):
            require_path(path, directory_ok=True)
    read = [("train", config.train.store), ("train", config.train.options.valid)] if config.train else []
    read += [("evaluate", config.evaluate.store)] if config.evaluate else []
    for section, store in read:
        if store and store not in written and not storage.is_url(store) and not storage.resolve(store).exists():
            raise StreamfitError(
                f"{store}: no such store directory (the {section} section's store; ingest one with 'streamfit "
                "ingest', or add the ingest section that writes it)"
            )


def _refuse_earlier_outputs(config: PipelineConfig) -> None:
    """Before the first section: StreamfitError for an output of an earlier run that is there
    already (a store of the ingest sections, train's run directory with a checkpoint), naming
    both fixes: --resume keeps what is done (a killed run's stores), --overwrite starts over.
    The ingest command's own message names only --overwrite, and a later section's output
    would be found only after the sections before it had done their work."""
    from streamfit.store.store import present
    from streamfit.train import earlier_run

    for store in _stores(config):
        if present(storage.resolve(store)):
            raise StreamfitError(
                f"{storage.absolute(store)}: already exists (from an earlier run of this pipeline?); pass --resume "
                "to keep it and run the sections after it, or --overwrite to replace it"
            )
    if config.train and storage.resolve(config.train.out).join("checkpoints", "LATEST").exists():
        raise earlier_run(config.train.out)


def _start_over(config: PipelineConfig) -> None:
    """`run --overwrite`, before the first section: remove the outputs of an earlier run of the
    pipeline (its complete stores, the run directory's checkpoints, model and scores, the
    predictions), so that a run killed before it replaced them all leaves none of them looking
    like its own: `--resume` would otherwise keep the earlier run's stores and model, and the
    earlier predictions would stand beside the new run's model. An input that is not there was
    named before, with nothing removed (_check_before_the_first_section)."""
    from streamfit.predict import PARTS_MANIFEST
    from streamfit.store.store import lock_dir
    from streamfit.train import _lock_run_dir, remove_run_outputs

    # every lock first, then the deletions: a copy of this job still running (a scheduler's retry)
    # stops this one before anything of it is removed; its train holds the run directory and
    # reads the stores (read_lock), whose deletion under it made it fail. Behind a URL the
    # leases (streamfit.lease) of the run directory and the stores: those a live copy's train
    # and ingests hold (a train reading a store behind a URL holds no lease on it)
    stored = [store for store in _stores(config) if _stored(store)]  # complete stores (others: their ingest)
    run = storage.resolve(config.train.out) if config.train else None
    with contextlib.ExitStack() as held:  # the flocks and the leases, released when the deletions are done
        if run is not None and run.local and run.exists():
            held.callback(os.close, _lock_run_dir(run.path))
        for store in stored:
            location = storage.resolve(store)
            if location.local:
                held.callback(os.close, lock_dir(location.path))
        named = ([(run, "run directory")] if run is not None else []) + [
            (storage.resolve(store), "store") for store in stored
        ]
        for location, what in named:
            if not location.local:
                from streamfit import lease

                taken = lease.take(location, what)
                if taken is not None:
                    held.callback(taken.release)
        for store in stored:
            storage.uncommit(storage.resolve(store))
        if run is not None and run.exists():
            remove_run_outputs(run)
    if config.evaluate:
        storage.resolve(config.evaluate.run_dir).join(EVALUATION_FILE).remove()
    if config.predict:
        out = storage.resolve(config.predict.out.rstrip("/"))
        if config.predict.predict_options.parts:
            files = storage.committed(out)
            if files is not None and files.join(PARTS_MANIFEST).exists():
                storage.uncommit(out)
        elif not out.isdir():
            out.remove()


def write_evaluation(run_dir: str, store: str, metrics: dict) -> str:
    """RUN_DIR/evaluation.json = {"store": the scored store, "metrics": evaluate's result}, written
    atomically (streamfit.storage: renamed into place on disk, one PUT on an object store);
    returns its path or URL."""
    target = storage.resolve(run_dir).join(EVALUATION_FILE)
    target.write_bytes((json.dumps({"store": store, "metrics": metrics}, indent=1) + "\n").encode())
    return str(target)


def format_metric(value) -> str:
    """A metric as the command line prints it: floats to 4 decimals."""
    return f"{value:.4f}" if isinstance(value, float) else str(value)
