"""What the web UI reads from the run controller (master or local process), in one place.

Only public attributes of :class:`tokenswarm.orchestrate.controller.RunController` are read: ``live``
(merged worker deltas on a master, the process's own stats locally), ``manifest``,
``run_dir``, ``finished``, ``scrapers``, ``ctx``, ``worker_status`` and ``is_master``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import orjson

from tokenswarm.webui.report import ReportBuilder
from tokenswarm.webui.series import ChartSampler, Observation
from tokenswarm.webui.table import llm_rows, server_spec_decode


class WebState:
    """Live table, chart samples and report state for one Locust master/local process."""

    def __init__(self, environment: Any, ctl: Any, *, clock: Callable[[], float] = time.time,
                 interval_s: float = 2.0, max_samples: int = 3600, reports: ReportBuilder | None = None) -> None:
        self.env = environment
        self.ctl = ctl
        self.clock = clock
        self.interval_s = interval_s
        self.sampler = ChartSampler(max_samples=max_samples, window_s=10.0)
        self.reports = reports or ReportBuilder()
        self._sampled_finished: str | None = None  # run id whose post-run sample was taken
        self._first_scrape: dict[str, Any] = {}  # run id -> first target scrape line of the run
        self._greenlet: gevent.Greenlet | None = None

    # -- the run ------------------------------------------------------------------------------
    @property
    def run_id(self) -> str | None:
        m = self.ctl.manifest
        return None if m is None else m.data.get("run_id")

    def run_elapsed_s(self) -> float | None:
        m = self.ctl.manifest
        if m is None or m.data.get("started_at") is None:
            return None
        end = m.data.get("ended_at") if self.ctl.finished else None
        return max(0.0, (end or self.clock()) - m.data["started_at"])

    def state(self) -> str:
        """``idle`` (no run yet), ``running``, ``stopping`` (collecting the last records) or ``finished``."""
        m = self.ctl.manifest
        if m is None:
            return "idle"
        if not self.ctl.finished:
            return "running"
        return "finished" if m.data.get("complete") else "stopping"

    def in_flight(self) -> int | None:
        if self.ctl.is_master:
            return sum(int(w.get("in_flight", 0)) for w in self.ctl.worker_status.values())
        return self.ctl.ctx.in_flight if self.ctl.ctx is not None else None

    # -- scrapes ------------------------------------------------------------------------------
    def latest_scrape(self) -> dict[str, Any] | None:
        """Latest successful scrape of the target (the newest ``target`` scraper: this run's)."""
        for s in reversed(self.ctl.scrapers):
            if s.source == "target":
                return s.last
        return None

    def first_scrape(self) -> dict[str, Any] | None:
        """The run's first successful target scrape, read back from ``server_metrics.jsonl``."""
        rid, run_dir = self.run_id, self.ctl.run_dir
        if rid is None or run_dir is None:
            return None
        if rid in self._first_scrape:
            return self._first_scrape[rid]
        path = Path(run_dir) / "server_metrics.jsonl"
        if not path.exists():
            return None
        with open(path, "rb") as fh:
            for line in fh:
                if not line.endswith(b"\n"):
                    break  # a line being written
                d = orjson.loads(line)
                if d.get("source") == "target" and not d.get("error"):
                    self._first_scrape = {rid: d}
                    return d
        return None

    # -- what the routes serve ----------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        spec = server_spec_decode(self.first_scrape(), self.latest_scrape())
        recent = self.sampler.recent_tps() if self.state() == "running" else {}
        return llm_rows(self.ctl.live, recent_tps=recent, run_elapsed_s=self.run_elapsed_s(), server_spec=spec)

    def sample_once(self) -> dict[str, Any] | None:
        """Add one chart sample if a run is going (or just ended); returns it."""
        rid = self.run_id
        if rid is None:
            return None
        if rid != self.sampler.run_id:
            self.sampler.reset(rid)
        if self.ctl.finished:
            if self._sampled_finished == rid or self.state() != "finished":
                return None
            self._sampled_finished = rid  # one last sample with the final numbers
        ctx = self.ctl.ctx
        runner = self.env.runner
        obs = Observation(at_s=self.clock(), live=self.ctl.live, users=int(getattr(runner, "user_count", 0) or 0),
                          step=getattr(ctx, "step_name", None), phase=getattr(ctx, "phase", None),
                          in_flight=self.in_flight(), scrape=self.latest_scrape())
        return self.sampler.add(obs)

    def start(self) -> None:
        """Sample every ``interval_s`` in a greenlet of this process."""
        if self._greenlet is None:
            self._greenlet = gevent.spawn(self._loop)

    def _loop(self) -> None:
        while True:
            gevent.sleep(self.interval_s)
            try:
                self.sample_once()
            except Exception:
                import logging

                logging.getLogger("tokenswarm").exception("tokenswarm web UI: sampling failed")
