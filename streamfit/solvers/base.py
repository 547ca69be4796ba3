"""The solver protocol, and the registry the CLI and config look solvers up in.

A solver is its parameters (`Params`), a typed state (`State`, a dataclass whose fields are
exactly what a checkpoint holds) and five methods:

    init(ctx)            -> State   the state before the first step (may run passes over the data)
    step(ctx, state)     -> dict    one unit of the paper's algorithm (a stage, an outer iteration,
                                    a group of features or classes, a boosting round); advances
                                    `state.step` by one and returns the fields to log for it
    finished(state)      -> bool    no step is left (converged, or the budget is spent)
    converged(state)     -> bool    the stopping test held (False at a budget: the driver warns)
    to_model(ctx, state) -> Model   the model the state stands for (also mid-run, for validation)

Four optional methods: `check_source(source)` refuses a store the solver cannot train on before
any work starts, `max_steps(state)` gives the step budget that progress lines count against, and
`uses_workers(source)` says whether the fit runs chunk tasks at all (`streamfit train`'s `auto`
engine starts no cluster for a fit that runs in the driver), and `work(source)` estimates the
fit's rounds of tasks and their seconds, from which the auto engine predicts which engine is faster.

`streamfit.solvers.driver.run` owns everything around the steps: the checkpoints (every k
steps, at most as often as `checkpoint_interval` allows), the time limit, resume with verification, the metrics log, validation, the convergence
warning. A solver module therefore holds no loop of its own, and a new solver needs only this
protocol. `check_resume(ctx, state)` may refuse a restored state (a budget already passed,
an incompatible cut of the work).

State fields, by their annotation (the checkpoint records this schema and a resume refuses a
checkpoint whose schema differs):
- `np.ndarray` (or `np.ndarray | None`): a driver-side array, saved in the step's arrays.npz;
- `list[np.ndarray]`: append-only arrays (one per stage, say), each written once (C-ordered:
  the driver gives the entry in the list that layout as it writes it) to the per-sample store,
  so a checkpoint never rewrites old entries;
- `PerSample` (or `PerSample | None`): a version of a per-sample array that chunk tasks read and
  write in `ctx.chunk_state` (one file per data chunk); the driver verifies and keeps it;
- anything else (int, float, bool, str, tuples, lists and dicts of them): JSON in meta.json.
Objects that are not state (caches, a running iterator) live on the solver instance, and must
not change a bit of the result when they are rebuilt after a resume.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable
from typing import Annotated, Any, ClassVar, Generic, Literal, TypeVar

import annotated_types
import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

from streamfit.checkpoint import ChunkState
from streamfit.engine import Engine, Work
from streamfit.errors import StreamfitError
from streamfit.model import Model
from streamfit.store import ChunkSource

SOLVERS: dict[str, type[Solver]] = {}
GIB = 2**30


def available_memory() -> int:
    """Bytes of memory available on this machine now (psutil's `available`: free memory plus what
    the kernel can reclaim without swapping)."""
    import psutil  # only the memory checks need it (its import is 20-60 ms)

    return psutil.virtual_memory().available


def check_state_memory(
    where: str, solver: str, lower: tuple[int, str], estimate: tuple[int, str], advice: str, available: int, log
) -> None:
    """The memory checks' verdict on a run's state: StreamfitError when lower = (bytes, of what), a
    bound that the run needs at least, exceeds the `available` bytes, and a warning on `log` when
    estimate = (bytes, of what), what it is expected to hold at once (≥ lower), takes more than
    half of them (the warning says "more than the … available" when it takes more than all). `where`: the store; `advice`: what to do instead."""
    if lower[0] > available:
        raise StreamfitError(
            f"{where}: {solver} needs at least {lower[0] / GIB:.3g} GiB of {lower[1]}, more than the "
            f"{available / GIB:.3g} GiB available on this machine: {advice}"
        )
    if 2 * estimate[0] > available:
        log.warning(
            "%s: %s needs about %.3g GiB of %s, more than %s %.3g GiB available on this machine; %s",
            where,
            solver,
            estimate[0] / GIB,
            estimate[1],
            "the" if estimate[0] > available else "half of the",
            available / GIB,
            advice,
        )


class SolverParams(BaseModel):
    """Parameters shared by every solver. `lam` is λ with the loss averaged over samples (1/n),
    as the papers write their objectives; each solver declares its own type (a number, or also
    None or a word for data-driven choices) and default. No float parameter may be NaN or infinite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)
    lam: float | str | None = Field(1e-4, description="λ, the weight of the penalty")
    tol: float = Field(1e-4, description="tolerance of the stopping test")
    max_iter: int = Field(50, description="cap on the iterations")
    random_state: int = Field(0, ge=0, description="seed of the solver's random draws (a non-negative integer)")

    def model_settings(self) -> dict:
        """The parameters that determine the model: all but those declared with
        `json_schema_extra={"affects_model": False}` (how the work is spread, such as threads, or
        a budget the iteration never reads). A checkpoint records these, and resume requires
        them unchanged."""
        execution = {
            name
            for name, f in type(self).model_fields.items()
            if isinstance(f.json_schema_extra, dict) and f.json_schema_extra.get("affects_model") is False
        }
        return self.model_dump(exclude=execution)


