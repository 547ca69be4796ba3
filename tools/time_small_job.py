"""Where a small job's time goes, without a profiler: one `streamfit -q run PIPELINE.yaml` per
fresh process, with a timer wrapped around a few functions, for one or more streamfit source
trees side by side (issue 19).

    python tools/time_small_job.py PIPELINE.yaml [--src DIR ...] [--repeats 5] [--vw WORKDIR]

tools/profile_small_job.py runs the job under cProfile, whose cost per Python call inflates the
parts made of many small calls (a folder of 9645 documents read file by file) several times
over; here only the functions in PARTS are wrapped (a few calls each; a generator is timed
while it computes each item, not while its consumer works), so each part's wall and CPU
(process time: every thread of the process) seconds are what the job spends in it. A part that
calls itself counts its outermost call only. A module is wrapped when the job imports it (an
import hook), so the timer imports nothing the job would not: each import is paid inside the part
that makes it (numba's inside the first hashing). The top-level parts (`level` 0: the pipeline
file, the ingests, train, the model's load, evaluate, its file) follow one another; the others
(levels 1 and 2, indented) are inside the part above them and overlap where one calls another (hashing holds numba's
first kernel load); "in no part" is the total less `import streamfit.cli` and the top-level
parts (click's parsing, `run`'s own imports). Outside the total, from this tool's side: the
interpreter's start (the process started to the child's first line: wall from the tool's clock,
CPU the process's own by then) and its exit (the command returned to the process reaped: wall,
and the CPU the tool's getrusage of its children counts beyond the child's own count at its end:
atexit handlers, finalization, the garbage collector's last passes), and the process as a whole.
PIPELINE.yaml is a job as tools/bench_small_jobs.py writes it (`WORKDIR/job.yaml`). Each source
tree (`--src`: a directory holding the `streamfit` package, e.g. a `git archive` of main; the
installed package when none is given) gets its bytecode compiled first (`compileall`, as `pip
install` does: under PYTHONDONTWRITEBYTECODE every run would otherwise compile every module it
imports), runs the job once untimed (numba's cache filled, as after a user's first run), then
`--repeats` times, alternating between trees, each run started in its tree's directory; prints
the median of each part as a Markdown table. `--vw WORKDIR` also runs Vowpal Wabbit in every
round, after the trees (tools/bench_small_jobs.py's commands on the input files it left in
WORKDIR: VW alone, and VW with its TSV conversion timed in), and prints VW's medians and each
tree's process ÷ them, wall and CPU, from the same rounds.
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import bench_small_jobs as bench  # this folder's: Vowpal Wabbit's commands (--vw)

PARTS = [  # (level, part, module, attribute path, a generator?); level 0: one after another, 1, 2: inside them
    (0, "the pipeline file (read, checked)", "streamfit.config", "load_pipeline", False),
    (0, "ingest, both (read, hash, IDF pass, write)", "streamfit.ingest.pipeline", "ingest", False),
    (1, "folder open (layout listing, look-up)", "streamfit.ingest.sources.folder", "FolderSource.__init__", False),
    (1, "folder read", "streamfit.ingest.sources.folder", "FolderSource.__iter__", True),
    (1, "CSV/TSV read", "streamfit.ingest.sources.delimited", "CsvSource.__iter__", True),
    (
        1,
        "numba's first kernel load (target start-up) and the others",
        "numba.core.caching",
        "Cache.load_overload",
        False,
    ),
    (
        1,
        "hashing (with numba's import and first load)",
        "streamfit.ingest.hashing",
        "FeatureHasher.transform_text",
        False,
    ),
    (1, "IDF pass (the stage re-read, weighted, written)", "streamfit.ingest.pipeline", "_pass2", False),
    (1, "store closes (stage, training, test)", "streamfit.store.store", "StoreWriter.close", False),
    (0, "train (checks, run directory, steps, checkpoints, model)", "streamfit.train", "train", False),
    (1, "labels pass (init: positives per class, column sums)", "streamfit.solvers.ppdsparse", "_scan_task", False),
    (1, "ppdsparse steps", "streamfit.solvers.ppdsparse", "PPDSparseSolver.step", False),
    (2, "training matrix (chunks read, assembled)", "streamfit.solvers.ppdsparse", "build_data", False),
    (2, "solve_class (kernels, first load)", "streamfit.solvers.ppdsparse_kernels", "solve_class", False),
    (2, "class_objective kernel (with its load)", "streamfit.solvers.ppdsparse_kernels", "class_objective", False),
    (1, "checkpoint saves", "streamfit.solvers.driver", "_StateSaver.save", False),
    (1, "model write", "streamfit.model", "Model.save", False),
    (0, "model load", "streamfit.model", "load_model", False),
    (0, "evaluate (metrics over the test store)", "streamfit.metrics", "evaluate", False),
    (0, "evaluation.json", "streamfit.jobs", "write_evaluation", False),
]
IN_NO_PART = "in no part (click, `run`'s own imports and set-up)"

CHILD = """
import time
born = (time.time(), time.process_time())  # the interpreter's start: the tool's clock before the process started
import functools, importlib.machinery, json, sys
wall, cpu = time.perf_counter, time.process_time
spent = {{}}
def add(name, w, c):
    total = spent.setdefault(name, [0.0, 0.0])
    total[0] += w
    total[1] += c
