"""Soak analysis: metrics in fixed time windows, drift tests and error bursts.

Requests are assigned to the window in which they *ended* (``sent_at_s + e2e``; ``sent_at_s``
when no end was observed), from the first ``sent_at_s`` of the run; warm-up records are
excluded when the run marks phases. A trailing window shorter than ``window_s`` is reported
but left out of the trend tests (its throughput would look like a drop).

Drift: for each series a two-sided Mann-Kendall test and a Theil-Sen slope; a drift is
reported when ``p < alpha`` (default 0.01) *and* the Theil-Sen line changes by at least
``min_relative_change`` (default 10 %) of the series median over the run, so a long soak
does not flag statistically significant but irrelevant wobbles.

A window's TTFT/TPOT percentile below its need (n >= 10 / (1 - q), :mod:`analysis.samples`)
is ``None``: not drawn, not tested for drift (the series' test then has fewer windows).

Error bursts: windows whose error count is at least 3 and more than 3 binomial standard
deviations above the run's overall error rate (any window with >= 3 errors when the overall
rate is 0); consecutive burst windows are merged.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.per_request import derived
from tokenswarm.analysis.stats import mann_kendall, min_samples_for, theil_sen

DRIFT_SERIES: tuple[str, ...] = (
    names.TTFT_P50_MS,
    names.TTFT_P99_MS,
    names.TPOT_P50_MS,
    names.TPOT_P99_MS,
    names.OUTPUT_TOKENS_PER_S,
    names.ERROR_RATE,
    "server_queue_waiting_mean_count",
    "server_kv_cache_usage_mean_perc",
)
QUEUE = "vllm:num_requests_waiting"
KV_NAMES = ("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")


def _pct(v: np.ndarray, p: float) -> float | None:
    """The window's p-th percentile, ``None`` below the samples it needs (:mod:`analysis.samples`):
    a p99 of a 60 s window needs 1,000 requests, so it is neither plotted nor tested for drift."""
    v = v[~np.isnan(v)]
    return float(np.percentile(v, p)) if v.size and v.size >= min_samples_for(p) else None


def time_windows(run: Run, window_s: float = 60.0) -> list[dict[str, Any]]:
    """One row per window: throughput, TTFT/TPOT p50/p99, error rate, server queue and KV use."""
    d = derived(run)
    keep = run["phase"] != run.code("phase", "warmup")
    if not keep.any():
        return []
    t0 = float(run["sent_at_s"][keep].min())
    end = d["end_s"]
    t_end = float(end[keep].max())
    n_win = max(1, int(math.ceil((t_end - t0) / window_s - 1e-9)))
    wid = np.minimum(((end - t0) // window_s).astype(np.int64), n_win - 1)
    idx = np.nonzero(keep)[0]
    order = idx[np.argsort(wid[idx], kind="stable")]
    bounds = np.searchsorted(wid[order], np.arange(n_win + 1))
    sm = run.server_metrics
    queue = sm.value(QUEUE) if sm else None
    kv = next((sm.value(n) for n in KV_NAMES if sm and sm.value(n) is not None), None) if sm else None
    rows = []
    for w in range(n_win):
        sel = order[bounds[w]:bounds[w + 1]]
        start = t0 + w * window_s
        length = min(window_s, t_end - start) if w == n_win - 1 else window_s
        ok = sel[d["ok"][sel]]
        failed = int(d["failed"][sel].sum())
        denom = int(sel.size - d["cancelled"][sel].sum())
        row: dict[str, Any] = {
            "window_index": w,
            "window_start_s": start,
            "window_offset_s": w * window_s,
            "window_duration_s": length,
            "window_partial": bool(length < window_s * 0.999),
            "requests_count": int(sel.size),
            "ok_count": int(ok.size),
            "failed_count": failed,
            names.ERROR_RATE: failed / denom if denom else None,
            "requests_per_s": ok.size / length if length > 0 else None,
            names.OUTPUT_TOKENS_PER_S: float(np.nansum(run["output_tokens"][ok])) / length if length > 0 else None,
            names.TTFT_COUNT: int(np.count_nonzero(~np.isnan(run["ttft_ms"][ok]))),
            names.TPOT_COUNT: int(np.count_nonzero(~np.isnan(d["tpot_ms"][ok]))),
            names.TTFT_P50_MS: _pct(run["ttft_ms"][ok], 50),
            names.TTFT_P99_MS: _pct(run["ttft_ms"][ok], 99),
            names.TPOT_P50_MS: _pct(d["tpot_ms"][ok], 50),
            names.TPOT_P99_MS: _pct(d["tpot_ms"][ok], 99),
        }
        for key, series in (("server_queue_waiting", queue), ("server_kv_cache_usage", kv)):
            unit = "count" if key == "server_queue_waiting" else "perc"
            if series is None:
                row[f"{key}_mean_{unit}"] = row[f"{key}_max_{unit}"] = None
                continue
            assert sm is not None  # a series exists only when the run has server metrics
            in_w = (sm.scraped_at_s >= start) & (sm.scraped_at_s < start + window_s) & ~np.isnan(series)
            vals = series[in_w]
            row[f"{key}_mean_{unit}"] = float(vals.mean()) if vals.size else None
            row[f"{key}_max_{unit}"] = float(vals.max()) if vals.size else None
        rows.append(row)
    return rows


def drift(rows: list[dict[str, Any]], alpha: float = 0.01, min_relative_change: float = 0.10) -> list[dict[str, Any]]:
    """Trend test of every series over the full windows (see module docstring)."""
    full = [r for r in rows if not r["window_partial"]]
    out = []
    for name in DRIFT_SERIES:
        pts = [(r["window_offset_s"], r.get(name)) for r in full if r.get(name) is not None]
        res: dict[str, Any] = {"series": name, "windows_count": len(pts)}
        if len(pts) < 4:
            res.update({"mann_kendall_z": None, "p_value": None, "theil_sen_slope_per_hour": None,
                        "relative_change_share": None, "drift_detected": False, "direction": None,
                        "note": "fewer than 4 full windows"})
            out.append(res)
            continue
        x = np.array([p[0] for p in pts], dtype=float)
        y = np.array([p[1] for p in pts], dtype=float)
        _, z, p = mann_kendall(y)
        slope, _ = theil_sen(x, y)
        span = x[-1] - x[0]
        med = float(np.median(np.abs(y)))
        rel = abs(slope * span) / med if med > 0 else (math.inf if slope != 0 else 0.0)
        detected = bool(p < alpha and rel >= min_relative_change)
        res.update({
            "mann_kendall_z": z,
            "p_value": p,
            "theil_sen_slope_per_hour": slope * 3600.0,
            "relative_change_share": None if math.isinf(rel) else rel,
            "drift_detected": detected,
            "direction": ("up" if slope > 0 else "down") if detected else None,
            "note": None,
        })
        out.append(res)
    return out


def error_bursts(rows: list[dict[str, Any]], min_errors: int = 3, z_limit: float = 3.0) -> list[dict[str, Any]]:
    """Windows with improbably many errors, merged into bursts (see module docstring)."""
    total = sum(r["requests_count"] for r in rows)
    errors = sum(r["failed_count"] for r in rows)
    p = errors / total if total else 0.0
    flagged = []
    for r in rows:
        n, e = r["requests_count"], r["failed_count"]
        if e < min_errors:
            continue
        if p == 0.0:
            flagged.append(r)
            continue
        sd = math.sqrt(n * p * (1 - p)) if n else 0.0
        if sd > 0 and (e - n * p) / sd > z_limit:
            flagged.append(r)
    bursts: list[dict[str, Any]] = []
    for r in flagged:
        if bursts and bursts[-1]["last_window_index"] == r["window_index"] - 1:
            b = bursts[-1]
            b["last_window_index"] = r["window_index"]
            b["end_offset_s"] = r["window_offset_s"] + r["window_duration_s"]
            b["errors_count"] += r["failed_count"]
            b["requests_count"] += r["requests_count"]
        else:
            bursts.append({"first_window_index": r["window_index"], "last_window_index": r["window_index"],
                           "start_offset_s": r["window_offset_s"],
                           "end_offset_s": r["window_offset_s"] + r["window_duration_s"],
                           "errors_count": r["failed_count"], "requests_count": r["requests_count"]})
    for b in bursts:
        b[names.ERROR_RATE] = b["errors_count"] / b["requests_count"] if b["requests_count"] else None
        b["run_error_rate"] = p
    return bursts


def soak(run: Run, window_s: float = 60.0, alpha: float = 0.01, min_relative_change: float = 0.10) -> dict[str, Any]:
    """Windows, drift and bursts together; ``applicable`` is False for runs shorter than 4 windows.

    Drift is not tested on a run of several load steps (``drift_applicable`` False, ``drift`` empty).
    """
    rows = time_windows(run, window_s)
    n_full = sum(not r["window_partial"] for r in rows)
    # Drift belongs to constant-load runs: across a sweep every series changes with the load.
    sweep = len(run.manifest.steps) > 1
    return {
        "window_s": window_s,
        "applicable": n_full >= 4,
        "drift_applicable": n_full >= 4 and not sweep,
        "drift_note": "load sweep: drift is tested on constant-load runs only" if sweep else None,
        "windows": rows,
        "drift": [] if sweep else drift(rows, alpha, min_relative_change),
        "error_bursts": error_bursts(rows),
        "alpha_p_value": alpha,
        "min_relative_change_share": min_relative_change,
    }
