"""The `streamfit` command: ingest, transpose, inspect, train, evaluate, predict, run, compile."""

from __future__ import annotations

from streamfit._collector import commit_process, imports_uncollected

with imports_uncollected():  # ~50 000 objects, nearly none of them garbage: not scanned (streamfit._collector)
    import atexit
    import contextlib
    import gc
    import json
    import logging
    import os
    import re
    import sys
    import threading
    import time
    import types
    import typing
    from typing import Literal, NoReturn

    import click
    from click.core import ParameterSource

    from streamfit import __version__, _numpy_tooling, environment

    _numpy_tooling.defer()  # before SciPy's import copies numpy's namespace: f2py, testing on first use
    from streamfit.config import (
        ClusterOptions,
        PredictOptions,
        TrainOptions,
        refuse_resume_with_overwrite,
        yaml_problem,
    )
    from streamfit.errors import (
        ConfigError,
        StreamfitError,
        Terminated,
        TimeLimitReached,
        exception_chain,
        os_error_hint,
        stdout_error,
    )
    from streamfit.ingest.hashing import HashingConfig
    from streamfit.ingest.pipeline import IngestOptions
    from streamfit.ingest.stdin import QUIET_S
    from streamfit.jobs import format_metric
    from streamfit.logs import ECHOED, json_on_stderr
    from streamfit.options import Declared, declared, merge

log = logging.getLogger("streamfit")


class _Command(click.Command):
    """A command whose own --help names stdout when writing it fails (`streamfit train --help >
    /dev/full`), as every result line does (_out): click writes that help while it parses the
    command's options, before the command runs, and nothing else there writes to a file without a
    name."""

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except BrokenPipeError:  # `streamfit train --help | head -1`: the CLI's rule ends it without a line
            raise
        except OSError as e:
            if e.filename is not None:
                raise
            raise stdout_error(e) from e


class _Group(click.Group):
    command_class = _Command

    def main(self, args=None, *rest, **kwargs):
        if args is None:  # the process's own command line (the console script, python -m): it exits after this
            gc.freeze()  # the modules imported so far (~50 000 objects): the collector's full passes skip them
            commit_process()  # and those imported later by streamfit._collector.imports_uncollected (numba's)
            atexit.register(_exit_without_collecting)
        try:
            return super().main(args, *rest, **kwargs)
        except OSError as e:  # click's own output before a command runs (--help, --version): stdout failed
            if isinstance(e, BrokenPipeError) or e.filename is not None:  # click's rule ends a closed pipe
                raise
            click.echo(f"error: {stdout_error(e)}", err=True)  # no logging yet: _fail's record would repeat it
            sys.exit(2)

    def parse_args(self, ctx, args):
        try:
            return super().parse_args(ctx, args)
        except click.exceptions.UsageError as e:  # a bad top-level option: one line, as every error
            click.echo(f"error: {_one_line(e.format_message())} (see streamfit --help)", err=True)
            sys.exit(2)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except Terminated as e:  # raised where stopping is safe, after a SIGTERM or SIGHUP (streamfit.shutdown)
            from streamfit import shutdown

            _fail(f"stopped: {shutdown.stop_reason()}; {e}{_without_overwrite(ctx, e)}")
            sys.exit(shutdown.exit_status(shutdown.stop_signal()))
        except TimeLimitReached as e:
            _fail(f"stopped: {e}{_without_overwrite(ctx, e)}")
            sys.exit(3)
        except KeyboardInterrupt:  # Ctrl-C: one line, as a SIGTERM's, and the shell's status for SIGINT
            _interrupted(ctx)
        except StreamfitError as e:
            _fail(f"error: {e}")
            sys.exit(2)
        except BrokenPipeError as e:
            if _stdout_closed():  # `streamfit train --list-solvers | head`: the reader has what it wanted
                sys.exit(141)  # as a process that SIGPIPE ended, without a line
            _fail(f"error: {e.strerror or e}; {os_error_hint(e)}")
            sys.exit(2)
        except OSError as e:  # the system refused a path or a write outside streamfit's writers (e.g. making --out)
            from streamfit.storage import client_error_message

            refused = client_error_message(e)  # an object store refused the request (credentials, permissions)
            if refused is not None:
                _fail(f"error: {refused}")
                sys.exit(2)
            _fail_at_memory_limit(ctx, e)
            where = f"{e.filename}: " if e.filename is not None else ""
            _fail(f"error: {where}{e.strerror or e}; {os_error_hint(e)}")
            sys.exit(2)
        except click.exceptions.UsageError as e:  # a bad option of a command: one line, as every error
            name = ctx.invoked_subcommand
            hint = f"see streamfit {name} --help" if name else "see streamfit --help"
            option = getattr(e, "option_name", None)
            if name and option in _GLOBAL_ONLY:  # `streamfit run job.yaml --log-file job.log`
                hint = f"{option} is an option of streamfit itself: put it before the command, streamfit {option} … {name} …"
            _fail(f"error: {_one_line(e.format_message())} ({hint})")
            sys.exit(2)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except MemoryError as e:  # an allocation the checks before it could not foresee (e.g. a solver's work arrays)
            _fail_at_memory_limit(ctx, e)
            name = ctx.invoked_subcommand or "streamfit"
            _fail(
                f"error: `streamfit {name}` ran out of memory; give it a machine or workers with more memory, or "
                "make the data's dimensions smaller (fewer hashed features, classes or rows per chunk)"
            )
            sys.exit(2)
        except Exception as e:  # a bug: one line for the user, the traceback with --verbose
            from streamfit.storage import client_error_message

            if _caused_by_interrupt(e):  # Ctrl-C inside a compiled kernel: numba's SystemError around it
                _interrupted(ctx)

            known = client_error_message(e)  # an object store's client refused (credentials, endpoint)
            if known is not None:
                _fail(f"error: {known}")
                sys.exit(2)
            _fail_at_memory_limit(ctx, e)
            if (ctx.obj or {}).get("verbose"):
                log.error("internal error", exc_info=True)
            name = ctx.invoked_subcommand or "streamfit"
            _fail(
                f"error: {type(e).__name__}: {_one_line(str(e))} (an internal error in `streamfit {name}`; "
                "please report it with the command; --verbose shows the traceback)"
            )
            sys.exit(2)


