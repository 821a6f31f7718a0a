"""Speculative decoding over HTTP: lossless greedy text, multi-token chunks, vLLM counters."""

import pytest
from prometheus_client.parser import text_string_to_metric_families

from tokenswarm.sim.samples import chat_messages
from tokenswarm.sim.testing import start_sim

from .conftest import TINY, chat, post

K = 4


def spec_counters(sim) -> dict:
    out = {}
    for fam in text_string_to_metric_families(sim.metrics_text()):
        for s in fam.samples:
            if s.name.startswith("vllm:spec_decode") or s.name == "vllm:generation_tokens_total":
                out[(s.name, s.labels.get("position"))] = s.value
    return out


def diff(after, before):
    return {k: v - before.get(k, 0.0) for k, v in after.items()}


def greedy_texts(sim, n=4):
    return [post(sim.base_url, "/v1/chat/completions",
                 chat(chat_messages(kind, i), max_tokens=60, temperature=0, ignore_eos=True)).text()
            for i, kind in enumerate(["code", "qa", "summarization", "qa"][:n])]


@pytest.fixture(scope="module")
def sim_ngram():
    with start_sim(*TINY, "--spec-method", "ngram", "--num-speculative-tokens", str(K)) as h:
        yield h


def test_greedy_text_is_identical_with_and_without_speculation(sim, sim_draft, sim_ngram):
    plain = greedy_texts(sim)
    assert greedy_texts(sim_draft) == plain
    assert greedy_texts(sim_ngram) == plain
    assert len(set(plain)) == 4


def test_spec_divergence_fault_is_caught_by_comparing_with_the_baseline(sim):
    plain = greedy_texts(sim)
    with start_sim(*TINY, "--spec-method", "draft", "--spec-divergence", "0.3") as broken:
        diverged = greedy_texts(broken)
    assert diverged != plain
    assert [len(t) > 0 for t in diverged] == [True] * 4


def test_spec_chunks_carry_one_to_k_plus_one_tokens(sim_draft):
    r = post(sim_draft.base_url, "/v1/chat/completions", chat(chat_messages("code", 2), max_tokens=120,
                                                              temperature=0, ignore_eos=True))
    sizes = r.tokens_per_chunk()
    assert sum(sizes) == 120 and all(1 <= n <= K + 1 for n in sizes)
    assert max(sizes) == K + 1 and len(sizes) < 120 / 1.5


def test_spec_counters_are_consistent_with_served_tokens(sim_draft):
    before = spec_counters(sim_draft)
    served = chunks = 0
    for i in range(4):
        r = post(sim_draft.base_url, "/v1/chat/completions",
                 chat(chat_messages("code", i), max_tokens=80, temperature=0, ignore_eos=True))
        served += r.events[-1]["usage"]["completion_tokens"]
        chunks += len(r.tokens_per_chunk())
    d = diff(spec_counters(sim_draft), before)
    drafts = d[("vllm:spec_decode_num_drafts_total", None)]
    accepted = d[("vllm:spec_decode_num_accepted_tokens_total", None)]
    per_pos = [d[("vllm:spec_decode_num_accepted_tokens_per_pos_total", str(i))] for i in range(K)]
    assert d[("vllm:generation_tokens_total", None)] == served
    assert accepted == sum(per_pos) and per_pos == sorted(per_pos, reverse=True)
    assert d[("vllm:spec_decode_num_draft_tokens_total", None)] <= K * drafts
    # each verify step: accepted + 1 bonus token; plus one prefill chunk and one undrafted last step per request
    assert accepted + drafts + 4 <= served <= accepted + drafts + 8
    assert drafts <= chunks


def test_acceptance_is_higher_for_code_and_summaries_than_for_open_questions(sim_draft):
    def mean_acceptance_length(kind):
        before = spec_counters(sim_draft)
        for i in range(4):
            post(sim_draft.base_url, "/v1/chat/completions",
                 chat(chat_messages(kind, i), max_tokens=100, temperature=0, ignore_eos=True))
        d = diff(spec_counters(sim_draft), before)
        return 1 + d[("vllm:spec_decode_num_accepted_tokens_total", None)] / d[("vllm:spec_decode_num_drafts_total", None)]

    code, summ, qa = (mean_acceptance_length(k) for k in ("code", "summarization", "qa"))
    assert code > qa + 1.0 and summ > qa + 1.0


def test_per_request_spec_metrics_ride_the_final_usage_chunk():
    with start_sim(*TINY, "--spec-method", "draft", "--per-request-spec-decode-metrics", "summary") as s:
        r = post(s.base_url, "/v1/chat/completions", chat(chat_messages("code", 0), max_tokens=50, ignore_eos=True))
        m = r.events[-1]["metrics"]["speculative_decoding"]
        sizes = r.tokens_per_chunk()
        assert m["num_spec_steps"] >= len([n for n in sizes if n > 1])
        assert m["num_accepted_draft_tokens"] == sum(n - 1 for n in sizes)
        assert sum(m["acceptance_histogram"]) == m["num_spec_steps"] and len(m["acceptance_histogram"]) == 5
