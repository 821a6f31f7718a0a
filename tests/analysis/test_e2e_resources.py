"""End to end: short runs against the simulator with its DCGM endpoint scraped as an extra
metrics source -- resource rows per step, and the draft model's cost in a comparison."""

from __future__ import annotations

import pytest

from tests.helpers.runs import run_locust, scenario_file
from tokenswarm.analysis import analyse
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.summary import compare_summary
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

TRAFFIC = {"seed": 7, "keep_outputs": False, "sampling": {"temperature": 0.0},
           "classes": {"code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 300, "max": 600},
                                "max_tokens": {"dist": "fixed", "value": 48}}}}
LOAD = {"mode": "closed", "steps": [1, 4], "warmup_s": 0.5, "step_duration_s": 4, "stop_timeout_s": 10}


def run_arm(tmp_path, name, *sim_args):
    with start_sim("--profile", "27b-1gpu", "--gpu-metrics", *sim_args) as sim:
        sc = scenario_file(tmp_path, base="spec-baseline", traffic=TRAFFIC, load=LOAD,
                           target={"scrape_interval_s": 1,
                                   "extra_metrics": [{"name": "dcgm", "url": sim.base_url + "/dcgm/metrics"}]},
                           cost={"gpu_hour_usd": 2.0, "gpus": 1})
        res = run_locust(sc, sim.base_url, tmp_path / name)
    assert res.returncode == 0, res.stderr[-2000:]  # no SLO in this scenario: 0 unless the run broke
    return load_run(tmp_path / name)


def test_the_simulators_gpu_endpoint_gives_resource_rows_and_the_draft_models_cost(tmp_path):
    base = run_arm(tmp_path, "baseline", "--spec-method", "none")
    cand = run_arm(tmp_path, "candidate", "--spec-method", "draft")
    s = analyse(base)
    res = s["resources"]
    assert res["observed"] and res["gpus"][0]["source"] == "dcgm"
    for row in res["rows"]:
        assert row["gpu_memory_used_mib_mean"] > 50_000, "27B weights are ~51 GiB"
        assert 0 < row["gpu_utilization_mean"] <= 1 and row["gpu_power_w_mean"] > 70
        assert row["output_tokens_per_joule"] > 0 and row["cost_per_1m_output_tokens_usd"] > 0
    c = compare_summary(base, cand)
    rows = {r["step_name"]: r for r in c["resources"]["rows"]}
    assert rows["c1"]["gpu_memory_used_mib_delta"] > 4000, "the draft model's ~4.6 GiB of weights"
    assert rows["c1"]["output_tokens_per_s_ratio"] > 1.2, "speculation speeds up a single stream"
    assert "GiB" in rows["c1"]["summary_text"] and "tokens per joule" in rows["c1"]["summary_text"]
