"""A scripted in-memory transport (:class:`tokenswarm.wire.transport.Transport`) for client tests.

Every reply is a :class:`Reply`: the status, when the headers come, the body's deliveries at
given times (the SSE bytes of one read each, already de-chunked) and how the body ends
(complete, cut, closed by the server, or a stall). Times are seconds after the request's send
on an injected :class:`ScriptedClock`, which the transport advances as the script plays; the
request's deadlines (first token, total) are armed on that clock and fire when the script would
pass them -- raised into the client exactly where gevent's ``Timeout`` would be, at the wait.
Nothing sleeps and no socket is opened, so a test of stream handling, error mapping or record
building runs in microseconds and its times are exact.

:func:`server_reply` plays the scripts of ``scripted_server.py`` (the same bytes), so a test moved
from the socket server keeps asserting the same behaviour.

Why here and not in ``tokenswarm.wire``: dry runs of the product already have the simulator
(``tokenswarm.sim``), which serves over real HTTP and so exercises the production transport;
an in-memory transport in the package would be a second, unused way to do that.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Callable

import gevent.event

from tests.helpers import scripted_server
from tokenswarm.wire.send import RequestTiming
from tokenswarm.wire.sse import SSEParser

#: A delivery's data that blocks the stream until the greenlet is killed (a test's "kill here").
BLOCK = object()


class ScriptedClock:
    """A clock that reads what the script set; it never moves on its own."""

    def __init__(self, now_s: float = 100.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


@dataclass
class Reply:
    """One scripted response. Times are seconds after the request's send began."""

    status: int = 200
    #: when the request's last byte left (``sent_at_s``), and when its headers came
    sent_after_s: float = 0.0
    headers_at_s: float = 0.001
    #: (arrival time, the bytes of one read): each is one delivery; ``BLOCK`` blocks until killed
    deliveries: Iterable[tuple[float, Any]] = ()
    #: how the body ends: "complete", "cut" (the connection broke), "close" (the server closed a
    #: close-delimited body) or "stall" (nothing more, ever: only a deadline ends it)
    end: str = "complete"
    end_at_s: float | None = None
    #: the whole body of an error or a non-streamed answer, and when it has arrived
    body: bytes = b""
    body_at_s: float | None = None
    #: raised by the send instead of a response (``ConnectionRefusedError()``...)
    send_error: BaseException | None = None
    #: a new connection's connect (``connect_ms``), else a kept-alive one
    connect_s: float | None = None


class _Deadline:
    """One armed deadline on the scripted clock (what ``gevent.Timeout`` is in production)."""

    def __init__(self, transport: ScriptedTransport, seconds: float, exc: BaseException) -> None:
        self.transport, self.seconds, self.exc = transport, seconds, exc
        self.at_s: float | None = None

    def start(self) -> None:
        self.at_s = self.transport.clock.now_s + self.seconds
        self.transport.armed.append(self)

    def cancel(self) -> None:
        if self in self.transport.armed:
            self.transport.armed.remove(self)


class ScriptedResponse:
    """The response of one :class:`Reply` (what the client reads of a response)."""

    def __init__(self, transport: ScriptedTransport, reply: Reply, t0: float) -> None:
        self.transport, self.reply, self.t0 = transport, reply, t0
        self.status_code = reply.status
        self.message_complete = False

    def read(self, length: int = -1) -> bytes:
        reply = self.reply
        self.transport.advance(self.t0 + (reply.body_at_s if reply.body_at_s is not None else reply.headers_at_s))
        self.message_complete = length < 0 or len(reply.body) <= length  # else: left halfway
        return reply.body if length < 0 else reply.body[:length]


class ScriptedDeliveries:
    """Plays a reply's deliveries into ``on_events`` through the client's parser."""

    def __init__(self, transport: ScriptedTransport, response: ScriptedResponse, parser: SSEParser,
                 on_events: Callable[[float, list[Any]], bool]) -> None:
        self.transport, self.response, self.parser, self.on_events = transport, response, parser, on_events
        self.steady: Callable[[float, list[Any]], Any] | None = None

    def go_steady(self, steady: Callable[[float, list[Any]], Any]) -> None:
        self.steady = steady

    def run(self) -> bool:
        transport, response, clock = self.transport, self.response, self.transport.clock
        reply, t0 = response.reply, response.t0
        for at_s, data in reply.deliveries:
            transport.advance(t0 + at_s)
            if data is BLOCK:
                transport.blocked.set()
                gevent.event.Event().wait()  # until the greenlet is killed
            events = self.parser.feed(data)
            if not events:
                continue
            if self.steady is not None:
                self.steady(clock.now_s, events)
            elif self.on_events(clock.now_s, events):
                return True
        if reply.end == "stall":
            transport.advance(math.inf)
        if reply.end_at_s is not None:
            transport.advance(t0 + reply.end_at_s)
        if reply.end == "cut":
            raise ConnectionError("connection closed mid-stream")  # what the production readers raise
        response.message_complete = reply.end == "complete"
        return False


