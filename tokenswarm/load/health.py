"""The load generator watches itself: event-loop lag, CPU, memory, open connections.

A generator that is short of CPU reads sockets late, and every TTFT and ITL it measures
grows by that delay. So each generator process runs a probe greenlet that asks to wake up
every ``probe_s`` and measures how late it actually woke (event-loop lag), and samples CPU
and memory every ``sample_s``. A sample whose CPU is above ``cpu_limit_pct`` or whose
worst loop lag is above ``lag_limit_ms`` marks its window as *untrusted*: the run log
warns, the manifest lists the windows, and the report says so on its first page.

The lag arithmetic is pure (:class:`LagTracker`), fed by an injected clock in tests.
"""

from __future__ import annotations

import logging
import os
import time
from typing import Any, Callable

import gevent

from tokenswarm.wire import watch

log = logging.getLogger("tokenswarm")

CPU_LIMIT_PCT = 90.0
LAG_LIMIT_MS = 20.0
#: The kernel counts a process's CPU time in clock ticks (10 ms on Linux), so over a short interval
#: one tick reads as a spike (a 75 us final sample once read 6,660 %). Below this interval a sample's
#: CPU share is not observed (``None``) rather than a quantisation artefact; at 0.5 s one tick is 2 %.
CPU_MIN_INTERVAL_S = 0.5


def cpu_pct(cpu_s: float, interval_s: float) -> float | None:
    """The share of one core (percent) that ``cpu_s`` CPU seconds over ``interval_s`` wall seconds
    is, or ``None`` when the interval is too short for the CPU clock to say (pure)."""
    if interval_s < CPU_MIN_INTERVAL_S:
        return None
    return round(100.0 * cpu_s / interval_s, 1)


class LagTracker:
    """Accumulates wake-up lateness between samples (pure)."""

    __slots__ = ("max_ms", "sum_ms", "n")

    def __init__(self) -> None:
        self.max_ms = 0.0
        self.sum_ms = 0.0
        self.n = 0

    def observe(self, expected_s: float, woke_s: float) -> float:
        lag_ms = max(0.0, (woke_s - expected_s) * 1000.0)
        self.max_ms = max(self.max_ms, lag_ms)
        self.sum_ms += lag_ms
        self.n += 1
        return lag_ms

    def take(self) -> tuple[float, float]:
        """(max, mean) lag since the last take, then reset."""
        out = (self.max_ms, self.sum_ms / self.n if self.n else 0.0)
        self.max_ms, self.sum_ms, self.n = 0.0, 0.0, 0
        return out


def untrusted_reasons(sample: dict[str, Any], cpu_limit_pct: float = CPU_LIMIT_PCT,
                      lag_limit_ms: float = LAG_LIMIT_MS) -> list[str]:
    """Why a health sample says timings in its window cannot be trusted (empty: fine)."""
    reasons = []
    if (sample.get("cpu_pct") or 0.0) > cpu_limit_pct:
        reasons.append(f"generator CPU {sample['cpu_pct']:.0f}% > {cpu_limit_pct:.0f}%")
    if (sample.get("loop_lag_max_ms") or 0.0) > lag_limit_ms:
        reasons.append(f"event-loop lag {sample['loop_lag_max_ms']:.0f} ms > {lag_limit_ms:.0f} ms")
    return reasons


