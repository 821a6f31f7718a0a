"""The typed reading of completion chunks (msgspec structs) gives exactly the record the general
reading (every event decoded into dicts) gives, for every event shape servers send; shapes the
typed reading does not cover go down the general path instead of being misread."""

from __future__ import annotations

import orjson
import pytest

from tokenswarm.wire import stream
from tokenswarm.wire.chunkjson import Chunk, decode_chunk
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.stream import StreamState

ANCHOR = WallAnchor(wall_s=1_000_000.0, mono_s=100.0)
BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=1_000_000.0, schedule_lag_ms=0.0)


def ev(obj, event=None):
    return (event, obj if isinstance(obj, bytes) else orjson.dumps(obj))


def chunk(text=None, cum=None, finish=None, key="content", **top):
    delta = {} if text is None else {key: text}
    o = {"id": "cmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "m",
         "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}], **top}
    if cum is not None:
        o["usage"] = {"prompt_tokens": 7, "total_tokens": 7 + cum, "completion_tokens": cum}
    return ev(o)


DONE = (None, b"[DONE]")

STREAMS = {
    "vllm, usage on every chunk": [chunk("", 0), chunk("a b", 2), chunk(" c d e", 5), chunk(" f", 6, "length"), DONE],
    "vllm, final usage only": [chunk(""), chunk("a"), chunk(" b", finish="stop"),
                               ev({"id": "cmpl-1", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 2}}),
                               DONE],
    "no usage at all": [chunk("a"), chunk(" b", finish="stop"), DONE],
    "token ids": [ev({"id": "x", "choices": [{"delta": {"content": "ab"}, "token_ids": [1, 2]}]}),
                  ev({"id": "x", "choices": [{"delta": {"content": "c"}, "token_ids": [3], "finish_reason": "stop"}]}),
                  DONE],
    "token ids not a list": [ev({"id": "x", "choices": [{"delta": {"content": "ab"}, "token_ids": None}]}), DONE],
    "completions api text": [ev({"id": "c", "choices": [{"text": "hi", "finish_reason": None}],
                                 "usage": {"completion_tokens": 1}}),
                             ev({"id": "c", "choices": [{"text": " there", "finish_reason": "length"}],
                                 "usage": {"completion_tokens": 2}}), DONE],
    "reasoning then answer": [chunk("think", 1, key="reasoning_content"), chunk("more", 2, key="reasoning"),
                              chunk("answer", 3, "stop",), DONE],
    "reasoning details": [chunk("t", 1, key="reasoning_content"),
                          ev({"id": "cmpl-1", "choices": [{"delta": {"content": "a"}, "finish_reason": "stop"}],
                              "usage": {"completion_tokens": 2, "completion_tokens_details": {"reasoning_tokens": 1}}}),
                          DONE],
    "llama.cpp finish chunk with timings": [
        chunk("a"), chunk(" b"),
        ev({"id": "cmpl-1", "choices": [{"delta": {}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 2},
            "timings": {"predicted_n": 2, "draft_n": 4, "draft_n_accepted": 2}}), DONE],
    "vllm metrics trailer": [chunk("a", 1, "stop"),
                             ev({"id": "x", "choices": [], "usage": {"completion_tokens": 1},
                                 "metrics": {"speculative_decoding": {"num_draft_tokens": 4, "num_accepted_tokens": 3}}}),
                             DONE],
    "sglang spec info": [chunk("a", 1, "stop", sglext={"spec_accept_length": 2.5}), DONE],
    "error event": [chunk("a", 1), ev({"error": {"message": "engine died", "type": "InternalServerError"}}, "error")],
    "error object without event type": [chunk("a", 1), ev({"error": {"message": "boom", "code": 500}})],
    "malformed payloads": [chunk("a", 1), ev(b"{not json"), ev(b"[1, 2]"), ev(b"42"), chunk(" b", 2, "stop"), DONE],
    "odd types": [ev({"id": 5, "choices": [{"delta": {"content": "a"}}], "usage": {"completion_tokens": "1"}}),
                  ev({"id": "x", "choices": [{"delta": None, "text": "b"}], "usage": [1]}),
                  ev({"id": "x", "choices": {"0": {}}, "usage": {"completion_tokens": 2.0}}),
                  ev({"id": "x", "choices": [{"delta": {"content": None}, "finish_reason": "stop"}]}), DONE],
    "choices and deltas of the wrong type": [chunk("a", 1), ev({"choices": [{"delta": "text"}]}), ev({"choices": ["x"]}),
                                             chunk(" b", 2, "stop"), DONE],
    "null fields": [ev({"id": None, "choices": None, "usage": None}), chunk("a", None, None), DONE],
    "unicode and escapes": [chunk("caf\u00e9 \"q\" \\n \u2603", 3), ev(rb'{"id":"x","choices":[{"delta":{"content":"\ud83d\ude00 \u00e9\t"},"finish_reason":"stop"}],'
                                                                         rb'"usage":{"completion_tokens":4}}'), DONE],
}


def record(events, general_only: bool, monkeypatch):
    with monkeypatch.context() as m:
        m.setattr(stream, "_feed_chunks", None)  # the Python readers alone (the C path: test_feed_chunks.py)
        if general_only:
            m.setattr(stream, "decode_chunk", lambda data: None)
        s = StreamState(100.0)
        for i, e in enumerate(events):
            s.on_events(100.1 + i * 0.01, [e])
        return s.finish(101.0, http_status=200, anchor=ANCHOR, base=BASE, keep_output=True).to_dict()


@pytest.mark.parametrize("name", STREAMS)
def test_the_typed_reading_gives_the_record_the_general_reading_gives(name, monkeypatch):
    events = STREAMS[name]
    assert record(events, False, monkeypatch) == record(events, True, monkeypatch)


def test_choices_of_the_wrong_shape_are_a_stream_error_that_names_them(monkeypatch):
    rec = record(STREAMS["odd types"], False, monkeypatch)
    assert rec["outcome"] == "stream_error" and rec["error"] == "malformed SSE: choices is not a list of objects"
    rec = record([chunk("a", 1), ev({"choices": [{"delta": "text"}]}), DONE], False, monkeypatch)
    assert rec["error"] == "malformed SSE: choices[0].delta is not an object"


def test_the_commonest_chunks_take_the_typed_path():
    for e in STREAMS["vllm, usage on every chunk"][:-1] + STREAMS["completions api text"][:-1]:
        assert isinstance(decode_chunk(e[1]), Chunk)


@pytest.mark.parametrize("payload", [
    b"{not json", b"[1, 2]", b"42",
    b'{"error": {"message": "x"}}',
    b'{"choices": [], "metrics": {}}', b'{"choices": [], "timings": {}}', b'{"choices": [], "sglext": {}}',
    b'{"choices": {"0": {}}}', b'{"choices": [{"delta": "text"}]}', b'{"usage": [1]}',
])
def test_everything_else_goes_down_the_general_path(payload):
    assert decode_chunk(payload) is None
