"""The shaped load plan of one run: its step machine, the hooks its mode adds, and what it asks of Locust.

:func:`new_plan` turns the scenario's ``load`` section into a :class:`LoadPlan`: a
:class:`~tokenswarm.workload.steps.StepMachine` with, for a search or sweep, the probing hook
that judges each probe and picks the next (:mod:`~tokenswarm.orchestrate.probing`), or for
adaptive steps (``load.until``) the stopping rule that may end a window early
(:mod:`~tokenswarm.orchestrate.adaptive`). The rest of the module answers the questions the
controller puts to the plan: how many users and how fast to spawn them for a step
(:func:`users_for`, :func:`spawn_rate_for`), what a step transition writes into the manifest
(:func:`record_transition`), what the pilot request says of the server's speed
(:func:`pilot_rate`), and what the plan can judge (:func:`announce_plan`). :class:`StepDriver`
runs the plan: Locust's shape ticks, transitions into the manifest, step broadcasts.
"""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable, Mapping

import orjson

from tokenswarm.collect.manifest import ManifestFile
from tokenswarm.load.context import RunContext
from tokenswarm.load.pilot import run_pilot
from tokenswarm.load.setup import set_class_weights
from tokenswarm.manifest import RunManifest
from tokenswarm.orchestrate import sizing
from tokenswarm.orchestrate.adaptive import AdaptiveRun
from tokenswarm.orchestrate.ending import RunEnding
from tokenswarm.orchestrate.runflags import RunFlagError, RunFlags
from tokenswarm.redact import redact
from tokenswarm.workload.scenario import Scenario, ScenarioError, load_scenario
from tokenswarm.workload.steps import PHASE_DRAIN, Step, StepMachine, Transition, plan_steps

if TYPE_CHECKING:  # the probing hook reads records with the analysis (numpy): imported only by a search or sweep
    from tokenswarm.orchestrate.probing import ProbingPlan

log = logging.getLogger("tokenswarm")


@dataclass
class LoadPlan:
    """One run's step machine and the hook its mode adds (at most one of ``probing``/``adaptive``)."""

    machine: StepMachine
    #: load.mode search / sweep: the hook that judges each probe and picks the next
    probing: ProbingPlan | None = None
    #: load.until: the steps' stopping rule and counts
    adaptive: AdaptiveRun | None = None

    def observe_record(self, record: Mapping[str, Any] | Any) -> None:
        """A record (object or decoded dict) for the hook that counts them."""
        if self.adaptive is not None:
            self.adaptive.observe_record(record)
        if self.probing is not None:
            self.probing.on_record(record)


def max_ramp_s(load: Any) -> float:
    """How long a step may take to reach its load before it runs at the load it has."""
    top = max(load.steps)
    if load.search is not None:
        top = max(top, load.search.max)
    slowest_ramp_s = top / max(load.spawn_rate, 0.1) if load.loop == "closed" else 0.0
    slowest_ramp_s = max(slowest_ramp_s, load.ramp_s)
    return float(max(30.0, 3 * slowest_ramp_s + 10.0))


def new_plan(scenario: Scenario, slos: Mapping[str, Any], *, budget_s: float | None,
             in_flight: Callable[[], int], manifest: Callable[[], RunManifest | None]) -> LoadPlan:
    """The scenario's plan: search/sweep probes, adaptive steps, or the fixed list of steps."""
    load = scenario.load
    ramp_s = max_ramp_s(load)
    if load.search is not None or load.sweep is not None:
        from tokenswarm.orchestrate.probing import ProbingPlan  # numpy and the analysis: only for these plans

        probing = ProbingPlan(load, slos, in_flight=in_flight, manifest=manifest)
        return LoadPlan(StepMachine([probing.first_step()], max_ramp_s=ramp_s, after=probing.after), probing=probing)
    machine = StepMachine(plan_steps(load.loop, list(load.steps), load.warmup_s, load.step_duration_s),
                          max_ramp_s=ramp_s)
    if load.until is None:
        return LoadPlan(machine)
    # adaptive steps: the machine asks the rule when a window could end
    shortest = load.warmup_s + load.step_duration_s
    adaptive = AdaptiveRun(
        load.until, [t.name for t in scenario.traffic.classes if t.weight > 0], load.step_duration_s,
        budget_s=budget_s, later_min_s=[shortest * (len(load.steps) - 1 - i) for i in range(len(load.steps))],
        started_s=time.perf_counter())
    machine.hold = lambda step, steady_s: adaptive.decide(step.index, step.name, steady_s, time.perf_counter()).hold
    return LoadPlan(machine, adaptive=adaptive)


