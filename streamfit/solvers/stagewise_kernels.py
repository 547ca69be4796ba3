"""Per-chunk numerical kernels of the stagewise solver (Agarwal et al. 2014).

Everything here works on one row chunk at a time and is row-wise: the result for a row
depends on that row only, so chunking never changes it.

The link functions g = ∇Φ (eq. 12) and their calibrated losses (eq. 13) are in
streamfit.objectives.links.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np
import scipy.linalg  # noqa: F401  (its BLAS, which the driver's factorisations use, loaded before _BLAS looks)
from threadpoolctl import ThreadpoolController

from streamfit._jit import kernel

_BLAS = ThreadpoolController()  # the BLAS libraries loaded now: numpy's and scipy's
_LIMITED = threading.local()  # per thread: `depth` of single_threaded_blas contexts, the outermost's `limiter`


class _SingleThreadedBlas:
    """The context of `single_threaded_blas`: threadpoolctl's limit, entered by the outermost
    context of a thread only (its state is thread-local, so one instance serves every use)."""

    def __enter__(self) -> None:
        depth = getattr(_LIMITED, "depth", 0)
        if depth == 0:
            _LIMITED.limiter = _BLAS.limit(limits=1, user_api="blas").__enter__()
        _LIMITED.depth = depth + 1

    def __exit__(self, *exc) -> None:
        _LIMITED.depth -= 1
        if _LIMITED.depth == 0:
            limiter, _LIMITED.limiter = _LIMITED.limiter, None
            limiter.__exit__(*exc)


_SINGLE_THREADED_BLAS = _SingleThreadedBlas()


def single_threaded_blas() -> _SingleThreadedBlas:
    """A context in which BLAS runs on one thread: the QR of orthogonal frequencies and the
    driver's small factorisations and solves get the same bits in any process. Inside another
    such context of the same thread it does nothing more (threadpoolctl's limit costs about
    20 µs, as much as a small stage's whole solve: a stage enters it once around its factor and
    solve)."""
    return _SINGLE_THREADED_BLAS


def poly_basis(F: np.ndarray) -> np.ndarray:
    """G(ŷ) = [1, ŷ, ŷ², ŷ³] elementwise (Algorithm 2's calibration basis, §3.1), n × (1 + 3k)."""
    return np.hstack([np.ones((F.shape[0], 1)), F, F * F, F * F * F])


@kernel()
def project_rows_simplex(V: np.ndarray) -> np.ndarray:
    """Euclidean projection of each row onto the probability simplex {p ≥ 0, Σ p = 1}
    (Duchi et al. 2008, the `clip` of eq. 19): p = max(v − θ, 0) with
    θ = (Σ_{j≤ρ} u_j − 1)/ρ, u = v sorted decreasingly, ρ = max{j : u_j > (Σ_{r≤j} u_r − 1)/j}."""
    n, k = V.shape
    out = np.empty_like(V)
    for i in range(n):
        u = np.sort(V[i])[::-1]
        css = 0.0
        theta = 0.0
        for j in range(k):
            css += u[j]
            t = (css - 1.0) / (j + 1)
            if u[j] > t:
                theta = t
        for j in range(k):
            out[i, j] = max(V[i, j] - theta, 0.0)
    return out


def project_predictions(V: np.ndarray, multilabel: bool) -> np.ndarray:
    """The projection step of Algorithm 2: onto the simplex (multiclass) or onto [0, 1]^k
    (multilabel, §4: "y now lives on the hypercube")."""
    if multilabel:
        return np.clip(V, 0.0, 1.0)
    return project_rows_simplex(np.ascontiguousarray(V))


# Taylor coefficients of cos(x) in y = x², highest first: Σ_{k ≤ 13} (−1)^k y^k / (2k)!. For
# |x| ≤ π the first omitted term is π^28/28! < 3e-19, so the rounding of Horner's scheme (~1e-15)
# is the whole error.
_COS_TAYLOR = tuple((-1.0) ** k / math.factorial(2 * k) for k in range(13, -1, -1))


@kernel(fastmath={"contract"}, inline="always")
def _root2_cos(x: float) -> float:
    """√2 cos(x): x reduced to [−π, π], then the Taylor polynomial above (Horner, unrolled by the
    compiler). Beyond |x| ≈ 1e15 (an input far out of the training data's scale: the phase's own
    rounding then exceeds the period) the reduction no longer lands in [−π, π] and the polynomial
    would run off to ±inf; the clamp keeps every feature in [−√2, √2] (a no-op below that)."""
    x -= 2.0 * np.pi * np.rint(x * (0.5 / np.pi))
    x = min(max(x, -np.pi), np.pi)
    y = x * x
    c = 0.0
    for coefficient in _COS_TAYLOR:
        c = c * y + coefficient
    return np.sqrt(2.0) * c


@kernel(fastmath={"contract"})
def _cos_features(phase: np.ndarray, beta: np.ndarray, out: np.ndarray, col: int) -> None:
    """out[i, col + j] = √2 cos(phase[i, j] + β_j), with the argument reduced to [−π, π] and the
    cosine as the Taylor polynomial above (vectorised: the inner loop runs over one row's
    features, so a row's values never depend on the other rows). `out` is C-contiguous."""
    n, p = phase.shape
    for i in range(n):
        src = phase[i]
        dst = out[i, col : col + p]  # row slices (not out[i, col + j]): the loop vectorises
        for j in range(p):
            dst[j] = _root2_cos(src[j] + beta[j])


@kernel(fastmath={"contract"})
def _cos_sin_features(phase: np.ndarray, out: np.ndarray, col: int, n_out: int) -> None:
    """Paired features of m = phase.shape[1] frequencies: out[i, col + j] = √2 cos(phase[i, j])
    for j < m, out[i, col + m + j] = √2 sin(phase[i, j]) = √2 cos(phase[i, j] − π/2) for
    j < n_out − m."""
    n, m = phase.shape
    for i in range(n):
        src = phase[i]
        dst = out[i, col : col + m]
        for j in range(m):
            dst[j] = _root2_cos(src[j])
        dst = out[i, col + m : col + n_out]
        for j in range(n_out - m):
            dst[j] = _root2_cos(src[j] - 0.5 * np.pi)


def rowwise_matmul(A: np.ndarray, B: np.ndarray) -> np.ndarray:
    """A @ B (A: n × m dense, B: m × k) in the precision of A and B (float64, or float32 when
    both are float32), each element summed in one fixed order:
    C_ij = (…((0 + A_i0 B_0j) + A_i1 B_1j) + …) + A_i,m−1 B_m−1,j, products and sums rounded
    separately (no fused multiply-add). A row's result therefore depends on that row of A and
    on B only: the same bits in any chunk, batch or process, at any row offset, on any CPU and
    with any BLAS threads (a BLAS product orders its sums by the shape of the whole call, its
    threads and the CPU's kernel). Returns a new C-contiguous n × k array."""
    dtype = np.result_type(A.dtype, B.dtype)
    if dtype not in (np.float32, np.float64):
        dtype = np.dtype(np.float64)
    A, B = np.ascontiguousarray(A, dtype=dtype), np.ascontiguousarray(B, dtype=dtype)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"rowwise_matmul: shapes {A.shape} and {B.shape} do not multiply")
    C = np.zeros((A.shape[0], B.shape[1]), dtype=dtype)
    _rowwise_matmul(_read_only(A), _read_only(B), C)
    return C


