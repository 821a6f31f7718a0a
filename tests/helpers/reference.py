"""Independent reference formulas for the glossary's per-request metrics.

Tests of the analysis compute their expectations here rather than by calling
``tokenswarm.metrics`` (the code under test builds on it, so it cannot be the oracle). Each
function is the glossary's definition written out in plain Python, one loop and no numpy,
so that a wrong vectorisation in the product cannot hide behind the same mistake here.
"""

from __future__ import annotations

from collections.abc import Sequence


def tpot_ms(ttft_ms: float | None, e2e_ms: float | None, output_tokens: int | None) -> float | None:
    """(e2e - TTFT) spread over the tokens after the first; None below two tokens."""
    if ttft_ms is None or e2e_ms is None or output_tokens is None or output_tokens < 2:
        return None
    return (e2e_ms - ttft_ms) / (output_tokens - 1)


def request_output_tps(output_tokens: int | None, e2e_ms: float | None) -> float | None:
    """Output tokens per second of wall time from send to the last byte; None without a duration."""
    if output_tokens is None or e2e_ms is None or e2e_ms <= 0:
        return None
    return output_tokens * 1000.0 / e2e_ms


def with_schedule(lag_ms: float | None, value_ms: float | None) -> float | None:
    """A latency counted from the scheduled send time: value plus the lag (a missing lag is 0)."""
    if value_ms is None:
        return None
    return value_ms + (0.0 if lag_ms is None else lag_ms)


def inter_chunk_ms(offsets_ms: Sequence[float] | None) -> list[float]:
    """Every gap between consecutive chunks, zero gaps included."""
    offsets = list(offsets_ms or ())
    return [offsets[i] - offsets[i - 1] for i in range(1, len(offsets))]


def itl_ms(offsets_ms: Sequence[float] | None, tokens: Sequence[int] | None) -> list[float]:
    """Per-token ITL samples, per delivery.

    Chunks at the same offset form one delivery. The first delivery gives no sample; each
    later delivery of ``n > 0`` tokens after a gap ``g`` gives ``n`` samples of ``g / n``; a
    delivery without tokens gives none. Without per-chunk counts each chunk is one token.
    """
    offsets = list(offsets_ms or ())
    counts = [1] * len(offsets) if tokens is None else [max(int(t), 0) for t in tokens]
    deliveries: list[tuple[float, int]] = []  # (gap before the delivery, its tokens)
    for i in range(1, len(offsets)):
        gap = offsets[i] - offsets[i - 1]
        if gap != 0 or not deliveries:
            deliveries.append((gap, counts[i]))
        else:
            lead, n = deliveries[-1]
            deliveries[-1] = (lead, n + counts[i])
    samples: list[float] = []
    for gap, n in deliveries:
        if gap != 0 and n > 0:
            samples += [gap / n] * n
    return samples


def linear_rank_neighbours(values: Sequence[float], p: float) -> tuple[float, float]:
    """The two order statistics numpy's ``linear`` p-th percentile interpolates between."""
    ordered = sorted(values)
    rank = p / 100.0 * (len(ordered) - 1)
    low = int(rank)
    return ordered[low], ordered[min(low + 1, len(ordered) - 1)]
