"""The training log: `metrics.jsonl`, one JSON object per solver step (machine-readable; a local
path or URL, through streamfit.storage), and the run's progress as a person sees it (RunProgress:
a line per step in a log, or one bar on a terminal)."""

from __future__ import annotations

import json
import logging
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Literal, TypeVar

from streamfit import storage
from streamfit.schedule import TimedSchedule

log = logging.getLogger(__name__)

ProgressMode = Literal["bar", "lines"]
Item = TypeVar("Item")
# "lines": at most one progress line per this many seconds (the first and last step always get one)
LINE_SECONDS = 5.0

# which solver steps a run with a validation store validates (MetricsLog): "auto", or every N steps
DEFAULT_VALID_EVERY: int | str = "auto"

SUMMARY_FIELDS = ("objective", "gap", "train_accuracy", "train_p_at_1", "nnz", "nnz_rows", "not_converged")


def summary(record: dict) -> str:
    """The headline numbers of a metrics record: objective, gap, training accuracy or P@1, sparsity,
    unconverged classes and the validation metrics, as "name value, ..." (those it has)."""
    return ", ".join(
        f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in record.items()
        if (k in SUMMARY_FIELDS or k.startswith("valid_")) and isinstance(v, (int, float))
    )


def progress_mode() -> ProgressMode:
    """How a run shows its progress here: one bar when stderr is a terminal, lines otherwise
    (batch jobs, CI logs, a redirected stderr)."""
    return "bar" if sys.stderr.isatty() else "lines"


