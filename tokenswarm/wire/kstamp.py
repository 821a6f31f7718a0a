"""Kernel receive timestamps (Linux ``SO_TIMESTAMPNS``), shared by the reader and the simulator.

The kernel stamps every TCP segment when it reaches the host; a ``recvmsg`` returns the stamp
of the last segment it consumed as ``CLOCK_REALTIME``. Both clocks our timelines use
(``perf_counter``/``monotonic``, i.e. ``CLOCK_MONOTONIC``) are slewed together with it, so
``stamp - (time.time() - monotonic_now)`` places the stamp on the monotonic timeline.
"""

from __future__ import annotations

import os
import platform
import socket
import struct
import sys
import time
from typing import Any, Callable

#: Python does not export the constant; 35 is its value on the asm-generic architectures listed.
_GENERIC_ARCH = platform.machine() in ("x86_64", "aarch64", "arm64", "i686", "i386", "armv7l", "riscv64",
                                       "ppc64le", "s390x")
SO_TIMESTAMPNS: int | None = (getattr(socket, "SO_TIMESTAMPNS", 35 if _GENERIC_ARCH else None)
                              if sys.platform.startswith("linux") else None)
#: TOKENSWARM_KERNEL_TIMESTAMPS=0 turns them off (for comparison).
ENABLED = SO_TIMESTAMPNS is not None and os.environ.get("TOKENSWARM_KERNEL_TIMESTAMPS", "1") != "0"
#: ancillary buffer for one ``struct timespec``
ANC_BYTES = socket.CMSG_SPACE(16) if hasattr(socket, "CMSG_SPACE") else 0
#: a stamp older than this (relative to the read) means the wall clock was stepped: ignore it
PLAUSIBLE_AGE_S = 10.0
_timespec = struct.Struct("@qq").unpack_from


def maps_onto(clock: Callable[[], float]) -> bool:
    """Whether kernel stamps can be placed on ``clock``'s timeline (enabled, and the clock is
    CLOCK_MONOTONIC: ``perf_counter`` or ``monotonic``; an injected test clock is not)."""
    return ENABLED and clock in (time.perf_counter, time.monotonic)


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp ``sock``'s received segments; False if it cannot."""
    if not ENABLED:
        return False
    try:
        assert SO_TIMESTAMPNS is not None  # ENABLED says so
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        return True
    except OSError:
        return False


#: A realtime reading bracketed by two monotonic readings further apart than this (the process
#: was preempted between them) is taken again: its offset could be off by the gap.
OFFSET_BRACKET_S = 20e-6
#: ...at most this many times in all (the narrowest bracket is kept).
OFFSET_ATTEMPTS = 3


def real_minus_mono(clock: Callable[[], float] = time.perf_counter,
                    real: Callable[[], float] = time.time, attempts: int = OFFSET_ATTEMPTS) -> float:
    """``real() - clock()`` with the realtime reading bracketed by two of ``clock``.

    Read as ``real() - now`` after ``now = clock()``, a preemption between the two readings
    (milliseconds on a busy machine) moves every stamp converted with the offset earlier by
    that long. Here the pair is taken up to ``attempts`` times and the narrowest bracket is
    used, with the realtime reading paired with the bracket's midpoint.
    """
    best_width = best = None
    for _ in range(attempts):
        before = clock()
        r = real()
        after = clock()
        width = after - before
        if best_width is None or width < best_width:
            best_width, best = width, r - (before + after) / 2.0
        if width <= OFFSET_BRACKET_S:
            break
    assert best is not None
    return best


def stamp_of(anc: list[Any], real_minus_mono_s: float, now_s: float) -> float:
    """The arrival time in ``recvmsg``'s ancillary data on the monotonic timeline, else ``now_s``.

    ``real_minus_mono_s`` is ``time.time() - monotonic()`` read close to ``now_s``.
    """
    if anc and anc[0][1] == SO_TIMESTAMPNS:
        sec, nsec = _timespec(anc[0][2])
        return plausible((sec - real_minus_mono_s) + nsec * 1e-9, now_s)
    return now_s


def ancillary(real_s: float) -> list[tuple[int, int, bytes]]:
    """``recvmsg``'s ancillary data for a receive stamp of ``real_s`` (``CLOCK_REALTIME``
    seconds): what :func:`stamp_of` reads, for bytes read elsewhere and handed on with their date."""
    assert SO_TIMESTAMPNS is not None  # only called where stamps are on
    sec = int(real_s // 1)
    return [(socket.SOL_SOCKET, SO_TIMESTAMPNS, struct.pack("@qq", sec, int(round((real_s - sec) * 1e9))))]


def plausible(stamp_s: float, now_s: float) -> float:
    """``stamp_s`` (already on the monotonic timeline) if it is before ``now_s`` and not older
    than ``PLAUSIBLE_AGE_S`` (older means the wall clock was stepped), else ``now_s``."""
    return stamp_s if now_s - PLAUSIBLE_AGE_S < stamp_s < now_s else now_s
