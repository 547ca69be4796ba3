"""The inputs of docs/walkthrough.md, each ingested with the CLI and scored by every solver with
its default parameters, beside scikit-learn's one-vs-rest LinearSVC (C = 1) on the same stores
(issue 20, "Done when"):

- news: tests/data/walkthrough/news-{train,test}.txt.gz, headerless TSV text (3 classes);
- clinic: tests/data/walkthrough/clinic.tar.gz, a nested folder archive (3 classes);
- bibtex: the Mulan ARFF files from --data (159 labels; multilabel: fbpd and multiboost are multiclass only);
- r8news: an R8-sized stand-in for R8, written from --data's 20 Newsgroups (bydate split) as R8
  ships: headerless `label<TAB>text` lines in `.txt.gz` files, 8 groups (R8NEWS_GROUPS), every
  document of them (4,713 train / 3,138 test);
- ngfolders: an OHSUMED-23-like nested folder archive written from the other 12 groups of 20
  Newsgroups: `ngfolders/{training,test}/<group>/<document>` in a tar.gz, the first
  NGFOLDERS_TRAIN training and NGFOLDERS_TEST test documents of each group (as OHSUMED-23's 3,357
  training documents in 23 classes, ~3,360 in 12 here).
- r8like: R8's shape (Reuters-21578's 8 most frequent single-label topics): R8's class names and
  exact train / test counts (R8LIKE_CLASSES: earn 2,840 / 1,083 down to grain 41 / 10; 5,485 /
  2,189 in all), short documents (each cut to its first R8LIKE_WORDS words after the Usenet
  headers), written as R8 ships (headerless `label<TAB>text` lines in `.txt.gz` files). A class
  larger than a newsgroup is the union of related groups, taken in turn (earn: comp.*, acq: rec.*);
- ohsumedlike: OHSUMED-23's shape (single-label medical abstracts, 3,357 training / 4,043 test
  documents, classes unbalanced): 19 classes C01..C19 from the 20 groups (OHSUMEDLIKE_CLASSES: C01,
  19 % of the rows, is the two comp.sys.*.hardware groups; C19 0.3 %), 3,357 / 4,043 documents cut
  to OHSUMEDLIKE_WORDS words, as a nested folder archive
  `ohsumedlike/{training,test}/Cxx/<document>` (OHSUMED-23 ships `ohsumed_single_23/...`).

    python tools/bench_walkthrough.py [--data /work/shared/data] [--work /tmp/bench_walkthrough]
                                      [--sets news,clinic,bibtex,r8news,ngfolders,r8like,ohsumedlike]
                                      [--solvers stagewise,bcd,ppdsparse,fbpd] [--time-limit SECONDS]

Prints one line per (set, method), LinearSVC's first: accuracy and macro-F1 (multiclass), or
P@1/3/5, micro- and macro-F1 of the labels scored above the model's decision threshold
(multilabel; as `streamfit evaluate` counts them; 0 for LinearSVC's margins), the model's non-zero
weights (nnz, intercepts not counted; "-" for multiboost's stumps) and fit seconds (wall, and the
process's CPU seconds in brackets: a shared machine's load disturbs them less); for each
solver also Δ points of accuracy (multilabel: micro-F1) against LinearSVC's, LinearSVC's nnz ÷
the model's ("x fewer"), the fit seconds ÷ LinearSVC's, and "not converged" where the model's
info says so.
Solvers run in process (--n-workers 0); --time-limit stops each fit at its first checkpoint
after that many seconds (train's time_limit; the line then says so, with no scores; 0: no limit).
"""

from __future__ import annotations

import argparse
import gzip
import io
import subprocess
import sys
import tarfile
import time
from itertools import zip_longest
from pathlib import Path

import numpy as np
import scipy.sparse as sp

