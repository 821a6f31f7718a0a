"""Per-token ITL and inter-chunk statistics from mergeable histograms, accumulated in one pass.

The columnar store (:mod:`analysis.loader.columnar`) never holds all per-chunk samples: as
each row group is read, :class:`ChunkAccumulator` adds its chunk gaps to histograms kept per
*chunk group*, the successful requests of one (load step, phase, task). Any table row is a
union of whole groups, and histograms merge by adding counts.

What is kept
    Per group, the gaps between consecutive chunks are counted by (tokens of the chunk that ends
    the gap, gap bucket), with the live statistics' 1 %-wide buckets
    (:mod:`tokenswarm.buckets`, the scheme of :class:`~tokenswarm.load.livestats.LogHistogram`): the inter-chunk
    histogram (summed over tokens) and the tokens-per-chunk histogram. Per-token ITL follows the
    glossary's per-delivery rule (:func:`tokenswarm.metrics.itl_samples`): in the same walk over
    the chunks, chunks of equal offset (read together) are one *delivery*, and deliveries are
    counted by (tokens of the delivery, bucket of the gap before it); a delivery of ``n`` tokens
    after a gap in bucket ``b`` is ``n`` samples of ``middle(b) / n``. One pass per row group
    gives both (the C extension ``analysis._chunkhist``, or a few numpy ``bincount`` calls on
    the same per-gap arrays where it is not built: the same counts); no merged copy of the
    chunk arrays is made. Sums, counts, minima and maxima are kept exactly beside them.
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
from tokenswarm.buckets import BUCKET_BASE, RELATIVE_PRECISION, bucket_value_ms

try:  # the C fast path of ChunkAccumulator.add (setup.py builds it; optional)
    from tokenswarm.analysis import _chunkhist as _kernel
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
    middle, or the lead gap bucket's middle divided by the delivery's tokens for ITL), so every
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
    """Result of a pass: per chunk group, gap-bucket counts by tokens per chunk and per delivery, and exact sums.

    ``request_group[i]`` is the chunk group of request ``i`` (-1: not a successful request);
    ``keys[g]`` is ``(step, phase code, task code)`` of group ``g``.

    Inter-chunk and tokens per chunk (every chunk): ``cube[g, t, b]`` counts the gaps of bucket
    offset ``b`` whose chunk has ``t`` tokens; ``unknown[g, b]`` those without exact counts;
    ``big[g, b]`` those of ``>= TOKENS_CAP`` tokens, whose token counts are ``big_tokens[g]``.

    Per-token ITL (every *delivery*: the chunks of a request read together, equal offsets):
    ``itl_cube[g, t, b]`` counts the deliveries of ``t`` tokens (1..) after a lead gap of bucket
    offset ``b``; ``itl_big[g, b]`` the ITL samples (tokens) of deliveries of ``>= TOKENS_CAP``
    tokens, by the bucket of ``lead / t``.
    """

    keys: list[tuple[int, int, int]]
    request_group: np.ndarray
    cube: np.ndarray
    unknown: np.ndarray
    big: np.ndarray
    big_tokens: dict[int, np.ndarray]
    gap_sum: np.ndarray
    gap_lo: np.ndarray
    gap_hi: np.ndarray
    gaps: np.ndarray
    requests: np.ndarray
    itl_cube: np.ndarray
    itl_big: np.ndarray
    itl_sum: np.ndarray
    itl_lo: np.ndarray
    itl_hi: np.ndarray

    @property
    def exact_gaps(self) -> np.ndarray:
        return np.asarray(self.gaps - self.unknown.sum(axis=1))

    def inter_chunk(self, gs: list[int]) -> HistogramParts:
        w = self.cube[gs].sum(axis=(0, 1)) + self.unknown[gs].sum(axis=0) + self.big[gs].sum(axis=0)
        return HistogramParts(_MID, w, float(self.gap_sum[gs].sum()), _lo(self.gap_lo[gs]), _hi(self.gap_hi[gs]))

    def itl(self, gs: list[int]) -> HistogramParts:
        """Per-token ITL per delivery (the glossary's rule, :func:`tokenswarm.metrics.itl_samples`):
        a delivery of ``n`` tokens after a lead gap in bucket ``b`` is ``n`` samples of ``middle(b) / n``."""
        cube = self.itl_cube[gs].sum(axis=0)  # (tokens, buckets)
        values = [_MID / n for n in range(1, cube.shape[0])] + [_MID]
        weights = [cube[n] * n for n in range(1, cube.shape[0])] + [self.itl_big[gs].sum(axis=0)]
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


def _widen(a: np.ndarray, shape: tuple[int, ...], fill: float = 0) -> np.ndarray:
    """``a`` zero-padded (or ``fill``-padded) at the end of each axis to at least ``shape``; ``a`` itself if it fits."""
    want = tuple(max(s, w) for s, w in zip(a.shape, shape))
    if want == a.shape:
        return a
    out = np.full(want, fill, dtype=a.dtype)
    out[tuple(slice(0, s) for s in a.shape)] = a
    return out


#: Per-group exact statistics and the value a new group starts from.
_VEC_FILL: dict[str, float] = {"gap_sum": 0.0, "itl_sum": 0.0, "gaps": 0.0, "requests": 0.0,
                               "gap_lo": math.inf, "itl_lo": math.inf, "gap_hi": -math.inf, "itl_hi": -math.inf}


class ChunkAccumulator:
    """Adds row groups' chunk lists to per-group bucket counts (see the module docstring).

    One walk over each batch's chunks gives both the per-chunk counts (inter-chunk gaps, tokens
    per chunk) and the per-delivery counts (per-token ITL): a delivery is closed when a chunk's
    offset differs from the previous one's, so no merged copy of the chunk arrays is made.
    """

    def __init__(self, use_kernel: bool = True) -> None:
        self.use_kernel = use_kernel  # False: the numpy path (tests compare the two)
        self.keys: dict[tuple[int, int, int], int] = {}
        self.cube = np.zeros((0, 1, _NKEYS), dtype=np.int64)
        self.unknown = np.zeros((0, _NKEYS), dtype=np.int64)
        self.big = np.zeros((0, _NKEYS), dtype=np.int64)
        self.big_tokens: dict[int, np.ndarray] = {}
        self.itl_cube = np.zeros((0, 1, _NKEYS), dtype=np.int64)
        self.itl_big = np.zeros((0, _NKEYS), dtype=np.int64)
        self.vec = {name: np.zeros(0) for name in _VEC_FILL}
        self.groups: list[np.ndarray] = []

    def _grow(self, n: int, tokens: int = 0, itl_tokens: int = 0) -> None:
        """Room for ``n`` groups, ``tokens`` per-chunk token slots and ``itl_tokens`` per-delivery ones."""
        self.cube = _widen(self.cube, (n, tokens, _NKEYS))
        self.itl_cube = _widen(self.itl_cube, (n, itl_tokens, _NKEYS))
        self.unknown, self.big, self.itl_big = (_widen(a, (n, _NKEYS)) for a in (self.unknown, self.big, self.itl_big))
        for name, a in self.vec.items():
            self.vec[name] = _widen(a, (n,), _VEC_FILL[name])

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
        gid_req = self._group_ids(ok, step, phase, task)
        self.groups.append(gid_req)
        G = len(self.keys)
        tok = tokens[1:]
        tmax = int(tok.max()) if tok.size else 0
        width = min(tmax, TOKENS_CAP - 1) + 1  # exact token slots of this batch
        self._grow(G, width)
        self.vec["requests"][:G] += np.bincount(gid_req[gid_req >= 0], minlength=G)[:G]
        if offsets.size < 2 or G == 0:
            return
        if _kernel is not None and tmax < TOKENS_CAP and self.use_kernel:
            self._add_kernel(gid_req, offsets, n_chunks, tokens, exact, width, G)
        else:
            self._add_numpy(gid_req, offsets, n_chunks, tokens, exact, width, G)

    def _add_numpy(self, gid_req: np.ndarray, offsets: np.ndarray, n_chunks: np.ndarray, tokens: np.ndarray,
                   exact: np.ndarray, width: int, G: int) -> None:
        """The numpy path: per-gap arrays, then the per-chunk and the per-delivery counts from them."""
        total = offsets.size
        step64 = np.diff(offsets)  # gap j ends at chunk j + 1
        new_delivery = step64 != 0  # compared in float64, as the offsets are stored
        gaps = step64.astype(np.float32)
        del step64
        ptr = np.zeros(n_chunks.size + 1, dtype=np.int64)
        np.cumsum(n_chunks, out=ptr[1:])
        gid = np.repeat(np.where(gid_req >= 0, gid_req, G).astype(np.int32), n_chunks)[1:]
        starts = ptr[1:-1]
        starts = starts[(starts > 0) & (starts < total)]
        gid[starts - 1] = G  # the step from one request's last chunk to the next's first: the dump group G
        tok = tokens[1:]
        all_exact = bool((exact | (n_chunks == 0)).all())  # requests without chunks add no gaps
        exact_c = None if all_exact else np.repeat(exact, n_chunks)[1:]
        pos = _positions(gaps)
        self._count_chunks(gid, gaps, pos, tok, exact_c, width, G)
        # ITL counts a chunk without an exact count as one token (as the records path does)
        self._count_deliveries(gid, gaps, pos, tok if exact_c is None else np.where(exact_c, tok, 1),
                               new_delivery, G)
        # Exact gap min/max: the dump group's gaps become NaN, then one fmin/fmax per request and group.
        gaps[gid == G] = np.nan
        has = (n_chunks >= 2) & (gid_req >= 0)
        seg_starts, seg_gid = ptr[:-1][has], gid_req[has]
        v = self.vec
        if seg_starts.size:
            np.fmin.at(v["gap_lo"], seg_gid, np.fmin.reduceat(gaps, seg_starts).astype(np.float64))
            np.fmax.at(v["gap_hi"], seg_gid, np.fmax.reduceat(gaps, seg_starts).astype(np.float64))

    def _count_chunks(self, gid: np.ndarray, gaps: np.ndarray, pos: np.ndarray, tok: np.ndarray,
                      exact_c: np.ndarray | None, width: int, G: int) -> None:
        """Inter-chunk counts by (group, tokens of the chunk, gap bucket); gap sums and counts."""
        tmax = int(tok.max()) if tok.size else 0
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
        idx += pos
        cells = np.bincount(idx, minlength=(G + 1) * n_slots * _NKEYS)[: G * n_slots * _NKEYS]
        del idx
        cells = cells.reshape(G, n_slots, _NKEYS)
        self.cube[:G, :width] += cells[:, :width]
        self.unknown[:G] += cells[:, width]
        self.big[:G] += cells[:, width + 1]
        del cells
        v = self.vec
        v["gap_sum"][:G] += np.bincount(gid, weights=gaps, minlength=G + 1)[:G]
        v["gaps"][:G] += np.bincount(gid, minlength=G + 1)[:G]
        if big is not None:
            self._add_big_tokens(gid, tok, big & (slot == width + 1), G)

    def _count_deliveries(self, gid: np.ndarray, gaps: np.ndarray, pos: np.ndarray, tok_d: np.ndarray,
                          new_delivery: np.ndarray, G: int) -> None:
        """Per-token ITL counts per delivery, from the per-gap arrays of :meth:`_add_numpy`.

        A delivery starts at a chunk whose offset differs from the previous chunk's, or at a
        request's first chunk (the gap before it is in the dump group ``G``); it counts only after
        a predecessor within its request, with the gap that starts it (its lead) and its tokens.
        """
        heads = np.flatnonzero(new_delivery | (gid == G))
        if not heads.size:
            return
        t = np.maximum(np.add.reduceat(tok_d.astype(np.int64), heads), 0)
        g = gid[heads]
        live = (g < G) & (t > 0)  # not a request's first delivery, not a dumped request, has tokens
        heads, t, g = heads[live], t[live], g[live]
        lead = gaps[heads]
        itl = lead / t.astype(np.float32)
        small = t < TOKENS_CAP
        if small.any():
            width = int(t[small].max()) + 1
            self._grow(G, 0, width)
            idx = (g[small].astype(np.intp) * width + t[small]) * _NKEYS + pos[heads[small]]
            self.itl_cube[:G, :width] += np.bincount(idx, minlength=G * width * _NKEYS).reshape(G, width, _NKEYS)
        if not small.all():  # rare: bucketed by the ITL value itself, weighted by tokens
            big = ~small
            idx = g[big].astype(np.intp) * _NKEYS + _positions(itl[big])
            self.itl_big[:G] += np.bincount(idx, weights=t[big], minlength=G * _NKEYS).reshape(G, _NKEYS).astype(np.int64)
        v = self.vec
        v["itl_sum"][:G] += np.bincount(g, weights=lead, minlength=G)
        np.fmin.at(v["itl_lo"], g, itl.astype(np.float64))
        np.fmax.at(v["itl_hi"], g, itl.astype(np.float64))

    def _add_kernel(self, gid_req: np.ndarray, offsets: np.ndarray, n_chunks: np.ndarray, tokens: np.ndarray,
                    exact: np.ndarray, width: int, G: int) -> None:
        """The same counts as the numpy path in one C pass (``analysis._chunkhist``).

        The pass counts into cells of this batch's groups only (a row group holds a few of a
        run's groups), which are then added to the run's; so a batch's scratch cells do not grow
        with the number of groups of the run.
        """
        present = np.unique(gid_req[gid_req >= 0])
        L = present.size
        if L == 0:
            return
        local = np.full(G, -1, dtype=np.int32)
        local[present] = np.arange(L, dtype=np.int32)
        lgid = np.where(gid_req >= 0, local[np.maximum(gid_req, 0)], -1).astype(np.int32)
        cells = np.zeros((L, width + 2, _NKEYS), dtype=np.int64)
        # every delivery size below the cap has a slot; np.zeros is lazily zeroed memory, so the
        # slots no delivery reaches cost no RSS
        itl_cells = np.zeros((L, TOKENS_CAP, _NKEYS), dtype=np.int64)
        itl_big = np.zeros((L, _NKEYS), dtype=np.int64)
        v = self.vec
        part = {name: v[name][present] for name in ("gap_sum", "itl_sum", "gap_lo", "gap_hi", "itl_lo", "itl_hi")}
        gaps = np.zeros(L, dtype=np.int64)
        assert _kernel is not None
        max_tokens = _kernel.accumulate(
            np.ascontiguousarray(offsets, dtype=np.float64), np.ascontiguousarray(n_chunks, dtype=np.int64),
            np.ascontiguousarray(tokens, dtype=np.int32), lgid, np.ascontiguousarray(exact, dtype=np.uint8), width,
            cells, itl_cells, itl_big, part["gap_sum"], part["itl_sum"], part["gap_lo"], part["gap_hi"],
            part["itl_lo"], part["itl_hi"], gaps, float(_A), float(_B), float(_CLAMP))
        for name, values in part.items():
            v[name][present] = values
        v["gaps"][present] += gaps
        self.cube[present, :width] += cells[:, :width]
        self.unknown[present] += cells[:, width]
        if max_tokens > 0:
            self._grow(G, 0, max_tokens + 1)
            self.itl_cube[present, : max_tokens + 1] += itl_cells[:, : max_tokens + 1]
        self.itl_big[present] += itl_big

    def _add_big_tokens(self, gid: np.ndarray, tok: np.ndarray, sel: np.ndarray, G: int) -> None:
        """Token counts per group of the chunks of >= TOKENS_CAP tokens (rare)."""
        g, t = gid[sel], tok[sel].astype(np.int64)
        keep = g < G
        g, t = g[keep], t[keep]
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
            big_tokens=self.big_tokens, gap_sum=v["gap_sum"], gap_lo=v["gap_lo"], gap_hi=v["gap_hi"],
            gaps=v["gaps"].astype(np.int64), requests=v["requests"].astype(np.int64),
            itl_cube=self.itl_cube, itl_big=self.itl_big, itl_sum=v["itl_sum"], itl_lo=v["itl_lo"],
            itl_hi=v["itl_hi"],
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
        gaps = int(ch.gaps[gs].sum())
        inexact = None if gaps == 0 else 1.0 - int(ch.exact_gaps[gs].sum()) / gaps
        out.append((ch.itl(gs), ch.inter_chunk(gs), inexact, ch.token_hist(gs)))
    return out
