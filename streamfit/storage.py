"""The one storage layer: every file streamfit writes or reads, on local disk or behind a URL.

A `Location` is a path on a filesystem: a local path, or a URL with a scheme (`s3://`,
`gs://`, `abfs://`, `memory://`, `file://`) opened through fsspec. Credentials and endpoints come
from the standard environment (AWS_*, GOOGLE_*, AZURE_*) and fsspec's configuration
(`~/.config/fsspec/`, `FSSPEC_<PROTOCOL>_<KWARG>` variables); nothing here writes them anywhere,
and a Location's `url` is the text the user gave. A scheme whose package is missing is a
StreamfitError naming the package (`pip install s3fs`), never a local write.

Commit protocol (`begin`, `Attempt.commit`, `committed`), for directories that must appear
complete or not at all: stores, checkpoint steps, models.

- Local disk has an atomic rename: an attempt writes `NAME.partial/`, fsyncs everything in it
  (its files' data and its directories' entries, concurrently: `sync_tree`) and renames it
  to `NAME` (an old `NAME` moves to `NAME.old` just before and is deleted after). `NAME` is
  complete when it exists as a directory.
- Object stores have no rename: an attempt writes its files under a fresh prefix
  `NAME/attempt-<time>-<random>/`; the commit then writes one small object `NAME/COMMITTED`
  (`{"attempt": "attempt-…"}`) — a single PUT, which an object store shows whole or not at
  all — and only then deletes every other `attempt-*` prefix under `NAME` (the data an older
  commit named, and what killed writers left). Readers go through `committed(NAME)`, which
  trusts only `COMMITTED`: a killed writer leaves an attempt that nothing names, which never
  looks complete and is collected by the next commit of `NAME`.
- On S3 (s3fs: `s3://`, `s3a://`, and any S3-compatible server reached through them) the
  commit is a compare-and-swap, so that of two writers of one `NAME` only one commits: `begin`
  records what `NAME/COMMITTED` is when the attempt starts (one HEAD: its ETag, or absent), and
  the commit writes it only if it is still that (`If-None-Match: *` where it was absent,
  `If-Match: <ETag>` where it replaces one). A refusal (412 PreconditionFailed: another writer
  committed `NAME` meanwhile, and its commit collected this attempt's files) deletes this
  attempt and raises a one-line StreamfitError; what is committed stays whole. Each attempt
  begins for one commit, so a writer that commits `NAME` again (a model saved again, a
  checkpoint step saved again on resume) looks again and never refuses itself. Other object
  stores (`memory://`, `gs://`, `abfs://`) write COMMITTED unconditionally: two writers of one
  `NAME` there can still leave an attempt that the other's commit emptied (GCS's and Azure's
  own preconditions are future work). Local disk needs none of it: a second writer is refused
  by a lock (flock) before it writes; behind a URL it is refused by a lease (streamfit.lease),
  which `Attempt.commit` and `publish_file` check first, and the compare-and-swap guards what
  is left.

Single files that are replaced whole (LATEST, run.json, per-sample state chunks, predictions)
go through `Location.write_bytes`: temporary name, fsync, rename on local disk; one PUT on an
object store. Per-sample state chunks skip the fsync (`sync=False`): the checkpoint that counts
them syncs them (`sync_paths`) before its commit (streamfit.checkpoint). What the files hold
(manifests, digests) is decided by their writers.
"""

from __future__ import annotations

import contextlib
import functools
import glob
import json
import os
import re
import secrets
import stat
import tempfile
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, BinaryIO

from streamfit.errors import StreamfitError, output_error

COMMITTED = "COMMITTED"
ATTEMPT_PREFIX = "attempt-"

# the package that provides each scheme, for the error when it is missing
_SCHEME_PACKAGES = {
    "s3": "s3fs",
    "s3a": "s3fs",
    "gs": "gcsfs",
    "gcs": "gcsfs",
    "abfs": "adlfs",
    "abfss": "adlfs",
    "az": "adlfs",
}


def is_url(text: str) -> bool:
    """Whether `text` names a location by a URL scheme (`s3://…`) rather than a local path."""
    return re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", text) is not None


