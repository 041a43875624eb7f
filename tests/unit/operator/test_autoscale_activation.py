"""The operator's side of scale from zero (issue 19): the watch-event pre-check reads only the event's body, the
scaler's idle and scale-to-zero times survive a restart through status, and an activation's status patch."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from modalscale.api.annotations import ACTIVATION_ANNOTATION, activation_requested_at
from modalscale.api.isvc_status import write_isvc_status
from modalscale.autoscaler.policy import Reason, ScalerState, ScalingMode, ScalingPolicy, activate
from modalscale.operator.autoscale.handlers import activation_pending
from modalscale.operator.autoscale.plan import plan_activation
from tests.factories import as_status, state_json, stored_state

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def body(requested: str | None, desired: int | None = 0,
         zero_at: str | None = "2026-12-01T12:00:00Z") -> dict[str, Any]:
    annotations = {} if requested is None else {ACTIVATION_ANNOTATION: requested}
    status: dict[str, Any] = {} if desired is None else {"desiredReplicas": desired}
    if zero_at is not None:
        status["autoscaler"] = {"state": {"recommendations": [], "scaledToZeroTime": zero_at}}
    return {"metadata": {"name": "vc", "namespace": "ml", "annotations": annotations}, "status": status}


@pytest.mark.parametrize(("event", "pending"), [
    (body("2026-12-01T12:00:05Z"), True),
    (body("2026-12-01T12:00:05.250+00:00"), True),
    (body("2026-12-01T12:00:05Z", desired=None, zero_at=None), True),
    (body("2026-12-01T12:00:00Z"), False),
    (body("2026-12-01T11:59:00Z"), False),
    (body("2026-12-01T12:00:05Z", desired=1), False),
    (body(None), False),
    (body("soon"), False),
    (body("2026-12-01T12:00:05"), False),
], ids=["newer", "fractional-offset", "new-service", "same-time", "older", "already-desired", "absent", "garbage",
        "no-zone"])
def test_the_event_pre_check_needs_a_readable_request_newer_than_the_last_scale_to_zero(event: dict[str, Any],
                                                                                        pending: bool) -> None:
    assert activation_pending(event) is pending


def test_activation_time_is_read_as_utc() -> None:
    assert activation_requested_at({ACTIVATION_ANNOTATION: "2026-12-01T13:00:05+01:00"}) == T0.replace(second=5)


@pytest.mark.parametrize("raw", ["0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00"])
def test_an_activation_time_outside_utcs_years_is_unreadable_not_an_error(raw: str) -> None:
    """Found by an adversarial probe: the zone offset moved these past year 1 / 9999 and ``OverflowError`` left
    the reader, whose docstring promises None for what it cannot read."""
    assert activation_requested_at({ACTIVATION_ANNOTATION: raw}) is None
    assert activation_pending(body(raw)) is False


def test_idle_and_scale_to_zero_times_round_trip_through_status() -> None:
    state = ScalerState(recommendations=((T0, 1),), idle_since=T0 - dt.timedelta(seconds=30), scaled_to_zero_at=T0)
    stored = state_json(state)
    assert (stored["idleSince"], stored["scaledToZeroTime"]) == ("2026-12-01T11:59:30Z", "2026-12-01T12:00:00Z")
    assert stored_state({"autoscaler": {"state": stored}}) == state
    assert "idleSince" not in state_json(ScalerState())


def test_an_activation_patch_sets_desired_replicas_and_keeps_what_only_metrics_know() -> None:
    policy = ScalingPolicy(mode=ScalingMode.PREDICTIVE, min_replicas=0, scale_to_zero_after_s=60.0)
    now = T0 + dt.timedelta(seconds=2)
    decision = activate(0, T0 + dt.timedelta(seconds=1), ScalerState(scaled_to_zero_at=T0), policy, None, now)
    assert decision is not None and decision.reason == Reason.ACTIVATED
    status = {"desiredReplicas": 0, "conditions": [{"type": "MetricsAvailable"}],
              "autoscaler": {"metricsAvailable": False, "reason": "IdleAtZero", "features": {"held_replicas": 0.0}}}
    patch = write_isvc_status(plan_activation(as_status(status), decision, now), as_status(status))
    assert patch["desiredReplicas"] == 1 and "conditions" not in patch
    block = patch["autoscaler"]
    assert (block["reason"], block["valid"], block["metricsAvailable"]) == ("Activated", True, False)
    assert block["features"] == {"activation_delay_s": 1.0, "held_replicas": None}  # merge patch drops old keys
    assert block["state"]["scaledToZeroTime"] == "2026-12-01T12:00:00Z"
    assert block["lastDecisionTime"] == "2026-12-01T12:00:02Z"
