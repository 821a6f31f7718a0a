"""``.ci/mapped.py``: mypy sees the top-level analysis/ folder as ``tokenswarm.analysis``, read
from pyproject's package-dir mapping (import-linter's side: tests/test_import_contracts.py)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mapped", ROOT / ".ci" / "mapped.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_file_under_a_mapped_folder_is_named_by_its_import_name():
    mapped = _script()
    mapping = mapped.package_dirs()
    assert mapping == {"tokenswarm.analysis": ROOT / "analysis"}  # scenarios/ is mapped too, but holds no code
    assert mapped.module_name(ROOT / "analysis" / "loader" / "records.py", mapping) == "tokenswarm.analysis.loader.records"
    assert mapped.module_name(ROOT / "analysis" / "__init__.py", mapping) == "tokenswarm.analysis"
    assert mapped.module_name(ROOT / "tokenswarm" / "record.py", mapping) is None


def _mypy(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run([sys.executable, *args, "--cache-dir", str(tmp_path / "cache"), "analysis/errors.py",
                           str(tmp_path / "user.py")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_mypy_types_an_import_of_the_analysis_from_its_real_file(tmp_path):
    # A wrong use of tokenswarm.analysis.errors is caught only if mypy resolved the name to
    # analysis/errors.py: an unresolved module would be an import error instead.
    (tmp_path / "user.py").write_text('from tokenswarm.analysis.errors import AnalysisError\n\n'
                                      'wrong: int = AnalysisError("x")\n')
    done = _mypy([str(ROOT / ".ci" / "mapped.py"), "mypy"], tmp_path)
    assert done.returncode == 1, done.stdout[-3000:] + done.stderr[-2000:]
    assert 'user.py:3: error: Incompatible types in assignment (expression has type "AnalysisError"' in done.stdout
    assert "Found 1 error in 1 file (checked 2 source files)" in done.stdout, done.stdout[-3000:]


def test_plain_mypy_fails_on_the_analysis_instead_of_typing_it_as_any(tmp_path):
    # pyproject's override makes a missing tokenswarm.analysis an error, so running mypy
    # without the mapping cannot pass quietly.
    (tmp_path / "user.py").write_text('from tokenswarm.analysis.errors import AnalysisError\n\n'
                                      'fine: Exception = AnalysisError("x")\n')
    done = _mypy(["-m", "mypy"], tmp_path)
    assert done.returncode == 1, done.stdout[-3000:]
    assert 'user.py:1: error:' in done.stdout and '"tokenswarm.analysis.errors"' in done.stdout, done.stdout[-3000:]
    mapped = _mypy([str(ROOT / ".ci" / "mapped.py"), "mypy"], tmp_path)
    assert mapped.returncode == 0, mapped.stdout[-3000:]
