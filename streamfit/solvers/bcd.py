"""Block coordinate descent for ℓ1/ℓ2-regularized multiclass squared hinge: Blondel, Seki and
Uehara (2013), "Block coordinate descent algorithms for large-scale sparse multiclass
classification", Algorithms 1–3, with the paper's other objectives and a FISTA comparator.

Objective (eq. 2 and §4.7, §5.3): W ∈ R^{d×m}, scores s_i = Wᵀx_i,

    F(W) = (1/n) Σ_i ℓ_i(Wᵀx_i) + P(W)

with ℓ one of streamfit.objectives.losses ("squared_hinge": eq. 2, or the label-ranking loss of §4.7 on
multilabel stores; "multitask_squared_hinge": eq. 11; "logistic": eq. 12) and P one of
streamfit.objectives.penalties ("l1/l2" = λ Σ_j ‖W_{j:}‖₂ as in eq. 2, "l1", "l2", "elasticnet",
"sparse_group"). There is no intercept, as in the paper. Blocks are the rows W_{j:} (one per
feature); only features with a non-zero value in the training data are blocks (the others
stay exactly zero).

method="bcd", mode "memory" — Algorithm 1 exactly, sequentially, numba-compiled
(bcd_kernels.bcd_epoch) on X in CSC and the scores S = XW kept up to date lazily (§4.3):
- variant="ls": BCD(LS), cyclic blocks, L_j = max(‖h_j‖∞, ε) from the generalized second
  derivatives (6), backtracking α ∈ {1, ω, ω², …} on the sufficient decrease condition (7)
  (σ = `sigma` = 0.01, ω = `omega` = 0.5);
- variant="cst": BCD(CST), d blocks drawn uniformly with replacement per outer iteration
  (Richtárik and Takáč), constant L_j = K_j = (c/n) Σ_i x_ij² (c from losses.curvature;
  4(m − 1) for eq. 2, §4.4.2), α = 1.
- Stopping (eqs. 9–10): v^t the violation of the block visited at step t; stop after outer
  iteration k when Σ_{t∈T^k} v^t / Σ_{t∈T^1} v^t < tol (cyclic) or the same ratio of maxima
  (random), or after max_iter outer iterations. The reference Σ_{t∈T^1} v^t is taken at the
  first outer iteration, from W = 0, where it scales with the gradient at 0 (the loss there is
  m − 1 per sample for eq. 2), not with F*: with a small λ, F(0)/F* is large (2322 on sector at
  λ = 1e-5, 29 at λ = 1e-3) and a ratio of 1e-3 is reached far from the optimum (0.73 above F*
  on sector, 0.062 on 20 Newsgroups at λ = 1e-5; ≤ 8.5e-4 at λ = 1e-3). So with
  stopping="auto" (memory mode) the run stops only when (10) holds and the geometric estimate of
  the decrease still to come is < tol·F (`_tail_estimate`: decreases d1, d2 of F over the last
  two windows of 10 outer iterations, d1·q/(1 − q) with q = d1/d2; F is computed every outer
  iteration anyway). Replayed on the bench traces at tol 1e-3 it stops 3.8e-4 / 8.5e-4 above F*
  at λ = 1e-3 (sector / 20 Newsgroups, the same iterations as (10) alone) and 4.9e-4 / 1.8e-3
  at λ = 1e-5 (instead of 0.73 / 0.062). It is an estimate, not a bound. stopping="gap"
  (l1/l2, l1) confirms (10) with a certified relative duality gap (F − D)/F < tol instead
  (`_gap`: the dual point c·∇ℓ(S) scaled into the dual-norm ball, losses.dual_loss), so
  (F − F*)/F* ≤ tol/(1 − tol); one product Xᵀ∇ℓ(S) per check (a third of an outer iteration).
  That certificate is loose wherever a few rows of G violate ‖G_j‖ ≤ λ by a few %: on
  20 Newsgroups at λ = 1e-3 it is still 1.9e-2 when F is within 1e-8 of F*; on dna at λ = 1e-2
  it reaches 1e-3 after 955 outer iterations, the objective after 265. stopping="violation" is
  the paper's rule alone (the chunks mode always uses it).
- shrinking=True (§5.2.4, ℓ1/ℓ2 only): Yuan et al.'s rule, a zero block with
  ‖G_{j:}‖ < λ − M/n (M: the largest violation of the previous outer iteration) is skipped
  for the rest of the run; when the stopping rule holds on the remaining blocks, all blocks
  are reactivated and the run continues until it holds on all of them.

method="bcd", mode "chunks" — out of core on the Engine: rows in chunks, each chunk's slice of
S stored beside it (ChunkState "scores"). The active blocks of an outer iteration (cyclic order
for "ls", a seeded permutation for "cst") are cut into groups B of `group_size` features, and
each group is one block of Tseng and Yun's coordinate gradient descent (the blocks of the group
move together, groups in Gauss–Seidel order): direction δ_j = prox_{P/L_j}(W_j − G_j/L_j) − W_j
for j ∈ B, then W_B ← W_B + α δ_B with α from the sufficient decrease condition (7) summed over
the group. One map_reduce pass per group (bcd_kernels.chunk_pass): every chunk
  1. applies the step accepted for the group before last (S ← S + X_{:C} Δ_C, writing the next
     version of its scores),
  2. evaluates the last group's direction at the candidate steps α ∈ {1/ω, 1, ω, ω², 0}:
     Σ_i ℓ_i(S_i + α (X_{:B} δ_B)_i) − ℓ_i(S_i), the only rows that change being those with a
     non-zero in B (the line search of (7) in the same pass),
  3. returns, at every candidate, the partial gradients of the next group B' and their
     curvatures Σ_i ω_i x_ij² h_ir (ω_i = #{j ∈ B' : x_ij ≠ 0}, h the generalized second
     derivatives (6)).
The driver accepts the largest candidate passing (7) (α = 0 always does, so the objective never
increases) and computes B''s directions from the gradient at that point, with L_j = θ ·
max(‖Σ_i ω_i x_ij² h_i‖∞/n, ε): ω_i scales the single-block curvature as in Richtárik and
Takáč's expected separable overapproximation for simultaneous updates (Cauchy–Schwarz:
‖Σ_{j∈B} x_ij δ_j‖² ≤ ω_i Σ_j x_ij² ‖δ_j‖²), and θ ∈ [1e-6, 1e6] adapts to the accepted step
(θ ← θ/α, ×4 when only α = 0 passes), so α = 1 is the usual outcome. variant "cst" takes the
safe parallel step of Richtárik and Takáč instead: L_j = (c/n) Σ_i ω_i x_ij² (c from
losses.curvature), α = 1, no line search. The stopping rule is eq. (10) over the groups'
violations; shrinking (ls and cst) drops zero blocks from later groups by the rule of the
memory mode, so at λ = 1e-3 most passes disappear. An outer iteration costs (#groups) passes;
the log terms ride on the first pass of the next one. Memory per task: O(chunk nnz +
chunk_rows·m + 5·group_size·m) and a feature-position table (8 B × n_features); the driver
holds W (d × m).
mode "auto" picks "memory" when X (CSC, float64) and S fit in `memory_budget_mb`.

method="fista" — FISTA (Beck and Teboulle 2009) on the same F, the paper's full-gradient
comparator: each iteration is one map_reduce that evaluates the loss at the candidate
W_k = prox_{P/L}(Y_k − ∇L(Y_k)/L) and the loss and gradient at the next extrapolated point
Y_{k+1} = W_k + ((t_k − 1)/t_{k+1})(W_k − W_{k−1}); variant "ls" backtracks L ← 2L until
L(W_k) ≤ L(Y_k) + ⟨∇L(Y_k), W_k − Y_k⟩ + (L/2)‖W_k − Y_k‖² (a rejected candidate costs one more
pass), variant "cst" uses the constant 1/K with K = (c/n) ‖X‖²_F ≥ the Lipschitz constant of
∇L. It stops when the gradient mapping ‖L (Y_k − W_k)‖_F falls below tol times its first value.

Checkpoints (every `checkpoint_every` outer iterations): W, the version of the chunked scores
(memory mode writes S into the chunk state at checkpoints), the outer iteration counter, the
first iteration's violation sum and maximum, the shrinking state; in chunks mode also the
accepted step not yet applied to S, the pending direction and its bound, θ, the position in the
current outer iteration and its block order; for FISTA W_{k−1}, Y_k, t_k and L. Random block orders are drawn from numpy's generator seeded with
(random_state, outer iteration), so the counter is the RNG state; `resume=True` continues to
the same model as an uninterrupted run.

Logged per outer iteration: objective F(W), train_accuracy (multiclass; P@1 for multilabel),
nnz_rows and nnz_rows_pct (non-zero rows of W), violation ratio (eq. 10), line search steps,
active blocks (shrinking), data passes.
"""

