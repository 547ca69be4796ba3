"""The link functions g = ∇Φ of the stagewise solver (Agarwal et al. 2014, eq. 12) and their
calibrated losses ℓ(u; y) = Φ(u) − yᵀu (eq. 13), on dense score and target matrices U, Y (n × k,
rows are samples; Y one-hot or a 0/1 indicator), vectorised for the solver's passes:
- "identity":  g(u) = u,             ℓ = ½‖y − u‖²  (up to a constant), Lipschitz L = 1;
- "softmax":   g(u) = softmax(u),    ℓ = log Σ_j exp(u_j) − yᵀu (multinomial logistic), L = ½;
- "sigmoid":   g(u) = 1/(1 + e^{−u}) per label, ℓ = Σ_j log(1 + e^{u_j}) − y_j u_j, L = ¼
  (the softmax link of a multilabel task: one logistic model per label).
Per sample these are the losses SQUARED, LOGISTIC and SIGMOID_LOGISTIC of
streamfit.objectives.losses, except that `link_loss_sum` for the identity link is the squared
residual without the ½ (2 Σ_i ℓ_SQUARED).
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel

LINK_LOSSES = {"identity": "squared", "softmax": "logistic", "sigmoid": "sigmoid_logistic"}


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
    squared residual Σ_i ‖y_i − u_i‖² (no ½: the squared error the solver logs as `loss`; its
    `objective` halves it)."""
    return link_residual(U, Y, link)[1]


def link_residual(U: np.ndarray, Y: np.ndarray, link: str, out: np.ndarray | None = None) -> tuple[np.ndarray, float]:
    """(Y − g(U), Σ_i ℓ(u_i; y_i)): the residual whose products with the design are the
    gradient of (13), and the loss (`link_loss_sum`), in one pass over U. `out` (identity link
    only; U itself allowed): the array the residual is written to."""
    if link == "identity":
        R = np.subtract(Y, U, out=out)
        return R, float(np.einsum("ij,ij->", R, R))
    if out is not None:
        raise ValueError("link_residual: out is for the identity link only")
    U, Y = np.ascontiguousarray(U, dtype=np.float64), np.ascontiguousarray(Y, dtype=np.float64)
    R = np.empty_like(U)
    return R, (_softmax_residual(U, Y, R) if link == "softmax" else _sigmoid_residual(U, Y, R))


@kernel()
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


@kernel()
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
