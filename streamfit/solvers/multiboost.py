"""MultiBoostcw: multiclass boosting of decision stumps by column generation and fast coordinate
descent (Lin, Shen, van den Hengel and Suter 2012, "Fast Training of Effective Multi-class
Boosting Using Coordinate Descent Optimization").

The model (§2): weak learners ħ(x) ∈ {−1, +1}, decision stumps on one feature; class c scores
F_c(x) = w_cᵀ h_c(x) with w ≥ 0, the prediction is argmax_c F_c(x). Besides these sign stumps
(`stumps="sign"`, the paper's) the pool may hold indicator stumps ħ(x) ∈ {0, 1}, 1 on one side
of the threshold, and the constant ħ ≡ 1 (`"indicator"`), or both (`"both"`, the default): a
sign stump moves F_c on every row, an indicator only on one side, which is what a tree leaf's
value does (with binary features the sign stump must move the rows without the feature too).
The indicators may also be closed under negation (`"signed"`: the indicators and their negations
−1[x > t], −1[x ≤ t] and −1; the sign stumps are closed already, −sign(x > t) = sign(x ≤ t)):
with w ≥ 0 this gives each indicator a weight of either sign, as a tree leaf's value has. A
negated learner's edge is minus its indicator's, from the same histograms. Nothing else
changes: for a class-specific or shared learner, δh_{i,j}(y) = ħ(x_i) or −ħ(x_i) or 0 lies in
{−1, 0, +1} for every kind, so the pairs with δh = 0 are constants of (10), and (12), (13),
(20), (21) hold as written with D± the pairs with δh = ±1 (for a negated learner, its
indicator's D∓: the roles of V₊ and V₋ swap). With class-specific learners
(`weak_learners="class"`, MultiBoostcw) each boosting iteration adds one stump per class; with
shared learners (`weak_learners="shared"`, MultiBoost of Shen and Hao, eq. 6) it adds one stump
that every class weighs with its own coefficient.

The problem is eq. (2), written here divided by C so that `lam` = 1/C has the project's meaning
(the loss averaged, over the p = m(K−1) pairs (i, y ≠ y_i)):

    min_{w ≥ 0}  lam·‖w‖₁ + (1/p) Σ_i Σ_{y≠y_i} exp(−γ_(i,y)),   γ_(i,y) = F_{y_i}(x_i) − F_y(x_i)   (1), (2)/(7)

Column generation, Algorithm 1: the dual weights λ_(i,y) = (C/p) μ_(i,y), μ_(i,y) = exp(−γ_(i,y)),
come from the primal scores by the KKT relation (5). Each boosting iteration (one driver step)
  1. histograms: one `map_reduce` over row chunks sums, per (feature, bin, class), the signed dual
     weights g_c[i] (streamfit.solvers.multiboost_kernels) of the rows whose feature value falls
     in the bin; the scores F each chunk needs are the per-sample state `scores` (one file per
     chunk, chunk-aligned, as stagewise keeps its residual scores);
  2. the subproblem (4) per class (shared: (6) over all classes) is solved exactly from the
     histograms: the edge of the sign stump "x_f > cut_b" is T_c − 2·Σ_{bins ≤ b}, of the
     indicators 1[x_f > cut_b] and 1[x_f ≤ cut_b] T_c − Σ_{bins ≤ b} and Σ_{bins ≤ b}; the
     largest edge in the pool wins (kernels.best_stumps, `choice="edge"`, the paper's rule; the default for
     totally corrective runs and shared learners, `choice="auto"`); with `choice="gain"` the largest loss decrease
     of the line search, (√V₊ − √V₋)², from a second histogram of g's own-class part that splits each
     edge V₊ − V₋ into V₊ and V₋ (summed in the same pass, kernels.histograms); with
     `choice="decrease"` the largest decrease of (2), lam·‖w‖₁ included, by the step the run takes on
     the learner as a new coordinate (ν·(13) or ν·(12) at C; the gain bounds it, and is the decrease
     of the loss alone under (13) at ν = 1, not of (2): at V₋ = 0 the step is (12)'s at C, 0 once
     V₊C/p ≤ 1, so the gain can pick a learner that does not move; the default for the stage-wise
     MultiBoostcw-1, `choice="auto"`, since session 20: docs/benchmarks.md, "the exact decrease of
     (2) as the stage-wise choice"). Column generation has converged
     when no learner violates a dual constraint (3b) by more than `tol`: (C/p)·edge − 1 ≤ tol for every
     class (with "decrease", the largest edge over the pool; and it stops when no learner's step lowers
     (2));
  3. a `map` over chunks evaluates the new stumps on every row (from the binned chunk): one sign bit per (learner,
     sample), packed (np.packbits) per chunk and appended to the chunk's sign bitset (per-sample
     state `bits`: L × ⌈rows/8⌉ bytes per chunk, a new version each iteration that adds learners);
  4. FCD, Algorithm 2, solves the master problem (2) over all learners so far from those bits
     alone, chunk by chunk (streamfit.solvers.multiboost_master: `Master`, `fcd`; one compiled call per working-set iteration when the
     master is in memory): the closed-form coordinate minimum (12) ((13) with
     `update="large_c"`; where a coordinate has V₋ = 0, no pair pushing it down, (13)'s minimum
     is at +inf and (12)'s at the solver's C, log(V₊C/p), is taken: the exact minimum of (2)
     along it, so a learner that separates its class's pairs gets a finite weight instead of
     staying at 0 and being chosen again at every iteration), μ updated by (20), V± by (21) as sums of per-chunk partial sums, the
     KKT violations θ (16), the working set (17) and stopping rule (18) with ε = `tol`, at most
     `tau_max` working-set iterations (1: the stage-wise MultiBoostcw-1; the first sweeps the new
     coordinates in order, later ones each coordinate of S once, in a random order); θ's pass sums
     only Σ_{D+} μ − Σ_{D−} μ per coordinate (kernels.master_pass with difference); with tau_max = 1
     each new weight may be shrunk, ν·(13) with ν = `learning_rate`;
  5. the scores F, brought to FCD's final weights at its end, are written per chunk as the next
     `scores`; a resumed run reads them back, so it holds the same bits as an uninterrupted one.

lam="auto" chooses C as the paper does (§3: from 1e2..1e5 by validation): a fit per C of LAM_GRID
on the rows not held out (HOLDOUT = 20 %, by a hash of the global row index, kernels.held_out),
each for max_iter iterations or to convergence, scored on the held-out rows, then the fit on all
rows at the best C. The phases are steps of one run, in the checkpointed state.

early_stopping (as LightGBM's early stopping and scikit-learn's HistGradientBoosting do it, with a
held-out score and a patience): after each iteration the held-out rows are scored (the
validation store that `train --valid` passes, Context.valid, else a validation_fraction of the
training rows by the same row hash, left out of the sums as lam="auto"'s are), by the error rate
of argmax_c F_c with ties broken by the loss (validation_score="error") or by the loss term of (2)
on their pairs, (1/(m_v(K−1))) Σ_i Σ_{y≠y_i} exp(F_y − F_{y_i}) ("loss"); the iteration with the
best score so far is kept (its learner count and weights in the state), the run stops
n_iter_no_change iterations after it, and the model is that iteration's: a prefix of the
learners and coordinates, with the weights it had then (the same as now for τ_max = 1, whose
steps never move an earlier weight; FCD with τ_max ≥ 2 moves them).

Features are quantile-binned once, by a pass over the store at init (`n_bins` cuts at most per
feature, from merged per-chunk weighted sketches; a zero of a sparse column is its own bin), and
a second pass writes each chunk binned (per-sample state `row_starts`, `columns`: X's CSR
structure, and `bins`: the bin of every stored entry, 2 bytes), which is all that steps 1 and 3
read. The binned chunks, histograms and stump search hold only the columns with a cut (and
column 0, for the constant learner; used_columns), renumbered in increasing order, so an
iteration's work scales with the columns the data uses, not with n_features (2^18 hashed
columns of which a text set uses a few thousand), and the model maps each stump back to its
column: the store is not read again, the histogram kernel visits stored entries only, without a
search (the zero bin is the column total minus the stored entries' sum), and a stump x_f > cut_b
is bin(x_f) > b. The cuts are in the checkpoint, and each stump's threshold (a cut value)
in the model, so prediction on raw data needs no bins.

Memory: the histograms are (Σ_f bins_f) × K floats over the used columns f; chunk tasks hold one chunk. The driver holds
O(L·K) (the learners, weights, histograms) plus the master problem's per-sample data of the
chunks that fit in `master_memory_mb` (1 bit per (sample, learner), K bits per sample for its
class, 2K + 2 floats per sample: F, μ as a per-row scale times U, U's sum, and the label); the
other chunks' data is kept in files of a local temporary directory (TMPDIR) and streamed through memory one chunk at a time on every FCD pass. Every pass
visits the chunks in order and adds their partial sums in that order, so the model is the same
for any `master_memory_mb`. Multilabel stores are refused: the margins (1) compare one true class
with each other class.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Annotated, Any, Literal, NamedTuple

import numpy as np
import scipy.sparse as sp
from pydantic import Field, model_validator

from streamfit.errors import ConfigError
from streamfit.model import Model, register_model
from streamfit.solvers import multiboost_kernels as kernels
from streamfit.solvers.base import (
    Context,
    PerSample,
    Solver,
    SolverParams,
    SolverState,
    available_memory,
    check_state_memory,
    register_solver,
)
from streamfit.solvers.multiboost_master import Master, fcd
from streamfit.store import ChunkSource, Store

SCORES = "scores"
BINS = "bins"
COLUMNS = "columns"
ROW_STARTS = "row_starts"
BITS = "bits"
LABELS = "labels"
LAM_GRID = (1e-2, 1e-3, 1e-4, 1e-5)  # lam="auto": 1/C for the paper's grid C = 1e2 … 1e5 (§3)
HOLDOUT = 0.2  # lam="auto": the fraction of rows held out to choose C
AUTO_EARLY_STOPPING_ROWS = 10_000  # early_stopping="auto": on above this many training rows (scikit-learn's rule)
# Sparse, wide rows (tf-idf text): at least this many columns used, and at most this share of them
# stored in a row on average. Measured in session 24 (docs/benchmarks.md, "multiboost on text"):
# every text set (6 161 to 66 737 columns used, 0.17–1.4 % of them stored a row) fell in, and there
# the defaults were 5 points of accuracy or more below one-vs-rest LinearSVC; no dense set measured did
# (at most 651 columns used, ≥ 19 % stored), nor the sparse generated gen-sparse (2 000 columns, 1 %).
SPARSE_WIDE_COLUMNS = 5000
SPARSE_WIDE_SHARE = 0.02

log = logging.getLogger(__name__)


class MultiBoostParams(SolverParams):
    lam: Annotated[float, Field(gt=0)] | Literal["auto"] = Field(  # type: ignore[assignment]
        1e-8,
        description="1/C of eq. (2): the weight of ‖w‖₁ with the loss averaged over the m(K-1) pairs (the default "
        "C = 1e8 is the paper's MultiBoostcw-1 setting); auto (with update=exact): the C of the paper's grid "
        "1e2..1e5 with the lowest error on a held-out 20 % of the rows (ties: the smaller C), then max_iter "
        "iterations on all rows at that C",
    )
    tol: float = Field(
        0.1, gt=0, description="ε of FCD's working set (17) and stop (18), and of column generation's dual violation"
    )
    max_iter: int = Field(100, ge=1, description="boosting iterations (each adds K stumps, or 1 shared)")
    tau_max: int = Field(
        1,
        ge=1,
        description="FCD's maximum working-set iterations (1: stage-wise MultiBoostcw-1; 2: the paper's MultiBoostcw)",
    )
    weak_learners: Literal["class", "shared"] = Field(
        "class",
        description="class: one stump per class per iteration (MultiBoostcw, eq. 4); shared: one stump for all classes (eq. 6)",
    )
    update: Literal["exact", "large_c"] = Field(
        "large_c",
        description="FCD's coordinate update: exact: eq. (12); large_c: eq. (13), the large-C form of MultiBoostcw-1 "
        "(a fixed schedule of max_iter rounds: no convergence warning at max_iter), and (12) at C where (13) has no "
        "finite minimum (V₋ = 0)",
    )
    stumps: Literal["sign", "indicator", "both", "signed", "all"] = Field(
        "both",
        description="the weak learners' pool: sign: ħ ∈ {−1, +1} (the paper's §2); indicator: ħ ∈ {0, 1}, 1 on one "
        "side of the threshold (and the constant 1); both: the union, each iteration choosing over both by "
        "`choice`; signed: the indicators and their negations −1[x > t], −1[x ≤ t], −1 (with "
        "w ≥ 0, an indicator of either sign); all: the sign stumps and the signed indicators",
    )
    choice: Literal["auto", "edge", "gain", "decrease"] = Field(
        "auto",
        description="which learner of the pool an iteration adds per class: auto: decrease for the stage-wise "
        "MultiBoostcw-1 (tau_max=1, weak_learners=class), else edge; edge: the most violated dual constraint, "
        "the largest Σ_i g_c[i]ħ(x_i) = V₊ − V₋ (the paper's eq. 4); gain: the largest decrease of the loss under "
        "the exact line search, (√V₊ − √V₋)² (one more histogram, of g's own-class part); decrease: the largest "
        "decrease of the objective (2), lam·‖w‖₁ included, by the step the run takes (update, C, learning_rate) "
        "on the learner as a new coordinate (the same histograms as gain; column generation stops when no "
        "constraint (4) over the pool is violated by more than tol)",
    )
    n_bins: int = Field(
        64, ge=2, le=65533, description="quantile bins per feature (a stump threshold is a bin boundary)"
    )
    learning_rate: float = Field(
        1.0,
        gt=0,
        le=1,
        description="ν, the shrinkage of the stage-wise step (tau_max=1): each new weight is ν times the minimum of "
        "(13) (or (12)) along its coordinate, as a gradient-boosting learning rate shrinks each tree",
    )
    cg_tol: float = Field(
        0.0, ge=0, description="stop when (2) decreases by less than this relative amount in an iteration (0: never)"
    )
    early_stopping: bool | Literal["auto"] = Field(
        False,
        description="stop after n_iter_no_change iterations without a better held-out score (validation_score) "
        "and keep the model of the iteration with the best one; held out: the --valid store when train has one, "
        "else validation_fraction of the training rows (a seeded hash of the row index; they are left out of the "
        f"fit); auto: on for more than {AUTO_EARLY_STOPPING_ROWS} training rows",
    )
    validation_score: Literal["error", "loss"] = Field(
        "error",
        description="early_stopping's score on the held-out rows: error: the error rate of argmax_c F_c, ties "
        "broken by the loss; loss: the average of exp(F_y − F_{y_i}) over the held-out pairs (y ≠ y_i), the loss "
        "term of (2)",
    )
    validation_fraction: float = Field(
        0.1, gt=0, lt=1, description="early_stopping without a --valid store: the fraction of training rows held out"
    )
    n_iter_no_change: int = Field(
        100, ge=1, description="early_stopping: iterations without a better held-out score before the run stops"
    )
    validation_tol: float = Field(
        0.0,
        ge=0,
        description="early_stopping: a held-out loss counts as lower than the best so far when it is lower by more "
        "than this relative amount",
    )
    master_memory_mb: float = Field(
        1024.0,
        ge=0,
        description="MiB of the master problem's per-sample data the driver keeps in memory; the rest is "
        "streamed from local temporary files one chunk at a time (the model is the same)",
        json_schema_extra={"affects_model": False},
    )

    @model_validator(mode="after")
    def _check(self):
        if self.choice in ("gain", "decrease") and self.weak_learners == "shared":
            raise ValueError(
                f"choice={self.choice} is per class (one stump per class, weak_learners=class); shared learners use "
                "the edge (6)"
            )
        if self.learning_rate != 1.0 and self.tau_max > 1:
            raise ValueError(
                "learning_rate < 1 needs tau_max=1 (stage-wise): the totally corrective FCD minimizes every weight "
                "again, so a shrunk step changes only how fast it reaches the same master optimum; its regularizer "
                "is lam (1/C)"
            )
        if self.lam == "auto" and self.early_stopping is not False:
            raise ValueError(
                "early_stopping needs a fixed lam: lam=auto holds out rows of its own to choose C; set lam, or "
                "early_stopping=false"
            )
        if self.lam == "auto" and self.update == "large_c":
            raise ValueError(
                "lam=auto chooses C, which update=large_c (eq. 13, the C → ∞ limit) ignores; set update=exact"
            )
        return self

    @property
    def rule(self) -> str:
        """The choice rule the run uses: `choice`, with auto resolved. A stage-wise step (tau_max = 1,
        class-specific learners) is a greedy exact line search, whose progress per iteration is the
        decrease of (2) by that step: "decrease"; totally corrective column generation (tau_max ≥ 2)
        and shared learners (6) keep the paper's most violated constraint, "edge"."""
        if self.choice != "auto":
            return self.choice
        return "decrease" if self.tau_max == 1 and self.weak_learners == "class" else "edge"


