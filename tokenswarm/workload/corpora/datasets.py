"""User datasets: ``jsonl`` prompt/messages files, ShareGPT conversation dumps and Spec-Bench questions.

:func:`load_dataset` reads and validates a file (format given, or found by
:func:`detect_format`) into :class:`DatasetItem` tuples, cached per path, format, mtime and
size. Spec-Bench's ``question.jsonl`` (one ``{"question_id", "category", "turns"}`` object per
line) reads as items carrying their task category (:data:`SPEC_BENCH_TASKS`), which the
scenario turns into one traffic class per category. Errors name the file and the line (:class:`DatasetError`, a ``ScenarioError``, so a bad
dataset named by a scenario fails like any other scenario field).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import re
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from tokenswarm.workload.errors import ScenarioError

log = logging.getLogger(__name__)


class DatasetError(ScenarioError):
    """A user dataset is malformed. ``field`` is ``"line N"`` (or ``"file"`` for whole-file problems)."""


@dataclass(frozen=True)
class DatasetItem:
    """One prompt or conversation from a user dataset."""

    prompt: str | None  # plain prompt (jsonl ``prompt``)
    messages: tuple[dict[str, Any], ...] | None  # chat messages (jsonl ``messages`` / ShareGPT turns)
    user_turns: tuple[str, ...]  # user messages in order (multi-turn replay)
    max_tokens: int | None
    where: str  # "file.jsonl:12" for provenance
    category: str | None = None  # spec_bench: the task category (SPEC_BENCH_TASKS applied)

    def first_messages(self) -> tuple[dict[str, Any], ...]:
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


def render_messages_as_text(messages: Iterable[dict[str, Any]]) -> str:
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


#: Spec-Bench's categories -> its task names. Spec-Bench's first 80 questions are MT-Bench's, which
#: keep MT-Bench's own eight categories in the file; Spec-Bench reports them together as one task,
#: "multi-turn conversation" (``mt_bench``). The other five are their own task. A category not
#: listed here (a newer or edited file) is its own task under its own name.
SPEC_BENCH_TASKS: dict[str, str] = {
    **{c: "mt_bench" for c in ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem",
                               "humanities")},
    "mt_bench": "mt_bench",
    "translation": "translation",
    "summarization": "summarization",
    "qa": "qa",
    "math_reasoning": "math_reasoning",
    "rag": "rag",
}
_TASK_NAME = re.compile(r"^[A-Za-z0-9_\-]+$")


def _err(path: str, line: int | None, expected: str, got: Any) -> DatasetError:
    return DatasetError(path, f"line {line}" if line else "file", expected, got)


def _jsonl_item(obj: Any, path: str, line: int) -> DatasetItem:
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


def _sharegpt_item(obj: Any, path: str, line: int) -> DatasetItem | None:
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


def _spec_bench_item(obj: Any, path: str, line: int) -> DatasetItem:
    """One Spec-Bench question: its user turns, in order, and its task category."""
    if not isinstance(obj, dict) or not {"question_id", "category", "turns"} <= set(obj):
        raise _err(path, line, "a Spec-Bench question {'question_id', 'category', 'turns'}",
                   sorted(obj) if isinstance(obj, dict) else obj)
    category = obj["category"]
    if not isinstance(category, str) or not _TASK_NAME.match(category):
        raise _err(path, line, "'category' to be a name of letters, digits, '_' or '-'", category)
    turns = obj["turns"]
    if not isinstance(turns, list) or not turns or not all(isinstance(t, str) and t.strip() for t in turns):
        raise _err(path, line, "'turns' to be a non-empty list of non-empty strings (the user turns)", turns)
    where = f"{os.path.basename(path)}:{line}"
    messages = tuple({"role": "user", "content": t} for t in turns)
    return DatasetItem(None, messages, tuple(turns), None, where, SPEC_BENCH_TASKS.get(category, category))


def _iter_json_array(text: str, path: str) -> Iterator[tuple[int, Any]]:
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


def _iter_jsonl(text: str, path: str) -> Iterator[tuple[int, Any]]:
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            yield lineno, json.loads(raw)
        except json.JSONDecodeError as exc:
            raise _err(path, lineno, "one JSON object per line", f"{exc.msg} at column {exc.colno}") from None


def detect_format(path: str, text: str) -> str:
    """``sharegpt`` for a JSON array or JSONL whose first object has ``conversations``; ``spec_bench``
    for JSONL whose first object has ``question_id``, ``category`` and ``turns``; else ``jsonl``."""
    head = text.lstrip()
    if head.startswith("["):
        return "sharegpt"
    first = head.split("\n", 1)[0]
    try:
        obj = json.loads(first)
    except json.JSONDecodeError:
        return "jsonl"
    if isinstance(obj, dict) and {"question_id", "category", "turns"} <= set(obj):
        return "spec_bench"
    return "sharegpt" if isinstance(obj, dict) and "conversations" in obj else "jsonl"


def file_format(path: str, fmt: str = "auto") -> str:
    """The format ``load_dataset`` reads ``path`` as: ``fmt``, or the detected one for ``auto``."""
    if fmt != "auto":
        return fmt
    return detect_format(path, _read(path)[:65536])


def _read(path: str) -> str:
    try:
        return Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise _err(path, None, "UTF-8 text", str(exc)) from None
    except OSError as exc:
        raise _err(path, None, "an existing readable dataset file", exc.strerror or str(exc)) from None


@functools.lru_cache(maxsize=8)
def _load_cached(path: str, fmt: str, mtime_ns: int, size: int) -> tuple[DatasetItem, ...]:
    text = _read(path)
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
    elif fmt == "spec_bench":
        for line, obj in _iter_jsonl(text, path):
            items.append(_spec_bench_item(obj, path, line))
    else:
        raise _err(path, None, "format jsonl, sharegpt, spec_bench or auto", fmt)
    if skipped:
        log.info("%s: skipped %d conversations without a human turn", path, skipped)
    if not items:
        raise _err(path, None, f"at least one usable {fmt} record", "none")
    return tuple(items)


def load_dataset(path: str, fmt: str = "auto", category: str | None = None) -> tuple[DatasetItem, ...]:
    """Load and validate a user dataset (cached per path, format, mtime and size).

    ``category``: only the items of that task category (Spec-Bench); none of them is an error.
    """
    try:
        st = os.stat(path)
    except OSError as exc:
        raise _err(path, None, "an existing readable dataset file", exc.strerror or str(exc)) from None
    items = _load_cached(os.path.abspath(path), fmt, st.st_mtime_ns, st.st_size)
    if category is None:
        return items
    chosen = tuple(i for i in items if i.category == category)
    if not chosen:
        raise _err(path, None, f"questions of category {category!r}", sorted(category_counts(items)))
    return chosen


def category_counts(items: tuple[DatasetItem, ...]) -> dict[str, int]:
    """Items per task category, in the order the categories first appear (uncategorised: none)."""
    return dict(Counter(i.category for i in items if i.category is not None))

