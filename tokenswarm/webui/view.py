"""The web UI's read-only view of the run: the only thing it knows of the run controller.

The web UI sits below the orchestration in the import layers, so it cannot import the
controller; instead it names what it reads here (:class:`RunView`) and the controller
implements it. :meth:`RunView.snapshot` returns a frozen :class:`RunSnapshot` taken at the
moment of the call: a route or a chart sample reads one consistent picture of the run, and
nothing in the web UI can change the run by assigning to it.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


@dataclass(frozen=True)
class RunSnapshot:
    """What the web UI shows of the current run (``run_id is None``: no run has started)."""

    run_id: str | None = None
    run_dir: Path | None = None
    started_at: float | None = None  # epoch seconds
    ended_at: float | None = None  # epoch seconds, once the manifest is final
    finished: bool = False  # the run stopped (its last records may still be arriving)
    complete: bool = False  # the manifest is final: every record is written
    in_flight: int | None = None  # requests under way, over all workers
    step_name: str | None = None
    phase: str | None = None
    #: the newest successful scrape of the target's /metrics, or None
    target_scrape: dict[str, Any] | None = None


class RunView(Protocol):
    """The run as the web UI reads it."""

    @property
    def live(self) -> Any:
        """The live (approximate) statistics: a :class:`tokenswarm.load.livestats.LiveStats`."""

    def snapshot(self) -> RunSnapshot:
        """The run as it is now."""
