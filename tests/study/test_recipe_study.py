"""The study command of docs/studies.md, run as written (tests/study/documented.py)."""

import json

import pytest

from tests.study.documented import judged_everywhere

pytestmark = pytest.mark.slow


@pytest.mark.recipe("study")
@pytest.mark.timeout(1500)
def test_the_documented_study_command_judges_every_cell_it_prints(early_recipes):
    res, workdir = early_recipes.outcome("study")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    out = workdir / "studies" / "spec"
    study = json.loads((out / "study.json").read_text())
    assert study["complete"] and "fixed count" in study["stopping"]["rule"]
    verdict = json.loads((out / "report" / "summary.json").read_text())["verdict"]
    assert verdict and {v["arm"] for v in verdict} == {"draft"} and all(v["rounds"] == 2 for v in verdict)
    assert {(v["task"], v["load"]) for v in verdict} >= {("all", 1.0), ("code", 1.0), ("summarization", 1.0)}
    judged_everywhere(res.stdout, out)
