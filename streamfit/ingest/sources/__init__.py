"""Source readers: streaming parsers that turn each input format into batches of records.

    with BadRecordPolicy("skip") as policy:
        for batch in open_source("train.svm.gz", policy=policy, batch_size=8192):
            ...  # SparseBatch: X, labels, locations

Options are keyword arguments of open_source; those of other formats are ignored, names no
format knows are a ConfigError, and so is a value of the wrong type (each option's type is the
one the readers declare) or one no reader can use (an empty name, an unknown encoding).
"""

from __future__ import annotations

import codecs
import csv
import difflib
import inspect
import logging
import os
import re
import types
import typing
from typing import Any

from pydantic import TypeAdapter, ValidationError

from streamfit.errors import ConfigError, InputError
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE, DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import COMPRESSIONS, open_binary, require_path, split_fields
from streamfit.ingest.sources.arff import ArffSource
from streamfit.ingest.sources.batches import DenseBatch, Source, SparseBatch, TextBatch
from streamfit.ingest.sources.delimited import CsvSource, TsvSource
from streamfit.ingest.sources.folder import ARCHIVE_SUFFIXES, FolderPart, FolderSource, container
from streamfit.ingest.sources.hdf5 import Hdf5Source
from streamfit.ingest.sources.jsonl import JsonlSource
from streamfit.ingest.sources.libsvm import LibsvmSource
from streamfit.ingest.sources.numpy_arrays import NumpySource
from streamfit.ingest.sources.parquet import ParquetSource
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.storage import is_url, resolve

__all__ = [
    "FORMATS",
    "BadRecordPolicy",
    "DenseBatch",
    "ReadLimits",
    "Source",
    "SparseBatch",
    "TextBatch",
    "infer_format",
    "open_source",
    "sniff_format",
]

FORMATS = {
    "libsvm": LibsvmSource,
    "jsonl": JsonlSource,
    "csv": CsvSource,
    "tsv": TsvSource,
    "folder": FolderSource,
    "parquet": ParquetSource,
    "hdf5": Hdf5Source,
    "numpy": NumpySource,
    "arff": ArffSource,
}

# Extensions that may also carry .gz/.bz2/.xz, and those that may not.
_STREAM_EXTENSIONS = {
    ".svm": "libsvm",
    ".libsvm": "libsvm",
    ".svmlight": "libsvm",
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".csv": "csv",
    ".tsv": "tsv",
    ".arff": "arff",
}
_FILE_EXTENSIONS = {".parquet": "parquet", ".h5": "hdf5", ".hdf5": "hdf5", ".npy": "numpy", ".npz": "numpy"}


def _options(cls) -> set[str]:
    """The format options of a source class: its keywords besides how (not what) it reads."""
    return {p.name for p in inspect.signature(cls).parameters.values() if p.kind is p.KEYWORD_ONLY} - {
        "policy",
        "batch_size",
        "limits",
        "numeric_targets",
        "byte_range",
        "row_groups",
        "folder_part",
        "held_in",
    }


_ALL_OPTIONS = set().union(*map(_options, FORMATS.values()))


def format_option_names() -> set[str]:
    """Every format option some format reads."""
    return set(_ALL_OPTIONS)


def format_option_flags(message: str, have: frozenset[str] = frozenset()) -> list[str]:
    """The command-line flags of format options (`text-field` for --text-field) that an error
    `message` names, in order, each once, less those in `have` (flags the command at hand takes)."""
    named = dict.fromkeys(re.findall(r"--([a-z][a-z-]*)", message))
    return [f for f in named if f.replace("-", "_") in _ALL_OPTIONS and f not in have]


def format_options(name: str) -> set[str]:
    """The format options that format `name` (a key of FORMATS) reads."""
    return _options(FORMATS[name])


def _option_types() -> dict[str, Any]:
    """Each format option's type as the readers declare it (an option means the same in every
    format that takes it, so the first reader's annotation stands for all)."""
    found: dict[str, Any] = {}
    for cls in FORMATS.values():
        parameters = inspect.signature(cls, eval_str=True).parameters
        for name in sorted(_options(cls)):
            found.setdefault(name, parameters[name].annotation)
    return found


_OPTION_TYPES = _option_types()
_TYPE_WORDS = {str: "text", bool: "true or false", type(None): "None"}


def _one_delimiter(value: str) -> None:
    if len(value) != 1 or value in '"\r\n':
        raise ValueError(value)


