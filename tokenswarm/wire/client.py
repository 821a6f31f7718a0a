"""The streaming client: one OpenAI-compatible call in, one :class:`RequestRecord` out.

The client talks to the network through one seam, a :class:`~tokenswarm.wire.transport.Transport`
(send, the response's status and body, its timed deliveries, deadlines on the transport's clock):
in production a :class:`~tokenswarm.wire.transport.PoolTransport` over the user's
geventhttpclient connection, in tests a scripted in-memory one. What follows describes the
production transport.

Why not ``FastHttpSession.iter_lines()``: geventhttpclient's ``read(n)`` waits until ``n``
bytes are buffered, so SSE events arrive in 1-4 KiB batches and token timings are falsified
(measured: TTFT 612 ms instead of 205 ms, most gaps 0 ms). Instead we take the user's
geventhttpclient connection (FastHttpUser's pool, timeouts and TLS settings), and read
*whatever the socket has* with one read, split the SSE lines in bulk and take ONE timestamp
per read: the kernel's receive stamp where there is one (plain TCP on Linux, see
:mod:`tokenswarm.wire.reader` and :mod:`tokenswarm.wire.pool`), else the time the read
returned, before any parsing. Events that came in one read share that timestamp. The body
is read through :class:`tokenswarm.wire.timing.BodyReader` (its module lists where
every time is taken): plain-TCP streams without per-chunk hooks from the event loop, TLS and
hooked streams by this greenlet.

The request's phases are timed apart (:func:`tokenswarm.wire.send.send_request`): a new
connection's ``connect_ms``, ``sent_at_s`` when the request's last byte was handed to the
kernel (TTFT and every chunk offset count from it), ``headers_ms``, and ``schedule_lag_ms``
and ``send_delay_ms`` from the same ``sent`` reading (see :func:`phase_fields`).

Deadlines: ``connect`` is the pool's connection timeout; ``first_token`` and ``total`` are
the transport's timeouts around the call (gevent's, in production). A timeout still yields a
record (``outcome: timeout``) with the tokens received so far. A user killed mid-stream (end of run) yields a
``cancelled`` record before the kill propagates.
"""

from __future__ import annotations

from typing import Any, Callable

import orjson
from gevent import GreenletExit

from tokenswarm.record import Outcome, RecordIdentity, RequestRecord
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.limits import DEFAULT_LIMITS, StreamLimits
from tokenswarm.wire.reported import error_from_body
from tokenswarm.wire.send import RequestTiming
from tokenswarm.wire.sse import SSEParser
from tokenswarm.wire.stream import StreamLimitExceeded, StreamState
from tokenswarm.wire.transport import Deadline, Deliveries, Response, Transport

__all__ = ["StreamHooks", "phase_fields", "stream_call"]

ERROR_BODY_LIMIT = 65536


class _Deadline(Exception):
    """Raised by a transport's timeout; ``kind`` says which deadline passed."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


class StreamHooks:
    """Callbacks the client calls while a stream progresses (wired to Locust events)."""

    __slots__ = ("on_first_token", "on_chunks")

    def __init__(
        self,
        on_first_token: Callable[[dict[str, Any], float], None] | None = None,
        on_chunks: Callable[[dict[str, Any], float, int], None] | None = None,
    ) -> None:
        self.on_first_token = on_first_token
        self.on_chunks = on_chunks


def _fields(identity: RecordIdentity, timing: RequestTiming, start_s: float, due_s: float) -> dict[str, Any]:
    """The identity's record fields with the phase fields measured so far (:func:`phase_fields`)."""
    fields = identity.record_fields()
    fields.update(phase_fields(timing, start_s, due_s))
    return fields


