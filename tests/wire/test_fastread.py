"""The C fast path splits a read exactly as the Python parsers do, or declines it.

``_fastread.split`` is the parsing half of the hub reader's native read: it must either
return the same events as ``ChunkedDecoder`` + ``SSEParser`` fed the same bytes from an idle
state (and leave nothing that those would have kept), or return ``None`` so that they take
the read. Framings are generated: whole and split chunks, several events per chunk, CRLF,
comments, ``event:`` lines, chunk extensions, the last chunk.
"""

import random

import orjson
import pytest

from tokenswarm.wire.dechunk import ChunkedDecoder
from tokenswarm.wire.sse import SSEParser

fastread = pytest.importorskip("tokenswarm.wire._fastread", reason="the C extension is not built")


def python_split(data: bytes, chunked: bool):
    dec, parser = ChunkedDecoder(), SSEParser()
    body = dec.feed(data) if chunked else data
    events = parser.feed(body)
    return events, (dec.idle if chunked else True) and parser.idle


def payload(rng: random.Random) -> bytes:
    text = "".join(rng.choice("ab \\\"é{}:,\u4e2d") for _ in range(rng.randint(0, 12)))
    return orjson.dumps({"choices": [{"delta": {"content": text}}]})


def event(rng: random.Random) -> bytes:
    kind = rng.random()
    if kind < 0.7:
        return b"data: " + payload(rng) + b"\n\n"
    if kind < 0.75:
        return b"data: [DONE]\n\n"
    if kind < 0.8:
        return b"data: " + payload(rng) + b"\r\n\r\n"
    if kind < 0.85:
        return b": keep-alive\n\n"
    if kind < 0.9:
        return b"event: error\ndata: " + payload(rng) + b"\n\n"
    if kind < 0.95:
        return b"data:" + payload(rng) + b"\n\n"  # no space after the colon
    return b"data: " + payload(rng) + b"\ndata: more\n\n"  # a two-line event


def framed(rng: random.Random, events: list[bytes]) -> bytes:
    out, i = [], 0
    while i < len(events):
        k = rng.randint(1, 3)  # events per chunk
        body = b"".join(events[i:i + k])
        i += k
        if rng.random() < 0.5 and len(body) > 4:  # an event split across two chunks
            cut = rng.randint(1, len(body) - 1)
            parts = [body[:cut], body[cut:]]
        else:
            parts = [body]
        for part in parts:
            ext = b";name=value" if rng.random() < 0.05 else b""
            size = (b"%x" % len(part)).upper() if rng.random() < 0.3 else b"%x" % len(part)
            out.append(size + ext + b"\r\n" + part + b"\r\n")
    if rng.random() < 0.1:
        out.append(b"0\r\n\r\n")
    return b"".join(out)


@pytest.mark.parametrize("seed", range(40))
def test_generated_reads_split_like_the_python_parsers_or_are_declined(seed):
    rng = random.Random(seed)
    accepted = 0
    for _ in range(200):
        events = [event(rng) for _ in range(rng.randint(1, 6))]
        chunked = rng.random() < 0.8
        data = framed(rng, events) if chunked else b"".join(events)
        if rng.random() < 0.2:  # a read that ends inside the stream
            data = data[:rng.randint(1, len(data))]
        fast = fastread.split(data, chunked)
        if fast is not None:
            accepted += 1
            expected, idle = python_split(data, chunked)
            assert fast == expected and idle, data
    assert accepted > 0  # the fast path is taken for part of every seed's reads


