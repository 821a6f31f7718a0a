"""Trace replay against the simulator: the schedule, lengths and prefix sharing of the trace are kept."""

from __future__ import annotations

import json

import pytest
import yaml

from tests.helpers.runs import (
    describe_run,
    finish_master_and_workers,
    read_manifest,
    read_records,
    run_locust,
    start_master_and_workers,
)
from tokenswarm.analysis import analyse, load_run
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

ENTRIES = [{"timestamp": i * 250, "input_length": 300 + 40 * (i % 3), "output_length": 8 + i,
            "hash_ids": [7, 8, 100 + i]} for i in range(12)]  # 3 s of trace; blocks 7, 8 shared by all


def replay_scenario(tmp_path, speed: float = 2.0) -> str:
    trace = tmp_path / "trace.jsonl"
    trace.write_text("\n".join(json.dumps(e) for e in ENTRIES) + "\n")
    sc = {"name": "replay-test",
          "target": {"base_url": "http://127.0.0.1:9", "scrape_interval_s": 0.5},
          "traffic": {"seed": 5, "sampling": {"temperature": 0.0}},
          "load": {"mode": "replay", "trace": "trace.jsonl", "speed": speed, "trace_block_tokens": 128,
                   "stop_timeout_s": 10}}
    path = tmp_path / "replay.yaml"
    path.write_text(yaml.safe_dump(sc))
    return str(path)


def check_replayed(records, speed: float) -> None:
    ok = [r for r in records if r["outcome"] == "ok"]
    assert len(records) == len(ENTRIES) and len(ok) == len(ENTRIES)
    t0 = min(r["scheduled_at_s"] for r in records)
    got = sorted((round(r["scheduled_at_s"] - t0, 3), r["max_tokens"], r["output_tokens"]) for r in records)
    want = [(round(e["timestamp"] / 1000 / speed, 3), e["output_length"], e["output_length"]) for e in ENTRIES]
    assert [g[1:] for g in got] == [w[1:] for w in want]  # output length -> max_tokens, ignore_eos honoured
    for (g_t, *_), (w_t, *_) in zip(got, want):  # one global schedule, offsets scaled by speed
        assert abs(g_t - w_t) < 0.002, (got, want)
    for r in records:
        assert r["task"] == "replay"
        e = next(e for e in ENTRIES if e["output_length"] == r["max_tokens"])
        assert 0.75 * e["input_length"] <= r["prompt_tokens"] <= 1.3 * e["input_length"], (r["prompt_tokens"], e)


def test_a_mooncake_trace_replays_on_its_schedule_with_its_lengths_and_shared_blocks(tmp_path):
    sc = replay_scenario(tmp_path)
    with start_sim("--profile", "tiny-fast", "--prefix-cache") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
    assert res.returncode == 0, res.stderr[-3000:]
    check_replayed(read_records(tmp_path / "run"), 2.0)
    m = read_manifest(tmp_path / "run")
    assert m["load_mode"] == "replay" and m["steps"][0]["name"] == "replay"
    s = analyse(load_run(tmp_path / "run"))
    row = next(r for r in s["steps"] if r["task"] == "all")
    assert row["requests_count"] == len(ENTRIES)
    assert row["ttft_from_schedule_p50_ms"] is not None  # open-loop latency from the scheduled time
    assert row["server_prefix_cache_hit_rate"] > 0.3  # the two shared 128-token blocks hit


def test_two_workers_split_one_global_schedule(tmp_path):
    sc = replay_scenario(tmp_path, speed=1.5)
    with start_sim("--profile", "tiny-fast") as sim:
        master, workers = start_master_and_workers(sc, sim.base_url, tmp_path / "run", 2)
        code, out = finish_master_and_workers(master, workers)
    assert code == 0, describe_run(out, workers)
    records = read_records(tmp_path / "run")
    assert len({r["worker_id"] for r in records}) == 2
    check_replayed(records, 1.5)
