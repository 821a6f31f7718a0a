"""e2e_ms of a complete answer is dated by the stream's last delivery, like its chunks; the
application's own later reading stays in e2e_app_ms. Times are scripted, nothing sleeps."""

import orjson

from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.stream import StreamState

ANCHOR = WallAnchor(wall_s=1_000_000.0, mono_s=100.0)
BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=1_000_000.0, schedule_lag_ms=0.0)
DONE = (None, b"[DONE]")


def chunk(text, finish=None):
    return (None, orjson.dumps({"id": "r1", "choices": [{"index": 0, "delta": {"content": text},
                                                          "finish_reason": finish}]}))


def trailer(n):
    return (None, orjson.dumps({"id": "r1", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": n}}))


def finish(state, end_s, **kw):
    kw.setdefault("http_status", 200)
    return state.finish(end_s, anchor=ANCHOR, base=BASE, **kw)


def test_a_complete_answer_ends_at_the_arrival_of_its_last_delivery_not_when_the_code_got_there():
    s = StreamState(sent_s=100.0)
    s.on_events(100.020, [chunk("a")])
    s.on_events(100.030, [chunk("b", finish="length")])
    s.on_events(100.031, [trailer(2), DONE])  # the last read: usage and [DONE]
    r = finish(s, 100.0322)  # the application's reading, 1.2 ms after the kernel's stamp
    assert r.outcome == "ok"
    assert r.e2e_ms == 31.0
    assert r.e2e_app_ms == 32.2


def test_a_last_delivery_without_content_still_dates_the_end():
    s = StreamState(sent_s=100.0)
    s.on_events(100.010, [chunk("a", finish="stop")])
    s.on_events(100.015, [DONE])
    r = finish(s, 100.017)
    assert r.chunk_offsets_ms == [10.0] and r.e2e_ms == 15.0 and r.e2e_app_ms == 17.0


def test_e2e_is_never_before_the_last_chunk_it_reports():
    s = StreamState(sent_s=100.0)
    for i in range(1, 6):
        s.on_events(100.0 + 0.005 * i, [chunk("x", finish="length" if i == 5 else None)])
    r = finish(s, 100.0261)
    assert r.e2e_ms == r.chunk_offsets_ms[-1] == 25.0 and r.e2e_app_ms == 26.1


def test_a_timed_out_or_cut_stream_ends_when_the_generator_saw_it_end():
    for outcome, kw in (("timeout", {"outcome": "timeout", "error": "total timeout"}),
                        ("stream_error", {})):  # no [DONE], no finish reason: cut
        s = StreamState(sent_s=100.0)
        s.on_events(100.010, [chunk("a")])
        r = finish(s, 100.500, **kw)
        assert r.outcome == outcome
        assert r.e2e_ms == r.e2e_app_ms == 500.0


def test_a_request_without_any_delivery_ends_at_the_applications_reading():
    s = StreamState(sent_s=100.0)
    r = finish(s, 100.004, outcome="http_error", http_status=503, error="HTTP 503")
    assert r.e2e_ms == r.e2e_app_ms == 4.0


def test_a_non_streamed_answer_ends_when_its_body_was_read():
    s = StreamState(sent_s=100.0)
    s.on_json_body(100.040, {"id": "r1", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
                             "usage": {"prompt_tokens": 3, "completion_tokens": 1}})
    r = finish(s, 100.041)
    assert r.e2e_ms == 40.0 and r.e2e_app_ms == 41.0