# -- binning -------------------------------------------------------------------------------


@dataclasses.dataclass
class Sketch:
    """Weighted distinct nonzero values per feature (segments starts[f]:starts[f+1] of values,
    sorted), at most `size` per feature, the largest negative value per feature (−inf: none)
    kept exactly, and the rows seen; `+` merges two (the engine's map_reduce adds chunk
    sketches along its fixed tree)."""

    starts: np.ndarray
    values: np.ndarray
    weights: np.ndarray
    largest_negative: np.ndarray
    n_rows: int
    size: int

    @classmethod
    def of(
        cls,
        features: np.ndarray,
        values: np.ndarray,
        weights: np.ndarray,
        largest_negative: np.ndarray,
        n_rows: int,
        size: int,
    ):
        n_features = len(largest_negative)
        order = kernels.feature_value_order(features, values, n_features)  # np.lexsort((values, features))
        features, values, weights = features[order], values[order], weights[order]
        new = np.ones(len(values), dtype=bool)
        new[1:] = (features[1:] != features[:-1]) | (values[1:] != values[:-1])
        first = np.flatnonzero(new)
        weights = np.add.reduceat(weights, first) if len(first) else weights[:0]
        features, values = features[first], values[first]
        starts = np.searchsorted(features, np.arange(n_features + 1)).astype(np.int64)
        starts, values, weights = kernels.compress_sketch(starts, values, weights, size)
        return cls(starts, values, weights, largest_negative, n_rows, size)

    def _features(self) -> np.ndarray:
        return np.repeat(np.arange(len(self.starts) - 1), np.diff(self.starts))

    def __add__(self, other: Sketch) -> Sketch:
        return Sketch.of(
            np.concatenate([self._features(), other._features()]),
            np.concatenate([self.values, other.values]),
            np.concatenate([self.weights, other.weights]),
            np.maximum(self.largest_negative, other.largest_negative),
            self.n_rows + other.n_rows,
            self.size,
        )


