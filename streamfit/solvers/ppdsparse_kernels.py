"""Numba kernels of PPDSparse (Yen, Huang, Dai, Ravikumar, Dhillon, Xing 2017): one class's
dual problem (10) solved by Algorithm 1 (greedy active set) with Algorithm 2 (randomized dual
coordinate descent) and Algorithm 3 (random sparsification of w for the search).

Notation (see streamfit/solvers/ppdsparse.py for the scaling of lam and tau). For class k,
x̂_i = y_i [x_i, 1] (the last coordinate is the unpenalized-in-ℓ1 bias feature, index D),
v = X̂ᵀα and w(α) = prox(v) with

    w_j = sign(v_j) max(|v_j| − μ, 0) / σ   (j < D),        w_D = v_D / σ   (the bias),

the minimizer of μ‖w_{:D}‖₁ + (σ/2)‖w‖² − ⟨w, v⟩. The dual objective (10) is

    G(α) = (σ/2)‖w(α)‖² − Σ_i α_i + c Σ_i α_i² / 2,    0 ≤ α_i ≤ U,

with c = 0, U = 1 for the hinge loss and c = 1, U = ∞ for the squared hinge ½ max(0, 1 − m)²
(§5.2). ∇_i G = y_i ⟨w, [x_i, 1]⟩ − 1 + c α_i (12); a coordinate step uses the curvature bound
H_ii = (‖x_i‖² + 1)/σ + c (Algorithm 2, step 3), which majorizes G along coordinate i also
where the soft threshold is active, so every step decreases G. With a large λ most of x_i's
features have w_j = 0 and H_ii overestimates the curvature many times; the step with the local
curvature (‖x_{i,B}‖² + 1)/σ + c, B = supp(w), is then tried and kept when it does not
overshoot (`_local_step`).

Only v is stored; w_j = prox(v)_j is recomputed where it is read, so a coordinate step touches
one array (as LIBLINEAR's dual CD touches w). The features a class touched are listed once per
sample, when its dual first moves (`_touch`), not at every update. All work arrays are
allocated once per class group (`Work`) and only the entries a class touched are reset, so a
class costs O(its active samples × row length + search), never O(N) or O(D) (except in the
search's row pass, taken only when the column walk would read half of X anyway, `_search`).

Not in the paper: a class whose dual is much denser than its primal (an unconverged coordinate
descent on ≥ primal_ratio·(d + 1) active samples, d < PRIMAL_MAX_FEATURES) is finished by a
proximal Newton method on the same objective (9) with the same stopping test (`_primal_newton`,
switch rule in `solve_class`); it costs O(N + d²) scratch for that class.
"""

from __future__ import annotations

from collections import namedtuple

import numpy as np

from streamfit._jit import kernel
from streamfit.objectives.losses import OVR_HALF_SQUARED_HINGE, OVR_HINGE
from streamfit.sorting import stable_argsort

LOCAL_STEP_RATIO = 0.5  # try the local-curvature step when it is at least twice as long
SHORT_COLUMN = 32  # sort_columns: columns up to this length by insertion sort
PRIMAL_MAX_FEATURES = 2048  # _primal_newton's dense Hessian sum, block and factor: 3 × (d + 1)² ≤ 96 MiB
PRIMAL_MAX_NEWTON = 50  # Newton steps of _primal_newton before Algorithm 1 continues from its point
PRIMAL_CD_PASSES = 10  # _prox_newton_direction: coordinate descent passes on the quadratic model (its signs)
MAX_INNER_DOUBLINGS = 10  # an unconverged CD doubles the next epoch budget up to max_inner · 2^this
ROW_PASS_SHARE = 0.5  # _search: scores by rows when the column walk would read more than this share of nnz(X)

# CSR rows (+ squared norms), CSC columns (each sorted by decreasing |x_ij| for §5.3's early stop
# when x_threshold > 0, else rows ascending), the positive samples of every class (CSC of the
# label indicator), and col_map: the kernels' feature j is the store's feature col_map[j] (the
# features that occur, most frequent first, so the hot part of v is small and contiguous),
# scale (1,) and col_scale (one per kernel feature): the value of the store's feature col_map[j]
# is divided by col_scale[j]·scale[0] (scale[0] a power of two, ppdsparse.data_scale; col_scale
# the column's standard deviation where ppdsparse standardizes, else 1; the kernels never read
# either).
Data = namedtuple(
    "Data", "indptr indices values sqnorm col_ptr col_rows col_vals pos_ptr pos_rows col_map scale col_scale"
)

# Per-group scratch: v (D + 1), touched features and samples (counts in n_touched), per-sample
# duals / labels / marks, the active set, the search scores and the (sparsified) support of w.
Work = namedtuple(
    "Work",
    "v fmark flist rmark rlist n_touched alpha ysign in_active active score smark slist "
    "sup_idx sup_val wdense cum counts rng",
)


def make_work(n_rows: int, n_features: int) -> Work:
    return Work(
        v=np.zeros(n_features + 1),
        fmark=np.zeros(n_features, np.uint8),
        flist=np.zeros(n_features, np.int64),
        rmark=np.zeros(n_rows, np.uint8),
        rlist=np.zeros(n_rows, np.int64),
        n_touched=np.zeros(2, np.int64),
        alpha=np.zeros(n_rows),
        ysign=-np.ones(n_rows, np.int8),
        in_active=np.zeros(n_rows, np.uint8),
        active=np.zeros(n_rows, np.int64),
        score=np.zeros(n_rows),
        smark=np.zeros(n_rows, np.uint8),
        slist=np.zeros(n_rows, np.int64),
        sup_idx=np.zeros(n_features, np.int64),
        sup_val=np.zeros(n_features),
        wdense=np.zeros(n_features),
        cum=np.zeros(n_features),
        counts=np.zeros(n_features, np.int64),
        rng=np.zeros(1, np.uint64),
    )


# the kernels of compile_parts, with the CPU seconds each took to compile with its callees
# (measured here, session 20; only their proportions are used)
COMPILE_SECONDS = {
    "_search": 5.0,
    "_primal_newton": 4.5,
    "_inner_cd": 2.0,
    "_class_result": 1.5,
    "class_objective": 0.7,
    "row_sqnorms": 0.2,
    "topk_rows": 0.5,
    "_algorithm1": 1.9,
}
# the kernels of compile_parts that call others among them: compiled once those are in the cache,
# whose machine code they then load instead of compiling it inside their own type inference
COMPILED_LAST = ("_algorithm1",)


