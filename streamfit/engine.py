"""Where per-chunk tasks run: in this process, on an embedded local Dask cluster, or on an
existing Dask cluster (`scheduler="tcp://host:8786"`).

Every pass over the data is `map` (one task per chunk, results in chunk order) or
`map_reduce` (the chunk results summed). Sums always follow the same binary tree over chunk
ids -- `sum(lo, hi) = sum(lo, mid) + sum(mid, hi)` with `mid - lo` the largest power of two
below `hi - lo` -- whatever the number of workers, threads or the completion order, so a run
gives bitwise the same numbers on a laptop and on a cluster.
"""

from __future__ import annotations

import functools
import logging
import os
from typing import Any, Callable


log = logging.getLogger(__name__)

# Keyword arguments larger than this (by dask's sizeof) are scattered once to every worker.
# It must stay below the 1e5 bytes above which Client.map turns a keyword argument into a
# graph node keyed by the argument's *name*, so two maps with a large `active=` collide.
BROADCAST_BYTES = 64 * 1024


def add_results(a, b):
    """Elementwise sum of two task results (arrays, numbers, None for "nothing", or tuples/lists
    of them)."""
    if isinstance(a, (tuple, list)):
        return type(a)(add_results(x, y) for x, y in zip(a, b))
    if a is None and b is None:
        return None
    return a + b


def _split(n: int) -> int:
    return 1 << ((n - 1).bit_length() - 1)


def tree_sum(values: list):
    """Sum `values` along the fixed binary tree described in the module docstring."""
    if len(values) == 1:
        return values[0]
    mid = _split(len(values))
    return add_results(tree_sum(values[:mid]), tree_sum(values[mid:]))


class _NoBar:
    """A progress bar that shows nothing and costs nothing."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def update(self, n: int = 1) -> None:
        pass


_NO_BAR = _NoBar()


class Engine:
    """Runs `fn(source, chunk_id, **kwargs)` for every chunk.

    mode "inprocess": serial, in this process (estimators on in-memory arrays, tests);
    mode "local": an embedded `distributed.LocalCluster` of `n_workers` processes with
    `threads_per_worker` threads each (default: one single-threaded process per core);
    a `scheduler` address joins an existing cluster instead. Use as a context manager.
    """

    def __init__(self, scheduler: str | None = None, *, mode: str | None = None, n_workers: int | None = None,
                 threads_per_worker: int = 1, memory_limit: str | None = "auto", progress: bool = False,
                 connect_timeout: str = "20s"):
        self.mode = "remote" if scheduler else (mode or "local")
        if self.mode not in ("inprocess", "local", "remote"):
            raise ValueError(f"engine mode must be 'inprocess', 'local' or a scheduler address, got {mode!r}")
        self.scheduler = scheduler
        self.n_workers = n_workers or os.cpu_count() or 1
        self.threads_per_worker = threads_per_worker
        self.memory_limit = memory_limit
        self.progress = progress
        self.connect_timeout = connect_timeout
        self.client = None
        self.cluster = None

    def __enter__(self) -> "Engine":
        self.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def start(self) -> None:
        if self.mode == "inprocess" or self.client is not None:
            return
        from distributed import Client, LocalCluster

        if not log.isEnabledFor(logging.INFO):  # Dask's own INFO chatter only when streamfit is verbose
            logging.getLogger("distributed").setLevel(logging.ERROR)

        if self.mode == "remote":
            try:
                self.client = Client(self.scheduler, timeout=self.connect_timeout)
            except OSError as e:
                from streamfit.errors import StreamfitError

                raise StreamfitError(
                    f"cannot reach the Dask scheduler at {self.scheduler} ({e}); start one with "
                    "'dask scheduler' and workers with 'dask worker ADDRESS', or drop --scheduler "
                    "to use the embedded local cluster"
                ) from e
        else:
            self.cluster = LocalCluster(
                n_workers=self.n_workers, threads_per_worker=self.threads_per_worker, processes=True,
                memory_limit=self.memory_limit, dashboard_address=":0", silence_logs=logging.ERROR,
            )
            self.client = Client(self.cluster)
        log.info("dask engine: %s", self.client)

    def close(self) -> None:
        if self.client is not None:
            self.client.close()
            self.client = None
        if self.cluster is not None:
            self.cluster.close()
            self.cluster = None

    @property
    def total_threads(self) -> int:
        if self.client is None:
            return 1
        return sum(self.client.nthreads().values())

    def _bar(self, n: int, desc: str | None):
        if not (self.progress and desc):  # a disabled tqdm still costs ~20 µs, once per pass
            return _NO_BAR
        from tqdm.auto import tqdm

        return tqdm(total=n, desc=desc, unit="chunk", leave=False)

    def _submit_args(self, kwargs: dict) -> dict:
        from dask.sizeof import sizeof

        return {
            k: (self.client.scatter(v, broadcast=True, hash=False) if sizeof(v) > BROADCAST_BYTES else v)
            for k, v in kwargs.items()
        }

    def map(self, fn: Callable, source, chunk_ids, desc: str | None = None, **kwargs) -> list:
        """[fn(source, i, **kwargs) for i in chunk_ids], in chunk order."""
        chunk_ids = list(chunk_ids)
        if self.client is None:
            self.start()
        with self._bar(len(chunk_ids), desc) as bar:
            if self.client is None:
                out = []
                for i in chunk_ids:
                    out.append(fn(source, i, **kwargs))
                    bar.update()
                return out
            from distributed import as_completed

            futures = self.client.map(functools.partial(fn, source), chunk_ids, pure=False, **self._submit_args(kwargs))
            for _ in as_completed(futures):
                bar.update()
            return self.client.gather(futures)

    def map_reduce(self, fn: Callable, source, chunk_ids, desc: str | None = None, **kwargs) -> Any:
        """The sum over chunks of fn(source, i, **kwargs), along the fixed tree (tree_sum)."""
        chunk_ids = list(chunk_ids)
        if not chunk_ids:
            raise ValueError("map_reduce over no chunks")
        if self.client is None:
            self.start()
        if self.client is None:
            return self._reduce_inprocess(fn, source, chunk_ids, desc, kwargs)
        from distributed import as_completed

        leaves = self.client.map(functools.partial(fn, source), chunk_ids, pure=False, **self._submit_args(kwargs))

        def tree(futs):
            if len(futs) == 1:
                return futs[0]
            mid = _split(len(futs))
            return self.client.submit(add_results, tree(futs[:mid]), tree(futs[mid:]), pure=False)

        root = tree(leaves)
        with self._bar(len(leaves), desc) as bar:
            for _ in as_completed(leaves):
                bar.update()
        del leaves
        return root.result()

    def _reduce_inprocess(self, fn, source, chunk_ids, desc, kwargs):
        # the same tree as tree_sum, built left to right with a stack so that only
        # O(log n_chunks) partial sums are held at once
        stack: list[tuple[int, Any]] = []
        with self._bar(len(chunk_ids), desc) as bar:
            for i in chunk_ids:
                stack.append((1, fn(source, i, **kwargs)))
                bar.update()
                while len(stack) > 1 and stack[-1][0] == stack[-2][0]:
                    (n2, b), (n1, a) = stack.pop(), stack.pop()
                    stack.append((n1 + n2, add_results(a, b)))
        size, total = stack.pop()
        while stack:
            n1, a = stack.pop()
            total = add_results(a, total)
        return total
