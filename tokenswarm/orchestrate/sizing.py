"""The plan states what it can judge: requests expected per cell against what each figure needs.

Before the first request, for every cell (load step x task, and the ``all`` row) this module
puts side by side

* the successful requests the plan is expected to give the cell, from a throughput estimate
  (:class:`RateModel`) and the scenario's task weights, lengths and steps; and
* what the cell's figures need: every percentile gate ``<metric>_pNN_ms`` of the SLOs needs
  ``10 / (1 - q)`` requests (:func:`tokenswarm.metrics.min_samples_for`, the one rule
  the analysis and the verdict use), and every cell's median -- the basis of a study's
  verdict -- needs ``10 / (1 - 0.5)`` = 20.

The estimate is an *estimate*: without a measurement of the server it assumes a stream
decodes :data:`ASSUMED_STREAM_TOKENS_PER_S` tokens/s and prefill runs at
:data:`ASSUMED_PREFILL_TOKENS_PER_S` (the text says so). ``load.until`` (adaptive steps, see
:mod:`tokenswarm.orchestrate.adaptive`) does not rely on it: it counts what arrives.

Under a random per-request task draw a cell's count is itself random: the plan gives the
chance that a rare task falls short of its need, and offers the stratified deal
(``traffic.task_draw: stratified``) that guarantees each task its share.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass
from typing import Any, Mapping

from tokenswarm.metrics import ALL_TASKS, SLO_METRICS, min_samples_for
from tokenswarm.orchestrate.adaptive import stopping_rule

#: per-stream decode speed assumed when the server was not measured (tokens/s)
ASSUMED_STREAM_TOKENS_PER_S = 40.0
#: prefill speed assumed when the server was not measured (prompt tokens/s)
ASSUMED_PREFILL_TOKENS_PER_S = 5000.0
#: a random draw that falls short of a need more often than this is flagged
SHORTFALL_RISK = 0.05
_PERCENTILE = re.compile(r"^(?P<metric>[a-z0-9]+?)_p(?P<p>\d+(?:_\d+)?)_ms$")
#: the figure every cell needs: its median (what a study's verdict compares)
MEDIAN = "median (the study verdict's basis)"


@dataclass(frozen=True)
class RateModel:
    """How fast the server is taken to be; ``source`` says where the numbers come from."""

    stream_tokens_per_s: float = ASSUMED_STREAM_TOKENS_PER_S
    prefill_tokens_per_s: float = ASSUMED_PREFILL_TOKENS_PER_S
    first_token_s: float = 0.0  #: fixed time to the first token beyond prefill (a pilot measures it)
    source: str = (f"assumed {ASSUMED_STREAM_TOKENS_PER_S:g} output tokens/s per stream and "
                   f"{ASSUMED_PREFILL_TOKENS_PER_S:g} prompt tokens/s prefill (no pilot; the server was not measured)")

    @classmethod
    def from_pilot(cls, stream_tokens_per_s: float, ttft_s: float, output_tokens: int) -> RateModel:
        """Measured by one pilot request: its stream's speed and time to first token (prefill assumed)."""
        return cls(stream_tokens_per_s, ASSUMED_PREFILL_TOKENS_PER_S, ttft_s,
                   f"pilot: one request of {output_tokens} tokens streamed {stream_tokens_per_s:.0f} tokens/s, "
                   f"first token after {ttft_s * 1000:.0f} ms (prefill assumed {ASSUMED_PREFILL_TOKENS_PER_S:g} "
                   "prompt tokens/s; concurrency taken not to slow a stream: an upper bound at high load)")


@dataclass(frozen=True)
class Need:
    """One figure of one cell and the successful requests it needs."""

    figure: str  #: an SLO name (``ttft_p95_ms``) or :data:`MEDIAN`
    requests: int


@dataclass(frozen=True)
class Cell:
    """One load step x task (or ``all``): expected successful requests and the needs."""

    step: str
    task: str
    expected: float  #: successful requests the plan is expected to give (at the cap for adaptive steps)
    rate_per_s: float  #: the cell's expected requests per second of steady window
    needs: tuple[Need, ...]
    shortfall_risk: float = 0.0
    window_s: float = 0.0  #: the step's expected steady window (its cap, or until its counts)  #: chance the random draw gives fewer than the largest need

    @property
    def need(self) -> int:
        return max((n.requests for n in self.needs), default=0)

    def seconds_for(self, requests: int) -> float | None:
        return None if self.rate_per_s <= 0 else requests / self.rate_per_s


