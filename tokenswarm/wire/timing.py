"""Where a request and its tokens are timed: the one seam every stream's bytes and times pass.

Read this module first to know when each of a record's times is taken. Every time is one
reading of the request's clock (``perf_counter``; an injected clock in tests), taken once, at
the moment it names; kernel receive stamps are placed on that same timeline
(:mod:`tokenswarm.wire.kstamp`).

The request (:func:`tokenswarm.wire.send.send_request`)
    * due -- ``scheduled_at_s``: the caller's reading (closed loop: the user's turn began; open
      loop: the arrival's scheduled time).
    * connect -- around the pool's ``_create_socket`` (TCP connect, plus TLS), new
      connections only: ``connect_ms``.
    * sent -- right after the request's last byte was handed to the kernel: ``sent_at_s``;
      ``schedule_lag_ms`` and ``send_delay_ms`` come from this same reading.
    * headers -- the arrival of the read that completed the head: on a stamped pool socket
      the event loop reads the head (:class:`tokenswarm.wire.head.HeadReader`), dated by that
      read's kernel stamp or the watcher's earlier note; else the library's header read, dated by
      the first sweep note that covers the end of the headers, else that read's kernel stamp,
      else the time it returned: ``headers_ms``.

The body (:class:`BodyReader`, the only way body bytes reach the stream state)
    * Body bytes that came with the headers keep the dates of the reads that brought them:
      the event loop's head reads, piece by piece (``HeadReader.body_pieces``), or the HTTP
      library's own header read, through :func:`tokenswarm.wire.libread.library_read_pieces`: cut
      where arrival notes (below) saw them arrive apart, else the read's kernel stamp.
    * Plain-TCP streams without per-chunk hooks are read from the event loop
      (:class:`tokenswarm.wire.reader.HubReader`): each read is dated by its kernel stamp (its
      newest segment's), through the C fast path (:mod:`tokenswarm.wire._fastread`) or the
      Python parsers; without stamps, by the time its poll returned.
    * TLS and hooked streams are read by the request's greenlet, one read per wake-up, each
      dated by its kernel stamp where the socket has one, else the time the read returned.
    * Arrival notes: while the loop is stalled, the arrival watcher thread
      (:mod:`tokenswarm.wire.watch`) notes how many bytes each stream had received by when;
      while a late header read waits, the loop's sweeps peek and note the same. A read that
      holds bytes which arrived apart is cut at its chunk boundaries and each part is dated by
      the first note that covers it (``_fastread.date_chunks`` / ``date_cuts``), never later
      than the read's own stamp.
    * Events of one read (one date) are one *delivery* (:mod:`tokenswarm.metrics`).

:func:`provenance` says which of these paths this process ran, with the ``TOKENSWARM_*``
overrides and the counters of every fallback and cap overflow; it goes into the manifest as
``workers[].timing`` and into the report's generator health.
"""

from __future__ import annotations

import os
import time
from typing import Any, Callable

from tokenswarm.wire import head, kstamp, native, poller, reader, send, stream, watch
from tokenswarm.wire.libread import library_read_time
from tokenswarm.wire.sse import SSEParser

RECV_BYTES = 65536
#: The environment variables that select timing paths (each documented where it is read).
OVERRIDES = ("TOKENSWARM_READER", "TOKENSWARM_NATIVE", "TOKENSWARM_KERNEL_TIMESTAMPS",
             "TOKENSWARM_ARRIVAL_WATCH", "TOKENSWARM_READ_BATCH_MS", "TOKENSWARM_READ_BATCH_MAX_MS",
             "TOKENSWARM_HEAD_READER")


def read_available(resp: Any) -> bytes:
    """Return body bytes the connection has now, blocking only if it has none.

    ``b""`` means the message is complete (or the peer closed). Works on geventhttpclient's
    ``HTTPSocketResponse``: ``feed`` runs its C parser (de-chunking) into ``_body_buffer``.
    """
    buf = resp._body_buffer
    while not buf:
        if resp.message_complete:
            return b""
        sock = resp._sock
        if sock is None:
            return b""
        data = sock.recv(RECV_BYTES)
        if not data:
            if close_delimited(resp):
                return b""  # EOF is the end of such a body; [DONE] tells if it was complete
            raise ConnectionError("connection closed mid-stream")
        resp.feed(data)
    out = bytes(buf)
    del buf[:]
    return out


def close_delimited(resp: Any) -> bool:
    """The body ends when the server closes (no length, not chunked)."""
    return resp.get("content-length") is None and "chunked" not in str(resp.get("transfer-encoding") or "").lower()


def check_eof(resp: Any) -> None:
    """The peer closed: fine for a close-delimited body, a cut stream otherwise."""
    if not close_delimited(resp):
        raise ConnectionError("connection closed mid-stream")


