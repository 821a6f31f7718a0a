"""Auth, preflight and fail-fast through real runs against the simulator (a user's view)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.helpers.procs import free_port
from tests.helpers.runs import ROOT, read_records, run_locust, scenario_file
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

QA = {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 30},
      "max_tokens": {"dist": "fixed", "value": 16}, "sampling": {"ignore_eos": True}}
KEY = "sk-sim-right-key-4321"
KINDS = ("/v1/models", "/tokenize", "/metrics", "/v1/chat/completions")


def qa_scenario(tmp_path: Path, steps=(2,), duration_s: float = 2.0, **target):
    return scenario_file(tmp_path, traffic={"seed": 1, "classes": {"qa": QA}},
                         load={"mode": "closed", "steps": list(steps), "warmup_s": 0, "step_duration_s": duration_s,
                               "stop_timeout_s": 2},
                         target={"api_key_env": "I18_SIM_KEY", "scrape_interval_s": 1, **target})


def metrics_errors(run_dir: Path) -> list[str]:
    lines = [json.loads(x) for x in (run_dir / "server_metrics.jsonl").read_text().splitlines() if x]
    assert lines, "the scraper wrote no line"
    return [x["error"] for x in lines if x["error"]]


def test_the_key_is_sent_on_every_request_kind(tmp_path):
    sc = qa_scenario(tmp_path)
    with start_sim("--profile", "tiny-fast", "--api-key", KEY) as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run", env={"I18_SIM_KEY": KEY})
        authorized = sim.stats()["authorized"]
    assert res.returncode == 0, res.stderr[-2000:]
    assert all(authorized.get(k, 0) > 0 for k in KINDS), authorized
    recs = read_records(tmp_path / "run")
    assert recs and all(r["outcome"] == "ok" for r in recs)
    assert authorized["/v1/chat/completions"] == len(recs) + 1  # + the plan's pilot request, with the key too
    assert metrics_errors(tmp_path / "run") == []
    assert "sizing prompts with server:" in res.stderr, "prompt sizing used the server's /tokenize, not an estimate"


def test_url_user_info_is_sent_as_basic_auth_and_never_shown(tmp_path):
    sc = qa_scenario(tmp_path, api_key_env=None)
    with start_sim("--profile", "tiny-fast", "--basic-auth", "gwuser:gw-pass-8765") as sim:
        host = sim.base_url.replace("http://", "http://gwuser:gw-pass-8765@")
        res = run_locust(sc, host, tmp_path / "run")
        authorized = sim.stats()["authorized"]
    assert res.returncode == 0, res.stderr[-2000:]
    assert all(authorized.get(k, 0) > 0 for k in KINDS), authorized
    assert metrics_errors(tmp_path / "run") == []
    written = "".join(p.read_text(errors="replace") for p in (tmp_path / "run").rglob("*") if p.is_file())
    assert "gw-pass-8765" not in res.stdout + res.stderr + written


def test_a_wrong_key_stops_the_run_at_preflight_with_authentication_and_status_3(tmp_path):
    sc = qa_scenario(tmp_path)
    with start_sim("--profile", "tiny-fast", "--api-key", KEY) as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run", env={"I18_SIM_KEY": "sk-sim-wrong-key-0000"})
        served = sim.stats()["requests"]
    assert res.returncode == 3, res.stderr[-2000:]
    assert "authentication failed" in res.stderr and "HTTP 401" in res.stderr
    assert served == 0 and not (tmp_path / "run" / "records.jsonl").exists()
    assert "Traceback" not in res.stderr and "sk-sim-wrong-key-0000" not in res.stderr + res.stdout


def test_a_wrong_model_stops_at_preflight_naming_the_models_the_server_has(tmp_path):
    sc = qa_scenario(tmp_path, model="llama-3-70b", api_key_env=None)
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run")
        served = sim.stats()["requests"]
    assert res.returncode == 3, res.stderr[-2000:]
    assert "'llama-3-70b' is not served" in res.stderr and "the server has: sim-tiny" in res.stderr
    assert served == 0 and "Traceback" not in res.stderr


def test_a_run_whose_requests_all_fail_the_same_way_stops_with_the_servers_message(tmp_path):
    sc = qa_scenario(tmp_path, steps=(4,), duration_s=20, api_key_env=None)
    with start_sim("--profile", "tiny-fast", "--fault-http-500", "1.0") as sim:
        t0 = time.monotonic()
        res = run_locust(sc, sim.base_url, tmp_path / "run")
        elapsed = time.monotonic() - t0
        served = sim.stats()["requests"]
    assert res.returncode == 3, res.stderr[-2000:]
    assert "circuit breaker" in res.stderr and "Simulated internal server error" in res.stderr
    recs = read_records(tmp_path / "run")
    assert 20 <= len(recs) <= 20 + 4, f"20 failures trip it; at most one in flight per user after: {len(recs)}"
    assert served == len(recs) + 1, "every request sent is a record (but the plan's pilot request)"
    assert elapsed < 20, "stopped long before the planned 20 s"
    manifest = json.loads((tmp_path / "run" / "manifest.json").read_text())
    assert any("circuit breaker" in w for w in manifest["warnings"]) and manifest["complete"]


def test_wait_for_server_waits_for_a_server_started_after_the_run(tmp_path):
    sc = qa_scenario(tmp_path, api_key_env=None)
    port = free_port()
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--headless", "--scenario",
           str(sc), "--host", f"http://127.0.0.1:{port}", "--out", str(tmp_path / "run"), "--only-summary",
           "--wait-for-server", "60"]
    run = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           start_new_session=True)
    try:
        time.sleep(1.5)  # the point of the test: the server comes up after the run has started probing
        assert run.poll() is None, "the run did not wait"
        sim = subprocess.Popen([sys.executable, "-m", "tokenswarm", "sim", "--profile", "tiny-fast", "--port",
                                str(port)], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                               start_new_session=True)
        try:
            out, err = run.communicate(timeout=120)
        finally:
            sim.terminate()
            sim.wait(10)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait(10)
    assert run.returncode == 0, err[-2000:]
    assert read_records(tmp_path / "run")


def test_no_server_and_no_wait_fails_in_one_probe_with_status_3(tmp_path):
    sc = qa_scenario(tmp_path, api_key_env=None)
    t0 = time.monotonic()
    res = run_locust(sc, f"http://127.0.0.1:{free_port()}", tmp_path / "run")
    assert res.returncode == 3 and "does not answer GET /v1/models" in res.stderr and "--wait-for-server" in res.stderr
    assert "Traceback" not in res.stderr and time.monotonic() - t0 < 30


def test_a_dry_run_piped_into_head_ends_without_a_traceback():
    # `tokenswarm run qa --dry-run | head -1`, made deterministic: the reader is gone before any write
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        res = subprocess.run([sys.executable, "-m", "tokenswarm", "run", "qa", "--dry-run"], cwd=ROOT,
                             stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=60,
                             env={**os.environ, "PYTHONPATH": str(ROOT)})
    finally:
        os.close(write_end)
    assert res.returncode == 0 and res.stderr == "", res.stderr


def test_a_failed_preflight_started_from_the_web_ui_prints_no_user_traceback(tmp_path):
    from tests.helpers.procs import wait_port
    from tests.webui.liveui import get_json, post_form, wait_for

    sc = qa_scenario(tmp_path, api_key_env=None)
    port, dead = free_port(), free_port()
    log = tmp_path / "locust.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"),
                                 "--scenario", str(sc), "--host", f"http://127.0.0.1:{dead}", "--web-host", "127.0.0.1",
                                 "--web-port", str(port), "--out", str(tmp_path / "run")],
                                cwd=ROOT, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            wait_port(port, 40)
            base = f"http://127.0.0.1:{port}/"
            assert post_form(base + "swarm", {"user_count": 2, "spawn_rate": 2})["success"]
            # the failed preflight stops the runner (the UI stays up, so the user can fix the target)
            wait_for(lambda: "does not answer GET /v1/models" in log.read_text()
                     and (proc.poll() is not None or get_json(base + "stats/requests")["state"] in ("stopped", "ready")),
                     60, "the preflight failure and the runner to stop")
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    text = log.read_text()
    assert "does not answer GET /v1/models" in text, text[-2000:]
    assert "Traceback" not in text and "StopUser" not in text, text[-3000:]


def test_a_prompt_longer_than_max_model_len_is_refused_before_any_request_naming_the_task(tmp_path):
    qa = {**QA, "prompt_tokens": {"dist": "fixed", "value": 100000}}  # tiny-fast serves 4096 tokens
    sc = scenario_file(tmp_path, traffic={"seed": 1, "classes": {"qa": qa}},
                       load={"mode": "closed", "steps": [2], "warmup_s": 0, "step_duration_s": 2, "stop_timeout_s": 2},
                       target={"api_key_env": None})
    with start_sim("--profile", "tiny-fast") as sim:
        res = run_locust(sc, sim.base_url, tmp_path / "run", timeout_s=60)
        served = sim.stats()["requests"]
    assert res.returncode == 2, res.stderr[-2000:]
    assert "task 'qa': prompts of up to 100000 tokens" in res.stderr and "max_model_len is 4096" in res.stderr
    assert served == 0 and "Traceback" not in res.stderr
