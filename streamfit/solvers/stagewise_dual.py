"""stagewise's fit of real-valued targets on wide data: the exact ridge model in dual form, λ by
leave-one-out (docs/benchmarks.md, "Exact ridge in dual form for wide regression", session 32).

Where real-valued targets are fitted at the default λ (lam None) on wide data — at least
DUAL_WIDE_SHARE · n active columns for DUAL_N_MIN ≤ n ≤ DUAL_N_MAX training rows — the two passes of blocks
stop far from the ridge model they converge to (the first blocks interpolate the targets), and no
single λ suits every data set. There the solver fits, in one step, the point that its stages
converge to with penalty="total" on one block of every active column, the ridge model

    min_{b, W} (1/n) ‖Y − 1bᵀ − XW‖²_F + λ ‖W‖²_F      (Ridge(alpha = nλ), b unpenalised),

at the λ of least exact leave-one-out error. With G = XXᵀ (n × n, summed chunk pair by chunk
pair: `gram_task`), H = I − 11ᵀ/n and K = HGH = X_c X_cᵀ = Q diag(s) Qᵀ (X_c the rows centred
by the column means x̄), for Y_c = Y − 1ȳᵀ:

    A = Q diag(1 / (s + nλ)) Qᵀ Y_c,   W = X_cᵀ A = XᵀA − x̄ (1ᵀA),   b = ȳ − Wᵀx̄,

the training residuals are R = Q diag(nλ / (s + nλ)) Qᵀ Y_c and the leave-one-out residuals
R_i / (1 − h_i), h_i = Σ_k Q_ik² s_k / (s_k + nλ) + 1/n (the hat matrix's diagonal, the
intercept's 1/n included): each row's error when the model is fitted on the other n − 1, as
scikit-learn's RidgeCV computes it (Golub, Heath & Wahba 1979). λ = c · v̄ with v̄ the active
columns' mean variance (any units) and c the point of DUAL_GRID whose leave-one-out squared
error, summed over the rows and targets, is least (ties: the smaller λ). The cost is the n × n
eigendecomposition (about 20 s on one core at n = 4000) and two passes over the data.
"""

from __future__ import annotations

import numpy as np
import scipy.linalg

from streamfit.solvers.stagewise_kernels import single_threaded_blas
from streamfit.store import ChunkSource

DUAL_WIDE_SHARE = 0.5  # the exact fit where the active columns number at least this share of the rows
DUAL_N_MAX = 4000  # ... and the rows at most this many (the n × n eigendecomposition: ~20 s on one core)
DUAL_N_MIN = 3  # ... and at least this many: with one row left out of two, every λ predicts the other row's value
DUAL_GRID = np.logspace(-6, 2, 25)  # c = λ / v̄ tried by leave-one-out, three points a decade
DENSE_PRODUCT_DENSITY = 0.25  # a chunk pair's product as dense BLAS from this share of non-zeros on


def applies(n_rows: int, n_active: int) -> bool:
    """Whether data of n_rows training rows and n_active active columns is wide enough, and
    small enough, for the exact fit (module docstring)."""
    return n_active >= DUAL_WIDE_SHARE * n_rows and DUAL_N_MIN <= n_rows <= DUAL_N_MAX


def _rows(source: ChunkSource, chunk_id: int):
    """The chunk's X in float64, dense where DENSE_PRODUCT_DENSITY of it is non-zero, and its
    target matrix."""
    chunk = source.read_chunk(chunk_id)
    X = chunk.X.astype(np.float64)
    if X.nnz >= DENSE_PRODUCT_DENSITY * X.shape[0] * X.shape[1]:
        X = X.toarray()
    return X, chunk.targets(source.n_classes)


def _product(A, B) -> np.ndarray:
    P = A @ B.T
    return P if isinstance(P, np.ndarray) else P.toarray()


