"""The `streamfit` command: ingest, transpose, inspect, train, evaluate, predict, run."""

from __future__ import annotations

import json
import logging
import os
import sys

import click
from click.core import ParameterSource

from streamfit import __version__
from streamfit.errors import (
    ConfigError,
    StreamfitError,
    TimeLimitReached,
    os_error_hint,
)

log = logging.getLogger("streamfit")


class _Group(click.Group):
    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except TimeLimitReached as e:
            # --resume contradicts --overwrite: a continuation must drop it
            without = " (and without --overwrite)" if ctx.obj.get("overwrite") else ""
            click.echo(f"stopped: {e}{without}", err=True)
            sys.exit(3)
        except StreamfitError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except OSError as e:  # a path the system refused outside streamfit's writers (e.g. making --out)
            if e.filename is None:
                raise
            click.echo(f"error: {e.filename}: {e.strerror}; {os_error_hint(e)}", err=True)
            sys.exit(2)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="streamfit")
@click.option("-v", "--verbose", is_flag=True, help="Log more detail (engine, checkpoints).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars; only results and errors.")
@click.pass_context
def main(ctx, verbose, quiet):
    """Train large sparse linear classifiers on data bigger than memory.

    \b
    Typical job:
      streamfit ingest train.svm --no-hash --out train.zarr --test-size 0.2 --test-out test.zarr
      streamfit train train.zarr --solver stagewise --out run/
      streamfit evaluate run/ test.zarr
    or all three from one file:  streamfit run pipelines/quickstart.yaml
    """
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    # what is about to be trained, and how big its dense weights would be
    logging.getLogger("streamfit.train").setLevel(logging.INFO)
    ctx.obj = {"progress": sys.stderr.isatty() or verbose}
    if quiet:
        _be_quiet(ctx.obj)


def _be_quiet(obj: dict) -> None:
    obj["progress"] = False
    logging.getLogger("streamfit.train").setLevel(logging.NOTSET)


def _quiet_option(command):
    """-q/--quiet after the subcommand as well as before it."""
    def callback(ctx, _param, value):
        if value:
            _be_quiet(ctx.obj)

    return click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=callback,
                        help="No progress bars; only results and errors.")(command)


def _progress(ctx) -> bool:
    return ctx.obj["progress"]


def _refuse_resume_with_overwrite(ctx, resume: bool, overwrite: bool) -> None:
    """Checked before any work; remembered for the --time-limit stop message."""
    if resume and overwrite:
        raise ConfigError("--resume and --overwrite contradict each other: drop --overwrite to continue the run "
                          "(or --resume to start over)")
    ctx.obj["overwrite"] = overwrite


# ---------------------------------------------------------------------------------------- ingest
# the options whose values `ingest --like` takes from the training store
_LIKE_DECIDES = {"no_hash", "n_features", "hash_seed", "no_alternate_sign", "ngram_max", "value", "no_lowercase",
                 "min_token_length", "idf", "l2_normalize", "classes"}


# VALUEs meaning None besides YAML's own null: the None that `train --list-solvers` prints as a default
_NONE_WORDS = {"None", "none"}


def _parse_key_values(pairs, what: str) -> dict:
    """KEY=VALUE pairs; VALUE is read as YAML (numbers, true/false, lists), and None/none/null
    mean None (quote it, 'None', for the string)."""
    import yaml

    out = {}
    for pair in pairs:
        if "=" not in pair:
            raise ConfigError(f"{what} {pair!r}: expected KEY=VALUE")
        key, value = pair.split("=", 1)
        out[key.strip()] = None if value.strip() in _NONE_WORDS else yaml.safe_load(value)
    return out


@main.command()
@_quiet_option
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
@click.option("--out", "-o", required=True, type=click.Path(), help="The store directory to write.")
@click.option("--format", "fmt", default=None,
              type=click.Choice(["libsvm", "jsonl", "csv", "tsv", "folder", "parquet", "hdf5", "numpy"]),
              help="Input format (default: inferred from the file name).")
@click.option("--backend", default=None, type=click.Choice(["zarr", "parquet"]),
              help="Store backend: Zarr v3 (CSR row chunks) or Parquet (one row group per chunk) "
                   "[default: the --like store's, else zarr].")
@click.option("--chunk-rows", default=None, type=click.IntRange(min=1),
              help="Rows per chunk (the unit of work) [default: the --like store's, else 16384].")