def compile_parts(n_features: int) -> dict[str, tuple[tuple, float]]:
    """The kernels a train and an evaluation call, which a background compilation (streamfit.precompile)
    compiles side by side in processes of its own, by name: (the argument types the train passes
    them, with Data as ppdsparse.build_data makes it and Work as make_work does, the settings as
    PPDSparseParams holds them; COMPILE_SECONDS). _algorithm1 (COMPILED_LAST) is compiled once the
    others are in the cache: its compilation then loads its callees among them instead of
    compiling them one after another inside its type inference, and the machine code linked into
    it is the same. _primal_newton only
    where the store may be narrow enough for the primal finish (n_features <
    PRIMAL_MAX_FEATURES; 0: not known): on a wider store a run calls it only if its rows use
    fewer than PRIMAL_MAX_FEATURES of the columns, and then compiles it in its train."""
    import numba
    from numba import types

    ints, floats = np.zeros(1, np.int64), np.zeros(1)
    data = numba.typeof(
        Data(
            indptr=ints,
            indices=ints,
            values=floats,
            sqnorm=floats,
            col_ptr=ints,
            col_rows=ints,
            col_vals=floats,
            pos_ptr=ints,
            pos_rows=ints,
            col_map=ints,
            scale=floats,
            col_scale=floats,
        )
    )
    work = numba.typeof(make_work(1, 1))
    i, f, b = types.int64, types.float64, types.boolean
    i4, i8, f8 = types.int32[::1], types.int64[::1], types.float64[::1]
    i8_2d, f8_2d = types.int64[:, ::1], types.float64[:, ::1]
    signatures = {
        "_search": (data, work, i, i, f, f, f, f, f),  # n_active, κ_t, μ, σ, tol, delta, x_threshold
        "_inner_cd": (data, work, i, i, f, f, f, i, b),  # n_active, loss, μ, σ, tol, epochs, shrink
        "_class_result": (data, work, i, i, i, f, f),  # k, n_active, loss, μ, σ
        "_primal_newton": (data, work, f, f, f, i),  # μ, σ, tol, Newton steps
        "class_objective": (data, work, i, i8, f8, f, i, f, f),
        "row_sqnorms": (i8, f8),
        # a store's rows as evaluate and predict pass them (int32 CSR, float64 values), then
        # PPDSparseModel._by_feature's arrays, k, the outputs
        "topk_rows": (i4, i4, f8, i8, i4, f8, i8, f8_2d, f8, i, i8_2d, f8_2d),
        # k, n_active, it, primal, loss, μ, σ, κ, kappa_growth, tol, max_iter, max_inner, shrink, delta,
        # x_threshold, seed, primal_ratio
        "_algorithm1": (data, work, i, i, i, i, i, f, f, i, f, f, i, i, b, f, f, i, f),
    }
    if n_features >= PRIMAL_MAX_FEATURES:
        del signatures["_primal_newton"]
    return {name: (signature, COMPILE_SECONDS[name]) for name, signature in signatures.items()}


@kernel(nogil=True)
def sort_columns(col_ptr, rows, vals, out_rows, out_vals):
    """Every CSC column (rows ascending) reordered by decreasing |x_ij|, ties by row (a stable
    sort per column), for the search's early stop of §5.3: the order of a global lexsort over
    (column, −|x|, row), in O(nnz log(column length)) without sorting all of nnz(X) at once.
    Columns of at most SHORT_COLUMN entries (most of a text set's) by insertion, in place."""
    for f in range(col_ptr.shape[0] - 1):
        lo, hi = col_ptr[f], col_ptr[f + 1]
        if hi - lo <= SHORT_COLUMN:
            for t in range(lo, hi):
                r, x = rows[t], vals[t]
                u = t
                while u > lo and abs(out_vals[u - 1]) < abs(x):
                    out_rows[u] = out_rows[u - 1]
                    out_vals[u] = out_vals[u - 1]
                    u -= 1
                out_rows[u] = r
                out_vals[u] = x
            continue
        order = stable_argsort(-np.abs(vals[lo:hi]))
        for t in range(hi - lo):
            out_rows[lo + t] = rows[lo + order[t]]
            out_vals[lo + t] = vals[lo + order[t]]


@kernel(nogil=True)
def row_sqnorms(indptr, values):
    """‖x_i‖² of every CSR row."""
    out = np.zeros(indptr.shape[0] - 1)
    for i in range(out.shape[0]):
        for p in range(indptr[i], indptr[i + 1]):
            out[i] += values[p] * values[p]
    return out


# -- random numbers: splitmix64 seeding, xorshift64* stream (deterministic per class) --------


@kernel(nogil=True)
def _seed(rng, seed, k):
    z = np.uint64(seed) * np.uint64(0x9E3779B97F4A7C15) + np.uint64(k) + np.uint64(0x632BE59BD9B4E019)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z = z ^ (z >> np.uint64(31))
    rng[0] = z if z != np.uint64(0) else np.uint64(1)


@kernel(nogil=True)
def _next(rng):
    x = rng[0]
    x ^= x >> np.uint64(12)
    x ^= x << np.uint64(25)
    x ^= x >> np.uint64(27)
    rng[0] = x
    return x * np.uint64(0x2545F4914F6CDD1D)


@kernel(nogil=True)
def _uniform(rng):
    return float(_next(rng) >> np.uint64(11)) * (1.0 / 9007199254740992.0)


@kernel(nogil=True)
def _randint(rng, n):
    return np.int64(_next(rng) % np.uint64(n))


# -- Algorithm 2: coordinate descent over the active set, maintaining w(α) by (13) -------------


@kernel(nogil=True)
def _prox(vf, mu):
    """σ·w_j for v_j = vf: the soft threshold sign(vf) max(|vf| − μ, 0), branch-free."""
    return max(vf - mu, 0.0) + min(vf + mu, 0.0)


@kernel(nogil=True)
def _touch(indptr, indices, fmark, flist, rmark, rlist, n_touched, i):
    """List sample i (row i of the CSR indptr/indices) and its features as touched (once per
    class), for _support and the reset: Work's arrays of the same names."""
    if rmark[i]:
        return
    rmark[i] = 1
    rlist[n_touched[1]] = i
    n_touched[1] += 1
    n = n_touched[0]
    for p in range(indptr[i], indptr[i + 1]):
        f = indices[p]
        if fmark[f] == 0:
            fmark[f] = 1
            flist[n] = f
            n += 1
    n_touched[0] = n


