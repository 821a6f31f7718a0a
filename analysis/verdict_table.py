"""Rendering of the study summary: the verdict table (terminal and Markdown), the speedup curves.

The first screen is the conditions (where the conclusion holds) and then the verdict table,
task x load for each candidate arm. A ratio whose runs cannot support its percentile is shown
as ``n<NEED`` (insufficient), never as a number; every cell shows its n per round.
"""

from __future__ import annotations

from typing import Any

from tokenswarm.analysis.stats import min_samples_for
from tokenswarm.analysis.study_capacity import capacity_lines


def _x(v: float | None, ci: list[float] | None = None) -> str:
    if v is None:
        return "-"
    s = f"x{v:.2f}"
    return s + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _lat(row: dict[str, Any], metric: str, p: float) -> str:
    name = f"{metric}_p{p:g}_ratio"
    if row.get(f"{name}_insufficient"):
        return f"n<{min_samples_for(p)}"
    return _x(row.get(name))


def _n(row: dict[str, Any]) -> str:
    return f"{min(row['baseline_requests_count'])}/{min(row['candidate_requests_count'])}"


def _load(row: dict[str, Any]) -> str:
    prefix = "c" if row["load_kind"] == "concurrency" else "r"
    return f"{prefix}{row['load']:g}"


HEADERS = ["task", "load", "n base/cand", "speedup (per-req tok/s)", "aggregate tok/s", "TTFT p50", "TPOT p50",
           "TPOT p95", "E2E p95", "E2E p99", "goodput", "acc. len", "verdict"]


def verdict_rows(summary: dict[str, Any], arm: str) -> list[list[str]]:
    """Table rows of one candidate arm."""
    rows = []
    for r in summary["verdict"]:
        if r["arm"] != arm:
            continue
        acc = r.get("mean_accepted_length")
        rows.append([r["task"], _load(r), _n(r), _x(r["speedup"], r["speedup_ci"]),
                     _x(r["aggregate_speedup"], r["aggregate_speedup_ci"]), _lat(r, "ttft", 50), _lat(r, "tpot", 50),
                     _lat(r, "tpot", 95), _lat(r, "e2e", 95), _lat(r, "e2e", 99), _x(r.get("goodput_ratio")),
                     "-" if acc is None else f"{acc:.2f}", r["verdict"]])
    return rows


def _arms(summary: dict[str, Any]) -> list[str]:
    seen: list[str] = []
    for r in summary["verdict"]:
        if r["arm"] not in seen:
            seen.append(r["arm"])
    return seen


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths))
    return "\n".join([line, "-" * len(line)] + ["  ".join(c.ljust(w) for c, w in zip(r, widths)) for r in rows])


def conditions_lines(summary: dict[str, Any]) -> list[str]:
    """The conditions of the result, one fact a line."""
    c = summary["conditions"]
    lines = [f"scenario {c['scenario']} ({c['scenario_path']}); model {c['model']}; "
             f"tokenswarm {c['tokenswarm_version']}",
             f"load: {c['load_mode']} loop, steps {c['load_steps']}, warm-up {c['warmup_s']} s + steady "
             f"{c['step_duration_s']} s per step; task draw {c['task_draw']}",
             f"rounds {c['rounds_count']}, order " + " ".join(f"{a}" for _r, a in (c["order"] or [])),
             f"baseline arm: {c['baseline_arm']}"]
    for a in c["arms"] or []:
        what = a["command"] or a["host"]
        lines.append(f"  arm {a['name']}: {what}" + (f" (set {', '.join(a['set'])})" if a.get("set") else ""))
    for arm, models in (c.get("served_models") or {}).items():
        lines.append(f"  served by {arm}: " + ", ".join(str(m.get("id")) + (f" (max_model_len {m['max_model_len']})"
                                                                             if m.get("max_model_len") else "")
                                                         for m in models))
    mach = c.get("machine") or {}
    lines.append(f"load generator: {mach.get('platform')}, {mach.get('cpu_count')} CPUs, Python {mach.get('python_version')}")
    for ln in c.get("lengths_observed") or []:
        lines.append(f"  {ln['task']}: prompt p50 {ln['prompt_tokens_p50']:.0f} tokens (max {ln['prompt_tokens_max']:.0f}), "
                     f"output p50 {ln['output_tokens_p50'] or 0:.0f} (max {ln['output_tokens_max'] or 0:.0f})")
    samp = {k: v for k, v in (c.get("sampling") or {}).items() if v}
    if samp:
        lines.append("sampling: " + "; ".join(f"{k} {v}" for k, v in samp.items()))
    return lines


