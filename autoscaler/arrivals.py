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
- ``peak``: a high quantile of the rates of the last ``window_s`` (a quantile of recent peaks; after a level shift
  down, of the bins since it once there are ``PEAK_BINS_AFTER_SHIFT``), raised by the Holt trend over the horizon when
  that trend is positive. The rates are over spans as long as the p95 target
  (``span_s``; one bin for targets under ~22 s): a burst shorter than the target is queueing the target allows,
  and with long requests at low rates the quantile of 15 s bins is mostly Poisson scatter of ~5 counts (its 95th
  percentile ~1.8x the mean), which sized the long-request trace at ~1.8x its load (issue 20).

Level shifts (:func:`level_shifts`): a step in the rate (traffic starting from idle, a client switching on) is
neither burstiness nor a trend. :func:`arrival_scv` leaves the differences across a shift out, and the Holt
trend of ``holt`` and ``peak`` is fitted after the last shift once three bins follow it (before that a step
cannot be told from a ramp). Without it a step from idle to a steady 40 req/s read as SCV 10-21 for 9 minutes
(issue 20, fault 4).

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


LEVEL_SHIFT_STATISTIC = 25.0
"""A level shift is split off when its quasi-likelihood ratio statistic exceeds this (see :func:`level_shifts`)."""
MAX_LEVEL_SHIFTS = 3
"""At most this many level shifts are split off one window (binary segmentation)."""


def _best_shift(c: NDArray[np.float64], min_scv: float) -> tuple[float, int]:
    """``(statistic, bin)`` of the most likely single level shift in ``c`` (see :func:`level_shifts`)."""
    k = c.size
    if k < 3:
        return 0.0, -1
    tau = np.arange(1, k - 1)  # the bin the shift falls in; it is left out of both sides (it straddles them)
    cs = np.concatenate([[0.0], np.cumsum(c)])
    d2 = np.concatenate([[0.0], np.cumsum(np.diff(c) ** 2)])
    n1, n2 = tau.astype(np.float64), (k - tau - 1).astype(np.float64)
    s1, s2 = cs[tau], cs[k] - cs[tau + 1]
    m = (s1 + s2) / (n1 + n2)

    def xlogx(s: NDArray[np.float64], n: NDArray[np.float64]) -> NDArray[np.float64]:
        ok = (s > 0) & (m > 0)
        ratio = np.where(ok, s / n / np.where(m > 0, m, 1.0), 1.0)
        return np.where(ok, s * np.log(ratio), 0.0)

    deviance = 2.0 * (xlogx(s1, n1) + xlogx(s2, n2))  # Poisson: one rate against one per side
    within = d2[tau - 1] + (d2[k - 1] - d2[tau + 1])  # squared differences inside each side
    den = 2.0 * ((n1 - 1.0) * s1 / n1 + (n2 - 1.0) * s2 / n2)
    dispersion = np.where(den > 0, within / np.where(den > 0, den, 1.0), 1.0)
    stat = deviance / np.maximum(dispersion, min_scv)
    i = int(np.argmax(stat))
    return float(stat[i]), int(tau[i])


