"""Orchestrating a run on the master (or the single local process).

:class:`RunController` drives one Locust run: Locust's events (test start, shape ticks, worker
reports, stopping, quitting) come in here and go to the modules that own each job:

* :mod:`~tokenswarm.orchestrate.runstart` -- the target's preflight, the run's files and context;
* :mod:`~tokenswarm.orchestrate.loadplan` -- the step machine and its mode's hooks (search,
  sweep, adaptive steps), the pilot-sized plan, the step broadcasts (:class:`StepDriver`);
* :mod:`~tokenswarm.orchestrate.ending` -- why and how the run ends (:class:`RunEnding`: the
  guards, the circuit breaker, signals, Locust's own stops, the hard stop, the exit status);
* :mod:`~tokenswarm.orchestrate.recording` -- the run directory, manifest, records, health log;
* :mod:`~tokenswarm.orchestrate.workers` -- the workers' last reports and final batches;
* :mod:`~tokenswarm.orchestrate.accounts` -- the final manifest's workers, totals and health;
* :mod:`~tokenswarm.orchestrate.scraping` -- the Prometheus scrapers;
* :mod:`~tokenswarm.orchestrate.progress` -- the progress line and the live window documents;
* :mod:`~tokenswarm.orchestrate.verdict` -- the CI verdict.

The web UI reads the run through :meth:`RunController.snapshot` (a
:class:`~tokenswarm.webui.view.RunView`), never through these attributes.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Callable

import gevent
from locust.runners import MasterRunner

from tokenswarm.collect.manifest import new_run_id
from tokenswarm.collect.relay import Collector
from tokenswarm.collect.scrape import Scraper
from tokenswarm.load import runtime
from tokenswarm.load.context import RunContext
from tokenswarm.load.health import HealthMonitor
from tokenswarm.load.livestats import LiveStats
from tokenswarm.load.preflight import Preflight
from tokenswarm.load.setup import planned_duration_s
from tokenswarm.load.users import CLOSED_LOOP_USERS, OpenLoopUser
from tokenswarm.orchestrate import loadplan, progress, runstart
from tokenswarm.orchestrate.accounts import final_accounts
from tokenswarm.orchestrate.ending import RunEnding, StopReason, judge_run
from tokenswarm.orchestrate.loadplan import LoadPlan
from tokenswarm.orchestrate.recording import RunRecording
from tokenswarm.orchestrate.scraping import start_scrapers
from tokenswarm.orchestrate.verdict import EXIT_BAD_CONFIG, EXIT_RUN_BROKE
from tokenswarm.orchestrate.workers import WorkerReports, await_final_batches
from tokenswarm.redact import redact, remember_target
from tokenswarm.webui.view import RunSnapshot

log = logging.getLogger("tokenswarm")

MSG_STEP = "tokenswarm_step"
MSG_LIVE = "tokenswarm_live"  # a worker's last live-stats delta at test stop (web UI / progress on the master)
__all__ = ["EXIT_BAD_CONFIG", "EXIT_RUN_BROKE", "FINALISE_GRACE_S", "MSG_LIVE", "MSG_STEP", "RunController"]

#: How long past the stop timeout Locust's quitting waits for a stop under way (it waits for the
#: workers' last batches up to the stop timeout plus 20 s, then scrapes and writes the verdict).
FINALISE_GRACE_S = 60.0


class RunController:
    """One Locust run on the master or local process: plan, broadcasts, scrapers, health, progress."""

    def __init__(self, environment: Any, scenario: Any, fixed_users: bool) -> None:
        self.env = environment
        self.scenario = scenario
        remember_target(scenario.target, getattr(environment, "host", None))  # every sink masks its secrets
        self.fixed_users = fixed_users
        self.is_master = isinstance(environment.runner, MasterRunner)
        #: the run's files; None until the first run starts
        self.recording: RunRecording | None = None
        self.ctx: RunContext | None = None
        self.scrapers: list[Scraper] = []
        self.live = LiveStats()  # master: merged worker deltas; local: the ctx's own
        self.workers = WorkerReports()
        self._periodic_greenlet: gevent.Greenlet | None = None
        self.finished = False
        self.runs = 0
        self.overrides: dict[str, Any] | None = None
        self.slos: dict[str, Any] = {}
        self.verdict: dict[str, Any] | None = None
        self.health: HealthMonitor | None = None
        self.preflight: Preflight | None = None
        #: Records per outcome as this process emitted them (not on a master): answers the
        #: no-SLO verdict without reading the records back. Reset per run, not by a stats reset.
        self.outcomes_emitted: dict[str, int] = {}
        #: called with every generator health sample (the live metrics export keeps the last per worker)
        self.health_listeners: list[Callable[[dict[str, Any]], None]] = []
        self.finalised = False  # the final manifest is written
        #: the greenlet that stops the run (:meth:`stop`): outside the runner's group, so Locust's
        #: quit, which kills that group, cannot cut a finalisation short
        self._stopper: gevent.Greenlet | None = None
        self.admission: Any = None  # master: the WorkerGate (admission.py); its refusals go to the manifest
        self.ending = RunEnding(self)  # the stop reason, the guards, the circuit breaker
        #: the shaped plan (its step machine and hooks) and the step broadcasts
        self.steps = loadplan.StepDriver(
            environment, is_master=self.is_master, send=self._send_step, warn=self.warn,
            taking=lambda: self.recording is not None and not self.finished,
            manifest=lambda: None if self.recording is None else self.recording.manifest, ctx=lambda: self.ctx)
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

    @property
    def started(self) -> bool:
        """A run has opened its files."""
        return self.recording is not None

    @property
    def plan_done(self) -> bool:
        """The shaped plan ran its last step."""
        return self.plan is not None and self.plan.machine.done

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

    def warn(self, text: str) -> None:
        """A warning into the run's manifest (none before the run's files exist)."""
        if self.recording is not None:
            self.recording.manifest.warn(text)

    @property
    def plan(self) -> LoadPlan | None:
        """The shaped plan's step machine and hooks (None in a fixed -u run and before the first tick)."""
        return self.steps.plan

    def _send_step(self, msg: dict[str, Any]) -> None:
        if self.is_master:
            self.env.runner.send_message(MSG_STEP, msg)

    def halt_users(self) -> None:
        if self.ctx is not None:
            self.ctx.halted = True  # local users send nothing more while the run winds down

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        """Locust's test_start: check the target, open the run's files, start its monitors and guards."""
        opts = self.env.parsed_options
        self.runs += 1
        self.ending.begin()
        self.finalised = False
        self._stopper = None
        if self.plan is None:  # no shape tick made the plan (fixed -u mode)
            self._apply_option_overrides(opts)
        self.finished = False
        self.workers = WorkerReports()
        self.live = LiveStats()  # a new run starts from zero (also when restarted from the UI)
        # -u on the command line, or the UI's class picker choosing Locust's default (no) shape
        self.fixed_users = self.env.shape_class is None
        base_url = (self.env.host or self.scenario.target.base_url or "").rstrip("/")
        pf, self.preflight = self.preflight, None  # made at init (headless); a UI restart probes again
        try:
            pf = runstart.checked_target(self.scenario, self.slos, base_url, pf,
                                         float(getattr(opts, "tokenswarm_wait_for_server", 0) or 0))
        except runstart.StartRefused as exc:
            self._abort(str(exc), exc.exit_code)
            return
        self.outcomes_emitted = {}
        run_id = new_run_id()
        rec = self.recording = runstart.open_recording(
            self.scenario, opts, run_id, self.runs, base_url, pf, is_master=self.is_master,
            load_mode="fixed" if self.fixed_users else self.scenario.load.mode)
        self.ctx = runstart.make_context(self.env, self.scenario, self.overrides, rec, run_id, base_url, pf.model,
                                         is_master=self.is_master)
        if not self.is_master:
            self.live = self.ctx.live
        runtime.set_context(self.ctx)
        if self.fixed_users:
            self.steps.fixed(opts.num_users or getattr(self.env.runner, "target_user_count", None) or 0)
        self.steps.record_pending()
        explicit_cap = float(opts.tokenswarm_max_run_time or 0)
        # the pilot is part of the run's time: a user's --max-run-time bounds it too (a quarter of it)
        loadplan.announce_plan(self.scenario, self.slos, rec.manifest, self.ctx, fixed_users=self.fixed_users,
                               pilot_timeout_s=min(10.0, explicit_cap / 4) if explicit_cap else 10.0,
                               no_pilot=bool(getattr(opts, "tokenswarm_no_pilot", False)))
        rec.manifest.write()
        self._start_monitors(base_url)
        sc = self.scenario
        self.ending.arm(opts, lambda: planned_duration_s(sc) if not opts.run_time
                        else float(opts.run_time) + sc.load.stop_timeout_s)
        self._periodic_greenlet = gevent.spawn(
            progress.report_periodically, self.scenario.load.report_interval_s or 60.0, rec.writer.flush,
            self.progress_line if opts.headless else None, self.write_live_summary)
        log.info("tokenswarm: run %s -> %s (target %s, model %s)", run_id, rec.run_dir, base_url, pf.model)

    def _start_monitors(self, base_url: str) -> None:
        """The Prometheus scrapers and this process's generator health monitor."""
        rec, ctx = self.recording, self.ctx
        assert rec is not None and ctx is not None
        self.scrapers = start_scrapers(self.scenario.target, base_url, rec.open_metrics_log,
                                       step=lambda: self.ctx.step_index if self.ctx else None)
        self.health = HealthMonitor(ctx.worker_id, self.on_health_sample,
                                    extra=lambda: {"in_flight": ctx.in_flight, "late_dispatches": ctx.late_dispatches,
                                                   "role": ctx.role})
        self.health.start()

    def _apply_option_overrides(self, opts: Any) -> None:
        """--steps/--step-duration/--warmup (e.g. edited in the web UI) override the scenario."""
        self.scenario, self.overrides = loadplan.apply_overrides(self.scenario, self.overrides, opts,
                                                                 fixed_users=self.fixed_users)

    def _abort(self, message: str, code: int) -> None:
        log.error("tokenswarm: %s", message)
        print(f"tokenswarm: {redact(message)}", file=sys.stderr)
        self.env.process_exit_code = code
        gevent.spawn_later(0.1, self.env.runner.quit)

    # -- records -----------------------------------------------------------------------------
    def _on_record(self, record: Any, **_kw: Any) -> None:
        outcomes = self.outcomes_emitted
        outcomes[record.outcome] = outcomes.get(record.outcome, 0) + 1
        if self.plan is not None:
            self.plan.observe_record(record)
        self.ending.observe(record.outcome, record.http_status, record.error)

    def on_records_batch(self, msg: dict[str, Any]) -> None:
        """Master: a worker's batch, read by the circuit breaker until the first success, by
        load.until's counts, and by a search or sweep's probing hook (which judges each probe from
        its records)."""
        if isinstance(msg, dict):
            loadplan.read_batch(bytes(msg.get("data") or b""), self.plan, self.ending)

    # -- shape ---------------------------------------------------------------------------------
    def shape_tick(self, runner: Any, now_s: float) -> tuple[int, float, list[Any]] | None:
        """One Locust shape tick: the users, spawn rate and user classes of the current step
        (None: the plan or the run is over)."""
        if self.fixed_users or self.ending.force_end:
            return None
        plan = self.steps.plan
        if plan is None or (plan.machine.done and self.finished):
            # a new run (first tick, or started again in the UI with possibly edited steps)
            self._apply_option_overrides(self.env.parsed_options)
            budget = float(getattr(self.env.parsed_options, "tokenswarm_budget", 0) or 0) or None
            plan = loadplan.new_plan(self.scenario, self.slos, budget_s=budget, in_flight=self._in_flight,
                                     manifest=lambda: None if self.recording is None else self.recording.manifest.current)
            self.steps.start(plan)
        step = self.steps.tick(runner, now_s, self.scenario.load)
        if step is None:
            self.ending.plan_done()
            return None
        classes = [OpenLoopUser] if step.kind == "rate" else [c for c in CLOSED_LOOP_USERS if c.weight > 0]
        return (loadplan.users_for(step, runner, is_master=self.is_master),
                loadplan.spawn_rate_for(self.scenario.load, step, plan.machine), classes)

    # -- during the run --------------------------------------------------------------------------
    def on_worker_report(self, client_id: str, data: dict[str, Any]) -> None:
        info = data.get("tokenswarm")
        if not info:
            return
        self.live.merge_delta(info.get("live", {}))
        for sample in info.get("health") or []:
            self.on_health_sample(sample)
        self.workers.record(client_id, info, self.collector)

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
        ctx, plan = self.ctx, self.plan
        late = self.workers.sum("late_dispatches") if self.is_master else (ctx.late_dispatches if ctx else 0)
        return progress.run_progress_line(self.live, ctx, plan.machine if plan else None, plan.adaptive if plan else None,
                                          users=self.env.runner.user_count, in_flight=self._in_flight(),
                                          late_dispatches=late)

    # -- stop ------------------------------------------------------------------------------------
    def on_stopping(self) -> None:
        """Locust is stopping the run: know why (see :meth:`RunEnding.on_stopping`), and tell the users to stop."""
        self.ending.on_stopping()
        if self.ctx is not None:
            self.ctx.stopping = True

    def on_quitting(self) -> None:
        """Locust is quitting: a run still going is stopped as an interruption, then finalised.

        Locust reads the exit status after this event, so a stop already under way is waited for
        (at most the stop timeout plus :data:`FINALISE_GRACE_S`); one that still has not ended by
        then is abandoned and the manifest is finalised here, as a broken run.
        """
        self.ending.on_quitting()
        if self._stopper is None:
            self.stop()
            return
        waited_s = float(self.env.stop_timeout or 0) + FINALISE_GRACE_S
        self._stopper.join(timeout=waited_s)
        if not self._stopper.ready():
            self._stopper.kill(block=False)
            self._finalise_abandoned(waited_s)
        elif not self._stopper.successful():
            raise self._stopper.exception  # ready and unsuccessful: it has one

    def stop(self) -> None:
        """Locust's test_stop: collect the last records, finalise the manifest, judge the run, set the exit status.

        The work runs in a greenlet of its own and the caller waits for it. Locust fires test_stop
        in whichever greenlet stopped the runner -- its heartbeat finding the last worker missing,
        the shape at the plan's end, the web UI -- and a second stopper's ``quit`` kills the
        runner's greenlets, the first stopper among them, while it waits for the workers' last
        batches (seen: a master exited 0 with its manifest unfinalised). Outside that group the
        finalisation goes on; :meth:`on_quitting` waits for it before Locust reads the exit status.
        """
        if self._stopper is None:
            if self.recording is None or self.finished:
                return
            self.finished = True
            self._stopper = gevent.spawn(self._stop)
        self._stopper.get()  # its exception, if any, is the caller's (Locust logs a listener's)

    def _stop(self) -> None:
        rec = self.recording
        assert rec is not None
        if self.ending.reason is None:  # stopped without Locust's stop event (a direct call)
            self.ending.reason = StopReason.PLAN_DONE
        if self.ctx is not None:
            self.ctx.stopping = True
        if rec.collector is not None:
            await_final_batches(self.env.runner, rec.collector, float(self.env.stop_timeout or 0) + 20.0)
        self._stop_monitors()
        rec.close_records()
        self.write_live_summary()
        self.finalize_manifest()
        rec.close()
        self.finalised = True
        print(f"tokenswarm: records and manifest written to {rec.run_dir}", flush=True)
        self.env.process_exit_code = self._judge(rec.run_dir)
        print(
            f"tokenswarm: report: tokenswarm report {rec.run_dir}  (writes {os.path.join(str(rec.run_dir), 'report', 'report.html')})",
            flush=True,
        )

    def _finalise_abandoned(self, waited_s: float) -> None:
        """The stop did not end within ``waited_s`` of Locust quitting: the manifest is finalised
        as it stands and the run is broken."""
        rec = self.recording
        assert rec is not None
        message = f"the run's stop did not end within {waited_s:g} s of Locust quitting; the manifest was finalised as it stood"
        self.ending.broken = self.ending.broken or message
        self.warn(message)
        if not self.finalised:
            rec.close_records()
            self.finalize_manifest()
            rec.close()
            self.finalised = True
        print(f"tokenswarm: {message}", file=sys.stderr, flush=True)
        self.env.process_exit_code = EXIT_RUN_BROKE

    def _stop_monitors(self) -> None:
        self.ending.disarm()
        if self._periodic_greenlet is not None and self._periodic_greenlet is not gevent.getcurrent():
            self._periodic_greenlet.kill(block=False)
        if self.health is not None:
            self.health.stop()
            self.on_health_sample(self.health.final_sample())
        for s in self.scrapers:
            s.stop(final_scrape=True)

    def _judge(self, run_dir: Path) -> int:
        """The verdict (slo.json, junit.xml; capacity.json of a search or sweep) and the exit status."""
        assert self.recording is not None
        self.verdict, code = judge_run(run_dir, self.slos, self.plan.probing if self.plan is not None else None,
                                       broken=self.ending.broken, reason=self.ending.reason,
                                       outcomes=None if self.is_master else self.outcomes_emitted,
                                       partial_steps=[s.name for s in self.recording.manifest.current.steps if s.partial])
        return code

    def finalize_manifest(self) -> None:
        """The final manifest: the workers' accounts and timing paths, totals, generator health."""
        rec = self.recording
        assert rec is not None
        workers, totals, health = final_accounts(rec, self.workers, self.ctx, self.admission)
        reason = self.ending.reason or StopReason.PLAN_DONE
        rec.finalize(workers=workers, totals=totals, health=health,
                     cpu_warning_emitted=bool(getattr(self.env.runner, "cpu_warning_emitted", False)),
                     stop_reason=reason.value, complete=not reason.interrupted,
                     # -t is the plan of a fixed -u run; it cuts a shaped plan short
                     cut=reason.cuts_plan or (reason is StopReason.RUN_TIME and not self.fixed_users))
