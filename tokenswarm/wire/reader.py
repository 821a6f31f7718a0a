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
* **One ``epoll`` set per process** behind one libev watcher, and, once busy, a sweep of all
  ready sockets every ``READ_BATCH_S`` instead of a wake-up per arrival: fewer wake-ups and
  system calls per event, and the stamps do not move.
* **The head too**, on stamped pool sockets (:class:`HeadReader`): the socket joins the set
  right after the send, the loop reads and parses a ``200`` chunked head itself and the body
  reader takes the registration over -- one registration and one wake-up per response; any
  other head goes to the HTTP library with the bytes already read.
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
from gevent.monkey import get_original

from tokenswarm.wire import kstamp, watch
from tokenswarm.wire.dechunk import ChunkedDecoder, ChunkedError
from tokenswarm.wire.native import native_function
from tokenswarm.wire.pool import library_read_pieces, library_response
from tokenswarm.wire.sse import SSEParser
from tokenswarm.wire.sweep import SweepPeriod

#: The C fast path (whole chunks of whole events per read), when built and not turned off with
#: TOKENSWARM_NATIVE=0 (the pure-Python path does the same work; for comparison and tests).
_read_events = native_function("read_events")
FAST = _read_events is not None
_read_head = native_function("read_head")
#: Response heads read by the event loop (:class:`HeadReader`) where the C extension is built;
#: TOKENSWARM_HEAD_READER=library leaves them to the HTTP library's read in the request's
#: greenlet, as before (for comparison).
HUB_HEAD = _read_head is not None and os.environ.get("TOKENSWARM_HEAD_READER", "hub") != "library"

try:  # monkey-patching removes select.epoll (it would block the hub); we only poll it with timeout 0
    _epoll, _EPOLLIN, _EPOLLET = get_original("select", ["epoll", "EPOLLIN", "EPOLLET"])
except AttributeError:
    _epoll, _EPOLLIN, _EPOLLET = None, 0, 0

RECV_BYTES = 65536
#: A response head not complete within this many bytes is left to the HTTP library.
HEAD_MAX_BYTES = 65536
#: Times per response the reader tries to take the chunked framing over from the HTTP library.
TAKEOVER_ATTEMPTS = 8
#: Ready sockets handled per wake-up; more stay ready (level-triggered) for the next one.
MAX_READY = 1024
#: With kernel timestamps, a busy poller looks at its sockets every this many seconds instead of
#: on every arrival: one sweep reads many sockets (fewer wake-ups and system calls per event)
#: and the timestamps do not move. TOKENSWARM_READ_BATCH_MS=0 reads on every arrival.
READ_BATCH_S = float(os.environ.get("TOKENSWARM_READ_BATCH_MS", "1")) / 1000.0
#: ...and up to this many while every stream's events come at least 4/3 of the period apart
#: (:mod:`tokenswarm.wire.sweep`): a dozen streams of 5 ms chunks cannot fill a 1 ms sweep, and
#: each wake-up costs far more than the sweep. TOKENSWARM_READ_BATCH_MAX_MS=1 keeps it at 1 ms.
READ_BATCH_MAX_S = max(READ_BATCH_S, float(os.environ.get("TOKENSWARM_READ_BATCH_MAX_MS", "4")) / 1000.0)
#: Timed sweeps in a row that find nothing before a busy poller goes back to waking on arrivals.
#: One was enough to switch, but at a dozen active streams one sweep in ten finds nothing, and
#: each switch there and back costs the event loop three or four epoll_ctl calls (libev's lazy
#: removal: ADD, EEXIST, DEL, ADD seen in strace) for no wake-up saved: the next arrival wakes it.
QUIET_SWEEPS = 3


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


