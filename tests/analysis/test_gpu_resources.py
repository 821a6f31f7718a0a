"""GPU exporter parsing (DCGM, AMD) and the per-step resource table, on recorded exporter text."""

from __future__ import annotations

import pytest

from tests.analysis.exporter_text import AMD_ONE_GPU, DCGM_TWO_GPUS, VLLM_SPEC
from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis import analyse
from tokenswarm.analysis.gpu import gpu_metrics_from_lines, gpu_readings, is_gpu_metric, window_stats
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.resources import compare_resources, resource_sentence
from tokenswarm.analysis.summary import unitless_keys
from tokenswarm.collect.scrape import parse_metrics


def test_dcgm_exporter_text_gives_one_reading_per_gpu_in_common_units():
    gpus = gpu_readings(parse_metrics(DCGM_TWO_GPUS))
    assert set(gpus) == {"GPU-1b2c", "GPU-9f8e"}
    g = gpus["GPU-1b2c"]
    assert g["gpu"] == "0" and g["vendor"] == "nvidia" and g["model"] == "NVIDIA H100 80GB HBM3"
    assert g["memory_used_mib"] == 73408 and g["memory_total_mib"] == 73408 + 8151
    assert g["utilization"] == pytest.approx(0.87)  # percent -> fraction
    assert g["sm_active"] == pytest.approx(0.612)
    assert g["power_w"] == 412.5 and g["temperature_c"] == 61 and g["sm_clock_mhz"] == 1980
    assert g["energy_j"] == pytest.approx(912345.678)  # mJ counter (parsed as ..._total) -> J


def test_amd_exporter_text_maps_to_the_same_fields_and_prefers_power_usage():
    g = gpu_readings(parse_metrics(AMD_ONE_GPU))["0"]
    assert g["vendor"] == "amd" and g["model"] == "AMD Instinct MI300X"
    assert g["memory_used_mib"] == 150112 and g["memory_total_mib"] == 196592
    assert g["utilization"] == pytest.approx(0.64)
    assert g["power_w"] == 530  # GPU_POWER_USAGE ranks before GPU_PACKAGE_POWER
    assert g["energy_j"] == pytest.approx(4.2e6)  # microjoules -> J
    assert g["sm_clock_mhz"] == 2100  # the system clock, not the memory clock


def test_a_serving_engines_metrics_are_not_mistaken_for_a_gpu_exporter():
    assert gpu_readings(parse_metrics(VLLM_SPEC)) == {}
    assert not is_gpu_metric("vllm:kv_cache_usage_perc") and is_gpu_metric("dcgm_fi_dev_fb_used")


def _dcgm_line(t: float, used: float, util: float, power: float, energy_mj: float, source: str = "gpu") -> dict:
    samples = [{"name": n, "labels": {"gpu": "0", "UUID": "GPU-a"}, "value": v} for n, v in (
        ("DCGM_FI_DEV_FB_USED", used), ("DCGM_FI_DEV_FB_FREE", 80000 - used), ("DCGM_FI_DEV_GPU_UTIL", util),
        ("DCGM_FI_DEV_POWER_USAGE", power), ("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total", energy_mj))]
    return {"scraped_at": t, "source": source, "url": "http://127.0.0.1:9400/metrics", "step": 0, "error": None,
            "samples": samples}


def test_window_energy_comes_from_the_counter_scaled_to_the_window():
    lines = [_dcgm_line(T0 + i * 10, 50000 + i, 50, 300, 300_000 * i * 10) for i in range(8)]  # 300 W steady
    gm = gpu_metrics_from_lines(lines)
    assert gm is not None and len(gm.gpus) == 1 and gm.sources == ["gpu"]
    w = window_stats(gm.gpus[0], T0 + 15, T0 + 55)
    assert w["energy_source"] == "energy counter"
    assert w["energy_j"] == pytest.approx(300 * 40), "300 W over a 40 s window"
    assert w["memory_used_mib_mean"] == pytest.approx(50000 + 3.5) and w["memory_used_mib_max"] == 50005
    assert w["utilization_mean"] == pytest.approx(0.5) and w["scrapes_count"] == 4


def _run_with_gpu(tmp_path, name: str, power: float, used: float, chunk_tokens: int = 1):
    steps = [step(0, "concurrency", 4, T0, T0 + 10, T0 + 50)]
    recs = [record(i, step=0, phase="steady", sent_at_s=T0 + 11 + i, chunk_offsets_ms=[100.0 + 10 * j for j in range(10)],
                   chunk_tokens=[chunk_tokens] * 10) for i in range(30)]
    lines = [_dcgm_line(T0 + i * 5, used, 80, power, power * 1000 * i * 5) for i in range(13)]
    return load_run(write_run(tmp_path / name, recs, steps=steps, server_metrics=lines,
                              scenario={"cost": {"gpu_hour_usd": 3.6, "gpus": 1},
                                        "slo": {"ttft_ms": 1000}}))


