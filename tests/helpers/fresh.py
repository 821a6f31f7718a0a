"""Python code run in a fresh interpreter: for what a process imports or sets up at its start."""

from __future__ import annotations

import subprocess
import sys

from tests.helpers.runs import ROOT


def fresh_python(code: str, timeout_s: float = 120) -> subprocess.CompletedProcess[str]:
    """Run ``code`` with this interpreter in a new process, from the project's root; its output as text."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=timeout_s)
