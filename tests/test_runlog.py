"""streamfit.runlog: the progress a person sees of a training run (lines in a log, ETA)."""

import pytest

import streamfit.runlog as runlog
from streamfit.runlog import MetricsLog, RunProgress, duration


class Clock:
    """A settable time.perf_counter."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = Clock()
    monkeypatch.setattr(runlog.time, "perf_counter", c)
    return c


def test_a_line_per_step_with_the_count_elapsed_time_and_eta(clock, caplog):
    """Off a terminal, a step's line says step/planned, the run's elapsed time and the time left:
    (planned − step) × seconds per step, measured from the first step on; none at the first step,
    which also compiles kernels (its rate would promise hours for a run of seconds)."""
    metrics = MetricsLog(None, progress=RunProgress("lines", line_seconds=0.0))
    clock.now = 5.0  # init took 5 s
    metrics.begin("fbpd", 0, 4)
    with caplog.at_level("INFO", logger="streamfit.runlog"):
        for step, t in ((1, 15.0), (2, 17.0), (3, 19.0), (4, 21.0)):
            clock.now = t
            metrics.log(step, objective=0.5 / step, final=step == 4, planned=4)
        metrics.end()
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "fbpd: step 1/4, 0:15 elapsed: objective 0.5",  # 10 s of it compiling: no ETA yet
        "fbpd: step 2/4, 0:17 elapsed, ETA 0:04: objective 0.25",  # 2 × 2 s (from step 1 on)
        "fbpd: step 3/4, 0:19 elapsed, ETA 0:02: objective 0.166667",
        "fbpd: step 4/4, 0:21 elapsed, ETA 0:00: objective 0.125",
    ]
    assert caplog.records[1].fields == {"step": 2, "planned": 4, "elapsed_s": 17.0, "eta_s": 4.0}


def test_quick_steps_get_a_line_at_most_every_few_seconds_and_the_last_always(clock, caplog):
    metrics = MetricsLog(None, progress=RunProgress("lines", line_seconds=5.0))
    metrics.begin("stagewise", 0, None)  # no plan: no ETA
    with caplog.at_level("INFO", logger="streamfit.runlog"):
        for step in range(1, 8):
            clock.now = 2.0 * step
            metrics.log(step, final=step == 7)
    assert [r.fields["step"] for r in caplog.records] == [1, 4, 7]  # t = 2, 8 (6 s later), and the last
    assert caplog.records[0].getMessage() == "stagewise: step 1, 0:02 elapsed"


def test_a_resumed_run_counts_from_its_checkpoint(clock, caplog):
    metrics = MetricsLog(None, progress=RunProgress("lines", line_seconds=0.0))
    metrics.begin("bcd", 6, 10)
    with caplog.at_level("INFO", logger="streamfit.runlog"):
        for step in (7, 8):
            clock.now = 3.0 * (step - 6)
            metrics.log(step, planned=10)
    assert caplog.records[-1].fields == {"step": 8, "planned": 10, "elapsed_s": 6.0, "eta_s": 6.0}


def test_a_run_of_one_step_ends_with_nothing_left(clock, caplog):
    metrics = MetricsLog(None, progress=RunProgress("lines", line_seconds=0.0))
    metrics.begin("ppdsparse", 0, 1)
    with caplog.at_level("INFO", logger="streamfit.runlog"):
        clock.now = 140.0
        metrics.log(1, final=True, planned=1)
    assert caplog.records[-1].fields["eta_s"] == 0.0


def test_durations_read_as_clock_times():
    assert [duration(s) for s in (0, 59.6, 61, 3600 + 62)] == ["0:00", "1:00", "1:01", "1:01:02"]


def test_on_a_terminal_one_bar_counts_the_whole_run(clock, capsys, caplog):
    """mode "bar": one bar over the run's steps (no log lines), its total following the plan."""
    progress = RunProgress("bar")
    metrics = MetricsLog(None, progress=progress)
    metrics.begin("bcd", 2, 10)  # resumed at step 2
    bar = progress._bar
    with caplog.at_level("INFO", logger="streamfit.runlog"):
        for step in range(3, 9):
            clock.now = float(step)
            metrics.log(step, objective=1.0 / step, planned=8)
    assert (bar.n, bar.total) == (8, 8) and not caplog.records
    metrics.end()
    assert "bcd" in capsys.readouterr().err and progress._bar is None


