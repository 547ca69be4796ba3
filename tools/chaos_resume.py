"""Randomized kill-and-resume campaign, as a user's batch scheduler kills jobs.

    python tools/chaos_resume.py [--jobs train,ingest,pipeline,cluster,server]
                                 [--solvers stagewise,bcd,ppdsparse,fbpd,multiboost]
                                 [--storage local,s3] [--workers 0,2] [--trials 4] [--aimed 0.5]
                                 [--switch-engine 0.25] [--ingest-trials 4] [--pipeline-trials 4]
                                 [--cluster-trials 6] [--server-trials 4] [--seed 0] [--workdir DIR]

For every storage (`local`: a directory on this disk; `s3`: `s3://` URLs on a moto server this
tool starts on 127.0.0.1 in a process of its own (MotoServer: it can be killed and restarted
with its objects), its AWS_* variables handed to every child), engine (`--workers`: 0 in
process, N an embedded cluster of N worker processes) and solver, the `train` job:

1. an uninterrupted `streamfit train` (the reference, duration D; default checkpoint policy);
2. `--trials` trials, each in a fresh run directory with a checkpoint policy drawn from
   `--checkpoint-every 1`, `--checkpoint-every 3`, `--checkpoint-interval 0.5` and the default:
   the run is started in a process group of its own and killed, then `train --resume`, killed
   once more in half the trials, and a last `train --resume` to the end; each resume runs on
   the other engine (0 <-> 2 workers) with probability `--switch-engine`. A kill is, with
   probability `--aimed`, a SIGKILL of the whole group by the driver itself just before or just
   after its n-th storage operation (streamfit.storage's writes, deletions and commits, counted
   in an uninterrupted run of the same policy, whose model must also equal the reference's),
   n drawn uniformly over all of them or over the rare ones (commits, deletions, whole new files);
   otherwise a signal at a time drawn uniformly from [0, D): SIGKILL, or in a quarter SIGTERM,
   to the whole group (the driver, its Dask nanny and worker processes), or in a quarter to the
   driver alone, as `kill PID` would;
3. after each kill: no process of the group is left 60 s after the driver ended; the run
   directory does not look complete (`predict` on it exits 2 with one line) unless its model
   had been committed; `checkpoints/LATEST`, when there, names a committed step whose record and
   arrays pass their SHA-256; after the last run: every model array and `model.json` equal the
   reference's bitwise, and `metrics.jsonl` has each step once, in order, the same steps as the
   reference with the same values (all but `wall_time`; ppdsparse on workers, whose steps are
   its groups in completion order: each group once, with its own values).

Ingest (per storage and engine): an uninterrupted ingest of a generated LIBSVM file (30 000
rows, 30 chunks), then `--ingest-trials` ingests SIGKILLed as above (aimed, or at a time in
[0, D) to the group or the driver alone): the output must not open as a store (`inspect
--verify` and `train` exit 2 with one line) unless the ingest had finished; `ingest
--overwrite` then gives the reference's fingerprint, chunk digests and arrays.

Pipeline (`pipeline_job`, per storage and engine): `streamfit run` of a generated pipeline of all
five sections (ingest, ingest_test = ingest --like, train: bcd, evaluate, predict), SIGKILLed
(aimed: at an operation of a section drawn uniformly, counted in an uninterrupted run) or
signalled at a time in [0, D); then `run --resume`, `run` again (it finishes, or refuses with
one line naming the fix, which is then run) or `run --overwrite`, killed once more in half the
trials, and a last `run --resume`. After each kill every output that looks complete (a
committed store, the model, evaluation.json, the predictions) must be the reference's; at the
end all five, and the metrics, must be.

Cluster (`cluster_job`, per solver and storage): `train --scheduler` on a `dask scheduler` and
2 `dask worker` processes on loopback that this tool starts (LoopbackCluster), killing in turn
the driver (the workers stay; `--resume` on the same cluster), one worker at a time drawn in
[0, D) (the run finishes or fails with one line; a new worker is started), or the scheduler
(the driver must exit ≠ 0 with one line, not hang; `--resume` on a new cluster).

S3 server (`server_job`, storage s3, per engine): SIGKILL the S3 server under a `train`
(checkpoint at every step) or an `ingest`, by the driver at a drawn storage operation (a
checkpoint's or a store's commit among them) or at a time in [0, D): the writer must exit ≠ 0
with one `error:` line and no traceback; after a restart of the server with its objects,
nothing looks complete that was not committed, and `--resume` / `ingest --overwrite` gives the
reference's model / store.

A failure is printed with what was seen and counted in the table; exit status 1 if any.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import kill_resume
import numpy as np
from kill_resume import cli

# runs of a few seconds with tens of steps (digits, 9 chunks of 200 rows): kill_resume's, and multiboost
SOLVER_PARAMS = {**kill_resume.SOLVER_PARAMS, "multiboost": ["max_iter=60"]}
SOLVERS = ("stagewise", "bcd", "ppdsparse", "fbpd", "multiboost")
JOBS = ("train", "ingest", "pipeline", "cluster", "server")
POLICIES = (["--checkpoint-every", "1"], ["--checkpoint-every", "3"], ["--checkpoint-interval", "0.5"], [])
BUCKET = "chaos"
RUN_TIMEOUT_S = 900


# `python -c HOOKED ARGS...`: streamfit ARGS whose driver counts its storage operations (the
# writes, deletions and commits of streamfit.storage) and, with CHAOS_KILL_AT=n, SIGKILLs its
# whole process group just before (CHAOS_KILL_WHEN=before) or just after the n-th, or with
# CHAOS_KILL_KIND=rare the n-th of the RARE ones (commits, deletions, whole new files: not the
# state and log writes of every step); with CHAOS_COUNT_TO=FILE it writes both counts there at
# exit (and, for `run`, where each section of the pipeline began: [name, operations before it]);
# with CHAOS_KILL_SECTION=NAME (`run`), n counts the operations of that section (and what follows
# it up to the next section: evaluation.json after the evaluate section's pass, say);
# with CHAOS_KILL_PID=PID it SIGKILLs that process instead (and creates the file
# CHAOS_KILLED_FLAG), then goes on; CHAOS_TRACE=1 prints each operation to stderr (to see what operation n is)
HOOKED = """
import atexit, json, os, signal, sys
from streamfit import storage
from streamfit.cli import main
kill_at, when = int(os.environ.get("CHAOS_KILL_AT", "0")), os.environ.get("CHAOS_KILL_WHEN", "after")
victim = int(os.environ.get("CHAOS_KILL_PID", "0"))  # another process to SIGKILL instead (the S3 server)
def kill():
    if victim:
        os.kill(victim, signal.SIGKILL)
        open(os.environ["CHAOS_KILLED_FLAG"], "w").close()
    else:
        os.killpg(0, signal.SIGKILL)
rare_only = os.environ.get("CHAOS_KILL_KIND") == "rare"
in_section = os.environ.get("CHAOS_KILL_SECTION")  # n counts the operations of this section of `run`
current = [None, 0]  # the section of `run` that began last, its operations so far
RARE = {"write_new", "publish_file", "remove_tree", "publish_dir", "remove_local_tree", "uncommit", "commit"}
count = [0, 0]  # every operation, the RARE ones
def hooked(owner, name):
    original = getattr(owner, name)
    def call(*args, **kwargs):
        if rare_only and name not in RARE:
            return original(*args, **kwargs)
        count[0] += 1
        count[1] += name in RARE
        current[1] += 1
        n = count[1] if rare_only else count[0]
        if in_section:
            n = current[1] if current[0] == in_section else 0
        if os.environ.get("CHAOS_TRACE"):
            print("chaos:", count[0], name, *(str(a)[-60:] for a in args[:1]), file=sys.stderr)
        if n == kill_at and when == "before":
            kill()
        result = original(*args, **kwargs)
        if n == kill_at and when == "after":
            kill()
        return result
    setattr(owner, name, call)
