"""stagewise with its defaults on small dense data it was not tuned for, beside scikit-learn's
LinearSVC and LogisticRegression (both with their defaults; lbfgs given max_iter=5000) on the
same splits, in the same run.

Data: scikit-learn's shipped sets iris, wine, breast_cancer, digits (unscaled, as a user loads
them) and generated dense sets (seeded): `classif-3` make_classification (300 × 10, 3 classes),
`classif-5` (2000 × 20, 5 classes, 2 clusters a class), `classif-8` (5000 × 50, 8 classes),
`blobs-scaled` make_blobs (600 × 8, 4 centres) with column j multiplied by 10^(j − 4), and
`quantiles` make_gaussian_quantiles (1000 × 5, 3 classes: nonlinear boundaries). Each set is
split `--splits` times (stratified, 30 % test, random_state 0 …); the table gives mean test
accuracy over the splits, ours ÷ each peer, and the generator and calibration that "auto"
resolved to on each split (from model_.info).

    python tools/bench_small_dense.py [--sets iris,wine,...] [--splits 5] [-p KEY=VALUE ...]
"""

from __future__ import annotations

import argparse
import collections
import time
import warnings

import numpy as np


def datasets(names: list[str]):
    from sklearn import datasets as d

    shipped = {"iris": d.load_iris, "wine": d.load_wine, "breast_cancer": d.load_breast_cancer, "digits": d.load_digits}
    for name in names:
        if name in shipped:
            X, y = shipped[name](return_X_y=True)
        elif name == "classif-3":
            X, y = d.make_classification(300, 10, n_informative=5, n_classes=3, random_state=1)
        elif name == "classif-5":
            X, y = d.make_classification(2000, 20, n_informative=10, n_classes=5, random_state=2)
        elif name == "classif-8":
            X, y = d.make_classification(5000, 50, n_informative=20, n_classes=8, random_state=3)
        elif name == "blobs-scaled":
            X, y = d.make_blobs(600, 8, centers=4, cluster_std=3.0, random_state=4)
            X = X * 10.0 ** (np.arange(8) - 4)
        elif name == "quantiles":
            X, y = d.make_gaussian_quantiles(n_samples=1000, n_features=5, n_classes=3, random_state=5)
        else:
            raise SystemExit(f"unknown set {name!r}")
        yield name, X, y


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--sets", default="iris,wine,breast_cancer,digits,classif-3,classif-5,classif-8,blobs-scaled,quantiles"
    )
    ap.add_argument("--splits", type=int, default=5)
    ap.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="stagewise parameter")
    args = ap.parse_args()
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import train_test_split
    from sklearn.svm import LinearSVC

    from streamfit import StagewiseLSClassifier
    from streamfit.cli import _parse_key_values

    params = _parse_key_values(args.param, "-p")
    if "calibration" in params:
        params["calibrate"] = params.pop("calibration")
    warnings.filterwarnings("ignore", category=ConvergenceWarning)
    print(
        "| set | n × d, classes | stagewise | LinearSVC | LogisticRegression | ÷ LinearSVC | ÷ LogisticRegression | auto chose | stagewise s |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for name, X, y in datasets(args.sets.split(",")):
        acc = collections.defaultdict(list)
        chose: collections.Counter = collections.Counter()
        seconds = 0.0
        for split in range(args.splits):
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=split, stratify=y)
            started = time.perf_counter()
            ours = StagewiseLSClassifier(**params).fit(Xtr, ytr)
            seconds += time.perf_counter() - started
            info = ours.model_.info
            chose[f"{info['generator']}/{info.get('calibration', '?')}"] += 1
            acc["ours"].append(ours.score(Xte, yte))
            acc["svc"].append(LinearSVC().fit(Xtr, ytr).score(Xte, yte))
            acc["lr"].append(LogisticRegression(max_iter=5000).fit(Xtr, ytr).score(Xte, yte))
        m = {k: float(np.mean(v)) for k, v in acc.items()}
        print(
            f"| {name} | {X.shape[0]} × {X.shape[1]}, {len(np.unique(y))} | {m['ours']:.4f} | {m['svc']:.4f} | "
            f"{m['lr']:.4f} | {m['ours'] / m['svc']:.3f} | {m['ours'] / m['lr']:.3f} | "
            + ", ".join(f"{k} ×{v}" for k, v in sorted(chose.items()))
            + f" | {seconds / args.splits:.2f} |",
            flush=True,
        )


if __name__ == "__main__":
    main()