def test_a_pass_over_data_gets_a_line_per_item_with_its_unit_and_eta(clock, caplog, monkeypatch):
    """counted(): an ingest's (or transpose's) pass, shown off a terminal as train's steps are,
    in its own unit; a line for the last item always; nothing when not enabled."""
    monkeypatch.setattr(runlog, "progress_mode", lambda: "lines")
    seen = []
    with caplog.at_level("INFO", logger="streamfit.runlog"):
        for i in runlog.counted(range(3), "write", unit="chunk", total=3):
            clock.now += 4.0  # the consumer works 4 s on each
            seen.append(i)
        assert list(runlog.counted(range(3), "quiet", unit="chunk", total=3, enabled=False)) == [0, 1, 2]
    assert seen == [0, 1, 2]
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "write: chunk 1/3, 0:04 elapsed",  # the first item: no rate yet
        "write: chunk 3/3, 0:12 elapsed, ETA 0:00",  # the second fell within LINE_SECONDS of the first
    ]


class StepClock:
    """A settable monotonic clock for MetricsLog's validation schedule."""

    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _validated_run(monkeypatch, valid_every, *, steps, step_s, valid_s):
    """The steps MetricsLog validates in a run of `steps` steps of `step_s` seconds each, where a
    validation takes `valid_s` seconds (a fake clock and a fake evaluate: no wall time), and the
    seconds spent validating and in all."""
    import streamfit.metrics

    clock = StepClock()
    scored = []

    def evaluate(model, source):
        clock.now += valid_s
        scored.append(model)
        return {"accuracy": 0.5, "n_samples": 3}

    monkeypatch.setattr(streamfit.metrics, "evaluate", evaluate)
    log = MetricsLog(None, valid=object(), valid_every=valid_every, clock=clock)
    for step in range(1, steps + 1):
        clock.now += step_s
        log.log(step, model=lambda step=step: f"model {step}", final=step == steps)
    validated = [r["step"] for r in log.records if "valid_accuracy" in r]
    assert scored == [f"model {s}" for s in validated]  # the model of the step, once per validated step
    assert all(r.keys() == {"step", "wall_time"} for r in log.records if r["step"] not in validated)
    return validated, log.validations.seconds, clock.now


def test_auto_validation_takes_at_most_a_tenth_of_a_run_of_cheap_steps(monkeypatch):
    """1000 steps of 1 s, a validation of 5 s: every step validated took 5/6 of the run; "auto"
    validates the first step, then one once 9 x 5 s has passed since the last ended (every 45
    steps), and the last, so validating takes at most 1/10 of the run besides those two."""
    every, seconds, total = _validated_run(monkeypatch, 1, steps=1000, step_s=1.0, valid_s=5.0)
    assert every == list(range(1, 1001)) and seconds / total == pytest.approx(5 / 6)
    auto, seconds, total = _validated_run(monkeypatch, "auto", steps=1000, step_s=1.0, valid_s=5.0)
    assert auto == [*range(1, 1000, 45), 1000]
    assert seconds - 2 * 5.0 <= 0.1 * total  # the first and the last are taken whatever the time
    # steps that take longer than 9 validations: every one is validated
    auto, seconds, total = _validated_run(monkeypatch, "auto", steps=20, step_s=50.0, valid_s=5.0)
    assert auto == list(range(1, 21)) and seconds / total == pytest.approx(1 / 11)


def test_every_n_steps_validates_the_multiples_of_n_and_the_last(monkeypatch):
    validated, _, _ = _validated_run(monkeypatch, 3, steps=10, step_s=1.0, valid_s=100.0)
    assert validated == [3, 6, 9, 10]


@pytest.mark.parametrize("bad", [0, -2, "soon", True, 1.5, None])
def test_a_bad_valid_every_is_refused(bad):
    with pytest.raises(ValueError, match="valid_every must be 'auto' or a whole number of steps >= 1"):
        MetricsLog(None, valid_every=bad)