@kernel(nogil=True)
def _local_step(indptr, indices, values, v, i, a, g, h_loc, y, mu, inv_sigma, c, upper):
    """Apply the coordinate step with the curvature of G along e_i at α, (‖x_{i,B}‖² + 1)/σ + c over
    the features B with w_j ≠ 0 (the generalized Hessian of the proof of Theorem 4.2), instead of
    the global bound H_ii, to v (v += Δα_i y_i x̂_i), and return the new α_i. G is convex along e_i
    with a nondecreasing derivative, so the step decreases G whenever the derivative at its end
    (computed in the same pass as the update) has the sign of g (no overshoot). Otherwise the step
    is corrected (a second pass) to the one with the curvature over B ∪ B', B' = supp(w) at the
    step's end: a feature inactive at both ends is inactive between them (v_j moves linearly), so
    that curvature bounds G'' on the segment, and the shorter step stays inside it: G decreases, by
    a step never shorter than that of the global bound H_ii ≥ it. Row i: indptr/indices/values
    (CSR)."""
    D = v.shape[0] - 1
    a_try = min(max(a - g / h_loc, 0.0), upper)
    t = (a_try - a) * y
    if t == 0.0:
        return a
    z = v[D] + t
    v[D] = z
    h_union = 0.0
    for p in range(indptr[i], indptr[i + 1]):
        x = values[p]
        f = indices[p]
        vj = v[f]
        vn = vj + t * x
        v[f] = vn
        u = _prox(vn, mu)
        z += x * u
        if u != 0.0 or _prox(vj, mu) != 0.0:
            h_union += x * x
    g_end = y * z * inv_sigma - 1.0 + c * a_try
    if g_end * g >= 0.0:
        return a_try
    a_new = min(max(a - g / ((h_union + 1.0) * inv_sigma + c), 0.0), upper)
    t = (a_new - a_try) * y
    if t != 0.0:
        for p in range(indptr[i], indptr[i + 1]):
            v[indices[p]] += t * values[p]
        v[D] += t
    return a_new


@kernel(nogil=True)
def _inner_cd(data, work, n_active, loss, mu, sigma, tol, max_epochs, shrink):
    """Randomized dual coordinate descent (Algorithm 2) on the active set, one random
    permutation per epoch, until the largest projected gradient is ≤ tol. Returns epochs run.

    With `shrink`, LIBLINEAR's shrinking (Hsieh et al. 2008, §3.2, Algorithm 3): a coordinate
    at a bound whose gradient points out of the box by more than the previous epoch's largest
    violation (∇_i G > M̄ at α_i = 0, ∇_i G < m̄ at α_i = U) leaves the epoch loop (moved to the
    end of active[:n_active]); once the rest meets tol, every coordinate is checked again, so
    the stopping test always covers all of the active set."""
    D = work.v.shape[0] - 1
    c = 1.0 if loss == OVR_HALF_SQUARED_HINGE else 0.0
    upper = 1.0 if loss == OVR_HINGE else np.inf
    inv_sigma = 1.0 / sigma
    v, alpha, active, ysign, rng, rmark = work.v, work.alpha, work.active, work.ysign, work.rng, work.rmark
    indptr, indices, values, sqnorm = data.indptr, data.indices, data.values, data.sqnorm
    m = n_active  # coordinates not shrunk: active[:m]
    pg_max_old, pg_min_old = np.inf, -np.inf
    epochs = max_epochs
    for epoch in range(max_epochs):
        for s in range(m - 1, 0, -1):
            r = _randint(rng, s + 1)
            active[s], active[r] = active[r], active[s]
        pg_max, pg_min = -np.inf, np.inf
        s = 0
        while s < m:
            i = active[s]
            y = float(ysign[i])
            z, h_loc = 0.0, 0.0
            for p in range(indptr[i], indptr[i + 1]):
                x = values[p]
                u = _prox(v[indices[p]], mu)
                z += x * u
                if u != 0.0:
                    h_loc += x * x
            a = alpha[i]
            g = y * (z + v[D]) * inv_sigma - 1.0 + c * a
            pg = g
            if a <= 0.0:
                if shrink and g > pg_max_old:
                    m -= 1
                    active[s], active[m] = active[m], active[s]
                    continue
                pg = min(g, 0.0)
            elif a >= upper:
                if shrink and g < pg_min_old:
                    m -= 1
                    active[s], active[m] = active[m], active[s]
                    continue
                pg = max(g, 0.0)
            s += 1
            pg_max = max(pg_max, pg)
            pg_min = min(pg_min, pg)
            if pg == 0.0:
                continue
            h = (sqnorm[i] + 1.0) * inv_sigma + c
            h_loc = (h_loc + 1.0) * inv_sigma + c
            if rmark[i] == 0:
                _touch(indptr, indices, work.fmark, work.flist, rmark, work.rlist, work.n_touched, i)
            if h_loc < LOCAL_STEP_RATIO * h:
                alpha[i] = _local_step(indptr, indices, values, v, i, a, g, h_loc, y, mu, inv_sigma, c, upper)
                continue
            a_new = min(max(a - g / h, 0.0), upper)
            d = (a_new - a) * y
            if d == 0.0:
                continue
            alpha[i] = a_new
            for p in range(indptr[i], indptr[i + 1]):
                v[indices[p]] += d * values[p]
            v[D] += d
        if max(pg_max, -pg_min) <= tol:
            if m == n_active:
                epochs = epoch + 1
                break
            m = n_active  # check the shrunk coordinates too
            pg_max_old, pg_min_old = np.inf, -np.inf
            continue
        pg_max_old = pg_max if pg_max > 0.0 else np.inf
        pg_min_old = pg_min if pg_min < 0.0 else -np.inf
    return epochs


# -- Algorithm 3 and the greedy search (Algorithm 1, steps 1-2) --------------------------------


@kernel(nogil=True)
def _support(n_touched, flist, v, sup_idx, sup_val, mu, sigma):
    """Copy supp(w_{:D}) into sup_idx / sup_val (w = prox(v), (13)); returns (size, ‖w_{:D}‖₁). Work's arrays of the same names."""
    n, l1 = 0, 0.0
    inv_sigma = 1.0 / sigma
    for t in range(n_touched[0]):
        f = flist[t]
        wf = _prox(v[f], mu) * inv_sigma
        if wf != 0.0:
            sup_idx[n] = f
            sup_val[n] = wf
            l1 += abs(wf)
            n += 1
    return n, l1


@kernel(nogil=True)
def _sparsify(sup_idx, sup_val, cum, counts, rng, n_sup, l1, delta):
    """Algorithm 3: R = ⌈2‖w‖₁²/δ²⌉ draws j ∝ |w_j|, w̃ = (‖w‖₁/R) Σ sign(w_j) e_j
    (Theorem 4.1: E[min_i y_i⟨w̃, x_i⟩] − min_i y_i⟨w, x_i⟩ ≤ δ). Kept exact (w̃ = w) when
    R ≥ nnz(w), where it would not save work. Returns the new support size. Work's arrays of the same
    names."""
    R = np.ceil(2.0 * l1 * l1 / (delta * delta))
    if R >= n_sup:
        return n_sup
    R = np.int64(R)
    acc = 0.0
    for t in range(n_sup):
        acc += abs(sup_val[t])
        cum[t] = acc
        counts[t] = 0
    for _ in range(R):
        t = np.searchsorted(cum[:n_sup], _uniform(rng) * acc, side="right")
        counts[min(t, n_sup - 1)] += 1
    m = 0
    scale = l1 / R
    for t in range(n_sup):
        if counts[t] > 0:
            sup_idx[m] = sup_idx[t]
            sup_val[m] = (scale if sup_val[t] > 0 else -scale) * counts[t]
            m += 1
    return m


