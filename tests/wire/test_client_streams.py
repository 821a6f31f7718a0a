"""The streaming client against a scripted in-memory transport: every malformed-stream case,
error and deadline becomes a record with the right outcome, partial tokens kept, each chunk
dated by its delivery. (What needs a socket -- the readers, the framing, the pool -- is in
test_client_sockets.py.)"""

import gevent
import pytest

from tests.helpers.scripted_transport import BLOCK, Reply, ScriptedTransport, server_reply, sse
from tokenswarm.record import RecordIdentity
from tokenswarm.wire.client import StreamHooks, stream_call
from tokenswarm.wire.clock import WallAnchor

IDENTITY = RecordIdentity(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
                          scheduled_at_s=100.0)
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
ANCHOR = WallAnchor(0.0, 0.0)  # the scripted clock's readings are the epoch seconds


def call(reply, first_token_s=5.0, total_s=10.0, transport=None, **kw):
    transport = transport or ScriptedTransport([reply])
    rec, text = stream_call(transport, "/v1/chat/completions", BODY, {"Content-Type": "application/json"},
                            identity=IDENTITY, anchor=ANCHOR, first_token_timeout_s=first_token_s,
                            total_timeout_s=total_s, keep_output=True, **kw)
    return rec, text, transport


def test_each_delivery_dates_its_chunks_from_the_send():
    rec, text, t = call(server_reply("normal", n=6, gap_ms=20))
    assert rec.outcome == "ok" and rec.output_tokens == 6 and rec.chunk_tokens == [1] * 6
    # sent at t0 (headers 1 ms later); content events 20 ms apart, the first with the headers
    assert rec.chunk_offsets_ms == [1.0, 21.0, 41.0, 61.0, 81.0, 101.0]
    assert rec.sent_at_s == 100.0 and rec.headers_ms == 1.0 and rec.conn_reused is True
    assert text.startswith("w0_0 ") and rec.output_text == text
    assert t.discarded == 0 and t.settled == 1


def test_each_chunk_records_the_tokens_it_carried():
    rec, _, _ = call(server_reply("normal", n=4, per_chunk=3))
    assert rec.chunk_tokens == [3, 3, 3, 3] and rec.output_tokens == 12


def test_missing_done_after_finish_reason_is_ok():
    rec, _, _ = call(server_reply("no_done", n=3))
    assert rec.outcome == "ok" and rec.output_tokens == 3


def test_a_stream_without_done_or_finish_reason_is_a_stream_error():
    reply = Reply(deliveries=[(0.01, sse('{"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}'))])
    rec, _, _ = call(reply)
    assert rec.outcome == "stream_error" and rec.error == "stream ended before [DONE]"
    assert rec.chunk_offsets_ms == [10.0]


def test_usage_absent_leaves_chunk_tokens_unknown():
    rec, _, _ = call(server_reply("no_usage", n=3))
    assert rec.outcome == "ok" and rec.chunk_tokens is None and rec.tokens_estimated


def test_an_event_that_is_not_json_ends_the_request_as_a_stream_error_keeping_its_tokens():
    rec, _, _ = call(server_reply("invalid_json", n=3))
    assert rec.outcome == "stream_error" and "invalid JSON" in rec.error and rec.output_tokens == 3


def test_an_error_event_inside_a_stream_is_a_stream_error_with_the_servers_message():
    rec, _, _ = call(server_reply("event_error", n=3))
    assert rec.outcome == "stream_error" and "engine died" in rec.error and rec.chunk_tokens == [1, 1, 1]


def test_an_unterminated_last_event_is_flushed_at_the_end_of_the_body():
    done = b'data: {"id":"x","choices":[{"index":0,"delta":{"content":"b"},"finish_reason":"stop"}]}'
    reply = Reply(deliveries=[(0.01, sse('{"id":"x","choices":[{"index":0,"delta":{"content":"a"}}]}')),
                              (0.02, done)], end_at_s=0.03)  # no blank line after the last event
    rec, text, _ = call(reply)
    assert rec.outcome == "ok" and text == "ab"
    assert rec.chunk_offsets_ms == [10.0, 30.0]  # dated when the end of the body showed it was whole


