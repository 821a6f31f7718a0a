"""What a reader of the sweep report needs: server view, what was sent, knees on TTFT/TPOT,
an SLO matrix, and no noise (no spec-decode tables without speculation, no drift test on a sweep)."""

from __future__ import annotations

import pytest

from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import analyse
from tokenswarm.analysis.curves import curves
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.render_doc import report_doc
from tokenswarm.analysis.render_slo import slo_matrix_blocks
from tokenswarm.analysis.sent import what_was_sent
from tokenswarm.analysis.soak import soak
from tokenswarm.analysis.step_windows import windows


def _row(i, users, tps, e2e, ttft, tpot):
    return {"task": "all", "step_index": i, "step_name": f"c{users}", "step_kind": "concurrency",
            "step_concurrency_users": users, "output_tokens_per_s": tps, "e2e_p95_ms": e2e, "ttft_p99_ms": ttft,
            "tpot_p99_ms": tpot}


def test_a_knee_on_tpot_is_found_when_e2e_shows_none():
    rows = [_row(0, 1, 10, 100, 10, 5), _row(1, 4, 38, 110, 11, 6), _row(2, 16, 60, 120, 12, 30)]
    c = curves(rows, [])
    assert c["knee"]["latency_metric"] == "tpot_p99_ms" and c["knee"]["knee_step_name"] == "c16"
    knees = {k["latency_metric"]: k["knee_step_name"] for k in c["knees"]}
    assert knees == {"e2e_p95_ms": None, "ttft_p99_ms": None, "tpot_p99_ms": "c16"}


def _sweep(tmp_path, scenario=None):
    steps = [step(0, "concurrency", 1, T0, T0 + 1, T0 + 300), step(1, "concurrency", 4, T0 + 300, T0 + 301, T0 + 600)]
    recs = [record(i, step=i // 300, phase="steady", sent_at_s=T0 + 2 + i, prompt_tokens=100 + i % 7, task="qa",
                   max_tokens=64) for i in range(598)]
    return load_run(write_run(tmp_path / "sweep", recs, steps=steps, scenario=scenario or {},
                              ended_at=T0 + 600))


def test_a_sweep_gets_no_drift_test(tmp_path):
    out = soak(_sweep(tmp_path), 60.0)
    assert out["applicable"] and not out["drift_applicable"] and out["drift"] == []
    assert "constant-load" in out["drift_note"]


def test_what_was_sent_compares_requested_with_server_counted_prompt_lengths(tmp_path):
    sc = {"traffic": {"classes": {"qa": {"prompt_tokens": {"dist": "fixed", "value": 40},
                                         "requested_mean_tokens": {"prompt_tokens": 40.0}}}}}
    run = _sweep(tmp_path, sc)
    (row,) = what_was_sent(run, windows(run)[0])
    assert row["task"] == "qa" and row["requests_count"] == 598
    assert row["requested_prompt_mean_tokens"] == 40
    assert row["counted_prompt_mean_tokens"] == pytest.approx(103, abs=0.1)
    assert row["prompt_counted_to_requested_ratio"] == pytest.approx(103 / 40, rel=1e-3)
    assert row["prompt_sizing_suspect"] is True, "2.6x the requested length: sized with the wrong tokenizer"
    assert row["max_tokens_mean_tokens"] == 64 and row["output_p50_tokens"] == 4


def test_the_slo_matrix_has_one_row_per_step_and_one_column_per_task():
    res = [{"step_name": "c1", "task": "all", "slo_name": "ttft_p95_ms", "passed": True, "observed_value": 10.0,
            "threshold_value": 800.0, "comparison": "<=", "detail": ""},
           {"step_name": "c1", "task": "qa", "slo_name": "ttft_p95_ms", "passed": False, "observed_value": 900.0,
            "threshold_value": 800.0, "comparison": "<=", "detail": ""}]
    table, failures = slo_matrix_blocks(res)
    assert table[1] == ["step", "all", "qa"] and table[2] == [["c1", "PASS", "FAIL ttft_p95_ms"]]
    assert failures[1] == ["c1 / qa: ttft_p95_ms observed 900, needs <= 800"]


def test_a_run_without_speculation_gets_one_sentence_not_spec_decode_tables(tmp_path):
    s = analyse(_sweep(tmp_path))
    blocks = report_doc(s, {})
    i = blocks.index(("h2", "Speculative decoding"))
    assert blocks[i + 1][0] == "p" and "No speculative-decoding signal" in blocks[i + 1][1]
    assert blocks[i + 2][0] == "h2", "the next section follows directly"
    widest = max(len(b[1]) for b in blocks if b[0] == "table")
    assert widest <= 11, f"a table with {widest} columns is wider than the page"