@kernel(nogil=True)
def _score_columns(col_ptr, col_rows, col_vals, sup_idx, sup_val, in_active, smark, slist, score, n_sup, x_threshold):
    """⟨w̃, x_i⟩ for the samples outside the active set that share a feature with w̃ (the reached
    ones, listed in slist and marked in smark), by a CSC walk over supp(w̃): O(Σ_{j ∈ supp} nnz(X_{:,j})).
    Each column stops at the first |x_ij| ≤ x_threshold (§5.3; columns sorted by |x_ij|). Returns
    the number reached. Data's and Work's arrays of the same names."""
    n_reach = 0
    for t in range(n_sup):
        f = sup_idx[t]
        wf = sup_val[t]
        for p in range(col_ptr[f], col_ptr[f + 1]):
            x = col_vals[p]
            if abs(x) <= x_threshold:
                break
            i = col_rows[p]
            if in_active[i]:
                continue
            if smark[i] == 0:
                smark[i] = 1
                slist[n_reach] = i
                score[i] = 0.0
                n_reach += 1
            score[i] += wf * x
    return n_reach


@kernel(nogil=True)
def _score_rows(indptr, indices, values, sup_idx, sup_val, wdense, in_active, smark, slist, score, n_sup):
    """The same as _score_columns (x_threshold = 0) by one pass over the CSR rows outside the
    active set with w̃ scattered into a dense vector: O(N + nnz(X)), but a gather per non-zero
    instead of a scatter, so cheaper than a walk that reads most of X. Data's and Work's arrays
    of the same names."""
    for t in range(n_sup):
        wdense[sup_idx[t]] = sup_val[t]
    n_reach = 0
    for i in range(indptr.shape[0] - 1):
        if in_active[i]:
            continue
        z, hit = 0.0, 0.0
        for p in range(indptr[i], indptr[i + 1]):
            w = wdense[indices[p]]
            z += w * values[p]
            hit += abs(w)
        if hit > 0.0:
            smark[i] = 1
            slist[n_reach] = i
            score[i] = z
            n_reach += 1
    for t in range(n_sup):
        wdense[sup_idx[t]] = 0.0
    return n_reach


@kernel(nogil=True)
def _search(data, work, n_active, kappa, mu, sigma, tol, delta, x_threshold):
    """Steps 1-2 of Algorithm 1: ∇G(α) = Σ_j w_j X̂_{:,j} (14) over the non-zeros of w
    (sparsified by Algorithm 3 when delta > 0; x_threshold: the two-level sparsification of
    §5.3), by a column walk, or by a row pass when the walk would read more than ROW_PASS_SHARE
    of nnz(X); then up to κ samples outside the active set with the largest −∇_i G > tol join
    it. Outside the active set α_i = 0 and y_i = −1 (positives never leave it), so
    −∇_i G = 1 + w_D + ⟨w_{:D}, x_i⟩: samples sharing no feature with w all score 1 + w_D (the
    dense bias column); when that exceeds tol they are drawn uniformly at random. Only the
    reached violators (−∇_i G > tol) are sorted. Returns the new active-set size."""
    D = work.v.shape[0] - 1
    N = work.alpha.shape[0]
    n_sup, l1 = _support(work.n_touched, work.flist, work.v, work.sup_idx, work.sup_val, mu, sigma)
    if delta > 0.0 and n_sup > 0:
        n_sup = _sparsify(work.sup_idx, work.sup_val, work.cum, work.counts, work.rng, n_sup, l1, delta)
    walk = 0
    for t in range(n_sup):
        walk += data.col_ptr[work.sup_idx[t] + 1] - data.col_ptr[work.sup_idx[t]]
    if x_threshold == 0.0 and walk > ROW_PASS_SHARE * data.indptr[N]:
        n_reach = _score_rows(
            data.indptr,
            data.indices,
            data.values,
            work.sup_idx,
            work.sup_val,
            work.wdense,
            work.in_active,
            work.smark,
            work.slist,
            work.score,
            n_sup,
        )
    else:
        n_reach = _score_columns(
            data.col_ptr,
            data.col_rows,
            data.col_vals,
            work.sup_idx,
            work.sup_val,
            work.in_active,
            work.smark,
            work.slist,
            work.score,
            n_sup,
            x_threshold,
        )
    smark, slist, score = work.smark, work.slist, work.score
    in_active, active, ysign, rng = work.in_active, work.active, work.ysign, work.rng
    base = 1.0 + work.v[D] / sigma
    n_cand = 0
    for t in range(n_reach):  # violators first in slist, their scores in viol
        i = slist[t]
        if base + score[i] > tol:
            slist[t], slist[n_cand] = slist[n_cand], i
            n_cand += 1
    viol = np.empty(n_cand)
    for t in range(n_cand):
        viol[t] = base + score[slist[t]]
    # numba's sort, not streamfit.sorting's: up to N candidates a search, where ours was up to 1.3x slower
    order = np.argsort(-viol, kind="mergesort")
    n_new = 0
    t = 0
    # reached samples scoring above the unreached ones first
    while t < n_cand and n_new < kappa and viol[order[t]] >= base:
        i = slist[order[t]]
        in_active[i] = 1
        active[n_active + n_new] = i
        n_new += 1
        t += 1
    # then unreached negatives (all scoring `base`), drawn at random without replacement
    n_marked = n_reach
    eligible = N - n_active - n_reach
    if base > tol:
        while n_new < kappa and eligible > 0:
            i = _randint(rng, N)
            if in_active[i] or smark[i] or ysign[i] > 0:
                continue
            smark[i] = 1
            slist[n_marked] = i
            n_marked += 1
            in_active[i] = 1
            active[n_active + n_new] = i
            n_new += 1
            eligible -= 1
    # then the remaining reached violators
    while t < n_cand and n_new < kappa:
        i = slist[order[t]]
        if in_active[i] == 0:
            in_active[i] = 1
            active[n_active + n_new] = i
            n_new += 1
        t += 1
    for t in range(n_marked):
        smark[slist[t]] = 0
    return n_active + n_new


@kernel(nogil=True)
def _eliminate(active, alpha, ysign, in_active, n_active):
    """Step 4 of Algorithm 1: drop {i : α_i = 0, y_i ≠ 1} from the active set (Work's arrays of the same names)."""
    m = 0
    for s in range(n_active):
        i = active[s]
        if alpha[i] == 0.0 and ysign[i] < 0:
            in_active[i] = 0
        else:
            active[m] = i
            m += 1
    return m


# -- a primal Newton finish for classes whose dual is dense (not in the paper) -----------------


