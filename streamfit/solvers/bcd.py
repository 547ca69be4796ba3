"""Block coordinate descent for ℓ1/ℓ2-regularized multiclass squared hinge: Blondel, Seki and
Uehara (2013), "Block coordinate descent algorithms for large-scale sparse multiclass
classification", Algorithms 1–3, with the paper's other objectives and a FISTA comparator.

Objective (eq. 2 and §4.7, §5.3): W ∈ R^{d×m}, scores s_i = Wᵀx_i,

    F(W) = (1/n) Σ_i ℓ_i(Wᵀx_i) + P(W)

with ℓ one of streamfit.losses ("squared_hinge": eq. 2, or the label-ranking loss of §4.7 on
multilabel stores; "multitask_squared_hinge": eq. 11; "logistic": eq. 12) and P one of
streamfit.penalties ("l1/l2" = λ Σ_j ‖W_{j:}‖₂ as in eq. 2, "l1", "l2", "elasticnet",
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
  (random), or after max_iter outer iterations.
- shrinking=True (§5.2.4, ℓ1/ℓ2 only): Yuan et al.'s rule, a zero block with
  ‖G_{j:}‖ < λ − M/n (M: the largest violation of the previous outer iteration) is skipped
  for the rest of the run; when the stopping rule holds on the remaining blocks, all blocks
  are reactivated and the run continues until it holds on all of them.

method="bcd", mode "chunks" — out of core on the Engine: rows in chunks, each chunk's slice of
S stored beside it (ChunkState "scores"). The blocks of an outer iteration (cyclic order for
"ls", a fresh seeded permutation for "cst") are cut into groups of `group_size` features;
per group one map_reduce pass, in which every chunk first applies the previous group's
update (S ← S + X_{:B'} Δ_{B'}, writing the next version of its scores), then returns its
partial gradients Σ_i x_ij ∂ℓ_i for j ∈ B and Σ_i ω_i x_ij², where ω_i is the number of
features of B that row i uses. The driver updates every block of the group at once with

    L_j = (c/n) Σ_i ω_i x_ij²,

the expected separable overapproximation of Richtárik and Takáč's parallel coordinate descent
for fully parallel updates of a partially separable function: by Cauchy–Schwarz
‖Σ_{j∈B} x_ij δ_j‖² ≤ ω_i Σ_{j∈B} x_ij² ‖δ_j‖², so
L(W + Δ) ≤ L(W) + ⟨G, Δ⟩ + Σ_{j∈B} (L_j/2) ‖δ_j‖² and every group step decreases F (no line
search needed; provably safe for simultaneous updates). Groups are Gauss–Seidel, blocks within
a group Jacobi; the stopping rule is the same (eq. 10 over the groups' violations). A last pass
per outer iteration applies the pending update and sums the loss for the log. Memory per task:
O(chunk nnz + chunk_rows·m + group_size·m); the driver holds W (d × m).
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
first iteration's violation sum and maximum, the shrinking state, and for FISTA W_{k−1}, Y_k,
t_k and L. Random block orders are drawn from numpy's generator seeded with
(random_state, outer iteration), so the counter is the RNG state; `resume=True` continues to
the same model as an uninterrupted run.

Logged per outer iteration: objective F(W), train_accuracy (multiclass; P@1 for multilabel),
nnz_rows and nnz_rows_pct (non-zero rows of W), violation ratio (eq. 10), line search steps,
active blocks (shrinking), data passes.
"""

from __future__ import annotations

import math
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import ConfigError
from streamfit.losses import LOGISTIC, LOSSES, curvature, label_lists, rows_loss
from streamfit.model import LinearModel
from streamfit.penalties import PENALTIES, prox, value
from streamfit.runlog import MetricsLog
from streamfit.solvers.base import Solver, SolverParams, register_solver
from streamfit.solvers.bcd_kernels import bcd_epoch, group_update
from streamfit.store import ChunkSource

SCORES = "scores"  # ChunkState name of the per-sample scores S = XW
EPS = 1e-12  # ε of L_j = max(‖h_j‖∞, ε)


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
    tol: float = Field(1e-3, gt=0, description="τ of the stopping criterion (10)")
    max_iter: int = Field(200, ge=1, description="K, the cap on outer iterations")

    @model_validator(mode="after")
    def _check(self):
        if self.shrinking and self.penalty != "l1/l2":
            raise ValueError("shrinking (§5.2.4) is defined for the l1/l2 penalty only")
        return self


