"""Proximal primal-dual solver for the exact multiclass hinge with sparse regularizers:
Algorithms 1 and 2 of Chierchia, Pustelnik, Pesquet and Pesquet-Popescu (2015), "A proximal
approach for sparse multiclass SVM".

Model (1): scores s_ℓ = Wᵀu_ℓ + b (W ∈ ℝ^{M×K} feature-major, offsets b unpenalized). With
T_ℓ, r_ℓ and the Crammer–Singer hinge h_ℓ(T_ℓx) = max(0, 1 + max_{k≠z_ℓ} s_ℓk − s_ℓz_ℓ) of (6)
(see fbpd_kernels), and n = L training rows, the two problems are, with the project's
sample-averaged convention:

- formulation="regularized", problem (7):  minimize  lam · g(W) + (1/n) Σ_ℓ h_ℓ(T_ℓ x)
  (the paper's λ is 1/(n·lam)); lam=None (the default) sets lam = lam_ratio · λ_ref from the
  data: λ_ref = ‖(1/n) Σ_ℓ u_ℓ (e_zℓ − π)ᵀ‖∞ · K/(K − 1), π the class frequencies, is the ℓ∞
  norm of the hinge's subgradient at W = 0, equal offsets and Y_ℓ uniform on the K − 1 wrong
  classes, so on balanced classes W = 0 is optimal for lam ≥ λ_ref (the ℓ1 optimality
  condition); it costs one pass (`lam_ref`);
- formulation="constrained", problem (8):  minimize  g(W)  s.t.  (1/n) Σ_ℓ h_ℓ(T_ℓ x) ≤ eta
  (the paper's η is n·eta; its η = αL is eta = α). `lam` is not used.

g ∈ {"l1": ‖W‖₁, "l1/l2": Σ_{k,b} ‖x^(k,b)‖₂, "l1/linf": Σ_{k,b} ‖x^(k,b)‖∞, "l2": ½‖W‖²},
blocks x^(k,b) of `group_size` consecutive features of class k (§2.2).

Algorithm 1 (FBPD on (7)), duals Y = n·y with rows on the unit simplex (y ∈ (S_{1/n})^L):

    x⁺ = prox_{τ·lam·g}(x − τ (1/n) TᵀY)
    Y_ℓ ← P_{S_1}(Y_ℓ + nσ (T_ℓ(2x⁺ − x) + r_ℓ))          (Proposition 3.1, Condat's projection)

Algorithm 2 (FBPD on (13), the epigraphical splitting of (8)), with ζ ∈ ℝ^L and duals
(y, ξ) ∈ ℝ^{L×K} × ℝ^L:

    x⁺ = prox_{τg}(x − τ Tᵀy),   ζ⁺ = P_{V_η}(ζ − τξ)       (V_η = {Σ_ℓ ζ_ℓ ≤ n·eta})
    (y, ξ) ← (ŷ, ξ̂) − σ P_E(ŷ/σ, ξ̂/σ),  ŷ = y + σT(2x⁺ − x), ξ̂ = ξ + σ(2ζ⁺ − ζ)  (Prop. 3.3)

Scalar steps (preconditioning=false, the mixed norms, Algorithm 2, and with the default
preconditioning=auto dense inputs; sparse inputs get the diagonal steps below): τσ‖T‖² ≤ 1 (Algorithm 2: τσ max(‖T‖², 1) ≤ 1), with ‖T‖ from the
Lanczos iteration on TᵀT
over the data (seeded start, relative tolerance 1e-4, times 1.01 for safety), and τ = ρ/‖T‖,
σ = 1/(ρ‖T‖). The ratio ρ decides the speed by orders of magnitude: Chambolle–Pock's bound
(‖x* − x⁰‖²/τ + ‖y* − y⁰‖²/σ)/k is smallest for ρ = ‖x* − x⁰‖/‖y* − y⁰‖, and duals in
(S_{1/n})^L have ‖y* − y⁰‖ ≤ √(2/n); the default ρ = √n assumes ‖x*‖ ≈ √2 (Algorithm 1;
within a factor 3 on iris, wine and digits for Algorithm 1; Algorithm 2 uses ρ = 1).
`step_ratio` sets the initial ρ (docs/benchmarks.md: the default measured). The paper's
stopping rule: stop when ‖x⁺ − x‖/‖x⁺‖ < tol (1e-5 in §4.2), or after max_iter iterations
(default 250: on text neither rule fires within hundreds of passes, and the run warns).
Besides it (gap_tol > 0), the run stops when the relative duality gap (P − D)/P of the logged
primal P and dual D below and the offsets' dual infeasibility ‖(1/n) Σ_ℓ a_ℓ‖₂ are both below
gap_tol: a certificate that P is within about gap_tol·P of the optimum, where small steps are not.

Diagonal preconditioning (preconditioning=True, Algorithm 1 with g = l1 or l2: the default).
One step per weight and offset and one per dual block instead of the single pair (τ, σ):

    x⁺ = prox_{lam·g}^{τD}(x − τD (1/n)TᵀY),   Y_ℓ ← P_{S_1}(Y_ℓ + (nσ/w_ℓ)(T_ℓ(2x⁺ − x) + r_ℓ))

with D = diag(1/Σ_i |T_i,c|) over the columns c of T (`preconditioner`; the column of W_jk
sums to Σ_ℓ |u_ℓj| + (K − 2) Σ_{z_ℓ=k} |u_ℓj|, that of b_k to n + (K − 2)n_k) and w_ℓ =
2(‖u_ℓ‖₁ + 1), the sum of every row (ℓ, k ≠ z_ℓ) of T; for separable g the prox in the metric
D⁻¹ is one per coordinate (soft thresholding at τD_jk·lam). This is Pock and Chambolle's
preconditioned primal-dual iteration (2011, "Diagonal preconditioning for first order
primal-dual algorithms in convex optimization", α = 1). Convergence: in the variables
x′ = D^−½ x, y′_ℓ = √w_ℓ y_ℓ it is Algorithm 1 itself, applied to problem (7) written with the
operator T′ = diag(1/√w_ℓ) T D^½ (g′(x′) = g(D^½x′) stays separable, and y′_ℓ ranges over the
scaled simplex S_{√w_ℓ/n}, whose projection is Proposition 3.1's up to the factor, since w_ℓ is
one number per block), with scalar steps τ, σ. Algorithm 1's condition τσ‖T′‖² ≤ 1 holds for
τσ ≤ 1 because ‖T′‖ ≤ 1 (their Lemma 2: σ_i = 1/Σ_c |T_ic|, τ_c = 1/Σ_i |T_ic|), so the
paper's convergence result for Algorithm 1 ([19, 20]; variable metric: [48]) applies; the
steps are τ = ρ/1.01, σ = 1/(1.01ρ) (τσ‖T′‖² < 1 strictly, as the restarts below need) with no
estimate of ‖T‖ (no Lanczos passes). Why it pays on text:
with one step, τ ≤ 1/‖T‖ is set by the dense offsets' columns (‖T‖ ≈ √(nK)), so a feature in a
few documents moves by τ·(1/n)Σ|u_ℓj| per iteration, orders of magnitude too little; with
τD each weight moves by about one mean margin per iteration whatever its column's mass. The
default ρ⁰ = n makes τD_jk the inverse of column (j, k)'s mean entry and nσ/w_ℓ = 1/w_ℓ: both
steps of the order of one margin. On dense standardized data (wine) it is no faster than the
scalar step; on text it is (docs/benchmarks.md, "fbpd's defaults on text").

Centered columns (preconditioning=auto on dense inputs: at least DENSE_SHARE = 25 % of the used
columns' entries non-zero, from the label-sums pass). Scores uᵀW + b = (u − μ)ᵀW + b′ with
b′ = b + μᵀW and μ the training column means, so (7) and (8) in (W, b′) over the centered
features are the same problems (g does not involve b). The iteration runs in (W, b′) with the
operator T′(W, b′) = T(W, b′ − μᵀW) (`_uncentered`: the chunk kernels score with b′ − μᵀW;
`_centered_adjoint`: T′ᵀa = (GW − μGbᵀ, Gb)), ‖T′‖ by Lanczos and one scalar step; the model
holds b = b′ − μᵀW. Why: on non-negative columns far from zero mean (pendigits' 0..100) the
offsets' column of T is nearly parallel to every weight's, and the primal-dual iteration crawls
along that direction; centered, it does not (pendigits, 250 iterations: objective 0.191 against
0.281 with diagonal steps, HiGHS' optimum 0.153; letter 0.775 against 0.977). The diagonal
steps would need ‖u_ℓ − μ‖₁ per row in the kernel; on dense inputs they gained nothing measured
(docs/benchmarks.md, "fbpd on dense numeric data").

Standardized columns (standardize=True, the default, wherever the columns are centered). Each
centered column is also divided by its standard deviation s_j over the training rows
(`column_scales`, from Σ_ℓ u_ℓj² in the label-sums pass; 1 for a constant column): the
iteration runs in W′ = SW, S = diag(s), with the operator T″(W′, b′) = T(S⁻¹W′, b′ − μᵀS⁻¹W′)
(`_stored`: the kernels score with S⁻¹W′, the adjoint is S⁻¹ times the centered one), ‖T″‖ by
Lanczos, λ_ref of (7) on the standardized columns (column j's gradient divided by s_j), and g
applied to W′: in the stored features' terms the problem is (7) or (8) with g(SW), the ℓ1 norm
weighing W_jk by s_j, which is what fitting StandardScaler's columns solves. The model holds
S⁻¹W̃′ and b̃′ − μᵀS⁻¹W̃′. Why: g is not invariant to a column's units, and on unscaled numeric
tables (wine: columns from 0.1 to 1680) λ_ref came from the largest column, so the default lam
left the small ones out of the model (wine: 0.65 test accuracy, the model of HiGHS' optimum of that problem
0.78–0.87, LinearSVC 0.96); standardized, the fit is the same in any units (wine 0.985;
docs/benchmarks.md, "The Python-API check's leftovers, session 21"). standardize=False keeps
g on the columns as given.

Acceleration (restarts=True). Write one iteration of Algorithm 1 or 2 as z̃ = F(z), z = (x, y)
(Algorithm 2: (x, ζ, y, ξ)). F is firmly nonexpansive in the norm ‖z‖²_P = ‖x‖²/τ + ‖y‖²/σ
− 2⟨y, Tx⟩ (Algorithm 2: T ← [T 0; 0 I]) since τσ‖T‖² < 1 (He and Yuan 2012; Condat 2013,
the paper's [20]); preconditioned, the same holds in x′, y′ (‖x‖²/τ becomes Σ x²/(τD), ‖y‖²/σ
becomes Σ_ℓ w_ℓ‖y_ℓ‖²/σ), which is how the residual and ρ's re-balancing below are measured. Instead of z ← F(z), the restarted Halpern iteration with reflection
(Lu and Yang 2024, restarted Halpern PDHG for LP) steps
    z_{j+1} = (j+1)/(j+2) · (2F(z_j) − z_j) + 1/(j+2) · z_a
from an anchor z_a; it restarts (z_a ← z_j, j ← 0) when the fixed-point residual
R_j = ‖z_j − F(z_j)‖_P falls to 0.2 R_1, or to 0.8 R_1 while rising, or when j ≥ 0.36 k (k
iterations in all) — the criteria of Applegate et al. 2021 (PDLP) with R as the measure —
and at each restart re-balances the steps, ρ ← √(ρ · ‖Δx‖/‖Δy‖) (PDLP's primal weight; Δ =
the move between consecutive anchors). For LPs (ℓ1 / ℓ1,∞ with the hinge) restarted PDHG
has a linear rate where plain PDHG has O(1/k) (Applegate et al. 2023; Lu and Yang 2024);
measured in tools/bench_fbpd.py and tests/solvers/test_fbpd.py. After `adapt_iters`
iterations nothing adapts any more: the Halpern iteration of the nonexpansive 2F − I from a
fixed anchor converges to a fixed point of F (Wittmann 1992), i.e. a primal-dual solution;
this keeps the guarantee. The model is x̃ of F's last output, which is sparse; the stopping
rule compares consecutive x̃ (small steps, not a small gap: check the logged gap).
restarts=False runs the paper's plain iteration z ← F(z).

Dual objective logged per iteration: (11), maximise D(y) = Σ_ℓ r_ℓᵀy_ℓ − (lam·g)*(−Tᵀy).
For norm penalties g* is the indicator of the dual-norm ball, so the dual iterate is rescaled
into it (y_ℓ ← s·y_ℓ + (1 − s)/n e_{z_ℓ} changes neither feasibility in S_{1/n} nor anything
but a factor s in Tᵀy and rᵀy, as T_ℓ's column z_ℓ and r_ℓz_ℓ vanish): D = s·mean_ℓ r_ℓᵀY_ℓ,
s = min(1, lam/‖(1/n)TᵀY‖_*). For "l2", D = mean_ℓ r_ℓᵀY_ℓ − ‖(1/n)TᵀY‖²/(2 lam). The offsets
add the constraint Σ_ℓ a_ℓ = 0 (the b-block of Tᵀy), which iterates satisfy only in the
limit: it is logged as dual_infeasibility instead of being enforced. For the constrained
problem, D is the Lagrangian bound Σ_ℓ r_ℓᵀy_ℓ − c·n·eta − g*(−Tᵀy) with the multiplier
c = −mean(ξ) (at the solution ξ = −c·1 and y_ℓ ∈ S_c), rescaled the same way.

Used columns. A column j with no stored entry in the training rows has (Tᵀa)_j = 0 for every
a and mean μ_j = 0, so from x⁰ = 0 its rows of W, G = Tᵀy, x̃ and the anchors are 0.0 after
every prox (soft thresholding, v/(1 + t), a block's prox of 0) and every Halpern combination:
skipping them changes no value and, visited in the same order, no sum (they add +0.0). The
iteration therefore keeps only those rows, `rows` (the used columns; for the mixed norms the
whole blocks that hold one; every column when centered: `FBPDSolver.used_rows`): the state's
weight arrays (x, Tᵀy, x̃, the anchor's x and Tᵀy, the step scales D) are compact, U × K with
row r for feature rows[r], so the driver's sweeps run over contiguous memory and a checkpoint
holds U × K per array; the passes score with W2 = [x̃ W] on those rows and return G on them,
the chunks' columns renumbered; the model is the compact x̃ scattered into M × K. On hashed
text (2^18 columns, about 12 % used) that makes the iteration's cost proportional to the used
columns; the model is bitwise the one of the sweep over all M rows. Two sums over M × K are
numpy's pairwise sums, whose grouping depends on the array's length, not on its zeros: the
logged ‖x̃‖₁ and the restarts' ‖D^−½Δx‖² are computed as numpy's sum of the full array from the
non-zero entries of the rows (`primal_update` collects x̃'s; `pairwise_sum`, `scaled_move`). Full-size: ‖T‖'s Lanczos passes
(init), and the logged g(x̃) of "l2" and the mixed norms (on x̃ scattered into a buffer).

Out of core: the duals live in the run's per-sample store, one version per iteration; one
iteration is one pass over the chunks (docs/architecture.md, "fbpd", has the layout and costs).
"""

