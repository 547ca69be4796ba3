"""The multiboost solver (Lin et al. 2012, Algorithms 1 and 2) against independent references:
scipy's 1-D minimizer for the coordinate update (12), brute force for the stumps of (4); and its
out-of-core contract (chunked histograms, resume, workers), its model and its CLI (the master
problem and FCD: test_multiboost_master.py)."""

from __future__ import annotations

import functools
import json
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest
import scipy.sparse as sp
from click.testing import CliRunner
from fitting import fit_solver
from numba_compilations import COUNTING
from scipy.optimize import minimize_scalar
from sklearn.datasets import load_digits

import streamfit.solvers.multiboost as mb
from streamfit import MultiBoostClassifier, load_model
from streamfit.checkpoint import ChunkState
from streamfit.engine import Engine
from streamfit.errors import ConfigError, StreamfitError
from streamfit.estimators import ConvergenceWarning
from streamfit.solvers import multiboost_kernels as kernels
from streamfit.store import InMemoryStore

fit = functools.partial(fit_solver, "multiboost")  # (model, metrics log) of a run


@pytest.fixture(scope="module")
def small_digits(digits):
    """The first 400 digits (64 features of 0..16, many zeros)."""
    X, y, classes = digits
    return X[:400], y[:400], classes


def test_closed_form_update_12_is_the_minimum_of_10():
    rng = np.random.default_rng(0)
    for _ in range(60):
        v_plus, v_minus = rng.exponential(size=2) * 10.0 ** rng.uniform(-3, 3, size=2)
        C_over_p = 10.0 ** rng.uniform(-3, 3)

        def g(w, v_plus=v_plus, v_minus=v_minus, C_over_p=C_over_p):  # (10)
            return w + C_over_p * (v_minus * np.exp(w) + v_plus * np.exp(-w))

        w = kernels.coordinate_minimum(v_plus, v_minus, C_over_p, False)
        ref = minimize_scalar(g, bounds=(0.0, 60.0), method="bounded", options={"xatol": 1e-12})
        assert g(w) <= ref.fun * (1 + 1e-12)
        assert w == pytest.approx(max(ref.x, 0.0), abs=1e-5)
    # (13) is the C → ∞ limit of (12)
    assert kernels.coordinate_minimum(3.0, 0.5, 1e9, False) == pytest.approx(
        kernels.coordinate_minimum(3.0, 0.5, 1e9, True), rel=1e-8
    )


def test_the_gain_is_the_exact_decrease_of_the_loss_under_13_and_bounds_that_of_2_at_finite_c():
    """choice="gain" scores a learner by (√V₊ − √V₋)². Along one new coordinate (w from 0, the
    other weights fixed, random scores, a learner with outputs in {−1, 0, +1}) a 1-D numeric
    minimizer of the dense objective gives:
    - the loss (1/p)Σ exp(−γ) alone (C → ∞, update (13)): its decrease is (√V₊ − √V₋)²/p, at
      (13)'s w*, exactly;
    - (2)/C = lam·w + loss at a finite C (update (12)): its decrease is
      (V₊ + V₋ − 2√(V₊V₋ + h²) − 2h·w*)/p with h = p/2C and w* of (12) (0 where w* = 0), less than the gain/p: the
      gain is that of (2) only in the limit C → ∞ (at the default C = 1e8 the two differ by
      about lam·w*, 1e-8·w*);
    - (2)/C after (13)'s step: the gain/p less lam·w*(13);
    and choice="decrease"'s score (kernels._score with `exact`) is p times the decrease of (2)/C by
    the run's step: (12), (13), and (13) shrunk by ν = 0.3 (−inf where (2) does not fall)."""
    rng = np.random.default_rng(11)
    m, K = 60, 4
    p = m * (K - 1)
    rows = np.arange(m)
    interior = 0  # trials where (12)'s minimum is not at the bound w = 0
    for _ in range(30):
        labels = rng.integers(0, K, m)
        F = rng.normal(size=(m, K))
        c = int(rng.integers(K))
        h = rng.choice([-1.0, 0.0, 1.0], size=m)
        mu = np.exp(F - F[rows, labels][:, None])
        mu[rows, labels] = 0.0
        own = labels == c
        v_plus = mu.sum(axis=1)[own & (h > 0)].sum() + mu[~own & (h < 0), c].sum()
        v_minus = mu.sum(axis=1)[own & (h < 0)].sum() + mu[~own & (h > 0), c].sum()
        if v_plus <= v_minus:
            h, (v_plus, v_minus) = -h, (v_minus, v_plus)  # the learner's negation moves it

        def loss(w, h=h, F=F, c=c, labels=labels):
            G = F.copy()
            G[:, c] += w * h
            gamma = G[rows, labels][:, None] - G
            return (np.exp(-gamma).sum() - m) / p  # the m terms y = y_i are e^0 = 1

        gain = kernels._score(True, v_plus - v_minus, v_plus, v_minus, (False, 1.0, True, 1.0), -np.inf, 0.0)
        ref = minimize_scalar(loss, bounds=(0.0, 30.0), method="bounded", options={"xatol": 1e-12})
        assert loss(0.0) - ref.fun == pytest.approx(gain / p, rel=1e-8)
        w13 = kernels.coordinate_minimum(v_plus, v_minus, 1.0, True)  # (13) does not depend on C
        assert w13 == pytest.approx(ref.x, abs=1e-5)
        lam = 10.0 ** rng.uniform(-4, -1)
        half = p * lam / 2  # p / 2C
        w12 = kernels.coordinate_minimum(v_plus, v_minus, 1.0 / (lam * p), False)
        ref = minimize_scalar(lambda w, loss=loss, lam=lam: lam * w + loss(w), bounds=(0.0, 30.0), method="bounded",
                              options={"xatol": 1e-12})  # fmt: skip
        decrease = loss(0.0) - ref.fun
        closed = (v_plus + v_minus - 2 * np.sqrt(v_plus * v_minus + half**2) - 2 * half * w12) / p if w12 > 0 else 0.0
        assert decrease == pytest.approx(closed, rel=1e-7, abs=1e-13)
        interior += w12 > 0
        assert decrease < gain / p
        # choice="decrease" scores the decrease of (2) itself (times p), by the run's step
        C_over_p = 1.0 / (lam * p)
        exact = kernels._score(True, v_plus - v_minus, v_plus, v_minus, (True, C_over_p, False, 1.0), -np.inf, 0.0)
        assert exact == (pytest.approx(p * decrease, rel=1e-7, abs=1e-11) if w12 > 0 else -np.inf)
        after13 = loss(0.0) - (lam * w13 + loss(w13))
        assert after13 == pytest.approx(gain / p - lam * w13, rel=1e-8, abs=1e-13)
        exact = kernels._score(True, v_plus - v_minus, v_plus, v_minus, (True, C_over_p, True, 1.0), -np.inf, 0.0)
        assert exact == (pytest.approx(p * after13, rel=1e-7, abs=1e-11) if after13 > 0 else -np.inf)
        shrunk = kernels._score(True, v_plus - v_minus, v_plus, v_minus, (True, C_over_p, True, 0.3), -np.inf, 0.0)
        after = loss(0.0) - (lam * 0.3 * w13 + loss(0.3 * w13))
        assert shrunk == (pytest.approx(p * after, rel=1e-7, abs=1e-11) if after > 0 else -np.inf)
    assert 10 <= interior < 30  # both the closed form and the bound w = 0 are exercised


def test_the_histogram_with_the_own_class_part_equals_two_histograms_bit_for_bit():
    """choice="gain"'s second histogram (g's own-class part) comes from the same pass as g's
    (one add per entry): equal to kernels.histogram of G_own, every bit."""
    X, dense, labels, F = _random_binned_data()
    labels = labels.astype(np.int64)
    sketch = mb.Sketch.of(
        X.tocoo().col.astype(np.int64), X.tocoo().data.astype(np.float64), np.ones(X.nnz),
        np.full(X.shape[1], -np.inf), X.shape[0], 64,
    )  # fmt: skip
    cuts, offsets = mb.bin_cuts(sketch, n_bins=4)
    codes = kernels.bin_codes(X.indices, X.data.astype(np.float64), cuts, offsets)
    G = kernels.signed_weights(F, labels)
    G[::7] = 0.0  # rows held out weigh 0
    G_own = np.where(np.arange(G.shape[1])[None, :] == labels[:, None], G, 0.0)
    H, stored, H_own, stored_own = kernels.histograms(X.indptr, X.indices, codes, G, labels, offsets, True)
    for got, want in zip((H, stored, H_own, stored_own), (
        *kernels.histogram(X.indptr, X.indices, codes, G, offsets),
        *kernels.histogram(X.indptr, X.indices, codes, G_own, offsets),
    )):  # fmt: skip
        np.testing.assert_array_equal(got, want)
    assert np.count_nonzero(H_own) > 0


def test_the_sketchs_order_is_numpys_lexsort():
    """kernels.feature_value_order (the order Sketch.of sorts a chunk's entries in) is
    np.lexsort((values, features)): by feature, then value, ties in input order; with repeated
    values (ties), features without entries, one entry and none."""
    rng = np.random.default_rng(3)
    for n, d in ((0, 3), (1, 3), (50, 1), (2000, 7), (5000, 400)):
        features = rng.integers(0, d, n).astype(np.int64)
        values = rng.normal(size=n).round(1)  # many ties
        np.testing.assert_array_equal(kernels.feature_value_order(features, values, d), np.lexsort((values, features)))


@pytest.mark.parametrize("K", [2, 3, 8])
def test_class_totals_equal_numpys_column_sums_bit_for_bit(K):
    """kernels.class_totals (the histogram task's per-class totals of g and of its own-class
    part) gives numpy's G.sum(axis=0) and G_own.sum(axis=0), every bit, on signed weights whose
    magnitudes span 1e-250 to 1e250 (so that the order of the additions shows in the result), with
    rows held out (0) and for 1 to 3000 rows."""
    rng = np.random.default_rng(K)
    differs = 0
    for n in (1, 2, 7, 9, 100, 3000):
        labels = rng.integers(0, K, n).astype(np.int64)
        G = kernels.signed_weights(rng.uniform(-1.0, 1.0, (n, K)) * 575.0, labels)
        G[rng.random(n) < 0.1] = 0.0
        G_own = np.where(np.arange(K)[None, :] == labels[:, None], G, 0.0)
        totals, own_totals = kernels.class_totals(G, labels, True)
        np.testing.assert_array_equal(totals, G.sum(axis=0))
        np.testing.assert_array_equal(own_totals, G_own.sum(axis=0))
        assert kernels.class_totals(G, labels, False)[1].shape == (0,)
        differs += not np.array_equal(totals, np.array([np.sum(G[:, c].copy()) for c in range(K)]))
    assert differs > 0  # pairwise sums of the columns differ: the test can tell the order


def test_the_update_at_v_minus_zero_is_the_minimum_of_10_at_c_for_both_updates():
    """V₋ = 0 (no pair pushes w down): (10) is w + (C/p)V₊e^{−w}, whose minimum over w ≥ 0 is
    log(V₊C/p), or 0 when V₊C/p ≤ 1. (13) has none (+inf), so large_c takes (12)'s at the given C:
    both updates equal a 1-D numeric minimizer of (10), also where the minimum is at the bound."""
    rng = np.random.default_rng(5)
    at_bound = 0
    for _ in range(60):
        v_plus = rng.exponential() * 10.0 ** rng.uniform(-4, 3)
        C_over_p = 10.0 ** rng.uniform(-2, 8)

        def g(w, v_plus=v_plus, C_over_p=C_over_p):  # (10) with V₋ = 0
            return w + C_over_p * v_plus * np.exp(-w)

        ref = minimize_scalar(g, bounds=(0.0, 60.0), method="bounded", options={"xatol": 1e-12})
        for large_c in (False, True):
            w = kernels.coordinate_minimum(v_plus, 0.0, C_over_p, large_c)
            assert np.isfinite(w) and g(w) <= ref.fun * (1 + 1e-12)
            assert w == pytest.approx(max(ref.x, 0.0), abs=1e-5)
        at_bound += v_plus * C_over_p <= 1.0
    assert 3 <= at_bound <= 57  # both branches of max(0, ·) are exercised
    # coordinate_update moves a weight from any old value to that minimum (old enters V₊ = e^{old}Σ_{D+} μ)
    assert kernels.coordinate_update(2.0, 0.0, 0.7, 1e3, True, 1.0) == pytest.approx(np.log(2.0 * np.exp(0.7) * 1e3))
    assert kernels.coordinate_update(2.0, 0.0, 0.7, 1e3, True, 0.5) == pytest.approx(
        0.7 + 0.5 * (np.log(2.0 * np.exp(0.7) * 1e3) - 0.7)
    )


