"""The documented recipes, run as written: the demo, the study of docs/studies.md, the README's
first run and the CI stage of docs/ci.md -- each must print a verdict with every cell judged.

The commands are read from the pages themselves, so a page and its test cannot drift apart. The
only changes: ``tokenswarm`` runs as ``python -m tokenswarm`` (the interpreter under test) and the
fixed port 8000 becomes a free one. The manual A/B recipe (plumbing of two runs and compare) is
the one run with shortened, fixed steps (appended ``--set`` flags).
"""

import json
import re
import shlex
import subprocess
import sys
import urllib.request

import pytest

from tests.helpers.runs import ROOT
from tests.helpers.waiting import wait_until
from tokenswarm.sim.testing import free_port

pytestmark = pytest.mark.slow

SHORT = ["--set", "load.steps=[1]", "--set", "load.warmup_s=0.5", "--set", "load.step_duration_s=3",
         "--set", "load.stop_timeout_s=2", "--set", "load.until=null"]
UNJUDGED = "not enough samples"
PY = [sys.executable, "-m", "tokenswarm"]


def recipe(name: str) -> list[str]:
    """The command lines of the ``<!-- recipe:NAME -->`` block (continuation lines joined)."""
    page = (ROOT / "docs" / "studies.md").read_text()
    block = page.split(f"<!-- recipe:{name} -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [ln.strip() for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]


def documented_lines(page: str, start: str) -> list[str]:
    """Every command line of ``page`` (continuations joined) that starts with ``start``."""
    text = (ROOT / page).read_text().replace("\\\n", " ")
    return [" ".join(ln.split()) for ln in text.splitlines() if ln.strip().startswith(start)]


def judged_everywhere(printed: str, study_dir) -> None:
    """No cell or gate of what was printed lacks samples, and the summary agrees."""
    assert UNJUDGED not in printed, printed[-4000:]
    verdict = json.loads((study_dir / "report" / "summary.json").read_text())["verdict"]
    assert verdict and all(v["verdict"] != UNJUDGED for v in verdict), verdict


def as_python(argv: list[str]) -> list[str]:
    assert argv[0] == "tokenswarm", argv
    return PY + argv[1:]


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    def answers() -> bool:
        assert proc.poll() is None, "the simulator exited"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
        except OSError:
            return False
        return True

    wait_until(answers, timeout_s, f"the simulator on port {port} to answer /v1/models", every_s=0.1)


@pytest.mark.timeout(1500)
def test_the_documented_study_command_judges_every_cell_it_prints(tmp_path):
    (line,) = recipe("study")
    argv = as_python(shlex.split(line))
    argv = [re.sub(r"^(\w+=)tokenswarm sim", rf"\1{sys.executable} -m tokenswarm sim", a) for a in argv]
    res = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=1400)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = tmp_path / "studies" / "spec"
    study = json.loads((out / "study.json").read_text())
    assert study["complete"] and "fixed count" in study["stopping"]["rule"]
    verdict = json.loads((out / "report" / "summary.json").read_text())["verdict"]
    assert verdict and {v["arm"] for v in verdict} == {"draft"} and all(v["rounds"] == 2 for v in verdict)
    assert {(v["task"], v["load"]) for v in verdict} >= {("all", 1.0), ("code", 1.0), ("summarization", 1.0)}
    judged_everywhere(res.stdout, out)


@pytest.mark.timeout(900)
def test_the_demo_as_the_readme_gives_it_judges_every_cell_including_code_at_concurrency_1(tmp_path):
    (line,) = [ln for ln in documented_lines("README.md", "pip install -e . &&")]
    argv = as_python(shlex.split(line.split("&&", 1)[1]))
    assert argv[3:] == ["demo"], argv
    res = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=850)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (out,) = (tmp_path / "studies").iterdir()
    judged_everywhere(res.stdout, out)
    cells = {(v["task"], v["load"]) for v in json.loads((out / "report" / "summary.json").read_text())["verdict"]}
    assert {("code", 1.0), ("all", 1.0), ("qa", 32.0), ("code", 32.0)} <= cells, cells


