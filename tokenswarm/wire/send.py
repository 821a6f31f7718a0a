"""Sending a request on a pooled connection, each phase timed apart (:func:`send_request`).

tokenswarm writes the request itself on a socket from the pool, so each phase is one clock
reading at the moment it names: a new connection's connect (TCP, plus TLS) is timed on its
own (around the pool's ``_create_socket``, wrapped on the pool instance), ``sent`` is read
when the request's last byte has been handed to the kernel (the kernel dates a send the
process was held up in: :func:`sent_time`), and ``headers`` is when the response headers
arrived (the header read's kernel stamp where there is one). TTFT counts from ``sent``, so
neither the connect nor the generator's own delay before the send is in it.

The head is read by the event loop where it can be (stamped plain-TCP sockets:
``send_request``'s ``read_head``, :class:`tokenswarm.wire.head.HeadReader`); the library then
parses only the heads that are not a ``200`` chunked stream, from the bytes already read
(:func:`tokenswarm.wire.libread.library_response`).
"""

from __future__ import annotations

import errno
import socket
import sys
from typing import Any, Callable

from geventhttpclient.response import HTTPConnectionClosed, HTTPSocketPoolResponse
from greenlet import getcurrent

from tokenswarm.wire.libread import _headers_time


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
#: head another way than the library's header read (the event loop's, :mod:`tokenswarm.wire.head`);
#: ``headers_s`` None means "date the headers from the socket's marks"
#: (:func:`tokenswarm.wire.libread._headers_time`).
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
