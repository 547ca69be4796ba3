"""Every solver with its default parameters on data it was not tuned for, beside scikit-learn's
one-vs-rest LinearSVC (defaults: C = 1, squared hinge, intercept) in the same run.

Data sets (from ../shared/data, see its README), each ingested by `streamfit ingest` as a user
would (test stores `--like` the training store):
- news20: 20 Newsgroups bydate, raw text from the tarball, `--value log1p --idf --l2-normalize`
  hashed to 2^18 columns (the README's recipe); accuracy on the bydate test split;
- news20-10: the same recipe on the first 10 newsgroups (sorted; 5650 training and 3761 test
  documents, the R8-sized subset of tools/bench_small_jobs.py), ingested from folders;
- sector: LIBSVM sector.scale (tf-idf, unit rows, 105 classes) with its test file;
- bibtex, delicious: multilabel LIBSVM (159, 983 labels); P@1 and micro-F1 of the predicted
  label sets (each model's own decision rule, as `streamfit evaluate` applies it), and labels
  per document;
- bibtex-N, delicious-N (N a number, e.g. bibtex-1001): the first N training rows and
  round(0.6·N) test rows of the Mulan ARFF files, ingested with the defaults (hashed to 2^18
  columns; `--option n_labels=L`), as a new user would (issue 20's small multilabel slices);
  test rows with a label that no training row of the slice has are skipped;
- news20-half: 10 of the 20 newsgroups (every other one by name, half_of_news20) as news20;
- dna, letter, satimage, pendigits: LIBSVM dna.scale, letter.scale, satimage.scale (dense, 180, 16
  and 36 features) and pendigits (16 features, raw values 0..100) with their test files;
- news20-3k: a seeded stratified 30 % of news20's training rows (3393 documents, 20 classes: the
  size of the issue's OHSUMED-23, 3357 documents, 23 classes), news20's test store;
- sector-23: sector's rows of 23 of its 105 classes (class k·105 // 23, k = 0 … 22; 1455
  training and 736 test rows), train and test;
- news20-5, news20-8, sector-10, sector-50: the same cut of 5 or 8 of news20's 20 classes
  (k·20 // 5: alt.atheism, comp.sys.mac.hardware, rec.motorcycles, sci.electronics,
  soc.religion.christian, 2793 training documents; k·20 // 8, the size of R8) and of 10 or 50 of
  sector's 105, train and test (session 13's checks of ppdsparse's lam scale).
The last six are written from the full sets' stores (subset_store).
Every solver trains in process (`n_workers=0`, as the estimators) from the store; LinearSVC on
the same rows as scipy arrays (OneVsRestClassifier for multilabel). Per solver: the metric, its
difference to LinearSVC's in points, the model's non-zero weights (coef and intercept) and
their ratio to LinearSVC's (dense one-vs-rest model: LinearSVC stores every weight), the
training wall seconds and their ratio to LinearSVC's, and whether the solver says it converged.
fbpd is multiclass only. `--time-limit` stops a solver at its first checkpoint after that many
seconds (reported as "> LIMIT"; the time limit of `streamfit train`). `-p KEY=VALUE` (as
`streamfit train -p`, repeatable) overrides a default in every solver's run, e.g.
`--solvers ppdsparse -p lam=none -p lam_ratio=0.01` (the ℓ1 weight relative to each class's λmax).

    python tools/bench_defaults.py [--sets news20,news20-10,sector,bibtex,...] [--solvers stagewise,bcd,ppdsparse,fbpd]
        [--data ../shared/data] [--work DIR] [--time-limit 900] [-p KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_DATA = os.path.join(HERE, "..", "..", "shared", "data")
ARFF_LABELS = {"bibtex": 159, "delicious": 983}  # Mulan's label attributes, the last L


def streamfit(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "streamfit.cli", "-q", *args], check=True)


def ingest(name: str, data: str, work: str) -> tuple[str, str]:
    """(train store, test store) of a data set, ingested once into `work`."""
    train, test = os.path.join(work, f"{name}.zarr"), os.path.join(work, f"{name}-test.zarr")
    if os.path.exists(test):
        return train, test
    if name == "news20":
        tar = os.path.join(data, "20newsgroups", "20news-bydate.tar.gz")
        text = ["--encoding", "latin-1", "--value", "log1p", "--idf", "--l2-normalize"]
        streamfit("ingest", tar, "--subset", "20news-bydate-train", *text, "--out", train)
        streamfit(
            "ingest", tar, "--subset", "20news-bydate-test", "--encoding", "latin-1", "--like", train, "--out", test
        )
    elif name == "news20-half":
        half = os.path.join(work, "news20-half.tar.gz")
        half_of_news20(os.path.join(data, "20newsgroups", "20news-bydate.tar.gz"), half)
        text = ["--encoding", "latin-1", "--value", "log1p", "--idf", "--l2-normalize"]
        streamfit("ingest", half, "--subset", "20news-bydate-train", *text, "--out", train)
        streamfit(
            "ingest", half, "--subset", "20news-bydate-test", "--encoding", "latin-1", "--like", train, "--out", test
        )
    elif name in ("dna", "letter", "satimage", "pendigits"):
        folder = os.path.join(data, "libsvm", name)
        stem = name if name == "pendigits" else f"{name}.scale"  # pendigits: the raw 0..100 values
        streamfit("ingest", os.path.join(folder, f"{stem}.gz"), "--no-hash", "--out", train)
        streamfit("ingest", os.path.join(folder, f"{stem}.t.gz"), "--like", train, "--out", test)
    elif name == "news20-10":
        from bench_small_jobs import extract_subset

        folders = os.path.join(work, "news20-10-docs")
        if not os.path.exists(os.path.join(folders, "test")):
            extract_subset(os.path.join(data, "20newsgroups", "20news-bydate.tar.gz"), 10, folders)
        text = ["--encoding", "latin-1", "--n-features", str(2**18), "--value", "log1p", "--idf", "--l2-normalize"]
        streamfit("ingest", os.path.join(folders, "train"), *text, "--out", train, "--overwrite")
        streamfit("ingest", os.path.join(folders, "test"), "--encoding", "latin-1", "--like", train, "--out", test)
    elif name == "sector":
        folder = os.path.join(data, "libsvm", "sector")
        streamfit("ingest", os.path.join(folder, "sector.scale.bz2"), "--no-hash", "--out", train)
        streamfit("ingest", os.path.join(folder, "sector.t.scale.bz2"), "--like", train, "--out", test)
    elif name in ("bibtex", "delicious"):
        folder = os.path.join(data, "multilabel", name)
        files = sorted(f for f in os.listdir(folder) if f.endswith(".libsvm.gz"))
        train_file = next(f for f in files if "train" in f)
        test_file = next(f for f in files if "test" in f)
        streamfit("ingest", os.path.join(folder, train_file), "--no-hash", "--format", "libsvm", "--out", train)
        streamfit("ingest", os.path.join(folder, test_file), "--format", "libsvm", "--like", train, "--out", test)
    elif name.split("-")[0] in ARFF_LABELS and name.split("-")[-1].isdigit():
        # bibtex-1001, delicious-3000, ...: the first N training rows and round(0.6·N) test rows
        # of the ARFF files, ingested with the defaults (hashed), as a new user would
        set_name, rows = name.split("-")[0], int(name.split("-")[-1])
        folder = os.path.join(data, "multilabel", set_name)
        labels = ["--option", f"n_labels={ARFF_LABELS[set_name]}"]
        parts = []
        for part, n in (("train", rows), ("test", round(0.6 * rows))):
            parts.append(os.path.join(work, f"{name}-{part}.arff"))
            head_of_arff(os.path.join(folder, f"{set_name}-{part}.arff.gz"), parts[-1], n)
        streamfit("ingest", parts[0], *labels, "--out", train)
        # test rows with a label no training row has (delicious' first rows lack some) are dropped
        streamfit("ingest", parts[1], *labels, "--like", train, "--on-bad-record", "skip", "--out", test)
    elif name == "news20-3k":
        full_train, full_test = ingest("news20", data, work)
        if not os.path.exists(train):
            subset_store(full_train, train, share=0.3)
        return train, full_test
    elif name in ("sector-10", "sector-23", "sector-50", "news20-5", "news20-8"):
        full, total = ("news20", 20) if name.startswith("news20") else ("sector", 105)
        full_train, full_test = ingest(full, data, work)
        count = int(name.split("-")[1])
        keep = [k * total // count for k in range(count)]
        subset_store(full_train, train, classes=keep)
        subset_store(full_test, test, classes=keep)
    else:
        raise SystemExit(
            f"unknown data set {name!r}: news20, news20-10, news20-half, news20-3k, news20-5, news20-8, sector, "
            "sector-10, sector-23, sector-50, bibtex, delicious, bibtex-N, delicious-N, dna, letter, satimage or "
            "pendigits"
        )
    return train, test


def head_of_arff(source: str, out: str, rows: int) -> None:
    """An ARFF file of `source`'s header and its first `rows` data lines."""
    import gzip

    with gzip.open(source, "rt", encoding="utf-8") as src, open(out, "w", encoding="utf-8") as dst:
        data = False
        for line in src:
            if data and line.strip() and not line.startswith("%"):
                if rows == 0:
                    break
                rows -= 1
            dst.write(line)
            data = data or line.strip().lower().startswith("@data")


