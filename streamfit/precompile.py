"""`streamfit compile`: numba's on-disk cache filled before the first job.

Every kernel is `@njit(cache=True)`: a solver's first use after installation compiles its
kernels (LLVM; tens of CPU seconds, docs/benchmarks.md, "First use: numba compilation, session
17") and stores them in numba's cache (the package's `__pycache__`, or NUMBA_CACHE_DIR, or
numba's per-user folder where the package's is not writable), keyed by the argument types and
this CPU's model; later processes load them in milliseconds. `compile_targets` pays that ahead
(an image build, a CI step): each target runs a tiny job in a process of its own, up to `jobs`
at a time, on the paths a real job takes, so the cache holds the same signatures:

- `ingest`: a LIBSVM file and a text file (the parser's and the hashing kernels), ingested;
- a solver: a tiny LIBSVM file ingested to a store, `streamfit train` in process (its main
  modes, TRAIN_PARAMS), `evaluate` and `predict --top-k`, then its estimator's fit and predict on
  the same rows as a dense float64 array.

Multilabel and regression stores, sparse inputs to the estimators and the other parameter
values compile on their first use. `announce_compilation` is the other half: a fit that must
compile says so in one INFO line.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

log = logging.getLogger("streamfit.train")

# per solver, the parameter sets of its warm-up trains (small budgets; each a path of kernels;
# fbpd: iterations enough for a restart, whose norm is a kernel of its own)
TRAIN_PARAMS: dict[str, list[dict]] = {
    "bcd": [{"mode": "memory", "max_iter": 2}, {"mode": "chunks", "max_iter": 1}],
    "ppdsparse": [{}],
    "multiboost": [{"max_iter": 2}],
    "fbpd": [{"max_iter": 10}, {"max_iter": 2, "formulation": "constrained"}, {"max_iter": 2, "penalty": "l1/linf"}],
    "stagewise": [
        {"generator": "gradient", "n_passes": 1},
        {"generator": "rff", "n_components": 64, "n_passes": 1},
        {"generator": "gradient", "link": "softmax", "n_passes": 1, "max_iter": 2},
    ],
}
TARGETS = (*TRAIN_PARAMS, "ingest")  # the slowest first (measured), for the parallel schedule
ESTIMATORS = {
    "ppdsparse": "PPDSparseClassifier",
    "bcd": "BCDClassifier",
    "multiboost": "MultiBoostClassifier",
    "stagewise": "StagewiseLSClassifier",
    "fbpd": "FBPDClassifier",
}

# the data of the warm-up jobs: rows × features, classes
_ROWS, _FEATURES, _CLASSES = 240, 24, 4


def compile_targets(targets: list[str], jobs: int) -> list[tuple[str, float]]:
    """Run the warm-up of every target, `jobs` processes at a time; returns (target, seconds) in
    the order they finished. The processes are spawned fresh; each loads from the cache what an
    earlier one put there and compiles the rest of what its job reaches."""
    from numba.core import caching

    if not hasattr(caching.IndexDataCacheFile, "save"):  # a numba whose cache writes we cannot serialize
        jobs = 1
    ctx = multiprocessing.get_context("spawn")
    lock = ctx.Lock()
    order = [t for t in TARGETS if t in targets]
    done = []
    with concurrent.futures.ProcessPoolExecutor(
        max_workers=max(1, min(jobs, len(order))), mp_context=ctx, initializer=_serialize_cache_writes, initargs=(lock,)
    ) as pool:
        futures = {pool.submit(_warm_up, target): target for target in order}
        for future in concurrent.futures.as_completed(futures):
            done.append((futures[future], future.result()))
    return done


def _serialize_cache_writes(lock) -> None:
    """Numba writes a cache entry by reading the function's index, naming the next free object
    file, writing the index and then the object file, with no lock between processes: two
    processes compiling different signatures of one function (a loss both bcd and fbpd call)
    could each take the same file name, and the index would then point one signature at the
    other's machine code. The warm-up processes therefore write entries one at a time."""
    from numba.core import caching

    save = caching.IndexDataCacheFile.save

    def locked_save(self, key, data):
        with lock:
            save(self, key, data)

    caching.IndexDataCacheFile.save = locked_save  # type: ignore[method-assign]


