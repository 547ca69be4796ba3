"""`kernel`: numba's `njit` with the options every kernel of streamfit takes.

- `cache=True`: the machine code is written to numba's on-disk cache, so a solver compiles
  once per installation and CPU model (streamfit.precompile).
- `no_cfunc_wrapper=True`: numba otherwise also builds, optimizes and emits a C-callable
  wrapper of every function it compiles, used only when a jitted function is passed as a
  first-class function value (no kernel is); it cost about a tenth of a cold compilation
  (docs/benchmarks.md, "First use: numba compilation, session 19"). The Python-callable wrapper
  stays: tests and the solvers call kernels from Python.

Further options (nogil, inline, fastmath, ...) are numba's, passed through.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

from streamfit._collector import imports_uncollected

with imports_uncollected():  # numba's ~20 000 objects (types, typing templates, LLVM bindings)
    import numba

_F = TypeVar("_F", bound=Callable[..., Any])

KERNEL_OPTIONS = {"cache": True, "no_cfunc_wrapper": True}


def kernel(**options: Any) -> Callable[[_F], _F]:
    """`@kernel(nogil=True)` = `@numba.njit(cache=True, no_cfunc_wrapper=True, nogil=True)`.
    The first kernel a process defines starts numba's target (start_target): a module of kernels
    is imported to call them."""
    start_target()
    return numba.njit(**KERNEL_OPTIONS, **options)  # type: ignore[call-overload]  # numba's hints lack no_cfunc_wrapper


def start_target() -> None:
    """numba's typing and target contexts initialised now, by streamfit.numba_target's one tiny
    kernel, inside imports_uncollected. The first kernel call of a process does this anyway (its
    registries: about 30 000 objects and 0.2-0.3 CPU s, docs/benchmarks.md, issue 19); called
    first (by `kernel`), the collector neither scans those objects while they are made nor in
    the full pass that their number triggers later. A no-op once done."""
    if "streamfit.numba_target" not in sys.modules:
        with imports_uncollected():
            import streamfit.numba_target  # noqa: F401
