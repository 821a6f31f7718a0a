"""Per-request stream state: turns timed SSE events into a :class:`RequestRecord` (pure).

The I/O loop (``tokenswarm.load.client``) reads whatever the socket has, takes ONE
timestamp per read, and hands the events of that read to :meth:`StreamState.on_events`.
Events that arrived in the same read share the timestamp: they did arrive together.
All times are ``time.perf_counter()`` seconds supplied by the caller, so this module is
unit-tested with scripted times and never sleeps.

Token accounting, most exact first:

1. ``usage.completion_tokens`` on every chunk (``stream_options.continuous_usage_stats``):
   the per-chunk count is the difference of consecutive cumulative values.
2. ``token_ids`` on the choice (vLLM ``return_token_ids``): the count is its length.
3. Neither: ``chunk_tokens`` is ``None`` -- counts are never guessed from text.

The final ``usage`` object (``include_usage``) gives ``output_tokens``; without it the sum
of exact per-chunk counts is used, and without those an estimate marked
``tokens_estimated=True`` (4 characters per token).
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Any

import numpy as np  # at import time: a first lazy import inside the event loop stalls it ~80 ms
import orjson

from tokenswarm.record import Outcome, RequestRecord
from tokenswarm.redact import redact

CHARS_PER_TOKEN_ESTIMATE = 4.0


class StreamState:
    """Accumulates one streamed (or non-streamed) completion."""

    __slots__ = (
        "sent_s",
        "times",
        "tokens",
        "text_parts",
        "exact_tokens",
        "last_cum",
        "usage",
        "finish_reason",
        "response_id",
        "done",
        "error",
        "spec_decode",
        "usage_stale",
    )

    def __init__(self, sent_s: float) -> None:
        self.sent_s = sent_s
        self.times = array("d")  # arrival (perf_counter s) of each content chunk
        self.tokens = array("l")  # tokens in each content chunk (valid if exact_tokens)
        self.text_parts: list[str] = []
        self.exact_tokens = True
        self.last_cum: int | None = None
        self.usage: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.done = False
        self.error: str | None = None
        self.spec_decode: dict[str, Any] | None = None
        self.usage_stale = False  # content arrived after the last usage object

    # -- feeding -----------------------------------------------------------------------------
    def on_events(self, now_s: float, events: list[tuple]) -> int:
        """Consume parsed SSE events that arrived at ``now_s``; return content chunks added."""
        # The hot path: one iteration per SSE event, kept flat on purpose (no helper calls).
        added = 0
        loads = orjson.loads
        for event_type, data in events:
            if data == b"[DONE]":
                self.done = True
                continue
            try:
                obj = loads(data)
            except orjson.JSONDecodeError:
                self.error = "malformed SSE: invalid JSON"
                continue
            if type(obj) is not dict:
                self.error = "malformed SSE: payload is not an object"
                continue
            choices = obj.get("choices")
            if event_type == "error" or ("error" in obj and not choices):
                self.error = _error_text(obj)
                continue
            if self.response_id is None:
                self.response_id = obj.get("id")
            usage = obj.get("usage")
            if usage is not None and type(usage) is dict:
                self.usage = usage
                self.usage_stale = False
            else:
                usage = None
            if "metrics" in obj:
                metrics = obj["metrics"]
                if isinstance(metrics, dict) and isinstance(metrics.get("speculative_decoding"), dict):
                    self.spec_decode = metrics["speculative_decoding"]
            if not choices:
                continue  # usage-only trailer or keep-alive object
            c0 = choices[0]
            finish = c0.get("finish_reason")
            if finish:
                self.finish_reason = finish
            delta = c0.get("delta")
            if delta is not None:
                text = delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or ""
            else:
                text = c0.get("text") or ""
            # Exact token count of this chunk, if the server tells.
            n = None
            if usage is not None:
                cum = usage.get("completion_tokens")
                if type(cum) is int:
                    n = cum - (self.last_cum or 0)
                    self.last_cum = cum
            elif "token_ids" in c0 and type(c0["token_ids"]) is list:
                n = len(c0["token_ids"])
            if n is None:
                self.exact_tokens = False
                if not text:
                    continue
                n = 0
            elif n <= 0 and not text:
                continue  # role-only first chunk, finish chunk: no generated tokens
            self.times.append(now_s)
            self.tokens.append(n)
            if text:
                self.text_parts.append(text)
            if usage is None:
                self.usage_stale = True
            added += 1
        return added

    def on_json_body(self, now_s: float, obj: dict[str, Any]) -> None:
        """A non-streamed completion: the whole answer is one chunk at ``now_s``."""
        self.response_id = obj.get("id")
        self.usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
        choices = obj.get("choices") or []
        text = ""
        if choices:
            c0 = choices[0]
            msg = c0.get("message")
            text = (msg.get("content") or "") if isinstance(msg, dict) else (c0.get("text") or "")
            self.finish_reason = c0.get("finish_reason")
        n = _int((self.usage or {}).get("completion_tokens"))
        if text or n:
            self.times.append(now_s)
            self.tokens.append(n or 0)
            self.text_parts.append(text)
        self.exact_tokens = n is not None
        self.done = True

    # -- results ----------------------------------------------------------------------------------
    @property
    def first_token_s(self) -> float | None:
        return self.times[0] if self.times else None

    def text(self) -> str:
        return "".join(self.text_parts)

    def finish(
        self,
        end_s: float,
        *,
        outcome: Outcome | str | None = None,
        http_status: int | None,
        error: str | None = None,
        anchor: "WallAnchor",
        base: dict[str, Any],
        keep_output: bool = False,
    ) -> RequestRecord:
        """Build the immutable record. ``base`` holds identity fields (run_id, seq, task...)."""
        err = redact(error or self.error)
        if outcome is None:
            if err:
                outcome = Outcome.STREAM_ERROR
            elif self.done or self.finish_reason:
                outcome = Outcome.OK
            else:
                outcome, err = Outcome.STREAM_ERROR, "stream ended before [DONE]"
        outcome = Outcome(outcome).value
        sent = self.sent_s
        offsets = _offsets_ms(self.times, sent)
        chunk_tokens = list(self.tokens) if (self.exact_tokens and self.times) else None
        text = self.text()
        usage = self.usage or {}
        # A usage object older than the last content chunk cannot be the total.
        out_tokens = None if self.usage_stale else _int(usage.get("completion_tokens"))
        estimated = False
        if out_tokens is None:
            if chunk_tokens is not None:
                out_tokens = sum(chunk_tokens)
            elif text:
                out_tokens, estimated = max(1, round(len(text) / CHARS_PER_TOKEN_ESTIMATE)), True
        return RequestRecord(
            **base,
            outcome=outcome,
            sent_at=anchor.epoch(sent),
            ttft_ms=offsets[0] if offsets else None,
            e2e_ms=round((end_s - sent) * 1000.0, 3),
            chunk_offsets_ms=offsets,
            chunk_tokens=chunk_tokens,
            prompt_tokens=_int(usage.get("prompt_tokens")),
            output_tokens=out_tokens,
            tokens_estimated=estimated,
            finish_reason=self.finish_reason,
            http_status=http_status,
            error=err,
            response_id=self.response_id,
            output_sha256=hashlib.sha256(text.encode("utf-8")).hexdigest() if self.times else None,
            output_text=text if keep_output else None,
            spec_decode=self.spec_decode,
        )


def _offsets_ms(times: array, sent: float) -> list[float]:
    """Arrival offsets in ms from ``sent``, rounded to the microsecond (compact JSON)."""
    if not times:
        return []

    a = np.frombuffer(times, dtype=np.float64)
    return ((a - sent) * 1000.0).round(3).tolist()  # the method: no np.round dispatch per request


class WallAnchor:
    """One wall-clock reading per worker; epoch times are anchor + monotonic offset."""

    __slots__ = ("wall_s", "mono_s")

    def __init__(self, wall_s: float, mono_s: float) -> None:
        self.wall_s = wall_s
        self.mono_s = mono_s

    def epoch(self, mono_s: float) -> float:
        return round(self.wall_s + (mono_s - self.mono_s), 6)


def _int(v: Any) -> int | None:
    if v is None or isinstance(v, bool):
        return None
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _error_text(obj: dict[str, Any]) -> str:
    """Short text for an error object sent inside a stream or as an HTTP error body."""
    err = obj.get("error", obj)
    if isinstance(err, dict):
        kind = err.get("type") or err.get("code") or "error"
        msg = err.get("message") or ""
        return f"{kind}: {redact(str(msg))[:160]}" if msg else str(kind)
    return redact(str(err))[:160]


def error_from_body(status: int, body: bytes) -> str:
    """``HTTP <status>: <server message>`` from an OpenAI/vLLM-style JSON error body."""
    try:
        obj = orjson.loads(body) if body else None
    except orjson.JSONDecodeError:
        obj = None
    if isinstance(obj, dict):
        if "detail" in obj and "error" not in obj and "message" not in obj:
            return f"HTTP {status}: {redact(str(obj['detail']))[:160]}"
        return f"HTTP {status}: {_error_text(obj)}"
    snippet = redact(body[:1024].decode("utf-8", "replace")).strip()[:120] if body else ""
    return f"HTTP {status}: {snippet}" if snippet else f"HTTP {status}"
