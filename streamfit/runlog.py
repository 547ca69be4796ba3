"""The machine-readable training log: `metrics.jsonl`, one JSON object per solver step (a local
path or URL, through streamfit.storage)."""

from __future__ import annotations

import json
import logging
import time

from streamfit import storage

log = logging.getLogger(__name__)

SUMMARY_FIELDS = ("objective", "gap", "train_accuracy", "train_p_at_1", "nnz", "nnz_rows", "not_converged")


def summary(record: dict) -> str:
    """The headline numbers of a metrics record: objective, gap, training accuracy or P@1, sparsity,
    unconverged classes and the validation metrics, as "name value, ..." (those it has)."""
    return ", ".join(
        f"{k} {v:.6g}" if isinstance(v, float) else f"{k} {v}"
        for k, v in record.items()
        if (k in SUMMARY_FIELDS or k.startswith("valid_")) and isinstance(v, (int, float))
    )


class MetricsLog:
    """Appends one line per step: {"step", "wall_time" (s since the run started), ...fields}.
    With path=None the lines are kept in `records` only (estimators). With a validation
    source, a step logged with `model=` (the current model, or a function returning it) also
    gets the model's metrics on that source, prefixed `valid_` (every `valid_every` steps).
    `heartbeat` (seconds): also log a summary line at most that often, so a run whose output
    goes to a file (cron) shows its progress."""

    def __init__(self, path: str | None = None, *, valid=None, valid_every: int = 1, heartbeat: float | None = None):
        self.path = path
        self.records: list[dict] = []
        self._t0 = time.perf_counter()
        self.valid = valid
        self.valid_every = max(1, int(valid_every))
        self.heartbeat = heartbeat
        self._beat = time.perf_counter()

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def log(self, step: int, model=None, *, final: bool = False, **fields) -> dict:
        """Append the step's record; validate `model` every `valid_every` steps, and on a `final` step."""
        if self.valid is not None and model is not None and (final or step % self.valid_every == 0):
            from streamfit.metrics import evaluate

            result = evaluate(model() if callable(model) else model, self.valid)
            fields.update({f"valid_{k}": v for k, v in result.items() if k != "n_samples"})
        record = {"step": int(step), "wall_time": round(self.elapsed, 4), **fields}
        self.records.append(record)
        if self.heartbeat is not None and time.perf_counter() - self._beat >= self.heartbeat:
            self._beat = time.perf_counter()
            log.info("step %d, %.0f s: %s", record["step"], record["wall_time"], summary(record))
        if self.path:
            storage.resolve(self.path).append_text(json.dumps(record, default=float) + "\n")
        return record

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
