"""Where a chunk task's time goes, and the bytes it moves per non-zero (issue 19, session 12).

    python tools/bench_chunk_traffic.py [--rows 12288] [--row-nnz 50] [--repeats 5] [--workdir DIR]

One chunk of tools/bench_scaleout.py's text store (`--rows` rows × 2^16 columns, 8192 used,
`--row-nnz` non-zeros a row, 20 classes; its default is one of the 16-core run's 64 chunks), in
this process, single-threaded BLAS. Each step of the chunk tasks that run every pass is timed
(time.perf_counter, best of `--repeats`) and the arrays it reads and writes are counted in bytes
per non-zero of the chunk:

  store:      decoding the chunk from Zarr (a chunk-cache miss) against the cached chunk;
  bcd:        the chunks-mode pass task (bcd group 2048, a commit, a direction and the next
              group): the float64 copy of X with the intercept column that the task made before
              session 12 (`_design`), the scores read from the checkpoint's file (np.load,
              SHA-256: a worker that did not write them) and from the writer's cache (a copy:
              the worker that wrote them, session 15), the kernel (chunk_pass) on that copy and
              on the store's float32 arrays with the intercept added in the kernel (now), the
              scores written (np.save, SHA-256, file; no fsync since session 15) and their fsync
              (the driver's, at a save that counts them: file and folder);
  stagewise:  the update task (gradient generator, block 1024, identity link): the scores read,
              the block's sparse design (CSC column slice, float64 CSR, intercept column), the
              stage applied (F + A W), the scores written, the next block's design and its
              statistics AᵀA (sparse product, then dense) and AᵀR.
Prints one table; the numbers are per chunk task, per pass.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np
import scipy.sparse as sp
from bench_scaleout import make_store
from threadpoolctl import threadpool_limits

from streamfit import storage
from streamfit.checkpoint import ChunkState
from streamfit.solvers import bcd as bcd_mod
from streamfit.solvers import stagewise as sw
from streamfit.solvers.bcd_kernels import chunk_pass
from streamfit.store import open_store


def best(fn, repeats: int) -> tuple[float, object]:
    """(least seconds of `repeats` calls, the last result)."""
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return min(times), out


def nbytes(*arrays) -> int:
    total = 0
    for a in arrays:
        total += sum(x.nbytes for x in (a.data, a.indices, a.indptr)) if sp.issparse(a) else a.nbytes
    return total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=12288)
    ap.add_argument("--row-nnz", type=int, default=50)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--workdir", default=None)
    args = ap.parse_args()
    work = args.workdir or tempfile.mkdtemp(prefix="chunk-traffic-")
    path = os.path.join(work, "text")
    if not os.path.exists(path):
        make_store(path, args.rows, 65536, 8192, args.row_nnz, 20, 1, 0.5)
    store = open_store(path)
    rows: list[tuple[str, float, float]] = []  # (step, ms, bytes per nnz)
    with threadpool_limits(1):
        disk, chunk = best(lambda: store._read_from_disk(0, True), args.repeats)
        X = chunk.X
        nnz, n, m = X.nnz, X.shape[0], store.n_classes
        print(
            f"chunk: {n} rows, {nnz} non-zeros, X data {X.data.dtype}, indices {X.indices.dtype}, "
            f"indptr {X.indptr.dtype}; {m} classes"
        )
        rows.append(("store: decode from Zarr (cache miss)", disk, nbytes(X) / nnz))
        cached, chunk = best(lambda: store.read_chunk(0), args.repeats)
        rows.append(("store: read_chunk, cached", cached, 0.0))

        # -- bcd chunks pass: commit a step on the last group, try a direction, sum the next group
        state = ChunkState(os.path.join(work, "state"))
        rng = np.random.default_rng(0)
        S0 = rng.normal(size=(n, m))
        state.write(bcd_mod.SCORES, 1, 0, S0)
        d = X.shape[1] + 1
        cols = np.sort(rng.choice(8192, size=2048, replace=False))
        used = np.unique(X.indices)
        group = np.sort(rng.choice(used, size=min(2048, used.size), replace=False))
        pos = bcd_mod._positions(group, d)
        delta = rng.normal(size=(group.size, m)) * 1e-2
        alphas = np.array([0.5, 1.0, 2.0, 4.0, 0.0])
        lab_ptr, lab_ind = bcd_mod.label_lists(chunk.labels, n)
        next_pos = bcd_mod._positions(cols, d)

        def kernel(indptr, indices, data, S, intercept):
            return chunk_pass(
                bcd_mod._read_only(indptr),
                bcd_mod._read_only(indices),
                bcd_mod._read_only(data),
                S,
                lab_ptr,
                lab_ind,
                0,
                pos,
                delta,
                pos,
                delta,
                alphas,
                next_pos,
                cols.size,
                0.0,
                False,
                intercept,
            )

        t, D = best(lambda: bcd_mod._design(X, True), args.repeats)
        rows.append(("bcd: float64 copy of X with intercept (before)", t, (nbytes(X) + nbytes(D)) / nnz))
        reader = ChunkState(state.root)  # another run id: it reads the file
        t, S = best(lambda: reader.read(bcd_mod.SCORES, 1, 0), args.repeats)
        rows.append(("bcd: scores read from the file (np.load, sha256)", t, 3 * S.nbytes / nnz))
        t, cached = best(lambda: state.read(bcd_mod.SCORES, 1, 0), args.repeats)
        assert cached.tobytes() == S.tobytes(), "the cached scores differ from the file's"
        rows.append(("bcd: scores read by their writer (cached, a copy)", t, 2 * S.nbytes / nnz))
        t, _ = best(lambda: S.copy(), args.repeats)
        rows.append(("bcd: scores copied", t, 2 * S.nbytes / nnz))
        t_old, old = best(lambda: kernel(D.indptr, D.indices, D.data, S.copy(), -1), args.repeats)
        t_new, new = best(lambda: kernel(X.indptr, X.indices, X.data, S.copy(), d - 1), args.repeats)
        assert all(np.array_equal(a, b) for a, b in zip(old, new)), "the two kernels' results differ"
        scores = 2 * S.nbytes
        rows.append(("bcd: chunk_pass on the float64 copy (before)", t_old, (nbytes(D) + scores) / nnz))
        rows.append(("bcd: chunk_pass on the float32 chunk (now)", t_new, (nbytes(X) + scores) / nnz))
        t, _ = best(lambda: state.write(bcd_mod.SCORES, 2, 0, S), args.repeats)
        rows.append(("bcd: scores written (np.save, sha256, file, no fsync)", t, 4 * S.nbytes / nnz))
        version = iter(range(3, 3 + args.repeats))

        def written_and_synced() -> float:
            """Seconds of the fsyncs (file, folder) of a newly written version of the chunk."""
            v = next(version)
            state.write(bcd_mod.SCORES, v, 0, S)
            folder = os.path.join(state.root, bcd_mod.SCORES, f"v{v:06d}")
            paths = [os.path.join(folder, f) for f in os.listdir(folder)] + [folder]
            t0 = time.perf_counter()
            storage.sync_paths(paths)
            return time.perf_counter() - t0

        t = min(written_and_synced() for _ in range(args.repeats))
        rows.append(("bcd: scores synced (fsync of file and folder; by the driver, at a save)", t, S.nbytes / nnz))

        # -- stagewise update task (identity link, gradient generator, block 1024)
        blocks = np.argsort(-np.bincount(X.indices, minlength=X.shape[1]), kind="stable")[:2048]
        block, next_block = np.sort(blocks[:1024]), np.sort(blocks[1024:])
        space = sw.FeatureSpace(kind="columns", fit_intercept=True, with_predictions=False)
        Y = chunk.targets(m)
        F = S0
        t, csc = best(lambda: X.tocsc(), 1)
        rows.append(("stagewise: chunk.csc (once per cached chunk)", t, (nbytes(X) + nbytes(csc)) / nnz))
        t, A = best(lambda: space.design(csc, block), args.repeats)
        rows.append(("stagewise: design of the block", t, (nbytes(csc) / 2 + 2 * nbytes(A)) / nnz))
        W = rng.normal(size=(A.shape[1], m))
        t, U = best(lambda: sw._apply_rows(A, F, W, None, False), args.repeats)
        rows.append(("stagewise: F + A W", t, (nbytes(A) + 3 * F.nbytes) / nnz))
        t, _ = best(lambda: sw.link_residual(U, Y, "identity"), args.repeats)
        rows.append(("stagewise: residual and loss", t, 3 * F.nbytes / nnz))
        t, A2 = best(lambda: space.design(csc, next_block), args.repeats)
        rows.append(("stagewise: design of the next block", t, (nbytes(csc) / 2 + 2 * nbytes(A2)) / nnz))
        R = Y - U
        t, G = best(lambda: (A2.T @ A2).toarray(), args.repeats)
        rows.append(
            ("stagewise: AᵀA, scipy's sparse product, then dense (before)", t, (2 * nbytes(A2) + 2 * G.nbytes) / nnz)
        )
        t, G2 = best(lambda: sw.sparse_gram_upper(A2), args.repeats)
        assert np.array_equal(G, sw.symmetric_from_upper(G2)), "sparse_gram_upper differs from scipy's product"
        rows.append(("stagewise: AᵀA's upper triangle, packed (now)", t, (nbytes(A2) + 2 * G2.nbytes) / nnz))
        t, _ = best(lambda: np.asarray(A2.T @ R), args.repeats)
        rows.append(("stagewise: AᵀR", t, (nbytes(A2) + R.nbytes) / nnz))
        print(
            f"block designs: {A.nnz} and {A2.nnz} non-zeros ({A.nnz / nnz:.2f} and {A2.nnz / nnz:.2f} of the chunk's)"
        )
    print("| step | ms | bytes moved per non-zero of the chunk |")
    print("|---|---|---|")
    for name, seconds, per_nnz in rows:
        print(f"| {name} | {1e3 * seconds:.2f} | {per_nnz:.1f} |")


if __name__ == "__main__":
    main()
