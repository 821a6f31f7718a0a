"""The simulator's prefix cache: vLLM-style hashed blocks of prompt tokens, LRU eviction (pure).

A prompt is cut into full blocks of ``block_tokens`` tokens; block ``i``'s key is a hash of
blocks ``0..i`` (a chain), so a block hits only when everything before it matches too -- as in
vLLM's automatic prefix caching. A lookup counts the leading blocks already cached (hits), then
inserts/refreshes all of the prompt's full blocks (least recently used ones are evicted beyond
``capacity_blocks``). As in vLLM, the last prompt token is always computed, so at most
``len(tokens) - 1`` tokens hit. Counters are in tokens: ``queries_tokens`` (prompt tokens looked
up) and ``hits_tokens`` (of those, found cached), exported as ``vllm:prefix_cache_queries_total``
and ``vllm:prefix_cache_hits_total``. Simplification: blocks enter the cache when the request
arrives, not when their prefill completes.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Sequence


class PrefixCache:
    """Hashed-block LRU cache of prompt prefixes."""

    def __init__(self, capacity_blocks: int, block_tokens: int = 16) -> None:
        if capacity_blocks < 1 or block_tokens < 1:
            raise ValueError("capacity_blocks and block_tokens must be >= 1")
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self.blocks: OrderedDict[int, None] = OrderedDict()
        self.queries_tokens = 0
        self.hits_tokens = 0

    def lookup_insert(self, tokens: Sequence[str]) -> int:
        """Number of leading prompt tokens served from the cache; the prompt's blocks are then cached."""
        n = len(tokens)
        bt = self.block_tokens
        blocks = self.blocks
        h = 0
        hit_blocks = 0
        matching = True
        for start in range(0, n - n % bt, bt):
            h = hash((h, tuple(tokens[start:start + bt])))
            if matching and h in blocks:
                hit_blocks += 1
            else:
                matching = False
            blocks[h] = None
            blocks.move_to_end(h)
        while len(blocks) > self.capacity_blocks:
            blocks.popitem(last=False)
        cached = min(hit_blocks * bt, max(0, n - 1))
        self.queries_tokens += n
        self.hits_tokens += cached
        return cached
