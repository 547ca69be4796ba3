"""Regression through the command line beside scikit-learn, on the same split (docs/benchmarks.md,
"A new user's check, session 19").

    python tools/check_regression_cli.py [--work DIR]

Writes three inputs to DIR (default: a temporary folder): scikit-learn's diabetes as LIBSVM and
as a CSV table of numeric columns with an id column, and a generated sparse set of 3000 rows × 500
columns at 2 % density with three outputs y = XW + 0.1·noise + (5, −2, 0) as LIBSVM `v1,v2,v3`
labels. Each goes `streamfit ingest --target numeric --test-size 0.25` → `train` (defaults, in
process) → `evaluate`, and scikit-learn's Ridge (alpha = n·lam, the exact solver),
LinearRegression and Ridge(alpha=1) fit the same training rows. Prints, per method, RMSE (the
mean of the outputs' RMSEs), MAE and R² from scikit-learn's metrics on the test rows, the largest
difference from Ridge's predictions and the fit seconds (ours: the `train` command's wall time,
process start included), and what `streamfit evaluate` printed.
"""

from __future__ import annotations

import argparse
import csv
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import dump_svmlight_file, load_diabetes
from sklearn.linear_model import LinearRegression, Ridge
from sklearn.metrics import mean_absolute_error, r2_score, root_mean_squared_error

import streamfit

LAM = 1e-4  # stagewise's default lam: Ridge(alpha = n·lam) is its model


def write_inputs(work: Path) -> dict[str, list[str]]:
    """The three inputs, and the ingest arguments that read each."""
    X, y = load_diabetes(return_X_y=True)
    dump_svmlight_file(X, y, str(work / "diabetes.svm"), zero_based=False)
    with open(work / "diabetes.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id"] + [f"f{i}" for i in range(10)] + ["y"])
        writer.writerows([f"p{i}", *map(repr, map(float, row)), repr(float(t))] for i, (row, t) in enumerate(zip(X, y)))
    rng = np.random.default_rng(0)
    A = sp.random(3000, 500, density=0.02, random_state=1, format="csr")
    Y = A @ rng.normal(size=(500, 3)) + 0.1 * rng.normal(size=(3000, 3)) + np.array([5.0, -2.0, 0.0])
    with open(work / "sparse3.svm", "w") as f:
        for i in range(A.shape[0]):
            row = A.getrow(i)
            pairs = " ".join(f"{j + 1}:{float(v)!r}" for j, v in zip(row.indices, row.data))
            f.write(",".join(repr(float(v)) for v in Y[i]) + " " + pairs + "\n")
    features = "feature_fields=" + ",".join(f"f{i}" for i in range(10))
    return {
        "diabetes (LIBSVM)": [str(work / "diabetes.svm")],
        "diabetes (CSV table)": [str(work / "diabetes.csv"), "--label-field", "y", "--option", features],
        "sparse3 (LIBSVM, 3 outputs)": [str(work / "sparse3.svm")],
    }


def streamfit_cli(*args: str) -> tuple[str, float]:
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "streamfit.cli", "-q", *args], capture_output=True, text=True, check=False
    )
    if done.returncode != 0:
        sys.exit(f"streamfit {' '.join(args)}: {done.stderr.strip()}")
    return done.stdout.strip(), time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", type=Path, default=None, help="folder for the inputs and stores")
    args = parser.parse_args()
    work = args.work or Path(tempfile.mkdtemp(prefix="regression-cli-"))
    work.mkdir(parents=True, exist_ok=True)
    for k, (name, source) in enumerate(write_inputs(work).items()):
        train, test, run = (str(work / f"{k}-{part}") for part in ("train.zarr", "test.zarr", "run"))
        split = ["--test-size", "0.25", "--out", train, "--test-out", test, "--overwrite"]
        streamfit_cli("ingest", *source, "--no-hash", "--target", "numeric", *split)
        _, train_s = streamfit_cli("train", train, "--out", run, "--overwrite", "--n-workers", "0")
        printed, _ = streamfit_cli("evaluate", run, test)
        Xtr, ytr = streamfit.open_store(train).to_scipy()
        Xte, yte = streamfit.open_store(test).to_scipy()
        if ytr.shape[1] == 1:
            ytr, yte = ytr.ravel(), yte.ravel()
        rows = [("streamfit stagewise, defaults (CLI)", streamfit.load_model(run).predict(Xte), train_s)]
        dense_train, dense_test = Xtr.toarray().astype(np.float64), Xte.toarray().astype(np.float64)
        for label, estimator in [
            ("Ridge(alpha = n·lam, cholesky)", Ridge(alpha=Xtr.shape[0] * LAM, solver="cholesky")),
            ("LinearRegression", LinearRegression()),
            ("Ridge(alpha = 1)", Ridge(alpha=1.0)),
        ]:
            started = time.perf_counter()
            predicted = estimator.fit(dense_train, ytr).predict(dense_test)
            rows.append((label, predicted, time.perf_counter() - started))
        print(f"\n{name}: {Xtr.shape[0]} / {Xte.shape[0]} rows, {Xtr.shape[1]} columns; evaluate printed: {printed}")
        print("| method | RMSE | MAE | R² | max abs diff to Ridge | fit s |")
        for label, predicted, seconds in rows:
            rmse, mae = root_mean_squared_error(yte, predicted), mean_absolute_error(yte, predicted)
            diff = np.abs(predicted - rows[1][1]).max()
            print(f"| {label} | {rmse:.4f} | {mae:.4f} | {r2_score(yte, predicted):.4f} | {diff:.2g} | {seconds:.2f} |")


if __name__ == "__main__":
    main()