def level_shifts(counts: ArrayLike, min_scv: float = 0.25, threshold: float = LEVEL_SHIFT_STATISTIC,
                 max_shifts: int = MAX_LEVEL_SHIFTS) -> list[int]:
    """Bins in which the arrival rate shifted level (a step from idle to load, a step between two loads).

    Binary segmentation (A. J. Scott and M. Knott, "A cluster analysis method for grouping means in the analysis
    of variance", Biometrics 30 (1974) 507-512) with the Poisson likelihood-ratio test for one change in rate
    (K. J. Worsley, "Confidence regions and tests for a change-point in a sequence of exponential family random
    variables", Biometrika 73 (1986) 91-104), made a quasi-likelihood test (P. McCullagh and J. A. Nelder,
    *Generalized Linear Models*, 2nd ed., 1989, §9.2) by dividing the deviance by the dispersion measured
    inside the two sides: bursty traffic, whose counts vary far beyond Poisson, needs a far larger shift to
    count. The bin the shift falls in straddles both levels and belongs to neither side. The statistic
    threshold (25, a 5-sigma single test) keeps a stationary window from being split by chance; a split of one,
    were it to happen, drops one bin and two differences of the window.

    Args:
        counts: Requests per bin, oldest first; finite.
        min_scv: Floor of the within dispersion (a perfectly flat side would make any shift infinite).
        threshold: Least statistic for a split.
        max_shifts: Most shifts split off.
    Returns:
        The straddling bins' indices, ascending.
    Raises:
        ValueError: a non-finite count.
    """
    c = _counts(counts)
    pending: list[tuple[int, int]] = [(0, c.size)]
    shifts: list[int] = []
    while pending and len(shifts) < max_shifts:
        best = None
        for lo, hi in pending:
            stat, at = _best_shift(c[lo:hi], min_scv)
            if at >= 0 and stat > threshold and (best is None or stat > best[0]):
                best = (stat, lo, hi, lo + at)
        if best is None:
            break
        _, lo, hi, at = best
        shifts.append(at)
        pending.remove((lo, hi))
        pending += [(lo, at), (at + 1, hi)]
    return sorted(shifts)


SUB_POISSON_Z = 1.645
"""One-sided normal quantile (95 %) of :func:`arrival_scv`'s test that arrivals are more regular than Poisson."""


def arrival_scv(counts: ArrayLike, min_requests: float = 50.0, min_scv: float = 0.25, max_scv: float = 50.0,
                sub_poisson_z: float = SUB_POISSON_Z) -> float | None:
    """Estimated inter-arrival SCV from per-bin counts (estimator, window and bias in the module docstring).

    Level shifts (:func:`level_shifts`: a step from idle to load, from one load to another) are not
    variability: the window is cut at each, the bin a shift falls in is left out, and the dispersion is pooled
    over the pieces, ``sum_s sum_i (n_{i+1} - n_i)^2 / (2 sum_s (k_s - 1) mean_s)`` (``k_s`` bins of mean
    ``mean_s`` in piece ``s``; an idle piece adds nothing). Without a shift this is the plain estimator.

    A reading below Poisson is taken at its upper confidence bound, ``min(1, est (1 + z sqrt(3 / d)))`` over ``d``
    differences (``sqrt(3 / d)``: the estimator's relative standard error, module docstring): a window of a few
    bins does not show arrivals more regular than Poisson, and sizing for a regularity that is sampling noise misses
    the SLO (issue 20: the Azure trace's seed-0 misses followed a scale-down on SCV 0.58 read from 9 bins, whose
    relative standard error is 61 %). A reading above 1 is kept as is: the SLO-safe side.

    Args:
        counts: Requests per bin, oldest first, shape ``(k,)``; finite.
        min_requests: Fewest requests in the window for an estimate.
        min_scv: Lower clip.
        max_scv: Upper clip.
        sub_poisson_z: Normal quantile of the bound a reading below 1 is raised to (0: the reading as is).
    Returns:
        ``c_a^2`` (1 = Poisson) in ``[min_scv, max_scv]``, or None when the window has too few requests, or
        fewer than 3 differences inside pieces with traffic (e.g. traffic started under 4 bins ago).
    Raises:
        ValueError: a non-finite count.
    """
    c = _counts(counts)
    if c.size < 4 or c.sum() < min_requests:
        return None
    edges = [-1] + level_shifts(c, min_scv) + [c.size]
    num = den = 0.0
    diffs = 0
    for lo, hi in zip(edges, edges[1:], strict=False):
        piece = c[lo + 1 : hi]
        if piece.size < 2 or piece.sum() <= 0:
            continue
        num += float(np.sum(np.diff(piece) ** 2))
        den += 2.0 * (piece.size - 1) * float(piece.mean())
        diffs += piece.size - 1
    if diffs < 3 or den <= 0:
        return None
    est = num / den
    if est < 1.0:
        est = min(1.0, est * (1.0 + sub_poisson_z * math.sqrt(3.0 / diffs)))
    return float(min(max_scv, max(min_scv, est)))


