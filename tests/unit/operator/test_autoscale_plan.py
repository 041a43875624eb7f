"""What the autoscaler writes to an InferenceService's status (pure): desired replicas only for a valid decision,
the status.autoscaler block only on a changed outcome or heartbeat, conditions, and the stored scaler state."""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import replace
from typing import Any

import pytest

from modalscale.api.conditions import NON_FINITE_METRICS, PARTIAL_TARGETS, PROMETHEUS_UNREACHABLE
from modalscale.autoscaler.metrics_reading import MetricsReading, unavailable
from modalscale.autoscaler.policy import (
    Decision,
    Observation,
    Reason,
    ScalerState,
    ScalingMode,
    ScalingPolicy,
    finalize_recommendation,
)
from modalscale.operator.autoscale.plan import (
    COST_MODEL_LOADED,
    MAX_FEATURES,
    METRICS_AVAILABLE,
    ServiceTimeModelStatus,
    compress_recommendations,
    plan_autoscale,
)
from modalscale.operator.conditions import get
from tests.factories import as_status, merge_patch, state_json, stored_state

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
READ = MetricsReading(observed_at=NOW, workload=(), busy_erlangs=0.5, targets_up=1, targets_total=1)
LOADED = ServiceTimeModelStatus(True, "ArtifactLoaded", "service-time model loaded")


def decision(desired: int = 3, valid: bool = True, reason: Reason = Reason.SCALE_UP_FOR_SLO,
             mode: ScalingMode = ScalingMode.PREDICTIVE, features: dict[str, float] | None = None,
             state: ScalerState | None = None) -> Decision:
    return Decision(desired, valid, reason, "because", features or {"arrival_rps": 2.0},
                    state or ScalerState(recommendations=((NOW, desired),)), mode)


def test_valid_decision_writes_desired_replicas_block_and_conditions() -> None:
    plan = plan_autoscale(as_status({"desiredReplicas": 1}), decision(3), READ, LOADED, generation=4, now=NOW)
    patch = plan.status_patch
    assert plan.desired_changed and patch["desiredReplicas"] == 3
    block = patch["autoscaler"]
    assert block["mode"] == "Predictive" and block["valid"] is True and block["reason"] == "ScaleUpForSLO"
    assert block["lastDecisionTime"] == "2026-11-30T12:00:00Z" and block["metricsAvailable"] is True
    assert block["state"]["recommendations"] == [{"time": "2026-11-30T12:00:00Z", "replicas": 3}]
    metrics = get(patch["conditions"], METRICS_AVAILABLE)
    assert metrics["status"] == "True" and metrics["observedGeneration"] == 4
    assert get(patch["conditions"], COST_MODEL_LOADED)["reason"] == "ArtifactLoaded"


def test_a_new_count_posts_one_event_with_the_decisions_reason_and_a_held_or_equal_one_none() -> None:
    """What an HPA's ``SuccessfulRescale`` Event tells a ``kubectl describe`` reader, with this decision's reason."""
    plan = plan_autoscale(as_status({"desiredReplicas": 1, "replicas": 1}), decision(3), READ, LOADED,
                          generation=1, now=NOW)
    assert plan.events == (("Normal", "ScaleUpForSLO", "replicas: 1 -> 3 (ScaleUpForSLO: because)"),)
    first = plan_autoscale(as_status({"replicas": 2}), decision(4), READ, LOADED, generation=1, now=NOW)
    assert first.events == (("Normal", "ScaleUpForSLO", "replicas: 2 -> 4 (ScaleUpForSLO: because)"),)
    same = plan_autoscale(as_status({"desiredReplicas": 3}), decision(3), READ, LOADED, generation=1, now=NOW)
    held = plan_autoscale(as_status({"desiredReplicas": 2}), decision(5, valid=False, reason=Reason.HELD_NO_METRICS),
                          READ, None, generation=1, now=NOW)
    assert same.events == () and held.events == ()


