"""Stagewise least-squares regression (agarwal2014 Algorithm 3, identity link) beside
scikit-learn's Ridge (exact, in memory), SGDRegressor (partial_fit, streaming) and Vowpal Wabbit
(squared loss), in one run.

    python tools/bench_regression.py [--sets diabetes,randhie] [--ooc-rows 200000,400000,800000]
                                     [--ooc-features 20] [--cache-mb 64] [--sgd-max-epochs 1000]
                                     [--vw-passes 20] [--no-vw-ooc] [--no-blocks] [--work DIR]
                                     [-p KEY=VALUE ...]
    python tools/bench_regression.py --sets none --ooc-rows 10000000      # the issue's 10 M rows

Real sets: scikit-learn's diabetes (442 rows, 10 features; shipped with scikit-learn) and
statsmodels' randhie (RAND health insurance experiment, 20 190 rows, 9 features, target mdvis;
shipped with statsmodels). Each is split 75/25 with seed 0 and standardized with the training
rows' mean and standard deviation; every method gets the same arrays. Ridge uses alpha = 1
(scikit-learn's default); "stagewise, one block" is StagewiseLSRegressor with every feature in
one block and one pass at lam = alpha / n_train, which is the same ridge problem (its RMSE ratio
checks that); "stagewise, default" is StagewiseLSRegressor() as
shipped (generator auto: for real-valued targets gradient-ordered blocks of the stored columns,
block_size 512, 2 passes, lam 1e-4; with these few columns the stages run on the normal
equations summed in one pass; `-p KEY=VALUE` overrides a default of this fit).

SGDRegressor as its users run it (the protocol, the same on every set; nothing is tuned per set):
in memory `SGDRegressor(random_state=0).fit(X, y)` with all its defaults, so its own stopping
rule ends the fit (tol=1e-3, n_iter_no_change=5: stop once the epoch's training objective, the
mean of the loss ½(y − p)² of each row at the weights before its update plus the penalty
(α/2)‖w‖², has not fallen below the best so far minus tol for 5 epochs in a row; max_iter=1000).
Out of core, where fit cannot run, the same rule epoch by epoch through partial_fit: each epoch
visits the store's chunks in store order (the order in which every method here reads them), one
partial_fit per chunk (which shuffles the chunk's rows, as fit shuffles); the epoch's objective is the mean over rows of ½(y − p)², p
scored by the weights before the chunk's update (fit scores each row before its own update: a
chunk of progressive validation instead of a row), plus (α/2)‖w‖² at those weights; epochs stop
by fit's rule, or at --sgd-max-epochs. Its time is the whole run to its stop and its RMSE the
final one. The row "SGDRegressor (1 epoch)" (one partial_fit over the rows, resp. over the
chunks) is shown for transparency: an epoch is what one read of the data costs.
Vowpal Wabbit (Python package
vowpalwabbit, the C++ learner reading a VW-format file with a cache, --passes --vw-passes, its
default adaptive normalized updates) is timed from the start of its parser to the end of training;
its learning rate -l is chosen from 0.5 (its default), 2 and 10 on a split of the training rows
(diabetes' intercept, about 150, is far from VW's start at 0: at -l 0.5 its test RMSE was 2.3×
Ridge's after 20 passes).

Ratios: RMSE / Ridge's RMSE (the issue's goal: within 1 %), and "× vs SGD": the time of
SGDRegressor run to its stopping rule divided by the method's time, given the method's test
RMSE is at or below SGD's final RMSE (the time to reach SGD's final RMSE, bounded above by the
whole fit; "–" when not reached); "× vs 1 epoch" the same against one SGD epoch.
In memory, every method is fitted once untimed (numba compiles streamfit's kernels on first use,
about a second; the peers are precompiled), then its time is the best of REPEATS (5) fits: the
fits take milliseconds, so a single timing is mostly the rest of the machine's noise. VW runs
once (a process of its own per fit).

Out of core (--ooc-rows, a list): a generated linear model y = xᵀw + 1 + ε (x ~ N(0, I) with
--ooc-features dense columns, ε ~ N(0, 0.5²)) written as a Zarr regression store in chunks of
65 536 rows, and 100 000 test rows from the same model. Each method runs in a fresh process whose
peak RSS during the fit is reported (sampled every 5 ms; getrusage's high-water mark is set by
the imports), and in parentheses its RSS just before the fit (imports and the test rows): stagewise through `streamfit.train` in process
(--n-workers 0; "default": no parameters, as `streamfit train STORE` runs; "one block": all
features in one block, one pass, the exact ridge solution at lam 1e-6; both run their stages on
the normal equations summed in the column scan, one pass over the data; and "blocks": blocks of 4 columns, 2 passes, more columns than that covers, so each stage is a data
pass over dense column blocks) with
STREAMFIT_CHUNK_CACHE_MB = --cache-mb, below the store's decoded size, so every chunk is read from
disk every pass; SGDRegressor through partial_fit on the same store's chunks (above);
Vowpal Wabbit from a VW-format text file of the same rows (written beforehand, not timed; one
pass); the reference "Ridge (exact)" RMSE is the closed form of the normal equations summed over
the store's chunks, which is Ridge's solution without holding X. Memory flat in the rows means
the peak RSS column does not grow with the rows.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

import numpy as np

OOC_CHUNK_ROWS = 1 << 16
REPEATS = 5  # in memory: each method's time is the best of this many fits
OOC_NOISE = 0.5
OOC_TEST_ROWS = 100_000
BLOCKS_SIZE, BLOCKS_PASSES = 4, 2  # "stagewise-blocks": stages on dense column blocks, one data pass each


def rmse(y, p) -> float:
    return float(np.sqrt(np.mean((np.asarray(y) - np.asarray(p)) ** 2)))


def load_set(name: str):
    """(X_train, y_train, X_test, y_test), standardized with the training rows' statistics."""
    if name == "diabetes":
        from sklearn.datasets import load_diabetes

        X, y = load_diabetes(return_X_y=True, scaled=False)
    elif name == "randhie":
        import statsmodels.api as sm

        data = sm.datasets.randhie.load_pandas()
        X, y = data.exog.to_numpy(dtype=np.float64), data.endog.to_numpy(dtype=np.float64).ravel()
    else:
        raise SystemExit(f"unknown set {name!r}: diabetes or randhie")
    order = np.random.default_rng(0).permutation(len(y))
    n_train = int(0.75 * len(y))
    tr, te = order[:n_train], order[n_train:]
    mean, std = X[tr].mean(axis=0), X[tr].std(axis=0)
    std[std == 0] = 1.0
    return (X[tr] - mean) / std, y[tr], (X[te] - mean) / std, y[te]


