"""Out-of-core multiclass text classification: streamfit's CLI against Vowpal Wabbit, scikit-learn's
`HashingVectorizer` + `SGDClassifier.partial_fit` and dask-ml's `Incremental` (issues 19 and 20).

The corpus (`make`, also the first step of `run`): JSONL `{"label": GROUP, "text": ...}` made by a
seeded generator from the 20 Newsgroups "bydate" training documents (the tarball of
/work/shared/data/20newsgroups). Each class's training documents (latin-1, blank lines dropped)
are split at random (seed) into source documents for the synthetic training set (80 %) and for
the synthetic held-out set (20 %): no held-out document draws from a training source document. A
synthetic document of class c (drawn with the classes' shares of the real training set) takes as
many lines as a random source document of c holds (at most MAX_LINES), each line drawn with
replacement from the lines of c's source documents, or, with probability OFF_TOPIC, from the
lines of every class's source documents (quoted text, signatures and headers are shared across
groups in the real corpus too). Files: train.jsonl (`--n-train`), test.jsonl (`--n-test`, from
the held-out sources) and real-test.jsonl (the 7532 real 20news-bydate-test documents, whole, in
a seeded order). The same seed and sizes give the same bytes.

The comparison (`run`), each step a fresh process, wall and CPU seconds (CPU of the whole process
tree: wait4's children's usage, or the polled sum where larger: Dask's workers), peak RSS of the
process tree (psutil, every 0.1 s), disk written; the tools in one run, interleaved:

    streamfit: the README's text recipe with every default: `ingest train.jsonl --out train.zarr`,
               `ingest test.jsonl --like train.zarr` (and real-test.jsonl), `train train.zarr
               [--solver S]` (engine auto), `evaluate RUN STORE` on both test stores; the default
               solver, then each solver of `--solvers`;
    vw:        `--oaa 20 -b 18`, 1 pass, and `--passes 5 -c -k` (a cache; VW's default holdout of
               every 10th line for its early stop), through the vowpalwabbit package (no `vw`
               executable ships with it); its input written from the JSONL by a Python stream
               (lowercased tokens of 2+ word characters, the labels numbered 1..20), timed;
    sgd:       HashingVectorizer(n_features=2**18, alternate_sign=False) + SGDClassifier() with
               partial_fit over batches of 1000 documents read from the JSONL (scikit-learn's
               out-of-core example), 1 and 5 epochs (the file re-read and re-hashed each epoch);
    dask-ml:   dask.dataframe.read_json(lines=True) -> dask_ml HashingVectorizer(n_features=2**18,
               alternate_sign=False) -> Incremental(SGDClassifier()) on a 2-worker LocalCluster,
               1 and 5 calls of partial_fit (epochs), if `--daskml-python` names an interpreter
               that imports dask_ml (its own venv: `pip install dask-ml`).

`--cap-mb M` runs again, under RLIMIT_DATA M MiB (set on each process by itself, inherited by its
children: every private writable mapping counts, see docs/benchmarks.md "multiboost's memory under
a cap"; a bound per process, not on a process tree), each tool that claims to work out of core:
streamfit's ingests and default train (its default engine, then in process, `--n-workers 0`;
stopped by train's own `--time-limit` where `--cap-time-limit` is given), VW 1 pass, one epoch of
the partial_fit loop and of dask-ml (killed after `--cap-timeout` seconds); `--cap-only` runs
these alone. `report` prints the table again from a run's results.json.

Usage:

    python tools/bench_ooc_text.py make --out DIR [--n-train 100000] [--n-test 20000] [--seed 0]
    python tools/bench_ooc_text.py run --workdir DIR [--n-train ...] [--solvers bcd,ppdsparse]
        [--daskml-python /tmp/ooc34-venv/bin/python] [--cap-mb 1024 [--cap-only]
        [--cap-time-limit 4m] [--cap-timeout 480]] [--small]
    python tools/bench_ooc_text.py report --workdir DIR

`--small` (3000 training documents, 600 held out, the default solver alone) runs in about a
minute without --daskml-python and --cap-mb. Needs the `bench` extra (vowpalwabbit).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import signal
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import numpy as np

TARBALL = "/work/shared/data/20newsgroups/20news-bydate.tar.gz"
TRAIN_SUBSET, TEST_SUBSET = "20news-bydate-train", "20news-bydate-test"
HELD_OUT_SHARE = 0.2  # of each class's training documents: sources of the synthetic held-out set
MAX_LINES = 40  # most lines of a synthetic document
OFF_TOPIC = 0.15  # chance that a line is drawn from every class's lines
BATCH_DOCS = 10_000  # documents generated at a time (fixed: the bytes do not depend on memory)
BITS = 18


# ------------------------------------------------------------------------------------ the corpus
def read_groups(tarball: str, subset: str) -> dict[str, list[tuple[str, str]]]:
    """{group: [(document id, latin-1 text), ...] sorted by id} of the tarball's SUBSET folder."""
    groups: dict[str, list[tuple[str, str]]] = {}
    with tarfile.open(tarball) as tar:
        for member in tar:
            parts = member.name.split("/")
            if not member.isfile() or len(parts) != 3 or parts[0] != subset:
                continue
            data = tar.extractfile(member)
            assert data is not None
            groups.setdefault(parts[1], []).append((parts[2], data.read().decode("latin-1")))
    return {group: sorted(docs) for group, docs in sorted(groups.items())}


