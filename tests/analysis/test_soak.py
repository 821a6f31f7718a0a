"""Soak windows, drift detection and error bursts."""

import numpy as np
import pytest

from tests.analysis.runfactory import T0, failed, record, scrape, write_run
from tokenswarm.analysis import load_run, soak
from tokenswarm.analysis.soak import time_windows


def _soak_records(drift_ms_per_min, minutes=30, per_min=40, seed=0, burst_minute=None):
    rng = np.random.default_rng(seed)
    recs = []
    i = 0
    for m in range(minutes):
        for j in range(per_min):
            sent = T0 + m * 60 + j * (60 / per_min)
            if burst_minute is not None and m == burst_minute and j % 4 == 0:
                recs.append(failed(i, outcome="http_error", sent_at_s=sent))
            else:
                ttft = 100 + drift_ms_per_min * m + float(rng.normal(0, 8))
                recs.append(record(i, sent_at_s=sent, chunk_offsets_ms=[ttft, ttft + 20, ttft + 40]))
            i += 1
    return recs


def test_windows_match_an_independent_grouping(tmp_path):
    recs = _soak_records(0.0, minutes=6)
    sm = [scrape(T0 + 30 * k, {"vllm:num_requests_waiting": float(k % 3), "vllm:kv_cache_usage_perc": 0.5}, engines=2)
          for k in range(12)]
    rows = time_windows(load_run(write_run(tmp_path / "run", recs, server_metrics=sm)), 60.0)
    assert len(rows) == 6
    for w in rows:
        start = T0 + 60 * w["window_index"]
        sel = [r for r in recs if start <= r["sent_at_s"] + r["e2e_ms"] / 1000 < start + 60 or
               (w["window_index"] == 5 and r["sent_at_s"] + r["e2e_ms"] / 1000 >= start)]
        assert w["requests_count"] == len(sel)
        assert w["ttft_p50_ms"] == pytest.approx(np.percentile([r["ttft_ms"] for r in sel], 50))
    # gauges: engines summed for the queue, averaged for KV-cache use
    assert rows[0]["server_queue_waiting_mean_count"] == pytest.approx(np.mean([0, 1]))
    assert rows[0]["server_kv_cache_usage_mean_perc"] == pytest.approx(0.5)


def test_injected_drift_is_detected(tmp_path):
    out = soak(load_run(write_run(tmp_path / "run", _soak_records(2.0))), 60.0)
    d = {x["series"]: x for x in out["drift"]}
    assert out["applicable"]
    assert d["ttft_p50_ms"]["drift_detected"] and d["ttft_p50_ms"]["direction"] == "up"
    assert d["ttft_p50_ms"]["theil_sen_slope_per_hour"] == pytest.approx(120.0, rel=0.15)


def test_no_drift_is_not_reported(tmp_path):
    out = soak(load_run(write_run(tmp_path / "run", _soak_records(0.0, seed=3))), 60.0)
    assert not any(x["drift_detected"] for x in out["drift"]), out["drift"]
    assert out["error_bursts"] == []


def test_error_burst_is_found_in_its_window(tmp_path):
    out = soak(load_run(write_run(tmp_path / "run", _soak_records(0.0, burst_minute=12))), 60.0)
    assert len(out["error_bursts"]) == 1
    b = out["error_bursts"][0]
    assert b["first_window_index"] in (12, 13) and b["errors_count"] >= 8


def test_a_window_percentile_below_its_need_is_neither_plotted_nor_tested_for_drift(tmp_path):
    out = soak(load_run(write_run(tmp_path / "run", _soak_records(2.0))), 60.0)  # 40 requests a minute
    w = out["windows"][0]
    assert w["ttft_count"] == 40 and w["ttft_p50_ms"] is not None and w["ttft_p99_ms"] is None
    d = {x["series"]: x for x in out["drift"]}
    assert d["ttft_p99_ms"]["windows_count"] == 0 and not d["ttft_p99_ms"]["drift_detected"]
