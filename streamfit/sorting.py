"""A stable argsort for the numba kernels, in place of `np.argsort(keys, kind="mergesort")`.

numba's own argsort is generated code (a recursive merge sort, or a quicksort, with their
helpers) that a first use compiles for seconds for each key type: 2-5 s of the LIBSVM parser's
and ppdsparse's cold compilation (docs/benchmarks.md, "First use: numba compilation, session
17"). This one is a plain loop and compiles in a fraction of that. It returns the same
permutation: a stable sort's output is determined by the keys and their order, and `_less` is
numba's (and NumPy's) order for floats, NaN after every number.
"""

from __future__ import annotations

import numpy as np

from streamfit._jit import kernel

RUN = 16  # runs of this many keys are sorted by insertion before the merges


@kernel(nogil=True, inline="always")
def _less(a, b):
    """a < b, NaN after every number (b != b: b is NaN; for integers never true)."""
    return a < b or (b != b and a == a)


@kernel(nogil=True)
def stable_argsort(keys):
    """The permutation (int64, length n) that sorts keys (1-D) ascending, equal keys in input
    order: np.argsort(keys, kind="stable"). Bottom-up merge sort: runs of RUN keys by insertion,
    then runs of width RUN, 2·RUN, ... merged pairwise between two index buffers; O(n log n)."""
    n = keys.shape[0]
    src = np.empty(n, np.int64)
    dst = np.empty(n, np.int64)
    for lo in range(0, n, RUN):
        hi = min(lo + RUN, n)
        for i in range(lo, hi):
            t = i
            j = i
            while j > lo and _less(keys[t], keys[src[j - 1]]):
                src[j] = src[j - 1]
                j -= 1
            src[j] = t
    width = RUN
    while width < n:
        for lo in range(0, n, 2 * width):
            mid = min(lo + width, n)
            hi = min(lo + 2 * width, n)
            i, j, k = lo, mid, lo
            while i < mid and j < hi:
                # the right run's key goes first only when strictly smaller: ties keep input order
                if _less(keys[src[j]], keys[src[i]]):
                    dst[k] = src[j]
                    j += 1
                else:
                    dst[k] = src[i]
                    i += 1
                k += 1
            while i < mid:
                dst[k] = src[i]
                i += 1
                k += 1
            while j < hi:
                dst[k] = src[j]
                j += 1
                k += 1
        src, dst = dst, src
        width *= 2
    return src
