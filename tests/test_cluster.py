"""A real Dask cluster on loopback (`dask scheduler` + two `dask worker` processes): training
through `--scheduler` gives the model of the embedded default, even when a worker dies."""

import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from streamfit.cli import main
from streamfit.model import load_model

pytestmark = pytest.mark.slow  # a scheduler and workers in subprocesses: a minute or more a test


def _model_arrays(run_dir):
    return load_model(str(run_dir))._arrays()


PARAMS = ["-p", "generator=sequential", "-p", "block_size=2", "-p", "n_passes=2"]


def _scheduler_address(scheduler_file, scheduler) -> str:
    """The address the scheduler wrote to its --scheduler-file (it picks a free port itself:
    a port found free here and passed to it could be taken by another test's server first)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and scheduler.poll() is None:
        with contextlib.suppress(OSError, ValueError):
            return json.loads(scheduler_file.read_text())["address"]
        time.sleep(0.05)
    raise RuntimeError(f"the dask scheduler wrote no {scheduler_file} (exit status {scheduler.poll()})")


@contextlib.contextmanager
def _cluster(worker_cwd=None, worker_args=(), env=None, prefix=()):
    """A `dask scheduler` and two `dask worker` processes on loopback (the workers started in
    `worker_cwd`, with `worker_args` and `env`, their command after `prefix`); yields (address,
    worker processes) and tears everything down afterwards."""
    from distributed import Client

    folder = tempfile.TemporaryDirectory()
    scheduler_file = Path(folder.name) / "scheduler.json"
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "distributed.cli.dask_scheduler",
                "--host",
                "127.0.0.1",
                "--port",
                "0",
                "--scheduler-file",
                str(scheduler_file),
                "--no-dashboard",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    ]
    try:
        address = _scheduler_address(scheduler_file, procs[0])
        workers = [_worker(address, worker_cwd, worker_args, env, prefix) for _ in range(2)]
        procs += workers
        with Client(address, timeout="30s") as client:
            client.wait_for_workers(2, timeout=60)
        yield address, workers
    finally:
        _stop(procs)
        folder.cleanup()


def _worker(address, cwd=None, worker_args=(), env=None, prefix=()) -> subprocess.Popen:
    """A `dask worker` of the scheduler at `address` (its nanny and worker process in a process
    group of their own)."""
    return subprocess.Popen(
        [
            *prefix,
            sys.executable,
            "-m",
            "distributed.cli.dask_worker",
            address,
            "--nthreads",
            "1",
            "--no-dashboard",
            "--host",
            "127.0.0.1",
            *worker_args,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=cwd,
        env=env,
        start_new_session=True,
    )


def _after_four_steps(run: subprocess.Popen, run_dir, what: str) -> None:
    """Return once the train `run` has logged 4 steps in run_dir's metrics.jsonl (mid-run: the
    tests' runs take 64), before `what` is killed; fail if it ended first."""
    metrics, deadline = run_dir / "metrics.jsonl", time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline:
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 4:
            break
        time.sleep(0.02)
    assert run.poll() is None, f"the run ended before the test could kill the {what}"


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


@pytest.fixture
def cluster():
    """Yields (address, worker processes); tears everything down afterwards."""
    with _cluster() as started:
        yield started


