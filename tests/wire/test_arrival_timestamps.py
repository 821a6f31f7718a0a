"""Arrival times come from the kernel, not from when the event loop got round to reading.

The hub reader asks Linux for receive timestamps (``SO_TIMESTAMPNS``): a chunk that reached
the socket while the event loop was busy is still stamped with the moment it arrived. These
tests block the loop on purpose, for 60 ms, between a chunk's arrival and its read.
"""

import sys
import time

import gevent
import pytest
from gevent import socket
from gevent.monkey import get_original

from tests.helpers.waiting import wait_until
from tokenswarm.wire import kstamp, reader, watch
from tokenswarm.wire.poller import stream_poller
from tokenswarm.wire.sse import SSEParser

blocking_sleep = get_original("time", "sleep")  # holds the whole event loop, like a busy client
EVENT = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}],"usage":{"completion_tokens":1}}\n\n'
FRAME = b"%x\r\n%s\r\n" % (len(EVENT), EVENT)


class _Resp:
    """The few attributes HubReader uses of a geventhttpclient response (headers already read)."""

    def __init__(self, sock, chunked=True):
        self._sock = sock
        self._body_buffer = bytearray()
        self.message_complete = False
        self.chunked = chunked

    def get(self, name):
        return "chunked" if name == "transfer-encoding" and self.chunked else None

    def feed(self, data):
        if not self.chunked:  # a body delimited by the connection's end: the bytes are the body
            self._body_buffer += data


