"""Capacity under SLO: the highest load whose steps meet every SLO, with its interval.

A *probe* is one load step judged against the SLOs (every row of the step: all tasks and each
task). It passes when every SLO check of the step passes; a check whose percentile rests on
too few samples (n < 10 / (1 - q), :func:`analysis.stats.min_samples_for`) does not pass, so a
probe never passes by chance.

The capacity is the last passing load below the first failing one (probes sorted by load):
``capacity_value`` (last pass) and ``first_failing_value`` bound it, and their distance is the
resolution the probes reached. A passing probe above the first failure (noise, or a server
whose latency is not monotone in load) is reported, not used. The same definition serves a
capacity search (``load.mode: search``, whose probes the run writes to ``capacity.json``) and
a run with fixed steps, whose step table already holds the SLO verdicts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

from tokenswarm import names
from tokenswarm.analysis.loader import run_from_records
from tokenswarm.analysis.slo import ALL_TASKS, SloResult, SloSpec, parse_slos
from tokenswarm.analysis.tables import step_table
from tokenswarm.manifest import RunManifest

#: the file a capacity search writes into its run directory
CAPACITY_FILE = "capacity.json"


@dataclass(frozen=True)
class Probe:
    """One load step judged against the SLOs."""

    step_index: int | None
    step_name: str
    load_value: float
    passed: bool
    #: the checks that did not pass (``SloResult.to_dict()`` form), most telling first
    failed_checks: tuple[Mapping[str, Any], ...] = ()
    requests_count: int | None = None
    output_tokens_per_s: float | None = None
    note: str = ""

    @property
    def judged(self) -> bool:
        """False when the probe failed only because checks rested on too few samples."""
        return self.passed or bool(self.note) or not all(c.get("not_enough_samples") for c in self.failed_checks) \
            or not self.failed_checks

    def verdict(self) -> str:
        """``pass``, ``FAIL``, or ``not judged`` (only too few samples: a search counts it as failing)."""
        return "pass" if self.passed else "FAIL" if self.judged else "not judged"

    def reason(self) -> str:
        """Why the probe failed, as a person reads it (empty when it passed)."""
        if self.passed:
            return ""
        if not self.failed_checks:
            return self.note or "failed"
        # one check per metric and value: a one-task run's task row repeats the all-tasks row
        merged: dict[tuple[Any, Any, Any], list[str]] = {}
        for c in self.failed_checks:
            merged.setdefault((c["slo_name"], c.get("observed_value"), c.get("detail")), []).append(str(c.get("task")))
        firsts: dict[tuple[Any, Any, Any], Mapping[str, Any]] = {}
        for c in self.failed_checks:
            firsts.setdefault((c["slo_name"], c.get("observed_value"), c.get("detail")), c)
        parts = [_check_text(c, merged[k]) for k, c in list(firsts.items())[:3]]
        more = len(firsts) - 3
        text = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
        return text + (f" ({self.note})" if self.note else "")

    def to_dict(self) -> dict[str, Any]:
        return {"step_index": self.step_index, "step_name": self.step_name, "load_value": self.load_value,
                "passed": self.passed, "judged": self.judged, "verdict": self.verdict(), "reason": self.reason(), "failed_checks": [dict(c) for c in self.failed_checks],
                "requests_count": self.requests_count, names.OUTPUT_TOKENS_PER_S: self.output_tokens_per_s,
                "note": self.note}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Probe:
        return cls(step_index=d.get("step_index"), step_name=str(d.get("step_name", "")),
                   load_value=float(d["load_value"]), passed=bool(d["passed"]),
                   failed_checks=tuple(d.get("failed_checks") or ()), requests_count=d.get("requests_count"),
                   output_tokens_per_s=d.get(names.OUTPUT_TOKENS_PER_S), note=str(d.get("note") or ""))


def _check_text(c: Mapping[str, Any], tasks: Sequence[str]) -> str:
    where = ", ".join("all tasks" if t == ALL_TASKS else f"task {t}" for t in tasks)
    if c.get("not_enough_samples"):
        detail = str(c.get("detail") or "not enough samples")
        return f"{c['slo_name']} ({where}): " + (detail if detail.startswith("not judged") else f"not judged, {detail}")
    obs = c.get("observed_value")
    shown = "not observed" if obs is None else f"{obs:.4g}"
    return f"{c['slo_name']} = {shown} {c.get('unit', '')}, needs {c['comparison']} {c['threshold_value']:g} ({where})"


def _severity(c: Mapping[str, Any]) -> tuple[int, float]:
    """Order failed checks: judged misses first, the farthest over its threshold first."""
    obs, thr = c.get("observed_value"), c.get("threshold_value") or 0.0
    if c.get("not_enough_samples") or obs is None:
        return (1, 0.0)
    over = (obs / thr) if c.get("comparison") == "<=" and thr else (thr / obs if obs else float("inf"))
    return (0, -over)


def probe_of(step_index: int | None, step_name: str, load_value: float, results: Iterable[SloResult],
             row: Mapping[str, Any] | None = None, note: str = "") -> Probe:
    """A probe from one step's SLO results (every row of the step) and its all-tasks row."""
    failed = sorted((r.to_dict() for r in results if not r.passed), key=_severity)
    row = row or {}
    return Probe(step_index=step_index, step_name=step_name, load_value=float(load_value), passed=not failed and not note,
                 failed_checks=tuple(failed), requests_count=row.get("requests_count"),
                 output_tokens_per_s=row.get(names.OUTPUT_TOKENS_PER_S), note=note)