def test_connection_cut_mid_stream_keeps_partial_tokens():
    rec, _, t = call(server_reply("cut", n=6))
    assert rec.outcome == "stream_error" and rec.error == "connection closed mid-stream"
    assert rec.chunk_tokens == [1, 1, 1, 1] and rec.output_tokens == 4
    assert t.discarded == 1  # a cut connection is never reused


def test_a_close_delimited_body_ends_when_the_server_closes():
    rec, _, t = call(Reply(deliveries=server_reply("normal", n=3).deliveries, end="close"))
    assert rec.outcome == "ok" and rec.output_tokens == 3
    assert t.discarded == 1  # the server closed it: not reusable


def test_stall_hits_the_total_deadline_with_partial_tokens():
    rec, _, t = call(server_reply("stall", n=6), total_s=0.5)
    assert rec.outcome == "timeout" and rec.error == "total timeout"
    assert rec.output_tokens == 4 and rec.e2e_ms == 500.0  # the deadline, to the microsecond
    assert t.discarded == 1 and t.armed == []  # both deadlines disarmed


def test_headers_then_nothing_hits_the_first_token_deadline():
    rec, _, _ = call(Reply(end="stall"), first_token_s=0.3)
    assert rec.outcome == "timeout" and rec.error == "first_token timeout" and rec.ttft_ms is None
    assert rec.http_status == 200 and rec.e2e_ms == 300.0


def test_slow_first_token_hits_the_first_token_deadline():
    rec, _, _ = call(Reply(headers_at_s=3.0, deliveries=server_reply("normal").deliveries), first_token_s=0.3)
    assert rec.outcome == "timeout" and rec.error == "first_token timeout" and rec.ttft_ms is None
    assert rec.http_status is None  # the headers never came


def test_the_first_token_deadline_is_disarmed_by_the_first_token():
    # first token at 1 ms, then 20 ms gaps to ~121 ms: well past a 50 ms first-token deadline
    rec, _, _ = call(server_reply("normal", n=6, gap_ms=20), first_token_s=0.05)
    assert rec.outcome == "ok" and rec.output_tokens == 6


@pytest.mark.parametrize("code", [429, 500, 503])
def test_http_errors_keep_status_and_server_message(code):
    rec, _, _ = call(server_reply(f"http_{code}"))
    assert rec.outcome == "http_error" and rec.http_status == code and f"scripted {code}" in rec.error
    assert rec.ttft_ms is None


def test_an_error_body_is_read_whole_and_its_connection_kept():
    t = ScriptedTransport([server_reply("http_429")])
    rec, _, _ = call(None, transport=t)
    assert rec.outcome == "http_error" and t.discarded == 0


def test_an_error_body_too_long_to_read_closes_its_connection():
    t = ScriptedTransport([Reply(status=500, body=b"x" * 70000)])
    rec, _, _ = call(None, transport=t)
    assert rec.outcome == "http_error" and rec.http_status == 500 and t.discarded == 1
    assert rec.error.startswith("HTTP 500: xxx") and len(rec.error) < 200


def test_a_refused_connection_is_an_http_error_without_status():
    rec, _, _ = call(Reply(send_error=ConnectionRefusedError()))
    assert rec.outcome == "http_error" and rec.error == "connection refused" and rec.http_status is None
    assert rec.sent_at_s == 100.0 and rec.connect_ms is None


def test_a_failed_connect_is_timed_and_named():
    rec, _, _ = call(Reply(connect_s=0.004, send_error=OSError("no route")))
    assert rec.outcome == "http_error" and rec.error == "connection failed: OSError"
    assert rec.connect_ms == 4.0 and rec.conn_reused is False and rec.send_delay_ms is None


def test_a_library_parser_error_after_the_headers_is_a_stream_error():
    class Broken(ScriptedTransport):
        def body_reader(self, *a, **kw):
            raise ValueError("invalid chunk size")

    rec, _, _ = call(None, transport=Broken([server_reply("normal")]))
    assert rec.outcome == "stream_error" and rec.error == "ValueError: invalid chunk size"


