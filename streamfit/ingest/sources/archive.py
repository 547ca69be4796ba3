"""One data file in an archive, as data portals ship them (data.zip holding data.csv,
data.tgz made by `tar czf data.tgz data/`): read as the file it holds, named by a member path
`<archive>:<member>` (data.zip:data.csv, data.tgz:data/data.csv; local or behind a URL:
s3://bucket/data.zip:data.csv). Archives are zip (.zip) and tar (.tar, .tar.gz/.tgz,
.tar.bz2/.tbz2, .tar.xz/.txz) files, under one rule.

The input expansion (streamfit.ingest.inputs) turns an archive given as an input into the
member path of its data file (`data_member`) when its files, besides those ignored (names
with a part starting with '.' and the `__MACOSX` folder macOS adds), all lie at its top or all
in one top-level folder, exactly one of them is a data file by its name (as `infer_format`
reads names: .csv, .tsv, .jsonl, .svm, .arff, with or without .gz/.bz2/.xz), and at most
MAX_OTHER_FILES others (README, LICENSE, notes) lie beside it; those are left out, and logged.
With a format given (`--format csv`), a sole file is the data file whatever its name
(data.txt). Several data files are an InputError listing them: a member path names the one to
read. Any other archive (class folders, flat documents) is a folder corpus, as before
(streamfit.ingest.sources.folder), and so is any archive with `--format folder`. The listing
is a zip archive's central directory; a tar archive's is a decompressing pass, which stops as
soon as the files seen cannot be one data file's (20 Newsgroups' first document lies three
folders deep: one block read), and otherwise reads the archive to its end.

A member path reads the member's bytes as they are stored (a zip member decompressed by
zipfile, CRC-checked at the end; a tar member from the archive's stream, decompressed by the
archive's name), then by its own name's .gz/.bz2/.xz; the readers name records
`data.zip:data.csv:LINE`. Parquet, HDF5 and NumPy members are not read (their readers seek in a
file): extract them. A member path is one piece of a distributed ingest (its bytes are not
cut), and the store is that of the extracted file.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import re
import tarfile
import zipfile
from collections.abc import Generator, Iterable
from typing import Any

from streamfit import storage
from streamfit.errors import InputError
from streamfit.ingest.limits import DEFAULT_INPUT_BYTES
from streamfit.ingest.sources.folder import (
    _TAR_ERRORS,
    ARCHIVE_SUFFIXES,
    ZIP_SUFFIXES,
    _member_parts,
    _tar_kind,
    _zip_kind,
    corrupt_archive,
    open_tar_bytes,
    open_zip,
)

_SUFFIXES = "|".join(re.escape(suffix) for suffix in sorted(ARCHIVE_SUFFIXES, key=len, reverse=True))
_MEMBER_PATH = re.compile(rf"^(.+?(?:{_SUFFIXES})):(.+)$", re.IGNORECASE)
_IGNORED_FOLDERS = ("__MACOSX",)
_SEEKING_FORMATS = ("parquet", "hdf5", "numpy")  # readers that seek in a file: not read from a member
MAX_OTHER_FILES = 16  # files beside the data file (README, LICENSE, …); more: a folder corpus
# a tar archive behind a URL is listed in GETs of this many bytes (not s3fs's 50 MiB): a folder
# corpus's listing stops at its first document, in the first
LISTING_BLOCK_BYTES = 8 << 20


def split_member(path: str) -> tuple[str, str] | None:
    """(archive, member) of a member path `<archive>:<member>` (archive: a name ending in .zip,
    .tar, .tgz, …); None for any other path (a local file of that very name is a file)."""
    found = _MEMBER_PATH.match(path)
    if found is None or (not storage.is_url(path) and os.path.exists(path)):
        return None
    return found.group(1), found.group(2)


def _ignored(parts: list[str]) -> bool:
    return not parts or any(p.startswith(".") or p in _IGNORED_FOLDERS for p in parts)


def _is_zip(path: str) -> bool:
    return path.lower().endswith(ZIP_SUFFIXES)


def _one_data_file(names: Iterable[str], format: str | None) -> tuple[list[str], list[str]] | None:
    """(data files, other files) of an archive whose files (`names`, in archive order, folders
    left out) are one data file's (the module docstring's rule; several data files too, for
    the caller's error); None for a folder corpus, decided as soon as the names read allow."""
    from streamfit.ingest.sources import infer_format  # the package imports this module

    folder: str | None = None  # the one top-level folder of every file ("": every file at the top)
    data: list[str] = []
    others: list[str] = []
    for name in names:
        parts, unsafe = _member_parts(name)
        if _ignored(parts):
            continue
        here = "" if len(parts) == 1 else parts[0] if len(parts) == 2 else None
        if unsafe or here is None or folder not in (None, here):
            return None  # deeper files, files in two places, or a name the folder reader refuses
        folder = here
        (data if infer_format(name) not in (None, "folder") else others).append(name)
        if len(others) > MAX_OTHER_FILES:
            return None
    if format is not None and not data and len(others) == 1:
        data, others = others, []
    return (data, others) if data else None


def _file_names(path: str, info: dict[str, Any] | None) -> Generator[str, None, None]:
    """The names of the files (not folders) of the archive at `path` (info: its look-up behind a
    URL), in archive order: a zip archive's central directory, or a tar archive read as far as
    they are taken."""
    if _is_zip(path):
        zf = open_zip(path, info)
        try:
            names = [member.filename for member in zf.infolist() if not member.is_dir()]
        finally:
            _close(zf)
        yield from names
        return
    try:
        with (
            open_tar_bytes(path, DEFAULT_INPUT_BYTES, info, block_size=LISTING_BLOCK_BYTES) as f,
            tarfile.open(fileobj=f, mode="r|") as tar,
        ):
            for member in tar:
                if not member.isdir():
                    yield member.name
    except _TAR_ERRORS as e:
        raise corrupt_archive(path, e) from None


