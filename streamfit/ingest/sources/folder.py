"""A folder per class: <class>/<file>, each file one document labelled by its folder name, in a
directory (local, or a prefix behind a URL: s3://bucket/news/), a tar archive (.tar,
.tar.gz/.tgz, .tar.bz2, .tar.xz) or a zip archive (.zip), local or behind a URL, e.g. 20 Newsgroups.

Layout: when files sit at <top>/<class>/<file> and none at <class>/<file> (20news-bydate-train/
sci.space/60155), the top folders are subsets: a single one is used, several need subset=...;
subset always selects a folder (others are ignored). Subsets may be nested: in
ohsumed_single_23/{training,test}/<class>/<file> the folders holding class folders are
ohsumed_single_23/training and ohsumed_single_23/test; without subset the shallowest such
folders are the candidates (one is used, several need subset=...), and subset names one as a
path from the top ("ohsumed_single_23/training") or by its last parts ("training"), which must
then match one folder only. Files at any other depth are bad
records; names starting with '.' are ignored. Finding the layout lists the input once (for a tar
archive that is one decompressing pass over it, skipped when subset names the top folder; a zip
archive's listing is its central directory; a directory's listing, local or behind a URL, is
kept for the read: files added after the open are not read). Directories are read in sorted order (class,
then file name, both by code point; behind a URL in the same order, from one listing of the
prefix, whose sizes are the documents' sizes: no request per file besides its GET, and those
fetched concurrently, FETCH_FILES at a time); tar archives in archive order, zip archives in
the order of their central directory. Documents are decoded with
encoding/encoding_errors (20 Newsgroups needs encoding='latin-1'); a decode error is a bad record.
With class_folders=False every file (under subset, if given) is a document without a label
(None), at any depth: how `streamfit predict` reads a folder of new documents; subset then names
a folder from the top or by the last parts of any folder above a file (predict --subset test reads
corpus/test/<class>/<file>), with the same errors.

The input is not trusted (limits: ReadLimits). Only regular files are documents: a FIFO,
device, socket or link to a folder where a document should be is a bad record, as is a symbolic
link that leads out of the folder (a link to another file inside it is read); in an archive,
links, devices and FIFOs are bad records (a zip member is a link or a device when its Unix mode
says so), and so are member names that are absolute or hold `..`, and encrypted zip members. A
document larger than limits.record_bytes is a bad record, and more than
limits.input_bytes read from one folder or archive (after decompression) stops the read.
"""

from __future__ import annotations

import functools
import os
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from typing import Any

from streamfit import storage
from streamfit.errors import InputError
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE, DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import (
    TextBatcher,
    bom_free,
    check_batch_size,
    check_encoding,
    open_binary,
    too_long,
)
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.options import format_bytes

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
ZIP_SUFFIXES = (".zip",)
ARCHIVE_SUFFIXES = TAR_SUFFIXES + ZIP_SUFFIXES
_COMPRESSED_TARS = {".tgz": ".gz", ".tbz2": ".bz2", ".txz": ".xz"}
_TAR_ERRORS = (tarfile.TarError, EOFError, OSError)
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, OSError)
_NOT_REGULAR = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
    (stat.S_ISLNK, "a symbolic link"),
)
# A folder behind a URL is read FETCH_FILES documents (at most FETCH_BYTES of them, by their
# listed sizes) at a time, each window's GETs sent together
FETCH_FILES = 64
FETCH_BYTES = 16 << 20
# A zip archive behind a URL is read in ranged GETs of this many bytes ahead (fsspec's read-ahead
# block), so a part of it (distributed ingest) fetches about its own members, not the 50 MiB
# that s3fs reads ahead by default
ZIP_BLOCK_BYTES = 8 << 20
# and its last this many bytes are read first, in one GET: zipfile's reads of the end record,
# the zip64 locator before it and (within them) the central directory then come from fsspec's
# read-ahead cache, where they were three ranged GETs each time the archive was opened
ZIP_TAIL_BYTES = 1 << 20


