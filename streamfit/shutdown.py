"""SIGTERM (`kill PID`, a batch system's stop) as a request to stop at the next safe point.

The handler that the CLI installs (SigtermGuard) does nothing but set a flag and write one byte
to a pipe: Python runs a signal handler between any two bytecodes of the main thread (inside
distributed's client with a lock half-taken, inside a gc callback, ...), so a handler that
raised or took a lock there could leave the shutdown waiting forever. The code that runs the
work looks at the flag where stopping is safe and raises Terminated there:

    the solver driver      before each step: it saves the state of the last step taken, if not
                           saved yet, then stops (streamfit.solvers.driver.run); a resume
                           continues from that checkpoint and ends with the same model
    ingest                 between source batches, pieces and chunks: the unfinished store is
                           removed, as after any failure
    predict                between scored pieces: nothing is written

Terminated unwinds through the `with Engine` (the Dask cluster closes) and the writers' aborts;
the CLI prints one line and exits with status 143 (128 + 15, what a shell reports for a process
that SIGTERM ended).

So that an unattended job never hangs, a watchdog thread (started with the guard; it blocks on
the pipe) ends the process with os._exit(143) once the grace period has passed after the first
SIGTERM, wherever the process is then, and a second SIGTERM ends it at once. The grace period is
STREAMFIT_SIGTERM_GRACE seconds (default 30; 0: SIGTERM ends the process at once, no clean stop).
After a stop the watchdog stays armed until the process exits, so a hang in Python's own
shutdown (joining threads, atexit) is bounded too.
"""

from __future__ import annotations

import logging
import os
import select
import signal
import threading
import time

from streamfit.errors import ConfigError, Terminated

log = logging.getLogger(__name__)

EXIT_STATUS = 128 + signal.SIGTERM  # 143
GRACE_ENV = "STREAMFIT_SIGTERM_GRACE"
DEFAULT_GRACE_S = 30.0
_WAKE, _QUIT = b"T", b"Q"  # the bytes the pipe carries to the watchdog: a first SIGTERM, the guard released

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
    """Whether a SIGTERM asked the running command to stop (False where no guard is installed:
    the library used from Python, the estimators)."""
    return _installed is not None and _installed.requested


def guarded() -> bool:
    """Whether a command's SigtermGuard is installed (a SIGTERM is then a stop request)."""
    return _installed is not None


def check(what: str) -> None:
    """Raise Terminated(what) if a SIGTERM asked to stop; `what` says what the stop leaves (the
    CLI prints it after "stopped: terminated by SIGTERM; ")."""
    if stop_requested():
        raise Terminated(what)


class SigtermGuard:
    """The SIGTERM handler of a command (see the module docstring); `install` in the main thread,
    `release` when the command ends."""

    def __init__(self, grace: float):
        self.grace = grace
        self.requested = False
        self._previous: signal._HANDLER = signal.SIG_DFL
        self._read, self._write = os.pipe()
        self._watchdog = threading.Thread(target=self._watch, name="streamfit-sigterm-watchdog", daemon=True)

    def install(self) -> None:
        global _installed
        self._previous = signal.signal(signal.SIGTERM, self._handle)
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
        signal.signal(signal.SIGTERM, self._previous)
        os.write(self._write, _QUIT)
        _installed = None

    def _handle(self, signum, frame) -> None:
        # a flag and a write(2): nothing here takes a lock or raises (see the module docstring)
        if self.requested or self.grace == 0:
            os._exit(EXIT_STATUS)
        self.requested = True
        os.write(self._write, _WAKE)

    def _watch(self) -> None:
        """The watchdog thread: waits for the first SIGTERM, says so, and ends the process when the
        grace period has passed (or returns when the guard is released first)."""
        if os.read(self._read, 1) != _WAKE:
            self._close()
            return
        deadline = time.monotonic() + self.grace
        log.warning(
            "SIGTERM: stopping at the next safe point (train: after a checkpoint); a second SIGTERM, or "
            "%g s from now (%s), ends the process at once",
            self.grace,
            GRACE_ENV,
        )
        while (left := deadline - time.monotonic()) > 0:
            ready, _, _ = select.select([self._read], [], [], left)
            if ready and os.read(self._read, 1) == _QUIT:  # released: the command ended in time
                self._close()
                return
        # no logging here: the main thread may hold a handler's lock where it hangs
        os.write(2, f"stopped: SIGTERM's grace period ({self.grace:g} s) passed; ending the process now\n".encode())
        os._exit(EXIT_STATUS)

    def _close(self) -> None:
        os.close(self._read)
        os.close(self._write)
