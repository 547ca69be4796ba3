"""`streamfit predict`: top-k classes and scores for every row of a store or of raw data, or, for
a regression model, the predicted values of its outputs.

The rows are scored piece by piece: a store's chunks, or a raw source's batches (read and
featurized like the training store). Each piece is a task (`_score_piece`) that the engine runs
in this process (the default) or on Dask workers (`predict --n-workers`/`--scheduler`): the
model travels to the workers once (scattered), a store by its path or URL (the workers read
its chunks themselves), a raw source's batches from the driver, which reads the input. Pieces
are written in input order, so the output is the same bytes on any engine.

Output (`--out`; the kind from its suffix, .csv, .jsonl or .parquet):
- one file, replaced atomically (a local staging file renamed, or uploaded as one object);
- a stream (`stream_name`): `-` or /dev/stdout (stdout, whatever it is connected to), /dev/stderr,
  an existing FIFO or character device (a named pipe, /dev/fd/N of a shell's `>(gzip > f.gz)`,
  /dev/null), CSV or JSONL (`out_format`, else a FIFO's suffix, else CSV), each piece written and
  flushed as it is scored, so that a pipe's next program (`| gzip`) reads rows as they come; not
  atomic: a failure part-way leaves the rows before it there (the command's status says so). A
  reader that goes away (`| head`) ends the writing with BrokenPipeError, which the CLI ends
  silently as Unix tools do;
- `parts=True`: a directory OUT/ of one part per piece, `part-00000.EXT`, … in input order (a
  CSV part has its own header line), then `manifest.json` (columns, rows, and per part its
  name, rows, bytes and SHA-256), committed by the storage module's protocol (streamfit.storage:
  local `OUT.partial/` renamed to `OUT/`, on an object store `OUT/COMMITTED` naming the attempt),
  so partial output never looks complete. On an object store and a cluster, the workers write
  their parts themselves; otherwise the driver writes what the tasks return.

An input of zero records (an empty file or dataset directory, a CSV of its header alone: a daily
job's empty partition) is scored as one piece of no rows: the output holds the columns alone (a
CSV's header line, an empty JSONL file, a Parquet file of the schema; with `parts` one such part
and the manifest), and one warning names the input.

Standard input (SOURCE `-`, with `--format`: streamfit.ingest.stdin) is raw input read
once, batch by batch, in this process: each batch is scored (here, or on the workers it is
shipped to) and written before the next is read, so memory holds a batch and the first rows go
out while the input still comes. Its rows' location is `<stdin>:LINE`.
"""

from __future__ import annotations

import contextlib
import csv
import hashlib
import io
import json
import logging
import os
import stat
import sys
from collections.abc import Callable, Generator, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from streamfit.errors import OutputError, StreamfitError, output_error, stdout_error
from streamfit.model import Model, check_scoring_options, decide
from streamfit.read_ahead import ReadAhead

if TYPE_CHECKING:
    from streamfit.engine import Engine
    from streamfit.lease import Lease

log = logging.getLogger(__name__)

OUTPUT_KINDS = (".csv", ".jsonl", ".parquet")
STDOUT = "-"  # --out: the predictions on stdout
STDOUT_KINDS = ("csv", "jsonl")  # what a stream (--out -) takes (out_format; csv without it)
# --out names of the process's own streams, whatever they are connected to (a file, a pipe, a terminal)
_STANDARD_STREAMS = {STDOUT: "stdout", "/dev/stdout": "stdout", "/dev/fd/1": "stdout"} | {
    "/dev/stderr": "stderr",
    "/dev/fd/2": "stderr",
}
PARTS_MANIFEST = "manifest.json"  # in a --parts output directory, written last
PARTS_FORMAT = "streamfit-predictions"
RAW_BATCH_ROWS = 8192  # records per piece of raw input (one task, one part)

# predict reads no labels, so unlabeled rows are fine (a LIBSVM line's label list may be empty)
_UNLABELED = {"label_field": None, "labels_field": None, "y_dataset": None, "class_folders": False, "multilabel": True}


