"""The simulator's own metrics: deferred histograms and the emission-lag reservoir."""

from __future__ import annotations

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from tokenswarm.sim.engine import EngineStats
from tokenswarm.sim.simmetrics import Histogram, LagReservoir, SimMetrics, render


def test_histogram_buckets_like_prometheus_le_after_a_deferred_flush():
    h = Histogram((0.01, 0.1, 1.0))
    for v in (0.005, 0.01, 0.0100001, 0.1, 0.5, 2.0):
        h.observe(v)
    assert len(h.pending) == 6  # nothing bucketed yet: observe is one append
    assert h.counts == [2, 2, 1, 1]  # reading flushes; a value equal to a bound counts in that bucket
    assert h.count == 6 and abs(h.total - 2.6250001) < 1e-9
    assert len(h.pending) == 0


def test_histogram_keeps_counting_after_a_flush():
    h = Histogram((1.0,))
    h.observe(0.5)
    h.flush()
    h.observe(3.0)  # the bound append still points at the (emptied) pending array
    assert h.counts == [1, 1] and h.count == 2


def test_histogram_hands_each_flushed_batch_to_its_sink_in_order():
    seen: list[list[float]] = []
    h = Histogram((1.0,), sink=lambda v: seen.append(v.tolist()))
    h.observe(0.3)
    h.observe(0.1)
    h.flush()
    h.flush()  # nothing pending: the sink is not called again
    h.observe(0.2)
    _ = h.count
    assert seen == [[0.3, 0.1], [0.2]]


def test_lag_reservoir_keeps_the_newest_values_when_it_wraps():
    r = LagReservoir(size=4)
    r.extend(np.array([1.0, 2.0, 3.0]))
    r.extend(np.array([4.0, 5.0, 6.0]))
    assert r.n == 6 and sorted(r.buf.tolist()) == [3.0, 4.0, 5.0, 6.0]
    r.extend(np.arange(10.0, 20.0))  # a batch larger than the reservoir
    assert r.n == 16 and sorted(r.buf.tolist()) == [16.0, 17.0, 18.0, 19.0]
    assert r.max_s == 19.0


def test_lag_summary_percentiles_in_ms_and_reset():
    r = LagReservoir(size=1000)
    r.extend(np.arange(1, 101) / 1000.0)  # 1..100 ms
    s = r.summary()
    assert s["count"] == 100 and s["p50_ms"] == 51.0 and s["p99_ms"] == 100.0 and s["max_ms"] == 100.0
    r.reset()
    assert r.summary()["p50_ms"] is None


def test_emission_lags_reach_both_the_histogram_and_the_reservoir_whoever_flushes():
    m = SimMetrics()
    for lag in (0.0002, 0.004, 0.03):
        m.emission_lag.observe(lag)
    text = render("sim", m, EngineStats(), 0, 0, 0.0, "none", 0, None)  # the scrape flushes
    assert m.lags.summary()["count"] == 3
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    lag = fams["tokenswarm_sim:emission_lag_seconds"]
    count = [s.value for s in lag.samples if s.name.endswith("_count")]
    assert count == [3.0]
    m.emission_lag.observe(0.001)
    m.flush()
    assert m.lags.summary()["count"] == 4 and m.emission_lag.count == 4
