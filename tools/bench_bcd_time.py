"""bcd's fit with its defaults, before and after a change, beside scikit-learn's LinearSVC (C = 1,
one-vs-rest) in one run: time, score, outer iterations and the objective reached (issue 20,
"bcd's time on text", docs/benchmarks.md sessions 15 and 16).

Each --trees entry NAME=PATH is a checkout of the project (e.g. before=an export of main,
`git archive main | tar -x -C DIR`, and after=.); every fit runs in a fresh subprocess with
that tree first on the import path, after a warm-up fit on every 40th row (numba's compile is not
timed). Sets are tools/bench_bcd_defaults.py's (the text stores of tools/bench_defaults.py,
ingested into --work, the LIBSVM numeric sets from --data, and bibtex, multilabel). Per set:
LinearSVC's score and seconds, then per tree the test score (accuracy; micro-F1 for multilabel
at the model's own decision rule, LinearSVC's at margin > 0), fit wall and CPU seconds and their
ratios to LinearSVC's (CPU time is the steadier measure on a loaded machine), outer iterations,
converged, F(W, b) on the training rows (eq. 2 averaged, `BCDClassifier.objective`), its excess
over F* = the lowest F of a reference fit (--reference: the last tree in memory mode, the
fastest way to F*, at tol 1e-7, max_iter 2000) and the non-zero rows; --trace also prints that
excess (F without --reference) at outer iterations 1, 2, 5, 10, 20, 50, 100, 200 (with
--params '{"mode": "chunks"}', the chunks mode's passes so far beside each). Session 16 used
`--params '{"mode": "chunks", "max_iter": 60}' --reference --trace` for the chunks mode.

    python tools/bench_bcd_time.py --trees before=/tmp/main-export after=. --sets news20-5,dna
        [--params '{}'] [--reference] [--trace] [--work DIR] [--data DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


def score(clf, Xt, yt) -> float:
    """Accuracy, or micro-F1 of the predicted label sets (multilabel yt)."""
    from sklearn.metrics import f1_score

    pred = clf.predict(Xt)
    if np.ndim(yt) == 2 or hasattr(yt, "tocsr"):
        return float(f1_score(yt, pred, average="micro"))
    return float(np.mean(pred == yt))


def load_set(name: str, data: str, work: str):
    """(X, y, X_test, y_test); y a sparse indicator matrix for the multilabel sets."""
    import scipy.sparse as sp
    from bench_bcd_defaults import load

    X, y, Xt, yt = load(name, data, work)
    if y.dtype == object or (y.ndim == 0):  # to_scipy's multilabel labels: a sparse matrix in an object array
        y, yt = sp.csr_matrix(y.item()), sp.csr_matrix(yt.item())
    return X, y, Xt, yt


def fit_one(name: str, params: dict, data: str, work: str) -> dict:
    """One BCDClassifier fit (after a warm-up), with the streamfit on the import path."""
    from streamfit.estimators import BCDClassifier

    X, y, Xt, yt = load_set(name, data, work)
    BCDClassifier(**{**params, "max_iter": 2}).fit(X[::40], y[::40])
    wall, cpu = time.perf_counter(), time.process_time()
    clf = BCDClassifier(**params).fit(X, y)
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "score": score(clf, Xt, yt),
        "wall": wall,
        "cpu": cpu,
        "iterations": clf.n_iter_,
        "converged": bool(clf.model_.info["converged"]),
        "objective": float(clf.objective(X, y)),
        "nnz_rows": int(clf.model_.info["nnz_rows"]),
        # F and (chunks mode) the data passes at the end of each outer iteration
        "trace": [(r["objective"], r.get("data_passes")) for r in clf.history_ if "objective" in r],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--trees", nargs="+", default=[f"after={os.path.dirname(HERE)}"])
    ap.add_argument("--sets", default="news20-5,dna")
    ap.add_argument("--params", default="{}", help="BCDClassifier parameters (JSON) of every fit")
    ap.add_argument("--reference", action="store_true", help="F* from the last tree, memory mode, tol 1e-7")
    ap.add_argument("--trace", action="store_true", help="the excess over F* (or F) at outer iterations 1 ... 200")
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data"))
    ap.add_argument("--work", default="/tmp/bench_bcd_defaults")
    ap.add_argument("--fit-one", help=argparse.SUPPRESS)  # internal: the subprocess's set
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    os.makedirs(args.work, exist_ok=True)
    if args.fit_one:
        print(json.dumps(fit_one(args.fit_one, json.loads(args.params), args.data, args.work)))
        return

    def run_tree(path: str, name: str, params: dict) -> dict:
        env = {**os.environ, "PYTHONPATH": os.path.abspath(path)}
        cmd = [sys.executable, __file__, "--fit-one", name, "--params", json.dumps(params)]
        out = subprocess.run(
            [*cmd, "--data", args.data, "--work", args.work], env=env, check=True, capture_output=True, text=True
        )
        return json.loads(out.stdout.strip().splitlines()[-1])

    from sklearn.multiclass import OneVsRestClassifier
    from sklearn.svm import LinearSVC

    params = json.loads(args.params)
    trees = [t.split("=", 1) for t in args.trees]
    for name in args.sets.split(","):
        X, y, Xt, yt = load_set(name, args.data, args.work)
        multilabel = hasattr(y, "tocsr")
        start, cpu = time.perf_counter(), time.process_time()
        svc = (OneVsRestClassifier(LinearSVC(C=1.0)) if multilabel else LinearSVC(C=1.0)).fit(X, y)
        svc_s, svc_cpu = time.perf_counter() - start, time.process_time() - cpu
        svc_score = score(svc, Xt, yt)
        print(
            f"{name} | {X.shape[0]} x {X.shape[1]} | LinearSVC | score {svc_score:.4f} | {svc_s:.2f} s, cpu "
            f"{svc_cpu:.2f} s",
            flush=True,
        )
        f_star = None
        if args.reference:
            reference = {**params, "mode": "memory", "tol": 1e-7, "max_iter": 2000}
            f_star = run_tree(trees[-1][1], name, reference)["objective"]
        for label, path in trees:
            r = run_tree(path, name, params)
            excess = "" if f_star is None else f" | (F - F*)/F* {(r['objective'] - f_star) / f_star:.1e}"
            print(
                f"{name} | {label} | score {r['score']:.4f} ({100 * (r['score'] - svc_score):+.2f}) | "
                f"{r['wall']:.2f} s ({r['wall'] / svc_s:.1f}x), cpu {r['cpu']:.2f} s ({r['cpu'] / svc_cpu:.1f}x) | iterations "
                f"{r['iterations']}, converged {r['converged']} | F {r['objective']:.8g}{excess} | "
                f"non-zero rows {r['nnz_rows']}",
                flush=True,
            )
            if args.trace:
                points = []
                for k in (1, 2, 5, 10, 20, 50, 100, 200):
                    if k <= len(r["trace"]):
                        f, passes = r["trace"][k - 1]
                        value = f"{f:.8g}" if f_star is None else f"{(f - f_star) / f_star:.1e}"
                        points.append(f"{k}: {value}" + ("" if passes is None else f" ({passes} passes)"))
                what = "F" if f_star is None else "(F - F*)/F*"
                print(f"{name} | {label} | {what} at outer iteration " + ", ".join(points), flush=True)


if __name__ == "__main__":
    main()