def users_for(step: Step, runner: Any, *, is_master: bool) -> int:
    """Closed loop: the step's concurrency; open loop: one dispatching user per worker."""
    if step.kind == "rate":
        return max(1, getattr(runner, "worker_count", 1) if is_master else 1)
    return int(step.target)


def spawn_rate_for(load: Any, step: Step, machine: StepMachine) -> float:
    """Users/s towards ``step``: ``load.spawn_rate``, or a linear ramp over ``load.ramp_s``."""
    if not load.ramp_s or step.kind != "concurrency":
        return float(load.spawn_rate)
    prev = machine.steps[step.index - 1].target if step.index > 0 else 0.0
    return float(max(0.1, abs(step.target - prev) / load.ramp_s))


def record_transition(manifest: ManifestFile, tr: Transition, epoch: float) -> None:
    """A step transition in the manifest: a step starts (warmup), its steady window opens, or it ends."""
    if tr.phase == "warmup":
        manifest.start_step(tr.step.index, tr.step.name, tr.step.kind, tr.step.target, at=epoch)
    elif tr.phase == "steady":
        manifest.mark_last_step(steady_at=epoch)
    elif tr.phase == PHASE_DRAIN or (tr.phase == "done" and manifest.current.steps
                                     and manifest.current.steps[-1].ended_at is None):
        # drain: the steady window closed, the load holds for its last requests (a done
        # after a drain keeps that end)
        manifest.mark_last_step(ended_at=epoch)


def apply_overrides(scenario: Scenario, overrides: dict[str, Any] | None, opts: Any,
                    *, fixed_users: bool) -> tuple[Scenario, dict[str, Any] | None]:
    """--steps/--step-duration/--warmup (e.g. edited in the web UI) over the scenario: the
    scenario and overrides to run with (the same ones when there is nothing valid to apply)."""
    try:  # the command line's were checked at start-up (exit 2); these may come from the UI's form
        extra = RunFlags.from_options(opts).plan_overrides()
    except RunFlagError as exc:
        log.error("tokenswarm: ignoring an invalid step option: %s", exc)
        return scenario, overrides
    if not extra or scenario.path is None:
        return scenario, overrides
    merged = {**(overrides or {}), **extra}
    try:
        scenario = load_scenario(scenario.path, merged)
    except ScenarioError as exc:
        log.error("tokenswarm: %s", exc)
        return scenario, overrides
    set_class_weights(scenario, "closed" if fixed_users else scenario.load.loop)
    return scenario, merged


def pilot_rate(scenario: Scenario, base_url: str, model: str, *, timeout_s: float,
               no_pilot: bool) -> sizing.RateModel:
    """The server's speed from one pilot request, or the plan's stated assumptions without one."""
    try:
        if no_pilot:
            raise ValueError("--no-pilot")
        pilot = run_pilot(base_url, scenario.target, model, scenario.target.api, timeout_s=timeout_s)
        if pilot.stream_tokens_per_s:
            return sizing.RateModel.from_pilot(pilot.stream_tokens_per_s, pilot.ttft_s, pilot.output_tokens)
    except (OSError, ValueError) as exc:  # the plan stays on its stated assumptions
        log.info("tokenswarm: no pilot request (%s); the plan assumes the server's speed", redact(str(exc)))
    return sizing.RateModel()


def announce_plan(scenario: Scenario, slos: Mapping[str, Any], manifest: ManifestFile, ctx: RunContext, *,
                  fixed_users: bool, pilot_timeout_s: float, no_pilot: bool) -> None:
    """The first lines of a run: what the plan can judge (sized by the pilot request's speed); a
    gate it cannot judge warns now, into the manifest too (its ``sizing_plan``). A fixed ``-u``
    run has no plan to size, and a search or sweep sizes each probe itself: it extends a window
    until its checks are judged."""
    load = scenario.load
    if fixed_users or load.search is not None or load.sweep is not None:
        return
    rate = pilot_rate(scenario, ctx.base_url, ctx.model, timeout_s=pilot_timeout_s, no_pilot=no_pilot)
    lines, warnings = sizing.plan_lines(scenario, slos, rate)
    for line in lines:
        print(f"tokenswarm: {line}", flush=True)
    for text in warnings:
        print(f"tokenswarm: WARNING: {text}", file=sys.stderr, flush=True)
        manifest.warn(f"plan: {text}")
    manifest.update(extra={**manifest.current.extra, "sizing_plan": {"lines": lines, "warnings": warnings}})


def read_batch(data: bytes, plan: LoadPlan | None, ending: RunEnding) -> None:
    """A worker's batch of records (JSON lines) for the plan's hook and the circuit breaker;
    read only as far as one of them still wants records (the breaker until the first success)."""
    if plan is not None and plan.adaptive is None and plan.probing is None:
        plan = None  # a fixed list of steps counts nothing
    if not (ending.breaker.armed or plan is not None):
        return
    for line in data.splitlines():
        try:
            r = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if plan is not None:
            plan.observe_record(r)
        if ending.breaker.armed:
            ending.observe(r.get("outcome", ""), r.get("http_status"), r.get("error"))
        elif plan is None:
            return


