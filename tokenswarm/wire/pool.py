"""Adjustments to geventhttpclient's connection pool that the measurement needs.

* **No yield before the send.** The pool checks that a kept-alive socket is still usable with
  ``gevent.select.select(..., 0.0)``, which yields to the event loop once per request --
  *after* tokenswarm has taken the request's send time. Under load that round trip (other
  greenlets, a read sweep) went into the measured TTFT. The same check is done here with a
  non-blocking ``MSG_PEEK``: an idle keep-alive socket has nothing to read; readable means the
  server closed it (EOF) or left stray bytes, and either way it is not reused.
* **Kernel stamps on the library's own reads.** The library reads the response headers
  itself, and a server that writes its headers and first events together (or a server
  catching up) puts the first chunk in that read. New plain-TCP connections are
  :class:`StampedSocket` s, which keep the kernel's receive stamp of each read, so the hub
  reader can date those bytes by their arrival rather than by when the greenlet ran.
* **The head read by the event loop** where it can be (stamped plain-TCP sockets:
  ``send_request``'s ``read_head``, :class:`tokenswarm.wire.reader.HeadReader`); the library
  then parses only the heads that are not a ``200`` chunked stream, from the bytes already
  read (:func:`library_response`). The rest of this list is about the library's own read.
* **Arrivals noted while the header read waits.** One read has one stamp (its newest
  segment's); a header read that runs late would give every event queued behind the headers
  the last one's. The stream poller's sweeps peek at the socket meanwhile and note what had
  arrived by when -- and so does the arrival watcher's thread (:mod:`tokenswarm.wire.watch`)
  when the loop itself is stalled -- and :func:`library_read_pieces` dates the read's parts
  by those notes.

* **The request's phases, timed apart** (:func:`send_request`). tokenswarm writes the request
  itself on a socket from the pool, so each phase is one clock reading at the moment it names:
  a new connection's connect (TCP, plus TLS) is timed on its own, ``sent`` is read when the
  request's last byte has been handed to the kernel, and ``headers`` is when the response
  headers arrived (the header read's kernel stamp where there is one). TTFT counts from
  ``sent``, so neither the connect nor the generator's own delay before the send is in it.
* **Keep-alive off** (``tune_pool(..., keep_alive=False)``): every socket is closed after its
  response instead of going back to the pool, so each request opens a new connection.

They go through the pool's own extension points (``_is_socket_alive``, ``_create_socket``,
``return_socket`` and the documented ``_create_tcp_socket`` factory) on the pool instance;
nothing global is patched.
"""

from __future__ import annotations

import errno
import socket
import sys
from typing import Any, Callable

import gevent.socket
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool
from geventhttpclient.response import HTTPConnectionClosed, HTTPSocketPoolResponse
from greenlet import getcurrent

from tokenswarm.wire import kstamp, watch
from tokenswarm.wire.dechunk import ChunkedError, data_spans

_PEEK = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)


#: The stream poller whose sweeps note arrivals while a response's first read waits (set by
#: the production transport, ``transport.PoolTransport.send``, when its poller has kernel stamps;
#: None: no notes, one stamp per read).
arrival_poller: Any = None
_PEEK_BYTES = 65536


