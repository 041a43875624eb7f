"""Spend-anomaly detection per service: a burn rate far above that service's own seasonal baseline.

Why a module: a budget threshold catches a runaway service only when the whole budget crosses it; Kubecost-style
anomaly alerts catch it when the service leaves its own normal range. Pure: the caller passes the history.

Method (a robust z-score over a seasonal baseline, Iglewicz and Hoaglin's modified z-score):

* **Baseline** of a sample at time ``t``: the service's samples at the same phase of earlier seasons
  (``|t - k x season_s - s| <= slot_s / 2`` for ``k = 1 .. seasons``), when there are at least
  ``min_baseline_samples`` of them; else the samples from ``recent_s`` to ``smooth_s`` seconds before ``t`` (a
  service without a season of history yet; the scored window below is not part of its own baseline), when
  there are at least ``min_recent_samples``. Else: no decision.
* **Minimums per evaluation interval** (:func:`for_interval`, applied to the configured settings for each
  BudgetPolicy): an interval of ``I`` seconds puts ``floor((recent_s - smooth_s) / I)`` samples in the recent
  window, so fixed minimums of 30 recent and 10 same-phase samples were never met from ``I`` of about 2400 s (the
  CRD allows 1-3600). The recent minimum is ``min(min_recent_samples, max(5, that count less one spare interval
  for timer jitter))``, and the window widens to ``smooth_s + (minimum + 1) x I`` where the hour cannot hold it;
  the same-phase minimum is ``min(min_baseline_samples, max(5, samples one slot holds at max(I, 300 s)))``
  (one season of history where a slot holds enough). The floor of :data:`MIN_BASELINE_SAMPLES` (5) is where the
  median and MAD stay meaningful: both tolerate ``floor((n - 1) / 2)`` outlying samples (2 at 5, none at 2), and
  below 5 the MAD's small-sample bias grows (Croux and Rousseeuw's correction factor is 1.21 at 5, 1.36 at 4,
  1.50 at 3), so a z of 6 means on average 5.0 standard deviations at 5 samples, 4.4 at 4 and 4.0 at 3.
* **Score**: ``z = (x - median) / scale``, where ``x`` is the median burn rate of the samples of the last
  ``smooth_s`` seconds (a blip of one autoscaler step is not an anomaly; a spike is seen once it fills half of
  that window), with ``scale = max(1.4826 x MAD, floor_ratio x median,
  min_excess_usd_per_hour / z_threshold)`` (1.4826 x MAD estimates the standard deviation of normal data; the
  floors keep a flat baseline, whose MAD is 0, from turning every small step into an infinite score).
* **Anomaly** starts when ``z >= z_threshold`` and ``x - median >= min_excess_usd_per_hour``; it lasts until
  it is calm (``z < clear_z`` or less than ``min_excess_usd_per_hour`` over the median) for ``clear_after_s``
  seconds in a row (hysteresis: a noisy series does not flap), and is alerted **once**, when it starts.
* **Driver**: the sample's replicas and price per replica-hour against the baseline's medians: the larger
  relative rise names it (``replicas 3 -> 9`` or ``price 0.75 -> 3.13 USD/replica-hour``).

Units: burn rates in USD/h, times timezone-aware UTC, durations in seconds.
"""

from __future__ import annotations

import bisect
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal

from modalscale.costmodel.money import display_usd

MAD_TO_SIGMA = 1.4826
"""Consistency constant: 1.4826 x MAD estimates sigma for normal data (1 / Phi^-1(3/4))."""

MIN_BASELINE_SAMPLES = 5
"""Least baseline (recent or same-phase) that :func:`for_interval` asks for at any interval: median and MAD of 5
samples tolerate 2 outliers, and the MAD's small-sample bias is at most about 1.2 from 5 on (module docstring)."""

KEEP_EVERY_S = 300.0
"""Beyond the recent window :func:`trim_history` keeps one sample per this many seconds."""

MAX_HORIZON_S = 400 * 86_400.0
"""Longest history (``seasons x season_s + slot_s``) :meth:`AnomalyConfig.problems` takes, seconds: a year of weekly
seasons and then some; at one sample per :data:`KEEP_EVERY_S` that is 115,200 samples per service in memory."""


@dataclass(frozen=True)
class BurnSample:
    """One observation of one service: burn rate and what made it (``usd_per_hour = replicas x price``)."""

    time: datetime
    usd_per_hour: float
    replicas: int
    usd_per_replica_hour: float


