"""The single-run report (``tokenswarm report``) as blocks (:mod:`analysis.render_format`):
:func:`report_doc` and the sections only it shows (steps, request phases, curves, latency,
errors, speculative decoding, cost, over time, methods)."""

from __future__ import annotations

from typing import Any

from tokenswarm import names
from tokenswarm.analysis.render_format import Block, fmt, guarded, judged_table, pct, point_cell
from tokenswarm.analysis.render_sections import (
    capacity_blocks,
    health_blocks,
    model_blocks,
    observability_blocks,
    resource_blocks,
    sent_blocks,
    server_view_blocks,
)
from tokenswarm.analysis.render_slo import slo_counts_text, verdict_blocks
from tokenswarm.analysis.samples import short_text, shortfall
from tokenswarm.names import SummaryMetric

#: The latency table of each metric, with its title (keys and units: the table of names).
LATENCY_TITLES: dict[SummaryMetric, str] = {
    names.TTFT: "TTFT",
    names.TPOT: "TPOT",
    names.ITL: "ITL (per token)",
    names.INTER_CHUNK: "Inter-chunk latency",
    names.E2E: "E2E latency",
    names.SCHEDULE_LAG: "Schedule lag",
    names.REQUEST_OUTPUT_TPS: "Per-request output tokens/s",
    names.TTFT_FROM_SCHEDULE: "Schedule-inclusive TTFT (open loop)",
    names.E2E_FROM_SCHEDULE: "Schedule-inclusive E2E (open loop)",
}


def _load(r: dict[str, Any]) -> str:
    if r.get("step_concurrency_users") is not None:
        return f"{r['step_concurrency_users']:g} users"
    if r.get("step_rate_rps") is not None:
        return f"{r['step_rate_rps']:g} req/s"
    return "—"


def _phase_blocks(steps: list[dict[str, Any]]) -> list[Block]:
    """Connect, connection reuse, the generator's send delay and time to first byte per step."""
    if not any(r.get("send_delay_count") or r.get("connect_count") for r in steps):
        return []  # records without request phases (written before they were recorded)
    return [
        ("h2", "Request phases per load step (steady window, all tasks)"),
        *judged_table(["step", "load", "new connections", "reused share", "connect p50", "connect p99",
                       "send delay p50", "send delay p99", "headers p50", "headers p99"],
                      [[r["step_name"], _load(r), fmt(r.get("connect_count")), pct(r.get("conn_reused_share")),
                        guarded(r, "connect_p50_ms"), guarded(r, "connect_p99_ms"), guarded(r, "send_delay_p50_ms"),
                        guarded(r, "send_delay_p99_ms"), guarded(r, "headers_p50_ms"), guarded(r, "headers_p99_ms")]
                       for r in steps], keep=4),
        ("p", "In ms. Connect: a new connection's TCP connect (plus TLS), outside TTFT. Send delay: the "
              "generator's own delay from the moment a request was due to its last byte sent, minus the "
              "connect; a p99 above 1 ms is flagged under generator health. Headers: time to first byte "
              "from the send."),
    ]


