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

`WarmUp` pays it alongside other work: a pipeline (`streamfit run`) whose solver has nothing in
the cache yet (`first_use`) compiles it in a background process (a tiny train and evaluate with
the pipeline's parameters) while this process ingests, and waits for it before training, which
then loads the kernels from the cache (docs/benchmarks.md, "First use: numba compilation,
session 19"). Where the solver's kernel module names parts of its kernel tree that compile apart
(`compile_parts`: kernels with the argument types its train passes them; ppdsparse's), the
background process compiles those instead of a tiny train, each part taken by whichever process
is free (`compile_shared`): itself, helper processes where there are cores to spare (session
20), and this process once its ingest is done (session 21), the kernels that call the others
last, loading them from the cache. `streamfit compile` compiles them too, so they are cached
whatever path its tiny trains take.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
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
# per solver, the module of its numba kernels (first_use looks for them in the cache)
KERNEL_MODULES = {solver: f"streamfit.solvers.{solver}_kernels" for solver in TRAIN_PARAMS}
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
    if not serialize_cache_writes():  # no file locks here, or a numba whose cache writes we cannot serialize
        jobs = 1
    ctx = multiprocessing.get_context("spawn")
    order = [t for t in TARGETS if t in targets]
    done = []
    with (
        tempfile.TemporaryDirectory(prefix="streamfit-compile-") as work,  # the jobs' files: gone with a kill too
        concurrent.futures.ProcessPoolExecutor(
            max_workers=max(1, min(jobs, len(order))), mp_context=ctx, initializer=_pool_process_start
        ) as pool,
    ):
        try:
            futures = {pool.submit(_warm_up, target, work): target for target in order}
            for future in concurrent.futures.as_completed(futures):
                done.append((futures[future], future.result()))
        except KeyboardInterrupt:  # the pool's processes ignore it: they end with this one, at once
            for child in multiprocessing.active_children():
                child.kill()  # numba writes a cache file under a temporary name, then renames it
            raise
    return done


def _pool_process_start() -> None:
    """A process of compile_targets' pool: a terminal's Ctrl-C, which reaches the whole process
    group, is the parent's to report (each process's own commands printed a `stopped:` line
    that spoke of a store); its numba cache writes serialized."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    serialize_cache_writes()


CACHE_LOCK_FILE = "streamfit-cache.lock"  # in each folder numba writes cache entries to


def serialize_cache_writes() -> bool:
    """Numba writes a cache entry by reading the function's index, naming the next free object
    file, writing the index and then the object file, with no lock between processes: two
    processes compiling different signatures of one function (a loss both bcd and fbpd call, the
    sort the hashing and ppdsparse call) could each take the same file name, and the index would
    then point one signature at the other's machine code. After this call, this process writes
    each entry holding an exclusive lock (flock) on CACHE_LOCK_FILE in the entry's folder, so
    processes that all called it write one at a time. Returns False (and changes nothing) where
    that is not possible (no fcntl, or a numba without IndexDataCacheFile.save)."""
    from numba.core import caching

    save = getattr(caching.IndexDataCacheFile, "save", None)
    try:
        import fcntl
    except ImportError:
        return False
    if save is None:
        return False
    if getattr(save, "serialized", False):
        return True

    def locked_save(self, key, data):
        with open(os.path.join(self._cache_path, CACHE_LOCK_FILE), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
            save(self, key, data)

    locked_save.serialized = True  # type: ignore[attr-defined]
    caching.IndexDataCacheFile.save = locked_save  # type: ignore[method-assign]
    return True


def _warm_up(target: str, folder: str | None = None) -> float:
    """One target's tiny jobs in this process (see the module docstring), their files under
    `folder` (default: the system's temporary folder); returns its seconds."""
    started = time.perf_counter()
    with (
        tempfile.TemporaryDirectory(prefix=f"streamfit-compile-{target}-", dir=folder) as tmp,
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

    compile_kernels(solver, list(kernel_parts(solver, 0)), 0)  # those its tiny trains may not reach
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


def first_use(solver: str) -> bool:
    """Whether numba's cache holds none of `solver`'s kernels: its first use here (or its kernels'
    source changed since they were cached), when a train would compile them all. Reads the
    index of each kernel of its module (KERNEL_MODULES), neither the machine code nor this CPU's
    model (which would start numba's code generator first): a cache filled on another CPU model
    only, a rare case, counts as filled."""
    import importlib

    from numba.core.registry import CPUDispatcher

    module = importlib.import_module(KERNEL_MODULES[solver])
    for kernel in vars(module).values():
        if not isinstance(kernel, CPUDispatcher) or kernel.py_func.__module__ != module.__name__:
            continue
        index = getattr(getattr(kernel, "_cache", None), "_cache_file", None)
        if index is not None and index._load_index():  # None: a kernel without cache=True
            return False
    return True


def kernel_parts(solver: str, n_features: int) -> dict[str, tuple[tuple, float]]:
    """The kernels of `solver` that compile apart, for a store `n_features` wide (0: not known):
    its kernel module's compile_parts (name: (argument types, compile seconds)), or none."""
    import importlib

    parts = getattr(importlib.import_module(KERNEL_MODULES[solver]), "compile_parts", None)
    return parts(n_features) if parts else {}


def compile_kernels(solver: str, names: list[str], n_features: int) -> None:
    """Compile the named kernel_parts of `solver` in this process (a load where numba's cache
    holds them), in the order given."""
    parts = kernel_parts(solver, n_features)
    for name in names:
        _compile_part(solver, name, parts[name][0])


def last_parts(solver: str) -> tuple[str, ...]:
    """The kernel_parts of `solver` that call others among them (its kernel module's
    COMPILED_LAST): compiled once the others are in the cache, so that their compilation loads
    those instead of compiling them again inside its type inference."""
    import importlib

    return getattr(importlib.import_module(KERNEL_MODULES[solver]), "COMPILED_LAST", ())


def compile_shared(solver: str, n_features: int, folder: str, reap: Callable[[], object] = lambda: None) -> list[str]:
    """Compile in this process the kernel_parts of `solver` that no other process sharing
    `folder` has taken, and return their names. Every process of a background compilation runs
    this (WarmUp's child and its helpers from their start, WarmUp's parent once its own work is
    done): each takes the part with the most compile seconds that nobody has taken yet (a file
    `NAME.taken` holding its pid, created exclusively in `folder`), compiles it and marks it done
    (`NAME.done`), until none is left, so the parts go to whichever process is free, the longest
    first (list scheduling). Then the last_parts the same way, each once every other part is
    done or was taken by a process that has ended (its kernel then compiles what that one did
    not). `reap` is called while waiting (the caller's exited children must be reaped to be seen
    as ended)."""
    parts = kernel_parts(solver, n_features)
    last = [name for name in last_parts(solver) if name in parts]
    first = sorted((name for name in parts if name not in last), key=lambda name: -parts[name][1])
    done: list[str] = []
    for name in first:
        if _take(folder, name):
            _compile_taken(solver, name, parts[name][0], folder, done)
    if last:
        while any(not Path(folder, f"{name}.done").exists() and _taker_alive(folder, name) for name in first):
            reap()
            time.sleep(0.02)
        for name in last:
            if _take(folder, name):
                _compile_taken(solver, name, parts[name][0], folder, done)
    return done


def _compile_taken(solver: str, name: str, signature: tuple, folder: str, done: list[str]) -> None:
    """Compile part `name`, which this process took, and mark it done (`NAME.done`), also when
    its compilation raises (the error then propagates): a process waiting for the parts to be
    done must not wait for this one, which may itself be waiting for that process (WarmUp's
    parent for its child, which compiles the last parts once the others are done: a deadlock).
    A part that failed is compiled later by the kernel that calls it, as one whose taker ended."""
    try:
        _compile_part(solver, name, signature)
        done.append(name)
    finally:
        Path(folder, f"{name}.done").touch()


def _take(folder: str, name: str) -> bool:
    """Whether this process took part `name` (created `NAME.taken` in `folder`, with its pid)."""
    try:
        fd = os.open(os.path.join(folder, f"{name}.taken"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    with os.fdopen(fd, "w") as f:
        f.write(str(os.getpid()))
    return True


def _taker_alive(folder: str, name: str) -> bool:
    """Whether the process that took part `name` may still finish it: it runs (a zombie, ended
    but not reaped, does not)."""
    try:
        pid = int(Path(folder, f"{name}.taken").read_text())
    except (OSError, ValueError):  # not taken, or its pid not written yet
        return Path(folder, f"{name}.taken").exists()
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return True


def _compile_part(solver: str, name: str, signature: tuple) -> None:
    import importlib

    getattr(importlib.import_module(KERNEL_MODULES[solver]), name).compile(signature)


class WarmUp:
    """`solver`'s kernels compiled in a background process while this one works: the child
    (`python -P -m streamfit.precompile SOLVER PARAMS WIDTH FOLDER`, _warm_up_train: this process's
    streamfit, not one in the working directory, such as the clone `pip install .` was run in,
    whose kernels numba caches apart) trains the
    solver on a tiny store with `params` in FOLDER (a temporary folder of this process's, removed
    by wait and stop, also when the child was killed) and evaluates it, so numba's cache gets the
    signatures the same settings ask for on a store of the same kind (multiclass) and width
    (`n_features`, e.g. the hashed width: a solver may take another path for a wide sparse store
    than for a narrow one). For a solver whose kernel module names kernel_parts (ppdsparse) the
    child compiles those instead (compile_shared, with helpers where there are cores to spare),
    and `wait` first compiles in this process the parts nobody has taken yet, this process's
    own work being done (on 2 cores the core its ingest used would otherwise idle while the
    child compiles). `wait` returns when the child is done; this process's train then loads
    what it compiled instead of compiling it again. Cache writes of both processes are serialized
    (serialize_cache_writes). A child that fails costs nothing but its time: the train
    compiles what is missing, as without it. The child and its helpers (_warm_up_train) form a
    process group of their own, which stop() kills."""

    def __init__(self, solver: str, params: dict, n_features: int | None = None) -> None:
        import json

        import streamfit

        serialize_cache_writes()
        self.solver = solver
        self.n_features = n_features or 0
        self.started = time.perf_counter()
        self.errors = tempfile.TemporaryFile()
        self.folder = tempfile.mkdtemp(prefix=f"streamfit-warm-up-{solver}-")
        package_root = str(Path(streamfit.__file__).resolve().parent.parent)  # this process's streamfit
        path = os.pathsep.join([package_root, *filter(None, [os.environ.get("PYTHONPATH")])])
        env = dict(os.environ, PYTHONPATH=path, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-P",  # not the working directory first on sys.path: a clone's streamfit/ is not this one
                "-m",
                "streamfit.precompile",
                solver,
                json.dumps(params, default=str),
                str(self.n_features),
                self.folder,
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self.errors,
            env=env,
            process_group=0,  # its own, with its helpers: stop() ends them all
        )

    def wait(self) -> None:
        """Compile the kernel parts nobody has taken yet (compile_shared), then block until the
        child is done; a failure is logged (DEBUG), not raised. Its seconds (wall, CPU), how long
        this process waited for it and the parts it compiled itself are logged (DEBUG)."""
        cpu, waited = _children_cpu(), time.perf_counter()  # before poll, which may reap the child
        if self.process.poll() is None:
            log.info("%s: waiting for the compilation of its kernels (started in the background)", self.solver)
        try:
            here = self._share()
            code = self.process.wait()
        except BaseException:  # e.g. Ctrl-C, which reaches this process group only
            self.stop()
            raise
        cpu, waited = _children_cpu() - cpu, time.perf_counter() - waited
        if code != 0:
            self.errors.seek(0)
            tail = self.errors.read()[-2000:].decode(errors="replace")
            log.debug("%s: the background compilation failed (exit code %s): %s", self.solver, code, tail)
        else:
            log.debug(
                "%s: kernels compiled in the background: %.1f s wall, %.1f CPU s; waited %.1f s for it, "
                "compiling %s here (this process: %.1f CPU s until then)",
                self.solver,
                time.perf_counter() - self.started,
                cpu,
                waited,
                ", ".join(here) or "none",
                time.process_time(),
            )
        self._close()

    def _share(self) -> list[str]:
        """compile_shared in this process where the solver has kernel parts (their names); a
        failure is logged (DEBUG): the train compiles what is missing."""
        try:
            if not kernel_parts(self.solver, self.n_features):
                return []
            return compile_shared(self.solver, self.n_features, self.folder, reap=self.process.poll)
        except Exception as e:
            log.debug("%s: compiling kernel parts here failed: %s", self.solver, e)
            return []

    def stop(self) -> None:
        """Kill the child and its helpers if they still run (this process failed or was stopped
        before its train)."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
        self._close()

    def _close(self) -> None:
        """Once the child has ended: its error output closed, its folder removed."""
        self.errors.close()
        shutil.rmtree(self.folder, ignore_errors=True)


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended and been waited for."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def warm_up_in_background(solver: str, params: dict, n_features: int | None = None) -> WarmUp | None:
    """A WarmUp of `solver` when its kernels are not in the cache (first_use) and this process
    may use two cores or more (on one core the child would only take turns with this process);
    else None."""
    if solver not in KERNEL_MODULES or default_jobs() < 2:
        return None
    try:
        if not first_use(solver):
            return None
        return WarmUp(solver, params, n_features)
    except Exception as e:  # an optimization only: the train compiles what it needs, as without it
        log.debug("%s: no background compilation: %s", solver, e)
        return None


def _warm_up_train(solver: str, params: dict, n_features: int, folder: str) -> None:
    """The child of WarmUp. For a solver with kernel_parts: compile_shared with helpers
    (`python -m streamfit.precompile --share SOLVER WIDTH FOLDER`, the same), as many processes
    in all as this one may use cores but one (WarmUp's parent ingests on it, then joins in: on 2
    cores no helper); its train then compiles nothing with its default settings (other settings
    may take kernels outside the parts, e.g. ppdsparse's sort_columns for x_threshold > 0, which
    then compile in the train). Otherwise _tiny_train: the solver trained on tiny data with
    `params` and evaluated, its files under `folder` (WarmUp's)."""
    serialize_cache_writes()
    if not kernel_parts(solver, n_features):
        _tiny_train(solver, params, n_features, folder)
        return
    helpers = [
        subprocess.Popen(
            [sys.executable, "-P", "-m", "streamfit.precompile", "--share", solver, str(n_features), folder],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
        )
        for _ in range(default_jobs() - 2)
    ]
    try:
        compile_shared(solver, n_features, folder, reap=lambda: [helper.poll() for helper in helpers])
        for helper in helpers:  # each finishes the part it took
            helper.wait()
    finally:
        for helper in helpers:
            if helper.poll() is None:
                helper.kill()
                helper.wait()


def _tiny_train(solver: str, params: dict, n_features: int, tmp: str) -> None:
    """_warm_up_train for a solver without kernel parts: the warm-up rows (_data) as a SciPy
    .npz ingested unhashed (a path that compiles no kernel); for `n_features` above their width,
    with about 14 % of their entries non-zero and their columns spread over n_features, as a
    hashed text store; `solver` trained on them in process with `params`, the model evaluated on
    them; the rows, store and run written under `tmp`."""
    import numpy as np
    import scipy.sparse as sp

    from streamfit.metrics import evaluate
    from streamfit.store import open_store
    from streamfit.train import train

    logging.disable(logging.WARNING)  # the small data's "not converged"
    warnings.simplefilter("ignore")
    X, y = _data()
    if n_features > _FEATURES:  # a wide store, as hashed text: sparse rows (the solvers' sparse paths)
        X[np.random.default_rng(1).random(X.shape) < 0.85] = 0.0
        X[np.arange(_ROWS), y] = 1.0
    X = sp.csr_matrix(X)
    if n_features > _FEATURES:
        X.indices *= n_features // _FEATURES
        X = sp.csr_matrix((X.data, X.indices, X.indptr), shape=(_ROWS, n_features))
    sp.save_npz(f"{tmp}/x.npz", X)
    np.save(f"{tmp}/y.npy", y)
    store, run = f"{tmp}/rows.zarr", f"{tmp}/run"
    _cli("ingest", f"{tmp}/x.npz", "--option", f"y_path={tmp}/y.npy", "--no-hash", "--out", store)
    model = train(store, solver, run, params, n_workers=0, progress=False)
    evaluate(model, open_store(store), progress=False)


if __name__ == "__main__":
    import json

    if sys.argv[1] == "--share":  # a helper of _warm_up_train
        serialize_cache_writes()
        compile_shared(sys.argv[2], int(sys.argv[3]), sys.argv[4])
    else:
        _warm_up_train(sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