def _random_binned_data(seed=2, m=90, d=6, K=3):
    rng = np.random.default_rng(seed)
    dense = rng.integers(-3, 7, size=(m, d)).astype(np.float64)
    dense[rng.random((m, d)) < 0.4] = 0.0  # sparse columns: the zero bin is filled from the totals
    X = sp.csr_matrix(dense)
    labels = rng.integers(0, K, m).astype(np.int32)
    F = rng.normal(size=(m, K))
    return X, dense, labels, F


def test_chunked_histograms_equal_the_whole_and_the_stumps_are_the_brute_force_argmax(tmp_path):
    X, dense, labels, F = _random_binned_data()
    m, d = dense.shape
    K = F.shape[1]
    source = InMemoryStore(X, labels, [str(c) for c in range(K)], chunk_rows=25)  # 4 chunks
    state = ChunkState(str(tmp_path))
    for i in range(source.n_chunks):
        lo, hi = source.chunk_bounds(i)
        state.write(mb.SCORES, 1, i, F[lo:hi])
    sketch = Engine(mode="inprocess").map_reduce(mb._sketch_task, source, range(source.n_chunks), size=64)
    cuts, offsets = mb.bin_cuts(sketch, n_bins=16)  # ≥ the 10 distinct values: every threshold
    for f in range(d):
        assert np.array_equal(cuts[offsets[f] : offsets[f + 1]], np.unique(dense[:, f])[:-1])
    used, compact_offsets = mb.used_columns(offsets)
    assert np.array_equal(used, np.arange(d)) and np.array_equal(compact_offsets, offsets)  # every column has cuts
    Engine(mode="inprocess").map(
        mb._bins_task, source, range(source.n_chunks), state=state, cuts=cuts, cut_offsets=offsets, used=used
    )
    kw = {"state": state, "version": 1, "cut_offsets": offsets, "holdout": None, "seed": 0, "own": True}
    chunked = Engine(mode="inprocess").map_reduce(mb._histogram_task, source, range(source.n_chunks), **kw)
    whole_source = InMemoryStore(X, labels, source.classes, chunk_rows=m)
    whole_state = ChunkState(str(tmp_path / "whole"))
    whole_state.write(mb.SCORES, 1, 0, F)
    mb._bins_task(whole_source, 0, state=whole_state, cuts=cuts, cut_offsets=offsets, used=used)
    whole = mb._histogram_task(whole_source, 0, **{**kw, "state": whole_state})
    for a, b in zip(chunked, whole):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
    zero_bins = np.array([np.searchsorted(cuts[offsets[f] : offsets[f + 1]], 0.0) for f in range(d)])
    zero_rows = mb.zero_bin_rows(offsets, zero_bins)  # the implicit zeros go to each feature's zero bin
    H = mb.fill_zero_bins(chunked.bins.copy(), chunked.stored, chunked.totals, zero_rows)
    no_own = (np.zeros((0, K)), np.zeros(0))  # the edge (4), not the gain
    feature, bin_, polarity, edge, _, _, _ = kernels.best_stumps(
        H, chunked.totals, offsets, True, False, False, *no_own
    )

    G = kernels.signed_weights(F, labels.astype(np.int64))  # brute force: every feature, threshold, sign of (4)
    sign_best = np.zeros(K)
    for c in range(K):
        best = max(
            (s * float(G[:, c] @ np.where(dense[:, f] > t, 1.0, -1.0)), f, t, s)
            for f in range(d)
            for t in np.unique(dense[:, f])[:-1]
            for s in (1, -1)
        )
        threshold = cuts[offsets[feature[c]] + bin_[c]]
        chosen = polarity[c] * float(G[:, c] @ np.where(dense[:, feature[c]] > threshold, 1.0, -1.0))
        assert chosen == pytest.approx(best[0], rel=1e-12)
        assert edge[c] == pytest.approx(best[0], rel=1e-12)
        sign_best[c] = best[0]

    # indicator stumps: 1[x_f > t] (polarity +1) or 1[x_f ≤ t] (−1), t = +inf being the constant 1
    feature, bin_, polarity, edge, _, _, _ = kernels.best_stumps(
        H, chunked.totals, offsets, False, True, False, *no_own
    )
    for c in range(K):
        best = max(
            float(G[:, c] @ ((dense[:, f] > t) == (s > 0)))
            for f in range(d)
            for t in [*np.unique(dense[:, f])[:-1], np.inf]
            for s in (1, -1)
        )
        n_cuts = offsets[feature[c] + 1] - offsets[feature[c]]
        threshold = cuts[offsets[feature[c]] + bin_[c]] if bin_[c] < n_cuts else np.inf
        chosen = float(G[:, c] @ ((dense[:, feature[c]] > threshold) == (polarity[c] > 0)))
        assert chosen == pytest.approx(best, rel=1e-12)
        assert edge[c] == pytest.approx(best, rel=1e-12)
        indicator_best = edge[c]
        both = kernels.best_stumps(H, chunked.totals, offsets, True, True, False, *no_own)[3][c]
        assert both == pytest.approx(max(sign_best[c], indicator_best), rel=1e-12)

    # choice="gain": the largest (√V₊ − √V₋)² over both kinds, V± the μ mass of the pairs with δh = ±1
    H_own = mb.fill_zero_bins(chunked.own_bins.copy(), chunked.own_stored, chunked.own_totals, zero_rows)
    feature, bin_, polarity, edge, low, _, largest = kernels.best_stumps(
        H, chunked.totals, offsets, True, True, False, H_own, chunked.own_totals
    )
    # the largest edge over the pool, returned by every scan: the edge of the scan scored by the edge alone
    assert np.array_equal(largest, kernels.best_stumps(H, chunked.totals, offsets, True, True, False, *no_own)[3])
    mu = np.exp(F - F[np.arange(m), labels][:, None])
    mu[np.arange(m), labels] = 0.0
    for c in range(K):
        in_c = labels == c
        R_c, mu_c = np.where(in_c, mu.sum(axis=1), 0.0), np.where(in_c, 0.0, mu[:, c])  # own rows' R, others' μ

        def gain(h, R_c=R_c, mu_c=mu_c):
            v_plus, v_minus = R_c @ (h > 0) + mu_c @ (h < 0), R_c @ (h < 0) + mu_c @ (h > 0)
            return (np.sqrt(v_plus) - np.sqrt(v_minus)) ** 2 if v_plus > v_minus else -np.inf

        learners = [
            (s * np.where(dense[:, f] > t, 1.0, -1.0), (f, t, s, -1)) for f in range(d) for t in np.unique(dense[:, f])[:-1] for s in (1, -1)
        ] + [
            (1.0 * ((dense[:, f] > t) == (s > 0)), (f, t, s, 0)) for f in range(d) for t in [*np.unique(dense[:, f])[:-1], np.inf] for s in (1, -1)
        ]  # fmt: skip
        best = max(gain(h) for h, _ in learners)
        n_cuts = offsets[feature[c] + 1] - offsets[feature[c]]
        threshold = cuts[offsets[feature[c]] + bin_[c]] if bin_[c] < n_cuts else np.inf
        above = dense[:, feature[c]] > threshold
        chosen = polarity[c] * np.where(above, 1.0, -1.0) if low[c] == -1 else 1.0 * (above == (polarity[c] > 0))
        assert gain(chosen) == pytest.approx(best, rel=1e-10)
        assert edge[c] == pytest.approx(float(G[:, c] @ chosen), rel=1e-10, abs=1e-9)

    # the negation-closed pool "signed" (indicators and −1[x_f > t], −1[x_f ≤ t], −1), and the kernel's union of
    # it with the sign stumps, by the edge (4) and by the gain, against every feature, threshold, kind and sign
    for sign_stumps in (False, True):
        for own in (no_own, (H_own, chunked.own_totals)):
            feature, bin_, polarity, edge, low, sign, largest = kernels.best_stumps(
                H, chunked.totals, offsets, sign_stumps, True, True, *own
            )
            by_edge = kernels.best_stumps(H, chunked.totals, offsets, sign_stumps, True, True, *no_own)
            assert np.array_equal(largest, by_edge[3]) and np.array_equal(largest, by_edge[6])
            for c in range(K):
                in_c = labels == c
                R_c, mu_c = np.where(in_c, mu.sum(axis=1), 0.0), np.where(in_c, 0.0, mu[:, c])

                def score(h, c=c, R_c=R_c, mu_c=mu_c, by_gain=own is not no_own):
                    return gain(h, R_c, mu_c) if by_gain else float(G[:, c] @ h)

                indicators = [
                    1.0 * ((dense[:, f] > t) == (s > 0)) for f in range(d) for t in [*np.unique(dense[:, f])[:-1], np.inf]
                    for s in (1, -1)
                ]  # fmt: skip
                pool = [*indicators, *(-h for h in indicators)]
                if sign_stumps:
                    pool += [s * np.where(dense[:, f] > t, 1.0, -1.0) for f in range(d)
                             for t in np.unique(dense[:, f])[:-1] for s in (1, -1)]  # fmt: skip
                best = max(score(h) for h in pool)
                n_cuts = offsets[feature[c] + 1] - offsets[feature[c]]
                threshold = cuts[offsets[feature[c]] + bin_[c]] if bin_[c] < n_cuts else np.inf
                positive = (dense[:, feature[c]] > threshold) == (polarity[c] > 0)
                chosen = sign[c] * np.where(positive, 1.0, float(low[c]))
                assert score(chosen) == pytest.approx(best, rel=1e-10)
                assert edge[c] == pytest.approx(float(G[:, c] @ chosen), rel=1e-10, abs=1e-9)
                assert sign_stumps or low[c] == 0
            if not sign_stumps and own is no_own:
                assert np.any(sign < 0)  # a negated learner wins for some class here

    # choice="decrease": the largest decrease of (2)/C by the step the run takes on the learner as a new
    # coordinate, over the pool "all" (sign stumps and signed indicators), against the dense objective along
    # every learner: the step from a 1-D numeric minimizer (of the loss alone for (13), of (2) for (12) and
    # wherever V₋ = 0), shrunk by ν
    rows = np.arange(m)
    indicators = [
        1.0 * ((dense[:, f] > t) == (s > 0)) for f in range(d) for t in [*np.unique(dense[:, f])[:-1], np.inf]
        for s in (1, -1)
    ]  # fmt: skip
    pool = [*indicators, *(-h for h in indicators)]
    pool += [s * np.where(dense[:, f] > t, 1.0, -1.0) for f in range(d) for t in np.unique(dense[:, f])[:-1]
             for s in (1, -1)]  # fmt: skip
    p_pairs = m * (K - 1)
    differs_from_gain = 0
    for large_c, nu, C_over_p in ((True, 1.0, 0.05), (False, 1.0, 0.05), (True, 0.3, 0.05), (False, 0.5, 1e3)):
        lam = 1.0 / (C_over_p * p_pairs)
        own = (H_own, chunked.own_totals, True, C_over_p, large_c, nu)
        feature, bin_, polarity, edge, low, sign, largest = kernels.best_stumps(
            H, chunked.totals, offsets, True, True, True, *own
        )
        by_gain = kernels.best_stumps(H, chunked.totals, offsets, True, True, True, H_own, chunked.own_totals)
        by_edge = kernels.best_stumps(H, chunked.totals, offsets, True, True, True, *no_own)
        assert np.array_equal(largest, by_edge[3]) and np.array_equal(by_gain[6], by_edge[3])
        for c in range(K):

            def objective(w, h, c=c, lam=lam):  # (2)/C along the coordinate (c, h) from F
                G = F.copy()
                G[:, c] += w * h
                return lam * w + (np.exp(G - G[rows, labels][:, None]).sum() - m) / p_pairs

            def decrease(h, c=c, lam=lam, large_c=large_c, nu=nu, objective=objective):
                v_minus = sum(np.exp(F[i, y] - F[i, labels[i]]) for i in range(m) for y in range(K) if y != labels[i]
                              and (h[i] if y == c else -h[i] if labels[i] == c else 0.0) < 0)  # fmt: skip
                target = (
                    (lambda w: objective(w, h) - lam * w) if large_c and v_minus > 0 else (lambda w: objective(w, h))
                )
                ref = minimize_scalar(target, bounds=(0.0, 40.0), method="bounded", options={"xatol": 1e-12})
                w = nu * max(ref.x, 0.0)
                return objective(0.0, h) - objective(w, h) if w > 1e-9 else -np.inf

            scores = [decrease(h) for h in pool]
            best = max(scores)
            n_cuts = offsets[feature[c] + 1] - offsets[feature[c]]
            threshold = cuts[offsets[feature[c]] + bin_[c]] if bin_[c] < n_cuts else np.inf
            positive = (dense[:, feature[c]] > threshold) == (polarity[c] > 0)
            chosen = sign[c] * np.where(positive, 1.0, float(low[c]))
            assert decrease(chosen) == pytest.approx(best, rel=1e-6)
            assert sorted(scores)[-2] < best * (1 - 1e-4)  # no near tie: the argmax is the one learner
            differs_from_gain += (feature[c], bin_[c], polarity[c], low[c], sign[c]) != tuple(a[c] for a in (
                by_gain[0], by_gain[1], by_gain[2], by_gain[4], by_gain[5]))  # fmt: skip
    assert differs_from_gain >= 1  # the ℓ1 term (or ν) changes the choice somewhere here


