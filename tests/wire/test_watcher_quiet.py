"""The arrival watcher costs nothing while nothing arrives, and still notes what does.

When the event loop has not swept for a while (every stream waiting for its server, or the
loop held) and nothing has arrived since its last look, the watcher's thread blocks until an
arrival instead of sweeping every 0.5 ms: 96 waiting streams cost 4.6 % of a core before.
An arrival during that quiet is noted as soon as it lands.
"""

import socket
import sys

import pytest
from gevent.monkey import get_original

from tests.helpers.waiting import wait_until
from tokenswarm.wire import kstamp, watch

blocking_sleep = get_original("time", "sleep")  # the loop is not sweeping meanwhile: "stalled"

pytestmark = pytest.mark.skipif(
    not (sys.platform.startswith("linux") and kstamp.ENABLED and watch.watch is not None),
    reason="the watcher needs Linux, kernel stamps and the C extension")


@pytest.fixture
def watched_pair():
    """A plain (non-gevent) TCP pair on 127.0.0.1 whose receiving end is watched."""
    listener = get_original("socket", "socket")()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    receiver = get_original("socket", "create_connection")(listener.getsockname())
    sender, _ = listener.accept()
    sender.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    kstamp.enable(receiver)
    assert watch.watch(receiver.fileno()) is not None
    try:
        yield sender, receiver
    finally:
        watch.unwatch(receiver.fileno())
        for s in (sender, receiver, listener):
            s.close()


def test_a_watcher_with_nothing_arriving_does_not_sweep(watched_pair):
    # 300 ms with the loop never sweeping (no alive() call) and no byte arriving: the old
    # thread swept every 0.5 ms (~600 sweeps); a blocked one looks once per arrival or 100 ms.
    before = watch.watch_stats()["stalled_sweeps"]
    blocking_sleep(0.3)
    swept = watch.watch_stats()["stalled_sweeps"] - before
    assert swept <= 10, f"{swept} sweeps in 300 ms with nothing arriving"


def test_an_arrival_while_the_watcher_waits_is_noted(watched_pair):
    sender, receiver = watched_pair
    blocking_sleep(0.05)  # the thread has found nothing and waits for an arrival
    sender.sendall(b"x" * 100)
    notes = []
    wait_until(lambda: notes.extend(watch.take_notes(receiver.fileno())) or notes, 5,
               "a note of the 100 bytes", every_s=0.001, sleep=blocking_sleep)
    rx, stamp = notes[-1]
    assert rx >= 100  # every byte sent so far had arrived by the note's stamp
    assert stamp > 0.0


def test_a_watcher_does_not_run_while_the_loop_keeps_sweeping(watched_pair):
    # A loop sweeping every millisecond for 300 ms: the thread sleeps on a timer each sweep pushes
    # on, so it need not run at all. The thread it replaces woke every 1-2 ms to compare clocks
    # (150-300 wake-ups here, each a pair of context switches on the loop's core).
    import time

    watch.alive()
    blocking_sleep(0.01)  # a wake-up already due (the fixture's quiet start) is taken now
    before = watch.watch_stats()["wakeups"]
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        watch.alive()
        blocking_sleep(0.001)
    woke = watch.watch_stats()["wakeups"] - before
    assert woke <= 15, f"the watcher's thread ran {woke} times in 300 ms of a loop sweeping every 1 ms"


def test_a_stall_after_the_loop_kept_up_still_wakes_the_watcher_to_note(watched_pair):
    sender, receiver = watched_pair
    for _ in range(20):  # the loop keeps up for 20 ms: the thread sleeps on its timer
        watch.alive()
        blocking_sleep(0.001)
    sender.sendall(b"y" * 50)  # then the loop stalls (no more alive()) while bytes arrive
    notes = []
    wait_until(lambda: notes.extend(watch.take_notes(receiver.fileno())) or notes, 5,
               "a note of the 50 bytes taken during the stall", every_s=0.001, sleep=blocking_sleep)
    assert notes[-1][0] >= 50
