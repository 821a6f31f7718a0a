"""Metric glossary: every latency/throughput metric tokenswarm reports, defined once.

The load generator's live statistics, the analysis package and the manual all use these
definitions and names. Each function takes the fields of one :class:`~tokenswarm.record.RequestRecord`
and returns ``None`` when the metric was not observed (never ``0``).

Terms
-----
chunk
    One SSE ``data:`` event that carried generated content. Under speculative decoding a
    chunk can carry several tokens; the role-only first event and the usage-only last event
    are not chunks.
token
    As counted by the server (``usage``). Per-chunk token counts come from the server's
    cumulative ``continuous_usage_stats`` (or token ids), or are inferred as one per chunk when
    the chunk count equals ``usage.completion_tokens``; they are never guessed from text.
delivery
    The content chunks that reached the client together: read by one read and so dated by
    one arrival time (equal ``chunk_offsets_ms``). A speculative step's accepted tokens come
    as one chunk of several tokens (vLLM) or as several one-token events written together
    (llama.cpp); either way they are one delivery, and per-token ITL is computed per delivery,
    so the same server behaviour gives the same ITL distribution.
request phases
    A request's timeline: due (``scheduled_at_s``) -> connect (new connections only,
    ``connect_ms``) -> the generator's own delay (``send_delay_ms``) -> sent (``sent_at_s``, the
    last byte handed to the kernel) -> response headers (``headers_ms``) -> first content chunk
    (``ttft_ms``) -> end (``e2e_ms``). What the server did not cause is never inside TTFT.
"""

from __future__ import annotations

import math
import warnings
from typing import TYPE_CHECKING, Any, Sequence

from tokenswarm import names

if TYPE_CHECKING:  # imported by the functions that use it: the generator itself needs no numpy
    import numpy as np

#: name -> (unit, definition). docs/reference/glossary.md is generated from it (docs/gen/reference.py).
GLOSSARY: dict[str, tuple[str, str]] = {
    "ttft_ms": ("ms", "Time to first token: arrival of the first content chunk minus sent_at_s."),
    "e2e_ms": (
        "ms",
        "End-to-end latency: end of the response minus sent_at_s; for a complete answer the arrival of its "
        "last delivery ([DONE] or the last event), dated like its chunks.",
    ),
    "schedule_lag_ms": (
        "ms",
        "sent_at_s minus scheduled_at_s (from the same clock reading as sent_at_s): how late the request left "
        "versus its plan; connect_ms + send_delay_ms.",
    ),
    "ttft_from_schedule_ms": ("ms", "schedule_lag_ms + ttft_ms: TTFT as an open-loop user experiences it."),
    "e2e_from_schedule_ms": ("ms", "schedule_lag_ms + e2e_ms: E2E as an open-loop user experiences it."),
    "tpot_ms": ("ms", "Time per output token, per request: (e2e_ms - ttft_ms) / (output_tokens - 1)."),
    "itl_ms": (
        "ms",
        "Inter-token latency, one sample per token after the first delivery: a delivery (the chunks "
        "read together, equal offsets) of n tokens arriving g ms after the previous delivery gives n "
        "samples of g/n, whether it came as one chunk of n tokens or as n one-token events.",
    ),
    "inter_chunk_ms": (
        "ms",
        "Raw gap between consecutive content chunks (one sample per gap; chunks of one delivery give 0).",
    ),
    "connect_ms": (
        "ms",
        "Time to establish a new connection (TCP connect, plus the TLS handshake); none when the request "
        "reused a kept-alive connection.",
    ),
    "conn_reused_share": ("fraction", "Share of requests sent on a kept-alive connection (conn_reused true)."),
    "send_delay_ms": (
        "ms",
        "The generator's own delay: from the moment the request was due (closed loop: the user's turn "
        "began; open loop: its scheduled time) to sent_at_s, minus connect_ms.",
    ),
    "headers_ms": ("ms", "Time to first byte: response headers received minus sent_at_s."),
    "tokens_per_chunk": (
        "tokens",
        "Tokens carried by one content chunk (exact counts only: from continuous usage stats or token ids, "
        "or inferred as one per chunk when a request's number of content chunks equals its "
        "usage.completion_tokens -- record field chunk_tokens_inferred).",
    ),
    "request_output_tps": (
        "tokens/s",
        "Output tokens per second of one request: output_tokens / (e2e_ms / 1000).",
    ),
    "output_tokens_per_s": (
        "tokens/s",
        "Aggregate output throughput of a step: output tokens of its successful steady-window requests / "
        "the window's duration (the SLO min_output_tokens_per_s bounds it).",
    ),
    "live_ttft_p99_ms": (
        "ms",
        "A live, approximate percentile (here TTFT p99; likewise live_tpot_p50_ms, live_itl_p99_ms ...) as "
        "the web UI, the progress line and live_summary.json show it: from log-bucketed histograms merged "
        "across workers, within 1 % of the exact value. The report's ttft_p99_ms is exact, from the records.",
    ),
    # study metrics (tokenswarm study; analysis.study)
    "speedup": (
        "ratio",
        "Candidate / baseline median per-request output tokens/s (request_output_tps) of one step and task; "
        "geometric mean over rounds.",
    ),
    "aggregate_speedup": (
        "ratio",
        "Candidate / baseline aggregate output tokens/s of one step's steady window; geometric mean over rounds.",
    ),
    "crossover_load": (
        "users or requests/s",
        "Load at which the speedup crosses 1 (speculation stops paying), interpolated in log(load).",
    ),
    "cv": ("fraction", "Coefficient of variation across rounds: sample standard deviation / mean."),
    "first_reasoning_token_ms": (
        "ms",
        "Reasoning streams: arrival of the first reasoning_content/reasoning chunk minus sent_at_s.",
    ),
    "first_answer_token_ms": (
        "ms",
        "Reasoning streams: arrival of the first answer (content) chunk minus sent_at_s; ttft_ms stays "
        "the first chunk of any kind.",
    ),
    "reasoning_itl_ms": ("ms", "ITL (as itl_ms) over the gaps between reasoning chunks of reasoning streams."),
    "answer_itl_ms": (
        "ms",
        "ITL (as itl_ms) over the gaps between answer chunks of reasoning streams (the switch from "
        "reasoning to answer belongs to neither phase).",
    ),
    "server_prefix_cache_hit_rate": (
        "fraction",
        "Per step: delta of vllm:prefix_cache_hits_total over delta of vllm:prefix_cache_queries_total "
        "(prompt tokens found cached over prompt tokens looked up), between the scrapes around the window.",
    ),
    "json_valid_share": (
        "fraction",
        "Successful checked requests (extraction) whose answer parses as JSON (one surrounding "
        "Markdown code fence allowed), over all successful checked requests.",
    ),
    "schema_valid_share": (
        "fraction",
        "Successful checked requests whose answer validates against the JSON Schema the request "
        "asked for (JSON Schema draft 2020-12, checked with jsonschema-rs), over all successful checked requests.",
    ),
}

