"""Typed, validated configuration: `streamfit run PIPELINE.yaml` and `streamfit train --config`.

A pipeline file has up to four sections, run in order: `ingest`, `ingest_test` (test files
ingested like the training store), `train`, `evaluate`.
Relative paths are resolved against the directory holding the YAML file, so a pipeline runs
the same from any working directory. Unknown keys are errors that name the key.
"""

from __future__ import annotations

import os
import re
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from streamfit.engine import WORKER_TIMEOUT
from streamfit.errors import ConfigError
from streamfit.store import DEFAULT_CHUNK_ROWS


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


_DURATION = re.compile(r"^\s*(\d+(?:\.\d*)?)\s*([smh]?)\s*$")


def parse_duration(text: str | float, what: str) -> float:
    """Seconds in "90", "90s", "30m" or "2h"; a bad value raises ConfigError naming `what`."""
    match = _DURATION.match(str(text))
    if not match or float(match[1]) <= 0:
        raise ConfigError(f"{what} {text!r}: expected a positive duration such as 3600, 90m or 2h")
    return float(match[1]) * {"": 1, "s": 1, "m": 60, "h": 3600}[match[2]]


class _TimeLimit(BaseModel):
    time_limit: float | None = Field(None, description="stop at the first checkpoint after this duration "
                                                       "(seconds, or e.g. 90m, 2h); resume continues")

    @field_validator("time_limit", mode="before")
    @classmethod
    def _seconds(cls, v):
        if v is None:
            return None
        try:
            return parse_duration(v, "time_limit")
        except ConfigError as e:
            raise ValueError(str(e)) from None


class HashingSection(_Strict):
    n_features: int = Field(2**18, description="number of hashed features (a power of two)")
    seed: int = Field(0, description="MurmurHash3 seed")
    alternate_sign: bool = Field(True, description="the hash's sign flips the value's sign")
    lowercase: bool = True
    ngram_range: tuple[int, int] = Field((1, 1), description="word n-grams, e.g. [1, 2]")
    value: Literal["count", "binary", "log1p"] = Field("count", description="term value transform")
    min_token_length: int = Field(2, ge=1, description="text words shorter than this are not hashed")


class IngestSection(_Strict):
    inputs: list[str] = Field(description="source files or folders")
    out: str = Field(description="the store to write")
    format: str | None = None
    backend: Literal["zarr", "parquet"] = "zarr"
    chunk_rows: int = DEFAULT_CHUNK_ROWS
    hashing: HashingSection = HashingSection()
    no_hash: bool = Field(False, description="keep numeric indices instead of hashing them")
    n_features: int | None = Field(None, description="with no_hash: fixed width (default: largest index + 1)")
    idf: bool = False
    l2_normalize: bool = False
    classes: list[str] | None = None
    test_size: float | None = None
    test_out: str | None = None
    seed: int = 0
    on_bad_record: Literal["error", "skip", "quarantine"] = "error"
    quarantine: str | None = None
    source_options: dict = Field(default_factory=dict, description="format options, e.g. text_field, label_field")
    overwrite: bool = False
    csc_block_features: int | None = Field(None, ge=1, description="also build a CSC copy of `out` in blocks of N features")


class IngestTestSection(_Strict):
    """Test data in its own files, ingested like the training store (same hashing, IDF, classes)."""

    inputs: list[str] = Field(description="source files or folders")
    out: str = Field(description="the test store to write")
    format: str | None = None
    source_options: dict = Field(default_factory=dict)
    on_bad_record: Literal["error", "skip", "quarantine"] = "error"


class TrainSection(_TimeLimit, _Strict):
    solver: str
    out: str
    params: dict = Field(default_factory=dict)
    store: str | None = Field(None, description="default: the ingest section's out")
    valid: str | None = Field(None, description="validation store whose metrics are logged per step")
    valid_every: int = 1
    scheduler: str | None = None
    n_workers: int | None = None
    threads_per_worker: int = 1
    worker_timeout: float = Field(WORKER_TIMEOUT, gt=0, description="seconds without any Dask worker before the run fails")


