"""The planted-key test: distinct secrets through every input path never reach any output.

Four secrets enter a run through the four ways a credential reaches tokenswarm -- the
environment variable named by ``target.api_key_env``, a ``--set`` header, a scenario header
and the user info of the target URL -- and a fifth path carries them back: the simulator
quotes the request's headers in its error answers (``--echo-headers-in-errors``), as a
careless gateway does, so they arrive inside server text. Each mode (one process,
``--processes 2``, a master with two workers) runs with the web UI; then everything the run
wrote to disk (run directory and ``tokenswarm report`` output), everything every process
printed, and every page, JSON and CSV the web UI served during and after the run is searched
for every secret. The coverage matrix (paths x modes x sinks) is printed with ``-s``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

import pytest

from tests.helpers.runs import ROOT, scenario_file
from tests.webui.liveui import get_json, locust_web_ui, post_form, wait_for
from tokenswarm.sim.testing import start_sim

pytestmark = pytest.mark.slow

SECRETS = {
    "api_key_env": "sk-planted-envkey-A1b2C3d4",
    "--set header": "planted-set-hdr-E5f6G7h8",
    "scenario header": "planted-scn-hdr-J9k0L1m2",
    "URL user info": "planted-url-pw-N3p4Q5r6",
}
ECHOED = ("api_key_env", "--set header", "scenario header")  # sent as headers, so quoted back by the server
UI_PAGES = ("", "stats/requests", "stats/failures", "stats/requests/csv", "stats/failures/csv", "exceptions",
            "exceptions/csv", "tokenswarm/llm.json", "tokenswarm/llm.csv", "tokenswarm/series.json",
            "tokenswarm/status.json", "tokenswarm/charts", "tokenswarm/report/", "tokenswarm/report/report.md",
            "tokenswarm/report/summary.json")


def fetch(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=10) as resp:
            return resp.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:  # a 409/404 page is served text too
        return exc.read().decode("utf-8", "replace")


@pytest.mark.parametrize("mode", ["local", "processes", "master"])
def test_no_planted_secret_reaches_any_file_print_or_web_page(tmp_path, mode):
    sc = scenario_file(tmp_path, traffic={"seed": 3, "classes": {"qa": {
        "weight": 1, "prompt_tokens": {"dist": "fixed", "value": 20}, "max_tokens": {"dist": "fixed", "value": 8},
        "sampling": {"ignore_eos": True}}}},
        load={"mode": "closed", "steps": [2], "warmup_s": 0, "step_duration_s": 3, "stop_timeout_s": 5},
        target={"api_key_env": "I18_PLANTED_KEY", "scrape_interval_s": 1,
                "headers": {"X-Gateway-Token": SECRETS["scenario header"]}})
    out = tmp_path / "run"
    env_key = SECRETS["api_key_env"]
    with start_sim("--profile", "tiny-fast", "--api-key", env_key, "--echo-headers-in-errors",
                   "--fault-http-500", "0.3", env={}) as sim:
        host = sim.base_url.replace("http://", f"http://gw:{SECRETS['URL user info']}@")
        served: dict[str, str] = {}
        os.environ["I18_PLANTED_KEY"] = env_key  # inherited by every locust process the helper starts
        try:
            with locust_web_ui(sc, host, out, "--set", f"target.headers.X-Set-Key={SECRETS['--set header']}",
                               mode=mode, log_dir=tmp_path) as base:
                if mode != "local":
                    wait_for(lambda: get_json(base + "stats/requests").get("worker_count", 0) >= 2, 60, "2 workers")
                assert post_form(base + "swarm", {"user_count": 2, "spawn_rate": 2, "host": host})["success"]
                wait_for(lambda: get_json(base + "tokenswarm/llm.json")["rows"][-1]["requests"] > 0, 60, "requests")
                for page in UI_PAGES:
                    served[f"during: /{page}"] = fetch(base + page)
                wait_for(lambda: get_json(base + "tokenswarm/status.json")["state"] == "finished", 120, "the run to end")
                wait_for(lambda: "<html" in fetch(base + "tokenswarm/report/").lower()
                         and "Building" not in fetch(base + "tokenswarm/report/"), 120, "the report")
                for page in UI_PAGES:
                    served[f"after: /{page}"] = fetch(base + page)
        finally:
            os.environ.pop("I18_PLANTED_KEY", None)
        authorized = sim.stats()["authorized"]
    rep = subprocess.run([sys.executable, "-m", "tokenswarm", "report", str(out), "--out", str(tmp_path / "report")],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert rep.returncode == 0, rep.stderr[-2000:]

    # The planted values were really used: the key authorised every request kind ...
    assert all(authorized.get(k, 0) > 0 for k in ("/v1/models", "/tokenize", "/metrics", "/v1/chat/completions"))
    records = [json.loads(x) for x in (out / "records.jsonl").read_text().splitlines() if x]
    echoed = [r["error"] for r in records if r["error"] and "request headers:" in r["error"]]
    # ... and the server quoted the headers back, so the records' error texts went through redaction.
    assert echoed, "no error quoted the headers: the echo path was not exercised"
    assert all("x-set-key: ***" in e and "x-gateway-token: ***" in e and "authorization: ***" in e.lower()
               for e in echoed), echoed[:2]

    sinks: dict[str, str] = {}
    for p in sorted(list(out.rglob("*")) + list((tmp_path / "report").rglob("*"))):
        if p.is_file() and p.suffix != ".png":
            sinks[f"file {p.relative_to(tmp_path)}"] = p.read_text(errors="replace")
    for p in sorted(tmp_path.glob("locust-*.log")):
        sinks[f"printed by {p.stem}"] = p.read_text(errors="replace")
    sinks["printed by tokenswarm report"] = rep.stdout + rep.stderr
    sinks.update({f"web UI {k}": v for k, v in served.items()})
    assert len([k for k in sinks if k.startswith("printed by locust-worker")]) == (2 if mode == "master" else 0)
    assert sinks["file run/manifest.json"] and sinks["file run/records.jsonl"] and sinks["web UI after: /tokenswarm/llm.csv"]

    leaks = [(path, sink) for sink, text in sinks.items() for path, secret in SECRETS.items() if secret in text]
    _print_matrix(mode, sinks)
    assert leaks == [], f"secrets leaked: {leaks}"


def _print_matrix(mode: str, sinks: dict[str, str]) -> None:
    """One column of the coverage matrix: every input path was searched for in every sink listed."""
    print(f"\nplanted-key coverage, mode {mode}: input paths {', '.join(SECRETS)} (server echo of "
          f"{', '.join(ECHOED)}) x {len(sinks)} sinks, all searched for all {len(SECRETS)} secrets:")
    for s in sinks:
        print(f"  {mode:9s} {s}: {len(sinks[s])} chars, clean")


STUDY_KEY = "Zq9plantedStudyKey77xY"  # no provider shape: only the study knowing it can mask it
ARM_SCRIPT = """#!/bin/sh
# An arm server that, like vLLM, logs its arguments (the key is positional, $2) and environment.
echo "arm server args: $*"
echo "engine args: {{'api_key': ['$2'], 'model': 'sim-tiny'}}"
env | grep I18_STUDY_KEY
exec {python} -m tokenswarm sim --port "$1" --profile tiny-fast --api-key "$I18_STUDY_KEY"
"""
STUDY_SCENARIO = """name: planted-study
target: {{base_url: "http://127.0.0.1:8000", api: chat, model: auto, api_key_env: I18_STUDY_KEY}}
traffic:
  seed: 3
  classes:
    qa: {{weight: 1, prompt_tokens: {{dist: fixed, value: 20}}, max_tokens: {{dist: fixed, value: 8}},
          sampling: {{ignore_eos: true}}}}
