"""stagewise's fit of real-valued targets on wide data above DUAL_N_MAX rows: λ by leave-one-out
on a row subsample, the ridge model on every row by conjugate gradients (docs/benchmarks.md,
"Wide regression above 4000 rows", session 33).

Where stagewise_dual's exact fit applies but for the rows (n > DUAL_N_MAX: its n × n
eigendecomposition is out of reach), the solver fits the same ridge model,

    min_{b, W} (1/n) ‖Y − 1bᵀ − XW‖²_F + λ ‖W‖²_F      (Ridge(alpha = nλ), b unpenalised),

in three parts:
1. c by the exact leave-one-out of stagewise_dual.DualFit on a subsample of m = SUBSAMPLE_ROWS
   rows drawn without replacement by numpy's default_rng(SUBSAMPLE_SEED) (`sample_rows`), with
   v̄ the active columns' mean variance over all n rows: λ_m = c · v̄ on the m rows;
2. the penalty carried to the n rows in the summed convention, alpha = m · λ_m, so λ = m λ_m / n
   (the ridge model is the posterior mean of w ~ N(0, τ²I) under noise σ² at alpha = σ²/τ²,
   whatever n: it is alpha, not the averaged λ, that a subsample estimates);
3. the normal equations of the centred rows Xc = X − 1x̄ᵀ, (XcᵀXc + alpha I) W = XcᵀY, solved by
   conjugate gradients with the Jacobi preconditioner diag(n · var_j + alpha) (Hestenes & Stiefel
   1952; Saad 2003, Algorithm 9.1), one pass over the chunks per iteration (XcᵀXc P =
   Σ_i X_iᵀ(X_i P) − x̄ Σ_i 1ᵀX_i P: `product_task`), started from the subsample's model W_m =
   X_mcᵀA and stopped when every target's residual ‖r‖ ≤ CG_RTOL · ‖XcᵀY‖, or after CG_MAX_ITER
   iterations; then b = ȳ − Wᵀx̄.
The driver holds the m × m Gram and a few p × k arrays (p the active columns); a task holds its
chunk and p × k sums.
"""

from __future__ import annotations

import numpy as np

from streamfit.solvers import stagewise_dual
from streamfit.store import ChunkSource

SUBSAMPLE_ROWS = 2000  # m: the rows whose leave-one-out chooses c (an eighth of DUAL_N_MAX's eigendecomposition)
SUBSAMPLE_SEED = 0  # numpy's default_rng seed of the subsample
CG_RTOL = 1e-4  # conjugate gradients stop at ‖r‖ ≤ CG_RTOL · ‖XcᵀY‖ for every target
CG_MAX_ITER = 500  # ... or after this many iterations (passes over the data), with a warning


def applies(n_rows: int, n_active: int) -> bool:
    """Whether data of n_rows training rows and n_active active columns is wide (as for
    stagewise_dual's exact fit) and has more rows than that fit takes."""
    return n_active >= stagewise_dual.DUAL_WIDE_SHARE * n_rows and n_rows > stagewise_dual.DUAL_N_MAX


def sample_gram(X) -> np.ndarray:
    """The subsample's Gram X Xᵀ (m × m), X its rows (CSR): a dense BLAS product from
    DENSE_PRODUCT_DENSITY of non-zeros on (as stagewise_dual's chunk pairs)."""
    if X.nnz >= stagewise_dual.DENSE_PRODUCT_DENSITY * X.shape[0] * X.shape[1]:
        X = X.toarray()
    return stagewise_dual.product(X, X)


def sample_rows(n_rows: int) -> np.ndarray:
    """The subsample's global row indices, ascending (part 1 of the module docstring)."""
    m = min(n_rows, SUBSAMPLE_ROWS)
    return np.sort(np.random.default_rng(SUBSAMPLE_SEED).choice(n_rows, m, replace=False))


def sample_task(source: ChunkSource, chunk_id: int, *, rows: np.ndarray):
    """(X, Y) of the subsample's rows in this chunk: X CSR float64 (all stored columns), Y
    n_i × k."""
    lo, hi = source.chunk_bounds(chunk_id)
    local = rows[(rows >= lo) & (rows < hi)] - lo
    chunk = source.read_chunk(chunk_id)
    return chunk.X[local].astype(np.float64), chunk.targets(source.n_classes)[local]


def product_task(
    source: ChunkSource, chunk_id: int, *, active: np.ndarray, P: np.ndarray, residual: bool
) -> tuple[np.ndarray, np.ndarray, float]:
    """The chunk's share of one conjugate-gradient pass over the active columns X_i (n_i × p):
    with U = X_i P (P p × k), (X_iᵀU, 1ᵀU, 0); with `residual`, U = [Y_i − X_i P, Y_i] (the
    residual of W = P and the targets, 2k columns) and Σ‖Y_i‖² besides."""
    chunk = source.read_chunk(chunk_id)
    X = chunk.X[:, active].astype(np.float64)
    U = np.asarray(X @ P)
    squares = 0.0
    if residual:
        Y = chunk.targets(source.n_classes)
        U = np.hstack([Y - U, Y])
        squares = float((Y * Y).sum())
    return np.asarray(X.T @ U), U.sum(axis=0), squares