class StampedSocket(gevent.socket.socket):  # type: ignore[misc]  # gevent ships no types
    """A gevent socket whose reads keep ``recvmsg``'s ancillary data (the kernel stamp).

    One read has one stamp, its newest segment's. The first read of a response is the
    library's header read, in the request's greenlet: when the client is busy it runs late,
    after the headers and several events have queued up, and would date them all by the
    last. While that read waits, the hub's sweeps *peek* at the socket (nothing consumed)
    and note how many bytes had arrived by when (:attr:`marks`); :func:`library_read_pieces`
    then dates each part of the read by the sweep that first saw it.
    """

    last_anc: list[Any] = []  # of the latest read; each instance sets its own
    last_data = b""  # the latest read's bytes (the header read's, for the marks)
    consumed = 0  # bytes all reads returned so far: the offset of the next byte
    #: (end offset, ancillary data or realtime seconds): bytes up to the offset had arrived by that stamp
    marks: list[Any] = []
    _response_pending = False  # a request went out: the next read is its response's first
    #: the kernel stamps its received segments (set once, when the socket is made): the hub
    #: reader need not ask again for every response it reads from the kept-alive connection
    kernel_stamped = False

    def sendall(self, data: bytes, flags: int = 0) -> None:
        # A request is far smaller than the send buffer, so one send on the non-blocking socket
        # usually takes all of it. gevent's sendall would first ask the kernel for SO_SNDBUF (a
        # system call per request, to size chunks for PyPy) and loop in Python; it only gets
        # what one send left over, with its waiting and deadline.
        try:
            sent = self._sock.send(data, flags)
        except BlockingIOError:
            sent = 0
        if sent < len(data):
            super().sendall(memoryview(data)[sent:], flags)
        self._response_pending = True

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        if self._response_pending and not flags:
            self._response_pending = False
            data, anc = self._first_read(bufsize)
        else:
            data, anc, _flags, _addr = self.recvmsg(bufsize, kstamp.ANC_BYTES, flags)
        self.last_anc, self.last_data = anc, data
        self.consumed += len(data)
        return data

    def _first_read(self, bufsize: int) -> tuple[bytes, list[Any]]:
        self.marks = []
        poller, raw = arrival_poller, self._sock
        fd = raw.fileno()
        if poller is not None:
            try:  # already there: no wait, nothing to note
                data, anc, _flags, _addr = raw.recvmsg(bufsize, kstamp.ANC_BYTES)
                return data, anc
            except BlockingIOError:
                pass
            try:
                # on_arrival: one note per arrival; the bytes stay queued until this read takes them
                poller.add(fd, lambda _now, _offset: self._note(raw), on_arrival=True)
            except (OSError, ValueError):  # cannot watch it: one stamp for the read, as before
                poller = None
        # The sweeps need the loop; the watcher's thread notes arrivals while the loop is stalled.
        rx_start = watch.start(fd) if poller is not None else None
        start = self.consumed
        try:
            data, anc, _flags, _addr = self.recvmsg(bufsize, kstamp.ANC_BYTES)
        finally:
            if poller is not None:
                poller.remove(fd)
            if rx_start is not None:
                noted = watch.notes_as_marks(fd, rx_start, start)
                watch.stop(fd)
                if noted:
                    self.marks = sorted(self.marks + noted, key=lambda m: m[0])
        return data, anc

    def _note(self, raw: socket.socket) -> None:
        """From a sweep: how many bytes are queued now, and the newest one's stamp."""
        try:
            data, anc, _flags, _addr = raw.recvmsg(_PEEK_BYTES, kstamp.ANC_BYTES, _PEEK)
        except OSError:
            return
        end = self.consumed + len(data)
        marks = self.marks
        if data and anc and (not marks or end > marks[-1][0]):
            marks.append((end, anc))


class RequestTiming:
    """The phases of one request as :func:`send_request` observed them, on ``clock``'s timeline.

    Each attribute is one clock reading (seconds), taken at the moment it names; ``None``
    means the moment did not happen (no new connection, nothing sent, no headers).
    """

    __slots__ = ("clock", "reused", "connect_start_s", "connect_end_s", "sent_s", "headers_s")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.reused: bool | None = None  #: the request went out on a kept-alive connection
        self.connect_start_s: float | None = None  #: a new connection's connect began
        self.connect_end_s: float | None = None  #: ...and ended (established, or failed)
        self.sent_s: float | None = None  #: the request's last byte was handed to the kernel
        self.headers_s: float | None = None  #: the response headers arrived


#: The timing of the request each greenlet is sending (its connect is timed by the pool's
#: ``_create_socket``, which cannot be handed the object: several greenlets share one pool).
_sending: dict[Any, RequestTiming] = {}


def _timed_connects(create: Callable[[], Any]) -> Callable[[], Any]:
    def create_socket() -> Any:
        timing = _sending.get(getcurrent())
        if timing is None:  # not one of ours (a plain library request)
            return create()
        timing.reused = False
        timing.connect_start_s = timing.clock()
        try:
            return create()
        finally:
            timing.connect_end_s = timing.clock()

    return create_socket


