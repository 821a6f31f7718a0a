"""How a run ends, through RunEnding against a scripted run (no Locust, no sockets, no time)."""

from types import SimpleNamespace

import orjson
import pytest

from tokenswarm.load.breaker import THRESHOLD
from tokenswarm.orchestrate.ending import EXIT_INTERRUPTED, RunEnding, StopReason, final_exit_status
from tokenswarm.orchestrate.loadplan import LoadPlan, read_batch
from tokenswarm.orchestrate.verdict import EXIT_OK, EXIT_SLO_MISSED
from tokenswarm.workload.steps import StepMachine, plan_steps


class ScriptedRun:
    """The run an ending reads: its warnings, whether users were halted, Locust's runner."""

    def __init__(self, *, fixed_users: bool = False, started: bool = True) -> None:
        self.env = SimpleNamespace(stop_timeout=300, web_ui=None, parsed_options=SimpleNamespace(run_time=0),
                                   runner=SimpleNamespace(state="running", quit=lambda: None,
                                                          send_message=lambda *a: None))
        self.is_master, self.fixed_users, self.started = False, fixed_users, started
        self.finished = self.finalised = self.plan_done = self.halted = False
        self.warnings: list[str] = []

    def warn(self, text: str) -> None:
        self.warnings.append(text)

    def halt_users(self) -> None:
        self.halted = True

    def stop(self) -> None:
        self.finished = True


def test_the_circuit_breaker_ends_a_shaped_run_at_the_next_tick_and_halts_the_users():
    run = ScriptedRun()
    ending = RunEnding(run)
    ending.begin()
    for _ in range(THRESHOLD - 1):
        ending.observe("error", 500, "boom")
    assert ending.reason is None and not ending.force_end
    ending.observe("error", 500, "boom")
    assert ending.reason is StopReason.CIRCUIT_BREAKER
    assert ending.force_end, "a shaped plan ends at the shape's next tick"
    assert run.halted and ending.broken is not None and "circuit breaker" in run.warnings[0]


def test_a_success_disarms_the_breaker_for_the_rest_of_the_run():
    ending = RunEnding(ScriptedRun())
    ending.begin()
    ending.observe("ok", 200, None)
    for _ in range(THRESHOLD * 2):
        ending.observe("error", 500, "boom")
    assert ending.reason is None and ending.broken is None


def test_the_max_run_time_guard_is_a_hard_stop_and_keeps_an_earlier_reason():
    run = ScriptedRun()
    ending = RunEnding(run)
    ending.begin()
    ending.max_run_time_reached(90.0)
    assert ending.reason is StopReason.MAX_RUN_TIME and run.env.stop_timeout == 0
    ending.run_time_reached(60.0)  # a later guard does not rename the stop
    assert ending.reason is StopReason.MAX_RUN_TIME and len(run.warnings) == 1


def test_a_new_run_restores_the_stop_timeout_a_hard_stop_cut():
    run = ScriptedRun()
    ending = RunEnding(run)
    ending.begin()
    ending.max_run_time_reached(5.0)
    assert run.env.stop_timeout == 0
    ending.begin()
    assert run.env.stop_timeout == 300 and ending.reason is None and not ending.force_end


def test_locust_stopping_after_the_plan_ran_out_is_the_plans_own_end():
    run = ScriptedRun()
    run.plan_done = True
    ending = RunEnding(run)
    ending.begin()
    ending.on_stopping()
    assert ending.reason is StopReason.PLAN_DONE and run.env.stop_timeout == 300 and run.warnings == []


def test_locust_stopping_before_the_plan_ended_without_a_web_ui_is_locusts_quit():
    run = ScriptedRun()
    ending = RunEnding(run)
    ending.begin()
    ending.on_stopping()
    assert ending.reason is StopReason.LOCUST_QUIT and run.env.stop_timeout == 0


@pytest.mark.parametrize(("verdict", "probing", "reason", "expected"), [
    (EXIT_SLO_MISSED, True, StopReason.PLAN_DONE, EXIT_OK),  # a search's failing probes are its findings
    (EXIT_SLO_MISSED, False, StopReason.PLAN_DONE, EXIT_SLO_MISSED),
    (EXIT_OK, False, StopReason.SIGTERM, EXIT_INTERRUPTED),
    (EXIT_SLO_MISSED, True, StopReason.SIGINT, EXIT_INTERRUPTED),
])
def test_the_exit_status_follows_the_verdict_unless_the_run_was_interrupted(verdict, probing, reason, expected):
    assert final_exit_status(verdict, probing=probing, reason=reason, partial_steps=["c4"]) == expected


def test_a_workers_batch_feeds_the_breaker_until_the_first_success_then_is_not_read():
    ending = RunEnding(ScriptedRun())
    ending.begin()
    fails = b"\n".join(orjson.dumps({"outcome": "error", "http_status": 503, "error": "x"}) for _ in range(3))
    read_batch(fails + b"\nnot json\n", None, ending)
    assert ending.breaker._count == 3, "a line that is not JSON is skipped, the others counted"
    read_batch(orjson.dumps({"outcome": "ok"}) + b"\n" + fails, None, ending)
    assert not ending.breaker.armed and ending.breaker._count == 3


def test_a_fixed_list_of_steps_counts_no_records_but_adaptive_steps_do():
    counted: list[str] = []
    adaptive = SimpleNamespace(observe_record=lambda r: counted.append(r["outcome"]))
    machine = StepMachine(plan_steps("closed", [1], warmup_s=0, duration_s=1))
    ending = RunEnding(ScriptedRun())
    ending.begin()
    ending.breaker.armed = False
    batch = orjson.dumps({"outcome": "ok"}) + b"\n" + orjson.dumps({"outcome": "error"})
    read_batch(batch, LoadPlan(machine), ending)
    assert counted == []
    read_batch(batch, LoadPlan(machine, adaptive=adaptive), ending)  # type: ignore[arg-type]
    assert counted == ["ok", "error"]
