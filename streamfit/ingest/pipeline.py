"""`streamfit ingest`: sources -> features -> a chunked store (or a train/test pair).

Pass 1 streams every source batch through the Featurizer and the label vocabulary into a
StoreWriter. When a stratified split or IDF weights are asked for, pass 1 writes an
intermediate stage, and pass 2 streams it once more: the split is drawn from the labels seen in
pass 1, document frequencies are counted on the training rows only, and the final stores are
written. The stage is held in memory while its chunks fit in MEMORY_STAGE_BYTES (_MemoryStage);
past that, and always on a cluster, it is a scratch store (in `OUT.pass1.partial.partial`, behind
a URL under `OUT.pass1.partial/`: never synced nor committed, so never a valid store; deleted at
the end). Either stage gives pass 2 the same chunks, so the final stores are the same bytes.
Memory stays bounded by the batch and chunk size and MEMORY_STAGE_BYTES (plus, with a split, one
byte and one int per row). With --n-workers / --scheduler both passes run on one Dask cluster
(ingest/distributed.py), whose workers write the chunks.

Kept indices (--no-hash) become store columns, which are int32: _Pass1 refuses, as a bad record
at its file and line, a row with a column beyond the width (--n-features) or, without one,
beyond 2**31 - 2; the width is then the largest kept column + 1, or the width the inputs declare
if that is more (an array's columns, an ARFF file's feature columns, feature_fields:
_declared_width, so an all-zero last column keeps its place), and nothing is allocated by it
before it is known (l2 normalization follows nnz; --idf checks its per-column arrays fit).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import io
import json
import logging
import shlex
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
import scipy.sparse as sp

from streamfit import shutdown, storage
from streamfit.engine import WORKER_TIMEOUT
from streamfit.errors import NO_RECORDS, ConfigError, InputError, StoreError, StreamfitError
from streamfit.ingest import stdin, text_checks
from streamfit.ingest.featurize import Featurizer, idf_weights
from streamfit.ingest.hashing import HashingConfig
from streamfit.ingest.labels import LabelVocabulary
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE, DEFAULT_INPUT_BYTES, DEFAULT_RECORD_BYTES, ReadLimits
from streamfit.options import check_values, distinct_names, format_bytes, option, parse_bytes
from streamfit.runlog import RunProgress, counted, progress_mode
from streamfit.store import DEFAULT_CHUNK_ROWS, Chunk, ChunkSource, Store, StoreWriter, open_store
from streamfit.store.format import MAX_FEATURES
from streamfit.store.store import IDF_FILE, canonical_chunk, overlaps, present, remove_dead_partial, stack_rows

if TYPE_CHECKING:
    from streamfit.lease import Lease

log = logging.getLogger(__name__)

# source options that pick which data is read, not how it is read: they do not carry over to
# `ingest --like` or `predict` (the other options are recorded with the featurizer)
DATA_OPTIONS = {"subset", "y_path"}


def _check_test_size(value: float, what: str) -> None:
    """ConfigError naming `what` (the flag, or the pipeline key) unless 0 < value < 1."""
    if not 0.0 < value < 1.0:
        raise ConfigError(f"{what} {value!r}: must be between 0 and 1 (the share of rows for the test store)")


@dataclass
class IngestOptions:
    """What `streamfit ingest` does, declared once: the Python API, the click options of
    `streamfit ingest` and a pipeline's ingest section (streamfit.config) are built from these
    fields. `hashing`: a HashingConfig, or None to keep numeric indices (--no-hash, `no_hash`)."""

    inputs: list[str] = option(help="source files, folders, dataset directories or globs", flag="")
    out: str = option(help="The store directory to write.", short="-o", metavar="PATH")
    format: Literal["libsvm", "jsonl", "csv", "tsv", "folder", "parquet", "hdf5", "numpy", "arff"] | None = option(
        None, "Input format", default_text="inferred from the file name or its first lines"
    )
    backend: Literal["zarr", "parquet"] | None = option(
        None,
        "Store backend: Zarr v3 (CSR row chunks) or Parquet (one row group per chunk)",
        default_text="the --like store's, else zarr",
    )
    chunk_rows: int | None = option(
        None, "Rows per chunk (the unit of work)", ge=1, default_text=f"the --like store's, else {DEFAULT_CHUNK_ROWS}"
    )
    hashing: HashingConfig | None = None
    # with hashing the width is hashing.n_features; the command line's --n-features sets either
    n_features: int | None = option(
        None,
        "with no_hash: a fixed width, at most 2**31 - 1 (default: the width the inputs declare, else the "
        "largest index + 1)",
        flag="",
        ge=1,
    )
    idf: bool | None = option(
        None,
        "Weight features by IDF counted on the training rows (a second pass) [default: on for text inputs, off "
        "for numeric ones]",
        flag="--idf/--no-idf",
    )
    l2_normalize: bool | None = option(
        None,
        "Scale every row to unit Euclidean norm [default: on for text inputs, off for numeric ones]",
        flag="--l2-normalize/--no-l2-normalize",
    )
    like: str | None = option(
        None,
        "Ingest test data like this training store: same hashing, IDF, width, classes "
        "and source options (field names, encoding, ...; options given here override them).",
        metavar="PATH",
        in_config=False,
    )
    classes: list[str] | None = option(
        None,
        "Declared class vocabulary, comma-separated (a class with a comma in it: a pipeline's `classes:` "
        "list): the store's classes in this order, a label outside "
        "them a bad record. Without it an ARFF input's header declares them (a multilabel file's label "
        "attributes, a class attribute's values, in header order, one without rows included: the model "
        "learns it as never on, evaluate --per-label lists it, a --like store may hold it); other "
        "inputs' labels follow in order of first appearance",
        default_text="an ARFF header's, else order of first appearance",
        check=distinct_names,
    )
    target: Literal["classes", "numeric"] = option(
        "classes",
        "What the label field holds: class labels, or real numbers (regression; several per row, as a "
        "multilabel list, are several outputs). numeric: NaN, inf or text are bad records, and --test-size "
        "draws a random split; --classes names the outputs",
        default_text="classes, or the --like store's",
    )
    test_size: float | None = option(
        None,
        "Fraction of rows for a test store, between 0 and 1 (stratified by class; random for --target numeric)",
        default_text="none: no test store",
        check=_check_test_size,
    )
    test_out: str | None = option(None, "Where to write the test store (required with --test-size).", metavar="PATH")
    seed: int = option(0, "Seed of the train/test split")
    on_bad_record: Literal["error", "skip", "quarantine"] = option(
        "error", "Stop at a bad record, skip and count it, or also copy it to a quarantine file"
    )
    quarantine: str | None = option(None, "Quarantine file", metavar="PATH", default_text="OUT.quarantine.jsonl")
    source_options: dict = option(default_factory=dict, help="format options, e.g. text_field, label_field", flag="")
    batch_size: int = option(DEFAULT_BATCH_SIZE, "Records read and hashed at a time", ge=1)
    max_record_bytes: int = option(
        DEFAULT_RECORD_BYTES,
        "Longest record read: a line of a LIBSVM/JSONL/CSV file, a document of a folder or archive (longer: a "
        "bad record; in CSV, an error). SIZE: bytes, or with a unit (KiB, MiB, GiB, TiB), e.g. 64MiB",
        ge=1,
        metavar="SIZE",
        parse=parse_bytes,
        default_text=format_bytes(DEFAULT_RECORD_BYTES).replace(" ", ""),
    )
    max_input_bytes: int = option(
        DEFAULT_INPUT_BYTES,
        "Most bytes read from one input file, folder or archive, after decompression (a bound on decompression "
        "bombs; more is an error). SIZE: bytes, or with a unit (KiB, MiB, GiB, TiB), e.g. 1TiB",
        ge=1,
        metavar="SIZE",
        parse=parse_bytes,
        default_text=format_bytes(DEFAULT_INPUT_BYTES).replace(" ", ""),
    )
    overwrite: bool = option(False, "Replace existing output stores.")
    csc_block_features: int | None = option(
        None,
        "Also build a column (CSC) copy of the --out store in blocks of N "
        "features (for solvers that walk features; see 'streamfit transpose').",
        ge=1,
    )
    n_workers: int | None = option(
        None,
        "Featurize the input files and write the store's chunks on an embedded Dask cluster of N worker "
        "processes (the store is the same for any N); 0: in this process",
        ge=0,
        default_text="0",
    )
    scheduler: str | None = option(
        None,
        "Featurize the input files on an existing Dask cluster at ADDRESS (tcp://host:8786); its workers read "
        "the inputs and write the store's chunks by their paths or URLs (URLs or a shared disk)",
        metavar="ADDRESS",
    )
    tmp_dir: str | None = option(
        None,
        "Where the copy of standard input (the input -) is kept while the store is written: ingest reads its "
        "inputs more than once; removed when the ingest ends",
        metavar="DIR",
        default_text="TMPDIR, else /tmp",
        in_config=False,
    )
    worker_timeout: float = option(
        WORKER_TIMEOUT,
        f"With --n-workers or --scheduler: seconds without any Dask worker before the ingest fails (default "
        f"{WORKER_TIMEOUT:g}); a worker lost while others remain only moves its tasks to them",
        gt=0,
        metavar="SECONDS",
        show_default=False,
    )
    progress: bool = True

    def __post_init__(self):
        """The bounds and checks of the declarations, and the format options (the same checks
        whether the options come from the command line, a pipeline file or Python)."""
        from streamfit.ingest.sources import check_options

        check_values(self)
        check_options(self.source_options)


@dataclass
class IngestReport:
    read: int = 0
    written: int = 0
    skipped: int = 0
    empty: int = 0  # written rows without features
    stores: dict = field(default_factory=dict)  # path -> rows
    csc_blocks: int = 0  # feature blocks of out's CSC copy (csc_block_features)
    spooled: int | None = None  # bytes of standard input copied to a temporary file (the input -)

    def summary(self) -> str:
        parts = [f"records read {self.read}, written {self.written}, skipped {self.skipped}"]
        if self.spooled is not None:
            parts.append(f"standard input: {self.spooled} bytes spooled to a temporary file, removed")
        if self.empty:
            parts.append(f"{self.empty} rows have no features")
        parts += [f"{path}: {rows} rows" for path, rows in self.stores.items()]
        if self.csc_blocks:
            parts.append(f"CSC copy: {self.csc_blocks} feature blocks")
        return "; ".join(parts)


# IngestOptions fields that do not decide what the stores hold: the inputs (recorded apart, as
# source.paths), where the stores and the skipped records go, how the work is run (the store is
# the same for any number of workers and any batch size), the bound on an input's size (an ingest
# past it fails and writes no store) and the CSC copy (`streamfit run --resume` builds it when missing)
NOT_CONTENT_SETTINGS = frozenset(
    {
        "inputs",
        "out",
        "test_out",
        "quarantine",
        "overwrite",
        "progress",
        "n_workers",
        "scheduler",
        "worker_timeout",
        "tmp_dir",
        "batch_size",
        "max_input_bytes",
        "csc_block_features",
    }
)
# what a --like store decides in place of the options (they are refused with --like, but hashing)
LIKE_DECIDES = ("hashing", "n_features", "idf", "l2_normalize", "classes")


def content_settings(o: IngestOptions) -> dict:
    """The settings of `o`, as given (None: the default), that decide what its stores hold besides
    the inputs' rows, as JSON: hashing, width, values, IDF, normalization, classes, target, split,
    layout, format and its options, the bad-record policy. Each store records them
    (manifest.source["settings"]), so that `streamfit run --resume` keeps a store only while its
    pipeline section still says the same (streamfit.jobs)."""
    settings: dict[str, Any] = {}
    for f in dataclasses.fields(o):
        if f.name in NOT_CONTENT_SETTINGS or (o.like and f.name in LIKE_DECIDES):
            continue
        value = getattr(o, f.name)
        if f.name == "hashing":
            value = value.to_dict() if value is not None else None
        elif f.name == "like":
            value = storage.public(value) if value else None
        elif f.name == "source_options":
            value = dict(value)
        settings[f.name] = value
    return settings


def settings_differences(recorded: dict, now: dict, prefix: str = "") -> list[str]:
    """'KEY OLD → NEW' for each setting of content_settings that differs between `recorded` (a
    store's) and `now`, keys of settings that are mappings on both sides dotted
    (hashing.n_features, source_options.label_field); 'default' for a setting not given, 'none
    (no_hash)' for no hashing."""

    def shown(key: str, value) -> str:
        if key == "hashing" and value is None:
            return "none (no_hash)"
        return "default" if value is None else json.dumps(value)

    differences = []
    for key in sorted(recorded.keys() | now.keys()):
        old, new = recorded.get(key), now.get(key)
        if isinstance(old, dict) and isinstance(new, dict):
            differences += settings_differences(old, new, f"{prefix}{key}.")
        elif old != new:
            differences.append(f"{prefix}{key} {shown(prefix + key, old)} → {shown(prefix + key, new)}")
    return differences


def _row_max_index(X: sp.csr_matrix) -> np.ndarray:
    out = np.full(X.shape[0], -1, dtype=np.int64)
    nonempty = np.diff(X.indptr) > 0
    if X.nnz:
        out[nonempty] = np.maximum.reduceat(X.indices.astype(np.int64), X.indptr[:-1][nonempty])
    return out


def _take_rows(X, labels, keep: np.ndarray):
    return X[keep], (labels[keep] if sp.issparse(labels) else np.asarray(labels)[keep])


def check_options_read(source_options: dict, inputs: list[str], fmt: str | None) -> None:
    """ConfigError for a format option given here that the format of no input reads: open_source
    leaves out what its format does not take (the options `--like` and `predict` carry over
    from a training file of another format), so `--option feature_fields=...` for a JSONL file
    would be dropped without a word. Inputs of a format not told yet are left to pass 1. Used by
    ingest and by predict (on the options given to it, not the ones recorded with the model)."""
    from streamfit.ingest.sources import FORMATS, format_options, infer_format, sniff_format

    if not source_options:
        return
    formats = set()
    for path in inputs:
        name = fmt or infer_format(path) or sniff_format(path)
        if name not in FORMATS:
            return
        formats.add(name)
    read = set().union(*map(format_options, formats))
    unread = sorted(set(source_options) - read)
    if unread:
        readers = ", ".join(name for name in FORMATS if unread[0] in format_options(name))
        raise ConfigError(
            f"format option {unread[0]}: not read from {' or '.join(sorted(formats))} input (it is for "
            f"{readers} input); drop it"
        )


def _check_options(o: IngestOptions) -> None:
    if not o.inputs:
        raise StreamfitError("no input given: name one or more source files")
    for key, off in (("label_field", None), ("y_dataset", None), ("class_folders", False)):
        if key in o.source_options and o.source_options[key] == off:
            raise StreamfitError(
                f"{key}={off} reads no labels, but ingest needs them: drop the option, or name the "
                "label field, column or dataset"
            )
    if o.test_size is not None:
        if not o.test_out:
            raise StreamfitError("--test-size needs --test-out PATH for the test store")
        if o.like:
            raise StreamfitError("--like ingests test data as it is: it cannot be split again (drop --test-size)")
    elif o.test_out:
        raise StreamfitError(
            "--test-out needs --test-size FRACTION (the share of rows for the test store), or drop --test-out"
        )
    if o.hashing is None and o.n_features is not None and o.n_features > MAX_FEATURES:
        raise StreamfitError(
            f"--n-features {o.n_features} is above {MAX_FEATURES}, the widest a store can hold (its column "
            "indices are int32): pass a smaller --n-features, or hash the indices (drop --no-hash)"
        )
    if o.like and o.target == "numeric" and not open_store(o.like).regression:
        raise StreamfitError(f"--target numeric: the --like store {o.like} holds class labels; drop --target")
    if o.like and (o.idf or o.l2_normalize or o.classes or o.n_features):
        raise StreamfitError(
            "--like takes hashing, IDF, normalization, width and classes from the training store; "
            "drop --idf/--l2-normalize/--classes/--n-features"
        )


@dataclass(frozen=True)
class _Layout:
    """How the stores are written: the backend and the rows per chunk (the options', else the
    --like store's, else zarr and DEFAULT_CHUNK_ROWS)."""

    backend: str
    chunk_rows: int

    def writer(
        self,
        path: str,
        multilabel: bool,
        overwrite: bool,
        n_outputs: int | None = None,
        scratch: bool = False,
        lease: Lease | None = None,
    ) -> StoreWriter:
        return StoreWriter(
            path,
            backend=self.backend,
            multilabel=multilabel,
            n_outputs=n_outputs,
            chunk_rows=self.chunk_rows,
            overwrite=overwrite,
            scratch=scratch,
            lease=lease,
        )


def _take_leases(stores: list[str]) -> dict[str, Lease]:
    """The leases (streamfit.lease) of the stores behind URLs among `stores`, by path; all or none."""
    taken: dict[str, Lease] = {}
    try:
        for path in stores:
            location = storage.resolve(path)
            if not location.local:
                from streamfit import lease

                held = lease.take(location, "store")
                if held is not None:
                    taken[path] = held
    except BaseException:
        for held in taken.values():
            held.release()
        raise
    return taken


def numeric_targets(labels: list, n_outputs: int | None) -> tuple[np.ndarray, dict[int, str]]:
    """(T, problems): the labels of a batch as float64 targets T (rows × k) and, by row, why a
    label is a bad record (text, NaN, infinite, another count of values than k). A label is a
    number's text, or a list of them (several outputs); k = n_outputs, else the first good row's."""
    values: list[list[float] | None] = []
    problems: dict[int, str] = {}
    for r, label in enumerate(labels):
        items = list(label) if isinstance(label, (list, tuple)) else [label]
        try:
            row = [float(str(v).strip()) for v in items]
        except ValueError:
            problems[r] = f"target {label!r} is not a number"
            values.append(None)
            continue
        if not row or not all(np.isfinite(row)):
            problems[r] = f"target {label!r} is {'empty' if not row else 'NaN or infinite'}"
            values.append(None)
            continue
        if n_outputs is None:
            n_outputs = len(row)
        if len(row) != n_outputs:
            problems[r] = f"target {label!r} has {len(row)} values, the store {n_outputs}"
            values.append(None)
            continue
        values.append(row)
    width = n_outputs or 1
    T = np.array([row if row is not None else [np.nan] * width for row in values], dtype=np.float64).reshape(-1, width)
    return T, problems


# A two-pass ingest in this process holds pass 1's rows in memory (_MemoryStage) while they take
# at most this many bytes, counted as Store.decoded_bytes counts a store; past it they go to the
# scratch store on disk. A small ingest skips the stage's round trip through the disk (compress,
# write, read, decompress, digests: about 0.1 CPU s of a 5 790-document text ingest); memory stays
# bounded by this, as it is by the chunk size with the disk stage.
MEMORY_STAGE_BYTES = 64 * 2**20


def _held_bytes(X: sp.csr_matrix, labels, multilabel: bool, n_outputs: int | None) -> int:
    """The bytes of rows (X, labels) in a stage's chunks: 8 per non-zero (float32 value, int32
    column), 12 per row (int64 row pointer, int32 class id); float64 targets (regression) or 8 per
    label and row (multilabel: int32 ids, int64 pointers)."""
    rows = X.shape[0]
    size = 8 * X.nnz + 12 * rows
    if n_outputs is not None:
        return size + 8 * rows * n_outputs
    return size + (8 * (labels.nnz + rows) if multilabel else 0)


class _MemoryStage(ChunkSource):
    """Pass 1's stage held in memory, for pass 2 to read as it reads a scratch store on disk: the
    rows cut into chunks of chunk_rows rows (StoreWriter's cut) and held as the arrays a Store
    decodes from the stage's chunk files (canonical_chunk: float32 values, int32 columns, int64
    row pointers; labels int32 ids, a 0/1 indicator or float64 targets), so pass 2 and the final
    stores are the same bytes either way. `add` refuses rows past `limit` bytes (the caller then
    moves what is held to the disk stage, `held_rows`)."""

    def __init__(self, chunk_rows: int, multilabel: bool, n_outputs: int | None, limit: int):
        self.chunk_rows, self.multilabel, self.n_outputs, self.limit = chunk_rows, multilabel, n_outputs, limit
        self.regression = n_outputs is not None
        self.held: list[tuple[np.ndarray, np.ndarray, np.ndarray, object]] = []  # (data, indices, indptr, labels)
        self.pending: list[tuple[sp.csr_matrix, object]] = []  # rows not yet a whole chunk
        self.pending_rows = 0
        self.n_rows = self.n_chunks = 0
        self.nbytes = 0
        self.max_index = -1
        self.width = MAX_FEATURES  # the columns of the rows as emitted (their final width once it is known)
        self.n_features = 0  # the stage's width and classes: set by close
        self.classes: list[str] = []

    def add(self, X: sp.csr_matrix, labels) -> bool:
        """Hold rows (X, labels) as _Pass1 emits them; False, holding nothing of them, when they
        would take the held rows past `limit` bytes."""
        size = _held_bytes(X, labels, self.multilabel, self.n_outputs)
        if self.nbytes + size > self.limit:
            return False
        self.nbytes += size
        self.width = X.shape[1]
        self.pending.append((X, labels))
        self.pending_rows += X.shape[0]
        while self.pending_rows >= self.chunk_rows:
            self._cut(self.chunk_rows)
        return True

    def _cut(self, n: int) -> None:
        X, labels = stack_rows(self.pending, self.multilabel, self.n_outputs)
        rest = X.shape[0] - n
        self.pending = [(X[n:], labels[n:])] if rest else []
        self.pending_rows = rest
        X, labels = canonical_chunk(X[:n], labels[:n], self.multilabel, self.n_outputs, "the pass-1 stage")
        indptr = np.asarray(X.indptr, dtype=np.int64)  # as the backends write them (scipy may narrow them)
        self.held.append((X.data, np.asarray(X.indices, dtype=np.int32), indptr, labels))
        self.n_rows += n
        self.n_chunks += 1
        if X.nnz:
            self.max_index = max(self.max_index, int(X.indices.max()))

    def held_rows(self):
        """The rows held, in order, as (X, labels) batches (to write them to the disk stage)."""
        for data, indices, indptr, labels in self.held:
            yield sp.csr_matrix((data, indices, indptr), shape=(len(indptr) - 1, self.width)), labels
        yield from self.pending

    def close(self, n_features: int | None, classes: list[str], min_features: int = 0) -> int:
        """The last chunk cut, the width (n_features, or None: the largest column + 1, at least
        min_features) and the classes set, as StoreWriter.close sets a stage's; returns the width."""
        if self.pending_rows:
            self._cut(self.pending_rows)
        self.n_features = max(self.max_index + 1, min_features) if n_features is None else n_features
        if self.max_index >= self.n_features:
            raise StoreError(f"feature index {self.max_index} is out of range for n_features={self.n_features}")
        self.classes = list(classes)
        return self.n_features

    def read_chunk(self, i: int, cache: bool = False) -> Chunk:
        """Chunk i, built as the Zarr reader builds a chunk read from disk (cache: as
        Store.read_chunk's, no effect here)."""
        data, indices, indptr, labels = self.held[i]
        n_rows = len(indptr) - 1
        X = sp.csr_matrix((data, indices, indptr), shape=(n_rows, self.n_features))
        if self.multilabel:
            assert isinstance(labels, sp.csr_matrix)
            ids = np.asarray(labels.indices, dtype=np.int32)
            lp = np.asarray(labels.indptr, dtype=np.int64)
            labels = sp.csr_matrix((np.ones(len(ids), dtype=np.float32), ids, lp), shape=(n_rows, self.n_classes))
        return Chunk(i, i * self.chunk_rows, X, labels)


class _Pass1:
    """Source batches -> featurized rows with label ids -> one store (or, for a two-pass ingest,
    the stage: held in memory while it fits, `memory`, else a scratch store)."""

    def __init__(
        self,
        o: IngestOptions,
        layout: _Layout,
        source_options: dict,
        featurizer: Featurizer,
        vocab: LabelVocabulary,
        multilabel: bool | None,
        out: str,
        policy,
        memory_limit: int = 0,
    ):
        self.o, self.featurizer, self.vocab, self.multilabel, self.out, self.policy = (
            o,
            featurizer,
            vocab,
            multilabel,
            out,
            policy,
        )
        self.layout = layout
        self.source_options = source_options
        self.writer: StoreWriter | None = None
        # behind a URL, the leases of the stores this ingest writes (taken before it reads: _ingest)
        self.leases: dict[str, Lease] = {}
        # a two-pass ingest's stage, held in memory up to memory_limit bytes (0: on disk from the start)
        self.memory_limit = memory_limit
        self.memory: _MemoryStage | None = None
        self.strata: list[np.ndarray] = []  # first class id of each written row (only for a split)
        self.numeric = o.target == "numeric"  # regression targets instead of class labels
        self.n_outputs: int | None = len(vocab.classes) if self.numeric and vocab.frozen else None
        self.read = 0
        self.progress: RunProgress | None = None  # the records read so far, while run() reads
        self.kinds: set[str] = set()  # the sources' kinds: text, sparse, dense
        self.empty = 0  # kept rows without features
        self.first_empty: str | None = None  # the location of the first
        self.c1 = 0  # records read as latin-1 whose text holds C1 controls (text_checks)
        self.first_c1: str | None = None  # the location of the first

    def _writer(self) -> StoreWriter:
        if self.writer is None:
            # the stage of a two-pass ingest is scratch, ours to replace (a live ingest's is
            # locked); a final store is replaced only with --overwrite, checked again at its publish
            stage = self.out != storage.absolute(self.o.out)
            self.writer = self.layout.writer(
                self.out,
                bool(self.multilabel) and not self.numeric,
                overwrite=self.o.overwrite,
                n_outputs=self.n_outputs if self.numeric else None,
                scratch=stage,
                lease=self.leases.get(self.out),
            )
        return self.writer

    def run(self, finish_rows: bool, bar: RunProgress | None = None) -> None:
        """Read every input in this process; with o.progress, the records read so far are shown:
        on `bar` (on a terminal, ingest's one bar over the records of all passes), else as a line
        every few seconds (streamfit.runlog.RunProgress)."""
        own = None if bar is not None or not self.o.progress else RunProgress(progress_mode())
        if own is not None:
            own.begin("ingest", 0, None, unit="record")
        self.progress = bar or own
        try:
            for path in self.o.inputs:
                self.read_input(path, finish_rows)
            if self.progress is not None:
                self.progress.count(self.read, None, final=True)
        finally:
            self.progress = None
            if own is not None:
                own.close()

    def read_input(
        self,
        path: str,
        finish_rows: bool,
        byte_range: tuple[int, int] | None = None,
        row_groups: tuple[int, int] | None = None,
        folder_part=None,
        **overrides,
    ):
        """Featurize one input file (or folder; or a byte range of a line-based file, row
        groups of a Parquet file or a part of a folder corpus, see open_source) and emit its rows;
        returns the source (self.progress, when run() reads: shown the records read of all inputs
        after each batch). overrides: source options."""
        from streamfit.ingest.sources import open_source

        limits = ReadLimits(record_bytes=self.o.max_record_bytes, input_bytes=self.o.max_input_bytes)
        source = open_source(
            path,
            self.o.format,
            policy=self.policy,
            batch_size=self.o.batch_size,
            limits=limits,
            byte_range=byte_range,
            row_groups=row_groups,
            folder_part=folder_part,
            numeric_targets=self.numeric,
            **{**self.source_options, **overrides},
        )
        self.kinds.add(source.kind)
        for batch in source:
            self._batch(batch, self.featurizer.n_features, finish_rows, text_checks.decoded_with(source))
            if self.progress is not None:
                self.progress.count(self.read + source.n_read, None)
            check_stop(self.o)
        self.read += source.n_read
        return source

    def _batch(self, batch, width, finish_rows, encoding: str | None) -> None:
        """Featurize one batch of records and emit the good ones; `encoding`: what their
        text was decoded with (text_checks.decoded_with)."""
        if self.multilabel is None:
            self.multilabel = any(isinstance(lab, (list, tuple)) for lab in batch.labels)
        from streamfit.ingest.sources import TextBatch

        X = self.featurizer.raw_rows(batch)
        keep = np.ones(X.shape[0], dtype=bool)
        if isinstance(batch, TextBatch):
            self._check_text(batch, keep, encoding)
        if self.numeric:
            labels, problems = numeric_targets(batch.labels, self.n_outputs)
            if self.n_outputs is None and len(problems) < len(batch.labels):
                self.n_outputs = labels.shape[1]
            for row, problem in sorted(problems.items()):
                keep[row] = False
                self.policy.bad(
                    batch.locations[row], problem, hint="fix or drop the record, or skip it with --on-bad-record skip"
                )
        else:
            labels, unknown = self.vocab.encode(batch.labels, self.multilabel)
            if unknown:
                unknown_problem, hint = self._unknown_labels(batch, unknown)
            for r in unknown:
                keep[r] = False
                self.policy.bad(batch.locations[r], unknown_problem(r), hint=hint)
        # kept (--no-hash) indices become store columns: refuse those beyond the width, or beyond
        # the int32 columns a store holds when the width is the data's
        row_max = _row_max_index(X)
        for r in np.flatnonzero(row_max >= (width or MAX_FEATURES)):
            keep[r] = False
            if width is not None:
                from streamfit.ingest.sources.batches import beyond_width

                problem = beyond_width(batch, int(row_max[r]), width)
                hint = "pass a larger --n-features, or hash the indices"
            else:
                problem = (
                    f"feature column {int(row_max[r])} (counted from 0) is beyond {MAX_FEATURES - 1}, "
                    "the largest int32 column a store holds"
                )
                hint = "hash the indices (drop --no-hash), or renumber the features from 0"
            self.policy.bad(batch.locations[r], problem, hint=hint)
        # values that hashing sums or IDF weights beyond float32 (checked before finish stores them)
        idf_to_come = bool(self.o.idf) and self.featurizer.idf is None
        for r, (problem, hint) in sorted(self.featurizer.out_of_range(X, idf_to_come).items()):
            if keep[r]:
                keep[r] = False
                self.policy.bad(batch.locations[r], problem, hint=hint)
        empty = np.flatnonzero(keep & (np.diff(X.indptr) == 0))
        if empty.size:
            self.empty += empty.size
            self.first_empty = self.first_empty or batch.locations[empty[0]]
        if not keep.all():
            X, labels = _take_rows(X, labels, keep)
        # batches of kept indices grow as the file is read: give every batch the final width,
        # or the widest possible one until the width is known at the end
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(X.shape[0], width or MAX_FEATURES))
        if finish_rows:
            X = self.featurizer.finish(X)
        if X.shape[0]:
            self.emit(X, labels)

    def _check_text(self, batch, keep: np.ndarray, encoding: str | None) -> None:
        """Records whose text holds a NUL: bad records (not kept); those with C1 controls read as
        latin-1: counted for ingest's warning (streamfit.ingest.text_checks)."""
        bad, c1 = text_checks.check_batch(batch, encoding, self.policy, "ingest")
        keep[bad] = False
        self.c1 += len(c1)
        if c1 and self.first_c1 is None:
            self.first_c1 = batch.locations[c1[0]]

    def emit(self, X: sp.csr_matrix, labels) -> None:
        """Write featurized rows and their label ids (and keep their strata for a split)."""
        self._write(X, labels)
        if self.o.test_size:  # one stratum for numeric targets: a random split
            self.strata.append(np.zeros(X.shape[0], np.int64) if self.numeric else _first_class(labels))

    def _write(self, X: sp.csr_matrix, labels) -> None:
        """Rows into the stage held in memory while they fit (memory_limit), else into the store
        on disk; the first rows past the limit move what memory holds to the disk first, in order
        (the disk stage is then the one a limit of 0 writes)."""
        if self.memory_limit and self.writer is None:
            if self.memory is None:
                multilabel = bool(self.multilabel) and not self.numeric
                n_outputs = self.n_outputs if self.numeric else None
                self.memory = _MemoryStage(self.layout.chunk_rows, multilabel, n_outputs, self.memory_limit)
            if self.memory.add(X, labels):
                return
            writer = self._writer()
            for held in self.memory.held_rows():
                writer.write_rows(*held)
            self.memory = None
        self._writer().write_rows(X, labels)

    def _unknown_labels(self, batch, unknown: list[int]):
        """(problem(row), hint) for rows whose labels the --like store's classes lack: the row's
        unknown labels, every unknown label of the batch, and the --classes that would hold them."""
        known = self.vocab.index

        def missing(r: int) -> list[str]:
            labels = batch.labels[r] if isinstance(batch.labels[r], (list, tuple)) else [batch.labels[r]]
            return [str(label) for label in labels if str(label) not in known]

        in_batch = list(dict.fromkeys(label for r in unknown for label in missing(r)))
        classes = self.vocab.classes

        def problem(r: int) -> str:
            text = (
                f"label(s) {_listed(missing(r))} not among the {len(classes)} classes of the training store "
                f"({_listed(classes)})"
            )
            if len(in_batch) > len(missing(r)):
                text += f"; unknown labels in the records read with it: {_listed(in_batch)}"
            return text

        every = classes + in_batch
        if any("," in name for name in every):  # --classes splits at commas
            declare = (
                "in a pipeline's ingest section, `classes:` listing every one (--classes cannot name a class "
                "with a comma in it)"
            )
        elif len(every) <= 20:
            declare = f"--classes {shlex.quote(','.join(every))}"
        else:
            declare = "--classes LIST (the training store's classes and these)"
        hint = (
            f"declare every class when ingesting the training data, {declare}, and train again; "
            "--on-bad-record skip would drop these documents and bias the score"
        )
        return problem, hint


