"""The replica policy: one pure decision per InferenceService and decision interval.

``recommend(observation, policy, state, model, now)`` turns observed traffic into a replica count:

1. Predictive mode: offered work ``sum_k rate_k * predicted_service_ms_k`` (model prediction on each workload
   class's mean features, times a service scale calibrated online from observed mean service times) -> least
   replicas meeting the p95 target (queueing p95 times a latency scale calibrated online from observed p95) and
   the utilization target (:func:`modalscale.autoscaler.queueing.replicas_for_slo`), with the arrival SCV measured
   from per-bin request counts (:func:`modalscale.autoscaler.arrivals.arrival_scv`; Poisson without counts; level
   shifts left out). An observed mean service time outside the calibrator's range of the model's is sized as
   observed, in every class and window alike (a model that far off is not trusted for its feature dependence
   either); executing requests count at their age, a lower bound (:func:`_observed_service`). The rules, each
   named by the decision's reason when it sets the need:

   - ``ScaleUpForSLO`` / ``ScaleDownIdle`` / ``Steady``: the stable (60 s) window sized as above;
   - ``ScaleUpForBurst``: the recent (15 s) window's load exceeds the stable one by more than 3 standard errors of
     compound-Poisson noise, so the recent window is sized instead;
   - ``ScaleUpForPanic`` (KPA's panic mode): the recent window alone needs at least ``panic_threshold_ratio`` x
     the ready replicas; it is sized at once, whatever the noise test says (neither recent-window rule applies
     when the p95 target is at least the start-up time ``forecast_horizon_s``: the queue rules are in time);
   - ``ScaleUpForForecast``: the forecast demand over ``forecast_horizon_s`` (a new replica's start-up time) less
     the p95 target (a request may wait that long for a replica asked for when it arrived; no forecast when the
     target is at least the start-up time) needs more than the current load
     (:func:`modalscale.autoscaler.arrivals.forecast_rate_rps`, its peak rates taken over spans as long as the p95
     target); replicas are started before the demand arrives;
   - ``ScaleDownForForecast``: below the current count, the need is never lower than what the forecast demand
     needs, so a scale-down goes only as far as the forecast allows (and the scale-down window still applies);
   - ``ScaleUpForBacklog``: queued requests must drain within ``backlog_drain_s``;
   - ``ScaleUpForObservedQueue``: observation contradicts the model (a persistent growing queue, in-flight
     requests older than the target, or observed p95 above 2x the target while the model says the replicas
     suffice): KPA's ``ceil(in_flight / (slots * utilization))``, or fewer when a service time timed on completed
     requests drains the requests in flight within ``backlog_drain_s`` (:func:`_in_flight_drain`); it only raises
     the need (:func:`_observed_queue`);
   - ``SLOUnattainable``: service time alone misses the target; sized for the utilization target.

   Utilization mode (and Predictive without a model): the HPA rule ``ceil(ready * utilization / target)``; for a
   staged service's image encoder pool (``ScalingPolicy.standing_queue_rule``) raised by the observed-queue rule
   (``ScaleUpForObservedQueue``, :func:`_standing_queue`): the busy fraction cannot read above 100 %, so a queue
   that stands at two samples in a row (decisions that read new scrapes; in flight above 2x the ready slots, more
   than the target's worth of arrivals) is sized from the requests in flight as above. Fixed mode:
   ``spec.scaling.replicas``.
2. Tolerance band: no change while ``|need / current - 1| <= tolerance`` (HPA).
3. Stabilization windows with HPA semantics: the recommendation is stored; scale-up goes to the MIN of the
   recommendations in the scale-up window, scale-down to the MAX of those in the scale-down window.
4. At most ``max_step_replicas`` change per decision; then ``[min_replicas, max_replicas]``.
5. The BudgetPolicy cap last; it is never exceeded (it wins over ``min_replicas``).

Replicas still starting count in ``current_replicas`` (the /scale target) but not in ``ready_replicas``. The
predictive need depends on load, not on current replicas, so starting replicas never trigger another scale-up;
the utilization rule follows HPA for unready pods: counted idle when scaling up, at the target when scaling
down, and no change when that flips the direction.

Missing or stale metrics give ``valid=False`` and hold the current count (the last applied decision): no data
never scales down. Stale is older than ``max_metrics_age_s`` or dated more than ``max_future_skew_s`` ahead of
``now`` (clock skew: a frozen sample dated ahead must not read fresh). A non-finite number (Prometheus answers
``NaN`` or ``+-Inf`` for a rate over no samples or a division by zero) is missing data, never zero traffic:
:class:`WorkloadClass` rejects one, and :class:`Observation` turns a non-finite utilization, p95 or queue length
into None (unknown). Partly missing metrics (fewer scrape
targets answered than were expected: one per ready replica when each pod is a target, ``Observation.targets_up``
vs ``targets_expected``) read low: the need computed from them is a lower bound, so it may scale up but never
down (``HeldPartialMetrics``), as HPA skips scale-down while a metric is missing. Spec bounds and the budget cap
still apply (they are not metrics); when they force a change, the decision is valid.

An empty history (status lost, or a switch from Fixed mode, which keeps no state) is seeded with the current
replica count at ``now``, as HPA seeds a new autoscaler's recommendations, so the scale-down window applies to
the first decisions instead of letting them scale down at once.

Scale to zero (``min_replicas == 0``, legal only behind the request gateway): the rules above never go below 1
replica; a separate idle step (:func:`_idle_step`) takes the count to 0 (``ScaleDownToZero``) once decisions whose
metrics were read and showed no request at all (no arrival in the stable and recent windows, nothing queued or in
flight, every expected scrape target answering, fresh) have run for ``scale_to_zero_after_s`` without a break;
any missing, partial, stale or non-zero reading restarts the count (Knative's scale-to-zero grace, on evidence
only). At 0 replicas there is no pod to measure: the decision holds 0 (``IdleAtZero``) until the gateway asks for a
replica; :func:`activate` then decides 0 -> 1 (``Activated``) at once, outside the decision interval.

Reasons are the CamelCase constants of :class:`Reason`; the decision also returns the features behind it.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, NamedTuple, Protocol

import numpy as np
from numpy.typing import NDArray

from modalscale.api.conditions import ScalingReason
from modalscale.api.inferenceservice import (
    START_UP_HORIZON_S,
    ImageEncoderStageSpec,
    RuntimeSpec,
    ScalingSpec,
    parse_spec,
)
from modalscale.api.isvc_status import ScalerState
from modalscale.autoscaler.arrivals import FORECASTERS, Forecast, arrival_scv, forecast_rate_rps, level_shifts
from modalscale.autoscaler.calibration import Calibrator
from modalscale.autoscaler.features import MODALITIES, Modality, features_from_columns
from modalscale.autoscaler.queueing import (
    offered_load_erlangs,
    replicas_for_slo,
    response_quantile_ms,
    slo_attainable,
)

_CALIBRATION_MAX_UTILIZATION = 0.95
"""Latency calibration is skipped above this predicted utilization of the ready slots (p95 is too sensitive there)."""
_BURST_Z = 3.0
"""The short window overrides the stable one when its load exceeds it by this many standard errors."""


class ScalingMode(enum.StrEnum):
    """``spec.scaling.mode``."""

    PREDICTIVE = "Predictive"
    UTILIZATION = "Utilization"
    FIXED = "Fixed"


Reason = ScalingReason
"""Why a decision came out as it did (CamelCase, usable as a condition or Event reason): the vocabulary is defined in
:class:`modalscale.api.conditions.ScalingReason`, with every other reason, and named ``Reason`` here."""


class ServiceTimePredictor(Protocol):
    """Anything with ``predict(X (n, len(FEATURES))) -> service ms (n,)``, e.g. ``ServiceTimeRegressor``."""

    def predict(self, X: NDArray[np.float64]) -> NDArray[np.float64]: ...


@dataclass(frozen=True, slots=True)
class ScalingPolicy:
    """The replica policy of an InferenceService: its typed ``spec.scaling`` (:meth:`from_typed`) plus internals.

    The dataclass's own defaults of ``target_utilization_percent``, ``scale_down_stabilization_s`` and
    ``max_step_replicas`` (70, 300, 4) are Utilization mode's, whatever ``mode`` says: a service's policy comes from
    its spec (:meth:`from_spec`, :meth:`from_typed`), where an unset field takes its mode's value
    (``modalscale.api.inferenceservice.SCALING_MODE_DEFAULTS``: Predictive 90, 60, 32).

    Attributes:
        mode: Predictive, Utilization or Fixed.
        replicas: Replicas in Fixed mode (``spec.scaling.replicas``); None otherwise.
        min_replicas: Lower bound (``minReplicas``).
        max_replicas: Upper bound (``maxReplicas``).
        target_p95_latency_ms: p95 response-time target, ms (``targetP95LatencyMilliseconds``).
        target_utilization_percent: Highest slot utilization to plan for, 1..100 (``targetUtilizationPercent``).
        tolerance_percent: No change while need/current is within this band, 0..50 (``tolerancePercent``).
        scale_up_stabilization_s: Scale-up window, s (``scaleUpStabilizationSeconds``).
        scale_down_stabilization_s: Scale-down window, s (``scaleDownStabilizationSeconds``).
        max_step_replicas: Largest change per decision (``maxStepReplicas``).
        decision_interval_s: Seconds between decisions (``decisionIntervalSeconds``).
        slots_per_replica: Concurrent executions per replica (``spec.runtime.instanceCount``).
        metrics_max_age_s: Metrics older than this are stale; None = ``max(60, 3 * decision_interval_s)``.
        max_future_skew_s: Metrics dated more than this ahead of ``now`` are stale too, s (clock skew between
            the exporter, Prometheus and the operator: a sample from the future is not fresh, and a frozen one
            dated ahead would otherwise read fresh for as long as it is ahead).
        default_service_scv: Within-class service-time SCV when the observation has none.
        latency_quantile: Quantile of the latency target (0.95).
        backlog_drain_s: Predictive mode sizes for draining queued requests within this many seconds.
        calibrator: Online correction of the model's service times.
        burst_aware: Size with the arrival SCV measured from ``Observation.arrival_counts`` (False: Poisson).
        forecaster: Demand forecast rule (``naive``, ``holt``, ``peak``; see :mod:`modalscale.autoscaler.arrivals`);
            None disables forecasting.
        forecast_horizon_s: How far ahead demand is forecast: the time a new replica takes to serve, s.
        forecast_window_s: Look-back of the ``peak`` forecaster, s.
        forecast_quantile: Quantile of the recent per-bin rates the ``peak`` forecaster provisions for.
        panic_threshold_ratio: KPA's panic threshold: the recent window alone needs this many times the ready
            replicas (KPA default 2.0 = 200 %).
        scale_to_zero_after_s: Scale to 0 after this long without a request, s (``scaleToZeroAfterSeconds``; only
            with ``min_replicas == 0``); None = never by idleness.
        standing_queue_rule: Utilization mode also applies the observed-queue rule's standing-queue check
            (:func:`_standing_queue`): True for a staged service's image encoder pool (:func:`image_encoder_policy`);
            False keeps a one-piece service's Utilization mode the plain HPA rule a user of the HPA expects.
    """

    mode: ScalingMode = ScalingMode.PREDICTIVE
    replicas: int | None = None
    min_replicas: int = 1
    max_replicas: int = 10
    target_p95_latency_ms: float = 500.0
    target_utilization_percent: float = 70.0
    tolerance_percent: float = 10.0
    scale_up_stabilization_s: float = 0.0
    scale_down_stabilization_s: float = 300.0
    max_step_replicas: int = 4
    decision_interval_s: float = 15.0
    slots_per_replica: int = 1
    metrics_max_age_s: float | None = None
    max_future_skew_s: float = 5.0
    default_service_scv: float = 1.0
    latency_quantile: float = 0.95
    backlog_drain_s: float = 60.0
    calibrator: Calibrator = field(default_factory=Calibrator)
    burst_aware: bool = True
    forecaster: str | None = "peak"
    forecast_horizon_s: float = float(START_UP_HORIZON_S)
    forecast_window_s: float = 300.0
    forecast_quantile: float = 0.95
    panic_threshold_ratio: float = 2.0
    standing_queue_rule: bool = False
    scale_to_zero_after_s: float | None = None

    def __post_init__(self) -> None:
        checks = [
            (self.min_replicas >= 0, "min_replicas must be >= 0"),
            (self.max_replicas >= 1, "max_replicas must be >= 1"),
            (self.min_replicas <= self.max_replicas, "min_replicas must be <= max_replicas"),
            (self.target_p95_latency_ms > 0, "target_p95_latency_ms must be > 0"),
            (0 < self.target_utilization_percent <= 100, "target_utilization_percent must be in (0, 100]"),
            (0 <= self.tolerance_percent < 100, "tolerance_percent must be in [0, 100)"),
            (self.scale_up_stabilization_s >= 0, "scale_up_stabilization_s must be >= 0"),
            (self.scale_down_stabilization_s >= 0, "scale_down_stabilization_s must be >= 0"),
            (self.max_step_replicas >= 1, "max_step_replicas must be >= 1"),
            (self.decision_interval_s > 0, "decision_interval_s must be > 0"),
            (self.max_future_skew_s >= 0, "max_future_skew_s must be >= 0"),
            (self.slots_per_replica >= 1, "slots_per_replica must be >= 1"),
            (self.default_service_scv >= 0, "default_service_scv must be >= 0"),
            (0 < self.latency_quantile < 1, "latency_quantile must be in (0, 1)"),
            (self.backlog_drain_s > 0, "backlog_drain_s must be > 0"),
            (self.forecaster is None or self.forecaster in FORECASTERS, f"forecaster must be one of {FORECASTERS}"),
            (self.forecast_horizon_s >= 0 and self.forecast_window_s > 0, "forecast horizon/window must be >= 0 / > 0"),
            (0 < self.forecast_quantile <= 1, "forecast_quantile must be in (0, 1]"),
            (self.panic_threshold_ratio > 1, "panic_threshold_ratio must be > 1"),
            (self.mode != ScalingMode.FIXED or self.replicas is not None, "replicas is required in Fixed mode"),
            (self.scale_to_zero_after_s is None or self.scale_to_zero_after_s > 0, "scale_to_zero_after_s must be > 0"),
        ]
        for ok, message in checks:
            if not ok:
                raise ValueError(f"{message} (got {self!r})")

    @property
    def max_metrics_age_s(self) -> float:
        """Age beyond which metrics are stale, s."""
        return self.metrics_max_age_s if self.metrics_max_age_s is not None else max(60.0, 3 * self.decision_interval_s)

    @classmethod
    def from_spec(cls, spec: Mapping[str, Any] | None, **internals: Any) -> ScalingPolicy:
        """Build from an InferenceService ``.spec`` (a dict): :func:`modalscale.api.inferenceservice.parse_spec`
        (the CRD's defaults and rules), then :meth:`from_typed`.

        Raises:
            InvalidSpec: A field breaks a CRD rule; ``field`` names it, e.g. ``spec.scaling.maxReplicas``.
        """
        parsed = parse_spec(spec)
        return cls.from_typed(parsed.scaling, parsed.runtime, **internals)

    @classmethod
    def from_typed(cls, scaling: ScalingSpec, runtime: RuntimeSpec, **internals: Any) -> ScalingPolicy:
        """Build from the typed ``spec.scaling`` and ``spec.runtime`` (slots per replica = ``instanceCount``).

        ``internals`` sets the non-CRD attributes (``metrics_max_age_s``, ``default_service_scv``, ``calibrator``,
        ...). Durations and targets become floats (s, ms, percent).
        """
        mode = ScalingMode(scaling.mode)
        values: dict[str, Any] = dict(
            mode=mode,
            replicas=scaling.replicas if mode == ScalingMode.FIXED else None,
            min_replicas=scaling.min_replicas,
            max_replicas=scaling.max_replicas,
            target_p95_latency_ms=float(scaling.target_p95_latency_ms),
            target_utilization_percent=float(scaling.target_utilization_percent),
            tolerance_percent=float(scaling.tolerance_percent),
            scale_up_stabilization_s=float(scaling.scale_up_stabilization_s),
            scale_down_stabilization_s=float(scaling.scale_down_stabilization_s),
            max_step_replicas=scaling.max_step_replicas,
            decision_interval_s=float(scaling.decision_interval_s),
            slots_per_replica=runtime.instance_count,
            scale_to_zero_after_s=(None if scaling.scale_to_zero_after_s is None
                                   else float(scaling.scale_to_zero_after_s)),
        )
        values.update(internals)
        return cls(**values)


def image_encoder_policy(scaling: ScalingSpec, stage: ImageEncoderStageSpec, **internals: Any) -> ScalingPolicy:
    """The policy of a staged service's image encoder pool (issue 24; pure): the HPA rule of Utilization mode.

    The pool has no service-time model of its own and no request gateway in front of it, so whatever
    ``spec.scaling.mode`` (Predictive or Utilization) it is sized by ``ceil(ready * utilization / target)`` on its
    own Triton figures (busy erlangs = compute time / mean batch size over its ``instanceCount`` slots per replica,
    ``modalscale.autoscaler.metrics_parse``), raised by the observed-queue rule on its requests in flight (a backlog
    the busy fraction cannot show: :func:`_standing_queue`), with the service's target utilization, tolerance,
    stabilization windows, step limit and decision interval, and the pool's bounds. No scale to zero: the pool
    follows the front to 0 (``operator/isvc/plan.py`` ``image_encoder_replicas``).

    Args:
        scaling: The service's typed ``spec.scaling`` (its mode must not be Fixed).
        stage: ``spec.stages.imageEncoder`` (bounds ``minReplicas`` >= 1 and ``maxReplicas``; ``runtime``).
        internals: Non-CRD attributes, as in :meth:`ScalingPolicy.from_typed`.
    Raises:
        ValueError: ``scaling.mode`` is Fixed (the pool runs ``minReplicas`` there), or a bound is invalid.
    """
    if scaling.mode == ScalingMode.FIXED:
        raise ValueError("Fixed mode: the image encoder pool is not autoscaled")
    policy = ScalingPolicy.from_typed(
        replace(scaling, mode=ScalingMode.UTILIZATION.value, replicas=None, min_replicas=stage.min_replicas,
                max_replicas=stage.max_replicas, scale_to_zero_after_s=None), stage.runtime, **internals)
    return replace(policy, standing_queue_rule=True)


@dataclass(frozen=True, slots=True)
class WorkloadClass:
    """Observed traffic of one request class (a modality, or a finer bucket) over the metrics window.

    Attributes:
        modality: ``text``, ``image`` or ``image_text``.
        rate_rps: Arrival rate, requests/s.
        mean_image_pixels: Mean pixels per request (summed over its images).
        mean_image_count: Mean images per request.
        mean_text_tokens: Mean text tokens per request.
        mean_batch_size: Mean server-side batch size (1 when unbatched).
        service_scv: Observed service-time SCV within the class (e.g. from the runtime's histogram); None = use
            the policy default.
        observed_service_ms: Observed mean service time of the class's completed requests, ms (Triton's
            compute duration / count); None = unknown. Drives the service-time calibration.
    """

    modality: Modality | str
    rate_rps: float
    mean_image_pixels: float = 0.0
    mean_image_count: float = 0.0
    mean_text_tokens: float = 0.0
    mean_batch_size: float = 1.0
    service_scv: float | None = None
    observed_service_ms: float | None = None

    def __post_init__(self) -> None:
        modality = Modality(self.modality)
        object.__setattr__(self, "modality", modality)
        for name in ("rate_rps", "mean_image_pixels", "mean_image_count", "mean_text_tokens", "mean_batch_size",
                     "service_scv", "observed_service_ms"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                raise ValueError(f"WorkloadClass.{name} must be finite (a NaN or Inf metric is missing data, "
                                 f"not a number), got {value!r}")
        if self.rate_rps < 0 or self.mean_image_pixels < 0 or self.mean_image_count < 0 or self.mean_text_tokens < 0:
            raise ValueError(f"workload values must be >= 0: {self!r}")
        if self.mean_batch_size < 1:
            raise ValueError(f"mean_batch_size must be >= 1: {self!r}")
        if self.service_scv is not None and self.service_scv < 0:
            raise ValueError(f"service_scv must be >= 0: {self!r}")
        if self.observed_service_ms is not None and self.observed_service_ms <= 0:
            raise ValueError(f"observed_service_ms must be > 0: {self!r}")
        has_images = self.mean_image_count > 0
        if (
            (modality == Modality.TEXT) == has_images
            or (modality == Modality.IMAGE and self.mean_text_tokens > 0)
            or (modality == Modality.IMAGE_TEXT and self.mean_text_tokens <= 0)
        ):
            raise ValueError(f"class {modality.value} contradicts its means: {self!r}")


@dataclass(frozen=True, slots=True)
class Observation:
    """What was observed for one InferenceService (all metrics cover the ``window_s`` before ``observed_at``).

    Attributes:
        observed_at: When the metrics were sampled; timezone-aware UTC.
        current_replicas: Replicas requested now (the /scale target), ready or not.
        ready_replicas: Replicas serving now (<= current while some start or are Pending).
        workload: Per-class traffic; None = rate metrics missing. An empty tuple = no traffic (valid data).
        p95_latency_ms: Observed p95 response time, ms; None = unknown (used only for calibration).
        utilization_ratio: Busy fraction of ready slots, 0..1; None = unknown (Utilization mode needs it).
        window_s: Length of the metrics window, s.
        recent_workload: Per-class traffic over a shorter recent window (KPA's panic window idea); it replaces
            ``workload`` when its offered load exceeds the stable one by more than 3 standard errors of
            compound-Poisson sampling noise (``sqrt(rate * E[S^2] / recent_window_s)`` erlangs). None = unused.
        recent_window_s: Length of the recent window, s.
        queued_requests: Requests waiting for a slot now (Triton ``nv_inference_pending_request_count``); None =
            unknown. Predictive mode adds capacity to drain them within ``policy.backlog_drain_s``.
        budget_max_replicas: Effective maxReplicas from an enforcing BudgetPolicy (CapReplicas), from the cap
            annotations that read (one that does not: ``budget_cap_unreadable``); None = no cap.
        arrival_counts: Requests that arrived in consecutive bins of ``count_bin_s``, oldest first (the last ~10
            min); None = unknown. Gives the arrival SCV (burst-aware sizing) and the demand forecast.
        count_bin_s: Length of one ``arrival_counts`` bin, s.
        targets_up: Scrape targets that answered (Prometheus ``up == 1``) for this window; None = unknown (e.g. the
            simulator). Fewer than ``targets_expected`` means the rates and utilization cover only part of the
            replicas: they are a lower bound, so the policy may scale up on them but never down.
        targets_expected: Targets that should answer; None = ``ready_replicas`` (each replica's pod is a target).
            The observer passes Prometheus' target count when the targets are not per pod (a shared target).
        in_flight_requests: Requests in the service now, queued or executing (the runtime's
            ``modalscale_inflight_requests`` plus Triton's pending count); None = unknown. Drives the observed-queue
            rule (Little's law / KPA) and its growth check across decisions.
        in_flight_age_ms: Mean time since arrival of the requests in flight now, ms; None = unknown. Above the
            p95 target it contradicts a model that says the replicas suffice.
        in_flight_at: When ``in_flight_requests`` was scraped (timezone-aware); None = ``observed_at``. The growth
            of the requests in flight between decisions is a rate over the time between these samples.
        executing_requests: Requests executing now (in a slot); None = unknown.
        executing_age_ms: Mean time since their execution started, ms; None = unknown. Each is a lower bound on
            that request's service time, so the service-time observation counts them (module docstring).
        stage_target_p95_ms: The p95 response-time target of one stage of a staged service, ms: the image encoder
            pool's share of the service's ``targetP95LatencyMilliseconds``
            (:func:`modalscale.autoscaler.stages.split_slo`). In Utilization mode the need is then at least the
            replicas that keep the stage's p95 within it (:func:`stage_latency_need`); None = the Utilization rule
            alone. Must be > 0.
        image_encoder_wait_ms: A staged front's only (``spec.stages``): the mean time, ms, a request of the image
            encoder pool waited in its queue over the window (its mean request duration less its execution:
            :func:`modalscale.autoscaler.stages.front_pool_figures`). The front's image and image+text requests hold
            their slots that long waiting on the pool, which is not the front's own service time: it is subtracted
            from their observed service time (floored at 1 ms). None = not staged or unknown.
        image_encoder_queued_requests: Requests waiting in the pool's queue now (its Triton pending count); with
            ``image_encoder_ready_slots``, more waiting than its ready slots marks the pool as the bottleneck: the
            front's queue rules hold (``HeldForImageEncoder``) and its latency calibration and in-execution ages
            wait. None = not staged or unknown.
        image_encoder_ready_slots: The pool's ready replicas x its ``instanceCount``; None = unknown.
        budget_cap_unreadable: Why a BudgetPolicy cap annotation on the service cannot be read (its decode errors);
            None = every one reads. Set, the decision holds the current count (``CappedByBudget``, not valid): a cap
            that cannot be read may be below the count and is no reason to scale down
            (``annotations.unreadable_budget_caps``).

    A non-finite ``p95_latency_ms``, ``utilization_ratio``, ``queued_requests`` or in-flight figure is stored as None
    (unknown), as are ``arrival_counts`` with a non-finite count; a negative one raises ValueError.
    """

    observed_at: datetime
    current_replicas: int
    ready_replicas: int
    workload: tuple[WorkloadClass, ...] | None = None
    p95_latency_ms: float | None = None
    utilization_ratio: float | None = None
    window_s: float = 60.0
    recent_workload: tuple[WorkloadClass, ...] | None = None
    recent_window_s: float = 15.0
    queued_requests: float | None = None
    budget_max_replicas: int | None = None
    targets_up: int | None = None
    targets_expected: int | None = None
    arrival_counts: tuple[float, ...] | None = None
    count_bin_s: float = 15.0
    in_flight_requests: float | None = None
    in_flight_age_ms: float | None = None
    in_flight_at: datetime | None = None
    executing_requests: float | None = None
    executing_age_ms: float | None = None
    stage_target_p95_ms: float | None = None
    image_encoder_wait_ms: float | None = None
    image_encoder_queued_requests: float | None = None
    image_encoder_ready_slots: int | None = None
    budget_cap_unreadable: str | None = None

    def __post_init__(self) -> None:
        if self.arrival_counts is not None and not all(math.isfinite(c) for c in self.arrival_counts):
            object.__setattr__(self, "arrival_counts", None)  # NaN / Inf is missing data
        if not self.count_bin_s > 0:  # NaN too
            raise ValueError("count_bin_s must be > 0")
        for name in ("p95_latency_ms", "utilization_ratio", "queued_requests", "in_flight_requests",
                     "in_flight_age_ms", "executing_requests", "executing_age_ms", "stage_target_p95_ms",
                     "image_encoder_wait_ms", "image_encoder_queued_requests"):
            value = getattr(self, name)
            if value is not None and not math.isfinite(value):
                object.__setattr__(self, name, None)  # NaN / Inf is missing data
            elif value is not None and value < 0:
                raise ValueError(f"Observation.{name} must be >= 0, got {value!r}")
        if self.stage_target_p95_ms == 0:
            raise ValueError("Observation.stage_target_p95_ms must be > 0 (None = no stage latency rule), got 0")
        if self.image_encoder_ready_slots is not None and self.image_encoder_ready_slots < 0:
            raise ValueError("Observation.image_encoder_ready_slots must be >= 0")
        if self.targets_up is not None and self.targets_up < 0:
            raise ValueError("targets_up must be >= 0")
        if self.observed_at.tzinfo is None or (self.in_flight_at is not None and self.in_flight_at.tzinfo is None):
            raise ValueError("observed_at and in_flight_at must be timezone-aware (UTC)")
        if self.current_replicas < 0 or self.ready_replicas < 0:
            raise ValueError("current_replicas and ready_replicas must be >= 0")
        if self.budget_max_replicas is not None and self.budget_max_replicas < 0:
            raise ValueError("budget_max_replicas must be >= 0")
        if not (self.window_s > 0 and self.recent_window_s > 0):  # NaN too
            raise ValueError("window_s and recent_window_s must be > 0")


@dataclass(frozen=True, slots=True)
class Decision:
    """The policy's answer.

    Attributes:
        desired_replicas: Replicas to request; within bounds and never above the budget cap.
        valid: False = do not act on it (metrics missing or stale; it holds the current count).
        reason: The step that decided the count.
        message: Human-readable explanation with the numbers.
        features: Numbers that drove the decision (rates, service ms, load, need, scale ...).
        state: State to pass to the next call.
        mode_used: Policy actually applied (Predictive without a model falls back to Utilization).
    """

    desired_replicas: int
    valid: bool
    reason: Reason
    message: str
    features: Mapping[str, float]
    state: ScalerState
    mode_used: ScalingMode


def recommend(
    observation: Observation,
    policy: ScalingPolicy,
    state: ScalerState,
    model: ServiceTimePredictor | None,
    now: datetime,
) -> Decision:
    """Choose the replica count for one InferenceService (pure; see the module docstring for the steps).

    Args:
        observation: Metrics over the last ``observation.window_s`` s; None fields = missing.
        policy: Typed ``spec.scaling``.
        state: Previous decision's ``state`` (``ScalerState()`` at first).
        model: Service-time predictor over ``FEATURES``; None in Predictive mode falls back to Utilization.
        now: Timezone-aware UTC; the clock is never read inside.
    Returns:
        A :class:`Decision`; ``valid=False`` means hold (no action). Metrics finite but so far out of range that
        the arithmetic overflows (a rate of 1e300 req/s, a service time of 1e-300 ms) hold too
        (``HeldNoMetrics``): no real metric takes them, and no replica count follows from them.
    Raises:
        ValueError: ``now`` is naive.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    try:
        return _recommend(observation, policy, state, model, now)
    except (OverflowError, ZeroDivisionError) as exc:
        mode = policy.mode if model is not None or policy.mode != ScalingMode.PREDICTIVE else ScalingMode.UTILIZATION
        held = observation.current_replicas
        desired, reason, message = _bounded(
            held, Reason.HELD_NO_METRICS, f"The metrics are out of range ({type(exc).__name__}: {exc}): no replica "
                                          f"count follows from them; holding {held} replicas", policy, observation)
        return Decision(desired, desired != held, reason, message, {"held_replicas": float(held)}, state, mode)


def _recommend(observation: Observation, policy: ScalingPolicy, state: ScalerState,
               model: ServiceTimePredictor | None, now: datetime) -> Decision:
    """:func:`recommend` past its clock check."""
    current = observation.current_replicas
    if observation.budget_cap_unreadable is not None and policy.mode != ScalingMode.FIXED:
        held = bound_replicas(current, None, None, observation.budget_max_replicas)[0]  # a readable cap still applies
        return Decision(held, held != current, Reason.CAPPED_BY_BUDGET,
                        f"holding {held} replicas: {observation.budget_cap_unreadable} (a cap that cannot be read "
                        f"may be below the count, and is no reason to scale down)",
                        {"held_replicas": float(held)}, state, policy.mode)
    if policy.mode == ScalingMode.FIXED:
        assert policy.replicas is not None
        desired, reason, message = _bounded(policy.replicas, Reason.FIXED_REPLICAS,
                                            f"Fixed mode: {policy.replicas} replicas", None, observation)
        features = {"fixed_replicas": float(policy.replicas)}
        return Decision(desired, True, reason, message, features, state, ScalingMode.FIXED)
    if policy.min_replicas == 0:
        if current == 0:
            return _at_zero(observation, policy, state, model)
        active = _recommend_active(observation, replace(policy, min_replicas=1), state, model, now)
        return _idle_step(active, observation, policy, now)
    return _recommend_active(observation, policy, state, model, now)


def _recommend_active(
    observation: Observation,
    policy: ScalingPolicy,
    state: ScalerState,
    model: ServiceTimePredictor | None,
    now: datetime,
) -> Decision:
    """:func:`recommend` of Predictive and Utilization mode, at least ``policy.min_replicas`` replicas."""
    current = observation.current_replicas
    mode = policy.mode if model is not None else ScalingMode.UTILIZATION
    missing = observation.workload is None if mode == ScalingMode.PREDICTIVE else observation.utilization_ratio is None
    age_s = (now - observation.observed_at).total_seconds()
    if missing or age_s > policy.max_metrics_age_s or -age_s > policy.max_future_skew_s:
        return _hold(observation, policy, state, mode, stale=not missing, age_s=age_s)
    if mode == ScalingMode.UTILIZATION and observation.ready_replicas == 0:
        return _hold(observation, policy, state, mode, stale=False, age_s=age_s)

    if mode == ScalingMode.PREDICTIVE:
        assert model is not None
        need, reason, message, features, state = _predictive_need(observation, policy, state, model, now)
    else:
        need, reason, message, features = _utilization_need(observation, policy)
        if observation.stage_target_p95_ms is not None:
            need, reason, message, features = _with_stage_latency(observation, policy, need, reason, message,
                                                                   features)
        if policy.standing_queue_rule:
            need, reason, message, features, state = _standing_queue(observation, policy, state, need, reason,
                                                                     message, features)
    if is_partial(observation):
        features = {**features, "targets_up": float(observation.targets_up or 0)}
        if need < current:
            message = (f"{message}; only {observation.targets_up} of {expected_targets(observation)} expected scrape "
                       f"targets answered ({observation.ready_replicas} ready replicas), so this need is a lower "
                       f"bound: no scale-down below {current}")
            need, reason = current, Reason.HELD_PARTIAL_METRICS
    return finalize_recommendation(need, reason, message, features, observation, policy, state, now, mode)


def observed_idle(observation: Observation, policy: ScalingPolicy, now: datetime) -> bool:
    """Whether the metrics were read and show no request at all (pure): the only evidence scale to zero acts on.

    True only when every replica is ready (one still starting, e.g. just activated, cannot have served the requests
    the gateway holds for it), the reading is fresh (not older than ``policy.max_metrics_age_s``, not dated ahead by
    more than ``max_future_skew_s``), complete (every expected scrape target answered), has the workload rates and
    they are all 0 in the stable and the recent window, and nothing is known to be queued or in flight. Missing,
    partial, stale and non-finite data (already None in ``Observation``) are never idle.
    """
    age_s = (now - observation.observed_at).total_seconds()
    if age_s > policy.max_metrics_age_s or -age_s > policy.max_future_skew_s or is_partial(observation):
        return False
    if observation.ready_replicas < observation.current_replicas:
        return False  # a replica still starting (after an activation): the gateway may hold requests meanwhile
    if observation.workload is None or any(c.rate_rps > 0 for c in observation.workload):
        return False
    if observation.recent_workload is not None and any(c.rate_rps > 0 for c in observation.recent_workload):
        return False
    return not any(v for v in (observation.queued_requests, observation.in_flight_requests,
                               observation.executing_requests) if v is not None)


def _at_zero(observation: Observation, policy: ScalingPolicy, state: ScalerState,
             model: ServiceTimePredictor | None) -> Decision:
    """At 0 replicas with ``min_replicas == 0``: hold 0 (no pod, no metric; the gateway's activation request is
    what starts a replica, :func:`activate`). A budget cap cannot be below 0, so nothing forces a change."""
    mode = policy.mode if model is not None else ScalingMode.UTILIZATION
    message = ("0 replicas: waiting for the gateway's activation request (annotation "
               "modalscale.io/activation-requested-at)")
    return Decision(0, False, Reason.IDLE_AT_ZERO, message, {"held_replicas": 0.0},
                    replace(state, idle_since=None), mode)


def _idle_step(decision: Decision, observation: Observation, policy: ScalingPolicy, now: datetime) -> Decision:
    """Scale to zero after ``policy.scale_to_zero_after_s`` of unbroken :func:`observed_idle` decisions (pure).

    ``decision`` is the rules' own (at least 1 replica). The idle run starts at the first idle decision (the
    reading then covers a whole metrics window without a request) and any other decision ends it. Scale to zero
    bypasses the stabilization windows and the max step: the idle run is its own window, and with no request at
    all no replica is needed.
    """
    st = decision.state
    if not observed_idle(observation, policy, now):
        return replace(decision, state=replace(st, idle_since=None)) if st.idle_since is not None else decision
    since = st.idle_since or now
    idle_s = (now - since).total_seconds()
    features = {**decision.features, "idle_s": idle_s}
    after = policy.scale_to_zero_after_s
    if after is None or idle_s < after:
        return replace(decision, features=features, state=replace(st, idle_since=since))
    message = (f"No request for {idle_s:.0f} s (scaleToZeroAfterSeconds {after:g}, metrics read all along): "
               f"{observation.current_replicas} -> 0 replicas; the gateway holds requests until one is Ready")
    state = replace(st, idle_since=None, scaled_to_zero_at=now, last_change_at=now,
                    recommendations=(*st.recommendations[:-1], (now, 0)) if st.recommendations else ((now, 0),))
    return Decision(0, True, Reason.SCALE_TO_ZERO, message, features, state, decision.mode_used)


def activate(current_replicas: int, requested_at: datetime | None, state: ScalerState, policy: ScalingPolicy,
             budget_max_replicas: int | None, now: datetime) -> Decision | None:
    """Start one replica for a gateway holding requests at 0 (pure; Knative's activator poking the autoscaler).

    Args:
        current_replicas: The Deployment's ``spec.replicas`` now.
        requested_at: The gateway's ``modalscale.io/activation-requested-at``; None = absent or unreadable.
        state: The scaler's memory (``scaled_to_zero_at``: the last scale to zero).
        budget_max_replicas: An enforcing BudgetPolicy's cap (held at ``current_replicas`` while a cap annotation
            cannot be read: ``annotations.hold_on_unreadable_cap``); None = none. A cap of 0 wins (no activation).
        now: Timezone-aware UTC.
    Returns:
        None when there is nothing to do: Fixed mode, ``min_replicas > 0``, replicas already there, no request, or
        a request not newer than the last scale to zero (the gateway keeps writing while it waits). Else a
        decision: 1 replica (``Activated``, valid), or 0 held by the budget cap (``CappedByBudget``, not valid) or
        by a request dated more than ``policy.max_future_skew_s`` ahead of ``now`` (``HeldStaleMetrics``, not
        valid: clock skew, or a time that is not the gateway's).
    Raises:
        ValueError: ``now`` is naive.
    """
    if now.tzinfo is None:
        raise ValueError("now must be timezone-aware (UTC)")
    if (policy.mode == ScalingMode.FIXED or policy.min_replicas != 0 or current_replicas != 0
            or requested_at is None):
        return None
    if state.scaled_to_zero_at is not None and requested_at <= state.scaled_to_zero_at:
        return None
    delay_s = (now - requested_at).total_seconds()
    features = {"activation_delay_s": delay_s}
    if -delay_s > policy.max_future_skew_s:  # unreadable as a metrics sample dated ahead: it would activate again
        return Decision(0, False, Reason.HELD_STALE_METRICS,  # after every scale to zero while it stays ahead
                        f"the gateway's activation request is dated {requested_at.isoformat()}, {-delay_s:.0f} s in "
                        f"the future (clock skew between the gateway's and the operator's nodes; allowance "
                        f"{policy.max_future_skew_s:g} s): not read; holding 0 replicas", features, state,
                        policy.mode)
    desired, why = bound_replicas(1, 1, policy.max_replicas, budget_max_replicas)
    if why == Reason.CAPPED_BY_BUDGET:
        return Decision(desired, False, Reason.CAPPED_BY_BUDGET,
                        f"activation requested at {requested_at.isoformat()}, but the budget cap holds replicas at "
                        f"{desired} (a BudgetPolicy's cap, or a cap annotation that cannot be read: BudgetLimited)",
                        features, state, policy.mode)
    new_state = replace(state, idle_since=None, last_change_at=now,
                        recommendations=(*state.recommendations, (now, desired)))
    return Decision(desired, True, Reason.ACTIVATED,
                    f"the gateway holds requests at 0 replicas (activation requested at {requested_at.isoformat()}, "
                    f"{delay_s:.1f} s ago): 0 -> {desired} replica", features, new_state, policy.mode)


def expected_targets(observation: Observation) -> int:
    """Scrape targets that should answer: ``targets_expected``, else one per ready replica."""
    return observation.ready_replicas if observation.targets_expected is None else observation.targets_expected


def is_partial(observation: Observation) -> bool:
    """Whether fewer scrape targets answered than expected (the metrics cover only some replicas)."""
    return observation.targets_up is not None and observation.targets_up < expected_targets(observation)


def finalize_recommendation(
    need: int,
    reason: Reason,
    message: str,
    features: Mapping[str, float],
    observation: Observation,
    policy: ScalingPolicy,
    state: ScalerState,
    now: datetime,
    mode: ScalingMode,
) -> Decision:
    """Apply tolerance, stabilization windows, max step, min/max and the budget cap to a raw need (pure).

    Shared by every mode (and by the simulator's KPA-like baseline) so all policies get the same guards.

    Args:
        need: Replicas the load calls for, before any guard.
        reason: Reason for ``need`` (e.g. ``ScaleUpForSLO``).
        message: Human explanation of ``need``.
        features: Numbers behind ``need``; ``needed_replicas`` is added.
    Returns:
        A valid :class:`Decision` with the recommendation recorded in its state.
    """
    current = observation.current_replicas
    features = dict(features)
    features["needed_replicas"] = float(need)
    tolerance = policy.tolerance_percent / 100.0
    if need == current:
        reason = reason if reason in (Reason.HELD_PARTIAL_METRICS, Reason.HELD_FOR_IMAGE_ENCODER) else Reason.STEADY
        rec = current
        message = f"{message}; need equals current {current}"
    elif current > 0 and abs(need / current - 1.0) <= tolerance + 1e-9:
        rec = current
        message = f"{message}; need {need} within {policy.tolerance_percent:g}% of current {current}"
        reason = Reason.WITHIN_TOLERANCE
    elif (current > 0 and (unrounded := features.get("utilization_need_replicas")) is not None
          and abs(unrounded / current - 1.0) <= tolerance + 1e-9):
        rec = current  # HPA's band on the metric: the load is within tolerance of what the current replicas carry
        message = (f"{message}; need {unrounded:.2f} replicas' worth at the utilization target, within "
                   f"{policy.tolerance_percent:g}% of current {current}")
        reason = Reason.WITHIN_TOLERANCE
    else:
        rec = need

    # HPA stabilization: up = min over the up window, down = max over the down window (this rec included).
    horizon_s = max(policy.scale_up_stabilization_s, policy.scale_down_stabilization_s)
    # no history at all (status lost, a switch from Fixed): seed it with the current count, as HPA does
    seeded = not state.recommendations
    recommendations = ((now, current),) if seeded else state.recommendations
    if seeded:
        features["history_seeded"] = 1.0
    history = [(t, r) for t, r in recommendations if (now - t).total_seconds() < horizon_s and t <= now]
    up_cutoff = now - timedelta(seconds=policy.scale_up_stabilization_s)
    down_cutoff = now - timedelta(seconds=policy.scale_down_stabilization_s)
    up_rec = min([rec] + [r for t, r in history if t > up_cutoff])
    down_rec = max([rec] + [r for t, r in history if t > down_cutoff])
    desired = min(max(current, up_rec), down_rec)
    if desired != rec:
        if rec < current:
            reason = Reason.SCALE_DOWN_STABILIZED
            message = (f"{message}; scale-down to {rec} held at {desired} "
                       f"(max over the last {policy.scale_down_stabilization_s:g} s)")
            if seeded:
                message += f"; no history, seeded with the current {current}"
        else:
            reason = Reason.SCALE_UP_STABILIZED
            message = (f"{message}; scale-up to {rec} held at {desired} "
                       f"(min over the last {policy.scale_up_stabilization_s:g} s)")

    if abs(desired - current) > policy.max_step_replicas:
        desired = current + policy.max_step_replicas * (1 if desired > current else -1)
        reason = Reason.LIMITED_BY_MAX_STEP
        message = f"{message}; step limited to {policy.max_step_replicas} -> {desired}"
    desired, reason, message = _bounded(desired, reason, message, policy, observation)
    new_state = replace(
        state,
        recommendations=tuple(history) + ((now, rec),),
        last_change_at=now if desired != current else state.last_change_at,
    )
    return Decision(desired, True, reason, message, features, new_state, mode)


def bound_replicas(n: int, min_replicas: int | None, max_replicas: int | None,
                   cap: int | None) -> tuple[int, Reason | None]:
    """The one replica clamp: ``n`` within ``[min_replicas, max_replicas]``, then never above the budget ``cap``.

    Used by every autoscaler decision and by the InferenceService planner (``status.desiredReplicas`` of an
    earlier decision against the spec as it is now).

    Args:
        n: Replicas before the bounds.
        min_replicas, max_replicas: Spec bounds (``minReplicas`` <= ``maxReplicas``); None = unbounded (Fixed mode).
        cap: Effective maxReplicas of an enforcing BudgetPolicy; None = no cap. It wins over ``min_replicas``.
    Returns:
        ``(replicas, reason)``: the reason of the last bound that changed ``n`` (``BoundedByMax``,
        ``BoundedByMin``, ``CappedByBudget``), None when none did.
    """
    reason: Reason | None = None
    if max_replicas is not None and n > max_replicas:
        n, reason = max_replicas, Reason.BOUNDED_BY_MAX
    elif min_replicas is not None and n < min_replicas:
        n, reason = min_replicas, Reason.BOUNDED_BY_MIN
    if cap is not None and n > cap:
        n, reason = cap, Reason.CAPPED_BY_BUDGET
    return n, reason


class StagedSplit(NamedTuple):
    """:func:`split_staged_cap`'s answer: each pool's replicas under the cap, and why."""

    front: int
    image_encoder: int
    note: str
    """The rule that chose the pool to give up replicas, with the prices and the counts (:func:`staged_cap_rule`);
    empty when the cap took nothing."""


_STAGE_NAMES = ("the front pool", "the image encoder pool")


_USD_PLACES = 4
"""Decimals a price in a message has at least (0.0001 USD)."""


def _usd(price: Decimal, places: int = _USD_PLACES) -> str:
    """A price as a message writes it: to ``places`` decimals (0.0001 USD), no trailing zeros (``0.52`` for
    ``Decimal("0.520000")``); exact when it has no more decimals than that."""
    exponent = price.as_tuple().exponent
    if isinstance(exponent, int) and -exponent <= places:
        return format(price.normalize(), "f")
    return format(price.quantize(Decimal(1).scaleb(-places)).normalize(), "f")


def _usd_pair(a: Decimal, b: Decimal) -> tuple[str, str]:
    """Two prices the costlier-pool rule compares, as :func:`_usd` writes them, with as many more decimals as tell
    them apart: the two texts differ exactly when ``a != b`` (rounding keeps their order), so a pool called the
    costlier never reads as costing the same as the other."""
    places = _USD_PLACES
    while a != b and _usd(a, places) == _usd(b, places):
        places += 1  # ends: at the prices' own decimals both are written exactly
    return _usd(a, places), _usd(b, places)


def _costlier(front_usd_per_hour: Decimal | None, image_encoder_usd_per_hour: Decimal | None
              ) -> tuple[int, Decimal, Decimal] | None:
    """``(pool, its price, the other's)``: pool 0 when the front's replica costs more, 1 when the image encoder
    pool's does; None when the prices are equal or one is not known."""
    if front_usd_per_hour is None or image_encoder_usd_per_hour is None:
        return None
    if front_usd_per_hour > image_encoder_usd_per_hour:
        return 0, front_usd_per_hour, image_encoder_usd_per_hour
    if image_encoder_usd_per_hour > front_usd_per_hour:
        return 1, image_encoder_usd_per_hour, front_usd_per_hour
    return None


def staged_cap_rule(front: int, image_encoder: int, cap: int, front_usd_per_hour: Decimal | None,
                    image_encoder_usd_per_hour: Decimal | None) -> str:
    """The text of the rule :func:`split_staged_cap` applies, with the prices and the counts it ends at (pure).

    E.g. ``the image encoder pool (0.52 USD/h a replica, the costlier; front pool 0.31) gives up replicas first,
    down to 1: front 2 + image encoder 1``. It names the rule and the result, not how many each pool gave up (the
    front's count may come from an autoscaler decision already taken under its share).
    """
    prices = (front_usd_per_hour, image_encoder_usd_per_hour)
    costlier = _costlier(*prices)
    if costlier is not None:
        hi, hi_usd, lo_usd = costlier
        hi_text, lo_text = _usd_pair(hi_usd, lo_usd)
        text = (f"{_STAGE_NAMES[hi]} ({hi_text} USD/h a replica, the costlier; "
                f"{_STAGE_NAMES[1 - hi].removeprefix('the ')} {lo_text}) gives up replicas first, down to 1")
    elif prices[0] is not None and prices[1] is not None:
        text = f"both pools cost {_usd(prices[0])} USD/h a replica, so the one with more replicas gives them up first"
    else:
        known = ", ".join(f"{n.removeprefix('the ')} {_usd(p)} USD/h"
                          for n, p in zip(_STAGE_NAMES, prices, strict=True) if p is not None)
        text = (f"a pool's price is not known{f' ({known})' if known else ''}, so the one with more replicas gives "
                f"them up first")
    text += f": front {front} + image encoder {image_encoder}"
    if front + image_encoder > cap:
        text += " (above the cap: a cap never takes a running stage to 0)"
    return text


def split_staged_cap(front: int, image_encoder: int, cap: int | None, front_usd_per_hour: Decimal | None,
                     image_encoder_usd_per_hour: Decimal | None) -> StagedSplit:
    """A BudgetPolicy cap over a staged service's two pools (issue 24, ``spec.stages``; pure).

    The cap bounds the service's replicas counted over both pools: ``front + image_encoder <= cap``. While the sum
    is above it, replicas are taken away one at a time from the pool whose replica costs more; with equal prices,
    or a price not known, from the pool with more replicas (a tie: the image encoder pool). Neither pool goes below
    1 replica while the front runs: only once the costlier pool is at 1 does the other give up replicas, and a cap
    below 2 holds 1 + 1 (above the cap; the note says so). A front at 0 (Fixed 0, scaled to zero) or a cap of 0
    (``ScaleToZero``) takes both pools to 0 (no front replica calls the image encoder pool) with an empty note: the
    caller says why (``FrontAtZero``).

    Taking either pool's count down to the cap first changes nothing (``split(min(f, cap), e) == split(f, e)``,
    and so for ``e``), nor does feeding the front's answer back with the same image encoder count
    (``split(split(f, e).front, e)`` has the same counts; its note is empty when the front's count already fits):
    a planner may give it counts already capped pool by pool, or the front's count it wrote last time, and get the
    same replicas. The front's answer is ``min(front, split(cap, image_encoder).front)``: its share of the cap.

    Args:
        front: Replicas of the front pool (``<name>``), >= 0, within its bounds (its decision).
        image_encoder: Replicas of the image encoder pool (``<name>-image-encoder``), >= 0, within its bounds.
        cap: The BudgetPolicy's cap (``api.annotations.budget_cap``: the effective maxReplicas), >= 0; None = no
            cap (nothing changes).
        front_usd_per_hour, image_encoder_usd_per_hour: Price of one replica of each pool in USD per hour; None =
            not known.
    Returns:
        :class:`StagedSplit`: the two counts and the rule's text (:func:`staged_cap_rule`), empty when nothing
        changed.
    """
    if front == 0 or cap == 0:
        return StagedSplit(0, 0, "")
    if cap is None or front + image_encoder <= cap:
        return StagedSplit(front, image_encoder, "")
    counts = [front, image_encoder]
    floors = (1, min(1, image_encoder))
    costlier = _costlier(front_usd_per_hour, image_encoder_usd_per_hour)
    while sum(counts) > cap and (counts[0] > floors[0] or counts[1] > floors[1]):
        first = costlier[0] if costlier is not None else 0 if counts[0] > counts[1] else 1
        if counts[first] == floors[first]:
            first = 1 - first
        counts[first] -= 1
    rule = staged_cap_rule(counts[0], counts[1], cap, front_usd_per_hour, image_encoder_usd_per_hour)
    return StagedSplit(counts[0], counts[1], rule)


STAGED_FLOOR_REPLICAS = 2
"""The fewest replicas a staged service runs over both pools while its front runs: 1 front + 1 image encoder
(:func:`split_staged_cap` never takes a running stage to 0)."""


def replicas_under_cap(cap: int, staged: bool) -> int:
    """The most replicas a service runs under a BudgetPolicy cap of ``cap`` (pure): what a report of the cap says.

    Args:
        cap: The cap (the effective maxReplicas), >= 0.
        staged: The service has ``spec.stages``: the cap counts both pools (:func:`split_staged_cap`).
    Returns:
        ``cap``; for a staged service under a cap of 1 (below :data:`STAGED_FLOOR_REPLICAS`) that floor, 2: a running
        front keeps 1 front + 1 image encoder replica. A cap of 0 takes both pools to 0.
    """
    if staged and cap > 0:
        return max(cap, STAGED_FLOOR_REPLICAS)
    return cap


def describe_cap(cap: int, staged: bool) -> str:
    """What a BudgetPolicy cap of ``cap`` holds a service to, as its Event and ``status.enforcedServices`` say it
    (pure): the replicas that will run (:func:`replicas_under_cap`), not only the cap.

    E.g. ``at most 3 replica(s)``; staged: ``at most 3 replica(s) over both stages (front + image encoder)``, and
    under a cap below 2 ``capped at 1; a staged service runs at least 1 front + 1 image-encoder replica: 2``.
    """
    runs = replicas_under_cap(cap, staged)
    if runs > cap:
        return f"capped at {cap}; a staged service runs at least 1 front + 1 image-encoder replica: {runs}"
    if staged:
        return f"at most {cap} replica(s) over both stages (front + image encoder)"
    return f"at most {cap} replica(s)"


def _bounded(desired: int, reason: Reason, message: str, policy: ScalingPolicy | None,
             observation: Observation) -> tuple[int, Reason, str]:
    """:func:`bound_replicas` with the decision's reason and message (``policy`` None: the budget cap only)."""
    lo, hi = (None, None) if policy is None else (policy.min_replicas, policy.max_replicas)
    within, why = bound_replicas(desired, lo, hi, None)
    if why == Reason.BOUNDED_BY_MAX:
        reason, message = why, f"{message}; bounded by maxReplicas {hi}"
    elif why == Reason.BOUNDED_BY_MIN:
        reason, message = why, f"{message}; bounded by minReplicas {lo}"
    capped, why = bound_replicas(within, None, None, observation.budget_max_replicas)
    if why == Reason.CAPPED_BY_BUDGET:
        reason, message = why, f"{message}; capped by budget at {capped}"
    return capped, reason, message


def _hold(
    observation: Observation, policy: ScalingPolicy, state: ScalerState, mode: ScalingMode, stale: bool, age_s: float
) -> Decision:
    current = observation.current_replicas
    held = current  # the last decision that was applied
    if stale and age_s < 0:
        reason = Reason.HELD_STALE_METRICS
        message = (f"Metrics are dated {-age_s:.0f} s in the future (clock skew; allowance "
                   f"{policy.max_future_skew_s:g} s): not fresh; holding {held} replicas")
    elif stale:
        reason = Reason.HELD_STALE_METRICS
        message = f"Metrics are {age_s:.0f} s old (limit {policy.max_metrics_age_s:g} s); holding {held} replicas"
    else:
        reason = Reason.HELD_NO_METRICS
        what = "workload rates" if mode == ScalingMode.PREDICTIVE else "utilization of ready replicas"
        message = f"No {what}; holding {held} replicas"
    desired, reason, message = _bounded(held, reason, message, policy, observation)
    valid = desired != current  # act only when a bound or the budget forces a change
    features = {"metrics_age_s": float(age_s), "held_replicas": float(held)}
    return Decision(desired, valid, reason, message, features, state, mode)


@dataclass(frozen=True, slots=True)
class _Load:
    classes: tuple[WorkloadClass, ...]
    raw_ms: NDArray[np.float64]  # model prediction per class, before calibration
    arrival_rps: float
    mean_ms: float  # calibrated, rate-weighted
    scv: float
    load_erlangs: float
    second_moment_s2: float  # E[S^2] in s^2


def _predict_raw_ms(
    workloads: list[tuple[WorkloadClass, ...]], model: ServiceTimePredictor
) -> list[NDArray[np.float64]]:
    """Model prediction per active class of each workload, in one ``predict`` call (before calibration)."""
    classes = [c for w in workloads for c in w if c.rate_rps > 0]
    if not classes:
        return [np.zeros(0) for _ in workloads]
    x = features_from_columns(
        [c.mean_image_pixels for c in classes],
        [c.mean_image_count for c in classes],
        [c.mean_text_tokens for c in classes],
        [c.mean_batch_size for c in classes],
        [Modality(c.modality).value for c in classes],
    )
    raw = np.asarray(model.predict(x), dtype=np.float64).reshape(-1)
    out, start = [], 0
    for w in workloads:
        n = sum(1 for c in w if c.rate_rps > 0)
        out.append(raw[start : start + n])
        start += n
    return out


def _estimate(
    workload: tuple[WorkloadClass, ...], raw_ms: NDArray[np.float64], policy: ScalingPolicy, service_scale: float
) -> _Load:
    classes = tuple(c for c in workload if c.rate_rps > 0)
    if not classes:
        return _Load(classes, np.zeros(0), 0.0, 0.0, 0.0, 0.0, 0.0)
    rates = np.array([c.rate_rps for c in classes])
    scvs = np.array([policy.default_service_scv if c.service_scv is None else c.service_scv for c in classes])
    arrival_rps = float(rates.sum())
    service_ms = raw_ms * service_scale
    mean_ms = float((rates * service_ms).sum() / arrival_rps)
    second_ms2 = float((rates * service_ms**2 * (1.0 + scvs)).sum() / arrival_rps)
    scv = max(0.0, second_ms2 / mean_ms**2 - 1.0)
    load = offered_load_erlangs(arrival_rps, mean_ms)
    return _Load(classes, raw_ms, arrival_rps, mean_ms, scv, load, second_ms2 / 1e6)


def _calibrate_service(
    observation: Observation, raw_ms: NDArray[np.float64], policy: ScalingPolicy, state: ScalerState,
    features: dict[str, float]
) -> tuple[_Load, float, float, float | None, float | None]:
    """Service-time calibration: observed vs predicted (raw) mean service time, rate-weighted over classes.

    Service time does not depend on the replica count, so this runs during scaling too. Observation over
    assumption: a disagreement the bounded calibrator cannot follow is sized as observed (downwards only on
    completed requests: an in-flight age is a lower bound, never an upper one). A model that far off is not
    trusted for how service time depends on the features either: sized as observed, every class of every window
    takes the observed mean service time (``flat_raw_ms`` x the sizing scale), not the observed ratio times the
    model's prediction for that window's features (one long prompt in the 15 s window would otherwise scale the
    recent window by the model's token slope, which the observation has just shown to be wrong).

    Returns:
        ``(stable load at the sizing scale, calibrated service scale, sizing scale, observed mean service ms or
        None, flat_raw_ms)``: ``flat_raw_ms`` is the model's raw prediction for the observed requests when sized as
        observed (use it for every class), else None. Adds ``observed_service_ms`` and
        ``observed_over_model_ratio`` to ``features`` when known.
    """
    assert observation.workload is not None
    calibrator = policy.calibrator
    stable = _estimate(observation.workload, raw_ms, policy, state.service_scale)
    seen = [
        (c.rate_rps, c.observed_service_ms, p)
        for c, p in zip(stable.classes, stable.raw_ms, strict=True)
        if c.observed_service_ms is not None
    ]
    service_scale = state.service_scale
    sizing_scale = service_scale  # the scale the rules size with: the calibrated one, unless observation wins
    flat_raw_ms = None
    observed_ms, predicted_ms, completed = _observed_service(observation, stable, seen)
    if observed_ms is not None and predicted_ms is not None and predicted_ms > 0:
        service_scale = calibrator.update(service_scale, observed_ms, predicted_ms)
        sizing_scale = service_scale
        features["observed_service_ms"] = observed_ms
        ratio = observed_ms / predicted_ms
        if ratio > calibrator.max_scale or (ratio < calibrator.min_scale and completed):
            sizing_scale, flat_raw_ms = ratio, predicted_ms
            features["observed_over_model_ratio"] = ratio
            raw_ms = np.full_like(raw_ms, predicted_ms)
        stable = _estimate(observation.workload, raw_ms, policy, sizing_scale)
    return stable, service_scale, sizing_scale, observed_ms, flat_raw_ms


def _calibrate_latency(
    observation: Observation, policy: ScalingPolicy, state: ScalerState, stable: _Load, settled: bool, ca2: float,
    features: dict[str, float]
) -> float:
    """Latency calibration: the latency scale after comparing the observed with the predicted p95 at the ready
    replicas (before the latency scale), only in steady conditions: ``settled``, at least 20 requests in the
    window, and inside the model's operating range (load <= 95 % of the ready slots)."""
    latency_scale = state.latency_scale
    ready, slots = observation.ready_replicas, policy.slots_per_replica
    steady = settled and stable.arrival_rps * observation.window_s >= 20
    if (observation.p95_latency_ms is not None and steady
            and stable.load_erlangs <= _CALIBRATION_MAX_UTILIZATION * ready * slots):
        predicted_p95 = response_quantile_ms(stable.arrival_rps, stable.mean_ms, stable.scv, ready * slots,
                                             policy.latency_quantile, scv_arrival=ca2)
        if math.isfinite(predicted_p95):
            latency_scale = policy.calibrator.update(latency_scale, observation.p95_latency_ms, predicted_p95)
            features["predicted_p95_at_ready_ms"] = predicted_p95
            features["observed_p95_ms"] = observation.p95_latency_ms
    return latency_scale


@dataclass(frozen=True, slots=True)
class _Sizer:
    """Sizes one load for the latency target (``target / latency_scale``) at the arrival SCV ``ca2``."""

    effective_target_ms: float
    quantile: float
    slots: int
    utilization: float
    limit: int
    ca2: float

    def __call__(self, load: _Load) -> tuple[int, bool]:
        """(replicas, SLO attainable) for one load; unattainable loads are sized for the utilization target."""
        if not load.classes:
            return 0, True
        if not slo_attainable(load.mean_ms, load.scv, self.effective_target_ms, self.quantile):
            return max(1, math.ceil(load.load_erlangs / (self.slots * self.utilization) - 1e-9)), False
        return replicas_for_slo(load.arrival_rps, load.mean_ms, load.scv, self.slots, self.effective_target_ms,
                                self.utilization, self.limit, scv_arrival=self.ca2, quantile=self.quantile), True


def _choose_rule(
    observation: Observation, policy: ScalingPolicy, stable: _Load, recent_raw_ms: NDArray[np.float64] | None,
    sizing_scale: float, size: _Sizer, features: dict[str, float]
) -> tuple[_Load, str, int, bool]:
    """The rule whose load sizes the service: ``stable``, or the recent window on KPA's ``panic`` (it alone needs
    ``panic_threshold_ratio`` x the ready replicas) or a ``burst`` (beyond the compound-Poisson sampling noise of
    the short window). Returns ``(load, rule, need, SLO attainable)``.

    Neither recent-window rule applies when the p95 target is at least ``forecast_horizon_s`` (a replica's start-up
    time): a request may wait that long, and the backlog and observed-queue rules ask for replicas as soon as a queue
    forms. On the long-request trace (80 s target, ~18 s requests at 0.35 req/s: ~5 arrivals per 15 s window) one
    client's few extra requests read as panic, asked for 12-19 replicas where 8-10 were needed, and the scale-down
    window held them a minute: without the two rules 8.48-9.11 replica-h instead of 9.38-9.94, the same SLO-minutes
    (benchmarks/autoscaler_pareto.py, 3 seeds)."""
    chosen, rule = stable, "stable"
    need, attainable = size(stable)
    # A p95 target at least a replica's start-up time absorbs the start-up: the queue rules act as soon as a queue
    # forms and their replicas come within the target, so the recent window is not extrapolated (as the forecast).
    absorbed = policy.target_p95_latency_ms / 1000.0 >= policy.forecast_horizon_s
    if observation.recent_workload is not None and not absorbed:
        assert recent_raw_ms is not None
        recent = _estimate(observation.recent_workload, recent_raw_ms, policy, sizing_scale)
        noise = math.sqrt(recent.arrival_rps * recent.second_moment_s2 / observation.recent_window_s)
        features.update(recent_load_erlangs=recent.load_erlangs, recent_load_noise_erlangs=noise)
        recent_need, recent_ok = size(recent)
        panic = recent_need > need and recent_need >= policy.panic_threshold_ratio * max(observation.ready_replicas, 1)
        burst = recent.load_erlangs > stable.load_erlangs + _BURST_Z * noise and recent_need > need
        if panic or burst:
            chosen, rule, need, attainable = recent, "panic" if panic else "burst", recent_need, recent_ok
    features["burst"] = float(rule == "burst")
    features["panic"] = float(rule == "panic")
    return chosen, rule, need, attainable


def _sizing_message(
    observation: Observation, policy: ScalingPolicy, chosen: _Load, rule: str, need: int, attainable: bool,
    sizing_scale: float, service_scale: float, observed_ms: float | None, latency_scale: float, ca2: float,
    features: dict[str, float]
) -> str:
    """Why ``need`` replicas for the chosen load; adds the per-class rates and service times, the load and (when
    attainable) the predicted p95 to ``features``."""
    slots, target = policy.slots_per_replica, policy.target_p95_latency_ms
    utilization = policy.target_utilization_percent / 100.0
    busy_ms: dict[str, float] = {}  # per modality: the rate-weighted sum of its classes' (or buckets') times
    for c, ms in zip(chosen.classes, chosen.raw_ms * sizing_scale, strict=True):
        key = Modality(c.modality).value
        features[key + "_rps"] += c.rate_rps
        busy_ms[key] = busy_ms.get(key, 0.0) + c.rate_rps * float(ms)
        features[key + "_service_ms"] = float(ms)  # a modality of no traffic: its last class's time
    for key, total_ms in busy_ms.items():
        if features[key + "_rps"] > 0:
            features[key + "_service_ms"] = total_ms / features[key + "_rps"]
    arrival_rps, mean_ms, scv, load = chosen.arrival_rps, chosen.mean_ms, chosen.scv, chosen.load_erlangs
    features.update(arrival_rps=arrival_rps, mean_service_ms=mean_ms, service_scv=scv, offered_load_erlangs=load)
    stable_window = (f"last {features['rate_window_s']:g} s: few requests in {observation.window_s:g} s"
                     if "rate_window_s" in features else f"last {observation.window_s:g} s")
    window = {"stable": stable_window, "burst": f"last {observation.recent_window_s:g} s (burst)",
              "panic": f"last {observation.recent_window_s:g} s (panic: >= {policy.panic_threshold_ratio:g}x the "
                       f"{observation.ready_replicas} ready)"}[rule]
    if sizing_scale != service_scale:
        message = (f"observed mean service time {observed_ms:.0f} ms is {sizing_scale / service_scale:.3g}x the "
                   f"calibrated model's, beyond what the calibrator follows: sized as observed; ")
    else:
        message = ""
    if not attainable:
        message += (
            f"Service time alone (mean {mean_ms:.0f} ms, SCV {scv:.2f}, latency scale {latency_scale:.2f}) misses "
            f"p95 {target:g} ms; sizing {arrival_rps:.2f} req/s ({window}) = {load:.2f} erlangs for "
            f"{utilization:.0%} utilization -> {need}"
        )
    else:
        p95 = latency_scale * (response_quantile_ms(arrival_rps, mean_ms, scv, need * slots, policy.latency_quantile,
                                                    scv_arrival=ca2)
                               if need > 0 else mean_ms)
        features["predicted_p95_ms"] = p95
        message += (
            f"{arrival_rps:.2f} req/s ({window}) x {mean_ms:.0f} ms = {load:.2f} erlangs (service SCV {scv:.2f}, "
            f"arrival SCV {ca2:.2f}); {need} replicas x {slots} slots give predicted p95 {p95:.0f} ms <= {target:g} ms "
            f"at <= {utilization:.0%} utilization"
        )
    return message


def _forecast_need(
    observation: Observation, policy: ScalingPolicy, chosen: _Load, need: int, rule: str, message: str,
    size: _Sizer, features: dict[str, float]
) -> tuple[int, str, str]:
    """Forecast demand over the part of the start-up horizon the p95 target cannot absorb: start replicas before
    it arrives, and never scale down below it. A request may wait the target, so a replica that starts within the
    target after the demand shows is in time: the horizon is ``forecast_horizon_s - target``, and none (no
    forecast) when the target is at least the start-up time (:func:`_forecast_sizes` sizes it). Returns ``(need,
    rule, message)``, the rule ``forecast`` when the forecast needs more."""
    horizon_s = policy.forecast_horizon_s - policy.target_p95_latency_ms / 1000.0
    if policy.forecaster is None or not observation.arrival_counts or horizon_s <= 0:
        return need, rule, message
    features["forecast_horizon_s"] = horizon_s
    forecast = forecast_rate_rps(observation.arrival_counts, observation.count_bin_s, horizon_s,
                                 rule=policy.forecaster, window_s=policy.forecast_window_s,
                                 quantile=policy.forecast_quantile,
                                 span_s=policy.target_p95_latency_ms / 1000.0)
    if forecast is None:
        return need, rule, message
    factor = forecast.rate_rps / chosen.arrival_rps
    features.update(forecast_rps=forecast.rate_rps, forecast_factor=factor)
    if factor > 1.0:
        forecast_need, forecast_ok = _forecast_sizes(forecast, observation.current_replicas, chosen, size)
        features["forecast_need_replicas"] = float(forecast_need)
        if forecast_need > need:
            need, rule = forecast_need, "forecast"
            message = (
                f"{message}; the {forecast.rule} forecast of {forecast.rate_rps:.2f} req/s over the next "
                f"{horizon_s:g} s ({factor:.2f}x) needs {forecast_need}"
                + ("" if forecast_ok else " (SLO unattainable: sized for utilization)")
            )
    return need, rule, message


def _forecast_sizes(forecast: Forecast, current: int, chosen: _Load, size: _Sizer) -> tuple[int, bool]:
    """``(replicas, SLO attainable)`` for a forecast: its peak (``rate_rps``, a high quantile of recent peaks, which
    is headroom already) for the p95 target alone; the level a ramp brings (``level_rps``) for the p95 and the
    utilization target both, as the load is; and a scale-down stops where the peak at the utilization target
    would (hysteresis: sized for the p95 target alone, a steady load at a 7/8 boundary went 8 -> 7 -> 8 five times in
    10 minutes instead of twice; tests/unit/autoscaler/test_autoscaler_simulate.py).

    Measured (Pareto benchmark, 3 seeds, against sizing the peak at the utilization target as well): modality shift
    13.75-14.25 -> 13.25-13.51 replica-h (x oracle 1.21-1.26 -> 1.17-1.19), Mooncake 9.07-9.16 -> 8.96-9.03 h, on/off
    2.57-2.71 -> 2.46-2.70 h; the same SLO-minutes and burst counts on every trace and seed; Azure, ServeGen and
    long-request unchanged (docs/benchmarks.md)."""
    def scaled(rate_rps: float) -> _Load:
        f = rate_rps / chosen.arrival_rps
        return replace(chosen, arrival_rps=rate_rps, load_erlangs=chosen.load_erlangs * f)

    need, ok = replace(size, utilization=1.0)(scaled(forecast.rate_rps))
    if forecast.level_rps > chosen.arrival_rps:
        level_need, level_ok = size(scaled(forecast.level_rps))
        need, ok = max(need, level_need), ok and level_ok
    if current > need:
        need = max(need, min(current, size(scaled(forecast.rate_rps))[0]))
    return need, ok


def _utilization_band(observation: Observation, policy: ScalingPolicy, chosen: _Load, need: int, rule: str,
                      attainable: bool, latency_scale: float, ca2: float, features: dict[str, float]) -> None:
    """HPA's tolerance on the metric, not on the rounded count: when the steady load's need is set by the
    utilization target (``need = ceil(load / (slots x utilization))``) and the current replicas meet the p95 target,
    the unrounded need goes to ``features["utilization_need_replicas"]`` for :func:`finalize_recommendation`'s band.
    At a count boundary (3.0003 replicas' worth of load on 3) the rounded need flips 3 <-> 4 with every small change
    of the measured rate or service time; HPA compares ``usage / target`` with its tolerance instead (CI of stop 42:
    1 -> 3, then 3 -> 4 five seconds later at 0.45 erlangs for a 15 % target)."""
    current, slots = observation.current_replicas, policy.slots_per_replica
    if rule != "stable" or not attainable or current <= 0 or need == current:
        return
    unrounded = chosen.load_erlangs / (slots * policy.target_utilization_percent / 100.0)
    if need != max(1, math.ceil(unrounded - 1e-9)) or chosen.load_erlangs >= current * slots:
        return
    p95 = latency_scale * response_quantile_ms(chosen.arrival_rps, chosen.mean_ms, chosen.scv, current * slots,
                                               policy.latency_quantile, scv_arrival=ca2)
    if math.isfinite(p95) and p95 <= policy.target_p95_latency_ms:
        features["utilization_need_replicas"] = unrounded


def _rule_reason(need: int, current: int, rule: str, now_need: int, attainable: bool) -> Reason:
    """The reason of a predictive decision from the winning rule and the direction of the change."""
    if need > current:
        reason = {"stable": Reason.SCALE_UP_FOR_SLO, "burst": Reason.SCALE_UP_FOR_BURST,
                  "panic": Reason.SCALE_UP_FOR_PANIC, "forecast": Reason.SCALE_UP_FOR_FORECAST}[rule]
    elif need < current:
        reason = Reason.SCALE_DOWN_FOR_FORECAST if rule == "forecast" and now_need < need else Reason.SCALE_DOWN_IDLE
    else:
        reason = Reason.STEADY
    if not attainable and rule != "forecast" and need > current:
        reason = Reason.SLO_UNATTAINABLE
    return reason


def _backlog_need(
    observation: Observation, policy: ScalingPolicy, chosen: _Load, need: int, reason: Reason, message: str,
    features: dict[str, float]
) -> tuple[int, Reason, str]:
    """A backlog (queued requests) must also drain within ``backlog_drain_s``, with every slot busy:
    ``ceil((load + queued * mean_s / backlog_drain_s) / slots)`` replicas. Returns ``(need, reason, message)``."""
    queued = observation.queued_requests or 0.0
    if queued <= 0:
        return need, reason, message
    backlog_erlang_s = queued * chosen.mean_ms / 1000.0
    drain_need = math.ceil((chosen.load_erlangs + backlog_erlang_s / policy.backlog_drain_s)
                           / policy.slots_per_replica - 1e-9)
    features.update(queued_requests=queued, backlog_erlang_s=backlog_erlang_s,
                    backlog_need_replicas=float(drain_need))
    if drain_need > need:
        need = drain_need
        reason = Reason.SCALE_UP_FOR_BACKLOG if need > observation.current_replicas else Reason.STEADY
        message = (
            f"{message}; {queued:.0f} queued requests ({backlog_erlang_s:.0f} erlang-s) drain within "
            f"{policy.backlog_drain_s:g} s only with {need} replicas"
        )
    return need, reason, message


def _predictive_need(
    observation: Observation, policy: ScalingPolicy, state: ScalerState, model: ServiceTimePredictor, now: datetime
) -> tuple[int, Reason, str, dict[str, float], ScalerState]:
    """Replicas the predictive mode needs, as a pipeline of named steps (each pure):

    1. :func:`_calibrate_service`: the service-time scale (and the sizing scale when observation wins);
    2. arrival SCV from the per-bin counts (burst-aware sizing); Poisson (1.0) when unknown, too few, or disabled;
    3. :func:`_calibrate_latency`: the latency scale, on settled metrics only;
    4. :func:`_choose_rule`: each rule sizes a load (:class:`_Sizer`); the largest need wins and names the reason
       (:func:`_sizing_message`);
    5. :func:`_forecast_need`: forecast demand over the start-up horizon;
    6. :func:`_rule_reason` and :func:`_backlog_need`: the reason, then the queued backlog's need;
    7. :func:`_observed_queue`: the queue as observed;
    8. a staged front only: while the image encoder pool is the bottleneck (:func:`image_encoder_backlog`), the
       queue rules of 6-7 raise the need no higher than the current count or the model's need
       (``HeldForImageEncoder``): the front's queue is requests waiting on the pool. Before 1,
       :func:`_own_time` takes the pool's queue wait out of the front's observed service times.
    """
    assert observation.workload is not None
    current = observation.current_replicas
    features: dict[str, float] = {m.value + "_rps": 0.0 for m in MODALITIES}
    backlog = image_encoder_backlog(observation)
    observation = _own_time(observation, backlog, features)                                          # 0
    observation = _low_rate_window(observation, features)
    assert observation.workload is not None
    # latency calibration only on settled metrics: every replica ready, no replica change within two windows, and
    # no p95 made by a backlogged image encoder pool
    ready = observation.ready_replicas
    quiet_s = math.inf if state.last_change_at is None else (now - state.last_change_at).total_seconds()
    settled = (ready == current and ready > 0 and quiet_s >= 2 * observation.window_s and not is_partial(observation)
               and backlog is None)
    workloads = [observation.workload] + (
        [observation.recent_workload] if observation.recent_workload is not None else [])
    raw = _predict_raw_ms(workloads, model)

    stable, service_scale, sizing_scale, observed_ms, flat_raw_ms = _calibrate_service(              # 1
        observation, raw[0], policy, state, features)
    if flat_raw_ms is not None:  # sized as observed: the model's feature dependence is not trusted either
        raw = [np.full_like(r, flat_raw_ms) for r in raw]
    measured = arrival_scv(observation.arrival_counts) if policy.burst_aware and observation.arrival_counts else None
    ca2 = 1.0 if measured is None else measured                                                      # 2
    features["arrival_scv"] = ca2
    latency_scale = _calibrate_latency(observation, policy, state, stable, settled, ca2, features)   # 3
    state = replace(state, service_scale=service_scale, latency_scale=latency_scale)
    features.update(service_scale=service_scale, latency_scale=latency_scale, stable_load_erlangs=stable.load_erlangs,
                    sizing_service_scale=sizing_scale)

    size = _Sizer(policy.target_p95_latency_ms / latency_scale, policy.latency_quantile, policy.slots_per_replica,
                  policy.target_utilization_percent / 100.0, 2 * max(policy.max_replicas, current) + 1, ca2)
    chosen, rule, need, attainable = _choose_rule(observation, policy, stable, raw[1] if len(raw) > 1 else None,
                                                  sizing_scale, size, features)                      # 4
    if not chosen.classes:
        reason = Reason.SCALE_DOWN_IDLE if current > 0 else Reason.STEADY
        features.update(arrival_rps=0.0, offered_load_erlangs=0.0)
        need, reason, message, state = _observed_queue(0, reason, "No traffic in the window", features, observation,
                                                      policy, state, model_need=0)
        return need, reason, message, features, state
    message = _sizing_message(observation, policy, chosen, rule, need, attainable, sizing_scale, service_scale,
                              observed_ms, latency_scale, ca2, features)
    now_need = need
    need, rule, message = _forecast_need(observation, policy, chosen, need, rule, message, size, features)  # 5
    reason = _rule_reason(need, current, rule, now_need, attainable)                                # 6
    _utilization_band(observation, policy, chosen, need, rule, attainable, latency_scale, ca2, features)
    by_model = (need, reason, message)
    need, reason, message = _backlog_need(observation, policy, chosen, need, reason, message, features)
    timed_ratio = _timed_ratio(stable, sizing_scale)
    need, reason, message, state = _observed_queue(need, reason, message, features, observation, policy, state,  # 7
                                                  model_need=need, timed_ratio=timed_ratio)
    if backlog is not None and need > max(by_model[0], current):                                     # 8
        held = max(by_model[0], current)
        features["held_queue_need_replicas"] = float(need)
        reason = by_model[1] if by_model[0] > current else Reason.HELD_FOR_IMAGE_ENCODER
        message = (f"{by_model[2]}; the front's queue rules ask for {need}, held at {held}: its requests wait on the "
                   f"image encoder pool ({backlog}), which more front replicas cannot shorten")
        need = held
    return need, reason, message, features, state


_POOL_CLASSES = (Modality.IMAGE, Modality.IMAGE_TEXT)
"""A staged front's classes whose requests call the image encoder pool (``stages.IMAGE_CLASSES``)."""


def image_encoder_backlog(observation: Observation) -> str | None:
    """Whether a staged front's image encoder pool is its bottleneck (pure): more requests wait in the pool's
    queue than it has ready slots (``Observation.image_encoder_queued_requests`` > ``image_encoder_ready_slots``,
    at least 1), so the front's requests that call it wait there, holding their front slots. Returns what was seen
    (``40 queued on 4 ready slot(s)``), or None: not staged, unknown, or the pool keeps up."""
    queued, slots = observation.image_encoder_queued_requests, observation.image_encoder_ready_slots
    if queued is None or slots is None or queued <= max(slots, 1):
        return None
    return f"{queued:.0f} queued on {slots} ready slot(s)"


LOW_RATE_MIN_REQUESTS = 50.0
"""Fewer arrivals than this in the metrics window make its rate too noisy to size on alone (relative standard
error ``1 / sqrt(n)``: 22 % at the long-request trace's ~21 per minute, 14 % at 50): :func:`_low_rate_window`."""


def _low_rate_window(observation: Observation, features: dict[str, float]) -> Observation:
    """At a low rate, the rate over the most recent arrival-count bins that hold :data:`LOW_RATE_MIN_REQUESTS`
    (after the last level shift, :func:`modalscale.autoscaler.arrivals.level_shifts`; at most the counts' span)
    instead of the window's, when the window's count agrees with it (within 2 Poisson standard deviations): each
    class's rate is scaled to it, its mix kept. A window that disagrees is a change of demand and is sized as read.

    Why: on the long-request trace (0.35 req/s, ~18 s requests, ~21 per minute) the 60 s window's count scatters
    by ~22 %; each upward scatter was a scale-up and the scale-down window held the largest of them for a minute.
    Measured (benchmarks/autoscaler_pareto.py, 3 seeds, both with the recent-window rules off for targets that absorb
    a start-up, :func:`_choose_rule`): long-request 8.93 / 8.48 / 9.11 -> 8.50 / 8.55 / 8.78 replica-h at the same
    SLO-minutes; on/off seed 1 96.7 % / 2.69 h -> 98.3 % / 2.60 h (seeds 0 and 2 within 0.01 h); the other
    traces (>= 50 requests a minute) unchanged. Sets
    ``features["rate_window_s"]`` to the span used when it is longer than the window."""
    workload, counts, window_s = observation.workload, observation.arrival_counts, observation.window_s
    if not workload or not counts or observation.count_bin_s <= 0:
        return observation
    n_window = sum(c.rate_rps for c in workload) * window_s
    if n_window <= 0 or n_window >= LOW_RATE_MIN_REQUESTS:
        return observation
    c = np.asarray(counts, dtype=np.float64)
    shifts = level_shifts(c)
    c = c[shifts[-1] + 1:] if shifts else c
    held = np.cumsum(c[::-1])
    bins = min(c.size, int(np.searchsorted(held, LOW_RATE_MIN_REQUESTS)) + 1)
    span_s = bins * observation.count_bin_s
    if bins == 0 or span_s <= window_s:
        return observation
    rate_rps = float(held[bins - 1]) / span_s
    expected = rate_rps * window_s
    if abs(n_window - expected) > 2.0 * math.sqrt(max(expected, 1.0)):
        return observation
    factor = expected / n_window
    features["rate_window_s"] = span_s
    return replace(observation, workload=tuple(replace(w, rate_rps=w.rate_rps * factor) for w in workload))


def _own_time(observation: Observation, backlog: str | None, features: dict[str, float]) -> Observation:
    """A staged front's observation with the image encoder pool's queue wait taken out of its own service time
    (pure): its image and image+text classes' observed service times less ``image_encoder_wait_ms`` (at least
    1 ms), in both windows; while the pool is backlogged, also without the in-execution ages (each front request in
    execution is mostly waiting on the pool then, so its age is no bound on the front's service time). Unchanged
    for any other service."""
    wait_ms = observation.image_encoder_wait_ms
    if (wait_ms is None or wait_ms <= 0) and backlog is None:
        return observation

    def own(classes: tuple[WorkloadClass, ...] | None) -> tuple[WorkloadClass, ...] | None:
        if classes is None or not wait_ms:
            return classes
        return tuple(replace(c, observed_service_ms=max(1.0, c.observed_service_ms - wait_ms))
                     if c.modality in _POOL_CLASSES and c.observed_service_ms is not None else c for c in classes)

    if wait_ms:
        features["image_encoder_wait_ms"] = wait_ms
    changes: dict[str, Any] = {"workload": own(observation.workload),
                               "recent_workload": own(observation.recent_workload)}
    if backlog is not None:
        changes.update(executing_requests=None, executing_age_ms=None)
    return replace(observation, **changes)


def _observed_service(
    observation: Observation, stable: _Load, seen: list[tuple[float, float, float]]
) -> tuple[float | None, float | None, bool]:
    """``(observed mean service ms, the model's raw prediction for the same requests ms, from completions)``.

    Completed requests give their mean service time (rate-weighted over the classes that report one). Requests
    executing now count at their execution age so far, a lower bound on their service time: the mean over both,
    ``(n_done * mean_done + n_exec * mean_age) / (n_done + n_exec)`` with ``n_done = rate * window``, is a lower
    bound on the mean service time of those requests, and it exists even when none completed in the window (long
    requests). Being a lower bound it only ever raises the estimate: when it reads below the completed requests'
    mean (young requests just started), the completed mean is used. ``(None, None, False)`` without either.
    """
    if not stable.classes:
        return None, None, False
    rates = np.array([c.rate_rps for c in stable.classes])
    predicted_all = float((rates * stable.raw_ms).sum() / rates.sum())
    done_n, done_ms, predicted_ms = 0.0, 0.0, predicted_all
    if seen:
        weight = sum(r for r, _, _ in seen)
        done_ms = sum(r * o for r, o, _ in seen) / weight
        predicted_ms = sum(r * p for r, _, p in seen) / weight
        done_n = weight * observation.window_s
    exec_n, exec_ms = observation.executing_requests, observation.executing_age_ms
    if exec_n is None or exec_ms is None or exec_n <= 0 or exec_ms <= 0:
        return (done_ms, predicted_ms, True) if seen else (None, None, False)
    total = done_n + exec_n
    bound_ms = (done_n * done_ms + exec_n * exec_ms) / total
    predicted = (done_n * predicted_ms + exec_n * predicted_all) / total
    if seen and bound_ms / predicted <= done_ms / predicted_ms:
        return done_ms, predicted_ms, True  # a lower bound only ever raises the estimate
    return bound_ms, predicted, False


def _timed_ratio(stable: _Load, sizing_scale: float) -> dict[Modality, float]:
    """Per modality, the stable window's timed service time over the sized one (pure): the rate-weighted ratio of
    means over its timed classes (a modality may come in several classes or buckets; a class of no traffic counts
    as one request a second), ``sum(rate x observed ms) / sum(rate x sized ms)``; a modality with no timed class is
    absent."""
    observed: dict[Modality, float] = {}
    sized: dict[Modality, float] = {}
    for c, raw_ms in zip(stable.classes, stable.raw_ms, strict=True):
        if c.observed_service_ms is None or c.observed_service_ms <= 0 or raw_ms * sizing_scale <= 0:
            continue
        m, weight = Modality(c.modality), c.rate_rps if c.rate_rps > 0 else 1.0
        observed[m] = observed.get(m, 0.0) + weight * c.observed_service_ms
        sized[m] = sized.get(m, 0.0) + weight * float(raw_ms) * sizing_scale
    return {m: observed[m] / sized[m] for m in observed}


def _observed_queue(
    need: int, reason: Reason, message: str, features: dict[str, float], observation: Observation,
    policy: ScalingPolicy, state: ScalerState, model_need: int, *, standing: bool = False,
    timed_ratio: Mapping[Modality, float] | None = None,
) -> tuple[int, Reason, str, ScalerState]:
    """Observation over assumption: when the observed queue or latency contradicts the model, size from it.

    Contradictions, each beyond the noise of a well-sized pool (``margin`` = the calibrator's ``max_scale``, 2):
    the requests in flight grew across the last two decisions, exceeded ``margin`` x the ready slots (as many
    waiting as executing) at all three (a queue that persists, not one burst) and now hold more than the p95
    target's worth of arrivals (Little's law, ``in_flight / arrival_rps`` s); their mean age already exceeds
    the p95 target; or the observed p95 exceeds ``margin`` x the target while the model says the current
    replicas suffice. Each needs a queue now: more requests in flight than the ready replicas' slots (a slow
    request that holds a slot of its own is the service time, the calibrators' job; more replicas would not
    shorten it, and one in-flight sample over a low utilization target would size many). Then the needed
    concurrency is the observed one (Little's law: requests in flight = arrival rate x time in the system,
    whatever the service time really is), and KPA's rule sizes it:
    ``ceil(in_flight / (slots_per_replica * target_utilization))`` (Knative Serving's concurrency autoscaler,
    ``desired = observed concurrency / target concurrency per pod``), or :func:`_in_flight_drain`'s fewer replicas
    when the service time was timed on completed requests and explains the queue. It only raises the need
    (``ScaleUpForObservedQueue``), never lowers it, and needs ``in_flight_requests``.

    ``standing`` (Utilization mode: :func:`_standing_queue`): one more contradiction, a queue that stands at two
    samples in a row (decisions that read new scrapes; in flight above ``margin`` x the ready slots at both, and
    more than the target's worth of arrivals now): the busy fraction the HPA rule reads cannot go above 100 %, so it
    asks for at most ``1 / target utilization`` x the ready replicas a decision, and holds while replicas start,
    however long the queue. The target is the stage's (``observation.stage_target_p95_ms``, the pool's share) when
    set, else the policy's; the arrival rate is the workload's.
    """
    in_flight = observation.in_flight_requests
    if in_flight is None:  # a decision without the count breaks the run of decisions the history is about
        return need, reason, message, (replace(state, in_flight_history=(), in_flight_times=())
                                       if state.in_flight_history else state)
    history, grew, state = _in_flight_sample(in_flight, observation, policy, state)
    features["in_flight_requests"] = in_flight
    slots = policy.slots_per_replica
    target = observation.stage_target_p95_ms or policy.target_p95_latency_ms
    why = []
    margin = policy.calibrator.max_scale  # a disagreement beyond what the calibrator follows, not noise
    serving = observation.ready_replicas * slots
    arrival_rps = float(features.get("arrival_rps", 0.0))
    if standing and observation.workload:
        arrival_rps = sum(c.rate_rps for c in observation.workload)
    little_s = in_flight / arrival_rps if arrival_rps > 0 else math.inf  # Little's law: W = L / lambda
    if (standing and history and min(history[-1], in_flight) > margin * max(serving, 1)
            and little_s * 1000.0 > target):
        why.append(f"a queue stands: {history[-1]:.0f} -> {in_flight:.0f} in flight on {serving} ready slot(s) at "
                   f"two decisions, {little_s:.1f} s of arrivals (Little's law) against the {target / 1000:g} s "
                   f"target, while the busy fraction cannot read above 100 %")
    if (len(history) == 2 and in_flight > history[-1] > history[-2] and history[-2] > margin * max(serving, 1)
            and little_s * 1000.0 > target):
        why.append(f"in flight grew {history[-2]:.0f} -> {history[-1]:.0f} -> {in_flight:.0f} over two decisions, "
                   f"{little_s:.0f} s of arrivals (Little's law) against the {target / 1000:g} s target")
    age = observation.in_flight_age_ms
    if age is not None and in_flight > 0 and age > target:
        why.append(f"in-flight requests are {age:.0f} ms old on average (target p95 {target:g} ms)")
    p95 = observation.p95_latency_ms
    if p95 is not None and p95 > margin * target and model_need <= observation.current_replicas:
        why.append(f"observed p95 {p95:.0f} ms > {margin:g}x the target {target:g} ms while the model says "
                   f"{observation.current_replicas} replicas suffice")
    if not why or in_flight <= serving:  # no request waits for a slot: more replicas shorten none of them
        return need, reason, message, state
    utilization = policy.target_utilization_percent / 100.0
    observed_need = math.ceil(in_flight / (slots * utilization) - 1e-9)
    how = (f"{in_flight:.0f} requests in flight / ({slots} slots x {utilization:.0%}) need {observed_need} replicas "
           "(Little's law, KPA)")
    drain = None if standing else _in_flight_drain(in_flight, grew, arrival_rps, observation, policy, target, features,
                                                   timed_ratio or {})
    if drain is not None and drain[0] < observed_need:
        how = (f"{in_flight:.0f} requests in flight of {drain[1]:.0f} ms (as timed) drain within {drain[2]:g} s "
               f"while the requests go on arriving with {drain[0]} replicas (Little's law; KPA's slot per request: "
               f"{observed_need})")
        observed_need = drain[0]
    features["observed_queue_need_replicas"] = float(observed_need)
    if observed_need <= need:
        return need, reason, message, state
    message = f"{message}; observation contradicts the model ({'; '.join(why)}): {how}"
    reason = Reason.SCALE_UP_FOR_OBSERVED_QUEUE if observed_need > observation.current_replicas else reason
    return observed_need, reason, message, state


def _in_flight_sample(in_flight: float, observation: Observation, policy: ScalingPolicy, state: ScalerState
                      ) -> tuple[tuple[float, ...], tuple[float, float] | None, ScalerState]:
    """This decision's count of requests in flight against the samples before it (pure). Returns ``(history, grew,
    state)``: the counts of the distinct samples before this one, oldest first (at most two); ``grew``, the
    ``(requests, seconds)`` the count rose between the last two samples, over the time between them; and the state
    holding this sample.

    A sample is the count and when it was scraped (``observation.in_flight_at``, else ``observed_at``; to the
    millisecond, as status stores it), so the growth is a rate over the time between scrapes, whatever the time
    between decisions: a decision may read a scrape from up to a scrape interval before it, or the same scrape as the
    decision before (decisions more often than scrapes), which adds nothing: the history stays and the growth is the
    last two samples'. ``grew`` is None when unknown: fewer than two samples, samples further apart than the metrics
    age limit (``max_metrics_age_s``, at least two decision intervals: held or missing decisions, decisions of a mode
    that reads no count between them, or scrapes sparser than that), a sample older than the last one, or samples
    stored without their times (a status written before they were kept)."""
    sampled = observation.in_flight_at or observation.observed_at
    at = sampled.replace(microsecond=sampled.microsecond // 1000 * 1000)
    counts, times = state.in_flight_history, state.in_flight_times
    if len(times) != len(counts):  # counts without their times: this sample starts a new history
        return counts, None, replace(state, in_flight_history=(in_flight,), in_flight_times=(at,))

    def growth(before: float, t_before: datetime, now: float, t_now: datetime) -> tuple[float, float] | None:
        seconds = (t_now - t_before).total_seconds()
        limit_s = max(2 * policy.decision_interval_s, policy.max_metrics_age_s)
        return (now - before, seconds) if 0 < seconds <= limit_s else None

    if times and at <= times[-1]:  # the same scrape again (or an older one): nothing new was observed
        if at < times[-1]:
            return counts, None, state
        return counts[:-1], growth(counts[0], times[0], counts[1], times[1]) if len(counts) == 2 else None, state
    grew = growth(counts[-1], times[-1], in_flight, at) if counts else None
    return counts, grew, replace(state, in_flight_history=(counts + (in_flight,))[-2:],
                                 in_flight_times=(times + (at,))[-2:])


def _in_flight_drain(in_flight: float, grew: tuple[float, float] | None, arrival_rps: float, observation: Observation,
                     policy: ScalingPolicy, target_ms: float, features: Mapping[str, float],
                     timed_ratio: Mapping[Modality, float]) -> tuple[int, float, float] | None:
    """The replicas that drain the requests in flight, when their service time is known: ``(replicas, service ms,
    drain s)``, or None (pure).

    KPA's rule gives every request in flight a slot of its own, right when a request's service time is as long as
    the time it may take (long requests), and far too many when it is short: 233 requests of 843 ms queued behind 4
    replicas asked for 259 where 24 clear them in a minute. So the work in flight drains within the backlog rule's
    ``backlog_drain_s`` (or the p95 target when longer) while the arrivals go on:
    ``ceil((rate x S + in_flight x min(1, S / drain_s)) / (slots x utilization))``, which is KPA's ``in_flight``
    again once S reaches the drain time. Never below what was observed: S is the rate-weighted mean over the sized
    window's classes of the sized service time raised by its modality's timed / sized ratio in the stable window when
    above 1 (``timed_ratio``: completed requests; the burst or panic window's requests are not the timed ones, but
    the model's error on their modality is), a staged front's image classes with the image encoder pool's wait added
    (its slot stays held through it), and at least the observed mean (``features["observed_service_ms"]``, which
    counts in-execution ages); the rate is the larger of the counted one and the ready slots' throughput at S (at
    most the counted rate) plus the growth of the requests in flight between their last two samples (``grew``:
    requests, seconds; over the time between the scrapes, not the decision interval, which a late or early decision,
    or a scrape older than its decision, would over- or under-count):
    the runtime counts a request when it executes, so under a queue its count is the throughput, while a gateway
    counts on arrival.
    None, and KPA's rule stands, when a modality of the sized window has no timed class in the stable window (the
    model's assumption alone; a class or bucket with no timing of its own carries its modality's ratio, as a burst
    window's classes do); when the growth is unknown (``grew`` None: fewer than two samples of the count, or samples
    more than two decision intervals apart: the requests arriving beyond the counted ones are unknown;
    :func:`_in_flight_sample`); or when S says the ready slots serve at least ``margin`` x the counted requests
    while the queue shrank less than 1 / ``margin`` of what they would clear at S between the samples (standing,
    growing, or shrinking by a few): the time does not explain the queue (replicas slower than timed, requests held
    elsewhere), and only the concurrency is observed. ``margin`` is the calibrator's ``max_scale`` (2), as for the
    contradictions. The ages of the requests executing now are no such test: sampled at an instant they are
    length-biased, ``S x (1 + SCV) / 2`` on average, twice S and more for image sizes (2.5-3.3 s against 0.84 s at
    the benchmark's modality shift); they count through ``observed_service_ms``, a lower bound.
    """
    wait_ms = float(features.get("image_encoder_wait_ms", 0.0))
    weighted = total = 0.0
    for m in MODALITIES:
        rate = float(features.get(m.value + "_rps", 0.0))
        if rate <= 0:
            continue
        if m not in timed_ratio:
            return None
        sized_ms = float(features.get(m.value + "_service_ms", 0.0))
        weighted += rate * (sized_ms * max(1.0, timed_ratio[m]) + (wait_ms if m in _POOL_CLASSES else 0.0))
        total += rate
    if total <= 0:
        return None
    mean_ms = max(weighted / total, float(features.get("observed_service_ms", 0.0)))
    mean_s, margin = mean_ms / 1000.0, policy.calibrator.max_scale
    if grew is None:
        return None
    grew_requests, since_s = grew
    ready_slots = observation.ready_replicas * policy.slots_per_replica
    if (arrival_rps * mean_s * margin <= ready_slots
            and -grew_requests * margin < (ready_slots / mean_s - arrival_rps) * since_s):
        return None
    # the arrivals: the counted rate, or the slots' throughput at S plus the queue's growth when the count is the
    # throughput (the runtime counts a request when it executes); never both (a gateway counts on arrival)
    rate_rps = max(arrival_rps, min(arrival_rps, ready_slots / mean_s) + max(0.0, grew_requests) / since_s)
    drain_s = max(target_ms / 1000.0, policy.backlog_drain_s)
    erlangs = rate_rps * mean_s + in_flight * min(1.0, mean_s / drain_s)
    utilization = policy.target_utilization_percent / 100.0
    return math.ceil(erlangs / (policy.slots_per_replica * utilization) - 1e-9), mean_ms, drain_s


def _standing_queue(observation: Observation, policy: ScalingPolicy, state: ScalerState, need: int, reason: Reason,
                    message: str, features: Mapping[str, float]
                    ) -> tuple[int, Reason, str, dict[str, float], ScalerState]:
    """Utilization mode's observed-queue rule: :func:`_observed_queue` with its ``standing`` contradiction (a queue
    the HPA rule cannot see beyond 100 % busy), raising the HPA rule's ``need`` (``ScaleUpForObservedQueue``); the
    image encoder pool of a staged service is sized by it within two samples of a backlog (decisions that read new
    scrapes). Without
    ``in_flight_requests`` nothing changes (the state neither)."""
    out = dict(features)
    need, reason, message, state = _observed_queue(need, reason, message, out, observation, policy, state,
                                                  model_need=need, standing=True)
    return need, reason, message, out, state


def stage_latency_need(observation: Observation, policy: ScalingPolicy) -> tuple[int | None, str]:
    """Replicas that keep one stage's p95 response time within ``observation.stage_target_p95_ms`` (pure).

    The stage is sized as an M/G/c queue of its executions (Triton runs a batch in one slot): executions arrive at
    ``rate_rps / mean_batch_size`` per s, each takes ``observed_service_ms x mean_batch_size`` ms
    (``observed_service_ms`` is a request's share of the busy slot time, ``metrics_parse``), ``slots_per_replica``
    run at once per replica; :func:`modalscale.autoscaler.queueing.replicas_for_slo` finds the least count whose
    p95 (Allen-Cunneen wait + gamma service tail, SCV from the class or ``policy.default_service_scv``) meets the
    target. Summed over classes by offered load (the stage has one class in practice: image requests).

    Returns:
        ``(replicas, why)``; replicas None when the rule cannot size (no target, no workload or no observed
        execution time, or execution alone misses the target, which more replicas of the same batch cannot fix):
        ``why`` says which.
    """
    target_ms = observation.stage_target_p95_ms
    if target_ms is None:
        return None, "no stage latency target"
    classes = [c for c in observation.workload or () if c.rate_rps > 0]
    if not classes:
        return None, "no request in the window"
    timed = [c for c in classes if c.observed_service_ms is not None and c.observed_service_ms > 0]
    if len(timed) < len(classes):
        return None, "no observed execution time"
    executions_rps = sum(c.rate_rps / c.mean_batch_size for c in timed)
    busy_ms_per_s = sum(c.rate_rps * (c.observed_service_ms or 0.0) for c in timed)  # = busy erlangs x 1000
    service_ms = busy_ms_per_s / executions_rps  # one execution's duration: observed per request x batch size
    scv = max(policy.default_service_scv if c.service_scv is None else c.service_scv for c in timed)
    if not slo_attainable(service_ms, scv, target_ms, policy.latency_quantile):
        return None, (f"one execution ({service_ms:.0f} ms) alone misses the stage's p95 target {target_ms:.0f} ms; "
                      f"more replicas cannot fix that")
    need = replicas_for_slo(executions_rps, service_ms, scv, policy.slots_per_replica, target_ms, 1.0,
                            policy.max_replicas)
    return need, (f"{executions_rps:.2f} executions/s x {service_ms:.0f} ms over {policy.slots_per_replica} "
                  f"slot(s) per replica: {need} replica(s) keep the p95 within {target_ms:.0f} ms")


def _with_stage_latency(observation: Observation, policy: ScalingPolicy, need: int, reason: Reason, message: str,
                        features: Mapping[str, float]) -> tuple[int, Reason, str, dict[str, float]]:
    """The Utilization rule's need raised to :func:`stage_latency_need` when that is higher (``ScaleUpForSLO``)."""
    assert observation.stage_target_p95_ms is not None
    latency_need, why = stage_latency_need(observation, policy)
    out = {**features, "stage_target_p95_ms": float(observation.stage_target_p95_ms)}
    if latency_need is None:
        return need, reason, f"{message}; stage latency rule: {why}", out
    out["stage_latency_replicas"] = float(latency_need)
    if latency_need <= need:
        return need, reason, f"{message}; stage latency rule: {why}", out
    current = observation.current_replicas
    reason = Reason.SCALE_UP_FOR_SLO if latency_need > current else Reason.STEADY if latency_need == current \
        else Reason.SCALE_DOWN_FOR_UTILIZATION
    return latency_need, reason, f"{message}; raised by the stage latency rule: {why}", out


def _utilization_need(observation: Observation, policy: ScalingPolicy) -> tuple[int, Reason, str, dict[str, float]]:
    """HPA rule ``ceil(ready * utilization / target)``; replicas still starting are handled as HPA handles unready
    pods: counted idle when the ready ones ask to scale up, counted at the target when they ask to scale down,
    and no change when counting them flips the direction."""
    assert observation.utilization_ratio is not None
    ready = observation.ready_replicas
    current = observation.current_replicas
    pending = max(0, current - ready)
    target = policy.target_utilization_percent / 100.0
    utilization = observation.utilization_ratio
    busy = ready * utilization
    counted = f"{ready} ready x {utilization:.0%} busy"
    need = math.ceil(busy / target - 1e-9)
    if pending > 0:
        scaling_up = utilization > target
        if not scaling_up:  # unready replicas count as busy at the target when scaling down
            busy += pending * target
            need = math.ceil(busy / target - 1e-9)
            counted += f" + {pending} starting at target"
        else:
            counted += f" + {pending} starting counted idle"
        if (need > current) != scaling_up and need != current:
            counted += "; counting starting replicas flips the direction, so no change"
            need = current
    features = {
        "utilization_ratio": float(utilization),
        "ready_replicas": float(ready),
        "pending_replicas": float(pending),
        "busy_replicas": float(busy),
    }
    reason = (
        Reason.SCALE_UP_FOR_UTILIZATION if need > current
        else Reason.SCALE_DOWN_FOR_UTILIZATION if need < current
        else Reason.STEADY
    )
    message = f"{counted} = {busy:.2f} busy replicas / target {target:.0%} -> {need}"
    return need, reason, message, features
