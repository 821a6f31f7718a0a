"""Report sections that each show one part of a summary, and nothing when the run has no such part:
generator health, what was sent, per model, the server's view, the observability audit,
resource cost and capacity.
"""

from __future__ import annotations

from typing import Any

from tokenswarm import names
from tokenswarm.analysis.render_format import Block, fmt, guarded, pct


def health_blocks(h: dict[str, Any], heading: bool = False) -> list[Block]:
    """The warnings worth acting on: the overload banner (only for delays that were in the
    figures, see :func:`analysis.health.generator_health`), then every message."""
    out: list[Block] = []
    if heading and (h["overloaded"] or h["messages"]):
        out.append(("h2", "Warnings"))
    if h["overloaded"]:
        where = h.get("overloaded_steps")
        out.append(("banner", "red", "GENERATOR OVERLOADED: the load generator itself was a bottleneck"
                                     + (f" in step(s) {', '.join(where)}" if where else "")
                                     + "; latencies and throughput there may be understated or overstated."))
    if h["messages"]:
        out.append(("banner", "yellow", "Generator health and input warnings:"))
        out.append(("list", h["messages"]))
    if h.get("timing_paths"):
        out.append(("p", "Timing path (how arrival times were taken): " + "; ".join(h["timing_paths"]) + "."))
    periods = h.get("sweeps_by_period_ms") or {}
    swept = sum(periods.values())
    if swept:  # how long the streams' gaps let the sweep period grow: what a sweep costs per chunk
        shares = ", ".join(f"{p} ms {pct(n / swept, 0)}" for p, n in periods.items())
        out.append(("p", f"Sweep period (share of the {swept:,} sweeps): {shares}."))
    return out


def sent_blocks(sent: list[dict[str, Any]] | None) -> list[Block]:
    """What was sent, per task: token distributions and requested vs server-counted prompt length."""
    if not sent:
        return []
    out: list[Block] = [("h3", "What was sent (successful requests of the steady windows, server-counted tokens)")]
    # requested lengths (max_tokens, the prompt asked for) and server-counted ones (output,
    # prompt counted) are named apart: the record's output_tokens is what the server counted
    out.append(("table", ["task", "requests", "prompt p50", "prompt p90", "output p50 (counted)",
                          "output p90 (counted)", "max_tokens mean (requested)", "prompt requested",
                          "prompt counted", "counted/requested"],
                [[r["task"], fmt(r["requests_count"]), fmt(r["prompt_p50_tokens"]), fmt(r["prompt_p90_tokens"]),
                  fmt(r["output_p50_tokens"]), fmt(r["output_p90_tokens"]),
                  fmt(r["max_tokens_mean_tokens"]), fmt(r["requested_prompt_mean_tokens"]),
                  fmt(r["counted_prompt_mean_tokens"]),
                  (fmt(r["prompt_counted_to_requested_ratio"], 3) + (" (!)" if r["prompt_sizing_suspect"] else ""))
                  if r["prompt_counted_to_requested_ratio"] is not None else "—"] for r in sent]))
    bad = [r["task"] for r in sent if r["prompt_sizing_suspect"]]
    if bad:
        out.append(("banner", "yellow", "Prompt sizing is off for " + ", ".join(bad) + ": the server counted prompt "
                    "lengths far from the scenario's (means compared; first turns only for multi-turn tasks). The "
                    "prompts were sized with a tokenizer other than the server's -- see the run log's sizing line."))
    return out


