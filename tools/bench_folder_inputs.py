"""Folder corpora as a data engineer has them: a folder of class folders (one file per document)
on local disk and on an S3 API server on loopback (moto's ThreadedMotoServer on 127.0.0.1, s3fs
as the client, as in the tests), and a zip archive of it, ingested in process and on 1 and 2
Dask workers, where a folder and a zip are cut into pieces of runs of documents. The server runs
in a process of its own (in the client's process, its work per request would compete with the
ingest for one interpreter: about 20 ms per GET here, whatever the concurrency).

    python tools/bench_folder_inputs.py [--documents 11314] [--workers 0,1,2] [--workdir /tmp]
        [--newsgroups PATH] [--piece-mib 8] [--inputs folder,s3-folder,zip,s3-zip]

--documents of the 20 Newsgroups training documents (every k-th, k = 11 314 // documents, of the
bydate tarball's 20news-bydate-train/ in archive order, up to --documents: at 2 000, 18 of the 20
groups; default all 11 314) are
extracted to WORKDIR/news/<group>/<id> and zipped (deflate, members in the folder's reading
order); the s3- inputs are uploaded to the S3 server. Each input of --inputs is ingested with the Python API (latin-1, hashed to 2^16
features, the text defaults) into a local store, in this process (N = 0) and on a LocalCluster
of N single-threaded worker processes (--scheduler; started and warmed before the clock, the
workers inherit the S3 settings). Reported per run: seconds, MB/s of documents, documents/s,
the speed-up over N = 1, the S3 / local slowdown, the S3 requests the server answered by kind
(GET, HEAD, LIST) and whether the store (classes, every chunk digest) is the first run's (the
folder's and the zip's stores are the same: the same documents in the same order). --piece-mib sets distributed.FOLDER_PIECE_BYTES. Needs the `test` extra
(moto[server], s3fs).
"""

from __future__ import annotations

import argparse
import collections
import logging
import os
import re
import shutil
import tarfile
import tempfile
import time
import zipfile

from bench_cluster_data import warm_cluster

BUCKET = "streamfit-bench-folders"
NEWSGROUPS = os.path.join(
    os.path.dirname(__file__), "..", "..", "shared", "data", "20newsgroups", "20news-bydate.tar.gz"
)


def serve(log_path: str, ports) -> None:
    """The S3 API server (a process of its own), its access log (a line per request) in log_path;
    its port is put on the queue `ports`."""
    from moto.server import ThreadedMotoServer

    werkzeug = logging.getLogger("werkzeug")
    werkzeug.setLevel(logging.INFO)
    werkzeug.propagate = False
    werkzeug.addHandler(logging.FileHandler(log_path))
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    ports.put(server.get_host_and_port()[1])
    while True:
        time.sleep(3600)


class RequestCounts:
    """The requests in the server's access log since the last call, by kind: GET, HEAD, PUT, ...
    and LIST (a GET of a bucket listing)."""

    def __init__(self, log_path: str):
        self.log_path, self.seen = log_path, 0

    def since(self) -> dict[str, int]:
        with open(self.log_path) as f:
            f.seek(self.seen)
            text = f.read()
            self.seen = f.tell()
        counts: collections.Counter[str] = collections.Counter()
        for method, target in re.findall(r'"\S*?(GET|HEAD|PUT|POST|DELETE) (\S+)', text):
            counts["LIST" if "list-type=2" in target else method] += 1
        return dict(counts)


