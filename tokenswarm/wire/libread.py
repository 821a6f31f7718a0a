"""The HTTP library's reads of a response, dated by when their bytes arrived.

The library reads the response headers itself, in the request's greenlet, and a server that
writes its headers and first events together (or a server catching up) puts the first chunk
in that read. The socket (:class:`tokenswarm.wire.pool.StampedSocket`) keeps each read's kernel
stamp and the arrival notes taken while the read waited (its ``marks``); here they become
times on the request clock's timeline: the headers' (:func:`_headers_time`), a read's
(:func:`library_read_time`), and those of the body bytes that came with the headers, cut where
they arrived apart (:func:`library_read_pieces`). :func:`library_response` hands the library a
response whose first bytes the event loop read (:mod:`tokenswarm.wire.head`), with their dates.
"""

from __future__ import annotations

from typing import Any, Callable

from geventhttpclient.response import HTTPSocketPoolResponse

from tokenswarm.wire import kstamp
from tokenswarm.wire.dechunk import ChunkedError, data_spans


def library_response(sock: Any, cpool: Any, http_client: Any, raw: bytes, pieces: list[tuple[int, float]],
                     clock: Callable[[], float]) -> Any:
    """The library's response to a request whose first bytes were read elsewhere (the event
    loop's head read): it parses ``raw`` -- every byte read so far, from the response's first
    -- and reads on from ``sock`` as usual. ``pieces`` are ``(end offset in raw, arrival_s)``:
    the bytes before each end had arrived by then (``clock``'s timeline), so the headers and the
    body bytes that came with them keep their dates
    (:attr:`tokenswarm.wire.pool.StampedSocket.marks`, one read)."""
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
    :class:`tokenswarm.wire.pool.StampedSocket` and ``clock`` is CLOCK_MONOTONIC-based;
    otherwise ``clock()``.
    """
    return _read_time(getattr(resp, "_sock", None), clock)


def library_read_pieces(resp: Any, body: bytes, clock: Callable[[], float],
                        chunked: bool = True) -> list[tuple[float, bytes]]:
    """The body bytes the library's header read left over, cut where they arrived apart.

    ``body`` is what the library parsed out of the raw read (de-chunked when ``chunked``).
    When sweeps noted arrivals while that read waited
    (:attr:`tokenswarm.wire.pool.StampedSocket.marks`), each piece gets the stamp of the first
    sweep that saw its last byte queued, and bytes that came after the last sweep the read's
    own stamp; otherwise the whole is one piece with the read's stamp.
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
