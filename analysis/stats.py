"""Statistics used by every table: exact percentiles, bootstrap, trend tests. numpy only.

Percentiles
    Exact, from the raw values, numpy's default ``method="linear"`` (Hyndman & Fan type 7):
    with ``n`` sorted values and ``h = (n - 1) * p / 100`` the result is
    ``x[floor(h)] + (h - floor(h)) * (x[floor(h) + 1] - x[floor(h)])``. Weighted percentiles
    (per-token ITL, where a chunk of ``n`` tokens stands for ``n`` equal samples) give exactly
    what ``np.percentile`` returns on the expanded samples, without expanding them.
Bootstrap
    Percentile bootstrap, each run resampled independently, seeded ``numpy.random.Generator``.
    Quantile statistics use the order-statistic identity: in a resample of size ``n`` drawn
    from sorted ``x``, the k-th smallest value is ``x[floor(n * U)]`` with
    ``U ~ Beta(k, n - k + 1)`` (and the (k+1)-th is ``U + (1 - U) * Beta(1, n - k)``), so each
    replicate costs O(1) instead of O(n) while having exactly the bootstrap distribution.
    Means use direct resampling when ``n * B`` is small and the normal limit of the bootstrap
    (``N(mean, s^2 / n)``) otherwise.
Trend
    Mann-Kendall test (normal approximation with tie correction, two-sided) for significance
    and the Theil-Sen slope (median of pairwise slopes) for the size of a drift.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np

from tokenswarm.metrics import SAMPLES_PER_TAIL as SAMPLES_PER_TAIL  # re-exported: the glossary's rule
from tokenswarm.metrics import min_samples_for as min_samples_for
from tokenswarm.names import PERCENTILE_KEYS as PERCENTILE_KEYS  # re-exported: the table of names'
from tokenswarm.names import PERCENTILES as PERCENTILES
from tokenswarm.names import SummaryMetric

PERCENTILE_METHOD = "numpy.percentile method='linear' (Hyndman-Fan type 7) on the raw values"


def _lerp(a: Any, b: Any, t: Any) -> np.ndarray:  # a, b, t: arrays or numpy scalars
    # numpy's own interpolation formula (numpy/lib/_function_base_impl.py::_lerp), so results agree bit for bit.
    diff = b - a
    out = np.asarray(a + diff * t, dtype=np.float64)
    return np.where(t >= 0.5, b - diff * (1 - t), out)


def percentiles_sorted(x_sorted: np.ndarray, ps: Sequence[float] = PERCENTILES) -> np.ndarray:
    """``np.percentile(x, ps)`` (linear method) for an already sorted, non-empty array."""
    n = x_sorted.shape[0]
    q = np.asarray(ps, dtype=np.float64) / 100.0
    h = q * (n - 1)
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, n - 1)
    a = x_sorted[lo].astype(np.float64)
    b = x_sorted[hi].astype(np.float64)
    return _lerp(a, b, h - lo)


def weighted_percentiles_sorted(
    v_sorted: np.ndarray, cum_weights: np.ndarray, ps: Sequence[float] = PERCENTILES
) -> np.ndarray:
    """Percentiles of the multiset where value ``v_sorted[i]`` occurs ``w[i]`` times.

    ``cum_weights`` is ``np.cumsum(w)`` of non-negative integer weights (total > 0). The
    result equals ``np.percentile(np.repeat(v_sorted, w), ps)``.
    """
    total = int(cum_weights[-1])
    q = np.asarray(ps, dtype=np.float64) / 100.0
    h = q * (total - 1)
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, total - 1)
    # Expanded index i holds v[j] with j = first position whose cumulative weight exceeds i.
    a = v_sorted[np.searchsorted(cum_weights, lo, side="right")].astype(np.float64)
    b = v_sorted[np.searchsorted(cum_weights, hi, side="right")].astype(np.float64)
    return _lerp(a, b, h - lo)


def percentiles_failed_as_inf(
    x_sorted: np.ndarray, n_failed: int, ps: Sequence[float] = PERCENTILES
) -> list[float | None]:
    """Percentiles when each failed request counts as an infinitely slow one.

    ``None`` where the percentile falls into (or interpolates with) the failure mass: the
    honest answer then is "unbounded". Equals ``np.percentile`` on ``x + [inf] * n_failed``
    wherever that is finite.
    """
    n_ok = x_sorted.shape[0]
    total = n_ok + n_failed
    if total == 0:
        return [None for _ in ps]
    out: list[float | None] = []
    for p in ps:
        h = (p / 100.0) * (total - 1)
        lo = math.floor(h)
        frac = h - lo
        hi = min(lo + 1, total - 1)
        if lo >= n_ok or (frac > 0 and hi >= n_ok):
            out.append(None)
        elif hi >= n_ok:  # frac == 0: exactly the last successful value
            out.append(float(x_sorted[lo]))
        else:
            out.append(float(_lerp(np.float64(x_sorted[lo]), np.float64(x_sorted[hi]), np.float64(frac))))
    return out


def describe(
    values: np.ndarray,
    metric: SummaryMetric,
    n_failed: int | None = None,
    weights: np.ndarray | None = None,
    failed_share: float | None = None,
) -> dict[str, float | int | None]:
    """Percentiles, mean, min, max and count of ``values`` (NaN already removed).

    Keys are ``metric.key(stat)`` (``TTFT`` -> ``ttft_p99_ms``, ``ttft_count``: the table of
    names, tokenswarm.names). With ``n_failed`` the share of failed requests (excluded from
    these values) is added as ``failed_share`` and the failures-as-infinite percentiles as
    ``pNN_failed_as_inf``. With integer ``weights`` every value counts
    ``weight`` times (``count`` is then the number of expanded samples). For metrics with
    several samples per request (ITL, inter-chunk gaps) pass ``failed_share`` (the share of
    failed *requests*) instead of ``n_failed``; no failures-as-infinite percentiles then.
    """
    out: dict[str, float | int | None] = {}
    key = metric.key
    if weights is not None:
        keep = weights > 0
        values, weights = values[keep], weights[keep]
    n = int(values.shape[0]) if weights is None else int(weights.sum())
    if n == 0:
        for k in PERCENTILE_KEYS + ("mean", "min", "max"):
            out[key(k)] = None
        out[key("count")] = 0
        if failed_share is not None:
            out[key("failed_share")] = failed_share
        elif n_failed is not None:
            out[key("failed_share")] = None if n_failed == 0 else 1.0
            for k in PERCENTILE_KEYS:
                out[key(f"{k}_failed_as_inf")] = None
        return out
    if weights is None:
        xs = _order_statistics(values, n_failed)
        pct = percentiles_sorted(xs, PERCENTILES)
        mean = float(np.mean(xs, dtype=np.float64))
    else:
        if values.dtype == np.float32 and values.size > 100_000:
            pct = weighted_percentiles_select(values, weights, PERCENTILES)
            xs = np.array([values.min(), values.max()])
        else:
            xs, w = sort_weighted(values, weights)
            pct = weighted_percentiles_sorted(xs, np.cumsum(w, dtype=np.int64), PERCENTILES)
        mean = float(np.dot(values.astype(np.float64), weights.astype(np.float64)) / n)
    for k, v in zip(PERCENTILE_KEYS, pct):
        out[key(k)] = float(v)
    out[key("mean")] = mean
    out[key("min")] = float(xs[0])
    out[key("max")] = float(xs[-1])
    out[key("count")] = n
    if failed_share is not None:
        out[key("failed_share")] = failed_share
    elif n_failed is not None:
        out[key("failed_share")] = n_failed / (n + n_failed)
        if weights is None:
            for k, v in zip(PERCENTILE_KEYS, percentiles_failed_as_inf(xs, n_failed, PERCENTILES)):
                out[key(f"{k}_failed_as_inf")] = v
    return out


def _order_statistics(values: np.ndarray, n_failed: int | None) -> np.ndarray:
    """``values`` arranged so that every index :func:`describe` reads holds the sorted array's value.

    The percentiles (also with failures as infinite), min and max read a few ranks only:
    ``np.partition`` on those ranks is O(n), a full sort O(n log n) -- the difference at
    soak scale (10 million requests). Small arrays are simply sorted.
    """
    n = values.shape[0]
    if n < 100_000:
        return np.sort(values)
    ranks = {0, n - 1}
    for total in {n, n + (n_failed or 0)}:
        h = np.asarray(PERCENTILES) / 100.0 * (total - 1)
        for r in np.concatenate([np.floor(h), np.minimum(np.floor(h) + 1, total - 1)]).astype(np.int64).tolist():
            if r < n:
                ranks.add(r)
    return np.partition(values, sorted(ranks))


def sort_weighted(values: np.ndarray, weights: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sort float values together with their non-negative integer weights.

    float32 values and weights below 2**32 are packed into one uint64 key (order-preserving
    float bits in the high half) so a single fast ``np.sort`` replaces a slower argsort.
    """
    if values.dtype == np.float32 and (weights.size == 0 or int(weights.max()) < 2**32):
        bits = values.view(np.uint32)
        # Order-preserving map of IEEE-754 bits: negatives flip all bits, positives flip the sign bit.
        key = np.where(bits >> 31 == 1, ~bits, bits | np.uint32(0x80000000)).astype(np.uint64)
        key <<= np.uint64(32)
        key |= weights.astype(np.uint64)
        key.sort()
        hi = (key >> np.uint64(32)).astype(np.uint32)
        w = (key & np.uint64(0xFFFFFFFF)).astype(np.int64)
        del key
        bits = np.where(hi >> 31 == 1, hi & np.uint32(0x7FFFFFFF), ~hi)
        return bits.view(np.float32), w
    order = np.argsort(values, kind="stable")
    return values[order], weights[order].astype(np.int64)