@dataclass(frozen=True)
class FolderPart:
    """A piece of a folder corpus (distributed ingest), read with the layout `prefix`
    (FolderSource.prefix) decided over the whole input:
    - a tar archive: the members whose first header lies in bytes [start, stop) of the
      decompressed archive (stop None: to its end);
    - a zip archive: members [start, stop) of its central directory (stop None: to its end);
    - a directory (files not None): the files `files`, as (path below the directory,
      '/'-separated; size in bytes when listed), in reading order.
    archive_info: an archive behind a URL as it was looked up when it was cut (fsspec's info:
    size, ETag), which the part's opens take instead of asking again (a HEAD on S3); an
    archive replaced since then fails the read (s3fs checks each ranged GET's ETag)."""

    prefix: tuple[str, ...]
    start: int = 0
    stop: int | None = None
    files: tuple[tuple[str, int], ...] | None = None
    archive_info: dict[str, Any] | None = field(default=None, compare=False)


class _NotADocument(Exception):
    """What stands where a document should be is not one: a bad record (problem, hint)."""

    def __init__(self, problem: str, hint: str):
        super().__init__(problem)
        self.problem = problem
        self.hint = hint


def _is_utf8(name: str) -> bool:
    """Whether a file name read from the system (bytes that are not UTF-8 kept as lone
    surrogates, Python's surrogateescape) is valid UTF-8 text."""
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _parent(parts: list[str]) -> str:
    """The folder holding the class folder of the file at `parts` ("a/b" for a/b/<class>/<file>),
    or the top folder for a file less deep."""
    return "/".join(parts[:-2]) if len(parts) >= 3 else parts[0]


def _file_kind(mode: int) -> str:
    return next((name for is_kind, name in _NOT_REGULAR if is_kind(mode)), "not a regular file")


def _reading_order(name: str) -> tuple:
    """The sort key of a path below a directory ('/'-separated) that gives the order in which
    _dir_files reads it: a folder's files (by name) before its sub-folders (by name, each read
    whole in turn)."""
    *folders, file = name.split("/")
    return (*((1, f) for f in folders), (0, file))


def container(path: str) -> tuple[str, dict[str, Any] | None]:
    """What holds the corpus at `path`: "folder" (a directory, or a prefix behind a URL: a URL
    ending in "/" is one without asking), "tar" or "zip" (by the name's suffix); InputError for
    anything else, or nothing there. With it, behind a URL, the archive's look-up (fsspec's
    info: size, ETag; on S3 one HEAD), for its opens (`Location.open_read(info=)`) to ask
    nothing more; None otherwise."""
    if storage.is_url(path) and path.endswith("/"):
        return "folder", None
    location = storage.resolve(path)
    info = location.look_up()
    if info is None:
        raise InputError(path, "no such file")
    if info["type"] == "directory":
        return "folder", None
    name = path.lower()
    url_info = None if location.local else info
    if name.endswith(TAR_SUFFIXES):
        return "tar", url_info
    if name.endswith(ZIP_SUFFIXES):
        return "zip", url_info
    raise InputError(
        path, "not a directory or an archive", f"archives end in {', '.join(ARCHIVE_SUFFIXES)}; folders are directories"
    )


# Listings of folders behind URLs made by the input expansion (streamfit.ingest.inputs), by the
# folder's URL: the folder's next reader takes its own instead of listing the folder again (one
# LIST of the folder per ingest on S3); the ingest forgets those not taken when it ends.
_LISTED: dict[str, dict[str, dict[str, Any]]] = {}


def hand_over_listing(location: storage.Location, found: dict[str, dict[str, Any]]) -> None:
    """Keep `found` (fsspec's find(detail=True) at or below the folder at `location`, behind a
    URL; entries of other names are dropped when it is read) for the folder's next FolderSource."""
    _LISTED[location.url.rstrip("/")] = found


def forget_listings() -> None:
    """Drop the listings handed over and not taken (an ingest that failed before reading)."""
    _LISTED.clear()


def _class_folder_hint(parts) -> str:
    """The fix for a document outside a class folder; for a data file (a CSV or JSONL file, …,
    as a zip of one file is often sent) also that it is to be ingested itself."""
    from streamfit.ingest.sources import infer_format  # the package imports this module

    hint = "documents go in <class>/<file>"
    kind = infer_format(parts[-1]) if parts else None
    if kind not in (None, "folder"):
        hint += (
            f"; a folder or archive is read as a folder corpus: {parts[-1]} is a {kind} file, to ingest it "
            "extract it and name the file itself (a .gz of it is read as it is)"
        )
    return hint


