"""The simulator's DCGM-compatible GPU endpoint: the GPU model on a fake clock, and over HTTP."""

from __future__ import annotations

import http.client

import pytest

from tokenswarm.analysis.gpu import gpu_readings
from tokenswarm.collect.scrape import parse_metrics
from tokenswarm.sim.engine import Scheduler, SpecConfig
from tokenswarm.sim.gpu import HBM_BYTES_PER_S, MIB, GpuCard, GpuModel
from tokenswarm.sim.profiles import load_profile
from tokenswarm.sim.samples import chat_messages
from tokenswarm.sim.testing import start_sim
from tokenswarm.sim.virtual import make_sequence

P27 = load_profile("27b-1gpu")


class FakeClock:
    def __init__(self) -> None:
        self.t = 0.0

    def __call__(self) -> float:
        return self.t


def test_an_idle_gpu_holds_the_weights_and_draws_idle_power():
    clock = FakeClock()
    gpu = GpuModel(Scheduler(P27), draft_weights=False, clock=clock)
    clock.t = 10.0
    r = gpu.readings()
    weights = P27.weights_read_s * HBM_BYTES_PER_S / MIB
    assert r["fb_used_mib"] == pytest.approx(GpuCard().runtime_overhead_mib + weights)
    assert r["gpu_util_pct"] == 0 and r["power_w"] == GpuCard().idle_w
    assert r["energy_mj"] == pytest.approx(GpuCard().idle_w * 10.0 * 1000)


def test_a_draft_model_adds_its_weights_to_memory():
    plain = GpuModel(Scheduler(P27), draft_weights=False, clock=FakeClock())
    draft = GpuModel(Scheduler(P27, SpecConfig("draft", 4)), draft_weights=True, clock=FakeClock())
    assert draft.memory_used_mib() - plain.memory_used_mib() == pytest.approx(P27.draft.pass_s * HBM_BYTES_PER_S / MIB)


def test_a_busy_engine_raises_utilisation_power_and_kv_memory():
    clock = FakeClock()
    sched = Scheduler(P27)
    gpu = GpuModel(sched, draft_weights=False, clock=clock)
    idle_mem = gpu.memory_used_mib()
    for i in range(8):
        sched.submit(make_sequence(f"r{i}", chat_messages("qa", i), 200, P27), 0.0)
    t = 0.0
    while t < 1.0:  # one second of decoding, step by step
        sched.advance(t)
        t = sched.next_deadline() or t + 0.01
    clock.t = 1.0
    r = gpu.readings()
    assert r["gpu_util_pct"] > 95, "decoding back to back keeps the GPU busy"
    assert 0 < r["sm_active"] < 0.5, "8 sequences are memory-bound: SMs mostly idle"
    assert GpuCard().idle_w < r["power_w"] < GpuCard().tdp_w
    assert r["fb_used_mib"] > idle_mem, "the KV cache in use adds memory"


@pytest.mark.slow
def test_the_sim_serves_dcgm_text_at_dcgm_metrics_only_when_asked():
    with start_sim("--profile", "tiny-fast", "--gpu-metrics") as sim:
        conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
        conn.request("GET", "/dcgm/metrics")
        resp = conn.getresponse()
        text = resp.read().decode()
        conn.close()
        assert resp.status == 200
        gpus = gpu_readings(parse_metrics(text))
        assert list(gpus) == [GpuCard().uuid] and gpus[GpuCard().uuid]["memory_used_mib"] > 0
        assert "DCGM_FI_DEV_FB_USED" not in sim.metrics_text(), "the engine's /metrics stays vLLM-only"
    with start_sim("--profile", "tiny-fast") as sim:
        conn = http.client.HTTPConnection("127.0.0.1", sim.port, timeout=5)
        conn.request("GET", "/dcgm/metrics")
        assert conn.getresponse().status == 404
        conn.close()


def test_a_profile_without_memory_or_compute_cost_does_not_break_the_accounting(tmp_path):
    from tokenswarm.sim.profiles import load_profile as load

    prof = tmp_path / "free.yaml"
    prof.write_text("name: free\nmodel_name: m\noverhead_s: 0.001\nweights_read_s: 0.0\n"
                    "kv_read_s_per_token: 0.0\nflops_per_token_s: 0.0\nprefill_tokens_per_s: 1.0e+9\n")
    p = load(str(prof))
    sched = Scheduler(p)
    sched.submit(make_sequence("r0", chat_messages("qa", 0), 8, p), 0.0)
    t = 0.0
    for _ in range(100):
        sched.advance(t)
        nxt = sched.next_deadline()
        if nxt is None:
            break
        t = nxt
    # only the prefill step has a (compute) cost; the decode steps are overhead only
    assert 0 < sched.stats.compute_weighted_s < sched.stats.busy_s
