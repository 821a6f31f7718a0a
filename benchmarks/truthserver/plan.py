"""What the truth server answers, decided before any I/O: request parsing, lengths, chunk sizes, SSE bytes.

Pure and clock-free: the app (``app.py``) decides *when* each event is written; this module
decides *what* is written, so its rules are unit-tested without a server.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import orjson


class BadRequest(Exception):
    """A request the server refuses (HTTP 400), naming the offending field."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.param = param

    def body(self) -> dict[str, Any]:
        """The OpenAI-style error object."""
        return {"error": {"message": self.message, "type": "BadRequestError", "param": self.param, "code": 400}}


@dataclass(frozen=True)
class IntRange:
    """An integer drawn uniformly from ``lo..hi`` (inclusive); ``"3"`` is the fixed range 3..3."""

    lo: int
    hi: int

    @classmethod
    def parse(cls, text: str, what: str) -> "IntRange":
        """``"N"`` or ``"LO-HI"`` with 1 <= LO <= HI; a clear error naming ``what`` otherwise."""
        parts = text.split("-")
        try:
            lo, hi = (int(parts[0]), int(parts[-1])) if len(parts) <= 2 else (0, -1)
        except ValueError:
            lo, hi = 0, -1
        if not 1 <= lo <= hi:
            raise ValueError(f"{what}: expected N or LO-HI with 1 <= LO <= HI, got {text!r}")
        return cls(lo, hi)

    def draw(self, rng: random.Random) -> int:
        return self.lo if self.lo == self.hi else rng.randint(self.lo, self.hi)

    def __str__(self) -> str:
        return str(self.lo) if self.lo == self.hi else f"{self.lo}-{self.hi}"


@dataclass(frozen=True)
class ServerOptions:
    """The server's behaviour (all from the command line)."""

    model: str = "truth"
    step_ms: float = 5.0  #: between consecutive content events (one decode step)
    ttft_ms: float = 20.0  #: from request received to the first content event (queue + prefill)
    prefill_us_per_token: float = 0.0  #: added to ``ttft_ms`` per prompt token
    tokens_per_chunk: IntRange = IntRange(3, 3)  #: tokens per content event (speculative chunking: ~3)
    natural_tokens: IntRange = IntRange(64, 256)  #: answer length when ``ignore_eos`` is false
    default_max_tokens: int = 1024  #: when the request gives no ``max_tokens``
    seed: int = 0


@dataclass(frozen=True)
class Completion:
    """One parsed ``/v1/chat/completions`` or ``/v1/completions`` request."""

    endpoint: str  #: "chat" | "completions" (as in the simulator's truth log)
    model: str
    prompt_tokens: int
    max_tokens: int
    ignore_eos: bool
    stream: bool
    include_usage: bool
    continuous_usage: bool


def _words(text: Any) -> int:
    """Prompt tokens are whitespace-separated words here (a list of ints counts as token ids; a
    message content given as a list of parts, ``[{"type": "text", "text": ...}]``, counts its
    text parts, as AIPerf, GuideLLM and inference-perf send it)."""
    if isinstance(text, str):
        return len(text.split())
    if isinstance(text, list):
        return sum(1 if isinstance(t, int) else _words(t) for t in text)
    if isinstance(text, dict) and text.get("type", "text") == "text":
        return _words(text.get("text"))
    return 0


def parse_request(data: Any, endpoint: str, opts: ServerOptions) -> Completion:
    """Validate a request body; raise :class:`BadRequest` naming the field at fault."""
    if not isinstance(data, dict):
        raise BadRequest("the request body must be a JSON object")
    if endpoint == "chat":
        messages = data.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("'messages' must be a non-empty list", "messages")
        prompt = sum(_words(m.get("content")) for m in messages if isinstance(m, dict))
    else:
        if "prompt" not in data:
            raise BadRequest("'prompt' is required", "prompt")
        prompt = _words(data["prompt"])
    max_tokens = data.get("max_completion_tokens") if endpoint == "chat" else None
    if max_tokens is None:
        max_tokens = data.get("max_tokens")
    if max_tokens is None:
        max_tokens = opts.default_max_tokens
    if type(max_tokens) is not int or max_tokens < 1:
        raise BadRequest(f"'max_tokens' must be a positive integer, got {max_tokens!r}", "max_tokens")
    ignore_eos = data.get("ignore_eos", False)
    stream = data.get("stream", False)
    if not isinstance(ignore_eos, bool) or not isinstance(stream, bool):
        bad = "ignore_eos" if not isinstance(ignore_eos, bool) else "stream"
        raise BadRequest(f"'{bad}' must be a boolean", bad)
    so = data.get("stream_options")
    so = {} if so is None else so
    if not isinstance(so, dict):
        raise BadRequest("'stream_options' must be an object", "stream_options")
    include_usage = bool(so.get("include_usage"))
    return Completion(endpoint=endpoint, model=str(data.get("model") or opts.model), prompt_tokens=prompt,
                      max_tokens=max_tokens, ignore_eos=ignore_eos, stream=stream, include_usage=include_usage,
                      # as in vLLM: per-chunk usage only together with include_usage
                      continuous_usage=include_usage and bool(so.get("continuous_usage_stats")))


