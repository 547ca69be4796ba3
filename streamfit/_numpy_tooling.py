"""NumPy's f2py and testing packages loaded on first use, not by SciPy's import (issue 19: a
small job's fixed costs).

NumPy 2 imports its public submodules lazily (the package's module `__getattr__`), but SciPy
(1.15 and later) vendors array-api-compat, whose NumPy namespace copies `numpy`'s with `from
numpy import *` and `getattr(numpy, name)` over `dir(numpy)`: that imports every one of them,
among them `numpy.f2py` (the Fortran wrapper generator: its parser compiles about 60 regular
expressions and imports charset_normalizer) and `numpy.testing` (unittest, importlib.metadata).
No streamfit command uses either; together they cost about 0.08 CPU s of every command that
imports `scipy.sparse` (docs/benchmarks.md, "The small job, session 26").

`defer()` registers the two as lazily loaded modules (`importlib.util.LazyLoader`, the standard
library's recipe): each module object is put in `sys.modules` and set as numpy's attribute
without running its code, which runs in full on the first access to any of its attributes, so
`import numpy.testing`, `numpy.f2py.main` or `from numpy.testing import assert_allclose` later
in the process get the whole module; SciPy's copy holds the same object. A module already
imported is left as it is, and one this NumPy does not have is skipped. On Python 3.11 the
first access must not race between threads (3.12's LazyLoader takes a lock); no command
touches these modules at all.
"""

from __future__ import annotations

import importlib.util
import sys

DEFERRED = ("numpy.f2py", "numpy.testing")


def defer() -> list[str]:
    """Registers each module of DEFERRED not yet imported as lazily loaded (the module's
    docstring); returns the names registered. Imports numpy."""
    import numpy

    registered = []
    for name in DEFERRED:
        if name in sys.modules:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None or not hasattr(spec.loader, "exec_module"):
            continue
        loader = importlib.util.LazyLoader(spec.loader)
        spec.loader = loader
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        loader.exec_module(module)  # marks it lazy: its code runs on the first attribute access
        setattr(numpy, name.rpartition(".")[2], module)  # found as an attribute: numpy's __getattr__ would import it
        registered.append(name)
    return registered
