"""The observability audit on recorded engine metric text: exposed or missing, value per step."""

from __future__ import annotations

import pytest

from tests.analysis.exporter_text import LLAMACPP_SPEC, SGLANG, TGI, VLLM_SPEC
from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import analyse
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.observability import SIGNALS, audit
from tokenswarm.analysis.step_windows import windows
from tokenswarm.collect.scrape import parse_metrics


def scrape_of(text: str, t: float, scale: float) -> dict:
    samples = [{**s, "value": s["value"] * scale} for s in parse_metrics(text)]
    return {"scraped_at": t, "source": "target", "url": "http://127.0.0.1/metrics", "step": 0, "error": None,
            "samples": samples}


def run_with(tmp_path, text: str, sd: dict | None = None):
    steps = [step(0, "concurrency", 4, T0, T0 + 10, T0 + 60)]
    lines = [scrape_of(text, T0 + 5, 0.5), scrape_of(text, T0 + 30, 0.75), scrape_of(text, T0 + 61, 1.0)]
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 20 + i, spec_decode=sd) for i in range(3)]
    return load_run(write_run(tmp_path / "run", recs, steps=steps, server_metrics=lines))


def by_signal(run):
    return {o["signal"]: o for o in audit(run, windows(run)[0])}


def test_vllm_exposes_acceptance_queue_wait_kv_preemptions_and_prefix_hits(tmp_path):
    sd = {"num_spec_steps": 4, "num_accepted_draft_tokens": 6, "num_draft_tokens": 12}
    obs = by_signal(run_with(tmp_path, VLLM_SPEC, sd))
    assert obs["acceptance_rate"]["exposed"] and obs["acceptance_rate"]["engine"] == "vllm"
    assert obs["acceptance_rate"]["steps"][0]["signal_value"] == pytest.approx(5000 / 7500)
    assert obs["mean_accepted_length"]["steps"][0]["signal_value"] == pytest.approx(1 + 5000 / 2500)
    assert obs["queue_wait"]["metric"] == "vllm:request_queue_time_seconds"
    assert obs["queue_wait"]["steps"][0]["signal_value"] == pytest.approx(2.5 / 50 * 1000), "ms"
    assert obs["kv_cache_usage"]["steps"][0]["signal_value"] == pytest.approx(0.42 * 0.75)  # the scrape inside
    assert obs["preemptions"]["steps"][0]["signal_value"] == pytest.approx(3.5)
    assert obs["prefix_cache_hits"]["steps"][0]["signal_value"] == pytest.approx(0.25)
    assert obs["acceptance_rate"]["per_request_records_count"] == 3
    assert not obs["fallbacks"]["exposed"] and obs["fallbacks"]["derived_instead"]


def test_llama_cpp_server_has_acceptance_but_no_queue_wait(tmp_path):
    obs = by_signal(run_with(tmp_path, LLAMACPP_SPEC))
    assert obs["acceptance_rate"]["engine"] == "llama.cpp" and obs["accepted_per_position"]["exposed"]
    assert obs["kv_cache_usage"]["metric"] == "llamacpp:kv_cache_usage_ratio"
    assert obs["queue_length"]["metric"] == "llamacpp:requests_deferred"
    assert not obs["queue_wait"]["exposed"] and "TTFT" in obs["queue_wait"]["derived_instead"]
    assert obs["acceptance_rate"]["per_request_records_count"] == 0


def test_sglang_and_tgi_names_are_recognised(tmp_path):
    sg = by_signal(run_with(tmp_path / "s", SGLANG))
    assert sg["mean_accepted_length"]["metric"] == "sglang:generation_tokens_total / sglang:spec_verify_calls_total"
    assert sg["queue_wait"]["steps"][0]["signal_value"] == pytest.approx(2.0 / 25 * 1000)
    assert sg["running_requests"]["metric"] == "sglang:num_running_reqs"
    tgi = by_signal(run_with(tmp_path / "t", TGI))
    assert tgi["queue_wait"]["metric"] == "tgi_request_queue_duration"
    assert tgi["mean_accepted_length"]["steps"][0]["signal_value"] == pytest.approx(1.5)
    assert not tgi["kv_cache_usage"]["exposed"]


def test_summary_lists_every_signal_with_signal_exposed_metric(tmp_path):
    s = analyse(run_with(tmp_path, VLLM_SPEC))
    assert [o["signal"] for o in s["observability"]] == [sig.name for sig in SIGNALS]
    assert all({"signal", "exposed", "metric"} <= set(o) for o in s["observability"])
    row = s["ttft_breakdown"][0]
    assert row["server_queue_wait_mean_ms"] == pytest.approx(50.0)
    assert row["queue_wait_of_ttft_share"] == pytest.approx(50.0 / row["ttft_mean_ms"])
    assert s["server_view"][0]["running_mean_requests"] == pytest.approx(9.0)


def test_a_run_without_speculation_says_why_the_spec_signals_are_missing(tmp_path):
    steps = [step(0, "concurrency", 4, T0, T0 + 10, T0 + 60)]
    run = load_run(write_run(tmp_path / "r", [record(0, step=0, phase="steady", sent_at_s=T0 + 20)], steps=steps))
    obs = {o["signal"]: o for o in analyse(run)["observability"]}
    assert not obs["acceptance_rate"]["exposed"]
    assert obs["acceptance_rate"]["derived_instead"].startswith("no speculation in this run")