@dataclass(frozen=True)
class AnomalyConfig:
    """Detector settings (units in names)."""

    season_s: float = 86_400.0
    """Seasonal period (a day)."""
    slot_s: float = 3_600.0
    """Width of the same-phase slot taken from each earlier season."""
    seasons: int = 7
    """How many earlier seasons form the baseline."""
    recent_s: float = 3_600.0
    """Fallback baseline window before the sample, while there is not a season of history yet."""
    min_baseline_samples: int = 10
    """Fewer same-phase samples than this: the recent baseline is used."""
    min_recent_samples: int = 30
    """Fewer recent samples than this: no decision (a short, noisy window is no baseline)."""
    z_threshold: float = 6.0
    """Modified z-score that starts an anomaly."""
    clear_z: float = 3.0
    """An anomaly ends when the score stays below this ..."""
    clear_after_s: float = 1_800.0
    """... for this many seconds."""
    floor_ratio: float = 0.25
    """Least scale as a fraction of the baseline median (a flat baseline)."""
    min_excess_usd_per_hour: float = 1.0
    """Least rise over the baseline median that can alert, USD/h (tiny services stay quiet)."""
    smooth_s: float = 120.0
    """The scored value is the median burn rate of the samples of this many seconds up to the newest."""
    history_retry_s: float = 30.0
    """After a failed read of the history back from Prometheus (no decision until one succeeds), the next read is
    tried this many seconds later, not at every evaluation: a hanging Prometheus costs one query timeout per retry."""

    def problems(self) -> list[str]:
        """Why the detector cannot work with these settings, one line each naming the fields (empty: it can).

        Every field is positive and finite (the settings parser checks that per field); beyond that: ``clear_z <=
        z_threshold`` (an anomaly starts at ``z >= z_threshold`` and is calm below ``clear_z``: above, one that
        starts between them is calm at once, ends after ``clear_after_s`` and starts again), ``smooth_s <
        recent_s`` (the recent baseline is the samples from ``recent_s`` to ``smooth_s`` before the scored one),
        ``slot_s <= season_s`` (wider, the same-phase slots of consecutive seasons overlap and count samples twice,
        and from twice the season the scored samples themselves), and a history ``seasons x season_s + slot_s`` of
        at most :data:`MAX_HORIZON_S` (kept in memory and read back from Prometheus; far longer overflows the
        clock).
        """
        out = []
        if self.clear_z > self.z_threshold:
            out.append(f"clear_z={self.clear_z:g} is above z_threshold={self.z_threshold:g}: an anomaly would be "
                       f"calm as soon as it starts (it ends below clear_z); use clear_z <= z_threshold (defaults 3 "
                       f"and 6)")
        if not self.smooth_s < self.recent_s:
            out.append(f"recent_s={self.recent_s:g} is not above smooth_s={self.smooth_s:g}: the recent baseline (the "
                       f"samples from recent_s to smooth_s before the scored one) would be empty; use recent_s > "
                       f"smooth_s (defaults 3600 and 120)")
        if self.slot_s > self.season_s:
            out.append(f"slot_s={self.slot_s:g} is above season_s={self.season_s:g}: the same-phase slots of "
                       f"consecutive seasons would overlap; use slot_s <= season_s (defaults 3600 and 86400)")
        horizon = self.seasons * self.season_s + self.slot_s
        if horizon > MAX_HORIZON_S:
            out.append(f"seasons x season_s + slot_s = {horizon:g} s of history is more than {MAX_HORIZON_S:g} s "
                       f"({MAX_HORIZON_S / 86_400:g} days); use fewer seasons or a shorter season_s (defaults 7 and "
                       f"86400)")
        return out


@dataclass(frozen=True)
class Score:
    """The decision inputs for one sample."""

    z: float
    value_usd_per_hour: float
    """The scored (smoothed) burn rate."""
    median_usd_per_hour: float
    scale_usd_per_hour: float
    baseline: str
    """``seasonal`` or ``recent``."""
    baseline_samples: int
    median_replicas: float
    median_usd_per_replica_hour: float


