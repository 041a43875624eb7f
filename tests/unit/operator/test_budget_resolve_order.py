"""A resolve never overtakes the firing it resolves.

An open-ended alert (``GovernanceBlind``, ``SpendAnomaly``) can still be pending in the outbox, backing off after
failed rounds, when its cause ends and its ``Recovered`` is decided. Sent by ``next_attempt_time`` alone, the
recovery (30 s after its first failure) went out before the firing (minutes after its fifth): an Alertmanager-style
receiver then saw the resolve first and the firing after it, and the incident stayed open for good.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from modalscale.costmodel.budget import AlertKind
from modalscale.costmodel.outbox import Attempt
from modalscale.operator.budget.plan import plan_policy
from tests.unit.operator.test_budget_history import ROOM
from tests.unit.operator.test_budget_plan import CATALOG, T0, make_isvc, make_policy, observed, persisted

BLIND = observed(make_isvc(gpu_type="nvidia-b999"))  # a GPU type the catalog does not price
PRICED = observed(make_isvc())


def _fail(sends: Any, at: dt.datetime) -> list[Attempt]:
    return [Attempt(e.key, False, "ServerError", "503", at) for e in sends]


def test_a_recovery_is_not_sent_before_the_pending_firing_it_resolves() -> None:
    policy = make_policy(notifications=ROOM, limit={"amount": "1000", "currency": "USD"})
    p = plan_policy(policy, BLIND, CATALOG, [], T0)
    policy = persisted(policy, p.status_patch)
    t = T0
    sent_kinds: list[AlertKind] = [e.message.kind for e in p.sends]
    assert sent_kinds == [AlertKind.GOVERNANCE_BLIND]
    attempts = _fail(p.sends, t)
    # The receiver is down: the firing fails round after round (backoff 30, 60, 120, 240, 480 s).
    while True:
        t += dt.timedelta(seconds=30)
        p = plan_policy(policy, BLIND, CATALOG, attempts, t)
        policy = persisted(policy, p.status_patch) if p.status_patch else policy
        attempts = _fail(p.sends, t) if p.sends else []
        (firing,) = [e for e in policy["status"]["pendingAlerts"] if e["kind"] == "GovernanceBlind"]
        if firing["attempts"] >= 5 and not attempts:
            break
    # Every service is priced again while the firing waits for its next round.
    p = plan_policy(policy, PRICED, CATALOG, [], t + dt.timedelta(seconds=30))
    assert [a.kind for a in p.alerts] == [AlertKind.RECOVERED]
    policy = persisted(policy, p.status_patch)
    order: list[AlertKind] = []
    t += dt.timedelta(seconds=30)
    attempts = _fail(p.sends, t)  # the receiver is still down for the recovery's first round
    for _ in range(200):  # the receiver is back: every round from now on is delivered
        t += dt.timedelta(seconds=30)
        p = plan_policy(policy, PRICED, CATALOG, attempts, t)
        policy = persisted(policy, p.status_patch) if p.status_patch else policy
        order += [e.message.kind for e in p.sends]
        attempts = [Attempt(e.key, True, "Delivered", "", t) for e in p.sends]
        if len(order) == 2:
            break
    assert order == [AlertKind.GOVERNANCE_BLIND, AlertKind.RECOVERED]


def test_a_recovery_decided_just_before_its_period_ends_is_still_retried_after_it() -> None:
    """The GovernanceBlind alert's cause ends at 23:59:30; the receiver refuses the resolve's first round. Expired
    with the period at 00:00 like a firing of that period, the resolve was abandoned and the incident its alert
    opened (its cause did not end with the period) stayed open for good."""
    policy = make_policy(notifications=ROOM, limit={"amount": "1000", "currency": "USD"})
    p = plan_policy(policy, BLIND, CATALOG, [], T0)
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, BLIND, CATALOG, [Attempt(e.key, True, "Delivered", "", T0) for e in p.sends],
                    T0 + dt.timedelta(seconds=30))
    policy = persisted(policy, p.status_patch)
    t = T0 + dt.timedelta(hours=13, minutes=59, seconds=30)  # 23:59:30, priced again
    p = plan_policy(policy, PRICED, CATALOG, [], t)
    assert [a.kind for a in p.alerts] == [AlertKind.RECOVERED]
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, _fail(p.sends, t), t + dt.timedelta(seconds=40))  # 00:00:10
    policy = persisted(policy, p.status_patch)
    assert [e["kind"] for e in policy["status"]["pendingAlerts"]] == ["Recovered"], p.events
    p = plan_policy(policy, PRICED, CATALOG, [], t + dt.timedelta(minutes=2))  # its next round, after 00:00
    assert [e.message.kind for e in p.sends] == [AlertKind.RECOVERED]


def test_the_periods_recovery_goes_before_the_new_periods_firing_decided_with_it() -> None:
    """The first evaluation of a day both recovers the day before (resolving its 50 % alert) and crosses 50 % of
    the new day (the same labels, so the same fingerprint). The recovery must go first: sent after the new firing,
    it closes the new day's incident in an Alertmanager-style receiver. Only a firing decided before the recovery
    makes it wait."""
    policy = make_policy(notifications=ROOM, limit={"amount": "0.01", "currency": "USD"})
    p = plan_policy(policy, PRICED, CATALOG, [], T0)
    assert [a.kind for a in p.alerts] == [AlertKind.THRESHOLD_CROSSED]
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [Attempt(e.key, True, "Delivered", "", T0) for e in p.sends],
                    T0 + dt.timedelta(hours=1))
    policy = persisted(policy, p.status_patch)
    assert policy["status"]["pendingAlerts"] == []
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + dt.timedelta(hours=14, minutes=10))  # 00:10 the next day
    assert [a.kind for a in p.alerts] == [AlertKind.RECOVERED, AlertKind.THRESHOLD_CROSSED]
    assert [e.message.kind for e in p.sends] == [AlertKind.RECOVERED, AlertKind.THRESHOLD_CROSSED]
