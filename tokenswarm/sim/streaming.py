"""One completion request's sink: the engine's emissions as SSE chunks (or one JSON body), the truth log's chunks.

:class:`Stream` is called by the engine greenlet at each step end (:meth:`Stream.on_emission`
must not yield): it formats the chunk, writes it without yielding through its
:class:`~tokenswarm.sim.http.Conn`, observes the emission lag and applies the stream faults
(cut connections, bad usage); :meth:`Stream.finish` queues the request's truth record.
"""

from __future__ import annotations

import time
from array import array
from typing import Any, Protocol

import orjson

from tokenswarm.sim import api
from tokenswarm.sim.engine import Scheduler, SpecConfig
from tokenswarm.sim.faults import FaultConfig
from tokenswarm.sim.http import Conn
from tokenswarm.sim.sequence import Emission, Sequence
from tokenswarm.sim.simmetrics import SimMetrics

monotonic = time.monotonic


class StreamHost(Protocol):
    """What a stream reads of the server that owns it (:class:`~tokenswarm.sim.server.SimServer`)."""

    reasoning_tokens: int
    metrics: SimMetrics
    sched: Scheduler
    faults: FaultConfig
    spec: SpecConfig
    per_request_spec_metrics: str
    active: set[Stream]

    def truth_record(self, rid: str, endpoint: str, status: int, received_s: float, prompt_tokens: int | None,
                     output_tokens: int, finish_reason: str | None, outcome: str, chunks: list[Any]) -> None: ...


