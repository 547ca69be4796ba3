"""Where a small job's time goes, without a profiler: one `streamfit -q run PIPELINE.yaml` per
fresh process, with a timer wrapped around a few functions, for one or more streamfit source
trees side by side (issue 19).

    python tools/time_small_job.py PIPELINE.yaml [--src DIR ...] [--repeats 5]

tools/profile_small_job.py runs the job under cProfile, whose cost per Python call inflates the
parts made of many small calls (a folder of 9645 documents read file by file) several times
over; here only the functions in PARTS are wrapped (a few calls each; a generator is timed
while it computes each item, not while its consumer works), so each part's wall and CPU
(process time: every thread of the process) seconds are what the job spends in it. A part that
calls itself counts its outermost call only; the parts overlap where one calls another
(hashing holds numba's first kernel load). PIPELINE.yaml is a job as tools/bench_small_jobs.py
writes it (`WORKDIR/job.yaml`). Each source tree (`--src`: a directory holding the `streamfit`
package, e.g. a `git archive` of main; the installed package when none is given) runs the job
`--repeats` times, alternating between trees, each run started in its tree's directory; prints
the median of each part as a Markdown table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

PARTS = [  # (part, module, attribute path, a generator?)
    ("folder open (layout listing, look-up)", "streamfit.ingest.sources.folder", "FolderSource.__init__", False),
    ("folder read", "streamfit.ingest.sources.folder", "FolderSource.__iter__", True),
    ("numba's first kernel load (target start-up) and the others", "numba.core.caching", "Cache.load_overload", False),
    ("hashing (with numba's first load)", "streamfit.ingest.hashing", "FeatureHasher.transform_text", False),
    ("store closes (stage, training, test)", "streamfit.store.store", "StoreWriter.close", False),
    ("ppdsparse steps", "streamfit.solvers.ppdsparse", "PPDSparseSolver.step", False),
    ("evaluate (metrics over the test store)", "streamfit.metrics", "evaluate", False),
]

CHILD = """
import functools, importlib, json, sys, time
wall, cpu = time.perf_counter, time.process_time
spent = {{}}
def add(name, w, c):
    total = spent.setdefault(name, [0.0, 0.0])
    total[0] += w
    total[1] += c
start = (wall(), cpu())
import streamfit.cli
add("import streamfit.cli", wall() - start[0], cpu() - start[1])
def wrap(name, module, path, generator):
    owner = importlib.import_module(module)
    *outer, attribute = path.split(".")
    for part in outer:
        owner = getattr(owner, part)
    f = getattr(owner, attribute)
    if generator:
        @functools.wraps(f)
        def timed(*args, **kwargs):
            items = f(*args, **kwargs)
            while True:
                w, c = wall(), cpu()
                try:
                    item = next(items)
                except StopIteration:
                    add(name, wall() - w, cpu() - c)
                    return
                add(name, wall() - w, cpu() - c)
                yield item
    else:
        running = [False]
        @functools.wraps(f)
        def timed(*args, **kwargs):
            if running[0]:
                return f(*args, **kwargs)
            running[0] = True
            w, c = wall(), cpu()
            try:
                return f(*args, **kwargs)
            finally:
                add(name, wall() - w, cpu() - c)
                running[0] = False
    setattr(owner, attribute, timed)
for part in {PARTS!r}:
    wrap(*part)
sys.argv = ["streamfit", "-q", "run", sys.argv[1], "--overwrite"]
try:
    streamfit.cli.main()
except SystemExit as e:
    assert not e.code, e.code
add("total", wall() - start[0], cpu() - start[1])
print(json.dumps(spent))
"""


def time_once(src: str | None, pipeline: str) -> dict[str, list[float]]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = os.path.abspath(src)
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(PARTS=PARTS), pipeline],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.abspath(src) if src is not None else tempfile.gettempdir(),
    )
    if out.returncode:
        sys.exit(f"the timed job failed ({src or 'installed package'}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pipeline", help="the job's YAML (tools/bench_small_jobs.py writes WORKDIR/job.yaml)")
    ap.add_argument("--src", action="append", default=None, help="a source tree holding streamfit (repeatable)")
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    sources = args.src or [None]
    runs: dict[str | None, list[dict[str, list[float]]]] = {src: [] for src in sources}
    for _ in range(args.repeats):
        for src in sources:
            runs[src].append(time_once(src, os.path.abspath(args.pipeline)))
    names = ["import streamfit.cli"] + [part[0] for part in PARTS] + ["total"]
    print(f"median of {args.repeats}, wall / CPU seconds")
    print("| part | " + " | ".join(src or "installed" for src in sources) + " |")
    print("|---|" + "---|" * len(sources))
    for name in names:
        cells = []
        for src in sources:
            seconds = [run.get(name, [0.0, 0.0]) for run in runs[src]]
            w, c = (statistics.median(s[k] for s in seconds) for k in (0, 1))
            cells.append(f"{w:.3f} / {c:.3f}")
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