@dataclass(frozen=True)
class Location:
    """A path on a filesystem. `url` is what the user gave (for messages and pickling); `remote`
    is the fsspec filesystem behind a URL, None on the local disk (a `file://` URL too), and
    `path` the path in it. Local paths are absolute."""

    url: str
    remote: object | None
    path: str

    @property
    def local(self) -> bool:
        """Whether this is the local disk (atomic rename, flock, fsync available)."""
        return self.remote is None

    @property
    def s3(self) -> bool:
        """Whether this is behind an S3 URL (s3fs): conditional writes, one-GET reads."""
        return self.remote is not None and _protocol(self.remote) in ("s3", "s3a")

    @property
    def fs(self):
        """The fsspec filesystem: behind a URL its own; on local disk fsspec's LocalFileSystem,
        made (fsspec imported: 40-60 ms with asyncio) only when asked, since local reads and
        writes go through os, and a small local job never needs it."""
        if self.remote is not None:
            return self.remote
        from fsspec.implementations.local import LocalFileSystem

        return LocalFileSystem()

    def __str__(self) -> str:
        return self.url

    def join(self, *parts: str) -> Location:
        if not parts:
            return self
        tail = "/".join(parts)
        if self.local:
            return Location(os.path.join(self.url, *parts), None, os.path.join(self.path, *parts))
        return Location(f"{self.url.rstrip('/')}/{tail}", self.remote, f"{self.path.rstrip('/')}/{tail}")

    @property
    def name(self) -> str:
        return self.path.rstrip("/").rsplit("/", 1)[-1]

    def sibling(self, suffix: str) -> Location:
        """This location with `suffix` appended to its last part (NAME → NAME.partial)."""
        return Location(self.url + suffix, self.remote, self.path + suffix)

    def exists(self) -> bool:
        if self.local:
            return os.path.exists(self.path)
        self._forget_listings()
        return self._fs.exists(self.path)

    def isdir(self) -> bool:
        if self.local:
            return os.path.isdir(self.path)
        self._forget_listings()
        return self._fs.isdir(self.path)

    def is_folder(self) -> bool | None:
        """True for a directory (a prefix behind a URL), False for a file, None if nothing is
        there: one look-up (`look_up`), where `exists()` and `isdir()` ask twice."""
        if self.local:  # one stat, following links (as fsspec's local info)
            try:
                return stat.S_ISDIR(os.stat(self.path).st_mode)
            except FileNotFoundError:
                return None
        info = self.look_up()
        return None if info is None else info["type"] == "directory"

    def look_up(self) -> dict[str, Any] | None:
        """fsspec's `info` of this name ("type": "file" or "directory", "size" in bytes), None
        if nothing is there: one look-up (on S3 a HEAD, and a LIST more when no object has this
        name). On local disk one stat, following links (as fsspec's local info; "other" for
        what is neither), without importing fsspec."""
        if self.local:
            try:
                found = os.stat(self.path)
            except FileNotFoundError:
                return None
            mode = found.st_mode
            kind = "directory" if stat.S_ISDIR(mode) else "file" if stat.S_ISREG(mode) else "other"
            return {"name": self.path, "type": kind, "size": found.st_size}
        self._forget_listings()
        try:
            return self._fs.info(self.path)
        except FileNotFoundError:
            return None

    def _forget_listings(self) -> None:
        """Drop fsspec's cached listings here: other processes (Dask workers, a killed writer)
        write to the same object store, and a stale listing would hide their files."""
        if not self.local:
            self._fs.invalidate_cache(self.path)

    def read_bytes(self) -> bytes:
        if self.local:
            return _read_local(self.path)
        if self.s3:  # one GET: s3fs otherwise asks for the size first (a HEAD)
            return self._fs.cat_file(self.path, max_concurrency=1)
        return self._fs.cat_file(self.path)

    def read_text(self) -> str:
        return self.read_bytes().decode()

    def write_bytes(self, data: bytes | bytearray, *, sync: bool = True) -> None:
        """Replace the file with `data` whole: on local disk a temporary name, fsync and rename
        (then the directory's fsync); on an object store one PUT (durable once it returns).
        sync=False: on local disk neither the file nor its directory is fsynced (readers still
        see the old or the whole new file: the rename); the caller syncs both before anything
        durable refers to the file. OutputError naming the file on failure (disk full,
        read-only, no permission), with nothing partial left."""
        if not self.local:
            try:
                self._fs.pipe_file(self.path, data)
            except OSError as e:
                raise output_error(self.url, e) from e
            return
        tmp = f"{self.path}.tmp-{os.getpid()}-{threading.get_ident()}"
        try:
            write_new_file(tmp, data, sync=sync)
            os.replace(tmp, self.path)
            if sync:
                fsync_path(os.path.dirname(self.path))
        except OSError as e:
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise output_error(self.url, e) from e

    def write_new(self, data: bytes) -> None:
        """Write a file that no reader sees until its directory is committed (inside an
        attempt): no temporary name. On local disk it is synced by the commit, with every
        other file of the attempt (publish_dir)."""
        if self.local:
            write_new_file(self.path, data, sync=False)
        else:
            self._fs.pipe_file(self.path, data)

    def append_text(self, text: str, *, sync: bool = True) -> None:
        """Append `text` (one log line) and, with `sync`, fsync it (else a later fsync_path of
        the file makes it durable). On an object store, which cannot append, the object is
        rewritten whole with the line added (one PUT, durable: readers see the old or the new
        whole file)."""
        if self.local:
            with open(self.path, "a") as f:
                f.write(text)
                f.flush()
                if sync:
                    os.fsync(f.fileno())
            return
        try:
            old = self.read_bytes()
        except FileNotFoundError:
            old = b""
        self.write_bytes(old + text.encode())

    def staging_file(self) -> str:
        """A local path to write this file's new contents to before `publish_file`: beside it
        (`NAME.partial`) on local disk, in the system's temporary directory otherwise."""
        if self.local:
            return self.path + ".partial"
        import tempfile

        fd, path = tempfile.mkstemp(prefix="streamfit-", suffix="-" + self.name)
        os.close(fd)
        return path

    def publish_file(self, staged: str) -> None:
        """Make the finished local file `staged` (from `staging_file`) this file, whole: a rename
        on local disk; an upload on an object store (one PUT, or a multipart upload, which
        shows the object only once complete), then the staged file is removed."""
        if self.local:
            os.replace(staged, self.path)
            fsync_path(os.path.dirname(self.path))
            return
        from streamfit import lease

        try:
            lease.check_held(self)  # a writer that lost its lease to another publishes nothing
            self._fs.put_file(staged, self.path)
        finally:
            os.remove(staged)

    def makedirs(self) -> None:
        """Create the directory and its parents (object stores have no directories: nothing)."""
        if self.local:
            try:
                os.makedirs(self.path, exist_ok=True)
            except OSError as e:
                raise output_error(self.url, e) from e

    def remove(self) -> None:
        """Delete the file, if it exists."""
        with contextlib.suppress(FileNotFoundError):
            if self.local:
                os.remove(self.path)
            else:
                self._fs.rm_file(self.path)

    def remove_tree(self) -> None:
        """Delete the directory (prefix) and everything under it, if it exists: on local disk
        `remove_local_tree` (deletions in flight together); behind a URL fsspec's `rm`, which
        lists the prefix and deletes its objects in batches (S3: a DeleteObjects per 1000 keys)."""
        if self.local:
            remove_local_tree(self.path)
            return
        with contextlib.suppress(FileNotFoundError):  # rm lists the prefix: no existence check before it
            self._fs.rm(self.path, recursive=True)

    def glob(self, pattern: str) -> list[Location]:
        """The entries matching `pattern` (glob syntax: `*`, `?`, `[…]`; fsspec's behind a URL,
        Python's on local disk, where a wildcard does not match a leading dot: no name streamfit
        writes starts with one) under this directory, sorted."""
        base = self.path.rstrip("/")
        if self.local:
            found = sorted(glob.glob(os.path.join(glob.escape(base), pattern)))
        else:
            self._forget_listings()
            found = sorted(self._fs.glob(f"{base}/{pattern}"))
        return [self.join(p[len(base) + 1 :]) for p in found]

    def arrow_filesystem(self):
        """This filesystem for pyarrow (Parquet reads and writes): its own local filesystem on
        local disk, fsspec's through pyarrow's FSSpecHandler otherwise."""
        import pyarrow.fs as pafs

        if self.local:
            return pafs.LocalFileSystem()
        return pafs.PyFileSystem(pafs.FSSpecHandler(self._fs))

    def read_files(self, names: list[str], max_bytes: int | None = None) -> list[bytes | BaseException]:
        """The bytes of the files `names` (paths relative to here, taken literally: no glob), in
        the order given; an exception in place of a file that failed (FileNotFoundError:
        absent). max_bytes: at most that many bytes of each (a ranged read; the files must not
        be empty: S3 refuses a range of an empty object). Behind an asynchronous fsspec
        filesystem (s3fs, gcsfs, …) they are fetched concurrently, and on S3 with one GET each:
        s3fs would otherwise ask each object's size first (a HEAD) to choose a ranged, concurrent
        download, which small files never need."""
        paths = [self.join(name).path for name in names]

        def each(read) -> list[bytes | BaseException]:
            out: list[bytes | BaseException] = []
            for p in paths:
                try:
                    out.append(read(p))
                except Exception as e:  # the caller decides (absent, damaged)
                    out.append(e)
            return out

        if self.local:
            return each(functools.partial(_read_local, max_bytes=max_bytes))
        import asyncio  # behind a URL only: a local read needs no event loop
        import inspect

        fs = self._fs
        limit = {} if max_bytes is None else {"start": 0, "end": max_bytes}
        if not getattr(fs, "async_impl", False):
            return each(functools.partial(fs.cat_file, **limit))
        from fsspec.asyn import sync

        whole = {"max_concurrency": 1} if "max_concurrency" in inspect.signature(fs._cat_file).parameters else {}

        async def fetch():
            return await asyncio.gather(*(fs._cat_file(p, **whole, **limit) for p in paths), return_exceptions=True)

        return sync(fs.loop, fetch)

    def write_files(self, files: dict[str, bytes]) -> None:
        """Behind a URL: write the objects {path relative to here: bytes} inside an attempt (as
        write_new), together (fsspec's `pipe`: concurrent on an asynchronous filesystem), one
        PUT each. Local writers write their files themselves."""
        assert not self.local, "write_files is for object stores"
        self._fs.pipe({self.join(name).path: data for name, data in files.items()})

    def open_read(self, block_size: int | None = None, info: dict[str, Any] | None = None):
        """A binary file object for streaming reads; block_size: behind a URL, the bytes fsspec
        reads ahead of each read (None: the filesystem's default, 50 MiB on S3); info: behind a
        URL, the file's `look_up` just made. fsspec's buffered files (s3fs, gcsfs, adlfs) ask
        for it themselves otherwise, on S3 a HEAD per open: the size, and the ETag that s3fs
        checks each ranged GET against (an object replaced since the look-up fails the read)."""
        from fsspec.spec import AbstractBufferedFile

        if self.local:
            return open(self.path, "rb", buffering=0)
        options = {} if block_size is None else {"block_size": block_size}
        if info is None:
            return self._fs.open(self.path, "rb", **options)
        f = self._fs.open(self.path, "rb", size=info["size"], **options)
        if isinstance(f, AbstractBufferedFile):
            f.details = info
        return f

    @property
    def _fs(self):
        return self.fs  # typed loosely: fsspec's filesystems carry no annotations

    def __reduce__(self):  # reopened from the absolute path or the URL, wherever it is unpickled
        return (resolve, (self.path if self.local else self.url,))


