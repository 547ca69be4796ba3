"""When to take an optional, costly action of a run that does not change the model: a checkpoint
save (streamfit.solvers.driver), a validation (streamfit.runlog.MetricsLog).

TimedSchedule("auto") waits AUTO_WAIT x the duration of the action's last run after that run
ended: between two runs of the action the run works at least AUTO_WAIT times as long as the
action took, so the action takes at most 1/(1 + AUTO_WAIT) = 1/10 of the wall time whatever it
costs (a cheap one is taken at nearly every chance, an expensive one rarely), with no constant
that depends on the data. A number of seconds waits that long instead (0: every chance).
"""

from __future__ import annotations

AUTO_WAIT = 9  # "auto": wait this many times the action's last duration, so it takes <= 1/(1 + 9) of the run


class TimedSchedule:
    """Whether a chance to take the action is taken, by time: once at least `interval` seconds
    have passed since the end of its last run (0: at every chance); "auto": interval = AUTO_WAIT
    x the duration of its last run. Times are seconds of one monotonic clock, given by the
    caller; before the first run (in this process: a resumed run too) the first chance is taken.
    `what` names the setting in the error for a bad interval."""

    def __init__(self, interval: float | str, what: str = "interval"):
        if interval != "auto" and not (
            isinstance(interval, (int, float)) and not isinstance(interval, bool) and interval >= 0
        ):
            raise ValueError(f"{what} must be 'auto' or seconds >= 0, got {interval!r}")
        self.interval = interval
        self.ended: float | None = None  # when the last run ended
        self.duration = 0.0  # how long it took
        self.count = 0  # runs so far
        self.seconds = 0.0  # in all runs so far

    def wait(self) -> float:
        """Seconds that must pass after the last run before a chance is taken."""
        return AUTO_WAIT * self.duration if self.interval == "auto" else float(self.interval)

    def waited(self, now: float) -> bool:
        """Whether a chance at time `now` is taken."""
        return self.ended is None or now - self.ended >= self.wait()

    def took(self, started: float, ended: float) -> None:
        """The action ran from `started` to `ended`."""
        self.ended, self.duration = ended, ended - started
        self.count += 1
        self.seconds += ended - started
