"""`kernel`: numba's `njit` with the options every kernel of streamfit takes.

- `cache=True`: the machine code is written to numba's on-disk cache, so a solver compiles
  once per installation and CPU model (streamfit.precompile).
- `no_cfunc_wrapper=True`: numba otherwise also builds, optimizes and emits a C-callable
  wrapper of every function it compiles, used only when a jitted function is passed as a
  first-class function value (no kernel is); it cost about a tenth of a cold compilation
  (docs/benchmarks.md, "First use: numba compilation, session 19"). The Python-callable wrapper
  stays: tests and the solvers call kernels from Python.

Further options (nogil, inline, fastmath, ...) are numba's, passed through.

`prefetch(A, i, j)`: inside a kernel, a hint to the CPU to bring the cache line holding A[i, j]
(a 2-D array) into its caches before it is used; no value changes (LLVM's llvm.prefetch for a
read, locality 3: keep it in every cache level).
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from streamfit._collector import imports_uncollected
from streamfit.errors import OutputError

with imports_uncollected():  # numba's ~20 000 objects (types, typing templates, LLVM bindings)
    import numba
    from llvmlite import ir
    from numba.core import cgutils, types
    from numba.extending import intrinsic

_F = TypeVar("_F", bound=Callable[..., Any])

KERNEL_OPTIONS = {"cache": True, "no_cfunc_wrapper": True}


def kernel(**options: Any) -> Callable[[_F], _F]:
    """`@kernel(nogil=True)` = `@numba.njit(cache=True, no_cfunc_wrapper=True, nogil=True)`.
    The first kernel a process defines starts numba's target (start_target): a module of kernels
    is imported to call them. Where numba finds no folder it can write its cache to, the
    kernel's definition raises OutputError naming them and NUMBA_CACHE_DIR (`_no_cache_folder`)."""
    start_target()
    jit = numba.njit(**KERNEL_OPTIONS, **options)  # type: ignore[call-overload]  # numba's hints lack no_cfunc_wrapper

    def define(func: _F) -> _F:
        try:
            return jit(func)
        except RuntimeError as e:
            if NO_CACHE_LOCATOR not in str(e):
                raise
            raise OutputError(_no_cache_folder(func)) from None

    return define


# numba's RuntimeError when none of its cache locators can write (numba.core.caching._CacheImpl)
NO_CACHE_LOCATOR = "no locator available"


def _no_cache_folder(func: Callable) -> str:
    """The one line for a kernel whose compiled code numba can write nowhere: a read-only
    installation (its __pycache__) with a home folder that is read-only too (numba's user-wide
    cache folder there), and NUMBA_CACHE_DIR unset or not writable either."""
    from numba.misc.appdirs import AppDirs

    source = inspect.getsourcefile(func) or func.__code__.co_filename
    cache_dir = numba.config.CACHE_DIR  # type: ignore[attr-defined]  # numba's config sets it from the environment
    tried = [
        f"NUMBA_CACHE_DIR={cache_dir}" if cache_dir else "NUMBA_CACHE_DIR (unset)",
        os.path.join(os.path.dirname(source), "__pycache__"),
        AppDirs(appname="numba", appauthor=False).user_cache_dir,
    ]
    return (
        f"numba cannot cache the compiled code of {source}: none of the folders it tries is writable "
        f"({', '.join(tried)}); set NUMBA_CACHE_DIR to a folder this user can write, e.g. export "
        "NUMBA_CACHE_DIR=/tmp/numba-cache (numba uses no cache folder it cannot write to, even a filled one)"
    )


def start_target() -> None:
    """numba's typing and target contexts initialised now, by streamfit.numba_target's one tiny
    kernel, inside imports_uncollected. The first kernel call of a process does this anyway (its
    registries: about 30 000 objects and 0.2-0.3 CPU s, docs/benchmarks.md, issue 19); called
    first (by `kernel`), the collector neither scans those objects while they are made nor in
    the full pass that their number triggers later. A no-op once done."""
    if "streamfit.numba_target" not in sys.modules:
        with imports_uncollected():
            import streamfit.numba_target  # noqa: F401


@intrinsic
def _prefetch(typingctx, array, i, j):
    """Prefetch the cache line of array[i, j] (2-D; i, j integers, no bounds check: an address
    outside the array is harmless, a prefetch never faults). Returns nothing, changes no value."""
    signature = types.void(array, i, j)

    def codegen(context, builder, sig, args):
        view = context.make_array(sig.args[0])(context, builder, args[0])
        index = [context.cast(builder, args[k], sig.args[k], types.intp) for k in (1, 2)]
        pointer = cgutils.get_item_pointer(context, builder, sig.args[0], view, index, wraparound=False)
        byte = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        hint = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte, i32, i32, i32]), "llvm.prefetch.p0i8"
        )  # (address, read, locality 3 of 0..3, data cache)
        builder.call(hint, [builder.bitcast(pointer, byte), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return signature, codegen


prefetch = cast(Callable[[Any, int, int], None], _prefetch)  # called as prefetch(A, i, j), in kernels only
