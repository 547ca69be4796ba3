"""Stagewise least squares on random Fourier features (Agarwal et al. 2014, Table 1 / Figure 2
setting) vs scikit-learn's LinearSVC and LogisticRegression on the same features.

    python tools/bench_stagewise.py [--datasets letter,pendigits,satimage,mnist,news20] [--dims 2000,4000,8000]
                                    [--variants linear,logistic,calibrated] [--peers linearsvc,logreg]
                                    [--peer-dims 2000] [--peer-c 1] [--seeds 1] [--block-size 512] [--passes 2]
                                    [--lam 1e-4] [--logistic-iters 10] [--gram-dtype float32] [--bandwidth tune]
                                    [--bandwidth-grid 0.25,0.35,0.5,0.7,1.0,1.4,2.0,2.8] [--select-folds 5]
                                    [--rff-sampling tune] [--rff-phases tune] [--data DIR] [--work DIR]
                                    [--news20-blocks 500x2,1000x2] [--news20-lam 1e-4]
    python tools/bench_stagewise.py --scaling letter --scaling-sizes 3000,7500,15000 [same options]
    python tools/bench_stagewise.py --profile letter:4000:linear [--bandwidth 0.35] [same options]

Data (see DIR/README.md): letter, pendigits, satimage from their LIBSVM train/test files, MNIST
from the 10 000 test images (mnist-t10k.h5, pixels / 255, PCA to 50 dimensions first as in
A.2.1) split 8000/2000 with a fixed seed. Each stagewise variant is a StagewiseLSClassifier
(InMemoryStore + in-process engine: the out-of-core code path), generator "rff" with
n_components = dims; its time is the whole fit, feature generation (PCA, bandwidth, cosines)
included. Variants: linear (identity link), logistic (softmax link, --logistic-iters inner
iterations; logistic50: the paper's 50; fastlogistic: 2 inner iterations, steps from L/4 of the
paper's bound, backtracking on an increase), calibrated (Algorithm 2, poly), predictions (the paper's "linearly calibrated":
previous predictions as features). --gram-dtype float32 computes each block's AᵀA from
single-precision products (the solver's gram_dtype option). The peers get exactly the same
features (regenerated from the fitted model's seeds), materialized in memory beforehand; their
time is the fit only (as the paper times Liblinear and VW). LinearSVC runs liblinear's primal
solver with tol=1e-2: on letter it is as accurate as the default tol=1e-4 and 6x faster.
The peers' C is --peer-c: one value (default 1) is used as is; with a grid (e.g. 0.1,1,10),
each peer's C is chosen per set on a seeded, stratified 80/20 split of the training rows (same
features; the lowest validation error, ties to the smaller C), then the peer is refitted on all
training rows, and that refit is the peer's time and test error; the selection's time is
reported apart, like the bandwidth's.
Every method runs with single-threaded BLAS, like the paper's single-processor timings. The
2-core machine is shared: each time is printed as wall and CPU seconds with the load average,
and the speed-ups use CPU seconds (single-threaded, so CPU time is the work done; wall time
grows with the load).

Bandwidth: σ = bandwidth · the median pairwise distance of (PCA-projected) training inputs, for
the kernel exp(−‖z − z'‖²/(2σ²)). The paper (A.2.1) sets "s, the median pairwise distance" in
exp(−‖x − x'‖²/s); read as s = median², that is bandwidth 1/√2 ≈ 0.71. --bandwidth tune picks
the multiplier from --bandwidth-grid by the mean error of the linear variant (smallest dims) over
a seeded, stratified 5-fold split of the TRAINING rows (--select-folds; 1 = one 80/20 split, the
earlier rule, whose single split tied on pendigits and decided letter by one row); the test rows
are never used, and the time is reported apart, not added to the fits. --rff-sampling and
--rff-phases "tune" (the default) let the same rule choose the random features jointly with the
bandwidth: i.i.d. or orthogonal frequencies (Yu et al. 2016), random phases cos(ωᵀx + β) or
paired cos/sin of ωᵀx. The grid is geometric (factor √2) and wide enough that no set's choice
lies at its edge (with 0.35 … 1.0, MNIST chose the edge 1.0; with 5 folds, 2.0 of … 2.0).

--scaling SET: the same comparison on growing stratified subsets of SET's training rows
(--scaling-sizes), same test set: the best peer's error and time per size, and the fastest
stagewise run at equal or lower error (the paper's 10x was at 60 000 rows).

news20: the 20 Newsgroups bydate text hashed at ingest (see `news20` below) with the "gradient"
generator (A.2.2), through `streamfit.train` with checkpoints on disk, beside LinearSVC.

--profile SET:DIMS:VARIANT: CPU seconds of one fit (the third; two warm-up fits before it) by
part: the solver's Gram, residual-product, feature and solve functions are wrapped with
thread-CPU timers (each part without the parts it calls).

--ooc: a generated sparse store (default 25M rows × 40 non-zeros: 8 GB decoded) trained by the
stagewise solver through `streamfit.train` under a 2 GiB cap (--ooc-cap-mb): in process with the
address space capped, and on the embedded 2-worker Dask cluster with the whole process tree in a
memory cgroup without swap (needs root; otherwise measured only); prints the peak RSS of the
process tree (see `ooc`).

The speed-up column compares each peer run with the fastest stagewise run (any variant, any
dims) on the same dataset whose test error is at most the peer's: peer time / our time.

--seeds N repeats each set's comparison with the random features of seeds 0 .. N-1 (the
bandwidth and feature kind are chosen once, as above; every peer fits each seed's features):
one test split decides by a few rows (pendigits: 1 row = 0.03 %), and which of our runs first
reaches a peer's error moves with the seed. It prints each seed's table and speed-ups, then the
table of mean errors and mean times, the speed-up on those means, and the per-seed ratios.
"""

