"""Per-token ITL and inter-chunk statistics from mergeable histograms, accumulated in one pass.

The columnar store (:mod:`analysis.loader.columnar`) never holds all per-chunk samples: as
each row group is read, :class:`ChunkAccumulator` adds its chunk gaps to histograms kept per
*chunk group*, the successful requests of one (load step, phase, task). Any table row is a
union of whole groups, and histograms merge by adding counts.

What is kept
    Per group, the gaps between consecutive chunks are counted by (tokens of the chunk that ends
    the gap, gap bucket), with the live statistics' 1 %-wide buckets
    (:class:`~tokenswarm.load.livestats.LogHistogram`, ``BUCKET_BASE``): one pass per row group
    (the C extension ``analysis._chunkhist``, or one numpy ``bincount`` where it is not built:
    the same counts) gives the inter-chunk histogram (summed over tokens), the per-token ITL (a chunk
    of ``n`` tokens after a gap in bucket ``b`` is ``n`` samples of ``middle(b) / n``) and the
    tokens-per-chunk histogram. Sums, counts, minima and maxima are kept exactly beside them.
Precision contract
    Every sample is represented by a value within :data:`PRECISION_SHARE` (0.5 %: the bucket
    half-width ``sqrt(1.01) - 1``, rounded up for float32 keys) of itself, or by 0 when below
    1 us; so each reported percentile -- the nearest-rank representative, clamped to the exact
    min/max -- is within 0.5 % of the sample at that rank, which is one of the two samples
    between which the exact method (numpy ``linear``) interpolates. Counts, minima and maxima
    are exact; means are exact up to the float32 rounding of the samples (~1e-7 relative). The
    samples are the exact path's (gap = float64 offset difference narrowed to float32).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from tokenswarm.analysis.stats import PERCENTILES
from tokenswarm.load.livestats import BUCKET_BASE, RELATIVE_PRECISION, bucket_value_ms

try:  # the C fast path of ChunkAccumulator.add (setup.py builds it; optional)
    from tokenswarm.analysis import _chunkhist as _kernel  # type: ignore[attr-defined]
except ImportError:  # pragma: no cover - no compiler at install time: the numpy path
    _kernel = None

__all__ = ["PRECISION_SHARE", "RELATIVE_PRECISION", "ChunkAccumulator", "ChunkHistograms", "HistogramParts"]

#: Key range of the accumulators: -1 (below 1 us) .. KEY_MAX (1.01**2400 us, about 6 hours).
KEY_MIN, KEY_MAX = -1, 2400
_NKEYS = KEY_MAX - KEY_MIN + 1
#: Exact token counts kept per chunk in the cube; chunks of more tokens take a slower exact path.
TOKENS_CAP = 32
#: The stated precision: the bucket half-width (sqrt(1.01) - 1 = 0.499 %) rounded up for float32 keys.
PRECISION_SHARE = 0.005
METHOD = (f"mergeable log-bucketed histograms (the live statistics' 1 % buckets); each percentile is within "
          f"{PRECISION_SHARE * 100:.1f} % of the sample at its nearest rank, so within "
          f"{PRECISION_SHARE * 100:.1f} % of a sample adjacent to the exact value; count, mean, min, max exact")
#: Value each bucket offset (key - KEY_MIN) reports: the bucket's geometric middle (0 below 1 us).
_MID = np.array([bucket_value_ms(k) for k in range(KEY_MIN, KEY_MAX + 1)])
#: float32 position on the log scale: trunc(log(v_ms) * _A + _B) = key - KEY_MIN for v >= 1 us, and values
#: below 1 us (or negative: step between two requests) are clamped to _CLAMP, which lands in key -1.
_A = np.float32(1.0 / math.log(BUCKET_BASE))
_B = np.float32(math.log(1000.0) / math.log(BUCKET_BASE) - KEY_MIN)
_CLAMP = np.float32(1e-3 / math.sqrt(BUCKET_BASE))


def _positions(values: np.ndarray) -> np.ndarray:
    """Bucket offsets (key - KEY_MIN, int32) of float32 values: the live histogram's keys, fewer passes."""
    lg = np.maximum(values, _CLAMP)
    np.log(lg, out=lg)
    lg *= _A
    lg += _B
    pos = lg.astype(np.int32)
    np.minimum(pos, _NKEYS - 1, out=pos)
    return np.asarray(pos)


