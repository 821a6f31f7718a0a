"""The long documented recipes, run as written (tests/study/documented.py), all four at once.

They spend their minutes waiting on the simulator's pace (each with its simulator uses ~4-7 % of a
core), so they run side by side: in one file, so that under xdist one worker holds them while
the others run the rest of the suite, and that worker starts them together when it reaches the
file (:func:`_together`); a one-process run has started them with its first test
(tests/study/early.py). Each test then waits for its own recipe and asserts on its output as on
a run of its own.
"""

import json

import pytest

from tests.study.documented import UNJUDGED, judged_everywhere, slo_checks

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def _together(request: pytest.FixtureRequest, early_recipes) -> None:
    """Start every selected recipe of this file now (those already running go on)."""
    here = request.node.path
    early_recipes.start([m.args[0] for item in request.session.items if item.path == here
                         for m in item.iter_markers("recipe")])


@pytest.mark.recipe("ci_stage")
@pytest.mark.timeout(700)
def test_the_ci_stage_of_the_docs_judges_every_gate_against_the_simulator(early_recipes):
    res, workdir = early_recipes.outcome("ci_stage")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert UNJUDGED not in res.stdout + res.stderr
    out = workdir / "ci"
    assert slo_checks(out) and not any(c.get("not_enough_samples") for c in slo_checks(out))


@pytest.mark.recipe("readme_run")
@pytest.mark.timeout(700)
def test_the_readme_run_against_a_healthy_simulator_judges_every_gate_and_passes(early_recipes):
    res, workdir = early_recipes.outcome("readme_run")
    printed = res.stdout + res.stderr
    assert res.returncode == 0, printed[-4000:]
    assert UNJUDGED not in printed and "WARNING: " not in "\n".join(
        ln for ln in printed.splitlines() if "sizing" in ln or "plan:" in ln)
    out = workdir / "mix1"
    assert slo_checks(out) and all(c.get("passed") for c in slo_checks(out))


@pytest.mark.recipe("demo")
@pytest.mark.timeout(900)
def test_the_demo_as_the_readme_gives_it_judges_every_cell_including_code_at_concurrency_1(early_recipes):
    res, workdir = early_recipes.outcome("demo")
    assert res.args[3:] == ["demo"], res.args
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (out,) = (workdir / "studies").iterdir()
    judged_everywhere(res.stdout, out)
    cells = {(v["task"], v["load"]) for v in json.loads((out / "report" / "summary.json").read_text())["verdict"]}
    assert {("code", 1.0), ("all", 1.0), ("qa", 32.0), ("code", 32.0)} <= cells, cells


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