from __future__ import annotations

import argparse
import gzip
import os
import time
import warnings
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold, train_test_split
from sklearn.svm import LinearSVC
from threadpoolctl import threadpool_limits

from streamfit import StagewiseLSClassifier
from streamfit.solvers.stagewise_kernels import rff_block

DEFAULT_DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
LIBSVM = {
    "letter": ("libsvm/letter/letter.scale.gz", "libsvm/letter/letter.scale.t.gz"),
    "pendigits": ("libsvm/pendigits/pendigits.gz", "libsvm/pendigits/pendigits.t.gz"),
    "satimage": ("libsvm/satimage/satimage.scale.gz", "libsvm/satimage/satimage.scale.t.gz"),
}
VARIANTS = {
    "linear": dict(link="identity"),
    "logistic": dict(link="softmax"),
    "logistic50": dict(link="softmax", max_iter=50),  # the paper's 50 inner iterations (the solver's default)
    "fastlogistic": dict(link="softmax", backtrack=True, max_iter=2),  # steps from L/4, backtracking
    "calibrated": dict(calibrate="poly"),
    "predictions": dict(calibrate="predictions"),
}


def load(name: str, data: Path):
    """(X_train, y_train, X_test, y_test, extra estimator params)."""
    if name == "mnist":
        import h5py

        with h5py.File(data / "mnist_test_only" / "mnist-t10k.h5", "r") as f:
            X, y = f["X"][:].astype(np.float64) / 255.0, f["y"][:]
        Xtr, Xte, ytr, yte = train_test_split(X, y, train_size=8000, test_size=2000, random_state=0, stratify=y)
        return Xtr, ytr, Xte, yte, dict(pca_components=50)
    train, test = LIBSVM[name]
    with gzip.open(data / train) as f:
        Xtr, ytr = load_svmlight_file(f)
    with gzip.open(data / test) as f:
        Xte, yte = load_svmlight_file(f, n_features=Xtr.shape[1])
    return Xtr, ytr, Xte, yte, {}


