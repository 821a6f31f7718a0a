"""Live LLM statistics in Prometheus text format, for a soak run watched in Grafana (``--metrics-port``).

Off by default. With ``--metrics-port P`` the master (or a local run) serves ``/metrics`` on
``--metrics-host`` (127.0.0.1 unless told otherwise). Everything comes from the live
statistics the run already keeps -- the controller's :class:`~tokenswarm.load.livestats.LiveStats`
(on a master, the workers' merged deltas), its :class:`~tokenswarm.webui.view.RunSnapshot` and the
generator health samples -- nothing is measured twice and no record is read back:

* ``tokenswarm_ttft_seconds``, ``tokenswarm_tpot_seconds``, ``tokenswarm_itl_seconds``,
  ``tokenswarm_e2e_seconds``: histograms per ``task`` and ``step``, on vLLM's own bucket
  bounds (``vllm:time_to_first_token_seconds``, ``vllm:time_per_output_token_seconds`` ...), so a
  dashboard can put the client's view beside the server's;
* ``tokenswarm_requests_total{task,step,outcome}``, ``tokenswarm_request_failures_total{task,step}``,
  ``tokenswarm_output_tokens_total{task,step}``: counters (``rate()`` of them gives tokens/s);
* ``tokenswarm_output_tokens_per_second`` and ``tokenswarm_requests_per_second`` (last 10 s),
  ``tokenswarm_in_flight_requests``, ``tokenswarm_step_info{step,phase}``;
* generator health per worker: ``tokenswarm_generator_cpu_percent``,
  ``tokenswarm_generator_event_loop_lag_max_seconds``, ``tokenswarm_generator_rss_bytes``.

Step attribution: the live statistics are per task; every second (and at each scrape) what
they gained since the last look is added to the step current at that moment. A request is thus
counted under the step in which its statistics reached this process: exact inside a step, and
within about a second plus one worker report interval (3 s) at a step boundary. The exact
per-step numbers are the analysis', from the records. Bucketing: the live histograms' 1 %
buckets are assigned to the first bound at or above their middle value (1 % at a bound).

``prometheus_client`` is imported here only, and this module only when the port is on: a plain
run does not load it.
"""

from __future__ import annotations

import ipaddress
import logging
import time
from typing import Any, Callable, Iterator, Protocol

import gevent
from prometheus_client import start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.registry import CollectorRegistry

from tokenswarm.buckets import bucket_value_ms
from tokenswarm.load.livestats import LiveStats, LogHistogram, TaskStats

log = logging.getLogger("tokenswarm")

#: vLLM's bucket bounds (seconds) for the same metrics, so the two line up in one panel.
TTFT_BUCKETS_S = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
                  20.0, 40.0, 80.0, 160.0, 640.0, 2560.0)
TOKEN_BUCKETS_S = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0,
                   40.0, 80.0)
E2E_BUCKETS_S = (0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0,
                 480.0, 960.0, 1920.0, 7680.0)
#: live histogram -> (metric name, help, bucket bounds in seconds)
HISTOGRAMS = {
    "ttft_ms": ("tokenswarm_ttft_seconds", "Time to first token, as the load generator saw it", TTFT_BUCKETS_S),
    "tpot_ms": ("tokenswarm_tpot_seconds", "Time per output token after the first, per request", TOKEN_BUCKETS_S),
    "itl_ms": ("tokenswarm_itl_seconds", "Inter-token latency, per token of each delivery", TOKEN_BUCKETS_S),
    "e2e_ms": ("tokenswarm_e2e_seconds", "Request latency from send to the last byte (successful requests)",
               E2E_BUCKETS_S),
}
NO_STEP = "none"  # before the first step starts (or a run without steps)


class RunSource(Protocol):
    """What the exporter reads of the run: the controller provides it."""

    live: LiveStats

    def snapshot(self) -> Any: ...


def prometheus_buckets(h: LogHistogram, bounds_s: tuple[float, ...]) -> list[tuple[str, float]]:
    """Cumulative ``(le, count)`` pairs of a live histogram on ``bounds_s``, ending with ``+Inf``."""
    counts = [0] * (len(bounds_s) + 1)
    for key, n in h.buckets.items():
        v = bucket_value_ms(key) / 1000.0
        i = next((j for j, b in enumerate(bounds_s) if v <= b), len(bounds_s))
        counts[i] += n
    out, total = [], 0
    for b, n in zip(bounds_s, counts):
        total += n
        out.append((_le(b), float(total)))
    out.append(("+Inf", float(total + counts[-1])))
    return out


def _le(bound: float) -> str:
    return repr(float(bound))


def _minus(now: TaskStats, before: TaskStats | None) -> TaskStats:
    """What one task's statistics gained since ``before`` (a snapshot of them)."""
    if before is None:
        return TaskStats.from_dict(now.to_dict())
    out = TaskStats()
    out.requests = now.requests - before.requests
    out.failures = now.failures - before.failures
    out.outcomes = {k: v - before.outcomes.get(k, 0) for k, v in now.outcomes.items()}
    out.output_tokens = now.output_tokens - before.output_tokens
    out.hists = {name: h.minus(before.hists[name]) for name, h in now.hists.items()}
    return out


