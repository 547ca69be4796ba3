"""The machine-readable training log: `metrics.jsonl`, one JSON object per solver step."""

from __future__ import annotations

import json
import os
import time


class MetricsLog:
    """Appends one line per step: {"step", "wall_time" (s since the run started), ...fields}.
    With path=None the lines are kept in `records` only (estimators)."""

    def __init__(self, path: str | None = None, *, elapsed_before: float = 0.0):
        self.path = path
        self.records: list[dict] = []
        self._t0 = time.perf_counter() - elapsed_before

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self._t0

    def log(self, step: int, **fields) -> dict:
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