def _crossover_lines(summary: dict[str, Any]) -> list[str]:
    out = []
    for c in summary["crossover"]:
        if c["metric"] != "speedup":
            continue
        what = ("pays at every load measured" if c["pays_at_all_loads"] else "does not pay at any load measured"
                if c["never_pays"] else f"stops paying at about {c['load_kind']} {c['crossover_load']:.1f}")
        out.append(f"arm {c['arm']}, {c['task']}: {what}")
    return out


def verdict_text(summary: dict[str, Any]) -> str:
    """The terminal view: conditions, the verdict table per arm, crossovers, notes."""
    lines = ["tokenswarm study: " + ("complete" if summary["complete"] else "INCOMPLETE (some arm-rounds failed "
                                                                            "or did not run)")]
    lines += conditions_lines(summary)
    for arm in _arms(summary):
        lines += ["", f"arm {arm} vs baseline {summary['conditions']['baseline_arm']} "
                      "(ratios candidate/baseline, 95 % interval over rounds):",
                  _table(HEADERS, verdict_rows(summary, arm))]
    cross = _crossover_lines(summary)
    if cross:
        lines += ["", "crossover (per-request speedup):"] + [f"  {c}" for c in cross]
    cap = capacity_lines(summary.get("capacity"))
    if cap:
        lines += [""] + cap
    for c in summary["consistency"]:
        rate = c["exact_match_rate"]
        lines.append(f"outputs of {c['arm']}: " + ("not compared" if rate is None else
                                                   f"{rate:.1%} identical over {c['judged_pairs_count']} pairs")
                     + ("  !! GREEDY OUTPUTS CHANGED" if c["greedy_divergence"] else ""))
    lines += [f"!  {n}" for n in summary["notes"] + summary["unmatched"]]
    lines += [f"!! failed: round {f['round']}, arm {f['arm']}: {f['message'].splitlines()[0]}"
              for f in summary["failures"]]
    return "\n".join(lines)


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
                     + ["| " + " | ".join(r) + " |" for r in esc])