def _fail_at_memory_limit(ctx, e: BaseException) -> None:
    """One line and exit status 2 when `e` is what this process's memory limit caused (a library
    that failed to load, a MemoryError: streamfit.memory_limit); nothing otherwise."""
    from streamfit.memory_limit import limit_reached

    line = limit_reached(e, f"`streamfit {ctx.invoked_subcommand or 'streamfit'}` ran")
    if line is not None:
        _fail(line)
        sys.exit(2)


def _exit_without_collecting() -> None:
    """Run at the exit of a process that ran one command from its own command line: move every
    object the garbage collector tracks to its permanent generation (gc.freeze), so that the
    interpreter's finalization does not search the whole heap for reference cycles several times
    over (numba's and the other modules' objects, about 140 000 after a small job: 0.3-0.4 CPU s,
    nearly all of the process's shutdown). Registered as the command starts, it runs after the
    atexit handlers that the command's work registers, and before the logging module's flush
    of the log file (registered earlier). Objects outside cycles are still freed as the modules
    are cleared; what is no longer searched for is garbage cycles left at exit, whose memory the
    operating system takes back with the process. The command's outputs do not depend on them:
    every writer flushes, syncs and commits its files before the command returns.
    """
    gc.freeze()


def _stdout_closed() -> bool:
    """Whether stdout is a pipe whose reader has gone (`| head`: poll reports an error on the
    pipe's write end). If so, stdout is pointed at os.devnull, so that the interpreter's flush at
    exit does not fail again."""
    import select

    try:
        fd = sys.stdout.fileno()
        poller = select.poll()
        poller.register(fd, select.POLLOUT)
        gone = any(events & select.POLLERR for _, events in poller.poll(0))
    except (AttributeError, OSError, ValueError):  # no poll (Windows), or not a file (a test runner's stream)
        return False
    if gone:
        os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return gone


# streamfit's own options that a command does not take after its name (-v and -q it does)
_GLOBAL_ONLY = ("--log-file", "--log-format", "--version")

# what a command interrupted by Ctrl-C leaves: the writers' own cleanup on the way out (a store
# or output is committed only once complete; a run directory without a checkpoint is removed)
_INTERRUPTED_LEAVES = {
    "train": "the checkpoints saved so far are kept: the same command plus --resume continues from the last one",
    "run": "finished sections' stores and train's checkpoints are kept: the same command plus --resume continues",
    "ingest": "no store is left (nothing under --out looks complete); run it again",
    "predict": "no output is left; run it again",
    "evaluate": "evaluate writes nothing; run it again",
    "compile": "the kernels compiled so far stay in numba's cache; run it again for the others",
}


def _interrupted(ctx) -> NoReturn:
    """The line and exit status (130, the shell's for SIGINT) of a command stopped by Ctrl-C."""
    left = _INTERRUPTED_LEAVES.get(ctx.invoked_subcommand or "", "nothing complete is left; run it again")
    _fail(f"stopped: interrupted (Ctrl-C); {left}{_without_overwrite(ctx, left)}")
    sys.exit(130)


def _caused_by_interrupt(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt is in the chain of exceptions that led to `error` (a numba
    kernel interrupted by Ctrl-C raises SystemError "returned a result with an exception set",
    whose context is the KeyboardInterrupt)."""
    return any(isinstance(cause, KeyboardInterrupt) for cause in exception_chain(error))


def _without_overwrite(ctx, stop: BaseException | str) -> str:
    """What a stop's "--resume continues" (its exception or line) must add when the run was
    started with --overwrite, which --resume contradicts."""
    return " (and without --overwrite)" if "--resume" in str(stop) and ctx.obj.get("overwrite") else ""


def _fail(line: str) -> None:
    """The one line of a failed command: on stderr, and in the log file (--log-file) as well;
    with `--log-format json`, on stderr as a JSON record as every other line there. A stderr that
    cannot be written (a terminal that is gone: EIO) leaves the line in the log file alone."""
    if json_on_stderr():
        log.error(line)
        return
    with contextlib.suppress(OSError):
        click.echo(line, err=True)
    log.error(line, extra={ECHOED: True})


def _one_line(text: str) -> str:
    return " ".join(text.split())


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="streamfit")
@click.option("-v", "--verbose", is_flag=True, help="Log more detail (engine, checkpoints).")
@click.option("-q", "--quiet", is_flag=True, help="No progress bars; only results and errors.")
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False),
    default=None,
    help="Also write the log to this file (appended); stderr then shows only warnings and errors.",
)
@click.option(
    "--log-format",
    type=click.Choice(["text", "json"]),
    default="text",
    show_default=True,
    help="json: one JSON object per line (time, level, logger, message; a progress line's step, "
    "planned, elapsed_s, eta_s), for log collectors.",
)
@click.pass_context
def main(ctx, verbose, quiet, log_file, log_format):
    """Train large sparse linear classifiers (and least-squares regressors) on data bigger than
    memory. `streamfit COMMAND --help` explains each command's options.

    \b
    Typical job:
      streamfit ingest train.svm --no-hash --out train.zarr --test-size 0.2 --test-out test.zarr
      streamfit train train.zarr --solver stagewise --out run/
      streamfit evaluate run/ test.zarr
      streamfit predict run/ new.svm --top-k 3 --out predictions.csv
      streamfit predict run/ corpus.tar.gz --subset corpus/test --out predictions.csv
    or the first three from one file:  streamfit run pipelines/quickstart.yaml
    The solvers and their parameters:  streamfit train --list-solvers

    Ingest and training show their progress as one bar on a terminal, and as a line every few
    seconds (count, elapsed time, ETA) when stderr is a file or a pipe (batch jobs, CI logs).

    SIGTERM, and SIGHUP (the terminal closed; nohup avoids it), stop every command at the next
    safe point (train: after saving the step it is in, --resume continues; the others between
    chunks, leaving no partial output), with one line (in --log-file too) and exit status 143 or
    129; a SIGTERM after that, or STREAMFIT_SIGTERM_GRACE seconds after the first signal
    (default 30), ends the process at once.

    Exit status: 0 done; 1 inspect --verify found damage; 2 an error, one line naming the fix (a
    bad option too); 3 train or run stopped at --time-limit; 130 stopped by Ctrl-C (train keeps
    its checkpoints: --resume continues); 129 stopped by SIGHUP; 143 stopped by SIGTERM.
    """
    from streamfit.logs import configure, set_dask_level

    file_handler = configure(logging.INFO if verbose else logging.WARNING, log_file=log_file, fmt=log_format)
    environment.check()  # a bad cache size (the store and checkpoint modules read them at import)
    if ctx.invoked_subcommand is not None and threading.current_thread() is threading.main_thread():
        _guard_sigterm(ctx)
    if file_handler is not None:
        ctx.call_on_close(lambda: (logging.getLogger().removeHandler(file_handler), file_handler.close()))
    # what is about to be trained (and how big its dense weights would be), the dashboard's URL, the
    # progress lines, a pipeline's finished sections
    for name in _DEFAULT_INFO:
        logging.getLogger(name).setLevel(logging.INFO)
    ctx.obj = {"progress": sys.stderr.isatty(), "verbose": False, "quiet": False}
    set_dask_level(None)
    ctx.call_on_close(lambda: set_dask_level(None))  # -q lasts for this command only
    if verbose:
        _be_verbose(ctx.obj)
    if quiet:
        _be_quiet(ctx.obj)


_DEFAULT_INFO = ("streamfit.train", "streamfit.runlog", "streamfit.jobs")


def _guard_sigterm(ctx) -> None:
    """SIGTERM and SIGHUP (shutdown.STOP_SIGNALS), until the command ends, as a request to stop
    at the next safe point (exit 143, 129)."""
    from streamfit.shutdown import SigtermGuard, grace_seconds

    guard = SigtermGuard(grace_seconds())
    guard.install()
    ctx.call_on_close(guard.release)


def _be_quiet(obj: dict) -> None:
    """-q: no progress, no INFO lines, and none of Dask's log either (the CommClosedError tracebacks
    of a worker that goes away; the engine warns of a lost worker itself)."""
    obj["progress"], obj["quiet"] = False, True
    for name in _DEFAULT_INFO:
        logging.getLogger(name).setLevel(logging.NOTSET)
    from streamfit.logs import set_dask_level

    set_dask_level(logging.CRITICAL)  # here, and on the workers once Dask is imported and started


def _be_verbose(obj: dict) -> None:
    logging.getLogger().setLevel(logging.INFO)
    obj["verbose"] = True
    obj["progress"] = True


def _verbosity_options(command):
    """-q/--quiet and -v/--verbose after the subcommand as well as before it."""

    def flag(short: str, long: str, apply, help: str):
        def callback(ctx, _param, value):
            if value:
                apply(ctx.obj)

        return click.option(short, long, is_flag=True, expose_value=False, callback=callback, help=help)

    command = flag("-v", "--verbose", _be_verbose, "Log more detail (engine, checkpoints).")(command)
    return flag("-q", "--quiet", _be_quiet, "No progress bars; only results and errors.")(command)


def _kind(d: Declared):
    """The field's type without None: `int | None` -> int."""
    if typing.get_origin(d.type) in (typing.Union, types.UnionType):
        return next(k for k in typing.get_args(d.type) if k is not type(None))
    return d.type