def _read_local(path: str, max_bytes: int | None = None) -> bytes:
    with open(path, "rb") as f:
        return f.read(-1 if max_bytes is None else max_bytes)


def _protocol(fs) -> str:
    protocol = fs.protocol
    return protocol if isinstance(protocol, str) else protocol[0]


def resolve(path_or_url: str) -> Location:
    """The Location of a local path or URL. StreamfitError when the scheme is unknown or the
    package that provides it is not installed (never a local directory named after the URL)."""
    text = os.fspath(path_or_url)
    if not is_url(text):
        _refuse_broken_url(text)
        return Location(text, None, os.path.abspath(text))
    import fsspec

    scheme = text.split("://", 1)[0].lower()
    if not text.split("://", 1)[1].strip("/"):
        raise StreamfitError(f"{text}: names no bucket or path; e.g. {scheme}://BUCKET/NAME")
    try:
        fs, path = fsspec.core.url_to_fs(text)
    except ImportError as e:
        package = _SCHEME_PACKAGES.get(scheme) or getattr(e, "name", None) or "the fsspec implementation"
        raise StreamfitError(
            f"{text}: {scheme}:// needs the package {package}, which is not installed; pip install {package}"
        ) from None
    except ValueError as e:  # fsspec: "Protocol not known"
        raise StreamfitError(f"{text}: unknown URL scheme {scheme}:// ({e})") from None
    if _protocol(fs) == "file":
        return Location(text, None, os.path.abspath(path))
    return Location(text, fs, path)


