"""The study report: candidate arms against the baseline, per task and load step, over rounds.

Inputs are the run directories of a study (``tokenswarm study``) and its ``study.json``. Only
arm-rounds marked done are used; a candidate's round counts when the baseline's same round is
done too (the interleaved order puts them next to each other in time).

Per run, step (matched by kind and load value) and task (and ``all``), from steady-window
records only: the median per-request output tokens/s, the aggregate output tokens/s, TTFT,
TPOT and E2E p50/p95/p99, goodput (requests meeting the scenario's per-request SLOs per
second), acceptance (per-request metrics, else server counters, else chunk sizes).

Statistics (the docs page ``studies.md`` says the same):

* Within a run: 1,000 bootstrap replicates (medians and percentiles by the order-statistic
  form of :mod:`analysis.stats`, aggregate throughput by resampling 1-second bins of
  completed tokens, as ``tokenswarm compare``). Per round: ratio replicates = candidate
  replicate / baseline replicate.
* Over rounds (two-stage, hierarchical bootstrap): each combined replicate draws R rounds
  with replacement and, for each drawn round, that round's within-run ratio replicate, and
  takes their geometric mean. Its 2.5-97.5 % percentiles are the 95 % interval: it widens
  with between-round spread (resampling rounds) and within-run noise (the replicates). The
  point estimate is the geometric mean of the per-round ratios.
* Rounds disagree when their per-round 95 % intervals do not all overlap (the largest lower
  bound is above the smallest upper bound): the cell says so instead of a combined number.
* Sample-size guard: a p-th percentile needs n >= 10 / (1 - p/100) successful requests in
  every run of the cell (:func:`analysis.stats.min_samples_for`); otherwise the ratio is
  ``None`` and marked insufficient. A cell whose runs have fewer than 20 successful requests
  (what the median needs) gets the verdict "not enough samples".
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from tokenswarm import names
from tokenswarm.analysis.compare import _binned_throughput_reps, consistency
from tokenswarm.analysis.errors import RunInputError
from tokenswarm.analysis.findings import goodput_fields, latency_regressions
from tokenswarm.analysis.loader import Run, load_run
from tokenswarm.analysis.per_request import derived, good_mask
from tokenswarm.analysis.slo import ALL_TASKS, SloSpec, scenario_slos
from tokenswarm.analysis.specdecode import mean_acceptance, spec_decode_tables
from tokenswarm.analysis.stats import bootstrap_percentiles, min_samples_for, percentiles_sorted
from tokenswarm.analysis.step_windows import Window, windows
from tokenswarm.analysis.study_capacity import study_capacity
from tokenswarm.analysis.study_runs import RunExtras, arm_observability, cell_resources, run_extras
from tokenswarm.analysis.summary import clean
from tokenswarm.analysis.verdict_table import report_markdown, speedup_curves_png, verdict_text
from tokenswarm.names import PERCENTILE_KEY
from tokenswarm.redact import redact

N_BOOT = 1000
LEVEL = 0.95
LATENCY = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}
LATENCY_PERCENTILES = (50.0, 95.0, 99.0)
#: The verdict of a cell fed by an overloaded generator (it replaces any other verdict).
SUSPECT = "suspect: generator overloaded"
#: successful requests a run needs in a cell for its median (the verdict's basis): 10 / (1 - 0.5)
MIN_CELL_REQUESTS = min_samples_for(50.0)

VERDICT_RULES = {
    "not enough samples": f"a run of this cell has fewer than {MIN_CELL_REQUESTS} successful requests "
                          "(the median needs 10 / (1 - 0.5))",
    "not reproducible: rounds disagree": "the rounds' 95 % intervals of the speedup do not all overlap",
    "faster, reproducible": "the 95 % interval over >= 2 rounds lies above 1",
    "faster (one round: reproducibility not tested)": "the 95 % interval lies above 1, but only one round ran",
    "slower": "the 95 % interval lies below 1",
    "no significant change": "the 95 % interval contains 1",
    SUSPECT: "a run of this cell had its generator overloaded while this step was measured (the per-run "
             "report says GENERATOR OVERLOADED): the numbers may be the generator's, not the server's; the "
             "verdict it would have had is kept as verdict_if_trusted",
}


@dataclass
class Cell:
    """One run's numbers for one step and task."""

    n_ok: int
    n_all: int
    tps_median: float | None
    tps_reps: np.ndarray | None
    agg_tps: float | None
    agg_reps: np.ndarray | None
    lat: dict[str, tuple[int, np.ndarray]]  #: metric -> (n, sorted values)
    goodput_rps: float | None
    accept_len: float | None
    accept_source: str | None
    accept_rate: float | None
    chunk_estimate: float | None
    chunk_reliable: bool | None
    request_accept_len: float | None
    chunk_hist: dict[int, int]  #: tokens per chunk -> chunks (first chunk excluded; exact counts only)
    step_name: str = ""
    n_good: int | None = None  #: successful requests meeting the per-request SLOs (None: no thresholds)
    good_reps: np.ndarray | None = None  #: bootstrap replicates of good requests/s


