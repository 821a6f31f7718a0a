"""The engine model, stepped with a fake clock (no sleeping, no sockets)."""

import dataclasses

import pytest

from tokenswarm.sim.engine import Scheduler, SpecConfig
from tokenswarm.sim.profiles import load_profile
from tokenswarm.sim.samples import chat_messages
from tokenswarm.sim.sequence import Sequence
from tokenswarm.sim.virtual import closed_loop, make_sequence

P27 = load_profile("27b-1gpu")
TINY = load_profile("tiny-fast")


def run_until_idle(sched: Scheduler, now: float = 0.0, limit: int = 100_000):
    """Advance from deadline to deadline; returns all emissions."""
    out = []
    out += sched.advance(now)
    for _ in range(limit):
        dl = sched.next_deadline()
        if dl is None:
            return out
        out += sched.advance(dl)
    raise AssertionError("engine did not go idle")


def seq(i=0, kind="qa", max_tokens=32, profile=P27, **kw) -> Sequence:
    return make_sequence(f"r{i}", chat_messages(kind, i), max_tokens, profile, **kw)


def test_step_time_is_memory_bound_at_small_batch_and_compute_bound_at_large_batch():
    s = Scheduler(P27)
    one = s.step_seconds(1, 1000)
    assert one == pytest.approx(P27.overhead_s + P27.weights_read_s + P27.kv_read_s_per_token * 1000)
    assert s.step_seconds(8, 8000) < 1.1 * s.step_seconds(1, 1000)  # batching is nearly free when memory-bound
    big = s.step_seconds(512, 0)
    assert big == pytest.approx(P27.overhead_s + P27.flops_per_token_s * 512)  # compute-bound
    assert big > 2 * one


