"""The stream poller: every hub-read socket of a process in one ``epoll`` set, swept from the hub.

The readers (:mod:`tokenswarm.wire.head`, :mod:`tokenswarm.wire.reader`) and the header read's
arrival notes (:class:`tokenswarm.wire.pool.StampedSocket`) register their sockets with the
process's :class:`StreamPoller`; its callback runs *inside the hub* whenever sockets are
readable and calls each one's handler with one timestamp for the whole poll.

* **One ``epoll`` set per process** behind one libev watcher, and, once busy, a sweep of all
  ready sockets every ``READ_BATCH_S`` instead of a wake-up per arrival: fewer wake-ups and
  system calls per event, and the stamps do not move (reads are dated by kernel receive
  stamps, not by when a sweep got to them).
* **The sweep period follows the streams**, from ``READ_BATCH_S`` up to ``READ_BATCH_MAX_S``
  as their gaps allow (:mod:`tokenswarm.wire.sweep`).
* **The sweep's poll and dispatch run in C** when the extension is built (``sweep_ready`` and
  ``real_minus_mono`` of ``_sweep.c``): the same handlers called with the same arguments as
  the Python loop kept here for builds without it.

Without ``epoll`` (non-Linux) there is no poller (:func:`stream_poller` returns None) and each
body reader gets its own libev watcher instead.
"""

from __future__ import annotations

import os
from typing import Any, Callable

import gevent
from gevent.monkey import get_original

from tokenswarm.wire import kstamp, watch
from tokenswarm.wire.native import native_function
from tokenswarm.wire.sweep import SweepPeriod

try:  # monkey-patching removes select.epoll (it would block the hub); we only poll it with timeout 0
    _epoll, _EPOLLIN, _EPOLLET = get_original("select", ["epoll", "EPOLLIN", "EPOLLET"])
except AttributeError:
    _epoll, _EPOLLIN, _EPOLLET = None, 0, 0

#: Ready sockets handled per wake-up; more stay ready (level-triggered) for the next one.
MAX_READY = 1024
#: With kernel timestamps, a busy poller looks at its sockets every this many seconds instead of
#: on every arrival: one sweep reads many sockets (fewer wake-ups and system calls per event)
#: and the timestamps do not move. TOKENSWARM_READ_BATCH_MS=0 reads on every arrival.
READ_BATCH_S = float(os.environ.get("TOKENSWARM_READ_BATCH_MS", "1")) / 1000.0
#: ...and up to this many while every stream's events come at least 4/3 of the period apart
#: (:mod:`tokenswarm.wire.sweep`): a dozen streams of 5 ms chunks cannot fill a 1 ms sweep, and
#: each wake-up costs far more than the sweep. TOKENSWARM_READ_BATCH_MAX_MS=1 keeps it at 1 ms.
READ_BATCH_MAX_S = max(READ_BATCH_S, float(os.environ.get("TOKENSWARM_READ_BATCH_MAX_MS", "4")) / 1000.0)
#: Timed sweeps in a row that find nothing before a busy poller goes back to waking on arrivals.
#: One was enough to switch, but at a dozen active streams one sweep in ten finds nothing, and
#: each switch there and back costs the event loop three or four epoll_ctl calls (libev's lazy
#: removal: ADD, EEXIST, DEL, ADD seen in strace) for no wake-up saved: the next arrival wakes it.
QUIET_SWEEPS = 3

#: The sweep's poll and dispatch, and the clock offset, in C (None: the Python loop below).
_sweep_ready: Callable[[int, dict[int, Callable[[float, float], None]], float, float, int], int] | None = (
    native_function("sweep_ready"))
#: (the offset takes the bracket and attempts of kstamp.real_minus_mono: OFFSET_BRACKET_S, OFFSET_ATTEMPTS)
_real_minus_mono: Callable[[float, int], float] | None = native_function("real_minus_mono")


