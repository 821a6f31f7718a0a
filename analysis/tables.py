"""Per-step, per-task tables: throughput, goodput, errors and latency distributions.

Each row covers one window (:mod:`analysis.step_windows`: a load step's steady phase) and one
task, plus ``task == "all"``; the per-request arrays it reads are :mod:`analysis.per_request`'s.

Throughput
    ``requests_per_s`` = successful requests / window duration; ``output_tokens_per_s`` =
    their ``output_tokens`` / window duration. Goodput counts successful requests that meet
    the per-request SLO thresholds (see :mod:`analysis.slo`).
Failures
    Latency distributions are over successful requests (``outcome == "ok"``). Failed requests
    (``http_error``, ``stream_error``, ``timeout``) are not dropped silently: every metric
    reports ``*_failed_share`` (failed / (successful + failed)) and, for per-request metrics,
    ``*_pNN_failed_as_inf_*``: the percentile when each failure counts as infinitely slow
    (``None`` = unbounded, the failures reach into that percentile). ``cancelled`` requests were
    stopped by the generator (end of step/run): they are counted (``cancelled_count``) but are
    neither errors nor latency samples. Schedule lag covers every request.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.chunkhist import METHOD as CHUNK_HIST_METHOD
from tokenswarm.analysis.chunkhist import HistogramParts, window_hist_parts
from tokenswarm.analysis.chunks import chunk_parts, chunk_subset, token_histogram
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.per_request import FAILED_OUTCOMES, derived, good_mask
from tokenswarm.analysis.prefixcache import prefix_cache_rows
from tokenswarm.analysis.reasoning import has_reasoning, reasoning_block
from tokenswarm.analysis.slo import ALL_TASKS, SloResult, SloSpec, evaluate_rows, parse_slos, scenario_slos
from tokenswarm.analysis.stats import SortedParts, describe, describe_parts
from tokenswarm.analysis.step_windows import Window, windows
from tokenswarm.names import SummaryMetric
from tokenswarm.record import OUTCOMES

#: The metrics of each row's latency block (their keys: the table of names, tokenswarm.names).
LATENCY_METRICS: tuple[SummaryMetric, ...] = (
    names.TTFT, names.TPOT, names.ITL, names.INTER_CHUNK, names.E2E, names.SCHEDULE_LAG,
    names.REQUEST_OUTPUT_TPS, names.TTFT_FROM_SCHEDULE, names.E2E_FROM_SCHEDULE,
)

FAILURE_TREATMENT = (
    "Latency percentiles are computed over successful requests (outcome ok). Failed requests "
    "(http_error, stream_error, timeout) are counted: *_failed_share is their share of "
    "successful+failed requests, and *_pNN_failed_as_inf_* repeats the percentile with every failure "
    "counted as infinitely slow (null = unbounded). Cancelled requests (stopped by the generator) are "
    "counted separately and excluded from latencies and error rates. Schedule lag covers all requests."
)


@dataclass
class StepTables:
    """Result of :func:`step_table`: rows (one per step and task, plus ``all``) and errors."""

    rows: list[dict[str, Any]]
    errors: list[dict[str, Any]]
    windows: list[Window]
    slo: SloSpec
    slo_results: list[SloResult]
    notes: list[str] = field(default_factory=list)

    def row(self, step_index: int | None, task: str = ALL_TASKS) -> dict[str, Any]:
        """The row of one step (``None`` for a run without steps) and task."""
        for r in self.rows:
            if r["step_index"] == step_index and r["task"] == task:
                return r
        raise KeyError(f"no row for step {step_index!r}, task {task!r}")

    def to_dataframe(self) -> Any:
        """Rows as a pandas DataFrame (requires pandas)."""
        import pandas as pd  # pandas: only for a DataFrame

        return pd.DataFrame(self.rows)


def _rate(num: float, den: float | None) -> float | None:
    return None if not den else num / den


def _chunk_stats(parts: tuple[Any, Any, float | None], failed_share: float | None) -> dict[str, Any]:
    itl, inter, inexact = parts
    out: dict[str, Any] = {}
    out.update(describe_parts(itl, names.ITL, failed_share=failed_share))
    out["itl_per_chunk_samples_share"] = inexact
    out.update(describe_parts(inter, names.INTER_CHUNK, failed_share=failed_share))
    # 0 = exact percentiles; else the histogram's relative precision (see analysis.chunkhist)
    out["itl_percentile_precision_share"] = getattr(itl, "precision_share", 0.0)
    out["inter_chunk_percentile_precision_share"] = getattr(inter, "precision_share", 0.0)
    return out


def latency_block(
    run: Run, d: dict[str, np.ndarray], req: np.ndarray,
    parts: tuple[Any, Any, float | None], open_loop: bool,
) -> dict[str, Any]:
    """A step row's latency columns (TTFT, TPOT, ITL, e2e... percentiles) over the requests in
    ``req``; the latencies from the scheduled time only with ``open_loop`` (None otherwise).
    Also the per-model rows' (models.py)."""
    # index arrays, built once: a row selects a small share of the requests, and gathering by
    # index is several times cheaper than a boolean mask over every request, column after column
    req_idx = np.flatnonzero(req)
    ok = req_idx[d["ok"][req_idx]]
    n_failed = int(d["failed"][req_idx].sum())
    n_ok = int(ok.size)
    failed_share = n_failed / (n_ok + n_failed) if n_ok + n_failed else None
    out: dict[str, Any] = {}
    sources = {
        names.TTFT: run["ttft_ms"],
        names.TPOT: d["tpot_ms"],
        names.E2E: run["e2e_ms"],
        names.REQUEST_OUTPUT_TPS: d["request_output_tps"],
    }
    for metric in LATENCY_METRICS:
        if metric in (names.ITL, names.INTER_CHUNK):
            if metric == names.ITL:
                out.update(_chunk_stats(parts, failed_share))
            continue
        if metric == names.SCHEDULE_LAG:
            v = d["schedule_lag_ms"][req_idx]
            out.update(describe(v[~np.isnan(v)], metric))
            continue
        if metric in (names.TTFT_FROM_SCHEDULE, names.E2E_FROM_SCHEDULE):
            if open_loop:
                v = d[metric.term][ok]
                out.update(describe(v[~np.isnan(v)], metric, n_failed=n_failed))
            else:
                out.update({k: None for k in describe(np.empty(0), metric, n_failed=0)})
            continue
        v = sources[metric][ok]
        out.update(describe(v[~np.isnan(v)], metric, n_failed=n_failed))
    out["ttft_missing_count"] = int(np.isnan(run["ttft_ms"][ok]).sum())
    return out