def gram_task(source: ChunkSource, chunk_id: int) -> tuple[np.ndarray, np.ndarray]:
    """(X_i X_jᵀ for the chunks j ≤ i side by side: n_i × (the rows of chunks 0 … i)), the
    chunk's targets Y_i): chunk i's rows of G's lower block triangle."""
    X, Y = _rows(source, chunk_id)
    parts = [_product(X, _rows(source, j)[0]) for j in range(chunk_id)]
    return np.hstack([*parts, _product(X, X)]), Y


def weights_task(source: ChunkSource, chunk_id: int, *, A: np.ndarray) -> np.ndarray:
    """[X_iᵀ A_i, X_iᵀ 1] (d × (k + 1)) of the chunk's rows, A_i its rows of A."""
    lo, hi = source.chunk_bounds(chunk_id)
    X, _ = _rows(source, chunk_id)
    local = np.hstack([A[lo:hi], np.ones((hi - lo, 1))])
    return np.asarray(X.T @ local)


def gram(parts: list[tuple[np.ndarray, np.ndarray]]) -> tuple[np.ndarray, np.ndarray]:
    """(G, Y) from `gram_task`'s results in chunk order: the lower block triangle, mirrored."""
    n = sum(len(Y) for _, Y in parts)
    G = np.empty((n, n))
    lo = 0
    for rows, Y in parts:
        hi = lo + len(Y)
        G[lo:hi, :hi] = rows
        G[:lo, lo:hi] = rows[:, :lo].T
        lo = hi
    return G, np.vstack([Y for _, Y in parts])


class DualFit:
    """The eigendecomposition of the centred Gram matrix and the leave-one-out choice of λ
    (module docstring): `lam` (λ), `c` (λ / v̄), `loo` (the leave-one-out mean squared error of
    each DUAL_GRID point, summed over the targets), `A` (n × k), `loss_sum` (Σ ‖R_i‖²) and the
    targets' means `y_mean`. G is centred into K in place (and then overwritten by the
    eigendecomposition): besides it the fit holds two n × n arrays, Q and Q²."""

    def __init__(self, G: np.ndarray, Y: np.ndarray, v_bar: float):
        n = len(G)
        row_means = G.mean(axis=1)
        G -= row_means[:, None]
        G -= row_means[None, :]
        G += row_means.mean()
        with single_threaded_blas():
            s, Q = scipy.linalg.eigh(G, overwrite_a=True)
        s = np.clip(s, 0.0, None)  # K is positive semi-definite: round-off below zero
        # K1 = 0: the eigenvector along 1 gets s = 0 exactly, so that its share of 1 − h_i, 1/n,
        # cancels the intercept's −1/n without G's round-off in s (at a small λ the rest is ~nλ/s)
        s[int(np.argmax(np.abs(Q.sum(axis=0))))] = 0.0
        self.y_mean = Y.mean(axis=0)
        Z = Q.T @ (Y - self.y_mean)
        Q2 = Q * Q
        self.loo = np.empty(len(DUAL_GRID))
        for i, c in enumerate(DUAL_GRID):
            kept = n * c * v_bar / (s + n * c * v_bar)  # 1 − s/(s + nλ), without the difference
            R = Q @ (kept[:, None] * Z)
            one_less_h = Q2 @ kept - 1.0 / n  # 1 − h_i, as Σ_k Q_ik² = 1
            self.loo[i] = float(((R / one_less_h[:, None]) ** 2).sum()) / n
        best = int(np.argmin(self.loo))  # the first of equal errors: the smaller λ
        self.c = float(DUAL_GRID[best])
        self.lam = self.c * v_bar
        a = n * self.lam
        self.A = Q @ (Z / (s + a)[:, None])
        R = Q @ ((a / (s + a))[:, None] * Z)
        self.loss_sum = float((R * R).sum())

    def weights(self, sums: np.ndarray, n: int, active: np.ndarray) -> np.ndarray:
        """W_t ((1 + p) × k, the bias row first) of the one stage on the active columns, from
        `weights_task`'s summed [XᵀA, Xᵀ1] (d × (k + 1))."""
        XA, column_means = sums[active, :-1], sums[active, -1] / n
        W = XA - np.outer(column_means, self.A.sum(axis=0))
        return np.vstack([self.y_mean - column_means @ W, W])
