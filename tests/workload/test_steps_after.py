"""The step machine's ``after`` hook: open-ended plans (search, sweep) decide each next step."""

from __future__ import annotations

from tokenswarm.workload.steps import EXTEND, HOLD, Step, StepMachine


def test_an_open_ended_plan_asks_after_each_window_to_extend_hold_or_name_the_next_step():
    answers = [EXTEND, HOLD, HOLD, Step(-1, "c8", "concurrency", 8.0, 1.0, 5.0), None]
    asked = []

    def after(step, now_s):
        asked.append((step.name, now_s))
        return answers.pop(0)

    m = StepMachine([Step(0, "c4", "concurrency", 4.0, 1.0, 5.0)], after=after)
    assert [t.phase for t in m.advance(0.0, True)] == ["warmup"]
    assert [t.phase for t in m.advance(1.0, True)] == ["steady"]
    assert m.advance(5.9, True) == [] and asked == []  # not asked before the nominal end
    assert m.advance(6.0, True) == [] and m.phase == "steady"  # EXTEND: the window stays open
    tr = m.advance(7.0, True)  # HOLD: the window closes when decided, the load holds
    assert [(t.phase, t.at_s) for t in tr] == [("drain", 7.0)] and m.times[0].ended_s == 7.0
    assert m.advance(8.0, True) == []  # still holding
    tr = m.advance(9.0, True)  # the next step, numbered by the machine
    assert [(t.step.name, t.step.index, t.phase) for t in tr] == [("c8", 1, "warmup")]
    assert m.times[0].ended_s == 7.0  # the drain did not move the window's end
    m.advance(10.0, True)
    tr = m.advance(15.0, True)
    assert [t.phase for t in tr] == ["done"] and m.done and len(m.steps) == 2