class HistogramParts:
    """Weighted representative values of a union of chunk groups, with exact count, sum, min and max.

    Each sample is represented by a value within :data:`PRECISION_SHARE` of itself (its bucket's
    middle, or the gap bucket's middle divided by the chunk's tokens for ITL), so every
    nearest-rank order statistic is too. The interface is the one
    :func:`analysis.stats.describe_parts` reads; percentiles are nearest-rank and clamped to the
    exact min/max, as :meth:`~tokenswarm.load.livestats.LogHistogram.quantile` does.
    """

    precision_share = PRECISION_SHARE

    def __init__(self, values: np.ndarray, weights: np.ndarray, total: float, lo: float, hi: float) -> None:
        keep = weights > 0
        self.values, self.weights = values[keep], weights[keep].astype(np.int64)
        self.total, self.lo, self.hi = total, lo, hi

    @classmethod
    def union(cls, groups: list["HistogramParts"]) -> "HistogramParts":
        if not groups:
            return cls(np.zeros(0), np.zeros(0, dtype=np.int64), 0.0, math.inf, -math.inf)
        return cls(np.concatenate([g.values for g in groups]), np.concatenate([g.weights for g in groups]),
                   sum(g.total for g in groups), min(g.lo for g in groups), max(g.hi for g in groups))

    @property
    def count(self) -> int:
        return int(self.weights.sum())

    def sum(self) -> float:
        return float(self.total)

    def min(self) -> float:
        return float(self.lo)

    def max(self) -> float:
        return float(self.hi)

    def percentiles(self, ps: Sequence[float] = PERCENTILES) -> np.ndarray:
        order = np.argsort(self.values, kind="stable")
        v, cw = self.values[order], np.cumsum(self.weights[order])
        n = int(cw[-1])
        ranks = np.maximum(1, np.ceil(np.asarray(ps, dtype=np.float64) / 100.0 * n)).astype(np.int64)
        return np.asarray(np.clip(v[np.searchsorted(cw, ranks, side="left")], self.lo, self.hi))


@dataclass
class ChunkHistograms:
    """Result of a pass: per chunk group, gap-bucket counts by tokens per chunk, and exact sums.

    ``request_group[i]`` is the chunk group of request ``i`` (-1: not a successful request);
    ``keys[g]`` is ``(step, phase code, task code)`` of group ``g``. ``cube[g, t, b]`` counts the
    gaps of bucket offset ``b`` whose chunk has ``t`` tokens; ``unknown[g, b]`` those without
    exact counts; ``big[g, b]`` those of ``>= TOKENS_CAP`` tokens, whose ITL is ``big_itl[g, b]``
    (weighted by tokens) and token counts ``big_tokens[g]``.
    """

    keys: list[tuple[int, int, int]]
    request_group: np.ndarray
    cube: np.ndarray
    unknown: np.ndarray
    big: np.ndarray
    big_itl: np.ndarray
    big_tokens: dict[int, np.ndarray]
    gap_sum: np.ndarray
    itl_sum: np.ndarray
    gap_lo: np.ndarray
    gap_hi: np.ndarray
    itl_lo: np.ndarray
    itl_hi: np.ndarray
    gaps: np.ndarray
    requests: np.ndarray
    #: the same counts over *deliveries* (chunks read together merged), which per-token ITL uses
    deliveries: ChunkHistograms | None = None

    @property
    def exact_gaps(self) -> np.ndarray:
        return np.asarray(self.gaps - self.unknown.sum(axis=1))

    def inter_chunk(self, gs: list[int]) -> HistogramParts:
        w = self.cube[gs].sum(axis=(0, 1)) + self.unknown[gs].sum(axis=0) + self.big[gs].sum(axis=0)
        return HistogramParts(_MID, w, float(self.gap_sum[gs].sum()), _lo(self.gap_lo[gs]), _hi(self.gap_hi[gs]))

    def itl(self, gs: list[int]) -> HistogramParts:
        """Per-token ITL per delivery (the glossary's rule, :func:`tokenswarm.metrics.itl_samples`)."""
        if self.deliveries is not None:
            return self.deliveries.itl(gs)
        cube = self.cube[gs].sum(axis=0)  # (tokens, buckets)
        values = [_MID / n for n in range(1, cube.shape[0])] + [_MID, _MID]
        weights = [cube[n] * n for n in range(1, cube.shape[0])] + [self.unknown[gs].sum(axis=0),
                                                                    self.big_itl[gs].sum(axis=0)]
        return HistogramParts(np.concatenate(values), np.concatenate(weights), float(self.itl_sum[gs].sum()),
                              _lo(self.itl_lo[gs]), _hi(self.itl_hi[gs]))

    def token_hist(self, gs: list[int]) -> np.ndarray:
        tok = self.cube[gs].sum(axis=(0, 2))
        for g in gs:
            extra = self.big_tokens.get(g)
            if extra is not None:
                tok = np.concatenate([tok, np.zeros(max(0, extra.size - tok.size), dtype=np.int64)])
                tok[: extra.size] += extra
        nz = np.flatnonzero(tok)
        return tok[: nz[-1] + 1] if nz.size else np.zeros(0, dtype=np.int64)