def run_documented(tmp_path, sim_line: str, run_line: str, timeout_s: float = 600) -> tuple[subprocess.CompletedProcess, int]:
    """Start the documented simulator on a free port, then the documented run against it."""
    port = free_port()
    sim_argv = as_python(shlex.split(sim_line.strip().rstrip("&").strip().replace("--port 8000", f"--port {port}")))
    sim = subprocess.Popen(sim_argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)
    try:
        wait_ready(port, sim)
        argv = as_python(shlex.split(run_line.replace("127.0.0.1:8000", f"127.0.0.1:{port}")))
        return subprocess.run(argv, capture_output=True, text=True, cwd=ROOT, timeout=timeout_s), port
    finally:
        sim.kill()
        sim.wait(20)


def slo_checks(run_dir) -> list[dict]:
    doc = json.loads((run_dir / "slo.json").read_text())
    return doc.get("results") or doc.get("checks") or []


@pytest.mark.timeout(700)
def test_the_readme_run_against_a_healthy_simulator_judges_every_gate_and_passes(tmp_path):
    (sim_line,) = documented_lines("README.md", "tokenswarm sim --port 8000")
    (run_line,) = documented_lines("README.md", "tokenswarm run scenarios/mix.yaml")
    out = tmp_path / "mix1"
    res, _ = run_documented(tmp_path, sim_line, run_line.replace("--out runs/mix1", f"--out {out}"))
    printed = res.stdout + res.stderr
    assert res.returncode == 0, printed[-4000:]
    assert UNJUDGED not in printed and "WARNING: " not in "\n".join(
        ln for ln in printed.splitlines() if "sizing" in ln or "plan:" in ln)
    assert slo_checks(out) and all(c.get("passed") for c in slo_checks(out))


@pytest.mark.timeout(700)
def test_the_ci_stage_of_the_docs_judges_every_gate_against_the_simulator(tmp_path):
    (sim_line,) = documented_lines("docs/ci.md", "tokenswarm sim --port 8000 &")
    (run_line,) = documented_lines("docs/ci.md", "tokenswarm run scenarios/mix.yaml")
    sim_line = sim_line.split("#", 1)[0]
    out = tmp_path / "ci"
    res, _ = run_documented(tmp_path, sim_line, run_line.replace("--out runs/ci", f"--out {out}"))
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert UNJUDGED not in res.stdout + res.stderr
    assert slo_checks(out) and not any(c.get("not_enough_samples") for c in slo_checks(out))


def test_the_documented_manual_ab_recipe_runs_and_compares(tmp_path):
    lines = recipe("manual")
    sim: tuple[subprocess.Popen, int] | None = None
    try:
        for line in lines:
            if line.endswith("&"):
                port = free_port()
                argv = as_python(shlex.split(line[:-1].replace("--port 8000", f"--port {port}")))
                proc = subprocess.Popen(argv, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                        start_new_session=True)
                sim = (proc, port)
                wait_ready(port, proc)
            elif line == "kill %1":
                assert sim is not None
                sim[0].terminate()
                sim[0].wait(20)
                sim = None
            else:
                argv = as_python(shlex.split(line))
                if argv[3] == "run":
                    assert sim is not None and "--headless" in argv and "--out" in argv
                    argv = [a.replace("127.0.0.1:8000", f"127.0.0.1:{sim[1]}") for a in argv] + SHORT
                res = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=300)
                # a run may fail its SLO (1); compare must accept the two differently named scenarios (0)
                allowed = (0, 1) if argv[3] == "run" else (0,)
                assert res.returncode in allowed, (line, res.stdout[-2000:], res.stderr[-2000:])
    finally:
        if sim is not None:
            sim[0].kill()
    assert (tmp_path / "runs" / "spec-candidate" / "compare-vs-spec-baseline" / "summary.json").is_file()
