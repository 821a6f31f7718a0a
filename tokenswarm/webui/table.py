"""The "LLM" table of the web UI: one row per task plus "Total", as JSON rows and CSV.

Latencies come from the live, mergeable histograms (:mod:`tokenswarm.load.livestats`, 1 %
bucket precision); output tokens/s from counter snapshots kept by the sampler (see
:mod:`tokenswarm.webui.series`); speculative-decoding acceptance from the target's
Prometheus counters (first scrape of the run versus the latest) and from per-request
``spec_decode`` stats when the server sends them. "Not observed" is ``None`` (an empty cell).
"""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable
from typing import Any

from tokenswarm import names
from tokenswarm.load.livestats import LiveStats, summary_rows

#: (key, title) of each column, in display order. Keys are the JSON/CSV field names.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "Task"),
    ("requests", "Requests"),
    ("failures", "Failures"),
    (names.LIVE_TTFT_P50_MS, "TTFT p50 (ms, live)"),
    (names.LIVE_TTFT_P95_MS, "TTFT p95 (ms, live)"),
    (names.LIVE_TTFT_P99_MS, "TTFT p99 (ms, live)"),
    (names.LIVE_TPOT_P50_MS, "TPOT p50 (ms, live)"),
    (names.LIVE_TPOT_P95_MS, "TPOT p95 (ms, live)"),
    (names.LIVE_TPOT_P99_MS, "TPOT p99 (ms, live)"),
    (names.LIVE_ITL_P50_MS, "ITL p50 (ms, live)"),
    (names.LIVE_ITL_P99_MS, "ITL p99 (ms, live)"),
    ("output_tokens_per_s_recent", "Output tok/s (last 10 s)"),
    ("output_tokens_per_s_run", "Output tok/s (run)"),
    ("output_tokens", "Output tokens"),
    ("tokens_per_chunk", "Tokens/chunk"),
    ("spec_acceptance_rate", "Spec acceptance rate"),
    ("spec_mean_accepted_len", "Spec mean accepted length"),
)

SPEC_ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
SPEC_DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
SPEC_DRAFTS = "vllm:spec_decode_num_drafts_total"


def table_structure() -> list[dict[str, str]]:
    """Locust ``extended_tables`` structure for the LLM tab."""
    return [{"key": k, "title": t} for k, t in COLUMNS]


def counter_sum(scrape: dict[str, Any] | None, name: str) -> float | None:
    """Sum of a counter over all its label sets (engines, models) in one scrape line; None if absent."""
    if not scrape:
        return None
    values = [s["value"] for s in scrape.get("samples", ()) if s.get("name") == name]
    return sum(values) if values else None


def server_spec_decode(first: dict[str, Any] | None, latest: dict[str, Any] | None) -> dict[str, float | None]:
    """Acceptance rate and mean accepted length from the target's spec-decode counters.

    ``rate = Δaccepted / Δdraft_tokens`` and ``mean length = 1 + Δaccepted / Δdrafts`` between
    the run's first scrape and the latest one (counters are differenced and
    summed over labels). None when the target does not export them or nothing was drafted.
    """
    out: dict[str, float | None] = {"acceptance_rate": None, "mean_accepted_len": None}
    deltas = {}
    for key, name in (("acc", SPEC_ACCEPTED), ("tok", SPEC_DRAFT_TOKENS), ("drafts", SPEC_DRAFTS)):
        a, b = counter_sum(first, name), counter_sum(latest, name)
        deltas[key] = None if a is None or b is None else b - a
    if deltas["acc"] is not None and deltas["tok"]:
        out["acceptance_rate"] = round(deltas["acc"] / deltas["tok"], 3)
    if deltas["acc"] is not None and deltas["drafts"]:
        out["mean_accepted_len"] = round(1 + deltas["acc"] / deltas["drafts"], 2)
    return out


def llm_rows(live: LiveStats, *, recent_tps: dict[str, float | None] | None = None, run_elapsed_s: float | None = None,
             server_spec: dict[str, float | None] | None = None) -> list[dict[str, Any]]:
    """Rows of the LLM table: one per task (sorted), then ``Total``.

    ``recent_tps`` maps a row name to its output tokens/s over the last seconds (from the
    sampler); ``run_elapsed_s`` turns output tokens into a run-average rate. Server-side
    spec-decode numbers (target-wide) go in the ``Total`` row; per-task rows show the
    per-request ``spec_decode`` mean accepted length when the server sent it.
    """
    recent_tps = recent_tps or {}
    rows = []
    for r in summary_rows(live):
        row = {k: r.get(k) for k, _ in COLUMNS if k in r}
        row["output_tokens_per_s_recent"] = _round(recent_tps.get(r["name"]), 1)
        row["output_tokens_per_s_run"] = (round(r["output_tokens"] / run_elapsed_s, 1)
                                 if run_elapsed_s and run_elapsed_s > 0 else None)
        row["spec_acceptance_rate"] = None
        if r["name"] == "Total" and server_spec:  # the target's counters win over per-request stats
            row["spec_acceptance_rate"] = server_spec.get("acceptance_rate")
            if server_spec.get("mean_accepted_len") is not None:
                row["spec_mean_accepted_len"] = server_spec["mean_accepted_len"]
        rows.append({k: row.get(k) for k, _ in COLUMNS})
    return rows


def rows_to_csv(rows: Iterable[dict[str, Any]]) -> str:
    """CSV text of the table (header = column keys; empty field = not observed)."""
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow([k for k, _ in COLUMNS])
    for row in rows:
        w.writerow(["" if row.get(k) is None else row[k] for k, _ in COLUMNS])
    return buf.getvalue()


def _round(v: float | None, nd: int) -> float | None:
    return None if v is None else round(v, nd)
