"""Helpers shared by the source readers."""

from __future__ import annotations

import bz2
import codecs
import gzip
import io
import lzma
import os
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import scipy.sparse as sp

from streamfit.errors import InputError
from streamfit.ingest import stdin
from streamfit.ingest.limits import DEFAULT_INPUT_BYTES, ReadLimits
from streamfit.ingest.sources.batches import TextBatch
from streamfit.options import format_bytes
from streamfit.storage import is_url, resolve

# extension: (name, opener(path, "rb") -> a binary stream of the decompressed bytes)
COMPRESSIONS: dict[str, tuple[str, Callable[..., io.BufferedIOBase]]] = {
    ".gz": ("gzip", gzip.open),
    ".bz2": ("bz2", bz2.open),
    ".xz": ("xz", lzma.open),
}

# the largest feature index a reader accepts (LIBSVM, Parquet's indices); a larger one is a bad record
MAX_INDEX = 2**62


def too_long(limits: ReadLimits) -> tuple[str, str]:
    """(problem, hint) of a record longer than limits.record_bytes."""
    return (
        f"longer than {format_bytes(limits.record_bytes)}",
        "raise --max-record-bytes if the record is genuine",
    )


def fits_float32(values) -> np.ndarray:
    """True where a value is finite and stays finite in float32, the precision stores hold
    (|value| ≤ 3.4e38); NaN, infinities and larger values make a record bad."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.isfinite(np.asarray(values, dtype=np.float64).astype(np.float32))


def require_path(path: str, directory_ok: bool = False) -> dict[str, Any] | None:
    """InputError unless path exists (and is a file, unless directory_ok). A URL is checked
    through streamfit.storage (a missing fsspec package is its error) with one look-up
    (`Location.look_up`: on S3 a HEAD for an object, and a LIST more for a prefix), whose
    answer is returned (fsspec's info: size, ETag), for `open_binary(info=)` to open the file
    without asking again. None for a local path or a folder. A member path (data.zip:data.csv,
    sources.archive) checks its archive (and returns the archive's look-up)."""
    from streamfit.ingest.sources.archive import split_member  # it imports this module

    if stdin.is_stdin(path):  # there while the process runs (closed: its open says so)
        return None
    member = split_member(path)
    if member is not None:  # the archive must be there; its member is looked for when it is opened
        return require_path(member[0])
    if is_url(path):
        info = resolve(path).look_up()
        if info is None:
            raise InputError(path, "no such file")
        if info["type"] == "directory":
            if not directory_ok:
                raise InputError(path, "is a folder (prefix) behind a URL, not a file")
            return None
        return info
    if not os.path.exists(path):
        raise InputError(path, "no such file")
    if os.path.isdir(path) and not directory_ok:
        raise InputError(path, "is a directory, not a file")
    return None


def check_batch_size(batch_size: int) -> int:
    if not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, not {batch_size!r}")
    return batch_size


def bom_free(encoding: str) -> str:
    """The codec that reads text in `encoding`: for UTF-8, utf-8-sig, which drops a byte order mark
    at the start (Excel and Windows Notepad write one) instead of making it part of the first
    column name or word; any other encoding as given."""
    return "utf-8-sig" if codecs.lookup(encoding).name == "utf-8" else encoding


def check_encoding(encoding: str, errors: str = "strict") -> str:
    """ValueError unless Python knows the text encoding and the decode-error handler."""
    try:
        codecs.lookup(encoding)
        codecs.lookup_error(errors)
    except LookupError as e:
        raise ValueError(str(e)) from None
    return encoding


def set_option(option: str) -> str:
    """The fix for a field or column an option names that a file lacks: set the option; for the
    id field (which `predict` and `ingest --like` take from the training store) also how to read
    no ids."""
    if option == "--id-field":
        return "set --id-field to this file's id field (or pass --option id_field=None to read no ids)"
    return f"set {option}"


def split_fields(option: str, value: str) -> list[str]:
    """'title, body' -> ['title', 'body'] (the --text-field syntax)."""
    fields = [f.strip() for f in value.split(",")]
    if not all(fields):
        raise ValueError(f"{option} must be a field name or a comma-separated list of them, not {value!r}")
    return fields


class _CheckedStream(io.RawIOBase):
    """A stream whose read errors become InputError naming the file, and which stops with an
    InputError once more than max_bytes have been read from it (after decompression). Standard
    input read as it comes is read a decompressor's one read at a time (`readinto1`: what the
    pipe has brought, not a full buffer, which would wait for more)."""

    def __init__(self, stream, path: str, kind: str | None, max_bytes: int):
        self._stream = stream
        self._readinto = stream.readinto1 if kind is not None and stdin.live(path) else stream.readinto
        self._path = path
        self._kind = kind  # the compression, None for none
        self._max_bytes = max_bytes
        self.n_bytes = 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        try:
            n = self._readinto(buffer)
        except (EOFError, OSError, zlib.error, lzma.LZMAError) as e:
            if self._kind is None:
                raise InputError(self._path, f"cannot read the file ({getattr(e, 'strerror', None) or e})") from None
            raise InputError(
                self._path, f"truncated or corrupt {self._kind} stream", "re-download or re-compress the file"
            ) from e
        self.n_bytes += n
        if self.n_bytes > self._max_bytes:
            raise InputError(
                self._path,
                f"holds more than {format_bytes(self._max_bytes)}"
                + (" after decompression" if self._kind is not None else ""),
                "raise --max-input-bytes if the input is genuine; a small file that decompresses to this much "
                "is a decompression bomb",
            )
        return n

    def close(self) -> None:
        self._stream.close()
        super().close()


class _ByteRange(io.RawIOBase):
    """Bytes [start, stop) of a seekable binary stream (stop None: to its end). A decompressing
    stream seeks forward by decompressing the bytes before start."""

    def __init__(self, stream, start: int, stop: int | None):
        stream.seek(start)
        self._stream = stream
        self._left = stop - start if stop is not None else None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        view = memoryview(buffer) if self._left is None else memoryview(buffer)[: self._left]
        n = self._stream.readinto(view) if view.nbytes else 0
        if self._left is not None:
            self._left -= n
        return n

    def close(self) -> None:
        self._stream.close()
        super().close()


def open_binary(
    path: str,
    extension: str | None = None,
    max_bytes: int = DEFAULT_INPUT_BYTES,
    byte_range: tuple[int, int | None] | None = None,
    info: dict[str, Any] | None = None,
    block_size: int | None = None,
) -> io.BufferedIOBase:
    """Open a file for streaming reads, decompressing .gz/.bz2/.xz by extension (that of the
    path unless given); reading more than max_bytes (after decompression) raises InputError.
    block_size: behind a URL, the bytes fetched ahead of each read (None: the filesystem's).
    Memory stays bounded by the buffer (1 MiB) whatever the compression ratio: the
    decompressors produce at most what a read asks for. byte_range: only bytes [start, stop)
    of the file's contents, after decompression (stop None: to the end; a piece of a
    distributed ingest); the bytes before start are decompressed, not counted in max_bytes.
    info: a file behind a URL as `require_path` looked it up (None: fsspec looks it up again,
    a HEAD on S3). A member path (data.zip:data.csv, data.tgz:data.csv, see sources.archive)
    reads the archive's member, then decompresses it by its own name's extension. Standard
    input (streamfit.ingest.stdin.NAME) is decompressed by its first bytes."""
    try:
        compression = COMPRESSIONS.get(extension or os.path.splitext(path)[1].lower())
        kind: str | None = None
        stream: io.IOBase
        from streamfit.ingest.sources.archive import open_member, split_member  # it imports this module

        raw: Any
        if stdin.is_stdin(path):
            raw, by_magic = stdin.open_bytes()
            compression = COMPRESSIONS.get(by_magic or "")
        elif split_member(path) is not None:  # an archive member: its bytes as the archive stores them
            raw = open_member(path, info, max_bytes)
        else:
            # URLs: fsspec's file object
            raw = resolve(path).open_read(block_size=block_size, info=info) if is_url(path) else path
        if compression is None:
            stream = open(raw, "rb", buffering=0) if isinstance(raw, str) else raw
        else:
            kind, opener = compression
            stream = opener(raw, "rb")
        if byte_range is not None:
            stream = _ByteRange(stream, *byte_range)
        return io.BufferedReader(_CheckedStream(stream, path, kind, max_bytes), 1 << 20)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise InputError(path, f"cannot open the file ({e.strerror or e})") from None


def bounded_lines(f: io.BufferedIOBase, max_bytes: int) -> Iterator[bytes | None]:
    """The lines of a binary stream (newline kept), None in place of a line of more than
    max_bytes bytes before its newline: such a line is never held whole (its rest is skipped),
    so memory stays within max_bytes per line."""
    while line := f.readline(max_bytes + 1):
        if len(line) <= max_bytes or line.endswith(b"\n"):
            yield line
            continue
        while (rest := f.readline(1 << 20)) and not rest.endswith(b"\n"):
            pass
        yield None


def canonical_label(text: str) -> str:
    """Integer-valued numeric labels written canonically ('+1', '1.0', '1e0' -> '1'); other
    labels (and integers beyond 2**53, which float cannot hold exactly) unchanged."""
    try:
        value = float(text)
    except ValueError:
        return text
    if value.is_integer() and abs(value) < 2**53:
        return str(int(value))
    return text


def show(raw: bytes, limit: int = 40) -> str:
    """A token for an error message: quoted, shortened, non-UTF-8 bytes escaped."""
    text = raw[: limit + 1].decode("utf-8", "backslashreplace")
    return repr(text if len(text) <= limit else text[:limit] + "...")


def csr_int64(values: np.ndarray, indices: np.ndarray, indptr: np.ndarray, n_cols: int) -> sp.csr_matrix:
    """CSR with int64 index arrays (scipy downcasts to int32 when the indices fit)."""
    X = sp.csr_matrix((values, indices, indptr), shape=(len(indptr) - 1, n_cols))
    X.indices = np.asarray(X.indices, dtype=np.int64)
    X.indptr = np.asarray(X.indptr, dtype=np.int64)
    return X


class TextBatcher:
    """Collects text records and hands them out as TextBatch objects."""

    def __init__(self, fields: list[str], with_ids: bool = False):
        self.fields = fields
        self.with_ids = with_ids
        self._reset()

    def _reset(self) -> None:
        self.texts: dict[str, list[str]] = {f: [] for f in self.fields}
        self.labels: list = []
        self.locations: list[str] = []
        self.ids: list[str] = []

    def add(self, texts: list[str], label, location: str, record_id: str | None = None) -> None:
        for field, text in zip(self.fields, texts):
            self.texts[field].append(text)
        self.labels.append(label)
        self.locations.append(location)
        if self.with_ids:
            self.ids.append(str(record_id))

    def __len__(self) -> int:
        return len(self.labels)

    def take(self) -> TextBatch:
        batch = TextBatch(self.texts, self.labels, self.locations, self.ids if self.with_ids else None)
        self._reset()
        return batch
