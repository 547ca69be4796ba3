"""SIGTERM (`kill PID`, a batch system's stop) and SIGHUP (the terminal of a command started
without nohup closed) as a request to stop at the next safe point: STOP_SIGNALS, the one list.
A stop signal the process was started ignoring stays ignored (stop_signals_taken): under
`nohup` a closed terminal does not stop the command.

The handler that the CLI installs (SigtermGuard) does nothing but set a flag, note the signal
and write one byte to a pipe (and, for SIGHUP, point a stdout or stderr whose terminal has hung
up at os.devnull: every write there raises EIO, which would turn the stop, and its last line,
into a failure; the log file still gets the line). Python runs a signal handler between any two
bytecodes of the main thread (inside distributed's client with a lock half-taken, inside a gc callback, ...), so a handler that
raised or took a lock there could leave the shutdown waiting forever. The code that runs the
work looks at the flag where stopping is safe and raises Terminated there:

    the solver driver      before each step: it saves the state of the last step taken, if not
                           saved yet, then stops (streamfit.solvers.driver.run); a resume
                           continues from that checkpoint and ends with the same model
    ingest                 between source batches, pieces and chunks: the unfinished store is
                           removed, as after any failure
    predict                between scored pieces: nothing is written

Terminated unwinds through the `with Engine` (the Dask cluster closes) and the writers' aborts;
the CLI prints one line naming the signal (stop_reason) and exits with status 128 + its number
(exit_status: 143 for SIGTERM, 129 for SIGHUP, what a shell reports for a process it ended).

So that an unattended job never hangs, a watchdog thread (started with the guard; it blocks on
the pipe) ends the process with os._exit(that status) once the grace period has passed after the
first signal, wherever the process is then, and a SIGTERM after the first signal ends it at once.
A repeated SIGHUP does not: a closing terminal sends several (the shell forwards its own to its
jobs, and the kernel sends the foreground group another as the shell exits). The grace period is
STREAMFIT_SIGTERM_GRACE seconds (default 30; 0: the first signal ends the process at once, no
clean stop).
After a stop the watchdog stays armed until the process exits, so a hang in Python's own
shutdown (joining threads, atexit) is bounded too.
"""

from __future__ import annotations

import contextlib
import logging
import os
import select
import signal
import threading
import time

from streamfit.errors import ConfigError, Terminated

log = logging.getLogger(__name__)

# the signals that ask a command to stop at its next safe point, and what its `stopped:` line says of each
STOP_SIGNALS: dict[signal.Signals, str] = {signal.SIGTERM: "terminated by SIGTERM"}
SIGHUP = getattr(signal, "SIGHUP", None)  # POSIX only
if SIGHUP is not None:
    STOP_SIGNALS[SIGHUP] = (
        "hung up by SIGHUP (its terminal closed; start it with nohup, or from a batch system, to keep it running)"
    )
GRACE_ENV = "STREAMFIT_SIGTERM_GRACE"
DEFAULT_GRACE_S = 30.0
_WAKE, _QUIT = b"T", b"Q"  # the bytes the pipe carries to the watchdog: a first stop signal, the guard released

_installed: SigtermGuard | None = None


def grace_seconds() -> float:
    """The grace period from STREAMFIT_SIGTERM_GRACE (seconds >= 0), DEFAULT_GRACE_S if unset."""
    text = os.environ.get(GRACE_ENV, "").strip()
    if not text:
        return DEFAULT_GRACE_S
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0 or value == float("inf"):
        raise ConfigError(f"{GRACE_ENV}={text!r}: must be a number of seconds >= 0 (e.g. 30); unset it for 30")
    return value


def stop_requested() -> bool:
    """Whether a stop signal asked the running command to stop (False where no guard is
    installed: the library used from Python, the estimators)."""
    return _installed is not None and _installed.requested


def stop_signals_taken() -> list[signal.Signals]:
    """The STOP_SIGNALS this process takes as stop requests: those it was not started ignoring.
    A signal ignored on entry stays ignored, as Python leaves an ignored SIGINT: `nohup` starts a
    command with SIGHUP ignored so that a closed terminal does not stop it."""
    return [signum for signum in STOP_SIGNALS if signal.getsignal(signum) is not signal.SIG_IGN]


