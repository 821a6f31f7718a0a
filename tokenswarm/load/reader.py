"""Reading a streamed response from the event loop itself: no greenlet switch per SSE event.

In gevent, a greenlet blocked in ``recv`` is woken through the hub for every TCP segment:
two greenlet switches plus a watcher start/stop per event, the biggest single cost of a
streaming client (it is what limits a plain Locust ``readline`` loop). Here the request's
greenlet instead registers a libev I/O watcher and sleeps once; the watcher's callback runs
*inside the hub* whenever the socket is readable, takes the arrival timestamp, reads what
the socket has, parses it and updates the stream state. The greenlet is woken once, when
the response is complete (or broken).

The callback must never block or raise: errors are stored and re-raised in the waiting
greenlet. Used for plain-TCP streams without per-chunk hooks; TLS sockets (which buffer
inside OpenSSL) and hooked streams use the greenlet loop in :mod:`tokenswarm.load.client`.
"""

from __future__ import annotations

from typing import Any, Callable

import gevent
from gevent.event import Event

from tokenswarm.load.dechunk import ChunkedDecoder, ChunkedError

RECV_BYTES = 65536


def can_watch(resp: Any) -> bool:
    """True for a plain (non-TLS) gevent socket we can put a raw watcher on."""
    sock = getattr(resp, "_sock", None)
    return sock is not None and getattr(sock, "_sslobj", None) is None and hasattr(sock, "_sock")


class HubReader:
    """Feeds one response's bytes into ``on_data(now_s, data)`` from a hub callback."""

    __slots__ = ("resp", "raw", "clock", "on_data", "on_eof", "done", "error", "watcher", "dechunker", "reads")

    def __init__(self, resp: Any, clock: Callable[[], float], on_data: Callable[[float, bytes], bool],
                 on_eof: Callable[[], None]) -> None:
        self.resp = resp
        self.raw = resp._sock._sock  # the non-blocking OS-level socket under gevent's wrapper
        self.clock = clock
        self.on_data = on_data  # returns True when the caller wants to stop reading
        self.on_eof = on_eof  # peer closed: raise if that was not a valid end of body
        self.done = Event()
        self.error: BaseException | None = None
        self.watcher = None
        self.reads = 0
        # Our own de-chunking when the header read stopped at the end of the headers (so the
        # library's parser holds no partial chunk); otherwise its parser does the framing.
        chunked = "chunked" in str(resp.get("transfer-encoding") or "").lower()
        self.dechunker = ChunkedDecoder() if chunked and not resp._body_buffer else None

    def run(self) -> None:
        """Process what is already buffered, then read from the hub until the response ends."""
        resp = self.resp
        if resp._body_buffer:
            data = bytes(resp._body_buffer)
            del resp._body_buffer[:]
            if self.on_data(self.clock(), data) or resp.message_complete:
                return
        if resp.message_complete:
            return
        self.watcher = gevent.get_hub().loop.io(self.raw.fileno(), 1)
        self.watcher.start(self._readable)
        try:
            self.done.wait()
        finally:
            self.stop()
        if self.error is not None:
            raise self.error

    def _readable(self) -> None:
        try:
            data = self.raw.recv(RECV_BYTES)
        except BlockingIOError:
            return
        except BaseException as exc:
            self._finish(exc)
            return
        now = self.clock()  # one timestamp per read, before parsing
        try:
            if not data:
                if self.dechunker is not None:
                    raise ConnectionError("connection closed mid-stream")
                self.on_eof()
                self._finish(None)
                return
            self.reads += 1
            dec = self.dechunker
            if dec is not None:
                try:
                    body = dec.feed(data)
                except ChunkedError:
                    if self.reads > 1:
                        raise
                    # The library's parser had consumed part of a chunk line with the headers:
                    # hand it these (unconsumed) bytes and let it do the framing from here.
                    self.dechunker = None
                else:
                    stop = self.on_data(now, body) if body else False
                    if dec.done:
                        self.resp.feed(b"0\r\n\r\n")  # end the message for the library: keep-alive reuse
                        self._finish(None)
                    elif stop:
                        self._finish(None)
                    return
            resp = self.resp
            resp.feed(data)  # de-chunks into _body_buffer; may complete the message
            buf = resp._body_buffer
            stop = False
            if buf:
                body = bytes(buf)
                del buf[:]
                stop = self.on_data(now, body)
            if stop or resp.message_complete:
                self._finish(None)
        except BaseException as exc:
            self._finish(exc)

    def _finish(self, exc: BaseException | None) -> None:
        self.stop()
        if exc is not None and self.error is None:
            self.error = exc
        self.done.set()

    def stop(self) -> None:
        w = self.watcher
        if w is not None:
            self.watcher = None
            w.stop()
            w.close()
