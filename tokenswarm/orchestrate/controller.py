"""The master (or single local process) side of a run: run directory, plan, scraping, progress.

:class:`RunController` owns the manifest, the load plan's state machine (driven by the
scenario shape's ticks), the Prometheus scrapers, the records writer and -- on a master --
the collector of worker batches, the merged live statistics and the workers' health. At the
end it waits for every worker's final batch, writes the manifest and the CI verdict.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust.runners import MasterRunner

from tokenswarm.collect.manifest import Manifest, command_line, default_run_dir, new_run_id
from tokenswarm.collect.parquet_store import STORE_FORMAT_VERSION, ParquetRecordsWriter, choose_format
from tokenswarm.collect.relay import Collector, FileSink
from tokenswarm.collect.scrape import Scraper
from tokenswarm.collect.writer import RecordsWriter
from tokenswarm.load import runtime
from tokenswarm.load.breaker import CircuitBreaker
from tokenswarm.load.context import RunContext
from tokenswarm.load.health import HealthMonitor, merge_windows
from tokenswarm.load.livestats import LiveStats, summary_rows
from tokenswarm.load.preflight import Preflight, PreflightError, preflight
from tokenswarm.load.setup import (
    build_worker_context,
    planned_duration_s,
    sc_data,
    set_class_weights,
)
from tokenswarm.load.steps import StepMachine, plan_steps
from tokenswarm.load.timing import provenance as timing_provenance
from tokenswarm.redact import redact, remember_target

#: Locust worker states in which a worker generates no load (and so sends no final message).
_IDLE_WORKER_STATES = ("missing", "stopped", "ready", "init")
log = logging.getLogger("tokenswarm")

MSG_STEP = "tokenswarm_step"
MSG_LIVE = "tokenswarm_live"  # a worker's last live-stats delta at test stop (web UI / progress on the master)
EXIT_BAD_CONFIG = 2
EXIT_RUN_BROKE = 3



class RunController:
    """Owns the run directory, manifest, shape state, scraping and progress (master/local)."""

    def __init__(self, environment: Any, scenario: Any, fixed_users: bool) -> None:
        self.env = environment
        self.scenario = scenario
        remember_target(scenario.target, getattr(environment, "host", None))  # every sink masks its secrets
        self.fixed_users = fixed_users
        self.is_master = isinstance(environment.runner, MasterRunner)
        self.machine: StepMachine | None = None
        self.manifest: Manifest | None = None
        self.writer: RecordsWriter | None = None
        self.collector: Collector | None = None
        self.ctx: RunContext | None = None
        self.scrapers: list[Scraper] = []
        self.metrics_fh = None
        self.run_dir: Path | None = None
        self.live = LiveStats()  # master: merged worker deltas; local: the ctx's own
        self.worker_status: dict[str, dict[str, Any]] = {}
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
        self.health_fh = None
        self.untrusted: list[list[Any]] = []  # [start, end, reason] windows where timings are suspect
        self.health_peaks: dict[str, float] = {}
        self.preflight: Preflight | None = None
        self.breaker = CircuitBreaker()
        self.broken: str | None = None  # the circuit breaker's message, when it stopped the run
        if hasattr(environment.events, "llm_request") and not self.is_master:
            environment.events.llm_request.add_listener(self._on_record)

    # -- start -------------------------------------------------------------------------------
    def start(self) -> None:
        opts = self.env.parsed_options
        sc = self.scenario
        self.runs += 1
        self.force_end = False
        self._last_window = None
        if self.machine is None:  # no shape tick made the plan (fixed -u mode)
            self._apply_option_overrides(opts)
        sc = self.scenario
        self.finished = False
        self.worker_status = {}
        self.live = LiveStats()  # a new run starts from zero (also when restarted from the UI)
        # -u on the command line, or the UI's class picker choosing Locust's default (no) shape
        self.fixed_users = self.env.shape_class is None
        base_url = (self.env.host or sc.target.base_url or "").rstrip("/")
        if not base_url:
            self._abort("no target: give --host or target.base_url in the scenario", EXIT_BAD_CONFIG)
            return
        pf, self.preflight = self.preflight, None  # made at init (headless); a UI restart probes again
        try:
            if pf is None:
                pf = preflight(base_url, sc.target, float(getattr(opts, "tokenswarm_wait_for_server", 0) or 0))
        except PreflightError as exc:
            self._abort(str(exc), EXIT_RUN_BROKE)
            return
        model, models_response, server_headers = pf.model, pf.models, pf.server_headers
        self.breaker, self.broken = CircuitBreaker(), None
        run_id = new_run_id()
        out = Path(opts.out) if opts.out else default_run_dir(run_id)
        if opts.out and self.runs > 1:
            out = Path(f"{opts.out}-{self.runs}")
        self.run_dir = out
        out.mkdir(parents=True, exist_ok=True)
        self.manifest = Manifest(out, run_id, scenario=sc.resolved(), scenario_name=sc.name,
                                 command=command_line(), load_mode="fixed" if self.fixed_users else sc.load.mode)
        self.manifest.data["target"] = {"base_url": base_url, "api": sc.target.api, "model": model,
                                        "models_response": models_response, "server_headers": server_headers}
        records_format = choose_format(getattr(opts, "records_format", "auto") or "auto", sc.load,
                                       bool(opts.records_gzip or opts.records_rotate_mb))
        self.manifest.data["records_store"] = {"format": records_format, "format_version": STORE_FORMAT_VERSION}
        if records_format == "parquet":
            self.writer = ParquetRecordsWriter(out)  # type: ignore[assignment]  # same interface
        else:
            self.writer = RecordsWriter(out, gzip_output=bool(opts.records_gzip),
                                        rotate_bytes=int(opts.records_rotate_mb * 1e6) or None)
        # Workers get everything they need through the spawn message's parsed options.
        opts.tokenswarm_scenario_data = json.dumps(sc_data(sc, self.overrides))
        opts.tokenswarm_run_id = run_id
        opts.tokenswarm_base_url = base_url
        opts.tokenswarm_model = model
        if self.is_master:
            self.collector = Collector(self.writer)
            ctx_sink = FileSink(self.writer)  # unused for records on the master, keeps the API uniform
            self.ctx = RunContext(scenario=sc, run_id=run_id, worker_id="master", base_url=base_url, model=model,
                                  sink=ctx_sink, role="master", events=self.env.events)
        else:
            self.ctx = build_worker_context(self.env, sc, run_id, base_url, model, FileSink(self.writer), "local", 0)
            self.live = self.ctx.live
        runtime.set_context(self.ctx)
        if self.fixed_users:
            self.machine = None
            users = opts.num_users or getattr(self.env.runner, "target_user_count", None) or 0
            self._step_msg = {"index": 0, "name": f"u{users}", "kind": "concurrency",
                              "target": users, "phase": "steady", "worker_count": 1}
            self.manifest.data["steps"] = [{"index": 0, "name": self._step_msg["name"], "kind": "concurrency",
                                            "target": users, "started_at": time.time(),
                                            "steady_at": time.time(), "ended_at": None}]
            self._broadcast(self._step_msg)
        for tr in self._pending:  # the shape's first tick comes before test_start
            self._record_transition(tr)
        self._pending = []
        self.manifest.write()
        self.scrapers = []
        self._start_scrapers(base_url)
        self.untrusted, self.health_peaks = [], {}
        self.health_fh = open(out / "generator_health.jsonl", "ab")
        ctx = self.ctx
        self.health = HealthMonitor(ctx.worker_id, self.on_health_sample,
                                    extra=lambda: {"in_flight": ctx.in_flight, "late_dispatches": ctx.late_dispatches,
                                                   "role": ctx.role})
        self.health.start()
        if opts.headless and not opts.run_time:
            cap = opts.tokenswarm_max_run_time or (planned_duration_s(sc) * 1.5 + 120.0)
            self._greenlets.append(gevent.spawn_later(cap, self._max_run_time_reached, cap))
        self._greenlets.append(gevent.spawn(self._periodic))
        log.info("tokenswarm: run %s -> %s (target %s, model %s)", run_id, out, base_url, model)

    def _apply_option_overrides(self, opts: Any) -> None:
        """--steps/--step-duration/--warmup (e.g. edited in the web UI) override the scenario."""
        from tokenswarm.load.scenario import ScenarioError, load_scenario

        extra: dict[str, Any] = {}
        try:
            if (getattr(opts, "tokenswarm_steps", "") or "").strip():
                extra["load.steps"] = [float(x) for x in str(opts.tokenswarm_steps).replace(";", ",").split(",") if x.strip()]
            if str(getattr(opts, "tokenswarm_step_duration", "") or "").strip():
                extra["load.step_duration_s"] = float(opts.tokenswarm_step_duration)
            if str(getattr(opts, "tokenswarm_warmup", "") or "").strip():
                extra["load.warmup_s"] = float(opts.tokenswarm_warmup)
        except ValueError as exc:
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
        set_class_weights(self.scenario, "closed" if self.fixed_users else self.scenario.load.mode)

    def _on_record(self, record: Any, **_kw: Any) -> None:
        self._breaker_observe(record.outcome, record.http_status, record.error)

    def on_records_batch(self, msg: dict[str, Any]) -> None:
        """Master: a worker's batch, read by the circuit breaker until the first success."""
        if not self.breaker.armed or not isinstance(msg, dict):
            return
        import orjson

        for line in bytes(msg.get("data") or b"").splitlines():
            try:
                r = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue
            self._breaker_observe(r.get("outcome", ""), r.get("http_status"), r.get("error"))
            if not self.breaker.armed:
                return

    def _breaker_observe(self, outcome: str, http_status: int | None, error: str | None) -> None:
        message = self.breaker.observe(outcome, http_status, error)
        if message is None or self.finished:
            return
        self.broken = message
        print(f"tokenswarm: {redact(message)}", file=sys.stderr, flush=True)
        if self.manifest is not None:
            self.manifest.warn(message)
        if self.ctx is not None:
            self.ctx.halted = True  # local users send nothing more while the run winds down
        if self.fixed_users:
            gevent.spawn(self.env.runner.quit)  # not from this greenlet: stopping kills the run's greenlets
        else:
            self.force_end = True  # the shape ends the test at its next tick, Locust's normal path

    def _max_run_time_reached(self, cap: float) -> None:
        log.error("tokenswarm: maximum run time (%.0f s) reached; stopping the run", cap)
        if self.manifest is not None:
            self.manifest.warn(f"stopped by the maximum run time guard after {cap:.0f} s")
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
        assert self.run_dir is not None
        self.metrics_fh = open(self.run_dir / "server_metrics.jsonl", "ab")
        from tokenswarm.load.auth import target_headers, url_headers

        for source, u in endpoints:
            # the target's /metrics carries the target's auth; an extra endpoint only its own URL's
            u, headers = (url_headers(u)[0], target_headers(t, base_url)) if source == "target" else url_headers(u)
            s = Scraper(source, u, t.scrape_interval_s, self.metrics_fh,
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
        slowest_ramp_s = max(load.steps) / max(load.spawn_rate, 0.1) if load.mode == "closed" else 0.0
        slowest_ramp_s = max(slowest_ramp_s, load.ramp_s)
        return StepMachine(plan_steps(load.mode, list(load.steps), load.warmup_s, load.step_duration_s),
                           max_ramp_s=max(30.0, 3 * slowest_ramp_s + 10.0))

    def shape_tick(self, runner: Any, now_s: float):
        if self.fixed_users or self.force_end:
            return None
        if self.machine is None or (self.machine.done and self.finished):
            # a new run (first tick, or started again in the UI with possibly edited steps)
            self._apply_option_overrides(self.env.parsed_options)
            self.machine, self._pending = self.new_machine(), []
        machine = self.machine
        timeouts = len(machine.ramp_timeouts)
        transitions = machine.advance(now_s, lambda step: runner.user_count >= self.users_for(step, runner))
        if len(machine.ramp_timeouts) > timeouts and self.manifest is not None:
            self.manifest.warn(f"step {machine.steps[machine.ramp_timeouts[-1]].name}: target load not reached "
                               f"(only {runner.user_count} users); it ran at the load it had")
        for tr in transitions:
            if self.manifest is None or self.finished:
                self._pending.append(tr)
            else:
                self._record_transition(tr)
        if machine.done:
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
            return load.spawn_rate
        prev = machine.steps[step.index - 1].target if step.index > 0 else 0.0
        return max(0.1, abs(step.target - prev) / load.ramp_s)

    def _record_transition(self, tr: Any) -> None:
        assert self.manifest is not None and self.ctx is not None
        steps = self.manifest.data["steps"]
        epoch = self.ctx.anchor.epoch(tr.at_s)  # at_s is perf_counter time, as the anchor's
        if tr.phase == "warmup":
            steps.append({"index": tr.step.index, "name": tr.step.name, "kind": tr.step.kind,
                          "target": tr.step.target, "started_at": epoch, "steady_at": None, "ended_at": None})
            if len(steps) > 1 and steps[-2]["ended_at"] is None:
                steps[-2]["ended_at"] = epoch
        elif tr.phase == "steady":
            steps[-1]["steady_at"] = epoch
        elif tr.phase == "done":
            steps[-1]["ended_at"] = epoch
        if tr.phase != "done":
            wc = getattr(self.env.runner, "worker_count", 1) if self.is_master else 1
            self._step_msg = {"index": tr.step.index, "name": tr.step.name, "kind": tr.step.kind,
                              "target": tr.step.target, "phase": tr.phase, "worker_count": max(1, wc),
                              "steady_at": steps[-1]["steady_at"]}  # replay: the schedule's start (epoch)
            self._broadcast(self._step_msg)
            log.info("tokenswarm: step %s (%s %g) %s", tr.step.name, tr.step.kind, tr.step.target, tr.phase)
        self.manifest.write()

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
        info = {k: v for k, v in info.items() if k not in ("live", "health")}
        info["client_id"] = client_id
        info["seen_at"] = time.time()
        self.worker_status[info["worker_id"]] = info
        if self.collector is not None:
            acc = self.collector.account(info["worker_id"])
            acc.client_id, acc.host, acc.pid = client_id, info.get("host"), info.get("pid")
            acc.clock_offset_s = round(info.get("wall_s", time.time()) - time.time(), 3)
            self.collector.on_progress(info["worker_id"], info.get("last_seq"), info.get("requests_started", 0))

    def reset_live(self) -> None:
        """Locust's "Reset Stats" also resets the live LLM statistics (records are untouched)."""
        self.live = LiveStats()
        if self.ctx is not None and not self.is_master:
            self.ctx.live = self.live

    def on_health_sample(self, sample: dict[str, Any]) -> None:
        """A generator health sample (own or a worker's): log it, remember untrusted windows."""
        import orjson

        if self.health_fh is not None and not self.health_fh.closed:
            self.health_fh.write(orjson.dumps(sample) + b"\n")
            self.health_fh.flush()
        for key in ("cpu_pct", "loop_lag_max_ms", "rss_mb"):
            v = sample.get(key)
            if v is not None:
                self.health_peaks[key] = max(self.health_peaks.get(key, 0.0), float(v))
        if sample.get("untrusted") and sample.get("role") != "master":
            reason = f"{sample['worker_id']}: " + "; ".join(sample["untrusted"])
            self.untrusted.append([sample["t"] - 5.0, sample["t"], reason])
            self.untrusted = merge_windows(self.untrusted, 5.0)[-200:]  # bounded for soak runs

    def _periodic(self) -> None:
        interval = self.scenario.load.report_interval_s or 60.0
        next_summary = time.monotonic() + interval
        while True:
            gevent.sleep(5.0)
            if self.writer is not None:
                self.writer.flush()
            if self.env.parsed_options.headless:
                print(self.progress_line(), flush=True)
            if time.monotonic() >= next_summary:
                next_summary += interval
                self.write_live_summary()

    def write_live_summary(self) -> None:
        """``live_summary.json`` (last window, replaced atomically) + a line in ``live_windows.jsonl``.

        A soak that is killed still leaves these readable next to the records.
        """
        import orjson

        from tokenswarm.load.livestats import snapshot, window_summary

        if self.run_dir is None or self.ctx is None:
            return
        now_t = time.time()
        total = self.live.total()
        prev_t, prev = self._last_window or (self.manifest.data["started_at"] if self.manifest else now_t, None)
        window = window_summary(total, prev, now_t - prev_t)
        doc = {"written_at": round(now_t, 3), "window_start": round(prev_t, 3), "window_end": round(now_t, 3),
               "step": self.ctx.step_name, "phase": self.ctx.phase, "window": window,
               "cumulative": {"requests": total.requests, "failures": total.failures,
                              "output_tokens": total.output_tokens},
               "generator": self.health.last if self.health is not None else None,
               "untrusted_windows": len(self.untrusted)}
        self._last_window = (now_t, snapshot(total))
        tmp = self.run_dir / "live_summary.json.tmp"
        tmp.write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
        os.replace(tmp, self.run_dir / "live_summary.json")
        with open(self.run_dir / "live_windows.jsonl", "ab") as fh:
            fh.write(orjson.dumps(doc) + b"\n")

    def progress_line(self) -> str:
        live = self.live
        tok_s, req_s, err_s = live.rate(10)
        in_flight = (sum(w.get("in_flight", 0) for w in self.worker_status.values()) if self.is_master
                     else (self.ctx.in_flight if self.ctx else 0))
        late = (sum(w.get("late_dispatches", 0) for w in self.worker_status.values()) if self.is_master
                else (self.ctx.late_dispatches if self.ctx else 0))
        total = [r for r in summary_rows(live, []) if r["name"] == "Total"][0]
        step = "-"
        if self.ctx is not None and self.ctx.step_name:
            step = f"{self.ctx.step_name} {self.ctx.phase}"
            if self.machine is not None:
                left = self.machine.remaining_s(time.perf_counter())
                nsteps = len(self.machine.steps)
                step += f" ({self.machine.index + 1}/{nsteps}" + (f", {left:.0f}s left)" if left is not None else ", ramping)")
        line = (f"[tokenswarm] step {step} | users {self.env.runner.user_count} | in flight {in_flight} | "
                f"out {tok_s:.0f} tok/s | {req_s:.1f} req/s | errors {total['failures']} | "
                f"TTFT p50 {fmt(total['ttft_p50_ms'])} p99 {fmt(total['ttft_p99_ms'])} ms | "
                f"TPOT p50 {fmt(total['tpot_p50_ms'])} ms")
        if late:
            line += f" | WARNING generator behind schedule: {late} late dispatches"
        return line

    # -- stop ------------------------------------------------------------------------------------
    def stop(self) -> None:
        if self.manifest is None or self.finished:
            return
        self.finished = True
        if self.ctx is not None:
            self.ctx.stopping = True
        if self.collector is not None:
            self._stop_workers()
            deadline = time.monotonic() + float(self.env.stop_timeout or 0) + 20.0
            while not self._workers_settled() and time.monotonic() < deadline:
                gevent.sleep(0.2)
            for wid, acc in self.collector.workers.items():
                if not acc.final_received:
                    self.collector.on_worker_lost(wid, "worker stopped reporting before the end (killed or lost)")
        for g in self._greenlets:
            if g is not gevent.getcurrent():
                g.kill(block=False)
        if self.health is not None:
            self.health.stop()
        for s in self.scrapers:
            s.stop(final_scrape=True)
        if self.metrics_fh is not None:
            self.metrics_fh.close()
        if self.writer is not None:
            self.writer.close()
        self.write_live_summary()
        self.finalize_manifest()
        if self.health_fh is not None:
            self.health_fh.close()
        print(f"tokenswarm: records and manifest written to {self.run_dir}", flush=True)
        self._verdict()
        print(
            f"tokenswarm: report: tokenswarm report {self.run_dir}  (writes {os.path.join(str(self.run_dir), 'report', 'report.html')})",
            flush=True,
        )

    def _verdict(self) -> None:
        """SLO verdict on the exact records: slo.json, junit.xml, a table, the exit status."""
        from tokenswarm.orchestrate.verdict import verdict_table, write_verdict

        try:
            v = write_verdict(self.run_dir, self.slos)
        except Exception as exc:  # the verdict must never hide the run's own files
            log.exception("tokenswarm: could not evaluate the SLO verdict: %s", exc)
            self.env.process_exit_code = EXIT_RUN_BROKE
            return
        self.verdict = v
        print(verdict_table(v), flush=True)
        self.env.process_exit_code = v["exit_status"]
        if self.broken:
            self.env.process_exit_code = EXIT_RUN_BROKE  # stopped by the circuit breaker

    def _stop_workers(self) -> None:
        """Make sure workers stop (and so flush) before the master closes the run directory.

        A worker still running here means Locust is quitting (headless end, the run-time
        limit, an abort): its quit fires the master's test_stop *before* telling workers
        anything, so without this the last records would arrive after the files were closed.
        The message is "quit", not "stop": a worker stops (and sends its final records) on
        either, but after "stop" Locust's worker sleeps ``stop_timeout`` before it reads its
        next message, so a later quit reached it 30 s late and it lingered until then.
        """
        from locust.rpc import Message

        runner = self.env.runner
        for client in list(runner.clients.all):
            if client.state not in _IDLE_WORKER_STATES:
                runner.server.send_to_client(Message("quit", None, client.id))

    def _workers_settled(self) -> bool:
        """Every worker that was generating load has sent its final message (or has gone).

        Workers are matched by Locust client id, which every records/final message carries, so
        a worker whose first heartbeat report had not arrived yet (a run of a few seconds) is
        still waited for instead of being declared lost at once.
        """
        assert self.collector is not None
        if not self.is_master:
            return True
        busy = {c.id for c in self.env.runner.clients.all if c.state not in _IDLE_WORKER_STATES}
        final = {acc.client_id for acc in self.collector.workers.values() if acc.final_received}
        return busy <= final

    def finalize_manifest(self) -> None:
        m = self.manifest
        assert m is not None
        d = m.data
        d["ended_at"] = time.time()
        for st in d["steps"]:
            if st.get("ended_at") is None:
                st["ended_at"] = d["ended_at"]
        if self.collector is not None:
            d["workers"] = [a.to_dict() for a in self.collector.workers.values()]
            for w in d["workers"]:  # each worker's timing paths, from its last report
                t = self.worker_status.get(w.get("worker_id"), {}).get("timing")
                if t is not None:
                    w["timing"] = t
            d["totals"] = self.collector.totals()
            for a in self.collector.workers.values():
                if a.lost_reason:
                    m.warn(f"worker {a.worker_id}: {a.lost_reason}; missing seqs {a.missing}")
            health = self._health_from_workers()
        elif self.ctx is not None:
            ctx = self.ctx
            d["workers"] = [{"worker_id": ctx.worker_id, "host": os.uname().nodename, "pid": os.getpid(),
                             "clock_offset_s": 0.0, "records_received": ctx._next_seq,
                             "last_seq": ctx.last_seq, "missing_seqs": [], "lost_reason": None,
                             "timing": timing_provenance()}]
            d["totals"] = {"requests_started": ctx.requests_started, "records_received": ctx._next_seq,
                           "records_lost": 0}
            health = {"late_dispatches": ctx.late_dispatches, "max_schedule_lag_ms": round(ctx.max_schedule_lag_ms, 3)}
        else:
            health = {}
        health["cpu_warning"] = bool(getattr(self.env.runner, "cpu_warning_emitted", False)) or health.get("cpu_warning", False)
        health["max_cpu_pct"] = self.health_peaks.get("cpu_pct")
        health["max_loop_lag_ms"] = self.health_peaks.get("loop_lag_max_ms")
        health["max_rss_mb"] = self.health_peaks.get("rss_mb")
        health["untrusted_windows"] = self.untrusted
        if self.untrusted:
            health["cpu_warning"] = health["cpu_warning"] or any("CPU" in w[2] for w in self.untrusted)
            m.warn(f"the load generator was a bottleneck in {len(self.untrusted)} window(s) "
                   f"({self.untrusted[0][2]}): timings there are inflated")
        d["generator_health"] = {**d.get("generator_health", {}), **health}
        if health.get("late_dispatches"):
            m.warn(f"the generator fell behind its arrival schedule {health['late_dispatches']} times "
                   "(latencies count from the schedule; see schedule_lag_ms)")
        if health.get("cpu_warning"):
            m.warn("a load generator process used more than 90% CPU: timings may be inflated")
        d["complete"] = True
        m.write()

    def _health_from_workers(self) -> dict[str, Any]:
        ws = list(self.worker_status.values())
        return {"late_dispatches": sum(w.get("late_dispatches", 0) for w in ws),
                "max_schedule_lag_ms": max((w.get("max_schedule_lag_ms", 0) for w in ws), default=0.0),
                "cpu_warning": any(w.get("cpu_warning") for w in ws)}




def fmt(v: float | None) -> str:
    return "-" if v is None else f"{v:.0f}"