def write_vw(path: str, X, y) -> None:
    """VW text format: `label | 0:v 1:v ...` (a feature per column, zeros left out)."""
    with open(path, "w") as f:
        for row, label in zip(X.tolist(), y.tolist()):
            f.write(f"{label!r} | " + " ".join(f"{j}:{v!r}" for j, v in enumerate(row) if v) + "\n")


def run_vw(train_file: str, test_file: str, work: str, passes: int, rate: float = 0.5) -> tuple[float, np.ndarray]:
    """(training seconds, test predictions) of VW's squared loss with learning rate `rate` (-l;
    VW's default 0.5), reading the files natively."""
    from vowpalwabbit import Workspace

    model, cache, preds = (os.path.join(work, name) for name in ("vw.model", "vw.cache", "vw.preds"))
    for path in (model, cache):
        if os.path.exists(path):
            os.remove(path)
    start = time.perf_counter()
    learner = Workspace(
        f"-d {train_file} --loss_function squared --passes {passes} --cache_file {cache} --holdout_off "
        f"-b 18 -l {rate} -f {model} --quiet"
    )
    learner.finish()
    seconds = time.perf_counter() - start
    scorer = Workspace(f"-i {model} -t -d {test_file} -p {preds} --quiet")
    scorer.finish()
    return seconds, np.loadtxt(preds, ndmin=1)