def test_invalid_decision_never_changes_desired_replicas() -> None:
    held = decision(5, valid=False, reason=Reason.HELD_NO_METRICS)
    reading = unavailable(PROMETHEUS_UNREACHABLE, "Prometheus at http://127.0.0.1:1 did not answer: refused")
    plan = plan_autoscale(as_status({"desiredReplicas": 2}), held, reading, None, generation=1, now=NOW)
    assert "desiredReplicas" not in plan.status_patch and not plan.desired_changed
    c = get(plan.status_patch["conditions"], METRICS_AVAILABLE)
    assert (c["status"], c["reason"]) == ("False", PROMETHEUS_UNREACHABLE) and "did not answer" in c["message"]
    assert plan.status_patch["autoscaler"]["valid"] is False


def test_same_outcome_within_the_refresh_period_writes_nothing() -> None:
    first = plan_autoscale(as_status({"desiredReplicas": 1}), decision(3), READ, LOADED, generation=1, now=NOW)
    status = {"desiredReplicas": 3, **first.status_patch}
    later = NOW + dt.timedelta(seconds=30)
    again = plan_autoscale(as_status(status), decision(3, features={"arrival_rps": 2.5}), READ, LOADED, generation=1,
                           now=later)
    assert again.status_patch == {} and not again.desired_changed


def test_heartbeat_rewrites_the_block_after_the_refresh_period() -> None:
    first = plan_autoscale(as_status({"desiredReplicas": 1}), decision(3), READ, LOADED, generation=1, now=NOW)
    status = {"desiredReplicas": 3, **first.status_patch}
    later = NOW + dt.timedelta(seconds=60)
    again = plan_autoscale(as_status(status), decision(3), READ, LOADED, generation=1, now=later, refresh_s=60)
    assert set(again.status_patch) == {"autoscaler"}
    assert again.status_patch["autoscaler"]["lastDecisionTime"] == "2026-11-30T12:01:00Z"


def test_changed_reason_rewrites_the_block_at_once() -> None:
    first = plan_autoscale(as_status({"desiredReplicas": 1}), decision(3), READ, LOADED, generation=1, now=NOW)
    status = {"desiredReplicas": 3, **first.status_patch}
    again = plan_autoscale(as_status(status), decision(3, reason=Reason.WITHIN_TOLERANCE), READ, LOADED, generation=1,
                           now=NOW + dt.timedelta(seconds=5))
    assert set(again.status_patch) == {"autoscaler"}


def test_condition_transition_time_moves_only_when_status_flips() -> None:
    first = plan_autoscale(as_status({}), decision(3), READ, LOADED, generation=1, now=NOW)
    status = {"desiredReplicas": 3, **first.status_patch}
    broken = ServiceTimeModelStatus(False, "InvalidCostModel", "corrupt")
    later = NOW + dt.timedelta(seconds=10)
    second = plan_autoscale(as_status(status), decision(3), READ, broken, generation=1, now=later)
    model = get(second.status_patch["conditions"], COST_MODEL_LOADED)
    metrics = get(second.status_patch["conditions"], METRICS_AVAILABLE)
    assert model["status"] == "False" and model["lastTransitionTime"] == "2026-11-30T12:00:10Z"
    assert metrics["lastTransitionTime"] == "2026-11-30T12:00:00Z"


def test_other_conditions_are_kept_in_the_written_list() -> None:
    ready = {"type": "Ready", "status": "True", "observedGeneration": 1, "lastTransitionTime": "2026-11-30T11:00:00Z",
             "reason": "MinimumReplicasAvailable", "message": "2/2 replicas ready"}
    plan = plan_autoscale(as_status({"conditions": [ready]}), decision(3), READ, None, generation=1, now=NOW)
    types = [c["type"] for c in plan.status_patch["conditions"]]
    assert types == ["Ready", METRICS_AVAILABLE] and plan.status_patch["conditions"][0] == ready


