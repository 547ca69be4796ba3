"""The `streamfit` command: the console script's entry point (`run`), and `python -m streamfit`
for an environment whose scripts folder is not on PATH."""

import sys


def run() -> None:
    """Import the command line (streamfit.cli) and run it under the name `streamfit`. A Ctrl-C
    during the imports (the first second of every command, before the CLI's own handlers exist)
    ends as a Ctrl-C later does: one `stopped:` line and exit status 130, no traceback."""
    try:
        from streamfit.cli import main
    except KeyboardInterrupt:
        sys.stderr.write("stopped: interrupted (Ctrl-C) while starting; nothing was done: run it again\n")
        sys.exit(130)
    main(prog_name="streamfit")


if __name__ == "__main__":
    run()
