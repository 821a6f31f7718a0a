"""A report as a list of simple blocks, shared by the Markdown and HTML writers.

Blocks: ``("h1"|"h2"|"h3", text)``, ``("p", text)``, ``("banner", "red"|"yellow"|"green", text)``,
``("list", [text, ...])``, ``("table", headers, rows)`` and ``("img", name, caption)`` where
``name`` is a key of the images dict (PNG bytes). Text is plain (writers escape it).
"""

from __future__ import annotations

from typing import Any

from tokenswarm import names
from tokenswarm.analysis.samples import MEDIAN_NEED, prune_short_columns, short_text, shortfall
from tokenswarm.analysis.slo import judged_label
from tokenswarm.names import SummaryMetric

Block = tuple[Any, ...]

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


def fmt(v: Any, digits: int = 4) -> str:
    """Compact number formatting; ``None`` -> an em dash."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, int):
        return f"{v:,}"
    if isinstance(v, float):
        if v == 0:
            return "0"
        if abs(v) >= 10 ** digits:
            return f"{v:,.0f}"
        return f"{v:.{digits}g}"
    if isinstance(v, list):
        return ", ".join(fmt(x, 3) for x in v)
    return str(v)


def guarded(row: Any, column: str) -> str:
    """A percentile cell: ``n<N`` when the row's sample count cannot support it (never a number), else fmt.

    The rule is :mod:`analysis.samples` (n >= 10 / (1 - q)), the same for every table.
    """
    short = shortfall(row, column)
    return short_text(short[1]) if short is not None else fmt(row.get(column))


def point_cell(point: dict[str, Any], column: str) -> str:
    """A curve point's value, or ``n<N`` when it was left out for too few samples."""
    need = next((c["samples_needed_count"] for c in point.get("short_columns") or [] if c["column"] == column), None)
    return short_text(need) if need is not None else fmt(point.get(column))


def ratio_cell(row: dict[str, Any], name: str) -> str:
    """A comparison ratio with its interval, or ``n<N`` when either run had too few samples."""
    if name.endswith("_speedup"):
        if row.get("speedup_insufficient"):
            return short_text(MEDIAN_NEED)
    elif row.get(f"{name}_insufficient"):
        return short_text(int(row[f"{name}_needed_count"]))
    return ci(row.get(f"{name}_ratio"), row.get(f"{name}_ci_low_ratio"), row.get(f"{name}_ci_high_ratio"))


def judged_table(headers: list[str], rows: list[list[str]], keep: int = 1) -> list["Block"]:
    """A table block without the columns that are too short in every row, and the note saying so."""
    headers, rows, note = prune_short_columns(headers, rows, keep)
    out: list[Block] = [("table", headers, rows)]
    if note:
        out.append(("p", note))
    return out


def pct(v: float | None, digits: int = 2) -> str:
    """A share as a percentage."""
    return "—" if v is None else f"{100.0 * v:.{digits}f}%"


def ci(point: float | None, lo: float | None, hi: float | None) -> str:
    """``1.23x [1.10, 1.35]``."""
    if point is None:
        return "—"
    if lo is None or hi is None:
        return f"{point:.3f}x"
    return f"{point:.3f}x [{lo:.3f}, {hi:.3f}]"


def _load(r: dict[str, Any]) -> str:
    if r.get("step_concurrency_users") is not None:
        return f"{r['step_concurrency_users']:g} users"
    if r.get("step_rate_rps") is not None:
        return f"{r['step_rate_rps']:g} req/s"
    return "—"


def _health_blocks(h: dict[str, Any], heading: bool = False) -> list[Block]:
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
    return out


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


def verdict_blocks(s: dict[str, Any]) -> list[Block]:
    """The gate's verdict: one banner line (PASS, FAIL, NOT JUDGED), the step x task matrix, the misses."""
    results = s["slo_results"]
    short = [r for r in results if r.get("not_enough_samples")]
    missed = [r for r in results if not r["passed"] and not r.get("not_enough_samples")]
    suspect = " Suspect: the generator was overloaded (see the warnings)." if s["generator_health"]["overloaded"] else ""
    if missed:
        colour, text = "red", f"FAIL: {len(missed)} of {len(results)} SLO checks missed"
    elif short:
        colour, text = "yellow", f"NOT JUDGED: {len(short)} of {len(results)} SLO checks rest on too few samples"
    else:
        colour, text = "green", f"PASS: all {len(results)} SLO checks met"
    if short and missed:
        text += f", {len(short)} not judged (too few samples)"
    b: list[Block] = [("h2", "Verdict"), ("banner", colour, text + "." + suspect)]
    b += slo_matrix_blocks(results)
    return b


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
    b += _health_blocks(s["generator_health"], heading=True)
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