@kernel(nogil=True)
def _primal_state(indptr, indices, values, ysign, m, vacc):
    """At primal margins m_i = ⟨w, x̂_i⟩ (x̂_i = y_i[x_i, 1]): vacc = X̂ᵀb, b_i = max(0, 1 − m_i), i.e. v of the
    dual point α = b(w), by one pass over the rows with b_i > 0. The smooth part of (9) has
    gradient σw − vacc there. Rows: indptr/indices/values (CSR), their labels ysign (±1)."""
    D = vacc.shape[0] - 1
    vacc[:] = 0.0
    for i in range(m.shape[0]):
        b = 1.0 - m[i]
        if b > 0.0:
            yb = ysign[i] * b
            for p in range(indptr[i], indptr[i + 1]):
                vacc[indices[p]] += yb * values[p]
            vacc[D] += yb


@kernel(nogil=True)
def _dual_violation(indptr, indices, values, ysign, m, vacc, wa, mu, sigma):
    """The stopping test of Algorithm 1 at the dual point α = b(w) (b_i = max(0, 1 − m_i)), on
    every sample: max_i |P∇_i G(α)|, ∇_i G = ⟨w(α), x̂_i⟩ − 1 + α_i, w(α) = prox(vacc)/σ (left
    in wa), projected at α_i = 0 to min(∇_i G, 0). Rows and labels as _primal_state's."""
    D = wa.shape[0] - 1
    inv_sigma = 1.0 / sigma
    for j in range(D):
        wa[j] = _prox(vacc[j], mu) * inv_sigma
    wa[D] = vacc[D] * inv_sigma
    viol = 0.0
    for i in range(m.shape[0]):
        z = wa[D]
        for p in range(indptr[i], indptr[i + 1]):
            z += wa[indices[p]] * values[p]
        a = max(1.0 - m[i], 0.0)
        gi = ysign[i] * z - 1.0 + a
        if a == 0.0:
            gi = min(gi, 0.0)
        viol = max(viol, abs(gi))
    return viol


@kernel(nogil=True)
def _cholesky_solve(H, x, n):
    """x ← H⁻¹x for the symmetric positive definite leading n × n block of H (lower triangle
    read; overwritten by its Cholesky factor). False if H is not numerically positive definite.
    Written out rather than LAPACK's (numba's np.linalg): a non-definite H is a result here, not
    an exception, and the loop order fixes the bits in every process whatever its BLAS threads
    (the model must not depend on the workers)."""
    for i in range(n):
        for j in range(i + 1):
            s = H[i, j]
            for k in range(j):
                s -= H[i, k] * H[j, k]
            if i == j:
                if not s > 0.0:
                    return False
                H[i, i] = np.sqrt(s)
            else:
                H[i, j] = s / H[j, j]
    for i in range(n):
        s = x[i]
        for k in range(i):
            s -= H[i, k] * x[k]
        x[i] = s / H[i, i]
    for i in range(n - 1, -1, -1):
        s = x[i]
        for k in range(i + 1, n):
            s -= H[k, i] * x[k]
        x[i] = s / H[i, i]
    return True


@kernel(nogil=True)
def _prox_newton_direction(H, vacc, w, P, n_p, x, Hd, mu, sigma):
    """x ← argmin_d ⟨g_P, d⟩ + ½ dᵀ H d + μ‖(w + d)_{:D}‖₁ over the coordinates P (g = σw − vacc,
    H dense n_p × n_p, the bias P[n_p − 1] without ℓ1), by cyclic coordinate descent with Hd = H x
    kept up to date: PRIMAL_CD_PASSES passes at most, fewer when none moves a coordinate by more
    than 1e-6 of its size (in the H_tt norm)."""
    D = w.shape[0] - 1
    for _ in range(PRIMAL_CD_PASSES):
        change, size = 0.0, 0.0
        for t in range(n_p):
            j = P[t]
            G = sigma * w[j] - vacc[j] + Hd[t]
            h = H[t, t]
            wj = w[j] + x[t]
            if j == D:
                z = -G / h
            elif G + mu <= h * wj:
                z = -(G + mu) / h
            elif G - mu >= h * wj:
                z = -(G - mu) / h
            else:
                z = -wj
            if z != 0.0:
                x[t] += z
                for u in range(n_p):
                    Hd[u] += z * H[u, t]
                change = max(change, abs(z) * np.sqrt(h))
            size = max(size, abs(x[t]) * np.sqrt(h))
        if change <= 1e-6 * size:
            break


@kernel(nogil=True)
def _newton_polish(H, vacc, w, P, n_p, x, mu, sigma):
    """The coordinate descent's direction x made exact on its orthant: with S = {t : (w + x)_{P_t} ≠ 0}
    (and the bias) and s = sign(w + x) there, x_S ← −H_SS⁻¹(g_S + μ s_S) (the quadratic model's
    minimizer when the signs hold, by Cholesky), coordinates that would leave their orthant set to
    −w (zero). Unchanged if H_SS is not numerically positive definite."""
    D = w.shape[0] - 1
    S = np.empty(n_p, np.int64)
    n_s = np.int64(0)  # not 0: _cholesky_solve would also be compiled for Literal[int](0)
    for t in range(n_p):
        if P[t] == D or w[P[t]] + x[t] != 0.0:
            S[n_s] = t
            n_s += 1
    A = np.empty((n_s, n_s))
    rhs = np.empty(n_s)
    for a in range(n_s):
        j = P[S[a]]
        sg = 0.0 if j == D else (1.0 if w[j] + x[S[a]] > 0.0 else -1.0)
        rhs[a] = -(sigma * w[j] - vacc[j] + mu * sg)
        for b in range(a + 1):
            A[a, b] = H[S[a], S[b]]
    if not _cholesky_solve(A, rhs, n_s):
        return
    for a in range(n_s):
        t = S[a]
        j = P[t]
        if j < D and (w[j] + rhs[a]) * (w[j] + x[t]) < 0.0:
            x[t] = -w[j]
        else:
            x[t] = rhs[a]