for name in ("write_bytes", "write_new", "append_text", "publish_file", "makedirs", "remove", "remove_tree", "write_files"):
    hooked(storage.Location, name)
for name in ("publish_dir", "remove_local_tree", "sync_tree", "uncommit"):
    hooked(storage, name)
hooked(storage.Attempt, "commit")
sections = []  # `run`'s sections as they start: [name, operations before it]
def section(owner, name, label):
    original = getattr(owner, name)
    def call(*args, **kwargs):
        name = "ingest_test" if label == "ingest" and sections else label  # the second ingest
        sections.append([name, count[0]])
        current[:] = [name, 0]
        return original(*args, **kwargs)
    setattr(owner, name, call)
if "run" in sys.argv[1:]:
    import streamfit.jobs, streamfit.metrics, streamfit.predict, streamfit.train
    section(streamfit.jobs, "ingest", "ingest")  # the ingest and ingest_test sections
    section(streamfit.train, "train", "train")
    section(streamfit.metrics, "evaluate", "evaluate")
    section(streamfit.predict, "predict_to_file", "predict")
if os.environ.get("CHAOS_COUNT_TO"):
    atexit.register(lambda: open(os.environ["CHAOS_COUNT_TO"], "w").write(f"{count[0]} {count[1]} {json.dumps(sections)}"))
main(sys.argv[1:], prog_name="streamfit")
"""


def hooked(argv: list[str]) -> list[str]:
    """`argv` (a cli() command) run through HOOKED."""
    return [sys.executable, "-c", HOOKED, *argv[3:]]


# `python -c MOTO_SERVER ARGS...`: moto_server ARGS, its request recorder made safe for the server's
# concurrent requests (it writes an entry and its newline in two writes, which another request's
# entry could come between: both lines were lost to the replay)
MOTO_SERVER = """
import sys, threading
from moto.moto_api._internal.recorder import models
from moto.server import main
lock, record = threading.Lock(), models.Recorder._record_request
def locked(self, *args, **kwargs):
    with lock:
        return record(self, *args, **kwargs)
