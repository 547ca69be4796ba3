"""Ingest inputs as a data engineer has them: files, globs and dataset directories, local or
behind a URL, expanded to the list of files that ingest reads, in sorted path order.

- A name with a glob character (`*`, `?`, `[`) is a pattern: `data/*.jsonl.gz`,
  `s3://bucket/logs/2024-*/part-*.parquet` (fsspec's glob for URLs, `**` crossing folders),
  expanded to the regular files it matches, sorted by path. No match is an InputError.
- A directory whose files all have a data format's extension (`.jsonl.gz`, `.parquet`, `.svm`,
  … as `infer_format` reads names; names starting with `.` or `_`, such as Spark's `_SUCCESS`
  and `_metadata`, are left out) is a dataset directory: its files, recursively, sorted by path
  (a Parquet dataset with hive partitions, `dataset/year=2024/part-0.parquet`, is one; the
  partition values become columns, see sources/parquet.py). Any other local directory stays
  one input: a folder corpus (one sub-folder per class), as before; so is a folder (prefix)
  behind a URL, named with a final "/" (`s3://bucket/news/`), which tells the steps after this
  one (the format, the reader) that it is a folder without asking the object store again; its
  reader takes the listing made here (sources.folder.hand_over_listing): one LIST per input.
  `--format folder` keeps every directory a folder corpus.
- A zip or tar archive whose members are one data file, at its top or in one top-level folder
  (data.zip holding data.csv, data.tgz holding data/data.csv, and perhaps a README; see
  sources/archive.py), is that file, named `data.zip:data.csv`; other archives are folder
  corpora, as before.
- `-` is standard input, named `<stdin>` from here on (streamfit/ingest/stdin.py); its format must be
  given (`--format`), one read from a stream. A file called `-` is `./-`; one called `<stdin>` is read as `./<stdin>`.
- Anything else is one input, as given.

The order is the sorted paths' (within each name given; the names in the order given), so the
same files give the same store whatever the listing order of the filesystem.
"""

from __future__ import annotations

import glob
import os
from typing import Any

from streamfit import storage
from streamfit.errors import InputError
from streamfit.ingest import stdin
from streamfit.ingest.sources.archive import data_member
from streamfit.ingest.sources.folder import hand_over_listing

GLOB_CHARACTERS = "*?["


def _hidden(name: str) -> bool:
    return name.startswith((".", "_"))


def _data_file(path: str) -> bool:
    from streamfit.ingest.sources import infer_format

    name = path.rstrip("/").rsplit("/", 1)[-1]
    return infer_format(name) not in (None, "folder")


def _local_directory_files(path: str) -> list[str] | None:
    """The data files under local directory `path`, sorted, or None when it is a folder corpus
    (a file without a data format's extension, or no file at all)."""
    files = []
    for root, dirs, names in os.walk(path):
        dirs[:] = [d for d in dirs if not _hidden(d)]
        for name in names:
            if _hidden(name):
                continue
            if not _data_file(name):
                return None
            files.append(os.path.join(root, name))
    return sorted(files) or None


def _url_listing(location: storage.Location) -> tuple[dict[str, dict[str, Any]], dict[str, Any] | None]:
    """The files below a name behind a URL taken as a folder (prefix), by path with fsspec's
    info (size, ...), {} for an object or nothing there; and the object's own info when the
    listing holds it (None otherwise). On S3 one listing (a LIST) of the keys that start with the
    name (s3fs's `find(parent, prefix=name)`; keys of other names that start with this one are
    dropped here); elsewhere a folder check (`Location.isdir`), then the folder's listing."""
    fs: Any = location.fs  # fsspec's filesystems carry no annotations
    path = location.path.rstrip("/")
    parent, _, name = path.rpartition("/")
    protocols = fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)
    if "s3" in protocols and parent:  # s3fs lists the keys afresh: no cached listing is read
        found = fs.find(parent, prefix=name, detail=True)
    else:
        found = fs.find(path, detail=True) if location.isdir() else {}
    below = {p: info for p, info in found.items() if p.startswith(path + "/") and info.get("type") != "directory"}
    own = found.get(path)
    return below, own if own is not None and own.get("type") == "file" else None


def _url_directory_files(text: str, location: storage.Location, below: list[str]) -> list[str] | None:
    """The data files under a folder (prefix) behind a URL (`below`: its files), sorted, or None
    when it is a folder corpus (a file without a data format's extension)."""
    fs: Any = location.fs
    path = location.path.rstrip("/")
    found = [p for p in below if not any(_hidden(part) for part in p[len(path) :].split("/"))]
    if not found:
        raise InputError(text, "an empty folder (prefix) behind a URL", "name a folder that holds files")
    if not all(_data_file(p) for p in found):
        return None
    return [fs.unstrip_protocol(p) for p in found]


def _glob(pattern: str) -> list[str]:
    if storage.is_url(pattern):
        location = storage.resolve(pattern)
        fs: Any = location.fs
        fs.invalidate_cache()
        matches = [fs.unstrip_protocol(p) for p in fs.glob(location.path) if fs.isfile(p)]
    else:
        matches = [p for p in glob.glob(pattern, recursive=True) if os.path.isfile(p)]
    if not matches:
        raise InputError(pattern, "no file matches this pattern", "check the pattern (quote it so the shell leaves it)")
    return sorted(matches)


def expand_inputs(inputs: list[str], format: str | None = None) -> list[str]:
    """The files ingest reads for the names given (see the module docstring), in order."""
    files: list[str] = []
    looked_up: dict[str, dict[str, Any]] = {}  # objects behind URLs as their listing gave them
    for text in inputs:
        if text == stdin.STDIN:
            if stdin.NAME in files:
                raise InputError(stdin.NAME, "named twice (-)", "standard input is read once: name it once")
            stdin.check_format(format)
            files.append(stdin.NAME)
        elif text == stdin.NAME:  # a file of that name, not standard input
            files.append(os.path.join(".", text))
        elif any(c in text for c in GLOB_CHARACTERS) and not os.path.exists(text):
            files += _glob(text)
        elif format == "folder":
            files.append(text)
        elif storage.is_url(text):
            location = storage.resolve(text)
            below, own = _url_listing(location)
            if own is not None:
                looked_up[text] = own
            if below:
                dataset = _url_directory_files(text, location, sorted(below))
                if dataset is None:  # a folder corpus: its reader takes this listing (one LIST per input)
                    hand_over_listing(location, below)
                files += dataset or [text.rstrip("/") + "/"]
            else:
                files.append(text)  # an object, or nothing there: the reader says which
        elif os.path.isdir(text):
            files += _local_directory_files(text) or [text]
        else:
            files.append(text)
    return [path if stdin.is_stdin(path) else data_member(path, format, looked_up.get(path)) for path in files]
