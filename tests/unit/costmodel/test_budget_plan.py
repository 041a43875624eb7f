"""Budget planner: state, forecast, alert de-duplication across status round trips, enforcement, blind rule."""

from __future__ import annotations

import json
from dataclasses import replace
from datetime import datetime, timedelta, timezone
from decimal import Decimal

import pytest

from modalscale.api.budgetpolicy import InvalidBudgetSpec, ThresholdAction, parse_budget_spec
from modalscale.costmodel.budget import (
    AlertKind,
    AlertState,
    BudgetPlan,
    BudgetState,
    PolicyRef,
    ServiceState,
    plan_budget,
    rates_after_enforcement,
    service_state,
)
from modalscale.costmodel.budget.enforce import enforcement_horizon_s
from modalscale.costmodel.catalog import ReplicaResources, default_catalog
from modalscale.costmodel.ledger import Ledger, ServiceObservation, advance
from tests.factories import plan_json, read_budget

UTC = timezone.utc
D = Decimal
POLICY = PolicyRef("team-search", "search-daily")


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def svc(name: str, replicas: int | None = 2, price: str | None = "1", *, max_replicas: int = 10,
        priority: int = 100, namespace: str = "team-search") -> ServiceState:
    return ServiceState(namespace, name, replicas, max_replicas, D(price) if price is not None else None, priority,
                        "" if price is not None and replicas is not None else "price not in catalog")


def roundtrip(plan: BudgetPlan) -> AlertState:
    """What the next evaluation (or a restarted operator) reads back from the written status."""
    return read_budget(json.loads(json.dumps(plan_json(plan)))).alert_state


def kinds(plan: BudgetPlan) -> list[AlertKind]:
    return [a.kind for a in plan.alerts]


# ------------------------------------------------------------------------------------------------ state
@pytest.mark.parametrize(
    ("spent", "state", "crossed"),
    [("10", BudgetState.OK, ()), ("50", BudgetState.WARNING, (50,)), ("79.99", BudgetState.WARNING, (50,)),
     ("80", BudgetState.WARNING, (50, 80)), ("100", BudgetState.EXCEEDED, (50, 80, 100)),
     ("250", BudgetState.EXCEEDED, (50, 80, 100))],
)
def test_state_and_crossed_thresholds_follow_spend(make_spec, spent: str, state: BudgetState, crossed) -> None:
    plan = plan_budget(make_spec(), D(spent), [svc("a")], AlertState(), utc(2026, 5, 1, 12), policy=POLICY)
    assert plan.state is state
    assert plan.thresholds_crossed == crossed
    assert plan.remaining_usd == D(100) - D(spent)


def test_forecast_is_linear_at_the_current_burn_rate(make_spec) -> None:
    # 2 services: 2 x 1.5 + 1 x 4 = 7 USD/h; 14:00 UTC -> 10 h left; 20 + 70 = 90
    spec = make_spec(forecast={"enabled": True, "alertAtPercent": 100})
    plan = plan_budget(spec, D(20), [svc("a", 2, "1.5"), svc("b", 1, "4")], AlertState(), utc(2026, 5, 1, 14))
    assert plan.burn_rate_usd_per_hour == D(7)
    assert plan.forecast_usd == D(90)
    assert plan.forecast_method == "LinearAtCurrentBurnRate"
    assert plan.state is BudgetState.OK and plan.alerts == ()


def test_forecast_alert_once_per_period_and_not_when_disabled(make_spec) -> None:
    spec = make_spec(forecast={"enabled": True, "alertAtPercent": 90})
    services = [svc("a", 2, "5")]  # 10 USD/h; at 12:00 UTC 12 h left: 10 + 120 = 130 >= 90
    first = plan_budget(spec, D(10), services, AlertState(), utc(2026, 5, 1, 12), policy=POLICY)
    assert kinds(first) == [AlertKind.FORECAST_EXCEEDED]
    assert first.state is BudgetState.WARNING and first.reason == "ForecastOverLimit"
    second = plan_budget(spec, D(11), services, roundtrip(first), utc(2026, 5, 1, 12, 1), policy=POLICY)
    assert second.alerts == ()
    next_day = plan_budget(spec, D(10), services, roundtrip(second), utc(2026, 5, 2, 12), policy=POLICY)
    # The new period resolves the day before's forecast alert (a Warning period's: see the recovery tests below)
    # and the forecast alerts again in its own period.
    assert kinds(next_day) == [AlertKind.RECOVERED, AlertKind.FORECAST_EXCEEDED]
    assert [(f.kind, f.threshold_percent) for f in next_day.alerts[0].resolves] == [(AlertKind.FORECAST_EXCEEDED, 90)]
    off = plan_budget(make_spec(), D(10), services, AlertState(), utc(2026, 5, 1, 12), policy=POLICY)
    assert off.forecast_usd is None and off.alerts == ()


def test_no_forecast_alert_when_actual_spend_already_crossed_that_percent(make_spec) -> None:
    spec = make_spec(forecast={"enabled": True, "alertAtPercent": 50}, thresholds=[{"percent": 90}])
    plan = plan_budget(spec, D(60), [svc("a", 1, "1")], AlertState(), utc(2026, 5, 1, 12))
    assert AlertKind.FORECAST_EXCEEDED not in kinds(plan)


# ------------------------------------------------------------------------------------------- dedupe
def test_each_threshold_alerts_exactly_once_per_period_across_restarts(make_spec) -> None:
    spec, services = make_spec(), [svc("a")]
    t = utc(2026, 5, 1, 9)
    sent: list[tuple[int, ...]] = []
    state = AlertState()
    for minute, spent in enumerate(["10", "49.99", "50", "51", "60", "79", "80", "81", "99", "100", "120", "130"]):
        plan = plan_budget(spec, D(spent), services, state, t + timedelta(minutes=minute), policy=POLICY)
        sent += [a.thresholds_percent for a in plan.alerts if a.kind is AlertKind.THRESHOLD_CROSSED]
        state = roundtrip(plan)  # every evaluation goes through the status, as after a restart
    assert sent == [(50,), (80,), (100,)]


def test_thresholds_crossed_together_are_one_message_and_each_is_marked(make_spec) -> None:
    plan = plan_budget(make_spec(), D(85), [svc("a")], AlertState(), utc(2026, 5, 1, 9), policy=POLICY)
    assert [(a.kind, a.thresholds_percent) for a in plan.alerts] == [(AlertKind.THRESHOLD_CROSSED, (50, 80))]
    records = {r.percent: r for r in plan.alert_state.records if not r.forecast}
    assert records[50].alerted_period_start == records[80].alerted_period_start == utc(2026, 5, 1)
    assert records[100].alerted_period_start is None and not records[100].crossed


