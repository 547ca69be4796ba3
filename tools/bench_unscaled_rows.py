"""ppdsparse with its defaults on numeric columns as users bring them (not scaled) and divided by
their range, beside scikit-learn's LinearSVC (C = 1) in the same run (issue 20; data_scale in
streamfit/solvers/ppdsparse.py): test accuracy, fit seconds, non-zeros.

    python tools/bench_unscaled_rows.py pendigits           # LIBSVM pendigits, values 0..100
    python tools/bench_unscaled_rows.py mnist               # MNIST test images (HDF5), 8000/2000, 0..255
    python tools/bench_unscaled_rows.py mnist --peer-raw    # also LinearSVC on raw pixels (about 1000 s)

Data from ../shared/data (see its README); ppdsparse is the estimator, one thread.
"""

from __future__ import annotations

import argparse
import os
import time
import warnings

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sklearn.exceptions import ConvergenceWarning
from sklearn.svm import LinearSVC

from streamfit import PPDSparseClassifier

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


def load(name: str) -> tuple[sp.csr_matrix, np.ndarray, sp.csr_matrix, np.ndarray, float]:
    """(X, y, X_test, y_test, the columns' range) of `name`."""
    if name == "pendigits":
        base = os.path.join(DATA, "libsvm", "pendigits", "pendigits")
        X, y = load_svmlight_file(base + ".gz", n_features=16)
        Xt, yt = load_svmlight_file(base + ".t.gz", n_features=16)
        return sp.csr_matrix(X), y, sp.csr_matrix(Xt), yt, 100.0
    import h5py

    with h5py.File(os.path.join(DATA, "mnist_test_only", "mnist-t10k.h5")) as f:
        A, b = f["X"][:].astype(np.float64), f["y"][:]
    return sp.csr_matrix(A[:8000]), b[:8000], sp.csr_matrix(A[8000:]), b[8000:], 255.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", choices=["pendigits", "mnist"])
    ap.add_argument("--peer-raw", action="store_true", help="LinearSVC on the raw values too (MNIST: slow)")
    args = ap.parse_args()
    X, y, Xt, yt, top = load(args.name)
    for label, div in (("raw", 1.0), (f"/ {top:g}", top)):
        t = time.perf_counter()
        model = PPDSparseClassifier(threads=1).fit(X / div, y)
        seconds = time.perf_counter() - t
        acc = np.mean(model.predict(Xt / div) == yt)
        print(
            f"{args.name} {label}: ppdsparse accuracy {acc:.4f}, fit {seconds:.2f} s, nnz {model.coef_.nnz}", flush=True
        )
        if label == "raw" and args.name == "mnist" and not args.peer_raw:
            continue
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            svc = LinearSVC().fit((X / div).toarray(), y)
        seconds = time.perf_counter() - t
        acc = np.mean(svc.predict((Xt / div).toarray()) == yt)
        print(f"{args.name} {label}: LinearSVC accuracy {acc:.4f}, fit {seconds:.2f} s", flush=True)


if __name__ == "__main__":
    main()