@click.option("--no-hash", is_flag=True, help="Keep numeric feature indices (LIBSVM, HDF5, NumPy) instead of hashing.")
@click.option("--n-features", type=int, default=None,
              help="Hashed width, a power of two [default: 262144]; with --no-hash a fixed width "
                   "(default: largest index + 1).")
@click.option("--hash-seed", default=0, show_default=True, help="MurmurHash3 seed.")
@click.option("--no-alternate-sign", is_flag=True, help="Do not let the hash's sign flip feature values.")
@click.option("--ngram-max", default=1, show_default=True, help="Hash word n-grams for n = 1..NGRAM_MAX.")
@click.option("--value", default="count", show_default=True, type=click.Choice(["count", "binary", "log1p"]),
              help="Term value: raw count, binary, or log(1 + count).")
@click.option("--no-lowercase", is_flag=True, help="Keep the case of text tokens.")
@click.option("--min-token-length", default=2, show_default=True, type=click.IntRange(min=1),
              help="Hash text words of at least this many characters; shorter ones are dropped "
                   "(a row with none has no features).")
@click.option("--idf", is_flag=True, help="Weight features by IDF counted on the training rows (a second pass).")
@click.option("--l2-normalize", is_flag=True, help="Scale every row to unit Euclidean norm.")
@click.option("--like", type=click.Path(), default=None,
              help="Ingest test data like this training store: same hashing, IDF, width, classes and "
                   "source options (field names, encoding, ...; options given here override them).")
@click.option("--classes", default=None, help="Declared class vocabulary, comma-separated (else: order of first appearance).")
@click.option("--test-size", type=float, default=None, help="Fraction of rows for a stratified test store.")
@click.option("--test-out", type=click.Path(), default=None, help="Where to write the test store (with --test-size).")
@click.option("--seed", default=0, show_default=True, help="Seed of the train/test split.")
@click.option("--on-bad-record", default="error", show_default=True, type=click.Choice(["error", "skip", "quarantine"]),
              help="Stop at a bad record, skip and count it, or also copy it to a quarantine file.")
@click.option("--quarantine", type=click.Path(), default=None, help="Quarantine file [default: OUT.quarantine.jsonl].")
@click.option("--text-field", default=None, help="Text field or column (JSONL/CSV/Parquet) [default: text]; "
              "comma-separate several fields to hash each in its own namespace.")
@click.option("--label-field", default=None, help="Label field or column [default: label].")
@click.option("--label-separator", default=None, help="CSV: separator inside a multilabel label cell, e.g. '|'.")
@click.option("--zero-based", is_flag=True, help="LIBSVM: feature indices start at 0 (default: 1).")
@click.option("--subset", default=None, help="Folder corpus: the top-level folder to read, e.g. 20news-bydate-train.")
@click.option("--encoding", default=None, help="Folder corpus, CSV/TSV: text encoding, e.g. latin-1 [default: utf-8].")
@click.option("--x-dataset", default=None, help="HDF5/NPZ: the feature matrix dataset [default: X].")
@click.option("--y-dataset", default=None, help="HDF5/NPZ: the label dataset [default: y].")
@click.option("--option", "options", multiple=True, help="Any other format option, as KEY=VALUE (repeatable).")
@click.option("--batch-size", default=8192, show_default=True, help="Records read and hashed at a time.")
@click.option("--overwrite", is_flag=True, help="Replace existing output stores.")
@click.option("--csc-block-features", type=click.IntRange(min=1), default=None,
              help="Also build a column (CSC) copy of the --out store in blocks of N features "
                   "(for solvers that walk features; see 'streamfit transpose').")