def _read_second_chunk_after_a_busy_loop(clock):
    """The first chunk goes through the general parsers, the second (with the C extension
    built) through the fast path: the one whose stamp we measure."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    seen = []

    def on_events(now, events):
        seen.append((now, events))
        return len(seen) == 2

    hub_reader = reader.HubReader(_Resp(client), clock, SSEParser(), on_events, lambda: None)
    g = gevent.spawn(hub_reader.run)
    gevent.sleep(0)  # the reader starts and waits on its socket
    server.sendall(FRAME)
    wait_until(lambda: seen, 5, "the first chunk read and parsed", every_s=0.001, sleep=gevent.sleep)
    assert hub_reader.fast == (reader.FAST and hub_reader.dechunker is not None)
    sent = clock()
    server.sendall(FRAME)
    blocking_sleep(0.06)  # the loop is busy: nothing reads for 60 ms
    g.join(timeout=5)
    for s in (client, server, listener):
        s.close()
    assert [events for _, events in seen] == [[(None, EVENT[6:-2])]] * 2
    return (seen[1][0] - sent) * 1000.0


@pytest.fixture(params=["native", "python"])
def fast_path(request, monkeypatch):
    """Each case with the C fast path (when built) and with the pure-Python path."""
    if request.param == "native" and not reader.FAST:
        pytest.skip("the C extension tokenswarm.wire._fastread is not built")
    monkeypatch.setattr(reader, "FAST", request.param == "native")


@pytest.mark.skipif(not (sys.platform.startswith("linux") and kstamp.ENABLED),
                    reason="kernel receive timestamps are a Linux feature")
@pytest.mark.timing
def test_a_chunk_is_stamped_when_it_arrived_even_if_read_60ms_later(fast_path):
    delay_ms = _read_second_chunk_after_a_busy_loop(time.perf_counter)
    assert 0.0 <= delay_ms < 20.0, f"{delay_ms:.3f} ms: loopback delivery (µs), not the 60 ms the loop was busy; tolerance 20 ms"


def test_without_kernel_timestamps_the_read_time_is_recorded(fast_path):
    # An injected (non-CLOCK_MONOTONIC) clock cannot be mapped from kernel time: the poll's
    # timestamp is used, which includes the time the loop was busy.
    offset = time.perf_counter()

    def test_clock():
        return time.perf_counter() - offset

    assert stream_poller(test_clock).kernel_stamps is False
    delay_ms = _read_second_chunk_after_a_busy_loop(test_clock)
    assert delay_ms >= 55.0


def _anc(real_s):
    import struct

    sec = int(real_s)
    return [(1, kstamp.SO_TIMESTAMPNS, struct.pack("@qq", sec, int(round((real_s - sec) * 1e9))))]


@pytest.mark.skipif(kstamp.SO_TIMESTAMPNS is None, reason="no SO_TIMESTAMPNS on this platform")
def test_stamp_conversion_onto_the_monotonic_timeline():
    real_minus_mono = 1_700_000_000.0
    now = 500.0
    # arrived 3 ms before the read
    assert kstamp.stamp_of(_anc(real_minus_mono + 499.997), real_minus_mono, now) == pytest.approx(499.997, abs=1e-6)
    # a stamp from the future or from before a wall-clock step is not believed
    assert kstamp.stamp_of(_anc(real_minus_mono + 500.5), real_minus_mono, now) == now
    assert kstamp.stamp_of(_anc(real_minus_mono + 400.0), real_minus_mono, now) == now
    # no ancillary data (stamps off, or the segment had none): the read time
    assert kstamp.stamp_of([], real_minus_mono, now) == now


@pytest.mark.skipif(not (sys.platform.startswith("linux") and kstamp.ENABLED),
                    reason="kernel receive timestamps are a Linux feature")
@pytest.mark.timing
@pytest.mark.parametrize("hooked", [False, True], ids=["hub-reader", "greenlet-reader"])
@pytest.mark.parametrize("stamped", [True, False])
def test_a_first_chunk_read_with_the_headers_keeps_its_arrival_time(stamped, hooked):
    # The server writes its headers and first events at once, 20 ms after the request; the
    # loop is busy from 5 to 65 ms, so the request's greenlet reads them ~45 ms late. TTFT
    # must be the arrival, not the read -- with either reader (per-chunk hooks select the
    # greenlet one).
    from geventhttpclient import HTTPClient

    from tests.helpers.procs import scripted_server
    from tests.helpers.scripted_server import ROLE, chunk
    from tokenswarm.record import RecordIdentity
    from tokenswarm.wire.client import StreamHooks, stream_call
    from tokenswarm.wire.clock import WallAnchor
    from tokenswarm.wire.pool import tune_pool
    from tokenswarm.wire.transport import PoolTransport
    def frame_len(event: bytes) -> int:
        return len(b"%x\r\n" % len(event)) + len(event) + 2

    with scripted_server() as url:
        host, port = url.split("//")[1].split(":")
        client = HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=2)
        if stamped:
            tune_pool(client)
        glue = frame_len(ROLE) + frame_len(chunk(0, "w0_0 ", 1))  # the role and first content chunks

        def call(path):
            return stream_call(PoolTransport(client, time.perf_counter), path, b"{}",
                               {"Content-Type": "application/json"},
                               identity=RecordIdentity(run_id="r", worker_id="w", seq=0, task="qa", user_class="U", request_key="k",
                                               scheduled_at_s=0.0),
                               anchor=WallAnchor(0.0, 0.0), first_token_timeout_s=5, total_timeout_s=10,
                               hooks=StreamHooks(on_chunks=lambda *a: None) if hooked else None)[0]

        # connected first: the measured request does not wait for a connect
        assert call("/normal/v1/chat/completions?n=1&gap_ms=1").outcome == "ok"
        busy = gevent.spawn_later(0.005, blocking_sleep, 0.06)  # the request is out by then
        rec = call(f"/glued/v1/chat/completions?n=3&gap_ms=100&delay_ms=20&glue={glue}")
        busy.join()
    assert rec.outcome == "ok", rec.error
    if stamped:
        assert 15.0 <= rec.ttft_ms < 45.0, f"TTFT {rec.ttft_ms} ms: the arrival (~20 ms), tolerance 15-45 ms"
    else:
        assert rec.ttft_ms >= 60.0  # the late read (what the stamping avoids)


@pytest.mark.timing  # a scripted server's 20 ms gaps dated within a few ms (failed once beside six busy workers: 59.5 ms)
@pytest.mark.parametrize("marked,watched", [(True, False), (False, True), (False, False)],
                         ids=["swept", "watched", "neither"])
@pytest.mark.usefixtures("hub_reader")  # the poller's sweeps note what arrives behind the head
def test_a_late_header_read_dates_each_event_by_the_sweep_that_saw_it_arrive(marked, watched, monkeypatch):
    # Headers 10 ms after the request, then one event every 20 ms (role 30, content 50, 70,
    # 90 ms). Another greenlet holds the loop from 5 to 125 ms -- sweeping every millisecond
    # as request greenlets do in a burst of request starts ("swept"), or not at all, when
    # the arrival watcher's thread notes the arrivals instead ("watched"). The request's own
    # header read only runs at 125 ms and reads everything at once. One read has one stamp
    # (its newest segment's), so with neither the three events share ~110 ms.
    from geventhttpclient import HTTPClient

    from tests.helpers.procs import scripted_server
    from tokenswarm.record import RecordIdentity
    from tokenswarm.wire import pool
    from tokenswarm.wire.client import stream_call
    from tokenswarm.wire.clock import WallAnchor
    from tokenswarm.wire.pool import tune_pool
    from tokenswarm.wire.transport import PoolTransport
    if not kstamp.maps_onto(time.perf_counter):
        pytest.skip("no kernel receive stamps here")
    if watched and not watch.ENABLED:
        pytest.skip("the C extension tokenswarm.wire._fastread is not built")
    monkeypatch.setattr(watch, "ENABLED", watched)
    with scripted_server() as url:
        host, port = url.split("//")[1].split(":")
        client = HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=2)
        tune_pool(client)

        def call(path):
            return stream_call(PoolTransport(client, time.perf_counter), path, b"{}", {"Content-Type": "application/json"},
                               identity=RecordIdentity(run_id="r", worker_id="w", seq=0, task="qa", user_class="U", request_key="k",
                                               scheduled_at_s=0.0),
                               anchor=WallAnchor(0.0, 0.0), first_token_timeout_s=5, total_timeout_s=10)[0]

        assert call("/normal/v1/chat/completions?n=1&gap_ms=1").outcome == "ok"  # connected, poller made
        poller = stream_poller(time.perf_counter)

        def busy():
            end = time.perf_counter() + 0.12
            while time.perf_counter() < end:
                blocking_sleep(0.001)
                if marked:
                    poller.sweep_if_due()

        hog = gevent.spawn_later(0.005, busy)
        rec = call("/glued/v1/chat/completions?n=3&gap_ms=20&delay_ms=10&glue=0")
        hog.join()
        pool.arrival_poller = None
    assert rec.outcome == "ok", rec.error
    offsets = rec.chunk_offsets_ms
    assert len(offsets) == 3
    if marked or watched:
        assert 45.0 <= rec.ttft_ms < 58.0, f"TTFT {rec.ttft_ms} ms: the first event's arrival (~50 ms), tolerance 45-58 ms"
        assert all(15.0 < b - a < 25.0 for a, b in zip(offsets, offsets[1:])), \
            f"offsets {offsets}: ~20 ms apart, tolerance 15-25 ms"
    else:
        assert rec.ttft_ms > 80.0 and offsets[1] - offsets[0] < 1.0, \
            f"TTFT {rec.ttft_ms} ms, offsets {offsets}: all dated together by the last read (> 80 ms)"


def test_body_cuts_map_raw_arrival_offsets_onto_the_dechunked_body():
    from tokenswarm.wire.libread import _body_cuts

    one, two = b"a" * 10, b"b" * 6
    raw = b"a\r\n" + one + b"\r\n" + b"6\r\n" + two + b"\r\n"  # 15 bytes, then 11 bytes
    # marks at stream offsets 100 + raw offset: the first chunk whole, then mid second chunk, then all
    marks = [(100 + 15, ["t1"]), (100 + 15 + 5, ["t2"]), (100 + len(raw), ["t3"])]
    assert _body_cuts(raw, 100, marks) == [(10, ["t1"]), (12, ["t2"]), (16, ["t3"])]
    # data that came after the last sweep is dated by the read itself (None); bad framing gives None
    assert _body_cuts(raw, 100, marks[:1]) == [(10, ["t1"]), (16, None)]
    assert _body_cuts(b"zz\r\nxx", 0, marks) is None


def test_plain_cuts_map_arrival_offsets_onto_an_unframed_body():
    from tokenswarm.wire.libread import _plain_cuts

    marks = [(50, ["t1"]), (50, ["dup"]), (57, ["t2"]), (70, ["t3"])]  # body starts at stream offset 40
    assert _plain_cuts(25, 40, marks) == [(10, ["t1"]), (17, ["t2"]), (25, ["t3"])]
    assert _plain_cuts(25, 40, marks[:1]) == [(10, ["t1"]), (25, None)]


SENDER = """
import socket, sys, time
frame = bytes.fromhex(sys.argv[2])
s = socket.create_connection(("127.0.0.1", int(sys.argv[1])))
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(frame)  # read by the loop before it is held
time.sleep(0.03)
for _ in range(4):
    print(time.perf_counter(), flush=True)  # CLOCK_MONOTONIC, as the client's clock
    s.sendall(frame)
    time.sleep(0.02)
