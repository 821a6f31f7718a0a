"""Orchestrating a run on the master (or the single local process): plan, broadcasts, scrapers, health.

:class:`RunController` drives one Locust run: it turns the scenario's load plan into shape
ticks (a :class:`~tokenswarm.workload.steps.StepMachine`), broadcasts every step/phase change to
the workers, starts the Prometheus scrapers and the health monitor, merges the workers'
reports and live statistics, stops the run on the circuit breaker or the run-time guard,
and prints the progress line. What it decides is written by the modules that own the files
and the verdict:

* :mod:`~tokenswarm.orchestrate.recording` -- the run directory, manifest, records sink,
  health log and live summaries;
* :mod:`~tokenswarm.orchestrate.workers` -- the workers' last reports, stopping them, and
  knowing they all sent their final batch;
* :mod:`~tokenswarm.orchestrate.progress` -- the progress line and the live window documents;
* :mod:`~tokenswarm.orchestrate.verdict` -- the CI verdict and the process exit status.

The web UI reads the run through :meth:`RunController.snapshot` (a
:class:`~tokenswarm.webui.view.RunView`), never through these attributes.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import gevent
from locust.runners import MasterRunner

from tokenswarm.collect.manifest import default_run_dir, new_run_id
from tokenswarm.collect.relay import Collector, FileSink
from tokenswarm.collect.scrape import Scraper
from tokenswarm.load import runtime
from tokenswarm.load.breaker import CircuitBreaker
from tokenswarm.load.context import RunContext
from tokenswarm.load.health import HealthMonitor
from tokenswarm.load.livestats import LiveStats
from tokenswarm.load.pilot import run_pilot
from tokenswarm.load.preflight import Preflight, PreflightError, PromptTooLongError, check_prompt_lengths, preflight
from tokenswarm.load.setup import (
    build_worker_context,
    planned_duration_s,
    sc_data,
    set_class_weights,
)
from tokenswarm.manifest import RunTarget, Totals
from tokenswarm.orchestrate import progress, sizing
from tokenswarm.orchestrate.adaptive import AdaptiveRun
from tokenswarm.orchestrate.ending import EXIT_INTERRUPTED, StopReason, cut_stop_timeout, install_signal_handlers
from tokenswarm.orchestrate.recording import RunRecording
from tokenswarm.orchestrate.runflags import RunFlagError, RunFlags
from tokenswarm.orchestrate.verdict import EXIT_BAD_CONFIG, EXIT_OK, EXIT_RUN_BROKE, EXIT_SLO_MISSED, conclude
from tokenswarm.orchestrate.workers import WorkerReports, stop_workers, workers_settled
from tokenswarm.redact import redact, remember_target
from tokenswarm.webui.view import RunSnapshot
from tokenswarm.wire.timing import provenance as timing_provenance
from tokenswarm.workload.steps import PHASE_DRAIN, StepMachine, plan_steps

if TYPE_CHECKING:  # the probing hook reads records with the analysis (numpy): imported only by a search or sweep
    from tokenswarm.orchestrate.probing import ProbingPlan

log = logging.getLogger("tokenswarm")

MSG_STEP = "tokenswarm_step"
MSG_LIVE = "tokenswarm_live"  # a worker's last live-stats delta at test stop (web UI / progress on the master)
__all__ = ["EXIT_BAD_CONFIG", "EXIT_RUN_BROKE", "MSG_LIVE", "MSG_STEP", "RunController"]


class RunController:
    """One Locust run on the master or local process: plan, broadcasts, scrapers, health, progress."""

    def __init__(self, environment: Any, scenario: Any, fixed_users: bool) -> None:
        self.env = environment
        self.scenario = scenario
        remember_target(scenario.target, getattr(environment, "host", None))  # every sink masks its secrets
        self.fixed_users = fixed_users
        self.is_master = isinstance(environment.runner, MasterRunner)
        self.machine: StepMachine | None = None
        #: load.mode search / sweep: the hook that judges each probe and picks the next (None otherwise)
        self.probing: ProbingPlan | None = None
        #: the run's files; None until the first run starts
        self.recording: RunRecording | None = None
        self.ctx: RunContext | None = None
        self.scrapers: list[Scraper] = []
        self.live = LiveStats()  # master: merged worker deltas; local: the ctx's own
        self.workers = WorkerReports()
        self._greenlets: list[gevent.Greenlet] = []
        self._last_broadcast = 0.0
        self._step_msg: dict[str, Any] | None = None
        self.finished = False
        self._pending: list[Any] = []
        self.runs = 0
        self.overrides: dict[str, Any] | None = None
        self.slos: dict[str, Any] = {}
        self.force_end = False
        self.verdict: dict[str, Any] | None = None
        self.health: HealthMonitor | None = None
        self.preflight: Preflight | None = None
        self.breaker = CircuitBreaker()
        #: Records per outcome as this process emitted them (not on a master): answers the
        #: no-SLO verdict without reading the records back. Reset per run, not by a stats reset.
        self.outcomes_emitted: dict[str, int] = {}
        self.broken: str | None = None  # the circuit breaker's message, when it stopped the run
        #: called with every generator health sample (the live metrics export keeps the last per worker)
        self.health_listeners: list[Callable[[dict[str, Any]], None]] = []
        #: why the run stopped (None while it runs); the manifest's stop_reason
        self.stop_reason: StopReason | None = None
        self.finalised = False  # the final manifest is written
        self._stop_timeout_s = environment.stop_timeout  # restored for a new run after a hard stop
        self._signals_installed = False
        self._signalled = False  # a signal is being handled: a second one leaves at once
        self.admission: Any = None  # master: the WorkerGate (admission.py); its refusals go to the manifest
        self.adaptive: AdaptiveRun | None = None  # load.until: the steps' stopping rule and counts
        if hasattr(environment.events, "llm_request") and not self.is_master:
            environment.events.llm_request.add_listener(self._on_record)

    # -- what other parts read -----------------------------------------------------------------
    @property
    def run_dir(self) -> Path | None:
        return None if self.recording is None else self.recording.run_dir

    @property
    def collector(self) -> Collector | None:
        """The master's collector of worker batches (None locally and before the first run)."""
        return None if self.recording is None else self.recording.collector

    def snapshot(self) -> RunSnapshot:
        """The web UI's read-only view of the run (see :mod:`tokenswarm.webui.view`)."""
        if self.recording is None:
            return RunSnapshot()
        m = self.recording.manifest.current
        ctx = self.ctx
        scrape = next((s.last for s in reversed(self.scrapers) if s.source == "target"), None)
        # complete (the view's word): the manifest is final -- also an interrupted run's, whose says false
        return RunSnapshot(run_id=m.run_id, run_dir=self.recording.run_dir, started_at=m.started_at,
                           ended_at=m.ended_at, finished=self.finished, complete=self.finalised or m.complete,
                           in_flight=self._in_flight(), step_name=getattr(ctx, "step_name", None),
                           phase=getattr(ctx, "phase", None), target_scrape=scrape)

    def _in_flight(self) -> int:
        if self.is_master:
            return self.workers.sum("in_flight")
        return self.ctx.in_flight if self.ctx else 0

    def _warn(self, text: str) -> None:
        if self.recording is not None:
            self.recording.manifest.warn(text)

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        opts = self.env.parsed_options
        self.runs += 1
        self.force_end = False
        self.stop_reason, self.finalised, self._signalled = None, False, False
        self.env.stop_timeout = self._stop_timeout_s  # a hard stop of the previous run set it to 0
        self._started_mono = time.monotonic()
        if self.machine is None:  # no shape tick made the plan (fixed -u mode)
            self._apply_option_overrides(opts)
        sc = self.scenario
        self.finished = False
        self.workers = WorkerReports()
        self.live = LiveStats()  # a new run starts from zero (also when restarted from the UI)
        # -u on the command line, or the UI's class picker choosing Locust's default (no) shape
        self.fixed_users = self.env.shape_class is None
        base_url = (self.env.host or sc.target.base_url or "").rstrip("/")
        if sc.load.search is not None and not self.slos:
            self._abort("load.mode search needs SLOs to search under (a slo section or --slo NAME=VALUE)",
                        EXIT_BAD_CONFIG)
            return
        if not base_url:
            self._abort("no target: give --host or target.base_url in the scenario", EXIT_BAD_CONFIG)
            return
        pf, self.preflight = self.preflight, None  # made at init (headless); a UI restart probes again
        try:
            if pf is None:
                pf = preflight(base_url, sc.target, float(getattr(opts, "tokenswarm_wait_for_server", 0) or 0),
                               models=sc.model_names())
        except PreflightError as exc:
            self._abort(str(exc), EXIT_RUN_BROKE)
            return
        try:
            check_prompt_lengths(sc, pf)
        except PromptTooLongError as exc:
            self._abort(str(exc), EXIT_BAD_CONFIG)
            return
        model = pf.model
        self.breaker, self.broken = CircuitBreaker(), None
        self.outcomes_emitted = {}
        run_id = new_run_id()
        out = Path(opts.out) if opts.out else default_run_dir(run_id)
        if opts.out and self.runs > 1:
            out = Path(f"{opts.out}-{self.runs}")
        rec = self.recording = RunRecording.open(
            out, run_id, sc, load_mode="fixed" if self.fixed_users else sc.load.mode,
            target=RunTarget(base_url=base_url, api=sc.target.api, model=model, models_response=pf.models,
                             server_headers=pf.server_headers or {}),
            records_format=getattr(opts, "records_format", "auto") or "auto", records_gzip=bool(opts.records_gzip),
            records_rotate_mb=float(opts.records_rotate_mb or 0), is_master=self.is_master)
        # Workers get everything they need through the spawn message's parsed options.
        opts.tokenswarm_scenario_data = json.dumps(sc_data(sc, self.overrides))
        opts.tokenswarm_run_id = run_id
        opts.tokenswarm_base_url = base_url
        opts.tokenswarm_model = model
        if self.is_master:
            ctx_sink = FileSink(rec.writer)  # unused for records on the master, keeps the API uniform
            self.ctx = RunContext(scenario=sc, run_id=run_id, worker_id="master", base_url=base_url, model=model,
                                  sink=ctx_sink, role="master", events=self.env.events)
        else:
            self.ctx = build_worker_context(self.env, sc, run_id, base_url, model, FileSink(rec.writer), "local", 0)
            self.live = self.ctx.live
        runtime.set_context(self.ctx)
        if self.fixed_users:
            self.machine = self.probing = None  # -u: a fixed load, no search or sweep
            users = opts.num_users or getattr(self.env.runner, "target_user_count", None) or 0
            self._step_msg = {"index": 0, "name": f"u{users}", "kind": "concurrency",
                              "target": users, "phase": "steady", "worker_count": 1}
            now = time.time()
            rec.manifest.start_step(0, self._step_msg["name"], "concurrency", users, at=now, steady_at=now)
            self._broadcast(self._step_msg)
        for tr in self._pending:  # the shape's first tick comes before test_start
            self._record_transition(tr)
        self._pending = []
        explicit_cap = float(opts.tokenswarm_max_run_time or 0)
        # the pilot is part of the run's time: a user's --max-run-time bounds it too (a quarter of it)
        self._announce_plan(pilot_timeout_s=min(10.0, explicit_cap / 4) if explicit_cap else 10.0)
        rec.manifest.write()
        self.scrapers = []
        self._start_scrapers(base_url)
        ctx = self.ctx
        self.health = HealthMonitor(ctx.worker_id, self.on_health_sample,
                                    extra=lambda: {"in_flight": ctx.in_flight, "late_dispatches": ctx.late_dispatches,
                                                   "role": ctx.role})
        self.health.start()
        cap = float(opts.tokenswarm_max_run_time or 0)
        if not cap and opts.headless:  # the default guard: a run that overstays its plan by far is stopped
            planned = planned_duration_s(sc) if not opts.run_time else float(opts.run_time) + sc.load.stop_timeout_s
            cap = planned * 1.5 + 120.0
        if cap:
            self._greenlets.append(gevent.spawn_later(cap, self._max_run_time_reached, cap))
        if opts.run_time and not self.fixed_users:
            # Locust applies -t to a shape only after the shape ended: the controller caps the plan
            self._greenlets.append(gevent.spawn_later(float(opts.run_time), self._run_time_reached,
                                                      float(opts.run_time)))
        if not self._signals_installed:
            install_signal_handlers(self.interrupt)
            self._signals_installed = True
        self._greenlets.append(gevent.spawn(self._periodic))
        log.info("tokenswarm: run %s -> %s (target %s, model %s)", run_id, out, base_url, model)

    def _announce_plan(self, pilot_timeout_s: float = 10.0) -> None:
        """The first lines of a run: what the plan can judge; a gate it cannot judge warns now.
        (A search or sweep sizes each probe itself: it extends a window until its checks are judged.)"""
        load = self.scenario.load
        if self.fixed_users or self.recording is None or self.ctx is None or load.search is not None \
                or load.sweep is not None:
            return
        rate = sizing.RateModel()
        try:
            if getattr(self.env.parsed_options, "tokenswarm_no_pilot", False):
                raise ValueError("--no-pilot")
            pilot = run_pilot(self.ctx.base_url, self.scenario.target, self.ctx.model, self.scenario.target.api,
                              timeout_s=pilot_timeout_s)
            if pilot.stream_tokens_per_s:
                rate = sizing.RateModel.from_pilot(pilot.stream_tokens_per_s, pilot.ttft_s, pilot.output_tokens)
        except (OSError, ValueError) as exc:  # the plan stays on its stated assumptions
            log.info("tokenswarm: no pilot request (%s); the plan assumes the server's speed", redact(str(exc)))
        lines, warnings = sizing.plan_lines(self.scenario, self.slos, rate)
        for line in lines:
            print(f"tokenswarm: {line}", flush=True)
        for text in warnings:
            print(f"tokenswarm: WARNING: {text}", file=sys.stderr, flush=True)
            self._warn(f"plan: {text}")
        self._set_extra("sizing_plan", {"lines": lines, "warnings": warnings})

    def _set_extra(self, key: str, value: Any) -> None:
        if self.recording is not None:
            m = self.recording.manifest
            m.update(extra={**m.current.extra, key: value})

    def _apply_option_overrides(self, opts: Any) -> None:
        """--steps/--step-duration/--warmup (e.g. edited in the web UI) override the scenario."""
        from tokenswarm.workload.scenario import ScenarioError, load_scenario

        try:  # the command line's were checked at start-up (exit 2); these may come from the UI's form
            extra = RunFlags.from_options(opts).plan_overrides()
        except RunFlagError as exc:
            log.error("tokenswarm: ignoring an invalid step option: %s", exc)
            return
        if not extra or self.scenario.path is None:
            return
        merged = {**(self.overrides or {}), **extra}
        try:
            self.scenario = load_scenario(self.scenario.path, merged)
        except ScenarioError as exc:
            log.error("tokenswarm: %s", exc)
            return
        self.overrides = merged
        set_class_weights(self.scenario, "closed" if self.fixed_users else self.scenario.load.loop)

    def _on_record(self, record: Any, **_kw: Any) -> None:
        outcomes = self.outcomes_emitted
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
        if self.adaptive is not None:
            self.adaptive.observe_record(record)
        if self.probing is not None:
            self.probing.on_record(record)
        self._breaker_observe(record.outcome, record.http_status, record.error)

    def on_records_batch(self, msg: dict[str, Any]) -> None:
        """Master: a worker's batch, read by the circuit breaker until the first success, by
        load.until's counts, and by a search or sweep's probing hook (which judges each probe from
        its records)."""
        probing = self.probing
        if not (self.breaker.armed or self.adaptive is not None or probing is not None) or not isinstance(msg, dict):
            return
        import orjson

        for line in bytes(msg.get("data") or b"").splitlines():
            try:
                r = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            if self.adaptive is not None:
                self.adaptive.observe_record(r)
            if probing is not None:
                probing.on_record(r)
            if self.breaker.armed:
                self._breaker_observe(r.get("outcome", ""), r.get("http_status"), r.get("error"))
            elif self.adaptive is None and probing is None:
                return

    def _breaker_observe(self, outcome: str, http_status: int | None, error: str | None) -> None:
        message = self.breaker.observe(outcome, http_status, error)
        if message is None or self.finished:
            return
        self.broken = message
        self.stop_reason = self.stop_reason or StopReason.CIRCUIT_BREAKER
        print(f"tokenswarm: {redact(message)}", file=sys.stderr, flush=True)
        self._warn(message)
        if self.ctx is not None:
            self.ctx.halted = True  # local users send nothing more while the run winds down
        self._end_run()

    def _max_run_time_reached(self, cap: float) -> None:
        if self.finished or self.stop_reason is not None:
            return
        log.error("tokenswarm: maximum run time (%g s) reached; cancelling the requests in flight", cap)
        self._warn(f"stopped by the maximum run time guard (--max-run-time) after {cap:g} s: "
                   "requests in flight were cancelled")
        self.stop_reason = StopReason.MAX_RUN_TIME
        cut_stop_timeout(self.env, is_master=self.is_master)
        self._end_run()

    def _run_time_reached(self, run_time_s: float) -> None:
        if self.finished or self.stop_reason is not None:
            return
        log.info("tokenswarm: run time (-t %g s) reached; stopping the run", run_time_s)
        self._warn(f"stopped by the run time limit (-t) after {run_time_s:g} s")
        self.stop_reason = StopReason.RUN_TIME
        self._end_run()

    def interrupt(self, reason: StopReason) -> None:
        """Ctrl-C or SIGTERM: cancel what is in flight, finalise the run, exit with status 130.

        A second signal, or one while no run is going, leaves the way Locust's Ctrl-C does. A
        signal while the run is already ending (its plan, ``-t``, a guard) keeps that reason and
        only stops waiting for the streams in flight.
        """
        if self.recording is None or self.finished or self._signalled:
            gevent.get_hub().parent.throw(KeyboardInterrupt())  # Locust's own way out (its shutdown)
            return
        self._signalled = True
        log.warning("tokenswarm: %s: cancelling the requests in flight and finalising the run", reason.name)
        cut_stop_timeout(self.env, is_master=self.is_master)
        if self.stop_reason is None:
            self._warn(f"interrupted by {reason.name}: requests in flight were cancelled")
            self.stop_reason = reason
            self._end_run()
        if self.env.web_ui is not None and not getattr(self.env.parsed_options, "headless", False):
            deadline = time.monotonic() + 30.0
            while not self.finalised and time.monotonic() < deadline:
                gevent.sleep(0.1)
            self.env.web_ui.stop()  # the process exits: Locust's shutdown, with our exit status

    def on_stopping(self) -> None:
        """Locust is stopping the run: know why (a stop tokenswarm did not ask for is the web UI's
        stop button or Locust's own quit, a hard stop), and tell the users to stop."""
        if self.recording is not None and not self.finished and self.stop_reason is None:
            opts = self.env.parsed_options
            run_time = float(getattr(opts, "run_time", 0) or 0)
            if self.machine is not None and self.machine.done:
                self.stop_reason = StopReason.PLAN_DONE
            elif self.fixed_users and run_time and time.monotonic() - self._started_mono >= run_time - 1.0:
                self.stop_reason = StopReason.RUN_TIME
            else:
                web = self.env.web_ui is not None and not getattr(opts, "headless", False)
                self.stop_reason = StopReason.WEB_UI_STOP if web else StopReason.LOCUST_QUIT
                self._warn(f"stopped by {'the web UI' if web else 'Locust'} before the plan ended: "
                           "requests in flight were cancelled")
                cut_stop_timeout(self.env, is_master=self.is_master)
        if self.ctx is not None:
            self.ctx.stopping = True

    def on_quitting(self) -> None:
        """Locust is quitting: a run still going is stopped as an interruption, then finalised."""
        if self.recording is not None and not self.finished and self.stop_reason is None:
            self.stop_reason = StopReason.LOCUST_QUIT
            self._warn("Locust quit before the plan ended: requests in flight were cancelled")
            cut_stop_timeout(self.env, is_master=self.is_master)
            self.env.runner.stop()  # cancels the users' streams (records kept), then test_stop
        self.stop()

    def _end_run(self) -> None:
        if self.fixed_users:
            gevent.spawn(self.env.runner.quit)  # not from this greenlet: stopping kills the run's greenlets
        else:
            self.force_end = True  # the shape ends the test at its next tick, Locust's normal path

    def _abort(self, message: str, code: int) -> None:
        log.error("tokenswarm: %s", message)
        print(f"tokenswarm: {redact(message)}", file=sys.stderr)
        self.env.process_exit_code = code
        gevent.spawn_later(0.1, self.env.runner.quit)

    def _start_scrapers(self, base_url: str) -> None:
        t = self.scenario.target
        endpoints = []
        url = t.metrics_endpoint(base_url)
        if url:
            endpoints.append(("target", url))
        endpoints.extend(t.extra_metrics)
        if not endpoints:
            return
        assert self.recording is not None
        fh = self.recording.open_metrics_log()
        from tokenswarm.wire.auth import target_headers, url_headers

        for source, u in endpoints:
            # the target's /metrics carries the target's auth; an extra endpoint only its own URL's
            u, headers = (url_headers(u)[0], target_headers(t, base_url)) if source == "target" else url_headers(u)
            s = Scraper(source, u, t.scrape_interval_s, fh,
                        step=lambda: self.ctx.step_index if self.ctx else None, headers=headers,
                        verify_tls=t.verify_tls)
            s.scrape_once()  # a baseline sample before any load
            s.start()
            self.scrapers.append(s)

    # -- shape ---------------------------------------------------------------------------------
    def users_for(self, step: Any, runner: Any) -> int:
        if step.kind == "rate":
            return max(1, getattr(runner, "worker_count", 1) if self.is_master else 1)
        return int(step.target)

    def new_machine(self) -> StepMachine:
        load = self.scenario.load
        top = max(load.steps)
        if load.search is not None:
            top = max(top, load.search.max)
        slowest_ramp_s = top / max(load.spawn_rate, 0.1) if load.loop == "closed" else 0.0
        slowest_ramp_s = max(slowest_ramp_s, load.ramp_s)
        max_ramp_s = max(30.0, 3 * slowest_ramp_s + 10.0)
        self.probing = None
        self.adaptive = None
        if load.search is not None or load.sweep is not None:
            from tokenswarm.orchestrate.probing import ProbingPlan  # numpy and the analysis: only for these plans

            self.probing = ProbingPlan(load, self.slos, in_flight=self._in_flight,
                                       manifest=lambda: None if self.recording is None else self.recording.manifest.current)
            return StepMachine([self.probing.first_step()], max_ramp_s=max_ramp_s, after=self.probing.after)
        machine = StepMachine(plan_steps(load.loop, list(load.steps), load.warmup_s, load.step_duration_s),
                              max_ramp_s=max_ramp_s)
        if load.until is not None:  # adaptive steps: the machine asks the rule when a window could end
            budget = float(getattr(self.env.parsed_options, "tokenswarm_budget", 0) or 0) or None
            shortest = load.warmup_s + load.step_duration_s
            adaptive = self.adaptive = AdaptiveRun(
                load.until, [t.name for t in self.scenario.traffic.classes if t.weight > 0], load.step_duration_s,
                budget_s=budget, later_min_s=[shortest * (len(load.steps) - 1 - i) for i in range(len(load.steps))],
                started_s=time.perf_counter())
            machine.hold = lambda step, steady_s: adaptive.decide(step.index, step.name, steady_s,
                                                                  time.perf_counter()).hold
        return machine

    def shape_tick(self, runner: Any, now_s: float) -> tuple[int, float, list[Any]] | None:
        if self.fixed_users or self.force_end:
            return None
        if self.machine is None or (self.machine.done and self.finished):
            # a new run (first tick, or started again in the UI with possibly edited steps)
            self._apply_option_overrides(self.env.parsed_options)
            self.machine, self._pending = self.new_machine(), []
        machine = self.machine
        timeouts = len(machine.ramp_timeouts)
        transitions = machine.advance(now_s, lambda step: runner.user_count >= self.users_for(step, runner))
        if len(machine.ramp_timeouts) > timeouts:
            self._warn(f"step {machine.steps[machine.ramp_timeouts[-1]].name}: target load not reached "
                       f"(only {runner.user_count} users); it ran at the load it had")
        for tr in transitions:
            if self.recording is None or self.finished:
                self._pending.append(tr)
            else:
                self._record_transition(tr)
        if machine.done:
            self.stop_reason = self.stop_reason or StopReason.PLAN_DONE
            return None
        step = machine.current
        assert step is not None
        if self._step_msg is not None and time.monotonic() - self._last_broadcast > 5.0:
            self._broadcast(self._step_msg)  # late-joining workers learn the step too
        from tokenswarm.load.users import CLOSED_LOOP_USERS, OpenLoopUser

        classes = [OpenLoopUser] if step.kind == "rate" else [c for c in CLOSED_LOOP_USERS if c.weight > 0]
        return (self.users_for(step, runner), self.spawn_rate_for(step, machine), classes)

    def spawn_rate_for(self, step: Any, machine: StepMachine) -> float:
        """Users/s towards ``step``: ``load.spawn_rate``, or a linear ramp over ``load.ramp_s``."""
        load = self.scenario.load
        if not load.ramp_s or step.kind != "concurrency":
            return float(load.spawn_rate)
        prev = machine.steps[step.index - 1].target if step.index > 0 else 0.0
        return float(max(0.1, abs(step.target - prev) / load.ramp_s))

    def _record_transition(self, tr: Any) -> None:
        assert self.recording is not None and self.ctx is not None
        manifest = self.recording.manifest
        epoch = self.ctx.anchor.epoch(tr.at_s)  # at_s is perf_counter time, as the anchor's
        if tr.phase == "warmup":
            manifest.start_step(tr.step.index, tr.step.name, tr.step.kind, tr.step.target, at=epoch)
        elif tr.phase == "steady":
            manifest.mark_last_step(steady_at=epoch)
        elif tr.phase == PHASE_DRAIN or (tr.phase == "done" and manifest.current.steps
                                         and manifest.current.steps[-1].ended_at is None):
            # drain: the steady window closed, the load holds for its last requests (a done
            # after a drain keeps that end)
            manifest.mark_last_step(ended_at=epoch)
        if tr.phase != "done":
            wc = getattr(self.env.runner, "worker_count", 1) if self.is_master else 1
            self._step_msg = {"index": tr.step.index, "name": tr.step.name, "kind": tr.step.kind,
                              "target": tr.step.target, "phase": tr.phase, "worker_count": max(1, wc),
                              # replay: the schedule's start (epoch)
                              "steady_at": manifest.current.steps[-1].steady_at}
            self._broadcast(self._step_msg)
            log.info("tokenswarm: step %s (%s %g) %s", tr.step.name, tr.step.kind, tr.step.target, tr.phase)
        if self.adaptive is not None:
            self._set_extra("adaptive_steps", self.adaptive.summary())
        manifest.write()

    def _broadcast(self, msg: dict[str, Any]) -> None:
        self._last_broadcast = time.monotonic()
        if self.ctx is not None:
            self.ctx.set_step(msg)
        if self.is_master:
            self.env.runner.send_message(MSG_STEP, msg)

    # -- during the run --------------------------------------------------------------------------
    def on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        info = data.get("tokenswarm")
        if not info:
            return
        self.live.merge_delta(info.get("live", {}))
        for sample in info.get("health") or []:
            self.on_health_sample(sample)
        self.workers.record(client_id, info, self.collector)

    @property
    def worker_status(self) -> dict[str, dict[str, Any]]:
        """The last report of every worker, by worker id (master)."""
        return self.workers.status

    def reset_live(self) -> None:
        """Locust's "Reset Stats" also resets the live LLM statistics (records are untouched)."""
        self.live = LiveStats()
        if self.ctx is not None and not self.is_master:
            self.ctx.live = self.live

    def on_health_sample(self, sample: dict[str, Any]) -> None:
        """A generator health sample (own or a worker's): recorded with the run, and given to the listeners."""
        if self.recording is not None:
            self.recording.on_health_sample(sample)
        for listener in self.health_listeners:
            listener(sample)

    def _periodic(self) -> None:
        interval = self.scenario.load.report_interval_s or 60.0
        next_summary = time.monotonic() + interval
        while True:
            gevent.sleep(5.0)
            if self.recording is not None:
                self.recording.writer.flush()
            if self.env.parsed_options.headless:
                print(self.progress_line(), flush=True)
            if time.monotonic() >= next_summary:
                next_summary += interval
                self.write_live_summary()

    def write_live_summary(self) -> None:
        """The live window since the last one, into ``live_summary.json`` and ``live_windows.jsonl``."""
        rec, ctx = self.recording, self.ctx
        if rec is None or ctx is None:
            return
        rec.write_live_summary(lambda prev_t, prev, now_t: progress.live_window_doc(
            self.live, prev_t, prev, now_t, step=ctx.step_name, phase=ctx.phase,
            generator=self.health.last if self.health is not None else None,
            untrusted_windows=len(rec.untrusted)))

    def progress_line(self) -> str:
        ctx = self.ctx
        late = self.workers.sum("late_dispatches") if self.is_master else (ctx.late_dispatches if ctx else 0)
        step = progress.step_label(ctx.step_name if ctx else None, ctx.phase if ctx else None, self.machine)
        line = progress.progress_line(self.live, step=step, users=self.env.runner.user_count,
                                      in_flight=self._in_flight(), late_dispatches=late)
        if self.adaptive is not None and ctx is not None and ctx.step_index is not None:
            line += " | " + self.adaptive.progress(ctx.step_index)
        return line

    # -- stop ------------------------------------------------------------------------------------
    def stop(self) -> None:
        rec = self.recording
        if rec is None or self.finished:
            return
        self.finished = True
        if self.stop_reason is None:  # stopped without Locust's stop event (a direct call)
            self.stop_reason = StopReason.PLAN_DONE
        if self.ctx is not None:
            self.ctx.stopping = True
        collector = rec.collector
        if collector is not None:
            stop_workers(self.env.runner)
            deadline = time.monotonic() + float(self.env.stop_timeout or 0) + 20.0
            while not workers_settled(self.env.runner, collector) and time.monotonic() < deadline:
                gevent.sleep(0.2)
            for wid, acc in collector.workers.items():
                if not acc.final_received:
                    collector.on_worker_lost(wid, "worker stopped reporting before the end (killed or lost)")
        for g in self._greenlets:
            if g is not gevent.getcurrent():
                g.kill(block=False)
        if self.health is not None:
            self.health.stop()
        for s in self.scrapers:
            s.stop(final_scrape=True)
        rec.close_records()
        self.write_live_summary()
        self.finalize_manifest()
        rec.close()
        self.finalised = True
        print(f"tokenswarm: records and manifest written to {rec.run_dir}", flush=True)
        if self.probing is not None:
            from tokenswarm.orchestrate.probing import write_capacity

            write_capacity(rec.run_dir, self.probing)
        self.verdict, code = conclude(rec.run_dir, self.slos, broken=self.broken,
                                      outcomes=None if self.is_master else self.outcomes_emitted)
        if self.probing is not None and code == EXIT_SLO_MISSED:
            code = EXIT_OK  # a search's (or sweep's) failing probes are what it measures, not a missed gate
            print("tokenswarm: the failing probes are the search's findings (capacity.json); exit status 0", flush=True)
        reason = self.stop_reason
        if reason.interrupted:
            partial = [s.name for s in rec.manifest.current.steps if s.partial]
            print(f"tokenswarm: the run was interrupted ({reason.value}); the manifest says complete: false"
                  + (f", partial step(s): {', '.join(partial)}" if partial else "")
                  + f"; exit status {EXIT_INTERRUPTED}", file=sys.stderr, flush=True)
            code = EXIT_INTERRUPTED
        self.env.process_exit_code = code
        print(
            f"tokenswarm: report: tokenswarm report {rec.run_dir}  (writes {os.path.join(str(rec.run_dir), 'report', 'report.html')})",
            flush=True,
        )

    def finalize_manifest(self) -> None:
        """The final manifest: the workers' accounts and timing paths, totals, generator health."""
        rec = self.recording
        assert rec is not None
        collector = rec.collector
        if collector is not None:
            workers = [a.to_dict() for a in collector.workers.values()]
            for w in workers:  # each worker's timing paths, from its last report
                t = self.workers.timing_of(w.get("worker_id"))
                if t is not None:
                    w["timing"] = t
            totals = Totals(**collector.totals())
            for a in collector.workers.values():
                if a.lost_reason:
                    rec.manifest.warn(f"worker {a.worker_id}: {a.lost_reason}; missing seqs {a.missing}")
                elif a.missing:  # e.g. records the worker could not write (its log names them)
                    rec.manifest.warn(f"worker {a.worker_id}: records never arrived, missing seqs {a.missing}")
            health = self.workers.health()
        elif self.ctx is not None:
            ctx = self.ctx
            workers = [{"worker_id": ctx.worker_id, "host": os.uname().nodename, "pid": os.getpid(),
                        "clock_offset_s": 0.0, "records_received": ctx._next_seq,
                        "last_seq": ctx.last_seq, "missing_seqs": [], "lost_reason": None,
                        "timing": timing_provenance()}]
            lost = ctx.records_unwritable
            totals = Totals(requests_started=ctx.requests_started, records_received=ctx._next_seq - lost,
                            records_lost=lost, records_missing_seqs=lost)
            if lost:
                rec.manifest.warn(f"{lost} record(s) could not be written and are lost: " + "; ".join(ctx.unwritable)
                                  + ("; ..." if lost > len(ctx.unwritable) else ""))
            health = {"late_dispatches": ctx.late_dispatches, "max_schedule_lag_ms": round(ctx.max_schedule_lag_ms, 3)}
        else:
            workers, totals, health = [dict(w) for w in rec.manifest.current.workers], rec.manifest.current.totals, {}
        if self.admission is not None and self.admission.refusals():
            refused = self.admission.refusals()
            rec.manifest.update(workers_refused=tuple(refused))
            rec.manifest.warn(f"{len(refused)} worker connection(s) refused, their messages dropped: "
                              + ", ".join(f"{r['worker']} ({r['reason']})" for r in refused))
        reason = self.stop_reason or StopReason.PLAN_DONE
        rec.finalize(workers=workers, totals=totals, health=health,
                     cpu_warning_emitted=bool(getattr(self.env.runner, "cpu_warning_emitted", False)),
                     stop_reason=reason.value, complete=not reason.interrupted,
                     # -t is the plan of a fixed -u run; it cuts a shaped plan short
                     cut=reason.cuts_plan or (reason is StopReason.RUN_TIME and not self.fixed_users))
