"""The response head, read by the event loop on stamped pool sockets (:class:`HeadReader`).

:func:`hub_read_head` is ``send_request``'s ``read_head``: right after the send, the request's
socket joins the stream poller's set (and the arrival watcher's), the loop reads and parses a
``200`` chunked head itself (:func:`simple_head`), and the body reader
(:class:`tokenswarm.wire.reader.HubReader`) takes the registration over -- one registration and
one wake-up per response. Any other head goes to the HTTP library with the bytes already read,
each keeping its date (:func:`tokenswarm.wire.libread.library_response`).

The head's reads go through the C extension (``read_head``); without it, or with
TOKENSWARM_HEAD_READER=library, every head is the library's (:data:`HUB_HEAD`).
"""

from __future__ import annotations

import os
from typing import Any, Callable

from gevent.event import Event

from tokenswarm.wire import kstamp, watch
from tokenswarm.wire.libread import library_response
from tokenswarm.wire.native import native_function
from tokenswarm.wire.poller import StreamPoller, stream_poller

_read_head = native_function("read_head")
#: Response heads read by the event loop (:class:`HeadReader`) where the C extension is built;
#: TOKENSWARM_HEAD_READER=library leaves them to the HTTP library's read in the request's
#: greenlet, as before (for comparison).
HUB_HEAD = _read_head is not None and os.environ.get("TOKENSWARM_HEAD_READER", "hub") != "library"

#: A response head not complete within this many bytes is left to the HTTP library.
HEAD_MAX_BYTES = 65536


class HeadReader:
    """Reads a response's head from the event loop, on the stream poller's sweeps.

    The request's greenlet sends, registers the socket (and the arrival watcher) once and
    sleeps until the head is complete; the body reader then takes the same registration over
    (:meth:`StreamPoller.replace`). So a response costs one registration instead of two, one
    wake-up of the greenlet less, and no parse through the HTTP library's header callbacks.
    Each read is dated like every other (its kernel stamp; the watcher's cuts when parts of it
    arrived earlier): ``pieces`` are ``(end offset in buf, arrival_s)``. Reads go on after the
    head (the body's first bytes, dated as they come) until someone takes over or unhooks.
    """

    __slots__ = ("fd", "poller", "watched", "buf", "pieces", "head_end", "done", "error", "eof", "hooked")

    def __init__(self, fd: int, poller: StreamPoller) -> None:
        self.fd = fd
        self.poller = poller
        self.watched = False  # registered with the arrival watcher
        self.buf = bytearray()  # every byte read so far, from the response's first
        self.pieces: list[tuple[int, float]] = []  # bytes before each end had arrived by then
        self.head_end = -1  # offset just after the head's empty line, once it came
        self.done = Event()  # set when the head is complete (or will not be: EOF, an error, too long)
        self.error: BaseException | None = None
        self.eof = False
        self.hooked = False  # the poller and the watcher hold fd for this reader

    def start(self) -> None:
        self.watched = watch.start(self.fd) is not None
        self.hooked = True
        self.poller.add(self.fd, self.readable)

    def unhook(self) -> None:
        """Stop reading (the poller and the watcher forget the socket); idempotent."""
        if self.hooked:
            self.hooked = False
            self.poller.remove(self.fd)
            if self.watched:
                watch.stop(self.fd)

    def readable(self, now: float, offset: float) -> None:
        """A sweep found the socket readable: read and date what it has (never raises)."""
        try:
            arrival, data, cuts = _read_head(self.fd, True, offset, now, kstamp.PLAUSIBLE_AGE_S, self.watched)
        except BlockingIOError:
            return
        except BaseException as exc:  # a reset: the library's read says what it means
            self.error = exc
            self.unhook()
            self.done.set()
            return
        self.take(arrival, data, cuts)

    def take(self, arrival: float, data: bytes, cuts: list[tuple[int, float]] | None) -> None:
        """Append one read (``cuts``: where the watcher saw parts of it arrive earlier)."""
        if not data:
            self.eof = True
            self.unhook()  # readable for ever after EOF: no more sweeps for it
            self.done.set()
            return
        buf = self.buf
        base = len(buf)
        if cuts:
            self.pieces += [(base + end, when) for end, when in cuts]
        buf += data
        self.pieces.append((len(buf), arrival))
        if self.head_end < 0:
            end = buf.find(b"\r\n\r\n", max(0, base - 3))
            if end >= 0:
                self.head_end = end + 4
                self.done.set()
            elif len(buf) > HEAD_MAX_BYTES:
                self.done.set()

    def time_of(self, offset: int) -> float:
        """When the byte just before ``offset`` had arrived."""
        for end, when in self.pieces:
            if end >= offset:
                return when
        raise ValueError(f"offset {offset} was not read")

    def body_pieces(self) -> list[tuple[float, bytes]]:
        """The bytes read after the head, cut where they arrived apart: ``(arrival_s, bytes)``."""
        out, pos, buf = [], self.head_end, self.buf
        for end, when in self.pieces:
            if end > pos:
                out.append((when, bytes(buf[pos:end])))
                pos = end
        return out


