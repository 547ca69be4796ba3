"""A failure that this process's memory limit caused is named as such (streamfit.memory_limit)."""

import resource

import pytest

from streamfit import memory_limit

MAPPED = "/lib/libscipy_openblas.so: failed to map segment from shared object"


def _limited(monkeypatch, address_space=None, data=None):
    """getrlimit as under `ulimit -v` / `ulimit -d` of these many MiB (None: unlimited)."""
    caps = {resource.RLIMIT_AS: address_space, resource.RLIMIT_DATA: data}
    real = resource.getrlimit

    def getrlimit(kind):
        if kind in caps:
            cap = caps[kind]
            return (resource.RLIM_INFINITY if cap is None else cap * 2**20, resource.RLIM_INFINITY)
        return real(kind)

    monkeypatch.setattr(memory_limit.resource, "getrlimit", getrlimit)


def test_a_library_refused_memory_under_a_limit_is_one_line_naming_the_limit(monkeypatch):
    _limited(monkeypatch, address_space=160)
    try:
        try:
            raise OSError(MAPPED)
        except OSError as e:
            raise ImportError("numpy failed to import\n\nOriginal error was: x") from e
    except ImportError as e:
        caused = e
    assert memory_limit.limit_reached(caused, "starting (nothing was done)") == (
        f"error: out of memory while starting (nothing was done): {MAPPED}, under this process's limit of 160 MiB "
        "of address space (ulimit -v, prlimit --as); raise the limit (ulimit -v unlimited, or the batch job's "
        "memory request) and run the command again"
    )
    _limited(monkeypatch, address_space=160, data=100)
    line = memory_limit.limit_reached(MemoryError(), "`streamfit train` ran")
    assert line is not None and line.startswith("error: out of memory while `streamfit train` ran: MemoryError, ")
    assert "limit of 160 MiB of address space (ulimit -v, prlimit --as) and 100 MiB of data (ulimit -d" in line
    assert "(ulimit -v unlimited, ulimit -d unlimited, or" in line
    runtime = memory_limit.limit_reached(RuntimeError("can't start new thread"), "`streamfit train` ran")
    assert runtime is not None and ": can't start new thread, under" in runtime


@pytest.mark.parametrize("error", [ImportError("No module named 'numba'"), OSError(MAPPED), MemoryError()])
def test_other_failures_and_no_limit_are_left_to_the_caller(monkeypatch, error):
    """An ImportError that is not about memory, under a limit; a memory failure without any limit
    (a machine out of memory: the command's own out-of-memory line): None."""
    _limited(monkeypatch, address_space=160 if isinstance(error, ImportError) else None)
    assert memory_limit.limit_reached(error, "starting") is None
