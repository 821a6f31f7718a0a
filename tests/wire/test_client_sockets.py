"""The streaming client over real sockets, where the socket is the point: each reader (the
event-loop callback with and without its C fast path, the greenlet loop) reads every framing
exactly and dates each read, the library's header read hands its body bytes over, the pool
keeps or drops connections, and the production deadlines and cuts reach the client. Stream
handling, error mapping and record building are specified in memory in test_client_streams.py."""

import gc
import time

import pytest
from geventhttpclient import HTTPClient

from tests.helpers.procs import scripted_server
from tests.helpers.scripted_server import ROLE
from tokenswarm.record import RecordIdentity
from tokenswarm.wire.client import stream_call
from tokenswarm.wire.clock import WallAnchor
from tokenswarm.wire.pool import tune_pool
from tokenswarm.wire.transport import PoolTransport

IDENTITY = RecordIdentity(run_id="r", worker_id="w", seq=0, task="qa", user_class="QAUser", request_key="k",
                          scheduled_at_s=0.0)
BODY = b'{"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": true}'


@pytest.fixture(params=["hub-native", "hub-python", "greenlet"], autouse=True)
def reader(request, monkeypatch):
    """Every case runs with each reader: the event-loop callback with and without its C fast
    path, and the greenlet loop."""
    import tokenswarm.wire.reader as hub_reader

    if request.param == "hub-native" and not hub_reader.FAST:
        pytest.skip("the C extension tokenswarm.wire._fastread is not built")
    monkeypatch.setattr(hub_reader, "USE_HUB_READER", request.param != "greenlet")
    monkeypatch.setattr(hub_reader, "FAST", request.param == "hub-native")
    return request.param


#: How ``call`` makes its client's pool: as Locust's users have it (``tune_pool``: stamped
#: plain-TCP sockets, whose response heads the event loop reads) or the library's own.
POOL = {"tuned": True}


@pytest.fixture(params=["tuned-pool", "library-pool"], autouse=True)
def pool_kind(request, monkeypatch):
    """Every case runs on both kinds of pool socket (see :data:`POOL`)."""
    monkeypatch.setitem(POOL, "tuned", request.param == "tuned-pool")
    return request.param


@pytest.fixture(scope="module")
def server():
    with scripted_server() as url:
        yield url


def call(server, script, query="", first_token_s=5.0, total_s=10.0, client=None):
    host, port = server.split("//")[1].split(":")
    if client is None:
        client = HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=4)
        if POOL["tuned"]:
            tune_pool(client)
    path = f"/{script}/v1/chat/completions?{query}"
    rec, text = stream_call(PoolTransport(client, time.perf_counter), path, BODY, {"Content-Type": "application/json"},
                            identity=IDENTITY,
                            anchor=WallAnchor(0.0, 0.0), first_token_timeout_s=first_token_s,
                            total_timeout_s=total_s, keep_output=True)
    return rec, text, client


