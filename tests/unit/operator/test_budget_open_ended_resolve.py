"""The GovernanceBlind and SpendAnomaly alerts are resolved when their cause ends.

Both fired with a fingerprint in the policy's group (Alertmanager's webhook format), but nothing ever resolved them:
not when every service was priced again, not when the last anomaly cleared, not at a period's end. So the incident
each opened in an Alertmanager-style receiver (Grafana OnCall, PagerDuty via webhook), which closes an alert only
on a resolve with its fingerprint, stayed open for good. Every message below goes through what a restart keeps:
the policy's status is written and read back between evaluations, and each message is rendered from
``status.pendingAlerts`` as read back.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from modalscale.api.budgetpolicy import Period
from modalscale.costmodel.budget import AlertKind, FiringAlert, PolicyRef
from modalscale.costmodel.outbox import AlertMessage, PendingAlert
from modalscale.notify.payloads import slack_payload, webhook_payload
from modalscale.operator.budget.plan import plan_policy
from tests.factories import pending_json, read_budget
from tests.unit.operator.test_budget_history import KEY, ROOM, spiked
from tests.unit.operator.test_budget_plan import CATALOG, T0, make_isvc, make_policy, observed, persisted

HOUR = dt.timedelta(hours=1)
BLIND = observed(make_isvc(gpu_type="nvidia-b999"))  # a GPU type the catalog does not price
PRICED = observed(make_isvc())


def sent(policy: dict[str, Any], alerts: tuple[Any, ...]) -> list[AlertMessage]:
    """The messages of this evaluation's ``alerts`` as the outbox keeps them (``status.pendingAlerts`` read back)."""
    keys = {(a.kind, a.created_at) for a in alerts}
    outbox = read_budget(policy["status"], PolicyRef("ml", "daily")).outbox or ()
    return [e.message for e in outbox if (e.message.kind, e.message.created_at) in keys]


def fingerprints(message: AlertMessage) -> dict[str, dict[str, Any]]:
    payload = webhook_payload(message)
    return {a["fingerprint"]: {**a, "groupKey": payload["groupKey"]} for a in payload["alerts"]}


def test_the_governance_blind_alert_is_resolved_once_every_service_is_priced_again() -> None:
    policy = make_policy(notifications=ROOM, limit={"amount": "1000", "currency": "USD"})
    p = plan_policy(policy, BLIND, CATALOG, [], T0)
    assert [a.kind for a in p.alerts] == [AlertKind.GOVERNANCE_BLIND]
    policy = persisted(policy, p.status_patch)
    (fired,) = sent(policy, p.alerts)
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + HOUR)
    assert p.alerts == ()  # still blind: alerted once
    policy = persisted(policy, p.status_patch)

    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 2 * HOUR)  # the GPU type fixed: priced again
    (recovered,) = p.alerts
    assert recovered.kind is AlertKind.RECOVERED and not recovered.new_period
    assert recovered.resolves == (FiringAlert(AlertKind.GOVERNANCE_BLIND, None, T0),)
    assert recovered.title == "Budget ml/daily: every running service is priced again"
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, p.alerts)
    opened, closed = fingerprints(fired), fingerprints(resolve)
    assert set(closed) == set(opened) and len(closed) == 1  # the receiver closes the incident the alert opened
    (fp,) = closed
    assert closed[fp]["status"] == "resolved" and closed[fp]["labels"] == opened[fp]["labels"]
    assert closed[fp]["groupKey"] == opened[fp]["groupKey"]
    assert (closed[fp]["startsAt"], closed[fp]["endsAt"]) == ("2026-11-30T10:00:00Z", "2026-11-30T12:00:00Z")
    assert "GovernanceBlind (since 2026-11-30T10:00:00Z)" in slack_payload(resolve)["text"]

    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 3 * HOUR)
    assert p.alerts == ()  # resolved once
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + 4 * HOUR)
    assert [a.kind for a in p.alerts] == [AlertKind.GOVERNANCE_BLIND]  # blind again: a new incident


