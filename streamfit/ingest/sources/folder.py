"""A folder per class: <class>/<file>, each file one document labelled by its folder name, in a
directory or in a tar archive (.tar, .tar.gz/.tgz, .tar.bz2, .tar.xz), e.g. 20 Newsgroups.

Layout: when files sit at <top>/<class>/<file> and none at <class>/<file> (20news-bydate-train/
sci.space/60155), the top folders are subsets: a single one is used, several need subset=...;
subset always selects a folder (others are ignored). Subsets may be nested: in
ohsumed_single_23/{training,test}/<class>/<file> the folders holding class folders are
ohsumed_single_23/training and ohsumed_single_23/test; without subset the shallowest such
folders are the candidates (one is used, several need subset=...), and subset names one as a
path from the top ("ohsumed_single_23/training") or by its last parts ("training"), which must
then match one folder only. Files at any other depth are bad
records; names starting with '.' are ignored. Finding the layout lists the input once (for an
archive that is one decompressing pass over it, skipped when subset names the top folder). Directories are read in sorted order (class,
then file name, both by code point); archives in archive order. Documents are decoded with
encoding/encoding_errors (20 Newsgroups needs encoding='latin-1'); a decode error is a bad record.
With class_folders=False every file (under subset, if given) is a document without a label
(None), at any depth: how `streamfit predict` reads a folder of new documents.

The input is not trusted (limits: ReadLimits). Only regular files are documents: a FIFO,
device, socket or link to a folder where a document should be is a bad record, as is a symbolic
link that leads out of the folder (a link to another file inside it is read); in an archive,
links, devices and FIFOs are bad records, and so are member names that are absolute or hold
`..`. A document larger than limits.record_bytes is a bad record, and more than
limits.input_bytes read from one folder or archive (after decompression) stops the read.
"""

from __future__ import annotations

import functools
import os
import stat
import tarfile
from dataclasses import dataclass