def test_a_new_period_resets_the_dedupe(make_spec) -> None:
    day1 = plan_budget(make_spec(), D(55), [svc("a")], AlertState(), utc(2026, 5, 1, 20), policy=POLICY)
    day2_low = plan_budget(make_spec(), D(5), [svc("a")], roundtrip(day1), utc(2026, 5, 2, 1), policy=POLICY)
    assert kinds(day2_low) == [AlertKind.RECOVERED] and day2_low.state is BudgetState.OK  # day 1's 50 % resolved
    day2 = plan_budget(make_spec(), D(50), [svc("a")], roundtrip(day2_low), utc(2026, 5, 2, 9), policy=POLICY)
    assert [a.thresholds_percent for a in day2.alerts] == [(50,)]


def test_threshold_without_alert_action_enforces_silently(make_spec) -> None:
    spec = make_spec(thresholds=[{"percent": 50, "actions": ["CapReplicas"], "capReplicas": 1}])
    plan = plan_budget(spec, D(60), [svc("a", 3)], AlertState(), utc(2026, 5, 1, 9))
    assert plan.alerts == ()
    assert [(a.action, a.max_replicas) for a in plan.actions] == [(ThresholdAction.CAP_REPLICAS, 1)]
    assert plan.alert_state.records[0].crossed and plan.alert_state.records[0].last_alert_time is None


def test_recovery_notice_once_when_a_new_period_follows_an_exceeded_one(make_spec) -> None:
    exceeded = plan_budget(make_spec(), D(120), [svc("a", 4)], AlertState(), utc(2026, 5, 1, 22), policy=POLICY)
    assert exceeded.state is BudgetState.EXCEEDED and exceeded.actions
    ledger = advance(Ledger(), [ServiceObservation("team-search", "a", 1, D(1))], utc(2026, 5, 1, 23), "Daily")
    rolled = advance(ledger.ledger, [ServiceObservation("team-search", "a", 1, D(1))], utc(2026, 5, 2, 0, 30), "Daily")
    recovered = plan_budget(make_spec(), rolled, [svc("a", 1)], roundtrip(exceeded), utc(2026, 5, 2, 0, 30),
                            policy=POLICY)
    assert kinds(recovered) == [AlertKind.RECOVERED]
    alert = recovered.alerts[0]
    assert alert.resolved and alert.severity == "info"
    assert alert.title == f"Budget {POLICY}: a new daily period started, enforcement lifted"
    assert alert.closed_period_spent_usd == D(1)  # 23:00 -> 24:00 at 1 USD/h
    assert recovered.actions == () and recovered.enforced_services == ()
    assert recovered.state is BudgetState.OK
    again = plan_budget(make_spec(), D("1.5"), [svc("a", 1)], roundtrip(recovered), utc(2026, 5, 2, 1), policy=POLICY)
    assert again.alerts == ()


def test_a_warning_period_that_alerted_ends_with_a_recovery_that_resolves_its_alerts(make_spec) -> None:
    """A period that alerted 50 % and 80 % and never reached its limit (Warning, nothing enforced) ended without a
    Recovered notice (only an Exceeded or enforced one sent it), so the incidents those alerts opened in an
    Alertmanager-style receiver stayed open for good; a period that alerted nothing still ends silently."""
    spec = make_spec(thresholds=[{"percent": 50}, {"percent": 80}, {"percent": 100, "actions": ["Alert", "ScaleDown"]}])
    warned = plan_budget(spec, D(85), [svc("a", 1)], AlertState(), utc(2026, 5, 1, 22), policy=POLICY)
    assert warned.state is BudgetState.WARNING and warned.actions == ()
    assert kinds(warned) == [AlertKind.THRESHOLD_CROSSED]
    rolled = plan_budget(spec, D(0), [svc("a", 1)], roundtrip(warned), utc(2026, 5, 2, 0, 5), policy=POLICY)
    (recovered,) = rolled.alerts
    assert recovered.kind is AlertKind.RECOVERED and recovered.resolved and recovered.severity == "info"
    assert [(f.kind, f.threshold_percent) for f in recovered.resolves] == [(AlertKind.THRESHOLD_CROSSED, 50),
                                                                (AlertKind.THRESHOLD_CROSSED, 80)]
    assert recovered.actions == ()
    assert recovered.title == f"Budget {POLICY}: a new daily period started, its alerts resolved"
    assert dict(recovered.facts())["Action"] == "none"
    again = plan_budget(spec, D(1), [svc("a", 1)], roundtrip(rolled), utc(2026, 5, 2, 1), policy=POLICY)
    assert again.alerts == ()
    quiet = plan_budget(spec, D(30), [svc("a", 1)], AlertState(), utc(2026, 5, 1, 22), policy=POLICY)
    assert quiet.alerts == () and quiet.state is BudgetState.OK
    assert plan_budget(spec, D(0), [svc("a", 1)], roundtrip(quiet), utc(2026, 5, 2, 0, 5), policy=POLICY).alerts == ()


def test_a_period_changed_at_a_shared_start_alerts_again_what_its_recovery_resolved(make_spec) -> None:
    """Daily -> Weekly on a Monday: both periods start at 00:00Z, so the 50 % alert of the day (resolved by the
    recovery the change sends) read as already alerted in the week: never alerted there, and resolved a second time
    by the week's own recovery (an unmatched resolve at an Alertmanager-style receiver)."""
    thresholds = [{"percent": 50}, {"percent": 80}]
    daily = make_spec(thresholds=thresholds, limit={"amount": "100"})
    weekly = make_spec(thresholds=thresholds, limit={"amount": "100"}, period="Weekly")
    day = plan_budget(daily, D(60), [svc("a", 1)], AlertState(), utc(2026, 5, 4, 12), policy=POLICY)  # a Monday
    assert kinds(day) == [AlertKind.THRESHOLD_CROSSED] and day.alerts[0].thresholds_percent == (50,)
    week = plan_budget(weekly, D(60), [svc("a", 1)], roundtrip(day), utc(2026, 5, 4, 13), policy=POLICY)
    assert kinds(week) == [AlertKind.RECOVERED, AlertKind.THRESHOLD_CROSSED]
    assert [f.starts_at for f in week.alerts[0].resolves] == [utc(2026, 5, 4, 12)]
    assert week.alerts[1].thresholds_percent == (50,)
    later = plan_budget(weekly, D(85), [svc("a", 1)], roundtrip(week), utc(2026, 5, 5, 13), policy=POLICY)
    assert [a.thresholds_percent for a in later.alerts] == [(80,)]
    end = plan_budget(weekly, D(0), [svc("a", 1)], roundtrip(later), utc(2026, 5, 11, 0, 5), policy=POLICY)
    (recovered,) = end.alerts
    assert [(f.threshold_percent, f.starts_at) for f in recovered.resolves] == [(50, utc(2026, 5, 4, 13)),
                                                                              (80, utc(2026, 5, 5, 13))]


def test_an_exceeded_period_that_alerted_and_enforced_nothing_ends_with_a_plain_notice(make_spec) -> None:
    spec = make_spec(thresholds=[{"percent": 120}], forecast={"enabled": False})
    over = plan_budget(spec, D(110), [svc("a", 1)], AlertState(), utc(2026, 5, 1, 22), policy=POLICY)
    assert over.state is BudgetState.EXCEEDED and over.alerts == () and over.actions == ()
    (recovered,) = plan_budget(spec, D(0), [svc("a", 1)], roundtrip(over), utc(2026, 5, 2, 0, 5), policy=POLICY).alerts
    assert recovered.resolves == () and recovered.actions == ()
    assert recovered.title == f"Budget {POLICY}: a new daily period started"