@dataclass(frozen=True)
class Plan:
    """The answer to one request: tokens of each content event and when the first one is due."""

    chunk_tokens: tuple[int, ...]
    finish_reason: str  #: "length" when ``max_tokens`` ended it, else "stop"
    first_delay_s: float  #: from request received to the first content event
    step_s: float  #: between content events

    @property
    def output_tokens(self) -> int:
        return sum(self.chunk_tokens)


def plan_for(req: Completion, opts: ServerOptions, rng: random.Random) -> Plan:
    """Answer length (``max_tokens`` exactly with ``ignore_eos``) cut into events of drawn sizes."""
    n = req.max_tokens if req.ignore_eos else min(req.max_tokens, opts.natural_tokens.draw(rng))
    sizes: list[int] = []
    left = n
    while left > 0:
        k = min(left, opts.tokens_per_chunk.draw(rng))
        sizes.append(k)
        left -= k
    return Plan(tuple(sizes), "length" if n == req.max_tokens else "stop",
                (opts.ttft_ms + opts.prefill_us_per_token * req.prompt_tokens / 1000.0) / 1000.0,
                opts.step_ms / 1000.0)


def token_text(index: int) -> str:
    """The text of the ``index``-th generated token (a word; the count never comes from it)."""
    return f" w{index % 1000}"


class Events:
    """SSE events of one streamed answer, shaped like vLLM's (one ``data:`` event per write)."""

    def __init__(self, rid: str, req: Completion, created: int) -> None:
        self.req = req
        self.chat = req.endpoint == "chat"
        self.head = {"id": rid, "object": "chat.completion.chunk" if self.chat else "text_completion",
                     "created": created, "model": req.model}

    def _usage(self, completion: int) -> dict[str, int]:
        p = self.req.prompt_tokens
        return {"prompt_tokens": p, "total_tokens": p + completion, "completion_tokens": completion}

    def _event(self, choice: dict[str, Any] | None, usage: dict[str, int] | None) -> bytes:
        obj: dict[str, Any] = {**self.head, "choices": [] if choice is None else [choice]}
        if usage is not None:
            obj["usage"] = usage
        return b"data: " + orjson.dumps(obj) + b"\n\n"

    def role(self) -> bytes | None:
        """Chat's first event (role, empty content), written before the first token as vLLM does."""
        if not self.chat:
            return None
        choice = {"index": 0, "delta": {"role": "assistant", "content": ""}, "logprobs": None, "finish_reason": None}
        return self._event(choice, self._usage(0) if self.req.continuous_usage else None)

    def content(self, first_token: int, n_tokens: int, finish_reason: str | None) -> bytes:
        """One content event carrying tokens ``first_token .. first_token + n_tokens - 1``."""
        text = "".join(token_text(i) for i in range(first_token, first_token + n_tokens))
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "delta": {"content": text}, "logprobs": None,
                                      "finish_reason": finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish_reason}
        cum = first_token + n_tokens
        return self._event(choice, self._usage(cum) if self.req.continuous_usage else None)

    def usage_trailer(self, completion: int) -> bytes | None:
        """The usage-only event (``include_usage``)."""
        return self._event(None, self._usage(completion)) if self.req.include_usage else None

    @staticmethod
    def done() -> bytes:
        return b"data: [DONE]\n\n"

    def whole(self, rid: str, plan: Plan) -> dict[str, Any]:
        """The non-streamed response body."""
        text = "".join(token_text(i) for i in range(plan.output_tokens))
        if self.chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": plan.finish_reason}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": plan.finish_reason}
        return {"id": rid, "object": "chat.completion" if self.chat else "text_completion",
                "created": self.head["created"], "model": self.req.model, "choices": [choice],
                "usage": self._usage(plan.output_tokens)}
