"""A small text job end to end with the CLI, side by side with Vowpal Wabbit (issue 19).

R8 (Reuters-21578, 8 classes, 5485 training documents) is not available offline, so the job is
an R8-sized subset of 20 Newsgroups "bydate" (/work/shared/data/20newsgroups): the first
`--groups` newsgroups in alphabetical order (10 by default: 5 650 training and 3 761 test
documents), raw text one file per document. Both tools read the same documents:

    streamfit: `streamfit ingest` train folder (hashed to 2^bits log-TF·IDF, l2-normalized)
               -> `streamfit ingest --like` test folder -> `streamfit train` -> `streamfit evaluate`,
               each a fresh CLI process, as a new user runs them (imports and engine start-up
               included; the numba cache warm, as after a first run); and the same job as one
               `streamfit run PIPELINE.yaml` (one process);
    vw:        `--oaa K -b bits --passes 5 -c -k` on the training file, then `-t` on the test file,
               each in a fresh Python process through the vowpalwabbit package (which ships no
               `vw` executable); its input files (lowercased word tokens, `label | w1 w2 ...`)
               are written from the folders before the clock starts, and that conversion is
               timed separately;
    vw, TSV:   the same VW commands on input converted from the TSV files (below) the way a VW
               user would, one timed shell line (VW_CONVERT: awk maps each label to 1..K,
               lowercases, keeps the words of two or more letters/digits; shuf puts the training
               lines in a fixed random order), the conversion's seconds in the row's total.

Two inputs (`--inputs`): the folders (one file per document), and one headerless TSV file per
split (`label<TAB>text`, R8's own layout: tabs and newlines of a document become spaces; VW
also reads one file). `--src DIR` times the package found in DIR (a source tree, e.g. a
worktree) instead of the installed one (the `streamfit` console script runs with PYTHONPATH=DIR;
a PYTHONPATH of the caller's is not passed on: without --src the installed package is timed).
`--baseline-src DIR` also times the streamfit rows with the package found
in DIR (e.g. an export of main: `git archive main | tar -x -C DIR`) in the same run, for before /
after. Each package gets its bytecode compiled first (`compileall`, as `pip install` does:
otherwise a PYTHONDONTWRITEBYTECODE environment recompiles every module in every process) and
one warm-up `streamfit run` (fills numba's cache, as a user's first run does). `--repeats N`
runs every row N times, in rounds that alternate the packages and VW (a change of the machine's
load then hits each alike), and prints each column's median.

Prints `streamfit --help` and `import streamfit.cli` times, then one table row per tool and
input (wall seconds of each step, total, CPU seconds, test accuracy) with the ratios to VW
without its input conversion ("/ vw") and with it ("/ vw+tsv").
Usage:

    python tools/bench_small_jobs.py [--tarball PATH] [--groups 10] [--bits 18] [--passes 5]
        [--solver ppdsparse] [-p KEY=VALUE ...] [--n-workers N] [--workdir DIR]
        [--inputs folder,tsv] [--src DIR] [--baseline-src DIR] [--repeats N]

Needs the `bench` extra (vowpalwabbit).
"""

from __future__ import annotations

import argparse
import compileall
import csv
import json
import os
import random
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time

TARBALL = "/work/shared/data/20newsgroups/20news-bydate.tar.gz"
WORD = re.compile(r"[a-z0-9]{2,}")


def extract_subset(tarball: str, groups: int, root: str) -> list[str]:
    """Extracts the first `groups` newsgroups (sorted) of both splits to root/{train,test}/<group>/;
    returns the group names."""
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.isfile() and m.name.count("/") >= 2]
        names = sorted({m.name.split("/")[-2] for m in members})[:groups]
        for m in members:
            split, group, doc = m.name.split("/")[-3:]
            if group not in names:
                continue
            where = os.path.join(root, "train" if split.endswith("train") else "test", group)
            os.makedirs(where, exist_ok=True)
            with tar.extractfile(m) as src, open(os.path.join(where, doc), "wb") as dst:  # type: ignore[union-attr]
                dst.write(src.read())
    return names