def _sorted(v: np.ndarray) -> np.ndarray:
    return np.sort(v[~np.isnan(v)])


def run_cells(run: Run, rng: np.random.Generator, n_boot: int = N_BOOT) -> dict[tuple[str, float, str], Cell]:
    """Every (step kind, load value, task) cell of one run."""
    d = derived(run)
    wins, _notes = windows(run)
    spec_rows = {(r["step_index"], r["task"]): r for r in spec_decode_tables(run, wins)["rows"]}
    try:
        good = good_mask(run, scenario_slos(run.manifest))
    except ValueError:
        good = None
    tasks = run.categories["task"]
    out: dict[tuple[str, float, str], Cell] = {}
    for w in wins:
        if w.target is None:
            continue
        task_names = [ALL_TASKS] + sorted({tasks[c] for c in np.unique(run["task"][w.mask])})
        for task in task_names:
            m = w.mask if task == ALL_TASKS else w.mask & (run["task"] == run.code("task", task))
            out[(str(w.kind), float(w.target), task)] = _cell(run, d, w, m, good, spec_rows.get((w.index, task)),
                                                              rng, n_boot)
    return out


def _cell(run: Run, d: dict[str, np.ndarray], w: Window, m: np.ndarray, good: np.ndarray | None,
          spec: dict[str, Any] | None, rng: np.random.Generator, n_boot: int) -> Cell:
    ok = m & d["ok"]
    n_ok = int(ok.sum())
    tps = _sorted(d["request_output_tps"][ok])
    tps_med = float(percentiles_sorted(tps, [50.0])[0]) if tps.size else None
    tps_reps = bootstrap_percentiles(tps, [50.0], n_boot, rng)[0] if tps.size else None
    tokens = np.nan_to_num(run["output_tokens"][ok], nan=0.0)
    agg = agg_reps = None
    if tokens.size and w.duration_s:
        agg = float(tokens.sum() / w.duration_s)
        agg_reps = _binned_throughput_reps(run, ok, tokens, w.duration_s, n_boot, rng)
    lat = {}
    for name, col in LATENCY.items():
        v = _sorted((d[col] if col == "tpot_ms" else run[col])[ok])
        lat[name] = (int(v.size), v)
    goodput = float((good & m).sum() / w.duration_s) if good is not None and w.duration_s else None
    n_good = good_reps = None
    if good is not None:
        g = good & ok
        n_good = int(g.sum())
        if n_good and w.duration_s:
            good_reps = _binned_throughput_reps(run, g, np.ones(n_good), w.duration_s, n_boot, rng)
    acc, src = mean_acceptance(spec, mark_unreliable=True)
    return Cell(n_ok, int(m.sum()), tps_med, tps_reps, agg, agg_reps, lat, goodput, acc, src,
                None if spec is None else spec.get("request_acceptance_rate"),
                None if spec is None else spec.get("chunk_mean_tokens_per_chunk_tokens"),
                None if spec is None else spec.get("chunk_estimate_reliable"),
                None if spec is None else spec.get("request_mean_acceptance_length_tokens"),
                {int(h["chunk_size_tokens"]): int(h["chunks_count"])
                 for h in (spec or {}).get("tokens_per_chunk_histogram") or []},
                w.name, n_good, good_reps)