def materialize(model, X) -> np.ndarray:
    """All random Fourier features of a fitted rff model, in memory (for the peers)."""
    space = model.space
    Z = space.base(sp.csr_matrix(X))
    n_blocks = -(-space.n_components // space.block_size)
    widths = [min(space.block_size, space.n_components - b * space.block_size) for b in range(n_blocks)]
    kind = dict(orthogonal=space.sampling == "orthogonal", paired=space.phases == "paired")
    return np.hstack([rff_block(Z, space.seed, b, w, space.sigma, **kind) for b, w in enumerate(widths)])


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def timed_cpu(fn, *args) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of fn(*args)."""
    t, c = time.perf_counter(), time.process_time()
    fn(*args)
    return time.perf_counter() - t, time.process_time() - c


def load_average() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def stagewise(
    args, variant: str, dims: int, extra: dict, bandwidth: float, name: str, rff: str | None = None, seed: int = 0
) -> StagewiseLSClassifier:
    sampling, phases = (rff or args.rff[name]).split("/")
    params = dict(
        generator="rff",
        n_components=dims,
        block_size=args.block_size,
        n_passes=args.passes,
        max_iter=args.logistic_iters,
        gram_dtype=args.gram_dtype,
        bandwidth=bandwidth,
        rff_sampling=sampling,
        rff_phases=phases,
        random_state=seed,
        lam=args.lam,
        **extra,
    )
    return StagewiseLSClassifier(**{**params, **VARIANTS[variant]})


def tune_bandwidth(args, name, Xtr, ytr, extra) -> float:
    """The bandwidth multiplier of --bandwidth-grid with the lowest error of the linear variant
    (smallest dims) on a seeded, stratified 80/20 split of the training rows, or, with
    --select-folds K > 1, the lowest mean error over a seeded, stratified K-fold split of them.
    With --rff-sampling and/or --rff-phases "tune", the same rule picks the random features
    (sampling × phases) jointly with the bandwidth over the whole grid (ties keep the earlier
    entry: iid, random phases, smaller bandwidth); the choice is stored in args.rff[name]."""
    if args.select_folds > 1:
        folds = list(StratifiedKFold(args.select_folds, shuffle=True, random_state=0).split(Xtr, ytr))
        split = f"{args.select_folds}-fold split"
    else:
        folds = [train_test_split(np.arange(len(ytr)), test_size=0.2, random_state=0, stratify=ytr)]
        split = "80/20 split"
    samplings = ["iid", "orthogonal"] if args.rff_sampling == "tune" else [args.rff_sampling]
    phases = ["random", "paired"] if args.rff_phases == "tune" else [args.rff_phases]
    kinds = [f"{s}/{p}" for s in samplings for p in phases]
    bandwidths = args.bandwidth_grid if args.bandwidth == "tune" else [float(args.bandwidth)]
    args.rff[name] = kinds[0]
    if len(kinds) * len(bandwidths) == 1:
        return bandwidths[0]
    t = time.perf_counter()
    errors = {}
    for kind in kinds:
        for bw in bandwidths:
            errors[kind, bw] = np.mean(
                [
                    100
                    * (
                        1
                        - stagewise(args, "linear", args.dims[0], extra, bw, name, kind)
                        .fit(Xtr[a], ytr[a])
                        .score(Xtr[v], ytr[v])
                    )
                    for a, v in folds
                ]
            )
    best = min(errors, key=errors.get)
    for kind in kinds:
        print(
            f"bandwidth ({name}, {kind}, linear @{args.dims[0]}, {split} of the training rows): "
            + ", ".join(f"{bw}: {errors[kind, bw]:.2f}%" for bw in bandwidths),
            flush=True,
        )
    print(f"  -> {best[0]}, bandwidth {best[1]} ({time.perf_counter() - t:.1f} s, not counted below)", flush=True)
    args.rff[name] = best[0]
    return best[1]


def peer_estimator(peer: str, c: float):
    """LinearSVC (liblinear primal, tol=1e-2) or LogisticRegression (lbfgs, 300 iterations) at C = c."""
    if peer == "linearsvc":
        return LinearSVC(C=c, dual=False, tol=1e-2)
    return LogisticRegression(C=c, max_iter=300)


def choose_c(args, peer: str, name: str, dims: int, Ftr, ytr) -> float:
    """The C of --peer-c with the lowest error of `peer` on a seeded, stratified 80/20 split of the
    training rows (ties: the smaller C), or the one value of --peer-c without selection."""
    if len(args.peer_c) == 1:
        return args.peer_c[0]
    a, v = train_test_split(np.arange(len(ytr)), test_size=0.2, random_state=0, stratify=ytr)
    errors = {}

    def select():
        Fa, Fv = Ftr[a], Ftr[v]
        for c in args.peer_c:
            errors[c] = 100 * (1 - peer_estimator(peer, c).fit(Fa, ytr[a]).score(Fv, ytr[v]))

    wall, cpu = timed_cpu(select)
    best = min(args.peer_c, key=errors.get)  # args.peer_c is ascending: ties keep the smaller C
    print(
        f"C ({name}, {peer} @{dims}, 80/20 split of the training rows): "
        + ", ".join(f"{c:g}: {e:.2f}%" for c, e in errors.items())
        + f" -> C={best:g} ({wall:.1f} s wall, {cpu:.1f} s CPU, not counted)",
        flush=True,
    )
    return best


def compare(args, name, Xtr, ytr, Xte, yte, extra, bandwidth, seed: int = 0) -> list:
    """Every stagewise variant at every dims (random features from `seed`), and the peers on the
    same features at --peer-dims. Rows: (dims, method, test error %, wall s, CPU s)."""
    rows = []
    print("| dims | method | test error % | fit s wall (CPU) | load |\n|---|---|---|---|---|", flush=True)
    for d in args.dims:
        fitted = None
        for v in args.variants:
            clf = stagewise(args, v, d, extra, bandwidth, name, seed=seed)
            wall, cpu = timed_cpu(clf.fit, Xtr, ytr)
            err = 100 * (1 - clf.score(Xte, yte))
            rows.append((d, f"stagewise-{v}", err, wall, cpu))
            print(f"| {d} | stagewise-{v} | {err:.2f} | {wall:.2f} ({cpu:.2f}) | {load_average()} |", flush=True)
            fitted = clf
        if d not in args.peer_dims or fitted is None:
            continue
        Ftr, Fte = materialize(fitted.model_, Xtr), materialize(fitted.model_, Xte)
        for peer in args.peers:
            est = peer_estimator(peer, choose_c(args, peer, name, d, Ftr, ytr))
            wall, cpu = timed_cpu(est.fit, Ftr, ytr)
            err = 100 * (1 - est.score(Fte, yte))
            rows.append((d, peer, err, wall, cpu))
            print(f"| {d} | {peer} | {err:.2f} | {wall:.2f} ({cpu:.2f}) | {load_average()} |", flush=True)
        del Ftr, Fte
    return rows


def fastest_at_error(rows, err):
    """Our fastest run (CPU time) with test error at most `err`, or None."""
    match = [r for r in rows if r[1].startswith("stagewise") and r[2] <= err + 1e-9]
    return min(match, key=lambda r: r[4]) if match else None


def mean_rows(runs: list[list]) -> list:
    """The rows of several `compare` runs (one per seed) averaged per (dims, method): mean test
    error, wall and CPU seconds."""
    return [(d, m, *np.mean([r[2:] for rows in runs for r in rows if r[:2] == (d, m)], axis=0)) for d, m, *_ in runs[0]]


def speedups(name, rows) -> float | None:
    """Prints each peer against our fastest run at equal or lower error; returns the ratio against
    the best peer (the smallest; 0 when no run of ours is as accurate), None without peers."""
    theirs = [r for r in rows if not r[1].startswith("stagewise")]
    if not theirs:
        return None
    print(
        f"\nspeed-up at equal error ({name}): peer CPU time / CPU time of the fastest stagewise run with "
        f"error <= the peer's (wall-time ratio in brackets)"
    )
    ratios = []
    for d, method, err, wall, cpu in theirs:
        best = fastest_at_error(rows, err)
        if best:
            ratios.append(cpu / best[4])
            print(
                f"  {method}@{d}: {err:.2f}% in {cpu:.2f}s vs {best[1]}@{best[0]}: {best[2]:.2f}% in "
                f"{best[4]:.2f}s -> {cpu / best[4]:.1f}x ({wall / best[3]:.1f}x)",
                flush=True,
            )
        else:
            ratios.append(0.0)
            print(f"  {method}@{d}: {err:.2f}% in {cpu:.2f}s; no stagewise run this accurate", flush=True)
    verdict = "not as accurate as every peer" if min(ratios) == 0 else f"{min(ratios):.1f}x"
    print(f"  vs the best peer (the smallest ratio): {verdict} (goal >= 10x)", flush=True)
    if min(ratios) == 0:
        at_our_best(rows)
    return min(ratios)


def at_our_best(rows) -> None:
    """When a peer is more accurate than every run of ours, the comparison the other way, at our
    lowest error: the peer's fastest run (any dims) with at most that error, against our fastest
    run with it. This is not the goal's comparison (that one is at the peer's error)."""
    ours = [r for r in rows if r[1].startswith("stagewise")]
    best_err = min(r[2] for r in ours)
    mine = fastest_at_error(rows, best_err)
    print(
        f"  at our lowest error instead ({mine[1]}@{mine[0]}: {best_err:.2f}% in {mine[4]:.2f}s), each peer's "
        f"fastest run with at most that error:"
    )
    for method in dict.fromkeys(r[1] for r in rows if not r[1].startswith("stagewise")):
        match = [r for r in rows if r[1] == method and r[2] <= best_err + 1e-9]
        if match:
            d, _, err, wall, cpu = min(match, key=lambda r: r[4])
            print(f"    {method}@{d}: {err:.2f}% in {cpu:.2f}s -> {cpu / mine[4]:.1f}x", flush=True)
        else:
            print(f"    {method}: no run this accurate", flush=True)


def scaling(args) -> None:
    """Ours vs the best peer at equal error on growing subsets of one set's training rows."""
    name = args.scaling
    Xtr, ytr, Xte, yte, extra = load(name, args.data)
    bandwidth = tune_bandwidth(args, name, Xtr, ytr, extra)
    summary = []
    for size in args.scaling_sizes:
        if size < Xtr.shape[0]:
            Xs, _, ys, _ = train_test_split(Xtr, ytr, train_size=size, random_state=0, stratify=ytr)
        else:
            Xs, ys = Xtr, ytr
        print(f"\n## {name}, {Xs.shape[0]} training rows (test: {Xte.shape[0]}); load {load_average()}", flush=True)
        rows = compare(args, name, Xs, ys, Xte, yte, extra, bandwidth)
        speedups(f"{name} n={Xs.shape[0]}", rows)
        for peer in (r for r in rows if not r[1].startswith("stagewise")):
            summary.append((Xs.shape[0], peer, fastest_at_error(rows, peer[2])))
    print(
        f"\n## n-scaling ({name}): each peer vs our fastest run at equal or lower error (CPU s); the "
        f"smallest ratio per size is the one against the best peer\n"
        f"| training rows | peer: error % (CPU s) | ours: variant@dims error % (CPU s) | speed-up |\n"
        f"|---|---|---|---|"
    )
    for size, peer, ours in summary:
        cell = f"{ours[1]}@{ours[0]} {ours[2]:.2f} ({ours[4]:.2f})" if ours else "none as accurate"
        ratio = f"{peer[4] / ours[4]:.1f}x" if ours else "-"
        print(f"| {size} | {peer[1]}@{peer[0]} {peer[2]:.2f} ({peer[4]:.2f}) | {cell} | {ratio} |")