@click.pass_context
def ingest(ctx, inputs, out, fmt, backend, chunk_rows, no_hash, n_features, hash_seed, no_alternate_sign, ngram_max,
           value, no_lowercase, min_token_length, idf, l2_normalize, like, classes, test_size, test_out, seed,
           on_bad_record, quarantine, text_field, label_field, label_separator, zero_based, subset, encoding, x_dataset,
           y_dataset, options, batch_size, overwrite, csc_block_features):
    """Turn raw data into a chunked, checksummed store.

    INPUTS are LIBSVM/SVMlight files (.gz/.bz2/.xz too), JSONL, CSV/TSV, a folder (or .tar.gz)
    with one sub-folder per class, Parquet, HDF5, or .npy/.npz. Text is hashed into
    --n-features columns; numeric indices are hashed too unless --no-hash.

    \b
    Examples:
      streamfit ingest news.tar.gz --subset 20news-bydate-train --encoding latin-1 --value log1p --out news.zarr
      streamfit ingest test.svm --like train.zarr --out test.zarr
    """
    from streamfit.ingest.pipeline import IngestOptions
    from streamfit.ingest.pipeline import ingest as run_ingest

    if like:
        given = [p.opts[0] for p in ctx.command.params
                 if p.name in _LIKE_DECIDES and ctx.get_parameter_source(p.name) is not ParameterSource.DEFAULT]
        if given:
            raise ConfigError(f"--like takes the hashing, width, IDF, normalization and classes from the training "
                              f"store: drop {', '.join(given)}")
    hashing = None
    if not no_hash:
        from streamfit.ingest.hashing import HashingConfig

        try:
            hashing = HashingConfig(n_features=n_features or 2**18, seed=hash_seed, alternate_sign=not no_alternate_sign,
                                    lowercase=not no_lowercase, ngram_range=(1, ngram_max), value=value,
                                    min_token_length=min_token_length)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    source_options = {k: v for k, v in {
        "text_field": text_field, "label_field": label_field, "label_separator": label_separator,
        "zero_based": True if zero_based else None, "subset": subset, "encoding": encoding,
        "x_dataset": x_dataset, "y_dataset": y_dataset}.items() if v is not None}
    source_options.update(_parse_key_values(options, "--option"))
    report = run_ingest(IngestOptions(
        paths=list(inputs), out=out, format=fmt, backend=backend, chunk_rows=chunk_rows, hashing=hashing,
        n_features=n_features if no_hash else None, idf=idf, l2_normalize=l2_normalize, like=like,
        classes=classes.split(",") if classes else None, test_size=test_size, test_out=test_out, seed=seed,
        on_bad_record=on_bad_record, quarantine=quarantine, source_options=source_options, batch_size=batch_size,
        overwrite=overwrite, csc_block_features=csc_block_features, progress=_progress(ctx)))
    click.echo(report.summary())


# ------------------------------------------------------------------------------------- transpose
@main.command()
@_quiet_option
@click.argument("store", type=click.Path())
@click.option("--block-features", default=65536, show_default=True, type=click.IntRange(min=1),
              help="Columns per feature block (one block's nnz must fit in memory).")
@click.pass_context
def transpose(ctx, store, block_features):
    """Build (or rebuild) STORE's column copy: X cut into feature blocks stored as CSC.

    Out of core: one pass over the row chunks spills entries per block, then each block is
    sorted by column and written to STORE/csc/. The copy replaces an earlier one atomically.
    """
    from streamfit.store.csc import build_csc

    csc = build_csc(store, block_features, progress=_progress(ctx))
    nnz = sum(b["nnz"] for b in csc["blocks"])
    click.echo(f"{os.path.abspath(store)}: {len(csc['blocks'])} feature blocks of {block_features} columns, nnz {nnz}")


# --------------------------------------------------------------------------------------- inspect
@main.command()
@_quiet_option
@click.argument("store", type=click.Path())
@click.option("--verify", is_flag=True, help="Re-read every chunk and CSC block and check its checksum; exit 1 naming damage.")
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--chunks", "show_chunks", is_flag=True, help="List every chunk (and CSC block).")
@click.option("--occupancy", is_flag=True,
              help="Read every chunk and report how many columns are used; for hashed stores also the "
                   "estimated distinct features, the share of them colliding, and the n_features that "
                   "would keep collisions under 1 % / 10 %.")
