"""Incremental Server-Sent-Events parser for OpenAI-style streams (pure, no I/O).

Bytes are fed exactly as the socket delivered them; complete events come out. It copes
with what real servers and proxies do: a ``data:`` line split across TCP segments,
``\\r\\n`` line ends, comment / keep-alive lines (``: ping``), ``event:`` lines (an
``event: error`` marks the payload as an error), ``id:``/``retry:`` fields, and a stream
that ends without a blank line after its last event.

Per the SSE spec an event is dispatched at a blank line and several ``data:`` lines of one
event are joined with ``\\n``. Servers that omit the blank line between events (seen in
the wild) are handled too: a new ``data:`` line whose predecessor already holds a complete
JSON object or ``[DONE]`` dispatches the previous one.
"""

from __future__ import annotations

__all__ = ["SSEParser", "SSEEvent"]

#: (event type or None, data payload bytes)
SSEEvent = tuple[str | None, bytes]

#: The most bytes one event (or one line of it) may hold while it is incomplete: the parser's
#: memory per stream is bounded by it whatever the server sends.
MAX_EVENT_BYTES = 8 * 1024 * 1024


class StreamLimitExceeded(Exception):
    """A stream sent more than it could legitimately carry, or a count that cannot be true;
    raised while it is read to cut it (the message is the record's error)."""


def _too_large() -> StreamLimitExceeded:
    return StreamLimitExceeded(f"protocol error: an SSE event exceeded {MAX_EVENT_BYTES} bytes before it ended")


class SSEParser:
    """Feed bytes, get ``(event_type, data)`` tuples for every complete event."""

    __slots__ = ("_tail", "_data", "_event", "_size")

    def __init__(self) -> None:
        self._tail = b""  # incomplete last line
        self._data: list[bytes] = []  # data lines of the event being built
        self._event: bytes | None = None
        self._size = 0  # bytes of the data lines held in _data

    @property
    def idle(self) -> bool:
        """No partial line or event held: the next byte starts a new event."""
        return not self._tail and not self._data and self._event is None

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        """Parse ``chunk`` (any split) and return the events it completed."""
        if not self._tail and not self._data and self._event is None:
            # The commonest read of all: exactly one complete "data: ...\n\n" event.
            n = len(chunk)
            if n > 8 and chunk[:6] == b"data: " and chunk[-2:] == b"\n\n" and chunk.find(b"\n", 6) == n - 2:
                return [(None, chunk[6:-2])]
        if self._data or self._event is not None or b"\r" in chunk or b"\r" in self._tail:
            return self._feed_lines(chunk)
        # Fast path for the common framing ("data: {...}\n\n"): split whole events at once
        # instead of walking lines; anything unusual goes through the line parser.
        buf = self._tail + chunk if self._tail else chunk
        parts = buf.split(b"\n\n")
        tail = parts.pop()
        self._tail = b""
        out: list[SSEEvent] = []
        for ev in parts:
            if ev[:6] == b"data: " and ev.find(b"\n") < 0:
                out.append((None, ev[6:]))
            elif ev:
                out.extend(self._feed_lines(ev + b"\n\n"))
        if tail:
            if tail.find(b"\n") >= 0:
                out.extend(self._feed_lines(tail))  # complete lines of an unfinished event
            else:
                if len(tail) > MAX_EVENT_BYTES:
                    raise _too_large()
                self._tail = tail
        return out

    def _feed_lines(self, chunk: bytes) -> list[SSEEvent]:
        """The general line-by-line parser (CRLF, comments, event:, multi-line data...)."""
        if self._tail:
            chunk = self._tail + chunk
        lines = chunk.split(b"\n")
        self._tail = lines.pop()  # b"" when the chunk ended with a newline
        if len(self._tail) > MAX_EVENT_BYTES:
            raise _too_large()
        out: list[SSEEvent] = []
        data = self._data
        for line in lines:
            if line.endswith(b"\r"):
                line = line[:-1]
            if not line:  # blank line: dispatch
                if data:
                    out.append((self._event_name(), b"\n".join(data)))
                    data.clear()
                    self._size = 0
                self._event = None
                continue
            if line.startswith(b"data:"):
                payload = line[5:]
                if payload.startswith(b" "):
                    payload = payload[1:]
                if data and _looks_complete(data[-1]):
                    # Previous event never got its blank line; it was complete already.
                    out.append((self._event_name(), b"\n".join(data)))
                    data.clear()
                    self._size = 0
                    self._event = None
                data.append(payload)
                self._size += len(payload)
                if self._size > MAX_EVENT_BYTES:
                    raise _too_large()
            elif line.startswith(b":"):
                continue  # comment / keep-alive
            elif line.startswith(b"event:"):
                self._event = line[6:].strip()
            # id:, retry: and unknown fields carry nothing we need.
        return out

    def close(self) -> list[SSEEvent]:
        """End of stream: flush an event that was not terminated by a blank line."""
        out = self._feed_lines(b"\n") if self._tail else []
        if self._data:
            out.append((self._event_name(), b"\n".join(self._data)))
            self._data.clear()
            self._size = 0
        return out

    def _event_name(self) -> str | None:
        return self._event.decode("utf-8", "replace") if self._event else None


def _looks_complete(payload: bytes) -> bool:
    p = payload.rstrip()
    return p == b"[DONE]" or (p.startswith(b"{") and p.endswith(b"}"))