def test_stumps_on_the_binned_chunk_equal_the_stumps_on_raw_values():
    """kernels.stump_bits (bin(x_f) > b, stored entries' bins and each feature's zero bin) against
    the stump evaluated on the raw values (x_f > cut_b, +inf past the last cut: the constant), for
    every feature, bin and polarity; negative, zero and positive values, quantile and exact bins,
    rows not a multiple of 8."""
    rng = np.random.default_rng(5)
    m, d = 203, 4
    dense = np.where(rng.random((m, d)) < 0.4, 0.0, rng.normal(size=(m, d)))
    dense[:, 3] = rng.integers(-2, 3, size=m)  # five distinct values: exact bins
    X = sp.csr_matrix(dense)
    source = InMemoryStore(X, np.zeros(m, np.int32), ["a", "b"], chunk_rows=m)
    sketch = Engine(mode="inprocess").map_reduce(mb._sketch_task, source, range(1), size=64)
    cuts, offsets = mb.bin_cuts(sketch, n_bins=8)
    codes = kernels.bin_codes(X.indices, X.data, cuts, offsets)
    zero_bins = np.array([np.searchsorted(cuts[offsets[f] : offsets[f + 1]], 0.0) for f in range(d)])
    stumps = [(f, b, s) for f in range(d) for b in range(offsets[f + 1] - offsets[f] + 1) for s in (1, -1)]
    features, bins, polarity = (np.array(column) for column in zip(*stumps))
    got = kernels.stump_bits(
        X.indptr, X.indices, codes, d, features, bins, polarity.astype(np.int8), zero_bins.astype(np.int64)
    )
    thresholds = np.array([cuts[offsets[f] + b] if offsets[f] + b < offsets[f + 1] else np.inf for f, b, _ in stumps])
    expected = np.packbits((dense[:, features].T > thresholds[:, None]) == (polarity[:, None] > 0), axis=1)
    np.testing.assert_array_equal(got, expected)


def test_the_constant_learner_is_taken_when_no_split_exists():
    """One feature with a single value: no threshold splits it, so the pool's only learner is
    the constant ħ ≡ 1 (an indicator past the last bin; it has no cut value, which once indexed
    past the feature's cuts). Stage-wise (13) at F = 0 for class 0 (6 of 10 rows, K = 3):
    V₊ = Σ_{i: y_i = 0} Σ_{y≠0} μ = 6·2, V₋ = Σ_{i: y_i ≠ 0} μ_(i,0) = 4, so w = ½ log 3; classes 1
    and 2 (edge T_c < 0) get w = 0."""
    X = sp.csr_matrix(np.ones((10, 1)))
    labels = np.array([0] * 6 + [1] * 2 + [2] * 2, dtype=np.int32)
    model, _ = fit(InMemoryStore(X, labels, ["a", "b", "c"], chunk_rows=4), max_iter=2, stumps="indicator")
    assert np.all(np.isinf(model.thresholds)) and np.all(model.polarity == -1) and np.all(model.lows == 0)
    assert model.weights[model.coord_class == 0] == pytest.approx([0.5 * np.log(3.0)], rel=1e-12)
    np.testing.assert_allclose(model.weights[model.coord_class != 0], 0.0, atol=1e-12)
    assert np.all(model.predict(X) == "a")


