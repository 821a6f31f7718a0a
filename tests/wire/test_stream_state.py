"""StreamState builds records from timed events; times are scripted, nothing sleeps."""

import hashlib

import orjson

from tokenswarm.record import RequestRecord
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.reported import error_from_body
from tokenswarm.wire.stream import StreamState

ANCHOR = WallAnchor(wall_s=1_000_000.0, mono_s=100.0)
BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=1_000_000.0, schedule_lag_ms=0.0)


def ev(obj):
    return (None, orjson.dumps(obj))


def content(text, cum=None, finish=None, token_ids=None):
    c = {"index": 0, "delta": {"content": text}, "finish_reason": finish}
    if token_ids is not None:
        c["token_ids"] = token_ids
    o = {"id": "resp-1", "choices": [c]}
    if cum is not None:
        o["usage"] = {"prompt_tokens": 9, "completion_tokens": cum}
    return ev(o)


ROLE = ev({"id": "resp-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}],
           "usage": {"prompt_tokens": 9, "completion_tokens": 0}})
TRAILER = ev({"id": "resp-1", "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 6}})
DONE = (None, b"[DONE]")


def finish(state, end, **kw):
    kw.setdefault("http_status", 200)
    return state.finish(end, anchor=ANCHOR, base=BASE, **kw)


def test_multi_token_chunks_are_counted_from_usage_deltas():
    s = StreamState(sent_s=100.0)
    s.on_events(100.0, [ROLE])
    s.on_events(100.2, [content("a", 1)])
    s.on_events(100.25, [content("b c d", 4)])  # a speculative step: 3 tokens in one chunk
    s.on_events(100.3, [content("e f", 6, finish="length")])
    s.on_events(100.3, [TRAILER, DONE])
    r = finish(s, 100.31)
    assert isinstance(r, RequestRecord)
    assert r.outcome == "ok"
    assert r.chunk_tokens == [1, 3, 2]
    assert r.chunk_offsets_ms == [200.0, 250.0, 300.0]
    assert r.ttft_ms == 200.0 and r.e2e_ms == 300.0  # the last delivery ([DONE]), not the app's 310
    assert r.e2e_app_ms == 310.0
    assert r.output_tokens == 6 and r.prompt_tokens == 9 and not r.tokens_estimated
    assert r.finish_reason == "length" and r.response_id == "resp-1"
    assert r.output_sha256 == hashlib.sha256(b"ab c de f").hexdigest()
    assert r.sent_at_s == 1_000_000.0


def test_role_only_and_usage_only_events_are_not_chunks():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [ROLE, TRAILER])
    assert len(s.times) == 0


def test_without_usage_per_chunk_counts_are_unknown_not_guessed():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [content("hello there")])
    s.on_events(0.2, [content(" world", finish="stop"), DONE])
    r = finish(s, 0.2)
    assert r.chunk_tokens is None
    assert r.output_tokens == round(len("hello there world") / 4) and r.tokens_estimated


def test_final_usage_without_per_chunk_usage_gives_exact_total_but_no_chunk_counts():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [content("a")])
    s.on_events(0.2, [content("b", finish="stop")])
    s.on_events(0.2, [TRAILER, DONE])
    r = finish(s, 0.2)
    assert r.output_tokens == 6 and not r.tokens_estimated and r.chunk_tokens is None


def test_token_ids_give_exact_counts():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [content("ab", token_ids=[5, 6])])
    s.on_events(0.2, [content("c", token_ids=[7], finish="stop"), DONE])
    r = finish(s, 0.2)
    assert r.chunk_tokens == [2, 1] and r.output_tokens == 3


def test_missing_done_with_finish_reason_is_ok_but_without_is_a_stream_error():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [content("a", 1, finish="stop")])
    assert finish(s, 0.1).outcome == "ok"
    s2 = StreamState(sent_s=0.0)
    s2.on_events(0.1, [content("a", 1)])
    r = finish(s2, 0.1)
    assert r.outcome == "stream_error" and r.error == "stream ended before [DONE]"
    assert r.output_tokens == 1 and r.ttft_ms == 100.0  # partial tokens kept


