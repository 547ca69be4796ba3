"""Would numba's start-up in a background thread shorten a small job? (issue 19)

    python tools/time_numba_overlap.py PIPELINE.yaml [--repeats 8] [--cpus 0]

numba's CPU target start-up (`BaseContext.refresh()`: numba's lowering modules, scipy.linalg for
its BLAS check, cffi, the typing registries) is paid at a process's first kernel load, in a
small job the first hashing. The idea measured here: start it in a thread early, so that it
overlaps the main thread's work until then (imports, the pipeline file, reading and tokenising
the documents). Each run is one fresh process running `streamfit -q run PIPELINE.yaml` up to
the end of its first `FeatureHasher.transform_text` call (then it exits), in one of three ways:

    none:   as the CLI runs it;
    after:  a thread does `import numba` and the start-up (under numba's compiler lock, as a kernel
            load would) from the moment `import streamfit.cli` has finished;
    before: the same thread started before `import streamfit.cli`.

After one untimed run (numba's cache filled), the ways alternate, `--repeats` rounds; printed
per way: the medians of the wall seconds from the process's start to the end of the first
hashing, of the process's CPU seconds (all threads) over the same span, and of the main thread's
seconds waiting for a CPU (/proc/thread-self/schedstat: the load of other processes, 0 on an
idle machine). The thread can only save wall time where
one of the two threads runs without the GIL (system calls, ctypes calls into LLVM) while the
other works: on one CPU (`--cpus 0` pins the processes with os.sched_setaffinity) it cannot save
any. PIPELINE.yaml: a job as tools/bench_small_jobs.py writes it (`WORKDIR/job.yaml`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile

CHILD = """
import os, sys, threading, time
start_wall, start_cpu = time.perf_counter(), time.process_time()
def waited():
    return int(open("/proc/thread-self/schedstat").read().split()[1]) / 1e9
start_wait = waited()
def start_up():
    import numba
    from numba.core.compiler_lock import global_compiler_lock
    from numba.core.registry import cpu_target
    with global_compiler_lock:
        cpu_target.target_context.refresh()
way = sys.argv[2]
if way == "before":
    threading.Thread(target=start_up).start()
import streamfit.cli
if way == "after":
    threading.Thread(target=start_up).start()
import streamfit.ingest.hashing as hashing
transform = hashing.FeatureHasher.transform_text
def first_hashing(*args, **kwargs):
    transform(*args, **kwargs)
    print(time.perf_counter() - start_wall, time.process_time() - start_cpu, waited() - start_wait, flush=True)
    os._exit(0)
hashing.FeatureHasher.transform_text = first_hashing
sys.argv = ["streamfit", "-q", "run", sys.argv[1], "--overwrite"]
streamfit.cli.main()
"""

WAYS = ("none", "after", "before")


def run_once(pipeline: str, way: str, cpus: set[int] | None) -> list[float]:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, pipeline, way],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
    )
    if out.returncode:
        sys.exit(f"the job failed ({way}):\n{out.stderr}")
    return [float(x) for x in out.stdout.split()[-3:]]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pipeline", help="the job's YAML (tools/bench_small_jobs.py writes WORKDIR/job.yaml)")
    ap.add_argument("--repeats", type=int, default=8)
    ap.add_argument("--cpus", default=None, help="comma-separated CPU ids to pin the runs to, e.g. 0")
    args = ap.parse_args()
    cpus = {int(c) for c in args.cpus.split(",")} if args.cpus else None
    runs: dict[str, list[list[float]]] = {way: [] for way in WAYS}
    run_once(os.path.abspath(args.pipeline), "none", cpus)  # untimed: numba's cache filled, as after a first run
    for _ in range(args.repeats):
        for way in WAYS:
            runs[way].append(run_once(os.path.abspath(args.pipeline), way, cpus))
    print(f"start to the end of the first hashing, medians of {args.repeats}; CPUs: {args.cpus or 'all'}")
    print("| numba start-up thread | wall s | CPU s (all threads) | main thread waiting for a CPU s |")
    print("|---|---|---|---|")
    for way in WAYS:
        wall, cpu, wait = (statistics.median(r[k] for r in runs[way]) for k in range(3))
        print(f"| {way} | {wall:.3f} | {cpu:.3f} | {wait:.3f} |")


if __name__ == "__main__":
    main()