@click.pass_context
def inspect(ctx, store, verify, as_json, show_chunks, occupancy):
    """Describe a store: shape, nnz, classes, chunks, CSC blocks, hashing and format version.

    \b
    Example:
      streamfit inspect news.zarr --verify --occupancy"""
    from streamfit.store import open_store

    s = open_store(store)
    m = s.manifest
    info = {
        "path": s.path, "format_version": m.format_version, "backend": m.backend, "n_rows": m.n_rows,
        "n_features": m.n_features, "nnz": m.nnz, "density": m.nnz / max(m.n_rows * m.n_features, 1),
        "task": m.task, "n_classes": len(m.classes), "classes": m.classes, "chunk_rows": m.chunk_rows,
        "n_chunks": len(m.chunks), "hashing": m.hashing, "transform": m.transform, "counts": m.counts,
        "source": m.source, "fingerprint": m.fingerprint,
    }
    info["csc"] = None
    if m.csc:
        info["csc"] = {"block_features": m.csc["block_features"], "n_blocks": len(m.csc["blocks"]),
                       "nnz": sum(b["nnz"] for b in m.csc["blocks"])}
    if show_chunks:
        info["chunks"] = [c.__dict__ for c in m.chunks]
        if m.csc:
            info["csc"]["blocks"] = m.csc["blocks"]
    if occupancy:
        from streamfit.ingest.hashing import collision_report

        report = collision_report(m.n_features, s.columns_used(progress=_progress(ctx)))
        if not m.hashing:  # unhashed indices do not collide
            report = {k: report[k] for k in ("n_features", "columns_used", "occupancy")}
        info["occupancy"] = report
    problems = s.verify() if verify else []
    if verify:
        info["verified"] = not problems
        info["problems"] = problems
    if as_json:
        click.echo(json.dumps(info, indent=1))
    else:
        for key, val in info.items():
            if key == "occupancy":
                click.echo(f"{key:>14}:")
                for line in _occupancy_lines(val):
                    click.echo(f"{'':>16}{line}")
                continue
            if key == "classes" and len(val) > 20:
                val = ", ".join(val[:20]) + f", … ({len(val)} in all)"
            click.echo(f"{key:>14}: {val}")
    if problems:
        for p in problems:
            click.echo(f"damaged: {p}", err=True)
        sys.exit(1)


def _occupancy_lines(report: dict) -> list[str]:
    """collision_report as `name: value` lines (--json keeps the raw numbers)."""
    def number(n):
        return "unknown: every column is used" if n is None else f"{n:,}"

    used = f"{report['columns_used']:,} of {report['n_features']:,}"
    lines = [f"columns used: {used} ({_percent(report['occupancy'])})"]
    if "estimated_distinct_features" in report:  # hashed
        lines += [f"estimated distinct features: {number(report['estimated_distinct_features'])}",
                  f"estimated colliding share: {_percent(report['estimated_colliding_share'])}",
                  f"n_features for under 1 % colliding: {number(report['n_features_for_1pct'])}",
                  f"n_features for under 10 % colliding: {number(report['n_features_for_10pct'])}"]
    return lines


def _percent(share: float) -> str:
    return f"{100 * share:.3g} %"


# ----------------------------------------------------------------------------------------- train
@main.command()
@_quiet_option
@click.argument("store", type=click.Path())
@click.option("--solver", default=None, help="Solver name (see --list-solvers) [default: from --config, else stagewise].")
@click.option("--out", "-o", required=True, type=click.Path(), help="Run directory: model/, checkpoints/, metrics.jsonl.")
@click.option("--config", "config_file", type=click.Path(), default=None,
              help="YAML with `solver`, `params` and engine settings (see configs/).")
@click.option("--param", "-p", "params", multiple=True, help="Solver parameter KEY=VALUE (repeatable; overrides --config); "
              "VALUE None (or null) for a parameter whose default is None.")
@click.option("--scheduler", default=None, help="Join an existing Dask cluster at ADDRESS (tcp://host:8786) "
              "instead of starting an embedded local one.")
@click.option("--n-workers", type=int, default=None, help="Embedded cluster: worker processes [default: one per core]; 0 runs in this process without Dask.")
@click.option("--threads-per-worker", type=int, default=None, help="Embedded cluster: threads per worker [default: 1].")
@click.option("--worker-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Seconds without any Dask worker before the run fails (default 60).")
@click.option("--valid", type=click.Path(), default=None,
              help="A validation store (ingested --like STORE): its metrics go to metrics.jsonl as valid_*.")
@click.option("--valid-every", default=1, show_default=True, help="Validate every N solver steps.")
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in --out.")
@click.option("--overwrite", is_flag=True, help="Discard an earlier run's checkpoints and model in --out and start over.")
@click.option("--time-limit", default=None, metavar="DURATION",
              help="Stop cleanly at the first checkpoint after DURATION (e.g. 3600, 90m, 2h) and exit with "
                   "status 3; the same command with --resume (without --overwrite) continues. [default: none]")
