"""multiboost's defaults on sparse text beside its peer, LightGBM with stumps, and beside one-vs-rest
LinearSVC (issue 20; docs/benchmarks.md, "multiboost on text", session 24).

Is multiboost's gap to LinearSVC on tf-idf text the model class (boosted stumps) or ours? Every
method runs on the same split in this process, one thread, its CPU seconds (`time.process_time`):

- ours:       MultiBoostClassifier() (the defaults: MultiBoostcw-1, 100 iterations, K stumps each);
- ours_T:     (for each T of --iters beyond 100) MultiBoostClassifier(max_iter=T);
- lgbm_stumps: LightGBM multiclass, num_leaves=2 (K stumps a round), learning rate 0.1 and
              100 rounds (tools/bench_multiboost.py's setting: as many rounds as our iterations),
              and, for each T of --iters, T rounds;
- lgbm_default: LightGBM's own defaults (num_leaves=31, learning rate 0.1, 100 rounds), multiclass;
- linsvc:     scikit-learn's LinearSVC() (C = 1, one-vs-rest squared hinge).

Sets (TfidfVectorizer(sublinear_tf=True) fitted on the training documents, unit rows, unless named):
- r8like, ohsumedlike: tools/bench_walkthrough.py's stand-ins (as tools/bench_defaults_small.py);
- news4: 20 Newsgroups' bydate split, alt.atheism, comp.graphics, sci.space, talk.religion.misc;
  newscomp: its five comp.* groups; newsrec: its four rec.* groups; news20: all 20 groups;
- sector: LIBSVM's sector.scale (tf-idf, unit rows; 6412 / 3207 rows, 105 classes);
- sector-N-sS: N random training rows of sector (seed S), tested on the whole test file;
- dense sets (for the warning's rule): dna, satimage, pendigits, letter, digits, mnist5k (as
  tools/bench_multiboost.py loads them, whole training sets).

    python tools/bench_multiboost_text.py [--sets r8like,ohsumedlike,...] [--methods ours,lgbm_stumps,...]
        [--iters 100,500] [--data /work/shared/data] [--jsonl FILE] [-p param=value ...]

One line per (set, method): test accuracy, CPU seconds, and ratios against LinearSVC and
LightGBM stumps at 100 rounds from the same run; plus the data's shape (rows, columns used,
stored entries per row, density of the used columns) that the CLI's warning rule reads.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tarfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
NEWS = {
    "news4": ("alt.atheism", "comp.graphics", "sci.space", "talk.religion.misc"),
    "newscomp": (
        "comp.graphics",
        "comp.os.ms-windows.misc",
        "comp.sys.ibm.pc.hardware",
        "comp.sys.mac.hardware",
        "comp.windows.x",
    ),
    "newsrec": ("rec.autos", "rec.motorcycles", "rec.sport.baseball", "rec.sport.hockey"),
    "news20": None,
}
DENSE = ("dna", "satimage", "pendigits", "letter", "digits", "mnist5k")
_news_cache: dict = {}


def _news(data: Path, groups):
    if "docs" not in _news_cache:
        docs: dict[str, list] = {"train": [], "test": []}
        with tarfile.open(data / "20newsgroups" / "20news-bydate.tar.gz") as tar:
            for member in tar:
                parts = member.name.split("/")
                handle = tar.extractfile(member) if member.isfile() else None
                if handle is not None and len(parts) == 3:
                    docs[parts[0].rsplit("-", 1)[1]].append((parts[1], handle.read().decode("latin-1")))
        _news_cache["docs"] = docs
    docs = _news_cache["docs"]
    pick = {p: [(g, t) for g, t in docs[p] if groups is None or g in groups] for p in ("train", "test")}
    return (
        [t for _, t in pick["train"]],
        np.array([g for g, _ in pick["train"]]),
        [t for _, t in pick["test"]],
        np.array([g for g, _ in pick["test"]]),
    )


def load(data: Path, name: str):
    """(Xtr, ytr, Xte, yte) with integer labels 0..K-1."""
    from sklearn.feature_extraction.text import TfidfVectorizer

    sys.path.insert(0, str(ROOT / "tools"))
    if name in ("r8like", "ohsumedlike"):
        import bench_defaults_small as bds

        Xtr, ytr, Xte, yte = bds.load(data, name)
    elif name in NEWS:
        tr, ytr, te, yte = _news(data, NEWS[name])
        vec = TfidfVectorizer(sublinear_tf=True).fit(tr)
        Xtr, Xte = vec.transform(tr), vec.transform(te)
    elif name.startswith("sector"):
        from sklearn.datasets import load_svmlight_file

        folder = data / "libsvm" / "sector"
        Xtr, ytr = load_svmlight_file(str(folder / "sector.scale.bz2"), n_features=55197)
        Xte, yte = load_svmlight_file(str(folder / "sector.t.scale.bz2"), n_features=55197)
        parts = name.split("-")
        if len(parts) == 3:
            rows = np.random.default_rng(int(parts[2][1:])).permutation(Xtr.shape[0])[: int(parts[1])]
            Xtr, ytr = Xtr[rows], ytr[rows]
            keep = np.isin(yte, ytr)
            Xte, yte = Xte[keep], yte[keep]
    elif name in DENSE:
        import bench_multiboost as bm

        Xtr, ytr, Xte, yte = bm.load("mnist" if name == "mnist5k" else name, 0)
    else:
        raise SystemExit(f"unknown set {name!r}")
    classes, ytr = np.unique(ytr, return_inverse=True)
    keep = np.isin(yte, classes)
    Xte, yte = Xte[keep], np.searchsorted(classes, yte[keep])
    Xtr, Xte = sp.csr_matrix(Xtr, dtype=np.float64), sp.csr_matrix(Xte, dtype=np.float64)
    for X in (Xtr, Xte):  # scikit-learn's LIBSVM reader gives 64-bit indices, which LinearSVC refuses
        X.indices, X.indptr = X.indices.astype(np.int32), X.indptr.astype(np.int32)
    return Xtr, ytr, Xte, yte


def shape(X) -> dict:
    """What the CLI's rule reads: rows, columns used, mean stored entries per row, and their share."""
    X = sp.csr_matrix(X)
    used = int(np.count_nonzero(np.diff(X.tocsc().indptr)))
    per_row = X.nnz / max(X.shape[0], 1)
    return {"rows": X.shape[0], "used": used, "per_row": per_row, "density": per_row / max(used, 1)}


