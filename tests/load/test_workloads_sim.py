"""Today's workloads against the simulator: short, bounded Locust runs, records and summary checked."""

from __future__ import annotations

import pytest

from tests.helpers.runs import read_records, run_locust, scenario_file
from tokenswarm.analysis import analyse, load_run
from tokenswarm.analysis.render_doc import report_doc
from tokenswarm.analysis.render_md import to_markdown
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

SHORT = {"mode": "closed", "steps": [2], "warmup_s": 0.3, "step_duration_s": 3, "stop_timeout_s": 10}
OPEN = {"mode": "open", "steps": [10], "warmup_s": 0.3, "step_duration_s": 3, "stop_timeout_s": 10}


def test_extraction_answers_are_quality_checked_and_their_shares_reach_the_summary(tmp_path):
    classes = {
        "extraction": {"kind": "extraction", "weight": 1, "document_tokens": {"dist": "fixed", "value": 200},
                       "max_tokens": {"dist": "fixed", "value": 400}, "extra_body": {"top_k": 10}},
        "cut_extraction": {"kind": "extraction", "weight": 1, "document_tokens": {"dist": "fixed", "value": 200},
                           "max_tokens": {"dist": "fixed", "value": 12}},  # too short for the JSON
        "qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 30},
               "max_tokens": {"dist": "fixed", "value": 16}},
    }
    sc = scenario_file(tmp_path, traffic={"seed": 3, "classes": classes}, load=OPEN)  # every task drawn
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    records = read_records(tmp_path / "run")
    ext = [r for r in records if r["task"] == "extraction" and r["outcome"] == "ok"]
    cut = [r for r in records if r["task"] == "cut_extraction" and r["outcome"] == "ok"]
    qa = [r for r in records if r["task"] == "qa"]
    assert ext and cut and qa
    # the simulator decodes guided by the schema: whole answers validate, answers cut by max_tokens do not
    assert all(r["json_valid"] is True and r["schema_valid"] is True and r["finish_reason"] == "stop" for r in ext)
    assert all(r["json_valid"] is False and r["schema_valid"] is False and r["finish_reason"] == "length"
               for r in cut)
    assert all(r["json_valid"] is None for r in qa)
    rows = {r["task"]: r for r in analyse(load_run(tmp_path / "run"))["steps"]}
    assert rows["extraction"]["json_valid_share"] == rows["extraction"]["schema_valid_share"] == 1.0
    assert rows["cut_extraction"]["json_valid_share"] == 0.0
    assert rows["extraction"]["json_valid_checked_count"] == len([r for r in ext if r["phase"] == "steady"])
    assert rows["qa"]["json_valid_share"] is None and rows["qa"]["json_valid_checked_count"] == 0
    md = to_markdown(report_doc(analyse(load_run(tmp_path / "run")), {}), {})
    assert "Structured-output quality per step and task" in md and "| r10 | extraction |" in md


def test_reasoning_streams_and_shared_prefixes_against_the_simulator_with_its_prefix_cache(tmp_path):
    classes = {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 40},
                      "max_tokens": {"dist": "fixed", "value": 24},
                      "shared_prefix": {"tokens": 600, "count": 2, "popularity": "zipf", "zipf_s": 1.2}}}
    sc = scenario_file(tmp_path, traffic={"seed": 3, "classes": classes}, load=SHORT,
                       target={"scrape_interval_s": 0.5})
    with start_sim("--profile", "tiny-fast", "--reasoning-tokens", "8", "--prefix-cache") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    ok = [r for r in read_records(tmp_path / "run") if r["outcome"] == "ok"]
    assert ok
    for r in ok:
        assert r["reasoning_tokens"] == 8 and r["output_tokens"] == 24
        # <=: chunks that arrived in one read share its timestamp
        assert r["ttft_ms"] == r["first_reasoning_token_ms"] <= r["first_answer_token_ms"]
        assert r["reasoning_chunks"] + r["answer_chunks"] == len(r["chunk_offsets_ms"])
        assert r["prompt_tokens"] > 600  # the shared prefix came first
    s = analyse(load_run(tmp_path / "run"))
    row = next(r for r in s["steps"] if r["task"] == "all")
    assert row["reasoning_streams_count"] > 0 and row["reasoning_itl_p50_ms"] is not None
    assert row["answer_itl_p50_ms"] is not None and row["first_answer_token_p50_ms"] >= row["ttft_p50_ms"]
    # two distinct ~600-token prefixes before ~40-token questions: most prompt tokens hit
    assert row["server_prefix_cache_hit_rate"] > 0.7, s["prefix_cache"]
    assert s["prefix_cache"][0]["prefix_cache_queries_tokens"] > 0
    md = to_markdown(report_doc(s, {}), {})
    assert "Reasoning streams per step and task" in md and "Server prefix cache per step" in md
