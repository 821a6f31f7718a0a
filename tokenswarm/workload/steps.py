"""The load plan as a pure state machine: steps, warm-up, steady windows (time injected).

A step is one load level: a number of users (closed loop) or a request rate (open loop).
Each step goes ``ramping`` (until the runner reports the target reached) -> ``warmup``
(``warmup_s``) -> ``steady`` (``duration_s``) -> next step. Records started while a step is
ramping or warming up are tagged ``phase="warmup"``; analysis uses ``steady`` ones.
Moving on when the target is *reached*, not after a fixed time, keeps a slow ramp from
eating the steady window (Locust's master blocks while it spawns).

An open-ended plan (a capacity search, a sweep) gives the machine an ``after`` callback: at
the end of each steady window it is asked what comes next -- :data:`EXTEND` (keep the steady
window open, e.g. too few samples yet), :data:`HOLD` (close the window but keep the load while
its last requests finish: phase ``drain``, records tagged ``drain``), the next :class:`Step`
(its index is set by the machine), or ``None`` (the plan is done). Without ``after`` the plan
is the fixed list of steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Callable, Union

#: what an ``after`` callback answers: EXTEND, HOLD, the next step, or None (done)
Decision = Union[str, "Step", None]

PHASE_WARMUP = "warmup"
PHASE_STEADY = "steady"
#: after a steady window, the same load held until the window's requests finished (open-ended plans)
PHASE_DRAIN = "drain"
#: ``after`` answers: keep the steady window open / close it and hold the load (drain)
EXTEND = "extend"
HOLD = "hold"


@dataclass(frozen=True)
class Step:
    index: int
    name: str
    kind: str  # "concurrency" | "rate"
    target: float  # users, or requests/s
    warmup_s: float
    duration_s: float


def plan_steps(mode: str, targets: list[float] | tuple[float, ...], warmup_s: float, duration_s: float) -> list[Step]:
    """Steps for a closed (``concurrency``) or open (``rate``) load plan."""
    kind = "concurrency" if mode == "closed" else "rate"
    steps = []
    for i, t in enumerate(targets):
        name = f"c{int(t)}" if kind == "concurrency" else f"r{t:g}"
        if mode == "replay":
            name = "replay"  # one step: the trace's schedule (its mean rate is the target)
        steps.append(Step(i, name, kind, float(t), float(warmup_s), float(duration_s)))
    return steps


@dataclass
class StepTimes:
    started_s: float
    steady_s: float | None = None
    ended_s: float | None = None


@dataclass
class Transition:
    step: Step
    phase: str  # "warmup" | "steady" | "drain" | "done"
    at_s: float


@dataclass
class StepMachine:
    """Advance with ``advance(now_s, reached)``; it returns the transitions that happened.

    ``reached`` says whether the runner holds a step's target load: a callable taking the
    step (so one tick can pass a step's ramp and warm-up when the load is already there) or a
    plain bool about the current step.
    """

    steps: list[Step]
    index: int = 0
    phase: str | None = None  # None before start; "ramping"/"warmup"/"steady"; "done"
    reached_s: float | None = None
    times: list[StepTimes] = field(default_factory=list)
    #: give up waiting for a target after this long (e.g. a worker died and its users are gone)
    max_ramp_s: float = float("inf")
    ramp_timeouts: list[int] = field(default_factory=list)
    #: adaptive steps: asked once a steady window has lasted its ``duration_s``, with the step and
    #: the seconds of steady window so far; True keeps the step going (it then ends at a tick)
    hold: Callable[[Step, float], bool] | None = None
    #: open-ended plans: asked at the end of every steady window and during a drain (module docstring)
    after: Callable[[Step, float], Decision] | None = None
    #: A tick this much past a planned window edge finds the generator was held up (Locust's shape
    #: ticks once a second). The run context tags records with the phase the tick broadcasts, so
    #: such an edge is dated at the tick: dated as planned, a window could open and close in one
    #: late tick and hold none of the records sent in it (a 2.2 s stall once left 2 of 150).
    late_tick_s: float = 1.5
    #: the edges dated at a late tick: (step name, ``"steady"`` (the window opened) or ``"ended"``,
    #: seconds past the plan)
    late_ticks: list[tuple[str, str, float]] = field(default_factory=list)

    @property
    def current(self) -> Step | None:
        return self.steps[self.index] if self.index < len(self.steps) else None

    @property
    def done(self) -> bool:
        return self.phase == "done"

    def advance(self, now_s: float, reached: "bool | Callable[[Step], bool]") -> list[Transition]:
        """Move through every phase ``now_s`` has reached; the transitions, in order. A window edge
        is dated as planned, or at this tick when the tick is late (``late_tick_s``).

        ``reached``: whether the step's target load is reached (or a function of the step saying so).
        """
        out: list[Transition] = []
        is_reached = reached if callable(reached) else (lambda _s, _r=reached: _r)
        while self._next_phase(now_s, is_reached, out):
            pass
        return out

    def _next_phase(self, now_s: float, is_reached: Callable[[Step], bool], out: list[Transition]) -> bool:
        """One phase change if ``now_s`` allows it (its transitions appended to ``out``); whether to look again."""
        step = self.current
        if step is None:
            self.phase = "done"
            return False
        if self.phase is None:
            self.phase = "ramping"
            self.times.append(StepTimes(started_s=now_s))
            out.append(Transition(step, PHASE_WARMUP, now_s))
            return True
        if self.phase == "ramping":
            return self._ramped(step, now_s, is_reached, out)
        if self.phase == "warmup":
            return self._warmed_up(step, now_s, out)
        if self.phase in ("steady", PHASE_DRAIN) and self.after is not None:
            return self._after_window(step, now_s, out)
        if self.phase == "steady":
            return self._window_ended(step, now_s, out)
        return False

    def _ramped(self, step: Step, now_s: float, is_reached: Callable[[Step], bool], out: list[Transition]) -> bool:
        """Ramping: on to the warm-up once the load is reached (or the ramp took too long)."""
        if not is_reached(step):
            if now_s - self.times[-1].started_s <= self.max_ramp_s:
                return False
            self.ramp_timeouts.append(step.index)  # proceed at whatever load we have
        # Entered and found at target within this same call (a late tick catching up):
        # the target was held from the step's start.
        started = self.times[-1].started_s
        self.reached_s = started if out and out[-1].step is step else now_s
        self.phase = "warmup"
        return True

    def _warmed_up(self, step: Step, now_s: float, out: list[Transition]) -> bool:
        """Warm-up: the steady window opens ``warmup_s`` after the load was reached."""
        assert self.reached_s is not None
        steady_at = self.reached_s + step.warmup_s
        if now_s < steady_at:
            return False
        steady_at = self._edge(step, PHASE_STEADY, steady_at, now_s)
        self.phase = "steady"
        self.times[-1].steady_s = steady_at
        out.append(Transition(step, PHASE_STEADY, steady_at))
        return True

    def _after_window(self, step: Step, now_s: float, out: list[Transition]) -> bool:
        """A window with an ``after`` hook (search/sweep): extend it, hold (drain), end the plan,
        or go on to the step the hook chose."""
        steady_s = self.times[-1].steady_s
        if self.phase == "steady" and now_s < (now_s if steady_s is None else steady_s) + step.duration_s:
            return False
        assert self.after is not None
        decision = self.after(step, now_s)
        if decision == EXTEND and self.phase == "steady":
            return False
        if decision in (HOLD, EXTEND):  # EXTEND during a drain: the window is closed, keep holding
            if self.phase == "steady":
                # ends when decided (not at the nominal end): records sent until now are steady
                self.times[-1].ended_s = now_s
                self.phase = PHASE_DRAIN
                out.append(Transition(step, PHASE_DRAIN, now_s))
            return False
        if self.times[-1].ended_s is None:
            self.times[-1].ended_s = now_s
        if decision is None:
            self.index = len(self.steps)
            self.phase = "done"
            out.append(Transition(step, "done", now_s))
            return False
        assert isinstance(decision, Step)
        added = replace(decision, index=len(self.steps))
        self.steps.append(added)
        self.index = added.index
        self.phase = "ramping"
        self.times.append(StepTimes(started_s=now_s))
        out.append(Transition(added, PHASE_WARMUP, now_s))
        return True

    def _window_ended(self, step: Step, now_s: float, out: list[Transition]) -> bool:
        """A planned step's steady window: it ends after ``duration_s`` (or when ``hold`` lets it),
        and the next step starts at that end."""
        steady_s = self.times[-1].steady_s
        steady_s = now_s if steady_s is None else steady_s
        end_at = steady_s + step.duration_s
        if now_s < end_at:
            return False
        if self.hold is not None:
            if self.hold(step, now_s - steady_s):
                return False
            end_at = now_s  # the window closes when the rule let it, not at its shortest
        end_at = self._edge(step, "ended", end_at, now_s)
        self.times[-1].ended_s = end_at
        self.index += 1
        if self.index >= len(self.steps):
            self.phase = "done"
            out.append(Transition(step, "done", end_at))
            return False
        # next step starts at the end of this one
        nxt = self.current
        assert nxt is not None
        self.phase = "ramping"
        self.times.append(StepTimes(started_s=end_at))
        out.append(Transition(nxt, PHASE_WARMUP, end_at))
        return True

    def _edge(self, step: Step, phase: str, planned_s: float, now_s: float) -> float:
        """When a window edge planned at ``planned_s`` happens, seen from a tick at ``now_s``: as
        planned, or at the tick when the tick is late (``late_tick_s``; remembered in ``late_ticks``)."""
        if now_s - planned_s <= self.late_tick_s:
            return planned_s
        self.late_ticks.append((step.name, phase, now_s - planned_s))
        return now_s

    def remaining_s(self, now_s: float) -> float | None:
        """Seconds left in the current step's warm-up + steady window (None while ramping).

        For an adaptive step (``hold``) past its shortest window: 0 (it ends when its rule says).
        """
        step = self.current
        if step is None or self.reached_s is None or self.phase not in ("warmup", "steady"):
            return None
        if self.after is not None and self.phase == "steady" and self.times[-1].steady_s is not None \
                and now_s >= self.times[-1].steady_s + step.duration_s:
            # an extended window's end is decided by ``after``: nothing left to count down
            return None
        if self.phase == "warmup":
            return max(0.0, self.reached_s + step.warmup_s - now_s) + step.duration_s
        return max(0.0, (self.times[-1].steady_s or now_s) + step.duration_s - now_s)
