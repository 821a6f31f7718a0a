"""The analysis folder sits at the top level of the checkout, but is installed and imported as
``tokenswarm.analysis`` (the package-dir mapping of pyproject.toml): installing tokenswarm must not
create a generic top-level ``analysis`` module that collides with someone else's."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

from tests.helpers.fresh import fresh_python

ROOT = Path(__file__).resolve().parents[1]
SKIP = {".ci-venv", "build", "site", ".git", "runs"}


def python_sources() -> list[Path]:
    out = []
    for path in ROOT.rglob("*.py"):
        rel = path.relative_to(ROOT)
        if rel.parts[0] in SKIP or rel.parts[0].endswith(".egg-info"):
            continue
        out.append(path)
    return out


def test_no_source_imports_a_top_level_analysis_module():
    offenders = []
    for path in python_sources():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            offenders += [f"{path.relative_to(ROOT)}:{node.lineno}: {n}" for n in names
                          if n == "analysis" or n.startswith("analysis.")]
    assert not offenders, "import tokenswarm.analysis instead:\n" + "\n".join(offenders)


def test_the_installed_packages_are_all_inside_the_tokenswarm_namespace():
    # setup.py's list: tokenswarm* from tokenswarm/ and the mapped folders under their import
    # names (tests/test_packaging.py checks the same of a built wheel).
    listed = subprocess.run([sys.executable, "-c", "import runpy, setuptools; setuptools.setup = lambda **kw: "
                             "print(*kw['packages']); runpy.run_path('setup.py')"],
                            capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert listed.returncode == 0, listed.stderr[-2000:]
    packages = set(listed.stdout.split())
    assert {"tokenswarm", "tokenswarm.wire", "tokenswarm.analysis", "tokenswarm.analysis.loader"} <= packages
    assert not [p for p in packages if not p.startswith("tokenswarm")]


def test_the_analysis_entry_point_and_notebook_api_work_under_the_new_name():
    res = subprocess.run([sys.executable, "-m", "tokenswarm.analysis", "--help"], capture_output=True, text=True,
                         cwd=ROOT, timeout=60)
    assert res.returncode == 0 and "report" in res.stdout, res.stderr[-2000:]
    from tokenswarm.analysis import analyse
    from tokenswarm.analysis.loader import load_run

    assert callable(analyse) and callable(load_run)


def test_the_analysis_package_imports_its_parts_on_first_use():
    # The generator's verdict imports the loader and the SLO tables, not compare or the reports;
    # the notebook API still finds every public name, and analysis.curves stays the function.
    code = ("import sys\n"
            "from tokenswarm import analysis\n"
            "assert 'tokenswarm.analysis.compare' not in sys.modules\n"
            "import tokenswarm.analysis.summary\n"
            "assert callable(analysis.curves) and callable(analysis.soak) and analysis.slo.__name__.endswith('.slo')\n"
            "from tokenswarm.analysis import compare_runs, load_run, AnalysisError\n"
            "missing = [n for n in analysis.__all__ if getattr(analysis, n, None) is None]\n"
            "assert not missing, missing\n")
    out = fresh_python(code)
    assert out.returncode == 0, out.stderr[-2000:]