@kernel(nogil=True)
def _primal_newton(data, work, mu, sigma, tol, max_outer):
    """Finish class k's problem in the primal (a deviation from the paper's dual Algorithm 1, for
    classes whose dual is dense): the same objective (9) in the kernels' scale, squared hinge,

        F(w) = μ‖w_{:D}‖₁ + (σ/2)‖w‖² + ½ Σ_i b_i(w)²,   b_i(w) = max(0, 1 − ⟨w, x̂_i⟩),

    by a proximal (generalized) Newton method, newGLMNET's outer loop (Yuan, Ho, Lin 2012) with a
    dense Hessian. At w, with I = {b_i > 0}, the smooth part σ/2‖w‖² + ½Σb_i² has gradient
    g = σw − X̂ᵀb and generalized Hessian H = σI + Σ_{i ∈ I} x̂_i x̂_iᵀ (positive definite). The sum
    is kept as a dense (d + 1)² matrix, updated by the rows that enter or leave I (all of I at the
    first step, few near the end). On the free set P = {j : w_j ≠ 0 or |g_j| > μ} ∪ {bias} (the other
    coordinates are optimal for the model at d = 0 and stay 0), the model

        q(d) = ⟨g_P, d⟩ + ½ dᵀ H_PP d + μ‖(w + d)_{:D}‖₁

    minimized: PRIMAL_CD_PASSES passes of coordinate descent (each coordinate's exact
    soft-threshold minimizer, H_PP d kept up to date) find its signs, then _newton_polish solves q
    exactly on that orthant (Cholesky). Step: the Armijo backtracking line search on exact F,
    F(w + t d) − F(w) ≤ 10⁻² (⟨g, t d⟩ + μ‖w + t d‖₁ − μ‖w‖₁), t = 1, ½, ¼, … (margins of every
    sample updated through the CSC columns of P). F is piecewise quadratic: once I and the signs
    no longer change, a unit step lands on the optimum (a few steps from the dual's warm start).

    Warm start: w = w(α) = prox(v)/σ of the dual state. Stopping: the test of Algorithm 1 on
    every sample, at the dual point α = b(w) (the squared hinge's primal-dual map, α* = b(w*)):
    max_i |P∇_i G(α)| ≤ tol (_dual_violation). The dual state is left at that α (active set = the
    positives ∪ {b_i > 0}, v = X̂ᵀα), so the class's result is w(α) with the same guarantee as
    on the dual path, and solve_class's outputs (G(α), nnz(α)) and reset are those of any dual
    point. Cost per step O(nnz(X) + Σ_{i ∈ I △ I_prev} nnz(x_i)² + PRIMAL_CD_PASSES |P|² + |S|³/6), S
    the polished support, and O(d²) memory: for d < PRIMAL_MAX_FEATURES only. Returns (Newton steps, converged, active-set
    size); not converged (max_outer steps, or no Armijo step) leaves a valid dual point for the
    coordinate descent to continue from."""
    D = work.v.shape[0] - 1
    N = work.alpha.shape[0]
    indptr, indices, values = data.indptr, data.indices, data.values
    col_ptr, col_rows, col_vals = data.col_ptr, data.col_rows, data.col_vals
    ysign = work.ysign
    inv_sigma = 1.0 / sigma
    w = np.empty(D + 1)
    for j in range(D):
        w[j] = _prox(work.v[j], mu) * inv_sigma
    w[D] = work.v[D] * inv_sigma
    m = np.empty(N)
    max_row = 0
    for i in range(N):
        z = w[D]
        for p in range(indptr[i], indptr[i + 1]):
            z += w[indices[p]] * values[p]
        m[i] = ysign[i] * z
        max_row = max(max_row, indptr[i + 1] - indptr[i])
    vacc, wa, step_w = np.empty(D + 1), np.empty(D + 1), np.empty(D + 1)
    P = np.empty(D + 1, np.int64)
    dm = np.empty(N)
    row_pos, row_val = np.empty(max_row + 1, np.int64), np.empty(max_row + 1)
    gram = np.zeros((D + 1, D + 1))  # Σ_{i ∈ I} x̂_i x̂_iᵀ, lower triangle, for in_I = I
    in_I = np.zeros(N, np.uint8)
    converged = False
    outer = 0
    while True:
        _primal_state(indptr, indices, values, ysign, m, vacc)
        if _dual_violation(indptr, indices, values, ysign, m, vacc, wa, mu, sigma) <= tol:
            converged = True
            break
        if outer == max_outer:
            break
        outer += 1
        # free set P (feature order, the bias last)
        n_p = 0
        for j in range(D):
            if w[j] != 0.0 or abs(sigma * w[j] - vacc[j]) > mu:
                P[n_p] = j
                n_p += 1
        P[n_p] = D
        n_p += 1
        x = np.zeros(n_p)
        Hd = np.zeros(n_p)
        # Σ_{i ∈ I} x̂_i x̂_iᵀ (lower triangle) updated by the rows that entered or left I, then
        # H_PP = σI + its P × P block
        for i in range(N):
            now = 1 if m[i] < 1.0 else 0
            if now == in_I[i]:
                continue
            in_I[i] = now
            sg = 1.0 if now else -1.0
            n_r = 0
            for p in range(indptr[i], indptr[i + 1]):
                row_pos[n_r] = indices[p]
                row_val[n_r] = values[p]
                n_r += 1
            row_pos[n_r] = D
            row_val[n_r] = 1.0
            n_r += 1
            for a in range(n_r):  # features ascend along a CSR row, the bias (D) last: lower triangle
                qa, xa = row_pos[a], sg * row_val[a]
                for b in range(a + 1):
                    gram[qa, row_pos[b]] += xa * row_val[b]
        H = np.empty((n_p, n_p))
        for a in range(n_p):
            for b in range(a + 1):
                H[a, b] = gram[P[a], P[b]]
                H[b, a] = H[a, b]
            H[a, a] += sigma
        _prox_newton_direction(H, vacc, w, P, n_p, x, Hd, mu, sigma)
        _newton_polish(H, vacc, w, P, n_p, x, mu, sigma)
        # Armijo line search on F
        accepted = False
        step = 1.0
        for _ in range(30):
            pred, diff = 0.0, 0.0
            for i in range(N):
                dm[i] = 0.0
            for t in range(n_p):
                j = P[t]
                nw = w[j] + step * x[t]
                dj = nw - w[j]
                step_w[j] = nw
                pred += (sigma * w[j] - vacc[j]) * dj
                diff += 0.5 * sigma * (nw * nw - w[j] * w[j])
                if j < D:
                    diff += mu * (abs(nw) - abs(w[j]))
                    pred += mu * (abs(nw) - abs(w[j]))
                    if dj != 0.0:
                        for p in range(col_ptr[j], col_ptr[j + 1]):
                            dm[col_rows[p]] += dj * col_vals[p]
            dD = step_w[D] - w[D]
            for i in range(N):
                dm[i] = ysign[i] * (dm[i] + dD)
                b0 = 1.0 - m[i]
                b1 = b0 - dm[i]
                if b1 > 0.0:
                    diff += 0.5 * b1 * b1
                if b0 > 0.0:
                    diff -= 0.5 * b0 * b0
            if diff <= 0.01 * pred:
                accepted = True
                break
            step *= 0.5
        if not accepted:
            break
        for t in range(n_p):
            w[P[t]] = step_w[P[t]]
        for i in range(N):
            m[i] += dm[i]
    # leave the dual state at α = b(w) (vacc = X̂ᵀα from the last _primal_state)
    n_active = 0
    for i in range(N):
        a = max(1.0 - m[i], 0.0)
        if a > 0.0 or ysign[i] > 0:
            work.alpha[i] = a
            work.in_active[i] = 1
            work.active[n_active] = i
            n_active += 1
            if a > 0.0 and work.rmark[i] == 0:
                _touch(indptr, indices, work.fmark, work.flist, work.rmark, work.rlist, work.n_touched, i)
        elif work.in_active[i]:
            work.alpha[i] = 0.0
            work.in_active[i] = 0
    for j in range(D + 1):
        work.v[j] = vacc[j]
    return outer, converged, n_active