def report_markdown(summary: dict[str, Any], images: list[str]) -> str:
    """The study report as Markdown: conditions, verdict tables, curves, rules, variability, acceptance."""
    b = ["# Study verdict", ""]
    if not summary["complete"]:
        b += ["**Incomplete study**: some arm-rounds failed or did not run; only finished rounds are used.", ""]
    b += ["## Conditions", ""] + [f"- {ln.strip()}" for ln in conditions_lines(summary)] + [""]
    for arm in _arms(summary):
        b += [f"## {arm} vs {summary['conditions']['baseline_arm']}", "",
              "Ratios are candidate / baseline; `[low, high]` is the 95 % interval over rounds; n is the "
              "fewest successful requests of a run (baseline/candidate); `n<N` means too few samples for "
              "that percentile.", "", _md_table(HEADERS, verdict_rows(summary, arm)), ""]
    for img in images:
        b += [f"![speedup vs load]({img})", ""]
    cross = _crossover_lines(summary)
    if cross:
        b += ["## Crossover", ""] + [f"- {c}" for c in cross] + [""]
    cap = capacity_lines(summary.get("capacity"))
    if cap:
        b += ["## Capacity under SLO", "", cap[0], ""] + [f"- {ln.strip()}" for ln in cap[1:]] + [""]
    if summary["notes"] or summary["unmatched"] or summary["failures"]:
        b += ["## Notes", ""] + [f"- {n}" for n in summary["notes"] + summary["unmatched"]]
        b += [f"- failed: round {f['round']}, arm {f['arm']}: {f['message'].splitlines()[0]}"
              for f in summary["failures"]]
        b.append("")
    b += ["## Verdict rules", ""] + [f"- **{k}**: {v}" for k, v in summary["verdict_rules"].items()] + [""]
    b += ["## Output consistency", ""]
    for c in summary["consistency"]:
        rate = c["exact_match_rate"]
        b.append(f"- {c['arm']}: " + ("not compared" if rate is None else
                                      f"{rate:.1%} identical over {c['judged_pairs_count']} pairs; "
                                      f"{c['greedy_diverging_count']} of {c['greedy_pairs_count']} greedy pairs diverge"))
    b += ["", "## Run-to-run variability (coefficient of variation across rounds)", ""]
    rows = [[v["arm"], v["task"], f"{v['load']:g}", str(v["rounds"])]
            + ["-" if v[k] is None else f"{v[k]:.1%}" for k in ("request_output_tps_p50_cv", "output_tokens_per_s_cv",
                                                                 "ttft_p50_cv", "tpot_p50_cv")]
            for v in summary["variability"]]
    b += [_md_table(["arm", "task", "load", "rounds", "per-req tok/s p50", "aggregate tok/s", "TTFT p50", "TPOT p50"],
                    rows), ""]
    b += ["## Acceptance", ""]
    rows = [[a["arm"], a["task"], f"{a['load']:g}",
             "-" if a["mean_accepted_length"] is None else f"{a['mean_accepted_length']:.2f}",
             "-" if a["acceptance_rate"] is None else f"{a['acceptance_rate']:.1%}", a["acceptance_source"] or "-",
             _hist_text(a.get("accepted_length_histogram") or [])
             + ("" if a.get("chunk_estimate_reliable") else " (unreliable)")]
            for a in summary["acceptance"]]
    b += ["Acceptance per step of the load plan shows how it changed over the run. The histogram counts "
          "content chunks by tokens carried (first chunk excluded), all rounds together.", "",
          _md_table(["arm", "task", "load", "mean accepted length", "acceptance rate", "source",
                     "tokens per chunk: chunks"], rows), ""]
    b += _by_arm_table(summary)
    m = summary["methods"]
    b += ["## Method", "", f"- within a run: {m['within_run']}", f"- over rounds: {m['over_rounds']}",
          f"- {m['sample_size_guard']}", f"- {m['bootstrap_replicates']} replicates, seed {m['seed']}", ""]
    return "\n".join(b)


def _hist_text(hist: list[dict[str, int]]) -> str:
    total = sum(h["chunks_count"] for h in hist)
    if not total:
        return "-"
    return " ".join(f"{h['tokens_per_step_count']}:{h['chunks_count'] / total:.0%}" for h in hist)


def _by_arm_table(summary: dict[str, Any]) -> list[str]:
    """With several candidate arms (e.g. K = 2, 4, 8, or draft vs n-gram): speedup per arm at each load."""
    arms = _arms(summary)
    if len(arms) < 2:
        return []
    cells = {(r["arm"], r["load"]): r for r in summary["verdict"] if r["task"] == "all"}
    loads = sorted({load for _a, load in cells})
    rows = [[f"{load:g}"] + [_x(cells[(a, load)]["speedup"]) if (a, load) in cells else "-" for a in arms]
            for load in loads]
    return ["## Speedup by arm (all tasks, per-request tok/s)", "", _md_table(["load"] + arms, rows), ""]


def speedup_curves_png(summary: dict[str, Any]) -> bytes | None:
    """Speedup (per-request tok/s) vs load per task and arm, with the 95 % interval as a band."""
    from tokenswarm.analysis.plots import _plt, _png

    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in summary["verdict"]:
        if r["speedup"] is not None:
            groups.setdefault((r["arm"], r["task"]), []).append(r)
    if not groups:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=(7, 4.2))
    for (arm, task), rows in sorted(groups.items()):
        rows.sort(key=lambda r: r["load"])
        x = [r["load"] for r in rows]
        line = ax.plot(x, [r["speedup"] for r in rows], marker="o", label=f"{arm}: {task}")[0]
        lo = [r["speedup_ci"][0] if r["speedup_ci"] else r["speedup"] for r in rows]
        hi = [r["speedup_ci"][1] if r["speedup_ci"] else r["speedup"] for r in rows]
        ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15)
    ax.axhline(1.0, color="grey", lw=1, ls="--")
    ax.set_xscale("log", base=2)
    ax.set_xlabel("load (concurrent users, or requests/s)")
    ax.set_ylabel("speedup, per-request output tokens/s")
    ax.legend(fontsize=7)
    return _png(fig)
