"""Pure glue between the autoscaler's ``Decision`` and an InferenceService's status.

``plan_autoscale(status, decision, reading, service_time_model, ...)`` decides what to write:
``status.desiredReplicas`` (only for a valid decision that changes it: never scale on data that could not be read),
the ``status.autoscaler`` block (only when the outcome changed, or as a heartbeat every ``refresh_s``), and the
conditions ``MetricsAvailable`` and ``CostModelLoaded`` (whole list, only when it changed).

The scaler's memory (``ScalerState``) lives in ``status.autoscaler.state`` so that a restarted or newly elected
operator continues the stabilization windows. Runs of equal recommendations are kept as their newest entry only:
the policy takes the MIN (scale-up window) or MAX (scale-down window) of the recommendations newer than a cutoff,
and a run of equal values takes part exactly when its newest entry does, so this compression changes no
decision. Beyond ``MAX_RECOMMENDATIONS`` runs the oldest are dropped.
"""

from __future__ import annotations

import datetime as dt
import math
from dataclasses import dataclass, replace
from typing import Any

from modalscale.api.conditions import (  # condition types and reasons: one module per kind
    COST_MODEL_LOADED,
    FRONT_AT_ZERO,
    METRICS_AVAILABLE,
    METRICS_READ,
    NO_SERVICE_METRICS,
    STALE_METRICS,
)
from modalscale.api.isvc_status import AutoscalerRecord, IsvcStatus, ScalerState, StageRecord, write_isvc_status
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import Decision, Reason, ScalingMode
from modalscale.operator import conditions as cond
from modalscale.operator.isvc.objects import STAGE_IMAGE_ENCODER

MAX_RECOMMENDATIONS = 240
"""Bound of ``status.autoscaler.state.recommendations`` (the CRD's ``maxItems``)."""
MAX_FEATURES = 32
"""Bound of ``status.autoscaler.features`` (the CRD's ``maxProperties``)."""
MESSAGE_CHARS = 1024


@dataclass(frozen=True)
class ServiceTimeModelStatus:
    """Outcome of loading the service-time model: a ``CostModelLoaded`` condition's status, reason and message.

    (``CostModelLoaded`` is the condition's API name, kept so stored objects and clients that wait on it still work.)
    """

    loaded: bool
    reason: str
    message: str


@dataclass(frozen=True)
class AutoscalePlan:
    """What to write after one decision.

    Attributes:
        status: The autoscaler's part of the status (``desiredReplicas``, ``autoscaler``, ``conditions``; a field
            left None is not written).
        stored: The status the decision was planned on (the base of the merge patch).
        desired_changed: ``status.desiredReplicas`` changes: reconcile at once so the Deployment follows.
        metrics_available: Whether the metrics of the mode used were read.
        metrics_reason: The ``MetricsAvailable`` reason.
        events: ``(type, reason, message)`` Events to post once the status is written: one
            :func:`scale_event` when ``desiredReplicas`` changes, none otherwise.
    """

    status: IsvcStatus
    stored: IsvcStatus
    desired_changed: bool
    metrics_available: bool
    metrics_reason: str
    events: tuple[tuple[str, str, str], ...] = ()

    @property
    def status_patch(self) -> dict[str, Any]:
        """The merge patch the writer sends (``{}`` = nothing to write): ``write_isvc_status(status, stored)``."""
        return write_isvc_status(self.status, self.stored)


def compress_recommendations(state: ScalerState, max_items: int = MAX_RECOMMENDATIONS) -> ScalerState:
    """Keep the newest entry of each run of equal recommendations, at most ``max_items`` runs (newest kept).

    Recommendation times are rounded down to whole seconds (as stored in status) so that the in-memory state and
    a state reloaded from status decide alike.
    """
    kept: list[tuple[dt.datetime, int]] = []
    for t, r in state.recommendations:
        t = t.replace(microsecond=0)
        if kept and kept[-1][1] == r:
            kept[-1] = (max(t, kept[-1][0]), r)
        else:
            kept.append((t, r))
    return replace(state, recommendations=tuple(kept[-max_items:]))


def status_features(decision: Decision, reading: MetricsReading,
                    utilization_ratio: float | None) -> dict[str, float]:
    """At most ``MAX_FEATURES`` finite numbers behind the decision, rounded to 4 decimals.

    The policy's own features come first (sorted by name), then the reading's extras and the utilization.
    """
    merged: dict[str, float] = {}
    extra = dict(reading.extra)
    if utilization_ratio is not None:
        extra["utilization_ratio"] = utilization_ratio
    for source in (decision.features, extra):
        for key in sorted(source):
            value = float(source[key])
            if key not in merged and math.isfinite(value) and len(merged) < MAX_FEATURES:
                merged[key] = round(value, 4)
    return merged


