"""The design matrix of a stagewise block (Agarwal et al. 2014, Algorithm 3's A for the block
B_t chosen by GEN), how it is computed from a chunk's rows, and the per-process caches of
what a chunk's tasks compute again from stage to stage.

A = [1, x̃] (the bias column when fit_intercept). For stored columns ("columns"), x̃ = X[:, B]:
sparse, cut from the chunk's CSC form, or, for dense active columns of a regression store
(`FeatureSpace.dense`), a dense array gathered from the CSR rows a row panel at a time. For
random Fourier features ("rff", A.2.1), z = X[:, inputs] densified (minus the mean, times the
PCA components, when PCA is used) and x̃ = √2 cos(zΩ + β) for the block's columns of Ω
(stagewise_kernels.rff_frequencies: the block's frequencies and phases, from the seed and the
block id alone, so every chunk and process computes the same features). Dense designs are built
and used in row panels of PANEL_ROWS rows (`panels`), counted from each array's first row, so
training chunks and scoring get the same bits. Caches (bounded by the chunk-cache budget,
streamfit.store.store.CHUNK_CACHE_BYTES): the base z of each chunk, the dense designs of the
newest blocks, and a chunk's last sparse design; see docs/architecture.md, "stagewise".
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import weakref

import numpy as np
import scipy.sparse as sp

from streamfit.solvers.stagewise_kernels import (
    csr_columns,
    rff_features,
    rff_frequencies,
    rowwise_matmul,
    single_threaded_blas,
)
from streamfit.store import Chunk, ChunkSource
from streamfit.store.store import CHUNK_CACHE_BYTES

PANEL_ROWS = 1024  # dense (random Fourier) designs are built and used in row panels of this size


@dataclasses.dataclass
class FeatureSpace:
    """How the design matrix A of a block is computed from a chunk's rows X and scores F.

    Blocks are cut from the chunk's base matrix `base(X)`, computed once per chunk:
    kind "columns": a block is an array of column ids, x̃ = X[:, block]; the base is X in CSC
    form (cheap column selection) and x̃ sparse, or, with `dense` (regression stores whose
    active columns are dense: `StagewiseSolver._setup`), the base is X's CSR rows and x̃ a dense
    float64 array gathered from them a row panel at a time (`panel_design`), so that AᵀA and
    AᵀR are BLAS products on dense panels instead of sparse products;
    kind "rff": the base is z = X[:, inputs] densified (projected: z = (z − mean) components,
    if PCA is used), a block is a block id b, x̃ = the random Fourier features
    b·block_size … (b+1)·block_size − 1 of z, stored as `dtype` (the solver's gram_dtype)."""

    kind: str
    fit_intercept: bool
    with_predictions: bool
    inputs: np.ndarray | None = None
    mean: np.ndarray | None = None
    components: np.ndarray | None = None
    sigma: float = 1.0
    seed: int = 0
    block_size: int = 0
    n_components: int = 0
    dtype: str = "float64"
    sampling: str = "iid"  # of the frequencies: "iid" or "orthogonal" (`rff_frequencies`)
    phases: str = "random"  # "random" (cos(ωᵀz + β)) or "paired" (cos and sin of ωᵀz)
    dense: bool = False  # "columns": dense designs gathered from the CSR rows

    @property
    def dense_design(self) -> bool:
        """Whether designs are dense arrays (random Fourier features, or dense columns)."""
        return self.kind == "rff" or self.dense

    def base(self, X: sp.csr_matrix) -> sp.csr_matrix | sp.csc_matrix | np.ndarray:
        if self.kind == "columns" and self.dense:  # gathered by position: duplicates summed first
            if not X.has_canonical_format:
                X = X.tocsr(copy=True)
                X.sum_duplicates()
            return X
        if self.kind == "columns":
            return X.tocsc()
        if self.components is None:
            return X[:, self.inputs].toarray().astype(np.float64, copy=False)
        Z = np.empty((X.shape[0], self.components.shape[1]))
        for lo, hi in panels(X.shape[0]):  # densified a row panel at a time: no rows × inputs array
            Z[lo:hi] = rowwise_matmul(X[lo:hi][:, self.inputs].toarray() - self.mean, self.components)
        return Z

    def design(self, base, block, out: np.ndarray | None = None) -> np.ndarray | sp.csr_matrix:
        """A = [1, x̃] (the bias as configured) for the rows of `base`; random Fourier designs are
        built in row panels (`panels`), into `out` when given. The scores F, the last columns
        of the design with calibration="predictions", are kept apart (`_apply_rows`,
        `_block_stats`): A does not change from pass to pass, and neither does its AᵀA."""
        n = base.shape[0]
        if self.kind == "columns" and self.dense:
            return self.panel_design(base, block, 0, n, out)
        if self.kind == "columns":
            A = sp.csr_matrix(base[:, block], dtype=np.float64)
            return with_bias_column(A) if self.fit_intercept else A
        lo = int(self.fit_intercept)
        A = np.empty((n, self.design_width(block)), dtype=self.dtype) if out is None else out
        omega, beta = self.frequencies(block)
        for start, stop in panels(n):  # the same panels whatever the caller: the same bits
            rows = A[start:stop]
            rows[:, :lo] = 1.0
            rff_features(base[start:stop], omega, beta, out=rows, col=lo, n_out=A.shape[1] - lo)
        return A

    def panel_design(self, base, block, lo: int, hi: int, out: np.ndarray | None = None) -> np.ndarray:
        """The dense design of rows lo … hi − 1 of `base` (a row panel, `panels`), into `out`
        when given. Dense columns are gathered from the CSR base in place (`csr_columns`: a
        scipy row slice costs more than the panel's products)."""
        if not self.kind == "columns":
            return self.design(base[lo:hi], block, out)
        width = self.design_width(block)
        A = np.empty((hi - lo, width)) if out is None else out
        skip = int(self.fit_intercept)
        A[:, :skip] = 1.0
        csr_columns(base, self._positions(block, base.shape[1]), lo, hi, A, skip)
        return A

    def _positions(self, block: np.ndarray, n_features: int) -> np.ndarray:
        """position[j] = t where block[t] = j, −1 for columns outside the block (memoised per
        process for the newest block)."""
        key = np.asarray(block, dtype=np.int64).tobytes()
        memo = self.__dict__.get("_position_memo")
        if memo is None or memo[0] != key or len(memo[1]) != n_features:
            position = np.full(n_features, -1, dtype=np.int64)
            position[np.asarray(block, dtype=np.int64)] = np.arange(len(block))
            memo = self.__dict__["_position_memo"] = (key, position)
        return memo[1]

    def block_width(self, block) -> int:
        """Features of a block: its columns, or the generated features of an rff block (the
        last one may be narrower)."""
        if self.kind == "columns":
            return len(block)
        return min(self.block_size, self.n_components - int(block) * self.block_size)

    def design_width(self, block) -> int:
        return int(self.fit_intercept) + self.block_width(block)

    def frequencies(self, block) -> tuple[np.ndarray, np.ndarray]:
        """(Ω, β) of an rff block, Ω in the design's precision, memoised per process for the
        newest few blocks."""
        key = (self.fingerprint(), int(block))
        if key not in _FREQUENCIES:
            while len(_FREQUENCIES) >= 4:
                del _FREQUENCIES[next(iter(_FREQUENCIES))]
            n_in = self.base_width
            with single_threaded_blas():  # the QR of orthogonal frequencies: same bits anywhere
                omega, beta = rff_frequencies(
                    self.seed,
                    int(block),
                    n_in,
                    self.block_width(block),
                    self.sigma,
                    self.sampling == "orthogonal",
                    self.phases == "paired",
                )
            _FREQUENCIES[key] = omega.astype(self.dtype), beta
        return _FREQUENCIES[key]

    def fingerprint(self) -> str:
        """Identifies the features this space computes (configuration, inputs, PCA). Computed
        once, when first asked: the space must be complete by then (it is, after setup)."""
        if self.__dict__.get("_fingerprint") is None:
            h = hashlib.sha256(json.dumps(self.to_json(), sort_keys=True).encode())
            for a in self.arrays().values():
                h.update(np.ascontiguousarray(a).tobytes())
            self.__dict__["_fingerprint"] = h.hexdigest()
        return self.__dict__["_fingerprint"]

    def to_json(self) -> dict:
        return {
            "kind": self.kind,
            "fit_intercept": self.fit_intercept,
            "with_predictions": self.with_predictions,
            "sigma": self.sigma,
            "seed": self.seed,
            "block_size": self.block_size,
            "n_components": self.n_components,
            "dtype": self.dtype,
            "sampling": self.sampling,
            "phases": self.phases,
            "dense": self.dense,
        }

    @property
    def base_width(self) -> int:
        """Width of an rff base z: the number of inputs, or of PCA components."""
        assert self.inputs is not None, "an rff space has inputs"
        return len(self.inputs) if self.components is None else self.components.shape[1]

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        if self.inputs is not None:
            out["rff_inputs"] = self.inputs
        if self.components is not None:
            assert self.mean is not None, "PCA components come with their mean"
            out["rff_mean"], out["rff_components"] = self.mean, self.components
        return out

    @classmethod
    def from_saved(cls, d: dict, arrays: dict) -> FeatureSpace:
        return cls(
            **d, inputs=arrays.get("rff_inputs"), mean=arrays.get("rff_mean"), components=arrays.get("rff_components")
        )


# Per process: the base z of random Fourier features (densified inputs, after the PCA if any),
# per source and chunk. It is n_rows × (inputs or PCA dimensions), small beside the designs, and
# every task of every stage starts from it (MNIST: densifying and projecting 784 pixels cost more
# than the features themselves).
_BASES: weakref.WeakKeyDictionary[ChunkSource, dict] = weakref.WeakKeyDictionary()


_FREQUENCIES: dict = {}  # (fingerprint, rff block) -> (Ω, β), the newest few


def with_bias_column(A: sp.csr_matrix) -> sp.csr_matrix:
    """[1, A] in CSR: in each row the bias entry (column 0, value 1) and then the row's entries of A
    one column to the right, in A's order; the arrays (and index dtype) that
    `sp.hstack([np.ones((n, 1)), A], format="csr")` builds, written in place of its COO round trip
    (three arrays of the block's non-zeros and a sort: most of a scoring stage's time on text)."""
    n, width = A.shape
    index_dtype = np.int32 if max(A.nnz + n, width + 1) <= np.iinfo(np.int32).max else np.int64
    indptr = A.indptr.astype(index_dtype) + np.arange(n + 1, dtype=index_dtype)
    firsts = indptr[:-1]
    entries = np.ones(A.nnz + n, dtype=bool)
    entries[firsts] = False
    indices = np.zeros(A.nnz + n, dtype=index_dtype)
    indices[entries] = A.indices + 1
    data = np.ones(A.nnz + n, dtype=np.float64)
    data[entries] = A.data
    return sp.csr_matrix((data, indices, indptr), shape=(n, width + 1))


def panels(n: int) -> list[tuple[int, int]]:
    """Row panels of a dense design: building a panel's features and using them (AᵀA, AᵀR,
    F + AW) while they are in cache is what makes a stage fast. Always counted from the first
    row of what is passed, so training chunks and scoring compute the same bits."""
    return [(lo, min(n, lo + PANEL_ROWS)) for lo in range(0, n, PANEL_ROWS)]


def chunk_base(source: ChunkSource, chunk_id: int, space: FeatureSpace, chunk) -> sp.csc_matrix | np.ndarray:
    """space.base(chunk.X), using the chunk's own (cached) CSC form for stored columns, and for
    random Fourier features the cached base when it fits (a quarter of the chunk-cache budget)."""
    if space.kind == "columns":
        return space.base(chunk.X) if space.dense else chunk.csc
    if source.n_rows * space.base_width * 8 * 4 > CHUNK_CACHE_BYTES:
        return space.base(chunk.X)
    bases = _BASES.setdefault(source, {})
    key = (space.fingerprint(), chunk_id)
    Z = bases.get(key)
    if Z is None:
        Z = space.base(chunk.X)
        Z.flags.writeable = False
        for old in [k for k in bases if k[0] != key[0]]:  # another fit's features
            del bases[old]
        bases[key] = Z
    return Z


# Per process: the random Fourier designs of the newest blocks, per source and chunk: all blocks
# when they fit in the chunk-cache budget besides one spare, else two (`_design_capacity`), else
# none (a larger store keeps memory bounded by the chunk size). A softmax stage reads its block
# once per inner iteration, the fused update pass computes the next stage's block, and when every
# block fits, passes after the first generate no features at all. The arrays of the block that
# drops out are kept as spares and refilled with the next block (a fresh array of that size
# costs a page fault per 4 KiB, ~15 % of a stage).
_DESIGNS: weakref.WeakKeyDictionary[ChunkSource, dict] = weakref.WeakKeyDictionary()
_SPARES: weakref.WeakKeyDictionary[ChunkSource, dict] = weakref.WeakKeyDictionary()


def _design_capacity(source: ChunkSource, space: FeatureSpace) -> int:
    """How many blocks' designs the cache keeps: all blocks when they fit besides one spare;
    else two, the stage's block and the next one (blocks visited in a cycle longer than the
    cache would miss every time); else none."""
    if space.kind != "rff":
        return 0
    n_blocks = -(-space.n_components // space.block_size)
    room = CHUNK_CACHE_BYTES // (source.n_rows * (space.block_size + 1) * np.dtype(space.dtype).itemsize) - 1
    return n_blocks if room >= n_blocks else (2 if room >= 2 else 0)


def design_cacheable(source: ChunkSource, space: FeatureSpace) -> bool:
    return _design_capacity(source, space) > 0


def cached_design(source: ChunkSource, chunk_id: int, space: FeatureSpace, block):
    """The cached design of `block` for this chunk, or None."""
    if not design_cacheable(source, space):
        return None
    return _DESIGNS.get(source, {}).get((space.fingerprint(), int(block)), {}).get(chunk_id)


def cache_design(source: ChunkSource, chunk_id: int, space: FeatureSpace, block, A: np.ndarray) -> None:
    if not design_cacheable(source, space):
        return
    blocks = _DESIGNS.setdefault(source, {})
    key = (space.fingerprint(), int(block))
    A.flags.writeable = False
    if key not in blocks:
        while len(blocks) >= _design_capacity(source, space):
            _SPARES.setdefault(source, {}).update(blocks.pop(next(iter(blocks))))  # the oldest block
        blocks[key] = {}
    blocks[key][chunk_id] = A


def new_design(source: ChunkSource, chunk_id: int, shape: tuple, dtype: str) -> np.ndarray:
    """An array for a design to be cached: this chunk's spare when it has the shape, else new."""
    A = _SPARES.get(source, {}).pop(chunk_id, None)
    if A is None or A.shape != shape or A.dtype != dtype:
        return np.empty(shape, dtype=dtype)
    A.flags.writeable = True
    return A


# Per process: for each chunk the store keeps in its cache, the sparse design (stored columns) of
# the last block a task built for it, with its key (the space's fingerprint, the block's columns).
# The update task of stage t builds stage t + 1's block for the fused statistics, and stage t + 1's
# tasks then use it as theirs instead of building it again (one design per chunk, a fraction of
# the chunk: its non-zeros in the block's columns). Read-only: a task that wrote into it would fail.
_SPARSE_DESIGNS: weakref.WeakKeyDictionary[ChunkSource, dict[int, tuple]] = weakref.WeakKeyDictionary()


def chunk_design(source: ChunkSource, chunk: Chunk, space: FeatureSpace, base, block):
    """space.design(base, block) for `chunk` of `source`, cached as above."""
    A = cached_design(source, chunk.id, space, block)
    if A is not None:
        return A
    if space.dense_design:
        A = space.design(base, block)
        cache_design(source, chunk.id, space, block, A)
        return A
    key = (space.fingerprint(), np.asarray(block, dtype=np.int64).tobytes())
    last = _SPARSE_DESIGNS.get(source, {}).get(chunk.id)
    if last is not None and last[0] == key:
        return last[1]
    A = space.design(base, block)
    assert isinstance(A, sp.csr_matrix), "stored columns give sparse designs"
    if not chunk.X.data.flags.writeable:  # a chunk of the store's cache: it is read again next stage
        for a in (A.data, A.indices, A.indptr):
            a.flags.writeable = False
        _SPARSE_DESIGNS.setdefault(source, {})[chunk.id] = (key, A)
    return A