# --------------------------------------------------------------------------- combining rounds


def _interval(reps: np.ndarray) -> list[float] | None:
    r = reps[np.isfinite(reps) & (reps > 0)]
    if r.size < 10:
        return None
    a = (1.0 - LEVEL) / 2.0 * 100.0
    lo, hi = np.percentile(r, [a, 100.0 - a])
    return [float(lo), float(hi)]


def combine_rounds(points: list[float], reps: list[np.ndarray], rng: np.random.Generator) -> dict[str, Any]:
    """Combine per-round ratios (points and within-run replicate arrays) over rounds.

    Returns the geometric-mean point, the hierarchical-bootstrap 95 % interval, the per-round
    intervals and whether the rounds disagree (per-round intervals not all overlapping).
    """
    per_round = [_interval(r) for r in reps]
    logs = np.log(np.vstack([np.where(r > 0, r, np.nan) for r in reps]))  # (R, B)
    n_rounds, n_boot = logs.shape
    pick = rng.integers(0, n_rounds, size=(n_boot, n_rounds))
    drawn = logs[pick, np.arange(n_boot)[:, None]]
    with np.errstate(invalid="ignore"):  # a replicate whose drawn ratios are all undefined stays NaN
        combined = np.exp(np.nansum(drawn, axis=1) / np.sum(~np.isnan(drawn), axis=1))
    known = [iv for iv in per_round if iv is not None]
    disagree = len(known) >= 2 and max(iv[0] for iv in known) > min(iv[1] for iv in known)
    return {"point": float(math.exp(np.mean(np.log(points)))), "ci": _interval(combined),
            "per_round": [float(p) for p in points], "per_round_ci": per_round, "rounds_disagree": bool(disagree)}


def verdict_of(comb: dict[str, Any] | None, rounds: int, enough: bool) -> str:
    """The plain-words verdict of a combined speedup (rules in :data:`VERDICT_RULES`)."""
    if not enough or comb is None or comb["ci"] is None:
        return "not enough samples"
    if comb["rounds_disagree"]:
        return "not reproducible: rounds disagree"
    lo, hi = comb["ci"]
    if lo > 1.0:
        return "faster, reproducible" if rounds >= 2 else "faster (one round: reproducibility not tested)"
    if hi < 1.0:
        return "slower"
    return "no significant change"


def _ratio_pair(cand: list[Cell], base: list[Cell], attr: str, reps_attr: str, rng: np.random.Generator
                ) -> dict[str, Any] | None:
    points, reps = [], []
    for c, b in zip(cand, base):
        pc, pb = getattr(c, attr), getattr(b, attr)
        rc, rb = getattr(c, reps_attr), getattr(b, reps_attr)
        if not pc or not pb or rc is None or rb is None:
            return None
        points.append(pc / pb)
        with np.errstate(divide="ignore", invalid="ignore"):
            reps.append(rc / rb)
    return combine_rounds(points, reps, rng)


def _latency_ratio(cand: list[Cell], base: list[Cell], metric: str, p: float, rng: np.random.Generator,
                   n_boot: int) -> tuple[dict[str, Any] | None, bool]:
    """Combined ratio of a latency percentile; (None, True) when some run has too few samples."""
    need = min_samples_for(p)
    points, reps = [], []
    for c, b in zip(cand, base):
        (nc, vc), (nb, vb) = c.lat[metric], b.lat[metric]
        if nc < need or nb < need:
            return None, True
        pc, pb = percentiles_sorted(vc, [p])[0], percentiles_sorted(vb, [p])[0]
        if not pb:
            return None, False
        points.append(float(pc / pb))
        with np.errstate(divide="ignore", invalid="ignore"):
            reps.append(bootstrap_percentiles(vc, [p], n_boot, rng)[0] / bootstrap_percentiles(vb, [p], n_boot, rng)[0])
    return combine_rounds(points, reps, rng), False


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return float(np.mean(v)) if v else None