class HealthMonitor:
    """Probe + sampler greenlets for one generator process."""

    def __init__(self, worker_id: str, on_sample: Callable[[dict[str, Any]], None], *, probe_s: float = 0.1,
                 sample_s: float = 5.0, extra: Callable[[], dict[str, Any]] | None = None,
                 clock: Callable[[], float] = time.monotonic, cpu_s: Callable[[], float] | None = None) -> None:
        import psutil

        self.worker_id = worker_id
        self.on_sample = on_sample
        self.probe_s = probe_s
        self.sample_s = sample_s
        self.extra = extra
        self.lag = LagTracker()
        self.proc = psutil.Process(os.getpid())
        # CPU seconds and the monotonic clock, both injectable: the share is computed here, where
        # the interval it covers is known, and not by psutil's cpu_percent (no floor on its interval)
        self._clock = clock
        self._cpu_s = cpu_s or self._process_cpu_s
        self._cpu_mark = (clock(), self._cpu_s())
        self.max_cpu_pct = 0.0
        self.max_lag_ms = 0.0
        self.untrusted_samples = 0
        self._greenlets: list[gevent.Greenlet] = []
        self._warned = False
        self.last: dict[str, Any] | None = None
        self._since = time.time()  # the start of the interval the next sample covers

    def _process_cpu_s(self) -> float:
        t = self.proc.cpu_times()
        return float(t.user + t.system)

    def _cpu_since_mark(self) -> float | None:
        """This process's CPU share since the previous sample (or start), then re-mark."""
        at, used = self._clock(), self._cpu_s()
        mark_at, mark_used = self._cpu_mark
        self._cpu_mark = (at, used)
        return cpu_pct(used - mark_used, at - mark_at)

    def _probe(self) -> None:
        clock = time.perf_counter
        while True:
            expected = clock() + self.probe_s
            gevent.sleep(self.probe_s)
            self.lag.observe(expected, clock())

    def sample(self) -> dict[str, Any]:
        lag_max, lag_mean = self.lag.take()
        conns = open_sockets()
        now = time.time()
        s = {"t": round(now, 3), "since": round(self._since, 3), "worker_id": self.worker_id,
             "cpu_pct": self._cpu_since_mark(),
             "rss_mb": round(self.proc.memory_info().rss / 1e6, 1), "loop_lag_max_ms": round(lag_max, 2),
             "loop_lag_mean_ms": round(lag_mean, 3), "connections": conns}
        if watch.ENABLED:  # arrivals the watcher's thread dated while this process's loop was stalled
            s["stall_notes"] = watch.watch_stats()["notes"]
        if self.extra is not None:
            s.update(self.extra())
        reasons = untrusted_reasons(s)
        s["untrusted"] = reasons or None
        if s["cpu_pct"] is not None:
            self.max_cpu_pct = max(self.max_cpu_pct, s["cpu_pct"])
        self.max_lag_ms = max(self.max_lag_ms, lag_max)
        if reasons:
            self.untrusted_samples += 1
            if not self._warned:
                self._warned = True
                log.warning("tokenswarm: THE LOAD GENERATOR ITSELF IS A BOTTLENECK (%s): TTFT/ITL measured in this "
                            "window are inflated. Add workers (--workers N) or lower the load.", "; ".join(reasons))
        self.last, self._since = s, now
        return s

    def _sampler(self) -> None:
        while True:
            gevent.sleep(self.sample_s)
            self.on_sample(self.sample())

    def start(self) -> None:
        self._since = time.time()
        self._cpu_mark = (self._clock(), self._cpu_s())
        self._greenlets = [gevent.spawn(self._probe), gevent.spawn(self._sampler)]

    def final_sample(self) -> dict[str, Any]:
        """The interval since the last sample, taken at the run's end: a stall in a run shorter than
        ``sample_s``, or in its last seconds, is reported like any other."""
        return self.sample()

    def stop(self) -> None:
        for g in self._greenlets:
            g.kill(block=False)
        self._greenlets = []

    def summary(self) -> dict[str, Any]:
        return {"max_cpu_pct": round(self.max_cpu_pct, 1), "max_loop_lag_ms": round(self.max_lag_ms, 2),
                "untrusted_samples": self.untrusted_samples,
                "stall_notes": watch.watch_stats()["notes"] if watch.ENABLED else None}


def open_sockets(batch: int = 64) -> int | None:
    """Open sockets of this process, from /proc/self/fd (Linux; None elsewhere).

    Not psutil's ``net_connections``: it parses the kernel's connection tables and blocked the
    event loop for ~20 ms with 600 sockets. Not a native thread either: a Python loop in a thread
    holds the GIL between its system calls, and the event loop, waiting for the GIL, stalled for
    30-80 ms every sample (seen as every stream's chunks arriving at once). So: in the hub, in
    slices of ``batch`` readlinks (~0.1 ms each) with a yield between them. The monitor must not
    distort what it monitors.
    """
    try:
        fds = os.listdir("/proc/self/fd")
    except OSError:
        return None
    n = 0
    for i, fd in enumerate(fds, 1):
        try:
            if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                n += 1
        except OSError:
            pass
        if i % batch == 0:
            gevent.sleep(0)
    return n


def merge_windows(windows: list[list[Any]], sample_s: float) -> list[list[Any]]:
    """Merge [start, end, reason] windows that touch (within one sample interval)."""
    out: list[list[Any]] = []
    for start, end, reason in sorted(windows, key=lambda w: w[0]):
        if out and start <= out[-1][1] + sample_s:
            out[-1][1] = max(out[-1][1], end)
            if reason not in out[-1][2]:
                out[-1][2] = f"{out[-1][2]}; {reason}"
        else:
            out.append([start, end, reason])
    return out
