"""The class vocabulary: label strings -> class ids, fixed once a store exists."""

from __future__ import annotations

import math

import numpy as np
import scipy.sparse as sp

OPEN_WIDTH = 1 << 30  # column count of multilabel indicators while the vocabulary may still grow


class LabelVocabulary:
    """Maps labels to class ids in order of first appearance, or to a fixed, declared list
    (`frozen=True`: test data ingested like a training store, or `--classes`)."""

    def __init__(self, classes: list[str] | None = None, frozen: bool = False):
        self.classes: list[str] = [str(c) for c in (classes or [])]
        self.index = {c: i for i, c in enumerate(self.classes)}
        if len(self.index) != len(self.classes):
            raise ValueError("the declared classes contain duplicates")
        self.frozen = frozen
        self.met: set[int] = set()  # the ids of the labels given to add or encode (a class with rows, as a rule)

    def _id(self, label: str) -> int | None:
        i = self.index.get(label)
        if i is None and not self.frozen:
            i = self.index[label] = len(self.classes)
            self.classes.append(label)
        if i is not None:
            self.met.add(i)
        return i

    def add(self, labels: list[str]) -> np.ndarray:
        """The ids of `labels` (int64), each label not yet known appended in the order given
        (a frozen vocabulary: -1 for those)."""
        return np.array([-1 if (i := self._id(label)) is None else i for label in labels], dtype=np.int64)

    def encode(self, labels: list, multilabel: bool):
        """(ids, unknown): int32 ids (or a CSR indicator OPEN_WIDTH wide, since classes may
        still be added), and the positions whose label is not in a frozen vocabulary."""
        unknown: list[int] = []
        if not multilabel:
            ids = np.empty(len(labels), dtype=np.int32)
            for r, lab in enumerate(labels):
                i = self._id(str(lab))
                if i is None:
                    unknown.append(r)
                    i = -1
                ids[r] = i
            return ids, unknown
        indptr = [0]
        indices: list[int] = []
        for r, labs in enumerate(labels):
            row = set()
            for lab in labs:
                i = self._id(str(lab))
                if i is None:
                    unknown.append(r)
                    break
                row.add(i)
            indices.extend(sorted(row))
            indptr.append(len(indices))
        Y = sp.csr_matrix(
            (np.ones(len(indices), dtype=np.float32), np.asarray(indices, dtype=np.int32), np.asarray(indptr)),
            shape=(len(labels), OPEN_WIDTH),
        )
        return Y, unknown


def near_duplicates(classes: list[str]) -> list[list[str]]:
    """The groups of class names that differ only in white space or letter case ('pos' and
    'pos ', 'Sports' and 'sports') or are one number written two ways ('1' and '1.0', '2' and
    '2e0'), in order of first appearance: usually one label written two ways (a space after a
    CSV delimiter, a hand-edited file, a column of integers saved as floats in part of the
    data), which a classifier then splits."""
    groups: dict[str, list[str]] = {}
    for name in classes:
        groups.setdefault(_spelling_key(name), []).append(name)
    return [names for names in groups.values() if len(names) > 1]


def class_values(classes: list[str]) -> np.ndarray | None:
    """The classes' names as float64 numbers, or None if a name is not a finite number."""
    try:
        values = np.array([float(name) for name in classes], dtype=np.float64)
    except ValueError:
        return None
    return values if bool(np.all(np.isfinite(values))) else None


def _spelling_key(name: str) -> str:
    """What near_duplicates compares: a finite number's value, else the name without letter case
    and with its white space runs as one space."""
    try:
        value = float(name)
    except ValueError:
        value = math.nan
    return repr(value) if math.isfinite(value) else " ".join(name.split()).casefold()
