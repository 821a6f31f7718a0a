"""Distributions: shapes, clipping, integer draws, reproducibility and spec errors."""

import math
import random
import statistics

import pytest

from tokenswarm.workload.distributions import DistSpecError, Fixed, LogNormal, Normal, Uniform, make_dist


def draws(dist, n=20000, seed=7, integer=False):
    rng = random.Random(seed)
    return [dist.sample_int(rng) if integer else dist.sample(rng) for _ in range(n)]


def test_bare_number_is_fixed():
    d = make_dist(128, "x")
    assert isinstance(d, Fixed)
    assert d.spec == {"dist": "fixed", "value": 128}
    assert set(draws(d, 10, integer=True)) == {128}


def test_uniform_int_covers_both_ends_and_stays_inside():
    d = make_dist({"dist": "uniform", "min": 2, "max": 5}, "turns", integer=True)
    xs = draws(d, 4000, integer=True)
    assert set(xs) == {2, 3, 4, 5}
    # each integer roughly equally likely
    assert min(xs.count(v) for v in range(2, 6)) > 800


def test_a_normal_draw_is_clipped_to_its_bounds_and_has_the_mean_and_stddev_asked():
    d = make_dist({"dist": "normal", "mean": 100, "stddev": 20, "min": 90, "max": 130}, "x")
    assert isinstance(d, Normal)
    xs = draws(d)
    assert min(xs) == 90 and max(xs) == 130
    unclipped = draws(make_dist({"dist": "normal", "mean": 100, "stddev": 20}, "x"))
    assert abs(statistics.mean(unclipped) - 100) < 1.0
    assert abs(statistics.stdev(unclipped) - 20) < 1.0


def test_lognormal_mean_is_in_natural_units_and_sigma_in_log_space():
    d = make_dist({"dist": "lognormal", "mean": 60, "sigma": 0.5}, "x")
    assert isinstance(d, LogNormal)
    xs = draws(d, 50000)
    assert abs(statistics.mean(xs) - 60) / 60 < 0.02
    assert abs(statistics.stdev([math.log(x) for x in xs]) - 0.5) < 0.02


def test_lognormal_clip_and_int_bounds():
    d = make_dist({"dist": "lognormal", "mean": 60, "sigma": 1.5, "min": 8, "max": 400}, "x", integer=True)
    xs = draws(d, 5000, integer=True)
    assert min(xs) == 8 and max(xs) == 400
    assert all(isinstance(x, int) for x in xs)


def test_floor_applies_when_min_omitted():
    d = make_dist({"dist": "normal", "mean": 2, "stddev": 10}, "x", floor=1, integer=True)
    assert min(draws(d, 2000, integer=True)) == 1


def test_same_seed_same_draws_different_seed_differs():
    d = make_dist({"dist": "uniform", "min": 0, "max": 1}, "x")
    assert draws(d, 50, seed=1) == draws(d, 50, seed=1)
    assert draws(d, 50, seed=1) != draws(d, 50, seed=2)


def test_a_uniform_distribution_answers_the_dist_protocol():
    from tokenswarm.workload.distributions import Dist

    assert isinstance(make_dist({"dist": "uniform", "min": 1, "max": 2}, "x"), Dist)
    assert isinstance(make_dist({"dist": "uniform", "min": 1, "max": 2}, "x"), Uniform)


@pytest.mark.parametrize(
    "spec, field, expected",
    [
        ({"dist": "zipf"}, "a.b.dist", "one of fixed, uniform, normal, lognormal"),
        ({"dist": "uniform", "min": 5, "max": 1}, "a.b.min", "min <= max"),
        ({"dist": "uniform", "min": 1}, "a.b.max", "a number"),
        ({"dist": "fixed", "value": "ten"}, "a.b.value", "a finite number"),
        ({"dist": "lognormal", "mean": -3, "sigma": 1}, "a.b.mean", "a number > 0"),
        ({"dist": "normal", "mean": 3, "stddev": -1}, "a.b.stddev", "a number >= 0"),
        ({"dist": "normal", "mean": 3, "sigma": 1}, "a.b.sigma", "unknown field"),
        ({"dist": "fixed", "value": 0}, "a.b.value", "a number >= 1"),
        ({"dist": "uniform", "min": 1.5, "max": 3}, "a.b.min", "an integer"),
        ("lots", "a.b", "a number or a mapping"),
    ],
)
def test_spec_errors_name_the_field(spec, field, expected):
    with pytest.raises(DistSpecError) as info:
        make_dist(spec, "a.b", floor=1, integer=True)
    assert info.value.field == field
    assert expected in str(info.value)
    assert isinstance(info.value, ValueError)
