"""A real distributed run (master + two workers on 127.0.0.1, the simulator) into the Parquet store."""

from __future__ import annotations

import pytest

from tests.helpers.runs import (
    describe_run,
    finish_master_and_workers,
    read_manifest,
    scenario_file,
    start_master_and_workers,
)
from tokenswarm.analysis import analyse, load_run
from tokenswarm.collect.parquet_store import iter_records, store_parts
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

TRAFFIC = {"seed": 7, "classes": {
    "qa": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 80},
           "max_tokens": {"dist": "uniform", "min": 16, "max": 48}}}}


def test_a_distributed_run_with_records_format_parquet_stores_and_analyses_every_record(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC,
                       load={"mode": "closed", "steps": [4], "warmup_s": 0.5, "step_duration_s": 3, "stop_timeout_s": 10})
    with start_sim("--profile", "tiny-fast", truth=True) as sim:
        master, workers = start_master_and_workers(sc, sim.base_url, tmp_path / "run", 2, "--records-format", "parquet",
                                                   "--no-pilot")
        code, out = finish_master_and_workers(master, workers)
        truth = sim.read_truth()
    assert code == 0, describe_run(out, workers)
    run_dir = tmp_path / "run"
    parts, unfinished = store_parts(run_dir)
    assert parts and not unfinished and not (run_dir / "records.jsonl").exists()
    records = list(iter_records(run_dir))
    m = read_manifest(run_dir)
    assert m["records_store"] == {"format": "parquet", "format_version": 1}
    assert len(records) == len(truth) == m["totals"]["records_received"], describe_run(out, workers)
    assert {r.worker_id for r in records} == {w["worker_id"] for w in m["workers"]}
    run = load_run(run_dir)
    summary = analyse(run)
    row = next(r for r in summary["steps"] if r["task"] == "all")
    assert row["itl_count"] > 0 and row["itl_percentile_precision_share"] == 0.005
    assert row["requests_count"] == sum(1 for r in records if r.phase == "steady")