def _histogram(hists: list[dict[int, int]]) -> list[dict[str, int]]:
    """Tokens-per-chunk histograms summed over rounds: the distribution of tokens emitted per step."""
    total: dict[int, int] = {}
    for h in hists:
        for k, v in h.items():
            total[k] = total.get(k, 0) + v
    return [{"tokens_per_step_count": k, "chunks_count": total[k]} for k in sorted(total)]


def cv(values: list[float | None]) -> float | None:
    """Coefficient of variation across rounds (sample sd / mean); ``None`` below two rounds."""
    v = np.array([x for x in values if x is not None], dtype=float)
    if v.size < 2 or not np.mean(v):
        return None
    return float(np.std(v, ddof=1) / np.mean(v))


# --------------------------------------------------------------------------- the study


def _load_manifest(study_dir: Path) -> dict[str, Any]:
    path = study_dir / "study.json"
    try:
        data: dict[str, Any] = orjson.loads(path.read_bytes())
        return data
    except FileNotFoundError:
        raise RunInputError(f"{path}: no study manifest (is {study_dir} a tokenswarm study directory?)") from None
    except orjson.JSONDecodeError as e:
        raise RunInputError(f"{path}: not valid JSON ({e})") from None


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
        pt, ot = _sorted(first["prompt_tokens"][sel]), _sorted(first["output_tokens"][sel])
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


def _mark_suspect(row: dict[str, Any], runs: list[tuple[str, int]]) -> None:
    """A cell fed by an overloaded generator: its verdict says so, whatever the numbers say."""
    row["suspect"] = bool(runs)
    row["suspect_runs"] = [f"{a} round {r}" for a, r in runs]
    if runs:
        row["verdict_if_trusted"] = row["verdict"]
        row["verdict"] = row["aggregate_verdict"] = SUSPECT
        row["verdict_rule"] = VERDICT_RULES[SUSPECT]


def _suspect_notes(extras: dict[tuple[str, int], RunExtras], verdict: list[dict[str, Any]]) -> list[str]:
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

CellKey = tuple[str, float, str]  # (load kind, load, task)


def _cell_order(k: CellKey) -> tuple[bool, str, float]:
    """All tasks first, then each task by load."""
    return (k[2] != ALL_TASKS, k[2], k[1])


@dataclass
class _StudyRuns:
    """Every finished run of the study (the candidates' only in rounds the baseline finished too),
    with its cells and extras, and what every ratio is computed with."""

    base_arm: str
    runs: dict[tuple[str, int], Run]
    cells: dict[tuple[str, int], dict[CellKey, Cell]]
    extras: dict[tuple[str, int], RunExtras]
    rng: np.random.Generator
    n_boot: int

    def rounds(self, arm: str) -> list[int]:
        return sorted(r for a, r in self.cells if a == arm)


def _load_study_runs(study_dir: Path, m: dict[str, Any], rng: np.random.Generator, n_boot: int) -> _StudyRuns:
    base_arm = m["baseline_arm"]
    done = {(e["arm"], e["round"]): e for e in m["arm_rounds"] if e["status"] == "done"}
    base_rounds = sorted(r for a, r in done if a == base_arm)
    if not base_rounds:
        raise RunInputError(f"{study_dir / 'study.json'}: the baseline arm {base_arm!r} has no finished round")
    data = _StudyRuns(base_arm, {}, {}, {}, rng, n_boot)
    for (arm, r), e in sorted(done.items()):
        if arm != base_arm and r not in base_rounds:
            continue
        run = data.runs[(arm, r)] = load_run(study_dir / e["run_dir"], keep_text=True)
        data.cells[(arm, r)] = run_cells(run, rng, n_boot)
        data.extras[(arm, r)] = run_extras(run)
    return data


def _p50(c: Cell, metric: str) -> float | None:
    return float(percentiles_sorted(c.lat[metric][1], [50.0])[0]) if c.lat[metric][0] else None


