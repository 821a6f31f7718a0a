"""Real Locust runs of tokenswarm against llama.cpp's real ``llama-server`` on the GGUF test model.

:func:`serve_and_run` starts one server (baseline, or speculative with the model as its own
draft), warms it up, runs the scenarios the tests need as separate ``locust`` processes (what a
user runs), stops the server and returns the run directories. llama.cpp speaks its own dialect
throughout: ``/tokenize`` reads ``content``, one SSE event per token with no per-chunk usage,
``timings.draft_n`` in the last chunk, ``llamacpp:``-prefixed Prometheus names. Nothing here
tells tokenswarm which engine it is talking to.
"""

from __future__ import annotations

import json
import re
import subprocess
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.helpers.runs import run_locust, scenario_file
from tokenswarm.testmodel.llamacpp import llamacpp_skip_reason, start_llamacpp
from tokenswarm.testmodel.server import DEFAULT_SERVED_MODEL_NAME

#: Evaluated once per test session.
SKIP_REASON = llamacpp_skip_reason()
#: Slots and context of the server: 4 slots of 2,048 tokens each.
PARALLEL = 4
CTX_SIZE = 4 * 2048

TARGET = {
    "model": DEFAULT_SERVED_MODEL_NAME,
    # llama.cpp sends no usage per chunk; tokenswarm must prove one token per event itself.
    "continuous_usage_stats": False,
    "scrape_interval_s": 1,
    "timeouts": {"connect_s": 10, "first_token_s": 60, "total_s": 120},
}
GREEDY = {"temperature": 0.0}

#: Prompt classes sized in tokens (the server's own count must match what was asked for).
CLASSES: dict[str, dict[str, Any]] = {
    "qa": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 300},
           "max_tokens": {"dist": "fixed", "value": 64}, "sampling": GREEDY},
    "code": {"weight": 1, "prompt_tokens": {"dist": "fixed", "value": 900},
             "max_tokens": {"dist": "fixed", "value": 96}, "sampling": GREEDY},
}


def scenarios(tmp: Path) -> dict[str, Path]:
    """The scenario files by run name: the same names and seeds on both servers."""
    # each step runs until both tasks have 10 answers, so the all-tasks row of the comparison has
    # the 20 its speedup needs (a ratio from fewer is not printed). Every user deals both tasks
    # (stratified): with a task per user, concurrency 1 sends only code, qa never gets its 10 and
    # the step runs to max_step_s (it did: 2 x 120 s per server and ~2,000 requests where 20 do).
    load = {"mode": "closed", "steps": [1, 4], "warmup_s": 0.5, "step_duration_s": 4.0,
            "until": {"min_requests_per_task": 10, "max_step_s": 120}, "spawn_rate": 100, "stop_timeout_s": 30}
    out = {}
    d = tmp / "classes"
    d.mkdir(parents=True, exist_ok=True)
    out["classes"] = scenario_file(d, name="llamacpp-classes", target=TARGET,
                                   traffic={"seed": 13, "keep_outputs": True, "tokenizer": None,
                                            "task_draw": "stratified", "classes": CLASSES},
                                   load=load)
    return out


def chat(base_url: str, prompt: str, max_tokens: int) -> dict[str, Any]:
    """One non-streamed greedy chat completion (warm-up)."""
    body = {"model": DEFAULT_SERVED_MODEL_NAME, "messages": [{"role": "user", "content": prompt}],
            "max_tokens": max_tokens, "temperature": 0}
    req = urllib.request.Request(base_url + "/v1/chat/completions", data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return dict(json.loads(resp.read()))


@dataclass
class LlamaCppRuns:
    """What :func:`serve_and_run` did against one server."""

    speculative: bool
    dirs: dict[str, Path] = field(default_factory=dict)
    results: dict[str, subprocess.CompletedProcess] = field(default_factory=dict)
    log_tail: str = ""
    log_path: Path | None = None  # the server's whole log


@dataclass(frozen=True)
class LoggedTask:
    """One request as llama.cpp's log accounts for it (``print_timing`` and ``release`` lines)."""

    prompt_processed: int  # "prompt eval time = ... / N tokens": prompt tokens computed
    generated: int  # "eval time = ... / N tokens"
    kept: int  # "stop processing: n_tokens = N": prompt and answer in the slot, the last token aside

    @property
    def prompt_tokens(self) -> int:
        return self.kept - self.generated + 1


def logged_tasks(log_path: Path) -> list[LoggedTask]:
    """Every finished request of the log, in the order llama.cpp finished them."""
    seen: dict[int, dict[str, int]] = {}
    done: list[LoggedTask] = []
    for line in log_path.read_text(errors="replace").splitlines():
        m = re.search(r"task (\d+) \| prompt eval time =\s*[\d.]+ ms /\s*(\d+) tokens", line)
        if m:
            seen.setdefault(int(m[1]), {})["p"] = int(m[2])
        m = re.search(r"task (\d+) \|\s+eval time =\s*[\d.]+ ms /\s*(\d+) tokens", line)
        if m:
            seen.setdefault(int(m[1]), {})["g"] = int(m[2])
        m = re.search(r"task (\d+) \| stop processing: n_tokens = (\d+)", line)
        if m and int(m[1]) in seen:
            t = seen.pop(int(m[1]))
            done.append(LoggedTask(t["p"], t["g"], int(m[2])))
    return done


def serve_and_run(gguf_path: Path, work: Path, *, speculative: bool) -> LlamaCppRuns:
    """Start llama-server once, warm it up, run every scenario, stop it (before returning)."""
    out = LlamaCppRuns(speculative=speculative)
    label = "draft" if speculative else "baseline"
    files = scenarios(work / "scenarios")
    with start_llamacpp(gguf_path, speculative=speculative, parallel=PARALLEL, ctx_size=CTX_SIZE,
                        log_path=work / f"llamacpp-{label}.log") as server:
        chat(server.base_url, "Warm up: what is a list?", 16)
        for name, scenario in files.items():
            run_dir = work / f"{label}-{name}"
            out.dirs[name] = run_dir
            out.results[name] = run_locust(scenario, server.base_url, run_dir, timeout_s=180)
        out.log_tail = server.log_text(4000)
    out.log_path = work / f"llamacpp-{label}.log"
    return out