_BOUNDS = ((annotated_types.Ge, ">="), (annotated_types.Gt, ">"), (annotated_types.Le, "<="), (annotated_types.Lt, "<"))


def allowed_values(field: FieldInfo) -> str:
    """What a parameter accepts, in words: "one of identity, softmax", "int >= 1",
    "float > 0, or None", "true or false"."""
    union = isinstance(field.annotation, types.UnionType) or typing.get_origin(field.annotation) is typing.Union
    kinds = typing.get_args(field.annotation) if union else (field.annotation,)
    words = []
    for kind in kinds:
        metadata = field.metadata
        if typing.get_origin(kind) is Annotated:  # a member with its own bounds: Annotated[float, Field(ge=0)]
            kind, *extra = typing.get_args(kind)
            metadata = [m for e in extra for m in (e.metadata if isinstance(e, FieldInfo) else [e])]
        if kind is type(None):
            continue
        if typing.get_origin(kind) is Literal:
            words.append("one of " + ", ".join(str(v) for v in typing.get_args(kind)))
        elif kind is bool:
            words.append("true or false")
        else:
            bounds = [
                f"{sign} {getattr(m, next(iter(type(m).__dataclass_fields__)))}"
                for m in metadata
                for cls, sign in _BOUNDS
                if isinstance(m, cls)
            ]
            words.append(" ".join([getattr(kind, "__name__", str(kind)), ", ".join(bounds)]).strip())
    return ", or ".join(words) + (", or None" if type(None) in kinds else "")


def parameter_lines(params: type[SolverParams]) -> list[str]:
    """One line per parameter, the text of `streamfit train --list-solvers`:
    `name (default D) [allowed values]: description`."""
    return [
        f"{name} (default {f.default}) [{allowed_values(f)}]: {f.description}"
        for name, f in params.model_fields.items()
    ]


@dataclasses.dataclass(frozen=True)
class PerSample:
    """Version `version` of the per-sample array `name` in the run's ChunkState: one array per
    data chunk, aligned with the chunk's rows. Version 0 is a solver's initial value, which it
    may leave unwritten (then `written` is False and nothing is verified)."""

    name: str
    version: int
    written: bool = True


@dataclasses.dataclass(kw_only=True)
class SolverState:
    """The fields every state has: `step`, the number of steps taken (0 after init)."""

    step: int = 0


@dataclasses.dataclass
class Context:
    """What a solver works on: the training data, the engine that runs chunk tasks, and the
    per-sample state store that those tasks read and write."""

    source: ChunkSource
    engine: Engine
    chunk_state: ChunkState
    valid: ChunkSource | None = None  # the validation store (train --valid) for a solver that reads it (reads_valid)
    class_rows: np.ndarray | None = None  # multiclass: the training rows of each class (class_rows); else None


StateT = TypeVar("StateT", bound=SolverState)


