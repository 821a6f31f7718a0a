"""Findings the study prints beside the speedup: latency regressions and goodput.

Latency regressions
    A TTFT or TPOT ratio (candidate / baseline, any reported percentile) whose 95 % interval
    over rounds lies wholly above 1 is a regression the speedup does not show ("TTFT p50
    x3.50 [2.90, 4.10]"): it goes into the study's notes. Only judged ratios count (their
    percentile had its samples in every run, :mod:`analysis.samples`).
Goodput
    Requests per second that succeeded and met the scenario's per-request thresholds
    (``ttft_ms``, ``tpot_ms``, ``e2e_ms``; :mod:`analysis.slo`). The ratio is judged like the
    speedup: every run of the cell needs :data:`analysis.samples.MEDIAN_NEED` good requests,
    the within-run replicates resample 1-second bins of good completions, rounds combine by the
    hierarchical bootstrap. Below that, or without thresholds, the goodput ratio is left out.
    The row carries its thresholds, n (good requests per run) and interval.
"""

from __future__ import annotations

from typing import Any, Callable

from tokenswarm import names
from tokenswarm.analysis.samples import MEDIAN_NEED
from tokenswarm.analysis.slo import SloSpec
from tokenswarm.names import PERCENTILE_KEY

#: Latency metrics whose regressions are flagged, with their display names.
REGRESSION_METRICS = {"ttft": "TTFT", "tpot": "TPOT"}


def latency_regressions(row: dict[str, Any], percentiles: tuple[float, ...]) -> list[str]:
    """"TTFT p50 x3.50 [2.90, 4.10]" for each TTFT/TPOT ratio of a verdict row whose interval is above 1."""
    out = []
    for metric, title in REGRESSION_METRICS.items():
        for p in percentiles:
            name = names.METRICS_BY_NAME[metric].ratio_key(PERCENTILE_KEY[p])
            ci = row.get(f"{name}_ci")
            if row.get(name) is not None and ci and ci[0] > 1.0:
                out.append(f"{title} p{p:g} x{row[name]:.2f} [{ci[0]:.2f}, {ci[1]:.2f}]")
    return out


def threshold_text(thresholds: dict[str, float]) -> str:
    """"ttft_ms <= 2000, tpot_ms <= 100" (the per-request goodput criteria)."""
    return ", ".join(f"{k} <= {v:g}" for k, v in sorted(thresholds.items()))


def goodput_fields(spec: SloSpec | None, task: str, good_counts: list[tuple[int | None, int | None]],
                   combine: Callable[[], dict[str, Any] | None]) -> dict[str, Any]:
    """The goodput part of a verdict row.

    ``good_counts`` is ``(candidate, baseline)`` good requests per round; ``combine`` returns the
    combined ratio over rounds (called only when every run has enough good requests).
    """
    thresholds = spec.request_thresholds(task) if spec else {}
    cand = [c for c, _ in good_counts]
    base = [b for _, b in good_counts]
    out: dict[str, Any] = {"goodput_thresholds": thresholds or None,
                           "goodput_baseline_good_requests_count": base, "goodput_candidate_good_requests_count": cand,
                           "goodput_ratio": None, "goodput_ratio_ci": None, "goodput_insufficient": False}
    if not thresholds or not good_counts or any(x is None for x in cand + base):
        return out
    if min(int(x) for x in cand + base if x is not None) < MEDIAN_NEED:
        out["goodput_insufficient"] = True
        return out
    comb = combine()
    if comb is not None:
        out["goodput_ratio"], out["goodput_ratio_ci"] = comb["point"], comb["ci"]
    return out
