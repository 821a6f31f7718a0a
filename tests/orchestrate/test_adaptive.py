"""Adaptive steps (load.until): the stopping rule decides from counts and times only."""

import math
import random

import pytest

from tokenswarm.orchestrate.adaptive import (
    PILOT_MIN_REQUESTS,
    AdaptiveRun,
    StepPlan,
    StepTally,
    median_interval_halfwidth,
    record_metric,
    requests_for_precision,
)
from tokenswarm.workload.scenario import UntilConfig
from tokenswarm.workload.steps import StepMachine, plan_steps


def tally(**counts: int) -> StepTally:
    t = StepTally()
    rng = random.Random(1)
    for task, n in counts.items():
        for _ in range(n):
            t.add(task, rng.uniform(90, 110))
    return t


def test_a_step_never_ends_before_its_shortest_window_even_with_its_counts_met():
    plan = StepPlan(("qa", "code"), min_duration_s=5, max_step_s=60, min_requests_per_task=20)
    assert plan.decide(4.9, tally(qa=100, code=100)).hold
    assert plan.decide(5.0, tally(qa=100, code=100)).reason == "goal met"


def test_a_step_holds_until_its_rarest_task_has_its_count():
    plan = StepPlan(("qa", "code"), min_duration_s=5, max_step_s=60, min_requests_per_task=20)
    d = plan.decide(10, tally(qa=80, code=19))
    assert d.hold and d.reason == "filling"
    assert not plan.decide(11, tally(qa=84, code=20)).hold


def test_the_cap_ends_a_step_that_cannot_fill():
    plan = StepPlan(("qa", "code"), min_duration_s=5, max_step_s=60, min_requests_per_task=20)
    d = plan.decide(60, tally(qa=80, code=3))
    assert not d.hold and d.reason == "cap"


def test_the_budget_ends_a_step_before_its_cap():
    plan = StepPlan(("qa",), min_duration_s=5, max_step_s=60, min_requests_per_task=20)
    d = plan.decide(10, tally(qa=3), budget_left_s=0)
    assert not d.hold and d.reason == "budget"


def test_precision_fixes_the_count_at_the_end_of_the_pilot_and_later_values_never_change_it():
    plan = StepPlan(("qa",), min_duration_s=5, max_step_s=600, precision=0.01)
    t = tally(qa=40)
    assert plan.decide(5, t).hold
    target = plan.targets["qa"]
    h0 = median_interval_halfwidth(t.values["qa"])
    assert target == requests_for_precision(40, h0, 0.01) > 40
    # whatever arrives afterwards (here: wildly spread values), the count stays the one fixed
    for v in range(target - 40 - 1):
        t.add("qa", 1000.0 * (v % 7))
    assert plan.decide(30, t).hold and plan.targets["qa"] == target
    t.add("qa", 5.0)
    assert plan.decide(31, t).reason == "goal met"


def test_the_pilot_waits_for_enough_values_of_every_task():
    plan = StepPlan(("qa", "code"), min_duration_s=5, max_step_s=600, precision=0.05)
    d = plan.decide(6, tally(qa=50, code=PILOT_MIN_REQUESTS - 1))
    assert d.hold and d.reason == "pilot" and plan.targets is None


def test_the_median_interval_narrows_as_one_over_root_n():
    rng = random.Random(3)
    small = [rng.gauss(100, 10) for _ in range(400)]
    large = [rng.gauss(100, 10) for _ in range(6400)]
    ratio = median_interval_halfwidth(small) / median_interval_halfwidth(large)
    assert 3.0 < ratio < 5.5  # sqrt(6400 / 400) = 4
    assert median_interval_halfwidth([1.0] * (PILOT_MIN_REQUESTS - 1)) is None


def test_the_run_counts_only_successful_steady_records_of_each_step():
    run = AdaptiveRun(UntilConfig(max_step_s=60, min_requests_per_task=2), ["qa"], 1.0, started_s=0.0)
    for phase, outcome in [("warmup", "ok"), ("steady", "error"), ("steady", "ok")]:
        run.observe(0, phase, "qa", outcome, 1.0)
    assert run.tallies[0].counts == {"qa": 1}
    assert run.decide(0, "c1", 5.0, 6.0).hold
    run.observe(0, "steady", "qa", "ok", 1.0)
    assert not run.decide(0, "c1", 6.0, 7.0).hold
    out = run.summary()
    assert out["steps"][0]["stopped_by"] == "goal met" and out["steps"][0]["requests_ok"] == {"qa": 2}
    assert "fixed count" in out["stopping_rule"]


def test_the_budget_keeps_time_for_the_steps_after_this_one():
    until = UntilConfig(max_step_s=600, min_requests_per_task=1000)
    run = AdaptiveRun(until, ["qa"], 5.0, budget_s=100, later_min_s=[30, 0], started_s=0.0)
    assert run.decide(0, "c1", 60, 69).hold  # 69 s used + 30 s for the last step < 100
    assert run.decide(0, "c1", 62, 71).reason == "budget"


def test_record_metric_reads_records_and_their_json():
    rec = {"e2e_ms": 500.0, "output_tokens": 10, "ttft_ms": 20.0}
    assert record_metric("request_output_tps", rec) == pytest.approx(20.0)
    assert record_metric("ttft_ms", rec) == 20.0
    assert record_metric("request_output_tps", {"e2e_ms": None, "output_tokens": 3}) is None


def test_the_step_machine_keeps_a_held_step_steady_and_ends_it_at_the_tick_it_is_let_go():
    asked: list[float] = []

    def hold(step, steady_s):
        asked.append(steady_s)
        return steady_s < 7

    m = StepMachine(plan_steps("closed", [1, 2], warmup_s=0, duration_s=5), hold=hold)
    m.advance(0.0, True)
    m.advance(4.0, True)
    assert asked == []  # the shortest window is not over: the rule is not asked
    m.advance(6.0, True)
    assert m.index == 0 and m.phase == "steady"
    trs = m.advance(8.0, True)
    assert m.index == 1 and m.times[0].ended_s == 8.0 and trs[0].at_s == 8.0
    assert math.isclose(asked[-1], 8.0)