def _sortable_bits(values: np.ndarray) -> np.ndarray:
    bits = values.view(np.uint32)
    # negatives: flip all bits; non-negatives: flip the sign bit (one xor instead of a where)
    return bits ^ ((bits >> np.uint32(31)) * np.uint32(0x7FFFFFFF) | np.uint32(0x80000000))


def weighted_percentiles_select(
    values: np.ndarray, weights: np.ndarray, ps: Sequence[float] = PERCENTILES
) -> np.ndarray:
    """Same result as :func:`weighted_percentiles_sorted` for float32 values, in O(n).

    Radix selection: a weighted histogram over the top 16 order-preserving bits of each value
    locates the buckets holding the needed expanded ranks; only those buckets are sorted.
    """
    key = _sortable_bits(values)
    bucket = (key >> np.uint32(16)).astype(np.intp)
    del key
    w = weights.astype(np.int64)
    counts = np.bincount(bucket, weights=w, minlength=65536).astype(np.int64)
    cum = np.cumsum(counts)
    total = int(cum[-1])
    q = np.asarray(ps, dtype=np.float64) / 100.0
    h = q * (total - 1)
    lo = np.floor(h).astype(np.int64)
    hi = np.minimum(lo + 1, total - 1)
    ranks = np.concatenate([lo, hi])
    need = np.unique(np.searchsorted(cum, ranks, side="right"))
    mark = np.zeros(65536, dtype=bool)
    mark[need] = True
    sel = mark[bucket]
    sub_v, sub_w = sort_weighted(values[sel], w[sel])
    sub_cw = np.cumsum(sub_w)
    # Rank r (global) in bucket b sits at r - (weight before b) + (weight of selected buckets before b).
    before = cum - counts
    sel_before = np.cumsum(np.where(mark, counts, 0)) - np.where(mark, counts, 0)
    b_of = np.searchsorted(cum, ranks, side="right")
    local = ranks - before[b_of] + sel_before[b_of]
    vals = sub_v[np.searchsorted(sub_cw, local, side="right")].astype(np.float64)
    a, b = vals[: len(ps)], vals[len(ps):]
    return _lerp(a, b, h - lo)