class LiveExporter:
    """A Prometheus collector over the run's live statistics, attributed to steps (see the module)."""

    def __init__(self, source: RunSource, clock: Callable[[], float] = time.time) -> None:
        self.source = source
        self.clock = clock
        self.per_step: dict[tuple[str, str], TaskStats] = {}  # (step, task) -> what it gained in the step
        self._seen: dict[str, TaskStats] = {}
        self._live: LiveStats | None = None
        self._run_id: str | None = None
        self.health: dict[str, dict[str, Any]] = {}  # worker id -> its last health sample

    def on_health_sample(self, sample: dict[str, Any]) -> None:
        """A generator health sample (this process's or a worker's)."""
        if isinstance(sample, dict) and sample.get("worker_id"):
            self.health[str(sample["worker_id"])] = sample

    def attribute(self) -> None:
        """Add what the live statistics gained since the last call to the step current now."""
        live, snap = self.source.live, self.source.snapshot()
        if snap.run_id != self._run_id:  # a new run starts its series from zero
            self._run_id, self.per_step = snap.run_id, {}
        if live is not self._live:  # a new run or a stats reset: a new LiveStats from zero
            self._live, self._seen = live, {}
        step = snap.step_name or NO_STEP
        for task, stats in list(live.tasks.items()):
            now = TaskStats.from_dict(stats.to_dict())
            gained = _minus(now, self._seen.get(task))
            self._seen[task] = now
            if gained.requests or any(h.count for h in gained.hists.values()):
                acc = self.per_step.setdefault((step, task), TaskStats())
                acc.merge(gained)

    def collect(self) -> Iterator[Any]:
        """The metric families (prometheus_client calls this at each scrape)."""
        self.attribute()
        snap = self.source.snapshot()
        items = sorted(self.per_step.items())
        for name, (metric, doc, bounds) in HISTOGRAMS.items():
            fam = HistogramMetricFamily(metric, doc, labels=["task", "step"])
            for (step, task), stats in items:
                h = stats.hists[name]
                fam.add_metric([task, step], prometheus_buckets(h, bounds), sum_value=h.total / 1000.0)
            yield fam
        requests = CounterMetricFamily("tokenswarm_requests", "Finished requests by outcome",
                                       labels=["task", "step", "outcome"])
        failures = CounterMetricFamily("tokenswarm_request_failures",
                                       "Failed requests (http_error, stream_error, timeout)", labels=["task", "step"])
        tokens = CounterMetricFamily("tokenswarm_output_tokens", "Output tokens received", labels=["task", "step"])
        for (step, task), stats in items:
            for outcome, n in sorted(stats.outcomes.items()):
                requests.add_metric([task, step, outcome], n)
            failures.add_metric([task, step], stats.failures)
            tokens.add_metric([task, step], stats.output_tokens)
        yield from (requests, failures, tokens)
        tps, rps, _eps = self.source.live.rate(10)
        yield GaugeMetricFamily("tokenswarm_output_tokens_per_second", "Output tokens/s over the last 10 s",
                                value=tps)
        yield GaugeMetricFamily("tokenswarm_requests_per_second", "Finished requests/s over the last 10 s", value=rps)
        yield GaugeMetricFamily("tokenswarm_in_flight_requests", "Requests under way, over all workers",
                                value=float(snap.in_flight or 0))
        info = GaugeMetricFamily("tokenswarm_step_info", "The current load step and phase (value 1)",
                                 labels=["run_id", "step", "phase"])
        info.add_metric([snap.run_id or "", snap.step_name or NO_STEP, snap.phase or ""], 1.0)
        yield info
        yield from self._health_families()

    def _health_families(self) -> Iterator[Any]:
        cpu = GaugeMetricFamily("tokenswarm_generator_cpu_percent", "Generator process CPU (100 = one core)",
                                labels=["worker"])
        lag = GaugeMetricFamily("tokenswarm_generator_event_loop_lag_max_seconds",
                                "Largest event-loop lag of the last health sample", labels=["worker"])
        rss = GaugeMetricFamily("tokenswarm_generator_rss_bytes", "Generator process resident memory",
                                labels=["worker"])
        for worker, s in sorted(self.health.items()):
            if s.get("cpu_pct") is not None:
                cpu.add_metric([worker], float(s["cpu_pct"]))
            if s.get("loop_lag_max_ms") is not None:
                lag.add_metric([worker], float(s["loop_lag_max_ms"]) / 1000.0)
            if s.get("rss_mb") is not None:
                rss.add_metric([worker], float(s["rss_mb"]) * 1e6)
        yield from (cpu, lag, rss)


def is_loopback(host: str) -> bool:
    """Whether ``host`` only listens on this machine (``localhost`` or a loopback address)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def serve(source: RunSource, port: int, host: str = "127.0.0.1", attribute_every_s: float = 1.0) -> LiveExporter:
    """Serve the live statistics at ``http://host:port/metrics`` (a background server) and return the exporter."""
    if not is_loopback(host):
        log.warning("tokenswarm: --metrics-host %s serves the live statistics (task names, step names, rates) to "
                    "every host that can reach this address, without authentication; keep it on a trusted "
                    "network or use 127.0.0.1 behind an authenticating proxy", host)
    exporter = LiveExporter(source)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter)
    start_http_server(port, addr=host, registry=registry)

    def attribute_loop() -> None:
        while True:
            gevent.sleep(attribute_every_s)
            try:
                exporter.attribute()
            except Exception:  # the export must never stop a run
                log.exception("tokenswarm: live metrics attribution failed")

    gevent.spawn(attribute_loop)
    log.info("tokenswarm: live metrics at http://%s:%d/metrics", host, port)
    return exporter