# value checks beyond the type: (check raising LookupError/ValueError, what a good value is)
_VALUE_CHECKS = {
    "encoding": (codecs.lookup, "a text encoding Python knows, e.g. utf-8 or latin-1"),
    "encoding_errors": (codecs.lookup_error, "a decode-error handler: strict, replace or ignore"),
    "text_field": (lambda v: split_fields("text_field", v), "a field name or comma-separated names, e.g. title,body"),
    "feature_fields": (
        lambda v: split_fields("feature_fields", v),
        "column names or numbers, comma-separated, e.g. f0,f1,f2",
    ),
    "delimiter": (_one_delimiter, "one character other than a quote or a line break, e.g. ';'"),
}


def check_options(options: dict) -> None:
    """ConfigError, naming the option and a good value, unless every format option is known,
    of its declared type (strictly: 1 is not the text "1") and usable: a text value is not
    empty, an encoding and a decode-error handler are known to Python, a --text-field or feature_fields
    list names no empty field."""
    unknown = sorted(set(options) - _ALL_OPTIONS)
    if unknown:
        close = [difflib.get_close_matches(name, sorted(_ALL_OPTIONS), n=1) for name in unknown]
        guesses = [f"{name} (did you mean {c[0]}?)" if c else name for name, c in zip(unknown, close)]
        raise ConfigError(
            f"unknown source option(s) {', '.join(guesses)}; the known ones are {', '.join(sorted(_ALL_OPTIONS))}"
        )
    for name, value in options.items():
        kind = _OPTION_TYPES[name]
        try:
            TypeAdapter(kind).validate_python(value, strict=True)
        except ValidationError:
            kinds = typing.get_args(kind) if typing.get_origin(kind) in (typing.Union, types.UnionType) else (kind,)
            expected = " or ".join(_TYPE_WORDS.get(k, getattr(k, "__name__", str(k))) for k in kinds)
            quote = " (quote a value such as 1 or true to pass it as text)" if str in kinds else ""
            raise ConfigError(f"format option {name}={value!r}: expected {expected}{quote}") from None
        if value == "":
            raise ConfigError(f"format option {name}: empty; give a value, or drop the option for its default")
        if name in _VALUE_CHECKS and value is not None:
            check, good = _VALUE_CHECKS[name]
            try:
                check(value)
            except (LookupError, ValueError):
                raise ConfigError(f"format option {name}={value!r}: not usable; expected {good}") from None


def infer_format(path: str) -> str | None:
    """The format a path's name (or being a directory) implies, None if it implies none.
    .txt is not inferred: too many formats use it. Behind a URL, a name ending in "/" (as
    `expand_inputs` names the folders it found) is a folder corpus, and a name that implies no
    format is looked up: a folder (prefix) is a folder corpus."""
    if os.path.isdir(path) or (is_url(path) and path.endswith("/")):
        return "folder"
    name = os.path.basename(path).lower()
    if name.endswith(ARCHIVE_SUFFIXES):
        return "folder"
    stem, ext = os.path.splitext(name)
    if ext in _FILE_EXTENSIONS:
        return _FILE_EXTENSIONS[ext]
    if ext in COMPRESSIONS:
        ext = os.path.splitext(stem)[1]
    found = _STREAM_EXTENSIONS.get(ext)
    if found is None and is_url(path) and resolve(path).isdir():
        return "folder"
    return found


_LIBSVM_PAIR = re.compile(r"^(\d+|qid):\S+$")


def sniff_format(path: str) -> str | None:
    """ "libsvm", "jsonl", "tsv" or "csv" from a file's first lines (decompressed by the name's
    .gz/.bz2/.xz), for names like dna.scale.gz or train.t that LIBSVM's own data sets use, or
    r8-train.txt.gz (`label<TAB>text`); None if none fits. Delimited: every one of the first 20
    lines has the same number (one or more) of tabs -> tsv; else the same number (two or more) of
    cells read as CSV -> csv."""
    if os.path.isdir(path):
        return None
    try:  # a folder behind a URL does not open: None (infer_format, asked first, names it)
        with open_binary(path) as f:
            head = f.read(1 << 16)
    except (InputError, OSError, EOFError):
        return None
    raw = head.decode("utf-8", "replace").splitlines()
    if len(head) == 1 << 16:
        raw = raw[:-1]  # may be cut short
    lines = [kept for kept in (ln.split("#")[0].strip() for ln in raw) if kept][:20]
    if not lines:
        return None
    if all(ln.startswith("{") for ln in lines):
        return "jsonl"
    pairs = [r if ":" in r[0] else r[1:] for r in (ln.split() for ln in lines)]  # a row may have no label
    if all(_LIBSVM_PAIR.match(t) for r in pairs for t in r) and any(pairs):
        return "libsvm"
    return _sniff_delimited([ln for ln in raw if ln.strip()][:20])


