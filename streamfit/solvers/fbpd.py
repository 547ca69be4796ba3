"""Proximal primal-dual solver for the exact multiclass hinge with sparse regularizers:
Algorithms 1 and 2 of Chierchia, Pustelnik, Pesquet and Pesquet-Popescu (2015), "A proximal
approach for sparse multiclass SVM".

Model (1): scores s_ℓ = Wᵀu_ℓ + b (W ∈ ℝ^{M×K} feature-major, offsets b unpenalized). With
T_ℓ, r_ℓ and the Crammer–Singer hinge h_ℓ(T_ℓx) = max(0, 1 + max_{k≠z_ℓ} s_ℓk − s_ℓz_ℓ) of (6)
(see fbpd_kernels), and n = L training rows, the two problems are, with the project's
sample-averaged convention:

- formulation="regularized", problem (7):  minimize  lam · g(W) + (1/n) Σ_ℓ h_ℓ(T_ℓ x)
  (the paper's λ is 1/(n·lam));
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

Steps: τσ‖T‖² ≤ 1 (Algorithm 2: τσ max(‖T‖², 1) ≤ 1), with ‖T‖ from power iteration on TᵀT
over the data (seeded start, relative tolerance 1e-4, times 1.01 for safety), and τ = ρ/‖T‖,
σ = 1/(ρ‖T‖). The ratio ρ decides the speed by orders of magnitude: Chambolle–Pock's bound
(‖x* − x⁰‖²/τ + ‖y* − y⁰‖²/σ)/k is smallest for ρ = ‖x* − x⁰‖/‖y* − y⁰‖, and duals in
(S_{1/n})^L have ‖y* − y⁰‖ ≤ √(2/n); the default ρ = √n assumes ‖x*‖ ≈ √2 (measured best
within a factor 3 on iris, wine and digits for Algorithm 1; Algorithm 2 uses ρ = 1).
`step_ratio` sets ρ. The paper's
stopping rule: stop when ‖x⁺ − x‖/‖x⁺‖ < tol (1e-5 in §4.2), or after max_iter iterations.

Dual objective logged per iteration: (11), maximise D(y) = Σ_ℓ r_ℓᵀy_ℓ − (lam·g)*(−Tᵀy).
For norm penalties g* is the indicator of the dual-norm ball, so the dual iterate is rescaled
into it (y_ℓ ← s·y_ℓ + (1 − s)/n e_{z_ℓ} changes neither feasibility in S_{1/n} nor anything
but a factor s in Tᵀy and rᵀy, as T_ℓ's column z_ℓ and r_ℓz_ℓ vanish): D = s·mean_ℓ r_ℓᵀY_ℓ,
s = min(1, lam/‖(1/n)TᵀY‖_*). For "l2", D = mean_ℓ r_ℓᵀY_ℓ − ‖(1/n)TᵀY‖²/(2 lam). The offsets
add the constraint Σ_ℓ a_ℓ = 0 (the b-block of Tᵀy), which iterates satisfy only in the
limit: it is logged as dual_infeasibility instead of being enforced. For the constrained
problem, D is the Lagrangian bound Σ_ℓ r_ℓᵀy_ℓ − c·n·eta − g*(−Tᵀy) with the multiplier
c = −mean(ξ) (at the solution ξ = −c·1 and y_ℓ ∈ S_c), rescaled the same way.

Out of core: y (n × K; Algorithm 2 also ξ and ζ, n each) live in ChunkState, chunk-aligned
with the data, one version per iteration. One iteration = one pass: the driver computes x⁺
(the prox, once per iteration), each chunk task reads its duals, computes scores at x⁺ and x
with one product X·[W⁺ W], updates its duals, and returns its share of Tᵀy (an M × K array),
of the hinge loss at x⁺, and of the dual objective. Sums follow the engine's fixed tree, so
the result is bitwise independent of the number of workers. Memory per task:
O(chunk nnz + chunk_rows·K + M·K).

Checkpoints after every iteration: x, Tᵀy, Σ(ζ − τξ), counters, ‖T‖ and the duals' version;
resume=True reproduces an uninterrupted run bitwise.
"""

from __future__ import annotations

import dataclasses
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import ConfigError
from streamfit.model import LinearModel
from streamfit.runlog import MetricsLog
from streamfit.solvers.base import Solver, SolverParams, register_solver
from streamfit.solvers.fbpd_kernels import (
    constrained_dual_step,
    dual_norm,
    margins_adjoint_rows,
    penalty,
    penalty_prox,
    regularized_dual_step,
)
from streamfit.store import ChunkSource

