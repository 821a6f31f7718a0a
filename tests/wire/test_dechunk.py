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


def test_the_data_spans_of_a_body_cut_anywhere_are_what_the_decoder_yields():
    """One framing parser: the raw offsets the timing code maps arrivals through (data_spans) and
    the bytes the stream is read from (ChunkedDecoder.feed) come from the same loop."""
    import random

    from tokenswarm.wire.dechunk import data_spans

    rng = random.Random(5)
    for _ in range(300):
        pieces = [bytes(rng.randrange(97, 123) for _ in range(rng.randrange(1, 40))) for _ in range(rng.randrange(1, 6))]
        ext = [b"", b";x=1", b" ;y"]
        raw = b"".join(b"%x%s\r\n%s\r\n" % (len(p), rng.choice(ext), p) for p in pieces) + b"0\r\n\r\n"
        cut = rng.randrange(0, len(raw) + 1)
        spans = data_spans(raw[:cut])
        assert b"".join(raw[a:b] for a, b in spans) == ChunkedDecoder().feed(raw[:cut])
        assert all(a < b and (not i or spans[i - 1][1] <= a) for i, (a, b) in enumerate(spans))


def test_data_spans_refuse_a_body_whose_framing_does_not_parse():
    from tokenswarm.wire.dechunk import data_spans

    with pytest.raises(ChunkedError):
        data_spans(b"zz\r\nxx")