def phase_block(run: Run, req: np.ndarray) -> dict[str, Any]:
    """The request phases of the selected requests (all outcomes: a connect is a connect).

    ``connect_*`` over the requests that opened a connection, ``conn_reused_share`` of those
    that say whether they reused one, ``send_delay_*`` (the generator's own delay) and
    ``headers_*`` (time to first byte). Records written before these fields existed give
    counts of 0 and nulls.
    """
    out: dict[str, Any] = {}
    for metric in (names.CONNECT, names.SEND_DELAY, names.HEADERS):
        column = metric.term  # the record field of the same name (connect_ms ...)
        v = run[column][req] if column in run.columns else np.empty(0)
        out.update(describe(v[~np.isnan(v)], metric))
    reused = run["conn_reused"][req] if "conn_reused" in run.columns else np.empty(0)
    reused = reused[~np.isnan(reused)]
    out["conn_reused_share"] = float(reused.mean()) if reused.size else None
    return out


def counts_block(run: Run, d: dict[str, np.ndarray], req: np.ndarray, duration: float | None,
                 good: np.ndarray | None) -> dict[str, Any]:
    """A step row's counts and rates (requests, outcomes, tokens/s, goodput) over the requests in
    ``req`` and ``duration`` seconds. Also the per-model rows' (models.py)."""
    outcome = run["outcome"][req]
    total = int(req.sum())
    out: dict[str, Any] = {"requests_count": total}
    for o in OUTCOMES:
        out[f"{o}_count"] = int((outcome == run.code("outcome", o)).sum())
    n_ok = out["ok_count"]
    n_failed = sum(out[f"{o}_count"] for o in FAILED_OUTCOMES)
    n_cancel = out["cancelled_count"]
    denom = total - n_cancel
    out["failed_count"] = n_failed
    out["error_rate"] = None if denom <= 0 else n_failed / denom
    for o in FAILED_OUTCOMES:
        out[f"{o}_rate"] = None if denom <= 0 else out[f"{o}_count"] / denom
    ok = req & d["ok"]
    toks = run["output_tokens"][ok]
    missing = int(np.isnan(toks).sum())
    out_tokens = float(np.nansum(toks))
    out["output_tokens_count"] = out_tokens
    out["output_tokens_missing_count"] = missing
    out["output_tokens_estimated_count"] = int((run["tokens_estimated"][ok]).sum())
    out["prompt_tokens_count"] = float(np.nansum(run["prompt_tokens"][ok]))
    out.update(quality_shares(run, ok))
    out["window_duration_s"] = duration
    out["requests_per_s"] = _rate(n_ok, duration)
    out["output_tokens_per_s"] = _rate(out_tokens, duration)
    out["prompt_tokens_per_s"] = _rate(out["prompt_tokens_count"], duration)
    if good is None:
        out["good_count"] = None
        out["goodput_requests_per_s"] = None
        out["goodput_share"] = None
    else:
        n_good = int((req & good).sum())
        out["good_count"] = n_good
        out["goodput_requests_per_s"] = _rate(n_good, duration)
        out["goodput_share"] = None if denom <= 0 else n_good / denom
    return out


