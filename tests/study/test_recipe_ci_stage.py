"""The CI stage of docs/ci.md against the simulator, run as written (tests/study/documented.py)."""


import pytest

from tests.study.documented import UNJUDGED, slo_checks

pytestmark = pytest.mark.slow


@pytest.mark.recipe("ci_stage")
@pytest.mark.timeout(700)
def test_the_ci_stage_of_the_docs_judges_every_gate_against_the_simulator(early_recipes):
    res, workdir = early_recipes.outcome("ci_stage")
    assert res.returncode == 0, (res.stdout + res.stderr)[-4000:]
    assert UNJUDGED not in res.stdout + res.stderr
    out = workdir / "ci"
    assert slo_checks(out) and not any(c.get("not_enough_samples") for c in slo_checks(out))
