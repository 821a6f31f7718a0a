"""Assemble every table of a run (or a comparison) into one JSON-ready summary dict.

This is the boundary between the computing core and the reporters: reporters read only
this dict (plus the runs, for plots of raw distributions). No I/O here.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tokenswarm.analysis import cost as cost_mod
from tokenswarm.analysis.capacity import run_capacity
from tokenswarm.analysis.chunkhist import METHOD as CHUNK_HIST_METHOD
from tokenswarm.analysis.compare import compare_runs
from tokenswarm.analysis.curves import curve_points, curves
from tokenswarm.analysis.errors import NoSuccessError
from tokenswarm.analysis.health import generator_health
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.models import model_tables
from tokenswarm.analysis.observability import audit, server_view, ttft_breakdown
from tokenswarm.analysis.per_request import derived, good_mask, require_success_in
from tokenswarm.analysis.prefixcache import prefix_cache_rows
from tokenswarm.analysis.resources import compare_resources, resources
from tokenswarm.analysis.sent import what_was_sent
from tokenswarm.analysis.soak import soak
from tokenswarm.analysis.specdecode import spec_decode_tables
from tokenswarm.analysis.stats import PERCENTILE_METHOD
from tokenswarm.analysis.tables import FAILURE_TREATMENT, step_table

SUMMARY_VERSION = 1

METHODS = {
    "percentiles": "Exact percentiles from raw values: " + PERCENTILE_METHOD + ". ITL per token is a weighted "
                   "percentile equal to the same method on the expanded per-token samples.",
    "failures": FAILURE_TREATMENT,
    "windows": "Per load step only steady-phase records; throughput denominators are the steady window "
               "(manifest steady_at..ended_at), else the span of the requests.",
    "bootstrap": "Percentile bootstrap (95 %), seeded numpy Generator, runs resampled independently.",
    "trend": "Mann-Kendall (two-sided, tie-corrected) with Theil-Sen slope; drift needs p < alpha and a change "
             ">= min_relative_change of the median over the run.",
}

#: Suffixes that name the unit (or dimensionless kind) of a numeric summary value.
UNIT_SUFFIXES: tuple[str, ...] = (
    "_ms", "_s", "_per_s", "_rps", "_users", "_count", "_share", "_rate", "_ratio", "_tokens", "_usd",
    "_perc", "_index", "_value", "_z", "_per_hour", "_version",
    # GPU resources (analysis.resources): MiB, W, J, degrees C, MHz, fractions 0-1
    "_mib", "_mib_mean", "_mib_max", "_mib_delta", "_w_mean", "_w_max", "_w_delta", "_j", "_c_max",
    "_mhz_mean", "_per_joule", "_per_gpu", "_utilization_mean", "_sm_active_mean",
)


def run_info(run: Run) -> dict[str, Any]:
    """Identifying facts of a run (for titles and the JSON header)."""
    m = run.manifest
    started, ended = m.started_at, m.ended_at
    return {
        "path": str(run.path),
        "name": run.name,
        "run_id": m.run_id,
        "scenario_name": m.scenario_name,
        "load_mode": m.load_mode,
        "model": m.target.model,
        "base_url": m.target.base_url,
        "tokenswarm_version": m.tokenswarm_version,
        "started_at_s": started,
        "ended_at_s": ended,
        "run_duration_s": (ended - started) if started is not None and ended is not None else None,
        "records_count": len(run),
        "records_files": run.files,
    }


def analyse(
    run: Run,
    slo: Any = None,
    gpu_hour_usd: float | None = None,
    gpus: float | None = None,
    window_s: float = 60.0,
    spec_k: int | None = None,
    require_success: bool = True,
) -> dict[str, Any]:
    """Compute the full single-run summary (every number of the report).

    Raises
    ------
    NoSuccessError
        ``require_success`` and the run holds no successful request.
    """
    if require_success:
        require_success_in(run)
    tables = step_table(run, slo=slo)
    price = cost_mod.price(run.manifest, gpu_hour_usd, gpus)
    spec = spec_decode_tables(run, tables.windows, spec_k)
    methods = METHODS if run.chunk_hists is None else {**METHODS, "chunk_percentiles": CHUNK_HIST_METHOD}
    summary = {
        "summary_version": SUMMARY_VERSION,
        "kind": "report",
        "run": run_info(run),
        "generator_health": generator_health(run.manifest, tables.rows, run.warnings),
        "notes": tables.notes,
        "methods": methods,
        "slo": tables.slo.to_dict(),
        "steps": tables.rows,
        "errors": tables.errors,
        "slo_results": [r.to_dict() for r in tables.slo_results],
        "curves": curves(tables.rows, tables.slo_results),
        "capacity": run_capacity(run.path, curve_points(tables.rows), tables.slo_results, tables.slo.to_dict()),
        "spec_decode": spec,
        "price": price,
        "cost": cost_mod.cost_rows(tables.rows, price),
        "soak": soak(run, window_s),
        "resources": resources(run, tables.windows, tables.rows, price, good_mask(run, tables.slo)),
        "prefix_cache": prefix_cache_rows(run, tables.windows),
    }
    obs = audit(run, tables.windows, speculation_seen=spec["observed"])
    summary["observability"] = obs
    summary["ttft_breakdown"] = ttft_breakdown(obs, tables.rows)
    summary["server_view"] = server_view(obs, tables.rows)
    summary["sent"] = what_was_sent(run, tables.windows)
    summary["models"] = model_tables(run, tables)  # None unless the records asked for several models
    cleaned: dict[str, Any] = clean(summary)
    return cleaned


def clean(obj: Any) -> Any:
    """JSON-safe copy: numpy scalars to Python, NaN/inf to ``None`` (not observed)."""
    if isinstance(obj, dict):
        return {k: clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [clean(v) for v in obj]
    if isinstance(obj, np.generic):
        obj = obj.item()
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    return obj


def unitless_keys(obj: Any, path: str = "") -> list[str]:
    """Paths of numeric leaves whose key names no unit (used by tests and as a self-check)."""
    bad: list[str] = []
    if isinstance(obj, dict):
        for k, v in obj.items():
            p = f"{path}.{k}" if path else k
            if isinstance(v, (dict, list)):
                bad += unitless_keys(v, p)
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and not k.endswith(UNIT_SUFFIXES):
                bad.append(p)
    elif isinstance(obj, list):
        for i, v in enumerate(obj):
            p = f"{path}[{i}]"
            if isinstance(v, (dict, list)):
                bad += unitless_keys(v, p)
            elif isinstance(v, (int, float)) and not isinstance(v, bool) and not path.endswith(UNIT_SUFFIXES):
                bad.append(p)
    return bad


def compare_summary(base: Run, cand: Run, n_boot: int = 1000, seed: int = 0, spec_k: int | None = None,
                    slo: Any = None) -> dict[str, Any]:
    """Comparison summary (:func:`analysis.compare.compare_runs`) plus both runs' health and curves.

    Raises
    ------
    NotComparableError, NoSuccessError
    """
    for r in (base, cand):
        if not derived(r)["ok"].any():
            raise NoSuccessError(f"{r.path}: no successful request among {len(r)} records")
    out = compare_runs(base, cand, n_boot=n_boot, seed=seed, k_override=spec_k)
    ta, tb = step_table(base, slo=slo), step_table(cand, slo=slo)
    out["kind"] = "compare"
    out["summary_version"] = SUMMARY_VERSION
    out["baseline_health"] = generator_health(base.manifest, ta.rows, base.warnings)
    out["candidate_health"] = generator_health(cand.manifest, tb.rows, cand.warnings)
    out["baseline_curves"] = curve_points(ta.rows)
    out["candidate_curves"] = curve_points(tb.rows)
    res_a = resources(base, ta.windows, ta.rows, cost_mod.price(base.manifest), good_mask(base, ta.slo))
    res_b = resources(cand, tb.windows, tb.rows, cost_mod.price(cand.manifest), good_mask(cand, tb.slo))
    out["resources"] = {"baseline_rows": res_a["rows"], "candidate_rows": res_b["rows"],
                        "rows": compare_resources(res_a["rows"], res_b["rows"]),
                        "observed": res_a["observed"] or res_b["observed"]}
    cleaned: dict[str, Any] = clean(out)
    return cleaned
