"""bcd's penalty and λ on text and numeric sets beside scikit-learn's LinearSVC (C = 1, one-vs-rest
squared hinge) in the same run: the measurement behind bcd's default (group_elasticnet, ρ = 0.2,
lam None = 1/((1 − ρ)n); docs/benchmarks.md, "bcd's default on text").

Each configuration is a JSON object of BCDClassifier parameters ({} = the defaults); "lam_n": c
sets lam = c/n for the set's n training rows. Sets: the stores of tools/bench_defaults.py
(news20, news20-half, news20-5, news20-10, sector, sector-23, ..., ingested into --work as
there) and the LIBSVM numeric sets satimage, pendigits, letter, dna read from --data. The
estimator fits in process on the store's rows as scipy arrays; one line per (set, configuration):
test accuracy, fit seconds, outer iterations, converged, non-zero rows of W, and Δ points and
time ratio against LinearSVC.

    python tools/bench_bcd_defaults.py --sets news20-5,satimage [--work DIR] [--data DIR]
        [--configs '{}' '{"penalty": "l1/l2", "lam": 1e-3}']
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import warnings

import numpy as np
import scipy.sparse as sp

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
LIBSVM = {"satimage": "satimage.scale", "pendigits": "pendigits", "letter": "letter.scale", "dna": "dna.scale"}


def load(name: str, data: str, work: str):
    """(X, y, X_test, y_test) as float64 CSR with int32 indices (what LinearSVC accepts)."""
    if name in LIBSVM:
        from sklearn.datasets import load_svmlight_files

        base = os.path.join(data, "libsvm", name, LIBSVM[name])
        X, y, Xt, yt = load_svmlight_files([base + ".gz", base + ".t.gz"])
    else:
        from bench_defaults import ingest

        from streamfit.store import open_store

        train, test = ingest(name, data, work)
        (X, y), (Xt, yt) = open_store(train).to_scipy(), open_store(test).to_scipy()
    out = []
    for A in (X, Xt):
        A = sp.csr_matrix(A, dtype=np.float64)
        out.append(sp.csr_matrix((A.data, A.indices.astype(np.int32), A.indptr.astype(np.int32)), shape=A.shape))
    return out[0], np.asarray(y), out[1], np.asarray(yt)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="news20-5,satimage")
    ap.add_argument("--configs", nargs="*", default=["{}", '{"penalty": "l1/l2", "lam": 1e-3}'])
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "shared", "data"))
    ap.add_argument("--work", default="/tmp/bench_bcd_defaults")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)

    from sklearn.svm import LinearSVC

    from streamfit.estimators import BCDClassifier

    warnings.simplefilter("ignore")
    for name in args.sets.split(","):
        X, y, Xt, yt = load(name, args.data, args.work)
        start = time.perf_counter()
        svc = LinearSVC(C=1.0).fit(X, y)
        svc_s = time.perf_counter() - start
        svc_acc = float(np.mean(svc.predict(Xt) == yt))
        svc_rows = int(np.count_nonzero(np.any(svc.coef_ != 0, axis=0)))
        print(
            f"{name} | {X.shape[0]} x {X.shape[1]}, {len(np.unique(y))} classes | LinearSVC | accuracy "
            f"{svc_acc:.4f} | {svc_s:.1f} s | non-zero columns {svc_rows}",
            flush=True,
        )
        for text in args.configs:
            params = json.loads(text)
            if "lam_n" in params:
                params["lam"] = params.pop("lam_n") / X.shape[0]
            start = time.perf_counter()
            clf = BCDClassifier(**params).fit(X, y)
            seconds = time.perf_counter() - start
            acc = float(np.mean(clf.predict(Xt) == yt))
            info = clf.model_.info
            print(
                f"{name} | bcd {text} | accuracy {acc:.4f} ({100 * (acc - svc_acc):+.2f}) | {seconds:.1f} s "
                f"({seconds / svc_s:.1f}x) | iterations {clf.n_iter_}, converged {info['converged']} | lam "
                f"{info['lam']:.3g} | non-zero rows {info['nnz_rows']} ({info['nnz_rows'] / max(svc_rows, 1):.3f})",
                flush=True,
            )


if __name__ == "__main__":
    main()