def test_a_model_with_the_constant_learner_saves_and_loads(tmp_path):
    """The constant learner's threshold is +inf by design: load_model (which refuses NaN and
    infinite values in a saved model's arrays) reads it back and scores as the fitted model; a
    NaN or −inf threshold is still refused. Before, every multiboost model that took the constant
    learner (dna with the defaults) was written by `train` and then refused by `evaluate`."""
    X = sp.csr_matrix(np.ones((10, 1)))
    labels = np.array([0] * 6 + [1] * 2 + [2] * 2, dtype=np.int32)
    model, _ = fit(InMemoryStore(X, labels, ["a", "b", "c"], chunk_rows=4), max_iter=2, stumps="indicator")
    assert np.all(model.thresholds == np.inf)
    model.save(str(tmp_path / "m"))
    loaded = load_model(str(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.thresholds, model.thresholds)
    np.testing.assert_array_equal(loaded.decision_function(X), model.decision_function(X))
    for bad in (np.nan, -np.inf):
        model.thresholds = np.full_like(model.thresholds, bad)
        model.save(str(tmp_path / f"bad{bad}"))
        with pytest.raises(StreamfitError, match="'thresholds' holds NaN or infinite values"):
            load_model(str(tmp_path / f"bad{bad}"))


def test_choice_gain_takes_the_learner_of_the_largest_loss_decrease():
    """A run with choice="gain": its first iteration's stump per class (at F = 0: μ = 1, so
    V₊ and V₋ count pairs) is the brute-force maximiser of (√V₊ − √V₋)² over every feature,
    threshold and kind of the pool, on the raw values. On these binary features the edge (4)
    picks another stump (another kind or side) for two of the three classes."""
    rng = np.random.default_rng(3)
    dense = (rng.random((300, 12)) < 0.3) * 1.0
    y = (dense[:, :3] @ rng.normal(size=(3, 3)) * 2 + rng.gumbel(size=(300, 3))).argmax(axis=1).astype(np.int32)
    source = InMemoryStore(sp.csr_matrix(dense), y, ["a", "b", "c"], chunk_rows=128)
    model, _ = fit(source, max_iter=1, choice="gain")
    by_edge, _ = fit(source, max_iter=1, choice="edge")
    differ = (model.features != by_edge.features) | (model.polarity != by_edge.polarity) | (model.lows != by_edge.lows)
    assert np.count_nonzero(differ) == 2
    K = 3
    for c in range(K):
        own = (y == c) * (K - 1.0)  # R_i of a row of class c at F = 0; μ_(i,c) = 1 for the others
        other = (y != c) * 1.0

        def gain(h, own=own, other=other):
            v_plus, v_minus = own @ (h > 0) + other @ (h < 0), own @ (h < 0) + other @ (h > 0)
            return (np.sqrt(v_plus) - np.sqrt(v_minus)) ** 2 if v_plus > v_minus else -np.inf

        best = max(
            max(gain(s * np.where(dense[:, f] > t, 1.0, -1.0)), gain(1.0 * ((dense[:, f] > t) == (s > 0))))
            for f in range(dense.shape[1])
            for t in np.unique(dense[:, f])[:-1]
            for s in (1, -1)
        )
        best = max(best, gain(np.ones(len(y))))
        (j,) = np.flatnonzero(model.coord_class == c)
        lrn = model.coord_learner[j]
        above = dense[:, model.features[lrn]] > model.thresholds[lrn]
        positive = above == (model.polarity[lrn] > 0)
        chosen = np.where(positive, 1.0, float(model.lows[lrn]))
        assert gain(chosen) == pytest.approx(best, rel=1e-12)
    with pytest.raises(ValueError, match="choice=gain is per class"):
        mb.MultiBoostParams(choice="gain", weak_learners="shared")


@pytest.mark.parametrize("stumps, nu", [("both", 0.3), ("signed", 1.0), ("signed", 0.3)])
def test_learning_rate_shrinks_each_stage_wise_step_by_nu(stumps, nu):
    """Stage-wise (tau_max = 1, update (13)) with learning_rate ν: replayed in numpy on the raw
    values with the learners the run chose, coordinate by coordinate in the run's order, each new
    weight is ν·½ log(V₊/V₋) with V± the sums of μ_(i,y) = exp(F_y − F_{y_i}) over the pairs where
    δh = ±1 at the scores F of the weights before it (eqs. 13, 21), and F_c moves by that weight
    times ħ (ħ = sign·(1 or low): negated indicators too, with the pool "signed"). A
    shrunk step is refused with the totally corrective FCD."""
    rng = np.random.default_rng(4)
    dense = (rng.random((240, 10)) < 0.4) * 1.0
    y = (dense[:, :3] @ rng.normal(size=(3, 3)) * 2 + rng.gumbel(size=(240, 3))).argmax(axis=1).astype(np.int32)
    K = 3
    model, _ = fit(
        InMemoryStore(sp.csr_matrix(dense), y, ["a", "b", "c"], chunk_rows=100),
        max_iter=4,
        learning_rate=nu,
        stumps=stumps,
    )
    if stumps != "both":
        assert np.count_nonzero(model.weights[model.signs[model.coord_learner] < 0]) >= 2  # negated learners used
    _replay_stage_wise(model, dense, y, K, nu)
    assert np.count_nonzero(model.weights) >= 8
    with pytest.raises(ValueError, match="learning_rate < 1 needs tau_max=1"):
        mb.MultiBoostParams(learning_rate=0.5, tau_max=2, update="exact")


def _replay_stage_wise(model, dense, y, K, nu=1.0, lam=1e-8) -> np.ndarray:
    """Replays a stage-wise run (tau_max = 1, update (13)) in numpy on the raw values, coordinate
    by coordinate in the run's order, and checks each weight: ν times the minimum along the
    coordinate at the scores of the weights before it, with V± the sums of μ_(i,y) =
    exp(F_y − F_{y_i}) over the pairs where δh = ±1 (eq. 21): ½ log(V₊/V₋) (13), or where V₋ = 0
    (13) has no finite minimum, log(V₊C/p) (12) at the run's C = 1/lam (0 when V₊C/p ≤ 1). F_c
    moves by the weight times ħ = sign·(1 or low). Returns V₋ of each coordinate and the loss
    (1/p)Σ μ before the first coordinate and after each."""
    m = len(y)
    C_over_p = 1.0 / (lam * m * (K - 1))
    F = np.zeros((m, K))
    own = np.arange(K)[None, :] == y[:, None]
    minus = np.zeros(len(model.weights))
    losses = [1.0]  # (1/p)Σ μ at F = 0
    for j in range(len(model.weights)):
        c, lrn = model.coord_class[j], model.coord_learner[j]
        above = dense[:, model.features[lrn]] > model.thresholds[lrn]
        h = model.signs[lrn] * np.where(above == (model.polarity[lrn] > 0), 1.0, float(model.lows[lrn]))
        mu = np.where(own, 0.0, np.exp(F - F[np.arange(m), y][:, None]))
        pushes = np.where(y == c, h * mu.sum(axis=1), -h * mu[:, c])  # Σ_y μ_(i,y)·δh_{i,j}(y), per row
        weight = np.where(y == c, mu.sum(axis=1), mu[:, c])
        v_plus, minus[j] = weight[pushes > 0].sum(), weight[pushes < 0].sum()
        if minus[j] > 0:
            best = max(0.0, 0.5 * np.log(v_plus / minus[j]))
        else:
            best = max(0.0, np.log(v_plus * C_over_p))
        assert model.weights[j] == pytest.approx(nu * best, rel=1e-10, abs=1e-12), j
        F[:, c] += model.weights[j] * h
        losses.append(float(np.where(own, 0.0, np.exp(F - F[np.arange(m), y][:, None])).sum() / (m * (K - 1))))
    return minus, np.array(losses)


def _text_like(seed=0, m=160, K=3, n_words=80):
    """Word counts of m short documents (Zipf background, 10 topic words per class drawn 8 times
    as often in its documents), with a signature word (the last feature) in every document of
    class K − 1 and in no other: the sign stump and the indicator on it separate class K − 1's
    pairs, so their V₋ = 0."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, K, m).astype(np.int32)
    topic = rng.permutation(n_words - 1)[: K * 10].reshape(K, 10)
    base = 1.0 / np.arange(1, n_words) ** 1.1
    dense = np.zeros((m, n_words))
    for i in range(m):
        prob = base.copy()
        prob[topic[y[i]]] *= 8.0
        dense[i, :-1] = rng.multinomial(30, prob / prob.sum())
    dense[:, -1] = y == K - 1
    return dense, y


def test_a_learner_with_v_minus_zero_gets_the_minimum_of_2_at_c_and_its_class_keeps_learning():
    """Issue 17's stall: with the defaults (update (13)), a learner that separates its class's
    pairs (V₋ = 0; here the stumps on a word found in every document of class 2 and in no other)
    has no finite (13) step. It once kept weight 0 and its edge, so column generation chose it
    again at every iteration and class 2 never learnt. Now its weight is (12)'s minimum at C,
    log(V₊C/p) (the numpy replay checks every weight of the run), so that step lowers the
    objective (2) (every step lowers the loss: (13) minimizes it along the coordinate) and class
    2's training rows are scored above the others."""
    dense, y = _text_like()
    K = 3
    lam = 1e-8  # the default
    model, _ = fit(InMemoryStore(sp.csr_matrix(dense), y, ["a", "b", "c"], chunk_rows=64), max_iter=4)
    minus, losses = _replay_stage_wise(model, dense, y, K, lam=lam)
    separating = minus == 0.0
    first = np.flatnonzero(separating & (model.coord_class == K - 1))[0]
    assert model.weights[first] > 5.0  # log(V₊C/p) at C = 1e8, p = 320 (later ones: 0 once V₊C/p ≤ 1)
    assert losses[first + 1] + lam * model.weights[first] < losses[first]  # (2) falls at that step
    assert np.all(np.diff(losses) <= 0.0)
    ours = model.coord_class == K - 1
    assert np.count_nonzero(model.weights[ours]) >= 1
    keys = [(model.features[lrn], model.thresholds[lrn], model.polarity[lrn], model.lows[lrn], model.signs[lrn])
            for lrn in model.coord_learner[ours]]  # fmt: skip
    zero = model.weights[ours] == 0.0
    assert not any(zero[t] and zero[t + 1] and keys[t] == keys[t + 1] for t in range(len(keys) - 1))
    F = model.decision_function(sp.csr_matrix(dense))
    assert np.all(np.argmax(F[y == K - 1], axis=1) == K - 1)


def _largest_dual_violation(model, X, y, lam):
    """max over every sign stump x_f > t (t between two training values of a column, both
    polarities) and class c of (C/p)·edge − 1, the violation of the dual constraint (3b), at the
    model's scores F: μ_(i,r) = exp(F_r − F_{y_i}) for r ≠ y_i, and a stump's edge for class c is
    Σ_i g_c[i] ħ(x_i) with g_c[i] = Σ_{r≠c} μ_(i,r) on rows of class c and −μ_(i,c) on the others."""
    n, K = len(y), int(y.max()) + 1
    F = model.decision_function(X)
    mu = np.exp(F - F[np.arange(n), y][:, None])
    mu[np.arange(n), y] = 0.0
    g = -mu
    g[np.arange(n), y] = mu.sum(axis=1)
    largest = -np.inf
    for f in range(X.shape[1]):
        order = np.argsort(X[:, f], kind="stable")
        below = np.cumsum(g[order], axis=0)[np.flatnonzero(np.diff(X[order, f]) > 0)]  # Σ over x_f ≤ t
        if len(below):
            largest = max(largest, np.abs(g.sum(axis=0) - 2 * below).max())  # ħ = ±(1[x_f > t] − 1[x_f ≤ t])
    return largest / (n * (K - 1) * lam) - 1.0


def test_converged_column_generation_leaves_no_stump_that_violates_the_dual_constraint():
    """Algorithm 1's stop (the paper's MultiBoostcw: tau_max = 2, update (12), sign stumps): when a
    run says converged, no sign stump at any threshold between two training values, for any class,
    violates (3b) by more than tol, by the edges computed here from the model's scores (columns of
    10 integer values, so the 64 bins hold every threshold); after 2 iterations one still does."""
    rng = np.random.default_rng(31)
    X = rng.integers(0, 10, size=(240, 6)).astype(float)
    y = np.argmax(X[:, :3] @ rng.normal(size=(3, 3)) + rng.normal(size=(240, 3)), axis=1)
    params = {"tau_max": 2, "update": "exact", "stumps": "sign", "lam": 1e-2, "tol": 0.1}
    model, log = fit(InMemoryStore(X, y, [0, 1, 2], chunk_rows=100), max_iter=300, **params)
    assert model.info["converged"] and len(log.records) < 300  # 32 iterations
    assert 0 < _largest_dual_violation(model, X, y, 1e-2) <= 0.1  # 0.088
    early, _ = fit(InMemoryStore(X, y, [0, 1, 2], chunk_rows=100), max_iter=2, **params)
    assert _largest_dual_violation(early, X, y, 1e-2) > 0.1


def test_choice_decrease_takes_only_learners_that_lower_2_and_stops_when_none_does():
    """choice="decrease" over the pool "all": every learner taken gets a nonzero weight, which is
    the run's own step (the numpy replay checks each), and (2) falls at every iteration (noisy
    binary data); on text-like data where a word separates class 2 (learners with V₋ = 0) the run
    stops once no learner's step lowers (2). choice="gain" there takes learners whose step is 0
    or raises (2) (its (√V₊ − √V₋)² leaves out the ℓ1 term, which decides the step at V₋ = 0)."""
    rng = np.random.default_rng(3)
    dense = (rng.random((300, 12)) < 0.3) * 1.0
    y = (dense[:, :3] @ rng.normal(size=(3, 3)) * 2 + rng.gumbel(size=(300, 3))).argmax(axis=1).astype(np.int32)
    model, log = fit(InMemoryStore(sp.csr_matrix(dense), y, ["a", "b", "c"], chunk_rows=128), max_iter=15,
                     stumps="all", choice="decrease")  # fmt: skip
    _replay_stage_wise(model, dense, y, 3)
    assert np.all(model.weights > 0) and len(model.weights) == 45
    values = [r["objective"] for r in log.records]
    assert len(values) > 1 and all(b < a for a, b in zip([1.0, *values], values)), values

    dense, y = _text_like()
    source = InMemoryStore(sp.csr_matrix(dense), y, ["a", "b", "c"], chunk_rows=64)
    for lam in (1e-8, 1e-4):
        model, log = fit(source, max_iter=30, stumps="all", choice="decrease", lam=lam)
        _replay_stage_wise(model, dense, y, 3, lam=lam)
        values = [r["objective"] for r in log.records]
        assert np.all(model.weights > 0) and len(values) < 30  # stopped: no learner lowers (2)
        assert all(b < a for a, b in zip([1.0, *values[:-1]], values[:-1])) and values[-1] == values[-2]
        by_gain, log = fit(source, max_iter=30, stumps="all", choice="gain", lam=lam)
        assert np.any(by_gain.weights == 0.0)
    assert log.records[-1]["objective"] > min(r["objective"] for r in log.records)  # gain's step raised (2)
    with pytest.raises(ValueError, match="choice=decrease is per class"):
        mb.MultiBoostParams(choice="decrease", weak_learners="shared")


def test_choice_auto_is_the_decrease_for_the_stage_wise_run_and_the_edge_otherwise(small_digits):
    """choice="auto" (the default): the stage-wise MultiBoostcw-1 (tau_max = 1, class-specific)
    chooses by the decrease of (2), the totally corrective run and shared learners by the edge (4);
    an explicit choice is kept. A default run's model is the one of choice="decrease"."""
    assert mb.MultiBoostParams().rule == "decrease"
    assert mb.MultiBoostParams(tau_max=2, update="exact", lam=1e-4).rule == "edge"
    assert mb.MultiBoostParams(weak_learners="shared").rule == "edge"
    assert mb.MultiBoostParams(choice="gain").rule == "gain"
    assert mb.MultiBoostParams(choice="edge").rule == "edge"
    X, y, classes = small_digits
    source = InMemoryStore(X, y, classes, chunk_rows=100)
    default, _ = fit(source, max_iter=8)
    _same_model(default, fit(source, max_iter=8, choice="decrease")[0])
    by_edge, _ = fit(source, max_iter=8, choice="edge")
    assert not np.array_equal(default.features, by_edge.features) or not np.array_equal(default.lows, by_edge.lows)


@pytest.mark.parametrize("weak_learners", ["class", "shared"])
def test_the_totally_corrective_large_c_fcd_never_increases_the_objective_with_v_minus_zero(weak_learners):
    """The totally corrective FCD (tau_max = 3) with update (13) on data where learners with
    V₋ = 0 are chosen (class-specific and shared learners): each such coordinate, whenever it is
    visited, takes (12)'s finite minimum at C, which lowers (2); the (13) steps lower the loss, so
    (2) can rise by no more than its lam·‖w‖₁ term. Before, a shared learner's V₋ = 0 coordinate
    stayed at 0 (the objective stayed at 1)."""
    dense, y = _text_like(seed=1)
    source = InMemoryStore(sp.csr_matrix(dense), y, ["a", "b", "c"], chunk_rows=64)
    lam = 1e-8
    model, log = fit(source, max_iter=5, tau_max=3, weak_learners=weak_learners)
    values = [r["objective"] for r in log.records]
    slack = lam * model.weights.sum()
    assert all(b <= a + slack for a, b in zip([1.0, *values], values)), values
    assert values[-1] < 0.5 and np.all(np.isfinite(model.weights)) and model.weights.max() > 5.0


@pytest.mark.slow
def test_v_minus_zero_runs_resume_and_run_on_two_workers_to_the_identical_model(tmp_path):
    """The defaults on the text-like data with V₋ = 0 learners: a run stopped after its first step and
    resumed, and a run on 2 workers, give the model of one uninterrupted run in process."""
    dense, y = _text_like()
    source = InMemoryStore(sp.csr_matrix(dense), y, ["a", "b", "c"], chunk_rows=64)
    full, _ = fit(source, str(tmp_path / "full"), max_iter=4)
    assert full.weights.max() > 5.0
    fit(source, str(tmp_path / "run"), stop_after=1, max_iter=4)  # after the V₋ = 0 step
    resumed, _ = fit(source, str(tmp_path / "run"), resume=True, max_iter=4)
    _same_model(full, resumed)
    with Engine(mode="local", n_workers=2) as engine:
        parallel, _ = fit(source, str(tmp_path / "two"), engine=engine, max_iter=4)
    _same_model(full, parallel)


def test_quantile_bins_put_zero_in_a_bin_of_its_own():
    rng = np.random.default_rng(3)
    col = np.where(rng.random(2000) < 0.5, 0.0, rng.normal(size=2000))
    X = sp.csr_matrix(col[:, None])
    source = InMemoryStore(X, np.zeros(2000, np.int32), ["a", "b"], chunk_rows=300)
    sketch = Engine(mode="inprocess").map_reduce(mb._sketch_task, source, range(source.n_chunks), size=64)
    cuts, offsets = mb.bin_cuts(sketch, n_bins=8)
    assert sketch.n_rows == 2000 and sketch.weights.sum() == np.count_nonzero(col)
    zero = np.searchsorted(cuts, 0.0)
    below = cuts[zero - 1]
    assert cuts[zero] == 0.0 and not np.any((col > below) & (col < 0))  # (largest negative, 0] holds only 0
    counts = np.bincount(np.searchsorted(cuts, col), minlength=len(cuts) + 1)
    assert len(cuts) <= 10 and counts.min() > 0


def test_objective_never_increases_with_totally_corrective_fcd(small_digits):
    X, y, classes = small_digits
    source = InMemoryStore(X, y, classes, chunk_rows=150)
    for weak_learners, stumps in (("class", "both"), ("shared", "both"), ("class", "signed"), ("shared", "signed")):
        model, log = fit(
            source, max_iter=12, tau_max=3, lam=1e-3, update="exact", weak_learners=weak_learners, stumps=stumps
        )
        values = [r["objective"] for r in log.records]
        assert len(values) == 12 and values[0] < 1.0  # (2)/C is 1 at w = 0
        assert all(b <= a * (1 + 1e-12) for a, b in zip(values, values[1:])), values
        assert model.info["learners"] == (12 * 10 if weak_learners == "class" else 12)
        if stumps == "signed":
            assert np.count_nonzero(model.weights[model.signs[model.coord_learner] < 0]) > 0
    assert (model.predict(X) == np.asarray(classes)[y]).mean() > 0.8


RUN = {"max_iter": 6, "tau_max": 2, "lam": 1e-3, "update": "exact"}  # MultiBoostcw, totally corrective


def _same_model(a, b):
    for key, value in a._arrays().items():
        np.testing.assert_array_equal(b._arrays()[key], value, err_msg=key)
    assert a.info == b.info


@pytest.mark.parametrize("lam, stumps", [(RUN["lam"], "both"), ("auto", "both"), (RUN["lam"], "signed")])
def test_a_killed_run_resumes_to_the_identical_model(small_digits, tmp_path, monkeypatch, lam, stumps):
    X, y, classes = small_digits
    source = InMemoryStore(X, y, classes, chunk_rows=100)
    params = {**RUN, "lam": lam} if lam != "auto" else {**RUN, "lam": lam, "max_iter": 3}
    params["stumps"] = stumps
    killed_at = 4 if lam != "auto" else 5  # lam="auto": in the second grid fit, after the first ended
    full, _ = fit(source, str(tmp_path / "full"), **params)
    run = str(tmp_path / "run")
    fit(source, run, stop_after=2, **params)
    real = mb._histogram_task

    def crash(source, chunk_id, **kw):  # killed in the middle of step killed_at + 1's histogram pass
        if kw["version"] == killed_at and chunk_id == 2:
            raise KeyboardInterrupt("killed")
        return real(source, chunk_id, **kw)

    monkeypatch.setattr(mb, "_histogram_task", crash)
    with pytest.raises(KeyboardInterrupt):
        fit(source, run, resume=True, **params)
    monkeypatch.setattr(mb, "_histogram_task", real)
    resumed, _ = fit(source, run, resume=True, **params)
    _same_model(full, resumed)


def test_a_master_streamed_from_disk_chunk_by_chunk_gives_the_identical_model(small_digits, monkeypatch):
    X, y, classes = small_digits
    source = InMemoryStore(X, y, classes, chunk_rows=100)
    in_memory, _ = fit(source, **RUN)
    layouts = set()  # (chunks in memory, chunks streamed from files) of each FCD pass
    real = mb.Master.run_pass

    def spy(self, *args):
        layouts.add((len(self.resident), self.spilled))
        return real(self, *args)

    monkeypatch.setattr(mb.Master, "run_pass", spy)
    # a chunk's master data is ~18 KB here (100 rows: F, μ, R, label, ≤ 60 stumps' bits): one fits in 0.03 MiB
    streamed, _ = fit(source, master_memory_mb=0.03, **RUN)
    assert layouts == {(1, 3)}
    _same_model(in_memory, streamed)


def test_a_fit_on_a_store_keeps_no_decoded_chunk_in_the_stores_cache(small_digits, tmp_path):
    """multiboost reads the store only in its two passes at init (the iterations read the binned
    chunk), so it leaves the store's cache of decoded chunks empty: before, the first 512 MiB
    (STREAMFIT_CHUNK_CACHE_MB) of a store stayed in memory for the whole run. The model is the
    same as from the rows in memory."""
    from streamfit.store import StoreWriter, open_store

    X, y, classes = small_digits
    writer = StoreWriter(str(tmp_path / "s.zarr"), chunk_rows=150)
    writer.write_rows(sp.csr_matrix(X, dtype=np.float32), y)
    writer.close(n_features=X.shape[1], classes=classes)
    store = open_store(str(tmp_path / "s.zarr"))
    model, _ = fit(store, max_iter=4)
    assert store.n_chunks == 3 and store._cached_bytes == 0 and not store._cache
    memory, _ = fit(InMemoryStore(sp.csr_matrix(X, dtype=np.float32), y, classes, chunk_rows=150), max_iter=4)
    for a, b in zip(model._arrays().values(), memory._arrays().values()):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("stumps", ["both", "signed"])
def test_unused_columns_give_the_model_of_the_data_without_them(small_digits, monkeypatch, stumps):
    """The digits' columns that hold a value, spread over 3000 columns (column 0 and most others
    unused; digits' own all-zero columns left out), give the model of the narrow data with each
    stump's column mapped (the constant learner, threshold +inf, is column 0 in both): the
    iterations work on the used columns in increasing order (used_columns), so every sum and tie
    is the same. The histograms have rows for the used columns only, not for all 3000."""
    X, y, classes = small_digits
    X = sp.csr_matrix(X)
    narrow = X[:, np.flatnonzero(X.getnnz(axis=0))]
    d = narrow.shape[1]
    columns = np.sort(np.random.default_rng(0).choice(np.arange(1, 3000), size=d, replace=False))
    wide = sp.csr_matrix((narrow.data, columns[narrow.indices], narrow.indptr), shape=(X.shape[0], 3000))
    params = {**RUN, "stumps": stumps}
    small, _ = fit(InMemoryStore(narrow, y, classes, chunk_rows=100), **params)
    rows = []
    real = mb._histogram_task

    def spy(source, chunk_id, **kw):
        sums = real(source, chunk_id, **kw)
        rows.append(sums.bins.shape[0])
        return sums

    monkeypatch.setattr(mb, "_histogram_task", spy)
    big, _ = fit(InMemoryStore(wide, y, classes, chunk_rows=100), **params)
    constant = np.isinf(small.thresholds)
    assert np.array_equal(np.isinf(big.thresholds), constant) and big.n_features == 3000
    np.testing.assert_array_equal(big.features, np.where(constant, 0, columns[small.features]))
    for key, value in small._arrays().items():
        if key != "features":
            np.testing.assert_array_equal(big._arrays()[key], value, err_msg=key)
    assert big.info == small.info
    dense_wide = wide.toarray()
    np.testing.assert_array_equal(big.decision_function(dense_wide), small.decision_function(narrow.toarray()))
    n_bins_total = sum(len(np.unique(narrow[:, [f]].toarray())) for f in range(d))
    assert set(rows) == {n_bins_total + 1}  # the used columns' bins and column 0's single bin


@pytest.mark.slow
@pytest.mark.parametrize("stumps", ["both", "signed"])
def test_two_workers_give_the_identical_model(small_digits, tmp_path, stumps):
    X, y, classes = small_digits
    source = InMemoryStore(X, y, classes, chunk_rows=100)
    serial, _ = fit(source, str(tmp_path / "one"), stumps=stumps, **RUN)
    with Engine(mode="local", n_workers=2) as engine:
        parallel, _ = fit(source, str(tmp_path / "two"), engine=engine, stumps=stumps, **RUN)
    _same_model(serial, parallel)
    if stumps == "signed":
        assert np.any(serial.signs < 0)


@pytest.mark.slow
def test_early_stopping_on_two_workers_gives_the_identical_model(tmp_path):
    X, y, classes = _noisy(m=800, noise=0.2)
    source = InMemoryStore(X, y, classes, chunk_rows=150)
    params = {"max_iter": 40, "early_stopping": True, "n_iter_no_change": 4}
    serial, _ = fit(source, str(tmp_path / "one"), **params)
    with Engine(mode="local", n_workers=2) as engine:
        parallel, _ = fit(source, str(tmp_path / "two"), engine=engine, **params)
    assert serial.info["stopped_early"]
    _same_model(serial, parallel)


# a fit of a few chunks (several resident in the master: kernels.fcd_sweep), printing the
# kernels it compiles (numba's "numba:compile" event fires for a compilation, not for a load
# from the cache) and fcd_sweep's signatures (compiled or loaded)
_FIT_COUNTING_COMPILATIONS = (
    COUNTING
    + """
from sklearn.datasets import load_digits
from streamfit import MultiBoostClassifier
from streamfit.solvers import multiboost_kernels
X, y = load_digits(return_X_y=True)
MultiBoostClassifier(max_iter=3, chunk_rows=100).fit(X[:300], y[:300])
print("compiled:", sorted(set(compiled)))
print("fcd_sweep signatures:", len(multiboost_kernels.fcd_sweep.signatures))
"""
)


@pytest.mark.slow
def test_a_warm_fit_compiles_nothing():
    """A fresh process compiles nothing once the cache holds the kernels: the master's
    resident chunks reach fcd_sweep as plain arrays (Master._pack), not numba typed lists,
    whose constructor and methods compiled in every process. The same fit here first fills the
    cache this process and the child share (numba's default, or NUMBA_CACHE_DIR: the child
    inherits the environment), whichever tests ran before (a cold cache in a fresh directory
    would cost the test ~12 s of compilation)."""
    X, y = load_digits(return_X_y=True)
    MultiBoostClassifier(max_iter=3, chunk_rows=100).fit(X[:300], y[:300])
    child = subprocess.run(
        [sys.executable, "-c", _FIT_COUNTING_COMPILATIONS], capture_output=True, text=True, check=False
    )
    assert child.returncode == 0, child.stderr
    assert "fcd_sweep signatures: 1" in child.stdout, child.stdout  # the path under test ran
    assert "compiled: []" in child.stdout, child.stdout


def test_model_saves_loads_and_scores_raw_rows(small_digits, tmp_path):
    X, y, classes = small_digits
    model, _ = fit(InMemoryStore(X, y, classes, chunk_rows=200), max_iter=5)
    model.save(str(tmp_path / "m"))
    loaded = load_model(str(tmp_path / "m"))
    assert loaded.kind == "boosted_stumps"
    S = loaded.decision_function(X)
    np.testing.assert_array_equal(S, model.decision_function(X))
    dense = X.toarray()  # scores from the stumps' definition, by numpy
    ref = np.zeros((X.shape[0], len(classes)))
    for c, lrn, w in zip(model.coord_class, model.coord_learner, model.weights):
        h = model.polarity[lrn] * np.where(dense[:, model.features[lrn]] > model.thresholds[lrn], 1.0, -1.0)
        ref[:, c] += w * h
    np.testing.assert_allclose(S, ref, rtol=1e-12, atol=1e-12)
    top, scores = loaded.predict_topk(X, 3)
    assert np.array_equal(top[:, 0], np.argmax(S, axis=1)) and np.all(scores[:, 0] >= scores[:, 1])
    np.testing.assert_array_equal(loaded.signs, 1)


def test_a_model_with_negated_learners_saves_loads_and_scores_raw_rows(small_digits, tmp_path):
    """stumps="signed": the per-stump signs survive save/load, and the scores equal those from
    the stumps' definition ħ = sign·(1 on the stump's side, else 0), by numpy. A model saved
    without signs (before negated learners) loads with every sign +1 and scores as before."""
    X, y, classes = small_digits
    model, _ = fit(InMemoryStore(X, y, classes, chunk_rows=200), max_iter=5, stumps="signed")
    assert np.any(model.signs < 0) and np.all(model.lows == 0)
    model.save(str(tmp_path / "m"))
    loaded = load_model(str(tmp_path / "m"))
    np.testing.assert_array_equal(loaded.signs, model.signs)
    S = loaded.decision_function(X)
    np.testing.assert_array_equal(S, model.decision_function(X))
    dense = X.toarray()
    ref = np.zeros((X.shape[0], len(classes)))
    for c, lrn, w in zip(model.coord_class, model.coord_learner, model.weights):
        side = (dense[:, model.features[lrn]] > model.thresholds[lrn]) == (model.polarity[lrn] > 0)
        ref[:, c] += w * model.signs[lrn] * side
    np.testing.assert_allclose(S, ref, rtol=1e-12, atol=1e-12)

    old, _ = fit(InMemoryStore(X, y, classes, chunk_rows=200), max_iter=3)
    arrays = {k: v for k, v in old._arrays().items() if k != "signs"}
    common = {
        "classes": old.classes_, "n_features": old.n_features, "multilabel": False, "solver": "multiboost",
        "params": old.params, "info": old.info,
    }  # fmt: skip
    before = mb.BoostedStumpsModel._from_saved(common, arrays, {})
    np.testing.assert_array_equal(before.signs, 1)
    np.testing.assert_array_equal(before.decision_function(X), old.decision_function(X))
    with pytest.raises(ValueError, match="sign is not ±1"):
        mb.BoostedStumpsModel(**arrays, signs=np.full(len(arrays["lows"]), 2), **common)


def test_classifier_fits_and_refuses_multilabel(small_digits):
    X, y, _ = small_digits
    with warnings.catch_warnings():  # the defaults: MultiBoostcw-1, C = 1e8, a fixed schedule of max_iter rounds
        warnings.simplefilter("error", ConvergenceWarning)
        clf = MultiBoostClassifier(max_iter=8).fit(X.toarray(), y)
    with pytest.warns(ConvergenceWarning, match="max_iter=3"):  # MultiBoostcw: column generation's own test
        MultiBoostClassifier(max_iter=3, tau_max=2, update="exact", lam=1e-4).fit(X.toarray(), y)
    assert clf.n_iter_ == 8 and len(clf.history_) == 8 and clf.score(X.toarray(), y) > 0.8
    assert clf.decision_function(X).shape == (X.shape[0], 10)
    with pytest.raises(ValueError, match="not a label indicator"):
        MultiBoostClassifier().fit(X, np.eye(3, dtype=int)[y % 3])
    source = InMemoryStore(X[:6], sp.csr_matrix(np.eye(3, dtype=np.float32)[[0, 1, 2, 0, 1, 2]]), ["a", "b", "c"])
    with pytest.raises(ConfigError, match="multiclass only"):
        fit(source)


def test_cli_trains_and_predicts(digits_cli_store, tmp_path):
    from streamfit.cli import main

    def run(*args):
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        return result.output

    assert "multiboost: MultiBoostcw" in run("train", "--list-solvers")
    out = tmp_path / "run"
    run("train", digits_cli_store, "--solver", "multiboost", "-p", "max_iter=4", "--n-workers", "0", "--out", out)
    assert load_model(str(out)).kind == "boosted_stumps"
    run("predict", out, digits_cli_store, "--out", tmp_path / "p.jsonl", "--top-k", "2")
    first = json.loads((tmp_path / "p.jsonl").read_text().splitlines()[0])
    assert len(first["labels"]) == 2


def test_a_store_trained_model_scores_float64_input_as_the_stores_rows(tmp_path):
    """A store holds float32 values and every threshold is a training value, so a training row
    exactly at a threshold is on its x ≤ t side. The same file read as float64 (scikit-learn's
    LIBSVM reader) has values on either side of that float32 cut; the model of a store rounds its
    input to float32 (value_dtype), so `load_model(RUN).decision_function(X64)` is the store's rows'
    scores bit for bit, as `streamfit evaluate` and `predict` on raw data see them (before: 170 of
    these 300 rows scored otherwise, 40 with another top class). An estimator's model of float64 arrays keeps float64
    comparisons; a model saved before value_dtype is float32 when it records a store's featurizer."""
    from sklearn.datasets import dump_svmlight_file, load_svmlight_file

    from streamfit.cli import main
    from streamfit.store import open_store

    rng = np.random.default_rng(3)
    X = rng.integers(0, 10, size=(300, 4)) / 3.0 + 0.1  # thirds: no value is a float32 number
    y = (X[:, 0] > X[:, 1]).astype(int) + (X[:, 2] + X[:, 3] > 3.0)
    dump_svmlight_file(X, y, str(tmp_path / "t.svm"), zero_based=False)
    for args in (
        ["ingest", tmp_path / "t.svm", "--no-hash", "--out", tmp_path / "s.zarr"],
        ["train", tmp_path / "s.zarr", "--solver", "multiboost", "-p", "max_iter=6", "--n-workers", "0"]
        + ["--out", tmp_path / "run"],
    ):
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output
    model = load_model(str(tmp_path / "run"))
    X64, _ = load_svmlight_file(str(tmp_path / "t.svm"), n_features=4)
    assert X64.dtype == np.float64 and model.value_dtype == "float32"
    store_scores = model.decision_function(open_store(str(tmp_path / "s.zarr")))
    np.testing.assert_array_equal(model.decision_function(X64), store_scores)
    np.testing.assert_array_equal(model.decision_function(X64.astype(np.float32)), store_scores)
    model.value_dtype = "float64"  # float64 comparisons, as before value_dtype
    assert np.any(model.decision_function(X64) != store_scores)  # the data puts rows across a float32 cut
    clf = MultiBoostClassifier(max_iter=6).fit(X, y)
    assert clf.model_.value_dtype == "float64"
    m = clf.model_  # scores from the stumps' definition with float64 comparisons, by numpy
    ref = np.zeros((len(y), 3))
    for c, lrn, w in zip(m.coord_class, m.coord_learner, m.weights):
        above = X[:, m.features[lrn]] > m.thresholds[lrn]
        ref[:, c] += w * m.signs[lrn] * np.where(above == (m.polarity[lrn] > 0), 1.0, m.lows[lrn])
    np.testing.assert_allclose(clf.decision_function(X), ref, rtol=1e-12, atol=1e-12)
    common = {"classes": ["0", "1", "2"], "n_features": 4, "featurizer": {"input": "numeric"}}
    old = mb.BoostedStumpsModel._from_saved(common, model._arrays(), {})
    assert old.value_dtype == "float32"
    assert mb.BoostedStumpsModel._from_saved({**common, "featurizer": {}}, model._arrays(), {}).value_dtype == "float64"


def test_held_out_rows_depend_on_the_row_alone():
    whole = kernels.held_out(0, 5000, 7, 0.2)
    parts = np.concatenate([kernels.held_out(lo, min(lo + 333, 5000), 7, 0.2) for lo in range(0, 5000, 333)])
    np.testing.assert_array_equal(whole, parts)
    assert abs(whole.mean() - 0.2) < 0.02  # ~ Binomial(5000, 0.2)/5000: sd 0.006
    assert not np.array_equal(whole, kernels.held_out(0, 5000, 8, 0.2))


def test_lam_auto_chooses_c_on_held_out_rows_and_refits_on_all(monkeypatch):
    """lam="auto" against its definition, computed apart: each grid lam fitted on the rows not
    held out (a store of those rows alone), its error on the held-out rows; the model is then the
    fixed-lam fit on all rows at the grid lam of the lowest error (smaller C on ties)."""
    rng = np.random.default_rng(5)
    m, d, K = 300, 5, 3
    X = rng.integers(0, 4, size=(m, d)).astype(np.float64)  # 4 values, each in many rows: the same bins on any 80 %
    y = (X[:, 0] + X[:, 1] + rng.integers(0, 3, m)) % K
    classes = [str(c) for c in range(K)]
    monkeypatch.setattr(
        mb, "LAM_GRID", (1e-1, 1e-2, 1e-4)
    )  # a short grid (the paper's needs more iterations to differ)
    run = {"max_iter": 5, "tau_max": 2, "update": "exact"}
    source = InMemoryStore(sp.csr_matrix(X), y.astype(np.int32), classes, chunk_rows=1000)
    auto, log = fit(source, lam="auto", **run)
    held = kernels.held_out(0, m, 0, mb.HOLDOUT)
    kept = InMemoryStore(sp.csr_matrix(X[~held]), y[~held].astype(np.int32), classes, chunk_rows=1000)
    expected = []
    for lam in mb.LAM_GRID:
        model, _ = fit(kept, lam=lam, **run)
        expected.append(float(np.mean(np.argmax(model.decision_function(X[held]), axis=1) != y[held])))
    assert list(auto.info["validation_errors"].values()) == expected
    assert [r["validation_error"] for r in log.records if "validation_error" in r] == expected
    assert auto.info["lam"] == mb.LAM_GRID[int(np.argmin(expected))]
    refit, _ = fit(source, lam=auto.info["lam"], **run)
    with pytest.raises(ValueError, match="set update=exact"):  # (13) ignores C
        mb.MultiBoostParams(lam="auto", update="large_c")
    for key, value in refit._arrays().items():
        np.testing.assert_array_equal(auto._arrays()[key], value, err_msg=key)
    assert len(set(expected)) > 1  # the grid's fits differ on the held-out rows


def _bin_cuts_column_by_column(X, n_bins):
    """bin_cuts of each column of X on its own (a one-column store each), joined: the reference
    for the cuts of all columns at once; a column without stored values has no cut."""
    cuts, counts = [], []
    for f in range(X.shape[1]):
        column = X[:, [f]].tocsr()
        if column.nnz == 0:
            cuts.append(np.zeros(0))
        else:
            source = InMemoryStore(column, np.zeros(X.shape[0], np.int32), ["a", "b"], chunk_rows=100)
            sketch = Engine(mode="inprocess").map_reduce(mb._sketch_task, source, range(source.n_chunks), size=64)
            cuts.append(mb.bin_cuts(sketch, n_bins)[0])
        counts.append(len(cuts[-1]))
    return np.concatenate(cuts), np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)


