"""Per-request stream state: turns timed SSE events into a :class:`RequestRecord` (pure).

The I/O loop (``tokenswarm.wire.client``) reads whatever the socket has, takes ONE
timestamp per read, and hands the events of that read to :meth:`StreamState.on_events`.
Events that arrived in the same read share the timestamp: they did arrive together.
All times are ``time.perf_counter()`` seconds supplied by the caller, so this module is
unit-tested with scripted times and never sleeps.

Token accounting, most exact first:

1. ``usage.completion_tokens`` on every chunk (``stream_options.continuous_usage_stats``):
   the per-chunk count is the difference of consecutive cumulative values.
2. ``token_ids`` on the choice (vLLM ``return_token_ids``): the count is its length.
3. Neither, but the number of content events equals the final ``usage.completion_tokens``:
   one token per event, exact (``chunk_tokens_inferred=True``; see ``engine_fields``).
4. Otherwise ``chunk_tokens`` is ``None`` -- counts are never guessed from text.

The final ``usage`` object (``include_usage``) gives ``output_tokens``; without it the sum
of exact per-chunk counts is used, and without those an estimate marked
``tokens_estimated=True`` (4 characters per token).

Numbers from the server are checked where they are read (:mod:`tokenswarm.wire.reported`), so a
record always holds plausible values and can always be written
(:class:`~tokenswarm.wire.limits.StreamLimits`): a count that is not an integer, is
negative, goes backwards or exceeds what the request could carry makes the request a
``stream_error`` ("server reported completion_tokens=-4"), never an exception. The usage
numbers are checked once, when the record is built; the running caps (content events, bytes,
cumulative usage) are O(1) per event, and a stream that passes one is cut
(:class:`StreamLimitExceeded`) with what arrived so far kept in its record.
"""

from __future__ import annotations

import hashlib
from array import array
from typing import Any

import orjson

from tokenswarm.record import MAX_PLAUSIBLE_TOKENS, Outcome, RecordIdentity, RequestRecord, build_record
from tokenswarm.redact import redact
from tokenswarm.wire.chunkjson import Usage, decode_chunk
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.engine_fields import one_token_per_event, spec_decode_of
from tokenswarm.wire.limits import DEFAULT_LIMITS, StreamLimits
from tokenswarm.wire.native import native_function
from tokenswarm.wire.reported import error_text, implausible, reported_count, reported_label, spec_decode_problem
from tokenswarm.wire.sse import StreamLimitExceeded

