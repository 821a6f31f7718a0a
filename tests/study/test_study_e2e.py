"""``tokenswarm study`` end to end against simulator arms (each arm a real ``tokenswarm sim``)."""

import json
import os
import signal
import subprocess
import sys

import pytest

from tests.helpers.procs import default_sigint
from tests.helpers.runs import ROOT
from tests.helpers.waiting import wait_until

pytestmark = pytest.mark.slow

SIM = f"{sys.executable} -m tokenswarm sim --port {{port}} --profile tiny-fast"
SCENARIO = """name: study-test
target: {base_url: "http://127.0.0.1:8000", api: chat, model: auto}
traffic:
  seed: 3
  task_draw: per_request
  keep_outputs: true
  sampling: {temperature: 0.0}
  classes:
    qa: {weight: 1, prompt_tokens: {dist: uniform, min: 20, max: 60}, max_tokens: {dist: fixed, value: 12}}
    code: {weight: 1, prompt_tokens: {dist: uniform, min: 200, max: 400}, max_tokens: {dist: fixed, value: 12}}
load: {mode: closed, steps: [1, 4], warmup_s: 0.5, step_duration_s: 3, stop_timeout_s: 5}
"""


@pytest.fixture
def scenario(tmp_path):
    path = tmp_path / "study-test.yaml"
    path.write_text(SCENARIO)
    return path


def study_cmd(scenario, out, *arms, rounds=1, extra=()):
    cmd = [sys.executable, "-m", "tokenswarm", "study", str(scenario), "--rounds", str(rounds), "--out", str(out),
           "--ready-timeout", "60"]
    for a in arms:
        cmd += ["--arm", a]
    return cmd + list(extra)


def run(cmd, timeout_s=400):
    return subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s)


def draft_vs_base_summary(scenario, out, sim=SIM):
    """A one-round study of the simulator without and with draft speculation; its summary.json."""
    res = run(study_cmd(scenario, out, f"base={sim}", f"draft={sim} --spec-method draft"))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    return json.loads((out / "report" / "summary.json").read_text())


def manifest(out):
    return json.loads((out / "study.json").read_text())


def no_server_left(out):
    """Every server command the study started has ended (its process group is gone)."""
    for line in (out / "logs").glob("*-server.log"):
        port = line.read_text().splitlines()[0].split("--port ")[1].split()[0]
        res = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True)
        if res.returncode == 0 and res.stdout.strip():
            return False
    return True


def test_a_study_of_two_simulator_arms_completes_with_a_verdict_per_task_and_load(tmp_path, scenario):
    out = tmp_path / "study"
    res = run(study_cmd(scenario, out, f"base={SIM}", f"draft={SIM} --spec-method draft", rounds=2))
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    m = manifest(out)
    assert [a for _, a in m["order"]] == ["base", "draft", "draft", "base"] and m["complete"]
    assert all(e["status"] == "done" and (out / e["run_dir"] / "records.jsonl").is_file() for e in m["arm_rounds"])
    assert all((out / "logs" / f"{a}-r{r}-server.log").is_file() for r, a in m["order"])
    summary = json.loads((out / "report" / "summary.json").read_text())
    cells = {(v["task"], v["load"]): v for v in summary["verdict"]}
    assert set(cells) == {(t, load) for t in ("all", "qa", "code") for load in (1.0, 4.0)}
    for v in summary["verdict"]:
        for field in ("arm", "task", "load", "speedup", "speedup_ci", "aggregate_speedup", "aggregate_speedup_ci",
                      "rounds", "verdict", "verdict_rule", "ttft_p50_ratio", "mean_accepted_length"):
            assert field in v, field
        assert v["arm"] == "draft" and v["rounds"] == 2
    c1 = cells[("all", 1.0)]
    assert c1["speedup"] > 1.3 and c1["speedup_ci"][0] < c1["speedup"] < c1["speedup_ci"][1]
    assert c1["mean_accepted_length"] > 1.5
    assert summary["consistency"][0]["exact_match_rate"] == 1.0
    report = (out / "report" / "report.md").read_text()
    assert report.index("## Conditions") < report.index("## draft vs base") < report.index("## Verdict rules")
    assert "tiny-fast" in report and "rounds 2" in report
    # the printed verdict table names its n per arm and the verdict words (a cell whose generator was
    # overloaded, as on a busy CI machine, prints "SUSPECT: generator overloaded (...)" in capitals)
    assert "ok requests base/cand" in res.stdout
    assert c1["verdict"].casefold() in res.stdout.casefold(), (c1["verdict"], res.stdout[-3000:])
    assert no_server_left(out)
    again = run([sys.executable, "-m", "tokenswarm", "report", str(out), "--quiet"])
    assert again.returncode == 0, again.stderr


