"""The streaming client: one OpenAI-compatible call in, one :class:`RequestRecord` out.

Why not ``FastHttpSession.iter_lines()``: geventhttpclient's ``read(n)`` waits until ``n``
bytes are buffered, so SSE events arrive in 1-4 KiB batches and token timings are falsified
(measured: TTFT 612 ms instead of 205 ms, most gaps 0 ms). Instead we take the user's
geventhttpclient connection (FastHttpUser's pool, timeouts and TLS settings), and read
*whatever the socket has* with one read, split the SSE lines in bulk and take ONE timestamp
per read: the kernel's receive stamp where there is one (plain TCP on Linux, see
:mod:`tokenswarm.wire.reader` and :mod:`tokenswarm.wire.pool`), else the time the read
returned, before any parsing. Events that came in one read share that timestamp. The body
is read through one seam, :class:`tokenswarm.wire.timing.BodyReader` (its module lists where
every time is taken): plain-TCP streams without per-chunk hooks from the event loop, TLS and
hooked streams by this greenlet.

The request's phases are timed apart (:func:`tokenswarm.wire.pool.send_request`): a new
connection's ``connect_ms``, ``sent_at_s`` when the request's last byte was handed to the
kernel (TTFT and every chunk offset count from it), ``headers_ms``, and ``schedule_lag_ms``
and ``send_delay_ms`` from the same ``sent`` reading (see :func:`phase_fields`).

Deadlines: ``connect`` is the pool's connection timeout; ``first_token`` and ``total`` are
gevent timeouts around the call. A timeout still yields a record (``outcome: timeout``)
with the tokens received so far. A user killed mid-stream (end of run) yields a
``cancelled`` record before the kill propagates.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable, Iterable, Protocol

import gevent
import orjson
from gevent import GreenletExit

from tokenswarm.record import Outcome, RequestRecord
from tokenswarm.wire import pool
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.pool import RequestTiming, send_request
from tokenswarm.wire.reader import stream_poller
from tokenswarm.wire.sse import SSEParser
from tokenswarm.wire.stream import DEFAULT_LIMITS, StreamLimitExceeded, StreamLimits, StreamState, error_from_body
from tokenswarm.wire.timing import BodyReader, read_available  # noqa: F401  (read_available: public here too)

RECV_BYTES = 65536
ERROR_BODY_LIMIT = 65536
#: Read plain-TCP streams from an event-loop callback (see reader.py); TOKENSWARM_READER=greenlet
#: selects the simpler one-recv-per-wake-up loop (kept for comparison and for TLS/hooks).
USE_HUB_READER = os.environ.get("TOKENSWARM_READER", "hub") != "greenlet"


class _Deadline(Exception):
    """Raised by a gevent.Timeout; ``kind`` says which deadline passed."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def discard_connection(resp: Any) -> None:
    """Close (never reuse) the socket of a response we stopped reading halfway."""
    pool, sock = getattr(resp, "_pool", None), getattr(resp, "_sock", None)
    resp._sock = None
    resp._pool = None
    if sock is not None:
        if pool is not None:
            pool.release_socket(sock)  # closes it and frees the pool slot
        else:
            sock.close()


class IdentityFields(Protocol):
    """What the client reads of a request's identity: a :class:`~tokenswarm.record.RecordIdentity`
    (the generator's) or a plain mapping of the same names (tests, tools): its field names and
    values, spread into the record with the fields the client measured."""

    def keys(self) -> Iterable[str]: ...

    def __getitem__(self, name: str) -> Any: ...


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


