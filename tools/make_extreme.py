"""A synthetic extreme multilabel problem for the K-scaling benchmark of PPDSparse.

Generative model (documented so that the numbers can be reproduced):
- K classes with power-law frequencies: class k (0-based) has weight (k + 1)^(−a), a = `alpha`
  (Zipf; default 1.0, the shape of tag data).
- Each sample draws its number of labels 1 + Poisson(kp − 1) (so k_p, the mean number of
  positive labels per sample, is about `kp` whatever K is) and its labels from the weights,
  without replacement.
- Each class owns `words_per_class` feature ids drawn uniformly from [0, D). A sample's
  features: `words_per_label` draws from each of its labels' words plus `noise` uniform
  words; values 1 + Exponential(1), rows l2-normalized (tf-idf-like, sparse).
So with N fixed, the number of positives per class n_p = N k_p / K falls as K grows (§3.2).

    python tools/make_extreme.py --n 20000 --d 50000 --k 1000 --out extreme.npz
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp


def make_extreme(
    n: int,
    d: int,
    k: int,
    *,
    kp: float = 3.0,
    alpha: float = 1.0,
    words_per_class: int = 20,
    words_per_label: int = 5,
    noise: int = 10,
    seed: int = 0,
) -> tuple[sp.csr_matrix, sp.csr_matrix]:
    """(X n × d CSR float32, Y n × k CSR 0/1 label indicator) as described in the module docstring."""
    rng = np.random.default_rng(seed)
    p = (np.arange(1, k + 1, dtype=np.float64)) ** (-alpha)
    p /= p.sum()
    n_labels = np.minimum(1 + rng.poisson(max(kp - 1.0, 0.0), size=n), k)
    # labels: draw with replacement from p and drop repeats (close to without replacement for small kp)
    label_rows = np.repeat(np.arange(n), n_labels)
    labels = rng.choice(k, size=label_rows.size, p=p)
    Y = sp.csr_matrix((np.ones(labels.size, np.float32), (label_rows, labels)), shape=(n, k))
    Y.data[:] = 1.0  # duplicates summed: back to 0/1
    Y.sum_duplicates()
    Y.data[:] = 1.0
    words = rng.integers(0, d, size=(k, words_per_class))
    rows = np.repeat(label_rows, words_per_label)
    cols = words[np.repeat(labels, words_per_label), rng.integers(0, words_per_class, size=rows.size)]
    noise_rows = np.repeat(np.arange(n), noise)
    rows = np.concatenate([rows, noise_rows])
    cols = np.concatenate([cols, rng.integers(0, d, size=noise_rows.size)])
    vals = 1.0 + rng.exponential(1.0, size=rows.size)
    X = sp.csr_matrix((vals, (rows, cols)), shape=(n, d))
    X.sum_duplicates()
    norms = np.sqrt(np.asarray(X.multiply(X).sum(axis=1)).ravel())
    X = sp.diags(1.0 / np.maximum(norms, 1e-12)) @ X
    return X.astype(np.float32).tocsr(), Y.tocsr()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20000)
    ap.add_argument("--d", type=int, default=50000)
    ap.add_argument("--k", type=int, default=1000)
    ap.add_argument("--kp", type=float, default=3.0)
    ap.add_argument("--alpha", type=float, default=1.0)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", required=True, help=".npz with X_data/X_indices/X_indptr, Y_indices/Y_indptr, shape")
    a = ap.parse_args()
    X, Y = make_extreme(a.n, a.d, a.k, kp=a.kp, alpha=a.alpha, seed=a.seed)
    np.savez_compressed(
        a.out,
        X_data=X.data,
        X_indices=X.indices,
        X_indptr=X.indptr,
        Y_indices=Y.indices,
        Y_indptr=Y.indptr,
        shape=np.array([a.n, a.d, a.k]),
    )
    print(
        f"{a.out}: {a.n} rows, {a.d} features ({X.nnz} non-zeros), {a.k} classes, "
        f"{Y.nnz / a.n:.2f} labels per row, {np.count_nonzero(Y.getnnz(axis=0))} classes used"
    )


if __name__ == "__main__":
    main()