# -------------------------------------------------------------------------------------- enforcement
def test_enforcement_targets_and_threshold_order(make_spec) -> None:
    spec = make_spec(thresholds=[
        {"percent": 50, "actions": ["Alert", "CapReplicas"], "capReplicas": 3},
        {"percent": 90, "actions": ["ScaleDown"]},
        {"percent": 120, "actions": ["ScaleToZero"]},
    ], enforcement={"floorReplicas": 1})
    services = [svc("a", 5, max_replicas=4), svc("b", 2, max_replicas=8)]
    cap = plan_budget(spec, D(60), services, AlertState(), utc(2026, 5, 1, 9))
    assert [(a.name, a.action.value, a.max_replicas, a.desired_replicas) for a in cap.actions] == [
        ("a", "CapReplicas", 3, 3), ("b", "CapReplicas", 3, 2)]
    down = plan_budget(spec, D(95), services, AlertState(), utc(2026, 5, 1, 9))
    assert {(a.name, a.action.value, a.max_replicas) for a in down.actions} == {
        ("a", "ScaleDown", 1), ("b", "ScaleDown", 1)}
    zero = plan_budget(spec, D(130), services, AlertState(), utc(2026, 5, 1, 9))
    assert {(a.action.value, a.max_replicas, a.desired_replicas) for a in zero.actions} == {("ScaleToZero", 0, 0)}
    assert zero.effective_max_replicas() == {("team-search", "a"): 0, ("team-search", "b"): 0}


def test_cap_never_raises_a_services_own_maximum(make_spec) -> None:
    plan = plan_budget(make_spec(), D(85), [svc("a", 1, max_replicas=1)], AlertState(), utc(2026, 5, 1, 9))
    assert plan.actions[0].max_replicas == 1  # capReplicas 2 > maxReplicas 1


def test_a_staged_services_cap_counts_both_pools_maximum(make_spec) -> None:
    """CapReplicas -> min(maxReplicas, capReplicas) with a staged service's maximum over both pools (front 3 +
    image encoder pool 4): a cap of 5 stays 5 (the planner splits it between the pools), not the front's 3."""
    spec = make_spec(thresholds=[{"percent": 50, "actions": ["CapReplicas"], "capReplicas": 5},
                                 {"percent": 90, "actions": ["ScaleDown"]}], enforcement={"floorReplicas": 1})
    staged = replace(svc("staged", 2, max_replicas=3), pool_max_replicas=4)
    plain = svc("plain", 2, max_replicas=3)
    cap = plan_budget(spec, D(60), [staged, plain], AlertState(), utc(2026, 5, 1, 9))
    assert {a.name: a.max_replicas for a in cap.actions} == {"staged": 5, "plain": 3}
    big = make_spec(thresholds=[{"percent": 50, "actions": ["CapReplicas"], "capReplicas": 20}])
    assert plan_budget(big, D(60), [staged], AlertState(), utc(2026, 5, 1, 9)).actions[0].max_replicas == 7
    down = plan_budget(spec, D(95), [staged], AlertState(), utc(2026, 5, 1, 9))
    assert down.actions[0].max_replicas == 1  # the floor: the planner holds 1 + 1


def test_a_staged_services_action_says_what_runs_over_both_pools(make_spec) -> None:
    """The cap of a staged service counts both pools, so what its action says runs (the chat alert's Action line:
    ``CapReplicas ns/name to 4 (running N, ...)``) and ``desired_replicas`` count both too: front 3 + 2 pool pods
    running is 5 under a cap of 4 (the front's 3 alone reads as within it). One piece: its replicas, as before."""
    from modalscale.costmodel.ledger import PodPool, PodRun

    spec = make_spec(thresholds=[{"percent": 50, "actions": ["CapReplicas"], "capReplicas": 4}])
    pool = PodPool("image-encoder", (PodRun("staged-image-encoder-a", None), PodRun("staged-image-encoder-b", None),
                                     PodRun("staged-image-encoder-c", None, utc(2026, 5, 1, 8))), D("1"))
    staged = replace(svc("staged", 3, max_replicas=3), pool_max_replicas=4, pools=(pool,))
    plain = svc("plain", 3, max_replicas=6)
    plan = plan_budget(spec, D(60), [staged, plain], AlertState(), utc(2026, 5, 1, 9))
    got = {a.name: (a.max_replicas, a.current_replicas, a.desired_replicas) for a in plan.actions}
    assert got == {"staged": (4, 5, 4), "plain": (4, 3, 3)}
    assert "CapReplicas team-search/staged to 4 (running 5, at 50 %" in next(
        a.describe() for a in plan.actions if a.name == "staged")


def test_a_staged_service_under_a_cap_of_one_is_held_to_the_one_plus_one_it_runs(make_spec) -> None:
    """Issue 24 review: a cap of 1 leaves a staged service 1 front + 1 image encoder replica, so its action's
    ``desired_replicas``, its text (the alert's Action line) and its ``enforcedServices`` entry say 2 run, not 1."""
    from modalscale.costmodel.ledger import PodPool, PodRun

    spec = make_spec(thresholds=[{"percent": 50, "actions": ["CapReplicas"], "capReplicas": 1}])
    pool = PodPool("image-encoder", (PodRun("staged-image-encoder-a", None), PodRun("staged-image-encoder-b", None)),
                   D("1"))
    staged = replace(svc("staged", 3, max_replicas=3), pool_max_replicas=4, pools=(pool,))
    plan = plan_budget(spec, D(60), [staged, svc("plain", 3, max_replicas=6)], AlertState(), utc(2026, 5, 1, 9))
    got = {a.name: (a.max_replicas, a.current_replicas, a.desired_replicas) for a in plan.actions}
    assert got == {"staged": (1, 5, 2), "plain": (1, 3, 1)}
    runs = "capped at 1; a staged service runs at least 1 front + 1 image-encoder replica: 2"
    texts = {a.name: a.describe() for a in plan.actions}
    assert f"CapReplicas team-search/staged to 1 ({runs}) (running 5, at 50 %" in texts["staged"]
    assert "CapReplicas team-search/plain to 1 (running 3, at 50 %" in texts["plain"]
    assert {e.name: (e.max_replicas, e.describe()) for e in plan.enforced_services} == {
        "staged": (1, runs), "plain": (1, "at most 1 replica(s)")}


