"""Lazy report generation for the web UI's "report" link (``RUN_DIR/report/report.html``).

The analysis runs as a subprocess (``python -m tokenswarm report RUN_DIR --out RUN_DIR/report``)
so it never blocks the web server's gevent loop or the load generator, and at most one runs
at a time per run directory. A report older than the run's manifest is rebuilt.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import gevent

#: Builds the command for (run_dir, out_dir); injectable for tests.
CommandFactory = Callable[[Path, Path], list[str]]


def default_command(run_dir: Path, out_dir: Path) -> list[str]:
    return [sys.executable, "-m", "tokenswarm", "report", str(run_dir), "--out", str(out_dir), "--quiet"]


class ReportBuilder:
    """State per run directory: ``none`` -> ``generating`` -> ``ready`` | ``failed``."""

    def __init__(self, command: CommandFactory = default_command, timeout_s: float = 600.0) -> None:
        self.command = command
        self.timeout_s = timeout_s
        self._jobs: dict[Path, gevent.Greenlet] = {}
        self.errors: dict[Path, str] = {}

    @staticmethod
    def out_dir(run_dir: Path) -> Path:
        return run_dir / "report"

    def state(self, run_dir: Path) -> str:
        """``generating``, ``ready``, ``failed`` or ``none`` (not generated, or stale)."""
        job = self._jobs.get(run_dir)
        if job is not None and not job.dead:
            return "generating"
        if run_dir in self.errors:
            return "failed"
        html = self.out_dir(run_dir) / "report.html"
        manifest = run_dir / "manifest.json"
        if html.exists() and (not manifest.exists() or html.stat().st_mtime >= manifest.stat().st_mtime):
            return "ready"
        return "none"

    def ensure(self, run_dir: Path, retry: bool = False) -> str:
        """Start generating unless ready, running or failed (``retry`` tries a failed one again)."""
        st = self.state(run_dir)
        if st in ("ready", "generating") or (st == "failed" and not retry):
            return st
        self.errors.pop(run_dir, None)
        self._jobs[run_dir] = gevent.spawn(self._generate, run_dir)
        return "generating"

    def wait(self, run_dir: Path, timeout_s: float | None = None) -> str:
        """Block (cooperatively) until the current job ends; returns the state."""
        job = self._jobs.get(run_dir)
        if job is not None:
            job.join(timeout=timeout_s)
        return self.state(run_dir)

    def _generate(self, run_dir: Path) -> None:
        out = self.out_dir(run_dir)
        try:
            # Locust monkey-patches subprocess with gevent's, so waiting here yields to the server.
            proc = subprocess.run(self.command(run_dir, out), capture_output=True, text=True,
                                  timeout=self.timeout_s, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            self.errors[run_dir] = f"{type(exc).__name__}: {exc}"
            return
        if proc.returncode != 0 or not (out / "report.html").exists():
            tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-15:]
            self.errors[run_dir] = f"report generation exited with status {proc.returncode}:\n" + "\n".join(tail)