def test_a_blind_policy_priced_again_as_its_period_ends_resolves_it_in_the_periods_one_recovery() -> None:
    """One ``Recovered`` per evaluation (the outbox's key is the kind and the time): the period's recovery, which
    resolves the day's 50 % alert, resolves the GovernanceBlind alert too."""
    policy = make_policy(notifications=ROOM, limit={"amount": "0.5", "currency": "USD"})
    two = observed(make_isvc("vc"), make_isvc("typo", gpu_type="nvidia-b999"))
    p = plan_policy(policy, two, CATALOG, [], T0)
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, two, CATALOG, [], T0 + 13 * HOUR + dt.timedelta(minutes=50))  # 23:50, over 50 %
    assert AlertKind.THRESHOLD_CROSSED in [a.kind for a in p.alerts]
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 14 * HOUR + dt.timedelta(minutes=5))  # next day, priced
    recoveries = [a for a in p.alerts if a.kind is AlertKind.RECOVERED]
    assert len(recoveries) == 1 and recoveries[0].new_period
    kinds = [f.kind for f in recoveries[0].resolves]
    assert kinds[-1] is AlertKind.GOVERNANCE_BLIND and set(kinds[:-1]) == {AlertKind.THRESHOLD_CROSSED}
    assert "a new daily period started" in recoveries[0].title


def test_the_spend_anomaly_alert_is_resolved_by_its_fingerprint_once_the_last_anomaly_ends() -> None:
    from modalscale.costmodel.anomaly import AnomalyConfig

    cfg = AnomalyConfig(clear_after_s=60)
    policy, p, hist = spiked(cfg)
    (fired,) = sent(policy, p.alerts)
    assert fired.kind is AlertKind.SPEND_ANOMALY
    for t in (T0 + dt.timedelta(seconds=s) for s in (150, 180, 240)):  # back to 2 replicas, calm for 90 s
        hist[KEY].append(p.burn_samples[KEY])
        p = plan_policy(policy, PRICED, CATALOG, [], t, history=hist, anomaly_config=cfg)
        policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, p.alerts)
    assert resolve.kind is AlertKind.RECOVERED
    opened, closed = fingerprints(fired), fingerprints(resolve)
    assert set(closed) == set(opened) and len(closed) == 1
    (fp,) = closed
    assert closed[fp]["labels"] == opened[fp]["labels"] and closed[fp]["status"] == "resolved"
    assert closed[fp]["labels"]["alertname"] == "BudgetSpendAnomaly"
    assert closed[fp]["startsAt"] == opened[fp]["startsAt"] == "2026-11-30T10:00:00Z"


def test_a_resolve_item_of_a_threshold_without_its_percent_names_the_field() -> None:
    item = {"notification": "room", "kind": "Recovered", "period": "Daily", "periodStart": "2026-11-30T00:00:00Z",
            "periodEnd": "2026-12-01T00:00:00Z", "createdAt": "2026-11-30T10:00:00Z", "severity": "info",
            "title": "t", "attempts": 0, "nextAttemptTime": "2026-11-30T10:00:00Z",
            "resolves": [{"kind": "SpendAnomaly", "startsAt": "2026-11-30T09:00:00Z"},
                         {"kind": "ThresholdCrossed", "startsAt": "2026-11-30T09:00:00Z"}]}
    bad = read_budget({"pendingAlerts": [item]})
    assert bad.problem is not None and "status.pendingAlerts[0].resolves[1].thresholdPercent" in bad.problem
    item["resolves"] = item["resolves"][:1]
    (entry,) = read_budget({"pendingAlerts": [item]}).outbox or ()
    assert entry.message.resolves == (FiringAlert(AlertKind.SPEND_ANOMALY, None, T0 - HOUR),)


def with_period(policy: dict[str, Any], period: str) -> dict[str, Any]:
    """``policy`` after a user's edit of ``spec.period`` (its status kept)."""
    return {**policy, "spec": {**policy["spec"], "period": period}}


