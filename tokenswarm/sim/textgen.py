"""Deterministic "target model" and "draft model" of the simulator.

The target output is a token sequence generated position by position from a PRNG seeded
by a hash of (prompt tokens, temperature, top_p, and seed when sampling). At each position
the model either *copies* the next token of a span of the prompt (probability
``p_copy``, higher for long, repetitive, symbol-rich prompts such as code, documents to
summarise and templates) or emits a *fresh* word. Each position also draws a uniform
``u``: the draft model proposes the right token there iff ``u < agreement`` where the
agreement is high for copied tokens and low for fresh ones (lowered by temperature).
Because drafts are judged against the pre-generated target sequence, the text never
depends on speculation: speculative decoding is lossless, as in a correct engine.
"""

from __future__ import annotations

import hashlib
import math
import random
import struct

#: Words a "fresh" (non-copied) position draws from.
FRESH_WORDS: tuple[str, ...] = tuple(
    ["the", "of", "and", "to", "in", "is", "that", "for", "it", "as", "with", "was", "on", "be", "by", "this", "are", "or", "an", "from", "at", "which", "not", "have", "has", "but", "can", "all", "we", "more", "their", "will", "one", "other", "also", "into", "been", "some", "there", "these", "model", "system", "data", "value", "result", "time", "first", "new", "used", "may", "two", "each", "such", "between", "number", "state", "process", "case", "first", "request", "token", "server", "stream", "point", "order", "example", "because", "however", "therefore", "then", "when", "where", "while", "after", "before", "under", "over", "about", "function", "return", "list", "table", "field", "line", "output", "input", "answer", "question", "reason", "simple", "general", "specific", "important", "different", "possible", "large", "small", "early", "later", "final", "change", "test", "check", "build", "run", "start", "stop", "read", "write", "load", "send", "receive", "measure"]
)
_PUNCT = (",", ".", ".", "\n", ":", ";")

AGREE_COPY = 0.87  #: draft/target agreement on a copied token
AGREE_FRESH = 0.22  #: draft/target agreement on a fresh token
_BLOCK = 32  #: target positions generated at a time


def copy_probability(source: list[str]) -> float:
    """Content-dependent probability that an output position copies the prompt.

    Grows with prompt length (``L = min(1, n/600)``), the share of repeated word tokens
    (templates, code identifiers) and the share of symbol tokens (code):
    ``p = clamp(0.08 + 0.45 L + 0.30 repeat + 0.45 symbols, 0.05, 0.90)``.
    """
    n = len(source)
    if n == 0:
        return 0.05
    words: dict[str, int] = {}
    symbols = 0
    for t in source:
        s = t.strip()
        if not s:
            continue
        if s[0].isalnum() or s[0] == "_":
            words[s] = words.get(s, 0) + 1
        else:
            symbols += 1
    n_words = sum(words.values())
    repeated = sum(c for c in words.values() if c > 1) / n_words if n_words else 0.0
    sym = symbols / n
    length = min(1.0, n / 600.0)
    p = 0.08 + 0.45 * length + 0.30 * repeated + 0.45 * sym
    return max(0.05, min(0.90, p))


def generation_key(source: list[str], temperature: float, top_p: float, seed: int | None) -> int:
    """64-bit key of everything the output depends on (seed is ignored when greedy)."""
    h = hashlib.blake2b(digest_size=8)
    h.update("\x00".join(source).encode("utf-8", "surrogatepass"))
    greedy = temperature <= 0.0
    h.update(struct.pack("<dd", 0.0 if greedy else temperature, 1.0 if greedy else top_p))
    h.update(struct.pack("<q", 0 if (greedy or seed is None) else int(seed) & 0x7FFFFFFFFFFFFFFF))
    return int.from_bytes(h.digest(), "little")