def stream_name(out: str) -> str | None:
    """The stream that --out `out` names, None for a file or directory (written atomically):
    "stdout" for - and /dev/stdout, "stderr" for /dev/stderr (the process's own, which a rename
    cannot replace, and whose reopening by name would truncate a file they were redirected to);
    the path of an existing FIFO or character device, which a rename would replace rather than
    write into (a named pipe, /dev/fd/N of a shell's `>(…)`, /dev/null)."""
    from streamfit import storage

    if out in _STANDARD_STREAMS:
        return _STANDARD_STREAMS[out]
    if storage.is_url(out):
        return None
    try:
        mode = os.stat(out).st_mode
    except OSError:
        return None
    return out if stat.S_ISFIFO(mode) or stat.S_ISCHR(mode) else None


def _is_store(path: str) -> bool:
    """A directory written by ingest, complete or not (open_store explains an incomplete one);
    behind a URL, a committed store (a file:// URL is a local path: a dataset directory or
    folder corpus there is raw input, as it is without the scheme)."""
    from streamfit import storage
    from streamfit.store.format import CHUNKS_DIR, MANIFEST

    location = storage.resolve(path)
    if not location.local:  # one GET of COMMITTED (absent behind a raw input's URL)
        return storage.committed(location) is not None
    path = location.path
    return os.path.isdir(path) and (
        os.path.abspath(path).endswith(".partial")
        or any(os.path.exists(os.path.join(path, name)) for name in (MANIFEST, "zarr.json", CHUNKS_DIR))
    )


def _featurization(model: Model) -> dict:
    """How raw records become the model's rows: the training store's featurizer_dict; for a model
    that records none (an estimator's model_, fitted on in-memory arrays), numeric features read
    as given at their indices, in the model's width (rows with fewer columns are padded)."""
    return model.featurizer or {"hashing": None, "n_features": model.n_features, "input": "numeric"}


def _check_kind(model: Model, featurizer, source: str, kind: str) -> None:
    """Refuse raw data of another kind (text / numeric features) than the training data."""
    given = "text" if kind == "text" else "numeric"
    if not model.featurizer and given == "text":
        raise StreamfitError(
            f"{source}: holds text, but the model records no featurization (an estimator's model_, fitted "
            "on in-memory arrays): raw text cannot be turned into its columns here; featurize it as for the "
            "fit and score the matrix with streamfit.load_model(MODEL).predict(X)"
        )
    trained = model.featurizer.get("input")
    if trained is None and kind == "text" and featurizer.hasher is None:
        trained = "numeric"  # a model saved before the input kind was recorded: unhashed means numeric
    if trained is not None and given != trained:
        raise StreamfitError(
            f"{source}: holds {given} features, but the model was trained on {trained} features; "
            f"score {trained} data (as the training data was), or train a model on {given} data"
        )


@dataclass(frozen=True)
class _Layout:
    """What every output row holds. kind: ".csv", ".jsonl" or ".parquet"; columns: the CSV
    header (and the Parquet columns); with_ids: an `id` after the location; parts: pieces are
    encoded as whole part files."""

    kind: str
    columns: tuple[str, ...]
    top_k: int
    threshold: float
    with_ids: bool
    parts: bool


@dataclass
class _Piece:
    """A scored piece. data: its rows encoded (text of CSV/JSONL lines, or a pyarrow Table for
    one Parquet file), or a whole part file's bytes (parts), None when the task wrote the part
    itself; sha256 and size of the part file (parts only)."""

    index: int
    rows: int
    data: Any
    sha256: str = ""
    size: int = 0


def _columns(model: Model, top_k: int, with_ids: bool) -> tuple[str, ...]:
    head = ["location"] + (["id"] if with_ids else [])
    if model.regression:
        return tuple(head + model.class_names.tolist())
    label_set_column = ["predicted"] if model.multilabel else []
    return tuple(head + label_set_column + [f"{w}_{i + 1}" for i in range(top_k) for w in ("label", "score")])


