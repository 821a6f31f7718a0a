"""pytest-xdist under gevent's monkey-patching.

An xdist worker receives its tests on a real thread (execnet's I/O thread) and waits for them
on the main thread through a queue built from ``execmodel.Event()``/``RLock()``. Once Locust's
import has monkey-patched ``threading``, those become gevent primitives that a real thread
cannot wake: the worker's hub finds nothing to run and raises ``LoopExit`` before the first
test. The execution model's primitives are therefore built on the original, unpatched locks
of ``_thread``; the tests themselves still run in the patched world.
"""

from __future__ import annotations

import os
from typing import Any


class RealThreadEvent:
    """``threading.Event`` on unpatched locks: set from one real thread, waited for on another."""

    def __init__(self, allocate_lock: Any) -> None:
        self._allocate_lock = allocate_lock
        self._guard = allocate_lock()
        self._flag = False
        self._waiters: list[Any] = []

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        with self._guard:
            self._flag = True
            for waiter in self._waiters:
                waiter.release()
            self._waiters.clear()

    def clear(self) -> None:
        with self._guard:
            self._flag = False

    def wait(self, timeout: float | None = None) -> bool:
        with self._guard:
            if self._flag:
                return True
            waiter = self._allocate_lock()
            waiter.acquire()
            self._waiters.append(waiter)
        if waiter.acquire(True, -1 if timeout is None else timeout):
            return True
        with self._guard:  # timed out: stop waiting (set() may have raced us: report the flag)
            if waiter in self._waiters:
                self._waiters.remove(waiter)
            return self._flag


def keep_xdist_on_real_threads() -> None:
    """In an xdist worker, make execnet's thread execution model hand out real locks and events.

    Only the workers: the controller's execnet starts helper threads (at teardown) after the
    patching, so they are greenlets, and a real lock there would block the hub they need.
    """
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return
    try:
        from execnet import gateway_base
    except ImportError:  # xdist is not installed: nothing to keep
        return
    from gevent import monkey

    allocate_lock = monkey.get_original("_thread", "allocate_lock")
    real_rlock = monkey.get_original("_thread", "RLock")

    def event(self: Any) -> RealThreadEvent:
        return RealThreadEvent(allocate_lock)

    def rlock(self: Any) -> Any:
        return real_rlock()

    gateway_base.ThreadExecModel.Event = event  # type: ignore[method-assign,assignment]  (see module docstring)
    gateway_base.ThreadExecModel.RLock = rlock  # type: ignore[method-assign]
