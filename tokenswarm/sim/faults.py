"""Fault injection, deterministic given ``--seed``.

Request-level decisions use the request's arrival index (0, 1, 2, ...); draft-model
outages are decided per window of 64 engine steps. Same seed + same arrival order ->
same faults.
"""

from __future__ import annotations

from dataclasses import dataclass

from tokenswarm.sim.textgen import unit_hash

_HTTP = {"http_500": 1, "http_503": 2, "http_429": 3}
_CUT, _STALL, _STALL_AT, _CUT_AT, _DRAFT_DOWN, _DRAFT_SLOW, _BAD_USAGE = 11, 12, 13, 14, 15, 16, 17
DRAFT_WINDOW_STEPS = 64


@dataclass(frozen=True)
class FaultConfig:
    """Rates are probabilities in [0, 1]."""

    http_500: float = 0.0
    http_503: float = 0.0
    http_429: float = 0.0
    cut: float = 0.0  #: connection cut mid-stream
    stall: float = 0.0  #: stream pauses mid-way for ``stall_s``
    stall_s: float = 5.0
    draft_unavailable: float = 0.0  #: share of step windows without a draft model
    draft_slow: float = 0.0  #: share of step windows with a slow draft model
    draft_slow_factor: float = 5.0
    #: the final usage object reports ``completion_tokens`` as ``bad_usage_value`` (raw JSON text):
    #: a server whose count no stream could carry (the client must keep the record, see security.md)
    bad_usage: float = 0.0
    bad_usage_value: str = "99999999999999999999999999999"
    seed: int = 0

    def http_fault(self, index: int) -> int | None:
        """Status code to answer instead of serving request ``index`` (or None)."""
        for name, salt in _HTTP.items():
            rate = getattr(self, name)
            if rate > 0.0 and unit_hash(self.seed, salt, index) < rate:
                return int(name[-3:])
        return None

    def cut_after_chunks(self, index: int) -> int | None:
        """Cut the connection after this many content chunks (1..4), or None."""
        if self.cut > 0.0 and unit_hash(self.seed, _CUT, index) < self.cut:
            return 1 + int(unit_hash(self.seed, _CUT_AT, index) * 4)
        return None

    def stall_after_tokens(self, index: int) -> int | None:
        """Pause the sequence once it has this many tokens (1..8), or None."""
        if self.stall > 0.0 and unit_hash(self.seed, _STALL, index) < self.stall:
            return 1 + int(unit_hash(self.seed, _STALL_AT, index) * 8)
        return None

    def bad_usage_of(self, index: int) -> bytes | None:
        """The raw ``completion_tokens`` JSON text to report for request ``index``, or None."""
        if self.bad_usage > 0.0 and unit_hash(self.seed, _BAD_USAGE, index) < self.bad_usage:
            return self.bad_usage_value.encode()
        return None

    def draft_state(self, step_index: int, _now_s: float) -> tuple[bool, float]:
        """(draft model available, draft cost factor) for an engine step."""
        w = step_index // DRAFT_WINDOW_STEPS
        if self.draft_unavailable > 0.0 and unit_hash(self.seed, _DRAFT_DOWN, w) < self.draft_unavailable:
            return False, 1.0
        if self.draft_slow > 0.0 and unit_hash(self.seed, _DRAFT_SLOW, w) < self.draft_slow:
            return True, self.draft_slow_factor
        return True, 1.0
