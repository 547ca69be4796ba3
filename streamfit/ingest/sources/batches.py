"""The batches that sources yield, and the Source protocol."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import scipy.sparse as sp


@dataclass
class TextBatch:
    """Raw text records: field name -> texts, one label and one location per record, and the
    record's id (the id_field's value) when the source reads one."""

    texts: dict[str, list[str]]
    labels: list
    locations: list[str]
    ids: list[str] | None = None


@dataclass
class SparseBatch:
    """Numeric-indexed records. X is CSR with float64 values and int64 0-based column indices,
    sorted and without duplicates within a row; explicit zeros in the input are kept; the
    record's id (the id_field's value) when the source reads one; index_base: the index the
    input writes for column 0 (1 in a 1-based LIBSVM file), so that a message names an index as
    the file writes it (`beyond_width`)."""

    X: sp.csr_matrix
    labels: list
    locations: list[str]
    ids: list[str] | None = None
    index_base: int = 0


def beyond_width(batch, column: int, width: int) -> str:
    """The problem of a row whose column `column` (counted from 0) is beyond `width` columns, with
    the index as the batch's file writes it: 'feature index 65 is beyond the 64 features (indices
    1–64)' for a 1-based LIBSVM file."""
    base = getattr(batch, "index_base", 0)
    return f"feature index {column + base} is beyond the {width} features (indices {base}–{width - 1 + base})"


@dataclass
class DenseBatch:
    """Dense numeric records: X is float64 of shape (n, d)."""

    X: np.ndarray
    labels: list
    locations: list[str]


class Source(Protocol):
    """A streaming reader. Iterating (again) reads the input from the start; each batch holds at
    most batch_size records. Labels are str, or list[str] when the source is multilabel."""

    kind: str  # "text" | "sparse" | "dense"
    multilabel: bool | None  # None until the data has decided it
    n_read: int  # records read so far in the current pass, good and bad

    def __iter__(self) -> Iterator[TextBatch | SparseBatch | DenseBatch]: ...