class FolderSource:
    """Streaming reader of class folders in a directory (local or behind a URL) or an archive."""

    kind = "text"
    multilabel = False

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        subset: str | None = None,
        encoding: str = "utf-8",
        encoding_errors: str = "strict",
        class_folders: bool = True,
        limits: ReadLimits = DEFAULT_LIMITS,
        folder_part: FolderPart | None = None,
        held_in: tuple[str, dict[str, Any] | None] | None = None,
    ):
        """folder_part: read only that part of the input (see parts; the input was checked
        when it was cut, so it is not looked at again). held_in: `container(path)`, when the
        caller has looked it up (a distributed ingest's planning), so it is not asked again."""
        self.path = os.fspath(path)
        self.location = storage.resolve(self.path)
        # local paths as given (they name the documents), a file:// URL by its local path
        self.local_path = (
            (self.location.path if storage.is_url(self.path) else self.path) if self.location.local else None
        )
        self.url_info: dict[str, Any] | None  # an archive's look-up behind a URL (container), for its opens
        if folder_part is None:
            self.container, self.url_info = held_in or container(self.path)
        else:
            self.url_info = folder_part.archive_info
            self.container = (
                "folder"
                if folder_part.files is not None
                else "zip"
                if self.path.lower().endswith(ZIP_SUFFIXES)
                else "tar"
            )
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.encoding = check_encoding(encoding, encoding_errors)
        self.encoding_errors = encoding_errors
        self.subset = subset
        self.subset_parts = tuple(p for p in subset.split("/") if p) if subset is not None else None
        self.class_folders = class_folders
        self.limits = limits
        self.root = os.path.realpath(self.local_path) if self.local_path is not None else None  # where links may lead
        self.part = folder_part
        self._listing: list[tuple[str, int]] | None = None  # a URL folder's files (listed once)
        self._dir_listing: list[tuple[str, str, bool, bool]] | None = None  # a local folder's (listed once)
        # a tar archive with --subset is not listed first (that would decompress it twice); an
        # unknown subset is reported once the read finds no file in it
        # the folder holding the class folders as path parts, () at the top; None: an archive's
        # subset, decided by the first file that matches it as it is read
        self.prefix: tuple[str, ...] | None
        if folder_part is not None:
            self.prefix = folder_part.prefix
        elif subset is not None and self.container == "tar":
            self.prefix = None
        elif not class_folders and subset is None:
            self.prefix = ()
        else:
            self.prefix = self._layout(subset, self._entries())
        self.n_read = 0

    def __iter__(self):
        self.n_read = 0
        batcher = TextBatcher(["text"])
        tops: set[str] = set()
        for parts, location, read, _ in self._files():
            if self.prefix is None or tuple(parts[: len(self.prefix)]) != self.prefix:
                found = self._match(parts)
                if found is not None and self.prefix is not None:
                    raise InputError(
                        self.path,
                        f"--subset {self.subset} matches both {'/'.join(self.prefix)} and {'/'.join(found)}",
                        "name the folder in full from the top of the archive",
                    )
                if found is None:
                    tops.add(_parent(parts))
                    continue
                self.prefix = found
            n = len(self.prefix)
            self.n_read += 1
            try:
                data = read()
            except _NotADocument as e:
                self.policy.bad(location, e.problem, hint=e.hint)
                continue
            if self.class_folders and len(parts) != n + 2:
                self.policy.bad(location, "the file is not in a class folder", hint=_class_folder_hint(parts))
                continue
            if self.class_folders and not _is_utf8(parts[n]):
                self.policy.bad(
                    location, "the class folder's name is not valid UTF-8", hint="rename the folder in UTF-8"
                )
                continue
            try:
                text = data.decode(bom_free(self.encoding), self.encoding_errors)
            except UnicodeDecodeError as e:
                self.policy.bad(
                    location,
                    f"not valid {self.encoding} text ({e.reason} at byte {e.start})",
                    data,
                    "pass --encoding (20 Newsgroups is latin-1) or --option encoding_errors=replace",
                )
                continue
            batcher.add([text], parts[n] if self.class_folders else None, location)
            if len(batcher) == self.batch_size:
                yield batcher.take()
        if len(batcher):
            yield batcher.take()
        if self.subset is not None and self.n_read == 0 and self.part is None:
            listed = ", ".join(sorted(tops)) or "none"
            raise InputError(self.path, f"no folder {self.subset!r}", f"--subset must be one of: {listed}")

    def _match(self, parts: list[str]) -> tuple[str, ...] | None:
        """The folder that subset names, if the file at `parts` lies in it: subset as a path from
        the top (any depth below it), or as the last parts of the folder holding the file's class
        folder (with class folders), or of the shallowest folder above the file (without: how
        `predict --subset test` finds corpus/test in corpus/{training,test}/<class>/<file>);
        None otherwise."""
        want = self.subset_parts
        if want is None:
            return None
        k = len(want)
        if tuple(parts[:k]) == want:
            return want
        if self.class_folders:
            if len(parts) > k + 2 and tuple(parts[-k - 2 : -2]) == want:
                return tuple(parts[:-2])
            return None
        # without class folders a document may lie at any depth below the subset: the shallowest
        # folder above the file whose last parts are subset's (corpus/test for corpus/test/<class>/<file>)
        for end in range(k + 1, len(parts)):
            if tuple(parts[end - k : end]) == want:
                return tuple(parts[:end])
        return None

    def _layout(self, subset: str | None, entries) -> tuple[str, ...]:
        """The folder to read from as path parts: the one subset names, the one folder that holds
        class folders at the shallowest depth, or () when classes are at the top. entries: (path
        parts, listed as a file) of the input's entries (_entries)."""
        parents = set()  # the folders that hold the class folders of the files, at each file's depth
        depths = set()
        matches = set()
        for parts, listed_as_file in entries:
            if not listed_as_file:  # a bad record whatever the layout
                continue
            depths.add(len(parts))
            parents.add((len(parts), _parent(parts)))
            found = self._match(parts)
            if found is not None:
                matches.add(found)
        if subset is not None:
            if not matches:
                listed = ", ".join(sorted({p for _, p in parents})) or "none"
                raise InputError(self.path, f"no folder {subset!r}", f"--subset must be one of: {listed}")
            if len(matches) > 1:
                listed = ", ".join(sorted("/".join(m) for m in matches))
                raise InputError(
                    self.path, f"--subset {subset} matches several folders: {listed}", "pass one of them in full"
                )
            return matches.pop()
        if 2 in depths or not any(d >= 3 for d in depths):
            return ()
        shallowest = min(d for d in depths if d >= 3)
        candidates = sorted(p for d, p in parents if d == shallowest)
        if len(candidates) > 1:
            raise InputError(
                self.path,
                f"holds several folders of class folders: {', '.join(candidates)}",
                "pass --subset with one of them",
            )
        return tuple(candidates[0].split("/"))

    def _entries(self):
        """(path parts, listed as a file) of the input's entries (_files), no document read."""
        if self.container == "folder" and self.local_path is None:
            return ((name.split("/"), True) for name, _ in self._url_listing())
        return ((parts, listed) for parts, _, _, listed in self._files())

    def _files(self):
        """(path parts, location, read(), listed as a file) of every entry not hidden that stands
        where a document may be, in reading order; read() returns the document's bytes or raises
        _NotADocument. Links to folders, and archive members that are not files or have unsafe
        names, are not listed as files."""
        self.n_bytes = 0  # documents read so far (limits.input_bytes; a tar stream counts its own)
        if self.container == "tar":
            yield from self._tar_files()
        elif self.container == "zip":
            yield from self._zip_files()
        elif self.local_path is not None:
            yield from self._dir_files()
        else:
            yield from self._url_files()

    def _dir_files(self):
        if self.part is not None:
            assert self.part.files is not None, "a directory's part lists its files"
            for name, _ in self.part.files:
                location = os.path.join(self.local_path, *name.split("/"))
                yield name.split("/"), location, functools.partial(self._read_file, location), True
            return
        for name, location, listed, regular in self._dir_entries():
            yield name.split("/"), location, functools.partial(self._read_file, location, regular), listed

    def _dir_entries(self) -> list[tuple[str, str, bool, bool]]:
        """(path below the folder, '/'-separated; its location; listed as a file: not a link
        to a folder; listed as a regular file, not a link) of the local folder's entries, in
        reading order: listed once (when the layout is decided at open) and kept for the read."""
        assert self.local_path is not None, "a local folder"
        if self._dir_listing is None:
            self._dir_listing = list(self._walk(self.local_path, []))
        return self._dir_listing

    def _walk(self, top: str, parts: list[str]):
        """_dir_entries of the folder `top` (path parts `parts` below the input): its entries
        that are not folders (links to folders among them, not entered), then its folders,
        each by name, hidden names left out. One scandir per folder: the entries' types come
        with the listing (no stat per file)."""
        try:
            with os.scandir(top) as listing:
                entries = [e for e in listing if not e.name.startswith(".")]
        except OSError as e:
            raise InputError(e.filename, f"cannot list the folder ({e.strerror or e})") from None
        folders = []
        files = []
        for entry in entries:  # entry.path is os.path.join(top, entry.name)
            try:
                is_folder = entry.is_dir()  # a link to a folder too
            except OSError:
                is_folder = False
            if is_folder and not entry.is_symlink():
                folders.append((entry.name, entry.path))
            else:
                files.append((entry.name, entry.path, is_folder, entry.is_file(follow_symlinks=False)))
        prefix = "".join(part + "/" for part in parts)
        for name, location, linked_folder, regular in sorted(files):
            yield prefix + name, location, not linked_folder, regular
        for name, location in sorted(folders):
            yield from self._walk(location, parts + [name])

    def _url_listing(self) -> list[tuple[str, int]]:
        """The files below a folder behind a URL as (path below it, size), hidden names left out,
        in reading order: the input expansion's listing (hand_over_listing), or else one listing
        of the prefix (sizes included)."""
        if self._listing is None:
            fs: Any = self.location.fs  # fsspec's filesystems carry no annotations
            base = self.location.path.rstrip("/") + "/"
            found = _LISTED.pop(self.location.url.rstrip("/"), None)
            if found is None:
                fs.invalidate_cache(base)  # another writer may have added files since fsspec listed it
                try:
                    found = fs.find(base, detail=True)
                except OSError as e:
                    raise InputError(self.path, f"cannot list the folder ({e})") from None
            files = [
                (name[len(base) :], int(info.get("size") or 0))
                for name, info in found.items()
                if info.get("type") != "directory" and name.startswith(base)
            ]
            kept = [(rel, size) for rel, size in files if not any(p.startswith(".") for p in rel.split("/"))]
            self._listing = sorted(kept, key=lambda entry: _reading_order(entry[0]))
        return self._listing

    def _url_files(self):
        """The entries of a folder behind a URL: the documents under the layout's folder fetched
        a window at a time (Location.read_files: concurrent GETs, none for an empty file or one
        listed over limits.record_bytes), others listed only."""
        listing = (
            list(self.part.files) if self.part is not None and self.part.files is not None else self._url_listing()
        )
        cap = self.limits.record_bytes
        window: list[tuple[str, int]] = []
        held = 0
        for k, (name, size) in enumerate(listing):
            window.append((name, size))
            held += min(size, cap + 1)
            if len(window) < FETCH_FILES and held < FETCH_BYTES and k + 1 < len(listing):
                continue
            wanted = [n for n, s in window if 0 < s <= cap and self._under_prefix(n.split("/"))]
            fetched = dict(zip(wanted, self.location.read_files(wanted, max_bytes=cap + 1))) if wanted else {}
            for n, s in window:
                read = functools.partial(self._fetched, n, s, fetched)
                yield n.split("/"), f"{self.path.rstrip('/')}/{n}", read, True
            window, held = [], 0

    def _under_prefix(self, parts: list[str]) -> bool:
        return self.prefix is not None and tuple(parts[: len(self.prefix)]) == self.prefix

    def _fetched(self, name: str, size: int, fetched: dict) -> bytes:
        """The bytes of a document of a folder behind a URL (fetched by _url_files)."""
        location = f"{self.path.rstrip('/')}/{name}"
        if size > self.limits.record_bytes:
            problem, hint = too_long(self.limits)
            raise _NotADocument(f"the document is {problem}", hint)
        data = fetched[name] if size else b""
        if isinstance(data, FileNotFoundError):
            raise InputError(location, "no such file (deleted since the folder was listed)", "ingest the folder again")
        if isinstance(data, BaseException):
            raise InputError(location, f"cannot read the file ({data})") from None
        return self._counted(data)

    def _counted(self, data: bytes) -> bytes:
        """A document's bytes, once they are within limits.record_bytes (a bad record otherwise)
        and the input's total within limits.input_bytes (the read stops otherwise)."""
        if len(data) > self.limits.record_bytes:
            problem, hint = too_long(self.limits)
            raise _NotADocument(f"the document is {problem}", hint)
        self.n_bytes += len(data)
        if self.n_bytes > self.limits.input_bytes:
            raise InputError(
                self.path,
                f"holds more than {format_bytes(self.limits.input_bytes)} of documents",
                "raise --max-input-bytes if the folder is genuine",
            )
        return data

    def _read_file(self, location: str, regular: bool = False) -> bytes:
        """The bytes of a regular file in the folder (or linked from inside it). regular: the
        folder's listing showed a regular file, not a link (then only the opened file is
        checked: a file replaced since by a link is not followed, by anything else than a
        regular file is a bad record, as when the check comes before the open)."""
        assert self.root is not None, "a local folder"
        try:
            linked = not regular and os.path.islink(location)
            if linked:
                target = os.path.realpath(location)
                if os.path.commonpath([self.root, target]) != self.root:
                    raise _NotADocument(
                        f"a link to {target}, outside the folder {self.path}",
                        "copy the file into the folder, or skip it with --on-bad-record skip",
                    )
                if not os.path.exists(target):
                    raise _NotADocument(f"a broken link (to {target})", "remove the link or restore its target")
            mode = stat.S_IFREG if regular else os.stat(location).st_mode
            if stat.S_ISDIR(mode) and linked:
                raise _NotADocument("a link to a folder (links to folders are not followed)", "move the folder here")
            if not stat.S_ISREG(mode):
                raise _NotADocument(f"{_file_kind(mode)}, not a regular file", "documents are regular files")
            # a file swapped for a FIFO or a link since the checks must not block the open, or lead out
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if linked else os.O_NOFOLLOW)
            fd = os.open(location, flags)
            try:  # os.read on the descriptor: a file object per document costs as much as the read
                opened = os.fstat(fd)
                if not stat.S_ISREG(opened.st_mode):
                    raise _NotADocument(
                        f"{_file_kind(opened.st_mode)}, not a regular file", "documents are regular files"
                    )
                data = b"" if opened.st_size > self.limits.record_bytes else self._read_open(fd, opened.st_size)
            finally:
                os.close(fd)
        except OSError as e:
            raise InputError(location, f"cannot read the file ({e.strerror or e})") from None
        if opened.st_size > self.limits.record_bytes:
            problem, hint = too_long(self.limits)
            raise _NotADocument(f"the document is {problem}", hint)
        return self._counted(data)

    def _read_open(self, fd: int, size: int) -> bytes:
        """The bytes of the open file descriptor fd, which fstat found `size` bytes long: read as
        `size` + 1 bytes (a read of record_bytes + 1 at once would allocate that whole bound for
        every small document: 64 MiB by default), then on up to record_bytes + 1 if the file has
        grown since, so a file that grows while it is read is cut at one byte over the bound."""
        data = _read_fd(fd, size + 1)
        if len(data) > size:
            data += _read_fd(fd, self.limits.record_bytes + 1 - len(data))
        return data

    def _tar_members(self):
        """(tar, member) of each member of the archive (of self.part), in archive order."""
        part = (self.part.start, self.part.stop) if self.part is not None else None
        try:
            with (
                open_tar_bytes(self.path, self.limits.input_bytes, info=self.url_info, byte_range=part) as f,
                tarfile.open(fileobj=f, mode="r|") as tar,
            ):
                for member in tar:
                    yield tar, member
                self._global_header = bool(tar.pax_headers)
        except _TAR_ERRORS as e:
            raise self._corrupt(e) from None

    def _tar_files(self):
        for tar, member in self._tar_members():
            entry = self._tar_entry(tar, member)
            if entry is not None:
                yield entry

    def _tar_entry(self, tar: tarfile.TarFile, member: tarfile.TarInfo):
        """The _files entry of an archive member; None for a folder or a hidden name."""
        parts, unsafe = _member_parts(member.name)
        if member.isdir() or not parts or (not unsafe and any(p.startswith(".") for p in parts)):
            return None
        read = functools.partial(self._read_member, tar, member, unsafe)
        return parts, f"{self.path}:{member.name}", read, member.isfile() and not unsafe

    def parts(self, part_bytes: int) -> list[FolderPart]:
        """The input cut into parts of about part_bytes of documents each, with the layout of the
        whole input (a distributed ingest's pieces). A directory: runs of its files (by their
        sizes; a local folder's are looked up, a URL folder's come with its listing); a zip
        archive: runs of members of its central directory; a tar archive: runs of members, cut
        at member headers, found in one listing pass over it (a compressed archive: one
        decompression; each part's reader decompresses the bytes before its start again), one
        part when it has a global pax header (which applies to the members after it)."""
        if self.container == "tar":
            return self._tar_parts(part_bytes)
        prefix = self.prefix
        assert prefix is not None, "a folder's or zip archive's layout is decided when it is opened"
        if self.container == "zip":
            with self._zip_file() as zf:
                sizes = [info.file_size for info in zf.infolist()]
            return [FolderPart(prefix, lo, hi, archive_info=self.url_info) for lo, hi in _runs(sizes, part_bytes)]
        if self.local_path is not None:
            files = [(name, _size(location)) for name, location, _, _ in self._dir_entries()]
        else:
            files = self._url_listing()
        runs = _runs([size for _, size in files], part_bytes)
        return [FolderPart(prefix, files=tuple(files[lo:hi])) for lo, hi in runs]

    def _tar_parts(self, part_bytes: int) -> list[FolderPart]:
        cuts, since = [0], 0

        def entries():
            nonlocal since
            for tar, member in self._tar_members():
                if since >= part_bytes:
                    cuts.append(member.offset)
                    since = 0
                since += member.size
                entry = self._tar_entry(tar, member)
                if entry is not None:
                    yield entry[0], entry[3]

        listing = entries()
        decided = self.class_folders or self.subset is not None  # as __init__ decides the layout
        prefix = self._layout(self.subset, listing) if decided else ()
        for _ in listing:  # the rest, when the layout needed no listing
            pass
        if self._global_header:
            cuts = [0]
        return [FolderPart(prefix, lo, hi, archive_info=self.url_info) for lo, hi in zip(cuts, cuts[1:] + [None])]

    def _read_member(self, tar: tarfile.TarFile, member: tarfile.TarInfo, unsafe: bool) -> bytes:
        recreate = "re-create the archive from the folder"
        if unsafe:
            raise _NotADocument("the member name is absolute or holds '..'", recreate)
        if member.issym() or member.islnk():
            kind = "symbolic" if member.issym() else "hard"
            raise _NotADocument(
                f"a {kind} link to {member.linkname!r}, not a document",
                f"{recreate}, with tar --dereference" + (" --hard-dereference" if member.islnk() else ""),
            )
        if not member.isfile():
            raise _NotADocument(f"the member is {_tar_kind(member)}, not a regular file", "documents are regular files")
        if member.size > self.limits.record_bytes:
            problem, hint = too_long(self.limits)
            raise _NotADocument(f"the document is {problem}", hint)
        try:
            stream = tar.extractfile(member)
            assert stream is not None, "members are regular files (checked above)"
            return stream.read()
        except _TAR_ERRORS as e:
            raise self._corrupt(e) from None

    def _zip_file(self) -> zipfile.ZipFile:
        """The zip archive opened (open_zip)."""
        return open_zip(self.path, self.url_info)

    def _zip_files(self):
        """The entries of the zip archive's members (of self.part), in central directory order."""
        with self._zip_file() as zf:
            members = zf.infolist()
            if self.part is not None:
                members = members[self.part.start : self.part.stop]
            for info in members:
                parts, unsafe = _member_parts(info.filename)
                if info.is_dir() or not parts or (not unsafe and any(p.startswith(".") for p in parts)):
                    continue
                kind = _zip_kind(info)
                read = functools.partial(self._read_zip_member, zf, info, unsafe, kind)
                yield parts, f"{self.path}:{info.filename}", read, kind is None and not unsafe

    def _read_zip_member(self, zf: zipfile.ZipFile, info: zipfile.ZipInfo, unsafe: bool, kind: str | None) -> bytes:
        recreate = "re-create the archive from the folder"
        if unsafe:
            raise _NotADocument("the member name is absolute or holds '..'", recreate)
        if kind is not None:
            raise _NotADocument(f"the member is {kind}, not a regular file", f"{recreate}, with zip's links followed")
        if info.flag_bits & 0x1:
            raise _NotADocument("the member is encrypted", f"{recreate}, without a password")
        if info.file_size > self.limits.record_bytes:
            problem, hint = too_long(self.limits)
            raise _NotADocument(f"the document is {problem}", hint)
        try:
            with zf.open(info) as stream:  # yields at most file_size bytes, then checks their CRC-32
                data = stream.read(self.limits.record_bytes + 1)
        except NotImplementedError as e:  # a compression method zipfile cannot read
            raise _NotADocument(f"the member cannot be read ({e})", f"{recreate}, with deflate") from None
        except _ZIP_ERRORS as e:
            raise self._corrupt(e) from None
        return self._counted(data)

    def _corrupt(self, e: Exception) -> InputError:
        return corrupt_archive(self.path, e)