def test_batching_slows_every_stream():
    res1, _ = closed_loop(P27, SpecConfig(), [chat_messages("qa", i) for i in range(4)], 1, 2, 64)
    res256, _ = closed_loop(P27, SpecConfig(), [chat_messages("qa", i) for i in range(4)], 256, 1, 64)

    def decode_tps(rs):
        return sorted(r.output_tokens / (r.e2e_s - r.ttft_s) for r in rs)[len(rs) // 2]

    assert decode_tps(res256) < 0.9 * decode_tps(res1)


def test_prefill_rate_delays_the_first_token():
    sched = Scheduler(P27)
    long_seq = Sequence("a", 3000, ["x"] * 10, 8, ignore_eos=True)
    sched.submit(long_seq, 0.0)
    out = run_until_idle(sched)
    first = out[0].scheduled_s
    assert first == pytest.approx(P27.overhead_s + 3000 / P27.prefill_tokens_per_s, rel=0.01)
    assert sum(e.n_tokens for e in out) == 8 and out[-1].finish_reason == "length"


def test_kv_capacity_makes_excess_requests_wait():
    small = dataclasses.replace(P27, kv_capacity_tokens=P27.max_model_len, max_model_len=1000)
    small = dataclasses.replace(small, kv_capacity_tokens=1000)
    sched = Scheduler(small)
    seqs = [Sequence(f"r{i}", 200, ["x"] * 5, 200, ignore_eos=True) for i in range(4)]  # 400 KV each
    for s in seqs:
        sched.submit(s, 0.0)
    sched.advance(0.0)
    assert sched.num_running == 2 and sched.num_waiting == 2
    out = run_until_idle(sched)
    first_token = {e.seq.rid: e.scheduled_s for e in reversed(out)}
    finished = {e.seq.rid: e.scheduled_s for e in out if e.finish_reason}
    assert first_token["r2"] >= min(finished["r0"], finished["r1"])  # waited for a slot to free
    assert all(s.n_out == 200 for s in seqs)


def test_max_num_seqs_limits_the_running_batch():
    prof = dataclasses.replace(TINY, max_num_seqs=3)
    sched = Scheduler(prof)
    for i in range(5):
        sched.submit(seq(i, profile=prof), 0.0)
    sched.advance(0.0)
    assert (sched.num_running, sched.num_waiting) == (3, 2)


def test_speculative_chunks_carry_1_to_k_plus_1_tokens_and_text_is_lossless():
    k = 4
    texts = {}
    for method in ("none", "draft", "ngram"):
        sched = Scheduler(P27, SpecConfig(method, k))
        s = seq(0, "code", max_tokens=200, ignore_eos=True)
        sched.submit(s, 0.0)
        out = run_until_idle(sched)
        sizes = [e.n_tokens for e in out]
        assert sum(sizes) == 200 and all(1 <= n <= k + 1 for n in sizes)
        if method != "none":
            assert max(sizes) == k + 1
        texts[method] = "".join(e.text for e in out)
    assert texts["none"] == texts["draft"] == texts["ngram"]


def test_spec_divergence_fault_changes_the_text():
    outs = []
    for rate in (0.0, 0.5):
        sched = Scheduler(P27, SpecConfig("draft", 4, divergence_rate=rate))
        sched.submit(seq(0, "code", max_tokens=100, ignore_eos=True), 0.0)
        outs.append("".join(e.text for e in run_until_idle(sched)))
    assert outs[0] != outs[1]


def test_spec_counters_follow_vllm_semantics():
    k = 4
    sched = Scheduler(P27, SpecConfig("draft", k))
    for i in range(4):
        sched.submit(seq(i, "code", max_tokens=120, ignore_eos=True), 0.0)
    out = run_until_idle(sched)
    st = sched.stats
    per = st.spec_accepted_per_pos
    assert st.spec_accepted_tokens == sum(per)  # per_pos[i] counts drafts with > i accepted
    assert all(a >= b for a, b in zip(per, per[1:])) and per[0] <= st.spec_drafts
    assert st.spec_draft_tokens <= k * st.spec_drafts
    # every verify step emits accepted + 1 (bonus) tokens; the prefill step emits 1 and a
    # sequence's last token (nothing left to draft for) is decoded without drafts
    assert st.generation_tokens == sum(e.n_tokens for e in out)
    base = st.spec_accepted_tokens + st.spec_drafts + 4
    assert base <= st.generation_tokens <= base + 4


def test_acceptance_depends_on_content():
    def tau(kind):
        sched = Scheduler(P27, SpecConfig("draft", 4))
        for i in range(6):
            sched.submit(seq(i, kind, max_tokens=150, ignore_eos=True), 0.0)
        run_until_idle(sched)
        return 1 + sched.stats.spec_accepted_tokens / sched.stats.spec_drafts

    assert tau("code") > tau("summarization") - 0.5 > tau("qa") + 1.0


def test_speculation_gain_shrinks_with_batch_because_verify_costs_b_times_k_plus_1():
    s = Scheduler(P27, SpecConfig("draft", 4))
    # batch of 1: verifying 5 tokens costs about one plain step (memory-bound)
    assert s.step_seconds(1, 500, k=4) < 1.05 * s.step_seconds(1, 500, k=0) + 4 * P27.draft.pass_s
    # batch of 256: verifying 256*5 tokens costs ~5x the compute of a plain step
    assert s.step_seconds(256, 0, k=4) > 4 * (s.step_seconds(256, 0, k=0) - P27.overhead_s)
    code = [chat_messages("code", i) for i in range(8)]

    def speedup(c):
        base, _ = closed_loop(P27, SpecConfig(), code, c, 1, 128)
        spec, _ = closed_loop(P27, SpecConfig("draft", 4), code, c, 1, 128)
        tps = lambda rs: sum(r.output_tokens / (r.e2e_s - r.ttft_s) for r in rs) / len(rs)  # noqa: E731
        return tps(spec) / tps(base)

    assert speedup(1) > 2.2
    assert speedup(128) < 0.7 * speedup(1)


def test_natural_end_gives_stop_and_ignore_eos_gives_length():
    sched = Scheduler(TINY)
    a = seq(0, profile=TINY, max_tokens=4000, ignore_eos=False)
    b = seq(1, profile=TINY, max_tokens=300, ignore_eos=True)
    sched.submit(a, 0.0)
    sched.submit(b, 0.0)
    run_until_idle(sched)
    assert a.finish_reason == "stop" and a.n_out == a.text.natural_len
    assert b.finish_reason == "length" and b.n_out == 300


def test_stop_string_truncates_text_and_finishes_with_stop():
    probe = seq(0, "code", profile=TINY, max_tokens=60, ignore_eos=True)
    sched = Scheduler(TINY)
    sched.submit(probe, 0.0)
    full = "".join(e.text for e in run_until_idle(sched))
    stop = full[20:26]
    s = Sequence("s", probe.prompt_len, probe.source, 60, ignore_eos=True, stops=[stop],
                 natural_range=TINY.natural_output_tokens)
    sched = Scheduler(TINY)
    sched.submit(s, 0.0)
    out = run_until_idle(sched)
    text = "".join(e.text for e in out)
    assert s.finish_reason == "stop" and full.startswith(text) and stop not in text and len(text) <= 20


def test_independent_batching_gives_every_stream_its_own_fixed_interval():
    bench = load_profile("bench-10ms")
    sched = Scheduler(bench)
    seqs = [Sequence(f"r{i}", 50, ["x"] * 50, 5, ignore_eos=True) for i in range(300)]
    for i, s in enumerate(seqs):
        sched.submit(s, i * 0.001)
    out = run_until_idle(sched, now=0.0)
    times = {}
    for e in out:
        times.setdefault(e.seq.rid, []).append(e.scheduled_s)
    for i, s in enumerate(seqs):
        ts = times[s.rid]
        assert ts[0] == pytest.approx(i * 0.001 + 0.010)
        assert [round(b - a, 9) for a, b in zip(ts, ts[1:])] == [0.010] * 4


def test_draft_outage_falls_back_to_plain_decoding():
    sched = Scheduler(TINY, SpecConfig("draft", 4), draft_state=lambda i, t: (False, 1.0))
    sched.submit(seq(0, "code", profile=TINY, max_tokens=50, ignore_eos=True), 0.0)
    out = run_until_idle(sched)
    assert all(e.n_tokens == 1 for e in out)
    assert sched.stats.spec_drafts == 0 and sched.stats.fallback_steps == sched.stats.steps == 50
    assert sched.draft_available is False
