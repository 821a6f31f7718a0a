"""Short plain-text tables for the terminal."""

from __future__ import annotations

from typing import Any

from tokenswarm.analysis.render_doc import ci, fmt, guarded, pct


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, "-" * len(line)] + body)


def report_text(s: dict[str, Any]) -> str:
    """A few lines: health warnings, one row per step, knee and SLO limit."""
    lines = []
    h = s["generator_health"]
    if h["overloaded"]:
        lines.append("!! GENERATOR OVERLOADED: results are suspect")
    lines += [f"!  {m}" for m in h["messages"]]
    rows = [[str(r["step_name"]), fmt(r["requests_count"]), pct(r["error_rate"]), fmt(r["requests_per_s"]),
             fmt(r["output_tokens_per_s"]), pct(r["goodput_share"]), guarded(r, "ttft_p50_ms"), guarded(r, "ttft_p99_ms"),
             guarded(r, "tpot_p50_ms"), guarded(r, "tpot_p99_ms"), guarded(r, "e2e_p99_ms")]
            for r in s["steps"] if r["task"] == "all"]
    lines.append(_table(["step", "requests", "errors", "req/s", "out tok/s", "goodput", "TTFT p50", "TTFT p99",
                         "TPOT p50", "TPOT p99", "E2E p99"], rows))
    lines.append("(latencies in ms, successful requests; steady windows only)")
    c = s["curves"]
    if c["knee"]:
        lines.append(f"knee at load {c['knee']['knee_load_value']:g}")
    m = c["max_load_meeting_slo"]
    if m is not None:
        lines.append("no step meets all SLOs" if m["load_value"] is None else f"highest load meeting SLOs: {m['load_value']:g}")
    cap = s.get("capacity") or {}
    if cap.get("summary"):
        lines.append(cap["summary"])
    failing = [r for r in s["slo_results"] if not r["passed"]]
    if s["slo_results"]:
        lines.append(f"SLO checks: {len(s['slo_results']) - len(failing)}/{len(s['slo_results'])} pass")
    drift = [d["series"] for d in s["soak"]["drift"] if d["drift_detected"]]
    if drift:
        lines.append("drift: " + ", ".join(drift))
    res = s.get("resources") or {}
    if res.get("observed"):
        lines.append("GPU: " + "; ".join(
            f"{r['step_name']} {fmt(r['output_tokens_per_s_per_gpu'])} tok/s/GPU, {fmt(r['output_tokens_per_joule'])} tok/J, "
            f"{fmt(r['gpu_power_w_mean'])} W" for r in res["rows"]))
    obs = s.get("observability") or []
    if obs:
        missing = [o["signal"] for o in obs if not o["exposed"]]
        lines.append(f"observability: {len(obs) - len(missing)}/{len(obs)} signals exposed"
                     + (f" (missing: {', '.join(missing)})" if missing else ""))
    return "\n".join(lines)


def compare_text(s: dict[str, Any]) -> str:
    """Per-step speedups, then consistency, with the greedy flag on its own line."""
    rows = [[str(r["step_name"]), r["task"],
             ci(r["request_output_tps_p50_speedup_ratio"], r["request_output_tps_p50_speedup_ci_low_ratio"],
                r["request_output_tps_p50_speedup_ci_high_ratio"]),
             ci(r["output_tokens_per_s_speedup_ratio"], r["output_tokens_per_s_speedup_ci_low_ratio"],
                r["output_tokens_per_s_speedup_ci_high_ratio"]),
             fmt(r["ttft_p50_ratio"], 3), fmt(r["tpot_p50_ratio"], 3), fmt(r["e2e_p99_ratio"], 3),
             f"{r['baseline_ok_count']}/{r['candidate_ok_count']}"]
            for r in s["rows"] if r["task"] == "all"]
    lines = [_table(["step", "task", "per-req tok/s", "aggregate tok/s", "TTFT p50 x", "TPOT p50 x", "E2E p99 x",
                     "n base/cand"], rows)]
    lines += [f"!  {n}" for n in s["collapse_notes"]]
    lines += [f"!  unmatched: {u}" for u in s.get("unmatched_steps", [])]
    lines += [f"!  {n}" for n in s.get("slower_notes", [])]
    c = s["consistency"]
    lines.append(f"outputs: {pct(c['exact_match_rate'])} exact match over {c['judged_pairs_count']} pairs, "
                 f"{c['diverging_count']} diverging")
    if c["greedy_divergence"]:
        lines.append(f"!! GREEDY OUTPUTS CHANGED: {c['greedy_diverging_count']} temperature-0 pair(s) diverge")
    lines += [f"GPU {r['step_name']}: {r['summary_text']}" for r in (s.get("resources") or {}).get("rows", [])
              if r.get("gpu_memory_used_mib_delta") is not None]
    return "\n".join(lines)