REPO = Path(__file__).resolve().parent.parent
WALKTHROUGH = REPO / "tests" / "data" / "walkthrough"
NEWSGROUPS = Path("20newsgroups") / "20news-bydate.tar.gz"
R8NEWS_GROUPS = (
    "comp.graphics",
    "misc.forsale",
    "rec.autos",
    "rec.sport.hockey",
    "sci.med",
    "sci.space",
    "talk.politics.mideast",
    "soc.religion.christian",
)
NGFOLDERS_TRAIN = 280
NGFOLDERS_TEST = 200
# R8's classes with their train / test document counts, each from these newsgroups (taken in turn)
R8LIKE_CLASSES = (
    (
        "earn",
        2840,
        1083,
        (
            "comp.graphics",
            "comp.os.ms-windows.misc",
            "comp.sys.ibm.pc.hardware",
            "comp.sys.mac.hardware",
            "comp.windows.x",
        ),
    ),
    ("acq", 1596, 696, ("rec.autos", "rec.motorcycles", "rec.sport.baseball", "rec.sport.hockey")),
    ("crude", 253, 121, ("sci.space",)),
    ("trade", 251, 75, ("talk.politics.mideast",)),
    ("money-fx", 206, 87, ("talk.politics.guns",)),
    ("interest", 190, 81, ("talk.politics.misc",)),
    ("ship", 108, 36, ("sci.electronics",)),
    ("grain", 41, 10, ("sci.med",)),
)
R8LIKE_WORDS = 80
# OHSUMED-23-like classes: 19, 9.5, 9, ..., 0.3 % of 3357 training and 4043 test documents
OHSUMEDLIKE_CLASSES = (
    ("C01", 638, 768, ("comp.sys.ibm.pc.hardware", "comp.sys.mac.hardware")),
    ("C02", 319, 384, ("rec.sport.hockey",)),
    ("C03", 302, 364, ("sci.med",)),
    ("C04", 285, 344, ("rec.autos",)),
    ("C05", 269, 323, ("sci.space",)),
    ("C06", 252, 303, ("comp.graphics",)),
    ("C07", 201, 243, ("soc.religion.christian",)),
    ("C08", 185, 222, ("sci.crypt",)),
    ("C09", 168, 202, ("talk.politics.mideast",)),
    ("C10", 151, 182, ("rec.motorcycles",)),
    ("C11", 134, 162, ("misc.forsale",)),
    ("C12", 117, 142, ("talk.politics.guns",)),
    ("C13", 101, 121, ("sci.electronics",)),
    ("C14", 84, 101, ("comp.windows.x",)),
    ("C15", 50, 61, ("rec.sport.baseball",)),
    ("C16", 40, 49, ("alt.atheism",)),
    ("C17", 34, 40, ("comp.os.ms-windows.misc",)),
    ("C18", 17, 20, ("talk.politics.misc",)),
    ("C19", 10, 12, ("talk.religion.misc",)),
)
OHSUMEDLIKE_WORDS = 170


def newsgroup_documents(data: Path) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """(split, group) -> [(file name, text), ...] of 20 Newsgroups bydate, in the archive's order;
    split is "train" or "test", texts decoded as latin-1 (the archive's encoding)."""
    documents: dict[tuple[str, str], list[tuple[str, str]]] = {}
    with tarfile.open(data / NEWSGROUPS) as archive:
        for member in archive:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 3:
                continue
            split = parts[0].removeprefix("20news-bydate-")
            handle = archive.extractfile(member)
            assert handle is not None
            documents.setdefault((split, parts[1]), []).append((parts[2], handle.read().decode("latin-1")))
    return documents


def write_r8news(data: Path, work: Path) -> None:
    """work/r8news-{train,test}.txt.gz: `group<TAB>text` lines, whitespace (tabs, newlines) in
    each text collapsed to single spaces, as R8's files are."""
    documents = newsgroup_documents(data)
    for split in ("train", "test"):
        with gzip.open(work / f"r8news-{split}.txt.gz", "wt", encoding="utf-8") as out:
            for group in R8NEWS_GROUPS:
                for _, text in documents[(split, group)]:
                    out.write(f"{group}\t{' '.join(text.split())}\n")


def write_ngfolders(data: Path, work: Path) -> None:
    """work/ngfolders.tar.gz: ngfolders/{training,test}/<group>/<file> (UTF-8) for the groups not
    in R8NEWS_GROUPS, at most NGFOLDERS_TRAIN / NGFOLDERS_TEST documents a group."""
    documents = newsgroup_documents(data)
    with tarfile.open(work / "ngfolders.tar.gz", "w:gz") as out:
        for (split, group), docs in sorted(documents.items()):
            if group in R8NEWS_GROUPS:
                continue
            folder, limit = ("training", NGFOLDERS_TRAIN) if split == "train" else ("test", NGFOLDERS_TEST)
            for file_name, text in docs[:limit]:
                payload = text.encode("utf-8")
                member = tarfile.TarInfo(f"ngfolders/{folder}/{group}/{file_name}")
                member.size = len(payload)
                out.addfile(member, io.BytesIO(payload))


def first_words(text: str, n_words: int) -> str:
    """The first n_words words of a Usenet post's body (after its headers: the lines before the
    first empty one), joined by single spaces."""
    _, _, body = text.partition("\n\n")
    return " ".join(body.split()[:n_words])


