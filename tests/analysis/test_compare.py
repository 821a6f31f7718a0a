"""Baseline vs candidate: speedups with CIs, collapse note, output consistency."""

import numpy as np
import pytest

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import NotComparableError, compare_runs, load_run

STEPS = [step(0, "concurrency", 1, T0, T0, T0 + 100), step(1, "concurrency", 8, T0 + 100, T0 + 100, T0 + 200)]
TEXT = "The quick brown fox jumps over the lazy dog and keeps running far away"


def _req(i, s, tokens_per_chunk, gap_ms, text, temperature=0.0, spec=None, rng=None):
    n_tokens = 48
    n_chunks = n_tokens // tokens_per_chunk
    ttft = 100.0 + float(rng.exponential(10.0))
    offs = [ttft + gap_ms * j * (1 + 0.1 * float(rng.random())) for j in range(n_chunks)]
    return record(i, step=s, phase="steady", sent_at_s=T0 + 100 * s + (i % 200) * 0.4, chunk_offsets_ms=offs,
                  chunk_tokens=[1] + [tokens_per_chunk] * (n_chunks - 1), output_tokens=1 + tokens_per_chunk * (n_chunks - 1),
                  output_text=text, temperature=temperature, spec_decode=spec, task=("qa", "code")[i % 2])


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    root = tmp_path_factory.mktemp("cmp")
    rng = np.random.default_rng(0)
    base, cand = [], []
    spec = {"num_spec_steps": 24, "num_accepted_draft_tokens": 24, "num_draft_tokens": 72, "num_spec_tokens": 3}
    for s in (0, 1):
        for i in range(200):
            k = 1000 * s + i
            base.append(_req(k, s, 1, 20.0, TEXT, rng=rng))
            changed = TEXT[:17] + "X" + TEXT[18:] if i % 10 == 3 else TEXT
            # step 0: candidate decodes 2 tokens per chunk at the same chunk gap (faster);
            # step 1: acceptance is high but only 150 of 200 requests finish (throughput collapses)
            if s == 1 and i >= 150:
                continue
            cand.append(_req(k, s, 2, 20.0, changed, spec=spec, rng=rng))
        if s == 0:  # faster requests: a closed loop completes more of them in the same window
            cand += [_req(5000 + i, 0, 2, 20.0, TEXT, spec=spec, rng=rng) for i in range(100)]
    return (load_run(write_run(root / "base", base, steps=STEPS), keep_text=True),
            load_run(write_run(root / "cand", cand, steps=STEPS), keep_text=True), base, cand)


def _tps(recs, s):
    return np.array([r["output_tokens"] / (r["e2e_ms"] / 1000) for r in recs if r["step"] == s])


def test_speedups_match_independent_computation_with_cis(pair):
    a, b, base, cand = pair
    out = compare_runs(a, b, n_boot=400, seed=1)
    rows = {(r["step_name"], r["task"]): r for r in out["rows"]}
    r0 = rows[("c1", "all")]
    expected = np.median(_tps(cand, 0)) / np.median(_tps(base, 0))
    assert r0["request_output_tps_p50_speedup_ratio"] == pytest.approx(expected, rel=1e-12)
    assert r0["request_output_tps_p50_speedup_ci_low_ratio"] < expected < r0["request_output_tps_p50_speedup_ci_high_ratio"]
    assert r0["request_output_tps_p50_speedup_ci_low_ratio"] > 1.3  # a real speedup: CI excludes 1
    tok = lambda recs, s: sum(r["output_tokens"] for r in recs if r["step"] == s)  # noqa: E731
    assert rows[("c8", "all")]["output_tokens_per_s_speedup_ratio"] == pytest.approx(tok(cand, 1) / tok(base, 1))
    e2e_a = np.percentile([r["e2e_ms"] for r in base if r["step"] == 0], 95)
    e2e_b = np.percentile([r["e2e_ms"] for r in cand if r["step"] == 0], 95)
    assert r0["e2e_p95_ratio"] == pytest.approx(e2e_b / e2e_a, rel=1e-12)
    assert r0["e2e_p95_ci_low_ratio"] <= r0["e2e_p95_ratio"] <= r0["e2e_p95_ci_high_ratio"]
    assert ("c1", "qa") in rows and ("c1", "code") in rows


def test_bootstrap_is_seeded(pair):
    a, b, _, _ = pair
    x = compare_runs(a, b, n_boot=200, seed=5)["rows"][0]
    y = compare_runs(a, b, n_boot=200, seed=5)["rows"][0]
    assert x == y


def test_collapse_is_named_where_acceptance_rose_but_throughput_did_not(pair):
    a, b, _, _ = pair
    notes = compare_runs(a, b, n_boot=100)["collapse_notes"]
    assert len(notes) == 1 and notes[0].startswith("Step c8") and "collapse" in notes[0]