def check_stop(o: IngestOptions) -> None:
    """Raise Terminated if a SIGTERM asked to stop (streamfit.shutdown; checked between source
    batches, pieces and chunks): the writers' aborts on the way out remove the unfinished store."""
    shutdown.check(f"{o.out}: not written (its unfinished files are removed); run the command again")


def _listed(names: list[str], most: int = 10) -> str:
    """'a', 'b', … as an error message lists names: at most `most` of them."""
    shown = ", ".join(repr(n) for n in names[:most])
    return shown + (f", … ({len(names)} in all)" if len(names) > most else "")


def _first_class(labels) -> np.ndarray:
    """The class id of each row (multiclass) or its first label, -1 for none (multilabel)."""
    if not sp.issparse(labels):
        return np.asarray(labels, dtype=np.int64)
    first = np.full(labels.shape[0], -1, dtype=np.int64)
    has = np.diff(labels.indptr) > 0
    first[has] = labels.indices[labels.indptr[:-1][has]]
    return first


def _check_paths(o: IngestOptions) -> None:
    """Refuse outputs that overlap each other or an input: the same path, or one inside the other."""
    outputs = [("--out", o.out)] + ([("--test-out", o.test_out)] if o.test_out else [])
    if o.test_out and overlaps(o.out, o.test_out):
        raise StreamfitError(
            f"--test-out {o.test_out} and --out {o.out} overlap (the same path, or one inside the other); "
            "write the two stores to separate paths"
        )
    reads = [("input", p) for p in o.inputs if not stdin.is_stdin(p)] + ([("--like store", o.like)] if o.like else [])
    if o.quarantine:
        for what, path in outputs + reads:
            if overlaps(o.quarantine, path):
                raise StreamfitError(
                    f"--quarantine {o.quarantine} overlaps the {what} {path} (the same path, or one inside the "
                    "other): bad records written there would destroy or corrupt it; choose another --quarantine"
                )
    for flag, out in outputs:
        for what, path in reads:
            if overlaps(out, path):
                raise StreamfitError(
                    f"{flag} {out} overlaps the {what} {path} (the same path, or one inside the other): writing it "
                    f"would destroy what is read; choose another {flag}"
                )


