"""Euclidean projections used by the proximal multiclass SVM (Chierchia et al. 2015, §3).

- Simplex S_a = {u ∈ ℝ^K : u ≥ 0, Σ_k u_k = a}: Condat's algorithm ("Fast projection onto the
  simplex and the ℓ1 ball", 2016, ref. [49] of the paper), expected O(K). It finds the
  threshold τ with P_{S_a}(v) = max(v − τ, 0) by maintaining a candidate active set v and its
  running threshold ρ = (Σ_{j∈v} v_j − a)/|v| in one forward pass (elements ≤ ρ are never
  added), a pass over the elements set aside, and a clean-up loop removing elements ≤ ρ.
  It is the projection of Proposition 3.1: prox_{λ h_ℓ}(y) = y − P_{S_λ}(y + r_ℓ) (10).
- ℓ1 ball B_a = {u : ‖u‖₁ ≤ a}: v itself when inside, otherwise sign(v) · P_{S_a}(|v|);
  by Moreau's decomposition it gives prox_{a‖·‖∞}(v) = v − P_{B_a}(v) (the ℓ1,∞ penalty).
- Epigraph of h(y) = max_k (y_k + r_k) (6), Proposition 3.3: with ν = sort(y + r) ascending,
  P_epi h(y, ζ) = (p, θ), p_k = min(y_k, θ − r_k),
  θ = (ζ + Σ_{k ≥ k̄} ν_k) / (K − k̄ + 2)   (15),   k̄ the unique index with ν_{k̄−1} < θ ≤ ν_{k̄} (16)
  (ν_0 = −∞, ν_{K+1} = +∞). The search for k̄ goes from the largest ν downwards: θ is
  prox_φ(ζ) of the decreasing-slope function φ (18), so the first index satisfying (16) is k̄.

The row-wise kernels take a scratch buffer so that no memory is allocated per row.
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel


@kernel(nogil=True)
def simplex_threshold(v: np.ndarray, a: float, active: np.ndarray, aside: np.ndarray) -> float:
    """Condat's τ: P_{S_a}(v) = max(v − τ, 0). `active` and `aside` are int64 scratch of len(v)."""
    K = v.shape[0]
    n_act = 1
    n_aside = 0
    active[0] = 0
    rho = v[0] - a
    for i in range(1, K):
        if v[i] > rho:
            rho += (v[i] - rho) / (n_act + 1)
            if rho > v[i] - a:
                active[n_act] = i
                n_act += 1
            else:  # v_i alone beats the current set: set it aside and restart from v_i
                for j in range(n_act):
                    aside[n_aside] = active[j]
                    n_aside += 1
                active[0] = i
                n_act = 1
                rho = v[i] - a
    for j in range(n_aside):
        i = aside[j]
        if v[i] > rho:
            active[n_act] = i
            n_act += 1
            rho += (v[i] - rho) / n_act
    changed = True
    while changed:
        changed = False
        j = 0
        while j < n_act:
            i = active[j]
            if v[i] <= rho:
                n_act -= 1
                active[j] = active[n_act]
                rho += (rho - v[i]) / n_act
                changed = True
            else:
                j += 1
    return rho


@kernel(nogil=True)
def project_simplex(v: np.ndarray, a: float = 1.0) -> np.ndarray:
    """P_{S_a}(v) for one vector (a > 0)."""
    K = v.shape[0]
    active = np.empty(K, np.int64)
    aside = np.empty(K, np.int64)
    tau = simplex_threshold(v, a, active, aside)
    return np.maximum(v - tau, 0.0)


@kernel(nogil=True)
def project_rows_simplex(V: np.ndarray, a: float = 1.0) -> None:
    """Each row of V replaced by its projection onto S_a, in place."""
    K = V.shape[1]
    active = np.empty(K, np.int64)
    aside = np.empty(K, np.int64)
    for i in range(V.shape[0]):
        tau = simplex_threshold(V[i], a, active, aside)
        for k in range(K):
            V[i, k] = max(V[i, k] - tau, 0.0)


@kernel(nogil=True)
def project_l1_ball(v: np.ndarray, a: float) -> np.ndarray:
    """P_{B_a}(v) onto {‖u‖₁ ≤ a}, a ≥ 0."""
    if np.abs(v).sum() <= a:
        return v.copy()
    if a <= 0.0:
        return np.zeros_like(v)
    return np.sign(v) * project_simplex(np.abs(v), a)


@kernel(nogil=True)
def epigraph_max_threshold(nu: np.ndarray, zeta: float) -> float:
    """θ of Proposition 3.3 (15)-(16) for ν = y + r (any order; sorted in place).

    With m = K − k̄ + 1 of the largest ν summed, θ_m = (ζ + Σ_top-m ν)/(m + 1). Going down from
    m = 0, θ_m is an average of θ_{m−1} ≤ ν_{K−m+1} and ν_{K−m+1}, so the upper half of (16)
    holds whenever the previous m failed; the first m with θ_m > ν_{K−m} (ν_0 = −∞) is k̄.
    Checking only that half keeps the search exact under rounding and ties."""
    nu.sort()
    K = nu.shape[0]
    total = zeta
    for m in range(K):
        theta = total / (m + 1)
        if theta > nu[K - m - 1]:
            return theta
        total += nu[K - m - 1]
    return total / (K + 1)