def class_documents(
    documents: dict[tuple[str, str], list[tuple[str, str]]],
    split: str,
    groups: tuple[str, ...],
    count: int,
    n_words: int,
) -> list[tuple[str, str]]:
    """count (file name, text) of the split's documents of `groups`, each cut to its first
    n_words words (first_words), taken from the groups in turn in the archive's order; posts with
    an empty body are passed over. Raises ValueError if the groups hold fewer than count."""
    queues = [
        [(name, words) for name, text in documents[(split, group)] if (words := first_words(text, n_words))]
        for group in groups
    ]
    taken = [doc for turn in zip_longest(*queues) for doc in turn if doc is not None][:count]
    if len(taken) < count:
        raise ValueError(f"{split} {groups}: {len(taken)} documents with a body, {count} asked")
    return taken


def write_r8like(data: Path, work: Path) -> None:
    """work/r8like-{train,test}.txt.gz: `label<TAB>text` lines of R8LIKE_CLASSES, R8's counts,
    each text its post's first R8LIKE_WORDS words."""
    documents = newsgroup_documents(data)
    for split in ("train", "test"):
        with gzip.open(work / f"r8like-{split}.txt.gz", "wt", encoding="utf-8") as out:
            for label, n_train, n_test, groups in R8LIKE_CLASSES:
                count = n_train if split == "train" else n_test
                for _, text in class_documents(documents, split, groups, count, R8LIKE_WORDS):
                    out.write(f"{label}\t{text}\n")


def write_ohsumedlike(data: Path, work: Path) -> None:
    """work/ohsumedlike.tar.gz: ohsumedlike/{training,test}/<class>/<file> (UTF-8) of
    OHSUMEDLIKE_CLASSES, each text its post's first OHSUMEDLIKE_WORDS words."""
    documents = newsgroup_documents(data)
    with tarfile.open(work / "ohsumedlike.tar.gz", "w:gz") as out:
        for label, n_train, n_test, groups in OHSUMEDLIKE_CLASSES:
            for split, folder, count in (("train", "training", n_train), ("test", "test", n_test)):
                for file_name, text in class_documents(documents, split, groups, count, OHSUMEDLIKE_WORDS):
                    payload = text.encode("utf-8")
                    member = tarfile.TarInfo(f"ohsumedlike/{folder}/{label}/{file_name}")
                    member.size = len(payload)
                    out.addfile(member, io.BytesIO(payload))


def ingest_commands(name: str, data: Path, work: Path) -> list[list[str]]:
    """The `streamfit ingest` arguments making work/NAME-{train,test}.zarr, as the walkthrough runs them."""
    train, test = str(work / f"{name}-train.zarr"), str(work / f"{name}-test.zarr")
    if name == "news":
        columns = ["--no-header", "--label-field", "0", "--id-field", "1", "--text-field", "2"]
        return [
            [str(WALKTHROUGH / "news-train.txt.gz"), *columns, "--out", train],
            [str(WALKTHROUGH / "news-test.txt.gz"), "--like", train, "--out", test],
        ]
    if name == "clinic":
        archive = str(WALKTHROUGH / "clinic.tar.gz")
        return [
            [archive, "--subset", "training", "--out", train],
            [archive, "--subset", "test", "--like", train, "--out", test],
        ]
    if name in ("r8news", "r8like"):
        (write_r8news if name == "r8news" else write_r8like)(data, work)
        return [
            [
                str(work / f"{name}-train.txt.gz"),
                "--no-header",
                "--label-field",
                "0",
                "--text-field",
                "1",
                "--out",
                train,
            ],
            [str(work / f"{name}-test.txt.gz"), "--like", train, "--out", test],
        ]
    if name in ("ngfolders", "ohsumedlike"):
        (write_ngfolders if name == "ngfolders" else write_ohsumedlike)(data, work)
        archive = str(work / f"{name}.tar.gz")
        return [
            [archive, "--subset", f"{name}/training", "--out", train],
            [archive, "--subset", "test", "--like", train, "--out", test],
        ]
    if name != "bibtex":
        raise SystemExit(f"unknown set {name!r}: news, clinic, bibtex, r8news, ngfolders, r8like or ohsumedlike")
    bibtex = data / "multilabel" / "bibtex"
    return [
        [str(bibtex / "bibtex-train.arff.gz"), "--no-hash", "--option", "n_labels=159", "--out", train],
        [str(bibtex / "bibtex-test.arff.gz"), "--like", train, "--out", test],
    ]


def weight_count(coef) -> int:
    """Non-zero entries of a (dense or scipy sparse) weight matrix, intercepts not counted."""
    return int(coef.nnz) if sp.issparse(coef) else int(np.count_nonzero(coef))