def test_error_object_inside_stream_is_a_stream_error_with_its_message():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [content("a", 1)])
    s.on_events(0.2, [("error", b'{"error": {"message": "engine died", "type": "InternalServerError"}}')])
    r = finish(s, 0.2)
    assert r.outcome == "stream_error" and "engine died" in r.error and r.chunk_tokens == [1]


def test_invalid_json_marks_the_stream_malformed_but_keeps_other_chunks():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [content("a", 1), (None, b"{not json"), content("b", 2, finish="stop"), DONE])
    r = finish(s, 0.1)
    assert r.outcome == "stream_error" and "invalid JSON" in r.error and r.output_tokens == 2


def test_no_token_received_means_ttft_is_none_not_zero():
    s = StreamState(sent_s=0.0)
    r = finish(s, 1.0, outcome="timeout", error="first_token timeout")
    assert r.ttft_ms is None and r.output_tokens is None and r.chunk_offsets_ms == []
    assert r.output_sha256 is None and r.e2e_ms == 1000.0


def test_non_streamed_body_is_one_chunk():
    s = StreamState(sent_s=0.0)
    s.on_json_body(0.5, {"id": "x", "choices": [{"message": {"content": "hi there"}, "finish_reason": "stop"}],
                         "usage": {"prompt_tokens": 3, "completion_tokens": 2}})
    r = finish(s, 0.5)
    assert r.outcome == "ok" and r.ttft_ms == 500.0 and r.chunk_tokens == [2] and r.output_tokens == 2


def test_per_request_spec_decode_metrics_are_kept():
    s = StreamState(sent_s=0.0)
    sd = {"mean_acceptance_length": 2.5, "num_spec_steps": 4, "num_accepted_draft_tokens": 6, "num_draft_tokens": 12}
    s.on_events(0.1, [content("a", 1, finish="stop"), ev({"id": "x", "choices": [], "usage": {"completion_tokens": 1},
                                                           "metrics": {"speculative_decoding": sd}}), DONE])
    assert finish(s, 0.1).spec_decode == sd


def test_error_bodies_are_summarised():
    assert error_from_body(429, b'{"error": {"message": "slow down", "type": "RateLimitError"}}') == \
        "HTTP 429: RateLimitError: slow down"
    assert error_from_body(400, b'{"object": "error", "message": "too long", "type": "BadRequestError"}') == \
        "HTTP 400: BadRequestError: too long"
    assert error_from_body(500, b"<html>oops</html>") == "HTTP 500: <html>oops</html>"
    assert error_from_body(503, b"") == "HTTP 503"


def test_a_delivery_dated_before_earlier_ones_dates_them_too_never_a_negative_gap():
    # Two reads a microsecond apart whose stamps were converted with offsets sampled apart (seen
    # on llama.cpp under load: 9.613 ms, then 9.612 ms). Every date is an upper bound of an
    # arrival and bytes arrive in order, so the later, earlier date bounds the first read too.
    s = StreamState(sent_s=100.0)
    s.on_events(100.009613, [content("a", 1), content("b", 2)])
    s.on_events(100.009612, [content("c", 3)])
    s.on_events(100.0200, [content("d", 4, finish="length"), TRAILER, DONE])
    r = finish(s, 100.03)
    assert r.chunk_offsets_ms == [9.612, 9.612, 9.612, 20.0]
    assert r.ttft_ms == 9.612


def test_a_first_token_dated_late_by_a_late_read_takes_the_next_reads_earlier_stamp():
    # the role chunk and first token read with the headers and dated when the loop got to them
    # (2.0 ms late); the next read's kernel stamp says its bytes, and so everything before, had
    # arrived by 10.5 ms
    s = StreamState(sent_s=100.0)
    s.on_events(100.0125, [ROLE, content("a", 1)])
    s.on_events(100.0105, [content("b", 2)])
    s.on_events(100.0300, [content("c", 3, finish="length"), TRAILER, DONE])
    r = finish(s, 100.04)
    assert r.ttft_ms == 10.5 and r.chunk_offsets_ms == [10.5, 10.5, 30.0]
