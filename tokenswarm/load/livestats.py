"""Live, mergeable LLM statistics for progress lines, the web UI and worker->master merging.

Exact percentiles come later, from the raw records (analysis). Live numbers use a
log-bucketed histogram: bucket ``i`` holds values in ``[B**i, B**(i+1))`` microseconds with
``B = 1.01``, so every reported percentile is within 1 % of the true value, at any
magnitude. Histograms merge by adding bucket counts -- workers ship deltas and the master
adds them; percentiles are never averaged.
"""

from __future__ import annotations

import math
import time
from collections import deque
from itertools import chain
from typing import TYPE_CHECKING, Any, Callable, Iterable

from tokenswarm.buckets import INV_LOG_BASE, ZERO_BUCKET, bucket_of_us, bucket_value_ms
from tokenswarm.metrics import itl_samples, tpot_ms
from tokenswarm.names import (
    ERROR_RATE,
    LIVE_E2E_P50_MS,
    LIVE_E2E_P99_MS,
    LIVE_ITL_P50_MS,
    LIVE_ITL_P99_MS,
    LIVE_TPOT_P50_MS,
    LIVE_TPOT_P95_MS,
    LIVE_TPOT_P99_MS,
    LIVE_TTFT_P50_MS,
    LIVE_TTFT_P95_MS,
    LIVE_TTFT_P99_MS,
    OUTPUT_TOKENS_PER_S,
)
from tokenswarm.wire.native import native_function

#: C: one stream's per-delivery ITL into the bucket counts, as ``_flush`` does for many in numpy.
_itl_buckets = native_function("itl_buckets")
if _itl_buckets is None or TYPE_CHECKING:  # at import time: a first lazy import inside the event loop stalls it ~80 ms
    import numpy as np

def bucket_keys(values_ms: np.ndarray) -> np.ndarray:
    """Bucket key of every value (ms), computed in the array's float type (float32 halves the cost).

    Key ``k >= 0`` holds ``[1.01**k, 1.01**(k+1))`` microseconds; ``-1`` holds values below 1 us.
    """
    import numpy as np

    v = np.asarray(values_ms)
    if v.dtype != np.float32:
        v = v.astype(np.float64)
    us = v * v.dtype.type(1000.0)
    keys = (np.log(np.maximum(us, v.dtype.type(1.0))) * v.dtype.type(INV_LOG_BASE)).astype(np.int64)
    keys[us < 1.0] = ZERO_BUCKET
    out: np.ndarray = keys
    return out


#: Deferred chunk gaps are bucketed once this many are pending (or when anything reads the
#: histogram): numpy's per-call overhead, paid per record, cost ~200 us per 200-token stream.
FLUSH_GAPS = 16384