def open_tar_bytes(
    path: str,
    max_bytes: int,
    info: dict[str, Any] | None = None,
    byte_range: tuple[int, int | None] | None = None,
    block_size: int | None = None,
):
    """The bytes of the tar archive at `path` (local or behind a URL; info: its look-up;
    block_size: fetched ahead of each read, see open_binary), decompressed by the name's
    extension (.tar.gz, .tgz, ...), for tarfile's stream mode ("r|").
    Decompressing outside tarfile makes a truncated stream an error: tarfile alone takes a stream
    cut at a member boundary for the end of the archive (as a part's stop is)."""
    extension = os.path.splitext(path)[1].lower()
    return open_binary(
        path,
        _COMPRESSED_TARS.get(extension, extension),
        max_bytes=max_bytes,
        byte_range=byte_range,
        info=info,
        block_size=block_size,
    )


def corrupt_archive(path: str, e: Exception) -> InputError:
    return InputError(path, f"truncated or corrupt archive ({e})", "re-download the archive")


def open_zip(path: str, info: dict[str, Any] | None = None) -> zipfile.ZipFile:
    """The zip archive at `path` opened (its central directory read): a local file, or fsspec's
    file object behind a URL (ranged reads of ZIP_BLOCK_BYTES, its last ZIP_TAIL_BYTES first;
    info: its look-up, see `container`). Closing the ZipFile leaves the file open (ZipFile does not close a file it
    was given): it is `zf.fp` until then."""
    location = storage.resolve(path)
    try:
        if location.local:
            raw = open(location.path if storage.is_url(path) else path, "rb")
        else:
            raw = location.open_read(block_size=ZIP_BLOCK_BYTES, info=info)
            raw.seek(max(0, raw.seek(0, os.SEEK_END) - ZIP_TAIL_BYTES))
            raw.read(ZIP_TAIL_BYTES)  # kept by the read-ahead cache for zipfile's reads below
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise InputError(path, f"cannot open the file ({e.strerror or e})") from None
    try:
        zf = zipfile.ZipFile(raw)
    except _ZIP_ERRORS as e:
        raw.close()
        raise corrupt_archive(path, e) from None
    return zf