start = (wall(), cpu())
import streamfit.cli
add("import streamfit.cli", wall() - start[0], cpu() - start[1])
def wrap(module, name, path, generator):
    owner = module
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
        if hasattr(f, "compile"):  # a numba kernel: a cold run's warm-up compiles it (precompile)
            timed.compile = f.compile
    setattr(owner, attribute, timed)
    if not outer:  # a function: also where streamfit's modules imported before the wrapping hold it by name
        for held, other in list(sys.modules.items()):  # (by name: a getattr would load a lazily loaded module)
            if held.partition(".")[0] == "streamfit" and getattr(other, attribute, None) is f:
                setattr(other, attribute, timed)
pending = {{}}  # module name: its parts, wrapped when the job imports it
for level, name, module, path, generator in {PARTS!r}:
    if module in sys.modules:
        wrap(sys.modules[module], name, path, generator)
    else:
        pending.setdefault(module, []).append((name, path, generator))
class WrapOnImport:
    def find_spec(self, fullname, path, target=None):
        if fullname not in pending:
            return None
        spec = importlib.machinery.PathFinder.find_spec(fullname, path)
        execute = spec.loader.exec_module
        def exec_module(module):
            execute(module)
            for part in pending.pop(fullname):
                wrap(module, *part)
        spec.loader.exec_module = exec_module
        return spec
sys.meta_path.insert(0, WrapOnImport())
sys.argv = ["streamfit", "-q", "run", sys.argv[1], "--overwrite"]
try:
    streamfit.cli.main()
except SystemExit as e:
    assert not e.code, e.code