def quality_shares(run: Run, ok: np.ndarray) -> dict[str, Any]:
    """Structured-output quality of the successful requests that were checked (None if none were).

    ``json_valid_share``: answers that parse as JSON; ``schema_valid_share``: answers that
    validate against the requested JSON Schema (glossary: tokenswarm.metrics).
    """
    out: dict[str, Any] = {}
    for name in ("json_valid", "schema_valid"):
        col = run.columns.get(name)
        v = col[ok] if col is not None else np.empty(0)
        v = v[~np.isnan(v)]
        out[f"{name}_checked_count"] = int(v.size)
        out[f"{name}_share"] = float(v.mean()) if v.size else None
    return out


def _error_rows(run: Run, w: Window, task_name: str, req: np.ndarray, denom: int) -> list[dict[str, Any]]:
    d = derived(run)
    bad = req & (d["failed"])
    if not bad.any():
        return []
    oc, er = run["outcome"][bad], run["error"][bad]
    hs = np.nan_to_num(run["http_status"][bad], nan=-1).astype(np.int64)
    combo = np.stack([oc.astype(np.int64), er.astype(np.int64), hs], axis=1)
    uniq, counts = np.unique(combo, axis=0, return_counts=True)
    rows = []
    for (o, e, h), n in zip(uniq, counts):
        rows.append({
            **w.header(),
            "task": task_name,
            "outcome": run.categories["outcome"][o],
            "error": None if e < 0 else run.categories["error"][e],
            "http_status": None if h < 0 else int(h),
            "requests_count": int(n),
            "requests_share": n / denom if denom > 0 else None,
        })
    rows.sort(key=lambda r: -r["requests_count"])
    return rows


