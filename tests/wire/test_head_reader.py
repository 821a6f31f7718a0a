"""The event loop reads a response's head (``head.HeadReader``): on a stamped pool socket the
request's greenlet sends, sleeps once and is woken when the whole response has been read; the
head is parsed without the HTTP library unless it is anything but a ``200`` chunked head, which
the library then parses from the bytes already read. What the loop read keeps its dates."""

import time

import pytest
from geventhttpclient import HTTPClient

from tests.helpers.procs import scripted_server
from tokenswarm.record import RecordIdentity
from tokenswarm.wire import libread, send
from tokenswarm.wire.client import StreamHooks, stream_call
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.head import HEAD_MAX_BYTES, HUB_HEAD, HeadReader, simple_head
from tokenswarm.wire.poller import StreamPoller, stream_poller
from tokenswarm.wire.pool import tune_pool
from tokenswarm.wire.transport import PoolTransport

pytestmark = pytest.mark.usefixtures("hub_reader")  # the head read by the event loop, and when it is not

IDENTITY = RecordIdentity(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
                          scheduled_at_s=0.0)
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'
HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


# -- the head parse ---------------------------------------------------------------------------------

def test_a_200_chunked_head_is_parsed_without_the_library():
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n"
            b"X-Request-Id:  abc \r\nVary: a\r\nvary: b\r\n\r\n")
    assert simple_head(head) == {"content-type": "text/event-stream", "transfer-encoding": "chunked",
                                 "x-request-id": "abc", "vary": "a, b"}
    assert simple_head(b"HTTP/1.1 200\r\nTransfer-Encoding: Chunked\r\n\r\n") == {"transfer-encoding": "Chunked"}


@pytest.mark.parametrize("head", [
    b"HTTP/1.1 429 Too Many Requests\r\nContent-Length: 2\r\n\r\n",  # an error: the library reads its body
    b"HTTP/1.1 100 Continue\r\n\r\n",  # an interim response: the library reads on to the final one
    b"HTTP/1.0 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n",  # another version
    b"HTTP/1.1 2000 OK\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n\r\n",  # close-delimited
    b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nContent-Length: 10\r\n\r\n",  # both framings
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n",
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-A: 1\r\n  folded\r\n\r\n",  # obsolete line folding
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding : chunked\r\n\r\n",  # space before the colon
    b"HTTP/1.1 200 OK\r\nno colon here\r\nTransfer-Encoding: chunked\r\n\r\n",
])
def test_any_other_head_is_left_to_the_library(head):
    assert simple_head(head) is None


# -- what a head read keeps ---------------------------------------------------------------------------

class _Poller:
    """Stands in for the stream poller: what a head reader registers and removes."""

    def __init__(self):
        self.fds = set()

    def add(self, fd, handler, **_kw):
        self.fds.add(fd)

    def remove(self, fd):
        self.fds.discard(fd)


def test_a_head_split_over_reads_is_complete_at_the_read_that_ends_it_and_dated_by_it():
    head = HeadReader(7, _Poller())
    head.take(1.0, HEAD[:30], None)
    assert not head.done.is_set() and head.head_end == -1
    head.take(1.5, HEAD[30:-2], None)
    assert not head.done.is_set()  # "\r\n\r\n" split over the reads
    head.take(2.0, HEAD[-2:] + b"5\r\nhello\r\n", None)
    assert head.done.is_set() and head.head_end == len(HEAD)
    assert head.time_of(head.head_end) == 2.0
    assert head.body_pieces() == [(2.0, b"5\r\nhello\r\n")]


def test_bytes_read_with_the_head_keep_the_times_the_watcher_saw_them_arrive():
    # One read of the head and two chunks; the watcher had noted the head and the first chunk
    # arriving earlier than the read's own stamp (3.0).
    first, second = b"5\r\nhello\r\n", b"5\r\nworld\r\n"
    head = HeadReader(7, _Poller())
    head.take(3.0, HEAD + first + second, [(len(HEAD), 1.0), (len(HEAD) + len(first), 2.0)])
    assert head.time_of(head.head_end) == 1.0
    assert head.body_pieces() == [(2.0, first), (3.0, second)]
    head.take(4.0, b"0\r\n\r\n", None)  # read on after the head, until someone takes over
    assert head.body_pieces()[-1] == (4.0, b"0\r\n\r\n")


def test_eof_and_errors_end_the_head_read_and_its_registration():
    poller = _Poller()
    head = HeadReader(7, poller)
    head.start()
    assert poller.fds == {7}
    head.take(1.0, b"", None)
    assert head.eof and head.done.is_set() and poller.fds == set()
    head.unhook()  # idempotent
    assert head.head_end == -1 and head.body_pieces() == []


def test_a_head_that_never_ends_is_handed_to_the_library_past_its_limit():
    head = HeadReader(7, _Poller())
    head.take(1.0, b"HTTP/1.1 200 OK\r\nX: " + b"a" * HEAD_MAX_BYTES, None)
    assert head.done.is_set() and head.head_end == -1


# -- on real sockets --------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def server():
    with scripted_server() as url:
        yield url


@pytest.fixture(autouse=True)
def hub_head():
    if not HUB_HEAD:
        pytest.skip("the C extension tokenswarm.wire._fastread is not built")
    from tokenswarm.wire import kstamp

    if not kstamp.maps_onto(time.perf_counter):
        pytest.skip("no kernel receive stamps here")


def stamped_client(server, concurrency=2):
    host, port = server.split("//")[1].split(":")
    client = HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=concurrency)
    tune_pool(client)  # as Locust's users have it
    return client


