"""Load curves across steps: throughput and latency vs load, the knee, the SLO limit.

The x axis is the step target: concurrency (users) for closed-loop steps or the offered
rate (requests/s) for open-loop steps. Points use the all-tasks row of each step.

Knee
    Going from one step to the next, latency "rises faster than throughput" when
    ``ln(L_i / L_{i-1}) > ln(T_i / T_{i-1})`` (the elasticity of latency with respect to
    throughput exceeds 1, which includes throughput falling while latency rises). The knee is
    the first step where that happens; the step before it is the most efficient load.
    It is looked for on E2E p95, TTFT p99 and TPOT p99 (:data:`KNEE_METRICS`; in a mix, E2E
    is dominated by output length and can hide a TTFT or TPOT knee); ``knee`` is the earliest.
Pareto view
    A step is Pareto-optimal when no other step has both higher output tokens/s and lower
    latency.
Sample size
    A point's percentile below its need (:mod:`analysis.samples`, n >= 10 / (1 - q)) is
    ``None`` in the point and named in its ``short_columns`` (``column``, ``samples_needed_count``): no
    plot draws it, the knee finder and the Pareto flag do not see it.
"""

from __future__ import annotations

import math
from typing import Any

from tokenswarm import names
from tokenswarm.analysis.samples import guard_values
from tokenswarm.analysis.slo import ALL_TASKS, SloResult

CURVE_COLUMNS: tuple[str, ...] = (
    "requests_per_s",
    names.OUTPUT_TOKENS_PER_S,
    "goodput_requests_per_s",
    names.GOODPUT_SHARE,
    names.ERROR_RATE,
    names.TTFT_P50_MS,
    names.TTFT_P95_MS,
    names.TTFT_P99_MS,
    names.TPOT_P50_MS,
    names.TPOT_P95_MS,
    names.TPOT_P99_MS,
    names.ITL_P50_MS,
    names.ITL_P99_MS,
    names.E2E_P50_MS,
    names.E2E_P95_MS,
    names.E2E_P99_MS,
    names.REQUEST_OUTPUT_TPS_P50_TOKENS_PER_S,
    names.REQUEST_OUTPUT_TPS_MEAN_TOKENS_PER_S,
)


def load_of(row: dict[str, Any]) -> float | None:
    """The x value of a row: concurrency users or offered rate."""
    v = row.get("step_concurrency_users")
    return v if v is not None else row.get("step_rate_rps")


def curve_points(rows: list[dict[str, Any]], latency_key: str = names.E2E_P95_MS) -> list[dict[str, Any]]:
    """One point per step with a load target (all-tasks rows), sorted by load, Pareto-flagged."""
    pts = []
    for r in rows:
        if r["task"] != ALL_TASKS or load_of(r) is None:
            continue
        p = {"step_index": r["step_index"], "step_name": r["step_name"], "step_kind": r["step_kind"],
             "load_value": load_of(r)}
        values, short = guard_values(r, CURVE_COLUMNS)
        p.update(values)
        p["short_columns"] = [{"column": k, "samples_needed_count": v} for k, v in short.items()]
        pts.append(p)
    pts.sort(key=lambda p: p["load_value"])
    for p in pts:
        t, lat = p[names.OUTPUT_TOKENS_PER_S], p.get(latency_key)
        if t is None or lat is None:
            p["pareto_optimal"] = None
            continue
        dominated = any(
            q is not p and q[names.OUTPUT_TOKENS_PER_S] is not None and q.get(latency_key) is not None
            and q[names.OUTPUT_TOKENS_PER_S] >= t and q[latency_key] <= lat
            and (q[names.OUTPUT_TOKENS_PER_S] > t or q[latency_key] < lat)
            for q in pts
        )
        p["pareto_optimal"] = not dominated
    return pts


def find_knee(points: list[dict[str, Any]], latency_key: str = names.E2E_P95_MS) -> dict[str, Any] | None:
    """First step where latency grows faster than throughput (see module docstring).

    A step short of samples for ``latency_key`` (its value ``None``) is left out of that
    metric's curve, so the steps on either side of it are compared with each other.
    """
    points = [p for p in points if p.get(latency_key) is not None]
    for prev, cur in zip(points, points[1:]):
        t0, t1 = prev[names.OUTPUT_TOKENS_PER_S], cur[names.OUTPUT_TOKENS_PER_S]
        l0, l1 = prev.get(latency_key), cur.get(latency_key)
        if not (t0 and t1 and l0 and l1) or min(t0, t1, l0, l1) <= 0:
            continue
        dl, dt = math.log(l1 / l0), math.log(t1 / t0)
        if dl > dt and dl > 0:
            return {
                "knee_step_index": cur["step_index"],
                "knee_step_name": cur["step_name"],
                "knee_load_value": cur["load_value"],
                "last_efficient_step_index": prev["step_index"],
                "last_efficient_load_value": prev["load_value"],
                "latency_metric": latency_key,
                "latency_change_ratio": l1 / l0,
                "throughput_change_ratio": t1 / t0,
            }
    return None


def max_load_meeting_slo(points: list[dict[str, Any]], results: list[SloResult]) -> dict[str, Any] | None:
    """Highest-load step whose SLO results (all tasks) all pass; ``None`` without SLOs."""
    if not results:
        return None
    by_step: dict[Any, bool] = {}
    for r in results:
        by_step[r.step_index] = by_step.get(r.step_index, True) and r.passed
    passing = [p for p in points if by_step.get(p["step_index"], False)]
    if not passing:
        short = sum(1 for r in results if r.not_enough_samples)
        return {"step_index": None, "load_value": None, "not_judged_count": short,
                "detail": "no step meets all SLOs" + (f" ({short} check(s) not judged: too few samples)" if short else "")}
    best = max(passing, key=lambda p: p["load_value"])
    return {"step_index": best["step_index"], "step_name": best["step_name"], "load_value": best["load_value"],
            names.OUTPUT_TOKENS_PER_S: best[names.OUTPUT_TOKENS_PER_S], "detail": "highest load whose steps meet all SLOs"}


#: Latencies whose knee is looked for (the summary's ``knee`` is the earliest of them).
KNEE_METRICS: tuple[str, ...] = (names.E2E_P95_MS, names.TTFT_P99_MS, names.TPOT_P99_MS)


def curves(rows: list[dict[str, Any]], slo_results: list[SloResult], latency_key: str = names.E2E_P95_MS) -> dict[str, Any]:
    """Points, knee and SLO limit in one JSON-ready dict."""
    pts = curve_points(rows, latency_key)
    knees = {m: find_knee(pts, m) for m in KNEE_METRICS}
    found = [k for k in knees.values() if k is not None]
    return {
        "points": pts,
        # the earliest knee of any metric: in a mix E2E follows output length and can hide a TPOT/TTFT knee
        "knee": min(found, key=lambda k: k["knee_load_value"]) if found else None,
        "knees": [{"latency_metric": m, **(k or {})} if k else {"latency_metric": m, "knee_step_name": None}
                  for m, k in knees.items()],
        "max_load_meeting_slo": max_load_meeting_slo(pts, slo_results),
    }
