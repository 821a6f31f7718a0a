"""``load.mode: search`` and ``load.mode: sweep`` in a scenario: fields, defaults, clear errors."""

from __future__ import annotations

import pytest

from tokenswarm.workload.scenario import ScenarioError, parse_scenario


def scenario(load):
    return parse_scenario({"traffic": {"classes": {"qa": {}}}, "load": load}, source="s.yaml")


def test_a_search_over_concurrency_is_a_closed_loop_starting_at_its_first_probe():
    load = scenario({"mode": "search", "step_duration_s": 20, "search": {"start": 4, "max": 64}}).load
    assert load.loop == "closed" and load.steps == (4.0,)
    s = load.search
    assert (s.over, s.factor, s.resolution, s.max_step_s, s.drain_max_s) == ("concurrency", 2.0, 1.0, 100.0, 600.0)


def test_a_search_over_rate_is_an_open_loop_and_needs_its_range():
    load = scenario({"mode": "search", "search": {"over": "rate", "start": 2, "max": 40}}).load
    assert load.loop == "open" and load.search.resolution == 0.5
    with pytest.raises(ScenarioError, match=r"load\.search\.start: expected a request rate"):
        scenario({"mode": "search", "search": {"over": "rate", "max": 40}})


@pytest.mark.parametrize("load, where", [
    ({"mode": "search", "steps": [1, 2]}, "load.steps: expected no steps in mode search"),
    ({"mode": "search", "search": {"start": 8, "max": 4}}, "load.search.max: expected a load >= start"),
    ({"mode": "search", "search": {"start": 1.5}}, "load.search.start: expected an integer"),
    ({"mode": "search", "search": {"factor": 1}}, "load.search.factor: expected a number > 1"),
    ({"mode": "search", "step_duration_s": 30, "search": {"max_step_s": 10}}, "load.search.max_step_s: expected a duration >= "),
    ({"mode": "closed", "search": {"start": 2}}, "load.search: expected no search unless mode is search"),
    ({"mode": "sweep", "sweep": {"max_concurrency": 1}}, "load.sweep.max_concurrency: expected an integer >= 2"),
    ({"mode": "search", "search": {"stride": 2}}, "load.search.stride"),
])
def test_bad_search_and_sweep_fields_name_the_field(load, where):
    with pytest.raises(ScenarioError) as info:
        scenario(load)
    assert where in str(info.value) and "s.yaml" in str(info.value)


def test_a_sweep_starts_with_its_saturation_probe_and_resolves_into_the_manifest():
    sc = scenario({"mode": "sweep", "sweep": {"steps": 4, "max_concurrency": 32}})
    assert sc.load.loop == "closed" and sc.load.steps == (32.0,)
    assert sc.resolved()["load"]["sweep"] == {"steps": 4, "max_concurrency": 32, "drain_max_s": 600.0}