def probes_used(cap: Capacity) -> list[Probe]:
    """The probes the capacity rests on (fixed steps: the judged ones)."""
    return [p for p in cap.probes if cap.source == "search" or p.judged]


@dataclass(frozen=True)
class Capacity:
    """The capacity found by a set of probes (see the module docstring)."""

    kind: str  #: "concurrency" (users) or "rate" (requests/s)
    probes: tuple[Probe, ...]
    capacity_value: float | None
    first_failing_value: float | None
    #: the resolution asked for (a search), else None: the probes' spacing is what was reached
    resolution: float | None = None
    slos: Mapping[str, Any] = field(default_factory=dict)
    source: str = "steps"  #: "search" or "steps"
    notes: tuple[str, ...] = ()

    @property
    def unit(self) -> str:
        return "users" if self.kind == "concurrency" else "req/s"

    @property
    def status(self) -> str:
        """``found`` (a pass below a failure), ``at_least`` (nothing failed), ``below_lowest``
        (the lowest probe failed) or ``none`` (no probe judged)."""
        if not probes_used(self):
            return "none"
        if self.capacity_value is None:
            return "below_lowest"
        return "at_least" if self.first_failing_value is None else "found"

    @property
    def interval(self) -> tuple[float | None, float | None]:
        """(last passing, first failing) load."""
        return self.capacity_value, self.first_failing_value

    @property
    def limiting_probe(self) -> Probe | None:
        """The first failing probe: it says which SLO and task limit the capacity."""
        fails = [p for p in self.probes if not p.passed and p.load_value == self.first_failing_value
                 and (p.judged or self.source == "search")]
        return fails[0] if fails else None

    def summary(self) -> str:
        """One line: ``capacity 12 users (passes at 12, fails at 13: tpot_p95_ms ... (task code))``."""
        u = self.unit
        if self.status == "none":
            return "capacity: no probe judged" + (" (too few samples in every step)" if self.probes else "")
        if self.status == "below_lowest":
            lim = self.limiting_probe
            return (f"capacity below the lowest probe ({self.first_failing_value:g} {u} fails"
                    + (f": {lim.reason()})" if lim else ")"))
        if self.status == "at_least":
            return f"capacity at least {self.capacity_value:g} {u} (no probe failed)"
        lim = self.limiting_probe
        return (f"capacity {self.capacity_value:g} {u} (passes at {self.capacity_value:g}, fails at "
                f"{self.first_failing_value:g}" + (f": {lim.reason()})" if lim else ")"))

    def to_dict(self) -> dict[str, Any]:
        lim = self.limiting_probe
        return {"kind": self.kind, "unit": self.unit, "status": self.status, "source": self.source,
                "capacity_value": self.capacity_value, "first_failing_value": self.first_failing_value,
                "resolution_value": self.resolution,
                "reached_resolution_value": (None if self.capacity_value is None or self.first_failing_value is None
                                       else self.first_failing_value - self.capacity_value),
                "limited_by": None if lim is None else lim.reason(), "summary": self.summary(),
                "slos": dict(self.slos), "notes": list(self.notes), "probes": [p.to_dict() for p in self.probes]}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Capacity:
        return capacity_of([Probe.from_dict(p) for p in d.get("probes") or ()], str(d.get("kind", "concurrency")),
                           resolution=d.get("resolution_value"), slos=d.get("slos") or {}, source=str(d.get("source", "steps")))


