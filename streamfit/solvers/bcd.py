"""Block coordinate descent for ℓ1/ℓ2-regularized multiclass squared hinge: Blondel, Seki and
Uehara (2013), "Block coordinate descent algorithms for large-scale sparse multiclass
classification", Algorithms 1–3, with the paper's other objectives and a FISTA comparator.

Objective (eq. 2 and §4.7, §5.3), in the project's averaged convention: W ∈ R^{d×m}, scores
s_i = Wᵀx_i,

    F(W, b) = (1/n) Σ_i ℓ_i(Wᵀx_i + b) + λ P(W)                            (`_objective`)

with ℓ one of streamfit.objectives.losses ("squared_hinge": eq. 2, or the label-ranking loss of §4.7 on
multilabel stores; "multitask_squared_hinge": eq. 11; "logistic": eq. 12; "auto", the default:
eq. 2 on multiclass stores, eq. 11 on multilabel ones, `BCDParams.loss_for`) and λP one of
streamfit.objectives.penalties ("group_elasticnet", the default, = λ Σ_j (ρ‖W_{j:}‖₂ + (1 − ρ)/2
‖W_{j:}‖²) with ρ = l1_ratio = 0.2; "l1/l2" = λ Σ_j ‖W_{j:}‖₂ as in eq. 2, "l1", "l2" = (λ/2)‖W‖²,
"elasticnet", "sparse_group"). The logged `objective` is this F. lam=None (the default) takes λ
from the n training rows (`BCDParams.lam_for`): the ridge weight λ(1 − ρ) = 1/n, LinearSVC(C=1)'s
½‖w‖² + C Σ_i ℓ_i divided by C·n (λ = 1/n for the penalties without a ridge part). Why not the
paper's l1/l2 alone: on tf-idf text its optimum is 2–10 points below LinearSVC at every λ
measured (its small-λ limit is a sparse margin, not the ℓ2 one); the ridge closes the gap while
the group part still zeroes whole rows (docs/benchmarks.md, session 14). fit_intercept=True (the
default; the paper has none) adds the unpenalised intercept b ∈ R^m as one more block: the
row of a constant feature x_{i,d} = 1 appended to every sample (`_design`), updated by the
same block steps with λ = 0 for that row (so b is not in P, and the violation (9) of its row
is ‖G_{d:}‖). Blocks are the rows W_{j:}, one per feature with a non-zero value in the
training data (the other rows stay exactly zero).

method="bcd", mode "memory" — Algorithm 1, sequentially, in numba (bcd_kernels.bcd_epoch) on X
in CSC with S = XW kept up to date (§4.3). One step is one outer iteration:
- variant="ls", BCD(LS): L_j = max(‖h_j‖∞, ε) from the generalized second derivatives (6),
  i.e. H = L_j·I in the block sub-problem (3), or (`curvature`) H = diag(max(h_jr, ε)), the
  sub-problem then solved by penalties.row_prox_diag (Tseng and Yun allow any H between two
  positive multiples of I); curvature="auto" (the default) takes the diagonal for eq. (11), which
  is separable over labels, so that diag(h_j) is its block's generalized Hessian and one label's
  curvature does not shorten the other labels' steps (bibtex, 159 labels: F after 100 outer
  iterations below L_j·I's after 200), and L_j·I for eq. (2) and (12), whose
  classes are coupled within a row (a term's Hessian 2x²(e_y − e_r)(e_y − e_r)ᵀ is up to twice
  its diagonal: on MNIST diag(h_j) backtracked 4× as often and went slower; docs/benchmarks.md,
  session 25); backtracking α ∈ {1, ω, ω², …} on the sufficient decrease condition (7); the feature blocks
  in a fresh seeded permutation each outer iteration (block_order="permuted", the default) or
  cyclic in feature order (block_order="cyclic", the paper's), and the intercept's block after
  every INTERCEPT_SPACING·n non-zeros of feature columns and last (`_memory_order`); either
  order visits every block in each outer iteration, the essentially cyclic rule of Tseng and
  Yun's convergence proof;
- variant="cst", BCD(CST): d blocks drawn uniformly with replacement (Richtárik and Takáč),
  L_j = K_j = (c/n) Σ_i x_ij² (c = losses.curvature, 4(m − 1) for eq. 2, §4.4.2), α = 1.
- Stopping, eqs. (9)–(10): with v^t the violation of the block visited at step t, stop after
  outer iteration k when Σ_{t∈T^k} v^t / Σ_{t∈T^1} v^t < tol (ls, each visit of a block a
  step t; the ratio of maxima for random blocks) — stopping="violation". stopping="auto" also
  requires the geometric estimate of the decrease of F still to come (`_tail_estimate`, over
  windows of TAIL_WINDOW outer iterations) to be < tol·F; stopping="gap" (l1/l2,
  l1) requires instead the certified relative duality gap (F − D)/F < tol (`_gap`, dual point
  c·∇ℓ(S) of losses.dual_loss), so that (F − F*)/F* ≤ tol/(1 − tol). docs/architecture.md
  (## bcd) says why eq. (10) alone stops far from F* at small λ.
- shrinking=True (§5.2.4, ℓ1/ℓ2; group_elasticnet with λρ for λ): a zero block with ‖G_{j:}‖ < λ − M/n (M the largest violation
  of the previous outer iteration) is skipped; when the stopping rule holds on the remaining
  blocks, all blocks are reactivated and the run goes on until it holds on all of them.

method="bcd", mode "chunks" — out of core on the Engine, each chunk's rows of S in the ChunkState
("scores"). The active feature blocks of an outer iteration (cyclic for "ls", a seeded permutation
for "cst") are cut into groups of `group_size` features, and the intercept's row (fit_intercept)
joins every group (`_group`: on text it otherwise lags as in the memory mode); each group B is
one block of Tseng and Yun's coordinate gradient descent: δ_j = prox_{λP/L_j}(W_j − G_j/L_j) − W_j
for j ∈ B, then W_B ← W_B + α δ_B with α from (7) summed over the group. One step is one group:
one map_reduce pass (bcd_kernels.chunk_pass) in which every chunk
  1. applies the step accepted for the group before (S ← S + X_{:C} Δ_C: the next version of
     the scores),
  2. evaluates the pending group's loss change at the candidates α ∈ {1/ω, 1, ω, ω², 0} (the
     line search of (7); α = 0 always passes, so F never increases),
  3. returns, at every candidate, the gradients of the next group B' and their curvatures
     Σ_i ω_i x_ij² h_ir, ω_i = #{j ∈ B' : x_ij ≠ 0} (Richtárik and Takáč's expected separable
     overapproximation for simultaneous updates).
The driver accepts the largest passing candidate and computes B''s directions with
L_j = θ · max(‖Σ_i ω_i x_ij² h_i‖∞/n, ε), θ ∈ [THETA, 1/THETA] adapted to the accepted step
(θ ← θ/α; ×4 when only α = 0 passes). Variant "cst" takes Richtárik and Takáč's safe parallel
step L_j = (c/n) Σ_i ω_i x_ij², α = 1. Stopping: eq. (10) over the groups' violations, and with
stopping="auto" the memory mode's tail estimate of F over the closed outer iterations (the F of
the iteration being closed comes from the closing pass itself, so the estimate lags by one);
shrinking (ls and cst) drops zero blocks from later groups by the memory mode's rule. `init`
runs the column statistics pass and the first group's pass; the step that line-searches the
last group of an outer iteration closes it (its record has the objective, the accuracy and the
violation ratio). mode "auto" picks "memory" when X (CSC, float64) and S fit in
`memory_budget_mb`.

method="fista" — FISTA (Beck and Teboulle 2009) on the same F, the paper's full-gradient
comparator. One step is one iteration, one map_reduce that evaluates the loss at
W_k = prox_{λP/L}(Y_k − ∇L(Y_k)/L) and the loss and gradient at the next extrapolated point
Y_{k+1} = W_k + ((t_k − 1)/t_{k+1})(W_k − W_{k−1}); variant "ls" backtracks L ← 2L until
L(W_k) ≤ L(Y_k) + ⟨∇L(Y_k), W_k − Y_k⟩ + (L/2)‖W_k − Y_k‖² (a rejected candidate costs one more
pass), variant "cst" uses 1/K with K = (c/n) ‖X‖²_F ≥ the Lipschitz constant of ∇L. It stops
when the gradient mapping ‖L (Y_k − W_k)‖_F falls below tol times its first value.

Standardized columns (`standardize`, session 25). λP is not invariant to a column's units: a
column given in small units needs large weights, which the penalty shrinks more (dna-300 and
letter-300 in other units, 10^u_j with u_j ∈ [−3, 3]: 8–11 points below StandardScaler then
LinearSVC). Where the data is low-dimensional and dense (at most LOW_DIM_MAX_COLUMNS = 1000
active columns, at least LOW_DIM_MIN_DENSITY = 10 % of them non-zero per row: stagewise's
setting for its own standardization), the penalty can be taken of the standardized columns'
weights: with s_j the column's standard deviation over the n training rows (`column_scales`,
1 for a constant column and for the intercept), eq. (2)'s λ Σ_j ‖W_j‖₂ becomes λ Σ_j s_j ‖W_j‖₂
and in general P(W) becomes P(diag(s) W) (group_elasticnet: λ Σ_j (ρ s_j ‖W_j‖₂ + (1 − ρ)/2
s_j² ‖W_j‖²)), the loss unchanged. Substituting V = diag(s) W, this is the same algorithm on
the columns x_j / s_j (the blocks' L_j, the prox, (7), (9) and (10) are those of the scaled
problem, so the fit is the same in any units); the state holds V, and the model is written
back in stored units, W = diag(s)⁻¹ V (`to_model`: linear on X as stored). The logged F is F(V)
on the scaled columns, i.e. the weighted objective.
s comes from the pass that already reads the columns (memory mode: the data read whole;
chunks mode and FISTA: the column statistics pass, Σx_j and Σx_j² summed with the non-zeros)
and is state (`column_scale`), so a resumed run and any worker count use the same s.
standardize="auto" (the default) applies it where the active columns' s span more than
SCALE_SPREAD = 10 (base.scale_spread: columns in different units, raw pixels' near-empty
border; as stagewise), True wherever the data qualifies, False never; sparse or wide data (text)
keep the penalty on the stored columns, bit for bit.

Centred columns (memory mode session 27, chunks mode and FISTA session 28). On a dense column
whose mean μ_j is far above its spread (a year, a price: μ_j/s_j = 300), every block step moves
all scores by μ_j W_j, which only the intercept can take back, and Algorithm 1 crawls (qa28:
0.464 → 0.189 test accuracy at 300×, unconverged; uncentred, the chunks mode fell to 0.208 and
FISTA to 0.189 there, docs/benchmarks.md, session 28). With fit_intercept (b unpenalised) the
problem on the columns x_j − μ_j is the same problem: (x − μ)ᵀW + b' = xᵀW + (b' − μᵀW) for
every W, P(W) does not involve b, so F takes the same values on the same scores and the
minimisers correspond one to one; only the conditioning changes (any subset of the columns may
be centred). So where the data is dense
and low-dimensional (the gate of standardize) every mode solves F on z_j = (x_j − μ_j)/s_j
(s_j as above, 1 where not standardized) for the columns whose mean μ_j = Σ_i x_ij / n exceeds
their standard deviation, |μ_j| > s_j (`_column_shift`: such a column is non-zero in over half
the rows, so the centred copy of X holds at most twice its non-zeros; centring every column of
raw pixels made MNIST's outer iterations 3.2× slower for about the same F), and writes the model in
stored units: W = diag(s)⁻¹ V and intercept b' − Σ_j μ_j W_j (`to_model`; the model's info says
centred=True). μ comes from the pass that reads the columns (as s: the data read whole, or the
column statistics pass) and is state (`column_shift`), so a resumed run and any worker count
centre by the same μ. The memory mode centres its CSC copy once; the chunk tasks (chunks mode,
FISTA) centre each chunk as they read it, in every pass (`_centred`, bcd_kernels.centred_rows:
one numba pass merging each row's entries with the centred columns, so a task holds one chunk's
centred copy, at most nnz + rows × centred columns entries, and nothing more), and the chunks
mode's curvatures, ω_i and steps are those of the centred rows; FISTA's K takes
Σ_i (x_ij − μ_j)² = Σ_i x_ij² − 2μ_j Σ_i x_ij + nμ_j² from the same pass. Data with no such column,
sparse or wide data (text) and fits without an intercept keep the stored columns, bit for bit,
and without an intercept base.offset_notice warns on columns far from zero.

State (checkpointed by the driver, streamfit.solvers.driver): `MemoryState`, `ChunksState` or
`FistaState`, chosen by the mode. Random block orders come from numpy's generator seeded with
(random_state, outer iteration), so a resumed run reaches the uninterrupted run's model bitwise.

Logged per step: objective F(W), train_accuracy (multiclass; train_p_at_1 for multilabel),
nnz_rows and nnz_rows_pct (non-zero rows of W), violation_ratio (eq. 10), ls_steps, active_blocks
(shrinking), duality_gap (memory) / tail_estimate (when computed), lipschitz (FISTA); in chunks
mode also outer_iteration and data_passes, and a step inside an outer iteration logs only
these counters.
"""

