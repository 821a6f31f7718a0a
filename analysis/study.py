"""The study report: candidate arms against the baseline, per task and load step, over rounds.

Inputs are the run directories of a study (``tokenswarm study``) and its ``study.json``, read
by :mod:`analysis.study_load`. Each run's numbers per cell are :mod:`analysis.study_cells`';
:mod:`analysis.study_rounds` combines them over rounds into a verdict (the docs page
``studies.md`` says the same), and :mod:`analysis.study_verdict` makes the verdict rows. This
module puts the summary together (the conditions, each arm's variability and acceptance,
output consistency, capacity) and writes the report.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tokenswarm.analysis.compare import consistency
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.slo import SloSpec, scenario_slos
from tokenswarm.analysis.stats import percentiles_sorted
from tokenswarm.analysis.study_capacity import study_capacity
from tokenswarm.analysis.study_cells import N_BOOT, Cell, cell_order, sorted_values
from tokenswarm.analysis.study_load import StudyRuns, load_manifest, load_study_runs
from tokenswarm.analysis.study_rounds import LEVEL, VERDICT_RULES, cv, histogram, mean
from tokenswarm.analysis.study_runs import arm_observability
from tokenswarm.analysis.study_verdict import arm_verdict, crossovers, model_verdict, suspect_notes
from tokenswarm.analysis.summary import clean
from tokenswarm.analysis.verdict_table import report_markdown, speedup_curves_png, verdict_text
from tokenswarm.redact import redact


def _conditions(m: dict[str, Any], runs: dict[tuple[str, int], Run]) -> dict[str, Any]:
    """Where the conclusion holds: model, commands, machine, traffic, sampling, load, rounds."""
    first = next(iter(runs.values()))
    sc = first.manifest.scenario_dict
    traffic = sc.get("traffic") or {}
    models = {}
    for e in m["arm_rounds"]:
        data = (e.get("models") or {}).get("data") if isinstance(e.get("models"), dict) else None
        if data and e["arm"] not in models:
            models[e["arm"]] = [{k: x.get(k) for k in ("id", "owned_by", "max_model_len", "root") if k in x}
                                for x in data[:3]]
    lengths = []
    tasks = first.categories["task"]
    for code, task in enumerate(tasks):
        sel = first["task"] == code
        pt, ot = sorted_values(first["prompt_tokens"][sel]), sorted_values(first["output_tokens"][sel])
        if pt.size:
            lengths.append({"task": task, "requests_count": int(sel.sum()),
                            "prompt_tokens_p50": float(percentiles_sorted(pt, [50.0])[0]),
                            "prompt_tokens_max": float(pt[-1]),
                            "output_tokens_p50": float(percentiles_sorted(ot, [50.0])[0]) if ot.size else None,
                            "output_tokens_max": float(ot[-1]) if ot.size else None})
    load = sc.get("load") or {}
    return {
        "scenario": sc.get("name"), "scenario_path": m.get("scenario_path"),
        "model": first.manifest.target.model, "served_models": models,
        "arms": m.get("arms"), "baseline_arm": m.get("baseline_arm"), "overrides": m.get("overrides"),
        "tokenswarm_version": m.get("tokenswarm_version"), "machine": m.get("machine"),
        "load_mode": load.get("mode"), "load_steps": load.get("steps"), "warmup_s": load.get("warmup_s"),
        "step_duration_s": load.get("step_duration_s"), "rounds_count": m.get("rounds_count"),
        "order": m.get("order"), "task_draw": traffic.get("task_draw", "per_user"),
        "sampling": {name: c.get("sampling") for name, c in (traffic.get("classes") or {}).items()},
        "lengths_observed": lengths,
        "lengths_source": f"records of {first.name} (baseline, first round)",
    }


def _goodput_spec(run: Run) -> SloSpec | None:
    """The scenario's SLOs that define a good request, ``None`` when unreadable."""
    try:
        return scenario_slos(run.manifest)
    except ValueError:
        return None


