"""The comparison report (``tokenswarm compare``) as blocks: ratios per step and task, quality,
GPU cost and output consistency of a candidate against its baseline."""

from __future__ import annotations

from typing import Any

from tokenswarm import names
from tokenswarm.analysis.render_format import Block, fmt, judged_table, pct, ratio_cell
from tokenswarm.analysis.render_sections import health_blocks


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
            b += health_blocks(h)
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
