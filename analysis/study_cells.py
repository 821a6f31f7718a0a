"""One run's numbers per cell of a study, with their within-run bootstrap replicates.

A cell is a load step (matched by kind and load value) and a task (and ``all``), or a model
when the requests asked for several. From steady-window records only: the median per-request
output tokens/s, the aggregate output tokens/s, TTFT, TPOT and E2E p50/p95/p99, goodput
(requests meeting the scenario's per-request SLOs per second), acceptance (per-request
metrics, else server counters, else chunk sizes).

Within a run: 1,000 bootstrap replicates (medians and percentiles by the order-statistic form
of :mod:`analysis.stats`, aggregate throughput by resampling 1-second bins of completed
tokens, as ``tokenswarm compare``). :mod:`analysis.study_rounds` combines them over rounds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tokenswarm.analysis.compare import binned_throughput_reps
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.per_request import derived, good_mask
from tokenswarm.analysis.slo import ALL_TASKS, scenario_slos
from tokenswarm.analysis.specdecode import mean_acceptance, spec_decode_tables
from tokenswarm.analysis.stats import bootstrap_percentiles, percentiles_sorted
from tokenswarm.analysis.step_windows import Window, windows

N_BOOT = 1000
LATENCY = {"ttft": "ttft_ms", "tpot": "tpot_ms", "e2e": "e2e_ms"}


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


def sorted_values(v: np.ndarray) -> np.ndarray:
    """The values without NaN, sorted (what the percentile functions of :mod:`analysis.stats` take)."""
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
    tps = sorted_values(d["request_output_tps"][ok])
    tps_med = float(percentiles_sorted(tps, [50.0])[0]) if tps.size else None
    tps_reps = bootstrap_percentiles(tps, [50.0], n_boot, rng)[0] if tps.size else None
    tokens = np.nan_to_num(run["output_tokens"][ok], nan=0.0)
    agg = agg_reps = None
    if tokens.size and w.duration_s:
        agg = float(tokens.sum() / w.duration_s)
        agg_reps = binned_throughput_reps(run, ok, tokens, w.duration_s, n_boot, rng)
    lat = {}
    for name, col in LATENCY.items():
        v = sorted_values((d[col] if col == "tpot_ms" else run[col])[ok])
        lat[name] = (int(v.size), v)
    goodput = float((good & m).sum() / w.duration_s) if good is not None and w.duration_s else None
    n_good = good_reps = None
    if good is not None:
        g = good & ok
        n_good = int(g.sum())
        if n_good and w.duration_s:
            good_reps = binned_throughput_reps(run, g, np.ones(n_good), w.duration_s, n_boot, rng)
    acc, src = mean_acceptance(spec, mark_unreliable=True)
    return Cell(n_ok, int(m.sum()), tps_med, tps_reps, agg, agg_reps, lat, goodput, acc, src,
                None if spec is None else spec.get("request_acceptance_rate"),
                None if spec is None else spec.get("chunk_mean_tokens_per_chunk_tokens"),
                None if spec is None else spec.get("chunk_estimate_reliable"),
                None if spec is None else spec.get("request_mean_acceptance_length_tokens"),
                {int(h["chunk_size_tokens"]): int(h["chunks_count"])
                 for h in (spec or {}).get("tokens_per_chunk_histogram") or []},
                w.name, n_good, good_reps)


def models_of(run: Run) -> list[str]:
    """The models the run's requests asked for, sorted (none without a model column)."""
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
        for name in models_of(run):
            m = w.mask & (run["model"] == run.code("model", name))
            if not m.any():
                continue
            cell = _cell(run, d, w, m, good, None, rng, n_boot)
            cell.accept_len = _request_accept_len(run, m & d["ok"])
            cell.accept_source = "per-request metrics" if cell.accept_len is not None else None
            out[(str(w.kind), float(w.target), name)] = cell
    return out


CellKey = tuple[str, float, str]  # (load kind, load, task)


def cell_order(k: CellKey) -> tuple[bool, str, float]:
    """All tasks first, then each task by load."""
    return (k[2] != ALL_TASKS, k[2], k[1])