@click.option("--list-solvers", is_flag=True, is_eager=True, expose_value=False, callback=lambda ctx, _, v: _list_solvers(ctx, v),
              help="List the solvers and their parameters, then exit.")
@click.pass_context
def train(ctx, store, solver, out, config_file, params, scheduler, n_workers, threads_per_worker, worker_timeout, valid,
          valid_every, resume, overwrite, time_limit):
    """Train a solver on STORE, checkpointing as it goes; --resume continues a killed run.

    \b
    Example:
      streamfit train train.zarr --solver stagewise -p block_size=512 -p n_passes=3 --out run/

    \b
    Exit status: 0 finished, 2 error (the message names the fix), 3 stopped at --time-limit.
    """
    from streamfit.config import load_train_config, parse_duration
    from streamfit.engine import WORKER_TIMEOUT
    from streamfit.train import train as run_train

    _refuse_resume_with_overwrite(ctx, resume, overwrite)
    cfg = load_train_config(config_file) if config_file else None
    solver = solver or (cfg.solver if cfg else None) or "stagewise"
    merged = dict(cfg.params) if cfg else {}
    merged.update(_parse_key_values(params, "--param"))
    model = run_train(
        store, solver, out, merged,
        scheduler=scheduler or (cfg.scheduler if cfg else None),
        n_workers=n_workers if n_workers is not None else (cfg.n_workers if cfg else None),
        threads_per_worker=threads_per_worker or (cfg.threads_per_worker if cfg and cfg.threads_per_worker else 1),
        worker_timeout=worker_timeout or (cfg and cfg.worker_timeout) or WORKER_TIMEOUT,
        resume=resume, overwrite=overwrite, progress=_progress(ctx), valid=valid, valid_every=valid_every,
        time_limit=parse_duration(time_limit, "--time-limit") if time_limit else (cfg.time_limit if cfg else None))
    click.echo(f"model written to {os.path.join(os.path.abspath(out), 'model')} ({len(model.classes_)} classes)")


def _list_solvers(ctx, value):
    if not value or ctx.resilient_parsing:
        return
    from streamfit.solvers import SOLVERS
    from streamfit.train import solver_params_help

    for name in sorted(SOLVERS):
        click.echo(f"{name}: {(SOLVERS[name].__doc__ or '').strip().splitlines()[0]}")
        for line in solver_params_help(name).splitlines():
            click.echo(f"    {line}")
    ctx.exit(0)


# -------------------------------------------------------------------------------------- evaluate
@main.command()
@_quiet_option
@click.argument("run_dir", type=click.Path())
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.pass_context
def evaluate(ctx, run_dir, store, as_json):
    """Score a trained model on a store: accuracy and macro-F1, or P@1/3/5 for multilabel."""
    from streamfit.metrics import evaluate as run_evaluate
    from streamfit.model import load_model
    from streamfit.store import open_store

    result = run_evaluate(load_model(run_dir), open_store(store), progress=_progress(ctx))
    click.echo(json.dumps(result, indent=1) if as_json else "  ".join(f"{k}={_fmt(v)}" for k, v in result.items()))


def _fmt(v):
    return f"{v:.4f}" if isinstance(v, float) else str(v)


# --------------------------------------------------------------------------------------- predict
@main.command()
@_quiet_option
@click.argument("run_dir", type=click.Path())
@click.argument("source", type=click.Path())
@click.option("--out", "-o", required=True, type=click.Path(), help="Output file: .csv or .jsonl.")
@click.option("--top-k", default=1, show_default=True, type=click.IntRange(min=1),
              help="How many classes per row, best first (at most the number of classes).")
@click.option("--format", "fmt", default=None, help="Format of SOURCE when it is raw data (as for ingest).")
@click.option("--option", "options", multiple=True, help="Format option KEY=VALUE (as for ingest).")
@click.pass_context
def predict(ctx, run_dir, source, out, top_k, fmt, options):
    """Write the top classes and scores of every row of SOURCE (a store, or raw data that is
    read and featurized exactly as the training store was: the same field names and format
    options unless --option overrides them). Labels in raw data are not needed (and not read)."""
    from streamfit.model import load_model
    from streamfit.predict import predict_to_file

    n = predict_to_file(load_model(run_dir), source, out, top_k=top_k, fmt=fmt,
                        options=_parse_key_values(options, "--option"), progress=_progress(ctx))
    click.echo(f"{n} rows written to {out}")