def _arm_cells(data: _StudyRuns, arm: str, notes: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """One arm's variability over rounds and (when it speculated) its acceptance, per cell; a
    chunk-size estimate that disagrees with the per-request metrics is noted."""
    variability: list[dict[str, Any]] = []
    acceptance: list[dict[str, Any]] = []
    rounds = data.rounds(arm)
    speculated = any(data.extras[(arm, r)].speculated for r in rounds)
    for key in sorted({k for r in rounds for k in data.cells[(arm, r)]}, key=_cell_order):
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
                           "mean_accepted_length": _mean([c.accept_len for c in have]),
                           "acceptance_source": next((c.accept_source for c in have if c.accept_source), None),
                           "acceptance_rate": _mean([c.accept_rate for c in have]),
                           "chunk_estimate_mean_tokens": _mean([c.chunk_estimate for c in have]),
                           "chunk_estimate_reliable": all(c.chunk_reliable for c in have),
                           "accepted_length_histogram": _histogram([c.chunk_hist for c in have])})
        req, chunk = _mean([c.request_accept_len for c in have]), _mean([c.chunk_estimate for c in have])
        if req and chunk and abs(chunk - req) / req > 0.15 and arm != data.base_arm:
            notes.append(f"arm {arm}, {key[2]} at {key[1]:g}: the chunk-size estimate of accepted length "
                         f"({chunk:.2f}) disagrees with the per-request metrics ({req:.2f}); the chunk estimate is "
                         "not reliable here and is not used")
    return variability, acceptance


def _verdict_row(data: _StudyRuns, arm: str, key: CellKey, spec: SloSpec | None) -> dict[str, Any]:
    """One cell's verdict: the candidate against the baseline over the rounds both ran it."""
    base_arm, cells, extras, rng = data.base_arm, data.cells, data.extras, data.rng
    used = [r for r in data.rounds(arm) if key in cells[(arm, r)] and key in cells[(base_arm, r)]]
    pairs = [(cells[(arm, r)][key], cells[(base_arm, r)][key]) for r in used]
    cand_c, base_c = [p[0] for p in pairs], [p[1] for p in pairs]
    enough = min(c.n_ok for c in cand_c + base_c) >= MIN_CELL_REQUESTS
    # below the median's need there is no ratio and no interval to print (analysis.samples)
    sp = _ratio_pair(cand_c, base_c, "tps_median", "tps_reps", rng) if enough else None
    ag = _ratio_pair(cand_c, base_c, "agg_tps", "agg_reps", rng) if enough else None
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
            comb, short = _latency_ratio(cand_c, base_c, metric, p, rng, data.n_boot)
            name = names.METRICS_BY_NAME[metric].ratio_key(PERCENTILE_KEY[p])
            row[name] = comb["point"] if comb else None
            row[f"{name}_ci"] = comb["ci"] if comb else None
            row[f"{name}_insufficient"] = short
    row.update(goodput_fields(spec, key[2], [(c.n_good, b.n_good) for c, b in pairs],
                              partial(_ratio_pair, cand_c, base_c, "goodput_rps", "good_reps", rng)))
    row["latency_regressions"] = latency_regressions(row, LATENCY_PERCENTILES)
    row.update(cell_resources([extras[(arm, r)] for r in used], [extras[(base_arm, r)] for r in used],
                              (key[0], key[1]), row["aggregate_speedup"], enough))
    _mark_suspect(row, [(a, r) for r in used for a in (base_arm, arm) if extras[(a, r)].suspect(key[0], key[1])])
    row["mean_accepted_length"] = _mean([c.accept_len for c in cand_c])
    row["acceptance_source"] = next((c.accept_source for c in cand_c if c.accept_source), None)
    row["acceptance_rate"] = _mean([c.accept_rate for c in cand_c])
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