@pytest.mark.parametrize(
    ("order", "expected"),
    [("LowestPriorityFirst", ["low", "dear-mid", "cheap-mid", "high"]),
     ("HighestCostFirst", ["dear-mid", "high", "low", "cheap-mid"])],
)
def test_services_are_ordered_by_priority_or_cost(make_spec, order: str, expected: list[str]) -> None:
    # cost rates: high 2 x 3 = 6, low 1, cheap-mid 0.5, dear-mid 4 x 2 = 8 USD/h;
    # equal priority (100) is broken by the higher cost first
    services = [svc("high", 2, "3", priority=500), svc("low", 1, "1", priority=10),
                svc("cheap-mid", 1, "0.5", priority=100), svc("dear-mid", 4, "2", priority=100)]
    plan = plan_budget(make_spec(enforcement={"order": order}), D(85), services, AlertState(), utc(2026, 5, 1, 9))
    assert [a.name for a in plan.actions] == expected


def test_dry_run_reports_actions_but_applies_none(make_spec) -> None:
    plan = plan_budget(make_spec(enforcement={"dryRun": True}), D(105), [svc("a", 4)], AlertState(),
                       utc(2026, 5, 1, 9), policy=POLICY)
    assert plan.actions and all(a.dry_run and not a.applied for a in plan.actions)
    assert plan.effective_max_replicas() == {}
    assert plan_json(plan)["enforcedServices"][0]["dryRun"] is True
    assert "[dry run, not applied]" in plan.alerts[0].text()


def test_enforcement_since_is_kept_while_the_action_holds(make_spec) -> None:
    first = plan_budget(make_spec(), D(85), [svc("a", 4)], AlertState(), utc(2026, 5, 1, 9))
    later = plan_budget(make_spec(), D(90), [svc("a", 2)], roundtrip(first), utc(2026, 5, 1, 10))
    assert later.actions[0].since == utc(2026, 5, 1, 9)
    stronger = plan_budget(make_spec(), D(101), [svc("a", 2)], roundtrip(later), utc(2026, 5, 1, 11))
    assert (stronger.actions[0].action, stronger.actions[0].since) == (ThresholdAction.SCALE_DOWN, utc(2026, 5, 1, 11))


def test_raising_the_limit_mid_period_lifts_enforcement_without_realerting(make_spec) -> None:
    tight = plan_budget(make_spec(), D(85), [svc("a", 4)], AlertState(), utc(2026, 5, 1, 9))
    loose = plan_budget(make_spec(limit={"amount": "1000"}), D(86), [svc("a", 4)], roundtrip(tight),
                        utc(2026, 5, 1, 10))
    assert loose.actions == () and loose.alerts == () and loose.state is BudgetState.OK


# --------------------------------------------------------------------------------------- blind rule
def test_unknown_price_is_reported_once_and_the_state_is_unknown_below_the_limit(make_spec) -> None:
    services = [svc("a", 4, "1"), svc("b", 2, None)]
    plan = plan_budget(make_spec(), D(60), services, AlertState(), utc(2026, 5, 1, 9), policy=POLICY)
    assert plan.state is BudgetState.UNKNOWN and plan.reason == "GovernanceBlind"
    assert plan.thresholds_crossed == (50,) and plan.actions == ()  # 50 % only alerts
    assert plan.burn_rate_usd_per_hour is None and plan.forecast_usd is None
    status = plan_json(plan)
    assert status["forecast"] is None and status["burnRatePerHour"] is None  # null deletes stale values
    assert kinds(plan) == [AlertKind.GOVERNANCE_BLIND, AlertKind.THRESHOLD_CROSSED]
    blind = plan.alerts[0]
    assert "team-search/b" in blind.text() and "lower bound" in blind.title
    assert "Spent: at least 60.00 USD" in plan.alerts[1].text()
    again = plan_budget(make_spec(), D(61), services, roundtrip(plan), utc(2026, 5, 1, 9, 1), policy=POLICY)
    assert kinds(again) == []
    # Over the limit the state is Exceeded; the blindness already reported is not reported again.
    over = plan_budget(make_spec(), D(105), services, roundtrip(again), utc(2026, 5, 1, 9, 2), policy=POLICY)
    assert over.state is BudgetState.EXCEEDED and AlertKind.GOVERNANCE_BLIND not in kinds(over)
    assert [(a.name, a.action, a.max_replicas) for a in over.actions] == [
        ("a", ThresholdAction.SCALE_DOWN, 1), ("b", ThresholdAction.SCALE_DOWN, 1)]


def test_enforcement_in_force_is_held_while_unknown_and_the_lower_bound_tightens_it(make_spec) -> None:
    # 79.99 + 4 x 40 USD/h x 60 s = 82.66 >= 80: the 80 % cap is enforced ahead.
    capped = plan_budget(make_spec(), D("79.99"), [svc("a", 4, "40")], AlertState(), utc(2026, 5, 1, 9))
    assert [(e.action, e.max_replicas) for e in capped.enforced_services] == [(ThresholdAction.CAP_REPLICAS, 2)]
    # Now the price cannot be read: the known part (79.99, rate 0) no longer reaches 80 % within the interval,
    # yet the cap in force is held (lifting it would act on data that could not be read).
    held = plan_budget(make_spec(), D("79.99"), [svc("a", 4, None)], roundtrip(capped), utc(2026, 5, 1, 9, 1))
    assert held.state is BudgetState.UNKNOWN
    assert [(e.action, e.max_replicas) for e in held.enforced_services] == [(ThresholdAction.CAP_REPLICAS, 2)]
    # 120 USD known is past the limit: the 100 % ScaleDown is enforced although the replicas are unknown.
    tighter = plan_budget(make_spec(), D(120), [svc("a", None)], roundtrip(held), utc(2026, 5, 1, 10))
    assert tighter.state is BudgetState.EXCEEDED
    assert [(e.action, e.max_replicas) for e in tighter.enforced_services] == [(ThresholdAction.SCALE_DOWN, 1)]
    next_day = plan_budget(make_spec(), D(1), [svc("a", None)], roundtrip(tighter), utc(2026, 5, 2, 1))
    assert next_day.enforced_services == ()


def test_service_state_turns_unknown_price_into_none_not_zero() -> None:
    cat = default_catalog()
    known = service_state("ns", "a", replicas=2, max_replicas=4, resources=ReplicaResources.from_quantities(
        "2", "8Gi", 1, "nvidia-l4"), tier="OnDemand", catalog=cat)
    assert known.known and known.usd_per_replica_hour == D("0.657158239")  # 0.063222 + 0.033896 + 0.560040239
    unknown = service_state("ns", "b", replicas=2, max_replicas=4, resources=ReplicaResources.from_quantities(
        "2", "8Gi", 1, "nvidia-b200"), tier="OnDemand", catalog=cat)
    assert unknown.usd_per_replica_hour is None and "nvidia-b200" in unknown.unknown_reason