def subset_store(source: str, out: str, share: float = 1.0, classes: list[int] | None = None) -> None:
    """A multiclass store of some of `source`'s rows: those of `classes` (renumbered in that
    order; all classes if None), then a share of each class's rows (seeded, 7), in store order."""
    from streamfit.store import StoreWriter, open_store

    store = open_store(source)
    X, y = store.to_scipy()
    keep = list(range(store.n_classes)) if classes is None else classes
    new_id = np.full(store.n_classes, -1)
    new_id[keep] = np.arange(len(keep))
    rng = np.random.default_rng(7)
    rows = []
    for k in keep:
        members = np.flatnonzero(y == k)
        rows.append(rng.permutation(members)[: int(round(share * members.size))])
    rows = np.sort(np.concatenate(rows))
    writer = StoreWriter(out, chunk_rows=store.chunk_rows, multilabel=False)
    writer.write_rows(sp.csr_matrix(X[rows], dtype=np.float32), new_id[y[rows]].astype(np.int32))
    writer.close(n_features=store.n_features, classes=[store.classes[k] for k in keep])


def half_of_news20(tar: str, out: str) -> None:
    """A tarball of 10 of the 20 newsgroups (every other one in name order: alt.atheism,
    comp.os.ms-windows.misc, comp.sys.mac.hardware, misc.forsale, rec.motorcycles,
    rec.sport.hockey, sci.electronics, soc.religion.christian, talk.politics.mideast,
    talk.religion.misc), train and test folders: a smaller text set of another shape (R8-like)."""
    import tarfile

    with tarfile.open(tar) as src:
        members = src.getmembers()
        groups = sorted({m.name.split("/")[1] for m in members if m.name.count("/") >= 1 and m.name.split("/")[1]})
        keep = set(groups[::2])
        with tarfile.open(out + ".partial", "w:gz") as dst:
            for m in members:
                parts = m.name.split("/")
                if len(parts) == 1 or parts[1] in keep:
                    dst.addfile(m, src.extractfile(m) if m.isfile() else None)
    os.rename(out + ".partial", out)


