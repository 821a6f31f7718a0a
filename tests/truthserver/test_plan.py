"""What the truth server answers: lengths, chunk sizes, request validation and SSE shapes (no server)."""

import random

import orjson
import pytest

from benchmarks.truthserver.__main__ import options, parse_args
from benchmarks.truthserver.plan import BadRequest, Events, IntRange, ServerOptions, parse_request, plan_for

OPTS = ServerOptions(tokens_per_chunk=IntRange(1, 5), natural_tokens=IntRange(10, 20), ttft_ms=20, step_ms=5,
                     prefill_us_per_token=100)


def chat(**kw):
    return {"model": "m", "messages": [{"role": "user", "content": "one two three four"}], **kw}


def test_with_ignore_eos_the_answer_is_exactly_max_tokens_long_and_ends_by_length():
    for seed in range(50):
        plan = plan_for(parse_request(chat(max_tokens=37, ignore_eos=True), "chat", OPTS), OPTS, random.Random(seed))
        assert plan.output_tokens == 37 and plan.finish_reason == "length"
        assert all(1 <= k <= 5 for k in plan.chunk_tokens)


def test_without_ignore_eos_the_natural_length_is_capped_by_max_tokens():
    lengths = {plan_for(parse_request(chat(max_tokens=1000), "chat", OPTS), OPTS, random.Random(s)).output_tokens
               for s in range(200)}
    assert min(lengths) >= 10 and max(lengths) <= 20 and len(lengths) > 5
    capped = plan_for(parse_request(chat(max_tokens=4), "chat", OPTS), OPTS, random.Random(1))
    assert capped.output_tokens == 4 and capped.finish_reason == "length"
    natural = plan_for(parse_request(chat(max_tokens=1000), "chat", OPTS), OPTS, random.Random(1))
    assert natural.finish_reason == "stop"


def test_a_fixed_chunk_size_cuts_the_answer_into_equal_events_and_a_shorter_last_one():
    opts = ServerOptions(tokens_per_chunk=IntRange.parse("3", "x"))
    plan = plan_for(parse_request(chat(max_tokens=10, ignore_eos=True), "chat", opts), opts, random.Random(0))
    assert plan.chunk_tokens == (3, 3, 3, 1)


def test_the_first_event_is_due_after_the_ttft_plus_prefill_per_prompt_token():
    plan = plan_for(parse_request(chat(max_tokens=2), "chat", OPTS), OPTS, random.Random(0))
    assert plan.first_delay_s == pytest.approx((20 + 0.1 * 4) / 1000) and plan.step_s == pytest.approx(0.005)


def test_max_completion_tokens_wins_over_max_tokens_on_chat_only():
    assert parse_request(chat(max_completion_tokens=3, max_tokens=9), "chat", OPTS).max_tokens == 3
    assert parse_request({"prompt": "x", "max_completion_tokens": 3, "max_tokens": 9}, "completions",
                         OPTS).max_tokens == 9


@pytest.mark.parametrize("body, param", [
    (chat(max_tokens=0), "max_tokens"), (chat(max_tokens="5"), "max_tokens"), ({"model": "m"}, "messages"),
    (chat(ignore_eos="yes"), "ignore_eos"), (chat(stream=1), "stream"), (chat(stream_options=[]), "stream_options"),
])
def test_bad_requests_are_refused_naming_the_field(body, param):
    with pytest.raises(BadRequest) as e:
        parse_request(body, "chat", OPTS)
    assert e.value.param == param and param in e.value.message
    assert e.value.body()["error"]["param"] == param


def test_continuous_usage_counts_cumulative_tokens_and_needs_include_usage_as_in_vllm():
    req = parse_request(chat(stream=True, stream_options={"include_usage": True, "continuous_usage_stats": True}),
                        "chat", OPTS)
    ev = Events("chatcmpl-1", req, 0)
    role = orjson.loads(ev.role()[6:])
    assert role["choices"][0]["delta"] == {"role": "assistant", "content": ""} and role["usage"]["completion_tokens"] == 0
    second = orjson.loads(ev.content(3, 2, "length")[6:])
    assert second["choices"][0]["delta"]["content"] == " w3 w4" and second["usage"]["completion_tokens"] == 5
    assert second["choices"][0]["finish_reason"] == "length"
    assert orjson.loads(ev.usage_trailer(5)[6:])["choices"] == []
    no_cont = parse_request(chat(stream=True, stream_options={"continuous_usage_stats": True}), "chat", OPTS)
    assert not no_cont.continuous_usage and "usage" not in orjson.loads(Events("c", no_cont, 0).content(0, 1, None)[6:])


def test_completions_stream_text_events_without_a_role_event():
    ev = Events("cmpl-1", parse_request({"prompt": "a b", "stream": True}, "completions", OPTS), 0)
    assert ev.role() is None and orjson.loads(ev.content(0, 1, None)[6:])["choices"][0]["text"] == " w0"


@pytest.mark.parametrize("text", ["0", "5-2", "x", "1-2-3", "-3"])
def test_a_bad_range_option_is_an_error_naming_the_option(text):
    with pytest.raises(ValueError, match="--tokens-per-chunk"):
        options(parse_args(["--tokens-per-chunk", text]))


def test_negative_delays_are_refused():
    with pytest.raises(ValueError, match="--step-ms"):
        options(parse_args(["--step-ms", "-1"]))


def test_a_message_content_given_as_parts_counts_the_words_of_its_text_parts():
    parts = {"model": "m", "messages": [{"role": "user", "content": [
        {"type": "text", "text": "one two three"}, {"type": "image_url", "image_url": {"url": "x y z"}},
        {"type": "text", "text": "four"}]}]}
    assert parse_request(parts, "chat", OPTS).prompt_tokens == 4
    assert parse_request(chat(), "chat", OPTS).prompt_tokens == 4
