"""A ``spec.timeZone`` change in the middle of a period: where later periods start moves, the period in progress
goes on (its spend, the thresholds it alerted, the enforcement in force), and only a spec change that moves the
spend or the limit past a threshold alerts again.

Before the fix a zone change made the period's identity (``status.periodStart``) differ: every threshold already
alerted was sent again, a ``Recovered`` notice said the period ended, enforcement was lifted, and where the new
zone's period had started after the stored one (UTC to America/New_York at 12:00Z) the ledger reset the spend to 0.
"""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone
from decimal import Decimal
from typing import Any

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.costmodel.budget import AlertKind, AlertState, PolicyRef, ServiceState
from modalscale.costmodel.evaluation import BudgetEvaluation, evaluate_budget
from modalscale.costmodel.ledger import Ledger
from modalscale.costmodel.periods import period_in_progress
from tests.factories import plan_json, read_budget

UTC = timezone.utc
POLICY = PolicyRef("team-search", "search-daily")
SPEC: dict[str, Any] = {
    "period": "Daily", "timeZone": "UTC", "limit": {"amount": "100", "currency": "USD"},
    "thresholds": [{"percent": 50, "actions": ["Alert"]},
                   {"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 2},
                   {"percent": 100, "actions": ["Alert", "ScaleDown"]}],
    "enforcement": {"floorReplicas": 1}, "forecast": {"enabled": False}}


def utc(*args: int) -> datetime:
    return datetime(*args, tzinfo=UTC)


def service(replicas: int) -> ServiceState:
    return ServiceState("team-search", "vc", replicas, 10, Decimal("2"))


def step(spec: dict[str, Any], stored: dict[str, Any] | None, replicas: int, now: datetime
         ) -> tuple[BudgetEvaluation, dict[str, Any]]:
    """One evaluation from the status an earlier one wrote (round trip through JSON), and the status it writes."""
    read = read_budget(stored) if stored is not None else None
    ledger = read.ledger if read is not None and read.ledger is not None else Ledger()
    alert_state = read.alert_state if read is not None else AlertState()
    ev = evaluate_budget(parse_budget_spec(spec), ledger, [service(replicas)], alert_state, now, policy=POLICY,
                         horizon_s=0)
    return ev, json.loads(json.dumps(plan_json(ev.plan, ev.ledger)))


def crossed_at_noon_utc() -> dict[str, Any]:
    """4 replicas at 2 USD/h from 00:00Z: 95.96 USD of 100 at 11:59:30Z, 50 % and 80 % alerted, capped at 2."""
    _, status = step(SPEC, None, 4, utc(2026, 11, 30, 0, 0))
    ev, status = step(SPEC, status, 4, utc(2026, 11, 30, 11, 59, 30))
    assert [a.thresholds_percent for a in ev.plan.alerts] == [(50, 80)]
    assert [(e.name, e.max_replicas) for e in ev.plan.enforced_services] == [("vc", 2)]
    return status


def test_the_pure_rule_a_stored_period_of_the_same_kind_still_in_progress() -> None:
    start, end = utc(2026, 11, 30, 0, 0), utc(2026, 12, 1, 0, 0)  # a UTC day
    assert period_in_progress("Daily", start, end, utc(2026, 11, 30, 12, 0))
    assert not period_in_progress("Daily", start, end, end)  # over: a new period
    assert not period_in_progress("Daily", start, end, start - timedelta(seconds=1))
    assert not period_in_progress("Weekly", start, end, utc(2026, 11, 30, 12, 0))  # spec.period changed
    assert not period_in_progress("Daily", None, end, utc(2026, 11, 30, 12, 0))
    assert not period_in_progress("Daily", start, None, utc(2026, 11, 30, 12, 0))  # status without periodEnd
    berlin_spring = (utc(2026, 3, 28, 23, 0), utc(2026, 3, 29, 22, 0))  # a 23 h Berlin day
    assert period_in_progress("Daily", *berlin_spring, utc(2026, 3, 29, 12, 0))
    assert period_in_progress("Monthly", utc(2026, 2, 1), utc(2026, 3, 1), utc(2026, 2, 14))
    assert not period_in_progress("Monthly", start, end, utc(2026, 11, 30, 12, 0))


def test_a_zone_change_whose_period_started_later_keeps_the_spend_alerts_and_caps() -> None:
    """UTC to America/New_York at 12:00Z: New York's day began at 05:00Z, after the stored 00:00Z."""
    status = crossed_at_noon_utc()
    ny = {**SPEC, "timeZone": "America/New_York"}
    ev, status = step(ny, status, 2, utc(2026, 11, 30, 12, 0))
    plan = ev.plan
    assert plan.alerts == ()  # was: Recovered, then ThresholdCrossed 50 %, 80 % again
    assert [(e.name, e.max_replicas) for e in plan.enforced_services] == [("vc", 2)]  # was: lifted
    assert plan.spent_usd == Decimal("95.966666666")  # 95.96 + 30 s of 2 replicas; was 0.033333333 (reset)
    assert (plan.period_start, plan.period_end) == (utc(2026, 11, 30, 5, 0), utc(2026, 12, 1, 5, 0))
    ev, status = step(ny, status, 2, utc(2026, 11, 30, 12, 0, 30))  # and the next evaluation, in the new zone
    assert ev.plan.alerts == () and ev.plan.enforced_services == plan.enforced_services
    ev, _ = step(ny, status, 2, utc(2026, 12, 1, 5, 0, 30))  # New York's next midnight starts the next period
    assert [a.kind for a in ev.plan.alerts] == [AlertKind.RECOVERED] and ev.plan.enforced_services == ()


def test_a_zone_change_whose_period_started_earlier_keeps_the_alerts_and_caps() -> None:
    """UTC to Asia/Tokyo at 12:00Z: Tokyo's day (21:00 local) began at 15:00Z the day before and ends at 15:00Z."""
    status = crossed_at_noon_utc()
    ev, _ = step({**SPEC, "timeZone": "Asia/Tokyo"}, status, 2, utc(2026, 11, 30, 12, 0))
    assert ev.plan.alerts == ()
    assert [(e.name, e.max_replicas) for e in ev.plan.enforced_services] == [("vc", 2)]
    assert ev.plan.spent_usd == Decimal("95.966666666")
    assert ev.plan.period_end == utc(2026, 11, 30, 15, 0)


def test_a_limit_change_with_the_zone_alerts_only_the_threshold_it_newly_crosses() -> None:
    status = crossed_at_noon_utc()
    lowered = {**SPEC, "timeZone": "America/New_York", "limit": {"amount": "90", "currency": "USD"}}
    ev, _ = step(lowered, status, 2, utc(2026, 11, 30, 12, 0))
    assert [(a.kind, a.thresholds_percent) for a in ev.plan.alerts] == [(AlertKind.THRESHOLD_CROSSED, (100,))]


def test_a_period_change_is_a_new_period() -> None:
    """Daily to Weekly is another budget (its own limit over other bounds): the daily alerts do not carry."""
    status = crossed_at_noon_utc()
    weekly = {**SPEC, "period": "Weekly", "limit": {"amount": "1000", "currency": "USD"}}
    ev, _ = step(weekly, status, 2, utc(2026, 11, 30, 12, 0))
    assert [a.kind for a in ev.plan.alerts] == [AlertKind.RECOVERED]
    assert ev.plan.enforced_services == ()


def test_the_recovery_after_a_zone_change_resolves_the_thresholds_alerted_before_it() -> None:
    """UTC to America/New_York at 12:00Z after 50 % (01:00Z) and 80 % (01:30Z) alerted in the UTC day: New York's
    day, which the period in progress now ends with, began at 05:00Z, after both alerts. The Recovered notice at
    New York's midnight resolves both (it resolved none: each alert's time was compared with the new start)."""
    _, status = step(SPEC, None, 30, utc(2026, 11, 30, 0, 0))  # 30 replicas at 2 USD/h: 60 USD/h
    ev, status = step(SPEC, status, 30, utc(2026, 11, 30, 1, 0))
    assert [a.thresholds_percent for a in ev.plan.alerts] == [(50,)]
    ev, status = step(SPEC, status, 0, utc(2026, 11, 30, 1, 30))  # 90 USD; none runs from here on
    assert [a.thresholds_percent for a in ev.plan.alerts] == [(80,)]
    ny = {**SPEC, "timeZone": "America/New_York"}
    ev, status = step(ny, status, 0, utc(2026, 11, 30, 12, 0))
    assert ev.plan.alerts == () and ev.plan.period_start == utc(2026, 11, 30, 5, 0)
    ev, _ = step(ny, status, 0, utc(2026, 12, 1, 5, 0, 30))
    (recovered,) = ev.plan.alerts
    assert recovered.kind is AlertKind.RECOVERED
    assert [(f.kind, f.threshold_percent, f.starts_at) for f in recovered.resolves] == [
        (AlertKind.THRESHOLD_CROSSED, 50, utc(2026, 11, 30, 1, 0)),
        (AlertKind.THRESHOLD_CROSSED, 80, utc(2026, 11, 30, 1, 30))]


def test_the_recovery_leaves_out_a_threshold_that_did_not_alert_in_the_period() -> None:
    """A threshold that alerted the day before and lost its Alert action: crossed again today it is recorded
    (``status.thresholds``) but sends nothing, so today's recovery does not resolve it; after a zone change
    whose new period began before its old alert time (UTC to Asia/Tokyo: 15:00Z the day before) neither."""
    loud = {**SPEC, "thresholds": [{"percent": p, "actions": ["Alert"]} for p in (50, 80, 100)]}
    quiet = {**SPEC, "thresholds": [{"percent": 50, "actions": ["Alert"]},
                                    {"percent": 80, "actions": ["CapReplicas"], "capReplicas": 2}]}
    _, status = step(loud, None, 30, utc(2026, 11, 29, 22, 0))
    ev, status = step(loud, status, 30, utc(2026, 11, 29, 23, 40))  # 100 USD: 50 %, 80 %, 100 % alerted
    assert [a.thresholds_percent for a in ev.plan.alerts] == [(50, 80, 100)]
    ev, status = step(quiet, status, 30, utc(2026, 11, 30, 1, 30))  # a new UTC day: 90 USD, 50 % and 80 %
    assert [(a.kind, a.thresholds_percent) for a in ev.plan.alerts] == [
        (AlertKind.RECOVERED, ()), (AlertKind.THRESHOLD_CROSSED, (50,))]
    tokyo = {**quiet, "timeZone": "Asia/Tokyo"}
    ev, status = step(tokyo, status, 0, utc(2026, 11, 30, 12, 0))
    assert ev.plan.alerts == () and ev.plan.period_start == utc(2026, 11, 29, 15, 0)
    ev, _ = step(tokyo, status, 0, utc(2026, 11, 30, 15, 0, 30))
    (recovered,) = ev.plan.alerts
    assert [(f.threshold_percent, f.starts_at) for f in recovered.resolves] == [(50, utc(2026, 11, 30, 1, 30))]