def _read_only(a: np.ndarray) -> np.ndarray:
    """A read-only view of `a` (no copy): numba types read-only and writable arrays apart, so a
    kernel given both would be compiled, and cached, twice."""
    view = a.view()
    view.flags.writeable = False
    return view


@kernel()
def _rowwise_matmul(A: np.ndarray, B: np.ndarray, C: np.ndarray) -> None:
    """C += A B row by row, the sum over A's columns in increasing order (`rowwise_matmul`). The
    inner loop runs over one row of C (vectorised: each element is still its own ordered sum);
    fastmath stays off, as it would let the compiler reorder or fuse the sums."""
    n, m = A.shape
    for i in range(n):
        a = A[i]
        c = C[i]
        for j in range(m):
            aij = a[j]
            b = B[j]
            for col in range(c.shape[0]):
                c[col] += aij * b[col]


def csr_columns(X, position: np.ndarray, lo: int, hi: int, out: np.ndarray, col: int) -> None:
    """Gather columns of CSR rows into a dense array: out[i − lo, col + position[j]] = X[i, j]
    for the rows lo … hi − 1 and the columns j with position[j] ≥ 0 (the others skipped);
    out's columns col … are zeroed first. One sweep over the rows' non-zeros, copying values
    only (no arithmetic: the same bits on any CPU)."""
    out[:, col:] = 0.0
    _csr_columns(X.indptr, X.indices, X.data, position, lo, hi, out, col)


