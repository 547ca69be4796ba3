"""Numerical kernels of the fbpd solver (Chierchia et al. 2015): the per-row dual updates of
Algorithms 1 and 2, and the regularizers g with their proximity operators and dual norms.

Weights are stored feature-major, W ∈ ℝ^{M×K} (column k is x^(k) of (1)); a block of the
mixed norms is `group_size` consecutive features of one class, x^(k,b) of §2.2 (the last block
of a class may be shorter). Margins: for scores s_ℓ = Wᵀu_ℓ + b, (T_ℓ x)_k = s_ℓk − s_ℓz_ℓ, and
r_ℓk = 1 for k ≠ z_ℓ, 0 for k = z_ℓ (μ_ℓ ≡ 1), so h_ℓ(T_ℓ x) = max_k (T_ℓ x + r_ℓ)_k is the
Crammer–Singer hinge (6). The adjoint: T_ℓᵀ v = (u_ℓ a_ℓᵀ, a_ℓ) with a_ℓ = v − (Σ_k v_k) e_{z_ℓ}.
"""

from __future__ import annotations

import numba
import numpy as np

from streamfit.projections import (
    epigraph_max_threshold,
    project_l1_ball,
    simplex_threshold,
)

# -- per-row dual updates ------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def regularized_dual_step(S: np.ndarray, z: np.ndarray, Y: np.ndarray, step: float, A: np.ndarray):
    """Algorithm 1's dual update for the rows of a chunk, with duals scaled to the unit simplex
    (Y = n·y, y ∈ (S_{1/n})^L):  Y_ℓ ← P_{S_1}(Y_ℓ + step·(T_ℓ(2x⁺ − x) + r_ℓ)), step = nσ.

    S (rows × 2K): scores at x⁺ (columns :K) and at x (K:). Y is updated in place; A receives
    a_ℓ = Y_ℓ − (Σ_k Y_ℓk) e_{z_ℓ} (so T_ℓᵀY_ℓ = (u_ℓ a_ℓᵀ, a_ℓ)). Returns the hinge sum
    Σ_ℓ h_ℓ(T_ℓ x⁺), Σ_ℓ r_ℓᵀY_ℓ and the number of rows whose top score at x⁺ is z_ℓ."""
    n, K = Y.shape
    active = np.empty(K, np.int64)
    aside = np.empty(K, np.int64)
    w = np.empty(K)
    hinge = 0.0
    r_dot = 0.0
    correct = 0
    for i in range(n):
        zi = z[i]
        s_new_z = S[i, zi]
        s_old_z = S[i, K + zi]
        worst = 0.0
        top = 0
        for k in range(K):
            m_new = S[i, k] - s_new_z
            r = 0.0 if k == zi else 1.0
            worst = max(worst, m_new + r)
            if S[i, k] > S[i, top]:
                top = k
            w[k] = Y[i, k] + step * (2.0 * m_new - (S[i, K + k] - s_old_z) + r)
        hinge += worst
        correct += top == zi
        tau = simplex_threshold(w, 1.0, active, aside)
        total = 0.0
        for k in range(K):
            Y[i, k] = max(w[k] - tau, 0.0)
            A[i, k] = Y[i, k]
            total += Y[i, k]
            if k != zi:
                r_dot += Y[i, k]
        A[i, zi] -= total
    return hinge, r_dot, correct


@numba.njit(cache=True, nogil=True)
def constrained_dual_step(S: np.ndarray, z: np.ndarray, Y: np.ndarray, xi: np.ndarray, zeta: np.ndarray,
                          tau: float, sigma: float, shift: float, A: np.ndarray):
    """Algorithm 2 for the rows of a chunk (everything but the primal step of x):

        ζ⁺ = ζ − τξ − δ                         (P_{V_η}, δ = max(0, (Σ(ζ − τξ) − η)/L) from the driver)
        ŷ = y + σT_ℓ(2x⁺ − x),  ξ̂ = ξ + σ(2ζ⁺ − ζ)
        (ỹ, ξ̃) = P_{epi h_ℓ}(ŷ/σ, ξ̂/σ)          (Proposition 3.3)
        y ← ŷ − σỹ,  ξ ← ξ̂ − σξ̃,  ζ ← ζ⁺.

    Y, xi, zeta are updated in place; A receives a_ℓ = y_ℓ − (Σ_k y_ℓk) e_{z_ℓ}. Returns
    Σ_ℓ h_ℓ(T_ℓ x⁺), Σ_ℓ r_ℓᵀy_ℓ, Σ_ℓ ξ_ℓ and the number of rows whose top score at x⁺ is z_ℓ."""
    n, K = Y.shape
    nu = np.empty(K)
    yhat = np.empty(K)
    hinge = 0.0
    r_dot = 0.0
    xi_sum = 0.0
    correct = 0
    for i in range(n):
        zi = z[i]
        s_new_z = S[i, zi]
        s_old_z = S[i, K + zi]
        zeta_new = zeta[i] - tau * xi[i] - shift
        xi_hat = xi[i] + sigma * (2.0 * zeta_new - zeta[i])
        worst = 0.0
        top = 0
        for k in range(K):
            m_new = S[i, k] - s_new_z
            r = 0.0 if k == zi else 1.0
            worst = max(worst, m_new + r)
            if S[i, k] > S[i, top]:
                top = k
            yhat[k] = Y[i, k] + sigma * (2.0 * m_new - (S[i, K + k] - s_old_z))
            nu[k] = yhat[k] / sigma + r
        hinge += worst
        correct += top == zi
        theta = epigraph_max_threshold(nu, xi_hat / sigma)
        total = 0.0
        for k in range(K):
            r = 0.0 if k == zi else 1.0
            Y[i, k] = yhat[k] - sigma * min(yhat[k] / sigma, theta - r)
            A[i, k] = Y[i, k]
            total += Y[i, k]
            r_dot += r * Y[i, k]
        A[i, zi] -= total
        xi[i] = xi_hat - sigma * theta
        zeta[i] = zeta_new
        xi_sum += xi[i]
    return hinge, r_dot, xi_sum, correct