__all__ = ["StreamLimitExceeded", "StreamState"]

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
        "reasoning_chunks",
        "first_reasoning_s",
        "first_answer_s",
        "reasoning_chars",
        "limits",
        "bytes_seen",
        "last_delivery_s",
    )

    def __init__(self, sent_s: float, limits: StreamLimits = DEFAULT_LIMITS) -> None:
        self.sent_s = sent_s
        self.limits = limits
        self.bytes_seen = 0  # SSE payload bytes so far (the byte cap)
        self.times = array("d")  # arrival (perf_counter s) of each content chunk
        self.tokens = array("l")  # tokens in each content chunk (valid if exact_tokens)
        self.text_parts: list[str] = []
        self.exact_tokens = True
        self.last_cum: int | None = None
        self.usage: dict[str, Any] | Usage | None = None  # the latest usage object (either reading)
        self.finish_reason: str | None = None
        self.response_id: str | None = None
        self.done = False
        self.error: str | None = None
        self.spec_decode: dict[str, Any] | None = None
        self.usage_stale = False  # content arrived after the last usage object
        # Reasoning streams (reasoning_content / reasoning deltas): counted and timed apart;
        # the answer text (text_parts) never includes reasoning, so histories never echo it.
        self.reasoning_chunks = 0
        self.first_reasoning_s: float | None = None
        self.first_answer_s: float | None = None
        self.reasoning_chars = 0
        # When the stream's last delivery (one read's events) arrived, on the same timeline and
        # from the same kernel stamps as its chunks: a complete answer ends here (e2e_ms).
        self.last_delivery_s: float | None = None

    # -- feeding -----------------------------------------------------------------------------
    def on_events(self, now_s: float, events: list[tuple[Any, ...]]) -> int:
        """Consume parsed SSE events that arrived at ``now_s``; return content chunks added."""
        # The hot path: one iteration per SSE event, kept flat on purpose (no helper calls for
        # a typed completion chunk). Any other payload is read into the same fields by _read_object.
        last = self.last_delivery_s
        if last is not None and now_s < last:
            self._arrived_by(now_s)
        self.last_delivery_s = now_s
        added: int = 0
        if _feed_chunks is not None:  # the common chunks in C, up to the first it leaves to this loop
            taken: int
            taken, added = _feed_chunks(self, now_s, events)
            if taken == len(events):
                self._check_caps(self.bytes_seen)
                return added
            if taken:
                events = events[taken:]
        nbytes = self.bytes_seen
        cap = self.limits.max_output_tokens  # the running token bound of a cumulative usage
        for event_type, data in events:
            nbytes += len(data)
            if data == b"[DONE]":
                self.done = True
                continue
            c = decode_chunk(data) if event_type is None else None
            if c is not None:
                if self.response_id is None:
                    self.response_id = c.id
                usage = c.usage
                if usage is not None:
                    self.usage = usage
                    self.usage_stale = False
                choices = c.choices
                if not choices:
                    continue  # usage-only trailer or keep-alive object
                c0 = choices[0]
                finish, delta, token_ids = c0.finish_reason, c0.delta, c0.token_ids
                if delta is not None:
                    text = delta.content or ""
                    thought = None if text else (delta.reasoning_content or delta.reasoning or None)
                else:
                    text, thought = c0.text or "", None
                cum = None if usage is None else usage.completion_tokens
            else:
                fields = self._read_object(event_type, data)
                if fields is None:
                    continue
                usage, finish, text, thought, token_ids, cum = fields
            if finish:
                self.finish_reason = finish
            # Exact token count of this chunk, if the server tells.
            n = None
            if usage is not None:
                if type(cum) is int:
                    # A text-less total after untracked chunks (llama.cpp's finish chunk) is no chunk.
                    n = 0 if (self.last_cum is None and self.times and not text) else cum - (self.last_cum or 0)
                    if n < 0 or cum > cap:  # backwards, or more than it can carry
                        self.bytes_seen = nbytes
                        raise StreamLimitExceeded(implausible("completion_tokens", cum, self.last_cum, cap))
                    self.last_cum = cum
            elif type(token_ids) is list:
                n = len(token_ids)
            if n is None:
                self.exact_tokens = False
                if not text and not thought:
                    continue
                n = 0
            elif n <= 0 and not text and not thought:
                continue  # role-only first chunk, finish chunk: no generated tokens
            self.times.append(now_s)
            self.tokens.append(n)
            if thought:
                self._on_reasoning(now_s, thought)
            elif text:
                self.text_parts.append(text)
                if self.first_answer_s is None:
                    self.first_answer_s = now_s
            if usage is None:
                self.usage_stale = True
            added += 1
        self.bytes_seen = nbytes
        self._check_caps(nbytes)
        return added

    def _check_caps(self, nbytes: int) -> None:
        """The running caps, once per read: O(1) whatever the stream sends."""
        limits = self.limits
        if nbytes > limits.max_response_bytes:
            raise StreamLimitExceeded(f"protocol error: response exceeded {limits.max_response_bytes} bytes "
                                      "(target.limits.response_bytes)")
        if len(self.times) > limits.max_output_tokens:
            raise StreamLimitExceeded(f"protocol error: more than {limits.max_output_tokens} content events, "
                                      f"each at least one token (target.limits.output_tokens_factor)")

    def _arrived_by(self, now_s: float) -> None:
        """Earlier deliveries dated after ``now_s`` had arrived by ``now_s``: date them so.

        A connection's bytes arrive in order, and every date is an upper bound of an arrival (a
        kernel stamp, a watcher's note, the clock after a read), but for the conversion of a
        kernel stamp onto the monotonic clock, whose offset is sampled within ~20 us per read.
        So a delivery dated before an earlier one (seen on llama.cpp under load: 9.613, then
        9.612 ms) bounds the earlier ones too; they take its date, never a negative gap.
        """
        times = self.times
        k = len(times) - 1
        while k >= 0 and times[k] > now_s:
            times[k] = now_s
            k -= 1
        if self.first_answer_s is not None and self.first_answer_s > now_s:
            self.first_answer_s = now_s
        if self.first_reasoning_s is not None and self.first_reasoning_s > now_s:
            self.first_reasoning_s = now_s

    def _read_object(self, event_type: str | None, data: bytes) -> tuple[Any, ...] | None:
        """Any payload, decoded into dicts: ``(usage, finish, text, thought, token_ids, cum)`` of
        its first choice, or None when it holds no choice (errors, trailers, malformed data are
        recorded on the state here)."""
        try:
            obj = orjson.loads(data)
        except orjson.JSONDecodeError:
            self.error = "malformed SSE: invalid JSON"
            return None
        if type(obj) is not dict:
            self.error = "malformed SSE: payload is not an object"
            return None
        choices = obj.get("choices")
        if event_type == "error" or ("error" in obj and not choices):
            self.error = error_text(obj)
            return None
        if self.response_id is None:
            self.response_id = obj.get("id")
        usage = obj.get("usage")
        if usage is not None and type(usage) is dict:
            self.usage = usage
            self.usage_stale = False
        else:
            usage = None
        if "metrics" in obj or "timings" in obj or "sglext" in obj:
            sd = spec_decode_of(obj)  # vLLM metrics, llama.cpp timings, SGLang sglext
            if sd is not None:
                self.spec_decode = sd
        if not choices:
            return None  # usage-only trailer or keep-alive object
        c0 = choices[0] if type(choices) is list else None
        if type(c0) is not dict:
            self.error = "malformed SSE: choices is not a list of objects"
            return None
        delta = c0.get("delta")
        thought = None
        if delta is None:
            text = c0.get("text") or ""
        elif type(delta) is not dict:
            self.error = "malformed SSE: choices[0].delta is not an object"
            return None
        else:
            text = delta.get("content") or ""
            if not text:
                thought = delta.get("reasoning_content") or delta.get("reasoning") or None
        cum = None if usage is None else usage.get("completion_tokens")
        return usage, c0.get("finish_reason"), text, thought, c0.get("token_ids"), cum

    def _on_reasoning(self, now_s: float, thought: Any) -> None:
        self.reasoning_chunks += 1
        self.reasoning_chars += len(thought) if isinstance(thought, str) else 0
        if self.first_reasoning_s is None:
            self.first_reasoning_s = now_s

    def on_json_body(self, now_s: float, obj: dict[str, Any]) -> None:
        """A non-streamed completion: the whole answer is one chunk at ``now_s``."""
        self.last_delivery_s = now_s
        self.response_id = obj.get("id")
        self.usage = obj.get("usage") if isinstance(obj.get("usage"), dict) else None
        choices = obj.get("choices") or []
        text = ""
        if choices:
            c0 = choices[0]
            msg = c0.get("message")
            text = (msg.get("content") or "") if isinstance(msg, dict) else (c0.get("text") or "")
            self.finish_reason = c0.get("finish_reason")
        n, problem = reported_count("completion_tokens", (self.usage or {}).get("completion_tokens"),
                            self.limits.max_output_tokens)
        if problem:
            self.error = problem
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
        try:
            return "".join(self.text_parts)
        except TypeError:  # a content that is not a string: left out (finish names the problem)
            return "".join(p for p in self.text_parts if type(p) is str)

    def _server_values(self, usage: dict[str, Any] | Usage) -> tuple[
            int | None, int | None, dict[str, Any] | None, str, str | None, str | None, str | None]:
        """The server's numbers and labels, checked once: ``(output_tokens, prompt_tokens,
        spec_decode, text, finish_reason, response_id, problem)``; a value no stream could carry
        is left out and named in ``problem`` (the first one found), the request's error."""
        out_tokens, problem = reported_count("completion_tokens", usage.get("completion_tokens"),
                                     self.limits.max_output_tokens)
        prompt_tokens, p_problem = reported_count("prompt_tokens", usage.get("prompt_tokens"), MAX_PLAUSIBLE_TOKENS)
        spec_decode = self.spec_decode
        s_problem = None if spec_decode is None else spec_decode_problem(spec_decode)
        if s_problem:
            spec_decode = None
        t_problem = None
        try:
            text = "".join(self.text_parts)
        except TypeError:
            text, t_problem = self.text(), "server sent a content that is not a string"
        finish_reason, f_problem = reported_label("finish_reason", self.finish_reason)
        response_id, i_problem = reported_label("id", self.response_id)
        problem = problem or p_problem or s_problem or t_problem or f_problem or i_problem
        return out_tokens, prompt_tokens, spec_decode, text, finish_reason, response_id, problem

    def _token_counts(self, out_tokens: int | None, text: str) -> tuple[int | None, list[int] | None, bool, bool]:
        """``(output_tokens, chunk_tokens, chunk_tokens_inferred, tokens_estimated)``, most exact
        first (see the module's docstring); ``out_tokens``: the server's checked total."""
        chunk_tokens = list(self.tokens) if (self.exact_tokens and self.times) else None
        # A usage object older than the last content chunk cannot be the total.
        if self.usage_stale:
            out_tokens = None
        inferred = False
        if chunk_tokens is None and self.times:
            chunk_tokens = one_token_per_event(len(self.times), out_tokens)
            inferred = chunk_tokens is not None
        estimated = False
        if out_tokens is None:
            if chunk_tokens is not None:
                out_tokens = sum(chunk_tokens)
            elif text or self.reasoning_chars:
                chars = len(text) + self.reasoning_chars
                out_tokens, estimated = max(1, round(chars / CHARS_PER_TOKEN_ESTIMATE)), True
        return out_tokens, chunk_tokens, inferred, estimated

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
        identity: RecordIdentity | None = None,
    ) -> RequestRecord:
        """Build the immutable record. ``base`` holds identity fields (run_id, seq, task...) and
        the phase fields, or the phase fields alone with the ``identity`` apart (``base`` wins)."""
        usage = self.usage or {}
        out_tokens, prompt_tokens, spec_decode, text, finish_reason, response_id, problem = self._server_values(usage)
        err = redact(error or self.error or problem)
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
        out_tokens, chunk_tokens, inferred, estimated = self._token_counts(out_tokens, text)
        reasoning = _reasoning_fields(self, usage, chunk_tokens, sent)
        # A complete answer ends at its last delivery (kernel-dated like its chunks); the
        # application's own reading (end_s) comes ~1 ms later and stays as a diagnostic.
        # A failed, cut or timed-out one ends when the generator saw it end.
        last = self.last_delivery_s
        if last is not None and self.times and self.times[-1] > last:  # pieces of one read dated apart
            last = self.times[-1]
        end = last if outcome == "ok" and last is not None and sent <= last <= end_s else end_s
        fields = {
            **base,
            "outcome": outcome,
            "sent_at_s": anchor.epoch(sent),
            "ttft_ms": offsets[0] if offsets else None,
            "e2e_ms": round((end - sent) * 1000.0, 3),
            "e2e_app_ms": round((end_s - sent) * 1000.0, 3),
            "chunk_offsets_ms": offsets,
            "chunk_tokens": chunk_tokens,
            "prompt_tokens": prompt_tokens,
            "output_tokens": out_tokens,
            "tokens_estimated": estimated,
            "finish_reason": finish_reason,
            "http_status": http_status,
            "error": err,
            "response_id": response_id,
            "output_sha256": hashlib.sha256(text.encode("utf-8")).hexdigest() if self.times else None,
            "output_text": text if keep_output else None,
            "spec_decode": spec_decode,
            "chunk_tokens_inferred": inferred,
        }
        if reasoning:
            fields.update(reasoning)
        return build_record(fields, identity)


