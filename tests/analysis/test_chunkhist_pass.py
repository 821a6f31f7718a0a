"""The store's fused chunk pass (``analysis._chunkhist`` and its numpy path) on tiny hand-made
batches: per-chunk counts for inter-chunk gaps and, in the same walk, per-delivery counts for
per-token ITL (chunks of equal offset are one delivery; tokenswarm.metrics' glossary)."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from tests.helpers import reference as ref
from tokenswarm.analysis import chunkhist
from tokenswarm.analysis.chunkhist import TOKENS_CAP, ChunkAccumulator, ChunkHistograms, _positions

PATHS = [pytest.param(False, id="numpy"),
         pytest.param(True, id="C", marks=pytest.mark.skipif(chunkhist._kernel is None, reason="C pass not built"))]

#: (requests as (offsets, tokens or None, ok), expected deliveries as (tokens, lead gap ms)); the
#: expected deliveries are those that give ITL samples: after a predecessor, with tokens.
CASES = {
    "vLLM: one chunk of 3 tokens per delivery": (
        [([100.0, 130.0, 150.0, 190.0], [3, 3, 3, 3], True)], [(3, 30.0), (3, 20.0), (3, 40.0)]),
    "llama.cpp: 3 one-token events per delivery": (
        [([100.0] * 3 + [130.0] * 3 + [150.0] * 3 + [190.0] * 3, [1] * 12, True)], [(3, 30.0), (3, 20.0), (3, 40.0)]),
    "a zero-token event joins its delivery": ([([5.0, 5.0, 9.0, 9.0], [1, 0, 2, 2], True)], [(4, 4.0)]),
    "mixed chunk sizes in one delivery": ([([5.0, 9.0, 9.0, 9.0], [2, 1, 1, 2], True)], [(4, 4.0)]),
    "all in the first delivery: no predecessor": ([([5.0, 5.0, 5.0], [1, 1, 1], True)], []),
    "no exact counts: one token per chunk": ([([5.0, 8.0, 20.0], None, True)], [(1, 3.0), (1, 12.0)]),
    "no exact counts, two chunks read together": ([([5.0, 9.0, 9.0], None, True)], [(2, 4.0)]),
    "a delivery without tokens gives nothing": ([([5.0, 9.0], [1, 0], True)], []),
    "deliveries never span two requests": (
        [([0.0, 10.0, 20.0], [1, 1, 1], True), ([50.0, 50.0, 56.0, 56.0], [1, 1, 1, 1], True)],
        [(1, 10.0), (1, 10.0), (2, 6.0)]),
    "a failed request between two is not counted": (
        [([0.0, 4.0], [1, 1], True), ([10.0, 30.0, 30.0], [1, 1, 1], False), ([40.0, 41.0, 41.0], [1, 2, 3], True)],
        [(1, 4.0), (5, 1.0)]),
    f"a delivery of >= {TOKENS_CAP} tokens (40 one-token events)": (
        [([100.0] + [140.0] * 40 + [150.0], [1] * 42, True)], [(40, 40.0), (1, 10.0)]),
}


def _run(requests: list[tuple[list[float], list[int] | None, bool]], use_kernel: bool) -> ChunkHistograms:
    """One batch of one chunk group (failed requests aside) through ``ChunkAccumulator.add``."""
    offsets = np.array([o for offs, _, _ in requests for o in offs], dtype=np.float64)
    n_chunks = np.array([len(offs) for offs, _, _ in requests], dtype=np.int64)
    tokens = np.array([t for offs, toks, _ in requests for t in (toks or [0] * len(offs))], dtype=np.int32)
    exact = np.array([toks is not None for _, toks, _ in requests])
    ok = np.array([good for _, _, good in requests])
    zeros = np.zeros(len(requests), dtype=np.int32)
    acc = ChunkAccumulator(use_kernel=use_kernel)
    acc.add(ok, zeros, zeros, zeros, offsets, n_chunks, tokens, exact)
    return acc.finish()


def _deliveries(ch: ChunkHistograms) -> Counter[tuple[int, int]]:
    """(tokens, lead-gap bucket) -> count of group 0; deliveries of >= TOKENS_CAP tokens as (tokens, ITL bucket)."""
    out: Counter[tuple[int, int]] = Counter()
    for t, b in zip(*np.nonzero(ch.itl_cube[0])):
        out[(int(t), int(b))] += int(ch.itl_cube[0, t, b])
    for b in np.flatnonzero(ch.itl_big[0]):
        out[(int(ch.itl_big[0, b]), int(b))] += 1  # the test cases have one such delivery per bucket
    return out


def _expected(deliveries: list[tuple[int, float]]) -> Counter[tuple[int, int]]:
    out: Counter[tuple[int, int]] = Counter()
    for t, lead in deliveries:
        value = lead if t < TOKENS_CAP else lead / t  # big deliveries are bucketed by their ITL value
        out[(t, int(_positions(np.array([value], dtype=np.float32))[0]))] += 1
    return out


@pytest.mark.parametrize("use_kernel", PATHS)
@pytest.mark.parametrize("name", list(CASES))
def test_the_fused_pass_counts_each_delivery_once(name: str, use_kernel: bool) -> None:
    requests, deliveries = CASES[name]
    ch = _run(requests, use_kernel)
    assert _deliveries(ch) == _expected(deliveries)
    good = [(offs, toks) for offs, toks, ok in requests if ok]
    # per-chunk counts are unchanged by the delivery half: one inter-chunk gap per chunk after the first
    assert int(ch.gaps[0]) == int(ch.cube[0].sum() + ch.unknown[0].sum() + ch.big[0].sum()) \
        == sum(len(offs) - 1 for offs, _ in good)
    # the ITL the histograms stand for: the glossary's samples, counted and summed exactly
    samples = [s for offs, toks in good for s in ref.itl_ms(offs, toks)]
    itl = ch.itl([0])
    assert itl.count == len(samples) == sum(t for t, _ in deliveries)
    assert itl.sum() == pytest.approx(sum(samples))
    if samples:
        assert (itl.min(), itl.max()) == pytest.approx((min(samples), max(samples)), rel=1e-6)


@pytest.mark.skipif(chunkhist._kernel is None, reason="C pass not built")
@pytest.mark.parametrize("name", list(CASES))
def test_the_c_and_numpy_passes_give_equal_counts(name: str) -> None:
    c, p = (_run(CASES[name][0], k) for k in (True, False))
    for field in ("cube", "unknown", "big", "gaps", "requests", "itl_big", "itl_sum", "itl_lo", "itl_hi",
                  "gap_sum", "gap_lo", "gap_hi"):
        a, b = getattr(c, field), getattr(p, field)
        if field == "cube":  # the numpy path may widen the cube for chunks of >= TOKENS_CAP tokens
            b = b[:, : a.shape[1]]
        np.testing.assert_array_equal(a, b, err_msg=field)
    width = max(c.itl_cube.shape[1], p.itl_cube.shape[1])
    np.testing.assert_array_equal(*(np.pad(h.itl_cube, ((0, 0), (0, width - h.itl_cube.shape[1]), (0, 0)))
                                    for h in (c, p)))
