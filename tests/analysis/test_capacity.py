"""Capacity under SLO: the definition, fixed steps judged by the report, and capacity per study arm."""

from __future__ import annotations

import json

from tests.analysis import runfactory as rf
from tokenswarm.analysis.capacity import (
    CAPACITY_FILE,
    Probe,
    capacity_of,
    render_capacity_text,
    run_capacity,
)
from tokenswarm.analysis.curves import curve_points, find_knee
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.study_capacity import capacity_lines, study_capacity
from tokenswarm.analysis.summary import unitless_keys
from tokenswarm.analysis.tables import step_table


def probe(load, passed, **kw):
    return Probe(step_index=None, step_name=f"c{load:g}", load_value=load, passed=passed, **kw)


def test_capacity_is_the_last_pass_below_the_first_failure():
    cap = capacity_of([probe(1, True), probe(8, False), probe(4, True), probe(6, True), probe(7, False)], "concurrency")
    assert (cap.capacity_value, cap.first_failing_value, cap.status) == (6, 7, "found")
    assert cap.to_dict()["reached_resolution_value"] == 1


def test_a_pass_above_the_first_failure_is_reported_not_used():
    cap = capacity_of([probe(2, True), probe(4, False), probe(8, True)], "concurrency")
    assert cap.capacity_value == 2 and cap.first_failing_value == 4
    assert "passed again above the first failure (at 8)" in cap.notes[0]


def test_nothing_failing_is_a_lower_bound_and_nothing_passing_is_below_the_lowest_probe():
    assert capacity_of([probe(2, True), probe(4, True)], "concurrency").summary().startswith("capacity at least 4")
    low = capacity_of([probe(2, False)], "rate")
    assert low.status == "below_lowest" and low.capacity_value is None and "req/s" in low.summary()


def test_the_reason_names_the_slo_and_task_once_per_value():
    checks = ({"slo_name": "tpot_p95_ms", "observed_value": 72.0, "threshold_value": 60.0, "comparison": "<=",
               "unit": "ms", "task": "all", "detail": ""},
              {"slo_name": "tpot_p95_ms", "observed_value": 72.0, "threshold_value": 60.0, "comparison": "<=",
               "unit": "ms", "task": "code", "detail": ""})
    p = probe(8, False, failed_checks=checks)
    assert p.reason() == "tpot_p95_ms = 72 ms, needs <= 60 (all tasks, task code)"
    text = render_capacity_text(capacity_of([probe(4, True), p], "concurrency"))
    assert "capacity 4 users (passes at 4, fails at 8: tpot_p95_ms = 72 ms" in text


def stepped_run(path, tpot_by_load: dict[int, float], n=30, slo=None):
    """A closed-loop run with one step per load; every request of a step has that step's TPOT."""
    steps, records, i = [], [], 0
    for index, (load, tpot) in enumerate(tpot_by_load.items()):
        t = rf.T0 + 100 * index
        steps.append(rf.step(index, "concurrency", load, t, t + 1, t + 61))
        for _ in range(n):
            i += 1
            offs = [50.0 + tpot * k for k in range(5)]
            records.append(rf.record(i, step=index, phase="steady", sent_at_s=t + 2 + i % 50,
                                     chunk_offsets_ms=offs, e2e_ms=offs[-1]))
    scenario = {"slo": slo if slo is not None else {"tpot_p50_ms": 20}}
    return rf.write_run(path, records, steps=steps, scenario=scenario)


def test_a_run_of_fixed_steps_has_the_capacity_of_its_steps_under_its_slos(tmp_path):
    run = load_run(stepped_run(tmp_path / "r", {1: 5.0, 4: 12.0, 8: 25.0, 16: 50.0}))
    tables = step_table(run)
    cap = run_capacity(run.path, curve_points(tables.rows), tables.slo_results, tables.slo.to_dict())
    assert (cap["capacity_value"], cap["first_failing_value"], cap["source"]) == (4, 8, "steps")
    assert "tpot_p50_ms = 25 ms" in cap["limited_by"]
    assert unitless_keys(cap) == []  # names carry units


def test_a_search_runs_own_probes_take_precedence_over_its_steps(tmp_path):
    path = stepped_run(tmp_path / "r", {1: 5.0, 4: 12.0})
    doc = capacity_of([probe(1, True), probe(4, True), probe(5, False)], "concurrency", resolution=1,
                      source="search").to_dict()
    (path / CAPACITY_FILE).write_text(json.dumps({**doc, "stop_reason": "the bracket [4, 5] is within the resolution (1)"}))
    run = load_run(path)
    tables = step_table(run)
    cap = run_capacity(run.path, curve_points(tables.rows), tables.slo_results)
    assert cap["source"] == "search" and cap["first_failing_value"] == 5 and "bracket" in cap["stop_reason"]


