"""A failure that this process's memory limit caused, named as such.

Under a cap on the process's address space or data segment (`ulimit -v` / `prlimit --as`:
RLIMIT_AS; `ulimit -d` / `prlimit --data`: RLIMIT_DATA), as batch systems and containers set
them, the native libraries streamfit loads (NumPy's and SciPy's OpenBLAS, numba's LLVM, Dask's
threads) fail in their own words: an ImportError or OSError "failed to map segment from shared
object" (the loader's mmap refused), a MemoryError, "can't start new thread" (a thread's stack
refused). Near the start-up floor these came out as a traceback from the imports, or as "an
internal error", with no word of memory. `limit_reached` recognises them, where such a limit is
set, and gives the one line naming the limit and the fix. It is imported only after a failure
(streamfit.__main__, streamfit.cli). streamfit.__main__ imports it before the libraries (a
standard-library module and this one: about a millisecond), as under a low limit its own load after
the failure could fail too.

Not every failure under a low cap can be caught: at some caps OpenBLAS's own start-up retries an
allocation in a loop inside the loader, before any Python code runs again.
"""

from __future__ import annotations

import resource

from streamfit.errors import exception_chain

# Words by which the libraries' errors say that memory (address space) was refused
SIGNS = (
    "failed to map segment",  # the dynamic loader: a library's mmap refused
    "Cannot allocate memory",  # ENOMEM's text
    "cannot allocate memory",
    "can't start new thread",  # a thread's stack refused
)
MIB = 1024 * 1024


def _limits() -> list[tuple[str, str]]:
    """The memory limits set on this process: (the limit as a message names it, the shell's
    command that lifts it)."""
    found = []
    for kind, what, flag, option in (
        (resource.RLIMIT_AS, "address space", "-v", "--as"),
        (resource.RLIMIT_DATA, "data", "-d", "--data"),
    ):
        soft, _ = resource.getrlimit(kind)
        if soft != resource.RLIM_INFINITY:
            found.append(
                (f"{soft / MIB:.0f} MiB of {what} (ulimit {flag}, prlimit {option})", f"ulimit {flag} unlimited")
            )
    return found


def limit_reached(error: BaseException, doing: str) -> str | None:
    """The one line for `error`, raised while `doing` ("starting", "`streamfit train`"), when a
    memory limit is set on this process and the error (or one it came from) is a MemoryError or
    speaks of refused memory (SIGNS); else None."""
    chain = exception_chain(error)
    if not any(isinstance(e, MemoryError) or any(sign in str(e) for sign in SIGNS) for e in chain):
        return None
    limits = _limits()
    if not limits:
        return None
    signs = [str(e) for e in chain if any(sign in str(e) for sign in SIGNS)]
    detail = signs[0].strip().splitlines()[-1] if signs else "MemoryError"
    return (
        f"error: out of memory while {doing}: {detail}, under this process's limit of "
        f"{' and '.join(text for text, _ in limits)}; raise the limit ({', '.join(fix for _, fix in limits)}, or the "
        "batch job's memory request) and run the command again"
    )
