"""Leases: one writer at a time of a name behind a URL (the object store's counterpart of flock).

On local disk a second writer of a store, a run directory or a prediction output is refused by
a flock before it writes (streamfit.store.store.lock_dir, train._lock_run_dir,
predict._claim_output). An object store has no locks, so a writer behind a URL holds a lease:
a small object `NAME/LEASE` (a directory: a store, a run directory, ingest's pass-1 stage) or
`NAME.LEASE` (predict's output, which may be one file), JSON
`{"host", "pid", "started", "renewed", "token"}`.

- *Taken* before anything is written, by a conditional create: on S3 one PutObject with
  `If-None-Match: *` (412 PreconditionFailed when a lease is there). The holder's host, pid and
  start go into the object's metadata too, so one HeadObject names the holder.
- *Renewed* every RENEW_EVERY seconds by a daemon thread: PutObject with `If-Match: <the ETag of
  its own last write>`. A refusal (412: another writer took the lease over; 404: someone deleted
  it) marks the lease lost.
- *Stale* when it was not renewed for STALE_AFTER seconds: on S3 judged by the object store's
  own clock (the answer's `Date` less the object's `Last-Modified`), so the hosts' clocks do
  not matter. A stale lease (its holder killed, or cut off) is taken over by PutObject with
  `If-Match: <its ETag>`: of two takers one wins, the other is refused naming the winner. So is,
  at once, a lease whose holder ran on this host (the same host name) and whose process is gone
  (`_Found.dead_here`): a `--resume` after a SIGKILL does not wait. A live one refuses the second
  writer with one line naming the URL, the holder, the seconds until it would be stale and the
  command that deletes it. (Two machines that share a host name could take a live writer's lease
  this way; that writer's next renewal or commit then finds it lost and commits nothing.)
- *Checked* before every commit or publish under its name (storage.Attempt.commit,
  Location.publish_file call `check_held`): a lost lease refuses the commit (one line; nothing is
  committed). The check asks nothing while the last renewal that the object store accepted was
  sent less than STALE_AFTER / 2 ago (no other writer can have judged it stale), else it renews
  first. What is left between the check and the commit's own PUT, the commit's
  compare-and-swap covers (storage.Attempt.commit).
- *Released* when its writer is done (committed, aborted, stopped by SIGTERM or Ctrl-C): the
  thread stops and the object is deleted with `If-Match: <its last ETag>` (never another
  writer's). A SIGKILLed writer's lease stays until it is stale, or until a writer on its host
  finds its process gone; then the next writer takes it over.

Requests on S3: one PUT to take, one DELETE to release, one PUT per RENEW_EVERY seconds;
a refusal costs one HEAD more. Other URL schemes (`memory://`, `gs://`, `abfs://`) get the same
lease by a look-then-write (read the object, write it if absent or stale or still ours), which
is not atomic: two writers that start within one round trip of each other can both take it.
A `memory://` object is seen only by its own process.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import secrets
import socket
import threading
import time
from dataclasses import dataclass

from streamfit import storage
from streamfit.errors import StreamfitError, output_error

log = logging.getLogger(__name__)

LEASE = "LEASE"
RENEW_EVERY = 20.0  # seconds between renewals
STALE_AFTER = 120.0  # seconds without a renewal after which a lease is taken over (six missed renewals)

# the leases this process holds, by the URL of what they cover (the latest taken, where one
# process took one URL's twice: a StoreWriter checks its own lease itself)
_held: dict[str, Lease] = {}
_held_lock = threading.Lock()


class _Taken(Exception):
    """The object store refused a conditional write of the lease (another writer's lease is there)."""


@dataclass(frozen=True)
class _Found:
    """A lease as a look-up finds it: its version (S3: the ETag; elsewhere its token), its record
    and the seconds since its last renewal."""

    version: str
    record: dict
    age: float

    def dead_here(self) -> bool:
        """Whether the holder ran on this host (by its name) and its process is gone: a writer
        killed here (SIGKILL, the OOM killer, a closed terminal), whose lease nobody renews."""
        pid = str(self.record.get("pid"))
        if self.record.get("host") != socket.gethostname() or not pid.isdigit() or int(pid) <= 0:
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return True
        except OSError:  # another user's process (EPERM): alive
            return False
        return False

    def holder(self) -> str:
        started = self.record.get("started")
        since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(float(started))) if started else "?"
        return f"host {self.record.get('host', '?')}, pid {self.record.get('pid', '?')}, since {since}"


