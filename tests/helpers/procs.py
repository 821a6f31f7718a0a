"""Start helper servers as separate processes (own session, so a busy client cannot starve them)."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

from tests.helpers.waiting import wait_until
from tokenswarm.wire.ports import free_port as free_port  # the tests import it from here

HERE = Path(__file__).parent


def default_sigint() -> None:
    """``preexec_fn`` for a child that a test interrupts with SIGINT: Ctrl-C's default action.

    A shell without job control starts its background commands with SIGINT ignored, and a Python
    started with SIGINT ignored keeps ignoring it (no KeyboardInterrupt): a suite launched as
    ``bash .ci/run &`` would otherwise see the child finish instead of being interrupted.
    """
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def port_open(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


def wait_port(port: int, timeout_s: float = 10.0) -> None:
    """Wait (bounded) until something accepts connections on 127.0.0.1:``port``."""
    wait_until(lambda: port_open(port), timeout_s, f"a listener on 127.0.0.1:{port}")


@contextlib.contextmanager
def helper_server(script: str, lifetime_s: float = 120.0, env: dict[str, str] | None = None, scheme: str = "http"):
    """Run ``tests/helpers/<script> PORT LIFETIME_S`` in its own session; yields its base URL and
    stops its process group when the block exits."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, str(HERE / script), str(port), str(lifetime_s)],
        start_new_session=True, stdout=subprocess.DEVNULL, env={**os.environ, **(env or {})},
    )
    try:
        wait_port(port)
        yield f"{scheme}://127.0.0.1:{port}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(10)


def scripted_server(lifetime_s: float = 120.0, tls: tuple[str, str] | None = None):
    """The misbehaving SSE server of ``scripted_server.py``; yields its base URL.

    ``tls=(certfile, keyfile)`` serves HTTPS.
    """
    env = {"SCRIPTED_TLS_CERT": tls[0], "SCRIPTED_TLS_KEY": tls[1]} if tls else None
    return helper_server("scripted_server.py", lifetime_s, env=env, scheme="https" if tls else "http")


@contextlib.contextmanager
def fake_tokenize_servers():
    """Yields ``start(mode, key=None) -> base URL`` for fake /tokenize servers
    (``fake_tokenize.py``: one token per word, in the dialect ``mode``); all stop on exit."""
    with contextlib.ExitStack() as stack:
        def start(mode: str, key: str | None = None) -> str:
            env = {"FAKE_TOKENIZE_MODE": mode, **({"FAKE_TOKENIZE_KEY": key} if key else {})}
            return stack.enter_context(helper_server("fake_tokenize.py", 60, env=env))

        yield start
