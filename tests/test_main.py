import os
import resource
import signal
import subprocess
import sys

import pytest


def test_python_dash_m_streamfit_is_the_streamfit_command(tmp_path):
    """`python -m streamfit` (streamfit/__main__.py) runs the command line under its own name,
    with its exit status, from a folder other than the repository."""
    run = [sys.executable, "-m", "streamfit"]
    done = subprocess.run([*run, "train", "--help"], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and done.stdout.startswith("Usage: streamfit train [OPTIONS] STORE")
    done = subprocess.run(
        [*run, "ingest", "missing.csv", "--out", "s.zarr"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 2 and done.stderr.strip() == "error: missing.csv: no such file"


@pytest.mark.parametrize(
    "signum, status, line",
    [
        (signal.SIGINT, 130, "stopped: interrupted (Ctrl-C) while starting; nothing was done: run it again"),
        (signal.SIGTERM, 143, "stopped: terminated by SIGTERM while starting; nothing was done: run it again"),
        (
            signal.SIGHUP,
            129,
            "stopped: hung up by SIGHUP (its terminal closed; start it with nohup, or from a batch system, to keep "
            "it running) while starting; nothing was done: run it again",
        ),
    ],
)
def test_a_signal_while_the_command_line_is_imported_is_one_line_and_its_exit_status(tmp_path, signum, status, line):
    """A real Ctrl-C (SIGINT) or SIGTERM delivered while `streamfit.cli` is being imported (sent
    by an import hook at that moment, in a child process): the console script's entry point
    prints one `stopped:` line and exits 130 or 143, as the signal later in a command does;
    without it Python printed a traceback (SIGINT) or the process died by the signal with no
    word (SIGTERM). A control run without the signal gets the command's help."""
    child = (
        "import os, sys\n"
        "class Hook:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'streamfit.cli' and os.environ.get('SEND_SIGNAL'):\n"
        "            os.kill(os.getpid(), int(os.environ['SEND_SIGNAL']))\n"
        "        return None\n"
        "sys.meta_path.insert(0, Hook())\n"
        "sys.argv = ['streamfit', 'train', '--help']\n"
        "from streamfit.__main__ import run\n"
        "run()\n"
    )
    control = subprocess.run([sys.executable, "-c", child], capture_output=True, text=True, cwd=tmp_path)
    assert control.returncode == 0 and control.stdout.startswith("Usage: streamfit train [OPTIONS] STORE")
    env = {**os.environ, "SEND_SIGNAL": str(int(signum))}
    at_default = lambda: signal.signal(signum, signal.SIG_DFL)  # noqa: E731 (as a shell starts it, whatever pytest inherited)
    done = subprocess.run(
        [sys.executable, "-c", child], capture_output=True, text=True, cwd=tmp_path, env=env, preexec_fn=at_default
    )
    assert done.returncode == status, done.stderr
    assert done.stderr == line + "\n" and done.stdout == ""


@pytest.mark.parametrize("mib", [60, 130, 160])
def test_a_memory_limit_below_the_start_up_floor_is_one_line_naming_it(digits_cli_store, tmp_path, mib):
    """Under `ulimit -v` (RLIMIT_AS) of 60, 130 or 160 MiB, below what the libraries need, a native
    library fails to load while the command line is imported (60, 130) or while train runs (160):
    one line naming the limit and the fix, exit 2 (was: the import's traceback, or "an internal
    error … please report it")."""
    limit = mib * 2**20
    done = subprocess.run(
        [sys.executable, "-m", "streamfit", "train", str(digits_cli_store), "--out", "run", "--n-workers", "0"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (limit, limit)),
        timeout=300,
    )
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith("error: out of memory while ") and done.stderr.count("\n") == 1, done.stderr
    assert (
        f"under this process's limit of {mib} MiB of address space (ulimit -v, prlimit --as); raise the limit "
        "(ulimit -v unlimited, or the batch job's memory request)" in done.stderr
    )
    assert not (tmp_path / "run").exists()