def _read_uncached(source: ChunkSource, chunk_id: int):
    """Chunk `chunk_id`, left out of a store's cache of decoded chunks: multiboost reads the
    store only in its two passes at init (the iterations read the binned chunk, _bins_task), so
    cached chunks would only hold memory (up to STREAMFIT_CHUNK_CACHE_MB, 512 MiB) for the whole
    run."""
    if isinstance(source, Store):
        return source.read_chunk(chunk_id, cache=False)
    return source.read_chunk(chunk_id)


def _sketch_task(source: ChunkSource, chunk_id: int, *, size: int) -> Sketch:
    """The chunk's Sketch: Sketch.of of its stored nonzero values (weight 1 each), by one compiled
    pass (kernels.chunk_sketch: the same arrays, with a peak of about 3.7 times the chunk's stored
    entries where numpy's lexsort of every entry and its copies took 11 times)."""
    X = _read_uncached(source, chunk_id).X
    starts, values, weights, largest_negative = kernels.chunk_sketch(X.indptr, X.indices, X.data, source.n_features)
    starts, values, weights = kernels.compress_sketch(starts, values, weights, size)
    return Sketch(starts, values, weights, largest_negative, X.shape[0], size)


def bin_cuts(sketch: Sketch, n_bins: int) -> tuple[np.ndarray, np.ndarray]:
    """(cuts, cut_offsets): feature f's sorted cut values are cuts[cut_offsets[f]:cut_offsets[f+1]],
    its bins (cut_{b−1}, cut_b]. A feature with at most n_bins distinct values (zero counted)
    gets every distinct value but the largest as a cut (one bin per value); otherwise the
    weighted quantiles at levels k/n_bins, plus 0 and the largest negative value, so that zero
    is a bin of its own (n_bins + 2 bins at most). A feature without stored values (only zeros)
    has no cut. One compiled pass over the features (kernels.quantile_cuts; a loop in Python over
    the stored columns cost a third of a 20-iteration fit on 2^18 hashed text columns)."""
    cuts, offsets = kernels.quantile_cuts(
        sketch.starts, sketch.values, sketch.weights, sketch.largest_negative, sketch.n_rows, n_bins
    )
    return cuts.astype(np.float64), offsets


def sparse_wide_notice(n_rows: int, n_used: int, n_stored: float) -> str | None:
    """The one-line warning for training rows that are sparse and wide, or None: `n_used` columns
    hold a value in some row (at least SPARSE_WIDE_COLUMNS), and a row stores n_stored / n_rows of
    them on average (at most SPARSE_WIDE_SHARE of n_used). On such data, tf-idf text, a model of
    100·K stumps weighs at most 100 words per class where a linear model weighs every word:
    the defaults were 5 points of accuracy or more below one-vs-rest LinearSVC on every text set
    measured, and LightGBM's stumps farther below at the same rounds (session 24)."""
    per_row = n_stored / max(n_rows, 1)
    if n_used < SPARSE_WIDE_COLUMNS or per_row > SPARSE_WIDE_SHARE * n_used:
        return None
    return (
        f"multiboost: the training rows are sparse and wide ({n_used} columns used, {per_row:.1f} stored "
        f"values a row, {100 * per_row / n_used:.2f} %), where boosted stumps were 5 or more points of accuracy below "
        "one-vs-rest linear models on every text set measured (docs/benchmarks.md, session 24): for text, "
        "prefer bcd, ppdsparse or stagewise"
    )