def news20(args) -> None:
    """20 Newsgroups bydate: raw text hashed at ingest (2^18 log-TF unigrams, IDF, l2 rows), the
    stagewise solver with gradient-ordered blocks (A.2.2) through `streamfit.train` (in-process
    engine, checkpoints on disk after every stage, as the CLI runs it), beside LinearSVC on the
    same hashed features loaded in memory."""
    import subprocess
    import sys

    from streamfit.store import open_store
    from streamfit.train import train

    work = args.work / "news20"
    tar = args.data / "20newsgroups" / "20news-bydate.tar.gz"
    common = ["--encoding", "latin-1", "--overwrite"]
    if not (work / "test.zarr").exists():
        cli = [sys.executable, "-m", "streamfit.cli", "-q"]
        subprocess.run(
            [
                *cli,
                "ingest",
                str(tar),
                "--subset",
                "20news-bydate-train",
                "--n-features",
                "262144",
                "--value",
                "log1p",
                "--idf",
                "--l2-normalize",
                "--out",
                str(work / "train.zarr"),
                *common,
            ],
            check=True,
        )
        subprocess.run(
            [
                *cli,
                "ingest",
                str(tar),
                "--subset",
                "20news-bydate-test",
                "--like",
                str(work / "train.zarr"),
                "--out",
                str(work / "test.zarr"),
                *common,
            ],
            check=True,
        )
    tr, te = open_store(str(work / "train.zarr")), open_store(str(work / "test.zarr"))

    def load(store):
        chunks = [store.read_chunk(i) for i in range(store.n_chunks)]
        return sp.vstack([c.X for c in chunks]).tocsr(), np.concatenate([c.labels for c in chunks])

    (Xtr, ytr), (Xte, yte) = load(tr), load(te)
    print(
        f"\n## news20 (bydate): {Xtr.shape[0]} train / {Xte.shape[0]} test, {Xtr.shape[1]} hashed features, "
        f"{len(tr.classes)} classes\n| method | test error % | fit s |\n|---|---|---|",
        flush=True,
    )
    rows = []
    for block, passes in args.news20_blocks:
        params = dict(generator="gradient", block_size=block, n_passes=passes, lam=args.news20_lam)
        t = time.perf_counter()
        model = train(
            str(work / "train.zarr"),
            "stagewise",
            str(work / f"run-{block}-{passes}"),
            params,
            n_workers=0,
            overwrite=True,
            progress=False,
        )
        secs = time.perf_counter() - t
        err = 100 * np.mean(model.predict(Xte) != np.asarray(tr.classes)[yte])
        rows.append((f"stagewise blocks {block} × {passes} passes", err, secs))
        print(f"| {rows[-1][0]} | {err:.2f} | {secs:.2f} |", flush=True)
    est = LinearSVC(C=1.0)
    _, secs = timed(lambda: est.fit(Xtr, ytr))
    err = 100 * (1 - est.score(Xte, yte))
    print(f"| LinearSVC (liblinear, C=1) | {err:.2f} | {secs:.2f} |", flush=True)
    for name, e, t in rows:
        print(f"  {name}: error {e - err:+.2f} points vs LinearSVC, time ratio ours/LinearSVC {t / secs:.1f}x")