from __future__ import annotations

import dataclasses
import logging
import math
from typing import Any, Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from streamfit.errors import ConfigError
from streamfit.model import LinearModel, Model
from streamfit.objectives import ChunkSums, objective_for
from streamfit.objectives.losses import LOGISTIC, LOSSES, MULTITASK_SQUARED_HINGE, curvature, label_lists, rows_loss
from streamfit.objectives.penalties import PENALTIES, prox, value
from streamfit.solvers.base import (
    Context,
    PerSample,
    Solver,
    SolverParams,
    SolverState,
    constant_columns,
    dense_low_dimensional,
    offset_notice,
    register_solver,
    standardized_scale,
)
from streamfit.solvers.bcd_kernels import bcd_epoch, centred_rows, chunk_pass, group_update
from streamfit.store import ChunkSource

log = logging.getLogger(__name__)

SCORES = "scores"  # ChunkState name of the per-sample scores S = XW
EPS = 1e-12  # ε of L_j = max(‖h_j‖∞, ε)
INTERCEPT_SPACING = 4  # memory mode, ls: the intercept's block after every 4·n non-zeros of feature blocks
TAIL_WINDOW = 5  # stopping="auto": outer iterations per window of the tail estimate
THETA = 1e-6  # chunks mode, BCD(LS): the scale θ of L_j stays in [THETA, 1/THETA]
CENTRE_RATIO = 1.0  # a dense column is centred where its mean is over this many standard deviations (R ≥ 1: at most 2× the non-zeros)
# ρ: group weight ρλ = 0.25/n beside the ridge's 1/n at lam None (docs/benchmarks.md, session 14)
DEFAULT_L1_RATIO = 0.2


class BCDParams(SolverParams):
    """Options of the bcd solver (see the module docstring for the math)."""

    loss: Literal["auto", "squared_hinge", "multitask_squared_hinge", "logistic"] = Field(
        "auto",
        description="eq. 2 (label ranking §4.7 on multilabel stores), eq. 11, or eq. 12; auto: eq. 2 on "
        "multiclass stores, eq. 11 on multilabel ones",
    )
    penalty: Literal["group_elasticnet", "l1/l2", "l1", "l2", "elasticnet", "sparse_group"] = Field(
        "group_elasticnet",
        description="P(W); group_elasticnet is λ(ρ Σ_j ‖W_j‖ + (1 − ρ)/2 ‖W‖²), l2 is (λ/2)‖W‖², "
        "elasticnet/sparse_group mix ℓ1 with ℓ2²/ℓ1/ℓ2 by l1_ratio",
    )
    l1_ratio: float = Field(
        DEFAULT_L1_RATIO, ge=0, le=1, description="ρ of group_elasticnet, elasticnet and sparse_group"
    )
    method: Literal["bcd", "fista"] = Field("bcd", description="block coordinate descent or FISTA")
    variant: Literal["ls", "cst"] = Field(
        "ls", description="ls: blocks in block_order + line search; cst: random blocks, constant step"
    )
    block_order: Literal["permuted", "cyclic"] = Field(
        "permuted",
        description="memory mode, ls: the blocks of each outer iteration in a fresh seeded permutation, or "
        "cyclic in feature order (the paper's); either way the intercept is visited every 4n non-zeros",
    )
    mode: Literal["auto", "memory", "chunks"] = Field(
        "auto", description="bcd: sequential in memory, or out of core over chunks"
    )
    memory_budget_mb: float = Field(2048, gt=0, description="auto mode: largest in-memory X + S")
    group_size: int = Field(
        1024, ge=1, description="chunks mode: features updated at once per pass (with the intercept)"
    )
    shrinking: bool = Field(
        False, description="skip zero blocks likely to stay zero (§5.2.4, l1/l2 and group_elasticnet)"
    )
    curvature: Literal["auto", "diagonal", "max"] = Field(
        "auto",
        description="memory mode, ls: the block step's H; max = max_r h_jr·I (the paper's), diagonal = "
        "diag(h_j1, …, h_jm), the block's generalized Hessian where the loss is separable over classes; auto: "
        "diagonal for eq. 11 (one-vs-rest), max for eq. 2 and eq. 12",
    )
    sigma: float = Field(0.01, gt=0, lt=1, description="σ of the sufficient decrease condition (7)")
    omega: float = Field(0.5, gt=0, lt=1, description="ω, backtracking factor of the line search")
    max_ls: int = Field(30, ge=1, description="line search trials per block")
    lam: float | None = Field(  # type: ignore[assignment]  # None: from n (`lam_for`)
        None,
        gt=0,
        description="λ of (1/n)·loss + λ·penalty; null: the ridge weight λ(1 − ρ) is 1/n, LinearSVC(C=1)'s "
        "(group_elasticnet, elasticnet: λ = 1/((1 − ρ)n)), else λ = 1/n",
    )
    tol: float = Field(1e-3, gt=0, description="τ of the stopping criterion (10) (and of the duality gap)")
    stopping: Literal["auto", "gap", "violation"] = Field(
        "auto",
        description="violation: eq. (10) < tol; auto: also the estimated remaining decrease of F < "
        "tol·F (memory and chunks mode); gap: also the certified relative duality gap < tol (l1/l2, l1; "
        "memory mode)",
    )
    max_iter: int = Field(200, ge=1, description="K, the cap on outer iterations")
    fit_intercept: bool = Field(True, description="an unpenalised intercept b (scores Wᵀx + b)")
    standardize: bool | Literal["auto"] = Field(
        "auto",
        description="dense data of at most 1000 columns (>= 10 % non-zero): the penalty on the weights of the "
        "standardized columns, P(diag(s) W) with s_j the column's standard deviation (the fit the same in any "
        "units; the model stays linear on X as stored); auto: where max s_j / min s_j > 10; sparse text: never",
    )

    def lam_for(self, n_rows: int) -> float:
        """λ of a fit on n_rows rows: `lam`, or for lam None the weight that makes the ridge part
        of P LinearSVC(C=1)'s: its ½‖w‖² + C Σ_i ℓ_i is, divided by C·n, (1/(2n))‖w‖² + (1/n) Σ_i ℓ_i,
        so λ(1 − ρ) = 1/n for group_elasticnet and elasticnet (λ = 1/((1 − ρ)n)) and λ = 1/n
        for l2; the penalties with no ridge part (l1/l2, l1, sparse_group) take λ = 1/n too."""
        if self.lam is not None:
            return self.lam
        if self.penalty in ("group_elasticnet", "elasticnet") and self.l1_ratio < 1:
            return 1.0 / ((1.0 - self.l1_ratio) * n_rows)
        return 1.0 / n_rows

    def loss_for(self, multilabel: bool) -> str:
        """The loss run on a multiclass or multilabel store: `loss`, "auto" resolved. On
        multilabel stores auto is eq. (11), one-vs-rest, whose scores have 0 as the decision
        boundary; the label ranking of §4.7 only orders the labels of a row (its loss, and so its
        model, is unchanged by adding a constant to a row's scores), so no threshold of its
        scores separates the labels that are on."""
        if self.loss != "auto":
            return self.loss
        return "multitask_squared_hinge" if multilabel else "squared_hinge"

    @model_validator(mode="after")
    def _check(self):
        if self.shrinking and self.penalty not in ("l1/l2", "group_elasticnet"):
            raise ValueError("shrinking (§5.2.4) is defined for the l1/l2 and group_elasticnet penalties only")
        if self.stopping == "gap" and self.fit_intercept:
            raise ValueError("stopping='gap' certifies the objective without intercept; set fit_intercept=false")
        return self