def metrics_outcome(decision: Decision, reading: MetricsReading) -> tuple[bool, str, str]:
    """``(available, reason, message)`` of the ``MetricsAvailable`` condition for the mode actually used."""
    if decision.mode_used == ScalingMode.FIXED:
        return True, METRICS_READ, "Fixed mode needs no metrics"
    if decision.reason == Reason.HELD_STALE_METRICS:
        return False, STALE_METRICS, decision.message
    needed = reading.workload if decision.mode_used == ScalingMode.PREDICTIVE else reading.busy_erlangs
    if needed is None:
        if reading.problem is not None:
            return False, reading.problem[0], reading.problem[1]
        return False, NO_SERVICE_METRICS, ("no Triton compute metrics (nv_inference_compute_*_duration_us) for "
                                           "the Utilization policy")
    if reading.problem is not None:  # read, but partly (some targets down)
        return True, reading.problem[0], reading.problem[1]
    return True, METRICS_READ, (f"read {reading.targets_up} scrape target(s) for {decision.mode_used.value} mode")


def plan_autoscale(status: IsvcStatus, decision: Decision, reading: MetricsReading,
                   service_time_model: ServiceTimeModelStatus | None, *, generation: int, now: dt.datetime,
                   utilization_ratio: float | None = None, refresh_s: float = 60.0) -> AutoscalePlan:
    """Decide the status writes of one autoscaler decision (pure).

    Args:
        status: The InferenceService's status as read now (``read_isvc_status``).
        decision: From ``recommend``; its ``state`` is stored (compressed).
        reading: The metrics reading behind it.
        service_time_model: Outcome of loading the service-time model; None leaves ``CostModelLoaded`` alone.
        generation: ``metadata.generation`` (the conditions' ``observedGeneration``).
        now: Timezone-aware UTC.
        utilization_ratio: The observation's utilization (for status features), if known.
        refresh_s: Rewrite an unchanged ``status.autoscaler`` after this many seconds (heartbeat), s.
    Returns:
        The plan; an invalid decision never changes ``desiredReplicas``.
    """
    old = status.autoscaler or AutoscalerRecord()
    available, reason, message = metrics_outcome(decision, reading)
    desired_changed = decision.valid and status.desired_replicas != decision.desired_replicas
    block = AutoscalerRecord(
        mode=decision.mode_used.value, valid=bool(decision.valid), reason=decision.reason.value,
        message=decision.message[:MESSAGE_CHARS], last_decision_time=now.replace(microsecond=0),
        metrics_available=available, features=status_features(decision, reading, utilization_ratio),
        state=compress_recommendations(decision.state))
    outcome_changed = (old.mode, old.valid, old.reason, old.metrics_available) != (
        block.mode, block.valid, block.reason, block.metrics_available)
    last = old.last_decision_time
    stale = last is None or (now - last).total_seconds() >= refresh_s

    wanted = [cond.Condition(METRICS_AVAILABLE, cond.TRUE if available else cond.FALSE, reason, message)]
    if service_time_model is not None:
        wanted.append(cond.Condition(COST_MODEL_LOADED, cond.TRUE if service_time_model.loaded else cond.FALSE,
                                     service_time_model.reason, service_time_model.message))
    old_conditions = list(status.conditions or ())
    new_conditions = cond.upsert(old_conditions, wanted, generation, now)
    part = IsvcStatus(desired_replicas=int(decision.desired_replicas) if desired_changed else None,
                      autoscaler=block if desired_changed or outcome_changed or stale else None,
                      conditions=tuple(new_conditions) if new_conditions != old_conditions else None)
    events = (scale_event(status, block, int(decision.desired_replicas)),) if desired_changed else ()
    return AutoscalePlan(status=part, stored=status, desired_changed=desired_changed, metrics_available=available,
                         metrics_reason=reason, events=events)


def scale_event(status: IsvcStatus, block: AutoscalerRecord, desired: int) -> tuple[str, str, str]:
    """The ``(type, reason, message)`` Event of a new replica count for the service (its front pool) (pure): what
    an HPA's ``SuccessfulRescale`` Event says ("New size: N; reason: ..."), with the decision's own reason, so
    ``kubectl describe`` and ``kubectl get events`` show why it scaled, as they do for the encoder pool
    (:func:`pool_scale_event`).

    Args:
        status: The status as stored before this decision.
        block: The new ``autoscaler`` block (reason and message of the decision).
        desired: The new ``desiredReplicas``.
    Returns:
        ``("Normal", block.reason, "replicas: BEFORE -> AFTER (REASON: MESSAGE)")``; BEFORE is the stored
        ``desiredReplicas``, else the stored ``replicas``, else 0.
    """
    before = next((n for n in (status.desired_replicas, status.replicas) if n is not None), 0)
    reason = block.reason or ""
    detail = f"{reason}: {block.message}" if block.message else reason
    return "Normal", reason, f"replicas: {before} -> {desired} ({detail})"


