"""Run real Locust (a subprocess, as a user would) against a target and read the run directory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

from tokenswarm.sim.testing import start_sim

ROOT = Path(__file__).resolve().parents[2]


def scenario_file(tmp_path: Path, base: str = "mix", **sections: Any) -> Path:
    """A scenario YAML in ``tmp_path``: the shipped ``base`` with top-level sections replaced/merged."""
    data = yaml.safe_load((ROOT / "scenarios" / f"{base}.yaml").read_text())
    data["slo"] = {}
    if "load" in sections:  # a test's own load plan is fixed unless it says ``until`` itself
        data["load"].pop("until", None)
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict) and key != "traffic":
            data[key] = {**data[key], **value}
        else:
            data[key] = value
    path = tmp_path / f"{data.get('name', 'test')}.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def run_locust(scenario: Path, host: str, out: Path, *extra: str, timeout_s: float = 180,
               env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "locust", "-f", str(ROOT / "locustfiles" / "llm.py"), "--headless",
           "--scenario", str(scenario), "--host", host, "--out", str(out), "--only-summary", *extra]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s, cwd=ROOT,
                          env={**os.environ, **(env or {})})


def run_on_sim(scenario: Path, out: Path, *extra: str, profile: str = "tiny-fast",
               truth: bool = False) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Run Locust against a fresh simulator of ``profile``; the run must exit 0.

    Returns the run's records and the simulator's ground-truth log (empty unless ``truth``).
    """
    with start_sim("--profile", profile, truth=truth) as sim:
        res = run_locust(scenario, sim.base_url, out, *extra)
        truth_log = sim.read_truth() if truth else []
    assert res.returncode == 0, res.stderr[-3000:]
    return read_records(out), truth_log


def read_records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "records.jsonl").read_text().splitlines() if line]


def read_manifest(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "manifest.json").read_text())


def start_master_and_workers(scenario: Path, host: str, out: Path, workers: int = 2, *extra: str,
                             master_port: int | None = None):
    """A headless master plus ``workers`` worker processes on 127.0.0.1 (each its own session).

    The master's output is piped (:func:`finish_master_and_workers` returns it); each worker's
    goes to a file beside ``out`` (``<out>.worker-N.log``, the process's ``log_path``), so a
    worker's last words -- a traceback, a missed heartbeat -- are there for :func:`describe_run`
    when a test fails, and a chatty worker can never fill a pipe nobody reads.
    """
    from tests.helpers.procs import free_port

    port = master_port or free_port()
    locustfile = str(ROOT / "locustfiles" / "llm.py")
    master = subprocess.Popen(
        [sys.executable, "-m", "locust", "-f", locustfile, "--master", "--headless", "--expect-workers",
         str(workers), "--master-bind-host", "127.0.0.1", "--master-bind-port", str(port), "--scenario",
         str(scenario), "--host", host, "--out", str(out), "--only-summary", *extra],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT, start_new_session=True)
    procs = []
    for i in range(workers):
        log_path = out.parent / f"{out.name}.worker-{i}.log"
        with open(log_path, "wb") as log:  # the child keeps its own copy of the descriptor
            proc = subprocess.Popen(
                [sys.executable, "-m", "locust", "-f", locustfile, "--worker", "--master-host", "127.0.0.1",
                 "--master-port", str(port)],
                stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, start_new_session=True)
        proc.log_path = log_path  # type: ignore[attr-defined]
        procs.append(proc)
    return master, procs


def describe_run(master_out: str | None, workers: list[subprocess.Popen], tail_chars: int = 3000) -> str:
    """The end of the master's output and of each worker's log: what a failed test prints."""
    parts = [f"--- master (last {tail_chars} chars) ---", (master_out or "")[-tail_chars:]]
    for i, w in enumerate(workers):
        path = getattr(w, "log_path", None)
        text = path.read_text(errors="replace") if path is not None and path.exists() else "(no log)"
        parts += [f"--- worker {i} (pid {w.pid}, exit {w.returncode}, last {tail_chars // 2} chars) ---",
                  text[-(tail_chars // 2):]]
    return "\n".join(parts)


def finish_master_and_workers(master: subprocess.Popen, workers: list[subprocess.Popen],
                              timeout_s: float = 120) -> tuple[int, str]:
    """Wait for the master's run to end, then for its workers (killed after 20 s): its exit
    status and output."""
    try:
        out, _ = master.communicate(timeout=timeout_s)
    finally:
        for w in workers:
            try:
                w.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(w.pid, signal.SIGKILL)
    return master.returncode, out