def _refuse_broken_url(text: str) -> None:
    """StreamfitError for a local path that is a URL with a slash missing (`s3:/bucket/x`,
    `gs:bucket/x`: a scheme fsspec knows, then ':' without '//'), which would otherwise be
    written to a local folder named after it (`./s3:/bucket/x`). A one-letter scheme is a
    Windows drive (`C:/data`), not a URL."""
    found = re.match(r"([A-Za-z][A-Za-z0-9+.-]+):(?!//)/?(.*)", text)
    if found is None:
        return
    scheme, rest = found.group(1).lower(), found.group(2)
    if scheme not in _SCHEME_PACKAGES:
        import fsspec

        if scheme not in fsspec.available_protocols():
            return
    meant = f"file:///{rest}" if scheme == "file" else f"{scheme}://{rest}"
    raise StreamfitError(
        f"{text}: a URL with a slash missing after '{scheme}:'; write {meant}, or ./{text} for a local path"
    )


_CLIENT_ERRORS = {  # errors that object stores' client libraries raise through fsspec, by class name: the fix
    "NoCredentialsError": "no credentials for the object store: set them where its client reads them (S3: "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE, or ~/.aws/credentials)",
    "PartialCredentialsError": "incomplete credentials for the object store: set the missing one (S3: "
    "AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)",
    "EndpointConnectionError": "the object store cannot be reached: check the network and its endpoint "
    "(S3: AWS_ENDPOINT_URL)",
    "ParamValidationError": "the object store refuses the name: check the bucket and object names in the URL",
}


