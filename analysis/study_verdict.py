"""The verdict rows of a study: per candidate arm and cell, its speedup over the baseline over
the rounds both ran, the notes a reader must not miss, where speculation stops paying, and the
same per model when the requests asked for several.

A cell fed by an overloaded generator is *suspect*: its verdict says so, whatever the numbers
say (:data:`analysis.study_rounds.SUSPECT`).
"""

from __future__ import annotations

import math
from functools import partial
from typing import Any

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.findings import goodput_fields, latency_regressions
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.slo import SloSpec
from tokenswarm.analysis.study_cells import LATENCY, N_BOOT, CellKey, cell_order, model_cells, models_of
from tokenswarm.analysis.study_load import StudyRuns
from tokenswarm.analysis.study_rounds import (
    MIN_CELL_REQUESTS,
    SUSPECT,
    VERDICT_RULES,
    latency_ratio,
    mean,
    ratio_pair,
    verdict_of,
)
from tokenswarm.analysis.study_runs import RunExtras, cell_resources
from tokenswarm.names import PERCENTILE_KEY

LATENCY_PERCENTILES = (50.0, 95.0, 99.0)


def _mark_suspect(row: dict[str, Any], runs: list[tuple[str, int]]) -> None:
    """A cell fed by an overloaded generator: its verdict says so, whatever the numbers say."""
    row["suspect"] = bool(runs)
    row["suspect_runs"] = [f"{a} round {r}" for a, r in runs]
    if runs:
        row["verdict_if_trusted"] = row["verdict"]
        row["verdict"] = row["aggregate_verdict"] = SUSPECT
        row["verdict_rule"] = VERDICT_RULES[SUSPECT]


def suspect_notes(extras: dict[tuple[str, int], RunExtras], verdict: list[dict[str, Any]]) -> list[str]:
    """One note per overloaded run: why, and how many cells it makes suspect."""
    out = []
    for (arm, r), x in sorted(extras.items()):
        if not x.overloaded:
            continue
        label = f"{arm} round {r}"
        hit = [v for v in verdict if label in v.get("suspect_runs", [])]
        where = "the whole run" if x.overloaded_steps is None else "step(s) " + ", ".join(x.overloaded_steps)
        out.append(f"GENERATOR OVERLOADED in {label} ({where}): {x.reason()} -- {len(hit)} cell(s) it feeds are "
                   "suspect; rerun with more generator CPU (--workers) or less load")
    return out


