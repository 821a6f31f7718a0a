"""Load plans and arrival schedules, driven by an injected clock (no sleeping)."""

import random
import statistics

import pytest

from tokenswarm.workload.arrivals import ArrivalProcess, arrival_times, schedule
from tokenswarm.workload.steps import StepMachine, plan_steps


def test_steps_wait_for_the_target_then_warm_up_then_hold_steady():
    m = StepMachine(plan_steps("closed", [1, 4], warmup_s=5, duration_s=10))
    tr = m.advance(0.0, reached=False)
    assert [(t.step.name, t.phase) for t in tr] == [("c1", "warmup")]
    assert m.advance(3.0, reached=False) == []          # still ramping: the clock does not run
    assert m.advance(4.0, reached=True) == []           # reached at 4 -> warm-up until 9
    tr = m.advance(9.5, reached=True)
    assert [(t.step.name, t.phase, t.at_s) for t in tr] == [("c1", "steady", 9.0)]
    at_target = {"c1": True, "c4": False}
    tr = m.advance(19.2, reached=lambda step: at_target[step.name])  # steady 9..19 -> c4 starts at 19
    assert [(t.step.name, t.phase, t.at_s) for t in tr] == [("c4", "warmup", 19.0)]
    assert m.times[0].steady_s == 9.0 and m.times[0].ended_s == 19.0
    m.advance(20.0, reached=True)
    assert m.remaining_s(21.0) == pytest.approx(14.0)
    tr = m.advance(25.9, reached=True)                  # a tick's usual lateness: dated as planned
    assert [(t.step.name, t.phase, t.at_s) for t in tr] == [("c4", "steady", 25.0)]
    tr = m.advance(35.4, reached=True)
    assert [(t.step.name, t.phase, t.at_s) for t in tr] == [("c4", "done", 35.0)]
    assert m.done and m.times[1].ended_s == 35.0 and m.late_ticks == []


def test_a_window_edge_seen_by_a_late_tick_is_dated_at_that_tick_so_no_window_passes_unrecorded():
    # The run context tags records with the phase a tick broadcasts. A tick that came 100 s late
    # (the generator was held up) must not open and close windows in the past: nothing sent then
    # was tagged steady. The window opens at the tick and lasts its full duration from there.
    m = StepMachine(plan_steps("open", [2.0, 4.0], warmup_s=1, duration_s=2))
    m.advance(0.0, reached=True)
    tr = m.advance(100.0, reached=True)
    assert [(t.step.name, t.phase, t.at_s) for t in tr] == [("r2", "steady", 100.0)]
    assert m.late_ticks == [("r2", "steady", 99.0)]
    tr = m.advance(104.0, reached=True)                 # the window ended at 102: 2 s late, at the tick
    assert [(t.step.name, t.phase, t.at_s) for t in tr] == [("r4", "warmup", 104.0)]
    assert m.times[0].steady_s == 100.0 and m.times[0].ended_s == 104.0
    assert m.late_ticks[-1] == ("r2", "ended", 2.0)
    tr = m.advance(105.5, reached=True)                 # on time again: as planned
    assert [(t.step.name, t.phase, t.at_s) for t in tr] == [("r4", "steady", 105.0)]


def test_the_late_tick_bound_is_the_machines_own_setting():
    m = StepMachine(plan_steps("open", [2.0], warmup_s=1, duration_s=2), late_tick_s=float("inf"))
    m.advance(0.0, reached=True)
    tr = m.advance(100.0, reached=True)                 # never late: every edge as planned
    assert [(t.phase, t.at_s) for t in tr] == [("steady", 1.0), ("done", 3.0)] and m.late_ticks == []


def test_rate_steps_are_named_by_rate():
    assert [s.name for s in plan_steps("open", [0.5, 2, 10], 0, 1)] == ["r0.5", "r2", "r10"]


@pytest.mark.parametrize("kind,burst", [("poisson", 1.0), ("gamma", 0.5), ("gamma", 4.0), ("constant", 1.0)])
def test_arrival_processes_have_the_configured_mean_rate(kind, burst):
    p = ArrivalProcess(20.0, kind, burst, random.Random(7))
    times = arrival_times(0.0, 500.0, p)
    assert len(times) / 500.0 == pytest.approx(20.0, rel=0.03)


