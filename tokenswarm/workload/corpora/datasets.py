"""User datasets: ``jsonl`` prompt/messages files and ShareGPT conversation dumps.

:func:`load_dataset` reads and validates a file (format given, or found by
:func:`detect_format`) into :class:`DatasetItem` tuples, cached per path, format, mtime and
size. Errors name the file and the line (:class:`DatasetError`, a ``ScenarioError``, so a bad
dataset named by a scenario fails like any other scenario field).
"""

from __future__ import annotations

import functools
import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path

from tokenswarm.workload.scenario.errors import ScenarioError

log = logging.getLogger(__name__)


class DatasetError(ScenarioError):
    """A user dataset is malformed. ``field`` is ``"line N"`` (or ``"file"`` for whole-file problems)."""


@dataclass(frozen=True)
class DatasetItem:
    """One prompt or conversation from a user dataset."""

    prompt: str | None  # plain prompt (jsonl ``prompt``)
    messages: tuple[dict, ...] | None  # chat messages (jsonl ``messages`` / ShareGPT turns)
    user_turns: tuple[str, ...]  # user messages in order (multi-turn replay)
    max_tokens: int | None
    where: str  # "file.jsonl:12" for provenance

    def first_messages(self) -> tuple[dict, ...]:
        """Chat messages for a single-shot request: everything up to the first user message."""
        if self.messages is None:
            return ({"role": "user", "content": self.prompt or ""},)
        out = []
        for msg in self.messages:
            out.append(msg)
            if msg["role"] == "user":
                break
        return tuple(out)

    def as_text(self) -> str:
        """A plain prompt for the completions API."""
        if self.prompt is not None:
            return self.prompt
        return render_messages_as_text(self.first_messages())


def render_messages_as_text(messages) -> str:
    """Render chat messages for a completions endpoint: ``Role: content`` blocks, then ``Assistant:``."""
    parts = [f"{m['role'].capitalize()}: {m['content']}" for m in messages]
    return "\n\n".join(parts) + "\n\nAssistant:"


_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "assistant": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "system": "system",
}
_CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


def _err(path: str, line: int | None, expected: str, got) -> DatasetError:
    return DatasetError(path, f"line {line}" if line else "file", expected, got)


def _jsonl_item(obj, path: str, line: int) -> DatasetItem:
    if not isinstance(obj, dict):
        raise _err(path, line, "a JSON object with 'prompt' or 'messages'", obj)
    max_tokens = obj.get("max_tokens")
    if max_tokens is not None and (
        isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1
    ):
        raise _err(path, line, "'max_tokens' to be a positive integer", max_tokens)
    where = f"{os.path.basename(path)}:{line}"
    if "prompt" in obj:
        if not isinstance(obj["prompt"], str):
            raise _err(path, line, "'prompt' to be a string", obj["prompt"])
        return DatasetItem(obj["prompt"], None, (obj["prompt"],), max_tokens, where)
    if "messages" in obj:
        msgs = obj["messages"]
        if not isinstance(msgs, list) or not msgs:
            raise _err(path, line, "'messages' to be a non-empty list", msgs)
        clean = []
        for i, m in enumerate(msgs):
            if (
                not isinstance(m, dict)
                or m.get("role") not in _CHAT_ROLES
                or not isinstance(m.get("content"), str)
            ):
                raise _err(
                    path,
                    line,
                    f"messages[{i}] to be {{'role': one of {'|'.join(_CHAT_ROLES)}, 'content': string}}",
                    m,
                )
            clean.append({"role": m["role"], "content": m["content"]})
        users = tuple(m["content"] for m in clean if m["role"] == "user")
        if not users:
            raise _err(path, line, "'messages' to contain a user message", msgs)
        return DatasetItem(None, tuple(clean), users, max_tokens, where)
    raise _err(path, line, "a 'prompt' string or a 'messages' list", sorted(obj))