def exit_status(signum: int = signal.SIGTERM) -> int:
    """The exit status of a command that signal `signum` stopped: 128 + its number, as a shell
    reports for a process that the signal ended (143 SIGTERM, 129 SIGHUP)."""
    return 128 + signum


def stop_signal() -> signal.Signals:
    """The signal that asked the running command to stop (SIGTERM where none did)."""
    return _installed.signum if _installed is not None else signal.SIGTERM


def stop_reason() -> str:
    """What the `stopped:` line says of the signal that asked to stop (STOP_SIGNALS)."""
    return STOP_SIGNALS[stop_signal()]


def guarded() -> bool:
    """Whether a command's SigtermGuard is installed (a STOP_SIGNALS signal is then a stop request)."""
    return _installed is not None


def check(what: str) -> None:
    """Raise Terminated(what) if a stop signal asked to stop; `what` says what the stop leaves
    (the CLI prints it after "stopped: ", stop_reason() and "; ")."""
    if stop_requested():
        raise Terminated(what)


class SigtermGuard:
    """The handler of STOP_SIGNALS of a command (see the module docstring); `install` in the main
    thread, `release` when the command ends."""

    def __init__(self, grace: float):
        self.grace = grace
        self.requested = False
        self.signum = signal.SIGTERM  # the first stop signal that came
        self._previous: dict[signal.Signals, signal._HANDLER] = {}
        self._read, self._write = os.pipe()
        self._watchdog = threading.Thread(target=self._watch, name="streamfit-sigterm-watchdog", daemon=True)

    def install(self) -> None:
        global _installed
        self._previous = {signum: signal.signal(signum, self._handle) for signum in stop_signals_taken()}
        self._watchdog.start()
        _installed = self

    def release(self) -> None:
        """When the command ends: disarm, unless a stop was requested; then the handler and the
        watchdog stay until the process exits (a second SIGTERM, or the grace period, ends it)."""
        if not self.requested:
            self.disarm()

    def disarm(self) -> None:
        """Restore the previous handler and stop the watchdog (once; a second call does nothing)."""
        global _installed
        if _installed is not self:
            return
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        os.write(self._write, _QUIT)
        _installed = None

    def _handle(self, signum, frame) -> None:
        # a flag and system calls: nothing here takes a lock or raises (see the module docstring)
        if signum == SIGHUP:
            _leave_hung_up_terminal()
        if self.requested:
            if signum == SIGHUP:  # a closing terminal's next SIGHUP: the stop is under way
                return
            os._exit(exit_status(self.signum))
        if self.grace == 0:
            os._exit(exit_status(signum))
        self.requested, self.signum = True, signal.Signals(signum)
        os.write(self._write, _WAKE)

    def _watch(self) -> None:
        """The watchdog thread: waits for the first SIGTERM, says so, and ends the process when the
        grace period has passed (or returns when the guard is released first)."""
        if os.read(self._read, 1) != _WAKE:
            self._close()
            return
        deadline = time.monotonic() + self.grace
        log.warning(
            "%s: stopping at the next safe point (train: after a checkpoint); a SIGTERM, or "
            "%g s from now (%s), ends the process at once",
            self.signum.name,
            self.grace,
            GRACE_ENV,
        )
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._read], [], [], left)
            if ready and os.read(self._read, 1) == _QUIT:  # released: the command ended in time
                self._close()
                return
        # no logging here: the main thread may hold a handler's lock where it hangs
        line = f"stopped: {self.signum.name}'s grace period ({self.grace:g} s) passed; ending the process now\n"
        with contextlib.suppress(OSError):  # a terminal that is gone
            os.write(2, line.encode())
        os._exit(exit_status(self.signum))

    def _close(self) -> None:
        os.close(self._read)
        os.close(self._write)


def _leave_hung_up_terminal() -> None:
    """Point stdout and stderr, where each has hung up (poll: POLLHUP; a terminal that closed, on
    which isatty is already False), at os.devnull: every write to it raises EIO, the progress
    bar's and the last line's too."""
    for fd in (1, 2):
        try:
            poller = select.poll()
            poller.register(fd, select.POLLOUT)
            if any(events & select.POLLHUP for _, events in poller.poll(0)):
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, fd)
                os.close(devnull)
        except OSError:  # no os.devnull to open (a broken container): the writes fail as they would have
            continue
