"""The scenario's load plan as a Locust ``LoadTestShape`` (runs on the master or local runner).

It advances a pure :class:`~tokenswarm.workload.steps.StepMachine` once per Locust tick and
broadcasts every step/phase change to the workers, so each record is tagged with the step
and phase in which it started. Closed loop: the user count is the step's concurrency.
Open loop: one ``OpenLoopUser`` per worker; the step's rate is split across workers.
"""

from __future__ import annotations

import time

from locust import LoadTestShape, User

from tokenswarm.load import runtime


class ScenarioShape(LoadTestShape):
    """Steps from the scenario's ``load`` section (ignored when ``-u/--users`` is given)."""

    use_common_options = True  # -u/-r/-t are read: -u switches to a fixed load, -t caps the run

    def tick(self) -> tuple[int, float] | tuple[int, float, list[type[User]] | None] | None:
        ctl = runtime.run()
        if ctl is None:
            return None
        tick: tuple[int, float] | tuple[int, float, list[type[User]] | None] | None = ctl.shape_tick(
            self.runner, time.perf_counter())
        return tick
