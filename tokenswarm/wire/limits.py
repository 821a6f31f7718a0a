"""The stream limits: what one response may carry (content events, output tokens, bytes) and the
defaults of the scenario's ``target.limits``; :class:`~tokenswarm.wire.stream.StreamState` cuts a
stream that passes them."""

from __future__ import annotations

from tokenswarm.record import MAX_PLAUSIBLE_TOKENS

__all__ = ["DEFAULT_LIMITS", "MAX_EVENTS_UNBOUNDED", "MAX_RESPONSE_BYTES", "OUTPUT_TOKENS_FACTOR", "StreamLimits"]

#: Defaults of the scenario's ``target.limits`` (docs/scenarios.md; the scenario model holds the
#: same numbers, a test keeps them equal): a conforming server sends at
#: most ``max_tokens`` tokens, so ``OUTPUT_TOKENS_FACTOR`` x ``max_tokens`` is generous slack (for
#: servers that count differently, e.g. reasoning tokens apart), and 32 MiB is far above the
#: largest real answer (a 32k-token answer with per-token JSON chunks is ~10 MB).
OUTPUT_TOKENS_FACTOR = 4.0
MAX_RESPONSE_BYTES = 32 * 1024 * 1024
#: Content events of one request without ``max_tokens`` to scale from.
MAX_EVENTS_UNBOUNDED = 1_000_000


class StreamLimits:
    """What one response may carry: content events, cumulative output tokens and bytes.

    ``max_output_tokens`` bounds every token count the server reports (``usage`` values, the
    number of content events: each carries at least one token); ``max_response_bytes`` bounds
    the SSE payload bytes. Memory per in-flight request is proportional to both.
    """

    __slots__ = ("max_output_tokens", "max_response_bytes")

    def __init__(self, max_output_tokens: int = MAX_PLAUSIBLE_TOKENS,
                 max_response_bytes: int = MAX_RESPONSE_BYTES) -> None:
        self.max_output_tokens = max_output_tokens
        self.max_response_bytes = max_response_bytes

    @classmethod
    def for_request(cls, max_tokens: int | None, factor: float = OUTPUT_TOKENS_FACTOR,
                    max_response_bytes: int = MAX_RESPONSE_BYTES) -> StreamLimits:
        """The limits of a request asking for ``max_tokens`` (``None``: not asked, no token bound
        but :data:`MAX_EVENTS_UNBOUNDED` events)."""
        if max_tokens is None or max_tokens <= 0:
            return cls(MAX_EVENTS_UNBOUNDED, max_response_bytes)
        return cls(min(MAX_PLAUSIBLE_TOKENS, max(1, int(max_tokens * factor))), max_response_bytes)


#: Limits for callers that give none: only the absolute bounds.
DEFAULT_LIMITS = StreamLimits(MAX_EVENTS_UNBOUNDED)