def _click_type(d: Declared):
    """The click type of a declared field: a choice for a Literal, a range for a bounded number,
    text otherwise (a list: comma-separated; a field with `parse`: its text, parsed by it); (type, is_flag)."""
    kind = _kind(d)
    if d.option.parse is not None:
        return str, False
    if kind is bool:
        return None, True
    if typing.get_origin(kind) is Literal:
        return click.Choice(typing.get_args(kind)), False
    low, open_ = (d.option.ge, False) if d.option.ge is not None else (d.option.gt, d.option.gt is not None)
    if kind is int:
        return click.IntRange(min=int(low), min_open=open_) if low is not None else int, False
    if kind is float:
        return click.FloatRange(min=low, min_open=open_) if low is not None else float, False
    return str, False


def _click_help(d: Declared, is_flag: bool) -> str:
    o = d.option
    if is_flag and d.default is True:
        if o.off_help is None:
            raise TypeError(
                f"option {d.name!r}: a bool defaulting to True is offered as --no-...; declare its off_help"
            )
        return o.off_help
    text = o.help[:1].upper() + o.help[1:].rstrip(".") + "."
    shown = o.default_text if o.default_text is not None else d.default
    if o.show_default and not is_flag and not d.required and shown is not None:
        text += f" [default: {shown}]"
    return text


def _click_options(cls, *, only: tuple[str, ...] | None = None, exclude: tuple[str, ...] = (), prefix: str = ""):
    """The click options of dataclass `cls`'s declared fields (streamfit.options) that have a
    flag, under the parameter names prefix + field name. Each one's value is None where the
    command line does not give it, so that a config file or the field's default decides
    (streamfit.options.merge); a list field is given comma-separated."""

    def decorate(command):
        for d in reversed(declared(cls)):
            o = d.option
            if o.flag == "" or d.name in exclude or (only is not None and d.name not in only):
                continue
            kind, is_flag = _click_type(d)
            dashes = d.name.replace("_", "-")
            flag = o.flag or (f"--no-{dashes}" if is_flag and d.default is True else f"--{dashes}")
            decls = [flag] + ([o.short] if o.short else []) + [prefix + d.name]
            ranged = isinstance(kind, (click.IntRange, click.FloatRange))  # "N" reads better than INTEGER RANGE
            metavar = o.metavar or ("N" if isinstance(kind, click.IntRange) else "NUMBER" if ranged else None)
            # a required option gets no default: click 8.5 takes default=None for a value and skips the required check
            kw = dict(help=_click_help(d, is_flag), metavar=metavar, required=d.required)
            if not d.required:
                kw["default"] = None
            if is_flag:
                kw.update(is_flag=True, flag_value=not d.default)
            else:
                kw["type"] = kind
            kw["callback"] = _value_callback(o, flag, typing.get_origin(_kind(d)) is list)
            command = click.option(*decls, **kw)(command)
        return command

    return decorate


def _value_callback(o, flag: str, is_list: bool):
    """The click callback of a declared option: its text split at commas (a list) or parsed (o.parse),
    then checked (o.check); None where the command line does not give it."""

    def callback(_ctx, _param, value):
        if value is None or (is_list and not value):
            return None
        value = value.split(",") if is_list else o.parse(value, flag) if o.parse is not None else value
        if o.check is not None:
            o.check(value, flag)
        return value

    return callback