def test_cluster_equals_embedded_and_survives_a_dead_worker(digits_cli_store, cli, tmp_path, cluster):
    store = digits_cli_store
    address, workers = cluster
    subprocess.run(
        cli("train", store, "--solver", "stagewise", *PARAMS, "--n-workers", "0", "--out", tmp_path / "local"),
        check=True,
        capture_output=True,
    )
    ref = _model_arrays(tmp_path / "local")
    subprocess.run(
        cli("train", store, "--solver", "stagewise", *PARAMS, "--scheduler", address, "--out", tmp_path / "cluster"),
        check=True,
        capture_output=True,
    )
    got = _model_arrays(tmp_path / "cluster")
    assert all(np.array_equal(ref[k], got[k]) for k in ref)
    # kill one worker while a run is in flight: Dask reschedules its (idempotent) chunk tasks
    run = subprocess.Popen(
        cli("train", store, "--solver", "stagewise", *PARAMS, "--scheduler", address, "--out", tmp_path / "killed"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    _after_four_steps(run, tmp_path / "killed", "worker")
    os.kill(workers[0].pid, signal.SIGKILL)
    _, err = run.communicate(timeout=300)
    assert run.returncode == 0, err
    got = _model_arrays(tmp_path / "killed")
    assert all(np.array_equal(ref[k], got[k]) for k in ref)


def _slowing(module: str, name: str, seconds: float) -> str:
    """The text of a worker's --preload file that makes each call of `module.name` take `seconds`
    more (a preload may run twice in one process: it wraps once)."""
    return f"""
import time

import {module} as target


def slowed(fn):
    def slow(*args, **kwargs):
        time.sleep({seconds})
        return fn(*args, **kwargs)

    slow.slowed = True
    return slow


if not getattr(target.{name}, "slowed", False):
    target.{name} = slowed(target.{name})
"""


# Every streamfit task 0.3 s longer: a test finds a pass's tasks running on the workers before it kills them.
SLOW_TASKS = _slowing("streamfit.on_worker", "call", 0.3)


@contextlib.contextmanager
def _slowed_train(cli, store, tmp_path):
    """stagewise trained on `store` in process (tmp_path/local), then started on a cluster whose
    two workers take 0.3 s more per task (tmp_path/run, a process whose stderr is a pipe); yields
    (address, workers, run) and kills the run if it is still running at the end."""
    train = ["train", store, "--solver", "stagewise", *PARAMS]
    subprocess.run(cli(*train, "--n-workers", "0", "--out", tmp_path / "local"), check=True, capture_output=True)
    (tmp_path / "slow.py").write_text(SLOW_TASKS)
    with _cluster(tmp_path, ["--preload", str(tmp_path / "slow.py")]) as (address, workers):
        run = subprocess.Popen(
            cli(*train, "--scheduler", address, "--out", tmp_path / "run"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            yield address, workers, run
        finally:
            if run.poll() is None:
                run.kill()


def _same_models(tmp_path) -> bool:
    """Whether _slowed_train's run on the cluster gave the in-process model, bitwise."""
    ref, got = _model_arrays(tmp_path / "local"), _model_arrays(tmp_path / "run")
    return ref.keys() == got.keys() and all(np.array_equal(ref[k], got[k]) for k in ref)


def test_a_run_goes_on_when_every_worker_left_and_others_joined(digits_cli_store, cli, tmp_path):
    """Every worker SIGKILLed (their process groups) while a pass's tasks run on them, then two
    new ones started: the tasks, placed on the workers that left, waited in Dask's "no-worker"
    state, which Dask does not leave for a worker that joins later, and the run hung. Now the
    pass runs again on the new workers, and the model is the uninterrupted run's."""
    from distributed import Client

    joined = []
    with _slowed_train(cli, digits_cli_store, tmp_path) as (address, workers, run):
        try:
            _after_four_steps(run, tmp_path / "run", "workers")
            with Client(address, timeout="30s") as client:
                deadline = time.monotonic() + 60
                while not any(client.processing().values()) and time.monotonic() < deadline:
                    time.sleep(0.01)  # until a pass's tasks run on the workers
                for w in workers:
                    os.killpg(w.pid, signal.SIGKILL)
                deadline = time.monotonic() + 60
                while client.nthreads() and time.monotonic() < deadline:
                    time.sleep(0.1)
                assert not client.nthreads(), "the scheduler kept the killed workers"
                time.sleep(3)  # the pass in flight waits without workers
                joined = [_worker(address) for _ in range(2)]
                client.wait_for_workers(2, timeout=60)
            _, err = run.communicate(timeout=180)
        finally:
            _stop(joined)
    assert run.returncode == 0, err
    assert "every worker the pass's tasks were placed on has left" in err, err
    assert _same_models(tmp_path)


def _without(folder, module: str) -> dict:
    """The environment of a worker whose Python lacks `module`: a package of that name that fails
    to import, in `folder`, put first on its path (a worker started in another working directory
    than `folder` finds that directory's packages first)."""
    (folder / module).mkdir(parents=True)
    (folder / module / "__init__.py").write_text(
        f"raise ModuleNotFoundError(\"No module named '{module}'\", name='{module}')\n"
    )
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)}


def test_a_worker_that_cannot_import_a_dependency_is_named_before_any_task(digits_cli_store, tmp_path):
    """Workers whose Python lacks numba: Dask dropped each at its first task, unable to unpickle
    it, and train ended after --worker-timeout saying the cluster had no workers. Now every
    command ends at once with one line naming the worker, the module and the fix; the workers
    stay. Workers without streamfit (or with an older one) cannot unpickle the check itself: the
    same line, with Dask's words for it."""
    from distributed import Client

    assert _run("train", digits_cli_store, "--out", tmp_path / "here", "--n-workers", "0").exit_code == 0
    train = ("train", digits_cli_store, "--out", tmp_path / "run", "--worker-timeout", "10")
    iris = os.path.join(os.path.dirname(__file__), "data", "sources", "iris.svm")
    cases = {
        "numba": (
            [train, ("evaluate", tmp_path / "here", digits_cli_store), ("ingest", iris, "--out", tmp_path / "x.zarr")],
            "cannot import numba (No module named 'numba'), which streamfit's tasks need; install streamfit",
        ),
        "streamfit": (
            [train],
            "cannot run streamfit's tasks (ModuleNotFoundError(\"No module named 'streamfit'\")); install",
        ),
    }
    for module, (commands, said) in cases.items():
        folder = tmp_path / f"without-{module}"  # also their working directory, first on their path
        with _cluster(folder, env=_without(folder, module)) as (address, _):
            for args in commands:
                result = _run(*args, "--scheduler", address)
                assert result.exit_code == 2, (args, result.output)
                line = result.output.strip()
                assert line.startswith("error: the Dask worker tcp://127.0.0.1:") and "\n" not in line, (args, line)
                assert said in line, line
            with Client(address, timeout="30s") as client:
                assert len(client.nthreads()) == 2
    assert not (tmp_path / "run").exists() and not (tmp_path / "x.zarr").exists()


def _other_version(marker) -> str:
    """The text of a worker's --preload file: streamfit in that worker process says it is version
    0.0.0+other, and each task streamfit runs there touches `marker`."""
    return f"""
import pathlib

import streamfit
import streamfit.on_worker as target

streamfit.__version__ = "0.0.0+other"
if not getattr(target.call, "marks", False):
    def call(*args, _call=target.call, **kwargs):
        pathlib.Path({str(marker)!r}).touch()
        return _call(*args, **kwargs)

    call.marks = True
    target.call = call
"""


def test_a_worker_that_joins_mid_run_with_another_version_is_closed_and_named(digits_cli_store, cli, tmp_path):
    """Workers that join a running train are checked before their first task as those there at
    the start are: one whose streamfit is another version (a --preload fakes it in that worker
    process only) and one whose Python lacks numba are each closed with their nanny (the `dask
    worker` process ends) and named in one warning; they ran no task, and the run goes on to the
    model of the run in process (before: they were not checked, and took the run's tasks). The
    check goes with the run: after it, the scheduler holds no streamfit plugin, and a plugin whose
    driver has gone (no client of its id connected) leaves a joiner of another version be."""
    from distributed import Client

    from streamfit import __version__, on_worker

    (tmp_path / "other.py").write_text(_other_version(tmp_path / "ran-a-task"))
    joiners = []
    with _slowed_train(cli, digits_cli_store, tmp_path) as (address, _, run):
        try:
            _after_four_steps(run, tmp_path / "run", "joiners")
            joiners = [
                _worker(address, tmp_path, ["--preload", str(tmp_path / "other.py")]),
                _worker(address, tmp_path / "no-numba", env=_without(tmp_path / "no-numba", "numba")),
            ]
            for joiner in joiners:
                joiner.wait(timeout=120)  # closed, with its nanny
            assert run.poll() is None, "the run ended before the joiners were checked"
            _, err = run.communicate(timeout=300)
            with Client(address, timeout="30s") as client:
                plugins = client.run_on_scheduler(lambda dask_scheduler: list(dask_scheduler.worker_plugins))
                assert not [name for name in plugins if name.startswith("streamfit")], plugins
                from streamfit.worker_check import joiner_check

                client.register_plugin(joiner_check(__version__, on_worker.task_modules(), "gone"), name="left")
                before = set(client.nthreads())
                joiners.append(_worker(address, tmp_path, ["--preload", str(tmp_path / "other.py")]))
                client.wait_for_workers(len(before) + 1, timeout=120)
                (other,) = set(client.nthreads()) - before
                assert client.submit(int, workers=[other], pure=False).result(timeout=60) == 0
                assert other in client.nthreads()
        finally:
            _stop(joiners)
    assert run.returncode == 0, err
    warnings = [line for line in err.splitlines() if "joined the cluster" in line]
    assert len(warnings) == 2 and "left the cluster" not in err, err
    for said in (f"runs streamfit 0.0.0+other, the driver {__version__}", "cannot import numba (No module named"):
        (line,) = [w for w in warnings if said in w]
        assert re.search(r"the Dask worker tcp://127\.0\.0\.1:\d+ joined the cluster and ", line), line
        assert f"the run goes on on the other workers: install streamfit {__version__}" in line, line
    assert not (tmp_path / "ran-a-task").exists()
    assert _same_models(tmp_path)


OTHER_SOLVERS = {  # stagewise is above; small runs that still use every engine call of the solver
    "bcd": ["-p", "mode=chunks", "-p", "group_size=16", "-p", "max_iter=2"],
    "fbpd": ["-p", "max_iter=25", "-p", "tol=0", "-p", "gap_tol=0"],
    "multiboost": ["-p", "max_iter=3"],
    "ppdsparse": ["-p", "group_size=3", "-p", "tol=1e-3"],
}


def test_every_solver_on_the_cluster_equals_in_process(digits_cli_store, tmp_path, cluster):
    """`streamfit train` run in this process (CliRunner: no Python start and imports per run; the
    workers are the cluster's own processes)."""
    address, _ = cluster
    for solver, params in OTHER_SOLVERS.items():
        for name, engine in (("local", ["--n-workers", "0"]), ("cluster", ["--scheduler", address])):
            args = ["train", digits_cli_store, "--solver", solver, *params, *engine, "--out", tmp_path / solver / name]
            result = CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)
            assert result.exit_code == 0, (solver, name, result.output)
        ref, got = _model_arrays(tmp_path / solver / "local"), _model_arrays(tmp_path / solver / "cluster")
        assert ref.keys() == got.keys(), solver
        assert all(np.array_equal(ref[k], got[k]) for k in ref), solver


# Loaded by each worker of `elsewhere` (dask worker --preload): the worker does not see the folder
# $HIDDEN_FOR_WORKERS, as a worker on another machine does not see this machine's disk.
HIDE = """
import os
_exists = os.path.__dict__.setdefault("real_exists", os.path.exists)  # Dask loads a preload file twice
_hidden = os.environ["HIDDEN_FOR_WORKERS"]
os.path.exists = lambda p: not os.path.abspath(os.fspath(p)).startswith(_hidden) and _exists(p)
"""


@pytest.fixture
def elsewhere(tmp_path):
    """A cluster whose workers run in a working directory of their own and do not see
    tmp_path/hidden; yields (address, the hidden folder)."""
    (tmp_path / "workers").mkdir()
    (tmp_path / "hidden").mkdir()
    (tmp_path / "hide.py").write_text(HIDE)
    env = {**os.environ, "HIDDEN_FOR_WORKERS": str(tmp_path / "hidden")}
    with _cluster(tmp_path / "workers", ["--preload", str(tmp_path / "hide.py")], env) as (address, _):
        yield address, tmp_path / "hidden"


def _jsonl_files(folder, n_files=3, rows=60):
    folder.mkdir(parents=True)
    rng = np.random.default_rng(0)
    words = {c: [f"{c}{i}" for i in range(8)] for c in ("a", "b", "c")}
    for f in range(n_files):
        with open(folder / f"part-{f}.jsonl", "w") as out:
            for _ in range(rows):
                c = str(rng.choice(list(words)))
                out.write(json.dumps({"text": " ".join(rng.choice(words[c], 6)), "label": c}) + "\n")


def _run(*args):
    return CliRunner().invoke(main, ["-q", *map(str, args)], catch_exceptions=False)


def test_relative_paths_reach_workers_in_another_working_directory(tmp_path, elsewhere, monkeypatch):
    """The README's promise for --scheduler (inputs and --out on a disk the workers share) holds
    for paths relative to the driver's working directory, which the workers do not share."""
    address, _ = elsewhere
    monkeypatch.chdir(tmp_path)
    _jsonl_files(tmp_path / "data")
    split = ["--test-size", "0.25", "--seed", "1"]
    assert _run("ingest", "data/*.jsonl", "--out", "local.zarr", "--test-out", "local-t.zarr", *split).exit_code == 0
    result = _run("ingest", "data/*.jsonl", "--out", "a.zarr", "--test-out", "t.zarr", *split, "--scheduler", address)
    assert result.exit_code == 0, result.output
    for name, ref in (("a.zarr", "local.zarr"), ("t.zarr", "local-t.zarr")):
        ours, theirs = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in (name, ref))
        assert [c["sha256"] for c in ours["chunks"]] == [c["sha256"] for c in theirs["chunks"]]
        assert ours["classes"] == theirs["classes"] and ours["n_rows"] == theirs["n_rows"]
    assert _run("train", "a.zarr", "--out", "run", "--scheduler", address).exit_code == 0
    result = _run("evaluate", "run", "t.zarr", "--scheduler", address)
    assert result.exit_code == 0 and "accuracy=" in result.output
    assert _run("predict", "run", "t.zarr", "--out", "p.csv", "--scheduler", address).exit_code == 0
    assert (
        len((tmp_path / "p.csv").read_text().splitlines())
        == 1 + json.loads((tmp_path / "t.zarr" / "manifest.json").read_text())["n_rows"]
    )