def test_a_non_streamed_answer_is_one_delivery():
    body = b'{"id":"x","choices":[{"index":0,"message":{"content":"hello"},"finish_reason":"stop"}],' \
           b'"usage":{"prompt_tokens":3,"completion_tokens":2}}'
    rec, text, _ = call(Reply(body=body, body_at_s=0.25), stream=False)
    assert rec.outcome == "ok" and text == "hello" and rec.output_tokens == 2 and rec.chunk_offsets_ms == [250.0]


def test_a_malformed_non_streamed_answer_is_a_stream_error():
    rec, _, _ = call(Reply(body=b"{oops", body_at_s=0.25), stream=False)
    assert rec.outcome == "stream_error" and rec.error == "malformed JSON body"


def test_a_client_that_leaves_after_the_first_token_is_cancelled():
    rec, _, t = call(server_reply("normal", n=6), cancel_after_first_token=True)
    assert rec.outcome == "cancelled" and rec.error == "client disconnected after first token"
    assert rec.chunk_tokens == [1] and t.discarded == 1


def test_killed_greenlet_yields_a_cancelled_record():
    got = []
    head = list(server_reply("normal", n=5).deliveries)[:4]  # the role chunk and 3 tokens
    t = ScriptedTransport([Reply(deliveries=head + [(1.0, BLOCK)])])
    chunks: list[int] = []
    g = gevent.spawn(call, None, transport=t, hooks=StreamHooks(on_chunks=lambda base, ms, n: chunks.append(n)),
                     on_cancel=lambda r, text: got.append(r))
    assert t.blocked.wait(timeout=10)  # killed mid-stream, once 3 chunks came
    g.kill()
    assert len(got) == 1 and got[0].outcome == "cancelled" and got[0].error == "cancelled by generator"
    assert got[0].output_tokens == 3 and sum(chunks) == 3 and got[0].e2e_ms == 1000.0
    assert t.discarded == 1 and t.hooked_reads == [True]


def test_the_first_token_hook_is_handed_the_measured_schedule_lag_not_an_estimate():
    seen: list[dict] = []
    t = ScriptedTransport([Reply(sent_after_s=0.002, deliveries=server_reply("normal", n=3).deliveries)])
    late = RecordIdentity(**{**IDENTITY.record_fields(), "scheduled_at_s": 99.75})  # due 250 ms before the send
    rec, _ = stream_call(t, "/v1/chat/completions", BODY, {}, identity=late, anchor=ANCHOR,
                         first_token_timeout_s=5, total_timeout_s=10,
                         hooks=StreamHooks(on_first_token=lambda base, ms: seen.append(dict(base)),
                                           on_chunks=lambda base, ms, n: seen.append(dict(base))))
    assert rec.outcome == "ok", rec.error
    assert rec.schedule_lag_ms == 252.0  # due at 99.75, sent at 100.002: the send's own reading
    assert len(seen) == 4 and all(s["schedule_lag_ms"] == 252.0 and s["task"] == "qa" for s in seen)


def test_hooks_get_the_time_of_each_delivery_from_the_send():
    firsts: list[float] = []
    chunk_times: list[tuple[float, int]] = []
    rec, _, _ = call(server_reply("normal", n=3, gap_ms=10),
                     hooks=StreamHooks(on_first_token=lambda base, ms: firsts.append(ms),
                                       on_chunks=lambda base, ms, n: chunk_times.append((ms, n))))
    assert firsts == [pytest.approx(1.0)]
    assert [n for _, n in chunk_times] == [1, 1, 1]
    assert [ms for ms, _ in chunk_times] == pytest.approx(rec.chunk_offsets_ms)


def test_the_identity_is_spread_into_the_record_with_the_measured_phases():
    t = ScriptedTransport([Reply(connect_s=0.003, sent_after_s=0.004, headers_at_s=0.010,
                                 deliveries=server_reply("normal", n=2).deliveries)])
    rec, _, _ = call(None, transport=t, scheduled_s=99.999)
    assert (rec.run_id, rec.worker_id, rec.task, rec.request_key) == ("r", "w", "qa", "k")
    assert rec.connect_ms == 3.0 and rec.conn_reused is False
    assert rec.schedule_lag_ms == 5.0 and rec.send_delay_ms == 2.0  # 5 ms late, 3 of them connecting
    assert rec.headers_ms == 6.0 and rec.sent_at_s == pytest.approx(100.004)