VW_RATES = (0.5, 2.0, 10.0)


def vw_rate(X, y, work: str, passes: int) -> float:
    """VW's learning rate from VW_RATES (0.5 is its default): the lowest RMSE on the last 20 % of
    the training rows when trained on the first 80 % (the test rows are not used; not timed)."""
    cut = int(0.8 * len(y))
    fit_file, held_file = os.path.join(work, "tune.fit.vw"), os.path.join(work, "tune.held.vw")
    write_vw(fit_file, X[:cut], y[:cut])
    write_vw(held_file, X[cut:], y[cut:])
    errors = {rate: rmse(y[cut:], run_vw(fit_file, held_file, work, passes, rate)[1]) for rate in VW_RATES}
    return min(errors, key=errors.get)


def bench_set(name: str, args, work: str) -> list[dict]:
    from sklearn.linear_model import Ridge, SGDRegressor

    from streamfit import StagewiseLSRegressor

    Xtr, ytr, Xte, yte = load_set(name)
    rows = []

    def timed(label, make):
        """The best of REPEATS timed fits after an untimed one (numba compiles streamfit's kernels
        on first use; the peers are precompiled): these fits take milliseconds, so one timing is
        mostly noise from the rest of the machine."""
        make()
        seconds = []
        for _ in range(REPEATS):
            start = time.perf_counter()
            model = make()
            seconds.append(time.perf_counter() - start)
        rows.append(
            {"set": name, "method": label(model), "seconds": min(seconds), "rmse": rmse(yte, model.predict(Xte))}
        )

    alpha = 1.0
    timed(lambda m: "Ridge (exact)", lambda: Ridge(alpha=alpha).fit(Xtr, ytr))
    timed(
        lambda m: "stagewise, one block",
        lambda: StagewiseLSRegressor(
            generator="sequential", block_size=Xtr.shape[1], n_passes=1, lam=alpha / len(ytr)
        ).fit(Xtr, ytr),
    )
    timed(lambda m: "stagewise, default", lambda: StagewiseLSRegressor(random_state=0, **args.params).fit(Xtr, ytr))
    # its defaults: its own stopping rule
    timed(
        lambda m: f"SGDRegressor (fit: its stopping rule, {m.n_iter_} epochs)",
        lambda: SGDRegressor(random_state=0).fit(Xtr, ytr),
    )
    timed(lambda m: "SGDRegressor (1 epoch)", lambda: SGDRegressor(random_state=0).partial_fit(Xtr, ytr))
    rate = vw_rate(Xtr, ytr, work, args.vw_passes)
    train_file, test_file = os.path.join(work, f"{name}.train.vw"), os.path.join(work, f"{name}.test.vw")
    write_vw(train_file, Xtr, ytr)
    write_vw(test_file, Xte, yte)
    seconds, pred = run_vw(train_file, test_file, work, args.vw_passes, rate)
    label = f"Vowpal Wabbit ({args.vw_passes} passes, -l {rate:g})"
    rows.append({"set": name, "method": label, "seconds": seconds, "rmse": rmse(yte, pred)})
    return rows


# -- out of core ---------------------------------------------------------------------------------


def ooc_weights(d: int) -> np.ndarray:
    return np.random.default_rng(12345).normal(size=d)


def ooc_rows(n: int, d: int, seed: int):
    """n rows of the generated model, in pieces of OOC_CHUNK_ROWS: (X float32-exact, y)."""
    w = ooc_weights(d)
    rng = np.random.default_rng(seed)
    for lo in range(0, n, OOC_CHUNK_ROWS):
        m = min(OOC_CHUNK_ROWS, n - lo)
        X = rng.normal(size=(m, d)).astype(np.float32).astype(np.float64)
        yield X, X @ w + 1.0 + OOC_NOISE * rng.normal(size=m)


