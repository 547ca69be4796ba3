"""PPDSparse: Yen, Huang, Dai, Ravikumar, Dhillon and Xing (2017), "PPDSparse: A Parallel
Primal-Dual Sparse Method for Extreme Classification" (KDD '17).

One-vs-all (4): for every class k independently, with y_ik = +1 if k is a label of sample i and
−1 otherwise, and a bias feature x_{i,D} = 1 (penalized by ℓ2 only, as in §3.2), solve the
elastic-net objective (9) in the project's averaged convention

    F(w) = lam ‖w_{:D}‖₁ + (tau/2) ‖w‖² + (1/n) Σ_i ℓ(y_ik ⟨w, [x_i, 1]⟩),

ℓ(m) = ½ max(0, 1 − m)² (squared hinge, §5.2, the default) or max(0, 1 − m) (hinge, (3)).
Multiplying by n gives the paper's form (9) with λ = n·lam and ℓ2 weight τ = n·tau (§5.2);
the paper's defaults λ = 0.01, τ = 1 are lam = 0.01/n, tau = 1/n. scikit-learn's
LinearSVC(C, intercept_scaling=1) is lam = 0 with tau = 1/(C n) (hinge) or 1/(2 C n) (squared
hinge, whose loss has no ½ there).

Each class is solved in the dual (10) by Algorithm 1 (greedy active set: the active set starts
at the class's positives; each iteration computes ∇G(α) = Σ_j w_j X̂_{:,j} (14) by a CSC walk
over the non-zeros of w, optionally sparsified by Algorithm 3 with the R of Theorem 4.1, adds
the κ most violating samples, runs Algorithm 2 (randomized dual coordinate descent maintaining
w(α) = prox(X̂ᵀα), (13), with LIBLINEAR's shrinking) on the active set and drops zero duals of
negatives). κ grows with the active set (κ_t = max(κ, kappa_growth·|A_t|)), so a class whose
dual is not very sparse needs O(log |A|) searches, not O(|A|/κ). `tol` bounds the
projected dual gradient (in margin units) at the end, on every sample: the final search is exact.
Not in the paper (squared hinge, d < 2048 features occurring in X): a class whose coordinate descent has not converged
within its epoch budget on an active set of ≥ primal_ratio·(d + 1) samples (more duals than primal
unknowns, where dual CD crawls) is finished by a proximal Newton method on the same objective (9)
from w(α), stopped by the same test at the dual point α = b(w) of its iterate, b_i = max(0, 1 −
y_ik⟨w, [x_i, 1]⟩) (the squared hinge's α* = b(w*)), and returns w(α) of that α; primal_ratio=0 keeps
the paper's dual Algorithm 1 throughout. The kernels are in ppdsparse_kernels.py.

Parallelism (§5.1): the classes are cut into groups of `group_size` consecutive class ids (the
cut depends only on K and the parameters, never on the workers); in process they run in
`threads` threads sharing one copy of the data (results consumed in order); on Dask they are tasks
submitted largest first (by positives) and load-balanced by the scheduler (Engine.imap_unordered: a
lost worker's unfinished groups are submitted again, a cluster without workers is an error). Each worker process
reads the training matrix from the store once (CSR for the coordinate descent and the
search's row pass, CSC for its column walk, sorted by |x_ij| when x_threshold > 0, the positives
of every class) and shares it between its threads; the
kernels release the GIL. A task returns the sparse weight rows of its classes. This is the
method's memory model: a worker holds X (O(nnz(X))), not just a chunk.

Determinism: class k's random stream is seeded from (random_state, k), so a class's weights
depend only on the data and the parameters: the model is bitwise the same for any number of
workers, threads, group completion order, and after a resume.

Checkpoints: every finished group is written at once (ChunkState names "g<id>-index" with the
CSR pointers and column ids, "g<id>-value" with the biases and weights; version 1, one "chunk")
and a checkpoint step lists the finished groups; `resume=True` redoes only unfinished groups.

Logged per finished group: the group, its classes, the sum of the classes' dual objectives −G/n
(a lower bound of the summed primal objectives F_k), nnz of W so far, mean active-set size,
iterations, classes not converged within max_iter. With a validation source (train --valid), the
last step (all classes trained) also has the model's validation metrics, whatever valid_every:
a model with some classes still untrained is not worth evaluating. A run that ends with classes
not converged within max_iter says so in a warning, and the model's info has converged: false.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Literal

import numpy as np
import scipy.sparse as sp
from pydantic import Field

from streamfit.checkpoint import Checkpointer
from streamfit.engine import Engine
from streamfit.errors import CheckpointError
from streamfit.model import LinearModel, register_model
from streamfit.objectives.losses import OVR_HALF_SQUARED_HINGE, OVR_HINGE
from streamfit.runlog import MetricsLog
from streamfit.solvers.base import Solver, SolverParams, register_solver
from streamfit.solvers.ppdsparse_kernels import (
    Data,
    make_work,
    row_sqnorms,
    solve_class,
    sort_columns,
    topk_rows,
)
from streamfit.store import ChunkSource, Store

DEFAULT_GROUPS = 64  # group_size=None: about this many class groups; a Dask task costs ~2 ms and a
# sector class ~10 ms (2 workers: 0.97 s with 256 groups, 0.73 s with 64); more groups balance more workers
DENSE_FEATURE_SHARE = 0.1  # predict_topk: features with this share of classes non-zero are kept dense (≤ 80 B/nnz)

logger = logging.getLogger(__name__)


class PPDSparseParams(SolverParams):
    """Options of PPDSparse (see the module docstring for the objective and its scaling)."""

    loss: Literal["squared_hinge", "hinge"] = Field("squared_hinge", description="ℓ of (9): §5.2's squared hinge or hinge")
    lam: float = Field(1e-5, ge=0, description="ℓ1 weight: lam‖w‖₁ + (tau/2)‖w‖² + mean loss (paper λ = n·lam)")
    tau: float = Field(1e-4, gt=0, description="ℓ2 weight (paper τ = n·tau; LinearSVC C = 1/(n·tau), ½ that for squared hinge)")
    kappa: int = Field(500, ge=1, description="κ: samples added to the active set per search at least (Algorithm 1, step 2)")
    kappa_growth: float = Field(1.0, ge=0, description="κ schedule: a search adds up to max(κ, kappa_growth·|A|) samples; 0 = fixed κ")
    delta: float | None = Field(0.1, gt=0, description="δ of Theorem 4.1 (margin units, as tol: the search errs no more "
                                "than the stopping test): Algorithm 3 draws R = ⌈2‖w‖₁²/δ²⌉; None = exact search")
    x_threshold: float = Field(0.0, ge=0, description="§5.3 two-level sparsification: the search skips |x_ij| <= this; 0 = off")
    max_inner: int = Field(5, ge=1, description="S of Algorithm 2, in epochs over the active set per iteration "
                           "(doubled after each iteration whose CD has not converged)")
    shrink: bool = Field(True, description="LIBLINEAR shrinking in Algorithm 2 (Hsieh et al. 2008, §3.2)")
    group_size: int | None = Field(None, ge=1, description=f"classes per Dask task; None = about {DEFAULT_GROUPS} groups",
                                   json_schema_extra={"affects_model": False})
    threads: int = Field(1, ge=1, description="in-process engine: class groups solved by this many threads sharing X",
                         json_schema_extra={"affects_model": False})
    tol: float = Field(0.1, gt=0, description="stop when no projected dual gradient exceeds tol (margin units; LIBLINEAR's dual default)")
    max_iter: int = Field(1000, ge=1, description="iterations of Algorithm 1 (searches) per class")
    primal_ratio: float = Field(8.0, ge=0, description="squared hinge, d < 2048 features occurring: a class whose coordinate descent has not "
                                "converged within its epoch budget on an active set of >= primal_ratio x (d + 1) samples is "
                                "finished by a primal Newton method (same objective and stopping test); 0 = never")


# -- the training matrix, once per process ---------------------------------------------------


def build_data(source: ChunkSource, by_magnitude: bool = False) -> Data:
    """Read every chunk of `source` and build the kernels' view of it (see ppdsparse_kernels.Data;
    its features are the used ones, renumbered by col_map, which solve_group undoes).
    by_magnitude: every CSC column sorted by decreasing |x_ij| (only the early stop of §5.3's
    two-level sparsification, x_threshold > 0, needs it); else rows ascending."""
    chunks = list(source.iter_chunks())
    X = sp.vstack([c.X for c in chunks], format="csr").astype(np.float64)
    X.sum_duplicates()
    X.eliminate_zeros()
    # the features that occur, most frequent first (ties by index): on hashed text (20news, 2^21
    # columns, 126 241 used) v's scattered reads and writes then stay in cache, 1.8 -> 0.9 s CPU
    counts = np.bincount(X.indices, minlength=X.shape[1])
    used = np.flatnonzero(counts)
    col_map = used[np.argsort(-counts[used], kind="stable")].astype(np.int64)
    compact = np.zeros(X.shape[1], np.int64)
    compact[col_map] = np.arange(col_map.size)
    X = sp.csr_matrix((X.data, compact[X.indices], X.indptr), shape=(X.shape[0], col_map.size))
    X.sort_indices()
    K = source.n_classes
    if source.multilabel:
        Y = sp.vstack([c.labels for c in chunks], format="csc")
        Y.sum_duplicates()
        Y.sort_indices()
        pos_ptr, pos_rows = Y.indptr.astype(np.int64), Y.indices.astype(np.int64)
    else:
        y = np.concatenate([c.labels for c in chunks]).astype(np.int64)
        pos_rows = np.argsort(y, kind="stable").astype(np.int64)
        pos_ptr = np.concatenate([[0], np.cumsum(np.bincount(y, minlength=K))]).astype(np.int64)
    C = X.tocsc()
    C.sort_indices()
    col_ptr, col_rows, col_vals = C.indptr.astype(np.int64), C.indices.astype(np.int64), C.data
    if by_magnitude:
        col_rows, col_vals = np.empty(C.nnz, np.int64), np.empty(C.nnz)
        sort_columns(col_ptr, C.indices.astype(np.int64), C.data, col_rows, col_vals)  # decreasing |x|, then row
    indptr = X.indptr.astype(np.int64)
    return Data(
        indptr=indptr, indices=X.indices.astype(np.int64), values=X.data,
        sqnorm=row_sqnorms(indptr, X.data),
        col_ptr=col_ptr, col_rows=col_rows, col_vals=col_vals,
        pos_ptr=pos_ptr, pos_rows=pos_rows, col_map=col_map,
    )


@dataclasses.dataclass
class _DataRef:
    """What a group task gets: the source and a token naming it, so each worker process builds
    the training matrix once (Store: its fingerprint; in-memory sources: a fresh token), and
    build_data's by_magnitude."""

    source: ChunkSource
    token: str
    by_magnitude: bool


