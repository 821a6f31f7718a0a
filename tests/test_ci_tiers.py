"""CI cannot pass by skipping: a required tier's skip fails, and a required tier must run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

TIER_TESTS = '''
import pytest

@pytest.mark.browser
def test_browser_tier():
    pytest.skip("no Chromium binary")

def test_plain():
    pass
'''


def run_pytest(tmp_path: Path, source: str, required: str | None, *args: str) -> subprocess.CompletedProcess:
    (tmp_path / "test_tier.py").write_text(source)
    # a session of its own: not this run's tier requirement, nor its xdist worker's identity
    env = {k: v for k, v in os.environ.items() if k != "TOKENSWARM_CI_REQUIRE_TIERS" and not k.startswith("PYTEST_XDIST")}
    if required is not None:
        env["TOKENSWARM_CI_REQUIRE_TIERS"] = required
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "tests.helpers.tiers",
                           "-o", "markers=browser", "--rootdir", str(tmp_path), str(tmp_path), *args],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def test_without_the_variable_a_tier_test_may_skip(tmp_path):
    res = run_pytest(tmp_path, TIER_TESTS, None)
    assert res.returncode == 0 and "1 passed, 1 skipped" in res.stdout, res.stdout


def test_a_skip_in_a_required_tier_fails_naming_the_tier_and_the_reason(tmp_path):
    res = run_pytest(tmp_path, TIER_TESTS, "browser")
    assert res.returncode == 1, res.stdout
    assert "tier browser is required here" in res.stdout and "no Chromium binary" in res.stdout


def test_a_required_tier_that_ran_no_test_fails_the_session(tmp_path):
    res = run_pytest(tmp_path, TIER_TESTS, "browser", "-m", "not browser")
    assert res.returncode == 1 and "no test of theirs ran" in res.stdout, res.stdout


def test_a_required_tier_whose_tests_pass_passes(tmp_path):
    res = run_pytest(tmp_path, "import pytest\n\n@pytest.mark.browser\ndef test_b():\n    pass\n", "browser")
    assert res.returncode == 0, res.stdout


# The README's command runs the suite in pytest-xdist workers: the skip still fails, and the
# controller, which sees every worker's reports, judges whether each required tier ran.

def test_under_parallel_workers_a_skip_in_a_required_tier_still_fails(tmp_path):
    res = run_pytest(tmp_path, TIER_TESTS, "browser", "-n", "2")
    assert res.returncode == 1, res.stdout
    assert "tier browser is required here" in res.stdout and "no Chromium binary" in res.stdout


def test_under_parallel_workers_a_required_tier_that_ran_on_a_worker_passes(tmp_path):
    many = "import pytest\n\n@pytest.mark.browser\ndef test_b():\n    pass\n" + "".join(
        f"\ndef test_plain_{i}():\n    pass\n" for i in range(8))
    res = run_pytest(tmp_path, many, "browser", "-n", "2")
    assert res.returncode == 0 and "9 passed" in res.stdout, res.stdout


def test_under_parallel_workers_a_required_tier_that_ran_no_test_fails_the_session(tmp_path):
    res = run_pytest(tmp_path, TIER_TESTS, "browser", "-n", "2", "-m", "not browser")
    assert res.returncode == 1 and "no test of theirs ran" in res.stdout, res.stdout


@pytest.fixture(scope="module")
def stage_markers(tmp_path_factory) -> dict[str, set[str]]:
    """Every test of the suite with the stage and tier markers it carries, from one collection."""
    out = tmp_path_factory.mktemp("collected") / "markers.json"
    plugin = tmp_path_factory.mktemp("plugin")
    (plugin / "markers_out.py").write_text(
        "import json, os\n"
        "def pytest_collection_finish(session):\n"
        "    names = {'timing', 'recipe', 'browser', 'real_engine'}\n"
        "    found = {i.nodeid: sorted({m.name for m in i.iter_markers()} & names) for i in session.items}\n"
        "    open(os.environ['MARKERS_OUT'], 'w').write(json.dumps(found))\n")
    env = {k: v for k, v in os.environ.items() if k != "TOKENSWARM_CI_REQUIRE_TIERS" and not k.startswith("PYTEST_XDIST")}
    env.update(MARKERS_OUT=str(out), PYTHONPATH=os.pathsep.join([str(plugin), str(ROOT)]))
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "markers_out",
                          "--collect-only", str(ROOT / "tests")], capture_output=True, text=True, cwd=ROOT, env=env,
                         timeout=300)
    assert res.returncode == 0 and out.is_file(), res.stdout[-2000:] + res.stderr[-2000:]
    return {node: set(marks) for node, marks in json.loads(out.read_text()).items()}


def test_no_timing_test_needs_a_browser(stage_markers):
    # CI's timing stage requires only the real-engine tier (.ci/run): a browser test there would
    # skip on a machine without Chromium and nobody would know.
    assert len(stage_markers) > 1000
    assert not [n for n, m in stage_markers.items() if {"timing", "browser"} <= m]


def test_the_timing_stage_requires_the_real_engine_tier_whenever_the_suite_does():
    script = (ROOT / ".ci" / "run").read_text()
    stage = script[script.index("# -- timing:"):]
    assert 'TOKENSWARM_CI_REQUIRE_TIERS="$timing_tiers" pytest -p no:xdist -m timing' in stage

    def timing_tiers(required: str) -> str:
        run = subprocess.run(["bash", "-c", stage.split("status=0", 1)[0] + 'printf "[%s]" "$timing_tiers"'],
                             capture_output=True, text=True, timeout=30,
                             env={"PATH": os.environ["PATH"], "TOKENSWARM_CI_REQUIRE_TIERS": required})
        return run.stdout.rsplit("\n", 1)[-1]

    assert timing_tiers("browser,real_engine") == "[real_engine]"
    assert timing_tiers("browser") == "[]"


def test_a_test_unmarked_but_in_a_folder_named_after_the_tier_does_not_count_for_it(tmp_path):
    # pytest's keywords include folder names: tests/real_engine/ must not stand in for the marker
    (tmp_path / "browser").mkdir()
    (tmp_path / "browser" / "test_in_folder.py").write_text("def test_plain():\n    pass\n")
    for workers in ((), ("-n", "2")):
        res = run_pytest(tmp_path, TIER_TESTS, "browser", "-m", "not browser", *workers)
        assert res.returncode == 1 and "no test of theirs ran" in res.stdout, res.stdout


def test_ci_runs_the_readme_test_command_as_written():
    # the Quick start's second line is what CI runs: a user who types it runs what CI ran
    readme = (ROOT / "README.md").read_text()
    block = readme.split("## Quick start", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    command = [ln for ln in block.splitlines() if ln.strip()][1].strip()
    assert command.startswith("pip install -e '.[test]' && pytest "), command
    assert f"{command} || status=$?" in (ROOT / ".ci" / "run").read_text(), command


def test_the_recipe_stage_runs_every_recipe_after_the_readme_command_and_requires_no_tier(stage_markers):
    # The README's command leaves the long documented recipes out; CI runs them in a session of
    # their own once the other stages have passed, with no tier required (none of them is a
    # tier's test, so a required tier would fail the session for running none).
    script = (ROOT / ".ci" / "run").read_text()
    readme_line = script.index('pytest -n 4 --dist loadfile --no-loadscope-reorder -m "not timing and not recipe"')
    recipe_stage = script.index('TOKENSWARM_CI_REQUIRE_TIERS="" pytest -p no:xdist -m recipe || status=$?')
    assert readme_line < script.index("pytest -p no:xdist -m timing") < recipe_stage
    # ...and the recipe tests are one file, so that one xdist worker starts them together; none
    # is also a timing test or a tier's (the recipe stage requires no tier)
    from tests.study.documented import recipes
    ids = [n for n, m in stage_markers.items() if "recipe" in m]
    assert len(ids) == len(recipes()) and all(i.startswith("tests/study/test_recipes.py::") for i in ids), ids
    assert all(stage_markers[i] == {"recipe"} for i in ids), {i: stage_markers[i] for i in ids}
