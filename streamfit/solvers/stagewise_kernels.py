"""Per-chunk numerical kernels of the stagewise solver (Agarwal et al. 2014).

Everything here works on one row chunk at a time and is row-wise: the result for a row
depends on that row only, so chunking never changes it.

Link functions g = ∇Φ (eq. 12) and their calibrated losses ℓ(u; y) = Φ(u) − yᵀu (eq. 13):
- "identity":  g(u) = u,             ℓ = ½‖y − u‖²  (up to a constant), Lipschitz L = 1;
- "softmax":   g(u) = softmax(u),    ℓ = log Σ_j exp(u_j) − yᵀu (multinomial logistic), L = ½;
- "sigmoid":   g(u) = 1/(1 + e^{−u}) per label, ℓ = Σ_j log(1 + e^{u_j}) − y_j u_j, L = ¼
  (the softmax link of a multilabel task: one logistic model per label).
"""

from __future__ import annotations

import math

import numba
import numpy as np


def link_mean(U: np.ndarray, link: str) -> np.ndarray:
    """g(U) row-wise: the predicted E[y | x] of the GLM (12)."""
    if link == "identity":
        return U
    if link == "softmax":
        E = np.exp(U - U.max(axis=1, keepdims=True))
        return E / E.sum(axis=1, keepdims=True)
    return 0.5 * (1.0 + np.tanh(0.5 * U))  # sigmoid, overflow-free


def link_loss_sum(U: np.ndarray, Y: np.ndarray, link: str) -> float:
    """Σ_i ℓ(u_i; y_i) for the calibrated loss (13). For the identity link this is the
    squared residual Σ_i ‖y_i − u_i‖² (no ½: it is what the solver logs as the objective)."""
    return link_residual(U, Y, link)[1]


def link_residual(U: np.ndarray, Y: np.ndarray, link: str) -> tuple[np.ndarray, float]:
    """(Y − g(U), Σ_i ℓ(u_i; y_i)): the residual whose products with the design are the
    gradient of (13), and the loss (`link_loss_sum`), in one pass over U."""
    if link == "identity":
        R = Y - U
        return R, float(np.einsum("ij,ij->", R, R))
    U, Y = np.ascontiguousarray(U, dtype=np.float64), np.ascontiguousarray(Y, dtype=np.float64)
    R = np.empty_like(U)
    return R, (_softmax_residual(U, Y, R) if link == "softmax" else _sigmoid_residual(U, Y, R))


@numba.njit(cache=True)
def _softmax_residual(U: np.ndarray, Y: np.ndarray, R: np.ndarray) -> float:
    """R_i = y_i − softmax(u_i); returns Σ_i (log Σ_j e^{u_ij} − y_iᵀu_i), with the row maximum
    taken out of the exponentials (no overflow)."""
    n, k = U.shape
    total = 0.0
    for i in range(n):
        m = U[i, 0]
        for j in range(1, k):
            m = max(m, U[i, j])
        s = 0.0
        for j in range(k):
            R[i, j] = np.exp(U[i, j] - m)
            s += R[i, j]
        row = m + np.log(s)
        for j in range(k):
            R[i, j] = Y[i, j] - R[i, j] / s
            row -= Y[i, j] * U[i, j]
        total += row
    return total


@numba.njit(cache=True)
def _sigmoid_residual(U: np.ndarray, Y: np.ndarray, R: np.ndarray) -> float:
    """R_ij = y_ij − σ(u_ij); returns Σ_ij (log(1 + e^{u_ij}) − y_ij u_ij), both overflow-free."""
    n, k = U.shape
    total = 0.0
    for i in range(n):
        for j in range(k):
            u = U[i, j]
            R[i, j] = Y[i, j] - 0.5 * (1.0 + np.tanh(0.5 * u))
            total += max(u, 0.0) + np.log1p(np.exp(-abs(u))) - Y[i, j] * u
    return total