class EvaluateSection(_Strict):
    store: str | None = Field(None, description="default: the ingest section's test_out")


class PipelineConfig(_Strict):
    ingest: IngestSection | None = None
    ingest_test: IngestTestSection | None = None
    train: TrainSection | None = None
    evaluate: EvaluateSection | None = None


class TrainConfig(_TimeLimit, _Strict):
    """`streamfit train --config FILE`: the solver, its parameters and engine settings."""

    solver: str | None = None
    params: dict = Field(default_factory=dict)
    scheduler: str | None = None
    n_workers: int | None = None
    threads_per_worker: int | None = None
    worker_timeout: float | None = Field(None, gt=0, description="seconds without any Dask worker before the run "
                                         f"fails (default {WORKER_TIMEOUT:g})")


def _load_yaml(path: str) -> dict:
    try:
        with open(path) as f:
            data = yaml.safe_load(f)
    except FileNotFoundError:
        raise ConfigError(f"{path}: no such file") from None
    except yaml.YAMLError as e:
        raise ConfigError(f"{path}: not valid YAML ({e})") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of keys at the top level")
    return data


def _validate(cls, data: dict, path: str):
    try:
        return cls(**data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            key = ".".join(str(p) for p in err["loc"])
            problems.append(f"key '{key}': {err['msg']}")
        raise ConfigError(f"{path}: " + "; ".join(problems)) from None


def load_pipeline(path: str) -> PipelineConfig:
    cfg = _validate(PipelineConfig, _load_yaml(path), path)
    base = os.path.dirname(os.path.abspath(path))

    def resolve(p):
        return None if p is None else os.path.normpath(os.path.join(base, os.path.expanduser(p)))

    if cfg.ingest:
        cfg.ingest.inputs = [resolve(p) for p in cfg.ingest.inputs]
        cfg.ingest.out, cfg.ingest.test_out = resolve(cfg.ingest.out), resolve(cfg.ingest.test_out)
        cfg.ingest.quarantine = resolve(cfg.ingest.quarantine)
    if cfg.ingest_test:
        if not cfg.ingest:
            raise ConfigError(f"{path}: key 'ingest_test' needs an 'ingest' section to take its settings from")
        cfg.ingest_test.inputs = [resolve(p) for p in cfg.ingest_test.inputs]
        cfg.ingest_test.out = resolve(cfg.ingest_test.out)
    if cfg.train:
        _check_params(cfg.train.solver, cfg.train.params, path, "train.params")
        cfg.train.out = resolve(cfg.train.out)
        cfg.train.valid = resolve(cfg.train.valid)
        cfg.train.store = resolve(cfg.train.store) or (cfg.ingest.out if cfg.ingest else None)
        if cfg.train.store is None:
            raise ConfigError(f"{path}: key 'train.store' is needed when there is no ingest section")
    if cfg.evaluate:
        default = cfg.ingest_test.out if cfg.ingest_test else (cfg.ingest.test_out if cfg.ingest else None)
        cfg.evaluate.store = resolve(cfg.evaluate.store) or default
        if cfg.evaluate.store is None:
            raise ConfigError(f"{path}: key 'evaluate.store' is needed (or ingest.test_out, or an ingest_test section)")
        if cfg.train is None:
            raise ConfigError(f"{path}: an evaluate section needs a train section")
    return cfg


def _check_params(solver: str, params: dict, path: str, key: str) -> None:
    """The solver's parameters validated when the file is read, before any step runs (a pipeline
    would otherwise ingest first and fail only at its train step)."""
    from streamfit.train import make_params

    try:
        make_params(solver, params)
    except ConfigError as e:
        raise ConfigError(f"{path}: key '{key}': {e}") from None


def load_train_config(path: str) -> TrainConfig:
    cfg = _validate(TrainConfig, _load_yaml(path), path)
    if cfg.solver is not None:
        _check_params(cfg.solver, cfg.params, path, "params")
    return cfg
