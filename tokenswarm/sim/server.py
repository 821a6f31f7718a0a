"""The simulator's HTTP/1.1 server on gevent: one engine greenlet, one greenlet per connection.

The engine greenlet sleeps until the model's next step deadline (absolute times), asks the
:class:`~tokenswarm.sim.engine.Scheduler` for the emissions due, and writes each chunk
straight to the client's socket with a non-blocking ``send`` (no greenlet switch per chunk).
Only when a socket's kernel buffer is full does the rest go to a backlog that the
connection's own greenlet drains cooperatively. The time taken immediately before the
write is the chunk's send time (truth log) and ``send - scheduled`` is the emission lag.
"""

from __future__ import annotations

import base64
import contextlib
import gc
import hmac
import os
import signal
import socket
import sys
import time
import traceback
from typing import Any
from urllib.parse import parse_qs, urlsplit

import gevent
import gevent.event
import orjson
from gevent.server import StreamServer

from tokenswarm.sim import api
from tokenswarm.sim.api import HttpError
from tokenswarm.sim.engine import Scheduler, SpecConfig
from tokenswarm.sim.faults import FaultConfig
from tokenswarm.sim.gpu import GpuModel
from tokenswarm.sim.http import SERVER_HEADER, BadRequest, Conn, error_response, read_request, respond
from tokenswarm.sim.prefixcache import PrefixCache
from tokenswarm.sim.profiles import Profile
from tokenswarm.sim.sequence import Sequence
from tokenswarm.sim.simmetrics import SimMetrics, render
from tokenswarm.sim.streaming import Stream
from tokenswarm.sim.truth import TruthLog
from tokenswarm.wire import kstamp

monotonic = time.monotonic


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
        """One connection's greenlet: read requests and answer them until the client or the server is done."""
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except OSError:
            pass
        conn = Conn(sock)
        buf = bytearray()
        try:
            while not self.stopping:
                try:
                    req = read_request(conn, buf)
                except BadRequest as e:
                    error_response(conn, e.status, str(e))
                    return
                if req is None:
                    return
                keep = self._dispatch(conn, req.method, req.target, req.body, req.keep, req.headers)
                if not keep or conn.closed:
                    return
        except OSError:
            return
        finally:
            with contextlib.suppress(OSError):
                sock.close()

    def _respond(self, conn: Conn, status: int, body: bytes, keep: bool, ctype: bytes = b"application/json",
                 extra: bytes = b"") -> None:
        respond(conn, status, body, keep, ctype, extra)

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
                self._respond(conn, 200, api.models_body(self.model, self.adapters, self.started, self.profile.max_model_len), keep)
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
                self._respond(conn, 200, api.tokenize_body(body, self.model, self.adapters, self.profile.max_model_len), keep)
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
        """One completion request: a fault, a refusal, or a stream the engine feeds; whether the connection stays."""
        # Truth "received" = when the bytes completing the request were read, not after parsing.
        received = conn.recv_s if conn.recv_s is not None else monotonic()
        index = self.request_index
        self.request_index += 1
        rid = ("chatcmpl-" if endpoint == "chat" else "cmpl-") + f"{self._rid_prefix}{index:010x}"
        status = self.faults.http_fault(index)
        if status is not None:
            self._http_fault(conn, status, keep)
            self.truth_record(rid, endpoint, status, received, None, 0, None, "error", [])
            return keep
        try:
            req = api.parse_completion(api.parse_json_object(body), endpoint, self.model, self.profile.max_model_len,
                                       self.adapters)
        except HttpError as e:
            self._respond(conn, e.status, e.body(), keep)
            self.truth_record(rid, endpoint, e.status, received, None, 0, None, "error", [])
            return keep
        stream = self._submit(conn, req, rid, received, index, keep)
        if not self._await_stream(conn, stream):
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
            assert stream.seq is not None
            stream.finish("fault_stall" if stream.seq.stalled else "ok")
        return keep and not conn.closed

    def _http_fault(self, conn: Conn, status: int, keep: bool) -> None:
        """An injected HTTP error, worded as a server under that trouble would."""
        self.metrics.fault(f"http_{status}")
        msg = {500: "Simulated internal server error", 503: "Simulated overload: service unavailable",
               429: "Simulated rate limit: too many requests"}[status]
        self._respond(conn, status, api.error_body(status, self._with_headers(msg)), keep,
                      extra=b"retry-after: 1\r\n" if status in (429, 503) else b"")

    def _submit(self, conn: Conn, req: api.CompletionRequest, rid: str, received: float, index: int,
                keep: bool) -> Stream:
        """The request's stream and sequence, handed to the engine (a streaming response's head sent first)."""
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
            conn.sock.sendall(b"HTTP/1.1 200 OK\r\n" + SERVER_HEADER + b"content-type: text/event-stream; charset=utf-8\r\n"
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
        return stream

    def _await_stream(self, conn: Conn, stream: Stream) -> bool:
        """Wait for the engine to finish the request, draining any write backlog meanwhile; False
        when the client went away first (the request is aborted)."""
        while True:
            conn.wake.clear()
            if conn.backlog:
                conn.drain()
            if (stream.done or stream.complete) and not conn.backlog:
                return True
            conn.wake.wait()  # set by emissions, backlog, the end of the request or the reaper
            if conn.closed and not stream.done:
                assert stream.seq is not None
                self.sched.abort(stream.seq)
                stream.finish("aborted")
                return False


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
