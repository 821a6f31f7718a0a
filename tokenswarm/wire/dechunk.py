"""Incremental HTTP/1.1 chunked-transfer decoder (pure, no I/O).

Why our own: geventhttpclient's parser calls back into Python for every body piece, which
costs more per SSE event than the rest of the read. Streaming servers send one HTTP chunk
per SSE event, so the fast path -- a read holding exactly whole chunks -- is a couple of
``find``/slice operations. Chunks split across reads, chunk extensions (``;name=value``)
and trailers are handled by the general path.
"""

from __future__ import annotations

__all__ = ["ChunkedDecoder", "ChunkedError", "data_spans"]

_SIZE, _DATA, _DATA_CRLF, _TRAILER, _DONE = range(5)
_HEX = b"0123456789abcdefABCDEF"


class ChunkedError(ValueError):
    """The body is not valid chunked transfer coding."""


class ChunkedDecoder:
    """``feed(bytes) -> payload bytes``; ``done`` once the terminating chunk and trailers are read."""

    __slots__ = ("_state", "_need", "_buf")

    def __init__(self) -> None:
        self._state = _SIZE
        self._need = 0  # bytes of chunk data still expected (state _DATA)
        self._buf = b""  # unconsumed input

    @property
    def idle(self) -> bool:
        """Between chunks with nothing buffered: the next byte starts a chunk-size line."""
        return self._state == _SIZE and not self._buf

    @property
    def done(self) -> bool:
        return self._state == _DONE

    @property
    def rest(self) -> bytes:
        """Bytes fed but not consumed (after the end: bytes that are not part of this message)."""
        return self._buf

    def feed(self, data: bytes) -> bytes:
        if self._state == _SIZE and not self._buf:
            # The commonest read of a stream: exactly one whole chunk ("1a4\r\n<data>\r\n").
            eol = data.find(b"\r\n", 0, 18)
            if eol > 0:
                size_text = data[:eol]
                if not size_text.strip(_HEX):
                    end = eol + 2 + int(size_text, 16)
                    if end + 2 == len(data) and end > eol + 2 and data[end:] == b"\r\n":
                        return data[eol + 2:end]
        buf = self._buf + data if self._buf else data
        spans = self._spans(buf)
        if len(spans) == 1:
            start, end = spans[0]
            return buf[start:end]
        return b"".join([buf[start:end] for start, end in spans])

    def _spans(self, buf: bytes) -> list[tuple[int, int]]:
        """Advance over ``buf`` (the unconsumed input plus a new read); the offsets
        ``[start, end)`` of every piece of chunk data in it, in order. Keeps what is left."""
        out: list[tuple[int, int]] = []
        pos, n = 0, len(buf)
        state = self._state
        while pos < n:
            if state == _SIZE:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    if n - pos > 1024:
                        raise ChunkedError("chunk size line too long")
                    break
                size_text = buf[pos:eol].split(b";", 1)[0].rstrip(b" \t")  # RFC 9112: BWS before ";" only
                if not size_text or size_text.strip(_HEX):
                    raise ChunkedError(f"invalid chunk size {size_text[:20]!r}")
                size = int(size_text, 16)
                pos = eol + 2
                if size == 0:
                    state = _TRAILER
                    continue
                end = pos + size
                if end + 2 <= n and buf[end:end + 2] == b"\r\n":  # the whole chunk is here
                    out.append((pos, end))
                    pos = end + 2
                    continue
                self._need = size
                state = _DATA
            elif state == _DATA:
                take = min(self._need, n - pos)
                out.append((pos, pos + take))
                pos += take
                self._need -= take
                if self._need == 0:
                    state = _DATA_CRLF
            elif state == _DATA_CRLF:
                if n - pos < 2:
                    break
                if buf[pos:pos + 2] != b"\r\n":
                    raise ChunkedError("missing CRLF after chunk data")
                pos += 2
                state = _SIZE
            elif state == _TRAILER:
                eol = buf.find(b"\r\n", pos)
                if eol < 0:
                    break
                if eol == pos:  # empty line: end of trailers and of the message
                    pos += 2
                    state = _DONE
                    break
                pos = eol + 2  # a trailer field: ignored
            else:
                break
        self._state = state
        self._buf = buf[pos:] if pos < n else b""
        return out


def data_spans(raw: bytes) -> list[tuple[int, int]]:
    """The offsets ``[start, end)`` in ``raw`` of every piece of chunk data of a chunked body
    (whole, or cut short where the reads so far end): the framing parsed by the same decoder
    that de-chunks the stream, so a raw byte offset maps onto the de-chunked body.

    Raises :class:`ChunkedError` when the framing does not parse.
    """
    return ChunkedDecoder()._spans(raw)
