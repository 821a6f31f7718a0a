"""Per-token ITL is computed per *delivery* (the chunks read together), so one server
behaviour gives one ITL distribution whatever its framing: a speculative step's accepted
tokens as one chunk of n tokens (vLLM) or as n one-token events written together
(llama.cpp). Inter-chunk latency keeps the raw per-event gaps under its own name."""

import numpy as np
import pytest

from tests.analysis.runfactory import record, write_run
from tokenswarm import metrics
from tokenswarm.analysis import load_run, step_table
from tokenswarm.load.livestats import LogHistogram

#: deliveries at these offsets (ms), 3 tokens each: the same server behaviour, two framings
DELIVERIES_MS = [100.0, 130.0, 150.0, 190.0]
PER_DELIVERY = 3
VLLM = (DELIVERIES_MS, [PER_DELIVERY] * len(DELIVERIES_MS))
LLAMA_CPP = ([t for t in DELIVERIES_MS for _ in range(PER_DELIVERY)], [1] * PER_DELIVERY * len(DELIVERIES_MS))


def test_both_framings_of_one_server_behaviour_give_the_same_per_token_itl():
    vllm, llama = metrics.itl_ms(*VLLM), metrics.itl_ms(*LLAMA_CPP)
    assert sorted(vllm) == pytest.approx(sorted(llama))
    # three deliveries after the first, 3 tokens each: gaps 30, 20, 40 ms split per token
    assert sorted(vllm) == pytest.approx([20 / 3] * 3 + [30 / 3] * 3 + [40 / 3] * 3)
    assert sum(llama) == pytest.approx(DELIVERIES_MS[-1] - DELIVERIES_MS[0])


def test_inter_chunk_latency_keeps_the_raw_event_gaps():
    assert metrics.inter_chunk_ms(VLLM[0]) == [30.0, 20.0, 40.0]
    llama = metrics.inter_chunk_ms(LLAMA_CPP[0])
    assert llama.count(0.0) == 8 and sorted(g for g in llama if g) == [20.0, 30.0, 40.0]


@pytest.mark.parametrize(
    "offsets, tokens, expected",
    [
        ([5.0, 5.0, 9.0, 9.0], [1, 0, 2, 2], [1.0] * 4),  # a zero-token event joins its delivery's count
        ([5.0, 9.0, 9.0, 9.0], [2, 1, 1, 2], [1.0] * 4),  # mixed chunk sizes inside one delivery
        ([5.0, 5.0, 5.0], [1, 1, 1], []),  # everything in the first delivery: no predecessor
        ([5.0, 8.0, 20.0], None, [3.0, 12.0]),  # no exact counts: each chunk counts as one token
        ([5.0, 9.0, 9.0], None, [2.0, 2.0]),
        ([5.0, 9.0], [1, 0], []),  # a delivery without tokens gives no sample
    ],
)
def test_itl_samples_per_delivery_match_the_hand_computed_table(offsets, tokens, expected):
    assert metrics.itl_ms(offsets, tokens) == pytest.approx(expected)


def test_deliveries_never_span_two_requests():
    # Request B's first gap is 0 (its first two chunks came together): they are B's first
    # delivery, not part of request A's last one.
    a_gaps, b_gaps = [10.0, 10.0], [0.0, 6.0, 0.0]
    values, weights = metrics.itl_samples(np.array(a_gaps + b_gaps), np.array([1, 1, 1, 1, 1]),
                                          np.array([True, False, True, False, False]))
    samples = sorted(np.repeat(values, weights).tolist())
    assert samples == pytest.approx([3.0, 3.0, 10.0, 10.0])


def test_live_statistics_give_both_framings_the_same_itl_histogram():
    vllm, llama = LogHistogram(), LogHistogram()
    vllm.add_chunk_gaps(*VLLM)
    llama.add_chunk_gaps(*LLAMA_CPP)
    assert vllm.buckets == llama.buckets and vllm.count == llama.count == 9
    assert vllm.total == pytest.approx(llama.total)


def test_the_analysis_gives_both_framings_the_same_itl_and_different_inter_chunk(tmp_path):
    rows = {}
    for name, (offs, toks) in {"vllm": VLLM, "llama": LLAMA_CPP}.items():
        recs = [record(i, chunk_offsets_ms=[o + i for o in offs], chunk_tokens=toks) for i in range(5)]
        rows[name] = step_table(load_run(write_run(tmp_path / name, recs))).row(None)
    for key in ("itl_count", "itl_p50_ms", "itl_p99_ms", "itl_mean_ms", "itl_min_ms", "itl_max_ms"):
        assert rows["vllm"][key] == pytest.approx(rows["llama"][key], rel=1e-6), key
    assert rows["vllm"]["itl_count"] == 5 * 9
    assert rows["llama"]["inter_chunk_p50_ms"] == 0.0 < rows["vllm"]["inter_chunk_p50_ms"]