def gate_needs(slos: Mapping[str, Any] | Any, task: str) -> list[Need]:
    """What the gates of one row need: ``10 / (1 - q)`` requests per percentile gate, 20 for the median."""
    needs = [Need(MEDIAN, min_samples_for(50.0))]
    if not slos:
        return needs
    # the SLO grammar's one parser is the analysis': read only when the run carries gates, so a
    # run without any imports no analysis (nor numpy)
    from tokenswarm.analysis.slo import parse_slos

    spec = parse_slos(slos)
    for name in spec.for_task(task):
        column = SLO_METRICS[name][0] if name in SLO_METRICS else ""
        m = _PERCENTILE.match(column)
        if m:
            needs.append(Need(name, min_samples_for(float(m.group("p").replace("_", ".")))))
    return needs


def _mean(dist: Any, rng: random.Random, draws: int = 400) -> float:
    if dist is None:
        return 0.0
    return float(sum(dist.sample(rng) for _ in range(draws))) / draws


def request_seconds(task: Any, rate: RateModel) -> float:
    """Mean seconds one request (one turn) of ``task`` holds a closed-loop user, think time included."""
    rng = random.Random(0)
    prompt = _mean(task.document_tokens, rng) if task.document_tokens is not None else _mean(task.prompt_tokens, rng)
    out = _mean(task.max_tokens, rng)
    think = _mean(task.think_time_s, rng)
    return rate.first_token_s + prompt / rate.prefill_tokens_per_s + out / rate.stream_tokens_per_s + think


def _users_per_task(tasks: list[Any], users: int) -> dict[str, float]:
    """Locust's share of ``users`` per task when each user sticks to one task (largest remainders)."""
    total = sum(t.weight for t in tasks)
    exact = {t.name: users * t.weight / total for t in tasks}
    out = {k: math.floor(v) for k, v in exact.items()}
    for k in sorted(exact, key=lambda k: exact[k] - out[k], reverse=True)[: users - sum(out.values())]:
        out[k] += 1
    return {k: float(v) for k, v in out.items()}


def binomial_below(n: int, p: float, k: int) -> float:
    """P(Binomial(n, p) < k), exactly (log-space terms; n is a step's request count)."""
    if k <= 0:
        return 0.0
    if p <= 0:
        return 1.0
    if p >= 1:
        return 0.0 if n >= k else 1.0
    total = 0.0
    for i in range(min(k, n + 1)):
        total += math.exp(math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1)
                          + i * math.log(p) + (n - i) * math.log1p(-p))
    return min(1.0, total)


def plan_cells(scenario: Any, slos: Mapping[str, Any] | Any, rate: RateModel | None = None) -> list[Cell]:
    """Every cell of the plan, expected against needed (see the module docstring)."""
    rate = rate or RateModel()
    load = scenario.load
    tasks = [t for t in scenario.traffic.classes if t.weight > 0]
    total_w = sum(t.weight for t in tasks) or 1.0
    share = {t.name: t.weight / total_w for t in tasks}
    secs = {t.name: request_seconds(t, rate) for t in tasks}
    draw = getattr(scenario.traffic, "task_draw", "per_user")
    cells: list[Cell] = []
    for target in load.steps:
        if load.mode == "closed":
            name = f"c{int(target)}"
            if draw == "per_user":
                users = _users_per_task(tasks, int(target))
                per_task = {t: users[t] / secs[t] if secs[t] > 0 else 0.0 for t in share}
            else:
                mean_s = sum(share[t] * secs[t] for t in share)
                per_task = {t: target / mean_s * share[t] if mean_s > 0 else 0.0 for t in share}
        else:
            name = "replay" if load.mode == "replay" else f"r{target:g}"
            per_task = {t: target * share[t] for t in share}
        total_rate = sum(per_task.values())
        window_s = steady_window_s(load, per_task)
        rows = [(ALL_TASKS, total_rate)] + [(t, per_task[t]) for t in share]
        for task, r in rows:
            needs = tuple(gate_needs(slos, task))
            expected = r * window_s
            need = max(n.requests for n in needs)
            risk = 0.0
            if task != ALL_TASKS and draw == "per_request" and len(tasks) > 1:
                risk = binomial_below(int(total_rate * window_s), share[task], need)
            cells.append(Cell(name, task, expected, r, needs, risk, window_s))
    return cells


