"""Per-request arrays of a run, derived from its records once: outcome masks, the glossary's
derived metrics and the good requests (those meeting their task's per-request SLO thresholds).

Metric definitions are those of :mod:`tokenswarm.metrics`; the vectorised versions here are
tested against it.
"""

from __future__ import annotations

import numpy as np

from tokenswarm.analysis.errors import NoSuccessError
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.slo import SloSpec

FAILED_OUTCOMES: tuple[str, ...] = ("http_error", "stream_error", "timeout")


def require_success_in(run: Run) -> None:
    """Raise :class:`NoSuccessError` (with the outcome counts) unless some request succeeded."""
    if not derived(run)["ok"].any():
        counts = {o: int((run["outcome"] == c).sum()) for c, o in enumerate(run.categories["outcome"])}
        raise NoSuccessError.among(run.path, counts, len(run))


def derived(run: Run) -> dict[str, np.ndarray]:
    """Per-request arrays derived once per run (glossary definitions, vectorised).

    ``tpot_ms`` = (e2e - ttft) / (output_tokens - 1) for >= 2 tokens; ``request_output_tps``
    = output_tokens / (e2e / 1000) for e2e > 0; ``*_from_schedule_ms`` = value + lag (a
    missing lag counts as none, as in :func:`tokenswarm.metrics.with_schedule`).
    """
    cached: dict[str, np.ndarray] | None = run.cache.get("derived")
    if cached is not None:
        return cached
    c = run.columns
    outcome = c["outcome"]
    ok = outcome == run.code("outcome", "ok")
    failed = np.isin(outcome, [run.code("outcome", o) for o in FAILED_OUTCOMES])
    cancelled = outcome == run.code("outcome", "cancelled")
    ttft, e2e, out_tok = c["ttft_ms"], c["e2e_ms"], c["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tok >= 2, (e2e - ttft) / (out_tok - 1), np.nan)
        tps = np.where(e2e > 0, out_tok / (e2e / 1000.0), np.nan)
    lag = c["schedule_lag_ms"]
    lag = np.where(np.isnan(lag), (c["sent_at_s"] - c["scheduled_at_s"]) * 1000.0, lag)
    lag0 = np.nan_to_num(lag, nan=0.0)
    end_s = c["sent_at_s"] + np.nan_to_num(e2e, nan=0.0) / 1000.0
    out = {
        "ok": ok,
        "failed": failed,
        "cancelled": cancelled,
        "tpot_ms": tpot,
        "request_output_tps": tps,
        "schedule_lag_ms": lag,
        "ttft_from_schedule_ms": ttft + lag0,
        "e2e_from_schedule_ms": e2e + lag0,
        "end_s": end_s,
    }
    run.cache["derived"] = out
    return out


def good_mask(run: Run, spec: SloSpec) -> np.ndarray | None:
    """Requests that succeeded and meet their task's per-request thresholds; ``None`` if none set.

    A missing TTFT or E2E fails the criterion it is checked against; a missing TPOT (fewer
    than two output tokens) passes, as the metric does not exist for such a request.
    """
    d = derived(run)
    tasks = run.categories["task"]
    thresholds = {t: spec.request_thresholds(t) for t in tasks}
    if not any(thresholds.values()):
        return None
    good = d["ok"].copy()
    task = run["task"]
    for metric, values in (("ttft_ms", run["ttft_ms"]), ("e2e_ms", run["e2e_ms"]), ("tpot_ms", d["tpot_ms"])):
        limit = _per_task(tasks, thresholds, metric)
        if limit is None:
            continue
        # one vectorised pass per metric (per-task boolean selections cost seconds at 10M requests);
        # requests of tasks without this threshold have limit NaN and are left as they are
        lim = limit[task]
        passes = np.isnan(lim) | (values <= lim)
        if metric == "tpot_ms":
            passes |= np.isnan(values)
        good &= passes
    return good


def _per_task(tasks: list[str], thresholds: dict[str, dict[str, float]], metric: str) -> np.ndarray | None:
    """Threshold of ``metric`` by task code (NaN: none for that task; the last entry is for code -1)."""
    limit = np.array([thresholds[t].get(metric, np.nan) for t in tasks] + [np.nan], dtype=np.float64)
    return None if np.isnan(limit).all() else limit