def plan_activation(status: IsvcStatus, decision: Decision, now: dt.datetime) -> IsvcStatus:
    """The autoscaler's status part of an activation decision (``modalscale.autoscaler.policy.activate``; pure).

    A valid decision sets ``desiredReplicas``; both kinds rewrite ``status.autoscaler`` (reason, message, time,
    features, state) and keep what only a metrics reading knows (``metricsAvailable``; the ``MetricsAvailable``
    and ``CostModelLoaded`` conditions are left alone: no metrics were read).
    """
    block = replace(status.autoscaler or AutoscalerRecord(), mode=decision.mode_used.value,
                    valid=bool(decision.valid), reason=decision.reason.value,
                    message=decision.message[:MESSAGE_CHARS], last_decision_time=now.replace(microsecond=0),
                    features={k: round(float(v), 4) for k, v in sorted(decision.features.items())
                              if math.isfinite(v)},
                    state=compress_recommendations(decision.state))
    return IsvcStatus(desired_replicas=int(decision.desired_replicas) if decision.valid else None, autoscaler=block)


@dataclass(frozen=True)
class PoolAutoscalePlan:
    """What to write after one decision of a staged service's image encoder pool.

    Attributes:
        status: ``IsvcStatus(stages=...)``: the stored list with the pool item's ``autoscaler`` block replaced (the
            list is written whole); an empty status when nothing is to be written.
        stored: The status the decision was planned on.
        desired_changed: The pool's count (``autoscaler.desiredReplicas``) changes: apply it at once through the
            single planner (``isvc.reconcile.scale_isvc``).
        metrics_available: Whether the pool's metrics were read (None: no decision, the front is at 0).
        events: ``(type, reason, message)`` Events to post on the InferenceService: one ``Normal`` Event when the
            pool's count changes (reason: the decision's :class:`modalscale.api.conditions.ScalingReason`; message
            ``image encoder pool: 1 -> 2 (ScaleUpForUtilization: ...)``), none otherwise (a rerun of the same
            decision posts nothing: the count is already the stored one).
    """

    status: IsvcStatus
    stored: IsvcStatus
    desired_changed: bool
    metrics_available: bool | None
    events: tuple[tuple[str, str, str], ...] = ()

    def applied_events(self, applied: StageRecord | None) -> tuple[tuple[str, str, str], ...]:
        """:attr:`events` as the single planner applied the count (pure): the pool's Event names the replicas it
        writes after a BudgetPolicy cap's split (:func:`pool_scale_event` with ``applied``).

        Args:
            applied: The pool's ``status.stages`` item of the planner's plan for this decision (its
                ``desired_replicas``, reason and message); None = no plan (the spec was refused): the decision's
                Event as it is.
        """
        item = self.stored.stage(STAGE_IMAGE_ENCODER)
        block = self.status.stage(STAGE_IMAGE_ENCODER)
        if not self.events or applied is None or item is None or block is None or block.autoscaler is None:
            return self.events
        return (pool_scale_event(item, block.autoscaler, applied),)


def pool_decision_held(status: IsvcStatus, front: dict[str, Any] | None, pool: dict[str, Any] | None
                       ) -> str | None:
    """Why the image encoder pool takes no decision now, or None when it may (pure; issue 24).

    The reconcile creates the pool's Deployment and its ``status.stages`` item first. The front's Deployment (as
    read under the object's lock) must exist too: the pool's share of a BudgetPolicy cap over both pools is split
    with the front's count (``isvc.plan.image_encoder_budget_cap``), which the planner takes from
    ``status.desiredReplicas`` only while that Deployment exists (``decide_replicas``), and the front is what sends
    the pool its work. Without it (before the first reconcile creates it, deleted) that count and that traffic are
    not known: the pool holds, as the front's own decision does without its Deployment, rather than scale on data
    that could not be read (the planner still splits any cap on each reconcile).

    Args:
        status: The InferenceService's status as read now.
        front, pool: The Deployments ``<name>`` and ``<name>-image-encoder`` as read now; None = not found.
    """
    if status.stage(STAGE_IMAGE_ENCODER) is None:
        return "status.stages has no image-encoder item yet"
    if pool is None:
        return "the image encoder pool's Deployment is not found"
    if front is None:
        return "the front's Deployment is not found"
    return None


