"""Randomized kill-and-resume campaign, as a user's batch scheduler kills jobs.

    python tools/chaos_resume.py [--solvers stagewise,bcd,ppdsparse,fbpd,multiboost]
                                 [--storage local,s3] [--workers 0,2] [--trials 4] [--aimed 0.5]
                                 [--switch-engine 0.25]
                                 [--ingest-trials 4] [--no-ingest] [--seed 0] [--workdir DIR]

For every storage (`local`: a directory on this disk; `s3`: `s3://` URLs on a moto server this
tool starts on 127.0.0.1, its AWS_* variables handed to every child), engine (`--workers`: 0 in
process, N an embedded cluster of N worker processes) and solver:

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

A failure is printed with what was seen and counted in the table; exit status 1 if any.
"""

from __future__ import annotations

import argparse
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
POLICIES = (["--checkpoint-every", "1"], ["--checkpoint-every", "3"], ["--checkpoint-interval", "0.5"], [])
BUCKET = "chaos"
RUN_TIMEOUT_S = 900


# `python -c HOOKED ARGS...`: streamfit ARGS whose driver counts its storage operations (the
# writes, deletions and commits of streamfit.storage) and, with CHAOS_KILL_AT=n, SIGKILLs its
# whole process group just before (CHAOS_KILL_WHEN=before) or just after the n-th, or with
# CHAOS_KILL_KIND=rare the n-th of the RARE ones (commits, deletions, whole new files: not the
# state and log writes of every step); with CHAOS_COUNT_TO=FILE it writes both counts there at
# exit; CHAOS_TRACE=1 prints each operation to stderr (to see what operation n is)
HOOKED = """
import atexit, os, signal, sys
from streamfit import storage
from streamfit.cli import main
kill_at, when = int(os.environ.get("CHAOS_KILL_AT", "0")), os.environ.get("CHAOS_KILL_WHEN", "after")
rare_only = os.environ.get("CHAOS_KILL_KIND") == "rare"
RARE = {"write_new", "publish_file", "remove_tree", "publish_dir", "remove_local_tree", "uncommit", "commit"}
count = [0, 0]  # every operation, the RARE ones
def hooked(owner, name):
    original = getattr(owner, name)
    def call(*args, **kwargs):
        if rare_only and name not in RARE:
            return original(*args, **kwargs)
        count[0] += 1
        count[1] += name in RARE
        n = count[1] if rare_only else count[0]
        if os.environ.get("CHAOS_TRACE"):
            print("chaos:", count[0], name, *(str(a)[-60:] for a in args[:1]), file=sys.stderr)
        if n == kill_at and when == "before":
            os.killpg(0, signal.SIGKILL)
        result = original(*args, **kwargs)
        if n == kill_at and when == "after":
            os.killpg(0, signal.SIGKILL)
        return result
    setattr(owner, name, call)
for name in ("write_bytes", "write_new", "append_text", "publish_file", "makedirs", "remove", "remove_tree", "write_files"):
    hooked(storage.Location, name)
for name in ("publish_dir", "remove_local_tree", "sync_tree", "uncommit"):
    hooked(storage, name)
hooked(storage.Attempt, "commit")
if os.environ.get("CHAOS_COUNT_TO"):
    atexit.register(lambda: open(os.environ["CHAOS_COUNT_TO"], "w").write(f"{count[0]} {count[1]}"))
main(sys.argv[1:], prog_name="streamfit")
"""


def hooked(argv: list[str]) -> list[str]:
    """`argv` (a cli() command) run through HOOKED."""
    return [sys.executable, "-c", HOOKED, *argv[3:]]


