"""The truth server's Starlette app: OpenAI-style endpoints, the ground-truth log, self-measurements.

Where the truth is taken, and why there:

* ``received``: when the request's last byte arrived at this server's kernel, on
  ``time.monotonic()`` like the simulator's log: the kernel's receive stamp
  (``SO_TIMESTAMPNS``) of the read that completed the request (:class:`StampingProtocol`
  makes asyncio's socket transport read with ``recvmsg``; nothing else of uvicorn changes).
  A busy event loop reads a socket late, and that wait is the server's: it belongs inside
  the truth's TTFT as it is inside the client's, so the truth counts from the arrival, not
  from the read. ``read_delay_ms`` is that wait (the loop's read minus the arrival).
  ``received_source`` says which clock gave ``received``: ``kernel``, or ``loop`` (uvloop,
  whose C reads drop the stamps: then ``received`` is when uvicorn's protocol was handed the
  bytes, and ``read_delay_ms`` is the kernel's coarse ``TCP_INFO`` count, 4 ms resolution);
* each content event: right after uvicorn's ``send`` returned, i.e. after its
  ``transport.write`` handed the chunked frame to the kernel (or to the transport's buffer
  when the socket was full). Writes are uvicorn's own: one chunked frame per ``data:``
  event, as vLLM's ``StreamingResponse`` of SSE strings produces.

The server also measures its own lateness, so a benchmark can tell a late server from a late
client: ``emission_lag`` (each event's wake-up minus the moment it was due) and ``loop_lag``
(how late a 5 ms timer fires), both at ``GET /_truth/stats``.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import socket
import struct
import sys
import time
import uuid
from collections import deque
from typing import Any, AsyncIterator

import anyio
import numpy as np
import orjson
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route
from starlette.types import Message, Receive, Scope, Send
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from benchmarks.truthserver.plan import BadRequest, Completion, Events, ServerOptions, parse_request, plan_for

monotonic = time.monotonic
#: scope extension through which the protocol hands the app the request's arrival time
STAMP_KEY = "tokenswarm.truth"
FLUSH_EVERY_S = 0.2
LOOP_PROBE_S = 0.005
#: ``struct tcp_info`` (linux/tcp.h): 8 one-byte fields, 9 u32s, then last_data_sent, last_ack_sent, last_data_recv
_LAST_DATA_RECV_OFFSET = 8 + 9 * 4 + 2 * 4
_TCP_INFO_BYTES = 104


def read_delay_ms(sock: Any) -> int | None:
    """How long ago (ms) the kernel received the connection's last data segment, from ``TCP_INFO``.

    ``tcpi_last_data_recv`` counts in jiffies (4 ms at HZ=250), so this is coarse, but it is the
    kernel's own account of how late the server read a request, which no user-space clock gives.
    """
    if sock is None or not hasattr(socket, "TCP_INFO"):
        return None
    try:
        return int(struct.unpack_from("I", sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, _TCP_INFO_BYTES),
                                      _LAST_DATA_RECV_OFFSET)[0])
    except (OSError, struct.error):
        return None


#: ``struct timespec`` of an ``SCM_TIMESTAMPNS`` control message: seconds, nanoseconds
_TIMESPEC = struct.Struct("qq")
_ANC_BYTES = socket.CMSG_SPACE(_TIMESPEC.size)
#: Linux's SO_TIMESTAMPNS (= SCM_TIMESTAMPNS); Python's socket module does not name it
_SO_TIMESTAMPNS = getattr(socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None)


def arrival_s(ancillary: list[tuple[int, int, bytes]], now_mono_s: float, now_real_s: float) -> float | None:
    """The kernel's receive stamp of a read on the monotonic clock, or None without one.

    The stamp is wall-clock time; how long ago it was is the same on both clocks.
    """
    for level, kind, data in ancillary:
        if level == socket.SOL_SOCKET and kind == _SO_TIMESTAMPNS and len(data) >= _TIMESPEC.size:
            sec, nsec = _TIMESPEC.unpack_from(data)
            return now_mono_s - (now_real_s - (sec + nsec * 1e-9))
    return None


def enable_receive_stamps(sock: socket.socket) -> bool:
    """Turn on the kernel's receive stamps for ``sock`` (and, on a listener, what it accepts)."""
    if _SO_TIMESTAMPNS is None:
        return False
    try:
        sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
    except OSError:
        return False
    return True


def stamp_reads(transport: Any, protocol: StampingProtocol) -> bool:
    """Make an asyncio socket transport read with ``recvmsg`` and hand each read's kernel stamp
    to ``protocol`` before its bytes; False (nothing changed) where that is not possible.

    The replacement is asyncio's own ``_read_ready__data_received`` with ``recv`` swapped for
    ``recvmsg`` (same size, same error handling); uvloop's transports have no such hook.
    """
    raw = getattr(transport, "_sock", None)
    if raw is None or not hasattr(transport, "_read_ready_cb") or not enable_receive_stamps(raw):
        return False

    def read_ready() -> None:
        if transport._conn_lost:
            return
        try:
            data, anc, _flags, _addr = raw.recvmsg(transport.max_size, _ANC_BYTES)
        except (BlockingIOError, InterruptedError):
            return
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            transport._fatal_error(exc, "Fatal read error on socket transport")
            return
        if not data:
            transport._read_ready__on_eof()
            return
        protocol.kernel_arrival_s = arrival_s(anc, monotonic(), time.time())
        try:
            protocol.data_received(data)
        except (SystemExit, KeyboardInterrupt):
            raise
        except BaseException as exc:
            transport._fatal_error(exc, "Fatal error: protocol.data_received() call failed.")

    transport._read_ready_cb = read_ready
    return True


class StampingProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol, unchanged except that it notes when each request's last bytes arrived."""

    _data_s = 0.0
    _stamp: dict[str, Any]
    _sock: Any = None
    _kernel = False
    #: the kernel's receive stamp of the latest read (monotonic seconds), set by :func:`stamp_reads`
    kernel_arrival_s: float | None = None

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._sock = transport.get_extra_info("socket")
        self._kernel = stamp_reads(transport, self)

    def data_received(self, data: bytes) -> None:
        self._data_s = monotonic()  # before parsing: the moment the loop handed us the bytes
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        # a dict shared with the app (scope copies made by routing keep the same object)
        self._stamp = {}
        self.scope["extensions"] = {STAMP_KEY: self._stamp}  # type: ignore[typeddict-unknown-key,dict-item]

    def on_message_complete(self) -> None:
        arrived = self.kernel_arrival_s if self._kernel else None
        if arrived is not None:
            self._stamp.update(received_s=arrived, received_source="kernel",
                               read_delay_ms=max(0.0, (self._data_s - arrived) * 1000.0))
        else:
            self._stamp.update(received_s=self._data_s, received_source="loop")
            delay = read_delay_ms(self._sock)
            if delay is not None:
                self._stamp["read_delay_ms"] = delay
        super().on_message_complete()


class TruthLog:
    """JSON lines, one per finished request, written in batches so a request never waits on the disk."""

    def __init__(self, path: str) -> None:
        self.path = path
        self._f = open(path, "ab")
        self._buf: list[bytes] = []

    def add(self, record: dict[str, Any]) -> None:
        self._buf.append(orjson.dumps(record) + b"\n")

    def flush(self) -> None:
        if self._buf and not self._f.closed:
            self._f.write(b"".join(self._buf))
            self._f.flush()
            self._buf.clear()

    def close(self) -> None:
        self.flush()
        self._f.close()


class Lags:
    """The latest lateness samples (seconds), summarised in ms."""

    def __init__(self, keep: int = 200_000) -> None:
        self.samples: deque[float] = deque(maxlen=keep)

    def add(self, lag_s: float) -> None:
        self.samples.append(lag_s)

    def summary(self) -> dict[str, float | int | None]:
        if not self.samples:
            return {"n": 0, "p50_ms": None, "p99_ms": None, "max_ms": None}
        a = np.asarray(self.samples) * 1000.0
        return {"n": len(a), "p50_ms": float(np.quantile(a, 0.5)), "p99_ms": float(np.quantile(a, 0.99)),
                "max_ms": float(a.max())}