@dataclass
class ScriptedTransport:
    """Answers each request with the next :class:`Reply` (the last one repeats)."""

    replies: list[Reply]
    clock: ScriptedClock = field(default_factory=ScriptedClock)
    armed: list[_Deadline] = field(default_factory=list)
    #: what was sent: (path, body, headers) per request
    requests: list[tuple[str, bytes, dict[str, str]]] = field(default_factory=list)
    discarded: int = 0  # responses whose connection was closed, not kept
    settled: int = 0  # requests whose I/O ended
    hooked_reads: list[bool] = field(default_factory=list)  # body_reader's ``hooked``, per stream
    blocked: gevent.event.Event = field(default_factory=gevent.event.Event)  # a BLOCK was reached

    def timeout(self, seconds: float, exc: BaseException) -> _Deadline:
        return _Deadline(self, seconds, exc)

    def advance(self, to_s: float) -> None:
        """Move the clock to ``to_s``; a deadline armed before it fires at its own time, raised here."""
        due = [d for d in self.armed if d.at_s is not None and d.at_s <= to_s]
        if due:
            first = min(due, key=lambda d: d.at_s or 0.0)
            self.armed.remove(first)
            self.clock.now_s = max(self.clock.now_s, first.at_s or 0.0)
            raise first.exc
        if to_s == math.inf:
            raise AssertionError("the script stalls with no deadline armed: the call would never end")
        self.clock.now_s = max(self.clock.now_s, to_s)

    def send(self, path: str, body: bytes, headers: dict[str, str], timing: RequestTiming) -> ScriptedResponse:
        self.requests.append((path, body, headers))
        reply = self.replies[min(len(self.requests), len(self.replies)) - 1]
        t0 = self.clock.now_s
        timing.reused = reply.connect_s is None
        if reply.connect_s is not None:
            timing.connect_start_s = t0
            self.advance(t0 + reply.connect_s)
            timing.connect_end_s = self.clock.now_s
        if reply.send_error is not None:
            raise reply.send_error
        self.advance(t0 + max(reply.sent_after_s, reply.connect_s or 0.0))
        timing.sent_s = self.clock.now_s
        self.advance(t0 + reply.headers_at_s)
        timing.headers_s = self.clock.now_s
        return ScriptedResponse(self, reply, t0)

    def body_reader(self, response: ScriptedResponse, parser: SSEParser,
                    on_events: Callable[[float, list[Any]], bool], *, hooked: bool) -> ScriptedDeliveries:
        self.hooked_reads.append(hooked)
        return ScriptedDeliveries(self, response, parser, on_events)

    def discard(self, response: ScriptedResponse) -> None:
        self.discarded += 1

    def settle(self) -> None:
        self.settled += 1


#: The bytes of one read of a flooding stream (the production readers' recv size).
FLOOD_READ_BYTES = 65536


def _reads_of(writes: Iterable[bytes], size: int) -> Iterable[bytes]:
    """Consecutive writes joined into reads of about ``size`` bytes (whole writes each)."""
    pending: list[bytes] = []
    n = 0
    for w in writes:
        pending.append(w)
        n += len(w)
        if n >= size:
            yield b"".join(pending)
            pending, n = [], 0
    if pending:
        yield b"".join(pending)


def sse(*payloads: bytes | str) -> bytes:
    """SSE ``data:`` events of the given payloads, in one read."""
    return b"".join(b"data: " + (p.encode() if isinstance(p, str) else p) + b"\n\n" for p in payloads)


def server_reply(script: str, n: int = 5, gap_ms: float = 5.0, per_chunk: int = 1, **query: str) -> Reply:
    """The reply ``scripted_server.py`` gives to ``/<script>/...?n=&gap_ms=&per_chunk=&<query>``:
    its bytes, one delivery per write, content events ``gap_ms`` apart; ``http_<code>`` scripts
    give its error body. Its deliveries are played once: one reply per request."""
    if script.startswith("http_"):
        code = int(script[5:])
        body = scripted_server.json.dumps({"error": {"message": f"scripted {code}",
                                                     "type": "RateLimitError" if code == 429 else "ServerError",
                                                     "code": code}}).encode()
        return Reply(status=code, body=body)
    if script in ("usage_value", "cum_values"):
        items: Iterable[Any] = scripted_server.usage_events(script, n, query)
    elif script == "flood":  # read as the socket hands it over: ~64 KiB per read, 5 ms apart (13 MB/s)
        items, gap_ms = _reads_of(scripted_server.flood_events(), FLOOD_READ_BYTES), 5.0
    else:
        items = scripted_server.script_events(script, n, per_chunk)
    end = {"CUT": "cut", "STALL": "stall"}
    reply = Reply()

    def deliveries() -> Iterable[tuple[float, Any]]:
        t = reply.headers_at_s
        for item in items:
            if isinstance(item, str):
                reply.end = end[item]
                return
            if isinstance(item, float):
                t += item
                continue
            yield t, item
            if gap_ms and item.startswith(b"data: {") and b'"content": "' in item:
                t += gap_ms / 1000.0

    reply.deliveries = deliveries()
    return reply