def test_bin_cuts_of_wide_sparse_data_visit_only_the_stored_columns():
    """Hashed text (2^18 columns, a few used) gets the cuts and zero bins of each column binned on
    its own, in a fraction of a second: that loop took 33 of a 41 s fit on the walkthrough's 240
    documents hashed to 2^18 columns (session 20)."""
    rng = np.random.default_rng(5)
    n, d = 300, 2**18
    narrow = sp.random(n, 50, density=0.3, format="csc", random_state=6, data_rvs=lambda k: rng.normal(size=k))
    narrow.data[rng.random(narrow.nnz) < 0.3] = 0.5  # repeated values: some columns have few distinct ones
    narrow = (narrow @ sp.diags((np.arange(50) < 40).astype(float))).tocsr()  # ten columns without stored values
    narrow.eliminate_zeros()

    def sketch_of(X):
        source = InMemoryStore(X, np.zeros(n, np.int32), ["a", "b"], chunk_rows=100)
        return Engine(mode="inprocess").map_reduce(mb._sketch_task, source, range(source.n_chunks), size=64)

    small = sketch_of(narrow)
    ref_cuts, ref_offsets = _bin_cuts_column_by_column(narrow, n_bins=8)
    cuts, offsets = mb.bin_cuts(small, n_bins=8)
    assert np.array_equal(cuts, ref_cuts) and np.array_equal(offsets, ref_offsets)
    ref_zero = [np.searchsorted(ref_cuts[ref_offsets[f] : ref_offsets[f + 1]], 0.0) for f in range(50)]
    assert np.array_equal(mb.zero_bins_of(cuts, offsets), ref_zero)

    used = np.sort(rng.choice(d, 50, replace=False))  # the same columns spread over 2^18
    wide = sp.csr_matrix((narrow.data, used[narrow.indices], narrow.indptr), shape=(n, d))
    sketch = sketch_of(wide)
    start = time.perf_counter()
    cuts, offsets = mb.bin_cuts(sketch, n_bins=8)
    zero_bins = mb.zero_bins_of(cuts, offsets)
    assert time.perf_counter() - start < 1.5  # 0.2 s at load 15; the every-feature loop took 17 s there
    counts = np.zeros(d, np.int64)
    counts[used] = np.diff(ref_offsets)
    assert np.array_equal(np.diff(offsets), counts) and np.array_equal(cuts, ref_cuts)
    expected_zero = np.zeros(d, np.int64)
    expected_zero[used] = ref_zero
    assert np.array_equal(zero_bins, expected_zero)


