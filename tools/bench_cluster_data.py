"""The cost of object storage: the same job on local disk and through an S3 API server on
loopback (moto's ThreadedMotoServer on 127.0.0.1, s3fs as the client, as in tests/test_storage.py).

    python tools/bench_cluster_data.py [--records 200000] [--chunk-rows N] [--workdir /tmp]
        [--workers 2] [--repeat 1] [--ingest-workers 0,1,2] [--newsgroups PATH] [--no-job]

A seeded JSONL text corpus (--records documents, 20 labels, Zipf-like words) is written locally
and uploaded. Then, for each target (local paths, s3:// URLs), each step runs as its own
`streamfit` process, timed by wall clock: ingest (in process; raw input read from the target,
store written to it; hashed to 2^16 features, --chunk-rows rows per chunk), then on an embedded
cluster of --workers Dask workers on loopback (`--n-workers`), which read the store from the
target: train (fbpd, 3 iterations, run directory on the target), evaluate, predict (store → one
CSV on the target) and predict --parts (store → parts and a manifest on the target, written by
the workers). Reported per step: seconds on each target, the S3 / local ratio (the slowdown)
and, for S3, the requests the server answered (from every process: the driver and the
workers) by kind (GET / PUT / HEAD / LIST / DELETE / POST) and by kind and key (attempt
prefixes, chunk numbers and digests made generic), which is where the extra time goes. Ingest
also in MB/s of raw input and records/s. Best of --repeat. Needs the `test` extra (moto[server],
s3fs).

Ingest throughput (`--ingest-workers`, default 0,1,2): each input ingested with the Python API
in this process (N = 0) and on a LocalCluster of N single-threaded workers (`--scheduler`,
started and warmed before the clock; the workers inherit the S3 settings), from local disk to a
local store and from the S3 server to a store on it: the JSONL corpus, the same rows as one
Parquet file (row groups of 5 000 rows), and the 20 Newsgroups training documents from their
tarball (--newsgroups, default ../shared/data/20newsgroups/20news-bydate.tar.gz if present; one
piece: archives are cut only above 64 MiB). Reported: seconds, MB/s of raw input, records/s, the speed-up over
N = 0 and N = 1, the S3 / local slowdown, and whether every N gave the same store (manifest
chunk digests and classes). --no-job skips the train / evaluate / predict job. Larger
inputs and N on the lent 16-core machine: tools/bench_ingest_workers.py.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import logging
import os
import re
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
    """Counts the requests the moto server logs (werkzeug's access log), by kind (GET, PUT,
    HEAD, DELETE, POST; a GET with list-type=2 is a LIST) and by kind and key (`key_of`)."""

    def __init__(self):
        super().__init__()
        self.counts: collections.Counter[str] = collections.Counter()
        self.by_key: collections.Counter[tuple[str, str]] = collections.Counter()

    def clear(self) -> None:
        self.counts.clear()
        self.by_key.clear()

    def emit(self, record):
        message = record.getMessage()
        for method in ("GET", "PUT", "HEAD", "DELETE", "POST"):
            if f'"{method} ' in message:
                target = message.split(f'"{method} ', 1)[1].split(" ", 1)[0]
                kind = "LIST" if method == "GET" and "list-type=2" in target else method
                self.counts[kind] += 1
                self.by_key[kind, key_of(target)] += 1


def key_of(target: str) -> str:
    """A request's object key (or a LIST's prefix) with what varies between runs and objects
    made generic: the attempt prefix → `attempt-*`, chunk and step numbers → `N`, digests → `H`."""
    import urllib.parse

    path, _, query = target.partition("?")
    key = path.split("/", 2)[2] if path.count("/") >= 2 else ""
    if "list-type=2" in query:
        key = urllib.parse.parse_qs(query).get("prefix", [""])[0]
    elif query:
        key += "?" + query.split("=", 1)[0]  # multipart uploads: ?uploads, ?partNumber, ?uploadId
    key = re.sub(r"attempt-[0-9T]+-[0-9a-f]+", "attempt-*", urllib.parse.unquote(key))
    key = re.sub(r"[0-9a-f]{16,}", "H", key)
    return re.sub(r"\d{2,}", "N", key)


def run(args: list[str]) -> float:
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "streamfit.cli", "-q", *args], capture_output=True, text=True)
    if proc.returncode:
        raise SystemExit(f"streamfit {' '.join(args)} failed:\n{proc.stderr}")
    return time.perf_counter() - t


STEPS = ("ingest", "train", "evaluate", "predict", "predict --parts")


def job(root: str, raw: str, workers: int, chunk_rows: int | None, counter: RequestCounter | None) -> dict:
    """Seconds per step (and S3 requests per step, by kind and by key) of ingest, train,
    evaluate, predict to one file and predict to parts under root; train, evaluate and predict
    on `workers` Dask workers (an embedded cluster per step), which read the store from root."""
    store, out, cluster = f"{root}/store.zarr", f"{root}/run", ["--n-workers", str(workers)]
    argvs = {
        "ingest": ["ingest", raw, "--out", store, "--n-features", str(2**16)]
        + (["--chunk-rows", str(chunk_rows)] if chunk_rows else []),
        "train": ["train", store, "--solver", "fbpd", "-p", "max_iter=3", *cluster, "--out", out],
        "evaluate": ["evaluate", out, store, *cluster],
        "predict": ["predict", out, store, "--out", f"{root}/pred.csv", *cluster],
        "predict --parts": ["predict", out, store, "--out", f"{root}/parts.csv", "--parts", *cluster],
    }
    result = {}
    for name in STEPS:
        if counter is not None:
            counter.clear()
        seconds = run(argvs[name])
        result[name] = {"seconds": seconds, "requests": dict(counter.counts) if counter is not None else {}}
        if counter is not None:
            result[name]["by_key"] = {f"{kind} {key}": n for (kind, key), n in counter.by_key.most_common()}
    return result


def clear(root: str, s3) -> None:
    if root.startswith("s3://"):
        for key in s3.ls(BUCKET):
            if not key.endswith("/raw"):
                s3.rm(key, recursive=True)
    else:
        for name in ("store.zarr", "run", "pred.csv", "parts.csv"):
            path = os.path.join(root, name)
            shutil.rmtree(path, ignore_errors=True) if os.path.isdir(path) else None
            if os.path.isfile(path):
                os.remove(path)


NEWSGROUPS = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "20newsgroups", "20news-bydate.tar.gz"
)


def _warm() -> None:
    """Import the ingest path and the store backend, compile the hashing kernels (a worker's start)."""
    from streamfit.ingest.hashing import FeatureHasher, HashingConfig
    from streamfit.store import store

    FeatureHasher(HashingConfig(n_features=2**16)).transform_text(["warm up"])
    store._backend("zarr")


@contextlib.contextmanager
def warm_cluster(n: int):
    """The scheduler address of a LocalCluster of n single-threaded worker processes, each warmed
    by _warm (None for n = 0: ingest in this process); this process is warmed too. Closed on exit."""
    from distributed import Client, LocalCluster

    cluster = client = None
    try:
        if n:
            cluster = LocalCluster(n_workers=n, threads_per_worker=1, processes=True, dashboard_address=":0")
            client = Client(cluster)
            client.run(_warm)
        _warm()
        yield cluster.scheduler_address if cluster else None
    finally:
        if client is not None:
            client.close()
        if cluster is not None:
            cluster.close()


def ingest_throughput(inputs: dict, targets: list[str], workers: list[int], s3) -> list[dict]:
    """Seconds of each input x target x N ingest (the Python API; N >= 1 on a warmed
    LocalCluster, its start apart), with the store's rows, records read and chunk digests."""
    from streamfit.ingest.hashing import HashingConfig
    from streamfit.ingest.pipeline import IngestOptions, ingest
    from streamfit.store import open_store

    results = []
    for n in workers:
        with warm_cluster(n) as scheduler:
            for name, (paths, options, size) in inputs.items():
                for target in targets:
                    root = f"s3://{BUCKET}/ingest" if target == "s3" else os.path.dirname(paths["local"])
                    out = f"{root}/{name}-{n}.zarr"
                    o = IngestOptions(
                        inputs=[paths[target]],
                        out=out,
                        hashing=HashingConfig(n_features=2**16),
                        overwrite=True,
                        progress=False,
                        scheduler=scheduler,
                        **options,
                    )
                    t = time.perf_counter()
                    report = ingest(o)
                    seconds = time.perf_counter() - t
                    m = open_store(out).manifest
                    digests = [c.sha256 for c in m.chunks] + m.classes
                    results.append(
                        {"input": name, "target": target, "workers": n, "seconds": seconds, "mb": size / 2**20}
                        | {"records": report.read, "rows": m.n_rows, "digests": digests}
                    )
    return results


def _ratio(base: float | None, seconds: float) -> str:
    return f"{base / seconds:.2f}" if base else "-"


def print_throughput(results: list[dict]) -> None:
    print(
        f"{'input':<10} {'target':<6} {'N':>2} {'s':>7} {'MB/s':>6} {'rec/s':>7} {'vs N=0':>7} {'vs N=1':>7} {'s3/local':>8} same"
    )
    for r in results:
        same = [q for q in results if q["input"] == r["input"] and q["target"] == r["target"]]
        by_n = {q["workers"]: q["seconds"] for q in same}
        local = next(
            (
                q["seconds"]
                for q in results
                if (q["input"], q["workers"], q["target"]) == (r["input"], r["workers"], "local")
            ),
            None,
        )
        identical = all(q["digests"] == same[0]["digests"] for q in same)
        slowdown = f"{r['seconds'] / local:.2f}" if local and r["target"] == "s3" else "-"
        print(
            f"{r['input']:<10} {r['target']:<6} {r['workers']:>2} {r['seconds']:7.2f} {r['mb'] / r['seconds']:6.2f} "
            f"{r['records'] / r['seconds']:7.0f} {_ratio(by_n.get(0), r['seconds']):>7} {_ratio(by_n.get(1), r['seconds']):>7} {slowdown:>8} {identical}"
        )


def moto_server(access_log: logging.Handler):
    """A moto S3 server on loopback whose access log (werkzeug's) goes to `access_log`, the
    AWS_* variables pointing at it (inherited by the processes started later) and bucket BUCKET
    made: (server, an s3fs client)."""
    from moto.server import ThreadedMotoServer

    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    werkzeug.addHandler(access_log)
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
    return server, s3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--chunk-rows", type=int, help="rows per store chunk in the job's ingest (default: ingest's)")
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--ingest-workers", default="0,1,2", help="N of the ingest throughput runs ('' to skip them)")
    ap.add_argument("--newsgroups", default=NEWSGROUPS, help="the 20 Newsgroups bydate tarball (skipped if absent)")
    ap.add_argument("--no-job", action="store_true", help="skip the train / evaluate / predict job")
    a = ap.parse_args()

    counter = RequestCounter()
    server, s3 = moto_server(counter)
    work = tempfile.mkdtemp(prefix="bench_cluster_data-", dir=a.workdir)
    try:
        raw = os.path.join(work, "corpus.jsonl")
        write_corpus(raw, a.records)
        mb = os.path.getsize(raw) / 2**20
        s3.put(raw, f"{BUCKET}/raw/corpus.jsonl")
        if a.ingest_workers:
            import pyarrow.json as pj
            import pyarrow.parquet as pq

            parquet = os.path.join(work, "corpus.parquet")
            pq.write_table(pj.read_json(raw), parquet, row_group_size=5000)
            s3.put(parquet, f"{BUCKET}/raw/corpus.parquet")
            inputs = {
                "jsonl": ({"local": raw, "s3": f"s3://{BUCKET}/raw/corpus.jsonl"}, {}, os.path.getsize(raw)),
                "parquet": (
                    {"local": parquet, "s3": f"s3://{BUCKET}/raw/corpus.parquet"},
                    {},
                    os.path.getsize(parquet),
                ),
            }
            if os.path.exists(a.newsgroups):
                news = {"subset": "20news-bydate-train", "encoding": "latin-1"}
                s3.put(a.newsgroups, f"{BUCKET}/raw/20news.tar.gz")
                local = os.path.join(work, "20news-bydate.tar.gz")
                shutil.copy(a.newsgroups, local)
                paths = {"local": local, "s3": f"s3://{BUCKET}/raw/20news.tar.gz"}
                inputs["20news"] = (paths, {"source_options": news}, os.path.getsize(local))
            results = ingest_throughput(inputs, ["local", "s3"], [int(n) for n in a.ingest_workers.split(",")], s3)
            print_throughput(results)
            print(json.dumps({"ingest_throughput": [{k: v for k, v in r.items() if k != "digests"} for r in results]}))
        if a.no_job:
            return
        targets = {"local": (work, raw), "s3": (f"s3://{BUCKET}", f"s3://{BUCKET}/raw/corpus.jsonl")}
        best: dict[str, dict] = {}
        for _ in range(a.repeat):
            for target, (root, source) in targets.items():
                clear(root, s3)
                got = job(root, source, a.workers, a.chunk_rows, counter if target == "s3" else None)
                for step, r in got.items():
                    if step not in best.setdefault(target, {}) or r["seconds"] < best[target][step]["seconds"]:
                        best[target][step] = r
        print(f"corpus: {a.records} JSONL records, {mb:.1f} MB; train on {a.workers} Dask workers; best of {a.repeat}")
        print(f"{'step':<15} {'local s':>8} {'s3 s':>8} {'s3/local':>9}  s3 requests")
        for step in STEPS:
            loc, rem = best["local"][step]["seconds"], best["s3"][step]["seconds"]
            req = ", ".join(f"{k} {v}" for k, v in sorted(best["s3"][step]["requests"].items()))
            print(f"{step:<15} {loc:8.2f} {rem:8.2f} {rem / loc:9.2f}  {req}")
        for step in STEPS:
            print(f"s3 requests of {step}, by kind and key:")
            for key, n in best["s3"][step]["by_key"].items():
                print(f"  {n:5d}  {key}")
        for target in ("local", "s3"):
            s = best[target]["ingest"]["seconds"]
            print(f"ingest {target}: {mb / s:.2f} MB/s, {a.records / s:,.0f} records/s (process start included)")
        print(json.dumps({"records": a.records, "mb": mb, "workers": a.workers, "best": best}))
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.stop()


if __name__ == "__main__":
    main()