def slo_matrix_blocks(results: list[dict[str, Any]]) -> list[Block]:
    """SLO results as a step x task matrix (PASS, or the failing SLOs), then the failures in full."""
    tasks: list[str] = []
    steps: list[str] = []
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in results:
        st, task = str(r["step_name"]), r["task"]
        if task not in tasks:
            tasks.append(task)
        if st not in steps:
            steps.append(st)
        cells.setdefault((st, task), []).append(r)
    tasks.sort(key=lambda t: (t != "all", t))

    def cell(st: str, task: str) -> str:
        rs = cells.get((st, task))
        if not rs:
            return "—"
        bad = [r["slo_name"] for r in rs if not r["passed"] and not r.get("not_enough_samples")]
        parts = ["FAIL " + ", ".join(bad)] if bad else []
        for r in rs:
            if r.get("not_enough_samples"):
                parts.append(f"{slo_label(r)}: {r['slo_name']}")
        return "; ".join(parts) or "PASS"

    out: list[Block] = [("table", ["step"] + tasks, [[st] + [cell(st, t) for t in tasks] for st in steps])]
    failing = [r for r in results if not r["passed"] and not r.get("not_enough_samples")]
    if failing:
        out.append(("list", [f"{r['step_name']} / {r['task']}: {r['slo_name']} observed {fmt(r['observed_value'])}, "
                             f"needs {r['comparison']} {fmt(r['threshold_value'])}"
                             + (f" ({r['detail']})" if r["detail"] else "") for r in failing]))
    short = [r for r in results if r.get("not_enough_samples")]
    if short:
        out.append(("p", f"{len(short)} check(s) not judged: their percentile rests on fewer samples than it needs "
                         "(n >= 10 / (1 - q)); a check that is not judged is neither a pass nor a miss of the "
                         "threshold, and a gate counts it as not passed."))
    return out


def slo_label(r: dict[str, Any]) -> str:
    """PASS, FAIL or "not judged (n=…, needs …)" of one SLO result dict."""
    if r.get("not_enough_samples"):
        return judged_label(r.get("samples_count"), r.get("samples_needed_count"))
    return "PASS" if r["passed"] else "FAIL"


def slo_counts_text(results: list[dict[str, Any]]) -> str:
    """"3 of 10 checks pass, 2 miss, 5 not judged (too few samples)"."""
    short = sum(1 for r in results if r.get("not_enough_samples"))
    passed = sum(1 for r in results if r["passed"])
    missed = len(results) - passed - short
    text = f"{passed} of {len(results)} SLO checks pass, {missed} miss"
    return text + (f", {short} not judged (too few samples)" if short else "")


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


def _gpu_cost_ratio_blocks(res: dict[str, Any] | None) -> list[Block]:
    """What the candidate's speedup costs the GPU (memory, power, tokens/J), or nothing."""
    b: list[Block] = []
    if res and res["rows"]:
        b.append(("h2", "What the speedup costs the GPU"))
        if not res["observed"]:
            b.append(("p", "No GPU exporter in either run: throughput only (add a DCGM or AMD exporter to "
                           "target.extra_metrics)."))
        b.append(("table", ["step", "candidate vs baseline", "memory delta MiB", "power delta W", "tokens/J ratio",
                            "$/1M good tok ratio"],
                  [[str(r["step_name"]), r["summary_text"], fmt(r["gpu_memory_used_mib_delta"]),
                    fmt(r["gpu_power_w_delta"]), fmt(r["output_tokens_per_joule_ratio"]),
                    fmt(r["cost_per_1m_good_output_tokens_ratio"])] for r in res["rows"]]))
    return b


def _consistency_blocks(c: dict[str, Any]) -> list[Block]:
    """Output consistency of the joined request pairs, with diverging examples."""
    b: list[Block] = []
    b.append(("h2", "Output consistency"))
    b.append(("table", ["joined pairs", "both ok", "judged", "exact matches", "exact-match rate", "diverging",
                        "greedy pairs", "greedy diverging", "mean similarity", "median first divergence (chars)"],
              [[fmt(c["joined_pairs_count"]), fmt(c["both_ok_pairs_count"]), fmt(c["judged_pairs_count"]),
                fmt(c["exact_match_count"]), pct(c["exact_match_rate"]), fmt(c["diverging_count"]),
                fmt(c["greedy_pairs_count"]), fmt(c["greedy_diverging_count"]), fmt(c["mean_similarity_ratio"]),
                fmt(c["first_divergence_char_index_median_count"])]]))
    if not c["texts_compared"]:
        b.append(("p", "Outputs compared by output_sha256 only (the runs kept no output_text): no divergence "
                       "position or similarity."))
    if c["examples"]:
        b.append(("table", ["request_key", "task", "greedy", "first divergence (char/word)", "similarity",
                            "baseline excerpt", "candidate excerpt"],
                  [[e["request_key"][:12], e["task"], fmt(e["greedy"]),
                    f"{fmt(e['first_divergence_char_index'])}/{fmt(e['first_divergence_word_index'])}",
                    fmt(e["similarity_ratio"], 3), repr(e.get("baseline_excerpt", "")), repr(e.get("candidate_excerpt", ""))]
                   for e in c["examples"]]))
    return b


