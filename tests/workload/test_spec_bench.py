"""Spec-Bench's question file: its categories become traffic classes, its questions conversations."""

from __future__ import annotations

import json
import random

import pytest
import tomllib

from tests.helpers.runs import ROOT
from tokenswarm.workload.corpora import DatasetError, category_counts, detect_format, load_dataset
from tokenswarm.workload.prompts import PromptSource
from tokenswarm.workload.scenario import ScenarioError, load_scenario, parse_scenario

SAMPLE = ROOT / "scenarios" / "data" / "spec_bench_sample.jsonl"


def _scenario(tmp_path, dataset: dict, **cls):
    data = {"name": "sb", "target": {"base_url": "http://127.0.0.1:8000"},
            "traffic": {"classes": {"spec_bench": {"dataset": {"path": str(SAMPLE), **dataset}, **cls}}}}
    return parse_scenario(data, str(tmp_path / "sb.yaml"))


def test_the_shipped_sample_has_spec_benchs_six_tasks_with_mt_bench_categories_grouped():
    items = load_dataset(str(SAMPLE), "spec_bench")
    assert category_counts(items) == {"mt_bench": 5, "translation": 2, "summarization": 2, "qa": 2,
                                      "math_reasoning": 2, "rag": 2}
    mt = [i for i in items if i.category == "mt_bench"]
    assert all(len(i.user_turns) == 2 for i in mt), "MT-Bench questions are two-turn conversations"
    assert all(len(i.user_turns) == 1 for i in items if i.category != "mt_bench")


def test_auto_detects_a_spec_bench_file():
    assert detect_format(str(SAMPLE), SAMPLE.read_text()) == "spec_bench"


@pytest.mark.parametrize("line, problem", [
    ({"question_id": 1, "category": "qa"}, "question_id', 'category', 'turns'"),
    ({"question_id": 1, "category": "qa", "turns": []}, "non-empty list"),
    ({"question_id": 1, "category": "q a", "turns": ["x"]}, "'category'"),
])
def test_a_malformed_question_is_named_by_file_and_line(tmp_path, line, problem):
    path = tmp_path / "q.jsonl"
    path.write_text(json.dumps({"question_id": 0, "category": "qa", "turns": ["ok"]}) + "\n" + json.dumps(line) + "\n")
    with pytest.raises(DatasetError) as exc:
        load_dataset(str(path), "spec_bench")
    assert "q.jsonl" in str(exc.value) and "line 2" in str(exc.value) and problem in str(exc.value)


def test_a_spec_bench_class_becomes_one_multi_turn_class_per_category_weighted_by_its_questions(tmp_path):
    sc = _scenario(tmp_path, {"format": "spec_bench"}, weight=3)
    classes = {t.name: t for t in sc.traffic.classes}
    assert list(classes) == ["mt_bench", "translation", "summarization", "qa", "math_reasoning", "rag"]
    assert classes["mt_bench"].weight == pytest.approx(3 * 5 / 15)
    assert classes["rag"].weight == pytest.approx(3 * 2 / 15)
    for t in classes.values():
        assert t.kind == "multi_turn" and t.turns is None and t.dataset.category == t.name
        assert t.think_time_s.spec == {"dist": "fixed", "value": 0}, "turns back to back, as Spec-Bench sends them"
    resolved = sc.resolved()["traffic"]["classes"]["translation"]
    assert resolved["dataset"]["category"] == "translation" and "turns" not in resolved


def test_auto_format_splits_too_and_categories_select_some(tmp_path):
    sc = _scenario(tmp_path, {"categories": ["rag", "translation"]})
    assert [t.name for t in sc.traffic.classes] == ["rag", "translation"]
    assert sum(t.weight for t in sc.traffic.classes) == pytest.approx(1.0)


@pytest.mark.parametrize("dataset, cls, problem", [
    ({"format": "spec_bench", "categories": ["poetry"]}, {}, "poetry"),
    ({"format": "spec_bench"}, {"kind": "qa"}, "multi_turn"),
    ({"format": "spec_bench"}, {"kind": "multi_turn", "turns": 2}, "no turns"),
    ({"format": "jsonl", "category": "qa"}, {"kind": "qa"}, "only a spec_bench dataset"),
])
def test_a_wrong_spec_bench_class_is_a_scenario_error(tmp_path, dataset, cls, problem):
    with pytest.raises(ScenarioError) as exc:
        _scenario(tmp_path, dataset, **cls)
    assert problem in str(exc.value)


def test_a_category_name_clashing_with_another_class_is_an_error(tmp_path):
    data = {"name": "sb", "traffic": {"classes": {
        "qa": {"kind": "qa"}, "sb": {"dataset": {"path": str(SAMPLE), "format": "spec_bench"}}}}}
    with pytest.raises(ScenarioError) as exc:
        parse_scenario(data, str(tmp_path / "sb.yaml"))
    assert "'qa' twice" in str(exc.value)


def test_a_multi_turn_question_is_planned_as_one_conversation_with_every_turn_in_order(tmp_path):
    sc = _scenario(tmp_path, {"format": "spec_bench", "categories": ["mt_bench"]})
    (task,) = sc.traffic.classes
    source = PromptSource(task, None, seed=1)
    questions = {i.user_turns for i in load_dataset(str(SAMPLE), "spec_bench") if i.category == "mt_bench"}
    rng = random.Random(7)
    for _ in range(10):
        conv = source.conversation(rng)
        assert conv.turns == 2 and conv.user_messages in questions
        assert conv.think_time_s(1) == 0.0


def test_the_shipped_scenario_reads_the_sample_from_a_local_path():
    sc = load_scenario(str(ROOT / "scenarios" / "spec_bench.yaml"))
    assert {t.name for t in sc.traffic.classes} == {"mt_bench", "translation", "summarization", "qa",
                                                     "math_reasoning", "rag"}
    assert all(t.dataset.path == str(SAMPLE.resolve()) for t in sc.traffic.classes)


def test_the_sample_ships_with_the_scenarios_in_a_wheel():
    from tokenswarm.workload.scenario import shipped_scenarios_dir

    assert (shipped_scenarios_dir() / "data" / "spec_bench_sample.jsonl").is_file()
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "data/*.jsonl" in package_data["tokenswarm.scenarios"], "package data names the datasets"
