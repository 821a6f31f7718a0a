"""The chunked-transfer decoder yields exactly the body, however the bytes are split."""

import random

import pytest

from tokenswarm.wire.dechunk import ChunkedDecoder, ChunkedError


def encode(pieces, ext=False, trailer=b""):
    out = b""
    for p in pieces:
        out += b"%x%s\r\n%s\r\n" % (len(p), b";name=val" if ext else b"", p)
    return out + b"0\r\n" + trailer + b"\r\n"


BODY = [b'data: {"i": %d}\n\n' % i for i in range(50)] + [b"x" * 5000, b"\n"]


@pytest.mark.parametrize("ext,trailer", [(False, b""), (True, b""), (False, b"X-Trailer: 1\r\n")])
def test_random_splits_give_the_body_and_detect_the_end(ext, trailer):
    wire = encode(BODY, ext, trailer)
    rng = random.Random(3)
    for _ in range(100):
        d = ChunkedDecoder()
        cuts = sorted(rng.sample(range(1, len(wire)), rng.randint(1, 40)))
        got = b"".join(d.feed(wire[a:b]) for a, b in zip([0] + cuts, cuts + [len(wire)]))
        assert got == b"".join(BODY) and d.done


def test_whole_chunks_in_one_read_take_the_fast_path():
    d = ChunkedDecoder()
    assert d.feed(encode([b"data: {}\n\n"])[:-5]) == b"data: {}\n\n" and not d.done
    assert d.feed(b"0\r\n\r\n") == b"" and d.done


@pytest.mark.parametrize("wire", [b"zz\r\nabc\r\n", b"3\r\nabcXY", b"-1\r\n"])
def test_invalid_framing_is_an_error(wire):
    with pytest.raises(ChunkedError):
        ChunkedDecoder().feed(wire)
