"""Source readers: streaming parsers that turn each input format into batches of records.

    with BadRecordPolicy("skip") as policy:
        for batch in open_source("train.svm.gz", policy=policy, batch_size=8192):
            ...  # SparseBatch: X, labels, locations

Options are keyword arguments of open_source; those of other formats are ignored, names no
format knows are a ConfigError.
"""

from __future__ import annotations

import inspect
import logging
import os
import re

from streamfit.errors import ConfigError, InputError
from streamfit.ingest.limits import DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import COMPRESSIONS, open_binary, require_path
from streamfit.ingest.sources.batches import DenseBatch, Source, SparseBatch, TextBatch
from streamfit.ingest.sources.delimited import CsvSource, TsvSource
from streamfit.ingest.sources.folder import TAR_SUFFIXES, FolderSource
from streamfit.ingest.sources.hdf5 import Hdf5Source
from streamfit.ingest.sources.jsonl import JsonlSource
from streamfit.ingest.sources.libsvm import LibsvmSource
from streamfit.ingest.sources.numpy_arrays import NumpySource
from streamfit.ingest.sources.parquet import ParquetSource
from streamfit.ingest.sources.policy import BadRecordPolicy

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
}
_FILE_EXTENSIONS = {".parquet": "parquet", ".h5": "hdf5", ".hdf5": "hdf5", ".npy": "numpy", ".npz": "numpy"}


def _options(cls) -> set[str]:
    """The format options of a source class: its keywords besides how (not what) it reads."""
    return {p.name for p in inspect.signature(cls).parameters.values() if p.kind is p.KEYWORD_ONLY} - {
        "policy",
        "batch_size",
        "limits",
    }


_ALL_OPTIONS = set().union(*map(_options, FORMATS.values()))


def infer_format(path: str) -> str | None:
    """The format a path's name (or being a directory) implies, None if it implies none.
    .txt is not inferred: too many formats use it."""
    if os.path.isdir(path):
        return "folder"
    name = os.path.basename(path).lower()
    if name.endswith(TAR_SUFFIXES):
        return "folder"
    stem, ext = os.path.splitext(name)
    if ext in _FILE_EXTENSIONS:
        return _FILE_EXTENSIONS[ext]
    if ext in COMPRESSIONS:
        ext = os.path.splitext(stem)[1]
    return _STREAM_EXTENSIONS.get(ext)


_LIBSVM_PAIR = re.compile(r"^(\d+|qid):\S+$")


def sniff_format(path: str) -> str | None:
    """ "libsvm" or "jsonl" from a file's first lines (decompressed by the name's .gz/.bz2/.xz),
    for names like dna.scale.gz or train.t that LIBSVM's own data sets use; None if neither fits."""
    if os.path.isdir(path):
        return None
    try:
        with open_binary(path) as f:
            head = f.read(1 << 16)
    except (InputError, OSError, EOFError):
        return None
    lines = head.decode("utf-8", "replace").splitlines()
    if len(head) == 1 << 16:
        lines = lines[:-1]  # may be cut short
    lines = [kept for kept in (ln.split("#")[0].strip() for ln in lines) if kept][:20]
    if not lines:
        return None
    if all(ln.startswith("{") for ln in lines):
        return "jsonl"
    pairs = [r if ":" in r[0] else r[1:] for r in (ln.split() for ln in lines)]  # a row may have no label
    if all(_LIBSVM_PAIR.match(t) for r in pairs for t in r) and any(pairs):
        return "libsvm"
    return None


def open_source(
    path: str,
    format: str | None = None,
    *,
    policy: BadRecordPolicy,
    batch_size: int = 8192,
    limits: ReadLimits = DEFAULT_LIMITS,
    **options,
) -> Source:
    """A Source reading path in the given format, or in the one its name implies; the formats
    read as byte streams (LIBSVM, JSONL, CSV/TSV, folders and archives) read within `limits`."""
    unknown = sorted(set(options) - _ALL_OPTIONS)
    if unknown:
        raise ConfigError(
            f"unknown source option(s) {', '.join(unknown)}; the known ones are {', '.join(sorted(_ALL_OPTIONS))}"
        )
    path = os.fspath(path)
    require_path(path, directory_ok=True)
    choices = ", ".join(FORMATS)
    if format is None:
        format = infer_format(path)
        if format is None:
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
    return cls(path, policy=policy, batch_size=batch_size, **kept)