# -- Algorithm 1 for one class --------------------------------------------------------------


def solve_class(
    data,
    work,
    k,
    loss,
    mu,
    sigma,
    kappa,
    kappa_growth,
    tol,
    max_iter,
    max_inner,
    shrink,
    delta,
    x_threshold,
    seed,
    primal_ratio,
):
    """Algorithm 1 for class k: A = positives; repeat {search (steps 1-2), coordinate descent on
    A (step 3), eliminate zero duals (step 4)} until a search finds no sample with −∇_i G > tol
    after the coordinate descent converged (S = max_inner epochs per iteration; an iteration whose
    coordinate descent has not converged is followed by more, with S doubled each time until one
    converges, so a slow CD is not interrupted by a search, O(nnz(X)) at worst, every
    max_inner epochs). With an approximate search
    (Algorithm 3, §5.3) the next search is exact whenever one found nothing or all its picks
    ended at α = 0, so convergence is judged on the true gradient and false picks cannot cycle.

    The switch to the primal (not in the paper; squared hinge, d < PRIMAL_MAX_FEATURES,
    primal_ratio > 0): when a coordinate descent has not converged within its epoch budget on an
    active set of at least primal_ratio·(d + 1) samples, the dual has more free variables than the
    primal has unknowns (X̂_A X̂_Aᵀ has rank ≤ d + 1 < |A|: G's Hessian on A is cI plus a low-rank
    term of large eigenvalues, where coordinate descent crawls; on delicious, 500 features, the
    largest labels took 300-700 epochs over ~12 000 duals) and the class is finished by
    _primal_newton from w(α), once per class: it stops on the same test (every sample's projected
    dual gradient ≤ tol at its dual point α = b(w)); if it does not get there, Algorithm 1
    continues from that dual point.

    A search adds up to κ_t = max(min(κ, max(1, n⁺_k)), ⌊kappa_growth·|A|⌋) samples, n⁺_k the
    class's positives: at α = 0 every negative scores the same −∇_i G = 1 + w_D, so the first
    search's picks are a random draw, and more negatives than positives put most of a small set in
    A before the coordinate descent has learnt anything (sector-10, 567 rows: κ = 500 drew 500 of
    them for classes of 30-77 positives, and its classes then spent their epochs on 300-560 active
    rows; docs/benchmarks.md, session 16). Capped at n⁺_k, the first search balances A and later
    ones grow it by kappa_growth·|A|, so A still reaches a dense dual in O(log |A|) searches. The
    optimum does not depend on κ (only the path: tests); a class of ≥ κ positives runs as before.

    Python, not a kernel: the dual iterations (_algorithm1) return here when the class switches to
    the primal, and _primal_newton is called from here, so a run whose classes never switch (the
    hinge loss, d ≥ PRIMAL_MAX_FEATURES, primal_ratio = 0, or dual coordinate descents that
    converge) never compiles it (about a third of the solver's compilation; docs/benchmarks.md,
    "First use: numba compilation, session 20"). The kernels run the same operations as one
    kernel did: the same bits.

    Returns (indices, values) of the non-zeros of w_{:D} (sorted), the bias w_D,
    (iterations, final |A|, nnz(α), converged, G(α)) and the primal Newton steps (0: dual only)."""
    settings = (loss, mu, sigma, kappa, kappa_growth, tol, max_iter, max_inner, shrink, delta, x_threshold, seed)
    idx, val, bias, it, n_active, n_alpha, converged, dual, switch = _algorithm1(
        data, work, k, 0, 0, 0, *settings, primal_ratio
    )
    if not switch:
        return idx, val, bias, it, n_active, n_alpha, converged, dual, 0
    steps, converged, n_active = _primal_newton(data, work, mu, sigma, tol, PRIMAL_MAX_NEWTON)
    primal = max(steps, 1)  # tried once per class
    if converged:
        idx, val, bias, n_alpha, dual = _class_result(data, work, k, n_active, loss, mu, sigma)
        return idx, val, bias, it, n_active, n_alpha, True, dual, primal
    # continue Algorithm 1 from α = b(w)
    idx, val, bias, it, n_active, n_alpha, converged, dual, _ = _algorithm1(
        data, work, k, n_active, it, primal, *settings, primal_ratio
    )
    return idx, val, bias, it, n_active, n_alpha, converged, dual, primal


@kernel(nogil=True)
def _algorithm1(
    data,
    work,
    k,
    n_active,
    it,
    primal,
    loss,
    mu,
    sigma,
    kappa,
    kappa_growth,
    tol,
    max_iter,
    max_inner,
    shrink,
    delta,
    x_threshold,
    seed,
    primal_ratio,
):
    """solve_class's dual iterations. primal = 0: the class starts (its random stream seeded, its
    positives the active set; n_active and it are 0), and may switch to the primal: the iterations
    then stop where the switch rule holds and return switch = True (and empty outputs; the work
    arrays hold the dual state for _primal_newton). primal ≥ 1 (the Newton steps a primal finish
    took, which stopped short of the test): they continue from its dual point (n_active samples in
    A, `it` iterations done), whose duals are not optimal on A, so convergence needs a converged
    coordinate descent first, whatever the next search finds; no second switch. Otherwise returns
    _class_result's outputs with (it, n_active, converged) and switch = False."""
    D = work.v.shape[0] - 1
    approximate = delta > 0.0 or x_threshold > 0.0
    first_kappa = max(1, min(kappa, data.pos_ptr[k + 1] - data.pos_ptr[k]))
    budget = max_inner
    if primal == 0:
        _seed(work.rng, seed, k)
        for p in range(data.pos_ptr[k], data.pos_ptr[k + 1]):
            i = data.pos_rows[p]
            work.ysign[i] = 1
            work.in_active[i] = 1
            work.active[n_active] = i
            n_active += 1
        exact_next = not approximate
        inner_ok = True
    else:
        exact_next = True
        inner_ok = False
    converged = False
    while it < max_iter:
        it += 1
        before = n_active
        kappa_t = max(first_kappa, np.int64(kappa_growth * n_active))
        if exact_next:
            n_active = _search(data, work, n_active, kappa_t, mu, sigma, tol, 0.0, 0.0)
        else:
            n_active = _search(data, work, n_active, kappa_t, mu, sigma, tol, delta, x_threshold)
        if n_active == before and inner_ok:
            if exact_next:
                converged = True
                break
            exact_next = True
            continue
        epochs = _inner_cd(data, work, n_active, loss, mu, sigma, tol, budget, shrink)
        inner_ok = epochs < budget
        if (
            not inner_ok
            and loss == OVR_HALF_SQUARED_HINGE
            and primal == 0
            and D < PRIMAL_MAX_FEATURES
            and 0.0 < primal_ratio * (D + 1) <= n_active
        ):
            return np.empty(0, np.int64), np.empty(0), 0.0, it, n_active, 0, False, 0.0, True
        budget = max_inner if inner_ok else min(2 * budget, max_inner << MAX_INNER_DOUBLINGS)
        n_active = _eliminate(work.active, work.alpha, work.ysign, work.in_active, n_active)
        # approximate picks that all ended at α = 0 (no growth): check exactly next time
        exact_next = not approximate or n_active <= before
    idx, val, bias, n_alpha, dual = _class_result(data, work, k, n_active, loss, mu, sigma)
    return idx, val, bias, it, n_active, n_alpha, converged, dual, False