def _half_published_test(o: IngestOptions) -> bool:
    """Whether --test-out holds the test store of an earlier run of this same split (inputs,
    --test-size, --seed) killed before it published --out: the test store is published first,
    so a re-run replaces it and finishes the pair."""
    if not o.test_out or present(storage.resolve(o.out)) or not present(storage.resolve(o.test_out)):
        return False
    try:
        m = Store(o.test_out).manifest
    except StoreError:
        return False
    split = m.counts.get("split") or {}
    return (
        split.get("part") == "test"
        and split.get("test_size") == o.test_size
        and split.get("seed") == o.seed
        and m.source.get("paths") == [_recorded(p) for p in o.inputs]
    )


def stratified_test_mask(strata: np.ndarray, test_size: float, seed: int) -> np.ndarray:
    """True for the rows drawn into the test set: in each stratum (class, or first label; one
    stratum for numeric targets, a plain random split), round(test_size × size) rows chosen by a
    permutation from numpy's PCG64 seeded with `seed`.
    A split that leaves the test or the training rows empty is a ConfigError."""
    rng = np.random.default_rng(seed)
    mask = np.zeros(len(strata), dtype=bool)
    for value in np.unique(strata):
        rows = np.flatnonzero(strata == value)
        n_test = round(test_size * len(rows))
        mask[rng.permutation(rows)[:n_test]] = True
    if not mask.any() or mask.all():
        empty, fix = ("test", "raise --test-size") if not mask.any() else ("training", "lower --test-size")
        raise ConfigError(
            f"--test-size {test_size} leaves the {empty} store without rows ({len(strata)} rows, each class "
            f"split by round(test_size x its rows)): {fix}"
        )
    return mask


