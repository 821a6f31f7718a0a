"""The capacity search's and the sweep's decisions, from fake probe results (no load, no clock)."""

from __future__ import annotations

import pytest

from tokenswarm.orchestrate.search import CapacitySearch, Sweep, saturation_users, spread
from tokenswarm.workload.scenario.model import SearchConfig, SweepConfig


def search(**kw) -> CapacitySearch:
    cfg = dict(over="concurrency", start=1.0, factor=2.0, max=256.0, resolution=1.0, max_step_s=60.0,
               drain_max_s=60.0)
    cfg.update(kw)
    return CapacitySearch(SearchConfig(**cfg))


def run_search(s: CapacitySearch, capacity: float) -> list[float]:
    """Drive the search against a server that passes every load <= ``capacity``."""
    load: float | None = s.first
    probed = []
    while load is not None:
        probed.append(load)
        assert len(probed) <= s.config.max_probes(), "the search exceeded its own probe bound"
        load = s.observe(load, load <= capacity)
    return probed


def test_grows_exponentially_then_bisects_to_the_resolution():
    s = search()
    probed = run_search(s, capacity=11)
    assert probed[:6] == [1, 2, 4, 8, 16, 12]
    assert (s.lo, s.hi) == (11, 12)
    assert probed[-1] in (11, 12) and "resolution" in s.stop_reason


@pytest.mark.parametrize("capacity", [1, 2, 3, 5, 7, 31, 32, 33, 100, 255])
def test_finds_every_capacity_exactly_over_whole_users(capacity):
    s = search()
    run_search(s, capacity)
    assert s.lo == capacity and s.hi == capacity + 1


def test_every_probe_is_a_whole_number_of_users_and_never_repeats():
    s = search(factor=1.5, start=3)
    probed = run_search(s, capacity=40)
    assert all(p == int(p) for p in probed)
    assert len(probed) == len(set(probed))


def test_stops_at_the_stated_resolution_not_before():
    s = search(resolution=4)
    run_search(s, capacity=50)
    assert s.hi - s.lo <= 4 and s.lo <= 50 < s.hi


def test_rate_search_bisects_real_numbers_to_the_resolution():
    s = search(over="rate", start=0.5, max=64.0, resolution=0.1)
    run_search(s, capacity=3.33)
    assert s.lo <= 3.33 < s.hi and s.hi - s.lo <= 0.1


def test_a_passing_maximum_ends_the_search_with_capacity_at_least_max():
    s = search(max=20)
    probed = run_search(s, capacity=1000)
    assert probed == [1, 2, 4, 8, 16, 20]
    assert s.hi is None and s.lo == 20 and "load.search.max" in s.stop_reason


def test_a_failing_first_probe_ends_the_search_below_it():
    s = search(start=4)
    assert run_search(s, capacity=2) == [4]
    assert s.lo is None and s.hi == 4 and "below" in s.stop_reason


def test_a_pass_above_the_first_failure_does_not_move_the_bracket():
    s = search(start=8)
    s.observe(8, True)  # -> 16
    s.observe(16, False)  # -> 12
    assert s.observe(12, False) == 10
    s.observe(10, True)
    assert (s.lo, s.hi) == (10, 12)
    # a noisy pass at the failing load's level does not raise lo above hi
    s.observe(14, True)
    assert (s.lo, s.hi) == (10, 12)


def sweep(**kw) -> Sweep:
    cfg = dict(steps=4, max_concurrency=64, drain_max_s=60.0)
    cfg.update(kw)
    return Sweep(SweepConfig(**cfg))


def test_sweep_measures_saturation_first_then_one_user_then_spreads_up_to_little_law_concurrency():
    sw = sweep()
    assert sw.first == 64
    assert sw.needs_judgement()
    assert sw.observe(64, 40.0) == 1  # 40 req/s at saturation
    assert sw.needs_judgement()
    nxt = sw.observe(1, 2.5)  # 2.5 req/s one at a time -> N* = 16
    assert sw.saturation_users == 16
    assert not sw.needs_judgement()
    steps = [nxt]
    while (n := sw.observe(steps[-1], None)) is not None:
        steps.append(n)
    assert steps == [5, 8, 12, 16]  # evenly between 1 and 16, whole users
    assert sw.stop_reason == "every planned step ran"


def test_sweep_saturation_is_capped_by_the_saturation_probe_and_spread_skips_duplicates():
    cfg = SweepConfig(steps=10, max_concurrency=8, drain_max_s=1.0)
    assert saturation_users(1000.0, 1.0, cfg) == 8
    out = spread(1000.0, 1.0, cfg)
    assert out == sorted(set(out)) and all(1 < u < 8 for u in out)
    assert saturation_users(10.0, 0.0, cfg) == 8  # no single-user throughput: the probe's own load
