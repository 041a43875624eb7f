"""Arrival variability and short-term demand from per-bin request counts (what Prometheus can give).

Input everywhere: ``counts``, the requests that arrived in consecutive bins of ``bin_s`` seconds, oldest first,
shape ``(k,)``. The operator reads them with one subquery (see ``autoscale.observe.build_queries``)::

    sum(max by (modality, pod, instance) (increase(modalscale_requests_total{<service>}[15s])))[600s:15s]

and the simulator counts its trace's arrivals the same way, so both feed the policy the same numbers.

Burstiness: the arrival SCV (squared coefficient of variation of inter-arrival times) ``c_a^2`` that the
Allen–Cunneen wait ``(c_a^2 + c_s^2) / 2`` takes is estimated by the index of dispersion of counts,

    c_a^2 ~= IDC(T) = Var[N(T)] / E[N(T)],     T = bin_s,

which tends to ``c_a^2`` for a stationary renewal process as T grows (D. R. Cox and P. A. W. Lewis, *The
Statistical Analysis of Series of Events*, Methuen 1966, §4.5) and is the "asymptotic variability parameter"
used for ``c_a^2`` in GI/G/m approximations (K. W. Fendick and W. Whitt, "Measurements and approximations to
describe the offered traffic and predict the average workload in a single-server queue", Proc. IEEE 77(1)
(1989) 171-194; W. Whitt, "Approximations for the GI/G/m queue", 1993). ``Var`` is estimated from first
differences, ``sum (n_{i+1} - n_i)^2 / (2 (k - 1))``, and ``E`` by the mean count.

Window and bias of :func:`arrival_scv` (documented, not corrected):

- Window: ``k`` bins of ``bin_s`` (operator: 40 x 15 s = 10 min). The bin must hold two Prometheus samples, so
  the scrape interval must be at most ~7 s (as for the 15 s recent window).
- Differencing removes a linear trend in the rate (a rising or falling rate inflates the plain variance), but it
  also subtracts ``2 Cov(n_i, n_{i+1})``: variability that lasts longer than one bin (rate changes over minutes)
  is NOT counted as burstiness. That is deliberate: slow changes are the forecaster's job, the SCV describes what
  happens within a bin. Bursts shorter than a bin are counted in full; for a renewal process with ``c_a^2 > 1``
  the IDC at a finite T lies between 1 and ``c_a^2``, so the estimate is biased low when correlations outlast
  one bin.
- Sampling error: the ratio of two means over ``k`` bins, with MA(1)-correlated differences, has a relative
  standard error of about ``sqrt(3 / (k - 1))`` for Poisson arrivals (~28 % at k = 40), biased up by O(1/k).
- Prometheus ``increase`` extrapolates each bin to its edges and smooths a counter reset: the counts are not
  integers, which biases the variance slightly up for very low rates.
- Guard: with fewer than ``min_requests`` requests in the window (or under 4 bins) it returns None (use Poisson,
  1.0); the estimate is clipped to ``[min_scv, max_scv]``.

Forecasts (demand over the start-up horizon of a new replica). :func:`forecast_rate_rps` offers three rules,
all on the per-bin rates ``r_i = n_i / bin_s``; ``benchmarks/autoscaler_pareto.py`` scores them on the real
traces (coverage of the next horizon's peak bin and over-forecast), which is the evidence for the default:

- ``naive``: the last bin's rate (what a purely reactive policy uses);
- ``holt``: Holt's linear exponential smoothing (C. C. Holt, "Forecasting seasonals and trends by exponentially
  weighted moving averages", 1957; Int. J. Forecasting 20 (2004) 5-10), level + trend extrapolated over the
  horizon, plus ``z`` standard deviations of its one-step errors;
- ``peak``: a high quantile of the rates of the last ``window_s`` (a quantile of recent peaks), raised by the
  Holt trend over the horizon when that trend is positive.

No seasonal rule: the traces here are one hour long, so a daily season cannot be learned from them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FORECASTERS: tuple[str, ...] = ("naive", "holt", "peak")
"""Names :func:`forecast_rate_rps` knows."""


def _counts(counts: ArrayLike) -> NDArray[np.float64]:
    c = np.asarray(counts, dtype=np.float64).reshape(-1)
    if not np.isfinite(c).all():
        raise ValueError("counts must be finite (a NaN or Inf count is missing data)")
    return np.maximum(c, 0.0)


def arrival_scv(counts: ArrayLike, min_requests: float = 50.0, min_scv: float = 0.25, max_scv: float = 50.0
                ) -> float | None:
    """Estimated inter-arrival SCV from per-bin counts (estimator, window and bias in the module docstring).

    Args:
        counts: Requests per bin, oldest first, shape ``(k,)``; finite.
        min_requests: Fewest requests in the window for an estimate.
        min_scv: Lower clip.
        max_scv: Upper clip.
    Returns:
        ``c_a^2`` (1 = Poisson) in ``[min_scv, max_scv]``, or None when the window has too few requests or bins.
    Raises:
        ValueError: a non-finite count.
    """
    c = _counts(counts)
    if c.size < 4 or c.sum() < min_requests:
        return None
    mean = float(c.mean())
    var = float(np.sum(np.diff(c) ** 2) / (2.0 * (c.size - 1)))
    return float(min(max_scv, max(min_scv, var / mean)))


@dataclass(frozen=True, slots=True)
class Forecast:
    """Demand forecast over a horizon.

    Attributes:
        rate_rps: Forecast (upper) arrival rate to provision for over the horizon, requests/s.
        current_rps: The rate it is compared with: the mean over the last ``recent_bins`` bins, requests/s.
        rule: Which rule made it (``naive``, ``holt``, ``peak``).
    """

    rate_rps: float
    current_rps: float
    rule: str


def holt(rates: NDArray[np.float64], alpha: float = 0.5, beta: float = 0.2) -> tuple[float, float, float]:
    """Holt's linear exponential smoothing over ``rates`` (oldest first).

    Returns:
        ``(level, trend per step, RMS of the one-step-ahead errors)``.
    """
    level, trend = float(rates[0]), 0.0
    errors = []
    for r in rates[1:]:
        predicted = level + trend
        errors.append(float(r) - predicted)
        new_level = alpha * float(r) + (1 - alpha) * predicted
        trend = beta * (new_level - level) + (1 - beta) * trend
        level = new_level
    rms = math.sqrt(sum(e * e for e in errors) / len(errors)) if errors else 0.0
    return level, trend, rms


def forecast_rate_rps(counts: Sequence[float] | NDArray[np.float64], bin_s: float, horizon_s: float, rule: str = "peak",
                      window_s: float = 300.0, quantile: float = 0.9, z: float = 1.0, recent_bins: int = 1
                      ) -> Forecast | None:
    """Upper forecast of the arrival rate over the next ``horizon_s`` seconds (rules in the module docstring).

    Args:
        counts: Requests per bin, oldest first; finite.
        bin_s: Bin length, s.
        horizon_s: How far ahead (a new replica's start-up delay), s.
        rule: ``naive``, ``holt`` or ``peak``.
        window_s: ``peak``: the look-back whose rates the quantile is taken over, s.
        quantile: ``peak``: which quantile of those rates.
        z: ``holt``: standard deviations of one-step error added.
        recent_bins: Bins averaged for ``Forecast.current_rps``.
    Returns:
        The forecast, or None without at least two bins.
    Raises:
        ValueError: unknown rule, non-positive ``bin_s``, a non-finite count.
    """
    if rule not in FORECASTERS:
        raise ValueError(f"unknown forecaster {rule!r}; known: {list(FORECASTERS)}")
    if bin_s <= 0 or horizon_s < 0:
        raise ValueError(f"need bin_s > 0 and horizon_s >= 0, got {bin_s}, {horizon_s}")
    c = _counts(counts)
    if c.size < 2:
        return None
    rates = c / bin_s
    current = float(rates[-max(1, recent_bins):].mean())
    if rule == "naive":
        return Forecast(float(rates[-1]), current, rule)
    steps = horizon_s / bin_s
    level, trend, rms = holt(rates)
    if rule == "holt":
        ahead = level + max(0.0, trend) * max(1.0, steps)
        return Forecast(max(0.0, ahead + z * rms), current, rule)
    k = max(2, int(round(window_s / bin_s)))
    recent = rates[-k:]
    peak = float(np.quantile(recent, quantile))
    return Forecast(max(0.0, peak + max(0.0, trend) * steps), current, rule)
