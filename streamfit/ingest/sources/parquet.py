"""Parquet files, read with pyarrow one row group at a time in batches of batch_size rows.

Feature-column mode, with feature_fields ("f0,f1,…": a table of one numeric column per feature,
as a data engineer's feature table is): SparseBatch of those columns as features 0, 1, … in
that order (zeros left out); a null, NaN or infinite cell is a bad record. Text mode, when the
file has the text_field column(s): TextBatch; a text column may hold raw
strings or pre-tokenized lists of strings (each token hashed as given). Indexed mode otherwise:
indices_field (list of integers, 0-based column indices as stored) and values_field (list of
numbers) give a SparseBatch; within a row indices are sorted, and a repeated index is a bad
record. Labels come from label_field (strings or integers; a list column makes the source
multilabel; with numeric_targets, --target numeric, also real numbers: a list, several outputs) or from labels_field (a list column); with both None no labels are read (every
label is None, as `streamfit predict` reads unlabeled rows). id_field names a column (strings or
integers) whose value each record carries as its id (TextBatch.ids, SparseBatch.ids), what
`streamfit predict` writes beside each prediction; a null id is a bad record. Strings that are not valid UTF-8 (a
writer can store any bytes in a string column), nulls, lists of different lengths, indices outside [0, 2**62] and NaN/inf values are bad records (with --no-hash, ingest
also refuses columns beyond a store's int32 columns, 2**31 - 2). Locations are
"file:row group G, row R", both counted from 0. As in the LIBSVM reader, X.shape[1] is one more than the largest index seen
so far. Memory is bounded by batch_size rows plus what pyarrow holds of the current row group.

Hive partitions: each folder of the file's path named `KEY=VALUE` (`dataset/year=2024/part-0.parquet`,
VALUE %-decoded) is a string column KEY of that value in every row, usable as a text or label
field like a stored column (a stored column of the same name wins).

Nested (struct) columns: a field named by a dotted path ("meta.topic", "body.text") is that field
of a struct column, read alone (pyarrow's nested column selection) and flattened; a null struct
makes its fields null.

pyarrow is imported when a Parquet file is first opened, not with the source registry: an ingest
of other formats does not pay for its import (0.1-0.3 s).
"""

from __future__ import annotations

import json
import os
import re
from typing import TYPE_CHECKING
from urllib.parse import unquote

import numpy as np

from streamfit.errors import InputError
from streamfit.ingest.limits import DEFAULT_BATCH_SIZE
from streamfit.ingest.sources._util import (
    MAX_INDEX,
    TextBatcher,
    check_batch_size,
    csr_int64,
    fits_float32,
    require_path,
    set_option,
    split_fields,
)
from streamfit.ingest.sources.batches import SparseBatch
from streamfit.ingest.sources.policy import BadRecordPolicy
from streamfit.storage import is_url, resolve

if TYPE_CHECKING:
    import pyarrow as pa
    import pyarrow.parquet as pq

_HIVE_FOLDER = re.compile(r"^([^=]+)=(.*)$")


def hive_partition(path: str) -> dict[str, str]:
    """{KEY: VALUE} of the folders named KEY=VALUE in `path` (a local path or URL), outermost first."""
    folders = path.split("://", 1)[-1].replace(os.sep, "/").split("/")[:-1]
    return {m[1]: unquote(m[2]) for m in map(_HIVE_FOLDER.match, folders) if m}