#: Step-level SLOs a scenario may set (``slo:``), defined once for the scenario loader and the
#: analysis: name -> (column of a step-table row, "max" (observed <= threshold) or "min" (>=), unit).
#: The columns are summary keys of the one table of names (tokenswarm.names).
SLO_METRICS: dict[str, tuple[str, str, str]] = {
    names.TTFT_P50_MS: (names.TTFT_P50_MS, "max", "ms"),
    names.TTFT_P95_MS: (names.TTFT_P95_MS, "max", "ms"),
    names.TTFT_P99_MS: (names.TTFT_P99_MS, "max", "ms"),
    names.TPOT_P50_MS: (names.TPOT_P50_MS, "max", "ms"),
    names.TPOT_P95_MS: (names.TPOT_P95_MS, "max", "ms"),
    names.TPOT_P99_MS: (names.TPOT_P99_MS, "max", "ms"),
    names.ITL_P99_MS: (names.ITL_P99_MS, "max", "ms"),
    names.E2E_P95_MS: (names.E2E_P95_MS, "max", "ms"),
    names.E2E_P99_MS: (names.E2E_P99_MS, "max", "ms"),
    names.ERROR_RATE: (names.ERROR_RATE, "max", "fraction"),
    "min_output_tokens_per_s": (names.OUTPUT_TOKENS_PER_S, "min", "tokens/s"),
    "min_goodput_share": (names.GOODPUT_SHARE, "min", "fraction"),
}


#: SLO names that were renamed: old name -> new name. An old name still works, with a
#: deprecation warning naming the file (or option) and the new name (see :func:`slo_name`).
DEPRECATED_SLO_NAMES: dict[str, str] = {
    # "output_tps" meant three things; the SLO bounds the aggregate output_tokens_per_s
    "min_output_tps": "min_output_tokens_per_s",
}


def slo_name(name: str, where: str) -> str:
    """The current name of SLO ``name``; warns (naming ``where`` and the new name) for an old one."""
    new = DEPRECATED_SLO_NAMES.get(name)
    if new is None:
        return name

    # FutureWarning, not DeprecationWarning: it is meant for whoever wrote the scenario or the
    # command line, and Python hides DeprecationWarning outside __main__ by default.
    warnings.warn(f"{where}: the SLO {name!r} is deprecated, write {new!r} (the same bound on the "
                  "aggregate output tokens/s of a step)", FutureWarning, stacklevel=3)
    return new


def tpot_ms(ttft_ms: float | None, e2e_ms: float | None, output_tokens: int | None) -> float | None:
    """Time per output token of one request; ``None`` with fewer than 2 tokens."""
    if ttft_ms is None or e2e_ms is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e_ms - ttft_ms) / (output_tokens - 1)


