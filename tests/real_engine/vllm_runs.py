"""Real Locust runs of tokenswarm against a real vLLM serving the tiny test model.

One function, :func:`serve_and_run`, starts one vLLM server (baseline or n-gram speculative),
warms it up, runs every scenario the tests need against it as separate ``locust`` processes
(exactly what a user runs), stops the server and returns where the run directories are. The
tests only read those directories, so at most one vLLM server runs at a time (the machine has
2 cores shared with others) and each server is started once per session.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.runs import run_locust, scenario_file
from tokenswarm.testmodel.server import (
    DEFAULT_SERVED_MODEL_NAME,
    NGRAM_SPECULATIVE_CONFIG,
    PYTHON_ENV_VAR,
    default_python,
    start_vllm,
    vllm_available,
)


def vllm_skip_reason() -> str | None:
    """Why the real-engine tests cannot run here (None when vllm is importable)."""
    python = default_python()
    if vllm_available(python):
        return None
    return (f"vllm is not importable by {python}: set {PYTHON_ENV_VAR} to the python of a venv with "
            "vLLM (bash .ci/install-vllm.sh prints one; see the README)")


#: Evaluated once per test session (a subprocess probe when $TOKENSWARM_VLLM_PYTHON is set).
SKIP_REASON = vllm_skip_reason()

#: The context the tests serve with; every scenario below keeps prompt + output inside it.
MAX_MODEL_LEN = 2048
#: K of the n-gram speculative server (tokens per step are at most K + 1 without coalescing).
SPEC_K = NGRAM_SPECULATIVE_CONFIG["num_speculative_tokens"]

TARGET = {
    "model": DEFAULT_SERVED_MODEL_NAME,
    "continuous_usage_stats": True,
    # Scrape every second: counter windows stay close to the load steps.
    "scrape_interval_s": 1,
    "timeouts": {"connect_s": 10, "first_token_s": 60, "total_s": 120},
}
GREEDY = {"temperature": 0.0}  # speculative checks need T=0 on the CPU build (the README)

#: One class of each kind, sized for --max-model-len 2048 and a few seconds per run.
CLASSES: dict[str, dict[str, Any]] = {
    "qa": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 120},
           "max_tokens": {"dist": "uniform", "min": 48, "max": 128}, "sampling": GREEDY},
    "summarization": {"weight": 1, "document_tokens": {"dist": "uniform", "min": 300, "max": 800},
                      "max_tokens": {"dist": "uniform", "min": 48, "max": 96}, "sampling": GREEDY},
    "code": {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 100, "max": 400},
             "max_tokens": {"dist": "uniform", "min": 48, "max": 128}, "sampling": GREEDY},
    "multi_turn": {"weight": 1, "turns": {"dist": "fixed", "value": 3},
                   "prompt_tokens": {"dist": "uniform", "min": 20, "max": 80},
                   "followup_tokens": {"dist": "uniform", "min": 8, "max": 30},
                   "max_tokens": {"dist": "uniform", "min": 32, "max": 64},
                   "think_time_s": {"dist": "fixed", "value": 0.05}, "sampling": GREEDY},
}

#: Long greedy answers for the baseline-vs-speculative comparison: the first ~10 tokens of a
#: request have no n-gram to match yet, so long outputs keep the chunk estimate of acceptance
#: close to the counters' figure.
COMPARE_QA = {"weight": 1, "prompt_tokens": {"dist": "uniform", "min": 20, "max": 80},
              "max_tokens": {"dist": "fixed", "value": 192}, "sampling": GREEDY}

#: Requests vLLM itself must refuse (plus one normal class so the run has successes). A prompt
#: over max_model_len is not among them: tokenswarm's preflight refuses such a scenario before
#: the first request (tests/security/test_auth_runs.py).
ERROR_CLASSES: dict[str, dict[str, Any]] = {
    "qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 24},
           "max_tokens": {"dist": "fixed", "value": 16}, "sampling": GREEDY},
    "abnormal": {"weight": 1, "cases": {"invalid_params": 1, "huge_max_tokens": 1},
                 "think_time_s": {"dist": "fixed", "value": 0.3}},
}


def _load(steps: list[int], duration_s: float, warmup_s: float = 1.0,
          until: dict[str, Any] | None = None) -> dict[str, Any]:
    # stop_timeout_s lets in-flight streams finish at the end, so the server generated exactly
    # what the records hold (the counter check needs that).
    return {"mode": "closed", "steps": steps, "warmup_s": warmup_s, "step_duration_s": duration_s,
            "spawn_rate": 100, "stop_timeout_s": 30, **({"until": until} if until else {})}


def scenarios(tmp: Path) -> dict[str, Path]:
    """The scenario files, by run name. The same names and seeds on both servers."""
    out = {}
    for name, classes, load in (
        # one user per class (Locust splits users by weight): every kind at once, 6 s and then
        # until each class has 5 answers: five turns of the multi-turn user hold one whole
        # 3-turn session however the window cuts them (1, 2 | 0, 1, 2). A fixed 6 s on a loaded
        # machine once ended with two turns of one session, and the session check had nothing.
        ("classes", CLASSES, _load([len(CLASSES)], 6.0, until={"min_requests_per_task": 5, "max_step_s": 120})),
        # until 20 answers per step: the comparison's speedups need the median's 20 requests
        ("compare", {"qa": COMPARE_QA}, _load([1, 4], 6.0, until={"min_requests_per_task": 20, "max_step_s": 120})),
        ("errors", ERROR_CLASSES, _load([len(ERROR_CLASSES)], 3.0, warmup_s=0.0)),
    ):
        d = tmp / name
        d.mkdir(parents=True, exist_ok=True)
        out[name] = scenario_file(d, name=f"vllm-{name}", target=TARGET,
                                  traffic={"seed": 11, "keep_outputs": True, "tokenizer": None, "classes": classes},
                                  load=load)
    return out


def chat(base_url: str, prompt: str, max_tokens: int, timeout_s: float = 120) -> dict[str, Any]:
    """One non-streamed greedy chat completion (warm-up)."""
    body = {"model": DEFAULT_SERVED_MODEL_NAME, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=timeout_s) as resp:
        return json.loads(resp.read())


def stream_chat_token_ids(base_url: str, prompt: str, max_tokens: int) -> tuple[list[int], list[int]]:
    """Greedy streamed chat completion; returns (generated token ids, tokens per content chunk)."""
    body = {
        "model": DEFAULT_SERVED_MODEL_NAME, "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens, "temperature": 0, "stream": True, "return_token_ids": True,
        "stream_options": {"include_usage": True, "continuous_usage_stats": True},
    }
    req = urllib.request.Request(base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    ids: list[int] = []
    chunk_tokens: list[int] = []
    with urllib.request.urlopen(req, timeout=120) as resp:
        for raw in resp:
            line = raw.decode().strip()
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[len("data: "):]).get("choices", []):
                new = choice.get("token_ids") or []
                ids += new
                if new:
                    chunk_tokens.append(len(new))
    return ids, chunk_tokens


def metric_total(base_url: str, name: str) -> float | None:
    """Sum of one metric over its label sets on ``/metrics`` now (None if the server has none)."""
    with urllib.request.urlopen(base_url + "/metrics", timeout=30) as resp:
        total = None
        for line in resp.read().decode().splitlines():
            if line.startswith(name + "{"):
                total = (total or 0.0) + float(line.rsplit(" ", 1)[1])
        return total


#: The prompt of the token-level probe (see :func:`probe`).
PROBE_PROMPT = "Explain Python generators."
PROBE_TOKENS = 96
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"


#: Probes of a server, asked again up to this many times when its API server merged engine steps
#: into one chunk, as it does when it falls behind (a saturated machine: a plain server seen with
#: a median of 2 tokens per chunk in a 4-worker run, an n-gram server with one chunk of 60 tokens
#: among 18 in CI76), for an answer streamed as it decoded.
PROBE_ATTEMPTS = 3


def steps_merged(chunk_tokens: list[int], *, speculative: bool) -> bool:
    """Did the API server merge engine steps into chunks? Without speculation a step makes one
    token, so a median above 1 says so; with n-gram speculation a step makes at most ``SPEC_K + 1``
    (its drafts and one token of its own), so any larger chunk does."""
    if not chunk_tokens:
        return False
    if speculative:
        return max(chunk_tokens) > SPEC_K + 1
    return statistics.median(chunk_tokens) > 1


def probe(base_url: str, *, speculative: bool) -> dict[str, Any]:
    """Token ids and chunk sizes of one greedy answer, with the accepted-token counter around it.

    The first answer whose engine steps were not merged into chunks (:func:`steps_merged`), else
    the most finely chunked of :data:`PROBE_ATTEMPTS` (the test then judges that one).
    """
    kept: dict[str, Any] = {}
    for _ in range(PROBE_ATTEMPTS):
        before = metric_total(base_url, ACCEPTED)
        ids, chunk_tokens = stream_chat_token_ids(base_url, PROBE_PROMPT, PROBE_TOKENS)
        got = {"ids": ids, "chunk_tokens": chunk_tokens, "accepted_before": before,
               "accepted_after": metric_total(base_url, ACCEPTED)}
        if not kept or len(chunk_tokens) > len(kept["chunk_tokens"]):
            kept = got
        if not steps_merged(chunk_tokens, speculative=speculative):
            break
    return kept


@dataclass
class EngineRuns:
    """What :func:`serve_and_run` did against one server."""

    speculative: bool
    dirs: dict[str, Path] = field(default_factory=dict)
    results: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    scenarios: dict[str, Path] = field(default_factory=dict)
    probe: dict[str, Any] = field(default_factory=dict)
    startup_s: float | None = None
    log_path: Path | None = None
    log_tail: str = ""


def serve_and_run(model_dir: Path, work: Path, *, speculative: bool, names: tuple[str, ...]) -> EngineRuns:
    """Start vLLM once, warm it up, probe it, run the named scenarios one after another, stop it.

    Returns after the server has stopped, so callers never hold two servers at once.
    """
    out = EngineRuns(speculative=speculative)
    out.scenarios = scenarios(work / "scenarios")
    label = "ngram" if speculative else "baseline"
    started = time.monotonic()
    with start_vllm(model_dir, speculative=speculative, max_model_len=MAX_MODEL_LEN,
                    log_path=work / f"vllm-{label}.log") as server:
        out.startup_s = time.monotonic() - started
        out.log_path = server.log_path
        # The first requests are slow (about 3 s with n-gram on CPU): pay that before any run.
        for _ in range(2):
            chat(server.base_url, "Warm up: what is a list?", 32)
        out.probe = probe(server.base_url, speculative=speculative)
        for name in names:
            run_dir = work / f"{label}-{name}"
            out.dirs[name] = run_dir
            out.results[name] = run_locust(out.scenarios[name], server.base_url, run_dir, timeout_s=240)
        out.log_tail = server.log_text(4000)
    return out
