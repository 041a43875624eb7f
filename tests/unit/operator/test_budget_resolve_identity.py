"""A resolve repeats the identity its firing had (labels, fingerprint, ``startsAt``) whatever changed between them:
``spec.period`` and ``spec.timeZone`` edited at once, a period boundary crossed while blind, a refused spec held in
between, a status an older operator wrote (``status.blindSince`` absent or left behind by a rollback).

Found by a review of 158f093 and d01a5d5 (7 Dec 2026); the tests that failed then are named in their docstrings.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from modalscale.costmodel.budget import AlertKind
from modalscale.operator.budget.plan import plan_policy
from tests.unit.operator.test_budget_history import ROOM
from tests.unit.operator.test_budget_open_ended_resolve import BLIND, PRICED, fingerprints, sent, with_period
from tests.unit.operator.test_budget_plan import CATALOG, T0, make_isvc, make_policy, observed, persisted

HOUR = dt.timedelta(hours=1)
M = dt.timedelta(minutes=1)
TWO = observed(make_isvc("vc"), make_isvc("typo", gpu_type="nvidia-b999"))

def test_blind_since_survives_a_refused_spec_while_exceeded_and_blind() -> None:
    """Blind (GovernanceBlind fired at T0) and Exceeded on the priced part; the spec is refused for a while, then
    fixed; every service is priced again. The resolve must repeat the firing's startsAt."""
    policy = make_policy(notifications=ROOM, limit={"amount": "0.5", "currency": "USD"}, timeZone="Europe/Atlantis")
    p = plan_policy(policy, TWO, CATALOG, [], T0 - HOUR)  # refused first: Ready False since 09:00
    policy = persisted(policy, p.status_patch)
    policy = {**policy, "spec": {**policy["spec"], "timeZone": "UTC"}}
    p = plan_policy(policy, TWO, CATALOG, [], T0)
    policy = persisted(policy, p.status_patch)
    (fired,) = [m for m in sent(policy, p.alerts) if m.kind is AlertKind.GOVERNANCE_BLIND]
    p = plan_policy(policy, TWO, CATALOG, [], T0 + 13 * HOUR)
    policy = persisted(policy, p.status_patch)
    assert policy["status"]["state"] == "Exceeded" and policy["status"]["blindSince"] == "2026-11-30T10:00:00Z"
    good_spec = policy["spec"]
    policy = {**policy, "spec": {**good_spec, "timeZone": "Europe/Atlantis"}}  # refused: a hold
    p = plan_policy(policy, TWO, CATALOG, [], T0 + 13 * HOUR + 10 * dt.timedelta(minutes=1))
    policy = persisted(policy, p.status_patch)
    assert policy["status"]["blindSince"] == "2026-11-30T10:00:00Z"
    policy = {**policy, "spec": good_spec}  # fixed, still blind
    p = plan_policy(policy, TWO, CATALOG, [], T0 + 13 * HOUR + 20 * dt.timedelta(minutes=1))
    policy = persisted(policy, p.status_patch)
    blind_since_after_fix = policy["status"].get("blindSince")
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 13 * HOUR + 30 * dt.timedelta(minutes=1))
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.RECOVERED))
    (opened,), (closed,) = fingerprints(fired).values(), fingerprints(resolve).values()
    assert (blind_since_after_fix, closed["startsAt"]) == ("2026-11-30T10:00:00Z", opened["startsAt"])


def older(patch: dict[str, Any]) -> dict[str, Any]:
    """What an operator from before status.blindSince writes: the same, never touching blindSince."""
    return {k: v for k, v in patch.items() if k != "blindSince"}


def test_a_blind_since_left_by_an_older_operator_is_not_taken_for_a_later_firing() -> None:
    policy = make_policy(notifications=ROOM, limit={"amount": "1000", "currency": "USD"})
    p = plan_policy(policy, BLIND, CATALOG, [], T0)  # this version: blindSince 10:00
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + HOUR)  # rolled back: priced again, blindSince not deleted
    policy = persisted(policy, older(p.status_patch))
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + 2 * HOUR)  # older version: blind again, fires at 12:00
    policy = persisted(policy, older(p.status_patch))
    (fired,) = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.GOVERNANCE_BLIND))
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 3 * HOUR)  # this version again: priced
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.RECOVERED))
    (opened,), (closed,) = fingerprints(fired).values(), fingerprints(resolve).values()
    assert closed["startsAt"] == opened["startsAt"]