def plan_image_encoder_autoscale(status: IsvcStatus, decision: Decision | None, reading: MetricsReading, *,
                                 now: dt.datetime, utilization_ratio: float | None = None,
                                 refresh_s: float = 60.0) -> PoolAutoscalePlan:
    """Decide the status write of one image encoder pool decision (pure; issue 24).

    Args:
        status: The InferenceService's status as read now; nothing is written while it has no
            ``stages[image-encoder]`` item (the reconcile writes the list first).
        decision: ``recommend`` with ``autoscaler.policy.image_encoder_policy``; None = the front pool is at 0, so
            no decision was taken: the block records ``FrontAtZero`` without a count or a state (the pool restarts
            from ``minReplicas`` and a fresh history when the front comes back).
        reading: The pool's metrics reading (``component="image-encoder"``).
        now: Timezone-aware UTC.
        utilization_ratio: The pool observation's utilization (for the block's features), if known.
        refresh_s: Rewrite an unchanged block after this many seconds (heartbeat), s.
    Returns:
        The plan; a decision that is not valid never changes the count (the last valid one is kept); a new count
        comes with its Event (:func:`pool_scale_event`).
    """
    item = status.stage(STAGE_IMAGE_ENCODER)
    if item is None:
        return PoolAutoscalePlan(IsvcStatus(), status, False, None)
    old = item.autoscaler or AutoscalerRecord()
    if decision is None:
        block = AutoscalerRecord(mode=ScalingMode.UTILIZATION.value, valid=False, reason=FRONT_AT_ZERO,
                                 message="the front pool is at 0 replicas: no decision for the image encoder pool",
                                 last_decision_time=now.replace(microsecond=0))
        available = None
    else:
        available, _, message = metrics_outcome(decision, reading)
        text = decision.message if available else f"{decision.message} ({message})"
        block = AutoscalerRecord(
            mode=decision.mode_used.value, valid=bool(decision.valid), reason=decision.reason.value,
            message=text[:MESSAGE_CHARS], last_decision_time=now.replace(microsecond=0), metrics_available=available,
            features=status_features(decision, reading, utilization_ratio),
            state=compress_recommendations(decision.state),
            desired_replicas=int(decision.desired_replicas) if decision.valid else old.desired_replicas)
    desired_changed = block.desired_replicas is not None and block.desired_replicas != old.desired_replicas
    outcome_changed = (old.mode, old.valid, old.reason, old.metrics_available, old.desired_replicas) != (
        block.mode, block.valid, block.reason, block.metrics_available, block.desired_replicas)
    last = old.last_decision_time
    stale = last is None or (now - last).total_seconds() >= refresh_s
    if not (outcome_changed or stale):
        return PoolAutoscalePlan(IsvcStatus(), status, False, available)
    stored = status.stages if isinstance(status.stages, tuple) else ()
    stages = tuple(replace(s, autoscaler=block) if s.name == STAGE_IMAGE_ENCODER else s for s in stored)
    events = (pool_scale_event(item, block),) if desired_changed else ()
    return PoolAutoscalePlan(IsvcStatus(stages=stages), status, desired_changed, available, events)


def pool_scale_event(item: StageRecord, block: AutoscalerRecord, applied: StageRecord | None = None
                     ) -> tuple[str, str, str]:
    """The ``(type, reason, message)`` Event of a new image encoder pool count (pure).

    Args:
        item: The pool's ``status.stages`` item as stored (before this decision).
        block: The pool's new ``autoscaler`` block (its ``desired_replicas`` set).
        applied: The pool's item of the single planner's plan for this decision: the count it writes (a
            BudgetPolicy cap's split may write less than the autoscaler's); None = the autoscaler's count.
    Returns:
        ``("Normal", block.reason, "image encoder pool: BEFORE -> AFTER (REASON: MESSAGE)")``; BEFORE is the
        count of the previous valid decision, else (none yet) the count the reconcile applies (``minReplicas``
        until the first decision), else the pool's replicas. When the planner applies another count: its reason,
        and ``BEFORE -> APPLIED (the autoscaler's AFTER, ...)``, or ``held at N by the budget cap (...)`` when it
        writes BEFORE or the count it wrote before (``item.desired_replicas``).
    """
    old = item.autoscaler or AutoscalerRecord()
    before = next(n for n in (old.desired_replicas, item.desired_replicas, item.replicas) if n is not None)
    reason = block.reason or ""
    detail = f"{reason}: {block.message}" if block.message else reason
    wanted = block.desired_replicas
    if applied is None or applied.desired_replicas is None or applied.desired_replicas == wanted:
        return "Normal", reason, f"image encoder pool: {before} -> {wanted} ({detail})"
    why = applied.reason or reason
    cut = f"the autoscaler's {wanted}, {why}: {applied.message}; {detail}" if applied.message else (
        f"the autoscaler's {wanted}, {why}; {detail}")
    n = applied.desired_replicas
    if n in (before, item.desired_replicas):
        return "Normal", why, f"image encoder pool: held at {n} by the budget cap ({cut})"[:MESSAGE_CHARS]
    return "Normal", why, f"image encoder pool: {before} -> {n} ({cut})"[:MESSAGE_CHARS]
