"""Live histograms: within 1 % of exact quantiles, and merging equals recording together."""

import random

import numpy as np
import pytest

from tests.helpers.reference import itl_ms
from tokenswarm.load.livestats import LiveStats, LogHistogram, TaskStats
from tokenswarm.record import RequestRecord


def test_quantiles_within_one_percent_of_exact_at_every_magnitude():
    rng = np.random.default_rng(3)
    values = np.concatenate([rng.lognormal(0, 1, 5000), rng.lognormal(6, 1.5, 5000)])
    h = LogHistogram()
    for v in values:
        h.add(float(v))
    for q in (0.5, 0.9, 0.99, 0.999):
        exact = float(np.quantile(values, q, method="inverted_cdf"))
        assert h.quantile(q) == pytest.approx(exact, rel=0.011)
    assert h.count == len(values) and h.mean == pytest.approx(values.mean())
    assert h.min == values.min() and h.max == values.max()


def test_merge_of_parts_equals_the_whole_and_survives_serialisation():
    vals = [random.Random(1).uniform(0.001, 5000) for _ in range(3000)]
    whole, a, b = LogHistogram(), LogHistogram(), LogHistogram()
    for i, v in enumerate(vals):
        whole.add(v)
        (a if i % 2 else b).add(v)
    merged = LogHistogram.from_dict(a.to_dict())
    merged.merge(LogHistogram.from_dict(b.to_dict()))
    assert merged.buckets == whole.buckets and merged.count == whole.count
    assert merged.quantile(0.99) == whole.quantile(0.99)


def rec(task, outcome="ok", offs=(100.0, 150.0, 250.0), toks=(1, 1, 2), e2e=260.0, out=4):
    return RequestRecord(run_id="r", worker_id="w", seq=0, task=task, user_class="U", outcome=outcome,
                         request_key="k", scheduled_at_s=0.0, sent_at_s=0.0, schedule_lag_ms=0.5,
                         ttft_ms=offs[0] if offs else None, e2e_ms=e2e, chunk_offsets_ms=list(offs),
                         chunk_tokens=list(toks), output_tokens=out)


def test_observe_counts_itl_per_token_and_tokens_per_chunk():
    s = LiveStats(clock=lambda: 1000.0)
    s.observe(rec("qa"))
    t = s.tasks["qa"]
    # gaps: 50 ms for 1 token, 100 ms for 2 tokens -> ITL samples 50, 50, 50
    assert t.hists["itl_ms"].count == 3 and t.hists["itl_ms"].max == pytest.approx(50.0)
    assert t.chunks == 2 and t.chunk_tokens == 3  # first chunk excluded
    assert t.hists["tpot_ms"].mean == pytest.approx((260 - 100) / 3)


def test_deferred_chunk_gaps_equal_per_stream_bucketing_and_never_cross_streams():
    rng = np.random.default_rng(5)
    streams = []
    for _ in range(300):  # enough values to flush on size once, the rest on the first read
        n = int(rng.integers(1, 120))
        gaps = np.where(rng.random(n) < 0.3, 0.0, rng.exponential(8.0, n))  # some chunks read together
        offs = np.cumsum(gaps).round(3).tolist()
        toks = rng.integers(0, 4, n).tolist()  # zero-token chunks give no samples
        streams.append((offs, toks))
    deferred, direct = LogHistogram(), LogHistogram()
    for offs, toks in streams:
        deferred.add_chunk_gaps(offs, toks)
        samples = itl_ms(offs, toks)  # the glossary's per-delivery ITL of this stream alone
        if samples:
            direct.add_many(np.asarray(samples), np.ones(len(samples), dtype=np.int64))
    assert deferred.count == direct.count > 0  # a read sees what is still pending
    assert deferred.buckets == direct.buckets
    assert deferred.total == pytest.approx(direct.total)
    assert (deferred.min, deferred.max) == (direct.min, direct.max)
    assert LogHistogram.from_dict(deferred.to_dict()).quantile(0.99) == direct.quantile(0.99)


def test_failures_count_but_do_not_enter_e2e():
    s = LiveStats(clock=lambda: 1000.0)
    s.observe(rec("qa", outcome="timeout", offs=(), toks=(), out=None))
    t = s.tasks["qa"]
    assert t.failures == 1 and t.hists["e2e_ms"].count == 0 and t.hists["ttft_ms"].count == 0


def test_worker_deltas_merge_on_master_exactly_once():
    now = [1000.0]
    w1, w2, master = LiveStats(clock=lambda: now[0]), LiveStats(clock=lambda: now[0]), LiveStats(clock=lambda: now[0])
    for _ in range(5):
        w1.observe(rec("qa"))
        w2.observe(rec("code"))
    master.merge_delta(w1.take_delta())
    master.merge_delta(w2.take_delta())
    master.merge_delta(w1.take_delta())  # empty delta: nothing double counted
    assert master.tasks["qa"].requests == 5 and master.tasks["code"].requests == 5
    assert master.total().output_tokens == 40
    now[0] = 1001.5
    assert master.rate(window_s=1) == (40.0, 10.0, 0.0)
    back = TaskStats.from_dict(master.tasks["qa"].to_dict())  # what a worker's report carries
    assert back.to_dict() == master.tasks["qa"].to_dict()
    assert back.requests == 5 and back.hists["ttft_ms"].count == master.tasks["qa"].hists["ttft_ms"].count


def test_window_summary_is_the_difference_of_two_snapshots():
    from tokenswarm.load.livestats import snapshot, window_summary

    s = LiveStats(clock=lambda: 1000.0)
    for _ in range(10):
        s.observe(rec("qa", offs=(1000.0, 1010.0), toks=(1, 1), e2e=1020.0, out=2))  # slow early requests
    before = snapshot(s.total())
    for _ in range(30):
        s.observe(rec("qa", offs=(10.0, 20.0), toks=(1, 1), e2e=30.0, out=2))
    w = window_summary(s.total(), before, seconds=10.0)
    assert w["requests"] == 30 and w["requests_per_s"] == 3.0 and w["output_tokens_per_s"] == 6.0
    assert w["live_ttft_p99_ms"] == pytest.approx(10.0, rel=0.011)  # the slow ones are outside the window
    assert w["error_rate"] == 0.0