def nnz(model) -> int:
    """Non-zero weights of a model: coef and intercept (stagewise: its stages' weights)."""
    coef = getattr(model, "coef_", None)
    if coef is None or getattr(model, "is_linear", True) is False:
        return int(sum(np.count_nonzero(w) for w in model.weights))
    n = coef.nnz if sp.issparse(coef) else np.count_nonzero(coef)
    return int(n + np.count_nonzero(model.intercept_))


def headline(result: dict, multilabel: bool) -> dict:
    if multilabel:
        return {"p@1": result["p@1"], "micro_f1": result["micro_f1"], "labels/doc": result["labels_per_row"]}
    return {"accuracy": result["accuracy"]}


def run_ours(solver: str, train: str, test: str, out: str, time_limit: float, params: dict) -> dict:
    from streamfit.errors import TimeLimitReached
    from streamfit.metrics import evaluate
    from streamfit.model import load_model
    from streamfit.store import open_store
    from streamfit.train import train as fit

    started = time.perf_counter()
    try:
        fit(train, solver, out, params, n_workers=0, progress=False, time_limit=time_limit, overwrite=True)
    except TimeLimitReached:
        return {"seconds": time.perf_counter() - started, "stopped": True}
    seconds = time.perf_counter() - started
    model = load_model(out)
    store = open_store(test)
    result = evaluate(model, store)
    return {
        **headline(result, store.multilabel),
        "nnz": nnz(model),
        "seconds": seconds,
        "converged": model.info.get("converged", True),
    }


