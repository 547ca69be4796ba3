"""Simplex, ℓ1-ball and epigraph projections (streamfit.projections) against exhaustive
active-set enumeration: the projection onto a polyhedron {z : Az ≤ c} is the feasible point,
among the projections onto the affine hulls {A_S z = c_S} of all constraint subsets S, that is
closest to the input. Inputs include ties, repeated and degenerate values."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from streamfit.projections import (
    epigraph_max_threshold,
    project_l1_ball,
    project_rows_simplex,
    project_simplex,
)


def brute_force_polyhedron(
    w: np.ndarray, A: np.ndarray, c: np.ndarray, eq: np.ndarray | None = None, d: np.ndarray | None = None
) -> np.ndarray:
    """argmin ‖z − w‖ s.t. A z ≤ c (and eq z = d) by enumerating active sets."""
    best, best_dist = None, np.inf
    m = A.shape[0]
    for size in range(m + 1):
        for S in itertools.combinations(range(m), size):
            rows = [A[list(S)]] + ([eq] if eq is not None else [])
            rhs = [c[list(S)]] + ([d] if d is not None else [])
            B, e = np.vstack(rows), np.concatenate(rhs)
            if B.shape[0] == 0:
                z = w.copy()
            else:
                z = w - B.T @ (np.linalg.pinv(B @ B.T) @ (B @ w - e))
                if np.abs(B @ z - e).max() > 1e-9:
                    continue  # inconsistent active set
            if (A @ z <= c + 1e-9).all():
                dist = np.linalg.norm(z - w)
                if dist < best_dist - 1e-12:
                    best, best_dist = z, dist
    return best


def simplex_cases(rng):
    cases = [
        np.zeros(4),
        np.ones(5),
        np.array([3.0]),
        np.array([-2.0, -2.0, -2.0]),
        np.array([1.0, 1.0, 0.0, 0.0]),
        np.array([0.5, 0.5, 0.5, -3.0]),
        np.array([10.0, -10.0, 10.0]),
        np.array([0.2, 0.2, 0.2, 0.2, 0.2]),
    ]
    for _ in range(60):
        K = int(rng.integers(1, 8))
        v = rng.normal(size=K) * rng.choice([0.01, 1.0, 10.0])
        if K > 2 and rng.random() < 0.4:  # ties
            v[rng.integers(K)] = v[0]
            v[rng.integers(K)] = v[1]
        cases.append(v)
    return cases


@pytest.mark.parametrize("a", [1.0, 0.3, 7.0])
def test_simplex_projection_matches_brute_force(a):
    rng = np.random.default_rng(0)
    for v in simplex_cases(rng):
        K = len(v)
        expected = brute_force_polyhedron(v, -np.eye(K), np.zeros(K), np.ones((1, K)), np.array([a]))
        got = project_simplex(v, a)
        np.testing.assert_allclose(got, expected, atol=1e-10, err_msg=str(v))
        rows = np.vstack([v, v[::-1]])
        project_rows_simplex(rows, a)
        np.testing.assert_allclose(rows[0], got, atol=1e-12)
        np.testing.assert_allclose(rows[1], got[::-1], atol=1e-10)


def test_simplex_projection_large_k_optimality():
    """K = 1000: the KKT conditions of min ½‖u − v‖² on S_a: u = max(v − τ, 0), Σu = a."""
    rng = np.random.default_rng(1)
    for a in (1.0, 50.0):
        v = rng.normal(size=1000)
        v[::7] = v[3]  # many ties
        u = project_simplex(v, a)
        assert u.min() >= 0 and abs(u.sum() - a) < 1e-10
        support = u > 0
        tau = (v[support] - u[support]).mean()
        np.testing.assert_allclose(v[support] - u[support], tau, atol=1e-10)
        assert (v[~support] <= tau + 1e-10).all()


def test_l1_ball_projection_matches_brute_force():
    rng = np.random.default_rng(2)
    for v in simplex_cases(rng):
        K = len(v)
        if K > 6:
            continue
        signs = np.array(list(itertools.product([-1.0, 1.0], repeat=K)))  # ‖z‖₁ ≤ a as 2^K half-spaces
        for a in (0.0, 0.5, 2.0):
            expected = brute_force_polyhedron(v, signs, np.full(len(signs), a)) if K <= 3 else None
            got = project_l1_ball(v, a)
            assert np.abs(got).sum() <= a + 1e-10
            if expected is not None:
                np.testing.assert_allclose(got, expected, atol=1e-9, err_msg=f"{v} {a}")
            # optimality: v − got is in the normal cone: ⟨v − got, z − got⟩ ≤ 0 for the vertices z of B_a
            vertices = np.vstack([a * np.eye(K), -a * np.eye(K)])
            assert ((vertices - got) @ (v - got) <= 1e-9).all()


def test_epigraph_projection_matches_brute_force():
    """epi h = {(p, θ) : p_k + r_k ≤ θ}: K half-spaces in ℝ^{K+1}; Proposition 3.3's projection
    from fbpd's threshold θ (epigraph_max_threshold)."""
    rng = np.random.default_rng(3)
    cases = []
    for v in simplex_cases(rng):
        K = len(v)
        if K > 6:
            continue
        z = int(rng.integers(K))
        r = np.ones(K)
        r[z] = 0.0  # the multiclass hinge offsets r_ℓ of §2.2
        for zeta in (v.max() + 1.0, -5.0, 0.0, float(v[0]), float(np.max(v + r))):  # inside, far below, on the edge
            cases.append((v, r, zeta))
    cases.append((np.zeros(3), np.zeros(3), 0.0))  # all tied on the boundary
    cases.append((np.ones(4), np.zeros(4), -1.0))  # all tied, below
    for y, r, zeta in cases:
        K = len(y)
        A = np.hstack([np.eye(K), -np.ones((K, 1))])
        expected = brute_force_polyhedron(np.append(y, zeta), A, -r)
        theta = epigraph_max_threshold(y + r, zeta)  # (15)-(16); p_k = min(y_k, θ − r_k)
        p = np.minimum(y, theta - r)
        np.testing.assert_allclose(np.append(p, theta), expected, atol=1e-9, err_msg=f"{y} {r} {zeta}")
