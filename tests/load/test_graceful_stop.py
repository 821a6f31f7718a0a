"""A graceful stop (the plan's end, ``-t``, a ramp-down) lets requests in flight finish and starts
no new one: a request started during the stop would be cut by it and become a ``cancelled`` record
(seen at a plan's end beside a busy vLLM: 2 of 189 records).

Locust kills a user it finds between tasks through a callback of the event loop; a user whose own
wake-up was queued first runs one more task before the kill lands. These tests drive that order
for real with gevent, against a fake transport (no sockets)."""

from __future__ import annotations

import random

import gevent
import gevent.pool
import orjson
import pytest
from locust.env import Environment
from locust.exception import StopUser

from tokenswarm.load.context import RunContext
from tokenswarm.load.users import Conversationalist, MixedUser, QAUser
from tokenswarm.record import Outcome
from tokenswarm.wire.stream import StreamState
from tokenswarm.workload.prompts import PromptSource
from tokenswarm.workload.scenario import parse_scenario


class Sink:
    def __init__(self) -> None:
        self.records: list = []

    def add(self, record) -> None:
        self.records.append(record)


@pytest.fixture(autouse=True)
def host(monkeypatch):
    """What Locust's runner gives its user classes from --host (no runner here)."""
    for cls in (QAUser, MixedUser):
        monkeypatch.setattr(cls, "host", "http://127.0.0.1:9")


@pytest.fixture
def sends(monkeypatch):
    """Every request the users start: (greenlet, body); each stays in flight for 20 ms."""
    started: list[tuple[object, dict]] = []

    def fake_stream_call(transport, path, body, headers, *, identity, anchor, on_cancel=None, **kw):
        started.append((gevent.getcurrent(), orjson.loads(body)))
        s = StreamState(sent_s=anchor.mono_s)
        try:
            gevent.sleep(0.02)
        except gevent.GreenletExit:
            if on_cancel is not None:
                on_cancel(s.finish(anchor.mono_s + 0.02, outcome=Outcome.CANCELLED, http_status=None, anchor=anchor,
                                   base=identity.record_fields()), "")
            raise
        s.on_events(anchor.mono_s + 0.01, [(None, b'{"choices":[{"index":0,"delta":{"content":"ok"},'
                                                  b'"finish_reason":"stop"}]}')])
        return s.finish(anchor.mono_s + 0.02, http_status=200, anchor=anchor, base=identity.record_fields()), "ok"

    monkeypatch.setattr("tokenswarm.load.users.stream_call", fake_stream_call)
    return started


def context(classes: dict) -> RunContext:
    sc = parse_scenario({"traffic": {"classes": classes}}, "s.yaml")
    ctx = RunContext(scenario=sc, run_id="r", worker_id="w", base_url="http://127.0.0.1:9", model="m",
                     sink=Sink(), role="local")
    ctx.prompt_sources = {t.name: PromptSource(t, None, seed=1) for t in sc.traffic.classes}
    return ctx


def qa_user(ctx: RunContext) -> QAUser:
    user = QAUser(Environment(user_classes=[QAUser]))
    user.ctx, user.rng = ctx, random.Random(1)
    user.task_cfg = ctx.scenario.traffic.classes[0]
    user.runner_ = Conversationalist(ctx, user, None, "QAUser")
    return user


def test_a_user_stopped_between_tasks_starts_no_request_even_when_it_wakes_before_the_kill(sends):
    ctx = context({"qa": {"weight": 1}})
    user = qa_user(ctx)
    user.on_start = lambda: None  # the context is set above (no run here)
    user.start(gevent.pool.Group())
    while not (len(sends) >= 2 and user._state == "waiting"):  # between two tasks: its wake-up is queued
        gevent.sleep(0)
    before = len(sends)
    assert user.stop(force=False) is True  # Locust's kill of a waiting user: delivered by a callback
    assert user.greenlet.dead
    assert len(sends) == before, "the user started a request after Locust stopped it"
    assert all(r.outcome == "ok" for r in ctx.sink.records)


def test_a_user_stopped_mid_request_finishes_it_and_starts_no_other(sends):
    ctx = context({"qa": {"weight": 1}})
    user = qa_user(ctx)
    user.on_start = lambda: None
    user.start(gevent.pool.Group())
    while not sends or user._state != "running":
        gevent.sleep(0)
    assert user.stop(force=False) is False  # running: Locust lets its task end
    user.greenlet.join(timeout=2)
    assert user.greenlet.dead and len(sends) == 1 and [r.outcome for r in ctx.sink.records] == ["ok"]


def test_once_the_run_is_ending_no_task_starts_a_request(sends):
    ctx = context({"qa": {"weight": 1}})
    ctx.stopping = True  # Locust's test_stopping: fired before it stops any user
    with pytest.raises(StopUser):
        qa_user(ctx).one_request()
    mixed = MixedUser(Environment(user_classes=[MixedUser]))
    mixed.ctx = ctx
    with pytest.raises(StopUser):
        mixed.one_request()
    assert sends == []


def test_a_mixed_user_of_a_run_aborted_at_start_stops_quietly():
    mixed = MixedUser(Environment(user_classes=[MixedUser]))
    mixed.ctx = None  # on_start found no run context: it set nothing else
    with pytest.raises(StopUser):
        mixed.one_request()


def test_a_conversation_ends_after_its_turn_in_flight_when_the_run_ends(sends, monkeypatch):
    ctx = context({"multi_turn": {"weight": 1, "turns": {"dist": "fixed", "value": 4}, "think_time_s": 0}})
    real_emit = ctx.emit

    def emit_then_end(record, user=None):  # the plan ends while the first turn is answered
        ctx.stopping = True
        return real_emit(record, user)

    monkeypatch.setattr(ctx, "emit", emit_then_end)
    task = ctx.scenario.traffic.classes[0]
    Conversationalist(ctx, None, None, "X").conversation(task, random.Random(2), ctx.clock())
    assert len(sends) == 1 and [r.outcome for r in ctx.sink.records] == ["ok"]
