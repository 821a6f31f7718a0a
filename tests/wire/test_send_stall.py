"""A send held up by the generator is dated by the kernel: when the process is descheduled right
after writing the request, the server may answer before the send time is read, and a send time
read late would make TTFT negative and the server look faster than it is."""

from __future__ import annotations

import socket
import time

import pytest

from tokenswarm.wire import send
from tokenswarm.wire.send import kernel_sent_time, sent_time

pytestmark = pytest.mark.skipif(getattr(socket, "TCP_INFO", None) is None, reason="needs Linux TCP_INFO")
JIFFY_S = 0.005  # the kernel counts tcpi_last_data_sent in jiffies (1-4 ms); a margin above that


@pytest.fixture
def connection():
    srv = socket.create_server(("127.0.0.1", 0))
    c = socket.create_connection(srv.getsockname())
    peer, _ = srv.accept()
    yield c
    for s in (c, peer, srv):
        s.close()


def test_a_stall_after_the_write_is_not_in_the_send_time(connection):
    before = time.perf_counter()
    connection.sendall(b"POST / HTTP/1.1\r\n\r\n")
    wrote = time.perf_counter()
    time.sleep(0.2)  # the process held up after handing the request to the kernel
    after = time.perf_counter()
    sent = kernel_sent_time(connection, before, after, time.perf_counter)
    assert before <= sent <= after
    assert abs(sent - wrote) < JIFFY_S  # not the reading 200 ms later


def test_a_stall_before_the_write_stays_in_the_send_time(connection):
    before = time.perf_counter()
    time.sleep(0.2)  # held up before the bytes went out: the send really was late
    connection.sendall(b"POST / HTTP/1.1\r\n\r\n")
    wrote = time.perf_counter()
    sent = kernel_sent_time(connection, before, time.perf_counter(), time.perf_counter)
    assert abs(sent - wrote) < JIFFY_S and sent - before > 0.19


def test_kernel_dated_sends_are_counted_for_the_manifest(connection):
    n = send.stats["kernel_dated_sends_count"]
    connection.sendall(b"x")
    kernel_sent_time(connection, time.perf_counter() - 0.01, time.perf_counter(), time.perf_counter)
    assert send.stats["kernel_dated_sends_count"] == n + 1


def test_without_tcp_info_the_reading_after_the_write_stands(monkeypatch, connection):
    monkeypatch.setattr(send, "_TCP_INFO", None)
    assert kernel_sent_time(connection, 1.0, 2.0, time.perf_counter) == 2.0


def test_a_small_write_preempted_on_its_way_out_is_dated_when_it_began():
    # the write woke the server, which ran before this process read the clock again (1.5 ms):
    # the request was with the server from the write on (281 of 1,259 TTFTs read 0.5-2 ms short)
    assert sent_time(None, 10.0, 10.0015, 300, time.perf_counter) == 10.0


def test_a_write_that_was_not_held_up_is_dated_when_it_returned():
    assert sent_time(None, 10.0, 10.00003, 300, time.perf_counter) == 10.00003


def test_a_large_write_held_up_is_not_assumed_to_have_left_at_once():
    # more than a send buffer takes in one write: the bytes may have left late
    assert sent_time(None, 10.0, 10.0015, 100_000, time.perf_counter) == 10.0015


def test_a_long_hold_up_is_dated_by_the_kernel(connection):
    before = time.perf_counter()
    connection.sendall(b"POST / HTTP/1.1\r\n\r\n")
    wrote = time.perf_counter()
    time.sleep(0.2)
    sent = sent_time(connection, before, time.perf_counter(), 20, time.perf_counter)
    assert abs(sent - wrote) < JIFFY_S


def test_a_send_dated_after_the_answer_came_is_moved_back_to_the_answer():
    # a jiffy-counted kernel date can fall after the headers' exact kernel stamp (seen: 1.9 ms);
    # the server cannot answer a request before it left
    timing = send.RequestTiming(time.perf_counter)
    timing.sent_s = 10.0019
    send.note_headers(timing, 10.0)
    assert timing.sent_s == timing.headers_s == 10.0


def test_a_send_before_the_answer_keeps_its_date():
    timing = send.RequestTiming(time.perf_counter)
    timing.sent_s = 10.0
    send.note_headers(timing, 10.003)
    assert (timing.sent_s, timing.headers_s) == (10.0, 10.003)
