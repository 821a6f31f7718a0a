"""A bounded ring buffer of chart samples taken from the live statistics every few seconds.

Each sample holds rates and *windowed* percentiles (the last ``window_s`` seconds, computed by
differencing cumulative histogram bucket counts, so they follow the load as it changes rather
than the whole run's history) plus the target's queue and KV-cache gauges from the latest
scrape. Time is passed in (``Observation.at_s``), so all of it is tested without sleeping.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass
from typing import Any

from tokenswarm import names
from tokenswarm.load.livestats import LiveStats, LogHistogram

WAITING = "vllm:num_requests_waiting"
RUNNING = "vllm:num_requests_running"
KV_CACHE = "vllm:kv_cache_usage_perc"

# A sample's fields besides the summary table's metrics (names.py): spelled here once, used by
# the sampler and by the chart table below (the page and its script take them from there).
USERS = "users"
IN_FLIGHT = "in_flight"
REQUESTS_PER_S = "req_s"
ERRORS_PER_S = "err_s"
SERVER_WAITING = "waiting"
SERVER_RUNNING = "running"
KV_CACHE_PCT = "kv_cache_pct"
#: the windowed percentiles a sample carries, of TTFT and TPOT
LIVE_PERCENTILES = (50, 95, 99)


@dataclass(frozen=True)
class Chart:
    """One chart of the live page: its element id, title and (sample field, legend label) lines."""

    element_id: str
    title: str
    lines: tuple[tuple[str, str], ...]


def _percentile_lines(metric: names.SummaryMetric) -> tuple[tuple[str, str], ...]:
    return tuple((names.live_key(metric, f"p{p}"), f"p{p}") for p in LIVE_PERCENTILES)


#: The live charts page, in order (tokenswarm/webui/routes.py renders it; static/charts.js draws it).
CHARTS: tuple[Chart, ...] = (
    Chart("chart-tps", "Output tokens/s", ((names.OUTPUT_TOKENS_PER_S, "output tok/s"),)),
    Chart("chart-ttft", "Live TTFT percentiles (ms, last 10 s, within 1 %)", _percentile_lines(names.TTFT)),
    Chart("chart-tpot", "Live TPOT percentiles (ms, last 10 s, within 1 %)", _percentile_lines(names.TPOT)),
    Chart("chart-users", "Concurrency (users, in flight) and step", ((USERS, "users"), (IN_FLIGHT, "in flight"))),
    Chart("chart-errors", "Requests/s and errors/s", ((REQUESTS_PER_S, "requests/s"), (ERRORS_PER_S, "errors/s"))),
    Chart("chart-queue", f"Server queue ({WAITING} / running)", ((SERVER_WAITING, "waiting"), (SERVER_RUNNING, "running"))),
    Chart("chart-kv", "KV-cache usage (%)", ((KV_CACHE_PCT, "KV cache %"),)),
)


@dataclass
class Observation:
    """What the sampler reads at one instant (epoch seconds ``at_s``)."""

    at_s: float
    live: LiveStats
    users: int = 0
    step: str | None = None
    phase: str | None = None
    in_flight: int | None = None
    scrape: dict[str, Any] | None = None  # latest scrape line of the target


@dataclass
class _Snap:
    at_s: float
    tokens: dict[str, int]  # per task and "Total"
    requests: int
    failures: int
    ttft: dict[int, int]
    tpot: dict[int, int]


def gauge(scrape: dict[str, Any] | None, name: str, how: str = "sum") -> float | None:
    """A gauge of one scrape line, summed (or averaged) over label sets; None if absent."""
    if not scrape:
        return None
    values = [s["value"] for s in scrape.get("samples", ()) if s.get("name") == name]
    if not values:
        return None
    total = float(sum(values))
    return total if how == "sum" else total / len(values)


def delta_quantile(cur: dict[int, int], prev: dict[int, int], q: float) -> float | None:
    """Quantile of the values added between two bucket-count snapshots of a LogHistogram."""
    added = {k: c - prev.get(k, 0) for k, c in cur.items() if c > prev.get(k, 0)}
    if not added:
        return None
    # no clamping: bucket middles, 1 % precision
    h = LogHistogram.from_dict({"b": added, "n": sum(added.values()), "s": 0.0, "lo": 0.0, "hi": math.inf})
    return h.quantile(q)


class ChartSampler:
    """Keeps at most ``max_samples`` samples of one run (a new run id clears it)."""

    def __init__(self, max_samples: int = 3600, window_s: float = 10.0) -> None:
        self.samples: deque[dict[str, Any]] = deque(maxlen=max_samples)
        self.window_s = window_s
        self.run_id: str | None = None
        self._snaps: deque[_Snap] = deque()

    def reset(self, run_id: str | None) -> None:
        """Forget everything (a new run started)."""
        self.samples.clear()
        self._snaps.clear()
        self.run_id = run_id

    def add(self, obs: Observation) -> dict[str, Any]:
        """Take one sample; returns it (also appended to :attr:`samples`)."""
        total = obs.live.total()
        snap = _Snap(obs.at_s, {**{n: t.output_tokens for n, t in obs.live.tasks.items()}, "Total": total.output_tokens},
                     total.requests, total.failures, dict(total.hists["ttft_ms"].buckets),
                     dict(total.hists["tpot_ms"].buckets))
        self._snaps.append(snap)
        while len(self._snaps) > 2 and self._snaps[1].at_s <= obs.at_s - self.window_s:
            self._snaps.popleft()  # keep one snapshot at or before the window's start
        base = self._snaps[0]
        dt = snap.at_s - base.at_s
        point: dict[str, Any] = {"t": round(obs.at_s, 3), USERS: obs.users, "step": obs.step, "phase": obs.phase,
                                 IN_FLIGHT: obs.in_flight, "requests": snap.requests, "failures": snap.failures}
        if dt > 0:
            point[names.OUTPUT_TOKENS_PER_S] = round((snap.tokens["Total"] - base.tokens.get("Total", 0)) / dt, 1)
            point[REQUESTS_PER_S] = round((snap.requests - base.requests) / dt, 2)
            point[ERRORS_PER_S] = round((snap.failures - base.failures) / dt, 2)
        else:
            point[names.OUTPUT_TOKENS_PER_S] = point[REQUESTS_PER_S] = point[ERRORS_PER_S] = None
        for metric, cur, prev in ((names.TTFT, snap.ttft, base.ttft), (names.TPOT, snap.tpot, base.tpot)):
            if dt <= 0:
                prev = {}  # the first sample: everything so far
            for p in LIVE_PERCENTILES:
                v = delta_quantile(cur, prev, p / 100)
                point[names.live_key(metric, f"p{p}")] = None if v is None else round(v, 1)
        point[SERVER_WAITING] = gauge(obs.scrape, WAITING)
        point[SERVER_RUNNING] = gauge(obs.scrape, RUNNING)
        kv = gauge(obs.scrape, KV_CACHE, how="mean")
        point[KV_CACHE_PCT] = None if kv is None else round(kv * 100, 1)
        self.samples.append(point)
        return point

    def recent_tps(self) -> dict[str, float | None]:
        """Output tokens/s per task and ``Total`` over the window (from the stored snapshots)."""
        if len(self._snaps) < 2:
            return {}
        a, b = self._snaps[0], self._snaps[-1]
        dt = b.at_s - a.at_s
        if dt <= 0:
            return {}
        return {name: (tok - a.tokens.get(name, 0)) / dt for name, tok in b.tokens.items()}

    def since(self, t: float | None) -> list[dict[str, Any]]:
        """Samples newer than ``t`` (all of them when ``t`` is None)."""
        if t is None:
            return list(self.samples)
        return [s for s in self.samples if s["t"] > t]
