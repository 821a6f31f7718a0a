"""Capacity under SLO end to end on the simulator: a search, a fixed sweep over the same loads,
and the sweep profile (real Locust runs against ``tokenswarm sim`` on 127.0.0.1).

The simulated server's decode step costs ~4 ms per sequence in the batch, so TPOT grows with
concurrency and an SLO on TPOT p50 has a capacity of a few users. Steps are short (1 s warm-up,
2-3 s steady); the whole module takes about a minute.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.helpers.runs import run_locust
from tokenswarm.analysis.capacity import capacity_from_results, read_capacity
from tokenswarm.analysis.curves import curve_points, curves
from tokenswarm.analysis.loader import load_run
from tokenswarm.analysis.tables import step_table
from tokenswarm.orchestrate import search
from tokenswarm.sim.testing import start_sim
from tokenswarm.workload.scenario.model import SweepConfig

pytestmark = pytest.mark.slow

PROFILE = {
    "name": "capacity-test", "model_name": "sim-capacity", "batching": "continuous", "max_model_len": 4096,
    "max_num_seqs": 256, "max_num_batched_tokens": 8192, "kv_capacity_tokens": 10_000_000, "overhead_s": 0.001,
    "weights_read_s": 0.004, "kv_read_s_per_token": 0.0, "flops_per_token_s": 0.004, "prefill_tokens_per_s": 1.0e9,
    "natural_output_tokens": [512, 1024], "draft": {"pass_s": 0.0001, "flops_per_token_s": 1.0e-7},
    "ngram": {"lookup_s_per_seq": 1.0e-6, "min_n": 2, "max_n": 3},
}
SLO = {"tpot_p50_ms": 21}


def scenario(tmp_path: Path, name: str, load: dict) -> Path:
    data = {"name": name, "target": {"api": "chat", "model": "auto"},
            "traffic": {"seed": 1, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 32},
                                                      "max_tokens": {"dist": "fixed", "value": 6}}}},
            "load": {"warmup_s": 1, **load}, "slo": SLO}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


@pytest.fixture(scope="module")
def sim(tmp_path_factory):
    prof = tmp_path_factory.mktemp("profile") / "capacity-test.yaml"
    prof.write_text(yaml.safe_dump(PROFILE))
    with start_sim("--profile", str(prof)) as s:
        yield s


def test_a_search_finds_the_capacity_within_its_resolution_and_a_fixed_sweep_agrees(tmp_path, sim):
    search = scenario(tmp_path, "search", {"mode": "search", "step_duration_s": 2,
                                           "search": {"start": 2, "max": 16, "resolution": 1, "max_step_s": 8,
                                                      "drain_max_s": 20}})
    out = tmp_path / "search-run"
    proc = run_locust(search, sim.base_url, out, timeout_s=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    cap = read_capacity(out)
    assert cap is not None and cap.source == "search" and cap.status == "found", json.dumps(cap.to_dict(), indent=1)
    assert cap.first_failing_value - cap.capacity_value <= 1  # the stated resolution
    assert "capacity under SLO (search)" in proc.stdout + proc.stderr
    # every probe was a full step: a steady window of at least step_duration_s, judged from its records
    manifest = json.loads((out / "manifest.json").read_text())
    assert [s["target"] for s in manifest["steps"]] == [p.load_value for p in cap.probes]
    assert all(s["ended_at"] - s["steady_at"] >= 2.0 for s in manifest["steps"])
    records = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
    assert any(r["phase"] == "drain" for r in records)  # the load held while each window's requests finished
    assert all((p.requests_count or 0) >= 20 for p in cap.probes)  # a p50 needs 20 samples

    loads = sorted(p.load_value for p in cap.probes)
    fixed = scenario(tmp_path, "fixed", {"mode": "closed", "steps": [int(v) for v in loads], "step_duration_s": 2})
    out2 = tmp_path / "fixed-run"
    proc2 = run_locust(fixed, sim.base_url, out2, timeout_s=240)
    assert proc2.returncode in (0, 1), proc2.stdout[-3000:] + proc2.stderr[-3000:]  # judged, not broken
    tables = step_table(load_run(out2))
    swept = capacity_from_results(curve_points(tables.rows), tables.slo_results, SLO)
    assert swept is not None and swept.status == "found"
    # the sweep's exit status is its own verdict: 1 exactly when a step missed the SLO
    assert proc2.returncode == (0 if all(p.passed for p in swept.probes) else 1), (proc2.returncode, swept.summary())
    # probes clear of the threshold (TPOT p50 more than 20 % away: two runs on a shared machine
    # differ by that much near the boundary) get the same verdict in the sweep ...
    tpot = {r["step_concurrency_users"]: r["tpot_p50_ms"] for r in tables.rows if r["task"] == "all"}
    fixed_pass = {p.load_value: p.passed for p in swept.probes}
    threshold = SLO["tpot_p50_ms"]
    for p in cap.probes:
        if abs(tpot[p.load_value] - threshold) > 0.2 * threshold:
            assert p.passed == fixed_pass[p.load_value], (p, tpot)
    # ... and the search's capacity lies where the sweep's clear verdicts put it: at or above its
    # highest clearly passing load, below its lowest clearly failing one
    clear_pass = [v for v in loads if fixed_pass[v] and tpot[v] < 0.8 * threshold]
    clear_fail = [v for v in loads if not fixed_pass[v] and tpot[v] > 1.2 * threshold]
    assert clear_pass or clear_fail, (tpot, "no probe clear of the threshold: the test cannot judge")
    if clear_pass:
        assert cap.capacity_value >= max(clear_pass), (cap.summary(), swept.summary(), tpot)
    if clear_fail:
        assert cap.capacity_value < min(clear_fail), (cap.summary(), swept.summary(), tpot)


def test_a_sweep_measures_saturation_then_spreads_steps_up_to_it(tmp_path, sim):
    path = scenario(tmp_path, "sweep", {"mode": "sweep", "step_duration_s": 2,
                                        "sweep": {"steps": 3, "max_concurrency": 16, "drain_max_s": 20}})
    out = tmp_path / "sweep-run"
    proc = run_locust(path, sim.base_url, out, timeout_s=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads((out / "capacity.json").read_text())
    targets = [s["target"] for s in json.loads((out / "manifest.json").read_text())["steps"]]
    assert targets[:2] == [16, 1]  # saturation first, then one request at a time
    x_max, x_1 = doc["saturation_requests_per_s"], doc["single_user_requests_per_s"]
    # N* = X_max / X_1 between 1 and 16 (a loaded machine can measure 16 users below one)
    assert doc["saturation_users"] == pytest.approx(min(max(x_max / x_1, 1.0), 16)) and doc["steps_users"] == targets
    spread = targets[2:]
    assert spread == [int(u) for u in search.spread(x_max, x_1, SweepConfig(steps=3, max_concurrency=16, drain_max_s=20))]
    assert spread == sorted(spread) and all(1 < t < 16 for t in spread)
    assert max(spread) == round(doc["saturation_users"]) or round(doc["saturation_users"]) >= 16
    tables = step_table(load_run(out))
    c = curves(tables.rows, tables.slo_results)
    assert [p["load_value"] for p in c["points"]] == sorted(targets)  # the curve the knee finder reads