def ingest(o: IngestOptions) -> IngestReport:
    from streamfit.ingest.sources.folder import forget_listings

    try:
        with contextlib.ExitStack() as spool:  # the copy of standard input, if it is read: removed at the end
            return _ingest(o, spool)
    finally:
        forget_listings()  # a URL folder's listing handed over by the input expansion serves this ingest only


STDIN_COPY = "copy of standard input (made in --tmp-dir, else TMPDIR)"  # what the workers read for it


def _as_read(path: str) -> str:
    """An input as a Dask worker reads it: standard input as its spooled copy."""
    return (stdin.spooled_copy() or path) if stdin.is_stdin(path) else path


def _recorded(path: str) -> str:
    """An input as the manifest records it: its absolute path or URL (storage.public), standard
    input as <stdin>."""
    return path if stdin.is_stdin(path) else storage.public(path)


def _ingest(o: IngestOptions, spool: contextlib.ExitStack) -> IngestReport:
    from streamfit.ingest.inputs import expand_inputs
    from streamfit.ingest.sources import BadRecordPolicy

    settings = content_settings(o)  # as given, before the defaults and the --like store fill them in
    o = replace(o, inputs=expand_inputs(o.inputs, o.format))
    reads_stdin = stdin.NAME in o.inputs
    if o.scheduler:  # the workers of a joined cluster have working directories of their own
        o = replace(o, inputs=[path if stdin.is_stdin(path) else storage.absolute(path) for path in o.inputs])
    _check_options(o)
    check_options_read(o.source_options, o.inputs, o.format)
    _check_paths(o)
    out = storage.absolute(o.out)
    finish_pair = _half_published_test(o)
    if finish_pair:
        log.warning("%s: the test store of an unfinished split (no %s): writing the pair again", o.test_out, o.out)
    for target in [out] + ([storage.absolute(o.test_out)] if o.test_out and not finish_pair else []):
        if present(storage.resolve(target)) and not o.overwrite:
            raise StreamfitError(f"{target}: already exists; pass --overwrite to replace it")
    if o.on_bad_record == "quarantine" and storage.is_url(o.quarantine or out):
        raise ConfigError(
            f"--on-bad-record quarantine writes a local file, and {o.quarantine or out} is a URL: "
            "name a local one with --quarantine FILE"
        )
    quarantine = o.quarantine or (out + ".quarantine.jsonl" if o.on_bad_record == "quarantine" else None)
    for later in [out] + ([o.test_out] if o.test_out else []) + ([quarantine] if quarantine else []):
        storage.check_creatable(later)  # written after the input is read: refused before it is
    spooled = spool.enter_context(stdin.spooled(o.tmp_dir)) if reads_stdin else None  # read from here on
    policy = BadRecordPolicy(o.on_bad_record, quarantine)
    like: Store | None = open_store(o.like) if o.like else None
    # the --like store decides the transform; otherwise an unset idf / l2_normalize is on for text
    o = replace(o, idf=False, l2_normalize=False) if like is not None else _text_defaults(o)
    # test data is stored like its training store unless told otherwise
    backend, chunk_rows = (
        (like.manifest.backend, like.manifest.chunk_rows) if like is not None else ("zarr", DEFAULT_CHUNK_ROWS)
    )
    layout = _Layout(
        backend=backend if o.backend is None else o.backend,
        chunk_rows=chunk_rows if o.chunk_rows is None else o.chunk_rows,
    )
    source_options = o.source_options
    like_idf = like.idf if like is not None else None  # read (and its checksum checked) once: 8 bytes a feature
    if like is not None:
        like_featurizer = like.featurizer_dict()
        featurizer = Featurizer.from_dict(like_featurizer, idf=like_idf)
        source_options = {**like_featurizer["source_options"], **o.source_options}
        vocab = LabelVocabulary(like.classes, frozen=True)
        multilabel: bool | None = like.multilabel
        if like.regression:
            o = dataclasses.replace(o, target="numeric")
    source_options, arff_classes = _arff_header(o, source_options)
    source_options = _array_columns(o, source_options)
    if like is None:
        featurizer = Featurizer(o.hashing, o.n_features, l2_normalize=bool(o.l2_normalize) and not o.idf)
        # the classes: --classes (no others); else an ARFF header's, in its order, then any
        # others in order of first appearance (LabelVocabulary)
        if o.classes:
            vocab = LabelVocabulary(o.classes, frozen=True)
        else:
            vocab = LabelVocabulary(arff_classes if o.target == "classes" else None)
        multilabel = None
    # --no-hash without --n-features: at least as wide as the inputs declare (an all-zero last column counts)
    min_features = _declared_width(o, source_options) if featurizer.n_features is None else 0
    two_pass = bool(o.test_size) or (o.idf and like is None)
    pass1_out = out + ".pass1.partial" if two_pass else out
    distributed = bool(o.n_workers or o.scheduler)
    # the stage in memory while it fits: in this process only (a cluster's workers write it to disk)
    memory_limit = MEMORY_STAGE_BYTES if two_pass and not distributed else 0
    stage_location = storage.resolve(pass1_out)
    if memory_limit and stage_location.local:  # a killed ingest's disk stage, as its next writer deletes it
        remove_dead_partial(stage_location.path + ".partial")
    p1 = _Pass1(o, layout, source_options, featurizer, vocab, multilabel, pass1_out, policy, memory_limit)
    cluster = contextlib.ExitStack()  # the Dask cluster of both passes (--n-workers / --scheduler)
    # on a terminal, one bar over the records of all the passes (a log: each pass's lines)
    bar = RunProgress("bar") if o.progress and progress_mode() == "bar" else None
    if bar is not None:
        bar.begin("ingest", 0, None, unit="record")
        cluster.callback(bar.close)
    try:
        # behind a URL a second ingest of the same stores is refused now, before it reads (streamfit.lease)
        p1.leases = _take_leases([out] + ([storage.absolute(o.test_out)] if o.test_out else []))
        engine = None
        if distributed:
            from streamfit.engine import Engine
            from streamfit.ingest.distributed import run_distributed

            engine = cluster.enter_context(
                Engine(
                    o.scheduler,
                    mode="local",
                    n_workers=o.n_workers,
                    dashboard_address="127.0.0.1:0",
                    worker_timeout=o.worker_timeout,
                )
            )
            engine.require_shared(
                {_as_read(path): "input" if not stdin.is_stdin(path) else STDIN_COPY for path in o.inputs},
                {out: "--out store's folder"} | ({o.test_out: "--test-out store's folder"} if o.test_out else {}),
            )
            with engine.watching("ingest"):  # a lost worker warned of; none left: an error, not a hang
                run_distributed(p1, engine, finish_rows=not two_pass, bar=bar)
        else:
            p1.run(finish_rows=not two_pass, bar=bar)
        policy.close()
        if p1.writer is None and p1.memory is None:
            if policy.first is not None:  # read, then every one skipped: say how many and why
                where, problem = policy.first
                raise InputError(
                    ", ".join(o.inputs),
                    f"every one of the {policy.n_skipped} records read was a bad record, skipped (the first: "
                    f"{where}: {problem})",
                    "ingest again with --on-bad-record error to stop at the first one with its fix",
                )
            raise InputError(", ".join(o.inputs), NO_RECORDS, "give it data to ingest")
        n_features = featurizer.n_features  # None: the largest index seen + 1 (--no-hash)
        source_info = {
            "paths": [_recorded(p) for p in o.inputs],
            "format": o.format,
            # as given: the header once (below), the width found, not given
            "options": {k: v for k, v in source_options.items() if k not in ("arff_header", "x_columns")},
            "like": storage.public(o.like) if o.like else None,
            "format_options": {k: v for k, v in source_options.items() if k not in DATA_OPTIONS},
            "input": _input_kind(p1.kinds),
            "settings": settings,
        }
        common: dict[str, Any] = {
            "n_features": n_features,
            "classes": _output_names(p1) if p1.numeric else vocab.classes,
            "hashing": featurizer.hashing.to_dict() if featurizer.hashing is not None else None,
            "source": source_info,
        }
        report = IngestReport(read=p1.read, skipped=policy.n_skipped, empty=p1.empty, spooled=spooled)
        if not two_pass:
            assert p1.writer is not None
            transform: dict[str, Any] = {
                "idf": like_idf is not None,
                "l2_normalize": featurizer.l2_normalize,
            }
            if like_idf is not None:  # the featurizer's idf (Featurizer.from_dict)
                transform["idf_sha256"] = _write_idf(p1.writer, like_idf)
            m = p1.writer.close(transform=transform, counts=_counts(report), min_features=min_features, **common)
            report.written = m.n_rows
            report.stores[out] = m.n_rows
        else:
            stage: Store | _MemoryStage
            if p1.memory is not None:
                common["n_features"] = p1.memory.close(common["n_features"], common["classes"], min_features)
                stage = p1.memory
            else:
                # the stage (scratch: not synced, not committed) stays locked until it is discarded:
                # a concurrent ingest to the same --out is refused
                assert p1.writer is not None
                common["n_features"] = p1.writer.close(
                    transform={}, counts={}, min_features=min_features, **common
                ).n_features
                stage = Store(p1.writer.files.url, scratch=True)
            with engine.watching("ingest") if engine is not None else contextlib.nullcontext():
                _pass2(o, layout, p1, stage, featurizer, common, report, out, finish_pair, engine, bar)
    except BaseException:
        if p1.writer is not None:
            p1.writer.abort()
        raise
    finally:
        cluster.close()
        try:
            if two_pass and p1.writer is not None:  # the stage is ours (another live ingest's stays)
                p1.writer.discard()
        finally:
            for held in p1.leases.values():  # last, once every writer is done
                held.release()
    if report.read != report.written + report.skipped:
        raise StreamfitError(
            f"internal error: read {report.read} records but wrote {report.written} and skipped "
            f"{report.skipped}; please report this"
        )
    if policy.first is not None:
        _warn_skipped(policy)
    if p1.empty:
        _warn_empty_rows(p1, featurizer)
    if p1.c1:
        assert p1.first_c1 is not None
        log.warning(text_checks.c1_warning(p1.c1, p1.first_c1, "ingest"))
    if not p1.multilabel and not p1.numeric:
        _warn_one_class(out, vocab)
    if not p1.numeric:
        _warn_near_duplicates(out, vocab.classes)
        if not vocab.frozen:
            _warn_numeric_classes(out, vocab.classes, report.written, bool(p1.multilabel))
    if o.csc_block_features:
        from streamfit.store.csc import build_csc

        report.csc_blocks = len(build_csc(out, o.csc_block_features, progress=o.progress)["blocks"])
    return report


