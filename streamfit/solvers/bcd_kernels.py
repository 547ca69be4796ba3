"""Numba kernels of the block coordinate descent solver (Blondel, Seki and Uehara 2013).

`bcd_epoch` runs one outer iteration of Algorithm 1 in memory: for each block j of the
given order it computes the partial gradient G(W)_{j:} and the generalized second derivatives
h(W)_{j:} from the columns of X (CSC) and the maintained scores S = XW (Algorithm 3, §4.3),
solves the block sub-problem (eqs. 3–4, Algorithm 2) and updates W_{j:} and the rows of S
touched by feature j. The paper's margin matrix A(W)_{ir} = 1 − (S_{iy_i} − S_{ir}) is read
off S inside the loss, so the cost per block stays O(n̂ (m − 1)). `group_update` and
`chunk_pass` are the chunks mode's steps and per-chunk pass; `centred_rows` is the chunk tasks'
copy of a chunk on centred columns (the bcd module docstring, "Centred columns").
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel
from streamfit.objectives.losses import sample_loss
from streamfit.objectives.penalties import row_prox, row_prox_diag, row_value, row_violation


@kernel(nogil=True)
def bcd_epoch(
    blocks,
    indptr,
    indices,
    data,
    S,
    W,
    lab_ptr,
    lab_ind,
    loss,
    pen,
    lam,
    rho,
    line_search,
    K,
    sigma,
    omega,
    max_ls,
    eps,
    active,
    shrink_thr,
    free_row,
    diagonal,
):
    """One outer iteration over `blocks` (feature ids, in order). Updates W and S in place.
    Row `free_row` of W (the intercept, the constant column of X; −1: none) is not penalised.

    line_search=True: BCD(LS) (§4.4.1) — L_j = max(‖h_j‖∞, ε), backtracking α = 1, ω, ω², …
    until the sufficient decrease condition (7) holds (at most max_ls trials; none passing
    leaves the block unchanged). Each trial writes S + αδx_j into the column's rows of S and
    puts the old rows back if it fails, so an accepted step costs two passes over column j
    (gradient, trial), not three. line_search=False: BCD(CST) (§4.4.2) — L_j = K[j], α = 1.
    A block may appear several times in `blocks` (the intercept, `BCDSolver._memory_order`).

    Shrinking (§5.2.4, Yuan et al. 2010's rule carried to ℓ1/ℓ2): a feature block with W_{j:} = 0
    and ‖G_{j:}‖ < shrink_thr (= λ − M/n, M the largest violation of the previous outer
    iteration; −inf disables it) is marked inactive and skipped until reactivated (the
    unpenalised intercept's never: the rule rests on the penalty's threshold).

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
    hd = np.empty(m)
    mark = np.zeros(m, dtype=np.bool_)
    max_nnz = 0
    for j in range(indptr.shape[0] - 1):
        max_nnz = max(max_nnz, indptr[j + 1] - indptr[j])
    old_loss = np.empty(max_nnz)
    s_old = np.empty((max_nnz, m))  # the scores of the rows a line-search trial changed
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
        if nw2 == 0.0 and np.sqrt(ng2) < shrink_thr and j != free_row:
            active[j] = False
            continue
        lam_j = 0.0 if j == free_row else lam
        vt = row_violation(pen, w, g, lam_j, rho)
        viol_sum += vt
        viol_max = max(viol_max, vt)
        # Algorithm 2: V = W_j − G_j / L_j, W* = prox_{P/L_j}(V), δ = W* − W_j
        if line_search and diagonal:
            for r in range(m):
                hd[r] = max(h[r] / n, eps)
            row_prox_diag(pen, w, g, hd, lam_j, rho, wnew)
        else:
            if line_search:
                L = eps
                for r in range(m):
                    L = max(L, h[r] / n)
            else:
                L = K[j]
            for r in range(m):
                v[r] = w[r] - g[r] / L
            row_prox(pen, v, 1.0 / L, lam_j, rho, wnew)
        moved = False
        for r in range(m):
            delta[r] = wnew[r] - w[r]
            moved = moved or delta[r] != 0.0
        if not moved:
            continue
        alpha = 1.0
        if line_search:
            # sufficient decrease (7): F(W + αδ) − F(W) ≤ σα (G_jᵀδ + P(W_j + δ) − P(W_j))
            p_old = row_value(pen, w, lam_j, rho)
            bound = row_value(pen, wnew, lam_j, rho) - p_old
            for r in range(m):
                bound += g[r] * delta[r]
            accepted = False
            for _ in range(max_ls):
                # the trial is written into S (the rows' old scores kept in s_old), so that an
                # accepted step, the common case, needs no further pass over the column
                diff = 0.0
                for k in range(lo, hi):
                    i = indices[k]
                    x = data[k]
                    p0, p1 = lab_ptr[i], lab_ptr[i + 1]
                    for q in range(p0, p1):
                        mark[lab_ind[q]] = True
                    for r in range(m):
                        s_old[k - lo, r] = S[i, r]
                        S[i, r] = s_old[k - lo, r] + alpha * delta[r] * x
                    diff += sample_loss(loss, S, i, lab_ind, p0, p1, mark, x, g, h, 0) - old_loss[k - lo]
                    for q in range(p0, p1):
                        mark[lab_ind[q]] = False
                for r in range(m):
                    trial[r] = w[r] + alpha * delta[r]
                diff = diff / n + row_value(pen, trial, lam_j, rho) - p_old
                if diff <= sigma * alpha * bound:
                    accepted = True
                    break
                for k in range(lo, hi):  # rejected: the old scores back
                    i = indices[k]
                    for r in range(m):
                        S[i, r] = s_old[k - lo, r]
                extra_steps += 1
                alpha *= omega
            if not accepted:
                continue
            for r in range(m):
                w[r] += alpha * delta[r]
            continue
        for r in range(m):
            w[r] += delta[r]
        # lazy update of the scores (and so of A(W)): S_{i:} += δ x_ij for x_ij ≠ 0
        for k in range(lo, hi):
            i = indices[k]
            x = data[k]
            for r in range(m):
                S[i, r] += delta[r] * x
    return viol_sum, viol_max, extra_steps


@kernel(nogil=True)
def group_update(W_B, G, L, pen, lam, rho, free_b):
    """Simultaneous block steps of a feature group (out-of-core mode): for every block b,
    δ_b = prox_{P/L_b}(W_b − G_b / L_b) − W_b; block `free_b` (the intercept; −1: none) is not
    penalised (a plain gradient step). Returns (δ, violations (9) at W_B)."""
    nb, m = W_B.shape
    delta = np.zeros((nb, m))
    viol = np.zeros(nb)
    v = np.empty(m)
    wnew = np.empty(m)
    for b in range(nb):
        lam_b = 0.0 if b == free_b else lam
        viol[b] = row_violation(pen, W_B[b], G[b], lam_b, rho)
        for r in range(m):
            v[r] = W_B[b, r] - G[b, r] / L[b]
        row_prox(pen, v, 1.0 / L[b], lam_b, rho, wnew)
        for r in range(m):
            delta[b, r] = wnew[r] - W_B[b, r]
    return delta, viol


@kernel(nogil=True)
def chunk_pass(
    indptr,
    indices,
    data,
    S,
    lab_ptr,
    lab_ind,
    loss,
    commit_pos,
    commit_delta,
    dir_pos,
    dir_delta,
    alphas,
    grad_pos,
    n_grad,
    curv_c,
    full,
    intercept,
):
    """One chunk's share of a chunks-mode pass (bcd module docstring), row by row over X in CSR.
    `*_pos[j]` is the row of feature j in the matching delta / output (−1: not in the group).
    `data` may be the store's float32 values (each x_ij is widened to float64 exactly, so the
    results are those of a float64 copy); `intercept` ≥ 0: every row ends with one more entry,
    x = 1 in column `intercept` (the constant column of the design, last in each row as
    [X, 1] in CSR has it), without a copy of X that holds it.

    1. S_i += Σ_j x_ij Δ_C[commit_pos[j]] (in place);
    2. full: Σ_i ℓ_i(S_i) and #rows whose top score is a label;
    3. u_i = Σ_j x_ij Δ_B[dir_pos[j]]; per candidate α_k, Σ_i ℓ_i(S_i + α_k u_i) − ℓ_i(S_i) and the
       change in top-1 hits;
    4. per candidate, G[k, b] = Σ_i x_ij ∂ℓ_i(S_i + α_k u_i) for j with grad_pos[j] = b, and
       C[k, b] = Σ_i ω_i x_ij² h_i (generalized second derivatives, eq. 6; curv_c = 0) or
       curv_c Σ_i ω_i x_ij², with ω_i the number of such j in row i.
    Returns (Σ ℓ, hits, Δloss[K], Δhits[K], G, C)."""
    n, m = S.shape
    K = alphas.shape[0]
    mc = m if curv_c == 0.0 else 1
    G = np.zeros((K, n_grad, m))
    C = np.zeros((K, n_grad, mc))
    dloss = np.zeros(K)
    dhits = np.zeros(K)
    total = 0.0
    hits = 0
    mark = np.zeros(m, dtype=np.bool_)
    u = np.empty(m)
    s = np.empty((1, m))
    d = np.empty(m)
    h = np.empty(m)
    extra = 1 if intercept >= 0 else 0
    longest = 0
    for i in range(n):
        longest = max(longest, indptr[i + 1] - indptr[i] + extra)
    gb = np.empty(longest, dtype=np.int64)  # the row's entries in the gradient group: output row, x_ij
    gx = np.empty(longest)
    for i in range(n):
        lo, hi = indptr[i], indptr[i + 1]
        moved = False
        omega = 0
        for k in range(lo, hi + extra):
            if k < hi:
                j = np.int64(indices[k])
                x = np.float64(data[k])
            else:
                j = np.int64(intercept)
                x = 1.0
            c = commit_pos[j]
            if c >= 0:
                for r in range(m):
                    S[i, r] += x * commit_delta[c, r]
            b = dir_pos[j]
            if b >= 0:
                if not moved:
                    u[:] = 0.0
                    moved = True
                for r in range(m):
                    u[r] += x * dir_delta[b, r]
            b = grad_pos[j]
            if b >= 0:
                gb[omega] = b
                gx[omega] = x
                omega += 1
        if not (full or moved or omega > 0):
            continue
        p0, p1 = lab_ptr[i], lab_ptr[i + 1]
        for q in range(p0, p1):
            mark[lab_ind[q]] = True
        base = 0.0
        if full or moved:
            base = sample_loss(loss, S, i, lab_ind, p0, p1, mark, 1.0, d, h, 0)
        base_hit = mark[np.argmax(S[i])]
        if full:
            total += base
            hits += base_hit
        for t in range(K):
            for r in range(m):
                s[0, r] = S[i, r] + alphas[t] * u[r] if moved else S[i, r]
            if moved:
                dloss[t] += sample_loss(loss, s, 0, lab_ind, p0, p1, mark, 1.0, d, h, 0) - base
                dhits[t] += mark[np.argmax(s[0])] - base_hit
            if omega == 0:
                continue
            d[:] = 0.0
            h[:] = 0.0
            sample_loss(loss, s, 0, lab_ind, p0, p1, mark, 1.0, d, h, 1 if curv_c > 0.0 else 2)
            # rows the direction does not touch have the same derivatives at every candidate
            t_hi = t + 1 if moved else K
            for e in range(omega):
                b = gb[e]
                x = gx[e]
                w = omega * x * x
                for tt in range(t, t_hi):
                    for r in range(m):
                        G[tt, b, r] += x * d[r]
                    if curv_c == 0.0:
                        for r in range(m):
                            C[tt, b, r] += w * h[r]
                    else:
                        C[tt, b, 0] += curv_c * w
            if not moved:
                break
        for q in range(p0, p1):
            mark[lab_ind[q]] = False
    return total, hits, dloss, dhits, G, C


@kernel(nogil=True)
def _centred_row(indices, data, lo, hi, cols, shift, scale, out_ind, out_val, e):
    """`centred_rows`' row of the stored entries lo:hi: its entries from position e of out_ind /
    out_val (none written where out_ind is empty: the count); returns the position after them."""
    d = shift.shape[0]
    k, c = lo, 0
    write = out_ind.shape[0] > 0
    while k < hi or c < cols.shape[0]:
        j_row = np.int64(indices[k]) if k < hi else d
        j_col = cols[c] if c < cols.shape[0] else d
        j = min(j_row, j_col)
        x = 0.0
        if j_row == j:
            x = np.float64(data[k])
            k += 1
        if j_col == j:
            x -= shift[j]
            c += 1
        if x == 0.0:
            continue
        if write:
            out_ind[e] = j
            out_val[e] = x / scale[j] if scale.shape[0] > 0 else x
        e += 1
    return e


@kernel(nogil=True)
def centred_rows(indptr, indices, data, shift, scale):
    """One chunk's rows (CSR, each row's columns sorted and unique) on the centred columns of the
    chunks mode and FISTA (bcd module docstring, "Centred columns"): entry (i, j) is
    (x_ij − μ_j) / s_j with μ_j = shift[j] on every row (−μ_j / s_j where x_ij = 0) and
    s_j = scale[j] (an empty `scale`: 1), each x_ij widened to float64 first; μ_j = 0 leaves the
    column's entries as stored (divided by s_j). Exact zeros are left out, as scipy's X − μ leaves
    them. Two passes over the chunk's rows (the count, then the values), no other copy of X.
    Returns its CSR arrays (indptr int64, indices int32, data float64): at most nnz + n·c entries
    for c centred columns."""
    n = indptr.shape[0] - 1
    cols = np.flatnonzero(shift != 0.0)
    out_ptr = np.zeros(n + 1, dtype=np.int64)
    none_ind = np.empty(0, dtype=np.int32)
    none_val = np.empty(0)
    for i in range(n):
        count = _centred_row(indices, data, indptr[i], indptr[i + 1], cols, shift, scale, none_ind, none_val, 0)
        out_ptr[i + 1] = out_ptr[i] + count
    out_ind = np.empty(out_ptr[n], dtype=np.int32)
    out_val = np.empty(out_ptr[n])
    for i in range(n):
        _centred_row(indices, data, indptr[i], indptr[i + 1], cols, shift, scale, out_ind, out_val, out_ptr[i])
    return out_ptr, out_ind, out_val
