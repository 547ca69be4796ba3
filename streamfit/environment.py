"""Sizes set by environment variables, declared once here with their defaults.

`STREAMFIT_CHUNK_CACHE_MB` (streamfit.store.store: the decoded chunks a process keeps) and
`STREAMFIT_STATE_CACHE_MB` (streamfit.checkpoint: the per-sample state a process keeps of what it
wrote) are read when those modules are imported, which the CLI does before it could print an
error line. So `mebibytes` never raises: a value that is not a number of MiB ≥ 0 gives the
default, and `check` (called by the CLI before every command) refuses it as one ConfigError line
naming the variable and the fix, whether or not the command imports the module that reads it.
From Python, `check()` says whether the default replaced a bad value.
(`STREAMFIT_SIGTERM_GRACE` is read by streamfit.shutdown when the CLI installs its guard.)
"""

from __future__ import annotations

import math
import os

from streamfit.errors import ConfigError

MEBIBYTES = {"STREAMFIT_CHUNK_CACHE_MB": 512.0, "STREAMFIT_STATE_CACHE_MB": 256.0}


def _read(name: str) -> tuple[float, str | None]:
    """(MiB, None) from the variable `name` (its default when unset or empty), or (the default,
    the problem) for any other text than a number ≥ 0."""
    default = MEBIBYTES[name]
    text = os.environ.get(name, "").strip()
    if not text:
        return default, None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < math.inf:
        return default, f"{name}={text!r}: must be a number of MiB >= 0 (e.g. {default:g}); unset it for {default:g}"
    return value, None


def mebibytes(name: str) -> int:
    """The bytes the variable `name` of MEBIBYTES sets (its default if it is unset or bad)."""
    return int(_read(name)[0] * 2**20)


def check() -> None:
    """Raise a ConfigError line for the first variable of MEBIBYTES set to a bad value."""
    for name in MEBIBYTES:
        problem = _read(name)[1]
        if problem is not None:
            raise ConfigError(problem)
