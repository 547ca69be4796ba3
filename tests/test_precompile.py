"""`streamfit compile` and the first-use line: after the command a fresh process compiles
nothing; a fit that compiles says so once; the kernels unified to one signature stay so."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys

import numba
import numpy as np
import pytest
from numba_compilations import COUNTING

from streamfit.precompile import announce_compilation

# a fresh process: an estimator fit and a CLI train on other data than the warm-up's, counting
# the compilations of streamfit's kernels (numba's "numba:compile" event fires for a compilation,
# not for a load from the cache)
_FRESH_FIT = (
    COUNTING
    + """
import sys, numpy as np
from sklearn.datasets import load_iris
import streamfit
from streamfit.cli import main
X, y = load_iris(return_X_y=True)
streamfit.FBPDClassifier(max_iter=3).fit(X, y).predict(X)
with open(sys.argv[1] + "/iris.svm", "w") as f:
    for row, label in zip(X, y):
        f.write(f"{label} " + " ".join(f"{j + 1}:{v}" for j, v in enumerate(row)) + "\\n")
for args in (["ingest", sys.argv[1] + "/iris.svm", "--no-hash", "--out", sys.argv[1] + "/iris.zarr"],
             ["train", sys.argv[1] + "/iris.zarr", "--solver", "fbpd", "-p", "max_iter=3", "--out", sys.argv[1] + "/run"]):
    try:
        main(args, standalone_mode=False)
    except SystemExit as e:
        assert not e.code
print("compiled:", sorted(set(compiled)))
"""
)


# a fresh process with an empty cache: every kernel is compiled here, so each dispatcher lists
# every signature its callers asked for (a caller loaded from the cache would ask for none)
_SIGNATURES = """
import json, numpy as np
from streamfit.ingest import hashing_kernels
from streamfit.ingest.hashing import FeatureHasher, HashingConfig
from streamfit.ingest.sources import libsvm
FeatureHasher(HashingConfig(n_features=2**10, ngram_range=(1, 2))).transform_text(["a b c d", "e f g h i j"])
buf = np.frombuffer(b"1 3:1 2:2\\n0 1:1\\n", dtype=np.uint8)
libsvm._parse(buf, 0, buf.size, 10, False, 0)  # its first row is out of order: _sort_row
kernels = {
    "hash_ngrams": hashing_kernels.hash_ngrams,
    "radix_sort": hashing_kernels.radix_sort,
    "grow": hashing_kernels.grow,
    "murmur3_32": hashing_kernels.murmur3_32,
    "_sort_row": libsvm._sort_row,
}
print(json.dumps({name: [str(s) for s in d.signatures] for name, d in kernels.items()}))
"""


@pytest.mark.slow
def test_compile_then_a_fresh_fit_compiles_nothing(tmp_path):
    """One fresh cache for three processes (they share the ingest kernels' compilation): the
    signatures of the kernels unified to one, `streamfit compile --solver fbpd`, then a fit and a
    CLI ingest + train on other data, which compile nothing."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba-cache"))
    _check_one_signature_per_argument_types(env)
    done = subprocess.run(
        [sys.executable, "-m", "streamfit.cli", "compile", "--solver", "fbpd", "--jobs", "2"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "compiled fbpd in" in done.stdout and "compiled ingest in" in done.stdout
    fit = subprocess.run(
        [sys.executable, "-c", _FRESH_FIT, str(tmp_path)], env=env, capture_output=True, text=True, check=False
    )
    assert fit.returncode == 0, fit.stderr
    assert "compiled: []" in fit.stdout, fit.stdout
    assert "first use after installation" not in fit.stderr


def test_a_compiling_fit_says_so_once(caplog):
    def add_one(x):
        return x + 1

    add_one.__module__ = "streamfit.example"  # the line is about streamfit's kernels only
    kernel = numba.njit(add_one)  # not cached: compiles in this process
    caplog.set_level(logging.INFO, logger="streamfit.train")
    with announce_compilation("bcd"):
        kernel(1)
        kernel(2.0)  # a second compilation: no second line
    lines = [r.getMessage() for r in caplog.records if "first use after installation" in r.getMessage()]
    assert len(lines) == 1
    assert lines[0].startswith("bcd: compiling") and "`streamfit compile --solver bcd`" in lines[0]
    caplog.clear()
    with announce_compilation("bcd"):
        kernel(3)  # compiled already: nothing to say
    kernel(np.float32(1.0))  # outside the block: nothing either
    assert not caplog.records


def _check_one_signature_per_argument_types(env: dict) -> None:
    """A counter that starts at 0 is typed Literal[int](0) until numba sees the loop's increments,
    and its callee was compiled for that type too (a whole second compilation): each of these
    was compiled two to four times on a first use. (ppdsparse's _search and _cholesky_solve had
    the same fix; compiling solve_class here would cost 20 CPU seconds.)"""
    done = subprocess.run([sys.executable, "-c", _SIGNATURES], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    signatures = json.loads(done.stdout.strip().splitlines()[-1])
    expected = {
        "hash_ngrams": 1,
        "radix_sort": 1,
        "grow": 2,  # int32 indices, float32 values
        "murmur3_32": 2,  # the read-only text and the writable n-gram scratch
        "_sort_row": 1,
    }
    assert {name: len(s) for name, s in signatures.items()} == expected, signatures
    assert not [s for sigs in signatures.values() for s in sigs if "Literal" in s]
