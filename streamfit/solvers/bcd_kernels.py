"""Numba kernels of the block coordinate descent solver (Blondel, Seki and Uehara 2013).

`bcd_epoch` runs one outer iteration of Algorithm 1 in memory: for each block j of the
given order it computes the partial gradient G(W)_{j:} and the generalized second derivatives
h(W)_{j:} from the columns of X (CSC) and the maintained scores S = XW (Algorithm 3, §4.3),
solves the block sub-problem (eqs. 3–4, Algorithm 2) and updates W_{j:} and the rows of S
touched by feature j. The paper's margin matrix A(W)_{ir} = 1 − (S_{iy_i} − S_{ir}) is read
off S inside the loss, so the cost per block stays O(n̂ (m − 1)).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from streamfit.losses import sample_loss
from streamfit.penalties import L1L2, row_prox, row_value, row_violation


@njit(cache=True, nogil=True)
def bcd_epoch(blocks, indptr, indices, data, S, W, lab_ptr, lab_ind, loss, pen, lam, rho, line_search, K,
              sigma, omega, max_ls, eps, active, shrink_thr):
    """One outer iteration over `blocks` (feature ids, in order). Updates W and S in place.

    line_search=True: BCD(LS) (§4.4.1) — L_j = max(‖h_j‖∞, ε), backtracking α = 1, ω, ω², …
    until the sufficient decrease condition (7) holds (at most max_ls trials; none passing
    leaves the block unchanged). line_search=False: BCD(CST) (§4.4.2) — L_j = K[j], α = 1.

    Shrinking (§5.2.4, Yuan et al. 2010's rule carried to ℓ1/ℓ2): a block with W_{j:} = 0 and
    ‖G_{j:}‖ < shrink_thr (= λ − M/n, M the largest violation of the previous outer
    iteration; −inf disables it) is marked inactive and skipped until reactivated.

    Returns (Σ v^t, max v^t, number of backtracking steps beyond the first trial), with v^t the
    violation (9) of each visited block.
    """
    n, m = S.shape
    g = np.empty(m)
    h = np.empty(m)
    v = np.empty(m)
    wnew = np.empty(m)
    delta = np.empty(m)
    trial = np.empty(m)
    s_new = np.empty((1, m))
    mark = np.zeros(m, dtype=np.bool_)
    max_nnz = 0
    for j in range(indptr.shape[0] - 1):
        max_nnz = max(max_nnz, indptr[j + 1] - indptr[j])
    old_loss = np.empty(max_nnz)
    viol_sum = 0.0
    viol_max = 0.0
    extra_steps = 0
    for t in range(blocks.shape[0]):
        j = blocks[t]
        if not active[j]:
            continue
        lo, hi = indptr[j], indptr[j + 1]
        g[:] = 0.0
        h[:] = 0.0
        # Algorithm 3: G(W)_{j:} and h(W)_{j:} over the non-zeros of column j
        for k in range(lo, hi):
            i = indices[k]
            x = data[k]
            p0, p1 = lab_ptr[i], lab_ptr[i + 1]
            for q in range(p0, p1):
                mark[lab_ind[q]] = True
            old_loss[k - lo] = sample_loss(loss, S, i, lab_ind, p0, p1, mark, x, g, h, 2 if line_search else 1)
            for q in range(p0, p1):
                mark[lab_ind[q]] = False
        w = W[j]
        nw2 = 0.0
        ng2 = 0.0
        for r in range(m):
            g[r] /= n
            nw2 += w[r] * w[r]
            ng2 += g[r] * g[r]
        if pen == L1L2 and nw2 == 0.0 and np.sqrt(ng2) < shrink_thr:
            active[j] = False
            continue
        vt = row_violation(pen, w, g, lam, rho)
        viol_sum += vt
        viol_max = max(viol_max, vt)
        # Algorithm 2: V = W_j − G_j / L_j, W* = prox_{P/L_j}(V), δ = W* − W_j
        if line_search:
            L = eps
            for r in range(m):
                L = max(L, h[r] / n)
        else:
            L = K[j]
        for r in range(m):
            v[r] = w[r] - g[r] / L
        row_prox(pen, v, 1.0 / L, lam, rho, wnew)
        moved = False
        for r in range(m):
            delta[r] = wnew[r] - w[r]
            moved = moved or delta[r] != 0.0
        if not moved:
            continue
        alpha = 1.0
        if line_search:
            # sufficient decrease (7): F(W + αδ) − F(W) ≤ σα (G_jᵀδ + P(W_j + δ) − P(W_j))
            p_old = row_value(pen, w, lam, rho)
            bound = row_value(pen, wnew, lam, rho) - p_old
            for r in range(m):
                bound += g[r] * delta[r]
            accepted = False
            for step in range(max_ls):
                diff = 0.0
                for k in range(lo, hi):
                    i = indices[k]
                    x = data[k]
                    p0, p1 = lab_ptr[i], lab_ptr[i + 1]
                    for q in range(p0, p1):
                        mark[lab_ind[q]] = True
                    for r in range(m):
                        s_new[0, r] = S[i, r] + alpha * delta[r] * x
                    diff += sample_loss(loss, s_new, 0, lab_ind, p0, p1, mark, x, g, h, 0) - old_loss[k - lo]
                    for q in range(p0, p1):
                        mark[lab_ind[q]] = False
                for r in range(m):
                    trial[r] = w[r] + alpha * delta[r]
                diff = diff / n + row_value(pen, trial, lam, rho) - p_old
                if diff <= sigma * alpha * bound:
                    accepted = True
                    break
                extra_steps += 1
                alpha *= omega
            if not accepted:
                continue
        for r in range(m):
            w[r] += alpha * delta[r]
        # lazy update of the scores (and so of A(W)): S_{i:} += α δ x_ij for x_ij ≠ 0
        for k in range(lo, hi):
            i = indices[k]
            x = data[k]
            for r in range(m):
                S[i, r] += alpha * delta[r] * x
    return viol_sum, viol_max, extra_steps


@njit(cache=True, nogil=True)
def group_update(W_B, G, L, pen, lam, rho):
    """Simultaneous block steps of a feature group (out-of-core mode): for every block b,
    δ_b = prox_{P/L_b}(W_b − G_b / L_b) − W_b. Returns (δ, violations (9) at W_B)."""
    nb, m = W_B.shape
    delta = np.zeros((nb, m))
    viol = np.zeros(nb)
    v = np.empty(m)
    wnew = np.empty(m)
    for b in range(nb):
        viol[b] = row_violation(pen, W_B[b], G[b], lam, rho)
        for r in range(m):
            v[r] = W_B[b, r] - G[b, r] / L[b]
        row_prox(pen, v, 1.0 / L[b], lam, rho, wnew)
        for r in range(m):
            delta[b, r] = wnew[r] - W_B[b, r]
    return delta, viol