def step_table(run: Run, slo: Any = None, use_scenario_slo: bool = True) -> StepTables:
    """Compute the per-step, per-task tables of a run.

    Parameters
    ----------
    run
        A loaded run.
    slo
        SLO block or :class:`SloSpec`; ``None`` uses ``manifest.scenario.slo`` when
        ``use_scenario_slo`` (default).

    Returns
    -------
    StepTables
        ``rows``: one dict per (step, task) plus ``task == "all"`` per step, keys with units
        (``ttft_p99_ms``, ``output_tokens_per_s`` ...); ``errors``: counts by outcome, error
        text and HTTP status; ``slo_results``: every SLO checked on every row.
    """
    spec = parse_slos(slo) if slo is not None else (scenario_slos(run.manifest) if use_scenario_slo else SloSpec())
    d = derived(run)
    wins, notes = windows(run)
    good = good_mask(run, spec)
    if good is None:
        notes.append("No per-request SLO thresholds (ttft_ms/tpot_ms/e2e_ms or pNN SLOs): goodput not computed.")

    reasoning = has_reasoning(run)
    cache_rates = {r["step_index"]: r["prefix_cache_hit_rate"] for r in prefix_cache_rows(run, wins)}
    rows: list[dict[str, Any]] = []
    errors: list[dict[str, Any]] = []
    tasks = run.categories["task"]
    if run.chunk_hists is not None:
        notes.append("ITL and inter-chunk percentiles: " + CHUNK_HIST_METHOD + ".")
    for w in wins:
        open_loop = w.kind == "rate"
        present = sorted(np.unique(run["task"][w.mask]), key=lambda c: tasks[c])
        hists = run.cache.setdefault("token_histograms", {})
        union: Any = SortedParts.union
        task_parts: list[tuple[Any, Any, float | None]] = []
        if run.chunk_hists is not None:
            for code, (itl_h, inter_h, inexact, tok_h) in zip(present, window_hist_parts(run, w.mask & d["ok"], present)):
                hists[(w.index, int(code))] = tok_h
                task_parts.append((itl_h, inter_h, inexact))
            union = HistogramParts.union
        else:
            step_chunks = chunk_subset(run, w.mask & d["ok"])
            for code in present:
                sel = step_chunks["task"] == code
                sub = {k: v[sel] for k, v in step_chunks.items()}
                hists[(w.index, int(code))] = token_histogram(sub)  # reused by the spec-decode tables
                task_parts.append(chunk_parts(sub))
                del sub
            del step_chunks
        # The all-tasks row reuses the tasks' sorted samples (a union, no second sort).
        all_parts: tuple[Any, Any, float | None] = (union([p[0] for p in task_parts]),
                                                    union([p[1] for p in task_parts]), None)
        sizes = [p[1].count for p in task_parts]
        if sum(sizes):
            inexact = sum((p[2] or 0.0) * n for p, n in zip(task_parts, sizes)) / sum(sizes)
            all_parts = (all_parts[0], all_parts[1], inexact)
        groups = [(ALL_TASKS, w.mask, all_parts)]
        groups += [(tasks[c], w.mask & (run["task"] == c), p) for c, p in zip(present, task_parts)]
        for task_name, req, parts in groups:
            row: dict[str, Any] = {**w.header(), "task": task_name}
            row["window_start_s"] = w.start_s
            row["window_end_s"] = w.end_s
            row["duration_source"] = w.duration_source
            row.update(counts_block(run, d, req, w.duration_s, good))
            row.update(latency_block(run, d, req, parts, open_loop))
            row.update(phase_block(run, req))
            if reasoning:
                row.update(reasoning_block(run, req & d["ok"]))
            if cache_rates:  # the server's counters cover all tasks: None on per-task rows
                row["server_prefix_cache_hit_rate"] = cache_rates.get(w.index) if task_name == ALL_TASKS else None
            rows.append(row)
            errors.extend(_error_rows(run, w, task_name, req, row["requests_count"] - row["cancelled_count"]))
    return StepTables(rows=rows, errors=errors, windows=wins, slo=spec, slo_results=evaluate_rows(rows, spec), notes=notes)


def evaluate(run_or_tables: Any, slos: Any) -> list[SloResult]:
    """Evaluate SLOs on a run, a :class:`StepTables` or a list of rows (``analysis.evaluate``).

    Parameters
    ----------
    run_or_tables
        A :class:`~analysis.loader.Run` (step tables are computed with these SLOs, so goodput
        uses their per-request thresholds), a ``StepTables``, or ``list[dict]`` rows.
    slos
        An SLO block (mapping, see :mod:`analysis.slo`) or a :class:`~analysis.slo.SloSpec`.

    Returns
    -------
    list[SloResult]
        One result per (step, task row, SLO); an SLO whose metric was not observed fails.
    """
    spec = parse_slos(slos)
    if isinstance(run_or_tables, Run):
        rows = step_table(run_or_tables, slo=spec).rows
    elif isinstance(run_or_tables, StepTables):
        rows = run_or_tables.rows
    else:
        rows = list(run_or_tables)
    return evaluate_rows(rows, spec)
