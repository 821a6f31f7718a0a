"""Per-task quality shares, reasoning phases and the server's prefix-cache hit rate, from hand-made runs."""

from __future__ import annotations

import pytest

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import analyse, compare_runs, load_run

STEPS = [step(0, "concurrency", 4, T0, T0, T0 + 100)]


def extraction_records(valid_json: list[bool], valid_schema: list[bool], start: int = 0):
    out = [record(start + i, step=0, phase="steady", task="extraction", json_valid=j, schema_valid=s,
                  sent_at_s=T0 + 1 + i) for i, (j, s) in enumerate(zip(valid_json, valid_schema))]
    out += [record(start + 100 + i, step=0, phase="steady", task="qa", sent_at_s=T0 + 1 + i) for i in range(3)]
    return out


def test_quality_shares_count_only_checked_successful_requests_per_task(tmp_path):
    recs = extraction_records([True, True, True, False], [True, False, True, False])
    recs.append(record(50, step=0, phase="steady", task="extraction", outcome="timeout", json_valid=None,
                       sent_at_s=T0 + 9))
    rows = {r["task"]: r for r in analyse(load_run(write_run(tmp_path / "r", recs, steps=STEPS)))["steps"]}
    ext = rows["extraction"]
    assert (ext["json_valid_checked_count"], ext["json_valid_share"], ext["schema_valid_share"]) == (4, 0.75, 0.5)
    assert rows["qa"]["json_valid_share"] is None and rows["qa"]["json_valid_checked_count"] == 0
    assert rows["all"]["json_valid_share"] == 0.75


def test_compare_puts_both_arms_quality_shares_side_by_side(tmp_path):
    base = write_run(tmp_path / "a", extraction_records([True] * 4, [True, True, False, False]), steps=STEPS)
    cand = write_run(tmp_path / "b", extraction_records([True, True, True, False], [True] * 3 + [False]),
                     steps=STEPS)
    rows = {r["task"]: r for r in compare_runs(load_run(base), load_run(cand), n_boot=50)["rows"]}
    ext = rows["extraction"]
    assert (ext["baseline_json_valid_share"], ext["candidate_json_valid_share"]) == (1.0, 0.75)
    assert (ext["baseline_schema_valid_share"], ext["candidate_schema_valid_share"]) == (0.5, 0.75)
    assert rows["qa"]["baseline_json_valid_share"] is None


def test_reasoning_phases_split_the_gaps_at_the_first_answer_chunk(tmp_path):
    # chunks at 100, 110, 120 (reasoning), 300, 320, 340 (answer): reasoning gaps 10, 10; switch 180; answer 20, 20
    offs = [100.0, 110.0, 120.0, 300.0, 320.0, 340.0]
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 1 + i, chunk_offsets_ms=offs, reasoning_chunks=3,
                   answer_chunks=3, first_reasoning_token_ms=100.0, first_answer_token_ms=300.0, reasoning_tokens=3)
            for i in range(5)]
    recs += [record(10 + i, step=0, phase="steady", sent_at_s=T0 + 1 + i) for i in range(5)]  # plain streams
    row = next(r for r in analyse(load_run(write_run(tmp_path / "r", recs, steps=STEPS)))["steps"]
               if r["task"] == "all")
    assert row["reasoning_streams_count"] == 5 and row["reasoning_tokens_count"] == 15
    assert row["reasoning_itl_count"] == 10 and row["reasoning_itl_max_ms"] == pytest.approx(10.0)
    assert row["answer_itl_count"] == 10 and row["answer_itl_min_ms"] == pytest.approx(20.0)
    assert row["first_answer_token_p50_ms"] == 300.0 and row["first_reasoning_token_p50_ms"] == 100.0


def scrape(t: float, hits: float, queries: float, prefix: str = "vllm:prefix_cache") -> dict:
    return {"scraped_at": t, "source": "target", "error": None, "samples": [
        {"name": f"{prefix}_hits_total", "labels": {}, "value": hits},
        {"name": f"{prefix}_queries_total", "labels": {}, "value": queries}]}


@pytest.mark.parametrize("prefix", ["vllm:prefix_cache", "vllm:gpu_prefix_cache"])
def test_the_server_cache_hit_rate_per_step_is_the_ratio_of_counter_deltas_around_its_window(tmp_path, prefix):
    steps = STEPS + [step(1, "concurrency", 8, T0 + 100, T0 + 100, T0 + 200)]
    recs = [record(i, step=s, phase="steady", sent_at_s=T0 + 1 + 100 * s + i) for s in (0, 1) for i in range(3)]
    sm = [scrape(T0 - 1, 0, 0, prefix), scrape(T0 + 100, 300, 1000, prefix), scrape(T0 + 201, 1200, 2000, prefix)]
    s = analyse(load_run(write_run(tmp_path / "r", recs, steps=steps, server_metrics=sm)))
    assert [(r["prefix_cache_hits_tokens"], r["prefix_cache_queries_tokens"], r["prefix_cache_hit_rate"])
            for r in s["prefix_cache"]] == [(300, 1000, 0.3), (900, 1000, 0.9)]
    alls = [r for r in s["steps"] if r["task"] == "all"]
    assert [r["server_prefix_cache_hit_rate"] for r in alls] == [0.3, 0.9]


def test_a_counter_reset_gives_no_hit_rate_and_no_counters_give_no_section(tmp_path):
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 1 + i) for i in range(3)]
    sm = [scrape(T0 - 1, 500, 1000), scrape(T0 + 101, 10, 20)]
    s = analyse(load_run(write_run(tmp_path / "r", recs, steps=STEPS, server_metrics=sm)))
    assert s["prefix_cache"][0]["prefix_cache_hit_rate"] is None
    s2 = analyse(load_run(write_run(tmp_path / "r2", recs, steps=STEPS)))
    assert s2["prefix_cache"] == [] and "server_prefix_cache_hit_rate" not in s2["steps"][0]
