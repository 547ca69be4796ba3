"""The master problem of MultiBoostcw (Lin, Shen, van den Hengel and Suter 2012) over the weak
learners found so far, and FCD, the paper's Algorithm 2 that solves it (streamfit.solvers.multiboost
runs column generation, Algorithm 1, and calls `fcd` once per boosting iteration, in the driver).

The problem is eq. (2) divided by C (lam = 1/C, p = m(K−1) pairs (i, y ≠ y_i)):

    min_{w ≥ 0}  lam·‖w‖₁ + (1/p) Σ_i Σ_{y≠y_i} μ_(i,y),   μ_(i,y) = exp(F_y(x_i) − F_{y_i}(x_i)),

F_c = Σ_{j: class c} w_j ħ_{l_j}(x) over the coordinates j = (class, learner). FCD reads only each
learner's packed output bits per sample, the labels and the per-sample state (F, and μ as a per-row
scale times U): `Master` holds them chunk by chunk, in memory up to a byte budget and in files of a
local directory past it, and every pass adds the chunks' partial sums in chunk order, so the
iterates do not depend on the budget. A coordinate update applies the previous change to μ (20),
sums V± (21) and sets w_j by (12) or (13) (multiboost_kernels.coordinate_update); θ (16), the
working set (17) and the stop (18) as in the paper.
"""

from __future__ import annotations

import os
import shutil
import tempfile

import numpy as np

from streamfit.solvers import multiboost_kernels as kernels


def objective(F: np.ndarray, labels: np.ndarray, weights: np.ndarray, lam: float) -> float:
    """(2)/C = lam·‖w‖₁ + (1/p) Σ_i Σ_{y≠y_i} exp(F_y(x_i) − F_{y_i}(x_i)), p = m(K−1)."""
    _, R = kernels.margins(F, labels)
    m, K = F.shape
    return float(lam * weights.sum() + R.sum() / (m * (K - 1)))