from __future__ import annotations

import dataclasses
import weakref
from typing import Any, Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from pydantic import Field
from scipy.linalg import eigvalsh_tridiagonal

from streamfit.checkpoint import config_hash
from streamfit.engine import Engine
from streamfit.errors import ConfigError
from streamfit.model import LinearModel
from streamfit.objectives import ChunkSums, objective_for
from streamfit.objectives.class_block_penalties import dual_norm, penalty_prox
from streamfit.solvers.base import Context, PerSample, Solver, SolverParams, SolverState, column_scales, register_solver
from streamfit.solvers.fbpd_kernels import (
    constrained_dual_step,
    csr_adjoint,
    csr_scores,
    halpern_combine,
    l1_primal_step,
    margins_adjoint_rows,
    pairwise_sum,
    primal_update,
    regularized_chunk_step,
    scaled_move,
)
from streamfit.store import Chunk, ChunkSource, InMemoryStore

DUAL, XI, ZETA = "dual", "xi", "zeta"  # ChunkState names; the anchors are "anchor_" + name
NORM_TOL = 1e-4
NORM_MAX_PASSES = 200
NORM_SAFETY = 1.01
RESTART_SUFFICIENT, RESTART_NECESSARY, RESTART_ARTIFICIAL = 0.2, 0.8, 0.36
GAP_TOL = 1e-3  # default: stop at a relative duality gap of 0.1 % (docs/benchmarks.md, "fbpd's defaults on text")
CHECKPOINT_ARRAYS = 6  # dense (U + 1) × K pairs in FBPDState: (W, b), (GW, Gb), (Wt, bt), (Wa, ba), (GWa, Gba), (D, Db)
LAM_RATIO = 0.003  # default lam = 0.003·λ_ref (docs/benchmarks.md, "fbpd's defaults on text")
DENSE_SHARE = 0.25  # preconditioning=auto: inputs this dense get centered columns and scalar steps
MAX_ITER = 250  # default budget of iterations (docs/benchmarks.md, "fbpd's defaults on text", session 12)


