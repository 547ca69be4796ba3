"""Numba kernels of the multiboost solver (Lin, Shen, van den Hengel and Suter 2012).

Notation of the paper: m samples, K classes, weak learners ħ_l(x) ∈ {−1, +1} (decision stumps
here), coordinates j = (c_j, l_j) with weight w_j ≥ 0, so that F_c(x) = Σ_{j: c_j = c} w_j ħ_{l_j}(x).
For a sample i with label y_i the master problem keeps M[i, y] = μ_(i,y) = exp(F_y(x_i) − F_{y_i}(x_i))
(eq. 15; M[i, y_i] = 1 is unused) and R[i] = Σ_{y ≠ y_i} μ_(i,y).

Per class c the signed dual weight of sample i (eq. 4 with λ = (C/p)μ, eq. 5) is
    g_c[i] = R[i]          if y_i = c   (δh_{i,j}(y) = +ħ(x_i) for every y ≠ y_i)
    g_c[i] = −M[i, c]      if y_i ≠ c   (δh_{i,j}(c) = −ħ(x_i), other y: 0),
so Σ_i Σ_{y≠y_i} μ_(i,y) δh_{i,j}(y) = Σ_i g_{c_j}[i] ħ_{l_j}(x_i) for coordinate j.

The learners' outputs are packed bits: bit i of row l of `bits` (np.packbits order, big
endian within a byte) is 1 when ħ_l(x_i) = 1; where it is 0, ħ_l(x_i) is the learner's `low`:
−1 for a sign stump (ħ ∈ {−1, +1}), 0 for an indicator stump (ħ ∈ {0, 1}); a learner's `sign`
(+1, or −1 for a negated indicator −1[x > t], −1[x ≤ t] or the constant −1) multiplies both
values, so ħ_l = sign_l·(1 on a set bit, else low_l). A pair (i, y) with δh = 0 is in neither D₊
nor D₋ of (21) and is left alone by (20); a negated learner swaps D₊ and D₋ (δh changes sign),
and its weight change δ acts on μ as the change −δ of the learner it negates. A coordinate with
V₋ = 0 (no pair in D₋) is moved to (12)'s minimum log(V₊C/p) at the solver's C also under the
large-C update (13), which has no finite minimum there (coordinate_minimum). Every loop runs in a fixed order, so results do
not depend on threads or on how the data is chunked (sums over chunks go through the engine's
fixed tree).
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel
from streamfit.sorting import stable_argsort


@kernel(nogil=True)
def _bin_of(cuts: np.ndarray, lo: int, hi: int, v: float) -> int:
    """#{k in [lo, hi): cuts[k] < v}: the bin of value v of a feature whose sorted cuts are
    cuts[lo:hi] (bin b holds cuts[b-1] < v <= cuts[b])."""
    a, b = lo, hi
    while a < b:
        mid = (a + b) >> 1
        if cuts[mid] < v:
            a = mid + 1
        else:
            b = mid
    return a - lo


@kernel(nogil=True)
def signed_weights(F: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """G (rows × K): G[i, c] = g_c[i] of the module docstring from scores F (rows × K)."""
    n, K = F.shape
    G = np.empty((n, K))
    for i in range(n):
        yi = labels[i]
        total = 0.0
        for c in range(K):
            if c != yi:
                mu = np.exp(F[i, c] - F[i, yi])
                G[i, c] = -mu
                total += mu
        G[i, yi] = total
    return G


@kernel(nogil=True)
def class_totals(G: np.ndarray, labels: np.ndarray, own: bool) -> tuple[np.ndarray, np.ndarray]:
    """(totals, own_totals): per class c, Σ_i G[i, c], and with `own` Σ_{i: labels[i] = c} G[i, c]
    (the sum of G's own-class part G_own, histograms; else an empty array). numpy's
    G.sum(axis=0) and G_own.sum(axis=0) bit for bit, without G_own or numpy's row-at-a-time
    reduction (60–140 µs on 2000 × K): numpy reduces a C-ordered rows × K array (K ≥ 2) by adding
    the rows in order to the first, as here; G_own's zeros are left out, which changes no bit since
    its sums are ≥ +0 (an own-class entry is R_i ≥ 0, or 0 for a row held out) and s + 0 = s then."""
    n, K = G.shape
    totals = np.zeros(K)
    own_totals = np.zeros(K if own else 0)
    if n > 0:
        for c in range(K):
            totals[c] = G[0, c]
    for i in range(1, n):
        for c in range(K):
            totals[c] += G[i, c]
    if own:
        for i in range(n):
            own_totals[labels[i]] += G[i, labels[i]]
    return totals, own_totals


@kernel(nogil=True)
def bin_codes(indices: np.ndarray, data: np.ndarray, cuts: np.ndarray, cut_offsets: np.ndarray) -> np.ndarray:
    """The bin of every stored entry of a CSR chunk (uint16, aligned with `data`): the number of
    its feature's cuts below the value."""
    codes = np.empty(data.shape[0], dtype=np.uint16)
    for k in range(data.shape[0]):
        f = indices[k]
        codes[k] = _bin_of(cuts, cut_offsets[f], cut_offsets[f + 1], data[k])
    return codes


@kernel(nogil=True)
def histograms(
    indptr: np.ndarray,
    indices: np.ndarray,
    codes: np.ndarray,
    G: np.ndarray,
    labels: np.ndarray,
    cut_offsets: np.ndarray,
    own: bool,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """histogram's sums of G and, with `own` (choice="gain" and "decrease": V₊'s share of the rows
    of class c), in the same pass over the stored entries, those of
    G's own-class part G_own (G_own[i, c] = G[i, c] if labels[i] = c, else 0; else two empty
    arrays). A row's own-class part has one nonzero, in column labels[i], so its sums cost one add
    per entry, not K; the zeros skipped would add nothing (x + 0 = x), so they equal histogram's of
    G_own bit for bit. Returns (H, nonzero_sums, H_own, own_nonzero_sums)."""
    n_features = cut_offsets.shape[0] - 1
    K = G.shape[1]
    H = np.zeros((cut_offsets[n_features] + n_features, K))
    nonzero_sums = np.zeros((n_features, K))
    H_own = np.zeros((H.shape[0] if own else 0, K))
    own_sums = np.zeros((n_features if own else 0, K))
    for i in range(indptr.shape[0] - 1):
        yi = labels[i] if own else 0
        for k in range(indptr[i], indptr[i + 1]):
            f = indices[k]
            row = cut_offsets[f] + f + codes[k]
            for c in range(K):
                H[row, c] += G[i, c]
                nonzero_sums[f, c] += G[i, c]
            if own:
                H_own[row, yi] += G[i, yi]
                own_sums[f, yi] += G[i, yi]
    return H, nonzero_sums, H_own, own_sums


@kernel(nogil=True)
def histogram(
    indptr: np.ndarray,
    indices: np.ndarray,
    codes: np.ndarray,
    G: np.ndarray,
    cut_offsets: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Per-(feature, bin, class) sums of G over the stored (nonzero) entries of a CSR chunk whose
    bins are `codes` (bin_codes), and per-(feature, class) sums of G over those entries (the zero
    bin is filled by the driver as column total minus this). Feature f's bins are rows
    cut_offsets[f] + f ... of H (one more bin than cuts). Returns (H (n_bins_total × K),
    nonzero_sums (n_features × K))."""
    H, nonzero_sums, _, _ = histograms(indptr, indices, codes, G, np.zeros(0, np.int64), cut_offsets, False)
    return H, nonzero_sums


@kernel(nogil=True)
def stump_bits(
    indptr: np.ndarray,
    indices: np.ndarray,
    codes: np.ndarray,
    n_features: int,
    features: np.ndarray,
    bins: np.ndarray,
    polarity: np.ndarray,
    zero_bins: np.ndarray,
) -> np.ndarray:
    """The packed bits (n_learners × ⌈rows/8⌉ uint8, np.packbits order, the last byte's unused
    bits 0) of the stumps "x_f > cut_b" (polarity +1) or "x_f ≤ cut_b" (−1), f = features_l,
    b = bins_l, on a binned CSR chunk (`codes`: the bin of each stored entry, bin_codes; a feature
    not stored is 0, in bin zero_bins[f]): x > cut_b ⇔ bin(x) > b, as bins are (cut_{b−1}, cut_b];
    b = the feature's number of cuts (the constant learner) is never exceeded. Each learner's row
    starts as its output on a row without the feature (its zero bin's side, every byte at once);
    then one pass over the stored entries sets or clears the bit of each learner on the entry's
    feature (learners of one feature chained; a feature stored twice in a row: the last entry)."""
    n = indptr.shape[0] - 1
    L = features.shape[0]
    n_bytes = (n + 7) >> 3
    out = np.zeros((L, n_bytes), dtype=np.uint8)
    first = np.full(n_features, -1, dtype=np.int64)  # per feature, its first learner (−1: none)
    after = np.full(L, -1, dtype=np.int64)  # per learner, the next learner on its feature
    for lrn in range(L - 1, -1, -1):
        f = features[lrn]
        after[lrn] = first[f]
        first[f] = lrn
        if (zero_bins[f] > bins[lrn]) == (polarity[lrn] > 0):
            for byte in range(n_bytes):
                out[lrn, byte] = 255
            if n & 7:
                out[lrn, n_bytes - 1] = np.uint8((255 << (8 - (n & 7))) & 255)
    for i in range(n):
        byte, mask = i >> 3, np.uint8(1 << (7 - (i & 7)))
        for k in range(indptr[i], indptr[i + 1]):
            lrn = first[indices[k]]
            while lrn >= 0:
                if (codes[k] > bins[lrn]) == (polarity[lrn] > 0):
                    out[lrn, byte] |= mask
                else:
                    out[lrn, byte] &= ~mask
                lrn = after[lrn]
    return out


@kernel(nogil=True)
def _bit(bits: np.ndarray, lrn: int, i: int, low: int) -> int:
    """ħ_l(x_i) from the packed bits: 1 for a set bit, else the learner's `low` (−1: a sign stump, 0: an
    indicator stump)."""
    return 1 if (bits[lrn, i >> 3] >> (7 - (i & 7))) & 1 else low


@kernel(nogil=True)
def scores(
    bits: np.ndarray,
    coord_class: np.ndarray,
    coord_learner: np.ndarray,
    w: np.ndarray,
    K: int,
    m: int,
    lows: np.ndarray,
    signs: np.ndarray,
):
    """F (m × K) = Σ_j w_j ħ_{l_j}(x_i) in class c_j, coordinates added in index order (ħ_l = signs[l]·(1
    on a set bit, else lows[l]))."""
    F = np.zeros((m, K))
    for j in range(w.shape[0]):
        if w[j] == 0.0:
            continue
        c, lrn = coord_class[j], coord_learner[j]
        for i in range(m):
            F[i, c] += w[j] * (signs[lrn] * _bit(bits, lrn, i, lows[lrn]))
    return F


@kernel(nogil=True)
def margins(F: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(M, R) of the module docstring from the scores F: eq. (15) in terms of F."""
    m, K = F.shape
    M = np.ones((m, K))
    R = np.zeros(m)
    for i in range(m):
        yi = labels[i]
        for y in range(K):
            if y != yi:
                M[i, y] = np.exp(F[i, y] - F[i, yi])
                R[i] += M[i, y]
    return M, R


@kernel(nogil=True)
def class_bits(labels: np.ndarray, K: int) -> np.ndarray:
    """Packed class membership (K × ⌈rows/8⌉ uint8, np.packbits order): bit i of row c is 1
    when labels[i] = c."""
    out = np.zeros((K, (labels.shape[0] + 7) >> 3), dtype=np.uint8)
    for i in range(labels.shape[0]):
        out[labels[i], i >> 3] |= np.uint8(1 << (7 - (i & 7)))
    return out


@kernel(nogil=True)
def master_state(F: np.ndarray, labels: np.ndarray) -> np.ndarray:
    """The master problem's per-sample state of a chunk, one float array ((2K + 2) × rows, a row
    per quantity so that the kernels read them contiguously) from the scores F (rows × K):
    rows [0, K) F transposed; [K, 2K) U and 2K S, 2K + 1 the scale a, with
    μ_(i,y) = a_i U[y, i] (y ≠ y_i; U[y_i, i] = 0 is unused) and R_i = a_i S_i, S_i = Σ_{y≠y_i} U[y, i]
    (eq. 15; here a = 1, U = μ). The scale lets a weight change of class c move μ_(i,y) for every
    y of a row of class c by one product (eq. 20: all of them get the same factor)."""
    n, K = F.shape
    state = np.zeros((2 * K + 2, n))
    for i in range(n):
        yi = labels[i]
        total = 0.0
        for y in range(K):
            state[y, i] = F[i, y]
            if y != yi:
                mu = np.exp(F[i, y] - F[i, yi])
                state[K + y, i] = mu
                total += mu
        state[2 * K, i] = total
        state[2 * K + 1, i] = 1.0
    return state


@kernel(nogil=True, inline="always")
def _row_value(a, S, U, i: int, own: int) -> float:
    """|g_c[i]| (module docstring) of a row of class c (own = 1: R_i) or of another class
    (own = 0: μ_(i,c)), from master_state's scale a and sums S or U's row c."""
    s, u = S[i], U[i]  # both read, so that the choice is a select, not a branch
    return a[i] * (s if own else u)


@kernel(nogil=True)
def _split_sums(bits_row, class_row, state, K: int, c: int, low: int) -> tuple[float, float]:
    """(Σ_{(i,y) ∈ D_{+1}} μ_(i,y), Σ_{(i,y) ∈ D_{−1}} μ_(i,y)) over a chunk's rows for a
    coordinate of class c whose learner's packed bits are `bits_row` (class_row: row c of
    class_bits; state: master_state's layout). A row of class c has δh = ħ(x_i) for its pairs
    (adds R_i), another row δh = −ħ(x_i) for its pair (i, c) (adds μ_(i,c)); ħ = 1 on a set bit,
    else `low` (0: the pair is in neither set). Branch-free, a byte (8 rows) at a time: the
    byte's masks of the rows in D₊ and D₋ come from the two bytes by bitwise logic, and each of
    the 8 positions in a byte has its own pair of sums (added in a fixed order at the end), so
    the result does not depend on the compiler or the machine."""
    n = state.shape[1]
    U, S, a = state[K + c], state[2 * K], state[2 * K + 1]
    sign = 255 if low != 0 else 0
    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 0.0
    m0 = m1 = m2 = m3 = m4 = m5 = m6 = m7 = 0.0
    full = n >> 3
    for byte in range(full):
        b, own = int(bits_row[byte]), int(class_row[byte])
        plus = (b & own) | (~b & ~own & sign)  # set bit in class c, or (sign stump) clear bit elsewhere
        minus = (b & ~own & 255) | (~b & own & sign)
        i = byte << 3
        v = _row_value(a, S, U, i, own & 128)
        p0 += v if plus & 128 else 0.0
        m0 += v if minus & 128 else 0.0
        v = _row_value(a, S, U, i + 1, own & 64)
        p1 += v if plus & 64 else 0.0
        m1 += v if minus & 64 else 0.0
        v = _row_value(a, S, U, i + 2, own & 32)
        p2 += v if plus & 32 else 0.0
        m2 += v if minus & 32 else 0.0
        v = _row_value(a, S, U, i + 3, own & 16)
        p3 += v if plus & 16 else 0.0
        m3 += v if minus & 16 else 0.0
        v = _row_value(a, S, U, i + 4, own & 8)
        p4 += v if plus & 8 else 0.0
        m4 += v if minus & 8 else 0.0
        v = _row_value(a, S, U, i + 5, own & 4)
        p5 += v if plus & 4 else 0.0
        m5 += v if minus & 4 else 0.0
        v = _row_value(a, S, U, i + 6, own & 2)
        p6 += v if plus & 2 else 0.0
        m6 += v if minus & 2 else 0.0
        v = _row_value(a, S, U, i + 7, own & 1)
        p7 += v if plus & 1 else 0.0
        m7 += v if minus & 1 else 0.0
    total_plus = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
    total_minus = ((m0 + m1) + (m2 + m3)) + ((m4 + m5) + (m6 + m7))
    for i in range(full << 3, n):  # the last byte's rows
        shift = 7 - (i & 7)
        b, own = (bits_row[i >> 3] >> shift) & 1, (class_row[i >> 3] >> shift) & 1
        v = _row_value(a, S, U, i, own)
        if b:
            if own:
                total_plus += v
            else:
                total_minus += v
        elif sign:
            if own:
                total_minus += v
            else:
                total_plus += v
    return total_plus, total_minus


@kernel(nogil=True, inline="always")
def _coordinate_sums(bits_row, class_row, state, K: int, c: int, low: int, sign: int) -> tuple[float, float]:
    """_split_sums of a learner of sign `sign`: a negated learner (−1) has δh of the opposite
    sign on every pair, so its D₊ and D₋ are those of the learner it negates, swapped."""
    plus, minus = _split_sums(bits_row, class_row, state, K, c, low)
    if sign < 0:
        return minus, plus
    return plus, minus


@kernel(nogil=True, inline="always")
def _change_row(a, S, U, i: int, b: int, own: int, e1: float, e0: float, i1: float, i0: float) -> None:
    """Eq. (20) on row i for a weight change of class c: a row of class c (own) scales all its μ
    by e^{−δ·ħ}, i.e. a_i (i1 on a set bit, i0 else); another row scales μ_(i,c) by e^{δ·ħ} (e1, e0),
    i.e. U[c, i], and S_i follows."""
    old = U[i]
    new = old if own else old * (e1 if b else e0)
    a[i] *= (i1 if b else i0) if own else 1.0
    U[i] = new
    S[i] += new - old


@kernel(nogil=True)
def _apply_change(bits_row, class_row, state, c: int, delta: float, low: int) -> None:
    """A weight change delta of a coordinate of class c, learner bits `bits_row`, on a chunk's μ
    (master_state's layout, in place) by (20): with ħ = 1 on a set bit, else `low`, μ_(i,c) *=
    e^{delta·ħ} (y_i ≠ c) and μ_(i,y) *= e^{−delta·ħ} for every y ≠ c (y_i = c, through a_i);
    low = 0 leaves the clear-bit rows as they are. F is not touched (add_scores, at the end).
    Branch-free, a byte (8 rows) at a time."""
    n = state.shape[1]
    K = (state.shape[0] - 2) // 2
    U, S, a = state[K + c], state[2 * K], state[2 * K + 1]
    up, down = np.exp(delta), np.exp(-delta)
    e1, e0 = up, (down if low != 0 else 1.0)
    i1, i0 = down, (up if low != 0 else 1.0)
    full = n >> 3
    for byte in range(full):
        b, own = int(bits_row[byte]), int(class_row[byte])
        i = byte << 3
        _change_row(a, S, U, i, b & 128, own & 128, e1, e0, i1, i0)
        _change_row(a, S, U, i + 1, b & 64, own & 64, e1, e0, i1, i0)
        _change_row(a, S, U, i + 2, b & 32, own & 32, e1, e0, i1, i0)
        _change_row(a, S, U, i + 3, b & 16, own & 16, e1, e0, i1, i0)
        _change_row(a, S, U, i + 4, b & 8, own & 8, e1, e0, i1, i0)
        _change_row(a, S, U, i + 5, b & 4, own & 4, e1, e0, i1, i0)
        _change_row(a, S, U, i + 6, b & 2, own & 2, e1, e0, i1, i0)
        _change_row(a, S, U, i + 7, b & 1, own & 1, e1, e0, i1, i0)
    for i in range(full << 3, n):
        shift = 7 - (i & 7)
        _change_row(a, S, U, i, (bits_row[i >> 3] >> shift) & 1, (class_row[i >> 3] >> shift) & 1, e1, e0, i1, i0)


@kernel(nogil=True)
def add_scores(
    bits: np.ndarray,
    state: np.ndarray,
    coord_class: np.ndarray,
    coord_learner: np.ndarray,
    change: np.ndarray,
    lows: np.ndarray,
    signs: np.ndarray,
) -> None:
    """F_c += change_j·ħ_{l_j} for every coordinate j with change_j ≠ 0, in index order, on a
    chunk's scores (rows [0, K) of master_state's layout, in place); ħ_l = signs[l]·(1 on a set
    bit, else lows[l])."""
    n = state.shape[1]
    for j in range(change.shape[0]):
        delta = change[j]
        if delta == 0.0:
            continue
        row, F = bits[coord_learner[j]], state[coord_class[j]]
        d1 = delta * signs[coord_learner[j]]  # (exact: a product by ±1)
        d0 = d1 * lows[coord_learner[j]]
        for i in range(n):
            F[i] += d1 if (row[i >> 3] >> (7 - (i & 7))) & 1 else d0


@kernel(nogil=True)
def _masked_sum(bits_row, v) -> float:
    """Σ_i v[i] over the rows whose bit is set in the packed `bits_row`; a byte (8 rows) at a
    time with a partial sum per position, added in a fixed order (as _split_sums)."""
    n = v.shape[0]
    p0 = p1 = p2 = p3 = p4 = p5 = p6 = p7 = 0.0
    full = n >> 3
    for byte in range(full):
        b = int(bits_row[byte])
        i = byte << 3
        v0, v1, v2, v3, v4, v5, v6, v7 = v[i], v[i + 1], v[i + 2], v[i + 3], v[i + 4], v[i + 5], v[i + 6], v[i + 7]
        p0 += v0 if b & 128 else 0.0  # (the values read first: a select, not a branch)
        p1 += v1 if b & 64 else 0.0
        p2 += v2 if b & 32 else 0.0
        p3 += v3 if b & 16 else 0.0
        p4 += v4 if b & 8 else 0.0
        p5 += v5 if b & 4 else 0.0
        p6 += v6 if b & 2 else 0.0
        p7 += v7 if b & 1 else 0.0
    total = ((p0 + p1) + (p2 + p3)) + ((p4 + p5) + (p6 + p7))
    for i in range(full << 3, n):
        if (bits_row[i >> 3] >> (7 - (i & 7))) & 1:
            total += v[i]
    return total


@kernel(nogil=True)
def master_pass(
    bits: np.ndarray,
    classes_bits: np.ndarray,
    state: np.ndarray,
    apply_learner: int,
    apply_class: int,
    delta: float,
    learners: np.ndarray,
    classes: np.ndarray,
    lows: np.ndarray,
    signs: np.ndarray,
    difference: bool,
) -> np.ndarray:
    """One chunk's share of a pass of Algorithm 2 over the master problem. First, when
    apply_learner ≥ 0, the weight change delta of the coordinate (apply_class, learner row
    apply_learner of `bits`) (_apply_change, eq. 20). Then the chunk's partial sums of (21)
    without the e^{±w_j} factors, i.e. (Σ_{D+} μ, Σ_{D−} μ), for each coordinate (classes[q],
    learner row learners[q]): (q × 2). classes_bits: the chunk's class_bits; lows[l] and signs[l]:
    learner row l of `bits` is signs[l]·(1 on a set bit, else lows[l]) (a negated learner's change
    is applied as −delta to the learner it negates, and its D₊ and D₋ are swapped).

    With `difference`, what θ (16) needs: (Σ_{D+} μ − Σ_{D−} μ, 0) per coordinate, from one masked
    sum of a per-class vector: with v_c[i] = R_i on a row of class c and −μ_(i,c) elsewhere (the
    signed weight of its pairs when ħ = 1), the difference is Σ_{bit set} v_c for an indicator
    (ħ = 0 on a clear bit) and 2·Σ_{bit set} v_c − Σ_i v_c[i] for a sign stump (ħ = −1 there).
    v_c is made once per class per call, so each coordinate costs one read of v_c per row instead
    of _split_sums' three; a negated learner's difference is the negative of its learner's."""
    K = (state.shape[0] - 2) // 2
    if apply_learner >= 0:
        _apply_change(
            bits[apply_learner],
            classes_bits[apply_class],
            state,
            apply_class,
            delta * signs[apply_learner],  # (exact: a product by ±1)
            lows[apply_learner],
        )
    sums = np.zeros((learners.shape[0], 2))
    if not difference:
        for q in range(learners.shape[0]):
            lrn, c = learners[q], classes[q]
            sums[q, 0], sums[q, 1] = _coordinate_sums(bits[lrn], classes_bits[c], state, K, c, lows[lrn], signs[lrn])
        return sums
    n = state.shape[1]
    S, a = state[2 * K], state[2 * K + 1]
    v = np.empty((K, n))
    totals = np.zeros(K)
    made = np.zeros(K, dtype=np.bool_)
    for q in range(learners.shape[0]):
        c = classes[q]
        if not made[c]:
            made[c] = True
            U, own = state[K + c], classes_bits[c]
            for i in range(n):
                v[c, i] = a[i] * S[i] if (own[i >> 3] >> (7 - (i & 7))) & 1 else -a[i] * U[i]
            totals[c] = v[c].sum()
        positive = _masked_sum(bits[learners[q]], v[c])
        value = positive if lows[learners[q]] == 0 else 2.0 * positive - totals[c]
        sums[q, 0] = value if signs[learners[q]] > 0 else -value
    return sums


@kernel(nogil=True)
def coordinate_update(
    plus: float, minus: float, old: float, C_over_p: float, large_c: bool, learning_rate: float
) -> float:
    """w_j's new value from a pass's sums (Σ_{D+} μ, Σ_{D−} μ) at w_j = old: V₊ = e^{old}Σ_{D+} μ,
    V₋ = e^{−old}Σ_{D−} μ (21) (μ without w_j's own term), then the minimum w* of (12) (or (13)
    with large_c), shrunk: old + ν·(w* − old) with ν = learning_rate (ν = 1: w* itself, computed
    as w*; with V₋ = 0, (12) at C: coordinate_minimum). Both w* and old are ≥ 0, so the shrunk
    value is too."""
    value = coordinate_minimum(plus * np.exp(old), minus * np.exp(-old), C_over_p, large_c)
    return value if learning_rate == 1.0 else old + learning_rate * (value - old)


@kernel(nogil=True)
def fcd_sweep(
    bits_flat: np.ndarray,
    classes_flat: np.ndarray,
    state_flat: np.ndarray,
    rows: np.ndarray,
    K: int,
    order: np.ndarray,
    coord_class: np.ndarray,
    coord_learner: np.ndarray,
    weights: np.ndarray,
    C_over_p: float,
    large_c: bool,
    learning_rate: float,
    pending_learner: int,
    pending_class: int,
    pending_delta: float,
    lows: np.ndarray,
    signs: np.ndarray,
) -> tuple[int, int, float]:
    """One working-set iteration of Algorithm 2 (its lines 5–10) over chunks held in memory, in
    one call: for each coordinate j of `order` in turn, every chunk applies the pending weight
    change (20) and adds its partial sums of (21) for j, in chunk order; then w_j is set by
    coordinate_update ((12) or (13), shrunk by learning_rate) in `weights` and its change becomes the pending one. The
    arithmetic, and its order, is that of master_pass chunk by chunk followed by
    coordinate_update, so the iterates equal those of the streamed path (Master.sweep).

    The chunks come concatenated, each array flattened in C order, in chunk order: chunk k has
    rows[k] rows (int64), so its bits (L × ⌈rows[k]/8⌉ uint8, L = lows.shape[0]), class_bits (K ×
    ⌈rows[k]/8⌉) and master_state ((2K + 2) × rows[k], float64, updated in place) follow the
    previous chunks' in bits_flat, classes_flat and state_flat (Master._pack); learner l is
    signs[l]·(1 on a set bit, else lows[l]) (master_pass). Plain arrays, not
    numba typed lists: a typed list's constructor and methods compile in every process.
    pending_learner < 0: no change pending. Returns the change still pending (learner, class,
    delta), learner −1 when none."""
    n_chunks = rows.shape[0]
    L = lows.shape[0]
    for q in range(order.shape[0]):
        j = order[q]
        c, lrn = coord_class[j], coord_learner[j]
        plus, minus = 0.0, 0.0
        bits_at, classes_at, state_at = 0, 0, 0
        for k in range(n_chunks):
            n = rows[k]
            n_bytes = (n + 7) >> 3
            bits = bits_flat[bits_at : bits_at + L * n_bytes].reshape((L, n_bytes))
            classes_bits = classes_flat[classes_at : classes_at + K * n_bytes].reshape((K, n_bytes))
            state = state_flat[state_at : state_at + (2 * K + 2) * n].reshape((2 * K + 2, n))
            bits_at += L * n_bytes
            classes_at += K * n_bytes
            state_at += (2 * K + 2) * n
            if pending_learner >= 0:
                _apply_change(
                    bits[pending_learner],
                    classes_bits[pending_class],
                    state,
                    pending_class,
                    pending_delta * signs[pending_learner],
                    lows[pending_learner],
                )
            chunk_plus, chunk_minus = _coordinate_sums(bits[lrn], classes_bits[c], state, K, c, lows[lrn], signs[lrn])
            plus += chunk_plus
            minus += chunk_minus
        pending_learner = -1
        old = weights[j]
        value = coordinate_update(plus, minus, old, C_over_p, large_c, learning_rate)
        if value != old:
            weights[j] = value
            pending_learner, pending_class, pending_delta = lrn, c, value - old
    return pending_learner, pending_class, pending_delta


@kernel(nogil=True)
def coordinate_minimum(v_plus: float, v_minus: float, C_over_p: float, large_c: bool) -> float:
    """argmin_{w ≥ 0} w + (C/p)(V₋e^{w} + V₊e^{−w}) (eq. 10): eq. (12), or (13) with large_c.
    V₋ = 0 (no pair pushes w down, as for a learner that separates its class's pairs) leaves (10)
    = w + (C/p)V₊e^{−w}, whose minimum is the finite log(V₊C/p) (0 when V₊C/p ≤ 1): (12) at V₋ = 0.
    (13), the C → ∞ limit of (12) where V₋ > 0, has its minimum at +inf there, so with large_c
    V₋ = 0 takes (12) at the given C too: the objective (2) keeps its C, and the step is the
    exact minimum of (10) (a weight left where it was would keep its edge, and column generation
    would choose the same learner again; docs/benchmarks.md, "a learner with V₋ = 0")."""
    if v_plus <= 0.0:
        return 0.0
    if large_c and v_minus > 0.0:
        return max(0.0, 0.5 * np.log(v_plus / v_minus))
    if v_minus <= 0.0:
        return max(0.0, np.log(v_plus * C_over_p))
    half = 0.5 / C_over_p  # p / (2C)
    # sqrt(V₊V₋ + p²/4C²) − p/2C, written as V₊V₋ / (sqrt(..) + p/2C) to keep its digits when V₊V₋ ≪ (p/2C)²
    root = v_plus * v_minus / (np.sqrt(v_plus * v_minus + half * half) + half)
    return max(0.0, np.log(root) - np.log(v_minus))


@kernel(nogil=True)
def feature_value_order(features: np.ndarray, values: np.ndarray, n_features: int) -> np.ndarray:
    """np.lexsort((values, features)): the permutation that orders the entries by feature, then
    by value, equal pairs in input order. A stable counting sort by feature (O(n + n_features)),
    then a stable sort of each feature's values (sorting.stable_argsort): the same permutation,
    as both are stable sorts by the same keys (lexsort took 2 ms for 20 000 entries, most of a
    small set's init)."""
    n = features.shape[0]
    starts = np.zeros(n_features + 1, dtype=np.int64)
    for k in range(n):
        starts[features[k] + 1] += 1
    for f in range(n_features):
        starts[f + 1] += starts[f]
    by_feature = np.empty(n, dtype=np.int64)
    fill = starts[:-1].copy()
    for k in range(n):
        by_feature[fill[features[k]]] = k
        fill[features[k]] += 1
    order = np.empty(n, dtype=np.int64)
    for f in range(n_features):
        lo, hi = starts[f], starts[f + 1]
        if hi - lo == 1:
            order[lo] = by_feature[lo]
        elif hi > lo:
            keys = np.empty(hi - lo)
            for j in range(lo, hi):
                keys[j - lo] = values[by_feature[j]]
            within = stable_argsort(keys)
            for j in range(hi - lo):
                order[lo + j] = by_feature[lo + within[j]]
    return order


@kernel(nogil=True)
def chunk_sketch(
    indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_features: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A CSR chunk's sketch before compression: per column f, its distinct stored nonzero
    values in increasing order, values[starts[f]:starts[f+1]] (float64), each with its count as
    the weight (float64), and the column's largest negative value (−inf: none). The same arrays as
    sorting (column, value) pairs of every stored nonzero and counting the repeats (Sketch.of with
    weights 1), built by a counting sort on the column and a sort per column, so a chunk of n
    stored entries needs about 16n bytes besides itself (Sketch.of on its entries held about 100n:
    int64 columns, float64 values and weights, the lexsort order and the sorted copies). NaN
    values sort last and each is distinct, as in numpy."""
    starts = np.zeros(n_features + 1, dtype=np.int64)
    for k in range(indptr[0], indptr[indptr.shape[0] - 1]):
        if data[k] != 0:
            starts[indices[k] + 1] += 1
    for f in range(n_features):
        starts[f + 1] += starts[f]
    fill = starts[:n_features].copy()
    values = np.empty(starts[n_features])
    for k in range(indptr[0], indptr[indptr.shape[0] - 1]):
        if data[k] != 0:
            f = indices[k]
            values[fill[f]] = data[k]
            fill[f] += 1
    weights = np.empty(starts[n_features])
    largest_negative = np.full(n_features, -np.inf)
    out_starts = np.zeros(n_features + 1, dtype=np.int64)
    w = 0  # distinct values so far, written over the sorted ones in place (w ≤ k)
    for f in range(n_features):
        lo, hi = starts[f], starts[f + 1]
        values[lo:hi].sort()
        for k in range(lo, hi):
            v = values[k]  # values[k - 1] is still the sorted one: writes went to positions < k
            if v < 0 and v > largest_negative[f]:
                largest_negative[f] = v
            if k > lo and v == values[k - 1]:
                weights[w - 1] += 1.0
            else:
                values[w] = v
                weights[w] = 1.0
                w += 1
        out_starts[f + 1] = w
    return out_starts, values[:w], weights[:w], largest_negative


@kernel(nogil=True)
def compress_sketch(
    starts: np.ndarray, values: np.ndarray, weights: np.ndarray, size: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per feature (segment starts[f]:starts[f+1] of values sorted within it, distinct, with
    positive weights), keep at most `size` points: all of them when there are no more, else the
    weighted quantiles at levels (k + 0.5)/size, each carrying the weight up to the next. Returns
    (starts, values, weights) of the compressed sketch."""
    n_features = starts.shape[0] - 1
    out_starts = np.zeros(n_features + 1, dtype=np.int64)
    for f in range(n_features):
        out_starts[f + 1] = out_starts[f] + min(size, starts[f + 1] - starts[f])
    out_values = np.empty(out_starts[n_features])
    out_weights = np.zeros(out_starts[n_features])
    for f in range(n_features):
        lo, hi, o = starts[f], starts[f + 1], out_starts[f]
        if hi - lo <= size:
            for k in range(hi - lo):  # elementwise: an array-to-slice assignment compiles numba's shape-error message
                out_values[o + k] = values[lo + k]
                out_weights[o + k] = weights[lo + k]
            continue
        total = 0.0
        for k in range(lo, hi):
            total += weights[k]
        seen, pending, q = 0.0, 0.0, 0
        for k in range(lo, hi):
            seen += weights[k]
            pending += weights[k]
            while q < size and seen >= (q + 0.5) / size * total:
                out_values[o + q] = values[k]
                q += 1
            if q > 0 and out_values[o + q - 1] == values[k]:
                out_weights[o + q - 1] += pending  # the weight since the last point, this value's included
                pending = 0.0
        out_weights[o + q - 1] += pending  # values past the last level
        for r in range(o + q, o + size):  # fewer levels reached than `size` (rounding of the levels)
            out_values[r] = out_values[o + q - 1]
        # points that landed on one value twice keep one copy (values stay distinct)
        kept = o
        for r in range(o, o + size):
            if r > o and out_values[r] == out_values[kept - 1]:
                out_weights[kept - 1] += out_weights[r]
            else:
                out_values[kept] = out_values[r]
                out_weights[kept] = out_weights[r]
                kept += 1
        for r in range(kept, o + size):
            out_values[r] = np.nan  # dropped below
    keep = ~np.isnan(out_values)
    counts = np.zeros(n_features + 1, dtype=np.int64)
    for f in range(n_features):
        c = 0
        for r in range(out_starts[f], out_starts[f + 1]):
            if keep[r]:
                c += 1
        counts[f + 1] = counts[f] + c
    return counts, out_values[keep], out_weights[keep]


RELATIVE_ROUNDING = 1e-10  # a bound on the relative rounding of the histograms' sums (≈ n·ε for n = 1e6 terms)


@kernel(nogil=True, inline="always")
def _score(
    gain: bool,
    edge: float,
    v_plus: float,
    v_minus: float,
    rule: tuple[bool, float, bool, float],
    best: float,
    tiny: float,
) -> float:
    """A candidate's score: its edge (= V₊ − V₋); with `gain` (√V₊ − √V₋)² (−inf when V₊ ≤ V₋:
    the line search would not move it); with `exact` too (rule = (exact, C/p, large_c, ν)), the
    decrease of (2) (times p/C) by the step the solver takes on it as a new coordinate: w = coordinate_update(V₊, V₋, 0, ...) (ν·(13)
    or ν·(12), at V₋ = 0 (12) at C), decrease(w) = V₊(1 − e^{−w}) + V₋(1 − e^{w}) − (p/C)·w (−inf
    where it is not positive: (13) ignores the ℓ1 term, so its step can raise (2)). The loss part
    of decrease(w) is at most its maximum over w, (√V₊ − √V₋)² (V₊ at V₋ = 0), so the decrease is
    computed only for a candidate whose gain exceeds `best`, the score to beat (a candidate that
    cannot win keeps its gain, which is ≤ best; exact up to the rounding below). V₊ and V₋ come
    from differences of histogram sums, so a V₋ that is 0 (a learner that separates its class's
    pairs) comes out as rounding noise of either sign: a V± at most `tiny` (RELATIVE_ROUNDING of
    the class's μ mass) is taken as 0 here, and the step then is (12)'s at C as FCD's on the exact
    sums (otherwise (13) at a V₋ of 1e-20 promises a step FCD does not take); a decrease at most
    `tiny` is no decrease (−inf: the learner is not taken)."""
    exact, C_over_p, large_c, learning_rate = rule
    if not gain:
        return edge
    if v_plus <= v_minus:
        return -np.inf
    root = np.sqrt(v_plus) - np.sqrt(max(v_minus, 0.0))
    bound = root * root
    if not exact or bound <= best:
        return bound
    if v_plus <= tiny:
        return -np.inf
    v_minus = v_minus if v_minus > tiny else 0.0
    w = coordinate_update(v_plus, v_minus, 0.0, C_over_p, large_c, learning_rate)
    decrease = -v_plus * np.expm1(-w) - v_minus * np.expm1(w) - w / C_over_p
    return decrease if w > 0.0 and decrease > tiny else -np.inf


@kernel(nogil=True, inline="always")
def _above(top: float, value: float) -> float:
    """value if it is larger than top, else top: the largest of a sequence, the first of equals
    kept (as best_stumps keeps the first of equal scores)."""
    return value if value > top else top


@kernel(nogil=True)
def best_stumps(
    H: np.ndarray,
    totals: np.ndarray,
    cut_offsets: np.ndarray,
    sign: bool,
    indicator: bool,
    negated: bool,
    H_own: np.ndarray,
    own_totals: np.ndarray,
    exact: bool = False,
    C_over_p: float = 1.0,
    large_c: bool = True,
    learning_rate: float = 1.0,
):
    """Per class c, the stump of the pool (sign stumps with `sign`, indicator stumps with
    `indicator`, their negations too with `negated`, or a union) of the largest score, over
    every feature f and split after bin b.
    With S_b = Σ_{bins ≤ b} H[., c] (g_c: the own-class part minus the other rows' μ_(i,c)),
    P_b = Σ_{bins ≤ b} H_own[., c] (the own-class part: R_i of the rows of class c) and the
    totals T_c, P_T, a candidate's V₊ and V₋ (the μ mass of its pairs with δh = +1 and −1) are:
    - sign stump ħ(x) = +1 if bin(x_f) > b else −1 (polarity +1; −1 swaps V₊ and V₋), b any bin
      but the feature's last: V₊ = P_T − S_b, V₋ = P_T − T_c + S_b (edge T_c − 2·S_b);
    - indicator 1[bin(x_f) > b] (polarity +1): V₊ = P_T − P_b, V₋ = P_T − T_c − P_b + S_b (edge
      T_c − S_b); 1[bin(x_f) ≤ b] (−1): V₊ = P_b, V₋ = P_b − S_b (edge S_b); b any bin but the
      feature's last;
    - the constant learner ħ ≡ 1: V₊ = P_T, V₋ = P_T − T_c (edge T_c, exactly: not a feature's S
      summed over all its bins, whose rounding would make the feature that carries it
      arbitrary), returned as feature 0's 1[x ≤ +inf]: bin = feature 0's number of cuts,
      polarity −1;
    - with `negated`, each indicator's negation −1[bin(x_f) > b], −1[bin(x_f) ≤ b] and the
      constant −1 (sign −1): δh changes sign on every pair, so V₊ and V₋ swap and the edge is
      the indicator's, negated. The same histograms, no other pass. (A negated sign stump is
      the sign stump of the other polarity, already in the pool.)
    The score is the edge V₊ − V₋ (eq. 4 up to the factor C/p; H_own empty: P is not needed),
    or, when H_own has rows, (√V₊ − √V₋)², the loss decrease of the exact line search (13), and with
    `exact` the decrease of (2) by the step the solver takes (_score: (12) or (13) at C/p =
    `C_over_p`, `large_c`, shrunk by `learning_rate`; choice="decrease").
    Ties keep the first in (feature, bin, sign stump, indicator, negated indicator, polarity +
    before −) order, the constant last (before its negation). Returns (feature, bin, polarity,
    edge, low, sign, largest) arrays of length K: edge is the chosen stump's V₊ − V₋, low its value where
    its bit is 0: −1 (sign) or 0 (indicator), sign −1 for a negated indicator, else +1; largest
    the largest edge over the whole pool, whatever the score (Algorithm 1's stopping test, the
    most violated constraint (4); −inf for a class without a candidate): the edge a scan scored
    by the edge alone returns, in the same pass and order (the first of equals kept)."""
    n_features = cut_offsets.shape[0] - 1
    K = H.shape[1]
    gain = H_own.shape[0] > 0
    best_f = np.full(K, -1, dtype=np.int64)
    best_b = np.zeros(K, dtype=np.int64)
    best_p = np.ones(K, dtype=np.int8)
    best_s = np.full(K, -np.inf)
    best_e = np.full(K, -np.inf)
    best_low = np.full(K, -1, dtype=np.int8)
    best_sign = np.ones(K, dtype=np.int8)
    largest = np.full(K, -np.inf)
    rule = (exact, C_over_p, large_c, learning_rate)
    for c in range(K):
        T = totals[c]
        PT = own_totals[c] if gain else 0.0
        tiny = RELATIVE_ROUNDING * (PT + (PT - T))  # of the class's μ mass: Σ R_i (own rows) + Σ μ_(i,c) (others)
        top = -np.inf  # the largest edge of the pool so far
        for f in range(n_features):
            start = cut_offsets[f] + f
            cum = 0.0
            own = 0.0
            n_cuts = cut_offsets[f + 1] - cut_offsets[f]
            for b in range(n_cuts):
                cum += H[start + b, c]
                if gain:
                    own += H_own[start + b, c]
                if sign:
                    edge = T - 2.0 * cum
                    top = _above(_above(top, edge), -edge)
                    score = _score(gain, edge, PT - cum, PT - T + cum, rule, best_s[c], tiny)
                    if score > best_s[c]:
                        best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = f, b, 1, -1, 1
                        best_s[c], best_e[c] = score, edge
                    score = _score(gain, -edge, PT - T + cum, PT - cum, rule, best_s[c], tiny)
                    if score > best_s[c]:
                        best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = f, b, -1, -1, 1
                        best_s[c], best_e[c] = score, -edge
                if indicator:
                    top = _above(_above(top, T - cum), cum)
                    score = _score(gain, T - cum, PT - own, PT - T - own + cum, rule, best_s[c], tiny)
                    if score > best_s[c]:
                        best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = f, b, 1, 0, 1
                        best_s[c], best_e[c] = score, T - cum
                    score = _score(gain, cum, own, own - cum, rule, best_s[c], tiny)
                    if score > best_s[c]:
                        best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = f, b, -1, 0, 1
                        best_s[c], best_e[c] = score, cum
                if negated:
                    top = _above(_above(top, cum - T), -cum)
                    score = _score(gain, cum - T, PT - T - own + cum, PT - own, rule, best_s[c], tiny)
                    if score > best_s[c]:
                        best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = f, b, 1, 0, -1
                        best_s[c], best_e[c] = score, cum - T
                    score = _score(gain, -cum, own - cum, own, rule, best_s[c], tiny)
                    if score > best_s[c]:
                        best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = f, b, -1, 0, -1
                        best_s[c], best_e[c] = score, -cum
        if n_features > 0:
            last = cut_offsets[1] - cut_offsets[0]  # feature 0's 1[x ≤ +inf]: the constant
            if indicator:
                top = _above(top, T)
                score = _score(gain, T, PT, PT - T, rule, best_s[c], tiny)
                if score > best_s[c]:
                    best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = 0, last, -1, 0, 1
                    best_s[c], best_e[c] = score, T
            if negated:
                top = _above(top, -T)
                score = _score(gain, -T, PT - T, PT, rule, best_s[c], tiny)
                if score > best_s[c]:
                    best_f[c], best_b[c], best_p[c], best_low[c], best_sign[c] = 0, last, -1, 0, -1
                    best_s[c], best_e[c] = score, -T
        largest[c] = top
    return best_f, best_b, best_p, best_e, best_low, best_sign, largest


@kernel(nogil=True)
def stump_scores(
    indptr: np.ndarray,
    indices: np.ndarray,
    data: np.ndarray,
    n_features: int,
    features: np.ndarray,
    thresholds: np.ndarray,
    polarity: np.ndarray,
    coord_class: np.ndarray,
    coord_learner: np.ndarray,
    w: np.ndarray,
    K: int,
    lows: np.ndarray,
    signs: np.ndarray,
) -> np.ndarray:
    """Scores (rows × K) F_c(x) = Σ_{j: c_j = c} w_j ħ_{l_j}(x) of the rows of a CSR matrix, with
    ħ_l(x) = signs[l]·(1 if (x[features_l] > thresholds_l) == (polarity_l > 0) else lows[l]) (lows −1: a
    sign stump, ħ_l(x) = polarity_l·(+1 if x[features_l] > thresholds_l else −1); 0: an indicator stump;
    signs −1: its negation)."""
    n = indptr.shape[0] - 1
    S = np.zeros((n, K))
    row = np.zeros(n_features)
    h = np.empty(features.shape[0])
    for i in range(n):
        for k in range(indptr[i], indptr[i + 1]):
            row[indices[k]] = data[k]
        for lrn in range(features.shape[0]):
            h[lrn] = signs[lrn] * (1.0 if (row[features[lrn]] > thresholds[lrn]) == (polarity[lrn] > 0) else lows[lrn])
        for j in range(w.shape[0]):
            S[i, coord_class[j]] += w[j] * h[coord_learner[j]]
        for k in range(indptr[i], indptr[i + 1]):
            row[indices[k]] = 0.0
    return S


@kernel(nogil=True)
def held_out(lo: int, hi: int, seed: int, fraction: float) -> np.ndarray:
    """Whether each row lo … hi−1 (global row indices) is held out: u_r < fraction for u_r, a
    uniform number in [0, 1) from the SplitMix64 hash of (seed, r) (its top 53 bits). A property
    of the row alone, so the same rows are held out for any chunking, worker count or resume."""
    out = np.empty(hi - lo, dtype=np.bool_)
    key = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15)
    for r in range(lo, hi):
        z = key + np.uint64(r) * np.uint64(0xD1B54A32D192ED03) + np.uint64(0x9E3779B97F4A7C15)
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        z = z ^ (z >> np.uint64(31))
        out[r - lo] = float(z >> np.uint64(11)) * (1.0 / 9007199254740992.0) < fraction
    return out


@kernel(nogil=True)
def quantile_cuts(
    starts: np.ndarray, values: np.ndarray, weights: np.ndarray, largest_negative: np.ndarray, n_rows: int, n_bins: int
) -> tuple[np.ndarray, np.ndarray]:
    """(cuts, cut_offsets) of a merged sketch (multiboost.bin_cuts states the rule): per feature f
    with stored values (segment starts[f]:starts[f+1] of `values`, sorted, distinct, non-zero,
    with integer weights), its implicit zeros (n_rows − Σ weights) inserted as the value 0 in
    order; at most n_bins values: all but the largest are cuts; else the values at the weighted
    quantile levels (k/n_bins)·Σ (the first whose cumulative weight reaches the level), k = 1 …
    n_bins − 1, plus 0 and the largest negative value where the feature has zeros, those below
    its largest value, sorted and distinct. Compiled: on 2^18 hashed text columns a loop in
    Python over the used columns took a third of a 20-iteration fit."""
    n_features = starts.shape[0] - 1
    offsets = np.zeros(n_features + 1, dtype=np.int64)
    out = np.empty(values.shape[0])  # a feature has fewer cuts than values (zero included): ≤ its stored ones
    widest = 1
    for f in range(n_features):
        widest = max(widest, starts[f + 1] - starts[f] + 1)
    vals, cum = np.empty(widest), np.empty(widest)
    candidates = np.empty(n_bins + 1)
    for f in range(n_features):
        lo, hi, o = starts[f], starts[f + 1], offsets[f]
        if hi == lo:
            offsets[f + 1] = o
            continue
        total = 0.0
        for k in range(lo, hi):
            total += weights[k]
        zeros = n_rows - total
        m, running = 0, 0.0
        inserted = not zeros > 0.5
        for k in range(lo, hi):
            if not inserted and values[k] >= 0.0:  # 0 before the first value ≥ 0 (np.searchsorted, left)
                running += zeros
                vals[m], cum[m] = 0.0, running
                m += 1
                inserted = True
            running += weights[k]
            vals[m], cum[m] = values[k], running
            m += 1
        if not inserted:
            running += zeros
            vals[m], cum[m] = 0.0, running
            m += 1
        n = 0
        if m <= n_bins:
            for k in range(m - 1):
                out[o + k] = vals[k]
            n = m - 1
        else:
            c = 0
            for k in range(1, n_bins):
                i = min(_bin_of(cum, 0, m, (k / n_bins) * cum[m - 1]), m - 1)  # np.searchsorted
                candidates[c] = vals[i]
                c += 1
            if zeros > 0.5:
                candidates[c] = 0.0
                c += 1
                if np.isfinite(largest_negative[f]):
                    candidates[c] = largest_negative[f]
                    c += 1
            ordered = np.sort(candidates[:c])
            for k in range(c):
                if ordered[k] < vals[m - 1] and (n == 0 or ordered[k] != out[o + n - 1]):
                    out[o + n] = ordered[k]
                    n += 1
        offsets[f + 1] = o + n
    return out[: offsets[n_features]].copy(), offsets
