"""How often the stream poller sweeps its sockets: as seldom as the streams allow (pure).

With kernel receive stamps a read is dated by when its newest segment arrived, whenever the
read happens. A late read costs nothing as long as it holds one event. Two events of a stream
that arrive between two sweeps, though, are read together and share the newer one's stamp:
the older is dated late by the gap between them. So the sweep period must stay below the
shortest gap between a stream's events, and no longer.

Each wake-up of the event loop costs the process far more than the sweep itself (measured on
a 2-core VM: 21-36 us of CPU per timer wake-up, against ~1 us for the epoll call and the
bookkeeping), and a dozen active streams cannot fill a 1 ms sweep: at 12 streams of 5 ms
chunks the loop woke 1,000 times a second for 2,400 chunks. :class:`SweepPeriod` lengthens the
period from ``floor_s`` (1 ms) up to ``ceiling_s`` while the streams' own gaps allow it:

* every read of one event after a stream's first gives its gap since that stream's previous
  read (kernel stamps both), and the period is at most ``SAFETY`` (3/4) of the shortest gap
  seen in the last two windows of ``window_s``;
* a read that holds two or more events in the middle of a stream (not its first read, not its
  last) may be two arrivals that one sweep caught together: the period drops to the floor at
  once and stays there for two windows;
* without enough evidence (``min_reads`` gaps in a window) the period is the floor.

A stream whose gaps shrink suddenly below the period loses at most that gap on an event (an
event is dated by the newest arrival read with it, never later than the next event), and its
first crowded read brings the period back to the floor.
"""

from __future__ import annotations

import math

#: The period is at most this share of the shortest recent gap between a stream's reads: that
#: shortest is already the extreme of thousands of gaps (0.25-0.5 s of them); a quarter more
#: keeps a jittery stream's next gaps above the period too (5 ms steps: shortest 3.9, period 2.5).
SAFETY = 0.75
#: Periods are whole multiples of this (fewer timer re-creations; 0.5 ms steps).
STEP_S = 0.0005


class SweepPeriod:
    """The sweep period, from the gaps and crowded reads the readers report (no I/O, no clock:
    the caller passes the time)."""

    __slots__ = ("floor_s", "ceiling_s", "window_s", "min_reads", "period_s", "window_start_s", "window_min_s",
                 "window_reads", "previous_min_s", "crowded_count", "changes_count", "sweeps_by_period_s")

    def __init__(self, floor_s: float, ceiling_s: float, *, window_s: float = 0.25, min_reads: int = 20) -> None:
        if not 0 < floor_s <= ceiling_s:
            raise ValueError(f"sweep period: need 0 < floor ({floor_s}) <= ceiling ({ceiling_s})")
        self.floor_s = floor_s
        self.ceiling_s = ceiling_s
        self.window_s = window_s
        self.min_reads = min_reads
        self.period_s = floor_s
        self.window_start_s: float | None = None
        self.window_min_s = math.inf  # shortest gap of the current window
        self.window_reads = 0
        self.previous_min_s = math.inf  # and of the window before
        self.crowded_count = 0  # crowded reads seen (each one sets the floor)
        self.changes_count = 0  # times the period changed
        #: sweeps run at each period (the period in force when :meth:`update` was called): what
        #: the streams' gaps let the sweeps be, for the manifest
        self.sweeps_by_period_s: dict[float, int] = {}

    @property
    def adaptive(self) -> bool:
        return self.ceiling_s > self.floor_s

    def gap(self, gap_s: float) -> None:
        """A stream read one event ``gap_s`` after its previous read."""
        self.window_reads += 1
        if gap_s < self.window_min_s:
            self.window_min_s = gap_s

    def crowded(self) -> bool:
        """A read in the middle of a stream held two or more events (or bytes whose events the
        reader cannot date apart). True if the period changed (the caller re-arms its timer)."""
        self.crowded_count += 1
        self.window_min_s = 0.0  # this window and the next keep the floor
        return self._set(self.floor_s)

    def update(self, now_s: float) -> bool:
        """A sweep runs now (called once per sweep): count it at the period in force, and close
        the window if ``window_s`` has passed; True if the period changed."""
        counts = self.sweeps_by_period_s
        counts[self.period_s] = counts.get(self.period_s, 0) + 1
        start = self.window_start_s
        if start is None:
            self.window_start_s = now_s
            return False
        if now_s - start < self.window_s:
            return False
        shortest = min(self.window_min_s, self.previous_min_s)
        enough = self.window_reads >= self.min_reads
        self.previous_min_s = self.window_min_s if enough else 0.0  # a thin window is no evidence
        self.window_min_s, self.window_reads, self.window_start_s = math.inf, 0, now_s
        if not enough or math.isinf(shortest):
            return self._set(self.floor_s)
        allowed = math.floor(shortest * SAFETY / STEP_S + 1e-9) * STEP_S
        return self._set(min(self.ceiling_s, max(self.floor_s, allowed)))

    def _set(self, period_s: float) -> bool:
        if period_s == self.period_s:
            return False
        self.period_s = period_s
        self.changes_count += 1
        return True
