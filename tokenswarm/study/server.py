"""An arm's server: started in its own process session, probed until ready, warmed up, stopped.

A command arm's shell command line gets ``{port}`` (a free port of 127.0.0.1 chosen here) and
``{host}`` (``http://127.0.0.1:{port}``) substituted, runs under ``/bin/sh`` in a new session
with stdout and stderr captured to a log file line by line through the one redaction function
(a server that logs its arguments or environment, as vLLM does, leaves no secret the study
knows in the log), is ready when ``GET /v1/models`` answers 200,
and is stopped with SIGTERM to its process group, then SIGKILL after a timeout. A host arm is
only probed. The clock and the sleep are injectable so the readiness loop is tested quickly.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from tokenswarm.redact import redact
from tokenswarm.study.spec import Arm, mask_command, mask_url
from tokenswarm.wire.ports import free_port

#: A server log line longer than this is written in pieces (tqdm-style lines without newlines).
LOG_LINE_BYTES = 65536


def _pump_log(src: Any, log_path: Path) -> None:
    """Copy a server's output into its log, every line redacted (and made inert), until EOF."""
    with open(log_path, "ab") as log:
        for raw in iter(lambda: src.readline(LOG_LINE_BYTES), b""):
            log.write(redact(raw.decode("utf-8", "replace")).encode("utf-8"))
            log.flush()  # the log tail is read while the server runs
    src.close()


class ServerNotReady(RuntimeError):
    """The arm's server exited or did not answer ``/v1/models`` in time (exit status 3)."""


def substitute(command: str, port: int) -> str:
    """``command`` with ``{host}`` and ``{port}`` filled in (other braces left alone)."""
    return command.replace("{host}", f"http://127.0.0.1:{port}").replace("{port}", str(port))


def _get_json(url: str, timeout_s: float, headers: dict[str, str]) -> Any:
    req = urllib.request.Request(url, headers=headers)
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read() or b"null")


@dataclass
class ArmServer:
    """A started (or user-run) server of one arm for one round."""

    arm: Arm
    base_url: str
    log_path: Path | None = None
    proc: subprocess.Popen[bytes] | None = None
    models: Any = None  #: the /v1/models answer (model ids, owner, max length ...)
    headers: dict[str, str] = field(default_factory=dict)
    pump: threading.Thread | None = None  #: copies the server's output into its log, redacted

    @classmethod
    def start(cls, arm: Arm, log_path: Path, headers: dict[str, str] | None = None) -> "ArmServer":
        """Start a command arm (or wrap a host arm) without waiting for it."""
        if arm.command is None:
            assert arm.host is not None
            return cls(arm, arm.host.rstrip("/").removesuffix("/v1"), None, None, headers=dict(headers or {}))
        port = free_port()
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(log_path, "ab") as log:
            log.write(f"$ {mask_command(substitute(arm.command, port))}\n".encode())
        proc = subprocess.Popen(substitute(arm.command, port), shell=True, stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
        pump = threading.Thread(target=_pump_log, args=(proc.stdout, log_path), daemon=True,
                                name=f"tokenswarm-study-log-{arm.name}")
        pump.start()
        return cls(arm, f"http://127.0.0.1:{port}", log_path, proc, headers=dict(headers or {}), pump=pump)

    def exit_status(self) -> int | None:
        """The server process's exit status, ``None`` while it runs (or for a host arm)."""
        return None if self.proc is None else self.proc.poll()

    def log_tail(self, lines: int = 15) -> str:
        """The last lines the server printed."""
        if self.log_path is None or not self.log_path.exists():
            return ""
        text = self.log_path.read_text(encoding="utf-8", errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def wait_ready(self, timeout_s: float, clock: Callable[[], float] = time.monotonic,
                   sleep: Callable[[float], None] = time.sleep,
                   probe: Callable[[str], Any] | None = None) -> Any:
        """Poll ``/v1/models`` until it answers; raise :class:`ServerNotReady` on exit or timeout."""
        probe = probe or (lambda url: _get_json(url, 2.0, self.headers))
        deadline = clock() + timeout_s
        last = "no answer"
        while True:
            status = self.exit_status()
            if status is not None:
                raise ServerNotReady(f"arm {self.arm.name}: the server command exited with status {status} before "
                                     f"it was ready (log {self.log_path}):\n{self.log_tail()}")
            try:
                self.models = probe(self.base_url + "/v1/models")
                return self.models
            except (OSError, ValueError) as e:  # refused, reset, HTTP error, not JSON yet
                last = str(getattr(e, "reason", e))
            if clock() >= deadline:
                where = f" (log {self.log_path})" if self.log_path else ""
                raise ServerNotReady(f"arm {self.arm.name}: {mask_url(self.base_url)}/v1/models did not answer "
                                     f"within {timeout_s:g} s ({last}){where}")
            sleep(0.2)

    def warm_up(self, api: str, model: str | None, count: int) -> list[str]:
        """Send ``count`` short requests whose answers are discarded; returns the problems seen."""
        problems: list[str] = []
        if count <= 0:
            return problems
        if model in (None, "auto"):
            data = (self.models or {}).get("data") if isinstance(self.models, dict) else None
            model = data[0].get("id") if data else None
        path = "/v1/chat/completions" if api == "chat" else "/v1/completions"
        body: dict[str, Any] = {"model": model, "max_tokens": 8, "stream": False}
        if api == "chat":
            body["messages"] = [{"role": "user", "content": "Say hello."}]
        else:
            body["prompt"] = "Say hello."
        for i in range(count):
            req = urllib.request.Request(self.base_url + path, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json", **self.headers})
            try:
                with urllib.request.urlopen(req, timeout=120) as resp:
                    resp.read()
            except (OSError, ValueError) as e:
                problems.append(f"warm-up request {i + 1}: {getattr(e, 'reason', e)}")
        return problems

    def stop(self, timeout_s: float) -> int | None:
        """SIGTERM to the server's process group, SIGKILL after ``timeout_s``; returns its status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(10)
        # children the shell left behind in the session go too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        if self.pump is not None:
            self.pump.join(10)  # the last lines reach the log (EOF once the session is gone)
        return self.proc.returncode