def write_vw(folder: str, groups: list[str], out: str) -> int:
    """One VW line per document of folder/<group>/: `class | tokens` (class 1..K), the words of
    two or more letters/digits, lowercased (streamfit's tokenizer keeps the same words), in a
    fixed random order (VW learns online: documents sorted by class would defeat it)."""
    lines = []
    for k, group in enumerate(groups, start=1):
        for doc in sorted(os.listdir(os.path.join(folder, group))):
            with open(os.path.join(folder, group, doc), encoding="latin-1") as src:
                words = WORD.findall(src.read().lower())
            lines.append(f"{k} | {' '.join(words)}\n")
    random.Random(0).shuffle(lines)
    with open(out, "w") as f:
        f.writelines(lines)
    return len(lines)


def write_tsv(folder: str, groups: list[str], out: str) -> None:
    """One `group<TAB>text` line per document of folder/<group>/ (sorted, as the folder source
    reads them), UTF-8, written by the csv module (Excel dialect: a cell holding a quote is
    quoted), so the reader gets each text back as written. A document's tabs and line breaks
    become spaces (its tokens stay the same)."""
    with open(out, "w", encoding="utf-8", newline="") as f:
        writer = csv.writer(f, delimiter="\t", lineterminator="\n")
        for group in groups:
            for doc in sorted(os.listdir(os.path.join(folder, group))):
                with open(os.path.join(folder, group, doc), encoding="latin-1") as src:
                    text = " ".join(" ".join(src.read().split("\t")).splitlines())
                writer.writerow([group, text])


CPU = {"seconds": 0.0}  # user + system CPU seconds of the commands timed so far (load-independent-ish)


ENV = dict(os.environ)  # the environment of the commands: PYTHONPATH selects the baseline package


def timed(cmd: list[str]) -> tuple[float, str]:
    """Runs cmd; its wall seconds and stdout. Adds its CPU seconds to CPU["seconds"]."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    if out.returncode:
        sys.exit(f"{' '.join(cmd)} failed:\n{out.stderr}")
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    CPU["seconds"] += after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return wall, out.stdout


def with_cpu(run, *args) -> dict:
    """run(*args)'s result with "cpu": the CPU seconds of its commands."""
    start = CPU["seconds"]
    result = run(*args)
    return {**result, "cpu": CPU["seconds"] - start}


VW_TRAIN = """
import vowpalwabbit, sys
vw = vowpalwabbit.Workspace(sys.argv[1])
vw.run_parser()
vw.finish()
"""


def run_vw(work: str, k: int, bits: int, passes: int, prefix: str = "") -> dict:
    """VW trained on WORK/{prefix}train.vw and tested on WORK/{prefix}test.vw."""
    train_s, _ = timed(
        [
            sys.executable,
            "-c",
            VW_TRAIN,
            f"--oaa {k} -b {bits} --passes {passes} -c -k --quiet -d {work}/{prefix}train.vw "
            f"--cache_file {work}/{prefix}train.vw.cache -f {work}/{prefix}model.vw",
        ]
    )
    test_s, _ = timed(
        [
            sys.executable,
            "-c",
            VW_TRAIN,
            f"-t -i {work}/{prefix}model.vw --quiet -d {work}/{prefix}test.vw -p {work}/{prefix}pred.txt",
        ]
    )
    with open(f"{work}/{prefix}pred.txt") as f:
        pred = [int(float(line.split()[0])) for line in f]
    with open(f"{work}/{prefix}test.vw") as f:
        true = [int(line.split(" ", 1)[0]) for line in f]
    accuracy = sum(p == t for p, t in zip(pred, true)) / len(true)
    return {"ingest": 0.0, "train": train_s, "evaluate": test_s, "accuracy": accuracy}


