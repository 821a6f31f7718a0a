"""A request's phases are timed apart: connect, the generator's own delay, the send (its last
byte handed to the kernel), the response headers, then the tokens (tokenswarm/wire/send.py,
client.py).

The clock here is scripted: every read advances it by exactly one tick (1 ms), and the
test's stand-ins for a slow connect or a slow send advance it by a known amount. A reading
taken at the wrong moment, or a derived value taken from another reading, then shows up as
whole ticks of error rather than as sub-microsecond jitter.
"""

import pytest
from geventhttpclient import HTTPClient

from tests.helpers.procs import scripted_server
from tokenswarm.record import RecordIdentity
from tokenswarm.wire import pool, send
from tokenswarm.wire.client import stream_call
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.transport import PoolTransport

TICK_S = 0.001
#: sent_at_s and scheduled_at_s are rounded to the microsecond, schedule_lag_ms to the microsecond
ROUNDING_MS = 0.0021
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'


class ScriptedClock:
    """Advances by one tick on every read; ``advance`` moves it by an amount the test chose."""

    def __init__(self) -> None:
        self.now_s = 1000.0
        self.reads = 0

    def __call__(self) -> float:
        self.now_s += TICK_S
        self.reads += 1
        return self.now_s

    def advance(self, seconds: float) -> None:
        self.now_s += seconds


@pytest.fixture(scope="module")
def server():
    with scripted_server() as url:
        yield url


def _client(url: str) -> HTTPClient:
    host, port = url.split("//")[1].split(":")
    return HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=2)


def _call(client, clock, anchor, scheduled_s, query="n=3&gap_ms=1"):
    base = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="U", request_key="k",
                scheduled_at_s=anchor.epoch(scheduled_s), schedule_lag_ms=None)
    rec, _ = stream_call(PoolTransport(client, clock), f"/normal/v1/chat/completions?{query}", BODY, {},
                         identity=RecordIdentity(**base), anchor=anchor,
                         first_token_timeout_s=5, total_timeout_s=10, scheduled_s=scheduled_s)
    return rec


def _call_path(client, clock, anchor, path):
    due = clock()
    base = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="U", request_key="k",
                scheduled_at_s=anchor.epoch(due), schedule_lag_ms=None)
    rec, _ = stream_call(PoolTransport(client, clock), path, BODY, {},
                         identity=RecordIdentity(**base), anchor=anchor, first_token_timeout_s=5,
                         total_timeout_s=10, scheduled_s=due)
    return rec


def _slow_connects(client, clock, seconds):
    """The pool's connect takes ``seconds`` of scripted time (before tokenswarm times it)."""
    cpool = client._connection_pool
    create = cpool._create_socket

    def slow_create():
        clock.advance(seconds)
        return create()

    cpool._create_socket = slow_create


def test_schedule_lag_is_the_difference_of_sent_at_and_scheduled_at_for_every_record(server):
    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = _client(server)
    records = []
    for i in range(4):
        scheduled = clock() - 0.005 * i  # due a little earlier each time
        records.append(_call(client, clock, anchor, scheduled))
    for rec in records:
        assert rec.outcome == "ok", rec.error
        derived = (rec.sent_at_s - rec.scheduled_at_s) * 1000.0
        assert rec.schedule_lag_ms == pytest.approx(derived, abs=ROUNDING_MS), (rec.schedule_lag_ms, derived)


def test_a_new_connection_is_timed_apart_and_is_neither_in_ttft_nor_in_the_send_delay(server):
    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = _client(server)
    _slow_connects(client, clock, 0.050)
    first = _call(client, clock, anchor, clock())
    second = _call(client, clock, anchor, clock())  # the kept-alive connection
    assert first.outcome == second.outcome == "ok"
    assert first.conn_reused is False
    assert 50.0 <= first.connect_ms < 50.0 + 5 * TICK_S * 1000  # the slow connect plus a few reads
    # A handful of reads between the due moment and the send -- not the 50 ms connect.
    assert 0.0 < first.send_delay_ms < 10 * TICK_S * 1000
    assert first.schedule_lag_ms == pytest.approx(first.connect_ms + first.send_delay_ms, abs=ROUNDING_MS)
    assert first.ttft_ms < 50.0 and second.ttft_ms < 50.0  # counted from the send, after the connect
    assert second.conn_reused is True and second.connect_ms is None
    assert second.send_delay_ms == pytest.approx(second.schedule_lag_ms, abs=ROUNDING_MS)
    for rec in (first, second):
        assert 0.0 < rec.headers_ms <= rec.ttft_ms <= rec.e2e_ms


