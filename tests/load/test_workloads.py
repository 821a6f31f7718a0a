"""Workloads of today's deployments: extraction, extra request-body fields, shared prefixes."""

from __future__ import annotations

import random

import orjson
import pytest

from tokenswarm.load.context import RunContext
from tokenswarm.load.users import Conversationalist
from tokenswarm.wire.stream import StreamState
from tokenswarm.workload.prompts import PromptSource
from tokenswarm.workload.quality import check_json, strip_fence
from tokenswarm.workload.scenario import ScenarioError, load_scenario, parse_scenario

EXTRACTION = {"kind": "extraction", "document_tokens": {"dist": "fixed", "value": 300}}


def scenario(classes: dict, **sections) -> object:
    return parse_scenario({"traffic": {"classes": classes, **sections.pop("traffic", {})}, **sections}, "s.yaml")


def error_of(data: dict) -> ScenarioError:
    with pytest.raises(ScenarioError) as info:
        parse_scenario(data, "s.yaml")
    return info.value


# ----------------------------------------------------------------------------- extraction

def test_an_extraction_prompt_carries_a_shipped_schema_as_response_format_and_names_it_in_the_text():
    task = scenario({"extraction": EXTRACTION}).traffic.task("extraction")
    src = PromptSource(task, None, seed=3)
    names = set()
    for i in range(30):
        p = src.next_prompt(random.Random(i))
        rf = p.params["response_format"]
        assert rf["type"] == "json_schema" and rf["json_schema"]["schema"] == p.schema
        assert orjson.dumps(p.schema).decode() in p.messages[0]["content"].replace(" ", "")
        names.add(rf["json_schema"]["name"])
    assert names == {"topic_card", "module_card", "contact_record"}


@pytest.mark.parametrize("fmt, expected", [("json_object", {"type": "json_object"}), ("none", None)])
def test_response_format_json_object_or_none_is_sent_as_configured(fmt, expected):
    task = scenario({"extraction": {**EXTRACTION, "response_format": fmt}}).traffic.task("extraction")
    p = PromptSource(task, None, seed=3).next_prompt(random.Random(1))
    assert p.params.get("response_format") == expected
    assert p.schema is not None  # the schema is still checked: it is asked for in the instruction


def test_extraction_prompts_grow_with_the_document_length():
    short = scenario({"extraction": {**EXTRACTION, "document_tokens": {"dist": "fixed", "value": 200}}})
    long = scenario({"extraction": {**EXTRACTION, "document_tokens": {"dist": "fixed", "value": 3000}}})
    n_short = len(PromptSource(short.traffic.task("extraction"), None, 1).next_prompt(random.Random(0)).messages[0]["content"])
    n_long = len(PromptSource(long.traffic.task("extraction"), None, 1).next_prompt(random.Random(0)).messages[0]["content"])
    assert n_long > 5 * n_short


def test_a_prompt_tokens_field_on_extraction_is_refused_naming_document_tokens():
    e = error_of({"traffic": {"classes": {"extraction": {**EXTRACTION, "prompt_tokens": 30}}}})
    assert e.field == "traffic.classes.extraction.prompt_tokens" and "document_tokens" in str(e)


SCHEMA = {"type": "object", "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
          "required": ["name", "age"], "additionalProperties": False}


@pytest.mark.parametrize("text, expected", [
    ('{"name": "Ada", "age": 36}', (True, True)),
    ('```json\n{"name": "Ada", "age": 36}\n```', (True, True)),
    ('{"name": "Ada", "age": "36"}', (True, False)),
    ('{"name": "Ada"}', (True, False)),
    ('{"name": "Ada", "age": 36, "x": 1}', (True, False)),
    ('{"name": "Ada", "age": 3', (False, False)),
    ("Sure! Here is the JSON: {}", (False, False)),
])
def test_quality_check_tells_json_validity_from_schema_validity(text, expected):
    assert check_json(text, SCHEMA) == expected


def test_without_a_schema_only_json_validity_is_judged():
    assert check_json("[1, 2]", None) == (True, None)
    assert check_json("nope", None) == (False, None)
    assert strip_fence("```\n[1]\n```") == "[1]"


# ----------------------------------------------------------------------------- extra_body

