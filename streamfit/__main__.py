"""The `streamfit` command: the console script's entry point (`run`), and `python -m streamfit`
for an environment whose scripts folder is not on PATH."""

import contextlib
import os
import signal
import sys

from streamfit.memory_limit import limit_reached  # before the libraries: loaded later, under a low limit, it could fail
from streamfit.shutdown import STOP_SIGNALS, exit_status, stop_signals_taken

STARTING = "while starting; nothing was done: run it again"  # what a stop during the imports leaves


def _terminated_while_starting(signum, frame) -> None:
    """A stop signal (SIGTERM, SIGHUP) during the imports: nothing is written yet, so the process
    ends at once, with the line and status (143, 129) of that signal later in a command."""
    with contextlib.suppress(OSError):  # a terminal that is gone (SIGHUP)
        os.write(2, f"stopped: {STOP_SIGNALS[signal.Signals(signum)]} {STARTING}\n".encode())
    os._exit(exit_status(signum))


def run() -> None:
    """Import the command line (streamfit.cli) and run it under the name `streamfit`. A Ctrl-C,
    SIGTERM or SIGHUP during the imports (the first second of every command, before the CLI's own
    handlers exist) ends as one later does: one `stopped:` line and exit status 130, 143 or 129,
    no traceback; so does a library that fails to load under this process's memory limit
    (streamfit.memory_limit). The command then installs its own handler (shutdown.SigtermGuard).
    A stop signal the process was started ignoring (SIGHUP under nohup) stays ignored."""
    default = {signum: signal.signal(signum, _terminated_while_starting) for signum in stop_signals_taken()}
    try:
        from streamfit.cli import main
    except KeyboardInterrupt:
        sys.stderr.write(f"stopped: interrupted (Ctrl-C) {STARTING}\n")
        sys.exit(130)
    except (MemoryError, ImportError, OSError, RuntimeError) as e:  # a native library under a memory limit
        line = limit_reached(e, "starting (nothing was done)")
        if line is None:
            raise
        sys.stderr.write(line + "\n")
        sys.exit(2)
    finally:
        for signum, handler in default.items():
            signal.signal(signum, handler)
    main(prog_name="streamfit")


if __name__ == "__main__":
    run()
