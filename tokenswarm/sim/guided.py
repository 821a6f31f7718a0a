"""Guided decoding in the simulator: a ``response_format`` request gets a JSON answer.

(:func:`tokenswarm.sim.api.guided_schema` reads the request's ``response_format``.)

With ``{"type": "json_schema", "json_schema": {"schema": S}}`` the target output is one JSON
instance of ``S`` (objects, arrays, strings, integers, numbers, booleans, ``enum``; string
values are short runs of words copied from the prompt, as an extraction copies from its
document), after which the model stops. ``{"type": "json_object"}`` gives an object with one
string field. The instance is drawn from the request's generation PRNG, so it is deterministic,
and every position counts as copied: structured output is where draft models agree most.
A ``max_tokens`` shorter than the instance cuts it (finish ``length``), as on a real server.
"""

from __future__ import annotations

import random
from typing import Any

import orjson

from tokenswarm.sim.textgen import TargetText
from tokenswarm.sim.tokenizer import tokenize


def instance(schema: Any, rng: random.Random, words: list[str], depth: int = 0) -> Any:
    """A JSON value valid against the (supported subset of the) schema."""
    if not isinstance(schema, dict):
        return _words(rng, words)
    if "enum" in schema and schema["enum"]:
        return schema["enum"][int(rng.random() * len(schema["enum"]))]
    for key in ("anyOf", "oneOf"):
        if isinstance(schema.get(key), list) and schema[key]:
            return instance(schema[key][0], rng, words, depth)
    kind = schema.get("type", "string")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "object" and depth < 4:
        props = schema.get("properties") or {}
        return {name: instance(sub, rng, words, depth + 1) for name, sub in props.items()}
    if kind == "array" and depth < 4:
        lo = int(schema.get("minItems", 1))
        hi = max(lo, min(int(schema.get("maxItems", 4)), lo + 3))
        return [instance(schema.get("items", {}), rng, words, depth + 1) for _ in range(lo + int(rng.random() * (hi - lo + 1)))]
    if kind == "integer":
        lo = int(schema.get("minimum", 0))
        return lo + int(rng.random() * 100)
    if kind == "number":
        return round(float(schema.get("minimum", 0)) + rng.random() * 100, 2)
    if kind == "boolean":
        return rng.random() < 0.5
    if kind == "null":
        return None
    return _words(rng, words)


def _words(rng: random.Random, words: list[str]) -> str:
    if not words:
        return "value"
    n = 2 + int(rng.random() * 5)
    start = int(rng.random() * max(1, len(words) - n))
    return " ".join(words[start:start + n])


class GuidedText(TargetText):
    """A target output that is one JSON instance of ``schema``, then the model's usual text."""

    __slots__ = ()

    def __init__(self, source: list[str], schema: dict[str, Any], temperature: float = 0.0, top_p: float = 1.0,
                 seed: int | None = None, natural_range: tuple[int, int] = (64, 512)) -> None:
        super().__init__(source, temperature, top_p, seed, natural_range)
        words = [w for w in "".join(source).split() if w[:1].isalpha()]
        toks = tokenize(orjson.dumps(instance(schema, self.rng, words)).decode())
        self.tokens.extend(toks)
        self.copied.extend([True] * len(toks))
        self.draft_hit.extend(self.rng.random() < self.agree_copy for _ in toks)
        self.natural_len = len(toks)  # the answer ends with the JSON document
