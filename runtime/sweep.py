"""Pure statistics of the open-loop rate sweep (``benchmarks/runtime_open_loop.py``): Poisson arrival times,
percentiles with bootstrap confidence intervals, the SLO and the headline rate.

Headline (issue 13): the SLO is naive's p99 at 70 % of naive's capacity; a variant's headline is the highest offered
rate whose p99 stays within that SLO (every lower offered rate within it too), reported as a ratio to naive's.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

MIN_REQUESTS_FOR_P99 = 2000
"""Fewer latencies than this give a p99 from fewer than 20 tail samples; the sweep marks it as indicative."""


def poisson_arrivals_s(rate_rps: float, count: int, seed: int) -> NDArray[np.float64]:
    """Arrival times in seconds from 0 of ``count`` requests of a Poisson process of ``rate_rps`` (exponential gaps).

    Raises:
        ValueError: ``rate_rps`` <= 0 or ``count`` < 1.
    """
    if rate_rps <= 0 or count < 1:
        raise ValueError(f"rate_rps must be > 0 and count >= 1, got {rate_rps} and {count}")
    gaps = np.random.default_rng(seed).exponential(1.0 / rate_rps, size=count)
    arrivals: NDArray[np.float64] = np.cumsum(gaps) - gaps[0]
    return arrivals


@dataclass(frozen=True)
class Quantile:
    """A latency percentile with its bootstrap interval."""

    q: float
    """Percentile in [0, 100]."""
    value_ms: float
    low_ms: float
    high_ms: float
    n: int
    """Latencies it was computed from."""

    def __str__(self) -> str:
        flag = "" if self.q < 99 or self.n >= MIN_REQUESTS_FOR_P99 else "*"
        return f"{self.value_ms:.0f} [{self.low_ms:.0f}-{self.high_ms:.0f}]{flag}"


def percentile_ci(latencies_ms: Sequence[float], q: float, resamples: int = 1000, confidence: float = 0.95,
                  seed: int = 0) -> Quantile:
    """The ``q``-th percentile of ``latencies_ms`` and its percentile-bootstrap interval (Efron & Tibshirani 1993,
    ch. 13: resample with replacement ``resamples`` times, take the (1 - confidence)/2 quantiles of the statistic).

    Returns NaNs when ``latencies_ms`` is empty.
    """
    values = np.asarray(latencies_ms, dtype=float)
    if values.size == 0:
        nan = float("nan")
        return Quantile(q, nan, nan, nan, 0)
    rng = np.random.default_rng(seed)
    stats = np.percentile(rng.choice(values, size=(resamples, values.size), replace=True), q, axis=1)
    tail = (1 - confidence) / 2
    return Quantile(q, float(np.percentile(values, q)), float(np.quantile(stats, tail)),
                    float(np.quantile(stats, 1 - tail)), int(values.size))


def slo_ms(naive_points: Sequence[tuple[float, float]], naive_capacity_rps: float, fraction: float = 0.7) -> float:
    """The SLO: naive's p99 at ``fraction`` of its capacity, interpolated linearly between the offered rates measured.

    Args:
        naive_points: ``(offered_rps, p99_ms)`` of naive, any order.
        naive_capacity_rps: Naive's capacity (cores / server CPU-s per request).
    Raises:
        ValueError: No measured rate at or below, or none at or above, the target rate.
    """
    target = fraction * naive_capacity_rps
    points = sorted(naive_points)
    for (r0, p0), (r1, p1) in zip(points, points[1:], strict=False):
        if r0 <= target <= r1:
            return p0 if r1 == r0 else p0 + (p1 - p0) * (target - r0) / (r1 - r0)
    if points and points[0][0] == target:
        return points[0][1]
    raise ValueError(f"naive was not measured around {target:.2f} req/s (rates {[r for r, _ in points]})")


def headline_rps(points: Sequence[tuple[float, float]], slo: float) -> float:
    """The highest offered rate whose p99 is within ``slo`` with every lower offered rate within it too (0.0 when
    even the lowest misses).

    Args:
        points: ``(offered_rps, p99_ms)`` of one variant, any order; NaN p99 counts as a miss.
    """
    best = 0.0
    for rate, p99 in sorted(points):
        if not p99 <= slo:  # NaN fails too
            break
        best = rate
    return best


def quantile_ratio_ci(baseline_ms: Sequence[float], candidate_ms: Sequence[float], q: float = 99,
                      resamples: int = 1000, confidence: float = 0.95, seed: int = 0) -> tuple[float, float, float]:
    """``percentile(baseline, q) / percentile(candidate, q)`` and its percentile-bootstrap interval (both samples
    resampled independently with replacement ``resamples`` times; Efron & Tibshirani 1993, ch. 13). A value > 1
    means the candidate's percentile is lower (better) by that factor.

    Returns:
        ``(ratio, low, high)``; NaNs when either sample is empty.
    """
    a = np.asarray(baseline_ms, dtype=float)
    b = np.asarray(candidate_ms, dtype=float)
    if a.size == 0 or b.size == 0:
        nan = float("nan")
        return nan, nan, nan
    rng = np.random.default_rng(seed)
    pa = np.percentile(rng.choice(a, size=(resamples, a.size), replace=True), q, axis=1)
    pb = np.percentile(rng.choice(b, size=(resamples, b.size), replace=True), q, axis=1)
    ratios = pa / pb
    tail = (1 - confidence) / 2
    return (float(np.percentile(a, q) / np.percentile(b, q)), float(np.quantile(ratios, tail)),
            float(np.quantile(ratios, 1 - tail)))


def load_points(capacities_rps: dict[str, float], baseline: str, fraction: float = 0.7) -> list[tuple[str, float, str]]:
    """The (variant, offered rate req/s, label) points of the p99-at-load comparison: every variant at ``fraction``
    of its own capacity (label ``own``) and every variant at ``fraction`` of ``baseline``'s capacity (label
    ``common``); the baseline's two points coincide and are listed once (label ``own=common``). Order: the common
    points first (baseline first), then the other variants' own points.

    Raises:
        ValueError: ``baseline`` not in ``capacities_rps``, a capacity <= 0 or not finite, or ``fraction`` <= 0.
    """
    if baseline not in capacities_rps:
        raise ValueError(f"baseline {baseline!r} has no capacity (have {sorted(capacities_rps)})")
    bad = {k: v for k, v in capacities_rps.items() if not (0 < v < float("inf"))}
    if bad or fraction <= 0:
        raise ValueError(f"capacities must be finite and > 0 and fraction > 0, got {bad or capacities_rps} and "
                         f"{fraction}")
    common = fraction * capacities_rps[baseline]
    others = [v for v in capacities_rps if v != baseline]
    return ([(baseline, common, "own=common")] + [(v, common, "common") for v in others]
            + [(v, fraction * capacities_rps[v], "own") for v in others])