def capacity_of(probes: Sequence[Probe], kind: str, *, resolution: float | None = None,
                slos: Mapping[str, Any] | None = None, source: str = "steps") -> Capacity:
    """The capacity of judged probes: the last passing load below the first failing one.

    A search decided on every probe (one short of samples at its cap counted as failing), so
    its probes are used as they are. Fixed steps (``source="steps"``) cannot be extended: a
    step failing *only* for too few samples is not judged either way; it is listed, not used.
    """
    notes = []
    usable = list(probes)
    if source != "search":
        usable = [p for p in probes if p.judged]
        skipped = [p.load_value for p in probes if not p.judged]
        if skipped:
            notes.append("not judged (too few samples for a percentile), so not used: load "
                         + ", ".join(f"{v:g}" for v in skipped))
    by_load = sorted(usable, key=lambda p: p.load_value)
    fails = [p.load_value for p in by_load if not p.passed]
    first_fail = min(fails) if fails else None
    below = [p.load_value for p in by_load if p.passed and (first_fail is None or p.load_value < first_fail)]
    above = sorted({p.load_value for p in by_load if p.passed and first_fail is not None and p.load_value > first_fail})
    if above:
        notes.append(f"passed again above the first failure (at {', '.join(f'{v:g}' for v in above)}): noise or a "
                     "load-dependent server; the capacity is the last pass below the first failure")
    return Capacity(kind=kind, probes=tuple(probes), capacity_value=max(below) if below else None,
                    first_failing_value=first_fail, resolution=resolution, slos=dict(slos or {}), source=source,
                    notes=tuple(notes))


@dataclass(frozen=True)
class StepJudgement:
    """One step's rows and SLO checks, computed from its steady-window records."""

    rows: tuple[Mapping[str, Any], ...]
    results: tuple[SloResult, ...]

    @property
    def all_row(self) -> Mapping[str, Any] | None:
        return next((r for r in self.rows if r["task"] == ALL_TASKS), None)

    @property
    def short_of_samples(self) -> bool:
        """Some check cannot be judged yet: a percentile on too few samples, or nothing observed."""
        return any(r.not_enough_samples or r.observed is None for r in self.results)


def judge_step(records: Sequence[Mapping[str, Any]], manifest: RunManifest, step_index: int,
               slos: Mapping[str, Any] | SloSpec) -> StepJudgement:
    """Judge one step from its records (as dicts) with the report's own tables and SLO checks.

    ``manifest`` gives the step's window (``steady_at``..``ended_at``; while the window is still
    open the span of its requests stands in). Only the step's steady-phase records count, as
    in the report. No records: no rows, and the judgement is short of samples.
    """
    spec = parse_slos(slos)
    mine = [r for r in records if r.get("step") == step_index and r.get("phase") == "steady"]
    if not mine:
        return StepJudgement(rows=(), results=())
    steps = tuple(s for s in manifest.steps if s.index == step_index)
    run = run_from_records(mine, replace(manifest, steps=steps), path=f"step {step_index}")
    tables = step_table(run, slo=spec)
    return StepJudgement(rows=tuple(tables.rows), results=tuple(tables.slo_results))


