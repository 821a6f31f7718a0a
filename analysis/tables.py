"""Per-step, per-task tables: throughput, goodput, errors and latency distributions.

Windows
    A load step's *steady window* is ``steps[i].steady_at .. steps[i].ended_at`` of the
    manifest, and its requests are the records with ``step == i`` and ``phase == "steady"``
    (warm-up and transitions excluded). Without steps the whole run is one window (a note
    says warm-up was not excluded) whose duration is the span from the first ``sent_at_s`` to
    the last end of a request.
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
Metric definitions are those of :mod:`tokenswarm.metrics`; the vectorised versions here are
tested against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tokenswarm import names
from tokenswarm.analysis.chunkhist import METHOD as CHUNK_HIST_METHOD
from tokenswarm.analysis.chunkhist import HistogramParts, window_hist_parts
from tokenswarm.analysis.errors import NoSuccessError
from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.prefixcache import prefix_cache_rows
from tokenswarm.analysis.slo import ALL_TASKS, SloResult, SloSpec, evaluate_rows, parse_slos, scenario_slos
from tokenswarm.analysis.stats import SortedParts, describe, describe_parts
from tokenswarm.metrics import itl_samples
from tokenswarm.names import SummaryMetric
from tokenswarm.record import OUTCOMES

FAILED_OUTCOMES: tuple[str, ...] = ("http_error", "stream_error", "timeout")

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
class Window:
    """The requests and time span one row of the tables is computed over."""

    index: int | None
    name: str
    kind: str | None
    target: float | None
    start_s: float | None
    end_s: float | None
    duration_s: float | None
    duration_source: str
    mask: np.ndarray
    note: str | None = None

    def header(self) -> dict[str, Any]:
        """Identifying columns shared by all rows of this window."""
        return {
            "step_index": self.index,
            "step_name": self.name,
            "step_kind": self.kind,
            "step_concurrency_users": self.target if self.kind == "concurrency" else None,
            "step_rate_rps": self.target if self.kind == "rate" else None,
        }


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


# --------------------------------------------------------------------------- derived columns


def require_success_in(run: Run) -> None:
    """Raise :class:`NoSuccessError` (with the outcome counts) unless some request succeeded."""
    if not derived(run)["ok"].any():
        counts = {o: int((run["outcome"] == c).sum()) for c, o in enumerate(run.categories["outcome"])}
        raise NoSuccessError.among(run.path, counts, len(run))


def derived(run: Run) -> dict[str, np.ndarray]:
    """Per-request arrays derived once per run (glossary definitions, vectorised).

    ``tpot_ms`` = (e2e - ttft) / (output_tokens - 1) for >= 2 tokens; ``request_output_tps``
    = output_tokens / (e2e / 1000) for e2e > 0; ``*_from_schedule_ms`` = value + lag (a
    missing lag counts as none, as in :func:`tokenswarm.metrics.with_schedule`).
    """
    cached: dict[str, np.ndarray] | None = run.cache.get("derived")
    if cached is not None:
        return cached
    c = run.columns
    outcome = c["outcome"]
    ok = outcome == run.code("outcome", "ok")
    failed = np.isin(outcome, [run.code("outcome", o) for o in FAILED_OUTCOMES])
    cancelled = outcome == run.code("outcome", "cancelled")
    ttft, e2e, out_tok = c["ttft_ms"], c["e2e_ms"], c["output_tokens"]
    with np.errstate(invalid="ignore", divide="ignore"):
        tpot = np.where(out_tok >= 2, (e2e - ttft) / (out_tok - 1), np.nan)
        tps = np.where(e2e > 0, out_tok / (e2e / 1000.0), np.nan)
    lag = c["schedule_lag_ms"]
    lag = np.where(np.isnan(lag), (c["sent_at_s"] - c["scheduled_at_s"]) * 1000.0, lag)
    lag0 = np.nan_to_num(lag, nan=0.0)
    end_s = c["sent_at_s"] + np.nan_to_num(e2e, nan=0.0) / 1000.0
    out = {
        "ok": ok,
        "failed": failed,
        "cancelled": cancelled,
        "tpot_ms": tpot,
        "request_output_tps": tps,
        "schedule_lag_ms": lag,
        "ttft_from_schedule_ms": ttft + lag0,
        "e2e_from_schedule_ms": e2e + lag0,
        "end_s": end_s,
    }
    run.cache["derived"] = out
    return out


# --------------------------------------------------------------------------- windows


def _span(run: Run, mask: np.ndarray) -> tuple[float | None, float | None]:
    if not mask.any():
        return None, None
    d = derived(run)
    return float(run["sent_at_s"][mask].min()), float(d["end_s"][mask].max())


def windows(run: Run) -> tuple[list[Window], list[str]]:
    """Steady windows of every load step (see module docstring) and notes about fallbacks."""
    notes: list[str] = []
    steps = run.manifest.steps
    step_col = run["step"]
    phase = run["phase"]
    steady = phase == run.code("phase", "steady")
    if not steps or not (step_col >= 0).any():
        mask = np.ones(len(run), dtype=bool)
        start, end = _span(run, mask)
        notes.append(
            "The run has no load steps: all records are used as one window, warm-up is NOT excluded; "
            "duration = first sent_at_s .. last request end."
        )
        return [
            Window(None, "all", "rate" if run.manifest.load_mode in ("open", "replay") else None, None, start, end,
                   None if start is None or end is None else end - start, "span of requests (sent_at_s .. end)", mask,
                   "no steps: warm-up not excluded")
        ], notes
    out: list[Window] = []
    for s in steps:
        index = s.index
        in_step = step_col == index
        has_phase = (phase[in_step] >= 0).any()
        note = None
        if has_phase:
            mask = in_step & steady
            start, end = s.steady_at, s.ended_at
            source = "manifest steps steady_at..ended_at"
        else:
            mask = in_step
            start, end = s.started_at, s.ended_at
            source = "manifest steps started_at..ended_at"
            note = "records carry no phase: warm-up could not be excluded"
            notes.append(f"step {index}: {note}")
        if start is None or end is None or end <= start:
            start, end = _span(run, mask)
            source = "span of requests (sent_at_s .. end)"
            notes.append(f"step {index}: manifest lacks a valid steady window; duration from the span of its requests")
        if s.partial:  # the run stopped while it ran: shorter than planned, its figures say so by name
            why = run.manifest.stop_reason or "the run stopped"
            notes.append(f"step {s.name} is partial: the run stopped ({why}) before the step's planned end; "
                         "its requests in flight were cancelled")
        out.append(
            Window(
                index=index,
                name=f"{s.name} (partial)" if s.partial else s.name,
                kind=s.kind,
                target=s.target,
                start_s=start,
                end_s=end,
                duration_s=None if start is None or end is None else float(end - start),
                duration_source=source,
                mask=mask,
                note=note,
            )
        )
    notes.append("Per step only steady-phase records are used: warm-up and transitions are excluded.")
    return out, notes


# --------------------------------------------------------------------------- rows


def _rate(num: float, den: float | None) -> float | None:
    return None if not den else num / den


def chunk_subset(run: Run, req_mask: np.ndarray, with_gaps: bool = True) -> dict[str, np.ndarray]:
    """Chunk gaps of the selected requests: gaps, tokens, exact-count flag, owning task code."""
    n_gaps = run.n_gaps
    cm = np.repeat(req_mask, n_gaps)
    ng = n_gaps[req_mask]
    task = run["task"][req_mask]
    small = np.int8 if len(run.categories["task"]) < 127 else np.int32  # 4x less memory per chunk
    exact = run["has_chunk_tokens"][req_mask]
    out = {
        "gap_tokens": run.gap_tokens[cm],
        "exact": np.ones(int(ng.sum()), dtype=bool) if exact.all() else np.repeat(exact, ng),
        "task": np.repeat(task.astype(small), ng),
    }
    if with_gaps:
        out["gap_ms"] = run.gap_ms[cm]
        first = np.zeros(run.gap_ms.size, dtype=bool)
        first[run.gap_ptr[:-1][n_gaps > 0]] = True  # each request's first gap: deliveries start anew
        out["first_gap"] = first[cm]
    return out


def token_histogram(chunks: dict[str, np.ndarray]) -> np.ndarray:
    """Counts of chunks by token count (exact counts only; first chunks excluded by construction)."""
    tok = chunks["gap_tokens"][chunks["exact"]]
    return np.bincount(np.maximum(tok, 0).astype(np.intp)) if tok.size else np.zeros(0, dtype=np.int64)


def chunk_parts(chunks: dict[str, np.ndarray]) -> tuple[SortedParts, SortedParts, float | None]:
    """Sorted ITL and inter-chunk samples of a chunk subset, plus the per-chunk (inexact) share.

    ITL per token and per delivery (metrics.itl_samples): a delivery -- the chunks read
    together -- of n tokens after gap g gives n samples of g/n; chunks of requests without
    exact counts count as one token each; zero-token chunks give none.
    """
    gaps = chunks["gap_ms"]
    tok = chunks["gap_tokens"]
    exact = chunks["exact"]
    inter = SortedParts.from_values(gaps)
    n = tok if exact.all() else np.where(exact, tok, 1)
    if n.size == 0 or (n.min() == 1 and n.max() == 1 and gaps.min() > 0):
        itl = inter  # one token per delivery: per-token ITL is the inter-chunk gap
    else:
        values, weights = itl_samples(gaps, n, chunks["first_gap"])
        itl = SortedParts.from_values(values, weights)
    inexact = None if exact.size == 0 else float(1.0 - exact.mean())
    return itl, inter, inexact


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


def _latency_block(
    run: Run, d: dict[str, np.ndarray], req: np.ndarray,
    parts: tuple[Any, Any, float | None], open_loop: bool,
) -> dict[str, Any]:
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


def _counts_block(run: Run, d: dict[str, np.ndarray], req: np.ndarray, duration: float | None,
                  good: np.ndarray | None) -> dict[str, Any]:
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


def good_mask(run: Run, spec: SloSpec) -> np.ndarray | None:
    """Requests that succeeded and meet their task's per-request thresholds; ``None`` if none set.

    A missing TTFT or E2E fails the criterion it is checked against; a missing TPOT (fewer
    than two output tokens) passes, as the metric does not exist for such a request.
    """
    d = derived(run)
    tasks = run.categories["task"]
    thresholds = {t: spec.request_thresholds(t) for t in tasks}
    if not any(thresholds.values()):
        return None
    good = d["ok"].copy()
    task = run["task"]
    for metric, values in (("ttft_ms", run["ttft_ms"]), ("e2e_ms", run["e2e_ms"]), ("tpot_ms", d["tpot_ms"])):
        limit = _per_task(tasks, thresholds, metric)
        if limit is None:
            continue
        # one vectorised pass per metric (per-task boolean selections cost seconds at 10M requests);
        # requests of tasks without this threshold have limit NaN and are left as they are
        lim = limit[task]
        passes = np.isnan(lim) | (values <= lim)
        if metric == "tpot_ms":
            passes |= np.isnan(values)
        good &= passes
    return good


def _per_task(tasks: list[str], thresholds: dict[str, dict[str, float]], metric: str) -> np.ndarray | None:
    """Threshold of ``metric`` by task code (NaN: none for that task; the last entry is for code -1)."""
    limit = np.array([thresholds[t].get(metric, np.nan) for t in tasks] + [np.nan], dtype=np.float64)
    return None if np.isnan(limit).all() else limit


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


# --------------------------------------------------------------------------- reasoning phases
# Two-phase statistics of reasoning streams: time to first reasoning/answer token, ITL per phase.
#
# Only requests whose record has ``reasoning_chunks`` (a reasoning stream) take part. Chunk ``i``
# of such a request is reasoning iff ``i < reasoning_chunks`` (reasoning precedes the answer in
# every API that streams it); the gap from the last reasoning chunk to the first answer chunk
# belongs to neither phase (it is the switch, seen in ``first_answer_token_ms``). Per-phase ITL
# follows the glossary's ITL definition (a chunk of ``n`` tokens after gap ``g``: ``n`` samples
# of ``g / n``).


def has_reasoning(run: Run) -> bool:
    """Whether any record of the run is a reasoning stream."""
    col = run.columns.get("reasoning_chunks")
    return col is not None and bool((~np.isnan(col)).any())


def reasoning_block(run: Run, ok: np.ndarray) -> dict[str, Any]:
    """Row keys of the successful reasoning streams in ``ok`` (see the module docstring)."""
    rc_all = run.columns["reasoning_chunks"]
    sel = ok & ~np.isnan(rc_all)
    out: dict[str, Any] = {"reasoning_streams_count": int(sel.sum())}
    for metric in (names.FIRST_REASONING_TOKEN, names.FIRST_ANSWER_TOKEN):
        v = run[metric.term][sel]  # the record field of the same name
        out.update(describe(v[~np.isnan(v)], metric))
    r_tok = run["reasoning_tokens"][sel]
    out["reasoning_tokens_count"] = float(np.nansum(r_tok)) if sel.any() else None
    # Position of every gap within its request, and the request's reasoning chunk count.
    n_gaps = run.n_gaps
    gm = np.repeat(sel, n_gaps)
    ng = n_gaps[sel]
    starts = np.repeat(np.cumsum(ng) - ng, ng)
    pos = np.arange(int(ng.sum())) - starts  # gap j lies between chunks j and j + 1
    rc = np.repeat(rc_all[sel], ng)
    exact = np.repeat(run["has_chunk_tokens"][sel], ng)
    gaps, toks = run.gap_ms[gm], run.gap_tokens[gm]
    # a phase's first gap starts its deliveries anew (metrics.itl_samples)
    for phase, keep, first in ((names.REASONING_ITL, pos + 1 < rc, pos == 0), (names.ANSWER_ITL, pos >= rc, pos == rc)):
        itl, _, _ = chunk_parts({"gap_ms": gaps[keep], "gap_tokens": toks[keep], "exact": exact[keep],
                                 "first_gap": first[keep]})
        out.update(describe_parts(itl, phase))
    return out


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
            row.update(_counts_block(run, d, req, w.duration_s, good))
            row.update(_latency_block(run, d, req, parts, open_loop))
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