def test_without_slos_a_fixed_run_has_no_capacity(tmp_path):
    run = load_run(stepped_run(tmp_path / "r", {1: 5.0, 4: 12.0}, slo={}))
    tables = step_table(run)
    assert run_capacity(run.path, curve_points(tables.rows), tables.slo_results) is None


def test_a_knee_is_looked_for_only_on_steps_with_enough_samples(tmp_path):
    # 30 requests per step: a p95 needs 200, so no step is a point of the E2E p95 curve
    run = load_run(stepped_run(tmp_path / "r", {1: 5.0, 4: 12.0, 8: 60.0}))
    pts = curve_points(step_table(run).rows)
    assert all(p["e2e_p95_ms"] is None for p in pts)
    assert find_knee(pts, "e2e_p95_ms") is None


def test_a_step_short_of_samples_is_left_out_and_its_neighbours_are_compared():
    pts = [{"step_index": i, "step_name": f"c{load}", "load_value": load, "output_tokens_per_s": tps, "e2e_p95_ms": lat}
           for i, (load, tps, lat) in enumerate([(1, 100.0, 1000.0), (4, 300.0, None), (8, 320.0, 4000.0)])]
    knee = find_knee(pts, "e2e_p95_ms")
    assert knee["knee_step_name"] == "c8" and knee["last_efficient_load_value"] == 1


def test_a_study_reports_capacity_per_arm_and_its_ratio_to_the_baseline(tmp_path):
    runs = {}
    for r in (0, 1):
        runs[("baseline", r)] = load_run(stepped_run(tmp_path / f"b{r}", {1: 6.0, 4: 15.0, 8: 30.0, 16: 60.0}))
        # the draft arm: in round 1 it also passes 16 users; the capacity it carried in every round is 8
        draft = {1: 3.0, 4: 8.0, 8: 14.0, 16: 19.0 if r else 28.0}
        runs[("draft", r)] = load_run(stepped_run(tmp_path / f"d{r}", draft))
    cap = study_capacity(runs, ["baseline", "draft"], "baseline")
    arms = {a["arm"]: a for a in cap["arms"]}
    assert arms["baseline"]["capacity_value"] == 4 and arms["baseline"]["first_failing_value"] == 8
    assert arms["draft"]["per_round_capacity_value"] == [8, 16] and arms["draft"]["capacity_value"] == 8
    assert arms["draft"]["capacity_ratio"] == 2.0 and arms["draft"]["per_round_capacity_ratio"] == [2.0, 4.0]
    assert arms["draft"]["sentence"] == "the draft arm carries 2.00x the concurrency of the baseline at tpot_p50_ms <= 20"
    assert unitless_keys(cap) == []
    text = "\n".join(capacity_lines(cap))
    assert "baseline: 4 users, fails at 8" in text and "x2.00 the baseline" in text


def test_a_fixed_step_short_of_samples_is_listed_but_not_judged_either_way():
    short = ({"slo_name": "tpot_p95_ms", "observed_value": None, "threshold_value": 60.0, "comparison": "<=",
              "unit": "ms", "task": "all", "detail": "not enough samples: n=40", "not_enough_samples": True},)
    probes = [probe(1, False, failed_checks=short), probe(8, True), probe(32, False, failed_checks=(
        {**short[0], "observed_value": 90.0, "not_enough_samples": False, "detail": ""},))]
    cap = capacity_of(probes, "concurrency")
    assert (cap.capacity_value, cap.first_failing_value) == (8, 32)
    assert "not used: load 1" in cap.notes[0]
    # a search decided on the short probe (failed at its cap): it counts there
    assert capacity_of(probes, "concurrency", source="search").status == "below_lowest"
    assert capacity_of(probes[:1], "concurrency").status == "none"


def test_a_study_whose_steps_are_all_short_of_samples_says_no_step_was_judged(tmp_path):
    runs = {(arm, 0): load_run(stepped_run(tmp_path / arm, {1: 5.0, 8: 12.0}, slo={"tpot_p95_ms": 60}))
            for arm in ("baseline", "draft")}
    cap = study_capacity(runs, ["baseline", "draft"], "baseline")
    assert [a["per_round_status"] for a in cap["arms"]] == [["none"], ["none"]]
    text = "\n".join(capacity_lines(cap))
    assert "baseline: no step judged (too few samples" in text and "below the lowest" not in text
    assert "no capacity ratio (no step judged: too few samples)" in text
