"""The live statistics in Prometheus text format: histograms per task and step, read back with prometheus-client."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import urllib.request
from dataclasses import dataclass

from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.registry import CollectorRegistry

from tests.helpers.procs import free_port
from tests.helpers.runs import ROOT, scenario_file, start_master_and_workers
from tests.helpers.waiting import wait_until
from tokenswarm.load.livestats import LiveStats, LogHistogram
from tokenswarm.orchestrate.export import TTFT_BUCKETS_S, LiveExporter, is_loopback, prometheus_buckets
from tokenswarm.record import RequestRecord
from tokenswarm.sim.testing import start_sim


@dataclass
class _Snap:
    run_id: str | None = "run-1"
    step_name: str | None = "c1"
    phase: str | None = "steady"
    in_flight: int | None = 3


class _Run:
    """The two things the exporter reads of a run, as the controller provides them."""

    def __init__(self) -> None:
        self.live = LiveStats(clock=lambda: 100.0)
        self.snap = _Snap()

    def snapshot(self) -> _Snap:
        return self.snap


def _record(i: int, task: str, ttft_ms: float, outcome: str = "ok") -> RequestRecord:
    ok = outcome == "ok"
    return RequestRecord(run_id="r", worker_id="w", seq=i, task=task, user_class="U", outcome=outcome,
                         request_key="k", scheduled_at_s=0.0, sent_at_s=0.0, ttft_ms=ttft_ms if ok else None,
                         e2e_ms=ttft_ms + 40.0 if ok else None, chunk_offsets_ms=[ttft_ms, ttft_ms + 20, ttft_ms + 40]
                         if ok else None, chunk_tokens=[1, 1, 1] if ok else None, output_tokens=3 if ok else None)


def _families(exporter: LiveExporter) -> dict:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    return {f.name: f for f in text_string_to_metric_families(generate_latest(registry).decode())}


def test_live_buckets_become_cumulative_prometheus_buckets_with_every_sample_counted():
    h = LogHistogram()
    for v in (0.5, 3.0, 3.0, 70.0, 900.0, 5_000_000.0):
        h.add(v)
    buckets = prometheus_buckets(h, TTFT_BUCKETS_S)
    assert buckets[-1] == ("+Inf", 6.0)
    assert dict(buckets)["0.001"] == 1.0 and dict(buckets)["0.005"] == 3.0 and dict(buckets)["0.08"] == 4.0
    assert dict(buckets)["2560.0"] == 5.0, "5000 s is beyond the last bound: only in +Inf"
    assert [n for _, n in buckets] == sorted(n for _, n in buckets)


def test_requests_are_counted_under_the_step_current_when_their_statistics_arrived():
    run = _Run()
    exporter = LiveExporter(run)
    for i in range(4):
        run.live.observe(_record(i, "qa", 30.0))
    run.live.observe(_record(4, "code", 300.0, outcome="timeout"))
    exporter.attribute()
    run.snap.step_name = "c8"
    for i in range(5, 8):
        run.live.observe(_record(i, "qa", 90.0))
    fams = _families(exporter)
    ttft = {(s.labels["task"], s.labels["step"]): s.value for s in fams["tokenswarm_ttft_seconds"].samples
            if s.name == "tokenswarm_ttft_seconds_count"}
    assert ttft == {("qa", "c1"): 4.0, ("qa", "c8"): 3.0, ("code", "c1"): 0.0}, "a timeout has no TTFT"
    reqs = {(s.labels["task"], s.labels["step"], s.labels["outcome"]): s.value
            for s in fams["tokenswarm_requests"].samples}
    assert reqs == {("qa", "c1", "ok"): 4.0, ("code", "c1", "timeout"): 1.0, ("qa", "c8", "ok"): 3.0}
    fails = {(s.labels["task"], s.labels["step"]): s.value for s in fams["tokenswarm_request_failures"].samples}
    assert fails[("code", "c1")] == 1.0 and fails[("qa", "c8")] == 0.0
    itl = {(s.labels["task"], s.labels["step"]): s.value for s in fams["tokenswarm_itl_seconds"].samples
           if s.name.endswith("_count")}
    assert itl[("qa", "c8")] == 6.0, "two gaps of one token per stream"
    assert fams["tokenswarm_in_flight_requests"].samples[0].value == 3.0
    (info,) = fams["tokenswarm_step_info"].samples
    assert info.labels == {"run_id": "run-1", "step": "c8", "phase": "steady"}


def test_a_new_run_starts_its_series_from_zero():
    run = _Run()
    exporter = LiveExporter(run)
    run.live.observe(_record(0, "qa", 30.0))
    exporter.attribute()
    run.live, run.snap = LiveStats(clock=lambda: 100.0), _Snap(run_id="run-2")
    run.live.observe(_record(0, "qa", 30.0))
    fams = _families(exporter)
    (count,) = [s.value for s in fams["tokenswarm_ttft_seconds"].samples if s.name.endswith("_count")]
    assert count == 1.0


def test_generator_health_is_exported_per_worker():
    exporter = LiveExporter(_Run())
    exporter.on_health_sample({"worker_id": "w1", "cpu_pct": 42.0, "loop_lag_max_ms": 7.0, "rss_mb": 63.0})
    fams = _families(exporter)
    assert fams["tokenswarm_generator_cpu_percent"].samples[0].value == 42.0
    assert fams["tokenswarm_generator_event_loop_lag_max_seconds"].samples[0].value == 0.007
    assert fams["tokenswarm_generator_rss_bytes"].samples[0].labels == {"worker": "w1"}


def test_only_loopback_addresses_count_as_local():
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("10.0.0.5")


def _scenario(tmp_path):
    return scenario_file(tmp_path, traffic={"seed": 1, "classes": {"qa": {
        "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 30}, "max_tokens": {"dist": "fixed", "value": 8},
        "sampling": {"ignore_eos": True}}}},
        load={"mode": "closed", "steps": [2], "warmup_s": 0, "step_duration_s": 20, "stop_timeout_s": 3})


def _scrape_until_served(port: int, workers: int = 1, timeout_s: float = 60) -> dict:
    """Scrape until finished requests and a health sample of every worker show (bounded)."""

    def served() -> dict | None:
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
        except OSError:
            return None
        families = {f.name: f for f in text_string_to_metric_families(text)}
        done = [s for s in families.get("tokenswarm_requests", []).samples if s.name.endswith("_total")]
        health = families.get("tokenswarm_generator_cpu_percent")
        if done and sum(s.value for s in done) >= 5 and health is not None and len(health.samples) >= workers:
            return families
        return None

    return wait_until(served, timeout_s, f"5 finished requests and {workers} worker health sample(s) on /metrics",
                      every_s=0.3)


def _check_scrape(families: dict) -> None:
    ttft = [s for s in families["tokenswarm_ttft_seconds"].samples if s.name == "tokenswarm_ttft_seconds_count"]
    assert ttft and {s.labels["task"] for s in ttft} == {"qa"} and all(s.labels["step"] != "none" for s in ttft)
    assert families["tokenswarm_ttft_seconds"].type == "histogram"
    assert any(s.value > 0 for s in families["tokenswarm_output_tokens"].samples)


def test_a_run_serves_its_live_statistics_to_a_prometheus_scrape(tmp_path):
    port = free_port()
    with start_sim("--profile", "tiny-fast") as sim:
        cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--headless",
               "--scenario", str(_scenario(tmp_path)), "--host", sim.base_url, "--out", str(tmp_path / "run"),
               "--only-summary", "--metrics-port", str(port)]
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
        try:
            families = _scrape_until_served(port)
        finally:
            proc.terminate()
            _out, err = proc.communicate(timeout=60)
    assert families, err[-2000:]
    _check_scrape(families)
    assert families["tokenswarm_generator_cpu_percent"].samples, "the run's own health sample is exported"


def test_a_master_serves_what_its_workers_report(tmp_path):
    port = free_port()
    with start_sim("--profile", "tiny-fast") as sim:
        master, workers = start_master_and_workers(_scenario(tmp_path), sim.base_url, tmp_path / "run", 2,
                                                   "--metrics-port", str(port))
        try:
            families = _scrape_until_served(port, workers=2)
        finally:
            for p in [master, *workers]:
                os.killpg(p.pid, signal.SIGTERM)
            for p in [master, *workers]:
                p.communicate(timeout=60)
    assert families
    _check_scrape(families)
    reporting = {s.labels["worker"] for s in families["tokenswarm_generator_cpu_percent"].samples}
    assert len(reporting) >= 2, f"both workers' health samples reach the master's export: {reporting}"


def test_the_grafana_dashboard_queries_only_metrics_the_export_serves():
    import json
    import re

    dash = json.loads((ROOT / "deploy" / "grafana" / "tokenswarm-live.json").read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    used = {m for e in exprs for m in re.findall(r"tokenswarm_[a-z_]+", e)}
    run = _Run()
    run.live.observe(_record(0, "qa", 30.0))
    exporter = LiveExporter(run)
    exporter.on_health_sample({"worker_id": "w1", "cpu_pct": 1.0, "loop_lag_max_ms": 1.0, "rss_mb": 1.0})
    served = {s.name for f in _families(exporter).values() for s in f.samples}
    assert used and used <= served, used - served
    assert any("vllm:" in e for e in exprs), "beside the server's own metrics"
