"""The machine-readable training log: `metrics.jsonl`, one JSON object per solver step."""

from __future__ import annotations

import json
import os
import time


class MetricsLog:
    """Appends one line per step: {"step", "wall_time" (s since the run started), ...fields}.
    With path=None the lines are kept in `records` only (estimators). With a validation
    source, a step logged with `model=` (the current model, or a function returning it) also
    gets the model's metrics on that source, prefixed `valid_` (every `valid_every` steps)."""

    def __init__(self, path: str | None = None, *, elapsed_before: float = 0.0, valid=None, valid_every: int = 1):
        self.path = path
        self.records: list[dict] = []
        self._t0 = time.perf_counter() - elapsed_before
        self.valid = valid
        self.valid_every = max(1, int(valid_every))

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def log(self, step: int, model=None, **fields) -> dict:
        if self.valid is not None and model is not None and step % self.valid_every == 0:
            from streamfit.metrics import evaluate

            result = evaluate(model() if callable(model) else model, self.valid)
            fields.update({f"valid_{k}": v for k, v in result.items() if k != "n_samples"})
        record = {"step": int(step), "wall_time": round(self.elapsed, 4), **fields}
        self.records.append(record)
        if self.path:
            with open(self.path, "a") as f:
                f.write(json.dumps(record, default=float) + "\n")
                f.flush()
                os.fsync(f.fileno())
        return record

    def truncate_after(self, step: int) -> None:
        """On resume: drop lines of steps after the checkpoint (they will be redone)."""
        if not self.path or not os.path.exists(self.path):
            return
        with open(self.path) as f:
            kept = [line for line in f if line.strip() and json.loads(line)["step"] <= step]
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.writelines(kept)
        os.replace(tmp, self.path)
