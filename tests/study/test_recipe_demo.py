"""The README's demo, run as written (tests/study/documented.py)."""

import json

import pytest

from tests.study.documented import judged_everywhere

pytestmark = pytest.mark.slow


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