class LinePool:
    """The non-blank lines of some documents of each class, and each document's line count."""

    def __init__(self, docs_by_class: list[list[str]]):
        lines: list[str] = []
        self.start, self.size, self.doc_lines = [], [], []
        for docs in docs_by_class:
            self.start.append(len(lines))
            counts = []
            for text in docs:
                kept = [line.rstrip() for line in text.splitlines() if line.strip()]
                lines.extend(kept)
                counts.append(len(kept))
            self.size.append(len(lines) - self.start[-1])
            self.doc_lines.append(np.array(counts))
        self.lines = np.array(lines, dtype=object)

    def documents(self, rng: np.random.Generator, classes: np.ndarray) -> list[str]:
        """One synthetic document of each class in `classes` (the module docstring's draw)."""
        n_lines = np.array([min(MAX_LINES, rng.choice(self.doc_lines[c])) for c in classes])
        line_class = np.repeat(classes, n_lines)
        start, size = np.array(self.start)[line_class], np.array(self.size)[line_class]
        index = start + (rng.random(len(line_class)) * size).astype(np.int64)
        off_topic = rng.random(len(line_class)) < OFF_TOPIC
        index[off_topic] = rng.integers(0, len(self.lines), int(off_topic.sum()))
        ends = np.cumsum(n_lines)
        drawn = self.lines[index]
        return ["\n".join(drawn[end - n : end]) for n, end in zip(n_lines, ends)]


def write_synthetic(path: Path, pool: LinePool, names: list[str], shares: np.ndarray, n: int, rng) -> None:
    with open(path.with_suffix(".tmp"), "w", encoding="utf-8") as f:
        for first in range(0, n, BATCH_DOCS):
            classes = rng.choice(len(names), size=min(BATCH_DOCS, n - first), p=shares)
            for c, text in zip(classes, pool.documents(rng, classes)):
                f.write(json.dumps({"label": names[c], "text": text}) + "\n")
    path.with_suffix(".tmp").replace(path)


