"""`streamfit predict`: top-k classes and scores for every row of a store or of raw data, or, for
a regression model, the predicted values of its outputs."""

from __future__ import annotations

import csv
import json
import logging
import os

import numpy as np
from tqdm.auto import tqdm

from streamfit.errors import InputError, StreamfitError, output_error
from streamfit.model import Model, decide

log = logging.getLogger(__name__)


# predict reads no labels, so unlabeled rows are fine (a LIBSVM line's label list may be empty)
_UNLABELED = {"label_field": None, "labels_field": None, "y_dataset": None, "class_folders": False, "multilabel": True}


def _is_store(path: str) -> bool:
    """A directory written by ingest, complete or not (open_store explains an incomplete one);
    behind a URL, a committed store."""
    from streamfit import storage
    from streamfit.store.format import MANIFEST
    from streamfit.store.parquet_backend import DATA_FILE

    if storage.is_url(path):
        location = storage.resolve(path)
        return location.isdir() and location.join(storage.COMMITTED).exists()
    return os.path.isdir(path) and (
        os.path.abspath(path).endswith(".partial")
        or any(os.path.exists(os.path.join(path, name)) for name in (MANIFEST, "zarr.json", DATA_FILE))
    )


def _check_kind(model: Model, featurizer, source: str, kind: str) -> None:
    """Refuse raw data of another kind (text / numeric features) than the training data."""
    given = "text" if kind == "text" else "numeric"
    trained = model.featurizer.get("input")
    if trained is None and kind == "text" and featurizer.hasher is None:
        trained = "numeric"  # a model saved before the input kind was recorded: unhashed means numeric
    if trained is not None and given != trained:
        raise StreamfitError(
            f"{source}: holds {given} features, but the model was trained on {trained} features; "
            f"score {trained} data (as the training data was), or train a model on {given} data"
        )


def _batches(model: Model, source: str, fmt: str | None, options: dict, progress: bool):
    """(locations, ids, X) per batch: a store's chunks (ids None), or raw records featurized like
    the training store and read with its source options (overridden by `options`); ids: the
    records' id_field values, None without one."""
    from streamfit.store import open_store

    if _is_store(source):
        store = open_store(source)
        if store.n_features != model.n_features:
            raise StreamfitError(
                f"{source}: has {store.n_features} features, the model {model.n_features}; "
                "ingest it with --like TRAIN_STORE"
            )
        for c in tqdm(store.iter_chunks(), total=store.n_chunks, unit="chunk", disable=not progress, desc="predict"):
            yield [str(r) for r in range(c.row_start, c.row_start + c.n_rows)], None, c.X
        return
    from streamfit.ingest.featurize import Featurizer
    from streamfit.ingest.sources import BadRecordPolicy, open_source

    featurizer = Featurizer.from_dict(model.featurizer, idf=model.idf)
    options = {**model.featurizer.get("source_options", {}), **options, **_UNLABELED}
    src = open_source(source, fmt, policy=BadRecordPolicy("error"), **options)
    _check_kind(model, featurizer, source, src.kind)
    for batch in tqdm(src, unit="batch", disable=not progress, desc="predict"):
        yield batch.locations, getattr(batch, "ids", None), featurizer.transform(batch)


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
) -> int:
    """Write one line per row (`.csv`: location, label_1, score_1, …; `.jsonl`: {"location",
    "labels", "scores"}; for a regression model `.csv`: location and one column per output,
    `.jsonl`: {"location", "values": {output: value}}, values in full precision) atomically to
    `out` (a local path or URL, see Location.publish_file); returns the number of rows. With an
    id_field (in `options`, or recorded with the training store's source options) each row also
    carries its record's id: a column `id` after `location`, or the key "id". A multilabel model
    also writes the predicted label set, the labels scored > `threshold` (default: the model's
    decision_threshold; streamfit.model.decide): `.csv` column "predicted" after the location
    (and id), names joined by "|"; `.jsonl` key "predicted", a list. `model_dir`: where
    the model was loaded from, which `out` must not overlap (nor may it overlap `source`)."""
    from streamfit import storage
    from streamfit.store.store import overlaps

    kind = os.path.splitext(out)[1].lower()
    if kind not in (".csv", ".jsonl"):
        raise StreamfitError(f"{out}: the output must end in .csv or .jsonl")
    for what, path in [("input", source)] + ([("model", model_dir)] if model_dir else []):
        if overlaps(out, path) or overlaps(f"{out}.partial", path):
            raise StreamfitError(
                f"--out {out} overlaps the {what} {path} (the same path, or one inside the other): writing it "
                "would destroy what is read; choose another --out"
            )
    if top_k > len(model.classes_) and not model.regression:
        log.warning(
            "--top-k %d: the model has %d classes; writing %d per row", top_k, len(model.classes_), len(model.classes_)
        )
        top_k = len(model.classes_)
    target = storage.resolve(out)
    tmp = target.staging_file()
    try:
        if threshold is None:
            threshold = model.decision_threshold
        n = _write_predictions(model, source, tmp, kind, top_k, fmt, options or {}, progress, threshold)
        target.publish_file(tmp)
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


