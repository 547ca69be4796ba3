"""streamfit.schedule: when an optional costly action (a checkpoint save, a validation) is taken."""

import pytest

from streamfit.schedule import AUTO_WAIT, TimedSchedule


def test_the_schedule_waits_the_interval_after_the_end_of_the_last_run():
    """0: every chance; seconds: that long after the last run ended; auto: 9 x its duration.
    Before the first run (a resume), the first chance is taken."""
    every, fixed, auto = TimedSchedule(0), TimedSchedule(30.0), TimedSchedule("auto")
    for schedule in (every, fixed, auto):
        assert schedule.waited(0.0)
        schedule.took(10.0, 10.5)  # a run of 0.5 s
    assert every.waited(10.5)
    assert not fixed.waited(40.4) and fixed.waited(40.5)
    assert AUTO_WAIT == 9 and auto.wait() == 4.5 and not auto.waited(14.9) and auto.waited(15.0)
    auto.took(20.0, 20.01)  # a cheap action is taken again soon: 0.09 s on
    assert auto.waited(20.1 + 1e-9) and (auto.count, auto.seconds) == (2, pytest.approx(0.51))
    for bad in (-1, "soon", None, True):
        with pytest.raises(ValueError, match="checkpoint_interval"):
            TimedSchedule(bad, "checkpoint_interval")