def make_corpus(tarball: str, out: Path, n_train: int, n_test: int, seed: int) -> dict:
    """Writes OUT/train.jsonl, test.jsonl and real-test.jsonl (see the module docstring); returns
    what was made (also written to OUT/corpus.json)."""
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    train = read_groups(tarball, TRAIN_SUBSET)
    names = list(train)
    train_sources, held_sources = [], []
    for group in names:
        texts = [text for _, text in train[group]]
        order = rng.permutation(len(texts))
        n_held = max(1, round(HELD_OUT_SHARE * len(texts)))
        held_sources.append([texts[i] for i in order[:n_held]])
        train_sources.append([texts[i] for i in order[n_held:]])
    counts = np.array([len(train[group]) for group in names])
    shares = counts / counts.sum()
    write_synthetic(out / "train.jsonl", LinePool(train_sources), names, shares, n_train, rng)
    write_synthetic(out / "test.jsonl", LinePool(held_sources), names, shares, n_test, rng)
    real = [(group, text) for group, docs in read_groups(tarball, TEST_SUBSET).items() for _, text in docs]
    with open(out / "real-test.tmp", "w", encoding="utf-8") as f:
        for i in rng.permutation(len(real)):
            f.write(json.dumps({"label": real[i][0], "text": real[i][1]}) + "\n")
    (out / "real-test.tmp").replace(out / "real-test.jsonl")
    made = {
        "seed": seed,
        "classes": names,
        "sources": {"train": [len(d) for d in train_sources], "held_out": [len(d) for d in held_sources]},
        "rows": {"train": n_train, "test": n_test, "real-test": len(real)},
        "bytes": {name: (out / f"{name}.jsonl").stat().st_size for name in ("train", "test", "real-test")},
    }
    (out / "corpus.json").write_text(json.dumps(made, indent=1) + "\n")
    return made


# ------------------------------------------------------------------------------------ measuring
def tree_cpu_and_rss(root_pid: int, seen_cpu: dict, every: float, done: threading.Event, peak: list) -> None:
    import psutil

    try:
        root = psutil.Process(root_pid)
    except psutil.NoSuchProcess:
        return
    while not done.is_set():
        total = 0
        try:
            tree = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            break
        for p in tree:
            try:
                total += p.memory_info().rss
                t = p.cpu_times()
                seen_cpu[p.pid] = t.user + t.system
            except psutil.Error:
                continue
        peak[0] = max(peak[0], total)
        done.wait(every)


def measure(cmd: list[str], cap_mb: int = 0, log: Path | None = None, timeout: float | None = None) -> dict:
    """Runs cmd (niced, under RLIMIT_DATA cap_mb MiB if given; its process group killed after
    `timeout` seconds: rc "timeout"): rc, wall s, CPU s of the tree, peak RSS MiB of the tree,
    stdout (stderr appended to log)."""

    def cap() -> None:
        os.nice(10)
        if cap_mb:
            resource.setrlimit(resource.RLIMIT_DATA, (cap_mb << 20, cap_mb << 20))

    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    seen: dict = {}
    peak = [0]
    done = threading.Event()
    t0 = time.perf_counter()
    with open(log or os.devnull, "ab") as err:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, preexec_fn=cap, start_new_session=True)
        poller = threading.Thread(target=tree_cpu_and_rss, args=(proc.pid, seen, 0.1, done, peak), daemon=True)
        poller.start()
        try:
            stdout, rc = proc.communicate(timeout=timeout)[0].decode(), proc.returncode
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            stdout, rc = proc.communicate()[0].decode(), "timeout"
    wall = time.perf_counter() - t0
    done.set()
    poller.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    waited = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    return {
        "rc": rc,
        "wall": wall,
        "cpu": max(waited, sum(seen.values())),
        "peak_mib": peak[0] / 2**20,
        "stdout": stdout,
    }


def disk_mib(*paths: Path) -> float:
    total = 0
    for path in paths:
        if path.is_file():
            total += path.stat().st_size
        elif path.is_dir():
            total += sum(f.stat().st_size for f in path.rglob("*") if f.is_file())
    return total / 2**20


def accuracy_of(stdout: str) -> float:
    found = re.search(r"\baccuracy=([0-9.]+)", stdout)
    return float(found.group(1)) if found else float("nan")


# ------------------------------------------------------------------------------------ the tools
def streamfit_cmd(*args) -> list[str]:
    return [sys.executable, "-m", "streamfit", "-q", *map(str, args)]