class BodyReader:
    """Reads one streamed response body and hands its events, dated, to ``on_events``.

    ``on_events(now_s, events)`` gets the events that arrived at ``now_s`` and returns True to
    stop reading. From the event loop when ``hub`` and the socket allows it (plain TCP),
    else from the calling greenlet. :meth:`go_steady` hands later events straight to a
    cheaper callback once nothing is left to decide per read.
    """

    __slots__ = ("resp", "clock", "parser", "on_events", "use_hub", "hub", "stopped")

    def __init__(self, resp: Any, clock: Callable[[], float], parser: SSEParser,
                 on_events: Callable[[float, list[Any]], bool], *, hub: bool) -> None:
        self.use_hub = hub and reader.can_watch(resp)
        if not self.use_hub and isinstance(resp, head.HubResponse):  # read here: the library's response
            resp = resp.library()
        self.resp = resp
        self.clock = clock
        self.parser = parser
        self.on_events = on_events
        self.hub: reader.HubReader | None = None
        self.stopped = False

    def go_steady(self, steady: Callable[[float, list[Any]], Any]) -> None:
        """From now on give events to ``steady`` (which cannot stop the reading)."""
        if self.hub is not None:
            self.hub.steady = steady

    def run(self) -> bool:
        """Read until the body ends or ``on_events`` says stop; True when it said stop.

        The end of the body is not flushed here: the caller closes its parser.
        """
        try:
            if self.use_hub:
                self.hub = reader.HubReader(self.resp, self.clock, self.parser, self._noting_stop,
                                            lambda: check_eof(self.resp))
                self.hub.run()
                return self.stopped
            return self._run_in_greenlet()
        finally:
            # The caller's on_events refers to this reader and the reader to it: break the
            # cycle now (left to the garbage collector, whose young-generation passes then
            # stalled the loop for 20-35 ms at 256 streams).
            self.hub = None
            self.on_events = _stopped

    def _noting_stop(self, now: float, events: list[Any]) -> bool:
        if self.on_events(now, events):
            self.stopped = True
            return True
        return False

    def _run_in_greenlet(self) -> bool:
        resp, parser, on_events, clock = self.resp, self.parser, self.on_events, self.clock
        while True:
            data = read_available(resp)
            if not data:
                return False
            now = library_read_time(resp, clock)  # the read's kernel stamp, else now
            events = parser.feed(data)
            if events and on_events(now, events):
                return True


def _stopped(_now: float, _events: list[Any]) -> bool:
    return True


def provenance() -> dict[str, Any]:
    """Which timing paths this process ran, its overrides and its fallback counters.

    ``counters``: ``reads_count`` (reads of the C fast path), ``general_parser_reads_count``
    (handed to the Python parsers), ``head_reads_count`` (reads of response heads by the event
    loop, :class:`tokenswarm.wire.head.HeadReader`), ``watcher_dated_reads_count`` (reads cut by arrival notes),
    ``one_stamp_many_chunks_reads_count`` (noted reads of more chunks than the fast path
    dates: one stamp kept), ``notes_count`` / ``stalled_sweeps_count`` / ``watcher_wakeups_count``
    (the watcher's work, and how often its thread ran at all: near zero while the loop keeps up),
    ``notes_dropped_count`` (a stream's notes were full) and ``notes_over_cap_count`` (a read
    covered more notes than are used); ``native_chunk_events_count`` / ``python_chunk_events_count``
    (SSE events the C path read into the stream state / handed to the Python loop, ``native_chunks``:
    :func:`tokenswarm.wire.stream.StreamState.on_events`); ``sweeps_count``, ``sweep_crowded_reads_count``
    and ``sweep_period_changes_count`` (the stream poller's sweeps; reads of two or more content
    chunks in mid-stream, or of bytes only the general parsers decode, each of which set the sweep
    period back to ``read_batch_ms``; and how often the period changed, :mod:`tokenswarm.wire.sweep`);
    ``stale_connection_retries_count`` (requests sent again
    because their kept-alive connection had been closed by the server, see
    :func:`tokenswarm.wire.send.send_request`); ``kernel_dated_sends_count`` (sends held up
    past ``send.SEND_STALL_S``, dated by the kernel: :func:`tokenswarm.wire.send.kernel_sent_time`).

    ``sweeps_by_period_ms``: the sweeps again, by the sweep period in force when each ran
    (``{"1": 480, "2.5": 3120}``, :func:`tokenswarm.wire.poller.sweeps_by_period_ms`): how long
    the streams' gaps let the period grow, which is most of what a sweep costs per chunk.
    """
    counters: dict[str, int] = {}
    fastread = native.extension()  # built, whether or not TOKENSWARM_NATIVE=0 keeps it unused
    if fastread is not None:
        rs, ws, cs = fastread.read_stats(), fastread.watch_stats(), fastread.chunk_stats()
        counters = {
            "reads_count": rs["reads"],
            "general_parser_reads_count": rs["general_reads"],
            "watcher_dated_reads_count": rs["dated_reads"],
            "one_stamp_many_chunks_reads_count": rs["chunk_cap_reads"],
            "head_reads_count": rs["head_reads"],
            "notes_count": ws["notes"],
            "stalled_sweeps_count": ws["stalled_sweeps"],
            "watcher_wakeups_count": ws["wakeups"],
            "notes_dropped_count": ws["notes_dropped"],
            "notes_over_cap_count": ws["notes_over_cap"],
            "native_chunk_events_count": cs["taken"],
            "python_chunk_events_count": cs["left"],
        }
    return {
        "reader": "hub" if reader.USE_HUB_READER else "greenlet",
        "native_fast_path": reader.FAST,
        "native_built": fastread is not None,
        "native_chunks": stream._feed_chunks is not None,
        "kernel_stamps": kstamp.ENABLED and kstamp.maps_onto(time.perf_counter),
        "arrival_watcher": watch.ENABLED and kstamp.ENABLED,
        "read_batch_ms": poller.READ_BATCH_S * 1000.0,
        "read_batch_max_ms": poller.READ_BATCH_MAX_S * 1000.0,
        "head_reader": "hub" if head.HUB_HEAD else "library",
        "overrides": {name: os.environ[name] for name in OVERRIDES if name in os.environ},
        "counters": {**counters, **poller.sweep_stats(), **send.stats},
        "sweeps_by_period_ms": poller.sweeps_by_period_ms(),
    }