# --------------------------------------------------------------------------------------------- spec
@pytest.mark.parametrize(
    ("overrides", "fragment"),
    [
        ({"period": "Hourly"}, "spec.period"),
        ({"timeZone": "Mars/Olympus"}, "spec.timeZone"),
        ({"limit": {"amount": "0"}}, "spec.limit.amount"),
        ({"limit": {"amount": 12.5}}, "spec.limit.amount"),
        ({"limit": {"currency": "EUR"}}, "spec.limit.currency"),
        ({"thresholds": [{"percent": 80}, {"percent": 50}]}, "spec.thresholds"),
        ({"thresholds": [{"percent": 80, "actions": ["CapReplicas"]}]}, "spec.thresholds[0]"),
        ({"thresholds": [{"percent": 250}]}, "spec.thresholds[0].percent"),
        ({"thresholds": []}, "spec.thresholds"),
        ({"enforcement": {"order": "Random"}}, "spec.enforcement.order"),
        ({"notifications": [{"name": "x", "type": "Slack", "secretRef": {"name": "s"}},
                            {"name": "x", "type": "Teams", "secretRef": {"name": "t"}}]}, "spec.notifications"),
        ({"notifications": [{"name": "x", "type": "Pager", "secretRef": {"name": "s"}}]}, "spec.notifications[0].type"),
    ],
)
def test_invalid_spec_names_the_field(spec_dict, overrides: dict, fragment: str) -> None:
    with pytest.raises(InvalidBudgetSpec) as info:
        parse_budget_spec(spec_dict(**overrides))
    assert fragment in str(info.value)


def test_spec_defaults_follow_the_crd() -> None:
    spec = parse_budget_spec({"period": "Monthly", "limit": {"amount": "10"}, "thresholds": [{"percent": 100}]})
    assert spec.time_zone == "UTC" and spec.limit.currency == "USD"
    assert spec.thresholds[0].actions == (ThresholdAction.ALERT,)
    assert (spec.enforcement.floor_replicas, spec.enforcement.order.value, spec.enforcement.dry_run) == (
        1, "LowestPriorityFirst", False)
    assert (spec.forecast.enabled, spec.forecast.alert_at_percent, spec.evaluation_interval_s) == (True, 100, 60)