class StreamPoller:
    """All hub-read sockets of one process in one ``epoll`` set behind one libev watcher.

    Idle, it wakes on the first arrival. Busy (it found sockets ready) and with kernel
    timestamps, it stops listening and sweeps again every ``period.period_s`` (``READ_BATCH_S``
    up to ``READ_BATCH_MAX_S``, as the streams' gaps allow), going back to listening when
    ``QUIET_SWEEPS`` sweeps in a row find nothing.
    """

    __slots__ = ("clock", "ep", "epfd", "handlers", "watcher", "timer", "kernel_stamps", "last_sweep_s",
                 "empty_sweeps", "period", "sweeps_count")

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self.ep = _epoll()
        self.epfd = self.ep.fileno()
        self.handlers: dict[int, Callable[[float, float], None]] = {}
        loop = gevent.get_hub().loop
        self.watcher = loop.io(self.epfd, 1)
        # Kernel stamps are CLOCK_REALTIME; an injected test clock gets read-time stamps.
        self.kernel_stamps = kstamp.maps_onto(clock)
        sweep = self.kernel_stamps and READ_BATCH_S > 0  # without kernel stamps, reading late is stamping late
        self.timer = loop.timer(READ_BATCH_S, READ_BATCH_S) if sweep else None
        #: the sweep period and the evidence for it (the readers report gaps and crowded reads)
        self.period = SweepPeriod(READ_BATCH_S, READ_BATCH_MAX_S) if sweep else None
        self.last_sweep_s = 0.0
        self.empty_sweeps = 0  # timed sweeps in a row that found nothing
        self.sweeps_count = 0

    def add(self, fd: int, handler: Callable[[float, float], None], *, on_arrival: bool = False) -> None:
        """Call ``handler(now_s, real_minus_mono_s)`` from the hub whenever ``fd`` is readable.

        ``on_arrival``: only when new bytes arrived since the last call (edge-triggered), not on
        every sweep while unread bytes wait -- for a handler that notes arrivals and reads
        nothing (the header read's marks), which a busy loop would otherwise call once per
        sweep (measured: ~18 peeks per request at 96 short streams, 8 % of the process).
        """
        self.ep.register(fd, _EPOLLIN | _EPOLLET if on_arrival else _EPOLLIN)
        self.handlers[fd] = handler
        if not self.watcher.active and not (self.timer is not None and self.timer.active):
            self.watcher.start(self._ready)

    def replace(self, fd: int, handler: Callable[[float, float], None]) -> None:
        """Hand a registered ``fd`` to another handler (no system call: same socket, same mask)."""
        if fd not in self.handlers:
            raise KeyError(fd)
        self.handlers[fd] = handler

    def remove(self, fd: int) -> None:
        if self.handlers.pop(fd, None) is not None:
            try:
                self.ep.unregister(fd)
            except (OSError, ValueError):
                pass  # already closed: the kernel dropped it from the set
        if not self.handlers:  # an idle process does not wake for an empty set
            self.watcher.stop()
            if self.timer is not None:
                self.timer.stop()

    def sweep_if_due(self) -> None:
        """Sweep now if the last one is ``READ_BATCH_S`` old (called by request greenlets).

        gevent runs every greenlet that became ready before it looks at timers again. When a
        sweep completes twenty requests at once, their greenlets (record, next request) ran
        back to back for 10-30 ms with no sweep in between -- long enough for a stream's next
        event to join the previous one in the socket, and one read has one kernel stamp.
        """
        period = self.period
        if self.handlers and period is not None and self.clock() - self.last_sweep_s >= period.period_s:
            self._ready()

    def crowded(self) -> None:
        """A reader saw two or more content chunks in one mid-stream read, or bytes only the
        general parsers decode: the period goes back to its floor now."""
        period = self.period
        if period is not None and period.crowded():
            self.retime()

    def retime(self) -> None:
        """The period changed: sweep on a timer of the new period from now on (if sweeping)."""
        period, old = self.period, self.timer
        if period is None or old is None:
            return
        self.timer = gevent.get_hub().loop.timer(period.period_s, period.period_s)
        if old.active:
            old.stop()
            self.timer.start(self._ready)
        old.close()

    def _ready(self) -> None:
        now = self.clock()  # one timestamp for everything this poll reports
        self.last_sweep_s = now
        self.sweeps_count += 1
        period = self.period
        if period is not None:
            if period.update(now):
                self.retime()
            if watch.ENABLED:  # the watcher thread stays idle while the loop sweeps on time
                watch.alive(period.period_s)
        elif self.kernel_stamps and watch.ENABLED:  # reading on every arrival: stalled 2 ms after one
            watch.alive()
        offset = 0.0  # realtime -> our timeline (kernel stamps: the clock is CLOCK_MONOTONIC, kstamp.maps_onto)
        if self.kernel_stamps:
            if _real_minus_mono is not None:
                offset = _real_minus_mono(kstamp.OFFSET_BRACKET_S, kstamp.OFFSET_ATTEMPTS)
            else:
                offset = kstamp.real_minus_mono(self.clock)
        handlers = self.handlers
        if _sweep_ready is not None:
            ready = _sweep_ready(self.epfd, handlers, now, offset, MAX_READY)
        else:
            polled = self.ep.poll(0, MAX_READY)
            for fd, _mask in polled:
                h = handlers.get(fd)
                if h is not None:
                    h(now, offset)
            ready = len(polled)
        timer = self.timer
        if timer is None or not self.handlers:
            return
        if ready:
            self.empty_sweeps = 0
            if not timer.active:  # busy: sweep on the timer from now on
                self.watcher.stop()
                timer.start(self._ready)
        elif timer.active:
            self.empty_sweeps += 1
            if self.empty_sweeps >= QUIET_SWEEPS:  # quiet again: wake on the next arrival
                timer.stop()
                self.watcher.start(self._ready)


