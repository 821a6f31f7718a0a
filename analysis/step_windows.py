"""The windows the tables are computed over: one per load step, its steady phase.

A load step's *steady window* is ``steps[i].steady_at .. steps[i].ended_at`` of the
manifest, and its requests are the records with ``step == i`` and ``phase == "steady"``
(warm-up and transitions excluded). Without steps the whole run is one window (a note
says warm-up was not excluded) whose duration is the span from the first ``sent_at_s`` to
the last end of a request.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from tokenswarm.analysis.loader import Run
from tokenswarm.analysis.per_request import derived


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
