"""Pass 1 of `streamfit ingest --n-workers N / --scheduler ADDRESS`: the input files featurized
on Dask workers, merged by the driver in input order into the same rows as in process.

The pieces are the input files (after `expand_inputs`: a glob, a dataset directory), fixed by
the input. A worker reads one file exactly as the in-process pass reads it (same source, same
batches), featurizes it (hashing, kept indices, range checks, and the IDF/l2 of a one-pass
ingest) and encodes its labels in a vocabulary of its own, in order of first appearance in the
file; bad records are kept with their file:line locations (--on-bad-record error raises there,
on the worker, and the driver raises it when it reaches that file). The driver takes the files'
results in input order: it appends each file's new labels to the store's vocabulary (so the
classes are in order of first appearance over the whole input, as in process), maps the file's
label ids to the store's, replays its bad records into the policy (counts, quarantine file),
and writes its rows. The two decisions the in-process pass takes from the first rows it reads
(multilabel or not from the first batch, the number of regression outputs from the first good
target) are taken from the first file that decides them; a file whose own first rows decided
otherwise is featurized again with the decision given. So the rows, their order, the chunks and
every digest are the in-process store's for any number of workers (tests/ingest/test_distributed.py).

At most WINDOW_PER_THREAD files per worker thread are in flight (their rows held on the workers
until the driver takes them), which bounds the memory to a few files' rows per worker. Label
vocabulary, IDF and the stratified split then follow as in process (pipeline.py): the driver
holds one stratum per row, and pass 2 (IDF, the split) reads the stage store in the driver.
"""

from __future__ import annotations

import logging
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import scipy.sparse as sp
from tqdm.auto import tqdm

from streamfit.errors import StreamfitError
from streamfit.ingest.featurize import Featurizer
from streamfit.ingest.labels import LabelVocabulary
from streamfit.ingest.pipeline import _Pass1
from streamfit.ingest.sources.policy import BadRecordPolicy

log = logging.getLogger(__name__)

WINDOW_PER_THREAD = 2  # files submitted ahead per worker thread


@dataclass
class FileRows:
    """What a worker made of one input file: its featurized rows in batches (labels as ids
    into `classes`, the file's own vocabulary), and what the driver merges."""

    path: str
    kind: str = ""
    n_read: int = 0
    batches: list[tuple[sp.csr_matrix, object]] = field(default_factory=list)
    classes: list[str] = field(default_factory=list)
    multilabel: bool | None = None  # decided by the file's first batch (None: it had none)
    n_outputs: int | None = None  # regression outputs, decided by the file's first good target
    empty: int = 0
    first_empty: str | None = None
    bad: list[tuple[str, str, str | bytes, str]] = field(default_factory=list)  # location, problem, raw, hint
    error: StreamfitError | None = None  # what stopped the file (raised by the driver in its turn)


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

    rows: FileRows

    def emit(self, X: sp.csr_matrix, labels) -> None:
        self.rows.batches.append((X, labels))


def featurize_file(
    path: str,
    o,
    layout,
    source_options: dict,
    featurizer_dict: dict,
    idf: np.ndarray | None,
    classes: list[str] | None,
    multilabel: bool | None,
    n_outputs: int | None,
    finish_rows: bool,
) -> FileRows:
    """One input file featurized as pipeline._Pass1 does it (runs on a worker). classes: the
    store's declared or --like classes (labels outside them are bad records), None to collect
    the file's own; multilabel, n_outputs: decisions taken already, None to take them here."""
    rows = FileRows(path)
    featurizer = Featurizer.from_dict(featurizer_dict, idf=idf)
    vocab = LabelVocabulary(classes, frozen=classes is not None)
    policy = _RecordingPolicy(o.on_bad_record, rows.bad)
    p = _Collector(o, layout, source_options, featurizer, vocab, multilabel, "", policy)
    p.rows = rows
    if n_outputs is not None:
        p.n_outputs = n_outputs
    try:
        p.read_input(path, finish_rows)
    except StreamfitError as e:  # a clean error, not a worker's "Compute Failed" log with a traceback
        rows.error = e
        return rows
    rows.kind = next(iter(p.kinds))
    rows.n_read, rows.classes = p.read, vocab.classes
    rows.multilabel, rows.n_outputs = p.multilabel, p.n_outputs
    rows.empty, rows.first_empty = p.empty, p.first_empty
    return rows


def run_distributed(p1, finish_rows: bool) -> None:
    """pipeline._Pass1.run with the files featurized on the Dask cluster of p1.o.n_workers /
    p1.o.scheduler (see the module docstring); p1 ends as an in-process run leaves it."""
    from streamfit.engine import Engine

    o = p1.o
    paths = list(o.inputs)
    featurizer_dict = p1.featurizer.to_dict()
    engine = Engine(o.scheduler, mode="local", n_workers=o.n_workers, dashboard_address=":0")
    with engine:
        client = engine.client
        assert client is not None
        window = WINDOW_PER_THREAD * max(engine.total_threads, 1)
        frozen = list(p1.vocab.classes) if p1.vocab.frozen else None
        idf = client.scatter(p1.featurizer.idf, broadcast=True) if p1.featurizer.idf is not None else None

        def submit(path: str, multilabel: bool | None, n_outputs: int | None):
            return client.submit(
                featurize_file,
                path,
                o,
                p1.layout,
                p1.source_options,
                featurizer_dict,
                idf,
                frozen,
                multilabel,
                n_outputs,
                finish_rows,
                pure=False,
            )

        pending: deque = deque()
        queued = iter(paths)
        with tqdm(total=len(paths), desc="ingest", unit="file", disable=not o.progress) as bar:
            while True:
                while len(pending) < window and (path := next(queued, None)) is not None:
                    pending.append(submit(path, p1.multilabel, p1.n_outputs if p1.numeric else None))
                if not pending:
                    break
                rows: FileRows = pending.popleft().result()
                again = _disagrees(p1, rows)
                if again:
                    log.info("%s: featurized again with %s (decided by an earlier file)", rows.path, again)
                    rows = submit(rows.path, p1.multilabel, p1.n_outputs if p1.numeric else None).result()
                merge(p1, rows)
                bar.update(1)


def _disagrees(p1, rows: FileRows) -> str:
    """What the file's first rows decided differently from the files before it ("" if nothing):
    then it is featurized again with the earlier decision, as the in-process pass reads it."""
    if p1.multilabel is not None and rows.multilabel is not None and rows.multilabel != p1.multilabel:
        return f"multilabel={p1.multilabel}"
    if p1.numeric and p1.n_outputs is not None and rows.n_outputs not in (None, p1.n_outputs):
        return f"{p1.n_outputs} outputs"
    return ""


def merge(p1, rows: FileRows) -> None:
    """Add one file's rows to the pass: its bad records, label ids mapped to the store's
    vocabulary (new labels appended in the file's order), its rows written."""
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
    ids = None if p1.numeric else p1.vocab.add(rows.classes)
    for X, labels in rows.batches:
        if ids is not None:
            labels = _mapped(labels, ids)
        p1.emit(X, labels)


def _mapped(labels, ids: np.ndarray):
    """Label ids of a file's vocabulary as the store's: ids[local id] (multilabel: each row's
    ids mapped, then sorted as LabelVocabulary.encode sorts them)."""
    if not sp.issparse(labels):
        return ids[np.asarray(labels)].astype(np.int32)
    Y = sp.csr_matrix((labels.data, ids[labels.indices].astype(np.int32), labels.indptr.copy()), shape=labels.shape)
    Y.has_sorted_indices = False
    Y.sort_indices()
    return Y