def test_extra_body_merges_target_then_traffic_then_class_and_is_in_the_resolved_scenario():
    sc = scenario({"qa": {"extra_body": {"top_k": 5, "min_p": 0.1}}, "code": {}},
                  target={"extra_body": {"top_k": 50, "repetition_penalty": 1.1}},
                  traffic={"extra_body": {"chat_template_kwargs": {"enable_thinking": False}}})
    qa, code = sc.traffic.task("qa"), sc.traffic.task("code")
    assert qa.extra_body == {"top_k": 5, "min_p": 0.1, "repetition_penalty": 1.1,
                             "chat_template_kwargs": {"enable_thinking": False}}
    assert code.extra_body == {"top_k": 50, "repetition_penalty": 1.1, "chat_template_kwargs": {"enable_thinking": False}}
    r = sc.resolved()
    assert r["target"]["extra_body"] == {"top_k": 50, "repetition_penalty": 1.1}
    assert r["traffic"]["extra_body"] == {"chat_template_kwargs": {"enable_thinking": False}}
    assert r["traffic"]["classes"]["qa"]["extra_body"] == {"top_k": 5, "min_p": 0.1}
    assert r["traffic"]["classes"]["qa"]["extra_body_sent"] == qa.extra_body


@pytest.mark.parametrize("where, value, words", [
    ("target.extra_body", [1, 2], "mapping"),
    ("traffic.extra_body", {"max_tokens": 5}, "set by tokenswarm"),
    ("traffic.classes.qa.extra_body", {"temperature": 0.5}, "sampling.temperature"),
    ("traffic.classes.qa.extra_body", {"stream": False}, "set by tokenswarm"),
])
def test_a_bad_extra_body_is_an_error_naming_the_field(where, value, words):
    data = {"traffic": {"classes": {"qa": {}}}}
    node = data
    *parents, last = where.split(".")
    for p in parents:
        node = node.setdefault(p, {})
    node[last] = value
    e = error_of(data)
    assert e.field.startswith(where) and words in str(e)


def test_extraction_refuses_two_response_formats():
    e = error_of({"traffic": {"classes": {"extraction": {**EXTRACTION, "extra_body": {"response_format": {}}}}}})
    assert e.field == "traffic.classes.extraction.response_format"


class _Sink:
    def __init__(self) -> None:
        self.records = []

    def add(self, record) -> None:
        self.records.append(record)


def _send_one(monkeypatch, sc, task_name: str):
    """Send one request of ``task_name`` through the user's send path; the call itself is refused."""
    bodies: list[dict] = []

    def refused(transport, path, body, headers, *, identity, anchor, **kw):
        bodies.append(orjson.loads(body))
        rec = StreamState(0.0).finish(0.001, outcome="http_error", http_status=None, error="connection refused",
                                      anchor=anchor, base=identity.record_fields())
        return rec, ""

    monkeypatch.setattr("tokenswarm.load.users.stream_call", refused)
    sink = _Sink()
    ctx = RunContext(scenario=sc, run_id="r", worker_id="w", base_url="http://127.0.0.1:9", model="m", sink=sink,
                     role="local")
    task = sc.traffic.task(task_name)
    ctx.prompt_sources = {task_name: PromptSource(task, None, seed=1)}
    Conversationalist(ctx, None, None, "X").single(task, random.Random(5), ctx.clock())
    return bodies[0], sink.records[0]


def test_extra_body_fields_are_sent_and_change_the_request_key(monkeypatch):
    plain = scenario({"qa": {}})
    extra = scenario({"qa": {"extra_body": {"top_k": 20, "logprobs": True}}})
    body_a, rec_a = _send_one(monkeypatch, plain, "qa")
    body_b, rec_b = _send_one(monkeypatch, extra, "qa")
    assert body_b["top_k"] == 20 and body_b["logprobs"] is True and "top_k" not in body_a
    assert body_a["messages"] == body_b["messages"]
    assert rec_a.request_key != rec_b.request_key
    assert rec_a.outcome == "http_error" and rec_a.json_valid is None


def test_an_extraction_request_sends_its_response_format(monkeypatch):
    body, rec = _send_one(monkeypatch, scenario({"extraction": EXTRACTION}), "extraction")
    assert body["response_format"]["type"] == "json_schema"
    assert rec.json_valid is None and rec.schema_valid is None  # no answer: not observed


# ----------------------------------------------------------------------------- shipped scenarios

@pytest.mark.parametrize("name", ["mix", "spec-baseline", "spec-candidate"])
def test_the_mixed_and_spec_ab_scenarios_include_extraction(name):
    from tokenswarm.workload.scenario import resolve_scenario_path

    sc = load_scenario(resolve_scenario_path(name))
    assert sc.traffic.task("extraction").kind == "extraction"


