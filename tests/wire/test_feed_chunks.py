"""The C reading of common completion chunks (``feed_chunks``, ``_chunks.c``) leaves a stream's
state exactly as the Python loop of ``StreamState.on_events`` does, event by event: on the shapes
servers send, on every malformed or unusual payload, and on randomly damaged streams. Whatever
it does not take, the Python loop reads; whichever reads an event, the record is the same."""

from __future__ import annotations

import random
from typing import Any

import orjson
import pytest

from tests.wire.test_chunk_decoding import STREAMS, chunk, ev
from tokenswarm.wire import stream
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.limits import StreamLimits
from tokenswarm.wire.sse import StreamLimitExceeded
from tokenswarm.wire.stream import StreamState

pytestmark = pytest.mark.skipif(stream._feed_chunks is None, reason="the C extension is not built or is turned off")

ANCHOR = WallAnchor(wall_s=1_000_000.0, mono_s=100.0)
BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=1_000_000.0, schedule_lag_ms=0.0)
DONE = (None, b"[DONE]")
USAGE_KEYS = ("prompt_tokens", "completion_tokens", "completion_tokens_details")


def snapshot(state: StreamState) -> dict[str, Any]:
    """Every slot of the state; the usage by what is read from it (a dict or the typed struct)."""
    out = {}
    for name in StreamState.__slots__:
        v = getattr(state, name)
        if name == "usage" and v is not None:
            v = {k: v.get(k) for k in USAGE_KEYS}
        elif name in ("times", "tokens"):
            v = list(v)
        elif name == "limits":
            v = (v.max_output_tokens, v.max_response_bytes)
        out[name] = v
    return out


def feed(deliveries: list[list[tuple]], native: bool, limits: StreamLimits | None = None) -> dict[str, Any]:
    """The state, the error raised (if any) and the record after ``deliveries`` (one list of
    events per read, 10 ms apart), read with or without the C path."""
    saved = stream._feed_chunks
    stream._feed_chunks = saved if native else None
    try:
        s = StreamState(100.0, limits or StreamLimits(max_output_tokens=1000))
        raised = None
        for i, events in enumerate(deliveries):
            try:
                s.on_events(100.1 + i * 0.01, list(events))
            except StreamLimitExceeded as exc:
                raised = str(exc)
                break
        rec = s.finish(101.0, http_status=200, anchor=ANCHOR, base=BASE, keep_output=True,
                       outcome="stream_error" if raised else None, error=raised).to_dict()
        return {"state": snapshot(s), "raised": raised, "record": rec}
    finally:
        stream._feed_chunks = saved


def same_either_way(deliveries: list[list[tuple]], limits: StreamLimits | None = None) -> dict[str, Any]:
    c, py = feed(deliveries, True, limits), feed(deliveries, False, limits)
    assert c == py
    return c


def one_per_read(events: list[tuple]) -> list[list[tuple]]:
    return [[e] for e in events]


@pytest.mark.parametrize("name", STREAMS)
def test_every_server_shape_gives_the_same_state_and_record_one_event_per_read(name):
    same_either_way(one_per_read(STREAMS[name]))


@pytest.mark.parametrize("name", STREAMS)
def test_every_server_shape_gives_the_same_state_and_record_all_in_one_read(name):
    same_either_way([list(STREAMS[name])])


def test_the_commonest_chunks_are_all_taken_by_the_c_path():
    events = [chunk("", 0), chunk("a b", 2), chunk(" c d e", 5), chunk(" f", 6, "length"), DONE,
              ev({"id": "c", "choices": [{"text": "hi", "finish_reason": None}], "usage": {"completion_tokens": 7}})]
    s = StreamState(100.0)
    assert stream._feed_chunks(s, 100.1, events) == (len(events), 4)
    assert list(s.tokens) == [2, 3, 1, 1] and "".join(s.text_parts) == "a b c d e fhi"
    assert s.done and s.finish_reason == "length" and s.last_cum == 7 and s.response_id == "cmpl-1"


def test_a_state_of_another_class_is_left_to_the_python_loop():
    class Other(StreamState):
        __slots__ = ()

    assert stream._feed_chunks(Other(100.0), 100.1, [chunk("a", 1)]) == (0, 0)


