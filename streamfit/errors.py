"""Exceptions raised by streamfit. Each message names the place (file, line, key) and the fix."""


class StreamfitError(Exception):
    """Base class: the CLI prints these as one clean message and exits with status 2."""


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


class StoreError(StreamfitError):
    """A store that is missing, incomplete, of another format version, or damaged."""


class CheckpointError(StreamfitError):
    """A checkpoint that is damaged or does not match the run's config or store."""


class ConfigError(StreamfitError):
    """A configuration file or option with a bad key or value."""