def test_consistency_finds_exactly_the_diverging_outputs(pair):
    a, b, base, cand = pair
    c = compare_runs(a, b, n_boot=50)["consistency"]
    diverging = {r["request_key"] for r in cand if r["output_text"] != TEXT}
    assert c["judged_pairs_count"] == len(cand) - 100 and c["diverging_count"] == len(diverging)
    assert c["exact_match_rate"] == pytest.approx(1 - len(diverging) / (len(cand) - 100))
    assert c["greedy_divergence"] and c["greedy_diverging_count"] == len(diverging)
    ex = c["examples"][0]
    assert ex["request_key"] in diverging and ex["first_divergence_char_index"] == 17
    assert ex["first_divergence_word_index"] == 3
    assert ex["similarity_ratio"] == pytest.approx(1 - 1 / len(TEXT), abs=0.01)


def test_hash_only_and_sampled_divergence_is_not_greedy(tmp_path):
    base = [record(i, output_text=None, temperature=0.7) for i in range(10)]
    cand = [record(i, output_text=None, temperature=0.7, output_sha256=("f" * 64 if i < 3 else None)) for i in range(10)]
    for r, b in zip(cand[3:], base[3:]):
        r["output_sha256"] = b["output_sha256"]
    c = compare_runs(load_run(write_run(tmp_path / "a", base)), load_run(write_run(tmp_path / "b", cand)),
                     n_boot=20)["consistency"]
    assert c["diverging_count"] == 3 and not c["greedy_divergence"] and not c["texts_compared"]
    assert c["examples"][0]["first_divergence_char_index"] is None


def test_duplicate_request_keys_join_by_occurrence(tmp_path):
    # the same prompt sent twice: the n-th baseline occurrence pairs with the n-th candidate one
    base = [record(0, request_key="k" * 64, sent_at_s=T0 + t, output_text=txt) for t, txt in ((1, "a"), (2, "b"))]
    cand = [record(0, request_key="k" * 64, sent_at_s=T0 + t, output_text=txt) for t, txt in ((5, "a"), (6, "b"))]
    c = compare_runs(load_run(write_run(tmp_path / "a", base), keep_text=True),
                     load_run(write_run(tmp_path / "b", cand), keep_text=True), n_boot=20)["consistency"]
    assert c["joined_pairs_count"] == 2 and c["exact_match_rate"] == 1.0


def test_runs_are_matched_by_what_was_sent_not_by_scenario_name(tmp_path):
    a = load_run(write_run(tmp_path / "a", [record(i) for i in range(3)]))
    b = load_run(write_run(tmp_path / "b", [record(i) for i in range(3)], scenario_name="other"))
    result = compare_runs(a, b, n_boot=20)
    assert result["shared_request_keys_count"] == 3 and result["candidate_scenario_name"] == "other"
    c = load_run(write_run(tmp_path / "c", [record(100 + i) for i in range(3)]))
    with pytest.raises(NotComparableError, match="no request_key in common"):
        compare_runs(a, c)


def test_runs_sharing_too_few_requests_are_refused_with_both_directories_named(tmp_path):
    a = load_run(write_run(tmp_path / "a", [record(i) for i in range(10)]))
    b = load_run(write_run(tmp_path / "b", [record(i) for i in range(2)] + [record(100 + i) for i in range(8)]))
    with pytest.raises(NotComparableError, match=r"/a and .*/b: only 20% .*did not send the same traffic"):
        compare_runs(a, b)


def test_throughput_ci_has_width_even_when_every_answer_has_the_same_length(pair):
    """Aggregate tokens/s varies with how many requests finish in the window, not only with
    their lengths: equal-length answers (fixed max_tokens, ignore_eos) must not collapse the CI."""
    a, b, base, cand = pair
    assert len({r["output_tokens"] for r in base if r["step"] == 0}) == 1
    row = {(r["step_name"], r["task"]): r for r in compare_runs(a, b, n_boot=400, seed=2)["rows"]}[("c1", "all")]
    lo, hi = row["output_tokens_per_s_speedup_ci_low_ratio"], row["output_tokens_per_s_speedup_ci_high_ratio"]
    assert lo < row["output_tokens_per_s_speedup_ratio"] < hi and hi - lo > 0.05


def test_every_task_and_step_where_the_candidate_is_significantly_slower_is_named(pair):
    a, b, _base, _cand = pair
    result = compare_runs(a, b, n_boot=200)
    slow_rows = [r for r in result["rows"]
                 if (r["request_output_tps_p50_speedup_ci_high_ratio"] or 2.0) < 1.0
                 or (r["output_tokens_per_s_speedup_ci_high_ratio"] or 2.0) < 1.0]
    assert slow_rows, "the fixture has a step where the candidate is slower"
    named = {(n.split(",")[0].removeprefix("Step "), n.split("task ")[1].split(":")[0]) for n in result["slower_notes"]}
    assert {(r["step_name"], r["task"]) for r in slow_rows} == named
