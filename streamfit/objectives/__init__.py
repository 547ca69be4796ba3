"""The objectives the solvers minimise: one loss/penalty pair per solver configuration, in the
project's averaged convention

    F(W, b) = (1/n) Σ_i ℓ(s_i; Y_i) + P(W, b),        s_i = Wᵀx_i + b ∈ ℝ^m,

W ∈ ℝ^{d×m} (feature-major), b ∈ ℝ^m (zeros where the solver fits no intercept), Y_i the labels
of sample i, and P holding its weights (λ, τ, ...). The per-sample losses and their codes are in
`losses` (one numbering for every solver's kernels), the penalties in `penalties` (bcd's row
penalties), `class_block_penalties` (fbpd's) and the classes below; `links` holds stagewise's
vectorised link losses.

Per solver (`objective_for`), with each paper's constants mapped to this convention:
- bcd (Blondel, Seki and Uehara 2013, eq. 2, 11, 12 and §4.7): ℓ = squared_hinge,
  multitask_squared_hinge or logistic; P(W) = λ·(l1/l2, l1, ½ l2², elasticnet or sparse_group)
  as in `penalties`; the intercept b (fit_intercept, the default) is not penalised. Without it,
  this is the paper's F(W) (its losses are not halved).
- ppdsparse (Yen et al. 2017, eq. 9, one binary problem per class, summed over the classes):
  ℓ = Σ_k max(1 − Y_ik s_ik, 0) ("hinge") or Σ_k ½ max(1 − Y_ik s_ik, 0)² ("squared_hinge",
  §5.2), P(W, b) = lam‖W‖₁ + (tau/2)(‖W‖²_F + ‖b‖²) (the bias is the last coordinate of
  x̂ = [x, 1] and so in the ridge). The paper's (9) sums the loss: its (λ, 1) are n·(lam, tau)
  after dividing by n·tau. With lam scale (the default), None or auto the solver takes the ℓ1
  weight from the data, class k's own lam_k (lam_scale·max(1, 2 std(y_k))·mean ‖x_i‖/√n by default,
  lam_ratio·λmax_k, or chosen on held-out rows); its F is the sum of each class's F_k at
  lam = lam_k (the model's lam_min/lam_max, the group statistics).
- fbpd (Chierchia et al. 2015, eq. 6–8): ℓ = the Crammer–Singer hinge (6) with μ_ℓ ≡ 1.
  Regularized (7): F = (1/n) Σ ℓ + lam·g(W) (the paper's λ weighs the summed hinge: λ_paper =
  1/(n·lam) after dividing by λ_paper·n). Constrained (8): F = g(W) subject to (1/n) Σ ℓ ≤ eta
  (η_paper = n·eta); `value` is then g(W) alone and `mean_loss` the constraint's left side.
- stagewise (Agarwal et al. 2014, eq. 13 with the ridge of each stage): ℓ = ½‖s − y‖² (identity
  link), the multinomial logistic loss (softmax link) or the per-label logistic loss (sigmoid:
  the softmax link of a multilabel store); P = (λ/2) Σ_t ‖W_t‖²_F over the stages' weights
  (bias rows excluded: the intercept is not penalised). For one stage holding every feature this
  is ridge / scikit-learn's LogisticRegression(C = 1/(nλ)).

Evaluation is summable over row chunks: `chunk_sums` of each chunk (a `ChunkSums`), added with
`+`, then `total(sums, W, b)` = sums.loss / sums.n_rows + P(W, b) (or P alone for (8)). Every
loss is row-wise, so a row's term does not depend on the chunking; only the order of the
floating-point additions across chunks does. Every solver's logged `objective` (metrics.jsonl)
is this F of its objective_for: bcd, fbpd and stagewise pass their fused loss sums to `total`;
ppdsparse sums its classes' F_k from a kernel over each w_k's support (a class's share of F).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import numpy as np

from streamfit.objectives import class_block_penalties, penalties
from streamfit.objectives.links import LINK_LOSSES
from streamfit.objectives.losses import (
    CRAMMER_SINGER_HINGE,
    LOGISTIC,
    LOSSES,
    MULTITASK_SQUARED_HINGE,
    OVR_HALF_SQUARED_HINGE,
    OVR_HINGE,
    SQUARED_HINGE,
    dual_loss,
    label_lists,
    loss_sum,
    rows_loss,
)


@dataclasses.dataclass(frozen=True)
class ChunkSums:
    """A chunk's share of the objective: loss = Σ_i ℓ(s_i; Y_i) over its n_rows rows. Chunks'
    sums add with `+` (start from ChunkSums())."""

    loss: float = 0.0
    n_rows: int = 0

    def __add__(self, other: ChunkSums) -> ChunkSums:
        return ChunkSums(self.loss + other.loss, self.n_rows + other.n_rows)


def _soft(V: np.ndarray, t: float) -> np.ndarray:
    return np.sign(V) * np.maximum(np.abs(V) - t, 0.0)


@dataclasses.dataclass(frozen=True)
class RowPenalty:
    """bcd's P(W) = Σ_j P(W_{j:}) of `penalties` (code, λ = lam, ρ = l1_ratio); b is not penalised."""

    code: int
    lam: float
    rho: float = 0.5

    def value(self, W: np.ndarray, b: np.ndarray | None = None) -> float:
        return float(penalties.value(self.code, np.ascontiguousarray(W, dtype=np.float64), self.lam, self.rho))

    def prox(self, W: np.ndarray, b: np.ndarray | None, t: float) -> tuple[np.ndarray, np.ndarray | None]:
        """(prox_{tP}(W), b)."""
        return penalties.prox(self.code, np.ascontiguousarray(W, dtype=np.float64), t, self.lam, self.rho), b

    def smooth_gradient(self, W: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        """Gradient of P's differentiable part: λW (l2), λ(1 − ρ)W (elasticnet, group_elasticnet), else 0."""
        ridge = {
            penalties.L2: self.lam,
            penalties.ELASTICNET: self.lam * (1.0 - self.rho),
            penalties.GROUP_ELASTICNET: self.lam * (1.0 - self.rho),
        }.get(self.code, 0.0)
        return ridge * W, None if b is None else np.zeros_like(b)

    def dual_norm(self, G: np.ndarray) -> float:
        """‖G‖_* of the norm λ⁻¹P for l1/l2 (max_j ‖G_j‖₂) and l1 (max |G_jr|): P*(V) is the
        indicator of {‖V‖_* ≤ λ}."""
        if G.size == 0:
            return 0.0
        if self.code == penalties.L1L2:
            return float(np.sqrt((G * G).sum(axis=1)).max())
        if self.code == penalties.L1:
            return float(np.abs(G).max())
        raise ValueError("dual_norm: only penalties 'l1/l2' and 'l1' are norms")


@dataclasses.dataclass(frozen=True)
class ClassBlockPenalty:
    """fbpd's weight·g(W) of `class_block_penalties` (kind, group_size); b is not penalised."""

    kind: str
    group_size: int
    weight: float = 1.0

    def value(self, W: np.ndarray, b: np.ndarray | None = None) -> float:
        return self.weight * class_block_penalties.penalty(
            np.ascontiguousarray(W, dtype=np.float64), self.kind, self.group_size
        )

    def prox(self, W: np.ndarray, b: np.ndarray | None, t: float) -> tuple[np.ndarray, np.ndarray | None]:
        return class_block_penalties.penalty_prox(
            np.ascontiguousarray(W, dtype=np.float64), t * self.weight, self.kind, self.group_size
        ), b

    def smooth_gradient(self, W: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        return (self.weight * W if self.kind == "l2" else np.zeros_like(W)), None if b is None else np.zeros_like(b)

    def dual_norm(self, G: np.ndarray) -> float:
        return class_block_penalties.dual_norm(G, self.kind, self.group_size)


@dataclasses.dataclass(frozen=True)
class ElasticNetWithBias:
    """ppdsparse's P(W, b) = lam‖W‖₁ + (tau/2)(‖W‖²_F + ‖b‖²)."""

    lam: float
    tau: float

    def value(self, W: np.ndarray, b: np.ndarray | None = None) -> float:
        sq = float(np.einsum("ij,ij->", W, W)) + (0.0 if b is None else float(b @ b))
        return self.lam * float(np.abs(W).sum()) + 0.5 * self.tau * sq

    def prox(self, W: np.ndarray, b: np.ndarray | None, t: float) -> tuple[np.ndarray, np.ndarray | None]:
        """(soft(W, t·lam) / (1 + t·tau), b / (1 + t·tau))."""
        s = 1.0 / (1.0 + t * self.tau)
        return _soft(W, t * self.lam) * s, None if b is None else b * s

    def smooth_gradient(self, W: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        return self.tau * W, None if b is None else self.tau * b


@dataclasses.dataclass(frozen=True)
class StageRidge:
    """stagewise's P = (λ/2) Σ_t ‖W_t‖²_F over the stages' penalised weights (a d × m array for
    one stage, or a sequence of them: `stage_weights` drops a stage's bias row); the intercept b
    is not penalised."""

    lam: float

    def value(self, W: np.ndarray | Sequence[np.ndarray], b: np.ndarray | None = None) -> float:
        stages = [W] if isinstance(W, np.ndarray) else W
        return 0.5 * self.lam * sum(float((Wt * Wt).sum()) for Wt in stages)

    @staticmethod
    def stage_weights(weights: Sequence[np.ndarray], fit_intercept: bool) -> list[np.ndarray]:
        """The penalised part of each stage's weights (a StagewiseModel's `weights`, rows =
        the stage's design columns, the bias column first when fit_intercept): D W_t."""
        return [W[1:] if fit_intercept else W for W in weights]

    def prox(self, W: np.ndarray, b: np.ndarray | None, t: float) -> tuple[np.ndarray, np.ndarray | None]:
        return W / (1.0 + t * self.lam), b

    def smooth_gradient(self, W: np.ndarray, b: np.ndarray | None) -> tuple[np.ndarray, np.ndarray | None]:
        return self.lam * W, None if b is None else np.zeros_like(b)


Penalty = RowPenalty | ClassBlockPenalty | ElasticNetWithBias | StageRidge


@dataclasses.dataclass(frozen=True)
class Objective:
    """F(W, b) = (1/n) Σ_i ℓ(s_i; Y_i) + P(W, b) (module docstring), or P alone subject to
    (1/n) Σ_i ℓ ≤ loss_bound (fbpd's constrained form (8)).

    loss: a code of `losses.LOSSES`; fit_intercept: whether s_i includes b. Labels are int class
    ids (n,) or a 0/1 indicator (n × m, CSR or dense), as a store's chunks hold them; X is
    n × d, dense or scipy.sparse; W is d × m and b (m,) or None (taken as 0).
    """

    loss: int
    penalty: Penalty
    fit_intercept: bool
    loss_bound: float | None = None

    def scores(self, W: np.ndarray, b: np.ndarray | None, X) -> np.ndarray:
        """S = XW + b (n × m, float64, C order)."""
        S = np.asarray(X @ np.asarray(W, dtype=np.float64), dtype=np.float64)
        if self.fit_intercept and b is not None:
            S = S + b
        return np.ascontiguousarray(S)

    def loss_sums(self, S: np.ndarray, labels) -> ChunkSums:
        """ChunkSums of rows with scores S (n × m)."""
        return ChunkSums(float(loss_sum(self.loss, S, labels)), S.shape[0])

    def chunk_sums(self, W: np.ndarray, b: np.ndarray | None, X, labels) -> ChunkSums:
        """ChunkSums of one row chunk (X, labels)."""
        return self.loss_sums(self.scores(W, b, X), labels)

    def total(self, sums: ChunkSums, W, b: np.ndarray | None) -> float:
        """F from the chunks' summed ChunkSums (P alone for the constrained form)."""
        if self.loss_bound is not None:
            return self.penalty.value(W, b)
        return sums.loss / sums.n_rows + self.penalty.value(W, b)

    def value(self, W: np.ndarray, b: np.ndarray | None, X, labels) -> float:
        """F(W, b) on the data in memory."""
        return self.total(self.chunk_sums(W, b, X, labels), W, b)

    def mean_loss(self, W: np.ndarray, b: np.ndarray | None, X, labels) -> float:
        """(1/n) Σ_i ℓ(s_i; Y_i): the loss part of F (the left side of (8)'s constraint)."""
        sums = self.chunk_sums(W, b, X, labels)
        return sums.loss / sums.n_rows

    def derivatives(self, S: np.ndarray, labels, order: int = 2) -> tuple[float, np.ndarray, np.ndarray]:
        """(Σ_i ℓ_i, D, H): D_i = ∂ℓ_i/∂s (a subgradient for the hinges) and, for order 2, H_i
        the (generalized) second derivatives ∂²ℓ_i/∂s_r² (eq. 6 of Blondel et al. for the
        squared hinges; n × m each, empty when not asked for)."""
        lab_ptr, lab_ind = label_lists(labels, S.shape[0])
        total, D, H = rows_loss(
            self.loss,
            np.ascontiguousarray(S, dtype=np.float64),
            lab_ptr,
            lab_ind,
            np.arange(S.shape[0], dtype=np.int64),
            order,
        )
        return float(total), D, H

    def gradient(self, W: np.ndarray, b: np.ndarray | None, X, labels) -> tuple[np.ndarray, np.ndarray | None]:
        """(∇_W, ∇_b) of the loss part plus P's differentiable part: (1/n) XᵀD + ∇P_smooth,
        (1/n) Σ_i D_i (+ τb for ppdsparse); ∇_b is None without an intercept."""
        S = self.scores(W, b, X)
        _, D, _ = self.derivatives(S, labels, 1)
        n = S.shape[0]
        GW = np.asarray(X.T @ D) / n
        if not self.fit_intercept:
            return GW + self.penalty.smooth_gradient(np.asarray(W, dtype=np.float64), None)[0], None
        b = np.zeros(S.shape[1]) if b is None else np.asarray(b, dtype=np.float64)
        PW, Pb = self.penalty.smooth_gradient(np.asarray(W, dtype=np.float64), b)
        return GW + PW, D.sum(axis=0) / n + Pb

    def dual_value(self, W: np.ndarray, b: np.ndarray | None, X, labels) -> float:
        """A Fenchel dual value D ≤ min F at a dual point built from the loss derivatives at
        (W, b); D = F at the optimum (for ppdsparse's hinge only at points whose subgradient is
        the optimal dual).

        bcd (norm penalties l1/l2, l1): D at U = c·∇ℓ(S), S = XW, with c ≤ λ/‖G‖_*,
        G = XᵀU/n at c = 1, maximised over c by `losses.dual_loss` (its docstring has the bound).

        ppdsparse: ℓ(m) = max_{0 ≤ α ≤ U} α(1 − m) − cα²/2 (hinge: U = 1, c = 0; half squared
        hinge: U = ∞, c = 1), so per class, with α_i = −∂ℓ/∂m at the margins m_i = Y_ik s_ik,
            D = (1/n) Σ_i (α_i − cα_i²/2) − h*(v, v_b),   (v, v_b) = (1/n) Σ_i α_i Y_ik [x_i, 1],
            h*(v, v_b) = (‖soft(v, lam)‖² + v_b²) / (2 tau),
        the averaged form of −G(α) of Yen et al.'s dual (10), summed over the classes."""
        return self.dual_value_at_scores(self.scores(W, b, X), X, labels)

    def dual_value_at_scores(self, S: np.ndarray, X, labels) -> float:
        """`dual_value` at the point whose scores are S (n × m): for a solver that keeps S."""
        n = S.shape[0]
        _, Dv, _ = self.derivatives(S, labels, 1)
        if isinstance(self.penalty, RowPenalty) and self.loss in (SQUARED_HINGE, MULTITASK_SQUARED_HINGE, LOGISTIC):
            dn = self.penalty.dual_norm(np.asarray(X.T @ Dv) / n)
            c_max = self.penalty.lam / dn if dn > 0 else np.inf
            lab_ptr, lab_ind = label_lists(labels, n)
            return float(dual_loss(self.loss, S, lab_ptr, lab_ind, c_max)) / n
        if isinstance(self.penalty, ElasticNetWithBias):
            lab_ptr, lab_ind = label_lists(labels, n)
            signs = -np.ones_like(S)
            signs[np.repeat(np.arange(n), np.diff(lab_ptr)), lab_ind] = 1.0
            alpha = -signs * Dv  # ≥ 0: the hinges' ∂ℓ/∂s_k = −Y_ik α_ik
            c = 1.0 if self.loss == OVR_HALF_SQUARED_HINGE else 0.0
            V = np.asarray(X.T @ (alpha * signs)) / n
            vb = (alpha * signs).sum(axis=0) / n
            conj = (float((_soft(V, self.penalty.lam) ** 2).sum()) + float(vb @ vb)) / (2.0 * self.penalty.tau)
            return float((alpha - 0.5 * c * alpha * alpha).sum()) / n - conj
        raise ValueError(
            "dual_value: defined for bcd's norm penalties (l1/l2, l1) and for ppdsparse; fbpd's dual "
            "needs its dual iterate (crammer_singer_dual)"
        )

    def crammer_singer_dual(self, Y: np.ndarray, X, labels) -> tuple[float, float]:
        """fbpd's regularized problem (7): (D, ‖v_b‖) for the dual (11) at y = Y/n, Y (n × K)
        with rows in the unit simplex (as the solver stores its duals). With
        a_ℓ = y_ℓ − (Σ_k y_ℓk) e_{z_ℓ}, V = Σ_ℓ x_ℓ a_ℓᵀ, v_b = Σ_ℓ a_ℓ, r_ℓᵀy_ℓ = Σ_{k ≠ z_ℓ} y_ℓk:
            D = c Σ_ℓ r_ℓᵀy_ℓ,   c = min(1, lam/‖V‖_*)   (norm penalties: (lam·g)* is the
                indicator of the dual ball of radius lam; c·y stays feasible since h_ℓ ≥ 0),
            D = Σ_ℓ r_ℓᵀy_ℓ − ‖V‖²/(2 lam)   (l2).
        The offsets b are free, so D bounds min F only where v_b = 0 (the second value)."""
        if not isinstance(self.penalty, ClassBlockPenalty) or self.loss_bound is not None:
            raise ValueError("crammer_singer_dual: only fbpd's regularized form (7) has this dual")
        n = Y.shape[0]
        z = np.asarray(labels, dtype=np.int64)
        y = np.asarray(Y, dtype=np.float64) / n
        A = y.copy()
        A[np.arange(n), z] -= y.sum(axis=1)
        V = np.ascontiguousarray(np.asarray(X.T @ A))
        vb = A.sum(axis=0)
        r_dot = float(y.sum() - y[np.arange(n), z].sum())
        lam = self.penalty.weight
        if self.penalty.kind == "l2":
            return r_dot - float((V * V).sum()) / (2.0 * lam), float(np.linalg.norm(vb))
        dn = self.penalty.dual_norm(V)
        return min(1.0, lam / dn) * r_dot if dn > 0 else r_dot, float(np.linalg.norm(vb))


def objective_for(solver_name: str, params, multilabel: bool = False) -> Objective:
    """The Objective that solver `solver_name` minimises with its parameters `params` (the
    solver's pydantic params or any object with the same attributes) on a multiclass or
    multilabel store."""
    if solver_name == "bcd":
        if params.lam is None:
            raise ValueError(
                "objective_for: bcd with lam=None takes λ from the training rows (BCDParams.lam_for, the "
                "model's info['lam']); pass params with that lam"
            )
        return Objective(
            LOSSES[params.loss_for(multilabel)],
            RowPenalty(penalties.PENALTIES[params.penalty], params.lam, params.l1_ratio),
            fit_intercept=params.fit_intercept,
        )
    if solver_name == "ppdsparse":
        if not isinstance(params.lam, float):
            raise ValueError(
                f"objective_for: ppdsparse with lam={params.lam} takes each class k's lam_k from the data "
                "(the model's stats); evaluate class k with lam=lam_k"
            )
        loss = OVR_HALF_SQUARED_HINGE if params.loss == "squared_hinge" else OVR_HINGE
        return Objective(loss, ElasticNetWithBias(params.lam, params.tau), fit_intercept=True)
    if solver_name == "fbpd":
        regularized = params.formulation == "regularized"
        return Objective(
            CRAMMER_SINGER_HINGE,
            ClassBlockPenalty(params.penalty, params.group_size, params.lam if regularized else 1.0),
            fit_intercept=True,
            loss_bound=None if regularized else params.eta,
        )
    if solver_name == "stagewise":
        link = "sigmoid" if params.link == "softmax" and multilabel else params.link
        return Objective(LOSSES[LINK_LOSSES[link]], StageRidge(params.lam), fit_intercept=True)
    raise ValueError(f"objective_for: unknown solver {solver_name!r}; use bcd, fbpd, ppdsparse or stagewise")