models.Recorder._record_request = locked
main(sys.argv[1:])
"""


class MotoServer:
    """moto's S3 server on 127.0.0.1 in a process of its own (MOTO_SERVER), so that it can be
    SIGKILLed mid-request and started again on the same port. moto keeps its objects in memory
    only, so the state survives a restart through moto's request recorder: every request is
    appended to `recording` as it arrives (MOTO_ENABLE_RECORDING), and a restart replays the
    requests that change something (PUT, POST, DELETE; not a last line cut short by the kill)
    in order. A request the kill interrupted is replayed as if it had been served, as an S3
    server may serve a request whose response is lost. Not replayable: multipart uploads (the
    replayed parts name the old upload id); nothing here writes objects that large."""

    def __init__(self, folder: Path):
        import socket

        self.recording = folder / "moto-recording.jsonl"
        self.log = folder / "moto.log"
        with socket.socket() as s:  # a free port, kept for the restarts
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def start(self) -> None:
        env = {**os.environ, "MOTO_ENABLE_RECORDING": "1", "MOTO_RECORDER_FILEPATH": str(self.recording)}
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-c", MOTO_SERVER, "-H", "127.0.0.1", "-p", str(self.port)],
                stdout=log, stderr=log, env=env, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + 60
        while not self._answers():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"moto_server did not start (see {self.log})")
            time.sleep(0.1)

    def _answers(self) -> bool:
        import urllib.request

        try:
            urllib.request.urlopen(f"{self.url}/moto-api/", timeout=2).read()
            return True
        except OSError:
            return False

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def kill(self) -> None:
        if self.alive():
            os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def _compacted(self) -> list[str]:
        """The recording's lines (each with its newline) that make the server's state: the
        buckets' creation, then the last PUT of every object not deleted since (by a DELETE or
        a POST ?delete), in the order of those PUTs; any other request that changes something
        in its place. Reads, and the line the kill cut short, are left out."""
        import html
        import re
        import urllib.parse

        buckets, objects, other = [], {}, []
        lines = self.recording.read_text().split("\n")
        for n, line in enumerate(lines):
            try:
                entry = json.loads(line)
            except ValueError:
                if n >= len(lines) - 2:  # the line the kill cut short (or the end)
                    continue
                raise SystemExit(f"{self.recording}:{n + 1}: not a recorded request") from None
            url = urllib.parse.urlsplit(entry["url"])
            bucket, _, key = urllib.parse.unquote(url.path).lstrip("/").partition("/")
            method = entry["method"]
            if method in ("GET", "HEAD"):
                continue
            if method == "PUT" and not key:
                buckets.append(line + "\n")
            elif method == "PUT" and not url.query:
                objects.pop((bucket, key), None)  # a new PUT goes last
                objects[bucket, key] = line + "\n"
            elif method == "DELETE" and key and not url.query:
                objects.pop((bucket, key), None)
            elif method == "POST" and not key and url.query.startswith("delete"):
                body = entry["body"] or ""
                text = base64.b64decode(body).decode() if entry.get("body_encoded") else body
                for name in re.findall(r"<Key>(.*?)</Key>", text, flags=re.S):
                    objects.pop((bucket, html.unescape(name)), None)
            else:
                other.append(line + "\n")
        return buckets + other + list(objects.values())

    def restart(self) -> float:
        """Starts the server again with the recorded state; returns the seconds it took."""
        import urllib.request

        began = time.perf_counter()
        if self.alive():
            self.kill()
        self.recording.write_text("".join(self._compacted()))
        self.start()
        urllib.request.urlopen(
            urllib.request.Request(f"{self.url}/moto-api/recorder/replay-recording", method="POST"), timeout=600
        ).read()
        self.restarts += 1
        return time.perf_counter() - began


def reference_train(argv: list[str], out: str, what: str) -> tuple[float, dict, list[dict]]:
    """Runs `argv` (a `train` to `out`) to its end; returns its wall time, its model_snapshot and
    its metrics lines. SystemExit if it fails."""
    run = Run(argv)
    rc, err, _ = run.finish()
    duration = time.perf_counter() - run.started
    if rc != 0:
        raise SystemExit(f"{what}: the reference run failed ({rc}):\n{err}")
    return duration, model_snapshot(out), metrics_lines(out)


def killed_run_problems(out: str, store: str, scratch: str) -> list[str]:
    """After a kill of a `train` to `out`: unless its model had been committed, `predict` on the
    run directory (writing `scratch`) must refuse with one line; checkpoints/LATEST, when there,
    must name a committed step that passes its digests."""
    problems = []
    if not model_committed(out):
        bad = refuses(cli("predict", out, store, "--out", scratch))
        if bad:
            problems.append(f"predict did not refuse: {bad}")
    bad = checkpoint_problem(out)
    return problems + ([bad] if bad else [])


def killed_store_problems(reference: dict, out: str, scratch: str) -> tuple[bool, list[str]]:
    """After a kill of an `ingest` to `out`: whether the store had been committed (e.g. killed
    while deleting what it replaced), and the problems: committed, it must be the reference's
    store; else `inspect --verify` and `train` (to `scratch`) must refuse it with one line."""
    if subprocess.run(cli("inspect", out, "--verify"), capture_output=True).returncode == 0:
        bad = same_store(reference, out, "the store committed before the kill")
        return True, [bad] if bad else []
    refused = (refuses(argv) for argv in (cli("inspect", out, "--verify"), cli("train", out, "--out", scratch)))
    return False, [bad for bad in refused if bad]


def new_row(duration: float) -> dict:
    """A table row's counts: trials, kills landed (of them SIGTERMs), runs that finished before
    their kill, kills after the output's commit, failed trials; and the reference's seconds."""
    return {"trials": 0, "kills": 0, "sigterm": 0, "missed": 0, "after_commit": 0, "failures": 0, "ref_s": duration}


def counted_run(argv: list[str], what: str, sections: list | None = None) -> tuple[float, tuple[int, int]]:
    """Runs `argv` (a cli() command) to its end through HOOKED; returns its wall time and the
    storage operations of its driver (all, the rare ones). SystemExit if it fails. `sections`,
    for a `run`, gets where each section began: [name, operations before it]."""
    count_file = f"{tempfile.gettempdir()}/chaos-count-{os.getpid()}"
    run = Run(hooked(argv), {"CHAOS_COUNT_TO": count_file})
    rc, err, _ = run.finish()
    duration = time.perf_counter() - run.started
    if rc != 0:
        raise SystemExit(f"{what}: the uninterrupted run failed ({rc}):\n{err}")
    every, rare, began = Path(count_file).read_text().split(" ", 2)
    Path(count_file).unlink()
    if sections is not None:
        sections += json.loads(began)
    return duration, (int(every), int(rare))


def aimed_kill(rng, n_ops: tuple[int, int]) -> tuple[dict, str]:
    """A SIGKILL by HOOKED just before or after a storage operation drawn uniformly over all
    `n_ops[0]` of them or, half the time, the `n_ops[1]` rare ones: its environment, and what it is."""
    kind = "rare" if rng.random() < 0.5 else "any"
    at = int(rng.integers(1, n_ops[kind == "rare"] + 1))
    when = "before" if rng.random() < 0.5 else "after"
    env = {"CHAOS_KILL_AT": str(at), "CHAOS_KILL_WHEN": when, "CHAOS_KILL_KIND": kind}
    return env, f"{when} {'rare ' if kind == 'rare' else ''}storage operation {at}"


@contextlib.contextmanager
def s3_server(folder: Path):
    """A MotoServer (above); the AWS_* variables are set in os.environ, so every child process
    and s3fs here use it. Yields it."""
    server = MotoServer(folder)
    server.start()
    os.environ.update(
        AWS_ACCESS_KEY_ID="chaos",
        AWS_SECRET_ACCESS_KEY="chaos",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=server.url,
    )
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(BUCKET)
    try:
        yield server
    finally:
        server.kill()


class Run:
    """One child command in a process group of its own."""

    def __init__(self, argv: list[str], env: dict | None = None):
        self.proc = subprocess.Popen(
            argv,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        self.started = time.perf_counter()

    def signal_at(self, at: float, sig: int, *, group: bool = True) -> bool:
        """Sends `sig` to the whole group (or to the driver alone, as `kill PID` would) `at`
        seconds after the start; False if the run ended before."""
        while time.perf_counter() - self.started < at:
            if self.proc.poll() is not None:
                return False
            time.sleep(0.002)
        if self.proc.poll() is not None:
            return False
        if group:
            os.killpg(self.proc.pid, sig)
        else:
            os.kill(self.proc.pid, sig)
        return True

    def finish(self, timeout: float = RUN_TIMEOUT_S) -> tuple[int, str, bool]:
        """Waits for the driver (SIGKILLs its group after `timeout` s: `self.hung`), then for every
        process of its group (SIGKILL after 60 s); returns (status, stderr, whether a process of
        the group outlived the driver by 60 s)."""
        self.hung = False
        try:
            _, err = self.proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            _, err = self.proc.communicate()
            err += f"\n(chaos: killed after the run timeout of {timeout:.0f} s)"
            self.hung = True
        self.ended = time.perf_counter()
        deadline = time.monotonic() + 60
        stray = False
        while group_alive(self.proc.pid):
            if time.monotonic() > deadline:
                stray = True
                os.killpg(self.proc.pid, signal.SIGKILL)
                deadline = time.monotonic() + 60
            time.sleep(0.05)
        return self.proc.returncode, err, stray


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # zombies of the group count as gone: reaped by init, they hold nothing
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def model_snapshot(run: str) -> dict:
    from streamfit import storage
    from streamfit.model import load_model

    loc = storage.resolve(run).join("model")
    files = storage.committed(loc)
    assert files is not None, f"{run}: no committed model"
    record = json.loads(files.join("model.json").read_bytes())
    return {"arrays": load_model(run)._arrays(), "record": record}


def model_committed(run: str) -> bool:
    from streamfit import storage

    return storage.committed(storage.resolve(run).join("model")) is not None


def metrics_lines(run: str) -> list[dict]:
    from streamfit import storage

    text = storage.resolve(run).join("metrics.jsonl").read_bytes().decode()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def checkpoint_problem(run: str) -> str | None:
    """None if checkpoints/LATEST is absent or names a committed step that passes its digests."""
    from streamfit import storage
    from streamfit.checkpoint import _record_digest

    root = storage.resolve(run).join("checkpoints")
    latest = root.join("LATEST")
    if not latest.exists():
        return None
    try:
        step = int(json.loads(latest.read_bytes())["step"])
    except Exception as e:
        return f"LATEST unreadable: {e}"
    files = storage.committed(root.join(f"step-{step:06d}"))
    if files is None:
        return f"LATEST names step {step}, which is not committed"
    try:
        record = json.loads(files.join("meta.json").read_bytes())
        data = files.join("arrays.npz").read_bytes()
    except Exception as e:
        return f"step {step} unreadable: {e}"
    if record.get("record_sha256") != _record_digest(record):
        return f"step {step}: meta.json fails its digest"
    if hashlib.sha256(data).hexdigest() != record.get("arrays_sha256"):
        return f"step {step}: arrays.npz fails its digest"
    return None


def one_error_line(err: str) -> bool:
    """Whether stderr `err` is one line `error: …` (and nothing else: no traceback, no log line)."""
    lines = [x for x in err.splitlines() if x.strip()]
    return len(lines) == 1 and lines[0].startswith("error:")


def refuses(argv: list[str]) -> str | None:
    """None if the command exits 2 with a one-line error, else what it did."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    if done.returncode == 2 and one_error_line(done.stderr):
        return None
    return f"{' '.join(map(str, argv[3:]))}: exit {done.returncode}, stderr {done.stderr.strip()[-400:]!r}"


def same_metrics(ref: list[dict], got: list[dict], *, by_group: bool) -> str | None:
    """Each step once, in order, as in the reference, with the same values but `wall_time`.
    `by_group` (ppdsparse on Dask workers, whose steps are its class groups in completion
    order): each group once, with the same values but `wall_time` and the sums over the groups so far (`nnz`, `objective`)."""
    if by_group:
        ref, got = (
            [{k: v for k, v in r.items() if k not in ("step", "nnz", "objective")} for r in x] for x in (ref, got)
        )
        ref, got = (sorted(x, key=lambda r: r.get("group", -1)) for x in (ref, got))
    steps = [r.get("step") for r in got]
    if steps != [r.get("step") for r in ref]:
        dup = sorted({s for s in steps if steps.count(s) > 1})
        return (
            f"metrics steps {steps[:5]}…{steps[-5:]} ({len(steps)} lines, duplicated {dup}) != reference's {len(ref)}"
        )
    for a, b in zip(ref, got, strict=True):
        a, b = ({k: v for k, v in r.items() if k != "wall_time"} for r in (a, b))
        if a != b:
            return f"metrics of step {a.get('step')} differ: {a} != {b}"
    return None


