"""One data file in a zip archive, as data portals ship them (data.zip holding data.csv): read
as the file it holds, named by a member path `<archive>.zip:<member>` (data.zip:data.csv, local
or behind a URL: s3://bucket/data.zip:data.csv).

The input expansion (streamfit.ingest.inputs) turns a zip archive given as an input into the
member path of its data file (`data_member`) when its members, besides those ignored (folders,
names with a part starting with '.' and the `__MACOSX` folder macOS adds), all lie at its top
and exactly one of them is a data file by its name (as `infer_format` reads names: .csv, .tsv,
.jsonl, .svm, .arff, with or without .gz/.bz2/.xz); the others (README, LICENSE, notes) are
left out, and logged. With a format given (`--format csv`), a sole member is the data file
whatever its name (data.txt). Several data files are an InputError listing them: a member path
names the one to read. A zip archive with members in folders, or with no data file at its top,
is a folder corpus, as before (streamfit.ingest.sources.folder), and so is any archive with
`--format folder`.

A member path reads the member's bytes as they are stored (deflate, bzip2, lzma or stored;
decompressed by zipfile, CRC-checked at the end), then by its own name's .gz/.bz2/.xz; the
readers name records `data.zip:data.csv:LINE`. Parquet, HDF5 and NumPy members are not read
(their readers seek in a file): extract them. A member path is one piece of a distributed
ingest (its bytes are not cut), and the store is that of the extracted file.
"""

from __future__ import annotations

import io
import logging
import os
import re
import zipfile
from typing import Any

from streamfit import storage
from streamfit.errors import InputError
from streamfit.ingest.sources.folder import ZIP_SUFFIXES, _member_parts, _zip_kind, corrupt_archive, open_zip

_MEMBER_PATH = re.compile(r"^(.+?\.zip):(.+)$", re.IGNORECASE)
_IGNORED_FOLDERS = ("__MACOSX",)
_SEEKING_FORMATS = ("parquet", "hdf5", "numpy")  # readers that seek in a file: not read from a member


def split_member(path: str) -> tuple[str, str] | None:
    """(archive, member) of a member path `<archive>.zip:<member>`; None for any other path
    (a local file of that very name is a file)."""
    found = _MEMBER_PATH.match(path)
    if found is None or (not storage.is_url(path) and os.path.exists(path)):
        return None
    return found.group(1), found.group(2)


def _ignored(parts: list[str]) -> bool:
    return not parts or any(p.startswith(".") or p in _IGNORED_FOLDERS for p in parts)


def data_member(path: str, format: str | None = None) -> str:
    """The member path of the data file that the zip archive at `path` holds (see the module
    docstring), or `path` itself when it is read as a folder corpus (or is no zip archive)."""
    from streamfit.ingest.sources import infer_format  # the package imports this module

    if format == "folder" or not path.lower().endswith(ZIP_SUFFIXES) or split_member(path) is not None:
        return path
    if not (storage.is_url(path) or os.path.isfile(path)):
        return path  # nothing there (the reader says so) or a directory named *.zip
    zf = open_zip(path)
    try:
        names = [info.filename for info in zf.infolist() if not info.is_dir()]
    finally:
        _close(zf)
    members = [n for n in names if not _ignored(_member_parts(n)[0])]
    if not members or any(len(_member_parts(n)[0]) > 1 for n in members):
        return path  # class folders, or flat documents: a folder corpus
    data = [n for n in members if infer_format(n) not in (None, "folder")]
    if format is not None and not data and len(members) == 1:
        data = members
    if not data:
        return path
    if len(data) > 1:
        listed = ", ".join(data[:10]) + (", ..." if len(data) > 10 else "")
        raise InputError(
            path,
            f"holds {len(data)} data files ({listed})",
            f"name the one to read as {path}:{data[0]} (each as an input to read several), or extract them",
        )
    kind = format or infer_format(data[0])
    if kind in _SEEKING_FORMATS:
        raise InputError(path, f"holds the {kind} file {data[0]}, which is not read from an archive", "extract it")
    others = sorted(set(members) - set(data))
    if others:
        logging.getLogger(__name__).info("%s: reading %s; left out: %s", path, data[0], ", ".join(others))
    return f"{path}:{data[0]}"


class _MemberStream(io.RawIOBase):
    """A zip member's bytes (zipfile's stream); closing it closes the archive and its file."""

    def __init__(self, zf: zipfile.ZipFile, member: zipfile.ZipInfo, path: str):
        self._zf = zf
        self._file = zf.fp
        self._path = path
        try:
            self._stream = zf.open(member)
        except (RuntimeError, NotImplementedError) as e:  # encrypted; a compression zipfile cannot read
            self.close()
            raise InputError(path, f"the member cannot be read ({e})", "re-create the archive, with deflate") from None
        except (zipfile.BadZipFile, EOFError, OSError) as e:
            self.close()
            raise corrupt_archive(path, e) from None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self._stream.read(len(buffer))
        except zipfile.BadZipFile as e:  # a CRC-32 mismatch at the member's end
            raise corrupt_archive(self._path, e) from None
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            for item in (getattr(self, "_stream", None), self._zf, self._file):
                if item is not None:
                    item.close()
        super().close()


def _close(zf: zipfile.ZipFile) -> None:
    """Close the archive and the file it was opened from (ZipFile leaves a given file open)."""
    file = zf.fp
    zf.close()
    if file is not None:
        file.close()


def open_member(path: str, info: dict[str, Any] | None = None) -> io.RawIOBase:
    """The stored bytes (decompressed by zipfile) of the member that member path `path` names;
    InputError when the archive lacks it or it is a link or a device."""
    split = split_member(path)
    assert split is not None, "a member path"
    archive, name = split
    zf = open_zip(archive, info)
    try:
        member = zf.getinfo(name)
    except KeyError:
        listed = [n for n in zf.namelist() if not _ignored(_member_parts(n)[0]) and not n.endswith("/")]
        _close(zf)
        raise InputError(
            path, f"no member {name!r} in {archive}", f"its files: {', '.join(listed[:10]) or 'none'}"
        ) from None
    kind = _zip_kind(member)
    if kind is not None or member.is_dir():
        _close(zf)
        raise InputError(path, f"the member is {kind or 'a folder'}, not a data file", "name a file of the archive")
    return _MemberStream(zf, member, path)