def inter_chunk_ms(chunk_offsets_ms: Sequence[float] | None) -> list[float]:
    """Gaps between consecutive content chunks."""
    if not chunk_offsets_ms:
        return []
    return [b - a for a, b in zip(chunk_offsets_ms, chunk_offsets_ms[1:])]


def itl_ms(chunk_offsets_ms: Sequence[float] | None, chunk_tokens: Sequence[int] | None) -> list[float]:
    """Per-token inter-token latencies of one request, per delivery (see the module glossary).

    The first delivery's tokens have no predecessor and give no sample. Each later delivery of
    ``n`` tokens after a gap ``g`` yields ``n`` samples of ``g / n`` (so the samples of a request
    add up to ``last_chunk - first_chunk``). Without exact per-chunk counts each chunk counts as
    one token: the caller must then say the values are per chunk, not per token.
    """
    if not chunk_offsets_ms or len(chunk_offsets_ms) < 2:
        return []
    import numpy as np  # numpy: the glossary is imported by every room, only ITL arrays need it

    offsets = np.asarray(chunk_offsets_ms, dtype=np.float64)
    gaps = np.diff(offsets)
    tokens = np.ones(gaps.size, dtype=np.int64) if chunk_tokens is None else np.asarray(chunk_tokens[1:])
    first = np.zeros(gaps.size, dtype=bool)
    first[0] = True
    values, weights = itl_samples(gaps, tokens, first)
    return np.repeat(values, weights).tolist()


def itl_samples(gaps_ms: Any, tokens: Any, first_gap: Any) -> tuple[np.ndarray, np.ndarray]:
    """Per-delivery ITL of many requests at once, as weighted samples (one per chunk gap).

    ``gaps_ms[i]`` is the gap between a chunk and the previous chunk of its request,
    ``tokens[i]`` the tokens of the chunk that ends it, and ``first_gap[i]`` is True where the
    gap is its request's first. A gap of 0 joins its chunk to the previous chunk's delivery.
    Returns ``(values_ms, weights)``: ``weights[i]`` samples of ``values_ms[i]`` each, so that
    a delivery of ``n`` tokens after a gap ``g`` gives ``n`` samples of ``g / n`` (weight 0 for
    chunks of a request's first delivery and for chunks without tokens).
    """
    import numpy as np  # numpy: only for ITL arrays (see itl_ms)

    g = np.asarray(gaps_ms)
    n = np.maximum(np.asarray(tokens, dtype=np.int64), 0)
    if g.size == 0:
        return np.empty(0, dtype=g.dtype), np.empty(0, dtype=np.int64)
    head = (g != 0) | np.asarray(first_gap, dtype=bool)  # a delivery's first chunk, or a request's first gap
    head[0] = True
    starts = np.flatnonzero(head)
    group = np.cumsum(head) - 1
    lead = g[starts]  # the gap before each delivery; 0: the request's first delivery went on
    total = np.add.reduceat(n, starts)
    live = (lead != 0) & (total > 0)
    per = np.zeros(starts.size, dtype=np.float64)
    np.divide(lead, total, out=per, where=live)
    return per[group].astype(g.dtype, copy=False), np.where(live[group], n, 0)


def request_output_tps(output_tokens: int | None, e2e_ms: float | None) -> float | None:
    """Output tokens per second of one request (glossary: ``request_output_tps``)."""
    if output_tokens is None or e2e_ms is None or e2e_ms <= 0:
        return None
    return output_tokens / (e2e_ms / 1000.0)


def with_schedule(lag_ms: float | None, value_ms: float | None) -> float | None:
    """Schedule-inclusive latency: ``lag + value`` (a missing lag counts as none)."""
    if value_ms is None:
        return None
    return value_ms + (lag_ms or 0.0)


# --------------------------------------------------------------------------- sample-size rule

#: The all-tasks row of a table or verdict (beside one row per task).
ALL_TASKS = "all"
#: A q-quantile needs about this many samples beyond it: n >= SAMPLES_PER_TAIL / (1 - q).
SAMPLES_PER_TAIL = 10.0


def min_samples_for(p: float) -> int:
    """Fewest samples that support the ``p``-th percentile: ceil(10 / (1 - p/100)).

    p50 needs 20, p95 200, p99 1,000, p99.9 10,000: below that the estimate rests on fewer
    than ~10 values in the tail and is shown as insufficient, never as a number. The one rule
    for the analysis' tables and gates and for the generator's plan of what it can judge.
    """
    q = p / 100.0
    if q >= 1.0:
        raise ValueError(f"percentile {p:g} has no finite sample requirement")
    return math.ceil(round(SAMPLES_PER_TAIL / (1.0 - q), 6))