add("total", wall() - start[0], cpu() - start[1])
assert not pending, f"never imported: {{sorted(pending)}}"
spent["clock"] = [born[0], born[1], time.time(), cpu()]  # the process's first line and its end, as the tool needs
print(json.dumps(spent))
"""
START, EXIT, PROCESS = "interpreter start (to the first line)", "interpreter exit (atexit, finalization)", "process"


def time_once(src: str | None, pipeline: str) -> dict[str, list[float]]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if src is not None:
        env["PYTHONPATH"] = os.path.abspath(src)
    before, started = resource.getrusage(resource.RUSAGE_CHILDREN), time.time()
    out = subprocess.run(
        [sys.executable, "-c", CHILD.format(PARTS=PARTS), pipeline],
        capture_output=True,
        text=True,
        env=env,
        cwd=os.path.abspath(src) if src is not None else tempfile.gettempdir(),
    )
    ended, after = time.time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    if out.returncode:
        sys.exit(f"the timed job failed ({src or 'installed package'}):\n{out.stderr}")
    spent = json.loads(out.stdout.strip().splitlines()[-1])
    born_wall, born_cpu, end_wall, end_cpu = spent.pop("clock")
    process_cpu = sum(getattr(after, k) - getattr(before, k) for k in ("ru_utime", "ru_stime"))
    spent[START] = [born_wall - started, born_cpu]
    spent[EXIT] = [ended - end_wall, process_cpu - end_cpu]
    spent[PROCESS] = [ended - started, process_cpu]
    return spent


def package_dir(src: str | None) -> str:
    """The streamfit package a run imports: src/streamfit, or the installed one."""
    if src is not None:
        return os.path.join(os.path.abspath(src), "streamfit")
    code = "import os, streamfit; print(os.path.dirname(streamfit.__file__))"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run(
        [sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env, cwd=tempfile.gettempdir()
    ).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("pipeline", help="the job's YAML (tools/bench_small_jobs.py writes WORKDIR/job.yaml)")
    ap.add_argument("--src", action="append", default=None, help="a source tree holding streamfit (repeatable)")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument(
        "--vw",
        metavar="WORKDIR",
        help="also run Vowpal Wabbit in every round, after the trees, on the input files that "
        "tools/bench_small_jobs.py left in WORKDIR (alone, and with its TSV conversion in its time)",
    )
    ap.add_argument("--vw-classes", type=int, default=10, help="VW's --oaa K (the job's classes)")
    ap.add_argument("--bits", type=int, default=18, help="VW's -b (the job's hashing width)")
    ap.add_argument("--passes", type=int, default=5, help="VW's --passes")
    args = ap.parse_args()
    sources = args.src or [None]
    runs: dict[str | None, list[dict[str, list[float]]]] = {src: [] for src in sources}
    for src in sources:  # untimed: fills numba's cache for this tree (a new tree compiles every kernel)
        compileall.compile_dir(package_dir(src), quiet=1)
        time_once(src, os.path.abspath(args.pipeline))
    vw: dict[str, list[list[float]]] = {VW_ALONE: [], VW_CONVERTED: []}
    for _ in range(args.repeats):
        for src in sources:
            runs[src].append(time_once(src, os.path.abspath(args.pipeline)))
        if args.vw:
            for name, run in ((VW_ALONE, bench.run_vw), (VW_CONVERTED, bench.run_vw_from_tsv)):
                result = bench.with_cpu(run, os.path.abspath(args.vw), args.vw_classes, args.bits, args.passes)
                vw[name].append([result["ingest"] + result["train"] + result["evaluate"], result["cpu"]])
    top = ["import streamfit.cli"] + [name for level, name, *_ in PARTS if level == 0]
    for each in runs.values():
        for run in each:
            run[IN_NO_PART] = [run["total"][k] - sum(run.get(name, [0.0, 0.0])[k] for name in top) for k in (0, 1)]
    rows = [("import streamfit.cli", 0)] + [(name, level) for level, name, *_ in PARTS]
    rows += [(IN_NO_PART, 0), ("total", 0), (START, 0), (EXIT, 0), (PROCESS, 0)]
    print(f"median of {args.repeats}, wall / CPU seconds; indented parts are inside the part above them")
    print("| part | " + " | ".join(src or "installed" for src in sources) + " |")
    print("|---|" + "---|" * len(sources))
    for name, level in rows:
        cells = []
        for src in sources:
            seconds = [run.get(name, [0.0, 0.0]) for run in runs[src]]
            w, c = (statistics.median(s[k] for s in seconds) for k in (0, 1))
            cells.append(f"{w:.3f} / {c:.3f}")
        print(f"| {'— ' * level}{name} | " + " | ".join(cells) + " |")
    if args.vw:
        print_vw(vw, {src: runs[src] for src in sources})


VW_ALONE = "VW alone (its input made before the clock)"
VW_CONVERTED = "VW with its TSV conversion (awk + shuf) in its time"


def print_vw(vw: dict[str, list[list[float]]], runs: dict[str | None, list[dict[str, list[float]]]]) -> None:
    """VW's medians (wall / CPU s, the same rounds as the trees') and each tree's process ÷ them."""
    med = {name: [statistics.median(t[k] for t in times) for k in (0, 1)] for name, times in vw.items()}
    print()
    print("| same rounds | wall s | CPU s |")
    print("|---|---|---|")
    for name, (w, c) in med.items():
        print(f"| {name} | {w:.3f} | {c:.3f} |")
    for src, each in runs.items():
        w, c = (statistics.median(run[PROCESS][k] for run in each) for k in (0, 1))
        for name, (vw_w, vw_c) in med.items():
            print(f"| {src or 'installed'}: process ÷ {name} | {w / vw_w:.2f} | {c / vw_c:.2f} |")


if __name__ == "__main__":
    main()