def child_generate(path: str, n: int, d: int, vw_file: str | None) -> None:
    import scipy.sparse as sp

    from streamfit.store import StoreWriter

    writer = StoreWriter(path, n_outputs=1, chunk_rows=OOC_CHUNK_ROWS, overwrite=True)
    for X, y in ooc_rows(n, d, seed=1):
        writer.write_rows(sp.csr_matrix(X), y[:, None])
        if vw_file:
            with open(vw_file, "a") as f:
                for row, label in zip(X.tolist(), y.tolist()):
                    f.write(f"{label!r} | " + " ".join(f"{j}:{v!r}" for j, v in enumerate(row)) + "\n")
    writer.close(n_features=d, classes=["y"])


def ooc_test(d: int):
    return next(ooc_rows(OOC_TEST_ROWS, d, seed=2)) if OOC_TEST_ROWS <= OOC_CHUNK_ROWS else _concat_test(d)


def _concat_test(d: int):
    parts = list(ooc_rows(OOC_TEST_ROWS, d, seed=2))
    return np.vstack([p[0] for p in parts]), np.concatenate([p[1] for p in parts])


def sgd_out_of_core(store, max_epochs: int):
    """(SGDRegressor, epochs run): SGDRegressor() with its defaults, trained epoch by epoch with one
    partial_fit per chunk (chunks in store order, the order every method reads), stopped by fit's own rule
    (module docstring): the epoch's objective, the mean of ½(y − p)² at the weights before each
    chunk's update plus (α/2)‖w‖² at those weights, counts as no improvement when it is above
    the best so far minus tol; n_iter_no_change such epochs in a row stop it, or max_epochs."""
    from sklearn.linear_model import SGDRegressor  # already imported by child_method

    sgd = SGDRegressor(random_state=0)
    best, stale, epoch = np.inf, 0, 0
    while epoch < max_epochs and stale < sgd.n_iter_no_change:
        total = 0.0
        for i in range(store.n_chunks):
            chunk = store.read_chunk(i, cache=False)
            y = chunk.labels[:, 0]
            if hasattr(sgd, "coef_"):  # before the first update the weights are 0
                p = sgd.predict(chunk.X)
                total += 0.5 * float(((y - p) ** 2).sum()) + len(y) * 0.5 * sgd.alpha * float(sgd.coef_ @ sgd.coef_)
            else:
                total += 0.5 * float((y**2).sum())
            sgd.partial_fit(chunk.X, y)
        epoch += 1
        objective = total / store.n_rows
        stale = stale + 1 if objective > best - sgd.tol else 0
        best = min(best, objective)
    return sgd, epoch