# The TSV files -> VW's input, one shell line as a VW user would write it: one awk over both files
# numbers each label 1..K in order of first appearance (one numbering for both: the groups sorted,
# as write_vw numbers them), lowercases the text and keeps the words of two or more ASCII
# letters/digits (words set two spaces apart, so one gsub drops the one-letter ones): the lines
# write_vw writes, in another order; shuf shuffles the training lines with a fixed random source
# (VW learns online: lines sorted by class defeat it).
VW_CONVERT = (
    'awk -F\'\\t\' \'FNR == 1 {{ out = (NR == 1) ? "{work}/tsv-train.vw" : "{work}/tsv-test.vw" }} '
    '{{ if (!($1 in id)) id[$1] = ++n; t = tolower($2); gsub(/[^a-z0-9]+/, "  ", t); t = " " t " "; '
    'gsub(/ [a-z0-9] /, " ", t); gsub(/ +/, " ", t); sub(/ $/, "", t); print id[$1] " |" t > out }}\' '
    "{work}/train.tsv {work}/test.tsv && "
    "shuf --random-source={work}/train.tsv -o {work}/tsv-train.vw {work}/tsv-train.vw"
)


def run_vw_from_tsv(work: str, k: int, bits: int, passes: int) -> dict:
    """VW on the TSV files, its input converted by VW_CONVERT (timed, as the row's "ingest")."""
    convert_s, _ = timed(["bash", "-c", VW_CONVERT.format(work=work)])
    result = run_vw(work, k, bits, passes, prefix="tsv-")
    return {**result, "ingest": convert_s}


INPUTS = {  # name: (train path, test path, source options) relative to the work folder
    "folder": ("corpus/train", "corpus/test", {"encoding": "latin-1"}),
    "tsv": ("train.tsv", "test.tsv", {"header": False, "label_field": "0", "text_field": "1"}),
}


def source_flags(options: dict) -> list[str]:
    """The ingest flags of INPUTS' source options."""
    flags = {"encoding": ["--encoding", options.get("encoding")], "header": ["--no-header"]}
    out = []
    for key, value in options.items():
        out += flags.get(key, [f"--{key.replace('_', '-')}", str(value)])
    return out


def run_streamfit(work: str, inputs: str, bits: int, solver: str, params: list[str], n_workers: str | None) -> dict:
    cli = [os.path.join(os.path.dirname(sys.executable), "streamfit")]  # the console script, as a user runs it
    train_in, test_in, options = INPUTS[inputs]
    flags = source_flags(options)
    train_store, test_store = f"{work}/train.zarr", f"{work}/test.zarr"
    hashing = ["--n-features", str(2**bits), "--value", "log1p", "--idf", "--l2-normalize"]
    ingest_train, _ = timed(
        [*cli, "ingest", f"{work}/{train_in}", *flags, *hashing, "--out", train_store, "--overwrite"]
    )
    ingest_test, _ = timed(
        [*cli, "ingest", f"{work}/{test_in}", *flags, "--like", train_store, "--out", test_store, "--overwrite"]
    )
    engine = ["--n-workers", n_workers] if n_workers is not None else []
    pp = [a for p in params for a in ("-p", p)]
    train_s, _ = timed(
        [*cli, "train", train_store, "--solver", solver, *pp, *engine, "--out", f"{work}/run", "--overwrite"]
    )
    eval_s, out = timed([*cli, "evaluate", f"{work}/run", test_store, "--json"])
    with open(f"{work}/run/run.json") as f:
        run = json.load(f)
    return {
        "ingest": ingest_train + ingest_test,
        "train": train_s,
        "evaluate": eval_s,
        "accuracy": json.loads(out)["accuracy"],
        "engine": run.get("engine"),
    }


PIPELINE = """ingest:
  inputs: [{work}/{train_in}]
  out: {work}/run-train.zarr
  hashing: {{n_features: {n_features}, value: log1p}}
  idf: true
  l2_normalize: true
  source_options: {options}
ingest_test:
  inputs: [{work}/{test_in}]
  out: {work}/run-test.zarr
  source_options: {options}
train:
  solver: {solver}
  out: {work}/run-run
  params: {{{params}}}
{engine}evaluate: {{}}
"""