def _warn_one_class(out: str, vocab: LabelVocabulary) -> None:
    """A warning for a single-label store of one class, which `streamfit train` refuses, or of one
    class with rows beside classes an ARFF header declared (a Weka class {yes,no} whose rows are
    all yes), which trains a model that predicts that class for every row. The classes met are
    those the rows' labels named (LabelVocabulary.met; with --classes, all the declared ones, as
    a distributed ingest's pieces report them)."""
    met = vocab.classes if vocab.frozen else [c for i, c in enumerate(vocab.classes) if i in vocab.met]
    if len(vocab.classes) == 1:
        log.warning(
            "%s: only one class: %s; a classifier needs two or more: check the labels (--label-field, the "
            "class folders)",
            out,
            vocab.classes[0],
        )
    elif len(met) == 1:
        log.warning(
            "%s: only one class has rows: %s (the ARFF header declares %d more: %s); a classifier needs rows of "
            "two or more: check the labels",
            out,
            met[0],
            len(vocab.classes) - 1,
            ", ".join(c for c in vocab.classes if c != met[0])[:200],
        )


def _warn_near_duplicates(out: str, classes: list[str]) -> None:
    """A warning naming the classes that differ only in white space or letter case, or are one
    number written two ways (at most three groups): they are trained as different classes."""
    from streamfit.ingest.labels import near_duplicates

    groups = near_duplicates(classes)
    if groups:
        shown = "; ".join(" and ".join(repr(name) for name in names) for names in groups[:3])
        more = f" (and {len(groups) - 3} more groups)" if len(groups) > 3 else ""
        log.warning(
            "%s: classes %s%s differ only in white space or letter case, or are one number written two "
            "ways, and are trained as different classes: check the labels (a space after a CSV delimiter? "
            "integers saved as floats?), or ignore this if they differ",
            out,
            shown,
            more,
        )


