"""The probing hook: each probe a full step (sample-size extension, drain, judgement), in memory.

Records are made by hand with the shared RequestRecord (tests/analysis/runfactory.py); time is
injected into the step machine, nothing sleeps and nothing is sent.
"""

from __future__ import annotations

from typing import Any

from tests.analysis import runfactory as rf
from tokenswarm.manifest import RunManifest
from tokenswarm.orchestrate.probing import ProbingPlan
from tokenswarm.workload.scenario import parse_scenario
from tokenswarm.workload.steps import PHASE_DRAIN, StepMachine


def load_config(**search: Any):
    data = {"target": {"base_url": "http://127.0.0.1:1"},
            "traffic": {"classes": {"qa": {"weight": 1}}},
            "load": {"mode": "search", "warmup_s": 1, "step_duration_s": 10,
                     "search": {"start": 2, "max": 16, "max_step_s": 40, "drain_max_s": 30, **search}},
            "slo": {"tpot_p50_ms": 20}}
    return parse_scenario(data).load


class Harness:
    """A step machine driven by hand, with a manifest that follows its transitions."""

    def __init__(self, load, slos=None) -> None:
        self.in_flight = 0
        self.steps: list[dict[str, Any]] = []
        self.plan = ProbingPlan(load, slos if slos is not None else {"tpot_p50_ms": 20}, in_flight=lambda: self.in_flight,
                                manifest=self.manifest)
        self.machine = StepMachine([self.plan.first_step()], after=self.plan.after)
        self.seq = 0

    def manifest(self) -> RunManifest:
        return RunManifest.from_json(rf.manifest(steps=self.steps))

    def advance(self, now: float) -> list[str]:
        out = []
        for tr in self.machine.advance(now, True):
            t = rf.T0 + tr.at_s
            if tr.phase == "warmup":
                self.steps.append(rf.step(tr.step.index, tr.step.kind, tr.step.target, t, None, None))
            elif tr.phase == "steady":
                self.steps[-1]["steady_at"] = t
            elif self.steps[-1]["ended_at"] is None:
                self.steps[-1]["ended_at"] = t
            out.append(f"{tr.step.name} {tr.phase}")
        return out

    def requests(self, n: int, at: float, tpot_ms: float, phase: str = "steady", step: int | None = None) -> None:
        """``n`` finished requests of the current step, sent around ``at`` s, 5 tokens each."""
        step = self.machine.index if step is None else step
        for _ in range(n):
            self.seq += 1
            offs = [50.0 + tpot_ms * k for k in range(5)]
            self.plan.on_record(rf.record(self.seq, step=step, phase=phase, sent_at_s=rf.T0 + at,
                                          chunk_offsets_ms=offs, e2e_ms=offs[-1]))


def tpot_of(load: float) -> float:
    return 4.0 * load  # a server whose TPOT grows with concurrency: capacity 5 at TPOT p50 <= 20


def test_a_search_probes_full_steps_until_its_bracket_is_within_the_resolution():
    h = Harness(load_config())
    t = 0.0
    h.advance(t)
    assert h.machine.current.target == 2
    for _ in range(20):
        if h.machine.done:
            break
        target = h.machine.current.target
        t += 1.0
        h.advance(t)  # warm-up over: steady
        h.requests(30, t + 1, tpot_of(target))
        t += 10.0
        h.in_flight = 3
        assert h.advance(t)[-1] == f"{h.machine.current.name} drain"  # the window closed, the load holds
        h.requests(2, t - 0.5, tpot_of(target))  # two of the three in flight finish: still draining
        t += 1.0
        assert h.advance(t) == []
        h.requests(1, t - 1.5, tpot_of(target))
        h.requests(4, t, tpot_of(target), phase=PHASE_DRAIN)  # sent during the drain: not the probe's
        t += 1.0
        h.advance(t)
    cap = h.plan.capacity()
    assert [p.load_value for p in cap.probes] == [2, 4, 8, 6, 5]
    assert (cap.capacity_value, cap.first_failing_value) == (5, 6)
    assert [p.requests_count for p in cap.probes] == [33] * 5  # the window's 30 and the drain's 3, not the 4
    lim = cap.limiting_probe
    assert lim.load_value == 6 and "tpot_p50_ms = 24" in lim.reason() and "task qa" in lim.reason()


def test_a_window_short_of_samples_is_extended_then_judged_at_the_cap():
    h = Harness(load_config(max_step_s=14), slos={"tpot_p95_ms": 100})
    h.advance(0.0)
    h.advance(1.0)  # steady from 1 s
    h.requests(150, 2.0, 5.0)  # a p95 needs 200
    assert h.advance(11.0) == []  # nominal end: extended (too few samples)
    assert h.machine.phase == "steady"
    h.requests(40, 11.5, 5.0)
    assert h.advance(13.5) == []  # still 190: extended
    h.requests(10, 13.6, 5.0)
    assert h.advance(16.0) == ["c2 drain"]  # 200 samples: the window closes
    h.advance(17.0)
    assert h.plan.probes[0].passed and h.plan.probes[0].requests_count == 200


def test_a_check_still_short_at_the_cap_fails_the_probe_as_not_judged():
    h = Harness(load_config(max_step_s=12), slos={"tpot_p95_ms": 100})
    h.advance(0.0)
    h.advance(1.0)
    h.requests(50, 2.0, 5.0)
    assert h.advance(11.0) == []
    assert h.advance(13.0) == ["c2 drain"]  # 12 s of window: the cap
    h.advance(14.0)
    probe = h.plan.probes[0]
    assert not probe.passed and "not judged" in probe.reason() and "n=50" in probe.reason()
    assert h.machine.done  # the first probe failed: the capacity is below it


def test_a_drain_that_outlasts_its_cap_fails_the_probe_and_says_why():
    h = Harness(load_config(drain_max_s=5))
    h.advance(0.0)
    h.advance(1.0)
    h.requests(30, 2.0, 5.0)
    h.in_flight = 4
    assert h.advance(11.0) == ["c2 drain"]
    assert h.advance(15.0) == []
    h.advance(16.5)
    probe = h.plan.probes[0]
    assert not probe.passed and "4 request(s) still running" in probe.reason()


def test_a_sweep_judges_its_two_measuring_probes_then_runs_the_spread_without_draining():
    data = {"target": {"base_url": "http://127.0.0.1:1"}, "traffic": {"classes": {"qa": {"weight": 1}}},
            "load": {"mode": "sweep", "warmup_s": 0, "step_duration_s": 10, "sweep": {"steps": 3, "max_concurrency": 32}}}
    h = Harness(parse_scenario(data).load, slos={})
    h.advance(0.0)
    t = 0.0
    names = []
    for n in (400, 25):  # 40 req/s at 32 users, 2.5 req/s at one user -> N* = 16
        names += h.advance(t)
        h.requests(n, t + 1, 5.0)
        t += 10.0
        names += h.advance(t)
        t += 0.5
        names += h.advance(t)
    t += 10.0
    names += h.advance(t)
    t += 10.0
    names += h.advance(t)
    assert [s.target for s in h.plan.steps_run][:4] == [32, 1, 6, 11]
    assert "c32 drain" in names and "c1 drain" in names and "c6 drain" not in names
    assert h.plan.planner.saturation_users == 16