@numba.njit(cache=True, nogil=True)
def margins_adjoint_rows(S: np.ndarray, z: np.ndarray, A: np.ndarray) -> None:
    """A_ℓ = T_ℓ x for scores S (power iteration: T_ℓᵀT_ℓ x = (u_ℓ a_ℓᵀ, a_ℓ) with a_ℓ from A_ℓ)."""
    n, K = A.shape
    for i in range(n):
        zi = z[i]
        total = 0.0
        for k in range(K):
            A[i, k] = S[i, k] - S[i, zi]
            total += A[i, k]
        A[i, zi] -= total


# -- regularizers g ------------------------------------------------------------------------


@numba.njit(cache=True, nogil=True)
def _group_prox(W: np.ndarray, t: float, group_size: int, linf: bool) -> np.ndarray:
    M, K = W.shape
    out = np.empty_like(W)
    for k in range(K):
        for j0 in range(0, M, group_size):
            j1 = min(j0 + group_size, M)
            v = W[j0:j1, k]
            if linf:  # prox_{t‖·‖∞}(v) = v − P_{B_t}(v) (Moreau)
                out[j0:j1, k] = v - project_l1_ball(v, t)
            else:  # block soft thresholding
                norm = np.sqrt(np.sum(v * v))
                scale = max(0.0, 1.0 - t / norm) if norm > 0.0 else 0.0
                out[j0:j1, k] = scale * v
    return out


@numba.njit(cache=True, nogil=True)
def _group_norms(W: np.ndarray, group_size: int, p: int) -> np.ndarray:
    """‖x^(k,b)‖_p for every block (p = 1, 2, or 0 for ∞), class-major."""
    M, K = W.shape
    n_groups = (M + group_size - 1) // group_size
    out = np.empty(K * n_groups)
    for k in range(K):
        for g in range(n_groups):
            v = np.abs(W[g * group_size:min((g + 1) * group_size, M), k])
            if p == 1:
                out[k * n_groups + g] = v.sum()
            elif p == 2:
                out[k * n_groups + g] = np.sqrt(np.sum(v * v))
            else:
                out[k * n_groups + g] = v.max()
    return out


def penalty(W: np.ndarray, kind: str, group_size: int) -> float:
    """g(W): ‖W‖₁, Σ_{k,b} ‖x^(k,b)‖₂, Σ_{k,b} ‖x^(k,b)‖∞, or ½‖W‖² (offsets b excluded)."""
    if kind == "l1":
        return float(np.abs(W).sum())
    if kind == "l2":
        return 0.5 * float(np.einsum("ij,ij->", W, W))
    return float(_group_norms(W, group_size, 2 if kind == "l1/l2" else 0).sum())


def penalty_prox(W: np.ndarray, t: float, kind: str, group_size: int) -> np.ndarray:
    """prox_{t g}(W)."""
    if kind == "l1":
        return np.sign(W) * np.maximum(np.abs(W) - t, 0.0)
    if kind == "l2":
        return W / (1.0 + t)
    return _group_prox(W, t, group_size, kind == "l1/linf")


def dual_norm(V: np.ndarray, kind: str, group_size: int) -> float:
    """The dual norm of the norm-type penalties (‖·‖∞, max_b ‖·‖₂, max_b ‖·‖₁): g*(V) is the
    indicator of {dual_norm(V) ≤ 1}. Not defined for "l2", whose conjugate is ½‖V‖²."""
    if V.size == 0:
        return 0.0
    if kind == "l1":
        return float(np.abs(V).max())
    return float(_group_norms(V, group_size, 2 if kind == "l1/l2" else 1).max())