def _progress(ctx) -> bool:
    """Progress bars of single passes (ingest, evaluate, predict): on a terminal, or with -v."""
    return ctx.obj["progress"]


def _steps_progress(ctx) -> bool:
    """The progress of an ingest or a training run (a bar on a terminal, a line every few seconds
    otherwise): unless -q."""
    return not ctx.obj["quiet"]


def _refuse_resume_with_overwrite(ctx, resume: bool, overwrite: bool) -> None:
    """Checked before any work (config.refuse_resume_with_overwrite); remembered for the
    --time-limit stop message."""
    refuse_resume_with_overwrite(resume, overwrite)
    ctx.obj["overwrite"] = overwrite


# ---------------------------------------------------------------------------------------- ingest
# source options with a flag of their own (the rest go through --option KEY=VALUE)
_SOURCE_FLAGS = {
    "text_field": "Text field or column (JSONL/CSV/Parquet) [default: text]; comma-separate several fields to hash "
    "each in its own namespace; in JSONL, and of a Parquet struct column, a dotted path names a nested field "
    "(body.text).",
    "label_field": "Label field or column [default: label]; in JSONL, and of a Parquet struct column, a dotted path "
    "names a nested field (meta.topic).",
    "id_field": "CSV/TSV/JSONL/Parquet: a field or column whose value `predict` writes beside each prediction "
    "(recorded with the store).",
    "label_separator": "CSV: separator inside a multilabel label cell, e.g. '|', each label stripped of the white "
    "space around it [default: none, one label per cell].",
    "subset": "Folder corpus: the folder of class folders to read, e.g. 20news-bydate-train, or a nested one "
    "(ohsumed_single_23/training, or its last part: training).",
    "encoding": "Folder corpus, CSV/TSV: text encoding, e.g. latin-1 [default: utf-8].",
    "x_dataset": "HDF5/NPZ: the feature matrix dataset [default: X].",
    "y_dataset": "HDF5/NPZ: the label dataset [default: y].",
}
_HASHING = "hashing_"  # the click parameter names of HashingConfig's fields start with this


def _source_flags(command):
    for name, text in reversed(_SOURCE_FLAGS.items()):
        command = click.option(f"--{name.replace('_', '-')}", name, default=None, help=text)(command)
    command = click.option(
        "--no-header",
        "header",
        is_flag=True,
        flag_value=False,
        default=None,
        help="CSV/TSV: the file has no header row; --text-field and --label-field are then column numbers "
        "counted from 0 (e.g. --label-field 0 --text-field 1).",
    )(command)
    return click.option(
        "--zero-based", is_flag=True, default=None, help="LIBSVM: feature indices start at 0 (default: 1)."
    )(command)


# ingest's --format choices, which predict's --format takes too (IngestOptions.format: Literal[...] | None)
_INPUT_FORMATS = typing.get_args(
    typing.get_args(next(d.type for d in declared(IngestOptions) if d.name == "format"))[0]
)

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
        if not key.strip():
            raise ConfigError(f"{what} {pair!r}: the KEY before '=' is empty")
        try:
            out[key.strip()] = None if value.strip() in _NONE_WORDS else yaml.safe_load(value)
        except yaml.YAMLError as e:  # a tag such as !!python/object is refused by safe_load, never run
            raise ConfigError(
                f"{what} {pair!r}: VALUE is not a plain YAML value ({yaml_problem(e)}); quote it to pass text"
            ) from None
    return out


@main.command(short_help="Raw data (files, folders, URLs) -> a chunked, checksummed store.")
@_verbosity_options
@click.argument("inputs", nargs=-1, required=True, type=click.Path())
@_click_options(IngestOptions, only=("out", "format", "backend", "chunk_rows"))
@click.option(
    "--no-hash", is_flag=True, help="Keep numeric feature indices (LIBSVM, HDF5, NumPy, ARFF) instead of hashing."
)
@click.option(
    "--n-features",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help=f"Hashed width, a power of two [default: {HashingConfig.n_features}]; with --no-hash a fixed "
    "width, at most 2**31 - 1 (default: the width the input declares: an array's columns (NumPy, HDF5), "
    "an ARFF file's feature columns, --option feature_fields; LIBSVM and Parquet index lists declare "
    "none: the largest index + 1).",
)
@click.option(
    "--ngram-max",
    type=click.IntRange(min=1),
    default=None,
    metavar="N",
    help=f"Hash word n-grams for n = 1..NGRAM_MAX. [default: {HashingConfig.ngram_range[1]}]",
)
@_click_options(HashingConfig, prefix=_HASHING)
@_click_options(IngestOptions, exclude=("out", "format", "backend", "chunk_rows"))
@_source_flags
@click.option(
    "--option",
    "options",
    multiple=True,
    help="Any other format option, as KEY=VALUE (repeatable), e.g. n_labels=159 for a Mulan ARFF file.",
)
@click.pass_context
def ingest(ctx, inputs, no_hash, n_features, ngram_max, options, **values):
    """Turn raw data into a chunked, checksummed store.

    INPUTS are LIBSVM/SVMlight files (.gz/.bz2/.xz too), JSONL, CSV/TSV (with or without a
    header row; other names such as .txt.gz are recognised from their first lines), a folder (or
    a .tar.gz or .zip of one) with one sub-folder per class, ARFF (Weka/Mulan/Meka), Parquet, HDF5,
    or .npy/.npz; each local or behind a URL (s3://bucket/news/, a folder of documents, is a folder
    corpus). A .zip or .tar(.gz) holding one data file, at its top or in one folder (data.zip ->
    data.csv, with a README beside it; tar czf data.tgz data/), is read as that file, named
    data.zip:data.csv or data.tgz:data/data.csv (name one member so when it holds several). Text is hashed into
    --n-features columns; numeric indices are hashed too unless --no-hash. Text gets the recipe
    text classifiers do best on by default: log(1 + count) term values, IDF weights and rows of
    unit norm (--value count --no-idf --no-l2-normalize for raw counts); numeric features keep
    their values.

    An input - is standard input (give --format: jsonl, csv, tsv or libsvm; gzip, bzip2 or xz
    is recognised by its first bytes). Ingest reads its inputs more than once, so standard input
    is first copied to a temporary file in --tmp-dir (its size in the summary line; removed when
    the ingest ends, however it ends); not with --n-workers or --scheduler. The store is the one
    the same bytes in a file give; its manifest names the input <stdin>.

    \b
    Examples:
      streamfit ingest news.tar.gz --subset 20news-bydate-train --encoding latin-1 --out news.zarr
      streamfit ingest s3://bucket/news/ --subset train --out s3://bucket/news.zarr --n-workers 4
      streamfit ingest r8-train.txt.gz --no-header --label-field 0 --text-field 1 --out r8.zarr
      streamfit ingest test.svm --like train.zarr --out test.zarr
      aws s3 cp s3://bucket/day.jsonl.gz - | streamfit ingest - --format jsonl --like train.zarr --out day.zarr
    """
    from streamfit.ingest.pipeline import ingest as run_ingest

    if values["like"]:  # the options whose values `ingest --like` takes from the training store
        decided = {"no_hash", "n_features", "ngram_max", "idf", "l2_normalize", "classes"} | {
            name for name in values if name.startswith(_HASHING)
        }
        given = [
            p.opts[0]
            for p in ctx.command.params
            if p.name in decided and ctx.get_parameter_source(p.name) is not ParameterSource.DEFAULT
        ]
        if given:
            raise ConfigError(
                f"--like takes the hashing, width, IDF, normalization and classes from the training "
                f"store: drop {', '.join(given)}"
            )
    hashing_values = {name[len(_HASHING) :]: values.pop(name) for name in list(values) if name.startswith(_HASHING)}
    source_options = {name: values.pop(name) for name in [*_SOURCE_FLAGS, "zero_based", "header"]}
    source_options = {k: v for k, v in source_options.items() if v is not None} | _parse_key_values(options, "--option")
    hashing = None
    if not no_hash:
        try:
            hashing = merge(
                HashingConfig,
                hashing_values,
                {"n_features": n_features, "ngram_range": (1, ngram_max) if ngram_max else None},
            )
        except ValueError as e:  # named by the flag the user gave, not by the settings' class
            flags = {"n_features": "--n-features", "seed": "--hash-seed", "ngram_range": "--ngram-max"}
            raise ConfigError(
                re.sub(r"^HashingConfig: (\w+)=", lambda m: f"{flags.get(m[1], m[1])}=", str(e))
            ) from None
    report = run_ingest(
        merge(
            IngestOptions,
            values,
            {
                "inputs": list(inputs),
                "hashing": hashing,
                "n_features": n_features if no_hash else None,
                "source_options": source_options,
                "progress": _steps_progress(ctx),
            },
        )
    )
    _out(report.summary())