# --------------------------------------------------------------------------- bootstrap


def bootstrap_percentiles(
    x_sorted: np.ndarray, ps: Sequence[float], n_boot: int, rng: np.random.Generator
) -> np.ndarray:
    """Bootstrap replicates of ``np.percentile(resample, p)``: array of shape ``(len(ps), n_boot)``.

    Uses the order-statistic identity from the module docstring (exact bootstrap
    distribution, O(n_boot) per percentile once ``x_sorted`` is sorted).
    """
    n = x_sorted.shape[0]
    out = np.empty((len(ps), n_boot))
    for i, p in enumerate(ps):
        h = (p / 100.0) * (n - 1)
        lo = math.floor(h)
        frac = h - lo
        k = lo + 1  # 1-based rank of the lower order statistic in the resample
        u_k = rng.beta(k, n - k + 1, size=n_boot)
        a = x_sorted[np.minimum((u_k * n).astype(np.int64), n - 1)].astype(np.float64)
        if frac > 0 and k < n:
            u_k1 = u_k + (1.0 - u_k) * rng.beta(1, n - k, size=n_boot)
            b = x_sorted[np.minimum((u_k1 * n).astype(np.int64), n - 1)].astype(np.float64)
            out[i] = _lerp(a, b, np.full(n_boot, frac))
        else:
            out[i] = a
    return out


def bootstrap_means(
    x: np.ndarray, n_boot: int, rng: np.random.Generator, max_cells: int = 5_000_000
) -> np.ndarray:
    """Bootstrap replicates of the mean: direct resampling while ``n * n_boot <= max_cells``
    (in vectorised batches), otherwise the bootstrap's normal limit ``N(mean, var / n)``."""
    n = x.shape[0]
    if n * n_boot <= max_cells:
        idx = rng.integers(0, n, size=(n_boot, n))
        reps: np.ndarray = x[idx].mean(axis=1)
        return reps
    sd = float(np.std(x)) / math.sqrt(n)
    return float(np.mean(x)) + sd * rng.standard_normal(n_boot)