def test_blind_since_is_kept_while_exceeded_blind_with_a_refused_namespace() -> None:
    """Ready is NamespaceNotAllowed (selector lists a namespace the policy may not select), state Exceeded on the
    priced part, one service unpriced: blind is read from the ledger alone."""
    policy = make_policy(notifications=ROOM, limit={"amount": "0.5", "currency": "USD"},
                         selector={"namespaces": ["ml", "other"]})
    p = plan_policy(policy, TWO, CATALOG, [], T0 + 13 * HOUR)
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, TWO, CATALOG, [], T0 + 13 * HOUR + 5 * dt.timedelta(minutes=1))
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, TWO, CATALOG, [], T0 + 13 * HOUR + 30 * dt.timedelta(minutes=1))
    policy = persisted(policy, p.status_patch)
    assert policy["status"].get("blindSince") == "2026-11-30T23:00:00Z"
    p = plan_policy(policy, TWO, CATALOG, [], T0 + 13 * HOUR + 35 * dt.timedelta(minutes=1))
    policy = persisted(policy, p.status_patch)
    ready = next(c for c in policy["status"]["conditions"] if c["type"] == "Ready")
    assert (policy["status"]["state"], ready["reason"]) == ("Exceeded", "NamespaceNotAllowed")
    assert policy["status"].get("blindSince") == "2026-11-30T23:00:00Z"


def assert_resolved_with_its_identity_after_an_edit(at: dt.datetime, first: str, then: str, tz: str) -> None:
    """50 % crossed at ``at`` + 13:50 under ``spec.period`` ``first`` (UTC); at ``at`` + 14:05 the spec says ``then``
    in ``tz``: the recovery resolves every alert fired with its labels and ``startsAt``."""
    policy = make_policy(notifications=ROOM, limit={"amount": "0.5", "currency": "USD"}, period=first)
    p = plan_policy(policy, PRICED, CATALOG, [], at)
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], at + 13 * HOUR + 50 * M)
    policy = persisted(policy, p.status_patch)
    fired = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.THRESHOLD_CROSSED))
    assert fired
    policy = with_period(policy, then)
    policy = {**policy, "spec": {**policy["spec"], "timeZone": tz}}
    p = plan_policy(policy, PRICED, CATALOG, [], at + 14 * HOUR + 5 * M)
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.RECOVERED))
    closed = fingerprints(resolve)
    for f in fired:
        for fp, a in fingerprints(f).items():
            assert fp in closed and closed[fp]["labels"] == a["labels"] and closed[fp]["startsAt"] == a["startsAt"]


@pytest.mark.parametrize("first,then,tz", [
    ("Daily", "Weekly", "Asia/Tokyo"),
    ("Daily", "Monthly", "America/New_York"),
    ("Daily", "Weekly", "UTC"),
    ("Weekly", "Daily", "Pacific/Kiritimati"),
    ("Monthly", "Daily", "Asia/Tokyo"),
])
def test_period_and_zone_change_at_once(first: str, then: str, tz: str) -> None:
    assert_resolved_with_its_identity_after_an_edit(T0, first, then, tz)


@pytest.mark.parametrize("tz", ["UTC", "Asia/Tokyo"])
def test_daily_to_weekly_at_a_shared_start(tz: str) -> None:
    """Sunday's alert, the edit on Monday 00:05: the new week starts where the closed day ended."""
    assert_resolved_with_its_identity_after_an_edit(T0 - 24 * HOUR, "Daily", "Weekly", tz)


@pytest.mark.parametrize("then", ["Daily", "Weekly"])
def test_blind_across_a_period_boundary(then: str) -> None:
    policy = make_policy(notifications=ROOM, limit={"amount": "1000", "currency": "USD"})
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + 13 * HOUR)
    policy = persisted(policy, p.status_patch)
    (fired,) = sent(policy, p.alerts)
    policy = with_period(policy, then)
    p = plan_policy(policy, BLIND, CATALOG, [], T0 + 14 * HOUR + 5 * M)  # next day, still blind
    policy = persisted(policy, p.status_patch)
    assert policy["status"]["blindSince"] == "2026-11-30T23:00:00Z"
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 15 * HOUR)
    policy = persisted(policy, p.status_patch)
    (resolve,) = sent(policy, tuple(a for a in p.alerts if a.kind is AlertKind.RECOVERED))
    (o,), (c,) = fingerprints(fired).items(), fingerprints(resolve).items()
    assert o[0] == c[0] and o[1]["startsAt"] == c[1]["startsAt"] and "blindSince" not in policy["status"]

def test_a_plain_daily_rollover_writes_no_resolves_period_as_the_crd_says() -> None:
    """CRD: resolves[].period is set 'when a spec.period change ended its period; absent: the Recovered alert's
    own period'. No spec.period change here."""
    policy = make_policy(notifications=ROOM, limit={"amount": "0.5", "currency": "USD"})
    p = plan_policy(policy, PRICED, CATALOG, [], T0)
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 13 * HOUR + dt.timedelta(minutes=50))
    policy = persisted(policy, p.status_patch)
    p = plan_policy(policy, PRICED, CATALOG, [], T0 + 14 * HOUR + dt.timedelta(minutes=5))
    policy = persisted(policy, p.status_patch)
    items = [i for i in policy["status"]["pendingAlerts"] if i["kind"] == "Recovered"]
    assert items and all("period" not in r for i in items for r in i["resolves"]), items[0]["resolves"]