load: {{mode: closed, steps: [1], warmup_s: 0, step_duration_s: 2, stop_timeout_s: 5}}
"""


def test_a_study_masks_the_key_it_knows_in_commands_manifest_report_prints_and_server_logs(tmp_path):
    script = tmp_path / "arm.sh"
    script.write_text(ARM_SCRIPT.format(python=sys.executable))
    scenario = tmp_path / "planted-study.yaml"
    scenario.write_text(STUDY_SCENARIO.format())
    out = tmp_path / "study"
    arm = f"sh {script} {{port}} {STUDY_KEY} --token-cache --spec-method ngram"
    res = subprocess.run([sys.executable, "-m", "tokenswarm", "study", str(scenario), "--rounds", "1", "--out", str(out),
                          "--ready-timeout", "60", "--arm", f"base={arm}", "--arm", f"cand={arm}"],
                         cwd=ROOT, capture_output=True, text=True, timeout=400,
                         env={**os.environ, "I18_STUDY_KEY": STUDY_KEY})
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    server_logs = sorted((out / "logs").glob("*-server.log"))
    assert len(server_logs) == 2
    log_text = server_logs[0].read_text()
    # the server did print the key three ways (positional argument, engine args, environment): masked, words kept
    assert "engine args: {'api_key': ['***'], 'model': 'sim-tiny'}" in log_text and "I18_STUDY_KEY=***" in log_text
    study = json.loads((out / "study.json").read_text())
    command = next(a["command"] for a in study["arms"] if a["name"] == "base")
    assert command == f"sh {script} {{port}} *** --token-cache --spec-method ngram"  # the secret, not its neighbours
    sinks = {f"file {p.relative_to(tmp_path)}": p.read_text(errors="replace")
             for p in out.rglob("*") if p.is_file() and p.suffix != ".png"}
    sinks["study stdout"], sinks["study stderr"] = res.stdout, res.stderr
    assert any(k.endswith("report/report.md") for k in sinks)
    assert [s for s, text in sinks.items() if STUDY_KEY in text] == []
