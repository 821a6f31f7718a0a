"""Trace replay: each trace format parsed from small files the tests write; errors name file and line."""

from __future__ import annotations

import json
import random

import pytest

from tokenswarm.workload.replay import ReplayPrompts
from tokenswarm.workload.scenario import ScenarioError, parse_scenario
from tokenswarm.workload.trace import TraceError, detect_format, load_trace


def write(tmp_path, name: str, text: str) -> str:
    p = tmp_path / name
    p.write_text(text)
    return str(p)


MOONCAKE = "\n".join(json.dumps(o) for o in [
    {"timestamp": 1000, "input_length": 700, "output_length": 20, "hash_ids": [1, 2]},
    {"timestamp": 0, "input_length": 600, "output_length": 10, "hash_ids": [1, 3]},
    {"timestamp": 2500, "input_length": 50, "output_length": 5, "hash_ids": []},
]) + "\n"
BURSTGPT = ("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
            "5.5,ChatGPT,120,30,150,Conversation log\n"
            "7.0,GPT-4,300,0,300,API log\n")


def record(t: float, prompt, out, task="qa") -> str:
    return json.dumps({"run_id": "r", "worker_id": "w", "seq": 0, "task": task, "user_class": "QAUser",
                       "outcome": "ok" if prompt else "http_error", "request_key": "k", "scheduled_at_s": t,
                       "sent_at_s": t, "prompt_tokens": prompt, "output_tokens": out, "max_tokens": 64})


def test_a_mooncake_trace_becomes_sorted_offsets_in_seconds_with_its_hash_ids(tmp_path):
    tr = load_trace(write(tmp_path, "m.jsonl", MOONCAKE))
    assert tr.format == "mooncake"
    assert [(e.offset_s, e.input_tokens, e.output_tokens, e.hash_ids) for e in tr.entries] == [
        (0.0, 600, 10, (1, 3)), (1.0, 700, 20, (1, 2)), (2.5, 50, 5, None)]
    assert [e.line for e in tr.entries] == [2, 1, 3] and tr.span_s == 2.5


def test_a_burstgpt_csv_gives_request_and_response_tokens_and_zero_responses_ask_for_one(tmp_path):
    tr = load_trace(write(tmp_path, "b.csv", BURSTGPT))
    assert tr.format == "burstgpt"
    assert [(e.offset_s, e.input_tokens, e.output_tokens) for e in tr.entries] == [(0.0, 120, 30), (1.5, 300, 1)]


def test_tokenswarm_records_replay_their_tasks_and_skip_requests_without_a_prompt_length(tmp_path):
    text = "\n".join([record(100.0, 40, 12), record(100.5, None, None), record(101.0, 80, None, task="code")])
    tr = load_trace(write(tmp_path, "records.jsonl", text + "\n"))
    assert tr.format == "records" and tr.skipped_count == 1
    assert [(e.offset_s, e.input_tokens, e.output_tokens, e.task) for e in tr.entries] == [
        (0.0, 40, 12, "qa"), (1.0, 80, 64, "code")]  # no output count: its max_tokens


@pytest.mark.parametrize("name, text, where", [
    ("m.jsonl", MOONCAKE + '{"timestamp": 5, "input_length": "many", "output_length": 1}\n', ":4: field 'input_length'"),
    ("m.jsonl", MOONCAKE + "{not json\n", ":4: invalid JSON"),
    ("m.jsonl", MOONCAKE + '{"timestamp": 5, "input_length": 3, "output_length": 1, "hash_ids": "x"}\n', ":4: field 'hash_ids'"),
    ("b.csv", BURSTGPT + "8.0,GPT-4,lots,1,1,API log\n", ":4: expected numbers"),
    ("b.csv", "Timestamp,Model\n1,x\n", ":1: CSV header lacks column(s) Request tokens, Response tokens"),
])
def test_a_malformed_line_is_an_error_naming_the_file_and_the_line(tmp_path, name, text, where):
    path = write(tmp_path, name, text)
    with pytest.raises(TraceError) as info:
        load_trace(path, "burstgpt" if name.endswith(".csv") else "auto")
    assert str(info.value).startswith(path) and where in str(info.value)


def test_an_unknown_or_empty_trace_is_refused_with_a_hint(tmp_path):
    with pytest.raises(TraceError, match="trace_format"):
        detect_format(write(tmp_path, "x.txt", "hello\n"))
    with pytest.raises(TraceError, match="empty"):
        detect_format(write(tmp_path, "e.jsonl", "\n\n"))


def scenario(tmp_path, trace: str, **load):
    return parse_scenario({"load": {"mode": "replay", "trace": trace, **load}}, str(tmp_path / "s.yaml"))


def test_replay_mode_plans_one_step_over_the_trace_scaled_by_speed(tmp_path):
    path = write(tmp_path, "m.jsonl", MOONCAKE)
    sc = scenario(tmp_path, path, speed=2.0)
    load = sc.load
    assert load.mode == "replay" and load.trace == path and load.trace_format == "mooncake"
    assert load.step_duration_s == pytest.approx(2.5 / 2 + 1.0)
    assert load.steps == (pytest.approx(3 / 2.25),)
    assert [t.name for t in sc.traffic.classes] == ["replay"]  # no classes needed
    r = sc.resolved()["load"]
    assert (r["trace"], r["trace_format"], r["speed"]) == (path, "mooncake", 2.0)


def test_a_bad_trace_line_stops_the_scenario_before_any_request_naming_the_line(tmp_path):
    path = write(tmp_path, "m.jsonl", MOONCAKE + "oops\n")
    with pytest.raises(ScenarioError) as info:
        scenario(tmp_path, path)
    assert info.value.field == "load.trace" and f"{path}:4" in str(info.value)


@pytest.mark.parametrize("load, field", [
    ({"steps": [1]}, "load.steps"),
    ({"speed": 0}, "load.speed"),
    ({"trace_format": "csv"}, "load.trace_format"),
])
def test_replay_options_are_validated_naming_the_field(tmp_path, load, field):
    with pytest.raises(ScenarioError) as info:
        scenario(tmp_path, write(tmp_path, "m.jsonl", MOONCAKE), **load)
    assert info.value.field == field


def test_trace_fields_outside_replay_mode_are_refused(tmp_path):
    with pytest.raises(ScenarioError) as info:
        parse_scenario({"traffic": {"classes": {"qa": {}}}, "load": {"mode": "open", "speed": 2}}, "s.yaml")
    assert info.value.field == "load.speed"


def test_replayed_prompts_share_text_exactly_where_their_hash_ids_do():
    rp = ReplayPrompts(None, seed=1, block_tokens=64)
    a = rp.text(200, (1, 2, 3, 4), random.Random(0))
    b = rp.text(200, (1, 2, 9, 9), random.Random(1))
    shared = rp._block(1) + "\n" + rp._block(2) + "\n"
    assert a.startswith(shared) and b.startswith(shared)
    assert a[len(shared):len(shared) + 50] != b[len(shared):len(shared) + 50]
    for n in (10, 200, 700):
        est = len(rp.text(n, (5, 6, 7), random.Random(3))) / rp.chars_per_token
        assert 0.85 * n <= est <= 1.15 * n, (n, est)


def test_the_dry_run_plan_names_the_trace_its_format_and_speed(tmp_path):
    from tokenswarm.commands.run import plan_text

    path = write(tmp_path, "m.jsonl", MOONCAKE)
    text = plan_text(scenario(tmp_path, path, speed=3), {}, None)
    assert f"step 0 replay: ~3 requests of {path} (mooncake) at speed x3" in text