def ratio_ci(num_reps: np.ndarray, den_reps: np.ndarray, level: float = 0.95) -> tuple[float | None, float | None]:
    """Percentile-bootstrap CI of ``num / den`` from paired replicate arrays."""
    with np.errstate(divide="ignore", invalid="ignore"):
        r = num_reps / den_reps
    r = r[np.isfinite(r)]
    if r.size == 0:
        return None, None
    a = (1.0 - level) / 2.0 * 100.0
    lo, hi = np.percentile(r, [a, 100.0 - a])
    return float(lo), float(hi)


# --------------------------------------------------------------------------- trend


def mann_kendall(y: np.ndarray) -> tuple[float, float, float]:
    """Two-sided Mann-Kendall trend test on a series (NaN removed by the caller).

    Returns ``(S, z, p_value)``; ``p_value`` is 1.0 for fewer than 3 points. Variance uses the
    tie correction ``(n(n-1)(2n+5) - sum t(t-1)(2t+5)) / 18``; ``z`` uses the continuity
    correction ``(S - sign(S)) / sqrt(var)``.
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n < 3:
        return 0.0, 0.0, 1.0
    i, j = np.triu_indices(n, k=1)
    s = float(np.sign(y[j] - y[i]).sum())
    _, counts = np.unique(y, return_counts=True)
    t = counts[counts > 1].astype(np.float64)
    var = (n * (n - 1) * (2 * n + 5) - float(np.sum(t * (t - 1) * (2 * t + 5)))) / 18.0
    if var <= 0:
        return s, 0.0, 1.0
    z = (s - math.copysign(1.0, s)) / math.sqrt(var) if s != 0 else 0.0
    p = math.erfc(abs(z) / math.sqrt(2.0))
    return s, z, p


def theil_sen(x: np.ndarray, y: np.ndarray) -> tuple[float, float]:
    """Theil-Sen estimator: ``(slope, intercept)``, slope = median of pairwise slopes."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if x.size < 2:
        return 0.0, float(y[0]) if y.size else 0.0
    i, j = np.triu_indices(x.size, k=1)
    dx = x[j] - x[i]
    keep = dx != 0
    slopes = (y[j] - y[i])[keep] / dx[keep]
    slope = float(np.median(slopes)) if slopes.size else 0.0
    intercept = float(np.median(y - slope * x))
    return slope, intercept


# --------------------------------------------------------------------------- sorted parts


def _to_key(v: np.ndarray) -> np.ndarray:
    """Order-preserving unsigned integer keys of float32/float64 values."""
    if v.dtype == np.float32:
        bits = v.view(np.uint32)
        return bits ^ ((bits >> np.uint32(31)) * np.uint32(0x7FFFFFFF) | np.uint32(0x80000000))
    bits = v.astype(np.float64).view(np.uint64)
    return bits ^ ((bits >> np.uint64(63)) * np.uint64(0x7FFFFFFFFFFFFFFF) | np.uint64(0x8000000000000000))


def _from_key(k: int, dtype: np.dtype) -> float:
    if dtype == np.float32:
        bits = k ^ 0x80000000 if k >> 31 else (~k) & 0xFFFFFFFF
        return float(np.array([bits], dtype=np.uint32).view(np.float32)[0])
    bits = k ^ 0x8000000000000000 if k >> 63 else (~k) & 0xFFFFFFFFFFFFFFFF
    return float(np.array([bits], dtype=np.uint64).view(np.float64)[0])


