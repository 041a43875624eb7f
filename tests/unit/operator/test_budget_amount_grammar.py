"""``spec.limit.amount``: the operator reads it exactly as strictly as the CRD, and the planner never raises on it.

Issue 22 section 1 fault 5: the parser accepted 1e999, 1E+30, 0.0000001, "100.", " 100" and "1_000", all refused
by the CRD's pattern, and 1e999 made the policy planner raise InvalidOperation instead of reporting InvalidSpec.
An object stored under an older CRD (or written past a webhook-less apiserver) reaches the operator, so the
operator's grammar is the CRD's: its ``pattern``, its ``maxLength``, its ``type: string`` and its CEL rule
``self.amount.matches('[1-9]')`` (greater than zero).

The CRD side is evaluated with Python's ``re`` on the CRD's own pattern (``fullmatch``); the apiserver uses RE2,
and for this pattern (ASCII character classes, anchors, bounded repeats, no flags) the two agree: ``[0-9]`` is
ASCII in both, and ``fullmatch`` refuses a trailing newline as RE2's ``$`` (end of text) does.
"""

from __future__ import annotations

import datetime as dt
import re
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.budgetpolicy import (
    LIMIT_AMOUNT_MAX_CHARS,
    LIMIT_AMOUNT_NONZERO_RULE,
    LIMIT_AMOUNT_PATTERN,
    InvalidBudgetSpec,
    parse_budget_spec,
)
from modalscale.costmodel.budget.plan import plan_budget
from modalscale.costmodel.budget.state import AlertState, ServiceState
from modalscale.costmodel.catalog import load_catalog
from modalscale.operator.budget.plan import BudgetObserved, plan_policy
from modalscale.operator.conditions import get
from tests.factories import plan_json

REPO = Path(__file__).resolve().parents[3]
CRD_FILES = [REPO / "crds" / "budgetpolicies.modalscale.io.yaml",
             REPO / "charts" / "modalscale-crds" / "files" / "crds" / "budgetpolicies.modalscale.io.yaml"]
T0 = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)


def _limit_schema(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    (version,) = crd["spec"]["versions"]
    return version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["limit"]


LIMIT = _limit_schema(CRD_FILES[0])
AMOUNT = LIMIT["properties"]["amount"]


def crd_accepts(value: object) -> bool:
    """What the apiserver admits for ``spec.limit.amount``: type string, maxLength, pattern, then the CEL rule."""
    if not isinstance(value, str):
        return False
    if len(value) > AMOUNT["maxLength"] or re.fullmatch(AMOUNT["pattern"], value) is None:
        return False
    (rule,) = LIMIT["x-kubernetes-validations"]
    nonzero = re.fullmatch(r"self\.amount\.matches\('(.*)'\)", rule["rule"])
    assert nonzero is not None, rule
    return re.search(nonzero.group(1), value) is not None  # CEL matches() is an unanchored RE2 search


def operator_accepts(value: object) -> bool:
    try:
        parse_budget_spec({"period": "Daily", "limit": {"amount": value}, "thresholds": [{"percent": 100}]})
    except InvalidBudgetSpec as exc:
        assert exc.field == "spec.limit.amount", exc
        return False
    return True


@pytest.mark.parametrize("path", CRD_FILES, ids=["crds", "chart"])
def test_the_parser_grammar_is_the_crds_own(path: Path) -> None:
    limit = _limit_schema(path)
    assert limit["properties"]["amount"]["pattern"] == LIMIT_AMOUNT_PATTERN
    assert limit["properties"]["amount"]["maxLength"] == LIMIT_AMOUNT_MAX_CHARS
    assert [r["rule"] for r in limit["x-kubernetes-validations"]] == [LIMIT_AMOUNT_NONZERO_RULE]


HOSTILE = [
    # the six
    "1e999", "1E+30", "0.0000001", "100.", " 100", "1_000",
    # others of the kind
    "NaN", "nan", "sNaN", "Infinity", "-Infinity", "inf", "-0", "-1", "1e-7", "1e3", "+100", "+0.5",
    "\u0661\u0660\u0660",  # Arabic-Indic 100: Decimal() reads it
    "\uff11\uff10\uff10",  # full-width 100: Decimal() reads it
    "100\n", "100 ", "\t100", "1,000", "0x10", ".5", "1.", "", " ", "0", "0.0", "000", "0.000000",
    "1234567890123",  # 13 digits before the point
    "1.0000001",  # 7 after
    "99999999999999999999",  # maxLength 20 but 20 digits
    "1 000", "١٠٠.٥", "१००",  # Devanagari 100
]
VALID = ["250", "19.99", "0.000001", "999999999999.999999", "0.5", "007", "100.000000", "1"]
NOT_STRINGS: list[object] = [250, 12.5, True, None, Decimal("250"), ["250"]]


@pytest.mark.parametrize("value", HOSTILE, ids=[ascii(v) for v in HOSTILE])
def test_a_value_the_crd_refuses_the_operator_refuses(value: str) -> None:
    assert not crd_accepts(value)
    assert not operator_accepts(value)


@pytest.mark.parametrize("value", VALID, ids=VALID)
def test_a_value_the_crd_admits_the_operator_reads_exactly(value: str) -> None:
    assert crd_accepts(value)
    spec = parse_budget_spec({"period": "Daily", "limit": {"amount": value}, "thresholds": [{"percent": 100}]})
    assert spec.limit.amount == Decimal(value)


@pytest.mark.parametrize("value", NOT_STRINGS, ids=[repr(v) for v in NOT_STRINGS])
def test_a_value_that_is_not_a_string_is_refused_as_the_crds_type_string_does(value: object) -> None:
    assert not crd_accepts(value)
    assert not operator_accepts(value)


def _policy(amount: object) -> dict[str, Any]:
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "BudgetPolicy",
            "metadata": {"name": "daily", "namespace": "ml", "uid": "p-1", "generation": 3},
            "spec": {"period": "Daily", "limit": {"amount": amount, "currency": "USD"},
                     "thresholds": [{"percent": 50}, {"percent": 100, "actions": ["Alert", "ScaleDown"]}]}}