@pytest.mark.parametrize("seed", range(20))
def test_a_read_that_ends_inside_a_chunk_gives_its_complete_chunks_and_the_raw_rest(seed):
    # What a client reading a backlog sees: the read stops anywhere. The complete chunks must
    # give exactly the Python parsers' events, and the rest must start at a chunk boundary
    # (it goes in front of the next read).
    rng = random.Random(1000 + seed)
    with_tail = 0
    for _ in range(200):
        events = [b"data: " + payload(rng) + b"\n\n" for _ in range(rng.randint(1, 8))]
        frames = [b"%x\r\n%s\r\n" % (len(e), e) for e in events]
        data = b"".join(frames)
        data = data[:rng.randint(1, len(data))]
        got = fastread.split(data, True, True)
        assert got is not None  # the simple framing, cut anywhere, is always taken
        fast, tail = got
        assert data.endswith(tail)
        complete = data[:len(data) - len(tail)]
        expected, idle = python_split(complete, True) if complete else ([], True)
        assert fast == expected and idle
        if tail:
            with_tail += 1
            assert any(f.startswith(tail) for f in frames)  # the start of a chunk
    assert with_tail > 100


def test_the_common_reads_are_taken():
    body = b'data: {"a":1}\n\n' + b"data: [DONE]\n\n"
    one = b"%x\r\n%s\r\n" % (len(body), body)
    two = b"%x\r\n%s\r\n%x\r\n%s\r\n" % (len(body), body, len(body), body)
    assert fastread.split(one, True) == [(None, b'{"a":1}'), (None, b"[DONE]")]
    assert fastread.split(two, True) == [(None, b'{"a":1}'), (None, b"[DONE]")] * 2
    assert fastread.split(body, False) == [(None, b'{"a":1}'), (None, b"[DONE]")]


@pytest.mark.parametrize("data", [
    b"", b"0\r\n\r\n", b"f;x=y\r\ndata: {\"a\":1}\n\n\r\n", b"1f\r\ndata: {\"a\":1}\n\n\r\n",
    b"f\r\ndata: {\"a\":1}\n\n", b"f\r\ndata: {\"a\":1}\n\n\r", b"F\r\ndata: {\"a\":1}\n\n\r\n0\r\n\r\n",
    b"\nf\r\ndata: {\"a\":1}\n\n\r\n",
])
def test_framing_left_to_the_python_decoder_is_declined(data):
    assert fastread.split(data, True) is None


def _native_read(data: bytes):
    """One ``read_events`` of ``data`` as a socket delivered it (no stamps, no watcher)."""
    import socket

    a, b = socket.socketpair()
    try:
        a.sendall(data)
        b.setblocking(False)
        _arrival, events, raw, tail, _groups = fastread.read_events(b.fileno(), True, False, 0.0, 1.0, 60.0, b"",
                                                                    False)
        return events, raw, tail
    finally:
        a.close()
        b.close()


EVENTS = b'data: {"a":1}\n\n' + b"data: [DONE]\n\n"
CHUNK = b"%x\r\n%s\r\n" % (len(EVENTS), EVENTS)


@pytest.mark.parametrize("data", [CHUNK + b"0\r\n\r\n", b"0\r\n\r\n"], ids=["with-events", "alone"])
def test_a_read_that_ends_with_the_terminating_chunk_is_taken_and_says_the_body_ended(data):
    # The stream's last read (its [DONE] and the terminating chunk, usually one write) no
    # longer goes to the Python parsers: tail None tells the reader the body is complete.
    events, raw, tail = _native_read(data)
    assert events == ([(None, b'{"a":1}'), (None, b"[DONE]")] if data.startswith(CHUNK) else [])
    assert raw is None and tail is None


@pytest.mark.parametrize("data", [CHUNK + b"0\r\nX-Trailer: 1\r\n\r\n", CHUNK + b"0\r\n\r\nHTTP/1.1",
                                  CHUNK + b"0;ext=1\r\n\r\n"],
                         ids=["trailer", "bytes-after-the-end", "extension"])
def test_a_terminating_chunk_with_anything_more_is_left_to_the_python_decoder(data):
    events, raw, tail = _native_read(data)
    assert events is None and raw == data and tail == b""


def test_a_terminating_chunk_cut_by_the_read_is_left_to_the_python_decoder():
    # "0\r\n" without its final CRLF: the general parsers keep the partial line for the next read
    events, raw, tail = _native_read(CHUNK + b"0\r\n")
    assert events is None and raw == CHUNK + b"0\r\n" and tail == b""