def test_paths_the_workers_do_not_see_are_named_before_any_task(tmp_path, elsewhere, monkeypatch):
    """Each command names the path, the worker and the fix; the workers stay in the cluster (a
    store they cannot open used to fail their unpickling and drop them)."""
    from distributed import Client

    address, hidden = elsewhere
    _jsonl_files(tmp_path / "data")
    _jsonl_files(hidden / "data")
    assert _run("ingest", tmp_path / "data" / "part-0.jsonl", "--out", tmp_path / "s.zarr").exit_code == 0
    assert _run("train", tmp_path / "s.zarr", "--out", tmp_path / "run", "--n-workers", "0").exit_code == 0
    assert _run("ingest", tmp_path / "data" / "part-0.jsonl", "--out", hidden / "s.zarr").exit_code == 0
    fix = "put it on a disk every worker shares, at the same path, or use a URL"
    cases = [
        (
            ("ingest", hidden / "data" / "*.jsonl", "--out", tmp_path / "x.zarr"),
            hidden / "data" / "part-0.jsonl",
            "input",
        ),
        (("train", hidden / "s.zarr", "--out", tmp_path / "run2"), hidden / "s.zarr", "store"),
        (("train", tmp_path / "s.zarr", "--out", hidden / "run2"), hidden / "run2", "run directory"),
        (("evaluate", tmp_path / "run", hidden / "s.zarr"), hidden / "s.zarr", "store"),
        (("predict", tmp_path / "run", hidden / "s.zarr", "--out", tmp_path / "p.csv"), hidden / "s.zarr", "store"),
    ]
    for args, path, what in cases:
        result = CliRunner().invoke(main, ["-q", *map(str, args), "--scheduler", address])
        assert result.exit_code == 2, (args, result.output)
        line = result.output.strip()
        assert line.startswith(f"error: {path}: the Dask worker tcp://127.0.0.1:"), line
        assert f"does not see this {what}: " in line and fix in line and "\n" not in line, line
    # standard input, spooled where the workers do not see it: its copy named as a file input is
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}
    args = ["ingest", "-", "--format", "jsonl", "--tmp-dir", hidden, "--out", tmp_path / "x.zarr"]
    done = subprocess.run(
        [sys.executable, "-m", "streamfit", "-q", *map(str, args), "--scheduler", address],
        input=(tmp_path / "data" / "part-0.jsonl").read_bytes(),
        capture_output=True,
        env=env,
        timeout=600,
    )
    line = done.stderr.decode().strip()
    assert done.returncode == 2 and line.startswith(f"error: {hidden}{os.sep}streamfit-stdin-"), line
    assert "does not see this copy of standard input (made in --tmp-dir, else TMPDIR): " in line and fix in line
    assert "\n" not in line and not [n for n in os.listdir(hidden) if n.startswith("streamfit-stdin-")]
    assert (
        not any((tmp_path / name).exists() for name in ("x.zarr", "run2", "p.csv")) and not (hidden / "run2").exists()
    )
    with Client(address, timeout="30s") as client:
        assert len(client.nthreads()) == 2