_cache: dict[str, Data] = {}
_cache_lock = threading.Lock()


def _worker_data(ref: _DataRef) -> Data:
    with _cache_lock:  # the threads of a worker wait for one build
        if ref.token not in _cache:
            _cache.clear()  # one training matrix per process
            _cache[ref.token] = build_data(ref.source, ref.by_magnitude)
        return _cache[ref.token]


# -- one group of classes --------------------------------------------------------------------


@dataclasses.dataclass
class GroupResult:
    """Weights of classes [lo, hi): CSR rows (indptr, indices, values), biases, and per-class
    statistics (iterations, |A|, nnz(α), converged, G(α))."""

    indptr: np.ndarray
    indices: np.ndarray
    values: np.ndarray
    bias: np.ndarray
    stats: np.ndarray


def solve_group(data: Data, lo: int, hi: int, p: PPDSparseParams, n_rows: int) -> GroupResult:
    """Algorithm 1 for classes lo … hi−1, sharing one set of scratch arrays; weights by the
    store's feature ids."""
    work = make_work(n_rows, data.col_map.size)
    loss = OVR_HALF_SQUARED_HINGE if p.loss == "squared_hinge" else OVR_HINGE
    mu, sigma = n_rows * p.lam, n_rows * p.tau
    delta = 0.0 if p.delta is None else p.delta
    idx, val = [], []
    bias = np.zeros(hi - lo)
    stats = np.zeros((hi - lo, 5))
    for k in range(lo, hi):
        i, v, b, it, n_active, n_alpha, conv, dual, _ = solve_class(
            data, work, k, loss, mu, sigma, p.kappa, p.kappa_growth, p.tol, p.max_iter, p.max_inner, p.shrink, delta,
            p.x_threshold, p.random_state, p.primal_ratio)
        i = data.col_map[i]
        order = np.argsort(i)
        idx.append(i[order])
        val.append(v[order])
        bias[k - lo] = b
        stats[k - lo] = (it, n_active, n_alpha, conv, dual)
    indptr = np.concatenate([[0], np.cumsum([len(i) for i in idx])]).astype(np.int64)
    return GroupResult(indptr, np.concatenate(idx).astype(np.int64), np.concatenate(val), bias, stats)


