"""The wall-clock anchor: one wall reading per worker, so every record's epoch times are
anchor + monotonic offset (the record stores offsets; a wall clock that steps moves no latency)."""

from __future__ import annotations


class WallAnchor:
    """One wall-clock reading per worker; epoch times are anchor + monotonic offset."""

    __slots__ = ("wall_s", "mono_s")

    def __init__(self, wall_s: float, mono_s: float) -> None:
        self.wall_s = wall_s
        self.mono_s = mono_s

    def epoch(self, mono_s: float) -> float:
        return round(self.wall_s + (mono_s - self.mono_s), 6)

    def mono(self, epoch_s: float) -> float:
        """The monotonic reading of an epoch time made by :meth:`epoch` (to the microsecond)."""
        return self.mono_s + (epoch_s - self.wall_s)
