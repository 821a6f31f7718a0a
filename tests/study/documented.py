"""The documented recipes, run as written (one test file per recipe, so that parallel workers
run them side by side): the demo, the study of docs/studies.md, the README's first run, the CI
stage of docs/ci.md and the manual A/B -- each must print a verdict with every cell judged.

The commands are read from the pages themselves, so a page and its test cannot drift apart. The
only changes: ``tokenswarm`` runs as ``python -m tokenswarm`` (the interpreter under test) and the
fixed port 8000 becomes a free one. The manual A/B recipe (plumbing of two runs and compare) is
the one run with shortened, fixed steps (appended ``--set`` flags).
"""


import json
import shlex
import subprocess
import sys
import urllib.request

from tests.helpers.runs import ROOT
from tests.helpers.waiting import wait_until
from tokenswarm.sim.testing import free_port

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


