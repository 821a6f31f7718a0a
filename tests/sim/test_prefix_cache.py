"""The simulator's prefix cache: hashed blocks, chained, LRU; cached prefill is skipped."""

from __future__ import annotations

import pytest

from tokenswarm.sim.engine import Scheduler
from tokenswarm.sim.prefixcache import PrefixCache
from tokenswarm.sim.profiles import load_profile
from tokenswarm.sim.samples import chat_messages
from tokenswarm.sim.virtual import make_sequence

P27 = load_profile("27b-1gpu")


def toks(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def test_a_repeated_prefix_hits_in_whole_blocks_and_the_counters_are_in_tokens():
    c = PrefixCache(capacity_blocks=100, block_tokens=4)
    shared = toks("s", 10)  # two full blocks + 2 tokens
    assert c.lookup_insert(shared + toks("a", 5)) == 0
    assert c.lookup_insert(shared + toks("b", 5)) == 8  # the two full shared blocks
    assert (c.queries_tokens, c.hits_tokens) == (30, 8)


def test_a_block_hits_only_when_everything_before_it_matches():
    c = PrefixCache(capacity_blocks=100, block_tokens=4)
    c.lookup_insert(toks("x", 4) + toks("y", 4))
    assert c.lookup_insert(toks("z", 4) + toks("y", 4)) == 0


def test_the_last_prompt_token_is_always_computed():
    c = PrefixCache(capacity_blocks=100, block_tokens=4)
    c.lookup_insert(toks("s", 8))
    assert c.lookup_insert(toks("s", 8)) == 7


def test_least_recently_used_blocks_are_evicted_beyond_the_capacity():
    c = PrefixCache(capacity_blocks=2, block_tokens=4)
    c.lookup_insert(toks("a", 9))  # blocks a0, a1
    c.lookup_insert(toks("b", 9))  # blocks b0, b1 evict a0, a1
    assert c.lookup_insert(toks("a", 9)) == 0
    with pytest.raises(ValueError):
        PrefixCache(0)


def first_token_s(prefilled: int) -> float:
    sched = Scheduler(P27)
    s = make_sequence("r", chat_messages("summarization", 1), 8, P27)
    s.prefilled = prefilled
    sched.submit(s, 0.0)
    sched.advance(0.0)
    t = 0.0
    while s.first_token_s is None:
        t = sched.next_deadline()
        assert t is not None
        sched.advance(t)
    return s.first_token_s


def test_cached_prompt_tokens_are_not_prefilled_again_so_the_first_token_comes_sooner():
    s = make_sequence("r", chat_messages("summarization", 1), 8, P27)
    assert s.prompt_len > 500
    cold, warm = first_token_s(0), first_token_s(s.prompt_len - 16)
    assert warm < 0.5 * cold, (cold, warm)
