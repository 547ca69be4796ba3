"""Numba's CPU target, initialised at import: the embedded cluster's forkserver imports this
module (streamfit.engine.WORKER_PRELOAD), so every worker forked from it starts with numba's
typing and target contexts ready instead of building them in its first kernel call.

The first call of any numba function in a process, even one loaded from the on-disk cache,
initialises those contexts (LLVM, numba's type registries, cffi and pycparser imported): about
1-2 s, after which a cached kernel loads in tens of milliseconds (docs/benchmarks.md, issue 19,
session 12). Calling `_ready` here does it once, in the server. It starts no thread (the server
forks from one thread; BLAS has one, Dask sets OPENBLAS_NUM_THREADS=1 before the server starts).
Elsewhere it is imported by streamfit._jit.start_target when a process defines its first
kernel (a module of kernels is imported to call them), so that the start-up runs with the
garbage collector paused: a process that imports no kernel does not pay for it.
"""

from __future__ import annotations

from streamfit._jit import kernel


@kernel()
def _ready(x: float) -> float:
    return x + 1.0


_ready(1.0)
