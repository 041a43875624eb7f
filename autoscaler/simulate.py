"""Trace-driven discrete-event simulation of a replica pool under different autoscaling policies.

Model of the pool (assumptions, stated once):

- Every replica has ``slots_per_replica`` execution slots; all ready slots serve ONE FCFS queue (an ideal
  least-loaded load balancer). Requests are not batched (batch size 1).
- Arrivals are replayed exactly as the trace has them (never redrawn).
- A request's service time is its trace ``service_ms`` if given; else, with ``service_source="regressor"``, the
  predictive policy's regressor's prediction for the request's own features times a mean-one lognormal draw whose
  sigma is the regressor's residual spread (log observed / predicted) on a held-out profile; else the synthetic
  law's draw (``SimulationConfig.law`` times ``true_service_scale``). Every policy sees the same draws.
- A new replica is ready a start-up delay after the decision that created it, drawn per replica: fixed
  ``startup_delay_s``; lognormal with median ``startup_delay_s`` and 90th percentile ``startup_delay_p90_s``;
  or uniformly from measured ``startup_delay_samples_s``. Every policy gets the same sequence of draws. A replica
  costs from creation.
  Scale-down removes starting replicas first (newest first), then the ready ones with the least work left;
  a removed replica finishes its in-flight requests (and costs until it has), but takes no new ones.
- A policy decides every ``decision_interval_s`` on metrics of the last ``metrics_window_s``: per-modality
  arrival rates and mean features (also over ``recent_window_s``), mean service time of the requests that
  completed in the window whenever they arrived (Triton records compute time at completion), p95 latency of
  requests completed in the window, slot utilization of ready replicas, mean in-flight requests (queued +
  running) and the queue length now; the requests in flight now with their mean age and the executing ones with
  their mean time in execution (``Observation.in_flight_*``, ``executing_*``: what the predictive policy's
  observed-queue rule and service-time lower bound read). No per-class service-time SCV: the operator reads none.

Policies:

- ``predictive``: :func:`modalscale.autoscaler.policy.recommend` in Predictive mode with a
  :class:`ServiceTimeRegressor` trained on a synthetic profile of the same law.
- ``utilization``: the same function in Utilization mode (HPA-like, ``hpa_target_utilization_percent``).
- ``concurrency``: KPA-like: ``ceil(mean in-flight over 60 s / (slots * kpa_target_utilization_ratio))``, panic
  mode on a 6 s window when it asks for >= 2x the ready replicas (Knative defaults), no scale-down stabilization.
- ``fixed``: ``fixed_replicas`` ready from the start, never changed (the best fixed pool is found by sweeping).
- ``oracle``: per minute, the least replicas that meet the p95 target for that minute's arrivals, found by
  replaying the minute with the exact service times and the queue carried over; replicas are ready at once
  and a minute's replicas serve its own requests to the end (see :func:`oracle_schedule`).

The predictive policy also gets the per-bin arrival counts Prometheus would give (``count_bin_s`` bins over the
last ``count_span_s``), for its arrival-SCV estimate and its demand forecast over the start-up horizon.

Metrics: ``slo_minutes_fraction`` (minutes, by arrival, whose p95 response time <= target; empty minutes count
as met), ``replica_hours``, and the requests over the target, in all and in burst minutes (:func:`burst_minutes`).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import numpy as np
from numpy.typing import NDArray

from modalscale.api.inferenceservice import SCALING_MODE_DEFAULTS, predictive_scale_down_window_s
from modalscale.api.isvc_status import ScalerState
from modalscale.autoscaler.calibration import Calibrator
from modalscale.autoscaler.features import MODALITIES, features_from_columns
from modalscale.autoscaler.policy import (
    Decision,
    Observation,
    Reason,
    ScalingMode,
    ScalingPolicy,
    ServiceTimePredictor,
    WorkloadClass,
    finalize_recommendation,
    recommend,
)
from modalscale.autoscaler.profile_data import SyntheticServiceLaw, generate_profile
from modalscale.autoscaler.regressor import ServiceTimeRegressor
from modalscale.autoscaler.traces import Trace

POLICIES: tuple[str, ...] = ("predictive", "utilization", "concurrency", "oracle")
"""Policies :func:`run_simulation` runs by default."""
KNOWN_POLICIES: tuple[str, ...] = POLICIES + ("fixed",)
"""Policy names :func:`run_simulation` knows (``fixed`` needs ``SimulationConfig.fixed_replicas``)."""

_EPOCH = datetime(2025, 1, 1, tzinfo=UTC)
_PREDICTIVE = SCALING_MODE_DEFAULTS["Predictive"]
_LOOKBACK_S = 600.0  # requests older than this before a window are assumed finished when measuring it


@dataclass(frozen=True)
class SimulationConfig:
    """Knobs of :func:`run_simulation` (units in names).

    Attributes:
        target_p95_ms: p95 response-time target, ms.
        decision_interval_s: Seconds between decisions.
        metrics_window_s: Window of the rate, latency and utilization metrics of each decision, s.
        recent_window_s: Short window of the predictive policy's burst check (``Observation.recent_workload``), s.
        startup_delay_s: Seconds from a scale-up decision until the new replica serves (the median when
            ``startup_delay_p90_s`` is set).
        startup_delay_p90_s: 90th percentile of a lognormal start-up delay; None = always ``startup_delay_s``.
        startup_delay_samples_s: Measured start-up delays, drawn uniformly per new replica (overrides the two
            above when given).
        slots_per_replica: Concurrent executions per replica.
        min_replicas: Lower bound for every policy.
        max_replicas: Upper bound for every policy.
        initial_replicas: Ready replicas at t=0; None = the oracle's first-minute count.
        predictive_target_utilization_percent: ``targetUtilizationPercent`` of the predictive policy (default: the
            CRD's when unset in Predictive mode, ``modalscale.api.inferenceservice.SCALING_MODE_DEFAULTS``).
        hpa_target_utilization_percent: Target utilization of the HPA-like baseline.
        kpa_target_utilization_ratio: Target in-flight per slot of the KPA-like baseline.
        kpa_stable_window_s: KPA stable window, s.
        kpa_panic_window_s: KPA panic window, s.
        tolerance_percent: Tolerance band (predictive and HPA-like).
        scale_up_stabilization_s: Scale-up window (predictive and HPA-like).
        scale_down_stabilization_s: Scale-down window (predictive and HPA-like).
        max_step_replicas: Largest change per decision (all policies; default: Predictive mode's).
        law: True service-time law (when the trace has no ``service_ms``).
        true_service_scale: Multiplier on the law's service times the model does not know (tests calibration).
        profile_requests: Size of the synthetic profile the predictive model is trained on.
        calibrator: Online calibration of the predictive policy.
        policies: Which policies to run.
        random_state: Seed of service-time draws and the profile.
        service_source: ``law`` (synthetic law draws) or ``regressor`` (the regressor's prediction with its
            residual noise) for traces without ``service_ms``.
        fixed_replicas: Pool size of the ``fixed`` policy.
        predictive_scale_down_stabilization_s: Scale-down window of the predictive policy; None (the default) =
            Predictive mode's when unset for ``target_p95_ms`` and ``decision_interval_s``
            (``modalscale.api.inferenceservice.predictive_scale_down_window_s``): 60 s less the p95 target, at least
            one decision interval. The peak forecaster's 300 s look-back is its memory after a drop, so HPA's 300 s
            window on top of it mostly holds idle replicas (benchmarks/autoscaler_pareto.py); 60 s rather than
            0-30 s keeps the forecast's bin-to-bin jitter from flapping a replica where the target is short.
        predictive_forecaster: The predictive policy's forecaster (None = no forecast).
        predictive_forecast_horizon_s: The predictive policy's ``forecast_horizon_s``; None = the p90 of the
            start-up law (:meth:`startup_horizon_s`). Set it to keep the shipped horizon while changing the law
            (e.g. replicas ready at once).
        predictive_burst_aware: Whether the predictive policy sizes with the measured arrival SCV.
        count_bin_s: Bin of the arrival counts given to the predictive policy, s.
        count_span_s: How far back those counts reach, s.
    """

    target_p95_ms: float = 2000.0
    decision_interval_s: float = 15.0
    metrics_window_s: float = 60.0
    recent_window_s: float = 15.0
    startup_delay_s: float = 30.0
    slots_per_replica: int = 1
    min_replicas: int = 1
    max_replicas: int = 200
    initial_replicas: int | None = None
    predictive_target_utilization_percent: float = float(_PREDICTIVE.target_utilization_percent)
    hpa_target_utilization_percent: float = 70.0
    kpa_target_utilization_ratio: float = 0.7
    kpa_stable_window_s: float = 60.0
    kpa_panic_window_s: float = 6.0
    tolerance_percent: float = 10.0
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    max_step_replicas: int = _PREDICTIVE.max_step_replicas
    law: SyntheticServiceLaw = field(default_factory=SyntheticServiceLaw)
    true_service_scale: float = 1.0
    profile_requests: int = 3000
    calibrator: Calibrator = field(default_factory=Calibrator)
    policies: tuple[str, ...] = POLICIES
    random_state: int = 0
    startup_delay_p90_s: float | None = None
    startup_delay_samples_s: tuple[float, ...] = ()
    service_source: str = "law"
    fixed_replicas: int | None = None
    predictive_scale_down_stabilization_s: float | None = None
    predictive_forecaster: str | None = "peak"
    predictive_forecast_horizon_s: float | None = None
    predictive_burst_aware: bool = True
    count_bin_s: float = 15.0
    count_span_s: float = 600.0

    def __post_init__(self) -> None:
        unknown = [p for p in self.policies if p not in KNOWN_POLICIES]
        if unknown:
            raise ValueError(f"unknown policies {unknown}; known: {list(KNOWN_POLICIES)}")
        if "fixed" in self.policies and (self.fixed_replicas is None or self.fixed_replicas < 1):
            raise ValueError("the fixed policy needs fixed_replicas >= 1")
        if self.service_source not in ("law", "regressor"):
            raise ValueError(f"service_source must be 'law' or 'regressor', got {self.service_source!r}")
        if self.startup_delay_p90_s is not None and self.startup_delay_p90_s < self.startup_delay_s:
            raise ValueError("startup_delay_p90_s must be >= startup_delay_s (the median)")
        if any(d < 0 for d in self.startup_delay_samples_s):
            raise ValueError("startup_delay_samples_s must be >= 0")
        if self.metrics_window_s <= 0 or self.decision_interval_s <= 0 or self.startup_delay_s < 0:
            raise ValueError("metrics_window_s and decision_interval_s must be > 0, startup_delay_s >= 0")
        if not 1 <= self.min_replicas <= self.max_replicas:
            raise ValueError("need 1 <= min_replicas <= max_replicas (the simulated pool never scales to zero)")

    def startup_horizon_s(self) -> float:
        """A new replica's start-up time the predictive policy forecasts over: the p90 of the delay law, s."""
        if self.startup_delay_samples_s:
            return float(np.percentile(self.startup_delay_samples_s, 90))
        return self.startup_delay_p90_s if self.startup_delay_p90_s is not None else self.startup_delay_s

    def startup_delays(self) -> Callable[[], float]:
        """A seeded draw of one replica's start-up delay, s (a fresh, identical sequence per call)."""
        rng = np.random.default_rng(self.random_state + 7)
        samples = np.asarray(self.startup_delay_samples_s, dtype=np.float64)
        if samples.size:
            return lambda: float(samples[rng.integers(samples.size)])
        if self.startup_delay_p90_s is None or self.startup_delay_p90_s == self.startup_delay_s:
            return lambda: float(self.startup_delay_s)
        mu = math.log(max(self.startup_delay_s, 1e-9))
        sigma = (math.log(self.startup_delay_p90_s) - mu) / 1.2815515655446004  # z of the 90th percentile
        return lambda: float(rng.lognormal(mu, sigma))

    def scaling_policy(self, mode: ScalingMode) -> ScalingPolicy:
        """The ``ScalingPolicy`` the predictive (``PREDICTIVE``) or HPA-like (``UTILIZATION``) policy runs with."""
        predictive = mode == ScalingMode.PREDICTIVE
        target = self.predictive_target_utilization_percent if predictive else self.hpa_target_utilization_percent
        down_s = self.scale_down_stabilization_s
        if predictive:
            down_s = (float(predictive_scale_down_window_s(int(self.target_p95_ms), int(self.decision_interval_s)))
                      if self.predictive_scale_down_stabilization_s is None
                      else self.predictive_scale_down_stabilization_s)
        return ScalingPolicy(
            mode=mode,
            min_replicas=self.min_replicas,
            max_replicas=self.max_replicas,
            target_p95_latency_ms=self.target_p95_ms,
            target_utilization_percent=target,
            tolerance_percent=self.tolerance_percent,
            scale_up_stabilization_s=self.scale_up_stabilization_s,
            scale_down_stabilization_s=down_s,
            max_step_replicas=self.max_step_replicas,
            decision_interval_s=self.decision_interval_s,
            slots_per_replica=self.slots_per_replica,
            calibrator=self.calibrator,
            burst_aware=self.predictive_burst_aware,
            forecaster=self.predictive_forecaster,
            forecast_horizon_s=(self.startup_horizon_s() if self.predictive_forecast_horizon_s is None
                                else self.predictive_forecast_horizon_s),
        )


@dataclass
class _Replica:
    created_s: float
    ready_s: float
    removed_s: float | None = None
    drained_s: float | None = None


class _Pool:
    """Replicas and the FCFS assignment of requests to slots (mutable; internal)."""

    def __init__(self, arrival_s: NDArray[np.float64], service_s: NDArray[np.float64], slots: int) -> None:
        self.arrival = arrival_s
        self.service = service_s
        self.slots = slots
        self.start = np.full(arrival_s.shape[0], np.nan)
        self.finish = np.full(arrival_s.shape[0], np.nan)
        self.next_i = 0  # first request not yet assigned to a slot
        self.replicas: list[_Replica] = []
        self.active: list[int] = []  # indices into replicas, not removed
        self.heap: list[tuple[float, int, int]] = []  # (free_at_s, slot sequence, replica index)
        self._seq = 0

    def copy(self) -> _Pool:
        other = _Pool.__new__(_Pool)
        other.__dict__.update(self.__dict__)
        other.start = self.start  # shared: the oracle search overwrites only rows it re-assigns
        other.finish = self.finish
        other.replicas = [replace(r) for r in self.replicas]
        other.active = list(self.active)
        other.heap = list(self.heap)
        return other

    def add(self, now_s: float, ready_s: float) -> None:
        self.replicas.append(_Replica(now_s, ready_s))
        index = len(self.replicas) - 1
        self.active.append(index)
        for _ in range(self.slots):
            heapq.heappush(self.heap, (ready_s, self._seq, index))
            self._seq += 1

    def remove(self, count: int, now_s: float) -> None:
        if count <= 0:
            return
        busy_until: dict[int, float] = {}
        for free_at, _, index in self.heap:
            busy_until[index] = max(busy_until.get(index, now_s), free_at)
        starting = [i for i in self.active if self.replicas[i].ready_s > now_s]
        ready = [i for i in self.active if self.replicas[i].ready_s <= now_s]
        victims = sorted(starting, reverse=True) + sorted(ready, key=lambda i: (busy_until.get(i, now_s), -i))
        gone = set(victims[:count])
        for index in gone:
            rep = self.replicas[index]
            rep.removed_s = now_s
            rep.drained_s = max(now_s, busy_until.get(index, now_s)) if rep.ready_s <= now_s else now_s
        self.active = [i for i in self.active if i not in gone]
        self.heap = [entry for entry in self.heap if entry[2] not in gone]
        heapq.heapify(self.heap)

    def resize(self, desired: int, now_s: float, startup_delay_s: float | Callable[[], float]) -> None:
        if desired > len(self.active):
            for _ in range(desired - len(self.active)):
                delay = startup_delay_s() if callable(startup_delay_s) else startup_delay_s
                self.add(now_s, now_s + delay)
        elif desired < len(self.active):
            self.remove(len(self.active) - desired, now_s)

    def advance(self, until_s: float, stop_index: int | None = None) -> None:
        """Assign queued requests (FCFS) whose start is <= ``until_s`` (and index < ``stop_index``)."""
        heap, arrival, service = self.heap, self.arrival, self.service
        start, finish = self.start, self.finish
        i = self.next_i
        n = arrival.shape[0] if stop_index is None else stop_index
        while i < n and heap:
            a = arrival[i]
            if a > until_s:
                break
            free_at, seq, index = heap[0]
            begin = a if a > free_at else free_at
            if begin > until_s:
                break
            end = begin + service[i]
            heapq.heapreplace(heap, (end, seq, index))
            start[i] = begin
            finish[i] = end
            i += 1
        self.next_i = i

    def ready_count(self, now_s: float) -> int:
        return sum(1 for i in self.active if self.replicas[i].ready_s <= now_s)

    def ready_slot_seconds(self, lo_s: float, hi_s: float) -> float:
        total = 0.0
        for rep in self.replicas:
            end = rep.removed_s if rep.removed_s is not None else hi_s
            total += max(0.0, min(end, hi_s) - max(rep.ready_s, lo_s))
        return total * self.slots

    def replica_seconds(self, end_s: float) -> float:
        total = 0.0
        for rep in self.replicas:
            stop = rep.drained_s if rep.drained_s is not None else end_s
            total += max(0.0, stop - rep.created_s)
        return total


class _Metrics:
    """Window metrics over the pool, vectorised with prefix sums over the arrival-ordered trace."""

    def __init__(self, trace: Trace, service_ms: NDArray[np.float64]) -> None:
        self.arrival = trace.arrival_s
        self.modality = trace.modality
        self.service_ms = service_ms
        self.prefix: dict[tuple[int, str], NDArray[np.float64]] = {}
        columns = {
            "count": np.ones(len(trace)),
            "pixels": trace.image_pixels.astype(np.float64),
            "images": trace.image_count.astype(np.float64),
            "tokens": trace.text_tokens.astype(np.float64),
        }
        for code in range(len(MODALITIES)):
            mask = self.modality == code
            for name, values in columns.items():
                self.prefix[(code, name)] = np.concatenate([[0.0], np.cumsum(np.where(mask, values, 0.0))])

    def index(self, t_s: float) -> int:
        return int(np.searchsorted(self.arrival, t_s, side="right"))

    def counts(self, now_s: float, bin_s: float, span_s: float) -> tuple[float, ...] | None:
        """Requests per ``bin_s`` bin over the last ``span_s`` before ``now_s`` (whole bins only), oldest first."""
        k = int(min(span_s, now_s) // bin_s)
        if k < 2:
            return None
        edges = now_s - bin_s * np.arange(k, -1, -1)
        return tuple(float(x) for x in np.diff(np.searchsorted(self.arrival, edges, side="right")))

    def workload(self, pool: _Pool, lo_s: float, hi_s: float) -> tuple[WorkloadClass, ...]:
        """Per-class rates, mean features and observed mean service time over ``(lo_s, hi_s]``: what the operator's
        reading has (``metrics_parse``), and nothing more. No per-class service-time SCV: the operator reads none
        (Triton exports no per-class second moment), so the policy sizes with ``default_service_scv`` here as in
        a cluster. Until 6 Dec 2026 this gave the policy the SCV of the last 5 minutes' completed requests."""
        a, b = self.index(lo_s), self.index(hi_s)
        window = hi_s - lo_s
        # service times of the requests that COMPLETED in the window, whenever they arrived (Triton records a
        # request's compute time when it completes); requests that arrived in it and completed are biased short
        sa = self.index(lo_s - _LOOKBACK_S)
        finish = pool.finish[sa:b]
        done_here = np.isfinite(finish) & (finish > lo_s) & (finish <= hi_s)
        classes = []
        for code, modality in enumerate(MODALITIES):
            count = self.prefix[(code, "count")][b] - self.prefix[(code, "count")][a]
            if count <= 0:
                continue

            def mean(name: str) -> float:
                return float((self.prefix[(code, name)][b] - self.prefix[(code, name)][a]) / count)

            served_here = self.service_ms[sa:b][done_here & (self.modality[sa:b] == code)]
            observed_ms = float(served_here.mean()) if served_here.size >= 10 else None
            classes.append(
                WorkloadClass(
                    modality=modality,
                    rate_rps=float(count / window),
                    mean_image_pixels=mean("pixels"),
                    mean_image_count=mean("images"),
                    mean_text_tokens=mean("tokens"),
                    observed_service_ms=observed_ms,
                )
            )
        return tuple(classes)

    def latency_p95_ms(self, pool: _Pool, lo_s: float, hi_s: float) -> float | None:
        a, b = self.index(lo_s - _LOOKBACK_S), self.index(hi_s)
        finish = pool.finish[a:b]
        mask = np.isfinite(finish) & (finish > lo_s) & (finish <= hi_s)
        if not mask.any():
            return None
        return float(np.percentile((finish[mask] - self.arrival[a:b][mask]) * 1000.0, 95))

    def utilization(self, pool: _Pool, lo_s: float, hi_s: float) -> float | None:
        capacity = pool.ready_slot_seconds(lo_s, hi_s)
        if capacity <= 0:
            return None
        a, b = self.index(lo_s - _LOOKBACK_S), min(pool.next_i, self.index(hi_s))
        start, finish = pool.start[a:b], pool.finish[a:b]
        busy = np.clip(np.minimum(finish, hi_s) - np.maximum(start, lo_s), 0.0, None).sum()
        return float(min(1.0, busy / capacity))

    def in_flight_now(self, pool: _Pool, now_s: float) -> tuple[float, float | None, float, float | None]:
        """Requests in flight at ``now_s`` (arrived, not finished) with their mean age, and those executing (started,
        not finished) with their mean time in execution, ms: ``Observation``'s in-flight fields."""
        b = self.index(now_s)
        finish, start, arrival = pool.finish[:b], pool.start[:b], self.arrival[:b]
        waiting = ~(finish <= now_s)  # NaN (not yet assigned a slot) is in flight
        running = waiting & (start <= now_s)
        n, m = int(waiting.sum()), int(running.sum())
        return (float(n), float((now_s - arrival[waiting]).mean() * 1000.0) if n else None,
                float(m), float((now_s - start[running]).mean() * 1000.0) if m else None)

    def in_flight(self, pool: _Pool, lo_s: float, hi_s: float) -> float:
        a, b = self.index(lo_s - _LOOKBACK_S), self.index(hi_s)
        finish = np.where(np.isfinite(pool.finish[a:b]), pool.finish[a:b], hi_s)
        overlap = np.clip(np.minimum(finish, hi_s) - np.maximum(self.arrival[a:b], lo_s), 0.0, None)
        return float(overlap.sum() / (hi_s - lo_s))


Decider = Callable[[_Pool, float], int]


def _simulate(
    trace: Trace,
    service_ms: NDArray[np.float64],
    config: SimulationConfig,
    initial_replicas: int,
    decide: Decider,
    decision_times_s: NDArray[np.float64],
    startup_delay_s: float | Callable[[], float],
) -> tuple[_Pool, list[int], list[int]]:
    """Replay the trace; ``decide(pool, t)`` returns the replica count at each decision time."""
    pool = _Pool(trace.arrival_s, service_ms / 1000.0, config.slots_per_replica)
    for _ in range(initial_replicas):
        pool.add(0.0, 0.0)
    desired_log: list[int] = []
    ready_log: list[int] = []
    for d in decision_times_s:
        pool.advance(d)
        desired = decide(pool, float(d))
        pool.resize(desired, float(d), startup_delay_s)
        desired_log.append(len(pool.active))
        ready_log.append(pool.ready_count(float(d)))
    pool.advance(math.inf)
    return pool, desired_log, ready_log


def _slo_minutes(trace: Trace, finish_s: NDArray[np.float64], target_ms: float, end_s: float
                 ) -> tuple[float, NDArray[np.float64]]:
    """``(SLO-minutes fraction, p95 per minute by arrival, ms)`` of requests answered at ``finish_s`` (NaN: never)."""
    n_minutes = max(1, math.ceil(end_s / 60.0))
    latency_ms = np.where(np.isfinite(finish_s), (finish_s - trace.arrival_s) * 1000.0, np.inf)
    minute = np.minimum((trace.arrival_s // 60.0).astype(np.int64), n_minutes - 1)
    p95 = np.zeros(n_minutes)
    order = np.argsort(minute, kind="stable")
    bounds = np.searchsorted(minute[order], np.arange(n_minutes + 1))
    for m in range(n_minutes):
        chunk = latency_ms[order[bounds[m] : bounds[m + 1]]]
        p95[m] = np.percentile(chunk, 95) if chunk.size else 0.0
    return float((p95 <= target_ms).mean()), p95


BURST_RATIO = 2.0
"""A minute is a burst minute when its arrivals reach this many times the mean of the minutes before it
(:func:`burst_minutes`; KPA's panic threshold, 200 %)."""
BURST_LOOKBACK_MIN = 5
"""How many minutes before it a burst minute is compared with."""


def burst_minutes(arrival_s: NDArray[np.float64], end_s: float, ratio: float = BURST_RATIO,
                  lookback_min: int = BURST_LOOKBACK_MIN) -> NDArray[np.bool_]:
    """Which minutes (by arrival, shape ``(ceil(end_s / 60),)``) are burst minutes: at least one arrival and at
    least ``ratio`` x the mean arrivals per minute of the ``lookback_min`` minutes before (fewer at the start; the
    first minute has none before it and is not a burst). The onset of traffic after idle minutes is one, and so
    are the next minutes while the look-back still holds the idle ones."""
    n_minutes = max(1, math.ceil(end_s / 60.0))
    minute = np.minimum((np.asarray(arrival_s) // 60.0).astype(np.int64), n_minutes - 1)
    counts = np.bincount(minute, minlength=n_minutes).astype(np.float64)
    out = np.zeros(n_minutes, dtype=bool)
    for m in range(1, n_minutes):
        before = counts[max(0, m - lookback_min):m]
        out[m] = counts[m] > 0 and counts[m] >= ratio * float(before.mean())
    return out


def _over_slo(trace: Trace, finish_s: NDArray[np.float64], target_ms: float, end_s: float) -> tuple[int, int, int]:
    """``(requests over the p95 target or unfinished, those among them that arrived in a burst minute,
    burst minutes)`` of requests answered at ``finish_s`` (NaN: never)."""
    latency_ms = np.where(np.isfinite(finish_s), (finish_s - trace.arrival_s) * 1000.0, np.inf)
    over = latency_ms > target_ms
    bursts = burst_minutes(trace.arrival_s, end_s)
    minute = np.minimum((trace.arrival_s // 60.0).astype(np.int64), bursts.shape[0] - 1)
    return int(over.sum()), int((over & bursts[minute]).sum()), int(bursts.sum())


def _reversals(series: list[int]) -> int:
    steps = [b - a for a, b in zip(series, series[1:], strict=False) if b != a]
    return sum(1 for x, y in zip(steps, steps[1:], strict=False) if (x > 0) != (y > 0))


def train_default_model(config: SimulationConfig) -> ServiceTimeRegressor:
    """The predictive policy's model: the additive regressor fitted on a synthetic profile of ``config.law``."""
    profile = generate_profile(config.profile_requests, config.law, random_state=config.random_state + 1)
    return ServiceTimeRegressor(random_state=config.random_state).fit(profile)


def oracle_schedule(
    trace: Trace, service_ms: NDArray[np.float64], config: SimulationConfig, end_s: float
) -> tuple[list[int], _Pool]:
    """Least replicas per minute meeting the p95 target for that minute's arrivals (perfect knowledge).

    Minutes are searched in order; each replays its arrivals (exact service times, the queue left by the chosen
    earlier minutes, replicas ready at once and kept until the minute's requests have started) with a binary
    search over the replica count.

    Returns:
        ``(replicas per minute, the replayed pool)``; the schedule has length ``ceil(end_s / 60)``. Where even
        ``max_replicas`` misses the target (a request longer than the target among the minute's few), it holds the
        least count whose p95 is as low as ``max_replicas``' (more replicas would not help).
    """
    n_minutes = max(1, math.ceil(end_s / 60.0))
    pool = _Pool(trace.arrival_s, service_ms / 1000.0, config.slots_per_replica)
    schedule: list[int] = []
    index = np.searchsorted(trace.arrival_s, np.arange(n_minutes + 1) * 60.0, side="left")
    index[-1] = len(trace)
    for m in range(n_minutes):
        lo_i, hi_i = int(index[m]), int(index[m + 1])
        t0 = m * 60.0
        work_s = float(service_ms[lo_i:hi_i].sum()) / 1000.0
        lower = max(config.min_replicas, math.ceil(work_s / 60.0 / config.slots_per_replica))

        def p95_at(c: int) -> tuple[float, _Pool]:
            candidate = pool.copy()
            candidate.resize(c, t0, 0.0)
            candidate.advance(math.inf, stop_index=hi_i)
            latency = (candidate.finish[lo_i:hi_i] - trace.arrival_s[lo_i:hi_i]) * 1000.0
            return (float(np.percentile(latency, 95)) if latency.size else 0.0), candidate

        def trial(c: int) -> tuple[bool, _Pool]:
            p95, candidate = p95_at(c)
            return p95 <= goal_ms, candidate

        goal_ms = config.target_p95_ms
        lower = min(lower, config.max_replicas)
        ok, chosen = trial(lower)
        best = lower
        if not ok:
            p95_max, at_max = p95_at(config.max_replicas)
            best, chosen = config.max_replicas, at_max
            # even max_replicas misses the target (a request longer than it): the least count as good as max
            goal_ms = max(goal_ms, p95_max + 1e-6)
            bad = lower
            while best - bad > 1:
                mid = (bad + best) // 2
                ok_mid, at_mid = trial(mid)
                if ok_mid:
                    best, chosen = mid, at_mid
                else:
                    bad = mid
        # keep the chosen replay's assignments (trials share the start/finish arrays, so replay it last)
        _, chosen = trial(best)
        pool = chosen
        schedule.append(best)
    return schedule, pool


def _predictive_decider(
    config: SimulationConfig, model: ServiceTimePredictor, metrics: _Metrics, log: list[Decision],
    extra: Callable[[float], Mapping[str, Any]] | None = None,
) -> Decider:
    """The predictive policy's decider; ``extra(now_s)``: more ``Observation`` fields (a staged front's view of its
    image encoder pool, ``simulate_staged``); None = none (the one-piece pool)."""
    policy = config.scaling_policy(ScalingMode.PREDICTIVE)
    state = ScalerState()

    def decide(pool: _Pool, now_s: float) -> int:
        nonlocal state
        lo = max(0.0, now_s - config.metrics_window_s)
        recent_lo = max(0.0, now_s - config.recent_window_s)
        obs = Observation(
            observed_at=_EPOCH + timedelta(seconds=now_s),
            current_replicas=len(pool.active),
            ready_replicas=pool.ready_count(now_s),
            workload=metrics.workload(pool, lo, now_s),
            recent_workload=metrics.workload(pool, recent_lo, now_s),
            recent_window_s=now_s - recent_lo,
            p95_latency_ms=metrics.latency_p95_ms(pool, lo, now_s),
            queued_requests=float(metrics.index(now_s) - pool.next_i),
            utilization_ratio=metrics.utilization(pool, lo, now_s),
            window_s=now_s - lo,
            arrival_counts=metrics.counts(now_s, config.count_bin_s, config.count_span_s),
            count_bin_s=config.count_bin_s,
        )
        in_flight, in_flight_age_ms, executing, executing_age_ms = metrics.in_flight_now(pool, now_s)
        obs = replace(obs, in_flight_requests=in_flight, in_flight_age_ms=in_flight_age_ms,
                      executing_requests=executing, executing_age_ms=executing_age_ms)
        if extra is not None:
            obs = replace(obs, **extra(now_s))
        decision = recommend(obs, policy, state, model, _EPOCH + timedelta(seconds=now_s))
        state = decision.state
        log.append(decision)
        return decision.desired_replicas if decision.valid else len(pool.active)

    return decide


def _utilization_decider(config: SimulationConfig, metrics: _Metrics) -> Decider:
    policy = config.scaling_policy(ScalingMode.UTILIZATION)
    state = ScalerState()

    def decide(pool: _Pool, now_s: float) -> int:
        nonlocal state
        lo = max(0.0, now_s - config.metrics_window_s)
        obs = Observation(
            observed_at=_EPOCH + timedelta(seconds=now_s),
            current_replicas=len(pool.active),
            ready_replicas=pool.ready_count(now_s),
            utilization_ratio=metrics.utilization(pool, lo, now_s),
            window_s=now_s - lo,
        )
        decision = recommend(obs, policy, state, None, _EPOCH + timedelta(seconds=now_s))
        state = decision.state
        return decision.desired_replicas if decision.valid else len(pool.active)

    return decide


def _concurrency_decider(config: SimulationConfig, metrics: _Metrics) -> Decider:
    policy = replace(
        config.scaling_policy(ScalingMode.UTILIZATION), tolerance_percent=0.0, scale_down_stabilization_s=0.0
    )
    state = ScalerState()
    panic_until_s = -math.inf
    per_replica = config.slots_per_replica * config.kpa_target_utilization_ratio

    def decide(pool: _Pool, now_s: float) -> int:
        nonlocal state, panic_until_s
        current = len(pool.active)
        ready = pool.ready_count(now_s)
        stable = metrics.in_flight(pool, max(0.0, now_s - config.kpa_stable_window_s), now_s)
        panic = metrics.in_flight(pool, max(0.0, now_s - config.kpa_panic_window_s), now_s)
        need = math.ceil(stable / per_replica - 1e-9)
        need_panic = math.ceil(panic / per_replica - 1e-9)
        if need_panic >= 2 * max(ready, 1):
            panic_until_s = now_s + config.kpa_stable_window_s
        in_panic = now_s < panic_until_s
        if in_panic:
            need = max(need, need_panic, current)  # KPA never scales down in panic mode
        obs = Observation(observed_at=_EPOCH + timedelta(seconds=now_s), current_replicas=current, ready_replicas=ready)
        reason = Reason.SCALE_UP_FOR_UTILIZATION if need > current else Reason.SCALE_DOWN_FOR_UTILIZATION
        features = {"in_flight_stable": stable, "in_flight_panic": panic, "panic": float(in_panic)}
        decision = finalize_recommendation(
            need, reason, f"in-flight {stable:.1f} / {per_replica:.2f} per replica", features, obs, policy, state,
            _EPOCH + timedelta(seconds=now_s), ScalingMode.UTILIZATION,
        )
        state = decision.state
        return decision.desired_replicas

    return decide


def residual_sigma(model: ServiceTimePredictor, config: SimulationConfig) -> float:
    """Spread of the regressor's residuals: std of ``log(observed / predicted)`` on a held-out synthetic profile of
    ``config.law`` (another seed than the training profile)."""
    profile = generate_profile(config.profile_requests, config.law, random_state=config.random_state + 11)
    x = features_from_columns(profile["image_pixels"], profile["image_count"], profile["text_tokens"],
                              profile["batch_size"], profile["modality"])
    predicted = np.maximum(np.asarray(model.predict(x), dtype=np.float64), 1e-6)
    return float(np.std(np.log(np.asarray(profile["service_ms"]) / predicted)))


def service_times_ms(trace: Trace, config: SimulationConfig, model: ServiceTimePredictor | None = None
                     ) -> NDArray[np.float64]:
    """True service time of every request, ms (seeded): the trace's own; else with ``service_source="regressor"``
    ``model``'s prediction times a mean-one lognormal with :func:`residual_sigma`; else a draw from the law.

    Raises:
        ValueError: ``service_source="regressor"`` without a model.
    """
    if trace.service_ms is not None:
        return np.asarray(trace.service_ms, dtype=np.float64)
    rng = np.random.default_rng(config.random_state)
    if config.service_source == "regressor":
        if model is None:
            raise ValueError("service_source='regressor' needs the regressor (model)")
        sigma = residual_sigma(model, config)
        predicted = np.maximum(np.asarray(model.predict(trace.features()), dtype=np.float64), 1e-3)
        return cast(NDArray[np.float64], predicted * rng.lognormal(-0.5 * sigma * sigma, sigma, size=predicted.shape[0])
                    * config.true_service_scale)
    return config.law.sample_ms(trace.features(), rng) * config.true_service_scale


def replay_fixed(trace: Trace, replicas: int, config: SimulationConfig = SimulationConfig()) -> NDArray[np.float64]:
    """Response time of every request (ms, shape ``(n,)``) with a fixed pool of ready ``replicas`` (no decisions).

    Useful to check the simulator against queueing theory and to size fixed pools.
    """
    if replicas < 1:
        raise ValueError("replicas must be >= 1")
    pool = _Pool(trace.arrival_s, service_times_ms(trace, config) / 1000.0, config.slots_per_replica)
    for _ in range(replicas):
        pool.add(0.0, 0.0)
    pool.advance(math.inf)
    return (pool.finish - trace.arrival_s) * 1000.0


def trace_end_s(trace: Trace) -> float:
    """Where a replay of ``trace`` ends: its last arrival's minute's end, at least one minute (a trace whose arrivals
    are all at 0 is replayed over its first minute)."""
    return max(1, math.ceil(trace.duration_s / 60.0)) * 60.0


def run_simulation(
    trace: Trace, config: SimulationConfig = SimulationConfig(), model: ServiceTimePredictor | None = None
) -> dict[str, dict[str, Any]]:
    """Replay ``trace`` under each policy of ``config.policies`` and measure it.

    Args:
        trace: Requests in arrival order.
        config: Pool, policy and law parameters.
        model: Predictor for the predictive policy; None = :func:`train_default_model`.
    Returns:
        ``{policy: {"slo_minutes_fraction": float, "replica_hours": float, "mean_replicas": float,
        "p95_latency_ms": float, "direction_reversals": int, "decision_times_s": [...],
        "desired_replicas": [...], "ready_replicas": [...], "minute_p95_ms": [...], "requests_over_slo": int,
        "burst_requests_over_slo": int, "burst_minutes": int}}`` (requests whose response time exceeds the p95
        target or that never finished, in all minutes and in :func:`burst_minutes`); the oracle's decision series is
        per minute; predictive also has ``"reasons": {reason: decisions}``.
    Raises:
        ValueError: an empty trace.
    """
    if len(trace) == 0:
        raise ValueError("cannot simulate an empty trace")
    if model is None and ("predictive" in config.policies or config.service_source == "regressor"):
        model = train_default_model(config)
    service = service_times_ms(trace, config, model)
    end_s = trace_end_s(trace)
    decision_times = np.arange(config.decision_interval_s, end_s + 1e-9, config.decision_interval_s)
    metrics = _Metrics(trace, service)
    schedule: list[int] | None = None
    if "oracle" in config.policies or config.initial_replicas is None:
        schedule, oracle_pool = oracle_schedule(trace, service, config, end_s)
    initial = config.initial_replicas if config.initial_replicas is not None else (schedule or [1])[0]
    results: dict[str, dict[str, Any]] = {}
    decider: Decider
    for name in config.policies:
        times = decision_times
        start = initial
        if name == "oracle":
            assert schedule is not None
            pool, times, start = oracle_pool, np.arange(1, len(schedule)) * 60.0, schedule[0]
            desired, ready = schedule[1:], schedule[1:]
        elif name == "fixed":
            assert config.fixed_replicas is not None
            fixed = config.fixed_replicas
            start, times = fixed, np.zeros(0)
            decider = lambda pool, now_s: fixed  # noqa: E731 - never called: no decision times
        elif name == "predictive":
            assert model is not None
            decisions: list[Decision] = []
            decider = _predictive_decider(config, model, metrics, decisions)
        elif name == "utilization":
            decider = _utilization_decider(config, metrics)
        elif name == "concurrency":
            decider = _concurrency_decider(config, metrics)
        if name != "oracle":
            pool, desired, ready = _simulate(trace, service, config, start, decider, times, config.startup_delays())
        fraction, minute_p95 = _slo_minutes(trace, pool.finish, config.target_p95_ms, end_s)
        over, over_in_bursts, n_bursts = _over_slo(trace, pool.finish, config.target_p95_ms, end_s)
        latency = (pool.finish - trace.arrival_s) * 1000.0
        replica_s = pool.replica_seconds(end_s)
        results[name] = {
            "slo_minutes_fraction": fraction,
            "replica_hours": replica_s / 3600.0,
            "mean_replicas": replica_s / end_s,
            "p95_latency_ms": float(np.percentile(np.where(np.isfinite(latency), latency, np.inf), 95)),
            "direction_reversals": _reversals([start] + desired),
            "decision_times_s": [float(t) for t in times],
            "desired_replicas": desired,
            "ready_replicas": ready,
            "minute_p95_ms": [float(x) for x in minute_p95],
            "requests_over_slo": over,
            "burst_requests_over_slo": over_in_bursts,
            "burst_minutes": n_bursts,
        }
        if name == "predictive":
            reasons: dict[str, int] = {}
            for decision in decisions:
                reasons[decision.reason.value] = reasons.get(decision.reason.value, 0) + 1
            results[name]["reasons"] = reasons
    return results


SWEEP_GRID: dict[str, tuple[float, ...]] = {
    "predictive": (60.0, 70.0, 80.0, 90.0, 95.0),
    "utilization": (30.0, 40.0, 50.0, 60.0, 70.0, 80.0, 90.0),
    "concurrency": (0.3, 0.5, 0.7, 0.9, 1.2, 1.6),
}
"""Knob values swept per family: predictive and HPA-like ``targetUtilizationPercent``, KPA-like target in-flight
requests per slot. The fixed pool sweeps every size from the mean load to the oracle's largest minute + 2."""
SWEEP_SLO_TARGET = 0.95
"""SLO-minutes fraction the fixed family's default (the smallest pool reaching it) is chosen for."""


def _knob(config: SimulationConfig, family: str, value: float) -> SimulationConfig:
    if family == "predictive":
        return replace(config, predictive_target_utilization_percent=value, policies=("predictive",))
    if family == "utilization":
        return replace(config, hpa_target_utilization_percent=value, policies=("utilization",))
    if family == "concurrency":
        return replace(config, kpa_target_utilization_ratio=value, policies=("concurrency",))
    return replace(config, fixed_replicas=int(value), policies=("fixed",))


def run_sweep(trace: Trace, config: SimulationConfig = SimulationConfig(), model: ServiceTimePredictor | None = None,
              grid: dict[str, tuple[float, ...]] | None = None) -> dict[str, Any]:
    """Sweep each family's knob on one trace (the Pareto benchmark's data; ``modalscale simulate --sweep``).

    Args:
        trace: Requests in arrival order.
        config: Shared settings; its own knob values are each family's default (shipped) setting.
        model: The predictive policy's regressor; None = :func:`train_default_model`.
        grid: Knob values per family (default :data:`SWEEP_GRID`); each family's default is added when missing.
    Returns:
        ``{"trace": name, "points": [{"policy", "param", "default", "slo_minutes_fraction", "replica_hours",
        "requests_over_slo", "burst_requests_over_slo"}, ...]}``
        with exactly one ``default: true`` point per policy: predictive, utilization, concurrency at the
        config's settings, fixed at the smallest pool reaching :data:`SWEEP_SLO_TARGET` SLO-minutes (the largest
        swept when none does), oracle (``param`` null).
    """
    grid = dict(SWEEP_GRID if grid is None else grid)
    if model is None:
        model = train_default_model(config)
    defaults = {"predictive": config.predictive_target_utilization_percent,
                "utilization": config.hpa_target_utilization_percent,
                "concurrency": config.kpa_target_utilization_ratio}
    points: list[dict[str, Any]] = []

    def point(policy: str, param: float | None, default: bool, result: dict[str, Any]) -> dict[str, Any]:
        return {"policy": policy, "param": param, "default": default,
                "slo_minutes_fraction": float(result["slo_minutes_fraction"]),
                "replica_hours": float(result["replica_hours"]),
                "requests_over_slo": int(result["requests_over_slo"]),
                "burst_requests_over_slo": int(result["burst_requests_over_slo"])}

    oracle = run_simulation(trace, replace(config, policies=("oracle",)), model)["oracle"]
    points.append(point("oracle", None, True, oracle))
    for family, default in defaults.items():
        values = sorted(set(grid.get(family, ())) | {default})
        for value in values:
            result = run_simulation(trace, _knob(config, family, value), model)[family]
            points.append(point(family, float(value), value == default, result))
    service = service_times_ms(trace, config, model)
    lo = max(1, math.floor(float(service.sum()) / 1000.0 / max(trace.duration_s, 1.0) / config.slots_per_replica))
    hi = max(lo, max(oracle["desired_replicas"], default=1) + 2)
    fixed = []
    for size in range(lo, hi + 1):
        result = run_simulation(trace, _knob(config, "fixed", size), model)["fixed"]
        fixed.append(point("fixed", float(size), False, result))
    reaching = [p for p in fixed if p["slo_minutes_fraction"] >= SWEEP_SLO_TARGET]
    (reaching[0] if reaching else fixed[-1])["default"] = True
    points.extend(fixed)
    return {"trace": trace.name, "points": points}