def _sharegpt_item(obj, path: str, line: int) -> DatasetItem | None:
    if not isinstance(obj, dict) or not isinstance(obj.get("conversations"), list):
        raise _err(
            path,
            line,
            "an object with a 'conversations' list",
            obj if not isinstance(obj, dict) else sorted(obj),
        )
    msgs = []
    for i, turn in enumerate(obj["conversations"]):
        if not isinstance(turn, dict) or not isinstance(turn.get("value"), str):
            raise _err(path, line, f"conversations[{i}] to be {{'from': ..., 'value': string}}", turn)
        role = _SHAREGPT_ROLES.get(str(turn.get("from", "")).lower())
        if role is None:
            raise _err(
                path,
                line,
                f"conversations[{i}].from to be one of {', '.join(sorted(_SHAREGPT_ROLES))}",
                turn.get("from"),
            )
        msgs.append({"role": role, "content": turn["value"]})
    users = tuple(m["content"] for m in msgs if m["role"] == "user" and m["content"].strip())
    if not users:
        return None
    return DatasetItem(None, tuple(msgs), users, None, f"{os.path.basename(path)}:{line}")


def _iter_json_array(text: str, path: str):
    """Yield ``(line, obj)`` for each element of a top-level JSON array, with its line number."""
    dec = json.JSONDecoder()
    i = text.index("[") + 1
    n = len(text)

    def skip_ws(j: int) -> int:
        while j < n and text[j] in " \t\r\n":
            j += 1
        return j

    i = skip_ws(i)
    if i < n and text[i] == "]":
        return
    while True:
        line = text.count("\n", 0, i) + 1
        try:
            obj, i = dec.raw_decode(text, i)
        except json.JSONDecodeError as exc:
            raise _err(path, exc.lineno, "valid JSON", exc.msg) from None
        yield line, obj
        i = skip_ws(i)
        if i < n and text[i] == ",":
            i = skip_ws(i + 1)
            continue
        if i < n and text[i] == "]":
            return
        raise _err(path, text.count("\n", 0, i) + 1, "',' or ']' in the JSON array", text[i : i + 20])


def _iter_jsonl(text: str, path: str):
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _err(path, lineno, "one JSON object per line", f"{exc.msg} at column {exc.colno}") from None


def detect_format(path: str, text: str) -> str:
    """``sharegpt`` for a JSON array or JSONL whose first object has ``conversations``, else ``jsonl``."""
    head = text.lstrip()
    if head.startswith("["):
        return "sharegpt"
    first = head.split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return "jsonl"
    return "sharegpt" if isinstance(obj, dict) and "conversations" in obj else "jsonl"


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, fmt: str, mtime_ns: int, size: int) -> tuple[DatasetItem, ...]:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _err(path, None, "UTF-8 text", str(exc)) from None
    if fmt == "auto":
        fmt = detect_format(path, text)
    items: list[DatasetItem] = []
    skipped = 0
    if fmt == "sharegpt":
        rows = _iter_json_array(text, path) if text.lstrip().startswith("[") else _iter_jsonl(text, path)
        for line, obj in rows:
            item = _sharegpt_item(obj, path, line)
            if item is None:
                skipped += 1
            else:
                items.append(item)
    elif fmt == "jsonl":
        for line, obj in _iter_jsonl(text, path):
            items.append(_jsonl_item(obj, path, line))
    else:
        raise _err(path, None, "format jsonl, sharegpt or auto", fmt)
    if skipped:
        log.info("%s: skipped %d conversations without a human turn", path, skipped)
    if not items:
        raise _err(path, None, f"at least one usable {fmt} record", "none")
    return tuple(items)


def load_dataset(path: str, fmt: str = "auto") -> tuple[DatasetItem, ...]:
    """Load and validate a user dataset (cached per path, format, mtime and size)."""
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _err(path, None, "an existing readable dataset file", exc.strerror or str(exc)) from None
    return _load_cached(os.path.abspath(path), fmt, st.st_mtime_ns, st.st_size)