def _is_list(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_list(t) or pa.types.is_large_list(t)


def _is_string(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_string(t) or pa.types.is_large_string(t)


def _is_text(t: pa.DataType) -> bool:
    """Raw text, or a pre-tokenized list of strings (hashed token by token)."""
    return _is_string(t) or (_is_list(t) and _is_string(t.value_type))


def _is_label(t: pa.DataType) -> bool:
    import pyarrow as pa

    return _is_string(t) or pa.types.is_integer(t)


def _is_label_list(t: pa.DataType) -> bool:
    return _is_list(t) and _is_label(t.value_type)


def _is_label_or_list(t: pa.DataType) -> bool:
    return _is_label(t) or _is_label_list(t)


def _is_target(t: pa.DataType) -> bool:
    """A numeric target (--target numeric): numbers, or numbers as text."""
    import pyarrow as pa

    return _is_label(t) or pa.types.is_floating(t)


def _is_target_or_list(t: pa.DataType) -> bool:
    return _is_target(t) or (_is_list(t) and _is_target(t.value_type))


def _is_index_list(t: pa.DataType) -> bool:
    import pyarrow as pa

    return _is_list(t) and pa.types.is_integer(t.value_type)


def _is_number(t: pa.DataType) -> bool:
    import pyarrow as pa

    return pa.types.is_integer(t) or pa.types.is_floating(t)


def _is_number_list(t: pa.DataType) -> bool:
    import pyarrow as pa

    return _is_list(t) and (pa.types.is_integer(t.value_type) or pa.types.is_floating(t.value_type))


def _as_binary(column: pa.Array) -> pa.Array:
    """A string (or list of strings) column as bytes, which need not be valid UTF-8."""
    import pyarrow as pa

    t = column.type
    if _is_string(t):
        return column.view(pa.large_binary() if pa.types.is_large_string(t) else pa.binary())
    if _is_list(t) and _is_string(t.value_type):
        return column.cast(pa.list_(pa.binary()))
    return column


def _raw(batch: pa.RecordBatch, r: int) -> str:
    row = batch.slice(r, 1)
    try:
        record = row.to_pylist()[0]
    except UnicodeDecodeError:  # a string that is not UTF-8: its bytes, escaped
        record = {name: _as_binary(row.column(name)).to_pylist()[0] for name in row.schema.names}
    return json.dumps(
        record, default=lambda v: v.decode("utf-8", "backslashreplace") if isinstance(v, bytes) else str(v)
    )


def _text(value) -> str:
    """A label cell as text: a float (a numeric target) as its shortest repr, which reads back
    as the same float64."""
    return repr(value) if isinstance(value, float) else str(value)


def _strings(column: pa.Array, name: str, problems: dict[int, str]) -> list:
    """column.to_pylist(), with None (and a problem) for each row whose strings are not UTF-8."""
    try:
        return column.to_pylist()
    except UnicodeDecodeError:
        pass
    values = []
    for r in range(len(column)):
        try:
            values.append(column.slice(r, 1).to_pylist()[0])
        except UnicodeDecodeError as e:
            values.append(None)
            problems.setdefault(
                r, f"{name!r} holds bytes that are not UTF-8 text ({e.reason} at byte {e.start}); re-encode it as UTF-8"
            )
    return values


def _flat_schema(schema: pa.Schema) -> pa.Schema:
    """`schema` with the fields of its struct columns added as columns "parent.child" (nested
    ones "a.b.c"), after the columns themselves."""
    import pyarrow as pa

    fields = list(schema)
    for field in fields:  # grows as nested structs are found
        if pa.types.is_struct(field.type):
            fields += [pa.field(f"{field.name}.{child.name}", child.type) for child in field.type]
    return pa.schema(fields)


def _flatten(batch: pa.RecordBatch) -> pa.RecordBatch:
    """A batch read with nested columns selected ("body.text" reads the struct body holding only
    text) as flat columns named by their dotted paths; StructArray.flatten makes a field null
    where its struct is."""
    import pyarrow as pa

    while any(pa.types.is_struct(f.type) for f in batch.schema):
        names, arrays = [], []
        for field, column in zip(batch.schema, batch.columns):
            if pa.types.is_struct(field.type):
                names += [f"{field.name}.{child.name}" for child in field.type]
                arrays += column.flatten()
            else:
                names.append(field.name)
                arrays.append(column)
        batch = pa.RecordBatch.from_arrays(arrays, names=names)
    return batch


class ParquetSource:
    """Streaming Parquet reader of text records or of indexed sparse records."""

    def __init__(
        self,
        path: str,
        *,
        policy: BadRecordPolicy,
        batch_size: int = DEFAULT_BATCH_SIZE,
        text_field: str = "text",
        label_field: str | None = "label",
        labels_field: str | None = None,
        indices_field: str = "indices",
        values_field: str = "values",
        id_field: str | None = None,
        row_groups: tuple[int, int] | None = None,
        numeric_targets: bool = False,
        feature_fields: str | None = None,
    ):
        """row_groups: read only row groups [start, stop) (a piece of a distributed ingest).
        numeric_targets (ingest --target numeric): the label column may hold real numbers (a list
        column: several outputs), each passed on as its shortest repr (the same float64)."""
        import pyarrow as pa

        self.path = os.fspath(path)
        require_path(self.path)
        self.policy = policy
        self.batch_size = check_batch_size(batch_size)
        self.fields = split_fields("text_field", text_field)
        self.indices_field = indices_field
        self.values_field = values_field
        with self._open() as f:
            schema = f.schema_arrow
        self.partition = {k: v for k, v in hive_partition(self.path).items() if k not in schema.names}
        for key in self.partition:
            schema = schema.append(pa.field(key, pa.string()))
        schema = _flat_schema(schema)  # struct fields as "parent.child" columns too
        names = schema.names
        present = ", ".join(map(repr, names))
        self.features = None if feature_fields is None else split_fields("feature_fields", feature_fields)
        if self.features is not None:
            self.kind = "sparse"
            self.columns = list(self.features)
            for field in self.features:
                if field not in names:
                    raise InputError(
                        self.path, f"no column {field!r}", f"check --option feature_fields; the columns are {present}"
                    )
                self._check_type(schema, field, _is_number, "numbers", "--option feature_fields")
        elif all(f in names for f in self.fields):
            self.kind = "text"
            self.columns = list(self.fields)
            for field in self.fields:
                self._check_type(
                    schema, field, _is_text, "a string column or a list of strings (tokens)", "--text-field"
                )
        elif indices_field in names and values_field in names:
            self.kind = "sparse"
            self.columns = [indices_field, values_field]
            self._check_type(schema, indices_field, _is_index_list, "a list of integers", "--option indices_field")
            self._check_type(schema, values_field, _is_number_list, "a list of numbers", "--option values_field")
        else:
            if indices_field in names:
                missing = values_field
            elif values_field in names:
                missing = indices_field
            else:
                missing = next(f for f in self.fields if f not in names)
            raise InputError(
                self.path,
                f"no column {missing!r}",
                f"set --text-field for text, --option indices_field/values_field for indexed features, or "
                f"--option feature_fields=A,B,... for numeric feature columns; the columns are {present}",
            )
        self.row_groups = row_groups
        self.label_column = labels_field or label_field
        self.numeric_targets = numeric_targets
        self.multilabel = False
        if self.label_column is not None:
            self._label_column(schema, self.label_column, from_labels_field=bool(labels_field))
        self.id_field = id_field
        if id_field is not None:
            if id_field not in names:
                raise InputError(
                    self.path, f"no column {id_field!r}", f"{set_option('--id-field')}; the columns are {present}"
                )
            self._check_type(schema, id_field, _is_label, "strings or integers", "--id-field")
            if id_field not in self.columns:
                self.columns.append(id_field)
        self.n_read = 0

    def _label_column(self, schema: pa.Schema, column: str, from_labels_field: bool) -> None:
        """Check the label column (`column`, named by labels_field when `from_labels_field`, else by
        label_field) and add it to the columns read."""
        names = schema.names
        option = "--option labels_field" if from_labels_field else "--label-field"
        if column not in names:
            present = ", ".join(map(repr, names))
            raise InputError(self.path, f"no column {column!r}", f"set {option}; the columns are {present}")
        self.multilabel = _is_list(schema.field(column).type)
        if from_labels_field:
            self._check_type(schema, column, _is_label_list, "a list of strings or integers", option)
        elif self.numeric_targets:
            self._check_type(schema, column, _is_target_or_list, "numbers, or lists of them", option)
        else:
            found = schema.field(column).type
            if not _is_label_or_list(found) and _is_target_or_list(found):
                raise InputError(
                    self.path,
                    f"column {column!r} holds {found}: real numbers, not class names",
                    "for a real-valued target (regression) pass --target numeric; class ids saved as reals "
                    "(1.0, 2.0): cast the column to integers or strings",
                )
            self._check_type(schema, column, _is_label_or_list, "strings or integers, or lists of them", option)
        self.columns.append(column)

    def _open(self) -> pq.ParquetFile:
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            if is_url(self.path):  # through pyarrow's filesystem layer over fsspec's
                location = resolve(self.path)
                return pq.ParquetFile(location.path, filesystem=location.arrow_filesystem())
            return pq.ParquetFile(self.path)
        except (pa.ArrowException, OSError) as e:
            raise InputError(self.path, f"not a readable Parquet file ({e})") from None

    def _check_type(self, schema: pa.Schema, column: str, ok, expected: str, option: str) -> None:
        found = schema.field(column).type
        if not ok(found):
            raise InputError(self.path, f"column {column!r} holds {found}, not {expected}", f"check {option}")

    def __iter__(self):
        import pyarrow as pa

        self.n_read = 0
        self._n_cols = 0
        with self._open() as f:
            for g in range(*self.row_groups) if self.row_groups else range(f.num_row_groups):
                row = 0
                stored = [c for c in self.columns if c not in self.partition]
                batches = f.iter_batches(batch_size=self.batch_size, row_groups=[g], columns=stored)
                while True:
                    try:
                        batch = next(batches, None)
                    except (pa.ArrowException, OSError) as e:
                        raise InputError(f"{self.path}:row group {g}", f"cannot read the data ({e})") from None
                    if batch is None:
                        break
                    batch = _flatten(batch)
                    for key in (c for c in self.columns if c in self.partition):
                        batch = batch.append_column(key, pa.array([self.partition[key]] * batch.num_rows, pa.string()))
                    locations = [f"{self.path}:row group {g}, row {row + r}" for r in range(batch.num_rows)]
                    row += batch.num_rows
                    self.n_read += batch.num_rows
                    if self.kind == "text":
                        out = self._text(batch, locations)
                    else:
                        out = (
                            self._sparse(batch, locations) if self.features is None else self._columns(batch, locations)
                        )
                    if out is not None:
                        yield out

    def _labels(self, batch: pa.RecordBatch, problems: dict[int, str]) -> list:
        """Labels of a batch as str or list[str] (None without a label column); null or empty
        ones go to problems."""
        if self.label_column is None:
            return [None] * batch.num_rows
        labels = _strings(batch.column(self.label_column), self.label_column, problems)
        for r, label in enumerate(labels):
            if label is None:
                problems.setdefault(r, f"null label in {self.label_column!r}")
            elif self.multilabel:
                if any(x is None for x in label):
                    problems.setdefault(r, f"null in the label list in {self.label_column!r}")
                else:
                    labels[r] = [_text(x) for x in label]
            else:
                labels[r] = _text(label)
                if not labels[r]:
                    problems.setdefault(r, f"empty label in {self.label_column!r}")
        return labels

    def _ids(self, batch: pa.RecordBatch, problems: dict[int, str]) -> list | None:
        """The records' ids as str (None without id_field); a null or empty one goes to problems."""
        if self.id_field is None:
            return None
        ids = _strings(batch.column(self.id_field), self.id_field, problems)
        for r, value in enumerate(ids):
            if value is None:
                problems.setdefault(r, f"null id in {self.id_field!r}")
            elif not str(value).strip():
                problems.setdefault(r, f"empty id in {self.id_field!r}")
            else:
                ids[r] = str(value)
        return ids

    def _report(self, batch: pa.RecordBatch, locations: list[str], problems: dict[int, str]) -> None:
        for r in sorted(problems):
            self.policy.bad(locations[r], problems[r], _raw(batch, r))

    def _text(self, batch: pa.RecordBatch, locations: list[str]):
        problems: dict[int, str] = {}
        texts = {f: _strings(batch.column(f), f, problems) for f in self.fields}
        for field in self.fields:
            for r, text in enumerate(texts[field]):
                if text is None:
                    problems.setdefault(r, f"null text in {field!r}")
                elif isinstance(text, list) and None in text:
                    problems.setdefault(r, f"null token in {field!r}")
        labels = self._labels(batch, problems)
        ids = self._ids(batch, problems)
        self._report(batch, locations, problems)
        batcher = TextBatcher(self.fields, with_ids=ids is not None)
        for r in range(batch.num_rows):
            if r not in problems:
                batcher.add(
                    [texts[f][r] for f in self.fields], labels[r], locations[r], None if ids is None else ids[r]
                )
        return batcher.take() if len(batcher) else None

    def _columns(self, batch: pa.RecordBatch, locations: list[str]):
        """The feature columns of a batch as a SparseBatch: column j of feature_fields is feature
        j (zeros left out); a null, NaN or infinite cell (or one beyond float32) is a bad record."""
        import pyarrow as pa
        import scipy.sparse as sp

        problems: dict[int, str] = {}
        labels = self._labels(batch, problems)
        ids = self._ids(batch, problems)
        assert self.features is not None
        X = np.zeros((batch.num_rows, len(self.features)))
        for j, name in enumerate(self.features):
            column = batch.column(name)
            null = column.is_null().to_numpy(zero_copy_only=False)
            X[:, j] = column.cast(pa.float64(), safe=False).fill_null(0.0).to_numpy(zero_copy_only=False)
            for r in np.flatnonzero(null).tolist():
                problems.setdefault(r, f"null in column {name!r}")
            for r in np.flatnonzero(~null & ~fits_float32(X[:, j])).tolist():
                problems.setdefault(
                    r, f"column {name!r} holds {float(X[r, j])!r}: NaN, infinite or beyond float32's ±3.4e38 (scale it)"
                )
        self._report(batch, locations, problems)
        kept = [r for r in range(batch.num_rows) if r not in problems]
        if not kept:
            return None
        rows = sp.csr_matrix(X[kept])
        rows.sort_indices()
        X_kept = csr_int64(rows.data, rows.indices.astype(np.int64), rows.indptr.astype(np.int64), len(self.features))
        return SparseBatch(
            X_kept,
            [labels[r] for r in kept],
            [locations[r] for r in kept],
            None if ids is None else [ids[r] for r in kept],
        )

    def _sparse(self, batch: pa.RecordBatch, locations: list[str]):
        import pyarrow as pa
        import pyarrow.compute as pc

        n = batch.num_rows
        problems: dict[int, str] = {}
        labels = self._labels(batch, problems)
        ids = self._ids(batch, problems)

        def mark(rows: np.ndarray, problem: str) -> None:
            for r in np.flatnonzero(rows).tolist():
                problems.setdefault(r, problem)

        ind = batch.column(self.indices_field)
        val = batch.column(self.values_field)
        mark(ind.is_null().to_numpy(zero_copy_only=False), f"null {self.indices_field!r}")
        mark(val.is_null().to_numpy(zero_copy_only=False), f"null {self.values_field!r}")
        ind_len = pc.list_value_length(ind).fill_null(0).to_numpy()
        val_len = pc.list_value_length(val).fill_null(0).to_numpy()
        mark(ind_len != val_len, f"{self.indices_field!r} and {self.values_field!r} differ in length")
        flat_ind, flat_val = ind.flatten(), val.flatten()
        ind_rows = np.repeat(np.arange(n), ind_len)
        val_rows = np.repeat(np.arange(n), val_len)
        indices = flat_ind.fill_null(0).to_numpy().astype(np.int64)
        values = flat_val.cast(pa.float64(), safe=False).fill_null(0.0).to_numpy()
        bad_index = flat_ind.is_null().to_numpy(zero_copy_only=False) | (indices < 0) | (indices > MAX_INDEX)
        bad_value = flat_val.is_null().to_numpy(zero_copy_only=False) | ~fits_float32(values)
        mark(np.bincount(ind_rows[bad_index], minlength=n), f"null or out-of-range index in {self.indices_field!r}")
        mark(
            np.bincount(val_rows[bad_value], minlength=n),
            f"null, NaN or infinite value in {self.values_field!r} (or beyond float32's ±3.4e38: scale the features)",
        )

        keep = np.ones(n, dtype=bool)
        keep[list(problems)] = False
        indices, values, rows = indices[keep[ind_rows]], values[keep[val_rows]], ind_rows[keep[ind_rows]]
        order = np.lexsort((indices, rows))
        indices, values, rows = indices[order], values[order], rows[order]
        repeated = (rows[1:] == rows[:-1]) & (indices[1:] == indices[:-1])
        if repeated.any():
            mark(np.bincount(rows[1:][repeated], minlength=n), f"an index repeats in {self.indices_field!r}")
            keep[list(problems)] = False
            entries = keep[rows]
            indices, values, rows = indices[entries], values[entries], rows[entries]
        self._report(batch, locations, problems)
        if not keep.any():
            return None
        if indices.size:
            self._n_cols = max(self._n_cols, int(indices.max()) + 1)
        indptr = np.concatenate(([0], np.cumsum(np.bincount(rows, minlength=n)[keep])))
        kept = np.flatnonzero(keep).tolist()
        X = csr_int64(values, indices, indptr, self._n_cols)
        return SparseBatch(
            X, [labels[r] for r in kept], [locations[r] for r in kept], None if ids is None else [ids[r] for r in kept]
        )