def test_partial_targets_are_available_but_say_so() -> None:
    partial = MetricsReading(observed_at=NOW, workload=(), targets_up=1, targets_total=2, down_targets=("b:1",),
                             problem=(PARTIAL_TARGETS, "1 of 2 scrape target(s) down (b:1)"))
    plan = plan_autoscale(as_status({}), decision(3), partial, None, generation=1, now=NOW)
    c = get(plan.status_patch["conditions"], METRICS_AVAILABLE)
    assert (c["status"], c["reason"]) == ("True", PARTIAL_TARGETS)


def test_a_nan_rate_is_reported_unavailable_and_never_moves_desired_replicas() -> None:
    nan = MetricsReading(observed_at=NOW, workload=None, targets_up=1, targets_total=1,
                         problem=(NON_FINITE_METRICS, "Prometheus answered a non-finite value (NaN or +-Inf) for "
                                                      "'requests'; that is missing data, not zero traffic: holding"))
    plan = plan_autoscale(as_status({"desiredReplicas": 5}), decision(5, valid=False, reason=Reason.HELD_NO_METRICS),
                          nan, None, generation=1, now=NOW)
    c = get(plan.status_patch["conditions"], METRICS_AVAILABLE)
    assert (c["status"], c["reason"]) == ("False", NON_FINITE_METRICS) and "NaN" in c["message"]
    assert not plan.desired_changed and "desiredReplicas" not in plan.status_patch


def test_utilization_mode_needs_busy_time_not_workload() -> None:
    no_busy = MetricsReading(observed_at=NOW, workload=(), busy_erlangs=None, targets_up=1, targets_total=1)
    plan = plan_autoscale(as_status({}), decision(2, valid=False, reason=Reason.HELD_NO_METRICS,
                                                  mode=ScalingMode.UTILIZATION), no_busy, None, generation=1, now=NOW)
    assert plan.metrics_available is False
    assert get(plan.status_patch["conditions"], METRICS_AVAILABLE)["status"] == "False"


def test_stale_metrics_are_reported_unavailable() -> None:
    stale = decision(2, valid=False, reason=Reason.HELD_STALE_METRICS)
    plan = plan_autoscale(as_status({}), stale, READ, None, generation=1, now=NOW)
    assert get(plan.status_patch["conditions"], METRICS_AVAILABLE)["reason"] == "StaleMetrics"


def test_features_are_bounded_finite_and_policy_first() -> None:
    many = {f"f{i:02d}": float(i) for i in range(40)} | {"bad": float("inf"), "nan": float("nan")}
    reading = MetricsReading(observed_at=NOW, workload=(), extra={"busy_erlangs": 0.1234567})
    block = plan_autoscale(as_status({}), decision(3, features=many), reading, None, generation=1, now=NOW,
                           utilization_ratio=0.5).status_patch["autoscaler"]
    assert len(block["features"]) == MAX_FEATURES
    assert "bad" not in block["features"] and "nan" not in block["features"]
    assert block["features"]["f00"] == 0.0 and "busy_erlangs" not in block["features"]  # policy's come first
    few = plan_autoscale(as_status({}), decision(3), reading, None, generation=1, now=NOW, utilization_ratio=0.5)
    assert few.status_patch["autoscaler"]["features"] == {"arrival_rps": 2.0, "busy_erlangs": 0.1235,
                                                          "utilization_ratio": 0.5}