def run_pipeline(work: str, inputs: str, bits: int, solver: str, params: list[str], n_workers: str | None) -> dict:
    """The same job as one `streamfit run PIPELINE.yaml` (one process: imports paid once)."""
    train_in, test_in, options = INPUTS[inputs]
    path = f"{work}/job.yaml"
    with open(path, "w") as f:
        f.write(
            PIPELINE.format(
                work=work,
                train_in=train_in,
                test_in=test_in,
                options=json.dumps(options),
                n_features=2**bits,
                solver=solver,
                params=", ".join(p.replace("=", ": ", 1) for p in params),
                engine=f"  n_workers: {n_workers}\n" if n_workers is not None else "",
            )
        )
    cli = os.path.join(os.path.dirname(sys.executable), "streamfit")
    seconds, out = timed([cli, "-q", "run", path, "--overwrite"])
    accuracy = float(re.search(r"accuracy=([0-9.]+)", out)[1])  # type: ignore[index]
    return {"ingest": 0.0, "train": seconds, "evaluate": 0.0, "accuracy": accuracy}


def startup(repeats: int = 3) -> dict:
    """Best of `repeats` wall and CPU seconds of `streamfit --help` and `python -c 'import streamfit.cli'`."""
    cli = os.path.join(os.path.dirname(sys.executable), "streamfit")
    out = {}
    for name, cmd in (
        ("streamfit --help", [cli, "--help"]),
        ("import streamfit.cli", [sys.executable, "-c", "import streamfit.cli"]),
    ):
        best = []
        for _ in range(repeats):
            start = CPU["seconds"]
            wall, _ = timed(cmd)
            best.append((wall, CPU["seconds"] - start))
        out[name] = (min(w for w, _ in best), min(c for _, c in best))
    return out


def median_run(runs: list[dict]) -> dict:
    """The median of each timing of `runs` (one per round), the total's own median kept as "total"; accuracy as run."""
    keys = ("ingest", "train", "evaluate", "cpu")
    out = {**runs[0], **{k: statistics.median(r[k] for r in runs) for k in keys}}
    out["total"] = statistics.median(r["ingest"] + r["train"] + r["evaluate"] for r in runs)
    return out


