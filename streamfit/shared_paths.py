"""Whether the workers of a joined Dask cluster (--scheduler) see a local path as this process does.

This process cannot look at the workers' disks, so it asks a worker, once per path, before any
task reads or writes there (Engine.require_shared, which names the first path a worker does not
see, the worker and the fix):

- a path the workers **read** (an input file or folder, a store) must hold the same thing there:
  a file of the same size whose first SIGNATURE_BYTES bytes are the same, or a folder holding the
  same names with the same file sizes (`signature`). A copy on every worker's own disk passes; a
  missing path, or another file or folder at the same path, does not.
- a path the workers **write** (a `--out` store, a run directory) must be the same folder: this
  process writes a marker file there (`Marker`: a random name and token) and the worker must read
  the token back from it; the marker is removed afterwards. An empty folder at the same path on
  another disk passes a look at names and sizes, and the workers' writes would then land where
  this process never sees them; it does not pass this.

A path that does not exist here yet stands for its nearest existing folder (`nearest_existing`).
"""

from __future__ import annotations

import hashlib
import os
import uuid

SIGNATURE_BYTES = 1 << 16  # the first bytes of a file that its signature hashes
MARKER_PREFIX = ".streamfit-shared-"  # a marker file's name starts so (then 32 hex digits)

# why a worker does not see a path as this process does (`unlike`), as the message puts it
MISSING = ""
OTHER_FILE = " (it sees another file at this path: not the same size and first bytes)"
OTHER_FOLDER = " (it sees another folder at this path: not the same names and file sizes)"
NO_MARKER = " (it sees another folder at this path: a file that this process wrote in it is not there)"


def nearest_existing(path: str) -> str:
    """The absolute path, or its nearest existing parent folder when it does not exist (yet)."""
    path = os.path.abspath(path)
    while not os.path.exists(path) and os.path.dirname(path) != path:
        path = os.path.dirname(path)
    return path


def signature(path: str) -> str | None:
    """SHA-256 hex of what is at `path`: a file's size and first SIGNATURE_BYTES bytes; a folder's
    entries (name, file or folder, a file's size), sorted, markers left out; None when nothing is
    there."""
    if not os.path.exists(path):
        return None
    digest = hashlib.sha256()
    try:
        if os.path.isdir(path):
            with os.scandir(path) as entries:
                for entry in sorted(entries, key=lambda e: e.name):
                    if entry.name.startswith(MARKER_PREFIX):  # another check's, there for a moment
                        continue
                    size = entry.stat().st_size if entry.is_file() else -1
                    digest.update(f"{entry.name}\0{size}\n".encode("utf-8", "surrogateescape"))
        else:
            with open(path, "rb") as f:
                digest.update(os.fstat(f.fileno()).st_size.to_bytes(8, "little"))
                digest.update(f.read(SIGNATURE_BYTES))
    except FileNotFoundError:
        return None
    return digest.hexdigest()


class Marker:
    """A marker file in `folder` (an existing folder) for as long as the `with` lasts: its path
    (`path`) and the random token it holds (`token`). OSError when the folder cannot be written."""

    def __init__(self, folder: str):
        self.token = uuid.uuid4().hex
        self.path = os.path.join(folder, MARKER_PREFIX + uuid.uuid4().hex)

    def __enter__(self) -> Marker:
        with open(self.path, "x", encoding="ascii") as f:
            f.write(self.token)
        return self

    def __exit__(self, *exc) -> None:
        try:
            os.remove(self.path)
        except FileNotFoundError:
            pass


def unlike(read: dict[str, str | None], written: dict[str, tuple[str, str]]) -> dict[str, str]:
    """Run on a worker: {path: why (MISSING, OTHER_FILE, OTHER_FOLDER, NO_MARKER)} for the paths it
    does not see as the asking process does. read: {path: its signature there}; written: {folder:
    (the path of a marker file in it, the token the file holds)}."""
    found: dict[str, str] = {}
    for path, expected in read.items():
        here = signature(path)
        if here != expected:
            found[path] = MISSING if here is None else OTHER_FOLDER if os.path.isdir(path) else OTHER_FILE
    for folder, (marker, token) in written.items():
        if not os.path.exists(folder):
            found[folder] = MISSING
            continue
        try:
            with open(marker, encoding="ascii") as f:
                seen = f.read() == token
        except (OSError, UnicodeDecodeError):
            seen = False
        if not seen:
            found[folder] = NO_MARKER
    return found
