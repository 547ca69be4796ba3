"""stagewise's softmax link on small dense data: its default λ = 1e-4 beside the identity
link's rule λ = max(1e-4, 10/n) (StagewiseParams.lam_for) and scikit-learn's
LogisticRegression(C = 1), mean test accuracy over seeds 0, 1, 2.

Sets: iris; wine and breast_cancer standardized; digits (70/30 stratified splits); and the
LIBSVM samples dna-300, letter-300, satimage-1000, letter-3000 from /work/shared/data (n
training rows and 1000 test rows drawn per seed).

    OPENBLAS_NUM_THREADS=1 python tools/bench_softmax_lam.py [--data /work/shared/data/libsvm]
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path

import numpy as np
from sklearn.datasets import load_breast_cancer, load_digits, load_iris, load_svmlight_file, load_wine
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler

from streamfit import StagewiseLSClassifier

SEEDS = (0, 1, 2)
LIBSVM_SETS = (
    ("dna-300", "dna/dna.scale.gz", 300),
    ("letter-300", "letter/letter.scale.gz", 300),
    ("satimage-1000", "satimage/satimage.scale.gz", 1000),
    ("letter-3000", "letter/letter.scale.gz", 3000),
)


def splits(data: Path):
    """(name, seed, X_train, y_train, X_test, y_test) for every set and seed."""
    for name, loader in (
        ("iris", load_iris),
        ("wine", load_wine),
        ("breast_cancer", load_breast_cancer),
        ("digits", load_digits),
    ):
        X, y = loader(return_X_y=True)
        if name in ("wine", "breast_cancer"):
            X = StandardScaler().fit_transform(X)
        for seed in SEEDS:
            Xtr, Xte, ytr, yte = train_test_split(X, y, test_size=0.3, random_state=seed, stratify=y)
            yield name, seed, Xtr, ytr, Xte, yte
    for name, rel, n in LIBSVM_SETS:
        if not (data / rel).exists():
            print(f"{name}: {data / rel} not found, skipped")
            continue
        Xs, y = load_svmlight_file(str(data / rel))
        X = Xs.toarray()
        for seed in SEEDS:
            rows = np.random.default_rng(seed).permutation(len(y))[: n + 1000]
            yield name, seed, X[rows[:n]], y[rows[:n]], X[rows[n:]], y[rows[n:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data/libsvm"))
    args = ap.parse_args()
    warnings.filterwarnings("ignore")
    scores: dict[str, dict[str, list[float]]] = {}
    rows: dict[str, int] = {}
    for name, _seed, Xtr, ytr, Xte, yte in splits(args.data):
        n = len(ytr)
        rows[name] = n
        s = scores.setdefault(name, {"logreg": [], "1e-4": [], "10/n": []})
        s["logreg"].append(LogisticRegression(C=1.0, max_iter=5000).fit(Xtr, ytr).score(Xte, yte))
        s["1e-4"].append(StagewiseLSClassifier(link="softmax", lam=1e-4).fit(Xtr, ytr).score(Xte, yte))
        s["10/n"].append(StagewiseLSClassifier(link="softmax", lam=max(1e-4, 10 / n)).fit(Xtr, ytr).score(Xte, yte))
    print("| set | n train | LogisticRegression C=1 | softmax, λ 1e-4 (Δ) | softmax, λ max(1e-4, 10/n) (Δ) |")
    print("|---|---|---|---|---|")
    for name, s in scores.items():
        m = {k: 100 * float(np.mean(v)) for k, v in s.items()}
        print(
            f"| {name} | {rows[name]} | {m['logreg']:.2f} | {m['1e-4']:.2f} ({m['1e-4'] - m['logreg']:+.2f}) "
            f"| {m['10/n']:.2f} ({m['10/n'] - m['logreg']:+.2f}) |"
        )


if __name__ == "__main__":
    main()