# ----------------------------------------------------------------------------- shared prefixes

def _prefix_source(worker_seed: int, **sp) -> PromptSource:
    sc = scenario({"qa": {"shared_prefix": {"tokens": 300, "count": 4, **sp}}})
    return PromptSource(sc.traffic.task("qa"), None, seed=worker_seed, prefix_seed=7)


def test_every_worker_sends_the_same_shared_prefixes_first_as_a_system_message():
    a, b = _prefix_source(1000), _prefix_source(2001)
    assert a.prefixes == b.prefixes and len(set(a.prefixes)) == 4
    p = a.next_prompt(random.Random(0))
    assert p.messages[0]["role"] == "system" and p.messages[0]["content"] in a.prefixes
    assert p.messages[1]["role"] == "user"
    est = len(a.prefixes[0]) / a.counter.chars_per_token
    assert 0.8 * 300 <= est <= 1.2 * 300


def test_zipf_popularity_favours_the_first_prefixes_and_uniform_does_not():
    rng = random.Random(1)
    uni, zipf = _prefix_source(1), _prefix_source(1, popularity="zipf", zipf_s=1.5)
    u = [uni.draw_prefix(rng) for _ in range(4000)]
    z = [zipf.draw_prefix(rng) for _ in range(4000)]
    assert all(800 < u.count(i) < 1200 for i in range(4))
    expected0 = 1 / sum(1 / (i + 1) ** 1.5 for i in range(4))  # ~0.59
    assert abs(z.count(0) / 4000 - expected0) < 0.03 and z.count(3) < z.count(2) < z.count(1) < z.count(0)


def test_multi_turn_conversations_start_with_the_shared_prefix():
    sc = scenario({"multi_turn": {"shared_prefix": {"tokens": 100, "count": 1}}})
    src = PromptSource(sc.traffic.task("multi_turn"), None, seed=1, prefix_seed=1)
    assert src.conversation(random.Random(0)).system == src.prefixes[0]


@pytest.mark.parametrize("sp, field", [
    ({"count": 3}, "shared_prefix.tokens"),
    ({"tokens": 0}, "shared_prefix.tokens"),
    ({"tokens": 10, "popularity": "pareto"}, "shared_prefix.popularity"),
    ({"tokens": 10, "zipf_s": 2}, "shared_prefix.zipf_s"),
    ({"tokens": 10, "size": 2}, "shared_prefix.size"),
])
def test_a_bad_shared_prefix_is_an_error_naming_its_field(sp, field):
    e = error_of({"traffic": {"classes": {"qa": {"shared_prefix": sp}}}})
    assert e.field == f"traffic.classes.qa.{field}"


# ----------------------------------------------------------------------------- length grid

def test_the_length_grid_has_four_corners_and_a_long_context_class_each_its_own_task():
    from tokenswarm.workload.scenario import resolve_scenario_path

    sc = load_scenario(resolve_scenario_path("length-grid"))
    t = {c.name: c for c in sc.traffic.classes}
    assert set(t) == {"short_in_short_out", "long_in_short_out", "short_in_long_out", "long_in_long_out",
                      "long_context"}
    rng = random.Random(0)

    def mean(dist) -> float:
        return sum(dist.sample_int(rng) for _ in range(200)) / 200

    short_in, long_in = mean(t["short_in_short_out"].prompt_tokens), mean(t["long_in_short_out"].prompt_tokens)
    short_out, long_out = mean(t["short_in_short_out"].max_tokens), mean(t["short_in_long_out"].max_tokens)
    assert long_in > 10 * short_in and long_out > 10 * short_out
    assert mean(t["long_in_long_out"].prompt_tokens) > 10 * short_in
    assert mean(t["long_in_long_out"].max_tokens) > 10 * short_out
    assert mean(t["long_context"].prompt_tokens) > 20_000
    assert sc.load.mode == "open"  # every task is drawn at every step


def test_a_long_context_prompt_of_tens_of_thousands_of_tokens_comes_from_the_built_in_corpus():
    from tokenswarm.workload.scenario import resolve_scenario_path

    task = load_scenario(resolve_scenario_path("length-grid")).traffic.task("long_context")
    src = PromptSource(task, None, seed=1, pool_size=4)
    p = src.next_prompt(random.Random(3))
    assert p.target_prompt_tokens >= 20_000
    assert len(p.messages[0]["content"]) / src.counter.chars_per_token > 0.9 * p.target_prompt_tokens
