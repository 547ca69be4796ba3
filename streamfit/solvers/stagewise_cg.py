"""stagewise's fit of real-valued targets on wide data above DUAL_N_MAX rows: the ridge model by
conjugate gradients, its penalty chosen on a held-out fifth of the rows (docs/benchmarks.md,
"Wide regression above 4000 rows: alpha by a held-out fifth", session 34).

Where stagewise_dual's exact fit applies but for the rows (n > DUAL_N_MAX: its n × n
eigendecomposition is out of reach), the solver fits the same ridge model,

    min_{b, W} ‖Y − 1bᵀ − XW‖²_F + alpha ‖W‖²_F      (Ridge(alpha), b unpenalised; λ = alpha / n),

in two parts:
1. the walk: the rows whose global index i has i mod HOLDOUT_EVERY = HOLDOUT_EVERY − 1 are held
   out (`held_rows`: the same rows for any chunking and any workers); on the other n_f rows the
   ridge model is fitted at alpha = n_f · c · v̄ for c = HOLDOUT_GRID[0], [1], … (largest first;
   v̄ the active columns' mean variance over the n rows, so any units), each fit started from the
   last one's W, and scored by its squared error on the held rows, summed over the targets. The
   walk ends after the grid's last c, or once the held-out error has risen at WALK_RISES grid
   points in a row (past its least, the error of a smaller c only grows in the measured sets);
2. the refit: the ridge model on all n rows at the alpha of least held-out error (ties: the
   larger alpha), started from the walk's W at that alpha.
Each fit solves the normal equations of its rows centred by their column means x̄,
(XcᵀXc + alpha I) W = XcᵀY, by conjugate gradients with the Jacobi preconditioner
diag(n_rows · var_j + alpha) (Hestenes & Stiefel 1952; Saad 2003, Algorithm 9.1), every target
at once, and stops when every target's residual ‖r‖ ≤ CG_RTOL · ‖XcᵀY‖, or after WALK_MAX_ITER
iterations in the walk (its errors only rank the c's) and REFIT_MAX_ITER in the refit; then
b = ȳ − Wᵀx̄. Going from one c to the next keeps W and updates the residual
without a pass, r ← r + (alpha_old − alpha_new) W, and restarts the directions. One iteration is
one pass of `pass_task` over the chunks (XcᵀXc P = Σ_i X_iᵀ(X_i P) − x̄ Σ_i 1ᵀX_i P), which also
scores the W it is given on the chunk's held rows: the score of a finished c comes with the
first iteration of the next one. The driver holds a few p × k arrays (p the active columns); a
task holds its chunk and p × k sums.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from streamfit.solvers import stagewise_dual
from streamfit.store import ChunkSource

HOLDOUT_EVERY = 5  # row i is held out in the walk when i % HOLDOUT_EVERY == HOLDOUT_EVERY - 1
HOLDOUT_GRID = np.logspace(2, -6, 9)  # c = alpha / (n_f · v̄), largest first (each fit warm-starts the next)
WALK_RISES = 2  # the walk ends once the held-out error has risen at this many grid points in a row
CG_RTOL = 1e-4  # a fit stops at ‖r‖ ≤ CG_RTOL · ‖XcᵀY‖ for every target
WALK_MAX_ITER = 50  # ... or after this many iterations (passes over the data) for a c of the walk
REFIT_MAX_ITER = 200  # ... and for the refit (then with a warning)

# the state's position: 0 … len(HOLDOUT_GRID) − 1 the c being fitted, len(HOLDOUT_GRID) the last one's score
# pending, then the refit's start pass and its iterations
REFIT_START, REFIT = len(HOLDOUT_GRID) + 1, len(HOLDOUT_GRID) + 2
WEIGHTS, RESIDUAL, DIRECTION, RHS, BEST = range(5)  # the rows of the state's vectors (5 × p × k)
RZ, RHS_NORM, Y_MEAN = range(3)  # the rows of its per-target values (3 × k)
ERRORS, ITERATIONS = range(2)  # the rows of its walk record (2 × (grid points + 1), the refit's last)


def applies(n_rows: int, n_active: int) -> bool:
    """Whether data of n_rows training rows and n_active active columns is wide (as for
    stagewise_dual's exact fit) and has more rows than that fit takes."""
    return n_active >= stagewise_dual.DUAL_WIDE_SHARE * n_rows and n_rows > stagewise_dual.DUAL_N_MAX


def max_steps() -> int:
    """The most steps a fit takes: two start passes, the walk's iterations, the pass that scores
    its last c, the refit's iterations."""
    return 3 + len(HOLDOUT_GRID) * WALK_MAX_ITER + REFIT_MAX_ITER


def new_walk() -> np.ndarray:
    """The walk's record before step 0: no grid point scored, no iteration."""
    return np.vstack([np.full(len(HOLDOUT_GRID) + 1, np.nan), np.zeros(len(HOLDOUT_GRID) + 1)])


def alpha(n_rows: int, v_bar: float, position: int, walk: np.ndarray) -> float:
    """The penalty of the fit at a position: the c being fitted (the last one while its score is
    pending), after the walk the c of least held-out error."""
    grid = len(HOLDOUT_GRID)
    c = HOLDOUT_GRID[min(position, grid - 1) if position <= grid else best_position(walk[ERRORS, :-1])]
    return float(fit_rows(n_rows) * c * v_bar)


def held_rows(lo: int, hi: int) -> np.ndarray:
    """Whether each of the global rows lo … hi − 1 is held out in the walk (a boolean mask)."""
    return np.arange(lo, hi) % HOLDOUT_EVERY == HOLDOUT_EVERY - 1


def fit_rows(n_rows: int) -> int:
    """n_f: the rows the walk fits on (all but the held ones) among the global rows 0 … n_rows − 1:
    the held rows i mod HOLDOUT_EVERY = HOLDOUT_EVERY − 1 below n_rows are ⌊n_rows / HOLDOUT_EVERY⌋."""
    return n_rows - n_rows // HOLDOUT_EVERY


class PassSums(NamedTuple):
    """One pass's sums over the chunks (`pass_task`; None where the pass has none)."""

    XU: np.ndarray  # X_fᵀU (p × k, or p × 2k at a start)
    ones: np.ndarray  # 1ᵀU
    y_squares: float  # Σ‖y‖² over the fit rows (a start; else 0)
    column_sums: np.ndarray | None  # Σ x over the fit rows (a start)
    column_squares: np.ndarray | None  # Σ x² over the fit rows (a start)
    held_squares: np.ndarray | None  # Σ_held (y − Wᵀx)² per target (the walk)
    held_sums: np.ndarray | None  # Σ_held (y − Wᵀx) per target (the walk)


def pass_task(
    source: ChunkSource, chunk_id: int, *, active: np.ndarray, P: np.ndarray, W: np.ndarray, walk: bool, start: bool
) -> PassSums:
    """The chunk's share of one pass over the active columns, on its fit rows X_f (n_f,i × p;
    the held rows left out when `walk`): U = X_f P, or with `start` U = [Y_f − X_f P, Y_f] and
    the fit rows' Σ‖y‖², Σ x and Σ x²; with `walk` the held rows' residuals E = Y_h − X_h W,
    summed and squared per target."""
    lo, hi = source.chunk_bounds(chunk_id)
    chunk = source.read_chunk(chunk_id)
    X = chunk.X[:, active].astype(np.float64)
    Y = chunk.targets(source.n_classes)
    held_squares = held_sums = None
    if walk:
        held = held_rows(lo, hi)
        E = Y[held] - np.asarray(X[held] @ W)
        held_squares, held_sums = (E * E).sum(axis=0), E.sum(axis=0)
        X, Y = X[~held], Y[~held]
    U = np.asarray(X @ P)
    squares, column_sums, column_squares = 0.0, None, None
    if start:
        U = np.hstack([Y - U, Y])
        squares = float((Y * Y).sum())
        column_sums = np.asarray(X.sum(axis=0)).ravel()
        column_squares = np.asarray(X.multiply(X).sum(axis=0)).ravel()
    return PassSums(np.asarray(X.T @ U), U.sum(axis=0), squares, column_sums, column_squares, held_squares, held_sums)


class Fit(NamedTuple):
    """A started fit: the vectors (5 × p × k: W, r, the direction, XcᵀY, and the walk's best W),
    the per-target values (3 × k: ⟨r, z⟩, ‖XcᵀY‖, ȳ), the rows' column means and Jacobi diagonal
    without alpha (2 × p: x̄, n_rows · var), and ‖Y − 1ȳᵀ‖²."""

    vectors: np.ndarray
    targets: np.ndarray
    columns: np.ndarray
    y_centred_squares: float


def start(W: np.ndarray, best: np.ndarray, sums: PassSums, n_rows: int, alpha: float) -> Fit:
    """The conjugate-gradient state at W (p × k) on n_rows rows from `pass_task(start=True, P=W)`'s
    summed sums: r = XcᵀE − alpha W (E = Y − XW; Xcᵀ1 = 0, so E's centring drops out), the first
    direction z = r / (diagonal + alpha)."""
    assert sums.column_sums is not None and sums.column_squares is not None, "a start pass"
    k = W.shape[1]
    mean = sums.column_sums / n_rows
    diagonal = np.maximum(sums.column_squares - n_rows * mean * mean, 0.0)
    r = sums.XU[:, :k] - np.outer(mean, sums.ones[:k]) - alpha * W
    rhs = sums.XU[:, k:] - np.outer(mean, sums.ones[k:])
    z = r / (diagonal + alpha)[:, None]
    y_mean = sums.ones[k:] / n_rows
    targets = np.vstack([(r * z).sum(axis=0), np.sqrt((rhs * rhs).sum(axis=0)), y_mean])
    vectors = np.stack([W, r, z, rhs, best])
    return Fit(vectors, targets, np.stack([mean, diagonal]), sums.y_squares - n_rows * float((y_mean * y_mean).sum()))


def advance(vectors: np.ndarray, targets: np.ndarray, sums: PassSums, columns: np.ndarray, alpha: float):
    """One preconditioned conjugate-gradient iteration, every target at once, from
    `pass_task(P=vectors[DIRECTION])`'s summed sums (XᵀXP, 1ᵀXP): Q = (XcᵀXc + alpha I) P =
    XᵀXP − x̄ 1ᵀXP + alpha P, step ⟨r, z⟩ / ⟨P, Q⟩, W += step P, r −= step Q,
    z = r / (diagonal + alpha), P ← z + (⟨r, z⟩_new / ⟨r, z⟩_old) P. New (vectors, targets)."""
    P = vectors[DIRECTION]
    Q = sums.XU - np.outer(columns[0], sums.ones) + alpha * P
    curvature = (P * Q).sum(axis=0)
    step = np.divide(targets[RZ], curvature, out=np.zeros_like(curvature), where=curvature > 0)
    r = vectors[RESIDUAL] - step * Q
    z = r / (columns[1] + alpha)[:, None]
    rz = (r * z).sum(axis=0)
    ratio = np.divide(rz, targets[RZ], out=np.zeros_like(rz), where=targets[RZ] > 0)
    new_targets = targets.copy()
    new_targets[RZ] = rz
    new = vectors.copy()
    new[WEIGHTS], new[RESIDUAL], new[DIRECTION] = vectors[WEIGHTS] + step * P, r, z + ratio * P
    return new, new_targets


def next_alpha(vectors: np.ndarray, targets: np.ndarray, columns: np.ndarray, old: float, new: float):
    """The state of the fit at the same W with alpha `new` instead of `old`: r + (old − new) W, the
    directions restarted. New (vectors, targets)."""
    r = vectors[RESIDUAL] + (old - new) * vectors[WEIGHTS]
    z = r / (columns[1] + new)[:, None]
    new_vectors, new_targets = vectors.copy(), targets.copy()
    new_vectors[RESIDUAL], new_vectors[DIRECTION] = r, z
    new_targets[RZ] = (r * z).sum(axis=0)
    return new_vectors, new_targets


def relative_residual(vectors: np.ndarray, targets: np.ndarray) -> float:
    """max over the targets of ‖r‖ / ‖XcᵀY‖ (0 for a target whose XcᵀY is 0)."""
    r_norm = np.sqrt((vectors[RESIDUAL] * vectors[RESIDUAL]).sum(axis=0))
    norm = targets[RHS_NORM]
    return float(np.max(np.where(norm > 0, r_norm / np.where(norm > 0, norm, 1.0), 0.0)))


def held_error(sums: PassSums, W: np.ndarray, targets: np.ndarray, columns: np.ndarray, n_held: int) -> float:
    """Σ over the held rows and the targets of (y − b − Wᵀx)², b = ȳ − Wᵀx̄ of the fit rows, from the
    pass's Σ E and Σ E² (E = y − Wᵀx): Σ E² − 2 bᵀΣ E + n_held ‖b‖²."""
    assert sums.held_squares is not None and sums.held_sums is not None, "a walk pass"
    b = targets[Y_MEAN] - columns[0] @ W
    return float(sums.held_squares.sum() - 2.0 * (b * sums.held_sums).sum() + n_held * (b * b).sum())


def walk_over(errors: np.ndarray) -> bool:
    """Whether the walk ends at the scored prefix of `errors` (NaN: not scored yet): every grid
    point scored, or the last WALK_RISES scores each above the one before."""
    scored = errors[~np.isnan(errors)]
    if len(scored) == len(errors):
        return True
    return len(scored) > WALK_RISES and bool(np.all(np.diff(scored[-WALK_RISES - 1 :]) > 0))


def best_position(errors: np.ndarray) -> int:
    """The grid position of least held-out error (the first, i.e. the larger alpha, of equal ones)."""
    return int(np.nanargmin(errors))


def loss_sum(vectors: np.ndarray, y_centred_squares: float, alpha: float) -> float:
    """Σ_i ‖y_i − b − Wᵀx_i‖² over the fit's rows = ‖Yc‖² − 2⟨W, XcᵀY⟩ + ⟨W, XcᵀXc W⟩, where
    XcᵀXc W = XcᵀY − r − alpha W (r the recurrence's residual)."""
    V, rhs, r = vectors[WEIGHTS], vectors[RHS], vectors[RESIDUAL]
    return float(y_centred_squares - (V * rhs).sum() - (V * r).sum() - alpha * (V * V).sum())


def weights(vectors: np.ndarray, targets: np.ndarray, columns: np.ndarray) -> np.ndarray:
    """W_t ((1 + p) × k, the bias row ȳ − Wᵀx̄ first) of the one stage on the active columns."""
    return np.vstack([targets[Y_MEAN] - columns[0] @ vectors[WEIGHTS], vectors[WEIGHTS]])