# ------------------------------------------------------------------------------------------- run
@main.command()
@_quiet_option
@click.argument("pipeline", type=click.Path())
@click.option("--resume", is_flag=True, help="Keep finished stores and continue training from its newest checkpoint.")
@click.option("--overwrite", is_flag=True, help="Start over: replace the stores and the run directory.")
@click.option("--scheduler", default=None, help="Dask scheduler address for the training step.")
@click.option("--worker-timeout", type=click.FloatRange(min=0, min_open=True), default=None, metavar="SECONDS",
              help="Seconds without any Dask worker before training fails (overrides train.worker_timeout; default 60).")
@click.option("--time-limit", default=None, metavar="DURATION",
              help="Training stops cleanly at the first checkpoint after DURATION (e.g. 90m; overrides "
                   "train.time_limit) and the job exits with status 3; re-run with --resume (without "
                   "--overwrite) to continue.")
@click.pass_context
def run(ctx, pipeline, resume, overwrite, scheduler, worker_timeout, time_limit):
    """Run a pipeline file: ingest -> train -> evaluate as one job (see pipelines/)."""
    from streamfit.config import load_pipeline, parse_duration
    from streamfit.ingest.pipeline import IngestOptions
    from streamfit.ingest.pipeline import ingest as run_ingest
    from streamfit.metrics import evaluate as run_evaluate
    from streamfit.store import open_store
    from streamfit.train import train as run_train

    _refuse_resume_with_overwrite(ctx, resume, overwrite)
    cfg = load_pipeline(pipeline)
    progress = _progress(ctx)
    if cfg.ingest:
        i = cfg.ingest
        targets = [i.out] + ([i.test_out] if i.test_out else [])
        if resume and all(os.path.exists(os.path.join(t, "manifest.json")) for t in targets):
            click.echo(f"ingest: {i.out} exists, kept (--resume)")
            csc = open_store(i.out).manifest.csc
            if i.csc_block_features and (csc or {}).get("block_features") != i.csc_block_features:
                from streamfit.store.csc import build_csc

                build_csc(i.out, i.csc_block_features, progress=progress)
                click.echo(f"ingest: CSC copy of {i.out} built")
        else:
            hashing = None
            if not i.no_hash:
                from streamfit.ingest.hashing import HashingConfig

                hashing = HashingConfig(**i.hashing.model_dump())
            report = run_ingest(IngestOptions(
                paths=i.inputs, out=i.out, format=i.format, backend=i.backend, chunk_rows=i.chunk_rows, hashing=hashing,
                n_features=i.n_features, idf=i.idf, l2_normalize=i.l2_normalize, classes=i.classes,
                test_size=i.test_size, test_out=i.test_out, seed=i.seed, on_bad_record=i.on_bad_record,
                quarantine=i.quarantine, source_options=i.source_options, overwrite=overwrite or i.overwrite,
                csc_block_features=i.csc_block_features, progress=progress))
            click.echo(f"ingest: {report.summary()}")
    if cfg.ingest_test:
        i = cfg.ingest_test
        if resume and os.path.exists(os.path.join(i.out, "manifest.json")):
            click.echo(f"ingest_test: {i.out} exists, kept (--resume)")
        else:
            report = run_ingest(IngestOptions(
                paths=i.inputs, out=i.out, format=i.format, like=cfg.ingest.out, on_bad_record=i.on_bad_record,
                source_options=i.source_options, overwrite=overwrite, progress=progress))
            click.echo(f"ingest_test: {report.summary()}")
    if cfg.train:
        t = cfg.train
        run_train(t.store, t.solver, t.out, t.params, scheduler=scheduler or t.scheduler, n_workers=t.n_workers,
                  threads_per_worker=t.threads_per_worker, worker_timeout=worker_timeout or t.worker_timeout,
                  resume=resume, overwrite=overwrite, progress=progress,
                  valid=t.valid, valid_every=t.valid_every,
                  time_limit=parse_duration(time_limit, "--time-limit") if time_limit else t.time_limit)
        click.echo(f"train: model written to {os.path.join(t.out, 'model')}")
    if cfg.evaluate:
        from streamfit.model import load_model

        result = run_evaluate(load_model(cfg.train.out), open_store(cfg.evaluate.store), progress=progress)
        click.echo("evaluate: " + "  ".join(f"{k}={_fmt(v)}" for k, v in result.items()))


if __name__ == "__main__":
    main()