def _warn_numeric_classes(out: str, classes: list[str], n_rows: int, multilabel: bool) -> None:
    """A warning when the classes look like the values of a real-valued target read as class
    labels (--target numeric left out): every class name a number, and some of them with a
    fraction, or (one label a row) more than a quarter as many classes as rows (diabetes's
    442 targets: 214 classes of 2 rows). Class ids written as numbers (LIBSVM's, a digit's
    0 … 9) are whole, with many rows a class, and get none."""
    from streamfit.ingest.labels import class_values

    values = class_values(classes)
    if values is None or len(classes) < 3:
        return
    fractions = bool(np.any(values != np.round(values)))
    if not (fractions or (not multilabel and 4 * len(classes) > n_rows)):
        return
    log.warning(
        "%s: the %d classes are all numbers (%s … %s)%s: if the label is a real-valued target, pass "
        "--target numeric (regression); or ignore this if they are class ids",
        out,
        len(classes),
        f"{values.min():g}",
        f"{values.max():g}",
        ", some with a fraction" if fractions else f", {n_rows / len(classes):.1f} rows a class",
    )


def _arff_header(o: IngestOptions, source_options: dict) -> tuple[dict, list[str] | None]:
    """(source_options with the ARFF option `arff_header`, the header's classes): what decides the
    columns of an ARFF input (its feature attributes and nominal values in order,
    ArffSource.feature_header), read from the first ARFF input's header unless the --like store
    records one. Every ARFF input, and what is later read like this store (`--like`, `predict`
    on raw ARFF), is read into these columns: the same header as before; the same attributes and
    values in another order mapped by name; other ones refused. Recorded with the store's format
    options, so a model carries it. The classes (ArffSource.declared: the label attributes, or
    the class attribute's values, in header order; None without an ARFF input or with a --like
    store's header) are the store's unless --classes names them."""
    if "arff_header" in source_options:
        return source_options, None
    from streamfit.ingest.sources import BadRecordPolicy, infer_format, open_source, sniff_format
    from streamfit.ingest.sources.arff import ArffSource

    for path in o.inputs:
        if (o.format or infer_format(path) or sniff_format(path)) == "arff":
            limits = ReadLimits(record_bytes=o.max_record_bytes, input_bytes=o.max_input_bytes)
            source = open_source(path, "arff", policy=BadRecordPolicy(), limits=limits, **source_options)
            assert isinstance(source, ArffSource)
            header, classes = source.declared()
            return {**source_options, "arff_header": header}, classes
    return source_options, None