def package_dir(src: str | None) -> str:
    """The streamfit package the commands import: src/streamfit, or this interpreter's."""
    if src is not None:
        return os.path.join(src, "streamfit")
    code = "import os, streamfit; print(os.path.dirname(streamfit.__file__))"
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout.strip()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tarball", default=TARBALL)
    ap.add_argument("--groups", type=int, default=10, help="newsgroups in the subset (10: ~5650 training docs)")
    ap.add_argument("--bits", type=int, default=18, help="hashing width 2^bits, both tools")
    ap.add_argument("--passes", type=int, default=5, help="VW passes")
    ap.add_argument("--solver", default="ppdsparse")
    ap.add_argument("-p", "--param", dest="params", action="append", default=[], help="streamfit solver KEY=VALUE")
    ap.add_argument("--n-workers", default=None, help="streamfit train --n-workers (default: unset, auto)")
    ap.add_argument("--workdir", default=None, help="kept when given; a temporary folder otherwise")
    ap.add_argument("--inputs", default="folder,tsv", help="comma-separated: folder (one file per document), tsv")
    ap.add_argument("--src", default=None, help="time the streamfit package in this source tree (default: installed)")
    ap.add_argument("--baseline-src", default=None, help="also time the streamfit package in this source tree")
    ap.add_argument("--repeats", type=int, default=1, help="rounds of every row, alternating; the table shows medians")
    args = ap.parse_args()
    inputs = args.inputs.split(",")
    for name in inputs:
        if name not in INPUTS:
            ap.error(f"--inputs: unknown input {name!r}; use {', '.join(INPUTS)}")

    work = args.workdir or tempfile.mkdtemp(prefix="bench-small-")
    os.makedirs(work, exist_ok=True)
    corpus = os.path.join(work, "corpus")
    shutil.rmtree(corpus, ignore_errors=True)
    groups = extract_subset(args.tarball, args.groups, corpus)
    t0 = time.perf_counter()
    n_train = write_vw(f"{corpus}/train", groups, f"{work}/train.vw")
    n_test = write_vw(f"{corpus}/test", groups, f"{work}/test.vw")
    convert_s = time.perf_counter() - t0
    write_tsv(f"{corpus}/train", groups, f"{work}/train.tsv")
    write_tsv(f"{corpus}/test", groups, f"{work}/test.tsv")
    print(
        f"20 Newsgroups subset: {len(groups)} groups, {n_train} train / {n_test} test documents; 2^{args.bits} features"
    )

    solver = f"{args.solver} {' '.join(args.params)}".rstrip()
    runs: dict[str, list[dict]] = {}  # row name: its runs, one per round
    starts = {}
    sources = [("this", args.src)] + ([("baseline", args.baseline_src)] if args.baseline_src else [])

    def use(src: str | None) -> None:
        ENV.pop("PYTHONPATH", None)
        if src is not None:
            ENV["PYTHONPATH"] = os.path.abspath(src)

    for label, src in sources:
        use(src)
        compileall.compile_dir(package_dir(src), quiet=1)
        starts[label] = startup()
        # a first run fills numba's cache, as a user's first run does; the timed runs come after
        run_pipeline(work, inputs[0], args.bits, args.solver, args.params, args.n_workers)
    for _ in range(args.repeats):  # rounds alternate the packages and VW: a load change hits all alike
        for label, src in sources:
            use(src)
            for name in inputs:
                job = (work, name, args.bits, args.solver, args.params, args.n_workers)
                ours = with_cpu(run_streamfit, *job)
                runs.setdefault(
                    f"{label}: streamfit, 4 commands, {name} ({solver}, engine {ours['engine']})", []
                ).append(ours)
                runs.setdefault(f"{label}: `streamfit run`, one process, {name}", []).append(
                    with_cpu(run_pipeline, *job)
                )
        use(None)
        vw_name = f"vw --oaa {len(groups)} -b {args.bits} --passes {args.passes} (one file)"
        runs.setdefault(vw_name, []).append(with_cpu(run_vw, work, len(groups), args.bits, args.passes))
        vw_tsv_name = f"vw, input converted from the TSV file (awk + shuf, in its total) {vw_name[3:]}"
        runs.setdefault(vw_tsv_name, []).append(with_cpu(run_vw_from_tsv, work, len(groups), args.bits, args.passes))
    rows = [(name, median_run(each)) for name, each in runs.items()]
    vw, vw_tsv = dict(rows)[vw_name], dict(rows)[vw_tsv_name]

    print("| package | `streamfit --help` wall / CPU s | `import streamfit.cli` wall / CPU s |")
    print("|---|---|---|")
    for label, t in starts.items():
        h, i = t["streamfit --help"], t["import streamfit.cli"]
        print(f"| {label} | {h[0]:.2f} / {h[1]:.2f} | {i[0]:.2f} / {i[1]:.2f} |")
    print()
    print(
        "| tool | ingest s | train s | evaluate s | total s | / vw | / vw+tsv | CPU s | / vw | / vw+tsv "
        "| test accuracy |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for name, r in rows:
        total = r["total"]
        print(
            f"| {name} | {r['ingest']:.2f} | {r['train']:.2f} | {r['evaluate']:.2f} | {total:.2f} | "
            f"{total / vw['total']:.2f} | {total / vw_tsv['total']:.2f} | {r['cpu']:.2f} | "
            f"{r['cpu'] / vw['cpu']:.2f} | {r['cpu'] / vw_tsv['cpu']:.2f} | {r['accuracy']:.4f} |"
        )
    print(
        f"vw's input conversion from the folders (Python, not in its total): {convert_s:.2f} s; the TSV row's "
        "conversion is its 'ingest'; `streamfit run` rows: all steps in 'train'"
    )
    if args.repeats > 1:
        print(f"medians of {args.repeats} rounds (each column its own median; total: the median of the totals)")
    if not args.workdir:
        shutil.rmtree(work)


if __name__ == "__main__":
    main()