class Master:
    """The master problem's per-sample data, chunk by chunk, which is all Algorithm 2 reads: per
    chunk the labels, the learners' packed sign bits (L × ⌈rows/8⌉), the labels packed the same
    way (kernels.class_bits, K × ⌈rows/8⌉) and the state of kernels.master_state (F, and μ as a
    per-row scale times U, with their sums). Chunks are added in order; while their total size fits
    in `budget` bytes they stay in memory, and every later one is kept in files of `spill_dir`
    (a local directory; None: a temporary directory made at the first such chunk and removed
    by close(), the end of a `with` block), read for each pass (its bits by memory map, only the learners the pass
    needs) and its state written back, so one such chunk is in memory at a time. A pass adds the
    chunks' partial sums in chunk order, so results do not depend on the budget."""

    def __init__(
        self, K: int, budget: int, lows: np.ndarray, spill_dir: str | None = None, signs: np.ndarray | None = None
    ):
        self.K, self.budget, self.spill_dir = K, budget, spill_dir
        self._temporary: str | None = None  # the directory made for the spilled chunks when spill_dir is None
        self.lows = np.asarray(
            lows, dtype=np.int8
        )  # per learner, its value where its bit is 0: −1 (sign) or 0 (indicator)
        self.signs = (  # per learner, −1 for a negated indicator (ħ = −(1 or 0)), else +1 (None: all +1)
            np.ones(len(self.lows), dtype=np.int8) if signs is None else np.asarray(signs, dtype=np.int8)
        )
        self.resident: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]] = []  # the first chunks, in memory:
        # (labels, bits, class_bits, state)
        self.spilled = 0  # chunks after those, in files of spill_dir
        self._used = 0
        self._packed: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None = None  # _pack's buffers

    @classmethod
    def in_memory(
        cls, labels: np.ndarray, bits: np.ndarray, F: np.ndarray, lows: np.ndarray, signs: np.ndarray | None = None
    ) -> Master:
        """All rows as one resident chunk (for whole-array use: tests, benchmarks)."""
        master = cls(F.shape[1], np.iinfo(np.int64).max, lows, signs=signs)
        master.add(labels, bits, F)
        return master

    def add(self, labels: np.ndarray, bits: np.ndarray, F: np.ndarray, excluded: np.ndarray | None = None) -> None:
        """Appends a chunk: its labels (rows,), bits (L × ⌈rows/8⌉ uint8), scores F (rows × K),
        and the rows outside the problem (bool, None: none): their μ and R are 0, so they add
        nothing to any sum, while their F follows the weights."""
        state = kernels.master_state(np.ascontiguousarray(F, dtype=np.float64), labels)
        if excluded is not None:
            state[self.K : 2 * self.K + 1, excluded] = 0.0  # U and S
        classes = kernels.class_bits(labels, self.K)
        size = labels.nbytes + bits.nbytes + classes.nbytes + state.nbytes
        self._packed = None
        if not self.spilled and self._used + size <= self.budget:
            self.resident.append((labels, bits, classes, state))
            self._used += size
            return
        if self.spill_dir is None:
            self.spill_dir = self._temporary = tempfile.mkdtemp(prefix="streamfit-multiboost-")
        i = self.spilled
        self.spilled += 1
        for part, array in (("labels", labels), ("bits", bits), ("classes", classes), ("state", state)):
            np.save(self._path(i, part), array, allow_pickle=False)

    def close(self) -> None:
        """Removes the temporary directory of the spilled chunks, if one was made."""
        if self._temporary is not None:
            shutil.rmtree(self._temporary)
            self._temporary = None

    def __enter__(self) -> Master:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _path(self, i: int, part: str) -> str:
        return os.path.join(str(self.spill_dir), f"{i}.{part}.npy")

    @property
    def n_chunks(self) -> int:
        return len(self.resident) + self.spilled

    def run_pass(
        self, apply: tuple[int, int, float] | None, learners: np.ndarray, classes: np.ndarray, difference: bool
    ) -> np.ndarray:
        """kernels.master_pass on every chunk: apply the weight change (learner, class, delta) if
        any, then sum (Σ_{D+} μ, Σ_{D−} μ) of each coordinate (classes[q], learners[q]) over the
        chunks in order (with `difference`: (Σ_{D+} μ − Σ_{D−} μ, 0), for θ). Returns (q × 2)."""
        a_learner, a_class, delta = apply if apply is not None else (-1, 0, 0.0)
        total = np.zeros((len(learners), 2))
        for _, bits, classes_bits, state in self.resident:
            total += kernels.master_pass(
                bits,
                classes_bits,
                state,
                a_learner,
                a_class,
                delta,
                learners,
                classes,
                self.lows,
                self.signs,
                difference,
            )
        if self.spilled:
            needed = np.unique(np.concatenate([learners, [a_learner] if a_learner >= 0 else []]).astype(np.int64))
            rows = np.searchsorted(needed, learners)
            a_row = int(np.searchsorted(needed, a_learner)) if a_learner >= 0 else -1
        for i in range(self.spilled):
            classes_bits, state = np.load(self._path(i, "classes")), np.load(self._path(i, "state"))
            bits = self._spilled_bits(i, needed)
            total += kernels.master_pass(
                bits,
                classes_bits,
                state,
                a_row,
                a_class,
                delta,
                rows,
                classes,
                self.lows[needed],
                self.signs[needed],
                difference,
            )
            if a_learner >= 0:
                np.save(self._path(i, "state"), state, allow_pickle=False)
        return total

    def sweep(
        self,
        pending: tuple[int, int, float] | None,
        order: np.ndarray,
        coord_class: np.ndarray,
        coord_learner: np.ndarray,
        weights: np.ndarray,
        C_over_p: float,
        large_c: bool,
        learning_rate: float,
    ) -> tuple[int, int, float] | None:
        """Lines 5–10 of Algorithm 2: the coordinates `order` in turn, each set by (12) (or (13), shrunk by
        `learning_rate`, kernels.coordinate_update)
        from the sums (21) of a pass that first applies the pending weight change (20); `weights`
        and the chunks' μ updated in place (F at the end of fcd). Returns the change still pending (applied by
        the next pass). When every chunk is in memory this is one compiled call over all of them
        (kernels.fcd_sweep); otherwise one run_pass per coordinate, streaming the spilled chunks.
        Both do the same arithmetic in the same order, so they give the same iterates."""
        if not self.spilled:
            if self._packed is None:
                self._packed = self._pack()
            bits, classes_bits, states, rows = self._packed
            a_learner, a_class, delta = pending if pending is not None else (-1, 0, 0.0)
            a_learner, a_class, delta = kernels.fcd_sweep(
                bits, classes_bits, states, rows, self.K, np.asarray(order, dtype=np.int64), coord_class,
                coord_learner, weights, C_over_p, large_c, learning_rate, a_learner, a_class, delta, self.lows,
                self.signs,
            )  # fmt: skip
            return None if a_learner < 0 else (int(a_learner), int(a_class), float(delta))
        for j in order:
            ((plus, minus),) = self.run_pass(pending, coord_learner[j : j + 1], coord_class[j : j + 1], False)
            pending = None
            old = weights[j]
            value = kernels.coordinate_update(plus, minus, old, C_over_p, large_c, learning_rate)
            if value != old:
                weights[j] = value
                pending = (int(coord_learner[j]), int(coord_class[j]), value - old)
        return pending

    def _pack(self) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The resident chunks' bits, class_bits and states, each concatenated flat in chunk
        order, and the chunks' row counts: kernels.fcd_sweep's input. Each resident array is
        replaced by a view of its part of the buffer (the same shape, values and writability), so
        the state fcd_sweep updates is the one run_pass, add_scores and scores read; a chunk is
        copied and its old arrays released in turn, so the resident data is held about once,
        except the bits of a caller that keeps its own reference to them (an in-memory
        ChunkState, as the estimators use, returns its stored array): those are held twice
        while the Master lives. A single resident chunk whose arrays are C-contiguous (the in-memory
        fits, a store of one chunk) needs no copy: its arrays' flat views are the buffers."""
        rows = np.array([labels.shape[0] for labels, *_ in self.resident], dtype=np.int64)
        if len(self.resident) == 1 and all(a.flags.c_contiguous for a in self.resident[0][1:]):
            _, bits, classes, state = self.resident[0]
            return bits.reshape(-1), classes.reshape(-1), state.reshape(-1), rows
        buffers = [
            np.empty(sum(chunk[p].size for chunk in self.resident), dtype=self.resident[0][p].dtype) for p in (1, 2, 3)
        ]
        starts = [0, 0, 0]
        for i, (labels, *arrays) in enumerate(self.resident):
            views = []
            for p, array in enumerate(arrays):
                view = buffers[p][starts[p] : starts[p] + array.size].reshape(array.shape)
                view[...] = array
                view.flags.writeable = array.flags.writeable
                starts[p] += array.size
                views.append(view)
            self.resident[i] = (labels, views[0], views[1], views[2])
        return buffers[0], buffers[1], buffers[2], rows

    def scores(self, i: int) -> tuple[np.ndarray, np.ndarray]:
        """(labels, F) of chunk i."""
        if i < len(self.resident):
            labels, _, _, state = self.resident[i]
        else:
            labels, state = (
                np.load(self._path(i - len(self.resident), "labels")),
                np.load(self._path(i - len(self.resident), "state")),
            )
        return labels, np.ascontiguousarray(state[: self.K].T)

    def _spilled_bits(self, i: int, learners: np.ndarray) -> np.ndarray:
        """The packed bits of the given learners (rows) of spilled chunk i, read by memory map."""
        stored = np.load(self._path(i, "bits"), mmap_mode="r")
        bits = np.ascontiguousarray(stored[learners])
        del stored
        return bits

    def add_scores(self, coord_class: np.ndarray, coord_learner: np.ndarray, change: np.ndarray) -> None:
        """F_c += change_j·ħ_{l_j} on every chunk for each coordinate j with change_j ≠ 0
        (kernels.add_scores): the scores follow the weights once FCD is done."""
        for _, bits, _, state in self.resident:
            kernels.add_scores(bits, state, coord_class, coord_learner, change, self.lows, self.signs)
        if not self.spilled:
            return
        moved = np.flatnonzero(change)
        needed = np.unique(coord_learner[moved])
        rows = np.searchsorted(needed, coord_learner[moved])
        for i in range(self.spilled):
            state = np.load(self._path(i, "state"))
            kernels.add_scores(
                self._spilled_bits(i, needed),
                state,
                coord_class[moved],
                rows,
                change[moved],
                self.lows[needed],
                self.signs[needed],
            )
            np.save(self._path(i, "state"), state, allow_pickle=False)