def compare_doc(s: dict[str, Any], images: dict[str, bytes]) -> list[Block]:
    """Blocks of a baseline-vs-candidate comparison."""
    c = s["consistency"]
    b: list[Block] = [("h1", f"tokenswarm compare: {s['candidate']['name']} vs baseline {s['baseline']['name']}")]
    if c["greedy_divergence"]:
        b.append(("banner", "red", f"GREEDY OUTPUTS CHANGED: {c['greedy_diverging_count']} of {c['greedy_pairs_count']} "
                                   "temperature-0 request pairs produce different outputs in the candidate."))
    for h in (s.get("baseline_health"), s.get("candidate_health")):
        if h:
            b += _health_blocks(h)
    for note in s["collapse_notes"] + s.get("slower_notes", []):
        b.append(("banner", "yellow", note))
    b.append(("p", f"Scenario {s['scenario_name']}; {s['shared_request_keys_count']:,} shared request keys. "
                   f"Ratios are candidate / baseline with {int(s['bootstrap']['confidence_level_share'] * 100)} % "
                   f"bootstrap CIs ({s['bootstrap']['replicates_count']} replicates, seed {s['bootstrap']['rng_seed_value']})."))
    if s["unmatched_steps"]:
        b.append(("list", s["unmatched_steps"]))
    hdr = ["step", "task", "per-request tok/s (p50)", "aggregate tok/s", "TTFT p50", "TTFT p95", "TTFT p99",
           "TPOT p50", "TPOT p95", "TPOT p99", "E2E p50", "E2E p95", "E2E p99", "acc. length base -> cand"]
    rows = []
    for r in s["rows"]:
        row = [r["step_name"], r["task"], ratio_cell(r, "request_output_tps_p50_speedup"),
               ratio_cell(r, "output_tokens_per_s_speedup")]
        for m in (names.TTFT, names.TPOT, names.E2E):
            for p in ("p50", "p95", "p99"):
                row.append(ratio_cell(r, m.stem(p)))
        row.append(f"{fmt(r['baseline_mean_acceptance_length_tokens'], 3)} -> {fmt(r['candidate_mean_acceptance_length_tokens'], 3)}")
        rows.append(row)
    b.append(("h2", "Speedup and latency ratios per step and task"))
    b += judged_table(hdr, rows, keep=2)
    quality = [r for r in s["rows"] if r.get("baseline_json_valid_share") is not None
               or r.get("candidate_json_valid_share") is not None]
    if quality:
        b.append(("h2", "Structured-output quality, baseline -> candidate"))
        b.append(("table", ["step", "task", "JSON valid", "schema valid"],
                  [[r["step_name"], r["task"],
                    f"{pct(r['baseline_json_valid_share'])} -> {pct(r['candidate_json_valid_share'])}",
                    f"{pct(r['baseline_schema_valid_share'])} -> {pct(r['candidate_schema_valid_share'])}"]
                   for r in quality]))
    for name, cap in (("throughput_vs_load", "Throughput vs load: baseline and candidate"),
                      ("percentiles_vs_load", "Latency percentiles vs load (solid: baseline, dashed: candidate)"),
                      ("latency_vs_throughput", "Latency vs throughput"),
                      ("ttft_overlay", "TTFT distribution, baseline vs candidate"),
                      ("e2e_overlay", "E2E distribution, baseline vs candidate")):
        if name in images:
            b.append(("img", name, cap))
    b += _gpu_cost_ratio_blocks(s.get("resources"))
    b += _consistency_blocks(c)
    if s["notes"]:
        b.append(("h2", "Notes"))
        b.append(("list", s["notes"]))
    b.append(("h2", "Methods"))
    b.append(("p", s["bootstrap"]["method"] + ". Consistency: join on request_key + occurrence index (by sent_at_s); "
                   "text equality when both runs kept output_text, else output_sha256; similarity = difflib ratio."))
    return b


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