@pytest.fixture
def apart(tmp_path):
    """A cluster whose workers each see tmp_path/apart as an empty folder of their own (a tmpfs
    mounted there in a mount namespace of the worker's: another machine's disk at the same path),
    and the rest of tmp_path as it is; yields (address, the folder). Needs unshare(1) and user
    namespaces (Linux)."""
    folder = tmp_path / "apart"
    folder.mkdir()
    (tmp_path / "workers").mkdir()
    try:
        probe = subprocess.run(["unshare", "-Urm", "true"], capture_output=True).returncode
    except FileNotFoundError:
        probe = -1
    if probe != 0:
        pytest.skip("needs unshare -Urm (a user and mount namespace) to give the workers a disk of their own")
    prefix = ["unshare", "-Urm", "sh", "-c", 'mount -t tmpfs tmpfs "$0" && exec "$@"', str(folder)]
    with _cluster(tmp_path / "workers", prefix=prefix) as (address, _):
        yield address, folder


def _on_the_workers(address, fn, *args):
    """fn(*args) in each worker of the cluster at `address`: {worker: result}."""
    from distributed import Client

    with Client(address, timeout="30s") as client:
        return client.run(fn, *args)


def test_a_folder_of_the_same_name_on_the_workers_own_disk_is_refused_before_any_work(tmp_path, apart):
    """qa32: a local --out whose folder also exists on the workers, on their own disk, passed the
    check that they see the path, and ingest failed once its first chunk was written where this
    process could not see it; an input of the same name but another content on the workers was
    read without a word. Now a folder written is shown to be the same by a marker file this
    process writes and a worker reads, a path read by its size and first bytes (or a folder's
    names and sizes): one line naming the path, the worker and the fix, before any work, and
    nothing written. A copy of the input on the workers' disk is the same input."""
    address, folder = apart
    _jsonl_files(tmp_path / "data")
    one = tmp_path / "data" / "part-0.jsonl"
    assert _run("ingest", one, "--out", tmp_path / "s.zarr").exit_code == 0
    fix = "put it on a disk every worker shares, at the same path, or use a URL (s3://…)"
    other_folder = "(it sees another folder at this path: a file that this process wrote in it is not there)"
    split = ["--test-size", "0.25", "--test-out"]
    cases = [
        (("ingest", one, "--out", folder / "x.zarr"), folder, f"--out store's folder {other_folder}"),
        (("ingest", one, "--out", tmp_path / "y.zarr", *split, folder / "t.zarr"), folder, "--test-out store's"),
        (("train", tmp_path / "s.zarr", "--out", folder / "run"), folder / "run", "run directory: "),
    ]
    (folder / "data").mkdir()
    shutil.copy(one, folder / "data" / "part-0.jsonl")  # here; the workers see another file there
    _on_the_workers(address, shutil.copytree, str(tmp_path / "data"), str(folder / "data"))
    _on_the_workers(
        address, shutil.copy, str(tmp_path / "data" / "part-1.jsonl"), str(folder / "data" / "part-0.jsonl")
    )
    cases.append(
        (
            ("ingest", folder / "data" / "part-0.jsonl", "--out", tmp_path / "z.zarr"),
            folder / "data" / "part-0.jsonl",
            "input (it sees another file at this path: not the same size and first bytes): ",
        )
    )
    for args, path, what in cases:
        result = _run(*args, "--scheduler", address)
        assert result.exit_code == 2, (args, result.output)
        line = result.output.strip()
        assert line.startswith(f"error: {path}: the Dask worker tcp://127.0.0.1:"), line
        assert f"does not see this {what}" in line and fix in line and "\n" not in line, line
    # nothing written on either side (the markers removed), and no store beside the inputs
    assert sorted(os.listdir(folder)) == ["data"] and sorted(os.listdir(folder / "data")) == ["part-0.jsonl"]
    assert not any((tmp_path / name).exists() for name in ("y.zarr", "z.zarr"))
    seen = _on_the_workers(address, lambda f: sorted(os.listdir(f)), str(folder))
    assert list(seen.values()) == [["data"], ["data"]], seen
    # the same file on the workers' disk: read there, the store of the input read here
    _on_the_workers(address, shutil.copy, str(one), str(folder / "data" / "part-0.jsonl"))
    result = _run("ingest", folder / "data" / "part-0.jsonl", "--out", tmp_path / "w.zarr", "--scheduler", address)
    assert result.exit_code == 0, result.output
    ours, theirs = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("w.zarr", "s.zarr"))
    assert [c["sha256"] for c in ours["chunks"]] == [c["sha256"] for c in theirs["chunks"]]