def _arm_verdict(data: _StudyRuns, arm: str, spec: SloSpec | None, notes: list[str],
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
    for key in sorted(base_keys & cand_keys, key=_cell_order):
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


def _arm_consistency(data: _StudyRuns, arm: str, notes: list[str]) -> dict[str, Any]:
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
    m = _load_manifest(study_dir)
    arms = [a["name"] for a in m["arms"]]
    data = _load_study_runs(study_dir, m, np.random.default_rng(seed), n_boot)
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
        verdict += _arm_verdict(data, arm, spec, notes, unmatched)
        cons_out.append(_arm_consistency(data, arm, notes))
    notes += _suspect_notes(extras, verdict)
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


# --------------------------------------------------------------------------- several models


def _models_of(run: Run) -> list[str]:
    if "model" not in run.columns:
        return []
    model_names = run.categories["model"]
    return sorted(model_names[c] for c in np.unique(run["model"]).tolist() if c >= 0)


def _request_accept_len(run: Run, ok: np.ndarray) -> float | None:
    """Mean accepted length of the requests ``ok`` from their own per-request metrics (None without them)."""
    if "sd_num_spec_steps" not in run.columns:
        return None
    steps, acc = run["sd_num_spec_steps"][ok], run["sd_num_accepted_tokens"][ok]
    keep = ~np.isnan(steps) & ~np.isnan(acc)
    total = float(steps[keep].sum())
    return 1.0 + float(acc[keep].sum()) / total if total > 0 else None


def model_cells(run: Run, rng: np.random.Generator, n_boot: int = N_BOOT) -> dict[tuple[str, float, str], Cell]:
    """Every (step kind, load value, model) cell of one run (all tasks), as :func:`run_cells` per task."""
    d = derived(run)
    wins, _notes = windows(run)
    try:
        good = good_mask(run, scenario_slos(run.manifest))
    except ValueError:
        good = None
    out: dict[tuple[str, float, str], Cell] = {}
    for w in wins:
        if w.target is None:
            continue
        for name in _models_of(run):
            m = w.mask & (run["model"] == run.code("model", name))
            if not m.any():
                continue
            cell = _cell(run, d, w, m, good, None, rng, n_boot)
            cell.accept_len = _request_accept_len(run, m & d["ok"])
            cell.accept_source = "per-request metrics" if cell.accept_len is not None else None
            out[(str(w.kind), float(w.target), name)] = cell
    return out


def model_verdict(runs: dict[tuple[str, int], Run], base_arm: str, candidates: list[str],
                  rng: np.random.Generator, n_boot: int = N_BOOT) -> list[dict[str, Any]] | None:
    """Per candidate arm, model and load: the speedup over the baseline, as the per-task verdict.

    ``None`` unless some run's requests asked for more than one model (a LoRA split): then the
    per-task verdict mixes the models, and this says how each fared. Acceptance comes from the
    per-request metrics only (the server's counters are not split by model).
    """
    if not any(len(_models_of(run)) > 1 for run in runs.values()):
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
            sp = _ratio_pair(cand_c, base_c, "tps_median", "tps_reps", rng)
            ag = _ratio_pair(cand_c, base_c, "agg_tps", "agg_reps", rng)
            row: dict[str, Any] = {
                "arm": arm, "model": key[2], "load": key[1], "load_kind": key[0], "rounds": len(pairs),
                "baseline_requests_count": [c.n_ok for c in base_c], "candidate_requests_count": [c.n_ok for c in cand_c],
                "speedup": sp["point"] if sp else None, "speedup_ci": sp["ci"] if sp else None,
                "aggregate_speedup": ag["point"] if ag else None, "aggregate_speedup_ci": ag["ci"] if ag else None,
                "verdict": verdict_of(sp, len(pairs), enough),
                "mean_accepted_length": _mean([c.accept_len for c in cand_c]),
            }
            for metric in ("ttft", "tpot"):
                comb, short = _latency_ratio(cand_c, base_c, metric, 50.0, rng, n_boot)
                name = names.METRICS_BY_NAME[metric].ratio_key("p50")
                row[name] = comb["point"] if comb else None
                row[f"{name}_insufficient"] = short
            rows.append(row)
    return rows


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