def same_model(ref: dict, got: dict) -> str | None:
    if ref["record"] != got["record"]:
        keys = sorted(
            k for k in ref["record"].keys() | got["record"].keys() if ref["record"].get(k) != got["record"].get(k)
        )
        return f"model.json differs in {keys}"
    a, b = ref["arrays"], got["arrays"]
    if a.keys() != b.keys():
        return f"model arrays {sorted(b)} != {sorted(a)}"
    bad = [k for k in a if a[k].dtype != b[k].dtype or a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes()]
    return f"model arrays differ: {bad}" if bad else None


def train_job(solver, store, workers, rng, base, trials, aimed, switch, log) -> dict:
    params = [x for p in SOLVER_PARAMS[solver] for x in ("-p", p)]
    other = "2" if workers == "0" else "0"  # the engine a resume switches to (models are the same on any)

    def command(out, extra=(), resume=False, n_workers=workers):
        return cli("train", store, "--solver", solver, *params, "--n-workers", n_workers, "--out", out,
                   *extra, *(["--resume"] if resume else []))  # fmt: skip

    by_group = solver == "ppdsparse" and workers != "0"
    ref_out = f"{base}/ref"
    duration, reference, ref_metrics = reference_train(command(ref_out), ref_out, solver)
    row = new_row(duration)
    span = duration  # kill times are drawn in [0, span): the shortest uninterrupted run seen
    n_ops: dict[str, tuple[int, int]] = {}  # per policy: an uninterrupted run's driver's storage operations, rare ones

    def ops(policy) -> tuple[int, int]:
        key = " ".join(policy) or "default"
        if key not in n_ops:
            counted = f"{base}/count-{len(n_ops)}"
            _, (every, rare) = counted_run(command(counted, policy), f"{solver} ({key})")
            bad = same_model(reference, model_snapshot(counted))
            if bad:  # the checkpoint policy must not change the model
                log(f"    FAIL: {key}, uninterrupted: {bad}")
                row["failures"] += 1
            n_ops[key] = every, rare
            log(f"    {key}: {every} storage operations in the driver, {rare} rare")
        return n_ops[key]

    for t in range(trials):
        out = f"{base}/t{t}"
        policy = POLICIES[int(rng.integers(len(POLICIES)))]
        n_kills = 1 + int(rng.integers(2))
        problems = []
        finished = False
        engines = [workers] + [other if rng.random() < switch else workers for _ in range(n_kills)]
        for k in range(n_kills):
            argv = command(out, policy, resume=k > 0, n_workers=engines[k])
            if rng.random() < aimed:  # SIGKILL at a storage operation drawn uniformly
                env, where = aimed_kill(rng, ops(policy))
                sig, what = signal.SIGKILL, f"SIGKILL {where}"
                run = Run(hooked(argv), env)
                rc, err, stray = run.finish()
                landed = rc == -signal.SIGKILL
            else:
                sig = signal.SIGTERM if rng.random() < 0.25 else signal.SIGKILL
                at = float(rng.uniform(0, span))
                group = rng.random() >= 0.25
                what = f"{sig.name} at {at:.2f}s{'' if group else ' to the driver alone'}"
                run = Run(argv)
                landed = run.signal_at(at, sig, group=group)
                rc, err, stray = run.finish()
                if not landed and k == 0 and rc == 0:
                    span = min(span, time.perf_counter() - run.started)
            if stray:
                problems.append(f"kill {k + 1}: a process of the group outlived the driver by 60 s")
            if not landed or rc == 0 or model_committed(out):
                # the run ended, or its model was committed before the signal took effect (a
                # SIGTERM in the last moments of a run ends it with -15): complete, as it should be
                if landed and rc != 0:
                    row["kills"] += 1
                    row["after_commit"] += 1
                else:
                    row["missed"] += 1
                if rc not in (0, -signal.SIGTERM, -signal.SIGKILL) or not model_committed(out):
                    problems.append(f"run {k + 1} failed ({rc}): {err.strip()[-600:]}")
                finished = True
                break
            row["kills"] += 1
            row["sigterm"] += sig == signal.SIGTERM
            expected = (-signal.SIGKILL,) if sig == signal.SIGKILL else (143, -signal.SIGTERM, -signal.SIGKILL)
            if rc not in expected:
                problems.append(f"kill {k + 1} ({what}): exit {rc}: {err.strip()[-600:]}")
            bad = killed_run_problems(out, store, f"{base}/p{t}.csv")
            problems += [f"after kill {k + 1} ({what}): {p}" for p in bad]
            log(f"    kill {k + 1}: {what}, --n-workers {engines[k]}, exit {rc}")
        if not finished:
            run = Run(command(out, policy, resume=True, n_workers=engines[-1]))
            rc, err, _ = run.finish()
            if rc != 0:
                problems.append(f"the last --resume failed ({rc}): {err.strip()[-600:]}")
        if not any(p.startswith(("the last", "run ")) for p in problems):
            for bad in (
                same_model(reference, model_snapshot(out)),
                same_metrics(
                    ref_metrics, metrics_lines(out), by_group=by_group or (solver == "ppdsparse" and other in engines)
                ),
            ):
                if bad:
                    problems.append(bad)
        switched = f", resumed with --n-workers {other}" if other in engines else ""
        record_trial(row, f"trial {t} ({' '.join(policy) or 'default policy'}{switched})", problems, log)
    return row


def record_trial(row: dict, label: str, problems: list[str], log) -> None:
    row["trials"] += 1
    row["failures"] += bool(problems)
    log(f"  {label}: {'FAIL' if problems else 'ok'}")
    for p in problems:
        log(f"    FAIL: {p}")