#: How the study summary's figures are made (its ``methods``, beside the bootstrap's size and seed).
METHODS = {
    "within_run": "percentile bootstrap per run (medians/percentiles by order statistics, aggregate "
                  "throughput by 1-second bins of completed tokens)",
    "over_rounds": "hierarchical bootstrap: rounds resampled with replacement, each with its within-run "
                   "ratio replicate; geometric mean; 2.5-97.5 % percentiles",
    "sample_size_guard": "a p-th percentile needs n >= 10/(1-p/100) successful requests in every run; "
                         "a speedup (and goodput) needs the median's 20 in every run; below that no ratio "
                         "or interval is given",
    "suspect": "a cell is suspect when a run feeding it had its generator overloaded while the cell's step "
               "was measured (the per-run report's GENERATOR OVERLOADED); its verdict says so",
    "resources": "per step (all tasks share the GPU): means over rounds of each arm's GPU memory (max), "
                 "power (mean), output tokens per joule and USD per 1M good output tokens; deltas and "
                 "ratios candidate vs baseline",
    "goodput": "good requests/s (successful and within the per-request thresholds); judged like the "
               "speedup, left out below 20 good requests in a run or without thresholds",
}


def _p50(c: Cell, metric: str) -> float | None:
    return float(percentiles_sorted(c.lat[metric][1], [50.0])[0]) if c.lat[metric][0] else None