def model_blocks(models: dict[str, Any] | None) -> list[Block]:
    """Per step and model (a run whose requests asked for several models): load, latency, SLOs."""
    if not models:
        return []
    out: list[Block] = [("h3", "Per model (steady windows, all tasks): " + ", ".join(models["models"]))]
    out.append(("table", ["step", "model", "requests", "errors", "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50",
                          "TPOT p99", "ITL p99", "E2E p99"],
                [[r["step_name"], r["model"], fmt(r["requests_count"]), pct(r[names.ERROR_RATE]),
                  fmt(r[names.OUTPUT_TOKENS_PER_S]), guarded(r, names.TTFT_P50_MS), guarded(r, names.TTFT_P99_MS),
                  guarded(r, names.TPOT_P50_MS), guarded(r, names.TPOT_P99_MS), guarded(r, names.ITL_P99_MS),
                  guarded(r, names.E2E_P99_MS)] for r in models["rows"]]))
    failing = [r for r in models["slo_results"] if not r["passed"]]
    if failing:
        out.append(("list", [f"{r['step_name']} / {r['model']}: {r['slo_name']} observed {fmt(r['observed_value'])}, "
                             f"needs {r['comparison']} {fmt(r['threshold_value'])}" for r in failing]))
    elif models["slo_results"]:
        out.append(("p", "Every model meets the SLOs at every step."))
    if models.get("notes"):
        out.append(("list", models["notes"]))
    return out


def server_view_blocks(view: list[dict[str, Any]] | None) -> list[Block]:
    """Per-step server table (steady windows), when the server exposed any of its columns."""
    keys = ("queue_length_mean_requests", "running_mean_requests", "kv_cache_usage_mean_share", "preemptions_count",
            "prefix_cache_hit_share")
    if not view or not any(r[k] is not None for r in view for k in keys):
        return []
    return [("h3", "What the server saw per step (steady window, from its /metrics)"),
            ("table", ["step", "waiting (mean)", "running (mean)", "KV cache used", "preemptions", "prefix-cache hits"],
             [[str(r["step_name"]), fmt(r["queue_length_mean_requests"]), fmt(r["running_mean_requests"]),
               pct(r["kv_cache_usage_mean_share"], 1), fmt(r["preemptions_count"]), pct(r["prefix_cache_hit_share"], 1)]
              for r in view])]


def observability_blocks(obs: list[dict[str, Any]] | None, breakdown: list[dict[str, Any]] | None) -> list[Block]:
    """The observability audit: each signal exposed or missing, and what is derived instead."""
    if not obs:
        return []
    out: list[Block] = [("h2", "Observability audit: what the server lets you see")]
    n = sum(1 for o in obs if o["exposed"])
    out.append(("p", f"{n} of {len(obs)} signals the method asks for are exposed by the server's /metrics."))
    rows = []
    for o in obs:
        frac = o["unit"] == "fraction"
        values = ", ".join(f"{v['step_name']}: {pct(v['signal_value'], 1) if frac else fmt(v['signal_value'], 3)}"
                           for v in o["steps"]) or "—"
        per_req = "—"
        if o["per_request_records_count"] is not None:
            per_req = f"{o['per_request_records_count']:,} records"
        rows.append([o["signal"].replace("_", " "), "yes" if o["exposed"] else "MISSING",
                     o["metric"] or "—", values, per_req])
    out.append(("table", ["signal", "exposed", "metric", "value per step", "per-request form"], rows))
    missing = [o for o in obs if not o["exposed"]]
    if missing:
        out.append(("p", "Missing signals and what tokenswarm derives instead:"))
        out.append(("list", [f"{o['signal'].replace('_', ' ')}: {o['derived_instead']}" for o in missing]))
    if breakdown and any(r["server_queue_wait_mean_ms"] is not None for r in breakdown):
        out.append(("h3", "How much of TTFT is queueing"))
        out.append(("table", ["step", "TTFT mean ms", "TTFT p50 ms", "TTFT p99 ms", "server queue wait ms",
                              "queue share of TTFT", "draft share of engine time"],
                    [[str(r["step_name"]), fmt(r[names.TTFT_MEAN_MS]), guarded(r, names.TTFT_P50_MS), guarded(r, names.TTFT_P99_MS),
                      fmt(r["server_queue_wait_mean_ms"]), pct(r["queue_wait_of_ttft_share"], 0),
                      pct(r["draft_time_share"], 0)] for r in breakdown]))
        out.append(("p", "Queue wait is the server's mean (its histogram's sum / count over the window); the "
                         "share compares it with the client's mean TTFT, which adds prefill and the network."))
    return out