def test_burstiness_controls_the_dispersion_of_gaps():
    def cv(kind, b):
        p = ArrivalProcess(10.0, kind, b, random.Random(1))
        gaps = [p.next_interval_s() for _ in range(20000)]
        return statistics.pstdev(gaps) / statistics.fmean(gaps)
    assert cv("poisson", 1) == pytest.approx(1.0, abs=0.03)
    assert cv("gamma", 0.25) == pytest.approx(2.0, abs=0.1)   # cv = 1/sqrt(shape)
    assert cv("gamma", 4.0) == pytest.approx(0.5, abs=0.03)
    assert cv("constant", 1) == 0.0


def test_the_same_seed_gives_the_same_arrival_schedule():
    a = arrival_times(0, 10, ArrivalProcess(5, "poisson", 1, random.Random(3)))
    b = arrival_times(0, 10, ArrivalProcess(5, "poisson", 1, random.Random(3)))
    assert a == b


def test_invalid_arrival_settings_are_rejected_with_the_reason():
    with pytest.raises(ValueError, match="expected one of"):
        ArrivalProcess(1, "uniform")
    with pytest.raises(ValueError, match="rate must be > 0"):
        ArrivalProcess(0)


def test_a_target_that_is_never_reached_times_out_and_is_remembered():
    m = StepMachine(plan_steps("closed", [8], warmup_s=1, duration_s=2), max_ramp_s=30)
    m.advance(0.0, reached=False)
    assert m.advance(29.0, reached=False) == [] and m.phase == "ramping"
    m.advance(31.0, reached=False)
    assert m.phase == "warmup" and m.ramp_timeouts == [0]


def test_ramp_s_turns_into_a_spawn_rate_that_takes_that_long():
    from types import SimpleNamespace

    from tokenswarm.orchestrate.loadplan import spawn_rate_for

    load = SimpleNamespace(ramp_s=20.0, spawn_rate=100.0)
    m = StepMachine(plan_steps("closed", [4, 64], warmup_s=1, duration_s=5))
    assert spawn_rate_for(load, m.steps[0], m) == 4 / 20   # 0 -> 4 users in 20 s
    assert spawn_rate_for(load, m.steps[1], m) == 60 / 20  # 4 -> 64 users in 20 s
    load.ramp_s = 0.0
    assert spawn_rate_for(load, m.steps[1], m) == 100.0


def test_the_open_loop_user_dispatches_on_the_schedule_the_tests_compute():
    """users.OpenLoopUser.dispatch and arrival_times are one schedule: same seed, same send times."""
    from types import SimpleNamespace

    from tokenswarm.load import users

    now = [100.0]
    scheduled: list[float] = []
    load = SimpleNamespace(mode="closed", arrival="poisson", burstiness=1.0, stop_timeout_s=0.0)
    ctx = SimpleNamespace(stopping=False, halted=False, clock=lambda: now[0], rate_per_worker=lambda: 5.0,
                          note_late=lambda lag_ms: None, scenario=SimpleNamespace(load=load))

    class Pool:
        def full(self):
            return False

        def spawn(self, fn, task_cfg, rng, scheduled_s):
            scheduled.append(scheduled_s)
            ctx.stopping = len(scheduled) >= 50

        def join(self, timeout):
            pass

        def kill(self, block, timeout):
            pass

    user = object.__new__(users.OpenLoopUser)
    user.ctx, user.pool, user.tasks_, user.rng = ctx, Pool(), [SimpleNamespace(weight=1)], random.Random(11)
    user.deal = None  # the random draw (traffic.task_draw: per_user)
    sleep = users.gevent.sleep
    users.gevent.sleep = lambda s: now.__setitem__(0, now[0] + s)  # time passes only in the user's waits
    try:
        users.OpenLoopUser.dispatch(user)
    finally:
        users.gevent.sleep = sleep
    # the same draws as the schedule's own: an interval, then the task pick and the request's seed
    rng = random.Random(11)
    expected, t = [], 100.0
    for _ in range(50):
        t += rng.expovariate(5.0)
        expected.append(t)
        users.pick_task([SimpleNamespace(weight=1)], rng)
        rng.getrandbits(64)
    assert scheduled == pytest.approx(expected, abs=1e-9)


def test_arrival_times_are_the_schedule_cut_at_the_step_end():
    a = arrival_times(10.0, 3.0, ArrivalProcess(4.0, "gamma", 0.5, random.Random(7)))
    whole = schedule(10.0, ArrivalProcess(4.0, "gamma", 0.5, random.Random(7)))
    b = [next(whole) for _ in range(len(a) + 1)]
    assert a == b[:-1] and b[-1] >= 13.0 > a[-1]