def _arm_cells(data: StudyRuns, arm: str, notes: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One arm's variability over rounds and (when it speculated) its acceptance, per cell; a
    chunk-size estimate that disagrees with the per-request metrics is noted."""
    variability: list[dict[str, Any]] = []
    acceptance: list[dict[str, Any]] = []
    rounds = data.rounds(arm)
    speculated = any(data.extras[(arm, r)].speculated for r in rounds)
    for key in sorted({k for r in rounds for k in data.cells[(arm, r)]}, key=cell_order):
        have = [data.cells[(arm, r)][key] for r in rounds if key in data.cells[(arm, r)]]
        variability.append({
            "arm": arm, "task": key[2], "load": key[1], "rounds": len(have),
            "request_output_tps_p50_cv": cv([c.tps_median for c in have]),
            "output_tokens_per_s_cv": cv([c.agg_tps for c in have]),
            "ttft_p50_cv": cv([_p50(c, "ttft") for c in have]),
            "tpot_p50_cv": cv([_p50(c, "tpot") for c in have]),
        })
        if not speculated:
            continue  # an arm that never speculated has no acceptance to show
        acceptance.append({"arm": arm, "task": key[2], "load": key[1],
                           "mean_accepted_length": mean([c.accept_len for c in have]),
                           "acceptance_source": next((c.accept_source for c in have if c.accept_source), None),
                           "acceptance_rate": mean([c.accept_rate for c in have]),
                           "chunk_estimate_mean_tokens": mean([c.chunk_estimate for c in have]),
                           "chunk_estimate_reliable": all(c.chunk_reliable for c in have),
                           "accepted_length_histogram": histogram([c.chunk_hist for c in have])})
        req, chunk = mean([c.request_accept_len for c in have]), mean([c.chunk_estimate for c in have])
        if req and chunk and abs(chunk - req) / req > 0.15 and arm != data.base_arm:
            notes.append(f"arm {arm}, {key[2]} at {key[1]:g}: the chunk-size estimate of accepted length "
                         f"({chunk:.2f}) disagrees with the per-request metrics ({req:.2f}); the chunk estimate is "
                         "not reliable here and is not used")
    return variability, acceptance


def _arm_consistency(data: StudyRuns, arm: str, notes: list[str]) -> dict[str, Any]:
    """Do the candidate's outputs match the baseline's, round by round (greedy pairs must)?"""
    pairs_cons = [consistency(data.runs[(data.base_arm, r)], data.runs[(arm, r)]) for r in data.rounds(arm)]
    judged = sum(c["judged_pairs_count"] for c in pairs_cons)
    matched = sum(c["exact_match_count"] for c in pairs_cons)
    firsts = [c["first_divergence_word_index_median_count"] for c in pairs_cons
              if c["first_divergence_word_index_median_count"] is not None]
    out = {"arm": arm, "judged_pairs_count": judged, "exact_match_rate": matched / judged if judged else None,
           "greedy_pairs_count": sum(c["greedy_pairs_count"] for c in pairs_cons),
           "greedy_diverging_count": sum(c["greedy_diverging_count"] for c in pairs_cons),
           "greedy_divergence": any(c["greedy_divergence"] for c in pairs_cons),
           "first_divergence_word_index_median": float(np.median(firsts)) if firsts else None}
    if out["greedy_divergence"]:
        notes.append(f"arm {arm}: GREEDY OUTPUTS CHANGED in {out['greedy_diverging_count']} of "
                     f"{out['greedy_pairs_count']} temperature-0 pairs: the candidate changes the output")
    return out


def analyse_study(study_dir: str | Path, n_boot: int = N_BOOT, seed: int = 0) -> dict[str, Any]:
    """The study summary (the ``summary.json`` of the study report)."""
    study_dir = Path(study_dir)
    m = load_manifest(study_dir)
    arms = [a["name"] for a in m["arms"]]
    data = load_study_runs(study_dir, m, np.random.default_rng(seed), n_boot)
    base_arm, runs, extras = data.base_arm, data.runs, data.extras
    candidates = [a for a in arms if a != base_arm]
    first_base = (base_arm, data.rounds(base_arm)[0]) if data.rounds(base_arm) else None
    spec = _goodput_spec(runs[first_base]) if first_base in runs else None
    notes: list[str] = []
    unmatched: list[str] = []
    variability: list[dict[str, Any]] = []
    acceptance: list[dict[str, Any]] = []
    for arm in arms:
        var, acc = _arm_cells(data, arm, notes)
        variability += var
        acceptance += acc
    verdict: list[dict[str, Any]] = []
    cons_out: list[dict[str, Any]] = []
    for arm in candidates:
        if not data.rounds(arm):
            notes.append(f"arm {arm}: no round finished together with the baseline; not in the verdict")
            continue
        verdict += arm_verdict(data, arm, spec, notes, unmatched)
        cons_out.append(_arm_consistency(data, arm, notes))
    notes += suspect_notes(extras, verdict)
    return {
        "study_dir": str(study_dir),
        "complete": bool(m.get("complete")),
        "failures": m.get("failures", []),
        "conditions": _conditions(m, runs),
        "verdict": verdict,
        "crossover": crossovers(verdict),
        "capacity": study_capacity(runs, arms, base_arm),
        "variability": variability,
        "acceptance": acceptance,
        "consistency": cons_out,
        "observability": [{"arm": a, "signals": arm_observability([extras[k] for k in sorted(extras) if k[0] == a])}
                          for a in arms if any(k[0] == a for k in extras)],
        "generator_health": [{"arm": a, "round": r, "overloaded": x.overloaded, "overloaded_steps": x.overloaded_steps,
                              "reason": x.reason() if x.overloaded else None} for (a, r), x in sorted(extras.items())],
        "notes": notes,
        "unmatched": unmatched,
        "verdict_rules": VERDICT_RULES,
        "by_model": model_verdict(runs, base_arm, candidates, data.rng, n_boot),  # None unless several models
        "methods": {"bootstrap_replicates": n_boot, "seed": seed, "confidence_level": LEVEL, **METHODS},
    }


def write_study_report(study_dir: str | Path, n_boot: int = N_BOOT, seed: int = 0) -> tuple[dict[str, Path], str]:
    """Write ``STUDY_DIR/report/`` (summary.json, report.md, speedup curves) and return the terminal text."""
    study_dir = Path(study_dir)
    summary = analyse_study(study_dir, n_boot, seed)
    out = study_dir / "report"
    out.mkdir(parents=True, exist_ok=True)
    files = {"summary.json": out / "summary.json", "report.md": out / "report.md"}
    files["summary.json"].write_bytes(redact(orjson.dumps(clean(summary), option=orjson.OPT_INDENT_2)))
    images = []
    try:
        png = speedup_curves_png(summary)
        if png:
            (out / "speedup_curves.png").write_bytes(png)
            files["speedup_curves.png"] = out / "speedup_curves.png"
            images.append("speedup_curves.png")
    except ImportError:
        pass
    files["report.md"].write_text(redact(report_markdown(summary, images)), encoding="utf-8")
    return files, verdict_text(summary)