def run_streamfit_ingest(data: Path, work: Path, log: Path, cap_mb: int = 0, tag: str = "") -> dict:
    """The three ingests; the sum of their measures (peak: the largest)."""
    steps = {}
    steps["train"] = measure(
        streamfit_cmd("ingest", data / "train.jsonl", "--out", work / f"train{tag}.zarr", "--overwrite"),
        cap_mb,
        log=log,
    )
    for name in ("test", "real-test"):
        steps[name] = measure(
            streamfit_cmd(
                "ingest",
                data / f"{name}.jsonl",
                "--like",
                work / f"train{tag}.zarr",
                "--out",
                work / f"{name}{tag}.zarr",
                "--overwrite",
            ),
            cap_mb,
            log=log,
        )
    return steps


def run_streamfit_train(work: Path, solver: str | None, log: Path, extra=(), cap_mb: int = 0, tag: str = "") -> dict:
    name = solver or "default"
    out = work / f"run-{name}{tag}"
    args = ["train", work / f"train{tag}.zarr", "--out", out, "--overwrite", *extra]
    if solver:
        args += ["--solver", solver]
    result = {"train": measure(streamfit_cmd(*args), cap_mb, log=log)}
    if result["train"]["rc"] == 0:
        for test in ("test", "real-test"):
            result[test] = measure(streamfit_cmd("evaluate", out, work / f"{test}{tag}.zarr"), cap_mb, log=log)
    result["disk_mib"] = disk_mib(out)
    return result


VW_RUN = """
import vowpalwabbit, sys
vw = vowpalwabbit.Workspace(sys.argv[1])
vw.run_parser()
vw.finish()
"""


def write_vw_inputs(data: Path, work: Path, names: list[str]) -> None:
    """JSONL -> VW lines `K | tokens` (K = 1 + the class's index), lowercased, `|` and `:` dropped."""
    number = {name: i + 1 for i, name in enumerate(names)}
    token = re.compile(r"\w\w+")
    for name in ("train", "test", "real-test"):
        with open(data / f"{name}.jsonl", encoding="utf-8") as src, open(work / f"{name}.vw", "w") as out:
            for line in src:
                record = json.loads(line)
                out.write(f"{number[record['label']]} | {' '.join(token.findall(record['text'].lower()))}\n")


def run_vw(data: Path, work: Path, names: list[str], passes: int, log: Path, cap_mb: int = 0) -> dict:
    result = {}
    if not (work / "train.vw").exists():
        result["convert"] = measure(
            [sys.executable, __file__, "vw-inputs", str(data), str(work), ",".join(names)], cap_mb, log=log
        )
    model = work / f"model-{passes}.vw"
    opts = f"--oaa {len(names)} -b {BITS} --quiet -d {work}/train.vw -f {model}"
    if passes > 1:
        cache = work / "train.vw.cache"
        cache.unlink(missing_ok=True)
        opts += f" --passes {passes} -c -k --cache_file {cache}"
    result["train"] = measure([sys.executable, "-c", VW_RUN, opts], cap_mb, log=log)
    for test in ("test", "real-test"):
        pred = work / f"pred-{passes}-{test}.txt"
        step = measure(
            [sys.executable, "-c", VW_RUN, f"-t -i {model} --quiet -d {work}/{test}.vw -p {pred}"], cap_mb, log=log
        )
        if step["rc"] == 0:
            with open(pred) as p, open(work / f"{test}.vw") as t:
                hits = [int(float(a.split()[0])) == int(b.split(" ", 1)[0]) for a, b in zip(p, t)]
            step["accuracy"] = sum(hits) / len(hits)
        result[test] = step
    result["disk_mib"] = disk_mib(
        *(work / f"{n}.vw" for n in ("train", "test", "real-test")), model, work / "train.vw.cache"
    )
    return result


def jsonl_batches(path: Path, size: int):
    """(texts, labels) of `size` records at a time."""
    texts, labels = [], []
    with open(path, encoding="utf-8") as f:
        for line in f:
            record = json.loads(line)
            texts.append(record["text"])
            labels.append(record["label"])
            if len(texts) == size:
                yield texts, labels
                texts, labels = [], []
    if texts:
        yield texts, labels


