"""A study over a three-model split (base model and two LoRA adapters) gives a verdict per model."""

from __future__ import annotations

import sys

import pytest

from tests.study.test_study_e2e import draft_vs_base_summary, no_server_left

pytestmark = pytest.mark.slow

SIM = (f"{sys.executable} -m tokenswarm sim --port {{port}} --profile tiny-fast --served-model-name base "
       "--lora-modules lora-sql lora-chat")
SCENARIO = """name: lora-study
target: {base_url: "http://127.0.0.1:8000", api: chat, model: {base: 0.5, lora-sql: 0.3, lora-chat: 0.2}}
traffic:
  seed: 5
  keep_outputs: true
  sampling: {temperature: 0.0}
  classes:
    qa: {weight: 1, prompt_tokens: {dist: uniform, min: 20, max: 60}, max_tokens: {dist: fixed, value: 12}}
load: {mode: closed, steps: [4], warmup_s: 0.5, step_duration_s: 4, stop_timeout_s: 5}
"""


def test_a_study_of_a_three_model_split_reports_speedup_per_model(tmp_path):
    scenario = tmp_path / "lora.yaml"
    scenario.write_text(SCENARIO)
    out = tmp_path / "study"
    summary = draft_vs_base_summary(scenario, out, sim=SIM)
    rows = {r["model"]: r for r in summary["by_model"]}
    assert set(rows) == {"base", "lora-sql", "lora-chat"}
    for r in rows.values():
        assert r["arm"] == "draft" and r["load"] == 4.0 and r["speedup"] is not None and r["speedup"] > 1.0, r
    (all_row,) = [v for v in summary["verdict"] if v["task"] == "all"]
    assert sum(r["candidate_requests_count"][0] for r in rows.values()) == all_row["candidate_requests_count"][0]
    report = (out / "report" / "report.md").read_text()
    assert "## Per model" in report and "lora-chat" in report
    assert no_server_left(out)
