"""The controller's hook for open-ended plans: each probe a full step, judged from its records.

:class:`ProbingPlan` is the :class:`~tokenswarm.workload.steps.StepMachine`'s ``after``
callback for ``load.mode: search`` and ``load.mode: sweep``. A probe is an ordinary step:
ramp, warm-up (``load.warmup_s``), a steady window of ``load.step_duration_s``. At the end of
the window:

1. *Sample-size rule* (search): the step's steady records are judged with the report's own
   tables and SLO checks (:func:`analysis.capacity.judge_step`); while a judged percentile
   rests on fewer than 10 / (1 - q) samples (:func:`analysis.stats.min_samples_for`) or a
   judged metric is not observed yet, the window stays open (``EXTEND``), up to
   ``load.search.max_step_s``. A check still short at the cap fails the probe ("not judged").
2. *Drain*: the window closes and the load is held (phase ``drain``; requests sent now are
   not the probe's) until every request in flight when it closed has finished, so the
   window's slowest requests are judged too, at most ``drain_max_s``.
3. *Judgement*: every SLO check of the step (all tasks and each task) must pass; the planner
   (:mod:`tokenswarm.orchestrate.search`) is told the verdict and names the next load.

Records reach :meth:`ProbingPlan.on_record` as the process sees them (the local emitter, or
the master's batches from the workers). The requests in flight when the window closed come
from the process's own count (exact locally; on a master, the workers' last reports).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from tokenswarm.analysis.capacity import (
    CAPACITY_FILE,
    Capacity,
    Probe,
    capacity_of,
    judge_step,
    probe_of,
    render_capacity_text,
)
from tokenswarm.manifest import RunManifest
from tokenswarm.orchestrate.search import CapacitySearch, Sweep
from tokenswarm.workload.scenario.model import LoadConfig
from tokenswarm.workload.steps import EXTEND, HOLD, PHASE_DRAIN, PHASE_STEADY, Decision, Step

#: how often (seconds) an extended window re-checks whether it has enough samples
RECHECK_S = 2.0


def step_name(kind: str, target: float) -> str:
    """The name of a step (as :func:`~tokenswarm.workload.steps.plan_steps` names them)."""
    return f"c{int(target)}" if kind == "concurrency" else f"r{target:g}"


class ProbingPlan:
    """The search's or sweep's steps, one judged probe at a time (see the module docstring)."""

    def __init__(self, load: LoadConfig, slos: Mapping[str, Any], *, in_flight: Callable[[], int],
                 manifest: Callable[[], RunManifest | None]) -> None:
        if load.search is None and load.sweep is None:
            raise ValueError("a probing plan needs load.search or load.sweep")
        self.load = load
        self.slos = dict(slos)
        self.kind = "rate" if load.loop == "open" else "concurrency"
        self.planner: CapacitySearch | Sweep = CapacitySearch(load.search) if load.search is not None else Sweep(load.sweep)  # type: ignore[arg-type]  # exactly one of search and sweep is set (the mode says which)
        self.drain_max_s = (load.search or load.sweep).drain_max_s  # type: ignore[union-attr]  # exactly one of search and sweep is set (the mode says which)
        self.max_step_s = load.search.max_step_s if load.search is not None else load.step_duration_s
        self._in_flight = in_flight
        self._manifest = manifest
        self.probes: list[Probe] = []
        self.steps_run: list[Step] = []
        self._records: list[Mapping[str, Any]] = []
        self._last_row: Mapping[str, Any] | None = None
        self._step_index: int | None = None
        self._stage = PHASE_STEADY
        self._asked_s: float | None = None  # when the window's nominal end was first reached
        self._checked_s = float("-inf")
        self._drain_started_s = 0.0
        self._drain_waiting = 0
        self._drained = 0
        self.drain_notes: list[str] = []

    # -- what the machine starts with -------------------------------------------------------
    def first_step(self) -> Step:
        first = self._step(self.planner.first, index=0)
        self._start(first)
        return first

    def _step(self, target: float, index: int = -1) -> Step:
        return Step(index, step_name(self.kind, target), self.kind, float(target), self.load.warmup_s,
                    self.load.step_duration_s)

    @property
    def is_search(self) -> bool:
        return isinstance(self.planner, CapacitySearch)

    # -- records ---------------------------------------------------------------------------
    def on_record(self, rec: Any) -> None:
        """A record as this process sees it (a dict, or a RequestRecord)."""
        if isinstance(rec, Mapping):
            step, phase = rec.get("step"), rec.get("phase")
        else:
            step, phase = rec.step, rec.phase
        if self._stage == PHASE_DRAIN and phase != PHASE_DRAIN:
            self._drained += 1
        if step is not None and step == self._step_index and phase == PHASE_STEADY:
            self._records.append(rec if isinstance(rec, Mapping) else rec.to_dict())

    # -- the machine's callback ------------------------------------------------------------------
    def after(self, step: Step, now_s: float) -> Decision:
        """At the end of ``step``'s steady window and during its drain: extend, hold or move on."""
        if self._step_index != step.index:
            raise RuntimeError(f"probing plan: asked about step {step.index}, running step {self._step_index}")
        if self._stage == PHASE_STEADY:
            if self._asked_s is None:
                self._asked_s = now_s
            if self._wants_more_samples(step, now_s):
                return EXTEND
            if not self._needs_judgement():
                return self._move_on(step, None)
            self._stage = PHASE_DRAIN
            self._drain_started_s = now_s
            self._drain_waiting = max(0, int(self._in_flight()))
            self._drained = 0
            return HOLD
        if self._drained < self._drain_waiting and now_s - self._drain_started_s < self.drain_max_s:
            return HOLD
        note = ""
        if self._drained < self._drain_waiting:
            left = self._drain_waiting - self._drained
            note = f"{left} request(s) still running after the {self.drain_max_s:g} s drain"
            self.drain_notes.append(f"{step.name}: {note}")
        return self._move_on(step, self._judge(step, note))

    def _start(self, step: Step) -> None:
        """The probe whose records are collected from now on (the machine numbers steps in order)."""
        self._step_index = step.index
        self._records = []
        self._last_row = None
        self._stage = PHASE_STEADY
        self._asked_s = None
        self._checked_s = float("-inf")
        self.steps_run.append(step)

    def _needs_judgement(self) -> bool:
        return self.is_search or (isinstance(self.planner, Sweep) and self.planner.needs_judgement())

    def _wants_more_samples(self, step: Step, now_s: float) -> bool:
        if not self.is_search or not self.slos:
            return False
        assert self._asked_s is not None
        if now_s - self._asked_s + step.duration_s >= self.max_step_s:
            return False  # the cap: judge what there is (a short check then fails the probe)
        if now_s - self._checked_s < RECHECK_S:
            return True
        self._checked_s = now_s
        manifest = self._manifest()
        if manifest is None:
            return False
        return judge_step(self._records, manifest, step.index, self.slos).short_of_samples

    def _judge(self, step: Step, note: str) -> Probe:
        manifest = self._manifest()
        judgement = None if manifest is None else judge_step(self._records, manifest, step.index, self.slos)
        if judgement is None or not judgement.rows:
            probe = Probe(step.index, step.name, step.target, False, note=note or "no request finished in the window")
        else:
            probe = probe_of(step.index, step.name, step.target, judgement.results, judgement.all_row, note=note)
            if not self.is_search:  # a sweep records throughput, it does not judge
                probe = Probe(step.index, step.name, step.target, True, requests_count=probe.requests_count,
                              output_tokens_per_s=probe.output_tokens_per_s)
            self._last_row = judgement.all_row
        self.probes.append(probe)
        return probe

    def _move_on(self, step: Step, probe: Probe | None) -> Decision:
        if isinstance(self.planner, CapacitySearch):
            assert probe is not None
            nxt = self.planner.observe(step.target, probe.passed)
        else:
            row = self._last_row if probe is not None else None
            nxt = self.planner.observe(step.target, None if row is None else row.get("requests_per_s"))
        if nxt is None:
            self._step_index, self._records = None, []
            return None
        following = self._step(nxt, index=len(self.steps_run))  # the index the machine gives it
        self._start(following)
        return following

    # -- results -------------------------------------------------------------------------------
    def capacity(self) -> Capacity | None:
        """The search's capacity (``None`` for a sweep: its curve is judged by the report)."""
        if not isinstance(self.planner, CapacitySearch):
            return None
        cfg = self.planner.config
        return capacity_of(self.probes, self.kind, resolution=cfg.resolution, slos=self.slos, source="search")

    def to_dict(self) -> dict[str, Any]:
        """``capacity.json``: the capacity, every probe, and how the plan ended."""
        out: dict[str, Any] = {"mode": self.load.mode, "written_at": time.time(),
                               "stop_reason": self.planner.stop_reason or "the run ended before the plan did",
                               "drain_notes": list(self.drain_notes)}
        cap = self.capacity()
        if cap is not None:
            out.update(cap.to_dict())
            out["search"] = self.load.search.to_dict() if self.load.search is not None else None
        else:
            sw = self.planner
            assert isinstance(sw, Sweep)
            out.update({"kind": self.kind, "source": "sweep", "sweep": sw.config.to_dict(),
                        "saturation_requests_per_s": sw.saturation_rps, "single_user_requests_per_s": sw.single_rps,
                        "saturation_users": sw.saturation_users, "probes": [p.to_dict() for p in self.probes],
                        "steps_users": [s.target for s in self.steps_run]})
        return out


def write_capacity(run_dir: Path, plan: ProbingPlan) -> dict[str, Any]:
    """Write ``capacity.json`` into the run directory and print the capacity table."""
    doc = plan.to_dict()
    (Path(run_dir) / CAPACITY_FILE).write_text(json.dumps(doc, indent=2))
    cap = plan.capacity()
    if cap is not None:
        print(render_capacity_text(cap), flush=True)
        print(f"search ended: {doc['stop_reason']}", flush=True)
    else:
        print(f"sweep: saturation {doc.get('saturation_requests_per_s')} req/s at {plan.planner.first:g} users, "
              f"{doc.get('single_user_requests_per_s')} req/s at one user -> saturation concurrency "
              f"{doc.get('saturation_users')}; steps {doc.get('steps_users')} ({doc['stop_reason']})", flush=True)
    return doc