# -- helpers -----------------------------------------------------------------------------------


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


def _group_task(source, chunk_id, *, state, version, apply_cols, apply_delta, cols, loss):
    """Chunks mode, one pass: apply the previous group's update to this chunk's scores (writing
    version+1), then return (Σ_i x_ij ∂ℓ_i/∂s for j ∈ cols, Σ_i ω_i x_ij²) — or, with
    cols=None, (Σ_i ℓ_i, #correct) for the log."""
    chunk = source.read_chunk(chunk_id)
    X = chunk.X.astype(np.float64)
    m = source.n_classes
    S = _chunk_scores(state, version, chunk_id, X.shape[0], m)
    if apply_cols is not None:
        S = S + X[:, apply_cols] @ apply_delta
        state.write(SCORES, version + 1, chunk_id, S)
    lab_ptr, lab_ind = label_lists(chunk.labels, X.shape[0])
    if cols is None:
        total = rows_loss(loss, S, lab_ptr, lab_ind, np.arange(X.shape[0], dtype=np.int64), 0)[0]
        return total, _n_correct(S, chunk.labels)
    Xb = X[:, cols].tocsr()
    omega = np.diff(Xb.indptr)
    rows = np.flatnonzero(omega).astype(np.int64)
    _, D, _ = rows_loss(loss, S, lab_ptr, lab_ind, rows, 1)
    Xr = Xb[rows]
    return np.asarray(Xr.T @ D), np.asarray(Xr.multiply(Xr).T @ omega[rows].astype(np.float64)).ravel()


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

    def _log(self, log, k, W, objective, correct, n, multilabel, **fields):
        nz = int(np.count_nonzero(np.any(W != 0, axis=1)))
        acc = {"train_p_at_1" if multilabel else "train_accuracy": correct / n}
        log.log(k, objective=objective, **acc, nnz_rows=nz, nnz_rows_pct=100.0 * nz / W.shape[0], **fields)

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
        if self._mode(source) == "memory":
            return self._fit_memory(source, checkpointer, log, ckpt)
        return self._fit_chunks(source, engine, checkpointer, log, ckpt)

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
            k, first, max_viol, ls_steps = 0, None, math.inf, 0
        else:
            meta = ckpt.meta
            W, active = ckpt.arrays["W"].copy(), ckpt.arrays["active"].copy()
            S = np.vstack([checkpointer.state.read(SCORES, meta["scores_version"], i) for i in range(source.n_chunks)])
            k, first, max_viol, ls_steps = meta["k"], meta["first"], meta["max_viol"], meta["ls_steps"]
        done_here = 0
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
            converged = ratio < p.tol
            n_active = int(active[blocks].sum())
            if converged and n_active < len(blocks):  # shrinking: check again on all blocks
                active[:] = True
                converged, max_viol = False, math.inf
            lsum = rows_loss(loss, S, lab_ptr, lab_ind, np.arange(n, dtype=np.int64), 0)[0]
            self._log(log, k, W, lsum / n + value(pen, W, p.lam, rho), _n_correct(S, labels), n, source.multilabel,
                      violation_ratio=ratio, ls_steps=ls_steps, active_blocks=n_active, mode="memory")
            stop = converged or k >= p.max_iter
            done_here += 1
            pause = self.stop_after is not None and done_here >= self.stop_after
            if stop or pause or k % p.checkpoint_every == 0:
                for i in range(source.n_chunks):
                    lo, hi = source.chunk_bounds(i)
                    checkpointer.state.write(SCORES, k, i, S[lo:hi].copy())
                checkpointer.save(k, {"k": k, "first": first, "max_viol": max_viol, "ls_steps": ls_steps,
                                      "scores_version": k, "converged": bool(converged)},
                                  {"W": W.copy(), "active": active.copy()}, {SCORES: k})
            if stop or pause:
                break
        return self._model(source, W, {"outer_iterations": k, "mode": "memory"})

    # ---- mode "chunks": out of core, one pass per feature group ----
    def _fit_chunks(self, source, engine, checkpointer, log, ckpt) -> LinearModel:
        p = self.params
        loss, pen, c, rho = self._codes(source)
        n, d, m = source.n_rows, source.n_features, source.n_classes
        chunks = range(source.n_chunks)
        state = checkpointer.state
        if ckpt is None:
            col_nnz, _ = engine.map_reduce(_colstats_task, source, chunks, desc="bcd: column stats")
            blocks = np.flatnonzero(col_nnz).astype(np.int64)
            W = np.zeros((d, m))
            k, version, first, passes = 0, 0, None, 1
        else:
            meta = ckpt.meta
            W, blocks = ckpt.arrays["W"].copy(), ckpt.arrays["blocks"]
            k, version, first, passes = meta["k"], meta["scores_version"], meta["first"], meta["data_passes"]
        kept = [version]  # state versions referenced by the checkpoints we keep
        done_here = 0
        while k < p.max_iter:
            order = blocks if p.variant == "ls" else np.random.default_rng([p.random_state, k]).permutation(blocks)
            pending = (None, None)
            vsum, vmax = 0.0, 0.0
            for lo in range(0, len(order), p.group_size):
                B = np.sort(order[lo:lo + p.group_size])
                G, Lnum = engine.map_reduce(_group_task, source, chunks, desc="bcd: group", state=state,
                                            version=version, apply_cols=pending[0], apply_delta=pending[1],
                                            cols=B, loss=loss)
                passes += 1
                if pending[0] is not None:
                    version += 1
                    state.keep_only({(SCORES, v) for v in kept + [version]})
                delta, viol = group_update(W[B], G / n, c / n * Lnum, pen, p.lam, rho)
                vsum, vmax = vsum + float(viol.sum()), max(vmax, float(viol.max()))
                moved = np.any(delta != 0, axis=1)
                W[B[moved]] += delta[moved]
                pending = (B[moved], delta[moved]) if moved.any() else (None, None)
            lsum, correct = engine.map_reduce(_group_task, source, chunks, desc="bcd: objective", state=state,
                                              version=version, apply_cols=pending[0], apply_delta=pending[1],
                                              cols=None, loss=loss)
            passes += 1
            if pending[0] is not None:
                version += 1
            k += 1
            first = first or (vsum, vmax)
            ratio = self._stop_ratio(vsum, vmax, first)
            self._log(log, k, W, lsum / n + value(pen, W, p.lam, rho), correct, n, source.multilabel,
                      violation_ratio=ratio, data_passes=passes, mode="chunks")
            stop = ratio < p.tol or k >= p.max_iter
            done_here += 1
            pause = self.stop_after is not None and done_here >= self.stop_after
            if stop or pause or k % p.checkpoint_every == 0:
                checkpointer.save(k, {"k": k, "first": first, "scores_version": version, "data_passes": passes},
                                  {"W": W.copy(), "blocks": blocks}, {SCORES: version})
                kept = (kept + [version])[-checkpointer.keep:]
            state.keep_only({(SCORES, v) for v in kept + [version]})
            if stop or pause:
                break
        return self._model(source, W, {"outer_iterations": k, "mode": "chunks", "data_passes": passes})

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
            k, t, L, first = 0, 1.0, (K if p.variant == "cst" else 1e-3 * K), None
        else:
            meta = ckpt.meta
            W_prev, Y = ckpt.arrays["W"].copy(), ckpt.arrays["Y"].copy()
            k, t, L, first = meta["k"], meta["t"], meta["L"], meta["first"]
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
            self._log(log, k, W, loss_w / n + value(pen, W, p.lam, rho), correct, n, source.multilabel,
                      violation_ratio=ratio, lipschitz=L, mode="fista")
            stop = ratio < p.tol or k >= p.max_iter
            done_here += 1
            pause = self.stop_after is not None and done_here >= self.stop_after
            if stop or pause or k % p.checkpoint_every == 0:
                checkpointer.save(k, {"k": k, "t": t, "L": L, "first": first}, {"W": W_prev, "Y": Y}, {})
            if stop or pause:
                break
        return self._model(source, W_prev, {"outer_iterations": k, "mode": "fista"})