class LogHistogram:
    """Counts of values (ms) in 1 %-wide buckets, with exact count/sum/min/max."""

    __slots__ = ("_buckets", "_count", "_total", "_min", "_max", "_pending", "_pending_n")

    def __init__(self) -> None:
        self._buckets: dict[int, int] = {}
        self._count = 0
        self._total = 0.0
        self._min: float | None = None
        self._max: float | None = None
        self._pending: list[tuple[list[float], list[int]]] = []  # add_chunk_gaps not yet bucketed
        self._pending_n = 0

    # Every read sees the deferred samples: the attributes flush first (writes do not).
    @property
    def buckets(self) -> dict[int, int]:
        if self._pending:
            self._flush()
        return self._buckets

    @buckets.setter
    def buckets(self, value: dict[int, int]) -> None:
        self._buckets = value

    @property
    def count(self) -> int:
        if self._pending:
            self._flush()
        return self._count

    @count.setter
    def count(self, value: int) -> None:
        self._count = value

    @property
    def total(self) -> float:
        if self._pending:
            self._flush()
        return self._total

    @total.setter
    def total(self, value: float) -> None:
        self._total = value

    @property
    def min(self) -> float | None:
        if self._pending:
            self._flush()
        return self._min

    @min.setter
    def min(self, value: float | None) -> None:
        self._min = value

    @property
    def max(self) -> float | None:
        if self._pending:
            self._flush()
        return self._max

    @max.setter
    def max(self, value: float | None) -> None:
        self._max = value

    def add(self, value_ms: float, n: int = 1) -> None:
        us = value_ms * 1000.0
        key = bucket_of_us(us)
        self._buckets[key] = self._buckets.get(key, 0) + n
        self._count += n
        self._total += value_ms * n
        if self._min is None or value_ms < self._min:
            self._min = value_ms
        if self._max is None or value_ms > self._max:
            self._max = value_ms

    def add_chunk_gaps(self, offsets_ms: list[float], tokens: list[int]) -> None:
        """Inter-token samples of one stream (glossary: ``itl_ms``): bucketed now by the C
        extension, or without it kept and bucketed later in bulk with numpy (the same counts).

        Per delivery (:func:`tokenswarm.metrics.itl_samples`): the chunks read together (equal
        offsets), ``n`` tokens in all, arriving ``g`` ms after the previous delivery give ``n``
        samples of ``g / n``.
        """
        if len(offsets_ms) > 1 and _itl_buckets is not None:  # in C, now: a few µs per stream
            n, total, lo, hi = _itl_buckets(offsets_ms, tokens, self._buckets, INV_LOG_BASE)
            if n:
                self._count += n
                self._total += total
                if self._min is None or lo < self._min:
                    self._min = lo
                if self._max is None or hi > self._max:
                    self._max = hi
        elif len(offsets_ms) > 1:
            self._pending.append((offsets_ms, tokens))
            self._pending_n += len(offsets_ms)
            if self._pending_n >= FLUSH_GAPS:
                self._flush()

    def _flush(self) -> None:
        import numpy as np

        pending, self._pending, self._pending_n = self._pending, [], 0
        lengths = np.fromiter((len(o) for o, _ in pending), dtype=np.int64, count=len(pending))
        total = int(lengths.sum())
        o = np.fromiter(chain.from_iterable(o for o, _ in pending), dtype=np.float64, count=total)
        t = np.fromiter(chain.from_iterable(t for _, t in pending), dtype=np.int64, count=total)
        # pair (i, i+1) of the concatenation is a gap unless i+1 starts the next stream
        same_stream = np.ones(total - 1, dtype=bool)
        ends = np.cumsum(lengths)[:-1] - 1
        same_stream[ends] = False
        first = np.zeros(total - 1, dtype=bool)
        first[0] = True
        first[ends[ends + 1 < total - 1] + 1] = True  # the gap after a stream's first chunk
        values, weights = itl_samples(np.diff(o)[same_stream], t[1:][same_stream], first[same_stream])
        keep = weights > 0
        self.add_many(values[keep], weights[keep])

    def add_many(self, values_ms: Any, counts: Any) -> None:
        """Vectorised ``add``: ``counts[i]`` samples of ``values_ms[i]`` (numpy arrays)."""

        if len(values_ms) == 0:
            return
        import numpy as np

        keys = bucket_keys(np.asarray(values_ms, dtype=np.float64))
        counts = np.asarray(counts, dtype=np.int64)
        # bincount over the (narrow) key range: no sort, unlike np.unique
        lo_key = int(keys.min())
        sums = np.bincount(keys - lo_key, weights=counts)
        nz = np.flatnonzero(sums)
        b = self._buckets
        for k, c in zip((nz + lo_key).tolist(), sums[nz].tolist()):
            b[k] = b.get(k, 0) + int(c)
        self._count += int(counts.sum())
        self._total += float((np.asarray(values_ms, dtype=np.float64) * counts).sum())
        lo, hi = float(np.min(values_ms)), float(np.max(values_ms))
        if self._min is None or lo < self._min:
            self._min = lo
        if self._max is None or hi > self._max:
            self._max = hi

    def merge(self, other: "LogHistogram") -> None:
        for k, c in other.buckets.items():
            self.buckets[k] = self.buckets.get(k, 0) + c
        self.count += other.count
        self.total += other.total
        if other.min is not None and (self.min is None or other.min < self.min):
            self.min = other.min
        if other.max is not None and (self.max is None or other.max > self.max):
            self.max = other.max

    def minus(self, earlier: "LogHistogram") -> "LogHistogram":
        """What was added since ``earlier`` (a snapshot of this histogram); min/max are not windowed."""
        out = LogHistogram()
        for k, c in self.buckets.items():
            d = c - earlier.buckets.get(k, 0)
            if d > 0:
                out.buckets[k] = d
        out.count = self.count - earlier.count
        out.total = self.total - earlier.total
        if out.count:
            out.min, out.max = self.min, self.max
        return out

    def copy(self) -> "LogHistogram":
        return LogHistogram.from_dict(self.to_dict())

    def quantile(self, q: float) -> float | None:
        """Nearest-rank quantile (q in [0, 1]); the bucket's geometric middle, clamped to min/max."""
        if not self.count:
            return None
        rank = max(1, math.ceil(q * self.count))
        seen = 0
        for k in sorted(self.buckets):
            seen += self.buckets[k]
            if seen >= rank:
                mid = bucket_value_ms(k)
                assert self.min is not None and self.max is not None
                return min(max(mid, self.min), self.max)
        return self.max

    @property
    def mean(self) -> float | None:
        return self.total / self.count if self.count else None

    def to_dict(self) -> dict[str, Any]:
        return {"b": self.buckets, "n": self.count, "s": self.total, "lo": self.min, "hi": self.max}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "LogHistogram":
        h = cls()
        h.buckets = {int(k): int(v) for k, v in d["b"].items()}
        h.count, h.total, h.min, h.max = d["n"], d["s"], d["lo"], d["hi"]
        return h


