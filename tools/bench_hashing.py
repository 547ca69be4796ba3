"""Single-core throughput of streamfit's FeatureHasher.transform_text vs scikit-learn's HashingVectorizer.

    python tools/bench_hashing.py [--corpus PATH] [--ngram-max 2] [--repeat 3]

The corpus is a .tar.gz whose file members are documents read as latin-1 text (default: the
20 Newsgroups bydate archive under ../shared/data relative to the repo); without it, a generated
English-like corpus is used. Both sides get the same documents, n_features, alternate_sign=True,
lowercase, token pattern \\b\\w\\w+\\b, norm=None. Times are the best of --repeat runs after a
warm-up (so numba compilation is excluded). "identical rows" is the fraction of documents whose
hashed rows are equal (differences come from non-ASCII characters, see transform_text).
"""

from __future__ import annotations

import argparse
import os
import tarfile
import time
from pathlib import Path

import numpy as np
from sklearn.feature_extraction.text import HashingVectorizer

from streamfit.ingest.hashing import FeatureHasher, HashingConfig

REPO = Path(__file__).resolve().parents[1]
DEFAULT_CORPUS = REPO / ".." / "shared" / "data" / "20newsgroups" / "20news-bydate.tar.gz"


def read_corpus(path: Path, prefix: str = "") -> list[str]:
    """Every regular file member of the archive whose name starts with prefix, decoded as latin-1."""
    docs = []
    with tarfile.open(path, "r:gz") as tar:
        for member in tar:
            if member.isfile() and member.name.startswith(prefix):
                docs.append(tar.extractfile(member).read().decode("latin-1"))
    return docs


def generate_corpus(n_docs: int, seed: int = 0) -> list[str]:
    """Zipf-distributed words from a synthetic vocabulary, with punctuation, digits and case."""
    rng = np.random.default_rng(seed)
    letters = np.array(list("etaoinshrdlcumwfgypbvkjxqz"))
    vocab = ["".join(rng.choice(letters, size=rng.integers(1, 12))) for _ in range(50_000)]
    vocab += ["The", "I", "A", "2024", "e-mail", "don't", "U.S.", "x_1", "(c)", "--"]
    probs = 1.0 / np.arange(1, len(vocab) + 1)
    probs /= probs.sum()
    seps = np.array([" "] * 12 + [", ", ". ", "\n", "; ", " - "])
    docs = []
    for length in rng.integers(20, 600, size=n_docs):
        words = rng.choice(len(vocab), size=length, p=probs)
        docs.append("".join(vocab[w] + seps[s] for w, s in zip(words, rng.integers(0, len(seps), size=length))))
    return docs


def best_time(fn, docs, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn(docs)
        best = min(best, time.perf_counter() - t0)
    return best


def make_hashers(n_features: int, n_max: int) -> tuple[FeatureHasher, HashingVectorizer]:
    """Ours and scikit-learn's, set up to produce the same rows on ASCII text."""
    ours = FeatureHasher(HashingConfig(n_features=n_features, ngram_range=(1, n_max)))
    theirs = HashingVectorizer(
        n_features=n_features,
        ngram_range=(1, n_max),
        alternate_sign=True,
        norm=None,
        lowercase=True,
        token_pattern=r"(?u)\b\w\w+\b",
    )
    return ours, theirs


def compare(docs: list[str], n_features: int, n_max: int, repeat: int) -> tuple[float, float, float]:
    """(our seconds, scikit-learn's seconds, fraction of identical rows) hashing docs with
    ngram_range (1, n_max): best of repeat runs after a warm-up on 100 docs."""
    ours, theirs = make_hashers(n_features, n_max)
    ours.transform_text(docs[:100])
    theirs.transform(docs[:100])
    t_ours = best_time(ours.transform_text, docs, repeat)
    t_theirs = best_time(theirs.transform, docs, repeat)

    A = ours.transform_text(docs)
    B = theirs.transform(docs)
    B.eliminate_zeros()
    diff = (A - B).tocsr()
    diff.eliminate_zeros()
    return t_ours, t_theirs, float(np.mean(np.diff(diff.indptr) == 0))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, default=DEFAULT_CORPUS, help=".tar.gz of text documents")
    parser.add_argument("--n-features", type=int, default=2**18)
    parser.add_argument("--ngram-max", type=int, default=2, help="benchmark ngram_range (1, n) for n = 1..this")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--generated-docs", type=int, default=20_000, help="size of the fallback corpus")
    args = parser.parse_args()

    if args.corpus.exists():
        docs = read_corpus(args.corpus)
        name = args.corpus.name
    else:
        print(f"corpus {args.corpus} not found: using generated text")
        docs = generate_corpus(args.generated_docs)
        name = "generated"
    n_bytes = sum(len(d.encode("utf-8")) for d in docs)
    n_ascii = sum(d.isascii() for d in docs)
    print(
        f"corpus: {name}: {len(docs)} docs, {n_bytes / 1e6:.1f} MB (UTF-8), {n_ascii / len(docs):.1%} pure-ASCII docs"
    )
    print(
        f"n_features={args.n_features}, single core, best of {args.repeat}, after warm-up; "
        f"NUMBA_NUM_THREADS={os.environ.get('NUMBA_NUM_THREADS', 'unset')}"
    )
    print()
    print(f"{'ngram':>7} {'impl':>10} {'seconds':>8} {'MB/s':>8} {'docs/s':>9} {'ratio':>6} {'identical rows':>15}")
    for n_max in range(1, args.ngram_max + 1):
        t_ours, t_theirs, identical = compare(docs, args.n_features, n_max, args.repeat)
        for impl, t in (("sklearn", t_theirs), ("streamfit", t_ours)):
            ratio = f"{t_theirs / t:.2f}x" if impl == "streamfit" else ""
            ident = f"{identical:.4f}" if impl == "streamfit" else ""
            print(
                f"{f'(1, {n_max})':>7} {impl:>10} {t:8.3f} {n_bytes / 1e6 / t:8.1f} {len(docs) / t:9.0f} "
                f"{ratio:>6} {ident:>15}"
            )


if __name__ == "__main__":
    main()