WEIGHTS, RESIDUAL, DIRECTION, RHS = range(4)  # the rows of the state's vectors (4 × p × k)
RZ, RHS_NORM, Y_MEAN = range(3)  # the rows of its per-target values (3 × k)


def start(
    W: np.ndarray,
    sums: tuple[np.ndarray, np.ndarray, float],
    n: int,
    column_mean: np.ndarray,
    diagonal: np.ndarray,
    alpha: float,
) -> tuple[np.ndarray, np.ndarray, float]:
    """The conjugate-gradient state at W₀ (p × k) from `product_task(residual=True)`'s summed
    sums: (vectors: W₀, r = XcᵀE − alpha W₀ (E = Y − XW₀; Xcᵀ1 = 0, so E's centring drops out), the first
    direction z = r / diagonal, the right-hand side XcᵀY; per target: ⟨r, z⟩, ‖XcᵀY‖, ȳ; and
    ‖Y − 1ȳᵀ‖²)."""
    XU, ones, squares = sums
    k = W.shape[1]
    r = XU[:, :k] - np.outer(column_mean, ones[:k]) - alpha * W
    rhs = XU[:, k:] - np.outer(column_mean, ones[k:])
    z = r / diagonal[:, None]
    y_mean = ones[k:] / n
    targets = np.vstack([(r * z).sum(axis=0), np.sqrt((rhs * rhs).sum(axis=0)), y_mean])
    return np.stack([W, r, z, rhs]), targets, squares - n * float((y_mean * y_mean).sum())


def advance(
    vectors: np.ndarray,
    targets: np.ndarray,
    sums: tuple[np.ndarray, np.ndarray, float],
    column_mean: np.ndarray,
    diagonal: np.ndarray,
    alpha: float,
) -> tuple[np.ndarray, np.ndarray]:
    """One preconditioned conjugate-gradient iteration, every target at once, from
    `product_task(P=vectors[DIRECTION])`'s summed sums (XᵀXP, 1ᵀXP): Q = (XcᵀXc + alpha I) P =
    XᵀXP − x̄ 1ᵀXP + alpha P, step ⟨r, z⟩ / ⟨P, Q⟩, W += step P, r −= step Q, z = r / diagonal,
    P ← z + (⟨r, z⟩_new / ⟨r, z⟩_old) P. New (vectors, targets)."""
    XU, ones, _ = sums
    P = vectors[DIRECTION]
    Q = XU - np.outer(column_mean, ones) + alpha * P
    step = targets[RZ] / (P * Q).sum(axis=0)
    r = vectors[RESIDUAL] - step * Q
    z = r / diagonal[:, None]
    rz = (r * z).sum(axis=0)
    new_targets = targets.copy()
    new_targets[RZ] = rz
    return np.stack([vectors[WEIGHTS] + step * P, r, z + (rz / targets[RZ]) * P, vectors[RHS]]), new_targets


def relative_residual(vectors: np.ndarray, targets: np.ndarray) -> float:
    """max over the targets of ‖r‖ / ‖XcᵀY‖ (0 for a target whose XcᵀY is 0)."""
    r_norm = np.sqrt((vectors[RESIDUAL] * vectors[RESIDUAL]).sum(axis=0))
    norm = targets[RHS_NORM]
    return float(np.max(np.where(norm > 0, r_norm / np.where(norm > 0, norm, 1.0), 0.0)))


def loss_sum(vectors: np.ndarray, y_centred_squares: float, alpha: float) -> float:
    """Σ_i ‖y_i − b − Wᵀx_i‖² = ‖Yc‖² − 2⟨W, XcᵀY⟩ + ⟨W, XcᵀXc W⟩, where XcᵀXc W = XcᵀY − r − alpha W
    (r the recurrence's residual)."""
    V, rhs, r = vectors[WEIGHTS], vectors[RHS], vectors[RESIDUAL]
    return float(y_centred_squares - (V * rhs).sum() - (V * r).sum() - alpha * (V * V).sum())


def weights(vectors: np.ndarray, targets: np.ndarray, column_mean: np.ndarray) -> np.ndarray:
    """W_t ((1 + p) × k, the bias row ȳ − Wᵀx̄ first) of the one stage on the active columns."""
    return np.vstack([targets[Y_MEAN] - column_mean @ vectors[WEIGHTS], vectors[WEIGHTS]])
