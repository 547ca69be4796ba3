"""SIGTERM and SIGHUP as a request to stop at a safe point (streamfit.shutdown): the handler sets
a flag and nothing else; a SIGTERM after the first signal (not a repeated SIGHUP), or the grace
period after it, ends the process at once (exit status 143, 129), wherever its main thread is. The driver's and ingest's stops: tests/solvers/
test_driver.py, tests/ingest/test_pipeline.py; the command on a cluster: tests/test_cli.py."""

import os
import signal
import subprocess
import sys
import time

import pytest

from streamfit import shutdown
from streamfit.errors import ConfigError, Terminated

EXIT_TIMEOUT_S = 120  # a bound for a small Python process to start and end on a loaded machine

# a process that installs the guard, sends itself the signal named by argv[1] (SIGTERM if none),
# says so, and then never stops by itself (its main thread waits on a lock that nothing releases,
# as a shutdown that hangs would)
HANGS_AFTER_SIGTERM = """
import os, signal, sys, threading
from streamfit.shutdown import SigtermGuard, grace_seconds, stop_requested
SigtermGuard(grace_seconds()).install()
os.kill(os.getpid(), getattr(signal, (sys.argv[1:] or ["SIGTERM"])[0]))
while not stop_requested():
    pass
print("stop requested", flush=True)
lock = threading.Lock(); lock.acquire(); lock.acquire()
"""


def _start(grace: str, sig: str = "SIGTERM", ignored: signal.Signals | None = None):
    """The HANGS_AFTER_SIGTERM process, its stop signals at their defaults but `ignored`."""

    def dispositions() -> None:
        for signum in shutdown.STOP_SIGNALS:
            signal.signal(signum, signal.SIG_IGN if signum == ignored else signal.SIG_DFL)

    env = {**os.environ, shutdown.GRACE_ENV: grace}
    return subprocess.Popen(
        [sys.executable, "-c", HANGS_AFTER_SIGTERM, sig],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
        preexec_fn=dispositions,
    )


def test_the_handler_sets_a_flag_that_check_turns_into_terminated(sigterm_guard):
    assert not shutdown.stop_requested()
    shutdown.check("nothing to stop")  # no SIGTERM yet: returns
    os.kill(os.getpid(), signal.SIGTERM)  # handled in this thread before the next bytecodes
    deadline = time.monotonic() + EXIT_TIMEOUT_S
    while not shutdown.stop_requested():  # the handler runs at the interpreter's next check
        assert time.monotonic() < deadline
    with pytest.raises(Terminated, match="what the stop leaves"):
        shutdown.check("what the stop leaves")


def test_disarming_restores_the_previous_handler():
    previous = signal.getsignal(signal.SIGTERM)
    guard = shutdown.SigtermGuard(grace=3600)
    guard.install()
    assert signal.getsignal(signal.SIGTERM) != previous
    guard.release()  # no SIGTERM came: the command ended, the guard goes
    assert signal.getsignal(signal.SIGTERM) == previous and not shutdown.stop_requested()


@pytest.mark.parametrize("text, seconds", [("", 30.0), ("0", 0.0), (" 2.5 ", 2.5)])
def test_the_grace_period_comes_from_the_environment(monkeypatch, text, seconds):
    monkeypatch.setenv(shutdown.GRACE_ENV, text)
    assert shutdown.grace_seconds() == seconds


@pytest.mark.parametrize("text", ["soon", "-1", "inf", "nan"])
def test_a_bad_grace_period_is_one_line_naming_the_variable(monkeypatch, text):
    monkeypatch.setenv(shutdown.GRACE_ENV, text)
    with pytest.raises(ConfigError, match=f"{shutdown.GRACE_ENV}=.*seconds >= 0"):
        shutdown.grace_seconds()


