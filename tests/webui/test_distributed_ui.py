"""The web UI's numbers on a Locust master (``--processes`` and separate master/worker
processes): the LLM table merges the workers' statistics and matches the run's records."""

from collections import Counter

import pytest

from tests.helpers.runs import read_records
from tests.webui.liveui import (
    get_json,
    locust_web_ui,
    nearest_rank,
    post_form,
    short_scenario,
    wait_for,
    wait_workers,
    within_live_precision,
)
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("mode", ["processes", "master"])
def test_llm_table_on_a_master_matches_the_records_of_all_workers(tmp_path, mode):
    sc = short_scenario(tmp_path, steps=[2, 4], step_duration_s=3)
    run_dir = tmp_path / "run"
    with start_sim("--profile", "tiny-fast") as sim, \
            locust_web_ui(sc, sim.base_url, run_dir, mode=mode, log_dir=tmp_path) as base:
        wait_workers(base, 2)
        assert post_form(base + "swarm", {"user_count": 1, "spawn_rate": 1})["success"]
        wait_for(lambda: get_json(base + "tokenswarm/llm.json")["rows"][-1]["requests"] > 0, 30, "live rows")
        wait_for(lambda: get_json(base + "tokenswarm/status.json")["state"] == "finished", 90, "the run to end")
        table = get_json(base + "tokenswarm/llm.json")
        series = get_json(base + "tokenswarm/series.json")["samples"]
    records = read_records(run_dir)
    assert len({r["worker_id"] for r in records}) == 2, "both workers sent load"
    rows = {r["name"]: r for r in table["rows"]}
    assert rows["Total"]["requests"] == len(records)
    for task, n in Counter(r["task"] for r in records).items():
        assert rows[task]["requests"] == n, task
        exact = nearest_rank([r["ttft_ms"] for r in records if r["task"] == task and r["ttft_ms"] is not None], .5)
        assert within_live_precision(rows[task]["live_ttft_p50_ms"], exact), (task, rows[task], exact)
    assert max(s["users"] for s in series) == 4
    assert any(s["output_tokens_per_s"] for s in series) and {s["step"] for s in series} >= {"c2", "c4"}
    assert series[-1]["requests"] == len(records)  # the last sample is taken after the run completed
