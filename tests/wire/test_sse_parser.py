"""The SSE parser yields exactly the events a compliant reader would, however bytes are split."""

import pytest

from tokenswarm.wire.sse import SSEParser

STREAM = (
    b'data: {"a": 1}\n\n'
    b": keep-alive\n\n"
    b'event: error\ndata: {"error": {"message": "x"}}\n\n'
    b"id: 7\nretry: 100\n"
    b'data: {"b": 2}\n\n'
    b"data: [DONE]\n\n"
)
EXPECTED = [(None, b'{"a": 1}'), ("error", b'{"error": {"message": "x"}}'), (None, b'{"b": 2}'), (None, b"[DONE]")]


def feed_all(parser, pieces):
    out = []
    for p in pieces:
        out.extend(parser.feed(p))
    out.extend(parser.close())
    return out


def test_whole_stream_in_one_read():
    assert feed_all(SSEParser(), [STREAM]) == EXPECTED


@pytest.mark.parametrize("size", [1, 2, 3, 7, 13])
def test_any_split_into_segments_gives_the_same_events(size):
    pieces = [STREAM[i : i + size] for i in range(0, len(STREAM), size)]
    assert feed_all(SSEParser(), pieces) == EXPECTED


def test_crlf_line_ends_give_the_same_events_as_lf():
    assert feed_all(SSEParser(), [STREAM.replace(b"\n", b"\r\n")]) == EXPECTED


def test_missing_blank_line_between_events_still_separates_them():
    raw = b'data: {"a": 1}\ndata: {"b": 2}\ndata: [DONE]\n'
    assert feed_all(SSEParser(), [raw]) == [(None, b'{"a": 1}'), (None, b'{"b": 2}'), (None, b"[DONE]")]


def test_multi_line_data_is_joined_with_newline():
    raw = b'data: {"a":\ndata: 1}\n\n'
    assert feed_all(SSEParser(), [raw]) == [(None, b'{"a":\n1}')]


def test_last_event_without_terminator_is_flushed_at_close():
    p = SSEParser()
    assert p.feed(b'data: {"a": 1}') == []
    assert p.close() == [(None, b'{"a": 1}')]


def test_data_without_space_after_colon():
    assert feed_all(SSEParser(), [b'data:{"a":1}\n\n']) == [(None, b'{"a":1}')]


def test_random_segmentations_of_mixed_framings_agree_with_a_single_read():
    import random

    events = [b'data: {"i": %d}\n\n' % i for i in range(40)]
    events[5] = b": ping\n\n"
    events[9] = b'event: error\ndata: {"error": 1}\n\n'
    events[13] = b'data: {"a":\ndata: 2}\n\n'
    events[21] = events[21].replace(b"\n", b"\r\n")
    events[30] = b'data: {"x": 30}\ndata: {"y": 30}\n'  # no blank line: the heuristic separates them
    stream = b"".join(events)
    expected = feed_all(SSEParser(), [stream])
    rng = random.Random(5)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), rng.randint(1, 60)))
        pieces = [stream[a:b] for a, b in zip([0] + cuts, cuts + [len(stream)])]
        assert feed_all(SSEParser(), pieces) == expected