def _bin_cuts_by_numpy(sketch, n_bins):
    """bin_cuts' rule written with numpy, one feature at a time (the Python loop it replaced)."""
    per_feature, n_cuts = [], np.zeros(len(sketch.starts) - 1, dtype=np.int64)
    for f in np.flatnonzero(np.diff(sketch.starts) > 0):
        lo, hi = sketch.starts[f], sketch.starts[f + 1]
        values, weights = sketch.values[lo:hi], sketch.weights[lo:hi]
        zeros = sketch.n_rows - weights.sum()
        if zeros > 0.5:
            at = np.searchsorted(values, 0.0)
            values, weights = np.insert(values, at, 0.0), np.insert(weights, at, zeros)
        if len(values) <= n_bins:
            per_feature.append(values[:-1])
        else:
            cum = np.cumsum(weights)
            levels = np.arange(1, n_bins) / n_bins * cum[-1]
            cuts = values[np.minimum(np.searchsorted(cum, levels), len(values) - 1)]
            if zeros > 0.5:
                negative = sketch.largest_negative[f]
                cuts = np.concatenate([cuts, [0.0], [negative] if np.isfinite(negative) else []])
            per_feature.append(np.unique(cuts[cuts < values[-1]]))
        n_cuts[f] = len(per_feature[-1])
    offsets = np.concatenate([[0], np.cumsum(n_cuts)]).astype(np.int64)
    return (np.concatenate(per_feature) if per_feature else np.zeros(0)), offsets


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_a_chunks_compiled_sketch_is_the_sort_of_its_entries(dtype):
    """kernels.chunk_sketch gives, bit for bit, Sketch.of of the chunk's stored nonzero entries
    with weight 1 each (numpy's lexsort of (column, value) and a count of the repeats), which
    _sketch_task computed before: repeated, negative and NaN values, explicit zeros (left out),
    columns without entries, rows of a chunk in the middle of a CSR matrix (indptr[0] > 0), and
    every compression size."""
    rng = np.random.default_rng(5)
    for trial in range(40):
        m, d = int(rng.integers(1, 120)), int(rng.integers(1, 40))
        X = sp.random(m, d, density=rng.uniform(0.0, 0.9), format="csr", random_state=trial, dtype=dtype)
        X.data = np.round(rng.standard_normal(X.nnz) * 3).astype(dtype)  # zeros, repeats, negatives
        if trial % 4 == 0:
            X.data[rng.random(X.nnz) < 0.1] = np.nan
        lo = int(rng.integers(0, m))
        indptr, indices, data = X.indptr[lo:], X.indices, X.data  # rows lo.. of X, indptr[0] > 0 when lo > 0
        C = X[lo:].tocoo()
        keep = C.data != 0
        features, values = C.col[keep].astype(np.int64), C.data[keep].astype(np.float64)
        largest_negative = np.full(d, -np.inf)
        np.maximum.at(largest_negative, features[values < 0], values[values < 0])
        starts, vals, weights, negative = kernels.chunk_sketch(indptr, indices, data, d)
        np.testing.assert_array_equal(negative, largest_negative)
        for size in (1, 3, 8 * 64):
            ref = mb.Sketch.of(features, values, np.ones(len(values)), largest_negative, m - lo, size)
            got = kernels.compress_sketch(starts, vals, weights, size)
            for a, b in zip((ref.starts, ref.values, ref.weights), got):
                assert a.dtype == b.dtype
                np.testing.assert_array_equal(a, b)


