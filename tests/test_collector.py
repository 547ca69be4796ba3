"""streamfit._collector: imports run with the garbage collector paused, what they made put out of
the young generations unscanned (issue 19, the small job's fixed costs). Each case runs in a child
process: the collector's state and the permanent generation are the process's own."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

PROBE = """
import gc, json, sys
from streamfit import _collector

scans = []
gc.callbacks.append(lambda phase, info: phase == "start" and scans.append(info["generation"]))
if sys.argv[1] == "embedder froze":
    kept = [[] for _ in range(100)]
    gc.freeze()
if sys.argv[1] == "command line":
    _collector.commit_process()
if sys.argv[2] == "disabled":
    gc.disable()
frozen = gc.get_freeze_count()
with _collector.imports_uncollected():
    paused = not gc.isenabled()
    made = [[i] for i in range(5000)]  # tracked containers, as an import's functions and dicts
    made.append(made)  # and a cycle
    scans_inside = len(scans)
in_old = sum(o is made for o in gc.get_objects(generation=2))
young = sum(o is made for o in gc.get_objects(generation=0) + gc.get_objects(generation=1))
print(json.dumps({
    "paused": paused, "scans_inside": scans_inside, "enabled_after": gc.isenabled(),
    "frozen_added": gc.get_freeze_count() - frozen, "in_old": in_old, "young": young,
}))
"""


def _probe(process: str, collector: str) -> dict:
    out = subprocess.run([sys.executable, "-c", PROBE, process, collector], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


@pytest.mark.parametrize("collector", ["enabled", "disabled"])
def test_an_embedding_process_gets_the_objects_in_the_oldest_generation_unscanned(collector):
    r = _probe("embedded", collector)
    assert r["paused"] and r["scans_inside"] == 0
    assert r["enabled_after"] == (collector == "enabled")  # restored, not forced on
    assert r["frozen_added"] == 0  # nothing left frozen
    assert r["in_old"] == 1 and r["young"] == 0  # moved to generation 2 without a pass


def test_a_command_line_process_freezes_what_the_block_imported():
    r = _probe("command line", "enabled")
    assert r["paused"] and r["scans_inside"] == 0 and r["enabled_after"]
    assert r["frozen_added"] >= 5001 and r["in_old"] == 0 and r["young"] == 0


def test_an_embedders_frozen_objects_stay_frozen():
    """gc.unfreeze would release what the embedding program froze: the objects are left young."""
    r = _probe("embedder froze", "enabled")
    assert r["paused"] and r["enabled_after"]
    assert r["frozen_added"] == 0 and r["in_old"] == 0 and r["young"] == 1


def test_the_cli_and_numbas_start_up_leave_the_collector_as_they_found_it():
    """Importing streamfit.cli, numba (streamfit._jit) and starting numba's target from Python
    (not a command line): the collector still enabled, nothing frozen."""
    code = (
        "import gc, streamfit.cli, streamfit._jit as j; j.start_target(); import sys; "
        "print(gc.isenabled(), gc.get_freeze_count(), 'streamfit.numba_target' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "0", "True"]


def test_importing_a_module_of_kernels_starts_numbas_target_with_the_collector_paused():
    """The first kernel a process defines (streamfit._jit.kernel) starts numba's target inside
    imports_uncollected: a separate `train` or `evaluate` command gets it before its first kernel
    call, not from numba's own first call with the collector running."""
    code = (
        "import gc, sys\n"
        "from streamfit import _collector\n"
        "_collector.commit_process()\n"
        "import streamfit._jit\n"
        "assert 'streamfit.numba_target' not in sys.modules\n"
        "frozen = gc.get_freeze_count()\n"
        "import streamfit.solvers.bcd_kernels\n"
        "from numba.core.registry import cpu_target\n"
        "print('streamfit.numba_target' in sys.modules, '_toplevel_target_context' in vars(cpu_target),"
        " gc.get_freeze_count() - frozen > 10000, gc.isenabled())"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["True", "True", "True", "True"]
