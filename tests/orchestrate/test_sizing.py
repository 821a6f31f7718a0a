"""The plan states what it can judge: expected requests per cell against each figure's need."""

import pytest

from tokenswarm.analysis.stats import min_samples_for
from tokenswarm.load.pilot import PilotResult, run_pilot
from tokenswarm.orchestrate.sizing import MEDIAN, RateModel, binomial_below, gate_needs, plan_cells, plan_lines
from tokenswarm.workload.scenario import ScenarioError, load_scenario

SKEWED = {"traffic.task_draw": "per_request", "traffic.classes.qa.weight": 19, "traffic.classes.code.weight": 1,
          "traffic.classes.summarization.weight": 0, "traffic.classes.extraction.weight": 0,
          "traffic.classes.multi_turn.weight": 0}


def mix(**over):
    """The shipped mix with a fixed (not adaptive) plan unless the test says otherwise."""
    return load_scenario("scenarios/mix.yaml", {"load.until": None, "traffic.task_draw": "per_request", **over})


def test_each_percentile_gate_needs_ten_over_one_minus_q_and_every_cell_its_median():
    needs = {n.figure: n.requests for n in gate_needs({"ttft_p95_ms": 800, "tpot_p99_ms": 60, "error_rate": 0.01,
                                                        "per_task": {"code": {"e2e_p99_ms": 9}}}, "code")}
    assert needs == {MEDIAN: min_samples_for(50), "ttft_p95_ms": 200, "tpot_p99_ms": 1000, "e2e_p99_ms": 1000}


def test_a_step_too_short_for_its_p95_gate_warns_with_the_time_it_needs_and_the_fixes():
    sc = mix(**{"load.steps": [4]})
    lines, warnings = plan_lines(sc, {"ttft_p95_ms": 800}, RateModel())
    assert any("step c4" in ln for ln in lines)
    (w,) = warnings
    assert w.startswith("ttft_p95_ms on step c4 needs 200 requests per cell; this plan gives ~")
    assert "s needed" in w and "lengthen the step" in w and "load.until" in w and "gate on p50" in w


def test_a_plan_long_enough_for_its_gates_does_not_warn():
    sc = mix(**{"load.steps": [16], "load.step_duration_s": 3000})
    assert plan_lines(sc, {"ttft_p95_ms": 800}, RateModel())[1] == []


def test_a_faster_measured_server_gives_more_requests_than_the_assumption():
    sc = mix(**{"load.steps": [1]})
    slow = plan_cells(sc, {}, RateModel())[0].expected
    fast = plan_cells(sc, {}, RateModel.from_pilot(400.0, 0.01, 32))[0].expected
    assert fast > 3 * slow  # prefill is assumed in both: the decode speed alone is 10x


def test_a_rare_task_under_the_random_draw_is_flagged_and_the_stratified_deal_offered():
    probe = mix(**SKEWED, **{"load.steps": [1], "load.step_duration_s": 1})
    (rate,) = [c.rate_per_s for c in plan_cells(probe, {}, RateModel()) if c.task == "code"]
    window_s = round(23 / rate)  # ~23 code requests expected: just above the 20 a median needs
    sc = mix(**SKEWED, **{"load.steps": [1], "load.step_duration_s": window_s})
    (code,) = [c for c in plan_cells(sc, {}, RateModel()) if c.task == "code"]
    assert code.expected >= code.need and code.shortfall_risk > 0.05
    warnings = plan_lines(sc, {}, RateModel())[1]
    assert any("code on step c1" in w and "task_draw: stratified" in w for w in warnings)
    dealt = mix(**{**SKEWED, "traffic.task_draw": "stratified"}, **{"load.steps": [1], "load.step_duration_s": window_s})
    assert plan_lines(dealt, {}, RateModel())[1] == []


def test_a_per_user_draw_that_gives_a_task_no_user_says_so():
    sc = mix(**{"traffic.task_draw": "per_user", "load.steps": [1]})
    warnings = plan_lines(sc, {}, RateModel())[1]
    assert any("no user is given this task" in w for w in warnings)


def test_an_adaptive_step_plans_until_its_count_and_warns_when_its_count_is_below_a_gate():
    sc = mix(**{"load.steps": [4], "load.until": {"min_requests_per_task": 20, "max_step_s": 5000}})
    cells = plan_cells(sc, {"ttft_p95_ms": 800}, RateModel())
    rare = min(c.expected for c in cells)
    assert 19.5 < rare < 25  # the step ends when the rarest task has its 20
    warnings = plan_lines(sc, {"ttft_p95_ms": 800}, RateModel())[1]
    assert any("raise load.until.min_requests_per_task to 200" in w for w in warnings)


def test_binomial_below_is_exact_on_small_cases():
    assert binomial_below(2, 0.5, 1) == pytest.approx(0.25)
    assert binomial_below(3, 0.5, 2) == pytest.approx(0.5)
    assert binomial_below(10, 0.1, 0) == 0.0


def test_until_needs_a_goal_and_a_cap_no_shorter_than_the_shortest_window():
    with pytest.raises(ScenarioError, match=r"load\.until\.max_step_s"):
        mix(**{"load.until": {"min_requests_per_task": 20}})
    with pytest.raises(ScenarioError, match=r"load\.until"):
        mix(**{"load.until": {"max_step_s": 60}})
    with pytest.raises(ScenarioError, match=r"load\.until\.max_step_s.*step_duration_s"):
        mix(**{"load.until": {"min_requests_per_task": 20, "max_step_s": 5}})
    with pytest.raises(ScenarioError, match=r"load\.until\.precision"):
        mix(**{"load.until": {"precision": 2, "max_step_s": 60}})


def test_the_pilot_times_one_streamed_answer():
    chunks = [b'data: {"choices":[{"delta":{"content":"one"}}]}\n'] * 8 + [
        b'data: {"choices":[],"usage":{"completion_tokens":8}}\n', b"data: [DONE]\n"]
    ticks = iter([0.0, 0.1, 0.5])  # sent, first content, end of stream
    seen = {}

    def lines(url, body, headers, timeout_s, verify_tls):
        seen["url"] = url
        yield from chunks

    sc = mix()
    res = run_pilot("http://127.0.0.1:9/v1", sc.target, "m", "chat", lines=lines, clock=lambda: next(ticks))
    assert seen["url"] == "http://127.0.0.1:9/v1/chat/completions"
    assert res == PilotResult(8, pytest.approx(0.1), pytest.approx(0.4))
    assert res.stream_tokens_per_s == pytest.approx(7 / 0.4)
