"""A real master and two real worker processes on 127.0.0.1 against the simulator."""

import json
import os
import signal

import pytest

from tests.helpers.runs import (
    describe_run,
    finish_master_and_workers,
    read_manifest,
    read_records,
    scenario_file,
    start_master_and_workers,
)
from tests.helpers.waiting import wait_until
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

TRAFFIC = {"seed": 11, "classes": {
    "qa": {"weight": 3, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 80},
           "max_tokens": {"dist": "uniform", "min": 16, "max": 64}},
    "code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 200, "max": 400},
             "max_tokens": {"dist": "uniform", "min": 16, "max": 64}}}}


def counter(lines, name):
    vals = [sum(s["value"] for s in ln["samples"] if s["name"] == name) for ln in lines if not ln["error"]]
    return vals[-1] - vals[0]


def test_master_collects_every_record_from_two_workers(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, target={"scrape_interval_s": 1},
                       load={"mode": "closed", "steps": [4, 8], "warmup_s": 0.5, "step_duration_s": 3,
                             "stop_timeout_s": 10})
    with start_sim("--profile", "tiny-fast", truth=True) as sim:
        master, workers = start_master_and_workers(sc, sim.base_url, tmp_path / "run", 2, "--no-pilot")
        code, out = finish_master_and_workers(master, workers)
        truth = sim.read_truth()
    assert code == 0, describe_run(out, workers)
    run = tmp_path / "run"
    records = read_records(run)
    m = read_manifest(run)
    by_worker = {}
    for r in records:
        by_worker.setdefault(r["worker_id"], []).append(r["seq"])
    assert len(by_worker) == 2, "records from both workers"
    for seqs in by_worker.values():
        assert sorted(seqs) == list(range(len(seqs))), "per-worker sequence numbers are gap-free"
    assert len(records) == len(truth), "one record per request the simulator served"
    assert m["totals"]["records_received"] == len(records) and m["totals"]["records_lost"] == 0
    assert {w["worker_id"] for w in m["workers"]} == set(by_worker)
    assert all(not w["missing_seqs"] and w["final_received"] for w in m["workers"])
    assert all("kernel_stamps" in w["timing"] for w in m["workers"]), "each worker's timing paths"
    assert {r["step"] for r in records} == {0, 1}
    # server metrics: the counter delta over the run equals the tokens the records say were served
    lines = [json.loads(x) for x in (run / "server_metrics.jsonl").read_text().splitlines()]
    assert len(lines) >= 3
    assert counter(lines, "vllm:generation_tokens_total") == sum(r["output_tokens"] or 0 for r in records)
    assert counter(lines, "vllm:prompt_tokens_total") == sum(r["prompt_tokens"] or 0 for r in records)


def test_a_worker_killed_mid_run_is_accounted_for_and_the_run_still_ends(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, target={"metrics_url": None},
                       load={"mode": "closed", "steps": [8], "warmup_s": 0.5, "step_duration_s": 10,
                             "stop_timeout_s": 5})
    with start_sim("--profile", "tiny-fast", truth=True) as sim:
        master, workers = start_master_and_workers(sc, sim.base_url, tmp_path / "run", 2)
        run = tmp_path / "run"
        # records of both workers have reached the master: the one killed had requests in flight
        wait_until(lambda: (run / "records.jsonl").exists() and len({r["worker_id"] for r in read_records(run)}) == 2,
                   60, "records from both workers", every_s=0.2)
        os.killpg(workers[0].pid, signal.SIGKILL)
        code, out = finish_master_and_workers(master, workers)
        truth = sim.read_truth()
    # A lost worker is a broken run for the CI verdict (exit status 3), but everything is accounted for.
    assert code == 3, describe_run(out, workers)
    verdict = json.loads((run / "slo.json").read_text())
    assert verdict["exit_status"] == 3 and "worker(s) lost" in verdict["reason"]
    m = read_manifest(run)
    assert m["complete"]
    records = read_records(run)
    lost = [w for w in m["workers"] if w["lost_reason"]]
    alive = [w for w in m["workers"] if not w["lost_reason"]]
    assert len(lost) == 1 and len(alive) == 1
    assert any(lost[0]["worker_id"] in w for w in m["warnings"])
    dead_seqs = sorted(r["seq"] for r in records if r["worker_id"] == lost[0]["worker_id"])
    assert dead_seqs and dead_seqs == list(range(len(dead_seqs))), "everything it delivered is kept"
    ok_seqs = sorted(r["seq"] for r in records if r["worker_id"] == alive[0]["worker_id"])
    assert ok_seqs == list(range(len(ok_seqs))) and alive[0]["final_received"]
    # Joined to the server's truth log: every record is a request the server served, and what
    # was served but never received is the loss -- received + lost = served, request by request.
    served = {t["id"] for t in truth if t["endpoint"] in ("chat", "completions")}
    received = [r["response_id"] for r in records]
    assert None not in received and len(set(received)) == len(received) and set(received) <= served
    lost_ids = served - set(received)
    assert len(records) + len(lost_ids) == len(served)
    assert lost_ids, "killing a busy worker loses at least its requests in flight"
    # tokenswarm names what it can know: seqs it was told of but never got (missing_seqs), plus
    # requests it had started by its last batch; never more than was truly lost (what it did after
    # its last message to the master, only the server's log can tell).
    totals = m["totals"]
    named = sum(last - first + 1 for first, last in lost[0]["missing_seqs"])
    assert totals["records_missing_seqs"] == named
    assert totals["records_lost"] == named + totals["in_flight_lost"]
    assert 0 < totals["records_lost"] <= len(lost_ids), (totals, len(lost_ids))
    assert lost[0]["records_received"] == len(dead_seqs)


def test_an_adaptive_step_counts_the_workers_records_on_the_master(tmp_path):
    traffic = {**TRAFFIC, "task_draw": "stratified"}
    sc = scenario_file(tmp_path, traffic=traffic,
                       load={"mode": "closed", "steps": [4], "warmup_s": 0.5, "step_duration_s": 1, "stop_timeout_s": 10,
                             "until": {"min_requests_per_task": 60, "max_step_s": 60}})
    with start_sim("--profile", "tiny-fast") as sim:
        master, workers = start_master_and_workers(sc, sim.base_url, tmp_path / "run", 2)
        code, out = finish_master_and_workers(master, workers)
    assert code == 0, describe_run(out, workers)
    (outcome,) = read_manifest(tmp_path / "run")["adaptive_steps"]["steps"]
    steady = [r for r in read_records(tmp_path / "run") if r["phase"] == "steady" and r["outcome"] == "ok"]
    by_task = {t: sum(r["task"] == t for r in steady) for t in ("qa", "code")}
    # the master stopped the step on the workers' records: every task reached its count, from both workers
    assert outcome["stopped_by"] == "goal met" and min(by_task.values()) >= 60, (outcome, by_task)
    assert len({r["worker_id"] for r in steady}) == 2