# -- helpers -----------------------------------------------------------------------------------


def _tail_estimate(f_hist: list[float]) -> float:
    """Estimated remaining relative decrease of F (stopping="auto"): with the decreases
    d1 = F_{k−w} − F_k and d2 = F_{k−2w} − F_{k−w} over the last two windows of w = TAIL_WINDOW
    outer iterations and q = d1/d2, a geometric tail d1·q/(1 − q), relative to F_k; ∞ before
    2w + 1 iterations or when the decrease does not shrink (q ≥ 1); 0 when F did not move."""
    w = TAIL_WINDOW
    if len(f_hist) < 2 * w + 1:
        return math.inf
    d1, d2 = f_hist[-1 - w] - f_hist[-1], f_hist[-1 - 2 * w] - f_hist[-1 - w]
    if d1 <= 0:
        return 0.0
    if d2 <= d1:
        return math.inf
    q = d1 / d2
    return float(d1 * q / (1 - q) / abs(f_hist[-1])) if f_hist[-1] != 0 else 0.0


def _why_not_converged(tol: float, ratio: float, gap: float | None = None, tail: float | None = None) -> str:
    """Which stopping test failed at the last outer iteration, for the driver's warning."""
    if not ratio < tol:
        return f"violation ratio {ratio:.3g} > tol {tol:g}"
    if gap is not None and not gap < tol:
        return f"relative duality gap {gap:.3g} > tol {tol:g} (violation ratio {ratio:.3g})"
    if tail is not None and not tail < tol:
        if math.isfinite(tail):
            which = f"estimated remaining relative decrease of the objective {tail:.3g} > tol {tol:g}"
        else:
            which = (
                f"remaining decrease of the objective not estimable yet (it needs {2 * TAIL_WINDOW + 1} "
                "iterations with a shrinking decrease)"
            )
        return f"{which} (violation ratio {ratio:.3g})"
    return f"violation ratio {ratio:.3g} < tol {tol:g} on the active blocks only (shrinking), not yet on all"


def _design(X: sp.spmatrix, fit_intercept: bool) -> sp.csr_matrix:
    """The columns the blocks act on: X, and with an intercept a last column of ones."""
    X = sp.csr_matrix(X, dtype=np.float64)
    if not fit_intercept:
        return X
    return sp.hstack([X, np.ones((X.shape[0], 1))], format="csr")


def _scaled(X: sp.spmatrix, scale: np.ndarray | None) -> sp.spmatrix:
    """X with column j divided by scale[j] (the standardized columns, float64; `scale` covers
    X's columns), or X itself for scale None."""
    if scale is None:
        return X
    X = sp.csr_matrix(X)
    return sp.csr_matrix((X.data / scale[X.indices], X.indices, X.indptr), shape=X.shape)


def _centred(X: sp.spmatrix, shift: np.ndarray, scale: np.ndarray | None) -> sp.csr_matrix:
    """The chunks mode's and FISTA's copy of one chunk's X with the centred columns,
    (x_ij − μ_j)/s_j (bcd_kernels.centred_rows; `shift` the state's μ, `scale` its s or None,
    both covering X's columns), float64, rows sorted."""
    X = sp.csr_matrix(X)
    if not X.has_canonical_format:  # centred_rows merges each row's sorted, unique columns with μ's
        X = sp.csr_matrix(X, dtype=np.float64, copy=True)
        X.sum_duplicates()
    d = X.shape[1]
    indptr, indices, data = centred_rows(
        _read_only(X.indptr),
        _read_only(X.indices),
        _read_only(X.data),
        shift[:d],
        np.empty(0) if scale is None else scale[:d],
    )
    Z = sp.csr_matrix((data, indices, indptr), shape=X.shape)
    Z.has_canonical_format = True
    return Z


