"""Where a small job's time goes: one `streamfit run PIPELINE.yaml` profiled, part by part, for
one or more streamfit source trees side by side (issue 19).

    python tools/profile_small_job.py PIPELINE.yaml [--src DIR ...] [--repeats 3] [--timer cpu|wall]

PIPELINE.yaml is a job as tools/bench_small_jobs.py writes it (`WORKDIR/job.yaml`: ingest the
training folder, ingest the test folder `--like` it, train, evaluate). Each source tree (`--src`:
a directory holding the `streamfit` package, e.g. a `git archive` of main; "." by default, and
the installed package when none is given) runs the job `--repeats` times in fresh processes,
alternating between trees, under cProfile with the process's CPU time (`--timer cpu`: load-
independent; I/O waits such as fsync are not counted) or wall time (`--timer wall`). Each part is
the cumulative time of the functions named in PARTS (the first call of a recursive one), so the
rows overlap: "imports" holds every import, also those made inside the later parts (zarr's at
the first store write, numba's target modules at the first kernel load). Prints the best of the
repeats of each part and tree as a Markdown table. Work done in other threads (the commit's
concurrent fsyncs) is not seen by the profiler; `fsync calls` counts the main thread's only.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

PARTS = [  # (part, what pstats names: "file suffix:function" of cumulative, or "~builtin" of own time)
    ("imports (all)", "<frozen importlib._bootstrap>:_find_and_load"),
    ("numba kernel loads (target start-up at the first)", "numba/core/caching.py:load_overload"),
    ("reading the documents (folder listing and files)", "ingest/sources/folder.py:__iter__"),
    ("folder layout (listing at open)", "ingest/sources/folder.py:__init__"),
    ("hashing kernel", "ingest/hashing_kernels.py:hash_text"),
    ("store writes (close: chunks, manifest, commit)", "store/store.py:close"),
    ("commits (publish_dir)", "streamfit/storage.py:publish_dir"),
    ("fsync calls (main thread)", "~<built-in method posix.fsync>"),
    ("removing files and folders (rmtree)", "shutil.py:rmtree"),
    ("ppdsparse steps", "solvers/ppdsparse.py:step"),
    ("of them solve_class (its kernels)", "solvers/ppdsparse_kernels.py:solve_class"),
    ("checkpoints (driver saves)", "streamfit/checkpoint.py:save"),
    ("run log lines", "streamfit/runlog.py:log"),
    ("model write", "streamfit/model.py:save"),
    ("model load", "streamfit/model.py:load_model"),
    ("evaluate (metrics over the test store)", "streamfit/metrics.py:evaluate"),
]

CHILD = """
import cProfile, pstats, sys, time
timer = time.process_time if sys.argv[1] == "cpu" else time.perf_counter
sys.argv = ["streamfit", "-q", "run", sys.argv[2], "--overwrite"]
profile = cProfile.Profile(timer)
start = timer()
profile.enable()
try:
    import streamfit.cli
    streamfit.cli.main()
except SystemExit as e:
    assert not e.code, e.code
profile.disable()
total = timer() - start
parts = {PARTS!r}
stats = pstats.Stats(profile).stats
found = {{name: 0.0 for name, _ in parts}}
for (file, line, func), (cc, nc, tt, ct, callers) in stats.items():
    for name, key in parts:
        if key.startswith("~"):
            if func == key[1:]:
                found[name] += tt
        elif file.endswith(key.split(":")[0]) and func == key.split(":")[1]:
            found[name] += ct
print("TOTAL", total)
for name, _ in parts:
    print("PART", found[name], name)
"""


def profile(src: str | None, pipeline: str, timer: str) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = os.path.abspath(src)
    code = CHILD.format(PARTS=PARTS)
    out = subprocess.run(
        [sys.executable, "-c", code, timer, pipeline],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
    )
    if out.returncode:
        sys.exit(f"the profiled job failed ({src or 'installed package'}):\n{out.stderr}")
    result = {}
    for line in out.stdout.splitlines():
        if line.startswith("TOTAL "):
            result["total (profiled)"] = float(line.split()[1])
        elif line.startswith("PART "):
            _, seconds, name = line.split(" ", 2)
            result[name] = float(seconds)
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pipeline", help="the job's YAML (tools/bench_small_jobs.py writes WORKDIR/job.yaml)")
    ap.add_argument("--src", action="append", default=None, help="a source tree holding streamfit (repeatable)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timer", choices=["cpu", "wall"], default="cpu")
    args = ap.parse_args()
    sources = args.src or [None]
    runs: dict[str | None, list[dict[str, float]]] = {src: [] for src in sources}
    for _ in range(args.repeats):
        for src in sources:
            runs[src].append(profile(src, os.path.abspath(args.pipeline), args.timer))
    names = ["total (profiled)"] + [name for name, _ in PARTS]
    labels = [src or "installed" for src in sources]
    print(f"best of {args.repeats}, {args.timer} seconds")
    print("| part | " + " | ".join(labels) + " |")
    print("|---|" + "---|" * len(labels))
    for name in names:
        cells = [f"{min(r[name] for r in runs[src]):.3f}" for src in sources]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
