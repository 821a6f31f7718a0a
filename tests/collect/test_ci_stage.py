"""The headless CI stage: SLO verdict files and every documented exit status."""

import contextlib
import json
import socket
import subprocess
import sys
import xml.etree.ElementTree as ET

import pytest

from tests.helpers.procs import free_port
from tests.helpers.runs import ROOT, scenario_file
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

TRAFFIC = {"seed": 2, "classes": {"qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 30},
                                         "max_tokens": {"dist": "fixed", "value": 16}}}}
# The step runs until the p50 gates have their 20 samples: a fixed 2 s got too few in a CI run
# beside a busy vLLM, and the verdict then said "not judged" where these tests expect "missed".
LOAD = {"mode": "closed", "steps": [2], "warmup_s": 0.5, "step_duration_s": 2, "stop_timeout_s": 5,
        "until": {"min_requests_per_task": 20, "max_step_s": 60}}


def tokenswarm_run(*args, timeout_s=120):
    return subprocess.run([sys.executable, "-m", "tokenswarm", "run", *args], capture_output=True, text=True,
                          timeout=timeout_s, cwd=ROOT)


def run_judged(tmp_path, host: str, *args: str, expect_exit: int, slo: dict | None = None):
    """``tokenswarm run`` of the short Q&A load against ``host``; asserts the exit status and
    returns the process and its ``slo.json`` verdict."""
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load=LOAD, **({"slo": slo} if slo else {}))
    out = tmp_path / "run"
    res = tokenswarm_run(str(sc), "--headless", "--host", host, "--out", str(out), *args)
    assert res.returncode == expect_exit, res.stdout[-2000:] + res.stderr[-2000:]
    return res, json.loads((out / "slo.json").read_text())


@pytest.fixture(scope="module")
def sim():
    with start_sim("--profile", "tiny-fast") as s:
        yield s


def test_all_slos_met_exits_0_with_slo_json_and_junit(tmp_path, sim):
    res, v = run_judged(tmp_path, sim.base_url, "--slo", "ttft_p50_ms=5000", "--slo", "error_rate=0.5",
                        "--slo", "qa.tpot_p50_ms=1000", expect_exit=0)
    out = tmp_path / "run"
    assert v["passed"] and v["exit_status"] == 0
    names = {(c["slo_name"], c["task"]) for c in v["checks"]}
    assert {("ttft_p50_ms", "all"), ("error_rate", "qa"), ("tpot_p50_ms", "qa")} <= names
    suite = ET.parse(out / "junit.xml").getroot()
    assert suite.get("name") == "tokenswarm-slo" and int(suite.get("tests")) == len(v["checks"])
    assert suite.get("failures") == "0"
    assert "verdict: PASS" in res.stdout


def test_a_missed_slo_exits_1_and_names_it(tmp_path, sim):
    res, v = run_judged(tmp_path, sim.base_url, slo={"ttft_p50_ms": 0.001}, expect_exit=1)
    out = tmp_path / "run"
    missed = [c for c in v["checks"] if not c["passed"]]
    assert missed and all(c["slo_name"] == "ttft_p50_ms" for c in missed)
    failures = ET.parse(out / "junit.xml").getroot().findall(".//failure")
    assert len(failures) == len(missed) and "required <= 0.001 ms" in failures[0].get("message")
    assert "MISSED" in res.stdout and "FAIL (SLO missed)" in res.stdout


def test_a_tail_slo_over_too_few_requests_exits_1_saying_not_enough_samples(tmp_path, sim):
    res, v = run_judged(tmp_path, sim.base_url, slo={"ttft_p99_ms": 100000}, expect_exit=1)
    assert v["checks"] and all(c["not_enough_samples"] and c["observed_value"] is None for c in v["checks"])
    assert "NOT ENOUGH SAMPLES" in res.stdout and "not judged: not enough samples" in res.stdout


def test_bad_configuration_exits_2_before_any_traffic(tmp_path):
    bad = scenario_file(tmp_path, traffic=TRAFFIC, load={**LOAD, "mode": "sideways"})
    res = tokenswarm_run(str(bad), "--headless", "--host", "http://127.0.0.1:9")
    assert res.returncode == 2 and "load.mode" in res.stderr and str(bad) in res.stderr
    res = tokenswarm_run("mix", "--headless", "--slo", "p42=1")
    assert res.returncode == 2 and "unknown SLO" in res.stderr


def test_unreachable_target_exits_3_with_a_clear_message(tmp_path):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load=LOAD)
    res = tokenswarm_run(str(sc), "--headless", "--host", f"http://127.0.0.1:{free_port()}", "--out",
                         str(tmp_path / "run"))
    assert res.returncode == 3
    assert "does not answer GET /v1/models" in res.stderr and "Connection refused" in res.stderr


def test_no_successful_request_exits_3(tmp_path):
    with start_sim("--profile", "tiny-fast", "--fault-http-500", "1.0") as broken:
        _, v = run_judged(tmp_path, broken.base_url, slo={"error_rate": 1.0}, expect_exit=3)
    out = tmp_path / "run"
    assert "no successful request" in v["reason"]
    recs = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines()]
    assert recs and all(r["outcome"] == "http_error" and r["http_status"] == 500 for r in recs)


def test_max_run_time_guard_always_ends_the_run(tmp_path, sim):
    sc = scenario_file(tmp_path, traffic=TRAFFIC, load={**LOAD, "step_duration_s": 600, "until": None})
    out = tmp_path / "run"
    res = tokenswarm_run(str(sc), "--headless", "--host", sim.base_url, "--out", str(out), "--max-run-time", "4")
    assert res.returncode == 0, res.stderr[-2000:]
    m = json.loads((out / "manifest.json").read_text())
    assert m["complete"] and any("maximum run time" in w for w in m["warnings"])
    assert m["ended_at"] - m["started_at"] < 60


def test_dry_run_prints_the_plan_and_sends_nothing(tmp_path):
    sc = scenario_file(tmp_path, base="sweep-rate", traffic=TRAFFIC)
    # a listener on the target's port counts every connection the dry run opens
    listener = socket.create_server(("127.0.0.1", 0))
    listener.settimeout(0.0)
    port = listener.getsockname()[1]
    try:
        res = tokenswarm_run(str(sc), "--dry-run", "--host", f"http://127.0.0.1:{port}")
        connections = 0
        with contextlib.suppress(BlockingIOError):
            while True:
                listener.accept()[0].close()
                connections += 1
    finally:
        listener.close()
    assert res.returncode == 0, res.stderr[-2000:]
    assert connections == 0, f"the dry run opened {connections} connection(s) to the target"
    assert "step 0 r" in res.stdout and "requests in the steady window" in res.stdout
    assert "nothing was sent" in res.stdout
