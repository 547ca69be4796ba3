"""Parquet backend: the row chunks as a Parquet dataset directory `chunks/`, one file
`part-<id:06d>.parquet` per chunk (one row group), list columns for the sparse rows (see
format.py), written apart from each other, so a Dask worker can write its chunks straight to
the store; read and written through pyarrow's filesystem layer (fsspec's through FSSpecHandler
for URLs)."""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import scipy.sparse as sp

from streamfit.storage import Location
from streamfit.store.format import CHUNKS_DIR, DataMismatch, chunk_name, manifest_copy_difference

COMMON_METADATA = "_common_metadata"  # in chunks/: the schema and the manifest copy (Parquet's dataset convention)


def chunk_file(root: Location, cid: int) -> Location:
    return root.join(CHUNKS_DIR, f"part-{chunk_name(cid)}.parquet")


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


def schema(multilabel: bool, n_outputs: int | None) -> pa.Schema:
    label = _label_field(multilabel, n_outputs)
    return pa.schema([pa.field("indices", pa.list_(pa.int32())), pa.field("values", pa.list_(pa.float32())), label])


def write_chunk(root: Location, cid: int, X: sp.csr_matrix, labels) -> None:
    """Chunk `cid` of the store whose files are at `root` (its attempt) as chunks/part-<cid:06d>.parquet,
    one row group. X and labels come canonical (store.canonical_chunk)."""
    multilabel = sp.issparse(labels)
    n_outputs = labels.shape[1] if not multilabel and labels.ndim == 2 else None
    indptr = np.asarray(X.indptr, dtype=np.int64)
    columns = [
        _list_array(indptr, np.asarray(X.indices, np.int32)),
        _list_array(indptr, np.asarray(X.data, np.float32)),
    ]
    if n_outputs is not None:
        columns.append(pa.FixedSizeListArray.from_arrays(pa.array(np.ascontiguousarray(labels).ravel()), n_outputs))
    elif multilabel:
        columns.append(_list_array(np.asarray(labels.indptr, dtype=np.int64), np.asarray(labels.indices, np.int32)))
    else:
        columns.append(pa.array(labels))
    table = pa.Table.from_arrays(columns, schema=schema(multilabel, n_outputs))
    location = chunk_file(root, cid)
    root.join(CHUNKS_DIR).makedirs()
    pq.write_table(
        table,
        location.path,
        row_group_size=max(X.shape[0], 1),
        compression="zstd",
        write_statistics=False,
        filesystem=root.arrow_filesystem(),
    )


def close(root: Location, manifest_json: str, multilabel: bool, n_outputs: int | None) -> None:
    """chunks/_common_metadata: the chunks' schema with the manifest copy in its key-value metadata."""
    root.join(CHUNKS_DIR).makedirs()
    pq.write_metadata(
        schema(multilabel, n_outputs).with_metadata({"streamfit.manifest": manifest_json}),
        root.join(CHUNKS_DIR, COMMON_METADATA).path,
        filesystem=root.arrow_filesystem(),
    )


class ParquetReader:
    def __init__(self, root: Location, multilabel: bool, n_classes: int, regression: bool = False):
        self.root = root
        self.multilabel, self.regression = multilabel, regression
        self.n_classes = n_classes
        try:
            self.common = pq.read_schema(
                root.join(CHUNKS_DIR, COMMON_METADATA).path, filesystem=root.arrow_filesystem()
            )
        except (OSError, pa.ArrowException) as e:  # named: the message of a damaged file names none
            raise ValueError(f"{CHUNKS_DIR}/{COMMON_METADATA}: {e}") from e

    def _expected(self, n_outputs: int) -> list:
        return [(f.name, f.type) for f in schema(self.multilabel, n_outputs if self.regression else None)]

    def check(self, manifest) -> None:
        """DataMismatch unless chunks/_common_metadata has the writer's schema and a manifest copy
        equal to `manifest` (a Manifest) in every field but `csc` (added later by transpose)
        and the digest (each chunk's file is checked when it is read)."""
        got = [(f.name, f.type) for f in self.common]
        expected = self._expected(len(manifest.classes))
        if got != expected:
            raise DataMismatch(f"{CHUNKS_DIR}/{COMMON_METADATA} has columns {got}, expected {expected}")
        copy = json.loads((self.common.metadata or {}).get(b"streamfit.manifest", b"{}"))
        differs = manifest_copy_difference(copy, manifest)
        if differs:
            raise DataMismatch(f"the manifest copy in {CHUNKS_DIR}/{COMMON_METADATA} has another {differs}")

    def read(self, cid: int, n_rows: int, nnz: int, n_features: int, n_outputs: int):
        """Chunk cid of n_rows rows: (X, labels). DataMismatch when its file's schema or row
        groups disagree with the manifest."""
        location = chunk_file(self.root, cid)
        name = f"{CHUNKS_DIR}/{location.name}"
        try:
            file = pq.ParquetFile(location.path, filesystem=self.root.arrow_filesystem())
        except FileNotFoundError as e:
            raise FileNotFoundError(f"{name} is missing") from e
        except (OSError, pa.ArrowException) as e:  # named: the message of a damaged footer names no file
            raise ValueError(f"{name}: {e}") from e
        got = [(f.name, f.type) for f in file.schema_arrow]
        if got != self._expected(n_outputs):
            raise DataMismatch(f"{name} has columns {got}, expected {self._expected(n_outputs)}")
        meta = file.metadata
        if meta.num_row_groups != 1 or meta.num_rows != n_rows:
            raise DataMismatch(
                f"{name} holds {meta.num_rows} rows in {meta.num_row_groups} row groups, expected {n_rows} in 1"
            )
        table = file.read_row_group(0)
        indptr, indices = _csr_from_list(table.column("indices"))
        _, values = _csr_from_list(table.column("values"))
        X = sp.csr_matrix((values, indices, indptr), shape=(n_rows, n_features))
        if self.regression:
            column = table.column("target").combine_chunks()
            labels = np.asarray(column.flatten(), dtype=np.float64).reshape(n_rows, n_outputs)
        elif self.multilabel:
            lp, ids = _csr_from_list(table.column("labels"))
            labels = sp.csr_matrix((np.ones(len(ids), dtype=np.float32), ids, lp), shape=(n_rows, self.n_classes))
        else:
            labels = np.asarray(table.column("label"), dtype=np.int32)
        return X, labels
