"""Which load to probe next: the capacity search and the sweep, as pure decisions.

Nothing here sends a request, sleeps or reads a clock: a planner is told each finished probe's
result and answers the next load (or ``None``: done). The controller's probing hook
(:mod:`tokenswarm.orchestrate.probing`) runs each probe as a full step and judges it.

Capacity search (``load.mode: search``)
    Exponential, then bisection. Probe ``start``; while a probe passes, multiply the load by
    ``factor`` (at most ``max``). The first failure brackets the capacity between the last
    passing load ``lo`` and the failing one ``hi``; then probe the midpoint (rounded down to
    whole users over concurrency) and keep the half that contains the boundary, until
    ``hi - lo <= resolution``. Ends early when ``max`` passes (capacity at least ``max``) or
    when ``start`` fails (capacity below the lowest probe). It assumes that passing is monotone
    in load: a probe above a failure that passes again does not move ``hi``.

Sweep (``load.mode: sweep``, GuideLLM's idea)
    Saturation first: ``max_concurrency`` users give the largest throughput ``X_max`` (req/s).
    Then one user at a time gives ``X_1``. By Little's law the load at which requests start to
    queue is ``N* = X_max / X_1`` users (Kleinrock's optimal operating point, throughput at
    saturation times the unloaded response time). The sweep then runs ``steps`` concurrencies
    spread evenly between 1 and ``N*`` (at most ``max_concurrency``), whole and distinct.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from tokenswarm.workload.scenario.model import SearchConfig, SweepConfig


@dataclass
class CapacitySearch:
    """The search's state: the bracket and the probes so far (see the module docstring)."""

    config: SearchConfig
    lo: float | None = None  #: highest passing load below ``hi``
    hi: float | None = None  #: lowest failing load
    probed: list[tuple[float, bool]] = field(default_factory=list)
    #: why the search ended (None while it runs)
    stop_reason: str | None = None

    @property
    def integer(self) -> bool:
        return self.config.over == "concurrency"

    @property
    def first(self) -> float:
        return self.config.start

    def observe(self, load: float, passed: bool) -> float | None:
        """Record one probe's verdict; return the next load to probe, or ``None`` when done."""
        self.probed.append((load, passed))
        if passed:
            if self.hi is None or load < self.hi:
                self.lo = load if self.lo is None else max(self.lo, load)
        elif self.hi is None or load < self.hi:
            self.hi = load
        return self._next()

    def _next(self) -> float | None:
        cfg = self.config
        if self.hi is None:  # still growing
            assert self.lo is not None
            if self.lo >= cfg.max:
                self.stop_reason = f"the highest load allowed (load.search.max = {cfg.max:g}) passed"
                return None
            nxt = self.lo * cfg.factor
            if self.integer:
                nxt = max(math.floor(nxt), self.lo + 1)
            return float(min(nxt, cfg.max))
        if self.lo is None and self.hi <= cfg.start:  # the lowest probe failed: nothing is known to pass
            self.stop_reason = f"the first probe ({cfg.start:g}) failed: the capacity is below it"
            return None
        lo = self.lo if self.lo is not None else cfg.start
        if self.hi - lo <= cfg.resolution:
            self.stop_reason = f"the bracket [{lo:g}, {self.hi:g}] is within the resolution ({cfg.resolution:g})"
            return None
        mid = (lo + self.hi) / 2
        if self.integer:
            mid = math.floor(mid)
        if not lo < mid < self.hi or any(p == mid for p, _ in self.probed):
            self.stop_reason = f"no load left between {lo:g} and {self.hi:g}"
            return None
        return float(mid)


@dataclass
class Sweep:
    """The sweep's state: the two measuring probes, then the spread (see the module docstring)."""

    config: SweepConfig
    saturation_rps: float | None = None  #: X_max: requests/s at ``max_concurrency`` users
    single_rps: float | None = None  #: X_1: requests/s at one user
    planned: list[float] = field(default_factory=list)
    saturation_users: float | None = None  #: N* = X_max / X_1, at most ``max_concurrency``
    stop_reason: str | None = None

    @property
    def first(self) -> float:
        return float(self.config.max_concurrency)

    def observe(self, load: float, requests_per_s: float | None) -> float | None:
        """Record one probe's throughput; return the next concurrency, or ``None`` when done."""
        if self.saturation_rps is None and load == self.config.max_concurrency and not self.planned:
            self.saturation_rps = requests_per_s or 0.0
            return 1.0
        if self.single_rps is None and load == 1 and not self.planned:
            self.single_rps = requests_per_s or 0.0
            self.planned = spread(self.saturation_rps or 0.0, self.single_rps, self.config)
            self.saturation_users = saturation_users(self.saturation_rps or 0.0, self.single_rps, self.config)
            if not self.planned:
                self.stop_reason = "no concurrency lies between 1 and the saturation concurrency"
        if self.planned:
            return self.planned.pop(0)
        self.stop_reason = self.stop_reason or "every planned step ran"
        return None

    def needs_judgement(self) -> bool:
        """The next load depends on this probe's measured throughput (the first two probes)."""
        return not self.planned and self.single_rps is None


def saturation_users(x_max_rps: float, x_1_rps: float, cfg: SweepConfig) -> float:
    """``N* = X_max / X_1`` (Little's law), between 1 and ``max_concurrency``."""
    if x_1_rps <= 0 or x_max_rps <= 0:
        return float(cfg.max_concurrency)
    return float(min(max(x_max_rps / x_1_rps, 1.0), cfg.max_concurrency))


def spread(x_max_rps: float, x_1_rps: float, cfg: SweepConfig) -> list[float]:
    """``cfg.steps`` whole concurrencies evenly between 1 and N*, without 1 and without the
    saturation probe's ``max_concurrency`` (both measured already), ascending and distinct."""
    top = saturation_users(x_max_rps, x_1_rps, cfg)
    n = cfg.steps
    # n points strictly inside (1, top], the last one at the saturation concurrency itself
    raw = [1 + (top - 1) * (i + 1) / n for i in range(n)]
    out: list[float] = []
    for v in raw:
        u = float(round(v))
        if 1 < u < cfg.max_concurrency and u not in out:
            out.append(u)
    return out
