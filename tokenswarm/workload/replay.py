"""Trace replay's prompts: text synthesised to each trace entry's recorded prompt length and blocks."""

from __future__ import annotations

import functools
import random
from typing import Any

from tokenswarm.workload.corpora import cut_at_space, prose_corpus
from tokenswarm.workload.prompts import INIT_CHARS_PER_TOKEN
from tokenswarm.workload.tokencount import EstimateCounter, TokenCounter


class ReplayPrompts:
    """Prompts synthesised to a trace's recorded lengths from the built-in prose corpus.

    A Mooncake entry's prompt is its ``hash_ids`` blocks in order, each block's text fixed by
    its id (the same id gives the same text on every worker and request, so a server's prefix
    cache sees the trace's sharing); the last block is cut to the remaining length. Entries
    without hash ids get fresh text. Sizing uses one counted sample (characters per token).
    """

    def __init__(self, counter: TokenCounter | None, seed: int, api: str = "chat", block_tokens: int = 512) -> None:
        self.counter = counter or EstimateCounter()
        self.api = api
        self.seed = seed
        self.block_tokens = block_tokens
        corpus = prose_corpus()
        _, sample = corpus.excerpt(random.Random(f"{seed}:replay:calibration"), 4000)
        counted = self.counter.count(sample)
        self.chars_per_token = len(sample) / counted if counted > 0 else INIT_CHARS_PER_TOKEN["prose"]
        self._block = functools.lru_cache(maxsize=8192)(self._block_text)

    def _block_text(self, hash_id: int) -> str:
        _, text = prose_corpus().excerpt(random.Random(f"{self.seed}:replay:block:{hash_id}"),
                                         max(1, int(self.block_tokens * self.chars_per_token)))
        return text

    def text(self, input_tokens: int, hash_ids: tuple[int, ...] | None, rng: random.Random) -> str:
        """Prompt text of about ``input_tokens`` tokens."""
        budget = max(1, int(input_tokens * self.chars_per_token))
        if not hash_ids:
            return prose_corpus().excerpt(rng, budget)[1]
        parts: list[str] = []
        used = 0
        for h in hash_ids:
            block = self._block(h)
            if used + len(block) >= budget:
                parts.append(cut_at_space(block, max(1, budget - used)))
                break
            parts.append(block)
            used += len(block) + 1
        else:
            if used < budget:  # more tokens than blocks: fresh text for the rest
                parts.append(prose_corpus().excerpt(rng, budget - used)[1])
        return "\n".join(parts)

    def payload(self, input_tokens: int, hash_ids: tuple[int, ...] | None, rng: random.Random) -> tuple[str, Any]:
        """``(body key, value)``: chat messages or a completions prompt."""
        text = self.text(input_tokens, hash_ids, rng)
        if self.api == "chat":
            return "messages", [{"role": "user", "content": text}]
        return "prompt", text
