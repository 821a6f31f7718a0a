"""Open-loop arrival processes (pure; the RNG is injected).

``poisson``: exponential inter-arrival times with mean ``1/rate``. ``gamma``: gamma
inter-arrival times with shape ``burstiness`` and the same mean (``burstiness < 1`` is
burstier than Poisson, ``> 1`` smoother; 1 is Poisson) -- vLLM bench's convention.
``constant``: exactly ``1/rate``. Nothing is rescaled after sampling, so the arrivals
follow the documented process.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from itertools import takewhile

ARRIVAL_KINDS = ("poisson", "gamma", "constant")


class ArrivalProcess:
    """Inter-arrival times of one open-loop source."""

    __slots__ = ("rate_per_s", "kind", "burstiness", "rng")

    def __init__(self, rate_per_s: float, kind: str = "poisson", burstiness: float = 1.0,
                 rng: random.Random | None = None) -> None:
        if kind not in ARRIVAL_KINDS:
            raise ValueError(f"arrival kind {kind!r}: expected one of {ARRIVAL_KINDS}")
        if rate_per_s <= 0:
            raise ValueError(f"arrival rate must be > 0, got {rate_per_s}")
        if burstiness <= 0:
            raise ValueError(f"burstiness must be > 0, got {burstiness}")
        self.rate_per_s = rate_per_s
        self.kind = kind
        self.burstiness = burstiness
        self.rng = rng or random.Random()

    def next_interval_s(self) -> float:
        if self.kind == "constant":
            return 1.0 / self.rate_per_s
        if self.kind == "poisson" or self.burstiness == 1.0:
            return self.rng.expovariate(self.rate_per_s)
        return self.rng.gammavariate(self.burstiness, 1.0 / (self.rate_per_s * self.burstiness))


def schedule(start_s: float, process: ArrivalProcess) -> Iterator[float]:
    """The planned send times after ``start_s``, without end: the one schedule the open-loop
    user dispatches by (it starts a new one from its last send time when the rate changes)."""
    t = start_s
    while True:
        t += process.next_interval_s()
        yield t


def arrival_times(start_s: float, duration_s: float, process: ArrivalProcess) -> list[float]:
    """The planned send times in ``[start_s, start_s + duration_s)``."""
    end = start_s + duration_s
    return list(takewhile(lambda t: t < end, schedule(start_s, process)))
