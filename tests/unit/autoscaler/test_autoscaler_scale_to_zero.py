"""Scale to zero and activation (issue 19), pure: idle evidence only from metrics that were read, the idle run
counted without a break, 0 held until the gateway asks, and 0 -> 1 at once on a request newer than the last scale
to zero."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from modalscale.autoscaler.policy import (
    Observation,
    Reason,
    ScalerState,
    ScalingMode,
    ScalingPolicy,
    WorkloadClass,
    activate,
    observed_idle,
    recommend,
)
from tests import factories

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
POLICY = ScalingPolicy(mode=ScalingMode.UTILIZATION, min_replicas=0, max_replicas=4, scale_to_zero_after_s=60.0,
                       scale_down_stabilization_s=0.0)
TEXT = WorkloadClass("text", 2.0, mean_text_tokens=20.0)
IDLE_TEXT = WorkloadClass("text", 0.0, mean_text_tokens=20.0)


def obs(at: dt.datetime = T0, current: int = 1, **kw: Any) -> Observation:
    values: dict[str, Any] = dict(workload=(), recent_workload=(), utilization_ratio=0.0, queued_requests=0.0,
                                  in_flight_requests=0.0, targets_up=current)
    values.update(kw)
    return factories.observation(at, current, **values)


@pytest.mark.parametrize(("observation", "idle"), [
    (obs(), True),
    (obs(workload=(IDLE_TEXT,), recent_workload=(IDLE_TEXT,)), True),
    (obs(workload=None), False),
    (obs(workload=(TEXT,)), False),
    (obs(recent_workload=(TEXT,)), False),
    (obs(in_flight_requests=2.0), False),
    (obs(queued_requests=1.0), False),
    (obs(at=T0 - dt.timedelta(seconds=120)), False),
    (obs(at=T0 + dt.timedelta(seconds=30)), False),
    (obs(current=2, targets_up=1), False),
    (obs(current=1, ready_replicas=0, targets_up=None, utilization_ratio=None), False),
], ids=["all-zero", "zero-rate-classes", "rates-missing", "requests", "recent-requests", "in-flight", "queued",
        "stale", "dated-ahead", "partial-targets", "replica-starting"])
def test_only_fresh_complete_metrics_showing_no_request_are_idle(observation: Observation, idle: bool) -> None:
    assert observed_idle(observation, POLICY, T0) is idle


def run(readings: list[Observation | None], policy: ScalingPolicy = POLICY, interval_s: float = 15.0,
        ) -> list[tuple[int, str]]:
    """Decisions every ``interval_s`` from T0 at 1 replica; None = the metrics were missing at that decision."""
    state, current, out = ScalerState(), 1, []
    for i, reading in enumerate(readings):
        now = T0 + dt.timedelta(seconds=i * interval_s)
        o = obs(now, current) if reading is None else replace(reading, observed_at=now, current_replicas=current,
                                                               ready_replicas=current, targets_up=current)
        if reading is None:
            o = replace(o, workload=None, utilization_ratio=None)
        d = recommend(o, policy, state, None, now)
        state = d.state
        if d.valid:
            current = d.desired_replicas
        out.append((d.desired_replicas, d.reason.value))
    return out


IDLE = obs()


def test_idle_for_scale_to_zero_after_seconds_goes_to_zero_with_its_reason() -> None:
    decisions = run([IDLE] * 6)
    assert [r for r, _ in decisions] == [1, 1, 1, 1, 0, 0]  # idle since t=0; at t=60 s: 60 >= 60
    assert decisions[4][1] == "ScaleDownToZero" and decisions[5][1] == "IdleAtZero"


@pytest.mark.parametrize(("broken_at", "zero_at"), [(2, 7), (3, 8)], ids=["missing-at-30s", "missing-at-45s"])
def test_missing_metrics_never_count_as_idle_and_restart_the_idle_run(broken_at: int, zero_at: int) -> None:
    readings: list[Observation | None] = [IDLE] * 10
    readings[broken_at] = None
    decisions = run(readings)
    assert [i for i, (r, _) in enumerate(decisions) if r == 0][0] == zero_at  # 60 s after the first idle one after


def test_a_request_restarts_the_idle_run() -> None:
    busy = obs(workload=(TEXT,), recent_workload=(TEXT,), utilization_ratio=0.2)
    decisions = run([IDLE, IDLE, IDLE, busy, IDLE, IDLE, IDLE, IDLE, IDLE])
    assert [i for i, (r, _) in enumerate(decisions) if r == 0][0] == 8  # idle again from t=60 s, zero at t=120 s


@pytest.mark.parametrize("policy", [replace(POLICY, scale_to_zero_after_s=None), replace(POLICY, min_replicas=1)],
                         ids=["no-scale-to-zero-after", "min-replicas-1"])
def test_without_scale_to_zero_the_rules_never_go_below_one(policy: ScalingPolicy) -> None:
    assert {r for r, _ in run([IDLE] * 12, policy)} == {1}


def test_at_zero_the_decision_holds_zero_without_metrics_and_is_not_acted_on() -> None:
    d = recommend(obs(current=0, workload=None, utilization_ratio=None), POLICY, ScalerState(), None, T0)
    assert (d.desired_replicas, d.valid, d.reason) == (0, False, Reason.IDLE_AT_ZERO)


ZEROED = ScalerState(scaled_to_zero_at=T0)
LATER = T0 + dt.timedelta(seconds=5)


@pytest.mark.parametrize(("current", "requested", "state", "policy", "cap", "expected"), [
    (0, LATER, ZEROED, POLICY, None, (1, True, "Activated")),
    (0, LATER, ScalerState(), POLICY, None, (1, True, "Activated")),
    (0, T0, ZEROED, POLICY, None, None),
    (0, T0 - dt.timedelta(seconds=1), ZEROED, POLICY, None, None),
    (0, None, ZEROED, POLICY, None, None),
    (1, LATER, ZEROED, POLICY, None, None),
    (0, LATER, ZEROED, replace(POLICY, min_replicas=1), None, None),
    (0, LATER, ZEROED, ScalingPolicy(mode=ScalingMode.FIXED, replicas=0, min_replicas=0), None, None),
    (0, LATER, ZEROED, POLICY, 0, (0, False, "CappedByBudget")),
    (0, LATER, ZEROED, POLICY, 3, (1, True, "Activated")),
], ids=["newer-than-zero", "never-zeroed", "same-time", "older", "no-request", "already-running", "min-one",
        "fixed", "budget-cap-zero", "budget-cap-three"])
def test_activation_starts_one_replica_only_for_a_request_newer_than_the_last_scale_to_zero(
        current: int, requested: dt.datetime | None, state: ScalerState, policy: ScalingPolicy, cap: int | None,
        expected: tuple[int, bool, str] | None) -> None:
    now = T0 + dt.timedelta(seconds=6)
    d = activate(current, requested, state, policy, cap, now)
    assert (None if d is None else (d.desired_replicas, d.valid, d.reason.value)) == expected
    if d is not None and d.valid:
        assert d.features["activation_delay_s"] == pytest.approx(1.0)
        assert d.state.recommendations[-1] == (now, 1) and d.state.last_change_at == now


def test_after_activation_the_idle_run_starts_afresh() -> None:
    d = activate(0, LATER, replace(ZEROED, idle_since=T0), POLICY, None, LATER)
    assert d is not None and d.state.idle_since is None


def test_activation_refuses_a_naive_clock() -> None:
    with pytest.raises(ValueError, match="timezone-aware"):
        activate(0, LATER, ZEROED, POLICY, None, dt.datetime(2026, 12, 1))


@pytest.mark.parametrize(("ahead_s", "expected"), [
    (0.0, (1, True, "Activated")),
    (POLICY.max_future_skew_s, (1, True, "Activated")),  # within the clock-skew allowance
    (POLICY.max_future_skew_s + 1, (0, False, "HeldStaleMetrics")),
    (3600.0, (0, False, "HeldStaleMetrics")),
    (2_300_000_000.0, (0, False, "HeldStaleMetrics")),  # the year 2099
])
def test_an_activation_request_dated_beyond_the_clock_skew_allowance_is_not_read(
        ahead_s: float, expected: tuple[int, bool, str]) -> None:
    """Found by an adversarial probe (6 Dec 2026): a request dated an hour (or decades) ahead activated a replica,
    and again after every scale to zero for as long as its time stayed ahead (it is later than every scale to
    zero). Beyond ``max_future_skew_s`` it is unreadable, as a metrics sample dated ahead is: hold at 0, say why."""
    now = T0 + dt.timedelta(seconds=6)
    d = activate(0, now + dt.timedelta(seconds=ahead_s), ZEROED, POLICY, None, now)
    assert d is not None and (d.desired_replicas, d.valid, d.reason.value) == expected
    if not d.valid:
        assert "in the future" in d.message and "clock" in d.message and d.state == ZEROED