def capacity_from_results(points: Sequence[Mapping[str, Any]], results: Sequence[SloResult],
                          slos: Mapping[str, Any] | None = None) -> Capacity | None:
    """The capacity of a run's fixed steps: ``points`` are all-tasks step rows (or curve points)
    with ``step_index``/``step_name`` and a load; ``results`` their SLO checks. ``None`` without SLOs."""
    if not results:
        return None
    probes, kind = [], "concurrency"
    for p in points:
        load = p.get("load_value")
        if load is None:
            load = p.get("step_concurrency_users") if p.get("step_concurrency_users") is not None else p.get("step_rate_rps")
        if load is None:
            continue
        if p.get("step_kind") == "rate":
            kind = "rate"
        mine = [r for r in results if r.step_index == p["step_index"]]
        if mine:
            probes.append(probe_of(p["step_index"], p.get("step_name", ""), load, mine, p))
    return capacity_of(probes, kind, slos=slos, source="steps") if probes else None


def read_capacity(run_dir: str | Path) -> Capacity | None:
    """A search run's ``capacity.json`` (``None`` when the run was not a search)."""
    path = Path(run_dir) / CAPACITY_FILE
    if not path.is_file():
        return None
    return Capacity.from_dict(json.loads(path.read_text()))


def capacity_table(cap: Capacity) -> list[list[str]]:
    """The probes as table rows (in the order they ran): step, load, verdict, why, requests, tokens/s."""
    rows = []
    for p in cap.probes:
        rows.append([p.step_name, f"{p.load_value:g}", p.verdict(), p.reason() or "-",
                     "-" if p.requests_count is None else str(p.requests_count),
                     "-" if p.output_tokens_per_s is None else f"{p.output_tokens_per_s:.0f}"])
    return rows


CAPACITY_TABLE_HEADER = ["step", "load", "SLOs", "why not", "requests", "output tok/s"]


def render_capacity_text(cap: Capacity) -> str:
    """The capacity and its probes as terminal text."""
    width = [max(len(h), *(len(r[i]) for r in capacity_table(cap))) if cap.probes else len(h)
             for i, h in enumerate(CAPACITY_TABLE_HEADER)]
    width[3] = min(width[3], 90)
    lines = [f"capacity under SLO ({cap.source}): {cap.summary()}"]
    if cap.resolution is not None:
        lines[0] += f" [resolution asked {cap.resolution:g} {cap.unit}]"
    lines.append("  ".join(h.ljust(w) for h, w in zip(CAPACITY_TABLE_HEADER, width)))
    for r in capacity_table(cap):
        lines.append("  ".join(c.ljust(w) for c, w in zip(r, width)))
    lines.extend(f"note: {n}" for n in cap.notes)
    return "\n".join(lines)


def run_capacity(run_dir: str | Path | None, points: Sequence[Mapping[str, Any]], results: Sequence[SloResult],
                 slos: Mapping[str, Any] | None = None) -> dict[str, Any] | None:
    """The report's ``capacity`` block: a search's own probes (``capacity.json``), else the
    capacity of the run's steps under its SLOs; a sweep's measurements ride along. ``None``
    without SLOs and without a search."""
    doc = None
    if run_dir is not None and (Path(run_dir) / CAPACITY_FILE).is_file():
        doc = json.loads((Path(run_dir) / CAPACITY_FILE).read_text())
        if doc.get("source") == "search":
            return {**Capacity.from_dict(doc).to_dict(), "stop_reason": doc.get("stop_reason"),
                    "drain_notes": doc.get("drain_notes") or []}
    cap = capacity_from_results(points, results, slos)
    out = None if cap is None else cap.to_dict()
    if doc is not None and doc.get("source") == "sweep":
        sweep = {k: doc.get(k) for k in ("saturation_requests_per_s", "single_user_requests_per_s", "saturation_users",
                                         "steps_users", "stop_reason")}
        out = {**(out or {}), "sweep": sweep}
    return out
