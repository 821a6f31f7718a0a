"""Prometheus text exposition (format 0.0.4) with vLLM's metric names, written by hand.

Hand-written because the engine observes several histograms per emitted chunk and a
scrape must stay cheap at thousands of streams; the output parses with
``prometheus_client.parser.text_string_to_metric_families`` (tested). No ``_created``
series are emitted (consumers ignore them anyway).
"""

from __future__ import annotations

from array import array
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

if TYPE_CHECKING:  # the engine imports this module's metrics: the name only, for the annotation
    from tokenswarm.sim.engine import EngineStats

TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0,
                  7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
E2E_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
                 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0)
ITL_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                 10.0, 20.0, 40.0, 80.0)
ITERATION_TOKEN_BUCKETS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384)
LAG_BUCKETS_S = (0.0001, 0.00025, 0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.025, 0.05,
                 0.1, 0.25, 1.0)


class Histogram:
    """Cumulative-on-render histogram with fixed upper bounds (``le``, Prometheus semantics).

    ``observe`` is the bound ``append`` of a pending array: one C call on the engine's
    per-chunk path. :meth:`flush` buckets the pending values in bulk with numpy; reading
    ``counts``/``total``/``count`` flushes first, and the simulator flushes every 0.2 s so
    the pending array stays small (a few thousand values) however long the run.
    """

    __slots__ = ("bounds", "_edges", "_counts", "_total", "_count", "pending", "observe", "sink")

    def __init__(self, bounds: tuple[float, ...], sink: Callable[[np.ndarray], None] | None = None) -> None:
        self.bounds = bounds
        self.sink = sink  #: also receives every flushed batch (in observation order)
        self._edges = np.asarray(bounds, dtype=np.float64)
        self._counts = np.zeros(len(bounds) + 1, dtype=np.int64)
        self._total = 0.0
        self._count = 0
        self.pending = array("d")
        self.observe: Callable[[float], None] = self.pending.append

    def flush(self) -> None:
        """Bucket the pending observations (and hand them to ``sink``)."""
        if not self.pending:
            return
        values = np.array(self.pending, dtype=np.float64)
        del self.pending[:]  # in place: ``observe`` stays bound to this array
        # side="left": the first bound >= value, as "le" buckets count value <= bound.
        self._counts += np.bincount(np.searchsorted(self._edges, values, side="left"), minlength=len(self._counts))
        self._total += float(values.sum())
        self._count += len(values)
        if self.sink is not None:
            self.sink(values)

    @property
    def counts(self) -> list[int]:
        self.flush()
        return self._counts.tolist()

    @property
    def total(self) -> float:
        self.flush()
        return self._total

    @property
    def count(self) -> int:
        self.flush()
        return self._count


class LagReservoir:
    """The most recent emission lags (seconds), for exact percentiles in benchmarks."""

    def __init__(self, size: int = 1 << 18) -> None:
        self.buf = np.zeros(size, dtype=np.float64)
        self.size = size
        self.n = 0
        self.max_s = 0.0

    def extend(self, lags_s: np.ndarray) -> None:
        """Append lags in arrival order; the oldest are overwritten past ``size``."""
        k = len(lags_s)
        if not k:
            return
        self.max_s = max(self.max_s, float(lags_s.max()))
        if k >= self.size:
            lags_s, self.n = lags_s[-self.size:], self.n + k - self.size
            k = self.size
        start = self.n % self.size
        first = min(k, self.size - start)
        self.buf[start:start + first] = lags_s[:first]
        self.buf[:k - first] = lags_s[first:]
        self.n += k

    def reset(self) -> None:
        self.n = 0
        self.max_s = 0.0

    def summary(self) -> dict[str, Any]:
        """Count, p50/p90/p99/p99.9/max in ms of the retained samples (None when empty)."""
        k = min(self.n, self.size)
        if not k:
            return {"count": 0, "p50_ms": None, "p90_ms": None, "p99_ms": None, "p999_ms": None, "max_ms": None}
        vals = np.sort(self.buf[:k])

        def q(p: float) -> float:
            return round(float(vals[min(k - 1, int(p * k))]) * 1000.0, 4)

        return {"count": self.n, "p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99),
                "p999_ms": q(0.999), "max_ms": round(self.max_s * 1000.0, 4)}


def _fmt(v: float) -> str:
    return repr(float(v))