@pytest.mark.slow
def test_a_second_sigterm_ends_a_process_that_does_not_stop():
    proc = _start("3600")
    try:
        assert proc.stdout.readline() == "stop requested\n", proc.stderr.read()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=EXIT_TIMEOUT_S) == shutdown.exit_status()
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_the_grace_period_ends_a_process_that_does_not_stop():
    proc = _start("0.2")
    try:
        assert proc.wait(timeout=EXIT_TIMEOUT_S) == shutdown.exit_status()
        err = proc.stderr.read()
        assert "SIGTERM: stopping at the next safe point" in err, err
        assert err.splitlines()[-1] == "stopped: SIGTERM's grace period (0.2 s) passed; ending the process now", err
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_grace_period_of_0_ends_the_process_at_the_first_sigterm():
    proc = _start("0")
    try:
        assert proc.wait(timeout=EXIT_TIMEOUT_S) == shutdown.exit_status()
        assert proc.stdout.read() == ""  # ended in the handler: the flag was never set
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_a_repeated_sighup_does_not_end_the_stop_and_a_sigterm_then_does_with_sighup_s_status():
    """A closing terminal sends SIGHUP more than once (the shell forwards its own, the kernel
    sends another as the shell exits): after the first, a second SIGHUP leaves the stop under way
    (on main, SIGHUP ended the process at once, status 129 from the kernel, no line); a SIGTERM
    then ends it at once, with the status of the signal that asked to stop (129)."""
    proc = _start("3600", "SIGHUP")
    try:
        assert proc.stdout.readline() == "stop requested\n", proc.stderr.read()
        proc.send_signal(signal.SIGHUP)
        with pytest.raises(subprocess.TimeoutExpired):
            proc.wait(timeout=2)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=EXIT_TIMEOUT_S) == 129 == shutdown.exit_status(signal.SIGHUP)
        assert "SIGHUP: stopping at the next safe point" in proc.stderr.read()
    finally:
        proc.kill()
        proc.wait()


# installs the guard with stderr a terminal that has hung up, sends itself SIGHUP, then writes to
# stderr as a progress bar or the last line would, and says whether the write went through
WRITES_AFTER_HANGUP = """
import os, signal, sys
from streamfit.shutdown import SigtermGuard, stop_requested
SigtermGuard(30).install()
os.kill(os.getpid(), signal.SIGHUP)
while not stop_requested():
    pass
sys.stderr.write("a line after the hangup\\n")
sys.stderr.flush()
print("written", flush=True)
"""


def test_sighup_points_a_hung_up_terminal_at_devnull():
    """stderr a pty whose other end (the terminal) is closed: every write to it raises EIO; the
    guard's SIGHUP handler points it at os.devnull, so the write goes through (on main the guard
    took no SIGHUP: the process died of it)."""
    import pty

    terminal, stderr = pty.openpty()
    os.close(terminal)
    try:
        done = subprocess.run(
            [sys.executable, "-c", WRITES_AFTER_HANGUP],
            stdout=subprocess.PIPE,
            stderr=stderr,
            text=True,
            timeout=EXIT_TIMEOUT_S,
        )
    finally:
        os.close(stderr)
    assert (done.returncode, done.stdout) == (0, "written\n")


@pytest.mark.slow
def test_a_sighup_ignored_at_the_start_stays_ignored_as_under_nohup():
    """`nohup CMD` starts CMD with SIGHUP ignored, so that a closed terminal leaves it running:
    the guard leaves that SIGHUP ignored (it took it as a stop request, overriding nohup) and
    still takes SIGTERM. The process sends itself SIGHUP, then SIGTERM: only the SIGTERM stops it."""
    code = (
        "import os, signal, time\n"
        "from streamfit.shutdown import SigtermGuard, stop_requested\n"
        "SigtermGuard(3600).install()\n"
        "os.kill(os.getpid(), signal.SIGHUP)\n"
        "time.sleep(0.5)\n"
        "print('after SIGHUP', stop_requested(), signal.getsignal(signal.SIGHUP) is signal.SIG_IGN, flush=True)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "while not stop_requested():\n"
        "    time.sleep(0.01)\n"
        "print('after SIGTERM', stop_requested(), flush=True)\n"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", code],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_IGN),
    )
    try:
        out, err = proc.communicate(timeout=EXIT_TIMEOUT_S)
    finally:
        proc.kill()
    assert out.splitlines() == ["after SIGHUP False True", "after SIGTERM True"], err
