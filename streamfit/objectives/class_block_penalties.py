"""The regularizers g of the fbpd solver (Chierchia et al. 2015, §2.2), with their proximity
operators and dual norms. Weights are feature-major, W ∈ ℝ^{M×K} (column k is x^(k) of (1));
a block x^(k,b) is `group_size` consecutive features of one class (the last block of a class
may be shorter). The offsets b are not penalised.

    "l1"       g(W) = ‖W‖₁ = Σ_{j,k} |W_jk|
    "l1/l2"    g(W) = Σ_{k,b} ‖x^(k,b)‖₂          (the ℓ1,p norm of §2.2 with p = 2)
    "l1/linf"  g(W) = Σ_{k,b} ‖x^(k,b)‖∞          (the ℓ1,p norm of §2.2 with p = ∞)
    "l2"       g(W) = ½ ‖W‖²_F

Proximity operators prox_{tg}: soft thresholding (l1), block soft thresholding
max(1 − t/‖v‖₂, 0) v (l1/l2), v − P_{B₁(t)}(v) by Moreau's identity (l1/linf: the projection
onto the ℓ1 ball of radius t), v / (1 + t) (l2). For the norms, g* is the indicator of the unit
ball of the dual norm: ‖·‖∞, max_{k,b} ‖x^(k,b)‖₂, max_{k,b} ‖x^(k,b)‖₁; for l2, g* = ½‖·‖²_F.
These are not the row penalties of streamfit.objectives.penalties: there a group is one
feature's weights across classes, here a block of features within one class.
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel
from streamfit.projections import project_l1_ball


@kernel(nogil=True)
def _group_prox(W: np.ndarray, t: float, group_size: int, linf: bool) -> np.ndarray:
    """prox_{t g}(W) of a block norm g, block by block (v = x^(k,b)): block soft thresholding
    max(1 − t/‖v‖₂, 0)·v for l1/l2, v − P_{B₁(t)}(v) by Moreau's identity for l1/linf (`linf`)."""
    M, K = W.shape
    out = np.empty_like(W)
    for k in range(K):
        for j0 in range(0, M, group_size):
            j1 = min(j0 + group_size, M)
            v = W[j0:j1, k]
            # out[j0:j1, k] written element by element: an array-to-slice assignment compiles
            # numba's shape-error message (str formatting, seconds of a first use)
            if linf:  # prox_{t‖·‖∞}(v) = v − P_{B_t}(v) (Moreau)
                p = project_l1_ball(v, t)
                for j in range(j1 - j0):
                    out[j0 + j, k] = v[j] - p[j]
            else:  # block soft thresholding
                norm = np.sqrt(np.sum(v * v))
                scale = max(0.0, 1.0 - t / norm) if norm > 0.0 else 0.0
                for j in range(j1 - j0):
                    out[j0 + j, k] = scale * v[j]
    return out


@kernel(nogil=True)
def _group_norms(W: np.ndarray, group_size: int, p: int) -> np.ndarray:
    """‖x^(k,b)‖_p for every block (p = 1, 2, or 0 for ∞), class-major."""
    M, K = W.shape
    n_groups = (M + group_size - 1) // group_size
    out = np.empty(K * n_groups)
    for k in range(K):
        for g in range(n_groups):
            v = np.abs(W[g * group_size : min((g + 1) * group_size, M), k])
            if p == 1:
                out[k * n_groups + g] = v.sum()
            elif p == 2:
                out[k * n_groups + g] = np.sqrt(np.sum(v * v))
            else:
                out[k * n_groups + g] = v.max()
    return out


def penalty(W: np.ndarray, kind: str, group_size: int) -> float:
    """g(W): ‖W‖₁, Σ_{k,b} ‖x^(k,b)‖₂, Σ_{k,b} ‖x^(k,b)‖∞, or ½‖W‖² (offsets b excluded)."""
    if kind == "l1":
        return float(np.abs(W).sum())
    if kind == "l2":
        return 0.5 * float(np.einsum("ij,ij->", W, W))
    return float(_group_norms(W, group_size, 2 if kind == "l1/l2" else 0).sum())


def penalty_prox(W: np.ndarray, t: float, kind: str, group_size: int) -> np.ndarray:
    """prox_{t g}(W)."""
    if kind == "l1":
        return np.sign(W) * np.maximum(np.abs(W) - t, 0.0)
    if kind == "l2":
        return W / (1.0 + t)
    return _group_prox(W, t, group_size, kind == "l1/linf")


def dual_norm(V: np.ndarray, kind: str, group_size: int) -> float:
    """The dual norm of the norm-type penalties (‖·‖∞, max_b ‖·‖₂, max_b ‖·‖₁): g*(V) is the
    indicator of {dual_norm(V) ≤ 1}. Not defined for "l2", whose conjugate is ½‖V‖²."""
    if V.size == 0:
        return 0.0
    if kind == "l1":
        return float(np.abs(V).max())
    return float(_group_norms(V, group_size, 2 if kind == "l1/l2" else 1).max())
