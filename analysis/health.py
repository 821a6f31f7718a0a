"""Generator health: was the load generator itself the bottleneck? Shown at the top of reports.

Sources: ``manifest.generator_health`` (``cpu_warning``, ``max_loop_lag_ms``,
``late_dispatches``), ``manifest.warnings``, lost records (``totals.records_lost``, workers'
``missing_seqs``/``lost_reason``) and the measured schedule lag of open-loop steps.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

#: Event-loop lag above which the generator is called overloaded.
LOOP_LAG_LIMIT_MS = 100.0
#: p99 schedule lag of an open-loop step above which sends were late.
SCHEDULE_LAG_P99_LIMIT_MS = 100.0


def generator_health(manifest: Mapping[str, Any], rows: Sequence[Mapping[str, Any]] | None = None,
                     load_warnings: list[str] | None = None) -> dict[str, Any]:
    """``{"overloaded": bool, "messages": [...], ...}``; ``overloaded`` means results are suspect."""
    gh = manifest.get("generator_health") or {}
    messages: list[str] = []
    overloaded = False
    if gh.get("cpu_warning"):
        overloaded = True
        messages.append("Load generator CPU was saturated (cpu_warning): latencies include client-side delay.")
    lag = gh.get("max_loop_lag_ms")
    if lag is not None and lag > LOOP_LAG_LIMIT_MS:
        overloaded = True
        messages.append(f"Generator event-loop lag reached {lag:.0f} ms (> {LOOP_LAG_LIMIT_MS:.0f} ms).")
    late = gh.get("late_dispatches")
    if late:
        overloaded = True
        messages.append(f"{late} request(s) were dispatched late by the generator.")
    for w in manifest.get("warnings") or []:
        messages.append(f"Run warning: {w}")
    totals = manifest.get("totals") or {}
    lost = totals.get("records_lost")
    if lost:
        messages.append(f"{lost} record(s) were lost between workers and master: counts are incomplete.")
    for w in manifest.get("workers") or []:
        if w.get("missing_seqs") or w.get("lost_reason"):
            messages.append(
                f"Worker {w.get('worker_id')}: missing seqs {w.get('missing_seqs')!r}, lost reason {w.get('lost_reason')!r}."
            )
    for r in rows or []:
        if r.get("task") == "all" and r.get("step_kind") == "rate":
            p99 = r.get("schedule_lag_p99_ms")
            if p99 is not None and p99 > SCHEDULE_LAG_P99_LIMIT_MS:
                overloaded = True
                messages.append(
                    f"Step {r['step_name']}: p99 schedule lag {p99:.0f} ms - the generator sent requests late; "
                    "see the schedule-inclusive TTFT/E2E."
                )
    for w in load_warnings or []:
        messages.append(f"Input: {w}")
    return {"overloaded": overloaded, "messages": messages,
            "cpu_warning": bool(gh.get("cpu_warning")), "max_loop_lag_ms": lag, "late_dispatches_count": late}
