"""The simulator's HTTP/1.1 server on gevent: one engine greenlet, one greenlet per connection.

The engine greenlet sleeps until the model's next step deadline (absolute times), asks the
:class:`~tokenswarm.sim.engine.Scheduler` for the emissions due, and writes each chunk
straight to the client's socket with a non-blocking ``send`` (no greenlet switch per chunk).
Only when a socket's kernel buffer is full does the rest go to a backlog that the
connection's own greenlet drains cooperatively. The time taken immediately before the
write is the chunk's send time (truth log) and ``send - scheduled`` is the emission lag.
"""

from __future__ import annotations

import gc
import os
import signal
import socket
import sys
import time
import traceback
from array import array
from collections import deque
from typing import Any
from urllib.parse import parse_qs, urlsplit

import gevent
import gevent.event
import orjson
from gevent.server import StreamServer

from tokenswarm.sim import api
from tokenswarm.sim.api import HttpError
from tokenswarm.sim.engine import Emission, Scheduler, Sequence, SpecConfig
from tokenswarm.sim.faults import FaultConfig
from tokenswarm.sim.gpu import GpuModel
from tokenswarm.sim.prefixcache import PrefixCache
from tokenswarm.sim.profiles import Profile
from tokenswarm.sim.simmetrics import SimMetrics, render
from tokenswarm.sim.tokenizer import token_ids
from tokenswarm.sim.truth import TruthLog
from tokenswarm.wire import kstamp

monotonic = time.monotonic
MAX_HEADER_BYTES = 65536
MAX_BODY_BYTES = 64 * 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
            413: "Payload Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}
_SERVER = b"server: tokenswarm-sim\r\n"


