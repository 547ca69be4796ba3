"""Per-sample multiclass / multilabel losses ℓ_i(s) of a score vector s = Wᵀx_i ∈ R^m, with
their gradient and (generalized) second derivatives, from Blondel, Seki and Uehara (2013).
The objective's smooth part is L(W) = (1/n) Σ_i ℓ_i(Wᵀx_i).

Labels of sample i are a list Y_i of positive classes (multiclass: Y_i = {y_i}), stored as
CSR-like arrays (lab_ptr, lab_ind); `mark` is a boolean scratch vector with mark[r] = (r ∈ Y_i).

- "squared_hinge" (eq. 2; the label-ranking extension of §4.7 when |Y_i| > 1):
      ℓ_i(s) = Σ_{r ∈ Y_i, r' ∉ Y_i} max(A_{rr'}, 0)²,   A_{rr'} = 1 − (s_r − s_{r'})
  (for multiclass, A_{y_i r'} is the paper's margin matrix entry A(W)_{ir'}, eq. after (4)).
  ∂ℓ/∂s_r −= 2 max(A, 0), ∂ℓ/∂s_{r'} += 2 max(A, 0); generalized second derivatives
  (Mangasarian; eq. 6): h_r, h_{r'} += 2·[A > 0].
- "multitask_squared_hinge" (eq. 11, one-vs-rest): ℓ_i(s) = Σ_r max(1 − Y_ir s_r, 0)²,
  Y_ir = +1 if r ∈ Y_i else −1; ∂ℓ/∂s_r = −2 Y_ir max(·, 0) (eq. 13); h_r = 2·[1 − Y_ir s_r > 0].
- "logistic" (eq. 12, multiclass only): ℓ_i(s) = log(1 + Σ_{r ≠ y} exp(s_r − s_y))
  = log Σ_r exp(s_r) − s_y; ∂ℓ/∂s = p − e_y, p = softmax(s); h_r = p_r (1 − p_r).

`curvature(loss, m)` is a constant c with ∇²ℓ_i ⪯ c·I (generalized Hessian for the hinge
losses), so that the block of G(W)_{j:} is Lipschitz with K_j = (c/n) Σ_i x_ij²:
c = 4(m − 1) for "squared_hinge" (§4.4.2, Appendix A; valid for ranking too: the Hessian is
2× a bipartite graph Laplacian whose largest eigenvalue is ≤ 2·max degree ≤ 2(m − 1)),
c = 2 for "multitask_squared_hinge", c = ½ for "logistic" (λ_max(diag p − ppᵀ) ≤ ½; the
paper's K_j = ½ Σ_i x_ij² with our 1/n averaging).

All functions are row-wise, so chunking the rows never changes a row's result.
"""

from __future__ import annotations

import numpy as np
from numba import njit

SQUARED_HINGE, MULTITASK_SQUARED_HINGE, LOGISTIC = 0, 1, 2
LOSSES = {"squared_hinge": SQUARED_HINGE, "multitask_squared_hinge": MULTITASK_SQUARED_HINGE, "logistic": LOGISTIC}


def curvature(loss: int, m: int) -> float:
    """c with ∇²ℓ_i ⪯ c·I (module docstring)."""
    if loss == SQUARED_HINGE:
        return 4.0 * (m - 1)
    if loss == MULTITASK_SQUARED_HINGE:
        return 2.0
    return 0.5


@njit(cache=True, nogil=True, inline="always")
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
    else:
        y = lab_ind[p0]
        mx = S[i, 0]
        for r in range(1, m):
            mx = max(mx, S[i, r])
        z = 0.0
        for r in range(m):
            z += np.exp(S[i, r] - mx)
        val = np.log(z) + mx - S[i, y]
        if order >= 1:
            for r in range(m):
                p = np.exp(S[i, r] - mx) / z
                d[r] += p * x
                if order >= 2:
                    h[r] += p * (1.0 - p) * x2
            d[y] -= x
    return val


@njit(cache=True, nogil=True)
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
        total += sample_loss(loss, S, i, lab_ind, p0, p1, mark, 1.0, D[k] if order >= 1 else dummy,
                             H[k] if order >= 2 else dummy, order)
        for q in range(p0, p1):
            mark[lab_ind[q]] = False
    return total, D, H


def label_lists(labels, n_rows: int) -> tuple[np.ndarray, np.ndarray]:
    """(lab_ptr, lab_ind) of a chunk's labels: int class ids or a CSR 0/1 indicator."""
    import scipy.sparse as sp

    if sp.issparse(labels):
        L = sp.csr_matrix(labels)
        L.eliminate_zeros()
        return L.indptr.astype(np.int64), L.indices.astype(np.int64)
    return np.arange(n_rows + 1, dtype=np.int64), np.asarray(labels, dtype=np.int64)


def loss_sum(loss: int, S: np.ndarray, labels) -> float:
    """Σ_i ℓ_i(S_i) over all rows of S for labels in a chunk's format."""
    lab_ptr, lab_ind = label_lists(labels, S.shape[0])
    return rows_loss(loss, np.ascontiguousarray(S, dtype=np.float64), lab_ptr, lab_ind,
                     np.arange(S.shape[0], dtype=np.int64), 0)[0]


def loss_grad(loss: int, S: np.ndarray, labels) -> tuple[float, np.ndarray]:
    """(Σ_i ℓ_i(S_i), D) with D_i = ∂ℓ_i/∂s at S_i; the full gradient is (1/n) Xᵀ D."""
    lab_ptr, lab_ind = label_lists(labels, S.shape[0])
    total, D, _ = rows_loss(loss, np.ascontiguousarray(S, dtype=np.float64), lab_ptr, lab_ind,
                            np.arange(S.shape[0], dtype=np.int64), 1)
    return total, D
