"""tokenswarm against llama.cpp's real server, with and without speculative decoding.

Real Locust runs against ``llama-server`` serving the tiny test model as GGUF (the same
weights and vocabulary as the vLLM tests), then the real analysis and ``tokenswarm compare``.
Nothing tells tokenswarm which engine it talks to; it must find out from what llama.cpp
sends: its ``/tokenize`` dialect, one SSE event per token with no per-chunk usage,
``timings.draft_n`` in the final chunk and ``llamacpp:``-prefixed Prometheus names. The model
decodes greedily along a fixed successor chain, so every answer is known in advance; with the
model as its own draft every drafted token is accepted, so acceptance is known too (1.0).

Needs the llama-server binary (``bash .ci/install-llamacpp.sh``, or
``$TOKENSWARM_LLAMACPP_SERVER``); skipped otherwise (and then a CI failure, see tiers.py).
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from tests.helpers.runs import read_manifest, read_records
from tests.real_engine.llamacpp_runs import SKIP_REASON, LlamaCppRuns, logged_tasks
from tests.real_engine.test_vllm_runs import greedy_chain_text, run_delta, scrapes, tokenswarm_cli, total
from tokenswarm.analysis import analyse
from tokenswarm.analysis.loader import load_run
from tokenswarm.metrics import itl_ms
from tokenswarm.testmodel.llamacpp import DRAFT_MAX

pytestmark = [
    pytest.mark.real_engine,
    pytest.mark.timeout(600),
    pytest.mark.skipif(SKIP_REASON is not None, reason=SKIP_REASON or ""),
]

PREDICTED = "llamacpp:tokens_predicted_total"
PROMPT = "llamacpp:prompt_tokens_total"
PROMPT_CACHED = "llamacpp:prompt_tokens_cached_total"
DRAFTS = "llamacpp:spec_decode_num_drafts_total"


def ran(engine: LlamaCppRuns, name: str = "classes") -> Path:
    res = engine.results[name]
    assert res.returncode == 0, (
        f"{name} run against {'draft' if engine.speculative else 'baseline'} llama.cpp exited "
        f"{res.returncode}\n{res.stderr[-3000:]}\n--- llama.cpp log tail ---\n{engine.log_tail}")
    return engine.dirs[name]


@pytest.fixture(params=["baseline", "draft"])
def engine(request) -> LlamaCppRuns:
    return request.getfixturevalue(f"llamacpp_{request.param}")


def test_every_answer_is_the_greedy_chain_and_one_token_per_event_is_proven(engine, engine_model_dir):
    run_dir = ran(engine)
    records = read_records(run_dir)
    manifest = read_manifest(run_dir)
    assert manifest["complete"] and manifest["totals"]["records_lost"] == 0
    assert [r["outcome"] for r in records] == ["ok"] * len(records), Counter(r["error"] for r in records)
    for r in records:
        where = f"{r['task']} request {r['response_id']}"
        assert r["finish_reason"] == "length" and r["output_tokens"] == r["max_tokens"], where
        assert r["output_text"] == greedy_chain_text(engine_model_dir, r["output_tokens"]), where
        # No usage per chunk from llama.cpp: the events counted equal usage.completion_tokens,
        # which proves one token per event, and the record says the counts were inferred.
        assert r["chunk_tokens_inferred"] is True, where
        assert r["chunk_tokens"] == [1] * r["output_tokens"], where


def test_each_step_ends_as_soon_as_both_tasks_have_their_answers(engine):
    # a step that waited for a task no user sends would run to its 120 s cap, thousands of
    # requests where 20 do
    steps = read_manifest(ran(engine))["adaptive_steps"]["steps"]
    assert [(s["step"], s["stopped_by"]) for s in steps] == [("c1", "goal met"), ("c4", "goal met")], steps
    assert all(min(s["requests_ok"].values()) >= 10 for s in steps), steps


def test_prompts_are_sized_in_llama_cpp_s_own_tokenize_dialect(engine):
    run_dir = ran(engine)
    summary = analyse(load_run(run_dir))
    for row in summary["sent"]:
        # the requested size, give or take the chat template's few tokens and the spread of the
        # sized prompts (each within ~15 %; the mean of ~60 code prompts measured 0.999x), not
        # 2.7x: the vLLM-dialect probe that llama.cpp answers with an empty list would have made that
        assert 0.95 <= row["prompt_counted_to_requested_ratio"] < 1.15, row
        assert not row["prompt_sizing_suspect"], row
    assert all(not r["tokens_estimated"] for r in read_records(run_dir))


def test_server_counters_over_a_run_equal_the_records(engine):
    run_dir = ran(engine)
    ok = read_records(run_dir)
    assert run_delta(run_dir, PREDICTED) == sum(r["output_tokens"] for r in ok)
    # The run's requests in llama.cpp's own log: the last ones it finished (before them only the
    # warm-up request and the run's pilot request).
    tasks = logged_tasks(engine.log_path)
    assert 0 < len(tasks) - len(ok) <= 3, (len(tasks), len(ok))
    run_tasks = tasks[len(tasks) - len(ok):]
    # every record's prompt is the one llama.cpp processed for some request, request for request
    assert Counter(r["prompt_tokens"] for r in ok) == Counter(t.prompt_tokens for t in run_tasks)
    # A prompt's tokens are computed or served from the prompt cache. llama.cpp's two counters
    # drift from its own per-request figures by a few tokens (computed +3, cached -1 to +3, over
    # 1-3 million, in four runs of 2026-12-02); a prompt counted twice or not at all would be hundreds.
    computed = run_delta(run_dir, PROMPT)
    assert abs(computed - sum(t.prompt_processed for t in run_tasks)) <= 16, computed
    counted = computed + run_delta(run_dir, PROMPT_CACHED)
    assert abs(counted - sum(r["prompt_tokens"] for r in ok)) <= 16, counted
    # llama.cpp exports the spec-decode counters whether or not it speculates
    assert total(scrapes(run_dir)[-1], DRAFTS) is not None
    assert (run_delta(run_dir, DRAFTS) > 0) == engine.speculative


def test_acceptance_comes_from_llama_cpp_s_counters_and_per_request_timings(engine):
    run_dir = ran(engine)
    summary = analyse(load_run(run_dir))
    records = read_records(run_dir)
    obs = {o["signal"]: o for o in summary["observability"]}
    if not engine.speculative:
        assert all(r["spec_decode"] is None for r in records)
        # the counters exist (llama.cpp always exports them) but no draft was made: no value
        assert obs["acceptance_rate"]["exposed"] and obs["acceptance_rate"]["engine"] == "llama.cpp"
        assert [s["signal_value"] for s in obs["acceptance_rate"]["steps"]] == [None, None]
        assert [r["server_drafts_count"] for r in summary["spec_decode"]["rows"] if r["task"] == "all"] == [0, 0]
        return
    row = next(r for r in summary["spec_decode"]["rows"] if r["task"] == "all")
    assert row["server_source"] == "llama.cpp"
    # the model drafts for itself at temperature 0: every drafted token is accepted
    assert row["server_acceptance_rate"] == pytest.approx(1.0)
    assert row["request_acceptance_rate"] == pytest.approx(1.0)
    assert 1.0 < row["server_mean_acceptance_length_tokens"] <= DRAFT_MAX + 1
    assert len(row["server_per_position_acceptance_rate"]) == DRAFT_MAX
    for r in records:
        sd = r["spec_decode"]
        assert sd["source"] == "llama.cpp timings" and sd["num_draft_tokens"] > 0, r["response_id"]
        assert sd["num_accepted_draft_tokens"] == sd["num_draft_tokens"], r["response_id"]
    assert obs["acceptance_rate"]["exposed"] and obs["acceptance_rate"]["engine"] == "llama.cpp"
    assert obs["acceptance_rate"]["per_request_records_count"] == len(records)


def test_per_token_itl_is_taken_per_delivery_so_events_written_together_are_not_zero_gaps(engine):
    run_dir = ran(engine)
    records = read_records(run_dir)
    # llama.cpp writes each token as its own event, several in one go (a verify step's accepted
    # tokens; also plain steps faster than the client's reads): many events share an arrival.
    shared = sum(len(r["chunk_offsets_ms"]) - len(set(r["chunk_offsets_ms"])) for r in records)
    assert shared > 0
    samples = [s for r in records for s in itl_ms(r["chunk_offsets_ms"], r["chunk_tokens"])]
    assert samples and min(samples) > 0  # one delivery, one gap: never a 0 ms "token gap"
    for step in analyse(load_run(run_dir))["steps"]:
        assert step["itl_p50_ms"] > 0, step


def test_compare_finds_speculation_changed_no_output(llamacpp_baseline, llamacpp_draft, tmp_path):
    base, cand = ran(llamacpp_baseline), ran(llamacpp_draft)
    res = tokenswarm_cli("compare", str(base), str(cand), "--no-plots", "--out", str(tmp_path))
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    c = summary["consistency"]
    assert c["judged_pairs_count"] >= 5 and c["exact_match_rate"] == 1.0 and c["diverging_count"] == 0, c
    rows = [r for r in summary["rows"] if r["task"] == "all"]
    assert [r["step_name"] for r in rows] == ["c1", "c4"]
    for r in rows:
        assert r["acceptance_source"] == "per-request"  # llama.cpp's timings.draft_n_accepted
        assert r["candidate_mean_acceptance_length_tokens"] > 2.5 and r["baseline_mean_acceptance_length_tokens"] == 1.0
        # the speedup's direction needs a quiet machine: test_llamacpp_speedup.py (timing stage)
        assert r["output_tokens_per_s_speedup_ratio"] > 0, r