# A piece takes a second: the test kills workers under the ingest.
SLOW_PIECES = _slowing("streamfit.ingest.distributed", "featurize_piece", 1.0)


@pytest.fixture
def slow_cluster(tmp_path):
    """A loopback cluster whose workers take a second over each ingest piece; yields (address, worker processes)."""
    (tmp_path / "slow.py").write_text(SLOW_PIECES)
    with _cluster(tmp_path, ["--preload", str(tmp_path / "slow.py")]) as started:
        yield started


def _ingest_killing(cli, tmp_path, address, workers, out, *args):
    """`streamfit ingest` of 12 JSONL files on the cluster, SIGKILLing `workers` as soon as one
    runs a piece; (exit status, stderr)."""
    from distributed import Client

    run = subprocess.Popen(
        cli("ingest", tmp_path / "data" / "*.jsonl", "--out", out, "--scheduler", address, *args),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    with Client(address, timeout="30s") as client:
        deadline = time.monotonic() + 120
        while not any("featurize_piece" in str(keys) for keys in client.processing().values()):
            assert run.poll() is None and time.monotonic() < deadline, "no piece ran on the cluster"
            time.sleep(0.05)
    for worker in workers:
        os.kill(worker.pid, signal.SIGKILL)
    _, err = run.communicate(timeout=300)
    return run.returncode, err


def test_ingest_goes_on_when_a_worker_dies_and_fails_clearly_when_none_is_left(cli, tmp_path, slow_cluster):
    """A worker lost under `ingest --scheduler`: a warning, its pieces run on the other, and the
    store is the in-process one (every row counted once). Every worker lost: after
    --worker-timeout seconds one line naming the scheduler and the fix, status 2, and no store
    (it waited for workers for ever)."""
    address, workers = slow_cluster
    _jsonl_files(tmp_path / "data", n_files=12, rows=40)
    assert _run("ingest", tmp_path / "data" / "*.jsonl", "--out", tmp_path / "local.zarr").exit_code == 0
    status, err = _ingest_killing(cli, tmp_path, address, workers[:1], tmp_path / "one.zarr")
    assert status == 0, err
    assert "left the cluster during a pass; its tasks run again on the 1 worker(s) left" in err
    ours, theirs = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("one.zarr", "local.zarr"))
    assert [c["sha256"] for c in ours["chunks"]] == [c["sha256"] for c in theirs["chunks"]]
    assert ours["n_rows"] == theirs["n_rows"] == 12 * 40

    status, err = _ingest_killing(cli, tmp_path, address, workers[1:], tmp_path / "none.zarr", "--worker-timeout", "3")
    assert status == 2, err
    assert err.strip().splitlines()[-1].startswith(f"error: the Dask scheduler at {address} has had no workers for ")
    assert not [p for p in os.listdir(tmp_path) if p.startswith("none.zarr")]


