"""Adaptive steps (``load.until``): a step runs until its cells have what they need.

A step with ``load.until`` keeps its steady window open past ``load.step_duration_s`` (the
shortest window) until every task of the step has

* ``min_requests_per_task`` successful steady-window requests, and
* with ``precision``, the number of requests its *pilot* asked for,

and never past ``max_step_s`` seconds of steady window, nor past the run's ``--budget``.

Why the stopping does not bias the result (two-stage sizing, Stein's procedure): the stop
never looks at the values measured after the pilot. The pilot is the first
``step_duration_s`` seconds of the steady window (longer if a task has fewer than
:data:`PILOT_MIN_REQUESTS` values then). From it, per task, the relative half-width ``h0`` of
the distribution-free 95 % interval of the median of ``until.metric`` at ``n0`` requests gives
the count that reaches ``precision``: ``n = ceil(n0 * (h0 / precision) ** 2)`` (an interval's
width shrinks as ``1/sqrt(n)``). That count is then fixed; the step runs until the count is
there (or the cap), whatever the later values are. A rule that stops "as soon as the interval
is narrow enough" would stop preferentially on samples that happen to look tight, and its
intervals would cover less often than they claim; a count fixed in advance does not.
``min_requests_per_task`` alone is a fixed count from the start, so it is unbiased too.

The decision logic is pure (counts, values and times are given); the controller feeds it the
records it sees and asks :meth:`AdaptiveRun.hold` at every shape tick.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

#: a pilot needs this many values of a task before its interval width says anything
PILOT_MIN_REQUESTS = 10
#: z of the two-sided 95 % interval
Z_95 = 1.959963984540054
#: how the step length is chosen, as the manifest and the docs name it
STOPPING_RULE = ("two-stage: the pilot (the first step_duration_s of steady window) fixes each task's "
                 "request count; the step runs until the counts are reached or max_step_s (later values "
                 "never decide the stop)")
FIXED_COUNT_RULE = ("fixed count: the step runs until every task has min_requests_per_task successful "
                    "requests or max_step_s (no measured value decides the stop)")


def stopping_rule(until: Any) -> str:
    """The stopping rule of ``load.until`` in words: two-stage with ``precision``, else a fixed count."""
    return STOPPING_RULE if until.precision is not None else FIXED_COUNT_RULE


def median_interval_halfwidth(values: Sequence[float]) -> float | None:
    """Relative half-width of the distribution-free 95 % interval of the median, or None.

    The interval runs between the order statistics ``n/2 -+ z * sqrt(n) / 2`` (the binomial
    interval of the median, normal approximation); the half-width is relative to the median.
    ``None`` below :data:`PILOT_MIN_REQUESTS` values or for a median of 0.
    """
    xs = sorted(v for v in values if v is not None and math.isfinite(v))
    n = len(xs)
    if n < PILOT_MIN_REQUESTS:
        return None
    half = Z_95 * math.sqrt(n) / 2.0
    lo = max(0, math.floor(n / 2.0 - half) - 1)  # 0-based index of rank floor(n/2 - half)
    hi = min(n - 1, math.ceil(n / 2.0 + half))  # ... of rank ceil(1 + n/2 + half)
    median = xs[n // 2] if n % 2 else (xs[n // 2 - 1] + xs[n // 2]) / 2.0
    if median == 0:
        return None
    return (xs[hi] - xs[lo]) / 2.0 / abs(median)


def requests_for_precision(n0: int, halfwidth0: float, precision: float) -> int:
    """Requests that shrink a relative half-width of ``halfwidth0`` at ``n0`` to ``precision``."""
    return max(n0, math.ceil(n0 * (halfwidth0 / precision) ** 2))


@dataclass
class StepTally:
    """One step's successful steady-window requests: per task, the count and the metric's values."""

    counts: dict[str, int] = field(default_factory=dict)
    values: dict[str, list[float]] = field(default_factory=dict)

    def add(self, task: str, value: float | None) -> None:
        self.counts[task] = self.counts.get(task, 0) + 1
        if value is not None and math.isfinite(value):
            self.values.setdefault(task, []).append(value)


@dataclass(frozen=True)
class Decision:
    """Whether a step goes on, and why (``reason`` is one of the strings below)."""

    hold: bool
    reason: str  #: "minimum window", "pilot", "filling", "goal met", "cap", "budget"


@dataclass
class StepPlan:
    """The stopping rule of one step: the goal per task, fixed at the end of the pilot."""

    tasks: tuple[str, ...]
    min_duration_s: float
    max_step_s: float
    min_requests_per_task: int | None = None
    precision: float | None = None
    #: per task: the count to reach (set at the start without precision, at the pilot's end with it)
    targets: dict[str, int] | None = None
    pilot: dict[str, dict[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.precision is None:
            self.targets = {t: int(self.min_requests_per_task or 0) for t in self.tasks}

    def decide(self, steady_elapsed_s: float, tally: StepTally, budget_left_s: float = math.inf) -> Decision:
        """Hold the step (``hold=True``) or let it end, from counts and times only."""
        if steady_elapsed_s < self.min_duration_s:
            return Decision(True, "minimum window")
        if steady_elapsed_s >= self.max_step_s:
            return Decision(False, "cap")
        if budget_left_s <= 0:
            return Decision(False, "budget")
        if self.targets is None:
            if any(len(tally.values.get(t, ())) < PILOT_MIN_REQUESTS for t in self.tasks):
                return Decision(True, "pilot")
            self.targets = {}
            for t in self.tasks:
                n0 = len(tally.values[t])
                h0 = median_interval_halfwidth(tally.values[t])
                need = n0 if h0 is None else requests_for_precision(n0, h0, float(self.precision or 1.0))
                self.targets[t] = max(need, int(self.min_requests_per_task or 0))
                self.pilot[t] = {"requests": n0, "relative_halfwidth": None if h0 is None else round(h0, 4),
                                 "at_s": round(steady_elapsed_s, 3)}
        if all(tally.counts.get(t, 0) >= n for t, n in self.targets.items()):
            return Decision(False, "goal met")
        return Decision(True, "filling")


def record_metric(metric: str, rec: Mapping[str, Any] | Any) -> float | None:
    """``until.metric`` of one record (a RequestRecord or its JSON dict); None when not observed."""
    get: Callable[[str], Any] = rec.get if isinstance(rec, Mapping) else (lambda k: getattr(rec, k, None))
    e2e = get("e2e_ms")
    if metric == "request_output_tps":
        out = get("output_tokens")
        return None if not e2e or out is None else out / (e2e / 1000.0)
    value = get(metric)
    return None if value is None else float(value)


class AdaptiveRun:
    """The adaptive rule of a whole run: one :class:`StepPlan` and :class:`StepTally` per step.

    ``budget_s`` bounds the run (``--budget``): a step stops extending once the time left
    would not cover the shortest windows of the steps after it.
    """

    def __init__(self, until: Any, tasks: Iterable[str], min_duration_s: float, *,
                 budget_s: float | None = None, later_min_s: Sequence[float] = (),
                 started_s: float | None = None) -> None:
        self.until = until
        self.tasks = tuple(tasks)
        self.min_duration_s = float(min_duration_s)
        self.budget_s = budget_s
        self.later_min_s = list(later_min_s)  #: per step index: warm-up + shortest steady of the steps after it
        self.plans: dict[int, StepPlan] = {}
        self.tallies: dict[int, StepTally] = {}
        self.outcomes: dict[int, dict[str, Any]] = {}
        self.run_started_s = started_s  #: the load plan's start, on the clock of ``decide``'s ``now_s``

    def plan_of(self, index: int) -> StepPlan:
        if index not in self.plans:
            u = self.until
            self.plans[index] = StepPlan(self.tasks, self.min_duration_s, u.max_step_s,
                                         u.min_requests_per_task, u.precision)
        return self.plans[index]

    def observe(self, step: int | None, phase: str | None, task: str, outcome: str, value: float | None) -> None:
        """One record: counted when it is a success of a step's steady window."""
        if step is None or phase != "steady" or outcome != "ok":
            return
        self.tallies.setdefault(step, StepTally()).add(task, value)

    def observe_record(self, rec: Any) -> None:
        """A record (object or JSON dict) as the controller sees it."""
        get: Callable[[str], Any] = rec.get if isinstance(rec, Mapping) else (lambda k: getattr(rec, k, None))
        self.observe(get("step"), get("phase"), str(get("task")), str(get("outcome")),
                     record_metric(self.until.metric, rec))

    def budget_left_s(self, index: int, now_s: float) -> float:
        if self.budget_s is None or self.run_started_s is None:
            return math.inf
        later = self.later_min_s[index] if index < len(self.later_min_s) else 0.0
        return self.budget_s - (now_s - self.run_started_s) - later

    def decide(self, index: int, name: str, steady_elapsed_s: float, now_s: float) -> Decision:
        """The decision for step ``index`` now; an ending decision is kept in :attr:`outcomes`."""
        if self.run_started_s is None:
            self.run_started_s = now_s - steady_elapsed_s
        plan = self.plan_of(index)
        tally = self.tallies.setdefault(index, StepTally())
        d = plan.decide(steady_elapsed_s, tally, self.budget_left_s(index, now_s))
        if not d.hold:
            self.outcomes[index] = {
                "step": name, "stopped_by": d.reason, "steady_s": round(steady_elapsed_s, 3),
                "requests_ok": {t: tally.counts.get(t, 0) for t in self.tasks},
                "targets": dict(plan.targets or {}), **({"pilot": plan.pilot} if plan.pilot else {})}
        return d

    def progress(self, index: int) -> str:
        """For the progress line: the tasks of step ``index`` still short of their count."""
        plan, tally = self.plan_of(index), self.tallies.get(index, StepTally())
        if plan.targets is None:
            return "until: pilot"
        short = [f"{t} {tally.counts.get(t, 0)}/{n}" for t, n in plan.targets.items() if tally.counts.get(t, 0) < n]
        return "until: " + (", ".join(short) if short else "counts met")

    def summary(self) -> dict[str, Any]:
        """What the manifest keeps (``sizing.adaptive``): the rule and each step's outcome."""
        return {"until": self.until.to_dict(), "stopping_rule": stopping_rule(self.until), "budget_s": self.budget_s,
                "steps": [self.outcomes[i] for i in sorted(self.outcomes)]}
