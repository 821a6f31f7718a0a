"""End to end against a stand-in for llama.cpp's server (tests/helpers/fake_llamacpp.py):
prompt sizing in its /tokenize dialect, one token per event proven, acceptance from its
timings and its llamacpp:spec_decode_* counters, and the audit naming its metrics."""

from __future__ import annotations

import pytest

from tests.helpers.procs import helper_server
from tests.helpers.runs import read_records, run_locust, scenario_file
from tokenswarm.analysis import analyse
from tokenswarm.analysis.loader import load_run

pytestmark = pytest.mark.slow


def test_a_llama_cpp_server_is_sized_counted_and_audited_in_its_own_dialect(tmp_path):
    traffic = {"seed": 5, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 300},
                                             "max_tokens": {"dist": "fixed", "value": 30},
                                             "sampling": {"temperature": 0.0}}}}
    load = {"mode": "closed", "steps": [2], "warmup_s": 0.5, "step_duration_s": 4, "stop_timeout_s": 10}
    with helper_server("fake_llamacpp.py") as base:
        sc = scenario_file(tmp_path, base="qa", traffic=traffic, load=load, target={"scrape_interval_s": 1})
        res = run_locust(sc, base, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-2000:]  # no SLO in this scenario: 0 unless the run broke
    recs = [r for r in read_records(tmp_path / "run") if r["outcome"] == "ok"]
    assert recs, res.stderr[-2000:]
    for r in recs:
        assert r["chunk_tokens_inferred"] and r["chunk_tokens"] == [1] * 30
        assert r["spec_decode"]["source"] == "llama.cpp timings" and r["spec_decode"]["num_accepted_draft_tokens"] == 20
    s = analyse(load_run(tmp_path / "run"))
    (sent,) = s["sent"]
    # sized by the server's own count: the 300 words asked for, plus the template's few words
    assert 0.9 < sent["prompt_counted_to_requested_ratio"] < 1.25 and not sent["prompt_sizing_suspect"]
    row = next(r for r in s["spec_decode"]["rows"] if r["task"] == "all")
    assert row["server_source"] == "llama.cpp"
    assert row["server_acceptance_rate"] == pytest.approx(0.5, abs=0.02)  # 2 of 4 drafts per round
    assert row["request_acceptance_rate"] == pytest.approx(20 / 40)
    obs = {o["signal"]: o for o in s["observability"]}
    assert obs["acceptance_rate"]["engine"] == "llama.cpp" and obs["kv_cache_usage"]["exposed"]
    assert obs["acceptance_rate"]["per_request_records_count"] == len([r for r in read_records(tmp_path / "run")
                                                                       if r.get("spec_decode")])
    assert not obs["queue_wait"]["exposed"]