class StreamPoller:
    """All hub-read sockets of one process in one ``epoll`` set behind one libev watcher.

    Idle, it wakes on the first arrival. Busy (it found sockets ready) and with kernel
    timestamps, it stops listening and sweeps again every ``period.period_s`` (``READ_BATCH_S``
    up to ``READ_BATCH_MAX_S``, as the streams' gaps allow), going back to listening when
    ``QUIET_SWEEPS`` sweeps in a row find nothing.
    """

    __slots__ = ("clock", "ep", "handlers", "watcher", "timer", "kernel_stamps", "last_sweep_s", "empty_sweeps",
                 "period", "sweeps_count")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.ep = _epoll()
        self.handlers: dict[int, Callable[[float, float], None]] = {}
        loop = gevent.get_hub().loop
        self.watcher = loop.io(self.ep.fileno(), 1)
        # Kernel stamps are CLOCK_REALTIME; an injected test clock gets read-time stamps.
        self.kernel_stamps = kstamp.maps_onto(clock)
        sweep = self.kernel_stamps and READ_BATCH_S > 0  # without kernel stamps, reading late is stamping late
        self.timer = loop.timer(READ_BATCH_S, READ_BATCH_S) if sweep else None
        #: the sweep period and the evidence for it (the readers report gaps and crowded reads)
        self.period = SweepPeriod(READ_BATCH_S, READ_BATCH_MAX_S) if sweep else None
        self.last_sweep_s = 0.0
        self.empty_sweeps = 0  # timed sweeps in a row that found nothing
        self.sweeps_count = 0

    def add(self, fd: int, handler: Callable[[float, float], None], *, on_arrival: bool = False) -> None:
        """Call ``handler(now_s, real_minus_mono_s)`` from the hub whenever ``fd`` is readable.

        ``on_arrival``: only when new bytes arrived since the last call (edge-triggered), not on
        every sweep while unread bytes wait -- for a handler that notes arrivals and reads
        nothing (the header read's marks), which a busy loop would otherwise call once per
        sweep (measured: ~18 peeks per request at 96 short streams, 8 % of the process).
        """
        self.ep.register(fd, _EPOLLIN | _EPOLLET if on_arrival else _EPOLLIN)
        self.handlers[fd] = handler
        if not self.watcher.active and not (self.timer is not None and self.timer.active):
            self.watcher.start(self._ready)

    def replace(self, fd: int, handler: Callable[[float, float], None]) -> None:
        """Hand a registered ``fd`` to another handler (no system call: same socket, same mask)."""
        if fd not in self.handlers:
            raise KeyError(fd)
        self.handlers[fd] = handler

    def remove(self, fd: int) -> None:
        if self.handlers.pop(fd, None) is not None:
            try:
                self.ep.unregister(fd)
            except (OSError, ValueError):
                pass  # already closed: the kernel dropped it from the set
        if not self.handlers:  # an idle process does not wake for an empty set
            self.watcher.stop()
            if self.timer is not None:
                self.timer.stop()

    def sweep_if_due(self) -> None:
        """Sweep now if the last one is ``READ_BATCH_S`` old (called by request greenlets).

        gevent runs every greenlet that became ready before it looks at timers again. When a
        sweep completes twenty requests at once, their greenlets (record, next request) ran
        back to back for 10-30 ms with no sweep in between -- long enough for a stream's next
        event to join the previous one in the socket, and one read has one kernel stamp.
        """
        period = self.period
        if self.handlers and period is not None and self.clock() - self.last_sweep_s >= period.period_s:
            self._ready()

    def crowded(self) -> None:
        """A reader saw two or more content chunks in one mid-stream read, or bytes only the
        general parsers decode: the period goes back to its floor now."""
        period = self.period
        if period is not None and period.crowded():
            self.retime()

    def retime(self) -> None:
        """The period changed: sweep on a timer of the new period from now on (if sweeping)."""
        period, old = self.period, self.timer
        if period is None or old is None:
            return
        self.timer = gevent.get_hub().loop.timer(period.period_s, period.period_s)
        if old.active:
            old.stop()
            self.timer.start(self._ready)
        old.close()

    def _ready(self) -> None:
        now = self.clock()  # one timestamp for everything this poll reports
        self.last_sweep_s = now
        self.sweeps_count += 1
        period = self.period
        if period is not None:
            if period.update(now):
                self.retime()
            if watch.ENABLED:  # the watcher thread stays idle while the loop sweeps on time
                watch.alive(period.period_s)
        elif self.kernel_stamps and watch.ENABLED:  # reading on every arrival: stalled 2 ms after one
            watch.alive()
        offset = kstamp.real_minus_mono(self.clock) if self.kernel_stamps else 0.0  # realtime -> our timeline
        handlers = self.handlers
        ready = self.ep.poll(0, MAX_READY)
        for fd, _mask in ready:
            h = handlers.get(fd)
            if h is not None:
                h(now, offset)
        timer = self.timer
        if timer is None or not self.handlers:
            return
        if ready:
            self.empty_sweeps = 0
            if not timer.active:  # busy: sweep on the timer from now on
                self.watcher.stop()
                timer.start(self._ready)
        elif timer.active:
            self.empty_sweeps += 1
            if self.empty_sweeps >= QUIET_SWEEPS:  # quiet again: wake on the next arrival
                timer.stop()
                self.watcher.start(self._ready)


_pollers: dict[tuple[Any, ...], StreamPoller] = {}


def _forget_pollers() -> None:
    """In a forked child: the parent's pollers (its epoll set, its hub's watchers) are not ours."""
    _pollers.clear()


# Forked workers get their own pollers. Cleared at the fork rather than keyed by os.getpid(),
# which is a system call on every request (glibc does not cache it).
os.register_at_fork(after_in_child=_forget_pollers)


def sweep_stats() -> dict[str, int]:
    """This process's pollers' sweeps, crowded reads (each brought the period back to its
    floor) and period changes, summed (the manifest's timing counters)."""
    polls = list(_pollers.values())
    return {"sweeps_count": sum(p.sweeps_count for p in polls),
            "sweep_crowded_reads_count": sum(p.period.crowded_count for p in polls if p.period is not None),
            "sweep_period_changes_count": sum(p.period.changes_count for p in polls if p.period is not None)}


def stream_poller(clock: Callable[[], float]) -> StreamPoller | None:
    """The poller of this process and hub (created on first use: forked workers get their own)."""
    if _epoll is None:
        return None
    key = (gevent.get_hub(), clock)
    p = _pollers.get(key)
    if p is None:
        p = _pollers[key] = StreamPoller(clock)
    return p


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
    client and :class:`HubReader` use of the library's response, without its parser.

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
    """:data:`tokenswarm.wire.pool.ReadHead` through the event loop: register the request's
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