@kernel(nogil=True)
def _class_result(data, work, k, n_active, loss, mu, sigma):
    """The end of solve_class: (indices, values) of the non-zeros of w_{:D} (sorted), the bias
    w_D, nnz(α) and G(α) (10) of the dual state; then every work array the class touched reset."""
    D = work.v.shape[0] - 1
    c = 1.0 if loss == OVR_HALF_SQUARED_HINGE else 0.0
    n_sup, _ = _support(work.n_touched, work.flist, work.v, work.sup_idx, work.sup_val, mu, sigma)
    order = stable_argsort(work.sup_idx[:n_sup])  # distinct keys: any sort's order
    idx = work.sup_idx[:n_sup][order].copy()
    val = work.sup_val[:n_sup][order].copy()
    bias = work.v[D] / sigma
    sq = bias * bias
    for t in range(n_sup):
        sq += val[t] * val[t]
    dual = 0.5 * sigma * sq
    n_alpha = 0
    for s in range(n_active):
        a = work.alpha[work.active[s]]
        dual += -a + 0.5 * c * a * a
        if a != 0.0:
            n_alpha += 1
    # reset the touched scratch
    for t in range(work.n_touched[0]):
        f = work.flist[t]
        work.v[f] = 0.0
        work.fmark[f] = 0
    for t in range(work.n_touched[1]):
        work.rmark[work.rlist[t]] = 0
    work.n_touched[:] = 0
    work.v[D] = 0.0
    for s in range(n_active):
        i = work.active[s]
        work.alpha[i] = 0.0
        work.in_active[i] = 0
    for p in range(data.pos_ptr[k], data.pos_ptr[k + 1]):
        work.ysign[data.pos_rows[p]] = -1
    return idx, val, bias, n_alpha, dual


# -- the primal objective of one class ------------------------------------------------------


@kernel(nogil=True)
def _loss(m: float, loss: int) -> float:
    """ℓ(m): max(0, 1 − m) (hinge, (3)) or ½ max(0, 1 − m)² (squared hinge, §5.2)."""
    slack = max(0.0, 1.0 - m)
    return 0.5 * slack * slack if loss == OVR_HALF_SQUARED_HINGE else slack


@kernel(nogil=True)
def class_objective(
    data, work, k: int, idx: np.ndarray, val: np.ndarray, bias: float, loss: int, lam: float, tau: float
) -> float:
    """F_k(w) of (9) in the averaged convention,

        lam ‖w_{:D}‖₁ + (tau/2) ‖w‖² + (1/N) Σ_i ℓ(y_ik ⟨w, [x_i, 1]⟩),

    for w_{:D} given by its non-zeros (idx: the kernels' feature ids, val) and the bias w_D.
    The scores ⟨w_{:D}, x_i⟩ come from a CSC walk over supp(w), O(Σ_{j ∈ supp} nnz(X_{:,j}) +
    |positives of k|); a sample sharing no feature with w has margin ±bias. Uses work.score,
    work.smark and work.slist as scratch and leaves smark clear."""
    N = work.alpha.shape[0]
    smark, slist, score = work.smark, work.slist, work.score
    n_reach = 0
    for t in range(idx.shape[0]):
        f = idx[t]
        wf = val[t]
        for p in range(data.col_ptr[f], data.col_ptr[f + 1]):
            i = data.col_rows[p]
            if smark[i] == 0:
                smark[i] = 1
                slist[n_reach] = i
                score[i] = 0.0
                n_reach += 1
            score[i] += wf * data.col_vals[p]
    n_pos_unreached = 0
    for p in range(data.pos_ptr[k], data.pos_ptr[k + 1]):
        i = data.pos_rows[p]
        if smark[i]:
            smark[i] = 2  # a reached positive
        else:
            n_pos_unreached += 1
    total = 0.0
    for t in range(n_reach):
        i = slist[t]
        z = score[i] + bias
        total += _loss(z if smark[i] == 2 else -z, loss)
        smark[i] = 0
    total += n_pos_unreached * _loss(bias, loss) + (N - n_reach - n_pos_unreached) * _loss(-bias, loss)
    l1, sq = 0.0, bias * bias
    for t in range(val.shape[0]):
        l1 += abs(val[t])
        sq += val[t] * val[t]
    return lam * l1 + 0.5 * tau * sq + total / N


# -- prediction: top-k of X Wᵀ + b, row by row ------------------------------------------------


@kernel(nogil=True)
def topk_rows(x_ptr, x_idx, x_val, w_ptr, w_cls, w_val, dense_of, w_dense, bias, k, top, best):
    """For every row i of X (CSR), the k largest scores s_c = b_c + Σ_j x_ij W_cj and their
    classes, in decreasing order (ties: the smaller class first, as a stable sort of −s).
    W is given by feature: a feature j with dense_of[j] = r ≥ 0 has its K weights in row r of
    w_dense (the features where most classes are non-zero: a contiguous loop, no indices),
    any other its non-zeros in w_ptr/w_cls/w_val (CSC of the K × d coef_). A row costs
    O(Σ_{j ∈ x_i} nnz(W_{:,j}) + K·k) with one K-vector of scratch; the n × K score matrix is
    never formed."""
    K = bias.shape[0]
    s = np.empty(K)
    if k < 1:
        return
    for i in range(x_ptr.shape[0] - 1):
        for c in range(K):  # not s[:] = bias: an array-to-slice assignment compiles numba's shape-error message
            s[c] = bias[c]
        for p in range(x_ptr[i], x_ptr[i + 1]):
            j, x = x_idx[p], x_val[p]
            r = dense_of[j]
            if r >= 0:
                for c in range(K):
                    s[c] += x * w_dense[r, c]
            else:
                for q in range(w_ptr[j], w_ptr[j + 1]):
                    s[w_cls[q]] += x * w_val[q]
        n = 0
        for c in range(K):  # insertion into the sorted k best; strict > keeps the earlier class on ties
            v = s[c]
            if n == k:
                if not v > best[i, k - 1]:
                    continue
                t = k - 1
            else:
                t = n
                n += 1
            while t > 0 and v > best[i, t - 1]:
                best[i, t] = best[i, t - 1]
                top[i, t] = top[i, t - 1]
                t -= 1
            best[i, t] = v
            top[i, t] = c