@pytest.mark.parametrize(
    ("selector", "namespace", "labels", "selected"),
    [({}, "team-search", {}, True), ({}, "other", {}, False),
     ({"namespaces": ["a", "b"]}, "b", {}, True),
     ({"matchLabels": {"team": "search"}}, "team-search", {"team": "search"}, True),
     ({"matchLabels": {"team": "search"}}, "team-search", {"team": "ads"}, False),
     ({"matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}, "team-search", {"tier": "gold"},
      True),
     ({"matchExpressions": [{"key": "tier", "operator": "NotIn", "values": ["gold"]}]}, "team-search",
      {"tier": "gold"}, False),
     ({"matchExpressions": [{"key": "tier", "operator": "DoesNotExist"}]}, "team-search", {}, True)],
)
def test_selector_matches_like_the_crd_describes(selector, namespace, labels, selected) -> None:
    spec = parse_budget_spec({"selector": selector, "period": "Daily", "limit": {"amount": "1"},
                              "thresholds": [{"percent": 100}]})
    assert spec.selector.matches("team-search", namespace, labels) is selected


def test_status_fields_use_crd_names_and_decimal_strings(make_spec) -> None:
    plan = plan_budget(make_spec(forecast={"enabled": True}), D("85.125"), [svc("a", 2, "1.5")], AlertState(),
                       utc(2026, 5, 1, 12), policy=POLICY)
    status = plan_json(plan)
    assert {k: status[k] for k in ("periodStart", "periodEnd", "spent", "remaining", "state", "burnRatePerHour",
                                   "forecast", "currency")} == {
        "periodStart": "2026-05-01T00:00:00Z", "periodEnd": "2026-05-02T00:00:00Z", "spent": "85.12",
        "remaining": "14.88", "state": "Warning", "burnRatePerHour": "3.00", "forecast": "121.12", "currency": "USD"}
    assert len(status["thresholds"]) == 4  # three thresholds and the forecast record (CRD maxItems 11)


def test_corrupt_alert_status_names_the_field() -> None:
    problem = read_budget({"thresholds": [{"percent": 50, "alertedPeriodStart": "soon"}]}).problem
    assert problem is not None and "status.thresholds[0].alertedPeriodStart" in problem
    problem = read_budget({"state": "Fine"}).problem
    assert problem is not None and "status.state" in problem


# ------------------------------------------------------------------------- enforcement one evaluation ahead
# One service at 3 replicas x 2 USD = 6 USD/h; at the default 60 s interval it spends 6 / 60 = 0.10 USD per
# evaluation. With a 100 USD limit a hard cap at 100 % must start at spent >= 99.90 to hold the limit.
HARD_CAP = {"thresholds": [{"percent": 100, "actions": ["Alert", "ScaleToZero"]}]}


@pytest.mark.parametrize(
    ("spent", "enforced"),
    [("99.89", False), ("99.90", True), ("100", True)],
    ids=["99.89+0.10-short", "99.90+0.10-reaches", "crossed"],
)
def test_hard_cap_starts_when_the_next_interval_would_cross_it(make_spec, spent: str, enforced: bool) -> None:
    plan = plan_budget(make_spec(**HARD_CAP), D(spent), [svc("a", 3, "2", max_replicas=4)], AlertState(),
                       utc(2026, 5, 1, 9), policy=POLICY)
    assert plan.thresholds_enforced == ((100,) if enforced else ())
    assert [(a.action, a.max_replicas, a.desired_replicas) for a in plan.actions] == (
        [(ThresholdAction.SCALE_TO_ZERO, 0, 0)] if enforced else [])
    assert plan.horizon_s == 60


# A replica scaled away keeps running (and is charged) until it stops, up to its terminationGracePeriodSeconds:
# 90 s for a BuiltIn runtime replica. At 6 USD/h the next 60 s + 90 s add 6 x 150 / 3600 = 0.25 USD, so the hard
# cap must start at spent >= 99.75 for the spend to stop at 100.
@pytest.mark.parametrize(
    ("spent", "enforced"),
    [("99.74", False), ("99.75", True)],
    ids=["99.74+0.25-short", "99.75+0.25-reaches"],
)
def test_hard_cap_looks_ahead_by_the_interval_plus_the_longest_stop_of_a_replica(make_spec, spent: str,
                                                                                 enforced: bool) -> None:
    services = [replace(svc("a", 3, "2", max_replicas=4), stop_grace_s=90), replace(svc("b", 0, "2"), stop_grace_s=0)]
    plan = plan_budget(make_spec(**HARD_CAP), D(spent), services, AlertState(), utc(2026, 5, 1, 9), policy=POLICY)
    assert plan.horizon_s == 60 + 90
    assert plan.thresholds_enforced == ((100,) if enforced else ())


@pytest.mark.parametrize(("graces", "expected"), [((), 60), ((0,), 60), ((30, 90, 0), 150)],
                         ids=["no-service", "stops-at-once", "longest"])
def test_the_horizon_is_the_interval_plus_the_longest_stop(graces: tuple[int, ...], expected: int) -> None:
    services = [replace(svc(f"s{i}"), stop_grace_s=g) for i, g in enumerate(graces)]
    assert enforcement_horizon_s(60, services) == expected


def test_reactive_horizon_zero_acts_only_after_the_crossing(make_spec) -> None:
    services = [svc("a", 3, "2", max_replicas=4)]
    before = plan_budget(make_spec(**HARD_CAP), D("99.99"), services, AlertState(), utc(2026, 5, 1, 9), horizon_s=0)
    assert before.actions == () and before.alerts == ()
    at = plan_budget(make_spec(**HARD_CAP), D(100), services, AlertState(), utc(2026, 5, 1, 9), horizon_s=0)
    assert [a.action for a in at.actions] == [ThresholdAction.SCALE_TO_ZERO] and not at.actions[0].ahead
    with pytest.raises(ValueError, match="horizon_s"):
        plan_budget(make_spec(), D(1), services, AlertState(), utc(2026, 5, 1, 9), horizon_s=-1)


def test_enforcing_ahead_alerts_once_says_so_and_keeps_crossed_for_the_real_crossing(make_spec) -> None:
    spec = make_spec(**HARD_CAP)
    ahead = plan_budget(spec, D("99.90"), [svc("a", 3, "2", max_replicas=4)], AlertState(), utc(2026, 5, 1, 9),
                        policy=POLICY)
    assert ahead.thresholds_crossed == () and ahead.actions[0].ahead
    assert (ahead.state, ahead.reason) == (BudgetState.WARNING, "ThresholdAhead")
    (alert,) = ahead.alerts
    assert (alert.kind, alert.thresholds_percent, alert.ahead_percents) == (AlertKind.THRESHOLD_CROSSED, (100,), (100,))
    assert alert.title == ("Budget team-search/search-daily would cross 100 % of its daily limit within 60 s at the "
                           "current burn rate: enforcing now, ahead of the crossing")
    assert alert.severity == "critical"  # a 100 % threshold, though spent is 99.90 %
    assert ("Enforced ahead",
            "100 % not crossed yet: at the current burn rate it would be within 60 s") in alert.facts()
    assert "ahead of the crossing" in ahead.actions[0].describe()
    (record,) = [r for r in ahead.alert_state.records if not r.forecast]
    assert (record.crossed, record.alerted_period_start) == (False, utc(2026, 5, 1))
    # Scaled to zero: no burn any more. Still held (no flapping), not re-alerted, since unchanged.
    zero = [svc("a", 0, "2", max_replicas=4)]
    held = plan_budget(spec, D("99.95"), zero, roundtrip(ahead), utc(2026, 5, 1, 9, 1), policy=POLICY)
    assert [(a.action, a.since) for a in held.actions] == [(ThresholdAction.SCALE_TO_ZERO, utc(2026, 5, 1, 9))]
    assert held.alerts == ()
    # The last interval's spend arrives and crosses 100 %: crossed now, still exactly one alert.
    crossed = plan_budget(spec, D("100.02"), zero, roundtrip(held), utc(2026, 5, 1, 9, 2), policy=POLICY)
    assert crossed.thresholds_crossed == (100,) and crossed.alerts == () and crossed.state is BudgetState.EXCEEDED
    assert [r.crossed for r in crossed.alert_state.records if not r.forecast] == [True]


def test_hold_uses_the_services_maximum_rate_and_lifts_when_the_limit_is_raised(make_spec) -> None:
    spec = make_spec(**HARD_CAP)
    ahead = plan_budget(spec, D("99.90"), [svc("a", 3, "2", max_replicas=4)], AlertState(), utc(2026, 5, 1, 9))
    zero = [svc("a", 0, "2", max_replicas=4)]
    # Held: 99.87 + 4 replicas x 2 USD/h x 60 s = 99.87 + 0.1333 = 100.0033 >= 100 (the current burn is 0).
    assert plan_budget(spec, D("99.87"), zero, roundtrip(ahead), utc(2026, 5, 1, 9, 1)).thresholds_enforced == (100,)
    # Without the earlier enforcement the same observation enforces nothing: the hold is what keeps it.
    assert plan_budget(spec, D("99.87"), zero, AlertState(), utc(2026, 5, 1, 9, 1)).actions == ()
    raised = plan_budget(make_spec(limit={"amount": "200"}, **HARD_CAP), D("99.95"), zero, roundtrip(ahead),
                         utc(2026, 5, 1, 9, 1))
    assert raised.actions == () and raised.alerts == () and raised.state is BudgetState.OK


def test_a_sequence_of_evaluations_enforces_once_and_never_flaps(make_spec) -> None:
    # Burn 6 USD/h while running, 0 once scaled to zero; spend per evaluation follows from the replicas.
    spec, state, spent, replicas = make_spec(**HARD_CAP), AlertState(), D("99.70"), 3
    history = []
    for minute in range(8):
        plan = plan_budget(spec, spent, [svc("a", replicas, "2", max_replicas=4)], state,
                           utc(2026, 5, 1, 9, minute), policy=POLICY)
        history.append((bool(plan.actions), len(plan.alerts)))
        replicas = min(replicas, plan.effective_max_replicas().get(("team-search", "a"), replicas))
        spent += D(replicas) * 2 / 60  # the next minute at the replicas now running
        state = roundtrip(plan)
    # 99.70 -> 99.80 -> 99.90 (+0.10 reaches 100: enforce) -> zero from then on
    assert history == [(False, 0), (False, 0), (True, 1)] + [(True, 0)] * 5
    assert spent == D("99.90")


def test_a_staged_services_enforcement_is_held_by_both_pools_maximum_rate_and_never_flaps(make_spec) -> None:
    """The hold's bound is every selected service at its maximum rate: for a staged service the image encoder pool
    at its maxReplicas too (its pods are in the burn rate, so a bound without them is below the rate that enforced
    the threshold). Front 1 (max 1) + pool 3 (max 3), 1.5 USD/h a replica: 6 USD/h, 0.10 USD a minute, as in the
    one-piece sequence above. A bound with the front alone (1.5 USD/h: 99.90 + 0.025 < 100) lifts the ScaleToZero
    at the next evaluation, the pools come back and it is enforced again."""
    from modalscale.autoscaler.policy import split_staged_cap
    from modalscale.costmodel.ledger import PodPool, PodRun

    spec, state, spent, running = make_spec(**HARD_CAP), AlertState(), D("99.70"), (1, 3)
    start = utc(2026, 5, 1, 8)

    def staged(front: int, pool: int) -> ServiceState:
        return replace(svc("a", front, "1.5", max_replicas=1), pool_max_replicas=3, pools=(
            PodPool("image-encoder", tuple(PodRun(f"a-image-encoder-{i}", start) for i in range(pool)), D("1.5")),))

    history = []
    for minute in range(8):
        plan = plan_budget(spec, spent, [staged(*running)], state, utc(2026, 5, 1, 9, minute), policy=POLICY)
        history.append((bool(plan.actions), len(plan.alerts)))
        split = split_staged_cap(1, 3, plan.effective_max_replicas().get(("team-search", "a")), D("1.5"), D("1.5"))
        running = (split.front, split.image_encoder)
        spent += D(sum(running)) * D("1.5") / 60  # the next minute at the replicas now running
        state = roundtrip(plan)
    # 99.70 -> 99.80 -> 99.90 (+0.10 reaches 100: enforce) -> both pools at zero from then on
    assert history == [(False, 0), (False, 0), (True, 1)] + [(True, 0)] * 5
    assert spent == D("99.90")


def test_enforcement_in_force_is_downward_closed(make_spec) -> None:
    # Hourly evaluation: a at 0 replicas (max 10) at 6 USD = up to 60 USD in the next hour.
    spec = make_spec(evaluationIntervalSeconds=3600, thresholds=[
        {"percent": 90, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
        {"percent": 100, "actions": ["Alert", "ScaleToZero"]}])
    first = plan_budget(spec, D(45), [svc("a", 10, "6")], AlertState(), utc(2026, 5, 1, 9))  # 45 + 60 >= 100
    assert first.thresholds_enforced == (90, 100) and first.thresholds_crossed == ()
    assert [(a.action, a.threshold_percent) for a in first.actions] == [(ThresholdAction.SCALE_TO_ZERO, 100)]
    # Only ScaleToZero is recorded per service; 100 % is held (45 + 60 bound) and so 90 % stays enforced too.
    later = plan_budget(spec, D(45), [svc("a", 0, "6")], roundtrip(first), utc(2026, 5, 1, 10))
    assert later.thresholds_enforced == (90, 100)


def test_alert_only_thresholds_are_not_anticipated(make_spec) -> None:
    plan = plan_budget(make_spec(), D("49.95"), [svc("a", 3, "2")], AlertState(), utc(2026, 5, 1, 9))
    assert plan.alerts == () and plan.state is BudgetState.OK  # 49.95 + 0.10 >= 50, but 50 % only alerts


def test_crossed_and_ahead_in_one_message(make_spec) -> None:
    spec = make_spec(thresholds=[{"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
                                 {"percent": 100, "actions": ["Alert", "ScaleDown"]}])
    # 2 replicas x 30 USD = 60 USD/h -> 1.00 USD per 60 s: 99.00 + 1.00 reaches 100
    plan = plan_budget(spec, D(99), [svc("a", 2, "30")], AlertState(), utc(2026, 5, 1, 9), policy=POLICY)
    (alert,) = plan.alerts
    assert alert.title == ("Budget team-search/search-daily crossed 80 % and would cross 100 % of its daily limit "
                           "within 60 s at the current burn rate: enforcing now, ahead of the crossing")
    assert plan.thresholds_crossed == (80,) and plan.thresholds_enforced == (80, 100)
    assert [(a.action, a.max_replicas, a.ahead) for a in plan.actions] == [(ThresholdAction.SCALE_DOWN, 1, True)]


@pytest.mark.parametrize("spent", ["0", "49.99", "80", "99.99", "100", "150"])
def test_reactive_rule_enforces_exactly_the_crossed_thresholds(make_spec, spent: str) -> None:
    plan = plan_budget(make_spec(), D(spent), [svc("a", 5, "40")], AlertState(), utc(2026, 5, 1, 9), horizon_s=0)
    enforcing = tuple(p for p in plan.thresholds_crossed if p != 50)  # 50 % only alerts
    assert plan.thresholds_enforced == enforcing
    assert all(not a.ahead for a in plan.actions)


def test_only_a_new_or_lower_cap_lowers_the_rate_charged_from_now_on(make_spec) -> None:
    spec = make_spec()  # 80 %: CapReplicas 2; 100 %: ScaleDown to 1
    services = [svc("a", 4, "1.5"), svc("b", 1, "2")]
    capped = plan_budget(spec, D(85), services, AlertState(), utc(2026, 5, 1, 9))
    # a runs 4 > cap 2: charged 2 x 1.5 from now; b runs 1 <= 2: as observed, so not listed.
    assert rates_after_enforcement(services, capped, AlertState()) == [
        ServiceObservation("team-search", "a", 2, D("1.5"))]
    # The next evaluation still sees a at 4: the same cap did not take effect, so 4 replicas are charged.
    again = plan_budget(spec, D(86), services, roundtrip(capped), utc(2026, 5, 1, 9, 1))
    assert rates_after_enforcement(services, again, roundtrip(capped)) == []
    # A stronger action (ScaleDown to 1) is new: lowered again, now to 1.
    down = plan_budget(spec, D(100), services, roundtrip(again), utc(2026, 5, 1, 9, 2))
    assert rates_after_enforcement(services, down, roundtrip(again)) == [
        ServiceObservation("team-search", "a", 1, D("1.5"))]
    dry = plan_budget(make_spec(enforcement={"dryRun": True}), D(85), services, AlertState(), utc(2026, 5, 1, 9))
    assert rates_after_enforcement(services, dry, AlertState()) == []  # nothing is applied in a dry run


def test_a_staged_services_rate_in_force_is_its_fronts_share_of_the_cap_over_both_pools(make_spec) -> None:
    """Issue 24 review: a cap over both pools is split (``split_staged_cap``: the costlier replica gives up first,
    never below 1), so after enforcement the front runs its share, not the whole cap, and a front within the whole
    cap may still be lowered. The image encoder pool has no rate in the ledger (a side pool, ``PodPool``: each pod
    charged by its own start and stop at its own price), so only the front's count is held there.

    Cap 4. a: front 3 at 2 USD/h (costlier), pool 3 at 1 USD/h: 6 > 4, the front gives up 2 -> front 1 + pool 3
    (front 3 <= 4 alone: nothing was lowered before). b: front 5 at 1 USD/h, pool 2 at 3 USD/h (costlier): the pool
    gives up 1 (to its floor 1), then the front 2 -> front 3 + pool 1 (the front at the whole cap 4 before)."""
    from modalscale.costmodel.ledger import PodPool, PodRun, with_rates_in_force

    spec = make_spec(thresholds=[{"percent": 80, "actions": ["CapReplicas"], "capReplicas": 4}])
    start, now = utc(2026, 5, 1, 8), utc(2026, 5, 1, 9)

    def staged(name: str, front: int, front_price: str, pool: int, pool_price: str) -> ServiceState:
        return replace(svc(name, front, front_price, max_replicas=5), pool_max_replicas=4,
                       pods=tuple(PodRun(f"{name}-{i}", start) for i in range(front)),
                       pools=(PodPool("image-encoder", tuple(PodRun(f"{name}-image-encoder-{i}", start)
                                                             for i in range(pool)), D(pool_price)),))

    services = [staged("a", 3, "2", 3, "1"), staged("b", 5, "1", 2, "3")]
    plan = plan_budget(spec, D(85), services, AlertState(), now)
    assert plan.effective_max_replicas() == {("team-search", "a"): 4, ("team-search", "b"): 4}
    lowered = rates_after_enforcement(services, plan, AlertState())
    assert lowered == [ServiceObservation("team-search", "a", 1, D("2")),
                       ServiceObservation("team-search", "b", 3, D("1"))]
    # What the next evaluation charges a, a minute later: its 2 front pods removed by the cap are gone unseen (no
    # record), its pool's 3 pods still run. Front: the 1 pod in force, 60 s x 2 USD/h = 120/3600 = 0.033333333;
    # pool: 3 x 60 s x 1 USD/h = 0.05; 0.083333333 USD. With the front's 3 replicas in force (not lowered), 2 gone
    # unseen would be charged the whole minute too: 3 x 60 x 2 / 3600 + 0.05 = 0.15.
    first = advance(Ledger(), [services[0].observation()], now, "Daily")
    ledger = with_rates_in_force(first.ledger, [o for o in lowered if o.name == "a"])
    later = replace(services[0], replicas=1, pods=services[0].pods[:1])  # type: ignore[index]
    second = advance(ledger, [later.observation()], now + timedelta(minutes=1), "Daily")
    assert second.spent_usd - first.spent_usd == D("0.083333333")


# ------------------------------------------------------------------ unknown price: the known spend is a lower bound
def _hard_cap_spec(make_spec):
    return make_spec(thresholds=[{"percent": 100, "actions": ["Alert", "ScaleToZero"]}])


def test_a_service_without_a_price_and_without_pods_does_not_switch_off_the_hard_cap(make_spec) -> None:
    # Issue 12's input: 120 USD spent of a 100 USD daily limit; big runs 10 x 1 USD/h; typo (mistyped GPU type:
    # no price, refused by the operator, so no pod) runs 0. A service with no running pod costs 0, priced or not.
    services = [svc("big", 10, "1"), svc("typo", 0, None)]
    plan = plan_budget(_hard_cap_spec(make_spec), D(120), services, AlertState(), utc(2026, 5, 1, 12), policy=POLICY)
    assert plan.state is BudgetState.EXCEEDED
    assert [(a.name, a.action, a.max_replicas) for a in plan.actions if a.name == "big"] == [
        ("big", ThresholdAction.SCALE_TO_ZERO, 0)]
    assert plan.burn_rate_usd_per_hour == D(10) and plan.blind_services == ()
    assert kinds(plan) == [AlertKind.THRESHOLD_CROSSED]
    without_typo = plan_budget(_hard_cap_spec(make_spec), D(120), services[:1], AlertState(), utc(2026, 5, 1, 12))
    assert [(a.name, a.max_replicas) for a in without_typo.actions] == [("big", 0)]


@pytest.mark.parametrize("typo", [svc("typo", 2, None), svc("typo", None, "1")], ids=["price", "replicas"])
def test_a_running_service_that_cannot_be_priced_leaves_the_known_spend_as_a_lower_bound_that_enforces(
        make_spec, typo: ServiceState) -> None:
    services = [svc("big", 10, "1"), typo]
    plan = plan_budget(_hard_cap_spec(make_spec), D(120), services, AlertState(), utc(2026, 5, 1, 12), policy=POLICY)
    # 120 USD is at least what was spent: the 100 % threshold is crossed for sure, and enforced on every service.
    assert plan.state is BudgetState.EXCEEDED and plan.thresholds_crossed == (100,)
    assert sorted((a.name, a.max_replicas) for a in plan.actions) == [("big", 0), ("typo", 0)]
    assert plan.blind_services and "team-search/typo" in plan.blind_services[0]
    assert kinds(plan) == [AlertKind.GOVERNANCE_BLIND, AlertKind.THRESHOLD_CROSSED]
    # Below the limit the lower bound cannot say Ok, Warning or Exceeded: the state is Unknown, and a hard cap the
    # known burn rate alone reaches within the next interval is still enforced ahead (50 + 10 USD/h x 5 h >= 100).
    under = plan_budget(_hard_cap_spec(make_spec), D(50), services, AlertState(), utc(2026, 5, 1, 12),
                        policy=POLICY, horizon_s=5 * 3600)
    assert under.state is BudgetState.UNKNOWN and under.reason == "GovernanceBlind"
    assert sorted((a.name, a.max_replicas, a.ahead) for a in under.actions) == [("big", 0, True), ("typo", 0, True)]
    assert under.burn_rate_usd_per_hour is None  # the true rate is unknown; 10 USD/h is only its lower bound
    quiet = plan_budget(_hard_cap_spec(make_spec), D(50), services, AlertState(), utc(2026, 5, 1, 12))
    assert quiet.state is BudgetState.UNKNOWN and quiet.actions == ()


def test_the_trials_ahead_alert_says_it_is_ahead_never_crossed_and_the_real_crossing_does_not_alert_again(
        make_spec) -> None:
    """New-user trial (7 Dec 2026): limit 0.002 USD, 50 % [Alert], 100 % [Alert, CapReplicas 1], 5 s evaluations,
    a 90 s grace period: at 53.38 % the 100 % threshold was enforced ahead (it would be crossed within 95 s) and
    alerted then, titled 'would have crossed 100 % ... within 95 s', read as a crossing that had not happened. The
    alert comes when enforcement acts (budgets.md says so); its title and facts say it is ahead, not crossed; the
    real crossing later in the period alerts nothing more (once per period)."""
    spec = make_spec(limit={"amount": "0.002"}, evaluationIntervalSeconds=5, thresholds=[
        {"percent": 50, "actions": ["Alert"]},
        {"percent": 100, "actions": ["Alert", "CapReplicas"], "capReplicas": 1}])
    echo = [replace(svc("echo", 2, "0.025", max_replicas=2), stop_grace_s=90)]  # 0.05 USD/h: 0.00132 USD in 95 s
    quiet = plan_budget(spec, D("0.0005"), echo, AlertState(), utc(2026, 5, 1, 9), policy=POLICY)
    assert quiet.alerts == ()  # 0.0005 + 0.00132 < 0.002
    ahead = plan_budget(spec, D("0.0010676"), echo, roundtrip(quiet), utc(2026, 5, 1, 9, 0, 5), policy=POLICY)
    assert ahead.thresholds_crossed == (50,) and ahead.thresholds_enforced == (100,)
    (alert,) = ahead.alerts
    assert (alert.thresholds_percent, alert.ahead_percents, alert.horizon_s) == ((50, 100), (100,), 95)
    assert alert.title == ("Budget team-search/search-daily crossed 50 % and would cross 100 % of its daily limit "
                           "within 95 s at the current burn rate: enforcing now, ahead of the crossing")
    facts = dict(alert.facts())
    assert facts["Spent"] == "0.001 USD of 0.002 USD (53.38 %)"
    assert facts["Enforced ahead"] == "100 % not crossed yet: at the current burn rate it would be within 95 s"
    # Spend really crosses 100 % (the cap's replica still charged): crossed now, not alerted again this period.
    over = plan_budget(spec, D("0.0021"), [replace(echo[0], replicas=1)], roundtrip(ahead),
                       utc(2026, 5, 1, 9, 2), policy=POLICY)
    assert over.thresholds_crossed == (50, 100) and over.alerts == ()
    assert [(r.percent, r.crossed) for r in over.alert_state.records if not r.forecast] == [(50, True), (100, True)]
    later = plan_budget(spec, D("0.0030"), [replace(echo[0], replicas=1)], roundtrip(over), utc(2026, 5, 1, 15),
                        policy=POLICY)
    assert later.alerts == ()