def test_a_threshold_alert_is_resolved_with_the_period_label_it_fired_with_after_spec_period_changes() -> None:
    """50 % alerted on a Daily policy; the next day the user made it Weekly. The change ends the Daily period and its
    recovery resolves the 50 % alert, but it rendered the resolve with the new spec's ``period="Weekly"`` label, so
    its fingerprint matched nothing and the incident stayed open. The resolve now carries the closed period's kind
    (read from the stored bounds' length), and the receiver closes the incident."""
    policy = make_policy(notifications=ROOM, limit={"amount": "0.5", "currency": "USD"})
    p = plan_policy(policy, PRICED, CATALOG, [], T0)
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 13 * HOUR + dt.timedelta(minutes=50))  # 23:50, over 50 %
    policy = persisted(policy, p.status_patch)
    (fired,) = sent(policy, p.alerts)
    assert fired.kind is AlertKind.THRESHOLD_CROSSED
    policy = with_period(policy, "Weekly")
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 14 * HOUR + dt.timedelta(minutes=5))  # Tuesday 00:05
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.RECOVERED))
    opened, closed = fingerprints(fired), fingerprints(resolve)
    assert set(opened) <= set(closed)
    for fp, alert in opened.items():
        assert closed[fp]["labels"] == alert["labels"] and closed[fp]["labels"]["period"] == "Daily"
        assert closed[fp]["status"] == "resolved"


def test_the_governance_blind_alert_is_resolved_by_its_fingerprint_after_spec_period_changes() -> None:
    """GovernanceBlind is one alert per policy, not bound to a period: its identity has no ``period`` label, so a
    ``spec.period`` edited while it fires (Daily -> Monthly) does not change the fingerprint its resolve needs."""
    policy = make_policy(notifications=ROOM, limit={"amount": "1000", "currency": "USD"})
    p = plan_policy(policy, BLIND, CATALOG, [], T0)
    policy = persisted(policy, p.status_patch)
    (fired,) = sent(policy, p.alerts)
    policy = with_period(policy, "Monthly")
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + HOUR)
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 2 * HOUR)
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.RECOVERED))
    opened, closed = fingerprints(fired), fingerprints(resolve)
    assert set(closed) == set(opened) and len(closed) == 1
    (fp,) = closed
    assert closed[fp]["labels"] == opened[fp]["labels"] and "period" not in closed[fp]["labels"]


def test_a_resolve_items_period_is_kept_across_a_restart() -> None:
    firing = FiringAlert(AlertKind.THRESHOLD_CROSSED, 50, T0, Period.DAILY)
    message = AlertMessage(AlertKind.RECOVERED, PolicyRef("ml", "daily"), Period.WEEKLY, "t", (), "info", T0 + HOUR,
                           (), T0, T0 + 7 * 24 * HOUR, resolves=(firing,))
    item = pending_json(PendingAlert("room", message, T0 + HOUR))
    assert item["resolves"] == [{"kind": "ThresholdCrossed", "thresholdPercent": 50,
                                 "startsAt": "2026-11-30T10:00:00Z", "period": "Daily"}]
    (entry,) = read_budget({"pendingAlerts": [item]}).outbox or ()
    assert entry.message.resolves == (firing,)


def test_the_governance_blind_resolve_repeats_the_starts_at_its_firing_had_after_a_refused_spec() -> None:
    """Ready was False (``InvalidSpec``) before the policy turned blind, so ``Ready``'s ``lastTransitionTime`` (the
    resolve's ``startsAt`` until now) was the refusal's time, an hour before the alert fired: a receiver saw a
    resolve whose ``startsAt`` was not its firing's. When it fired is now kept in ``status.blindSince``."""
    policy = make_policy(notifications=ROOM, limit={"amount": "1000", "currency": "USD"}, timeZone="Europe/Atlantis")
    p = plan_policy(policy, BLIND, CATALOG, [], T0)
    assert p.alerts == ()  # the spec is refused: nothing is evaluated
    policy = persisted(policy, p.status_patch)
    ready = next(c for c in policy["status"]["conditions"] if c["type"] == "Ready")
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    policy = {**policy, "spec": {**policy["spec"], "timeZone": "UTC"}}
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + HOUR)
    policy = persisted(policy, p.status_patch)
    (fired,) = sent(policy, p.alerts)
    assert fired.kind is AlertKind.GOVERNANCE_BLIND and policy["status"]["blindSince"] == "2026-11-30T11:00:00Z"
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + 2 * HOUR)
    assert p.alerts == () and "blindSince" not in p.status_patch  # still blind: kept, nothing rewritten
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 3 * HOUR)
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, p.alerts)
    (opened,), (closed,) = fingerprints(fired).values(), fingerprints(resolve).values()
    assert closed["startsAt"] == opened["startsAt"] == "2026-11-30T11:00:00Z"
    assert "blindSince" not in policy["status"]  # priced again: deleted (null in the merge patch)
