"""The study command of docs/studies.md, run as written (tests/study/documented.py)."""

import json
import re
import shlex
import subprocess
import sys

import pytest

from tests.study.documented import as_python, judged_everywhere, recipe

pytestmark = pytest.mark.slow


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
