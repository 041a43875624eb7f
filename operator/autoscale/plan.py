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
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from modalscale.api.conditions import (  # condition types and reasons: one module per kind
    COST_MODEL_LOADED,
    METRICS_AVAILABLE,
    METRICS_READ,
    NO_SERVICE_METRICS,
    STALE_METRICS,
)
from modalscale.api.status import AutoscalerStateStatus, AutoscalerStatus
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import Decision, Reason, ScalerState, ScalingMode
from modalscale.operator import conditions as cond

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
        status_patch: Merge patch of ``status`` (``{}`` = nothing to write).
        desired_changed: ``status.desiredReplicas`` changes: reconcile at once so the Deployment follows.
        metrics_available: Whether the metrics of the mode used were read.
        metrics_reason: The ``MetricsAvailable`` reason.
    """

    status_patch: dict[str, Any]
    desired_changed: bool
    metrics_available: bool
    metrics_reason: str


def _time(value: dt.datetime) -> str:
    return cond.rfc3339(value)


def _parse_time(value: Any) -> dt.datetime | None:
    if not isinstance(value, str) or not value:
        return None
    try:
        parsed = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return parsed if parsed.tzinfo is not None else None


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


def state_to_status(state: ScalerState) -> AutoscalerStateStatus:
    """``ScalerState`` as ``status.autoscaler.state`` (camelCase, RFC 3339 times)."""
    out: AutoscalerStateStatus = {
        "recommendations": [{"time": _time(t), "replicas": int(r)} for t, r in state.recommendations],
        "serviceScale": round(float(state.service_scale), 6),
        "latencyScale": round(float(state.latency_scale), 6),
    }
    if state.last_change_at is not None:
        out["lastChangeTime"] = _time(state.last_change_at)
    if state.in_flight_history:
        out["inFlightHistory"] = [round(float(v), 3) for v in state.in_flight_history[-2:]]
    if state.idle_since is not None:
        out["idleSince"] = _time(state.idle_since)
    if state.scaled_to_zero_at is not None:
        out["scaledToZeroTime"] = _time(state.scaled_to_zero_at)
    return out


def state_from_status(status: Mapping[str, Any] | None) -> ScalerState:
    """The ``ScalerState`` stored in ``status.autoscaler.state``; a fresh state for anything malformed."""
    block = ((status or {}).get("autoscaler") or {}).get("state")
    if not isinstance(block, Mapping):
        return ScalerState()
    recs = []
    for item in block.get("recommendations") or []:
        when = _parse_time((item or {}).get("time")) if isinstance(item, Mapping) else None
        replicas = item.get("replicas") if isinstance(item, Mapping) else None
        if when is None or not isinstance(replicas, int) or replicas < 0:
            return ScalerState()
        recs.append((when, replicas))

    def scale(key: str) -> float:
        v = block.get(key, 1.0)
        return float(v) if isinstance(v, (int, float)) and math.isfinite(v) and v > 0 else 1.0

    history = block.get("inFlightHistory") or []
    in_flight = tuple(float(v) for v in history[-2:] if isinstance(v, (int, float)) and math.isfinite(v) and v >= 0
                      ) if isinstance(history, list) else ()
    return ScalerState(recommendations=tuple(recs), service_scale=scale("serviceScale"),
                       latency_scale=scale("latencyScale"), last_change_at=_parse_time(block.get("lastChangeTime")),
                       in_flight_history=in_flight if len(in_flight) == len(history[-2:]) else (),
                       idle_since=_parse_time(block.get("idleSince")),
                       scaled_to_zero_at=_parse_time(block.get("scaledToZeroTime")))


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


def plan_autoscale(status: Mapping[str, Any] | None, decision: Decision, reading: MetricsReading,
                   service_time_model: ServiceTimeModelStatus | None, *, generation: int, now: dt.datetime,
                   utilization_ratio: float | None = None, refresh_s: float = 60.0) -> AutoscalePlan:
    """Decide the status writes of one autoscaler decision (pure).

    Args:
        status: The InferenceService's ``status`` as read now.
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
    current = dict(status or {})
    old = current.get("autoscaler") or {}
    available, reason, message = metrics_outcome(decision, reading)
    patch: dict[str, Any] = {}

    old_desired = current.get("desiredReplicas")
    desired_changed = decision.valid and old_desired != decision.desired_replicas
    if desired_changed:
        patch["desiredReplicas"] = int(decision.desired_replicas)

    block: AutoscalerStatus = {
        "mode": decision.mode_used.value,
        "valid": bool(decision.valid),
        "reason": decision.reason.value,
        "message": decision.message[:MESSAGE_CHARS],
        "lastDecisionTime": _time(now),
        "metricsAvailable": available,
        "features": status_features(decision, reading, utilization_ratio),
        "state": state_to_status(compress_recommendations(decision.state)),
    }
    last = _parse_time(old.get("lastDecisionTime"))
    outcome_changed = any(old.get(k) != block[k] for k in ("mode", "valid", "reason", "metricsAvailable"))
    stale = last is None or (now - last).total_seconds() >= refresh_s
    if desired_changed or outcome_changed or stale:
        # status is merge-patched: a feature of the stored block that this decision lacks is removed explicitly
        # (else the keys of successive decisions pile up past the CRD's 32 and every status write is refused).
        gone = {k: None for k in old.get("features") or {} if k not in block["features"]}
        patch["autoscaler"] = {**block, "features": {**block["features"], **gone}} if gone else block

    wanted = [cond.Condition(METRICS_AVAILABLE, cond.TRUE if available else cond.FALSE, reason, message)]
    if service_time_model is not None:
        wanted.append(cond.Condition(COST_MODEL_LOADED, cond.TRUE if service_time_model.loaded else cond.FALSE,
                                     service_time_model.reason, service_time_model.message))
    old_conditions = current.get("conditions") or []
    new_conditions = cond.upsert(old_conditions, wanted, generation, now)
    if new_conditions != old_conditions:
        patch["conditions"] = new_conditions
    return AutoscalePlan(status_patch=patch, desired_changed=desired_changed, metrics_available=available,
                         metrics_reason=reason)


def plan_activation(status: Mapping[str, Any] | None, decision: Decision, now: dt.datetime) -> dict[str, Any]:
    """The status patch of an activation decision (``modalscale.autoscaler.policy.activate``; pure).

    A valid decision sets ``desiredReplicas``; both kinds rewrite ``status.autoscaler`` (reason, message, time,
    features, state) and keep what only a metrics reading knows (``metricsAvailable``; the ``MetricsAvailable``
    and ``CostModelLoaded`` conditions are left alone: no metrics were read).
    """
    old = dict((status or {}).get("autoscaler") or {})
    block = {**old, "mode": decision.mode_used.value, "valid": bool(decision.valid),
             "reason": decision.reason.value, "message": decision.message[:MESSAGE_CHARS],
             "lastDecisionTime": _time(now),
             "features": {k: round(float(v), 4) for k, v in sorted(decision.features.items()) if math.isfinite(v)},
             "state": state_to_status(compress_recommendations(decision.state))}
    gone = {k: None for k in old.get("features") or {} if k not in block["features"]}
    block["features"] = {**block["features"], **gone}
    patch: dict[str, Any] = {"autoscaler": block}
    if decision.valid:
        patch["desiredReplicas"] = int(decision.desired_replicas)
    return patch
