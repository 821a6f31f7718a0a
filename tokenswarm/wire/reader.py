"""Reading streamed responses from the event loop itself: no greenlet switch per SSE event.

In gevent, a greenlet blocked in ``recv`` is woken through the hub for every TCP segment:
two greenlet switches plus a watcher start/stop per event, the biggest single cost of a
streaming client (it is what limits a plain Locust ``readline`` loop). Here the request's
greenlet instead hands its socket to the process's :class:`StreamPoller` and sleeps once;
the poller's callback runs *inside the hub* whenever sockets are readable, reads what each
socket has, parses it and updates the stream state. The greenlet is woken once, when the
response is complete (or broken).

How a read is dated and done:

* **Kernel receive stamps** (Linux, ``SO_TIMESTAMPNS``): each read is dated by when its last
  segment reached the host, so how late the loop gets to a socket does not move the time.
  Without them (other platforms, injected test clocks) a read gets the time its poll returned.
* **One ``epoll`` set per process** (:mod:`tokenswarm.wire.poller`), swept on a timer once
  busy instead of woken per arrival: fewer wake-ups and system calls per event, and the
  stamps do not move.
* **The head too**, on stamped pool sockets (:mod:`tokenswarm.wire.head`): the loop reads and
  parses a ``200`` chunked head itself and this body reader takes its registration over --
  one registration and one wake-up per response.
* **The C fast path** (:mod:`tokenswarm.wire._fastread`) reads a socket, converts its stamp
  and splits whole chunks of whole ``data:`` events in one call; everything else goes through
  the Python de-chunker and SSE parser, which give the same events.
* **The arrival watcher** (:mod:`tokenswarm.wire.watch`): when the loop stalls, a native
  thread notes what each stream had received by when. The fast path dates the chunks of a
  read that arrived apart by those notes instead of by the read's single stamp, and the
  general parsers decode such a read piece by piece, each piece at its noted time.

Callbacks must never block or raise: errors are stored and re-raised in the waiting
greenlet. Used for plain-TCP streams without per-chunk hooks; TLS sockets (which buffer
inside OpenSSL) and hooked streams use the greenlet loop in :mod:`tokenswarm.wire.client`.
Without ``epoll`` (non-Linux) each socket gets its own libev watcher instead.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import gevent
from gevent.event import Event

from tokenswarm.wire import kstamp, watch
from tokenswarm.wire.dechunk import ChunkedDecoder, ChunkedError
from tokenswarm.wire.head import HeadReader, HubResponse
from tokenswarm.wire.libread import library_read_pieces
from tokenswarm.wire.native import native_function
from tokenswarm.wire.poller import StreamPoller, stream_poller
from tokenswarm.wire.sse import SSEParser

#: The C fast path (whole chunks of whole events per read), when built and not turned off with
#: TOKENSWARM_NATIVE=0 (the pure-Python path does the same work; for comparison and tests).
_read_events = native_function("read_events")
FAST = _read_events is not None
#: Read plain-TCP streams from an event-loop callback (:class:`HubReader`); TOKENSWARM_READER=greenlet
#: selects the simpler one-recv-per-wake-up loop in the request's greenlet (kept for comparison
#: and for TLS/hooks). The transport routes by it and the timing provenance reports it.
USE_HUB_READER = os.environ.get("TOKENSWARM_READER", "hub") != "greenlet"

RECV_BYTES = 65536
#: Times per response the reader tries to take the chunked framing over from the HTTP library.
TAKEOVER_ATTEMPTS = 8


def _between_chunks(resp: Any) -> bool:
    try:
        remaining: int = resp.get_remaining_content_length()
        return remaining == 0
    except (AttributeError, ValueError):
        return not resp._body_buffer  # no parser state to ask: only an untouched body is safe


def can_watch(resp: Any) -> bool:
    """True for a plain (non-TLS) gevent socket we can read from the hub."""
    sock = getattr(resp, "_sock", None)
    return sock is not None and getattr(sock, "_sslobj", None) is None and hasattr(sock, "_sock")


class HubReader:
    """Feeds one response's SSE events into ``on_events(now_s, events)`` from the hub."""

    __slots__ = ("resp", "raw", "fd", "clock", "parser", "on_events", "on_eof", "done", "error", "poller",
                 "watcher", "dechunker", "trial", "takeovers", "stamped", "fast", "steady", "tail", "chunked",
                 "watched", "last_content_s")

    def __init__(self, resp: Any, clock: Callable[[], float], parser: SSEParser,
                 on_events: Callable[[float, list[Any]], bool], on_eof: Callable[[], None]) -> None:
        self.resp = resp
        self.raw = resp._sock._sock  # the non-blocking OS-level socket under gevent's wrapper
        self.fd = -1
        self.clock = clock
        self.parser = parser
        self.on_events = on_events  # returns True when the caller wants to stop reading
        self.on_eof = on_eof  # peer closed: raise if that was not a valid end of body
        self.done = Event()
        self.error: BaseException | None = None
        self.poller: StreamPoller | None = None
        self.watcher: Any = None  # gevent's io watcher (the greenlet path)
        self.stamped = False  # reads carry kernel receive timestamps
        self.watched = False  # registered with the arrival watcher (stamped reads, C extension built)
        # Our own de-chunking from the first chunk boundary on. The library's parser reads the
        # headers and whatever body bytes came with them; it is between chunks when it expects
        # no more bytes of the current one (remaining length 0). The states that also report 0
        # -- before a chunk's closing CRLF, inside the terminating "0" line -- make our first
        # feed fail, and ``_consume`` then hands the framing back to the library.
        self.chunked = chunked = "chunked" in str(resp.get("transfer-encoding") or "").lower()
        if isinstance(resp, HubResponse):  # our own head parse: the body starts at a chunk boundary
            self.dechunker: ChunkedDecoder | None = ChunkedDecoder()
            self.trial: list[bytes] | None = None  # the framing is ours from the first byte
        else:
            self.dechunker = ChunkedDecoder() if chunked and _between_chunks(resp) else None
            self.trial = [] if self.dechunker is not None else None  # raw bytes until trusted
        # Where the header read ended inside a chunk (a client reading a backlog: the library
        # reads 4 KiB), the library keeps the framing until one of its reads ends between
        # chunks, and we take over then; a few attempts per response at most.
        self.takeovers = TAKEOVER_ATTEMPTS if chunked else 0
        # The C fast path reads whole chunks of whole events; allowed while our decoder and the
        # SSE parser hold nothing partial (they start empty; re-checked after every slow read).
        self.fast = False
        self.tail = b""  # fast path: raw bytes of a chunk the last read ended inside
        # Set by the caller once no read can make it stop (first token seen, no per-read hooks):
        # the events go straight to the stream state, one call less per read.
        self.steady: Callable[[float, list[Any]], Any] | None = None
        self.last_content_s = -1.0  # arrival of this stream's latest read that held content (the sweep's evidence)

    def run(self) -> None:
        """Process what is already buffered, then read from the hub until the response ends."""
        resp = self.resp
        if isinstance(resp, HubResponse):
            self._take_over(resp.head)
            if self.done.is_set():  # the body ended (or broke) in the bytes read with the head
                self.stop()
                if self.error is not None:
                    raise self.error
                return
        elif resp._body_buffer:  # came with the headers, in the library's last read
            data = bytes(resp._body_buffer)
            del resp._body_buffer[:]
            for now, piece in library_read_pieces(resp, data, self.clock, self.chunked):  # dated apart if they came apart
                if self._body(now, piece):
                    return
        if resp.message_complete:
            return
        # The first read may take the fast path too: whole chunks of whole events from the first
        # byte are what our framing needs to be trusted (a read that begins inside a chunk's
        # closing CRLF or the terminating line is not the simple framing and goes to the trial).
        self.fast = self._fast_allowed()
        if self.poller is None:  # else the head reader's registration was taken over
            self._register(resp)
        try:
            self.done.wait()
        finally:
            self.stop()
        if self.error is not None:
            raise self.error

    def _register(self, resp: Any) -> None:
        """Have the socket's reads call :meth:`readable`: through the stream poller (with the
        arrival watcher where the socket has kernel stamps), else a libev watcher of its own."""
        self.fd = self.raw.fileno()
        poller = stream_poller(self.clock)
        if poller is None:
            self.watcher = gevent.get_hub().loop.io(self.fd, 1)
            self.watcher.start(lambda: self.readable(self.clock(), 0.0))
            return
        self.poller = poller
        if poller.kernel_stamps:
            # a stamped pool socket has them on since it was made: no system call per response
            self.stamped = getattr(resp._sock, "kernel_stamped", False) or kstamp.enable(self.raw)
            self.watched = FAST and self.stamped and watch.start(self.fd) is not None
        poller.add(self.fd, self.readable)

    def _take_over(self, head: HeadReader) -> None:
        """Continue where the event loop's head read stopped: its registration with the poller
        and the watcher becomes this reader's, and the bytes it read after the head are
        decoded first, each piece at the time it arrived."""
        self.fd = head.fd
        if head.hooked:
            head.hooked = False
            self.poller = head.poller
            self.stamped = True
            self.watched = head.watched
            head.poller.replace(self.fd, self.readable)
        try:
            for when, piece in head.body_pieces():
                self._consume(when, piece)
                if self.done.is_set():
                    return
            if head.error is not None:
                raise head.error
            if head.eof:
                self._consume(self.clock(), b"")
        except BaseException as exc:
            self._finish(exc)

    def _body(self, now: float, body: bytes) -> bool:
        events = self.parser.feed(body)
        return self.on_events(now, events) if events else False

    def readable(self, now: float, offset: float) -> None:
        """The socket has bytes (or EOF) that were there at ``now``: read and parse them.

        With kernel timestamps the read's time is when its last segment reached this host
        (``CLOCK_REALTIME`` minus ``offset``, the realtime-minus-monotonic difference sampled at
        the poll) -- possibly after ``now``, when it arrived while this sweep was reading other
        sockets; without them (or if the kernel gave none) ``now``.
        """
        cuts = None
        try:
            if self.fast:
                now, events, data, tail, groups = _read_events(self.fd, True, self.stamped, offset, now,
                                                               kstamp.PLAUSIBLE_AGE_S, self.tail, self.watched)
                if events is not None:
                    self.tail = b"" if tail is None else tail
                    if events or tail is None:
                        self.trial = None  # whole chunks parsed from a boundary: the framing is ours
                    if groups is not None:  # the watcher saw its chunks arrive apart
                        self._dated(groups)
                    elif events:
                        steady = self.steady
                        if steady is not None:
                            added = steady(now, events)  # content chunks: each is dated by this read
                            if added:
                                self._evidence(now, added)
                        elif self.on_events(now, events):
                            self._finish(None)
                    if tail is None:  # the body's terminating chunk came with them
                        self._body_ended()
                    return
                cuts = groups  # undecoded bytes: where the watcher saw them arrive apart
            elif self.watched:  # the general parsers' read, through C for the watcher's notes
                now, _events, data, _tail, cuts = _read_events(self.fd, False, True, offset, now,
                                                               kstamp.PLAUSIBLE_AGE_S, b"", True)
            elif self.stamped:
                data, anc, _flags, _addr = self.raw.recvmsg(RECV_BYTES, kstamp.ANC_BYTES)
                if anc:  # judged against the time after the read: it may have arrived after ``now``
                    now = kstamp.stamp_of(anc, offset, self.clock())
            else:
                data = self.raw.recv(RECV_BYTES)
        except BlockingIOError:
            return
        except BaseException as exc:
            self._finish(exc)
            return
        # The general parsers say nothing about this stream's gaps, and a stream whose gaps
        # cannot be seen is not one that may be read late: the sweep period's floor.
        if data and self.poller is not None:
            self.poller.crowded()
        try:
            if cuts:  # decode piece by piece, each at the time its last byte had arrived
                start = 0
                for end, when in cuts:
                    self._consume(when, data[start:end])
                    start = end
                    if self.done.is_set():
                        return
                data = data[start:]
            self._consume(now, data)
        except BaseException as exc:
            self._finish(exc)

    def _evidence(self, now: float, added: int) -> None:
        """Tell the poller's sweep period what this read showed: one content chunk ``now - the
        previous one's read`` after it, or ``added`` chunks one sweep caught together."""
        last, self.last_content_s = self.last_content_s, now
        poller = self.poller
        if last < 0.0 or poller is None:  # the first content read: its gap is from the head, not a chunk
            return
        period = poller.period
        if period is None:
            return
        if added == 1:
            period.gap(now - last)
        else:
            poller.crowded()

    def _dated(self, groups: list[Any]) -> None:
        """Deliver a read's events in groups, each at the time the watcher dated it (each group
        is an arrival of its own, and tells the sweep period what a read of it would have)."""
        steady = self.steady
        for when, events in groups:
            if steady is not None:
                added = steady(when, events)
                if added:
                    self._evidence(when, added)
            elif self.on_events(when, events):
                self._finish(None)
                return

    def _consume(self, now: float, data: bytes) -> None:
        """The general path: any framing, partial chunks and events, EOF."""
        if not data:
            if self.dechunker is not None:
                raise ConnectionError("connection closed mid-stream")
            self.on_eof()
            self._finish(None)
            return
        dec = self.dechunker
        if dec is not None:
            trial = self.trial
            if trial is not None:
                trial.append(data)
            try:
                body = dec.feed(data)
            except ChunkedError:
                if trial is None:
                    raise
                # The library's parser was inside a chunk when we took over: hand it every
                # byte we have seen and let it do the framing until its next chunk boundary.
                self.dechunker = self.trial = None
                data = b"".join(trial)
            else:
                if body:
                    self.trial = None  # our framing produced data: it is ours from now on
                stop = self._body(now, body) if body else False
                if dec.done:
                    self._body_ended()
                elif stop:
                    self._finish(None)
                else:
                    self.fast = self._fast_allowed()
                return
        resp = self.resp
        resp.feed(data)  # de-chunks into _body_buffer; may complete the message
        buf = resp._body_buffer
        stop = False
        if buf:
            body = bytes(buf)
            del buf[:]
            stop = self._body(now, body)
        if stop or resp.message_complete:
            self._finish(None)
        elif self.takeovers and _between_chunks(resp):
            self.takeovers -= 1
            self.dechunker, self.trial = ChunkedDecoder(), []

    def _fast_allowed(self) -> bool:
        """The C fast path may take the next read: our de-chunker is trusted or has not been fed
        yet (no trial bytes) and neither it nor the SSE parser holds anything partial."""
        dec = self.dechunker
        return FAST and dec is not None and not self.trial and dec.idle and self.parser.idle

    def _body_ended(self) -> None:
        """Our framing read the terminating chunk: end the message for the library too, so its
        connection is reused (keep-alive), and stop reading."""
        resp = self.resp
        if isinstance(resp, HubResponse):
            self.stop()  # before the socket may be closed
            dec = self.dechunker
            resp.body_ended(clean=dec is None or not dec.rest)
        else:
            resp.feed(b"0\r\n\r\n")
        self._finish(None)

    def _finish(self, exc: BaseException | None) -> None:
        self.stop()
        if exc is not None and self.error is None:
            self.error = exc
        self.done.set()

    def stop(self) -> None:
        p = self.poller
        if p is not None:
            self.poller = None
            p.remove(self.fd)
        if self.watched:
            self.watched = False
            watch.stop(self.fd)
        w = self.watcher
        if w is not None:
            self.watcher = None
            w.stop()
            w.close()
