"""Wiring tokenswarm into Locust: options, events, messages, run directory, progress.

Imported by the locustfile (``locustfiles/llm.py`` -> ``tokenswarm.locustfile``). Roles:

* local (no ``--master``/``--worker``): loads the scenario, runs users, writes the run dir.
* master: loads the scenario, runs the shape, scrapes metrics, collects worker records.
* worker: presents the worker token (:mod:`~tokenswarm.orchestrate.admission`), gets the
  resolved scenario, run id and target through the spawn message (Locust forwards custom
  options only then), runs users and relays records.

The web UI and the master port bind 127.0.0.1 unless told otherwise
(:mod:`~tokenswarm.orchestrate.exposure`), and the target's credentials go only to the target
the process was started for (:func:`tokenswarm.wire.auth.set_credentials_scope`).
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from typing import Any

import gevent
from locust import events
from locust.event import EventHook
from locust.runners import MasterRunner, WorkerRunner

from tokenswarm.collect.relay import MSG_FINAL, MSG_RECORDS, RelaySink, spool_dir_default
from tokenswarm.load import runtime
from tokenswarm.load.context import make_worker_id
from tokenswarm.load.health import HealthMonitor
from tokenswarm.load.lifecycle import ExitFlush, is_local_worker, master_pid, parent_unchanged, watch_parent
from tokenswarm.load.preflight import PreflightError, PromptTooLongError, check_prompt_lengths, preflight
from tokenswarm.load.setup import (  # noqa: F401  (planned_duration_s, scenario_slos: part of this module's API)
    apply_user_settings,
    build_worker_context,
    load_scenario_from_options,
    planned_duration_s,
    scenario_slos,
    set_class_weights,
)
from tokenswarm.orchestrate import exposure
from tokenswarm.orchestrate.admission import MSG_REFUSED, WorkerGate, send_hello, token_from
from tokenswarm.orchestrate.controller import MSG_LIVE, MSG_STEP, RunController
from tokenswarm.orchestrate.ending import MSG_HARD_STOP
from tokenswarm.orchestrate.options import add_options
from tokenswarm.orchestrate.outputs import html_refusal, redact_exceptions, redact_locust_outputs
from tokenswarm.orchestrate.runflags import RunFlags
from tokenswarm.orchestrate.verdict import EXIT_BAD_CONFIG, EXIT_RUN_BROKE, merge_slos, parse_slo_args
from tokenswarm.redact import install_log_redaction, remember, remember_target
from tokenswarm.webui import install as install_webui
from tokenswarm.wire.auth import set_credentials_scope
from tokenswarm.wire.timing import provenance as timing_provenance
from tokenswarm.workload.scenario import ScenarioError, apply_overrides, parse_scenario

log = logging.getLogger("tokenswarm")
install_log_redaction()  # every log line of this process, Locust's too, goes through redact()


def install_events(evs: Any) -> None:
    """Add tokenswarm's streaming hooks to a Locust ``Events`` object (idempotent).

    * ``llm_request(record, user)`` -- a request finished (any outcome), with its record.
    * ``llm_first_token(task, ttft_ms, base)`` -- the first content chunk arrived (``base``:
      the request's :class:`~tokenswarm.record.RecordIdentity`).
    * ``llm_chunk(task, offset_ms, chunks, base)`` -- content chunk(s) arrived in one read.
    """
    for name in ("llm_request", "llm_first_token", "llm_chunk"):
        if not isinstance(getattr(evs, name, None), EventHook):
            setattr(evs, name, EventHook())  # type: ignore[no-untyped-call]  # Locust's hook class is untyped


install_events(events)


events.init_command_line_parser.add_listener(add_options)  # type: ignore[no-untyped-call]  # Locust's hook is untyped


# ---------------------------------------------------------------------------------------------
# master / local
# ---------------------------------------------------------------------------------------------


@events.init.add_listener
def _on_init(environment: Any, **_kw: Any) -> None:
    install_events(environment.events)
    runner = environment.runner
    opts = environment.parsed_options
    if opts is None:
        return
    if not getattr(opts, "print_stats", False):
        # Quiet terminal: the progress lines and the verdict, without Locust's periodic stats
        # tables between them (Locust reads this flag after init; --print-stats brings them back).
        opts.only_summary = True
    token = token_from(getattr(opts, "tokenswarm_worker_token", ""))
    if token:
        remember(token)  # never printed, logged or stored
    opts.tokenswarm_worker_token = ""  # parsed options travel in the spawn message: not the token
    if isinstance(runner, WorkerRunner):
        _init_worker(environment, token)
        return
    gate = _close_the_doors(environment, token)
    try:
        sc, overrides = load_scenario_from_options(opts)
        sc = RunFlags.from_options(opts).check(sc.path, overrides, sc)  # bad --steps/-u/-t...: exit 2 here
        slos = merge_slos(scenario_slos(sc), parse_slo_args(list(opts.tokenswarm_slo or [])))
    except (ScenarioError, ValueError) as exc:
        print(f"tokenswarm: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    remember_target(sc.target, environment.host)
    # The target's credentials go to the target this process was started for, and nowhere else
    # (a host typed into the web UI's form gets none unless --credentials-to-any-host).
    opts.tokenswarm_credentials_url = environment.host or sc.target.base_url or ""
    set_credentials_scope(opts.tokenswarm_credentials_url or None,
                          any_host=bool(getattr(opts, "tokenswarm_credentials_to_any_host", False)))
    first_preflight = None
    target_url = (environment.host or sc.target.base_url or "").rstrip("/")
    if opts.headless and target_url:
        # before any user exists: a failed preflight exits here, with no user tracebacks
        try:
            first_preflight = preflight(target_url, sc.target, float(opts.tokenswarm_wait_for_server or 0),
                                        models=sc.model_names())
        except PreflightError as exc:
            print(f"tokenswarm: {exc}", file=sys.stderr)
            sys.exit(EXIT_RUN_BROKE)
        try:
            check_prompt_lengths(sc, first_preflight)
        except PromptTooLongError as exc:
            print(f"tokenswarm: {exc}", file=sys.stderr)
            sys.exit(EXIT_BAD_CONFIG)
    fixed = opts.num_users is not None
    if fixed:
        environment.shape_class = None  # -u/--users: a fixed concurrency for -t, as Locust users expect
    set_class_weights(sc, "closed" if fixed else sc.load.loop)
    if not opts.stop_timeout:
        environment.stop_timeout = sc.load.stop_timeout_s
    if not environment.host and sc.target.base_url:
        environment.host = sc.target.base_url
    apply_user_settings(sc, environment.host or sc.target.base_url or "")
    ctl = RunController(environment, sc, fixed)
    ctl.overrides = overrides or None
    ctl.slos = slos
    ctl.preflight = first_preflight
    runtime.set_run(ctl)
    ctl.admission = gate
    if isinstance(runner, MasterRunner):
        collector_proxy = _CollectorProxy(ctl)
        runner.register_message(MSG_RECORDS, collector_proxy.on_records)
        runner.register_message(MSG_FINAL, collector_proxy.on_final)
        environment.events.worker_report.add_listener(lambda client_id, data, **kw: ctl.on_worker_report(client_id, data))
        runner.register_message(MSG_LIVE, lambda environment, msg, **kw: ctl.live.merge_delta(msg.data))
    else:
        runner.register_message(MSG_STEP, lambda environment, msg, **kw: None)  # local: ctx updated directly
    environment.events.test_start.add_listener(lambda environment, **kw: ctl.start())
    environment.events.test_stopping.add_listener(lambda environment, **kw: ctl.on_stopping())
    environment.events.test_stop.add_listener(lambda environment, **kw: ctl.stop())
    environment.events.reset_stats.add_listener(lambda **kw: ctl.reset_live())
    environment.events.quitting.add_listener(lambda environment, **kw: ctl.on_quitting())
    if environment.web_ui is not None:
        install_webui(environment, ctl)
    if getattr(opts, "tokenswarm_metrics_port", 0):
        _serve_live_metrics(ctl, int(opts.tokenswarm_metrics_port), str(opts.tokenswarm_metrics_host or "127.0.0.1"))


def _serve_live_metrics(ctl: RunController, port: int, host: str) -> None:
    """``--metrics-port``: the live statistics in Prometheus format (imported only then: prometheus_client)."""
    from tokenswarm.orchestrate import export  # prometheus_client: only with --metrics-port

    try:
        exporter = export.serve(ctl, port, host)
    except OSError as exc:
        print(f"tokenswarm: cannot serve --metrics-port {port} on {host}: {exc}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    ctl.health_listeners.append(exporter.on_health_sample)


def _close_the_doors(environment: Any, token: str | None) -> WorkerGate | None:
    """Master/local, before anything is served: the worker gate, Locust's files, the web UI's exposure.

    Runs in ``init``, before Locust's web server starts and before this greenlet first yields,
    so no worker connection reaches Locust's handler ungated. Exits with status 2 for a master
    port open beyond this machine without a token, or an ``--html`` that cannot be redacted.
    """
    runner, opts = environment.runner, environment.parsed_options
    gate = None
    if isinstance(runner, MasterRunner):
        refusal = exposure.master_refusal(getattr(opts, "master_bind_host", None), token)
        if refusal:
            print(f"tokenswarm: {refusal}", file=sys.stderr)
            sys.exit(EXIT_BAD_CONFIG)
        gate = WorkerGate(runner, token).install()
    refusal = html_refusal(getattr(opts, "html_file", None), redact_locust_outputs())
    if refusal:
        print(f"tokenswarm: {refusal}", file=sys.stderr)
        sys.exit(EXIT_BAD_CONFIG)
    redact_exceptions(runner)
    if environment.web_ui is not None:
        warning = exposure.web_ui_warning(getattr(opts, "web_host", None), bool(getattr(opts, "web_login", False)),
                                          getattr(opts, "web_port", None))
        if warning:
            print(warning, file=sys.stderr, flush=True)
    return gate


class _CollectorProxy:
    def __init__(self, ctl: RunController) -> None:
        self.ctl = ctl

    def on_records(self, environment: Any, msg: Any, **_kw: Any) -> None:
        if self.ctl.collector is not None:
            self.ctl.collector.on_batch(msg.data, client_id=msg.node_id)
        self.ctl.on_records_batch(msg.data)

    def on_final(self, environment: Any, msg: Any, **_kw: Any) -> None:
        if self.ctl.collector is not None:
            self.ctl.collector.on_final(msg.data, client_id=msg.node_id)


def _init_worker(environment: Any, token: str | None) -> None:
    """The worker side: ask the master for admission, then follow its steps and runs."""
    runner = environment.runner
    worker = _WorkerSide(environment)
    runner.register_message(MSG_REFUSED, lambda environment, msg, **kw: log.error(
        "tokenswarm: the master refused this worker: %s", msg.data))
    send_hello(runner, token)  # Locust's connection is acked by now; the master admits us on this
    runner.register_message(MSG_STEP, worker.on_step)
    # the master's hard stop: read before its stop/quit message, so users are killed, not waited for
    runner.register_message(MSG_HARD_STOP, lambda environment, msg, **kw: setattr(environment, "stop_timeout", 0))
    local = is_local_worker(environment.parsed_options)
    master = master_pid() if local else None  # known from the fork: it may have ended by now
    # the last records and counts reach the master before exit (a local worker knows when it is gone)
    ExitFlush(runner, master_alive=parent_unchanged(parent=master) if local else None).install()
    if local:
        gevent.spawn(watch_parent, runner.quit, parent=master)
    environment.events.test_start.add_listener(worker.on_start)
    environment.events.test_stopping.add_listener(worker.on_stopping)
    environment.events.test_stop.add_listener(worker.on_stop)
    environment.events.report_to_master.add_listener(worker.on_report)


class _WorkerSide:
    """One worker's run: its context (from the scenario the master sent), the records relay,
    its health samples, and the ``tokenswarm`` section of its reports to the master."""

    def __init__(self, environment: Any) -> None:
        self.runner = environment.runner
        self.ctx: Any = None  # the run's RunContext while a run goes
        self.pending_step: dict[str, Any] | None = None  # a step message that came before the run
        self.flusher: gevent.Greenlet | None = None
        self.health: HealthMonitor | None = None
        self.health_samples: list[dict[str, Any]] = []

    def on_step(self, environment: Any, msg: Any, **_kw: Any) -> None:
        if self.ctx is not None:
            self.ctx.set_step(msg.data)
        else:
            self.pending_step = msg.data

    def on_start(self, environment: Any, **_kw: Any) -> None:
        """test_start: the scenario from the spawn message's options, the context, relay and health."""
        opts = environment.parsed_options
        data = json.loads(opts.tokenswarm_scenario_data or "{}")
        raw = data.get("raw")
        if raw is None:
            log.error("tokenswarm: the master sent no scenario; is the master running tokenswarm's locustfile?")
            return
        set_credentials_scope(opts.tokenswarm_credentials_url or None,
                              any_host=bool(getattr(opts, "tokenswarm_credentials_to_any_host", False)))
        raw = apply_overrides(raw, data.get("overrides"), data.get("path") or "<scenario>")
        sc = parse_scenario(raw, data.get("path") or "<scenario>")
        runner = self.runner
        index = max(0, runner.worker_index)
        sink = RelaySink(lambda t, d: runner.send_message(t, d), make_worker_id(index), spool_dir=spool_dir_default())
        ctx = build_worker_context(environment, sc, opts.tokenswarm_run_id, opts.tokenswarm_base_url,
                                   opts.tokenswarm_model, sink, "worker", index)
        sink.requests_started = lambda: ctx.requests_started
        if self.pending_step:
            ctx.set_step(self.pending_step)
            self.pending_step = None
        self.ctx = ctx
        runtime.set_context(ctx)
        self.flusher = gevent.spawn(_flush_loop, sink)
        self.health_samples = []
        self.health = HealthMonitor(ctx.worker_id, self._keep_health_sample,
                                    extra=lambda: {"in_flight": ctx.in_flight, "late_dispatches": ctx.late_dispatches,
                                                   "role": "worker"})
        self.health.start()

    def _keep_health_sample(self, sample: dict[str, Any]) -> None:
        self.health_samples.append(sample)

    def on_stopping(self, environment: Any, **_kw: Any) -> None:
        if self.ctx is not None:
            self.ctx.stopping = True

    def on_stop(self, environment: Any, **_kw: Any) -> None:
        """test_stop: the last live delta, then the final batch (Locust sends no report after a stop)."""
        ctx = self.ctx
        if ctx is None:
            return
        if self.flusher is not None:
            self.flusher.kill(block=False)
        if self.health is not None:
            self.health.stop()
        self.runner.send_message(MSG_LIVE, ctx.live.take_delta())
        ctx.sink.final(ctx.last_seq, ctx.requests_started)
        self.ctx = None

    def on_report(self, client_id: str, data: dict[str, Any], **_kw: Any) -> None:
        """The ``tokenswarm`` section of each heartbeat report to the master."""
        ctx = self.ctx
        if ctx is None:
            return
        data["tokenswarm"] = {
            "worker_id": ctx.worker_id, "host": os.uname().nodename, "pid": os.getpid(), "wall_s": time.time(),
            "in_flight": ctx.in_flight, "requests_started": ctx.requests_started, "last_seq": ctx.last_seq,
            "late_dispatches": ctx.late_dispatches, "max_schedule_lag_ms": round(ctx.max_schedule_lag_ms, 3),
            "cpu_warning": bool(getattr(self.runner, "cpu_warning_emitted", False)), "live": ctx.live.take_delta(),
            "health": self.health_samples[-20:],
            "timing": timing_provenance(),  # which timing paths ran, and their fallback counters
        }
        self.health_samples = []


def _flush_loop(sink: Any) -> None:
    while True:
        gevent.sleep(0.5)
        sink.flush()
