"""Two adjustments to geventhttpclient's connection pool that the measurement needs.

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

Both go through the pool's own extension points (``_is_socket_alive`` and the documented
``_create_tcp_socket`` factory) on the pool instance; nothing global is patched.
"""

from __future__ import annotations

import socket
import time
from typing import Any, Callable

import gevent.socket
from geventhttpclient.connectionpool import ConnectionPool, SSLConnectionPool

from tokenswarm import kstamp

_PEEK = socket.MSG_PEEK | getattr(socket, "MSG_DONTWAIT", 0)


class StampedSocket(gevent.socket.socket):
    """A gevent socket whose reads keep ``recvmsg``'s ancillary data (the kernel stamp)."""

    last_anc: list = []  # of the latest read; each instance sets its own

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        data, anc, _flags, _addr = self.recvmsg(bufsize, kstamp.ANC_BYTES, flags)
        self.last_anc = anc
        return data


def library_read_time(resp: Any, clock: Callable[[], float]) -> float:
    """When the bytes of the HTTP library's latest read on ``resp``'s socket arrived.

    The kernel stamp of that read on ``clock``'s timeline when the socket is a
    :class:`StampedSocket` and ``clock`` is CLOCK_MONOTONIC-based; otherwise ``clock()``.
    """
    now = clock()
    sock = getattr(resp, "_sock", None)
    anc = getattr(sock, "last_anc", None) if sock is not None else None
    if anc and kstamp.maps_onto(clock):
        now = kstamp.stamp_of(anc, time.time() - now, now)
    return now


def _stamped_tcp_socket(family: int, socktype: int, protocol: int) -> gevent.socket.socket:
    sock = StampedSocket(family, socktype, protocol)
    kstamp.enable(sock)
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


def tune_pool(http_client: Any) -> None:
    """Apply both adjustments to ``http_client``'s pool (idempotent; before its first connection)."""
    pool = getattr(http_client, "_connection_pool", None)
    if not isinstance(pool, ConnectionPool) or getattr(pool, "_tokenswarm_tuned", False):
        return
    pool._is_socket_alive = socket_alive
    if kstamp.ENABLED and not isinstance(pool, SSLConnectionPool):  # OpenSSL reads TLS sockets itself
        pool._create_tcp_socket = _stamped_tcp_socket
    pool._tokenswarm_tuned = True