_SKETCH_PEAK = """
import numpy as np, scipy.sparse as sp
import streamfit.solvers.multiboost as mb
from streamfit.store import InMemoryStore
rng = np.random.default_rng(0)
rows, per_row, d = 8192, 256, 1000  # a chunk of the out-of-core benchmark's size: 2^21 entries
indices = np.sort(rng.integers(0, d, size=(rows, per_row)), axis=1).ravel().astype(np.int32)
X = sp.csr_matrix((rng.lognormal(size=rows * per_row).astype(np.float32), indices,
                   np.arange(0, rows * per_row + 1, per_row)), shape=(rows, d))
source = InMemoryStore(X, np.zeros(rows, np.int32), ["a", "b"], chunk_rows=rows)
mb._sketch_task(InMemoryStore(X[:50], np.zeros(50, np.int32), ["a", "b"]), 0, size=512)  # compiled or loaded
def status(key):
    return int(next(line for line in open("/proc/self/status") if line.startswith(key)).split()[1]) * 1024
with open("/proc/self/clear_refs", "w") as f:
    f.write("5")  # VmHWM := VmRSS
before = status("VmRSS")
mb._sketch_task(source, 0, size=512)
print((status("VmHWM") - before) / (X.data.nbytes + X.indices.nbytes))
"""


def test_the_sketch_of_a_chunk_needs_a_few_times_the_chunks_memory():
    """The sketch pass holds one chunk at a time, and its task's peak memory is a few times the
    chunk's stored entries (float32 value + int32 column: 8 bytes each): the chunk as read, and
    float64 values and weights (kernels.chunk_sketch), not the 11 times that numpy's lexsort of
    every entry with its int64 and float64 copies took (this script before kernels.chunk_sketch:
    11.0; since: 3.7). In a fresh process: the peak resident size (VmHWM, reset through
    /proc/self/clear_refs) over the resident size before the task, per byte of the chunk."""
    child = subprocess.run([sys.executable, "-c", _SKETCH_PEAK], capture_output=True, text=True, check=False)
    assert child.returncode == 0, child.stderr
    ratio = float(child.stdout.strip().splitlines()[-1])
    assert ratio < 5.0, ratio


@pytest.mark.parametrize("n_bins", [2, 5, 64])
def test_the_compiled_bin_cuts_equal_the_rule_written_with_numpy(n_bins):
    """kernels.quantile_cuts gives bin_cuts' rule bit for bit: columns dense and sparse, with
    negative, repeated and few distinct values, rows merged from chunks (weights > 1, compressed
    sketches), and a 20 Newsgroups-like width of mostly unused columns."""
    rng = np.random.default_rng(11)
    n = 700
    blocks = [
        sp.random(n, 30, density=0.9, format="csr", random_state=1, data_rvs=lambda k: rng.normal(size=k)),
        sp.random(n, 30, density=0.05, format="csr", random_state=2, data_rvs=lambda k: rng.exponential(size=k)),
        sp.csr_matrix(rng.integers(-2, 3, size=(n, 10)).astype(float)),  # few distinct values, negative too
        sp.csr_matrix((n, 5)),  # no stored values
        sp.csr_matrix(np.round(rng.normal(size=(n, 5)), 1)),  # repeats: weights > 1 after merging
    ]
    X = sp.hstack(blocks, format="csr")
    X.eliminate_zeros()
    for size in (8 * n_bins, 4):  # the solver's sketch size, and one that compresses every column
        source = InMemoryStore(X, np.zeros(n, np.int32), ["a", "b"], chunk_rows=150)
        sketch = Engine(mode="inprocess").map_reduce(mb._sketch_task, source, range(source.n_chunks), size=size)
        cuts, offsets = mb.bin_cuts(sketch, n_bins)
        ref_cuts, ref_offsets = _bin_cuts_by_numpy(sketch, n_bins)
        np.testing.assert_array_equal(offsets, ref_offsets)
        np.testing.assert_array_equal(cuts, ref_cuts)
        assert len(cuts) > 0 and np.any(np.diff(offsets) > 2)


# -- early stopping ----------------------------------------------------------------------------


def _noisy(seed=3, m=400, d=6, K=3, noise=0.35):
    """Integer features of 6 values (every value in many rows: the same bins on any 90 % of the
    rows) and labels a function of two of them, a share `noise` redrawn at random: boosting overfits."""
    rng = np.random.default_rng(seed)
    X = rng.integers(0, 6, size=(m, d)).astype(np.float64)
    y = np.minimum((X[:, 0] + X[:, 1]) // 4, K - 1)  # an additive rule (stumps on x0 and x1 can learn it)
    noisy = rng.random(m) < noise
    y[noisy] = rng.integers(0, K, int(noisy.sum()))
    return sp.csr_matrix(X), y.astype(np.int32), [str(c) for c in range(K)]


class _EveryModel:
    """A metrics log keeping each step's record and model (the driver's mid-run models)."""

    def __init__(self):
        self.records, self.models = [], []

    def begin(self, *args) -> None:
        pass

    def end(self) -> None:
        pass

    def log(self, step, model=None, *, final=False, planned=None, **fields):
        self.records.append({"step": step, **fields})
        self.models.append(model())

    def truncate_after(self, step) -> None:
        raise AssertionError("not resumed")


def _iterates(source, **params):
    """The model after every iteration of a run without early stopping."""
    from streamfit.checkpoint import Checkpointer

    solver = mb.MultiBoostSolver(mb.MultiBoostParams(**params))
    log = _EveryModel()
    solver.fit(
        source,
        engine=Engine(mode="inprocess"),
        checkpointer=Checkpointer(None, config={}, store_fingerprint="x"),
        log=log,
    )
    return log.models


def _heldout_path(models, X, y, K):
    """(loss, error) per model on rows X, y, with numpy from the models' decision functions: the
    mean over the rows and the other classes of exp(F_y − F_{y_i}), and the argmax's error."""
    path = []
    for model in models:
        F = model.decision_function(X)
        margins = np.exp(F - F[np.arange(len(y)), y][:, None])
        loss = (margins.sum() - len(y)) / (len(y) * (K - 1))  # (the own class's exp(0) = 1 left out)
        path.append((loss, float(np.mean(np.argmax(F, axis=1) != y))))
    return np.array(path)


def _best(path, score):
    """The best iteration (1-based) of a held-out (loss, error) path by its definition: the first
    lowest loss, or the first lowest (error, loss) in lexicographic order."""
    keys = path[:, 0] if score == "loss" else [(e, loss) for loss, e in path]
    return min(range(len(path)), key=lambda i: keys[i]) + 1


def _final_state(source, **params):
    """(model, log records, the last state's arrays) of a run without checkpoints on disk."""
    from streamfit.checkpoint import Checkpointer

    checkpointer = Checkpointer(None, config={}, store_fingerprint="x")
    log = _EveryModel()
    model = mb.MultiBoostSolver(mb.MultiBoostParams(**params)).fit(
        source, engine=Engine(mode="inprocess"), checkpointer=checkpointer, log=log
    )
    return model, log.records, checkpointer.latest(source.n_chunks).arrays


def _same_stumps(a, b, rtol=0.0):
    """The two models' arrays equal; the weights to `rtol` (0: bitwise)."""
    for key, value in a._arrays().items():
        if key == "weights" and rtol:
            np.testing.assert_allclose(b.weights, value, rtol=rtol, atol=0)
        else:
            np.testing.assert_array_equal(b._arrays()[key], value, err_msg=key)


@pytest.mark.parametrize(
    "run",
    [{"validation_score": "loss"}, {}, {"tau_max": 2, "update": "exact", "lam": 1e-3}],
    ids=["cw1-loss", "cw1-error", "tau2-error"],
)
def test_early_stopping_keeps_the_best_iteration_of_the_fit_on_the_rows_not_held_out(run):
    """Early stopping on held-out training rows (kernels.held_out with random_state and
    validation_fraction), against
    - the same run not stopped (n_iter_no_change past max_iter): its held-out loss path is the
      same numbers, and the stopped model is its state at the end truncated to the best
      iteration's learners and coordinates, bitwise, for cw1 (tau_max = 1 never moves an earlier
      weight); with tau_max = 2 FCD moved them later, so the stopped model kept its own;
    - the definition, computed apart: a fit without early stopping on a store of the rows not held
      out, whose iterate after every iteration scores the held-out rows with numpy: the logged
      path equals that, the run stops n_iter_no_change iterations after its best score (the
      lowest loss, or the lowest error with ties broken by the loss), and its model is that fit's at that iteration (the weights to 1e-12: the master's per-byte partial
      sums group other rows once the held-out ones are gone)."""
    X, y, classes = _noisy(m=800, noise=0.2)
    m, K = X.shape[0], len(classes)
    source = InMemoryStore(X, y, classes, chunk_rows=150)
    params = {"max_iter": 40, "early_stopping": True, **run}
    stopped, log = fit(source, n_iter_no_change=4, **params)
    ran, best = stopped.info["iterations"], stopped.info["best_iteration"]
    assert stopped.info["stopped_early"] and ran == best + 4 < 40 and best > 1
    logged = np.array([[r["heldout_loss"], r["heldout_error"]] for r in log.records])

    unstopped, records, state = _final_state(source, n_iter_no_change=40, **params)
    assert unstopped.info["iterations"] == 40 and not unstopped.info["stopped_early"]
    np.testing.assert_array_equal(np.array([[r["heldout_loss"], r["heldout_error"]] for r in records[:ran]]), logged)
    L, J = len(stopped.features), len(stopped.weights)
    truncated = {
        "features": state["learner_feature"][:L],
        "thresholds": state["learner_threshold"][:L],
        "polarity": state["learner_polarity"][:L],
        "lows": state["learner_low"][:L],
        "signs": state["learner_sign"][:L],
        "coord_class": state["coord_class"][:J],
        "coord_learner": state["coord_learner"][:J],
        "weights": state["weights"][:J],
    }
    for key, value in truncated.items():
        if key == "weights" and "tau_max" in run:
            assert not np.array_equal(stopped.weights, value)
        else:
            np.testing.assert_array_equal(stopped._arrays()[key], value, err_msg=key)

    held = kernels.held_out(0, m, 0, 0.1)
    plain = {k: v for k, v in run.items() if k != "validation_score"}
    models = _iterates(InMemoryStore(X[~held], y[~held], classes, chunk_rows=150), max_iter=40, **plain)
    expected = _heldout_path(models[:ran], X[held].toarray(), y[held], K)
    np.testing.assert_allclose(logged, expected, rtol=1e-12)
    score = run.get("validation_score", "error")
    assert best == _best(logged, score) == _best(expected, score)
    assert [stopped.info["heldout_loss"], stopped.info["heldout_error"]] == list(logged[best - 1])
    _same_stumps(models[best - 1], stopped, rtol=1e-12)


def test_early_stopping_on_a_validation_store_fits_every_training_row():
    """With a validation store (train --valid) no training row is held out: the model is bitwise
    the plain fit's at the best iteration, and the held-out path is that fit's iterates scored on
    the validation rows with numpy."""
    X, y, classes = _noisy(m=600, noise=0.2)
    K = len(classes)
    train, valid = (
        InMemoryStore(X[:400], y[:400], classes, chunk_rows=150),
        InMemoryStore(X[400:], y[400:], classes, chunk_rows=70),
    )
    stopped, log = fit(train, valid=valid, early_stopping=True, n_iter_no_change=5, max_iter=80)
    models = _iterates(train, max_iter=80)
    ran = stopped.info["iterations"]
    assert stopped.info["stopped_early"]
    logged = np.array([[r["heldout_loss"], r["heldout_error"]] for r in log.records])
    np.testing.assert_allclose(logged, _heldout_path(models[:ran], X[400:].toarray(), y[400:], K), rtol=1e-12)
    best = stopped.info["best_iteration"]
    assert best == _best(logged, "error") == ran - 5 and best > 1
    _same_stumps(models[best - 1], stopped)
    # the validation metrics of the driver's log score the model of the best iteration so far
    assert log.records[-1]["valid_accuracy"] == pytest.approx(1 - logged[best - 1, 1])


def test_a_run_resumed_in_its_patience_stops_at_the_same_iteration_with_the_same_model(tmp_path):
    X, y, classes = _noisy()
    source = InMemoryStore(X, y, classes, chunk_rows=150)
    params = {"early_stopping": True, "n_iter_no_change": 6, "max_iter": 80}
    full, full_log = fit(source, str(tmp_path / "full"), **params)
    best, ran = full.info["best_iteration"], full.info["iterations"]
    assert full.info["stopped_early"] and ran == best + 6
    run = str(tmp_path / "run")
    fit(source, run, stop_after=best + 2, checkpoint_interval=0, **params)  # paused 2 iterations into the patience
    resumed, _ = fit(source, run, resume=True, **params)
    _same_model(full, resumed)
    lines = [json.loads(line) for line in open(tmp_path / "run" / "metrics.jsonl")]
    assert [r["heldout_loss"] for r in lines] == [r["heldout_loss"] for r in full_log.records]


def test_early_stopping_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="early_stopping needs a fixed lam"):
        mb.MultiBoostParams(lam="auto", update="exact", early_stopping=True)
    X, y, classes = _noisy(m=12)
    with pytest.raises(ConfigError, match="validation_fraction=0.01 holds out 0 of the 12 training rows"):
        fit(InMemoryStore(X, y, classes), early_stopping=True, validation_fraction=0.01)
    small, _ = fit(InMemoryStore(X, y, classes), early_stopping="auto", max_iter=3)  # auto: off at 12 rows
    assert "best_iteration" not in small.info