def _lo(a: np.ndarray) -> float:
    return float(np.min(a)) if a.size else math.inf


def _hi(a: np.ndarray) -> float:
    return float(np.max(a)) if a.size else -math.inf


class ChunkAccumulator:
    """Adds row groups' chunk lists to per-group bucket counts (see the module docstring)."""

    def __init__(self, use_kernel: bool = True, deliveries: bool = True) -> None:
        self.use_kernel = use_kernel  # False: the numpy path (tests compare the two)
        # Per-token ITL counts chunks read together (equal offsets) as one delivery, so it is
        # accumulated again over the merged deliveries; inter-chunk gaps and tokens per chunk
        # keep every chunk.
        self.delivery = ChunkAccumulator(use_kernel, deliveries=False) if deliveries else None
        self.keys: dict[tuple[int, int, int], int] = {}
        self.cube = np.zeros((0, 1, _NKEYS), dtype=np.int64)
        self.unknown = np.zeros((0, _NKEYS), dtype=np.int64)
        self.big = np.zeros((0, _NKEYS), dtype=np.int64)
        self.big_itl = np.zeros((0, _NKEYS), dtype=np.int64)
        self.big_tokens: dict[int, np.ndarray] = {}
        self.vec = {name: np.zeros(0) for name in ("gap_sum", "itl_sum", "gaps", "requests")}
        self.vec.update({name: np.zeros(0) for name in ("gap_lo", "itl_lo", "gap_hi", "itl_hi")})
        self.groups: list[np.ndarray] = []

    def _grow(self, n: int, tokens: int) -> None:
        g0, t0 = self.cube.shape[0], self.cube.shape[1]
        if n > g0 or tokens > t0:
            cube = np.zeros((max(n, g0), max(tokens, t0), _NKEYS), dtype=np.int64)
            cube[:g0, :t0] = self.cube
            self.cube = cube
        if n > g0:
            pad = ((0, n - g0), (0, 0))
            self.unknown, self.big, self.big_itl = (np.pad(a, pad) for a in (self.unknown, self.big, self.big_itl))
            for name, a in self.vec.items():
                fill = math.inf if name.endswith("_lo") else -math.inf if name.endswith("_hi") else 0.0
                self.vec[name] = np.concatenate([a, np.full(n - g0, fill)])

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
        return gid

    def add(self, ok: np.ndarray, step: np.ndarray, phase: np.ndarray, task: np.ndarray,
            offsets: np.ndarray, n_chunks: np.ndarray, tokens: np.ndarray, exact: np.ndarray) -> None:
        """One batch: per-request keys and ``n_chunks``, flat float64 ``offsets`` and int ``tokens``
        (aligned with the offsets, 0 where unknown) and per-request ``exact`` token counts."""
        if self.delivery is not None:
            # ITL counts a chunk without an exact count as one token (as the records path does),
            # so a merged delivery of k such chunks gives k samples of gap / k
            tok_d = tokens if exact.all() else np.where(np.repeat(exact, n_chunks), tokens, 1)
            self.delivery.add(ok, step, phase, task, *merge_deliveries(offsets, n_chunks, tok_d),
                              np.ones_like(exact))
        gid_req = self._group_ids(ok, step, phase, task)
        self.groups.append(gid_req)
        G = len(self.keys)
        total = offsets.size
        tok = tokens[1:]
        tmax = int(tok.max()) if tok.size else 0
        width = min(tmax, TOKENS_CAP - 1) + 1  # exact token slots of this batch
        self._grow(G, width)
        v = self.vec
        v["requests"][:G] += np.bincount(gid_req[gid_req >= 0], minlength=G)[:G]
        if total < 2 or G == 0:
            return
        if _kernel is not None and tmax < TOKENS_CAP and self.use_kernel:
            self._add_kernel(gid_req, offsets, n_chunks, tokens, exact, width, G)
            return
        gaps = np.diff(offsets).astype(np.float32)  # gap j ends at chunk j + 1
        ptr = np.zeros(n_chunks.size + 1, dtype=np.int64)
        np.cumsum(n_chunks, out=ptr[1:])
        gid = np.repeat(np.where(gid_req >= 0, gid_req, G).astype(np.int32), n_chunks)[1:]
        starts = ptr[1:-1]
        starts = starts[(starts > 0) & (starts < total)]
        gid[starts - 1] = G  # the step from one request's last chunk to the next's first: the dump group G
        all_exact = bool((exact | (n_chunks == 0)).all())  # requests without chunks add no gaps
        exact_c = None if all_exact else np.repeat(exact, n_chunks)[1:]
        big = tok >= TOKENS_CAP if tmax >= TOKENS_CAP else None
        # Slots: 0..width-1 exact token counts, width = no exact count, width + 1 = >= TOKENS_CAP tokens.
        if exact_c is None and big is None and (tok.size == 0 or tok.min() >= 0):
            slot = tok
        else:
            slot = np.maximum(tok, 0).astype(np.int32)
            if exact_c is not None:
                slot[~exact_c] = width
            if big is not None:
                slot[big & (slot != width)] = width + 1
        n_slots = width + 2
        idx = gid.astype(np.intp)
        idx *= n_slots
        idx += slot
        idx *= _NKEYS
        idx += _positions(gaps)
        cells = np.bincount(idx, minlength=(G + 1) * n_slots * _NKEYS)[: G * n_slots * _NKEYS]
        del idx
        cells = cells.reshape(G, n_slots, _NKEYS)
        self.cube[:G, :width] += cells[:, :width]
        self.unknown[:G] += cells[:, width]
        self.big[:G] += cells[:, width + 1]
        del cells
        # Exact sums and counts. ITL sum = sum of gaps of chunks with >= 1 token (gap/n * n samples).
        gap_sum = np.bincount(gid, weights=gaps, minlength=G + 1)[:G]
        v["gap_sum"][:G] += gap_sum
        v["gaps"][:G] += np.bincount(gid, minlength=G + 1)[:G]
        n_f = slot.astype(np.float32)
        if exact_c is not None or big is not None:
            n_f[slot == width] = 1.0  # no exact count: one sample per chunk
            if big is not None:
                n_f[big] = tok[big]
        if tok.size and (n_f.min() < 1):
            n_f[n_f < 1] = np.nan  # zero-token chunks give no ITL sample
            v["itl_sum"][:G] += np.bincount(gid, weights=np.where(np.isnan(n_f), 0.0, gaps), minlength=G + 1)[:G]
        else:
            v["itl_sum"][:G] += gap_sum
        if big is not None:
            self._add_big(gid, gaps, tok, big & (slot == width + 1), G)
        # Exact min/max: the dump group's gaps become NaN, then one fmin/fmax per request and group.
        gaps[gid == G] = np.nan
        has = (n_chunks >= 2) & (gid_req >= 0)
        seg_starts, seg_gid = ptr[:-1][has], gid_req[has]
        if seg_starts.size:
            for values, lo, hi in ((gaps, "gap_lo", "gap_hi"), (gaps / n_f, "itl_lo", "itl_hi")):
                np.fmin.at(v[lo], seg_gid, np.fmin.reduceat(values, seg_starts).astype(np.float64))
                np.fmax.at(v[hi], seg_gid, np.fmax.reduceat(values, seg_starts).astype(np.float64))

    def _add_kernel(self, gid_req: np.ndarray, offsets: np.ndarray, n_chunks: np.ndarray, tokens: np.ndarray,
                    exact: np.ndarray, width: int, G: int) -> None:
        """The same counts as the numpy path in one C pass (``analysis._chunkhist``)."""
        cells = np.zeros((G, width + 2, _NKEYS), dtype=np.int64)
        big_itl = np.zeros((G, _NKEYS), dtype=np.int64)
        v = self.vec
        part = {name: np.ascontiguousarray(v[name][:G]) for name in v}
        gaps = np.zeros(G, dtype=np.int64)
        assert _kernel is not None
        _kernel.accumulate(np.ascontiguousarray(offsets, dtype=np.float64), np.ascontiguousarray(n_chunks, dtype=np.int64),
                           np.ascontiguousarray(tokens, dtype=np.int32), np.ascontiguousarray(gid_req, dtype=np.int32),
                           np.ascontiguousarray(exact, dtype=np.uint8), width, cells, big_itl, part["gap_sum"],
                           part["itl_sum"], part["gap_lo"], part["gap_hi"], part["itl_lo"], part["itl_hi"], gaps,
                           float(_A), float(_B), float(_CLAMP))
        for name in ("gap_sum", "itl_sum", "gap_lo", "gap_hi", "itl_lo", "itl_hi"):
            v[name][:G] = part[name]
        v["gaps"][:G] += gaps
        self.cube[:G, :width] += cells[:, :width]
        self.unknown[:G] += cells[:, width]

    def _add_big(self, gid: np.ndarray, gaps: np.ndarray, tok: np.ndarray, sel: np.ndarray, G: int) -> None:
        """Chunks of >= TOKENS_CAP tokens (rare): ITL bucketed one by one, token counts per group."""
        g, t = gid[sel], tok[sel].astype(np.int64)
        keep = g < G
        g, t, itl = g[keep], t[keep], (gaps[sel][keep] / t.astype(np.float32)).astype(np.float32)
        if not g.size:
            return
        self.big_itl[:G] += np.bincount(g.astype(np.intp) * _NKEYS + _positions(itl), weights=t,
                                        minlength=G * _NKEYS)[: G * _NKEYS].reshape(G, _NKEYS).astype(np.int64)
        for gg in np.unique(g).tolist():
            counts = np.bincount(t[g == gg])
            prev = self.big_tokens.get(gg, np.zeros(0, dtype=np.int64))
            size = max(prev.size, counts.size)
            self.big_tokens[gg] = np.pad(prev, (0, size - prev.size)) + np.pad(counts, (0, size - counts.size))

    def finish(self) -> ChunkHistograms:
        keys = [k for k, _ in sorted(self.keys.items(), key=lambda kv: kv[1])]
        groups = np.concatenate(self.groups) if self.groups else np.zeros(0, dtype=np.int32)
        self.groups = []
        v = self.vec
        return ChunkHistograms(
            keys=keys, request_group=groups, cube=self.cube, unknown=self.unknown, big=self.big,
            big_itl=self.big_itl, big_tokens=self.big_tokens, gap_sum=v["gap_sum"], itl_sum=v["itl_sum"],
            gap_lo=v["gap_lo"], gap_hi=v["gap_hi"], itl_lo=v["itl_lo"], itl_hi=v["itl_hi"],
            gaps=v["gaps"].astype(np.int64), requests=v["requests"].astype(np.int64),
            deliveries=self.delivery.finish() if self.delivery is not None else None,
        )