HIST_NAMES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "schedule_lag_ms")


class TaskStats:
    """Counters and histograms of one task (or of the total)."""

    __slots__ = ("requests", "failures", "outcomes", "output_tokens", "chunks", "chunk_tokens",
                 "spec_accepted", "spec_drafts", "hists")

    def __init__(self) -> None:
        self.requests = 0
        self.failures = 0
        self.outcomes: dict[str, int] = {}
        self.output_tokens = 0
        self.chunks = 0  # content chunks with exact token counts
        self.chunk_tokens = 0  # tokens in those chunks
        self.spec_accepted = 0  # from per-request server stats, when sent
        self.spec_drafts = 0
        self.hists = {name: LogHistogram() for name in HIST_NAMES}

    def merge(self, other: "TaskStats") -> None:
        self.requests += other.requests
        self.failures += other.failures
        for k, v in other.outcomes.items():
            self.outcomes[k] = self.outcomes.get(k, 0) + v
        self.output_tokens += other.output_tokens
        self.chunks += other.chunks
        self.chunk_tokens += other.chunk_tokens
        self.spec_accepted += other.spec_accepted
        self.spec_drafts += other.spec_drafts
        for name, h in other.hists.items():
            self.hists[name].merge(h)

    def to_dict(self) -> dict[str, Any]:
        return {"requests": self.requests, "failures": self.failures, "outcomes": self.outcomes,
                "output_tokens": self.output_tokens, "chunks": self.chunks, "chunk_tokens": self.chunk_tokens,
                "spec_accepted": self.spec_accepted, "spec_drafts": self.spec_drafts,
                "hists": {k: h.to_dict() for k, h in self.hists.items()}}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> "TaskStats":
        t = cls()
        t.requests, t.failures = d["requests"], d["failures"]
        t.outcomes = dict(d["outcomes"])
        t.output_tokens, t.chunks, t.chunk_tokens = d["output_tokens"], d["chunks"], d["chunk_tokens"]
        t.spec_accepted, t.spec_drafts = d.get("spec_accepted", 0), d.get("spec_drafts", 0)
        t.hists = {k: LogHistogram.from_dict(v) for k, v in d["hists"].items()}
        return t


class LiveStats:
    """Per-task :class:`TaskStats` plus a per-second output-token series for live rates."""

    def __init__(self, clock: Callable[[], float] = time.time, window_s: int = 600) -> None:
        self.tasks: dict[str, TaskStats] = {}
        self.clock = clock
        self.per_second: deque[list[Any]] = deque(maxlen=window_s)  # [epoch_second, tokens, requests, errors]

    def task(self, name: str) -> TaskStats:
        t = self.tasks.get(name)
        if t is None:
            t = self.tasks[name] = TaskStats()
        return t

    def observe(self, record: Any) -> None:
        """Add one finished :class:`~tokenswarm.record.RequestRecord`."""
        t = self.task(record.task)
        t.requests += 1
        t.outcomes[record.outcome] = t.outcomes.get(record.outcome, 0) + 1
        failed = record.outcome not in ("ok", "cancelled")
        if failed:
            t.failures += 1
        out = record.output_tokens or 0
        t.output_tokens += out
        h = t.hists
        if record.schedule_lag_ms is not None:
            h["schedule_lag_ms"].add(max(record.schedule_lag_ms, 0.0))
        if record.ttft_ms is not None:
            h["ttft_ms"].add(record.ttft_ms)
        if record.outcome == "ok" and record.e2e_ms is not None:
            h["e2e_ms"].add(record.e2e_ms)
            tp = tpot_ms(record.ttft_ms, record.e2e_ms, record.output_tokens)
            if tp is not None:
                h["tpot_ms"].add(tp)
        offs, toks = record.chunk_offsets_ms, record.chunk_tokens
        if offs and toks is not None and len(offs) > 1:
            h["itl_ms"].add_chunk_gaps(offs, toks)
            t.chunks += len(toks) - 1
            t.chunk_tokens += sum(toks) - toks[0]
        sd = record.spec_decode
        if sd:
            t.spec_accepted += int(sd.get("num_accepted_draft_tokens") or 0)
            t.spec_drafts += int(sd.get("num_spec_steps") or 0)
        self._tick(out, 1, 1 if failed else 0)

    def _tick(self, tokens: int, requests: int, errors: int) -> None:
        sec = int(self.clock())
        if self.per_second and self.per_second[-1][0] == sec:
            row = self.per_second[-1]
            row[1] += tokens
            row[2] += requests
            row[3] += errors
        else:
            self.per_second.append([sec, tokens, requests, errors])

    def rate(self, window_s: int = 10) -> tuple[float, float, float]:
        """(output tokens/s, requests/s, errors/s) over the last ``window_s`` full seconds."""
        now = int(self.clock())
        rows = [r for r in self.per_second if now - window_s <= r[0] < now]
        tokens, requests, errors = (sum(r[i] for r in rows) / window_s for i in (1, 2, 3))
        return tokens, requests, errors

    def total(self) -> TaskStats:
        tot = TaskStats()
        for t in self.tasks.values():
            tot.merge(t)
        return tot

    # -- shipping deltas worker -> master -------------------------------------------------------
    def take_delta(self) -> dict[str, Any]:
        """Serialise and reset (what a worker sends in each report)."""
        d = {"tasks": {k: t.to_dict() for k, t in self.tasks.items()}, "per_second": [list(r) for r in self.per_second]}
        self.tasks = {}
        self.per_second.clear()
        return d

    def merge_delta(self, d: dict[str, Any]) -> None:
        for name, td in d.get("tasks", {}).items():
            self.task(name).merge(TaskStats.from_dict(td))
        for sec, tokens, reqs, errs in d.get("per_second", []):
            self._merge_second(int(sec), tokens, reqs, errs)

    def _merge_second(self, sec: int, tokens: int, reqs: int, errs: int) -> None:
        for row in reversed(self.per_second):
            if row[0] == sec:
                row[1] += tokens
                row[2] += reqs
                row[3] += errs
                return
            if row[0] < sec:
                break
        self.per_second.append([sec, tokens, reqs, errs])
        if len(self.per_second) > 1 and self.per_second[-2][0] > sec:
            rows = sorted(self.per_second, key=lambda r: r[0])
            self.per_second.clear()
            self.per_second.extend(rows)


