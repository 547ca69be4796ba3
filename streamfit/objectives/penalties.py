"""Row-separable penalties P(W) = Σ_j P(W_{j:}) of a d × m weight matrix, their proximity
operators and optimality violations.

Penalties (λ > 0, ρ = `l1_ratio` ∈ [0, 1]), as in Blondel, Seki and Uehara (2013), §2 and §4.7:

    "l1/l2"         λ Σ_j ‖W_{j:}‖₂                     (group lasso, eq. 2)
    "l1"            λ Σ_{j,r} |W_{jr}|                  (lasso)
    "l2"            (λ/2) Σ_{j,r} W_{jr}²               (ridge, R_{ℓ2²} of §2)
    "elasticnet"    λ (ρ ‖W‖₁ + (1 − ρ)/2 ‖W‖²_F)        (§2)
    "sparse_group"  λ Σ_j (ρ ‖W_{j:}‖₁ + (1 − ρ) ‖W_{j:}‖₂)  (ℓ1 + ℓ1/ℓ2, §4.7)
    "group_elasticnet"  λ Σ_j (ρ ‖W_{j:}‖₂ + (1 − ρ)/2 ‖W_{j:}‖²₂)  (ℓ1/ℓ2 + ridge: whole rows are
                    zero as for l1/l2, the ridge keeps the others from the sparse-margin limit)

Proximity operator prox_{tP}(v) = argmin_w ½‖w − v‖² + t P(w) of one row:
    l1/l2: max(1 − tλ/‖v‖₂, 0) v  (vectorial soft-thresholding, eq. 4);
    l1: soft(v, tλ) = sign(v) max(|v| − tλ, 0);  l2: v / (1 + tλ);
    elasticnet: soft(v, tλρ) / (1 + tλ(1 − ρ));
    sparse_group: the ℓ1 prox, then the ℓ2 one (§4.7): u = soft(v, tλρ), max(1 − tλ(1 − ρ)/‖u‖, 0) u;
    group_elasticnet: max(1 − tλρ/‖v‖₂, 0) v / (1 + tλ(1 − ρ)) (complete the square of the ridge).

Optimality violation of a row w with loss gradient g (0 iff the row satisfies its optimality
condition, Proposition 1 for l1/l2):
    l1/l2: eq. (9): max(‖g‖ − λ, 0) if w = 0, |‖g‖ − λ| otherwise;
    group_elasticnet: max(‖g‖ − λρ, 0) if w = 0, ‖g + λ(1 − ρ) w + λρ w/‖w‖‖ otherwise;
    others: ‖g + ∂P(w)‖₂ at the minimum-norm subgradient (for sparse_group with w = 0:
    max(‖soft(g, λρ)‖ − λ(1 − ρ), 0)); §4.7 leaves this "reworking" open.

Penalty codes (ints, so numba kernels can branch on them) are in PENALTIES.
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel

L1L2, L1, L2, ELASTICNET, SPARSE_GROUP, GROUP_ELASTICNET = 0, 1, 2, 3, 4, 5
PENALTIES = {
    "l1/l2": L1L2,
    "l1": L1,
    "l2": L2,
    "elasticnet": ELASTICNET,
    "sparse_group": SPARSE_GROUP,
    "group_elasticnet": GROUP_ELASTICNET,
}


@kernel(nogil=True)
def _norm(v) -> float:
    s = 0.0
    for x in v:
        s += x * x
    return np.sqrt(s)


@kernel(nogil=True)
def _soft(x: float, t: float) -> float:
    if x > t:
        return x - t
    if x < -t:
        return x + t
    return 0.0


@kernel(nogil=True)
def row_value(pen: int, w, lam: float, rho: float) -> float:
    """P(w) of one row."""
    l1 = 0.0
    sq = 0.0
    for x in w:
        l1 += abs(x)
        sq += x * x
    if pen == L1L2:
        return lam * np.sqrt(sq)
    if pen == L1:
        return lam * l1
    if pen == L2:
        return 0.5 * lam * sq
    if pen == ELASTICNET:
        return lam * (rho * l1 + 0.5 * (1.0 - rho) * sq)
    if pen == GROUP_ELASTICNET:
        return lam * (rho * np.sqrt(sq) + 0.5 * (1.0 - rho) * sq)
    return lam * (rho * l1 + (1.0 - rho) * np.sqrt(sq))


@kernel(nogil=True)
def row_prox(pen: int, v, t: float, lam: float, rho: float, out) -> None:
    """out = prox_{tP}(v) of one row (formulas in the module docstring)."""
    m = v.shape[0]
    if pen == L2:
        for r in range(m):
            out[r] = v[r] / (1.0 + t * lam)
        return
    if pen == L1 or pen == ELASTICNET:
        thr = t * lam * (1.0 if pen == L1 else rho)
        scale = 1.0 if pen == L1 else 1.0 / (1.0 + t * lam * (1.0 - rho))
        for r in range(m):
            out[r] = _soft(v[r], thr) * scale
        return
    group, ridge = t * lam, 1.0
    if pen == GROUP_ELASTICNET:
        group, ridge = t * lam * rho, 1.0 + t * lam * (1.0 - rho)
    if pen == SPARSE_GROUP:
        for r in range(m):
            out[r] = _soft(v[r], t * lam * rho)
        group = t * lam * (1.0 - rho)
    else:
        for r in range(m):
            out[r] = v[r]
    nrm = _norm(out)
    scale = 1.0 - group / nrm if nrm > 0.0 else 0.0
    if scale <= 0.0:
        scale = 0.0
    for r in range(m):
        out[r] *= scale / ridge


@kernel(nogil=True)
def row_prox_diag(pen: int, w, g, L, lam: float, rho: float, out) -> None:
    """out = argmin_u gᵀ(u − w) + ½ Σ_r L_r (u_r − w_r)² + P(u) of one row: the block step of
    Tseng and Yun with a diagonal H = diag(L), L_r > 0 (`row_prox` is H = L·I). With P's ℓ1
    weight a1, ridge weight c and group weight a (l1/l2: 0, 0, λ; group_elasticnet: 0, λ(1 − ρ),
    λρ; l1: λ, 0, 0; l2: 0, λ, 0; elasticnet: λρ, λ(1 − ρ), 0; sparse_group: λρ, 0, λ(1 − ρ)) and
    z_r = soft(L_r w_r − g_r, a1), the optimality condition L_r(u_r − w_r) + g_r + a1 ∂|u_r| +
    c u_r + a u/‖u‖ ∋ 0 gives u = 0 when ‖z‖ ≤ a, else u_r = z_r t / (t D_r + a) with D_r = L_r + c
    and t = ‖u‖ the root of ψ(t) = Σ_r z_r² / (t D_r + a)² − 1 (decreasing and convex in t):
    Newton's iterates from t_0 = (‖z‖ − a)/max_r D_r (ψ(t_0) ≥ 0, exact when all D_r are equal)
    rise monotonically to it."""
    m = w.shape[0]
    a1, c, a = 0.0, 0.0, 0.0
    if pen == L1L2:
        a = lam
    elif pen == GROUP_ELASTICNET:
        c, a = lam * (1.0 - rho), lam * rho
    elif pen == L1:
        a1 = lam
    elif pen == L2:
        c = lam
    elif pen == ELASTICNET:
        a1, c = lam * rho, lam * (1.0 - rho)
    else:
        a1, a = lam * rho, lam * (1.0 - rho)
    zz = 0.0
    dmax = 0.0
    for r in range(m):
        out[r] = _soft(L[r] * w[r] - g[r], a1)
        zz += out[r] * out[r]
        dmax = max(dmax, L[r] + c)
    if a == 0.0:
        for r in range(m):
            out[r] = out[r] / (L[r] + c)
        return
    nz = np.sqrt(zz)
    if nz <= a:
        for r in range(m):
            out[r] = 0.0
        return
    t = (nz - a) / dmax
    for _ in range(100):
        psi = -1.0
        dpsi = 0.0
        for r in range(m):
            q = t * (L[r] + c) + a
            psi += out[r] * out[r] / (q * q)
            dpsi -= 2.0 * out[r] * out[r] * (L[r] + c) / (q * q * q)
        if psi <= 0.0:
            break
        dt = -psi / dpsi
        t += dt
        if dt <= 1e-15 * t:
            break
    for r in range(m):
        out[r] = out[r] * t / (t * (L[r] + c) + a)


@kernel(nogil=True)
def row_violation(pen: int, w, g, lam: float, rho: float) -> float:
    """Optimality violation of one row (module docstring; eq. 9 for l1/l2)."""
    m = w.shape[0]
    nw = _norm(w)
    if pen == L1L2:
        ng = _norm(g)
        if nw == 0.0:
            return max(ng - lam, 0.0)
        return abs(ng - lam)
    l1 = lam if pen == L1 else (0.0 if pen in (L2, GROUP_ELASTICNET) else lam * rho)
    ridge = lam if pen == L2 else (lam * (1.0 - rho) if pen in (ELASTICNET, GROUP_ELASTICNET) else 0.0)
    group = lam * (1.0 - rho) if pen == SPARSE_GROUP else (lam * rho if pen == GROUP_ELASTICNET else 0.0)
    s = 0.0
    for r in range(m):
        if w[r] != 0.0:
            z = g[r] + ridge * w[r] + l1 * np.sign(w[r]) + (group * w[r] / nw if group > 0.0 else 0.0)
        else:
            z = _soft(g[r], l1)
        s += z * z
    if nw == 0.0:  # sparse_group, group_elasticnet: the group part's subgradient ball
        return max(np.sqrt(s) - group, 0.0)
    return np.sqrt(s)


@kernel(nogil=True)
def value(pen: int, W, lam: float, rho: float) -> float:
    """P(W) = Σ_j P(W_{j:})."""
    total = 0.0
    for j in range(W.shape[0]):
        total += row_value(pen, W[j], lam, rho)
    return total


@kernel(nogil=True)
def prox(pen: int, V, t: float, lam: float, rho: float):
    """prox_{tP}(V), row by row (P is row-separable)."""
    out = np.empty_like(V)
    for j in range(V.shape[0]):
        row_prox(pen, V[j], t, lam, rho, out[j])
    return out
