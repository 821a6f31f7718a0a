"""Start a simulator in a separate process for tests (used by every test suite of the project).

Example::

    from tokenswarm.sim.testing import start_sim

    with start_sim("--profile", "tiny-fast", truth=True) as sim:
        requests.post(sim.base_url + "/v1/completions", json={...})
        sim.stop()
        records = sim.read_truth()
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from typing import Any, Iterator

from prometheus_client.parser import text_string_to_metric_families

from tokenswarm.sim.truth import read_truth
from tokenswarm.wire.ports import free_port


@dataclass
class SimHandle:
    """A running simulator process."""

    base_url: str
    port: int
    proc: subprocess.Popen[bytes]
    truth_path: str | None = None
    log_path: str | None = None
    _tmpdir: str | None = field(default=None, repr=False)

    def _request(self, method: str, path: str, timeout_s: float = 5.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            conn.request(method, path, body=b"" if method == "POST" else None)
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def flush_truth(self) -> None:
        """Ask a running server to write its buffered truth records now."""
        if self.proc.poll() is None:
            self._request("POST", "/_tokenswarm/flush")

    def read_truth(self) -> list[dict[str, Any]]:
        """Truth records written so far (flushes a running server first)."""
        if self.truth_path is None:
            raise RuntimeError("start_sim(..., truth=True) is needed to read the truth log")
        with contextlib.suppress(OSError):
            self.flush_truth()
        return read_truth(self.truth_path)

    def metrics_text(self, timeout_s: float = 5.0) -> str:
        """The current ``/metrics`` exposition."""
        status, body = self._request("GET", "/metrics", timeout_s)
        if status != 200:
            raise RuntimeError(f"/metrics answered {status}")
        return body.decode()

    def metrics(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        """Parsed ``/metrics``: (sample name, sorted label items) -> value."""
        out = {}
        for fam in text_string_to_metric_families(self.metrics_text()):
            for s in fam.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    def stats(self, reset: bool = False) -> dict[str, Any]:
        """Simulator self-measurements (emission lag percentiles etc.)."""
        status, body = self._request("GET", "/_tokenswarm/stats" + ("?reset=1" if reset else ""))
        stats: dict[str, Any] = json.loads(body)
        return stats

    def log(self) -> str:
        """What the server printed (stdout+stderr)."""
        if not self.log_path or not os.path.exists(self.log_path):
            return ""
        with open(self.log_path, encoding="utf-8", errors="replace") as f:
            return f.read()

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM, wait, SIGKILL on timeout. The truth log is complete afterwards."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(5)
        return self.proc.returncode


@contextlib.contextmanager
def start_sim(*cli_args: str, truth: bool = False, env: dict[str, Any] | None = None, timeout_s: float = 20.0,
              cpus: str | None = None) -> Iterator[SimHandle]:
    """Run ``python -m tokenswarm sim --port P *cli_args`` until the block exits.

    The process gets its own session (so it is not starved beside a busy client and a
    Ctrl-C in the test runner does not hit it). Waits until ``/health`` answers 200;
    raises ``RuntimeError`` with the server's output if it exits or times out first.
    ``cpus`` (e.g. ``"1"``) pins it with ``taskset`` where that exists (benchmarks).
    """
    tmpdir = tempfile.mkdtemp(prefix="tokenswarm-sim-")
    port = free_port()
    truth_path = os.path.join(tmpdir, "truth.jsonl") if truth else None
    log_path = os.path.join(tmpdir, "sim.log")
    cmd = [sys.executable, "-m", "tokenswarm", "sim", "--port", str(port), *cli_args]
    if truth_path:
        cmd += ["--truth", truth_path]
    if cpus is not None and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpus, *cmd]
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    log = open(log_path, "wb")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=full_env, start_new_session=True)
    log.close()
    handle = SimHandle(f"http://127.0.0.1:{port}", port, proc, truth_path, log_path, tmpdir)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"simulator exited with {proc.returncode}: {' '.join(cmd)}\n{handle.log()}")
            try:
                if handle._request("GET", "/health", timeout_s=1.0)[0] == 200:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"simulator did not become healthy in {timeout_s}s: {' '.join(cmd)}\n{handle.log()}")
            time.sleep(0.05)
        yield handle
    finally:
        handle.stop()
