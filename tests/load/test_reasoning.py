"""Reasoning streams: two-phase timing, counts per kind, and histories that never echo reasoning."""

from __future__ import annotations

import random

import orjson

from tokenswarm.load.context import RunContext
from tokenswarm.load.users import Conversationalist
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.stream import StreamState
from tokenswarm.workload.prompts import PromptSource
from tokenswarm.workload.scenario import parse_scenario

ANCHOR = WallAnchor(wall_s=1_000_000.0, mono_s=100.0)
BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=1_000_000.0, schedule_lag_ms=0.0)


def delta(key: str, text: str, cum: int | None = None, finish: str | None = None, details: int | None = None):
    o: dict = {"id": "x", "choices": [{"index": 0, "delta": {key: text}, "finish_reason": finish}]}
    if cum is not None:
        o["usage"] = {"prompt_tokens": 5, "completion_tokens": cum}
        if details is not None:
            o["usage"]["completion_tokens_details"] = {"reasoning_tokens": details}
    return (None, orjson.dumps(o))


def reasoning_stream(key: str = "reasoning_content", usage: bool = True) -> StreamState:
    s = StreamState(sent_s=100.0)
    c = (lambda n: n) if usage else (lambda n: None)
    s.on_events(100.10, [delta(key, "Let me think", c(2))])
    s.on_events(100.12, [delta(key, " about it.", c(5))])
    s.on_events(100.30, [delta("content", "The answer", c(7))])
    s.on_events(100.32, [delta("content", " is 42.", c(9), finish="stop", details=5 if usage else None)])
    s.on_events(100.32, [(None, b"[DONE]")])
    return s


def test_a_reasoning_stream_is_timed_in_two_phases_and_ttft_keeps_first_token_of_any_kind():
    r = reasoning_stream().finish(100.33, http_status=200, anchor=ANCHOR, base=BASE)
    assert r.ttft_ms == 100.0 and r.first_reasoning_token_ms == 100.0
    assert r.first_answer_token_ms == 300.0
    assert (r.reasoning_chunks, r.answer_chunks) == (2, 2)
    assert r.reasoning_tokens == 5 and r.output_tokens == 9
    assert r.chunk_tokens == [2, 3, 2, 2]


def test_the_older_reasoning_key_counts_too_and_tokens_fall_back_to_exact_chunk_counts():
    s = StreamState(sent_s=100.0)
    s.on_events(100.1, [delta("reasoning", "hmm", 3)])
    s.on_events(100.2, [delta("content", "ok", 4, finish="stop")])
    r = s.finish(100.3, http_status=200, anchor=ANCHOR, base=BASE)
    assert r.reasoning_chunks == 1 and r.reasoning_tokens == 3 and r.first_answer_token_ms == 200.0


def test_the_answer_text_and_its_hash_exclude_the_reasoning():
    s = reasoning_stream()
    assert s.text() == "The answer is 42."
    r = s.finish(100.33, http_status=200, anchor=ANCHOR, base=BASE, keep_output=True)
    assert r.output_text == "The answer is 42."


def test_without_usage_reasoning_tokens_are_unknown_and_the_estimate_counts_both_kinds():
    r = reasoning_stream(usage=False).finish(100.33, http_status=200, anchor=ANCHOR, base=BASE)
    assert r.reasoning_tokens is None and r.tokens_estimated
    assert r.output_tokens == round(len("Let me think about it.The answer is 42.") / 4)


def test_a_plain_stream_leaves_every_reasoning_field_unobserved():
    s = StreamState(sent_s=100.0)
    s.on_events(100.1, [delta("content", "hi", 1, finish="stop")])
    r = s.finish(100.2, http_status=200, anchor=ANCHOR, base=BASE)
    assert (r.first_reasoning_token_ms, r.first_answer_token_ms, r.reasoning_chunks, r.reasoning_tokens) == (
        None, None, None, None)


def test_a_stream_that_only_reasons_has_no_first_answer_token():
    s = StreamState(sent_s=100.0)
    s.on_events(100.1, [delta("reasoning_content", "thinking", 4, finish="length")])
    r = s.finish(100.2, http_status=200, anchor=ANCHOR, base=BASE)
    assert r.first_reasoning_token_ms == 100.0 and r.first_answer_token_ms is None and r.answer_chunks == 0


def test_multi_turn_histories_carry_the_answer_and_never_the_reasoning(monkeypatch):
    bodies: list[dict] = []

    def fake_stream_call(transport, path, body, headers, *, identity, anchor, **kw):
        bodies.append(orjson.loads(body))
        s = reasoning_stream()
        return s.finish(100.33, http_status=200, anchor=anchor, base=identity.record_fields()), s.text()

    monkeypatch.setattr("tokenswarm.load.users.stream_call", fake_stream_call)
    sc = parse_scenario({"traffic": {"classes": {"multi_turn": {"turns": {"dist": "fixed", "value": 3},
                                                                 "think_time_s": 0}}}}, "s.yaml")

    class Sink:
        def add(self, record):
            pass

    ctx = RunContext(scenario=sc, run_id="r", worker_id="w", base_url="http://127.0.0.1:9", model="m",
                     sink=Sink(), role="local")
    task = sc.traffic.task("multi_turn")
    ctx.prompt_sources = {"multi_turn": PromptSource(task, None, seed=1)}
    Conversationalist(ctx, None, None, "X").conversation(task, random.Random(2), ctx.clock())
    assert len(bodies) == 3
    replies = [m for m in bodies[2]["messages"] if m["role"] == "assistant"]
    assert [m["content"] for m in replies] == ["The answer is 42."] * 2
    assert all("think" not in orjson.dumps(m).decode() for m in bodies[2]["messages"])
