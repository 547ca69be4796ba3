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

import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

from streamfit._collector import imports_uncollected

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