def _write_values(f, writer, model: Model, locations, ids, X) -> None:
    """A regression model's predicted values of rows X, one line per row (with the record's id
    after its location when `ids` is given)."""
    values = model.decision_function(X)
    names = model.classes_.tolist()
    for r, (loc, row) in enumerate(zip(locations, values.tolist())):
        record_id = [ids[r]] if ids is not None else []
        if writer:
            writer.writerow([loc, *record_id, *row])
        else:
            line = {"location": loc, **({"id": record_id[0]} if record_id else {})}
            f.write(json.dumps({**line, "values": dict(zip(names, row))}) + "\n")


def _write_predictions(model, source, tmp, kind, top_k, fmt, options, progress, threshold) -> int:
    n = 0
    with_ids = not _is_store(source) and {**model.featurizer.get("source_options", {}), **options}.get("id_field")
    with open(tmp, "w", newline="") as f:
        writer = csv.writer(f) if kind == ".csv" else None
        head = ["location"] + (["id"] if with_ids else [])
        if writer and model.regression:
            writer.writerow(head + model.classes_.tolist())
        elif writer:
            label_set_column = ["predicted"] if model.multilabel else []
            writer.writerow(
                head + label_set_column + [f"{w}_{i + 1}" for i in range(top_k) for w in ("label", "score")]
            )
        for locations, ids, X in _batches(model, source, fmt, options, progress):
            if with_ids and ids is None:
                raise StreamfitError(
                    f"{source}: --id-field {with_ids}: this format reads no ids (CSV, TSV and JSONL do); "
                    "drop --id-field"
                )
            if model.regression:
                _write_values(f, writer, model, locations, ids if with_ids else None, X)
                n += len(locations)
                continue
            S = model.decision_function(X)
            top, scores = model.top_k(S, top_k)
            labels = model.classes_[top]
            on = decide(S, threshold) if model.multilabel else None
            for r, (loc, labs, sc) in enumerate(zip(locations, labels, scores)):
                record_id = [ids[r]] if with_ids else []
                label_set: dict[str, list[str]] = (
                    {"predicted": model.classes_[on[r]].tolist()} if on is not None else {}
                )
                if writer:
                    row = [loc, *record_id] + ["|".join(names) for names in label_set.values()]
                    writer.writerow(row + [v for pair in zip(labs, np.round(sc, 6)) for v in pair])
                else:
                    line = {"location": loc, **({"id": record_id[0]} if record_id else {}), **label_set}
                    line.update(labels=labs.tolist(), scores=sc.round(6).tolist())
                    f.write(json.dumps(line) + "\n")
            n += len(locations)
        if n == 0:
            raise InputError(source, "no records found: the input is empty", "give it data to score")
        f.flush()
        os.fsync(f.fileno())
    return n