#: Fresh connections tried after kept-alive ones the server had already closed, per request.
STALE_RETRY_LIMIT = 2
#: How often a request was re-sent because its kept-alive connection turned out closed, and how
#: often the process was held up inside the send so long that the kernel dated it (below).
stats = {"stale_connection_retries_count": 0, "kernel_dated_sends_count": 0}
#: A send that takes longer than this (a small request normally takes microseconds) was held
#: up: the process was descheduled or the loop stalled before or after the bytes left.
SEND_STALL_S = 0.002
#: A write that takes longer than this was preempted on its way out (a small loopback write
#: takes 10-30 us), see :func:`sent_time`.
SEND_PREEMPTED_S = 0.0001
#: A request this small goes into an idle connection's send buffer in one write.
ONE_WRITE_BYTES = 16384
#: Byte offset of ``tcpi_last_data_sent`` (ms since the connection last sent data) in Linux's
#: ``struct tcp_info``: after 8 one-byte fields and nine 32-bit ones.
_TCPI_LAST_DATA_SENT = 44
_TCP_INFO = getattr(socket, "TCP_INFO", None)


#: ``read_head(sock, pool, http_client, clock) -> (response, headers_s)``: reads a response's
#: head another way than the library's header read (the event loop's, :mod:`tokenswarm.wire.reader`);
#: ``headers_s`` None means "date the headers from the socket's marks" (:func:`_headers_time`).
ReadHead = Callable[[Any, Any, Any, Callable[[], float]], "tuple[Any, float | None]"]


def send_request(http_client: Any, path: str, body: bytes, headers: dict[str, str],
                 timing: RequestTiming, read_head: ReadHead | None = None) -> Any:
    """POST ``body`` to ``path`` on a pooled connection and read the response headers.

    What ``HTTPClient.request`` does for a POST with a bytes body, with each phase timed into
    ``timing``. A POST is sent again only in the one case where the server provably never
    read it: the connection was a kept-alive one and it ended before a single byte of a
    response (the server had closed it while idle; llama.cpp's server closes every
    connection after a streamed response without saying ``Connection: close``, and a close
    that lands after the liveness peek races the next request). Then the request goes out
    again on a fresh connection, as Go's ``net/http`` does for ``errServerClosedIdle``; the
    retry is counted (``stats``) and the phases are those of the attempt that was answered,
    so the lost attempt's time is the generator's send delay, never server time.
    Returns the library's response, its body unread -- or, with ``read_head``, what it returns
    for a stamped plain-TCP socket (the event loop reads the head: no wake-up of this greenlet
    and no library parse in between).
    """
    cpool = http_client._connection_pool
    if not getattr(cpool, "_tokenswarm_timed", False):
        cpool._create_socket = _timed_connects(cpool._create_socket)
        cpool._tokenswarm_timed = True
    data = request_head(http_client, path, body, headers) + body  # one write: a separate small write stalls on Nagle
    for _ in range(STALE_RETRY_LIMIT):
        try:
            return _send_once(http_client, cpool, data, timing, read_head)
        except HTTPConnectionClosed:
            if not timing.reused:
                raise
            stats["stale_connection_retries_count"] += 1
            timing.connect_start_s = timing.connect_end_s = timing.sent_s = None
    return _send_once(http_client, cpool, data, timing, read_head)  # the last attempt: whatever happens stands


_CL_PROBE = "Content-Length: 1\r\n\r\n"  # how the library ends the head of a 1-byte POST body
_HEADS_MAX = 64


def request_head(http_client: Any, path: str, body: bytes, headers: dict[str, str]) -> bytes:
    """The request line and headers ``http_client._build_request`` writes for this POST, encoded.

    The library builds and validates them afresh for every request (~9 us); they differ only in
    ``Content-Length``, which it adds last. So the head is built once per (path, headers) with
    a 1-byte body and its ``Content-Length: 1`` ending is replaced by the body's length: the
    same bytes. Headers that set the length or the framing themselves go to the library.
    """
    heads = getattr(http_client, "_tokenswarm_heads", None)
    if heads is None:
        heads = http_client._tokenswarm_heads = {}
    key = (path, tuple(headers.items()))
    prefix = heads.get(key)
    if prefix is None:
        probe = http_client._build_request("POST", path, body=b"x", headers=headers, chunked=False)
        own = any(k.lower() in ("content-length", "transfer-encoding") for k in headers)
        prefix = b"" if own or not probe.endswith(_CL_PROBE) else probe[:-len(_CL_PROBE)].encode("latin-1")
        if len(heads) >= _HEADS_MAX:
            heads.clear()
        heads[key] = prefix
    if not prefix:  # not the library's usual ending: let it build this one
        built: str = http_client._build_request("POST", path, body=body, headers=headers, chunked=False)
        return built.encode("latin-1")
    return prefix + b"Content-Length: %d\r\n\r\n" % len(body)


