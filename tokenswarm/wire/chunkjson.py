"""Typed decoding of the commonest streamed event: an OpenAI-style completion chunk.

:func:`decode_chunk` reads an SSE ``data:`` payload with msgspec into small structs holding
only what :class:`~tokenswarm.wire.stream.StreamState` uses; every other key (``object``,
``created``, ``model``, ``logprobs`` ...) is skipped without building Python objects for it,
about half the cost of decoding the whole object into dicts, once per chunk.

A payload that does not fit (invalid JSON, a non-object, an unexpected type, or one of the
rarer keys: ``error``, ``metrics``, ``timings``, ``sglext``) makes :func:`decode_chunk` return
``None``; the stream state then decodes it into dicts and reads it the general way, which is
also where a malformed payload becomes an error. Fields typed ``Any`` keep the JSON value as is
(the same value the general decoder gives), so both paths read the same numbers and text.
"""

from __future__ import annotations

from typing import Any

import msgspec
from msgspec import UNSET, Struct


class Delta(Struct, gc=False):
    content: Any = None
    reasoning_content: Any = None
    reasoning: Any = None


class Choice(Struct, gc=False):
    delta: Delta | None = None
    text: Any = None
    finish_reason: Any = None
    token_ids: Any = UNSET


class Usage(Struct, gc=False):
    prompt_tokens: Any = None
    completion_tokens: Any = None
    completion_tokens_details: Any = None

    def get(self, key: str, default: Any = None) -> Any:
        """Read like the usage dict of the general path (``finish`` reads either)."""
        return getattr(self, key, default)


class Chunk(Struct, gc=False):
    id: Any = None
    choices: list[Choice] | None = None
    usage: Usage | None = None
    # Present only on rarer events; any of them sends the event down the general path.
    error: Any = UNSET
    metrics: Any = UNSET
    timings: Any = UNSET
    sglext: Any = UNSET


_decode = msgspec.json.Decoder(Chunk).decode
_ERRORS = (msgspec.DecodeError, msgspec.ValidationError)


def decode_chunk(data: bytes) -> Chunk | None:
    """The chunk, or ``None`` when the general path must read this payload."""
    try:
        c = _decode(data)
    except _ERRORS:
        return None
    if c.error is not UNSET or c.metrics is not UNSET or c.timings is not UNSET or c.sglext is not UNSET:
        return None
    return c
