"""The arrival watcher: events that queue while the event loop is stalled keep their own times.

One read of a socket has one kernel stamp, its newest segment's, and TCP merges segments that
wait unread. A client whose loop is held for a few milliseconds (a burst of request starts,
a slow callback, a garbage collection) would date every event that queued on a stream in that
time by the last one. The C extension's watcher thread (``_watch.c``) runs without the GIL;
whenever the loop has not swept its sockets for 2 ms it notes, every 0.5 ms, how many bytes
each watched socket had received and the kernel stamp of the newest. The hub reader's fast
path then cuts a read at its chunk boundaries and dates each chunk by the first note that
covers it; the header read does the same through :func:`notes_as_marks`.

While the loop keeps up, the thread does not run: it sleeps on a timer that every sweep pushes
on (:func:`alive`), so it wakes only when the loop has not swept for 2 ms; when the loop is
quiet and nothing has arrived since the thread's last look, it blocks until something does (an
idle process with 96 waiting streams: 0.3 % of a core, was 5 %).
``TOKENSWARM_ARRIVAL_WATCH=0`` turns it off (one stamp per read, as without it).
"""

from __future__ import annotations

import os

try:
    from tokenswarm.wire._fastread import alive, take_notes, unwatch, watch, watch_stats

    __all__ = ["ENABLED", "alive", "take_notes", "unwatch", "watch", "watch_stats"]
except ImportError:  # the C extension was not built: no watcher (reads keep one stamp each)
    alive = take_notes = unwatch = watch = watch_stats = None

#: The watcher is available and enabled (it needs kernel stamps too: callers check those).
ENABLED = watch is not None and os.environ.get("TOKENSWARM_ARRIVAL_WATCH", "1") != "0"


def start(fd: int) -> int | None:
    """Watch ``fd``; the connection's byte offset of the next byte to be read, or None."""
    return watch(fd) if ENABLED else None


def stop(fd: int) -> None:
    """Stop watching ``fd`` (before it is closed or read by someone else)."""
    if ENABLED:
        unwatch(fd)


def notes_as_marks(fd: int, rx_start: int, stream_start: int) -> list[tuple[int, float]]:
    """The notes taken on ``fd`` as ``(stream offset, realtime stamp)``, oldest first.

    ``rx_start`` is what :func:`start` returned and ``stream_start`` the caller's own offset
    of that same byte (e.g. :attr:`StampedSocket.consumed` when watching began).
    """
    if not ENABLED:
        return []
    return [(stream_start + rx - rx_start, stamp) for rx, stamp in take_notes(fd)]