_REFUSALS = {  # codes of the object store's refusals (S3's error codes; s3fs raises them as PermissionError): the fix
    "InvalidAccessKeyId": "the object store does not know this access key: check the credentials (S3: "
    "AWS_ACCESS_KEY_ID, AWS_PROFILE or ~/.aws/credentials) and the endpoint (AWS_ENDPOINT_URL)",
    "SignatureDoesNotMatch": "the secret key does not match the access key: check the credentials (S3: "
    "AWS_SECRET_ACCESS_KEY, or the profile's)",
    "InvalidToken": "the session token is not valid: renew the credentials (S3: AWS_SESSION_TOKEN)",
    "ExpiredToken": "the session token has expired: renew the credentials (S3: AWS_SESSION_TOKEN)",
    "AccessDenied": "the credentials are not allowed this request: check the user's and the bucket's permissions",
}


_REMOTE_REFUSAL = (
    "the object store refused the request: check the credentials and permissions where the command runs "
    "and, with --scheduler, on the Dask workers (S3: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, AWS_PROFILE)"
)


def client_error_message(e: BaseException) -> str | None:
    """One line for an error of an object store's client library (botocore, under s3fs): one that
    fsspec passes through untranslated (no credentials, no endpoint), or a refusal of the request
    (a wrong access key or secret, an expired token, access denied: s3fs raises those as a
    PermissionError whose cause is botocore's ClientError, with no path, so the generic hint for
    a local path would mislead, or one whose cause was lost on its way from a Dask worker); its
    message and the fix; None for any other error."""
    seen: BaseException | None = e
    while seen is not None:
        for cls in type(seen).__mro__:
            if not cls.__module__.startswith("botocore"):
                continue
            if cls.__name__ in _CLIENT_ERRORS:
                return f"{' '.join(str(seen).split())}; {_CLIENT_ERRORS[cls.__name__]}"
            code = getattr(seen, "response", {}).get("Error", {}).get("Code")
            if cls.__name__ == "ClientError" and code in _REFUSALS:
                return f"{' '.join(str(e).split())} ({code}); {_REFUSALS[code]}"
        seen = seen.__cause__ or seen.__context__
    if isinstance(e, PermissionError) and e.errno is None and e.filename is None:
        # s3fs's refusal with its cause lost (raised on a Dask worker and pickled to the driver:
        # `Forbidden`); the operating system's own PermissionError always has an errno
        return f"{' '.join(str(e).split())}; {_REMOTE_REFUSAL}"
    return None


def check_creatable(path: str) -> None:
    """OutputError now, before any work, if a local output could not be made at `path` later
    (its nearest existing folder refuses a new entry: read-only, no permission, or a regular
    file where a folder must be): one trial folder made and removed there. Behind a URL nothing
    is asked (a request; the first write reports a refusal)."""
    if is_url(path):
        return
    parent = os.path.dirname(os.path.abspath(path))
    while not os.path.exists(parent):
        parent = os.path.dirname(parent)
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".streamfit-check-", dir=parent))
    except OSError as e:
        raise output_error(path, e) from None