def stream_call(
    http_client: Any,
    path: str,
    body: bytes,
    headers: dict[str, str],
    *,
    base: IdentityFields,
    anchor: WallAnchor,
    first_token_timeout_s: float,
    total_timeout_s: float,
    keep_output: bool = False,
    stream: bool = True,
    hooks: StreamHooks | None = None,
    on_cancel: Callable[[RequestRecord, str], object] | None = None,
    cancel_after_first_token: bool = False,
    clock: Callable[[], float] = time.perf_counter,
    scheduled_s: float | None = None,
    limits: StreamLimits = DEFAULT_LIMITS,
) -> tuple[RequestRecord, str]:
    """POST ``body`` to ``path`` and observe the answer. Returns ``(record, output_text)``.

    ``base`` carries the record's identity fields (run_id, seq, task, scheduled_at_s...);
    ``scheduled_s`` is the ``clock`` reading of when the request was due (default: the
    base's ``scheduled_at_s`` through ``anchor``); ``limits`` bound what the response may carry
    (a stream past them is cut as a ``stream_error``). Never raises for target misbehaviour. When
    the calling greenlet is killed (end of run) the ``cancelled`` record goes to
    ``on_cancel`` and ``GreenletExit`` propagates.
    """
    poller = stream_poller(clock) if USE_HUB_READER else None
    if poller is not None:
        poller.sweep_if_due()  # between greenlets: see StreamPoller.sweep_if_due
    # Its sweeps note arrivals while a late header read waits (they need kernel stamps).
    pool.arrival_poller = poller if poller is not None and poller.kernel_stamps else None
    due = anchor.mono(base["scheduled_at_s"]) if scheduled_s is None else scheduled_s
    timing = RequestTiming(clock)
    start = clock()  # the attempt began: the record's times count from here until sent
    sent = start
    state = StreamState(start, limits)
    status: int | None = None
    resp = None
    total = gevent.Timeout(total_timeout_s, _Deadline("total"))
    first = gevent.Timeout(min(first_token_timeout_s, total_timeout_s), _Deadline("first_token"))
    total.start()
    first.start()
    outcome: Outcome | None = None
    error: str | None = None
    try:
        resp = send_request(http_client, path, body, headers, timing)
        if timing.sent_s is not None:
            sent = state.sent_s = timing.sent_s
        status = resp.status_code
        if status >= 300:
            raw = _read_error_body(resp)
            outcome, error = Outcome.HTTP_ERROR, error_from_body(status, raw)
        elif not stream:
            raw = resp.read()
            now = clock()
            first.cancel()
            try:
                state.on_json_body(now, orjson.loads(raw))
            except (orjson.JSONDecodeError, AttributeError):
                outcome, error = Outcome.STREAM_ERROR, "malformed JSON body"
        else:
            parser = SSEParser()
            on_first = hooks.on_first_token if hooks else None
            on_chunks = hooks.on_chunks if hooks else None

            body_reader: BodyReader | None = None
            # what the hooks are handed: the identity with the phase fields measured so far (the
            # schedule lag from the send's own reading), made once, at the first token
            hooked: dict[str, Any] = {}

            def on_events(now: float, events: list[Any]) -> bool:
                """The events of one read, all arrived at ``now``; True = stop reading."""
                nonlocal outcome, error
                had_first = bool(state.times)
                added = state.on_events(now, events)
                if added:
                    if not had_first:
                        first.cancel()
                        if on_first is not None or on_chunks is not None:
                            hooked.update(base, **phase_fields(timing, start, due))
                        if on_first is not None:
                            on_first(hooked, (now - sent) * 1000.0)
                        if cancel_after_first_token:  # a client that goes away mid-answer
                            outcome, error = Outcome.CANCELLED, "client disconnected after first token"
                            return True
                        if body_reader is not None and on_chunks is None:
                            body_reader.go_steady(state.on_events)  # nothing left to decide per read
                    if on_chunks is not None:
                        on_chunks(hooked, (now - sent) * 1000.0, added)
                return False

            def process(now: float, data: bytes) -> bool:
                """Parse one read's bytes (b"" = end of body); True = stop reading."""
                events = parser.feed(data) if data else parser.close()
                return on_events(now, events) if events else False

            # Hooked streams are read by this greenlet: the hooks may block or switch.
            body_reader = BodyReader(resp, clock, parser, on_events, hub=hooks is None and USE_HUB_READER)
            try:
                stopped = body_reader.run()
            finally:
                body_reader = None  # the reader and on_events refer to each other
            if not stopped:
                process(clock(), b"")  # end of body: flush an unterminated last event
            if not resp.message_complete:
                discard_connection(resp)
    except _Deadline as exc:
        outcome, error = Outcome.TIMEOUT, f"{exc.kind} timeout"
        if resp is not None:
            discard_connection(resp)
    except GreenletExit:
        if resp is not None:
            discard_connection(resp)
        first.cancel()
        total.cancel()
        state.sent_s = start if timing.sent_s is None else timing.sent_s  # sent, even if the headers never came
        record = state.finish(
            clock(), outcome=Outcome.CANCELLED, http_status=status, error="cancelled by generator",
            anchor=anchor, base={**base, **phase_fields(timing, start, due)}, keep_output=keep_output,
        )
        if on_cancel is not None:
            on_cancel(record, state.text())
        raise
    except StreamLimitExceeded as exc:  # more than the request could carry: cut, what came is kept
        outcome, error = Outcome.STREAM_ERROR, str(exc)
        if resp is not None:
            discard_connection(resp)
    except (ConnectionError, OSError) as exc:
        outcome = Outcome.HTTP_ERROR if status is None else Outcome.STREAM_ERROR
        error = _conn_error_text(exc, status is None)
        if resp is not None:
            discard_connection(resp)
    except Exception as exc:  # parser errors from geventhttpclient, bad chunk framing...
        outcome = Outcome.HTTP_ERROR if status is None else Outcome.STREAM_ERROR
        error = f"{type(exc).__name__}: {str(exc)[:120]}"
        if resp is not None:
            discard_connection(resp)
    finally:
        first.cancel()
        total.cancel()
    end = clock()
    if poller is not None:
        poller.sweep_if_due()  # before this request's record work: other streams first (bursts of ends)
    state.sent_s = start if timing.sent_s is None else timing.sent_s  # sent, even if the headers never came
    record = state.finish(
        end, outcome=outcome, http_status=status, error=error, anchor=anchor,
        base={**base, **phase_fields(timing, start, due)}, keep_output=keep_output,
    )
    return record, state.text()


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


def _read_error_body(resp: Any) -> bytes:
    try:
        content: bytes = resp.read(ERROR_BODY_LIMIT)
    except Exception:
        content = b""
    if not resp.message_complete:
        discard_connection(resp)
    return content


def _conn_error_text(exc: BaseException, before_response: bool) -> str:
    name = type(exc).__name__
    if isinstance(exc, ConnectionRefusedError):
        return "connection refused"
    if before_response:
        return f"connection failed: {name}"
    return "connection closed mid-stream" if "closed" in str(exc) else f"stream broken: {name}"