def run(method: str, T: int, Xtr, ytr, Xte, yte, params: dict) -> tuple[float, float, dict]:
    K = int(ytr.max()) + 1
    extra: dict = {}
    t = time.process_time()
    if method == "ours":
        from streamfit import MultiBoostClassifier

        est = MultiBoostClassifier(**{"max_iter": T, **params}).fit(Xtr, ytr)
        seconds = time.process_time() - t
        pred = est.predict(Xte)
        extra["iterations"] = est.n_iter_
    elif method in ("lgbm_stumps", "lgbm_default"):
        import lightgbm as lgb

        p = {"objective": "multiclass", "num_class": K, "num_threads": 1, "verbose": -1, "seed": 0}
        if method == "lgbm_stumps":
            p["num_leaves"] = 2
        booster = lgb.train(p, lgb.Dataset(Xtr.astype(np.float32), ytr), num_boost_round=T)
        seconds = time.process_time() - t
        pred = np.argmax(booster.predict(Xte.astype(np.float32)), axis=1)
    elif method == "linsvc":
        from sklearn.svm import LinearSVC

        est = LinearSVC().fit(Xtr, ytr)
        seconds = time.process_time() - t
        pred = est.predict(Xte)
    else:
        raise SystemExit(f"unknown method {method!r}")
    return float(np.mean(pred == yte)), seconds, extra


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="r8like,ohsumedlike,news4,newscomp,sector")
    ap.add_argument("--methods", default="linsvc,lgbm_stumps,lgbm_default,ours")
    ap.add_argument("--iters", default="100", help="rounds of ours and lgbm_stumps (lgbm_default: 100)")
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--jsonl", type=Path)
    ap.add_argument("-p", action="append", default=[], help="param=value (JSON) for ours")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    params = {}
    for item in args.p:
        key, _, value = item.partition("=")
        try:
            params[key] = json.loads(value)
        except json.JSONDecodeError:
            params[key] = value
    iters = [int(t) for t in args.iters.split(",")]
    from sklearn.datasets import load_iris

    from streamfit import MultiBoostClassifier

    MultiBoostClassifier(max_iter=3).fit(*load_iris(return_X_y=True))  # numba's kernels compiled first
    for name in args.sets.split(","):
        Xtr, ytr, Xte, yte = load(args.data, name)
        info = shape(Xtr)
        K = int(ytr.max()) + 1
        print(
            f"# {name}: n={info['rows']} used={info['used']} per_row={info['per_row']:.1f} "
            f"density={info['density']:.4f} K={K} test={len(yte)}",
            flush=True,
        )
        ref: dict = {}
        for method in args.methods.split(","):
            for T in [100] if method in ("linsvc", "lgbm_default") else iters:
                acc, seconds, extra = run(method, T, Xtr, ytr, Xte, yte, params if method == "ours" else {})
                label = method if T == 100 or method in ("linsvc", "lgbm_default") else f"{method}_{T}"
                ref.setdefault(label, (acc, seconds))
                svc = ref.get("linsvc")
                lg = ref.get("lgbm_stumps")
                vs = ""
                if svc:
                    vs += f"  Δsvc {100 * (acc - svc[0]):+6.2f} t/svc {seconds / max(svc[1], 1e-9):7.2f}"
                if lg and method != "lgbm_stumps":
                    vs += f"  Δlgbm {100 * (acc - lg[0]):+6.2f} t/lgbm {seconds / max(lg[1], 1e-9):6.2f}"
                print(f"{name:12s} {label:18s} acc {acc:.4f}  cpu {seconds:8.2f}{vs} {extra or ''}", flush=True)
                if args.jsonl:
                    with open(args.jsonl, "a") as f:
                        row = dict(set=name, method=label, T=T, acc=acc, seconds=seconds, K=K, **info, **extra)
                        f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
