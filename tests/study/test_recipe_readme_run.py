"""The README's first run against a healthy simulator, run as written (tests/study/documented.py)."""


import pytest

from tests.study.documented import UNJUDGED, documented_lines, run_documented, slo_checks

pytestmark = pytest.mark.slow


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
