"""SwitchToSpot, pure: which services a crossing moves to Spot, when they fall back, and what the ledger charges.

Prices (catalog.yaml, one L4 replica with 1 core and 2 GiB), by hand:
OnDemand 0.031611 + 2 x 0.004237 + 0.560040239 = 0.600125239 USD/h; Spot 0.006655 + 2 x 0.000892 + 0.2688 = 0.277239.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest

from modalscale.api.budgetpolicy import InvalidBudgetSpec, parse_budget_spec
from modalscale.costmodel.budget import AlertState, SpotState, plan_budget, service_state
from modalscale.costmodel.catalog import ReplicaResources, load_catalog
from modalscale.costmodel.ledger import Ledger, PodRun, advance
from tests.factories import plan_json, read_budget

CATALOG = load_catalog()
T0 = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)
L4 = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4")
A10G = ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-a10g")
ON_DEMAND_USD = Decimal("0.600125239")
SPOT_USD = Decimal("0.277239")


def spec(**enforcement: Any) -> Any:
    return parse_budget_spec({
        "period": "Daily", "limit": {"amount": "10"}, "forecast": {"enabled": False},
        "thresholds": [{"percent": 50, "actions": ["Alert", "SwitchToSpot"], "spotMaxPriority": 50},
                       {"percent": 100, "actions": ["Alert", "ScaleToZero"]}],
        "enforcement": enforcement, "evaluationIntervalSeconds": 60})


def svc(name: str, priority: int, *, resources: ReplicaResources = L4, tier: str = "OnDemand",
        pending_since: dt.datetime | None = None, replicas: int = 2) -> Any:
    return service_state("ml", name, replicas=replicas, max_replicas=4, resources=resources, tier=tier,
                         catalog=CATALOG, priority=priority, spot_pending_since=pending_since)


def test_prices_by_hand() -> None:
    assert CATALOG.price_replica(L4, "OnDemand") == ON_DEMAND_USD
    assert CATALOG.price_replica(L4, "Spot") == SPOT_USD


def test_spot_max_priority_is_required_with_the_action() -> None:
    with pytest.raises(InvalidBudgetSpec, match=r"spec\.thresholds\[0\].*spotMaxPriority is required"):
        parse_budget_spec({"period": "Daily", "limit": {"amount": "1"},
                           "thresholds": [{"percent": 50, "actions": ["SwitchToSpot"]}]})


def test_a_crossing_switches_the_lower_priority_services_to_spot_only() -> None:
    services = [svc("batch", 10), svc("search", 100), svc("edge", 50)]
    plan = plan_budget(spec(), Decimal("6"), services, AlertState(), T0)  # 60 % of 10 USD: 50 % crossed
    assert plan.thresholds_crossed == (50,)
    assert [(r.name, r.state, r.threshold_percent, r.since) for r in plan.spot] == [
        ("batch", SpotState.SPOT, 50, T0), ("edge", SpotState.SPOT, 50, T0)]
    assert all(r.applied for r in plan.spot)
    assert plan.enforced_services == ()  # SwitchToSpot caps no replicas
    (alert,) = plan.alerts
    assert "SwitchToSpot ml/batch (at 50 %)" in alert.actions


def test_below_the_threshold_nothing_moves() -> None:
    plan = plan_budget(spec(), Decimal("4"), [svc("batch", 10)], AlertState(), T0)
    assert plan.spot == () and plan.spot_skipped == ()


def test_it_is_enforced_ahead_like_the_replica_actions() -> None:
    # 4.99 USD spent, 2 x 0.600125239 USD/h x 60 s = 0.02 USD: 50 % would be crossed before the next evaluation.
    plan = plan_budget(spec(), Decimal("4.99"), [svc("batch", 10)], AlertState(), T0)
    assert [r.name for r in plan.spot] == ["batch"] and plan.thresholds_crossed == ()


def test_a_service_without_a_spot_price_or_already_on_spot_is_not_moved_and_says_why() -> None:
    plan = plan_budget(spec(), Decimal("6"), [svc("a10g", 10, resources=A10G), svc("cheap", 10, tier="Spot")],
                       AlertState(), T0)
    assert plan.spot == ()
    assert plan.spot_skipped == ("ml/a10g: the pricing catalog has no Spot price for it",
                                 "ml/cheap: already priced at Spot (spec.pricing.tier)")


def test_spot_pods_pending_past_the_timeout_fall_back_to_on_demand_for_the_period() -> None:
    s = spec(spotPendingTimeoutSeconds=120)
    first = plan_budget(s, Decimal("6"), [svc("batch", 10)], AlertState(), T0)
    t1 = T0 + dt.timedelta(seconds=60)
    # A Spot pod waits since t1: 119 s later it still waits on Spot ...
    waiting = plan_budget(s, Decimal("6.1"), [svc("batch", 10, pending_since=t1)], first.alert_state,
                          t1 + dt.timedelta(seconds=119))
    (r,) = waiting.spot
    assert r.state is SpotState.SPOT and r.since == T0 and "waited 119 s of 120 s" in r.message
    # ... at 120 s it falls back, and the record says when and why.
    t2 = t1 + dt.timedelta(seconds=120)
    fell = plan_budget(s, Decimal("6.2"), [svc("batch", 10, pending_since=t1)], waiting.alert_state, t2)
    (r,) = fell.spot
    assert (r.state, r.since, r.fallback_time, r.applied) == (SpotState.ON_DEMAND_FALLBACK, T0, t2, False)
    assert "stayed Pending for 120 s (timeout 120 s)" in r.message
    # It stays on on-demand for the period even once nothing waits any more (no flapping).
    later = plan_budget(s, Decimal("6.3"), [svc("batch", 10)], fell.alert_state, t2 + dt.timedelta(minutes=5))
    assert [(x.state, x.fallback_time) for x in later.spot] == [(SpotState.ON_DEMAND_FALLBACK, t2)]


def test_a_new_period_starts_on_demand_again_and_sends_the_recovery_notice() -> None:
    first = plan_budget(spec(), Decimal("6"), [svc("batch", 10)], AlertState(), T0)
    next_day = T0 + dt.timedelta(days=1)
    plan = plan_budget(spec(), Decimal("0"), [svc("batch", 10)], first.alert_state, next_day)
    assert plan.spot == ()
    assert [a.kind.value for a in plan.alerts] == ["Recovered"]


def test_the_switch_holds_while_the_bound_still_reaches_the_threshold() -> None:
    """Moving to Spot lowers the burn rate; re-testing the lowered rate would switch back and forth."""
    first = plan_budget(spec(), Decimal("4.99"), [svc("batch", 10)], AlertState(), T0)
    assert first.spot
    # Same spend a moment later, now cheaper: still held (spent + max rate x horizon reaches 50 %).
    held = plan_budget(spec(), Decimal("4.99"), [svc("batch", 10)], first.alert_state, T0 + dt.timedelta(seconds=1))
    assert [r.since for r in held.spot] == [T0]


def test_dry_run_reports_the_switch_without_applying_it() -> None:
    plan = plan_budget(spec(dryRun=True), Decimal("6"), [svc("batch", 10)], AlertState(), T0)
    (r,) = plan.spot
    assert r.dry_run and not r.applied


def test_status_round_trip_of_the_spot_records() -> None:
    plan = plan_budget(spec(), Decimal("6"), [svc("batch", 10)], AlertState(), T0)
    status = plan_json(plan)
    assert status["spotServices"] == [{"namespace": "ml", "name": "batch", "thresholdPercent": 50, "state": "Spot",
                                       "since": "2026-11-30T10:00:00Z", "dryRun": False,
                                       "message": plan.spot[0].message}]
    assert read_budget(status).alert_state.spot == plan.spot


# ------------------------------------------------------------------------------------------- the ledger
def ledger_after(pods: tuple[PodRun, ...], replicas: int) -> Any:
    s = service_state("ml", "batch", replicas=replicas, max_replicas=4, resources=L4, tier="OnDemand",
                      catalog=CATALOG, pods=pods)
    first = advance(Ledger(), [s.observation()], T0, "Daily")
    assert first.spent_usd == 0  # the pods started at T0, the policy's first evaluation
    return s, advance(first.ledger, [s.observation()], T0 + dt.timedelta(hours=1), "Daily")


def test_the_ledger_charges_each_pod_at_the_tier_its_node_ran_it() -> None:
    pods = (PodRun("batch-0", T0, None, "Spot"),
            PodRun("batch-1", T0, None, "OnDemand"))
    s, result = ledger_after(pods, 2)
    assert s.cost_usd_per_hour == ON_DEMAND_USD + SPOT_USD
    assert result.spent_usd == ON_DEMAND_USD + SPOT_USD  # one hour of each
    assert result.unpriced == ()


def test_a_pod_whose_node_says_nothing_is_charged_at_the_service_tier() -> None:
    pods = (PodRun("batch-0", T0, None, None),
            PodRun("batch-1", T0, None, "Spot"))
    _, result = ledger_after(pods, 2)
    assert result.spent_usd == ON_DEMAND_USD + SPOT_USD


def test_a_move_to_spot_mid_interval_charges_each_part_at_its_tier() -> None:
    """The on-demand pod stops at 10:30 (replaced); the Spot pod runs from 10:20 (its own timestamps)."""
    half = T0 + dt.timedelta(minutes=30)
    before = (PodRun("batch-0", T0 - dt.timedelta(hours=1), None, "OnDemand"),)
    s0 = service_state("ml", "batch", replicas=1, max_replicas=4, resources=L4, tier="OnDemand", catalog=CATALOG,
                       pods=before)
    first = advance(Ledger(), [s0.observation()], T0, "Daily")
    after = (PodRun("batch-0", T0 - dt.timedelta(hours=1), half, "OnDemand"),
             PodRun("batch-1", T0 + dt.timedelta(minutes=20), None, "Spot"))
    s1 = service_state("ml", "batch", replicas=1, max_replicas=4, resources=L4, tier="OnDemand", catalog=CATALOG,
                       pods=after)
    result = advance(first.ledger, [s1.observation()], T0 + dt.timedelta(hours=1), "Daily")
    # 30 min on-demand + 40 min Spot, to 1e-9 USD half-even.
    expected = (ON_DEMAND_USD / 2 + SPOT_USD * 40 / 60).quantize(Decimal("1e-9"))
    assert first.spent_usd == ON_DEMAND_USD  # batch-0 from its start, an hour before the first evaluation
    assert result.spent_usd - first.spent_usd == expected
    assert s1.cost_usd_per_hour == SPOT_USD  # the rate in force from now: the one running pod, at Spot


def test_a_spot_pod_without_a_spot_price_is_unpriced_not_free() -> None:
    pods = (PodRun("a-0", T0, None, "Spot"),
            PodRun("a-1", T0, None, "OnDemand"))
    s = service_state("ml", "a", replicas=2, max_replicas=4, resources=A10G, tier="OnDemand", catalog=CATALOG,
                      pods=pods)
    assert s.cost_usd_per_hour is None and not s.known and "no Spot price" in s.unknown_reason
    first = advance(Ledger(), [s.observation()], T0, "Daily")
    result = advance(first.ledger, [s.observation()], T0 + dt.timedelta(hours=1), "Daily")
    # The on-demand pod is charged (a lower bound), the interval is reported unpriced.
    a10g_on_demand = CATALOG.price_replica(A10G, "OnDemand")
    assert result.spent_usd == a10g_on_demand and [u.name for u in result.unpriced] == ["a"]