def _sniff_delimited(lines: list[str]) -> str | None:
    """ "tsv" or "csv" when every line has the same number of cells (see sniff_format)."""
    tabs = {ln.count("\t") for ln in lines}
    if len(tabs) == 1 and tabs != {0}:
        return "tsv"
    try:
        cells = {len(row) for row in csv.reader(lines)}
    except csv.Error:
        return None
    return "csv" if len(cells) == 1 and cells != {1} and cells != {0} else None


RANGE_FORMATS = ("libsvm", "jsonl")  # line-based formats whose lines stand alone (no header, no quoted newline)


def open_source(
    path: str,
    format: str | None = None,
    *,
    policy: BadRecordPolicy,
    batch_size: int = DEFAULT_BATCH_SIZE,
    limits: ReadLimits = DEFAULT_LIMITS,
    numeric_targets: bool = False,
    byte_range: tuple[int, int] | None = None,
    row_groups: tuple[int, int] | None = None,
    folder_part: FolderPart | None = None,
    **options,
) -> Source:
    """A Source reading path in the given format, or in the one its name implies; the formats
    read as byte streams (LIBSVM, JSONL, CSV/TSV, folders and archives) read within `limits`;
    the array formats (.npy/.npz, HDF5) read a 2-D y as several outputs with `numeric_targets`
    (ingest --target numeric), else as a multilabel indicator; the options are checked first
    (check_options). byte_range: bytes [start, stop) of an
    uncompressed LIBSVM or JSONL file, cut at line boundaries (RANGE_FORMATS); row_groups:
    row groups [start, stop) of a Parquet file; folder_part: files of a folder corpus or
    members of its archive (folder_parts) (pieces of a distributed ingest, see
    streamfit.ingest.distributed)."""
    check_options(options)
    path = os.fspath(path)
    choices = ", ".join(FORMATS)
    if format is None:
        format = infer_format(path)
        if format is None:
            require_path(path, directory_ok=True)  # "no such file" rather than "cannot tell the format"
            format = sniff_format(path)
            if format is None:
                raise InputError(
                    path,
                    "cannot tell the format from the file name or its first lines",
                    f"pass --format, one of: {choices}",
                )
            logging.getLogger(__name__).info("%s: read as %s (from its first lines)", path, format)
    elif format not in FORMATS:
        raise InputError(path, f"unknown format {format!r}", f"--format must be one of: {choices}")
    cls = FORMATS[format]
    accepted = _options(cls)
    kept = {k: v for k, v in options.items() if k in accepted}
    if "limits" in inspect.signature(cls).parameters:
        kept["limits"] = limits
    if "numeric_targets" in inspect.signature(cls).parameters:
        kept["numeric_targets"] = numeric_targets
    if byte_range is not None:
        if format not in RANGE_FORMATS:
            raise ValueError(f"{path}: {format} files are not read by byte range")
        kept["byte_range"] = byte_range
    if row_groups is not None:
        if format != "parquet":
            raise ValueError(f"{path}: {format} files have no row groups")
        kept["row_groups"] = row_groups
    if folder_part is not None:
        if format != "folder":
            raise ValueError(f"{path}: {format} files have no folder parts")
        kept["folder_part"] = folder_part
    return cls(path, policy=policy, batch_size=batch_size, **kept)


def folder_parts(
    path: str,
    part_bytes: int,
    limits: ReadLimits = DEFAULT_LIMITS,
    held_in: tuple[str, dict[str, Any] | None] | None = None,
    **options,
) -> list[FolderPart]:
    """A folder corpus (a directory, local or behind a URL, or an archive) cut into parts of
    about part_bytes of documents, read with the format options `options` (subset,
    class_folders): FolderSource.parts. held_in: `container(path)`, when the caller has it."""
    kept = {k: v for k, v in options.items() if k in _options(FolderSource)}
    held_in = held_in or container(path)
    kind, archive_info = held_in
    # a tar archive's layout is decided in its parts' own listing pass, not by opening it
    whole = FolderPart((), archive_info=archive_info) if kind == "tar" else None
    source = FolderSource(path, policy=BadRecordPolicy(), limits=limits, folder_part=whole, held_in=held_in, **kept)
    return source.parts(part_bytes)