def peer_sgd(data: Path, epochs: int) -> None:
    """scikit-learn's out-of-core recipe; prints one JSON line of accuracies and phase seconds."""
    from sklearn.feature_extraction.text import HashingVectorizer
    from sklearn.linear_model import SGDClassifier

    names = json.loads((data / "corpus.json").read_text())["classes"]
    vectorizer = HashingVectorizer(n_features=2**BITS, alternate_sign=False)
    model = SGDClassifier()
    t0 = time.perf_counter()
    for _ in range(epochs):
        for texts, labels in jsonl_batches(data / "train.jsonl", 1000):
            model.partial_fit(vectorizer.transform(texts), labels, classes=names)
    report = {"train_s": time.perf_counter() - t0}
    for test in ("test", "real-test"):
        hits = n = 0
        for texts, labels in jsonl_batches(data / f"{test}.jsonl", 1000):
            hits += int((model.predict(vectorizer.transform(texts)) == np.array(labels)).sum())
            n += len(labels)
        report[test] = hits / n
    print(json.dumps(report))


def peer_daskml(data: Path, epochs: int) -> None:
    """dask-ml's Incremental recipe on a 2-worker LocalCluster; one JSON line as peer_sgd's."""
    import dask.dataframe as dd
    from dask.distributed import Client
    from dask_ml.feature_extraction.text import HashingVectorizer
    from dask_ml.wrappers import Incremental
    from sklearn.linear_model import SGDClassifier

    names = json.loads((data / "corpus.json").read_text())["classes"]
    with Client(n_workers=2, threads_per_worker=1, dashboard_address=None):
        vectorizer = HashingVectorizer(n_features=2**BITS, alternate_sign=False)

        def load(name):
            frame = dd.read_json(str(data / f"{name}.jsonl"), lines=True, blocksize=2**25)
            # a bag of the texts: transform(frame["text"]) fails inferring its meta from NaN here
            return vectorizer.transform(frame["text"].to_bag()), frame["label"].to_dask_array(lengths=True)

        t0 = time.perf_counter()
        x, y = load("train")
        x = x.compute_chunk_sizes()
        model = Incremental(SGDClassifier())
        for _ in range(epochs):
            model.partial_fit(x, y, classes=names)
        report = {"train_s": time.perf_counter() - t0}
        for test in ("test", "real-test"):
            x, y = load(test)
            x = x.compute_chunk_sizes()
            report[test] = float((model.predict(x) == y).mean().compute())
    print(json.dumps(report))


def run_peer(kind: str, python: str, data: Path, epochs: int, log: Path, cap_mb: int = 0, timeout=None) -> dict:
    step = measure([python, __file__, kind, str(data), str(epochs)], cap_mb, log=log, timeout=timeout)
    if step["rc"] == 0:
        step.update(json.loads(step["stdout"].strip().splitlines()[-1]))
    return step


# ------------------------------------------------------------------------------------ the report
def summed(steps: list[dict]) -> dict:
    """One row's total of its steps: the worst exit status, summed seconds, the largest peak."""
    return {
        "rc": next((s["rc"] for s in steps if s["rc"] != 0), 0),
        "wall": sum(s["wall"] for s in steps),
        "cpu": sum(s["cpu"] for s in steps),
        "peak_mib": max(s["peak_mib"] for s in steps),
    }


def rows_of(results: dict, st: Path) -> list[tuple[str, dict, float, float, float]]:
    """(row, total, held-out accuracy, real-test accuracy, disk MiB) of each tool run in results:
    streamfit's rows add their ingests (of the same cap) and both evaluates to train, VW's rows
    their input conversion and both tests."""
    store_mib = disk_mib(*(st / f"{name}.zarr" for name in ("train", "test", "real-test")))
    rows = []
    for key, value in results.items():
        cap = key.split(":")[0] + ": " if key.startswith("capped") else ""
        tool = key[len(cap) :]
        if tool == "streamfit ingest":
            continue
        if tool.startswith("streamfit"):
            ingest = list(results[f"{cap}streamfit ingest"].values())
            tests = [value[t] for t in ("test", "real-test") if t in value]
            accuracy = [accuracy_of(value[t]["stdout"]) if t in value else float("nan") for t in ("test", "real-test")]
            rows.append((key, summed([*ingest, value["train"], *tests]), *accuracy, store_mib + value["disk_mib"]))
        elif tool.startswith("vw"):
            convert = value.get("convert") or results["vw 1 pass"]["convert"]
            steps = [convert, value["train"], value["test"], value["real-test"]]
            accuracy = [value[t].get("accuracy", float("nan")) for t in ("test", "real-test")]
            rows.append((key, summed(steps), *accuracy, value["disk_mib"]))
        else:  # one process: scikit-learn's or dask-ml's loop
            rows.append((key, value, value.get("test", float("nan")), value.get("real-test", float("nan")), 0.0))
    return rows