def _verdict_row(data: StudyRuns, arm: str, key: CellKey, spec: SloSpec | None) -> dict[str, Any]:
    """One cell's verdict: the candidate against the baseline over the rounds both ran it."""
    base_arm, cells, extras, rng = data.base_arm, data.cells, data.extras, data.rng
    used = [r for r in data.rounds(arm) if key in cells[(arm, r)] and key in cells[(base_arm, r)]]
    pairs = [(cells[(arm, r)][key], cells[(base_arm, r)][key]) for r in used]
    cand_c, base_c = [p[0] for p in pairs], [p[1] for p in pairs]
    enough = min(c.n_ok for c in cand_c + base_c) >= MIN_CELL_REQUESTS
    # below the median's need there is no ratio and no interval to print (analysis.samples)
    sp = ratio_pair(cand_c, base_c, "tps_median", "tps_reps", rng) if enough else None
    ag = ratio_pair(cand_c, base_c, "agg_tps", "agg_reps", rng) if enough else None
    row: dict[str, Any] = {
        "arm": arm, "task": key[2], "load": key[1], "load_kind": key[0], "rounds": len(pairs),
        "baseline_requests_count": [c.n_ok for c in base_c], "candidate_requests_count": [c.n_ok for c in cand_c],
        "speedup": sp["point"] if sp else None, "speedup_ci": sp["ci"] if sp else None,
        "speedup_per_round": sp["per_round"] if sp else None,
        "speedup_per_round_ci": sp["per_round_ci"] if sp else None,
        "aggregate_speedup": ag["point"] if ag else None, "aggregate_speedup_ci": ag["ci"] if ag else None,
        "aggregate_speedup_per_round": ag["per_round"] if ag else None,
        "rounds_disagree": bool(sp and sp["rounds_disagree"]),
        "speedup_insufficient": not enough, "requests_needed_count": MIN_CELL_REQUESTS,
    }
    row["verdict"] = verdict_of(sp, len(pairs), enough)
    row["verdict_rule"] = VERDICT_RULES[row["verdict"]]
    row["aggregate_verdict"] = verdict_of(ag, len(pairs), enough)
    for metric in LATENCY:
        for p in LATENCY_PERCENTILES:
            comb, short = latency_ratio(cand_c, base_c, metric, p, rng, data.n_boot)
            name = names.METRICS_BY_NAME[metric].ratio_key(PERCENTILE_KEY[p])
            row[name] = comb["point"] if comb else None
            row[f"{name}_ci"] = comb["ci"] if comb else None
            row[f"{name}_insufficient"] = short
    row.update(goodput_fields(spec, key[2], [(c.n_good, b.n_good) for c, b in pairs],
                              partial(ratio_pair, cand_c, base_c, "goodput_rps", "good_reps", rng)))
    row["latency_regressions"] = latency_regressions(row, LATENCY_PERCENTILES)
    row.update(cell_resources([extras[(arm, r)] for r in used], [extras[(base_arm, r)] for r in used],
                              (key[0], key[1]), row["aggregate_speedup"], enough))
    _mark_suspect(row, [(a, r) for r in used for a in (base_arm, arm) if extras[(a, r)].suspect(key[0], key[1])])
    row["mean_accepted_length"] = mean([c.accept_len for c in cand_c])
    row["acceptance_source"] = next((c.accept_source for c in cand_c if c.accept_source), None)
    row["acceptance_rate"] = mean([c.accept_rate for c in cand_c])
    return row


def _row_notes(row: dict[str, Any]) -> list[str]:
    """What a verdict row says that a reader must not miss: slower, lower throughput, a latency regression."""
    where = f"arm {row['arm']}, {row['task']} at {row['load_kind']} {row['load']:g}"
    notes = []
    if row["verdict"] == "slower":
        notes.append(f"{where}: speculation does not pay here "
                     f"(per-request speedup x{row['speedup']:.2f}, 95 % interval below 1)")
    if row["aggregate_verdict"] == "slower":
        notes.append(f"{where}: aggregate throughput is lower (x{row['aggregate_speedup']:.2f}, 95 % interval below 1)")
    if row["latency_regressions"] and not row["suspect"]:
        notes.append(f"{where}: latency regression beside the speedup: "
                     + "; ".join(row["latency_regressions"]) + " (candidate / baseline, 95 % interval above 1)")
    return notes


def arm_verdict(data: StudyRuns, arm: str, spec: SloSpec | None, notes: list[str],
                unmatched: list[str]) -> list[dict[str, Any]]:
    """A candidate arm's verdict rows, one per cell both it and the baseline ran; the cells only
    one side ran go to ``unmatched``, cells too small for a verdict to one note."""
    rounds, base_arm = data.rounds(arm), data.base_arm
    base_keys = {k for r in rounds for k in data.cells[(base_arm, r)]}
    cand_keys = {k for r in rounds for k in data.cells[(arm, r)]}
    for k in sorted(base_keys ^ cand_keys):
        side = "baseline" if k in base_keys else f"arm {arm}"
        unmatched.append(f"{k[2]} at {k[0]} {k[1]:g}: only {side} has this step/task; no ratio")
    rows: list[dict[str, Any]] = []
    short_cells: list[str] = []
    for key in sorted(base_keys & cand_keys, key=cell_order):
        row = _verdict_row(data, arm, key, spec)
        rows.append(row)
        notes.extend(_row_notes(row))
        if row["speedup_insufficient"]:
            short_cells.append(f"{key[2]} {'c' if key[0] == 'concurrency' else 'r'}{key[1]:g} "
                               f"({min(row['baseline_requests_count'])}/{min(row['candidate_requests_count'])})")
    if short_cells:  # one note per arm, not one per cell
        notes.append(f"arm {arm}: {len(short_cells)} cell(s) with too few requests for a verdict "
                     f"({MIN_CELL_REQUESTS} successful requests needed in every run; fewest base/cand): "
                     + ", ".join(short_cells))
    return rows


