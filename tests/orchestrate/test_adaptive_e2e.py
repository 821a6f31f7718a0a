"""Adaptive steps and the planner end to end, on the fast simulator (a few seconds per run)."""

import json
import subprocess
import sys
from collections import Counter

import pytest

from tests.helpers.runs import ROOT, read_manifest, read_records, run_locust, scenario_file
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

SKEWED = {
    "seed": 7,
    "task_draw": "per_request",
    "classes": {
        "qa": {"weight": 19, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 60},
               "max_tokens": {"dist": "fixed", "value": 8}},
        "code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 100, "max": 200},
                 "max_tokens": {"dist": "fixed", "value": 8}},
    },
}


def steady_ok(run_dir, step=0) -> Counter:
    return Counter(r["task"] for r in read_records(run_dir)
                   if r["step"] == step and r["phase"] == "steady" and r["outcome"] == "ok")


def test_a_skewed_mix_is_flagged_by_the_planner_and_filled_by_the_stratified_deal_and_an_adaptive_step(tmp_path):
    # 95 s at the dry run's assumed speed: ~23 code requests expected, 20 needed (a median)
    load = {"mode": "closed", "steps": [1], "warmup_s": 0.2, "step_duration_s": 95, "stop_timeout_s": 5}
    sc = scenario_file(tmp_path, traffic=SKEWED, load=load, slo={"tpot_p50_ms": 1000})
    plan = subprocess.run([sys.executable, "-m", "tokenswarm", "run", str(sc), "--dry-run"], capture_output=True,
                          text=True, cwd=ROOT, timeout=60)
    # the random draw gives code ~1 request in 20: the plan names it and offers the deal
    assert plan.returncode == 0 and "WARNING: code on step c1" in plan.stdout, plan.stdout
    assert "task_draw: stratified" in plan.stdout

    dealt = {**SKEWED, "task_draw": "stratified"}
    adaptive = {**load, "step_duration_s": 1, "until": {"min_requests_per_task": 20, "max_step_s": 60}}
    sc = scenario_file(tmp_path, traffic=dealt, load=adaptive, slo={"tpot_p50_ms": 1000})
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    assert "sizing: throughput pilot" in res.stdout  # the first lines: the plan, from a measured stream
    (outcome,) = read_manifest(tmp_path / "run")["adaptive_steps"]["steps"]
    counts = steady_ok(tmp_path / "run")
    assert outcome["stopped_by"] == "goal met" and counts["code"] >= 20, (outcome, counts)
    # dealt, not drawn: code has its 1-in-20 share of the steady requests, give or take the ones in flight
    assert abs(counts["code"] - (counts["qa"] + counts["code"]) / 20) <= 2, counts
    slo = json.loads((tmp_path / "run" / "slo.json").read_text())
    assert slo["checks"] and not any(c["not_enough_samples"] for c in slo["checks"])


def test_an_adaptive_step_stops_at_its_precision_and_records_the_pilot_that_sized_it(tmp_path):
    load = {"mode": "closed", "steps": [2], "warmup_s": 0.2, "step_duration_s": 1, "stop_timeout_s": 5,
            "until": {"precision": 0.1, "metric": "e2e_ms", "max_step_s": 120}}
    sc = scenario_file(tmp_path, traffic={**SKEWED, "task_draw": "stratified"}, load=load)
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    doc = read_manifest(tmp_path / "run")["adaptive_steps"]
    (outcome,) = doc["steps"]
    assert outcome["stopped_by"] == "goal met" and outcome["steady_s"] < 120, outcome
    assert "two-stage" in doc["stopping_rule"]
    for task in ("qa", "code"):
        pilot = outcome["pilot"][task]
        assert pilot["requests"] >= 10 and outcome["targets"][task] >= pilot["requests"]
        assert outcome["requests_ok"][task] >= outcome["targets"][task]


def test_an_adaptive_step_that_cannot_fill_ends_at_its_cap(tmp_path):
    load = {"mode": "open", "steps": [5], "warmup_s": 0.2, "step_duration_s": 1, "stop_timeout_s": 5,
            "until": {"min_requests_per_task": 100000, "max_step_s": 2}}
    sc = scenario_file(tmp_path, traffic={**SKEWED, "task_draw": "stratified"}, load=load)
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    m = read_manifest(tmp_path / "run")
    (outcome,) = m["adaptive_steps"]["steps"]
    assert outcome["stopped_by"] == "cap" and 2 <= outcome["steady_s"] < 4, outcome
    step = m["steps"][0]
    assert 2 <= step["ended_at"] - step["steady_at"] < 4
    assert any(w.startswith("plan: the median on step r5") for w in m["warnings"])  # said before the first request


def test_the_budget_ends_adaptive_steps_that_could_run_far_longer(tmp_path):
    load = {"mode": "closed", "steps": [1, 2], "warmup_s": 0.2, "step_duration_s": 1, "stop_timeout_s": 5,
            "until": {"min_requests_per_task": 100000, "max_step_s": 120}}
    sc = scenario_file(tmp_path, traffic={**SKEWED, "task_draw": "stratified"}, load=load)
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run", "--budget", "8")
    assert res.returncode == 0, res.stderr[-3000:]
    m = read_manifest(tmp_path / "run")
    doc = m["adaptive_steps"]
    assert doc["budget_s"] == 8 and [s["stopped_by"] for s in doc["steps"]] == ["budget", "budget"], doc
    # the first step left the second its shortest window (warm-up + 1 s); the plan ran ~8 s, not 240
    assert m["steps"][-1]["ended_at"] - m["steps"][0]["started_at"] < 15
    assert doc["steps"][1]["steady_s"] >= 1