def duration(seconds: float) -> str:
    """Seconds as H:MM:SS (M:SS under an hour)."""
    minutes, s = divmod(int(round(seconds)), 60)
    h, m = divmod(minutes, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class RunProgress:
    """A run's progress over its solver steps, for a person.

    mode "lines": a log line (logger streamfit.runlog, INFO) per step, at most one per
    `line_seconds` (the first and the last step always):
        "fbpd: step 12/1000, 0:07 elapsed, ETA 9:41: objective 0.3, gap 0.01"
    with the run's elapsed time (across resumed sessions) and the time left, estimated as
    (planned − step) × (this session's seconds per step, measured from its first step on): none
    at the session's first step, which also pays for compiling the kernels (a first use of
    ppdsparse: minutes), so that its rate would promise hours for a run of seconds (0 when the
    first step is the last); the line's record carries the same
    numbers as `fields` (step, planned, elapsed_s, eta_s) for JSON logs. mode "bar": one tqdm
    bar over the run's steps (its own ETA, and the objective) on stderr. `planned` is the solver's budget
    (Solver.max_steps): exact for a fixed schedule (stagewise, ppdsparse), an upper bound for a
    solver whose stopping test may hold first (bcd, fbpd: max_iter), None if unknown (no ETA)."""

    def __init__(self, mode: ProgressMode, *, line_seconds: float = LINE_SECONDS):
        self.mode = mode
        self.line_seconds = line_seconds
        self.name = "run"
        self.unit = "step"
        self._begun = time.perf_counter()
        self._bar = None
        self._since: tuple[float, int] = (time.perf_counter(), 0)  # (time, step) the rate is measured from
        self._first_done: tuple[float, int] | None = None  # (time, step) at the session's first step
        self._last_line: float | None = None
        self._last_step: int | None = None  # that of the last line (a final one at the same step repeats it)

    def begin(self, name: str, step: int, planned: int | None, *, unit: str = "step") -> None:
        """The run `name` is at `step` (0, or a resumed checkpoint's) of `planned`; `unit`: what a
        step is ("step" for a solver; "record", "chunk", ... for a pass over data)."""
        self.name, self.unit = name, unit
        self._begun = time.perf_counter()
        self._since, self._first_done = (self._begun, step), None
        if self.mode == "bar":
            from tqdm.auto import tqdm

            self._bar = tqdm(total=planned, initial=step, desc=name, unit=unit, dynamic_ncols=True)

    def _eta(self, step: int, planned: int | None) -> float | None:
        """Seconds left after `step` (once per step): the steps left at this session's mean seconds per step
        after its first (None at the first step unless it is the last, or without a plan)."""
        now = time.perf_counter()
        if self._first_done is None:
            self._first_done = (now, step)
            return 0.0 if planned is not None and step >= planned else None
        if step > self._first_done[1]:
            self._since = self._first_done
        since, from_step = self._since
        if planned is None or step <= from_step:
            return None
        return max(planned - step, 0) * (now - since) / (step - from_step)

    def update(self, record: dict, planned: int | None, *, final: bool = False) -> None:
        """Show the step just logged (`record`: a MetricsLog record)."""
        step = record["step"]
        eta = self._eta(step, planned)
        if self._bar is not None:
            if planned is not None and planned != self._bar.total:
                self._bar.total = planned
            if "objective" in record:  # short: the bar's ETA must fit on the line
                self._bar.set_postfix_str(f"objective {record['objective']:.6g}", refresh=False)
            self._bar.update(step - self._bar.n)
            return
        now = time.perf_counter()
        if self._last_line is not None and (
            step == self._last_step or (not final and now - self._last_line < self.line_seconds)
        ):
            return
        self._last_line, self._last_step = now, step
        head = f"{self.name}: {self.unit} {step}" + (f"/{planned}" if planned is not None else "")
        head += f", {duration(record['wall_time'])} elapsed" + (f", ETA {duration(eta)}" if eta is not None else "")
        numbers = summary(record)
        fields = {
            "step": step,
            "planned": planned,
            "elapsed_s": record["wall_time"],
            "eta_s": None if eta is None else round(eta, 1),
        }
        log.info("%s%s", head, f": {numbers}" if numbers else "", extra={"fields": fields})

    def count(self, done: int, planned: int | None, *, final: bool = False) -> None:
        """Show a pass over data (no metrics record): `done` units of `planned` (None: unknown),
        elapsed time counted from begin()."""
        self.update({"step": done, "wall_time": round(time.perf_counter() - self._begun, 4)}, planned, final=final)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()
            self._bar = None


def counted(
    items: Iterable[Item], name: str, *, unit: str, total: int | None = None, enabled: bool = True
) -> Iterator[Item]:
    """`items`, shown as a pass of `total` units (None: unknown) named `name` while they are used:
    a RunProgress in this terminal's mode (progress_mode), advanced by one `unit` as each item is
    done with (the consumer asks for the next), with a line for the last; nothing if not `enabled`."""
    if not enabled:
        yield from items
        return
    progress = RunProgress(progress_mode())
    progress.begin(name, 0, total, unit=unit)
    done = 0
    try:
        for item in items:
            yield item
            done += 1
            if done != total:
                progress.count(done, total)
        progress.count(done, total, final=True)
    finally:
        progress.close()


class MetricsLog:
    """Appends one line per step: {"step", "wall_time" (s since the run started), ...fields}.
    With path=None the lines are kept in `records` only (estimators). With a validation
    source, a step logged with `model=` (the current model, or a function returning it) may
    also get the model's metrics on that source, prefixed `valid_`; which steps (`valid_every`):
    "auto" (the default), the first such step, then a step once AUTO_WAIT (9) x the last
    validation's duration has passed since it ended (streamfit.schedule.TimedSchedule, the rule of
    the checkpoints' "auto"), so validating takes at most 1/10 of the run however cheap the steps
    are; an int N, the steps that are multiples of N; either way, a `final` step. The duration is
    that of building the model and scoring it, on `clock` (seconds, monotonic). A resumed run
    validates its first step again. `progress`: also show each step to a person (RunProgress); the
    driver calls begin() before its first step and end() after its last. Lines go to the file
    without an fsync each (6 ms a step on this machine's disk, most of a small store's iteration,
    session 22); `sync()` makes those written so far durable, and the solver driver calls it
    before each checkpoint, so the lines of the steps a checkpoint holds are on disk when it
    counts them (a resume cuts the later ones, truncate_after), as the per-sample state files
    are; end() syncs too."""

    def __init__(
        self,
        path: str | None = None,
        *,
        valid=None,
        valid_every: int | str = DEFAULT_VALID_EVERY,
        progress: RunProgress | None = None,
        clock: Callable[[], float] = time.monotonic,
    ):
        if valid_every != "auto" and not (
            isinstance(valid_every, int) and not isinstance(valid_every, bool) and valid_every >= 1
        ):
            raise ValueError(f"valid_every must be 'auto' or a whole number of steps >= 1, got {valid_every!r}")
        self.path = path
        self.records: list[dict] = []
        self._t0 = time.perf_counter()
        self.valid = valid
        self.valid_every = valid_every
        self.validations = TimedSchedule("auto")  # when and how long the model was validated
        self.clock = clock
        self.progress = progress
        self._unsynced = False  # lines appended to the local file since the last fsync

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def begin(self, name: str, step: int, planned: int | None) -> None:
        """Solver `name` starts its steps at `step`, with `planned` steps in all (see RunProgress)."""
        if self.progress is not None:
            self.progress.begin(name, step, planned)

    def end(self) -> None:
        if self.validations.count:
            log.debug("validated %d steps in %.3f s", self.validations.count, self.validations.seconds)
        self.sync()
        if self.progress is not None:
            self.progress.close()

    def sync(self) -> None:
        """Make the lines appended since the last sync durable (fsync of the local file; an
        object store's append is a whole PUT, durable already)."""
        if self._unsynced and self.path:
            storage.fsync_path(storage.resolve(self.path).path)
        self._unsynced = False

    def log(self, step: int, model=None, *, final: bool = False, planned: int | None = None, **fields) -> dict:
        """Append the step's record; validate `model` on the steps `valid_every` picks, and on a
        `final` step. `planned`: the steps of the run in all, as far as known now (progress only)."""
        if self.valid is not None and model is not None and self._validates(step, final):
            from streamfit.metrics import evaluate

            started = self.clock()
            result = evaluate(model() if callable(model) else model, self.valid)
            self.validations.took(started, self.clock())
            fields.update({f"valid_{k}": v for k, v in result.items() if k != "n_samples"})
        record = {"step": int(step), "wall_time": round(self.elapsed, 4), **fields}
        self.records.append(record)
        if self.progress is not None:
            self.progress.update(record, planned, final=final)
        if self.path:
            file = storage.resolve(self.path)
            file.append_text(json.dumps(record, default=float) + "\n", sync=False)
            self._unsynced = file.local
        return record

    def _validates(self, step: int, final: bool) -> bool:
        if final:
            return True
        if self.valid_every == "auto":
            return self.validations.waited(self.clock())
        return step % int(self.valid_every) == 0

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines of steps after the checkpoint (they will be redone), and go on
        counting wall_time from the last kept line's (the run's time, across its sessions)."""
        if not self.path:
            return
        file = storage.resolve(self.path)
        if not file.exists():
            return
        lines = file.read_text().splitlines(keepends=True)
        kept = [line for line in lines if line.strip() and json.loads(line)["step"] <= step]
        if kept:
            self._t0 = time.perf_counter() - json.loads(kept[-1])["wall_time"]
        file.write_bytes("".join(kept).encode())