class FBPDParams(SolverParams):
    """Options of the fbpd solver (see the module docstring for the math)."""

    formulation: Literal["regularized", "constrained"] = Field(
        "regularized", description="regularized: problem (7), Algorithm 1; constrained: problem (8), Algorithm 2"
    )
    penalty: Literal["l1", "l1/l2", "l1/linf", "l2"] = Field(
        "l1", description="g: l1, l1/l2 or l1/linf over feature blocks of each class, or l2 = ½‖W‖²"
    )
    group_size: int = Field(
        5, ge=1, description="features per block of the mixed norms (paper: 5 genes, 81 coefficients)"
    )
    lam: float | None = Field(  # type: ignore[assignment]  # None: lam_ratio·λ_ref (nothing reads lam generically)
        None, gt=0, description="regularized: minimise lam·g(W) + mean hinge; null: lam_ratio·λ_ref of the data"
    )
    lam_ratio: float = Field(
        LAM_RATIO,
        gt=0,
        description="lam null: lam = lam_ratio·λ_ref, λ_ref = ‖(1/n) Σ_ℓ u_ℓ (e_zℓ − π)ᵀ‖∞·K/(K−1) (W = 0 is "
        "optimal for lam ≥ λ_ref on balanced classes)",
    )
    eta: float = Field(0.1, gt=0, description="constrained: minimise g(W) s.t. mean hinge <= eta")
    tol: float = Field(1e-5, ge=0, description="stop when ‖x⁺ − x‖/‖x⁺‖ < tol (the paper uses 1e-5)")
    gap_tol: float = Field(
        GAP_TOL,
        ge=0,
        description="also stop when the relative duality gap (P − D)/P and the offsets' dual infeasibility "
        "‖(1/n) Σ_ℓ a_ℓ‖₂ are both < gap_tol (0: the tol rule alone)",
    )
    max_iter: int = Field(
        MAX_ITER,
        ge=1,
        description="iterations (passes over the data); a budget, not part of the iteration: resume "
        "with a larger one continues the run to the model of an uninterrupted longer run",
        json_schema_extra={"affects_model": False},
    )
    step_ratio: float | None = Field(
        None,
        gt=0,
        description="initial ρ: τ = ρ/‖T‖, σ = 1/(ρ‖T‖); null: n (preconditioned), √n (regularized) or 1",
    )
    preconditioning: bool | Literal["auto"] = Field(
        "auto",
        description="true (regularized with l1 or l2): diagonal steps τ_jk = τ/(column sum of |T|), σ_ℓ = "
        "σ/(row sum) (Pock and Chambolle 2011); false, or another problem: one τ and σ from ‖T‖; auto: diagonal "
        f"steps on sparse inputs, on dense ones (≥ {DENSE_SHARE:g} of the used columns' entries non-zero) one "
        "τ and σ with the columns centered (the offsets absorb the means: the same problem)",
    )
    standardize: bool = Field(
        True,
        description="where the columns are centered (preconditioning=auto on dense inputs), also divide each by "
        "its standard deviation s_j: g then weighs W_jk by s_j, as on standardized columns (lam null: λ_ref on "
        "them too); false: g on the weights of the columns as given",
    )
    restarts: bool = Field(
        True, description="restarted Halpern iteration with reflection and step re-balancing; false: plain FBPD"
    )
    adapt_iters: int = Field(
        10_000, ge=0, description="no restart and no change of ρ after this many iterations (the convergence guarantee)"
    )


# -- chunk tasks ---------------------------------------------------------------------------


_CHUNKS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


@dataclasses.dataclass(frozen=True)
class _CSRRows:
    """Rows of a CSR matrix as views of its arrays (indptr rebased), what the kernels read."""

    indptr: np.ndarray
    indices: np.ndarray
    data: np.ndarray
    shape: tuple


def _read_chunk(source: ChunkSource, chunk_id: int) -> Chunk:
    """source.read_chunk; for an in-memory source, a Chunk whose X is a _CSRRows view of the
    source's arrays (only indptr copied), kept per source: slicing a CSR matrix copies the rows
    and costs more than a small chunk's whole pass (a Store caches decoded chunks itself)."""
    if not isinstance(source, InMemoryStore) or source.multilabel:
        return source.read_chunk(chunk_id)
    chunks = _CHUNKS.setdefault(source, {})
    if chunk_id not in chunks:
        X, (lo, hi) = source.X, source.chunk_bounds(chunk_id)
        start, end = X.indptr[lo], X.indptr[hi]
        rows = _CSRRows(X.indptr[lo : hi + 1] - start, X.indices[start:end], X.data[start:end], (hi - lo, X.shape[1]))
        chunks[chunk_id] = Chunk(chunk_id, lo, rows, source.labels[lo:hi])
    return chunks[chunk_id]


def _renumbered(X, position: np.ndarray, width: int) -> _CSRRows:
    """The chunk's rows with column j renumbered position[j] (int32, as the stored indices) and
    `width` columns: the numbering of the rows of W that the iteration updates, as the compact
    W2 and GW of a pass hold them (`FBPDSolver.used_rows`)."""
    return _CSRRows(X.indptr, position[X.indices], X.data, (X.shape[0], width))