class Conn:
    """One client connection: immediate non-blocking writes plus an ordered backlog."""

    __slots__ = ("sock", "raw", "backlog", "sending", "closed", "wake", "recv_s", "stamped")

    def __init__(self, sock: Any) -> None:  # gevent's socket
        self.sock = sock
        self.recv_s: float | None = None  # when the bytes completing the current request arrived
        self.stamped = kstamp.enable(sock)
        self.raw = sock._sock  # the real non-blocking socket under gevent's wrapper
        self.backlog: deque[bytes] = deque()
        self.sending = False
        self.closed = False
        self.wake = gevent.event.Event()

    def recv(self, n: int) -> bytes:
        """Read (cooperatively) and set ``recv_s``: the kernel's arrival stamp when available,
        so a busy simulator's truth log does not move the request's arrival later."""
        if not self.stamped:
            data: bytes = self.sock.recv(n)
            self.recv_s = monotonic()
            return data
        msg: tuple[bytes, list[tuple[int, int, bytes]], int, Any] = self.sock.recvmsg(n, kstamp.ANC_BYTES)
        data, anc, _flags, _addr = msg
        now = monotonic()
        self.recv_s = kstamp.stamp_of(anc, time.time() - now, now)
        return data

    def write_nowait(self, data: bytes) -> bool:
        """Write without yielding; queue what the kernel does not take. False if the peer is gone."""
        if self.closed:
            return False
        if self.backlog or self.sending:
            self.backlog.append(data)
            self.wake.set()
            return True
        try:
            n = self.raw.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self.closed = True
            return False
        if n < len(data):
            self.backlog.append(data[n:])
            self.wake.set()
        return True

    def drain(self) -> None:
        """Send the backlog cooperatively (called from the connection greenlet only)."""
        self.sending = True
        try:
            while self.backlog and not self.closed:
                self.sock.sendall(self.backlog[0])
                self.backlog.popleft()
        except OSError:
            self.closed = True
        finally:
            self.sending = False

    def peer_closed(self) -> bool:
        """Non-blocking check whether the client closed its side."""
        if self.closed:
            return True
        try:
            peeked: bytes = self.raw.recv(1, socket.MSG_PEEK)
            return peeked == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def cut(self) -> None:
        """Abort the connection (RST) as a network fault would."""
        self.closed = True
        try:
            self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class Stream:
    """Sink of one completion request: turns emissions into SSE chunks (or one JSON body)."""

    def __init__(self, srv: SimServer, conn: Conn, req: api.CompletionRequest, rid: str, received_s: float,
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


class SimServer:
    """The simulator process: HTTP server, engine loop, truth log and metrics."""

    def __init__(
        self,
        profile: Profile,
        spec: SpecConfig,
        faults: FaultConfig,
        host: str = "127.0.0.1",
        port: int = 8000,
        truth_path: str | None = None,
        served_model_name: str | None = None,
        per_request_spec_metrics: str = "none",
        gpu_metrics: bool = False,
        reasoning_tokens: int = 0,
        prefix_cache: bool = False,
        api_key: str | None = None,
        echo_headers: bool = False,
        basic_auth: str | None = None,
        lora_modules: tuple[str, ...] = (),
    ) -> None:
        import base64

        self.api_key = api_key
        # the Authorization values accepted when a key or basic auth is required (None: no auth)
        self._accepted: tuple[bytes, ...] | None = None
        if api_key is not None or basic_auth is not None:
            self._accepted = tuple(v.encode() for v in (
                f"Bearer {api_key}" if api_key is not None else None,
                "Basic " + base64.b64encode(basic_auth.encode()).decode() if basic_auth is not None else None)
                if v is not None)
        self.echo_headers = echo_headers
        self.auth_counts: dict[str, int] = {}  # path -> requests that carried the right key
        self.profile = profile
        self.reasoning_tokens = reasoning_tokens  #: reasoning mode: this many tokens of each chat stream
        # Prefix cache as large as the KV cache, in blocks (vLLM keeps freed blocks cached until reused).
        self.prefix_cache = PrefixCache(max(1, profile.kv_capacity_tokens // 16)) if prefix_cache else None
        self.spec = spec
        self.faults = faults
        self.model = served_model_name or profile.model_name
        #: LoRA adapter names served beside the model (vLLM --lora-modules): listed by /v1/models
        #: and accepted as ``model``; they share the base model's engine (no adapter cost is modelled)
        self.adapters = tuple(lora_modules)
        self.per_request_spec_metrics = per_request_spec_metrics
        self.metrics = SimMetrics()
        has_draft_faults = faults.draft_unavailable > 0 or faults.draft_slow > 0
        self.sched = Scheduler(profile, spec, faults.draft_state if has_draft_faults else None,
                               self.metrics.iteration_tokens.observe)
        self.truth = TruthLog(truth_path) if truth_path else None
        #: the DCGM-compatible endpoint (GET /dcgm/metrics), off unless asked for
        self.gpu = GpuModel(self.sched, draft_weights=spec.enabled and spec.method == "draft") if gpu_metrics else None
        self.active: set[Stream] = set()
        self.engine_wake = gevent.event.Event()
        self.stopping = False
        self.stopped = gevent.event.Event()
        self.request_index = 0
        self._sleep_until: float | None = None
        self.started = int(time.time())
        self._rid_prefix = os.urandom(6).hex()
        self.server = StreamServer((host, port), self._handle, backlog=4096)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        """Bind and start serving (non-blocking)."""
        self.server.start()
        # On the listener too: a new connection's first request often arrives before it is
        # accepted, and accepted sockets inherit the flag, so that request keeps its stamp.
        kstamp.enable(self.server.socket)
        self._engine = gevent.spawn(self._engine_loop)
        self._flusher = gevent.spawn(self._flush_loop)
        self._reaper = gevent.spawn(self._reap_loop)

    @property
    def port(self) -> int:
        port: int = self.server.server_port
        return port

    def serve_forever(self) -> None:
        """Serve until SIGINT/SIGTERM, then stop cleanly."""
        self.start()
        gevent.signal_handler(signal.SIGTERM, self.stop)
        gevent.signal_handler(signal.SIGINT, self.stop)
        self.stopped.wait()

    def stop(self) -> None:
        """Stop accepting, abort in-flight streams, flush the truth log."""
        if self.stopping:
            return
        self.stopping = True
        self.server.close()
        for st in list(self.active):
            if st.seq is not None:
                self.sched.abort(st.seq)
            st.finish("aborted")
            st.conn.closed = True
            try:
                st.conn.raw.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if self.truth is not None:
            self.truth.close()
        self.engine_wake.set()
        self.stopped.set()

    # ------------------------------------------------------------------ engine
    def _engine_loop(self) -> None:
        sched = self.sched
        wake = self.engine_wake
        while not self.stopping:
            wake.clear()
            for e in sched.advance(monotonic()):
                sink = e.seq.sink
                if sink is not None:
                    try:
                        sink.on_emission(e)
                    except Exception:  # a bug must not stop the engine for everyone
                        traceback.print_exc()
                        sched.abort(e.seq)
                        sink.conn.cut()
                        sink.finish("error")
            deadline = sched.next_deadline()
            self._sleep_until = deadline
            if deadline is None:
                wake.wait()
            else:
                delay = deadline - monotonic()
                if delay > 0:
                    wake.wait(delay)

    def _reap_loop(self) -> None:
        """Once a second, notice clients that went away while their request waits or streams.

        One greenlet polling every socket (a non-blocking peek each) is much cheaper than a
        timer per connection when thousands of streams are open.
        """
        while not self.stopping:
            gevent.sleep(1.0)
            streams = list(self.active)
            for i, st in enumerate(streams):
                if i % 64 == 63:
                    gevent.sleep(0)  # let the engine emit between slices: no multi-ms pauses
                if not st.done and not st.complete and st.conn.peer_closed():
                    st.conn.closed = True
                    st.conn.wake.set()

    def _flush_loop(self) -> None:
        """Every 0.2 s: write the truth log, bucket the metrics observed since (bounded memory)."""
        while not self.stopping:
            gevent.sleep(0.2)
            self.metrics.flush()
            if self.truth is not None and not self.stopping:
                self.truth.flush()

    def truth_record(self, rid: str, endpoint: str, status: int, received_s: float, prompt_tokens: int | None,
                     output_tokens: int, finish_reason: str | None, outcome: str, chunks: list[Any]) -> None:
        """Queue one ground-truth line (CONTRACTS.md section 2)."""
        if self.truth is None or self.truth._f.closed:
            return
        self.truth.add({"id": rid, "endpoint": endpoint, "status": status, "received": received_s,
                        "prompt_tokens": prompt_tokens, "output_tokens": output_tokens,
                        "finish_reason": finish_reason, "outcome": outcome, "chunks": chunks})

    # ------------------------------------------------------------------ HTTP
    def _handle(self, sock: Any, _addr: Any) -> None:
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        conn = Conn(sock)
        buf = bytearray()
        try:
            while not self.stopping:
                i = buf.find(b"\r\n\r\n")
                while i < 0:
                    if len(buf) > MAX_HEADER_BYTES:
                        self._respond(conn, 431, api.error_body(431, "Request headers too large"), keep=False)
                        return
                    data = conn.recv(65536)
                    if not data:
                        return
                    buf += data
                    i = buf.find(b"\r\n\r\n")
                head = bytes(buf[:i]).decode("latin-1")
                del buf[: i + 4]
                lines = head.split("\r\n")
                parts = lines[0].split(" ")
                if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                    self._respond(conn, 400, api.error_body(400, "Malformed HTTP request line"), keep=False)
                    return
                method, target, version = parts
                headers: dict[str, str] = {}
                for line in lines[1:]:
                    k, _, v = line.partition(":")
                    headers[k.strip().lower()] = v.strip()
                conn_hdr = headers.get("connection", "").lower()
                keep = (version == "HTTP/1.1" and conn_hdr != "close") or (conn_hdr == "keep-alive")
                if "chunked" in headers.get("transfer-encoding", "").lower():
                    body = self._read_chunked(conn, buf)
                    if body is None:
                        return
                else:
                    try:
                        length = int(headers.get("content-length", "0") or 0)
                    except ValueError:
                        self._respond(conn, 400, api.error_body(400, "Bad Content-Length"), keep=False)
                        return
                    if length < 0 or length > MAX_BODY_BYTES:
                        self._respond(conn, 413, api.error_body(413, "Request body too large"), keep=False)
                        return
                    while len(buf) < length:
                        data = conn.recv(max(65536, length - len(buf)))
                        if not data:
                            return
                        buf += data
                    body = bytes(buf[:length])
                    del buf[:length]
                keep = self._dispatch(conn, method, target, body, keep, headers)
                if not keep or conn.closed:
                    return
        except OSError:
            return
        finally:
            try:
                sock.close()
            except OSError:
                pass

    def _read_chunked(self, conn: Conn, buf: bytearray) -> bytes | None:
        body = bytearray()
        while True:
            i = buf.find(b"\r\n")
            while i < 0:
                data = conn.recv(65536)
                if not data:
                    return None
                buf += data
                i = buf.find(b"\r\n")
            size = int(bytes(buf[:i]).split(b";")[0] or b"0", 16)
            del buf[: i + 2]
            while len(buf) < size + 2:
                data = conn.recv(65536)
                if not data:
                    return None
                buf += data
            body += buf[:size]
            del buf[: size + 2]
            if size == 0:
                return bytes(body)
            if len(body) > MAX_BODY_BYTES:
                return None

    def _respond(self, conn: Conn, status: int, body: bytes, keep: bool, ctype: bytes = b"application/json",
                 extra: bytes = b"") -> None:
        head = (b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, "Unknown").encode()) + _SERVER
                + b"content-type: " + ctype + b"\r\ncontent-length: %d\r\n" % len(body) + extra
                + (b"" if keep else b"connection: close\r\n") + b"\r\n")
        conn.sock.sendall(head + body)

    def _dispatch(self, conn: Conn, method: str, target: str, body: bytes, keep: bool,
                  headers: dict[str, str] | None = None) -> bool:
        url = urlsplit(target)
        path = url.path
        self._echo = headers if self.echo_headers else None
        try:
            if self._accepted is not None and path != "/health" and not path.startswith("/_tokenswarm/"):
                self._check_key(path, (headers or {}).get("authorization", ""))
            if path in ("/v1/chat/completions", "/v1/completions"):
                if method != "POST":
                    raise HttpError(405, "Method Not Allowed")
                return self._completion(conn, "chat" if path == "/v1/chat/completions" else "completions", body, keep)
            if path == "/health":
                self._only(method, "GET")
                self._respond(conn, 200, b"", keep)
            elif path == "/v1/models":
                self._only(method, "GET")
                self._respond(conn, 200, self._models(), keep)
            elif path == "/metrics":
                self._only(method, "GET")
                self._respond(conn, 200, self.metrics_text().encode(), keep,
                              ctype=b"text/plain; version=0.0.4; charset=utf-8")
            elif path == "/dcgm/metrics" and self.gpu is not None:
                self._only(method, "GET")
                self._respond(conn, 200, self.gpu.text().encode(), keep,
                              ctype=b"text/plain; version=0.0.4; charset=utf-8")
            elif path == "/tokenize":
                self._only(method, "POST")
                self._respond(conn, 200, self._tokenize(body), keep)
            elif path == "/_tokenswarm/stats":
                self._only(method, "GET")
                self._respond(conn, 200, orjson.dumps(self.stats(reset="reset" in parse_qs(url.query))), keep)
            elif path == "/_tokenswarm/flush":
                self._only(method, "POST")
                if self.truth is not None:
                    self.truth.flush()
                self._respond(conn, 200, b'{"flushed":true}', keep)
            else:
                self._respond(conn, 404, b'{"detail":"Not Found"}', keep)
        except HttpError as e:
            self._respond(conn, e.status, e.body(), keep)
        except OSError:
            raise
        except Exception as e:  # never a stack trace to the client, never a dead server
            traceback.print_exc()
            self._respond(conn, 500, api.error_body(500, f"Internal error: {type(e).__name__}"), keep=False)
            return False
        return keep

    def _check_key(self, path: str, authorization: str) -> None:
        """A missing or wrong key (or basic auth) gets 401 with an OpenAI-style error, as vLLM answers."""
        import hmac

        assert self._accepted is not None
        if not any(hmac.compare_digest(authorization.encode(), ok) for ok in self._accepted):
            raise HttpError(401, self._with_headers("Unauthorized: missing or wrong API key"))
        self.auth_counts[path] = self.auth_counts.get(path, 0) + 1

    def _with_headers(self, message: str) -> str:
        """``--echo-headers-in-errors``: quote the request's headers in an error, as a careless gateway does."""
        echo = getattr(self, "_echo", None)
        if not echo:
            return message
        quoted = "; ".join(f"{k}: {v}" for k, v in echo.items()
                           if k not in ("host", "content-length", "content-type", "accept", "accept-encoding",
                                        "user-agent", "connection"))
        return f"{message} (request headers: {quoted})"

    @staticmethod
    def _only(method: str, allowed: str) -> None:
        if method != allowed:
            raise HttpError(405, f"Method Not Allowed (use {allowed})")

    def _models(self) -> bytes:
        card = {"id": self.model, "object": "model", "created": self.started, "owned_by": "tokenswarm-sim",
                "root": self.model, "parent": None, "max_model_len": self.profile.max_model_len}
        cards = [card] + [{**card, "id": name, "root": name, "parent": self.model} for name in self.adapters]
        return orjson.dumps({"object": "list", "data": cards})

    def _tokenize(self, body: bytes) -> bytes:
        data = api.parse_json_object(body)
        api.check_model(data, self.model, self.adapters)
        if "messages" in data:
            toks, _ = api.prompt_tokens_of(data, "chat")
        elif "prompt" in data:
            toks, _ = api.prompt_tokens_of(data, "completions")
        else:
            raise HttpError(400, "'prompt' or 'messages' is required", "prompt")
        out: dict[str, Any] = {"count": len(toks), "max_model_len": self.profile.max_model_len,
                               "tokens": token_ids(toks), "token_strs": toks if data.get("return_token_strs") else None}
        return orjson.dumps(out)

    def metrics_text(self) -> str:
        s = self.sched
        return render(self.model, self.metrics, s.stats, s.num_running, s.num_waiting, s.kv_usage(),
                      self.spec.method if self.spec.enabled else "none", self.spec.k, s.draft_available,
                      extra=self._prefix_cache_metrics if self.prefix_cache is not None else None)

    def _prefix_cache_metrics(self, e: Any) -> None:
        pc = self.prefix_cache
        assert pc is not None
        e.counter("vllm:prefix_cache_queries", "Prefix cache queries, in terms of number of queried tokens.",
                  [(None, pc.queries_tokens)])
        e.counter("vllm:prefix_cache_hits", "Prefix cache hits, in terms of number of cached tokens.",
                  [(None, pc.hits_tokens)])

    def stats(self, reset: bool = False) -> dict[str, Any]:
        """Simulator self-measurements for benchmarks (``GET /_tokenswarm/stats[?reset=1]``)."""
        self.metrics.flush()
        out = {"emission_lag": self.metrics.lags.summary(), "chunks_sent": self.metrics.chunks_sent,
               "running": self.sched.num_running, "waiting": self.sched.num_waiting,
               "requests": self.request_index, "engine_steps": self.sched.stats.steps,
               "authorized": dict(self.auth_counts)}  # per path: requests that carried the --api-key
        if reset:
            self.metrics.lags.reset()
        return out

    def _completion(self, conn: Conn, endpoint: str, body: bytes, keep: bool) -> bool:
        # Truth "received" = when the bytes completing the request were read, not after parsing.
        received = conn.recv_s if conn.recv_s is not None else monotonic()
        index = self.request_index
        self.request_index += 1
        rid = ("chatcmpl-" if endpoint == "chat" else "cmpl-") + f"{self._rid_prefix}{index:010x}"
        status = self.faults.http_fault(index)
        if status is not None:
            self.metrics.fault(f"http_{status}")
            msg = {500: "Simulated internal server error", 503: "Simulated overload: service unavailable",
                   429: "Simulated rate limit: too many requests"}[status]
            self._respond(conn, status, api.error_body(status, self._with_headers(msg)), keep,
                          extra=b"retry-after: 1\r\n" if status in (429, 503) else b"")
            self.truth_record(rid, endpoint, status, received, None, 0, None, "error", [])
            return keep
        try:
            req = api.parse_completion(api.parse_json_object(body), endpoint, self.model, self.profile.max_model_len,
                                       self.adapters)
        except HttpError as e:
            self._respond(conn, e.status, e.body(), keep)
            self.truth_record(rid, endpoint, e.status, received, None, 0, None, "error", [])
            return keep
        stream = Stream(self, conn, req, rid, received, self.faults.cut_after_chunks(index) if req.stream else None,
                        index)
        stall_after = self.faults.stall_after_tokens(index)
        if stall_after is not None:
            self.metrics.fault("stall")
        seq = Sequence(
            rid, req.prompt_len, req.source, req.max_tokens, temperature=req.temperature, top_p=req.top_p,
            seed=req.seed, ignore_eos=req.ignore_eos, stops=req.stop, natural_range=self.profile.natural_output_tokens,
            stall_after=stall_after, stall_s=self.faults.stall_s, sink=stream, guided=req.guided,
        )
        stream.seq = seq
        if self.prefix_cache is not None and req.prompt is not None:
            # cached prompt tokens are not prefilled again: TTFT falls with the hit rate
            seq.prefilled = stream.cached_tokens = self.prefix_cache.lookup_insert(req.prompt)
        if req.stream:
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\n" + _SERVER + b"content-type: text/event-stream; charset=utf-8\r\n"
                              b"cache-control: no-cache\r\ntransfer-encoding: chunked\r\n"
                              + (b"" if keep else b"connection: close\r\n") + b"\r\n")
        self.active.add(stream)
        self.sched.submit(seq, received)
        # Wake the engine only if this request can start before the engine's next wake-up:
        # no step in flight (idle, or only stalled sequences), or an earlier per-sequence deadline.
        sched = self.sched
        if (self._sleep_until is None
                or (not sched.independent and sched.step is None)
                or (sched.independent and (sched.next_deadline() or 0.0) < self._sleep_until)):
            self.engine_wake.set()
        # Wait for the engine to finish this request, draining any write backlog meanwhile.
        while True:
            conn.wake.clear()
            if conn.backlog:
                conn.drain()
            if (stream.done or stream.complete) and not conn.backlog:
                break
            conn.wake.wait()  # set by emissions, backlog, the end of the request or the reaper
            if conn.closed and not stream.done:
                self.sched.abort(seq)
                stream.finish("aborted")
                return False
        if stream.done and stream.outcome not in ("ok", "fault_stall"):
            return False
        if not req.stream:
            payload = stream.non_stream_body()
            now = monotonic()
            self._respond(conn, 200, payload, keep)
            if stream.n_tokens:  # the whole body is one "chunk", sent now
                stream.chunk_s.append(now)
                stream.chunk_tokens.append(stream.n_tokens)
            stream.finish("fault_stall" if seq.stalled else "ok")
        return keep and not conn.closed


def serve(server: SimServer) -> int:
    """Run a configured server until signalled; returns the exit status."""
    # Per-chunk objects are short-lived; full collections over thousands of streams would
    # pause the event loop for milliseconds, so freeze startup objects and collect rarely.
    gc.collect()
    gc.freeze()
    gc.set_threshold(2000, 20, 1000)
    try:
        server.start()
    except OSError as e:
        print(f"tokenswarm sim: cannot listen: {e}", file=sys.stderr)
        return 3
    gevent.signal_handler(signal.SIGTERM, server.stop)
    gevent.signal_handler(signal.SIGINT, server.stop)
    host, port = server.server.address[0], server.port
    print(f"tokenswarm sim: serving {server.model!r} (profile {server.profile.name}, spec {server.spec.method}"
          f"{'' if not server.spec.enabled else f' k={server.spec.k}'}) on http://{host}:{port}", file=sys.stderr,
          flush=True)
    server.stopped.wait()
    return 0
