"""Capacity per arm in a study: how much more load an arm carries under the same SLOs.

Every arm's run of every round is judged against the study's one SLO block (the scenario's,
the same for every arm): a search run by its own probes (``capacity.json``), a run of fixed
steps by its steps (:func:`analysis.capacity.capacity_from_results`). An arm's capacity is the
load it carried *in every round* (the lowest round's capacity; the highest load passing in
every round when passing is monotone in load), with the lowest first-failing load as the
bracket's top. The ratio against the baseline is the arm's capacity over the baseline's, with
the per-round ratios beside it. When an arm passed its highest step, its capacity is a lower
bound ("at least") and so is its ratio; when the baseline passed its highest step, the ratio
is an upper bound.
"""

from __future__ import annotations

from typing import Any, Mapping

from tokenswarm.analysis.capacity import Capacity, capacity_from_results, read_capacity
from tokenswarm.analysis.curves import curve_points
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.slo import scenario_slos
from tokenswarm.analysis.tables import step_table
from tokenswarm.metrics import SLO_METRICS


def run_capacity_of(run: Run) -> Capacity | None:
    """One run's capacity under its scenario's SLOs (``None`` without SLOs)."""
    found = read_capacity(run.path)
    if found is not None:
        return found
    tables = step_table(run)
    return capacity_from_results(curve_points(tables.rows), tables.slo_results, tables.slo.to_dict())


def slo_text(slos: Mapping[str, Any]) -> str:
    """``tpot_p95_ms <= 60, error_rate <= 0.01`` (per-task overrides named by task)."""
    def one(name: str, v: float) -> str:
        direction = SLO_METRICS.get(name, (None, "max", ""))[1]
        return f"{name} {'<=' if direction == 'max' else '>='} {v:g}"

    parts = [one(k, v) for k, v in slos.items() if k != "per_task"]
    for task, block in (slos.get("per_task") or {}).items():
        parts += [f"{task}.{one(k, v)}" for k, v in block.items()]
    return ", ".join(parts)


def study_capacity(runs: Mapping[tuple[str, int], Run], arms: list[str], baseline: str) -> dict[str, Any] | None:
    """Capacity per arm and its ratio to the baseline (see the module docstring); ``None``
    when the study's scenario has no SLOs."""
    per_run = {key: run_capacity_of(run) for key, run in runs.items()}
    if not any(per_run.values()):
        return None
    any_run = next(iter(runs.values()))
    slos = scenario_slos(any_run.manifest).to_dict()
    out_arms: list[dict[str, Any]] = []
    by_arm: dict[str, dict[str, Any]] = {}
    for arm in arms:
        caps = {r: c for (a, r), c in sorted(per_run.items()) if a == arm and c is not None}
        if not caps:
            continue
        kind = next(iter(caps.values())).kind
        values = [c.capacity_value for c in caps.values()]
        fails = [c.first_failing_value for c in caps.values() if c.first_failing_value is not None]
        entry: dict[str, Any] = {
            "arm": arm, "kind": kind, "unit": next(iter(caps.values())).unit, "round_index": sorted(caps),
            "per_round_capacity_value": values,
            "per_round_first_failing_value": [c.first_failing_value for c in caps.values()],
            "per_round_limited_by": [None if c.limiting_probe is None else c.limiting_probe.reason() for c in caps.values()],
            #: found / at_least / below_lowest / none (no step judged: too few samples in every step)
            "per_round_status": [c.status for c in caps.values()],
            # the load carried in every round; None when some round passed nothing
            "capacity_value": None if any(v is None for v in values) else min(v for v in values if v is not None),
            "first_failing_value": min(fails) if fails else None,
            # a lower bound only when the round that sets the value passed its highest step
            "at_least": not any(v is None for v in values) and all(
                c.status == "at_least" for c in caps.values() if c.capacity_value == min(v for v in values if v is not None)),
            "source": sorted({c.source for c in caps.values()}),
        }
        by_arm[arm] = entry
        out_arms.append(entry)
    base = by_arm.get(baseline)
    for entry in out_arms:
        entry["capacity_ratio"] = None
        entry["ratio_bound"] = None
        if base is None or entry["arm"] == baseline or entry["kind"] != base["kind"]:
            continue
        b, c = base["capacity_value"], entry["capacity_value"]
        if b and c is not None:
            entry["capacity_ratio"] = c / b
            entry["ratio_bound"] = ("at least" if entry["at_least"] and not base["at_least"] else
                                    "at most" if base["at_least"] and not entry["at_least"] else
                                    "unknown" if base["at_least"] else "exact")
        base_of = dict(zip(base["round_index"], base["per_round_capacity_value"]))
        entry["per_round_capacity_ratio"] = [None if not base_of.get(r) or cv is None else cv / base_of[r]
                                    for r, cv in zip(entry["round_index"], entry["per_round_capacity_value"])]
        entry["sentence"] = sentence(entry, slos)
    return {"slos": slos, "slo_text": slo_text(slos), "baseline_arm": baseline, "arms": out_arms}


def sentence(entry: Mapping[str, Any], slos: Mapping[str, Any]) -> str:
    """``the draft arm carries 1.33x the concurrency of the baseline at tpot_p95_ms <= 60``."""
    ratio = entry.get("capacity_ratio")
    what = "concurrency" if entry["kind"] == "concurrency" else "request rate"
    if ratio is None:
        why = ("no step judged: too few samples" if "none" in entry.get("per_round_status", ())
               else "a capacity below the lowest step")
        return f"the {entry['arm']} arm: no capacity ratio ({why})"
    bound = {"at least": "at least ", "at most": "at most "}.get(entry.get("ratio_bound") or "", "")
    return f"the {entry['arm']} arm carries {bound}{ratio:.2f}x the {what} of the baseline at {slo_text(slos)}"


def capacity_lines(cap: Mapping[str, Any] | None) -> list[str]:
    """The study capacity as text lines (terminal and markdown alike)."""
    if not cap:
        return []
    lines = [f"Capacity under SLO ({cap['slo_text']}), the load each arm carried in every round:"]
    for e in cap["arms"]:
        top = "" if e["first_failing_value"] is None else f", fails at {e['first_failing_value']:g}"
        if e["capacity_value"] is not None:
            val = f"{'>= ' if e['at_least'] else ''}{e['capacity_value']:g} {e['unit']}"
        elif "none" in e.get("per_round_status", ()):
            val = "no step judged (too few samples for a percentile in every step)"
        else:
            val = "below the lowest step"
        rounds = ", ".join("-" if v is None else f"{v:g}" for v in e["per_round_capacity_value"])
        lim = next((x for x in e["per_round_limited_by"] if x), None)
        line = f"  {e['arm']}: {val}{top} (rounds: {rounds})"
        if e.get("capacity_ratio") is not None:
            line += f"; x{e['capacity_ratio']:.2f} the baseline"
        if lim:
            line += f"; limited by {lim}"
        lines.append(line)
    lines += [f"  -> {e['sentence']}" for e in cap["arms"] if e.get("sentence")]
    return lines