@dataclass(frozen=True)
class Anomaly:
    """An anomaly that started at ``sample`` for service ``namespace/name``."""

    namespace: str
    name: str
    sample: BurnSample
    score: Score
    driver: str
    """``replicas`` or ``price``."""

    def describe(self) -> str:
        """Human text naming the service and the driver."""
        s, b = self.sample, self.score
        if self.driver == "replicas":
            why = f"replicas {b.median_replicas:g} -> {s.replicas}"
        else:
            why = f"price {b.median_usd_per_replica_hour:.4g} -> {s.usd_per_replica_hour:.4g} USD/replica-hour"
        return (f"{self.namespace}/{self.name} burns {_usd(s.usd_per_hour)} USD/h (median of the last samples "
                f"{_usd(b.value_usd_per_hour)}) against a {b.baseline} baseline of {_usd(b.median_usd_per_hour)} "
                f"USD/h (robust z {b.z:.1f}); driver: {why}")


def _usd(rate: float) -> str:
    """A burn rate (a float feature, USD/h) as money is shown everywhere (:func:`~modalscale.costmodel.money.
    display_usd`: cents, an amount under a cent to 2 significant digits)."""
    return display_usd(Decimal(repr(rate))) if math.isfinite(rate) else str(rate)


@dataclass(frozen=True)
class AnomalyState:
    """Services in an anomaly now, with when it started (persist between evaluations).

    Attributes:
        active: (namespace, name) -> when its anomaly started.
        calm_since: (namespace, name) -> since when an active anomaly's score has stayed below ``clear_z``.
    """

    active: Mapping[tuple[str, str], datetime] = field(default_factory=dict)
    calm_since: Mapping[tuple[str, str], datetime] = field(default_factory=dict)


def _baseline(history: Sequence[BurnSample], t: datetime, cfg: AnomalyConfig) -> tuple[list[BurnSample], str]:
    """``history`` is oldest first: each window is found by bisection."""
    times = [s.time for s in history]
    seasonal: list[BurnSample] = []
    half = timedelta(seconds=cfg.slot_s / 2)
    for k in range(1, cfg.seasons + 1):
        centre = t - timedelta(seconds=k * cfg.season_s)
        seasonal += history[bisect.bisect_left(times, centre - half):bisect.bisect_right(times, centre + half)]
    if len(seasonal) >= cfg.min_baseline_samples:
        return seasonal, "seasonal"
    lo = bisect.bisect_right(times, t - timedelta(seconds=cfg.recent_s))
    recent = list(history[lo:bisect.bisect_right(times, t - timedelta(seconds=cfg.smooth_s))])
    return (recent, "recent") if len(recent) >= cfg.min_recent_samples else ([], "none")


def score(history: Sequence[BurnSample], sample: BurnSample, cfg: AnomalyConfig = AnomalyConfig()) -> Score | None:
    """Robust z-score of ``sample`` against its baseline in ``history`` (samples before it); None = too little.

    Raises:
        ValueError: A naive timestamp.
    """
    if sample.time.tzinfo is None:
        raise ValueError("sample.time must be timezone-aware (UTC)")
    base, kind = _baseline(history, sample.time, cfg)
    if not base:
        return None
    values = [b.usd_per_hour for b in base]
    median = statistics.median(values)
    mad = statistics.median(abs(v - median) for v in values)
    scale = max(MAD_TO_SIGMA * mad, cfg.floor_ratio * abs(median), cfg.min_excess_usd_per_hour / cfg.z_threshold,
                1e-12)
    window = [h.usd_per_hour for h in history
              if 0 < (sample.time - h.time).total_seconds() < cfg.smooth_s] + [sample.usd_per_hour]
    value = statistics.median(window)
    return Score((value - median) / scale, value, median, scale, kind, len(base),
                 statistics.median(b.replicas for b in base), statistics.median(b.usd_per_replica_hour for b in base))


def _driver(sample: BurnSample, s: Score) -> str:
    rep = sample.replicas / s.median_replicas if s.median_replicas > 0 else float("inf") if sample.replicas else 1.0
    price = (sample.usd_per_replica_hour / s.median_usd_per_replica_hour
             if s.median_usd_per_replica_hour > 0 else 1.0)
    return "replicas" if rep >= price else "price"


