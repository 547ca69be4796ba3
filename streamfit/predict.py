"""`streamfit predict`: top-k classes and scores for every row of a store or of raw data."""

from __future__ import annotations

import csv
import json
import os

import numpy as np
from tqdm.auto import tqdm

from streamfit.errors import StreamfitError, output_error
from streamfit.model import Model


def _batches(model: Model, source: str, fmt: str | None, options: dict, progress: bool):
    """(locations, X) per batch: a store's chunks, or raw records featurized like the training store."""
    from streamfit.store import open_store
    from streamfit.store.format import MANIFEST

    if os.path.isdir(source) and os.path.exists(os.path.join(source, MANIFEST)):
        store = open_store(source)
        if store.n_features != model.n_features:
            raise StreamfitError(f"{source}: has {store.n_features} features, the model {model.n_features}; "
                                 "ingest it with --like TRAIN_STORE")
        for c in tqdm(store.iter_chunks(), total=store.n_chunks, unit="chunk", disable=not progress, desc="predict"):
            yield [str(r) for r in range(c.row_start, c.row_start + c.n_rows)], c.X
        return
    from streamfit.ingest.featurize import Featurizer
    from streamfit.ingest.sources import BadRecordPolicy, open_source

    featurizer = Featurizer.from_dict(model.featurizer, idf=model.idf)
    src = open_source(source, fmt, policy=BadRecordPolicy("error"), **options)
    for batch in tqdm(src, unit="batch", disable=not progress, desc="predict"):
        yield batch.locations, featurizer.transform(batch)


def predict_to_file(model: Model, source: str, out: str, *, top_k: int = 1, fmt: str | None = None,
                    options: dict | None = None, progress: bool = False) -> int:
    """Write one line per row (`.csv`: location, label_1, score_1, …; `.jsonl`: {"location",
    "labels", "scores"}) atomically to `out`; returns the number of rows."""
    kind = os.path.splitext(out)[1].lower()
    if kind not in (".csv", ".jsonl"):
        raise StreamfitError(f"{out}: the output must end in .csv or .jsonl")
    tmp = f"{out}.partial"
    try:
        n = _write_predictions(model, source, tmp, kind, top_k, fmt, options or {}, progress)
        os.replace(tmp, out)
    except OSError as e:
        _remove(tmp)
        raise output_error(out, e) from e
    except BaseException:  # bad input, interrupted: no partial output is left behind
        _remove(tmp)
        raise
    return n


def _remove(path: str) -> None:
    if os.path.exists(path):
        os.remove(path)


def _write_predictions(model, source, tmp, kind, top_k, fmt, options, progress) -> int:
    n = 0
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f) if kind == ".csv" else None
        if writer:
            writer.writerow(["location"] + [f"{w}_{i + 1}" for i in range(top_k) for w in ("label", "score")])
        for locations, X in _batches(model, source, fmt, options, progress):
            top, scores = model.predict_topk(X, top_k)
            labels = model.classes_[top]
            for loc, labs, sc in zip(locations, labels, scores):
                if writer:
                    writer.writerow([loc] + [v for pair in zip(labs, np.round(sc, 6)) for v in pair])
                else:
                    f.write(json.dumps({"location": loc, "labels": labs.tolist(), "scores": sc.round(6).tolist()}) + "\n")
            n += len(locations)
        f.flush()
        os.fsync(f.fileno())
    return n
