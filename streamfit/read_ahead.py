"""Items of an iterator read by a thread of their own, ahead of their consumer.

predict reads raw input this way in two places: standard input as it comes (its reader blocks in
a read of the pipe while the batch it is filling may be due: streamfit.ingest.stdin), and a raw
input on a Dask cluster, whose rounds of tasks take the batches read by then (predict._in_order)
rather than wait for a round's worth to be read.
"""

from __future__ import annotations

import contextlib
import queue
import threading
from collections.abc import Iterable
from typing import Any

POLL_S = 0.2  # how often a reading thread blocked on a full queue looks whether its consumer went away
_END = object()


class _Closed(Exception):
    """The consumer went away: the reading thread ends."""


class ReadAhead:
    """Iterates over `items` read by a thread of its own (named `name`), started at the first
    look, at most `ahead` items before the consumer; `put` adds an item from that thread in its
    place among them. `ready()`: whether the next item (or the end, or an error) is read. An
    error of the read is raised to the consumer in its turn. `close()` (the consumer gone) ends
    the thread at its next put; a thread blocked in a read ends with the process (a daemon).
    `stop`: while the consumer waits for an item, a SIGTERM's stop request raises Terminated(stop)
    within POLL_S (streamfit.shutdown), as it does between items; None: the wait is not looked into."""

    def __init__(self, items: Iterable, ahead: int, name: str, stop: str | None = None):
        self._items = items
        self._stop_message = stop
        self._queue: queue.Queue = queue.Queue(maxsize=max(ahead, 1))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._read, name=name, daemon=True)

    def _read(self) -> None:
        try:
            for item in self._items:
                self.put(item)
            self.put(_END)
        except _Closed:
            return
        except BaseException as e:  # the read's error, raised by the consumer in its turn
            with contextlib.suppress(_Closed):
                self.put(_Raised(e))

    def put(self, item: Any) -> None:
        """Called by the reading thread: `item` after those read before it."""
        while not self._stop.is_set():
            with contextlib.suppress(queue.Full):
                self._queue.put(item, timeout=POLL_S)
                return
        raise _Closed

    def _start(self) -> None:
        if self._thread.ident is None:
            self._thread.start()

    def ready(self) -> bool:
        self._start()
        return not self._queue.empty()

    def __iter__(self) -> ReadAhead:
        return self

    def __next__(self) -> Any:
        from streamfit import shutdown

        self._start()
        while True:
            with contextlib.suppress(queue.Empty):
                item = self._queue.get(timeout=None if self._stop_message is None else POLL_S)
                break
            shutdown.check(self._stop_message or "")
        if item is _END:
            self._queue.put(_END)  # the end stays the end
            raise StopIteration
        if isinstance(item, _Raised):
            raise item.error
        return item

    def close(self) -> None:
        self._stop.set()


class _Raised:
    def __init__(self, error: BaseException):
        self.error = error