class SortedParts:
    """A weighted multiset kept as sorted arrays, each with one integer weight per element.

    Exact order statistics of the union without merging: the value of expanded rank ``r`` is
    found by bisection over the (order-preserving) bit patterns of the floats, counting
    ``sum(weight * searchsorted(part, v, "right"))``. Building costs one float sort per
    part; a union of several groups (all tasks of a step) costs nothing. Per-token ITL uses
    one part per chunk token count ``n`` (values ``gap / n``, weight ``n``).
    """

    def __init__(self, parts: list[tuple[np.ndarray, int]] | None = None) -> None:
        self.parts = [(a, w) for a, w in (parts or []) if a.size and w > 0]
        self.dtype = np.dtype(np.float32) if all(a.dtype == np.float32 for a, _ in self.parts) else np.dtype(np.float64)
        if self.dtype == np.float64:
            self.parts = [(a.astype(np.float64), w) for a, w in self.parts]

    @classmethod
    def from_values(cls, values: np.ndarray, weights: np.ndarray | None = None) -> "SortedParts":
        """Split by weight (integer, <= 0 dropped) and sort each part (NaN dropped)."""
        # Filter only when needed: a compress pass over tens of millions of chunks is not free.
        bad = np.isnan(values)
        if weights is None:
            return cls([(np.sort(values[~bad] if bad.any() else values), 1)])
        bad |= weights <= 0
        if bad.any():
            values, weights = values[~bad], weights[~bad]
        del bad
        if values.size == 0:
            return cls([])
        lo, hi = int(weights.min()), int(weights.max())
        if lo == hi:
            return cls([(np.sort(values), lo)])
        if hi - lo < 256:
            # few distinct weights: one boolean pass per weight, no argsort
            return cls([(np.sort(values[weights == w]), w) for w in range(lo, hi + 1)])
        order = np.argsort(weights, kind="stable")
        w_sorted = weights[order]
        uniq, starts = np.unique(w_sorted, return_index=True)
        bounds = list(starts) + [w_sorted.size]
        return cls([(np.sort(values[order[a:b]]), int(w)) for w, a, b in zip(uniq, bounds[:-1], bounds[1:])])

    @classmethod
    def union(cls, groups: list["SortedParts"]) -> "SortedParts":
        """The multiset union (no copying of the sorted arrays)."""
        return cls([p for g in groups for p in g.parts])

    @property
    def count(self) -> int:
        """Number of expanded samples."""
        return int(sum(a.size * w for a, w in self.parts))

    def sum(self) -> float:
        """Sum of the expanded samples (float64 accumulation)."""
        return float(sum(float(np.sum(a, dtype=np.float64)) * w for a, w in self.parts))

    def min(self) -> float:
        return float(min(a[0] for a, _ in self.parts))

    def max(self) -> float:
        return float(max(a[-1] for a, _ in self.parts))

    def _count_le(self, v: float | np.floating[Any]) -> int:
        return int(sum(int(np.searchsorted(a, v, side="right")) * w for a, w in self.parts))

    def value_at(self, rank: int) -> float:
        """The expanded sample of 0-based ``rank`` in ascending order."""
        nbits = 32 if self.dtype == np.float32 else 64
        lo = int(_to_key(np.array([self.min()], dtype=self.dtype))[0])
        hi = int(_to_key(np.array([self.max()], dtype=self.dtype))[0])
        typ = np.float32 if nbits == 32 else np.float64
        while lo < hi:  # smallest key whose value has more than `rank` samples at or below it
            mid = (lo + hi) // 2
            if self._count_le(typ(_from_key(mid, self.dtype))) > rank:
                hi = mid
            else:
                lo = mid + 1
        return _from_key(lo, self.dtype)

    def percentiles(self, ps: Sequence[float] = PERCENTILES) -> np.ndarray:
        """``np.percentile`` (linear) of the expanded multiset."""
        n = self.count
        q = np.asarray(ps, dtype=np.float64) / 100.0
        h = q * (n - 1)
        lo = np.floor(h).astype(np.int64)
        hi = np.minimum(lo + 1, n - 1)
        cache: dict[int, float] = {}
        for r in list(lo) + list(hi):
            if int(r) not in cache:
                cache[int(r)] = self.value_at(int(r))
        a = np.array([cache[int(r)] for r in lo])
        b = np.array([cache[int(r)] for r in hi])
        return _lerp(a, b, h - lo)


def describe_parts(
    sp: SortedParts, metric: SummaryMetric, failed_share: float | None = None
) -> dict[str, float | int | None]:
    """:func:`describe` for a :class:`SortedParts` (percentiles, mean, min, max, count)."""
    key = metric.key
    out: dict[str, float | int | None] = {}
    n = sp.count
    if n == 0:
        for k in PERCENTILE_KEYS + ("mean", "min", "max"):
            out[key(k)] = None
    else:
        for k, v in zip(PERCENTILE_KEYS, sp.percentiles(PERCENTILES)):
            out[key(k)] = float(v)
        out[key("mean")] = sp.sum() / n
        out[key("min")] = sp.min()
        out[key("max")] = sp.max()
    out[key("count")] = n
    out[key("failed_share")] = failed_share
    return out


# --------------------------------------------------------------------------- sample-size guard

# The rule itself is the glossary's (tokenswarm.metrics): the generator's plan uses it too.


def percentile_supported(n: int, p: float) -> bool:
    """True when ``n`` samples support the ``p``-th percentile (see :func:`min_samples_for`)."""
    return n >= min_samples_for(p)