from streamfit.errors import InputError
from streamfit.ingest.limits import DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import (
    TextBatcher,
    check_batch_size,
    check_encoding,
    open_binary,
    require_path,
    too_long,
)
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.options import format_bytes

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_COMPRESSED_TARS = {".tgz": ".gz", ".tbz2": ".bz2", ".txz": ".xz"}
_TAR_ERRORS = (tarfile.TarError, EOFError, OSError)
_NOT_REGULAR = (
    (stat.S_ISDIR, "a folder"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


@dataclass(frozen=True)
class ArchivePart:
    """A piece of a tar archive (distributed ingest): the members whose first header lies in
    bytes [start, stop) of the decompressed archive (stop None: to its end), read with the
    layout `prefix` (FolderSource.prefix) decided over the whole archive."""

    start: int
    stop: int | None
    prefix: tuple[str, ...]


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


class FolderSource:
    """Streaming reader of class folders in a directory or a tar archive."""

    kind = "text"
    multilabel = False

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = 8192,
        subset: str | None = None,
        encoding: str = "utf-8",
        encoding_errors: str = "strict",
        class_folders: bool = True,
        limits: ReadLimits = DEFAULT_LIMITS,
        archive_part: ArchivePart | None = None,
    ):
        """archive_part: read only that part of a tar archive (see archive_parts)."""
        self.path = os.fspath(path)
        require_path(self.path, directory_ok=True)
        self.is_dir = os.path.isdir(self.path)
        if not self.is_dir and not self.path.lower().endswith(TAR_SUFFIXES):
            raise InputError(
                self.path, "not a directory or a tar archive", f"archives end in {', '.join(TAR_SUFFIXES)}"
            )
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.encoding = check_encoding(encoding, encoding_errors)
        self.encoding_errors = encoding_errors
        self.subset = subset
        self.subset_parts = tuple(p for p in subset.split("/") if p) if subset is not None else None
        self.class_folders = class_folders
        self.limits = limits
        self.root = os.path.realpath(self.path)  # where links may lead
        self.part = archive_part
        # an archive with --subset is not listed first (that would decompress it twice); an
        # unknown subset is reported once the read finds no file in it
        # the folder holding the class folders as path parts, () at the top; None: an archive's
        # subset, decided by the first file that matches it as it is read
        self.prefix: tuple[str, ...] | None
        if archive_part is not None:
            self.prefix = archive_part.prefix
        elif subset is not None and not self.is_dir:
            self.prefix = None
        elif not class_folders and subset is None:
            self.prefix = ()
        else:
            self.prefix = self._layout(subset, ((parts, listed) for parts, _, _, listed in self._files()))
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
                self.policy.bad(location, "the file is not in a class folder", hint="documents go in <class>/<file>")
                continue
            if self.class_folders and not _is_utf8(parts[n]):
                self.policy.bad(
                    location, "the class folder's name is not valid UTF-8", hint="rename the folder in UTF-8"
                )
                continue
            try:
                text = data.decode(self.encoding, self.encoding_errors)
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
        folder (with class folders only); None otherwise."""
        want = self.subset_parts
        if want is None:
            return None
        k = len(want)
        if tuple(parts[:k]) == want:
            return want
        if self.class_folders and len(parts) > k + 2 and tuple(parts[-k - 2 : -2]) == want:
            return tuple(parts[:-2])
        return None

    def _layout(self, subset: str | None, entries) -> tuple[str, ...]:
        """The folder to read from as path parts: the one subset names, the one folder that holds
        class folders at the shallowest depth, or () when classes are at the top. entries: (path
        parts, listed as a file) of the input's entries (_files)."""
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

    def _files(self):
        """(path parts, location, read(), listed as a file) of every entry not hidden that stands
        where a document may be, in reading order; read() returns the document's bytes or raises
        _NotADocument. Links to folders, and archive members that are not files or have unsafe
        names, are not listed as files."""
        if self.is_dir:
            yield from self._dir_files()
        else:
            yield from self._tar_files()

    def _dir_files(self):
        self.n_bytes = 0  # read from the folder so far (limits.input_bytes)
        for top, dirs, files in os.walk(self.path, onerror=self._walk_error):
            rel = os.path.relpath(top, self.path)
            parts = [] if rel == os.curdir else rel.split(os.sep)
            # os.walk does not enter linked folders, and lists them with the folders
            linked = [d for d in dirs if os.path.islink(os.path.join(top, d))]
            dirs[:] = sorted(d for d in dirs if not d.startswith(".") and d not in linked)
            for name in sorted(files + linked):
                if not name.startswith("."):
                    location = os.path.join(top, name)
                    yield parts + [name], location, functools.partial(self._read_file, location), name not in linked

    @staticmethod
    def _walk_error(e: OSError):
        raise InputError(e.filename, f"cannot list the folder ({e.strerror or e})")

    def _read_file(self, location: str) -> bytes:
        """The bytes of a regular file in the folder (or linked from inside it)."""
        try:
            linked = os.path.islink(location)
            if linked:
                target = os.path.realpath(location)
                if os.path.commonpath([self.root, target]) != self.root:
                    raise _NotADocument(
                        f"a link to {target}, outside the folder {self.path}",
                        "copy the file into the folder, or skip it with --on-bad-record skip",
                    )
                if not os.path.exists(target):
                    raise _NotADocument(f"a broken link (to {target})", "remove the link or restore its target")
            mode = os.stat(location).st_mode
            if stat.S_ISDIR(mode) and linked:
                raise _NotADocument("a link to a folder (links to folders are not followed)", "move the folder here")
            if not stat.S_ISREG(mode):
                raise _NotADocument(f"{_file_kind(mode)}, not a regular file", "documents are regular files")
            # a file swapped for a FIFO or a link since the checks must not block the open, or lead out
            flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if linked else os.O_NOFOLLOW)
            fd = os.open(location, flags)
            with open(fd, "rb") as f:
                opened = os.fstat(fd)
                if not stat.S_ISREG(opened.st_mode):
                    raise _NotADocument(
                        f"{_file_kind(opened.st_mode)}, not a regular file", "documents are regular files"
                    )
                # a file that grows while it is read is cut at one byte over the bound
                data = b"" if opened.st_size > self.limits.record_bytes else f.read(self.limits.record_bytes + 1)
        except OSError as e:
            raise InputError(location, f"cannot read the file ({e.strerror or e})") from None
        if opened.st_size > self.limits.record_bytes or len(data) > self.limits.record_bytes:
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

    def _tar_members(self):
        """(tar, member) of each member of the archive (of self.part), in archive order."""
        extension = os.path.splitext(self.path)[1].lower()
        part = (self.part.start, self.part.stop) if self.part is not None else None
        # Decompressing outside tarfile makes a truncated stream an error: tarfile alone takes
        # a stream cut at a member boundary for the end of the archive (as a part's stop is).
        try:
            with (
                open_binary(
                    self.path,
                    _COMPRESSED_TARS.get(extension, extension),
                    max_bytes=self.limits.input_bytes,
                    byte_range=part,
                ) as f,
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
        parts = [p for p in member.name.split("/") if p not in ("", ".")]
        unsafe = member.name.startswith("/") or ".." in parts
        if member.isdir() or not parts or (not unsafe and any(p.startswith(".") for p in parts)):
            return None
        read = functools.partial(self._read_member, tar, member, unsafe)
        return parts, f"{self.path}:{member.name}", read, member.isfile() and not unsafe

    def archive_parts(self, part_bytes: int) -> list[ArchivePart]:
        """The tar archive cut into parts of about part_bytes of member data each (the cuts at
        member headers, fixed by the archive), with the layout of the whole archive, in one
        listing pass over it (a compressed archive: one decompression; each part's reader
        decompresses the bytes before its start again). One part when the archive has a
        global pax header (which applies to the members after it)."""
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
        return [ArchivePart(lo, hi, prefix) for lo, hi in zip(cuts, cuts[1:] + [None])]

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
            kind = "a FIFO" if member.isfifo() else "a device" if member.isdev() else f"of tar type {member.type!r}"
            raise _NotADocument(f"the member is {kind}, not a regular file", "documents are regular files")
        if member.size > self.limits.record_bytes:
            problem, hint = too_long(self.limits)
            raise _NotADocument(f"the document is {problem}", hint)
        try:
            stream = tar.extractfile(member)
            assert stream is not None, "members are regular files (checked above)"
            return stream.read()
        except _TAR_ERRORS as e:
            raise self._corrupt(e) from None

    def _corrupt(self, e: Exception) -> InputError:
        return InputError(self.path, f"truncated or corrupt archive ({e})", "re-download the archive")