class Solver(Generic[StateT]):
    """A training method (see the module docstring for the protocol)."""

    name: ClassVar[str]
    Params: ClassVar[type[SolverParams]] = SolverParams
    State: ClassVar[type[SolverState]] = SolverState
    mid_run_models: ClassVar[bool] = True  # False: a step's model before the last means nothing (classes
    # untrained, say), so validation runs on the last step only, whatever valid_every
    dense_weights: ClassVar[bool] = False  # True: the driver holds dense float64 weights, n_features × n_classes
    # (train's memory check counts them; other solvers are counted at 8 bytes per feature)
    row_state_arrays: ClassVar[int] = 0  # float64 arrays of one chunk's rows × n_classes (scores, residuals,
    # duals) that a task holds at once, a lower bound; train's memory check counts them (0: per class only)
    column_state_arrays: ClassVar[int] = 0  # float64 arrays of the store's columns × n_classes that the driver
    # holds beside them and that `dense_weights` does not count; train's memory check warns with them

    def __init__(self, params: SolverParams):
        self.params = params

    def init(self, ctx: Context) -> StateT:
        raise NotImplementedError

    def step(self, ctx: Context, state: StateT) -> dict[str, Any]:
        raise NotImplementedError

    def finished(self, state: StateT) -> bool:
        raise NotImplementedError

    def row_state(self, source) -> tuple[int, int]:
        """(rows, arrays): one task holds `arrays` float64 arrays of `rows` rows × n_classes at
        once, by default `row_state_arrays` of a chunk's rows. `source` a store (its manifest:
        train's memory check asks before the first step)."""
        return min(source.n_rows, source.manifest.chunk_rows), self.row_state_arrays

    def column_state(self, source) -> int:
        """Float64 arrays of the store's columns × n_classes that the driver holds beside the
        per-row state: `column_state_arrays`, and the dense weights of `dense_weights` (train's
        memory check warns with them)."""
        return self.column_state_arrays + int(self.dense_weights)

    def check_source(self, source: ChunkSource) -> None:
        """Raise ConfigError if the solver cannot train on `source` (a multilabel store for a
        multiclass-only method, say). Needs only the store's manifest: `streamfit train` calls it
        before it starts a cluster or makes the run directory, and the driver before init."""

    def uses_workers(self, source: ChunkSource) -> bool:
        """Whether fitting on `source` runs its work as tasks on the engine, which a cluster's
        workers would share; False when the whole fit computes in the driver (bcd's memory
        mode), where a cluster adds only its start-up and memory. Needs only the store's
        manifest: `streamfit train` asks it to choose the engine (engine.auto_mode)."""
        return True

    def work(self, source: ChunkSource) -> Work | None:
        """The fit's rounds of tasks and each round's seconds in this process (engine.Work),
        estimated from the store's manifest and the parameters before the run: `streamfit train`'s
        auto engine runs the fit on a cluster only where that is predicted faster
        (engine.auto_choice). None (the default): no estimate, the cluster above the size bound."""
        return None

    def reads_valid(self, source: ChunkSource) -> bool:
        """Whether fitting on `source` reads the validation store itself when one is given
        (multiboost's early stopping), not only to log metrics: the model then depends on it, so
        `train` puts its fingerprint in the run's configuration (a resume refuses another one)."""
        return False

    def max_steps(self, state: StateT) -> int | None:
        """The step count at which the run's budget ends, as far as `state` tells (the progress
        line's total and ETA): exact for a fixed schedule, an upper bound where the stopping test
        may hold first; None when unknown."""
        return None

    def converged(self, state: StateT) -> bool:
        """True when the solver stopped by its own test; solvers with a fixed schedule are
        converged once finished."""
        return self.finished(state)

    def not_converged_reason(self, state: StateT) -> str:
        """Which stopping test failed, for the warning logged at a budget (the fix follows it)."""
        return f"stopped at max_iter={getattr(self.params, 'max_iter', '?')} before tol={getattr(self.params, 'tol', '?')} held"

    def checkpoint_due(self, state: StateT, every: int, saved_at: int) -> bool:
        """Whether the step just taken may end with a checkpoint, given `checkpoint_every` =
        every and the step of the newest checkpoint, `saved_at`: every `every` steps by default;
        a solver whose steps are parts of a larger round (bcd's groups of an outer iteration)
        counts rounds instead. The driver saves a due step once `checkpoint_interval` has passed
        since the last save (streamfit.schedule.TimedSchedule), so a due step may pass
        unsaved: the answer must depend on `state` and `saved_at` only."""
        return state.step % every == 0

    def check_resume(self, ctx: Context, state: StateT) -> None:
        """Raise ConfigError if the run cannot continue from this restored state."""

    def to_model(self, ctx: Context, state: StateT) -> Model:
        raise NotImplementedError

    def fit(
        self,
        source: ChunkSource,
        *,
        engine: Engine,
        checkpointer,
        log,
        resume: bool = False,
        stop_after: int | None = None,
        checkpoint_every: int = 1,
        checkpoint_interval: float | str = "auto",
        log_not_converged: bool | Callable[[str], None] = True,
        valid: ChunkSource | None = None,
    ) -> Model:
        """Train on `source` through the driver (streamfit.solvers.driver.run); checkpointer None:
        no checkpoints (the estimators, which never resume); log_not_converged: see
        streamfit.solvers.driver.run (the estimators pass a callable and warn with its words);
        valid: the validation store, for a solver that reads it (reads_valid)."""
        from streamfit.solvers.driver import run

        return run(
            self,
            source,
            engine=engine,
            checkpointer=checkpointer,
            metrics=log,
            resume=resume,
            stop_after=stop_after,
            checkpoint_every=checkpoint_every,
            checkpoint_interval=checkpoint_interval,
            log_not_converged=log_not_converged,
            valid=valid if self.reads_valid(source) else None,
        )