# ------------------------------------------------------------------------------------- transpose
@main.command(short_help="Build a store's column (CSC) copy in feature blocks.")
@_verbosity_options
@click.argument("store", type=click.Path())
@click.option(
    "--block-features",
    default=65536,
    show_default=True,
    type=click.IntRange(min=1),
    metavar="N",
    help="Columns per feature block (one block's nnz must fit in memory).",
)
@click.pass_context
def transpose(ctx, store, block_features):
    """Build (or rebuild) STORE's column copy: X cut into feature blocks stored as CSC.

    Out of core: one pass over the row chunks spills entries per block, then each block is
    sorted by column and written to STORE/csc/. The copy replaces an earlier one atomically.

    \b
    Example:
      streamfit transpose news.zarr --block-features 8192
    """
    from streamfit.store.csc import build_csc

    csc = build_csc(store, block_features, progress=_progress(ctx))
    nnz = sum(b["nnz"] for b in csc["blocks"])
    _out(f"{os.path.abspath(store)}: {len(csc['blocks'])} feature blocks of {block_features} columns, nnz {nnz}")


# --------------------------------------------------------------------------------------- inspect
@main.command(short_help="Describe a store; --verify re-checks every checksum.")
@_verbosity_options
@click.argument("store", type=click.Path())
@click.option(
    "--verify",
    is_flag=True,
    help="Re-read every chunk and CSC block, check its checksum and that it agrees with the manifest, "
    "the IDF weights' checksum, and (Zarr) that every zarr.json says what the writer writes, as "
    "zarr-python needs; exit 1 naming each damaged file (a damaged manifest.json: exit 2 naming the field).",
)
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--chunks", "show_chunks", is_flag=True, help="List every chunk (and CSC block).")
@click.option(
    "--occupancy",
    is_flag=True,
    help="Read every chunk and report how many columns are used; for hashed stores also the "
    "estimated distinct features, the share of them colliding, and the n_features that "
    "would keep collisions under 1 % / 10 %.",
)
@click.pass_context
def inspect(ctx, store, verify, as_json, show_chunks, occupancy):
    """Describe a store: shape, nnz, classes (and each one's rows), chunks, CSC blocks, hashing and format version
    (a regression store: its targets' shape and, per output, min, max, mean and std).

    \b
    Example:
      streamfit inspect news.zarr --verify --occupancy"""
    from streamfit.store import open_store

    s = open_store(store)
    m = s.manifest
    info = {
        "path": s.path,
        "format_version": m.format_version,
        "backend": m.backend,
        "n_rows": m.n_rows,
        "n_features": m.n_features,
        "nnz": m.nnz,
        "density": m.nnz / max(m.n_rows * m.n_features, 1),
        "task": m.task,
        "n_classes": len(m.classes),
        "classes": m.classes,
        "class_rows": m.class_rows,
        "target": m.target,
        "chunk_rows": m.chunk_rows,
        "n_chunks": len(m.chunks),
        "hashing": m.hashing,
        "transform": m.transform,
        "counts": m.counts,
        "source": m.source,
        "fingerprint": m.fingerprint,
    }
    info["csc"] = None
    if m.csc:
        info["csc"] = {
            "block_features": m.csc["block_features"],
            "n_blocks": len(m.csc["blocks"]),
            "nnz": sum(b["nnz"] for b in m.csc["blocks"]),
        }
    if s.regression:
        from streamfit.metrics import target_statistics

        info["target_stats"] = target_statistics(s)
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
        _out(json.dumps(info, indent=1))
    else:
        for key, val in info.items():
            if key == "occupancy":
                _out(f"{key:>14}:")
                for line in _occupancy_lines(val):
                    _out(f"{'':>16}{line}")
                continue
            if key == "classes" and len(val) > 20:
                val = ", ".join(val[:20]) + f", … ({len(val)} in all)"
            if key == "class_rows" and val is not None:  # rows per class: "name: rows", as classes shows them
                shown = ", ".join(f"{c}: {n}" for c, n in zip(m.classes[:20], val[:20]))
                val = shown + (f", … ({len(val)} in all)" if len(val) > 20 else "")
            if key == "source":
                val = _shown_source(val)
            _out(f"{key:>14}: {val}")
    if problems:
        for p in problems:
            if json_on_stderr():  # every line on stderr a JSON record
                log.error(f"damaged: {p}")
            else:
                click.echo(f"damaged: {p}", err=True)
        sys.exit(1)


