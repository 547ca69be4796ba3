"""Two writers of one s3:// store, run directory or prediction output at once, against a loopback S3 server (issue 18).

On local disk a second writer is refused by a lock (flock); behind a URL by a lease
(streamfit.lease: `NAME/LEASE`, predict's `OUT.LEASE`). This starts two `streamfit` processes
writing the same URL (two ingests of different inputs, with and without --overwrite; two trains
of one run directory, the second with --resume as a scheduler's retry would; two predicts of one
output), the second 0-2 s after the first holds its lease (or, with --no-wait, 0-2 s after the
first started, as before the lease), and prints, per case, each command's exit status and last
line, then what the URL holds: `inspect --verify` of the committed store (its status and how
many problems it lists), `evaluate` of the run, the rows of the prediction, and whether a lease
was left behind. One JSON object per line.

    PYTHONPATH=. python tools/check_two_writers_s3.py [--rows 20000]

The S3 server is moto's ThreadedMotoServer on 127.0.0.1 (the test extra installs it); the data
are generated LIBSVM rows (8 non-zeros of 200 columns, 4 classes), cut into chunks of 250 rows;
predict scores 20x --rows raw rows.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

CLI = [sys.executable, "-m", "streamfit.cli", "-q"]


def _write_libsvm(path: str, n: int, rng: np.random.Generator) -> None:
    with open(path, "w") as f:
        for i in range(n):
            cols = np.sort(rng.choice(200, 8, replace=False)) + 1
            f.write(f"{i % 4} " + " ".join(f"{c}:{rng.random():.3f}" for c in cols) + "\n")


def _last_line(out: str, err: str) -> str:
    lines = (out + err).strip().splitlines()
    return lines[-1] if lines else ""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=20000, help="rows of the first input (the second: 60 %%)")
    parser.add_argument(
        "--no-wait",
        action="store_true",
        help="start the second writer after the first starts, not once it holds its lease",
    )
    args = parser.parse_args()
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    env = {
        **os.environ,
        "AWS_ACCESS_KEY_ID": "key",
        "AWS_SECRET_ACCESS_KEY": "secret",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_ENDPOINT_URL": f"http://{host}:{port}",
        "OPENBLAS_NUM_THREADS": "1",
    }
    os.environ.update(env)
    import s3fs

    fs = s3fs.S3FileSystem()
    fs.mkdir("two")
    folder = tempfile.mkdtemp(prefix="two-writers-")
    rng = np.random.default_rng(0)
    a, b = os.path.join(folder, "a.svm"), os.path.join(folder, "b.svm")
    _write_libsvm(a, args.rows, rng)
    _write_libsvm(b, args.rows * 3 // 5, rng)
    scored = os.path.join(folder, "scored.svm")  # 20x the rows: the first predict still runs as the second starts
    _write_libsvm(scored, args.rows * 20, rng)

    def run(*argv: str) -> subprocess.CompletedProcess:
        return subprocess.run(CLI + list(argv), env=env, capture_output=True, text=True)

    def both(name: str, first: list[str], second: list[str], delay: float, lease: str) -> None:
        start = time.monotonic()
        procs = [subprocess.Popen(CLI + first, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)]
        while not args.no_wait and procs[0].poll() is None:  # until the first holds the lease
            fs.invalidate_cache()
            if fs.exists(lease.removeprefix("s3://")):
                break
            time.sleep(0.05)
        held = time.monotonic()
        time.sleep(delay)
        procs.append(subprocess.Popen(CLI + second, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
        ends: list[float | None] = [None, None]
        while None in ends:  # each one's end, as it ends
            for i, p in enumerate(procs):
                if ends[i] is None and p.poll() is not None:
                    ends[i] = round(time.monotonic() - start, 1)
            time.sleep(0.05)
        ended = [(p.wait(), _last_line(*p.communicate())) for p in procs]
        fs.invalidate_cache()
        print(
            json.dumps(
                {
                    "case": name,
                    "first": ended[0],
                    "second": ended[1],
                    "first held its lease after s": round(held - start, 1),
                    "second started after s": round(held - start + delay, 1),
                    "first, second ended after s": ends,
                    "lease left": fs.exists(lease.removeprefix("s3://")),
                }
            )
        )

    def verify(url: str) -> None:
        checked = run("inspect", url, "--verify", "--json")
        info = json.loads(checked.stdout) if checked.stdout.strip() else {}
        problems = info.get("problems", [])
        print(
            json.dumps(
                {
                    "verify": url,
                    "status": checked.returncode,
                    "n_rows": info.get("n_rows"),
                    "problems": len(problems),
                    "first": problems[0] if problems else _last_line(checked.stdout, checked.stderr),
                }
            )
        )

    def ingest(data: str, out: str, *more: str) -> list[str]:
        return ["ingest", data, "--no-hash", "--chunk-rows", "250", "--out", out, *more]

    both(
        "ingest, both at once",
        ingest(a, "s3://two/s1.zarr"),
        ingest(b, "s3://two/s1.zarr"),
        0,
        "s3://two/s1.zarr/LEASE",
    )
    verify("s3://two/s1.zarr")
    for delay in (0.0, 1.0, 2.0):
        out = f"s3://two/over-{delay:g}.zarr"
        both(
            f"ingest --overwrite, the second {delay:g} s after",
            ingest(a, out, "--overwrite"),
            ingest(b, out, "--overwrite"),
            delay,
            f"{out}/LEASE",
        )
        verify(out)
    for delay in (0.0, 2.0):
        run_dir = f"s3://two/run-{delay:g}"
        train = ["train", "s3://two/s1.zarr", "--out", run_dir, "--n-workers", "0", "--solver", "stagewise"]
        train += ["-p", "n_passes=3", "--checkpoint-interval", "0"]
        both(f"train, the second (--resume) {delay:g} s after", train, [*train, "--resume"], delay, f"{run_dir}/LEASE")
        evaluated = run("evaluate", run_dir, "s3://two/s1.zarr")
        print(
            json.dumps(
                {
                    "evaluate": run_dir,
                    "status": evaluated.returncode,
                    "line": _last_line(evaluated.stdout, evaluated.stderr),
                }
            )
        )
    for parts in ([], ["--parts"]):
        out = "s3://two/p.csv" if not parts else "s3://two/p-parts.csv"
        predict = ["predict", "s3://two/run-0", scored, "--out", out, *parts]
        both(f"predict {' '.join(parts) or 'one file'}, both at once", predict, predict, 0, f"{out}.LEASE")
        if not parts:  # the one file: its header and a line per row scored
            text = fs.cat_file(out.removeprefix("s3://")).decode() if fs.exists(out.removeprefix("s3://")) else ""
            print(json.dumps({"output": out, "rows": max(len(text.splitlines()) - 1, 0)}))
    server.stop()


if __name__ == "__main__":
    main()