def call(client, script, query="", first_token_s=5.0, hooks=None, stream=True):
    return stream_call(PoolTransport(client, time.perf_counter), f"/{script}/v1/chat/completions?{query}", BODY,
                       {"Content-Type": "application/json"}, identity=IDENTITY, anchor=WallAnchor(0.0, 0.0),
                       first_token_timeout_s=first_token_s, total_timeout_s=10.0, keep_output=True, hooks=hooks,
                       stream=stream)


@pytest.fixture
def library_heads(monkeypatch):
    """Counts the responses whose head the HTTP library parsed (made where the request was sent,
    or from the bytes the event loop read)."""
    made = []
    real = send.HTTPSocketPoolResponse

    def counted(*args, **kw):
        made.append(kw.get("pre_buffered", b""))
        return real(*args, **kw)

    monkeypatch.setattr(send, "HTTPSocketPoolResponse", counted)
    monkeypatch.setattr(libread, "HTTPSocketPoolResponse", counted)
    return made


def test_a_stream_is_read_with_one_registration_and_no_library_parse(server, library_heads, monkeypatch):
    from tokenswarm.wire import _fastread

    client = stamped_client(server)
    assert call(client, "normal", "n=2")[0].outcome == "ok"  # connected, poller made
    adds = []
    real_add = StreamPoller.add
    monkeypatch.setattr(StreamPoller, "add", lambda self, fd, h, **kw: adds.append(fd) or real_add(self, fd, h, **kw))
    before = _fastread.read_stats()
    rec, text = call(client, "normal", "n=6&gap_ms=5")
    after = _fastread.read_stats()
    assert rec.outcome == "ok" and rec.conn_reused and rec.chunk_tokens == [1] * 6
    assert text == "".join(f"w{i}_0 " for i in range(6))
    assert rec.headers_ms is not None and 0 <= rec.headers_ms <= rec.ttft_ms
    assert library_heads == [] and len(adds) == 1  # the head reader's registration, taken over by the body's
    assert after["head_reads"] > before["head_reads"] and after["general_reads"] == before["general_reads"]
    rec2, _ = call(client, "normal", "n=2")  # the body reader ended the response: the socket went back
    assert rec2.outcome == "ok" and rec2.conn_reused and library_heads == []


@pytest.mark.parametrize("glue", [0, 3, 20, 60, 200])
def test_body_bytes_that_came_with_the_head_are_decoded_first_at_any_framing_position(server, glue):
    client = stamped_client(server)
    rec, text = call(client, "glued", f"n=5&gap_ms=5&glue={glue}")
    assert rec.outcome == "ok" and rec.chunk_tokens == [1] * 5, (glue, rec.error)
    assert text == "".join(f"w{i}_0 " for i in range(5))
    assert call(client, "normal", "n=2")[0].conn_reused


def test_an_error_answer_is_parsed_by_the_library_from_the_bytes_the_loop_read(server, library_heads):
    client = stamped_client(server)
    rec, _ = call(client, "http_429")
    assert rec.outcome == "http_error" and rec.http_status == 429 and "scripted 429" in rec.error
    assert len(library_heads) == 1 and library_heads[0].startswith(b"HTTP/1.1 429")
    rec, _ = call(client, "normal", "n=2")
    assert rec.outcome == "ok" and rec.conn_reused  # the library kept the connection


def test_a_close_delimited_stream_is_read_by_the_library_after_the_loop_read_its_head(server, library_heads):
    rec, text = call(stamped_client(server), "close_delimited", "n=4&gap_ms=5")
    assert rec.outcome == "ok" and rec.chunk_tokens == [1] * 4 and text == "".join(f"w{i}_0 " for i in range(4))
    assert len(library_heads) == 1


def test_a_hooked_stream_is_read_by_its_greenlet_through_the_library(server, library_heads):
    seen = []
    hooks = StreamHooks(on_chunks=lambda _base, ms, n: seen.append((ms, n)))
    client = stamped_client(server)
    rec, text = call(client, "normal", "n=4&gap_ms=5", hooks=hooks)
    assert rec.outcome == "ok" and rec.chunk_tokens == [1] * 4 and sum(n for _, n in seen) == 4
    assert len(library_heads) == 1 and library_heads[0].startswith(b"HTTP/1.1 200")
    # each delivery's hook saw the offset the record keeps for its chunk
    assert all(any(abs(ms - o) < 0.002 for o in rec.chunk_offsets_ms) for ms, _ in seen), (seen, rec.chunk_offsets_ms)
    assert call(client, "normal", "n=2")[0].conn_reused


def test_a_non_streamed_answer_in_chunks_is_read_whole(server):
    client = stamped_client(server)
    rec, text = call(client, "json_chunked", stream=False)
    assert rec.outcome == "ok" and text == "w0 w1 w2" and rec.output_tokens == 3
    assert call(client, "normal", "n=2")[0].conn_reused


def test_a_deadline_while_the_loop_waits_for_the_head_frees_the_connection(server):
    client = stamped_client(server, concurrency=1)
    rec, _ = call(client, "slow_headers", "delay_s=3", first_token_s=0.3)
    assert rec.outcome == "timeout" and rec.error == "first_token timeout" and rec.ttft_ms is None
    assert stream_poller(time.perf_counter).handlers == {}  # nothing left registered
    rec, _ = call(client, "normal", "n=2")  # the only slot of the pool was freed
    assert rec.outcome == "ok" and not rec.conn_reused


def test_a_kept_alive_connection_the_server_closed_is_retried_on_a_fresh_one(server):
    client = stamped_client(server)
    retries = send.stats["stale_connection_retries_count"]
    records = [call(client, "closes_kept_alive", "n=3&gap_ms=1")[0] for _ in range(3)]
    assert [r.outcome for r in records] == ["ok"] * 3 and [r.conn_reused for r in records] == [False] * 3
    assert send.stats["stale_connection_retries_count"] - retries == 2