LOW_DIM_MAX_COLUMNS = (
    1000  # dense low-dimensional data (stagewise's λ rule and auto check, standardize): columns used at most
)
LOW_DIM_MIN_DENSITY = 0.1  # ... and this share of them non-zero per row on average, at least
# standardize="auto": standardized columns where max s_j / min s_j exceeds this (100 until session 26)
SCALE_SPREAD = 10.0


def class_rows(source: ChunkSource, engine: Engine) -> np.ndarray | None:
    """The training rows of each class (n_classes,) of a multiclass source, None for a
    multilabel or regression source or one without rows. A store's manifest records them
    (format version 4: `Manifest.class_rows`, counted by its writer), so no chunk is read; a
    version-3 store's are counted in one pass over its chunks, each decoded once more; an
    in-memory source's labels are counted directly. A class with 0 rows (declared by ingest
    --classes or an ARFF header) is left out of the model's decision
    (Model.set_classes_without_rows)."""
    from streamfit.store import InMemoryStore, Store

    if source.multilabel or source.regression or source.n_chunks == 0:
        return None
    if isinstance(source, InMemoryStore):
        return np.bincount(source.labels, minlength=source.n_classes)
    if isinstance(source, Store) and source.manifest.class_rows is not None:
        return np.array(source.manifest.class_rows, dtype=np.int64)
    return engine.map_reduce(_class_rows_task, source, range(source.n_chunks), desc="classes")


def _class_rows_task(source: ChunkSource, chunk_id: int) -> np.ndarray:
    """The chunk's rows per class (n_classes,), read past a store's cache of decoded chunks (a
    solver that never rereads the store, multiboost, keeps that cache empty)."""
    from streamfit.store import Store

    chunk = source.read_chunk(chunk_id, cache=False) if isinstance(source, Store) else source.read_chunk(chunk_id)
    return np.bincount(chunk.labels, minlength=source.n_classes)