def test_cli_stops_early_on_the_valid_store_and_a_resume_must_name_it(write_store, tmp_path):
    """`train --valid V -p early_stopping=true` scores V (the held-out path in metrics.jsonl and
    the best iteration in the model's info), and V's fingerprint is part of the run's
    configuration: a resume without it is refused in one line naming it."""
    from streamfit.cli import main

    X, y, classes = _noisy(m=900, noise=0.2)
    train, valid = write_store(X[:600], y[:600], classes, chunk_rows=200), write_store(X[600:], y[600:], classes)
    out = tmp_path / "run"
    args = ["train", train, "--solver", "multiboost", "--n-workers", "0", "--out", out]
    for param in ("max_iter=60", "early_stopping=true", "n_iter_no_change=2", "validation_score=loss"):
        args += ["-p", param]
    result = CliRunner().invoke(main, [str(a) for a in [*args, "--valid", valid]])
    assert result.exit_code == 0, result.output
    model = load_model(str(out))
    lines = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    losses = [r["heldout_loss"] for r in lines]
    best = model.info["best_iteration"]
    assert model.info["stopped_early"] and len(lines) == best + 2 and min(losses) == losses[best - 1]
    assert lines[best - 1]["learners"] == len(model.features) < lines[-1]["learners"]  # the best iteration's stumps
    result = CliRunner().invoke(main, [str(a) for a in [*args, "--resume"]])
    assert result.exit_code == 2
    assert "valid_store_fingerprint" in result.output and "then, None now" in result.output


def test_the_classifier_stops_early_as_the_solver_does():
    """MultiBoostClassifier(early_stopping=True) is the solver's early stopping on the same rows:
    the same model, n_iter_ the iterations run, best_iteration_ the model's, the held-out path in
    history_."""
    X, y, classes = _noisy(m=800, noise=0.2)
    params = {"max_iter": 40, "early_stopping": True, "n_iter_no_change": 4}
    clf = MultiBoostClassifier(**params, chunk_rows=150).fit(X, y)
    model, log = fit(InMemoryStore(X, y, classes, chunk_rows=150), **params)
    assert clf.n_iter_ == model.info["iterations"] == clf.best_iteration_ + 4
    assert [h["heldout_error"] for h in clf.history_] == [r["heldout_error"] for r in log.records]
    for key, value in model._arrays().items():
        np.testing.assert_array_equal(clf.model_._arrays()[key], value, err_msg=key)


def test_auto_validation_scores_the_first_and_last_steps_and_a_resumed_session_its_first(tmp_path):
    """valid_every "auto" (train's default): the first step and the last are scored on the
    validation store, each with the metrics of that step's model (numpy on the rows); a resumed
    session scores its first step; the model is bitwise that of a run without validation."""
    X, y, classes = _noisy(m=600, noise=0.2)
    train, valid = (
        InMemoryStore(X[:400], y[:400], classes, chunk_rows=150),
        InMemoryStore(X[400:], y[400:], classes, chunk_rows=70),
    )
    plain, _ = fit(train, max_iter=12)
    models = _iterates(train, max_iter=12)
    run = str(tmp_path / "run")
    fit(train, run, stop_after=5, valid=valid, valid_every="auto", max_iter=12)
    resumed, log = fit(train, run, resume=True, valid=valid, valid_every="auto", max_iter=12)
    _same_stumps(plain, resumed)
    with open(tmp_path / "run" / "metrics.jsonl") as f:
        records = [json.loads(line) for line in f]
    assert [r["step"] for r in records] == list(range(1, 13))
    validated = {r["step"]: r["valid_accuracy"] for r in records if "valid_accuracy" in r}
    assert {1, 6, 12} <= validated.keys()
    for step, accuracy in validated.items():
        predicted = np.argmax(models[step - 1].decision_function(X[400:]), axis=1)
        assert accuracy == np.mean(predicted == y[400:])


def _sparse_wide(m: int = 800, d: int = 8000, per_row: int = 30, seed: int = 5):
    """Text-like rows: `per_row` of d columns stored a row (positive values, unit rows), 3 classes
    each marked by its own block of columns."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=m)
    cols = rng.integers(0, d, size=(m, per_row))
    cols[:, :5] = y[:, None] * 300 + rng.integers(0, 300, size=(m, 5))  # each class's own words
    X = sp.csr_matrix((rng.random(m * per_row) + 0.1, cols.ravel(), np.arange(0, m * per_row + 1, per_row)), (m, d))
    X.sum_duplicates()
    return sp.csr_matrix(X.multiply(1 / np.sqrt(X.multiply(X).sum(axis=1)))), y


def test_the_sparse_wide_notice_counts_the_rows_columns_and_stored_values():
    """The rule reads the columns used and the stored values a row from the init's sketch: its
    total weight is the stored entries (X.nnz) and its used columns those with a value (scipy's
    count), whatever the chunking; the thresholds are SPARSE_WIDE_COLUMNS and SPARSE_WIDE_SHARE."""
    X, y = _sparse_wide()
    sketch = None
    for lo in range(0, X.shape[0], 300):
        part = mb._sketch_task(InMemoryStore(X[lo : lo + 300], y[lo : lo + 300], ["0", "1", "2"]), 0, size=8 * 64)
        sketch = part if sketch is None else sketch + part
    assert sketch is not None and sketch.weights.sum() == X.nnz
    _, offsets = mb.bin_cuts(sketch, 64)
    used = int(np.count_nonzero(np.diff(offsets)))
    assert used == np.count_nonzero(np.diff(X.tocsc().indptr))
    notice = mb.sparse_wide_notice(X.shape[0], used, sketch.weights.sum())
    assert notice is not None and f"({used} columns used, {X.nnz / X.shape[0]:.1f} stored values a row" in notice
    assert mb.sparse_wide_notice(100, mb.SPARSE_WIDE_COLUMNS - 1, 100 * 10) is None  # too narrow
    share = mb.SPARSE_WIDE_SHARE * 8000
    assert mb.sparse_wide_notice(100, 8000, 100 * share) is not None
    assert mb.sparse_wide_notice(100, 8000, 100 * share * 1.01) is None  # too dense


def test_the_cli_warns_once_on_sparse_wide_rows_and_not_on_dense_ones(digits_cli_store, tmp_path, caplog):
    """`streamfit train --solver multiboost` on text-like rows (~7600 columns used, 0.4 % stored a row)
    logs the notice once, at WARNING (shown at default verbosity); on the digits (64 dense columns)
    it logs none."""
    from sklearn.datasets import dump_svmlight_file

    from streamfit.cli import main

    X, y = _sparse_wide()
    dump_svmlight_file(X, y, str(tmp_path / "t.svm"), zero_based=False)

    def run(*args):
        result = CliRunner().invoke(main, [str(a) for a in args], catch_exceptions=False)
        assert result.exit_code == 0, result.output

    def notices(store, out):
        """The multiboost records of a 3-iteration `streamfit train` on `store`."""
        caplog.clear()
        with caplog.at_level("WARNING"):
            run("train", store, "--solver", "multiboost", "-p", "max_iter=3", "--n-workers", "0", "--out", out)
        return [r for r in caplog.records if r.name == "streamfit.solvers.multiboost"]

    run("ingest", tmp_path / "t.svm", "--no-hash", "--out", tmp_path / "s.zarr")
    [record] = notices(tmp_path / "s.zarr", tmp_path / "run")
    assert record.levelname == "WARNING" and "\n" not in record.getMessage()
    assert record.getMessage().startswith("multiboost: the training rows are sparse and wide (")
    assert notices(digits_cli_store, tmp_path / "run2") == []


def test_histograms_beyond_the_memory_available_are_refused_before_the_first_iteration(digits, monkeypatch, caplog):
    """The histograms are bins × K floats, which only the bin cuts of init's first pass tell (many
    classes of few rows: 2.7 GiB each at 3000 classes, 24 GiB at 10 000, session 30): init refuses
    a run whose summed histograms (H and H_own, and their stored entries' sums, what the stump search
    reads at once) exceed the memory available, and warns when its estimate takes more than half of
    it. The bound is the size of the arrays a real histogram pass returns."""
    import logging

    import psutil

    from streamfit.solvers.base import Context

    X, y, classes = digits
    source = InMemoryStore(X, y, classes, chunk_rows=1000)  # two chunks: the partial sums and their sum at once
    solver = mb.MultiBoostSolver(mb.MultiBoostParams(max_iter=1))  # rule decrease: H and H_own

    def init(available: int):
        monkeypatch.setattr(psutil, "virtual_memory", lambda: type("Memory", (), {"available": available})())
        return solver.init(Context(source, Engine(mode="inprocess"), ChunkState(None)))

    context = Context(source, Engine(mode="inprocess"), ChunkState(None))
    state = solver.init(context)
    sums = mb._histogram_task(
        source, 0, state=context.chunk_state, version=0, cut_offsets=state.cut_offsets, holdout=None, seed=0, own=True
    )
    lower = sum(a.nbytes for a in (sums.bins, sums.stored, sums.own_bins, sums.own_stored))
    with pytest.raises(StreamfitError, match=r"multiboost needs at least .* GiB of histograms \(2 of .*-p n_bins"):
        init(lower - 1)
    caplog.set_level(logging.WARNING, logger="streamfit.solvers.multiboost")
    init(lower)  # fits: only the warning, the estimate being more than all of it
    assert "more than the" in caplog.text
    caplog.clear()
    rows = source.chunk_bounds(0)[1] * len(classes) * 8 * solver.row_state_arrays
    init(2 * (3 * lower + rows) - 1)
    assert "more than half of the" in caplog.text
    caplog.clear()
    init(2 * (3 * lower + rows))  # the estimate: three sums at once and a chunk's F and G
    assert "histograms" not in caplog.text
