"""The HTTP surface, checked against a simulator running in its own process."""

import json

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tokenswarm.sim.samples import chat_messages, code_prompt, qa_prompt

from .conftest import chat, get, post

MSG = [{"role": "user", "content": "Why is the sky blue?"}]


def test_streaming_chat_format_usage_and_token_counts(sim):
    r = post(sim.base_url, "/v1/chat/completions", chat(MSG, max_tokens=20, ignore_eos=True))
    assert r.status == 200 and r.headers["content-type"].startswith("text/event-stream")
    assert r.done and r.error is None
    first = r.events[0]
    assert first["object"] == "chat.completion.chunk" and first["choices"][0]["delta"]["role"] == "assistant"
    assert len({e["id"] for e in r.events}) == 1 and r.events[0]["id"].startswith("chatcmpl-")
    content = r.content_events()
    assert [e["choices"][0]["finish_reason"] for e in content] == [None] * (len(content) - 1) + ["length"]
    usage_only = r.events[-1]
    assert usage_only["choices"] == [] and usage_only["usage"]["completion_tokens"] == 20
    assert usage_only["usage"]["total_tokens"] == usage_only["usage"]["prompt_tokens"] + 20
    per_chunk = r.tokens_per_chunk()
    assert sum(per_chunk) == 20 and all(n == 1 for n in per_chunk)  # no speculation: one token per step
    cumulative = [e["usage"]["completion_tokens"] for e in r.events[:-1]]
    assert cumulative == sorted(cumulative) and cumulative[0] == 0


def test_include_usage_without_continuous_stats_sends_one_final_usage_chunk(sim):
    r = post(sim.base_url, "/v1/chat/completions", chat(MSG, max_tokens=5, continuous=False, ignore_eos=True))
    assert [("usage" in e) for e in r.events] == [False] * (len(r.events) - 1) + [True]
    r2 = post(sim.base_url, "/v1/chat/completions", chat(MSG, max_tokens=5, usage=False))
    assert r2.done and all("usage" not in e for e in r2.events)


def test_streamed_completions_are_text_completion_events_carrying_exactly_max_tokens(sim):
    payload = {"prompt": "Once upon a time", "max_tokens": 12, "stream": True, "ignore_eos": True,
               "stream_options": {"include_usage": True, "continuous_usage_stats": True}}
    r = post(sim.base_url, "/v1/completions", payload)
    assert r.status == 200 and r.done
    content = r.content_events()
    assert content[0]["object"] == "text_completion" and content[0]["id"].startswith("cmpl-")
    assert "text" in content[0]["choices"][0]
    assert sum(r.tokens_per_chunk()) == 12 and r.events[-1]["usage"]["completion_tokens"] == 12


def test_non_streaming_chat_and_completions(sim):
    r = post(sim.base_url, "/v1/chat/completions", chat(MSG, max_tokens=9, stream=False, ignore_eos=True))
    assert r.status == 200
    body = r.body
    assert body["object"] == "chat.completion" and body["choices"][0]["message"]["role"] == "assistant"
    assert body["usage"]["completion_tokens"] == 9 and body["choices"][0]["finish_reason"] == "length"
    r2 = post(sim.base_url, "/v1/completions", {"prompt": "abc", "max_completion_tokens": 3, "max_tokens": 4})
    assert r2.status == 200 and r2.body["object"] == "text_completion"
    assert r2.body["usage"]["completion_tokens"] <= 4


def test_stream_and_non_stream_give_the_same_greedy_text(sim):
    p = chat(chat_messages("code", 1), max_tokens=40, temperature=0, ignore_eos=True)
    s = post(sim.base_url, "/v1/chat/completions", p)
    n = post(sim.base_url, "/v1/chat/completions", {**p, "stream": False, "stream_options": None})
    assert s.text() == n.text() and len(s.text()) > 0


def test_every_response_has_a_unique_id(sim):
    ids = {post(sim.base_url, "/v1/completions", {"prompt": "x", "max_tokens": 1}).body["id"] for _ in range(5)}
    assert len(ids) == 5


def test_stop_string_ends_the_stream_with_stop(sim):
    base = post(sim.base_url, "/v1/completions", {"prompt": code_prompt(0), "max_tokens": 40, "temperature": 0,
                                                  "ignore_eos": True}).body["choices"][0]["text"]
    stop = base[15:19]
    r = post(sim.base_url, "/v1/completions", {"prompt": code_prompt(0), "max_tokens": 40, "temperature": 0,
                                               "ignore_eos": True, "stop": [stop]})
    c = r.body["choices"][0]
    assert c["finish_reason"] == "stop" and stop not in c["text"] and base.startswith(c["text"])


@pytest.mark.parametrize(
    "path, raw, status, param",
    [
        ("/v1/chat/completions", b"{not json", 400, None),
        ("/v1/chat/completions", b'{"max_tokens": 5}', 400, "messages"),
        ("/v1/chat/completions", b'{"messages": []}', 400, "messages"),
        ("/v1/completions", b'{"max_tokens": 5}', 400, "prompt"),
        ("/v1/chat/completions", json.dumps({"messages": [{"role": "user", "content": "word " * 5000}]}).encode(),
         400, "messages"),
        ("/v1/completions", b'{"prompt": "hi", "max_tokens": 5000}', 400, "max_tokens"),
        ("/v1/chat/completions", b'{"model": "gpt-nope", "messages": [{"role": "user", "content": "x"}]}', 404, "model"),
        ("/v1/completions", b'{"prompt": "hi", "n": 2}', 400, "n"),
        ("/v1/completions", b'{"prompt": "hi", "temperature": "hot"}', 400, "temperature"),
        ("/v1/completions", b'{"prompt": "hi", "stream_options": {"include_usage": true}}', 400, "stream_options"),
        ("/v1/completions", b'[1, 2]', 400, None),
    ],
)
def test_bad_requests_get_openai_error_json_with_the_right_status(sim, path, raw, status, param):
    r = post(sim.base_url, path, None, raw=raw)
    assert r.status == status
    err = r.body["error"]
    assert err["code"] == status and err["param"] == param and isinstance(err["message"], str)
    assert err["type"] == {400: "BadRequestError", 404: "NotFoundError"}[status]
    assert "Traceback" not in err["message"]
    assert get(sim.base_url, "/health")[0] == 200  # still serving


