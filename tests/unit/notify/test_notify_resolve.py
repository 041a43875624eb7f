"""A recovery resolves the incidents its firing alerts opened, in Alertmanager's webhook terms (issue 22 s1 fault 3).

The recovered notice went out as ``alertname="BudgetRecovered"`` with a fingerprint and groupKey of its own, so an
Alertmanager-style receiver (Grafana OnCall, PagerDuty via webhook; grafana/oncall#4421), which matches a resolve
to its incident by ``groupKey`` and each alert by ``fingerprint``, never closed what ``BudgetThresholdCrossed``
opened. Alertmanager's webhook format (https://prometheus.io/docs/alerting/latest/configuration/#webhook_config):
``version "4"``, ``groupKey``, ``status`` firing|resolved, ``alerts[]`` each with its ``labels``, ``fingerprint``,
``startsAt`` and ``endsAt``; a resolved alert keeps its labels, fingerprint and ``startsAt`` and sets ``endsAt``.

Every alert below goes through what a restart keeps: the plan's ``status.thresholds`` are read back before the
next evaluation, and each message is stored in ``status.pendingAlerts`` and read back before it is rendered.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.costmodel.budget import AlertKind, AlertState, BudgetAlert, PolicyRef, ServiceState, plan_budget
from modalscale.costmodel.outbox import AlertMessage, PendingAlert
from modalscale.notify.payloads import slack_payload, webhook_payload
from tests.factories import pending_json, plan_json, read_budget

UTC = timezone.utc
POLICY = PolicyRef("team-search", "search-daily")
SPEC = parse_budget_spec({
    "period": "Daily", "limit": {"amount": "100"}, "forecast": {"enabled": True, "alertAtPercent": 100},
    "thresholds": [{"percent": 50}, {"percent": 80}, {"percent": 100, "actions": ["Alert", "ScaleDown"]}]})
SERVICES = [ServiceState("team-search", "svc", 2, 4, Decimal("1.5"))]


def stored(alert: BudgetAlert) -> AlertMessage:
    """The message as the outbox keeps it across a restart: written to status, read back."""
    item = pending_json(PendingAlert("oncall", AlertMessage.from_alert(alert), alert.created_at))
    return (read_budget({"pendingAlerts": [item]}, POLICY).outbox or ())[0].message


def evaluations() -> tuple[list[AlertMessage], AlertMessage]:
    """Day 1: 50 % and 80 % crossed together at 10:00 (forecast over 100 % too), 100 % at 20:00; day 2 00:05
    starts a new period after an Exceeded one: the recovery. Status is read back between evaluations."""
    state, firing = AlertState(), []
    for now, spent in ((datetime(2026, 5, 1, 10, 0, tzinfo=UTC), "85"),
                       (datetime(2026, 5, 1, 20, 0, tzinfo=UTC), "101")):
        plan = plan_budget(SPEC, Decimal(spent), SERVICES, state, now, policy=POLICY)
        firing += [stored(a) for a in plan.alerts]
        state = read_budget(plan_json(plan)).alert_state
    plan = plan_budget(SPEC, Decimal(0), SERVICES, state, datetime(2026, 5, 2, 0, 5, tzinfo=UTC), policy=POLICY)
    (recovered,) = [stored(a) for a in plan.alerts if a.kind is AlertKind.RECOVERED]
    return firing, recovered


def by_fingerprint(payloads: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {a["fingerprint"]: a for p in payloads for a in p["alerts"]}


def test_the_recovery_resolves_each_firing_alert_by_group_key_and_fingerprint() -> None:
    firing, recovered = evaluations()
    kinds = sorted(m.kind.value for m in firing)
    assert kinds == ["ForecastExceeded", "ThresholdCrossed", "ThresholdCrossed"]
    fired = [webhook_payload(m) for m in firing]
    resolve = webhook_payload(recovered)

    assert {p["groupKey"] for p in fired} == {resolve["groupKey"]}  # one incident per policy
    assert resolve["status"] == "resolved" and all(p["status"] == "firing" for p in fired)
    opened, closed = by_fingerprint(fired), by_fingerprint([resolve])
    assert len(opened) == 4  # 50 %, 80 %, 100 % crossed and the forecast: one alert each
    assert set(closed) == set(opened)
    for fingerprint, alert in closed.items():
        assert alert["status"] == "resolved"
        assert alert["labels"] == opened[fingerprint]["labels"]
        assert alert["startsAt"] == opened[fingerprint]["startsAt"]
        assert alert["endsAt"] == "2026-05-02T00:05:00Z"
    assert {a["labels"]["alertname"] for a in closed.values()} == {"BudgetThresholdCrossed",
                                                                   "BudgetForecastExceeded"}


def test_each_threshold_is_its_own_alert_with_a_stable_identity() -> None:
    firing, _ = evaluations()
    first = webhook_payload(firing[0])
    crossed = sorted(a["labels"]["threshold_percent"] for a in first["alerts"])
    assert crossed == ["50", "80"] and first["status"] == "firing"
    assert {a["labels"]["severity"] for a in first["alerts"]} == {"warning"}
    assert all(a["endsAt"] == "0001-01-01T00:00:00Z" and a["startsAt"] == "2026-05-01T10:00:00Z"
               for a in first["alerts"])
    # the same message rendered twice (a retry, or after a restart) carries the same identity
    assert webhook_payload(firing[0]) == first


def test_chat_rooms_read_which_alerts_the_recovery_resolves() -> None:
    _, recovered = evaluations()
    facts = dict(recovered.facts())
    assert facts["Resolved"] == ("ThresholdCrossed at 50 %, 80 % (since 2026-05-01T10:00:00Z), "
                                 "100 % (since 2026-05-01T20:00:00Z); ForecastExceeded at 100 % "
                                 "(since 2026-05-01T10:00:00Z)")
    assert "Resolved" in slack_payload(recovered)["text"]


@pytest.mark.parametrize("forecast", [{"enabled": False}, {"enabled": True, "alertAtPercent": 90}],
                         ids=["forecast-disabled", "forecast-at-90"])
def test_an_alert_whose_threshold_or_forecast_left_the_spec_mid_period_is_still_resolved(
        forecast: dict[str, Any]) -> None:
    """50 % and the forecast (at 100 %) alerted at 10:00; then spec.thresholds lost its 50 % item and the forecast
    was disabled (or moved to 90 %); 80 % and 100 % crossed at 20:00. The recovery resolved those two only: the
    records of 50 % and the forecast left status.thresholds with the spec, so the incidents they opened in an
    Alertmanager-style receiver stayed open (2 of 4 resolved). Their records now stay until the period ends (4 of
    4), and 50 % put back the same day is not alerted again (once per period; it was)."""
    edited = parse_budget_spec({
        "period": "Daily", "limit": {"amount": "100"}, "forecast": forecast,
        "thresholds": [{"percent": 80}, {"percent": 100, "actions": ["Alert", "ScaleDown"]}]})
    plan = plan_budget(SPEC, Decimal("60"), SERVICES, AlertState(), datetime(2026, 5, 1, 10, 0, tzinfo=UTC),
                       policy=POLICY)
    assert sorted(a.kind.value for a in plan.alerts) == ["ForecastExceeded", "ThresholdCrossed"]
    state = read_budget(plan_json(plan)).alert_state
    plan = plan_budget(edited, Decimal("101"), SERVICES, state, datetime(2026, 5, 1, 20, 0, tzinfo=UTC),
                       policy=POLICY)
    assert [(a.kind.value, a.thresholds_percent) for a in plan.alerts] == [("ThresholdCrossed", (80, 100))]
    state = read_budget(plan_json(plan)).alert_state
    again = plan_budget(SPEC, Decimal("101"), SERVICES, state, datetime(2026, 5, 1, 21, 0, tzinfo=UTC),
                        policy=POLICY)
    assert again.alerts == ()  # 50 % and the forecast back in the spec: alerted already this period
    plan = plan_budget(edited, Decimal(0), SERVICES, state, datetime(2026, 5, 2, 0, 5, tzinfo=UTC), policy=POLICY)
    (recovered,) = [a for a in plan.alerts if a.kind is AlertKind.RECOVERED]
    assert [(f.kind.value, f.threshold_percent) for f in recovered.resolves] == [
        ("ThresholdCrossed", 50), ("ThresholdCrossed", 80), ("ThresholdCrossed", 100), ("ForecastExceeded", 100)]
    # The new period's records are the spec's only.
    assert sorted((r.percent, r.forecast) for r in plan.alert_state.records) == sorted([
        (80, False), (100, False), *([(90, True)] if forecast["enabled"] else [])])
