"""Money shown to people: cents, and a non-zero amount under a cent with its own digits (never ``0.00``).

Before: every shown amount was rounded to cents, so a budget at 0.004 USD of a 0.01 USD limit read "Spent 0.00 of
0.01 USD" in status, the conditions, the alerts and ``kubectl modalscale budget`` (and a 0.001 USD limit read
"of 0.00 USD" in an alert). Kubecost settled the same way for costs under a cent (kubecost/kubecost#1607: show the
number, not 0). Comparisons never read the shown figure (the ledger's exact amount is compared).
"""

from __future__ import annotations

import datetime as dt
import json
from decimal import Decimal
from typing import Any

import pytest

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.costmodel.budget import AlertState, PolicyRef, ServiceState, plan_budget
from modalscale.costmodel.money import STATUS_AMOUNT_PATTERN, display_usd
from modalscale.kubectl.render import budget_report, render_budget
from tests.factories import plan_json

T0 = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)
SPEC: dict[str, Any] = {"period": "Daily", "limit": {"amount": "0.01", "currency": "USD"},
                        "thresholds": [{"percent": 50}, {"percent": 100}], "forecast": {"enabled": False}}


@pytest.mark.parametrize(("amount", "shown"), [
    ("0", "0.00"), ("12.345", "12.34"), ("12.355", "12.36"), ("0.005", "0.005"), ("0.004", "0.004"),
    ("0.0049999", "0.0049"), ("0.00999", "0.0099"), ("0.01", "0.01"), ("0.000000001", "0.000000001"),
    ("0.000123456", "0.00012"), ("-0.004", "-0.004"), ("-0.02", "-0.02"), ("1E+2", "100.00"), ("0E-9", "0.00")])
def test_display_usd_shows_cents_and_the_digits_of_an_amount_under_a_cent(amount: str, shown: str) -> None:
    assert display_usd(Decimal(amount)) == shown
    assert __import__("re").fullmatch(STATUS_AMOUNT_PATTERN, shown)  # what status may hold


def test_a_spend_under_a_cent_reads_as_itself_in_status_conditions_alerts_and_kubectl() -> None:
    spec = parse_budget_spec(SPEC)
    service = ServiceState("ml", "a", 1, 10, Decimal("1"))
    plan = plan_budget(spec, Decimal("0.006"), [service], AlertState(), T0, policy=PolicyRef("ml", "tiny"),
                       horizon_s=0)
    assert plan.message == "Spent 0.006 of 0.01 USD"
    status = json.loads(json.dumps(plan_json(plan)))
    assert (status["spent"], status["remaining"]) == ("0.006", "0.004")
    (alert,) = plan.alerts
    assert dict(alert.facts())["Spent"] == "0.006 USD of 0.01 USD (60.00 %)"
    policy = {"metadata": {"namespace": "ml", "name": "tiny"}, "spec": SPEC, "status": status}
    report = budget_report(policy, T0)
    assert (report["spent"], report["remaining"]) == ("0.006", "0.004")
    assert [t["atSpend"] for t in report["thresholds"]] == ["0.005", "0.01"]  # was 0.00 and 0.01
    assert report["nextAction"]["toGo"] == "0.004"
    assert "Spent:      0.006 USD of 0.01 USD" in render_budget(report)


def test_a_limit_under_a_cent_is_shown_in_an_alert() -> None:
    spec = parse_budget_spec({**SPEC, "limit": {"amount": "0.001", "currency": "USD"}})
    plan = plan_budget(spec, Decimal("0.0006"), [ServiceState("ml", "a", 1, 10, Decimal("1"))], AlertState(), T0,
                       horizon_s=0)
    (alert,) = plan.alerts
    assert dict(alert.facts())["Spent"] == "0.0006 USD of 0.001 USD (60.00 %)"