def _send_once(http_client: Any, cpool: Any, data: bytes, timing: RequestTiming,
               read_head: ReadHead | None = None) -> Any:
    """One attempt: a socket from the pool, the request written, the response headers read."""
    me = getcurrent()
    _sending[me] = timing
    try:
        timing.reused = True  # unless the pool has to connect (_timed_connects)
        sock = cpool.get_socket()
    finally:
        del _sending[me]
    clock = timing.clock
    try:
        before = clock()
        sock.sendall(data)
        timing.sent_s = sent_time(sock, before, clock(), len(data), clock)
    except OSError as exc:
        if exc.errno not in (errno.ECONNRESET, errno.EPIPE):
            cpool.release_socket(sock)
            raise
        # The server may have answered early (401 on a big body) and closed: read that
        # answer, as the library does; the response releases the socket either way.
    except BaseException:  # a deadline or a kill inside a blocked send: free the pool slot
        cpool.release_socket(sock)
        raise
    if read_head is not None and getattr(sock, "kernel_stamped", False):  # a stamped plain-TCP socket
        response, headers_s = read_head(sock, cpool, http_client, clock)
        note_headers(timing, _headers_time(sock, clock) if headers_s is None else headers_s)
        return response
    response = HTTPSocketPoolResponse(sock, cpool, block_size=http_client.block_size, method="POST",
                                      headers_type=http_client.headers_type)
    note_headers(timing, _headers_time(sock, clock))
    return response


def note_headers(timing: RequestTiming, headers_s: float) -> None:
    """Note the headers' arrival. The answer proves the request had left by then: a send dated
    later (the kernel's ``tcpi_last_data_sent`` counts in jiffies, 1-4 ms; seen on 2026-12-05 under
    a loaded test run: headers 1.9 ms "before" the send) is moved back to the headers' time."""
    timing.headers_s = headers_s
    if timing.sent_s is not None and headers_s < timing.sent_s:
        timing.sent_s = headers_s


def library_response(sock: Any, cpool: Any, http_client: Any, raw: bytes, pieces: list[tuple[int, float]],
                     clock: Callable[[], float]) -> Any:
    """The library's response to a request whose first bytes were read elsewhere (the event
    loop's head read): it parses ``raw`` -- every byte read so far, from the response's first
    -- and reads on from ``sock`` as usual. ``pieces`` are ``(end offset in raw, arrival_s)``:
    the bytes before each end had arrived by then (``clock``'s timeline), so the headers and the
    body bytes that came with them keep their dates (:attr:`StampedSocket.marks`, one read)."""
    if raw:
        offset = kstamp.real_minus_mono(clock)
        start = sock.consumed
        sock.consumed = start + len(raw)
        sock.last_data = raw
        sock.marks = [(start + end, when + offset) for end, when in pieces]
        sock.last_anc = kstamp.ancillary(pieces[-1][1] + offset)
        sock._response_pending = False  # the response's first read has been done
    return HTTPSocketPoolResponse(sock, cpool, block_size=http_client.block_size, method="POST",
                                  headers_type=http_client.headers_type, pre_buffered=raw)


def sent_time(sock: Any, before: float, after: float, nbytes: int, clock: Callable[[], float]) -> float:
    """When a request's bytes left, given the clock read just before and just after its write.

    A write that took longer than :data:`SEND_PREEMPTED_S` was held up. A hold-up longer than
    :data:`SEND_STALL_S` is dated by the kernel. A shorter one, for a small request (at most
    :data:`ONE_WRITE_BYTES`, what an idle connection's send buffer takes at once), came after
    the bytes were in the kernel, on loopback already with the server the write woke: the
    scheduler ran that server (or another task) before this process read the clock again, so
    the bytes left at ``before`` (measured on 2026-12-03 at 64 streams on 2 cores: 281 of 1,259
    TTFTs read 0.5-2 ms short, none long). A larger request may have left late: ``after``.
    """
    held = after - before
    if held > SEND_STALL_S:
        return kernel_sent_time(sock, before, after, clock)
    if held > SEND_PREEMPTED_S and nbytes <= ONE_WRITE_BYTES:
        return before
    return after  # the last byte is in the kernel's send buffer now


