"""The estimators with their defaults beside scikit-learn's LinearSVC and LogisticRegression, as a
Python user meets them: data sets that ship with scikit-learn or with the tests, one stratified
75/25 split each (random_state 0), the same split for every method, in this process.

    python tools/check_python_api.py [--sets digits,breast_cancer,...] [--methods ...]

Prints one row per set and method: test accuracy, fit seconds (numba's kernels compiled by a
warm-up fit first) and whether a ConvergenceWarning was issued. The sets: digits (64 pixel
columns, 0..16), breast_cancer (30 columns of mixed scales, as given and standardized), wine (13
columns, as given), iris (4), dna400 (tests/data: 180 one-hot columns, 3 classes), news (the
walkthrough's 240 + 90 synthetic documents through TfidfVectorizer, 3 classes; its own test
file), sparse20 (generated: 3000 rows, 2000 columns at 1 % density, 20 classes from a sparse
linear model with 5 % label noise).
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_svmlight_file, load_wine
from sklearn.exceptions import ConvergenceWarning
from sklearn.feature_extraction.text import TfidfVectorizer
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from sklearn.svm import LinearSVC

import streamfit

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "..", "tests", "data")


def _split(X, y):
    return train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)


def _news():
    def read(name):
        with gzip.open(os.path.join(DATA, "walkthrough", name), "rt", encoding="utf-8") as f:
            rows = [line.rstrip("\n").split("\t") for line in f]
        return [r[2] for r in rows], np.array([r[0] for r in rows])

    (tr, ytr), (te, yte) = read("news-train.txt.gz"), read("news-test.txt.gz")
    vec = TfidfVectorizer().fit(tr)
    return vec.transform(tr), vec.transform(te), ytr, yte


def _sparse20():
    rng = np.random.default_rng(0)
    n, d, k = 3000, 2000, 20
    X = sp.random(n, d, density=0.01, format="csr", random_state=1, data_rvs=lambda m: rng.exponential(size=m))
    W = rng.normal(size=(d, k)) * (rng.random((d, k)) < 0.1)
    y = np.asarray(X @ W).argmax(axis=1)
    noisy = rng.random(n) < 0.05
    y[noisy] = rng.integers(k, size=noisy.sum())
    return _split(X, y)


def load(name):
    if name == "digits":
        return _split(*load_digits(return_X_y=True))
    if name in ("breast_cancer", "breast_cancer_std"):
        Xtr, Xte, ytr, yte = _split(*load_breast_cancer(return_X_y=True))
        if name.endswith("_std"):
            scaler = StandardScaler().fit(Xtr)
            Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
        return Xtr, Xte, ytr, yte
    if name == "wine":
        return _split(*load_wine(return_X_y=True))
    if name == "iris":
        return _split(*load_iris(return_X_y=True))
    if name == "dna400":
        X, y = load_svmlight_file(os.path.join(DATA, "dna400.libsvm"))
        return _split(X.tocsr(), y.astype(int))
    if name == "news":
        return _news()
    if name == "sparse20":
        return _sparse20()
    raise SystemExit(f"unknown set {name!r}")


METHODS = {
    "stagewise": lambda: streamfit.StagewiseLSClassifier(),
    "bcd": lambda: streamfit.BCDClassifier(),
    "ppdsparse": lambda: streamfit.PPDSparseClassifier(),
    "fbpd": lambda: streamfit.FBPDClassifier(),
    "multiboost": lambda: streamfit.MultiBoostClassifier(),
    "LinearSVC": lambda: LinearSVC(),
    "LogReg": lambda: LogisticRegression(max_iter=1000),
}
SETS = ["digits", "breast_cancer", "breast_cancer_std", "wine", "iris", "dna400", "news", "sparse20"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sets", default=",".join(SETS))
    ap.add_argument("--methods", default=",".join(METHODS))
    args = ap.parse_args()
    methods = args.methods.split(",")
    Xw, _, yw, _ = load("iris")  # compile each solver's kernels before timing
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for m in methods:
            METHODS[m]().fit(Xw, yw)
    print(f"{'set':18s} {'method':11s} {'accuracy':>8s} {'fit s':>7s}  warned")
    for name in args.sets.split(","):
        Xtr, Xte, ytr, yte = load(name)
        for m in methods:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always", ConvergenceWarning)
                t = time.perf_counter()
                est = METHODS[m]().fit(Xtr, ytr)
                seconds = time.perf_counter() - t
            acc = float(np.mean(est.predict(Xte) == yte))
            warned = any(issubclass(w.category, ConvergenceWarning) for w in caught)
            print(f"{name:18s} {m:11s} {acc:8.4f} {seconds:7.2f}  {'ConvergenceWarning' if warned else ''}", flush=True)


if __name__ == "__main__":
    main()