def window_summary(now: TaskStats, before: TaskStats | None, seconds: float) -> dict[str, Any]:
    """Rates and live percentiles of what happened between two snapshots of the total.

    Percentile keys start with ``live_``: they come from the 1 % log buckets, not the exact
    records (the analysis' ``ttft_p99_ms`` ...).
    """
    before = before or TaskStats()

    def q(name: str, p: float) -> float | None:
        v = now.hists[name].minus(before.hists[name]).quantile(p)
        return None if v is None else round(v, 2)

    reqs = now.requests - before.requests
    fails = now.failures - before.failures
    return {"window_s": round(seconds, 3), "requests": reqs, "failures": fails,
            ERROR_RATE: round(fails / reqs, 6) if reqs else None,
            "requests_per_s": round(reqs / seconds, 4) if seconds > 0 else None,
            OUTPUT_TOKENS_PER_S: round((now.output_tokens - before.output_tokens) / seconds, 2) if seconds > 0 else None,
            LIVE_TTFT_P50_MS: q("ttft_ms", .5), LIVE_TTFT_P99_MS: q("ttft_ms", .99),
            LIVE_TPOT_P50_MS: q("tpot_ms", .5), LIVE_TPOT_P99_MS: q("tpot_ms", .99),
            LIVE_E2E_P50_MS: q("e2e_ms", .5), LIVE_E2E_P99_MS: q("e2e_ms", .99)}


def snapshot(stats: TaskStats) -> TaskStats:
    return TaskStats.from_dict(stats.to_dict())


def summary_rows(stats: LiveStats, names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """Table rows (per task, then 'Total') used by the progress line, web UI and CSV.

    Percentile keys start with ``live_`` (``live_ttft_p99_ms``): approximate, within 1 %, unlike
    the exact ``ttft_p99_ms`` of the analysis.
    """
    rows = []
    items = [(n, stats.tasks[n]) for n in (names or sorted(stats.tasks))] + [("Total", stats.total())]
    for name, t in items:
        h = t.hists

        def q(metric: str, p: float, h: dict[str, LogHistogram] = h) -> float | None:
            v = h[metric].quantile(p)
            return None if v is None else round(v, 1)

        rows.append({
            "name": name, "requests": t.requests, "failures": t.failures,
            LIVE_TTFT_P50_MS: q("ttft_ms", .5), LIVE_TTFT_P95_MS: q("ttft_ms", .95), LIVE_TTFT_P99_MS: q("ttft_ms", .99),
            LIVE_TPOT_P50_MS: q("tpot_ms", .5), LIVE_TPOT_P95_MS: q("tpot_ms", .95), LIVE_TPOT_P99_MS: q("tpot_ms", .99),
            LIVE_ITL_P50_MS: q("itl_ms", .5), LIVE_ITL_P99_MS: q("itl_ms", .99),
            "output_tokens": t.output_tokens,
            "tokens_per_chunk": round(t.chunk_tokens / t.chunks, 2) if t.chunks else None,
            "spec_mean_accepted_len": round(1 + t.spec_accepted / t.spec_drafts, 2) if t.spec_drafts else None,
        })
    return rows
