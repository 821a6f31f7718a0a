"""Start and stop a real vLLM OpenAI-compatible server on a local model, for integration tests.

    from tokenswarm.testmodel.server import start_vllm, vllm_available
    with start_vllm(model_dir, speculative=True) as server:
        ...  # requests to server.base_url + "/v1/chat/completions"

The server runs as ``python -m vllm.entrypoints.openai.api_server`` (the ``vllm`` console
script was seen failing to find its own package) in a new session, so the whole process group
(API server + engine core) can be stopped at once. It runs at the lowest CPU priority
(:data:`BACKGROUND_NICE`, see :func:`launch_server`): vLLM CPU's busy threads otherwise keep
every other process on a 2-core machine waiting for a core for up to seconds.
``TOKENSWARM_VLLM_PYTHON`` may name the interpreter of another virtualenv that has vLLM.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from tokenswarm.wire.ports import free_port

#: n-gram (prompt lookup) speculation, as used for the smoke tests.
NGRAM_SPECULATIVE_CONFIG = {
    "method": "ngram",
    "num_speculative_tokens": 3,
    "prompt_lookup_max": 3,
    "prompt_lookup_min": 2,
}
DEFAULT_SERVED_MODEL_NAME = "tokenswarm-testmodel"
#: Environment for the server: no usage reporting, no hub access, a small KV cache (the test
#: model needs a few MB; vLLM CPU's default reserves several GiB).
SERVER_ENV_DEFAULTS = {
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "VLLM_CPU_KVCACHE_SPACE": "1",
}
PYTHON_ENV_VAR = "TOKENSWARM_VLLM_PYTHON"
#: The nice value an engine started here runs at (the lowest priority), for its own threads and
#: children and, where the kernel groups a session's processes (autogroup), for its group.
BACKGROUND_NICE = 19


class VllmStartError(RuntimeError):
    """The server (vLLM or another engine started here) exited or did not become healthy in
    time; the message ends with its log."""


def default_python() -> str:
    """Interpreter to run vLLM with: ``$TOKENSWARM_VLLM_PYTHON`` or the current one."""
    return os.environ.get(PYTHON_ENV_VAR) or sys.executable


def vllm_available(python: str | None = None) -> bool:
    """True if ``vllm`` is importable by ``python`` (default: :func:`default_python`).

    Uses ``importlib.util.find_spec`` so torch is not imported; for another interpreter it asks
    that interpreter the same question in a subprocess.
    """
    python = python or default_python()
    # Compare unresolved paths: venv interpreters are symlinks to one base Python, and the
    # venv (its site-packages) is chosen by the link's own path.
    if os.path.abspath(python) == os.path.abspath(sys.executable):
        return importlib.util.find_spec("vllm") is not None
    try:
        probe = subprocess.run(
            [python, "-c", "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"],
            capture_output=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return probe.returncode == 0


def vllm_command(
    model_dir: str | Path,
    *,
    port: int,
    speculative: bool,
    python: str,
    max_model_len: int = 2048,
    served_model_name: str = DEFAULT_SERVED_MODEL_NAME,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line that serves ``model_dir`` on 127.0.0.1:``port``."""
    cmd = [
        python, "-m", "vllm.entrypoints.openai.api_server",
        "--model", str(model_dir),
        "--served-model-name", served_model_name,
        "--host", "127.0.0.1",
        "--port", str(port),
        "--max-model-len", str(max_model_len),
        "--enforce-eager",  # no graph capture/compilation: start-up under a minute on 2 cores
    ]
    if speculative:
        cmd += ["--speculative-config", json.dumps(NGRAM_SPECULATIVE_CONFIG)]
    return cmd + list(extra_args)