def _array_columns(o: IngestOptions, source_options: dict) -> dict:
    """source_options with the NumPy/HDF5 option `x_columns`: the width of the first such
    input's feature matrix, unless the --like store records one. An array's columns are features
    0, 1, … by position, so every array input, and what is later read like this store (`--like`,
    `predict` on raw arrays), must have this width (arrays.check_columns): one of another width
    holds other features, and hashed (the default) it would be read without a word. Recorded
    with the store's format options, so a model carries it."""
    if "x_columns" in source_options:
        return source_options
    from streamfit.ingest.sources import BadRecordPolicy, infer_format, open_source, sniff_format
    from streamfit.ingest.sources.hdf5 import Hdf5Source
    from streamfit.ingest.sources.numpy_arrays import NumpySource

    for path in o.inputs:
        name = o.format or infer_format(path) or sniff_format(path)
        if name in ("numpy", "hdf5"):
            numeric = o.target == "numeric"
            source = open_source(path, name, policy=BadRecordPolicy(), numeric_targets=numeric, **source_options)
            assert isinstance(source, NumpySource | Hdf5Source)
            return {**source_options, "x_columns": source.x_columns}
    return source_options


def _declared_width(o: IngestOptions, source_options: dict) -> int:
    """The widest feature width the inputs declare (0: none declares one), the least width of an
    unhashed store (--no-hash without --n-features): an array's columns (NumPy, HDF5: x_columns),
    an ARFF file's feature columns (arff_header: one a numeric attribute, one per declared value
    of a nominal one) and a table's feature_fields (CSV/TSV, Parquet) are features 0 … d − 1
    whether or not the last ones hold a value, so the store is d wide, as a test file of the same
    layout is read. LIBSVM and Parquet index lists declare no width: the largest index + 1.
    InputError for a width beyond the int32 columns a store holds."""
    from streamfit.ingest.sources import infer_format, sniff_format
    from streamfit.ingest.sources._util import split_fields
    from streamfit.ingest.sources.arff import header_width

    widest = 0
    for path in o.inputs:
        name = o.format or infer_format(path) or sniff_format(path)
        if name in ("numpy", "hdf5"):
            width = source_options["x_columns"]
        elif name == "arff":
            width = header_width(source_options["arff_header"])
        elif name in ("csv", "tsv", "parquet") and source_options.get("feature_fields") is not None:
            width = len(split_fields("feature_fields", source_options["feature_fields"]))
        else:
            continue
        if width > MAX_FEATURES:
            raise InputError(
                path,
                f"{width} feature columns, more than the {MAX_FEATURES} an unhashed store holds",
                "hash the features (drop --no-hash), or keep the first N columns with --n-features N",
            )
        widest = max(widest, width)
    return widest


def _text_defaults(o: IngestOptions) -> IngestOptions:
    """o with idf and l2_normalize decided where unset (None): on when every input is text (with
    HashingConfig's default log1p term values: the log-TF-IDF, unit-norm rows that text
    classifiers do best on), off for numeric inputs. The kind of an input is its format's
    (inferred from the name or first lines as ingest infers it); Parquet and NumPy inputs, whose
    kind depends on their columns, are opened to see it."""
    if o.idf is not None and o.l2_normalize is not None:
        return o
    from streamfit.ingest.sources import FORMATS, BadRecordPolicy, infer_format, open_source, sniff_format

    kinds = set()
    for path in o.inputs:
        name = o.format or infer_format(path) or sniff_format(path)
        kind = getattr(FORMATS.get(name or ""), "kind", None)
        if kind is None:  # decided by the file's contents (or an unknown format: the same error as pass 1)
            kind = open_source(
                path, o.format, policy=BadRecordPolicy(), numeric_targets=o.target == "numeric", **o.source_options
            ).kind
        kinds.add(kind)
    text = kinds == {"text"}
    decided = replace(
        o,
        idf=text if o.idf is None else o.idf,
        l2_normalize=text if o.l2_normalize is None else o.l2_normalize,
    )
    if text and (o.idf is None or o.l2_normalize is None):
        log.info(
            "text input: IDF %s, l2-normalized rows %s (the text defaults; --no-idf, --no-l2-normalize and "
            "--value count turn them off)",
            "on" if decided.idf else "off",
            "on" if decided.l2_normalize else "off",
        )
    return decided