class Stream:
    """Sink of one completion request: turns emissions into SSE chunks (or one JSON body)."""

    def __init__(self, srv: StreamHost, conn: Conn, req: api.CompletionRequest, rid: str, received_s: float,
                 cut_after: int | None, index: int) -> None:
        self.srv = srv
        self.conn = conn
        self.req = req
        self.rid = rid
        self.index = index
        self.received_s = received_s
        self.cut_after = cut_after
        self.seq: Sequence | None = None
        self.n_chunks = 0
        self.n_tokens = 0
        # Truth log per chunk: send time and tokens, in arrays (no GC-tracked object per chunk).
        self.chunk_s = array("d")
        self.chunk_tokens = array("q")
        self.text_parts: list[str] = []
        self.finish_reason: str | None = None
        self.last_emit_s: float | None = None
        self.done = False  #: request finished (any outcome); truth record queued
        self.complete = False  #: non-streaming: all tokens generated, body not yet written
        self.outcome = "ok"
        self.cached_tokens: int | None = None  # prompt tokens found in the prefix cache (when it is on)
        self.created = int(time.time())
        chat = req.endpoint == "chat"
        obj = b"chat.completion.chunk" if chat else b"text_completion"
        self.prefix = (b'data: {"id":"' + rid.encode() + b'","object":"' + obj + b'","created":'
                       + str(self.created).encode() + b',"model":' + orjson.dumps(req.model) + b',"choices":[')
        # One %-template per stream: each content event is a single bytes formatting of
        # (JSON text, finish reason, usage) on the engine's per-chunk path.
        content = b'"delta":{"content":%b}' if chat else b'"text":%b'
        self.event_fmt = (self.prefix.replace(b"%", b"%%") + b'{"index":0,' + content
                          + b',"logprobs":null,"finish_reason":%b,"stop_reason":null}]%b}\n\n')
        self.usage_tail = (b',"usage":{"prompt_tokens":%d,"total_tokens":%%d,"completion_tokens":%%d}'
                           % req.prompt_len)
        # Reasoning mode: the first reasoning_tokens tokens of a chat stream go out as
        # reasoning_content deltas (a chunk is reasoning if its first token is), the rest as content.
        self.reasoning_budget = srv.reasoning_tokens if (chat and req.thinking and req.stream) else 0
        self.n_reasoning = 0
        self.reasoning_fmt = self.event_fmt.replace(b'"delta":{"content":', b'"delta":{"reasoning_content":')

    # ------------------------------------------------------------------ engine side
    def on_emission(self, e: Emission) -> None:
        """Called by the engine greenlet at the step end; must not yield."""
        if self.done:
            return
        srv = self.srv
        self.n_tokens += e.n_tokens
        if not self.req.stream:
            self.text_parts.append(e.text)
            self._observe(monotonic(), e)
            if e.finish_reason is not None:
                self.finish_reason = e.finish_reason
                self.complete = True
                self.conn.wake.set()
            return
        cutting = self.cut_after is not None and self.n_chunks + 1 >= self.cut_after
        finish = None if cutting else e.finish_reason
        req = self.req
        parts = []
        if self.n_chunks == 0 and req.endpoint == "chat":
            parts.append(self.prefix + b'{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
                         b'"finish_reason":null}]' + (self._usage(0) if req.continuous_usage else b"") + b"}\n\n")
        # One SSE event for the step's tokens -- or, with tokens_per_step, one event per token.
        pieces = e.pieces or (e.text,)
        fmt, usage_tail, plen = self.event_fmt, self.usage_tail if req.continuous_usage else None, req.prompt_len
        cum = self.n_tokens - e.n_tokens
        last = len(pieces) - 1
        for i, piece in enumerate(pieces):
            start = cum
            cum = self.n_tokens if i == last else cum + 1
            fr = b"null" if finish is None or i < last else b'"%b"' % finish.encode()
            if start < self.reasoning_budget:
                self.n_reasoning += cum - start
                parts.append(self.reasoning_fmt % (orjson.dumps(piece), fr,
                                                   b"" if usage_tail is None else usage_tail % (plen + cum, cum)))
                continue
            parts.append(fmt % (orjson.dumps(piece), fr, b"" if usage_tail is None else usage_tail % (plen + cum, cum)))
        if finish is not None:
            if req.include_usage:
                parts.append(self.prefix + b"]" + self._final_usage() + b"}\n\n")
            parts.append(b"data: [DONE]\n\n")
        payload = parts[0] if len(parts) == 1 else b"".join(parts)
        frame = b"%x\r\n%b\r\n" % (len(payload), payload)
        if finish is not None:
            frame += b"0\r\n\r\n"
        now = monotonic()  # immediately before the socket write
        ok = self.conn.write_nowait(frame)
        self.n_chunks += len(pieces)
        srv.metrics.chunks_sent += len(pieces)
        self._observe(now, e)
        if not ok:
            assert self.seq is not None  # set before the first frame is written
            self.srv.sched.abort(self.seq)
            self.finish("aborted")
        elif cutting:
            self.conn.cut()
            assert self.seq is not None
            self.srv.sched.abort(self.seq)
            srv.metrics.fault("cut")
            self.finish("fault_cut")
        elif finish is not None:
            self.finish_reason = finish
            self.finish("fault_stall" if self.seq is not None and self.seq.stalled else "ok")

    def _observe(self, now: float, e: Emission) -> None:
        m = self.srv.metrics
        m.emission_lag.observe(now - e.scheduled_s)
        if self.last_emit_s is None:
            m.ttft.observe(now - self.received_s)
            seq = self.seq
            if seq is not None and seq.admitted_s is not None:
                m.queue_time.observe(max(0.0, seq.admitted_s - seq.arrival_s))
        else:
            m.itl.observe(now - self.last_emit_s)
        self.last_emit_s = now
        if e.n_tokens and self.req.stream:
            if e.pieces:
                k = len(e.pieces)  # one event per token, one write
                self.chunk_s.extend([now] * k)
                self.chunk_tokens.extend([1] * k)
            else:
                self.chunk_s.append(now)
                self.chunk_tokens.append(e.n_tokens)

    def truth_chunks(self) -> list[tuple[float, int]]:
        """The truth log's ``chunks``: (send time, tokens) per SSE content event."""
        return list(zip(self.chunk_s.tolist(), self.chunk_tokens.tolist()))

    def _usage(self, completion: int) -> bytes:
        return self.usage_tail % (self.req.prompt_len + completion, completion)

    def _final_usage(self) -> bytes:
        usage = orjson.dumps(self._usage_dict())
        bad = self.srv.faults.bad_usage_of(self.index)
        if bad is not None:  # the fault: a count no stream could carry (the truth log keeps the real one)
            self.srv.metrics.fault("bad_usage")
            usage = usage.replace(b'"completion_tokens":%d' % self.n_tokens, b'"completion_tokens":' + bad)
        out = b',"usage":' + usage
        spec = self._spec_metrics()
        if spec is not None:
            out += b',"metrics":' + orjson.dumps({"speculative_decoding": spec})
        return out

    def _usage_dict(self) -> dict[str, Any]:
        p = self.req.prompt_len
        out: dict[str, Any] = {"prompt_tokens": p, "total_tokens": p + self.n_tokens,
                               "completion_tokens": self.n_tokens}
        if self.reasoning_budget:
            out["completion_tokens_details"] = {"reasoning_tokens": self.n_reasoning}
        if self.cached_tokens is not None:
            out["prompt_tokens_details"] = {"cached_tokens": self.cached_tokens}
        return out

    def _spec_metrics(self) -> dict[str, Any] | None:
        if self.srv.per_request_spec_metrics == "none" or self.seq is None or not self.srv.spec.enabled:
            return None
        return self.seq.spec_summary() or {
            "mean_acceptance_length": 1.0, "draft_acceptance_rate": 0.0, "acceptance_histogram": [],
            "num_spec_steps": 0, "num_accepted_draft_tokens": 0, "num_draft_tokens": 0,
            "num_spec_tokens": self.srv.spec.k,
        }

    def finish(self, outcome: str) -> None:
        """End of the request: metrics, truth record, wake the connection greenlet."""
        if self.done:
            return
        self.done = True
        self.outcome = outcome
        srv = self.srv
        srv.active.discard(self)
        if outcome == "ok" or outcome == "fault_stall":
            if self.last_emit_s is not None:
                srv.metrics.e2e.observe(self.last_emit_s - self.received_s)
        elif outcome == "aborted":
            srv.metrics.aborted += 1
        srv.truth_record(self.rid, self.req.endpoint, 200, self.received_s, self.req.prompt_len, self.n_tokens,
                         self.finish_reason, outcome, self.truth_chunks())
        self.conn.wake.set()

    # ------------------------------------------------------------------ connection side
    def non_stream_body(self) -> bytes:
        chat = self.req.endpoint == "chat"
        text = "".join(self.text_parts)
        if chat:
            choice: dict[str, Any] = {"index": 0, "message": {"role": "assistant", "content": text},
                                      "logprobs": None, "finish_reason": self.finish_reason, "stop_reason": None}
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": self.finish_reason,
                      "stop_reason": None}
        body: dict[str, Any] = {"id": self.rid, "object": "chat.completion" if chat else "text_completion",
                                "created": self.created, "model": self.req.model, "choices": [choice],
                                "usage": self._usage_dict()}
        spec = self._spec_metrics()
        if spec is not None:
            body["metrics"] = {"speculative_decoding": spec}
        return orjson.dumps(body)