def table(rows: list[tuple[str, dict, float, float, float]]) -> str:
    """Markdown; the ratios are the (first) default streamfit row's ÷ each row's (ours ÷ the peer)."""
    ours = next(total for name, total, *_ in rows if name.endswith("streamfit default"))
    lines = [
        "| tool | held-out acc. | real-test acc. | wall s | CPU s | peak MiB | disk MiB | streamfit default ÷ this: wall, CPU, peak |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, total, acc, real, disk in rows:
        ratio = "; ".join(f"{ours[k] / total[k]:.2f}" for k in ("wall", "cpu", "peak_mib"))
        status = "" if total["rc"] == 0 else f" (exit {total['rc']})"
        lines.append(
            f"| {name}{status} | {acc:.4f} | {real:.4f} | {total['wall']:.1f} | {total['cpu']:.1f} | "
            f"{total['peak_mib']:.0f} | {disk:.0f} | {ratio} |"
        )
    return "\n".join(lines)


def load() -> str:
    return " ".join(open("/proc/loadavg").read().split()[:3])


def run(args) -> None:
    work = Path(args.workdir)
    data = work / "data"
    made = data / "corpus.json"
    if not made.exists() or json.loads(made.read_text())["rows"]["train"] != args.n_train:
        t0 = time.perf_counter()
        corpus = make_corpus(args.tarball, data, args.n_train, args.n_test, args.seed)
        print(f"corpus: {corpus['rows']}, bytes {corpus['bytes']}, {time.perf_counter() - t0:.0f} s")
    names = json.loads(made.read_text())["classes"]
    log = work / "stderr.log"
    results: dict = {}

    def note(key: str, value: dict) -> None:
        results[key] = value
        (work / "results.json").write_text(json.dumps(results, indent=1))
        print(f"{time.strftime('%H:%M:%S')} load {load()} {key}: {json.dumps(brief(value))}", flush=True)

    st, vw = work / "streamfit", work / "vw"
    st.mkdir(exist_ok=True)
    vw.mkdir(exist_ok=True)
    if not args.cap_only:
        note("streamfit ingest", run_streamfit_ingest(data, st, log))
        note("vw 1 pass", run_vw(data, vw, names, 1, log))
        note("streamfit default", run_streamfit_train(st, None, log))
        note("sgd 1 epoch", run_peer("peer-sgd", sys.executable, data, 1, log))
        if args.daskml_python:
            note("dask-ml 1 epoch", run_peer("peer-daskml", args.daskml_python, data, 1, log))
        note("vw 5 passes", run_vw(data, vw, names, 5, log))
        for solver in [s for s in args.solvers.split(",") if s]:
            note(f"streamfit {solver}", run_streamfit_train(st, solver, log, ["--time-limit", args.solver_time_limit]))
        note("sgd 5 epochs", run_peer("peer-sgd", sys.executable, data, 5, log))
        if args.daskml_python:
            note("dask-ml 5 epochs", run_peer("peer-daskml", args.daskml_python, data, 5, log))
    if args.cap_mb:
        capped(args, data, st, vw, names, log, note)
    print(table(rows_of(results, st)))


def capped(args, data: Path, st: Path, vw: Path, names: list[str], log: Path, note) -> None:
    """Each tool that claims to work out of core, under RLIMIT_DATA args.cap_mb MiB: streamfit's
    ingest and its default train (the default engine, then in process; stopped by its own
    --time-limit where `--cap-time-limit` is given), VW 1 pass, one epoch of the partial_fit loop
    and of dask-ml (killed after --cap-timeout seconds)."""
    cap, timeout = args.cap_mb, args.cap_timeout or None
    limit = ["--time-limit", args.cap_time_limit] if args.cap_time_limit else []
    note(f"capped {cap}: streamfit ingest", run_streamfit_ingest(data, st, log, cap, tag="-cap"))
    note(f"capped {cap}: streamfit default", run_streamfit_train(st, None, log, limit, cap, "-cap"))
    workers = ["--n-workers", "0"]
    note(
        f"capped {cap}: streamfit default --n-workers 0",
        run_streamfit_train(st, None, log, limit + workers, cap, "-cap"),
    )
    note(f"capped {cap}: vw 1 pass", run_vw(data, vw, names, 1, log, cap))
    note(f"capped {cap}: sgd 1 epoch", run_peer("peer-sgd", sys.executable, data, 1, log, cap, timeout))
    if args.daskml_python:
        note(f"capped {cap}: dask-ml 1 epoch", run_peer("peer-daskml", args.daskml_python, data, 1, log, cap, timeout))


def brief(value: dict) -> dict:
    """A step's or a tool's measures without stdout, rounded, for the progress lines."""
    if "rc" in value:
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in value.items() if k != "stdout"}
    return {k: brief(v) if isinstance(v, dict) else round(v, 1) for k, v in value.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="command", required=True)
    report = sub.add_parser("report", help="the table again from a run's WORKDIR/results.json")
    report.add_argument("--workdir", required=True)
    for name in ("make", "run"):
        p = sub.add_parser(name)
        p.add_argument("--tarball", default=TARBALL)
        p.add_argument("--n-train", type=int, default=100_000)
        p.add_argument("--n-test", type=int, default=20_000)
        p.add_argument("--seed", type=int, default=0)
        p.add_argument(
            "--small",
            action="store_true",
            help="3000 training and 600 held-out documents; run: the default solver alone",
        )
        if name == "make":
            p.add_argument("--out", required=True)
        else:
            p.add_argument("--workdir", required=True)
            p.add_argument("--solvers", default="bcd,ppdsparse", help="solvers after the default, comma-separated")
            p.add_argument("--solver-time-limit", default="8m", help="train's --time-limit for the --solvers")
            p.add_argument("--daskml-python", default="", help="a Python that imports dask_ml (its own venv)")
            p.add_argument("--cap-mb", type=int, default=0, help="also run the out-of-core tools under RLIMIT_DATA MiB")
            p.add_argument("--cap-only", action="store_true", help="only the capped runs")
            p.add_argument("--cap-time-limit", default="", help="train's --time-limit in the capped runs")
            p.add_argument("--cap-timeout", type=float, default=0, help="seconds before a capped peer is killed")
    for name in ("vw-inputs", "peer-sgd", "peer-daskml"):  # the steps run in their own processes
        p = sub.add_parser(name)
        p.add_argument("data")
        p.add_argument("arg")
        if name == "vw-inputs":
            p.add_argument("names")
    args = ap.parse_args()
    if args.command == "vw-inputs":
        write_vw_inputs(Path(args.data), Path(args.arg), args.names.split(","))
    elif args.command == "peer-sgd":
        peer_sgd(Path(args.data), int(args.arg))
    elif args.command == "peer-daskml":
        peer_daskml(Path(args.data), int(args.arg))
    elif args.command == "report":
        work = Path(args.workdir)
        print(table(rows_of(json.loads((work / "results.json").read_text()), work / "streamfit")))
    else:
        if args.small:
            args.n_train, args.n_test = 3000, 600
            if args.command == "run":
                args.solvers = ""
        if args.command == "make":
            print(json.dumps(make_corpus(args.tarball, Path(args.out), args.n_train, args.n_test, args.seed)))
        else:
            run(args)


if __name__ == "__main__":
    main()
