"""The `streamfit` command: the console script's entry point (`run`), and `python -m streamfit`
for an environment whose scripts folder is not on PATH."""

import os
import signal
import sys

from streamfit.memory_limit import limit_reached  # before the libraries: loaded later, under a low limit, it could fail
from streamfit.shutdown import EXIT_STATUS

STARTING = "while starting; nothing was done: run it again"  # what a stop during the imports leaves


def _terminated_while_starting(signum, frame) -> None:
    """SIGTERM during the imports: nothing is written yet, so the process ends at once, with the
    line and status (143) of a SIGTERM later in a command."""
    os.write(2, f"stopped: terminated by SIGTERM {STARTING}\n".encode())
    os._exit(EXIT_STATUS)


def run() -> None:
    """Import the command line (streamfit.cli) and run it under the name `streamfit`. A Ctrl-C or
    SIGTERM during the imports (the first second of every command, before the CLI's own handlers
    exist) ends as one later does: one `stopped:` line and exit status 130 or 143, no traceback;
    so does a library that fails to load under this process's memory limit (streamfit.memory_limit).
    The command then installs its own SIGTERM handler (shutdown.SigtermGuard)."""
    default = signal.signal(signal.SIGTERM, _terminated_while_starting)
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
        signal.signal(signal.SIGTERM, default)
    main(prog_name="streamfit")


if __name__ == "__main__":
    run()
