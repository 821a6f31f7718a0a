"""The README's first run against a healthy simulator, run as written (tests/study/documented.py)."""


import pytest

from tests.study.documented import UNJUDGED, slo_checks

pytestmark = pytest.mark.slow


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
