"""Typed, validated configuration: `streamfit run PIPELINE.yaml` and `streamfit train --config`.

A pipeline file has up to five sections, run in order: `ingest`, `ingest_test` (test files
ingested like the training store), `train`, `evaluate` (its results also go to
RUN_DIR/evaluation.json) and `predict` (scores raw data or a store into a .csv/.jsonl/.parquet file).
In paths, ~ and environment variables ($DATA, ${DATA}) are expanded (an unset one is an
error), then relative paths are resolved against the directory holding the YAML file, so a
pipeline runs the same from any working directory. Unknown keys are errors that name the key. The sections
are built from the option declarations (streamfit.options): TrainOptions, ClusterOptions (evaluate)
and PredictOptions (predict) here, IngestOptions and HashingConfig in streamfit.ingest;
`train_options` is the command line's precedence over them.
`load_pipeline` validates a file against these schemas and returns the typed jobs it describes
(PipelineConfig: IngestOptions, TrainJob, EvaluateJob, PredictJob).
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import os
import re
import typing
from dataclasses import dataclass
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from streamfit.engine import AUTO_INPROCESS_WORK, DASHBOARD_ADDRESS, WORKER_TIMEOUT, Engine
from streamfit.errors import ConfigError
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.pipeline import IngestOptions
from streamfit.options import check_values, config_model, merge, option
from streamfit.runlog import DEFAULT_VALID_EVERY

_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*$")


def _seconds(text: str | float) -> float | None:
    """Seconds in "90", "90s", "30m" or "2h" (0 included); None if the text is no such duration."""
    match = _DURATION.match(str(text))
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]] if match else None


def parse_duration(text: str | float, what: str) -> float:
    """Seconds in "90", "90s", "30m" or "2h"; a bad value raises ConfigError naming `what`."""
    seconds = _seconds(text)
    if seconds is None or seconds <= 0:
        raise ConfigError(f"{what} {text!r}: expected a positive duration such as 3600, 90m or 2h")
    return seconds


def parse_checkpoint_interval(text: str | float, what: str) -> float | str:
    """The word "auto", or seconds >= 0 in "0", "90", "90s", "5m" or "1h" (streamfit.schedule.TimedSchedule);
    a bad value raises ConfigError naming `what`."""
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    seconds = None if isinstance(text, bool) else _seconds(text)
    if seconds is None:
        raise ConfigError(f"{what} {text!r}: expected auto, 0 (every due step) or a duration such as 90s, 5m or 1h")
    return seconds


def parse_valid_every(text: str | int, what: str) -> int | str:
    """The word "auto" (streamfit.runlog.MetricsLog: validating takes at most 1/10 of the run), or
    a whole number N >= 1 of solver steps (every N-th step); a bad value raises ConfigError naming `what`."""
    if isinstance(text, str) and text.strip().lower() == "auto":
        return "auto"
    if isinstance(text, str) and text.strip().isdigit():
        text = int(text.strip())
    if not isinstance(text, int) or isinstance(text, bool) or text < 1:
        raise ConfigError(
            f"{what} {text!r}: expected auto (validation at most 10 % of the run) or a number of steps >= 1"
        )
    return text


def _check_valid_every(value: int | str, what: str) -> None:
    parse_valid_every(value, what)


def _check_checkpoint_interval(value: float | str, what: str) -> None:
    parse_checkpoint_interval(value, what)


def refuse_resume_with_overwrite(resume: bool, overwrite: bool) -> None:
    """The one rule for train's and run's --resume with --overwrite (the CLI, before any work, and
    streamfit.train.train): a ConfigError, since one continues a run and the other starts it over."""
    if resume and overwrite:
        raise ConfigError(
            "--resume and --overwrite contradict each other: drop --overwrite to continue the run "
            "(or --resume to start over)"
        )


def parse_threshold(text: str | float, what: str) -> float | str:
    """A multilabel decision threshold: a finite number, or "fit"; bad text raises ConfigError naming `what`."""
    if isinstance(text, str) and text.strip().lower() == "fit":
        return "fit"
    try:
        value = float(text)
    except (TypeError, ValueError):
        value = float("nan")
    if not math.isfinite(value):
        raise ConfigError(f"{what} {text!r}: expected a finite number such as 0 or 0.5, or 'fit'")
    return value


@dataclass
class TrainOptions:
    """What `streamfit train` runs besides STORE and --out: the solver, its parameters and the
    engine. Declared here once for train's and run's command line, the `train --config` file and
    a pipeline's train section; `streamfit.train.train` takes the engine options as keywords."""

    solver: str = option("stagewise", "Solver name (see --list-solvers)")
    params: dict = option(default_factory=dict, help="the solver's parameters (see --list-solvers)", flag="")
    scheduler: str | None = option(
        None,
        "Join an existing Dask cluster at ADDRESS (tcp://host:8786) instead of starting an embedded local one",
        metavar="ADDRESS",
    )
    n_workers: int | None = option(
        None,
        "Embedded cluster: worker processes; 0 runs in this process without Dask; unset (auto): in this "
        f"process when the store's non-zeros x classes <= {AUTO_INPROCESS_WORK:,}, the store is one chunk, the "
        "machine has at most 2 cores, the solver computes in the driver (bcd's memory mode) or, for stagewise, "
        "the predicted wall time in this "
        "process is at most a cluster's (from its rounds of tasks and their work: the log line says which), else "
        "one worker per core",
        ge=0,
        default_text="auto",
    )
    threads_per_worker: int = option(1, "Embedded cluster: threads per worker", ge=1)
    dashboard_address: str = option(
        DASHBOARD_ADDRESS,
        "Embedded cluster: where its Dask dashboard listens, HOST:PORT (this machine only by default; "
        "0.0.0.0:8787 opens it to the network); its URL is printed at the start",
        metavar="HOST:PORT",
    )
    worker_timeout: float = option(
        WORKER_TIMEOUT,
        f"Seconds without any Dask worker before the run fails (default {WORKER_TIMEOUT:g})",
        gt=0,
        metavar="SECONDS",
        show_default=False,
    )
    time_limit: float | None = option(
        None,
        "Stop cleanly after DURATION (seconds, or with s, m, h: 3600, 90m, 2h): the step under way when it passes "
        "is finished and saved (one step over at most; bcd chunks mode: one group's pass), then exit with status 3; "
        "the same command with --resume (without --overwrite) continues",
        metavar="DURATION",
        parse=parse_duration,
        default_text="none",
    )
    valid: str | None = option(
        None,
        "A validation store (ingested --like STORE): its metrics go to metrics.jsonl as valid_*; multiboost's "
        "early stopping (-p early_stopping=true) scores it instead of holding out training rows",
        metavar="PATH",
    )
    valid_every: int | str = option(
        DEFAULT_VALID_EVERY,
        "With --valid: validate every N solver steps, or auto: a step once 9x the last validation's duration has "
        "passed, so validating takes at most 10 % of the run (the first step validated too); the last step always",
        metavar="N|auto",
        parse=parse_valid_every,
        check=_check_valid_every,
    )
    checkpoint_every: int = option(
        1,
        "A checkpoint is due every N solver steps (and saved after the last); a kill loses at most the steps "
        "since the last one saved (ppdsparse puts a save off while finished groups wait to be taken in)",
        ge=1,
    )
    checkpoint_interval: float | str = option(
        "auto",
        "Save a due checkpoint only once DURATION (seconds, or with s, m, h: 30, 90s, 5m) has passed since the "
        "last save; 0: every due step; auto: 9x the last save's duration, so saves take at most 10 % of the run. Init, the last step and "
        "the first step past --time-limit are always saved; the model is the same for any value",
        metavar="DURATION",
        parse=parse_checkpoint_interval,
        check=_check_checkpoint_interval,
    )
    threshold: float | str | None = option(
        None,
        "Multilabel: a label is predicted when its score is > T. train saves T in the model, for predict and "
        "evaluate; these take a T to try without retraining; train --threshold fit --valid STORE saves "
        "the T of the best micro-F1 on STORE",
        metavar="T",
        parse=parse_threshold,
        default_text="the model's: for stagewise's probabilities the best micro-F1 on the training rows' held-out scores, "
        "for ppdsparse's margins the best micro-F1 on the training rows (-p fit_threshold=false: 0), else 0",
    )

    def __post_init__(self):
        check_values(self)  # the declared bounds, for values set from Python too

    def engine(self) -> dict:
        """The keywords of streamfit.train.train besides solver and params."""
        return {k: v for k, v in dataclasses.asdict(self).items() if k not in ("solver", "params")}


