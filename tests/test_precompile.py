"""`streamfit compile` and the first-use line: after the command a fresh process compiles
nothing; a fit that compiles says so once; the kernels unified to one signature stay so. A
pipeline compiles its solver in the background while it ingests (WarmUp), first_use reads the
cache, concurrent cache writers keep every entry, and no kernel builds numba's cfunc wrapper."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numba
import numpy as np
import pytest
from numba_compilations import COUNTING

from streamfit.precompile import CACHE_LOCK_FILE, WarmUp, announce_compilation, serialize_cache_writes

# a fresh process: an estimator fit and a CLI train on other data than the warm-up's, counting
# the compilations of streamfit's kernels (numba's "numba:compile" event fires for a compilation,
# not for a load from the cache)
_FRESH_FIT = (
    COUNTING
    + """
import sys, numpy as np
from sklearn.datasets import load_iris
import streamfit
from streamfit.cli import main
X, y = load_iris(return_X_y=True)
streamfit.FBPDClassifier(max_iter=3).fit(X, y).predict(X)
with open(sys.argv[1] + "/iris.svm", "w") as f:
    for row, label in zip(X, y):
        f.write(f"{label} " + " ".join(f"{j + 1}:{v}" for j, v in enumerate(row)) + "\\n")
for args in (["ingest", sys.argv[1] + "/iris.svm", "--no-hash", "--out", sys.argv[1] + "/iris.zarr"],
             ["train", sys.argv[1] + "/iris.zarr", "--solver", "fbpd", "-p", "max_iter=3", "--out", sys.argv[1] + "/run"]):
    try:
        main(args, standalone_mode=False)
    except SystemExit as e:
        assert not e.code
