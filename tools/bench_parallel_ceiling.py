"""How fast P independent processes run the same work side by side: the machine's own ceiling on
a chunk-parallel speed-up (issues 18 and 19).

    python tools/bench_parallel_ceiling.py [--procs 1,2,4,8,16] [--repeats 9] [--workdir DIR] [--out JSON]

No Dask, no scheduler, no driver: P processes forked from this one each run a probe on their own
copy of the data, all at once (a barrier before each probe), and each reports its median time per
call. A probe's slowdown at P is the median of those medians divided by P = 1's, so P / slowdown is
the speed-up that P workers could at best reach on tasks made of that work alone. Probes:

  triad        numpy's a = b + s * c on three 64 MiB float64 arrays (memory bandwidth);
  in_cache     numpy's sin on a 32 KiB array, 200 times (arithmetic in the core's cache);
  bcd_pass     bcd's chunks-mode kernel (bcd_kernels.chunk_pass) on one chunk of
               tools/bench_scaleout.py's text store (`--rows` rows, 50 non-zeros a row, 20 classes);
  sparse_gram  stagewise's AᵀA of a 1024-column block design of that chunk, its upper triangle
               packed (sparse_gram_upper; a dense 1025² array before session 16);
  hash_text    streamfit's FeatureHasher on 2000 generated documents (ingest's featurizing);
  state_write  ChunkState.write of the chunk's 20-class float64 scores (np.save, sha256, a
               temporary file, fsync, rename), each process in its own directory under --workdir;
  state_read   ChunkState.read of that file (read, sha256, np.load).

One BLAS thread per process. Prints one table (median seconds per call at P = 1, then the
slowdown at each P) and writes the numbers to --out.
"""

from __future__ import annotations

import os

for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import multiprocessing as mp  # noqa: E402
import statistics  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from bench_hashing import generate_corpus  # noqa: E402
from bench_scaleout import make_store  # noqa: E402

from streamfit.checkpoint import ChunkState  # noqa: E402
from streamfit.ingest.hashing import FeatureHasher, HashingConfig  # noqa: E402
from streamfit.solvers import bcd as bcd_mod  # noqa: E402
from streamfit.solvers import stagewise as sw  # noqa: E402
from streamfit.solvers.bcd_kernels import chunk_pass  # noqa: E402
from streamfit.store import open_store  # noqa: E402

PROBES = ("triad", "in_cache", "bcd_pass", "sparse_gram", "hash_text", "state_write", "state_read")


def make_probes(store_path: str, workdir: str) -> dict:
    """Each probe as a function of no arguments, its data built here, once, before the forks;
    `use_state_dir` gives a process its own directory for the state probes."""
    store = open_store(store_path)
    chunk = store.read_chunk(0)
    X = chunk.X
    n, m = X.shape[0], store.n_classes
    d = X.shape[1] + 1
    rng = np.random.default_rng(0)
    S0 = rng.normal(size=(n, m))
    used = np.unique(X.indices)
    group = np.sort(rng.choice(used, size=min(2048, used.size), replace=False))
    cols = np.sort(rng.choice(8192, size=2048, replace=False))
    pos, next_pos = bcd_mod._positions(group, d), bcd_mod._positions(cols, d)
    delta = rng.normal(size=(group.size, m)) * 1e-2
    alphas = np.array([0.5, 1.0, 2.0, 4.0, 0.0])
    lab_ptr, lab_ind = bcd_mod.label_lists(chunk.labels, n)
    indptr, indices, data = (bcd_mod._read_only(a) for a in (X.indptr, X.indices, X.data))

    def bcd_pass():
        chunk_pass(
            indptr, indices, data, S0.copy(), lab_ptr, lab_ind, 0, pos, delta, pos, delta, alphas,
            next_pos, cols.size, 0.0, False, d - 1,
        )  # fmt: skip

    blocks = np.argsort(-np.bincount(X.indices, minlength=X.shape[1]), kind="stable")[:1024]
    space = sw.FeatureSpace(kind="columns", fit_intercept=True, with_predictions=False)
    A = space.design(X.tocsc(), np.sort(blocks))
    a, b, c = (np.full(1 << 23, v) for v in (0.0, 1.0, 2.0))
    small = rng.normal(size=4096)
    docs = generate_corpus(2000)
    hasher = FeatureHasher(HashingConfig(n_features=1 << 18, ngram_range=(1, 1)))
    state = {"chunks": ChunkState(os.path.join(workdir, "state-parent"))}
    version = iter(range(1, 1 << 30))

    def use_state_dir(path: str) -> None:
        state["chunks"] = ChunkState(path)
        state["chunks"].write("scores", 0, 0, S0)

    def triad():
        np.multiply(c, 3.0, out=a)
        np.add(a, b, out=a)

    def in_cache():
        for _ in range(200):
            np.sin(small)

    def state_write():
        state["chunks"].write("scores", next(version), 0, S0)

    use_state_dir(os.path.join(workdir, "state-parent"))
    probes = {
        "triad": triad,
        "in_cache": in_cache,
        "bcd_pass": bcd_pass,
        "sparse_gram": lambda: sw.sparse_gram_upper(A),
        "hash_text": lambda: hasher.transform_text(docs),
        "state_write": state_write,
        "state_read": lambda: state["chunks"].read("scores", 0, 0),
    }
    for fn in probes.values():  # compile and touch everything once, in the parent
        fn()
    probes["use_state_dir"] = use_state_dir
    return probes


