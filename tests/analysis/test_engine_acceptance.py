"""Server-side acceptance from every engine's metric names (recorded exporter text), per step."""

from __future__ import annotations

import pytest

from tests.analysis.exporter_text import LLAMACPP_SPEC, SGLANG, TGI, VLLM_SPEC
from tests.analysis.runfactory import T0, record, step, write_run
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.specdecode import server_deltas
from tokenswarm.collect.scrape import parse_metrics


def scrape_of(text: str, t: float, scale: float) -> dict:
    """One server_metrics line from exposition text, every value multiplied by ``scale``."""
    samples = [{**s, "value": s["value"] * scale} for s in parse_metrics(text)]
    return {"scraped_at": t, "source": "target", "url": "http://127.0.0.1/metrics", "step": 0, "error": None,
            "samples": samples}


def run_with(tmp_path, text: str):
    steps = [step(0, "concurrency", 4, T0, T0 + 10, T0 + 60)]
    lines = [scrape_of(text, T0 + 5, 0.5), scrape_of(text, T0 + 61, 1.0)]
    return load_run(write_run(tmp_path / "run", [record(0, step=0, phase="steady", sent_at_s=T0 + 20)],
                              steps=steps, server_metrics=lines))


def test_llama_cpp_spec_decode_counters_give_acceptance_and_per_position_rates(tmp_path):
    d = server_deltas(run_with(tmp_path, LLAMACPP_SPEC).server_metrics, T0 + 10, T0 + 60)
    assert d["server_source"] == "llama.cpp"
    assert d["server_drafts_count"] == 1500 and d["server_draft_tokens_count"] == 6000
    assert d["server_acceptance_rate"] == pytest.approx(0.5)
    assert d["server_mean_acceptance_length_tokens"] == pytest.approx(1 + 3000 / 1500)
    assert d["server_per_position_acceptance_rate"] == pytest.approx([0.9, 0.6, 1 / 3, 1 / 6])
    assert d["server_num_spec_tokens_count"] == 4


def test_vllm_counters_are_still_read_first(tmp_path):
    d = server_deltas(run_with(tmp_path, VLLM_SPEC).server_metrics, T0 + 10, T0 + 60)
    assert d["server_source"] == "vllm" and d["server_acceptance_rate"] == pytest.approx(10000 / 15000)


def test_sglang_acceptance_length_from_generated_tokens_per_verify_call(tmp_path):
    # The gauge is scaled too: scrapes inside the window are none here, so the rate is unknown.
    d = server_deltas(run_with(tmp_path, SGLANG).server_metrics, T0 + 10, T0 + 60)
    assert d["server_source"] == "sglang"
    assert d["server_mean_acceptance_length_tokens"] == pytest.approx(5400 / 2000)
    assert d["server_drafts_count"] == 2000 and d["server_acceptance_rate"] is None


def test_tgi_skipped_tokens_give_mean_accepted_length(tmp_path):
    d = server_deltas(run_with(tmp_path, TGI).server_metrics, T0 + 10, T0 + 60)
    assert d["server_source"] == "tgi"
    assert d["server_mean_acceptance_length_tokens"] == pytest.approx(1 + 750 / 500)