@dataclass
class ClusterOptions:
    """Where `predict` and `evaluate` run their chunk tasks: in this process unless one of these
    is given (a small job needs no cluster; streamfit.engine.Engine)."""

    scheduler: str | None = option(
        None,
        "Score on an existing Dask cluster at ADDRESS (tcp://host:8786); its workers read a store by its URL "
        "(s3://...) or a path they share and get the model once (predict's raw input: in batches from this process)",
        metavar="ADDRESS",
    )
    n_workers: int | None = option(
        None,
        "Score on an embedded local Dask cluster of N worker processes; 0: in this process (as unset)",
        ge=0,
        default_text="in this process",
    )

    def __post_init__(self):
        check_values(self)

    def engine(self, progress: bool = False) -> Engine:
        """The Engine these options name (started by its `with` block)."""
        mode = "local" if self.n_workers else "inprocess"
        return Engine(self.scheduler, mode=mode, n_workers=self.n_workers, progress=progress)


@dataclass
class PredictOptions(ClusterOptions):
    """`predict`'s options besides what it scores and where it writes: where it runs
    (ClusterOptions) and whether the output is one file or parts (streamfit.predict)."""

    parts: bool = option(
        False,
        "Write the output (--out) as a directory: one part per store chunk or input batch (part-00000.csv, ...) "
        "in input order, and manifest.json (rows and SHA-256 of each part), committed atomically",
    )