def resource_blocks(res: dict[str, Any] | None, images: dict[str, bytes]) -> list[Block]:
    """The "Resource cost" section: GPU readings per step, tokens per GPU and per joule."""
    if not res:
        return []
    out: list[Block] = [("h2", "Resource cost (GPU)")]
    if res["gpus"]:
        gpu_names = ", ".join(sorted({f"{g['model'] or g['vendor']} x{sum(1 for h in res['gpus'] if h['model'] == g['model'])}"
                                  for g in res["gpus"]}))
        out.append(("p", f"GPUs: {gpu_names} (from {', '.join(sorted({g['source'] for g in res['gpus']}))}). "
                         "Means over the scrapes inside each step's steady window; power is per GPU, energy "
                         "summed over GPUs."))
    for note in res["notes"]:
        out.append(("p", note[0].upper() + note[1:] + "."))
    rows = res["rows"]
    if rows:
        out.append(("table", ["step", "mem MiB mean", "mem MiB max", "util", "power W", "energy J",
                              "tok/s per GPU", "tok/J", "$/1M out tok", "$/1M good tok"],
                    [[str(r["step_name"]), fmt(r["gpu_memory_used_mib_mean"]), fmt(r["gpu_memory_used_mib_max"]),
                      pct(r["gpu_utilization_mean"], 0), fmt(r["gpu_power_w_mean"]), fmt(r["gpu_energy_j"]),
                      fmt(r["output_tokens_per_s_per_gpu"]), fmt(r["output_tokens_per_joule"]),
                      fmt(r["cost_per_1m_output_tokens_usd"]), fmt(r["cost_per_1m_good_output_tokens_usd"])]
                     for r in rows]))
    if "resources_vs_load" in images:
        out.append(("img", "resources_vs_load", "GPU memory, utilisation and power vs load"))
    growth = [g for g in res.get("memory_growth", []) if g["memory_growth_mib_per_hour"] is not None]
    if growth:
        out.append(("p", "GPU memory growth over the run (Theil-Sen, server-side leak check): " + "; ".join(
            f"GPU {g['gpu']} ({g['source']}) {g['memory_growth_mib_per_hour']:+.1f} MiB/h" for g in growth) + "."))
    return out


def capacity_blocks(cap: dict[str, Any] | None) -> list[tuple[Any, ...]]:
    """Capacity under SLO: the capacity with its interval and every probe (or step) judged."""
    if not cap:
        return []
    b: list[tuple[Any, ...]] = [("h3", "Capacity under SLO")]
    if cap.get("summary"):
        what = "capacity search" if cap.get("source") == "search" else "the run's steps"
        reached = cap.get("reached_resolution_value")
        text = f"{cap['summary'][0].upper()}{cap['summary'][1:]} - from {what}"
        if reached is not None:
            text += f"; capacity {cap['capacity_value']:g} +{reached:g} {cap['unit']} (last pass .. first failure)"
        if cap.get("resolution_value") is not None:
            text += f", resolution asked {cap['resolution_value']:g} {cap['unit']}"
        b.append(("p", text + "."))
        rows = [[p["step_name"], f"{p['load_value']:g}", p.get("verdict") or ("pass" if p["passed"] else "FAIL"),
                 p["reason"] or "-",
                 fmt(p.get("requests_count")), fmt(p.get(names.OUTPUT_TOKENS_PER_S))] for p in cap.get("probes") or []]
        if rows:
            b.append(("table", ["probe", "load", "SLOs", "why not", "requests", "output tok/s"], rows))
        if cap.get("stop_reason"):
            b.append(("p", f"The search ended: {cap['stop_reason']}."))
        b += [("p", f"Note: {n}") for n in (cap.get("notes") or []) + (cap.get("drain_notes") or [])]
    sw = cap.get("sweep")
    if sw:
        b.append(("p", f"Sweep: {fmt(sw.get('saturation_requests_per_s'))} req/s at saturation, "
                       f"{fmt(sw.get('single_user_requests_per_s'))} req/s one request at a time, so requests queue "
                       f"from about {fmt(sw.get('saturation_users'))} users (Little's law); steps {sw.get('steps_users')}."))
    return b