def used_columns(cut_offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(used, compact_offsets): the columns the iterations work on, in increasing order, and their
    cut offsets. A column without a cut has one bin, so it offers no split: every stump of
    best_stumps is on a column with a cut, and its zero bin, histogram and stored entries are never
    read. `used` holds those columns and column 0 (best_stumps returns the constant learner as
    column 0's 1[x ≤ +inf], its bin that column's number of cuts), so the iterations' arrays
    (histograms, zero bins, the binned chunk's columns) are indexed by position in `used`
    (compact ids j, column used[j]), their size set by the stored columns, not by n_features. The
    cuts are the same array: a column without a cut owns none of it, so compact column j's cuts are
    cuts[compact_offsets[j]:compact_offsets[j+1]] = column used[j]'s. Increasing order keeps the
    stump search's order, so its ties, and so the models, are the same as on all columns."""
    n_features = len(cut_offsets) - 1
    used = np.flatnonzero(np.diff(cut_offsets) > 0)
    if n_features and (len(used) == 0 or used[0] != 0):
        used = np.concatenate([[0], used])
    used = used.astype(np.int64)
    return used, np.append(cut_offsets[used], cut_offsets[n_features]).astype(np.int64)


def zero_bins_of(cuts: np.ndarray, cut_offsets: np.ndarray) -> np.ndarray:
    """The bin of the value 0 per feature: how many of its (sorted) cuts are below 0, i.e.
    np.searchsorted(feature f's cuts, 0.0), for every feature at once."""
    below = np.zeros(len(cuts) + 1, dtype=np.int64)
    np.cumsum(cuts < 0, out=below[1:])
    return below[cut_offsets[1:]] - below[cut_offsets[:-1]]


# -- chunk tasks ---------------------------------------------------------------------------


class HistogramSums(NamedTuple):
    """A chunk's share of the per-(feature, bin, class) histograms of g (stored entries),
    the per-(feature, class) sums over stored entries, and the per-class totals of g; with
    choice="gain" the same three of g's own-class part (g_c[i] on the rows of class c, 0
    elsewhere: V₊'s share of the rows of class c), else None."""

    bins: np.ndarray
    stored: np.ndarray
    totals: np.ndarray
    own_bins: np.ndarray | None
    own_stored: np.ndarray | None
    own_totals: np.ndarray | None


def _chunk_scores(source: ChunkSource, chunk_id: int, state, version: int) -> np.ndarray:
    if version == 0:
        lo, hi = source.chunk_bounds(chunk_id)
        return np.zeros((hi - lo, source.n_classes))
    return state.read(SCORES, version, chunk_id)


def _bins_task(source, chunk_id, *, state, cuts, cut_offsets, used) -> None:
    """Writes the chunk binned on the used columns (used_columns: `used`, and `cut_offsets` their
    compact offsets), the CSR structure of X with each column replaced by its compact id and each
    stored value by its bin, the entries of other columns left out: `row_starts` v1 (int64),
    `columns` v1 (compact ids, int32) and `bins` v1 (uint16, aligned with them), and the chunk's
    labels (int64) as `labels` v1. The boosting iterations read these, never the store again: the
    stump x_f > cut_b is bin(x_f) > b."""
    chunk = _read_uncached(source, chunk_id)
    X = chunk.X
    columns = np.searchsorted(used, X.indices)  # compact ids (used is increasing); no n_features-sized map
    keep = used[np.minimum(columns, len(used) - 1)] == X.indices
    kept = np.zeros(len(keep) + 1, dtype=np.int64)
    np.cumsum(keep, out=kept[1:])
    columns = columns[keep]
    state.write(ROW_STARTS, 1, chunk_id, kept[X.indptr])
    state.write(COLUMNS, 1, chunk_id, columns.astype(np.int32))
    state.write(BINS, 1, chunk_id, kernels.bin_codes(columns, X.data[keep].astype(np.float64), cuts, cut_offsets))
    state.write(LABELS, 1, chunk_id, chunk.labels.astype(np.int64))


def _histogram_task(
    source, chunk_id, *, state, version, cut_offsets, holdout: float | None, seed: int, own: bool
) -> HistogramSums:
    """The chunk's HistogramSums of g (and of its own-class part when `own`); the fraction
    `holdout` of rows held out (kernels.held_out with `seed`; None: no row) weigh 0. Reads the
    binned chunk (_bins_task), not the store."""
    labels = state.read(LABELS, 1, chunk_id)
    G = kernels.signed_weights(_chunk_scores(source, chunk_id, state, version), labels)
    if holdout is not None:
        lo, hi = source.chunk_bounds(chunk_id)
        G[kernels.held_out(lo, hi, seed, holdout)] = 0.0
    indptr, indices, codes = (state.read(name, 1, chunk_id) for name in (ROW_STARTS, COLUMNS, BINS))
    totals, own_totals = kernels.class_totals(G, labels, own)
    if not own:
        H, stored = kernels.histogram(indptr, indices, codes, G, cut_offsets)
        return HistogramSums(H, stored, totals, None, None, None)
    H, stored, H_own, stored_own = kernels.histograms(indptr, indices, codes, G, labels, cut_offsets, True)
    return HistogramSums(H, stored, totals, H_own, stored_own, own_totals)


def _outputs_task(
    source, chunk_id, *, state, bits: PerSample, version: int, features, bins, polarity, zero_bins
) -> None:
    """Evaluates the new stumps (x_f > cut_b as bin(x_f) > b, on the binned chunk of _bins_task;
    `features` compact ids, `zero_bins` per used column) on the chunk's rows and writes the chunk's
    sign bitset `bits` version `version`: the rows of `bits` (the learners so far) and one packed
    row per new stump."""
    new = kernels.stump_bits(
        state.read(ROW_STARTS, 1, chunk_id), state.read(COLUMNS, 1, chunk_id), state.read(BINS, 1, chunk_id),
        len(zero_bins), features, bins, polarity, zero_bins,
    )  # fmt: skip
    old = state.read(bits.name, bits.version, chunk_id) if bits.written else np.zeros((0, new.shape[1]), np.uint8)
    state.write(BITS, version, chunk_id, np.concatenate([old, new]))


# -- the model -----------------------------------------------------------------------------


@register_model
class BoostedStumpsModel(Model):
    """Scores F_c(x) = Σ_{j: coord_class_j = c} weights_j ħ_{coord_learner_j}(x), with the stump
    ħ_l(x) = signs_l · (1 if (x[features_l] > thresholds_l) == (polarity_l > 0) else lows_l): for
    lows_l = −1 a sign stump, ħ_l(x) = polarity_l · (+1 if x[features_l] > thresholds_l else −1); for
    lows_l = 0 an indicator stump, 1[x[features_l] > thresholds_l] (polarity +1) or
    1[x[features_l] ≤ thresholds_l] (polarity −1; with threshold +inf the constant 1), or with
    signs_l = −1 its negation (stumps="signed"). A model saved without `signs` (before
    2026-11-27's negated indicators) has every sign +1.

    `value_dtype` is the precision of the training values ("float32" for a store, whose values
    are float32; "float64" for the estimators' float64 arrays). Each threshold is a training
    value, so a row exactly at it falls on the side `x ≤ threshold`; with "float32", input values
    are rounded to float32 before the comparison, so float64 input (e.g. the same LIBSVM file read
    by scikit-learn) gets the stumps' outputs of the training rows, not those of the float64
    values on either side of the float32 cut. A model saved without it (before session 21) is
    "float32" when it records a store's featurizer, else "float64"."""

    kind = "boosted_stumps"
    may_hold_plus_infinity = frozenset({"thresholds"})  # +inf: the constant learner (an indicator past the last bin)

    def __init__(
        self,
        *,
        features,
        thresholds,
        polarity,
        lows,
        coord_class,
        coord_learner,
        weights,
        signs=None,
        value_dtype: str = "float64",
        **common,
    ):
        super().__init__(**common)
        if value_dtype not in ("float32", "float64"):
            raise ValueError(f"value_dtype is {value_dtype!r}, expected 'float32' or 'float64'")
        self.value_dtype = value_dtype
        self.lows = np.asarray(lows, dtype=np.int8)
        self.signs = np.ones(len(self.lows), dtype=np.int8) if signs is None else np.asarray(signs, dtype=np.int8)
        self.features = np.asarray(features, dtype=np.int64)
        self.thresholds = np.asarray(thresholds, dtype=np.float64)
        self.polarity = np.asarray(polarity, dtype=np.int8)
        self.coord_class = np.asarray(coord_class, dtype=np.int64)
        self.coord_learner = np.asarray(coord_learner, dtype=np.int64)
        self.weights = np.asarray(weights, dtype=np.float64)
        L, J, K = len(self.features), len(self.weights), len(self.classes_)
        if (
            self.thresholds.shape != (L,)
            or self.polarity.shape != (L,)
            or self.lows.shape != (L,)
            or self.signs.shape != (L,)
        ):
            raise ValueError(
                f"stumps: features, thresholds, polarity, lows and signs differ in length ({L}, "
                f"{self.thresholds.shape}, {self.polarity.shape}, {self.lows.shape}, {self.signs.shape})"
            )
        if self.coord_class.shape != (J,) or self.coord_learner.shape != (J,):
            raise ValueError("coordinates: coord_class, coord_learner and weights differ in length")
        if L and (self.features.min() < 0 or self.features.max() >= self.n_features):
            raise ValueError(f"a stump's feature is outside [0, {self.n_features})")
        if J and (
            self.coord_class.min() < 0
            or self.coord_class.max() >= K
            or self.coord_learner.min() < 0
            or self.coord_learner.max() >= L
        ):
            raise ValueError("a coordinate names a class or learner that does not exist")
        if np.any(np.abs(self.polarity) != 1):
            raise ValueError("a stump's polarity is not ±1")
        if np.any((self.lows != -1) & (self.lows != 0)):
            raise ValueError("a stump's low is not −1 (sign) or 0 (indicator)")
        if np.any(np.abs(self.signs) != 1):
            raise ValueError("a stump's sign is not ±1")

    def _scores(self, X: sp.csr_matrix) -> np.ndarray:
        values = X.data.astype(self.value_dtype).astype(np.float64)  # the training values' precision
        return kernels.stump_scores(
            X.indptr,
            X.indices,
            values,
            self.n_features,
            self.features,
            self.thresholds,
            self.polarity,
            self.coord_class,
            self.coord_learner,
            self.weights,
            len(self.classes_),
            self.lows,
            self.signs,
        )

    def _arrays(self):
        return {
            "features": self.features,
            "thresholds": self.thresholds,
            "polarity": self.polarity,
            "lows": self.lows,
            "signs": self.signs,
            "coord_class": self.coord_class,
            "coord_learner": self.coord_learner,
            "weights": self.weights,
        }

    def _extra(self):
        return {"value_dtype": self.value_dtype}

    @classmethod
    def _from_saved(cls, common, arrays, extra):
        names = ("features", "thresholds", "polarity", "lows", "coord_class", "coord_learner", "weights")
        if "lows" not in arrays:
            raise ValueError("a boosted_stumps model saved before stumps had lows (2026-11-27); retrain it")
        value_dtype = extra.get("value_dtype", "float32" if common.get("featurizer") else "float64")
        return cls(**{k: arrays[k] for k in names}, signs=arrays.get("signs"), value_dtype=value_dtype, **common)


# -- the solver ----------------------------------------------------------------------------


@dataclasses.dataclass(kw_only=True)
class MultiBoostState(SolverState):
    cuts: np.ndarray  # bin cuts, all features (bin_cuts)
    used: np.ndarray  # the columns the iterations work on (used_columns): compact id j is column used[j]
    cut_offsets: np.ndarray  # compact column j's cuts: cuts[cut_offsets[j]:cut_offsets[j+1]]
    zero_bins: np.ndarray  # the bin of the value 0 per compact column
    learner_feature: np.ndarray  # stumps so far (L,): their columns (original ids)
    learner_threshold: np.ndarray
    learner_polarity: np.ndarray
    learner_low: np.ndarray  # per stump, its value where it is not 1: −1 (sign) or 0 (indicator)
    learner_sign: np.ndarray  # per stump, −1 for a negated indicator (stumps="signed"), else +1
    coord_class: np.ndarray  # master problem coordinates (J,): class and learner of w_j
    coord_learner: np.ndarray
    weights: np.ndarray  # w (J,), ≥ 0
    bits: PerSample  # the learners' sign bits per chunk, packed (L × ⌈rows/8⌉ uint8)
    labels: PerSample  # the labels per chunk (int64), for the master problem
    bins: PerSample  # the bin of every stored entry per chunk (uint16, aligned with the chunk's X.data)
    columns: PerSample  # the compact column of each kept entry (int32): with row_starts and bins, the binned chunk
    row_starts: PerSample  # the chunk's CSR row starts over the kept entries (int64)
    scores: PerSample  # F (rows × K) per chunk, from weights and outputs
    objective: float = 1.0  # (2)/C at the current weights (1 at w = 0)
    violation: float = float("inf")  # max_c (C/p)·edge_c − 1 of the last subproblem (4)/(6)
    kkt: float | None = None  # max_j θ_j (16) at FCD's last working-set update (None: tau_max = 1, never computed)
    converged: bool = False
    phase: int = 0  # lam="auto": 0..len(LAM_GRID)-1 fit LAM_GRID[phase] on the rows not held out; then the refit
    phase_start: int = 0  # state.step when the phase began (each phase has max_iter iterations)
    validation_errors: list[float] = dataclasses.field(default_factory=list)  # lam="auto": held-out error per grid lam
    # early stopping: the held-out loss (the loss term of (2) over the held-out pairs) and the best iteration so far
    heldout_loss: float = 1.0  # at the current weights (1 at w = 0)
    heldout_error: float = 1.0  # the held-out error rate at the current weights
    best_loss: float = float("inf")  # the held-out loss and error of the best iteration so far (validation_score;
    best_error: float = float("inf")  # the first iteration's are the first best)
    best_iteration: int = 0  # the iteration that reached it (0: before the first iteration)
    best_learners: int = 0  # the learners then: the first best_learners of learner_*
    best_weights: np.ndarray | None = None  # the weights then, of the first len(best_weights) coordinates (None: off)
    stopped_early: bool = False  # n_iter_no_change iterations passed without a lower held-out loss
    valid_scores: np.ndarray | None = None  # F on the --valid store's rows (rows × K) when early stopping scores it


@register_solver
class MultiBoostSolver(Solver[MultiBoostState]):
    """MultiBoostcw (Lin et al. 2012): boosted decision stumps, one per class per iteration (or
    shared), by column generation with fast coordinate descent (Algorithms 1 and 2). Suits dense
    tables of few columns (UCI-style, pixels), where it matched or beat LightGBM's stumps; on sparse
    tf-idf text it was 5 or more points of accuracy below one-vs-rest linear models (as were LightGBM's
    stumps), and training says so once: use bcd, ppdsparse or stagewise there.

    Each step is one boosting iteration: a histogram pass, the exact stumps of (4) (or (6)),
    a pass evaluating them, and FCD on the master problem (2); see the module docstring."""

    name = "multiboost"
    row_state_arrays = 2  # a chunk task's scores F and signed weights G (_histogram_task)
    Params = MultiBoostParams
    State = MultiBoostState

    def __init__(self, params: MultiBoostParams):
        super().__init__(params)
        self.params: MultiBoostParams = params

    # -- protocol -------------------------------------------------------------------------
    def check_source(self, source: ChunkSource) -> None:
        if source.multilabel:
            raise ConfigError(
                "multiboost is multiclass only (its margins (1) compare one true class with each other "
                "class); the store is multilabel: use stagewise, bcd or ppdsparse"
            )
        if source.n_classes < 2:
            raise ConfigError(f"multiboost needs at least 2 classes; the store has {source.n_classes}")

    def init(self, ctx: Context) -> MultiBoostState:
        source = ctx.source
        sketch = ctx.engine.map_reduce(
            _sketch_task, source, range(source.n_chunks), desc="multiboost: bins", size=8 * self.params.n_bins
        )
        cuts, all_offsets = bin_cuts(sketch, self.params.n_bins)
        used, offsets = used_columns(all_offsets)
        self.check_histogram_memory(source, offsets)
        notice = sparse_wide_notice(source.n_rows, int(np.count_nonzero(np.diff(all_offsets))), sketch.weights.sum())
        if notice:
            log.warning(notice)
        ctx.engine.map(
            _bins_task,
            source,
            range(source.n_chunks),
            desc="multiboost: bin codes",
            state=ctx.chunk_state,
            cuts=cuts,
            cut_offsets=offsets,
            used=used,
        )
        zero_bins = zero_bins_of(cuts, offsets)
        if self.stops_early(source) and ctx.valid is None:
            fraction = self.params.validation_fraction
            held = sum(
                int(np.count_nonzero(kernels.held_out(*source.chunk_bounds(i), self.params.random_state, fraction)))
                for i in range(source.n_chunks)
            )
            if held == 0 or held == source.n_rows:
                raise ConfigError(
                    f"multiboost: early_stopping with validation_fraction={fraction} holds out {held} of the "
                    f"{source.n_rows} training rows; set a validation_fraction that leaves rows on both sides, or "
                    "pass a validation store (train --valid)"
                )
        return MultiBoostState(
            cuts=cuts,
            used=used,
            cut_offsets=offsets,
            zero_bins=zero_bins,
            learner_feature=np.zeros(0, dtype=np.int64),
            learner_threshold=np.zeros(0),
            learner_polarity=np.zeros(0, dtype=np.int8),
            learner_low=np.zeros(0, dtype=np.int8),
            learner_sign=np.zeros(0, dtype=np.int8),
            coord_class=np.zeros(0, dtype=np.int64),
            coord_learner=np.zeros(0, dtype=np.int64),
            weights=np.zeros(0),
            bits=PerSample(BITS, 0, written=False),
            labels=PerSample(LABELS, 1),
            bins=PerSample(BINS, 1),
            columns=PerSample(COLUMNS, 1),
            row_starts=PerSample(ROW_STARTS, 1),
            scores=PerSample(SCORES, 0, written=False),
            best_weights=np.zeros(0) if self.stops_early(source) else None,
            valid_scores=(
                np.zeros((ctx.valid.n_rows, source.n_classes)) if self.stops_early(source) and ctx.valid else None
            ),
        )

    def check_histogram_memory(self, source: ChunkSource, cut_offsets: np.ndarray) -> None:
        """Refuses a run whose histograms cannot fit in the memory available now, and warns when
        they take more than half of it, before the first iteration: each histogram pass sums,
        per class, (Σ_f bins_f + used columns) floats of H and as many of the stored entries' sums
        (HistogramSums; twice with rule gain or decrease, for g's own-class part), which the
        driver holds for the stump search: that is the lower bound, bins × K floats that train's
        check (from the manifest) cannot count. The estimate adds, with more than one chunk, the
        two partial sums beside their sum (engine.tree_sum), and a chunk task's scores F and
        signed weights G (row_state_arrays)."""
        K, used = source.n_classes, len(cut_offsets) - 1
        histograms = 2 if self.params.rule != "edge" else 1
        rows = int(cut_offsets[-1]) + used
        lower = 8 * K * (rows + used) * histograms
        copies = 3 if source.n_chunks > 1 else 1
        lo, hi = source.chunk_bounds(0)  # the largest chunk (only the last may be shorter)
        estimate = copies * lower + 8 * (hi - lo) * K * self.row_state_arrays
        what = f"histograms ({histograms} of {rows} bins × {K} classes over {used} used columns"
        check_state_memory(
            getattr(source, "path", "the training data"),
            self.name,
            (lower, what + ")"),
            (estimate, what + f", {copies} at once, and a chunk's scores)"),
            f"train with a smaller -p n_bins (now {self.params.n_bins}), or with --solver ppdsparse, or use fewer "
            "classes or a machine with more memory",
            available_memory(),
            log,
        )

    def stops_early(self, source: ChunkSource) -> bool:
        """Whether the run stops early (early_stopping; "auto": more than AUTO_EARLY_STOPPING_ROWS rows)."""
        on = self.params.early_stopping
        return on is True or (on == "auto" and source.n_rows > AUTO_EARLY_STOPPING_ROWS)

    def reads_valid(self, source: ChunkSource) -> bool:
        """Early stopping scores the validation store when there is one."""
        return self.stops_early(source)

    def check_resume(self, ctx: Context, state: MultiBoostState) -> None:
        if self.stops_early(ctx.source) and (state.valid_scores is None) != (ctx.valid is None):
            raise ConfigError(
                "multiboost: the checkpoint's early stopping held out "
                f"{'the rows of a validation store' if state.valid_scores is not None else 'training rows'}, this "
                "run would hold out the other; resume with the run's own --valid, or start over with --overwrite"
            )
        if state.step - state.phase_start > self.params.max_iter:
            raise ConfigError(
                f"multiboost: the checkpoint is at iteration {state.step - state.phase_start}, past "
                f"max_iter={self.params.max_iter}; raise -p max_iter or start over with --overwrite"
            )

    def grid(self) -> tuple[float, ...]:
        """The lam values fitted on the rows not held out before the final fit (lam="auto")."""
        return LAM_GRID if self.params.lam == "auto" else ()

    def lam(self, state: MultiBoostState) -> float:
        """The phase's lam: a grid value while choosing, then the chosen one (the first of the
        lowest held-out error: the smaller C on ties), or the fixed lam."""
        grid = self.grid()
        if state.phase < len(grid):
            return grid[state.phase]
        if grid:
            return grid[int(np.argmin(state.validation_errors))]
        return float(self.params.lam)

    def _phase_done(self, state: MultiBoostState) -> bool:
        return state.converged or state.step - state.phase_start >= self.params.max_iter

    def finished(self, state: MultiBoostState) -> bool:
        return state.stopped_early or (state.phase == len(self.grid()) and self._phase_done(state))

    def converged(self, state: MultiBoostState) -> bool:
        """Column generation's test held; with update="large_c" (eq. 13, the C → ∞ limit, where the
        dual constraints (3b) give no finite test) the run is the paper's fixed schedule of
        max_iter stage-wise rounds, converged once they are done."""
        return state.converged or state.stopped_early or (self.params.update == "large_c" and self.finished(state))

    def max_steps(self, state: MultiBoostState) -> int:
        """max_iter boosting iterations per phase (an upper bound: column generation may stop first)."""
        if self.finished(state):
            return state.step
        return state.phase_start + (len(self.grid()) + 1 - state.phase) * self.params.max_iter

    def not_converged_reason(self, state: MultiBoostState) -> str:
        return (
            f"stopped at max_iter={self.params.max_iter} with a dual constraint (3b) violated by "
            f"{state.violation:.3g} > tol={self.params.tol}"
        )

    def step(self, ctx: Context, state: MultiBoostState) -> dict[str, Any]:
        """One boosting iteration at the phase's lam; with lam="auto", a phase on the rows not
        held out that ends (converged, or max_iter iterations) records the held-out error and
        starts the next phase from no learners."""
        lam = self.lam(state)
        choosing = state.phase < len(self.grid())
        fields = {**self._boost(ctx, state, lam, choosing), "lam": lam}
        if state.best_weights is not None and "heldout_loss" in fields:
            self._track_best(state)
            fields["best_iteration"] = state.best_iteration
        if choosing and self._phase_done(state):
            error = self._held_out_error(ctx, state)
            fields["validation_error"] = error
            state.validation_errors = [*state.validation_errors, error]
            self._next_phase(state)
        return fields

    def _track_best(self, state: MultiBoostState) -> None:
        """Early stopping after an iteration: a better held-out score makes this iteration the best
        (its learner count and weights kept: for tau_max = 1 the weights of earlier coordinates
        never change, so the best model is a prefix of the current one; for tau_max ≥ 2 FCD moves
        them, so they are copied); otherwise the run stops once n_iter_no_change iterations have
        passed since the best one. Better: with validation_score="loss" a held-out loss below the
        best by more than validation_tol (relative); with "error" a lower held-out error, or the
        same error with such a loss."""
        p = self.params
        iteration = state.step - state.phase_start
        lower_loss = state.heldout_loss < state.best_loss * (1.0 - p.validation_tol)
        if p.validation_score == "error":
            better = state.heldout_error < state.best_error or (state.heldout_error == state.best_error and lower_loss)
        else:
            better = lower_loss
        if better:
            state.best_loss, state.best_error, state.best_iteration = state.heldout_loss, state.heldout_error, iteration
            state.best_learners, state.best_weights = len(state.learner_feature), state.weights.copy()
        elif iteration - state.best_iteration >= p.n_iter_no_change:
            state.stopped_early = True

    def _holdout(self, ctx: Context, choosing: bool) -> float | None:
        """The fraction of training rows held out of the fit: HOLDOUT while lam="auto" chooses C,
        validation_fraction for early stopping without a validation store, else None (none)."""
        if choosing:
            return HOLDOUT
        if self.stops_early(ctx.source) and ctx.valid is None:
            return self.params.validation_fraction
        return None

    def _held_out(self, source: ChunkSource, chunk_id: int, fraction: float | None) -> np.ndarray | None:
        """The chunk's rows held out (bool), or None when no row is."""
        if fraction is None:
            return None
        lo, hi = source.chunk_bounds(chunk_id)
        return kernels.held_out(lo, hi, self.params.random_state, fraction)

    def _held_out_error(self, ctx: Context, state: MultiBoostState) -> float:
        """The error rate of argmax_c F_c on the held-out rows (F: the phase's final scores)."""
        source = ctx.source
        wrong, total = 0, 0
        for i in range(source.n_chunks):
            lo, hi = source.chunk_bounds(i)
            held = kernels.held_out(lo, hi, self.params.random_state, HOLDOUT)
            labels = ctx.chunk_state.read(LABELS, 1, i)
            F = _chunk_scores(source, i, ctx.chunk_state, state.scores.version)
            wrong += int(np.count_nonzero(np.argmax(F[held], axis=1) != labels[held]))
            total += int(np.count_nonzero(held))
        return wrong / max(total, 1)

    @staticmethod
    def _next_phase(state: MultiBoostState) -> None:
        state.phase += 1
        state.phase_start = state.step
        state.learner_feature = np.zeros(0, dtype=np.int64)
        state.learner_threshold = np.zeros(0)
        state.learner_polarity = np.zeros(0, dtype=np.int8)
        state.learner_low = np.zeros(0, dtype=np.int8)
        state.learner_sign = np.zeros(0, dtype=np.int8)
        state.coord_class = np.zeros(0, dtype=np.int64)
        state.coord_learner = np.zeros(0, dtype=np.int64)
        state.weights = np.zeros(0)
        state.bits = PerSample(BITS, 0, written=False)
        state.scores = PerSample(SCORES, 0, written=False)
        state.objective, state.violation, state.kkt, state.converged = 1.0, float("inf"), None, False

    def _boost(self, ctx: Context, state: MultiBoostState, lam: float, choosing: bool) -> dict[str, Any]:
        """Steps 1–5 of the module docstring, on the rows not held out when `choosing`."""
        p, source, engine = self.params, ctx.source, ctx.engine
        K = source.n_classes
        fraction = self._holdout(ctx, choosing)
        held = [self._held_out(source, i, fraction) for i in range(source.n_chunks)]
        m = source.n_rows - sum(int(np.count_nonzero(h)) for h in held if h is not None)
        C_over_p = 1.0 / (lam * m * (K - 1))

        # 1-2. histograms of the dual weights, and the most violated constraint of each class
        sums = engine.map_reduce(
            _histogram_task,
            source,
            range(source.n_chunks),
            desc=f"multiboost: histograms {state.step + 1}",
            state=ctx.chunk_state,
            version=state.scores.version,
            cut_offsets=state.cut_offsets,
            holdout=fraction,
            seed=p.random_state,
            own=p.rule != "edge",
        )
        # the pass's sums are this step's own arrays: their zero bins are filled in place
        zero_rows = zero_bin_rows(state.cut_offsets, state.zero_bins)
        H = fill_zero_bins(sums.bins, sums.stored, sums.totals, zero_rows)
        if p.rule != "edge":
            H_own = fill_zero_bins(sums.own_bins, sums.own_stored, sums.own_totals, zero_rows)
            own_totals = sums.own_totals
        else:
            H_own, own_totals = np.zeros((0, K)), np.zeros(0)
        pool = (p.stumps in ("sign", "both", "all"), p.stumps != "sign", p.stumps in ("signed", "all"))
        feature, bin_, polarity, edge, low, sign, largest = kernels.best_stumps(
            H,
            sums.totals,
            state.cut_offsets,
            *pool,
            H_own,
            own_totals,
            p.rule == "decrease",
            C_over_p,
            p.update == "large_c",
            p.learning_rate,
        )
        classes = np.flatnonzero(
            feature >= 0
        )  # a class with no splittable feature (or learner that moves) adds nothing
        if p.rule == "decrease":  # Algorithm 1's stop: the most violated constraint (4) over the whole pool
            violation = float(C_over_p * largest.max() - 1.0) if np.any(np.isfinite(largest)) else -1.0
        else:
            violation = float(C_over_p * edge[classes].max() - 1.0) if len(classes) else -1.0
        previous = state.objective
        state.violation = violation
        if violation <= p.tol or (p.rule == "decrease" and not len(classes)):  # decrease: no learner lowers (2)
            state.step += 1
            state.converged = True
            return {"objective": state.objective, "violation": violation, "learners": len(state.learner_feature)}
        if p.weak_learners == "shared":
            classes = classes[np.argmax(edge[classes])][None]  # (6): the best (stump, class) pair
        new_compact = feature[classes]  # compact ids (used_columns); the model records the columns
        new_features = state.used[new_compact]
        inside = bin_[classes] < state.cut_offsets[new_compact + 1] - state.cut_offsets[new_compact]  # < its cuts
        new_thresholds = np.full(len(classes), np.inf)  # an indicator split after the last bin: the constant ħ ≡ 1
        new_thresholds[inside] = state.cuts[state.cut_offsets[new_compact[inside]] + bin_[classes][inside]]
        new_polarity = polarity[classes]

        # 3. the new learners' outputs on every row, as sign bits appended to each chunk's bitset
        bits = PerSample(BITS, state.step + 1)
        engine.map(
            _outputs_task,
            source,
            range(source.n_chunks),
            desc=f"multiboost: outputs {state.step + 1}",
            state=ctx.chunk_state,
            bits=state.bits,
            version=bits.version,
            features=new_compact,
            bins=bin_[classes],
            polarity=new_polarity,
            zero_bins=state.zero_bins,
        )
        state.bits = bits
        L0, J0 = len(state.learner_feature), len(state.weights)
        state.learner_feature = np.concatenate([state.learner_feature, new_features])
        state.learner_threshold = np.concatenate([state.learner_threshold, new_thresholds])
        state.learner_polarity = np.concatenate([state.learner_polarity, new_polarity])
        state.learner_low = np.concatenate([state.learner_low, low[classes]])
        state.learner_sign = np.concatenate([state.learner_sign, sign[classes]])
        if p.weak_learners == "shared":
            new_class, new_learner = np.arange(K), np.full(K, L0)
        else:
            new_class, new_learner = classes, L0 + np.arange(len(classes))
        state.coord_class = np.concatenate([state.coord_class, new_class])
        state.coord_learner = np.concatenate([state.coord_learner, new_learner])
        state.weights = np.concatenate([state.weights, np.zeros(len(new_class))])

        # 4. FCD on the master problem over all learners so far, chunk by chunk (F updated with the weights)
        start = state.weights[:J0].copy()
        rng = (  # the same draws in every phase; stage-wise FCD (tau_max = 1) draws none (a generator costs ~50 µs)
            np.random.default_rng([p.random_state, state.step - state.phase_start]) if p.tau_max > 1 else None
        )
        with Master(K, int(p.master_memory_mb * 2**20), state.learner_low, signs=state.learner_sign) as master:
            for i in range(source.n_chunks):
                master.add(
                    ctx.chunk_state.read(LABELS, 1, i),
                    ctx.chunk_state.read(BITS, state.bits.version, i),
                    _chunk_scores(source, i, ctx.chunk_state, state.scores.version),
                    held[i],
                )
            sweeps, kkt = fcd(
                master, state.coord_class, state.coord_learner, state.weights, np.arange(J0, len(state.weights)),
                C_over_p, p.tol, p.tau_max, p.update == "large_c", p.learning_rate, rng,
            )  # fmt: skip

            # 5. the scores, written per chunk, and the objective from them
            state.step += 1
            loss = 0.0
            heldout = np.zeros(3)  # held-out rows: Σ R (their pairs' loss), wrong argmax, rows
            for i in range(source.n_chunks):
                labels, F = master.scores(i)
                ctx.chunk_state.write(SCORES, state.step, i, F)
                R = kernels.margins(F, labels)[1]
                rows_held = held[i]
                loss += float(R.sum() if rows_held is None else R[~rows_held].sum())
                if rows_held is not None and not choosing:
                    heldout += _loss_and_errors(F[rows_held], labels[rows_held], R[rows_held])
        state.scores = PerSample(SCORES, state.step)
        if state.best_weights is not None:  # early stopping: the loss on the held-out rows or the validation store
            if state.valid_scores is not None:
                heldout = self._score_valid(ctx, state, state.weights - np.append(start, np.zeros(len(new_class))))
            state.heldout_loss = float(heldout[0] / max(heldout[2] * (K - 1), 1.0))
            state.heldout_error = float(heldout[1] / max(heldout[2], 1.0))
        state.objective = lam * float(state.weights.sum()) + loss / (m * (K - 1))
        state.kkt = kkt
        if p.cg_tol > 0 and previous - state.objective <= p.cg_tol * abs(previous):
            state.converged = True
        fields = {
            "objective": state.objective,
            "violation": violation,
            "sweeps": sweeps,
            "learners": len(state.learner_feature),
            "nonzero_weights": int(np.count_nonzero(state.weights)),
        }
        if state.best_weights is not None:
            fields.update(heldout_loss=state.heldout_loss, heldout_error=state.heldout_error)
        return fields if kkt is None else {**fields, "kkt": kkt}

    def _score_valid(self, ctx: Context, state: MultiBoostState, change: np.ndarray) -> np.ndarray:
        """Brings the validation store's scores (state.valid_scores) to the new weights, F_c +=
        Σ_j change_j·ħ_{l_j} over the coordinates that moved, from its rows' raw values (rounded to
        the training values' precision, as the model scores them; only the moved learners are
        evaluated), and returns (Σ R, wrong argmax, rows) over its rows."""
        valid, K = ctx.valid, ctx.source.n_classes
        assert valid is not None and state.valid_scores is not None
        moved = np.flatnonzero(change)
        needed, learners = np.unique(state.coord_learner[moved], return_inverse=True)
        scores = state.valid_scores.copy()
        totals = np.zeros(3)
        for i in range(valid.n_chunks):
            lo, hi = valid.chunk_bounds(i)
            chunk = valid.read_chunk(i)
            if len(moved):
                X = chunk.X
                scores[lo:hi] += kernels.stump_scores(
                    X.indptr, X.indices, X.data.astype(str(ctx.source.value_dtype)).astype(np.float64),
                    valid.n_features, state.learner_feature[needed], state.learner_threshold[needed],
                    state.learner_polarity[needed], state.coord_class[moved], learners.astype(np.int64),
                    change[moved], K, state.learner_low[needed], state.learner_sign[needed],
                )  # fmt: skip
            labels = chunk.labels.astype(np.int64)
            totals += _loss_and_errors(scores[lo:hi], labels, kernels.margins(scores[lo:hi], labels)[1])
        state.valid_scores = scores
        return totals

    def to_model(self, ctx: Context, state: MultiBoostState) -> BoostedStumpsModel:
        """The model of the weights now; with early stopping, of the best iteration so far (its
        learners and coordinates, a prefix of the state's, and its weights)."""
        source = ctx.source
        L, J, weights = len(state.learner_feature), len(state.weights), state.weights
        early = {}
        if state.best_weights is not None:
            L, J, weights = state.best_learners, len(state.best_weights), state.best_weights
            early = {
                "best_iteration": state.best_iteration,
                "heldout_loss": state.best_loss,
                "heldout_error": state.best_error,
                "stopped_early": state.stopped_early,
            }
        return BoostedStumpsModel(
            features=state.learner_feature[:L],
            thresholds=state.learner_threshold[:L],
            polarity=state.learner_polarity[:L],
            coord_class=state.coord_class[:J],
            coord_learner=state.coord_learner[:J],
            weights=weights,
            lows=state.learner_low[:L],
            signs=state.learner_sign[:L],
            value_dtype=str(source.value_dtype),
            classes=source.classes,
            n_features=source.n_features,
            multilabel=False,
            solver=self.name,
            params=self.params.model_dump(),
            info={
                "converged": self.converged(state),
                "iterations": state.step - state.phase_start,
                "lam": self.lam(state),
                **({"validation_errors": dict(zip(self.grid(), state.validation_errors))} if self.grid() else {}),
                "learners": L,
                "objective": state.objective,
                **early,
            },
        )


def zero_bin_rows(cut_offsets: np.ndarray, zero_bins: np.ndarray) -> np.ndarray:
    """The histogram row of each (compact) feature's zero bin: feature f's bins are rows
    cut_offsets[f] + f + b (kernels.histogram)."""
    return cut_offsets[:-1] + np.arange(len(cut_offsets) - 1) + zero_bins


def fill_zero_bins(bins: np.ndarray, stored: np.ndarray, totals: np.ndarray, zero_rows: np.ndarray) -> np.ndarray:
    """`bins` (the stored entries' per-(feature, bin, class) sums) made the sums over all entries, in
    place: each feature's zero bin (row zero_rows[f], zero_bin_rows) gets the implicit zeros' share,
    the column total minus the stored sum (totals − stored[f]). Returns `bins`."""
    bins[zero_rows] += totals[None, :] - stored
    return bins


def _loss_and_errors(F: np.ndarray, labels: np.ndarray, R: np.ndarray) -> np.ndarray:
    """(Σ_i R_i, rows whose argmax_c F_c is not their label, rows) of some rows: R_i = Σ_{y≠y_i}
    exp(F_y − F_{y_i}) (kernels.margins), so Σ R / (rows·(K − 1)) is the loss term of (2) on them."""
    return np.array([float(R.sum()), float(np.count_nonzero(np.argmax(F, axis=1) != labels)), float(len(labels))])