class Exposition:
    """Builds one scrape: ``gauge``/``counter``/``histogram`` calls, then :meth:`text`."""

    def __init__(self, base_labels: dict[str, str]) -> None:
        self.lines: list[str] = []
        self.base = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(base_labels.items()))

    def _labels(self, extra: dict[str, str] | None) -> str:
        if not extra:
            return "{" + self.base + "}"
        more = ",".join(f'{k}="{_esc(v)}"' for k, v in sorted(extra.items()))
        return "{" + self.base + "," + more + "}"

    def gauge(self, name: str, help_text: str, value: float) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} gauge", f"{name}{self._labels(None)} {_fmt(value)}"]

    def counter(self, name: str, help_text: str, samples: list[tuple[dict[str, str] | None, float]]) -> None:
        """``name`` without ``_total``; samples are (extra labels, value)."""
        full = name + "_total"
        self.lines += [f"# HELP {full} {help_text}", f"# TYPE {full} counter"]
        self.lines += [f"{full}{self._labels(lab)} {_fmt(v)}" for lab, v in samples]

    def histogram(self, name: str, help_text: str, h: Histogram) -> None:
        self.lines += [f"# HELP {name} {help_text}", f"# TYPE {name} histogram"]
        cum = 0
        for bound, c in zip(h.bounds, h.counts):
            cum += c
            self.lines.append(f"{name}_bucket{self._labels({'le': _fmt(bound)})} {_fmt(cum)}")
        self.lines.append(f"{name}_bucket{self._labels({'le': '+Inf'})} {_fmt(h.count)}")
        self.lines.append(f"{name}_count{self._labels(None)} {_fmt(h.count)}")
        self.lines.append(f"{name}_sum{self._labels(None)} {_fmt(h.total)}")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _esc(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


class SimMetrics:
    """Server-side observations (latencies, lags, faults); engine counters live in EngineStats."""

    def __init__(self) -> None:
        self.ttft = Histogram(TTFT_BUCKETS_S)
        self.e2e = Histogram(E2E_BUCKETS_S)
        self.itl = Histogram(ITL_BUCKETS_S)
        self.iteration_tokens = Histogram(ITERATION_TOKEN_BUCKETS)
        self.queue_time = Histogram(TTFT_BUCKETS_S)  #: arrival -> admitted into the running batch
        self.lags = LagReservoir()
        self.emission_lag = Histogram(LAG_BUCKETS_S, sink=self.lags.extend)
        self.aborted = 0
        self.faults: dict[str, int] = {}
        self.http_requests: dict[tuple[str, str], int] = {}
        self.chunks_sent = 0

    def fault(self, kind: str) -> None:
        self.faults[kind] = self.faults.get(kind, 0) + 1

    def flush(self) -> None:
        """Bucket every pending observation (the emission lags also reach the reservoir)."""
        for h in (self.ttft, self.e2e, self.itl, self.iteration_tokens, self.emission_lag, self.queue_time):
            h.flush()


def render(
    model_name: str,
    m: SimMetrics,
    stats: EngineStats,
    running: int,
    waiting: int,
    kv_usage: float,
    spec_method: str,
    spec_k: int,
    draft_available: bool | None,
    extra: Callable[[Exposition], None] | None = None,
) -> str:
    """The full ``/metrics`` text."""
    e = Exposition({"model_name": model_name, "engine": "0"})
    e.gauge("vllm:num_requests_running", "Number of requests in model execution batches.", running)
    e.gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.", waiting)
    e.gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", kv_usage)
    e.counter("vllm:prompt_tokens", "Number of prefill tokens processed.", [(None, stats.prompt_tokens)])
    e.counter("vllm:generation_tokens", "Number of generation tokens processed.", [(None, stats.generation_tokens)])
    reasons = dict(stats.finished)
    reasons["abort"] = m.aborted
    e.counter(
        "vllm:request_success",
        "Count of successfully processed requests.",
        [({"finished_reason": r}, reasons.get(r, 0)) for r in sorted(set(reasons) | {"stop", "length"})],
    )
    e.histogram("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", m.ttft)
    e.histogram("vllm:e2e_request_latency_seconds", "Histogram of e2e request latency in seconds.", m.e2e)
    e.histogram("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", m.itl)
    e.histogram("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", m.iteration_tokens)
    e.histogram("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", m.queue_time)
    e.counter("vllm:num_preemptions", "Cumulative number of preemption from the engine (the simulator reserves "
              "KV on admission and never preempts).", [(None, 0)])
    e.counter("tokenswarm_sim:busy_seconds", "Engine-model seconds with a step running.", [(None, stats.busy_s)])
    if spec_method != "none":
        e.counter("vllm:spec_decode_num_drafts", "Number of spec decoding drafts.", [(None, stats.spec_drafts)])
        e.counter("vllm:spec_decode_num_draft_tokens", "Number of draft tokens.", [(None, stats.spec_draft_tokens)])
        e.counter(
            "vllm:spec_decode_num_accepted_tokens", "Number of accepted tokens.", [(None, stats.spec_accepted_tokens)]
        )
        e.counter(
            "vllm:spec_decode_num_accepted_tokens_per_pos",
            "Accepted tokens per draft position.",
            [({"position": str(i)}, v) for i, v in enumerate(stats.spec_accepted_per_pos[:spec_k])],
        )
        e.gauge("tokenswarm_sim:draft_available", "1 if the draft model is serving, 0 if the engine fell back to plain decoding.",
                1.0 if draft_available else 0.0)
        e.counter("tokenswarm_sim:draft_seconds", "Engine-model seconds spent drafting (draft model or n-gram lookup).",
                  [(None, stats.draft_s)])
        e.counter("tokenswarm_sim:draft_fallback_steps", "Engine steps decoded without drafts because the draft model was unavailable.",
                  [(None, stats.fallback_steps)])
    e.counter("tokenswarm_sim:engine_steps", "Engine steps completed.", [(None, stats.steps)])
    e.counter("tokenswarm_sim:chunks_sent", "Streamed content chunks written to sockets.", [(None, m.chunks_sent)])
    e.counter("tokenswarm_sim:faults", "Injected faults by kind.",
              [({"kind": k}, m.faults.get(k, 0)) for k in sorted(set(m.faults) | {"http_500", "http_503", "http_429", "cut", "stall"})])
    e.histogram("tokenswarm_sim:emission_lag_seconds",
                "Actual chunk send time minus the engine model's scheduled time.", m.emission_lag)
    if extra is not None:
        extra(e)
    return e.text()
