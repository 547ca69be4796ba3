"""Exceptions raised by streamfit. Each message names the place (file, line, key) and the fix."""

import errno


class StreamfitError(Exception):
    """Base class: the CLI prints these as one clean message and exits with status 2."""


# an input that yields no record: an empty file, or a delimited file's header row alone
NO_RECORDS = "no records found: the input is empty, or holds a header row alone"


class InputError(StreamfitError):
    """A source record that cannot be read: names the file, the line or row group, and the fix."""

    def __init__(self, location: str, problem: str, hint: str = ""):
        self.location = location
        self.problem = problem
        self.hint = hint
        message = f"{location}: {problem}"
        if hint:
            message += f" ({hint})"
        super().__init__(message)

    def __reduce__(self):  # rebuilt from its parts where it is unpickled (raised on a Dask worker)
        return (type(self), (self.location, self.problem, self.hint))


class ScoringInputError(StreamfitError, ValueError):
    """A matrix a loaded model cannot score: not numeric (raw text), of another width than the
    model's features, or holding NaN or infinite values. Also a ValueError, as scikit-learn's
    estimators raise for such input."""


class StoreError(StreamfitError):
    """A store that is missing, incomplete, of another format version, or damaged."""


class CheckpointError(StreamfitError):
    """A checkpoint that is damaged or does not match the run's config or store."""


class ConfigError(StreamfitError):
    """A configuration file or option with a bad key or value."""


class OutputError(StreamfitError):
    """An output that cannot be written: disk full, a read-only location, a path through a file."""


class NotFittedError(StreamfitError, ValueError, AttributeError):
    """An estimator used before `fit`. A ValueError and an AttributeError, as scikit-learn's
    NotFittedError (once scikit-learn is imported, the estimators raise a subclass that is also
    sklearn.exceptions.NotFittedError)."""


class TimeLimitReached(StreamfitError):
    """A run passed its time limit and stopped right after writing checkpoint `step`; `--resume`
    continues it. The CLI exits with status 3, so a scheduler can tell it from a failure."""

    def __init__(self, run_dir: str, step: int, limit: float):
        self.run_dir, self.step, self.limit = run_dir, step, limit
        super().__init__(
            f"{run_dir}: stopped at the time limit ({limit:g} s) after checkpoint step {step}; "
            "continue with the same command plus --resume"
        )


class Terminated(BaseException):
    """A SIGTERM asked the command to stop, and it stopped at a safe point (streamfit.shutdown):
    the message says what the stop leaves. A BaseException, as KeyboardInterrupt, so that no
    `except Exception` takes it for an error to handle; raised only where stopping is safe, never
    from the signal handler. The CLI prints one line and exits with status 143."""


_OS_HINTS: dict[int | None, str] = {  # keyed by OSError.errno, which may be None
    errno.ENOSPC: "the disk is full: free space, then re-run (train: with --resume, from the last checkpoint)",
    errno.EDQUOT: "the disk quota is exceeded: free space, then re-run (train: with --resume)",
    errno.EFBIG: (
        "a file larger than this process may write (its file-size limit: `ulimit -f`, a batch system's) or the "
        "file system allows: raise the limit or write elsewhere, then re-run (train: with --resume, from the last "
        "checkpoint)"
    ),
    errno.EROFS: "the location is read-only: choose a writable one",
    errno.EACCES: "permission denied: choose a writable location",
    errno.EPERM: "permission denied: choose a writable location",
    errno.ENOTDIR: "a parent of this path is a regular file, not a directory: choose another path",
    errno.EEXIST: "a file is in the way: remove it or choose another path",
}


def exception_chain(error: BaseException) -> list[BaseException]:
    """`error` and the exceptions it came from (each one's __cause__, else its __context__), in
    that order, each once."""
    chain: list[BaseException] = []
    e: BaseException | None = error
    while e is not None and all(e is not seen for seen in chain):
        chain.append(e)
        e = e.__cause__ or e.__context__
    return chain


def os_error_hint(e: OSError) -> str:
    """What to do about an operating-system error on a path."""
    return _OS_HINTS.get(e.errno, "check that the location exists, is writable and has free space")


def output_error(path: str, e: OSError) -> OutputError:
    """The error to raise when writing `path` failed with `e`: names the path, the cause and the
    fix (for an object store's refusal, its code and where credentials go, not a disk's hint)."""
    from streamfit.storage import client_error_message  # storage imports this module

    refused = client_error_message(e)
    if refused is not None:
        return OutputError(f"{path}: cannot write: {refused}")
    return OutputError(f"{path}: cannot write ({e.strerror or e}); {os_error_hint(e)}")


def stdout_error(e: OSError, stream: str = "stdout") -> OutputError:
    """A failed write to stdout (or another stream: stderr, a FIFO): names it, the cause and where
    the fix lies (the file or device the stream was sent to), not a hint about the command's own
    outputs."""
    return OutputError(
        f"{stream}: cannot write ({e.strerror or e}): the file or device this command's output was sent to refused "
        "it; free space there, or send the output elsewhere"
    )
