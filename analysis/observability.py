"""The observability audit: which signals the method needs does the server under test expose?

For each signal (acceptance rate, mean accepted length, accepted per position, drafts /
verifications, fallbacks, draft-model time share, queue wait, queue length, running requests,
KV-cache use, preemptions, prefix-cache hits) :data:`SIGNALS` lists the Prometheus names of
vLLM, SGLang, TGI and llama.cpp's server (from their documentation; the simulator's own
``tokenswarm_sim:`` names last). A signal is *exposed* when one of its names is in the
target's scrapes; its value per step is computed over the step's steady window:

* ``delta``: counter increase between the scrapes bracketing the window;
* ``ratio``: Δnumerator / Δdenominator (acceptance = Δaccepted / Δdraft tokens ...);
* ``length``: 1 + Δaccepted / Δdrafts (mean accepted length, bonus token included);
* ``hist_mean``: Δ``_sum`` / Δ``_count`` of a histogram or summary (mean queue wait);
* ``mean``: mean of a gauge over the scrapes inside the window.

Where a per-request form exists, the audit counts the records that carried it; where a signal
is missing, ``derived_instead`` says what tokenswarm derives and how far to trust it.
:func:`ttft_breakdown` puts the server's queue wait and draft share next to the client's
TTFT per step; :func:`server_view` is the per-step server table (queue length, running,
KV use, preemptions). No I/O here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.loader import ServerMetrics
from tokenswarm.analysis.step_windows import Window


@dataclass(frozen=True)
class Source:
    """One engine's way of exposing a signal: ``kind`` and the metric names it reads."""

    engine: str
    kind: str  #: "delta", "ratio", "length", "hist_mean", "mean", "per_pos"
    names: tuple[str, ...]
    scale: float = 1.0  #: to the signal's unit (seconds -> ms ...)


@dataclass(frozen=True)
class Signal:
    name: str
    unit: str
    sources: tuple[Source, ...]
    per_request: str | None
    derived_instead: str