def train_options(config: TrainOptions | BaseModel | None, command_line: dict) -> TrainOptions:
    """The one precedence rule of `train --config` and `run`: the command line (`command_line`:
    the options given there, None where not) beats the config file or pipeline section
    (`config`: a TrainConfig, None where a key is not set; or a pipeline's TrainJob.options)
    beats TrainOptions' defaults; solver parameters merge key by key (a -p KEY=VALUE overrides
    that key of the file's `params`)."""
    if config is None:
        layer = {}
    elif isinstance(config, TrainOptions):
        layer = dataclasses.asdict(config)
    else:
        layer = config.model_dump()
    return merge(TrainOptions, layer, command_line, by_key=("params",))


# The YAML schemas, built from the declarations by create_model: mypy sees them as type[BaseModel]
# only, so load_pipeline turns a validated file into the typed jobs below (IngestOptions, TrainJob).
HashingSection: type[BaseModel] = config_model(
    "HashingSection", HashingConfig, "A pipeline's ingest.hashing: the hashing transform."
)
IngestSection: type[BaseModel] = config_model(
    "IngestSection",
    IngestOptions,
    "A pipeline's ingest section: IngestOptions in YAML.",
    hashing=(HashingSection, Field(HashingSection(), description="the hashing transform")),
    no_hash=(bool, Field(False, description="keep numeric indices instead of hashing them")),
)
IngestTestSection: type[BaseModel] = config_model(
    "IngestTestSection",
    IngestOptions,
    "Test data in its own files, ingested like the training store (same hashing, IDF, classes).",
    only=("inputs", "out", "format", "source_options", "on_bad_record", "n_workers", "scheduler"),
)
TrainSection: type[BaseModel] = config_model(
    "TrainSection",
    TrainOptions,
    "A pipeline's train section: TrainOptions, the run directory and the store.",
    out=(str, Field(description="the run directory")),
    store=(str | None, Field(None, description="default: the ingest section's out")),
)
TrainConfig: type[BaseModel] = config_model(
    "TrainConfig",
    TrainOptions,
    "`streamfit train --config FILE`: TrainOptions, each unset key taken from the command line or the default.",
    unset_is_none=True,
)


