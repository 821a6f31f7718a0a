"""Adjustments to geventhttpclient's connection pool that the measurement needs, and its sockets.

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
* **Arrivals noted while the header read waits.** One read has one stamp (its newest
  segment's); a header read that runs late would give every event queued behind the headers
  the last one's. The stream poller's sweeps peek at the socket meanwhile and note what had
  arrived by when -- and so does the arrival watcher's thread (:mod:`tokenswarm.wire.watch`)
  when the loop itself is stalled -- and :func:`tokenswarm.wire.libread.library_read_pieces`
  dates the read's parts by those notes.
* **Keep-alive off** (``tune_pool(..., keep_alive=False)``): every socket is closed after its
  response instead of going back to the pool, so each request opens a new connection.

The request is written and timed in :mod:`tokenswarm.wire.send`; the library's reads are
dated in :mod:`tokenswarm.wire.libread`. The adjustments go through the pool's own extension
points (``_is_socket_alive``, ``return_socket`` and the documented ``_create_tcp_socket``
factory) on the pool instance; nothing global is patched.
"""

from __future__ import annotations

import socket
from typing import Any

import gevent.socket
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool

from tokenswarm.wire import kstamp, watch

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
    and note how many bytes had arrived by when (:attr:`marks`);
    :func:`tokenswarm.wire.libread.library_read_pieces` then dates each part of the read by the
    sweep that first saw it.
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
