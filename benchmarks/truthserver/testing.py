"""Start the truth server in its own process (and process session) for tests and benchmarks.

Example::

    with start_truth(truth_path, "--step-ms", "5", "--tokens-per-chunk", "3") as srv:
        ...  # srv.base_url
        srv.stats()
    records = read_truth(truth_path)  # complete once the block has exited
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Iterator

ROOT = Path(__file__).resolve().parents[2]
WARMUP_BODY = {"prompt": "warm up", "max_tokens": 1, "stream": True, "ignore_eos": True}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class TruthHandle:
    """A running truth server."""

    base_url: str
    port: int
    proc: subprocess.Popen
    log: IO[bytes]

    def request(self, method: str, path: str, body: dict[str, Any] | None = None,
                timeout_s: float = 10.0) -> tuple[int, bytes]:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=timeout_s)
        try:
            conn.request(method, path, body=b"" if body is None else json.dumps(body).encode(),
                         headers={"content-type": "application/json"})
            resp = conn.getresponse()
            return resp.status, resp.read()
        finally:
            conn.close()

    def stats(self, reset: bool = False) -> dict[str, Any]:
        """The server's self-measurements: emission lag and loop lag (ms)."""
        return json.loads(self.request("GET", "/_truth/stats" + ("?reset=1" if reset else ""))[1])

    def flush(self) -> None:
        self.request("POST", "/_truth/flush")

    def output(self) -> str:
        """What the server printed so far."""
        self.log.flush()
        return Path(self.log.name).read_text(errors="replace")

    def stop(self, timeout_s: float = 10.0) -> int | None:
        """SIGTERM (uvicorn shuts down and flushes the truth log), SIGKILL on timeout."""
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
def start_truth(truth_path: str | Path | None, *cli_args: str, cpus: str | None = None, warm_up: bool = True,
                timeout_s: float = 20.0) -> Iterator[TruthHandle]:
    """Run ``python -m benchmarks.truthserver`` on a free port until the block exits.

    ``cpus`` pins it with ``taskset`` when available; ``warm_up`` sends one request first so the
    server's one-time costs (first imports on the request path) fall outside what is measured.
    """
    port = free_port()
    cmd = [sys.executable, "-m", "benchmarks.truthserver", "--port", str(port), *cli_args]
    if truth_path is not None:
        cmd += ["--truth", str(truth_path)]
    if cpus and shutil.which("taskset"):
        cmd = ["taskset", "-c", cpus, *cmd]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    log = open(os.path.join(tempfile.gettempdir(), f"truthserver-{port}-{os.getpid()}.log"), "w+b")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    handle = TruthHandle(f"http://127.0.0.1:{port}", port, proc, log)
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"truth server exited with {proc.returncode}: {handle.output()[-2000:]}")
            with contextlib.suppress(OSError):
                if handle.request("GET", "/health", timeout_s=1.0)[0] == 200:
                    break
            if time.monotonic() > deadline:
                raise RuntimeError(f"truth server not ready after {timeout_s} s: {handle.output()[-2000:]}")
            time.sleep(0.05)
        if warm_up:
            handle.request("POST", "/v1/completions", WARMUP_BODY)
        yield handle
    finally:
        handle.stop()
        log.close()
        with contextlib.suppress(OSError):
            os.unlink(log.name)
