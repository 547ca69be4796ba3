"""CSV and TSV files, read as the csv module reads them (quoting as in Excel's dialect). A line
that is a record by itself (its cells plain, or quoted on that line with their quotes doubled) is
split at the delimiter without the csv module, whose parser steps through every character (3×
the CPU of a split on documents such as R8's); the csv module reads every other record (a quoted
cell holding the delimiter or a line break, a quote never closed), from its first line on.

The first row names the columns, and text_field/label_field name them; with header=False
(`--no-header`) there is no such row and text_field/label_field are column numbers counted
from 0 ("--label-field 0 --text-field 1" for R8's `label<TAB>text` lines).
text_field may name several columns ("title,body", or "1,2" without a header). id_field names a
column (or number) whose value each record carries as its id (TextBatch.ids), what
`streamfit predict` writes beside each prediction. Labels are kept as written; with
label_separator (e.g. "|") the source is multilabel and a label cell is split on it, pieces
stripped of spaces and empty pieces dropped; label_field=None reads no labels (every label is
None, as `streamfit predict` reads unlabeled rows). A missing column is an InputError at the header;
a row with the wrong number of cells, or an empty single label, is a bad record. A cell longer
than limits.record_bytes (`--max-record-bytes`, 64 MiB by default; the csv module's field size
limit is set to it, so a stray quote cannot swallow more of the file) or text that does not
decode stops the read with an InputError, since the rows after it cannot be trusted, naming the
line and the bytes (text is decoded in chunks: that line is found by a second read, a line at a
time). A quote that is never closed (the csv module then reads the rest of
the file, up to that limit, as one cell) is a bad record at the line of the quote, naming how
many lines it swallowed. Locations name the line where the record starts.

Feature-column mode, with feature_fields ("f0,f1,…", or column numbers with header=False): a
table of one numeric column per feature, as Parquet's feature_fields reads one: SparseBatch of
those columns as features 0, 1, … in that order (zeros left out); a cell that is empty, not a
number, NaN, infinite or beyond float32 is a bad record. text_field is then not read.
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import re

import numpy as np

from streamfit.errors import InputError
from streamfit.ingest import stdin, text_checks
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE, DEFAULT_LIMITS, ReadLimits
from streamfit.ingest.sources._util import (
    TextBatcher,
    bom_free,
    check_batch_size,
    check_encoding,
    csr_int64,
    fits_float32,
    open_binary,
    require_path,
    set_option,
    split_fields,
    too_long,
)
from streamfit.ingest.sources.batches import SparseBatch
from streamfit.ingest.sources.policy import BadRecordPolicy


def _row_text(row: list[str], delimiter: str) -> str:
    out = io.StringIO()
    csv.writer(out, delimiter=delimiter, lineterminator="").writerow(row)
    return out.getvalue()


_LINE_BREAK = re.compile(rb"\r\n|\r|\n")
SPLIT_TRIALS = 100  # lines with a quote tried by _plain_cells before its share of them decides


def _plain_cells(line: str, delimiter: str) -> list[str] | None:
    """The cells of a line that is a whole record by itself, as the csv module (Excel dialect:
    quote '"', doubled inside a quoted cell, no escape character, not strict) reads it; None
    where only the csv module can tell. The line, less its line break, split at the delimiter: a
    piece that does not open with a quote is a cell as it stands (a quote inside it is a
    character), and one that opens with a quote must close with it, every run of quotes inside
    it of even length (each pair one quote of the cell; every quote is in a pair when the pairs
    are half as many as the quotes). Anything else (a quoted cell holding the delimiter or a line
    break, text after a closing quote, a quote never closed) is None. A blank line is [] (the
    csv module's empty row)."""
    if line.endswith("\n"):
        line = line[:-2] if line.endswith("\r\n") else line[:-1]
    elif line.endswith("\r"):
        line = line[:-1]
    if not line:
        return []
    cells = line.split(delimiter)
    if '"' not in line:
        return cells
    for i, cell in enumerate(cells):
        if cell.startswith('"'):
            if len(cell) < 2 or not cell.endswith('"'):
                return None
            inner = cell[1:-1]
            cells[i] = inner.replace('""', '"')  # pairs from the left, as the csv module takes them
            if inner.count('"') != 2 * (len(inner) - len(cells[i])):  # a quote left unpaired
                return None
    return cells


class _HeldLine:
    """The lines of a file for csv.reader, the first of them a line already taken from the file
    (`line`, set before each read of a record)."""

    def __init__(self, lines):
        self.lines = lines
        self.line: str | None = None

    def __iter__(self):
        return self

    def __next__(self) -> str:
        if self.line is None:
            return next(self.lines)
        line, self.line = self.line, None
        return line


class CsvSource:
    """Streaming CSV reader of text records (or, with feature_fields, of numeric feature columns)."""

    delimiter = ","
    format_name = "CSV"

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        text_field: str = "text",
        label_field: str | None = "label",
        label_separator: str | None = None,
        encoding: str = "utf-8",
        header: bool = True,
        id_field: str | None = None,
        feature_fields: str | None = None,
        delimiter: str | None = None,
        limits: ReadLimits = DEFAULT_LIMITS,
    ):
        """delimiter: one character other than a quote or a line break ("," for CSV, a tab for
        TSV by default), e.g. ";" for the CSV files of spreadsheets set to a European locale."""
        if delimiter is not None:
            if len(delimiter) != 1 or delimiter in '"\r\n':
                raise ValueError(
                    f"delimiter must be one character other than a quote or a line break, not {delimiter!r}"
                )
            self.delimiter = delimiter
        self.path = os.fspath(path)
        self.url_info = require_path(self.path)  # a URL's look-up, for its open
        self.header = header
        self.id_field = id_field
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.features = None if feature_fields is None else split_fields("feature_fields", feature_fields)
        self.kind = "text" if self.features is None else "sparse"  # per file: ingest's text defaults ask it
        self.fields = self.features or split_fields("text_field", text_field)
        self.field_option = "--text-field" if self.features is None else "--option feature_fields"
        self.label_field = label_field
        if label_separator == "":
            raise ValueError("label_separator must not be empty")
        self.label_separator = label_separator
        self.encoding = check_encoding(encoding)
        self.multilabel = label_separator is not None
        self.limits = limits
        self.n_read = 0
        self._record_lines: list[str] = []  # the lines of the record being read (for _unterminated)
        self._line_no = 0  # lines read so far

    def __iter__(self):
        self.n_read = 0
        encoding = bom_free(self.encoding)
        with io.TextIOWrapper(
            open_binary(self.path, info=self.url_info, max_bytes=self.limits.input_bytes), encoding=encoding, newline=""
        ) as f:
            csv.field_size_limit(self.limits.record_bytes)  # the csv module's limit is per process
            records = self._records(f)
            if self.header:
                header = next(records, None)
                if header is None:
                    return
                text_columns, label_column, id_column = self._columns(header[0])
                n_cells = len(header[0])
            else:
                text_columns, label_column, id_column = self._positions()
                n_cells = None  # the first row's, which every row must have
            needed_column = max(text_columns + [label_column or 0, id_column or 0])  # counted from 0
            batcher = TextBatcher(self.fields, with_ids=id_column is not None) if self.features is None else None
            rows = _FeatureRows(self.features, id_column is not None) if self.features is not None else None
            pending = rows if rows is not None else batcher
            with stdin.holding(self.path, pending):  # a quiet pipe takes the batch short
                for row, first_line, record_lines in records:
                    location = f"{self.path}:{first_line}"
                    if not row:
                        continue
                    self.n_read += 1
                    if record_lines is not None and self._unterminated(record_lines):
                        self.policy.bad(
                            location,
                            "a quote opened in this record is never closed: its cell runs over the "
                            f"{len(record_lines)} line(s) to the end of the file",
                            _row_text(row, self.delimiter),
                            "close the quote, or double a quote inside a quoted cell",
                        )
                        continue
                    n_cells = n_cells or len(row)
                    if len(row) != n_cells or len(row) <= needed_column:
                        expected = f"{n_cells} cells" if len(row) != n_cells else f"cells up to column {needed_column}"
                        self.policy.bad(
                            location,
                            f"expected {expected}, found {len(row)}",
                            _row_text(row, self.delimiter),
                            "quote cells that contain the delimiter",
                        )
                        continue
                    label = None
                    if label_column is not None:
                        label = row[label_column]
                        if self.multilabel:
                            label = [p.strip() for p in label.split(self.label_separator) if p.strip()]
                        elif not label:
                            self.policy.bad(location, "the label is empty", _row_text(row, self.delimiter))
                            continue
                    record_id = None if id_column is None else row[id_column]
                    if record_id is not None and not record_id.strip():
                        self.policy.bad(
                            location,
                            f"the id (--id-field {self.id_field}) is empty",
                            _row_text(row, self.delimiter),
                            "give every record an id, or pass --option id_field=None to read no ids",
                        )
                        continue
                    if rows is not None:
                        problem = rows.add([row[c] for c in text_columns], label, location, record_id)
                        if problem:
                            self.policy.bad(
                                location, problem, _row_text(row, self.delimiter), "write a number in every cell"
                            )
                        elif len(rows) == self.batch_size:
                            yield rows.take()
                        continue
                    assert batcher is not None
                    batcher.add([row[c] for c in text_columns], label, location, record_id)
                    if len(batcher) == self.batch_size:
                        yield batcher.take()
                if pending is not None and len(pending):
                    yield pending.take()

    def _records(self, f: io.TextIOWrapper):
        """(cells, the number of the record's first line, None or the record's lines) of each
        record of f, as `csv.reader(f, delimiter)` reads them (blank lines as []). A line that is a
        record by itself (`_plain_cells`) is split here, with None for its lines (no quote of it
        is left open); any other record is read by the csv module, with its lines for
        `_unterminated`. A line without a quote is always split here; lines with one are tried
        while it pays: once SPLIT_TRIALS of them were tried, only while at least half were split
        (in a CSV file whose texts hold commas, most quoted cells hold the delimiter, and each
        try would be a split wasted before the csv module's read). Undecodable text or an
        overlong cell -> InputError."""
        self._line_no = 0
        lines = self._lines(f)
        held = _HeldLine(lines)
        reader = csv.reader(held, delimiter=self.delimiter)
        tried = split = 0  # lines with a quote given to _plain_cells, and those it split
        while True:
            first_line = self._line_no + 1
            self._record_lines = []
            try:
                line = next(lines, None)
                if line is None:
                    return
                cells = None
                if '"' not in line:
                    cells = _plain_cells(line, self.delimiter)
                elif tried < SPLIT_TRIALS or 2 * split >= tried:
                    cells = _plain_cells(line, self.delimiter)
                    tried, split = tried + 1, split + (cells is not None)
                record_lines = None
                if cells is None:  # the csv module reads the record from this line on
                    held.line = line
                    cells, record_lines = next(reader), self._record_lines
            except UnicodeDecodeError as e:
                raise self._undecodable(e) from None
            except csv.Error as e:
                if "field larger than field limit" in str(e):
                    problem, hint = too_long(self.limits)
                    raise InputError(f"{self.path}:{self._line_no}", f"a cell is {problem}", hint) from None
                raise InputError(f"{self.path}:{self._line_no}", f"malformed {self.format_name} ({e})") from None
            yield cells, first_line, record_lines

    def _undecodable(self, error: UnicodeDecodeError) -> InputError:
        """The InputError for text that does not decode in the encoding, naming the line and the
        bytes. The text is decoded in pieces (`error.object`, the piece that failed, none of whose
        lines was read), so the line is the lines read before it, plus one, plus the line breaks
        in the piece before the bad bytes. Standard input read once is named so; a file is read
        again, a line at a time, through an incremental decoder, from its start (on this error only;
        up to that line), which does not depend on how the text was cut into pieces."""
        encoding = bom_free(self.encoding)
        hint = "pass --encoding with the file's encoding, e.g. --encoding latin-1 (or cp1252, utf-16)"
        if stdin.is_stdin(self.path) and not stdin.rereadable():  # read once: not read again
            seen = error.object[: error.start]
            line = self._line_no + 1 + len(_LINE_BREAK.findall(seen))
            return InputError(
                f"{self.path}:{line}",
                f"the bytes {error.object[error.start : error.end]!r} are not valid {self.encoding} text",
                hint,
            )
        decoder = codecs.getincrementaldecoder(encoding)()
        breaks = 0  # line breaks before the piece being decoded: \r\n, \r or \n, as the csv reader counts them
        after = InputError(self.path, f"the text after line {self._line_no} is not valid {self.encoding}", hint)
        with open_binary(self.path, info=self.url_info, max_bytes=self.limits.input_bytes) as f:
            for piece in [*iter(lambda: f.readline(1 << 20), b""), None]:  # None: the end (a sequence cut short)
                try:
                    decoder.decode(piece or b"", final=piece is None)
                except UnicodeDecodeError as e:
                    line = breaks + len(_LINE_BREAK.findall(e.object[: e.start])) + 1
                    bad = e.object[e.start : e.end]
                    return InputError(
                        f"{self.path}:{line}", f"the bytes {bad!r} are not valid {self.encoding} text", hint
                    )
                breaks += len(_LINE_BREAK.findall(piece or b""))
        return after

    def _lines(self, f: io.TextIOWrapper):
        """The lines of f, counted in `_line_no` and kept in `_record_lines`; one longer than
        limits.record_bytes characters -> InputError (it is never read whole)."""
        limit = self.limits.record_bytes
        for line in iter(lambda: f.readline(limit + 1), ""):
            self._line_no += 1
            if len(line) > limit and not line.endswith(("\n", "\r")):
                problem, hint = too_long(self.limits)
                raise InputError(f"{self.path}:{self._line_no}", f"the line is {problem} of text", hint)
            self._record_lines.append(line)
            yield line

    def _unterminated(self, lines: list[str]) -> bool:
        """Whether the record of these lines ends inside a quoted cell (the csv module, not strict,
        then takes every line to the end of the file into that cell). The lines of one record are
        at most limits.record_bytes characters plus one line."""
        try:
            for _ in csv.reader(lines, delimiter=self.delimiter, strict=True):
                pass
        except csv.Error as e:
            return "unexpected end of data" in str(e)
        return False

    def _columns(self, header: list[str]) -> tuple[list[int], int | None, int | None]:
        """Positions of the text columns, of the label column (None without label_field) and of
        the id column (None without id_field)."""
        present = ", ".join(map(repr, header))
        other = [d for d in ";|\t," if d != self.delimiter and len(header) == 1 and d in header[0]]
        # one column whose name holds another delimiter: a file delimited otherwise
        delimited = (
            f" (its header holds {other[0]!r}: for cells separated so, pass --option delimiter={other[0]!r})"
            if other
            else ""
        )
        if any(text_checks.NUL in name for name in header):  # ASCII names in UTF-16 text read as 8-bit
            delimited += f" (its header holds NUL characters: likely UTF-16 text read as {self.encoding}: pass --encoding utf-16)"

        def position(option: str, name: str) -> int:
            if name not in header:
                raise InputError(
                    f"{self.path}:1",
                    f"no column {name!r}",
                    f"{set_option(option)}; the columns are {present}"
                    + delimited
                    + " (a file without a header row: pass --no-header and column numbers, e.g. --label-field 0 "
                    "--text-field 1)",
                )
            return header.index(name)

        text_columns = [position(self.field_option, f) for f in self.fields]
        return (
            text_columns,
            None if self.label_field is None else position("--label-field", self.label_field),
            None if self.id_field is None else position("--id-field", self.id_field),
        )

    def _positions(self) -> tuple[list[int], int | None, int | None]:
        """header=False: the text, label and id columns as numbers counted from 0."""

        def position(option: str, name: str) -> int:
            if not name.isdigit():
                raise InputError(
                    self.path,
                    f"{option} {name!r} names a column, but the file has no header row (--no-header)",
                    "give column numbers counted from 0, e.g. --label-field 0 --text-field 1; predict reads a file "
                    "as the training file was read: for one with a header row pass --option header=true and the "
                    "column names",
                )
            return int(name)

        text_columns = [position(self.field_option, f) for f in self.fields]
        return (
            text_columns,
            None if self.label_field is None else position("--label-field", self.label_field),
            None if self.id_field is None else position("--id-field", self.id_field),
        )


