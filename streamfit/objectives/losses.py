"""Per-sample multiclass / multilabel losses ℓ_i(s) of a score vector s = Wᵀx_i + b ∈ R^m, with
their gradient and (generalized) second derivatives: the one numbering of loss codes that every
solver's kernels branch on. The objective's smooth part is L(W) = (1/n) Σ_i ℓ_i(s_i).

Labels of sample i are a list Y_i of positive classes (multiclass: Y_i = {y_i}), stored as
CSR-like arrays (lab_ptr, lab_ind); `mark` is a boolean scratch vector with mark[r] = (r ∈ Y_i),
Y_ir = +1 if r ∈ Y_i else −1 (signs) and y_ir = [r ∈ Y_i] (0/1 targets).

Blondel, Seki and Uehara (2013), the bcd solver:
- SQUARED_HINGE "squared_hinge" (eq. 2; the label-ranking extension of §4.7 when |Y_i| > 1):
      ℓ_i(s) = Σ_{r ∈ Y_i, r' ∉ Y_i} max(A_{rr'}, 0)²,   A_{rr'} = 1 − (s_r − s_{r'})
  (for multiclass, A_{y_i r'} is the paper's margin matrix entry A(W)_{ir'}, eq. after (4)).
  ∂ℓ/∂s_r −= 2 max(A, 0), ∂ℓ/∂s_{r'} += 2 max(A, 0); generalized second derivatives
  (Mangasarian; eq. 6): h_r, h_{r'} += 2·[A > 0].
- MULTITASK_SQUARED_HINGE "multitask_squared_hinge" (eq. 11, one-vs-rest):
  ℓ_i(s) = Σ_r max(1 − Y_ir s_r, 0)²; ∂ℓ/∂s_r = −2 Y_ir max(·, 0) (eq. 13);
  h_r = 2·[1 − Y_ir s_r > 0].
- LOGISTIC "logistic" (eq. 12, multiclass only): ℓ_i(s) = log(1 + Σ_{r ≠ y} exp(s_r − s_y))
  = log Σ_r exp(s_r) − s_y; ∂ℓ/∂s = p − e_y, p = softmax(s); h_r = p_r (1 − p_r).
  This is also Agarwal et al. (2014)'s calibrated loss (13) of the softmax link, Φ(u) = log Σ e^u.

Yen et al. (2017), the ppdsparse solver, one binary problem (9) per class with bias:
- OVR_HINGE "ovr_hinge": ℓ_i(s) = Σ_r max(1 − Y_ir s_r, 0); subgradient −Y_ir [1 − Y_ir s_r > 0]; h = 0.
- OVR_HALF_SQUARED_HINGE "ovr_half_squared_hinge": ℓ_i(s) = Σ_r ½ max(1 − Y_ir s_r, 0)² (§5.2: ½ of
  multitask_squared_hinge); ∂ℓ/∂s_r = −Y_ir max(·, 0); h_r = [1 − Y_ir s_r > 0].

Chierchia et al. (2015), the fbpd solver:
- CRAMMER_SINGER_HINGE "crammer_singer_hinge" (eq. 6 with μ_ℓ ≡ 1, multiclass only):
  ℓ_i(s) = max_r (s_r − s_y + [r ≠ y]); a subgradient is e_{r*} − e_y (r* the first maximiser); h = 0.

Agarwal et al. (2014), the stagewise solver, calibrated losses ℓ(u; y) = Φ(u) − yᵀu (eq. 13) of
the links g = ∇Φ (eq. 12), with 0/1 targets y_i:
- SQUARED "squared" (identity link, Φ = ½‖u‖², up to the constant ½‖y‖²): ℓ_i(s) = ½ ‖s − y_i‖²;
  ∂ℓ/∂s = s − y_i; h_r = 1.
- LOGISTIC (softmax link, above).
- SIGMOID_LOGISTIC "sigmoid_logistic" (per-label sigmoid link, multilabel):
  ℓ_i(s) = Σ_r log(1 + e^{s_r}) − y_ir s_r; ∂ℓ/∂s_r = σ(s_r) − y_ir; h_r = σ(s_r)(1 − σ(s_r)).

`curvature(loss, m)` is a constant c with ∇²ℓ_i ⪯ c·I (generalized Hessian for the hinge
losses), so that the block of G(W)_{j:} is Lipschitz with K_j = (c/n) Σ_i x_ij²:
c = 4(m − 1) for "squared_hinge" (§4.4.2, Appendix A; valid for ranking too: the Hessian is
2× a bipartite graph Laplacian whose largest eigenvalue is ≤ 2·max degree ≤ 2(m − 1)),
c = 2 for "multitask_squared_hinge", c = ½ for "logistic" (λ_max(diag p − ppᵀ) ≤ ½; the
paper's K_j = ½ Σ_i x_ij² with our 1/n averaging).

`dual_loss(loss, S, lab_ptr, lab_ind, c_max)`: the loss part of a Fenchel dual point, for the
duality gap of the bcd solver. The dual of min_W (1/n) Σ_i ℓ_i(Wᵀx_i) + P(W) is
D(U) = −(1/n) Σ_i ℓ_i*(U_i) − P*(−XᵀU/n); the point used is U = c·∇ℓ(S) (the loss gradient at
the current scores, so XᵀU/n = c·G(W)), with c ≤ c_max making P*(−c G) finite (for a norm
penalty: c‖G‖_* ≤ λ). Returned: max over c ∈ [0, c_max] of a lower bound of −Σ_i ℓ_i*(c ∇ℓ_i):
- squared hinges (eq. 2, ranking, eq. 11): ℓ_i = Σ_pairs φ(a), φ(a) = max(a, 0)², a affine in s
  with constant 1; φ(a) = sup_{β≥0} βa − β²/4, so with β = 2c·max(a, 0) (U = c∇ℓ_i is one
  representation of the infimum defining ℓ_i*) −ℓ_i*(c∇ℓ_i) ≥ Σ (2c a₊ − c² a₊²); summed over i:
  2c H − c² Q with H = Σ a₊, Q = Σ a₊² (the loss), maximal at c = min(H/Q, c_max);
- logistic (eq. 12): ℓ_i* (u) = Σ_r q_r log q_r with q = u + e_y, so −ℓ_i*(c(p − e_y)) is the
  entropy of c p + (1 − c) e_y; c = min(1, c_max).
At the optimum (c = 1) the bound is tight (strong duality). Defined for these three losses only
(the duals of ppdsparse and fbpd are in streamfit.objectives.Objective).

All functions are row-wise, so chunking the rows never changes a row's result.
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel

SQUARED_HINGE = 0
MULTITASK_SQUARED_HINGE = 1
LOGISTIC = 2
OVR_HINGE = 3
OVR_HALF_SQUARED_HINGE = 4
CRAMMER_SINGER_HINGE = 5
SQUARED = 6
SIGMOID_LOGISTIC = 7
LOSSES = {
    "squared_hinge": SQUARED_HINGE,
    "multitask_squared_hinge": MULTITASK_SQUARED_HINGE,
    "logistic": LOGISTIC,
    "ovr_hinge": OVR_HINGE,
    "ovr_half_squared_hinge": OVR_HALF_SQUARED_HINGE,
    "crammer_singer_hinge": CRAMMER_SINGER_HINGE,
    "squared": SQUARED,
    "sigmoid_logistic": SIGMOID_LOGISTIC,
}


def curvature(loss: int, m: int) -> float:
    """c with ∇²ℓ_i ⪯ c·I (module docstring; 1 for the half squared hinge and the squared loss,
    ¼ for the sigmoid link). The hinge and the Crammer–Singer hinge are not smooth: no such c."""
    if loss == SQUARED_HINGE:
        return 4.0 * (m - 1)
    if loss == MULTITASK_SQUARED_HINGE:
        return 2.0
    if loss == LOGISTIC:
        return 0.5
    if loss in (OVR_HALF_SQUARED_HINGE, SQUARED):
        return 1.0
    if loss == SIGMOID_LOGISTIC:
        return 0.25
    raise ValueError(f"loss code {loss} is not smooth: it has no curvature bound")


@kernel(nogil=True, inline="always")
def _lse_parts(S, i: int):
    """(max_r S_ir, Σ_r exp(S_ir − max)): log Σ_r exp(S_ir) = log(z) + max, without overflow."""
    mx = S[i, 0]
    for r in range(1, S.shape[1]):
        mx = max(mx, S[i, r])
    z = 0.0
    for r in range(S.shape[1]):
        z += np.exp(S[i, r] - mx)
    return mx, z


@kernel(nogil=True, inline="always")
def sample_loss(loss: int, S, i: int, lab_ind, p0: int, p1: int, mark, x: float, d, h, order: int) -> float:
    """ℓ_i(s) for s = S[i] and Y_i = lab_ind[p0:p1] (mark[r] = r ∈ Y_i). With order ≥ 1 adds
    x·∂ℓ/∂s to d, with order 2 also x²·(second derivatives) to h (x = x_ij accumulates a
    partial gradient, Algorithm 3; x = 1 gives ∂ℓ/∂s itself). Indices rather than slices keep
    the inner loop free of array views."""
    m = S.shape[1]
    val = 0.0
    x2 = x * x
    if loss == SQUARED_HINGE:
        for q in range(p0, p1):
            p = lab_ind[q]
            sp_ = S[i, p]
            for r in range(m):
                if mark[r]:
                    continue
                a = 1.0 - sp_ + S[i, r]
                if a > 0.0:
                    val += a * a
                    if order >= 1:
                        d[p] -= 2.0 * a * x
                        d[r] += 2.0 * a * x
                    if order >= 2:
                        h[p] += 2.0 * x2
                        h[r] += 2.0 * x2
    elif loss == MULTITASK_SQUARED_HINGE:
        for r in range(m):
            y = 1.0 if mark[r] else -1.0
            a = 1.0 - y * S[i, r]
            if a > 0.0:
                val += a * a
                if order >= 1:
                    d[r] -= 2.0 * y * a * x
                if order >= 2:
                    h[r] += 2.0 * x2
    elif loss == LOGISTIC:
        y = lab_ind[p0]
        mx, z = _lse_parts(S, i)
        val = np.log(z) + mx - S[i, y]
        if order >= 1:
            for r in range(m):
                p = np.exp(S[i, r] - mx) / z
                d[r] += p * x
                if order >= 2:
                    h[r] += p * (1.0 - p) * x2
            d[y] -= x
    elif loss == OVR_HINGE or loss == OVR_HALF_SQUARED_HINGE:
        half = loss == OVR_HALF_SQUARED_HINGE
        for r in range(m):
            y = 1.0 if mark[r] else -1.0
            a = 1.0 - y * S[i, r]
            if a > 0.0:
                val += 0.5 * a * a if half else a
                if order >= 1:
                    d[r] -= y * (a if half else 1.0) * x
                if order >= 2 and half:
                    h[r] += x2
    elif loss == CRAMMER_SINGER_HINGE:
        y = lab_ind[p0]
        top = y
        val = 0.0
        for r in range(m):
            if r != y and S[i, r] - S[i, y] + 1.0 > val:
                val = S[i, r] - S[i, y] + 1.0
                top = r
        if order >= 1 and top != y:
            d[top] += x
            d[y] -= x
    elif loss == SQUARED:
        for r in range(m):
            e = S[i, r] - (1.0 if mark[r] else 0.0)
            val += 0.5 * e * e
            if order >= 1:
                d[r] += e * x
            if order >= 2:
                h[r] += x2
    else:  # SIGMOID_LOGISTIC
        for r in range(m):
            u = S[i, r]
            sig = 0.5 * (1.0 + np.tanh(0.5 * u))  # σ(u), overflow-free
            val += max(u, 0.0) + np.log1p(np.exp(-abs(u))) - (u if mark[r] else 0.0)
            if order >= 1:
                d[r] += (sig - (1.0 if mark[r] else 0.0)) * x
            if order >= 2:
                h[r] += sig * (1.0 - sig) * x2
    return val


@kernel(nogil=True)
def rows_loss(loss: int, S, lab_ptr, lab_ind, rows, order: int):
    """(Σ_{i ∈ rows} ℓ_i(S_i), D, H) with D[k] = ∂ℓ_i/∂s and H[k] the second derivatives of
    row i = rows[k] (D, H are empty when not asked for by `order`)."""
    m = S.shape[1]
    nr = rows.shape[0]
    D = np.zeros((nr if order >= 1 else 0, m))
    H = np.zeros((nr if order >= 2 else 0, m))
    mark = np.zeros(m, dtype=np.bool_)
    dummy = np.zeros(m)
    total = 0.0
    for k in range(nr):
        i = rows[k]
        p0, p1 = lab_ptr[i], lab_ptr[i + 1]
        for q in range(p0, p1):
            mark[lab_ind[q]] = True
        total += sample_loss(
            loss, S, i, lab_ind, p0, p1, mark, 1.0, D[k] if order >= 1 else dummy, H[k] if order >= 2 else dummy, order
        )
        for q in range(p0, p1):
            mark[lab_ind[q]] = False
    return total, D, H


@kernel(nogil=True)
def dual_loss(loss: int, S, lab_ptr, lab_ind, c_max: float) -> float:
    """max_{0 ≤ c ≤ c_max} of a lower bound of −Σ_i ℓ_i*(c ∇ℓ_i(S_i)) (module docstring)."""
    n, m = S.shape
    mark = np.zeros(m, dtype=np.bool_)
    if loss == LOGISTIC:
        c = min(1.0, c_max)
        total = 0.0
        for i in range(n):
            y = lab_ind[lab_ptr[i]]
            mx, z = _lse_parts(S, i)
            for r in range(m):
                q = c * np.exp(S[i, r] - mx) / z + (1.0 - c if r == y else 0.0)
                if q > 0.0:
                    total -= q * np.log(q)
        return total
    hsum = 0.0
    qsum = 0.0
    for i in range(n):
        p0, p1 = lab_ptr[i], lab_ptr[i + 1]
        for q in range(p0, p1):
            mark[lab_ind[q]] = True
        if loss == SQUARED_HINGE:
            for q in range(p0, p1):
                sp_ = S[i, lab_ind[q]]
                for r in range(m):
                    if not mark[r]:
                        a = 1.0 - sp_ + S[i, r]
                        if a > 0.0:
                            hsum += a
                            qsum += a * a
        else:
            for r in range(m):
                a = 1.0 - (1.0 if mark[r] else -1.0) * S[i, r]
                if a > 0.0:
                    hsum += a
                    qsum += a * a
        for q in range(p0, p1):
            mark[lab_ind[q]] = False
    if qsum == 0.0:
        return 0.0
    c = min(hsum / qsum, c_max)
    return 2.0 * c * hsum - c * c * qsum


def label_lists(labels, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(lab_ptr, lab_ind) of a chunk's labels: int class ids (n_rows,) or a 0/1 indicator
    (n_rows × m, CSR or dense; explicit zeros dropped; the labels are never modified: a store's
    chunks are read-only)."""
    import scipy.sparse as sp

    if not sp.issparse(labels) and np.ndim(labels) == 2:
        labels = sp.csr_matrix(np.asarray(labels))
    if sp.issparse(labels):
        L = sp.csr_matrix(labels)  # shares the arrays of a CSR input
        if not np.all(L.data != 0):
            L = L.copy()
            L.eliminate_zeros()
        return L.indptr.astype(np.int64), L.indices.astype(np.int64)
    return np.arange(n_rows + 1, dtype=np.int64), np.asarray(labels, dtype=np.int64)


def loss_sum(loss: int, S: np.ndarray, labels) -> float:
    """Σ_i ℓ_i(S_i) over all rows of S for labels in a chunk's format."""
    lab_ptr, lab_ind = label_lists(labels, S.shape[0])
    return rows_loss(
        loss, np.ascontiguousarray(S, dtype=np.float64), lab_ptr, lab_ind, np.arange(S.shape[0], dtype=np.int64), 0
    )[0]