class StepDriver:
    """The plan during a run: Locust's shape ticks, each transition into the manifest, and the
    current step broadcast to the run context and (on a master) the workers.

    While ``taking()`` is false (before test_start, after the stop) transitions wait in
    ``pending``; ``manifest()`` and ``ctx()`` are the current run's.
    """

    def __init__(self, env: Any, *, is_master: bool, send: Callable[[dict[str, Any]], None],
                 taking: Callable[[], bool], manifest: Callable[[], ManifestFile | None],
                 ctx: Callable[[], RunContext | None], warn: Callable[[str], None]) -> None:
        self.env, self.is_master, self._send, self._warn = env, is_master, send, warn
        self._taking, self._manifest, self._ctx = taking, manifest, ctx
        self.plan: LoadPlan | None = None
        self.pending: list[Transition] = []  # the shape's transitions before the run's files exist
        self.step_msg: dict[str, Any] | None = None  # the current step, as broadcast
        self._last_broadcast = 0.0

    def start(self, plan: LoadPlan) -> None:
        self.plan, self.pending = plan, []

    def fixed(self, users: int) -> None:
        """-u: one fixed step of that many users, no search or sweep."""
        self.plan = None
        self.step_msg = {"index": 0, "name": f"u{users}", "kind": "concurrency",
                         "target": users, "phase": "steady", "worker_count": 1}
        now = time.time()
        manifest = self._manifest()
        assert manifest is not None
        manifest.start_step(0, self.step_msg["name"], "concurrency", users, at=now, steady_at=now)
        self.broadcast(self.step_msg)

    def record_pending(self) -> None:
        """The shape's first tick comes before test_start: its transitions are recorded now."""
        for tr in self.pending:
            self.record(tr)
        self.pending = []

    def tick(self, runner: Any, now_s: float, load: Any) -> Step | None:
        """Advance the plan; the step to run now (None: the plan is done)."""
        assert self.plan is not None
        machine = self.plan.machine
        timeouts, late = len(machine.ramp_timeouts), len(machine.late_ticks)
        transitions = machine.advance(
            now_s, lambda step: runner.user_count >= users_for(step, runner, is_master=self.is_master))
        if len(machine.ramp_timeouts) > timeouts:
            self._warn(f"step {machine.steps[machine.ramp_timeouts[-1]].name}: target load not reached "
                       f"(only {runner.user_count} users); it ran at the load it had")
        for name, edge, late_s in machine.late_ticks[late:]:
            what = "steady window opened" if edge == "steady" else "steady window closed"
            self._warn(f"step {name}: the load plan's tick came {late_s:.1f} s late (the generator was held "
                       f"up); its {what} at that tick, so the window holds the records tagged in it")
        for tr in transitions:
            if not self._taking():
                self.pending.append(tr)
            else:
                self.record(tr)
        if machine.done:
            return None
        if self.step_msg is not None and time.monotonic() - self._last_broadcast > 5.0:
            self.broadcast(self.step_msg)  # late-joining workers learn the step too
        return machine.current

    def record(self, tr: Transition) -> None:
        """A transition into the manifest, and (unless the plan is done) broadcast as the current step."""
        manifest, ctx = self._manifest(), self._ctx()
        assert manifest is not None and ctx is not None
        record_transition(manifest, tr, ctx.anchor.epoch(tr.at_s))  # at_s is perf_counter time, as the anchor's
        if tr.phase != "done":
            wc = getattr(self.env.runner, "worker_count", 1) if self.is_master else 1
            self.step_msg = {"index": tr.step.index, "name": tr.step.name, "kind": tr.step.kind,
                             "target": tr.step.target, "phase": tr.phase, "worker_count": max(1, wc),
                             # replay: the schedule's start (epoch)
                             "steady_at": manifest.current.steps[-1].steady_at}
            self.broadcast(self.step_msg)
            log.info("tokenswarm: step %s (%s %g) %s", tr.step.name, tr.step.kind, tr.step.target, tr.phase)
        if self.plan is not None and self.plan.adaptive is not None:
            manifest.update(extra={**manifest.current.extra, "adaptive_steps": self.plan.adaptive.summary()})
        manifest.write()

    def broadcast(self, msg: dict[str, Any]) -> None:
        self._last_broadcast = time.monotonic()
        ctx = self._ctx()
        if ctx is not None:
            ctx.set_step(msg)
        self._send(msg)
