"""A scenario spreads its requests over several models (LoRA adapters) by weight; the run splits by model."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from tests.helpers.runs import read_records, run_locust, scenario_file
from tokenswarm.analysis import analyse
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.render_doc import report_doc
from tokenswarm.load.preflight import Answer, PreflightError, preflight
from tokenswarm.load.users import pick_model
from tokenswarm.sim.testing import start_sim
from tokenswarm.workload.scenario import ScenarioError, parse_scenario

SPLIT = {"base": 0.5, "lora-sql": 0.3, "lora-chat": 0.2}
QA = {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 30},
      "max_tokens": {"dist": "fixed", "value": 8}, "sampling": {"ignore_eos": True}}


def _parse(target_model=None, **classes):
    target = {"base_url": "http://127.0.0.1:8000"}
    if target_model is not None:
        target["model"] = target_model
    return parse_scenario({"target": target, "traffic": {"classes": classes or {"qa": {}}}}, "s.yaml")


def test_a_target_model_mapping_is_a_weighted_split_for_every_class():
    sc = _parse(SPLIT, qa={}, code={})
    assert sc.target.model == "base", "the first name is the run's model (token counting, manifest)"
    for task in sc.traffic.classes:
        assert sc.models_of(task) == (("base", 0.5), ("lora-sql", 0.3), ("lora-chat", 0.2))
    assert sc.resolved()["target"]["model"] == SPLIT
    assert sc.model_names() == ("base", "lora-sql", "lora-chat")


def test_a_class_model_overrides_the_targets():
    sc = _parse("base", qa={"model": {"lora-sql": 1, "lora-chat": 3}}, code={"model": "lora-code"})
    assert sc.models_of(sc.traffic.task("qa")) == (("lora-sql", 1.0), ("lora-chat", 3.0))
    assert sc.models_of(sc.traffic.task("code")) == (("lora-code", 1.0),)
    assert sc.resolved()["traffic"]["classes"]["code"]["model"] == {"lora-code": 1.0}
    assert sc.model_names() == ("base", "lora-sql", "lora-chat", "lora-code")


@pytest.mark.parametrize("model, problem", [
    ({"base": -1}, "a weight >= 0"),
    ({"base": 0}, "at least one model with weight > 0"),
    ({"auto": 1}, "not auto"),
])
def test_a_bad_split_is_a_scenario_error_naming_the_field(model, problem):
    with pytest.raises(ScenarioError) as exc:
        _parse(model)
    assert "target.model" in str(exc.value) and problem in str(exc.value)


def test_requests_draw_their_model_by_weight_and_one_model_draws_nothing():
    rng = random.Random(1)
    drawn = Counter(pick_model((("base", 0.5), ("lora-sql", 0.3), ("lora-chat", 0.2)), rng) for _ in range(20000))
    assert abs(drawn["base"] / 20000 - 0.5) < 0.02 and abs(drawn["lora-chat"] / 20000 - 0.2) < 0.02
    before = rng.getstate()
    assert pick_model((), rng) is None and pick_model((("only", 1.0),), rng) == "only"
    assert rng.getstate() == before, "a scenario without a split sends the same prompts as before"


def test_preflight_fails_naming_every_model_the_server_does_not_list():
    sc = _parse(SPLIT)
    body = {"data": [{"id": "base"}, {"id": "lora-sql"}]}

    def get(url, headers, timeout, verify):
        return Answer(200, body, "", {})

    with pytest.raises(PreflightError) as exc:
        preflight("http://127.0.0.1:9", sc.target, models=sc.model_names(), get=get)
    assert "'lora-chat'" in str(exc.value) and "'lora-sql'" not in str(exc.value)
    body["data"].append({"id": "lora-chat"})
    assert preflight("http://127.0.0.1:9", sc.target, models=sc.model_names(), get=get).model == "base"


def test_a_three_model_split_on_the_simulator_gives_per_model_tables(tmp_path):
    sc = scenario_file(tmp_path, traffic={"seed": 2, "classes": {"qa": QA}},
                       load={"mode": "closed", "steps": [6], "warmup_s": 0.5, "step_duration_s": 4,
                             "stop_timeout_s": 3},
                       target={"model": SPLIT, "scrape_interval_s": 1}, slo={"ttft_p95_ms": 60000})
    with start_sim("--profile", "tiny-fast", "--served-model-name", "base", "--lora-modules", "lora-sql",
                   "lora-chat=/adapters/chat") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    records = read_records(tmp_path / "run")
    counts = Counter(r["model"] for r in records)
    assert set(counts) == set(SPLIT) and all(r["outcome"] == "ok" for r in records)
    assert counts["base"] > counts["lora-chat"], counts
    summary = analyse(load_run(tmp_path / "run"))
    models = summary["models"]
    assert models["models"] == ["base", "lora-chat", "lora-sql"]
    (all_row,) = [r for r in summary["steps"] if r["task"] == "all"]
    rows = {r["model"]: r for r in models["rows"]}
    assert sum(r["requests_count"] for r in rows.values()) == all_row["requests_count"]
    assert all(r["ttft_p50_ms"] is not None and r["itl_p50_ms"] is not None for r in rows.values())
    assert {r["model"] for r in models["slo_results"]} == set(SPLIT), "the SLOs are checked per model"
    blocks = report_doc(summary, {})
    (table,) = [b for b in blocks if b[0] == "table" and b[1][:2] == ["step", "model"]]
    assert sorted(row[1] for row in table[2]) == ["base", "lora-chat", "lora-sql"]


def test_a_one_model_run_has_no_per_model_tables(tmp_path):
    sc = scenario_file(tmp_path, traffic={"seed": 2, "classes": {"qa": QA}},
                       load={"mode": "closed", "steps": [2], "warmup_s": 0, "step_duration_s": 1.5,
                             "stop_timeout_s": 3})
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    assert analyse(load_run(tmp_path / "run"))["models"] is None
