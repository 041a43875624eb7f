"""Statistics of the open-loop sweep: Poisson arrivals, bootstrap percentile intervals, SLO and headline rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from modalscale.runtime.sweep import (
    MIN_REQUESTS_FOR_P99,
    headline_rps,
    load_points,
    percentile_ci,
    poisson_arrivals_s,
    quantile_ratio_ci,
    slo_ms,
)


def test_poisson_arrivals_have_the_offered_rate_and_start_at_zero() -> None:
    arrivals = poisson_arrivals_s(20.0, 4000, seed=1)
    assert arrivals[0] == 0 and np.all(np.diff(arrivals) >= 0)
    assert len(arrivals) / arrivals[-1] == pytest.approx(20.0, rel=0.05)
    gaps = np.diff(arrivals)
    assert np.std(gaps) / np.mean(gaps) == pytest.approx(1.0, rel=0.1)  # exponential: CV 1
    assert np.array_equal(arrivals, poisson_arrivals_s(20.0, 4000, seed=1))
    with pytest.raises(ValueError, match="rate_rps"):
        poisson_arrivals_s(0.0, 10, seed=1)


def test_bootstrap_interval_covers_the_true_percentile_and_narrows_with_n() -> None:
    rng = np.random.default_rng(3)
    true_p99 = -math.log(0.01) * 100  # exponential with mean 100 ms
    small = percentile_ci(rng.exponential(100, 300), 99, seed=1)
    large = percentile_ci(rng.exponential(100, 5000), 99, seed=1)
    assert large.low_ms <= true_p99 <= large.high_ms
    assert large.low_ms <= large.value_ms <= large.high_ms and large.n == 5000
    assert (large.high_ms - large.low_ms) < (small.high_ms - small.low_ms)
    assert str(small).endswith("*") and not str(large).endswith("*")  # p99 from < 2000 is flagged
    assert MIN_REQUESTS_FOR_P99 == 2000
    assert math.isnan(percentile_ci([], 99).value_ms)


def test_slo_is_naives_p99_at_70_percent_interpolated() -> None:
    naive = [(10.0, 100.0), (20.0, 140.0), (30.0, 400.0)]
    assert slo_ms(naive, naive_capacity_rps=25.0) == pytest.approx(100 + 40 * (17.5 - 10) / 10)
    assert slo_ms(naive, naive_capacity_rps=20.0 / 0.7) == pytest.approx(140.0)
    with pytest.raises(ValueError, match="not measured"):
        slo_ms(naive, naive_capacity_rps=100.0)


def test_headline_is_the_last_rate_before_the_first_miss() -> None:
    assert headline_rps([(30.0, 500.0), (10.0, 90.0), (20.0, 120.0)], slo=150.0) == 20.0
    assert headline_rps([(10.0, 90.0), (20.0, 200.0), (30.0, 120.0)], slo=150.0) == 10.0  # no credit after a miss
    assert headline_rps([(10.0, float("nan"))], slo=150.0) == 0.0
    assert headline_rps([(10.0, 200.0)], slo=150.0) == 0.0


def test_p99_ratio_interval_covers_the_true_ratio_and_is_oriented_baseline_over_candidate() -> None:
    rng = np.random.default_rng(5)
    baseline = rng.exponential(300, 4000)  # true p99 = 300 ln 100
    candidate = rng.exponential(100, 4000)  # true p99 = 100 ln 100: 3x lower
    ratio, low, high = quantile_ratio_ci(baseline, candidate, 99, seed=2)
    assert low <= 3.0 <= high and low <= ratio <= high
    assert ratio == pytest.approx(np.percentile(baseline, 99) / np.percentile(candidate, 99))
    inverse, _, _ = quantile_ratio_ci(candidate, baseline, 99, seed=2)
    assert inverse == pytest.approx(1 / ratio)
    assert all(math.isnan(x) for x in quantile_ratio_ci([], candidate))


def test_load_points_are_each_variants_own_70_percent_and_the_baselines_70_percent_for_all() -> None:
    points = load_points({"dyn": 40.0, "a": 60.0, "b": 20.0}, "dyn")
    assert points == [("dyn", pytest.approx(28.0), "own=common"), ("a", pytest.approx(28.0), "common"),
                      ("b", pytest.approx(28.0), "common"), ("a", pytest.approx(42.0), "own"),
                      ("b", pytest.approx(14.0), "own")]
    assert load_points({"dyn": 10.0}, "dyn", fraction=0.5) == [("dyn", 5.0, "own=common")]
    with pytest.raises(ValueError, match="baseline"):
        load_points({"a": 1.0}, "dyn")
    with pytest.raises(ValueError, match="finite"):
        load_points({"dyn": 10.0, "a": float("nan")}, "dyn")