@dataclass
class EngineServer:
    """A running engine server (vLLM, llama.cpp); use as a context manager or call :meth:`stop`."""

    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    command: list[str]
    speculative: bool
    served_model_name: str
    _log_file: IO[bytes] | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log_text(self, tail_chars: int | None = None) -> str:
        """The server's combined stdout/stderr so far (the last ``tail_chars`` if given)."""
        try:
            text = self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""
        return text[-tail_chars:] if tail_chars else text

    def stop(self, timeout_s: float = 30.0) -> int | None:
        """SIGTERM the process group, then SIGKILL it after ``timeout_s``; return the exit code."""
        if self.process.poll() is None:
            _signal_group(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _signal_group(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=10)
        # Engine-core children share the group; make sure none outlives the API server.
        _signal_group(self.process.pid, signal.SIGKILL)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None
        return self.process.returncode

    def __enter__(self) -> EngineServer:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


def start_vllm(
    model_dir: str | Path,
    *,
    speculative: bool,
    port: int | None = None,
    extra_args: Sequence[str] = (),
    python: str | None = None,
    timeout_s: float = 300.0,
    max_model_len: int = 2048,
    served_model_name: str = DEFAULT_SERVED_MODEL_NAME,
    log_path: str | Path | None = None,
    env: dict[str, str] | None = None,
) -> EngineServer:
    """Start vLLM on ``model_dir`` and return once ``/health`` answers 200.

    Raises :class:`VllmStartError` (with the log's tail) if the process exits or is not healthy
    within ``timeout_s``; the process group is stopped in both cases. ``env`` adds to (and
    overrides) the inherited environment, e.g. ``{"LD_PRELOAD": ...}``. The log file (a new
    temporary file unless ``log_path`` is given) is kept after stopping, for post-mortems.
    """
    if not (Path(model_dir) / "config.json").exists():
        raise FileNotFoundError(
            f"{model_dir}/config.json not found: build it with 'tokenswarm make-test-model'"
        )
    python = python or default_python()
    port = port or free_port()
    cmd = vllm_command(
        model_dir, port=port, speculative=speculative, python=python,
        max_model_len=max_model_len, served_model_name=served_model_name, extra_args=extra_args,
    )
    return launch_server(cmd, port=port, speculative=speculative, served_model_name=served_model_name,
                         log_path=log_path, env={**SERVER_ENV_DEFAULTS, **os.environ, **(env or {})},
                         timeout_s=timeout_s, engine="vLLM")


def launch_server(
    cmd: list[str],
    *,
    port: int,
    speculative: bool,
    served_model_name: str,
    log_path: str | Path | None,
    env: dict[str, str],
    timeout_s: float,
    engine: str,
    nice: int | None = BACKGROUND_NICE,
) -> EngineServer:
    """Run ``cmd`` in a new session (its log in ``log_path`` or a new temporary file) and return
    once ``/health`` on ``port`` answers 200; on failure stop it and raise :class:`VllmStartError`
    with the log's tail.

    ``nice`` (None: inherit) is the server's CPU priority. Measured on the 2-core test machine
    (2026-12-04, a 10 ms sleep in another process while vLLM CPU served 4 streams): at equal
    priority the sleeper waited on the run queue p99 700 ms, at most 2.6 s (a Locust worker
    missed its heartbeats and was dropped); with the server's threads niced alone still up to
    3.6 s, because a new session is its own scheduling group (autogroup) that competes as one;
    with the group niced too, p99 0.3 ms. So both are set: the process is started under
    ``nice`` (its threads and children inherit it) and its session's autogroup gets the same
    value. The test's own client keeps its priority and is served first.
    """
    if log_path is None:
        fd, name = tempfile.mkstemp(prefix=f"{engine.lower().replace('.', '')}-{port}-", suffix=".log")
        os.close(fd)
        log_path = name
    log_path = Path(log_path)
    log_file = open(log_path, "wb")
    process = subprocess.Popen(
        niced(cmd, nice), stdout=log_file, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
        start_new_session=True,
    )
    if nice is not None:
        set_autogroup_nice(process.pid, nice)
    server = EngineServer(
        process=process, port=port, log_path=log_path, command=cmd, speculative=speculative,
        served_model_name=served_model_name, _log_file=log_file,
    )
    try:
        wait_until_healthy(server.base_url + "/health", process.poll, timeout_s=timeout_s, engine=engine)
    except VllmStartError as exc:
        server.stop(timeout_s=10)
        raise VllmStartError(f"{exc}\ncommand: {' '.join(cmd)}\n--- log tail ({log_path}) ---\n"
                             f"{server.log_text(6000)}") from None
    except BaseException:
        server.stop(timeout_s=10)
        raise
    return server


def wait_until_healthy(
    url: str,
    poll_exit: Callable[[], int | None],
    *,
    timeout_s: float,
    interval_s: float = 0.5,
    get_status: Callable[[str], int | None] | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
    engine: str = "vLLM",
) -> float:
    """Poll ``url`` until it answers 200; return the seconds waited.

    Raises :class:`VllmStartError` when ``poll_exit()`` reports the process ended or
    ``timeout_s`` passes. ``get_status``/``clock``/``sleep`` are injectable for tests.
    """
    get_status = get_status or _http_status
    start = clock()
    while True:
        code = poll_exit()
        if code is not None:
            raise VllmStartError(f"{engine} exited with status {code} before {url} answered")
        if get_status(url) == 200:
            return clock() - start
        if clock() - start >= timeout_s:
            raise VllmStartError(f"{engine} not healthy at {url} after {timeout_s:.0f} s")
        sleep(interval_s)


def niced(cmd: list[str], nice: int | None) -> list[str]:
    """``cmd`` run under ``nice -n NICE`` (coreutils), so the priority is set before the program
    starts any thread; unchanged when ``nice`` is None or there is no ``nice`` program."""
    program = shutil.which("nice") if nice is not None else None
    return [program, "-n", str(nice), *cmd] if program else list(cmd)


def set_autogroup_nice(pid: int, nice: int) -> bool:
    """Give the scheduling group of ``pid``'s session (Linux autogroup) the nice value ``nice``;
    False where the kernel has no autogroups (the process's own nice value then rules alone)."""
    try:
        with open(f"/proc/{pid}/autogroup", "w") as f:
            f.write(str(nice))
    except OSError:
        return False
    return True


def _http_status(url: str) -> int | None:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)
    except (OSError, ValueError):
        return None


def _signal_group(pid: int, sig: int) -> None:
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass
