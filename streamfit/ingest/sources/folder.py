"""A folder per class: <class>/<file>, each file one document labelled by its folder name, in a
directory or in a tar archive (.tar, .tar.gz/.tgz, .tar.bz2, .tar.xz), e.g. 20 Newsgroups.

Layout: when files sit at <top>/<class>/<file> and none at <class>/<file> (20news-bydate-train/
sci.space/60155), the top folders are subsets: a single one is used, several need subset=...;
subset always selects a top folder (others are ignored). Files at any other depth are bad
records; names starting with '.' are ignored. Finding the layout lists the input once (for an
archive that is one decompressing pass over it, skipped when subset names the top folder). Directories are read in sorted order (class,
then file name, both by code point); archives in archive order. Documents are decoded with
encoding/encoding_errors (20 Newsgroups needs encoding='latin-1'); a decode error is a bad record.
With class_folders=False every file (under subset, if given) is a document without a label
(None), at any depth: how `streamfit predict` reads a folder of new documents.
"""

from __future__ import annotations

import os
import tarfile

from streamfit.errors import InputError
from streamfit.ingest.sources._util import TextBatcher, check_batch_size, check_encoding, open_binary, require_path
from streamfit.ingest.sources.policy import BadRecordPolicy

TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz", ".tar.bz2", ".tbz2", ".tar.xz", ".txz")
_COMPRESSED_TARS = {".tgz": ".gz", ".tbz2": ".bz2", ".txz": ".xz"}
_TAR_ERRORS = (tarfile.TarError, EOFError, OSError)


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
    ):
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
        self.class_folders = class_folders
        # an archive with --subset is not listed first (that would decompress it twice); an
        # unknown subset is reported once the read finds no file in it
        self.prefix: tuple[str, ...]  # the folder holding the class folders: (subset,), or () at the top
        if subset is not None and not self.is_dir:
            self.prefix = (subset,)
        elif not class_folders and subset is None:
            self.prefix = ()
        else:
            self.prefix = self._layout(subset)
        self.n_read = 0

    def __iter__(self):
        self.n_read = 0
        batcher = TextBatcher(["text"])
        n = len(self.prefix)
        tops = set()
        for parts, location, read in self._files():
            if tuple(parts[:n]) != self.prefix:
                tops.add(parts[0])
                continue
            self.n_read += 1
            if self.class_folders and len(parts) != n + 2:
                self.policy.bad(location, "the file is not in a class folder", hint="documents go in <class>/<file>")
                continue
            data = read()
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
        if self.subset is not None and self.n_read == 0:
            listed = ", ".join(sorted(tops)) or "none"
            raise InputError(self.path, f"no folder {self.subset!r}", f"--subset must be one of: {listed}")

    def _layout(self, subset: str | None) -> tuple[str, ...]:
        """The top folder to read from: (subset,), or () when classes are at the top."""
        tops = set()
        depths = set()
        for parts, _, _ in self._files():
            depths.add(len(parts))
            if len(parts) > 1:
                tops.add(parts[0])
        listed = ", ".join(sorted(tops)) or "none"
        if subset is not None:
            if subset not in tops:
                raise InputError(self.path, f"no folder {subset!r}", f"--subset must be one of: {listed}")
            return (subset,)
        if 2 in depths or 3 not in depths:
            return ()
        if len(tops) > 1:
            raise InputError(
                self.path, f"holds several folders of class folders: {listed}", "pass --subset with one of them"
            )
        return (tops.pop(),)

    def _files(self):
        """(path parts, location, read()) of every file not hidden, in reading order."""
        if self.is_dir:
            yield from self._dir_files()
        else:
            yield from self._tar_files()

    def _dir_files(self):
        for top, dirs, files in os.walk(self.path):
            dirs[:] = sorted(d for d in dirs if not d.startswith("."))
            rel = os.path.relpath(top, self.path)
            parts = [] if rel == os.curdir else rel.split(os.sep)
            for name in sorted(files):
                if not name.startswith("."):
                    location = os.path.join(top, name)
                    yield parts + [name], location, lambda location=location: self._read_file(location)

    def _read_file(self, location: str) -> bytes:
        try:
            with open(location, "rb") as f:
                return f.read()
        except OSError as e:
            raise InputError(location, f"cannot read the file ({e.strerror or e})") from None

    def _tar_files(self):
        extension = os.path.splitext(self.path)[1].lower()
        # Decompressing outside tarfile makes a truncated stream an error: tarfile alone takes
        # a stream cut at a member boundary for the end of the archive.
        try:
            with (
                open_binary(self.path, _COMPRESSED_TARS.get(extension, extension)) as f,
                tarfile.open(fileobj=f, mode="r|") as tar,
            ):
                for member in tar:
                    parts = [p for p in member.name.split("/") if p not in ("", ".")]
                    if member.isfile() and parts and not any(p.startswith(".") for p in parts):
                        yield parts, f"{self.path}:{member.name}", lambda member=member: self._read_member(tar, member)
        except _TAR_ERRORS as e:
            raise self._corrupt(e) from None

    def _read_member(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> bytes:
        try:
            stream = tar.extractfile(member)
            assert stream is not None, "members are regular files (the caller checks isfile())"
            return stream.read()
        except _TAR_ERRORS as e:
            raise self._corrupt(e) from None

    def _corrupt(self, e: Exception) -> InputError:
        return InputError(self.path, f"truncated or corrupt archive ({e})", "re-download the archive")