def kernel_sent_time(sock: Any, before: float, after: float, clock: Callable[[], float]) -> float:
    """When a held-up send's bytes left, from the kernel, within ``[before, after]``.

    A process descheduled right after handing the request to the kernel (seen beside a busy
    vLLM on 2 cores: 300-700 ms) would read the send time after the server had answered,
    giving a negative TTFT and a server that looks faster than it is; descheduled before the
    write, the send really was late. The kernel knows which: TCP_INFO's ``tcpi_last_data_sent``
    is how long ago the connection last sent data (milliseconds, counted in jiffies: one
    jiffy of resolution, 1-4 ms). Without TCP_INFO the reading after the write stands.
    """
    if _TCP_INFO is None:
        return after
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCPI_LAST_DATA_SENT + 4)
        now = clock()
    except OSError:
        return after
    if len(info) < _TCPI_LAST_DATA_SENT + 4:
        return after
    ago_ms = int.from_bytes(info[_TCPI_LAST_DATA_SENT:_TCPI_LAST_DATA_SENT + 4], sys.byteorder)
    stats["kernel_dated_sends_count"] += 1
    return min(max(now - ago_ms / 1000.0, before), after)


def _headers_time(sock: Any, clock: Callable[[], float]) -> float:
    """When the response headers that ``sock``'s latest read completed had arrived.

    The first arrival note that covers the end of the headers, when notes were taken while the
    header read waited; else the read's own stamp (its newest segment's); else now.
    """
    marks = getattr(sock, "marks", None)
    if marks and kstamp.maps_onto(clock):
        raw = sock.last_data
        head_end = raw.find(b"\r\n\r\n") if raw.startswith(b"HTTP/") else -1
        if head_end >= 0:
            end = sock.consumed - len(raw) + head_end + 4
            for mark_end, stamp in marks:
                if mark_end >= end:
                    now = clock()
                    return _mark_time(stamp, kstamp.real_minus_mono(clock), now)
    return _read_time(sock, clock)


def _read_time(sock: Any, clock: Callable[[], float]) -> float:
    now = clock()
    anc = getattr(sock, "last_anc", None) if sock is not None else None
    if anc and kstamp.maps_onto(clock):
        now = kstamp.stamp_of(anc, kstamp.real_minus_mono(clock), now)
    return now


def library_read_time(resp: Any, clock: Callable[[], float]) -> float:
    """When the bytes of the HTTP library's latest read on ``resp``'s socket arrived.

    The kernel stamp of that read on ``clock``'s timeline when the socket is a
    :class:`StampedSocket` and ``clock`` is CLOCK_MONOTONIC-based; otherwise ``clock()``.
    """
    return _read_time(getattr(resp, "_sock", None), clock)


def library_read_pieces(resp: Any, body: bytes, clock: Callable[[], float],
                        chunked: bool = True) -> list[tuple[float, bytes]]:
    """The body bytes the library's header read left over, cut where they arrived apart.

    ``body`` is what the library parsed out of the raw read (de-chunked when ``chunked``).
    When sweeps noted arrivals while that read waited (:attr:`StampedSocket.marks`), each
    piece gets the stamp of the first sweep that saw its last byte queued, and bytes that
    came after the last sweep the read's own stamp; otherwise the whole is one piece with
    the read's stamp.
    """
    sock: Any = getattr(resp, "_sock", None)  # a StampedSocket when kernel stamps are on
    marks = getattr(sock, "marks", None)
    if marks and kstamp.maps_onto(clock):
        raw = sock.last_data
        head_end = raw.find(b"\r\n\r\n") if raw.startswith(b"HTTP/") else -1  # the read began the response
        if head_end >= 0:
            raw_start = sock.consumed - len(raw) + head_end + 4
            cuts = (_body_cuts(raw[head_end + 4:], raw_start, marks) if chunked
                    else _plain_cuts(len(raw) - head_end - 4, raw_start, marks))
            if cuts and cuts[-1][0] == len(body):
                now = clock()
                offset = kstamp.real_minus_mono(clock)
                out, pos = [], 0
                for end, anc in cuts:
                    if end > pos:
                        t = library_read_time(resp, clock) if anc is None else _mark_time(anc, offset, now)
                        out.append((t, body[pos:end]))
                        pos = end
                return out
    return [(library_read_time(resp, clock), body)]


def _mark_time(stamp: list[Any] | float, offset: float, now: float) -> float:
    """A mark's stamp on the monotonic timeline: ancillary data (a sweep's peek) or realtime
    seconds (the watcher's note); ``now`` when implausible."""
    if isinstance(stamp, float):
        return kstamp.plausible(stamp - offset, now)
    return kstamp.stamp_of(stamp, offset, now)


