"""The cyclic garbage collector around large imports (issue 19: a small job's fixed costs).

Importing streamfit.cli's dependencies (pydantic, click, yaml, numpy, scipy.sparse) and numba
creates about 80 000 tracked objects, nearly none of them garbage; the collector's passes over
them while they are being created (young and middle generations, then a full pass) cost about
0.1 CPU s of every command (docs/benchmarks.md, "The small job, session 23").
`imports_uncollected()` runs a block of imports with the collector paused and then puts what it
created out of the young generations without scanning it:

- in a process that runs one command from its own command line (`commit_process()` was called:
  streamfit.cli's `_Group.main`, which freezes the modules imported so far), into the permanent
  generation (gc.freeze), as that command does for the modules imported before it;
- otherwise, where nothing is frozen, into the oldest generation (gc.freeze then gc.unfreeze:
  the objects are moved, not scanned), where they would have gone after surviving two passes;
  a full collection still scans them;
- otherwise (the embedding program froze objects of its own, which gc.unfreeze would release)
  left where they are: the next young pass scans them once.

Garbage cycles made by the imports themselves are collected by the next full pass (or, frozen,
never: they are a handful of objects, and a command-line process exits after its command).
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator

_command_process = False  # set by commit_process


def commit_process() -> None:
    """This process runs one command from its own command line and exits after it: freeze what
    is imported from now on as well (imports_uncollected)."""
    global _command_process
    _command_process = True


@contextlib.contextmanager
def imports_uncollected() -> Iterator[None]:
    """The block (imports) run with the collector paused; what it created then frozen (a
    command-line process) or moved to the oldest generation unscanned (nothing frozen), as the
    module's docstring says. The collector's enabled state is restored."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if _command_process:
            gc.freeze()
        elif gc.get_freeze_count() == 0:
            gc.freeze()
            gc.unfreeze()
        if enabled:
            gc.enable()
