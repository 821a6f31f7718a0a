"""What a prompt source hands out, and the chat history a multi-turn plan turns into.

:class:`Prompt` (one single-shot request), :class:`Conversation` (the user side of a multi-turn
plan), :class:`Calibration` (how a task's prompt lengths were sized), and
:func:`conversation_messages` / :func:`conversation_text`, which put a conversation's earlier
turns and the assistant's real replies before the current turn. Built by
:class:`~tokenswarm.workload.prompts.PromptSource`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tokenswarm.workload.corpora import render_messages_as_text


@dataclass(frozen=True)
class Prompt:
    """One single-shot request: ``messages`` (chat) or ``text`` (completions) is set, not both."""

    messages: tuple[dict[str, Any], ...] | None
    text: str | None
    target_prompt_tokens: int
    max_tokens: int
    source: str  # provenance, e.g. "pydoc:topics/for", "stdlib:json/decoder.py:120"
    abnormal: str | None = None  # abnormal case name (see scenario.ABNORMAL_CASES) or None
    params: dict[str, Any] = field(default_factory=dict[str, Any], compare=False)  # request-body overrides (abnormal, extraction)
    schema: dict[str, Any] | None = field(default=None, compare=False)  # extraction: the JSON Schema asked for


@dataclass(frozen=True)
class Conversation:
    """A multi-turn conversation plan: the user side. The caller keeps the real history."""

    turns: int
    user_messages: tuple[str, ...]
    max_tokens_per_turn: tuple[int, ...]
    think_times_s: tuple[float, ...]  # pause before each turn; think_times_s[0] == 0
    target_tokens_per_turn: tuple[int, ...]
    source: str
    system: str | None = None  # system message to put first, if the dataset had one

    def user_message(self, turn: int) -> str:
        """The user message of 0-based ``turn``."""
        return self.user_messages[turn]

    def max_tokens(self, turn: int) -> int:
        """``max_tokens`` for the reply to ``turn``."""
        return self.max_tokens_per_turn[turn]

    def think_time_s(self, turn: int) -> float:
        """Seconds to wait after the previous reply before sending ``turn`` (0 for turn 0)."""
        return self.think_times_s[turn]

    def target_prompt_tokens(self, turn: int) -> int:
        """Target tokens of this turn's user message (not of the whole history)."""
        return self.target_tokens_per_turn[turn]


@dataclass(frozen=True)
class Calibration:
    """How prompt lengths are sized for one task."""

    counter: str
    chars_per_token: float
    samples: int
    median_abs_error_pct: float | None  # |predicted - counted| / counted over the samples


def conversation_messages(conv: Conversation, turn: int, replies: list[str]) -> list[dict[str, Any]]:
    """Chat history for ``turn``: earlier user messages with the assistant's real ``replies``, then this turn.

    A convenience for user classes; ``replies[i]`` is the assistant text returned for turn ``i``.
    """
    if len(replies) < turn:
        raise ValueError(f"turn {turn} needs {turn} earlier replies, got {len(replies)}")
    out: list[dict[str, Any]] = [{"role": "system", "content": conv.system}] if conv.system else []
    for i in range(turn):
        out.append({"role": "user", "content": conv.user_message(i)})
        out.append({"role": "assistant", "content": replies[i]})
    out.append({"role": "user", "content": conv.user_message(turn)})
    return out


def conversation_text(conv: Conversation, turn: int, replies: list[str]) -> str:
    """The same history rendered as one prompt for the completions API."""
    return render_messages_as_text(conversation_messages(conv, turn, replies))
