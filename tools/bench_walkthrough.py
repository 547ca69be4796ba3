"""The inputs of docs/walkthrough.md, each ingested with the CLI and scored by every solver with
its default parameters, beside scikit-learn's one-vs-rest LinearSVC (C = 1) on the same stores
(issue 20, "Done when"):

- news: tests/data/walkthrough/news-{train,test}.txt.gz, headerless TSV text (3 classes);
- clinic: tests/data/walkthrough/clinic.tar.gz, a nested folder archive (3 classes);
- bibtex: the Mulan ARFF files from --data (159 labels; multilabel: fbpd is multiclass only).

    python tools/bench_walkthrough.py [--data /work/shared/data] [--work /tmp/bench_walkthrough]
                                      [--sets news,clinic,bibtex] [--solvers stagewise,bcd,ppdsparse,fbpd]

Prints one line per (set, method): accuracy and macro-F1 (multiclass), or P@1/3/5, micro- and
macro-F1 of the labels scored above the model's decision threshold (multilabel; as `streamfit
evaluate` counts them; 0 for LinearSVC's margins), and fit seconds.
Solvers run in process (--n-workers 0).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
WALKTHROUGH = REPO / "tests" / "data" / "walkthrough"


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
    bibtex = data / "multilabel" / "bibtex"
    return [
        [str(bibtex / "bibtex-train.arff.gz"), "--no-hash", "--option", "n_labels=159", "--out", train],
        [str(bibtex / "bibtex-test.arff.gz"), "--like", train, "--out", test],
    ]


def metrics_line(acc) -> str:
    result = acc.result()
    if not acc.multilabel:
        return f"accuracy {result['accuracy']:.4f}  macro-F1 {result['macro_f1']:.4f}"
    tp, fp, fn = acc.tp.sum(), acc.fp.sum(), acc.fn.sum()
    micro = 2 * tp / max(2 * tp + fp + fn, 1)
    ps = "  ".join(f"P@{k} {result[f'p@{k}']:.4f}" for k in acc.ks)
    return f"{ps}  micro-F1 {micro:.4f}  macro-F1 {result['macro_f1']:.4f}"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_walkthrough"))
    ap.add_argument("--sets", default="news,clinic,bibtex")
    ap.add_argument("--solvers", default="stagewise,bcd,ppdsparse,fbpd")
    args = ap.parse_args()

    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import LinearSVC

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
        for solver in args.solvers.split(","):
            if solver == "fbpd" and tr.multilabel:
                continue
            start = time.perf_counter()
            model = train(
                str(tr.path),
                solver,
                str(args.work / f"{name}-{solver}"),
                {},
                overwrite=True,
                progress=False,
                n_workers=0,
            )
            seconds = time.perf_counter() - start
            acc = MetricAccumulator(len(tr.classes), tr.multilabel, threshold=model.decision_threshold)
            acc.update(model.decision_function(Xte), yte)
            print(f"{name:>7} | {solver:>9} | {metrics_line(acc)} | {seconds:.3g} s", flush=True)
        start = time.perf_counter()
        if tr.multilabel:
            svc = OneVsRestClassifier(LinearSVC(C=1.0)).fit(Xtr, ytr)  # ytr: the sparse label indicator
        else:
            svc = LinearSVC(C=1.0).fit(Xtr, ytr)
        seconds = time.perf_counter() - start
        scores = svc.decision_function(Xte)
        acc = MetricAccumulator(len(tr.classes), tr.multilabel)
        acc.update(scores.reshape(len(scores), -1) if scores.ndim == 2 else np.c_[-scores, scores], yte)
        print(f"{name:>7} | LinearSVC | {metrics_line(acc)} | {seconds:.3g} s", flush=True)


if __name__ == "__main__":
    main()