def simple_head(head: bytes) -> dict[str, str] | None:
    """The fields of a ``HTTP/1.1 200`` head with chunked framing and nothing unusual (no
    ``Content-Length``, no repeated framing field, no folded line), names lower-cased; None for
    any other head, which the HTTP library then parses (interim responses, errors, other
    framings and versions)."""
    lines = head.split(b"\r\n")
    status = lines[0]
    if not (status.startswith(b"HTTP/1.1 200 ") or status == b"HTTP/1.1 200"):
        return None
    fields: dict[str, str] = {}
    for line in lines[1:-2]:  # the head ends with an empty line: two empty strings after the split
        name, sep, value = line.partition(b":")
        if not sep or not name or name[-1:] in (b" ", b"\t") or line[:1] in (b" ", b"\t"):
            return None
        key = name.decode("latin-1").lower()
        text = value.strip(b" \t").decode("latin-1")
        if key in fields:
            if key in ("transfer-encoding", "content-length"):
                return None
            text = f"{fields[key]}, {text}"
        fields[key] = text
    if fields.get("transfer-encoding", "").lower() != "chunked" or "content-length" in fields:
        return None
    return fields


class HubResponse:
    """A ``200`` chunked response whose head the event loop read (:class:`HeadReader`): what the
    client and :class:`~tokenswarm.wire.reader.HubReader` use of the library's response,
    without its parser.

    The body reader takes the head reader's registration over and ends the response
    (:meth:`body_ended`: the socket goes back to the pool). Anyone else -- a non-streamed read,
    a stream read by its greenlet (per-chunk hooks) -- gets the library's response, parsed
    from every byte read so far (:meth:`library`).
    """

    __slots__ = ("status_code", "fields", "head", "_sock", "_pool", "_client", "_clock", "_complete", "_lib")

    def __init__(self, head: HeadReader, fields: dict[str, str], sock: Any, cpool: Any, http_client: Any,
                 clock: Callable[[], float]) -> None:
        self.status_code = 200
        self.fields = fields
        self.head = head
        self._sock: Any = sock
        self._pool: Any = cpool
        self._client = http_client
        self._clock = clock
        self._complete = False
        self._lib: Any = None

    def get(self, name: str, default: Any = None) -> Any:
        """A header field (``name`` lower-case), as the library's response answers it."""
        return self.fields.get(name, default)

    @property
    def message_complete(self) -> bool:
        return self._complete if self._lib is None else bool(self._lib.message_complete)

    def library(self) -> Any:
        """The library's response for this one (made once): reading stops here and the library
        parses every byte read so far, then reads on."""
        if self._lib is None:
            self.head.unhook()
            h = self.head
            self._lib = library_response(self._sock, self._pool, self._client, bytes(h.buf), h.pieces, self._clock)
            self._sock = self._pool = None
        return self._lib

    def read(self, length: int | None = None) -> bytes:
        """The body, all at once (a non-streamed answer): through the library's response."""
        lib = self.library()
        data: bytes = lib.read() if length is None else lib.read(length)
        return data

    def unhook(self) -> Any:
        """Stop the head reader; the object that now holds the socket (to discard)."""
        self.head.unhook()
        return self if self._lib is None else self._lib

    def body_ended(self, clean: bool) -> None:
        """The body reader read the terminating chunk: the socket goes back to the pool (closed
        instead when bytes followed the end, or the server said ``Connection: close``)."""
        self._complete = True
        sock, cpool = self._sock, self._pool
        self._sock = self._pool = None
        if sock is None or cpool is None:
            return
        if clean and "close" not in self.fields.get("connection", "").lower():
            cpool.return_socket(sock)
        else:
            cpool.release_socket(sock)

    def __del__(self) -> None:  # dropped halfway (not ended, not discarded): free the pool's slot
        sock, cpool = self._sock, self._pool
        if sock is not None and cpool is not None:
            self.head.unhook()
            cpool.release_socket(sock)


def hub_read_head(sock: Any, cpool: Any, http_client: Any, clock: Callable[[], float]) -> tuple[Any, float | None]:
    """:data:`tokenswarm.wire.send.ReadHead` through the event loop: register the request's
    socket, sleep until its head came, then a :class:`HubResponse` for a ``200`` chunked head,
    else the library's response parsed from the bytes read (its errors, such as a kept-alive
    connection closed before the first byte, are the library's). With the head's arrival time."""
    poller = stream_poller(clock)
    assert poller is not None and _read_head is not None  # the transport asks only when both exist
    head = HeadReader(sock._sock.fileno(), poller)
    head.start()
    try:
        head.done.wait()
    except BaseException:  # a deadline or a kill while waiting: the response is not read
        head.unhook()
        cpool.release_socket(sock)
        raise
    headers_s = head.time_of(head.head_end) if head.head_end > 0 else None
    if head.head_end > 0:
        fields = simple_head(bytes(head.buf[:head.head_end]))
        if fields is not None:
            return HubResponse(head, fields, sock, cpool, http_client, clock), headers_s
    head.unhook()
    # (the library's header read releases the socket itself when it fails)
    return library_response(sock, cpool, http_client, bytes(head.buf), head.pieces, clock), headers_s