def step_summary_blocks(s: dict[str, Any]) -> list[Block]:
    """The per-step tables (throughput, then latency) of the steady windows, all tasks."""
    steps = [r for r in s["steps"] if r["task"] == "all"]
    cost = {c["step_index"]: c for c in s["cost"]}
    b: list[Block] = [("h2", "Summary per load step (steady window, all tasks)")]
    # Two tables (throughput, latency) so that neither is wider than the page.
    headers = ["step", "load", "window s", "requests", "errors", "req/s", "out tok/s", "goodput req/s", "goodput share"]
    if cost:
        headers += ["$/1M out tok", "$/1k req"]
    rows = []
    for r in steps:
        row = [r["step_name"], _load(r), fmt(r["window_duration_s"]), fmt(r["requests_count"]), pct(r[names.ERROR_RATE]),
               fmt(r["requests_per_s"]), fmt(r[names.OUTPUT_TOKENS_PER_S]), fmt(r["goodput_requests_per_s"]),
               pct(r[names.GOODPUT_SHARE])]
        if cost:
            c = cost.get(r["step_index"], {})
            row += [fmt(c.get("cost_per_1m_output_tokens_usd")), fmt(c.get("cost_per_1k_requests_usd"))]
        rows.append(row)
    b.append(("table", headers, rows))
    b += judged_table(["step", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p99", "E2E p99", "failed share"],
                      [[r["step_name"], guarded(r, names.TTFT_P50_MS), guarded(r, names.TTFT_P99_MS), guarded(r, names.TPOT_P50_MS),
                        guarded(r, names.TPOT_P99_MS), guarded(r, names.ITL_P99_MS), guarded(r, names.E2E_P99_MS),
                        pct(r[names.TTFT_FAILED_SHARE])] for r in steps])
    b.append(("p", "Latencies in ms. " + s["methods"]["failures"]))
    return b


def report_doc(s: dict[str, Any], images: dict[str, bytes]) -> list[Block]:
    """Blocks of a single-run report.

    The first screen leads with the verdict (the SLO gate), or with the step table when the run
    has no gate; then the warnings worth acting on; then what ran, and the details.
    """
    run = s["run"]
    steps = [r for r in s["steps"] if r["task"] == "all"]
    b: list[Block] = [("h1", f"tokenswarm report: {run['name']}")]
    gated = bool(s["slo_results"])
    b += verdict_blocks(s) if gated else step_summary_blocks(s)
    b += health_blocks(s["generator_health"], heading=True)
    b.append(("table", ["run", "scenario", "model", "load mode", "records", "duration"],
              [[str(run["run_id"]), str(run["scenario_name"]), str(run["model"]), str(run["load_mode"]),
                fmt(run["records_count"]), fmt(run["run_duration_s"]) + " s"]]))
    if s["notes"]:
        b.append(("list", s["notes"]))
    if gated:
        b += step_summary_blocks(s)
    b += _phase_blocks(steps)
    b += server_view_blocks(s.get("server_view"))
    b += sent_blocks(s.get("sent"))
    b += model_blocks(s.get("models"))
    b += _workload_blocks(s)
    b += _curve_blocks(s, images)
    b += _latency_blocks(s, images)
    b += _error_blocks(s["errors"])
    b += observability_blocks(s.get("observability"), s.get("ttft_breakdown"))
    # Speculative decoding
    sd = s["spec_decode"]
    b.append(("h2", "Speculative decoding"))
    if not sd["observed"]:
        b.append(("p", "No speculative-decoding signal: no server counters, no per-request stats, and every chunk "
                       "carried at most one token."))
    else:
        b += _spec_blocks(sd, images)
    b += _cost_blocks(s)
    return _tail_blocks(s, b, images)


def _curve_blocks(s: dict[str, Any], images: dict[str, bytes]) -> list[Block]:
    """Load curves, the knee, the highest load meeting the SLOs and the capacity search."""
    c = s["curves"]
    b: list[Block] = [("h2", "Load curves, knee and SLO limit")]
    if c["knee"]:
        k = c["knee"]
        b.append(("p", f"Knee: at step {k['knee_step_name']} (load {k['knee_load_value']:g}) {k['latency_metric']} "
                       f"rose x{k['latency_change_ratio']:.2f} while throughput rose x{k['throughput_change_ratio']:.2f}; "
                       f"last efficient load: {k['last_efficient_load_value']:g}."))
    else:
        b.append(("p", "Knee: not found (no latency rose faster than throughput between consecutive steps)."))
    if c.get("knees"):
        b.append(("list", [f"{k['latency_metric']}: " + (
            f"knee at {k['knee_step_name']} (x{k['latency_change_ratio']:.2f} latency for x{k['throughput_change_ratio']:.2f} "
            "throughput)" if k.get("knee_step_name") else "no knee") for k in c["knees"]]))
    m = c["max_load_meeting_slo"]
    if m is None:
        b.append(("p", "Highest load meeting the SLOs: no SLOs given (scenario slo block or --slo)."))
    elif m["load_value"] is None:
        b.append(("banner", "yellow", m["detail"][0].upper() + m["detail"][1:] + "."))
    else:
        b.append(("p", f"Highest load meeting all SLOs: {m['load_value']:g} (step {m['step_name']}, "
                       f"{fmt(m[names.OUTPUT_TOKENS_PER_S])} output tokens/s)."))
    b += capacity_blocks(s.get("capacity"))
    for name, cap in (("throughput_vs_load", "Throughput and per-request tokens/s vs load"),
                      ("percentiles_vs_load", "Latency percentiles vs load"),
                      ("latency_vs_throughput", "Latency vs throughput (Pareto view)")):
        if name in images:
            b.append(("img", name, cap))
    if c["points"]:
        b += judged_table(["step", "load", "out tok/s", "E2E p95 ms", "TTFT p95 ms", "per-req tok/s p50", "Pareto-optimal"],
                          [[p["step_name"], fmt(p["load_value"]), fmt(p[names.OUTPUT_TOKENS_PER_S]), point_cell(p, names.E2E_P95_MS),
                            point_cell(p, names.TTFT_P95_MS), point_cell(p, names.REQUEST_OUTPUT_TPS_P50_TOKENS_PER_S),
                            fmt(p["pareto_optimal"])] for p in c["points"]], keep=2)
    if s["slo_results"]:
        b.append(("p", "SLO results: " + slo_counts_text(s["slo_results"]) + " (the matrix is in the verdict above)."))
    return b


def _latency_blocks(s: dict[str, Any], images: dict[str, bytes]) -> list[Block]:
    """One table per latency metric (steps x tasks): the tail percentiles, failures as infinite."""
    b: list[Block] = [("h2", "Latency distributions per step and task")]
    for name in ("ttft_by_task", "e2e_by_task", "ttft_by_step", "tpot_by_task"):
        if name in images:
            b.append(("img", name, name.replace("_", " ")))
    for metric, title in LATENCY_TITLES.items():
        key = metric.key
        lat_rows = [r for r in s["steps"] if r.get(key("count"))]
        if not lat_rows:
            continue
        b.append(("h3", f"{title} ({metric.unit.replace('_per_s', '/s')})"))
        # mean and min are in the CSV tables; the page keeps the tail
        hdr = ["step", "task", "count", "failed share", "p50", "p90", "p95", "p99", "p99.9", "max"]
        prec = max((r.get(f"{metric.name}_percentile_precision_share") or 0.0) for r in lat_rows)
        if prec:  # percentiles from the store's histograms: the precision goes next to each number
            hdr[4:9] = [f"{h} (±{prec * 100:.1f} %)" for h in hdr[4:9]]
        with_inf = "p99_failed_as_inf" in metric.stats
        if with_inf:
            hdr.append("p99 failures=inf")
        table = []
        for sr in lat_rows:
            failed = sr.get(key("failed_share")) if "failed_share" in metric.stats else None
            row = [sr["step_name"], sr["task"], fmt(sr[key("count")]), pct(failed)]
            row += [guarded(sr, key(k)) for k in ("p50", "p90", "p95", "p99", "p99_9", "max")]
            if with_inf:
                v = sr[key("p99_failed_as_inf")]
                short = shortfall(sr, key("p99"))
                row.append(short_text(short[1]) if short else "unbounded" if v is None else fmt(v))
            table.append(row)
        b += judged_table(hdr, table, keep=4)
        if metric == names.ITL and any(sr.get("itl_per_chunk_samples_share") for sr in lat_rows):
            b.append(("p", "Some requests had no exact per-chunk token counts: their ITL samples are per chunk, not per token."))
    return b


def _error_blocks(errors: list[dict[str, Any]]) -> list[Block]:
    """Errors and timeouts grouped by kind, or nothing when there were none."""
    if not errors:
        return []
    return [("h2", "Errors and timeouts by kind"),
            ("table", ["step", "task", "outcome", "error", "HTTP status", "count", "share"],
             [[str(e["step_name"]), e["task"], e["outcome"], str(e["error"]), fmt(e["http_status"]),
               fmt(e["requests_count"]), pct(e["requests_share"])] for e in errors])]


def _spec_blocks(sd: dict[str, Any], images: dict[str, bytes]) -> list[Block]:
    """Acceptance tables of a run that speculated."""
    b: list[Block] = []
    b.append(("p", f"K (num_speculative_tokens): {fmt(sd['num_spec_tokens_count'])} "
                   f"(source: {sd['num_spec_tokens_source'] or 'unknown'})."))
    srv = [r for r in sd["rows"] if r["task"] == "all"]
    b.append(("table", ["step", "server counters", "server acceptance", "server mean acc. length", "per-position rates",
                        "note"],
              [[str(r["step_name"]), str(r.get("server_source") or "—"), pct(r.get("server_acceptance_rate")),
                fmt(r.get("server_mean_acceptance_length_tokens")), fmt(r.get("server_per_position_acceptance_rate")),
                str(r.get("server_note") or "")] for r in srv]))
    b.append(("table", ["step", "task", "req. stats", "req. acceptance", "req. mean acc. length", "chunks",
                        "mean tokens/chunk", "chunks > K+1", "chunk estimate reliable", "why not"],
              [[str(r["step_name"]), r["task"], fmt(r["request_stats_count"]), pct(r["request_acceptance_rate"]),
                fmt(r["request_mean_acceptance_length_tokens"]), fmt(r["chunks_count"]),
                fmt(r["chunk_mean_tokens_per_chunk_tokens"]), pct(r["chunks_over_k_plus_1_share"]),
                fmt(r["chunk_estimate_reliable"]), "; ".join(r["chunk_estimate_notes"])] for r in sd["rows"]]))
    if "tokens_per_chunk" in images:
        b.append(("img", "tokens_per_chunk", "Tokens per chunk (first chunk excluded)"))
    return b


def _cost_blocks(s: dict[str, Any]) -> list[Block]:
    b: list[Block] = []
    if s["price"]:
        p = s["price"]
        b.append(("h2", "Cost"))
        b.append(("p", f"Price: {p['gpu_hour_usd']:g} USD per GPU-hour x {p['gpus_count']:g} GPUs ({p['price_source']})."))
        b.append(("table", ["step", "out tok/s", "req/s", "USD per 1M output tokens", "USD per 1k requests"],
                  [[str(c["step_name"]), fmt(c[names.OUTPUT_TOKENS_PER_S]), fmt(c["requests_per_s"]),
                    fmt(c["cost_per_1m_output_tokens_usd"]), fmt(c["cost_per_1k_requests_usd"])] for c in s["cost"]]))
    return b


def _tail_blocks(s: dict[str, Any], b: list[Block], images: dict[str, bytes]) -> list[Block]:
    """Resources, the over-time view and methods: the end of a single-run report."""
    b += resource_blocks(s.get("resources"), images)
    soak = s["soak"]
    b.append(("h2", f"Over time ({soak['window_s']:g} s windows)"))
    if not soak["applicable"]:
        b.append(("p", "Run shorter than 4 full windows: no drift test."))
    elif soak.get("drift_note"):
        b.append(("p", "No drift test: " + soak["drift_note"] + "."))
    else:
        drifting = [d for d in soak["drift"] if d["drift_detected"]]
        if drifting:
            b.append(("banner", "yellow", "Drift detected: " + ", ".join(
                f"{d['series']} {d['direction']} ({pct(d['relative_change_share'], 0)} over the run, p={d['p_value']:.2g})"
                for d in drifting)))
        else:
            b.append(("p", "No drift detected."))
        b.append(("table", ["series", "windows", "Mann-Kendall z", "p", "Theil-Sen slope /h", "change over run", "drift"],
                  [[d["series"], fmt(d["windows_count"]), fmt(d["mann_kendall_z"]), fmt(d["p_value"]),
                    fmt(d["theil_sen_slope_per_hour"]), pct(d["relative_change_share"]), fmt(d["drift_detected"])]
                   for d in soak["drift"]]))
    if soak["error_bursts"]:
        b.append(("banner", "yellow", f"{len(soak['error_bursts'])} error burst(s):"))
        b.append(("list", [f"{e['start_offset_s']:.0f}-{e['end_offset_s']:.0f} s: {e['errors_count']} errors of "
                           f"{e['requests_count']} requests ({pct(e['error_rate'])} vs {pct(e['run_error_rate'])} overall)"
                           for e in soak["error_bursts"]]))
    if "soak" in images:
        b.append(("img", "soak", "Metrics over time"))
    if "gpu_over_time" in images:
        b.append(("img", "gpu_over_time", "GPU memory and power over time (from the GPU exporter)"))
    b.append(("h2", "Methods"))
    b.append(("list", [f"{k}: {v}" for k, v in s["methods"].items()]))
    return b


def _workload_blocks(s: dict[str, Any]) -> list[Block]:
    """Structured-output quality, reasoning phases and the server's prefix cache, where the run has them."""
    b: list[Block] = []
    rows = [r for r in s["steps"] if r.get("json_valid_checked_count")]
    if rows:
        b.append(("h2", "Structured-output quality per step and task"))
        b.append(("table", ["step", "task", "checked", "JSON valid", "schema valid"],
                  [[r["step_name"], r["task"], fmt(r["json_valid_checked_count"]), pct(r["json_valid_share"]),
                    pct(r["schema_valid_share"])] for r in rows]))
    rows = [r for r in s["steps"] if r.get("reasoning_streams_count")]
    if rows:
        b.append(("h2", "Reasoning streams per step and task"))
        b += judged_table(["step", "task", "streams", "first reasoning p50", "first answer p50", "first answer p99",
                            "reasoning ITL p50", "reasoning ITL p99", "answer ITL p50", "answer ITL p99",
                            "reasoning tokens"],
                  [[r["step_name"], r["task"], fmt(r["reasoning_streams_count"]),
                    guarded(r, "first_reasoning_token_p50_ms"), guarded(r, "first_answer_token_p50_ms"),
                    guarded(r, "first_answer_token_p99_ms"), guarded(r, "reasoning_itl_p50_ms"),
                    guarded(r, "reasoning_itl_p99_ms"), guarded(r, "answer_itl_p50_ms"), guarded(r, "answer_itl_p99_ms"),
                    fmt(r["reasoning_tokens_count"])]
                   for r in rows], keep=3)
        b.append(("p", "Latencies in ms from sent_at_s. TTFT is the first chunk of any kind; the switch from reasoning "
                       "to answer belongs to neither phase's ITL."))
    if s.get("prefix_cache"):
        b.append(("h2", "Server prefix cache per step"))
        b.append(("table", ["step", "queried tokens", "hit tokens", "hit rate"],
                  [[r["step_name"], fmt(r["prefix_cache_queries_tokens"]), fmt(r["prefix_cache_hits_tokens"]),
                    pct(r["prefix_cache_hit_rate"])] for r in s["prefix_cache"]]))
    return b
