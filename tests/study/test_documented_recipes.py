"""The A/B recipes of docs/studies.md, run as written (load steps shortened by appended --set flags).

The commands are read from the page itself, so the page and the test cannot drift apart. The only
changes: ``tokenswarm`` runs as ``python -m tokenswarm`` (the interpreter under test), the fixed
port 8000 of the manual recipe becomes a free one, and each run gets ``--set`` flags that
shorten its load steps.
"""

import json
import re
import shlex
import subprocess
import sys
import time
import urllib.request

import pytest

from tests.helpers.runs import ROOT
from tokenswarm.sim.testing import free_port

pytestmark = pytest.mark.slow

SHORT = ["--set", "load.steps=[1]", "--set", "load.warmup_s=0.5", "--set", "load.step_duration_s=3",
         "--set", "load.stop_timeout_s=2"]
PY = [sys.executable, "-m", "tokenswarm"]


def recipe(name: str) -> list[str]:
    """The command lines of the ``<!-- recipe:NAME -->`` block (continuation lines joined)."""
    page = (ROOT / "docs" / "studies.md").read_text()
    block = page.split(f"<!-- recipe:{name} -->", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [ln.strip() for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]


def as_python(argv: list[str]) -> list[str]:
    assert argv[0] == "tokenswarm", argv
    return PY + argv[1:]


def wait_ready(port: int, proc: subprocess.Popen, timeout_s: float = 60) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, "the simulator exited"
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=1).read()
            return
        except OSError:
            time.sleep(0.1)
    pytest.fail(f"simulator on port {port} not ready in {timeout_s} s")


def test_the_documented_study_command_runs_and_writes_a_verdict(tmp_path):
    (line,) = recipe("study")
    argv = as_python(shlex.split(line))
    argv = [re.sub(r"^(\w+=)tokenswarm sim", rf"\1{sys.executable} -m tokenswarm sim", a) for a in argv]
    res = subprocess.run(argv + SHORT, capture_output=True, text=True, cwd=tmp_path, timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = tmp_path / "studies" / "spec"
    assert json.loads((out / "study.json").read_text())["complete"]
    verdict = json.loads((out / "report" / "summary.json").read_text())["verdict"]
    assert verdict and {v["arm"] for v in verdict} == {"draft"} and all(v["rounds"] == 2 for v in verdict)


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
