"""The transport seam: what :func:`tokenswarm.wire.client.stream_call` needs from the network.

httpx's ``BaseTransport.handle_request`` is the model: one object that, given a request,
returns a response. Here the response's body arrives as timed *deliveries* (the events of one
read, all dated by one reading: see :mod:`tokenswarm.wire.timing`), and the transport owns the
clock those dates are read on, so the client's own readings (the attempt's start, its end) are
on the same timeline. The client is written against :class:`Transport` only; it never touches
a socket or the HTTP library.

:class:`PoolTransport` is the production transport: a geventhttpclient client from Locust's
pool, sent through :func:`tokenswarm.wire.send.send_request`, read through
:class:`tokenswarm.wire.timing.BodyReader` and discarded by
:func:`tokenswarm.wire.pool.discard_connection` -- the same calls, in the same order, as
before the seam existed (private HTTP-library access stays in ``pool``, ``send``, ``libread``
and ``timing``). The tests' scripted in-memory transport (``tests/helpers/scripted_transport.py``)
plays scripted deliveries on an injected clock, deadlines included.

What a transport promises (the client maps each to a record's outcome):

* :meth:`Transport.send` returns a :class:`Response` once its headers arrived, having filled
  the :class:`~tokenswarm.wire.send.RequestTiming` it was handed (``sent_s`` once the request
  left, ``headers_s``...). It raises ``ConnectionRefusedError``/``OSError``/``ConnectionError``
  when no response came (an ``http_error`` without a status).
* :meth:`Transport.body_reader` gives a :class:`Deliveries` whose :meth:`Deliveries.run` calls
  ``on_events(now_s, events)`` once per delivery with the SSE events the transport parsed
  through the client's parser; it returns True when ``on_events`` said stop, False at the end
  of the body (the client then flushes its parser), and raises ``ConnectionError`` when the
  body was cut, :class:`~tokenswarm.wire.sse.StreamLimitExceeded` when the parser refused it.
* :attr:`Transport.timeout` makes the request's deadlines: ``timeout(seconds, exc)`` returns
  an object with ``start()``/``cancel()`` that raises ``exc`` into the waiting request once
  ``seconds`` have passed on the transport's clock (gevent's ``Timeout`` in production).
* :meth:`Transport.discard` closes, never reuses, the connection of a response read halfway.
* :meth:`Transport.settle` is called once the request's I/O is over, before its record is
  built (production: give other streams' reads a sweep first).
"""

from __future__ import annotations

from typing import Any, Callable, Protocol

import gevent

from tokenswarm.wire import head, pool, reader
from tokenswarm.wire.head import hub_read_head
from tokenswarm.wire.poller import StreamPoller, stream_poller
from tokenswarm.wire.pool import discard_connection
from tokenswarm.wire.send import RequestTiming, send_request
from tokenswarm.wire.sse import SSEParser
from tokenswarm.wire.timing import BodyReader

#: ``on_events(now_s, events)``: the events of one delivery, all arrived at ``now_s``; True = stop.
OnEvents = Callable[[float, list[Any]], bool]


class Response(Protocol):
    """A response whose headers arrived; its body is read through the transport."""

    @property
    def status_code(self) -> int: ...

    @property
    def message_complete(self) -> bool:
        """The whole body was read: the connection may be reused."""
        ...

    def read(self, length: int = ...) -> bytes:
        """The body (at most ``length`` bytes), all at once: error bodies, non-streamed answers."""
        ...


class Deadline(Protocol):
    """One armed deadline of a request (gevent's ``Timeout`` in production)."""

    def start(self) -> Any: ...

    def cancel(self) -> Any: ...


class Deliveries(Protocol):
    """One streamed body's deliveries, handed to ``on_events`` as they arrive."""

    def run(self) -> bool:
        """Deliver until the body ends (False) or ``on_events`` says stop (True)."""
        ...

    def go_steady(self, steady: Callable[[float, list[Any]], Any]) -> None:
        """Hand later deliveries to ``steady`` (which cannot stop the reading)."""
        ...


class Transport(Protocol):
    """What the client needs from the network; see the module's docstring for the contract."""

    #: The clock every reading of the request is taken on (``perf_counter`` in production).
    clock: Callable[[], float]
    #: ``timeout(seconds, exc)``: a :class:`Deadline` that raises ``exc`` once ``seconds`` passed.
    timeout: Callable[[float, BaseException], Deadline]

    def send(self, path: str, body: bytes, headers: dict[str, str], timing: RequestTiming) -> Response: ...

    def body_reader(self, response: Response, parser: SSEParser, on_events: OnEvents, *,
                    hooked: bool) -> Deliveries:
        """The body's deliveries; ``hooked``: ``on_events`` calls hooks that may block or switch."""
        ...

    def discard(self, response: Response) -> None: ...

    def settle(self) -> None: ...


class PoolTransport:
    """The production transport: a geventhttpclient client (Locust's pool, its timeouts and TLS
    settings) with tokenswarm's timed send and body reader.

    Made once per user (not per request); requests of one user may overlap (open loop), so it
    keeps no per-request state. Its clock must be the one the stream poller runs on, which it
    finds on first use (one per process and hub: a transport is made in the process and hub
    that use it).
    """

    __slots__ = ("http_client", "clock", "_poller", "_polled")

    timeout = gevent.Timeout  # the deadline: the class itself, so no extra call per request
    discard = staticmethod(discard_connection)

    def __init__(self, http_client: Any, clock: Callable[[], float]) -> None:
        self.http_client = http_client
        self.clock = clock
        self._poller: StreamPoller | None = None
        self._polled = False  # the poller was looked up (it may be None: no epoll)

    def _stream_poller(self) -> StreamPoller | None:
        if not self._polled:
            self._poller, self._polled = stream_poller(self.clock), True
        return self._poller

    def send(self, path: str, body: bytes, headers: dict[str, str], timing: RequestTiming) -> Any:
        """Send on a pooled connection (:func:`~tokenswarm.wire.send.send_request`)."""
        poller = self._stream_poller() if reader.USE_HUB_READER else None
        if poller is not None:
            poller.sweep_if_due()  # between greenlets: see StreamPoller.sweep_if_due
        stamps = poller is not None and poller.kernel_stamps
        # Its sweeps note arrivals while a late header read waits (they need kernel stamps).
        pool.arrival_poller = poller if stamps else None
        # With stamps (and the C reader) the loop reads the head too: one registration and one
        # wake-up of this greenlet per response (head.HeadReader).
        read_head = hub_read_head if stamps and head.HUB_HEAD else None
        return send_request(self.http_client, path, body, headers, timing, read_head)

    def body_reader(self, response: Any, parser: SSEParser, on_events: OnEvents, *, hooked: bool) -> BodyReader:
        """Hooked streams are read by the request's greenlet (the hooks may block or switch);
        the others from the event loop where the socket allows it."""
        return BodyReader(response, self.clock, parser, on_events, hub=not hooked and reader.USE_HUB_READER)

    def settle(self) -> None:
        """Before this request's record work: other streams first (bursts of ends)."""
        poller = self._stream_poller() if reader.USE_HUB_READER else None
        if poller is not None:
            poller.sweep_if_due()
