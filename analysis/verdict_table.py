"""Rendering of the study summary: the verdict table (terminal and Markdown), the speedup curves.

The first screen is the conditions (where the conclusion holds) and then the verdict table,
task x load for each candidate arm. A ratio whose runs cannot support its percentile is shown
as ``n<NEED`` (insufficient), never as a number; every cell shows its n per round.
"""

from __future__ import annotations

from typing import Any

from tokenswarm import names
from tokenswarm.analysis.findings import threshold_text
from tokenswarm.analysis.samples import prune_short_columns, short_text
from tokenswarm.analysis.stats import min_samples_for
from tokenswarm.analysis.study_capacity import capacity_lines
from tokenswarm.names import PERCENTILE_KEY


def _x(v: float | None, ci: list[float] | None = None) -> str:
    if v is None:
        return "-"
    s = f"x{v:.2f}"
    return s + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")


def _lat(row: dict[str, Any], metric: str, p: float) -> str:
    name = names.METRICS_BY_NAME[metric].ratio_key(PERCENTILE_KEY[p])
    if row.get(f"{name}_insufficient"):
        return short_text(min_samples_for(p))
    return _x(row.get(name))


def _speed(row: dict[str, Any], name: str) -> str:
    """A speedup with its interval, or ``n<20`` when a run of the cell had too few requests."""
    if row.get("speedup_insufficient"):
        return short_text(int(row.get("requests_needed_count") or min_samples_for(50.0)))
    return _x(row[name], row[f"{name}_ci"])


def _goodput(row: dict[str, Any]) -> str:
    """Goodput ratio, interval and good requests per run; ``n<20`` below its need; ``-`` without thresholds."""
    if not row.get("goodput_thresholds"):
        return "-"
    if row.get("goodput_insufficient"):
        return short_text(min_samples_for(50.0))
    if row.get("goodput_ratio") is None:
        return "-"
    n = f"{min(row['goodput_baseline_good_requests_count'])}/{min(row['goodput_candidate_good_requests_count'])}"
    return _x(row["goodput_ratio"], row.get("goodput_ratio_ci")) + f" (n {n})"


def _n(row: dict[str, Any]) -> str:
    return f"{min(row['baseline_requests_count'])}/{min(row['candidate_requests_count'])}"


def _verdict(row: dict[str, Any]) -> str:
    if row.get("suspect"):
        return f"SUSPECT: generator overloaded ({', '.join(row['suspect_runs'])})"
    return str(row["verdict"])


def _cost(row: dict[str, Any]) -> str:
    """The resource sentence on the all-tasks row of a load (the GPU is shared by the tasks)."""
    return (row.get("resource_summary_text") or "-") if row["task"] == "all" else ""


def _load(row: dict[str, Any]) -> str:
    prefix = "c" if row["load_kind"] == "concurrency" else "r"
    return f"{prefix}{row['load']:g}"


HEADERS = ["task", "load", "ok requests base/cand", "speedup (per-req tok/s)", "aggregate tok/s", "TTFT p50",
           "TPOT p50", "TPOT p95", "E2E p95", "E2E p99", "goodput", "acc. len", "GPU cost", "verdict"]
#: What the n column counts (printed under every verdict table).
N_CAPTION = ("ok requests: successful requests in the step's steady window, the fewest of any round's run "
             "(baseline/candidate)")


def verdict_rows(summary: dict[str, Any], arm: str) -> list[list[str]]:
    """Table rows of one candidate arm."""
    rows = []
    for r in summary["verdict"]:
        if r["arm"] != arm:
            continue
        acc = r.get("mean_accepted_length")
        rows.append([r["task"], _load(r), _n(r), _speed(r, "speedup"), _speed(r, "aggregate_speedup"),
                     _lat(r, "ttft", 50), _lat(r, "tpot", 50), _lat(r, "tpot", 95), _lat(r, "e2e", 95),
                     _lat(r, "e2e", 99), _goodput(r), "-" if acc is None else f"{acc:.2f}", _cost(r), _verdict(r)])
    return rows