def _shown_source(source: dict) -> dict:
    """A store's `source` as inspect's text shows it: an ARFF input's recorded feature header
    (format option `arff_header`, one entry per attribute: bibtex's 1836 made the line 40 kB)
    as its count and digest; --json gives it whole."""
    options = source.get("format_options") or {}
    header = options.get("arff_header")
    if not isinstance(header, dict):
        return source
    shown = f"{len(header.get('features') or [])} feature attributes, sha256 {str(header.get('sha256'))[:12]}…"
    return {**source, "format_options": {**options, "arff_header": shown}}


def _occupancy_lines(report: dict) -> list[str]:
    """collision_report as `name: value` lines (--json keeps the raw numbers)."""

    def number(n):
        return "unknown: every column is used" if n is None else f"{n:,}"

    used = f"{report['columns_used']:,} of {report['n_features']:,}"
    lines = [f"columns used: {used} ({_percent(report['occupancy'])})"]
    if "estimated_distinct_features" in report:  # hashed
        lines += [
            f"estimated distinct features: {number(report['estimated_distinct_features'])}",
            f"estimated colliding share: {_percent(report['estimated_colliding_share'])}",
            f"n_features for under 1 % colliding: {number(report['n_features_for_1pct'])}",
            f"n_features for under 10 % colliding: {number(report['n_features_for_10pct'])}",
        ]
    return lines


def _percent(share: float) -> str:
    return f"{100 * share:.3g} %"


# ----------------------------------------------------------------------------------------- train
def _param_help() -> str:
    from streamfit.solvers import all_solvers

    solvers = all_solvers()
    names = "; ".join(f"{name}: {', '.join(solvers[name].Params.model_fields)}" for name in sorted(solvers))
    return (
        "Solver parameter KEY=VALUE (repeatable; overrides --config); VALUE None (or null) for a parameter "
        f"whose default is None. Parameters ({names}); their values and defaults: --list-solvers."
    )


class _SolverParamOption(click.Option):
    """--param, whose help (every solver's parameter names) imports the solvers only when shown."""

    def get_help_record(self, ctx):
        self.help = _param_help()
        return super().get_help_record(ctx)


@main.command(short_help="Train a solver on a store, with checkpoints; --resume continues.")
@_verbosity_options
@click.argument("store", type=click.Path())
@click.option(
    "--out", "-o", required=True, type=click.Path(), help="Run directory: model/, checkpoints/, metrics.jsonl."
)
@click.option(
    "--config",
    "config_file",
    type=click.Path(),
    default=None,
    help="YAML with `solver`, `params` and the options below (see configs/); the command line overrides it.",
)
@click.option("--param", "-p", "params", multiple=True, cls=_SolverParamOption)
@_click_options(TrainOptions)
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in --out.")
@click.option(
    "--overwrite", is_flag=True, help="Discard an earlier run's checkpoints and model in --out and start over."
)
@click.option(
    "--list-solvers",
    is_flag=True,
    is_eager=True,
    expose_value=False,
    callback=lambda ctx, _, v: _list_solvers(ctx, v),
    help="List the solvers and their parameters (allowed values, default), then exit.",
)
@click.pass_context
def train(ctx, store, out, config_file, params, resume, overwrite, **options):
    """Train a solver on STORE, checkpointing as it goes; --resume continues a killed run.

    \b
    Example:
      streamfit train train.zarr --solver stagewise -p block_size=512 -p n_passes=3 --out run/

    \b
    Exit status: 0 finished, 2 error (the message names the fix), 3 stopped at --time-limit,
    130 stopped by Ctrl-C (the checkpoints saved so far kept; --resume continues),
    129 or 143 stopped by SIGHUP (the terminal closed) or SIGTERM (the step it was in saved;
    --resume continues).
    """
    from streamfit.config import load_train_config, train_options
    from streamfit.train import targets_counted
    from streamfit.train import train as run_train

    _refuse_resume_with_overwrite(ctx, resume, overwrite)
    cfg = load_train_config(config_file) if config_file else None
    o = train_options(cfg, {**options, "params": _parse_key_values(params, "--param")})
    model = run_train(
        store, o.solver, out, o.params, resume=resume, overwrite=overwrite, progress=_steps_progress(ctx), **o.engine()
    )
    from streamfit import storage

    _out(
        f"model written to {storage.absolute(storage.resolve(out).join('model').url)} "
        f"({targets_counted(len(model.classes_), model.regression)})"
    )


def _first_paragraph(doc: str) -> str:
    """The docstring's first paragraph, on one line."""
    return " ".join(doc.strip().split("\n\n")[0].split())


def _list_solvers(ctx, value):
    if not value or ctx.resilient_parsing:
        return
    from streamfit.solvers import all_solvers
    from streamfit.solvers.base import parameter_lines

    solvers = all_solvers()
    for name in sorted(solvers):
        _out(f"{name}: {_first_paragraph(solvers[name].__doc__ or '')}")
        for line in parameter_lines(solvers[name].Params):
            _out(f"    {line}")
    ctx.exit(0)


