"""Where ppdsparse's CPU goes on small text and multilabel sets, beside one-vs-rest LinearSVC
(issue 20 item 3b, session 29; docs/benchmarks.md, "ppdsparse's CPU on small sets, by phase").

Per set (tools/bench_refit.py's stores and tools/bench_ppd_rule.py's new draw; --work holds
them), in this process, kernels compiled first (a warm-up class is solved before anything is
timed), CPU seconds (process time; run with OPENBLAS_NUM_THREADS=1):

- LinearSVC: one-vs-rest `LinearSVC(C = 1)` on the training matrix (bench_refit.Reference);
- solve_group: ppdsparse's default (lam "scale") over all classes in one group, as a small set's
  train solves it, median of --repeats;
- by phase: the same classes solved by `phased_group`, which runs solve_group's and
  _algorithm1's steps from Python one kernel call at a time (so each is timed; the model is
  checked to be bitwise solve_group's): build_data (once a process), make_work and class_lams
  (once a group), and per class the greedy searches (_search: w's support, Algorithm 3, the
  scores, the sort), the dual coordinate descent (_inner_cd, with its epochs and coordinate
  visits), the eliminations, the primal Newton finish, _class_result, class_objective and
  solve_group's Python per class (feature ids, sorting, the statistics); "calls" is the rest
  of the replica (its Python loop and the kernels' argument unboxing, which solve_group pays
  once per class, the replica per kernel call);
- train: a warm `streamfit.train` of the default in process (threads 1, progress off), its CPU,
  and cProfile's cumulative seconds of its largest parts (--train).

    OPENBLAS_NUM_THREADS=1 python tools/profile_ppdsparse.py [--sets r8like,ohsumedlike,news20-5,bibtex,delicious-1]
        [--repeats 3] [--train] [--work DIR] [--data DIR] [-p NAME=VALUE ...]
"""

from __future__ import annotations

import argparse
import collections
import cProfile
import pstats
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ppd_rule import NEW, new_stores  # noqa: E402
from bench_refit import Reference, stores  # noqa: E402

from streamfit.objectives.losses import OVR_HALF_SQUARED_HINGE, OVR_HINGE  # noqa: E402
from streamfit.solvers import ppdsparse_kernels as kern  # noqa: E402
from streamfit.solvers.ppdsparse import PPDSparseParams, build_data, class_lams, solve_group  # noqa: E402


class Clock:
    """CPU seconds and counts per phase name."""

    def __init__(self):
        self.seconds: collections.Counter = collections.Counter()
        self.counts: collections.Counter = collections.Counter()

    def run(self, phase: str, fn, *args):
        started = time.process_time()
        out = fn(*args)
        self.seconds[phase] += time.process_time() - started
        self.counts[phase] += 1
        return out


def phased_class(data, work, k: int, p: PPDSparseParams, n: int, lam: float, clock: Clock):
    """solve_class's steps for class k (kern._algorithm1, the primal switch, kern._primal_newton)
    run from Python one kernel call at a time, each timed on `clock`; returns solve_class's
    (indices, values, bias, iterations)."""
    loss = OVR_HALF_SQUARED_HINGE if p.loss == "squared_hinge" else OVR_HINGE
    mu, sigma = n * lam, n * p.tau
    delta = 0.0 if p.delta is None else p.delta
    D = work.v.shape[0] - 1
    approximate = delta > 0.0 or p.x_threshold > 0.0
    positives = data.pos_rows[data.pos_ptr[k] : data.pos_ptr[k + 1]]
    first_kappa = max(1, min(p.kappa, positives.size))
    kern._seed(work.rng, p.random_state, k)
    work.ysign[positives] = 1
    work.in_active[positives] = 1
    work.active[: positives.size] = positives
    n_active, it, primal, budget = positives.size, 0, 0, p.max_inner
    exact_next, inner_ok = not approximate, True
    while it < p.max_iter:
        it += 1
        before = n_active
        kappa_t = max(first_kappa, int(p.kappa_growth * n_active))
        d, x = (0.0, 0.0) if exact_next else (delta, p.x_threshold)
        n_active = clock.run("search", kern._search, data, work, n_active, kappa_t, mu, sigma, p.tol, d, x)
        if n_active == before and inner_ok:
            if exact_next:
                break
            exact_next = True
            continue
        epochs = clock.run(
            "coordinate descent", kern._inner_cd, data, work, n_active, loss, mu, sigma, p.tol, budget, p.shrink
        )
        clock.counts["epochs"] += epochs
        clock.counts["coordinates"] += epochs * n_active
        inner_ok = epochs < budget
        if (
            not inner_ok
            and loss == OVR_HALF_SQUARED_HINGE
            and primal == 0
            and D < kern.PRIMAL_MAX_FEATURES
            and 0.0 < p.primal_ratio * (D + 1) <= n_active
        ):
            steps, converged, n_active = clock.run(
                "primal Newton", kern._primal_newton, data, work, mu, sigma, p.tol, kern.PRIMAL_MAX_NEWTON
            )
            primal = max(steps, 1)
            if converged:
                break
            exact_next, inner_ok, budget = True, False, p.max_inner
            continue
        budget = p.max_inner if inner_ok else min(2 * budget, p.max_inner << kern.MAX_INNER_DOUBLINGS)
        n_active = clock.run(
            "eliminate", kern._eliminate, work.active, work.alpha, work.ysign, work.in_active, n_active
        )
        exact_next = not approximate or n_active <= before
    idx, val, bias, _, _ = clock.run("class result", kern._class_result, data, work, k, n_active, loss, mu, sigma)
    return idx, val, bias, it