from __future__ import annotations

import logging
import math
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import ConfigError
from streamfit.model import LinearModel
from streamfit.objectives.losses import LOGISTIC, LOSSES, curvature, dual_loss, label_lists, rows_loss
from streamfit.objectives.penalties import PENALTIES, prox, value
from streamfit.runlog import MetricsLog
from streamfit.solvers.base import Solver, SolverParams, register_solver
from streamfit.solvers.bcd_kernels import bcd_epoch, chunk_pass, group_update
from streamfit.store import ChunkSource

SCORES = "scores"  # ChunkState name of the per-sample scores S = XW
EPS = 1e-12  # ε of L_j = max(‖h_j‖∞, ε)
TAIL_WINDOW = 10  # stopping="auto": outer iterations per window of the tail estimate
THETA = 1e-6  # chunks mode, BCD(LS): the scale θ of L_j stays in [THETA, 1/THETA]

logger = logging.getLogger(__name__)


class BCDParams(SolverParams):
    """Options of the bcd solver (see the module docstring for the math)."""

    loss: Literal["squared_hinge", "multitask_squared_hinge", "logistic"] = Field(
        "squared_hinge", description="eq. 2 (label ranking §4.7 on multilabel stores), eq. 11, or eq. 12")
    penalty: Literal["l1/l2", "l1", "l2", "elasticnet", "sparse_group"] = Field(
        "l1/l2", description="P(W); l2 is (λ/2)‖W‖², elasticnet/sparse_group mix with l1_ratio")
    l1_ratio: float = Field(0.5, ge=0, le=1, description="ρ of elasticnet and sparse_group")
    method: Literal["bcd", "fista"] = Field("bcd", description="block coordinate descent or FISTA")
    variant: Literal["ls", "cst"] = Field(
        "ls", description="ls: cyclic blocks + line search; cst: random blocks, constant step")
    mode: Literal["auto", "memory", "chunks"] = Field(
        "auto", description="bcd: sequential in memory, or out of core over chunks")
    memory_budget_mb: float = Field(2048, gt=0, description="auto mode: largest in-memory X + S")
    group_size: int = Field(1024, ge=1, description="chunks mode: features updated at once per pass")
    shrinking: bool = Field(False, description="skip zero blocks likely to stay zero (§5.2.4, l1/l2)")
    sigma: float = Field(0.01, gt=0, lt=1, description="σ of the sufficient decrease condition (7)")
    omega: float = Field(0.5, gt=0, lt=1, description="ω, backtracking factor of the line search")
    max_ls: int = Field(30, ge=1, description="line search trials per block")
    checkpoint_every: int = Field(1, ge=1, description="outer iterations between checkpoints")
    lam: float = Field(1e-3, gt=0, description="λ of (1/n)·loss + λ·penalty")
    tol: float = Field(1e-3, gt=0, description="τ of the stopping criterion (10) (and of the duality gap)")
    stopping: Literal["auto", "gap", "violation"] = Field(
        "auto", description="violation: eq. (10) < tol; auto: also the estimated remaining decrease of F < "
                            "tol·F; gap: also the certified relative duality gap < tol (l1/l2, l1); auto and "
                            "gap in memory mode")
    max_iter: int = Field(200, ge=1, description="K, the cap on outer iterations")

    @model_validator(mode="after")
    def _check(self):
        if self.shrinking and self.penalty != "l1/l2":
            raise ValueError("shrinking (§5.2.4) is defined for the l1/l2 penalty only")
        return self