def column_scales(n: int, sums: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """The columns' standard deviations s_j = √(mean x_j² − mean(x_j)²) over n rows from their
    sums Σ_i x_ij and Σ_i x_ij²; 1 for a column that is constant (its variance at most 1e-12 of
    its mean square, rounding's level: its centered values are rounding noise, which dividing
    would blow up) or whose squares overflowed (NaN or inf). fbpd's steps on standardized
    columns and stagewise's standardized penalty."""
    constant = constant_columns(n, sums, squares)
    return np.where(constant, 1.0, np.sqrt(np.where(constant, 1.0, column_variances(n, sums, squares))))


def column_variances(n: int, sums: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """The columns' variances mean x_j² − mean(x_j)² over n rows from their sums Σ_i x_ij and
    Σ_i x_ij² (NaN or inf where the squares overflowed)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return squares / n - (sums / n) ** 2


def constant_columns(n: int, sums: np.ndarray, squares: np.ndarray) -> np.ndarray:
    """`column_scales`' constant columns (bool): variance at most 1e-12 of the mean square, or
    squares that overflowed."""
    variance = column_variances(n, sums, squares)
    with np.errstate(over="ignore", invalid="ignore"):
        return ~(variance > 1e-12 * (squares / n)) | ~np.isfinite(variance)


# offset_notice: a dense low-dimensional column whose mean is more than this many times its
# standard deviation (qa28: bcd's and ppdsparse's defaults lose 6 and 0.3 points at 100×, 27 and 4
# at 300×, and fall to chance further out, where on the centred columns they match LinearSVC)
OFFSET_RATIO = 100.0


def offset_notice(solver: str, n: int, ids: np.ndarray, sums: np.ndarray, squares: np.ndarray) -> str | None:
    """The one-line warning for dense low-dimensional training columns that sit far from zero
    relative to their spread, or None. With m_j = Σ_i x_ij / n and s_j the standard deviation of
    column j over the n rows (`column_scales`' formula; a constant column is left out), the
    columns with |m_j| > OFFSET_RATIO·s_j are offsets (a year, a temperature in kelvin, a price
    near 10 000 that moves by cents). ppdsparse's standardized penalty does not centre the
    columns (standardizing keeps zeros: one-hot columns stay sparse), nor does bcd without an
    intercept (with one, every mode centres: bcd's "Centred columns"), so the weights and the
    intercept, if any, must undo m_j/s_j ≫ 1 and the fit degrades, silently but for this line (docs/benchmarks.md, "qa28"). `ids` are the columns' store feature ids, named in the line; the model is unchanged."""
    ratio = np.where(constant_columns(n, sums, squares), 0.0, np.abs(sums / n) / column_scales(n, sums, squares))
    far = np.flatnonzero(ratio > OFFSET_RATIO)
    if far.size == 0:
        return None
    worst = far[np.argmax(ratio[far])]
    return (
        f"{solver}: {far.size} of the {ids.size} training columns sit far from zero: column {int(ids[worst])}'s mean is "
        f"{ratio[worst]:.3g}× its standard deviation (> {OFFSET_RATIO:g}×: an offset such as a year or a price), "
        f"where {solver}'s fit loses accuracy, down to chance (docs/benchmarks.md, qa28): subtract each such "
        "column's mean (or a round number near it) before ingest"
    )


def columns_used_estimate(source: ChunkSource) -> int:
    """The columns holding a non-zero, without reading a chunk: with the IDF weights of text
    ingest, idf_j = ln((1 + n) / (1 + df_j)) + 1 (streamfit.ingest.featurize.idf_weights), the
    columns with df_j >= 1, whose weight is at most ln((1 + n) / 2) + 1, below the
    ln(1 + n) + 1 of an unseen column (the cut halfway between, in ln 2 / 2, is robust to a
    training count n a little off the store's rows); else min(n_features, nnz), an upper bound."""
    idf = getattr(source, "idf", None)
    if idf is not None:
        return int(np.count_nonzero(idf < np.log1p(source.n_rows) + 1.0 - np.log(2.0) / 2))
    nnz = getattr(getattr(source, "manifest", None), "nnz", None)
    return source.n_features if nnz is None else min(source.n_features, int(nnz))


def dense_low_dimensional(n_rows: int, n_active: int, nnz: int) -> bool:
    """Whether n_active columns holding nnz non-zeros over n_rows rows are the dense
    low-dimensional data of the auto rules (stagewise's λ and generator check, standardize): at
    most LOW_DIM_MAX_COLUMNS columns, at least LOW_DIM_MIN_DENSITY of them non-zero per row."""
    return 0 < n_active <= LOW_DIM_MAX_COLUMNS and nnz >= LOW_DIM_MIN_DENSITY * n_rows * n_active


def standardized_scale(standardize: bool | str, n: int, sums: np.ndarray, squares: np.ndarray) -> np.ndarray | None:
    """s (`column_scales`) of columns already found dense and low-dimensional, where
    `standardize` puts the penalty on standardized columns: True always, "auto" where s spans
    more than SCALE_SPREAD (columns in different units); else (False, or a small spread) None."""
    if standardize is False:
        return None
    scale = column_scales(n, sums, squares)
    return scale if standardize is True or scale_spread(scale) > SCALE_SPREAD else None


def scale_spread(scale: np.ndarray) -> float:
    """max s_j / min s_j of `column_scales`' standard deviations (a constant column counts as 1);
    1 for no column."""
    return float(scale.max() / scale.min()) if scale.size else 1.0


def register_solver(cls):
    SOLVERS[cls.name] = cls
    return cls