def test_a_lost_scheduler_ends_train_with_one_error_line_and_resume_elsewhere_gives_the_model(
    digits_cli_store, cli, tmp_path
):
    """The scheduler SIGKILLed mid-run (once the run has logged 4 steps): the driver does not
    hang or run the pass again against nothing; it exits 2 with one line naming the scheduler
    and the fix (no Dask log line, no traceback), and `--resume` on a new cluster ends with the
    model of an uninterrupted run."""
    from distributed import Client

    store = digits_cli_store
    train = ["train", store, "--solver", "stagewise", *PARAMS, "--out", tmp_path / "run"]
    subprocess.run(
        cli("train", store, "--solver", "stagewise", *PARAMS, "--n-workers", "0", "--out", tmp_path / "local"),
        check=True,
        capture_output=True,
    )
    with _cluster() as (address, _):
        with Client(address, timeout="30s") as client:
            scheduler_pid = client.run_on_scheduler(os.getpid)
        run = subprocess.Popen(
            cli(*train, "--scheduler", address), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        _after_four_steps(run, tmp_path / "run", "scheduler")
        os.kill(scheduler_pid, signal.SIGKILL)
        killed = time.monotonic()
        _, err = run.communicate(timeout=200)
    lines = [x for x in err.splitlines() if x.strip()]
    assert run.returncode == 2 and len(lines) == 1, err
    assert lines[0].startswith(f"error: lost the connection to the Dask scheduler at {address}"), lines[0]
    assert "--resume" in lines[0]
    assert time.monotonic() - killed < 150  # its reconnection attempt (20 s) and a pass's end, not a hang
    with _cluster() as (address, _):
        subprocess.run(cli(*train, "--scheduler", address, "--resume"), check=True, capture_output=True)
    ref, got = _model_arrays(tmp_path / "local"), _model_arrays(tmp_path / "run")
    assert ref.keys() == got.keys() and all(np.array_equal(ref[k], got[k]) for k in ref)


@pytest.fixture
def checking_s3(moto_process, monkeypatch, tmp_path, point_s3):
    """An S3 API server on 127.0.0.1 that checks every request's credentials and knows one key,
    the driver's (set in this process's AWS_* variables), with a bucket `w29`; yields the
    environment of workers whose key it does not know (the driver's credentials right, a
    worker's wrong: session 27's re-check)."""
    import boto3
    import requests

    with moto_process() as url:  # open while the key and the bucket are made, then checking
        made = {"endpoint_url": url, "region_name": "us-east-1", "aws_access_key_id": "x", "aws_secret_access_key": "x"}
        iam = boto3.client("iam", **made)
        iam.create_user(UserName="driver")
        policy = {"Version": "2012-10-17", "Statement": [{"Effect": "Allow", "Action": "*", "Resource": "*"}]}
        iam.put_user_policy(UserName="driver", PolicyName="all", PolicyDocument=json.dumps(policy))
        key = iam.create_access_key(UserName="driver")["AccessKey"]
        boto3.client("s3", **made).create_bucket(Bucket="w29")
        requests.post(f"{url}/moto-api/reset-auth", data=b"0", timeout=30).raise_for_status()
        with point_s3(url, key["AccessKeyId"], key["SecretAccessKey"]):
            monkeypatch.chdir(tmp_path)
            yield {**os.environ, "AWS_ACCESS_KEY_ID": "AKIDWORKER", "AWS_SECRET_ACCESS_KEY": "wrong"}


def test_a_worker_the_object_store_refuses_is_named_in_one_line_and_stays(checking_s3, cli):
    """Session 27: a worker whose key the object store refused failed to unpickle the task's
    store, Dask dropped it, and train ended after --worker-timeout with "no workers". Now the
    store opens in the task, and every command ends at once with one line naming the store (or
    the work), the worker and the refusal; the workers stay, nothing is written."""
    import s3fs
    from distributed import Client

    data = os.path.join(os.path.dirname(__file__), "data", "sources", "iris.svm")
    store, run = "s3://w29/iris.zarr", "s3://w29/run"
    assert _run("ingest", data, "--no-hash", "--out", store, "--chunk-rows", "50").exit_code == 0
    assert _run("train", store, "--out", run, "--n-workers", "0").exit_code == 0
    s3fs.S3FileSystem().put(data, "w29/raw/iris.svm")
    before = sorted(s3fs.S3FileSystem(skip_instance_cache=True).find("w29"))
    refused = "(InvalidAccessKeyId); the object store does not know this access key: check the credentials"
    opening = f"error: {store}: the Dask worker tcp://127.0.0.1:"
    with _cluster(env=checking_s3) as (address, _):
        cases = [
            (("train", store, "--out", "s3://w29/run2"), opening),
            (("evaluate", run, store), opening),
            (("predict", run, store, "--out", "s3://w29/p.csv"), opening),
            (("predict", run, "s3://w29/raw/iris.svm", "--out", "s3://w29/p.csv", "--parts"), "error: the Dask worker"),
            (("ingest", data, "--no-hash", "--out", "s3://w29/x.zarr"), "error: the Dask worker"),
            (("ingest", "s3://w29/raw/iris.svm", "--no-hash", "--out", "s3://w29/y.zarr"), "error: the Dask worker"),
        ]
        for args, start in cases:
            result = _run(*args, "--scheduler", address)
            assert result.exit_code == 2, (args, result.output)
            line = result.output.strip()
            assert line.startswith(start) and "\n" not in line and "no workers" not in line, (args, line)
            assert refused in line or "Forbidden; the object store refused the request" in line, (args, line)
        with Client(address, timeout="30s") as client:
            assert len(client.nthreads()) == 2
    assert sorted(s3fs.S3FileSystem(skip_instance_cache=True).find("w29")) == before


# A driver holding an Engine on the scheduler at argv[1]; argv[2]: its streamfit version ("" for
# its own), set in this process only, as the joiner test's preload does for a worker
DRIVER = """
import logging, sys, time
import streamfit
streamfit.__version__ = sys.argv[2] or streamfit.__version__
logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(message)s")
from streamfit.engine import Engine
from streamfit.errors import StreamfitError
try:
    with Engine(sys.argv[1]):
        print("started", flush=True)
        time.sleep(600)
except StreamfitError as e:
    print("error:", e, file=sys.stderr)
"""


def test_a_driver_that_starts_beside_another_versions_driver_says_so_in_one_warning():
    """Two drivers of different streamfit versions cannot share a scheduler's workers (Dask gives
    any client's tasks to any worker; streamfit.worker_check): the second to start names the
    first's version and client and the fix in one warning, before its start check's error about
    the other version's workers; a driver of the same version, and one killed, give none."""
    import streamfit

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")])}

    def driver(address, version):
        return subprocess.Popen(
            [sys.executable, "-c", DRIVER, address, version],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
            text=True,
        )

    def warnings_of(address, version) -> list[str]:
        proc = driver(address, version)
        if proc.stdout.readline() == "started\n":
            proc.kill()
        _, err = proc.communicate(timeout=300)
        return [line for line in err.splitlines() if "also serves a streamfit" in line], err

    with _cluster() as (address, _):
        first = driver(address, "")
        try:
            assert first.stdout.readline() == "started\n", first.stderr.read()
            found, err = warnings_of(address, "0.0.0+other")
            assert len(found) == 1, err
            assert found[0].startswith(
                f"WARNING the Dask scheduler at {address} also serves a streamfit {streamfit.__version__} driver "
                "(its client Client-"
            ) and found[0].endswith(
                "this process runs 0.0.0+other: Dask gives any client's tasks to any worker, "
                "so each closes the workers of the other's version that join, and neither runs beside the other's "
                "workers; give each version a scheduler of its own"
            ), found[0]
            assert f"runs streamfit {streamfit.__version__}, this process 0.0.0+other" in err  # then its start check
            assert warnings_of(address, "")[0] == []  # the same version
        finally:
            first.kill()
            first.wait(timeout=60)
        time.sleep(2)  # the scheduler drops the killed driver's client (its plugin stays)
        assert warnings_of(address, "0.0.0+other")[0] == []
