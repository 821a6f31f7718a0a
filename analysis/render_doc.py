"""A report as a list of simple blocks, shared by the Markdown and HTML writers.

Blocks: ``("h1"|"h2"|"h3", text)``, ``("p", text)``, ``("banner", "red"|"yellow"|"green", text)``,
``("list", [text, ...])``, ``("table", headers, rows)`` and ``("img", name, caption)`` where
``name`` is a key of the images dict (PNG bytes). Text is plain (writers escape it).
"""

from __future__ import annotations

from typing import Any

Block = tuple[Any, ...]

LATENCY_TITLES = {
    "ttft": ("TTFT", "ms"),
    "tpot": ("TPOT", "ms"),
    "itl": ("ITL (per token)", "ms"),
    "inter_chunk": ("Inter-chunk latency", "ms"),
    "e2e": ("E2E latency", "ms"),
    "schedule_lag": ("Schedule lag", "ms"),
    "request_output_tps": ("Per-request output tokens/s", "tokens_per_s"),
    "ttft_from_schedule": ("Schedule-inclusive TTFT (open loop)", "ms"),
    "e2e_from_schedule": ("Schedule-inclusive E2E (open loop)", "ms"),
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


def _health_blocks(h: dict[str, Any]) -> list[Block]:
    out: list[Block] = []
    if h["overloaded"]:
        out.append(("banner", "red", "GENERATOR OVERLOADED: the load generator itself was a bottleneck; "
                                     "latencies and throughput may be understated or overstated."))
    if h["messages"]:
        out.append(("banner", "yellow", "Generator health and input warnings:"))
        out.append(("list", h["messages"]))
    return out


def report_doc(s: dict[str, Any], images: dict[str, bytes]) -> list[Block]:
    """Blocks of a single-run report (generator health first)."""
    run = s["run"]
    b: list[Block] = [("h1", f"tokenswarm report: {run['name']}")]
    b += _health_blocks(s["generator_health"])
    b.append(("table", ["run", "scenario", "model", "load mode", "records", "duration"],
              [[str(run["run_id"]), str(run["scenario_name"]), str(run["model"]), str(run["load_mode"]),
                fmt(run["records_count"]), fmt(run["run_duration_s"]) + " s"]]))
    if s["notes"]:
        b.append(("list", s["notes"]))
    steps = [r for r in s["steps"] if r["task"] == "all"]
    cost = {c["step_index"]: c for c in s["cost"]}
    b.append(("h2", "Summary per load step (steady window, all tasks)"))
    headers = ["step", "load", "window s", "requests", "errors", "req/s", "out tok/s", "goodput req/s",
               "goodput share", "TTFT p50", "TTFT p99", "TPOT p50", "TPOT p99", "ITL p99", "E2E p99", "failed share"]
    if cost:
        headers += ["$/1M out tok", "$/1k req"]
    rows = []
    for r in steps:
        row = [r["step_name"], _load(r), fmt(r["window_duration_s"]), fmt(r["requests_count"]), pct(r["error_rate"]),
               fmt(r["requests_per_s"]), fmt(r["output_tokens_per_s"]), fmt(r["goodput_requests_per_s"]),
               pct(r["goodput_share"]), fmt(r["ttft_p50_ms"]), fmt(r["ttft_p99_ms"]), fmt(r["tpot_p50_ms"]),
               fmt(r["tpot_p99_ms"]), fmt(r["itl_p99_ms"]), fmt(r["e2e_p99_ms"]), pct(r["ttft_failed_share"])]
        if cost:
            c = cost.get(r["step_index"], {})
            row += [fmt(c.get("cost_per_1m_output_tokens_usd")), fmt(c.get("cost_per_1k_requests_usd"))]
        rows.append(row)
    b.append(("table", headers, rows))
    b.append(("p", "Latencies in ms. " + s["methods"]["failures"]))
    # SLOs and curves
    c = s["curves"]
    b.append(("h2", "Load curves, knee and SLO limit"))
    if c["knee"]:
        k = c["knee"]
        b.append(("p", f"Knee: at step {k['knee_step_name']} (load {k['knee_load_value']:g}) {k['latency_metric']} "
                       f"rose x{k['latency_change_ratio']:.2f} while throughput rose x{k['throughput_change_ratio']:.2f}; "
                       f"last efficient load: {k['last_efficient_load_value']:g}."))
    else:
        b.append(("p", "Knee: not found (latency never rose faster than throughput between consecutive steps)."))
    m = c["max_load_meeting_slo"]
    if m is None:
        b.append(("p", "Highest load meeting the SLOs: no SLOs given (scenario slo block or --slo)."))
    elif m["load_value"] is None:
        b.append(("banner", "yellow", "No load step meets all SLOs."))
    else:
        b.append(("p", f"Highest load meeting all SLOs: {m['load_value']:g} (step {m['step_name']}, "
                       f"{fmt(m['output_tokens_per_s'])} output tokens/s)."))
    for name, cap in (("throughput_vs_load", "Throughput and per-request tokens/s vs load"),
                      ("percentiles_vs_load", "Latency percentiles vs load"),
                      ("latency_vs_throughput", "Latency vs throughput (Pareto view)")):
        if name in images:
            b.append(("img", name, cap))
    if c["points"]:
        b.append(("table", ["step", "load", "out tok/s", "E2E p95 ms", "TTFT p95 ms", "per-req tok/s p50", "Pareto-optimal"],
                  [[p["step_name"], fmt(p["load_value"]), fmt(p["output_tokens_per_s"]), fmt(p["e2e_p95_ms"]),
                    fmt(p["ttft_p95_ms"]), fmt(p["request_output_tps_p50_tokens_per_s"]), fmt(p["pareto_optimal"])]
                   for p in c["points"]]))
    if s["slo_results"]:
        b.append(("h3", "SLO results"))
        failing = [r for r in s["slo_results"] if not r["passed"]]
        b.append(("p", f"{len(s['slo_results']) - len(failing)} of {len(s['slo_results'])} checks pass."))
        b.append(("table", ["step", "task", "SLO", "threshold", "observed", "pass", "detail"],
                  [[str(r["step_name"]), r["task"], r["slo_name"], f"{r['comparison']} {fmt(r['threshold_value'])}",
                    fmt(r["observed_value"]), "PASS" if r["passed"] else "FAIL", r["detail"]] for r in s["slo_results"]]))
    # Latency tables per metric
    b.append(("h2", "Latency distributions per step and task"))
    for name in ("ttft_by_task", "e2e_by_task", "ttft_by_step", "tpot_by_task"):
        if name in images:
            b.append(("img", name, name.replace("_", " ")))
    for metric, (title, unit) in LATENCY_TITLES.items():
        lat_rows = [r for r in s["steps"] if r.get(f"{metric}_count")]
        if not lat_rows:
            continue
        b.append(("h3", f"{title} ({unit.replace('_per_s', '/s')})"))
        hdr = ["step", "task", "count", "failed share", "p50", "p90", "p95", "p99", "p99.9", "mean", "min", "max"]
        with_inf = f"{metric}_p99_failed_as_inf_{unit}" in lat_rows[0]
        if with_inf:
            hdr.append("p99 failures=inf")
        table = []
        for sr in lat_rows:
            row = [sr["step_name"], sr["task"], fmt(sr[f"{metric}_count"]), pct(sr.get(f"{metric}_failed_share"))]
            row += [fmt(sr[f"{metric}_{k}_{unit}"]) for k in ("p50", "p90", "p95", "p99", "p99_9", "mean", "min", "max")]
            if with_inf:
                v = sr[f"{metric}_p99_failed_as_inf_{unit}"]
                row.append("unbounded" if v is None else fmt(v))
            table.append(row)
        b.append(("table", hdr, table))
        if metric == "itl" and any(sr.get("itl_per_chunk_samples_share") for sr in lat_rows):
            b.append(("p", "Some requests had no exact per-chunk token counts: their ITL samples are per chunk, not per token."))
    if s["errors"]:
        b.append(("h2", "Errors and timeouts by kind"))
        b.append(("table", ["step", "task", "outcome", "error", "HTTP status", "count", "share"],
                  [[str(e["step_name"]), e["task"], e["outcome"], str(e["error"]), fmt(e["http_status"]),
                    fmt(e["requests_count"]), pct(e["requests_share"])] for e in s["errors"]]))
    # Speculative decoding
    sd = s["spec_decode"]
    b.append(("h2", "Speculative decoding"))
    if not sd["observed"]:
        b.append(("p", "No speculative-decoding signal: no server counters, no per-request stats, and every chunk "
                       "carried at most one token."))
    b.append(("p", f"K (num_speculative_tokens): {fmt(sd['num_spec_tokens_count'])} "
                   f"(source: {sd['num_spec_tokens_source'] or 'unknown'})."))
    srv = [r for r in sd["rows"] if r["task"] == "all"]
    b.append(("table", ["step", "server acceptance", "server mean acc. length", "per-position rates", "note"],
              [[str(r["step_name"]), pct(r.get("server_acceptance_rate")), fmt(r.get("server_mean_acceptance_length_tokens")),
                fmt(r.get("server_per_position_acceptance_rate")), str(r.get("server_note") or "")] for r in srv]))
    b.append(("table", ["step", "task", "req. stats", "req. acceptance", "req. mean acc. length", "chunks",
                        "mean tokens/chunk", "chunks > K+1", "chunk estimate reliable", "why not"],
              [[str(r["step_name"]), r["task"], fmt(r["request_stats_count"]), pct(r["request_acceptance_rate"]),
                fmt(r["request_mean_acceptance_length_tokens"]), fmt(r["chunks_count"]),
                fmt(r["chunk_mean_tokens_per_chunk_tokens"]), pct(r["chunks_over_k_plus_1_share"]),
                fmt(r["chunk_estimate_reliable"]), "; ".join(r["chunk_estimate_notes"])] for r in sd["rows"]]))
    if "tokens_per_chunk" in images:
        b.append(("img", "tokens_per_chunk", "Tokens per chunk (first chunk excluded)"))
    if s["price"]:
        p = s["price"]
        b.append(("h2", "Cost"))
        b.append(("p", f"Price: {p['gpu_hour_usd']:g} USD per GPU-hour x {p['gpus_count']:g} GPUs ({p['price_source']})."))
        b.append(("table", ["step", "out tok/s", "req/s", "USD per 1M output tokens", "USD per 1k requests"],
                  [[str(c["step_name"]), fmt(c["output_tokens_per_s"]), fmt(c["requests_per_s"]),
                    fmt(c["cost_per_1m_output_tokens_usd"]), fmt(c["cost_per_1k_requests_usd"])] for c in s["cost"]]))
    soak = s["soak"]
    b.append(("h2", f"Over time ({soak['window_s']:g} s windows)"))
    if not soak["applicable"]:
        b.append(("p", "Run shorter than 4 full windows: no drift test."))
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
    b.append(("h2", "Methods"))
    b.append(("list", [f"{k}: {v}" for k, v in s["methods"].items()]))
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
    for note in s["collapse_notes"]:
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
        row = [r["step_name"], r["task"],
               ci(r["request_output_tps_p50_speedup_ratio"], r["request_output_tps_p50_speedup_ci_low_ratio"],
                  r["request_output_tps_p50_speedup_ci_high_ratio"]),
               ci(r["output_tokens_per_s_speedup_ratio"], r["output_tokens_per_s_speedup_ci_low_ratio"],
                  r["output_tokens_per_s_speedup_ci_high_ratio"])]
        for m in ("ttft", "tpot", "e2e"):
            for p in ("p50", "p95", "p99"):
                row.append(ci(r[f"{m}_{p}_ratio"], r[f"{m}_{p}_ci_low_ratio"], r[f"{m}_{p}_ci_high_ratio"]))
        row.append(f"{fmt(r['baseline_mean_acceptance_length_tokens'], 3)} -> {fmt(r['candidate_mean_acceptance_length_tokens'], 3)}")
        rows.append(row)
    b.append(("h2", "Speedup and latency ratios per step and task"))
    b.append(("table", hdr, rows))
    for name, cap in (("throughput_vs_load", "Throughput vs load: baseline and candidate"),
                      ("percentiles_vs_load", "Latency percentiles vs load (solid: baseline, dashed: candidate)"),
                      ("latency_vs_throughput", "Latency vs throughput"),
                      ("ttft_overlay", "TTFT distribution, baseline vs candidate"),
                      ("e2e_overlay", "E2E distribution, baseline vs candidate")):
        if name in images:
            b.append(("img", name, cap))
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
    if s["notes"]:
        b.append(("h2", "Notes"))
        b.append(("list", s["notes"]))
    b.append(("h2", "Methods"))
    b.append(("p", s["bootstrap"]["method"] + ". Consistency: join on request_key + occurrence index (by sent_at); "
                   "text equality when both runs kept output_text, else output_sha256; similarity = difflib ratio."))
    return b
