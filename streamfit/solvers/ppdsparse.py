"""PPDSparse: Yen, Huang, Dai, Ravikumar, Dhillon and Xing (2017), "PPDSparse: A Parallel
Primal-Dual Sparse Method for Extreme Classification" (KDD '17).

One-vs-all (4): for every class k independently, with y_ik = +1 if k is a label of sample i and
−1 otherwise, and a bias feature x_{i,D} = 1 (penalized by ℓ2 only, as in §3.2), solve the
elastic-net objective (9) in the project's averaged convention

    F_k(w) = lam ‖w_{:D}‖₁ + (tau/2) ‖w‖² + (1/n) Σ_i ℓ(y_ik ⟨w, [x_i, 1]⟩),

ℓ(m) = ½ max(0, 1 − m)² (squared hinge, §5.2, the default) or max(0, 1 − m) (hinge, (3)).
By default (lam="scale") class k's weight is lam_k = lam_scale·L·max(1, 2σ_k)·s/√n,
σ_k = 2√(p_k(1 − p_k)) the standard deviation of its ±1 labels (p_k its share of positive rows),
L = Σ_k p_k the mean labels per row (exactly 1 for a multiclass store), s = (1/n) Σ_i ‖x_i‖₂ the
mean row norm (1 for the unit-norm tf-idf rows of text ingest) and n the training rows
(scaled_lams: s/√n is of the order of the noise in a mean gradient, as the Lasso's
λ = Aσ√(log d / n) of Bickel, Ritov and Tsybakov 2009, and σ_k its factor for class k; below
σ_k = ½, fewer than 1/15 of the rows positive, the factor stays 1; L keeps the bound of
Theorem 3.2 on the model's summed ℓ1 norm, Σ_k ‖w_k‖₁ ≤ 2L/lam, at a multiclass set's; lam_scale
= 1e-3 from the text sets of docs/benchmarks.md, sessions 12 and 13; the option lam_positives = M also
multiplies it by √(M/n⁺_k), n⁺_k class k's positive rows clipped to [M/4, M]); or a number (absolute); or (lam=None, squared hinge)
lam_k = lam_ratio·λmax_k per class, λmax_k the smallest lam at which w_k = 0 is optimal (closed
form: lam_max); or (lam="auto", squared hinge) lam_k = r_k·λmax_k with r_k chosen per class on a
held-out slice of the training rows (choose_ratios: a path of ratios on the other rows and a
one-standard-error rule), then trained on all rows. For every lam but a number, rows of mean
norm s outside [1/16, 16] are solved divided by a power of two c (data_scale): the solution of
F_k with ℓ2 weight tau·c² on w and tau on the bias (a bias feature of value c), so numeric
columns as users bring them (pendigits 0..100, pixels 0..255) are not a nearly hard margin.
Multiplying by n gives the paper's form (9) with λ = n·lam and ℓ2 weight τ = n·tau (§5.2);
the paper's defaults λ = 0.01, τ = 1 are lam = 0.01/n, tau = 1/n. scikit-learn's
LinearSVC(C, intercept_scaling=1) is lam = 0 with tau = 1/(C n) (hinge) or 1/(2 C n) (squared
hinge, whose loss has no ½ there), on the columns as given (standardize=False where "auto"
standardizes, below).

Standardized columns (`standardize`, session 25). The ℓ1 and ℓ2 weights of (9) are not invariant
to a column's units: a column in small units needs large weights, which they penalise more. On
dense low-dimensional data (at most 1000 columns hold a non-zero, on average at least 10 % of
their rows: stagewise's test; standardized_columns) whose columns' standard deviations s_j over
the n training rows span more than SCALE_SPREAD = 10× (standardize="auto"; True: wherever the
data qualify; False: never) each class solves (9) on the columns z_j = x_j/s_j, and weight j of
the stored column is u_j/s_j. Written back in the stored units that is the per-column weighted
elastic net

    F_k(w) = lam Σ_j s_j |w_j| + (tau/2) (Σ_j s_j² w_j² + b²) + (1/n) Σ_i ℓ(y_ik (⟨w, x_i⟩ + b)),

the same fit in any units (the model stays linear on X as stored: predict and the saved model
are unchanged in form). Nothing is centred: z keeps x's zeros (one-hot columns stay sparse),
and the bias, penalised by tau alone (1e-4 by default), absorbs the columns' means. lam "scale"
(the mean row norm), None and auto (λmax_k) are computed on z, and data_scale then divides z by
its power of two c as any rows; the logged objective, G(α) and lam_k are those of z. s comes
from init's pass over the rows (which counts the classes' positives: Σx_j and Σx_j² beside them;
column_scales, 1 for a constant column), and is state (PPDSparseState.column_scale): a resume
and any worker count use the same s. Sparse or wide data (text, hashed features) keep (9) on the
columns as given, bit for bit. docs/benchmarks.md, "ppdsparse on columns in other units".

Each class is solved in the dual (10) by Algorithm 1 (greedy active set: the active set starts
at the class's positives; each iteration computes ∇G(α) = Σ_j w_j X̂_{:,j} (14) by a CSC walk
over the non-zeros of w, optionally sparsified by Algorithm 3 with the R of Theorem 4.1, adds
the κ most violating samples, runs Algorithm 2 (randomized dual coordinate descent maintaining
w(α) = prox(X̂ᵀα), (13), with LIBLINEAR's shrinking) on the active set and drops zero duals of
negatives). κ grows with the active set and is capped at the class's positives n⁺_k
(κ_t = max(min(κ, n⁺_k), kappa_growth·|A_t|): solve_class). `tol` bounds the
projected dual gradient (in margin units) at the end, on every sample: the final search is
exact. Not in the paper (squared hinge, d < 2048 features occurring in X): a class whose
coordinate descent has not converged within its epoch budget on an active set of
≥ primal_ratio·(d + 1) samples is finished by a proximal Newton method on the same objective (9)
with the same stopping test; primal_ratio=0 keeps the paper's dual Algorithm 1 throughout. The
kernels are in ppdsparse_kernels.py; docs/architecture.md (ppdsparse) has the design.

Parallelism (§5.1): the classes are cut into groups of `group_size` consecutive class ids (the
cut depends only on K, n and the parameters; by default about 64 groups, but one group for a
small set: default_group_size). One step of the solver protocol is one finished
group: the groups run in process (`threads` threads sharing one copy of the data, by default one
per CPU the process may use: solver_threads) or as Dask
tasks submitted largest first (Engine.imap_unordered, results as they finish), and each step
takes the next finished group's weights into the state. Each worker process builds the training
matrix once (O(nnz(X)), the method's memory model). Class k's random stream is seeded from
(random_state, k), so the model is bitwise the same for any number of workers, threads, group
cut, completion order, and after a resume (which submits only the unfinished groups).

Multilabel (fit_threshold, the default): after the last group, one pass over the training rows
counts, for every margin t in −0.99, −0.98, …, 0.99 (MARGIN_GRID), the labels scored > t and
those of them that are true (_threshold_counts_task, integer counts: the same on any chunking and
engine), and the model's decision threshold (streamfit.model.decide) is the t of the best
micro-F1 on those rows (on ties the one nearest 0: rows that a whole gap of thresholds separates
alike keep the margin's own rule). At threshold 0 the ℓ1 weight's shrinkage of a rare label's margins
predicts few labels (bibtex at 10·lam: 0.67 labels a row against 2.4 true, micro-F1 0.366; at its
fitted −0.50: 0.492; docs/benchmarks.md, session 15).

Logged per step (one finished group): `group`, its `classes` [lo, hi); `objective`, the sum of
F_k(w_k) above (loss + penalty, averaged over the n samples) over the classes finished so far;
`dual_objective`, the sum of −G_k(α_k) over the group's classes (the paper's scale, n times the
averaged one; by duality −G_k/n ≤ F_k, equal at the optimum); `nnz` of W so far; the group's
`mean_active` set size, `iterations` and classes `not_converged` within max_iter. Only the last
step's model (all classes trained) is validated (train --valid).
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import glob
import logging
import os
import shutil
import tempfile
import threading
import uuid
from collections import deque
from collections.abc import Generator
from concurrent.futures import ThreadPoolExecutor
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from streamfit.engine import Engine, Unordered, add_results
from streamfit.errors import ConfigError
from streamfit.metrics import ThresholdCounts, best_threshold, threshold_counts
from streamfit.model import LinearModel, register_model
from streamfit.objectives.losses import OVR_HALF_SQUARED_HINGE, OVR_HINGE
from streamfit.solvers.base import (
    LOW_DIM_MAX_COLUMNS,
    Context,
    Solver,
    SolverParams,
    SolverState,
    dense_low_dimensional,
    offset_notice,
    register_solver,
    standardized_scale,
)
from streamfit.solvers.ppdsparse_kernels import (
    Data,
    class_objective,
    make_work,
    row_sqnorms,
    solve_class,
    sort_columns,
    topk_rows,
)
from streamfit.store import ChunkSource

log = logging.getLogger(__name__)

DEFAULT_GROUPS = 64  # group_size=None: about this many class groups (docs/architecture.md, ppdsparse)
MIN_GROUP_WORK = 2**15  # group_size=None: a group holds at least this many rows × classes (default_group_size)
LABEL_STD_FLOOR = 0.5  # lam scale: classes whose ±1 labels' std is above this get a larger weight (scaled_lams)
AUTO_FIRST_RATIO = 0.1  # lam auto: the path's largest lam/λmax_k after 1 (the empty model, closed form)
AUTO_MIN_RATIO = 1e-4  # lam auto: the path's smallest lam/λmax_k
AUTO_PER_DECADE = 2  # lam auto: path points per decade of lam/λmax_k
AUTO_PATIENCE = 2  # lam auto: the path stops this many points after its best held-out loss
HELD_OUT_STREAM = 0x4E1D  # lam auto: the held-out permutation's random stream, beside random_state
SCALE_FREE_NORM = 16.0  # lam not a number: rows of mean norm in [1/this, this] are solved as they are (data_scale)
MARGIN_GRID = np.arange(-99, 100) / 100  # fit_threshold: the multilabel thresholds tried on the training margins
WIDE_PROBE = 2**13  # column_sums: a chunk whose first this many values hold > 1000 columns is wide
DENSE_FEATURE_SHARE = 0.1  # predict_topk: features with this share of classes non-zero are kept dense (≤ 80 B/nnz)


class PPDSparseParams(SolverParams):
    """Options of PPDSparse (see the module docstring for the objective and its scaling)."""

    loss: Literal["squared_hinge", "hinge"] = Field(
        "squared_hinge", description="ℓ of (9): §5.2's squared hinge or hinge"
    )
    lam: Annotated[float, Field(ge=0)] | Literal["scale", "auto"] | None = Field(
        "scale",
        description="ℓ1 weight lam of lam‖w‖₁ + (tau/2)‖w‖² + mean loss (paper λ = n·lam): scale = "
        "lam_scale·L·max(1, 2 std(y_k))·(mean row norm)/√n per class k (n training rows, L the mean labels per row, "
        "std(y_k) = 2√(p_k(1 − p_k)) of its ±1 labels, p_k its share of positive rows); a number = the same for every class; "
        "None = lam_ratio·λmax_k per class k; auto = r_k·λmax_k per class k, r_k chosen on a held-out share of "
        "the training rows (choose_ratios)",
    )
    lam_scale: float = Field(
        1e-3,
        gt=0,
        description="lam scale: lam_k = lam_scale·L·max(1, 2 std(y_k))·(1/n) Σ_i ‖x_i‖₂ / √n, L the mean labels "
        "per row (1 multiclass; 1e-5 at n = 10⁴ unit-norm rows and ≥ 15 balanced classes, 1.2e-5 at 10, 2e-5 at 2; "
        "larger = sparser)",
    )
    lam_positives: float | None = Field(
        None,
        gt=0,
        description="lam scale: class k's weight also times √(lam_positives/n⁺_k), n⁺_k its positive training rows "
        "clipped to [lam_positives/4, lam_positives] (a class of fewer positives gets up to 2× the weight); None = off",
    )
    lam_ratio: float = Field(
        0.01,
        gt=0,
        description="lam None: class k's ℓ1 weight is lam_ratio·λmax_k, λmax_k the smallest lam at which "
        "w_k = 0 (squared hinge only; ≥ 1 = the empty model)",
    )
    held_out: float = Field(
        0.2,
        gt=0,
        lt=1,
        description="lam auto: the share of the training rows (stratified by first label, seeded by "
        "random_state) held out to choose each class's ratio to λmax_k",
    )
    tau: float = Field(
        1e-4,
        gt=0,
        description="ℓ2 weight (paper τ = n·tau; LinearSVC C = 1/(n·tau), ½ that for squared hinge); with lam not a "
        "number, on rows of mean norm s outside [1/16, 16] it is tau·c² on w, c = data_scale(s) a power of two",
    )
    kappa: int = Field(
        500,
        ge=1,
        description="κ: samples added to the active set per search at least (Algorithm 1, step 2), but no more "
        "than the class's positives n⁺_k: a search adds up to max(min(κ, n⁺_k), kappa_growth·|A|)",
    )
    kappa_growth: float = Field(
        1.0,
        ge=0,
        description="κ schedule: a search adds up to max(min(κ, n⁺_k), kappa_growth·|A|) samples; "
        "0 = a fixed min(κ, n⁺_k)",
    )
    delta: float | None = Field(
        0.1,
        gt=0,
        description="δ of Theorem 4.1 (margin units, as tol: the search errs no more "
        "than the stopping test): Algorithm 3 draws R = ⌈2‖w‖₁²/δ²⌉; None = exact search",
    )
    x_threshold: float = Field(
        0.0, ge=0, description="§5.3 two-level sparsification: the search skips |x_ij| <= this; 0 = off"
    )
    max_inner: int = Field(
        5,
        ge=1,
        description="S of Algorithm 2, in epochs over the active set per iteration "
        "(doubled after each iteration whose CD has not converged, up to 1024 times this)",
    )
    shrink: bool = Field(True, description="LIBLINEAR shrinking in Algorithm 2 (Hsieh et al. 2008, §3.2)")
    group_size: int | None = Field(
        None,
        ge=1,
        description=f"classes per step (a Dask task, a thread's share); None = about {DEFAULT_GROUPS} groups, "
        f"but at least {MIN_GROUP_WORK} rows × classes a group (one group for a small set) and at least `threads` groups",
        json_schema_extra={"affects_model": False},
    )
    threads: int | None = Field(
        None,
        ge=1,
        description="in-process engine: class groups solved by this many threads sharing X; "
        "None = the CPUs this process may use (on a cluster each worker solves its groups alone)",
        json_schema_extra={"affects_model": False},
    )
    tol: float = Field(
        0.1,
        gt=0,
        description="stop when no projected dual gradient exceeds tol (margin units; LIBLINEAR's dual default)",
    )
    max_iter: int = Field(1000, ge=1, description="iterations of Algorithm 1 (searches) per class")
    fit_threshold: bool = Field(
        True,
        description="multilabel: the model's decision threshold is the margin t in -0.99, -0.98, ..., 0.99 of "
        "the best micro-F1 of the rule score > t on the training rows (one pass after the last class); "
        "False = 0 (LinearSVC's)",
    )
    standardize: bool | Literal["auto"] = Field(
        "auto",
        description="dense data of at most 1000 columns (>= 10% non-zero): the l1 and l2 weights on the columns "
        "scaled by their standard deviations s_j, i.e. lam·s_j|w_j| + (tau/2)·s_j²w_j² on the stored columns (the "
        "fit is the same in any units; the model stays in the stored units); auto: where the s_j span more than "
        "10x (columns in different units), true: always there, false: the columns as given (sparse or wide data: "
        "always as given)",
    )
    primal_ratio: float = Field(
        2.0,
        ge=0,
        description="squared hinge, d < 2048 features occurring: a class whose coordinate descent has not "
        "converged within its epoch budget on an active set of >= primal_ratio x (d + 1) samples is "
        "finished by a primal Newton method (same objective and stopping test); 0 = never",
    )

    @model_validator(mode="after")
    def _check(self):
        if (self.lam is None or self.lam == "auto") and self.loss == "hinge":
            raise ValueError(
                "loss=hinge needs an absolute lam (λmax_k has a closed form for the squared hinge only); "
                "set lam, e.g. lam=1e-5"
            )
        return self


# -- the training matrix, once per process ---------------------------------------------------


def data_scale(mean_norm: float) -> float:
    """The divisor c of the rows that lam "scale", None and "auto" solve on (build_data's
    rescale), for rows of mean norm s = mean_norm: 1 for s in [1/S, S] (S = SCALE_FREE_NORM:
    unit-norm text, columns scaled to [0, 1] or [−1, 1] of up to a few hundred features) or
    s = 0; else the power of two nearest 1 that brings s/c into [1/S, S] (s/c in (S/2, S] above,
    [1/S, 2/S) below): a power of two, so x/c is exact in floating point, and the least change
    of the problem (pendigits, s ≈ 245: c = 16 keeps main's accuracy 0.8959 and LinearSVC's
    0.8962, c = 256 gave 0.8768; docs/benchmarks.md).

    Why: tau is an absolute ℓ2 weight and the bias feature is the constant 1, so on rows of norm
    s ≫ 1 the problem is that of rows of norm 1 with tau/s² (a nearly hard margin: the dual's
    Hessian X̂X̂ᵀ/(n·tau) has eigenvalues ~ s²/tau) and a bias feature 1/s; the dual coordinate
    descent crawls and the primal Newton fallback cannot meet the margin-unit stopping test in
    floating point (pendigits, s ≈ 245: one class 19 s, the others 0.01 s; docs/benchmarks.md).
    Solving x/c with lam/c is the problem of the store's rows with ℓ2 weight tau·c² on w and a
    bias feature of value c (LIBLINEAR's -B c), whose solution is w'/c with the same bias."""
    if mean_norm == 0.0 or 1.0 / SCALE_FREE_NORM <= mean_norm <= SCALE_FREE_NORM:
        return 1.0
    if mean_norm > SCALE_FREE_NORM:
        return float(2.0 ** np.ceil(np.log2(mean_norm / SCALE_FREE_NORM)))
    return float(2.0 ** np.floor(np.log2(mean_norm * SCALE_FREE_NORM)))


def build_data(
    source: ChunkSource,
    by_magnitude: bool = False,
    rescale: bool = False,
    columns: tuple[np.ndarray, np.ndarray] | None = None,
) -> Data:
    """Read every chunk of `source` and build the kernels' view of it (see ppdsparse_kernels.Data;
    its features are the used ones, renumbered by col_map, which solve_group undoes).
    by_magnitude: every CSC column sorted by decreasing |x_ij| (only the early stop of §5.3's
    two-level sparsification, x_threshold > 0, needs it); else rows ascending. columns: the
    standardized columns (store feature ids ascending, their standard deviations s_j;
    `standardized_columns`), whose values are divided by s_j first (kept in Data.col_scale; 1 for
    the other columns); None: none. rescale: then the values divided by data_scale(mean row norm)
    (exact: a power of two), kept in Data.scale."""
    chunks = list(source.iter_chunks())
    X = sp.vstack([c.X for c in chunks], format="csr").astype(np.float64)
    X.sum_duplicates()
    X.eliminate_zeros()
    if columns is not None:
        X.data /= scales_of(columns, X.indices)
    scale = data_scale(float(np.sqrt(row_sqnorms(X.indptr.astype(np.int64), X.data)).mean())) if rescale else 1.0
    if scale != 1.0:
        X.data /= scale
    # the features that occur, most frequent first (ties by index), so the hot part of v stays in cache
    counts = np.bincount(X.indices, minlength=X.shape[1])
    used = np.flatnonzero(counts)
    col_map = used[np.argsort(-counts[used], kind="stable")].astype(np.int64)
    compact = np.zeros(X.shape[1], np.int64)
    compact[col_map] = np.arange(col_map.size)
    X = sp.csr_matrix((X.data, compact[X.indices], X.indptr), shape=(X.shape[0], col_map.size))
    K = source.n_classes
    if source.multilabel:
        Y = sp.vstack([c.labels for c in chunks], format="csc")
        Y.sum_duplicates()
        Y.sort_indices()
    else:
        y = np.concatenate([c.labels for c in chunks]).astype(np.int64)
        Y = sp.csc_matrix((np.ones(y.size), (np.arange(y.size), y)), shape=(y.size, K))
    col_scale = np.ones(col_map.size) if columns is None else scales_of(columns, col_map)
    return _assemble(X, Y, col_map, by_magnitude, scale, col_scale)


def scales_of(columns: tuple[np.ndarray, np.ndarray], features: np.ndarray) -> np.ndarray:
    """The standard deviation s_j of each store feature id in `features` among `columns` (ids
    ascending, their s_j), 1 for a feature not among them."""
    ids, s = columns
    if ids.size == 0:
        return np.ones(features.size)
    at = np.minimum(np.searchsorted(ids, features), ids.size - 1)
    return np.where(ids[at] == features, s[at], 1.0)


def _assemble(
    X: sp.csr_matrix,
    Y: sp.csc_matrix,
    col_map: np.ndarray,
    by_magnitude: bool,
    scale: float,
    col_scale: np.ndarray,
) -> Data:
    """Data of the rows of X (CSR, the kernels' feature ids, any order within a row, no
    duplicates; the store's values divided by col_scale[j]·`scale`) with labels Y (CSC n × K indicator, rows
    ascending per class). The CSC copy is a counting sort (rows ascending in every column), and the
    CSR rows the kernels read are that copy's transpose back (features ascending in every row):
    two linear passes, which took a third of the time of sorting each row's renumbered features."""
    pos_ptr, pos_rows = Y.indptr.astype(np.int64), Y.indices.astype(np.int64)
    C = X.tocsc()
    C.sort_indices()
    X = C.tocsr()
    col_ptr, col_rows, col_vals = C.indptr.astype(np.int64), C.indices.astype(np.int64), C.data
    if by_magnitude:
        col_rows, col_vals = np.empty(C.nnz, np.int64), np.empty(C.nnz)
        sort_columns(col_ptr, C.indices.astype(np.int64), C.data, col_rows, col_vals)  # decreasing |x|, then row
    indptr = X.indptr.astype(np.int64)
    return Data(
        indptr=indptr,
        indices=X.indices.astype(np.int64),
        values=X.data,
        sqnorm=row_sqnorms(indptr, X.data),
        col_ptr=col_ptr,
        col_rows=col_rows,
        col_vals=col_vals,
        pos_ptr=pos_ptr,
        pos_rows=pos_rows,
        col_map=col_map,
        scale=np.array([scale]),
        col_scale=col_scale,
    )