def _text_locations(locations: list[str]) -> list[str]:
    """The `location` column's values as UTF-8 text. A file name holds the bytes the system gave,
    decoded by the locale; bytes it could not decode are kept as lone surrogates (Python's
    surrogateescape: every non-ASCII name under LC_ALL=C with UTF-8 mode off), which no UTF-8
    output can hold. Such a name is its bytes read as UTF-8 (`tést.csv` again), a byte that is not
    UTF-8 written as \\xNN (a Latin-1 `t\\xe9st.csv`)."""
    try:
        "".join(locations).encode("utf-8")
    except UnicodeEncodeError:
        return [loc.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") for loc in locations]
    return locations


def _csv_line(values: list) -> str:
    buf = io.StringIO()
    csv.writer(buf).writerow(values)
    return buf.getvalue()


def _rows(model: Model, layout: _Layout, locations: list[str], ids: list[str] | None, X):
    """The output rows of X: text (CSV lines, \\r\\n-terminated as csv.writer writes them;
    JSONL lines) or, for Parquet, a pyarrow Table with the columns of `layout` (scores
    unrounded; CSV and JSONL round them to 6 decimals, a regression's values in full)."""
    S = model.decision_function(X)
    if layout.kind == ".parquet":
        return _table(model, layout, locations, ids, S)
    buf = io.StringIO()
    writer = csv.writer(buf) if layout.kind == ".csv" else None
    if model.regression:
        names = model.class_names.tolist()
        for r, (loc, row) in enumerate(zip(locations, S.tolist())):
            record_id = [ids[r]] if ids is not None else []
            if writer:
                writer.writerow([loc, *record_id, *row])
            else:
                head = {"location": loc, **({"id": record_id[0]} if record_id else {})}
                buf.write(json.dumps({**head, "values": dict(zip(names, row))}) + "\n")
        return buf.getvalue()
    top, scores = model.top_k(S, layout.top_k)
    labels = model.class_names[top]
    on = decide(S, layout.threshold) if model.multilabel else None
    for r, (loc, labs, sc) in enumerate(zip(locations, labels, scores)):
        record_id = [ids[r]] if ids is not None else []
        label_set: dict[str, list[str]] = {"predicted": model.class_names[on[r]].tolist()} if on is not None else {}
        if writer:
            row = [loc, *record_id] + ["|".join(names) for names in label_set.values()]
            writer.writerow(row + [v for pair in zip(labs, np.round(sc, 6)) for v in pair])
        else:
            line: dict = {"location": loc, **({"id": record_id[0]} if record_id else {}), **label_set}
            line.update(labels=labs.tolist(), scores=sc.round(6).tolist())
            buf.write(json.dumps(line) + "\n")
    return buf.getvalue()


def _table(model: Model, layout: _Layout, locations: list[str], ids: list[str] | None, S: np.ndarray):
    """The Parquet rows of scores S: location and id (strings); a regression's outputs (float64);
    else the predicted label set (list of strings, multilabel) and label_i (string), score_i
    (float64) for the top k."""
    import pyarrow as pa

    columns: dict[str, pa.Array] = {"location": pa.array(locations, pa.string())}
    if ids is not None:
        columns["id"] = pa.array(ids, pa.string())
    if model.regression:
        for j, name in enumerate(model.class_names.tolist()):
            columns[name] = pa.array(S[:, j], pa.float64())
        return pa.table(columns)
    top, scores = model.top_k(S, layout.top_k)
    if model.multilabel:
        on = decide(S, layout.threshold)
        columns["predicted"] = pa.array([model.class_names[row].tolist() for row in on], pa.list_(pa.string()))
    for i in range(top.shape[1]):
        columns[f"label_{i + 1}"] = pa.array(model.class_names[top[:, i]].tolist(), pa.string())
        columns[f"score_{i + 1}"] = pa.array(scores[:, i], pa.float64())
    return pa.table(columns)


def _part_file(layout: _Layout, rows) -> bytes:
    """A whole part file of `rows` (from _rows): a CSV part starts with its own header line."""
    if layout.kind == ".parquet":
        import pyarrow.parquet as pq

        buf = io.BytesIO()
        pq.write_table(rows, buf)
        return buf.getvalue()
    head = _csv_line(list(layout.columns)) if layout.kind == ".csv" else ""
    return (head + rows).encode()


def part_name(index: int, kind: str) -> str:
    """The file name of part `index` (from 0, in input order) of a --parts output."""
    return f"part-{index:05d}{kind}"


def _score_piece(item, *, model: Model, layout: _Layout, store=None, part_dir=None) -> _Piece:
    """A task: score piece `item` = (index, chunk id of `store`) or (index, raw batch) and encode
    its rows (see _Piece); with `part_dir` (a storage.Location) write the part there."""
    index, what = item
    if store is not None:
        c = store.read_chunk(what)
        locations, ids, X = [str(r) for r in range(c.row_start, c.row_start + c.n_rows)], None, c.X
    else:
        from streamfit.ingest.featurize import Featurizer

        featurizer = Featurizer.from_dict(_featurization(model), idf=model.idf)
        locations, ids, X = (
            _text_locations(what.locations),
            what.ids if layout.with_ids else None,
            featurizer.transform(what),
        )
    return _piece(index, layout, _rows(model, layout, locations, ids, X), len(locations), part_dir)


def _piece(index: int, layout: _Layout, rows, n: int, part_dir=None) -> _Piece:
    """Piece `index` of `n` encoded rows (from _rows): as they are, or with `layout.parts` as a
    whole part file, written into `part_dir` (a storage.Location) when it is given."""
    if not layout.parts:
        return _Piece(index, n, rows)
    data = _part_file(layout, rows)
    piece = _Piece(index, n, data, hashlib.sha256(data).hexdigest(), len(data))
    if part_dir is not None:
        part_dir.join(part_name(index, layout.kind)).write_new(data)
        piece.data = None
    return piece


def _no_records(model: Model, layout: _Layout) -> _Piece:
    """The one piece of an input of zero records: no rows, in the columns of a scored piece (a CSV
    part's header line, a Parquet file's schema), so the output is the empty case of the usual one."""
    import scipy.sparse as sp

    X = sp.csr_matrix((0, model.n_features), dtype=np.float32)
    return _piece(0, layout, _rows(model, layout, [], [] if layout.with_ids else None, X), 0)


def predict_to_file(
    model: Model,
    source: str,
    out: str,
    *,
    top_k: int = 1,
    fmt: str | None = None,
    options: dict | None = None,
    progress: bool = False,
    model_dir: str | None = None,
    threshold: float | None = None,
    parts: bool = False,
    engine: Engine | None = None,
    out_format: str | None = None,
) -> int:
    """Write one row per input row to `out` (a local path or URL) atomically; returns the number
    of rows. `.csv`: location, label_1, score_1, …; `.jsonl`: {"location", "labels", "scores"};
    `.parquet`: the CSV's columns, typed (see _table); for a regression model `.csv`: location
    and one column per output, `.jsonl`: {"location", "values": {output: value}}, values in full
    precision. With an id_field (in `options`, or recorded with the training store's source
    options) each row also carries its record's id: a column `id` after `location`, or the key
    "id". A multilabel model also writes the predicted label set, the labels scored >
    `threshold` (default: the model's decision_threshold; streamfit.model.decide): `.csv`
    column "predicted" after the location (and id), names joined by "|"; `.jsonl` key
    "predicted", a list. `parts`: `out` is a directory of parts and a manifest (see the module
    docstring). `out` a stream (`stream_name`: "-" for stdout, a FIFO, …): the rows written there
    as they are scored, `out_format` "csv" (the default) or "jsonl". `source` "-": standard input
    (`fmt` required; see the module docstring). An input of zero records writes the output of no rows and warns (module docstring).
    `engine`: where the pieces are scored (default: in this process). `model_dir`:
    where the model was loaded from, which `out` must not overlap (nor may it overlap `source`)."""
    from streamfit import storage
    from streamfit.engine import Engine
    from streamfit.ingest import stdin
    from streamfit.ingest.sources import check_options

    check_scoring_options(model, threshold=threshold, top_k=top_k)
    stream = stream_name(out)
    kind = _output_kind(out, out_format, parts, stream)
    target = None if stream is not None else _file_target(out, parts, source, model_dir)
    shown = stream or out
    named = stdin.NAME if source == stdin.STDIN else source  # the input, as messages and a manifest name it
    if top_k > len(model.classes_) and not model.regression:
        log.warning(
            "--top-k %d: the model has %d classes; writing %d per row", top_k, len(model.classes_), len(model.classes_)
        )
        top_k = len(model.classes_)
    engine = engine or Engine(mode="inprocess")
    is_store = source != stdin.STDIN and _is_store(source)  # - is standard input, even beside a folder called -
    options = options or {}
    # the one rule for id_field: predict's own option (an id column of the output), not a format
    # option to check; a store's rows carry no ids (it is ignored there), and raw input of a format
    # that reads none is its own error (_raw_batches). Every other given option is a format option:
    # refused for a store, checked against the input's format for raw input (check_options_read)
    given = {k: v for k, v in options.items() if k != "id_field"}
    check_options(options)  # known names and types first: a misspelled one is named, with the closest
    if is_store and given:
        raise StreamfitError(
            f"{source}: is a store, read as ingested; format option {min(given)} is for raw input: drop it"
        )
    with_ids = not is_store and bool({**model.featurizer.get("source_options", {}), **options}.get("id_field"))
    layout = _Layout(
        kind,
        _columns(model, top_k, with_ids),
        top_k,
        model.decision_threshold if threshold is None else threshold,
        with_ids,
        parts,
    )
    # held until the output is published or removed
    lock = _claim_output(target, out, parts) if target is not None else None
    scored: Generator[_Piece, None, None] | None = None
    try:
        attempt = storage.begin(target, clear=False, what="prediction output") if target and parts else None
        # Dask workers write their parts to an object store themselves; the driver writes local ones
        part_dir = (
            attempt.location
            if attempt is not None and engine.mode != "inprocess" and not attempt.target.local
            else None
        )
        left = "the rows scored before the stop were written, the others not" if target is None else "not written"
        stop = f"{shown}: {left}; run the command again"  # a SIGTERM's line
        pieces = scored = _until_stopped(
            _scored(model, layout, source, fmt, options, given, engine, part_dir, is_store, stop), stop
        )
        if progress:  # tqdm.auto imports asyncio: not paid by a job that only names PARTS_MANIFEST, nor by -q
            from tqdm.auto import tqdm

            pieces = tqdm(pieces, unit="chunk" if is_store else "batch", desc="predict")
        if attempt is not None:
            n = _write_parts(attempt, layout, pieces, named)
        elif stream is not None:
            n = _write_stream(stream, layout, pieces)
        else:
            n = _write_file(target, layout, pieces)
    finally:
        if scored is not None:  # a writer stopped early (a reader gone, a full disk): the pass ends here, on
            scored.close()  # its engine, which cancels its Dask tasks (left to the garbage collector, after)
        if isinstance(lock, int):
            os.close(lock)
        elif lock is not None:
            lock.release()
    if n == 0:  # a daily job's quiet day (an empty partition): an empty output, not a failed job
        held = {".csv": "its header line alone", ".jsonl": "no lines", ".parquet": "its columns and no rows"}
        log.warning(
            "%s: no records to score (the input is empty, or holds a header row alone); %s holds %s%s",
            named,
            shown,
            held[kind],
            f" (one part, {part_name(0, kind)}, and {PARTS_MANIFEST})" if parts else "",
        )
    return n


def _output_kind(out: str, out_format: str | None, parts: bool, stream: str | None) -> str:
    """The output's kind (an OUTPUT_KINDS suffix): a file's from its name (`out_format`, if given,
    must agree); a stream's (`stream`, see stream_name) `out_format`, else a FIFO's suffix (.csv
    or .jsonl), else CSV; a stream takes no Parquet (a binary file its readers open at its end)
    and no parts (files in a directory)."""
    kind = os.path.splitext(out.rstrip("/"))[1].lower()
    if stream is None and kind not in OUTPUT_KINDS:
        raise StreamfitError(
            f"{out}: the output must end in .csv, .jsonl or .parquet, or be - (stdout), /dev/stderr or a FIFO"
        )
    if out_format is not None and kind in OUTPUT_KINDS and kind != f".{out_format}":
        raise StreamfitError(
            f"--out {out} ends in {kind} and --out-format is {out_format}: a file's format is its suffix (drop "
            f"--out-format, or name the file .{out_format})"
        )
    if stream is None:
        return kind
    if parts:
        raise StreamfitError(
            f"--out {out} --parts: parts are files of a directory, {stream} one stream; write the parts to a "
            "directory (--out preds.csv --parts), or drop --parts"
        )
    if (out_format or kind.lstrip(".")) == "parquet":
        raise StreamfitError(
            f"--out {out} --out-format parquet: {stream} takes csv or jsonl; write Parquet to a file (--out "
            "preds.parquet)"
        )
    return f".{out_format}" if out_format else kind if kind in OUTPUT_KINDS else f".{STDOUT_KINDS[0]}"


def _file_target(out: str, parts: bool, source: str, model_dir: str | None):
    """The storage.Location of the output file (or --parts directory) `out`, once it is known not
    to overlap the input `source` nor the model's `model_dir`, nor, with `parts`, to be a file."""
    from streamfit import storage
    from streamfit.store.store import overlaps

    for what, path in [("input", source)] + ([("model", model_dir)] if model_dir else []):
        if overlaps(out, path) or overlaps(f"{out}.partial", path):
            raise StreamfitError(
                f"--out {out} overlaps the {what} {path} (the same path, or one inside the other): writing it "
                "would destroy what is read; choose another --out"
            )
    target = storage.resolve(out.rstrip("/"))
    if parts and target.local and os.path.isfile(target.path):
        raise StreamfitError(
            f"--out {out}: is a file, and --parts writes a directory; remove it or choose another --out"
        )
    return target


def _claim_output(target, out: str, parts: bool) -> int | Lease | None:
    """Make this process the only writer of `out` on local disk: an exclusive flock on its
    staging path `OUT.partial` (the file, or with `parts` the directory), taken before anything
    is written there and held, through the returned descriptor, until the output is published or
    removed. Two predicts to one output (a scheduler's retry while the first still runs) used to
    write one staging file at once: the published file mixed both inputs' rows while each
    reported success. The second now stops with one line before it writes. A staging path that
    its writer renamed or removed between our open and our lock is opened again, so the lock is
    on the path's current file; a killed writer's leftover (its lock is free) is replaced.
    Behind a URL, where each writer stages in a temporary file or attempt prefix of its own:
    the output's lease (streamfit.lease), `OUT.LEASE` in both modes (a one-file output cannot
    hold objects under its name), so that the second writer stops with one line naming the
    first before it scores anything, and a writer that lost its lease publishes nothing."""
    import fcntl
    import shutil

    if not target.local:
        from streamfit import lease

        return lease.take(target, "prediction output", key=target.sibling("." + lease.LEASE))
    staging = target.path + ".partial"
    busy = StreamfitError(
        f"{out}: another streamfit predict is writing this output right now ({staging} is locked); "
        "wait for it to finish, or choose another --out"
    )

    def locked(fd: int) -> bool:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        except OSError as e:  # a filesystem without flock (some network mounts): unguarded, and said so
            log.warning("%s: cannot lock the output (%s); make sure no other predict writes it", out, e.strerror)
        return True

    for _ in range(10):
        try:
            if os.path.isdir(staging) != parts and os.path.lexists(staging):  # the other mode's leftover
                fd = os.open(staging, os.O_RDONLY)
                try:
                    if not locked(fd):
                        raise busy
                    if parts:
                        os.remove(staging)  # a one-file writer's staging file
                    else:
                        shutil.rmtree(staging)  # a --parts writer's staging directory
                finally:
                    os.close(fd)
            if parts:
                os.makedirs(staging, exist_ok=True)
                fd = os.open(staging, os.O_RDONLY)
            else:
                fd = os.open(staging, os.O_WRONLY | os.O_CREAT, 0o666)
        except OSError as e:
            raise output_error(staging, e) from e
        if not locked(fd):
            os.close(fd)
            raise busy
        try:
            current, mine = os.stat(staging), os.fstat(fd)
        except FileNotFoundError:
            current = None
        if current is not None and (current.st_dev, current.st_ino) == (mine.st_dev, mine.st_ino):
            if parts:
                for name in os.listdir(staging):  # a killed writer's parts
                    path = os.path.join(staging, name)
                    if os.path.isdir(path):
                        shutil.rmtree(path)
                    else:
                        os.remove(path)
            else:
                os.ftruncate(fd, 0)  # a killed writer's bytes
            return fd
        os.close(fd)  # published or removed by the writer that held it: open the path anew
    raise busy


def _until_stopped(pieces: Iterator[_Piece], stop: str) -> Generator[_Piece, None, None]:
    """The pieces, each written before the next is asked for; a SIGTERM stops between them
    (streamfit.shutdown), and the writer's clean-up leaves nothing of a file; `stop`: the stop's
    line (what is left of the output)."""
    from streamfit import shutdown

    for piece in pieces:
        yield piece
        shutdown.check(stop)


def _scored(model, layout, source, fmt, options, given, engine, part_dir, is_store, stop: str) -> Iterator[_Piece]:
    """The scored pieces of `source`, in input order (a generator; the engine runs the tasks,
    which write their parts into `part_dir` when it is given). options: as given to predict;
    given: its format options (predict's rule: all but id_field); stop: a SIGTERM's line, for one
    that comes while raw input is awaited (_until_stopped's otherwise)."""
    from streamfit.store import open_store

    reading = None  # raw input on a cluster: its batches read by a thread
    if is_store:
        store = open_store(source)
        if store.n_features != model.n_features:
            raise StreamfitError(
                f"{source}: has {store.n_features} features, the model {model.n_features}; "
                "ingest it with --like TRAIN_STORE"
            )
        model.check_features(store)
        items: Iterator = iter(enumerate(range(store.n_chunks)))
        window = store.n_chunks  # chunk ids are small: all submitted at once, highest priority first
        kwargs = {"store": store}
        ready = _always
    else:
        items = enumerate(_raw_batches(model, source, fmt, options, given, layout.with_ids, stop))
        window, ready = 1, _always
        kwargs = {}
        if engine.mode != "inprocess":  # read by a thread, so that a round takes the batches read by then
            window = 4 * max(engine.total_threads, 1)
            items = reading = ReadAhead(items, window, "streamfit-read", stop)
            ready = reading.ready
    scored = False
    try:
        for piece in _in_order(engine, items, window, ready, model=model, layout=layout, part_dir=part_dir, **kwargs):
            scored = True
            yield piece
    finally:
        if reading is not None:
            reading.close()
    if not scored:  # zero records: the output of no rows still has its columns
        yield _no_records(model, layout)


def _raw_batches(model: Model, source: str, fmt: str | None, options: dict, given: dict, with_ids: bool, stop: str):
    """A raw source's batches, read with the training store's source options (overridden by
    `options`) and without labels; `given` (the format options of `options`, predict's rule) is
    checked against the inputs' format as ingest checks its own. `source` names its files as
    ingest's inputs do (a glob, a dataset directory such as a Parquet dataset with hive
    partitions: streamfit.ingest.inputs), read in the same sorted order. Text is checked as
    ingest checks it (streamfit.ingest.text_checks): a record with a NUL stops the read at its
    location, records with C1 controls read as latin-1 are one warning once the input is read.
    stop: the line of a SIGTERM that comes while standard input is awaited."""
    from streamfit.ingest import stdin, text_checks
    from streamfit.ingest.featurize import Featurizer
    from streamfit.ingest.inputs import expand_inputs
    from streamfit.ingest.pipeline import check_options_read
    from streamfit.ingest.sources import BadRecordPolicy, TextBatch, open_source
    from streamfit.ingest.sources.folder import forget_listings

    featurizer = Featurizer.from_dict(_featurization(model), idf=model.idf)
    options = {**model.featurizer.get("source_options", {}), **options, **_UNLABELED}
    policy = BadRecordPolicy("error")  # predict scores every record or none
    c1, first_c1 = 0, ""  # records whose text holds C1 controls read as latin-1, and the first one's location
    try:
        paths = expand_inputs([source], fmt)
        check_options_read(given, paths, fmt)  # as ingest: --subset for a CSV file is an error, not ignored
        for path in paths:
            src = open_source(path, fmt, policy=policy, batch_size=RAW_BATCH_ROWS, **options)
            _check_kind(model, featurizer, path, src.kind)
            # standard input as it comes: also a batch cut short where the pipe goes quiet
            for batch in stdin.flushed_when_quiet(src, stop) if stdin.live(path) else src:
                if with_ids and getattr(batch, "ids", None) is None:
                    raise StreamfitError(
                        f"{path}: --id-field {options['id_field']}: this format reads no ids (CSV, TSV, JSONL and "
                        "Parquet do); drop --id-field"
                    )
                if isinstance(batch, TextBatch):
                    rows = text_checks.check_batch(batch, text_checks.decoded_with(src), policy, "predict")[1]
                    first_c1 = first_c1 or (batch.locations[rows[0]] if rows else "")
                    c1 += len(rows)
                yield batch
    finally:
        forget_listings()  # a URL folder's listing handed over by the expansion serves this read only
    if c1:
        log.warning(text_checks.c1_warning(c1, first_c1, "predict"))


def _always() -> bool:
    return True


def _in_order(engine: Engine, items: Iterator, window: int, ready: Callable[[], bool], **kwargs) -> Iterator[_Piece]:
    """_score_piece over `items` in rounds, each round's tasks run by engine.imap_unordered
    (which resubmits what a lost worker held), yielded in input order. A round takes the next
    item, then those after it while `ready()` (read already), up to `window` items: a round does
    not wait for a window of batches to be read (its first rows would wait for them)."""
    while (first := next(items, None)) is not None:
        group = [first]
        while len(group) < window and ready() and (item := next(items, None)) is not None:
            group.append(item)
        done: dict[int, _Piece] = {}
        next_index = group[0][0]
        for _, piece in engine.imap_unordered(_score_piece, group, **kwargs):
            done[piece.index] = piece
            while next_index in done:
                yield done.pop(next_index)
                next_index += 1


def _write_file(target, layout: _Layout, pieces: Iterator[_Piece]) -> int:
    """Write the pieces to one file, staged locally and published whole (nothing is left when it fails)."""
    tmp = target.staging_file()
    n = 0
    try:
        if layout.kind == ".parquet":
            import pyarrow.parquet as pq

            writer = None
            try:
                for piece in pieces:
                    writer = writer or pq.ParquetWriter(tmp, piece.data.schema)
                    writer.write_table(piece.data)
                    n += piece.rows
            finally:
                if writer is not None:
                    writer.close()
        else:
            with open(tmp, "wb") as f:
                if layout.kind == ".csv":
                    f.write(_csv_line(list(layout.columns)).encode())
                for piece in pieces:
                    f.write(piece.data.encode())
                    n += piece.rows
                f.flush()
                os.fsync(f.fileno())
        target.publish_file(tmp)
    except OSError as e:
        _remove(tmp)
        raise output_error(target.url, e) from e
    except BaseException:  # bad input, interrupted: no partial output is left behind
        _remove(tmp)
        raise
    return n


def _write_stream(name: str, layout: _Layout, pieces: Iterator[_Piece]) -> int:
    """Write the pieces to stream `name` (stream_name's: stdout, stderr, or a FIFO's or device's
    path, opened here) as CSV or JSONL, each flushed as it comes (a CSV's header line with the
    first); returns the rows written. A reader gone (BrokenPipeError) passes on to the CLI, which
    ends without a line; another failed write is the stream's OutputError."""
    own = {"stdout": sys.stdout, "stderr": sys.stderr}
    with contextlib.ExitStack() as opened:
        if name in own:
            text = own[name]
            if text is None:  # started with the stream closed (>&-)
                raise OutputError(
                    f"--out: this process has no {name} (closed); give it one, or write a file with --out"
                )
            text.flush()  # text written before stays before the rows
            stream = text.buffer
        else:
            try:
                stream = opened.enter_context(open(name, "wb"))  # noqa: SIM115 (closed with the ExitStack)
            except OSError as e:
                raise output_error(name, e) from e
        head = _csv_line(list(layout.columns)) if layout.kind == ".csv" else ""
        n = 0
        for piece in pieces:
            try:
                stream.write((head + piece.data).encode())
                stream.flush()
            except BrokenPipeError:
                raise
            except OSError as e:
                raise stdout_error(e, name) from e
            head = ""
            n += piece.rows
    return n


def _write_parts(attempt, layout: _Layout, pieces: Iterator[_Piece], source: str) -> int:
    """Write the pieces as parts of `attempt` (storage.begin's), then the manifest, then commit;
    a failure or interruption aborts the attempt, so nothing that looks complete is left."""
    from streamfit import storage
    from streamfit.store.format import json_digest

    entries: list[dict[str, Any]] = []
    try:
        attempt.location.makedirs()
        for piece in pieces:
            name = part_name(piece.index, layout.kind)
            if piece.data is not None:
                attempt.location.join(name).write_new(piece.data)
            entries.append({"name": name, "rows": piece.rows, "bytes": piece.size, "sha256": piece.sha256})
        n = sum(int(e["rows"]) for e in entries)
        manifest = {
            "format": PARTS_FORMAT,
            "kind": layout.kind.lstrip("."),
            "columns": list(layout.columns),
            "n_rows": n,
            "source": storage.public(source),
            "parts": entries,
        }
        manifest["manifest_sha256"] = json_digest(manifest, "manifest_sha256")
        attempt.location.join(PARTS_MANIFEST).write_new(json.dumps(manifest, indent=1).encode())
        attempt.commit()
    except OSError as e:
        attempt.abort()
        raise output_error(attempt.target.url, e) from e
    except BaseException:
        attempt.abort()
        raise
    return n


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.remove(path)