DUAL, XI, ZETA = "dual", "xi", "zeta"  # ChunkState names
POWER_TOL = 1e-4
POWER_MAX_ITER = 200
NORM_SAFETY = 1.01


class FBPDParams(SolverParams):
    """Options of the fbpd solver (see the module docstring for the math)."""

    formulation: Literal["regularized", "constrained"] = Field(
        "regularized", description="regularized: problem (7), Algorithm 1; constrained: problem (8), Algorithm 2")
    penalty: Literal["l1", "l1/l2", "l1/linf", "l2"] = Field(
        "l1", description="g: l1, l1/l2 or l1/linf over feature blocks of each class, or l2 = ½‖W‖²")
    group_size: int = Field(5, ge=1, description="features per block of the mixed norms (paper: 5 genes, 81 coefficients)")
    lam: float = Field(1e-3, gt=0, description="regularized: minimise lam·g(W) + mean hinge")
    eta: float = Field(0.1, gt=0, description="constrained: minimise g(W) s.t. mean hinge <= eta")
    tol: float = Field(1e-5, ge=0, description="stop when ‖x⁺ − x‖/‖x⁺‖ < tol (the paper uses 1e-5)")
    max_iter: int = Field(1000, ge=1, description="iterations (passes over the data)")
    step_ratio: float | None = Field(
        None, gt=0, description="ρ: τ = ρ/‖T‖, σ = 1/(ρ‖T‖); null: √n")


# -- chunk tasks ---------------------------------------------------------------------------


