"""The simulator's HTTP/1.1 plumbing: one client connection, reading a request, writing a response.

:class:`Conn` writes without yielding (the engine greenlet writes each chunk straight to the
socket) and queues what the kernel does not take; :func:`read_request` reads one request
(headers, then a ``content-length`` or chunked body) within the simulator's size limits;
:func:`respond` writes a whole response.
"""

from __future__ import annotations

import socket
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

import gevent
import gevent.event

from tokenswarm.sim import api
from tokenswarm.wire import kstamp

monotonic = time.monotonic
MAX_HEADER_BYTES = 65536
MAX_BODY_BYTES = 64 * 1024 * 1024
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed", 411: "Length Required",
            413: "Payload Too Large", 429: "Too Many Requests", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}
SERVER_HEADER = b"server: tokenswarm-sim\r\n"


class Conn:
    """One client connection: immediate non-blocking writes plus an ordered backlog."""

    __slots__ = ("sock", "raw", "backlog", "sending", "closed", "wake", "recv_s", "stamped")

    def __init__(self, sock: Any) -> None:  # gevent's socket
        self.sock = sock
        self.recv_s: float | None = None  # when the bytes completing the current request arrived
        self.stamped = kstamp.enable(sock)
        self.raw = sock._sock  # the real non-blocking socket under gevent's wrapper
        self.backlog: deque[bytes] = deque()
        self.sending = False
        self.closed = False
        self.wake = gevent.event.Event()

    def recv(self, n: int) -> bytes:
        """Read (cooperatively) and set ``recv_s``: the kernel's arrival stamp when available,
        so a busy simulator's truth log does not move the request's arrival later."""
        if not self.stamped:
            data: bytes = self.sock.recv(n)
            self.recv_s = monotonic()
            return data
        msg: tuple[bytes, list[tuple[int, int, bytes]], int, Any] = self.sock.recvmsg(n, kstamp.ANC_BYTES)
        data, anc, _flags, _addr = msg
        now = monotonic()
        self.recv_s = kstamp.stamp_of(anc, time.time() - now, now)
        return data

    def write_nowait(self, data: bytes) -> bool:
        """Write without yielding; queue what the kernel does not take. False if the peer is gone."""
        if self.closed:
            return False
        if self.backlog or self.sending:
            self.backlog.append(data)
            self.wake.set()
            return True
        try:
            n = self.raw.send(data)
        except BlockingIOError:
            n = 0
        except OSError:
            self.closed = True
            return False
        if n < len(data):
            self.backlog.append(data[n:])
            self.wake.set()
        return True

    def drain(self) -> None:
        """Send the backlog cooperatively (called from the connection greenlet only)."""
        self.sending = True
        try:
            while self.backlog and not self.closed:
                self.sock.sendall(self.backlog[0])
                self.backlog.popleft()
        except OSError:
            self.closed = True
        finally:
            self.sending = False

    def peer_closed(self) -> bool:
        """Non-blocking check whether the client closed its side."""
        if self.closed:
            return True
        try:
            peeked: bytes = self.raw.recv(1, socket.MSG_PEEK)
            return peeked == b""
        except BlockingIOError:
            return False
        except OSError:
            return True

    def cut(self) -> None:
        """Abort the connection (RST) as a network fault would."""
        self.closed = True
        try:
            self.raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
            self.raw.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass



@dataclass
class Request:
    """One request as read: its line's parts, headers (lower-case names), body, and keep-alive."""

    method: str
    target: str
    headers: dict[str, str]
    body: bytes
    keep: bool


class BadRequest(Exception):
    """A request the simulator refuses before dispatch (answered, then the connection closes)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


def read_request(conn: Conn, buf: bytearray) -> Request | None:
    """The next request on ``conn`` (``buf`` holds bytes read past the previous one); None when
    the client went away. Raises :class:`BadRequest` for a request line, header block or body
    the simulator does not take."""
    i = buf.find(b"\r\n\r\n")
    while i < 0:
        if len(buf) > MAX_HEADER_BYTES:
            raise BadRequest(431, "Request headers too large")
        data = conn.recv(65536)
        if not data:
            return None
        buf += data
        i = buf.find(b"\r\n\r\n")
    head = bytes(buf[:i]).decode("latin-1")
    del buf[: i + 4]
    lines = head.split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise BadRequest(400, "Malformed HTTP request line")
    method, target, version = parts
    headers: dict[str, str] = {}
    for line in lines[1:]:
        k, _, v = line.partition(":")
        headers[k.strip().lower()] = v.strip()
    conn_hdr = headers.get("connection", "").lower()
    keep = (version == "HTTP/1.1" and conn_hdr != "close") or (conn_hdr == "keep-alive")
    if "chunked" in headers.get("transfer-encoding", "").lower():
        body = _read_chunked(conn, buf)
    else:
        body = _read_sized(conn, buf, headers.get("content-length", "0"))
    return None if body is None else Request(method, target, headers, body, keep)


def _read_sized(conn: Conn, buf: bytearray, content_length: str) -> bytes | None:
    try:
        length = int(content_length or 0)
    except ValueError:
        raise BadRequest(400, "Bad Content-Length") from None
    if length < 0 or length > MAX_BODY_BYTES:
        raise BadRequest(413, "Request body too large")
    while len(buf) < length:
        data = conn.recv(max(65536, length - len(buf)))
        if not data:
            return None
        buf += data
    body = bytes(buf[:length])
    del buf[:length]
    return body


def _read_chunked(conn: Conn, buf: bytearray) -> bytes | None:
    body = bytearray()
    while True:
        i = buf.find(b"\r\n")
        while i < 0:
            data = conn.recv(65536)
            if not data:
                return None
            buf += data
            i = buf.find(b"\r\n")
        size = int(bytes(buf[:i]).split(b";")[0] or b"0", 16)
        del buf[: i + 2]
        while len(buf) < size + 2:
            data = conn.recv(65536)
            if not data:
                return None
            buf += data
        body += buf[:size]
        del buf[: size + 2]
        if size == 0:
            return bytes(body)
        if len(body) > MAX_BODY_BYTES:
            return None


def respond(conn: Conn, status: int, body: bytes, keep: bool, ctype: bytes = b"application/json",
            extra: bytes = b"") -> None:
    """A whole response (status line, headers, body) in one write."""
    head = (b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, "Unknown").encode()) + SERVER_HEADER
            + b"content-type: " + ctype + b"\r\ncontent-length: %d\r\n" % len(body) + extra
            + (b"" if keep else b"connection: close\r\n") + b"\r\n")
    conn.sock.sendall(head + body)


def error_response(conn: Conn, status: int, message: str) -> None:
    """An OpenAI-style error, closing the connection."""
    respond(conn, status, api.error_body(status, message), keep=False)