def detect(history: Mapping[tuple[str, str], Sequence[BurnSample]], state: AnomalyState,
           cfg: AnomalyConfig = AnomalyConfig(), in_scope: Collection[tuple[str, str]] | None = None
           ) -> tuple[list[Anomaly], AnomalyState]:
    """Decide, for the newest sample of each service, whether an anomaly starts, lasts or ends.

    Args:
        history: (namespace, name) -> that service's samples, oldest first; the last one is "now".
        state: From the previous call (``AnomalyState()`` the first time).
        in_scope: The services still watched, with a sample now or not (default: those of ``history`` with
            samples). An active anomaly of a service in scope without a sample now (its burn rate could not be
            read) is held as it was: nothing is decided on data that could not be read. Only a service out of
            scope (no longer selected) is forgotten.
    Returns:
        (anomalies that started now: alert each once, the new state). A service with too little history, or
        without a sample now, keeps its state.
    """
    started: list[Anomaly] = []
    active, calm = dict(state.active), dict(state.calm_since)
    for key, samples in sorted(history.items()):
        if not samples:
            continue
        now = samples[-1]
        sc = score(samples[:-1], now, cfg)
        if sc is None:
            continue
        excess = sc.value_usd_per_hour - sc.median_usd_per_hour
        if key in active:
            if sc.z >= cfg.clear_z and excess >= cfg.min_excess_usd_per_hour:
                calm.pop(key, None)
            elif (now.time - calm.setdefault(key, now.time)).total_seconds() >= cfg.clear_after_s:
                del active[key], calm[key]
        elif sc.z >= cfg.z_threshold and excess >= cfg.min_excess_usd_per_hour:
            active[key] = now.time
            started.append(Anomaly(key[0], key[1], now, sc, _driver(now, sc)))
    scope = {k for k, v in history.items() if v} if in_scope is None else set(in_scope)
    for key in list(active):
        if key not in scope:
            active.pop(key, None)
            calm.pop(key, None)
    return started, AnomalyState(active, calm)


def for_interval(cfg: AnomalyConfig, interval_s: float) -> AnomalyConfig:
    """``cfg`` with its sample minimums (and recent window) scaled to an evaluation interval, so that a service
    is decided on at every interval (module docstring, *Minimums per evaluation interval*). Idempotent.

    Raises:
        ValueError: ``interval_s`` is not positive.
    """
    if not interval_s > 0:
        raise ValueError(f"evaluationIntervalSeconds must be positive, got {interval_s!r}")
    held = math.floor((cfg.recent_s - cfg.smooth_s) / interval_s) - 1  # one interval spare for timer jitter
    recent = min(cfg.min_recent_samples, max(MIN_BASELINE_SAMPLES, held))
    step = interval_s * math.ceil(KEEP_EVERY_S / interval_s)  # the spacing trim_history keeps beyond recent_s
    seasonal = min(cfg.min_baseline_samples, max(MIN_BASELINE_SAMPLES, math.floor(cfg.slot_s / step)))
    return replace(cfg, min_recent_samples=recent, min_baseline_samples=seasonal,
                   recent_s=max(cfg.recent_s, cfg.smooth_s + (recent + 1) * interval_s))


def trim_history(samples: Sequence[BurnSample], now: datetime, cfg: AnomalyConfig = AnomalyConfig(),
                 keep_every_s: float = KEEP_EVERY_S) -> list[BurnSample]:
    """Bound a service's history: samples older than the seasonal horizon are dropped, and beyond the last
    ``max(recent_s, smooth_s)`` only one sample per ``keep_every_s`` is kept (the seasonal baseline needs no more).

    Returns:
        The kept samples, oldest first.
    """
    horizon = now - timedelta(seconds=cfg.seasons * cfg.season_s + cfg.slot_s)
    dense_from = now - timedelta(seconds=max(cfg.recent_s, cfg.smooth_s))
    out: list[BurnSample] = []
    for s in samples:
        if s.time < horizon:
            continue
        if s.time < dense_from and out and (s.time - out[-1].time).total_seconds() < keep_every_s:
            continue
        out.append(s)
    return out


def replay(samples: Sequence[BurnSample], cfg: AnomalyConfig = AnomalyConfig(),
           key: tuple[str, str] = ("", "svc")) -> list[Anomaly]:
    """Run :func:`detect` over one service's whole series, sample by sample (for tests and benchmarks)."""
    state = AnomalyState()
    out: list[Anomaly] = []
    times = [s.time for s in samples]
    horizon = timedelta(seconds=cfg.seasons * cfg.season_s + cfg.slot_s)
    for i in range(len(samples)):
        lo = bisect.bisect_left(times, times[i] - horizon)
        found, state = detect({key: samples[lo: i + 1]}, state, cfg)
        out += found
    return out


__all__ = ["Anomaly", "AnomalyConfig", "AnomalyState", "BurnSample", "KEEP_EVERY_S", "MAD_TO_SIGMA", "MAX_HORIZON_S",
           "MIN_BASELINE_SAMPLES", "Score", "detect", "for_interval", "replay", "score",
           "trim_history"]