def _scores(X, W2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    return np.asarray(X @ W2) + b2


def _adjoint(X, A: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Σ_ℓ T_ℓᵀ(rows of A) as (M × K, K), given the a_ℓ."""
    return np.asarray(X.T @ A), A.sum(axis=0)


def _normal_task(source: ChunkSource, chunk_id: int, W: np.ndarray, b: np.ndarray):
    """This chunk's share of TᵀT x (power iteration)."""
    chunk = source.read_chunk(chunk_id)
    A = np.empty((chunk.n_rows, W.shape[1]))
    margins_adjoint_rows(_scores(chunk.X, W, b), chunk.labels, A)
    return _adjoint(chunk.X, A)


def _regularized_task(source: ChunkSource, chunk_id: int, state, version: int, W2, b2, step: float):
    chunk = source.read_chunk(chunk_id)
    z, K = chunk.labels, source.n_classes
    Y = np.eye(K)[z] if version == 0 else state.read(DUAL, version, chunk_id).copy()
    A = np.empty_like(Y)
    hinge, r_dot, correct = regularized_dual_step(_scores(chunk.X, W2, b2), z, Y, step, A)
    state.write(DUAL, version + 1, chunk_id, Y)
    GW, Gb = _adjoint(chunk.X, A)
    return GW, Gb, hinge, r_dot, correct


def _constrained_task(source: ChunkSource, chunk_id: int, state, version: int, W2, b2, tau: float,
                      sigma: float, shift: float):
    chunk = source.read_chunk(chunk_id)
    z, K, n = chunk.labels, source.n_classes, chunk.n_rows
    if version == 0:
        Y, xi, zeta = np.zeros((n, K)), np.zeros(n), np.zeros(n)
    else:
        Y, xi, zeta = (state.read(name, version, chunk_id).copy() for name in (DUAL, XI, ZETA))
    A = np.empty_like(Y)
    out = constrained_dual_step(_scores(chunk.X, W2, b2), z, Y, xi, zeta, tau, sigma, shift, A)
    for name, array in ((DUAL, Y), (XI, xi), (ZETA, zeta)):
        state.write(name, version + 1, chunk_id, array)
    return (*_adjoint(chunk.X, A), *out)


def _relative_change(new: tuple, old: tuple) -> float:
    """‖new − old‖/‖new‖ over a tuple of arrays (0 if both are 0, inf if only new is)."""
    change = np.sqrt(sum(((a - c) ** 2).sum() for a, c in zip(new, old)))
    size = np.sqrt(sum((a * a).sum() for a in new))
    return float(change / size) if size > 0 else (0.0 if change == 0 else np.inf)


# -- the solver ----------------------------------------------------------------------------


@dataclasses.dataclass
class _Progress:
    """x = (W, b), G = Tᵀy (Algorithm 1: (1/n)TᵀY) and, for Algorithm 2, Σ_ℓ(ζ_ℓ − τξ_ℓ)."""

    W: np.ndarray
    b: np.ndarray
    GW: np.ndarray
    Gb: np.ndarray
    next_sum: float = 0.0
    iteration: int = 0  # = the duals' version; 0: initial duals, never written
    data_passes: int = 0
    converged: bool = False


@register_solver
class FBPDSolver(Solver):
    """Algorithm 1 (regularized) or Algorithm 2 (constrained), one pass per iteration.

    `stop_after_iters`: return the current model after that many iterations in this call (the
    checkpoint allows a later fit with resume=True to continue). For time-boxed jobs and for
    testing resume; not a model parameter."""

    name = "fbpd"
    Params = FBPDParams

    def __init__(self, params: FBPDParams, *, stop_after_iters: int | None = None):
        super().__init__(params)
        self.stop_after_iters = stop_after_iters

    def operator_norm(self, source: ChunkSource, engine: Engine) -> tuple[float, int]:
        """‖T‖ by power iteration on TᵀT (seeded start); returns (estimate, passes)."""
        rng = np.random.default_rng([self.params.random_state, 6])
        W = rng.standard_normal((source.n_features, source.n_classes))
        b = rng.standard_normal(source.n_classes)
        estimate = 0.0
        for it in range(1, POWER_MAX_ITER + 1):
            scale = np.sqrt((W * W).sum() + (b * b).sum())
            W, b = engine.map_reduce(_normal_task, source, range(source.n_chunks), desc="fbpd: ‖T‖",
                                     W=W / scale, b=b / scale)
            previous, estimate = estimate, float(np.sqrt((W * W).sum() + (b * b).sum()))  # ‖TᵀTv‖ → ‖T‖²
            if estimate == 0.0:
                raise ConfigError("T = 0: the training data has no non-zero rows")
            if abs(estimate - previous) <= POWER_TOL * estimate:
                break
        return float(np.sqrt(estimate)), it

    def step_ratio(self, n: int) -> float:
        """ρ: `step_ratio`, else √n (Algorithm 1) or 1 (Algorithm 2, whose duals y are the
        hinge's multiplier c times simplex points instead of lying in (S_{1/n})^L)."""
        if self.params.step_ratio:
            return self.params.step_ratio
        return float(np.sqrt(n)) if self.params.formulation == "regularized" else 1.0

    def steps(self, norm: float, n: int) -> tuple[float, float]:
        """(τ, σ) with τσ‖T‖² < 1 (Algorithm 2: τσ max(‖T‖², 1) < 1)."""
        rho = self.step_ratio(n)
        L = NORM_SAFETY * (norm if self.params.formulation == "regularized" else max(norm, 1.0))
        return rho / L, 1.0 / (rho * L)

    # ---- one iteration ----
    def _iterate(self, engine, source, state, prog: _Progress, norm: float) -> dict:
        """x⁺ from (x, Tᵀy), then the pass over the chunks; returns the fields to log."""
        p, n = self.params, source.n_rows
        tau, sigma = self.steps(norm, n)
        chunks = range(source.n_chunks)
        regularized = p.formulation == "regularized"
        weight = tau * (p.lam if regularized else 1.0)
        W_new = penalty_prox(prog.W - tau * prog.GW, weight, p.penalty, p.group_size)
        b_new = prog.b - tau * prog.Gb
        W2 = np.ascontiguousarray(np.hstack([W_new, prog.W]))
        b2 = np.concatenate([b_new, prog.b])
        if regularized:
            GW, Gb, hinge, r_dot, correct = engine.map_reduce(
                _regularized_task, source, chunks, desc="fbpd: iteration", state=state, version=prog.iteration,
                W2=W2, b2=b2, step=n * sigma)
            GW, Gb = GW / n, Gb / n
        else:
            shift = max(0.0, (prog.next_sum - n * p.eta) / n)
            GW, Gb, hinge, prog.next_sum, r_dot, xi_sum, correct = engine.map_reduce(
                _constrained_task, source, chunks, desc="fbpd: iteration", state=state, version=prog.iteration,
                W2=W2, b2=b2, tau=tau, sigma=sigma, shift=shift)
        rel_change = _relative_change((W_new, b_new), (prog.W, prog.b))
        if rel_change == 0.0 and not W_new.any() and not b_new.any():  # resting at x = 0: wait for the duals
            rel_change = _relative_change((GW, Gb), (prog.GW, prog.Gb))
        prog.W, prog.b, prog.GW, prog.Gb = W_new, b_new, GW, Gb
        prog.iteration += 1
        prog.data_passes += 1
        g = penalty(W_new, p.penalty, p.group_size)
        if regularized:
            primal = p.lam * g + hinge / n
            if p.penalty == "l2":
                dual = r_dot / n - float((GW * GW).sum()) / (2 * p.lam)
            else:
                dual = min(1.0, p.lam / max(dual_norm(GW, p.penalty, p.group_size), 1e-300)) * r_dot / n
        else:
            primal = g
            bound = r_dot + xi_sum * p.eta  # Σ rᵀy − c·n·eta with c = −mean(ξ)
            if p.penalty == "l2":
                dual = bound - 0.5 * float((GW * GW).sum())
            else:
                dual = min(1.0, 1.0 / max(dual_norm(GW, p.penalty, p.group_size), 1e-300)) * bound
        return dict(objective=primal, dual_objective=dual, gap=primal - dual, loss=hinge / n,
                    dual_infeasibility=float(np.sqrt((Gb * Gb).sum())), rel_change=rel_change,
                    train_accuracy=correct / n, nnz=int(np.count_nonzero(W_new)),
                    data_passes=prog.data_passes)

    # ---- checkpoints ----
    def _save(self, checkpointer: Checkpointer, prog: _Progress, norm: float) -> None:
        meta = {"iteration": prog.iteration, "data_passes": prog.data_passes, "next_sum": prog.next_sum,
                "converged": prog.converged, "norm": norm}
        arrays = {"W": prog.W, "b": prog.b, "GW": prog.GW, "Gb": prog.Gb}
        names = (DUAL,) if self.params.formulation == "regularized" else (DUAL, XI, ZETA)
        versions = {name: prog.iteration for name in names} if prog.iteration > 0 else {}
        checkpointer.save(prog.iteration, meta, arrays, versions)

    # ---- Algorithms 1 and 2 ----
    def fit(self, source: ChunkSource, *, engine: Engine, checkpointer: Checkpointer, log: MetricsLog,
            resume: bool = False) -> LinearModel:
        p = self.params
        if source.multilabel:
            raise ConfigError("fbpd solves the multiclass (Crammer–Singer) hinge; the store is multilabel")
        n, K, M = source.n_rows, source.n_classes, source.n_features
        state = checkpointer.state
        ckpt = checkpointer.latest(source.n_chunks) if resume else None
        if ckpt is None:
            state.keep_only(set())  # a fresh run: drop per-sample state left in the run directory
            norm, passes = self.operator_norm(source, engine)
            prog = _Progress(W=np.zeros((M, K)), b=np.zeros(K), GW=np.zeros((M, K)), Gb=np.zeros(K),
                             data_passes=passes)
            self._save(checkpointer, prog, norm)
        else:
            a, meta = ckpt.arrays, ckpt.meta
            norm = meta["norm"]
            prog = _Progress(W=a["W"], b=a["b"], GW=a["GW"], Gb=a["Gb"], 
                             next_sum=meta["next_sum"],
                             iteration=meta["iteration"], data_passes=meta["data_passes"],
                             converged=meta["converged"])
            log.truncate_after(ckpt.step)
        done_here = 0
        while not prog.converged and prog.iteration < p.max_iter:
            fields = self._iterate(engine, source, state, prog, norm)
            prog.converged = fields["rel_change"] < p.tol
            log.log(prog.iteration, model=lambda: self._model(source, prog, norm, n), **fields)
            self._save(checkpointer, prog, norm)
            done_here += 1
            if self.stop_after_iters is not None and done_here >= self.stop_after_iters:
                break
        return self._model(source, prog, norm, n)

    def _model(self, source: ChunkSource, prog: _Progress, norm: float, n: int) -> LinearModel:
        p = self.params
        coef = prog.W.T if p.penalty == "l2" else sp.csr_matrix(prog.W.T)
        return LinearModel(coef, prog.b, classes=source.classes, n_features=source.n_features, multilabel=False,
                           solver=self.name, params=p.model_dump(),
                           info={"iterations": prog.iteration, "converged": prog.converged, "norm_T": norm,
                                 "step_ratio": self.step_ratio(n), "data_passes": prog.data_passes})
