"""Imported by the embedded cluster's forkserver only (streamfit.engine.WORKER_PRELOAD), never by
a command's own process: sets SIGINT and SIGHUP aside there, so that every Dask worker forked from
it ignores Ctrl-C and a closing terminal.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the driver and its
workers. The driver stops with one line (streamfit.cli, status 130) and closes the cluster, which
ends the workers; a worker that took the KeyboardInterrupt itself printed its traceback (about 30
lines each) and left the cluster mid-pass, which the driver then warned about. Python's forkserver
gives each child the SIGINT disposition that the server had when its preloaded modules were
imported (multiprocessing.forkserver.main records the handlers after the imports), so ignoring
SIGINT here is what its workers inherit. SIGTERM is left as it is: the nanny stops a worker with it.

SIGHUP is set aside the same way (and in the forkserver itself, which the shell's forwarded
SIGHUP reaches too): a terminal that closes sends it to the driver's whole process group, and a
worker or the forkserver that died of it was a lost worker before the driver stopped at its safe
point (streamfit.shutdown: SIGHUP, as SIGTERM, a stop request, status 129); the driver then
closes the cluster as after any stop.

It also keeps one traceback of a stop off the terminal. A driver stopped (Ctrl-C, SIGTERM) while
its cluster starts exits while the forkserver may still be forking a worker it asked for; that
child then unpickles the driver's semaphores, which the driver's exit has unlinked, and the
forkserver prints its FileNotFoundError (14 lines per worker) after the driver's one line. The
hook below drops exactly that exception (raised in multiprocessing's SemLock.__setstate__: its
maker is gone) in the forkserver's children; any other goes to the hook it replaces."""

from __future__ import annotations

import signal
import sys
from types import TracebackType


def _quiet_orphaned_start(
    kind: type[BaseException], error: BaseException, tb: TracebackType | None, _previous=sys.excepthook
) -> None:
    """sys.excepthook of the forkserver and its children: nothing for a FileNotFoundError whose
    last frame is multiprocessing.synchronize's SemLock.__setstate__, `_previous` for the rest."""
    last = tb
    while last is not None and last.tb_next is not None:
        last = last.tb_next
    code = last.tb_frame.f_code if last is not None else None
    if (
        isinstance(error, FileNotFoundError)
        and code is not None
        and code.co_name == "__setstate__"
        and code.co_filename.endswith(("multiprocessing/synchronize.py", "multiprocessing\\synchronize.py"))
    ):
        return
    _previous(kind, error, tb)


signal.signal(signal.SIGINT, signal.SIG_IGN)
signal.signal(signal.SIGHUP, signal.SIG_IGN)
sys.excepthook = _quiet_orphaned_start
