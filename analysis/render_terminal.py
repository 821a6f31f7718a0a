"""Short plain-text tables for the terminal."""

from __future__ import annotations

from typing import Any

from tokenswarm import names
from tokenswarm.analysis.render_format import fmt, guarded, pct, ratio_cell
from tokenswarm.analysis.render_slo import slo_counts_text, slo_label
from tokenswarm.analysis.samples import prune_short_columns, short_text


def _short_or(row: dict[str, Any], name: str) -> str:
    """A ratio (3 digits) or ``n<N`` when its percentile lacked samples in either run."""
    if row.get(f"{name}_insufficient"):
        return short_text(int(row[f"{name}_needed_count"]))
    return fmt(row.get(f"{name}_ratio"), 3)


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.rjust(w) for h, w in zip(headers, widths))
    body = ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows]
    return "\n".join([line, "-" * len(line)] + body)


def verdict_lines(s: dict[str, Any], limit: int = 12) -> list[str]:
    """The SLO gate in a few lines: the verdict, then each check that did not pass, with its label."""
    results = s["slo_results"]
    short = [r for r in results if r.get("not_enough_samples")]
    missed = [r for r in results if not r["passed"] and not r.get("not_enough_samples")]
    word = "FAIL" if missed else "NOT JUDGED" if short else "PASS"
    lines = [f"verdict: {word} - {slo_counts_text(results)}"
             + (" (suspect: generator overloaded)" if s["generator_health"]["overloaded"] else "")]
    for r in (missed + short)[:limit]:
        seen = "" if r.get("not_enough_samples") else f" observed {fmt(r['observed_value'])}"
        lines.append(f"  {slo_label(r)}: {r['step_name']} / {r['task']} {r['slo_name']} {r['comparison']} "
                     f"{fmt(r['threshold_value'])}{seen}")
    if len(missed) + len(short) > limit:
        lines.append(f"  ... {len(missed) + len(short) - limit} more in report.md")
    return lines


def step_lines(s: dict[str, Any]) -> list[str]:
    """One row per step (all tasks); columns too short in every row are left out with a note."""
    rows = [[str(r["step_name"]), fmt(r["requests_count"]), pct(r[names.ERROR_RATE]), fmt(r["requests_per_s"]),
             fmt(r[names.OUTPUT_TOKENS_PER_S]), pct(r[names.GOODPUT_SHARE]), guarded(r, names.TTFT_P50_MS), guarded(r, names.TTFT_P99_MS),
             guarded(r, names.TPOT_P50_MS), guarded(r, names.TPOT_P99_MS), guarded(r, names.E2E_P99_MS)]
            for r in s["steps"] if r["task"] == "all"]
    headers, rows, note = prune_short_columns(["step", "requests", "errors", "req/s", "out tok/s", "goodput", "TTFT p50",
                                               "TTFT p99", "TPOT p50", "TPOT p99", "E2E p99"], rows)
    lines = [_table(headers, rows), "(latencies in ms, successful requests; steady windows only)"]
    return lines + ([note] if note else [])


def warning_lines(s: dict[str, Any]) -> list[str]:
    """The warnings worth acting on; the overload line only for delays that were in the figures."""
    h = s["generator_health"]
    lines = []
    if h["overloaded"]:
        where = h.get("overloaded_steps")
        lines.append("!! GENERATOR OVERLOADED" + (f" in step(s) {', '.join(where)}" if where else "")
                     + ": results there are suspect")
    return lines + [f"!  {m}" for m in h["messages"]]


def report_text(s: dict[str, Any]) -> str:
    """A few lines: the verdict (or the step table without a gate), the warnings, then the rest."""
    gated = bool(s["slo_results"])
    lines = verdict_lines(s) if gated else step_lines(s)
    lines += warning_lines(s)
    if gated:
        lines += step_lines(s)
    c = s["curves"]
    if c["knee"]:
        lines.append(f"knee at load {c['knee']['knee_load_value']:g}")
    m = c["max_load_meeting_slo"]
    if m is not None:
        lines.append(m["detail"] if m["load_value"] is None else f"highest load meeting SLOs: {m['load_value']:g}")
    cap = s.get("capacity") or {}
    if cap.get("summary"):
        lines.append(cap["summary"])
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
    rows = [[str(r["step_name"]), r["task"], ratio_cell(r, "request_output_tps_p50_speedup"),
             ratio_cell(r, "output_tokens_per_s_speedup"), _short_or(r, names.TTFT.stem("p50")), _short_or(r, names.TPOT.stem("p50")),
             _short_or(r, names.E2E.stem("p99")), f"{r['baseline_ok_count']}/{r['candidate_ok_count']}"]
            for r in s["rows"] if r["task"] == "all"]
    headers, rows, note = prune_short_columns(["step", "task", "per-req tok/s", "aggregate tok/s", "TTFT p50 x",
                                               "TPOT p50 x", "E2E p99 x", "successful requests base/cand"], rows, 2)
    lines = [_table(headers, rows)]
    if note:
        lines.append(note)
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