@kernel()
def _csr_columns(indptr, indices, data, position, lo, hi, out, col) -> None:
    for i in range(lo, hi):
        row = out[i - lo]
        for p in range(indptr[i], indptr[i + 1]):
            j = position[indices[p]]
            if j >= 0:
                row[col + j] = data[p]


def sparse_gram_upper(A) -> np.ndarray:
    """The upper triangle of AᵀA for a CSR matrix A (n × p), row by row, as `upper_triangle`
    packs it: p(p + 1)/2 float64 values, (AᵀA)_rc = Σ_i a_ir · a_ic summed over the rows i in
    increasing order, each product and sum rounded on its own. That is the order of scipy's
    sparse product (SMMP), so these are the bits of `(A.T @ A).toarray()` where scipy's build
    does not fuse multiply-adds. `_sparse_gram_upper` adds the terms row by row into the packed result
    directly: no sparse result to build and copy out, and half of AᵀA's entries to write, sum
    over chunks and send (the lower half is their mirror, `symmetric_from_upper`: AᵀA of a
    matrix without repeated column indices in a row is exactly symmetric, a_ir · a_ic = a_ic · a_ir)."""
    A = A.tocsr()
    p = A.shape[1]
    out = np.zeros(p * (p + 1) // 2)
    _sparse_gram_upper(A.indptr, A.indices, A.data, p, out)
    return out


@kernel()
def _sparse_gram_upper(indptr, indices, data, p, out) -> None:
    """out[(r, c)] += a_ir · a_ic for every pair of entries r ≤ c of every row i, rows in order,
    (r, c) at r·(2p − r − 1)/2 + c (`upper_triangle`'s order); no fastmath: each product and sum
    is rounded on its own, as in scipy's C++."""
    for i in range(indptr.shape[0] - 1):
        lo, hi = indptr[i], indptr[i + 1]
        for s in range(lo, hi):
            r = np.int64(indices[s])
            v = data[s]
            row = r * (2 * p - r - 1) // 2
            for t in range(lo, hi):
                c = indices[t]
                if c >= r:
                    out[row + c] += v * data[t]


@functools.lru_cache(maxsize=8)
def _upper_mask(p: int) -> np.ndarray:
    """p × p booleans, True on and above the diagonal (read-only). Boolean indexing visits an
    array's elements in C order, so M[mask] lists the upper triangle row by row, and on the
    transposed view, M.T[mask] lists M[c, r] for the same (r, c) in the same order: the mirror."""
    mask = np.triu(np.ones((p, p), dtype=bool))
    mask.flags.writeable = False
    return mask


def upper_triangle(M: np.ndarray) -> np.ndarray:
    """The upper triangle of the square M, diagonal included, row by row: M[0, 0:p], M[1, 1:p], …
    (p(p + 1)/2 values, numpy's triu_indices order)."""
    return M[_upper_mask(M.shape[0])]


def symmetric_from_upper(packed: np.ndarray) -> np.ndarray:
    """The symmetric p × p matrix whose upper triangle `packed` holds (`upper_triangle`'s order),
    its lower triangle the mirror: the same values, copied (two boolean-mask stores, M[mask] and
    M.T[mask]: 0.4-0.6× the time of storing through triu_indices' index arrays at p = 1025)."""
    p = (math.isqrt(8 * packed.size + 1) - 1) // 2
    if p * (p + 1) // 2 != packed.size:
        raise ValueError(f"{packed.size} values are no triangle of a square matrix")
    mask = _upper_mask(p)
    M = np.empty((p, p), dtype=packed.dtype)
    M[mask] = packed
    M.T[mask] = packed
    return M


def rff_frequencies(
    seed: int, block_id: int, n_in: int, n_out: int, sigma: float, orthogonal: bool = False, paired: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """(Ω, β) of random Fourier feature block `block_id`: Ω (n_in × n_out) ~ N(0, σ⁻²), β ~ U[0, 2π),
    drawn from the seed sequence (seed, block_id), so regenerated identically on every call.

    orthogonal: orthogonal random features (Yu et al. 2016, "Orthogonal Random Features"): the
    columns of Ω come in groups of up to n_in mutually orthogonal directions (Q of the QR
    factorisation of an n_in × m Gaussian matrix, signs fixed by diag(R), so Q is Haar
    distributed), each column scaled by an independent χ(n_in)-distributed length (the norm of
    another Gaussian n_in-vector) and by 1/σ. Each column is then exactly N(0, σ⁻² I)
    distributed, so E[φ(z)ᵀφ(z')]/n_out = k(z, z') still holds, with a lower variance.

    paired: features come as cos and sin of the same ωᵀz (`rff_features`), so only
    ⌈n_out/2⌉ frequencies are drawn and no phases (β is None)."""
    rng = np.random.default_rng([seed, block_id])
    if paired:
        n_out = -(-n_out // 2)
    if not orthogonal:
        omega = rng.standard_normal((n_in, n_out)) / sigma
        return omega, None if paired else rng.uniform(0.0, 2.0 * np.pi, n_out)
    omega = np.empty((n_in, n_out))
    for lo in range(0, n_out, n_in):
        m = min(n_in, n_out - lo)
        Q, R = np.linalg.qr(rng.standard_normal((n_in, m)))
        Q *= np.where(np.diag(R) < 0, -1.0, 1.0)
        lengths = np.sqrt((rng.standard_normal((n_in, m)) ** 2).sum(axis=0))
        omega[:, lo : lo + m] = Q * (lengths / sigma)
    return omega, None if paired else rng.uniform(0.0, 2.0 * np.pi, n_out)


def rff_features(
    Z: np.ndarray,
    omega: np.ndarray,
    beta: np.ndarray | None,
    out: np.ndarray | None = None,
    col: int = 0,
    n_out: int | None = None,
) -> np.ndarray:
    """√2 cos(ZΩ + β): the phase ZΩ is one `rowwise_matmul` product in Ω's precision (float64,
    or float32 for single-precision designs: a phase error of ~1e-7 · |ZΩ|); one fused pass
    (`_cos_features`) adds β, reduces to [−π, π] and evaluates the cosine by a polynomial, exact
    to ~1e-15 and several times faster than numpy's cosine (even its float32 one, with its 1e-6
    error). Written into columns col … col + n_out − 1 of `out` (C-contiguous, float64, or
    float32: the float64 values rounded) when given, else into a new float64 array, which is
    returned.

    beta None (paired features, `rff_frequencies`): n_out features (default 2 · Ω's columns)
    √2 cos(ZΩ) and then √2 sin(ZΩ) of the first n_out − m of the m frequencies, so that
    E[φ(z)ᵀφ(z')]/n_out = k(z, z') for even n_out (Rahimi & Recht's [cos, sin] map)."""
    phase = rowwise_matmul(np.ascontiguousarray(Z, dtype=omega.dtype), omega)
    if n_out is None:
        n_out = phase.shape[1] if beta is not None else 2 * phase.shape[1]
    if out is None:
        out, col = np.empty((phase.shape[0], n_out)), 0
    if not (
        out.flags.c_contiguous
        and out.dtype in (np.float64, np.float32)
        and out.shape[1] >= col + n_out
        and out.shape[0] == phase.shape[0]
    ):
        raise ValueError("rff_features: out must be C-contiguous float64 or float32 with room for the block")
    if beta is None:
        _cos_sin_features(phase, out, col, n_out)
    else:
        _cos_features(phase, beta, out, col)
    return out


def rff_block(
    Z: np.ndarray,
    seed: int,
    block_id: int,
    n_out: int,
    sigma: float,
    out: np.ndarray | None = None,
    col: int = 0,
    orthogonal: bool = False,
    paired: bool = False,
) -> np.ndarray:
    """Random Fourier features of block `block_id` (Rahimi & Recht 2007) for the Gaussian kernel
    k(z, z') = exp(−‖z − z'‖² / (2σ²)): φ_j(z) = √2 cos(ω_jᵀz + β_j), ω_j ~ N(0, σ⁻² I),
    β_j ~ U[0, 2π), so that E[φ(z)ᵀφ(z')]/n_out = k(z, z') and E[φ_j²] = 1 (`rff_frequencies`,
    orthogonal or not, paired or not, then `rff_features`)."""
    omega, beta = rff_frequencies(seed, block_id, Z.shape[1], n_out, sigma, orthogonal, paired)
    return rff_features(Z, omega, beta, out=out, col=col, n_out=n_out)