def _n_correct(S: np.ndarray, labels) -> int:
    """Top-1 hits: argmax = label (multiclass) or argmax ∈ label set (multilabel, P@1)."""
    top = np.argmax(S, axis=1)
    if sp.issparse(labels):
        return int(np.asarray(sp.csr_matrix(labels)[np.arange(S.shape[0]), top]).ravel().astype(bool).sum())
    return int((top == labels).sum())


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a` (no copy). numba compiles a kernel once per signature, and
    read-only is part of an array's type: a cached chunk's arrays are read-only, those of a
    chunk read past the cache writable, so passing both compiled chunk_pass twice; the view
    gives it one signature."""
    view = a.view()
    view.flags.writeable = False
    return view


def _chunk_scores(state, version: int, chunk_id: int, n_rows: int, m: int, private: bool = False) -> np.ndarray:
    """A chunk's scores S of `version`; `private`: an S the caller may change in place (the stored
    version stays as it was: ChunkState.read_private)."""
    if version == 0:
        return np.zeros((n_rows, m))
    if private:  # a pass that writes the next version: the last read of this one
        return state.read_private(SCORES, version, chunk_id, last=True)
    return state.read(SCORES, version, chunk_id)


class ColumnStats(NamedTuple):
    """Per-column sums over the rows of a chunk (length n_features each)."""

    nnz: np.ndarray  # non-zeros of column j
    sq: np.ndarray  # Σ_i x_ij²
    sums: np.ndarray  # Σ_i x_ij (with sq, the columns' standard deviations: `BCDSolver._column_scale`)


def _colstats_task(source: ChunkSource, chunk_id: int, *, fit_intercept: bool) -> ColumnStats:
    X = _design(source.read_chunk(chunk_id).X, fit_intercept)
    width = X.shape[1]
    nnz = np.bincount(X.indices, minlength=width).astype(np.int64)
    sq = np.bincount(X.indices, weights=X.data**2, minlength=width)
    sums = np.bincount(X.indices, weights=X.data, minlength=width)
    return ColumnStats(nnz, sq, sums)


def _positions(cols: np.ndarray | None, d: int) -> np.ndarray:
    """pos[j] = index of feature j in `cols`, −1 elsewhere (an empty group for cols=None)."""
    pos = np.full(d, -1, dtype=np.int64)
    if cols is not None:
        pos[cols] = np.arange(len(cols))
    return pos


class PassSums(NamedTuple):
    """A chunks-mode pass summed over chunks (K candidate steps, |B'| columns of the next group)."""

    loss: float  # Σ_i ℓ_i(S_i) after the committed step (0 unless `full`)
    hits: int  # top-1 hits there (0 unless `full`)
    dloss: np.ndarray  # K: Σ_i ℓ_i(S_i + α_k u_i) − ℓ_i(S_i), u = X_{:B} δ_B
    dhits: np.ndarray  # K: the change in top-1 hits
    grad: np.ndarray | None  # K × |B'| × m: Σ_i x_ij ∂ℓ_i at candidate k (None: no next group)
    curv: np.ndarray | None  # K × |B'| × m (or × 1 for cst): Σ_i ω_i x_ij² h_i (None: no next group)


def _pass_task(
    source: ChunkSource,
    chunk_id: int,
    *,
    state,
    version: int,
    commit: tuple[np.ndarray, np.ndarray] | None,
    direction: tuple[np.ndarray, np.ndarray] | None,
    alphas: np.ndarray,
    cols: np.ndarray | None,
    loss: int,
    curv_c: float,
    full: bool,
    fit_intercept: bool,
    scale: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> PassSums:
    """Chunks mode, one pass over one chunk (bcd_kernels.chunk_pass): apply the committed step
    (C, Δ_C) to the chunk's scores of `version` and write them as version + 1; return the log
    terms (full), the loss and hit changes of the candidate steps α_k δ_B of `direction` and, at
    each candidate, the partial gradients and curvatures of the group `cols` (None: no group).
    `scale`: the columns' s (standardize; the intercept's 1 last), X's columns divided by it;
    `shift`: the columns' μ (centring; the intercept's 0 last), X's columns less it (`_centred`)."""
    chunk = source.read_chunk(chunk_id)
    m = source.n_classes
    if shift is not None:
        X = _centred(chunk.X, shift, scale)
    else:
        X = chunk.X if scale is None else _scaled(chunk.X, scale[: chunk.X.shape[1]])
    d = X.shape[1] + int(fit_intercept)
    # chunk_pass reads the store's float32 arrays (columns neither centred nor scaled), no float64
    # copy of them; it adds the intercept itself where that gives [X, 1]'s order (rows with
    # sorted, unique columns, as ingest writes them and `_centred` builds them); other rows go
    # through `_design`, whose [X, 1] is sorted
    intercept = d - 1 if fit_intercept else -1
    if fit_intercept and not X.has_canonical_format:
        X, intercept = _design(X, fit_intercept), -1
    S = _chunk_scores(state, version, chunk_id, X.shape[0], m, private=commit is not None)
    lab_ptr, lab_ind = label_lists(chunk.labels, X.shape[0])
    none = np.zeros((0, m))
    total, hits, dloss, dhits, G, C = chunk_pass(
        _read_only(X.indptr),
        _read_only(X.indices),
        _read_only(X.data),
        S,
        lab_ptr,
        lab_ind,
        loss,
        _positions(commit and commit[0], d),
        commit[1] if commit else none,
        _positions(direction and direction[0], d),
        direction[1] if direction else none,
        alphas,
        _positions(cols, d),
        0 if cols is None else len(cols),
        curv_c,
        full,
        intercept,
    )
    if commit is not None:
        state.write(SCORES, version + 1, chunk_id, S)
    return PassSums(total, hits, dloss, dhits, None if cols is None else G, None if cols is None else C)


class FistaSums(NamedTuple):
    """A FISTA pass summed over chunks."""

    loss_w: float  # Σ_i ℓ_i(Wᵀx_i)
    hits_w: int  # top-1 hits at W
    loss_y: float  # Σ_i ℓ_i(Yᵀx_i)
    grad_y: np.ndarray  # d × m: Σ_i x_i ∂ℓ_i(Yᵀx_i)ᵀ


def _fista_task(
    source: ChunkSource,
    chunk_id: int,
    *,
    W: np.ndarray,
    Y: np.ndarray,
    loss: int,
    fit_intercept: bool,
    scale: np.ndarray | None = None,
    shift: np.ndarray | None = None,
) -> FistaSums:
    chunk = source.read_chunk(chunk_id)
    if shift is not None:
        X = _design(_centred(chunk.X, shift, scale), fit_intercept)
    else:
        X = _scaled(_design(chunk.X, fit_intercept), scale)
    lab_ptr, lab_ind = label_lists(chunk.labels, X.shape[0])
    rows = np.arange(X.shape[0], dtype=np.int64)
    SW = np.ascontiguousarray(X @ W)
    SY = np.ascontiguousarray(X @ Y)
    loss_w = rows_loss(loss, SW, lab_ptr, lab_ind, rows, 0)[0]
    loss_y, D, _ = rows_loss(loss, SY, lab_ptr, lab_ind, rows, 1)
    return FistaSums(loss_w, _n_correct(SW, chunk.labels), loss_y, np.asarray(X.T @ D))


# -- the states --------------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class MemoryState(SolverState):
    """Algorithm 1 after `step` outer iterations."""

    W: np.ndarray  # d × m
    S: np.ndarray  # n × m, the scores XW (§4.3)
    active: np.ndarray  # d, bool: blocks not shrunk away (§5.2.4)
    first: tuple[float, float] | None = None  # (Σ v^t, max v^t) of outer iteration 1: the reference of (10)
    max_viol: float = math.inf  # M, the largest violation of the last outer iteration (shrinking)
    ls_steps: int = 0  # backtracking steps beyond the first trial, all blocks so far
    f_hist: list[float] = dataclasses.field(default_factory=list)  # F of the last 2·TAIL_WINDOW + 1 iterations
    ratio: float = math.inf  # eq. (10) at the last outer iteration
    gap: float | None = None  # relative duality gap, when the last iteration computed it
    tail: float | None = None  # tail estimate, when the last iteration computed it
    converged: bool = False
    column_scale: np.ndarray | None = None  # d: the columns' s of standardize (the intercept's 1), None: as stored
    column_shift: np.ndarray | None = None  # d: the columns' means μ, subtracted (the intercept's 0), None: not centred


@dataclasses.dataclass(kw_only=True)
class ChunksState(SolverState):
    """The chunks mode after `step` groups: W holds every accepted step, the scores every one but
    the last (the commit, applied by the next pass); the direction of the last group waits for
    its line search."""

    W: np.ndarray  # d × m
    blocks: np.ndarray  # features with a non-zero in the data
    active: np.ndarray  # d, bool: blocks not shrunk away
    order: np.ndarray  # the active blocks of the current outer iteration, in visiting order
    scores: PerSample  # S = XW without the commit
    commit_cols: np.ndarray | None = None  # C: features of the accepted step not yet in S
    commit_delta: np.ndarray | None = None  # |C| × m: that step, Δ_C
    dir_cols: np.ndarray | None = None  # B: features of the direction waiting for its line search
    dir_delta: np.ndarray | None = None  # |B| × m: δ_B
    bound: float = 0.0  # ⟨G_B, δ_B⟩ + λP(W_B + δ_B) − λP(W_B), the right side of (7) over the group
    theta: float = 1.0  # θ, the scale of L_j (ls)
    outer: int = 0  # outer iterations whose groups all have a direction
    group: int = 0  # the next group's index in `order`
    sums: list[float] = dataclasses.field(default_factory=lambda: [0.0, 0.0])  # (Σ, max) violations, this iteration
    first: list[float] | None = None  # (Σ, max) violations of outer iteration 1
    max_viol: float = math.inf  # M of the last closed outer iteration (shrinking)
    ls_steps: int = 0
    data_passes: int = 0
    ratio: float = math.inf  # eq. (10) at the last closed outer iteration
    f_hist: list[float] = dataclasses.field(default_factory=list)  # F after the last 2·TAIL_WINDOW + 1 closed ones
    tail: float | None = None  # tail estimate, when the last closing step computed it
    converged: bool = False
    done: bool = False  # the last outer iteration is closed and its test held or max_iter is reached
    closed_at: int = 0  # the step that closed the last closed outer iteration (checkpoints go there)
    closed_outer: int = 0  # that outer iteration's number
    column_scale: np.ndarray | None = None  # d: the columns' s of standardize (the intercept's 1), None: as stored
    column_shift: np.ndarray | None = None  # d: the columns' means μ, subtracted (the intercept's 0), None: not centred


@dataclasses.dataclass(kw_only=True)
class FistaState(SolverState):
    """FISTA after `step` iterations."""

    W: np.ndarray  # d × m, W_k
    Y: np.ndarray  # d × m, Y_{k+1}
    grad_y: np.ndarray  # d × m, Σ_i x_i ∂ℓ_i(Yᵀx_i)ᵀ (n ∇L(Y))
    loss_y: float  # Σ_i ℓ_i(Yᵀx_i)
    t: float = 1.0  # t_{k+1}
    L: float  # the Lipschitz estimate: the gradient step is 1/L
    first: float | None = None  # the gradient mapping of iteration 1
    ratio: float = math.inf  # the gradient mapping over its first value, last iteration
    converged: bool = False
    column_scale: np.ndarray | None = None  # d: the columns' s of standardize (the intercept's 1), None: as stored
    column_shift: np.ndarray | None = None  # d: the columns' means μ, subtracted (the intercept's 0), None: not centred


BCDState = MemoryState | ChunksState | FistaState


class _MemoryData(NamedTuple):
    """What the memory mode keeps of the data between steps (rebuilt from the source on resume)."""

    indptr: np.ndarray  # X in CSC, float64, int64 indices
    indices: np.ndarray
    data: np.ndarray
    Xc: sp.csc_matrix
    labels: Any  # the labels as the source holds them
    lab_ptr: np.ndarray
    lab_ind: np.ndarray
    blocks: np.ndarray  # features with a non-zero
    K: np.ndarray  # (c/n) Σ_i x_ij², BCD(CST)'s constant L_j


# -- the solver --------------------------------------------------------------------------------


@register_solver
class BCDSolver(Solver[BCDState]):
    """Algorithms 1–3 of Blondel et al. (2013), in memory or out of core, and FISTA (module
    docstring). One step: an outer iteration (memory, FISTA) or a group (chunks)."""

    name = "bcd"
    dense_weights = True
    row_state_arrays = 2  # chunks mode: a chunk's scores S and their write's bytes (memory mode: `row_state`)
    Params = BCDParams
    params: BCDParams

    def __init__(self, params: BCDParams):
        super().__init__(params)
        self.mode = ""  # "memory", "chunks" or "fista", fixed by fit for its source
        self._multilabel = False  # the source's kind, fixed by fit (the loss auto resolves with it)
        self._data: _MemoryData | None = None
        self._data_source: ChunkSource | None = None
        self._data_scale: np.ndarray | None = None
        self._data_shift: np.ndarray | None = None
        self.lam = 0.0  # λ of this fit (`BCDParams.lam_for`), fixed by fit for its source
        self.column_scale: np.ndarray | None = None  # the features' s of the last model (standardize), None: as stored

    def fit(self, source: ChunkSource, **options) -> Model:
        """Solver.fit, after choosing the mode (and so the State) for `source` and checking the
        options against it."""
        p = self.params
        self.check_source(source)
        self._multilabel = source.multilabel
        self.lam = p.lam_for(source.n_rows)
        if source.multilabel and p.loss_for(True) == "squared_hinge":
            log.warning(
                "bcd: loss squared_hinge on a multilabel store is the label ranking of §4.7: its scores order "
                "each row's labels but no threshold of them picks label sets; use P@k, train with "
                "--threshold fit --valid STORE, or loss=auto (one-vs-rest, eq. 11) for label sets"
            )
        # the State per instance (the driver reads solver.State); Solver declares it a ClassVar
        if p.method == "fista":
            self.mode, self.State = "fista", FistaState  # type: ignore[misc]
        else:
            self.mode = self._mode(source)
            self.State = MemoryState if self.mode == "memory" else ChunksState  # type: ignore[misc]
            if p.stopping == "gap" and self.mode != "memory":
                raise ConfigError(
                    "stopping='gap' is implemented in memory mode; chunks mode stops by 'auto' or 'violation'"
                )
            if p.stopping == "gap" and p.penalty not in ("l1/l2", "l1"):
                raise ConfigError("stopping='gap' needs penalty 'l1/l2' or 'l1'")
        return super().fit(source, **options)

    def init(self, ctx: Context) -> BCDState:
        if self.mode == "memory":
            return self._init_memory(ctx)
        if self.mode == "chunks":
            return self._init_chunks(ctx)
        return self._init_fista(ctx)

    def step(self, ctx: Context, state: BCDState) -> dict[str, Any]:
        if isinstance(state, MemoryState):
            return self._step_memory(ctx, state)
        if isinstance(state, ChunksState):
            return self._step_chunks(ctx, state)
        return self._step_fista(ctx, state)

    def checkpoint_due(self, state: BCDState, every: int, saved_at: int) -> bool:
        """Chunks mode: at the end of every `every`-th outer iteration (a step is one group, and
        W, d × m, is too large to save after each); the other modes: every `every` steps."""
        if isinstance(state, ChunksState):
            return state.closed_at == state.step and state.closed_outer % every == 0
        return super().checkpoint_due(state, every, saved_at)

    def check_resume(self, ctx: Context, state: BCDState) -> None:
        """A chunks-mode order holds feature blocks only (the intercept joins every group,
        `_group`); an order that holds the intercept's row is from a streamfit before that."""
        free = self._free_row(ctx.source)
        if isinstance(state, ChunksState) and free >= 0 and bool((state.order == free).any()):
            raise ConfigError(
                "the checkpoint is of bcd's chunks mode from an older streamfit, which visited the "
                "intercept as one block of the order; start the run again without --resume"
            )

    def check_source(self, source: ChunkSource) -> None:
        self._codes(source)  # refuses the logistic loss on a multilabel store, and a single class

    def max_steps(self, state: BCDState) -> int:
        """max_iter outer iterations; in chunks mode, of G = ⌈|order| / group_size⌉ groups each: the
        steps taken, the groups left of this outer iteration and G per outer iteration after it,
        and the step that closes the last one."""
        if not isinstance(state, ChunksState):
            return self.params.max_iter
        if state.done:
            return state.step
        groups = max(1, -(-len(state.order) // self.params.group_size))  # an empty order: one group, b's
        return state.step + (self.params.max_iter - state.outer) * groups - state.group + 1

    def finished(self, state: BCDState) -> bool:
        if isinstance(state, ChunksState):
            return state.done
        return state.converged or state.step >= self.params.max_iter

    def converged(self, state: BCDState) -> bool:
        return state.converged

    def not_converged_reason(self, state: BCDState) -> str:
        if isinstance(state, MemoryState):
            return _why_not_converged(self.params.tol, state.ratio, state.gap, state.tail)
        if isinstance(state, ChunksState):
            return f"{_why_not_converged(self.params.tol, state.ratio, tail=state.tail)} at max_iter={state.outer} outer iterations"
        return _why_not_converged(self.params.tol, state.ratio)

    def to_model(self, ctx: Context, state: BCDState) -> LinearModel:
        info: dict[str, Any] = {
            "outer_iterations": state.outer if isinstance(state, ChunksState) else state.step,
            "mode": self.mode,
            "converged": bool(state.converged),
            "lam": self.lam,
            "standardized": state.column_scale is not None,
        }
        if isinstance(state, ChunksState):
            info["data_passes"] = state.data_passes
        W, b = self._split(state.W)
        self.column_scale = None
        if state.column_scale is not None:  # the standardized columns' weights V = diag(s) W, back in stored units
            self.column_scale = state.column_scale[: ctx.source.n_features].copy()
            W = W / self.column_scale[:, None]
        shift = state.column_shift
        if shift is not None:
            info["centred"] = True  # (absent where the columns are as stored: those models' info as before)
        if shift is not None and b is not None:  # centred columns: (x − μ)ᵀW + b = xᵀW + (b − μᵀW)
            b = b - shift[: ctx.source.n_features] @ W
        nz_rows = np.any(W != 0, axis=1)
        coef = sp.csr_matrix(W.T) if nz_rows.mean() < 0.5 else W.T.copy()
        return LinearModel(
            coef,
            b,
            classes=ctx.source.classes,
            n_features=ctx.source.n_features,
            multilabel=ctx.source.multilabel,
            solver=self.name,
            params=self.params.model_dump(),
            info={**info, "nnz_rows": int(nz_rows.sum())},
        )

    # ---- shared ----
    def _codes(self, source: ChunkSource) -> tuple[int, int, float, float]:
        """(loss code, penalty code, the loss's curvature constant c, ρ)."""
        p = self.params
        loss = LOSSES[p.loss_for(source.multilabel)]
        if loss == LOGISTIC and source.multilabel:
            raise ConfigError("loss 'logistic' (eq. 12) is multiclass only; use squared_hinge on multilabel stores")
        if source.n_classes < 2:
            raise ConfigError("the bcd solver needs at least two classes")
        return loss, PENALTIES[p.penalty], curvature(loss, source.n_classes), p.l1_ratio

    def row_state(self, source) -> tuple[int, int]:
        """The memory mode holds the scores S of every row, and with fit_intercept bcd_epoch's
        saved scores of the intercept's block, every row too; the chunks mode a chunk's
        (`row_state_arrays`)."""
        if self.params.method == "bcd" and self._mode(source) == "memory":
            return source.n_rows, 1 + int(self.params.fit_intercept)
        return super().row_state(source)

    def uses_workers(self, source: ChunkSource) -> bool:
        """The memory mode computes in the driver (Algorithm 1 on X read whole); the chunks mode
        and FISTA pass over the chunks on the engine."""
        return self.params.method == "fista" or self._mode(source) == "chunks"

    def _mode(self, source: ChunkSource) -> str:
        """ "memory" or "chunks": mode "auto" picks memory when X (CSC, float64) and S fit in
        memory_budget_mb."""
        p = self.params
        if p.mode != "auto":
            return p.mode
        nnz = getattr(getattr(source, "manifest", None), "nnz", None)
        if nnz is None:
            nnz = source.X.nnz if hasattr(source, "X") else source.n_rows * source.n_features
        need = (12 * nnz + 8 * (source.n_features + 1) + 8 * source.n_rows * source.n_classes) / 2**20
        return "memory" if need <= p.memory_budget_mb else "chunks"

    def _column_scale(
        self, source: ChunkSource, nnz: np.ndarray, sums: np.ndarray, squares: np.ndarray, centred: bool = False
    ) -> np.ndarray | None:
        """The columns' s of standardize (module docstring, "Standardized columns"), one per column
        of the design (the intercept's 1 last), from the columns' non-zeros, sums and sums of
        squares over the training rows; None where the penalty stays on the stored columns:
        standardize False, data that is not low-dimensional and dense (more than
        LOW_DIM_MAX_COLUMNS active columns or fewer than LOW_DIM_MIN_DENSITY of them non-zero per
        row: sparse text), or, for "auto", active columns whose s span at most SCALE_SPREAD.
        `centred`: the columns are centred (`_column_shift`), so base.offset_notice, the warning
        for columns far from zero, is not given."""
        p = self.params
        d = source.n_features
        active = np.flatnonzero(nnz[:d])
        if not dense_low_dimensional(source.n_rows, len(active), int(nnz[active].sum())):
            return None
        notice = None if centred else offset_notice("bcd", source.n_rows, active, sums[active], squares[active])
        if notice:
            log.warning(notice)
        s = standardized_scale(p.standardize, source.n_rows, sums[active], squares[active])
        if s is None:
            return None
        scale = np.ones(len(nnz))
        scale[active] = s
        return scale

    def _column_shift(
        self, source: ChunkSource, nnz: np.ndarray, sums: np.ndarray, squares: np.ndarray
    ) -> np.ndarray | None:
        """The centring of every mode (module docstring, "Centred columns"): μ_j = Σ_i x_ij / n for
        the design's columns whose mean is more than CENTRE_RATIO times their standard deviation,
        |μ_j| > R·s_j (not constant: `base.constant_columns`), 0 for the others and the
        intercept's; None where no column is centred: none qualifies, no intercept (centring is
        then not an exact reformulation) or data that is not dense and low-dimensional
        (`base.dense_low_dimensional`: sparse text). A column with |μ_j| > R·s_j, R ≥ 1, is non-zero
        in over half the rows (μ_j² ≤ p_j·mean x_j² for a share p_j of non-zeros), so the centred
        copy holds at most twice the non-zeros of X."""
        d = source.n_features
        active = np.flatnonzero(nnz[:d])
        if not self.params.fit_intercept or not dense_low_dimensional(
            source.n_rows, len(active), int(nnz[active].sum())
        ):
            return None
        n = source.n_rows
        mean = sums[:d] / n
        with np.errstate(over="ignore", invalid="ignore"):
            r2 = CENTRE_RATIO * CENTRE_RATIO  # |μ_j| > R·s_j  ⟺  (1 + R²)·μ_j² > R²·Σ_i x_ij² / n
            far = ((1.0 + r2) * mean * mean > r2 * squares[:d] / n) & ~constant_columns(n, sums[:d], squares[:d])
        if not far.any():
            return None
        shift = np.zeros(len(nnz))
        shift[:d][far] = mean[far]
        return shift

    def _diagonal_curvature(self, source: ChunkSource) -> bool:
        """Whether the memory mode's BCD(LS) steps take H = diag(h_j) (`curvature`): "auto" where
        the loss is eq. (11), one-vs-rest, whose block Hessian is diagonal (the classes' margins are
        separate), so H = diag(h_j) is its generalized Hessian and max_r h_jr·I shortens the step of
        every class but the most curved one (bibtex: 159 labels); eq. (2) and (12) couple a row's
        classes (a term's Hessian is 2x²(e_y − e_r)(e_y − e_r)ᵀ, up to twice its diagonal), so
        "auto" keeps the paper's max_r h_jr there (MNIST: diag(h_j) backtracked 4× as often)."""
        p = self.params
        if p.curvature == "auto":
            return LOSSES[p.loss_for(source.multilabel)] == MULTITASK_SQUARED_HINGE
        return p.curvature == "diagonal"

    def _group_lam(self) -> float:
        """The weight of Σ_j ‖W_j‖₂ in P: λ (l1/l2), λρ (group_elasticnet); a zero row stays zero
        while ‖G_j‖ is below it (the shrinking rule's threshold)."""
        return self.lam * self.params.l1_ratio if self.params.penalty == "group_elasticnet" else self.lam

    def _width(self, source: ChunkSource) -> int:
        """Rows of the solver's W: one per feature, and the intercept's (fit_intercept)."""
        return source.n_features + int(self.params.fit_intercept)

    def _free_row(self, source: ChunkSource) -> int:
        """The intercept's row of W (not penalised), −1 without one."""
        return source.n_features if self.params.fit_intercept else -1

    def _split(self, W: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
        """(the features' rows of W, the intercept b or None)."""
        return (W[:-1], W[-1].copy()) if self.params.fit_intercept else (W, None)

    def _penalty(self, pen: int, W_rows: np.ndarray, cols: np.ndarray, free: int, rho: float) -> float:
        """λP of the rows `cols` of W (W_rows = W[cols]), the intercept's row left out."""
        keep = cols != free
        return value(pen, np.ascontiguousarray(W_rows[keep]), self.lam, rho)

    def _objective(self, loss_sum: float, n: int, W: np.ndarray) -> float:
        """streamfit.objectives' F(W, b) = (1/n) Σ_i ℓ_i + λ P(W) (eq. 2 and its variants, averaged
        convention, b not penalised) from the loss summed over the n samples."""
        return objective_for(self.name, self.params.model_copy(update={"lam": self.lam}), self._multilabel).total(
            ChunkSums(loss_sum, n), *self._split(W)
        )

    def _fields(
        self, W: np.ndarray, objective: float, correct: int, n: int, source: ChunkSource, **more
    ) -> dict[str, Any]:
        """The fields logged at the end of an outer iteration: F (eq. 2, averaged), top-1
        accuracy, non-zero rows of W (the features', not the intercept's, of the source's
        n_features; W may be the blocks' rows only, `_block_rows`), then `more`."""
        nz = int(np.count_nonzero(np.any(self._split(W)[0] != 0, axis=1)))
        acc = {"train_p_at_1" if source.multilabel else "train_accuracy": correct / n}
        return {"objective": objective, **acc, "nnz_rows": nz, "nnz_rows_pct": 100.0 * nz / source.n_features, **more}

    def _block_rows(self, W: np.ndarray, blocks: np.ndarray) -> np.ndarray:
        """W's rows of the blocks (features with a non-zero, then the intercept's row, the last
        index), in order: the others are zero, so F and the non-zero rows computed on these are
        those of W, bitwise (a zero row adds 0.0 to P's sum), at the cost of the occupied rows
        (news20-5: 36 463 of 262 145, the logged fields were 10 % of the fit's time)."""
        return W[blocks]

    def _stop_ratio(self, viol_sum: float, viol_max: float, first) -> float:
        """Eq. (10): ℓ1 ratio for cyclic blocks, ℓ∞ ratio for random ones (0 if W=0 is optimal)."""
        num, den = (viol_sum, first[0]) if self.params.variant == "ls" else (viol_max, first[1])
        return num / den if den > 0 else 0.0

    # ---- mode "memory": Algorithm 1, sequential ----
    def _memory_data(
        self, source: ChunkSource, scale: np.ndarray | None, shift: np.ndarray | None = None
    ) -> _MemoryData:
        """X (CSC, float64, the intercept's column last), its columns less `shift` (the state's μ, 0
        for the columns not centred; None: none) and divided by `scale` (the state's s; None: as stored), and the
        labels; kept between steps for the same source, s and μ."""
        same = all(
            a is None if b is None else a is not None and np.array_equal(a, b)
            for a, b in ((self._data_scale, scale), (self._data_shift, shift))
        )
        if self._data is None or self._data_source is not source or not same:
            X, labels = source.to_scipy()
            Xc = sp.csc_matrix(_design(X, self.params.fit_intercept))
            Xc.sort_indices()
            if shift is not None:  # the centred columns, x_ij − μ_j: X less μ_j on every row of those columns only
                n, cols = Xc.shape[0], np.flatnonzero(shift)  # (each non-zero in over half the rows: ≤ 2× their nnz)
                means = sp.csc_matrix(
                    (np.repeat(shift[cols], n), (np.tile(np.arange(n), cols.size), np.repeat(cols, n))), Xc.shape
                )
                Xc = sp.csc_matrix(Xc - means)  # scipy drops the exact zeros x_ij = μ_j, as from a dense array
                Xc.sort_indices()
            if scale is not None:  # the standardized columns, x_ij / s_j
                Xc = sp.csc_matrix((Xc.data / np.repeat(scale, np.diff(Xc.indptr)), Xc.indices, Xc.indptr), Xc.shape)
            lab_ptr, lab_ind = label_lists(labels, source.n_rows)
            c = self._codes(source)[2]
            K = c / source.n_rows * np.asarray(Xc.multiply(Xc).sum(axis=0)).ravel()
            blocks = np.flatnonzero(np.diff(Xc.indptr)).astype(np.int64)
            self._data = _MemoryData(
                Xc.indptr.astype(np.int64),
                Xc.indices.astype(np.int64),
                Xc.data,
                Xc,
                labels,
                lab_ptr,
                lab_ind,
                blocks,
                K,
            )
            self._data_source, self._data_scale, self._data_shift = source, scale, shift
        return self._data

    def _init_memory(self, ctx: Context) -> MemoryState:
        """W = 0 and S = 0; the columns' μ (centring) and s (standardize) from X as read, the data
        then centred and scaled by them."""
        src = ctx.source
        Xc = self._memory_data(src, None).Xc
        nnz = np.diff(Xc.indptr)
        sums = np.asarray(Xc.sum(axis=0)).ravel()
        squares = np.asarray(Xc.multiply(Xc).sum(axis=0)).ravel()
        shift = self._column_shift(src, nnz, sums, squares)
        scale = self._column_scale(src, nnz, sums, squares, centred=shift is not None)
        self._memory_data(src, scale, shift)
        return MemoryState(
            W=np.zeros((self._width(src), src.n_classes)),
            S=np.zeros((src.n_rows, src.n_classes)),
            active=np.ones(self._width(src), dtype=np.bool_),
            column_scale=scale,
            column_shift=shift,
        )

    def _step_memory(self, ctx: Context, st: MemoryState) -> dict[str, Any]:
        """One outer iteration of Algorithm 1, then the stopping test (10) and its confirmation."""
        p = self.params
        loss, pen, _, rho = self._codes(ctx.source)
        dat = self._memory_data(ctx.source, st.column_scale, st.column_shift)
        n = ctx.source.n_rows
        blocks = dat.blocks
        order = self._memory_order(dat, ctx.source, st.step)
        thr = self._group_lam() - st.max_viol / n if p.shrinking and math.isfinite(st.max_viol) else -math.inf
        vsum, vmax, extra = bcd_epoch(
            order,
            dat.indptr,
            dat.indices,
            dat.data,
            st.S,
            st.W,
            dat.lab_ptr,
            dat.lab_ind,
            loss,
            pen,
            self.lam,
            rho,
            p.variant == "ls",
            dat.K,
            p.sigma,
            p.omega,
            p.max_ls,
            EPS,
            st.active,
            thr,
            self._free_row(ctx.source),
            self._diagonal_curvature(ctx.source),
        )
        st.step += 1
        st.ls_steps += extra
        if st.first is None:
            st.first = (vsum, vmax)
        st.ratio = self._stop_ratio(vsum, vmax, st.first)
        st.max_viol = vmax
        loss_sum = rows_loss(loss, st.S, dat.lab_ptr, dat.lab_ind, np.arange(n, dtype=np.int64), 0)[0]
        W_blocks = self._block_rows(st.W, blocks)
        f = self._objective(loss_sum, n, W_blocks)
        st.f_hist = (st.f_hist + [f])[-(2 * TAIL_WINDOW + 1) :]
        st.converged, st.gap, st.tail = st.ratio < p.tol, None, None
        if st.converged and p.stopping == "gap":  # (10) holds: confirm with the duality gap (a global certificate)
            f, st.gap = self._gap(dat.Xc, st.S, dat.labels, st.W)
            st.converged = st.gap < p.tol
        elif st.converged and p.stopping == "auto":  # (10) holds: confirm with the estimated remaining decrease
            st.tail = _tail_estimate(st.f_hist)
            st.converged = st.tail < p.tol
        n_active = int(st.active[blocks].sum())
        # shrinking: the rule holds on the active blocks (or the gap, global, does not): all blocks again
        if n_active < len(blocks) and st.ratio < p.tol and st.converged != (p.stopping == "gap"):
            st.active[:] = True
            st.converged, st.max_viol = False, math.inf
        checks = {
            k: v for k, v in (("duality_gap", st.gap), ("tail_estimate", st.tail)) if v is not None and math.isfinite(v)
        }
        return self._fields(
            W_blocks,
            f,
            _n_correct(st.S, dat.labels),
            n,
            ctx.source,
            violation_ratio=st.ratio,
            ls_steps=st.ls_steps,
            active_blocks=n_active,
            mode="memory",
            **checks,
        )

    def _memory_order(self, dat: _MemoryData, source: ChunkSource, outer: int) -> np.ndarray:
        """The blocks of memory-mode outer iteration `outer` (0-based) in visiting order.

        cst: |blocks| uniform draws with replacement (Richtárik and Takáč). ls: the feature
        blocks in a permutation drawn from numpy's generator seeded with (random_state, outer)
        (block_order "permuted") or in feature order ("cyclic", the paper's); the intercept's
        block (fit_intercept) is visited after every stretch of feature blocks whose columns hold
        INTERCEPT_SPACING·n non-zeros, and last. Every feature's column is non-negative on text
        (counts, tf-idf), so each feature step also moves the rows' common offset, which only b
        can take over for free (it is unpenalised): visited once per outer iteration, b lags, and
        the blocks pass that offset among themselves for a hundred outer iterations (docs/
        benchmarks.md, session 15). Its visits cost n·m each, at most 1/INTERCEPT_SPACING of the
        features' work."""
        p = self.params
        blocks = dat.blocks
        rng = np.random.default_rng([p.random_state, outer])
        if p.variant == "cst":
            return blocks[rng.integers(0, len(blocks), len(blocks))]
        free = self._free_row(source)
        features = blocks[blocks != free]
        if p.block_order == "permuted":
            features = rng.permutation(features)
        if free < 0 or free not in blocks:
            return features
        stretch = np.cumsum(np.diff(dat.indptr)[features]) // (INTERCEPT_SPACING * source.n_rows)
        after = np.flatnonzero(np.diff(stretch, prepend=0) > 0) + 1
        order = np.insert(features, after, free)
        return order if len(order) and order[-1] == free else np.append(order, free)

    def _gap(self, Xc: sp.csc_matrix, S: np.ndarray, labels, W: np.ndarray) -> tuple[float, float]:
        """(F(W), relative duality gap (F − D)/F) at the current W (S = XW), D from
        streamfit.objectives' dual point c·∇ℓ(S) with c ≤ λ / ‖G(W)‖_* (`Objective.dual_value`).
        F − F* ≤ F − D, so the gap certifies the objective's distance to the optimum."""
        objective = objective_for(self.name, self.params.model_copy(update={"lam": self.lam}), self._multilabel)
        f = objective.total(objective.loss_sums(S, labels), W, None)
        dual = objective.dual_value_at_scores(S, Xc, labels)
        return f, (f - dual) / f if f > 0 else 0.0

    # ---- mode "chunks": out of core, one pass per feature group ----
    def _order(self, blocks: np.ndarray, active: np.ndarray, outer: int, free: int) -> np.ndarray:
        """Active feature blocks of outer iteration `outer`, the intercept's row `free` left out
        (it joins every group, `_group`): in feature order (ls) or a seeded permutation (cst).
        block_order is the memory mode's: permuted groups took 36 outer iterations against 27 on
        the fingerprint run bcd-chunks-shrinking-converged (digits, group_size 16)."""
        live = blocks[active[blocks] & (blocks != free)]
        return (
            live
            if self.params.variant == "ls"
            else np.random.default_rng([self.params.random_state, outer]).permutation(live)
        )

    def _init_chunks(self, ctx: Context) -> ChunksState:
        """The column statistics pass (the blocks, and the columns' μ and s), then the first
        group's pass at W = 0 (its direction)."""
        src = ctx.source
        stats = ctx.engine.map_reduce(
            _colstats_task, src, range(src.n_chunks), desc="bcd: column stats", fit_intercept=self.params.fit_intercept
        )
        col_nnz = stats.nnz
        shift = self._column_shift(src, col_nnz, stats.sums, stats.sq)
        blocks = np.flatnonzero(col_nnz).astype(np.int64)
        active = np.ones(self._width(src), dtype=np.bool_)
        st = ChunksState(
            W=np.zeros((self._width(src), src.n_classes)),
            blocks=blocks,
            active=active,
            order=self._order(blocks, active, 0, self._free_row(src)),
            scores=PerSample(SCORES, 0, written=False),
            data_passes=1,
            column_scale=self._column_scale(src, col_nnz, stats.sums, stats.sq, centred=shift is not None),
            column_shift=shift,
        )
        self._chunks_pass(ctx, st)
        return st

    def _step_chunks(self, ctx: Context, st: ChunksState) -> dict[str, Any]:
        """One group: the line search of the pending group and the next group's direction, in
        one pass; the step after an outer iteration's last group closes it (eq. 10)."""
        p = self.params
        closing = st.group == 0  # the pending direction is the last group of outer iteration `st.outer`
        if closing:
            st.ratio = self._stop_ratio(st.sums[0], st.sums[1], st.first)
            st.max_viol, st.sums = st.sums[1], [0.0, 0.0]
            st.converged, st.tail = st.ratio < p.tol, None
            if st.converged and p.stopping == "auto":  # (10) holds: confirm with the estimated remaining decrease
                st.tail = _tail_estimate(st.f_hist)
                st.converged = st.tail < p.tol
            if st.converged and not st.active[st.blocks].all():  # shrinking: check again on all blocks
                st.active[:] = True
                st.converged, st.max_viol = False, math.inf
            st.done = st.converged or st.outer >= p.max_iter
            st.order = self._order(st.blocks, st.active, st.outer, self._free_row(ctx.source))
        closed = st.outer
        sums, a = self._chunks_pass(ctx, st, closing=closing)
        st.step += 1
        if closing:
            st.closed_at, st.closed_outer = st.step, closed
        counters = {
            "data_passes": st.data_passes,
            "ls_steps": st.ls_steps,
            "active_blocks": int(st.active[st.blocks].sum()),
            "mode": "chunks",
        }
        if not closing:
            return {"outer_iteration": closed + 1, **counters}
        n = ctx.source.n_rows
        W_blocks = self._block_rows(st.W, st.blocks)
        f = self._objective(sums.loss + sums.dloss[a], n, W_blocks)
        st.f_hist = (st.f_hist + [f])[-(2 * TAIL_WINDOW + 1) :]
        tail = {"tail_estimate": st.tail} if st.tail is not None and math.isfinite(st.tail) else {}
        return {
            "outer_iteration": closed,
            **self._fields(
                W_blocks, f, sums.hits + sums.dhits[a], n, ctx.source, violation_ratio=st.ratio, **counters, **tail
            ),
        }

    def _chunks_pass(self, ctx: Context, st: ChunksState, closing: bool = False) -> tuple[PassSums, int]:
        """One map_reduce pass: commit, line search of the pending direction (index of the accepted
        candidate returned), the next group's direction (none once `st.done`)."""
        p = self.params
        src = ctx.source
        loss, pen, c, rho = self._codes(src)
        n = src.n_rows
        free = self._free_row(src)
        ls = p.variant == "ls"
        trials = np.array([1.0 / p.omega, 1.0, p.omega, p.omega**2, 0.0]) if ls else np.ones(1)
        B = None if st.done else self._group(st, free)
        commit = None if st.commit_cols is None else (st.commit_cols, st.commit_delta)
        direction = None if st.dir_cols is None else (st.dir_cols, st.dir_delta)
        alphas = trials if direction is not None else np.zeros(1)
        sums = ctx.engine.map_reduce(
            _pass_task,
            src,
            range(src.n_chunks),
            desc="bcd: group",
            state=ctx.chunk_state,
            version=st.scores.version,
            commit=commit,
            direction=direction,
            alphas=alphas,
            cols=B,
            loss=loss,
            curv_c=0.0 if ls else c,
            full=closing,
            fit_intercept=p.fit_intercept,
            scale=st.column_scale,
            shift=st.column_shift,
        )
        st.data_passes += 1
        if commit is not None:
            st.scores = PerSample(SCORES, st.scores.version + 1)
        # line search on the pending direction (sufficient decrease (7) summed over the group)
        a = 0
        st.commit_cols = st.commit_delta = None
        if direction is not None:
            cols, delta = direction
            p_old = self._penalty(pen, st.W[cols], cols, free, rho)
            while (
                ls
                and alphas[a] > 0
                and sums.dloss[a] / n + self._penalty(pen, st.W[cols] + alphas[a] * delta, cols, free, rho) - p_old
                > p.sigma * alphas[a] * st.bound
            ):
                a += 1
            st.ls_steps += a
            if alphas[a] > 0:
                st.commit_cols, st.commit_delta = cols, alphas[a] * delta
                st.W[cols] += st.commit_delta
            if ls:  # the next direction's scale: θ ← θ/α (4θ when no trial passed), within [THETA, 1/THETA]
                st.theta = min(max(st.theta / alphas[a] if alphas[a] > 0 else 4.0 * st.theta, THETA), 1.0 / THETA)
        st.dir_cols = st.dir_delta = None
        if B is not None:  # the next group's direction from its gradient at the accepted point
            G_B, L = sums.grad[a] / n, np.maximum(st.theta * sums.curv[a].max(axis=1) / n, EPS)
            thr = self._group_lam() - st.max_viol / n if p.shrinking and math.isfinite(st.max_viol) else -math.inf
            keep = (B == free) | ~((np.linalg.norm(G_B, axis=1) < thr) & ~np.any(st.W[B] != 0, axis=1))
            st.active[B[~keep]] = False
            B, G_B, L = B[keep], G_B[keep], L[keep]
            free_b = int(np.searchsorted(B, free)) if free in B else -1
            delta, viol = group_update(st.W[B], G_B, L, pen, self.lam, rho, free_b)
            st.sums = [st.sums[0] + float(viol.sum()), max(st.sums[1], float(viol.max(initial=0.0)))]
            st.bound = (
                float((G_B * delta).sum())
                + self._penalty(pen, st.W[B] + delta, B, free, rho)
                - self._penalty(pen, st.W[B], B, free, rho)
            )
            moved = np.any(delta != 0, axis=1)
            if moved.any():
                st.dir_cols, st.dir_delta = B[moved], delta[moved]
            st.group += 1
            if st.group * p.group_size >= len(st.order):
                st.group, st.outer = 0, st.outer + 1
                if st.first is None:
                    st.first = list(st.sums)
        return sums, a

    def _group(self, st: ChunksState, free: int) -> np.ndarray:
        """The blocks of the next group, sorted: its slice of `order` and the intercept's row
        (`free`, fit_intercept; the last index, so the order stays sorted). Text columns are
        non-negative, so every group's step also moves its rows' common offset, which only the
        unpenalised b takes over at no cost; visited once per outer iteration, as the other
        blocks, b lags and the groups pass that offset among themselves (the memory mode's lag,
        `_memory_order`). In every group, its gradient and curvature come from the same pass as
        the group's, and its step is line-searched with theirs: every row is then touched by
        every pass, which on text the groups' columns nearly are already (docs/benchmarks.md,
        session 16)."""
        B = np.sort(st.order[st.group * self.params.group_size : (st.group + 1) * self.params.group_size])
        return B if free < 0 else np.append(B, free)

    # ---- FISTA ----
    def _init_fista(self, ctx: Context) -> FistaState:
        """K = (c/n) ‖X‖²_F of the columns solved on (column statistics pass: with μ and s,
        Σ_i ((x_ij − μ_j)/s_j)² = (Σ_i x_ij² − 2μ_j Σ_i x_ij + nμ_j²)/s_j²) and the loss and gradient
        at Y_1 = 0."""
        p = self.params
        src = ctx.source
        loss, _, c, _ = self._codes(src)
        chunks = range(src.n_chunks)
        stats = ctx.engine.map_reduce(
            _colstats_task, src, chunks, desc="fista: column stats", fit_intercept=p.fit_intercept
        )
        shift = self._column_shift(src, stats.nnz, stats.sums, stats.sq)
        scale = self._column_scale(src, stats.nnz, stats.sums, stats.sq, centred=shift is not None)
        sq = stats.sq if shift is None else stats.sq - 2.0 * shift * stats.sums + src.n_rows * shift * shift
        sq = sq if scale is None else sq / scale**2
        K = c / src.n_rows * float(sq.sum())
        W, Y = np.zeros((self._width(src), src.n_classes)), np.zeros((self._width(src), src.n_classes))
        at_y = ctx.engine.map_reduce(
            _fista_task,
            src,
            chunks,
            desc="fista",
            W=Y,
            Y=Y,
            loss=loss,
            fit_intercept=p.fit_intercept,
            scale=scale,
            shift=shift,
        )
        return FistaState(
            W=W,
            Y=Y,
            grad_y=at_y.grad_y,
            loss_y=at_y.loss_y,
            L=K if p.variant == "cst" else 1e-3 * K,
            column_scale=scale,
            column_shift=shift,
        )

    def _step_fista(self, ctx: Context, st: FistaState) -> dict[str, Any]:
        """One FISTA iteration (with its backtracking on L for variant "ls")."""
        p = self.params
        src = ctx.source
        loss, pen, _, rho = self._codes(src)
        n = src.n_rows
        G_n = st.grad_y / n
        while True:
            W = st.Y - G_n / st.L  # the gradient step; the prox of λP on the features' rows (b is free)
            W[: src.n_features] = prox(pen, W[: src.n_features], 1.0 / st.L, self.lam, rho)
            D = W - st.Y
            t_next = (1.0 + math.sqrt(1.0 + 4.0 * st.t * st.t)) / 2.0
            Y_next = W + ((st.t - 1.0) / t_next) * (W - st.W)
            sums = ctx.engine.map_reduce(
                _fista_task,
                src,
                range(src.n_chunks),
                desc="fista",
                W=W,
                Y=Y_next,
                loss=loss,
                fit_intercept=p.fit_intercept,
                scale=st.column_scale,
                shift=st.column_shift,
            )
            bound = st.loss_y / n + float((G_n * D).sum()) + 0.5 * st.L * float((D * D).sum())
            if p.variant == "cst" or sums.loss_w / n <= bound * (1 + 1e-12):
                break
            st.L *= 2.0
        mapping = st.L * math.sqrt(float((D * D).sum()))
        if st.first is None:
            st.first = mapping
        st.step += 1
        st.W, st.Y, st.t, st.loss_y, st.grad_y = W, Y_next, t_next, sums.loss_y, sums.grad_y
        st.ratio = mapping / st.first if st.first > 0 else 0.0
        st.converged = st.ratio < p.tol
        return self._fields(
            W,
            self._objective(sums.loss_w, n, W),
            sums.hits_w,
            n,
            src,
            violation_ratio=st.ratio,
            lipschitz=st.L,
            mode="fista",
        )