def test_state_round_trips_through_status() -> None:
    state = ScalerState(recommendations=((NOW, 2), (NOW + dt.timedelta(seconds=15), 4)), service_scale=1.25,
                        latency_scale=0.8, last_change_at=NOW, in_flight_history=(4.0, 7.5),
                        in_flight_times=(NOW - dt.timedelta(seconds=15), NOW))
    status = {"autoscaler": {"state": state_json(state)}}
    assert stored_state(status) == state
    # the observed-queue rule's memory: a malformed history is dropped with its times, the rest of the state kept
    status["autoscaler"]["state"]["inFlightHistory"] = [4.0, "x"]
    assert stored_state(status) == replace(state, in_flight_history=(), in_flight_times=())
    # times that do not match the counts (malformed, or missing: a status written before they were kept) are
    # dropped; the counts stay for the contradictions, and the growth is unknown until two new samples
    for times in (["x", "2025-06-01T12:00:00Z"], None, ["2025-06-01T12:00:00Z"]):
        status["autoscaler"]["state"] = {**state_json(state), "inFlightTimes": times}
        assert stored_state(status) == replace(state, in_flight_times=()), times


@pytest.mark.parametrize("bad", [
    None, {}, {"autoscaler": {"state": "x"}},
    {"autoscaler": {"state": {"recommendations": [{"time": "2026-11-30T12:00:00", "replicas": 1}]}}},
    {"autoscaler": {"state": {"recommendations": [{"time": "2026-11-30T12:00:00Z", "replicas": -1}]}}},
], ids=["none", "empty", "not-a-map", "naive-time", "negative"])
def test_malformed_stored_state_starts_fresh(bad: Any) -> None:
    assert stored_state(bad) == ScalerState()


def test_compression_keeps_the_newest_entry_of_each_run() -> None:
    t = [NOW + dt.timedelta(seconds=15 * i) for i in range(6)]
    state = ScalerState(recommendations=((t[0], 2), (t[1], 2), (t[2], 5), (t[3], 3), (t[4], 3), (t[5], 3)))
    assert compress_recommendations(state).recommendations == ((t[1], 2), (t[2], 5), (t[5], 3))
    assert len(compress_recommendations(state, max_items=2).recommendations) == 2


def test_compression_never_changes_a_stabilized_decision() -> None:
    """Invariant: over random recommendation histories, the policy's guards give the same answer on the
    compressed history as on the full one (runs take part in MIN/MAX exactly when their newest entry does)."""
    rng = random.Random(7)
    policy = ScalingPolicy(mode=ScalingMode.UTILIZATION, scale_up_stabilization_s=60, scale_down_stabilization_s=300,
                           max_replicas=20, max_step_replicas=20, tolerance_percent=0)
    for _ in range(300):
        recs, value = [], rng.randint(1, 10)
        for i in range(rng.randint(1, 40)):
            if rng.random() < 0.3:
                value = rng.randint(1, 10)
            recs.append((NOW - dt.timedelta(seconds=15 * (40 - i)), value))
        full = ScalerState(recommendations=tuple(recs))
        obs = Observation(observed_at=NOW, current_replicas=rng.randint(1, 10), ready_replicas=5)
        need = rng.randint(0, 12)
        a = finalize_recommendation(need, Reason.STEADY, "", {}, obs, policy, full, NOW, ScalingMode.UTILIZATION)
        b = finalize_recommendation(need, Reason.STEADY, "", {}, obs, policy, compress_recommendations(full), NOW,
                                    ScalingMode.UTILIZATION)
        assert a.desired_replicas == b.desired_replicas


def test_features_of_an_earlier_decision_do_not_pile_up_under_the_merge_patch() -> None:
    # Seen in the demo: 38 features stored (the CRD allows 32) because the merge patch kept an earlier decision's
    # keys next to the new ones, and every later status write was refused with 422.
    first = {f"a{i:02d}": 1.0 for i in range(MAX_FEATURES)}
    second = {f"b{i:02d}": 2.0 for i in range(MAX_FEATURES)}
    plan = plan_autoscale(as_status({}), decision(3, features=first), READ, None, generation=1, now=NOW)
    status = merge_patch({}, plan.status_patch)
    plan = plan_autoscale(as_status(status), decision(4, features=second), READ, None, generation=1,
                          now=NOW + dt.timedelta(seconds=5))
    status = merge_patch(status, plan.status_patch)
    assert status["autoscaler"]["features"] == second