def test_normal_stream_counts_every_token_and_chunk(server):
    rec, text, _ = call(server, "normal", "n=6&gap_ms=20")
    assert rec.outcome == "ok" and rec.output_tokens == 6 and rec.chunk_tokens == [1] * 6
    assert len(rec.chunk_offsets_ms) == 6
    gaps = [b - a for a, b in zip(rec.chunk_offsets_ms, rec.chunk_offsets_ms[1:])]
    # one read per event: gaps reflect the server's 20 ms pacing, not a batching artifact
    assert sorted(gaps)[len(gaps) // 2] > 15
    assert text.startswith("w0_0 ") and rec.output_text == text


@pytest.mark.parametrize("script", ["split", "cut_frames", "crlf", "keepalive", "no_blank_lines", "close_delimited"])
def test_awkward_but_valid_framings_are_read_exactly(server, script):
    rec, _, _ = call(server, script, "n=5&gap_ms=5")
    assert rec.outcome == "ok", rec.error
    assert rec.chunk_tokens == [1] * 5 and rec.output_tokens == 5


ROLE_FRAME = len(b"%x\r\n" % len(ROLE)) + len(ROLE) + 2


@pytest.mark.parametrize("glue", [0, 1, 3, 60, ROLE_FRAME - 2, ROLE_FRAME - 1, ROLE_FRAME, ROLE_FRAME + 1,
                                  ROLE_FRAME + 3, ROLE_FRAME + 40])
def test_body_bytes_read_with_the_headers_at_any_framing_position(server, glue):
    # The library parses whatever body came with the headers; the reader takes the framing
    # over at a chunk boundary, or hands it back when the library was inside a chunk.
    rec, text, client = call(server, "glued", f"n=5&gap_ms=5&glue={glue}")
    assert rec.outcome == "ok", rec.error
    assert rec.chunk_tokens == [1] * 5 and rec.output_tokens == 5
    assert text == "".join(f"w{i}_0 " for i in range(5))
    rec2, _, _ = call(server, "normal", "n=2", client=client)  # the connection was left reusable
    assert rec2.outcome == "ok"


def test_the_hub_reader_takes_the_framing_over_after_a_header_read_that_ended_inside_a_chunk(server, reader,
                                                                                              monkeypatch):
    # Under backlog the library's 4 KiB header read ends inside a chunk; the library keeps the
    # framing only until one of its reads ends between chunks (its parser costs ~3 us/event).
    # (The greenlet reader leaves the framing to the library by design: there, the case is
    # just the normal path, checked for correctness only.)
    from geventhttpclient.response import HTTPResponse

    library_reads = []
    real_feed = HTTPResponse.feed
    monkeypatch.setattr(HTTPResponse, "feed",
                        lambda self, data: (data != b"0\r\n\r\n" and library_reads.append(data)) or real_feed(self, data))
    rec, text, _ = call(server, "glued", f"n=6&gap_ms=5&glue={ROLE_FRAME + 40}")
    assert rec.outcome == "ok" and rec.chunk_tokens == [1] * 6
    assert text == "".join(f"w{i}_0 " for i in range(6))
    if reader != "greenlet":
        # the header read and the rest of the cut chunk; not the ~8 later chunks, trailer and [DONE]
        assert len(library_reads) <= 3
    else:
        # the library read the whole body itself, however its reads fell (a busy machine joins them)
        fed = b"".join(library_reads)
        assert all(f"w{i}_0 ".encode() in fed for i in range(6)) and b"[DONE]" in fed


def test_a_finished_stream_leaves_no_reference_cycles_for_the_garbage_collector(server):
    # The collector's passes stop the event loop; at 256 streams, cycles left per request made
    # them take 20-35 ms every few seconds. Everything a request allocates is freed by refcount.
    _, _, client = call(server, "normal", "n=3")
    gc.collect()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        for _ in range(3):
            rec, _, _ = call(server, "normal", "n=3", client=client)
            assert rec.outcome == "ok"
        left = [type(o).__name__ for o in gc.garbage] if gc.collect() else []
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
    assert left == []


def test_every_reader_reports_a_cut_chunked_body_as_closed_mid_stream(server):
    rec, _, _ = call(server, "cut", "n=6")
    assert rec.outcome == "stream_error" and rec.error == "connection closed mid-stream"
    assert rec.chunk_tokens == [1, 1, 1, 1] and rec.output_tokens == 4


def test_a_plainly_framed_stream_is_read_by_the_fast_path_from_its_first_read_to_its_end(server, reader):
    # The first read after the headers and the last one (its [DONE] and the terminating chunk)
    # went to the Python parsers before: two of them per request, ~40 us of CPU each request.
    if reader != "hub-native":
        pytest.skip("the C fast path's own counters")
    from tokenswarm.wire import _fastread

    _, _, client = call(server, "normal", "n=2")  # a kept-alive connection from here on
    before = _fastread.read_stats()
    rec, text, client = call(server, "normal", "n=6&gap_ms=5", client=client)
    after = _fastread.read_stats()
    assert rec.outcome == "ok" and rec.chunk_tokens == [1] * 6 and text == "".join(f"w{i}_0 " for i in range(6))
    assert after["general_reads"] == before["general_reads"]
    assert after["reads"] > before["reads"]
    rec2, _, _ = call(server, "normal", "n=2", client=client)  # the library saw the body end: reusable
    assert rec2.outcome == "ok" and rec2.conn_reused


def test_the_production_first_token_deadline_interrupts_a_waiting_header_read(server):
    rec, _, _ = call(server, "slow_headers", "delay_s=3", first_token_s=0.3)
    assert rec.outcome == "timeout" and rec.error == "first_token timeout" and rec.ttft_ms is None


def test_connection_is_reused_after_a_complete_stream_and_after_an_error(server):
    _, _, client = call(server, "normal", "n=2")
    _, _, client = call(server, "http_429", client=client)
    rec, _, _ = call(server, "normal", "n=2", client=client)
    assert rec.outcome == "ok"


def test_connection_refused_is_an_http_error():
    from tests.helpers.procs import free_port
    rec, _, _ = call(f"http://127.0.0.1:{free_port()}", "normal")
    assert rec.outcome == "http_error" and rec.error == "connection refused" and rec.http_status is None


@pytest.mark.timing
def test_events_written_together_are_one_delivery_and_give_the_itl_of_one_multi_token_chunk(server):
    # The same server behaviour, 4 deliveries of 3 tokens 30 ms apart, framed as one 3-token
    # chunk each (vLLM) or as 3 one-token events in one write (llama.cpp).
    from tokenswarm.metrics import itl_ms

    vllm, _, _ = call(server, "normal", "n=4&per_chunk=3&gap_ms=30")
    llama, _, _ = call(server, "normal", "n=12&together=3&gap_ms=30")
    assert vllm.outcome == llama.outcome == "ok" and vllm.output_tokens == llama.output_tokens == 12
    offs = llama.chunk_offsets_ms
    assert len(offs) == 12 and all(offs[i] == offs[i + 1] == offs[i + 2] for i in range(0, 12, 3)), offs
    for rec in (vllm, llama):
        samples = itl_ms(rec.chunk_offsets_ms, rec.chunk_tokens)
        # three samples of (gap / 3) per delivery after the first, never the 0 ms of a shared read
        assert len(samples) == 9 and all(samples[i] == samples[i + 1] == samples[i + 2] for i in range(0, 9, 3))
        assert sum(samples) == pytest.approx(rec.chunk_offsets_ms[-1] - rec.chunk_offsets_ms[0])
        assert all(5.0 < s < 25.0 for s in samples), f"~10 ms per token (30 ms / 3), -5/+15 ms tolerance: {samples}"




def test_the_hub_reader_asks_for_kernel_stamps_only_on_sockets_that_do_not_have_them(server, reader, monkeypatch):
    # A pool socket has its stamps on from the moment it is made; asking again for every
    # response on a kept-alive connection was one setsockopt per request.
    if reader == "greenlet":
        pytest.skip("the hub reader's registration")
    from tokenswarm.wire import kstamp

    if not kstamp.ENABLED:
        pytest.skip("no kernel receive stamps on this platform")
    asked = []
    real_enable = kstamp.enable
    monkeypatch.setattr(kstamp, "enable", lambda sock: asked.append(sock) or real_enable(sock))
    host, port = server.split("//")[1].split(":")
    tuned = HTTPClient(host, int(port), connection_timeout=2, network_timeout=30, concurrency=2)
    tune_pool(tuned)
    rec, _, _ = call(server, "normal", "n=3&gap_ms=5", client=tuned)
    assert rec.outcome == "ok" and rec.chunk_tokens == [1] * 3
    assert len(asked) == 1  # when the pool made the socket, and not again when its response was read
    rec, _, _ = call(server, "normal", "n=3&gap_ms=5", client=tuned)
    assert rec.outcome == "ok" and rec.conn_reused and len(asked) == 1
    plain_before = len(asked)
    rec, _, _ = call(server, "normal", "n=3&gap_ms=5")  # the library's own socket: asked when read
    assert rec.outcome == "ok" and len(asked) == plain_before + 1