def extract(tarball: str, folder: str, n: int) -> tuple[int, int]:
    """n documents of 20news-bydate-train/ (every k-th in archive order, k = 11 314 // n) as
    folder/<group>/<id>: (documents, bytes)."""
    stride = max(1, 11314 // n)
    count = seen = size = 0
    with tarfile.open(tarball, "r:gz") as tar:
        for member in tar:
            if count == n:
                break
            if not member.isfile() or not member.name.startswith("20news-bydate-train/"):
                continue
            seen += 1
            if (seen - 1) % stride:
                continue
            path = os.path.join(folder, *member.name.split("/")[1:])
            os.makedirs(os.path.dirname(path), exist_ok=True)
            data = tar.extractfile(member).read()  # type: ignore[union-attr]
            with open(path, "wb") as f:
                f.write(data)
            count, size = count + 1, size + len(data)
    return count, size


def make_zip(folder: str, path: str) -> None:
    """The folder's files zipped (deflate), in its reading order (class, then file name)."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        for group in sorted(os.listdir(folder)):
            for name in sorted(os.listdir(os.path.join(folder, group))):
                zf.write(os.path.join(folder, group, name), f"{group}/{name}")


def run(inputs: dict[str, str], workers: list[int], work: str, counts: RequestCounts) -> list[dict]:
    from streamfit.ingest.hashing import HashingConfig
    from streamfit.ingest.pipeline import IngestOptions, ingest
    from streamfit.store import open_store

    results = []
    for n in workers:
        with warm_cluster(n) as scheduler:
            for name, source in inputs.items():
                out = os.path.join(work, f"{name.replace(' ', '-')}-{n}.zarr")
                o = IngestOptions(
                    inputs=[source],
                    out=out,
                    hashing=HashingConfig(n_features=2**16),
                    source_options={"encoding": "latin-1"},
                    overwrite=True,
                    progress=False,
                    scheduler=scheduler,
                )
                counts.since()
                t = time.perf_counter()
                report = ingest(o)
                seconds = time.perf_counter() - t
                time.sleep(0.2)  # the server's last log lines
                requests = counts.since()
                m = open_store(out).manifest
                results.append(
                    {"input": name, "workers": n, "seconds": seconds, "documents": report.read}
                    | {"requests": requests, "digests": [c.sha256 for c in m.chunks] + m.classes}
                )
                shutil.rmtree(out, ignore_errors=True)
    return results


def report(results: list[dict], mib: float) -> None:
    reference = results[0]["digests"]
    print(
        f"{'input':<14} {'N':>2} {'s':>7} {'MB/s':>6} {'docs/s':>7} {'vs N=1':>7} {'s3/local':>8} "
        f"{'GET':>6} {'HEAD':>5} {'LIST':>5} same"
    )
    for r in results:
        by = {(q["input"], q["workers"]): q["seconds"] for q in results}
        one = by.get((r["input"], 1))
        local = by.get((r["input"].replace("s3 ", ""), r["workers"])) if r["input"].startswith("s3 ") else None
        q, seconds = r["requests"], r["seconds"]
        speedup = f"{one / seconds:.2f}" if one else "-"
        slowdown = f"{seconds / local:.2f}" if local else "-"
        print(
            f"{r['input']:<14} {r['workers']:>2} {seconds:7.2f} {mib / seconds:6.2f} "
            f"{r['documents'] / seconds:7.0f} {speedup:>7} {slowdown:>8} {q.get('GET', 0):>6} {q.get('HEAD', 0):>5} "
            f"{q.get('LIST', 0):>5} {r['digests'] == reference}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--documents", type=int, default=11314)
    ap.add_argument("--workers", default="0,1,2")
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    ap.add_argument("--newsgroups", default=NEWSGROUPS)
    ap.add_argument("--piece-mib", type=float, default=8)
    ap.add_argument("--inputs", default="folder,s3-folder,zip,s3-zip", help="which inputs to ingest")
    a = ap.parse_args()
    if not os.path.exists(a.newsgroups):
        raise SystemExit(f"{a.newsgroups}: not found; pass --newsgroups 20news-bydate.tar.gz")

    import multiprocessing

    from streamfit.ingest import distributed

    distributed.FOLDER_PIECE_BYTES = int(a.piece_mib * 2**20)
    work = tempfile.mkdtemp(prefix="bench_folder_inputs-", dir=a.workdir)
    log_path = os.path.join(work, "requests.log")
    spawn = multiprocessing.get_context("spawn")
    ports = spawn.Queue()
    server = spawn.Process(target=serve, args=(log_path, ports), daemon=True)
    server.start()
    os.environ.update(
        AWS_ACCESS_KEY_ID="bench",
        AWS_SECRET_ACCESS_KEY="bench",
        AWS_DEFAULT_REGION="us-east-1",
        AWS_ENDPOINT_URL=f"http://127.0.0.1:{ports.get(timeout=120)}",
    )
    import s3fs

    s3 = s3fs.S3FileSystem(skip_instance_cache=True)
    s3.mkdir(BUCKET)
    counts = RequestCounts(log_path)
    try:
        folder, archive = os.path.join(work, "news"), os.path.join(work, "news.zip")
        n_docs, size = extract(a.newsgroups, folder, a.documents)
        make_zip(folder, archive)
        chosen = a.inputs.split(",")
        t = time.perf_counter()
        if "s3-folder" in chosen:
            s3.put(folder, f"{BUCKET}/news", recursive=True)
        if "s3-zip" in chosen:
            s3.put(archive, f"{BUCKET}/news.zip")
        upload = time.perf_counter() - t
        print(
            f"{n_docs} documents, {size / 2**20:.1f} MiB in {len(os.listdir(folder))} class folders; zip "
            f"{os.path.getsize(archive) / 2**20:.1f} MiB; uploaded in {upload:.1f} s; pieces of "
            f"{a.piece_mib:g} MiB of documents"
        )
        inputs = {
            "folder": folder,
            "s3 folder": f"s3://{BUCKET}/news",
            "zip": archive,
            "s3 zip": f"s3://{BUCKET}/news.zip",
        }
        inputs = {name: source for name, source in inputs.items() if name.replace(" ", "-") in chosen}
        results = run(inputs, [int(n) for n in a.workers.split(",")], work, counts)
        report(results, size / 2**20)
    finally:
        shutil.rmtree(work, ignore_errors=True)
        server.terminate()


if __name__ == "__main__":
    main()