@pytest.mark.parametrize("value", [*HOSTILE, *NOT_STRINGS], ids=[ascii(v) for v in [*HOSTILE, *NOT_STRINGS]])
def test_the_policy_planner_reports_invalid_spec_and_never_raises(value: object) -> None:
    plan = plan_policy(_policy(value), BudgetObserved(isvcs=[], pods={"ml": []}), load_catalog(), [], T0)
    ready = get(plan.status_patch["conditions"], "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "InvalidSpec")
    assert "spec.limit.amount" in ready["message"]
    assert plan.annotation_writes == [] and plan.alerts == ()


@pytest.mark.parametrize("limit", ["0.000001", "999999999999.999999"])
def test_the_extreme_admitted_limits_plan_without_a_decimal_error(limit: str) -> None:
    """The smallest and the largest amount the CRD admits, against a small and a huge spend: no Decimal trap."""
    spec = parse_budget_spec({"period": "Daily", "limit": {"amount": limit},
                              "thresholds": [{"percent": 50}, {"percent": 200}], "forecast": {"enabled": True}})
    service = ServiceState("ml", "a", 1000, 1000, Decimal("999999.999999999"))
    for spent in (Decimal(0), Decimal("0.000000001"), Decimal("999999999999.999999999")):
        plan = plan_budget(spec, spent, [service], AlertState(), T0)
        assert plan.limit_usd == Decimal(limit)
        plan_json(plan)  # every amount written as a decimal string
        for alert in plan.alerts:
            alert.text()


# The same kind of fault in the amounts read back from status (the ledger's ``spent`` and ``costUSDPerHour``):
# 1e999 or 1E+40 there made plan_policy raise InvalidOperation (quantizing to 1e-9 needs more than 34 digits).
HOSTILE_STATUS_AMOUNTS = ["1e999", "1E+40", " 5", "5_0", "+5", "NaN", "Infinity", "\uff15", "5.", ".5", "5\n",
                          "9" * 26, "1" * 33]


def _policy_with_ledger_spent(spent: str) -> dict[str, Any]:
    policy = _policy("10")
    policy["status"] = {"periodStart": "2026-11-30T00:00:00Z",
                        "ledger": {"observedTime": "2026-11-30T09:59:00Z",
                                   "services": [{"namespace": "ml", "name": "a", "replicas": 0,
                                                 "costUSDPerHour": "1", "spent": spent}]}}
    return policy


@pytest.mark.parametrize("spent", HOSTILE_STATUS_AMOUNTS, ids=[ascii(v) for v in HOSTILE_STATUS_AMOUNTS])
def test_a_status_amount_that_does_not_parse_is_invalid_status_never_an_exception(spent: str) -> None:
    plan = plan_policy(_policy_with_ledger_spent(spent), BudgetObserved(isvcs=[], pods={"ml": []}), load_catalog(),
                       [], T0)
    ready = get(plan.status_patch["conditions"], "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "InvalidStatus")
    assert "status.ledger.services[0].spent" in ready["message"]


def test_a_readable_status_amount_still_plans() -> None:
    plan = plan_policy(_policy_with_ledger_spent("4.000000001"), BudgetObserved(isvcs=[], pods={"ml": []}),
                       load_catalog(), [], T0)
    assert plan.budget is not None and plan.budget.spent_usd == Decimal("4.000000001")


@pytest.mark.parametrize(("field", "value"), [("spent", "-5"), ("costUSDPerHour", "-100"), ("spent", "-0.5")],
                         ids=["spent-below-the-others", "negative-rate", "spent-within-the-others"])
def test_a_negative_ledger_amount_is_invalid_status_never_an_exception_nor_a_smaller_spend(field: str,
                                                                                          value: str) -> None:
    """A ledger's spend and rate are never negative (the CRD says ``replicas`` minimum 0, and the reader refuses a
    negative one, but ``spent`` and ``costUSDPerHour`` are bare strings): a status edited by hand, or written by
    another version, with ``-5`` there made ``plan_budget`` raise ``spend must be >= 0`` (no condition, every
    evaluation failing), and ``-0.5`` beside another service's 4 USD silently took 0.5 USD off the spend the budget
    enforces on. Either is data that could not be read: ``Ready=False``/``InvalidStatus`` naming the field."""
    policy = _policy_with_ledger_spent("4")
    services = policy["status"]["ledger"]["services"]
    services.append({"namespace": "ml", "name": "b", "replicas": 1, "costUSDPerHour": "1", "spent": "0"})
    services[1][field] = value
    plan = plan_policy(policy, BudgetObserved(isvcs=[], pods={"ml": []}), load_catalog(), [], T0)
    ready = get(plan.status_patch["conditions"], "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "InvalidStatus"), ready
    assert f"status.ledger.services[1].{field}" in ready["message"]
    assert plan.annotation_writes == [] and plan.alerts == ()


def test_a_negative_tenant_spent_is_invalid_status() -> None:
    """``status.tenantSpent`` is the tenants' spend held while their usage cannot be read: a negative figure is no
    lower bound of a spend."""
    from modalscale.costmodel.budget.status import read_budget_status

    status = read_budget_status({"status": {"tenantSpent": "-3"}})
    assert status.problem is not None and "status.tenantSpent" in status.problem


def _policy_enforcing(item: dict[str, Any]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The 100 % ScaleDown threshold of ``_policy`` in force on ml/a (ledger spend 10 of 10), its cap annotation on
    the service at 2 replicas, and ``status.enforcedServices`` = [``item``]."""
    from modalscale.api.annotations import cap_annotation_key
    from modalscale.costmodel.budget.state import PolicyRef
    from modalscale.operator.budget.plan import cap_annotation_value

    policy = _policy_with_ledger_spent("10")
    policy["status"]["thresholds"] = [{"percent": 100, "crossed": True, "lastAlertTime": "2026-11-30T09:00:00Z",
                                       "alertedPeriodStart": "2026-11-30T00:00:00Z"}]
    policy["status"]["state"] = "Exceeded"
    policy["status"]["enforcedServices"] = [item]
    isvc = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "a", "namespace": "ml", "annotations": {
                cap_annotation_key("ml", "daily"): cap_annotation_value(PolicyRef("ml", "daily"), "ScaleDown", 2)}},
            "spec": {}}
    return policy, [isvc]


@pytest.mark.parametrize("max_replicas", [None, "2", True, 1.5, -1],
                         ids=["missing", "a-string", "a-bool", "a-float", "negative"])
def test_an_unreadable_enforced_max_replicas_is_invalid_status_never_a_cap_of_0(max_replicas: object) -> None:
    """``status.enforcedServices[].maxReplicas`` is the cap in force: read as 0 when missing (and ``"2"``, ``True``,
    ``1.5`` coerced by ``int()``), a status edited by hand or written by another version planned on a cap it never
    decided, and the service's cap annotation of 2 could be rewritten to 0 (scaled to zero). Like a negative ledger
    amount (f0f907a): data that could not be read, ``Ready=False``/``InvalidStatus`` naming the field, and the
    annotation in force held (no write)."""
    item: dict[str, Any] = {"namespace": "ml", "name": "a", "action": "ScaleDown", "since": "2026-11-30T09:00:00Z",
                            "dryRun": False}
    if max_replicas is not None:
        item["maxReplicas"] = max_replicas
    policy, isvcs = _policy_enforcing(item)
    plan = plan_policy(policy, BudgetObserved(isvcs=isvcs, pods={"ml": []}), load_catalog(), [], T0)
    ready = get(plan.status_patch["conditions"], "Ready")
    assert ready is not None
    assert (ready["status"], ready["reason"]) == ("False", "InvalidStatus"), ready
    assert "status.enforcedServices[0].maxReplicas" in ready["message"]
    assert plan.annotation_writes == [] and plan.alerts == ()
    assert [e[1] for e in plan.events] == ["InvalidStatus"]


def test_a_readable_enforced_max_replicas_still_plans() -> None:
    policy, isvcs = _policy_enforcing({"namespace": "ml", "name": "a", "action": "ScaleDown",
                                       "since": "2026-11-30T09:00:00Z", "dryRun": False, "maxReplicas": 2})
    plan = plan_policy(policy, BudgetObserved(isvcs=isvcs, pods={"ml": []}), load_catalog(), [], T0)
    ready = get(plan.status_patch["conditions"], "Ready")
    assert ready is not None and ready["reason"] != "InvalidStatus", ready
