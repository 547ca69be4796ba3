"""Text ingest defaults on 20 Newsgroups bydate (issue 20, item 9): raw term counts against the
default recipe (log(1 + count), IDF, unit-norm rows), each ingested with the CLI from the raw
archive and scored by a solver run with its default parameters through `streamfit.train`
(in-process engine), beside scikit-learn's one-vs-rest LinearSVC (C = 1) on the same features.

    python tools/bench_text_defaults.py [--data /work/shared/data] [--work /tmp/bench_text_defaults]
                                        [--solvers stagewise,ppdsparse] [--n-features 262144]

Prints one line per (recipe, method): test accuracy and wall seconds of the fit.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def ingest(tar: Path, work: Path, name: str, recipe: list[str], n_features: int) -> tuple[Path, Path]:
    """The train and test stores of one recipe, made by `streamfit ingest` (kept between runs)."""
    train, test = work / f"{name}-train.zarr", work / f"{name}-test.zarr"
    cli = [sys.executable, "-m", "streamfit.cli", "-q", "ingest", str(tar), "--encoding", "latin-1", "--overwrite"]
    if not test.exists():
        subprocess.run(
            [*cli, "--subset", "20news-bydate-train", "--n-features", str(n_features), *recipe, "--out", str(train)],
            check=True,
        )
        subprocess.run([*cli, "--subset", "20news-bydate-test", "--like", str(train), "--out", str(test)], check=True)
    return train, test


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_text_defaults"))
    ap.add_argument("--solvers", default="stagewise,ppdsparse")
    ap.add_argument("--n-features", type=int, default=2**18)
    args = ap.parse_args()

    from sklearn.svm import LinearSVC

    from streamfit.metrics import evaluate
    from streamfit.store import open_store
    from streamfit.train import train

    tar = args.data / "20newsgroups" / "20news-bydate.tar.gz"
    args.work.mkdir(parents=True, exist_ok=True)
    recipes = {"raw counts": ["--value", "count", "--no-idf", "--no-l2-normalize"], "defaults": []}
    for name, recipe in recipes.items():
        slug = name.replace(" ", "-")
        train_path, test_path = ingest(tar, args.work, slug, recipe, args.n_features)
        tr, te = open_store(str(train_path)), open_store(str(test_path))
        for solver in args.solvers.split(","):
            start = time.perf_counter()
            model = train(
                str(train_path),
                solver,
                str(args.work / f"{slug}-{solver}"),
                {},
                overwrite=True,
                progress=False,
                n_workers=0,
            )
            seconds = time.perf_counter() - start
            accuracy = evaluate(model, te, progress=False)["accuracy"]
            print(f"{name:>10} | {solver:>9} | accuracy {accuracy:.4f} | {seconds:.1f} s", flush=True)
        (Xtr, ytr), (Xte, yte) = tr.to_scipy(), te.to_scipy()
        start = time.perf_counter()
        svc = LinearSVC(C=1.0).fit(Xtr, ytr)
        seconds = time.perf_counter() - start
        accuracy = float(np.mean(svc.predict(Xte) == yte))
        print(f"{name:>10} | LinearSVC | accuracy {accuracy:.4f} | {seconds:.1f} s", flush=True)


if __name__ == "__main__":
    main()