def test_summary_names_the_resource_keys_per_step_and_they_carry_units(tmp_path):
    run = _run_with_gpu(tmp_path, "a", power=400.0, used=60000.0)
    s = analyse(run)
    res = s["resources"]
    assert res["observed"] and res["gpus"][0]["vendor"] == "nvidia"
    row = res["rows"][0]
    for key in ("gpu_memory_used_mib_mean", "gpu_memory_used_mib_max", "gpu_utilization_mean", "gpu_power_w_mean",
                "output_tokens_per_s_per_gpu", "output_tokens_per_joule", "cost_per_1m_good_output_tokens_usd"):
        assert key in row
    assert row["gpu_memory_used_mib_mean"] == 60000 and row["gpu_utilization_mean"] == pytest.approx(0.8)
    tokens = 30 * 10
    assert row["output_tokens_per_joule"] == pytest.approx(tokens / (400.0 * 40)), "tokens / (400 W x 40 s)"
    assert row["output_tokens_per_s_per_gpu"] == pytest.approx(tokens / 40)
    assert row["cost_per_1m_good_output_tokens_usd"] == pytest.approx(3.6 / (tokens / 40 * 3600) * 1e6)
    assert unitless_keys(s["resources"]) == []


def test_a_run_without_a_gpu_exporter_says_so(tmp_path):
    steps = [step(0, "concurrency", 4, T0, T0 + 10, T0 + 50)]
    run = load_run(write_run(tmp_path / "r", [record(0, step=0, phase="steady", sent_at_s=T0 + 20)], steps=steps))
    res = analyse(run)["resources"]
    assert res["observed"] is False and res["rows"][0]["gpu_power_w_mean"] is None
    assert any("no GPU exporter" in n for n in res["notes"])


def test_compare_puts_memory_and_power_deltas_next_to_the_speedup(tmp_path):
    base = analyse(_run_with_gpu(tmp_path, "base", power=400.0, used=60000.0, chunk_tokens=1))["resources"]["rows"]
    cand = analyse(_run_with_gpu(tmp_path, "cand", power=472.0, used=60000.0 + 3.1 * 1024, chunk_tokens=2))
    rows = compare_resources(base, cand["resources"]["rows"])
    r = rows[0]
    assert r["output_tokens_per_s_ratio"] == pytest.approx(2.0)
    assert r["gpu_memory_used_mib_delta"] == pytest.approx(3.1 * 1024)
    assert r["gpu_power_change_share"] == pytest.approx(0.18)
    assert r["output_tokens_per_joule_ratio"] == pytest.approx(2.0 / 1.18)
    assert r["summary_text"] == "2.00x tokens/s for +3.1 GiB and +18 % power -> 1.69x tokens per joule"


def test_the_sentence_leaves_out_what_is_unknown():
    assert resource_sentence({"output_tokens_per_s_ratio": 1.5}) == "1.50x tokens/s"
    assert resource_sentence({}) == "no throughput or GPU readings to compare"


def test_memory_growth_per_hour_is_reported_for_a_constant_load_run(tmp_path):
    steps = [step(0, "concurrency", 4, T0, T0 + 10, T0 + 600)]
    lines = [_dcgm_line(T0 + i * 10, 50000 + i * 10, 50, 300, 0) for i in range(60)]  # +10 MiB per 10 s
    run = load_run(write_run(tmp_path / "soak", [record(0, step=0, phase="steady", sent_at_s=T0 + 20)],
                             steps=steps, server_metrics=lines))
    (g,) = analyse(run)["resources"]["memory_growth"]
    assert g["memory_growth_mib_per_hour"] == pytest.approx(3600.0)


def test_resource_plots_draw_from_the_summary(tmp_path):
    from tokenswarm.analysis import plots

    run = _run_with_gpu(tmp_path, "p", power=400.0, used=60000.0)
    s = analyse(run)
    assert plots.resources_vs_load(s["resources"]["rows"]).startswith(b"\x89PNG")
    assert plots.gpu_over_time(run.gpu_metrics).startswith(b"\x89PNG")


def test_terminal_summary_and_csv_tables_carry_the_resources_and_the_audit(tmp_path):
    from tokenswarm.analysis.render_csv import report_tables
    from tokenswarm.analysis.render_terminal import report_text

    s = analyse(_run_with_gpu(tmp_path, "t", power=400.0, used=60000.0))
    text = report_text(s)
    assert "tok/s/GPU" in text and "400 W" in text and "signals exposed" in text
    tables = report_tables(s)
    assert tables["resources"][0]["gpu_power_w_mean"] == 400.0
    assert {o["signal"] for o in tables["observability"]} >= {"queue_wait", "kv_cache_usage"}
