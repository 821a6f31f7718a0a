"""The circuit breaker: a run whose requests all fail the same way stops, it does not hammer.

A wrong model, a missing route or a server that rejects every request would otherwise make
thousands of identical failures in seconds. The breaker watches finished requests from the
start of a run: if the first :data:`THRESHOLD` of them all failed with the same outcome and
HTTP status (and none succeeded), the run stops with exit status 3 and the terminal shows
what the server said. One success disarms it for the rest of the run, so failures during a
run -- a fault window, an overload -- stay data, as they must.
"""

from __future__ import annotations

from tokenswarm.redact import redact

#: identical failures, with no success before them, that stop a run
THRESHOLD = 20


class CircuitBreaker:
    """Feed it each finished request; :meth:`observe` returns the stop message once, when it trips."""

    def __init__(self, threshold: int = THRESHOLD) -> None:
        self.threshold = threshold
        self.armed = True
        self.tripped: str | None = None
        self._signature: tuple[str, int | None] | None = None
        self._count = 0
        self._last_error: str | None = None

    def observe(self, outcome: str, http_status: int | None, error: str | None) -> str | None:
        if not self.armed or outcome == "cancelled":
            return None
        if outcome == "ok":
            self.armed = False
            return None
        signature = (outcome, http_status)
        if signature != self._signature:
            self._signature, self._count = signature, 0  # a new kind of failure: count it afresh
        self._count += 1
        self._last_error = error or self._last_error
        if self._count >= self.threshold:
            self.armed = False
            status = f" {http_status}" if http_status else ""
            said = self._last_error or "(no message)"
            self.tripped = redact(f"circuit breaker: the first {self._count} requests all failed the same way "
                                  f"({outcome}{status}) and none succeeded; the server said: {said}. Stopping "
                                  f"the run (threshold: {self.threshold} identical failures before any success).")
            return self.tripped
        return None
