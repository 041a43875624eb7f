"""The gateway's tenant gate: which tenants a BudgetPolicy's Reject refuses, and Retry-After to the period's end."""

from __future__ import annotations

import datetime as dt

import pytest

from modalscale.api.annotations import TenantReject, invalid_budget_annotations, reject_annotation_key
from modalscale.gateway.isvc_watch import annotations_of
from modalscale.gateway.tenant_budget import TenantGate

UNTIL = dt.datetime(2026, 12, 3, tzinfo=dt.UTC)
NOW_S = dt.datetime(2026, 12, 2, 23, 58, 20, 500000, tzinfo=dt.UTC).timestamp()  # 99.5 s before UNTIL


def annotation(policy: str, tenants: tuple[str, ...], until: dt.datetime = UNTIL) -> dict[str, str]:
    ns, name = policy.split("/")
    return {reject_annotation_key(ns, name): TenantReject(policy, tenants, until, 100).encode()}


def test_a_rejected_tenant_is_refused_with_retry_after_the_whole_seconds_to_the_period_end() -> None:
    gate = TenantGate()
    gate.update(annotation("ml/acme-daily", ("acme",)))
    refusal = gate.check("acme", NOW_S)
    assert refusal is not None and refusal.retry_after_s == 100 and refusal.policy == "ml/acme-daily"
    assert "2026-12-03T00:00:00Z" in refusal.message and "acme" in refusal.message
    assert gate.check("globex", NOW_S) is None


@pytest.mark.parametrize(("now_s", "retry_after_s"), [
    (UNTIL.timestamp() - 0.2, 1), (UNTIL.timestamp(), None), (UNTIL.timestamp() + 5, None)],
    ids=["last-fraction-is-1s", "at-until-admitted", "after-until-admitted"])
def test_a_rejection_ends_on_its_own_at_until(now_s: float, retry_after_s: int | None) -> None:
    gate = TenantGate()
    gate.update(annotation("ml/acme-daily", ("acme",)))
    refusal = gate.check("acme", now_s)
    assert (refusal.retry_after_s if refusal else None) == retry_after_s


def test_two_policies_refusing_one_tenant_refuse_it_until_the_later_end_and_lifting_one_keeps_the_other() -> None:
    later = UNTIL + dt.timedelta(days=6)
    both = {**annotation("ml/daily", ("acme",)), **annotation("ml/weekly", ("acme", "globex"), later)}
    gate = TenantGate()
    gate.update(both)
    assert gate.check("acme", NOW_S).policy == "ml/weekly"  # type: ignore[union-attr]
    gate.update(annotation("ml/daily", ("acme",)))
    assert gate.check("acme", NOW_S).policy == "ml/daily"  # type: ignore[union-attr]
    assert gate.check("globex", NOW_S) is None
    gate.update({})
    assert gate.check("acme", NOW_S) is None


@pytest.mark.parametrize("value", [
    "not json", '{"policy":"ml/x","tenants":"acme","until":"2026-12-03T00:00:00Z","thresholdPercent":100}',
    '{"policy":"ml/x","tenants":["acme"],"until":"2026-12-03T00:00:00","thresholdPercent":100}',
    '{"policy":"ml/x","tenants":["acme"],"until":"tomorrow","thresholdPercent":100}',
    '{"tenants":["acme"],"until":"2026-12-03T00:00:00Z","thresholdPercent":100}',
], ids=["not-json", "tenants-not-a-list", "until-without-zone", "until-not-a-time", "no-policy"])
def test_an_annotation_that_does_not_decode_holds_what_was_last_read_under_its_key_and_is_reported(
        value: str) -> None:
    key = reject_annotation_key("ml", "x")
    first = TenantGate()
    first.update({key: value})  # nothing read before it (a gateway just started): it refuses no one
    assert first.check("acme", NOW_S) is None
    assert first.unreadable == tuple(invalid_budget_annotations({key: value}))
    assert first.unreadable[0].startswith(f"annotation {key}")
    gate = TenantGate()
    gate.update(annotation("ml/x", ("acme",)))
    gate.update({key: value, **annotation("ml/y", ("globex",))})  # garbled in place: acme stays refused
    assert gate.check("acme", NOW_S).policy == "ml/x"  # type: ignore[union-attr]
    assert gate.check("globex", NOW_S) is not None and len(gate.unreadable) == 1
    gate.update({key: value})  # still garbled: still held, however many updates
    assert gate.check("acme", NOW_S) is not None and gate.check("globex", NOW_S) is None
    gate.update(annotation("ml/x", ("initech",)))  # rewritten by its policy: the new value counts
    assert gate.check("acme", NOW_S) is None and gate.check("initech", NOW_S) is not None and not gate.unreadable
    gate.update({key: value})
    gate.update({})  # deleted: refuses no one
    assert gate.check("initech", NOW_S) is None and not gate.unreadable


def test_other_annotations_are_ignored_and_non_string_values_dropped() -> None:
    obj = {"metadata": {"annotations": {"a": "1", "b": 2, **annotation("ml/x", ("acme",))}}}
    got = annotations_of(obj)
    assert "b" not in got and "a" in got
    gate = TenantGate()
    gate.update(got)
    assert gate.tenants == ("acme",)
    assert annotations_of(None) == {} and annotations_of({"metadata": {}}) == {}


def test_a_budgeted_tenant_keeps_its_name_beyond_the_cap_and_takes_no_place() -> None:
    from modalscale.api.annotations import budgeted_tenants, tenants_annotation_key
    from modalscale.gateway.tenants import TenantFolder

    folder = TenantFolder(1)
    assert folder.label("globex") == "globex" and folder.label("acme") == "other"
    folder.reserve(budgeted_tenants({tenants_annotation_key("ml", "x"): '["acme"]', "other": "[1]"}))
    assert folder.label("acme") == "acme"
    assert folder.label("initech") == "other"  # the cap still holds for everyone else
    folder.reserve(budgeted_tenants({tenants_annotation_key("ml", "x"): "not json"}))
    assert folder.label("acme") == "other"
