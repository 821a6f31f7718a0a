"""Generator health: was the load generator itself the bottleneck? Shown at the top of reports.

Sources: ``manifest.generator_health`` (``cpu_warning``, ``max_loop_lag_ms``,
``late_dispatches``), ``manifest.warnings``, lost records (``totals.records_lost``, workers'
``missing_seqs``/``lost_reason``) and the measured schedule lag of open-loop steps.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from tokenswarm.manifest import RunManifest

#: Event-loop lag above which the generator is called overloaded.
LOOP_LAG_LIMIT_MS = 100.0
#: p99 schedule lag of an open-loop step above which sends were late.
SCHEDULE_LAG_P99_LIMIT_MS = 100.0
#: p99 of a step's send_delay_ms (the generator's own delay before a send) above which the
#: generator was late: the load it offered was not the load planned.
SEND_DELAY_P99_LIMIT_MS = 1.0


#: A dispatch this late (ms) counts as late (the generator's own threshold, load/context.py).
LATE_DISPATCH_MS = 10.0


def _steady_windows(manifest: RunManifest) -> list[tuple[str, float, float]]:
    """``(step name, start, end)`` of every measured window; the whole run without steps."""
    out = [(s.name, s.steady_at, s.ended_at) for s in manifest.steps
           if s.steady_at is not None and s.ended_at is not None]
    if not out and not manifest.steps and manifest.started_at is not None and manifest.ended_at is not None:
        out = [("run", manifest.started_at, manifest.ended_at)]
    return out


def _in_figures(manifest: RunManifest) -> tuple[bool, list[str]] | None:
    """Whether the generator's stalls (CPU, event-loop lag) fell inside a measured window.

    ``(in_figures, step names)`` from the recorded untrusted windows (``[start, end, reason]``,
    :mod:`tokenswarm.load.health`); ``None`` when the run recorded none of that (older runs):
    then every stall is taken as in the figures.
    """
    if "untrusted_windows" not in manifest.generator_health:
        return None
    spans = [w for w in manifest.generator_health.get("untrusted_windows") or []
             if isinstance(w, (list, tuple)) and len(w) >= 2]
    steps = [name for name, a, b in _steady_windows(manifest)
             if any(float(w[0]) < b and float(w[1]) > a for w in spans)]
    return bool(steps), steps


@dataclass
class _Overload:
    """What the checks found: the messages, and whether (and where) delays were in the figures."""

    messages: list[str] = field(default_factory=list)
    overloaded: bool = False
    whole_run: bool = False
    steps: set[str] = field(default_factory=set)

    def hit(self, steps: Sequence[str] | None) -> None:
        """Delays in the figures: in these steps, or (None) anywhere in the run."""
        self.overloaded = True
        if steps is None:
            self.whole_run = True
        else:
            self.steps.update(steps)


def _stall_checks(gh: Mapping[str, Any], placed: tuple[bool, list[str]] | None, found: _Overload) -> None:
    """A saturated CPU or a stalled event loop: an overload when inside a steady window (or not placed)."""
    in_figures = placed is None or placed[0]
    where = "" if placed is None else (
        f" (inside the steady window of step(s) {', '.join(placed[1])})" if placed[0]
        else " (outside every steady window: not in the figures)")
    stalled = False
    if gh.get("cpu_warning"):
        stalled = True
        found.messages.append("Load generator CPU was saturated (cpu_warning)" + where
                              + (": latencies include client-side delay." if in_figures else "."))
    lag = gh.get("max_loop_lag_ms")
    if lag is not None and lag > LOOP_LAG_LIMIT_MS:
        stalled = True
        found.messages.append(f"Generator event-loop lag reached {lag:.0f} ms (> {LOOP_LAG_LIMIT_MS:.0f} ms){where}.")
    if stalled and in_figures:
        found.hit(None if placed is None else placed[1])


def _late_dispatch_check(late: int | None, rows: Sequence[Mapping[str, Any]] | None, found: _Overload) -> None:
    """Late dispatches: an overload in the steps whose schedule lag shows them (the whole run without rows)."""
    if not late:
        return
    late_steps = [str(r.get("step_name")) for r in rows or []
                  if r.get("task") == "all" and (r.get("schedule_lag_max_ms") or 0.0) > LATE_DISPATCH_MS]
    if rows is None or late_steps:
        found.hit(None if rows is None else late_steps)
    found.messages.append(f"{late} request(s) were dispatched late by the generator"
                          + (f" (steps {', '.join(late_steps)})." if late_steps else
                             "." if rows is None else ", none inside a steady window: not in the figures."))


def _recorded_problems(manifest: RunManifest, placed: tuple[bool, list[str]] | None) -> list[str]:
    """The run's own warnings, and records lost between workers and master."""
    messages = []
    for text in manifest.warnings:
        if placed is not None and text.startswith("the load generator was a bottleneck"):
            # the recorder's words say "inflated"; say whether a measured window was concerned
            text += (f" (inside the steady window of step(s) {', '.join(placed[1])})" if placed[0]
                     else " (all outside the steady windows: not in the figures)")
        messages.append(f"Run warning: {text}")
    lost = manifest.totals.records_lost
    if lost:
        messages.append(f"{lost} record(s) were lost between workers and master: counts are incomplete.")
    for w in manifest.workers:
        if w.get("missing_seqs") or w.get("lost_reason"):
            messages.append(
                f"Worker {w.get('worker_id')}: missing seqs {w.get('missing_seqs')!r}, lost reason {w.get('lost_reason')!r}."
            )
    return messages