def test_context_window_error_names_the_limit(sim):
    r = post(sim.base_url, "/v1/completions", None, raw=json.dumps({"prompt": "word " * 5000}).encode())
    assert "maximum context length is 4096 tokens" in r.body["error"]["message"]


def test_wrong_method_and_unknown_path(sim):
    assert get(sim.base_url, "/v1/chat/completions")[0] == 405
    assert get(sim.base_url, "/nope")[0] == 404


def test_models_lists_the_served_model_with_its_context_length_and_health_answers_200(sim):
    status, body = get(sim.base_url, "/v1/models")
    data = json.loads(body)
    assert status == 200 and data["data"][0]["id"] == "sim-tiny" and data["data"][0]["max_model_len"] == 4096
    assert get(sim.base_url, "/health") == (200, b"")


def test_tokenize_counts_match_usage_for_prompt_and_messages(sim):
    t = post(sim.base_url, "/tokenize", {"prompt": qa_prompt(0)}).body
    assert set(t) >= {"count", "max_model_len", "tokens"} and t["count"] == len(t["tokens"]) > 0
    c = post(sim.base_url, "/v1/completions", {"prompt": qa_prompt(0), "max_tokens": 1}).body
    assert c["usage"]["prompt_tokens"] == t["count"]
    tm = post(sim.base_url, "/tokenize", {"messages": MSG}).body
    cm = post(sim.base_url, "/v1/chat/completions", chat(MSG, max_tokens=1, stream=False)).body
    assert cm["usage"]["prompt_tokens"] == tm["count"] > t["count"] - 100
    assert post(sim.base_url, "/tokenize", {"foo": 1}).status == 400


def _scrape(sim) -> dict:
    out = {}
    for fam in text_string_to_metric_families(sim.metrics_text()):
        for s in fam.samples:
            out[(s.name, tuple(sorted((k, v) for k, v in s.labels.items() if k not in ("model_name", "engine"))))] = s.value
    return out


def test_metrics_parse_and_move_with_the_tokens_served(sim):
    before = _scrape(sim)
    completion = prompt = 0
    for i, kind in enumerate(["qa", "code", "summarization", "qa"]):
        r = post(sim.base_url, "/v1/chat/completions", chat(chat_messages(kind, i), max_tokens=15 + i))
        completion += r.events[-1]["usage"]["completion_tokens"]
        prompt += r.events[-1]["usage"]["prompt_tokens"]
    after = _scrape(sim)

    def delta(name, labels=()):
        return after[(name, labels)] - before.get((name, labels), 0.0)

    assert delta("vllm:generation_tokens_total") == completion
    assert delta("vllm:prompt_tokens_total") == prompt
    finished = sum(delta("vllm:request_success_total", (("finished_reason", r),)) for r in ("stop", "length"))
    assert finished == 4
    assert delta("vllm:time_to_first_token_seconds_count") == 4
    assert delta("vllm:e2e_request_latency_seconds_count") == 4
    assert after[("vllm:num_requests_running", ())] == 0 and after[("vllm:num_requests_waiting", ())] == 0
    assert 0.0 <= after[("vllm:kv_cache_usage_perc", ())] <= 1.0
    assert delta("tokenswarm_sim:emission_lag_seconds_count") > 0
    assert ("vllm:spec_decode_num_drafts_total", ()) not in after  # not speculating


def test_truth_log_matches_what_the_client_received(sim):
    results = [post(sim.base_url, "/v1/chat/completions", chat(chat_messages("code", i), max_tokens=10 + i,
                                                                  ignore_eos=True)) for i in range(3)]
    truth = {t["id"]: t for t in sim.read_truth()}
    for r in results:
        t = truth[r.events[0]["id"]]
        assert t["status"] == 200 and t["outcome"] == "ok" and t["endpoint"] == "chat"
        assert t["output_tokens"] == r.events[-1]["usage"]["completion_tokens"]
        assert t["prompt_tokens"] == r.events[-1]["usage"]["prompt_tokens"]
        assert [n for _, n in t["chunks"]] == r.tokens_per_chunk()
        times = [ts for ts, _ in t["chunks"]]
        assert times == sorted(times) and times[0] >= t["received"]
        # same monotonic clock as the client's perf_counter: each chunk was sent just before it arrived
        arrivals = [a for a, ev in zip(r.arrivals, r.events) if ev in r.content_events()]
        delays = [a - s for a, s in zip(arrivals, times)]
        assert min(delays) > -0.001 and sorted(delays)[len(delays) // 2] < 0.05


def test_a_rejected_request_is_in_the_truth_log_as_an_error_without_chunks(sim):
    r = post(sim.base_url, "/v1/chat/completions", None, raw=b'{"messages": 3}')
    assert r.status == 400
    errors = [t for t in sim.read_truth() if t["status"] == 400]
    assert errors and errors[-1]["outcome"] == "error" and errors[-1]["chunks"] == []