def child(rank: int, probes: dict, state_dir: str, names: list[str], repeats: int, barrier, results) -> None:
    probes["use_state_dir"](state_dir)
    medians = {}
    for name in names:
        fn = probes[name]
        fn()  # warm this process's caches (copy-on-write pages, files)
        barrier.wait()
        times = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
        medians[name] = statistics.median(times)
    results.put((rank, medians))


def run(procs: int, probes: dict, workdir: str, names: list[str], repeats: int) -> list[dict]:
    """Each process's median seconds per call, per probe."""
    ctx = mp.get_context("fork")
    barrier, results = ctx.Barrier(procs), ctx.Queue()
    children = []
    for rank in range(procs):
        state_dir = os.path.join(workdir, f"state-p{procs}-{rank}")
        p = ctx.Process(target=child, args=(rank, probes, state_dir, names, repeats, barrier, results))
        p.start()
        children.append(p)
    out = [results.get() for _ in children]
    for p in children:
        p.join()
    return [medians for _, medians in sorted(out)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--procs", default=",".join(str(p) for p in (1, 2, 4, 8, 16) if p <= (os.cpu_count() or 1)))
    ap.add_argument("--rows", type=int, default=12288, help="rows of the chunk (default: a 16-core run's chunk)")
    ap.add_argument("--repeats", type=int, default=9)
    ap.add_argument("--probes", default=",".join(PROBES))
    ap.add_argument("--workdir", default=None)
    ap.add_argument("--out", default=None, help="JSON file for the numbers")
    args = ap.parse_args()
    names = args.probes.split(",")
    unknown = sorted(set(names) - set(PROBES))
    if unknown:
        ap.error(f"unknown probe(s) {', '.join(unknown)}; choose from {', '.join(PROBES)}")
    procs = [int(p) for p in args.procs.split(",")]
    work = args.workdir or tempfile.mkdtemp(prefix="parallel-ceiling-")
    os.makedirs(work, exist_ok=True)
    store_path = os.path.join(work, "chunk.zarr")
    if not os.path.exists(store_path):
        make_store(store_path, args.rows, 65536, 8192, 50, 20, 1, 0.5)
    probes = make_probes(store_path, work)
    table: dict[int, dict[str, float]] = {}
    for p in procs:
        t0 = time.perf_counter()
        per_process = run(p, probes, work, names, args.repeats)
        table[p] = {name: statistics.median(r[name] for r in per_process) for name in names}
        print(f"P = {p}: {time.perf_counter() - t0:.1f} s", flush=True)
    base = table[procs[0]]
    print(f"\nmedian seconds per call at P = {procs[0]}, then slowdown (x) and speed-up ceiling P/slowdown at each P")
    print("| probe | s at P=" + str(procs[0]) + " | " + " | ".join(f"P={p}" for p in procs[1:]) + " |")
    print("|---|---|" + "---|" * (len(procs) - 1))
    for name in names:
        cells = [f"{table[p][name] / base[name]:.2f}x ({p * base[name] / table[p][name]:.1f})" for p in procs[1:]]
        print(f"| {name} | {base[name]:.4f} | " + " | ".join(cells) + " |")
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"procs": procs, "rows": args.rows, "repeats": args.repeats, "seconds": table}, f, indent=1)


if __name__ == "__main__":
    main()
