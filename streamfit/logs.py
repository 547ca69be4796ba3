"""Where a `streamfit` command's log goes (stderr, `--log-file`) and its form (`--log-format`:
text lines, or JSON lines for log collectors)."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Literal

LogFormat = Literal["text", "json"]
TEXT = "%(levelname)s %(name)s: %(message)s"
# a record logged with extra={ECHOED: True} was printed to the terminal already (a result or an error
# line): it goes to the log file only
ECHOED = "echoed"
# Dask's own log level that `streamfit -q` asks for (None: not asked). Importing distributed sets
# the "distributed" logger's level from Dask's config (INFO), over a level set before that import,
# so the engine applies this one after it, in its process and on the cluster's workers.
_quiet_dask_level: int | None = None
# whether configure gave stderr a JSON handler (`--log-format json`): then the lines a command
# prints on stderr itself (its final `error:` line, inspect's `damaged:`) go through it as records
_json_stderr = False


def set_dask_level(level: int | None) -> None:
    """Ask for Dask's own log ("distributed") at `level` wherever a command runs Dask (None: Dask's
    default, ERROR and above at streamfit's default verbosity)."""
    global _quiet_dask_level
    _quiet_dask_level = level
    if level is not None:
        logging.getLogger("distributed").setLevel(level)


def dask_level() -> int | None:
    """The level set by set_dask_level, or None."""
    return _quiet_dask_level


def silence_dask_worker(level: int) -> None:
    """On a Dask worker process: its "distributed" loggers and their handlers at `level` (the
    traceback a surviving worker logs when it loses a peer mid-transfer, CommClosedError)."""
    for name in ("distributed", "tornado"):
        logger = logging.getLogger(name)
        logger.setLevel(max(level, logger.level))
        for handler in logger.handlers:
            handler.setLevel(max(level, handler.level))


class JsonLines(logging.Formatter):
    """One JSON object per record: {"time": ISO 8601 in UTC, "level", "logger", "message"}, the
    record's `fields` (extra={"fields": {...}}, e.g. a progress line's step, planned, elapsed_s
    and eta_s) and, where it has one, "exception": the traceback's text."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            **getattr(record, "fields", {}),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def _not_echoed(record: logging.LogRecord) -> bool:
    return not getattr(record, ECHOED, False)


def configure(level: int, *, log_file: str | None = None, fmt: LogFormat = "text") -> logging.Handler | None:
    """The root logger at `level`, writing to stderr in `fmt` (only warnings and errors there
    when `log_file` is given); with `log_file`, every record also goes to that file (appended).
    Returns the file's handler (the caller removes it when the command ends), or None. A root
    logger that has handlers already (a test's) keeps them instead of getting stderr's."""
    formatter = JsonLines() if fmt == "json" else logging.Formatter(TEXT)
    root = logging.getLogger()
    root.setLevel(level)
    if not root.handlers:
        stderr = logging.StreamHandler()
        stderr.setFormatter(formatter)
        stderr.addFilter(_not_echoed)
        if log_file:
            stderr.setLevel(logging.WARNING)
        root.addHandler(stderr)
        global _json_stderr
        _json_stderr = fmt == "json"
    if not log_file:
        return None
    handler = logging.FileHandler(log_file, encoding="utf-8")
    handler.setFormatter(formatter)
    root.addHandler(handler)
    return handler


def json_on_stderr() -> bool:
    """Whether stderr carries JSON lines (configure with `fmt="json"` installed its handler): a
    line for stderr is then logged, not printed, so that every line there is one JSON object."""
    return _json_stderr