def _output_names(p1: _Pass1) -> list[str]:
    """The names of the k regression outputs: the --like store's or --classes (k of them), else
    "target" for one output and target_0 … target_{k-1} for several."""
    k = p1.n_outputs or 1
    if p1.vocab.classes:
        if len(p1.vocab.classes) != k:
            raise StreamfitError(f"--classes names {len(p1.vocab.classes)} outputs, the targets have {k}")
        return p1.vocab.classes
    return ["target"] if k == 1 else [f"target_{j}" for j in range(k)]


def _warn_skipped(policy) -> None:
    """One warning for the bad records skipped (--on-bad-record skip / quarantine): how many, the
    first one's location and problem, and where the quarantine file is."""
    assert policy.first is not None
    where, problem = policy.first
    kept = f"; each one is in {policy.quarantine_path}" if policy.quarantine_path else ""
    log.warning("%d bad records skipped (the first: %s: %s)%s", policy.n_skipped, where, problem, kept)


def _warn_empty_rows(p1: _Pass1, featurizer: Featurizer) -> None:
    if "text" in p1.kinds:
        why = (
            f"text rows get features from words of {featurizer.hashing.min_token_length} or more characters "
            "(--min-token-length): check --text-field, or lower --min-token-length"
        )
    else:
        why = "their records list no features"
    log.warning("%d rows have no features (the first: %s); %s", p1.empty, p1.first_empty, why)


def _input_kind(kinds: set[str]) -> str | None:
    """ "text" or "numeric" (sparse or dense) features, None for a mix of both."""
    if kinds == {"text"}:
        return "text"
    return None if "text" in kinds else "numeric"


def _counts(report: IngestReport) -> dict:
    return {"read": report.read, "skipped": report.skipped}


def _write_idf(writer: StoreWriter, idf: np.ndarray) -> str:
    buf = io.BytesIO()
    np.save(buf, np.asarray(idf, dtype=np.float64), allow_pickle=False)
    writer.write_file(IDF_FILE, buf.getvalue())
    return hashlib.sha256(buf.getvalue()).hexdigest()


def _stream(stage: Store | _MemoryStage):
    """The stage's chunks in order, not kept in the chunk cache (memory: one chunk)."""
    for i in range(stage.n_chunks):
        yield stage.read_chunk(i, cache=False)


def _pass_chunks(
    o: IngestOptions, stage: Store | _MemoryStage, name: str, bar: RunProgress | None, done: int, total: int
):
    """The stage's chunks for one pass of pass 2 (`name`), shown as done: on ingest's one `bar`
    (records: `done` before this pass, of `total` in all passes), else as this pass's lines in
    chunks (runlog.counted); a SIGTERM stops between chunks (check_stop)."""
    if bar is None:
        chunks = counted(_stream(stage), name, unit="chunk", total=stage.n_chunks, enabled=o.progress)
    else:
        chunks = _stream(stage)
    for c in chunks:
        yield c
        check_stop(o)
        if bar is not None:
            done += c.n_rows
            bar.count(done, total)


def add_document_frequencies(df: np.ndarray, X: sp.csr_matrix, rows: np.ndarray) -> None:
    """Add to df[j] how many of the rows of X that the boolean mask `rows` selects hold column j."""
    counts = np.bincount(X[rows].indices)  # as long as the largest column + 1
    df[: counts.size] += counts


IDF_BYTES_PER_FEATURE = 32  # per column: document counts (int64), IDF weights (float64) and their temporaries


def _check_idf_memory(n_features: int) -> None:
    """StreamfitError when the dense per-column arrays of --idf (IDF_BYTES_PER_FEATURE × n_features)
    exceed the memory available now: a width from one stray large --no-hash index must not
    exhaust the machine."""
    import psutil  # only this check needs it (its import is 20-60 ms)

    need = IDF_BYTES_PER_FEATURE * n_features
    available = psutil.virtual_memory().available
    if need > available:
        raise StreamfitError(
            f"--idf over {n_features} feature columns needs {need / 2**30:.3g} GiB, more than the "
            f"{available / 2**30:.3g} GiB available: renumber the features from 0, pass a smaller --n-features, "
            "or hash the indices (drop --no-hash)"
        )


def _pass2(
    o: IngestOptions,
    layout: _Layout,
    p1: _Pass1,
    stage: Store | _MemoryStage,
    featurizer: Featurizer,
    common: dict,
    report: IngestReport,
    out: str,
    finish_pair: bool,
    engine=None,
    bar: RunProgress | None = None,
) -> None:
    """Write the final stores from the stage (the scratch store pass 1 wrote, or its rows held in
    memory: the same chunks, the same final stores). With a split the test store is published first:
    a kill between the two publishes leaves no complete-looking training store without its
    test store, and a re-run of the same command replaces the lone test store (finish_pair).
    engine: the Dask cluster of a distributed ingest, whose workers count the document
    frequencies and write the final chunks (distributed.pass2_*); None: this process. bar:
    ingest's one progress bar (on a terminal), at pass 1's records read; pass 2's passes over
    the stage's rows (document frequencies, write) add to its total and its count."""
    total = p1.read + (1 + bool(o.idf)) * stage.n_rows  # records of all passes, for the bar
    if o.test_size:
        test_mask = stratified_test_mask(np.concatenate(p1.strata), o.test_size, o.seed)
    else:
        test_mask = np.zeros(stage.n_rows, dtype=bool)
    idf: np.ndarray | None = None  # counted on the training rows (--idf)
    if o.idf:
        _check_idf_memory(stage.n_features)
        if engine is not None:
            from streamfit.ingest.distributed import PassShown, pass2_document_frequencies

            assert isinstance(stage, Store), "a cluster's stage is on disk"

            shown = PassShown(o, "document frequencies", "run", bar, p1.read, total)
            df = pass2_document_frequencies(engine, stage, ~test_mask, o, shown)
        else:
            df = np.zeros(stage.n_features, dtype=np.int64)
            for c in _pass_chunks(o, stage, "document frequencies", bar, p1.read, total):
                add_document_frequencies(df, c.X, ~test_mask[c.row_start : c.row_start + c.n_rows])
        idf = featurizer.idf = idf_weights(df, int((~test_mask).sum()))
    featurizer.l2_normalize = bool(o.l2_normalize)
    outputs = [(out, ~test_mask)] + ([(storage.absolute(o.test_out), test_mask)] if o.test_size and o.test_out else [])
    writers = [
        layout.writer(
            path,
            stage.multilabel,
            overwrite=o.overwrite or (finish_pair and path != out),
            n_outputs=stage.n_classes if stage.regression else None,
            lease=p1.leases.get(path),
        )
        for path, _ in outputs
    ]
    try:
        if engine is not None:
            from streamfit.ingest.distributed import PassShown, pass2_write

            assert isinstance(stage, Store), "a cluster's stage is on disk"

            shown = PassShown(o, "write", "chunk", bar, total - stage.n_rows, total)
            for w, (_, mask) in zip(writers, outputs):
                pass2_write(engine, stage, w, np.flatnonzero(mask), featurizer, o, shown)
        else:
            for c in _pass_chunks(o, stage, "write", bar, total - stage.n_rows, total):
                X = featurizer.finish(c.X)
                for w, (_, mask) in zip(writers, outputs):
                    rows = mask[c.row_start : c.row_start + c.n_rows]
                    if rows.any():
                        w.write_rows(*_take_rows(X, c.labels, rows))
        transform: dict[str, Any] = {"idf": bool(o.idf), "l2_normalize": bool(o.l2_normalize)}
        for w in writers:
            if idf is not None:
                transform["idf_sha256"] = _write_idf(w, idf)
        for w, (path, _) in reversed(list(zip(writers, outputs))):  # the test store first
            split = (
                {"split": {"test_size": o.test_size, "seed": o.seed, "part": "train" if w is writers[0] else "test"}}
                if o.test_size
                else {}
            )
            m = w.close(transform=dict(transform), counts={**_counts(report), **split}, **common)
            report.stores[path] = m.n_rows
            report.written += m.n_rows
        report.stores = {path: report.stores[path] for path, _ in outputs}  # --out first, as given
    except BaseException:
        for w in writers:
            w.abort()
        raise
