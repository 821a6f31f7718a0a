"""The stream poller's sweep period follows the streams' own gaps (tokenswarm/wire/sweep.py).

A read holds whatever arrived since the previous sweep and is dated by its newest segment, so
the period may grow while no stream gets two events between sweeps, and must fall back to 1 ms
as soon as one does. Time is passed in; nothing sleeps.
"""

import pytest

from tokenswarm.wire.sweep import SAFETY, SweepPeriod

FLOOR, CEILING, WINDOW = 0.001, 0.004, 0.25


def _window(p: SweepPeriod, start_s: float, gaps_s: list[float]) -> bool:
    """One window's reads, then the window closes; True if the period changed."""
    p.update(start_s)
    for g in gaps_s:
        p.gap(g)
    return p.update(start_s + WINDOW)


def _steady(p: SweepPeriod, gap_s: float, windows: int, t0: float = 0.0) -> float:
    for k in range(windows):
        _window(p, t0 + k * WINDOW, [gap_s] * 50)
    return t0 + windows * WINDOW


def test_it_starts_at_the_floor_and_grows_to_three_quarters_of_the_shortest_gap_in_half_millisecond_steps():
    p = SweepPeriod(FLOOR, CEILING)
    assert p.period_s == FLOOR
    _steady(p, 0.005, 2)  # 5 ms between a stream's events: 3.75 ms allowed, 3.5 on the grid
    assert p.period_s == pytest.approx(0.0035) and SAFETY == 0.75
    q = SweepPeriod(FLOOR, CEILING)
    _steady(q, 0.0039, 2)  # the truth server's jittered 5 ms steps: shortest 3.9 ms
    assert q.period_s == pytest.approx(0.0025)


def test_each_sweep_is_counted_at_the_period_it_ran_at():
    p = SweepPeriod(FLOOR, CEILING)
    p.update(0.0)  # the first sweep opens the window, at the floor
    for _ in range(20):
        p.gap(0.005)
    assert p.update(WINDOW) is True, "this sweep ran at the floor and closed the window: 3.5 ms from now on"
    for k in range(3):
        p.update(WINDOW + 0.0035 * (k + 1))
    assert sorted(p.sweeps_by_period_s.items()) == [(FLOOR, 2), (pytest.approx(0.0035), 3)]


def test_it_never_passes_the_ceiling_nor_goes_below_the_floor():
    p = SweepPeriod(FLOOR, CEILING)
    _steady(p, 0.030, 2)
    assert p.period_s == CEILING
    _steady(p, 0.0005, 3, t0=10.0)  # gaps shorter than the floor: reading them at 1 ms is as before
    assert p.period_s == FLOOR


def test_one_short_gap_holds_the_period_down_for_two_windows():
    p = SweepPeriod(FLOOR, CEILING)
    t = _steady(p, 0.005, 2)
    assert p.period_s == pytest.approx(0.0035)
    _window(p, t, [0.005] * 49 + [0.002])  # one stream's events came 2 ms apart once
    assert p.period_s == pytest.approx(0.0015)
    _window(p, t + WINDOW, [0.005] * 50)  # the window before still had it
    assert p.period_s == pytest.approx(0.0015)
    _window(p, t + 2 * WINDOW, [0.005] * 50)
    assert p.period_s == pytest.approx(0.0035)


def test_a_crowded_read_brings_the_floor_back_at_once_and_for_two_windows():
    p = SweepPeriod(FLOOR, CEILING)
    t = _steady(p, 0.005, 2)
    assert p.crowded() is True and p.period_s == FLOOR, "two events in one mid-stream read: the floor now"
    assert p.crowded() is False, "already there: no timer to re-arm"
    assert p.update(t + WINDOW) is False and p.period_s == FLOOR  # the rest of that window
    _window(p, t + WINDOW, [0.005] * 50)
    assert p.period_s == FLOOR  # the window before held the crowded read
    _window(p, t + 2 * WINDOW, [0.005] * 50)
    assert p.period_s == pytest.approx(0.0035)
    assert p.crowded_count == 2 and p.changes_count == 3


def test_too_few_reads_are_no_evidence_and_keep_the_floor():
    p = SweepPeriod(FLOOR, CEILING, min_reads=20)
    t = _steady(p, 0.005, 2)
    _window(p, t, [0.005] * 5)  # a quiet window: five reads say little about the next gaps
    assert p.period_s == FLOOR
    _window(p, t + WINDOW, [0.005] * 50)  # and the window after a thin one is not enough alone
    assert p.period_s == FLOOR
    _window(p, t + 2 * WINDOW, [0.005] * 50)
    assert p.period_s == pytest.approx(0.0035)


def test_a_window_closes_only_when_its_time_has_passed():
    p = SweepPeriod(FLOOR, CEILING)
    p.update(0.0)
    for _ in range(50):
        p.gap(0.005)
    assert p.update(WINDOW / 2) is False and p.period_s == FLOOR


def test_a_fixed_period_never_changes_and_a_bad_range_is_refused():
    p = SweepPeriod(FLOOR, FLOOR)
    assert not p.adaptive
    _steady(p, 0.010, 3)
    assert p.period_s == FLOOR and p.changes_count == 0
    with pytest.raises(ValueError, match="floor"):
        SweepPeriod(0.004, 0.001)
    with pytest.raises(ValueError, match="floor"):
        SweepPeriod(0.0, 0.001)
