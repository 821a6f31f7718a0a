"""What the web UI reads of the run (master or local process), in one place.

The run is a :class:`~tokenswarm.webui.view.RunView`: its ``live`` statistics (merged worker
deltas on a master, the process's own stats locally) and a frozen
:class:`~tokenswarm.webui.view.RunSnapshot` (run id, run directory, times, state, in-flight
count, step, the latest target scrape). Nothing else of the controller is read.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import gevent
import orjson

from tokenswarm.webui.report import ReportBuilder
from tokenswarm.webui.series import ChartSampler, Observation
from tokenswarm.webui.table import llm_rows, server_spec_decode
from tokenswarm.webui.view import RunView


class WebState:
    """Live table, chart samples and report state for one Locust master/local process."""

    def __init__(self, environment: Any, run: RunView, *, clock: Callable[[], float] = time.time,
                 interval_s: float = 2.0, max_samples: int = 3600, reports: ReportBuilder | None = None) -> None:
        self.env = environment
        self.run = run
        self.clock = clock
        self.interval_s = interval_s
        self.sampler = ChartSampler(max_samples=max_samples, window_s=10.0)
        self.reports = reports or ReportBuilder()
        self._sampled_finished: str | None = None  # run id whose post-run sample was taken
        self._first_scrape: dict[str, dict[str, Any]] = {}  # run id -> first target scrape line of the run
        self._greenlet: gevent.Greenlet | None = None

    # -- the run ------------------------------------------------------------------------------
    @property
    def run_id(self) -> str | None:
        return self.run.snapshot().run_id

    def run_elapsed_s(self) -> float | None:
        snap = self.run.snapshot()
        if snap.run_id is None or snap.started_at is None:
            return None
        end = snap.ended_at if snap.finished else None
        return max(0.0, (end or self.clock()) - snap.started_at)

    def state(self) -> str:
        """``idle`` (no run yet), ``running``, ``stopping`` (collecting the last records) or ``finished``."""
        snap = self.run.snapshot()
        if snap.run_id is None:
            return "idle"
        if not snap.finished:
            return "running"
        return "finished" if snap.complete else "stopping"

    def in_flight(self) -> int | None:
        return self.run.snapshot().in_flight

    @property
    def run_dir(self) -> Path | None:
        return self.run.snapshot().run_dir

    # -- scrapes ------------------------------------------------------------------------------
    def latest_scrape(self) -> dict[str, Any] | None:
        """Latest successful scrape of the target (this run's)."""
        return self.run.snapshot().target_scrape

    def first_scrape(self) -> dict[str, Any] | None:
        """The run's first successful target scrape, read back from ``server_metrics.jsonl``."""
        snap = self.run.snapshot()
        rid, run_dir = snap.run_id, snap.run_dir
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
                d: dict[str, Any] = orjson.loads(line)
                if d.get("source") == "target" and not d.get("error"):
                    self._first_scrape = {rid: d}
                    return d
        return None

    # -- what the routes serve ----------------------------------------------------------------
    def rows(self) -> list[dict[str, Any]]:
        spec = server_spec_decode(self.first_scrape(), self.latest_scrape())
        recent = self.sampler.recent_tps() if self.state() == "running" else {}
        return llm_rows(self.run.live, recent_tps=recent, run_elapsed_s=self.run_elapsed_s(), server_spec=spec)

    def sample_once(self) -> dict[str, Any] | None:
        """Add one chart sample if a run is going (or just ended); returns it."""
        rid = self.run_id
        if rid is None:
            return None
        if rid != self.sampler.run_id:
            self.sampler.reset(rid)
        snap = self.run.snapshot()
        if snap.finished:
            if self._sampled_finished == rid or self.state() != "finished":
                return None
            self._sampled_finished = rid  # one last sample with the final numbers
        runner = self.env.runner
        obs = Observation(at_s=self.clock(), live=self.run.live, users=int(getattr(runner, "user_count", 0) or 0),
                          step=snap.step_name, phase=snap.phase, in_flight=snap.in_flight,
                          scrape=snap.target_scrape)
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
                logging.getLogger("tokenswarm").exception("tokenswarm web UI: sampling failed")