class TargetText:
    """Lazily generated target output of one request (position-indexed, deterministic)."""

    __slots__ = (
        "source", "rng", "p_copy", "p_continue", "tokens", "copied", "draft_hit", "_ptr",
        "agree_copy", "agree_fresh", "starts", "fresh_scale", "natural_len", "key",
    )

    def __init__(
        self,
        source: list[str],
        temperature: float = 0.0,
        top_p: float = 1.0,
        seed: int | None = None,
        natural_range: tuple[int, int] = (64, 512),
    ) -> None:
        self.source = source
        self.key = generation_key(source, temperature, top_p, seed)
        self.rng = random.Random(self.key)
        t = max(0.0, min(2.0, temperature))
        base = copy_probability(source)
        # Sampling wanders off the prompt more often than greedy decoding does.
        self.p_copy = base * (1.0 - 0.2 * t)
        # Long copy runs when the content is copy-friendly (code, documents).
        self.p_continue = 0.55 + 0.4 * base
        damp = 1.0 / (1.0 + 0.4 * t)
        self.agree_copy = AGREE_COPY * damp
        self.agree_fresh = AGREE_FRESH * damp
        self.starts = [i for i, tok in enumerate(source) if tok.strip()[:1].isalnum()] or list(range(len(source)))
        self.fresh_scale = 1 + int(8 * t)
        lo, hi = natural_range
        self.natural_len = lo + int(self.rng.random() * (hi - lo + 1))
        self.tokens: list[str] = []
        self.copied: list[bool] = []
        self.draft_hit: list[bool] = []
        self._ptr = -1

    def ensure(self, n: int) -> None:
        """Generate target positions up to at least ``n - 1``.

        Positions are drawn strictly in order from one PRNG, so generating ahead never
        changes a token; generating in blocks keeps the per-step cost of the engine's
        "is position n there yet" down to one length check.
        """
        tokens = self.tokens
        if len(tokens) >= n:
            return
        n = max(n, len(tokens) + _BLOCK)
        rnd = self.rng.random
        src = self.source
        copied, hit = self.copied, self.draft_hit
        agree_copy, agree_fresh = self.agree_copy, self.agree_fresh
        while len(tokens) < n:
            ptr = self._ptr
            if ptr >= 0 and ptr < len(src) and rnd() < self.p_continue:
                tokens.append(src[ptr])
                copy = True
                self._ptr = ptr + 1
            elif src and rnd() < self.p_copy:
                start = self.starts[int(rnd() * len(self.starts))]
                tokens.append(src[start])
                copy = True
                self._ptr = start + 1
            else:
                r = rnd()
                if r < 0.12:
                    tok = _PUNCT[int(r * 50) % len(_PUNCT)]
                else:
                    tok = " " + FRESH_WORDS[int(rnd() * len(FRESH_WORDS) * self.fresh_scale) % len(FRESH_WORDS)]
                tokens.append(tok)
                copy = False
                self._ptr = -1
            copied.append(copy)
            # The draft model proposes the right token iff u < agreement (decided once, here).
            hit.append(rnd() < (agree_copy if copy else agree_fresh))

    def token(self, i: int) -> str:
        """Target token at output position ``i``."""
        self.ensure(i + 1)
        return self.tokens[i]

    def draft_correct(self, i: int) -> bool:
        """Whether the draft model proposes the target token at position ``i``."""
        self.ensure(i + 1)
        return self.draft_hit[i]

    def draft_accepted(self, start: int, k: int) -> int:
        """Leading draft positions from ``start`` that the verifier accepts (0..k)."""
        self.ensure(start + k)
        hit = self.draft_hit
        a = 0
        while a < k and hit[start + a]:
            a += 1
        return a

    def wrong_token(self, i: int) -> str:
        """A token that differs from the target at ``i`` (what a broken verifier lets through)."""
        t = self.token(i)
        w = " " + FRESH_WORDS[(i * 7919 + self.key) % len(FRESH_WORDS)]
        return w if w != t else " " + FRESH_WORDS[(i * 7919 + self.key + 1) % len(FRESH_WORDS)]


class NgramIndex:
    """Prompt-lookup drafting: find the context's last n tokens in the prompt, propose what followed."""

    __slots__ = ("source", "index", "min_n", "max_n")

    def __init__(self, source: list[str], min_n: int = 2, max_n: int = 3) -> None:
        self.source = source
        self.min_n, self.max_n = min_n, max_n
        self.index: dict[tuple[str, ...], int] = {}
        for n in range(min_n, max_n + 1):
            for i in range(len(source) - n):
                # Keep the first occurrence: stable, like a left-to-right search.
                self.index.setdefault(tuple(source[i : i + n]), i + n)

    def propose(self, context_tail: list[str], k: int) -> list[str]:
        """Up to ``k`` proposed tokens continuing ``context_tail`` (empty when no match)."""
        for n in range(self.max_n, self.min_n - 1, -1):
            if len(context_tail) < n:
                continue
            pos = self.index.get(tuple(context_tail[-n:]))
            if pos is not None:
                return self.source[pos : pos + k]
        return []


def unit_hash(*parts: int) -> float:
    """Deterministic uniform in [0, 1) from integers (splitmix64 mix), for fault decisions."""
    x = 0x9E3779B97F4A7C15
    for p in parts:
        x = (x ^ (p & 0xFFFFFFFFFFFFFFFF)) * 0xBF58476D1CE4E5B9 & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 31
        x = x * 0x94D049BB133111EB & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 29
    return (x >> 11) / float(1 << 53)


def expected_accept_len(alpha: float, k: int) -> float:
    """Leviathan et al.: E[tokens per verify step] for i.i.d. acceptance ``alpha``."""
    if alpha >= 1.0:
        return k + 1.0
    return (1.0 - math.pow(alpha, k + 1)) / (1.0 - alpha)
