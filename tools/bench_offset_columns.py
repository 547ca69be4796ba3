"""bcd's and ppdsparse's defaults on dense columns far from zero in their own spread (qa28):
every column shifted so that its mean is r times its standard deviation, beside LinearSVC on
the same columns; neither solver centres the columns (standardizing only divides them), so
the intercept has to absorb the shift. The data: scikit-learn's make_classification (4000
rows, 16 columns, 10 informative, 6 classes of 2 clusters, class_sep 1.2, random_state 5),
column j multiplied by 10**u_j, u_j uniform in [-3, 4) (seed 0): columns in other units, which
`standardize="auto"` standardizes; the first 3000 rows train, the last 1000 test.
`base.OFFSET_RATIO` (the warning's threshold) was set from this table.

    OPENBLAS_NUM_THREADS=1 python tools/bench_offset_columns.py [--ratios 0,3,10,30,100,300,1000]
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np
from sklearn.datasets import make_classification
from sklearn.svm import LinearSVC

from streamfit import BCDClassifier, PPDSparseClassifier


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ratios", default="0,3,10,30,100,300,1000", help="mean / standard deviation of every column")
    args = ap.parse_args()
    X, y = make_classification(
        n_samples=4000,
        n_features=16,
        n_informative=10,
        n_redundant=3,
        n_classes=6,
        n_clusters_per_class=2,
        class_sep=1.2,
        random_state=5,
    )
    units = 10.0 ** np.random.default_rng(0).uniform(-3, 4, size=X.shape[1])
    train, test = slice(0, 3000), slice(3000, None)
    print("| mean/std | bcd | ppdsparse | LinearSVC | CPU s (bcd, ppdsparse, LinearSVC) |")
    print("|---|---|---|---|---|")
    for r in (float(v) for v in args.ratios.split(",")):
        A = (X - X.mean(axis=0) + r * X.std(axis=0)) * units
        scores, cpu = [], []
        for est in (BCDClassifier(), PPDSparseClassifier(), LinearSVC()):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the not-converged warnings: counted in the table's text
                t0 = time.process_time()
                est.fit(A[train], y[train])
                cpu.append(time.process_time() - t0)
            scores.append(est.score(A[test], y[test]))
        print(
            f"| {r:g} | " + " | ".join(f"{s:.3f}" for s in scores) + " | " + ", ".join(f"{c:.2f}" for c in cpu) + " |"
        )


if __name__ == "__main__":
    main()