class Split(NamedTuple):
    """lam auto: the training rows cut into a fit part (`fit`, Data of those rows, same feature
    ids) and a held-out part (`held_X`, CSC n_held × d in the kernels' feature ids; `held_Y`, CSC
    n_held × K label indicator)."""

    fit: Data
    held_X: sp.csc_matrix
    held_Y: sp.csc_matrix


def held_out_rows(data: Data, share: float, seed: int) -> np.ndarray:
    """The held-out rows (ascending ids) of lam auto: the rows ordered by their first label (the
    smallest class id; rows without a label last), within a label by a random permutation seeded
    by `seed`, and every m-th row of that order taken, m = round(1/share), starting at the first;
    so each label keeps ≈ 1/m of its rows out (at least one of any label with m rows or more),
    and the cut depends only on the labels, the row order and the seed."""
    n = data.indptr.size - 1
    K = data.pos_ptr.size - 1
    first = np.full(n, K, np.int64)
    np.minimum.at(first, data.pos_rows, np.repeat(np.arange(K), np.diff(data.pos_ptr)))
    shuffle = np.random.default_rng([seed, HELD_OUT_STREAM]).permutation(n)
    order = np.lexsort((shuffle, first))
    return np.sort(order[:: max(1, round(1 / share))])


def split_data(data: Data, share: float, seed: int, by_magnitude: bool = False) -> Split:
    """The Split of `data` whose held-out rows are held_out_rows(data, share, seed)."""
    n, d = data.indptr.size - 1, data.col_map.size
    K = data.pos_ptr.size - 1
    X = sp.csr_matrix((data.values, data.indices, data.indptr), shape=(n, d))
    Y = sp.csc_matrix((np.ones(data.pos_rows.size), data.pos_rows, data.pos_ptr), shape=(n, K))
    held = held_out_rows(data, share, seed)
    fit = np.setdiff1d(np.arange(n), held)
    X_fit, Y_fit = X[fit], sp.csc_matrix(Y[fit])
    Y_fit.sort_indices()
    return Split(
        _assemble(X_fit, Y_fit, data.col_map, by_magnitude, float(data.scale[0]), data.col_scale),
        sp.csc_matrix(X[held]),
        sp.csc_matrix(Y[held]),
    )