_pollers: dict[tuple[Any, ...], StreamPoller] = {}


def _forget_pollers() -> None:
    """In a forked child: the parent's pollers (its epoll set, its hub's watchers) are not ours."""
    _pollers.clear()


# Forked workers get their own pollers. Cleared at the fork rather than keyed by os.getpid(),
# which is a system call on every request (glibc does not cache it).
os.register_at_fork(after_in_child=_forget_pollers)


def sweep_stats() -> dict[str, int]:
    """This process's pollers' sweeps, crowded reads (each brought the period back to its
    floor) and period changes, summed (the manifest's timing counters)."""
    polls = list(_pollers.values())
    return {"sweeps_count": sum(p.sweeps_count for p in polls),
            "sweep_crowded_reads_count": sum(p.period.crowded_count for p in polls if p.period is not None),
            "sweep_period_changes_count": sum(p.period.changes_count for p in polls if p.period is not None)}


def sweeps_by_period_ms() -> dict[str, int]:
    """This process's sweeps by the period in force when each ran, summed over its pollers: keys
    are the period in milliseconds (``"2.5"``), sorted by period (the manifest's
    ``timing.sweeps_by_period_ms``); they add up to ``sweeps_count``. Empty when no poller has a
    sweep period (no kernel stamps, or ``TOKENSWARM_READ_BATCH_MS=0``: a read on every arrival)."""
    counts: dict[str, int] = {}
    for p in _pollers.values():
        if p.period is not None:
            for period_s, n in p.period.sweeps_by_period_s.items():
                # summed by the key written: two periods a rounding apart (a floor of 4.5 ms from the
                # environment, 9 steps of 0.5 ms) are one period, and neither count may replace the other
                key = f"{period_s * 1000.0:g}"
                counts[key] = counts.get(key, 0) + n
    return dict(sorted(counts.items(), key=lambda kv: float(kv[0])))


def stream_poller(clock: Callable[[], float]) -> StreamPoller | None:
    """The poller of this process and hub (created on first use: forked workers get their own)."""
    if _epoll is None:
        return None
    key = (gevent.get_hub(), clock)
    p = _pollers.get(key)
    if p is None:
        p = _pollers[key] = StreamPoller(clock)
    return p
