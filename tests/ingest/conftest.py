"""Fixtures for the source reader tests."""

import json
import os

import numpy as np
import pytest
import scipy.sparse as sp

from streamfit.ingest.sources import BadRecordPolicy

DATA = os.path.join(os.path.dirname(__file__), os.pardir, "data", "sources")


@pytest.fixture
def data_dir():
    """tests/data/sources."""
    return os.path.abspath(DATA)


class Reader:
    """Reads a source fully and checks the invariants every source keeps."""

    @staticmethod
    def batches(source, batch_size=None):
        batches = list(source)
        for b in batches:
            n = len(b.labels)
            assert n == len(b.locations) > 0
            if batch_size is not None:
                assert n <= batch_size
            if hasattr(b, "texts"):
                assert all(len(texts) == n for texts in b.texts.values())
            else:
                assert b.X.shape[0] == n and b.X.dtype == np.float64
            if sp.issparse(getattr(b, "X", None)):
                assert b.X.indices.dtype == np.int64 and b.X.indptr.dtype == np.int64
                assert b.X.has_canonical_format
        return batches

    @staticmethod
    def sparse(batches, n_cols=None):
        """The batches' rows stacked, all padded to n_cols (default: the widest batch)."""
        width = max([b.X.shape[1] for b in batches] + [n_cols or 0])
        rows = [sp.csr_matrix((b.X.data, b.X.indices, b.X.indptr), shape=(b.X.shape[0], width)) for b in batches]
        return sp.vstack(rows, format="csr") if rows else sp.csr_matrix((0, width))

    @staticmethod
    def labels(batches):
        return [label for b in batches for label in b.labels]

    @staticmethod
    def locations(batches):
        return [loc for b in batches for loc in b.locations]

    @staticmethod
    def texts(batches, field="text"):
        return [t for b in batches for t in b.texts[field]]


@pytest.fixture
def read():
    return Reader()


@pytest.fixture
def quarantine(tmp_path):
    """A quarantine-mode policy; .entries() reads back its side file."""
    path = tmp_path / "quarantine.jsonl"
    policy = BadRecordPolicy("quarantine", str(path))

    def entries():
        policy.close()
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines()]

    policy.entries = entries
    yield policy
    policy.close()


@pytest.fixture
def bar_updates(monkeypatch):
    """What ingest's bar is given on a terminal (progress_mode "bar"), in order: ("begin", name,
    unit) for each bar begun and ("count", done, planned) for each count, planned None while
    unknown; the bar itself still runs."""
    from streamfit import runlog
    from streamfit.ingest import pipeline

    shown: list[tuple] = []
    begin, count = runlog.RunProgress.begin, runlog.RunProgress.count

    def recorded_begin(self, name, step, planned, *, unit="step"):
        shown.append(("begin", name, unit))
        begin(self, name, step, planned, unit=unit)

    def recorded_count(self, done, planned, *, final=False):
        shown.append(("count", done, planned))
        count(self, done, planned, final=final)

    for module in (runlog, pipeline):
        monkeypatch.setattr(module, "progress_mode", lambda: "bar")
    monkeypatch.setattr(runlog.RunProgress, "begin", recorded_begin)
    monkeypatch.setattr(runlog.RunProgress, "count", recorded_count)
    return shown