print("compiled:", sorted(set(compiled)))
"""
)


# a fresh process with an empty cache: every kernel is compiled here, so each dispatcher lists
# every signature its callers asked for (a caller loaded from the cache would ask for none)
_SIGNATURES = """
import json, numpy as np
from streamfit.ingest import hashing_kernels
from streamfit.ingest.hashing import FeatureHasher, HashingConfig
from streamfit.ingest.sources import libsvm
FeatureHasher(HashingConfig(n_features=2**10, ngram_range=(1, 2))).transform_text(["a b c d", "e f g h i j"])
buf = np.frombuffer(b"1 3:1 2:2\\n0 1:1\\n", dtype=np.uint8)
libsvm._parse(buf, 0, buf.size, 10, False, 0)  # its first row is out of order: _sort_row
kernels = {
    "hash_ngrams": hashing_kernels.hash_ngrams,
    "radix_sort": hashing_kernels.radix_sort,
    "grow": hashing_kernels.grow,
    "murmur3_32": hashing_kernels.murmur3_32,
    "_sort_row": libsvm._sort_row,
}
print(json.dumps({name: [str(s) for s in d.signatures] for name, d in kernels.items()}))
"""


@pytest.mark.slow
def test_compile_then_a_fresh_fit_compiles_nothing(tmp_path):
    """One fresh cache for three processes (they share the ingest kernels' compilation): the
    signatures of the kernels unified to one, `streamfit compile --solver fbpd`, then a fit and a
    CLI ingest + train on other data, which compile nothing."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    _check_one_signature_per_argument_types(env)
    done = subprocess.run(
        [sys.executable, "-m", "streamfit.cli", "compile", "--solver", "fbpd", "--jobs", "2"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "compiled fbpd in" in done.stdout and "compiled ingest in" in done.stdout
    fit = subprocess.run(
        [sys.executable, "-c", _FRESH_FIT, str(tmp_path)], env=env, capture_output=True, text=True, check=False
    )
    assert fit.returncode == 0, fit.stderr
    assert "compiled: []" in fit.stdout, fit.stdout
    assert "first use after installation" not in fit.stderr


@pytest.mark.slow
def test_ctrl_c_stops_compile_with_one_line_and_no_folder_left(tmp_path, terminal_job):
    """Ctrl-C (SIGINT to the process group) while `streamfit compile` runs its pool: status 130
    and one line (the pool's processes ignore SIGINT and are ended by the parent; each ran
    streamfit commands that printed their own `stopped:` line about a store), and none of the
    warm-up jobs' folders is left in the temporary folder."""
    import signal

    work = tmp_path / "tmp"
    work.mkdir()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"), TMPDIR=str(work))
    argv = [sys.executable, "-m", "streamfit.cli", "compile", "--solver", "bcd", "--jobs", "2"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **terminal_job)
    try:
        deadline = time.monotonic() + 120
        while not list(work.glob("**/streamfit-compile-bcd-*")):  # the pool's jobs under way
            assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read() if proc.poll() else ""
            time.sleep(0.05)
        time.sleep(1)
        os.killpg(proc.pid, signal.SIGINT)
        out, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == 130, err
    assert err == (
        "stopped: interrupted (Ctrl-C); the kernels compiled so far stay in numba's cache; run it again for the others\n"
    )
    assert list(work.iterdir()) == []


def test_a_compiling_fit_says_so_once(caplog):
    def add_one(x):
        return x + 1

    add_one.__module__ = "streamfit.example"  # the line is about streamfit's kernels only
    kernel = numba.njit(add_one)  # not cached: compiles in this process
    caplog.set_level(logging.INFO, logger="streamfit.train")
    with announce_compilation("bcd"):
        kernel(1)
        kernel(2.0)  # a second compilation: no second line
    lines = [r.getMessage() for r in caplog.records if "first use after installation" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("bcd: compiling") and "`streamfit compile --solver bcd`" in lines[0]
    caplog.clear()
    with announce_compilation("bcd"):
        kernel(3)  # compiled already: nothing to say
    kernel(np.float32(1.0))  # outside the block: nothing either
    assert not caplog.records


def _check_one_signature_per_argument_types(env: dict) -> None:
    """A counter that starts at 0 is typed Literal[int](0) until numba sees the loop's increments,
    and its callee was compiled for that type too (a whole second compilation): each of these
    was compiled two to four times on a first use. (ppdsparse's _search and _cholesky_solve had
    the same fix; compiling solve_class here would cost 20 CPU seconds.)"""
    done = subprocess.run([sys.executable, "-c", _SIGNATURES], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    signatures = json.loads(done.stdout.strip().splitlines()[-1])
    expected = {
        "hash_ngrams": 1,
        "radix_sort": 1,
        "grow": 2,  # int32 indices, float32 values
        "murmur3_32": 2,  # the read-only text and the writable n-gram scratch
        "_sort_row": 1,
    }
    assert {name: len(s) for name, s in signatures.items()} == expected, signatures
    assert not [s for sigs in signatures.values() for s in sigs if "Literal" in s]


# a fresh process: a pipeline (text ingest, a train, evaluate) that finds the solver's (argv[2])
# kernels missing from the cache; the names of what this process compiled, by phase
_PIPELINE = (
    COUNTING
    + """
import logging, sys
from streamfit.config import load_pipeline
from streamfit.jobs import run_pipeline
import streamfit.precompile
from streamfit.precompile import first_use
import streamfit.train
streamfit.precompile.default_jobs = lambda: 2  # the background process also where this process may use one core
train_fn = streamfit.train.train
marks = {}
def train(*args, **kwargs):
    marks["train"] = len(compiled)
    return train_fn(*args, **kwargs)
streamfit.train.train = train
logging.basicConfig(level=logging.DEBUG, format="%(message)s")
solver = sys.argv[2]
print("first use before:", first_use(solver))
run_pipeline(load_pipeline(sys.argv[1]), overwrite=True, progress=False, steps_progress=False)
print("compiled before the train:", sorted(set(compiled[: marks["train"]])))
print("compiled from the train on:", sorted(set(compiled[marks["train"] :])))
print("first use after:", first_use(solver))
"""
)


def _pipelines(tmp_path, solver: str, ingest: str, params: str, runs: int) -> list[subprocess.CompletedProcess]:
    """_PIPELINE run `runs` times, one after another, in one fresh cache: a text TSV ingested
    (`ingest`: more of its section's keys, YAML), `solver` trained on it with `params` (YAML)
    and evaluated."""
    docs = tmp_path / "docs.tsv"
    docs.write_text("".join(f"c{i % 3}\tw{i % 7} w{(i * 5) % 11} w{i % 3} shared words\n" for i in range(90)))
    path = tmp_path / "p.yaml"
    path.write_text(
        f"ingest: {{inputs: [{docs}], out: {tmp_path / 'train.zarr'}{ingest}, "
        "source_options: {header: false, label_field: '0', text_field: '1'}}\n"
        f"train: {{solver: {solver}, out: {tmp_path / 'run'}, params: {params}}}\n"
        f"evaluate: {{store: {tmp_path / 'train.zarr'}}}\n"
    )
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    done = []
    for _ in range(runs):
        run = subprocess.run(
            [sys.executable, "-c", _PIPELINE, str(path), solver], env=env, capture_output=True, text=True
        )
        assert run.returncode == 0, run.stderr
        done.append(run)
    return done


@pytest.mark.slow
def test_a_pipeline_compiles_its_solver_in_the_background_while_it_ingests(tmp_path):
    """In an empty cache the pipeline's process compiles only the ingest's kernels (the text
    hashing); stagewise's kernels, compiled by the background process, are loaded by its train
    and evaluate (numba's event fires for a compilation, not for a load); a second run finds
    them cached and starts no background process."""
    first, second = _pipelines(tmp_path, "stagewise", "", "{n_passes: 1}", 2)
    assert "first use before: True" in first.stdout and "first use after: False" in first.stdout
    assert "compiled from the train on: []" in first.stdout, first.stdout
    before = first.stdout.split("compiled before the train: ")[1].splitlines()[0]
    assert "hash_text" in before and "stagewise" not in before and "_rowwise_matmul" not in before
    assert "first use before: False" in second.stdout
    assert "compiled before the train: []" in second.stdout and "compiled from the train on: []" in second.stdout
    assert "waiting for the compilation" not in second.stderr


@pytest.mark.slow
def test_a_pipeline_shares_its_solvers_kernel_parts_with_the_background_process(tmp_path):
    """ppdsparse (kernel parts): the background process compiles the parts, the pipeline's
    process, once its ingest is done, those nobody had taken yet (WarmUp.wait's DEBUG line names
    them, and they are the parts among its compilations), and its train and evaluate compile
    nothing: _algorithm1 and topk_rows are parts too. primal_ratio 0: the 90 rows use about 20 of
    the 4096 columns, where a class may take the Newton finish at the default primal_ratio (2),
    which the warm-up of a store 2048 columns wide or more leaves to the train (compile_parts)."""
    (run,) = _pipelines(tmp_path, "ppdsparse", ", hashing: {n_features: 4096}", "{primal_ratio: 0}", 1)
    assert "first use before: True" in run.stdout and "first use after: False" in run.stdout
    assert "compiled from the train on: []" in run.stdout, run.stdout
    here = run.stderr.split("compiling ")[1].split(" here")[0]  # wait's DEBUG line: the parts it took, or none
    before = run.stdout.split("compiled before the train: ")[1].splitlines()[0]
    parts = ("_search", "_inner_cd", "_class_result", "class_objective", "row_sqnorms", "topk_rows", "_algorithm1")
    for part in parts:
        assert (part in here.split(", ")) == (f"'{part}'" in before), (part, here, before)
    assert "_primal_newton" not in before  # 4096 columns: no primal finish


def test_first_use_is_true_until_a_kernel_of_the_solver_is_cached(tmp_path):
    script = """
from streamfit.precompile import first_use
from streamfit.solvers import ppdsparse_kernels
import numpy as np
print(first_use("ppdsparse"), first_use("bcd"))
ppdsparse_kernels.row_sqnorms(np.array([0, 2]), np.array([3.0, 4.0]))
print(first_use("ppdsparse"), first_use("bcd"))
"""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    runs = [subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True) for _ in range(2)]
    assert [r.returncode for r in runs] == [0, 0], runs[0].stderr + runs[1].stderr
    assert runs[0].stdout.split() == ["True", "True", "False", "True"]
    assert runs[1].stdout.split() == ["False", "True", "False", "True"]


def _save_entries(args) -> None:
    """One writer of test_concurrent_cache_writers_keep_every_entry: `n` entries of its own."""
    cache_path, writer, n = args
    from numba.core import caching

    serialize_cache_writes()
    index = caching.IndexDataCacheFile(cache_path, "shared", "stamp")
    for i in range(n):
        index.save((f"signature {writer}.{i}", "cpu"), f"code of {writer}.{i}")


def test_concurrent_cache_writers_keep_every_entry(tmp_path):
    """Processes writing entries of one function's cache at once (as a pipeline's process and its
    background compilation do): with serialize_cache_writes every entry is in the index, each
    under a file of its own that holds its own data. (Without the lock, numba's read-modify-write
    of the index loses entries or points two of them at one file.)"""
    import multiprocessing

    from numba.core import caching

    writers, n = 4, 25
    with multiprocessing.get_context("spawn").Pool(writers) as pool:
        pool.map(_save_entries, [(str(tmp_path), w, n) for w in range(writers)])
    index = caching.IndexDataCacheFile(str(tmp_path), "shared", "stamp")
    entries = index._load_index()
    assert len(entries) == writers * n and len(set(entries.values())) == writers * n
    for w in range(writers):
        for i in range(n):
            assert index.load((f"signature {w}.{i}", "cpu")) == f"code of {w}.{i}"
    assert (tmp_path / CACHE_LOCK_FILE).exists()


def test_no_kernel_builds_a_cfunc_wrapper():
    """Every kernel of streamfit is compiled with no_cfunc_wrapper (streamfit._jit.kernel): numba's C-callable wrapper
    (for passing a jitted function as a first-class function value, which no kernel does) costs
    LLVM time in every kernel's first compilation and is never called."""
    import importlib
    import pkgutil

    from numba.core.registry import CPUDispatcher

    import streamfit

    kernels = []
    for info in pkgutil.walk_packages(streamfit.__path__, "streamfit."):
        # streamfit.worker_signals: its import sets SIGINT aside, for the forkserver that imports it
        if info.name in ("streamfit.numba_target", "streamfit.cli", "streamfit.__main__", "streamfit.worker_signals"):
            continue
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if isinstance(obj, CPUDispatcher) and obj.py_func.__module__ == info.name:
                kernels.append((f"{info.name}.{name}", obj.targetoptions.get("no_cfunc_wrapper", False)))
    assert len(kernels) > 60
    assert [name for name, off in kernels if not off] == []


def _fake_parts(monkeypatch, log: list, seconds: dict[str, float], last: tuple[str, ...]):
    """compile_shared's solver replaced by parts whose compilation sleeps a tenth of their
    seconds and is logged as (name, thread, start, end)."""
    import threading

    from streamfit import precompile

    monkeypatch.setattr(precompile, "kernel_parts", lambda solver, n: {k: ((), v) for k, v in seconds.items()})
    monkeypatch.setattr(precompile, "last_parts", lambda solver: last)

    def compile_part(solver, name, signature):
        start = time.monotonic()
        time.sleep(seconds[name] / 10)
        log.append((name, threading.get_ident(), start, time.monotonic()))

    monkeypatch.setattr(precompile, "_compile_part", compile_part)


def test_compile_shared_gives_each_part_to_one_process_the_longest_first_the_last_after_the_others(
    tmp_path, monkeypatch
):
    """Three compilers sharing a folder (threads here; processes in WarmUp: the taking is a file
    created exclusively): every part compiled once, each compiler taking the longest part left,
    and the part that calls the others started only once every other one is done."""
    import threading

    from streamfit.precompile import compile_shared

    log: list = []
    seconds = {"a": 5.0, "b": 4.0, "c": 2.0, "d": 1.5, "e": 0.5, "top": 1.0}
    _fake_parts(monkeypatch, log, seconds, ("top",))
    results: list[list[str]] = []
    threads = [threading.Thread(target=lambda: results.append(compile_shared("x", 0, str(tmp_path)))) for _ in range(3)]
    for thread in threads:
        thread.start()
        time.sleep(0.02)  # started in turn: the first takes a, the second b, the third c
    for thread in threads:
        thread.join()
    assert sorted(name for name, *_ in log) == sorted(seconds)
    assert sorted(name for names in results for name in names) == sorted(seconds)
    by_name = {name: (thread, start, end) for name, thread, start, end in log}
    assert len({by_name[name][0] for name in "abc"}) == 3  # the three longest went to three compilers
    assert by_name["top"][1] >= max(end for name, _, _, end in log if name != "top")
    assert all((tmp_path / f"{name}.done").exists() for name in seconds)


def test_compile_shared_does_not_wait_for_a_part_whose_taker_has_ended(tmp_path, monkeypatch):
    """A part taken by a process that ended before compiling it (killed, crashed) does not hold
    up the last part: that one compiles what is missing itself."""
    from streamfit.precompile import compile_shared

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "a.taken").write_text(ended.stdout.strip())
    log: list = []
    _fake_parts(monkeypatch, log, {"a": 5.0, "b": 1.0, "top": 1.0}, ("top",))
    assert compile_shared("x", 0, str(tmp_path)) == ["b", "top"]
    assert not (tmp_path / "a.done").exists()


def test_compile_shared_marks_a_part_done_when_its_compilation_fails(tmp_path, monkeypatch):
    """A part whose compilation raises is marked done all the same and the error propagates:
    a peer waiting to compile the last part goes on instead of waiting for the failed one's
    taker, which is alive (WarmUp's parent, whose kernel timer once hid `.compile`, then waited
    for its child, which waited for the part: a deadlock)."""
    import threading

    from streamfit import precompile
    from streamfit.precompile import compile_shared

    log: list = []
    _fake_parts(monkeypatch, log, {"a": 5.0, "b": 1.0, "top": 1.0}, ("top",))
    compile_part = precompile._compile_part

    def failing(solver, name, signature):
        if name == "a":
            raise AttributeError("'function' object has no attribute 'compile'")
        compile_part(solver, name, signature)

    monkeypatch.setattr(precompile, "_compile_part", failing)
    errors: list[BaseException] = []
    results: list[list[str]] = []

    def first() -> None:
        try:
            compile_shared("x", 0, str(tmp_path))
        except AttributeError as e:
            errors.append(e)

    taker = threading.Thread(target=first, daemon=True)
    taker.start()  # takes a, the longest, and fails
    time.sleep(0.05)
    peer = threading.Thread(target=lambda: results.append(compile_shared("x", 0, str(tmp_path))), daemon=True)
    peer.start()  # takes b, then waits for a before top
    taker.join(10)
    peer.join(10)
    assert not peer.is_alive() and not taker.is_alive()
    assert len(errors) == 1 and results == [["b", "top"]]
    assert (tmp_path / "a.done").exists() and not [name for name, *_ in log if name == "a"]


def test_ppdsparse_compiles_its_newton_finish_only_for_narrow_stores():
    from streamfit.precompile import kernel_parts
    from streamfit.solvers.ppdsparse_kernels import PRIMAL_MAX_FEATURES

    assert "_primal_newton" in kernel_parts("ppdsparse", 0)  # the width not known
    assert "_primal_newton" in kernel_parts("ppdsparse", PRIMAL_MAX_FEATURES - 1)
    wide = kernel_parts("ppdsparse", PRIMAL_MAX_FEATURES)
    assert "_primal_newton" not in wide and "_search" in wide
    assert kernel_parts("stagewise", 0) == {}  # a solver without parts


# a fresh process: ppdsparse's fit (its primal finish forced on every class) in the cache where
# another process compiled its kernel_parts; the ppdsparse and sorting kernels compiled here
_FIT_AFTER_PARTS = (
    COUNTING
    + """
import numpy as np
from numba.core.registry import CPUDispatcher
from sklearn.datasets import load_digits
import streamfit
from streamfit import sorting
from streamfit.solvers import ppdsparse_kernels
X, y = load_digits(return_X_y=True)
streamfit.PPDSparseClassifier(lam=2e-3, tau=1e-3, primal_ratio=1e-9, max_inner=1).fit(X[:400] / 16, y[:400])
ours = {name for module in (ppdsparse_kernels, sorting) for name, d in vars(module).items() if isinstance(d, CPUDispatcher)}
print("compiled:", sorted(ours & set(compiled)))
"""
)


@pytest.mark.slow
def test_a_fit_loads_the_kernel_parts_compiled_apart(tmp_path):
    """ppdsparse's kernel_parts, compiled by one process for the argument types compile_parts
    gives, are the ones a fit calls: a later fit compiles only the kernel that calls them
    (_algorithm1, with its two small callees that are no parts), whose compilation loads them
    from the cache, the primal finish included; none of the parts' callees either."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    parts = "from streamfit.precompile import compile_kernels, kernel_parts\n"
    parts += "compile_kernels('ppdsparse', list(kernel_parts('ppdsparse', 0)), 0)"
    done = subprocess.run([sys.executable, "-c", parts], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    fit = subprocess.run([sys.executable, "-c", _FIT_AFTER_PARTS], env=env, capture_output=True, text=True)
    assert fit.returncode == 0, fit.stderr
    assert "compiled: []" in fit.stdout, fit.stdout


def test_a_stopped_warm_up_leaves_no_folder_behind(tmp_path, monkeypatch):
    """The background compilation's rows, store and run live in a folder of the parent's: killed
    mid-way by stop() (the pipeline failed or was stopped before its train), the child cannot
    clean up after itself, so the parent removes the folder, with what the child had written."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    warm_up = WarmUp("stagewise", {"n_passes": 1}, 64)
    folder = Path(warm_up.folder)
    assert folder.parent == tmp_path and folder.name.startswith("streamfit-warm-up-stagewise-")
    deadline = time.monotonic() + 120
    while not any(folder.iterdir()) and warm_up.process.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert any(folder.iterdir()), "the child wrote nothing in its folder"
    warm_up.stop()
    assert warm_up.process.returncode is not None
    assert not folder.exists()


def test_the_warm_up_compiles_this_processs_streamfit_not_one_in_the_working_directory(tmp_path, monkeypatch):
    """`pip install . && streamfit run ...` runs in the clone, whose streamfit/ `python -m` would
    import first: the child compiled the clone's kernels (cached apart from the installed ones), and
    the train compiled its own again. A decoy streamfit in the working directory must not run."""
    decoy = tmp_path / "streamfit"
    decoy.mkdir()
    marker = tmp_path / "decoy-ran"
    (decoy / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (decoy / "precompile.py").write_text("")
    monkeypatch.chdir(tmp_path)
    warm_up = WarmUp("no-such-solver", {}, 64)  # the real child stops at once: no kernels of that name
    warm_up.wait()
    assert warm_up.process.returncode not in (0, None)  # the real child ran (the decoy's exits 0)
    assert not marker.exists()
