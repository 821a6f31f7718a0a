"""Bounded waits on a condition: the one way tests synchronise with servers, files and threads.

A test that sleeps for a fixed time to let something happen is either slow (the sleep is long)
or flaky (the machine is busy and the sleep too short). :func:`wait_until` polls the condition
itself and gives up after a bound, naming what it waited for and the last value it saw.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_until(predicate: Callable[[], T], timeout_s: float, what: str, *, every_s: float = 0.05,
               sleep: Callable[[float], object] = time.sleep) -> T:
    """Call ``predicate`` until it returns a truthy value and return that value.

    Raises ``AssertionError`` naming ``what`` after ``timeout_s`` seconds. ``every_s`` is the
    polling interval (keep it small: the wait ends at most this long after the condition holds).
    Inside a gevent test pass ``sleep=gevent.sleep`` so the greenlets awaited can run.
    """
    deadline = time.monotonic() + timeout_s
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout_s} s waiting for {what} (last: {value!r})")
        sleep(every_s)
