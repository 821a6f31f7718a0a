"""A deterministic word/punctuation tokenizer (no downloads, no vocabulary file).

Rule: a token is optional leading whitespace followed by either a run of 1-8 word
characters (``\\w``) or one other non-space character; trailing whitespace at the very end
is one token. Long words split every 8 characters, which gives roughly 1.2-1.4 tokens per
English word (close to BPE tokenizers). Decoding is exact: ``"".join(tokenize(s)) == s``.
Token ids are a stable CRC32 of the token string modulo :data:`VOCAB_SIZE`.
"""

from __future__ import annotations

import re
import zlib
from typing import Any

VOCAB_SIZE = 128_000
_TOKEN_RE = re.compile(r"\s*(?:\w{1,8}|[^\w\s])|\s+")


def tokenize(text: str) -> list[str]:
    """Split ``text`` into token strings whose concatenation is ``text``."""
    return _TOKEN_RE.findall(text)


def token_id(token: str) -> int:
    """Stable integer id of one token string."""
    return zlib.crc32(token.encode("utf-8")) % VOCAB_SIZE


def token_ids(tokens: list[str]) -> list[int]:
    """Ids of a list of token strings."""
    return [zlib.crc32(t.encode("utf-8")) % VOCAB_SIZE for t in tokens]


def detokenize(tokens: list[str]) -> str:
    """Exact inverse of :func:`tokenize`."""
    return "".join(tokens)


def chat_prompt(messages: list[dict[str, Any]]) -> str:
    """Render chat messages with the simulator's fixed template.

    ``<|role|>\\n{content}\\n`` per message, then ``<|assistant|>\\n`` (the generation prompt).
    Content may be a string or a list of ``{"type": "text", "text": ...}`` parts. Raises
    ``ValueError`` naming the offending message.
    """
    parts: list[str] = []
    for i, msg in enumerate(messages):
        if not isinstance(msg, dict):
            raise ValueError(f"messages[{i}] must be an object")
        role = msg.get("role")
        if not isinstance(role, str):
            raise ValueError(f"messages[{i}].role must be a string")
        content = msg.get("content", "")
        if content is None:
            content = ""
        if isinstance(content, list):
            texts = []
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("text", ""), str):
                    raise ValueError(f"messages[{i}].content[{j}] must be a text part")
                texts.append(part.get("text", ""))
            content = "".join(texts)
        if not isinstance(content, str):
            raise ValueError(f"messages[{i}].content must be a string or a list of text parts")
        parts.append(f"<|{role}|>\n{content}\n")
    parts.append("<|assistant|>\n")
    return "".join(parts)