def verdict_table(summary: dict[str, Any], arm: str) -> tuple[list[str], list[list[str]], list[str]]:
    """One arm's verdict table without its noise: columns short in every row, and the goodput and
    GPU-cost columns when nothing fills them, are left out; the notes say what and why."""
    headers, rows, note = prune_short_columns(list(HEADERS), verdict_rows(summary, arm), keep=3)
    notes = [note] if note else []
    for col, why in (("goodput", "no per-request SLO thresholds in the scenario (goodput undefined)"),
                     ("GPU cost", "no GPU exporter in the runs (add one to target.extra_metrics)")):
        if col in headers:
            i = headers.index(col)
            if all(r[i] in ("-", "") for r in rows):
                headers = headers[:i] + headers[i + 1:]
                rows = [r[:i] + r[i + 1:] for r in rows]
                notes.append(f"Left out: {col}, {why}.")
    return headers, rows, notes


def goodput_caption(summary: dict[str, Any], arm: str) -> str | None:
    """What goodput counts: its thresholds (per task when they differ)."""
    seen: dict[str, str] = {}
    for r in summary["verdict"]:
        if r["arm"] == arm and r.get("goodput_thresholds"):
            seen.setdefault(threshold_text(r["goodput_thresholds"]), r["task"])
    if not seen:
        return None
    return ("goodput: requests/s that succeeded within " + "; ".join(
        f"{t} ({task})" if len(seen) > 1 else t for t, task in seen.items())
        + "; ratio candidate/baseline with its 95 % interval and (n good requests per run, fewest, base/cand)")


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
        headers, rows, notes = verdict_table(summary, arm)
        lines += ["", f"{arm} vs {summary['conditions']['baseline_arm']} "
                      "(ratios candidate/baseline, 95 % interval over rounds):",
                  _table(headers, rows), N_CAPTION]
        cap = goodput_caption(summary, arm)
        lines += ([cap] if cap else []) + notes
    cross = _crossover_lines(summary)
    if cross:
        lines += ["", "crossover (per-request speedup):"] + [f"  {c}" for c in cross]
    capacity = capacity_lines(summary.get("capacity"))
    if capacity:
        lines += [""] + capacity
    for c in summary["consistency"]:
        rate = c["exact_match_rate"]
        lines.append(f"outputs of {c['arm']}: " + ("not compared" if rate is None else
                                                   f"{rate:.1%} identical over {c['judged_pairs_count']} pairs")
                     + ("  !! GREEDY OUTPUTS CHANGED" if c["greedy_divergence"] else ""))
    lines += observability_lines(summary)
    lines += [f"!  {n}" for n in summary["notes"] + summary["unmatched"]]
    lines += [f"!! failed: round {f['round']}, arm {f['arm']}: {f['message'].splitlines()[0]}"
              for f in summary["failures"]]
    return "\n".join(lines)


