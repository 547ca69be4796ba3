"""Standard input as an input: `-` as predict's SOURCE or among ingest's INPUTS, for pipes such as
`zcat day.jsonl.gz | streamfit predict run/ - --format jsonl --out -`.

- Name. The input named `-` (STDIN) becomes `<stdin>` (NAME) when the inputs are expanded
  (streamfit.ingest.inputs): the readers name its records `<stdin>:LINE` as they name a file's
  FILE:LINE, and ingest's manifest records `<stdin>` among its source paths. A file called `-`
  is `./-`; a file called `<stdin>` is `./<stdin>`.
- Format. There is no file name to infer it from, and the first lines cannot be sniffed without
  consuming them: `--format` must say it, one of FORMATS, the formats read line by line from the
  start to the end once (JSONL, CSV/TSV with or without a header, LIBSVM). Parquet (whose index
  is at the end of the file), HDF5, NumPy, ARFF and folders are refused in one line.
- Compression. By the stream's first bytes (gzip, bzip2, xz: `_MAGIC`), since there is no
  suffix; a file's compression stays its suffix's.
- Read once or spooled. `predict` reads the stream once, batch by batch (`open_bytes` hands it
  out once; a second open is refused): rows are scored and written while the input still
  comes. A batch is cut short where the pipe goes quiet (`flushed_when_quiet`): once no byte
  has come for QUIET_S seconds, the records read so far are scored and written as a batch of
  their own, so a slow producer (`tail -f`) sees each record's row within about QUIET_S of it
  rather than after a full batch. A batch's rows do not depend on where it was cut (each row is
  scored alone), so the output is the same bytes as the file's. The reader runs in a thread of
  its own; the wait is a `select` with a timeout, not a poll. Compressed input is decompressed
  above the pipe, so the cut is the same where the producer flushes its compressor (gzip's
  Z_SYNC_FLUSH); a bzip2 stream cannot be flushed short of its 100-900 kB block, so its records
  come a block at a time. `ingest` reads its inputs more than once (the text defaults and the ARFF or array
  headers look at them first, a split or IDF takes a second pass over the stage), so it copies
  the stream once to a temporary file (`spooled`: in --tmp-dir, else TMPDIR, else /tmp), which
  every open of NAME then reads; the file is removed when the ingest ends, however it ends
  (success, an error, Ctrl-C, SIGTERM). On a Dask cluster (ingest --n-workers/--scheduler) the
  workers read that file as a file input's pieces are read: each task names the copy
  (`reading_copy`), which a joined cluster's workers must see at the same path as a local
  input file (Engine.require_shared: --tmp-dir on a disk they share, or the data on a URL).
"""

from __future__ import annotations

import contextlib
import errno
import functools
import io
import logging
import os
import select
import sys
import tempfile
import threading
from collections.abc import Iterable, Iterator
from typing import Any, BinaryIO

from streamfit.errors import InputError, OutputError, os_error_hint
from streamfit.read_ahead import ReadAhead

log = logging.getLogger(__name__)

STDIN = "-"  # the input name that means standard input
NAME = "<stdin>"  # how it is named once expanded: in records' locations, errors and the manifest
FORMATS = ("jsonl", "csv", "tsv", "libsvm")  # read from the start to the end once, line by line

# predict on a pipe: once no byte has come for this long, the records read are scored as a batch
QUIET_S = 0.25
# a compressed stream's first bytes -> the suffix whose decompressor reads it (sources._util.COMPRESSIONS)
_MAGIC = [
    (b"\x1f\x8b\x08", ".gz"),
    *((b"BZh%d1AY&SY" % level, ".bz2") for level in range(1, 10)),
    (b"\xfd7zXZ\x00", ".xz"),
]
_SPOOL_PIECE = 1 << 20
_STOP_POLL_S = 0.2  # while the pipe is quiet, how often the spool looks for a SIGTERM's stop request

_spool: str | None = None  # the spooled copy of stdin while `spooled` holds it
_task = threading.local()  # a Dask worker's task: the copy it reads as NAME (`reading_copy`)
_taken: object = None  # the stdin stream handed out (read once; a test's next command has another)
_emit: Any = None  # while flushed_when_quiet reads: hands a batch cut short to its reader's consumer
_held: Any = None  # ...and the batch the reader is filling (`holding`)


