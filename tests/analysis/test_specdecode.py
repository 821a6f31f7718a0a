"""Acceptance from server counters, per-request fields and chunk sizes."""

import pytest

from tests.analysis.runfactory import T0, record, scrape, step, write_run
from tokenswarm.analysis import load_run, spec_decode_tables, windows
from tokenswarm.analysis.specdecode import server_deltas

DR, DT, AC = ("vllm:spec_decode_num_drafts_total", "vllm:spec_decode_num_draft_tokens_total",
              "vllm:spec_decode_num_accepted_tokens_total")


def _scrapes():
    # counters before steady_at (T0+10), inside, and after ended_at (T0+60); 2 engines summed
    return [
        scrape(T0 + 5, {DR: 1000, DT: 3000, AC: 1500, "vllm:num_requests_waiting": 3}, [800, 500, 200], engines=2),
        scrape(T0 + 30, {DR: 3000, DT: 9000, AC: 5000}, [2000, 1800, 1200], engines=2),
        scrape(T0 + 61, {DR: 6000, DT: 18000, AC: 11500}, [5800, 3500, 2200], engines=2),
        scrape(T0 + 90, {DR: 9000, DT: 27000, AC: 20000}, [8000, 7000, 5000], engines=2),
    ]


def test_server_counter_deltas_use_the_scrapes_around_the_steady_window(tmp_path):
    steps = [step(0, "concurrency", 4, T0, T0 + 10, T0 + 60)]
    run = load_run(write_run(tmp_path / "run", [record(0, step=0, phase="steady", sent_at_s=T0 + 20)],
                             steps=steps, server_metrics=_scrapes()))
    d = server_deltas(run.server_metrics, T0 + 10, T0 + 60)
    assert d["server_drafts_count"] == 5000 and d["server_draft_tokens_count"] == 15000
    assert d["server_accepted_tokens_count"] == 10000
    assert d["server_acceptance_rate"] == pytest.approx(10000 / 15000)
    assert d["server_mean_acceptance_length_tokens"] == pytest.approx(1 + 10000 / 5000)
    assert d["server_per_position_acceptance_rate"] == pytest.approx([5000 / 5000, 3000 / 5000, 2000 / 5000])
    assert d["server_scrape_before_s"] == T0 + 5 and d["server_scrape_after_s"] == T0 + 61
    assert d["server_num_spec_tokens_count"] == 3


def test_per_request_fields_and_chunk_inference_per_task(tmp_path):
    steps = [step(0, "concurrency", 4, T0, T0, T0 + 60)]
    recs = []
    for i in range(10):
        # qa: accepted 2 of 3 per step -> chunks of 3 tokens; code: no acceptance -> 1 token chunks
        if i % 2:
            sd = {"num_spec_steps": 10, "num_accepted_draft_tokens": 20, "num_draft_tokens": 30,
                  "num_spec_tokens": 3, "mean_acceptance_length": 3.0, "acceptance_histogram": [0, 0, 10, 0]}
            recs.append(record(i, task="qa", step=0, phase="steady", spec_decode=sd,
                               chunk_offsets_ms=[10.0 * j for j in range(1, 12)], chunk_tokens=[1] + [3] * 10))
        else:
            sd = {"acceptance_histogram": {"0": 10}, "num_draft_tokens": 30, "num_spec_tokens": 3}  # old sparse shape
            recs.append(record(i, task="code", step=0, phase="steady", spec_decode=sd,
                               chunk_offsets_ms=[10.0 * j for j in range(1, 12)], chunk_tokens=[1] * 11))
    run = load_run(write_run(tmp_path / "run", recs, steps=steps))
    wins, _ = windows(run)
    rows = {r["task"]: r for r in spec_decode_tables(run, wins)["rows"]}
    assert rows["qa"]["request_acceptance_rate"] == pytest.approx(2 / 3)
    assert rows["qa"]["request_mean_acceptance_length_tokens"] == pytest.approx(3.0)
    assert rows["code"]["request_mean_acceptance_length_tokens"] == pytest.approx(1.0)
    assert rows["all"]["request_acceptance_rate"] == pytest.approx(100 / 300)
    assert rows["qa"]["chunk_mean_tokens_per_chunk_tokens"] == 3.0
    assert rows["qa"]["tokens_per_chunk_histogram"] == [{"chunk_size_tokens": 3, "chunks_count": 50}]
    assert rows["qa"]["chunk_estimate_reliable"] and rows["qa"]["chunks_over_k_plus_1_count"] == 0
    assert not rows["code"]["chunk_estimate_reliable"]  # one token per chunk says nothing


def test_chunks_above_k_plus_1_flag_coalescing(tmp_path):
    recs = [record(i, chunk_offsets_ms=[10.0 * j for j in range(1, 12)], chunk_tokens=[1] + [3] * 8 + [9, 9],
                   spec_decode={"num_spec_steps": 10, "num_accepted_draft_tokens": 20, "num_spec_tokens": 3})
            for i in range(5)]
    run = load_run(write_run(tmp_path / "run", recs))
    wins, _ = windows(run)
    sd = spec_decode_tables(run, wins)
    row = sd["rows"][0]
    assert sd["num_spec_tokens_count"] == 3
    assert row["chunks_over_k_plus_1_count"] == 10 and row["chunks_over_k_plus_1_share"] == pytest.approx(0.2)
    assert not row["chunk_estimate_reliable"] and "coalesced" in row["chunk_estimate_notes"][0]


def test_a_chunk_estimate_that_contradicts_the_per_request_metrics_is_not_reliable():
    from tokenswarm.analysis.specdecode import _check_against_requests

    row = {"request_mean_acceptance_length_tokens": 3.45, "chunk_mean_tokens_per_chunk_tokens": 2.18,
           "chunk_estimate_reliable": True, "chunk_estimate_notes": []}
    _check_against_requests(row)
    assert not row["chunk_estimate_reliable"] and "disagrees" in row["chunk_estimate_notes"][0]
    close = {"request_mean_acceptance_length_tokens": 3.45, "chunk_mean_tokens_per_chunk_tokens": 3.3,
             "chunk_estimate_reliable": True, "chunk_estimate_notes": []}
    _check_against_requests(close)
    assert close["chunk_estimate_reliable"] and close["chunk_estimate_notes"] == []
