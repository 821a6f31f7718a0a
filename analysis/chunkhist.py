"""Per-token ITL and inter-chunk statistics from mergeable histograms, accumulated in one pass.

The columnar store (:mod:`analysis.loader.columnar`) never holds all per-chunk samples: as
each row group is read, :class:`ChunkAccumulator` adds its chunk gaps to histograms kept per
*chunk group*, the successful requests of one (load step, phase, task). Any table row is a
union of whole groups, and histograms merge by adding counts.

Precision contract
    The histograms are the live statistics' :class:`~tokenswarm.load.livestats.LogHistogram`
    buckets (1 %-wide, :func:`~tokenswarm.load.livestats.bucket_keys`). A percentile is the
    nearest-rank sample's bucket middle, clamped to the exact min/max, so it lies within
    :data:`RELATIVE_PRECISION` (just under 0.5 %) of one of the two samples between which the
    exact method (numpy ``linear``) interpolates -- or is 0 when that sample is below 1 us.
    Counts, means, minima and maxima are exact. The samples are the same float32 values the
    exact path uses (gap = float64 offset difference narrowed to float32; ITL = gap / tokens).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from analysis.stats import PERCENTILES
from tokenswarm.load.livestats import RELATIVE_PRECISION, LogHistogram, bucket_keys

__all__ = ["RELATIVE_PRECISION", "ChunkAccumulator", "ChunkHistograms", "HistogramParts"]

#: Dense key range of the accumulators: -1 (below 1 us) .. KEY_MAX (1.01**3000 us, far beyond any gap).
KEY_MIN, KEY_MAX = -1, 3000
_NKEYS = KEY_MAX - KEY_MIN + 1
METHOD = (f"log-bucketed histogram (1 % buckets, shared with the live statistics); every percentile is within "
          f"{RELATIVE_PRECISION * 100:.2f} % of a sample adjacent to the exact one; count, mean, min, max exact")


class HistogramParts:
    """A union of histograms with the interface :func:`analysis.stats.describe_parts` reads."""

    precision_share = RELATIVE_PRECISION

    def __init__(self, hist: LogHistogram) -> None:
        self.hist = hist

    @classmethod
    def union(cls, groups: list["HistogramParts"]) -> "HistogramParts":
        out = LogHistogram()
        for g in groups:
            out.merge(g.hist)
        return cls(out)

    @property
    def count(self) -> int:
        return int(self.hist.count)

    def sum(self) -> float:
        return float(self.hist.total)

    def min(self) -> float:
        return float(self.hist.min)  # type: ignore[arg-type]

    def max(self) -> float:
        return float(self.hist.max)  # type: ignore[arg-type]

    def percentiles(self, ps: Sequence[float] = PERCENTILES) -> np.ndarray:
        return np.array([self.hist.quantile(p / 100.0) for p in ps], dtype=np.float64)


@dataclass
class _Dense:
    """Counts per (group, bucket) plus exact count, sum, min and max per group."""

    counts: np.ndarray = field(default_factory=lambda: np.zeros((0, _NKEYS), dtype=np.int64))
    total: np.ndarray = field(default_factory=lambda: np.zeros(0))
    lo: np.ndarray = field(default_factory=lambda: np.zeros(0))
    hi: np.ndarray = field(default_factory=lambda: np.zeros(0))

    def grow(self, n_groups: int) -> None:
        extra = n_groups - self.counts.shape[0]
        if extra > 0:
            self.counts = np.vstack([self.counts, np.zeros((extra, _NKEYS), dtype=np.int64)])
            self.total = np.concatenate([self.total, np.zeros(extra)])
            self.lo = np.concatenate([self.lo, np.full(extra, np.inf)])
            self.hi = np.concatenate([self.hi, np.full(extra, -np.inf)])

    def add(self, gid: np.ndarray, values: np.ndarray, weights: np.ndarray | None, n_groups: int,
            seg_starts: np.ndarray, seg_gid: np.ndarray) -> None:
        """Add ``values`` (weight 0 = not a sample) of chunk groups ``gid`` (``n_groups`` = dump group).

        ``seg_starts``/``seg_gid``: start index and group of every request's samples, for the
        per-request min/max (one ``reduceat`` pass instead of a per-sample scatter).
        """
        keys = bucket_keys(values)
        np.clip(keys, KEY_MIN, KEY_MAX, out=keys)
        idx = gid.astype(np.intp) * _NKEYS + (keys - KEY_MIN)
        del keys
        flat = np.bincount(idx, weights=weights, minlength=(n_groups + 1) * _NKEYS)
        del idx
        self.counts[:n_groups] += flat[: n_groups * _NKEYS].reshape(n_groups, _NKEYS).astype(np.int64)
        v64 = values.astype(np.float64)
        self.total[:n_groups] += np.bincount(gid, weights=v64 if weights is None else v64 * weights,
                                             minlength=n_groups + 1)[:n_groups]
        del v64
        if seg_starts.size:
            valid = gid < n_groups if weights is None else (gid < n_groups) & (weights > 0)
            lo = np.minimum.reduceat(np.where(valid, values, np.inf), seg_starts)
            hi = np.maximum.reduceat(np.where(valid, values, -np.inf), seg_starts)
            np.minimum.at(self.lo, seg_gid, lo.astype(np.float64))
            np.maximum.at(self.hi, seg_gid, hi.astype(np.float64))

    def histogram(self, g: int) -> LogHistogram:
        row = self.counts[g]
        nz = np.flatnonzero(row)
        n = int(row.sum())
        return LogHistogram.from_dict({"b": dict(zip((nz + KEY_MIN).tolist(), row[nz].tolist())), "n": n,
                                       "s": float(self.total[g]), "lo": float(self.lo[g]) if n else None,
                                       "hi": float(self.hi[g]) if n else None})


@dataclass
class ChunkHistograms:
    """Result of a pass: per chunk group, ITL and inter-chunk histograms and token counts.

    ``request_group[i]`` is the chunk group of request ``i`` (-1: not a successful request);
    ``keys[g]`` is ``(step, phase code, task code)`` of group ``g``.
    """

    keys: list[tuple[int, int, int]]
    request_group: np.ndarray
    itl: list[LogHistogram]
    inter_chunk: list[LogHistogram]
    token_hist: list[np.ndarray]
    exact_gaps: np.ndarray
    gaps: np.ndarray
    requests: np.ndarray


class ChunkAccumulator:
    """Adds row groups' chunk lists to per-group histograms (see the module docstring)."""

    def __init__(self) -> None:
        self.keys: dict[tuple[int, int, int], int] = {}
        self.itl = _Dense()
        self.inter = _Dense()
        self.tok: np.ndarray = np.zeros((0, 1), dtype=np.int64)
        self.exact_gaps = np.zeros(0, dtype=np.int64)
        self.gaps = np.zeros(0, dtype=np.int64)
        self.requests = np.zeros(0, dtype=np.int64)
        self.groups: list[np.ndarray] = []

    def _group_ids(self, ok: np.ndarray, step: np.ndarray, phase: np.ndarray, task: np.ndarray) -> np.ndarray:
        gid = np.full(ok.size, -1, dtype=np.int32)
        if ok.any():
            # one int64 key per request (codes are small: 21 bits each), a 1-D unique instead of axis=0
            combo = ((step[ok].astype(np.int64) + 1) << 42) | ((phase[ok].astype(np.int64) + 1) << 21) \
                | (task[ok].astype(np.int64) + 1)
            uniq, inv = np.unique(combo, return_inverse=True)
            mask21 = (1 << 21) - 1
            ids = np.array([self.keys.setdefault(((u >> 42) - 1, ((u >> 21) & mask21) - 1, (u & mask21) - 1),
                                                 len(self.keys)) for u in uniq.tolist()], dtype=np.int32)
            gid[ok] = ids[inv.reshape(-1)]
        n = len(self.keys)
        self.itl.grow(n)
        self.inter.grow(n)
        if self.tok.shape[0] < n:
            self.tok = np.vstack([self.tok, np.zeros((n - self.tok.shape[0], self.tok.shape[1]), dtype=np.int64)])
            for name in ("exact_gaps", "gaps", "requests"):
                arr = getattr(self, name)
                setattr(self, name, np.concatenate([arr, np.zeros(n - arr.size, dtype=np.int64)]))
        return gid

    def add(self, ok: np.ndarray, step: np.ndarray, phase: np.ndarray, task: np.ndarray,
            offsets: np.ndarray, n_chunks: np.ndarray, tokens: np.ndarray, exact: np.ndarray) -> None:
        """One batch: per-request keys and ``n_chunks``, flat float64 ``offsets`` and int ``tokens``
        (aligned with the offsets, 0 where unknown) and per-request ``exact`` token counts."""
        gid_req = self._group_ids(ok, step, phase, task)
        self.groups.append(gid_req)
        n_groups = len(self.keys)
        np.add.at(self.requests, gid_req[gid_req >= 0], 1)
        total = offsets.size
        if total < 2:
            return
        gaps = np.diff(offsets).astype(np.float32)  # gap j ends at chunk j + 1
        ptr = np.zeros(n_chunks.size + 1, dtype=np.int64)
        np.cumsum(n_chunks, out=ptr[1:])
        dump = np.where(gid_req >= 0, gid_req, n_groups).astype(np.int32)
        gid = np.repeat(dump, n_chunks)[1:]
        starts = ptr[1:-1]
        starts = starts[(starts > 0) & (starts < total)]
        gid[starts - 1] = n_groups  # the step from one request's last chunk to the next's first
        # Requests with at least one gap, and where their gaps start in the gap array.
        has = (n_chunks >= 2) & (gid_req >= 0)
        seg_starts = ptr[:-1][has]
        seg_gid = gid_req[has]
        self.inter.add(gid, gaps, None, n_groups, seg_starts, seg_gid)
        tok = tokens[1:]
        all_exact = bool((exact | (n_chunks == 0)).all())  # requests without chunks add no gaps
        exact_c = None if all_exact else np.repeat(exact, n_chunks)[1:]
        n = np.maximum(tok if exact_c is None else np.where(exact_c, tok, 1), 0)  # unknown counts: 1 sample per chunk
        with np.errstate(divide="ignore", invalid="ignore"):
            itl = gaps / np.maximum(n, 1).astype(np.float32)
        self.itl.add(gid, itl, n, n_groups, seg_starts, seg_gid)
        del itl, n
        gap_counts = np.bincount(gid, minlength=n_groups + 1)[:n_groups]
        self.gaps[:n_groups] += gap_counts
        if exact_c is None:
            self.exact_gaps[:n_groups] += gap_counts
            g_sel, t = gid, tok
        else:
            sel = (gid < n_groups) & exact_c
            g_sel, t = gid[sel], tok[sel]
            self.exact_gaps[:n_groups] += np.bincount(g_sel, minlength=n_groups + 1)[:n_groups]
        t = np.maximum(t, 0).astype(np.intp)
        width = max(self.tok.shape[1], int(t.max()) + 1 if t.size else 1)
        if width > self.tok.shape[1]:
            self.tok = np.hstack([self.tok, np.zeros((self.tok.shape[0], width - self.tok.shape[1]), dtype=np.int64)])
        # the dump group (n_groups) is counted too and dropped
        self.tok[:n_groups] += np.bincount(g_sel.astype(np.intp) * width + t,
                                           minlength=(n_groups + 1) * width)[: n_groups * width].reshape(n_groups, width)

    def finish(self) -> ChunkHistograms:
        keys = [k for k, _ in sorted(self.keys.items(), key=lambda kv: kv[1])]
        groups = np.concatenate(self.groups) if self.groups else np.zeros(0, dtype=np.int32)
        self.groups = []
        tok_rows = []
        for g in range(len(keys)):
            row = self.tok[g]
            nz = np.flatnonzero(row)
            tok_rows.append(row[: nz[-1] + 1].copy() if nz.size else np.zeros(0, dtype=np.int64))
        return ChunkHistograms(
            keys=keys, request_group=groups,
            itl=[self.itl.histogram(g) for g in range(len(keys))],
            inter_chunk=[self.inter.histogram(g) for g in range(len(keys))],
            token_hist=tok_rows, exact_gaps=self.exact_gaps.copy(), gaps=self.gaps.copy(),
            requests=self.requests.copy(),
        )


