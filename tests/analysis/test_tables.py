"""Step tables: every statistic against an independent computation on the raw records
(the glossary's formulas written out in tests/helpers/reference.py, and numpy)."""

import numpy as np
import pytest

from tests.analysis.runfactory import T0, failed, record, step, write_run
from tests.helpers import reference as ref
from tokenswarm.analysis import load_run, step_table
from tokenswarm.analysis.per_request import derived
from tokenswarm.analysis.stats import PERCENTILE_KEYS, PERCENTILES


def _random_records(rng, n, step_index=None, phase=None, t0=T0):
    recs = []
    for i in range(n):
        k = int(rng.integers(2, 30))
        gaps = rng.gamma(2.0, 8.0, k - 1)
        offs = (rng.gamma(3.0, 40.0) + np.concatenate([[0.0], np.cumsum(gaps)])).round(3).tolist()
        toks = rng.integers(0, 4, k).tolist() if i % 5 else None  # some without exact counts, some 0-token chunks
        toks = None if toks is None else [max(toks[0], 1)] + toks[1:]
        recs.append(record(i, chunk_offsets_ms=offs, chunk_tokens=toks,
                           output_tokens=(sum(toks) if toks else k), task=("qa", "code")[i % 2],
                           sent_at_s=t0 + i * 0.05, step=step_index, phase=phase,
                           schedule_lag_ms=float(rng.exponential(3.0)), e2e_ms=offs[-1] + 2.0))
    return recs


@pytest.fixture(scope="module")
def random_run(tmp_path_factory):
    rng = np.random.default_rng(11)
    recs = _random_records(rng, 400)
    recs += [failed(1000 + i, outcome=("timeout", "http_error", "stream_error")[i % 3], sent_at_s=T0 + i) for i in range(9)]
    return write_run(tmp_path_factory.mktemp("r") / "run", recs), recs


def test_vectorised_per_request_metrics_equal_the_glossary_formulas(random_run):
    path, recs = random_run
    run = load_run(path)
    d = derived(run)
    for i, r in enumerate(recs):
        exp_tpot = ref.tpot_ms(r["ttft_ms"], r["e2e_ms"], r["output_tokens"])
        exp_tps = ref.request_output_tps(r["output_tokens"], r["e2e_ms"])
        got_tpot, got_tps = d["tpot_ms"][i], d["request_output_tps"][i]
        assert (np.isnan(got_tpot) if exp_tpot is None else got_tpot == pytest.approx(exp_tpot, rel=1e-12))
        assert (np.isnan(got_tps) if exp_tps is None else got_tps == pytest.approx(exp_tps, rel=1e-12))
        exp_sched = ref.with_schedule(r["schedule_lag_ms"], r["ttft_ms"])
        got_sched = d["ttft_from_schedule_ms"][i]
        assert (np.isnan(got_sched) if exp_sched is None else got_sched == pytest.approx(exp_sched, rel=1e-12))


def test_chunk_csr_layout_reproduces_the_glossary_gaps(random_run):
    path, recs = random_run
    run = load_run(path)
    for i, r in enumerate(recs):
        gaps = run.gap_ms[run.gap_ptr[i]:run.gap_ptr[i + 1]]
        np.testing.assert_allclose(gaps, ref.inter_chunk_ms(r["chunk_offsets_ms"]), rtol=1e-6, atol=1e-5)


def test_latency_percentiles_equal_numpy_on_the_glossary_values(random_run):
    path, recs = random_run
    row = step_table(load_run(path)).row(None)
    ok = [r for r in recs if r["outcome"] == "ok"]
    n_failed = len(recs) - len(ok)
    expected = {
        "ttft": [r["ttft_ms"] for r in ok],
        "e2e": [r["e2e_ms"] for r in ok],
        "tpot": [v for r in ok if (v := ref.tpot_ms(r["ttft_ms"], r["e2e_ms"], r["output_tokens"])) is not None],
        "itl": [v for r in ok for v in ref.itl_ms(r["chunk_offsets_ms"], r["chunk_tokens"])],
        "inter_chunk": [v for r in ok for v in ref.inter_chunk_ms(r["chunk_offsets_ms"])],
        "schedule_lag": [r["schedule_lag_ms"] for r in recs],
    }
    for name, values in expected.items():
        pct = np.percentile(values, PERCENTILES)
        got = [row[f"{name}_{k}_ms"] for k in PERCENTILE_KEYS]
        # chunk gaps are stored as float32: 1e-6 relative
        np.testing.assert_allclose(got, pct, rtol=1e-6, atol=1e-4, err_msg=name)
        assert row[f"{name}_count"] == len(values)
        assert row[f"{name}_mean_ms"] == pytest.approx(np.mean(values), rel=1e-6)
        assert row[f"{name}_min_ms"] == pytest.approx(min(values), rel=1e-6)
        assert row[f"{name}_max_ms"] == pytest.approx(max(values), rel=1e-6)
    assert row["ttft_failed_share"] == pytest.approx(n_failed / len(recs))
    assert row["itl_failed_share"] == pytest.approx(n_failed / len(recs))
    assert row["itl_per_chunk_samples_share"] > 0  # requests without chunk_tokens give per-chunk samples


def test_constant_itl_run_gives_that_constant_everywhere(tmp_path):
    recs = [record(i, chunk_offsets_ms=[50.0 + 25.0 * j for j in range(40)], chunk_tokens=[1] + [2] * 39)
            for i in range(50)]
    row = step_table(load_run(write_run(tmp_path / "run", recs))).row(None)
    for k in PERCENTILE_KEYS + ("mean", "min", "max"):
        assert row[f"itl_{k}_ms"] == 12.5
        assert row[f"inter_chunk_{k}_ms"] == 25.0
    assert row["itl_count"] == 50 * 39 * 2 and row["inter_chunk_count"] == 50 * 39