class Lease:
    """A lease this process holds on `target` (through the object `key`); see the module docstring.
    `what` names the target in messages ("store", "run directory", "prediction output")."""

    def __init__(self, target: storage.Location, key: storage.Location, what: str, record: dict, version: str):
        self.target, self.key, self.what = target, key, what
        self.record, self.version = record, version
        self.confirmed = time.monotonic()  # when the last write that the store accepted was sent
        self.lost = False  # another writer took it over, or it was deleted
        self.taken_by: _Found | None = None  # the lease as found when it was lost (None: gone)
        self.released = False
        self._lock = threading.Lock()  # one renewal at a time (the thread's, a check's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._renewing, name=f"streamfit lease {key.url}", daemon=True)

    def _renewing(self) -> None:
        while not self._stop.wait(RENEW_EVERY) and not self.lost:
            self.renew()

    def renew(self) -> None:
        """Write the lease again if it is still this process's (If-Match on its last version);
        a refusal marks it lost; an error of the request is logged and tried again next time."""
        with self._lock:
            if self.lost or self.released:
                return
            sent = time.monotonic()
            record = {**self.record, "renewed": time.time()}
            try:
                self.version = _replace(self.key, record, self.version)
            except _Taken:
                self.lost = True
                with contextlib.suppress(OSError):
                    self.taken_by = _look(self.key)
                return
            except OSError as e:
                log.warning("%s: could not renew the lease (%s); trying again in %.0f s", self.key.url, e, RENEW_EVERY)
                return
            self.record, self.confirmed = record, sent

    def check(self) -> None:
        """StreamfitError if this lease is no longer this process's (before a commit)."""
        if not self.lost and time.monotonic() - self.confirmed >= STALE_AFTER / 2:
            self.renew()
        if self.lost:
            who = (
                f"to another writer ({self.taken_by.holder()}), which took it over after {STALE_AFTER:.0f} s without "
                "a renewal"
                if self.taken_by is not None
                else f"({self.key.url} was deleted by another process)"
            )
            raise StreamfitError(
                f"{self.target.url}: this process lost its lease {who}; nothing of this {self.what} was committed: "
                "check that no other writer is still writing it, then run this again"
            )

    def release(self, *, delete: bool = True) -> None:
        """Stop renewing and, with `delete`, delete the lease if it is still this process's
        (delete=False: the caller deletes the prefix that holds it). Idempotent."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        with _held_lock:
            if _held.get(self.target.url) is self:
                del _held[self.target.url]
        with self._lock:
            if delete and not self.lost and not self.released:
                try:
                    _delete(self.key, self.version)
                except _Taken:
                    pass  # taken over meanwhile: the other writer's now
                except OSError as e:
                    log.warning(
                        "%s: could not delete the lease (%s); it is taken over %.0f s after its last renewal",
                        self.key.url,
                        e,
                        STALE_AFTER,
                    )
            self.released = True  # never renewed or deleted again


def take(target: storage.Location, what: str, *, key: storage.Location | None = None) -> Lease | None:
    """Take the lease of `target` (behind a URL; None on local disk, whose writers lock) before
    anything of it is written, and keep it renewed until `release`. `key`: the lease object
    (default `target/LEASE`). StreamfitError naming the holder if another writer's live lease
    is there; a stale one is taken over (a warning names the writer that left it)."""
    if target.local:
        return None
    key = key or target.join(LEASE)
    record = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "started": time.time(),
        "token": secrets.token_hex(8),
    }
    found: _Found | None = None
    for _ in range(5):  # the holder may release, or another taker win, between our write and our look
        record["renewed"] = time.time()
        try:
            try:
                version = _create(key, record)
            except _Taken:
                found = _look(key)
                if found is None:
                    continue  # released meanwhile: create it again
                dead = found.dead_here()
                if found.age < STALE_AFTER and not dead:
                    raise _refusal(target, key, what, found) from None
                try:
                    version = _replace(key, record, found.version)
                except _Taken:
                    continue  # another taker won, or the holder renewed: look again
                log.warning(
                    "%s: took over a lease %s (%s)",
                    key.url,
                    "whose writer's process is gone from this host"
                    if dead
                    else f"not renewed for {found.age:.0f} s: its writer is taken to be dead",
                    found.holder(),
                )
        except OSError as e:
            raise output_error(key.url, e) from e
        lease = Lease(target, key, what, record, version)
        with _held_lock:
            _held[target.url] = lease
        lease._thread.start()
        return lease
    if found is None:  # taken and released by others each time we looked
        raise StreamfitError(
            f"{target.url}: other writers took and released its lease {key.url} meanwhile; run this again"
        )
    raise _refusal(target, key, what, found)


def _refusal(target: storage.Location, key: storage.Location, what: str, found: _Found) -> StreamfitError:
    wait = max(1, int(-(-(STALE_AFTER - found.age) // 1)))  # whole seconds, rounded up
    delete = f"aws s3 rm {key.url}" if key.s3 else f"delete {key.url}"
    return StreamfitError(
        f"{target.url}: another streamfit process is writing this {what} right now ({found.holder()}, renewed "
        f"{found.age:.0f} s ago); wait for it to finish. If it is dead, the same command takes its lease over in "
        f"{wait} s ({STALE_AFTER:.0f} s after its last renewal), or at once after: {delete}"
    )


def check_held(target: storage.Location) -> None:
    """Before a commit or publish of `target` behind a URL: StreamfitError if a lease this process
    holds over it (on `target` or a directory above it) was lost (Lease.check)."""
    with _held_lock:
        covering = [
            lease for url, lease in _held.items() if target.url == url or target.url.startswith(url.rstrip("/") + "/")
        ]
    for lease in covering:
        lease.check()


def _body(record: dict) -> bytes:
    return json.dumps(record, sort_keys=True).encode()


def _s3_call(key: storage.Location, operation: str, **kwargs) -> dict:
    """One S3 request on the object `key` (s3fs's client: its errors as OSErrors); _Taken when a
    precondition did not hold (412, or 404 for If-Match on a deleted object)."""
    fs = key.fs
    bucket, name, _ = fs.split_path(key.path)
    try:
        return fs.call_s3(operation, Bucket=bucket, Key=name, **kwargs)
    except OSError as e:
        if storage.precondition_failed(e):
            raise _Taken from e
        raise


def _s3_put(key: storage.Location, record: dict, **condition) -> str:
    metadata = {name: str(record[name]) for name in ("host", "pid", "started")}
    return _s3_call(key, "put_object", Body=_body(record), Metadata=metadata, **condition)["ETag"]


def _create(key: storage.Location, record: dict) -> str:
    """Write the lease where there is none (_Taken if there is one); its version."""
    if key.s3:
        return _s3_put(key, record, IfNoneMatch="*")
    if _look(key) is not None:
        raise _Taken
    key.write_bytes(_body(record))
    return record["token"]


def _replace(key: storage.Location, record: dict, version: str) -> str:
    """Write the lease over the one of `version` (_Taken if it is another now, or gone)."""
    if key.s3:
        return _s3_put(key, record, IfMatch=version)
    _require_version(key, version)
    key.write_bytes(_body(record))
    return record["token"]


def _delete(key: storage.Location, version: str) -> None:
    """Delete the lease if it is still of `version` (_Taken if not)."""
    if key.s3:
        _s3_call(key, "delete_object", IfMatch=version)
        return
    _require_version(key, version)
    key.remove()


def _require_version(key: storage.Location, version: str) -> None:
    """Not on S3: _Taken unless the lease at `key` is there and of `version` (the look half of a
    look-then-write, not atomic: see the module docstring)."""
    found = _look(key)
    if found is None or found.version != version:
        raise _Taken


def _look(key: storage.Location) -> _Found | None:
    """The lease at `key`, None if there is none: on S3 one HEAD (the holder from its metadata,
    its age by the object store's clock), elsewhere a read of its record (its age by ours)."""
    if key.s3:
        try:
            head = _s3_call(key, "head_object")
        except (_Taken, FileNotFoundError):
            return None
        import email.utils

        meta = head.get("Metadata", {})
        record = {"host": meta.get("host"), "pid": meta.get("pid"), "started": meta.get("started")}
        date = head.get("ResponseMetadata", {}).get("HTTPHeaders", {}).get("date")
        now = email.utils.parsedate_to_datetime(date).timestamp() if date else time.time()
        return _Found(head["ETag"], record, now - head["LastModified"].timestamp())
    try:
        record = json.loads(key.read_bytes())
    except FileNotFoundError:
        return None
    except ValueError:  # damaged (a partial write of a non-atomic store): treat as stale
        return _Found("", {}, float("inf"))
    return _Found(str(record.get("token")), record, time.time() - float(record.get("renewed", 0)))