# -- helpers -----------------------------------------------------------------------------------


def _tail_estimate(f_hist: list) -> float:
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
    return d1 * q / (1 - q) / abs(f_hist[-1]) if f_hist[-1] != 0 else 0.0


def _n_correct(S: np.ndarray, labels) -> int:
    """Top-1 hits: argmax = label (multiclass) or argmax ∈ label set (multilabel, P@1)."""
    top = np.argmax(S, axis=1)
    if sp.issparse(labels):
        return int(np.asarray(sp.csr_matrix(labels)[np.arange(S.shape[0]), top]).ravel().astype(bool).sum())
    return int((top == labels).sum())


def _chunk_scores(state, version: int, chunk_id: int, n_rows: int, m: int) -> np.ndarray:
    return np.zeros((n_rows, m)) if version == 0 else state.read(SCORES, version, chunk_id)


def _colstats_task(source, chunk_id):
    """(non-zeros per column, Σ_i x_ij² per column) of one chunk."""
    X = source.read_chunk(chunk_id).X
    nnz = np.bincount(X.indices, minlength=source.n_features).astype(np.int64)
    sq = np.bincount(X.indices, weights=np.asarray(X.data, dtype=np.float64) ** 2, minlength=source.n_features)
    return nnz, sq


def _positions(cols, d: int) -> np.ndarray:
    """pos[j] = index of feature j in `cols`, −1 elsewhere (an empty group for cols=None)."""
    pos = np.full(d, -1, dtype=np.int64)
    if cols is not None:
        pos[cols] = np.arange(len(cols))
    return pos