PROFILED = {  # solver function -> the part of a fit it is counted in
    "_block_stats": "AᵀA (+ panel loop)",
    "_product": "AᵀR and AW products",
    "rff_features": "feature generation",
    "link_residual": "residual and loss (13)",
    "_apply_rows": "AᵀR and AW products",
    "_solver_for": "Cholesky and solves",
    "_n_correct": "accuracy",
    "_setup": "setup (scan, sample, PCA, median, auto check)",
}


def profile(args) -> None:
    """CPU seconds by part of one fit: each PROFILED function is wrapped with a thread-CPU timer
    that leaves out the time of the profiled functions it calls; the rest is "other" (task
    and driver Python, scores I/O, small numpy)."""
    import collections

    from streamfit.solvers import stagewise as sw

    name, dims, variant = args.profile.split(":")
    Xtr, ytr, Xte, yte, extra = load(name, args.data)
    bandwidth = tune_bandwidth(args, name, Xtr, ytr, extra)
    parts, inner = collections.Counter(), []

    def timed_part(fn, part):
        def wrapper(*a, **k):
            inner.append(0.0)
            t = time.thread_time()
            try:
                return fn(*a, **k)
            finally:
                spent, nested = time.thread_time() - t, inner.pop()
                parts[part] += spent - nested
                if inner:
                    inner[-1] += spent

        return wrapper

    for fn, part in PROFILED.items():
        owner = sw.StagewiseSolver if fn == "_setup" else sw
        setattr(owner, fn, timed_part(getattr(owner, fn), part))
    for _ in range(2):
        stagewise(args, variant, int(dims), extra, bandwidth, name).fit(Xtr, ytr)
    parts.clear()
    clf = stagewise(args, variant, int(dims), extra, bandwidth, name)
    _, cpu = timed_cpu(clf.fit, Xtr, ytr)
    print(
        f"\n## profile: {name}, stagewise-{variant} @{dims}: {cpu:.3f} s CPU, test error "
        f"{100 * (1 - clf.score(Xte, yte)):.2f} %, load {load_average()}\n| part | CPU s |\n|---|---|"
    )
    for part, secs in parts.most_common():
        print(f"| {part} | {secs:.3f} |")
    print(f"| other | {cpu - sum(parts.values()):.3f} |")


