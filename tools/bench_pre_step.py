"""Every pass over the data that `train` makes before its solver's first step, per solver: its
name (the `desc` of the Engine.map / Engine.map_reduce call), seconds and bytes read, and the
time from `train`'s call to the end of the first step; on a store of format version 4 (its
manifest records each class's rows: `Manifest.class_rows`) and on the same chunks under a
version-3 manifest (what streamfit wrote before: the driver then counts the classes in a pass
of its own, solvers.base.class_rows). Issues 19-20 (docs/benchmarks.md, "No pass before the
first step to count the classes").

    OPENBLAS_NUM_THREADS=1 python tools/bench_pre_step.py [--rows 600000] [--chunk-rows 16384]
        [--solvers fbpd,ppdsparse,stagewise,bcd,multiboost] [--workers 0,2] [--s3 SOLVER]
        [--full fbpd] [--workdir /tmp]

Data: a seeded multiclass store written with StoreWriter (zarr): --rows rows of 20 classes,
2^18 columns drawn Zipf-like (40-60 non-zeros a row, values in (0, 1]), rows of --chunk-rows;
its version-3 twin holds the same chunk files (hard links) under a manifest without
`class_rows`, format_version 3, resealed, and the same copy in its zarr.json (a store an older
streamfit wrote reads the same way). Each run is `streamfit.train.train` in this process
(n_workers 0: in process; N: an embedded cluster of N single-threaded workers), the solver's
defaults, after a run of each solver on a small store of the same kind (numba's kernels compiled);
the run is stopped as its first step starts (the time to it is what the passes delay), the
store's decoded-chunk cache of this process emptied before each run. --full SOLVER: that solver's whole train (default parameters but max_iter=1: init, one step, the model) on
both stores, in process and on the cluster. --s3 SOLVER: the stores uploaded to a moto S3
server on loopback and that solver's runs read from there (bytes: the sizes of the objects
GET, from the server's access log).

Bytes read locally are `rchar` (psutil: bytes through read(), page cache hits included) of this
process and its children (the cluster's workers) over each pass, and from the call to the first
step (which catches a read outside the engine's passes; on a cluster it includes what the
workers read as they start: Python's modules).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time

import numpy as np
import psutil
import scipy.sparse as sp

from streamfit.engine import Engine
from streamfit.solvers import all_solvers
from streamfit.store import StoreWriter
from streamfit.store import store as store_module
from streamfit.store.format import DIGEST_KEY, MANIFEST, json_digest
from streamfit.train import train

sys.path.insert(0, os.path.dirname(__file__))
from bench_cluster_data import BUCKET, moto_server  # noqa: E402

N_CLASSES = 20
N_FEATURES = 1 << 18


def make_store(path: str, rows: int, chunk_rows: int, seed: int = 0) -> None:
    """The seeded multiclass store described in the module docstring (format version 4)."""
    rng = np.random.default_rng(seed)
    p = 1.0 / np.arange(1, 50_001) ** 1.1
    p /= p.sum()
    writer = StoreWriter(path, chunk_rows=chunk_rows, overwrite=True)
    for start in range(0, rows, chunk_rows):
        n = min(chunk_rows, rows - start)
        labels = rng.integers(0, N_CLASSES, n).astype(np.int32)
        lengths = rng.integers(40, 61, n)
        cols = rng.choice(50_000, size=int(lengths.sum()), p=p) * 5 + np.repeat(labels % 5, lengths)
        X = sp.csr_matrix(
            (
                rng.random(cols.size).astype(np.float32) + np.float32(1e-3),
                cols,
                np.concatenate([[0], np.cumsum(lengths)]),
            ),
            shape=(n, N_FEATURES),
        )
        X.sum_duplicates()
        writer.write_rows(X, labels)
    writer.close(n_features=N_FEATURES, classes=[f"c{k}" for k in range(N_CLASSES)])


def as_version_3(src: str, dst: str) -> None:
    """`src`'s chunks (hard links) under a version-3 manifest: no class_rows, resealed, in
    manifest.json and in the copy zarr.json keeps."""
    shutil.copytree(src, dst, copy_function=os.link)
    for name in (MANIFEST, "zarr.json"):
        file = os.path.join(dst, name)
        record = json.load(open(file))
        manifest = record["attributes"]["streamfit.manifest"] if name == "zarr.json" else record
        del manifest["class_rows"]
        manifest["format_version"] = 3
        manifest[DIGEST_KEY] = json_digest(manifest, DIGEST_KEY)
        os.remove(file)  # a hard link: the version-4 store's file stays as it was
        with open(file, "w") as f:
            json.dump(record, f)


def read_chars() -> int:
    """rchar of this process and its descendants (the cluster's nanny and worker processes)."""
    me = psutil.Process()
    total = 0
    for proc in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            total += proc.io_counters().read_chars
    return total


class GetBytes(logging.Handler):
    """The bytes of the objects the moto server answered GETs for (werkzeug's access log), from
    the sizes listed when the stores were uploaded."""

    def __init__(self, sizes: dict[str, int]):
        super().__init__()
        self.sizes, self.total = sizes, 0

    def emit(self, record):
        message = record.getMessage()
        if '"GET /' in message:
            target = message.split('"GET /', 1)[1].split(" ", 1)[0].partition("?")[0]
            self.total += self.sizes.get(target, 0)


class Probe:
    """Times each Engine.map / map_reduce pass until the solver's first step starts, with the
    bytes it read (`count`), and stops the run there (FirstStep) unless `whole`."""

    class FirstStep(Exception):
        pass

    def __init__(self, solver_cls, count, whole: bool):
        self.solver_cls, self.count, self.whole = solver_cls, count, whole
        self.passes: list[tuple[str, float, int]] = []
        self.first_step_start: float | None = None
        self.first_step_bytes = 0  # `count` as the first step starts

    @contextlib.contextmanager
    def installed(self):
        originals = {name: getattr(Engine, name) for name in ("map", "map_reduce")}
        step = self.solver_cls.step
        probe = self

        def timed(name):
            def call(engine, fn, source, chunk_ids, desc=None, **kwargs):
                if probe.first_step_start is not None:
                    return originals[name](engine, fn, source, chunk_ids, desc, **kwargs)
                t, b = time.perf_counter(), probe.count()
                out = originals[name](engine, fn, source, chunk_ids, desc, **kwargs)
                probe.passes.append((desc or fn.__name__, time.perf_counter() - t, probe.count() - b))
                return out

            return call

        def first_step(solver, ctx, state):
            if probe.first_step_start is None:
                probe.first_step_start = time.perf_counter()
                probe.first_step_bytes = probe.count()
                if not probe.whole:
                    raise Probe.FirstStep
            return step(solver, ctx, state)

        try:
            for name in originals:
                setattr(Engine, name, timed(name))
            self.solver_cls.step = first_step
            yield self
        finally:
            for name, fn in originals.items():
                setattr(Engine, name, fn)
            self.solver_cls.step = step


def one_run(store: str, solver: str, workers: int, out: str, count, params: dict | None = None) -> dict:
    """One train (stopped as its first step starts unless `params` is given), probed, with no
    store opened before by this process (its decoded chunks cached)."""
    store_module._open_cached.cache_clear()
    store_module._shipped.cache_clear()
    probe = Probe(all_solvers()[solver], count, whole=params is not None)
    shutil.rmtree(out, ignore_errors=True)
    t, read = time.perf_counter(), count()
    with probe.installed():
        try:
            train(store, solver, out, params or {}, n_workers=workers, progress=False, overwrite=True)
        except Probe.FirstStep:
            pass
    end = time.perf_counter()
    if probe.first_step_start is None:
        raise SystemExit(f"{solver} on {store}: no step was taken")
    return {
        "to_first_step_s": probe.first_step_start - t,
        "to_first_step_MB": (probe.first_step_bytes - read) / 2**20,
        "train_s": end - t if params is not None else None,
        "passes": [{"pass": d, "s": s, "MB": b / 2**20} for d, s, b in probe.passes],
    }


def report(rows: list[dict]) -> None:
    print(
        "| solver | engine | data | store | passes before the first step (s, MB read) | to first step (s, MB) | whole (s) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        passes = "; ".join(f"{p['pass']} {p['s']:.2f} s, {p['MB']:.0f} MB" for p in r["passes"]) or "none"
        whole = "" if r["train_s"] is None else f"{r['train_s']:.2f}"
        print(
            f"| {r['solver']} | {r['engine']} | {r['where']} | v{r['version']} | {passes} | "
            f"{r['to_first_step_s']:.2f}, {r['to_first_step_MB']:.0f} | {whole} |"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=600_000)
    ap.add_argument("--chunk-rows", type=int, default=16384)
    ap.add_argument("--solvers", default="fbpd,ppdsparse,stagewise,bcd,multiboost")
    ap.add_argument("--workers", default="0,2", help="n_workers of each run (0: in process)")
    ap.add_argument("--s3", default="", help="a solver whose runs are repeated on the moto S3 server")
    ap.add_argument("--full", default="", help="a solver trained whole (max_iter=1) on both stores")
    ap.add_argument("--workdir", default=tempfile.gettempdir())
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bench_pre_step-", dir=a.workdir)
    results: list[dict] = []
    try:
        stores = {4: os.path.join(work, "v4.zarr"), 3: os.path.join(work, "v3.zarr")}
        t = time.perf_counter()
        make_store(stores[4], a.rows, a.chunk_rows)
        as_version_3(stores[4], stores[3])
        size = sum(
            os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(stores[4], "chunks")) for f in fs
        )
        print(f"store: {a.rows} rows, {size / 2**20:.0f} MB of chunk files, written in {time.perf_counter() - t:.0f} s")
        workers = [int(n) for n in a.workers.split(",")]
        warm = os.path.join(work, "warm.zarr")  # numba's kernels compiled (and cached on disk) before the clock
        make_store(warm, 2000, 500)
        for solver in a.solvers.split(","):
            one_run(warm, solver, 0, os.path.join(work, "run"), read_chars)

        def runs(where, paths, solvers, count, params=None):
            for solver in solvers:
                for n in workers:
                    for version in (3, 4):
                        r = one_run(paths[version], solver, n, os.path.join(work, "run"), count, params)
                        engine = "in process" if n == 0 else f"{n} workers"
                        results.append({"solver": solver, "engine": engine, "where": where, "version": version, **r})
                        print(json.dumps(results[-1]), flush=True)

        runs("local", stores, a.solvers.split(","), read_chars)
        if a.full:
            runs("local", stores, [a.full], read_chars, {"max_iter": 1})
        if a.s3:
            counter = GetBytes({})
            server, s3 = moto_server(counter)
            urls = {}
            for version, path in stores.items():
                key = f"{BUCKET}/v{version}.zarr"
                s3.put(path, f"{key}/attempt-copy", recursive=True)
                s3.pipe(f"{key}/COMMITTED", b'{"attempt": "attempt-copy"}')
                urls[version] = f"s3://{key}"
            counter.sizes = {k: v["size"] for k, v in s3.find(BUCKET, detail=True).items()}
            runs("S3", urls, [a.s3], lambda: counter.total)
            server.stop()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    report(results)


if __name__ == "__main__":
    sys.exit(main())
