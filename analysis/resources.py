"""Resource cost per load step: GPU memory, utilisation, power, energy, tokens per GPU and per joule.

For every step's steady window (the same window as the step table) and every GPU the exporter
reported (:mod:`analysis.gpu`):

* ``gpu_memory_used_mib_mean`` / ``_max``: mean over GPUs of each GPU's mean over the scrapes
  inside the window / the largest reading of any GPU;
* ``gpu_utilization_mean`` (0-1), ``gpu_sm_active_mean`` (0-1), ``gpu_power_w_mean``: means
  over GPUs of each GPU's mean (power is per GPU; ``gpu_energy_j`` is the sum over GPUs);
* ``output_tokens_per_s_per_gpu`` = successful output tokens/s / number of GPUs;
* ``output_tokens_per_joule`` = output tokens of the window / ``gpu_energy_j``;
* ``cost_per_1m_good_output_tokens_usd`` = cluster price per hour / (output tokens/s of *good*
  requests x 3600) x 1e6: a request that missed its per-request SLO costs as much and is worth
  nothing (needs per-request SLO thresholds, see :mod:`analysis.slo`).

The number of GPUs is the exporter's count when there is one, else the price's ``gpus``.
Soak view (runs of one constant-load step only): the memory growth of each GPU over the run
(Theil-Sen slope, MiB per hour) -- the server-side leak check. No I/O here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.gpu import GpuMetrics, window_stats
from tokenswarm.analysis.per_request import derived
from tokenswarm.analysis.stats import theil_sen
from tokenswarm.analysis.step_windows import Window


def _mean(vals: list[float | None]) -> float | None:
    x = [v for v in vals if v is not None]
    return float(np.mean(x)) if x else None


def _max(vals: list[float | None]) -> float | None:
    x = [v for v in vals if v is not None]
    return float(max(x)) if x else None


def resource_rows(run: Any, wins: list[Window], step_rows: list[dict[str, Any]], price: dict[str, Any] | None,
                  gpu: GpuMetrics | None, good: np.ndarray | None) -> list[dict[str, Any]]:
    """One row per step (all tasks): GPU readings, tokens per GPU and per joule, cost per good token."""
    by_index = {r["step_index"]: r for r in step_rows if r["task"] == "all"}
    d = derived(run)
    out = []
    n_gpus = len(gpu.gpus) if gpu is not None else None
    gpus_for_rate = n_gpus or (price or {}).get("gpus_count")
    for w in wins:
        r = by_index.get(w.index)
        if r is None:
            continue
        row: dict[str, Any] = {**w.header(), "gpus_count": n_gpus,
                               "gpus_count_source": "GPU exporter" if n_gpus else ("price" if gpus_for_rate else None)}
        per = [window_stats(g, w.start_s, w.end_s) for g in gpu.gpus] if gpu and w.start_s is not None and w.end_s is not None else []
        row["gpu_memory_used_mib_mean"] = _mean([p["memory_used_mib_mean"] for p in per])
        row["gpu_memory_used_mib_max"] = _max([p["memory_used_mib_max"] for p in per])
        row["gpu_memory_total_mib"] = _max([p["memory_total_mib"] for p in per])
        row["gpu_utilization_mean"] = _mean([p["utilization_mean"] for p in per])
        row["gpu_sm_active_mean"] = _mean([p["sm_active_mean"] for p in per])
        row["gpu_power_w_mean"] = _mean([p["power_w_mean"] for p in per])
        row["gpu_temperature_c_max"] = _max([p["temperature_c_max"] for p in per])
        energies = [p["energy_j"] for p in per if p["energy_j"] is not None]
        row["gpu_energy_j"] = float(sum(energies)) if per and len(energies) == len(per) else None
        row["gpu_energy_source"] = per[0]["energy_source"] if per else None
        tps = r.get(names.OUTPUT_TOKENS_PER_S)
        row[names.OUTPUT_TOKENS_PER_S] = tps
        row["output_tokens_per_s_per_gpu"] = tps / gpus_for_rate if tps is not None and gpus_for_rate else None
        out_tokens = r.get("output_tokens_count")
        row["output_tokens_per_joule"] = (out_tokens / row["gpu_energy_j"]
                                          if out_tokens is not None and row["gpu_energy_j"] else None)
        dur = r.get("window_duration_s")
        good_tps = None
        if good is not None and dur:
            sel = w.mask & good & d["ok"]
            good_tps = float(np.nansum(run["output_tokens"][sel])) / dur
        row["good_output_tokens_per_s"] = good_tps
        hour = (price or {}).get("cluster_hour_usd")
        row["cost_per_1m_output_tokens_usd"] = hour / (tps * 3600.0) * 1e6 if hour is not None and tps else None
        row["cost_per_1m_good_output_tokens_usd"] = (hour / (good_tps * 3600.0) * 1e6
                                                     if hour is not None and good_tps else None)
        out.append(row)
    return out


def memory_growth(gpu: GpuMetrics | None) -> list[dict[str, Any]]:
    """Per GPU: Theil-Sen slope of memory used over the whole run (MiB per hour)."""
    if gpu is None:
        return []
    out = []
    for g in gpu.gpus:
        mem = g.get("memory_used_mib")
        row: dict[str, Any] = {"source": g.source, "gpu": g.gpu, "memory_growth_mib_per_hour": None,
                               "scrapes_count": int(g.scraped_at_s.size)}
        if mem is not None:
            have = ~np.isnan(mem)
            if have.sum() >= 3:
                # Theil-Sen is O(n^2) in pairs: a day of 5 s scrapes is thinned to <= 400 points.
                idx = np.nonzero(have)[0]
                idx = idx[np.linspace(0, idx.size - 1, min(idx.size, 400)).astype(np.int64)]
                slope, _ = theil_sen(g.scraped_at_s[idx] - g.scraped_at_s[idx[0]], mem[idx])
                row["memory_growth_mib_per_hour"] = float(slope) * 3600.0
        out.append(row)
    return out


def resources(run: Any, wins: list[Window], step_rows: list[dict[str, Any]], price: dict[str, Any] | None,
              good: np.ndarray | None) -> dict[str, Any]:
    """The ``resources`` section of ``summary.json`` (rows per step, GPUs seen, memory growth)."""
    gpu: GpuMetrics | None = getattr(run, "gpu_metrics", None)
    notes = []
    if gpu is None:
        notes.append("no GPU exporter among the scraped endpoints (add a DCGM or AMD device-metrics exporter "
                     "to target.extra_metrics): no memory, utilisation, power or energy")
    if good is None:
        notes.append("no per-request SLO thresholds: cost per 1M good output tokens not computed")
    return {
        "observed": gpu is not None,
        "gpus": [{"source": g.source, "gpu": g.gpu, "model": g.model, "vendor": g.vendor} for g in gpu.gpus] if gpu else [],
        "gpu_metric_names": gpu.metric_names if gpu else [],
        "rows": resource_rows(run, wins, step_rows, price, gpu, good),
        # Growth under a changing load is the KV cache following the load, not a leak.
        "memory_growth": memory_growth(gpu) if len(wins) <= 1 else [],
        "notes": notes,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def compare_resources(base_rows: list[dict[str, Any]], cand_rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per step (matched by name): the candidate's speedup next to its memory and power deltas.

    ``summary_text`` reads like "2.4x tokens/s for +3.1 GiB and +18 % power -> 2.0x tokens per joule".
    """
    by_name = {r["step_name"]: r for r in base_rows}
    out = []
    for c in cand_rows:
        b = by_name.get(c["step_name"])
        if b is None:
            continue
        row: dict[str, Any] = {"step_name": c["step_name"]}
        row["output_tokens_per_s_ratio"] = _ratio(c[names.OUTPUT_TOKENS_PER_S], b[names.OUTPUT_TOKENS_PER_S])
        mb, mc = b["gpu_memory_used_mib_mean"], c["gpu_memory_used_mib_mean"]
        row["gpu_memory_used_mib_delta"] = mc - mb if mb is not None and mc is not None else None
        pb, pc = b["gpu_power_w_mean"], c["gpu_power_w_mean"]
        row["gpu_power_w_delta"] = pc - pb if pb is not None and pc is not None else None
        row["gpu_power_change_share"] = (pc - pb) / pb if pb and pc is not None else None
        row["output_tokens_per_joule_ratio"] = _ratio(c["output_tokens_per_joule"], b["output_tokens_per_joule"])
        row["cost_per_1m_good_output_tokens_ratio"] = _ratio(c["cost_per_1m_good_output_tokens_usd"],
                                                             b["cost_per_1m_good_output_tokens_usd"])
        row["summary_text"] = resource_sentence(row)
        out.append(row)
    return out


def resource_sentence(row: dict[str, Any]) -> str:
    """"2.4x tokens/s for +3.1 GiB and +18 % power -> 2.0x tokens per joule" (parts that are known)."""
    parts = []
    if row.get("output_tokens_per_s_ratio") is not None:
        parts.append(f"{row['output_tokens_per_s_ratio']:.2f}x tokens/s")
    costs = []
    if row.get("gpu_memory_used_mib_delta") is not None:
        costs.append(f"{row['gpu_memory_used_mib_delta'] / 1024.0:+.1f} GiB")
    if row.get("gpu_power_change_share") is not None:
        costs.append(f"{100.0 * row['gpu_power_change_share']:+.0f} % power")
    text = " ".join(parts)
    if costs:
        text += (" for " if text else "") + " and ".join(costs)
    if row.get("output_tokens_per_joule_ratio") is not None:
        text += f" -> {row['output_tokens_per_joule_ratio']:.2f}x tokens per joule"
    return text or "no throughput or GPU readings to compare"