_S, _MS = 1.0, 1000.0
SIGNALS: tuple[Signal, ...] = (
    Signal("acceptance_rate", "fraction", (
        Source("vllm", "ratio", ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_draft_tokens_total")),
        Source("llama.cpp", "ratio", ("llamacpp:spec_decode_num_accepted_tokens_total",
                                      "llamacpp:spec_decode_num_draft_tokens_total")),
        Source("sglang", "mean", ("sglang:spec_accept_rate",)),
    ), "spec_decode",
        "chunk sizes: mean tokens per chunk - 1 estimates accepted drafts per step; exact only with one verify "
        "step per chunk and exact per-chunk counts, and 1.0 whatever the acceptance on servers that stream one "
        "event per token (TGI, llama.cpp)"),
    Signal("mean_accepted_length", "tokens", (
        Source("vllm", "length", ("vllm:spec_decode_num_accepted_tokens_total", "vllm:spec_decode_num_drafts_total")),
        Source("llama.cpp", "length", ("llamacpp:spec_decode_num_accepted_tokens_total",
                                       "llamacpp:spec_decode_num_drafts_total")),
        Source("sglang", "ratio", ("sglang:generation_tokens_total", "sglang:spec_verify_calls_total")),
        Source("sglang", "mean", ("sglang:spec_accept_length",)),
        Source("tgi", "hist_mean", ("tgi_request_skipped_tokens",)),
    ), "spec_decode",
        "mean tokens per chunk (first chunk excluded), under the same conditions as the acceptance estimate"),
    Signal("accepted_per_position", "fraction", (
        Source("vllm", "per_pos", ("vllm:spec_decode_num_accepted_tokens_per_pos_total",)),
        Source("llama.cpp", "per_pos", ("llamacpp:spec_decode_num_accepted_tokens_per_pos_total",)),
    ), "spec_decode",
        "nothing reliable: the tokens-per-chunk histogram shows how many drafts a step accepted, not which position "
        "failed"),
    Signal("drafts_verifications", "count", (
        Source("vllm", "delta", ("vllm:spec_decode_num_drafts_total",)),
        Source("llama.cpp", "delta", ("llamacpp:spec_decode_num_drafts_total",)),
        Source("sglang", "delta", ("sglang:spec_verify_calls_total",)),
        Source("tgi", "delta", ("tgi_request_skipped_tokens_count",)),
    ), "spec_decode", "the number of content chunks after the first, with one verify step per chunk"),
    Signal("fallbacks", "count", (
        Source("simulator", "delta", ("tokenswarm_sim:draft_fallback_steps_total",)),
    ), None,
        "none of vLLM, SGLang, TGI or llama.cpp counts steps decoded without drafts; a fall of tokens per chunk to "
        "1.0 in the over-time view hints at it"),
    Signal("draft_time_share", "fraction", (
        Source("simulator", "ratio", ("tokenswarm_sim:draft_seconds_total", "tokenswarm_sim:busy_seconds_total")),
    ), None,
        "not exposed by vLLM, SGLang, TGI or llama.cpp: compare TPOT at concurrency 1 with and without "
        "speculation (tokenswarm compare) for the draft model's net cost"),
    Signal("queue_wait", "ms", (
        Source("vllm", "hist_mean", ("vllm:request_queue_time_seconds",), _MS),
        Source("sglang", "hist_mean", ("sglang:queue_time_seconds",), _MS),
        Source("tgi", "hist_mean", ("tgi_request_queue_duration",), _MS),
    ), None,
        "none from the client: TTFT includes queueing; TTFT at the lowest load step is the no-queue baseline, "
        "so the rise of TTFT p50 over it bounds queueing plus prefill contention"),
    Signal("queue_length", "requests", (
        Source("vllm", "mean", ("vllm:num_requests_waiting",)),
        Source("sglang", "mean", ("sglang:num_queue_reqs",)),
        Source("tgi", "mean", ("tgi_queue_size",)),
        Source("llama.cpp", "mean", ("llamacpp:requests_deferred",)),
    ), None, "in-flight requests of the generator minus the server's batch size, when the batch size is known"),
    Signal("running_requests", "requests", (
        Source("vllm", "mean", ("vllm:num_requests_running",)),
        Source("sglang", "mean", ("sglang:num_running_reqs",)),
        Source("tgi", "mean", ("tgi_batch_current_size",)),
        Source("llama.cpp", "mean", ("llamacpp:requests_processing",)),
    ), None, "the generator's in-flight requests (an upper bound: it includes queued ones)"),
    Signal("kv_cache_usage", "fraction", (
        Source("vllm", "mean", ("vllm:kv_cache_usage_perc",)),
        Source("vllm", "mean", ("vllm:gpu_cache_usage_perc",)),
        Source("sglang", "mean", ("sglang:token_usage",)),
        Source("llama.cpp", "mean", ("llamacpp:kv_cache_usage_ratio",)),
    ), None, "nothing: prompt plus output tokens in flight, from the records, is a rough proxy"),
    Signal("preemptions", "count", (
        Source("vllm", "delta", ("vllm:num_preemptions_total",)),
    ), None, "nothing direct: preempted requests show as TPOT outliers (a long gap mid-stream)"),
    Signal("prefix_cache_hits", "fraction", (
        Source("vllm", "ratio", ("vllm:prefix_cache_hits_total", "vllm:prefix_cache_queries_total")),
        Source("vllm", "ratio", ("vllm:gpu_prefix_cache_hits_total", "vllm:gpu_prefix_cache_queries_total")),
        Source("sglang", "mean", ("sglang:cache_hit_rate",)),
    ), None, "TTFT against prompt length per task: cached prefixes make long prompts start fast"),
)


def _names_present(sm: ServerMetrics, src: Source) -> bool:
    if src.kind == "per_pos":
        return bool(sm.per_pos)
    if src.kind == "hist_mean":
        return sm.value(src.names[0] + "_sum") is not None and sm.value(src.names[0] + "_count") is not None
    return all(sm.value(n) is not None for n in src.names)


def find_source(sm: ServerMetrics | None, sig: Signal) -> Source | None:
    """The first of the signal's sources whose names the scrapes carry."""
    if sm is None:
        return None
    return next((s for s in sig.sources if _names_present(sm, s)), None)


def window_value(sm: ServerMetrics, src: Source, start_s: float | None, end_s: float | None) -> float | None:
    """The signal's value over ``[start_s, end_s]`` (see the module docstring for each kind)."""
    if start_s is None or end_s is None or src.kind == "per_pos":
        return None
    t = sm.scraped_at_s
    if src.kind == "mean":
        inside = (t >= start_s) & (t <= end_s)
        v = sm.value(src.names[0])
        if v is None or not inside.any() or np.isnan(v[inside]).all():
            return None
        return float(np.nanmean(v[inside])) * src.scale
    before = np.nonzero(t <= start_s)[0]
    after = np.nonzero(t >= end_s)[0]
    i0 = int(before[-1]) if before.size else 0
    i1 = int(after[0]) if after.size else t.size - 1
    if i1 <= i0:
        return None

    def delta(name: str) -> float | None:
        arr = sm.value(name)
        if arr is None:
            return None
        d = float(arr[i1] - arr[i0])
        return None if np.isnan(d) or d < 0 else d

    if src.kind == "delta":
        return delta(src.names[0])
    if src.kind == "hist_mean":
        s, c = delta(src.names[0] + "_sum"), delta(src.names[0] + "_count")
        return s / c * src.scale if s is not None and c else None
    a, b = delta(src.names[0]), delta(src.names[1])
    if a is None or not b:
        return None
    return (1.0 + a / b) if src.kind == "length" else a / b * src.scale


def _per_request_count(run: Any, sig: Signal) -> int | None:
    if sig.per_request != "spec_decode":
        return None
    # any of the normalised spec-decode numbers was present in the record
    cols = [run[c] for c in ("sd_num_spec_steps", "sd_num_accepted_tokens", "sd_mean_acceptance_length")]
    return int(np.logical_or.reduce([~np.isnan(c) for c in cols]).sum())


SPEC_SIGNALS = frozenset({"acceptance_rate", "mean_accepted_length", "accepted_per_position", "drafts_verifications",
                          "fallbacks", "draft_time_share"})


def audit(run: Any, wins: list[Window], speculation_seen: bool = True) -> list[dict[str, Any]]:
    """One object per signal: ``signal``, ``exposed``, ``metric`` (or ``None``) and the details.

    ``speculation_seen`` False (no spec-decode signal of any kind in the run): the speculative
    signals' ``derived_instead`` says that servers expose them only while speculating.
    """
    sm: ServerMetrics | None = run.server_metrics
    out = []
    for sig in SIGNALS:
        src = find_source(sm, sig)
        derived_instead = None if src is not None else sig.derived_instead
        if derived_instead and not speculation_seen and sig.name in SPEC_SIGNALS:
            derived_instead = "no speculation in this run (engines expose these only while speculating); " + derived_instead
        metric = None
        if src is not None:
            metric = f"{src.names[0]} / {src.names[1]}" if src.kind in ("ratio", "length") else src.names[0]
        row: dict[str, Any] = {
            "signal": sig.name, "exposed": src is not None, "metric": metric,
            "engine": src.engine if src else None, "unit": sig.unit,
            "steps": [{"step_name": w.name, "signal_value": window_value(sm, src, w.start_s, w.end_s)}
                      for w in wins] if src is not None and sm is not None and src.kind != "per_pos" else [],
            "known_names": sorted({n for s in sig.sources for n in s.names}),
            "per_request_form": {"spec_decode": "record.spec_decode (vLLM metrics.speculative_decoding with "
                                                "--per-request-spec-decode-metrics, llama.cpp timings.draft_n, "
                                                "SGLang spec_tokens_details)"}.get(sig.per_request or ""),
            "per_request_records_count": _per_request_count(run, sig),
            "derived_instead": derived_instead,
        }
        out.append(row)
    return out


def _value(rows: list[dict[str, Any]], signal: str, step_name: str) -> float | None:
    for r in rows:
        if r["signal"] == signal:
            for s in r["steps"]:
                if s["step_name"] == step_name:
                    value: float | None = s["signal_value"]
                    return value
    return None


def ttft_breakdown(audit_rows: list[dict[str, Any]], step_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per step: client TTFT next to the server's mean queue wait and the draft share of engine time."""
    out = []
    for r in step_rows:
        if r["task"] != "all":
            continue
        q = _value(audit_rows, "queue_wait", r["step_name"])
        ttft_mean = r.get(names.TTFT_MEAN_MS)
        out.append({
            "step_index": r["step_index"], "step_name": r["step_name"],
            names.TTFT_P50_MS: r.get(names.TTFT_P50_MS), names.TTFT_P99_MS: r.get(names.TTFT_P99_MS), names.TTFT_MEAN_MS: ttft_mean,
            names.TTFT_COUNT: r.get(names.TTFT_COUNT),
            "server_queue_wait_mean_ms": q,
            "queue_wait_of_ttft_share": q / ttft_mean if q is not None and ttft_mean else None,
            "draft_time_share": _value(audit_rows, "draft_time_share", r["step_name"]),
        })
    return out


def server_view(audit_rows: list[dict[str, Any]], step_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per step (steady window): queue length, running requests, KV-cache use, preemptions."""
    out = []
    for r in step_rows:
        if r["task"] != "all":
            continue
        n = r["step_name"]
        out.append({"step_index": r["step_index"], "step_name": n,
                    "queue_length_mean_requests": _value(audit_rows, "queue_length", n),
                    "running_mean_requests": _value(audit_rows, "running_requests", n),
                    "kv_cache_usage_mean_share": _value(audit_rows, "kv_cache_usage", n),
                    "preemptions_count": _value(audit_rows, "preemptions", n),
                    "prefix_cache_hit_share": _value(audit_rows, "prefix_cache_hits", n)})
    return out
