"""Imported by the embedded cluster's forkserver only (streamfit.engine.WORKER_PRELOAD), never by
a command's own process: sets SIGINT aside there, so that every Dask worker forked from it ignores
Ctrl-C.

A terminal's Ctrl-C sends SIGINT to the whole foreground process group: the driver and its
workers. The driver stops with one line (streamfit.cli, status 130) and closes the cluster, which
ends the workers; a worker that took the KeyboardInterrupt itself printed its traceback (about 30
lines each) and left the cluster mid-pass, which the driver then warned about. Python's forkserver
gives each child the SIGINT disposition that the server had when its preloaded modules were
imported (multiprocessing.forkserver.main records the handlers after the imports), so ignoring
SIGINT here is what its workers inherit. SIGTERM is left as it is: the nanny stops a worker with it."""

from __future__ import annotations

import signal

signal.signal(signal.SIGINT, signal.SIG_IGN)