def stream_call(
    transport: Transport,
    path: str,
    body: bytes,
    headers: dict[str, str],
    *,
    identity: RecordIdentity,
    anchor: WallAnchor,
    first_token_timeout_s: float,
    total_timeout_s: float,
    keep_output: bool = False,
    stream: bool = True,
    hooks: StreamHooks | None = None,
    on_cancel: Callable[[RequestRecord, str], object] | None = None,
    cancel_after_first_token: bool = False,
    scheduled_s: float | None = None,
    limits: StreamLimits = DEFAULT_LIMITS,
) -> tuple[RequestRecord, str]:
    """POST ``body`` to ``path`` through ``transport`` and observe the answer. Returns
    ``(record, output_text)``.

    ``identity`` carries the record's identity fields (run_id, seq, task, scheduled_at_s...);
    ``scheduled_s`` is the transport clock's reading of when the request was due (default: the
    identity's ``scheduled_at_s`` through ``anchor``); ``limits`` bound what the response may carry
    (a stream past them is cut as a ``stream_error``). Never raises for target misbehaviour. When
    the calling greenlet is killed (end of run) the ``cancelled`` record goes to
    ``on_cancel`` and ``GreenletExit`` propagates.
    """
    clock = transport.clock
    timing = RequestTiming(clock)
    start = clock()  # the attempt began: the record's times count from here until sent
    due = anchor.mono(identity.scheduled_at_s) if scheduled_s is None else scheduled_s
    state = StreamState(start, limits)
    status: int | None = None
    resp: Response | None = None
    total = transport.timeout(total_timeout_s, _Deadline("total"))
    first = transport.timeout(min(first_token_timeout_s, total_timeout_s), _Deadline("first_token"))
    total.start()
    first.start()
    outcome: Outcome | None = None
    error: str | None = None
    try:
        resp = transport.send(path, body, headers, timing)
        if timing.sent_s is not None:
            state.sent_s = timing.sent_s
        status = resp.status_code
        if status >= 300:
            outcome, error = Outcome.HTTP_ERROR, error_from_body(status, _read_error_body(transport, resp))
        elif not stream:
            outcome, error = _read_json_body(resp, state, first, clock)
        else:
            outcome, error = _read_stream(transport, resp, state, first, hooks, identity, timing, start,
                                          due, cancel_after_first_token)
    except GreenletExit:
        if resp is not None:
            transport.discard(resp)
        first.cancel()
        total.cancel()
        state.sent_s = start if timing.sent_s is None else timing.sent_s  # sent, even if the headers never came
        record = state.finish(clock(), outcome=Outcome.CANCELLED, http_status=status, error="cancelled by generator",
                              anchor=anchor, base=phase_fields(timing, start, due), identity=identity,
                              keep_output=keep_output)
        if on_cancel is not None:
            on_cancel(record, state.text())
        raise
    except Exception as exc:  # the target's misbehaviour, a deadline, a cut: a record with an outcome
        outcome, error = _failure(exc, status)
        if resp is not None:
            transport.discard(resp)
    finally:
        first.cancel()
        total.cancel()
    end = clock()
    transport.settle()
    state.sent_s = start if timing.sent_s is None else timing.sent_s  # sent, even if the headers never came
    record = state.finish(end, outcome=outcome, http_status=status, error=error, anchor=anchor,
                          base=phase_fields(timing, start, due), identity=identity, keep_output=keep_output)
    return record, state.text()