def steady_window_s(load: Any, per_task: Mapping[str, float]) -> float:
    """The expected steady window of a step: fixed, or (adaptive) until the slowest task has its count."""
    until = getattr(load, "until", None)
    if until is None:
        return float(load.step_duration_s)
    if until.precision is not None or not until.min_requests_per_task:
        return float(until.max_step_s)  # the pilot decides the count: plan for the cap
    slowest = max((until.min_requests_per_task / r if r > 0 else math.inf) for r in per_task.values())
    return float(min(until.max_step_s, max(load.step_duration_s, slowest)))


def _fix_for(cell: Cell, need: Need, scenario: Any) -> str:
    load = scenario.load
    draw = getattr(scenario.traffic, "task_draw", "per_user")
    secs = cell.seconds_for(need.requests)
    fixes = []
    if cell.expected < 1 and draw == "per_user" and cell.task != ALL_TASKS:
        fixes.append("no user is given this task at this concurrency: traffic.task_draw: stratified "
                     "(every user deals every task) or more users")
    if getattr(load, "until", None) is None:
        fixes.append("lengthen the step" + (f" (load.step_duration_s >= {math.ceil(secs)})" if secs else "")
                     + f" or let it run until it has them (load.until: {{min_requests_per_task: "
                       f"{need.requests}, max_step_s: {math.ceil(secs * 1.5) if secs else 600}}})")
    else:
        if (load.until.min_requests_per_task or 0) < need.requests and load.until.precision is None:
            fixes.append(f"raise load.until.min_requests_per_task to {need.requests}")
        fixes.append("raise load.until.max_step_s" + (f" to >= {math.ceil(secs)}" if secs else ""))
    if need.figure != MEDIAN:
        p = _PERCENTILE.match(need.figure)
        if p and p.group("p") != "50":
            fixes.append(f"gate on p50 ({p.group('metric')}_p50_ms needs {min_samples_for(50.0)})")
    return "; ".join(fixes)


def plan_lines(scenario: Any, slos: Mapping[str, Any] | Any, rate: RateModel | None = None) -> tuple[list[str], list[str]]:
    """The plan as text: (lines, warnings). A warning names a figure the plan cannot judge and the fix."""
    rate = rate or RateModel()
    cells = plan_cells(scenario, slos, rate)
    load = scenario.load
    until = getattr(load, "until", None)
    lines = [f"sizing: throughput {rate.source}"]
    steady = {c.step: c.window_s for c in cells}
    lines.append(f"sizing: expected length ~{sum(steady.values()) + len(steady) * load.warmup_s:.0f} s "
                 f"(steady windows and warm-ups)")
    if until is not None:
        goal = ", ".join(f"{k} {v}" for k, v in until.to_dict().items() if k != "max_step_s")
        lines.append(f"sizing: adaptive steps: each runs >= {load.step_duration_s:g} s and until {goal} "
                     f"(at most {until.max_step_s:g} s); {stopping_rule(until)}")
    warnings: list[str] = []
    by_step: dict[str, list[Cell]] = {}
    for c in cells:
        by_step.setdefault(c.step, []).append(c)
    for step, row in by_step.items():
        parts = [f"{c.task} ~{c.expected:.0f}/{c.need}" for c in row]
        lines.append(f"sizing: step {step} (~{row[0].window_s:.0f} s steady): requests expected/needed per cell: "
                     + ", ".join(parts))
        short = [c for c in row if c.expected < c.need]
        if short:
            worst = min(short, key=lambda c: c.expected / c.need)
            need = max(worst.needs, key=lambda n: n.requests)
            figures = sorted({n.figure for c in short for n in c.needs if c.expected < n.requests and n.figure != MEDIAN})
            what = " and ".join(figures) if figures else "the median"
            secs = worst.seconds_for(need.requests)
            gives = ", ".join(f"~{c.expected:.0f} ({c.task})" for c in short)
            warnings.append(
                f"{what} on step {step} {'need' if len(figures) > 1 else 'needs'} {need.requests} requests per cell; this plan gives {gives}"
                + (f" (about {secs:.0f} s needed for {worst.task})" if secs else "") + f": {_fix_for(worst, need, scenario)}")
        for c in row:
            if c.expected >= c.need and c.shortfall_risk > SHORTFALL_RISK:
                warnings.append(
                    f"{c.task} on step {step}: ~{c.expected:.0f} expected, {c.need} needed, but the per-request "
                    f"random draw falls short {c.shortfall_risk:.0%} of the time: traffic.task_draw: stratified "
                    "deals each task its share, or give the step more time")
    return lines, warnings