class TruthServer:
    """State of one server process: options, truth log, counters and lateness samples."""

    def __init__(self, opts: ServerOptions, truth_path: str | None) -> None:
        self.opts = opts
        self.truth = TruthLog(truth_path) if truth_path else None
        self.requests = 0
        self.emission_lag = Lags()
        self.loop_lag = Lags()
        self.started = int(time.time())

    # -- truth -----------------------------------------------------------------------------
    def record(self, rid: str, endpoint: str, status: int, received: float, req: Completion | None,
               output_tokens: int, finish_reason: str | None, outcome: str, chunks: list[list[float]],
               read_delay: float | None = None, received_source: str | None = None) -> None:
        if self.truth is not None:
            self.truth.add({"id": rid, "endpoint": endpoint, "status": status, "received": received,
                            "received_source": received_source,
                            "prompt_tokens": None if req is None else req.prompt_tokens,
                            "output_tokens": output_tokens, "finish_reason": finish_reason, "outcome": outcome,
                            "chunks": chunks, "read_delay_ms": read_delay})

    async def _flusher(self) -> None:
        while True:
            await asyncio.sleep(FLUSH_EVERY_S)
            if self.truth is not None:
                self.truth.flush()

    async def _loop_probe(self) -> None:
        while True:
            t = monotonic()
            await asyncio.sleep(LOOP_PROBE_S)
            self.loop_lag.add(monotonic() - t - LOOP_PROBE_S)

    @contextlib.asynccontextmanager
    async def lifespan(self, _app: Starlette) -> AsyncIterator[None]:
        async with anyio.create_task_group():  # imports anyio's backend now, not inside the first stream
            pass
        tasks = [asyncio.create_task(self._flusher()), asyncio.create_task(self._loop_probe())]
        try:
            yield
        finally:
            for t in tasks:
                t.cancel()
            if self.truth is not None:
                self.truth.close()

    # -- requests --------------------------------------------------------------------------
    async def complete(self, endpoint: str, scope: Scope, receive: Receive, send: Send) -> None:
        """Serve one completion request (streamed or not) and log its truth."""
        raw = await Request(scope, receive).body()
        stamp = scope.get("extensions", {}).get(STAMP_KEY, {})
        received = stamp.get("received_s") or monotonic()
        read_delay = stamp.get("read_delay_ms")
        source = stamp.get("received_source")
        rid = f"{'chatcmpl' if endpoint == 'chat' else 'cmpl'}-{uuid.uuid4().hex}"
        try:
            try:
                data = orjson.loads(raw)
            except orjson.JSONDecodeError as e:
                raise BadRequest(f"the request body is not valid JSON ({e})") from None
            req = parse_request(data, endpoint, self.opts)
        except BadRequest as e:
            await JSONResponse(e.body(), status_code=400)(scope, receive, send)
            self.record(rid, endpoint, 400, received, None, 0, None, "error", [], read_delay, source)
            return
        rng = random.Random(f"{self.opts.seed}:{self.requests}")
        self.requests += 1
        plan = plan_for(req, self.opts, rng)
        events = Events(rid, req, int(time.time()))
        if not req.stream:
            done_at = received + plan.first_delay_s + (len(plan.chunk_tokens) - 1) * plan.step_s
            while (delay := done_at - monotonic()) > 0:
                await asyncio.sleep(delay)
            await Response(orjson.dumps(events.whole(rid, plan)), media_type="application/json")(scope, receive, send)
            self.record(rid, endpoint, 200, received, req, plan.output_tokens, plan.finish_reason, "ok", [], read_delay, source)
            return

        chunks: list[list[float]] = []  # [written_s, tokens] per content event
        tokens_of_next: deque[int] = deque()  # tokens of each body yielded, in order (0: not content)
        finished = False

        async def timed_send(message: Message) -> None:
            await send(message)
            if message.get("body") and tokens_of_next:
                n = tokens_of_next.popleft()
                if n:
                    chunks.append([monotonic(), n])

        async def body() -> AsyncIterator[bytes]:
            nonlocal finished
            due = received + plan.first_delay_s
            first, last = 0, len(plan.chunk_tokens) - 1
            for i, k in enumerate(plan.chunk_tokens):
                # uvloop's timers count whole ms and may fire up to 1 ms early: sleep until due, never write early
                while (delay := due - monotonic()) > 0:
                    await asyncio.sleep(delay)
                self.emission_lag.add(monotonic() - due)
                if i == 0 and (role := events.role()) is not None:
                    tokens_of_next.append(0)
                    yield role
                tokens_of_next.append(k)
                yield events.content(first, k, plan.finish_reason if i == last else None)
                first += k
                due += plan.step_s
            if (trailer := events.usage_trailer(first)) is not None:
                tokens_of_next.append(0)
                yield trailer
            tokens_of_next.append(0)
            yield events.done()
            finished = True

        try:
            await StreamingResponse(body(), media_type="text/event-stream")(scope, receive, timed_send)
        finally:
            self.record(rid, endpoint, 200, received, req, sum(int(c[1]) for c in chunks),
                        plan.finish_reason if finished else None, "ok" if finished else "aborted", chunks, read_delay, source)

    # -- small endpoints --------------------------------------------------------------------
    async def models(self, _request: Request) -> JSONResponse:
        return JSONResponse({"object": "list", "data": [{"id": self.opts.model, "object": "model",
                                                         "created": self.started, "owned_by": "tokenswarm-truth"}]})

    async def stats(self, request: Request) -> JSONResponse:
        out = {"requests": self.requests, "emission_lag": self.emission_lag.summary(),
               "loop_lag": self.loop_lag.summary()}
        if request.query_params.get("reset"):
            self.emission_lag, self.loop_lag = Lags(), Lags()
        return JSONResponse(out)

    async def flush(self, _request: Request) -> Response:
        if self.truth is not None:
            self.truth.flush()
        return Response(status_code=204)


class _Endpoint:
    """A raw ASGI endpoint (Starlette routes to it as an app), so the app can wrap ``send``."""

    def __init__(self, server: TruthServer, endpoint: str) -> None:
        self.server, self.endpoint = server, endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.server.complete(self.endpoint, scope, receive, send)


async def _health(_request: Request) -> Response:
    return Response(status_code=200)


def build_app(server: TruthServer) -> Starlette:
    """The Starlette app serving ``server``."""
    return Starlette(routes=[
        Route("/v1/chat/completions", _Endpoint(server, "chat"), methods=["POST"]),
        Route("/v1/completions", _Endpoint(server, "completions"), methods=["POST"]),
        Route("/v1/models", server.models, methods=["GET"]),
        Route("/health", _health, methods=["GET"]),
        Route("/_truth/stats", server.stats, methods=["GET"]),
        Route("/_truth/flush", server.flush, methods=["POST"]),
    ], lifespan=server.lifespan)