def child_method(method: str, store_path: str, work: str, d: int, max_epochs: int) -> dict:
    """Runs one method in this (fresh) process; its seconds, test RMSE and this process's peak RSS."""
    import psutil
    from sklearn.linear_model import SGDRegressor

    from streamfit.store import open_store
    from streamfit.train import train  # imported before the clock starts, as scikit-learn is

    Xte, yte = ooc_test(d)
    store = open_store(store_path)
    process = psutil.Process()
    before = process.memory_info().rss / 2**20  # imports and the test rows
    peak = [before]
    done = threading.Event()

    def sample() -> None:  # the RSS during the fit, every 5 ms (ru_maxrss is reached at import time)
        while not done.wait(0.005):
            peak[0] = max(peak[0], process.memory_info().rss / 2**20)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    extra = {}
    start = time.perf_counter()
    if method in ("stagewise", "stagewise-default", "stagewise-blocks"):
        params = {"generator": "sequential", "block_size": d, "n_passes": 1, "lam": 1e-6}
        if method == "stagewise-default":  # as `streamfit train STORE` runs
            params = {}
        if method == "stagewise-blocks":  # more columns than blocks · passes: a data pass per stage
            params.update(block_size=BLOCKS_SIZE, n_passes=BLOCKS_PASSES)
        model = train(
            store_path, "stagewise", os.path.join(work, "run"), params, n_workers=0, overwrite=True, progress=False
        )
        seconds, pred = time.perf_counter() - start, model.predict(Xte)
    elif method == "sgd":
        sgd, extra["epochs"] = sgd_out_of_core(store, max_epochs)
        seconds, pred = time.perf_counter() - start, sgd.predict(Xte)
    elif method == "sgd-1":  # one epoch: one partial_fit per chunk, in store order
        sgd = SGDRegressor(random_state=0)
        for i in range(store.n_chunks):
            chunk = store.read_chunk(i, cache=False)
            sgd.partial_fit(chunk.X, chunk.labels[:, 0])
        seconds, pred = time.perf_counter() - start, sgd.predict(Xte)
    elif method == "exact":  # Ridge's closed form from normal equations summed over the chunks
        A = np.zeros((d + 1, d + 1))
        b = np.zeros(d + 1)
        for i in range(store.n_chunks):
            chunk = store.read_chunk(i, cache=False)
            Z = np.hstack([np.ones((chunk.n_rows, 1)), chunk.X.toarray().astype(np.float64)])
            A += Z.T @ Z
            b += Z.T @ chunk.labels[:, 0]
        A[1:, 1:] += store.n_rows * 1e-6 * np.eye(d)
        coef = np.linalg.solve(A, b)
        seconds, pred = time.perf_counter() - start, coef[0] + Xte @ coef[1:]
    elif method == "vw":
        test_file = os.path.join(work, "test.vw")
        with open(test_file, "w") as f:
            for row, label in zip(Xte.tolist(), yte.tolist()):
                f.write(f"{label!r} | " + " ".join(f"{j}:{v!r}" for j, v in enumerate(row)) + "\n")
        seconds, pred = run_vw(os.path.join(work, "train.vw"), test_file, work, passes=1)
    else:
        raise SystemExit(f"unknown method {method}")
    done.set()
    sampler.join()
    peak[0] = max(peak[0], process.memory_info().rss / 2**20)
    return {"seconds": seconds, "rmse": rmse(yte, pred), "peak_rss_mib": peak[0], "rss_before_mib": before, **extra}


def bench_ooc(args, work: str) -> list[dict]:
    rows = []
    d = args.ooc_features
    for n in args.ooc_rows:
        store = os.path.join(work, f"ooc-{n}.zarr")
        vw_file = os.path.join(work, "train.vw") if args.vw_ooc else None
        if vw_file and os.path.exists(vw_file):
            os.remove(vw_file)
        _child(["--child-generate", store, str(n), str(d), vw_file or ""], {})
        decoded_mib = (8 * n * d + 20 * n) / 2**20
        env = {"STREAMFIT_CHUNK_CACHE_MB": str(args.cache_mb), "OMP_NUM_THREADS": "1"}
        methods = ["exact", "stagewise-default", "stagewise"] + (["stagewise-blocks"] if args.blocks else [])
        methods += ["sgd", "sgd-1"]
        methods += ["vw"] if args.vw_ooc else []
        labels = {
            "exact": "Ridge (exact, streamed normal equations)",
            "stagewise-default": "stagewise, default",
            "stagewise": "stagewise, one block",
            "stagewise-blocks": f"stagewise, blocks of {BLOCKS_SIZE}, {BLOCKS_PASSES} passes (data passes)",
            "sgd": "SGDRegressor (partial_fit, its stopping rule, {epochs} epochs)",
            "sgd-1": "SGDRegressor (1 epoch)",
            "vw": "Vowpal Wabbit (1 pass)",
        }
        for method in methods:
            out = _child(["--child-method", method, store, work, str(d), str(args.sgd_max_epochs)], env)
            label = labels[method].format(epochs=out.get("epochs"))
            rows.append({"set": f"generated {n:,} × {d} ({decoded_mib:.0f} MiB decoded)", "method": label, **out})
    return rows


