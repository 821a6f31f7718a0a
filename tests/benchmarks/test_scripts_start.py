"""Every benchmark script starts: its imports resolve and ``--help`` prints its usage.

The benchmarks are not run by the suite (they take minutes and want a quiet machine), so a
script whose imports broke -- a helper moved to another module, a renamed function -- would
otherwise stay broken until someone next ran it by hand.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.runs import ROOT

SCRIPTS = sorted(p for p in (ROOT / "benchmarks").glob("*.py") if 'if __name__ == "__main__":' in p.read_text())


def test_the_benchmark_scripts_are_found() -> None:
    names = {p.name for p in SCRIPTS}
    assert {"request_cost.py", "request_syscalls.py", "peers.py", "accuracy.py"} <= names, names


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_a_benchmark_script_prints_its_usage(script: Path) -> None:
    proc = subprocess.run([sys.executable, str(script), "--help"], cwd=ROOT, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, f"{script.name} --help exited {proc.returncode}:\n{proc.stderr[-3000:]}"
    assert proc.stdout.startswith("usage: "), f"{script.name} --help printed no usage:\n{proc.stdout[:500]}"