s.recv(1)  # until the client hangs up
"""


@pytest.mark.skipif(not (sys.platform.startswith("linux") and kstamp.ENABLED),
                    reason="kernel receive timestamps are a Linux feature")
@pytest.mark.timing
@pytest.mark.parametrize("framing", ["simple", "crlf", "unchunked"])
@pytest.mark.parametrize("watched", [True, False], ids=["watched", "unwatched"])
def test_events_that_queue_while_the_loop_is_held_keep_their_own_arrival_times(watched, framing, monkeypatch):
    # A sender in its own process writes four events 20 ms apart while this process holds
    # its event loop (and the GIL: a pure-Python spin) for 150 ms. TCP merges the waiting
    # segments into one with the newest stamp; the watcher's thread, which needs no GIL,
    # noted each arrival, and the reader dates each event by its note: the fast path by
    # chunk ("simple"), the general parsers by decoding the read piece by piece ("crlf":
    # CRLF line ends, which the fast path hands back; "unchunked": a body without chunked
    # framing, which only the general parsers read).
    import subprocess

    if not reader.FAST:
        pytest.skip("the C extension tokenswarm.wire._fastread is not built")
    monkeypatch.setattr(watch, "ENABLED", watched)
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    event = EVENT.replace(b"\n", b"\r\n") if framing == "crlf" else EVENT
    frame = event if framing == "unchunked" else b"%x\r\n%s\r\n" % (len(event), event)
    sender = subprocess.Popen([sys.executable, "-c", SENDER, str(listener.getsockname()[1]), frame.hex()],
                              stdout=subprocess.PIPE, text=True, start_new_session=True)
    try:
        client, _ = listener.accept()
        seen = []
        hub_reader = reader.HubReader(_Resp(client, chunked=framing != "unchunked"), time.perf_counter, SSEParser(),
                                      lambda now, events: seen.extend([now] * len(events)) or len(seen) == 5,
                                      lambda: None)
        g = gevent.spawn(hub_reader.run)
        wait_until(lambda: seen, 10, "the first event read", every_s=0.001, sleep=gevent.sleep)
        assert (framing != "simple" or hub_reader.fast) and (framing != "unchunked" or not hub_reader.fast)
        assert hub_reader.watched == watched
        end = time.perf_counter() + 0.15
        while time.perf_counter() < end:  # the loop is held, the GIL too
            pass
        g.join(timeout=5)
        client.close()
        sent = [float(line) for line in sender.communicate(timeout=10)[0].split()]
    finally:
        sender.kill()
        listener.close()
    assert len(seen) == 5 and len(sent) == 4
    late = seen[1:]
    if watched:
        assert all(0.0 <= (a - s) * 1000.0 < 2.0 for a, s in zip(late, sent)), (
            f"arrival - send must be in [0, 2) ms: {[(a - s) * 1000.0 for a, s in zip(late, sent)]}")
    else:
        assert late == [late[-1]] * 4  # one read, one stamp: the newest segment's


@pytest.mark.skipif(not (sys.platform.startswith("linux") and kstamp.ENABLED),
                    reason="kernel receive timestamps are a Linux feature")
@pytest.mark.timing
def test_a_segment_that_arrived_after_the_sweep_began_keeps_its_stamp():
    # A sweep takes one timestamp when it starts and then reads socket after socket; bytes
    # that reached a later socket meanwhile carry a stamp after that timestamp. It is real,
    # not "from the future": replacing it by the sweep's start would date the event early.
    if not reader.FAST:
        pytest.skip("the C extension tokenswarm.wire._fastread is not built")
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    client = socket.create_connection(listener.getsockname())
    server, _ = listener.accept()
    kstamp.enable(client._sock)
    sweep_began = time.perf_counter()
    blocking_sleep(0.02)
    sent = time.perf_counter()
    server.sendall(FRAME)
    blocking_sleep(0.005)
    offset = time.time() - time.perf_counter()
    arrival, events, _data, tail, groups = reader._read_events(client.fileno(), True, True, offset, sweep_began,
                                                               kstamp.PLAUSIBLE_AGE_S, b"", False)
    for s in (client, server, listener):
        s.close()
    assert events == [(None, EVENT[6:-2])] and tail == b"" and groups is None
    assert 0.0 <= (arrival - sent) * 1000.0 < 2.0, (  # the arrival (~µs after the send), not the sweep's start
        f"arrival - send {(arrival - sent) * 1000.0:.3f} ms, tolerance [0, 2) ms")
