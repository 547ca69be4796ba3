"""Seconds per GB of reading a store chunk by chunk, as a solver's out-of-core pass does
(`Store.read_chunk(i, cache=False)`: the Zarr v3 reads, zstd, CRC32C, the SHA-256 of the
chunk's canonical bytes, the manifest checks and the CSR matrix).

    python tools/bench_store_read.py [--rows 2000000] [--features 20] [--repeats 3] [--work DIR] [--profile]

The store is a generated dense regression set (x ~ N(0, I) rounded to float32, y = xᵀw + noise,
one output), written once in chunks of 65 536 rows (not timed). Each repeat reads every chunk
once in order; the best repeat is reported, in seconds and in seconds per GB of decoded chunk
(`Store.decoded_bytes`: 8 bytes per stored value and index, 12 per row, 8 per target), as wall
time and as the process's CPU time (all threads; less sensitive than the wall time to other
processes on a shared machine). The
file cache is warm after the write, so this is the CPU cost of a read, not the disk's.
--profile prints a cProfile of one more read, by internal time.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import tempfile
import time

import numpy as np
import scipy.sparse as sp

CHUNK_ROWS = 1 << 16


def write(path: str, n: int, d: int) -> None:
    from streamfit.store import StoreWriter

    rng = np.random.default_rng(0)
    w = rng.normal(size=d)
    writer = StoreWriter(path, n_outputs=1, chunk_rows=CHUNK_ROWS, overwrite=True)
    for lo in range(0, n, CHUNK_ROWS):
        X = rng.normal(size=(min(CHUNK_ROWS, n - lo), d)).astype(np.float32)
        writer.write_rows(sp.csr_matrix(X), (X @ w + 0.5 * rng.normal(size=len(X)))[:, None])
    writer.close(n_features=d, classes=["y"])


def read_all(path: str) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process, all threads) of one read of every chunk."""
    from streamfit.store import open_store

    store = open_store(path)
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(store.n_chunks):
        store.read_chunk(i, cache=False)
    return time.perf_counter() - start, time.process_time() - cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--features", type=int, default=20)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--work", default=None, help="scratch directory (default: a temporary one)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    from streamfit.store import open_store

    with tempfile.TemporaryDirectory(dir=args.work) as work:
        path = os.path.join(work, "read.zarr")
        write(path, args.rows, args.features)
        gb = open_store(path).decoded_bytes / 1e9
        read_all(path)  # warm-up: imports, numba, the file cache
        reads = [read_all(path) for _ in range(args.repeats)]
        wall, cpu = min(r[0] for r in reads), min(r[1] for r in reads)
        print(
            f"{args.rows:,} rows × {args.features}: {gb:.3f} GB decoded, best of {args.repeats} reads: "
            f"{wall:.3f} s = {wall / gb:.2f} s/GB wall, {cpu / gb:.2f} CPU s/GB "
            f"(load average {os.getloadavg()[0]:.1f})"
        )
        if args.profile:
            profile = cProfile.Profile()
            profile.runcall(read_all, path)
            pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
