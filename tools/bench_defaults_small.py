"""Every estimator with its defaults beside scikit-learn's LinearSVC() and LogisticRegression()
(C = 1 both; LogisticRegression with max_iter 1000 so that it converges on unscaled columns) on
data of several shapes and sizes that were not used to choose the defaults (issue 20, session 23):

- libsvm: n = 100, 300 and 1000 random training rows (seeds 0, 1, 2) of the LIBSVM dna, satimage,
  pendigits (raw 0..100) and letter training files, tested on their whole test files
  (`dna-300-s1`: 300 rows, seed 1);
- sklearn: iris, wine, breast_cancer and digits as given and standardized on the training rows
  (`wine-std`), stratified 70/30 splits, seeds 0, 1, 2 (`wine-std-s2`);
- gen: make_classification sets, 70/30 splits, seeds 0, 1, 2: `gen-inform` (500 × 20, 5
  informative, 5 redundant, 3 classes), `gen-noisy` (300 × 100, 5 informative, 95 noise columns,
  3 classes), `gen-imbal` (1000 × 20, 4 informative, 3 classes weighted 0.8 / 0.15 / 0.05),
  `gen-flip` (1000 × 20, 6 informative, 4 classes, 20 % labels flipped), `gen-wide` (200 × 500, 10
  informative, 2 classes), `gen-sparse` (2000 × 2000 at 1 %, 10 classes from a sparse linear model,
  5 % label noise);
- heldout: the sets that were not looked at while stagewise's LAM_ROWS was chosen (HELD_OUT): all
  rows of the four LIBSVM sets, 300 and 1000 random and all rows of sector (tf-idf, 105 classes), 500 and
  2000 random rows of the MNIST test set (the other rows tested), `gen-many` (3000 × 50, 15
  informative, 10 classes, 2 clusters each) and `gen-tiny` (60 × 10, 3 classes), the text stand-ins;
- units (session 24): the sets above with their columns in other units, column j of the training
  and test rows times 10^u_j, u_j uniform in [−3, 3] (seeded by the set's seed): `wine-units-s1`,
  `dna-300-units-s0`; the family `units` is iris, wine, breast_cancer, digits, dna-300,
  satimage-300, letter-300, gen-inform and gen-flip so scaled, seeds 0, 1, 2; `unscaled` is the
  sets whose columns come in raw units: the sklearn four as given, pendigits (0..100) at 300
  and 1000 rows and MNIST (0..255) at 500 rows, seeds 0, 1, 2; `units-heldout`: the sets not looked
  at while stagewise's `standardize` was chosen (pendigits-300, satimage-1000, dna-1000,
  letter-1000, gen-noisy, gen-imbal, gen-many and gen-tiny in other units, gen-many, gen-tiny and
  MNIST-500 as given; seeds 0, 1, 2);
- text: `news` (tests/data/walkthrough's 240 / 90 documents), `r8like` and `ohsumedlike`
  (tools/bench_walkthrough.py's stand-ins from --data's 20 Newsgroups), TfidfVectorizer(sublinear_tf)
  fitted on the training documents; `r8like-300-s0`: 300 random training documents of r8like.

    python tools/bench_defaults_small.py [--sets FAMILY-or-NAME,...] [--solvers stagewise,...]
                                         [--data /work/shared/data] [-p solver.param=value ...]
                                         [--jsonl FILE]

Prints one line per (set, solver): set, n, d, K, solver, test accuracy, LinearSVC's,
LogisticRegression's and StandardScaler-then-LinearSVC's (`svc_std`; without centering on sparse
rows) on the same split (fitted once per set), and Δ points against the first two; with --jsonl
also appends each line as JSON (with the model's generator, calibration and λ for stagewise). `-p stagewise.lam=0.01` passes a parameter to one solver.
Every fit runs in this process (numba's kernels compiled by a warm-up fit on iris first).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import tarfile
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np
import scipy.sparse as sp

ROOT = Path(__file__).resolve().parent.parent
SEEDS = (0, 1, 2)
LIBSVM = {
    "dna": ("dna", "dna.scale.gz", "dna.scale.t.gz", 180),
    "satimage": ("satimage", "satimage.scale.gz", "satimage.scale.t.gz", 36),
    "pendigits": ("pendigits", "pendigits.gz", "pendigits.t.gz", 16),
    "letter": ("letter", "letter.scale.gz", "letter.scale.t.gz", 16),
    "sector": ("sector", "sector.scale.bz2", "sector.t.scale.bz2", 55197),
}
SKLEARN = ("iris", "wine", "breast_cancer", "digits")
GENERATED = ("gen-inform", "gen-noisy", "gen-imbal", "gen-flip", "gen-wide", "gen-sparse")
HELD_OUT = (  # sets not looked at while LAM_ROWS was chosen (docs/benchmarks.md, session 23)
    [f"{s}-{n}-s0" for s, n in (("dna", 2000), ("satimage", 4435), ("pendigits", 7494), ("letter", 15000))]
    + ["sector-300-s0", "sector-1000-s0", "sector-6412-s0", "mnist-500-s0", "mnist-2000-s0"]
    + [f"{g}-s{seed}" for g in ("gen-many", "gen-tiny") for seed in SEEDS]
    + ["r8like", "ohsumedlike", "r8like-300-s0", "r8like-300-s1", "ohsumedlike-300-s0"]
)
UNITS = ("iris", "wine", "breast_cancer", "digits", "dna-300", "satimage-300", "letter-300", "gen-inform", "gen-flip")
UNITS_HELD_OUT = (  # not looked at while stagewise's standardize was chosen (session 24)
    ["pendigits-300-units", "satimage-1000-units", "dna-1000-units", "letter-1000-units"]
    + ["gen-noisy-units", "gen-imbal-units", "gen-many-units", "gen-tiny-units", "gen-many", "gen-tiny", "mnist-500"]
)
UNSCALED = ("iris", "wine", "breast_cancer", "digits", "pendigits-300", "pendigits-1000", "mnist-500")
TEXT = ("news", "r8like", "ohsumedlike", "r8like-300-s0", "r8like-300-s1", "ohsumedlike-300-s0")
SOLVERS = ("stagewise", "bcd", "ppdsparse", "fbpd", "multiboost")


def family(name: str) -> list[str]:
    """The set names a family stands for (`libsvm`, `sklearn`, `gen`, `text`), or [name]."""
    if name == "libsvm":
        return [f"{s}-{n}-s{seed}" for s in LIBSVM if s != "sector" for n in (100, 300, 1000) for seed in SEEDS]
    if name == "sklearn":
        return [f"{s}{v}-s{seed}" for s in SKLEARN for v in ("", "-std") for seed in SEEDS]
    if name == "gen":
        return [f"{g}-s{seed}" for g in GENERATED for seed in SEEDS]
    if name == "text":
        return list(TEXT)
    if name == "heldout":
        return list(HELD_OUT)
    if name == "units":
        return [f"{s}-units-s{seed}" for s in UNITS for seed in SEEDS]
    if name == "units-heldout":
        return [f"{s}-s{seed}" for s in UNITS_HELD_OUT for seed in SEEDS]
    if name == "unscaled":
        return [f"{s}-s{seed}" for s in UNSCALED for seed in SEEDS]
    return [name]


_cache: dict = {}


def _libsvm(data: Path, name: str):
    if name not in _cache:
        from sklearn.datasets import load_svmlight_file

        folder, train, test, d = LIBSVM[name]
        X, y = load_svmlight_file(str(data / "libsvm" / folder / train), n_features=d)
        Xt, yt = load_svmlight_file(str(data / "libsvm" / folder / test), n_features=d)
        _cache[name] = (X.tocsr(), y.astype(int), Xt.tocsr(), yt.astype(int))
    return _cache[name]


def _generated(kind: str, seed: int):
    from sklearn.datasets import make_classification

    if kind == "gen-inform":
        return make_classification(500, 20, n_informative=5, n_redundant=5, n_classes=3, random_state=seed)
    if kind == "gen-noisy":
        return make_classification(300, 100, n_informative=5, n_redundant=0, n_classes=3, random_state=seed)
    if kind == "gen-imbal":
        return make_classification(1000, 20, n_informative=4, n_classes=3, weights=[0.8, 0.15, 0.05], random_state=seed)
    if kind == "gen-flip":
        return make_classification(1000, 20, n_informative=6, n_classes=4, flip_y=0.2, random_state=seed)
    if kind == "gen-wide":
        return make_classification(200, 500, n_informative=10, n_redundant=0, random_state=seed)
    if kind == "gen-many":
        return make_classification(
            3000, 50, n_informative=15, n_redundant=5, n_classes=10, n_clusters_per_class=2, random_state=seed
        )
    if kind == "gen-tiny":
        return make_classification(60, 10, n_informative=4, n_redundant=2, n_classes=3, random_state=seed)
    if kind == "gen-sparse":
        rng = np.random.default_rng(seed)
        n, d, k = 2000, 2000, 10
        X = sp.random(n, d, density=0.01, format="csr", random_state=seed, data_rvs=lambda m: rng.exponential(size=m))
        W = rng.normal(size=(d, k)) * (rng.random((d, k)) < 0.1)
        y = np.asarray(X @ W).argmax(axis=1)
        noisy = rng.random(n) < 0.05
        y[noisy] = rng.integers(k, size=noisy.sum())
        return X, y
    raise SystemExit(f"unknown generated set {kind!r}")


def _documents(data: Path, name: str):
    """(train texts, train labels, test texts, test labels) of a text stand-in."""
    if name in _cache:
        return _cache[name]
    if name == "news":

        def read(file):
            with gzip.open(ROOT / "tests" / "data" / "walkthrough" / file, "rt", encoding="utf-8") as f:
                rows = [line.rstrip("\n").split("\t") for line in f]
            return [r[2] for r in rows], np.array([r[0] for r in rows])

        _cache[name] = (*read("news-train.txt.gz"), *read("news-test.txt.gz"))
        return _cache[name]
    sys.path.insert(0, str(ROOT / "tools"))
    import bench_walkthrough as bw

    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        if name == "r8like":
            bw.write_r8like(data, work)
            out = []
            for split in ("train", "test"):
                with gzip.open(work / f"r8like-{split}.txt.gz", "rt", encoding="utf-8") as f:
                    rows = [line.rstrip("\n").split("\t", 1) for line in f]
                out += [[r[1] for r in rows], np.array([r[0] for r in rows])]
        else:
            bw.write_ohsumedlike(data, work)
            texts: dict[str, tuple[list, list]] = {"training": ([], []), "test": ([], [])}
            with tarfile.open(work / "ohsumedlike.tar.gz") as tar:
                for member in tar:
                    parts = member.name.split("/")
                    handle = tar.extractfile(member)
                    if member.isfile() and handle is not None:
                        texts[parts[1]][0].append(handle.read().decode("utf-8"))
                        texts[parts[1]][1].append(parts[2])
            out = [texts["training"][0], np.array(texts["training"][1]), texts["test"][0], np.array(texts["test"][1])]
    _cache[name] = tuple(out)
    return _cache[name]


def load(data: Path, name: str):
    """(Xtr, ytr, Xte, yte) of a set name (see the module docstring)."""
    if "-units-" in name:  # the set's columns in other units: column j times 10^u_j, u_j ~ U[−3, 3]
        Xtr, ytr, Xte, yte = load(data, name.replace("-units-", "-"))
        seed = int(name.split("-")[-1][1:])
        units = 10.0 ** np.random.default_rng([seed, 24]).uniform(-3, 3, size=Xtr.shape[1])
        if sp.issparse(Xtr):
            return sp.csr_matrix(Xtr @ sp.diags(units)), ytr, sp.csr_matrix(Xte @ sp.diags(units)), yte
        return Xtr * units, ytr, Xte * units, yte
    from sklearn.model_selection import train_test_split

    parts = name.split("-")
    seed = int(parts[-1][1:]) if parts[-1].startswith("s") and parts[-1][1:].isdigit() else 0
    if parts[0] in LIBSVM:
        X, y, Xt, yt = _libsvm(data, parts[0])
        rows = np.random.default_rng(seed).permutation(X.shape[0])[: int(parts[1])]
        return X[rows], y[rows], Xt, yt
    if parts[0] == "mnist":  # the MNIST test set only: n random rows to train on, the others tested
        import h5py

        with h5py.File(data / "mnist_test_only" / "mnist-t10k.h5") as f:
            X, y = f["X"][:].astype(np.float64), f["y"][:]
        rows = np.random.default_rng(seed).permutation(len(y))
        train, test = rows[: int(parts[1])], rows[int(parts[1]) :]
        return X[train], y[train], X[test], y[test]
    if parts[0] in ("iris", "wine", "breast_cancer", "digits") or name.startswith("breast_cancer"):
        from sklearn import datasets

        base = "breast_cancer" if name.startswith("breast_cancer") else parts[0]
        X, y = getattr(datasets, f"load_{base}")(return_X_y=True)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
        if "-std-" in name:
            from sklearn.preprocessing import StandardScaler

            scaler = StandardScaler().fit(Xtr)
            Xtr, Xte = scaler.transform(Xtr), scaler.transform(Xte)
        return Xtr, ytr, Xte, yte
    if name.startswith("gen-"):
        X, y = _generated("-".join(parts[:2]), seed)
        Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
        return Xtr, ytr, Xte, yte
    if parts[0] in ("news", "r8like", "ohsumedlike"):
        from sklearn.feature_extraction.text import TfidfVectorizer

        tr, ytr, te, yte = _documents(data, parts[0])
        if len(parts) == 3:
            rows = np.random.default_rng(seed).permutation(len(tr))[: int(parts[1])]
            tr, ytr = [tr[i] for i in rows], ytr[rows]
            keep = np.isin(yte, ytr)  # test documents of a class no training document has: dropped
            te, yte = [t for t, k in zip(te, keep) if k], yte[keep]
        vec = TfidfVectorizer(sublinear_tf=True).fit(tr)
        return vec.transform(tr), ytr, vec.transform(te), yte
    raise SystemExit(f"unknown set {name!r}")


def estimator(solver: str, params: dict, n: int = 0):
    """The solver's estimator with `params[solver]`; a value "C/n" (a string) is C divided by the
    training rows n, at least 1e-4 (the study of a λ that scales with n)."""
    import streamfit

    kwargs = dict(params.get(solver, {}))
    for key, value in kwargs.items():
        if isinstance(value, str) and value.endswith("/n"):
            kwargs[key] = max(1e-4, float(value[:-2]) / max(n, 1))

    cls = {
        "stagewise": streamfit.StagewiseLSClassifier,
        "bcd": streamfit.BCDClassifier,
        "ppdsparse": streamfit.PPDSparseClassifier,
        "fbpd": streamfit.FBPDClassifier,
        "multiboost": streamfit.MultiBoostClassifier,
    }[solver]
    return cls(**kwargs)


def parse_params(items: list[str]) -> dict:
    params: dict = {}
    for item in items:
        key, _, value = item.partition("=")
        solver, _, name = key.partition(".")
        try:
            parsed = json.loads(value)
        except json.JSONDecodeError:
            parsed = value
        params.setdefault(solver, {})[name] = parsed
    return params


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="libsvm,sklearn,gen,text")
    ap.add_argument("--solvers", default=",".join(SOLVERS))
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("-p", action="append", default=[], help="solver.param=value (JSON value)")
    ap.add_argument("--jsonl", type=Path)
    ap.add_argument("--lam-rows", type=float, help="stagewise's LAM_ROWS for lam None (the study of its value)")
    args = ap.parse_args()
    if args.lam_rows is not None:
        import streamfit.solvers.stagewise as stagewise

        stagewise.LAM_ROWS = args.lam_rows
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.svm import LinearSVC

    warnings.simplefilter("ignore")
    solvers = args.solvers.split(",")
    params = parse_params(args.p)
    Xw, yw, _, _ = load(args.data, "iris-s0")
    for s in solvers:  # compile the kernels before anything is timed
        estimator(s, params, len(yw)).fit(Xw, yw)
    print(
        f"{'set':22s} {'n':>5s} {'d':>6s} {'K':>3s} {'solver':10s} {'ours':>7s} {'LinSVC':>7s} {'LogReg':>7s} "
        f"{'SVCstd':>7s} {'Δsvc':>6s} {'Δlr':>6s} {'fit s':>6s}"
    )
    for name in [s for f in args.sets.split(",") for s in family(f)]:
        Xtr, ytr, Xte, yte = load(args.data, name)
        n, d, k = Xtr.shape[0], Xtr.shape[1], len(np.unique(ytr))
        svc = float(LinearSVC().fit(Xtr, ytr).score(Xte, yte))
        lr = float(LogisticRegression(max_iter=1000).fit(Xtr, ytr).score(Xte, yte))
        scaled_svc = make_pipeline(StandardScaler(with_mean=not sp.issparse(Xtr)), LinearSVC())
        svc_std = float(scaled_svc.fit(Xtr, ytr).score(Xte, yte))
        for s in solvers:
            t = time.process_time()
            est = estimator(s, params, n).fit(Xtr, ytr)
            seconds = time.process_time() - t
            acc = float(np.mean(est.predict(Xte) == yte))
            row = dict(set=name, n=n, d=d, K=k, solver=s, ours=acc, svc=svc, lr=lr, svc_std=svc_std, seconds=seconds)
            info = est.model_.info
            row.update({key: info[key] for key in ("generator", "calibration", "lam", "standardized") if key in info})
            print(
                f"{name:22s} {n:5d} {d:6d} {k:3d} {s:10s} {acc:7.4f} {svc:7.4f} {lr:7.4f} {svc_std:7.4f} "
                f"{100 * (acc - svc):+6.2f} {100 * (acc - lr):+6.2f} {seconds:6.2f}",
                flush=True,
            )
            if args.jsonl:
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps(row) + "\n")


if __name__ == "__main__":
    main()