def window_hist_parts(run: Any, req: np.ndarray, task_codes: Sequence[int]
                      ) -> list[tuple[HistogramParts, HistogramParts, float | None, np.ndarray]]:
    """Per task code: (ITL, inter-chunk, per-chunk-sample share, token histogram) of the requests ``req``.

    ``req`` must select whole chunk groups (successful requests of whole step/phase/task
    combinations, as every table window does); otherwise a ``ValueError`` says so.
    """
    ch: ChunkHistograms = run.chunk_hists

    sel = ch.request_group[req]
    sel = sel[sel >= 0]
    counts = np.bincount(sel, minlength=len(ch.keys))
    partial = np.flatnonzero((counts > 0) & (counts != ch.requests))
    if partial.size:
        raise ValueError(f"{run.path}: the selected requests cut through chunk group(s) "
                         f"{[ch.keys[g] for g in partial.tolist()]}; histograms are per step, phase and task")
    out = []
    present = np.flatnonzero(counts)
    for code in task_codes:
        gs = [int(g) for g in present if ch.keys[g][2] == int(code)]
        itl = HistogramParts.union([HistogramParts(ch.itl[g]) for g in gs])
        inter = HistogramParts.union([HistogramParts(ch.inter_chunk[g]) for g in gs])
        gaps = int(sum(ch.gaps[g] for g in gs))
        inexact = None if gaps == 0 else 1.0 - sum(int(ch.exact_gaps[g]) for g in gs) / gaps
        size = max([ch.token_hist[g].size for g in gs] + [0])
        tok = np.zeros(size, dtype=np.int64)
        for g in gs:
            tok[: ch.token_hist[g].size] += ch.token_hist[g]
        out.append((itl, inter, inexact, tok))
    return out