OOC_CHILD = """
import json, os, resource, sys, time
store_path, out, cap_mb, params, engine, cgroup_procs = sys.argv[1:7]
if cgroup_procs:  # join the capped memory cgroup first: Dask's scheduler and workers inherit it
    with open(cgroup_procs, "w") as f:
        f.write(str(os.getpid()))
if engine == "inprocess":
    resource.setrlimit(resource.RLIMIT_AS, (int(cap_mb) << 20, int(cap_mb) << 20))
from streamfit.train import train
t0 = time.perf_counter()
train(store_path, "stagewise", out, json.loads(params), n_workers=0 if engine == "inprocess" else 2,
      overwrite=True, progress=False)
records = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
print(json.dumps({"seconds": time.perf_counter() - t0, "last": records[-1],
                  "vm_peak_mb": int(open("/proc/self/status").read().split("VmPeak:")[1].split()[0]) / 1024}))
"""


def make_ooc_store(path: Path, n_rows: int, n_features: int, nnz_per_row: int, n_classes: int) -> None:
    """A synthetic sparse multiclass store: each row has `nnz_per_row` distinct random columns
    with log-normal values; the label is the argmax of a seeded random linear teacher plus
    Gumbel noise. Written in batches through StoreWriter, so generation memory is one batch."""
    from streamfit.store import StoreWriter

    rng = np.random.default_rng(0)
    teacher = rng.standard_normal((n_features, n_classes))
    w = StoreWriter(str(path), chunk_rows=1 << 16, overwrite=True)
    batch = 1 << 18
    for start in range(0, n_rows, batch):
        m = min(batch, n_rows - start)
        cols = np.sort(
            rng.choice(n_features, size=(m, nnz_per_row))
            if nnz_per_row * 4 < n_features
            else np.argsort(rng.random((m, n_features)), axis=1)[:, :nnz_per_row],
            axis=1,
        )
        dup = np.zeros_like(cols, dtype=bool)
        dup[:, 1:] = cols[:, 1:] == cols[:, :-1]
        values = rng.lognormal(size=cols.shape).astype(np.float32)
        values[dup] = 0.0  # a repeated column adds nothing
        X = sp.csr_matrix(
            (values.ravel(), cols.ravel(), np.arange(0, m * nnz_per_row + 1, nnz_per_row)), shape=(m, n_features)
        )
        X.sum_duplicates()
        X.eliminate_zeros()
        scores = X @ teacher + rng.gumbel(size=(m, n_classes))
        w.write_rows(X, scores.argmax(axis=1).astype(np.int32))
        print(f"\r  generated {start + m}/{n_rows} rows", end="", flush=True)
    print()
    w.close(n_features=n_features, classes=[f"c{i}" for i in range(n_classes)])


def memory_cgroup(cap_mb: int) -> Path | None:
    """A new memory cgroup limited to cap_mb without swap (cgroup v2, else v1), or None where this
    process may not create one (not root, no memory controller)."""
    root = Path("/sys/fs/cgroup")
    name = f"streamfit_ooc_{os.getpid()}"
    try:
        if (root / "cgroup.controllers").exists():
            group = root / name
            group.mkdir()
            (group / "memory.max").write_text(str(cap_mb << 20))
            (group / "memory.swap.max").write_text("0")
        else:
            group = root / "memory" / name
            group.mkdir()
            (group / "memory.limit_in_bytes").write_text(str(cap_mb << 20))
        return group
    except OSError:
        return None


def oom_kills(group: Path) -> int:
    """Processes of the cgroup killed for exceeding its limit."""
    text = (group / ("memory.events" if (group / "memory.events").exists() else "memory.oom_control")).read_text()
    fields = dict(line.split() for line in text.splitlines())
    return int(fields.get("oom_kill", 0))


def watch_tree(proc, every: float = 0.2) -> tuple[float, float, int]:
    """Poll the child and its descendants until the child exits: (the largest sampled sum of their
    RSS, the sum of each process's own peak RSS (VmHWM) -- an upper bound of the tree's peak -- in
    MiB, and the number of processes seen)."""
    import psutil

    root = psutil.Process(proc.pid)
    peaks: dict[int, int] = {}
    largest_sum = 0
    while proc.poll() is None:
        total = 0
        for p in [root, *root.children(recursive=True)]:
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    status = f.read()
                total += p.memory_info().rss
                peaks[p.pid] = int(status.split("VmHWM:")[1].split()[0]) << 10
            except (psutil.Error, OSError, IndexError):
                continue  # a process that just ended
        largest_sum = max(largest_sum, total)
        time.sleep(every)
    return largest_sum / 2**20, sum(peaks.values()) / 2**20, len(peaks)