def is_stdin(path: str) -> bool:
    """Whether an expanded input name is standard input."""
    return path == NAME


def check_format(fmt: str | None) -> None:
    """InputError unless `fmt` (--format) is given and is a format read from a stream."""
    if fmt is None:
        raise InputError(
            NAME,
            "standard input has no file name to tell its format by",
            f"pass --format, one of: {', '.join(FORMATS)}",
        )
    if fmt not in FORMATS:
        why = "its index is at the end of the file" if fmt == "parquet" else "it is not read from start to end once"
        raise InputError(
            NAME,
            f"{fmt} input cannot be read from a pipe ({why})",
            f"write it to a file and name the file; standard input takes {', '.join(FORMATS)}",
        )


def _process_stdin() -> BinaryIO:
    """This process's standard input as bytes; InputError when it is closed or a terminal."""
    stream = sys.stdin
    if stream is None:  # started with stdin closed (<&-)
        raise InputError(NAME, "this process has no standard input (closed)", "pipe the data in, or name a file")
    if stream.isatty():
        raise InputError(
            NAME,
            "standard input is a terminal, not data",
            "pipe the data in (zcat day.jsonl.gz | streamfit ... - --format jsonl), or name a file",
        )
    return stream.buffer


class _Rejoined(io.RawIOBase):
    """The process's standard input (`stream`) whose first bytes were read ahead (`head`, to see
    its compression), then the rest: each read at most one read of the pipe (what it holds now,
    not a full buffer), so records are parsed as they arrive. It is read from its descriptor
    `fd` (not through sys.stdin's buffer, which would hold bytes a `select` does not see; a
    test's stream without one: read1 of `stream`); a read that finds the pipe quiet for QUIET_S
    first hands on the batch being filled (`_quiet`). Closing it leaves stdin open."""

    def __init__(self, head: bytes, stream, fd: int | None):
        self._head = head
        self._fd = fd
        self._read_once = getattr(stream, "readinto1", None) or stream.readinto

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        if self._head:
            n = min(len(buffer), len(self._head))
            buffer[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        if self._fd is None:
            return self._read_once(buffer)
        if _emit is not None and not select.select([self._fd], [], [], QUIET_S)[0]:
            _quiet()
        data = os.read(self._fd, len(buffer))
        buffer[: len(data)] = data
        return len(data)


def _read_head(read) -> bytes:
    """The first bytes of a stream (`read(n)`: at most n bytes, b"" at its end), read while they
    may still be the start of a magic of _MAGIC: one read of a pipe as a rule, so that a first
    record shorter than a magic is not held until more come."""
    head = b""
    while any(len(magic) > len(head) and magic.startswith(head) for magic, _ in _MAGIC):
        more = read(max(len(magic) for magic, _ in _MAGIC) - len(head))
        if not more:
            break
        head += more
    return head


def open_bytes() -> tuple[io.RawIOBase, str | None]:
    """(the bytes of standard input as they came, the suffix of their compression, None for
    none): the spooled copy while there is one (`spooled_copy`: a file, which a piece's byte
    range seeks in), else the process's stdin, handed out once."""
    global _taken
    copy = spooled_copy()
    if copy is not None:
        stream: Any = open(copy, "rb", buffering=0)
        head = _read_head(stream.read)
        stream.seek(0)
        return stream, _compression(head)
    stream = _process_stdin()
    if stream is _taken:
        raise InputError(
            NAME, "standard input was read once already and cannot be read again", "save it to a file first"
        )
    _taken = stream
    fd = None
    with contextlib.suppress(OSError, ValueError, io.UnsupportedOperation):  # a test's stream has none
        fd = stream.fileno()
    head = _read_head(stream.read if fd is None else functools.partial(os.read, fd))
    return _Rejoined(head, stream, fd), _compression(head)


def _compression(head: bytes) -> str | None:
    """The suffix of the compression whose magic starts `head`, None for none."""
    return next((suffix for magic, suffix in _MAGIC if head.startswith(magic)), None)


def spooled_copy() -> str | None:
    """The path of the spooled copy of standard input that NAME reads (None: not spooled)."""
    return getattr(_task, "copy", None) or _spool


@contextlib.contextmanager
def reading_copy(copy: str | None) -> Iterator[None]:
    """In a Dask worker's task: NAME reads the spooled copy at `copy` (the driver's, on a disk
    the worker shares) until the block ends; None: nothing changes."""
    before = getattr(_task, "copy", None)
    _task.copy = copy or before
    try:
        yield
    finally:
        _task.copy = before


def rereadable() -> bool:
    """Whether NAME can be opened again (it is spooled)."""
    return spooled_copy() is not None


def live(path: str) -> bool:
    """Whether `path` is standard input read as it comes (not its spooled copy)."""
    return is_stdin(path) and not rereadable()


@contextlib.contextmanager
def holding(path: str, batch) -> Iterator[None]:
    """A reader of `path` fills `batch` (len() records, take() -> the batch, emptied) while the
    block lasts: on standard input read by flushed_when_quiet, a quiet pipe takes it short."""
    global _held
    if not live(path):
        yield
        return
    _held = batch
    try:
        yield
    finally:
        _held = None


def _quiet() -> None:
    """The pipe has been quiet for QUIET_S: the records of the batch being filled go on now."""
    emit, held = _emit, _held
    if emit is not None and held is not None and len(held):
        emit(held.take())


def flushed_when_quiet(batches: Iterable, stop: str) -> Iterator:
    """The batches of a reader of standard input (`batches`, a source), and besides them, in
    their place in the input, each batch cut short where the pipe was quiet for QUIET_S (the
    records it held then, `holding`). The reader runs in a thread of its own
    (streamfit.read_ahead), at most two batches ahead of the consumer; its errors are raised
    here, in their turn, and a SIGTERM while the pipe is quiet as Terminated(stop)."""
    global _emit
    ahead = ReadAhead(batches, 2, "streamfit-stdin", stop)
    _emit = ahead.put
    try:
        yield from ahead
    finally:
        ahead.close()
        _emit = None


def _pieces(stream) -> Iterator[bytes]:
    """The bytes of `stream` as they come; a SIGTERM's stop request (streamfit.shutdown) raises
    Terminated within _STOP_POLL_S even while the pipe is quiet, so the spool's clean-up runs
    before the watchdog's grace period ends the process."""
    from streamfit import shutdown

    stop = f"{NAME}: not ingested (its temporary copy was removed)"
    try:
        fd: int | None = stream.fileno()
    except (OSError, ValueError, io.UnsupportedOperation):  # a stream without a descriptor (a test's)
        fd = None
    while True:
        if fd is None:
            piece = stream.read1(_SPOOL_PIECE)
        else:
            while not select.select([fd], [], [], _STOP_POLL_S)[0]:
                shutdown.check(stop)
            piece = os.read(fd, _SPOOL_PIECE)
        if not piece:
            return
        yield piece
        shutdown.check(stop)


def _why(e: OSError) -> str:
    """The cause of a failed write of the spool and the fix."""
    if e.errno in (errno.ENOSPC, errno.EDQUOT):
        return f"{e.strerror}; free space there, or spool elsewhere with --tmp-dir DIR (or TMPDIR)"
    return f"{e.strerror or e}; {os_error_hint(e)}"


@contextlib.contextmanager
def spooled(tmp_dir: str | None) -> Iterator[int]:
    """Copy standard input to a temporary file in `tmp_dir` (None: TMPDIR, else /tmp) that every
    open of NAME reads until the block ends; yields its size in bytes. The file is removed when
    the block ends, however it ends; a full disk is one line naming the folder and the fix."""
    global _spool
    stdin = _process_stdin()
    directory = tmp_dir or tempfile.gettempdir()
    try:
        fd, path = tempfile.mkstemp(prefix="streamfit-stdin-", suffix=".spool", dir=directory)
    except OSError as e:
        where = f"--tmp-dir {tmp_dir}" if tmp_dir else f"{directory} (TMPDIR)"
        raise OutputError(f"{where}: cannot hold the copy of standard input: {_why(e)}") from None
    size = 0
    try:
        with open(fd, "wb") as f:
            try:
                for piece in _pieces(stdin):
                    f.write(piece)
                    size += len(piece)
                f.flush()
            except OSError as e:
                raise OutputError(
                    f"{path}: cannot hold the copy of standard input after {size} bytes: {_why(e)}"
                ) from None
        log.info("%s: spooled to %s (%d bytes)", NAME, path, size)
        _spool = path
        yield size
    finally:
        _spool = None
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