def data_member(path: str, format: str | None = None, info: dict[str, Any] | None = None) -> str:
    """The member path of the data file that the archive at `path` holds (see the module
    docstring), or `path` itself when it is read as a folder corpus (or is no archive). info:
    the archive's look-up behind a URL (as the input expansion's listing gave it; None: asked
    for, a HEAD on S3)."""
    from streamfit.ingest.sources import infer_format  # the package imports this module

    if format == "folder" or not path.lower().endswith(ARCHIVE_SUFFIXES) or split_member(path) is not None:
        return path
    if not (storage.is_url(path) or os.path.isfile(path)):
        return path  # nothing there (the reader says so) or a directory named *.zip
    with contextlib.closing(_file_names(path, info)) as names:  # a tar archive is read no further than needed
        found = _one_data_file(names, format)
    if found is None:
        return path
    data, others = found
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
    if others:
        logging.getLogger(__name__).info("%s: reading %s; left out: %s", path, data[0], ", ".join(sorted(others)))
    return f"{path}:{data[0]}"


class _MemberStream(io.RawIOBase):
    """An archive member's bytes (zipfile's or tarfile's stream of it); closing it closes the
    archive and the file it was read from (`owners`)."""

    def __init__(self, stream, path: str, owners: list):
        self._stream = stream
        self._path = path
        self._owners = owners

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            data = self._stream.read(len(buffer))
        except (zipfile.BadZipFile, *_TAR_ERRORS) as e:  # a zip member's CRC-32 mismatch; a cut tar stream
            raise corrupt_archive(self._path, e) from None
        buffer[: len(data)] = data
        return len(data)

    def close(self) -> None:
        if not self.closed:
            for item in [self._stream, *self._owners]:
                item.close()
        super().close()


def _close(zf: zipfile.ZipFile) -> None:
    """Close the archive and the file it was opened from (ZipFile leaves a given file open)."""
    file = zf.fp
    zf.close()
    if file is not None:
        file.close()


def _not_a_file(path: str, kind: str | None) -> InputError:
    return InputError(path, f"the member is {kind or 'a folder'}, not a data file", "name a file of the archive")


def _no_member(path: str, archive: str, name: str, files: list[str]) -> InputError:
    listed = [n for n in files if not _ignored(_member_parts(n)[0])]
    return InputError(path, f"no member {name!r} in {archive}", f"its files: {', '.join(listed[:10]) or 'none'}")


def _open_zip_member(path: str, archive: str, name: str, info: dict[str, Any] | None) -> io.RawIOBase:
    zf = open_zip(archive, info)
    try:
        member = zf.getinfo(name)
    except KeyError:
        files = [n for n in zf.namelist() if not n.endswith("/")]
        _close(zf)
        raise _no_member(path, archive, name, files) from None
    kind = _zip_kind(member)
    if kind is not None or member.is_dir():
        _close(zf)
        raise _not_a_file(path, kind)
    try:
        stream = zf.open(member)
    except (RuntimeError, NotImplementedError) as e:  # encrypted; a compression zipfile cannot read
        _close(zf)
        raise InputError(path, f"the member cannot be read ({e})", "re-create the archive, with deflate") from None
    except (zipfile.BadZipFile, EOFError, OSError) as e:
        _close(zf)
        raise corrupt_archive(path, e) from None
    return _MemberStream(stream, path, [zf, zf.fp])


def _open_tar_member(path: str, archive: str, name: str, info: dict[str, Any] | None, max_bytes: int) -> io.RawIOBase:
    """The member `name` (compared as '/'-joined parts: ./data.csv is data.csv) of a tar archive,
    found by reading the archive's stream up to it."""
    wanted = _member_parts(name)[0]
    f = open_tar_bytes(archive, max_bytes, info=info)
    files: list[str] = []
    try:
        tar = tarfile.open(fileobj=f, mode="r|")
        for member in tar:
            if _member_parts(member.name)[0] != wanted:
                if not member.isdir():
                    files.append(member.name)
                continue
            kind = _tar_kind(member)
            if kind is not None:
                raise _not_a_file(path, kind)
            stream = tar.extractfile(member)
            assert stream is not None, "a regular file (checked above)"
            return _MemberStream(stream, path, [tar, f])
    except _TAR_ERRORS as e:
        f.close()
        raise corrupt_archive(path, e) from None
    except BaseException:
        f.close()
        raise
    f.close()
    raise _no_member(path, archive, name, files)


def open_member(path: str, info: dict[str, Any] | None = None, max_bytes: int = DEFAULT_INPUT_BYTES) -> io.RawIOBase:
    """The stored bytes (decompressed by zipfile, or by the tar archive's name) of the member
    that member path `path` names; InputError when the archive lacks it or it is a link or a
    device. info: the archive's look-up behind a URL; max_bytes: a tar archive's decompressed
    bytes read up to the member, at most (the member's own are bounded by its reader)."""
    split = split_member(path)
    assert split is not None, "a member path"
    archive, name = split
    if _is_zip(archive):
        return _open_zip_member(path, archive, name, info)
    return _open_tar_member(path, archive, name, info, max_bytes)