# -------------------------------------------------------------------------------------- evaluate
@main.command(short_help="A model's metrics on a store (accuracy, F1, P@k; RMSE, R²).")
@_verbosity_options
@click.argument("run_dir", type=click.Path())
@click.argument("store", type=click.Path())
@click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
@click.option("--per-label", is_flag=True, help="Also precision, recall, F1 and support of each class or label.")
@_click_options(TrainOptions, only=("threshold",))
@_click_options(ClusterOptions)
@click.pass_context
def evaluate(ctx, run_dir, store, as_json, per_label, threshold, scheduler, n_workers):
    """Score a trained model on a store with its decision rule: accuracy, macro- and micro-F1
    (multilabel: P@1/3/5 and the F1s of the labels scored above the threshold), log loss for
    models whose scores are probabilities; a regression model: RMSE, MAE and R² (per output when
    there are several). The chunks' sums are added in a fixed order: the same numbers in this
    process and on a Dask cluster (--n-workers, --scheduler).

    STORE is a store (raw data, standard input too, is ingested with --like TRAIN_STORE first).

    \b
    Examples:
      streamfit evaluate run/ test.zarr
      streamfit evaluate run/ test.zarr --per-label --json"""
    from streamfit.metrics import evaluate as run_evaluate
    from streamfit.model import load_model
    from streamfit.store import open_store

    if store == "-":
        raise ConfigError(
            "evaluate reads a store (rows with their labels), and - is standard input: ingest it like the training "
            "store first (... | streamfit ingest - --format jsonl --like TRAIN_STORE --out test.zarr), then evaluate "
            "that store"
        )
    model, source = load_model(run_dir), open_store(store)
    with ClusterOptions(scheduler, n_workers).engine(_progress(ctx)) as engine:
        result = run_evaluate(
            model,
            source,
            progress=_progress(ctx),
            threshold=_given_threshold(threshold),
            per_label=per_label,
            engine=engine,
            sigterm=f"{store}: not evaluated to the end (evaluate writes nothing); run the command again",
        )
    if as_json:
        _out(json.dumps(result, indent=1))
        return
    table = result.pop("per_label", None)
    _out("  ".join(f"{k}={format_metric(v)}" for k, v in result.items()))
    if table:
        width = max(len(name) for name in table)
        _out(f"{'class':<{width}}  precision  recall     f1  support")
        for name, row in table.items():
            _out(
                f"{name:<{width}}  {row['precision']:9.4f}  {row['recall']:6.4f}  {row['f1']:.4f}  {row['support']:7d}"
            )


def _given_threshold(threshold) -> float | None:
    """predict's and evaluate's --threshold: a number (None: the model's own)."""
    if threshold == "fit":
        raise ConfigError(
            "--threshold fit: fitting belongs to training (train --threshold fit --valid STORE); give a number here"
        )
    return threshold


# --------------------------------------------------------------------------------------- predict
@main.command(short_help="Top-k predictions of a model for a store or raw data.")
@_verbosity_options
@click.argument("run_dir", type=click.Path())
@click.argument("source", type=click.Path())
@click.option(
    "--out",
    "-o",
    required=True,
    type=click.Path(),
    help="Output file: .csv, .jsonl or .parquet (with --parts a directory of that name); - (or /dev/stdout) for "
    "stdout, /dev/stderr, or an existing FIFO or device (a named pipe, >(gzip > p.gz)): a stream (CSV, or "
    "--out-format jsonl), each batch written as it is scored: a failure part-way leaves the rows before it there and "
    "exits 2 (in a shell pipeline, set -o pipefail), and the count of rows goes to stderr.",
)
@click.option(
    "--out-format",
    type=click.Choice(["csv", "jsonl", "parquet"]),
    default=None,
    help="With --out -: what stdout gets, csv or jsonl (Parquet only to a file) [default: csv]; with a file, its "
    "suffix decides (this must agree).",
)
@click.option(
    "--top-k",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="How many classes per row, best first (at most the number of classes).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(_INPUT_FORMATS),
    default=None,
    help="Format of SOURCE when it is raw data (as for ingest) [default: inferred from the file name or its first "
    "lines; SOURCE - needs it: jsonl, csv, tsv or libsvm].",
)
@click.option(
    "--id-field",
    default=None,
    help="CSV/TSV/JSONL/Parquet: the field or column written beside each prediction as `id` [default: the training "
    "store's --id-field, if any].",
)
@click.option(
    "--subset",
    default=None,
    help="Folder corpus: the folder to score, named as for ingest: from the top of the archive (corpus/test) or by "
    "its last part (test) [default: every document]; class folders below it are optional.",
)
@click.option("--option", "options", multiple=True, help="Format option KEY=VALUE (as for ingest).")
@_click_options(TrainOptions, only=("threshold",))
@_click_options(PredictOptions)
@click.pass_context
def predict(
    ctx, run_dir, source, out, out_format, top_k, fmt, id_field, subset, options, threshold, scheduler, n_workers, parts
):
    """Write the top classes and scores of every row of SOURCE (a store, or raw data that is
    read and featurized exactly as the training store was: the same field names and format
    options unless --option overrides them; a file, a quoted glob or a dataset directory, as
    ingest reads its inputs); for a multilabel model also the predicted label
    set (the labels scored above the threshold); for a regression model the predicted value of
    each output. Labels in raw data are not needed (and not read). With --n-workers or
    --scheduler the rows are scored on Dask workers; the output is the same bytes. An input of
    zero records (an empty file or partition, a CSV of its header alone) writes an output of no
    rows (the CSV header line, an empty JSONL file, a Parquet file of the columns) with one
    warning, exit status 0.

    SOURCE - is standard input (give --format: jsonl, csv, tsv or libsvm; gzip, bzip2 or xz
    is recognised by its first bytes): read once, in this process, batch by batch (8192
    records), each batch scored and written before the next is read, so the first rows come
    out while the input still comes. Once the pipe has brought no byte for QUIET_S s, the
    records read so far are scored and written as a batch of their own: behind a slow producer
    (tail -f) a row comes within about that time of its record (a compressed stream: once the
    producer flushes its compressor; bzip2 a block at a time). Where batches are cut does not
    change the output. With --n-workers or --scheduler this process reads the batches and ships
    them to the workers. Rows are located as <stdin>:LINE.

    \b
    Examples:
      streamfit predict run/ new.svm --top-k 3 --out predictions.csv
      zcat day.jsonl.gz | streamfit predict run/ - --format jsonl --out - > preds.csv
      streamfit predict run/ corpus.tar.gz --subset corpus/test --out predictions.csv
      streamfit predict run/ big.zarr --out preds.parquet --parts --n-workers 4
      streamfit predict run/ new.jsonl --out - --out-format jsonl | gzip > preds.jsonl.gz"""
    from streamfit.model import load_model
    from streamfit.predict import predict_to_file, stream_name

    model = load_model(run_dir)
    how = PredictOptions(scheduler, n_workers, bool(parts))
    with _format_flags_as_options(ctx), how.engine() as engine:
        n = predict_to_file(
            model,
            source,
            out,
            top_k=top_k,
            fmt=fmt,
            options=_parse_key_values(options, "--option")
            | ({"id_field": id_field} if id_field else {})
            | ({"subset": subset} if subset is not None else {}),
            progress=_progress(ctx),
            model_dir=run_dir,
            threshold=_given_threshold(threshold),
            parts=how.parts,
            engine=engine,
            out_format=out_format,
        )
    stream = stream_name(out)
    if stream is not None:  # a stream holds the predictions: their count goes beside the log
        click.echo(f"{n} rows written to {stream}", err=True)
    else:
        _out(f"{n} rows written to {out}")