def ooc(args) -> None:
    """The stagewise solver through `streamfit.train` (checkpoints on disk) in a child process, on a
    generated store whose decoded size is several times --ooc-cap-mb. --ooc-engine inprocess caps
    the child's address space (RLIMIT_AS) at the cap; dask runs the embedded 2-worker cluster, which
    an address-space limit cannot cap as a whole (it is per process), so the whole process tree goes
    into a memory cgroup limited to the cap, without swap, when this process may create one (root);
    a process over the limit is killed. For both the peak RSS of the whole tree is measured by
    polling: the sum of each process's own peak (an upper bound) and the largest sampled sum."""
    import json
    import subprocess
    import sys

    from streamfit.store import open_store

    path = args.work / f"ooc_{args.ooc_rows}.zarr"
    if not path.exists():
        make_ooc_store(path, args.ooc_rows, 1000, 40, 10)
    store = open_store(str(path))
    decoded_mb = store.manifest.nnz * 8 / 2**20  # float32 values + int32 indices
    print(
        f"\n## out of core: {store.n_rows} rows, {store.n_features} features, nnz {store.manifest.nnz}, "
        f"{store.n_chunks} chunks; decoded CSR {decoded_mb:.0f} MiB, scores {store.n_rows * 10 * 8 / 2**20:.0f} "
        f"MiB per version; cap {args.ooc_cap_mb} MiB; load average {os.getloadavg()[0]:.1f}\n"
        "| engine | cap | finished in | train accuracy | peak RSS of the process tree: sum of per-process "
        "peaks (largest sampled sum) | processes | killed by the cap |\n|---|---|---|---|---|---|---|",
        flush=True,
    )
    params = {"generator": "sequential", "block_size": 500, "n_passes": 1}
    env = {**os.environ, "MALLOC_ARENA_MAX": "2", "OMP_NUM_THREADS": "1"}
    for engine in args.ooc_engine.split(","):
        group = memory_cgroup(args.ooc_cap_mb) if engine == "dask" else None
        if engine == "dask" and group is None:
            print("(no memory cgroup can be created here: the dask run is measured, not capped)")
        cap = (
            f"address space {args.ooc_cap_mb} MiB"
            if engine == "inprocess"
            else f"cgroup {args.ooc_cap_mb} MiB, no swap"
            if group
            else "none"
        )
        argv = [
            sys.executable,
            "-c",
            OOC_CHILD,
            str(path),
            str(args.work / f"ooc_run_{engine}"),
            str(args.ooc_cap_mb),
            json.dumps(params),
            engine,
            str(group / "cgroup.procs") if group else "",
        ]
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        with ThreadPoolExecutor(1) as pool:
            streams = pool.submit(proc.communicate)
            sampled_mb, peaks_mb, n_procs = watch_tree(proc)
            stdout, stderr = streams.result()
        killed = oom_kills(group) if group else None
        if group:
            group.rmdir()
        if proc.returncode != 0:
            print(
                f"| {engine} | {cap} | FAILED ({proc.returncode}): {stderr.strip().splitlines()[-3:]} | | "
                f"{peaks_mb:.0f} ({sampled_mb:.0f}) MiB | {n_procs} | {killed} |"
            )
            continue
        r = json.loads(stdout.strip().splitlines()[-1])
        print(
            f"| {engine} | {cap} | {r['seconds']:.0f} s | {r['last']['train_accuracy']:.4f} | "
            f"{peaks_mb:.0f} ({sampled_mb:.0f}) MiB | {n_procs} | {killed if killed is not None else '-'} |",
            flush=True,
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--datasets", default="letter,pendigits,satimage,mnist,news20")
    ap.add_argument("--dims", default="2000,4000,8000", help="stagewise n_components, smallest first")
    ap.add_argument("--variants", default="linear,logistic,calibrated", help=f"of {', '.join(VARIANTS)}")
    ap.add_argument("--peers", default="linearsvc,logreg")
    ap.add_argument("--peer-dims", default="2000", help="the dims (of --dims) at which the peers run")
    ap.add_argument(
        "--peer-c",
        default="1",
        help="the peers' C, or a comma-separated grid: then each peer's C is the one with the lowest "
        "error on a seeded 80/20 split of the training rows (ties: the smaller C), refitted on "
        "all of them (not for news20)",
    )
    ap.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="repeat each set's comparison with random features from seeds 0 .. N-1 (ours and the "
        "peers on the same features), then compare the mean errors and times",
    )
    ap.add_argument("--block-size", type=int, default=512)
    ap.add_argument("--passes", type=int, default=2)
    ap.add_argument("--lam", type=float, default=1e-4, help="λ of every stagewise fit (the solver's default)")
    ap.add_argument("--logistic-iters", type=int, default=10, help="inner iterations of the softmax link")
    ap.add_argument("--gram-dtype", default="float32", choices=["float64", "float32"])
    ap.add_argument(
        "--rff-sampling",
        default="tune",
        choices=["iid", "orthogonal", "tune"],
        help="frequencies of the random features, or 'tune' (see above)",
    )
    ap.add_argument(
        "--rff-phases",
        default="tune",
        choices=["random", "paired", "tune"],
        help="cos(w'x + b) with random b, or paired cos and sin of w'x, or 'tune' (see above)",
    )
    ap.add_argument("--bandwidth", default="tune", help="RFF bandwidth multiplier, or 'tune' (see above)")
    ap.add_argument(
        "--select-folds",
        type=int,
        default=5,
        help="1: choose the bandwidth (and 'tune' settings) on an 80/20 split of the training rows; "
        "K > 1: by the mean error over K folds of them",
    )
    ap.add_argument("--bandwidth-grid", default="0.25,0.35,0.5,0.7,1.0,1.4,2.0,2.8")
    ap.add_argument("--scaling", default=None, help="a dense set: only the n-scaling comparison on it")
    ap.add_argument("--scaling-sizes", default="3000,7500,15000")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA)
    ap.add_argument("--work", type=Path, default=Path("/tmp/bench_stagewise"), help="news20 stores and runs")
    ap.add_argument("--news20-blocks", default="500x2", help="comma-separated BLOCKxPASSES settings for news20")
    ap.add_argument("--news20-lam", type=float, default=1e-4)
    ap.add_argument("--profile", default=None, help="SET:DIMS:VARIANT: only one fit, CPU seconds by part")
    ap.add_argument("--ooc", action="store_true", help="only the out-of-core run under a memory cap")
    ap.add_argument("--ooc-rows", type=int, default=25_000_000, help="rows of the generated store (40 nnz each)")
    ap.add_argument("--ooc-cap-mb", type=int, default=2048)
    ap.add_argument(
        "--ooc-engine",
        default="inprocess,dask",
        help="inprocess (address space capped) and/or dask (embedded 2-worker cluster in a capped cgroup)",
    )
    args = ap.parse_args()
    args.news20_blocks = [tuple(int(v) for v in b.split("x")) for b in args.news20_blocks.split(",")]
    if args.ooc:
        ooc(args)
        return
    args.dims = [int(d) for d in args.dims.split(",")]
    args.peer_dims = [int(d) for d in args.peer_dims.split(",") if d]
    args.variants = [v for v in args.variants.split(",") if v]
    args.peers = [p for p in args.peers.split(",") if p]
    args.peer_c = sorted(float(c) for c in args.peer_c.split(","))
    args.bandwidth_grid = [float(b) for b in args.bandwidth_grid.split(",")]
    args.scaling_sizes = [int(n) for n in args.scaling_sizes.split(",")]
    args.rff = {}  # per set: "sampling/phases" of the random features (tune_bandwidth sets it)
    threadpool_limits(1)
    warnings.simplefilter("ignore", ConvergenceWarning)
    print(
        f"gram_dtype {args.gram_dtype}, block size {args.block_size}, {args.passes} passes, lam {args.lam:g}, "
        f"logistic inner iterations {args.logistic_iters}, bandwidth {args.bandwidth}; load {load_average()}"
    )
    if args.scaling:
        scaling(args)
        return
    if args.profile:
        profile(args)
        return
    for name in args.datasets.split(","):
        if name == "news20":
            news20(args)
            continue
        Xtr, ytr, Xte, yte, extra = load(name, args.data)
        print(
            f"\n## {name}: {Xtr.shape[0]} train / {Xte.shape[0]} test, {Xtr.shape[1]} inputs, "
            f"{len(np.unique(ytr))} classes; load {load_average()}",
            flush=True,
        )
        bandwidth = tune_bandwidth(args, name, Xtr, ytr, extra)
        for v in args.variants:  # warm-up, untimed: the first fit of a kind loads numba's cached kernels
            stagewise(args, v, args.dims[0], extra, bandwidth, name).fit(Xtr[:500], ytr[:500])
        if args.seeds == 1:
            speedups(name, compare(args, name, Xtr, ytr, Xte, yte, extra, bandwidth))
            continue
        runs, ratios = [], []
        for seed in range(args.seeds):
            print(f"\n### {name}, random features seed {seed}; load {load_average()}", flush=True)
            runs.append(compare(args, name, Xtr, ytr, Xte, yte, extra, bandwidth, seed))
            ratios.append(speedups(f"{name}, seed {seed}", runs[-1]))
        rows = mean_rows(runs)
        print(
            f"\n### {name}, mean of {args.seeds} seeds\n| dims | method | test error % | fit s wall (CPU) |\n"
            f"|---|---|---|---|"
        )
        for d, m, err, wall, cpu in rows:
            print(f"| {d} | {m} | {err:.2f} | {wall:.2f} ({cpu:.2f}) |")
        speedups(f"{name}, mean of {args.seeds} seeds", rows)
        if ratios[0] is not None:
            print(
                "  per seed, vs the best peer: "
                + ", ".join(f"{r:.1f}x" for r in ratios)
                + f" (median {np.median(ratios):.1f}x; 0 = no run of ours as accurate)",
                flush=True,
            )


if __name__ == "__main__":
    main()
