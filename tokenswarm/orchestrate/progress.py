"""What the run says while it goes: the terminal progress line and the live window summaries.

Both read the *live* statistics (:mod:`tokenswarm.load.livestats`: log-bucketed histograms,
within 1 % of the true value); the exact percentiles come later from the records. Pure
functions of their inputs, so a test can check a line without a Locust runner.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import gevent

from tokenswarm.load.livestats import LiveStats, snapshot, summary_rows, window_summary
from tokenswarm.orchestrate.adaptive import AdaptiveRun
from tokenswarm.workload.steps import StepMachine


def fmt(v: float | None) -> str:
    """A millisecond figure as the progress line prints it (``-`` when there is none yet)."""
    return "-" if v is None else f"{v:.0f}"


def step_label(step_name: str | None, phase: str | None, machine: StepMachine | None) -> str:
    """``c4 steady (2/5, 40s left)``: the step, its phase and the plan's position."""
    if not step_name:
        return "-"
    label = f"{step_name} {phase}"
    if machine is not None:
        left = machine.remaining_s(time.perf_counter())
        if machine.after is not None:  # a search or sweep: the plan's length is not known in advance
            where = f"probe {machine.index + 1}"
            state = {"steady": "window extended", "drain": "finishing its requests"}.get(machine.phase or "", "ramping")
        else:
            where, state = f"{machine.index + 1}/{len(machine.steps)}", "ramping"
        label += f" ({where}" + (f", {left:.0f}s left)" if left is not None else f", {state})")
    return label


def progress_line(live: LiveStats, *, step: str, users: int, in_flight: int, late_dispatches: int) -> str:
    """One ``[tokenswarm] ...`` line: load, throughput, errors and live (approximate) latencies."""
    tok_s, req_s, _ = live.rate(10)
    total = [r for r in summary_rows(live, []) if r["name"] == "Total"][0]
    line = (f"[tokenswarm] step {step} | users {users} | in flight {in_flight} | "
            f"out {tok_s:.0f} tok/s | {req_s:.1f} req/s | errors {total['failures']} | "
            f"live TTFT p50 {fmt(total['live_ttft_p50_ms'])} p99 {fmt(total['live_ttft_p99_ms'])} ms | "
            f"live TPOT p50 {fmt(total['live_tpot_p50_ms'])} ms")
    if late_dispatches:
        line += f" | WARNING generator behind schedule: {late_dispatches} late dispatches"
    return line


def live_window_doc(live: LiveStats, prev_t: float, prev: Any, now_t: float, *, step: str | None,
                    phase: str | None, generator: dict[str, Any] | None,
                    untrusted_windows: int) -> tuple[dict[str, Any], Any]:
    """The ``live_summary.json`` document of the window ``prev_t .. now_t`` and the snapshot it ends on."""
    total = live.total()
    doc = {"written_at": round(now_t, 3), "window_start": round(prev_t, 3), "window_end": round(now_t, 3),
           "step": step, "phase": phase, "window": window_summary(total, prev, now_t - prev_t),
           "cumulative": {"requests": total.requests, "failures": total.failures,
                          "output_tokens": total.output_tokens},
           "generator": generator, "untrusted_windows": untrusted_windows}
    return doc, snapshot(total)


def run_progress_line(live: LiveStats, ctx: Any, machine: StepMachine | None, adaptive: AdaptiveRun | None, *,
                      users: int, in_flight: int, late_dispatches: int) -> str:
    """The run's progress line: the step (of ``ctx``, the run context), the live figures, and
    adaptive steps' counts towards their stopping rule."""
    step = step_label(ctx.step_name if ctx else None, ctx.phase if ctx else None, machine)
    line = progress_line(live, step=step, users=users, in_flight=in_flight, late_dispatches=late_dispatches)
    if adaptive is not None and ctx is not None and ctx.step_index is not None:
        line += " | " + adaptive.progress(ctx.step_index)
    return line


def report_periodically(summary_interval_s: float, flush: Callable[[], None], line: Callable[[], str] | None,
                        write_summary: Callable[[], None], tick_s: float = 5.0) -> None:
    """Every ``tick_s`` (a greenlet, until killed): flush the records, print the progress
    ``line`` (headless runs), and every ``summary_interval_s`` write the live window."""
    next_summary = time.monotonic() + summary_interval_s
    while True:
        gevent.sleep(tick_s)
        flush()
        if line is not None:
            print(line(), flush=True)
        if time.monotonic() >= next_summary:
            next_summary += summary_interval_s
            write_summary()