def _group_task(g: int, ref: _DataRef, groups: list[tuple[int, int]], params: dict) -> GroupResult:
    return solve_group(_worker_data(ref), *groups[g], PPDSparseParams(**params), ref.source.n_rows)


def _positives_task(source: ChunkSource, chunk_id: int) -> np.ndarray:
    chunk = source.read_chunk(chunk_id)
    if sp.issparse(chunk.labels):
        return np.bincount(chunk.labels.indices, minlength=source.n_classes).astype(np.int64)
    return np.bincount(chunk.labels, minlength=source.n_classes).astype(np.int64)


# -- the model -------------------------------------------------------------------------------


@register_model
class PPDSparseModel(LinearModel):
    """A LinearModel with sparse coef_ (K × d CSR) whose top-k prediction is one numba pass over
    the rows of X (ppdsparse_kernels.topk_rows: the row's scores from coef_ by feature into one
    K-vector, then the k best by insertion), so a large K never needs the n × K score matrix."""

    kind = "ppdsparse"

    @property
    def model_size(self) -> int:
        """Bytes of the stored weights: non-zeros (8-byte value + 4-byte column), row pointers, biases."""
        c = self.coef_
        return int(c.nnz * 12 + (c.shape[0] + 1) * 8 + self.intercept_.nbytes)

    def _by_feature(self):
        """coef_ by feature for topk_rows, built once per coef_: the features where at least
        DENSE_FEATURE_SHARE of the classes are non-zero as dense K-rows (a vectorized loop; 8 bytes
        per entry, at most 80 per non-zero), the others as CSC (int32 classes, float64 weights)."""
        c = self.coef_
        if getattr(self, "_by_feature_of", None) is not c:
            W = c.tocsc()
            W.sum_duplicates()
            K, d = W.shape
            dense = np.flatnonzero(np.diff(W.indptr) >= max(DENSE_FEATURE_SHARE * K, 1))
            dense_of = np.full(d, -1, np.int64)
            dense_of[dense] = np.arange(dense.size)
            w_dense = np.ascontiguousarray(W[:, dense].T.toarray(), dtype=np.float64)
            col = np.repeat(np.arange(d), np.diff(W.indptr))
            keep = dense_of[col] < 0
            ptr = np.concatenate([[0], np.cumsum(np.bincount(col[keep], minlength=d))]).astype(np.int64)
            self._by_feature_cache = (ptr, W.indices[keep].astype(np.int32), W.data[keep].astype(np.float64),
                                      dense_of, w_dense)
            self._by_feature_of = c
        return self._by_feature_cache

    def predict_topk(self, X, k: int = 5) -> tuple[np.ndarray, np.ndarray]:
        from streamfit.model import _as_csr

        if isinstance(X, ChunkSource):
            parts = [self.predict_topk(c.X, k) for c in X.iter_chunks()]
            return np.vstack([a for a, _ in parts]), np.vstack([b for _, b in parts])
        X = _as_csr(X, self.n_features)
        k = min(k, len(self.classes_))
        top = np.zeros((X.shape[0], k), np.int64)
        best = np.zeros((X.shape[0], k))
        bias = np.ascontiguousarray(self.intercept_, dtype=np.float64)
        topk_rows(X.indptr, X.indices, X.data, *self._by_feature(), bias, k, top, best)  # X's dtypes as they are
        return top, best

    def predict(self, X):
        if self.multilabel:
            return super().predict(X)
        return self.classes_[self.predict_topk(X, 1)[0][:, 0]]


