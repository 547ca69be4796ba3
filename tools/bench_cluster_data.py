"""The cost of object storage: the same job on local disk and through an S3 API server on
loopback (moto's ThreadedMotoServer on 127.0.0.1, s3fs as the client, as in tests/test_storage.py).

    python tools/bench_cluster_data.py [--records 200000] [--workdir /tmp] [--workers 2] [--repeat 1]

A seeded JSONL text corpus (--records documents, 20 labels, Zipf-like words) is written locally
and uploaded. Then, for each target (local paths, s3:// URLs), each step runs as its own
`streamfit` process, timed by wall clock: ingest (raw input read from the target, store written
to it; hashed to 2^16 features), train (fbpd, 3 iterations, --workers Dask workers on loopback
reading the store from the target, run directory on the target), evaluate (in the driver) and
predict (store → CSV on the target). Reported per step: seconds on each target, the S3 / local
ratio (the slowdown) and, for S3, the requests the server answered by kind (GET / PUT / HEAD /
LIST / DELETE), which is where the extra time goes. Ingest also in MB/s of raw input and
records/s. Best of --repeat. Needs the `test` extra (moto[server], s3fs).

Ingest on N Dask workers (`ingest --n-workers/--scheduler`) is measured by
tools/bench_ingest_workers.py.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

import numpy as np

BUCKET = "streamfit-bench"


def write_corpus(path: str, n: int, seed: int = 0) -> None:
    """n JSONL documents {"text", "label"}: 20 labels, words drawn from a Zipf-like distribution
    over 50 000 word ids with a label-dependent share of 200 content words."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(50_000)])
    p = 1.0 / np.arange(1, len(vocab) + 1) ** 1.1
    p /= p.sum()
    with open(path, "w") as f:
        for start in range(0, n, 10_000):
            m = min(10_000, n - start)
            labels = rng.integers(0, 20, m)
            lengths = rng.integers(20, 200, m)
            words = rng.choice(len(vocab), size=int(lengths.sum()), p=p)
            offsets = np.concatenate([[0], np.cumsum(lengths)])
            for i in range(m):
                doc = words[offsets[i] : offsets[i + 1]]
                doc[: lengths[i] // 5] = 49_000 + labels[i] * 50 + doc[: lengths[i] // 5] % 50  # content words
                f.write(json.dumps({"text": " ".join(vocab[doc]), "label": f"c{labels[i]}"}) + "\n")


class RequestCounter(logging.Handler):
    """Counts the requests the moto server logs (werkzeug's access log), by HTTP method."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()

    def emit(self, record):
        message = record.getMessage()
        for method in ("GET", "PUT", "HEAD", "DELETE", "POST"):
            if f'"{method} ' in message:
                kind = "LIST" if method == "GET" and "list-type=2" in message else method
                self.counts[kind] += 1


def run(args: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "streamfit.cli", "-q", *args], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"streamfit {' '.join(args)} failed:\n{proc.stderr}")
    return time.perf_counter() - t


def job(root: str, raw: str, workers: int, counter: RequestCounter | None, s3) -> dict:
    """Seconds per step (and S3 requests per step) of ingest, train, evaluate, predict under root."""
    store, out = f"{root}/store.zarr", f"{root}/run"
    steps = {
        "ingest": ["ingest", raw, "--out", store, "--n-features", str(2**16)],
        "train": ["train", store, "--solver", "fbpd", "-p", "max_iter=3", "--n-workers", str(workers), "--out", out],
        "evaluate": ["evaluate", out, store],
        "predict": ["predict", out, store, "--out", f"{root}/pred.csv"],
    }
    result = {}
    for name, argv in steps.items():
        if counter is not None:
            counter.counts.clear()
        seconds = run(argv)
        result[name] = {"seconds": seconds, "requests": dict(counter.counts) if counter is not None else {}}
    return result


def clear(root: str, s3) -> None:
    if root.startswith("s3://"):
        for key in s3.ls(BUCKET):
            if not key.endswith("/raw"):
                s3.rm(key, recursive=True)
    else:
        for name in ("store.zarr", "run", "pred.csv"):
            path = os.path.join(root, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else None
            if os.path.isfile(path):
                os.remove(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()

    from moto.server import ThreadedMotoServer

    counter = RequestCounter()
    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    werkzeug.addHandler(counter)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://{host}:{port}",
    )
    import s3fs

    s3 = s3fs.S3FileSystem(skip_instance_cache=True)
    s3.mkdir(BUCKET)
    work = tempfile.mkdtemp(prefix="bench_cluster_data-", dir=a.workdir)
    try:
        raw = os.path.join(work, "corpus.jsonl")
        write_corpus(raw, a.records)
        mb = os.path.getsize(raw) / 2**20
        s3.put(raw, f"{BUCKET}/raw/corpus.jsonl")
        targets = {"local": (work, raw), "s3": (f"s3://{BUCKET}", f"s3://{BUCKET}/raw/corpus.jsonl")}
        best: dict[str, dict] = {}
        for _ in range(a.repeat):
            for target, (root, source) in targets.items():
                clear(root, s3)
                got = job(root, source, a.workers, counter if target == "s3" else None, s3)
                for step, r in got.items():
                    if step not in best.setdefault(target, {}) or r["seconds"] < best[target][step]["seconds"]:
                        best[target][step] = r
        print(f"corpus: {a.records} JSONL records, {mb:.1f} MB; train on {a.workers} Dask workers; best of {a.repeat}")
        print(f"{'step':<9} {'local s':>8} {'s3 s':>8} {'s3/local':>9}  s3 requests")
        for step in ("ingest", "train", "evaluate", "predict"):
            loc, rem = best["local"][step]["seconds"], best["s3"][step]["seconds"]
            req = ", ".join(f"{k} {v}" for k, v in sorted(best["s3"][step]["requests"].items()))
            print(f"{step:<9} {loc:8.2f} {rem:8.2f} {rem / loc:9.2f}  {req}")
        for target in ("local", "s3"):
            s = best[target]["ingest"]["seconds"]
            print(f"ingest {target}: {mb / s:.2f} MB/s, {a.records / s:,.0f} records/s (process start included)")
        print(json.dumps({"records": a.records, "mb": mb, "workers": a.workers, "best": best}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