def poly_basis(F: np.ndarray) -> np.ndarray:
    """G(ŷ) = [1, ŷ, ŷ², ŷ³] elementwise (Algorithm 2's calibration basis, §3.1), n × (1 + 3k)."""
    return np.hstack([np.ones((F.shape[0], 1)), F, F * F, F * F * F])


@numba.njit(cache=True)
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


@numba.njit(cache=True, fastmath={"contract"})
def _cos_features(phase: np.ndarray, beta: np.ndarray, out: np.ndarray, col: int) -> None:
    """out[i, col + j] = √2 cos(phase[i, j] + β_j), with the argument reduced to [−π, π] and the
    cosine as the Taylor polynomial above (vectorised: the inner loop runs over one row's
    features, so a row's values never depend on the other rows). `out` is C-contiguous."""
    n, p = phase.shape
    inv_two_pi = 0.5 / np.pi
    two_pi = 2.0 * np.pi
    root2 = np.sqrt(2.0)
    for i in range(n):
        src = phase[i]
        dst = out[i, col:col + p]  # row slices (not out[i, col + j]): the loop vectorises
        for j in range(p):
            x = src[j] + beta[j]
            x -= two_pi * np.rint(x * inv_two_pi)
            y = x * x
            c = 0.0
            for coefficient in _COS_TAYLOR:  # Horner, unrolled by the compiler
                c = c * y + coefficient
            dst[j] = root2 * c


def rff_frequencies(seed: int, block_id: int, n_in: int, n_out: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """(Ω, β) of random Fourier feature block `block_id`: Ω (n_in × n_out) ~ N(0, σ⁻²), β ~ U[0, 2π),
    drawn from the seed sequence (seed, block_id), so regenerated identically on every call."""
    rng = np.random.default_rng([seed, block_id])
    omega = rng.standard_normal((n_in, n_out)) / sigma
    beta = rng.uniform(0.0, 2.0 * np.pi, n_out)
    return omega, beta


def rff_features(Z: np.ndarray, omega: np.ndarray, beta: np.ndarray, out: np.ndarray | None = None,
                 col: int = 0) -> np.ndarray:
    """√2 cos(ZΩ + β): the phase ZΩ is one BLAS product in Ω's precision (float64, or float32
    for single-precision designs: a phase error of ~1e-7 · |ZΩ|); one fused pass
    (`_cos_features`) adds β, reduces to [−π, π] and evaluates the cosine by a polynomial, exact
    to ~1e-15 and several times faster than numpy's cosine (even its float32 one, with its 1e-6
    error). Written into columns col … col + n_out − 1 of `out` (C-contiguous, float64, or
    float32: the float64 values rounded) when given, else into a new float64 array, which is
    returned."""
    phase = np.ascontiguousarray(Z, dtype=omega.dtype) @ omega
    if out is None:
        out, col = np.empty(phase.shape), 0
    if not (out.flags.c_contiguous and out.dtype in (np.float64, np.float32) and out.shape[1] >= col + phase.shape[1]
            and out.shape[0] == phase.shape[0]):
        raise ValueError("rff_features: out must be C-contiguous float64 or float32 with room for the block")
    _cos_features(phase, beta, out, col)
    return out


def rff_block(Z: np.ndarray, seed: int, block_id: int, n_out: int, sigma: float,
              out: np.ndarray | None = None, col: int = 0) -> np.ndarray:
    """Random Fourier features of block `block_id` (Rahimi & Recht 2007) for the Gaussian kernel
    k(z, z') = exp(−‖z − z'‖² / (2σ²)): φ_j(z) = √2 cos(ω_jᵀz + β_j), ω_j ~ N(0, σ⁻² I),
    β_j ~ U[0, 2π), so that E[φ(z)ᵀφ(z')]/n_out = k(z, z') and E[φ_j²] = 1 (`rff_frequencies`,
    then `rff_features`)."""
    return rff_features(Z, *rff_frequencies(seed, block_id, Z.shape[1], n_out, sigma), out=out, col=col)