def test_the_c_path_stops_at_the_first_event_it_leaves_and_the_loop_reads_the_rest():
    events = [chunk("a", 1), chunk("b", 2, key="reasoning_content"), chunk(" c", 3)]
    s = StreamState(100.0)
    assert stream._feed_chunks(s, 100.1, events) == (1, 1)
    same_either_way([events])


PAYLOADS = [
    # what real servers send, spelled differently
    b'{"choices":[{"finish_reason":null,"index":0,"delta":{"content":" w"}}],"created":1,"id":"x",'
    b'"model":"m","system_fingerprint":"b1","object":"chat.completion.chunk","usage":{"completion_tokens":1,'
    b'"prompt_tokens":4,"total_tokens":5}}',
    b' { "id" : "x" , "choices" : [ { "delta" : { "content" : "a" } } ] , "usage" : { "completion_tokens" : 2 } } ',
    b'{"id":"x","choices":[{"delta":{"role":"assistant","tool_calls":[{"id":"t","function":{"arguments":"{}"}}]}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"},"logprobs":{"content":[{"token":"a","logprob":-0.5,'
    b'"bytes":[97],"top_logprobs":[]}]}}],"usage":{"completion_tokens":3}}',
    # escapes and Unicode, well formed
    rb'{"id":"x","choices":[{"delta":{"content":"\"\\\/\b\f\n\r\t\u0041\u00e9\u2603\ud83d\ude00"}}]}',
    '{"id":"\u00e9","choices":[{"delta":{"content":"caf\u00e9 \u2603 \U0001f600"}}]}'.encode(),
    rb'{"id":"x","choices":[{"delta":{"content":"\u0000"}}]}',
    # escapes and Unicode, not well formed
    rb'{"id":"x","choices":[{"delta":{"content":"\ud83d"}}]}',
    rb'{"id":"x","choices":[{"delta":{"content":"\ude00 a"}}]}',
    rb'{"id":"x","choices":[{"delta":{"content":"\ud83d\u0041"}}]}',
    rb'{"id":"x","choices":[{"delta":{"content":"\x"}}]}',
    rb'{"id":"x","choices":[{"delta":{"content":"\u12"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a\xffb"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"\xc0\xaf"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"\xed\xa0\x80"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"\xe2\x98"}}]}',
    b'{"id":"x","model":"m\xff","choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","model":"\xf4\x90\x80\x80","choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a\tb"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a\nb"}}]}',
    rb'{"i\u0064":"x","choices":[{"delta":{"content":"a"}}]}',
    # numbers
    b'{"id":"x","created":01,"choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","created":1e999,"choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","created":-0.5e-3,"choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","created":1.,"choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","created":+1,"choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1.0}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1e0}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":-1}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":99999999999999999999}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":999999999999999999}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":"4","completion_tokens":1}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"prompt_tokens":-4,"completion_tokens":1}}',
    # repeated keys, odd shapes
    b'{"id":"x","id":"y","choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a","content":"b"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}},{"delta":{"content":"b"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"},"index":0},1]}',
    b'{"id":"x","choices":[]}',
    b'{"id":"x","choices":null,"usage":{"completion_tokens":5}}',
    b'{"id":"x","choices":[{"delta":null,"text":"t"}]}',
    b'{"id":"x","choices":[{"delta":{},"finish_reason":"stop"}]}',
    b'{"id":"x","choices":[{"delta":{"content":""},"finish_reason":""}]}',
    b'{"id":"x","choices":[{"delta":{"content":5}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"},"finish_reason":1}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a","reasoning":null}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"","reasoning":""}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"},"token_ids":[1,2]}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"usage":{"completion_tokens":1,'
    b'"completion_tokens_details":null}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"error":null}',
    b'{"id":["x"],"choices":[{"delta":{"content":"a"}}]}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"extra":' + b"[" * 70 + b"]" * 70 + b"}",
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"extra":' + b"[" * 20 + b"]" * 20 + b"}",
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"extra":{"a":[true,false,null,{"b":"c"}]}}',
    # not JSON, or not all of it
    b'{"id":"x","choices":[{"delta":{"content":"a"}}]}}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}]} x',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}]',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"flag":tru}',
    b'{"id":"x","choices":[{"delta":{"content":"a"}}],"flag":nul}',
    b"{'id':'x'}", b"", b"[DONE] ", b"[DONE]", b"null", b"{}",
]