def _read_stream(transport: Transport, resp: Response, state: StreamState, first: Deadline,
                 hooks: StreamHooks | None, identity: RecordIdentity, timing: RequestTiming,
                 start_s: float, due_s: float, cancel_after_first_token: bool) -> tuple[Outcome | None, str | None]:
    """Read a streamed body's deliveries into ``state``; the outcome it decided, if any."""
    outcome: Outcome | None = None
    error: str | None = None
    clock = transport.clock
    sent = state.sent_s
    parser = SSEParser()
    on_first = hooks.on_first_token if hooks else None
    on_chunks = hooks.on_chunks if hooks else None
    deliveries: Deliveries | None = None
    # what the hooks are handed: the identity with the phase fields measured so far (the
    # schedule lag from the send's own reading), made once, at the first token
    hooked: dict[str, Any] = {}

    def on_events(now: float, events: list[Any]) -> bool:
        """The events of one delivery, all arrived at ``now``; True = stop reading."""
        nonlocal outcome, error
        had_first = bool(state.times)
        added = state.on_events(now, events)
        if added:
            if not had_first:
                first.cancel()
                if on_first is not None or on_chunks is not None:
                    hooked.update(_fields(identity, timing, start_s, due_s))
                if on_first is not None:
                    on_first(hooked, (now - sent) * 1000.0)
                if cancel_after_first_token:  # a client that goes away mid-answer
                    outcome, error = Outcome.CANCELLED, "client disconnected after first token"
                    return True
                if deliveries is not None and on_chunks is None:
                    deliveries.go_steady(state.on_events)  # nothing left to decide per delivery
            if on_chunks is not None:
                on_chunks(hooked, (now - sent) * 1000.0, added)
        return False

    deliveries = transport.body_reader(resp, parser, on_events, hooked=hooks is not None)
    try:
        stopped = deliveries.run()
    finally:
        deliveries = None  # the reader and on_events refer to each other
    if not stopped:
        now = clock()  # end of body: flush an unterminated last event
        events = parser.close()
        if events:
            on_events(now, events)
    if not resp.message_complete:
        transport.discard(resp)
    return outcome, error


def _read_json_body(resp: Response, state: StreamState, first: Deadline,
                    clock: Callable[[], float]) -> tuple[Outcome | None, str | None]:
    """A non-streamed answer: the whole body is one delivery."""
    raw = resp.read()
    now = clock()
    first.cancel()
    try:
        state.on_json_body(now, orjson.loads(raw))
    except (orjson.JSONDecodeError, AttributeError):
        return Outcome.STREAM_ERROR, "malformed JSON body"
    return None, None


def _failure(exc: Exception, status: int | None) -> tuple[Outcome, str]:
    """The outcome and error of a request that ended in ``exc`` (``status``: the response's, if
    its headers came)."""
    if isinstance(exc, _Deadline):
        return Outcome.TIMEOUT, f"{exc.kind} timeout"
    if isinstance(exc, StreamLimitExceeded):  # more than the request could carry: cut, what came is kept
        return Outcome.STREAM_ERROR, str(exc)
    outcome = Outcome.HTTP_ERROR if status is None else Outcome.STREAM_ERROR
    if isinstance(exc, (ConnectionError, OSError)):
        return outcome, _conn_error_text(exc, status is None)
    # parser errors from the HTTP library, bad chunk framing...
    return outcome, f"{type(exc).__name__}: {str(exc)[:120]}"


def phase_fields(timing: RequestTiming, start_s: float, due_s: float) -> dict[str, Any]:
    """The record's phase fields from ``timing``'s readings (``start_s``: the attempt began,
    standing in for ``sent`` when nothing was sent; ``due_s``: when the request was due).

    ``schedule_lag_ms`` comes from the same ``sent`` reading as ``sent_at_s``; ``send_delay_ms``
    is the part of it that was not connecting: the generator's own delay.
    """
    sent = timing.sent_s
    lag_s = (start_s if sent is None else sent) - due_s
    c0, c1 = timing.connect_start_s, timing.connect_end_s
    connect_s = c1 - c0 if c0 is not None and c1 is not None else None
    headers = timing.headers_s
    return {
        "schedule_lag_ms": round(lag_s * 1000.0, 3),
        "conn_reused": timing.reused,
        "connect_ms": None if connect_s is None else round(connect_s * 1000.0, 3),
        "send_delay_ms": None if sent is None else round((lag_s - (connect_s or 0.0)) * 1000.0, 3),
        "headers_ms": None if headers is None or sent is None else round((headers - sent) * 1000.0, 3),
    }


def _read_error_body(transport: Transport, resp: Response) -> bytes:
    try:
        content: bytes = resp.read(ERROR_BODY_LIMIT)
    except Exception:
        content = b""
    if not resp.message_complete:
        transport.discard(resp)
    return content


def _conn_error_text(exc: BaseException, before_response: bool) -> str:
    name = type(exc).__name__
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if before_response:
        return f"connection failed: {name}"
    return "connection closed mid-stream" if "closed" in str(exc) else f"stream broken: {name}"