def test_steady_window_throughput_excludes_warmup_and_uses_manifest_duration(tmp_path):
    steps = [step(0, "concurrency", 2, T0, T0 + 10, T0 + 60), step(1, "concurrency", 8, T0 + 60, T0 + 70, T0 + 100)]
    recs = []
    for i in range(100):
        recs.append(record(i, step=0, phase="warmup" if i < 20 else "steady", output_tokens=10,
                           chunk_offsets_ms=[10.0] * 1, chunk_tokens=[10], sent_at_s=T0 + i * 0.5))
    for i in range(100, 190):
        recs.append(record(i, step=1, phase="steady", output_tokens=4, chunk_offsets_ms=[5.0], chunk_tokens=[4],
                           sent_at_s=T0 + 70 + (i - 100) * 0.3))
    recs.append(failed(999, step=1, phase="steady", sent_at_s=T0 + 80))
    recs.append(failed(998, outcome="cancelled", step=1, phase="steady", sent_at_s=T0 + 99))
    t = step_table(load_run(write_run(tmp_path / "run", recs, steps=steps)))
    r0, r1 = t.row(0), t.row(1)
    assert r0["requests_count"] == 80 and r0["window_duration_s"] == 50.0
    assert r0["requests_per_s"] == pytest.approx(80 / 50) and r0["output_tokens_per_s"] == pytest.approx(800 / 50)
    assert r1["window_duration_s"] == 30.0 and r1["ok_count"] == 90
    assert r1["output_tokens_per_s"] == pytest.approx(90 * 4 / 30)
    assert r1["error_rate"] == pytest.approx(1 / 91) and r1["timeout_rate"] == pytest.approx(1 / 91)
    assert r1["cancelled_count"] == 1  # counted, but not an error
    assert r1["step_concurrency_users"] == 8 and r1["step_rate_rps"] is None
    assert any("warm-up" in n for n in t.notes)


def test_run_without_steps_falls_back_to_all_records_with_a_note(tmp_path):
    recs = [record(i, sent_at_s=T0 + i) for i in range(10)]
    t = step_table(load_run(write_run(tmp_path / "run", recs)))
    row = t.row(None)
    # span: first sent_at_s .. last end (sent_at_s + e2e)
    assert row["window_duration_s"] == pytest.approx(9 + recs[-1]["e2e_ms"] / 1000)
    assert row["duration_source"].startswith("span")
    assert any("no load steps" in n for n in t.notes)


def test_open_loop_step_reports_schedule_inclusive_latency_for_a_poisson_schedule(tmp_path):
    rng = np.random.default_rng(5)
    rate = 20.0
    arrivals = np.cumsum(rng.exponential(1 / rate, 400))
    lags = rng.exponential(4.0, arrivals.size)
    duration = float(arrivals[-1] + 0.001)
    steps = [step(0, "rate", rate, T0, T0, T0 + duration)]
    recs = [record(i, step=0, phase="steady", sent_at_s=float(T0 + a + lag / 1000), schedule_lag_ms=float(lag),
                   chunk_offsets_ms=[80.0 + i % 7, 100.0, 120.0])
            for i, (a, lag) in enumerate(zip(arrivals, lags))]
    row = step_table(load_run(write_run(tmp_path / "run", recs, steps=steps, load_mode="open"))).row(0)
    assert row["requests_per_s"] == pytest.approx(400 / duration)
    assert row["requests_per_s"] == pytest.approx(rate, rel=0.15)  # the known Poisson rate
    ttft = np.array([r["ttft_ms"] for r in recs])
    np.testing.assert_allclose([row[f"ttft_from_schedule_{k}_ms"] for k in PERCENTILE_KEYS],
                               np.percentile(ttft + lags, PERCENTILES), rtol=1e-9)
    np.testing.assert_allclose(row["schedule_lag_p99_ms"], np.percentile(lags, 99), rtol=1e-9)


def test_goodput_counts_successful_requests_meeting_per_request_thresholds(tmp_path):
    recs = [record(i, chunk_offsets_ms=[float(100 + 10 * i), 300.0 + 10 * i]) for i in range(20)]
    recs.append(failed(50))
    run = load_run(write_run(tmp_path / "run", recs))
    t = step_table(run, slo={"ttft_p95_ms": 195.0, "ttft_p50_ms": 120.0})  # per request: ttft <= max = 195
    row = t.row(None)
    good = sum(1 for r in recs if r["outcome"] == "ok" and r["ttft_ms"] <= 195.0)
    assert row["good_count"] == good == 10
    assert row["goodput_share"] == pytest.approx(good / 21)
    assert row["goodput_requests_per_s"] == pytest.approx(good / row["window_duration_s"])
    assert step_table(run, slo={}).row(None)["goodput_share"] is None  # no thresholds: not computed


def test_errors_table_groups_by_kind(tmp_path):
    recs = [record(i) for i in range(6)]
    recs += [failed(10, outcome="http_error", http_status=503, error="HTTP 503"),
             failed(11, outcome="http_error", http_status=503, error="HTTP 503"),
             failed(12, outcome="timeout", error="first token timeout")]
    errs = step_table(load_run(write_run(tmp_path / "run", recs))).errors
    all_rows = [e for e in errs if e["task"] == "all"]
    assert all_rows[0] == {**all_rows[0], "outcome": "http_error", "http_status": 503, "requests_count": 2}
    assert all_rows[0]["requests_share"] == pytest.approx(2 / 9)
    assert {e["outcome"] for e in all_rows} == {"http_error", "timeout"}
