"""Start helper servers as separate processes (own session, so a busy client cannot starve them)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise TimeoutError(f"nothing listening on 127.0.0.1:{port} after {timeout_s}s")


@contextlib.contextmanager
def scripted_server(lifetime_s: float = 120.0):
    """The misbehaving SSE server of ``scripted_server.py``; yields its base URL."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / "scripted_server.py"), str(port), str(lifetime_s)],
        start_new_session=True, stdout=subprocess.DEVNULL,
    )
    try:
        wait_port(port)
        yield f"http://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)