def _child(argv: list[str], env: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), *argv], env={**os.environ, **env}, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{proc.stderr[-3000:]}")
    lines = proc.stdout.strip().splitlines()
    return json.loads(lines[-1]) if lines else {}


# -- report --------------------------------------------------------------------------------------


def table(rows: list[dict]) -> str:
    """Markdown: per set, each method's RMSE, RMSE / Ridge's, seconds, and the seconds of SGD run to
    its stopping rule (and of one SGD epoch) over the method's when its RMSE is at or below
    that SGD's final RMSE."""
    out = [
        "| set | method | test RMSE | RMSE / Ridge | fit s | × vs SGD | × vs 1 epoch | peak RSS in the fit, MiB (before) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name in dict.fromkeys(r["set"] for r in rows):
        group = [r for r in rows if r["set"] == name]
        ridge = next(r for r in group if r["method"].startswith("Ridge"))
        sgd = next(r for r in group if r["method"].startswith("SGD") and "stopping rule" in r["method"])
        epoch = next(r for r in group if r["method"] == "SGDRegressor (1 epoch)")
        for r in group:
            speeds = []
            for peer in (sgd, epoch):
                ours = not r["method"].startswith(("SGD", "Ridge"))
                speeds.append(f"{peer['seconds'] / r['seconds']:.1f}" if ours and r["rmse"] <= peer["rmse"] else "–")
            rss = f"{r['peak_rss_mib']:.0f} ({r['rss_before_mib']:.0f})" if "peak_rss_mib" in r else ""
            out.append(
                f"| {name} | {r['method']} | {r['rmse']:.4f} | {r['rmse'] / ridge['rmse']:.4f} | {r['seconds']:.3f} "
                f"| {speeds[0]} | {speeds[1]} | {rss} |"
            )
    return "\n".join(out)


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--child-generate":
        _, _, store, n, d, vw_file = sys.argv
        child_generate(store, int(n), int(d), vw_file or None)
        return
    if len(sys.argv) > 1 and sys.argv[1] == "--child-method":
        _, _, method, store, work, d, max_epochs = sys.argv
        print(json.dumps(child_method(method, store, work, int(d), int(max_epochs))))
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sets", default="diabetes,randhie", help="comma-separated, or none")
    ap.add_argument("--ooc-rows", default="200000,400000,800000", help="comma-separated row counts, or none")
    ap.add_argument("--ooc-features", type=int, default=20)
    ap.add_argument("--cache-mb", type=float, default=64, help="STREAMFIT_CHUNK_CACHE_MB of the out-of-core runs")
    ap.add_argument(
        "--sgd-max-epochs", type=int, default=1000, help="out of core: cap on SGD's epochs (fit's max_iter: 1000)"
    )
    ap.add_argument("--vw-passes", type=int, default=20)
    ap.add_argument("--no-vw-ooc", dest="vw_ooc", action="store_false", help="leave VW out of the generated sets")
    ap.add_argument(
        "--no-blocks", dest="blocks", action="store_false", help="leave the data-pass 'blocks' run out (generated sets)"
    )
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument(
        "-p",
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="overrides a default of the real sets' 'stagewise, default' fit (repeatable), e.g. -p penalty=total",
    )
    args = ap.parse_args()
    from streamfit.cli import _parse_key_values

    args.params = _parse_key_values(args.param, "-p")
    args.ooc_rows = [] if args.ooc_rows == "none" else [int(v) for v in args.ooc_rows.split(",")]
    sets = [] if args.sets == "none" else args.sets.split(",")
    with tempfile.TemporaryDirectory(dir=args.work) as work:
        rows = [r for name in sets for r in bench_set(name, args, work)]
        rows += bench_ooc(args, work)
    print(f"load average {os.getloadavg()[0]:.1f} (2 cores shared)")
    print(table(rows))


if __name__ == "__main__":
    main()