def kkt_violations(weights: np.ndarray, sums: np.ndarray, C_over_p: float) -> np.ndarray:
    """θ_j of eq. (16) from the sums (Σ_{D+} μ, Σ_{D−} μ) of every coordinate (J × 2; or their
    difference and 0, Master.run_pass with difference): with
    s_j = (C/p) Σ_i Σ_{y≠y_i} μ_(i,y) δh_{i,j}(y) = (C/p)(Σ_{D+} μ − Σ_{D−} μ),
    θ_j = |1 − s_j| if w_j > 0, else max(0, s_j − 1)."""
    s = C_over_p * (sums[:, 0] - sums[:, 1])
    return np.where(weights > 0, np.abs(1.0 - s), np.maximum(0.0, s - 1.0))


def fcd(
    master: Master,
    coord_class: np.ndarray,
    coord_learner: np.ndarray,
    weights: np.ndarray,
    new: np.ndarray,
    C_over_p: float,
    tol: float,
    tau_max: int,
    large_c: bool,
    learning_rate: float,
    rng: np.random.Generator | None,
) -> tuple[int, float | None]:
    """Algorithm 2 on the master problem, `weights` and the master's μ and F updated in place.
    S starts as the `new` coordinates, swept in order; then θ (16) for all coordinates, S by
    (17), and S swept in a random order (a permutation: each coordinate once) per working-set
    iteration, until (18) max θ ≤ tol or tau_max iterations. Each coordinate update is one pass
    over the chunks (Master.sweep: one compiled call per working-set iteration when the master
    is in memory): it applies the previous coordinate's change to μ (20) and sums V± (21) for
    this one, then sets w_j by (12) (or (13)), shrunk by `learning_rate` (ν < 1 only with
    tau_max = 1, MultiBoostParams). F, which Algorithm 2 does not read, is brought to
    the final weights once at the end (Master.add_scores). `rng` draws the working sets' orders
    (None: tau_max = 1, which draws none). Returns (working-set iterations, max θ of the
    last check of (18); when tau_max ended the loop, that check came before the last sweep, so
    the final weights' θ is not known (docs/benchmarks.md, "Every solver's answer on data the
    tests do not use"); None when tau_max ended it before θ was needed)."""
    start = weights.copy()
    order = np.asarray(new, dtype=np.int64)
    tau: int = 0
    worst: float | None = None
    pending: tuple[int, int, float] | None = None  # a weight change not yet applied to μ
    while True:
        tau += 1
        pending = master.sweep(pending, order, coord_class, coord_learner, weights, C_over_p, large_c, learning_rate)
        if tau >= tau_max:
            break
        theta = kkt_violations(weights, master.run_pass(pending, coord_learner, coord_class, True), C_over_p)
        pending = None
        worst = float(theta.max()) if len(theta) else 0.0
        if worst <= tol:
            break
        S = np.flatnonzero(theta > tol)
        assert rng is not None, "a working set after the first sweep (tau_max > 1) draws its order"
        order = rng.permutation(S)
    if pending is not None:
        master.run_pass(pending, np.zeros(0, np.int64), np.zeros(0, np.int64), False)
    master.add_scores(coord_class, coord_learner, weights - start)
    return tau, worst