def metrics_line(acc) -> str:
    result = acc.result()
    if not acc.multilabel:
        return f"accuracy {result['accuracy']:.4f}  macro-F1 {result['macro_f1']:.4f}"
    ps = "  ".join(f"P@{k} {result[f'p@{k}']:.4f}" for k in acc.ks)
    return f"{ps}  micro-F1 {headline_metric(acc):.4f}  macro-F1 {result['macro_f1']:.4f}"


def headline_metric(acc) -> float:
    """Accuracy (multiclass) or micro-F1 (multilabel): the number the Δ points compare."""
    if not acc.multilabel:
        return float(acc.result()["accuracy"])
    tp, fp, fn = acc.tp.sum(), acc.fp.sum(), acc.fn.sum()
    return float(2 * tp / max(2 * tp + fp + fn, 1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_walkthrough"))
    ap.add_argument("--sets", default="news,clinic,bibtex")
    ap.add_argument("--solvers", default="stagewise,bcd,ppdsparse,fbpd")
    ap.add_argument("--time-limit", type=float, default=0.0)
    args = ap.parse_args()

    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import LinearSVC

    from streamfit.errors import TimeLimitReached
    from streamfit.metrics import MetricAccumulator
    from streamfit.store import open_store
    from streamfit.train import train

    args.work.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "streamfit.cli", "-q", "ingest", "--overwrite"]
    for name in args.sets.split(","):
        for command in ingest_commands(name, args.data, args.work):
            subprocess.run([*cli, *command], check=True, stdout=subprocess.DEVNULL)
        tr, te = open_store(str(args.work / f"{name}-train.zarr")), open_store(str(args.work / f"{name}-test.zarr"))
        (Xtr, ytr), (Xte, yte) = tr.to_scipy(), te.to_scipy()
        print(
            f"## {name}: {tr.n_rows} train / {te.n_rows} test rows, {tr.n_features} features, {len(tr.classes)} "
            f"{'labels' if tr.multilabel else 'classes'}",
            flush=True,
        )
        start, cpu = time.perf_counter(), time.process_time()
        if tr.multilabel:
            svc = OneVsRestClassifier(LinearSVC(C=1.0)).fit(Xtr, ytr)  # ytr: the sparse label indicator
        else:
            svc = LinearSVC(C=1.0).fit(Xtr, ytr)
        svc_seconds, svc_cpu = time.perf_counter() - start, time.process_time() - cpu
        scores = svc.decision_function(Xte)
        acc = MetricAccumulator(len(tr.classes), tr.multilabel)
        acc.update(scores.reshape(len(scores), -1) if scores.ndim == 2 else np.c_[-scores, scores], yte)
        svc_metric = headline_metric(acc)
        svc_nnz = weight_count(svc.coef_) if not tr.multilabel else sum(weight_count(e.coef_) for e in svc.estimators_)
        print(
            f"{name:>7} | LinearSVC | {metrics_line(acc)} | nnz {svc_nnz} | {svc_seconds:.3g} s ({svc_cpu:.3g} CPU s)",
            flush=True,
        )
        for solver in args.solvers.split(","):
            if solver in ("fbpd", "multiboost") and tr.multilabel:  # multiclass only
                continue
            start, cpu = time.perf_counter(), time.process_time()
            try:
                model = train(
                    str(tr.path),
                    solver,
                    str(args.work / f"{name}-{solver}"),
                    {},
                    time_limit=args.time_limit or None,
                    overwrite=True,
                    progress=False,
                    n_workers=0,
                )
            except TimeLimitReached:
                print(f"{name:>7} | {solver:>9} | stopped at the time limit | {time.perf_counter() - start:.3g} s")
                continue
            seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu
            acc = MetricAccumulator(len(tr.classes), tr.multilabel, threshold=model.decision_threshold)
            acc.update(model.decision_function(Xte), yte)
            delta = 100 * (headline_metric(acc) - svc_metric)
            if hasattr(model, "coef_"):
                nnz = weight_count(model.coef_)
                size = f"nnz {nnz} ({svc_nnz / max(nnz, 1):.1f}x fewer)"
            else:  # multiboost: stumps, no weights
                size = "nnz -"
            converged = {True: "", False: " | not converged"}.get(model.info.get("converged"), "")
            print(
                f"{name:>7} | {solver:>9} | {metrics_line(acc)} | {delta:+.2f} points | {size} | {seconds:.3g} s "
                f"({seconds / svc_seconds:.2f}x LinearSVC; {cpu_seconds:.3g} CPU s){converged}",
                flush=True,
            )


if __name__ == "__main__":
    main()