def _cuts(marks: list[Any], to_body: Callable[[int], int], size: int) -> list[tuple[int, list[Any] | None]]:
    """``marks`` (stream offset, stamp) as increasing body offsets, ending at ``size``.

    ``to_body`` maps a stream offset to a body offset. The last cut carries the first mark
    that covers the end of the body; ``None`` there means bytes that arrived after the last
    sweep, dated by the read itself (its newest segment).
    """
    cuts: list[tuple[int, list[Any] | None]] = []
    for end, anc in marks:
        d = to_body(end)
        if d >= size:
            return cuts + [(size, anc)]
        if d > (cuts[-1][0] if cuts else 0):
            cuts.append((d, anc))
    return cuts + [(size, None)]


def _plain_cuts(size: int, raw_start: int, marks: list[Any]) -> list[tuple[int, list[Any] | None]]:
    """:func:`_cuts` for a body without framing (raw bytes are body bytes)."""
    return _cuts(marks, lambda end: end - raw_start, size)


def _body_cuts(raw_body: bytes, raw_start: int, marks: list[Any]) -> list[tuple[int, list[Any] | None]] | None:
    """:func:`_cuts` for a chunked body: raw offsets map through the framing to de-chunked
    offsets of ``raw_body``'s data (``raw_start``: the stream offset of its first byte).
    None when the framing does not parse."""
    try:
        pieces = data_spans(raw_body)
    except ChunkedError:
        return None
    spans = []  # (raw data start, raw data end, de-chunked start) of each piece of chunk data
    total = 0
    for start, end in pieces:
        spans.append((start, end, total))
        total += end - start

    def dechunked(stream_off: int) -> int:
        raw_off, d = stream_off - raw_start, 0
        for start, end, dstart in spans:
            if raw_off <= start:
                return dstart
            d = dstart + min(raw_off, end) - start
            if raw_off <= end:
                return d
        return d

    return _cuts(marks, dechunked, total)


def _stamped_tcp_socket(family: int, socktype: int, protocol: int) -> gevent.socket.socket:
    sock = StampedSocket(family, socktype, protocol)
    sock.kernel_stamped = kstamp.enable(sock)
    return sock


def socket_alive(sock: Any) -> bool:
    """True if a pooled keep-alive socket can carry the next request (never yields)."""
    if sock is None:
        return False
    try:
        if sock.fileno() < 0:
            return False
        raw = getattr(sock, "_sock", sock)  # the OS-level socket under gevent's wrapper
        raw.recv(1, _PEEK)
    except BlockingIOError:
        return True  # nothing to read: idle, as it should be
    except (OSError, ValueError):
        return False
    return False  # EOF or unexpected bytes


def tune_pool(http_client: Any, keep_alive: bool = True) -> None:
    """Adjust ``http_client``'s pool (idempotent; before its first connection): the liveness
    check, stamped sockets for plain TCP, and with ``keep_alive=False`` a new connection for
    every request (a socket is closed after its response instead of kept)."""
    pool = getattr(http_client, "_connection_pool", None)
    if not isinstance(pool, ConnectionPool) or getattr(pool, "_tokenswarm_tuned", False):
        return
    pool._is_socket_alive = socket_alive  # type: ignore[method-assign]  # the library's own check, replaced
    if not keep_alive:
        pool.return_socket = pool.release_socket  # type: ignore[method-assign]  # closes it, frees its slot
    if kstamp.ENABLED and not isinstance(pool, SSLConnectionPool):  # OpenSSL reads TLS sockets itself
        pool._create_tcp_socket = _stamped_tcp_socket  # type: ignore[method-assign]  # stamped sockets
    pool._tokenswarm_tuned = True  # type: ignore[attr-defined]  # a mark on the library's pool: tuned once


def discard_connection(resp: Any) -> None:
    """Close (never reuse) the socket of a response we stopped reading halfway."""
    unhook = getattr(resp, "unhook", None)  # the event loop's head read: stop it; the socket is with the result
    if unhook is not None:
        resp = unhook()
    cpool, sock = getattr(resp, "_pool", None), getattr(resp, "_sock", None)
    resp._sock = None
    resp._pool = None
    if sock is not None:
        if cpool is not None:
            cpool.release_socket(sock)  # closes it and frees the pool slot
        else:
            sock.close()