def _open_loop_lag_check(rows: Sequence[Mapping[str, Any]], found: _Overload) -> None:
    """An open-loop step whose sends were late (p99 schedule lag): an overload in that step."""
    for r in rows:
        if r.get("task") == "all" and r.get("step_kind") == "rate":
            p99 = r.get("schedule_lag_p99_ms")
            if p99 is not None and p99 > SCHEDULE_LAG_P99_LIMIT_MS:
                found.hit([str(r["step_name"])])
                found.messages.append(
                    f"Step {r['step_name']}: p99 schedule lag {p99:.0f} ms - the generator sent requests late; "
                    "see the schedule-inclusive TTFT/E2E."
                )


def _late_send_steps(rows: Sequence[Mapping[str, Any]], found: _Overload) -> list[Any]:
    """Steps where the generator's own send delay was long: a warning (outside TTFT), not an overload."""
    late_sends = []
    for r in rows:
        p99 = r.get("send_delay_p99_ms") if r.get("task") == "all" else None
        if p99 is not None and p99 > SEND_DELAY_P99_LIMIT_MS:
            late_sends.append(r.get("step_name"))
            found.messages.append(
                f"Step {r.get('step_name')}: p99 send delay {p99:.1f} ms (> {SEND_DELAY_P99_LIMIT_MS:g} ms) - the "
                "generator was late sending requests there (its own delay, not in TTFT; see send_delay_ms)."
            )
    return late_sends


def generator_health(manifest: RunManifest, rows: Sequence[Mapping[str, Any]] | None = None,
                     load_warnings: list[str] | None = None) -> dict[str, Any]:
    """``{"overloaded": bool, "messages": [...], ...}``; ``overloaded`` means results are suspect.

    ``overloaded`` (the red banner, and "suspect" in a study) is set only for delays that were
    in the figures: a CPU or event-loop stall inside a step's steady window (the recorded
    untrusted windows; a run that recorded none is judged by its peaks), late dispatches that
    show in a step's schedule lag, an open-loop step whose sends were late. ``overloaded_steps``
    names the steps concerned (``None``: the whole run). A stall outside every steady window
    and the generator's own send delay (outside TTFT) are warnings, not an overload.
    """
    gh = manifest.generator_health
    placed = _in_figures(manifest)
    found = _Overload()
    _stall_checks(gh, placed, found)
    late = gh.get("late_dispatches")
    _late_dispatch_check(late, rows, found)
    found.messages += _recorded_problems(manifest, placed)
    _open_loop_lag_check(rows or [], found)
    late_sends = _late_send_steps(rows or [], found)
    timing = timing_summary(manifest)
    found.messages += timing["messages"]
    found.messages += [f"Input: {text}" for text in load_warnings or []]
    overloaded = found.overloaded
    return {"overloaded": overloaded,
            "overloaded_steps": None if found.whole_run or not overloaded else sorted(found.steps),
            "messages": found.messages,
            "cpu_warning": bool(gh.get("cpu_warning")), "max_loop_lag_ms": gh.get("max_loop_lag_ms"),
            "late_dispatches_count": late,
            "late_send_steps": late_sends, "timing_paths": timing["paths"], "timing_counters": timing["counters"],
            "sweeps_by_period_ms": timing["sweeps_by_period_ms"]}


