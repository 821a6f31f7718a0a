"""A hostile or broken server cannot make a record vanish or memory grow without bound.

Counts the server reports are checked where they are read: a count that is not an integer, is
negative, goes backwards or exceeds what the request could carry makes the request a
``stream_error`` with a plain message, and its record can always be written. A stream that
sends more than it could legitimately carry is cut with its record kept.
"""

import tracemalloc

import pytest

from tests.helpers.scripted_transport import ScriptedTransport, server_reply
from tokenswarm.record import MAX_PLAUSIBLE_TOKENS, RecordIdentity
from tokenswarm.wire.client import stream_call
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.limits import MAX_RESPONSE_BYTES, OUTPUT_TOKENS_FACTOR, StreamLimits
from tokenswarm.wire.stream import StreamState
from tokenswarm.workload.scenario import model as scenario_model

BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=0.0, schedule_lag_ms=0.0)
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'


def call(script, limits, total_s=10.0, **query):
    """The scripted server's ``script`` played in memory (see tests/helpers/scripted_transport.py)."""
    transport = ScriptedTransport([server_reply(script, gap_ms=1.0, **query)])
    return stream_call(transport, "/v1/chat/completions", BODY, {"Content-Type": "application/json"},
                       identity=RecordIdentity(**BASE),
                       anchor=WallAnchor(0.0, 0.0), first_token_timeout_s=5.0,
                       total_timeout_s=total_s, limits=limits)[0]


@pytest.mark.parametrize("value, problem", [
    ("99999999999999999999999999999", "server reported completion_tokens=99999999999999999999999999999: more than"),
    ("9223372036854775807", "server reported completion_tokens=9223372036854775807: more than"),
    ("-4", "server reported completion_tokens=-4: negative"),
    ("2.5", "server reported completion_tokens=2.5: not an integer"),
    ('"12"', "server reported completion_tokens='12': not an integer"),
])
def test_an_impossible_usage_total_is_a_stream_error_whose_record_can_be_written(value, problem):
    rec = call("usage_value", StreamLimits.for_request(8), value=value)
    assert rec.outcome == "stream_error"
    assert rec.error.startswith(problem)
    assert len(rec.chunk_offsets_ms) == 5  # what arrived is kept
    assert rec.output_tokens is None or 0 <= rec.output_tokens <= MAX_PLAUSIBLE_TOKENS
    assert rec.to_json()  # never "Integer exceeds 64-bit range"


def test_a_cumulative_usage_that_goes_backwards_cuts_the_stream_with_aligned_chunk_lists():
    rec = call("cum_values", StreamLimits.for_request(8), cums="3,5,2")
    assert rec.outcome == "stream_error"
    assert rec.error == "server reported completion_tokens=2: less than the 5 reported before"
    assert rec.chunk_tokens == [3, 2] and len(rec.chunk_offsets_ms) == 2
    assert rec.to_json()


def test_a_cumulative_usage_beyond_int64_then_negative_never_desynchronises_the_record():
    rec = call("cum_values", StreamLimits.for_request(8), cums="9223372036854775807,-4")
    assert rec.outcome == "stream_error"
    assert rec.error.startswith("server reported completion_tokens=9223372036854775807: more than")
    assert rec.chunk_offsets_ms == [] and rec.chunk_tokens is None
    assert rec.output_tokens is None
    assert rec.to_json()


def test_a_valid_usage_within_the_factor_over_max_tokens_stays_ok():
    rec = call("usage_value", StreamLimits.for_request(2), value="5")
    assert rec.outcome == "ok" and rec.output_tokens == 5 and rec.chunk_tokens == [1] * 5  # 5 <= 4 x 2


def test_a_flood_of_events_is_cut_at_the_factor_over_max_tokens():
    rec = call("flood", StreamLimits.for_request(8), total_s=20.0)
    assert rec.outcome == "stream_error"
    assert rec.error.startswith(f"protocol error: more than {int(8 * OUTPUT_TOKENS_FACTOR)} content events")
    # checked once per read: at most the cap plus the events of one read (64 KiB, ~110 bytes each)
    assert int(8 * OUTPUT_TOKENS_FACTOR) < len(rec.chunk_offsets_ms) <= int(8 * OUTPUT_TOKENS_FACTOR) + 65536 // 100
    assert rec.to_json()


def test_a_flooding_stream_stays_under_its_byte_bound_in_memory():
    """Without the cap this stream grows ~13 MB/s until the total deadline (3 s here)."""
    limits = StreamLimits(max_output_tokens=10**7, max_response_bytes=1 << 20)
    tracemalloc.start()
    try:
        rec = call("flood", limits, total_s=3.0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert rec.outcome == "stream_error", rec.error
    assert rec.error == "protocol error: response exceeded 1048576 bytes (target.limits.response_bytes)"
    assert peak < 16 << 20, f"peak {peak / 1e6:.1f} MB"


def test_one_endless_sse_line_is_cut_before_it_fills_memory():
    from tokenswarm.wire.sse import MAX_EVENT_BYTES, SSEParser, StreamLimitExceeded

    p = SSEParser()
    with pytest.raises(StreamLimitExceeded, match="exceeded"):
        for _ in range(MAX_EVENT_BYTES // 65536 + 2):
            p.feed(b"x" * 65536)


def test_a_non_string_content_or_id_is_a_stream_error_not_an_exception():
    state = StreamState(0.0, StreamLimits.for_request(8))
    state.on_events(0.1, [(None, b'{"id":{"a":1},"choices":[{"index":0,"delta":{"content":5}}]}'),
                          (None, b'{"id":"x","choices":[{"index":0,"delta":{"content":"ok"},"finish_reason":"stop"}]}'),
                          (None, b"[DONE]")])
    rec = state.finish(0.2, http_status=200, anchor=WallAnchor(0.0, 0.0), base=dict(BASE))
    assert rec.outcome == "stream_error" and "not a string" in rec.error
    assert rec.to_json()


def test_spec_decode_counts_beyond_int64_are_dropped_with_an_error():
    state = StreamState(0.0)
    state.on_events(0.1, [(None, b'{"id":"x","choices":[{"index":0,"delta":{"content":"a"},"finish_reason":"stop"}],'
                                 b'"metrics":{"speculative_decoding":{"num_draft_tokens":18446744073709551615}}}')])
    rec = state.finish(0.2, http_status=200, anchor=WallAnchor(0.0, 0.0), base=dict(BASE))
    assert rec.spec_decode is None and rec.error.startswith("server reported spec_decode.num_draft_tokens=")
    assert rec.to_json()


def test_the_wire_defaults_are_the_scenario_defaults():
    assert scenario_model.OUTPUT_TOKENS_FACTOR == OUTPUT_TOKENS_FACTOR
    assert scenario_model.MAX_RESPONSE_BYTES == MAX_RESPONSE_BYTES
