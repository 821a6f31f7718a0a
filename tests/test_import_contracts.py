"""The rooms import one way: the import contracts in pyproject.toml hold, and they can fail."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _lint_imports(*args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent)) or "lint-imports"
    # this checkout's packages, whatever else an installed tokenswarm points at
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    return subprocess.run(
        [exe, "--no-cache", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )


def test_every_import_contract_in_pyproject_is_kept():
    done = _lint_imports()
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout


def test_a_contract_the_code_breaks_is_reported_as_broken(tmp_path):
    # The same rooms upside down: record at the top, entry points at the bottom. If the checker
    # did not see the real imports, this would pass too.
    config = tmp_path / "upside-down.ini"
    config.write_text(
        "[importlinter]\nroot_packages =\n    tokenswarm\n    analysis\n\n"
        "[importlinter:contract:upside-down]\nname = upside down\ntype = layers\n"
        "layers =\n    tokenswarm.record\n    tokenswarm.load\n    tokenswarm.orchestrate\n"
    )
    done = _lint_imports("--config", str(config))
    assert done.returncode == 1, done.stdout[-2000:]
    assert "tokenswarm.load" in done.stdout and "BROKEN" in done.stdout