#: C: the leading common completion chunks of a delivery, read as the loop of
#: :meth:`StreamState.on_events` reads them (``_chunks.c``); None without the extension.
_feed_chunks = native_function("feed_chunks")


class _NativeUsage(dict):  # type: ignore[type-arg]
    """The usage object the C path keeps: a plain dict to every reader; the C path may update it
    in place while the state alone holds it (one per chunk otherwise)."""

    __slots__ = ()


if _feed_chunks is not None and not native_function("bind_stream_state")(StreamState, _NativeUsage):
    _feed_chunks = None


def _reasoning_fields(state: StreamState, usage: dict[str, Any] | Usage, chunk_tokens: list[int] | None,
                      sent: float) -> dict[str, Any]:
    """Two-phase timing and counts of a reasoning stream (all None for a plain one).

    Reasoning chunks precede the answer in the APIs that send them (vLLM, SGLang, DeepSeek),
    so chunk ``i`` is reasoning iff ``i < reasoning_chunks``. ``reasoning_tokens`` is the server's
    ``usage.completion_tokens_details.reasoning_tokens``, else the exact per-chunk counts.
    """
    if not state.reasoning_chunks:
        return {}
    details = usage.get("completion_tokens_details")
    r_tokens = None
    if isinstance(details, dict):  # a bad count is not the request's error: the answer stands
        r_tokens = reported_count("reasoning_tokens", details.get("reasoning_tokens"), state.limits.max_output_tokens)[0]
    if r_tokens is None and chunk_tokens is not None:
        r_tokens = sum(chunk_tokens[:state.reasoning_chunks])
    first_r, first_a = state.first_reasoning_s, state.first_answer_s
    return {
        "first_reasoning_token_ms": None if first_r is None else round((first_r - sent) * 1000.0, 3),
        "first_answer_token_ms": None if first_a is None else round((first_a - sent) * 1000.0, 3),
        "reasoning_chunks": state.reasoning_chunks,
        "answer_chunks": len(state.times) - state.reasoning_chunks,
        "reasoning_tokens": r_tokens,
    }


_native_offsets_ms = native_function("offsets_ms")
if _native_offsets_ms is None:  # at import time: a first lazy import inside the event loop stalls it ~80 ms
    import numpy as np


def _offsets_ms(times: array[float], sent: float) -> list[float]:
    """Arrival offsets in ms from ``sent``, rounded to the microsecond (compact JSON)."""
    if not times:
        return []
    if _native_offsets_ms is not None:
        return _native_offsets_ms(times, sent)  # type: ignore[no-any-return]  # the C extension returns a list of floats
    a = np.frombuffer(times, dtype=np.float64)
    offsets: list[float] = ((a - sent) * 1000.0).round(3).tolist()
    return offsets  # the method: no np.round dispatch per request