@dataclasses.dataclass
class _DataRef:
    """What a group task gets: the source, a token naming the run (each machine builds the
    training matrix once per token), build_data's by_magnitude and rescale, lam auto's
    (held-out share, seed) of split_data (None: another lam) and build_data's standardized
    columns (the state's; None: none)."""

    source: ChunkSource
    token: str
    by_magnitude: bool
    rescale: bool
    held_out: tuple[float, int] | None
    columns: tuple[np.ndarray, np.ndarray] | None = None


_cache: dict[str, tuple[Data, Split | None]] = {}
_cache_lock = threading.Lock()


def _worker_data(ref: _DataRef) -> tuple[Data, Split | None]:
    """The training matrix (shared by the machine's processes) and lam auto's split of it (built
    by each process)."""
    with _cache_lock:  # the threads of a worker wait for one build
        if ref.token not in _cache:
            _cache.clear()  # one training matrix per process
            try:
                data = _machine_data(ref)
            except OSError as e:  # no writable temporary directory: a copy of its own
                log.warning("ppdsparse: cannot share the training matrix on this machine (%s); building it here", e)
                data = build_data(ref.source, ref.by_magnitude, ref.rescale, ref.columns)
            split = None if ref.held_out is None else split_data(data, *ref.held_out, ref.by_magnitude)
            _cache[ref.token] = (data, split)
        return _cache[ref.token]