def _format_flags_as_options(ctx) -> typing.ContextManager[None]:
    """predict reads raw data with ingest's readers, whose errors name ingest's flags for a fix
    (`set --text-field`); a StreamfitError naming flags that predict lacks gains how predict takes
    them: `--option text_field=…`."""
    import contextlib

    from streamfit.ingest.sources import format_option_flags

    have = frozenset(o.lstrip("-") for p in ctx.command.params for o in p.opts)

    @contextlib.contextmanager
    def translated():
        try:
            yield
        except StreamfitError as e:
            flags = format_option_flags(str(e), have)
            if not flags:
                raise
            written = " ".join(f"--option {f.replace('-', '_')}=…" for f in flags)
            raise StreamfitError(f"{e} (predict takes {'it' if len(flags) == 1 else 'them'} as {written})") from e

    return translated()


predict.help = (predict.help or "").replace("QUIET_S", f"{QUIET_S:g}")  # the constant, defined in stdin.py


# ------------------------------------------------------------------------------------------- run
@main.command(short_help="Run a pipeline file: ingest, train, evaluate, predict.")
@_verbosity_options
@click.argument("pipeline", type=click.Path())
@click.option(
    "--resume",
    is_flag=True,
    help="Keep finished stores (only those ingested from the inputs and with the settings their sections give "
    "now) and continue training from the newest checkpoint (only with the train section's solver and parameters).",
)
@click.option("--overwrite", is_flag=True, help="Start over: replace the stores and the run directory.")
@_click_options(TrainOptions, exclude=("solver",))
@click.pass_context
def run(ctx, pipeline, resume, overwrite, **overrides):
    """Run a pipeline file: ingest (and ingest_test) -> train -> evaluate -> predict as one job, the
    sections it has (see pipelines/). The options below override the pipeline's train section.
    A local input, store or predict output that a later section would refuse (not there, a
    misspelled option) stops the job before its first section.

    --resume continues a run that stopped (killed, SIGTERM, SIGHUP, --time-limit, a failed section): it
    keeps each store that is complete and continues training from the run's newest checkpoint. A
    section edited since then is not resumed on what the earlier settings made: a store ingested
    from other inputs or with another setting of its section (hashing, values, IDF, normalization,
    label or text fields and the other format options, classes, target, split, chunk rows,
    backend, bad-record policy, ...; a setting written now and not then counts, even at its
    default), or a checkpoint of another solver or other parameters, stops the run with one line
    naming the store or checkpoint, what changed (old → new) and the fix: --overwrite, which
    starts over. The number of workers, --scheduler, batch_size and the evaluate and predict
    sections may change: they do not change a store or a model.

    \b
    Example:
      streamfit run pipelines/quickstart.yaml --overwrite"""
    from streamfit.config import load_pipeline
    from streamfit.jobs import run_pipeline

    _refuse_resume_with_overwrite(ctx, resume, overwrite)
    run_pipeline(
        load_pipeline(pipeline),
        overrides,
        resume=resume,
        overwrite=overwrite,
        progress=_progress(ctx),
        steps_progress=_steps_progress(ctx),
        say=_say,
    )


# --------------------------------------------------------------------------------------- compile
@main.command(name="compile", short_help="Compile the numba kernels ahead of a first job.")
@_verbosity_options
@click.option(
    "--solver",
    "solvers",
    multiple=True,
    metavar="NAME",
    help="Only this solver's kernels (repeat for more) [default: every solver's].",
)
@click.option(
    "--jobs",
    type=click.IntRange(min=1),
    default=None,
    help="Processes at a time [default: one per core].",
)
def compile_kernels(solvers, jobs):
    """Compile the numba kernels now, so that a solver's first job does not: its first use after
    installation otherwise compiles for tens of seconds (once; numba caches the machine code in
    NUMBA_CACHE_DIR if set, else in the package's __pycache__, or in numba's cache folder in the
    user's home where that is read-only). For images and CI: run it where the jobs
    will run (the cache is per CPU model). Each solver runs a tiny ingest, train (its main
    modes), evaluate, predict and estimator fit, in parallel processes; the ingest kernels
    (LIBSVM parser, text hashing) are always compiled.

    \b
    Examples:
      streamfit compile
      streamfit compile --solver stagewise --solver ppdsparse"""
    from streamfit.precompile import compile_targets, default_jobs
    from streamfit.solvers import SOLVER_NAMES

    unknown = [name for name in solvers if name not in SOLVER_NAMES]
    if unknown:
        raise ConfigError(f"--solver {unknown[0]}: no such solver; choose from {', '.join(SOLVER_NAMES)}")
    jobs = jobs or default_jobs()
    started = time.perf_counter()
    for target, seconds in compile_targets(["ingest", *(solvers or SOLVER_NAMES)], jobs):
        _out(f"compiled {target} in {seconds:.1f} s")
    _out(f"numba's cache filled in {time.perf_counter() - started:.1f} s ({jobs} processes at a time)")


def _out(text: str) -> None:
    """A line of a command's result, on stdout. A write there that fails (stdout a file on a full
    disk, /dev/full) is an OutputError naming stdout and the cause; a pipe whose reader has gone
    (`| head -1`) passes its BrokenPipeError on to the CLI's rule, which ends without a line."""
    try:
        click.echo(text)
    except BrokenPipeError:
        raise
    except OSError as e:
        raise stdout_error(e) from e


def _say(line: str) -> None:
    """A pipeline's line for a finished section: on stdout, and in the log (--log-file) as well."""
    _out(line)
    logging.getLogger("streamfit.jobs").info(line, extra={ECHOED: True})


if __name__ == "__main__":
    main()