@pytest.mark.parametrize("payload", PAYLOADS, ids=range(len(PAYLOADS)))
def test_each_unusual_payload_gives_the_same_state_and_record(payload):
    events = [chunk("a", 1), (None, payload), chunk(" b", 2, "stop"), DONE]
    same_either_way(one_per_read(events))
    same_either_way([events])
    same_either_way([[(None, payload)], [DONE]])


def test_the_running_caps_raise_the_same_error_whichever_reads_the_chunk():
    limits = StreamLimits(max_output_tokens=5)
    past_cap = same_either_way(one_per_read([chunk("a", 1), chunk("b", 6), DONE]), limits)
    assert "completion_tokens" in past_cap["raised"] and past_cap["state"]["tokens"] == [1]
    backwards = same_either_way(one_per_read([chunk("a", 3), chunk("b", 2), DONE]), limits)
    assert "completion_tokens" in backwards["raised"] and backwards["state"]["tokens"] == [3]
    at_cap = same_either_way(one_per_read([chunk("a", 2), chunk("b", 5), DONE]), limits)
    assert at_cap["raised"] is None and at_cap["record"]["outcome"] == "ok" and at_cap["state"]["tokens"] == [2, 3]


def _random_event(rng: random.Random) -> tuple:
    """A chunk from the shapes above, sometimes damaged at the byte level."""
    pick = rng.random()
    if pick < 0.05:
        return DONE
    if pick < 0.15:
        payload = PAYLOADS[rng.randrange(len(PAYLOADS))]
    else:
        text = rng.choice(["", " w", "caf\u00e9", "\u2603\U0001f600", 'q"\\', "a\nb", "x" * rng.randrange(1, 40)])
        obj: dict[str, Any] = {"id": rng.choice(["cmpl-1", None]), "object": "chat.completion.chunk", "created": 17,
                               "model": "m", "choices": [{"index": 0, "delta": {"content": text},
                                                          "finish_reason": rng.choice([None, None, "stop"])}]}
        if rng.random() < 0.7:
            obj["usage"] = {"prompt_tokens": 9, "completion_tokens": rng.randrange(0, 12)}
        if rng.random() < 0.1:
            obj["choices"] = []
        payload = orjson.dumps(obj)
        if rng.random() < 0.3:  # python's own JSON: every non-ASCII character escaped
            import json

            payload = json.dumps(obj).encode()
    if rng.random() < 0.15 and payload:  # damage: cut, insert or replace a byte
        i = rng.randrange(len(payload))
        how = rng.randrange(3)
        b = bytes([rng.choice([0x00, 0x0A, 0x22, 0x5C, 0x7B, 0x7D, 0x2C, 0x80, 0xC3, 0xFF, 0x31])])
        payload = payload[:i] if how == 0 else payload[:i] + b + payload[i + (how == 2):]
    return (None, payload) if rng.random() < 0.97 else ("error", payload)


@pytest.mark.parametrize("seed", range(200))
def test_random_streams_give_the_same_state_and_record(seed):
    rng = random.Random(seed)
    events = [_random_event(rng) for _ in range(rng.randrange(1, 25))]
    deliveries, i = [], 0
    while i < len(events):  # reads of one to four events
        k = rng.randrange(1, 5)
        deliveries.append(events[i:i + k])
        i += k
    same_either_way(deliveries, StreamLimits(max_output_tokens=rng.choice([10, 1000])))


def _json_ok(payload: bytes) -> bool:
    try:
        orjson.loads(payload)
    except orjson.JSONDecodeError:
        return False
    return True


@pytest.mark.parametrize("payload", [p for p in PAYLOADS if p != b"[DONE]" and not _json_ok(p)],
                         ids=lambda p: p[:40].decode("utf-8", "replace"))
def test_the_c_path_takes_no_payload_that_strict_json_rejects(payload):
    """msgspec skips fields without checking all of them (invalid UTF-8, 1e999): the C path checks
    everything, so a payload it takes is one every reader takes alike."""
    assert stream._feed_chunks(StreamState(100.0), 100.1, [(None, payload)]) == (0, 0)