# -- the solver ------------------------------------------------------------------------------


def _group_name(g: int, part: str) -> str:
    return f"g{g:06d}-{part}"


@register_solver
class PPDSparseSolver(Solver):
    """PPDSparse (Algorithms 1-3, §5.1-5.3) over class groups.

    `stop_after_groups`: return the partial model (unfinished classes all zero) after this many
    groups finished and were checkpointed in this call; a later fit with resume=True continues.
    For time-boxed jobs and for testing resume; not a model parameter."""

    name = "ppdsparse"
    Params = PPDSparseParams

    def __init__(self, params: PPDSparseParams, *, stop_after_groups: int | None = None):
        super().__init__(params)
        self.stop_after_groups = stop_after_groups

    def groups(self, n_classes: int) -> list[tuple[int, int]]:
        size = self.params.group_size or max(1, -(-n_classes // DEFAULT_GROUPS))
        return [(lo, min(lo + size, n_classes)) for lo in range(0, n_classes, size)]

    def fit(self, source: ChunkSource, *, engine: Engine, checkpointer: Checkpointer, log: MetricsLog,
            resume: bool = False) -> PPDSparseModel:
        groups = self.groups(source.n_classes)
        state = checkpointer.state
        done: dict[int, GroupResult] = {}
        ckpt = checkpointer.latest(1) if resume else None
        if ckpt is None:
            state.keep_only(set())
        else:
            size = groups[0][1] - groups[0][0]
            # checkpoints written before the group size was recorded cut about 256 groups
            written = ckpt.meta.get("group_size", -(-source.n_classes // 256))
            if written != size:
                raise CheckpointError(
                    f"{checkpointer.run_dir}: this run was checkpointed with {written} classes per group and "
                    f"would now be cut into groups of {size}; resume with -p group_size={written}")
            for g in ckpt.meta["finished"]:
                ints = state.read(_group_name(g, "index"), 1, 0)
                reals = state.read(_group_name(g, "value"), 1, 0)
                m = groups[g][1] - groups[g][0]
                done[g] = GroupResult(ints[: m + 1], ints[m + 1:], reals[m:], reals[:m],
                                      np.asarray(ckpt.arrays[f"stats{g}"]))
            log.truncate_after(ckpt.step)
        positives = engine.map_reduce(_positives_task, source, range(source.n_chunks), desc="ppdsparse: labels")
        todo = sorted((g for g in range(len(groups)) if g not in done),
                      key=lambda g: (-int(positives[groups[g][0]:groups[g][1]].sum()), g))
        results = self._run(engine, source, groups, todo)
        for finished_here, (g, res) in enumerate(results, 1):
            done[g] = res
            final = len(done) == len(groups)
            self._save(checkpointer, log, groups, done, g,
                       model=(lambda: self._model(source, groups, done)) if final else None)
            if self.stop_after_groups is not None and finished_here >= self.stop_after_groups:
                results.close()
                break
        model = self._model(source, groups, done)
        if model.info["groups_finished"] == len(groups) and model.info["not_converged"]:
            stats = np.vstack([done[g].stats for g in sorted(done)])
            late = [str(source.classes[k]) for k in np.flatnonzero(stats[:, 3] == 0)[:5]]
            logger.warning("ppdsparse: not converged after max_iter=%d iterations: %d of %d classes (%s%s) still have "
                           "a projected dual gradient > tol %g; raise -p max_iter or loosen -p tol",
                           self.params.max_iter, model.info["not_converged"], len(stats), ", ".join(late),
                           ", ..." if model.info["not_converged"] > len(late) else "", self.params.tol)
        return model

    def _run(self, engine: Engine, source: ChunkSource, groups, todo):
        """Yields (group, GroupResult) as groups finish: in process, one after another in `todo`
        order; on Dask, in completion order (Engine.imap_unordered: tasks submitted in `todo` order,
        first = highest priority; a lost worker's groups submitted again). Closing the generator
        cancels what is still running."""
        p = self.params
        if engine.client is None and engine.mode == "inprocess":
            data = build_data(source, p.x_threshold > 0)
            solve = lambda g: solve_group(data, *groups[g], p, source.n_rows)
            if p.threads == 1:
                yield from ((g, solve(g)) for g in todo)
                return
            with ThreadPoolExecutor(p.threads) as pool:  # kernels release the GIL: groups run in parallel
                pending = deque((g, pool.submit(solve, g)) for g in todo)
                try:
                    while pending:
                        g, fut = pending.popleft()
                        yield g, fut.result()
                finally:
                    for _, fut in pending:
                        fut.cancel()
            return
        token = source.manifest.fingerprint if isinstance(source, Store) else uuid.uuid4().hex
        ref = _DataRef(source, f"{token}:{p.x_threshold > 0}", p.x_threshold > 0)
        yield from engine.imap_unordered(_group_task, todo, desc="ppdsparse: groups", ref=ref, groups=groups,
                                         params=p.model_dump())

    def _save(self, checkpointer: Checkpointer, log: MetricsLog, groups, done: dict, g: int, model=None) -> None:
        """Write group g's weights and a checkpoint listing the finished groups, and log the step;
        `model` (a function returning the model) on the last step only: validated whatever its step."""
        res = done[g]
        state = checkpointer.state
        state.write(_group_name(g, "index"), 1, 0, np.concatenate([res.indptr, res.indices]))
        state.write(_group_name(g, "value"), 1, 0, np.concatenate([res.bias, res.values]))
        finished = sorted(done)
        versions = {_group_name(h, part): 1 for h in finished for part in ("index", "value")}
        checkpointer.save(len(finished), {"finished": finished, "group_size": groups[0][1] - groups[0][0]},
                          {f"stats{h}": done[h].stats for h in finished}, versions)
        st = res.stats
        log.log(len(finished), model=model, final=model is not None, group=g,
                classes=[int(groups[g][0]), int(groups[g][1])], dual_objective=float(-st[:, 4].sum()),
                nnz=int(sum(done[h].indices.size for h in finished)), mean_active=float(st[:, 1].mean()),
                iterations=int(st[:, 0].sum()), not_converged=int((st[:, 3] == 0).sum()))

    def _model(self, source: ChunkSource, groups, done: dict) -> PPDSparseModel:
        K, d = source.n_classes, source.n_features
        counts = np.zeros(K, np.int64)
        bias = np.zeros(K)
        for g, res in done.items():
            lo, hi = groups[g]
            counts[lo:hi] = np.diff(res.indptr)
            bias[lo:hi] = res.bias
        indptr = np.concatenate([[0], np.cumsum(counts)])
        ordered = sorted(done)
        indices = np.concatenate([done[g].indices for g in ordered] or [np.zeros(0, np.int64)])
        values = np.concatenate([done[g].values for g in ordered] or [np.zeros(0)])
        coef = sp.csr_matrix((values, indices.astype(np.int32), indptr), shape=(K, d))
        stats = np.vstack([done[g].stats for g in ordered]) if ordered else np.zeros((0, 5))
        info = {"groups_finished": len(done), "groups": len(groups), "nnz": int(coef.nnz),
                "mean_active": float(stats[:, 1].mean()) if len(stats) else 0.0,
                "not_converged": int((stats[:, 3] == 0).sum()) if len(stats) else 0}
        info["converged"] = len(done) == len(groups) and info["not_converged"] == 0
        return PPDSparseModel(coef, bias, classes=source.classes, n_features=d, multilabel=source.multilabel,
                              solver=self.name, params=self.params.model_dump(), info=info)