EvaluateSection: type[BaseModel] = config_model(
    "EvaluateSection",
    ClusterOptions,
    "A pipeline's evaluate section: the store scored, and where (ClusterOptions).",
    store=(str | None, Field(None, description="default: the ingest section's test_out")),
)


EVALUATION_FILE = "evaluation.json"  # in the run directory: what the evaluate section scored
PREDICTIONS_FILE = "predictions.csv"  # in the run directory: the predict section's default out


PredictSection: type[BaseModel] = config_model(
    "PredictSection",
    PredictOptions,
    "A pipeline's predict section: what is scored, where it is written, and PredictOptions.",
    source=(str, Field(description="raw data (read like the training data) or a store to score")),
    out=(str | None, Field(None, description=f"a .csv, .jsonl or .parquet file; default: RUN_DIR/{PREDICTIONS_FILE}")),
    top_k=(int, Field(1, ge=1, description="classes per row, best first")),
    format=(  # the ingest sections' format names
        typing.get_type_hints(IngestOptions)["format"],
        Field(None, description="the format of source when it is raw data (as for ingest)"),
    ),
    options=(dict, Field(default_factory=dict, description="format options, e.g. id_field (as predict --option)")),
)


# each section optional, in the order they run (a dict: create_model's stubs take no union of variables)
_SECTIONS: dict[str, Any] = {
    name: (section | None, None)
    for name, section in (
        ("ingest", IngestSection),
        ("ingest_test", IngestTestSection),
        ("train", TrainSection),
        ("evaluate", EvaluateSection),
        ("predict", PredictSection),
    )
}
PipelineSchema: type[BaseModel] = create_model(
    "PipelineSchema", __config__=ConfigDict(extra="forbid"), __doc__="A pipeline file: its five sections.", **_SECTIONS
)


@dataclass
class TrainJob:
    """A pipeline's train section, loaded: the run directory, the store it trains on (paths
    resolved) and its TrainOptions (the command line's overrides are merged by train_options)."""

    out: str
    store: str
    options: TrainOptions


@dataclass
class EvaluateJob:
    """A pipeline's evaluate section, loaded: the run directory whose model is scored, the
    store, and where it is scored."""

    run_dir: str
    store: str
    cluster: ClusterOptions


@dataclass
class PredictJob:
    """A pipeline's predict section, loaded: the model's run directory, what to score, where to
    write it (streamfit.predict.predict_to_file's arguments), where it runs and whether in parts."""

    run_dir: str
    source: str
    out: str
    top_k: int
    format: str | None
    options: dict
    predict_options: PredictOptions


@dataclass
class PipelineConfig:
    """A pipeline file, validated, with paths resolved against its directory; None: no such section.
    `ingest_test` is IngestOptions with `like` the ingest section's `out`."""

    ingest: IngestOptions | None = None
    ingest_test: IngestOptions | None = None
    train: TrainJob | None = None
    evaluate: EvaluateJob | None = None
    predict: PredictJob | None = None


def yaml_problem(e: yaml.YAMLError) -> str:
    """A YAML error on one line: the problem and where (line and column, counted from 1)."""
    problem = getattr(e, "problem", None) or str(e)
    mark = getattr(e, "problem_mark", None)
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    return where + " ".join(problem.split())


def _load_yaml(path: str) -> dict:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({yaml_problem(e)})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    return data