#: Counters of ``workers[].timing`` that mean some arrival times were coarser than the path
#: promises, or that requests went out later than due, and what to say about them.
_TIMING_FALLBACKS = {
    "one_stamp_many_chunks_reads_count": "read(s) held more chunks than the fast path dates apart and kept one "
                                         "arrival time for all of them",
    "notes_dropped_count": "arrival note(s) were dropped (a stream's note buffer was full): those bytes were "
                           "dated by a later note",
    "notes_over_cap_count": "arrival note(s) fell in reads that held more notes than are used: those bytes were "
                            "dated by a later note",
    "stale_connection_retries_count": "request(s) met a kept-alive connection the server had already closed and "
                                      "were sent again on a new one (the lost attempt is in their send_delay_ms)",
    "kernel_dated_sends_count": "request(s) were held up inside their send (the generator was descheduled or its "
                                "loop stalled): their send time is the kernel's, to 1-4 ms",
}


def timing_summary(manifest: RunManifest) -> dict[str, Any]:
    """The timing paths the workers ran (``manifest.workers[].timing``), their summed counters
    and sweeps by sweep period (milliseconds, as text, in order of period), and messages for
    paths without kernel stamps and for every fallback that happened."""
    paths: list[str] = []
    counters: dict[str, int] = {}
    sweeps_by_period: dict[float, int] = {}
    messages: list[str] = []
    for w in manifest.workers:
        t = w.get("timing")
        if not isinstance(t, dict):
            continue
        parts = [f"{t.get('reader', '?')} reader"]
        parts.append("native fast path" if t.get("native_fast_path") else "Python parsers")
        parts.append("kernel stamps" if t.get("kernel_stamps") else "no kernel stamps")
        parts.append("arrival watcher" if t.get("arrival_watcher") else "no arrival watcher")
        lo, hi = t.get("read_batch_ms"), t.get("read_batch_max_ms")
        if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) and hi > lo:  # older manifests: no range
            parts.append(f"sweeps every {lo:g}-{hi:g} ms as the streams' gaps allow")
        if t.get("overrides"):
            parts.append("overrides " + ", ".join(f"{k}={v}" for k, v in sorted(t["overrides"].items())))
        desc = ", ".join(parts)
        if desc not in paths:
            paths.append(desc)
        if not t.get("kernel_stamps"):
            messages.append(f"Worker {w.get('worker_id')}: no kernel receive stamps - arrival times are when "
                            "reads returned, so they include the generator's own delays.")
        for k, v in (t.get("counters") or {}).items():
            if isinstance(v, int):
                counters[k] = counters.get(k, 0) + v
        for period, n in (t.get("sweeps_by_period_ms") or {}).items():  # older manifests: none
            if isinstance(n, int):
                sweeps_by_period[float(period)] = sweeps_by_period.get(float(period), 0) + n
    for k, text in _TIMING_FALLBACKS.items():
        if counters.get(k):
            messages.append(f"Timing: {counters[k]} {text}.")
    return {"paths": paths, "counters": counters, "messages": messages,
            "sweeps_by_period_ms": {f"{p:g}": n for p, n in sorted(sweeps_by_period.items())}}