def _warm_up(target: str) -> float:
    """One target's tiny jobs in this process (see the module docstring); returns its seconds."""
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix=f"streamfit-compile-{target}-") as tmp,
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stdout(quiet),  # the commands' results
        warnings.catch_warnings(),  # the estimators' ConvergenceWarning of the small budgets
    ):
        warnings.simplefilter("ignore")
        logging.disable(logging.WARNING)  # the solvers' "not converged" of the small budgets
        work = Path(tmp)
        if target == "ingest":
            _ingest_text(work)
            _ingest_libsvm(work)
        else:
            _warm_up_solver(target, work)
    return time.perf_counter() - started


def _data() -> tuple:
    """The warm-up rows: a dense float64 X (about a third of its entries zero) and int labels."""
    import numpy as np

    rng = np.random.default_rng(0)
    y = np.arange(_ROWS) % _CLASSES
    X = rng.random((_ROWS, _FEATURES)) + (np.arange(_FEATURES) % _CLASSES == y[:, None])
    X[rng.random(X.shape) < 0.35] = 0.0
    return X, y


def _cli(*args: str) -> None:
    from streamfit.cli import main

    main(["-q", *args], standalone_mode=False)


def _ingest_libsvm(work: Path) -> str:
    X, y = _data()
    source = work / "rows.svm"
    with open(source, "w") as f:
        for row, label in zip(X, y, strict=True):
            f.write(f"{label} " + " ".join(f"{j + 1}:{v:.6g}" for j, v in enumerate(row) if v != 0.0) + "\n")
    store = str(work / "rows.zarr")
    _cli("ingest", str(source), "--no-hash", "--out", store, "--chunk-rows", "64")
    return store


def _ingest_text(work: Path) -> None:
    source = work / "docs.tsv"
    with open(source, "w") as f:
        for i in range(60):
            f.write(f"c{i % 3}\t" + " ".join(f"w{(i * 7 + j * 13) % 50}" for j in range(12)) + "\n")
    _cli(
        "ingest",
        str(source),
        "--no-header",
        "--label-field",
        "0",
        "--text-field",
        "1",
        "--out",
        str(work / "docs.zarr"),
    )


def _warm_up_solver(solver: str, work: Path) -> None:
    import streamfit

    store = _ingest_libsvm(work)
    for i, params in enumerate(TRAIN_PARAMS[solver]):
        run = str(work / f"run{i}")
        settings = [a for key, value in params.items() for a in ("-p", f"{key}={value}")]
        _cli("train", store, "--solver", solver, *settings, "--n-workers", "0", "--out", run)
        _cli("evaluate", run, store)
        _cli("predict", run, store, "--top-k", "3", "--out", str(work / f"pred{i}.csv"))
    X, y = _data()
    estimator = getattr(streamfit, ESTIMATORS[solver])
    for params in TRAIN_PARAMS[solver]:
        estimator(**params).fit(X, y).predict(X)


@contextlib.contextmanager
def announce_compilation(solver: str) -> Iterator[None]:
    """Within the block, the first numba compilation of one of streamfit's kernels in this
    process logs one INFO line: which solver, that it is its first use after installation
    (nothing in numba's cache for it), and the command that compiles ahead. A fit whose kernels
    are all in the cache logs nothing. Compilations on Dask workers are not seen here."""
    from numba.core import event

    class FirstCompile(event.Listener):
        said = False

        def on_start(self, ev) -> None:
            if not self.said and ev.data["dispatcher"].py_func.__module__.startswith("streamfit."):
                self.said = True
                log.info(
                    "%s: compiling its numba kernels, its first use after installation (tens of seconds, once; "
                    "`streamfit compile --solver %s` does it ahead, e.g. when building an image)",
                    solver,
                    solver,
                )

        def on_end(self, ev) -> None:
            pass

    with event.install_listener("numba:compile", FirstCompile()):
        yield


def default_jobs() -> int:
    """Processes for `streamfit compile`: one per core this process may use."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
