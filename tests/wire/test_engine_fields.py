"""Every engine's per-request spec-decode fields land in record.spec_decode in one shape, and
one token per event is inferred when the totals prove it."""

from __future__ import annotations

import math

import orjson

from tokenswarm.analysis.loader.records import _spec_fields
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.engine_fields import (
    llamacpp_spec_decode,
    one_token_per_event,
    sglang_spec_decode,
    spec_decode_of,
)
from tokenswarm.wire.stream import StreamState

ANCHOR = WallAnchor(wall_s=1_000_000.0, mono_s=0.0)
BASE = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
            scheduled_at_s=1_000_000.0, schedule_lag_ms=0.0)


def ev(obj):
    return (None, orjson.dumps(obj))


def chunk(text, finish=None, **top):
    return ev({"id": "x", "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}], **top})


LLAMA_TIMINGS = {"cache_n": 0, "prompt_n": 12, "prompt_ms": 30.1, "predicted_n": 40, "predicted_ms": 400.0,
                 "predicted_per_second": 100.0, "draft_n": 48, "draft_n_accepted": 24}


def test_llama_cpp_timings_in_the_final_chunk_become_spec_decode_with_estimated_steps():
    sd = llamacpp_spec_decode(LLAMA_TIMINGS)
    assert sd["num_draft_tokens"] == 48 and sd["num_accepted_draft_tokens"] == 24
    assert sd["draft_acceptance_rate"] == 0.5
    assert sd["num_spec_steps"] == 16 and sd["num_spec_steps_estimated"] is True  # 40 tokens - 24 accepted
    assert sd["mean_acceptance_length"] == 40 / 16
    assert llamacpp_spec_decode({"predicted_n": 40}) is None, "no draft_n: the server did not speculate"


def test_sglang_spec_tokens_details_use_current_and_older_names():
    new = sglang_spec_decode({"spec_tokens_details": {"spec_verify_ct": 10, "spec_num_correct_drafts": 17,
                                                      "spec_num_proposed_drafts": 30, "spec_accept_length": 2.7,
                                                      "spec_correct_drafts_histogram": [1, 2, 7]}})
    old = sglang_spec_decode([{"spec_tokens_details": {"spec_verify_ct": 10, "spec_accept_token_num": 17,
                                                       "spec_draft_token_num": 30}}])
    for sd in (new, old):
        assert sd["num_spec_steps"] == 10 and sd["num_accepted_draft_tokens"] == 17 and sd["num_draft_tokens"] == 30
    assert new["acceptance_histogram"] == [1, 2, 7] and new["mean_acceptance_length"] == 2.7


def test_the_analysis_reads_every_dialect_with_the_same_field_names():
    vllm = {"num_spec_steps": 16, "num_accepted_draft_tokens": 24, "num_draft_tokens": 48, "num_spec_tokens": 3}
    for sd in (vllm, llamacpp_spec_decode(LLAMA_TIMINGS)):
        steps, acc, draft, _k, mal = _spec_fields(sd)
        assert (steps, acc, draft) == (16, 24, 48) and math.isclose(mal, 1 + 24 / 16)


def test_vllm_metrics_object_still_wins():
    sd = {"num_spec_steps": 1}
    assert spec_decode_of({"metrics": {"speculative_decoding": sd}, "timings": LLAMA_TIMINGS}) is sd


def test_a_stream_with_llama_cpp_timings_records_acceptance():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [chunk("a")])
    s.on_events(0.2, [chunk("b", finish="stop", timings=LLAMA_TIMINGS), (None, b"[DONE]")])
    r = s.finish(0.2, anchor=ANCHOR, base=BASE, http_status=200)
    assert r.spec_decode["source"] == "llama.cpp timings" and r.spec_decode["num_accepted_draft_tokens"] == 24


def test_as_many_events_as_completion_tokens_proves_one_token_per_event():
    s = StreamState(sent_s=0.0)
    for i in range(5):
        s.on_events(0.1 * (i + 1), [chunk(f"t{i}", finish="stop" if i == 4 else None)])
    s.on_events(0.5, [ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}),
                      (None, b"[DONE]")])
    r = s.finish(0.5, anchor=ANCHOR, base=BASE, http_status=200)
    assert r.chunk_tokens == [1, 1, 1, 1, 1] and r.chunk_tokens_inferred is True


def test_fewer_events_than_tokens_leaves_per_chunk_counts_unknown():
    s = StreamState(sent_s=0.0)
    s.on_events(0.1, [chunk("ab")])
    s.on_events(0.2, [chunk("c", finish="stop")])
    s.on_events(0.2, [ev({"id": "x", "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 3}})])
    r = s.finish(0.2, anchor=ANCHOR, base=BASE, http_status=200)
    assert r.chunk_tokens is None and r.chunk_tokens_inferred is False


def test_inference_needs_a_total():
    assert one_token_per_event(3, None) is None and one_token_per_event(0, 0) is None
    assert one_token_per_event(2, 2) == [1, 1]


def test_a_llama_cpp_finish_chunk_with_usage_and_timings_is_not_a_content_chunk():
    s = StreamState(sent_s=0.0)
    for i in range(3):
        s.on_events(0.1 * (i + 1), [chunk(f"t{i}")])
    final = {"id": "x", "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
             "usage": {"prompt_tokens": 5, "completion_tokens": 3}, "timings": {**LLAMA_TIMINGS, "predicted_n": 3,
                                                                                  "draft_n": 4, "draft_n_accepted": 1}}
    s.on_events(0.35, [ev(final), (None, b"[DONE]")])
    r = s.finish(0.35, anchor=ANCHOR, base=BASE, http_status=200)
    assert r.chunk_offsets_ms == [100.0, 200.0, 300.0], "the finish chunk carries no content"
    assert r.chunk_tokens == [1, 1, 1] and r.chunk_tokens_inferred and r.output_tokens == 3
    assert r.spec_decode["num_accepted_draft_tokens"] == 1 and r.prompt_tokens == 5
