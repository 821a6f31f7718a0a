"""Serving cost per output token and per request, from a GPU-hour price.

``cost_per_1m_output_tokens_usd = gpu_hour_usd * gpus / (output_tokens_per_s * 3600) * 1e6`` and
``cost_per_1k_requests_usd = gpu_hour_usd * gpus / (requests_per_s * 3600) * 1000``, using the
successful-request throughput of each step's steady window (the GPUs are paid for whether
or not requests succeed, so failures make both numbers larger).
"""

from __future__ import annotations

from typing import Any, Mapping

from tokenswarm import names
from tokenswarm.manifest import RunManifest


def price(manifest: RunManifest, gpu_hour_usd: float | None = None, gpus: float | None = None) -> dict[str, Any] | None:
    """Price from the command line (wins) or ``manifest.scenario.cost``; ``None`` if unknown."""
    cost = manifest.scenario_dict.get("cost")
    cost = cost if isinstance(cost, Mapping) else {}
    hour = gpu_hour_usd if gpu_hour_usd is not None else cost.get("gpu_hour_usd")
    n = gpus if gpus is not None else cost.get("gpus", 1)
    if hour is None:
        return None
    source = "command line" if gpu_hour_usd is not None else "manifest.scenario.cost"
    return {"gpu_hour_usd": float(hour), "gpus_count": float(n), "cluster_hour_usd": float(hour) * float(n),
            "price_source": source}


def cost_rows(rows: list[dict[str, Any]], p: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """One cost row per step (all-tasks rows), next to its throughput."""
    if p is None:
        return []
    hour = p["cluster_hour_usd"]
    out = []
    for r in rows:
        if r["task"] != "all":
            continue  # the GPUs serve every task at once: cost only makes sense for the whole step
        tps, rps = r.get(names.OUTPUT_TOKENS_PER_S), r.get("requests_per_s")
        out.append({
            "step_index": r["step_index"], "step_name": r["step_name"], "task": r["task"],
            names.OUTPUT_TOKENS_PER_S: tps, "requests_per_s": rps,
            "cost_per_1m_output_tokens_usd": hour / (tps * 3600.0) * 1e6 if tps else None,
            "cost_per_1k_requests_usd": hour / (rps * 3600.0) * 1e3 if rps else None,
        })
    return out
