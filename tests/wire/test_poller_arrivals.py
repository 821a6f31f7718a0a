"""The stream poller calls an arrival handler once per arrival, not once per sweep.

The header read's notes (pool.StampedSocket._note) only need to know when new bytes came; a
busy loop sweeps every millisecond while the request's greenlet waits its turn, and a level-
triggered registration called the note (a peek system call) on every sweep: ~18 per request
at 96 short streams. The sweeps here are called by hand; a local socket pair carries the bytes.
"""

import contextlib
import time

import pytest
from gevent.monkey import get_original

from tokenswarm.wire import kstamp
from tokenswarm.wire.poller import QUIET_SWEEPS, READ_BATCH_S, StreamPoller, _epoll

raw_socketpair = get_original("socket", "socketpair")

pytestmark = pytest.mark.skipif(_epoll is None, reason="needs epoll (Linux)")


def _sweeps(poller, n):
    for _ in range(n):
        poller._ready()


@contextlib.contextmanager
def _watched_pair(on_arrival: bool, send_first: bytes = b""):
    """A poller watching one end of a local socket pair: yields (poller, sending end, handler calls).

    ``send_first`` is written before the handler is added (bytes already waiting)."""
    poller = StreamPoller(time.perf_counter)
    a, b = raw_socketpair()
    calls: list[float] = []
    try:
        if send_first:
            b.send(send_first)
        poller.add(a.fileno(), lambda now, off: calls.append(now), on_arrival=on_arrival)
        yield poller, b, calls
    finally:
        poller.remove(a.fileno())
        a.close()
        b.close()


def test_an_arrival_handler_runs_once_per_arrival_while_the_bytes_stay_unread():
    with _watched_pair(on_arrival=True) as (poller, sender, calls):
        _sweeps(poller, 3)
        assert calls == []  # nothing arrived
        sender.send(b"HTTP/1.1 200 OK\r\n")
        _sweeps(poller, 5)
        assert len(calls) == 1  # unread bytes wait, but they arrived once
        sender.send(b"\r\n")
        _sweeps(poller, 5)
        assert len(calls) == 2


def test_a_reading_handler_runs_on_every_sweep_while_bytes_wait():
    with _watched_pair(on_arrival=False) as (poller, sender, calls):
        sender.send(b"data")
        _sweeps(poller, 4)
        assert len(calls) == 4  # level-triggered: the body reader must not miss what it left


def test_bytes_already_waiting_when_the_handler_is_added_count_as_one_arrival():
    with _watched_pair(on_arrival=True, send_first=b"early") as (poller, _sender, calls):
        _sweeps(poller, 3)
        assert len(calls) == 1



def test_a_busy_poller_goes_back_to_waking_on_arrivals_only_after_sweeps_in_a_row_find_nothing():
    if READ_BATCH_S <= 0 or not kstamp.maps_onto(time.perf_counter):
        pytest.skip("timed sweeps need kernel stamps and a read batch")
    poller = StreamPoller(time.perf_counter)
    a, b = raw_socketpair()
    a.setblocking(False)
    poller.add(a.fileno(), lambda now, off: a.recv(64))  # a reading handler: drains what came
    try:
        def busy():
            return poller.timer.active and not poller.watcher.active

        b.send(b"data")
        poller._ready()
        assert busy(), "a sweep that found data: sweeps on the timer"
        for _ in range(QUIET_SWEEPS - 1):
            poller._ready()
            assert busy(), "a quiet sweep or two at a dozen streams is not the traffic stopping"
        b.send(b"more")
        poller._ready()  # data again: the count of quiet sweeps starts over
        for _ in range(QUIET_SWEEPS - 1):
            poller._ready()
        assert busy()
        poller._ready()
        assert poller.watcher.active and not poller.timer.active, "quiet in a row: wakes on arrivals"
    finally:
        poller.remove(a.fileno())
        a.close()
        b.close()


def test_the_manifest_counts_every_sweep_at_the_period_it_ran_at(monkeypatch):
    if READ_BATCH_S <= 0 or not kstamp.maps_onto(time.perf_counter):
        pytest.skip("a sweep period needs kernel stamps and a read batch")
    from tokenswarm.wire import poller as poller_mod
    with _watched_pair(on_arrival=False) as (poller, _sender, _calls):
        monkeypatch.setattr(poller_mod, "_pollers", {("this test",): poller})
        _sweeps(poller, 7)
        assert poller_mod.sweeps_by_period_ms() == {f"{READ_BATCH_S * 1000:g}": 7}, "no evidence yet: the floor"
        assert poller_mod.sweep_stats()["sweeps_count"] == 7


def test_periods_a_rounding_apart_are_counted_as_one(monkeypatch):
    if READ_BATCH_S <= 0 or not kstamp.maps_onto(time.perf_counter):
        pytest.skip("a sweep period needs kernel stamps and a read batch")
    from tokenswarm.wire import poller as poller_mod
    with _watched_pair(on_arrival=False) as (poller, _sender, _calls):
        monkeypatch.setattr(poller_mod, "_pollers", {("this test",): poller})
        # a floor of 4.5 ms from the environment, and 9 steps of 0.5 ms above it
        assert 9 * 0.0005 != 0.0045, "two floats for one period"
        poller.period.sweeps_by_period_s.update({0.0045: 4, 9 * 0.0005: 5, 0.0025: 1})
        assert poller_mod.sweeps_by_period_ms() == {"2.5": 1, "4.5": 9}
