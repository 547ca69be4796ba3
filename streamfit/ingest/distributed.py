"""Pass 1 of `streamfit ingest --n-workers N / --scheduler ADDRESS`: the input's pieces
featurized on Dask workers, merged by the driver in input order into the rows of the in-process
pass.

The pieces are fixed by the input alone (`plan_pieces`): each input file (after
`expand_inputs`: a glob, a dataset directory), except that an uncompressed LIBSVM or JSONL file
is cut into byte ranges of about `piece_size` (the input's uncompressed bytes / PIECES_PER_INPUT,
or / PIECES_PER_THREAD per worker thread where that is more, at least MIN_PIECE_BYTES, at most
PIECE_BYTES), of equal size, each ending right after a newline, a Parquet file likewise into
runs of row groups, a folder corpus (a directory,
local or behind a URL, or a zip archive) into runs of files or members of about
FOLDER_PIECE_BYTES, and a tar archive larger than PIECE_BYTES into runs of members of about
FOLDER_PIECE_BYTES. A worker reads its piece with the source reader of the
in-process pass (a byte range counts its lines from its start), featurizes it (hashing, kept indices, range checks, and the
IDF/l2 of a one-pass ingest) and encodes its labels in a vocabulary of its own, in order of
first appearance. Bad records are kept with their locations (--on-bad-record error: the error,
raised by the driver in the piece's turn). The driver takes the pieces' results in input order:
it moves the piece's FILE:LINE locations down by the lines of the file's earlier pieces,
replays its bad records into the policy (counts, quarantine file), appends the piece's new
labels to the store's vocabulary (so the classes are in order of first appearance over the
whole input, as in process) and places the piece's rows in the store: rows [start, start + n)
of it, which cut the store's chunks (of chunk_rows rows, fixed by the row numbers alone).

Three decisions are taken from the first rows read: multilabel or not by a LIBSVM/JSONL reader
(in its file's first piece), by the pass (its first batch), and the number of regression
outputs (the first good target). Each is taken from the first piece that decides it; a piece
whose own first rows decided otherwise is featurized again with the earlier decisions given, as
the in-process pass would have read it. So the rows, their order, the chunks and every digest
are the in-process store's for any number of workers (tests/ingest/test_distributed.py); only
the text of an unknown-label bad record, which lists the unknown labels of its batch, may list
others (a piece's batches end where the piece ends).

The rows stay on the workers: the driver gets a piece's summary (its counts, bad records,
vocabulary, decisions and, for a split, the first class of each row), never its rows; the
summary task goes before other work on its worker (priority), as the driver waits for it. The
chunks a piece completes are written by one task (`write_chunks`), through the StoreWriter's
ChunkSink, with the pieces' label ids mapped to the store's, where Dask finds most of their rows
(the piece's worker, as a rule); the rows a chunk takes from an earlier piece held by another
worker come with that piece, whole. The task returns the chunks' entries (rows, nnz, SHA-256)
and largest columns; the driver takes them in chunk order into the StoreWriter, which writes
the manifest and commits as in process. At most WINDOW_PER_THREAD pieces per worker thread are
in flight, and as many write tasks: memory is bounded by a few pieces' rows per worker. The
driver's cost is per task (Dask's scheduler runs in its process for --n-workers): a piece costs
three tasks (featurize, summary, the write of the chunks it completes, if any); the pieces made
together go in one submission (client.map). Label
vocabulary, IDF and the stratified split follow as in process (pipeline.py): the driver holds
one stratum per row and draws the split; pass 2 runs on the workers (pass2_document_frequencies,
pass2_write: each final chunk read from the stage, finished and written by one task).
"""

from __future__ import annotations

import itertools
import logging
import os
from collections import deque
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import scipy.sparse as sp

from streamfit import on_worker, storage
from streamfit.errors import InputError, StreamfitError
from streamfit.ingest import stdin
from streamfit.ingest.featurize import Featurizer
from streamfit.ingest.labels import LabelVocabulary
from streamfit.ingest.limits import ReadLimits
from streamfit.ingest.pipeline import _first_class, _Pass1, add_document_frequencies, check_stop
from streamfit.ingest.sources.folder import FolderPart
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.runlog import RunProgress
from streamfit.store.store import ChunkSink, Store, StoreWriter, WrittenChunk

log = logging.getLogger(__name__)