def _pass_task(source, chunk_id, *, state, version, commit, direction, alphas, cols, loss, curv_c, full):
    """Chunks mode, one pass over one chunk (bcd_kernels.chunk_pass): apply the committed step
    (C, Δ_C) to the chunk's scores and write them as the next version; return the log terms
    (full), the loss and hit changes of the candidate steps α_k Δ_B and, at each candidate,
    the partial gradients and curvatures of the group `cols` (None: no group)."""
    chunk = source.read_chunk(chunk_id)
    X = chunk.X
    d, m = source.n_features, source.n_classes
    S = _chunk_scores(state, version, chunk_id, X.shape[0], m)
    if commit is not None:
        S = S.copy()  # the stored version stays as it was
    lab_ptr, lab_ind = label_lists(chunk.labels, X.shape[0])
    none = np.zeros((0, m))
    out = chunk_pass(X.indptr, X.indices, X.data, S, lab_ptr, lab_ind, loss, _positions(commit and commit[0], d),
                     commit[1] if commit else none, _positions(direction and direction[0], d),
                     direction[1] if direction else none, alphas, _positions(cols, d),
                     0 if cols is None else len(cols), curv_c, full)
    if commit is not None:
        state.write(SCORES, version + 1, chunk_id, S)
    return out if cols is not None else out[:4] + (None, None)


def _fista_task(source, chunk_id, *, W, Y, loss):
    """(Σ ℓ_i at W, #correct at W, Σ ℓ_i at Y, Σ_i x_i ∂ℓ_i(Yᵀx_i)ᵀ) for one chunk."""
    chunk = source.read_chunk(chunk_id)
    X = chunk.X.astype(np.float64)
    lab_ptr, lab_ind = label_lists(chunk.labels, X.shape[0])
    rows = np.arange(X.shape[0], dtype=np.int64)
    SW = np.ascontiguousarray(X @ W)
    SY = np.ascontiguousarray(X @ Y)
    loss_w = rows_loss(loss, SW, lab_ptr, lab_ind, rows, 0)[0]
    loss_y, D, _ = rows_loss(loss, SY, lab_ptr, lab_ind, rows, 1)
    return loss_w, _n_correct(SW, chunk.labels), loss_y, np.asarray(X.T @ D)


# -- the solver --------------------------------------------------------------------------------


