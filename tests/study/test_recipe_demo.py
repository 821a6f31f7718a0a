"""The README's demo, run as written (tests/study/documented.py)."""

import json
import shlex
import subprocess

import pytest

from tests.study.documented import as_python, documented_lines, judged_everywhere

pytestmark = pytest.mark.slow


@pytest.mark.timeout(900)
def test_the_demo_as_the_readme_gives_it_judges_every_cell_including_code_at_concurrency_1(tmp_path):
    (line,) = [ln for ln in documented_lines("README.md", "pip install -e . &&")]
    argv = as_python(shlex.split(line.split("&&", 1)[1]))
    assert argv[3:] == ["demo"], argv
    res = subprocess.run(argv, capture_output=True, text=True, cwd=tmp_path, timeout=850)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    (out,) = (tmp_path / "studies").iterdir()
    judged_everywhere(res.stdout, out)
    cells = {(v["task"], v["load"]) for v in json.loads((out / "report" / "summary.json").read_text())["verdict"]}
    assert {("code", 1.0), ("all", 1.0), ("qa", 32.0), ("code", 32.0)} <= cells, cells