def _md_table(headers: list[str], rows: list[list[str]]) -> str:
    esc = [[c.replace("|", "\\|") for c in r] for r in rows]
    return "\n".join(["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
                     + ["| " + " | ".join(r) + " |" for r in esc])


def _by_model_lines(rows: list[dict[str, Any]] | None) -> list[str]:
    """The per-model verdict (a study whose requests asked for several models), as Markdown."""
    if not rows:
        return []

    def num(v: float | None, ci: list[float] | None = None) -> str:
        if v is None:
            return "-"
        return f"{v:.2f}" + (f" [{ci[0]:.2f}, {ci[1]:.2f}]" if ci else "")

    table = [[r["arm"], r["model"], f"{r['load']:g}", num(r["speedup"], r["speedup_ci"]),
              num(r["aggregate_speedup"], r["aggregate_speedup_ci"]), num(r["ttft_p50_ratio"]),
              num(r["tpot_p50_ratio"]), num(r["mean_accepted_length"]), r["verdict"]] for r in rows]
    return ["## Per model", "", "All tasks together, per model the requests asked for; acceptance from the "
            "per-request metrics only.", "",
            _md_table(["arm", "model", "load", "speedup", "aggregate speedup", "TTFT p50 ratio", "TPOT p50 ratio",
                       "mean accepted length", "verdict"], table), ""]


def report_markdown(summary: dict[str, Any], images: list[str]) -> str:
    """The study report as Markdown: conditions, verdict tables, curves, rules, variability, acceptance."""
    b = ["# Study verdict", ""]
    if not summary["complete"]:
        b += ["**Incomplete study**: some arm-rounds failed or did not run; only finished rounds are used.", ""]
    b += ["## Conditions", ""] + [f"- {ln.strip()}" for ln in conditions_lines(summary)] + [""]
    for arm in _arms(summary):
        headers, rows, notes = verdict_table(summary, arm)
        cap = goodput_caption(summary, arm)
        b += [f"## {arm} vs {summary['conditions']['baseline_arm']}", "",
              "Ratios are candidate / baseline; `[low, high]` is the 95 % interval over rounds; `n<N` means too "
              "few samples for that figure (no number is given). " + N_CAPTION + ".", "",
              _md_table(headers, rows), ""] + [f"- {n}" for n in ([cap] if cap else []) + notes] + [""]
        b += resource_section(summary, arm)
    for img in images:
        b += [f"![speedup vs load]({img})", ""]
    b += _by_model_lines(summary.get("by_model"))
    cross = _crossover_lines(summary)
    if cross:
        b += ["## Crossover", ""] + [f"- {c}" for c in cross] + [""]
    capacity = capacity_lines(summary.get("capacity"))
    if capacity:
        b += ["## Capacity under SLO", "", capacity[0], ""] + [f"- {ln.strip()}" for ln in capacity[1:]] + [""]
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
    b += observability_section(summary)
    m = summary["methods"]
    b += ["## Method", "", f"- within a run: {m['within_run']}", f"- over rounds: {m['over_rounds']}",
          f"- {m['sample_size_guard']}", f"- {m['bootstrap_replicates']} replicates, seed {m['seed']}", ""]
    return "\n".join(b)


def _hist_text(hist: list[dict[str, int]]) -> str:
    total = sum(h["chunks_count"] for h in hist)
    if not total:
        return "-"
    return " ".join(f"{h['tokens_per_step_count']}:{h['chunks_count'] / total:.0%}" for h in hist)


def _gib(mib: float | None) -> str:
    return "-" if mib is None else f"{mib / 1024.0:.1f}"


def _num(v: float | None, digits: int = 3) -> str:
    return "-" if v is None else f"{v:.{digits}g}"


def _ratio_or_short(row: dict[str, Any], name: str) -> str:
    """A token-based resource ratio, or ``n<20`` when the cell's speedup was withheld."""
    if row.get("speedup_insufficient"):
        return short_text(int(row.get("requests_needed_count") or min_samples_for(50.0)))
    return _x(row.get(name))


def resource_section(summary: dict[str, Any], arm: str) -> list[str]:
    """Resource cost per load (all tasks: the GPU is shared): each side's figures, deltas, ratios."""
    base = summary["conditions"]["baseline_arm"]
    rows = [r for r in summary["verdict"] if r["arm"] == arm and r["task"] == "all" and r.get("resources_observed")]
    if not rows:
        return []
    table = [[_load(r), f"{_gib(r['baseline_gpu_memory_used_mib_max'])} / {_gib(r['candidate_gpu_memory_used_mib_max'])}",
              f"{_num(r['baseline_gpu_power_w_mean'])} / {_num(r['candidate_gpu_power_w_mean'])}",
              f"{_num(r['baseline_output_tokens_per_joule'])} / {_num(r['candidate_output_tokens_per_joule'])}",
              _ratio_or_short(r, "output_tokens_per_joule_ratio"), _ratio_or_short(r, "cost_per_1m_good_output_tokens_ratio"),
              r.get("resource_summary_text") or "-"] for r in rows]
    return [f"### Resource cost: {arm} vs {base}", "",
            "Per load, all tasks (the GPU is shared): means over rounds of each arm's runs, "
            f"{base} / {arm}. Memory is the largest reading in the steady window; power the mean per GPU.", "",
            _md_table(["load", "GPU memory max GiB", "power W", "tokens per joule", "tokens/J ratio",
                       "$/1M good tok ratio", "speedup for its cost"], table), ""]


def observability_lines(summary: dict[str, Any]) -> list[str]:
    """One line per arm: how many of the signals the method asks for its server exposes."""
    out = []
    for o in summary.get("observability") or []:
        sig = o["signals"]
        applicable = [x for x in sig if x["exposed"] is not None]
        missing = [x["signal"] for x in applicable if not x["exposed"]]
        na = len(sig) - len(applicable)
        out.append(f"observability of {o['arm']}: {len(applicable) - len(missing)}/{len(applicable)} signals exposed"
                   + (f" (missing: {', '.join(missing)})" if missing else "")
                   + (f"; {na} speculative signal(s) not applicable (no speculation)" if na else ""))
    return out


def observability_section(summary: dict[str, Any]) -> list[str]:
    """The observability audit per arm: each signal exposed (by which metric) or missing."""
    obs = summary.get("observability") or []
    if not obs:
        return []
    arms = [o["arm"] for o in obs]
    signals = [x["signal"] for x in obs[0]["signals"]]
    by = {(o["arm"], x["signal"]): x for o in obs for x in o["signals"]}
    def mark(a: str, sig: str) -> str:
        x = by.get((a, sig), {})
        if x.get("exposed") is None and x:
            return "n/a (no speculation)"
        return str(x.get("metric") or "yes") if x.get("exposed") else "MISSING"

    rows = [[sig.replace("_", " ")] + [mark(a, sig) for a in arms] for sig in signals]
    b = ["## Observability audit per arm", "",
         "Which of the signals the method asks for each arm's server exposes on /metrics (the metric, or MISSING).",
         "", _md_table(["signal"] + arms, rows), ""]
    derived = {x["signal"]: x["derived_instead"] for o in obs for x in o["signals"]
               if not x["exposed"] and x.get("derived_instead")}
    if derived:
        b += ["Missing signals and what tokenswarm derives instead:", ""]
        b += [f"- {k.replace('_', ' ')}: {v}" for k, v in derived.items()] + [""]
    return b


def _by_arm_table(summary: dict[str, Any]) -> list[str]:
    """With several candidate arms (e.g. K = 2, 4, 8, or draft vs n-gram): speedup per arm at each load."""
    arms = _arms(summary)
    if len(arms) < 2:
        return []
    cells = {(r["arm"], r["load"]): r for r in summary["verdict"] if r["task"] == "all"}
    loads = sorted({load for _a, load in cells})
    rows = [[f"{load:g}"] + [(short_text(int(cells[(a, load)]["requests_needed_count"]))
                              if cells[(a, load)].get("speedup_insufficient") else _x(cells[(a, load)]["speedup"]))
                             if (a, load) in cells else "-" for a in arms]
            for load in loads]
    return ["## Speedup by arm (all tasks, per-request tok/s)", "", _md_table(["load"] + arms, rows), ""]


def speedup_curves_png(summary: dict[str, Any]) -> bytes | None:
    """Speedup (per-request tok/s) vs load per task and arm, with the 95 % interval as a band."""
    from tokenswarm.analysis.plots import _plt, _png  # matplotlib (plots): only when a chart is drawn

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