def _scores(X, W2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    return csr_scores(X.indptr, X.indices, X.data, W2, b2)


def _adjoint(X, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ_ℓ T_ℓᵀ(rows of A) as (M × K, K), given the a_ℓ."""
    return csr_adjoint(X.indptr, X.indices, X.data, A, X.shape[1])


class NormalSums(NamedTuple):
    """A chunk's share of TᵀT x = (W, b) (Lanczos iteration), and its stored entries (non-zeros
    of X plus n_rows·K duals)."""

    W: np.ndarray
    b: np.ndarray
    entries: int


class RegularizedSums(NamedTuple):
    """A chunk's share of one Algorithm 1 iteration: Tᵀỹ (as GW, Gb), the hinge at x̃, Σ rᵀỹ,
    rows classified right, and the fixed-point residual's parts (‖Δy‖², ⟨Δy, TΔx⟩) and
    ‖y − y_a‖² per dual array."""

    GW: np.ndarray
    Gb: np.ndarray
    hinge: float
    r_dot: float
    correct: float
    moves: tuple
    coupling: float
    jumps: tuple


class ConstrainedSums(NamedTuple):
    """A chunk's share of one Algorithm 2 iteration: as RegularizedSums, plus Σξ and the sums of
    the next (y, ξ, ζ)."""

    GW: np.ndarray
    Gb: np.ndarray
    hinge: float
    r_dot: float
    xi_sum: float
    correct: float
    moves: tuple
    coupling: float
    totals: tuple
    jumps: tuple


def _normal_task(source: ChunkSource, chunk_id: int, W: np.ndarray, b: np.ndarray) -> NormalSums:
    """This chunk's share of TᵀT x (Lanczos iteration)."""
    chunk = _read_chunk(source, chunk_id)
    A = np.empty((chunk.n_rows, W.shape[1]))
    margins_adjoint_rows(_scores(chunk.X, W, b), chunk.labels, A)
    return NormalSums(*_adjoint(chunk.X, A), len(chunk.X.data) + A.size)


class LabelSums(NamedTuple):
    """A chunk's Σ_ℓ u_ℓ [e_zℓ, 1]ᵀ and Σ_ℓ |u_ℓ| [e_zℓ, 1]ᵀ (M × (K + 1): per class and in all),
    Σ_ℓ [e_zℓ, 1] (the row counts, K + 1), the entries a pass reads, Σ_ℓ u_ℓ² (M: the columns'
    standard deviations) and the stored entries per column (M: the used columns, used_rows)."""

    sums: np.ndarray
    counts: np.ndarray
    abs_sums: np.ndarray
    entries: int
    square_sums: np.ndarray
    column_entries: np.ndarray


def _label_sums_task(source: ChunkSource, chunk_id: int) -> LabelSums:
    """This chunk's LabelSums (λ_ref and the preconditioner)."""
    chunk = _read_chunk(source, chunk_id)
    X = chunk.X
    A = np.zeros((chunk.n_rows, source.n_classes + 1))
    A[np.arange(chunk.n_rows), chunk.labels] = 1.0
    A[:, -1] = 1.0
    sums, counts = _adjoint(X, A)
    abs_data = np.abs(X.data)
    abs_data.flags.writeable = X.data.flags.writeable  # csr_adjoint's one signature (numba's types tell them apart)
    abs_sums, _ = csr_adjoint(X.indptr, X.indices, abs_data, A, X.shape[1])
    squares = np.bincount(X.indices, weights=np.square(X.data, dtype=np.float64), minlength=X.shape[1])
    entries = len(X.data) + A.size - chunk.n_rows
    return LabelSums(sums, counts, abs_sums, entries, squares, np.bincount(X.indices, minlength=X.shape[1]))


def _column_counts_task(source: ChunkSource, chunk_id: int) -> np.ndarray:
    """The chunk's stored entries per column (n_features,)."""
    return np.bincount(_read_chunk(source, chunk_id).X.indices, minlength=source.n_features)


def _margin_change(S: np.ndarray, z: np.ndarray) -> np.ndarray:
    """T_ℓ(x − x̃) for every row, from S = scores at [x̃, x]."""
    K = S.shape[1] // 2
    D = S[:, K:] - S[:, :K]
    D -= D[np.arange(len(z)), z][:, None]  # in place: the column is copied out first
    return D


def _load(state, names: tuple, version: int, chunk_id: int, initial) -> tuple:
    """The arrays `names` at `version` (0: the starting point `initial()`, never written)."""
    return initial() if version == 0 else tuple(state.read(name, version, chunk_id) for name in names)


def _anchors(state, chunk_id: int, version: int, names: tuple, old: tuple, initial, anchor: int | None, restart: bool):
    """The Halpern anchors of the chunk's arrays `names`: None for plain FBPD (anchor None); at a
    restart the arrays `old` themselves, written as version `version` of "anchor_" + name; else
    version `anchor` of "anchor_" + name. A task loads them before it makes its new arrays, so
    that the file read's bytes are not held beside those too."""
    if anchor is None:
        return None
    if restart:
        for name, array in zip(names, old):
            state.write("anchor_" + name, version, chunk_id, array)
        return old
    return _load(state, tuple("anchor_" + name for name in names), anchor, chunk_id, initial)


def _advance(old: tuple, new: tuple, anchors: tuple | None, a: float, c: float, weights: np.ndarray):
    """The next iterate, written over the arrays `new`, and (‖old − new‖² per array,
    ‖next − anchor‖² per array), the Halpern norms weighted per row by `weights` (the inverse
    dual step scales). Plain FBPD (anchors None): next = new. Halpern: next = a(2·new − old) +
    c·anchor (`halpern_combine`, in place: no rows × K array besides old, new and the anchors)."""
    if anchors is None:
        moves = tuple(float(np.dot(d, d)) for d in ((o - w).ravel() for o, w in zip(old, new)))
        return moves, (0.0,) * len(new)
    combined = [halpern_combine(w.ravel(), o.ravel(), p.ravel(), a, c, weights) for w, o, p in zip(new, old, anchors)]
    return tuple(move for move, _ in combined), tuple(jump for _, jump in combined)


def _write_next(state, chunk_id: int, version: int, names: tuple, arrays: tuple) -> None:
    """Writes the next iterate's per-sample arrays as version `version + 1`."""
    for name, array in zip(names, arrays):
        state.write(name, version + 1, chunk_id, array)


def _regularized_task(
    source: ChunkSource,
    chunk_id: int,
    state,
    version: int,
    W2,
    b2,
    position,
    step: float,
    preconditioned: bool,
    anchor: int | None = None,
    restart: bool = False,
    a: float = 1.0,
    c: float = 0.0,
) -> RegularizedSums:
    """A chunk's share of one iteration of Algorithm 1 (the regularized form (7)): the dual
    update Ỹ_ℓ = P_{S_1}(Y_ℓ + step_ℓ·(T_ℓ(2x⁺ − x) + r_ℓ)) of its rows (step_ℓ = step / w_ℓ
    when `preconditioned`) and its adjoint TᵀỸ (`regularized_chunk_step`), the next duals
    written as version `version + 1` (Halpern combined with the anchor when `anchor` is set,
    `_advance`). Memory: three float64 arrays of the chunk's rows × K at most (Y, its anchor
    and Ỹ, which becomes the next duals in place; Y and the anchor are let go before Ỹ is
    written, when its file bytes are the second), the count FBPDSolver.row_state_arrays declares."""
    chunk = _read_chunk(source, chunk_id)
    z, K, X = chunk.labels, source.n_classes, _renumbered(chunk.X, position, len(W2))

    def initial():  # Y⁰ = the one-hot rows of the labels, built at n × K (np.eye(K)[z] made a K × K one first)
        return (chunk.targets(K),)

    (Y,) = _load(state, (DUAL,), version, chunk_id, initial)
    anchors = _anchors(state, chunk_id, version, (DUAL,), (Y,), initial, anchor, restart)
    GW, Gb = np.zeros((X.shape[1], K)), np.zeros(K)
    Yt, hinge, r_dot, correct, move, coupling, weights = regularized_chunk_step(
        X.indptr, X.indices, X.data, z, Y, W2, b2, step, GW, Gb, preconditioned
    )
    moves, jumps = _advance((Y,), (Yt,), anchors, a, c, weights)
    del Y, anchors
    _write_next(state, chunk_id, version, (DUAL,), (Yt,))
    if anchor is None and preconditioned:
        moves = (move,)
    return RegularizedSums(GW, Gb, hinge, r_dot, correct, moves, coupling, jumps)


def _constrained_task(
    source: ChunkSource,
    chunk_id: int,
    state,
    version: int,
    W2,
    b2,
    position,
    tau: float,
    sigma: float,
    shift: float,
    anchor: int | None = None,
    restart: bool = False,
    a: float = 1.0,
    c: float = 0.0,
) -> ConstrainedSums:
    """A chunk's share of one iteration of Algorithm 2 (problem (13), the epigraphical splitting
    of (8)): the dual step of its rows (y, ξ, ζ) at the scores S of [x⁺ x]
    (`constrained_dual_step`: ŷ = y + σT(2x⁺ − x), then the projection onto the epigraph of
    h_ℓ, Proposition 3.3) and its adjoint Tᵀa, the next duals written as version `version + 1`
    (Halpern combined with the anchor when `anchor` is set, `_advance`)."""
    chunk = _read_chunk(source, chunk_id)
    z, K, n = chunk.labels, source.n_classes, chunk.n_rows
    names = (DUAL, XI, ZETA)

    def initial():
        return np.zeros((n, K)), np.zeros(n), np.zeros(n)

    old = _load(state, names, version, chunk_id, initial)
    anchors = _anchors(state, chunk_id, version, names, old, initial, anchor, restart)
    Y, xi, zeta = (array.copy() for array in old)
    A = np.empty_like(Y)
    X = _renumbered(chunk.X, position, len(W2))
    S = _scores(X, W2, b2)
    hinge, r_dot, xi_sum, correct = constrained_dual_step(S, z, Y, xi, zeta, tau, sigma, shift, A)
    margin = _margin_change(S, z)
    del S
    change = old[0] - Y
    change *= margin  # in place: the same products as (old[0] − Y) · margin
    del margin
    coupling = float(change.sum() + ((old[1] - xi) * (old[2] - zeta)).sum())
    del change
    moves, jumps = _advance(old, (Y, xi, zeta), anchors, a, c, np.ones(n))
    del old, anchors
    _write_next(state, chunk_id, version, names, (Y, xi, zeta))
    totals = tuple(float(array.sum()) for array in (Y, xi, zeta))
    GW, Gb = _adjoint(X, A)
    return ConstrainedSums(GW, Gb, hinge, r_dot, xi_sum, correct, moves, coupling, totals, jumps)


def _uncentered(b: np.ndarray, mu: np.ndarray, W: np.ndarray) -> np.ndarray:
    """The offsets b − μᵀW of the stored features for the offsets b of the centered ones:
    (u − μ)ᵀW + b = uᵀW + (b − μᵀW). b unchanged (the same array) when nothing is centered."""
    return b - mu @ W if mu.any() else b


def _centered_adjoint(GW: np.ndarray, mu: np.ndarray, Gb: np.ndarray) -> np.ndarray:
    """The weights' part of Tᵀa for centered features from the stored features' (GW, Gb):
    Σ_ℓ (u_ℓ − μ) a_ℓᵀ = GW − μ Gbᵀ (the offsets' part Gb = Σ_ℓ a_ℓ is the same)."""
    return GW - np.outer(mu, Gb) if mu.any() else GW


def _stored(W: np.ndarray, scale: np.ndarray | None) -> np.ndarray:
    """The weights of the stored columns for weights W of the standardized ones (rows of W
    divided by the columns' standard deviations: ((u − μ)/s)ᵀW = (u − μ)ᵀ(W/s)); W itself when
    nothing is scaled. Also the standardized columns' adjoint from the centered one's."""
    return W if scale is None else W / scale[:, None]


def _scattered(A: np.ndarray, rows: np.ndarray, n_features: int, out: np.ndarray | None = None) -> np.ndarray:
    """The n_features × K array whose rows `rows` are those of the compact A and whose other rows
    are 0: A itself when every row is there, else `out` (its other rows 0) or a new array."""
    if len(rows) == n_features:
        return A
    full = np.zeros((n_features, A.shape[1])) if out is None else out
    full[rows] = A
    return full


def _scaled_square(d: np.ndarray, D: np.ndarray) -> float:
    """Σ d²/D, entries with D = 0 left out (their d is 0)."""
    return float((d * np.divide(d, D, out=np.zeros_like(d), where=D > 0)).sum())


def _ratio(change_sq: float, size_sq: float) -> float:
    """‖new − old‖/‖new‖ from the squares (0 if both are 0, inf if only new is)."""
    change, size = float(np.sqrt(change_sq)), float(np.sqrt(size_sq))
    return change / size if size > 0 else (0.0 if change == 0 else np.inf)


# -- the solver ----------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class FBPDState(SolverState):
    """The iterate x = (W, b) with G = Tᵀy (Algorithm 1: (1/n)TᵀY) and, for Algorithm 2, Σζ
    and Σξ; F's last primal output x̃ = (Wt, bt) (the model); the Halpern anchor (its x, G,
    sums and state version) and the restart bookkeeping; ‖T‖. `step` counts iterations and is
    the duals' version (0: the initial duals, never written). The weight arrays W, GW, Wt, Wa,
    GWa and D are compact, U × K: row r is feature rows[r] (the features left out are 0 in all
    of them, the module docstring's "Used columns")."""

    rows: np.ndarray  # the features the iteration updates (ascending, int64; FBPDSolver.used_rows)
    W: np.ndarray
    b: np.ndarray
    GW: np.ndarray
    Gb: np.ndarray
    Wt: np.ndarray
    bt: np.ndarray
    Wa: np.ndarray
    ba: np.ndarray
    GWa: np.ndarray
    Gba: np.ndarray
    D: np.ndarray  # primal step scales: τ_jk = τ·D_jk (1 without preconditioning; 0 for a feature without mass)
    Db: np.ndarray  # the offsets' step scales
    preconditioned: bool  # diagonal steps D (else one τ, σ from ‖T‖)
    mu: np.ndarray  # the column means the features are centered by (M; 0: not centered)
    scale: np.ndarray | None  # the columns' standard deviations the iteration divides them by (None: not scaled)
    norm: float  # ‖T‖ from the Lanczos iteration (preconditioned: 1, the bound of ‖Σ^½ T D^½‖)
    lam: float  # the weight of g in (7): p.lam, or lam_ratio·λ_ref (0 for the constrained problem (8))
    lam_ref: float  # λ_ref (0 unless lam is None and the problem is (7))
    checkpoint_period: int  # iterations per checkpoint (times checkpoint_every): see checkpoint_due
    rho: float
    settings: str  # config_hash of the parameters that determine the model (all but max_iter)
    sums: tuple = (0.0, 0.0)  # Σζ, Σξ of the iterate (Algorithm 2)
    jumps: tuple = (0.0, 0.0, 0.0)  # ‖y − y_a‖² per dual array (Algorithm 2: y, ξ, ζ) of the iterate
    anchor: int = 0  # the anchor's state version (0: the starting point)
    since_restart: int = 0
    first_residual: float = 0.0
    last_residual: float = 0.0
    restart_due: bool = False
    restarts: int = 0
    data_passes: int = 0
    converged: bool = False
    # per-sample duals at version `step` and their anchors at version `anchor` (Algorithm 2: also ξ, ζ)
    dual: PerSample | None = None
    xi: PerSample | None = None
    zeta: PerSample | None = None
    anchor_dual: PerSample | None = None
    anchor_xi: PerSample | None = None
    anchor_zeta: PerSample | None = None


@register_solver
class FBPDSolver(Solver[FBPDState]):
    """Proximal primal-dual multiclass SVM (Chierchia et al. 2015): the exact Crammer-Singer
    hinge with an l1, l1/l2, l1/linf or l2 penalty and unpenalized class offsets, by Algorithm 1
    (regularized, problem (7)) or Algorithm 2 (constrained, problem (8)); one step is one
    iteration, a pass over the data, plain or restarted Halpern; multiclass stores only (see the
    module docstring).

    Continuing a run (resume=True): from the newest checkpoint, on disk or (run directory None)
    the newest saved through the same Checkpointer object, with the whole state. max_iter is a
    budget that the iteration never reads, so it is left out of the config hash: a run stopped
    at max_iter (or paused, killed, at a time limit) and continued with a larger max_iter ends
    bitwise where one uninterrupted run with that max_iter ends. Every other parameter must be
    unchanged."""

    name = "fbpd"
    dense_weights = True
    row_state_arrays = (
        3  # a chunk task's duals Y, their anchor and their update (_regularized_task; more in _constrained_task)
    )
    column_state_arrays = 13  # U × K beside the weights W (dense_weights): the state's GW, Wt, Wa, GWa, D, the
    # spares for x̃ and G̃, W2 = [x̃ x] (two), x̃'s non-zeros (two: places and values, prepare) and two chunk
    # tasks' GW in a pass's sum (U ≤ columns)
    Params = FBPDParams
    State = FBPDState
    params: FBPDParams
    position: np.ndarray  # each feature's row in the compact arrays (prepare, from the state's rows)
    spare_Wt: np.ndarray  # U × K buffers for the next x̃ and G̃ (prepare)
    spare_G: np.ndarray
    spare_W2: np.ndarray  # U × 2K buffer for ℓ1's [x̃ x] that the passes score with
    nonzeros: tuple[np.ndarray, np.ndarray]  # x̃'s non-zeros' places and |values| (primal_update; U·K each)
    full_Wt: np.ndarray | None = None  # M × K buffer for the logged g(x̃) of "l2" and the mixed norms (prepare)
    column_scale: np.ndarray | None = None  # the last model's standardizing s (to_model), None: not scaled

    def __init__(self, params: FBPDParams):
        super().__init__(params)
        self.settings = config_hash(params.model_settings())  # the state's record of the parameters

    def operator_norm(
        self, source: ChunkSource, engine: Engine, mu: np.ndarray, scale: np.ndarray | None = None
    ) -> tuple[float, int, int]:
        """‖T‖ by the Lanczos iteration on TᵀT from a seeded start, one pass per step: v_j
        orthonormal, α_j = ⟨TᵀTv_j, v_j⟩, β_j = ‖TᵀTv_j − α_j v_j − β_{j−1} v_{j−1}‖; the largest
        eigenvalue θ of the tridiagonal (α, β) (bisection) rises to ‖T‖² from below, like the
        power iteration's estimate, but converges in far fewer passes (sector: 125 power
        passes). Stops when θ changes by ≤ 1e-4·θ. Sums are numpy's (no BLAS), so the estimate
        is the same on every machine. With centered columns (μ ≠ 0) it is the norm of T acting on
        (W, b) as T does on (W, b − μᵀW), and with standardized ones as T does on (W/s, b − μᵀ(W/s)).
        Returns (√θ, passes, entries of the data and duals that
        one pass reads)."""
        rng = np.random.default_rng([self.params.random_state, 6])
        W = rng.standard_normal((source.n_features, source.n_classes))
        b = rng.standard_normal(source.n_classes)
        length = np.sqrt((W * W).sum() + (b * b).sum())
        W, b = W / length, b / length
        W_prev, b_prev, beta = np.zeros_like(W), np.zeros_like(b), 0.0
        alphas: list[float] = []
        betas: list[float] = []
        estimate, passes, entries = 0.0, 0, 0
        while passes < NORM_MAX_PASSES:
            passes += 1
            stored = _stored(W, scale)
            TW, Tb, entries = engine.map_reduce(
                _normal_task, source, range(source.n_chunks), desc="fbpd: ‖T‖", W=stored, b=_uncentered(b, mu, stored)
            )
            TW = _stored(_centered_adjoint(TW, mu, Tb), scale)
            alpha = float((TW * W).sum() + (Tb * b).sum())
            TW, Tb = TW - alpha * W - beta * W_prev, Tb - alpha * b - beta * b_prev
            alphas.append(alpha)
            previous = estimate
            estimate = float(
                eigvalsh_tridiagonal(np.array(alphas), np.array(betas), select="i", select_range=(passes - 1,) * 2)[0]
            )
            if estimate <= 0.0:
                raise ConfigError("T = 0: the training data has no non-zero rows")
            beta = float(np.sqrt((TW * TW).sum() + (Tb * Tb).sum()))
            if abs(estimate - previous) <= NORM_TOL * estimate or beta <= NORM_TOL * estimate:
                break  # converged, or the Krylov space is invariant (θ is then exact)
            betas.append(beta)
            W_prev, b_prev, W, b = W, b, TW / beta, Tb / beta
        return float(np.sqrt(estimate)), passes, int(entries)

    @staticmethod
    def lam_ref(label_sums: LabelSums, scale: np.ndarray | None = None) -> float:
        """λ_ref = ‖(1/n) Σ_ℓ u_ℓ (e_zℓ − π)ᵀ‖∞ · K/(K − 1), π the class frequencies.

        With every b_k equal, each row's hinge is 1 and its active terms are the K − 1 wrong
        classes; the subgradient with Y_ℓ uniform on them is (1/n) Σ_ℓ T_ℓᵀY_ℓ = −K/(K − 1) ·
        (1/n) Σ_ℓ u_ℓ (e_zℓ − π)ᵀ when the classes are balanced (π = 1/K; its b-part is then 0),
        so W = 0 solves (7) for every lam ≥ λ_ref (the ℓ1 optimality condition ‖∇‖∞ ≤ lam). On
        unbalanced classes it is the same statistic of the data, a scale rather than a bound.
        With standardized columns (`scale` s) column j's row is divided by s_j (centering does
        not change it: Σ_k of e_zℓ − π is 0)."""
        sums, counts = label_sums.sums, label_sums.counts
        K = len(counts) - 1
        n = counts[K]
        gradient = _stored((sums[:, :K] - np.outer(sums[:, K], counts[:K] / n)) / n, scale)
        return float(np.abs(gradient).max()) * K / max(K - 1, 1)

    @staticmethod
    def preconditioner(label_sums: LabelSums) -> tuple[np.ndarray, np.ndarray]:
        """Pock and Chambolle's primal scales (α = 1): D = 1/(column sums of |T|), (D, Db) for
        the weights and offsets. Column (j, k) of T holds u_ℓj once for each row with z_ℓ ≠ k
        and −u_ℓj in the K − 1 rows (ℓ, k′ ≠ k) of each row with z_ℓ = k, so its sum is
        Σ_ℓ |u_ℓj| + (K − 2) Σ_{ℓ: z_ℓ=k} |u_ℓj|, and the offset b_k's is n + (K − 2)·n_k.
        Features that no row uses get D = 0 (their weights stay 0)."""
        abs_sums, counts = label_sums.abs_sums, label_sums.counts
        K = len(counts) - 1
        column = abs_sums[:, K : K + 1] + (K - 2) * abs_sums[:, :K]
        D = np.divide(1.0, column, out=np.zeros_like(column), where=column > 0)
        return D, 1.0 / (counts[K] + (K - 2) * counts[:K])

    @staticmethod
    def dense(label_sums: LabelSums) -> bool:
        """Whether at least DENSE_SHARE of the used columns' entries are non-zero (nnz(X) ≥
        DENSE_SHARE · n · used columns): numeric tables and pixels, not text."""
        counts = label_sums.counts
        K, n = len(counts) - 1, counts[-1]
        used = int(np.count_nonzero(label_sums.abs_sums[:, K]))
        return label_sums.entries - n * K >= DENSE_SHARE * n * used

    def resolve_steps(self, dense: bool) -> tuple[bool, bool]:
        """(diagonal steps, centered columns) for `preconditioning` on inputs that are dense or
        not: diagonal steps need Algorithm 1 with a separable g (l1, l2); auto takes them on
        sparse inputs and, on dense ones, a scalar step on centered columns (docs/benchmarks.md,
        "fbpd on dense numeric data")."""
        p = self.params
        separable = p.formulation == "regularized" and p.penalty in ("l1", "l2")
        if p.preconditioning == "auto":
            return separable and not dense, dense
        return separable and p.preconditioning, False

    def initial_ratio(self, n: int, preconditioned: bool) -> float:
        """ρ at the start: `step_ratio`, else n (preconditioned: τ_jk = n·D_jk is one over
        column (j, k)'s mean |T| entry, and nσ_ℓ = 1/w_ℓ, steps of the order of the margins), √n
        (Algorithm 1) or 1 (Algorithm 2, whose duals y are the hinge's multiplier c times
        simplex points instead of lying in (S_{1/n})^L)."""
        if self.params.step_ratio:
            return self.params.step_ratio
        if preconditioned:
            return float(n)
        return float(np.sqrt(n)) if self.params.formulation == "regularized" else 1.0

    def steps(self, norm: float, rho: float, preconditioned: bool) -> tuple[float, float]:
        """(τ, σ) = (ρ/L, 1/(ρL)), L = 1.01‖T‖ (Algorithm 2: 1.01 max(‖T‖, 1)): τσ‖T‖² < 1.
        Preconditioned, L = 1.01: 1 bounds ‖diag(1/w)^½ T D^½‖ (Pock and Chambolle 2011, Lemma 2)."""
        if preconditioned:
            return rho / NORM_SAFETY, 1.0 / (rho * NORM_SAFETY)
        L = NORM_SAFETY * (norm if self.params.formulation == "regularized" else max(norm, 1.0))
        return rho / L, 1.0 / (rho * L)

    # ---- the protocol ----
    def init(self, ctx: Context) -> FBPDState:
        """x⁰ = 0, Tᵀy⁰ = 0 (Y_ℓ = e_{z_ℓ}, or y = 0), ρ⁰, the column means μ when centered, and
        ‖T‖ (Lanczos passes) or, when preconditioned, the scales D (one pass of label sums, which
        also gives λ_ref, μ and the density that preconditioning=auto decides on); the rows the
        iteration updates (`used_rows`) and the weight arrays on them."""
        source = ctx.source
        p, lam, lam_ref = self.params, self.params.lam or 0.0, 0.0
        shape = (source.n_features, source.n_classes)
        D, Db, passes = np.ones(shape), np.ones(source.n_classes), 0
        mu = np.zeros(source.n_features)
        sums: LabelSums | None = None
        if p.preconditioning is not False or (p.formulation == "regularized" and p.lam is None):
            sums = ctx.engine.map_reduce(_label_sums_task, source, range(source.n_chunks), desc="fbpd: label sums")
            passes += 1
        if ctx.class_rows is not None:  # the driver's count (not an iteration's pass: data_passes does not count it)
            self.check_classes(source, ctx.class_rows)
        preconditioned, centered = self.resolve_steps(sums is not None and self.dense(sums))
        scale = None
        if centered and sums is not None:
            mu = sums.sums[:, -1] / sums.counts[-1]
            if p.standardize:
                scale = column_scales(sums.counts[-1], sums.sums[:, -1], sums.square_sums)
        if preconditioned and sums is not None:
            D, Db = self.preconditioner(sums)
            norm, entries = 1.0, sums.entries
        else:
            norm, norm_passes, entries = self.operator_norm(source, ctx.engine, mu, scale)
            passes += norm_passes
        if p.formulation == "regularized" and p.lam is None and sums is not None:
            lam_ref = self.lam_ref(sums, scale)
            lam = p.lam_ratio * lam_ref
            if lam == 0.0:
                raise ConfigError("λ_ref = 0: no feature separates the classes; set lam, e.g. lam=1e-5")
        elif p.formulation == "constrained":
            lam = 0.0
        rows = self.used_rows(ctx, mu, sums)
        zero_W, zero_b = np.zeros((len(rows), source.n_classes)), np.zeros(source.n_classes)
        state = FBPDState(
            rows=rows,
            W=zero_W,
            b=zero_b,
            GW=zero_W,
            Gb=zero_b,
            Wt=zero_W,
            bt=zero_b,
            Wa=zero_W,
            ba=zero_b,
            GWa=zero_W,
            Gba=zero_b,
            D=D[rows],
            Db=Db,
            preconditioned=preconditioned,
            mu=mu,
            scale=scale,
            norm=norm,
            lam=lam,
            lam_ref=lam_ref,
            checkpoint_period=-(-CHECKPOINT_ARRAYS * (len(rows) + 1) * source.n_classes // entries),
            rho=self.initial_ratio(source.n_rows, preconditioned),
            settings=self.settings,
            data_passes=passes,
        )
        self._name_duals(state)
        self.prepare(ctx, state)
        return state

    def check_resume(self, ctx: Context, state: FBPDState) -> None:
        if state.settings != self.settings:
            raise ConfigError(
                "the checkpoint was written with other fbpd parameters; only max_iter may change "
                "when a run is continued"
            )
        if state.step > self.params.max_iter:
            raise ConfigError(
                f"the run to continue is at iteration {state.step} already, beyond max_iter = {self.params.max_iter}: "
                f"it was continued with a larger max_iter before; resume with -p max_iter={state.step} or more, or "
                "start over with --overwrite"
            )
        self.prepare(ctx, state)

    def prepare(self, ctx: Context, state: FBPDState) -> None:
        """Before the first iteration of a run or of a resumed one: `position` from the state's
        rows, and the buffers the iteration writes in place, so that an iteration allocates no
        weight array (fresh pages cost about as much as sweeping them): the state's W, GW, Wt,
        Wa, GWa become arrays of their own (init's share one zero array, a restored state's may
        be a checkpoint's), the spares for the next x̃ and G̃ are zeros, W2 = [x̃ x] (ℓ1) and x̃'s
        non-zeros get U·K-sized buffers; for "l2" and the mixed norms, the M × K buffer of the
        logged g(x̃), whose other rows stay 0."""
        M = ctx.source.n_features
        self.position = np.zeros(M, np.int32)
        self.position[state.rows] = np.arange(len(state.rows), dtype=np.int32)
        state.W, state.GW, state.Wt, state.Wa, state.GWa = (
            array.copy() for array in (state.W, state.GW, state.Wt, state.Wa, state.GWa)
        )
        self.spare_Wt, self.spare_G = np.zeros_like(state.W), np.zeros_like(state.W)
        self.spare_W2 = np.empty((len(state.W), 2 * state.W.shape[1]))
        self.nonzeros = np.empty(state.W.size, np.int64), np.empty(state.W.size)
        self.full_Wt = None if self.params.penalty == "l1" else np.zeros((M, state.W.shape[1]))

    def used_rows(self, ctx: Context, mu: np.ndarray, sums: LabelSums | None) -> np.ndarray:
        """The features the iteration updates (ascending, int64), for column means `mu` (0: not
        centered). A column with no stored entry in the training rows has a zero adjoint and a
        zero mean, so from W = 0 its rows of W, G = Tᵀy, x̃ and the anchors stay exactly 0.0 for
        every penalty and step (the module docstring, "Used columns"): the rows are the used
        columns, for the mixed norms every column of a block with a used one (a block's prox and
        norm read the whole block), and every column when the features are centered (the
        offsets' μᵀW2 is a BLAS product over all of them, whose order of summation must not
        change). The column counts are the label sums' (`sums`, when init made that pass), else
        they take one pass over the chunks' indices in init, which data_passes does not count (it
        is not an iteration's); the state keeps the rows, so a resumed run reads them from its
        checkpoint."""
        M, p = ctx.source.n_features, self.params
        if mu.any():
            return np.arange(M, dtype=np.int64)
        if sums is not None:
            counts = sums.column_entries
        else:
            counts = ctx.engine.map_reduce(
                _column_counts_task, ctx.source, range(ctx.source.n_chunks), desc="fbpd: used columns"
            )
        used = counts > 0
        if p.penalty in ("l1/l2", "l1/linf"):
            blocks = np.maximum.reduceat(used, np.arange(0, M, p.group_size))
            used = np.repeat(blocks, p.group_size)[:M]
        return np.flatnonzero(used).astype(np.int64)

    @staticmethod
    def check_classes(source: ChunkSource, counts: np.ndarray) -> None:
        """Refuses a class without training rows (one declared by `ingest --classes` or an ARFF
        header's class attribute): no term of
        the hinge bounds its offset b_k from below (every row's term for it is a wrong class's,
        so lowering b_k never raises the loss), the minimizers form an unbounded set, and the
        restarts' re-balancing of ρ, measuring the offset's drift against duals that have
        stopped moving, sends ρ to 1e6-1e11: the iteration stops on its relative change with
        W = 0 and one class predicted for every row (session 24, docs/benchmarks.md)."""
        empty = [source.classes[k] for k in np.flatnonzero(np.asarray(counts)[: source.n_classes] == 0)]
        if empty:
            names = ", ".join(repr(c) for c in empty[:5]) + (f" and {len(empty) - 5} more" if len(empty) > 5 else "")
            raise ConfigError(
                f"fbpd: class(es) {names} have no training rows (declared by ingest --classes or an ARFF "
                "header?), and the multiclass hinge leaves their offsets unbounded, so fbpd's iteration does "
                "not settle; re-ingest with --classes naming only the others, or train with bcd, ppdsparse, "
                "stagewise or multiboost"
            )

    def check_source(self, source: ChunkSource) -> None:
        if source.multilabel:
            raise ConfigError(
                "fbpd solves the multiclass (Crammer–Singer) hinge and the store is multilabel; "
                "train it with stagewise, bcd or ppdsparse"
            )

    def max_steps(self, state: FBPDState) -> int:
        return self.params.max_iter

    def checkpoint_due(self, state: FBPDState, every: int, saved_at: int) -> bool:
        """Every `every`·P iterations, P = ⌈6(U + 1)K / (nnz(X) + nK)⌉, U the used columns
        (`used_rows`): a checkpoint writes the six dense (U + 1) × K pairs of the state (x, Tᵀy,
        x̃, the anchor's x and Tᵀy, the step scales), P times what one iteration reads and writes
        per sample, so saving costs at most about one pass per iteration on average (P = 1 on
        small dense data; 21 on sector, whose state is 0.56 GB). The model does not depend on P (a resumed run replays the iterations since
        the last checkpoint bitwise); past a time limit the driver saves the iteration just
        taken, due or not."""
        return state.step % (every * state.checkpoint_period) == 0

    def finished(self, state: FBPDState) -> bool:
        return state.converged or state.step >= self.params.max_iter

    def converged(self, state: FBPDState) -> bool:
        return state.converged

    def gap_closed(self, fields: dict[str, Any]) -> bool:
        """The duality-gap rule: (P − D)/|P| < gap_tol and ‖(1/n) Σ_ℓ a_ℓ‖₂ < gap_tol (D is a lower
        bound on P's minimum when the offsets' constraint Σ_ℓ a_ℓ = 0 holds, so both must be small)."""
        tol = self.params.gap_tol
        primal = abs(fields["objective"])
        return bool(primal > 0 and fields["gap"] < tol * primal and fields["dual_infeasibility"] < tol)

    def not_converged_reason(self, state: FBPDState) -> str:
        p = self.params
        return (
            f"relative change of x̃ still ≥ tol {p.tol:g} and relative duality gap or dual infeasibility "
            f"≥ gap_tol {p.gap_tol:g} at max_iter={p.max_iter}"
        )

    def step(self, ctx: Context, state: FBPDState) -> dict[str, Any]:
        fields = self._iterate(ctx.engine, ctx.source, ctx.chunk_state, state)
        state.converged = bool(fields["rel_change"] < self.params.tol) or self.gap_closed(fields)
        return fields

    def to_model(self, ctx: Context, state: FBPDState) -> LinearModel:
        p = self.params
        self.column_scale = state.scale  # g's weights per feature (FBPDClassifier.objective reads them)
        stored = _stored(_scattered(state.Wt, state.rows, ctx.source.n_features), state.scale)
        coef = stored.T.copy(order="K") if p.penalty == "l2" else sp.csr_matrix(stored.T)
        return LinearModel(
            coef,
            _uncentered(state.bt, state.mu, stored),
            classes=ctx.source.classes,
            n_features=ctx.source.n_features,
            multilabel=False,
            solver=self.name,
            params=p.model_dump(),
            info={
                "iterations": state.step,
                "converged": state.converged,
                "norm_T": state.norm,
                "lam": state.lam,
                "lam_ref": state.lam_ref,
                "step_ratio": state.rho,
                "preconditioned": state.preconditioned,
                "centered": bool(state.mu.any()),
                "standardized": state.scale is not None,
                "restarts": state.restarts,
                "data_passes": state.data_passes,
            },
        )

    def _name_duals(self, state: FBPDState) -> None:
        """The per-sample fields for the duals at version `step` and the anchors at `anchor`
        (version 0 is the starting point, computed, never written)."""
        names = (DUAL,) if self.params.formulation == "regularized" else (DUAL, XI, ZETA)
        for name in names:
            setattr(state, name, PerSample(name, state.step, written=state.step > 0))
            if self.params.restarts:
                setattr(state, "anchor_" + name, PerSample("anchor_" + name, state.anchor, written=state.anchor > 0))

    # ---- restarts ----
    def _restart(self, state: FBPDState, n: int, n_features: int) -> None:
        """The anchor becomes the current iterate; ρ moves halfway (in log) to ‖Δx‖/‖Δy‖, Δ the
        move since the previous anchor, in the step metric (‖D^−½Δx‖, ‖Σ^−½Δy‖/√σ)."""
        jumps = state.jumps
        moved = scaled_move(state.W, state.Wa, state.D, state.rows, n_features)  # numpy's sum over M × K
        dx = float(np.sqrt(moved + _scaled_square(state.b - state.ba, state.Db)))
        if self.params.formulation == "regularized":
            dy = np.sqrt(jumps[0]) / n
        else:
            dx = np.sqrt(dx**2 + jumps[2])
            dy = np.sqrt(jumps[0] + jumps[1])
        if dx > 0 and dy > 0:
            state.rho = float(np.sqrt(state.rho * dx / dy))
        np.copyto(state.Wa, state.W)
        np.copyto(state.GWa, state.GW)
        state.ba, state.Gba = state.b, state.Gb
        state.anchor = state.step
        state.since_restart = 0
        state.restarts += 1

    def _schedule_restart(self, state: FBPDState, residual: float) -> None:
        """Applegate et al.'s criteria on the fixed-point residual, until adapt_iters."""
        state.since_restart += 1
        if state.since_restart == 1:
            state.first_residual = residual
        elif state.step <= self.params.adapt_iters:
            first = state.first_residual
            state.restart_due = bool(
                residual <= RESTART_SUFFICIENT * first
                or (residual <= RESTART_NECESSARY * first and residual > state.last_residual)
                or state.since_restart >= RESTART_ARTIFICIAL * state.step
            )
        state.last_residual = residual

    # ---- one iteration ----
    def _iterate(self, engine: Engine, source: ChunkSource, chunk_state, state: FBPDState) -> dict[str, Any]:
        """x̃ = prox(x − τG), then the pass over the chunks (duals of F and the next iterate);
        returns the fields to log."""
        p, n = self.params, source.n_rows
        chunks = range(source.n_chunks)
        regularized = p.formulation == "regularized"
        restart, halpern = state.restart_due, {}
        if restart:
            self._restart(state, n, source.n_features)
        j = state.since_restart
        a, c = (j + 1) / (j + 2), 1 / (j + 2)
        if p.restarts:
            halpern = {"anchor": state.anchor, "restart": restart, "a": a, "c": c}
        tau, sigma = self.steps(state.norm, state.rho, state.preconditioned)
        lam = state.lam if regularized else 1.0
        rows, Wt = state.rows, self.spare_Wt
        if p.penalty == "l1":
            W2 = l1_primal_step(state.W, state.GW, state.D, tau, lam, Wt, self.spare_W2)
        else:
            V = state.W - (tau * state.D) * state.GW
            if p.penalty == "l2":  # prox of τ_jk·lam·½w², per coordinate
                Wt[...] = V / (1.0 + (tau * lam) * state.D)
            else:  # D = 1: a scalar step; rows are whole blocks, so the blocks of V are g's
                Wt[...] = penalty_prox(V, tau * lam, p.penalty, p.group_size)
            W2 = np.ascontiguousarray(np.hstack([Wt, state.W]))
        bt = state.b - (tau * state.Db) * state.Gb
        scale = None if state.scale is None else state.scale[rows]
        W2 = _stored(W2, scale)  # the kernels score the stored columns
        b2 = _uncentered(np.concatenate([bt, state.b]), state.mu, W2)
        if regularized:
            r = engine.map_reduce(
                _regularized_task,
                source,
                chunks,
                desc="fbpd: iteration",
                state=chunk_state,
                version=state.step,
                W2=W2,
                b2=b2,
                position=self.position,
                step=n * sigma,
                preconditioned=state.preconditioned,
                **halpern,
            )
            divisor = float(n)
            dual_part = r.moves[0] / (n * n * sigma) - 2 * r.coupling / n
            totals = (0.0, 0.0)
            jumps = (r.jumps[0], 0.0, 0.0)
            xi_sum = 0.0
        else:
            shift = max(0.0, (state.sums[0] - tau * state.sums[1] - n * p.eta) / n)
            r = engine.map_reduce(
                _constrained_task,
                source,
                chunks,
                desc="fbpd: iteration",
                state=chunk_state,
                version=state.step,
                W2=W2,
                b2=b2,
                position=self.position,
                tau=tau,
                sigma=sigma,
                shift=shift,
                **halpern,
            )
            divisor = 1.0
            dual_part = (r.moves[0] + r.moves[1]) / sigma + r.moves[2] / tau - 2 * r.coupling
            totals = (r.totals[2], r.totals[1])
            jumps = (r.jumps[0], r.jumps[1], r.jumps[2])
            xi_sum = r.xi_sum
        hinge, r_dot, correct = r.hinge, r.r_dot, r.correct
        Gbt = r.Gb / divisor
        GW = _stored(_centered_adjoint(r.GW, state.mu[rows], r.Gb), scale)
        GWt = self.spare_G
        positions, values = self.nonzeros
        stats = primal_update(
            Wt,
            state.W,
            state.Wa,
            GW,
            divisor,
            state.GW,
            state.GWa,
            state.Wt,
            state.D,
            a,
            c,
            p.restarts,
            GWt,
            rows,
            positions,
            values,
        )
        moved, changed, size, g_changed, g_size, nnz, g_max = stats
        db, dbt, dgb = state.b - bt, bt - state.bt, Gbt - state.Gb
        residual = float(np.sqrt(max((moved + db @ (db / state.Db)) / tau + dual_part, 0.0)))
        rel_change = _ratio(changed + dbt @ dbt, size + bt @ bt)
        if rel_change == 0.0 and nnz == 0 and not bt.any():  # resting at x = 0: wait for the duals
            rel_change = _ratio(g_changed + dgb @ dgb, g_size + Gbt @ Gbt)
        if p.restarts:
            state.b = a * (2 * bt - state.b) + c * state.ba  # W, GW: updated in place
            state.Gb = a * (2 * Gbt - state.Gb) + c * state.Gba
            state.sums, state.jumps = totals, jumps
        else:
            self.spare_G = state.GW
            state.W, state.b, state.GW, state.Gb, state.sums = Wt, bt, GWt, Gbt, totals
        self.spare_Wt = state.Wt
        state.Wt, state.bt = Wt, bt
        state.step += 1
        state.data_passes += 1
        state.restart_due = False
        if p.restarts:
            self._schedule_restart(state, residual)
        self._name_duals(state)
        M = source.n_features
        if p.penalty == "l1":  # objective_for's total, with numpy's ‖x̃‖₁ summed from the rows
            l1 = pairwise_sum(positions, values, M * Wt.shape[1], int(nnz))
            primal = (hinge / n + state.lam * l1) if regularized else 1.0 * l1
        else:
            primal = objective_for(self.name, p.model_copy(update={"lam": state.lam})).total(
                ChunkSums(hinge, n), _scattered(Wt, rows, M, self.full_Wt), bt
            )  # (7), or g alone for (8)
        G_norm = g_max if p.penalty == "l1" else (0.0 if p.penalty == "l2" else dual_norm(GWt, p.penalty, p.group_size))
        if regularized:
            if p.penalty == "l2":
                dual = r_dot / n - g_size / (2 * state.lam)
            else:
                dual = min(1.0, state.lam / max(G_norm, 1e-300)) * r_dot / n
        else:
            bound = r_dot + xi_sum * p.eta  # Σ rᵀy − c·n·eta with c = −mean(ξ)
            if p.penalty == "l2":
                dual = bound - 0.5 * g_size
            else:
                dual = min(1.0, 1.0 / max(G_norm, 1e-300)) * bound
        return {
            "objective": primal,
            "dual_objective": dual,
            "gap": primal - dual,
            "loss": hinge / n,
            "dual_infeasibility": float(np.sqrt(Gbt @ Gbt)),
            "rel_change": rel_change,
            "residual": residual,
            "step_ratio": state.rho,
            "restarts": state.restarts,
            "train_accuracy": correct / n,
            "nnz": int(nnz),
            "data_passes": state.data_passes,
        }
