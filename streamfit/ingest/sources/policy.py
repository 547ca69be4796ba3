"""What a source does with a record it cannot read."""

from __future__ import annotations

import json
import os
from typing import TextIO

from streamfit.errors import InputError

MODES = ("error", "skip", "quarantine")


class BadRecordPolicy:
    """What to do with a bad record: mode 'error' (raise InputError), 'skip' (count it),
    'quarantine' (count it and append the raw record + reason as one JSON line to a side file).
    `first` keeps the location and problem of the first one counted, for ingest's warning.

    A quarantine line is {"location", "problem", "hint", "raw"}; raw bytes that are not UTF-8
    are written with backslash escapes. The side file is opened (for appending) on the first
    bad record, so a clean input leaves no file behind."""

    def __init__(self, mode: str = "error", quarantine_path: str | None = None):
        if mode not in MODES:
            raise ValueError(f"bad-record mode must be one of {', '.join(MODES)}, not {mode!r}")
        if (mode == "quarantine") != (quarantine_path is not None):
            raise ValueError("a quarantine_path is needed for mode 'quarantine', and only for it")
        self.mode = mode
        self.quarantine_path = quarantine_path
        self.n_skipped = 0
        self.first: tuple[str, str] | None = None  # (location, problem) of the first bad record counted
        self._file: TextIO | None = None

    def bad(self, location: str, problem: str, raw: str | bytes = "", hint: str = "") -> None:
        """Report a bad record: raises InputError in error mode, else counts (and quarantines) it."""
        if self.mode == "error":
            raise InputError(location, problem, hint)
        self.n_skipped += 1
        if self.first is None:
            self.first = (location, problem)
        if self.mode == "quarantine":
            if self._file is None:
                assert self.quarantine_path is not None  # required with mode 'quarantine' (__init__)
                os.makedirs(os.path.dirname(os.path.abspath(self.quarantine_path)), exist_ok=True)  # as a store's
                self._file = open(self.quarantine_path, "a", encoding="utf-8")
            if isinstance(raw, bytes):
                raw = raw.decode("utf-8", "backslashreplace")
            entry = {"location": location, "problem": problem, "hint": hint, "raw": raw}
            self._file.write(json.dumps(entry) + "\n")

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None

    def __enter__(self) -> BadRecordPolicy:
        return self

    def __exit__(self, *exc) -> None:
        self.close()
