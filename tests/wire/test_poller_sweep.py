"""The stream poller's sweep: the C poll-and-dispatch does what the Python loop does.

A sweep polls the process's epoll set without waiting and calls ``handler(now_s, offset_s)``
for every ready socket that still has a handler. With the extension built that loop runs in C
(``_fastread.sweep_ready``), and the clock offset too (``_fastread.real_minus_mono``); without it
(or with ``TOKENSWARM_NATIVE=0``) the Python loop in ``poller.py`` does. Each test below runs on
both. Sockets are local socket pairs; the sweeps are called by hand.
"""

import contextlib
import time

import pytest
from gevent.monkey import get_original

from tokenswarm.wire import kstamp, native, poller
from tokenswarm.wire.poller import StreamPoller, _epoll

raw_socketpair = get_original("socket", "socketpair")

pytestmark = pytest.mark.skipif(_epoll is None, reason="needs epoll (Linux)")

NATIVE = native.native_function("sweep_ready") is not None


@pytest.fixture(params=["native", "python"])
def sweep_path(request, monkeypatch):
    """Run the test on the C sweep and on the Python loop."""
    if request.param == "native":
        if not NATIVE:
            pytest.skip("the C extension is not built (or TOKENSWARM_NATIVE=0)")
    else:
        monkeypatch.setattr(poller, "_sweep_ready", None)
        monkeypatch.setattr(poller, "_real_minus_mono", None)
    return request.param


@contextlib.contextmanager
def _pairs(n):
    """``n`` local socket pairs: yields [(read end, send end), ...]."""
    pairs = [raw_socketpair() for _ in range(n)]
    try:
        yield pairs
    finally:
        for a, b in pairs:
            a.close()
            b.close()


@pytest.mark.usefixtures("sweep_path")
def test_each_ready_socket_handler_gets_the_sweeps_time_and_offset_and_idle_ones_are_not_called():
    p = StreamPoller(time.perf_counter)
    calls: list[tuple[str, float, float]] = []
    with _pairs(3) as pairs:
        for name, (a, _b) in zip("xyz", pairs):
            p.add(a.fileno(), lambda now, off, name=name: calls.append((name, now, off)))
        pairs[0][1].send(b"data")
        pairs[2][1].send(b"data")
        p._ready()
        assert sorted(c[0] for c in calls) == ["x", "z"]  # y has nothing to read
        now, offset = calls[0][1], calls[0][2]
        assert all(c[1] == now and c[2] == offset for c in calls), "one time and one offset for the whole sweep"
        assert now == p.last_sweep_s
        if p.kernel_stamps:  # realtime minus monotonic, as the reads' stamps need it
            assert offset == pytest.approx(time.time() - time.perf_counter(), abs=0.05)
        else:
            assert offset == 0.0
        for a, _b in pairs:
            p.remove(a.fileno())


@pytest.mark.usefixtures("sweep_path")
def test_a_handler_that_removes_another_ready_socket_keeps_that_one_from_being_called():
    p = StreamPoller(time.perf_counter)
    ran: list[int] = []
    with _pairs(2) as pairs:
        fds = [a.fileno() for a, _b in pairs]

        def handler(now, off, me):
            ran.append(me)
            for fd in fds:  # whichever runs first ends both (a response ending its connection's twin)
                p.remove(fd)

        for fd in fds:
            p.add(fd, lambda now, off, me=fd: handler(now, off, me))
        for _a, b in pairs:
            b.send(b"x")
        p._ready()
        assert len(ran) == 1, ran  # both were ready; the second had no handler when its turn came
        assert p.handlers == {}


@pytest.mark.usefixtures("sweep_path")
def test_a_handler_may_remove_itself_and_drop_its_last_reference_while_it_runs():
    p = StreamPoller(time.perf_counter)
    seen: list[bytes] = []
    with _pairs(1) as pairs:
        a, b = pairs[0]
        fd = a.fileno()

        def make():
            def handler(now, off):
                p.remove(fd)  # the dict held the only reference to this closure
                seen.append(a.recv(16) + bytes(64))  # allocate after: the frame must still be alive
            return handler

        p.add(fd, make())
        b.send(b"bye")
        p._ready()
        assert seen == [b"bye" + bytes(64)]
        assert fd not in p.handlers


@pytest.mark.usefixtures("sweep_path")
def test_a_handlers_exception_propagates_and_the_sockets_not_reached_stay_ready_for_the_next_sweep():
    p = StreamPoller(time.perf_counter)
    calls: list[int] = []
    with _pairs(2) as pairs:
        fds = [a.fileno() for a, _b in pairs]
        failing = {"armed": True}

        def handler(now, off, fd, sock):
            if failing["armed"]:
                failing["armed"] = False
                raise RuntimeError(f"handler of fd {fd} failed")
            calls.append(fd)
            sock.recv(16)

        for (a, b), fd in zip(pairs, fds):
            p.add(fd, lambda now, off, fd=fd, sock=a: handler(now, off, fd, sock))
            b.send(b"x")
        with pytest.raises(RuntimeError, match="handler of fd"):
            p._ready()
        assert calls == []
        p._ready()  # level-triggered: both are still ready (the failed one read nothing)
        assert sorted(calls) == sorted(fds)
        for fd in fds:
            p.remove(fd)


@pytest.mark.skipif(not NATIVE, reason="the C extension is not built (or TOKENSWARM_NATIVE=0)")
def test_the_c_sweep_refuses_a_closed_epoll_set_and_handlers_that_are_not_a_dict():
    ep = _epoll()
    epfd = ep.fileno()
    sweep = native.native_function("sweep_ready")
    with pytest.raises(TypeError, match="handlers must be a dict"):
        sweep(epfd, [], 0.0, 0.0, 16)
    assert sweep(epfd, {}, 0.0, 0.0, 16) == 0  # an empty set: nothing ready
    ep.close()
    with pytest.raises(OSError):
        sweep(epfd, {}, 0.0, 0.0, 16)


@pytest.mark.skipif(not (NATIVE and kstamp.ENABLED), reason="needs the C extension and kernel stamps (Linux)")
def test_the_c_clock_offset_agrees_with_the_python_one():
    c_offset = native.native_function("real_minus_mono")
    # the two are read a few microseconds apart; the offset moves only as NTP slews the clocks
    for _ in range(5):
        assert c_offset(kstamp.OFFSET_BRACKET_S, kstamp.OFFSET_ATTEMPTS) == pytest.approx(
            kstamp.real_minus_mono(time.perf_counter), abs=1e-3)


@pytest.mark.skipif(not NATIVE, reason="needs the C extension")
def test_the_c_clock_offset_refuses_a_bracket_or_attempts_that_cannot_be_right():
    c_offset = native.native_function("real_minus_mono")
    with pytest.raises(ValueError, match="attempts >= 1"):
        c_offset(kstamp.OFFSET_BRACKET_S, 0)
    with pytest.raises(ValueError, match="bracket_s >= 0"):
        c_offset(-1.0, kstamp.OFFSET_ATTEMPTS)
    with pytest.raises(TypeError, match="2 arguments"):
        c_offset()
