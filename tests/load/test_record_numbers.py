"""The per-record numbers the C extension computes (record offsets, the live ITL histogram) are the
numbers the numpy paths compute, so a run's records and live statistics do not depend on whether
the extension was built."""

from __future__ import annotations

import random
from array import array

import numpy as np
import pytest

from tests.helpers import reference as ref
from tokenswarm.load import livestats
from tokenswarm.load.livestats import LogHistogram
from tokenswarm.wire import stream
from tokenswarm.wire.native import native_function

offsets_c = native_function("offsets_ms")
itl_c = native_function("itl_buckets")
pytestmark = pytest.mark.skipif(offsets_c is None or itl_c is None, reason="the C extension is not built")


def numpy_offsets(times: array, sent: float) -> list[float]:
    return ((np.frombuffer(times, dtype=np.float64) - sent) * 1000.0).round(3).tolist() if len(times) else []


def streams(seed: int, n: int):
    """Random streams like real ones: gaps of 0 (chunks read together), multi-token and empty chunks."""
    r = random.Random(seed)
    for _ in range(n):
        k = r.randint(0, 40)
        t, offs, toks = 0.0, [], []
        for i in range(k):
            t += 0.0 if (i and r.random() < 0.25) else r.choice([r.uniform(0.001, 0.9), r.uniform(1, 40), 600.0])
            offs.append(round(t, 3))
            toks.append(r.choice([0, 1, 1, 2, 3, 5]))
        yield offs, toks


def test_offsets_are_rounded_like_numpy():
    r = random.Random(7)
    for _ in range(3000):
        sent = r.uniform(0, 50000)
        times = array("d", sorted(sent + r.expovariate(5) for _ in range(r.randint(0, 60))))
        assert offsets_c(times, sent) == numpy_offsets(times, sent)


def test_offsets_refuse_anything_but_an_array_of_doubles():
    with pytest.raises(TypeError, match="array of doubles"):
        offsets_c(array("l", [1, 2]), 0.0)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_itl_buckets_equal_the_numpy_flush(seed, monkeypatch):
    data = list(streams(seed, 400))
    native = LogHistogram()
    for offs, toks in data:
        native.add_chunk_gaps(offs, toks)
    monkeypatch.setattr(livestats, "_itl_buckets", None)
    bulk = LogHistogram()
    for offs, toks in data:
        bulk.add_chunk_gaps(offs, toks)
    assert native.buckets == bulk.buckets and native.count == bulk.count
    assert native.min == bulk.min and native.max == bulk.max
    assert native.total == pytest.approx(bulk.total, rel=1e-12)
    # and both are the glossary's per-delivery ITL, written out independently
    samples = [v for offs, toks in data for v in ref.itl_ms(offs, toks)]
    assert native.count == len(samples)
    assert (native.min, native.max) == pytest.approx((min(samples), max(samples)), rel=1e-9)
    assert native.total == pytest.approx(sum(samples), rel=1e-9)


def test_a_stream_without_later_deliveries_gives_no_sample():
    h = LogHistogram()
    h.add_chunk_gaps([5.0, 5.0, 5.0], [1, 2, 3])  # one delivery: nothing before it
    h.add_chunk_gaps([5.0, 9.0], [1, 0])  # a later delivery without tokens
    assert (h.count, h.min, h.max, h.buckets) == (0, None, None, {})


def test_the_record_offsets_use_the_extension():
    assert stream._native_offsets_ms is offsets_c
