"""Numerical kernels of the fbpd solver (Chierchia et al. 2015): the per-row dual updates of
Algorithms 1 and 2 (the regularizers g, their proximity operators and dual norms are in
streamfit.objectives.class_block_penalties).

Weights are stored feature-major, W ∈ ℝ^{M×K} (column k is x^(k) of (1)); a block of the
mixed norms is `group_size` consecutive features of one class, x^(k,b) of §2.2 (the last block
of a class may be shorter). Margins: for scores s_ℓ = Wᵀu_ℓ + b, (T_ℓ x)_k = s_ℓk − s_ℓz_ℓ, and
r_ℓk = 1 for k ≠ z_ℓ, 0 for k = z_ℓ (μ_ℓ ≡ 1), so h_ℓ(T_ℓ x) = max_k (T_ℓ x + r_ℓ)_k is the
Crammer–Singer hinge (6). The adjoint: T_ℓᵀ v = (u_ℓ a_ℓᵀ, a_ℓ) with a_ℓ = v − (Σ_k v_k) e_{z_ℓ}.
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel, prefetch
from streamfit.projections import (
    epigraph_max_threshold,
    simplex_threshold,
)

# -- per-row dual updates ------------------------------------------------------------------

PREFETCH_AHEAD = 16  # stored entries between a row's prefetch and its use (8, 16, 32 alike: docs/benchmarks.md)


@kernel(nogil=True, inline="always")
def _prefetch_row(A: np.ndarray, i) -> None:
    """Prefetch every cache line of row i of the C-contiguous 2-D float64 A (8 entries a line)."""
    width = A.shape[1]
    for k in range(0, width, 8):
        prefetch(A, i, k)
    prefetch(A, i, width - 1)


@kernel(nogil=True)
def regularized_chunk_step(
    indptr,
    indices,
    data,
    z: np.ndarray,
    Y: np.ndarray,
    W2: np.ndarray,
    b2: np.ndarray,
    step: float,
    GW: np.ndarray,
    Gb: np.ndarray,
    preconditioned: bool,
):
    """One chunk's pass of Algorithm 1: for each row ℓ of the CSR chunk (indptr, indices, data;
    its columns renumbered to the compact rows of W2 and GW, `FBPDSolver.used_rows`), its
    scores at x⁺ and x (s = Wᵀu_ℓ + b with W2 = [W⁺ W], b2 = [b⁺ b]), Algorithm 1's dual
    update with duals scaled to the unit simplex (Y = n·y, y ∈ (S_{1/n})^L),
        Ỹ_ℓ = P_{S_1}(Y_ℓ + step_ℓ·(T_ℓ(2x⁺ − x) + r_ℓ)),  step_ℓ = nσ_ℓ = step / w_ℓ
    with w_ℓ = 2(‖u_ℓ‖₁ + 1), the absolute sum of each row (ℓ, k ≠ z_ℓ) of T, when
    `preconditioned` (Pock and Chambolle's σ_ℓ = σ/w_ℓ), else w_ℓ = 1
    (into a new array; Y is left as it is), and its share of the adjoint,
    T_ℓᵀỸ_ℓ = (u_ℓ a_ℓᵀ, a_ℓ), added into GW (U × K, compact rows, no −0.0 entry: np.zeros)
    and Gb (K). No transpose of the chunk and no scores array.

    Two loops over the rows, each prefetching the rows of W2 (or GW) that the stored entry
    PREFETCH_AHEAD places further on will need (the pass waits on memory: W2 and GW are read and
    written a random row per stored entry). The first scores and projects every row; the second
    adds u_ℓ a_ℓᵀ into GW for the rows whose a_ℓ has a non-zero entry, in the order of the rows.
    A row left out (Ỹ_ℓ = e_{z_ℓ}: its hinge term is inactive, a fifth to a half of the rows on
    text) would only add ±0.0 to each GW[j, k]: an entry that is not −0.0 stays as it is, and
    GW's entries start at +0.0 and never become −0.0 (a sum of two non-zeros that cancel is
    +0.0), so GW is bitwise the fused single loop's.

    Returns (Ỹ, hinge sum Σ_ℓ h_ℓ(T_ℓ x⁺), Σ_ℓ r_ℓᵀỸ_ℓ, rows whose top score at x⁺ is z_ℓ,
    Σ_ℓ w_ℓ‖Y_ℓ − Ỹ_ℓ‖², ⟨Y − Ỹ, T(x − x⁺)⟩, the row weights w) — the fifth and sixth are the
    dual parts of the fixed-point residual."""
    n, K = Y.shape
    nnz = indptr[n]
    Yt = np.empty_like(Y)
    totals = np.empty(n)  # Σ_k Ỹ_ℓk
    weights = np.ones(n)
    active = np.empty(K, np.int64)
    aside = np.empty(K, np.int64)
    w = np.empty(K)
    s = np.empty(2 * K)
    hinge = 0.0
    r_dot = 0.0
    correct = 0
    move = 0.0
    coupling = 0.0
    for i in range(n):
        for k in range(2 * K):
            s[k] = 0.0
        l1 = 0.0
        for p in range(indptr[i], indptr[i + 1]):
            if p + PREFETCH_AHEAD < nnz:
                _prefetch_row(W2, indices[p + PREFETCH_AHEAD])
            j = indices[p]
            v = data[p]
            l1 += abs(v)
            for k in range(2 * K):
                s[k] += v * W2[j, k]
        for k in range(2 * K):
            s[k] += b2[k]
        row_step = step
        if preconditioned:
            weights[i] = 2.0 * (l1 + 1.0)
            row_step = step / weights[i]
        zi = z[i]
        s_new_z = s[zi]
        s_old_z = s[K + zi]
        worst = 0.0
        top = 0
        for k in range(K):
            m_new = s[k] - s_new_z
            r = 0.0 if k == zi else 1.0
            worst = max(worst, m_new + r)
            if s[k] > s[top]:
                top = k
            w[k] = Y[i, k] + row_step * (2.0 * m_new - (s[K + k] - s_old_z) + r)
        hinge += worst
        correct += top == zi
        tau = simplex_threshold(w, 1.0, active, aside)
        total = 0.0
        for k in range(K):
            y = max(w[k] - tau, 0.0)
            Yt[i, k] = y
            total += y
            if k != zi:
                r_dot += y
            d = Y[i, k] - y
            move += weights[i] * (d * d)
            coupling += d * ((s[K + k] - s_old_z) - (s[k] - s_new_z))
        totals[i] = total
    for i in range(n):
        zi = z[i]
        for k in range(K):  # a_ℓ = Ỹ_ℓ − (Σ_k Ỹ_ℓk) e_{z_ℓ}, into w
            w[k] = Yt[i, k]
        w[zi] -= totals[i]
        active_row = False
        for k in range(K):
            Gb[k] += w[k]
            active_row |= w[k] != 0.0
        if not active_row:
            continue
        end = indptr[i + 1]
        for p in range(indptr[i], end):
            if p + PREFETCH_AHEAD < end:
                _prefetch_row(GW, indices[p + PREFETCH_AHEAD])
            j = indices[p]
            v = data[p]
            for k in range(K):
                GW[j, k] += v * w[k]
    return Yt, hinge, r_dot, correct, move, coupling, weights


@kernel(nogil=True)
def csr_scores(indptr, indices, data, W2: np.ndarray, b2: np.ndarray) -> np.ndarray:
    """X·W2 + b2 for a CSR chunk (rows × columns of W2)."""
    n, m = len(indptr) - 1, W2.shape[1]
    S = np.zeros((n, m))
    for i in range(n):
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            v = data[p]
            for k in range(m):
                S[i, k] += v * W2[j, k]
        for k in range(m):
            S[i, k] += b2[k]
    return S


@kernel(nogil=True)
def csr_adjoint(indptr, indices, data, A: np.ndarray, n_features: int):
    """(XᵀA, Σ_ℓ A_ℓ) for a CSR chunk, without transposing it."""
    n, K = A.shape
    GW = np.zeros((n_features, K))
    Gb = np.zeros(K)
    for i in range(n):
        for k in range(K):
            Gb[k] += A[i, k]
        for p in range(indptr[i], indptr[i + 1]):
            j = indices[p]
            v = data[p]
            for k in range(K):
                GW[j, k] += v * A[i, k]
    return GW, Gb


@kernel(nogil=True)
def halpern_combine(new: np.ndarray, old: np.ndarray, anchor: np.ndarray, a: float, c: float, weights: np.ndarray):
    """For flat arrays of len(weights) rows: next = a(2·new − old) + c·anchor (Halpern with
    reflection), written over `new` (each entry read before it is written: no rows × K
    temporary), and returns the weighted squared norms Σ_ℓ w_ℓ‖old_ℓ − new_ℓ‖² and
    Σ_ℓ w_ℓ‖next_ℓ − anchor_ℓ‖² (w: the rows' inverse dual step scales, 1 without
    preconditioning)."""
    width = new.size // weights.size
    move = 0.0
    jump = 0.0
    for i in range(new.size):
        w = weights[i // width]
        d = old[i] - new[i]
        move += w * (d * d)
        x = a * (2.0 * new[i] - old[i]) + c * anchor[i]
        new[i] = x
        e = x - anchor[i]
        jump += w * (e * e)
    return move, jump


@kernel(nogil=True)
def constrained_dual_step(
    S: np.ndarray,
    z: np.ndarray,
    Y: np.ndarray,
    xi: np.ndarray,
    zeta: np.ndarray,
    tau: float,
    sigma: float,
    shift: float,
    A: np.ndarray,
):
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


@kernel(nogil=True)
def margins_adjoint_rows(S: np.ndarray, z: np.ndarray, A: np.ndarray) -> None:
    """A_ℓ = T_ℓ x for scores S (the norm estimate: T_ℓᵀT_ℓ x = (u_ℓ a_ℓᵀ, a_ℓ) with a_ℓ from A_ℓ)."""
    n, K = A.shape
    for i in range(n):
        zi = z[i]
        total = 0.0
        for k in range(K):
            A[i, k] = S[i, k] - S[i, zi]
            total += A[i, k]
        A[i, zi] -= total


# -- the driver's primal step -------------------------------------------------------------


@kernel(nogil=True)
def l1_primal_step(
    W: np.ndarray, GW: np.ndarray, D: np.ndarray, tau: float, lam: float, Wt: np.ndarray, W2: np.ndarray
) -> np.ndarray:
    """x̃ = prox_{τ_jk·lam|·|}(W − τ_jk·GW) per coordinate, τ_jk = τ·D_jk (D = 1 without
    preconditioning), for the U × K rows the iteration updates (compact: row r is feature
    rows[r], `FBPDSolver.used_rows`), written into Wt; W2 (U × 2K) receives [x̃ W], the weights
    the chunks score with, and is returned. One sweep."""
    U, K = W.shape
    for r in range(U):
        for k in range(K):
            step = tau * D[r, k]
            v = W[r, k] - step * GW[r, k]
            t = max(abs(v) - step * lam, 0.0)
            x = t if v > 0.0 else (-t if v < 0.0 else 0.0)
            Wt[r, k] = x
            W2[r, k] = x
            W2[r, K + k] = W[r, k]
    return W2


@kernel(nogil=True)
def primal_update(
    Wt: np.ndarray,
    W: np.ndarray,
    Wa: np.ndarray,
    Gsum: np.ndarray,
    divisor: float,
    GW: np.ndarray,
    GWa: np.ndarray,
    Wt_prev: np.ndarray,
    D: np.ndarray,
    a: float,
    c: float,
    halpern: bool,
    Gt: np.ndarray,
    rows: np.ndarray,
    positions: np.ndarray,
    values: np.ndarray,
) -> np.ndarray:
    """After a pass, in one sweep over the U × K rows the iteration updates (compact, as
    l1_primal_step's; the features left out are 0 and stay so): G̃ = Gsum/divisor into Gt; with
    `halpern`, the next iterate a(2x̃ − x) + c·x_a and a(2G̃ − G) + c·G_a written over W and GW
    (plain: the next iterate is (x̃, G̃) itself and W, GW are left as they are); and the sums
    the log and the restarts need, in the order of a sweep over all of M × K (the features left
    out add +0.0). Returns stats = [Σ (W − x̃)²/D, ‖x̃ − x̃_prev‖², ‖x̃‖², ‖G̃ − G‖², ‖G̃‖², nnz(x̃),
    ‖G̃‖∞] (D: the primal step scales, the zeros left out; W and G before the update), and
    writes x̃'s non-zero entries |x̃_jk| into values[:nnz] and their places j·K + k in the M × K
    array (j = rows[r]) into positions[:nnz], in the sweep's order (both arrays hold U·K;
    pairwise_sum of them is numpy's ‖x̃‖₁ of the M × K array: the logged g(x̃) of ℓ1)."""
    U, K = W.shape
    moved = changed = norm2 = g_changed = g_norm2 = g_max = 0.0
    nnz = 0
    for r in range(U):
        for k in range(K):
            x = Wt[r, k]
            g = Gsum[r, k] / divisor
            Gt[r, k] = g
            d = W[r, k] - x
            if D[r, k] > 0.0:
                moved += d * d / D[r, k]
            d = x - Wt_prev[r, k]
            changed += d * d
            norm2 += x * x
            d = g - GW[r, k]
            g_changed += d * d
            g_norm2 += g * g
            if x != 0.0:
                positions[nnz] = rows[r] * K + k
                values[nnz] = abs(x)
                nnz += 1
            g_max = max(g_max, abs(g))
            if halpern:
                W[r, k] = a * (2.0 * x - W[r, k]) + c * Wa[r, k]
                GW[r, k] = a * (2.0 * g - GW[r, k]) + c * GWa[r, k]
    return np.array([moved, changed, norm2, g_changed, g_norm2, float(nnz), g_max])


# -- numpy's sums over M × K, from the used rows ---------------------------------------------


@kernel(nogil=True)
def _block_sum(
    positions: np.ndarray, values: np.ndarray, lo: int, n: int, start: int, end: int, r: np.ndarray
) -> float:
    """numpy's sum of a block of n ≤ 128 entries from `lo` (see pairwise_sum); r: scratch for
    its 8 accumulators (one array for the whole sum: a block allocated nothing)."""
    if n < 8:
        res = 0.0
        for p in range(start, end):
            res += values[p]
        return res
    for i in range(8):
        r[i] = 0.0
    body = lo + n - n % 8
    p = start
    while p < end and positions[p] < body:
        r[(positions[p] - lo) % 8] += values[p]
        p += 1
    res = ((r[0] + r[1]) + (r[2] + r[3])) + ((r[4] + r[5]) + (r[6] + r[7]))
    while p < end:
        res += values[p]
        p += 1
    return res


@kernel(nogil=True)
def pairwise_sum(positions: np.ndarray, values: np.ndarray, n: int, count: int) -> float:
    """numpy's sum (its float64 add reduction of a contiguous array: 0.0 plus the pairwise sum,
    blocks of at most 128 entries summed by 8 accumulators as ((r0 + r1) + (r2 + r3)) + ((r4 +
    r5) + (r6 + r7)) and the rest of the block added in turn, longer ranges split at half rounded
    down to a multiple of 8, left + right) of an array of n entries whose non-zero entries are
    values[:count] at positions[:count] (ascending). The zeros left out change nothing: each
    partial sum that would add one adds ±0.0, which leaves it as it is; a range without a
    non-zero entry sums to 0.0. The tree is walked with a stack (numba caches no recursion)."""
    frames = np.empty((128, 5), np.int64)  # lo, n, start, end, combine?; depth ≤ 2·log2(n)
    sums = np.empty(128)
    accumulators = np.empty(8)
    depth = 0
    frames[0, 0], frames[0, 1], frames[0, 2], frames[0, 3], frames[0, 4] = 0, n, 0, count, 0
    top = 1
    while top > 0:
        top -= 1
        lo, m, start, end, combine = frames[top, 0], frames[top, 1], frames[top, 2], frames[top, 3], frames[top, 4]
        if combine:
            right = sums[depth - 1]
            sums[depth - 2] = sums[depth - 2] + right
            depth -= 1
        elif start == end:
            sums[depth] = 0.0
            depth += 1
        elif m <= 128:
            sums[depth] = _block_sum(positions, values, lo, m, start, end, accumulators)
            depth += 1
        else:
            half = m // 2
            half -= half % 8
            mid = start + np.searchsorted(positions[start:end], lo + half)
            frames[top, 4] = 1  # combine the two halves' sums once both are on `sums`
            frames[top + 1, 0], frames[top + 1, 1], frames[top + 1, 2], frames[top + 1, 3] = (
                lo + half,
                m - half,
                mid,
                end,
            )
            frames[top + 1, 4] = 0
            frames[top + 2, 0], frames[top + 2, 1], frames[top + 2, 2], frames[top + 2, 3] = lo, half, start, mid
            frames[top + 2, 4] = 0
            top += 3
    return 0.0 + sums[0]


@kernel(nogil=True)
def scaled_move(W: np.ndarray, Wa: np.ndarray, D: np.ndarray, rows: np.ndarray, n_features: int) -> float:
    """(d·(d/D)).sum() over the entries with D > 0 (the others 0), d = W − Wa, bitwise numpy's
    sum of that n_features × K array, for compact W, Wa, D (U × K: the rows `rows`, ascending;
    the other rows of W and Wa are 0): the weights' part of a restart's ‖D^−½Δx‖², in time of
    the order of U·K."""
    K = W.shape[1]
    count = 0
    for r in range(len(rows)):  # first the non-zeros' count: no array of U·K
        for k in range(K):
            d = W[r, k] - Wa[r, k]
            count += D[r, k] > 0.0 and d * (d / D[r, k]) != 0.0
    positions = np.empty(count, np.int64)
    values = np.empty(count)
    count = 0
    for r in range(len(rows)):
        j = rows[r]
        for k in range(K):
            d = W[r, k] - Wa[r, k]
            if D[r, k] > 0.0:
                v = d * (d / D[r, k])
                if v != 0.0:
                    positions[count] = j * K + k
                    values[count] = v
                    count += 1
    return pairwise_sum(positions, values, n_features * K, count)