def merge_deliveries(offsets: np.ndarray, n_chunks: np.ndarray, tokens: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(offsets, n_chunks, tokens)`` with each request's chunks of equal offset merged.

    A delivery's offset is its chunks' (shared) offset and its tokens their sum; a request's
    first chunk always starts a delivery, so deliveries never span requests.
    """
    if offsets.size == 0:
        return offsets, n_chunks, tokens
    head = np.ones(offsets.size, dtype=bool)
    head[1:] = offsets[1:] != offsets[:-1]
    starts = np.cumsum(n_chunks)[:-1]
    head[starts[starts < offsets.size]] = True
    if head.all():
        return offsets, n_chunks, tokens
    first = np.flatnonzero(head)
    req_of = np.repeat(np.arange(n_chunks.size), n_chunks)
    d_n = np.bincount(req_of[first], minlength=n_chunks.size).astype(n_chunks.dtype, copy=False)
    d_tok = np.add.reduceat(tokens.astype(np.int64), first).astype(tokens.dtype, copy=False)
    return offsets[first], d_n, d_tok


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
        gaps = int(ch.gaps[gs].sum())
        inexact = None if gaps == 0 else 1.0 - int(ch.exact_gaps[gs].sum()) / gaps
        out.append((ch.itl(gs), ch.inter_chunk(gs), inexact, ch.token_hist(gs)))
    return out