def _read_fd(fd: int, n: int) -> bytes:
    """n bytes read from the file descriptor fd, fewer only at the file's end (one os.read may
    return less than asked)."""
    data = os.read(fd, n)
    while 0 < len(data) < n:
        more = os.read(fd, n - len(data))
        if not more:
            break
        data += more
    return data


def _member_parts(name: str) -> tuple[list[str], bool]:
    """An archive member's path parts (empty and '.' parts dropped), and whether its name is
    unsafe (absolute, or holding '..')."""
    parts = [p for p in name.split("/") if p not in ("", ".")]
    return parts, name.startswith("/") or ".." in parts


def _tar_kind(member: tarfile.TarInfo) -> str | None:
    """What a tar member stands for when it is not a regular file ("a symbolic link", ...)."""
    if member.isfile():
        return None
    if member.isdir():
        return "a folder"
    if member.issym() or member.islnk():
        return "a symbolic link" if member.issym() else "a hard link"
    return "a FIFO" if member.isfifo() else "a device" if member.isdev() else f"of tar type {member.type!r}"


def _zip_kind(info: zipfile.ZipInfo) -> str | None:
    """What a zip member stands for when its Unix mode (made on Unix: create_system 3) has the
    type of something else than a regular file ("a symbolic link", "a FIFO", ...); None for a
    regular file, or a mode without a type (Python's ZipFile.writestr writes permissions only)."""
    mode = info.external_attr >> 16
    if info.create_system != 3 or stat.S_IFMT(mode) in (0, stat.S_IFREG):
        return None
    return _file_kind(mode)


def _size(location: str) -> int:
    """A local entry's size (0 when it is gone or unreadable: the read reports it)."""
    try:
        return os.lstat(location).st_size
    except OSError:
        return 0


def _runs(sizes: list[int], part_bytes: int) -> list[tuple[int, int]]:
    """[lo, hi) runs of consecutive items whose sizes add up to about part_bytes each (a run
    ends at the first item that brings it to part_bytes or more); one run [0, 0) for none."""
    cuts, since = [0], 0
    for k, size in enumerate(sizes):
        if since >= part_bytes:
            cuts.append(k)
            since = 0
        since += size
    return list(zip(cuts, cuts[1:] + [len(sizes)]))