@register_solver
class BCDSolver(Solver):
    """Algorithms 1–3 of Blondel et al. (2013), in memory or out of core, and FISTA.

    `stop_after`: return the partial model after that many outer iterations in this call (the
    last one checkpointed); a later fit with resume=True continues. For time-boxed jobs and for
    testing resume; not a model parameter."""

    name = "bcd"
    Params = BCDParams

    def __init__(self, params: BCDParams, *, stop_after: int | None = None):
        super().__init__(params)
        self.stop_after = stop_after

    # ---- shared ----
    def _codes(self, source: ChunkSource) -> tuple[int, int, float, float]:
        p = self.params
        loss = LOSSES[p.loss]
        if loss == LOGISTIC and source.multilabel:
            raise ConfigError("loss 'logistic' (eq. 12) is multiclass only; use squared_hinge on multilabel stores")
        if source.n_classes < 2:
            raise ConfigError("the bcd solver needs at least two classes")
        return loss, PENALTIES[p.penalty], curvature(loss, source.n_classes), p.l1_ratio

    def _mode(self, source: ChunkSource) -> str:
        p = self.params
        if p.method == "fista" or p.mode != "auto":
            return p.mode
        nnz = getattr(getattr(source, "manifest", None), "nnz", None)
        if nnz is None:
            nnz = source.X.nnz if hasattr(source, "X") else source.n_rows * source.n_features
        need = (12 * nnz + 8 * (source.n_features + 1) + 8 * source.n_rows * source.n_classes) / 2**20
        return "memory" if need <= p.memory_budget_mb else "chunks"

    def _log(self, log, k, W, objective, correct, n, multilabel, model, **fields):
        """One metrics record; `model` (a function returning the current model) is what
        `train --valid` evaluates."""
        nz = int(np.count_nonzero(np.any(W != 0, axis=1)))
        acc = {"train_p_at_1" if multilabel else "train_accuracy": correct / n}
        log.log(k, model=model, objective=objective, **acc, nnz_rows=nz, nnz_rows_pct=100.0 * nz / W.shape[0],
                **fields)

    def _warn_not_converged(self, k: int, ratio: float, gap: float | None = None, tail: float | None = None) -> None:
        """The run stopped at max_iter before its stopping rule held: say which test failed."""
        tol = self.params.tol
        if not ratio < tol:
            why = f"violation ratio {ratio:.3g} > tol {tol:g}"
        elif gap is not None and not gap < tol:
            why = f"relative duality gap {gap:.3g} > tol {tol:g} (violation ratio {ratio:.3g})"
        elif tail is not None and not tail < tol:
            why = (f"estimated remaining relative decrease of the objective {tail:.3g} > tol {tol:g}" if math.isfinite(tail)
                   else f"remaining decrease of the objective not estimable yet (it needs {2 * TAIL_WINDOW + 1} "
                        "iterations with a shrinking decrease)") + f" (violation ratio {ratio:.3g})"
        else:
            why = f"violation ratio {ratio:.3g} < tol {tol:g} on the active blocks only (shrinking), not yet on all"
        logger.warning("bcd: not converged after max_iter=%d iterations: %s; raise -p max_iter or loosen -p tol", k, why)

    def _model(self, source: ChunkSource, W: np.ndarray, info: dict) -> LinearModel:
        nz_rows = np.any(W != 0, axis=1)
        coef = sp.csr_matrix(W.T) if nz_rows.mean() < 0.5 else W.T.copy()
        return LinearModel(coef, None, classes=source.classes, n_features=source.n_features,
                           multilabel=source.multilabel, solver=self.name, params=self.params.model_dump(),
                           info={**info, "nnz_rows": int(nz_rows.sum())})

    def fit(self, source: ChunkSource, *, engine: Engine, checkpointer: Checkpointer, log: MetricsLog,
            resume: bool = False) -> LinearModel:
        ckpt = checkpointer.latest(source.n_chunks) if resume else None
        if ckpt is None:
            checkpointer.state.keep_only(set())  # a fresh run: drop state left in the run directory
        else:
            log.truncate_after(ckpt.step)
        if self.params.method == "fista":
            return self._fit_fista(source, engine, checkpointer, log, ckpt)
        if self._mode(source) != "memory" and self.params.stopping == "gap":
            raise ConfigError("stopping='gap' is implemented in memory mode; chunks mode stops by eq. (10)")
        if self._mode(source) == "memory":
            return self._fit_memory(source, checkpointer, log, ckpt)
        return self._fit_chunks(source, engine, checkpointer, log, ckpt)

    def _rule(self) -> str:
        """The memory mode's confirmation of eq. (10): "gap" (penalties whose conjugate is an
        indicator: l1/l2, l1), "auto" (the tail estimate) or "violation" (none)."""
        p = self.params
        if p.stopping == "gap" and p.penalty not in ("l1/l2", "l1"):
            raise ConfigError("stopping='gap' needs penalty 'l1/l2' or 'l1'")
        return p.stopping

    def _gap(self, Xc, S, lab_ptr, lab_ind, loss, pen, rho, W) -> tuple[float, float]:
        """(F(W), relative duality gap (F − D)/F) at the current W (S = XW): the dual point
        c·∇ℓ(S) of losses.dual_loss with c ≤ λ / ‖G(W)‖_* (dual norm: max_j ‖G_j‖₂ for l1/l2,
        max |G_jr| for l1), G(W) = Xᵀ∇ℓ(S)/n the full gradient (one product with X, the cost of
        about a quarter of an outer iteration). F − F* ≤ F − D, so the gap certifies the
        objective's distance to the optimum."""
        p = self.params
        n = S.shape[0]
        lsum, D, _ = rows_loss(loss, S, lab_ptr, lab_ind, np.arange(n, dtype=np.int64), 1)
        G = np.asarray(Xc.T @ D) / n
        dn = float(np.sqrt((G * G).sum(axis=1)).max() if p.penalty == "l1/l2" else np.abs(G).max()) if G.size else 0.0
        c_max = p.lam / dn if dn > 0 else math.inf
        f = lsum / n + value(pen, W, p.lam, rho)
        dual = dual_loss(loss, S, lab_ptr, lab_ind, c_max) / n
        return f, (f - dual) / f if f > 0 else 0.0

    def _stop_ratio(self, viol_sum: float, viol_max: float, first: tuple[float, float]) -> float:
        """Eq. (10): ℓ1 ratio for cyclic blocks, ℓ∞ ratio for random ones (0 if W=0 is optimal)."""
        num, den = (viol_sum, first[0]) if self.params.variant == "ls" else (viol_max, first[1])
        return num / den if den > 0 else 0.0

    # ---- mode "memory": Algorithm 1, sequential ----
    def _fit_memory(self, source, checkpointer, log, ckpt) -> LinearModel:
        p = self.params
        loss, pen, c, rho = self._codes(source)
        n, d, m = source.n_rows, source.n_features, source.n_classes
        X, labels = source.to_scipy()
        Xc = sp.csc_matrix(X, dtype=np.float64)
        Xc.sort_indices()
        lab_ptr, lab_ind = label_lists(labels, n)
        col_nnz = np.diff(Xc.indptr)
        blocks = np.flatnonzero(col_nnz).astype(np.int64)
        K = c / n * np.asarray(Xc.multiply(Xc).sum(axis=0)).ravel()
        if ckpt is None:
            W, S = np.zeros((d, m)), np.zeros((n, m))
            active = np.ones(d, dtype=np.bool_)
            k, first, max_viol, ls_steps, f_hist, converged = 0, None, math.inf, 0, [], False
        else:
            meta = ckpt.meta
            W, active = ckpt.arrays["W"].copy(), ckpt.arrays["active"].copy()
            S = np.vstack([checkpointer.state.read(SCORES, meta["scores_version"], i) for i in range(source.n_chunks)])
            k, first, max_viol, ls_steps = meta["k"], meta["first"], meta["max_viol"], meta["ls_steps"]
            f_hist, converged = list(meta.get("f_hist", [])), bool(meta.get("converged", False))
        done_here = 0
        rule = self._rule()
        while k < p.max_iter:
            order = blocks if p.variant == "ls" else \
                blocks[np.random.default_rng([p.random_state, k]).integers(0, len(blocks), len(blocks))]
            thr = p.lam - max_viol / n if p.shrinking and math.isfinite(max_viol) else -math.inf
            vsum, vmax, extra = bcd_epoch(order, Xc.indptr.astype(np.int64), Xc.indices.astype(np.int64), Xc.data,
                                          S, W, lab_ptr, lab_ind, loss, pen, p.lam, rho, p.variant == "ls", K,
                                          p.sigma, p.omega, p.max_ls, EPS, active, thr)
            k += 1
            ls_steps += extra
            first = first or (vsum, vmax)
            ratio = self._stop_ratio(vsum, vmax, first)
            max_viol = vmax
            f = rows_loss(loss, S, lab_ptr, lab_ind, np.arange(n, dtype=np.int64), 0)[0] / n + value(pen, W, p.lam, rho)
            f_hist = (f_hist + [f])[-(2 * TAIL_WINDOW + 1):]
            converged, gap, tail = ratio < p.tol, None, None
            if converged and rule == "gap":  # (10) holds: confirm with the duality gap (a global certificate)
                f, gap = self._gap(Xc, S, lab_ptr, lab_ind, loss, pen, rho, W)
                converged = gap < p.tol
            elif converged and rule == "auto":  # (10) holds: confirm with the estimated remaining decrease
                tail = _tail_estimate(f_hist)
                converged = tail < p.tol
            n_active = int(active[blocks].sum())
            # shrinking: the rule holds on the active blocks (or the gap, global, does not): all blocks again
            if n_active < len(blocks) and ratio < p.tol and converged != (rule == "gap"):
                active[:] = True
                converged, max_viol = False, math.inf
            extra = {k: v for k, v in (("duality_gap", gap), ("tail_estimate", tail))
                     if v is not None and math.isfinite(v)}
            info = {"outer_iterations": k, "mode": "memory", "converged": bool(converged)}
            self._log(log, k, W, f, _n_correct(S, labels), n, source.multilabel, lambda: self._model(source, W, info),
                      violation_ratio=ratio, ls_steps=ls_steps, active_blocks=n_active, mode="memory", **extra)
            stop = converged or k >= p.max_iter
            if not converged and k >= p.max_iter:
                self._warn_not_converged(k, ratio, gap, tail)
            done_here += 1
            pause = self.stop_after is not None and done_here >= self.stop_after
            if stop or pause or k % p.checkpoint_every == 0:
                for i in range(source.n_chunks):
                    lo, hi = source.chunk_bounds(i)
                    checkpointer.state.write(SCORES, k, i, S[lo:hi].copy())
                checkpointer.save(k, {"k": k, "first": first, "max_viol": max_viol, "ls_steps": ls_steps,
                                      "scores_version": k, "converged": bool(converged), "f_hist": f_hist},
                                  {"W": W.copy(), "active": active.copy()}, {SCORES: k})
            if stop or pause:
                break
        return self._model(source, W, {"outer_iterations": k, "mode": "memory", "converged": bool(converged)})

    # ---- mode "chunks": out of core, one pass per feature group ----
    def _order(self, blocks: np.ndarray, active: np.ndarray, k: int) -> np.ndarray:
        """Active blocks of outer iteration k: cyclic (ls) or a seeded permutation (cst)."""
        live = blocks[active[blocks]]
        return live if self.params.variant == "ls" else np.random.default_rng([self.params.random_state, k]).permutation(live)

    def _fit_chunks(self, source, engine, checkpointer, log, ckpt) -> LinearModel:
        p = self.params
        loss, pen, c, rho = self._codes(source)
        n, d, m = source.n_rows, source.n_features, source.n_classes
        ls = p.variant == "ls"
        trials = np.array([1.0 / p.omega, 1.0, p.omega, p.omega ** 2, 0.0]) if ls else np.ones(1)
        chunks = range(source.n_chunks)
        state = checkpointer.state
        if ckpt is None:
            col_nnz, _ = engine.map_reduce(_colstats_task, source, chunks, desc="bcd: column stats")
            blocks = np.flatnonzero(col_nnz).astype(np.int64)
            W, active = np.zeros((d, m)), np.ones(d, dtype=np.bool_)
            k, gi, version, passes, ls_steps = 0, 0, 0, 1, 0
            first, sums, max_viol, bound, theta = None, [0.0, 0.0], math.inf, 0.0, 1.0
            order, commit, direction, converged = self._order(blocks, active, 0), None, None, False
        else:
            meta, arr = ckpt.meta, ckpt.arrays
            W, blocks, active, order = arr["W"].copy(), arr["blocks"], arr["active"].copy(), arr["order"]
            k, gi, version, passes, ls_steps = meta["k"], meta["gi"], meta["scores_version"], meta["data_passes"], \
                meta["ls_steps"]
            first, sums, max_viol, bound, theta = meta["first"], meta["sums"], meta["max_viol"], meta["bound"], \
                meta["theta"]
            commit = (arr["commit_cols"], arr["commit_delta"]) if meta["has_commit"] else None
            direction = (arr["dir_cols"], arr["dir_delta"]) if meta["has_direction"] else None
            converged = bool(meta.get("converged", False))
        kept = [version]  # state versions referenced by the checkpoints we keep
        done_here = 0
        while True:
            closing, stop, ratio, k_closed = gi == 0 and k > 0, False, math.nan, k
            if closing:  # outer iteration k is complete but for its last group's line search
                ratio = self._stop_ratio(sums[0], sums[1], first)
                max_viol, sums = sums[1], [0.0, 0.0]
                converged = ratio < p.tol
                if converged and not active[blocks].all():  # shrinking: check again on all blocks
                    active[:] = True
                    converged, max_viol = False, math.inf
                stop = converged or k >= p.max_iter
                if not converged and k >= p.max_iter:
                    self._warn_not_converged(k, ratio)
                order = self._order(blocks, active, k)
            B = None if stop else np.sort(order[gi * p.group_size:(gi + 1) * p.group_size])
            alphas = trials if direction is not None else np.zeros(1)
            total, correct, dloss, dcorrect, G, curv = engine.map_reduce(
                _pass_task, source, chunks, desc="bcd: group", state=state, version=version, commit=commit,
                direction=direction, alphas=alphas, cols=B, loss=loss, curv_c=0.0 if ls else c, full=closing)
            passes += 1
            if commit is not None:
                version += 1
                state.keep_only({(SCORES, v) for v in kept + [version]})
            # line search on the last group's direction (sufficient decrease (7) summed over the group)
            a, commit = 0, None
            if direction is not None:
                cols, delta = direction
                p_old = value(pen, W[cols], p.lam, rho)
                while ls and alphas[a] > 0 and dloss[a] / n + value(pen, W[cols] + alphas[a] * delta, p.lam, rho) \
                        - p_old > p.sigma * alphas[a] * bound:
                    a += 1
                ls_steps += a
                if alphas[a] > 0:
                    commit = (cols, alphas[a] * delta)
                    W[cols] += commit[1]
                if ls:  # the next direction's scale: θ ← θ/α (4θ when no trial passed), within [THETA, 1/THETA]
                    theta = min(max(theta / alphas[a] if alphas[a] > 0 else 4.0 * theta, THETA), 1.0 / THETA)
            if B is not None:  # the next group's direction from its gradient at the accepted point
                G_B, L = G[a] / n, np.maximum(theta * curv[a].max(axis=1) / n, EPS)
                thr = p.lam - max_viol / n if p.shrinking and math.isfinite(max_viol) else -math.inf
                keep = ~((np.linalg.norm(G_B, axis=1) < thr) & ~np.any(W[B] != 0, axis=1))
                active[B[~keep]] = False
                B, G_B, L = B[keep], G_B[keep], L[keep]
                delta, viol = group_update(W[B], G_B, L, pen, p.lam, rho)
                sums = [sums[0] + float(viol.sum()), max(sums[1], float(viol.max(initial=0.0)))]
                bound = float((G_B * delta).sum()) + value(pen, W[B] + delta, p.lam, rho) - value(pen, W[B], p.lam, rho)
                moved = np.any(delta != 0, axis=1)
                direction = (B[moved], delta[moved]) if moved.any() else None
                gi += 1
                if gi * p.group_size >= len(order):
                    gi, k = 0, k + 1
                    first = first or list(sums)
            if not closing:
                continue
            info = {"outer_iterations": k, "mode": "chunks", "data_passes": passes, "converged": bool(converged)}
            self._log(log, k_closed, W, (total + dloss[a]) / n + value(pen, W, p.lam, rho), correct + dcorrect[a], n,
                      source.multilabel, lambda: self._model(source, W, info), violation_ratio=ratio,
                      data_passes=passes, ls_steps=ls_steps, active_blocks=int(active[blocks].sum()), mode="chunks")
            done_here += 1
            pause = self.stop_after is not None and done_here >= self.stop_after
            if stop or pause or k_closed % p.checkpoint_every == 0:
                none = np.zeros(0, dtype=np.int64), np.zeros((0, m))
                checkpointer.save(k_closed, {"k": k, "gi": gi, "scores_version": version, "data_passes": passes,
                                      "ls_steps": ls_steps, "first": first, "sums": sums, "max_viol": max_viol,
                                      "bound": bound, "theta": theta, "has_commit": commit is not None,
                                      "has_direction": direction is not None, "converged": bool(converged)},
                                  {"W": W.copy(), "blocks": blocks, "active": active.copy(), "order": order,
                                   "commit_cols": (commit or none)[0], "commit_delta": (commit or none)[1],
                                   "dir_cols": (direction or none)[0], "dir_delta": (direction or none)[1]},
                                  {SCORES: version})
                kept = (kept + [version])[-checkpointer.keep:]
            state.keep_only({(SCORES, v) for v in kept + [version]})
            if stop or pause:
                break
        return self._model(source, W, {"outer_iterations": k, "mode": "chunks", "data_passes": passes,
                                       "converged": bool(converged)})

    # ---- FISTA ----
    def _fit_fista(self, source, engine, checkpointer, log, ckpt) -> LinearModel:
        p = self.params
        loss, pen, c, rho = self._codes(source)
        n, d, m = source.n_rows, source.n_features, source.n_classes
        chunks = range(source.n_chunks)
        if ckpt is None:
            _, sq = engine.map_reduce(_colstats_task, source, chunks, desc="fista: column stats")
            K = c / n * float(sq.sum())
            W_prev, Y = np.zeros((d, m)), np.zeros((d, m))
            k, t, L, first, converged = 0, 1.0, (K if p.variant == "cst" else 1e-3 * K), None, False
        else:
            meta = ckpt.meta
            W_prev, Y = ckpt.arrays["W"].copy(), ckpt.arrays["Y"].copy()
            k, t, L, first = meta["k"], meta["t"], meta["L"], meta["first"]
            converged = bool(meta.get("converged", False))
        _, _, loss_y, G = engine.map_reduce(_fista_task, source, chunks, desc="fista", W=Y, Y=Y, loss=loss)
        done_here = 0
        while k < p.max_iter:
            G_n = G / n
            while True:
                W = prox(pen, Y - G_n / L, 1.0 / L, p.lam, rho)
                D = W - Y
                t_next = (1.0 + math.sqrt(1.0 + 4.0 * t * t)) / 2.0
                Y_next = W + ((t - 1.0) / t_next) * (W - W_prev)
                loss_w, correct, loss_yn, G_next = engine.map_reduce(_fista_task, source, chunks, desc="fista",
                                                                     W=W, Y=Y_next, loss=loss)
                bound = loss_y / n + float((G_n * D).sum()) + 0.5 * L * float((D * D).sum())
                if p.variant == "cst" or loss_w / n <= bound * (1 + 1e-12):
                    break
                L *= 2.0
            mapping = L * math.sqrt(float((D * D).sum()))
            first = first or mapping
            k += 1
            W_prev, Y, t, loss_y, G = W, Y_next, t_next, loss_yn, G_next
            ratio = mapping / first if first > 0 else 0.0
            converged = ratio < p.tol
            info = {"outer_iterations": k, "mode": "fista", "converged": converged}
            self._log(log, k, W, loss_w / n + value(pen, W, p.lam, rho), correct, n, source.multilabel,
                      lambda: self._model(source, W, info), violation_ratio=ratio, lipschitz=L, mode="fista")
            stop = converged or k >= p.max_iter
            if not converged and k >= p.max_iter:
                self._warn_not_converged(k, ratio)
            done_here += 1
            pause = self.stop_after is not None and done_here >= self.stop_after
            if stop or pause or k % p.checkpoint_every == 0:
                checkpointer.save(k, {"k": k, "t": t, "L": L, "first": first, "converged": converged},
                                  {"W": W_prev, "Y": Y}, {})
            if stop or pause:
                break
        return self._model(source, W_prev, {"outer_iterations": k, "mode": "fista", "converged": converged})
