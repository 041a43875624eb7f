"""Statistics of the open-loop sweep: Poisson arrivals, bootstrap percentile intervals, SLO and headline rate."""

from __future__ import annotations

import math

import numpy as np
import pytest

from modalscale.runtime.sweep import MIN_REQUESTS_FOR_P99, headline_rps, percentile_ci, poisson_arrivals_s, slo_ms


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