def write_libsvm(path: Path, n_rows: int = 30000, n_features: int = 5000, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        for i in range(n_rows):
            cols = np.sort(rng.choice(n_features, size=20, replace=False)) + 1
            vals = rng.random(20)
            f.write(f"{i % 7} " + " ".join(f"{c}:{v:.4f}" for c, v in zip(cols, vals, strict=True)) + "\n")


def store_snapshot(url: str) -> dict:
    from streamfit.store import open_store

    store = open_store(url)
    problems = store.verify()
    assert not problems, f"{url}: {problems}"
    X, y = store.to_scipy()
    return {
        "fingerprint": store.manifest.fingerprint,
        "manifest_chunks": [c.sha256 for c in store.manifest.chunks],
        "arrays": [X.indptr, X.indices, X.data, np.asarray(y)],
    }


def same_store(reference: dict, out: str, what: str) -> str | None:
    got = store_snapshot(out)
    if got["fingerprint"] != reference["fingerprint"] or got["manifest_chunks"] != reference["manifest_chunks"]:
        return f"{what}'s fingerprint differs from the reference's"
    if not all(np.array_equal(a, b) for a, b in zip(got["arrays"], reference["arrays"], strict=True)):
        return f"{what}'s arrays differ from the reference's"
    return None


def ingest_job(source, workers, rng, base, trials, aimed, log) -> dict:
    def command(out, overwrite):
        return cli("ingest", source, "--format", "libsvm", "--no-hash", "--batch-size", "512", "--chunk-rows", "1000",
                   "--n-workers", workers, "--out", out, *(["--overwrite"] if overwrite else []))  # fmt: skip

    ref_out = f"{base}/ref.zarr"
    duration, n_ops = counted_run(command(ref_out, False), "ingest")
    log(f"    {n_ops[0]} storage operations in the driver, {n_ops[1]} rare")
    reference = store_snapshot(ref_out)
    row = new_row(duration)
    for t in range(trials):
        out = f"{base}/t{t}.zarr"
        problems = []
        if rng.random() < aimed:
            env, where = aimed_kill(rng, n_ops)
            what = f"SIGKILL {where}"
            run = Run(hooked(command(out, False)), env)
            rc, err, stray = run.finish()
            landed = rc == -signal.SIGKILL
        else:
            at = float(rng.uniform(0, duration))
            group = rng.random() >= 0.25
            sig = signal.SIGTERM if rng.random() < 0.25 else signal.SIGKILL
            what = f"{sig.name} at {at:.2f}s{'' if group else ' to the driver alone'}"
            run = Run(command(out, False))
            landed = run.signal_at(at, sig, group=group)
            rc, err, stray = run.finish()
            landed = landed and rc != 0
            if landed and sig == signal.SIGTERM and rc not in (143, -signal.SIGTERM):
                problems.append(f"after a {what}: exit {rc} (143 expected): {err.strip()[-600:]}")
            row["sigterm"] += landed and sig == signal.SIGTERM
        if stray:
            problems.append("a process of the group outlived the driver by 60 s")
        if not landed:
            row["missed"] += 1
        else:
            row["kills"] += 1
            committed, bad = killed_store_problems(reference, out, f"{base}/run{t}")
            row["after_commit"] += committed
            problems += [f"after a {what}: {p}" for p in bad]
        run = Run(command(out, True))
        rc, err, _ = run.finish()
        if rc != 0:
            problems.append(f"the --overwrite re-run failed ({rc}): {err.strip()[-600:]}")
        else:
            bad = same_store(reference, out, "the re-run store")
            if bad:
                problems.append(bad)
        record_trial(row, f"trial {t} ({what}{'' if landed else ', finished first'})", problems, log)
    return row


# --- pipelines: `streamfit run PIPELINE.yaml` ---------------------------------------------------

PIPELINE_SOLVER = ("bcd", ["mode=chunks", "group_size=8", "max_iter=25", "tol=1e-9"])  # tens of checkpoints


def write_pipeline(path: Path, root: str, train_file: Path, test_file: Path) -> None:
    """A pipeline of all five sections (ingest -> ingest_test, i.e. ingest --like -> train ->
    evaluate -> predict) whose outputs all lie under `root` (a folder or URL)."""
    solver, params = PIPELINE_SOLVER
    text = {
        "ingest": {"inputs": [str(train_file)], "out": f"{root}/train.zarr", "format": "libsvm", "no_hash": True,
                   "chunk_rows": 200},
        "ingest_test": {"inputs": [str(test_file)], "out": f"{root}/test.zarr"},
        "train": {"solver": solver, "out": f"{root}/run", "params": dict(p.split("=", 1) for p in params)},
        "evaluate": {},
        "predict": {"source": str(test_file), "format": "libsvm", "out": f"{root}/predictions.csv", "top_k": 2},
    }  # fmt: skip
    path.write_text(json.dumps(text, indent=1))  # JSON is YAML


def pipeline_outputs(root: str) -> tuple[dict, list[str]]:
    """What looks complete under a pipeline's `root`: {"train.zarr", "test.zarr": store_snapshot,
    "model": model_snapshot, "evaluation": evaluation.json's metrics, "predictions": the file's
    bytes}, those present; and the problems met reading them (a committed store that fails
    its verification, say)."""
    from streamfit import storage

    found, problems = {}, []
    for name in ("train.zarr", "test.zarr"):
        if storage.committed(storage.resolve(f"{root}/{name}")) is not None:
            try:
                found[name] = store_snapshot(f"{root}/{name}")
            except Exception as e:
                problems.append(f"{name} is committed but does not read back: {e}")
    if model_committed(f"{root}/run"):
        try:
            found["model"] = model_snapshot(f"{root}/run")
        except Exception as e:
            problems.append(f"the model is committed but does not load: {e}")
    evaluation = storage.resolve(f"{root}/run").join("evaluation.json")
    if evaluation.exists():
        try:
            found["evaluation"] = json.loads(evaluation.read_bytes())["metrics"]
        except Exception as e:
            problems.append(f"evaluation.json does not read: {e}")
    predictions = storage.resolve(f"{root}/predictions.csv")
    if predictions.exists():
        found["predictions"] = predictions.read_bytes()
    return found, problems


def pipeline_differences(reference: dict, found: dict) -> list[str]:
    """How each output in `found` differs from the reference's."""
    bad = []
    for name, got in found.items():
        want = reference[name]
        if name.endswith(".zarr"):
            same = got["fingerprint"] == want["fingerprint"] and got["manifest_chunks"] == want["manifest_chunks"]
            same = same and all(np.array_equal(a, b) for a, b in zip(got["arrays"], want["arrays"], strict=True))
            problem = None if same else "differs from the reference's store"
        elif name == "model":
            problem = same_model(want, got)
        else:
            problem = None if got == want else f"differs from the reference's ({len(got)} vs {len(want)})"
        if problem:
            bad.append(f"{name}: {problem}")
    return bad


def pipeline_job(storage_kind, root, workers, rng, work, trials, aimed, log) -> dict:
    """Kill `streamfit run` anywhere in its five sections, then do what a user would: `run
    --resume`, `run` again (which runs or refuses with one line naming the fix, then followed),
    or `run --overwrite`; a second kill in half the trials hits that run, and a last `run
    --resume` finishes. After each kill every output that looks complete must be the
    reference's; at the end all five must be."""
    folder = work / f"pipelines-{storage_kind}-w{workers}"
    folder.mkdir(parents=True, exist_ok=True)
    files = work / "digits-train.svm", work / "digits-test.svm"

    def pipeline(name):
        path = folder / f"{name}.yaml"
        write_pipeline(path, f"{root}/{name}", *files)
        return path

    def command(name, *flags):
        return cli("run", pipeline(name), "--n-workers", workers, *flags)

    began: list = []
    duration, n_ops = counted_run(command("ref", "--overwrite"), "pipeline", began)
    ends = [at for _, at in began[1:]] + [n_ops[0]]
    sizes = {name: end - at for (name, at), end in zip(began, ends, strict=True) if end > at}  # operations of each
    log(f"    storage operations of each section: {sizes}")
    log(f"    {n_ops[0]} storage operations in the driver, {n_ops[1]} rare; {duration:.1f} s")
    reference, problems = pipeline_outputs(f"{root}/ref")
    if problems or len(reference) != 5:
        raise SystemExit(f"pipeline: the reference run left {sorted(reference)}: {problems}")
    ref_metrics = metrics_lines(f"{root}/ref/run")
    row = new_row(duration)
    for t in range(trials):
        name = f"t{t}"
        problems = []
        recovery = ["--resume", "plain", "--overwrite"][int(rng.integers(3))]
        n_kills = 1 + int(rng.integers(2))
        done = False
        steps = []
        for k in range(n_kills):
            flags = ["--overwrite"] if k == 0 else ([] if recovery == "plain" else [recovery])
            if rng.random() < aimed:  # at an operation of a section drawn uniformly (as many as it had when counted)
                part = list(sizes)[int(rng.integers(len(sizes)))]
                at = int(rng.integers(1, sizes[part] + 1))
                when = "before" if rng.random() < 0.5 else "after"
                env = {"CHAOS_KILL_AT": str(at), "CHAOS_KILL_WHEN": when, "CHAOS_KILL_SECTION": part}
                what = f"SIGKILL {when} storage operation {at} of the {part} section"
                run = Run(hooked(command(name, *flags)), env)
                rc, err, stray = run.finish()
                sig, landed = signal.SIGKILL, rc == -signal.SIGKILL
            else:
                sig = signal.SIGTERM if rng.random() < 0.25 else signal.SIGKILL
                at_s = float(rng.uniform(0, duration))
                group = rng.random() >= 0.25
                what = f"{sig.name} at {at_s:.2f}s{'' if group else ' to the driver alone'}"
                run = Run(command(name, *flags))
                landed = run.signal_at(at_s, sig, group=group)
                rc, err, stray = run.finish()
                landed = landed and rc != 0
            steps.append(f"run {' '.join(flags) or '(plain)'}: {what}{'' if landed else ' (finished first)'}")
            if stray:
                problems.append(f"kill {k + 1}: a process of the group outlived the driver by 60 s")
            if not landed:
                row["missed"] += 1
                if rc != 0:
                    problems.append(f"run {k + 1} failed ({rc}): {err.strip()[-600:]}")
                if rc == 0:
                    done = True
                    break
            else:
                row["kills"] += 1
                row["sigterm"] += sig == signal.SIGTERM
                if sig == signal.SIGTERM and rc not in (143, -signal.SIGTERM):
                    problems.append(f"after a {what}: exit {rc} (143 expected): {err.strip()[-600:]}")
            found, unreadable = pipeline_outputs(f"{root}/{name}")
            problems += [f"after kill {k + 1} ({what}): {p}" for p in unreadable]
            problems += [f"after kill {k + 1} ({what}): {p}" for p in pipeline_differences(reference, found)]
            if landed and len(found) == 5:
                row["after_commit"] += 1
            log(f"    kill {k + 1}: {what}, exit {rc}, complete: {', '.join(found) or 'nothing'}")
            if k == 0 and recovery == "plain":  # the user runs the same command again
                plain = subprocess.run(command(name), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
                lines = [x for x in plain.stderr.splitlines() if x.strip()]
                if plain.returncode == 0:
                    steps.append("run (plain): finished")
                    done = True
                    break
                if not (
                    plain.returncode == 2 and len(lines) == 1 and ("--resume" in lines[0] or "--overwrite" in lines[0])
                ):
                    problems.append(
                        f"run again after the kill: exit {plain.returncode}, {plain.stderr.strip()[-600:]!r}"
                    )
                    break
                recovery = "--resume" if "--resume" in lines[0] else "--overwrite"  # the fix it names
                steps.append(f"run (plain): refused, naming {recovery}")
        if not done and not problems:
            rc, err, _ = Run(command(name, "--resume")).finish()
            steps.append("run --resume")
            if rc != 0:
                problems.append(f"the last run --resume failed ({rc}): {err.strip()[-600:]}")
        if not problems:
            found, unreadable = pipeline_outputs(f"{root}/{name}")
            problems += unreadable + pipeline_differences(reference, found)
            if len(found) != 5:
                problems.append(f"after the last run only {sorted(found)} look complete")
            else:
                bad = same_metrics(ref_metrics, metrics_lines(f"{root}/{name}/run"), by_group=False)
                if bad:
                    problems.append(bad)
        record_trial(row, f"trial {t}: {'; '.join(steps)}", problems, log)
    return row


# --- an external cluster: `--scheduler ADDRESS` ------------------------------------------------


class LoopbackCluster:
    """A `dask scheduler` and `dask worker` processes on 127.0.0.1 (as tests/test_cluster.py
    starts them: the scheduler picks its port and writes it to a --scheduler-file), each in a
    process group of its own, so a kill of a `streamfit` group leaves them running."""

    def __init__(self, folder: Path, n_workers: int = 2):
        self.folder, self.n_workers = folder, n_workers
        self.scheduler: subprocess.Popen | None = None
        self.workers: list[subprocess.Popen] = []
        self.address = ""
        self.starts = 0

    def _spawn(self, *args: str) -> subprocess.Popen:
        return subprocess.Popen(
            [sys.executable, "-m", *args, "--no-dashboard"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
        )  # fmt: skip

    def start(self) -> None:
        self.starts += 1
        scheduler_file = self.folder / f"scheduler-{self.starts}.json"
        self.scheduler = self._spawn(
            "distributed.cli.dask_scheduler",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--scheduler-file",
            str(scheduler_file),
        )
        deadline = time.monotonic() + 60
        while True:
            with contextlib.suppress(OSError, ValueError):
                self.address = json.loads(scheduler_file.read_text())["address"]
                break
            if time.monotonic() > deadline or self.scheduler.poll() is not None:
                raise SystemExit(f"the dask scheduler wrote no {scheduler_file}")
            time.sleep(0.05)
        self.workers = []
        self.fill()

    def fill(self) -> None:
        """Starts workers until `n_workers` of this tool's are alive, and waits until the
        scheduler has them all."""
        from distributed import Client

        self.workers = [w for w in self.workers if w.poll() is None]
        while len(self.workers) < self.n_workers:
            self.workers.append(
                self._spawn("distributed.cli.dask_worker", self.address, "--nthreads", "1", "--host", "127.0.0.1")
            )
        with Client(self.address, timeout="30s") as client:
            client.wait_for_workers(self.n_workers, timeout=60)
            deadline = time.monotonic() + 60
            while len(client.scheduler_info()["workers"]) > self.n_workers and time.monotonic() < deadline:
                time.sleep(0.1)  # a killed worker's removal

    def n_connected(self) -> int:
        from distributed import Client

        with Client(self.address, timeout="30s") as client:
            return len(client.scheduler_info()["workers"])

    def kill_worker(self) -> None:
        os.kill(self.workers[0].pid, signal.SIGKILL)
        self.workers[0].wait()

    def stop(self) -> None:
        for p in [self.scheduler, *self.workers]:
            if p is not None and p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


CLUSTER_SCENARIOS = ("driver", "worker", "scheduler")


def cluster_job(solver, store, cluster, rng, base, trials, aimed, log) -> dict[str, dict]:
    """`train --scheduler` on `cluster`, trial t killing (CLUSTER_SCENARIOS[t % 3]): the
    driver (its process group, which the cluster's processes are not in; the workers stay), then
    `--resume` on the same cluster; one worker at a time drawn in [0, D) (the run must finish
    or fail with one line; a `--resume` after a failure), then a new worker; or the scheduler at
    such a time (the driver must exit ≠ 0 with one line within `worker_timeout` + 2 min, not
    hang), then a `--resume` on a new cluster. Every trial ends with the reference's model
    and metrics. Returns a row per scenario."""
    params = [x for p in SOLVER_PARAMS[solver] for x in ("-p", p)]
    by_group = solver == "ppdsparse"

    def command(out, *extra):
        return cli("train", store, "--solver", solver, *params, "--scheduler", cluster.address, "--out", out,
                   "--worker-timeout", "20", *extra)  # fmt: skip

    ref_out = f"{base}/ref"
    duration, reference, ref_metrics = reference_train(command(ref_out), ref_out, f"{solver} on the cluster")
    rows = {s: new_row(duration) for s in CLUSTER_SCENARIOS}
    counted, n_ops = counted_run(command(f"{base}/count", "--checkpoint-every", "1"), f"{solver} on the cluster")
    span = min(duration, counted)  # kill times are drawn in [0, span): the first run on new workers compiles
    log(f"    {duration:.1f} s; {n_ops[0]} storage operations in the driver, {n_ops[1]} rare (--checkpoint-every 1)")
    for t in range(trials):
        scenario = CLUSTER_SCENARIOS[t % len(CLUSTER_SCENARIOS)]
        row = rows[scenario]
        out = f"{base}/t{t}"
        problems = []
        policy = ["--checkpoint-every", "1"]
        sig = signal.SIGKILL
        if scenario == "driver" and rng.random() < aimed:
            env, where = aimed_kill(rng, n_ops)
            what = f"driver SIGKILLed {where}"
            run = Run(hooked(command(out, *policy)), env)
            rc, err, stray = run.finish()
            landed = rc == -signal.SIGKILL
        else:
            at_s = float(rng.uniform(0, span))
            run = Run(command(out, *policy))
            if scenario == "driver":
                sig = signal.SIGTERM if rng.random() < 0.25 else signal.SIGKILL
                what = f"driver {sig.name} at {at_s:.2f}s"
                landed = run.signal_at(at_s, sig)
            else:
                what = f"{scenario} SIGKILLed at {at_s:.2f}s"
                landed = run.signal_at(at_s, 0)  # no signal: only waits
                if landed:
                    if scenario == "worker":
                        cluster.kill_worker()
                    else:
                        cluster.stop()
                    killed_at = time.perf_counter()
            rc, err, stray = run.finish(timeout=RUN_TIMEOUT_S if scenario != "scheduler" else 20 + 120)
            if scenario == "scheduler" and landed:
                what += f", driver exited {run.ended - killed_at:.1f} s later"
        if stray:
            problems.append("a process of the driver's group outlived it by 60 s")
        if not landed:
            row["missed"] += 1
            if rc != 0:
                problems.append(f"the run failed ({rc}): {err.strip()[-600:]}")
            span = min(span, run.ended - run.started)
        else:
            row["kills"] += 1
            row["sigterm"] += sig == signal.SIGTERM
            if scenario == "driver":
                expected = (-signal.SIGKILL,) if sig == signal.SIGKILL else (143, -signal.SIGTERM, -signal.SIGKILL)
                if rc not in expected:
                    problems.append(f"{what}: exit {rc}: {err.strip()[-600:]}")
            elif run.hung:
                problems.append(f"{what}: the driver hung: {err.strip()[-600:]}")
            elif rc != 0 and not one_error_line(err):
                problems.append(f"{what}: exit {rc} without one error line: {err.strip()[-1500:]}")
            elif scenario == "scheduler" and rc == 0 and not model_committed(out):
                problems.append(f"{what}: exit 0 without a model")
        if scenario == "scheduler" and landed:
            cluster.start()
        elif scenario == "worker" and landed:
            cluster.fill()
        elif scenario == "driver" and landed:
            # the workers stay: the cluster still has them all
            if cluster.n_connected() != cluster.n_workers:
                problems.append(f"after the {what} the cluster has {cluster.n_connected()} workers")
        if landed and rc != 0:
            row["after_commit"] += model_committed(out)
            problems += [f"after the {what}: {p}" for p in killed_run_problems(out, store, f"{base}/p{t}.csv")]
            rc2, err2, _ = Run(command(out, *policy, "--resume")).finish()
            if rc2 != 0:
                problems.append(f"the --resume failed ({rc2}): {err2.strip()[-600:]}")
        if not any("failed" in p or "hung" in p for p in problems):
            for bad in (
                same_model(reference, model_snapshot(out)),
                same_metrics(ref_metrics, metrics_lines(out), by_group=by_group),
            ):
                if bad:
                    problems.append(bad)
        record_trial(row, f"trial {t} ({what}{'' if landed else ', finished first'}, exit {rc})", problems, log)
    return rows


# --- the S3 server killed mid-save -------------------------------------------------------------


def server_job(target, server, store, source, workers, rng, base, trials, aimed, log) -> dict:
    """SIGKILL the S3 server (MotoServer) under a `train` (`target` "train": bcd with a
    checkpoint at every step) or an `ingest` (`target` "ingest", of `source`): by the driver
    itself just before or after its n-th storage operation (n over the rare ones, the commits,
    deletions and new files of a checkpoint or a store, or over all), or at a time drawn in
    [0, D). The writer must exit ≠ 0 with one `error:` line and no traceback (or 0 with its
    output complete, if the kill came after its last request); after a restart of the server
    with its state, nothing looks complete that was not committed, and `train --resume` /
    `ingest --overwrite` gives the reference's model and metrics / store."""
    solver = "bcd"
    params = [x for p in SOLVER_PARAMS[solver] for x in ("-p", p)]

    def command(out, *extra):
        if target == "train":
            return cli("train", store, "--solver", solver, *params, "--n-workers", workers, "--out", out,
                       "--checkpoint-every", "1", *extra)  # fmt: skip
        return cli("ingest", source, "--format", "libsvm", "--no-hash", "--chunk-rows", "200",
                   "--n-workers", workers, "--out", out, *extra)  # fmt: skip

    suffix = ".zarr" if target == "ingest" else ""
    duration, n_ops = counted_run(command(f"{base}/ref{suffix}"), f"{target} for the server kills")
    log(f"    {duration:.1f} s; {n_ops[0]} storage operations in the driver, {n_ops[1]} rare")
    if target == "train":
        reference, ref_metrics = model_snapshot(f"{base}/ref"), metrics_lines(f"{base}/ref")
    else:
        reference = store_snapshot(f"{base}/ref.zarr")
    row = {**new_row(duration), "exit_s": [], "restart_s": []}  # seconds from a kill to the driver's exit, restarts
    flag = Path(f"{tempfile.gettempdir()}/chaos-killed-{os.getpid()}")
    for t in range(trials):
        out = f"{base}/t{t}{suffix}"
        problems = []
        flag.unlink(missing_ok=True)
        if rng.random() < aimed:
            env, where = aimed_kill(rng, n_ops)
            what = f"server SIGKILLed {where}"
            env.update(CHAOS_KILL_PID=str(server.proc.pid), CHAOS_KILLED_FLAG=str(flag))
            run = Run(hooked(command(out)), env)
            killed_at = None
            while run.proc.poll() is None and killed_at is None:
                if flag.exists():
                    killed_at = time.perf_counter()
                time.sleep(0.01)
            rc, err, stray = run.finish()
            landed = flag.exists()
        else:
            at_s = float(rng.uniform(0, duration))
            what = f"server SIGKILLed at {at_s:.2f}s"
            run = Run(command(out))
            landed = run.signal_at(at_s, 0)
            if landed:
                server.kill()
                killed_at = time.perf_counter()
            rc, err, stray = run.finish()
        if stray:
            problems.append("a process of the group outlived the driver by 60 s")
        if not landed:
            row["missed"] += 1
            if rc != 0:
                problems.append(f"the run failed ({rc}): {err.strip()[-600:]}")
        else:
            row["kills"] += 1
            if killed_at is not None:
                row["exit_s"].append(run.ended - killed_at)
                what += f", driver exited {run.ended - killed_at:.1f} s later"
            if rc != 0 and not one_error_line(err):
                problems.append(f"{what}: exit {rc} without one error line: {err.strip()[-1500:]}")
            row["restart_s"].append(server.restart())
            if target == "train":
                committed = model_committed(out)
                bad = killed_run_problems(out, store, f"{base}/p{t}.csv")
            else:
                committed, bad = killed_store_problems(reference, out, f"{base}/run{t}")
            row["after_commit"] += committed
            problems += [f"after the {what}: {p}" for p in bad]
            if rc == 0 and not committed:
                problems.append(f"{what}: exit 0 without a complete output")
        if landed and not problems:
            again = command(out, "--resume") if target == "train" else command(out, "--overwrite")
            rc2, err2, _ = Run(again).finish()
            if rc2 != 0:
                problems.append(f"the {' '.join(again[4:5])} after the restart failed ({rc2}): {err2.strip()[-600:]}")
        if not any("failed" in p for p in problems):
            if target == "train":
                for bad in (
                    same_model(reference, model_snapshot(out)),
                    same_metrics(ref_metrics, metrics_lines(out), by_group=False),
                ):
                    if bad:
                        problems.append(bad)
            else:
                bad = same_store(reference, out, "the final store")
                if bad:
                    problems.append(bad)
        record_trial(row, f"trial {t} ({what}{'' if landed else ', finished first'}, exit {rc})", problems, log)
    flag.unlink(missing_ok=True)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", default=",".join(JOBS), help=f"which of {', '.join(JOBS)}")
    ap.add_argument("--solvers", default=",".join(SOLVERS), help="the solvers of the train and cluster jobs")
    ap.add_argument("--storage", default="local,s3", help="local, s3 or both")
    ap.add_argument("--workers", default="0,2", help="train/ingest/pipeline/server --n-workers values (0: in process)")
    ap.add_argument("--trials", type=int, default=4, help="kill-and-resume trials per solver, storage and engine")
    ap.add_argument("--aimed", type=float, default=0.5, help="fraction of kills aimed at a storage operation")
    ap.add_argument(
        "--switch-engine", type=float, default=0.25, help="probability that a resume runs on the other engine (0 <-> 2)"
    )
    ap.add_argument("--ingest-trials", type=int, default=4)
    ap.add_argument("--no-ingest", action="store_true", help="the same as leaving ingest out of --jobs")
    ap.add_argument("--pipeline-trials", type=int, default=4, help="per storage and engine")
    ap.add_argument("--cluster-trials", type=int, default=6, help="per solver and storage, the scenarios in turn")
    ap.add_argument("--server-trials", type=int, default=4, help="per target (train, ingest) and engine")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory, removed at the end")
    args = ap.parse_args()
    jobs = set(args.jobs.split(",")) - ({"ingest"} if args.no_ingest else set())
    unknown = jobs - set(JOBS)
    if unknown:
        ap.error(f"--jobs: unknown {', '.join(sorted(unknown))}; choose from {', '.join(JOBS)}")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # stops the S3 server and the cluster on the way out
    work = Path(args.workdir or tempfile.mkdtemp(prefix="chaos-resume-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)

    def log(msg):
        print(msg, flush=True)

    from sklearn.datasets import dump_svmlight_file, load_digits

    X, y = load_digits(return_X_y=True)
    digits = work / "digits.svm"
    dump_svmlight_file(X, y, str(digits), zero_based=False)
    dump_svmlight_file(X[:1400], y[:1400], str(work / "digits-train.svm"), zero_based=False)
    dump_svmlight_file(X[1400:], y[1400:], str(work / "digits-test.svm"), zero_based=False)
    big = work / "gen.svm"
    if "ingest" in jobs:
        write_libsvm(big)
    rows = []
    cluster = None
    with contextlib.ExitStack() as stack:
        for storage_kind in args.storage.split(","):
            server = None
            if storage_kind == "s3":
                server = stack.enter_context(s3_server(work))
                root = f"s3://{BUCKET}/{time.strftime('%H%M%S')}"
            else:
                root = str(work / "local")
            store = f"{root}/digits.zarr"
            subprocess.run(
                cli("ingest", digits, "--format", "libsvm", "--no-hash", "--chunk-rows", 200, "--out", store,
                    "--overwrite"),
                check=True,
                capture_output=True,
            )  # fmt: skip
            for workers in args.workers.split(","):
                for solver in args.solvers.split(",") if "train" in jobs else []:
                    log(f"{solver}, {storage_kind}, --n-workers {workers} (load {os.getloadavg()[0]:.2f})")
                    row = train_job(
                        solver,
                        store,
                        workers,
                        rng,
                        f"{root}/w{workers}/{solver}",
                        args.trials,
                        args.aimed,
                        args.switch_engine,
                        log,
                    )
                    rows.append((solver, storage_kind, workers, row))
                if "ingest" in jobs:
                    log(f"ingest, {storage_kind}, --n-workers {workers} (load {os.getloadavg()[0]:.2f})")
                    row = ingest_job(
                        big, workers, rng, f"{root}/w{workers}/ingest", args.ingest_trials, args.aimed, log
                    )
                    rows.append(("ingest", storage_kind, workers, row))
                if "pipeline" in jobs:
                    log(f"pipeline, {storage_kind}, --n-workers {workers} (load {os.getloadavg()[0]:.2f})")
                    row = pipeline_job(
                        storage_kind, f"{root}/w{workers}/pipe", workers, rng, work, args.pipeline_trials, args.aimed,
                        log,
                    )  # fmt: skip
                    rows.append(("pipeline (run)", storage_kind, workers, row))
                if "server" in jobs and server is not None:
                    for target in ("train", "ingest"):
                        log(f"S3 server killed, {target}, --n-workers {workers} (load {os.getloadavg()[0]:.2f})")
                        row = server_job(
                            target, server, store, digits, workers, rng, f"{root}/w{workers}/server-{target}",
                            args.server_trials, args.aimed, log,
                        )  # fmt: skip
                        rows.append((f"S3 server killed: {target}", storage_kind, workers, row))
            if "cluster" in jobs:
                if cluster is None:
                    cluster = LoopbackCluster(work)
                    stack.callback(cluster.stop)
                    cluster.start()
                for solver in args.solvers.split(","):
                    log(f"{solver} on --scheduler, {storage_kind} (load {os.getloadavg()[0]:.2f})")
                    by_scenario = cluster_job(
                        solver, store, cluster, rng, f"{root}/cluster/{solver}", args.cluster_trials, args.aimed, log
                    )
                    for scenario, row in by_scenario.items():
                        rows.append((f"{solver}: {scenario} killed", storage_kind, "--scheduler", row))
    print(f"\nseed {args.seed}, load average {os.getloadavg()[0]:.2f}")
    print(
        "| job | storage | --n-workers | reference s | trials | kills (SIGTERM) | finished before a kill "
        "| killed after its commit | failed trials |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for job, storage_kind, workers, r in rows:
        print(
            f"| {job} | {storage_kind} | {workers} | {r['ref_s']:.1f} | {r['trials']} | {r['kills']} ({r['sigterm']}) | "
            f"{r['missed']} | {r['after_commit']} | {r['failures']} |"
        )
    for job, _, workers, r in rows:
        if r.get("exit_s"):
            print(
                f"{job}, --n-workers {workers}: the driver exited {min(r['exit_s']):.1f}-{max(r['exit_s']):.1f} s "
                f"after the server's kill; restarts with the recorded state took "
                f"{min(r['restart_s']):.1f}-{max(r['restart_s']):.1f} s"
            )
    failed = sum(r["failures"] for *_, r in rows)
    print(f"failed trials: {failed}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