def absolute(path_or_url: str) -> str:
    """A local path made absolute; a URL as given (how outputs and inputs are named and compared)."""
    text = os.fspath(path_or_url)
    return text if is_url(text) else os.path.abspath(text)


def public(path_or_url: str) -> str:
    """`absolute(path_or_url)` without any user:password@ part of a URL: what streamfit records
    (manifests, run.json), so a credential given inside a URL is never written down."""
    return re.sub(r"^([A-Za-z][A-Za-z0-9+.-]*://)[^/@]*@", r"\1", absolute(path_or_url))


def write_new_file(path: str, data: bytes | bytearray | Callable[[BinaryIO], object], *, sync: bool = True) -> None:
    """Write `data` (bytes, or a function that writes them to the open binary file it is given:
    a checkpoint's arrays.npz, hashed as it is written) to a new local file at `path`, and fsync
    it unless `sync` is False (a file of an attempt, synced by its commit). Every local file
    streamfit writes whole goes through here."""
    with open(path, "wb") as f:
        if callable(data):
            data(f)
        else:
            f.write(data)
        if sync:
            f.flush()
            os.fsync(f.fileno())


def fsync_path(path: str) -> None:
    """fsync the local file or directory at `path` (a directory: its entries)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


SYNC_THREADS = 16  # sync_tree's fsyncs in flight at once


def sync_tree(root: str) -> None:
    """fsync every file and directory in the local directory `root` (itself included), up to
    SYNC_THREADS at once: fsync releases the GIL and the filesystem commits concurrent fsyncs
    together (ext4 under load: 20 small new files 10x faster than one after another)."""

    def unlistable(e: OSError):
        raise e

    paths = []
    for top, _, files in os.walk(root, onerror=unlistable):
        paths.append(top)
        paths.extend(os.path.join(top, name) for name in files)
    sync_paths(paths)


def sync_paths(paths: list[str]) -> None:
    """fsync the local files and directories `paths` (a directory: its entries), up to
    SYNC_THREADS at once (see sync_tree)."""
    _in_flight(fsync_path, paths)


def _in_flight(operation: Callable[[str], None], paths: list[str]) -> None:
    """operation(path) for every path, up to SYNC_THREADS at once (a thread pool only for two
    or more); the first error is raised once all have run."""
    if len(paths) <= 1:
        for path in paths:
            operation(path)
        return
    with ThreadPoolExecutor(min(SYNC_THREADS, len(paths))) as pool:
        list(pool.map(operation, paths))


def remove_local_tree(root: str) -> None:
    """Delete the local directory `root` and everything in it, if it exists, ignoring errors (as
    shutil.rmtree(ignore_errors=True); links are deleted, never followed): its files first, then
    its directories a level at a time from the deepest, up to SYNC_THREADS deletions in flight.
    A deletion that frees disk blocks waits on the disk (ext4 with online discard: a directory's
    rmdir 2-4 ms, one after another), and concurrent ones overlap: a pass-1 stage of 30 Zarr
    chunks, 272 directories, 0.7-1.0 s one at a time, 0.09 s four at a time."""
    if os.path.islink(root):
        _each_ignoring_errors(os.unlink, [root])
        return
    files: list[str] = []
    levels: dict[int, list[str]] = {}
    for top, dirs, names in os.walk(root):  # unreadable folders are skipped (their rmdir fails: kept)
        levels.setdefault(top.count(os.sep), []).append(top)
        files += [os.path.join(top, name) for name in names]
        files += [os.path.join(top, d) for d in dirs if os.path.islink(os.path.join(top, d))]
    _each_ignoring_errors(os.unlink, files)
    for depth in sorted(levels, reverse=True):
        _each_ignoring_errors(os.rmdir, levels[depth])


def _each_ignoring_errors(delete: Callable[[str], None], paths: list[str]) -> None:
    """delete(path) for every path, up to SYNC_THREADS at once; an OSError leaves that path."""

    def each(path: str) -> None:
        with contextlib.suppress(OSError):
            delete(path)

    _in_flight(each, paths)


def publish_dir(tmp: str, path: str) -> None:
    """Rename the finished local directory `tmp` to `path` (an existing `path` is moved to
    `path.old` first and then deleted), so `path` is always either the old or the complete new
    directory. Everything in `tmp` is synced before the rename (sync_tree: the data of its
    files, whoever wrote them, and its directories' entries), and `path`'s parent after it (the
    rename itself)."""
    sync_tree(tmp)
    old = path + ".old"
    if os.path.exists(path):
        remove_local_tree(old)
        os.replace(path, old)
    os.replace(tmp, path)
    remove_local_tree(old)
    fsync_path(os.path.dirname(path))


class Attempt:
    """One attempt at writing directory `target` (see the module docstring): write its files
    under `location`, then `commit()`; `abort()` deletes them. `what` names the directory in
    messages ("store", "model", …). `condition`: on S3 the precondition of the commit's write of
    COMMITTED, as s3fs's `pipe_file` takes it (`{"mode": "create"}`: none there when the attempt
    began; `{"IfMatch": ETag}`: that one), None elsewhere (an unconditional write)."""

    def __init__(self, target: Location, location: Location, what: str = "directory", condition: dict | None = None):
        self.target, self.location, self.what, self.condition = target, location, what, condition
        self.started = time.time()

    def commit(self) -> None:
        """Make the attempt the complete `target`, replacing what was there (OSError on failure:
        then `target` is as it was). On S3, StreamfitError when another writer committed `target`
        after this attempt began: this attempt is deleted and nothing of it is committed."""
        if self.target.local:
            publish_dir(self.location.path, self.target.path)
            return
        from streamfit import lease

        try:
            lease.check_held(self.target)  # a writer that lost its lease to another commits nothing
        except StreamfitError:
            self.abort()
            raise
        pointer, record = self.target.join(COMMITTED), json.dumps({"attempt": self.location.name}).encode()
        if self.condition is None:
            pointer.write_new(record)
        else:
            try:
                pointer.fs.pipe_file(pointer.path, record, **self.condition)
            except OSError as e:
                if not precondition_failed(e):
                    raise
                # unless COMMITTED names this attempt: the client retried the PUT after its first try landed
                if not _names(pointer, self.location.name):
                    self._refused()
        for stale in self.target.glob(f"{ATTEMPT_PREFIX}*"):
            if stale.name != self.location.name:
                stale.remove_tree()

    def _refused(self) -> None:
        """Delete this attempt, whose commit S3 refused, and say so (StreamfitError)."""
        self.abort()
        began = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.started))
        raise StreamfitError(
            f"{self.target.url}: another writer committed this {self.what} while this one was writing "
            f"(started {began}); nothing of this attempt was committed: run it again, or write to another --out"
        ) from None

    @property
    def files(self) -> Location:
        """Where the directory's contents are once committed (what `committed(target)` then gives)."""
        return self.target if self.target.local else self.location

    def abort(self) -> None:
        self.location.remove_tree()


