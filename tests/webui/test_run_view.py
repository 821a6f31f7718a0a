"""The web UI reads the run only through its RunView: a frozen snapshot and the live statistics."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

import pytest

from tokenswarm.load.livestats import LiveStats
from tokenswarm.webui.state import WebState
from tokenswarm.webui.view import RunSnapshot

T0 = 1_764_480_000.0


class FakeRun:
    """A RunView that is not a controller: what the web UI needs, nothing more."""

    def __init__(self, snap: RunSnapshot) -> None:
        self.live = LiveStats()
        self.snap = snap

    def snapshot(self) -> RunSnapshot:
        return self.snap


def web_state(run: FakeRun, now: float) -> WebState:
    env = SimpleNamespace(runner=SimpleNamespace(user_count=3))
    return WebState(env, run, clock=lambda: now)


def test_the_web_ui_state_follows_the_snapshot_from_idle_to_finished():
    run = FakeRun(RunSnapshot())
    ws = web_state(run, T0 + 10)
    assert ws.state() == "idle" and ws.run_id is None and ws.run_elapsed_s() is None
    run.snap = RunSnapshot(run_id="r1", started_at=T0, in_flight=2, step_name="c2", phase="steady")
    assert ws.state() == "running" and ws.run_elapsed_s() == 10.0 and ws.in_flight() == 2
    run.snap = dataclasses.replace(run.snap, finished=True, ended_at=T0 + 4)
    assert ws.state() == "stopping"  # the last records are still being collected
    run.snap = dataclasses.replace(run.snap, complete=True)
    assert ws.state() == "finished" and ws.run_elapsed_s() == 4.0


def test_a_chart_sample_takes_its_step_and_in_flight_count_from_the_snapshot():
    run = FakeRun(RunSnapshot(run_id="r1", started_at=T0, in_flight=5, step_name="c8", phase="warmup"))
    sample = web_state(run, T0 + 1).sample_once()
    assert sample is not None
    assert (sample["step"], sample["phase"], sample["in_flight"], sample["users"]) == ("c8", "warmup", 5, 3)


def test_the_snapshot_cannot_be_changed_by_its_reader():
    with pytest.raises(dataclasses.FrozenInstanceError):
        RunSnapshot().finished = True  # type: ignore[misc]