@dataclass(frozen=True, slots=True)
class Forecast:
    """Demand forecast over a horizon.

    Attributes:
        rate_rps: Forecast (upper) arrival rate to provision for over the horizon, requests/s.
        current_rps: The rate it is compared with: the mean over the last ``recent_bins`` bins, requests/s.
        rule: Which rule made it (``naive``, ``holt``, ``peak``).
        level_rps: The expected rate over the horizon, without the upper part: ``peak``'s Holt level plus its positive
            trend over the horizon (the rate a ramp brings; ``rate_rps`` adds the quantile of recent peaks); the
            other rules' ``rate_rps``; requests/s.
    """

    rate_rps: float
    current_rps: float
    rule: str
    level_rps: float


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


PEAK_BINS_AFTER_SHIFT = 4
"""Bins after a level shift down (:func:`level_shifts`) from which ``peak`` takes its quantile over them alone.
Pareto benchmark, 3 seeds: Azure 3.68 / 3.70 / 3.70 -> 3.60 / 3.64 / 3.64 replica-h at the same SLO-minutes (x
oracle met on all three), every other trace the same (docs/benchmarks.md)."""


def forecast_rate_rps(counts: Sequence[float] | NDArray[np.float64], bin_s: float, horizon_s: float, rule: str = "peak",
                      window_s: float = 300.0, quantile: float = 0.9, z: float = 1.0, recent_bins: int = 1,
                      span_s: float = 0.0) -> Forecast | None:
    """Upper forecast of the arrival rate over the next ``horizon_s`` seconds (rules in the module docstring).

    Args:
        counts: Requests per bin, oldest first; finite.
        bin_s: Bin length, s.
        horizon_s: How far ahead (a new replica's start-up delay), s.
        rule: ``naive``, ``holt`` or ``peak``.
        window_s: ``peak``: the look-back whose rates the quantile is taken over, s.
        quantile: ``peak``: which quantile of those rates.
        span_s: ``peak``: the rates are means over spans of ``round(span_s / bin_s)`` bins (moving means, one
            per bin; at least one bin, at most the look-back), s. The policy passes its p95 target: a burst
            shorter than the target waits in the queue within it, so the peak to provision for is the rate over
            the target's timescale (for targets under 1.5 bins, the bins themselves).
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
        return Forecast(float(rates[-1]), current, rule, float(rates[-1]))
    steps = horizon_s / bin_s
    shifts = level_shifts(c)
    after = rates[shifts[-1] + 1:] if shifts else rates
    level, trend, rms = holt(after if after.size >= 3 else rates)  # a step is not a trend (level_shifts)
    if rule == "holt":
        ahead = level + max(0.0, trend) * max(1.0, steps)
        upper = max(0.0, ahead + z * rms)
        return Forecast(upper, current, rule, upper)
    k = max(2, int(round(window_s / bin_s)))
    m = max(1, min(k, int(round(span_s / bin_s))))
    # a level seen to fall is not a burst to remember: the quantile over the bins after the last shift once
    # PEAK_BINS_AFTER_SHIFT of them show the lower level (before that the old one is held: a scale-down waits
    # anyway). Not after a rise: the quantile of a few bins is near their maximum, and read above steady Poisson
    # sizing a minute after an onset from idle (tests/unit/autoscaler/test_autoscaler_policy.py)
    fallen = (bool(shifts) and after.size >= max(m, PEAK_BINS_AFTER_SHIFT) and shifts[-1] > 0
              and float(after.mean()) < float(rates[:shifts[-1]][-k:].mean()))
    base = after if fallen else rates
    if m > 1:  # rates over spans of m bins (moving means), the quantile taken over those
        sums = np.convolve(base[-(k + m - 1):], np.ones(m) / m, mode="valid")
        recent = sums[-k:]
    else:
        recent = base[-k:]
    peak = float(np.quantile(recent, quantile))
    ramp = max(0.0, trend) * steps
    return Forecast(max(0.0, peak + ramp), current, rule, level_rps=max(0.0, level + ramp))
