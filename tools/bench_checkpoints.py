"""The share of a small training run that goes to checkpoints, per `checkpoint_interval`, beside
scikit-learn's one-vs-rest LinearSVC on the same rows, all in one process.

`streamfit.train.train` in process (`n_workers=0`) on a store (e.g. one that
tools/bench_defaults.py wrote: sector-23.zarr), after one untimed warm-up run (the numba
kernels load once per process; bench_defaults times that load with its one run per set).
Then `--rounds` rounds, each one run per interval in `--intervals` and one LinearSVC fit,
so load changes fall on all of them alike. Per interval: median wall seconds of `train`, their
ratio to LinearSVC's median, and the checkpoints saved per run and their seconds (the driver's
count, logged at debug level). `--intervals default` passes no checkpoint_interval at all, so
the same command times a source tree from before the option (the checkpoint columns are then
empty):

    python tools/bench_checkpoints.py STORE [--solver ppdsparse] [-p KEY=VALUE ...]
        [--intervals auto,0] [--rounds 5] [--out DIR]
    PYTHONPATH=OLD_SRC python tools/bench_checkpoints.py STORE --intervals default
"""

from __future__ import annotations

import argparse
import logging
import re
import statistics
import tempfile
import time


class _SaveCounter(logging.Handler):
    """Catches the driver's "N checkpoints in S s" debug line of the last run."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.last: tuple[int, float] | None = None

    def emit(self, record):
        match = re.search(r"(\d+) checkpoints in ([0-9.]+) s", record.getMessage())
        if match:
            self.last = (int(match[1]), float(match[2]))


def linear_svc_seconds(store) -> float:
    from sklearn.svm import LinearSVC

    X, y = store.to_scipy()
    started = time.perf_counter()
    LinearSVC().fit(X, y)
    return time.perf_counter() - started


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("store")
    ap.add_argument("--solver", default="ppdsparse")
    ap.add_argument("-p", "--param", action="append", default=[], metavar="KEY=VALUE", help="solver parameter")
    ap.add_argument("--intervals", default="auto,0", help="comma-separated: auto, seconds, or default (not passed)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", default=None, help="the run directory (default: a temporary folder)")
    args = ap.parse_args()
    from streamfit.cli import _parse_key_values
    from streamfit.store import open_store
    from streamfit.train import train

    params = _parse_key_values(args.param, "-p")
    out = args.out or tempfile.mkdtemp(prefix="bench_checkpoints_")
    store = open_store(args.store)
    counter = _SaveCounter()
    driver_log = logging.getLogger("streamfit.solvers.driver")
    driver_log.setLevel(logging.DEBUG)
    driver_log.addHandler(counter)
    intervals = args.intervals.split(",")

    def fit(interval: str) -> tuple[float, tuple[int, float] | None]:
        counter.last = None
        policy = {} if interval == "default" else {"checkpoint_interval": interval}
        started = time.perf_counter()
        train(args.store, args.solver, out, params, n_workers=0, progress=False, overwrite=True, **policy)
        return time.perf_counter() - started, counter.last

    fit(intervals[0])  # warm-up: the kernels load
    seconds: dict[str, list[float]] = {i: [] for i in intervals}
    saves: dict[str, list[tuple[int, float]]] = {i: [] for i in intervals}
    svc: list[float] = []
    for _ in range(args.rounds):
        for interval in intervals:
            s, counted = fit(interval)
            seconds[interval].append(s)
            if counted is not None:
                saves[interval].append(counted)
        svc.append(linear_svc_seconds(store))
    base = statistics.median(svc)
    print(
        f"{args.store}: {store.n_rows} rows, {store.n_classes} classes; {args.solver} {params or 'defaults'}; "
        f"median of {args.rounds} rounds"
    )
    print("| checkpoint_interval | train s | / LinearSVC | checkpoints a run | their s | share of train |")
    print("|---|---|---|---|---|---|")
    for interval in intervals:
        t = statistics.median(seconds[interval])
        if saves[interval]:
            n = statistics.median(c for c, _ in saves[interval])
            s = statistics.median(x for _, x in saves[interval])
            counted = f"{n:g} | {s:.2f} | {100 * s / t:.0f} %"
        else:
            counted = " | | "
        print(f"| {interval} | {t:.2f} | {t / base:.2f} | {counted} |")
    print(f"| LinearSVC (OvR) | {base:.2f} | 1 | | | |")


if __name__ == "__main__":
    main()
