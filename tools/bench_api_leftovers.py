"""The measurements of docs/benchmarks.md, "The Python-API check's leftovers, session 21":

- fbpd-dense: FBPDClassifier() on unscaled dense sets (scikit-learn's wine and breast_cancer as
  given, a generated set whose column j is scaled by 10^(j−3), diabetes' raw columns with the
  target cut into terciles), 75/25 stratified splits, seeds 0–2: test accuracy beside
  LinearSVC(), fit CPU seconds after a 2-iteration warm-up fit, and HiGHS' optimum of the
  problem the fit solved at the fit's λ (tools/bench_fbpd.py's lp_solution, with the column
  weights of a standardized fit) with that LP model's accuracy;
- fbpd-text: FBPDClassifier() on 8 groups of 20 Newsgroups (bydate train / test, TfidfVectorizer
  with sublinear tf and min_df 2), each run in a fresh interpreter, the package under --main and
  this checkout alternating, two rounds: CPU seconds, accuracy and the SHA-256 of coef_ and
  intercept_ (the same bits mean the same model);
- stagewise-small: StagewiseLSClassifier at λ 1e-4 (the default), 1/n, 1e-3 and 1e-2 beside
  LinearSVC and RidgeClassifier (alpha 1) on 400 random rows of the LIBSVM dna, satimage,
  pendigits and letter training files (tested on their test files), the first 400, 1000 and
  2000 rows of dna, and session 20's split of tests/data/dna400.libsvm.

    python tools/bench_api_leftovers.py --part fbpd-dense
    python tools/bench_api_leftovers.py --part fbpd-text --main /path/to/main/checkout
    python tools/bench_api_leftovers.py --part stagewise-small [--data /work/shared/data]

Run a part under another checkout's package with PYTHONPATH (fbpd-dense: main then this one).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
NEWS_GROUPS = [
    "comp.graphics",
    "rec.autos",
    "sci.med",
    "talk.politics.guns",
    "soc.religion.christian",
    "sci.space",
    "rec.sport.hockey",
    "comp.windows.x",
]


def dense_sets() -> dict:
    from sklearn.datasets import load_breast_cancer, load_diabetes, load_wine, make_classification

    X, y = make_classification(n_samples=600, n_features=12, n_informative=6, n_classes=3, random_state=0)
    Xd, t = load_diabetes(return_X_y=True, scaled=False)
    return {
        "wine": load_wine(return_X_y=True),
        "breast_cancer": load_breast_cancer(return_X_y=True),
        "classif-scaled": (X * 10.0 ** np.arange(-3, 9), y),
        "diabetes-binned": (Xd, np.digitize(t, np.quantile(t, [1 / 3, 2 / 3]))),
    }


def fbpd_dense() -> None:
    from sklearn.model_selection import train_test_split
    from sklearn.svm import LinearSVC

    from streamfit import FBPDClassifier

    sys.path.insert(0, str(ROOT / "tools"))
    from bench_fbpd import lp_solution

    for name, (X, y) in dense_sets().items():
        for seed in range(3):
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=seed, stratify=y)
            svc = LinearSVC().fit(Xtr, ytr).score(Xte, yte)
            FBPDClassifier(max_iter=2).fit(Xtr, ytr)  # compiles the kernels
            t = time.process_time()
            clf = FBPDClassifier().fit(Xtr, ytr)
            seconds = time.process_time() - t
            info = clf.model_.info
            _, W, b, optimum = lp_solution(Xtr, ytr, info["lam"], getattr(clf, "_column_scale", None))
            lp_accuracy = np.mean(clf.classes_[np.argmax(Xte @ W + b, axis=1)] == yte)
            objective = clf.history_[-1]["objective"]
            print(
                f"{name} seed {seed}: fbpd {clf.score(Xte, yte):.4f} LinearSVC {svc:.4f} LP's model {lp_accuracy:.4f} "
                f"objective {objective:.5f} LP {optimum:.5f} excess {(objective - optimum) / optimum:+.2%} "
                f"iterations {clf.n_iter_} lam {info['lam']:.4g} standardized {info.get('standardized', False)} "
                f"cpu {seconds:.2f} s",
                flush=True,
            )


_TEXT_FIT = """
import hashlib, pickle, sys, time, warnings
import numpy as np
import scipy.sparse as sp
warnings.simplefilter("ignore")
import streamfit
from streamfit import FBPDClassifier
Xtr, ytr, Xte, yte = pickle.load(open(sys.argv[1], "rb"))
FBPDClassifier(max_iter=2).fit(Xtr[::20], ytr[::20])
t = time.process_time()
clf = FBPDClassifier().fit(Xtr, ytr)
cpu = time.process_time() - t
coef = clf.coef_.toarray() if sp.issparse(clf.coef_) else clf.coef_
digest = hashlib.sha256(np.ascontiguousarray(coef).tobytes() + np.asarray(clf.intercept_).tobytes()).hexdigest()
print(f"{streamfit.__file__}: accuracy {clf.score(Xte, yte):.4f} cpu {cpu:.2f} s sha256 {digest[:16]}")
"""


def fbpd_text(data: Path, main: Path) -> None:
    import pickle
    import tarfile

    from sklearn.feature_extraction.text import TfidfVectorizer

    docs: dict[str, tuple[list, list]] = {"train": ([], []), "test": ([], [])}
    with tarfile.open(data / "20newsgroups" / "20news-bydate.tar.gz") as tar:
        for member in tar:
            parts = member.name.split("/")
            if member.isfile() and parts[1] in NEWS_GROUPS:
                split = "train" if parts[0].endswith("train") else "test"
                docs[split][0].append(tar.extractfile(member).read().decode("latin-1"))  # type: ignore[union-attr]
                docs[split][1].append(parts[1])
    vectorizer = TfidfVectorizer(sublinear_tf=True, min_df=2)
    Xtr, Xte = vectorizer.fit_transform(docs["train"][0]), vectorizer.transform(docs["test"][0])
    with tempfile.TemporaryDirectory() as folder:
        rows = os.path.join(folder, "news8.pkl")
        with open(rows, "wb") as f:
            pickle.dump((Xtr, np.array(docs["train"][1]), Xte, np.array(docs["test"][1])), f)
        print(f"{Xtr.shape[0]} training × {Xtr.shape[1]} columns, {Xte.shape[0]} test rows", flush=True)
        for round_ in range(2):
            for label, path in (("main", main), ("this checkout", ROOT)):
                env = dict(os.environ, PYTHONPATH=str(path), OPENBLAS_NUM_THREADS="1")
                # run from the temporary folder: `python -c` puts its working folder first on sys.path
                out = subprocess.run(
                    [sys.executable, "-c", _TEXT_FIT, rows], env=env, capture_output=True, text=True, cwd=folder
                )
                print(f"round {round_} {label}: {out.stdout.strip()} {out.stderr.strip()[-300:]}", flush=True)


def stagewise_small(data: Path) -> None:
    from sklearn.datasets import load_svmlight_file
    from sklearn.linear_model import RidgeClassifier
    from sklearn.model_selection import train_test_split
    from sklearn.svm import LinearSVC

    from streamfit import StagewiseLSClassifier

    libsvm = data / "libsvm"

    def read(name: str, train: str, test: str, n_features=None):
        X, y = load_svmlight_file(str(libsvm / name / train), n_features=n_features)
        Xt, yt = load_svmlight_file(str(libsvm / name / test), n_features=X.shape[1])
        return X, y, Xt, yt

    dna = read("dna", "dna.scale.gz", "dna.scale.t.gz", 180)
    sets = {f"dna, first {n} rows": (dna[0][:n], dna[1][:n], dna[2], dna[3]) for n in (400, 1000, 2000)}
    X, y = load_svmlight_file(str(ROOT / "tests" / "data" / "dna400.libsvm"), n_features=180)
    Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.25, random_state=0, stratify=y)
    sets["dna400, session 20's split"] = (Xtr, ytr, Xte, yte)
    for name, files in (
        ("dna", ("dna.scale.gz", "dna.scale.t.gz")),
        ("satimage", ("satimage.scale.gz", "satimage.scale.t.gz")),
        ("pendigits", ("pendigits.gz", "pendigits.t.gz")),
        ("letter", ("letter.scale.gz", "letter.scale.t.gz")),
    ):
        X, y, Xt, yt = dna if name == "dna" else read(name, *files)
        rows = np.random.default_rng(0).permutation(X.shape[0])[:400]
        sets[f"{name}, 400 random rows"] = (X[rows], y[rows], Xt, yt)
    for name, (X, y, Xt, yt) in sets.items():
        n = X.shape[0]
        line = [
            f"LinearSVC {LinearSVC().fit(X, y).score(Xt, yt):.4f}",
            f"Ridge {RidgeClassifier().fit(X, y).score(Xt, yt):.4f}",
        ]
        for lam in (1e-4, 1.0 / n, 1e-3, 1e-2):
            clf = StagewiseLSClassifier(lam=lam).fit(X, y)
            line.append(f"stagewise lam {lam:.2g} {clf.score(Xt, yt):.4f} ({clf.model_.info.get('generator')})")
        print(f"{name} ({n} rows): " + ", ".join(line), flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["fbpd-dense", "fbpd-text", "stagewise-small"], required=True)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--main", type=Path, help="fbpd-text: the checkout whose package is compared with this one")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    if args.part == "fbpd-dense":
        fbpd_dense()
    elif args.part == "fbpd-text":
        if args.main is None:
            ap.error("--part fbpd-text needs --main")
        fbpd_text(args.data, args.main)
    else:
        stagewise_small(args.data)


if __name__ == "__main__":
    main()