def run_linear_svc(train: str, test: str) -> dict:
    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import LinearSVC

    from streamfit.metrics import MetricAccumulator
    from streamfit.store import open_store

    tr, te = open_store(train), open_store(test)
    X, y = tr.to_scipy()
    Xt, yt = te.to_scipy()
    started = time.perf_counter()
    if tr.multilabel:
        clf = OneVsRestClassifier(LinearSVC()).fit(X, y.toarray())
        coef = np.vstack([e.coef_ for e in clf.estimators_])
        intercept = np.concatenate([e.intercept_ for e in clf.estimators_])
    else:
        clf = LinearSVC().fit(X, y)
        coef, intercept = clf.coef_, clf.intercept_
        if len(clf.classes_) != tr.n_classes:  # a class without training rows: scores over all classes
            full = np.full((tr.n_classes, coef.shape[1]), 0.0)
            full[clf.classes_] = coef
            coef, intercept = full, np.full(tr.n_classes, -1e9)
            intercept[clf.classes_] = clf.intercept_
    seconds = time.perf_counter() - started
    acc = MetricAccumulator(tr.n_classes, tr.multilabel)
    acc.update(np.asarray(Xt @ coef.T) + intercept, yt)
    return {
        **headline(acc.result(), tr.multilabel),
        "nnz": int(np.count_nonzero(coef) + np.count_nonzero(intercept)),
        "seconds": seconds,
        "converged": True,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="news20,sector,bibtex")
    ap.add_argument("--solvers", default="stagewise,bcd,ppdsparse,fbpd")
    ap.add_argument("--data", default=DEFAULT_DATA)
    ap.add_argument("--work", default=None, help="where stores and runs go (default: a temporary folder)")
    ap.add_argument("--time-limit", type=float, default=900.0, help="seconds per solver run")
    ap.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="solver parameter")
    args = ap.parse_args()
    from streamfit.cli import _parse_key_values

    params = _parse_key_values(args.param, "-p")
    work = args.work or tempfile.mkdtemp(prefix="bench_defaults_")
    os.makedirs(work, exist_ok=True)
    from streamfit.store import open_store

    for name in args.sets.split(","):
        train, test = ingest(name, args.data, work)
        store = open_store(train)
        print(
            f"\n## {name}: {store.n_rows} training rows, {store.n_features} features, {store.n_classes} "
            f"{'labels' if store.multilabel else 'classes'} ({open_store(test).n_rows} test rows)",
            flush=True,
        )
        peer = run_linear_svc(train, test)
        metric = "micro_f1" if store.multilabel else "accuracy"
        cols = ["p@1", "micro_f1", "labels/doc"] if store.multilabel else ["accuracy"]
        print(
            "| solver | " + " | ".join(cols) + f" | Δ{metric} (points) | nnz | nnz / LinearSVC | seconds | "
            "seconds / LinearSVC | converged |"
        )
        print("|---" * (len(cols) + 7) + "|")
        rows = [("LinearSVC (OvR)", peer)]
        for solver in args.solvers.split(","):
            if solver == "fbpd" and store.multilabel:
                continue
            rows.append(
                (
                    solver,
                    run_ours(solver, train, test, os.path.join(work, f"run-{name}-{solver}"), args.time_limit, params),
                )
            )
            r = rows[-1][1]
            if r.get("stopped"):
                print(
                    f"| {solver} | " + " | ".join("—" for _ in cols) + f" | — | — | — | > {args.time_limit:.0f} | "
                    f"> {args.time_limit / peer['seconds']:.1f} | stopped |",
                    flush=True,
                )
                continue
            print(
                f"| {solver} | "
                + " | ".join(f"{r[c]:.4f}" if c != "labels/doc" else f"{r[c]:.2f}" for c in cols)
                + f" | {100 * (r[metric] - peer[metric]):+.2f} | {r['nnz']} | {r['nnz'] / peer['nnz']:.3f} | "
                f"{r['seconds']:.1f} | {r['seconds'] / peer['seconds']:.2f} | {r['converged']} |",
                flush=True,
            )
        p = peer
        print(
            "| LinearSVC (OvR) | "
            + " | ".join(f"{p[c]:.4f}" if c != "labels/doc" else f"{p[c]:.2f}" for c in cols)
            + f" | 0 | {p['nnz']} | 1 | {p['seconds']:.1f} | 1 | {p['converged']} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