def crossovers(verdict: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per candidate arm and task: the load at which speculation stops paying (speedup crosses 1).

    Between the last load with speedup > 1 and the first with speedup <= 1 the crossing is
    interpolated linearly in log(load). ``None`` when it pays at every load (``pays_at_all_loads``)
    or at none (``never_pays``).
    """
    out = []
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for row in verdict:
        groups.setdefault((row["arm"], row["task"], row["load_kind"]), []).append(row)
    for (arm, task, kind), rows in groups.items():
        for metric in ("speedup", "aggregate_speedup"):
            pts = sorted((r["load"], r[metric]) for r in rows if r[metric] is not None)
            entry: dict[str, Any] = {"arm": arm, "task": task, "load_kind": kind, "metric": metric, "crossover_load": None,
                     "pays_at_all_loads": False, "never_pays": False}
            if not pts:
                continue
            if pts[0][1] <= 1.0:
                entry["never_pays"] = True
            else:
                for (l0, s0), (l1, s1) in zip(pts, pts[1:]):
                    if s0 > 1.0 >= s1:
                        x0, x1 = math.log(l0), math.log(l1)
                        entry["crossover_load"] = float(math.exp(x0 + (x1 - x0) * (s0 - 1.0) / (s0 - s1)))
                        break
                else:
                    entry["pays_at_all_loads"] = True
            out.append(entry)
    return out


def model_verdict(runs: dict[tuple[str, int], Run], base_arm: str, candidates: list[str],
                  rng: np.random.Generator, n_boot: int = N_BOOT) -> list[dict[str, Any]] | None:
    """Per candidate arm, model and load: the speedup over the baseline, as the per-task verdict.

    ``None`` unless some run's requests asked for more than one model (a LoRA split): then the
    per-task verdict mixes the models, and this says how each fared. Acceptance comes from the
    per-request metrics only (the server's counters are not split by model).
    """
    if not any(len(models_of(run)) > 1 for run in runs.values()):
        return None
    cells = {key: model_cells(run, rng, n_boot) for key, run in runs.items()}
    rows: list[dict[str, Any]] = []
    for arm in candidates:
        rounds = sorted(r for a, r in cells if a == arm and (base_arm, r) in cells)
        keys = {k for r in rounds for k in cells[(arm, r)]} & {k for r in rounds for k in cells[(base_arm, r)]}
        for key in sorted(keys, key=lambda k: (k[2], k[0], k[1])):
            pairs = [(cells[(arm, r)][key], cells[(base_arm, r)][key]) for r in rounds
                     if key in cells[(arm, r)] and key in cells[(base_arm, r)]]
            cand_c, base_c = [p[0] for p in pairs], [p[1] for p in pairs]
            enough = min(c.n_ok for c in cand_c + base_c) >= MIN_CELL_REQUESTS
            sp = ratio_pair(cand_c, base_c, "tps_median", "tps_reps", rng)
            ag = ratio_pair(cand_c, base_c, "agg_tps", "agg_reps", rng)
            row: dict[str, Any] = {
                "arm": arm, "model": key[2], "load": key[1], "load_kind": key[0], "rounds": len(pairs),
                "baseline_requests_count": [c.n_ok for c in base_c], "candidate_requests_count": [c.n_ok for c in cand_c],
                "speedup": sp["point"] if sp else None, "speedup_ci": sp["ci"] if sp else None,
                "aggregate_speedup": ag["point"] if ag else None, "aggregate_speedup_ci": ag["ci"] if ag else None,
                "verdict": verdict_of(sp, len(pairs), enough),
                "mean_accepted_length": mean([c.accept_len for c in cand_c]),
            }
            for metric in ("ttft", "tpot"):
                comb, short = latency_ratio(cand_c, base_c, metric, 50.0, rng, n_boot)
                name = names.METRICS_BY_NAME[metric].ratio_key("p50")
                row[name] = comb["point"] if comb else None
                row[f"{name}_insufficient"] = short
            rows.append(row)
    return rows