# pieces in flight per worker thread: the one running, the next queued behind it, and the one
# whose summary waits for the running piece to end (a worker runs one task at a time), so that a
# worker has a piece queued while the driver merges (with 2 it often had none)
WINDOW_PER_THREAD = 3
PIECE_BYTES = 64 << 20  # larger uncompressed LIBSVM / JSONL files, Parquet files and tar archives are cut (plan_pieces)
# ...and so is a smaller LIBSVM / JSONL / Parquet file where the input as a whole is small: into
# pieces of its total bytes / PIECES_PER_INPUT, at least MIN_PIECE_BYTES (piece_size), so that
# an input of one file of a few MB keeps a few workers busy (cut only at PIECE_BYTES it had been
# one piece, one worker's work, at any N), while an input of many such files is one piece a file
# (each piece costs the driver about 0.02 CPU s: 64 files of 4 MB cut into 256 pieces tripled
# the driver's CPU at 16 workers, docs/benchmarks.md, session 15)
PIECES_PER_INPUT = 16
# ...or into PIECES_PER_THREAD pieces per worker thread where that is more (a large cluster): one
# piece per thread leaves every worker idle from its own piece's end to the slowest piece's, and
# the chunk writes only start after each piece
PIECES_PER_THREAD = 4
MIN_PIECE_BYTES = 1 << 20
# documents per piece of a folder corpus: small, as its documents are small and many (20
# Newsgroups: 36 MB in 18 846 documents). A directory or a zip archive is cut whatever its size
# (listing it costs little: a walk, one listing of a URL prefix, a zip's central directory); a
# tar archive only over PIECE_BYTES (its listing is a pass over it, and each piece decompresses
# the bytes before it: 20 Newsgroups' 14 MB tar.gz stays one piece)
FOLDER_PIECE_BYTES = 8 << 20


@dataclass
class PieceRows:
    """What a worker made of one piece of the input: its featurized rows in batches (labels as
    ids into `classes`, the piece's own vocabulary), and what the driver merges."""

    path: str
    kind: str = ""
    n_read: int = 0
    batches: list[tuple[sp.csr_matrix, Any]] = field(default_factory=list)  # (X, class ids, indicator or targets)
    classes: list[str] = field(default_factory=list)
    multilabel: bool | None = None  # decided by the piece's first batch (None: it had none)
    n_outputs: int | None = None  # regression outputs, decided by the piece's first good target
    empty: int = 0
    first_empty: str | None = None
    c1: int = 0  # records read as latin-1 with C1 controls (streamfit.ingest.text_checks)
    first_c1: str | None = None
    bad: list[tuple[str, str, str | bytes, str]] = field(default_factory=list)  # location, problem, raw, hint
    n_lines: int = 0  # lines read (line-based formats): where the file's next piece starts counting
    n_rows: int = 0  # rows featurized (in `batches`)
    labels: object = None  # a split's strata: the rows' class ids (own vocabulary), from summary()
    source_multilabel: bool | None = None  # the reader's decision (LIBSVM, JSONL), None: not taken
    error: StreamfitError | None = None  # what stopped the piece (raised by the driver in its turn)


class _RecordingPolicy(BadRecordPolicy):
    """A worker's bad-record policy: raises in error mode; otherwise keeps each bad record for
    the driver, which replays it into the real policy (its counts and quarantine file)."""

    def __init__(self, mode: str, found: list):
        super().__init__("skip" if mode == "quarantine" else mode)
        self.found = found

    def bad(self, location: str, problem: str, raw: str | bytes = "", hint: str = "") -> None:
        super().bad(location, problem, raw, hint)
        self.found.append((location, problem, raw, hint))


class _Collector(_Pass1):
    """_Pass1 whose rows are kept for the driver (in `rows`) instead of written."""

    rows: PieceRows

    def emit(self, X: sp.csr_matrix, labels) -> None:
        self.rows.batches.append((X, labels))


@dataclass(frozen=True)
class Piece:
    """A piece of the input: a whole file (or folder), bytes [start, stop) of an uncompressed
    line-based file, cut right after a newline, row groups [start, stop) of a Parquet file, or
    a part of a folder corpus (files of a directory, members of an archive)."""

    path: str
    byte_range: tuple[int, int] | None = None
    row_groups: tuple[int, int] | None = None  # [start, stop) of a Parquet file
    folder_part: FolderPart | None = None
    copy: str | None = None  # standard input's (path <stdin>): its spooled copy, which the worker reads


