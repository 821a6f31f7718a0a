"""The documented recipes, run as written: the demo, the study of docs/studies.md, the README's
first run, the CI stage of docs/ci.md and the manual A/B -- each must print a verdict with every
cell judged.

The commands are read from the pages themselves, so a page and its test cannot drift apart. The
only changes: ``tokenswarm`` runs as ``python -m tokenswarm`` (the interpreter under test), the
fixed port 8000 becomes a free one and ``--out`` a directory of the test's. The four long ones
(:func:`recipes`, tested in tests/study/test_recipes.py) run side by side (tests/study/early.py).
The manual A/B recipe (plumbing of two runs and compare) is the one run with shortened, fixed
steps (appended ``--set`` flags).
"""


import json
import re
import shlex
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path

from tests.helpers.runs import ROOT
from tests.helpers.waiting import wait_until
from tests.study.early import Recipe

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


def _sim_argv(sim_line: str) -> Callable[[int], list[str]]:
    """A documented simulator line, on the free port it is given instead of 8000."""
    line = sim_line.split("#", 1)[0].strip().rstrip("&").strip()
    return lambda port: as_python(shlex.split(line.replace("--port 8000", f"--port {port}")))


def _run_argv(run_line: str, out_from: str, out_to: str) -> Callable[[Path, int | None], list[str]]:
    """A documented ``tokenswarm run`` line against the simulator's port, writing into the work directory."""
    def argv(workdir: Path, port: int | None) -> list[str]:
        line = run_line.replace("127.0.0.1:8000", f"127.0.0.1:{port}").replace(out_from, f"--out {workdir / out_to}")
        return as_python(shlex.split(line))
    return argv


def _study_argv(workdir: Path, port: int | None) -> list[str]:
    (line,) = recipe("study")
    argv = as_python(shlex.split(line))
    return [re.sub(r"^(\w+=)tokenswarm sim", rf"\1{sys.executable} -m tokenswarm sim", a) for a in argv]


def _demo_argv(workdir: Path, port: int | None) -> list[str]:
    (line,) = documented_lines("README.md", "pip install -e . &&")
    return as_python(shlex.split(line.split("&&", 1)[1]))


def recipes() -> dict[str, Recipe]:
    """The long recipes as processes, longest first (the order a one-process run starts them in)."""
    (readme_sim,) = documented_lines("README.md", "tokenswarm sim --port 8000")
    (readme_run,) = documented_lines("README.md", "tokenswarm run scenarios/mix.yaml")
    (ci_sim,) = documented_lines("docs/ci.md", "tokenswarm sim --port 8000 &")
    (ci_run,) = documented_lines("docs/ci.md", "tokenswarm run scenarios/mix.yaml")
    return {
        "study": Recipe("study", _study_argv, timeout_s=1400),
        "readme_run": Recipe("readme_run", _run_argv(readme_run, "--out runs/mix1", "mix1"), _sim_argv(readme_sim),
                             cwd=ROOT, timeout_s=600),
        "ci_stage": Recipe("ci_stage", _run_argv(ci_run, "--out runs/ci", "ci"), _sim_argv(ci_sim), cwd=ROOT,
                           timeout_s=600),
        "demo": Recipe("demo", _demo_argv, timeout_s=850),
    }


def slo_checks(run_dir) -> list[dict]:
    doc = json.loads((run_dir / "slo.json").read_text())
    return doc.get("results") or doc.get("checks") or []