class _FeatureRows:
    """Feature-column records collected into a SparseBatch: cell j of a row is feature j."""

    def __init__(self, columns: list[str], with_ids: bool):
        self.columns, self.with_ids = columns, with_ids
        self.values: list[list[float]] = []
        self.labels: list = []
        self.locations: list[str] = []
        self.ids: list[str] = []

    def __len__(self) -> int:
        return len(self.values)

    def add(self, cells: list[str], label, location: str, record_id: str | None) -> str | None:
        """Add the row, or return why it is a bad record (a cell empty, not a number, NaN,
        infinite or beyond float32's ±3.4e38)."""
        values = []
        for name, cell in zip(self.columns, cells):
            try:
                value = float(cell)
            except ValueError:
                return (
                    f"column {name!r} holds {cell.strip()!r}, not a number"
                    if cell.strip()
                    else f"column {name!r} is empty"
                )
            if not fits_float32(value):
                return f"column {name!r} holds {value!r}: NaN, infinite or beyond float32's ±3.4e38 (scale it)"
            values.append(value)
        self.values.append(values)
        self.labels.append(label)
        self.locations.append(location)
        if self.with_ids:
            assert record_id is not None
            self.ids.append(record_id)
        return None

    def take(self) -> SparseBatch:
        X = np.asarray(self.values, dtype=np.float64).reshape(len(self.values), len(self.columns))
        nz = X != 0
        indptr = np.concatenate([[0], np.cumsum(nz.sum(axis=1))]).astype(np.int64)
        columns = np.broadcast_to(np.arange(len(self.columns), dtype=np.int64), X.shape)
        batch = SparseBatch(
            csr_int64(X[nz], columns[nz], indptr, len(self.columns)),
            self.labels,
            self.locations,
            self.ids if self.with_ids else None,
        )
        self.values, self.labels, self.locations, self.ids = [], [], [], []
        return batch


class TsvSource(CsvSource):
    """Streaming TSV reader: CSV with tab-separated cells."""

    delimiter = "\t"
    format_name = "TSV"