# S3's refusals of a conditional write: the precondition did not hold (412), or another
# conditional write of the key was in flight at once (409, AWS)
_PRECONDITION_CODES = ("PreconditionFailed", "ConditionalRequestConflict", "412", "409")


def precondition_failed(e: BaseException) -> bool:
    """Whether s3fs's error `e` from a conditional PUT means the precondition did not hold: s3fs
    raises FileExistsError for `mode="create"` on an existing key, FileNotFoundError for
    `IfMatch` on a key deleted meanwhile, and a plain OSError (errno 22) for `IfMatch` on another
    ETag, each caused by botocore's ClientError with the S3 error code. A missing bucket
    (FileNotFoundError too, code NoSuchBucket) is not: no writer committed there, the store's
    place is gone, and the error stays the caller's."""
    codes = []
    seen: BaseException | None = e
    while seen is not None:
        codes.append(getattr(seen, "response", {}).get("Error", {}).get("Code"))
        seen = seen.__cause__ or seen.__context__
    if "NoSuchBucket" in codes:
        return False
    return isinstance(e, (FileExistsError, FileNotFoundError)) or any(c in _PRECONDITION_CODES for c in codes)


def _names(pointer: Location, attempt: str) -> bool:
    """Whether the commit record `pointer` names `attempt` now."""
    try:
        return json.loads(pointer.read_bytes()).get("attempt") == attempt
    except (OSError, ValueError, AttributeError):
        return False