def _validate(cls: type[BaseModel], data: dict, path: str) -> BaseModel:
    """cls(**data); a validation error is one ConfigError line naming the file and each bad key,
    with the closest known key for an unknown one ("did you mean")."""
    try:
        return cls(**data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            if err["type"] == "extra_forbidden":
                problems.append(f"key '{key}': {_unknown_key(cls, err['loc'])}")
            elif err["type"] in ("model_type", "dict_type"):
                unhashed = err["loc"][-1] == "hashing" and err["input"] is None  # as --no-hash reads
                hint = " (to keep numeric indices unhashed, as --no-hash does: no_hash: true)" if unhashed else ""
                problems.append(f"key '{key}': expected a mapping of keys (key: value), got {err['input']!r}{hint}")
            else:
                problems.append(f"key '{key}': {err['msg'].removeprefix('Value error, ')}")
        raise ConfigError(f"{path}: " + "; ".join(problems)) from None


# The command-line flags that a pipeline section spells otherwise, written as a key of the
# section: (the flag, how the section writes it). The closest key was guessed for them, which
# misled (`hash_seed` "did you mean seed?", the split's seed).
_INGEST_FLAG_KEYS = {
    "no_header": ("--no-header", "source_options: {header: false}"),
    "hash_seed": ("--hash-seed", "hashing: {seed: …}"),
    "ngram_max": ("--ngram-max N", "hashing: {ngram_range: [1, N]}"),
    "value": ("--value", "hashing: {value: …}"),
    "min_token_length": ("--min-token-length", "hashing: {min_token_length: …}"),
    "no_lowercase": ("--no-lowercase", "hashing: {lowercase: false}"),
    "no_alternate_sign": ("--no-alternate-sign", "hashing: {alternate_sign: false}"),
    "no_idf": ("--no-idf", "idf: false"),
    "no_l2_normalize": ("--no-l2-normalize", "l2_normalize: false"),
}
_TRAIN_FLAG_KEYS = {"p": ("-p KEY=VALUE", "params: {KEY: VALUE}"), "param": ("-p KEY=VALUE", "params: {KEY: VALUE}")}


def _flag_key(known: list[str], key: str) -> str | None:
    """Where a section (its keys `known`) takes the setting of the command-line flag that `key`
    spells, or None when `key` is no such flag's."""
    if "hashing" in known and key in _INGEST_FLAG_KEYS:  # the ingest section
        flag, written = _INGEST_FLAG_KEYS[key]
        return f"unknown key here; {flag} is written {written}"
    if "source_options" in known and key in _INGEST_FLAG_KEYS:  # ingest_test: the training store's settings
        flag, written = _INGEST_FLAG_KEYS[key]
        if written.startswith("source_options"):
            return f"unknown key here; {flag} is written {written}"
        return (
            "unknown key here; ingest_test reads its inputs as the ingest section's store was written "
            f"(hashing, IDF, normalization): set {flag} there, as {written}"
        )
    if "params" in known and key in _TRAIN_FLAG_KEYS:
        flag, written = _TRAIN_FLAG_KEYS[key]
        return f"unknown key here; {flag} is written {written}"
    return None


def _unknown_key(cls: type[BaseModel], loc: tuple) -> str:
    """'unknown key (did you mean X?); known here: ...' for the unknown key at `loc` in `cls`; for
    a command-line flag or a format option written as a key, where it goes instead."""
    section: Any = cls
    for part in loc[:-1]:  # the sections down to the one holding the key
        fields = getattr(section, "model_fields", None)
        if not fields or part not in fields:
            return "unknown key"
        kinds = [section.model_fields[part].annotation]
        kinds += list(typing.get_args(kinds[0]))
        section = next((k for k in kinds if isinstance(k, type) and issubclass(k, BaseModel)), None)
        if section is None:
            return "unknown key"
    known = list(section.model_fields)
    flag = _flag_key(known, str(loc[-1]))
    if flag:
        return flag
    # a format option written beside the section's own keys (predict's section names them `options`)
    options = next((name for name in ("source_options", "options") if name in known), None)
    if options:
        from streamfit.ingest.sources import format_option_names

        if str(loc[-1]) in format_option_names():
            return f"unknown key here; it is a format option: put it under {options} ({{{loc[-1]}: …}})"
    close = difflib.get_close_matches(str(loc[-1]), known, n=1)
    return "unknown key" + (f" (did you mean {close[0]}?)" if close else "") + f"; known here: {', '.join(known)}"


_ENV_VAR = re.compile(r"\$(\w+|\{[^}]*\})")
# format options that name a file: resolved as the section's paths are
_PATH_OPTIONS = ("labels_xml", "y_path")


def expand_path(p: str, base: str, where: str) -> str:
    """A pipeline path: ~ and $VAR / ${VAR} expanded, then, unless it is a URL (`s3://bucket/x`,
    kept as written), resolved against `base` (the pipeline file's folder); a variable that is
    not set is a ConfigError naming `where`."""
    from streamfit.storage import is_url

    missing = [m.strip("{}") for m in _ENV_VAR.findall(p) if m.strip("{}") not in os.environ]
    if missing:
        raise ConfigError(
            f"{where}: the environment variable {missing[0]} is not set (in {p!r}); set it, or write the path out"
        )
    expanded = os.path.expandvars(os.path.expanduser(p))
    if is_url(expanded):
        return expanded
    return os.path.normpath(os.path.join(base, expanded))


def load_pipeline(path: str) -> PipelineConfig:
    sections = _validate(PipelineSchema, _load_yaml(path), path).model_dump()
    base = os.path.dirname(os.path.abspath(path))

    def resolve(p: str, key: str) -> str:
        if p == "-":  # not a relative path to a file called -, which it would be
            raise ConfigError(
                f"{path}: key '{key}': - (standard input or output) is for the commands (streamfit ingest/predict "
                "-); a pipeline reads and writes files: name the file"
            )
        return expand_path(p, base, f"{path}: key '{key}'")

    def resolve_optional(p: str | None, key: str) -> str | None:
        return None if p is None else resolve(p, key)

    def resolve_options(options: dict, key: str) -> dict:
        return {
            k: resolve(v, f"{key}.{k}") if k in _PATH_OPTIONS and isinstance(v, str) else v for k, v in options.items()
        }

    cfg = PipelineConfig()
    if sections["ingest"]:
        values = sections["ingest"]
        hashing_values, no_hash = values.pop("hashing"), values.pop("no_hash")
        try:
            hashing = None if no_hash else HashingConfig(**hashing_values)
        except ValueError as e:
            raise ConfigError(f"{path}: key 'ingest.hashing': {e}") from None
        if hashing is not None and values["n_features"] is not None:  # the command line's --n-features sets either
            width = 1 << max(int(values["n_features"]) - 1, 1).bit_length()
            raise ConfigError(
                f"{path}: key 'ingest.n_features': the width of unhashed columns (with no_hash: true); a hashed "
                f"store's width is hashing: {{n_features: N}}, a power of two (e.g. {width})"
            )
        values.update(
            inputs=[resolve(p, "ingest.inputs") for p in values["inputs"]],
            out=resolve(values["out"], "ingest.out"),
            test_out=resolve_optional(values["test_out"], "ingest.test_out"),
            quarantine=resolve_optional(values["quarantine"], "ingest.quarantine"),
            source_options=resolve_options(values["source_options"], "ingest.source_options"),
        )
        cfg.ingest = _built(IngestOptions, path, "ingest", **values, hashing=hashing)
    if sections["ingest_test"]:
        if cfg.ingest is None:
            raise ConfigError(f"{path}: key 'ingest_test' needs an 'ingest' section to take its settings from")
        values = sections["ingest_test"]
        values.update(
            inputs=[resolve(p, "ingest_test.inputs") for p in values["inputs"]],
            out=resolve(values["out"], "ingest_test.out"),
            source_options=resolve_options(values["source_options"], "ingest_test.source_options"),
        )
        cfg.ingest_test = _built(IngestOptions, path, "ingest_test", **values, like=cfg.ingest.out)
    if sections["train"]:
        values = sections["train"]
        _check_solver(values["solver"], path, "train.solver")
        _check_params(values["solver"], values["params"], path, "train.params")
        store = resolve_optional(values.pop("store"), "train.store") or (cfg.ingest.out if cfg.ingest else None)
        if store is None:
            raise ConfigError(f"{path}: key 'train.store' is needed when there is no ingest section")
        out = resolve(values.pop("out"), "train.out")
        values["valid"] = resolve_optional(values["valid"], "train.valid")
        cfg.train = TrainJob(out=out, store=store, options=TrainOptions(**values))
    if sections["evaluate"]:
        default = cfg.ingest_test.out if cfg.ingest_test else (cfg.ingest.test_out if cfg.ingest else None)
        store = resolve_optional(sections["evaluate"]["store"], "evaluate.store") or default
        if store is None:
            raise ConfigError(f"{path}: key 'evaluate.store' is needed (or ingest.test_out, or an ingest_test section)")
        if cfg.train is None:
            raise ConfigError(f"{path}: an evaluate section needs a train section")
        cfg.evaluate = EvaluateJob(
            run_dir=cfg.train.out,
            store=store,
            cluster=ClusterOptions(sections["evaluate"]["scheduler"], sections["evaluate"]["n_workers"]),
        )
    if sections["predict"]:
        values = sections["predict"]
        if cfg.train is None:
            raise ConfigError(f"{path}: a predict section needs a train section")
        out = resolve_optional(values["out"], "predict.out") or os.path.join(cfg.train.out, PREDICTIONS_FILE)
        _check_format_options(values["options"], path, "predict.options")
        cfg.predict = PredictJob(
            run_dir=cfg.train.out,
            source=resolve(values["source"], "predict.source"),
            out=out,
            top_k=values["top_k"],
            format=values["format"],
            options=resolve_options(values["options"], "predict.options"),
            predict_options=PredictOptions(values["scheduler"], values["n_workers"], values["parts"]),
        )
    return cfg


def _built(cls, path: str, section: str, **values):
    """cls(**values), its ConfigError (a check of the whole section, e.g. its format options) naming the file and section."""
    try:
        return cls(**values)
    except ConfigError as e:
        raise ConfigError(f"{path}: section '{section}': {e}") from None


def _check_format_options(options: dict, path: str, key: str) -> None:
    """predict's format options checked when the file is read, as the ingest sections' are (known
    names, their types), so that a misspelled one stops the job before its first section."""
    from streamfit.ingest.sources import check_options

    try:
        check_options(options)
    except ConfigError as e:
        raise ConfigError(f"{path}: key '{key}': {e}") from None


def _check_solver(solver: str, path: str, key: str) -> None:
    """ConfigError naming the key, with the closest solver name, for an unknown solver."""
    from streamfit.solvers import SOLVER_NAMES

    if solver not in SOLVER_NAMES:
        close = difflib.get_close_matches(solver, SOLVER_NAMES, n=1)
        guess = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(
            f"{path}: key '{key}': unknown solver {solver!r}{guess}; available: {', '.join(SOLVER_NAMES)}"
        )


def _check_params(solver: str, params: dict, path: str, key: str) -> None:
    """The solver's parameters validated when the file is read, before any step runs (a pipeline
    would otherwise ingest first and fail only at its train step)."""
    from streamfit.train import make_params

    try:
        make_params(solver, params)
    except ConfigError as e:
        raise ConfigError(f"{path}: key '{key}': {e}") from None


def load_train_config(path: str) -> BaseModel:
    """`train --config FILE` as a TrainConfig: the keys the file sets, None for the others."""
    cfg = _validate(TrainConfig, _load_yaml(path), path)
    values = cfg.model_dump()
    if values["solver"] is not None:
        _check_solver(values["solver"], path, "solver")
        _check_params(values["solver"], values["params"] or {}, path, "params")
    return cfg