def plan_pieces(
    paths: list[str], o, source_options: dict, piece_bytes: int, folder_piece_bytes: int, threads: int = 1
) -> list[Piece]:
    """The pieces of the input files, in input order, for a cluster of `threads` worker threads:
    with cut = piece_size(the input's uncompressed bytes, piece_bytes, threads), an uncompressed
    LIBSVM or JSONL file (within --max-input-bytes) is cut into k = round(its size / cut) byte
    ranges of its size / k, each ending right after a newline (k < 2: whole); a Parquet file
    into runs of row groups of about cut (their uncompressed bytes); a folder corpus into runs of
    documents of about folder_piece_bytes (sources.folder_parts, read with source_options): a
    directory or a zip archive always, a tar archive when its file is over piece_bytes (its
    listing is one pass over it, which costs about what reading a smaller archive whole does);
    any other input is one piece (a zip member, data.zip:data.csv, among them). The cuts depend on the input and `threads` alone; the store
    does not depend on them (its chunks are cut by row numbers)."""
    from streamfit.ingest.sources import RANGE_FORMATS, folder_parts, infer_format, sniff_format
    from streamfit.ingest.sources._util import COMPRESSIONS
    from streamfit.ingest.sources.archive import split_member
    from streamfit.ingest.sources.folder import container

    limits = ReadLimits(record_bytes=o.max_record_bytes, input_bytes=o.max_input_bytes)
    copy = stdin.spooled_copy()  # standard input's pieces are its copy's, named <stdin>
    locations = [storage.resolve(copy if stdin.is_stdin(path) and copy else path) for path in paths]
    folders = [(o.format or infer_format(path)) == "folder" for path in paths]
    sizes = []  # each input's size where it is an uncompressed file (one HEAD each on S3), else 0
    for path, location, folder in zip(paths, locations, folders):
        info: dict[str, Any] = {}
        if stdin.is_stdin(path):
            raw, compression = stdin.open_bytes()  # compressed or not by its first bytes
            raw.close()
            info = {} if compression else location.fs.info(location.path)  # type: ignore[attr-defined]
        elif not folder and split_member(path) is None and os.path.splitext(path)[1].lower() not in COMPRESSIONS:
            info = location.fs.info(location.path)  # type: ignore[attr-defined]
        sizes.append(info["size"] if info.get("type") == "file" else 0)
    cut = piece_size(sum(sizes), piece_bytes, threads)
    pieces = []
    for path, location, folder, size in zip(paths, locations, folders, sizes):
        if folder:
            held_in = container(path)  # its look-up, behind a URL, goes on to the parts' opens
            archive, archive_info = held_in
            if archive != "tar" or _size(location, archive_info) > piece_bytes:
                parts = folder_parts(path, folder_piece_bytes, limits, held_in=held_in, **source_options)
                pieces += [Piece(path, folder_part=part) for part in parts]
            else:
                pieces.append(Piece(path))
            continue
        n_pieces = round(size / cut)
        kind = (o.format or infer_format(path) or sniff_format(path)) if n_pieces > 1 else None
        if kind == "parquet":
            cuts = _row_group_cuts(location, cut)
            pieces += [Piece(path, row_groups=(lo, hi)) for lo, hi in zip(cuts[:-1], cuts[1:])]
        elif kind in RANGE_FORMATS and size <= o.max_input_bytes:
            cuts = _line_cuts(location, size, -(-size // n_pieces))
            pieces += [Piece(path, (lo, hi)) for lo, hi in zip(cuts[:-1], cuts[1:])]
        else:
            pieces.append(Piece(path))
    return [replace(piece, copy=copy) if stdin.is_stdin(piece.path) else piece for piece in pieces]


def _size(location: storage.Location, info: dict[str, Any] | None) -> int:
    """The file's size: from its look-up `info` where there is one (behind a URL), else asked."""
    return int(info["size"]) if info else location.fs.size(location.path)  # type: ignore[attr-defined]


def piece_size(total: int, piece_bytes: int, threads: int) -> int:
    """The bytes per piece of the files of an input of `total` bytes (its uncompressed files), on
    `threads` worker threads: total / max(PIECES_PER_INPUT, PIECES_PER_THREAD x threads), within
    [MIN_PIECE_BYTES, piece_bytes] (piece_bytes where that is smaller). A function of the input
    and the cluster's size (the chunks, cut by row numbers, do not depend on the pieces)."""
    pieces = max(PIECES_PER_INPUT, PIECES_PER_THREAD * threads)
    return min(piece_bytes, max(MIN_PIECE_BYTES, -(-total // pieces)))


def _row_group_cuts(location: storage.Location, piece_bytes: int) -> list[int]:
    """0, the row groups where the (uncompressed) bytes since the previous cut reach piece_bytes,
    and the number of row groups (from the file's footer)."""
    import pyarrow.parquet as pq

    meta = pq.ParquetFile(location.path, filesystem=location.arrow_filesystem()).metadata
    cuts, since = [0], 0
    for g in range(meta.num_row_groups):
        if since >= piece_bytes:
            cuts.append(g)
            since = 0
        since += meta.row_group(g).total_byte_size
    return cuts + [meta.num_row_groups]


def _line_cuts(location: storage.Location, size: int, piece_bytes: int) -> list[int]:
    """0, the offsets just after the first newline at or beyond every piece_bytes from the
    previous cut, and size. Behind a URL each look reads one 64 KiB block (a ranged GET): with
    fsspec's default read-ahead (50 MiB on S3) the driver had read most of the file, serially,
    before any piece started."""
    cuts = [0]
    with location.open_read(block_size=1 << 16) as f:
        while cuts[-1] + piece_bytes < size:
            pos = cuts[-1] + piece_bytes
            f.seek(pos)
            while block := f.read(1 << 16):
                newline = block.find(b"\n")
                if newline >= 0:
                    pos += newline + 1
                    break
                pos += len(block)
            if not block or pos >= size:
                break
            cuts.append(pos)
    return cuts + [size]


@on_worker.task
def featurize_piece(
    piece: Piece,
    o,
    layout,
    source_options: dict,
    featurizer_dict: dict,
    idf: np.ndarray | None,
    classes: list[str] | None,
    multilabel: bool | None,
    n_outputs: int | None,
    source_multilabel: bool | None,
    finish_rows: bool,
) -> PieceRows:
    """One piece featurized as pipeline._Pass1 does it (runs on a worker). classes: the store's
    declared or --like classes (labels outside them are bad records), None to collect the
    piece's own; multilabel, n_outputs: decisions taken already, None to take them here;
    source_multilabel: the file's decision (its first piece's), given to the source reader."""
    rows = PieceRows(piece.path)
    featurizer = Featurizer.from_dict(featurizer_dict, idf=idf)
    vocab = LabelVocabulary(classes, frozen=classes is not None)
    policy = _RecordingPolicy(o.on_bad_record, rows.bad)
    p = _Collector(o, layout, source_options, featurizer, vocab, multilabel, "", policy)
    p.rows = rows
    if n_outputs is not None:
        p.n_outputs = n_outputs
    overrides = {"multilabel": source_multilabel} if source_multilabel is not None else {}
    try:
        with stdin.reading_copy(piece.copy):
            source = p.read_input(
                piece.path, finish_rows, piece.byte_range, piece.row_groups, piece.folder_part, **overrides
            )
    except StreamfitError as e:  # a clean error, not a worker's "Compute Failed" log with a traceback
        rows.error = e
        return rows
    rows.kind = source.kind
    rows.n_lines = getattr(source, "n_lines", 0)
    rows.source_multilabel = source.multilabel
    rows.n_read, rows.classes = p.read, vocab.classes
    rows.multilabel, rows.n_outputs = p.multilabel, p.n_outputs
    rows.empty, rows.first_empty = p.empty, p.first_empty
    rows.c1, rows.first_c1 = p.c1, p.first_c1
    rows.n_rows = sum(X.shape[0] for X, _ in rows.batches)
    return rows


def summary(rows: PieceRows, strata: bool) -> PieceRows:
    """What the driver needs of a piece (runs on the worker that holds it): everything but its
    rows, with their class ids when a split needs strata (`strata`; not for numeric targets)."""
    labels = None
    if strata and rows.batches and rows.n_outputs is None:
        labels = _stacked_labels([bl for _, bl in rows.batches])
    return replace(rows, batches=[], labels=labels)


def _stacked_labels(labels: list):
    """Label batches (class ids, sparse indicators, or target rows) one after the other."""
    if sp.issparse(labels[0]):
        return sp.vstack(labels, format="csr")
    return np.vstack(labels) if np.ndim(labels[0]) == 2 else np.concatenate(labels)


def _stacked(batches: list) -> tuple[sp.csr_matrix, object]:
    """The rows of (X, labels) batches as one (X, labels)."""
    return sp.vstack([bx for bx, _ in batches], format="csr"), _stacked_labels([bl for _, bl in batches])


def rows_slice(rows: PieceRows, lo: int, hi: int, ids: np.ndarray | None) -> tuple[sp.csr_matrix, object]:
    """Rows [lo, hi) of a piece as (X, labels), the labels mapped to the store's ids by `ids`
    (None: as they are)."""
    taken = []
    start = 0
    for bx, bl in rows.batches:
        stop = start + bx.shape[0]
        if stop > lo and start < hi:
            a, b = max(lo - start, 0), min(hi, stop) - start
            taken.append((bx[a:b], _mapped(bl[a:b], ids) if ids is not None else bl[a:b]))
        start = stop
    return _stacked(taken)


@on_worker.task
def write_chunks(sink: ChunkSink, first: int, chunks: list[tuple[int, list]]) -> list[WrittenChunk]:
    """Chunks first, first + 1, … written through the store's sink (runs on a worker), each given
    as (its first row, its parts in row order): (piece rows, lo, hi, label id map) for rows
    [lo, hi) of a piece (rows_slice). A piece held by another worker arrives whole."""
    return [
        sink.write(first + k, row_start, *_stacked([rows_slice(*part) for part in parts]))
        for k, (row_start, parts) in enumerate(chunks)
    ]


class PassShown:
    """A pass of a distributed ingest shown as the in-process ingest shows its passes: on
    ingest's one `bar` (a terminal; its unit records: `done` before this pass, of `total` in all
    passes, None while unknown), else, with o.progress (a log), a line per `unit` (piece, chunk)
    with the count, elapsed time and ETA (runlog.RunProgress's lines)."""

    def __init__(self, o, name: str, unit: str, bar: RunProgress | None, done: int = 0, total: int | None = None):
        self.bar, self.done, self.total = bar, done, total
        self.lines = RunProgress("lines") if bar is None and o.progress else None
        self.name, self.unit = name, unit
        self.n, self.k = 0, 0

    def begin(self, n: int) -> None:
        """The pass has n pieces or chunks (its lines count them)."""
        self.n, self.k = n, 0
        if self.lines is not None:
            self.lines.begin(self.name, 0, n, unit=self.unit)

    def add(self, records: int) -> None:
        """One more piece or chunk done, of `records` records."""
        self.k += 1
        self.done += records
        if self.bar is not None:
            self.bar.count(self.done, self.total)
        elif self.lines is not None:
            self.lines.count(self.k, self.n, final=self.k == self.n)


def run_distributed(p1, engine, finish_rows: bool, bar: RunProgress | None = None) -> None:
    """pipeline._Pass1.run with the input's pieces featurized on the Dask cluster of `engine`
    (an Engine entered by the caller; see the module docstring); p1 ends as an in-process run
    leaves it. bar: ingest's one bar on a terminal (the records read; else lines per piece)."""
    o = p1.o
    threads = max(engine.total_threads, 1)
    pieces = plan_pieces(list(o.inputs), o, p1.source_options, PIECE_BYTES, FOLDER_PIECE_BYTES, threads)
    featurizer_dict = p1.featurizer.to_dict()
    lines_before: dict[str, int] = {}  # per file: the lines of its pieces merged so far
    source_decision: dict[str, bool] = {}  # per file: multilabel as its reader decided it
    client = engine.client
    assert client is not None
    window = WINDOW_PER_THREAD * threads
    frozen = list(p1.vocab.classes) if p1.vocab.frozen else None
    idf = client.scatter(p1.featurizer.idf, broadcast=True) if p1.featurizer.idf is not None else None

    def submit(batch: list[Piece], source_multilabel: bool | None = None) -> list[tuple]:
        """(piece, its rows' future, its summary's future) for each piece of batch, featurized
        with the decisions taken so far, in two submissions (the summaries with the pieces, so
        each is ready when the driver takes its piece)."""
        n = len(batch)
        futures = client.map(
            featurize_piece,
            batch,
            *(
                [value] * n
                for value in (
                    o,
                    p1.layout,
                    p1.source_options,
                    featurizer_dict,
                    idf,
                    frozen,
                    p1.multilabel,
                    p1.n_outputs if p1.numeric else None,
                    source_multilabel,
                    finish_rows,
                )
            ),
            pure=False,
        )
        # a summary goes first on its worker: the driver waits for it to place the piece's rows
        summaries = client.map(summary, futures, [bool(o.test_size)] * n, pure=False, priority=2)
        return list(zip(batch, futures, summaries))

    chunks = _ChunkWriter(p1, client, window)
    pending: deque = deque()
    queued = iter(pieces)
    progress = PassShown(o, "ingest", "piece", bar)  # the pieces merged, of all
    progress.begin(len(pieces))
    try:
        while True:
            batch = list(itertools.islice(queued, window - len(pending)))
            if batch:
                pending.extend(submit(batch))
            if not pending:
                break
            piece, future, summarized_rows = pending.popleft()
            rows = summarized_rows.result()
            again = _disagrees(p1, rows, source_decision.get(piece.path))
            if again:
                log.info("%s: featurized again with %s (decided by the input before it)", piece.path, again)
                [(_, future, summarized_rows)] = submit([piece], source_decision.get(piece.path))
                rows = summarized_rows.result()
            offset = lines_before.get(piece.path, 0)
            ids = merge(p1, _shifted(rows, offset) if offset else rows)
            chunks.place(future, rows.n_rows, ids)
            lines_before[piece.path] = offset + rows.n_lines
            if rows.source_multilabel is not None:
                source_decision.setdefault(piece.path, rows.source_multilabel)
            progress.add(rows.n_read)
            check_stop(o)  # a SIGTERM: no more submissions; the writes in flight are settled below
        chunks.finish()
    except BaseException:
        chunks.settle()  # no write of ours still running when the caller deletes the attempt
        raise


class _ChunkWriter:
    """Cuts the input's rows, as the driver places them in order, into the store's chunks of
    chunk_rows rows, has the chunks each piece completes written on the workers by one task
    (write_chunks) and takes the written chunks into the StoreWriter in order."""

    def __init__(self, p1, client, window: int):
        self.p1, self.client, self.window = p1, client, window
        self.parts: list[tuple] = []  # the open chunk's (piece future, lo, hi, ids)
        self.rows = 0  # rows placed so far
        self.chunks = 0  # chunks submitted so far
        self.writes: deque = deque()  # write_chunks futures in chunk order

    def place(self, future, n_rows: int, ids: np.ndarray | None) -> None:
        """A piece's n_rows rows, next in the store; ids: its label ids as the store's. The
        chunks they complete are written by one task, which runs where Dask finds most of their
        rows: the piece's own worker, unless the open chunk's earlier rows weigh more."""
        chunk_rows = self.p1.layout.chunk_rows
        complete = []
        lo = 0
        while lo < n_rows:
            hi = min(n_rows, lo + chunk_rows - self.rows % chunk_rows)
            self.parts.append((future, lo, hi, ids))
            self.rows += hi - lo
            lo = hi
            if self.rows % chunk_rows == 0:
                complete.append(self._take_parts())
        self._submit(complete)
        _take_written(self.p1.writer, self.writes, self.window)

    def finish(self) -> None:
        self._submit([self._take_parts()] if self.parts else [])
        _take_written(self.p1.writer, self.writes, 0)

    def _take_parts(self) -> tuple[int, list]:
        """The open chunk as (its first row, its parts)."""
        parts, self.parts = self.parts, []
        return self.rows - sum(hi - lo for _, lo, hi, _ in parts), parts

    def _submit(self, chunks: list[tuple[int, list]]) -> None:
        """Write chunks (first row, parts), the next ones of the store, in one task."""
        if not chunks:
            return
        writer = self.p1._writer()
        self.writes.append(self.client.submit(write_chunks, writer.sink, self.chunks, chunks, pure=False, priority=1))
        self.chunks += len(chunks)

    def settle(self) -> None:
        """Wait for the chunk writes in flight (their failures are not this error's cause)."""
        _settle(self.writes)


def _take_written(writer: StoreWriter, writes: deque, keep: int) -> None:
    """Chunk writes (futures of lists of WrittenChunk, in chunk order) into `writer`: waiting
    for the oldest until at most `keep` are in flight, then those finished at the head of the
    queue."""
    while writes and (len(writes) > keep or writes[0].done()):
        for written in writes.popleft().result():
            writer.add_written(written)


def _settle(writes: deque) -> None:
    """Wait for the chunk writes in flight, so none writes into an attempt being deleted."""
    from distributed import wait

    wait(list(writes))


def _open_stage(path: str) -> Store:
    return Store(path, scratch=True)


def packed_rows(rows: np.ndarray) -> tuple[int, int, np.ndarray | None]:
    """Increasing row numbers as a task argument of about 1 bit a row instead of 8 bytes (pass 2's
    selections would otherwise put 8 bytes per row into the task graph the scheduler receives:
    12 MiB at 1.6 M rows): (first, last + 1, None) for a run of consecutive rows, else (first,
    last + 1, the np.packbits of the mask over [first, last + 1)). unpacked_rows inverts it."""
    start, stop = int(rows[0]), int(rows[-1]) + 1
    if stop - start == len(rows):
        return start, stop, None
    mask = np.zeros(stop - start, dtype=bool)
    mask[rows - start] = True
    return start, stop, np.packbits(mask)


def unpacked_rows(start: int, stop: int, bits: np.ndarray | None) -> np.ndarray:
    """The row numbers (int64, increasing) that packed_rows packed."""
    if bits is None:
        return np.arange(start, stop, dtype=np.int64)
    return start + np.flatnonzero(np.unpackbits(bits, count=stop - start)).astype(np.int64)


@on_worker.task
def stage_document_frequencies(stage_path: str, lo: int, hi: int, packed_train: np.ndarray) -> np.ndarray:
    """Pass 2's document frequencies (int64, n_features) over chunks [lo, hi) of the stage store,
    counting the rows that the boolean mask `train` (over those chunks' rows, np.packbits of it:
    `packed_train`) selects."""
    stage = _open_stage(stage_path)
    df = np.zeros(stage.n_features, dtype=np.int64)
    row0 = stage.chunk_bounds(lo)[0]
    train = np.unpackbits(packed_train, count=stage.chunk_bounds(hi - 1)[1] - row0).astype(bool)
    for i in range(lo, hi):
        c = stage.read_chunk(i, cache=False)
        add_document_frequencies(df, c.X, train[c.row_start - row0 : c.row_start - row0 + c.n_rows])
    return df


def pass2_document_frequencies(engine, stage: Store, train: np.ndarray, o, shown: PassShown) -> np.ndarray:
    """Pass 2's document frequencies over the stage's rows that the mask `train` selects, counted
    on the workers (a run of chunks per worker thread) and summed here: integer counts, the same
    for any number of workers. o: the IngestOptions (a SIGTERM stops between results, check_stop);
    shown: the pass's progress (its rows, a run at a time)."""
    client = engine.client
    runs = [r for r in np.array_split(np.arange(stage.n_chunks), max(engine.total_threads, 1)) if r.size]
    futures = []
    for run in runs:
        lo, hi = int(run[0]), int(run[-1]) + 1
        rows = slice(stage.chunk_bounds(lo)[0], stage.chunk_bounds(hi - 1)[1])
        packed = np.packbits(train[rows])  # 1 bit a row in the task graph
        futures.append(client.submit(stage_document_frequencies, stage.path, lo, hi, packed, pure=False))
    df = np.zeros(stage.n_features, dtype=np.int64)
    shown.begin(len(futures))
    for future, run in zip(futures, runs):
        df += future.result()
        shown.add(stage.chunk_bounds(int(run[-1]))[1] - stage.chunk_bounds(int(run[0]))[0])
        check_stop(o)
    return df


@on_worker.task
def finish_chunk(stage_path: str, sink: ChunkSink, cid: int, row_start: int, packed: tuple, featurizer_dict, idf):
    """Chunk `cid` of a final store (runs on a worker): the stage's rows `rows` (increasing; given
    as packed_rows(rows): `packed`), IDF-weighted and normalized (Featurizer.finish, row by row: the
    bits of the in-process pass, which finishes whole stage chunks), written through the final
    store's sink."""
    rows = unpacked_rows(*packed)
    stage = _open_stage(stage_path)
    featurizer = Featurizer.from_dict(featurizer_dict, idf=idf)
    parts = []
    for i in range(int(rows[0]) // stage.chunk_rows, int(rows[-1]) // stage.chunk_rows + 1):
        c = stage.read_chunk(i, cache=False)
        take = rows[(rows >= c.row_start) & (rows < c.row_start + c.n_rows)] - c.row_start
        parts.append((c.X[take], c.labels[take]))
    X, labels = _stacked(parts)
    return sink.write(cid, row_start, featurizer.finish(X), labels)


def pass2_write(
    engine, stage: Store, writer: StoreWriter, rows: np.ndarray, featurizer: Featurizer, o, shown: PassShown
) -> None:
    """The final store of `writer` from the stage's rows `rows` (increasing), each of its chunks
    finished and written by a worker (finish_chunk; all submitted at once, as a task holds one
    chunk's rows while it runs and returns only its entry), taken into `writer` in order. o: the
    IngestOptions (a SIGTERM stops between chunks, check_stop; the writes in flight are settled);
    shown: the pass's progress (a chunk at a time)."""
    client = engine.client
    idf = client.scatter(featurizer.idf, broadcast=True, hash=False) if featurizer.idf is not None else None
    starts = range(0, len(rows), writer.chunk_rows)
    n = len(starts)
    writes: deque = deque()
    try:  # in one submission: each task's result is a chunk's entry, and it reads its rows itself
        writes.extend(
            client.map(
                finish_chunk,
                [stage.path] * n,
                [writer.sink] * n,
                range(n),
                starts,
                [packed_rows(rows[lo : lo + writer.chunk_rows]) for lo in starts],
                [featurizer.to_dict()] * n,
                [idf] * n,
                pure=False,
            )
        )
        shown.begin(n)
        for lo in starts:
            writer.add_written(writes.popleft().result())
            shown.add(min(writer.chunk_rows, len(rows) - lo))
            check_stop(o)
    except BaseException:
        _settle(writes)
        raise


def _disagrees(p1, rows: PieceRows, source_multilabel: bool | None) -> str:
    """What the piece's first rows decided differently from the input before it ("" if
    nothing): then it is featurized again with the earlier decisions, as the in-process pass
    reads it. The file's reader decides multilabel in its first piece; the pass decides
    multilabel in its first batch, and the regression outputs at its first good target."""
    if source_multilabel is not None and rows.source_multilabel not in (None, source_multilabel):
        return f"the file's multilabel={source_multilabel}"
    if p1.multilabel is not None and rows.multilabel is not None and rows.multilabel != p1.multilabel:
        return f"multilabel={p1.multilabel}"
    if p1.numeric and p1.n_outputs is not None and rows.n_outputs not in (None, p1.n_outputs):
        return f"{p1.n_outputs} outputs"
    return ""


def _shifted(rows: PieceRows, offset: int) -> PieceRows:
    """rows with each location FILE:LINE of its file moved down by `offset` lines (a piece after
    the file's first counts its lines from its start)."""
    prefix = rows.path + ":"

    def shift(location: str | None) -> str | None:
        if location is None or not location.startswith(prefix) or not location[len(prefix) :].isdigit():
            return location
        return f"{prefix}{int(location[len(prefix) :]) + offset}"

    rows.bad = [(shift(where) or where, problem, raw, hint) for where, problem, raw, hint in rows.bad]
    rows.first_empty = shift(rows.first_empty)
    rows.first_c1 = shift(rows.first_c1)
    if isinstance(rows.error, InputError):
        e = rows.error
        rows.error = InputError(shift(e.location) or e.location, e.problem, e.hint)
    return rows


def merge(p1, rows: PieceRows) -> np.ndarray | None:
    """Add one piece's summary to the pass: its bad records, counts and decisions, its new labels
    appended to the store's vocabulary (in the piece's order) and, for a split, its rows'
    strata. Returns the piece's label ids as the store's (None: numeric targets)."""
    for location, problem, raw, hint in rows.bad:
        p1.policy.bad(location, problem, raw, hint)
    if rows.error is not None:
        raise rows.error
    p1.kinds.add(rows.kind)
    p1.read += rows.n_read
    if p1.multilabel is None:
        p1.multilabel = rows.multilabel
    if p1.numeric and p1.n_outputs is None:
        p1.n_outputs = rows.n_outputs
    p1.empty += rows.empty
    p1.first_empty = p1.first_empty or rows.first_empty
    p1.c1 += rows.c1
    p1.first_c1 = p1.first_c1 or rows.first_c1
    ids = None if p1.numeric else p1.vocab.add(rows.classes)
    if p1.o.test_size and rows.n_rows:  # one stratum for numeric targets: a random split
        if ids is None or rows.labels is None:
            p1.strata.append(np.zeros(rows.n_rows, np.int64))
        else:
            p1.strata.append(_first_class(_mapped(rows.labels, ids)))
    return ids


def _mapped(labels, ids: np.ndarray):
    """Label ids of a file's vocabulary as the store's: ids[local id] (multilabel: each row's
    ids mapped, then sorted as LabelVocabulary.encode sorts them)."""
    if not sp.issparse(labels):
        return ids[np.asarray(labels)].astype(np.int32)
    Y = sp.csr_matrix((labels.data, ids[labels.indices].astype(np.int32), labels.indptr.copy()), shape=labels.shape)
    Y.has_sorted_indices = False
    Y.sort_indices()
    return Y