def shared_data_dir(token: str) -> str:
    """Where the worker processes of one machine keep the training matrix of `token`."""
    return os.path.join(tempfile.gettempdir(), f"streamfit-ppdsparse-{token}")


def _machine_data(ref: _DataRef) -> Data:
    """The training matrix, one copy per machine: the first worker process that needs it builds
    it (build_data) and writes its arrays as .npy files to shared_data_dir (a directory renamed
    into place once complete, under an flock that the other processes wait on); every worker
    process then maps the files copy-on-write (np.load mmap_mode="c": writable arrays, as numba's
    kernels were compiled for, never written), so the page cache holds one copy for all of them.
    The token names the run, so no other run shares, builds or deletes it; the driver deletes
    the directory and its lock file when the run's groups are done or cancelled
    (drop_shared_data); mapped files stay readable until the last process lets go of them."""
    path = shared_data_dir(ref.token)
    with open(path + ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(path):
            data = build_data(ref.source, ref.by_magnitude, ref.rescale, ref.columns)
            partial = f"{path}.partial-{os.getpid()}"
            shutil.rmtree(partial, ignore_errors=True)
            os.makedirs(partial)
            for name, array in data._asdict().items():
                np.save(os.path.join(partial, f"{name}.npy"), array, allow_pickle=False)
            os.rename(partial, path)
            del data
    return Data(
        **{name: np.asarray(np.load(os.path.join(path, f"{name}.npy"), mmap_mode="c")) for name in Data._fields}
    )


def drop_shared_data(token: str) -> None:
    """Delete this machine's copy of the training matrix of `token`, and what killed builders
    left (run on every worker)."""
    path = shared_data_dir(token)
    for leftover in [path, *glob.glob(glob.escape(path) + ".partial-*")]:
        shutil.rmtree(leftover, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        os.remove(path + ".lock")


# -- one group of classes --------------------------------------------------------------------


@dataclasses.dataclass
class GroupResult:
    """Weights of classes [lo, hi) by the store's feature ids: CSR rows (indptr (hi − lo + 1,),
    indices, values), biases (hi − lo,), per-class statistics stats (hi − lo, 6): iterations,
    |A|, nnz(α), converged (1/0), G(α) of (10) in the paper's scale, the ℓ1 weight lam_k
    (class_lams); and objective (hi − lo,):
    F_k(w_k) of (9) in the averaged convention (ppdsparse_kernels.class_objective)."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    bias: np.ndarray
    stats: np.ndarray
    objective: np.ndarray


def lam_max(data: Data, lo: int, hi: int, tau: float) -> np.ndarray:
    """λmax_k of classes lo … hi−1 (hi − lo,), squared hinge, averaged convention: the smallest
    lam at which w_k = 0 minimises F_k. At w = 0 every margin is ±b < 1, so the optimal bias is
    b_k = ȳ_k/(1 + tau) (ȳ_k = (1/n) Σ_i y_ik = (2 n⁺_k − n)/n), and w = 0 is optimal iff
    lam ≥ ‖∇_w‖∞ with ∇_w = −(1/n) Σ_i (y_ik − b_k) x_i = −(1/n) (2 Σ_{i: y_ik = 1} x_i − (1 + b_k) Σ_i x_i)
    (the subgradient condition of (9) at w = 0); below it, no minimiser has w_k = 0 (b_k is
    unique). O(nnz(X) + nnz of the classes' positive rows)."""
    n = data.indptr.size - 1
    d = data.col_map.size
    X = sp.csr_matrix((data.values, data.indices, data.indptr), shape=(n, d))
    column_sums = np.bincount(data.indices, weights=data.values, minlength=d)
    out = np.zeros(hi - lo)
    for k in range(lo, hi):
        rows = data.pos_rows[data.pos_ptr[k] : data.pos_ptr[k + 1]]
        b = (2 * rows.size - n) / n / (1 + tau)
        grad = (2 * np.asarray(X[rows].sum(axis=0)).ravel() - (1 + b) * column_sums) / n
        out[k - lo] = np.abs(grad).max(initial=0.0)
    return out


def scaled_lams(data: Data, lo: int, hi: int, lam_scale: float, lam_positives: float | None = None) -> np.ndarray:
    """lam scale's ℓ1 weights of classes lo … hi−1 (hi − lo,), averaged convention:
    lam_k = lam_scale·L·max(1, σ_k/LABEL_STD_FLOOR)·s/√n, σ_k = 2√(p_k(1 − p_k)) the standard
    deviation of class k's ±1 labels y_ik (p_k = n⁺_k/n its share of positive rows), L = Σ_k p_k
    the mean labels per row over all K classes (exactly 1 for a multiclass store, whose models
    the factor leaves bitwise as they were), s = (1/n) Σ_i ‖x_i‖₂ the mean norm of the n training
    rows (bias feature left out).

    L: Theorem 3.2 of the paper (11), in this convention lam‖w_k‖₁ ≤ F_k(w_k) ≤ F_k(0, b_k) =
    2p_k(1 − p_k) at tau → 0, bounds the whole model's ℓ1 norm by Σ_k ‖w_k‖₁ ≤ 2L/lam; scaling lam
    by L keeps a multilabel set's bound at that of a multiclass set of the same rows (2/lam),
    whatever its labels per row. Without it, a rare label of a multilabel set fitted its few
    positives with hundreds of weights (bibtex, 28–37 positives: 208 of 1836 features on
    average; delicious, 18–40: 229 of 500), and the models were only 5.8× (bibtex, L = 2.38) and
    1.6× (delicious, L = 19.0) smaller than one-vs-rest LinearSVC's; with it 7.9× and 11×, above
    its P@1 and, at the fitted threshold (fit_threshold), its micro-F1 (docs/benchmarks.md,
    session 15).

    s/√n is of the order of the noise in a mean loss gradient (1/n) Σ_i ℓ'(m_i) y_i x_ij (the
    Lasso's λ = Aσ√(log d / n) of Bickel, Ritov and Tsybakov 2009, "Simultaneous analysis of
    Lasso and Dantzig selector"), and σ_k is its per-class factor: at w = 0 the squared hinge's
    optimal bias is b_k = ȳ_k/(1 + tau) ≈ 2p_k − 1, so row i's gradient is −(1 − y_ik b_k) y_ik x_i
    with weight 1 − y_ik b_k = 2(1 − p_k) on the positives and 2p_k on the negatives, whose root
    mean square is exactly σ_k (tau → 0); with row norms that do not depend on the class, the
    standard error of class k's mean gradient is σ_k·s/√n, and λmax_k (lam_max) is the ‖·‖∞ of
    that mean. Below σ_k = LABEL_STD_FLOOR (classes of less than about 1/15 of the rows: many
    classes, most labels of a multilabel set) the weight stays lam_scale·s/√n: there the measured
    sets keep LinearSVC's accuracy at that weight, and σ_k alone made their models 1.1–2.6×
    denser (docs/benchmarks.md, session 13). The weight moves with the data's scale as an ℓ1
    weight must (x → c·x, lam → c·lam, tau → c²·tau has the solutions w/c) and falls as 1/√n. A
    function of the rows and labels alone: the same in every process, group and resume.

    lam_positives = M (an option, off by default): lam_k is also multiplied by √(M/n⁺_k), n⁺_k
    class k's positive rows clipped to [M/4, M], so a class of fewer than M positives gets up to
    2× the weight. A class's evidence for a feature is its positives' mean, whose relative error
    falls as 1/√n⁺_k, which the factors above (noise of the mean over all n rows) do not follow.
    Measured as a default (M = 300) on a fresh draw and not kept: it cost 0.5–0.85 point on
    sector's many-class documents (docs/benchmarks.md, session 35)."""
    n = data.indptr.size - 1
    positives = np.diff(data.pos_ptr[lo : hi + 1])
    share = positives / n
    label_std = 2 * np.sqrt(share * (1 - share))
    labels_per_row = data.pos_ptr[-1] / n  # L = Σ_k p_k: exactly 1 for a multiclass store
    row_norm = float(np.sqrt(data.sqnorm).mean())
    lams = lam_scale * labels_per_row * np.maximum(1.0, label_std / LABEL_STD_FLOOR) * row_norm / np.sqrt(n)
    if lam_positives is None:
        return lams
    return lams * np.sqrt(lam_positives / np.clip(positives, lam_positives / 4, lam_positives))


def class_lams(data: Data, lo: int, hi: int, p: PPDSparseParams) -> np.ndarray:
    """The ℓ1 weight lam_k of classes lo … hi−1 (hi − lo,), averaged convention, for p.lam a
    number, scale (scaled_lams) or None (p.lam_ratio · λmax_k, lam_max); lam auto: choose_ratios."""
    if isinstance(p.lam, float):
        return np.full(hi - lo, p.lam)
    if p.lam == "scale":
        return scaled_lams(data, lo, hi, p.lam_scale, p.lam_positives)
    assert p.lam is None, "lam auto: choose_ratios"
    return p.lam_ratio * lam_max(data, lo, hi, p.tau)


def auto_path() -> np.ndarray:
    """The ratios r = lam/λmax_k that lam auto tries: 1 (the empty model), then AUTO_FIRST_RATIO
    down to AUTO_MIN_RATIO, AUTO_PER_DECADE per decade (1, 0.1, 0.032, 0.01, …, 1e-4)."""
    steps = round(AUTO_PER_DECADE * np.log10(AUTO_FIRST_RATIO / AUTO_MIN_RATIO))
    return np.concatenate([[1.0], AUTO_FIRST_RATIO * 10.0 ** (-np.arange(steps + 1) / AUTO_PER_DECADE)])


def held_out_losses(split: Split, k: int, idx: np.ndarray, val: np.ndarray, bias: float) -> np.ndarray:
    """½ max(0, 1 − y_ik (⟨w, x_i⟩ + b))² of every held-out row i (n_held,), w_{:D} given by its
    non-zeros (idx: the kernels' feature ids, val), b the bias."""
    y = np.full(split.held_X.shape[0], -1.0)
    y[split.held_Y.indices[split.held_Y.indptr[k] : split.held_Y.indptr[k + 1]]] = 1.0
    scores = split.held_X[:, idx] @ val + bias if idx.size else np.full(y.size, bias)
    return 0.5 * np.maximum(0.0, 1.0 - y * scores) ** 2


def solve_class_at(data: Data, work, k: int, loss: int, n_lam: float, n_rows: int, p: PPDSparseParams):
    """solve_class (Algorithm 1) for class k of n_rows rows at the kernel's ℓ1 weight n_lam
    (n_rows · lam: the paper's λ) and ℓ2 weight n_rows · tau, with p's other settings."""
    return solve_class(
        data,
        work,
        k,
        loss,
        n_lam,
        n_rows * p.tau,
        p.kappa,
        p.kappa_growth,
        p.tol,
        p.max_iter,
        p.max_inner,
        p.shrink,
        0.0 if p.delta is None else p.delta,
        p.x_threshold,
        p.random_state,
        p.primal_ratio,
    )


def choose_ratios(split: Split, lo: int, hi: int, p: PPDSparseParams) -> np.ndarray:
    """lam auto (squared hinge): class k's ratio r_k = lam_k/λmax_k (hi − lo,), by a path on the
    fit rows and a one-standard-error rule on the held-out rows (Hastie, Tibshirani and Friedman,
    The Elements of Statistical Learning, §7.10, here per class). For r on auto_path() (r = 1:
    w_k = 0 with its optimal bias ȳ_k/(1 + tau), lam_max), class k is trained on the fit rows at
    lam = r·λmax_k (λmax_k of the fit rows), and L_k(r) is its mean held-out loss
    (held_out_losses), s_k(r) that mean's standard error (std/√n_held); the path stops
    AUTO_PATIENCE points after the smallest L_k or at AUTO_MIN_RATIO. r_k is the largest r with
    L_k(r) ≤ L_k(r*) + s_k(r*)/√K, r* the minimiser, K the number of classes: the summed held-out
    loss Σ_k L_k, whose standard error is about √K·s_k for K independent classes of similar
    spread, stays within one standard error of the sum of the per-class minima, its slack split
    evenly between the classes. So a class takes the sparsest model the held-out rows cannot
    tell from its best, and the empty model when no weight lowers its held-out loss enough."""
    fit = split.fit
    n_fit = fit.indptr.size - 1
    work = make_work(n_fit, fit.col_map.size)
    lmax = lam_max(fit, lo, hi, p.tau)
    n_classes = fit.pos_ptr.size - 1
    path = auto_path()
    ratios = np.ones(hi - lo)
    for k in range(lo, hi):
        n_pos = fit.pos_ptr[k + 1] - fit.pos_ptr[k]
        empty = held_out_losses(split, k, np.zeros(0, np.int64), np.zeros(0), (2 * n_pos - n_fit) / n_fit / (1 + p.tau))
        means, errors = [empty.mean()], [empty.std() / np.sqrt(empty.size)]
        for r in path[1:]:
            if lmax[k - lo] == 0 or len(means) - 1 - int(np.argmin(means)) >= AUTO_PATIENCE:
                break
            i, v, b, *_ = solve_class_at(fit, work, k, OVR_HALF_SQUARED_HINGE, n_fit * r * lmax[k - lo], n_fit, p)
            losses = held_out_losses(split, k, i, v, b)
            means.append(losses.mean())
            errors.append(losses.std() / np.sqrt(losses.size))
        best = int(np.argmin(means))
        slack = errors[best] / np.sqrt(n_classes)
        ratios[k - lo] = path[int(np.flatnonzero(np.asarray(means) <= means[best] + slack)[0])]
    return ratios


def solve_group(
    data: Data, lo: int, hi: int, p: PPDSparseParams, n_rows: int, split: Split | None = None
) -> GroupResult:
    """Algorithm 1 for classes lo … hi−1, sharing one set of scratch arrays; weights by the
    store's feature ids and values: on rows divided by c = data.scale[0] (data_scale), the
    solution w' at lam'_k is w'/c, reported with lam_k = c·lam'_k (the store's scale), its
    objective and G(α) unchanged (F_k of the store's rows with ℓ2 weight tau·c² on w, tau on
    the bias); on standardized columns (values divided by s_j = data.col_scale[j] first) weight
    j of the store's column is w'_j/(c·s_j) and lam_k, objective and G(α) are those of the
    standardized columns (module docstring, "Standardized columns"). split: the held-out split
    of `data` (split_data) that lam auto needs."""
    work = make_work(n_rows, data.col_map.size)
    loss = OVR_HALF_SQUARED_HINGE if p.loss == "squared_hinge" else OVR_HINGE
    if p.lam == "auto":
        assert split is not None, "lam auto needs the held-out split"
        ratios = choose_ratios(split, lo, hi, p)
        lams = ratios * lam_max(data, lo, hi, p.tau)
    else:
        ratios, lams = None, class_lams(data, lo, hi, p)
    idx, val = [], []
    bias = np.zeros(hi - lo)
    stats = np.zeros((hi - lo, 6))
    objective = np.zeros(hi - lo)
    for k in range(lo, hi):
        lam = lams[k - lo]
        if ratios is not None and ratios[k - lo] == 1.0:  # w_k = 0 and its bias in closed form (lam_max)
            n_pos = data.pos_ptr[k + 1] - data.pos_ptr[k]
            i, v, b = np.zeros(0, np.int64), np.zeros(0), (2 * n_pos - n_rows) / n_rows / (1 + p.tau)
            objective[k - lo] = class_objective(data, work, k, i, v, b, loss, lam, p.tau)
            it, n_active, n_alpha, conv, dual = 0, 0, 0, 1, -n_rows * objective[k - lo]
        else:
            i, v, b, it, n_active, n_alpha, conv, dual, _ = solve_class_at(data, work, k, loss, n_rows * lam, n_rows, p)
            objective[k - lo] = class_objective(data, work, k, i, v, b, loss, lam, p.tau)
        store_ids = data.col_map[i]
        order = np.argsort(store_ids)
        idx.append(store_ids[order])
        val.append(v[order] / data.scale[0] / data.col_scale[i[order]])
        bias[k - lo] = b
        stats[k - lo] = (it, n_active, n_alpha, conv, dual, lam * data.scale[0])
    indptr = np.concatenate([[0], np.cumsum([len(i) for i in idx])]).astype(np.int64)
    return GroupResult(indptr, np.concatenate(idx).astype(np.int64), np.concatenate(val), bias, stats, objective)


def _group_task(g: int, ref: _DataRef, groups: list[tuple[int, int]], params: dict) -> GroupResult:
    data, split = _worker_data(ref)
    return solve_group(data, *groups[g], PPDSparseParams(**params), ref.source.n_rows, split)


def _rescaled(p: PPDSparseParams) -> bool:
    """Whether the rows are solved divided by data_scale: for every lam that is not a number
    (a number fixes the problem: lam and tau on the store's values, the bias feature 1)."""
    return not isinstance(p.lam, float)


def _held_out(p: PPDSparseParams) -> tuple[float, int] | None:
    """split_data's (share, seed) for lam auto, else None."""
    return (p.held_out, p.random_state) if p.lam == "auto" else None


def _training(
    source: ChunkSource, p: PPDSparseParams, columns: tuple[np.ndarray, np.ndarray] | None
) -> tuple[Data, Split | None]:
    """The training matrix of `source` (standardized `columns`: build_data) and lam auto's split
    of it, built in this process."""
    data = build_data(source, p.x_threshold > 0, _rescaled(p), columns)
    held_out = _held_out(p)
    return data, None if held_out is None else split_data(data, *held_out, p.x_threshold > 0)


def _finished_groups(
    engine: Engine,
    source: ChunkSource,
    p: PPDSparseParams,
    groups: list[tuple[int, int]],
    todo: list[int],
    token: str,
    columns: tuple[np.ndarray, np.ndarray] | None,
) -> Unordered:
    """(group, GroupResult) pairs as groups finish: in process, in `todo` order (`threads`
    threads solving ahead); on Dask, in completion order (Engine.imap_unordered: tasks submitted
    in `todo` order, first = highest priority; a lost worker's groups submitted again). Its
    `ready()` says whether the next group has finished already; closing it cancels what has not
    started. `token` names the run's training matrix on the workers (_machine_data); `columns`
    are the standardized columns (build_data)."""
    threads = solver_threads(p, engine)
    if engine.client is None and engine.mode == "inprocess":
        if threads == 1:
            return Unordered(_solved_in_order(source, p, groups, todo, columns), lambda: False)
        pending: deque = deque()  # (group, future) in todo order, not yielded yet
        return Unordered(
            _solved_by_threads(source, p, groups, todo, pending, threads, columns),
            lambda: bool(pending) and pending[0][1].done(),
        )
    ref = _DataRef(source, token, p.x_threshold > 0, _rescaled(p), _held_out(p), columns)
    return engine.imap_unordered(
        _group_task, todo, desc="ppdsparse: groups", ref=ref, groups=groups, params=p.model_dump()
    )


def _solved_in_order(
    source: ChunkSource,
    p: PPDSparseParams,
    groups: list[tuple[int, int]],
    todo: list[int],
    columns: tuple[np.ndarray, np.ndarray] | None,
) -> Generator[tuple[int, GroupResult], None, None]:
    data, split = _training(source, p, columns)
    for g in todo:
        yield g, solve_group(data, *groups[g], p, source.n_rows, split)


def _solved_by_threads(
    source: ChunkSource,
    p: PPDSparseParams,
    groups: list[tuple[int, int]],
    todo: list[int],
    pending: deque,
    threads: int,
    columns: tuple[np.ndarray, np.ndarray] | None,
) -> Generator[tuple[int, GroupResult], None, None]:
    """`threads` threads sharing one copy of the data solve the groups ahead (the kernels
    release the GIL); yielded in `todo` order, `pending` holding the (group, future) not yet
    yielded."""
    data, split = _training(source, p, columns)
    with ThreadPoolExecutor(threads) as pool:
        pending.extend((g, pool.submit(solve_group, data, *groups[g], p, source.n_rows, split)) for g in todo)
        try:
            while pending:
                g, fut = pending[0]
                result = fut.result()
                pending.popleft()
                yield g, result
        finally:
            for _, fut in pending:
                fut.cancel()


SCORE_BLOCK = 2**22  # _threshold_counts_task: scores held at once (rows × classes, 32 MiB)


def _threshold_counts_task(
    source: ChunkSource, chunk_id: int, *, coef: sp.csr_matrix, bias: np.ndarray
) -> ThresholdCounts:
    """metrics.ThresholdCounts over MARGIN_GRID of the chunk's margins X Wᵀ + b (W = coef, K × d)
    against its labels, SCORE_BLOCK scores at a time (a large K never needs the n × K matrix)."""
    chunk = source.read_chunk(chunk_id)
    X, Y = chunk.X, sp.csr_matrix(chunk.labels)
    block = max(1, SCORE_BLOCK // max(coef.shape[0], 1))
    W = coef.T.tocsc()
    counts = ThresholdCounts(np.zeros(MARGIN_GRID.size, np.int64), np.zeros(MARGIN_GRID.size, np.int64), 0)
    for lo in range(0, X.shape[0], block):
        S = X[lo : lo + block] @ W
        S = (S.toarray() if sp.issparse(S) else np.asarray(S)) + bias
        counts = add_results(counts, threshold_counts(S, Y[lo : lo + block].toarray() > 0, MARGIN_GRID))
    return counts


@dataclasses.dataclass(frozen=True)
class ColumnSums:
    """Per column that holds a non-zero value, by store feature id ascending (`ids`): its
    non-zeros, Σ_i x_ij and Σ_i x_ij² in float64; ids None: more than LOW_DIM_MAX_COLUMNS
    columns hold one (wide data, never standardized; no sums kept). `+` (add_results) merges
    two: the union of their columns, each column's sums added left then right, so the fixed sum
    tree of Engine.map_reduce gives the same bits for any workers."""

    ids: np.ndarray | None
    nnz: np.ndarray
    sums: np.ndarray
    squares: np.ndarray

    def __add__(self, other: ColumnSums) -> ColumnSums:
        if self.ids is None or other.ids is None:
            return WIDE
        ids = np.union1d(self.ids, other.ids)
        if ids.size > LOW_DIM_MAX_COLUMNS:
            return WIDE
        out = [np.zeros(ids.size, np.int64), np.zeros(ids.size), np.zeros(ids.size)]
        for part in (self, other):
            at = np.searchsorted(ids, np.asarray(part.ids))
            for total, add in zip(out, (part.nnz, part.sums, part.squares)):
                total[at] += add
        return ColumnSums(ids, *out)


WIDE = ColumnSums(None, np.zeros(0, np.int64), np.zeros(0), np.zeros(0))


def column_sums(X: sp.csr_matrix) -> ColumnSums:
    """ColumnSums of the rows X (CSR), each column's values added in row-major order."""
    probe = X.indices[:WIDE_PROBE][X.data[:WIDE_PROBE] != 0]
    if np.unique(probe).size > LOW_DIM_MAX_COLUMNS:
        return WIDE  # text: told by its first values, without sorting all of them
    if not X.has_canonical_format:
        X = X.tocsr(copy=True)
        X.sum_duplicates()
    keep = X.data != 0
    columns, values = X.indices[keep], X.data[keep].astype(np.float64)
    ids = np.unique(columns).astype(np.int64)
    if ids.size > LOW_DIM_MAX_COLUMNS:
        return WIDE
    at = np.searchsorted(ids, columns)
    with np.errstate(over="ignore"):  # squares beyond float64: column_scales takes such a column as 1
        return ColumnSums(
            ids,
            np.bincount(at, minlength=ids.size).astype(np.int64),
            np.bincount(at, values, ids.size),
            np.bincount(at, values * values, ids.size),
        )


class Scan(NamedTuple):
    """init's one pass over the training rows: the positive rows of every class (K,) and the
    ColumnSums of the rows."""

    positives: np.ndarray
    columns: ColumnSums


def _scan_task(source: ChunkSource, chunk_id: int) -> Scan:
    chunk = source.read_chunk(chunk_id)
    labels = chunk.labels
    if isinstance(labels, sp.csr_matrix):
        positives = np.bincount(labels.indices, minlength=source.n_classes).astype(np.int64)
    else:
        positives = np.bincount(labels, minlength=source.n_classes).astype(np.int64)
    return Scan(positives, column_sums(chunk.X))


def standardized_columns(p: PPDSparseParams, columns: ColumnSums, n_rows: int) -> tuple[np.ndarray, np.ndarray] | None:
    """The columns whose values the classes are solved divided by their standard deviations
    (module docstring, "Standardized columns"): (store feature ids ascending, s_j), or None.
    Only on dense low-dimensional data, the data of stagewise's λ rule: at most
    LOW_DIM_MAX_COLUMNS (1000) columns hold a non-zero, and they are at least LOW_DIM_MIN_DENSITY
    (10 %) non-zero on average; then with standardize=True always, with "auto" where the
    columns' s_j (`column_scales`, 1 for a constant column) span more than SCALE_SPREAD (10×:
    columns in different units); False: never. Sparse or wide data (text, hashed features) keep
    the columns as given."""
    if columns.ids is None or not dense_low_dimensional(n_rows, columns.ids.size, int(columns.nnz.sum())):
        return None
    notice = offset_notice("ppdsparse", n_rows, columns.ids, columns.sums, columns.squares)
    if notice:
        log.warning(notice)
    scale = standardized_scale(p.standardize, n_rows, columns.sums, columns.squares)
    return None if scale is None else (columns.ids, scale)


# -- the model -------------------------------------------------------------------------------


@register_model
class PPDSparseModel(LinearModel):
    """A LinearModel with sparse coef_ (K × d CSR) whose top-k prediction is one numba pass over
    the rows of X (ppdsparse_kernels.topk_rows: the row's scores from coef_ by feature into one
    K-vector, then the k best by insertion), so a large K never needs the n × K score matrix."""

    kind = "ppdsparse"

    @property
    def model_size(self) -> int:
        """Bytes of the stored weights: non-zeros (8-byte value + 4-byte column), row pointers, biases."""
        c = self.coef_
        return int(c.nnz * 12 + (c.shape[0] + 1) * 8 + self.intercept_.nbytes)

    def _by_feature(self):
        """coef_ by feature for topk_rows, built once per coef_: the features where at least
        DENSE_FEATURE_SHARE of the classes are non-zero as dense K-rows (a vectorized loop; 8 bytes
        per entry, at most 80 per non-zero), the others as CSC (int32 classes, float64 weights)."""
        c = self.coef_
        if getattr(self, "_by_feature_of", None) is not c:
            W = c.tocsc()
            W.sum_duplicates()
            K, d = W.shape
            dense = np.flatnonzero(np.diff(W.indptr) >= max(DENSE_FEATURE_SHARE * K, 1))
            dense_of = np.full(d, -1, np.int64)
            dense_of[dense] = np.arange(dense.size)
            w_dense = np.ascontiguousarray(W[:, dense].T.toarray(), dtype=np.float64)
            col = np.repeat(np.arange(d), np.diff(W.indptr))
            keep = dense_of[col] < 0
            ptr = np.concatenate([[0], np.cumsum(np.bincount(col[keep], minlength=d))]).astype(np.int64)
            self._by_feature_cache = (
                ptr,
                W.indices[keep].astype(np.int32),
                W.data[keep].astype(np.float64),
                dense_of,
                w_dense,
            )
            self._by_feature_of = c
        return self._by_feature_cache

    def predict_topk(self, X, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        from streamfit.model import _as_csr

        if isinstance(X, ChunkSource):
            parts = [self.predict_topk(c.X, k) for c in X.iter_chunks()]
            return np.vstack([a for a, _ in parts]), np.vstack([b for _, b in parts])
        X = _as_csr(X, self.n_features)
        k = min(k, len(self.classes_))
        top = np.zeros((X.shape[0], k), np.int64)
        best = np.zeros((X.shape[0], k))
        bias = np.array(self.intercept_, dtype=np.float64)
        unranked = self.unranked_classes()
        bias[unranked] = -np.inf  # ranked last (Model.ranking_scores); their scores are put back below
        # X's dtypes as they are; numba's Dispatcher is untyped for mypy
        topk_rows(X.indptr, X.indices, X.data, *self._by_feature(), bias, k, top, best)  # type: ignore[call-arg]
        if unranked.size:
            rows, at = np.nonzero(np.isin(top, unranked))
            best[rows, at] = self._scores(X[rows])[np.arange(rows.size), top[rows, at]]
        return top, best

    def predict(self, X, threshold: float | None = None):
        if self.multilabel:
            return super().predict(X, threshold)
        return self.classes_[self.predict_topk(X, 1)[0][:, 0]]


# -- the solver ------------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class PPDSparseState(SolverState):
    """The classes cut into groups of `group_size` (group g: classes [g·group_size,
    min((g + 1)·group_size, n_classes))) and the groups finished so far, in the order they
    finished: entry i of each list is GroupResult's field of group finished[i]. From init's
    pass over the rows: every class's positive rows (the order groups are started in), and
    the standardized columns' store feature ids and standard deviations s_j
    (standardized_columns; None: none), so a resume and any worker count solve on the same s."""

    n_classes: int
    group_size: int
    positives: np.ndarray | None = None
    scaled_columns: np.ndarray | None = None
    column_scale: np.ndarray | None = None
    finished: list[int] = dataclasses.field(default_factory=list)
    indptr: list[np.ndarray] = dataclasses.field(default_factory=list)
    indices: list[np.ndarray] = dataclasses.field(default_factory=list)
    values: list[np.ndarray] = dataclasses.field(default_factory=list)
    bias: list[np.ndarray] = dataclasses.field(default_factory=list)
    stats: list[np.ndarray] = dataclasses.field(default_factory=list)
    objective: list[np.ndarray] = dataclasses.field(default_factory=list)
    threshold: float | None = None  # multilabel, fit_threshold: fitted after the last group (_threshold_counts_task)

    def groups(self) -> list[tuple[int, int]]:
        """[lo, hi) of every group."""
        return [(lo, min(lo + self.group_size, self.n_classes)) for lo in range(0, self.n_classes, self.group_size)]

    def in_class_order(self, field: str) -> list[np.ndarray]:
        """The entries of list `field` of the finished groups, by group id (so by class)."""
        entries = getattr(self, field)
        return [entries[i] for i in np.argsort(self.finished, kind="stable")]


@register_solver
class PPDSparseSolver(Solver[PPDSparseState]):
    """PPDSparse (Yen et al. 2017, Algorithms 1-3, §5.1-5.3): per-class primal-dual sparse
    one-vs-all; one step = one finished group of classes (see the module docstring).

    The groups in flight are an iterator on the instance, started by the first step of a run
    and rebuilt after a resume from the unfinished groups."""

    name = "ppdsparse"
    Params = PPDSparseParams
    params: PPDSparseParams
    State = PPDSparseState
    mid_run_models = False  # a model with some classes untrained is not worth validating

    def __init__(self, params: PPDSparseParams):
        super().__init__(params)
        self._running: Unordered | None = None
        self._engine: Engine | None = None  # what _running runs on
        self._token = ""  # names the training matrix the workers of _running share (_machine_data)

    def group_size(self, n_classes: int, n_rows: int, engine: Engine) -> int:
        threads = solver_threads(self.params, engine)
        return self.params.group_size or default_group_size(n_classes, n_rows, threads)

    def init(self, ctx: Context) -> PPDSparseState:
        """The cut, and one pass over the rows (_scan_task): the classes' positives and the
        columns' sums, from which standardized_columns decides the columns' scales."""
        self._stop_running()
        K = ctx.source.n_classes
        scan = ctx.engine.map_reduce(_scan_task, ctx.source, range(ctx.source.n_chunks), desc="ppdsparse: labels")
        columns = standardized_columns(self.params, scan.columns, ctx.source.n_rows)
        return PPDSparseState(
            n_classes=K,
            group_size=self.group_size(K, ctx.source.n_rows, ctx.engine),
            positives=scan.positives,
            scaled_columns=None if columns is None else columns[0],
            column_scale=None if columns is None else columns[1],
        )

    def check_resume(self, ctx: Context, state: PPDSparseState) -> None:
        """The finished groups are indices of the checkpoint's cut: a resume keeps it (group_size
        None) or must ask for the same one."""
        self._stop_running()
        if self.params.group_size is None:
            return  # the default cut never enters the model: the checkpoint's cut goes on
        size = self.params.group_size
        if state.group_size != size:
            where = os.path.dirname(ctx.chunk_state.root) if ctx.chunk_state.root else "the in-memory checkpoint"
            raise ConfigError(
                f"{where}: this run was checkpointed with {state.group_size} classes per group and "
                f"would now be cut into groups of {size}; resume with -p group_size={state.group_size}"
            )

    def step(self, ctx: Context, state: PPDSparseState) -> dict[str, Any]:
        if self._running is None:
            self._running = self._start(ctx, state)
        g, res = next(self._running)
        state.finished.append(g)
        for field in ("indptr", "indices", "values", "bias", "stats", "objective"):
            getattr(state, field).append(getattr(res, field))
        state.step += 1
        if self.finished(state):
            self._stop_running()
            if ctx.source.multilabel and self.params.fit_threshold:
                model = self.to_model(ctx, state)
                counts = ctx.engine.map_reduce(
                    _threshold_counts_task,
                    ctx.source,
                    range(ctx.source.n_chunks),
                    desc="ppdsparse: threshold",
                    coef=model.coef_,
                    bias=model.intercept_,
                )
                state.threshold = best_threshold(counts, MARGIN_GRID, center=0.0)
        lo, hi = state.groups()[g]
        st = res.stats
        return {
            "group": g,
            "classes": [lo, hi],
            "objective": summed_objective(state),
            "dual_objective": float(-st[:, 4].sum()),
            "nnz": int(sum(i.size for i in state.indices)),
            "mean_active": float(st[:, 1].mean()),
            "iterations": int(st[:, 0].sum()),
            "not_converged": int((st[:, 3] == 0).sum()),
        }

    def _start(self, ctx: Context, state: PPDSparseState) -> Unordered:
        """The unfinished groups, largest first (by positives, then by id), in flight."""
        positives = state.positives
        assert positives is not None, "init's scan"
        groups = state.groups()
        done = set(state.finished)
        todo = sorted(
            (g for g in range(len(groups)) if g not in done),
            key=lambda g: (-int(positives[groups[g][0] : groups[g][1]].sum()), g),
        )
        self._token = f"{uuid.uuid4().hex}-{int(self.params.x_threshold > 0)}"
        self._engine = ctx.engine
        columns = None
        if state.scaled_columns is not None:
            assert state.column_scale is not None, "set with scaled_columns"
            columns = (state.scaled_columns, state.column_scale)
        return _finished_groups(ctx.engine, ctx.source, self.params, groups, todo, self._token, columns)

    def checkpoint_due(self, state: PPDSparseState, every: int, saved_at: int) -> bool:
        """Due once `every` steps have passed since the last checkpoint (step `saved_at`), at a
        step after which no finished group is waiting: a save (about a dozen fsyncs) never keeps
        a result that has arrived from being taken in, so the driver's serial saves shrink to
        about one per burst of results instead of one per group, and a kill loses at most the
        groups taken in since the last save (all of them results that had arrived). The driver
        also saves after the last group."""
        return state.step - saved_at >= every and not (self._running is not None and self._running.ready())

    def _stop_running(self) -> None:
        if self._running is not None:
            self._running.close()  # cancels the groups not started
            self._running = None
            assert self._engine is not None, "set with _running"
            self._engine.on_every_worker(drop_shared_data, self._token)

    def max_steps(self, state: PPDSparseState) -> int:
        """One step per group of classes."""
        return len(state.groups())

    def finished(self, state: PPDSparseState) -> bool:
        return len(state.finished) == len(state.groups())

    def converged(self, state: PPDSparseState) -> bool:
        return self.finished(state) and _not_converged(state).size == 0

    def not_converged_reason(self, state: PPDSparseState) -> str:
        late = _not_converged(state)
        shown = ", ".join(str(k) for k in late[:5]) + (", ..." if late.size > 5 else "")
        return (
            f"{late.size} of {state.n_classes} classes (ids {shown}) stopped at max_iter={self.params.max_iter} "
            f"iterations with a projected dual gradient > tol {self.params.tol:g}"
        )

    def to_model(self, ctx: Context, state: PPDSparseState) -> PPDSparseModel:
        """W of the finished classes (the others all zero) as K × d CSR; info: groups_finished,
        groups, nnz, mean_active (over the finished classes), max_iterations (Algorithm 1's iterations
        of the class that took most), not_converged, lam_min and lam_max (the smallest and largest
        per-class ℓ1 weight lam_k used), converged. The decision threshold is the fitted one
        (multilabel, fit_threshold; once the last group has finished), else the model's 0."""
        K, d = state.n_classes, ctx.source.n_features
        groups = state.groups()
        counts = np.zeros(K, np.int64)
        bias = np.zeros(K)
        for g, indptr, b in zip(state.finished, state.indptr, state.bias):
            lo, hi = groups[g]
            counts[lo:hi] = np.diff(indptr)
            bias[lo:hi] = b
        indptr = np.concatenate([[0], np.cumsum(counts)])
        indices = np.concatenate(state.in_class_order("indices") or [np.zeros(0, np.int64)])
        values = np.concatenate(state.in_class_order("values") or [np.zeros(0)])
        coef = sp.csr_matrix((values, indices.astype(np.int32), indptr), shape=(K, d))
        stats = np.vstack(state.in_class_order("stats") or [np.zeros((0, 6))])
        info = {
            "groups_finished": len(state.finished),
            "groups": len(groups),
            "nnz": int(coef.nnz),
            "mean_active": float(stats[:, 1].mean()) if len(stats) else 0.0,
            "max_iterations": int(stats[:, 0].max()) if len(stats) else 0,
            "not_converged": int((stats[:, 3] == 0).sum()),
            "lam_min": float(stats[:, 5].min()) if len(stats) else 0.0,
            "lam_max": float(stats[:, 5].max()) if len(stats) else 0.0,
            "standardized": state.scaled_columns is not None,
        }
        info["converged"] = self.converged(state)
        return PPDSparseModel(
            coef,
            bias,
            classes=ctx.source.classes,
            n_features=d,
            multilabel=ctx.source.multilabel,
            solver=self.name,
            params=self.params.model_dump(),
            info=info,
            decision_threshold=state.threshold,
        )


def solver_threads(p: PPDSparseParams, engine: Engine) -> int:
    """The threads that solve class groups in this process: 1 on a cluster (the workers solve
    them), else `threads`, or with None the CPUs this process may use (its affinity mask where
    the system has one). The model does not depend on it (class k's stream is seeded by k)."""
    if engine.client is not None or engine.mode != "inprocess":
        return 1
    if p.threads is not None:
        return p.threads
    if hasattr(os, "sched_getaffinity"):
        return max(1, len(os.sched_getaffinity(0)))
    return os.cpu_count() or 1


def default_group_size(n_classes: int, n_rows: int, threads: int) -> int:
    """group_size None: classes per group for K = n_classes classes of n_rows rows. About
    DEFAULT_GROUPS groups (⌈K/64⌉ classes each), so many Dask workers share the classes, but at
    least ⌈MIN_GROUP_WORK/n_rows⌉ classes a group, so that a small job is a few steps: each step
    costs the driver a metrics line (synced to disk), perhaps a checkpoint, and on Dask a task,
    which next to a small set's classes (about 10 ms each at 1455 rows: sector-23 took 23 steps
    for 0.25 s of solving) are most of its time (docs/benchmarks.md, session 14); yet no fewer
    than `threads` groups (the in-process threads share the groups, ⌈K/threads⌉ classes each).
    A function of the store's shape and the parameters: the same cut on every resume with the same
    `threads`; a resume keeps its checkpoint's cut (check_resume)."""
    by_count = -(-n_classes // DEFAULT_GROUPS)
    by_work = min(-(-MIN_GROUP_WORK // max(n_rows, 1)), -(-n_classes // threads))
    return max(1, by_count, by_work)


def summed_objective(state: PPDSparseState) -> float:
    """Σ over the finished classes of F_k(w_k), (9) in the averaged convention (loss + penalty,
    each class's loss averaged over the n samples), summed by class id."""
    return float(np.concatenate(state.in_class_order("objective") or [np.zeros(0)]).sum())


def _not_converged(state: PPDSparseState) -> np.ndarray:
    """Ids of the finished classes that stopped at max_iter, ascending."""
    groups = state.groups()
    late = [groups[g][0] + np.flatnonzero(stats[:, 3] == 0) for g, stats in zip(state.finished, state.stats)]
    return np.sort(np.concatenate(late or [np.zeros(0, np.int64)]))
