"""Statistics primitives against numpy on raw values."""

import math

import numpy as np
import pytest

from tokenswarm.analysis.stats import (
    PERCENTILES,
    SortedParts,
    bootstrap_means,
    bootstrap_percentiles,
    describe,
    mann_kendall,
    percentiles_failed_as_inf,
    percentiles_sorted,
    theil_sen,
    weighted_percentiles_select,
    weighted_percentiles_sorted,
)
from tokenswarm.names import TTFT

RNG = np.random.default_rng(7)


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 12345])
def test_percentiles_sorted_equal_numpy_linear(n):
    x = RNG.lognormal(3, 1, n)
    np.testing.assert_array_equal(percentiles_sorted(np.sort(x), PERCENTILES), np.percentile(x, PERCENTILES))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_weighted_forms_equal_percentile_of_expanded_samples(dtype):
    v = (RNG.standard_normal(200_001) * 10 + 50).astype(dtype)
    w = RNG.integers(0, 5, v.size)
    expected = np.percentile(np.repeat(v.astype(np.float64), w), PERCENTILES)
    order = np.argsort(v, kind="stable")
    np.testing.assert_allclose(weighted_percentiles_sorted(v[order], np.cumsum(w[order]), PERCENTILES), expected, rtol=0, atol=0)
    if dtype == np.float32:
        np.testing.assert_array_equal(weighted_percentiles_select(v, w, PERCENTILES), expected)
    sp = SortedParts.from_values(v, w)
    np.testing.assert_array_equal(sp.percentiles(PERCENTILES), expected)
    assert sp.count == int(w.sum())


def test_sorted_parts_union_equals_concatenation():
    a = RNG.random(5000).astype(np.float32)
    b = (RNG.random(300) * 3).astype(np.float32)
    wb = RNG.integers(1, 4, b.size)
    u = SortedParts.union([SortedParts.from_values(a), SortedParts.from_values(b, wb)])
    expanded = np.concatenate([a, np.repeat(b, wb)]).astype(np.float64)
    np.testing.assert_array_equal(u.percentiles(PERCENTILES), np.percentile(expanded, PERCENTILES))
    assert u.min() == expanded.min() and u.max() == expanded.max()
    assert u.sum() == pytest.approx(expanded.sum(), rel=1e-9)


def test_failures_as_infinite_match_numpy_where_finite():
    x = np.sort(RNG.random(200))
    for n_failed in (0, 1, 3, 50):
        with np.errstate(invalid="ignore"):  # numpy's own inf - inf while interpolating
            padded = np.percentile(np.concatenate([x, np.full(n_failed, np.inf)]), PERCENTILES)
        got = percentiles_failed_as_inf(x, n_failed, PERCENTILES)
        for g, p in zip(got, padded):
            if math.isfinite(p):
                assert g == pytest.approx(p, rel=1e-15)
            else:
                assert g is None


def test_describe_reports_failed_share_and_none_when_empty():
    d = describe(np.array([1.0, 2.0, 3.0]), TTFT, n_failed=1)
    assert d["ttft_failed_share"] == 0.25 and d["ttft_count"] == 3 and d["ttft_mean_ms"] == 2.0
    e = describe(np.empty(0), TTFT, n_failed=2)
    assert e["ttft_p50_ms"] is None and e["ttft_count"] == 0 and e["ttft_failed_share"] == 1.0


def test_order_statistic_bootstrap_has_the_naive_bootstrap_distribution():
    x = np.sort(RNG.exponential(10, 400))
    rng = np.random.default_rng(1)
    fast = bootstrap_percentiles(x, [50.0, 95.0], 20000, rng)
    idx = np.random.default_rng(2).integers(0, x.size, (20000, x.size))
    naive = np.percentile(x[idx], [50.0, 95.0], axis=1)
    for i in range(2):
        # same distribution: quantiles of the replicate distributions agree within MC noise
        np.testing.assert_allclose(np.percentile(fast[i], [5, 50, 95]), np.percentile(naive[i], [5, 50, 95]), rtol=0.03)


def test_bootstrap_means_resampling_and_normal_limit_agree():
    x = RNG.exponential(5, 2000)
    a = bootstrap_means(x, 4000, np.random.default_rng(0))  # resampling
    b = bootstrap_means(x, 4000, np.random.default_rng(0), max_cells=10)  # normal limit
    assert a.std() == pytest.approx(x.std() / math.sqrt(x.size), rel=0.08)
    assert b.std() == pytest.approx(a.std(), rel=0.08)


def test_mann_kendall_and_theil_sen():
    t = np.arange(30, dtype=float)
    s, z, p = mann_kendall(2.0 * t + 1.0)
    assert s == 30 * 29 / 2 and p < 1e-6
    slope, intercept = theil_sen(t, 2.0 * t + 1.0)
    assert slope == pytest.approx(2.0) and intercept == pytest.approx(1.0)
    flat = np.random.default_rng(3).normal(0, 1, 30)
    assert mann_kendall(flat)[2] > 0.05
    assert mann_kendall(np.ones(10))[2] == 1.0  # all ties: no trend
