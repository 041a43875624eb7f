"""BudgetPolicy Events and messages (user report item 14): ``HistoryUnavailable`` is a Warning, and
``AlertDelivered`` names each failing receiver once however many of its alerts are pending."""

from __future__ import annotations

import datetime as dt
from dataclasses import replace

from modalscale.costmodel.outbox import OutboxUpdate
from modalscale.operator.budget.plan import _alert_condition, plan_policy
from modalscale.operator.budget.spend_anomalies import HistoryRead
from tests.unit.operator.test_budget_plan import CATALOG, T0, first_alert, make_isvc, make_policy, observed, persisted


def test_a_spend_anomaly_history_that_cannot_be_read_is_a_warning_event() -> None:
    p0 = make_policy()
    ok = plan_policy(p0, observed(make_isvc()), CATALOG, [], T0, history_read=HistoryRead(True, "Read 0 samples"))
    p1 = persisted(p0, ok.status_patch)
    down = plan_policy(p1, observed(make_isvc()), CATALOG, [], T0 + dt.timedelta(minutes=1),
                       history_read=HistoryRead(False, "Prometheus at http://p did not answer"))
    assert [e[:2] for e in down.events if e[1] == "HistoryUnavailable"] == [("Warning", "HistoryUnavailable")]
    # Back: a Normal Event.
    back = plan_policy(persisted(p1, down.status_patch), observed(make_isvc()), CATALOG, [],
                       T0 + dt.timedelta(minutes=2), history_read=HistoryRead(True, "Read 2 samples"))
    assert [e[:2] for e in back.events if e[1] == "HistoryRead"] == [("Normal", "HistoryRead")]


def test_alert_delivered_lists_each_failing_receiver_once() -> None:
    _, plan = first_alert()
    slack, ding = plan.sends
    when = slack.next_attempt_time
    failing = [replace(slack, attempts=3, last_reason="ServerError", last_error="Slack answered HTTP 503",
                       next_attempt_time=when + dt.timedelta(minutes=2)),
               replace(slack, message=replace(slack.message, created_at=when + dt.timedelta(minutes=1)), attempts=1,
                       last_reason="ServerError", last_error="Slack answered HTTP 503",
                       next_attempt_time=when + dt.timedelta(minutes=1)),
               replace(ding, attempts=1, last_reason="SecretNotFound", last_error="Secret ml/d was not found",
                       next_attempt_time=when + dt.timedelta(seconds=30))]
    c = _alert_condition([], OutboxUpdate(tuple(failing), (), ()))
    assert (c.status, c.reason) == ("False", "ServerError")
    assert c.message.count("slack:") == 1 and c.message.count("ding:") == 1
    assert "slack: Slack answered HTTP 503 (2 alerts pending, attempt 3 failed; retrying at" in c.message
    assert "ding: Secret ml/d was not found (attempt 1 failed" in c.message