def phased_group(data, p: PPDSparseParams, n: int, K: int, clock: Clock):
    """solve_group(data, 0, K, p, n) by phases (lam scale or a number; not auto): the weights
    (indptr, indices, values) by store feature id, the biases and the summed iterations."""
    loss = OVR_HALF_SQUARED_HINGE if p.loss == "squared_hinge" else OVR_HINGE
    work = clock.run("make_work", kern.make_work, n, data.col_map.size)
    lams = clock.run("class_lams", class_lams, data, 0, K, p)
    idx_all, val_all, bias = [], [], np.zeros(K)
    iterations = 0
    for k in range(K):
        i, v, b, it = phased_class(data, work, k, p, n, lams[k], clock)
        iterations += it
        clock.run("class_objective", kern.class_objective, data, work, k, i, v, b, loss, lams[k], p.tau)
        started = time.process_time()
        store_ids = data.col_map[i]
        order = np.argsort(store_ids)
        idx_all.append(store_ids[order])
        val_all.append(v[order] / data.scale[0] / data.col_scale[i[order]])
        bias[k] = b
        clock.seconds["per-class Python"] += time.process_time() - started
    indptr = np.concatenate([[0], np.cumsum([len(i) for i in idx_all])])
    return indptr, np.concatenate(idx_all), np.concatenate(val_all), bias, iterations


def train_profile(train_path: str, params: dict, top: int = 12) -> tuple[float, list[tuple[str, float]]]:
    """A warm in-process streamfit.train of ppdsparse (threads 1): its CPU seconds and cProfile's
    cumulative seconds of the `top` largest streamfit functions below train."""
    from streamfit.train import train

    with tempfile.TemporaryDirectory() as tmp:
        train(train_path, "ppdsparse", f"{tmp}/warm", {**params, "threads": 1}, n_workers=0, progress=False)
        prof = cProfile.Profile(time.process_time)
        started = time.process_time()
        prof.enable()
        train(train_path, "ppdsparse", f"{tmp}/run", {**params, "threads": 1}, n_workers=0, progress=False)
        prof.disable()
        cpu = time.process_time() - started
    stats = pstats.Stats(prof).stats  # type: ignore[attr-defined]
    rows = [
        (f"{Path(f).name}:{name}", cum)
        for (f, _, name), (_, _, _, cum, _) in stats.items()
        if "streamfit" in f and name not in ("train", "_train_locked")
    ]
    return cpu, sorted(rows, key=lambda r: -r[1])[:top]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", default="r8like,ohsumedlike,news20-5,bibtex,delicious-1")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--train", action="store_true", help="also profile a warm in-process streamfit.train")
    ap.add_argument("-p", action="append", default=[], metavar="NAME=VALUE", help="a ppdsparse option (numbers)")
    ap.add_argument("--data", type=Path, default=Path("/work/shared/data"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_ppd_rule"))
    args = ap.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    options = {k: float(v) for k, v in (o.split("=", 1) for o in args.p)}
    p = PPDSparseParams(**options)
    for name in args.sets.split(","):
        base, _, seed = name.rpartition("-")
        paths = new_stores(base, int(seed), args.data, args.work) if base in NEW else stores(name, args.data, args.work)
        ref = Reference(*paths)
        print(ref.header(name), flush=True)
        n, K = ref.X.shape[0], ref.store.n_classes
        build_data(ref.store, p.x_threshold > 0, True)  # its kernels loaded before it is timed
        started = time.process_time()
        data = build_data(ref.store, p.x_threshold > 0, True)
        built = time.process_time() - started
        solve_group(data, 0, 1, p, n)  # compiled before anything is timed
        phased_group(data, p, n, 1, Clock())
        seconds = []
        for _ in range(args.repeats):
            started = time.process_time()
            g = solve_group(data, 0, K, p, n)
            seconds.append(time.process_time() - started)
        whole = float(np.median(seconds))
        clock = Clock()
        started = time.process_time()
        indptr, indices, values, bias, iterations = phased_group(data, p, n, K, clock)
        phased = time.process_time() - started
        same = (
            np.array_equal(indptr, g.indptr)
            and np.array_equal(indices, g.indices)
            and np.array_equal(values, g.values)
            and np.array_equal(bias, g.bias)
        )
        if not same:
            raise SystemExit(f"{name}: the phased replica's model differs from solve_group's")
        print(
            f"  LinearSVC {ref.cpu:.3f} s; solve_group {whole:.3f} s ({whole / ref.cpu:.2f}x; "
            f"runs {', '.join(f'{s:.3f}' for s in seconds)}); build_data {built:.3f} s; "
            f"{iterations} iterations, {clock.counts['epochs']} epochs, {clock.counts['coordinates']} coordinate visits",
            flush=True,
        )
        print(f"  by phase (replica {phased:.3f} s, bitwise solve_group's model):", flush=True)
        named = sum(clock.seconds.values())
        for phase, s in clock.seconds.most_common():
            print(f"    {phase:<20} {s:8.3f} s {100 * s / phased:5.1f} %  calls {clock.counts[phase]}", flush=True)
        print(f"    {'calls':<20} {phased - named:8.3f} s {100 * (phased - named) / phased:5.1f} %", flush=True)
        if args.train:
            cpu, rows = train_profile(paths[0], options)
            print(f"  streamfit.train (warm, threads 1): {cpu:.3f} s CPU ({cpu / ref.cpu:.2f}x LinearSVC)", flush=True)
            for label, cum in rows:
                print(f"    {label:<48} {cum:8.3f} s", flush=True)


if __name__ == "__main__":
    main()