def test_an_interrupted_study_resumes_and_skips_the_finished_arm_rounds(tmp_path, scenario):
    out = tmp_path / "study"
    cmd = study_cmd(scenario, out, f"base={SIM}", f"draft={SIM} --spec-method draft", extra=["--no-report"])
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
                            start_new_session=True, preexec_fn=default_sigint)

    def second_arm_round_started() -> bool:
        assert proc.poll() is None, proc.communicate()
        return (out / "runs" / "draft-r1" / "manifest.json").exists()

    # interrupt once the second arm-round's run has begun writing its run directory
    wait_until(second_arm_round_started, 180, "the second arm-round's run directory", every_s=0.2)
    first_run_id = json.loads((out / "runs" / "base-r1" / "manifest.json").read_text())["run_id"]
    os.killpg(proc.pid, signal.SIGINT)
    _stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 130, stderr
    assert "run the same command again to resume" in stderr
    m = manifest(out)
    assert [e["status"] for e in m["arm_rounds"]] == ["done", "interrupted"] and not m["complete"]
    assert no_server_left(out)
    assert (out / "runs" / "draft-r1" / "records.jsonl").is_file(), "the interrupted run wrote what it recorded"
    res = run(cmd)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    assert "round 1, arm base: done earlier, skipped" in res.stdout
    # the finished round was not run again, and the interrupted attempt was kept aside, not deleted
    assert json.loads((out / "runs" / "base-r1" / "manifest.json").read_text())["run_id"] == first_run_id
    m = manifest(out)
    assert m["complete"] and len(m["resumed_at"]) == 1
    draft = m["arm_rounds"][1]
    assert draft["attempts_count"] == 2 and draft["set_aside_dirs"] == ["runs/draft-r1.failed-1"]
    assert (out / "runs" / "draft-r1.failed-1").is_dir()


def test_an_arm_whose_server_never_starts_stops_the_study_with_status_3_and_keeps_earlier_results(tmp_path, scenario):
    out = tmp_path / "study"
    broken = f"broken={sys.executable} -c 'import sys; print(\"no GPU here\"); sys.exit(4)' {{port}}"
    res = run(study_cmd(scenario, out, f"base={SIM}", broken))
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    assert "arm broken: the server command exited with status 4 before it was ready" in res.stderr
    assert "no GPU here" in res.stderr and "Traceback" not in res.stderr
    m = manifest(out)
    assert [e["status"] for e in m["arm_rounds"]] == ["done", "failed"]
    assert m["failures"][0]["arm"] == "broken" and (out / "runs" / "base-r1" / "records.jsonl").is_file()


def test_an_arm_whose_server_dies_mid_round_stops_the_study_and_keeps_what_was_recorded(tmp_path, scenario):
    out = tmp_path / "study"
    dying = f"dying=timeout 10 {SIM}"
    res = run(study_cmd(scenario, out, dying, f"draft={SIM} --spec-method draft",
                        extra=["--set", "load.step_duration_s=30"]))
    assert res.returncode == 3, res.stdout[-2000:] + res.stderr[-2000:]
    assert "round 1, arm dying: the server exited with status 124 during the run" in res.stderr
    assert "the records so far are kept in" in res.stderr
    records = (out / "runs" / "dying-r1" / "records.jsonl").read_text().splitlines()
    assert records, "the requests answered before the server died were recorded"
    assert json.loads(records[0])["outcome"] == "ok"
    m = manifest(out)
    assert m["arm_rounds"][0]["status"] == "failed" and m["arm_rounds"][1]["status"] == "pending"


def test_bad_input_exits_2_before_any_server_starts(tmp_path, scenario):
    res = run(study_cmd(scenario, tmp_path / "s", f"a={SIM}"))
    assert res.returncode == 2 and "at least two arms" in res.stderr
    res = run(study_cmd(scenario, tmp_path / "s", f"a={SIM}", f"b={SIM}", extra=["--set", "load.steps=oops"]))
    assert res.returncode == 2 and "load.steps" in res.stderr and "Traceback" not in res.stderr
    assert not (tmp_path / "s").exists()


def test_the_demo_is_a_study_of_baseline_against_draft_speculation(tmp_path):
    out = tmp_path / "demo"
    res = run([sys.executable, "-m", "tokenswarm", "demo", "--profile", "tiny-fast", "--steps", "[1]",
               "--step-duration", "3", "--rounds", "1", "--out", str(out)])
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    m = manifest(out)
    assert [a["name"] for a in m["arms"]] == ["baseline", "draft"] and m["study_source"] == "tokenswarm demo"
    assert "--spec-method none" in m["arms"][0]["command"] and "--spec-method draft" in m["arms"][1]["command"]
    verdict = json.loads((out / "report" / "summary.json").read_text())["verdict"]
    assert {v["task"] for v in verdict} >= {"all"} and "speedup (per-req tok/s)" in res.stdout


def test_an_arm_can_be_a_server_the_user_runs_given_by_its_url(tmp_path, scenario):
    from tokenswarm.sim.testing import start_sim

    out = tmp_path / "study"
    with start_sim("--profile", "tiny-fast") as sim:
        res = run(study_cmd(scenario, out, f"running={sim.base_url}/v1", f"draft={SIM} --spec-method draft"))
        assert sim.proc.poll() is None, "the study does not stop a server it did not start"
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    m = manifest(out)
    assert m["arms"][0]["host"] == f"{sim.base_url}/v1" and m["arms"][0]["command"] is None
    assert m["arm_rounds"][0]["base_url"] == sim.base_url and m["arm_rounds"][0]["server_exit_status"] is None
