"""Parquet backend: one row group per row chunk, list columns for the sparse rows (see format.py),
read and written through pyarrow's filesystem layer (fsspec's through FSSpecHandler for URLs)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from streamfit.storage import Location
from streamfit.store.format import manifest_copy_difference

DATA_FILE = "X.parquet"


def _list_array(indptr: np.ndarray, values: np.ndarray) -> pa.ListArray:
    offsets = pa.array(np.asarray(indptr - indptr[0], dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(values))


def _csr_from_list(column: pa.ChunkedArray | pa.ListArray):
    """(offsets, flat values) of a list column, honouring slice offsets."""
    arr = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    offsets = np.asarray(arr.offsets, dtype=np.int64)
    flat = np.asarray(arr.flatten())
    return offsets - offsets[0], flat


def _label_field(multilabel: bool, n_outputs: int | None) -> pa.Field:
    """The label column: class ids, lists of class ids, or k float64 targets per row (regression)."""
    if n_outputs is not None:
        return pa.field("target", pa.list_(pa.float64(), n_outputs))
    return pa.field("labels", pa.list_(pa.int32())) if multilabel else pa.field("label", pa.int32())


class ParquetWriter:
    def __init__(self, root: Location, multilabel: bool, chunk_rows: int, n_outputs: int | None = None):
        """n_outputs: the width k of float64 regression targets (None: class labels)."""
        self.multilabel, self.n_outputs = multilabel, n_outputs
        label_field = _label_field(multilabel, n_outputs)
        self.schema = pa.schema(
            [pa.field("indices", pa.list_(pa.int32())), pa.field("values", pa.list_(pa.float32())), label_field]
        )
        self.path = root.join(DATA_FILE).path
        self.writer = pq.ParquetWriter(
            self.path, self.schema, compression="zstd", write_statistics=False, filesystem=root.arrow_filesystem()
        )

    def append(self, X: sp.csr_matrix, labels) -> None:
        indptr = np.asarray(X.indptr, dtype=np.int64)
        columns = [
            _list_array(indptr, np.asarray(X.indices, dtype=np.int32)),
            _list_array(indptr, np.asarray(X.data, dtype=np.float32)),
        ]
        if self.n_outputs is not None:
            flat = pa.array(np.ascontiguousarray(labels, dtype=np.float64).ravel())
            columns.append(pa.FixedSizeListArray.from_arrays(flat, self.n_outputs))
        elif self.multilabel:
            columns.append(
                _list_array(np.asarray(labels.indptr, dtype=np.int64), np.asarray(labels.indices, dtype=np.int32))
            )
        else:
            columns.append(pa.array(np.asarray(labels, dtype=np.int32)))
        table = pa.Table.from_arrays(columns, schema=self.schema)
        self.writer.write_table(table, row_group_size=max(X.shape[0], 1))

    def close(self, n_features: int, manifest_json: str | None = None) -> None:
        if manifest_json is not None:
            self.writer.add_key_value_metadata({"streamfit.manifest": manifest_json})
        self.writer.close()


class ParquetReader:
    def __init__(self, root: Location, multilabel: bool, n_classes: int, regression: bool = False):
        self.file = pq.ParquetFile(root.join(DATA_FILE).path, filesystem=root.arrow_filesystem())
        self.multilabel, self.regression = multilabel, regression
        self.n_classes = n_classes

    def check(self, manifest) -> None:
        """ValueError unless the file has the writer's schema, one row group per manifest chunk
        of that chunk's rows, and a manifest copy equal to `manifest` (a Manifest) in every
        field but `csc` (added later by transpose) and the digest."""
        label = _label_field(self.multilabel, len(manifest.classes) if self.regression else None)
        expected = [("indices", pa.list_(pa.int32())), ("values", pa.list_(pa.float32()))]
        expected.append((label.name, label.type))
        schema = self.file.schema_arrow
        got = [(f.name, f.type) for f in schema]
        if got != expected:
            raise ValueError(f"{DATA_FILE} has columns {got}, expected {expected}")
        meta = self.file.metadata
        if meta.num_row_groups != len(manifest.chunks):
            raise ValueError(
                f"{DATA_FILE} has {meta.num_row_groups} row groups, the manifest {len(manifest.chunks)} chunks"
            )
        for i, chunk in enumerate(manifest.chunks):
            rows = meta.row_group(i).num_rows
            if rows != chunk.row_stop - chunk.row_start:
                raise ValueError(
                    f"{DATA_FILE} row group {i} holds {rows} rows, chunks[{i}] {chunk.row_stop - chunk.row_start}"
                )
        differs = manifest_copy_difference(
            json.loads((meta.metadata or {}).get(b"streamfit.manifest", b"{}")), manifest
        )
        if differs:
            raise ValueError(f"the manifest copy in {DATA_FILE} has another {differs}")

    def read_group(self, group: int, n_rows: int, n_features: int):
        table = self.file.read_row_group(group)
        indptr, indices = _csr_from_list(table.column("indices"))
        _, values = _csr_from_list(table.column("values"))
        X = sp.csr_matrix((values, indices, indptr), shape=(n_rows, n_features))
        if self.regression:
            column = table.column("target").combine_chunks()
            labels = np.asarray(column.flatten(), dtype=np.float64).reshape(n_rows, self.n_classes)
        elif self.multilabel:
            lp, ids = _csr_from_list(table.column("labels"))
            labels = sp.csr_matrix((np.ones(len(ids), dtype=np.float32), ids, lp), shape=(n_rows, self.n_classes))
        else:
            labels = np.asarray(table.column("label"), dtype=np.int32)
        return X, labels
