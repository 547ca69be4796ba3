"""streamfit._numpy_tooling: numpy.f2py and numpy.testing loaded on first use, not by SciPy's copy
of numpy's namespace when streamfit.cli is imported (issue 19, the small job's fixed costs). Each
case runs in a child process: what is imported is the process's own."""

from __future__ import annotations

import json
import subprocess
import sys

PROBE = """
import importlib, json, sys, types
if sys.argv[1] == "testing imported first":
    import numpy.testing
    first = sys.modules["numpy.testing"]
import streamfit.cli
import numpy
from scipy._lib.array_api_compat import numpy as xp  # SciPy's copy of numpy's namespace

def executed(name):  # a package whose code ran has imported its submodules
    return any(m.startswith(name + ".") for m in sys.modules)

after_import = {
    "scipy.sparse": "scipy.sparse" in sys.modules,
    "registered": all(n in sys.modules for n in ("numpy.f2py", "numpy.testing")),
    "f2py executed": executed("numpy.f2py"),
    "testing executed": executed("numpy.testing"),
    "same as scipy's": xp.testing is numpy.testing is sys.modules["numpy.testing"] and xp.f2py is numpy.f2py,
}
if sys.argv[1] == "testing imported first":
    after_import["kept"] = sys.modules["numpy.testing"] is first and type(first) is types.ModuleType
from numpy.testing import assert_array_equal
assert_array_equal(numpy.arange(3), [0, 1, 2])
used = {
    "testing executed": executed("numpy.testing"),
    "testing a module": type(numpy.testing) is types.ModuleType,
    "f2py main": callable(importlib.import_module("numpy.f2py").main),
    "f2py executed": executed("numpy.f2py"),
}
print(json.dumps({"after_import": after_import, "used": used}))
"""


def _probe(case: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, case], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_importing_the_cli_leaves_numpys_f2py_and_testing_unrun_until_used():
    r = _probe("fresh")
    assert r["after_import"] == {
        "scipy.sparse": True,  # SciPy's copy of numpy's namespace was made
        "registered": True,
        "f2py executed": False,
        "testing executed": False,
        "same as scipy's": True,
    }
    assert r["used"] == {"testing executed": True, "testing a module": True, "f2py main": True, "f2py executed": True}


def test_a_module_imported_before_the_cli_is_left_as_it_is():
    r = _probe("testing imported first")
    assert r["after_import"]["kept"] and r["after_import"]["testing executed"]
    assert not r["after_import"]["f2py executed"]  # the other one is still deferred
    assert r["used"]["f2py main"]
