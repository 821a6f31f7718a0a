"""RunContext.emit: the record written is the record built, numbered 0, 1, 2, ... without gaps."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import orjson

from tokenswarm.load.context import RunContext
from tokenswarm.record import UNNUMBERED
from tokenswarm.wire.stream import StreamState
from tokenswarm.workload.scenario import load_scenario

ROOT = Path(__file__).resolve().parents[2]


class _Sink:
    def __init__(self) -> None:
        self.records: list = []
        self.lines: list[bytes] = []

    def add(self, record) -> None:  # serialised when handed over, as FileSink and RelaySink do
        line = record.to_json()
        self.records.append(record)
        self.lines.append(line)


def _ctx(sink, events):
    sc = load_scenario(ROOT / "scenarios" / "qa.yaml", {"target.metrics_url": None})
    return RunContext(scenario=sc, run_id="r", worker_id="w", base_url="http://127.0.0.1:9", model="m",
                      sink=sink, role="local", request_event=lambda **kw: events.append(kw))


def _built(ctx, i: int):
    st = StreamState(100.0)
    st.on_events(100.01, [(None, orjson.dumps({"id": f"c{i}", "choices": [{"index": 0, "delta": {"content": "hi"}}]}))])
    st.on_events(100.02, [(None, b"[DONE]")])
    base = ctx.base(task="qa", user_class="U", scheduled_s=99.0, key=f"k{i}")
    return st.finish(100.03, http_status=200, anchor=ctx.anchor, base=base)


def test_emitted_records_are_the_built_ones_numbered_without_gaps_and_written_as_emitted():
    sink, events = _Sink(), []
    ctx = _ctx(sink, events)
    built = [_built(ctx, i) for i in range(5)]
    assert all(r.seq == UNNUMBERED for r in built)
    expected = [dataclasses.replace(r, seq=i) for i, r in enumerate(built)]
    out = [ctx.emit(r) for r in built]
    assert out == expected and sink.records == expected
    assert [orjson.loads(line) for line in sink.lines] == [r.to_dict() for r in expected]
    assert ctx.last_seq == 4 and len(events) == 5 and ctx.live.total().requests == 5


def test_emitting_an_already_numbered_record_numbers_a_copy_and_leaves_the_first_alone():
    sink, events = _Sink(), []
    ctx = _ctx(sink, events)
    r = _built(ctx, 0)
    first = ctx.emit(r)
    second = ctx.emit(first)
    assert (first.seq, second.seq) == (0, 1) and second is not first
    assert [orjson.loads(line)["seq"] for line in sink.lines] == [0, 1]


def test_a_record_the_sink_cannot_write_is_counted_lost_and_named_never_raised(caplog):
    sink, events = _Sink(), []
    ctx = _ctx(sink, events)
    good = _built(ctx, 0)
    # what a server's 10**30 once made of a record: orjson refuses it ("Integer exceeds 64-bit range")
    bad = dataclasses.replace(_built(ctx, 1), output_tokens=10**30)
    ctx.emit(good)
    ctx.emit(bad)  # no exception: the user's task goes on
    ctx.emit(good)
    assert [r.seq for r in sink.records] == [0, 2]  # the spent seq leaves the gap that shows the loss
    assert ctx.records_unwritable == 1 and ctx.unwritable[0].startswith("seq 1 (qa): TypeError")
    assert len(events) == 2 and ctx.live.total().requests == 2  # a lost record is not counted as sent
    assert "could not be written and is LOST" in caplog.text