def begin(target: Location, *, clear: bool = True, what: str = "directory", scratch: bool = False) -> Attempt:
    """Start writing directory `target` (named `what` in messages). Local: `NAME.partial/` (an
    old one is deleted unless `clear` is False: the caller has checked, under its lock, that no
    live writer owns it). Object store: a fresh `NAME/attempt-<time>-<random>/` prefix; on S3
    also one HEAD of `NAME/COMMITTED`, the precondition of the commit (module docstring), unless
    `scratch`: the attempt is read in place and deleted, never committed."""
    if target.local:
        staging = target.sibling(".partial")
        if clear:
            staging.remove_tree()
        return Attempt(target, staging, what)
    name = f"{ATTEMPT_PREFIX}{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{secrets.token_hex(4)}"
    return Attempt(target, target.join(name), what, _commit_condition(target) if target.s3 and not scratch else None)


def _commit_condition(target: Location) -> dict:
    """The precondition for committing `target` on S3 later: `{"IfMatch": ETag}` of its
    COMMITTED now, or `{"mode": "create"}` if it has none (one HEAD; s3fs's `info` would also
    LIST the prefix when the object is absent)."""
    fs = target.fs
    bucket, key, _ = fs.split_path(target.join(COMMITTED).path)
    try:
        found = fs.call_s3("head_object", Bucket=bucket, Key=key)
    except FileNotFoundError:
        return {"mode": "create"}
    except OSError as e:
        raise output_error(target.url, e) from e
    return {"IfMatch": found["ETag"]}


def uncommit(target: Location) -> None:
    """Delete the committed directory `target` (the inverse of `Attempt.commit`) so that a kill
    part-way leaves nothing that looks complete: on local disk it is renamed to `NAME.old` first
    (where `publish_dir` puts a directory it replaces) and deleted from there; on an object store
    its COMMITTED record goes first, then the prefix."""
    if target.local:
        old = target.path + ".old"
        remove_local_tree(old)
        os.replace(target.path, old)
        remove_local_tree(old)
    else:
        target.join(COMMITTED).remove()
        target.remove_tree()


def committed(target: Location) -> Location | None:
    """Where the complete contents of directory `target` are, or None if it has none: on local
    disk `target` itself when it is a directory (not a `.partial` one); on an object store the
    attempt that `target/COMMITTED` names."""
    if target.local:
        return target if target.isdir() and not target.path.endswith(".partial") else None
    return commit_record(target)


def commit_record(target: Location) -> Location | None:
    """The attempt that `target/COMMITTED` names (on local disk too: a directory copied from an
    object store as it lay there), or None if there is no such record."""
    pointer = target.join(COMMITTED)
    try:
        record = json.loads(pointer.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError as e:
        raise StreamfitError(f"{pointer.url}: unreadable commit record ({e}); write the directory again") from None
    attempt = record.get("attempt") if isinstance(record, dict) else None
    if not isinstance(attempt, str) or not attempt.startswith(ATTEMPT_PREFIX) or "/" in attempt:
        raise StreamfitError(f"{pointer.url}: names no attempt ({record!r:.80}); write the directory again")
    return target.join(attempt)


def copied_file_by_file(target: Location, marker: str, noun: str, *, url_fix: str, local_fix: str) -> str | None:
    """Why directory `target`, which should hold a `noun` ("store", "model", "checkpoint") whose
    every copy has the file `marker`, does not open, when it is a copy made file by file; None
    when it is not one. Behind a URL: `marker` at its top and no COMMITTED record (the caller
    found none), as `aws s3 cp --recursive` or fsspec's `put` leaves a local directory: the line
    says how to commit the copy (its files under attempt-copy/, a COMMITTED record naming it), or
    `url_fix`. On local disk: no `marker` at its top but a COMMITTED record naming an attempt
    folder that holds it, as a directory behind a URL copied down as it lay there: the line names
    that folder, then `local_fix`. The message starts with `target`."""
    if not target.local:
        if not target.join(marker).exists():
            return None
        return (
            f"{target.url}: holds a {noun}'s files but no {COMMITTED} record, as a copy file by file "
            f"(aws s3 cp --recursive, fsspec's put) leaves it: a {noun} behind a URL is read only once "
            f"committed. Copy the {noun}'s files to "
            f"{target.url}/attempt-copy/ instead and write {target.url}/{COMMITTED} holding "
            f'{{"attempt": "attempt-copy"}}, or {url_fix}'
        )
    try:
        attempt = commit_record(target)
    except StreamfitError:
        return None
    if attempt is None or not attempt.join(marker).exists():
        return None
    return (
        f"{target.url}: has no {marker} but a {COMMITTED} record naming {attempt.name}: a {noun} copied from an "
        f"object store as it lies there; its files are in {attempt.path}: {local_fix}"
    )
