"""The CI stage of docs/ci.md against the simulator, run as written (tests/study/documented.py)."""


import pytest

from tests.study.documented import UNJUDGED, documented_lines, run_documented, slo_checks

pytestmark = pytest.mark.slow


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