@contextlib.contextmanager
def s3_server():
    """moto's S3 server on 127.0.0.1, as tests/conftest.py's `s3` fixture starts it; the AWS_*
    variables are set in os.environ, so every child process and s3fs here use it."""
    import logging

    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="chaos",
        AWS_SECRET_ACCESS_KEY="chaos",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
    )
    import s3fs

    s3fs.S3FileSystem.clear_instance_cache()
    fs = s3fs.S3FileSystem(skip_instance_cache=True)
    fs.mkdir(BUCKET)
    try:
        yield
    finally:
        server.stop()


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

    def finish(self) -> tuple[int, str, bool]:
        """Waits for the driver, then for every process of its group (SIGKILL after 60 s);
        returns (status, stderr, whether a process of the group outlived the driver by 60 s)."""
        try:
            _, err = self.proc.communicate(timeout=RUN_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            _, err = self.proc.communicate()
            err += "\n(chaos: killed after the run timeout)"
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


def refuses(argv: list[str]) -> str | None:
    """None if the command exits 2 with a one-line error, else what it did."""
    done = subprocess.run(argv, capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    lines = [x for x in done.stderr.splitlines() if x.strip()]
    if done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error:"):
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
    run = Run(command(ref_out))
    rc, err, _ = run.finish()
    duration = time.perf_counter() - run.started
    if rc != 0:
        raise SystemExit(f"{solver}: the reference run failed ({rc}):\n{err}")
    reference, ref_metrics = model_snapshot(ref_out), metrics_lines(ref_out)
    row = {"trials": 0, "kills": 0, "sigterm": 0, "missed": 0, "after_commit": 0, "failures": 0, "ref_s": duration}
    span = duration  # kill times are drawn in [0, span): the shortest uninterrupted run seen
    n_ops: dict[str, tuple[int, int]] = {}  # per policy: an uninterrupted run's driver's storage operations, rare ones

    def ops(policy) -> tuple[int, int]:
        key = " ".join(policy) or "default"
        if key not in n_ops:
            counted = f"{base}/count-{len(n_ops)}"
            count_file = f"{tempfile.gettempdir()}/chaos-count-{os.getpid()}"
            rc, err, _ = Run(hooked(command(counted, policy)), {"CHAOS_COUNT_TO": count_file}).finish()
            if rc != 0:
                raise SystemExit(f"{solver}: the counting run failed ({rc}):\n{err}")
            bad = same_model(reference, model_snapshot(counted))
            if bad:  # the checkpoint policy must not change the model
                log(f"    FAIL: {key}, uninterrupted: {bad}")
                row["failures"] += 1
            every, rare = map(int, Path(count_file).read_text().split())
            Path(count_file).unlink()
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
                kind = "rare" if rng.random() < 0.5 else "any"
                sig, at = signal.SIGKILL, int(rng.integers(1, ops(policy)[kind == "rare"] + 1))
                when = "before" if rng.random() < 0.5 else "after"
                what = f"SIGKILL {when} {'rare ' if kind == 'rare' else ''}storage operation {at}"
                run = Run(hooked(argv), {"CHAOS_KILL_AT": str(at), "CHAOS_KILL_WHEN": when, "CHAOS_KILL_KIND": kind})
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
            bad = refuses(cli("predict", out, store, "--out", f"{base}/p{t}.csv"))
            if bad:
                problems.append(f"after kill {k + 1} ({what}) predict did not refuse: {bad}")
            bad = checkpoint_problem(out)
            if bad:
                problems.append(f"after kill {k + 1} ({what}): {bad}")
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
    count_file = f"{tempfile.gettempdir()}/chaos-count-{os.getpid()}"
    run = Run(hooked(command(ref_out, False)), {"CHAOS_COUNT_TO": count_file})
    rc, err, _ = run.finish()
    duration = time.perf_counter() - run.started
    if rc != 0:
        raise SystemExit(f"ingest: the reference run failed ({rc}):\n{err}")
    n_ops = list(map(int, Path(count_file).read_text().split()))
    Path(count_file).unlink()
    log(f"    {n_ops[0]} storage operations in the driver, {n_ops[1]} rare")
    reference = store_snapshot(ref_out)
    row = {"trials": 0, "kills": 0, "sigterm": 0, "missed": 0, "after_commit": 0, "failures": 0, "ref_s": duration}
    for t in range(trials):
        out = f"{base}/t{t}.zarr"
        problems = []
        if rng.random() < aimed:
            kind = "rare" if rng.random() < 0.5 else "any"
            at = int(rng.integers(1, n_ops[kind == "rare"] + 1))
            when = "before" if rng.random() < 0.5 else "after"
            what = f"SIGKILL {when} {'rare ' if kind == 'rare' else ''}storage operation {at}"
            run = Run(
                hooked(command(out, False)),
                {"CHAOS_KILL_AT": str(at), "CHAOS_KILL_WHEN": when, "CHAOS_KILL_KIND": kind},
            )
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
            if subprocess.run(cli("inspect", out, "--verify"), capture_output=True).returncode == 0:
                # killed after its commit (e.g. while deleting what it replaced): complete, so
                # it must be the reference's store
                row["after_commit"] += 1
                bad = same_store(reference, out, "the store committed before the kill")
                if bad:
                    problems.append(f"after a {what}: {bad}")
            else:
                for argv in (cli("inspect", out, "--verify"), cli("train", out, "--out", f"{base}/run{t}")):
                    bad = refuses(argv)
                    if bad:
                        problems.append(f"after a {what}: {bad}")
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--solvers", default=",".join(SOLVERS))
    ap.add_argument("--storage", default="local,s3", help="local, s3 or both")
    ap.add_argument("--workers", default="0,2", help="train/ingest --n-workers values (0: in process)")
    ap.add_argument("--trials", type=int, default=4, help="kill-and-resume trials per solver, storage and engine")
    ap.add_argument("--aimed", type=float, default=0.5, help="fraction of train kills aimed at a storage operation")
    ap.add_argument(
        "--switch-engine", type=float, default=0.25, help="probability that a resume runs on the other engine (0 <-> 2)"
    )
    ap.add_argument("--ingest-trials", type=int, default=4)
    ap.add_argument("--no-ingest", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workdir", default=None, help="default: a temporary directory, removed at the end")
    args = ap.parse_args()
    work = Path(args.workdir or tempfile.mkdtemp(prefix="chaos-resume-")).resolve()
    work.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(args.seed)

    def log(msg):
        print(msg, flush=True)

    from sklearn.datasets import dump_svmlight_file, load_digits

    digits = work / "digits.svm"
    dump_svmlight_file(*load_digits(return_X_y=True), str(digits), zero_based=False)
    big = work / "gen.svm"
    if not args.no_ingest:
        write_libsvm(big)
    rows = []
    with contextlib.ExitStack() as stack:
        for storage_kind in args.storage.split(","):
            if storage_kind == "s3":
                stack.enter_context(s3_server())
                root = f"s3://{BUCKET}/{time.strftime('%H%M%S')}"
            else:
                root = str(work / "local")
            store = f"{root}/digits.zarr"
            subprocess.run(
                cli(
                    "ingest",
                    digits,
                    "--format",
                    "libsvm",
                    "--no-hash",
                    "--chunk-rows",
                    200,
                    "--out",
                    store,
                    "--overwrite",
                ),
                check=True,
                capture_output=True,
            )
            for workers in args.workers.split(","):
                for solver in args.solvers.split(","):
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
                if not args.no_ingest:
                    log(f"ingest, {storage_kind}, --n-workers {workers} (load {os.getloadavg()[0]:.2f})")
                    row = ingest_job(
                        big, workers, rng, f"{root}/w{workers}/ingest", args.ingest_trials, args.aimed, log
                    )
                    rows.append(("ingest", storage_kind, workers, row))
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
    failed = sum(r["failures"] for *_, r in rows)
    print(f"failed trials: {failed}")
    if not args.workdir:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