def test_sent_at_is_read_after_the_last_byte_was_handed_to_the_kernel(server, monkeypatch):
    # A send that takes 30 ms (a big body into a full socket buffer): that is the generator's
    # time, so it is in send_delay_ms and TTFT counts from after it.
    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = _client(server)
    pool.tune_pool(client)  # its sockets are pool.StampedSocket (when kernel stamps exist)
    _call(client, clock, anchor, clock())  # connected
    sock = client._connection_pool._socket_queue.queue[-1]
    sendall = type(sock).sendall

    def slow_sendall(self, data, flags=0):
        clock.advance(0.030)
        return sendall(self, data, flags)

    monkeypatch.setattr(type(sock), "sendall", slow_sendall)
    due = clock()
    rec = _call(client, clock, anchor, due)
    assert rec.outcome == "ok", rec.error
    assert rec.conn_reused is True
    assert 30.0 <= rec.send_delay_ms < 30.0 + 10 * TICK_S * 1000
    assert rec.sent_at_s >= anchor.epoch(due + 0.030)
    assert rec.ttft_ms < 30.0


def test_keep_alive_off_opens_a_new_connection_for_every_request(server):
    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = _client(server)
    pool.tune_pool(client, keep_alive=False)
    records = [_call(client, clock, anchor, clock()) for _ in range(3)]
    assert [r.outcome for r in records] == ["ok"] * 3
    assert [r.conn_reused for r in records] == [False] * 3
    assert all(r.connect_ms is not None and r.connect_ms > 0 for r in records)
    assert client._connection_pool._socket_queue.qsize() == 0  # nothing was kept


def test_a_kept_alive_connection_closed_before_any_answer_is_retried_on_a_fresh_one(server):
    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = _client(server)
    retries_before = send.stats["stale_connection_retries_count"]
    records = [_call_path(client, clock, anchor, "/closes_kept_alive/v1/chat/completions?n=3&gap_ms=1")
               for _ in range(3)]
    # Every request was answered: none charged the server for the connection it had closed.
    assert [r.outcome for r in records] == ["ok"] * 3
    # Each later request found its kept-alive connection closed and went out again on a new one,
    # whose phases (a connect, then the send) are the ones recorded.
    assert [r.conn_reused for r in records] == [False] * 3
    assert all(r.connect_ms is not None for r in records)
    assert send.stats["stale_connection_retries_count"] - retries_before == 2
    for rec in records:
        assert rec.schedule_lag_ms == pytest.approx((rec.sent_at_s - rec.scheduled_at_s) * 1000.0, abs=ROUNDING_MS)


def test_a_connection_closed_before_any_answer_is_an_error_when_it_was_new():
    # Only a kept-alive connection is retried: a new one closed before answering is the server's doing.
    import socket
    import threading

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]

    def close_the_connection() -> None:
        conn, _ = listener.accept()
        conn.recv(65536)
        conn.close()

    threading.Thread(target=close_the_connection, daemon=True).start()
    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = HTTPClient("127.0.0.1", port, connection_timeout=2, network_timeout=5, concurrency=1)
    retries_before = send.stats["stale_connection_retries_count"]
    rec = _call(client, clock, anchor, clock())
    listener.close()
    assert rec.outcome == "http_error" and rec.conn_reused is False
    assert send.stats["stale_connection_retries_count"] == retries_before


def test_a_refused_connection_is_a_record_with_what_was_observed():
    from tests.helpers.procs import free_port

    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = HTTPClient("127.0.0.1", free_port(), connection_timeout=2, network_timeout=5, concurrency=1)
    due = clock()
    rec = _call(client, clock, anchor, due)
    assert rec.outcome == "http_error" and rec.error == "connection refused"
    assert rec.conn_reused is False and rec.connect_ms is not None  # the attempt, until refused
    assert rec.send_delay_ms is None and rec.headers_ms is None and rec.ttft_ms is None  # nothing was sent
    assert rec.schedule_lag_ms == pytest.approx((rec.sent_at_s - rec.scheduled_at_s) * 1000.0, abs=ROUNDING_MS)


def test_a_request_sent_whose_headers_never_came_counts_from_its_send(server):
    clock = ScriptedClock()
    anchor = WallAnchor(1_700_000_000.0, clock())
    client = _client(server)
    due = clock()
    base = dict(run_id="r", worker_id="w", seq=0, task="qa", user_class="U", request_key="k",
                scheduled_at_s=anchor.epoch(due))
    rec, _ = stream_call(PoolTransport(client, clock), "/slow_headers/v1/chat/completions?delay_s=5", BODY, {},
                         identity=RecordIdentity(**base), anchor=anchor,
                         first_token_timeout_s=0.2, total_timeout_s=1, scheduled_s=due)
    assert rec.outcome == "timeout" and rec.headers_ms is None and rec.ttft_ms is None
    assert rec.send_delay_ms is not None and rec.conn_reused is False  # it was sent, on a new connection
    assert rec.schedule_lag_ms == pytest.approx((rec.sent_at_s - rec.scheduled_at_s) * 1000.0, abs=ROUNDING_MS)
    assert rec.schedule_lag_ms == pytest.approx(rec.connect_ms + rec.send_delay_ms, abs=ROUNDING_MS)
