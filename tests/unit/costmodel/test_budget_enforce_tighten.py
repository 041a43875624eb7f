"""A spec change that tightens a cap in force holds it at the new, lower target; it never lifts it.

Enforcement in force is held for the period while spend + the services' maximum rate x horizon still reaches its
threshold; which threshold a ``status.enforcedServices`` entry belongs to was read from its ``maxReplicas`` being at
or below the threshold's target. Lowering ``capReplicas`` (or ``floorReplicas``, or the service's own
``maxReplicas``) below the cap in force made the entry belong to no threshold: a cap enforced ahead of its crossing
was lifted (the service scaled back up to its maximum, and was charged for it) until the next evaluation enforced
it again.
"""

from __future__ import annotations

from datetime import datetime, timezone
from decimal import Decimal
from typing import Any

import pytest

from modalscale.api.budgetpolicy import parse_budget_spec
from modalscale.costmodel.budget import AlertState, PolicyRef, ServiceState, plan_budget

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=timezone.utc)
T1 = datetime(2026, 11, 30, 10, 1, tzinfo=timezone.utc)
SPEC: dict[str, Any] = {"period": "Daily", "limit": {"amount": "100", "currency": "USD"},
                        "thresholds": [{"percent": 80, "actions": ["Alert", "CapReplicas"], "capReplicas": 4},
                                       {"percent": 90, "actions": ["Alert", "ScaleDown"]}],
                        "enforcement": {"floorReplicas": 2}, "forecast": {"enabled": False}}


def svc(replicas: int, max_replicas: int = 10) -> ServiceState:
    return ServiceState("ml", "vc", replicas, max_replicas, Decimal("1"))


def enforced_ahead() -> AlertState:
    """79.85 USD of 100 at 10 replicas x 1 USD/h: 80 % is reached within the 60 s horizon, capped at 4."""
    plan = plan_budget(parse_budget_spec(SPEC), Decimal("79.85"), [svc(10)], AlertState(), T0,
                       policy=PolicyRef("ml", "b"), horizon_s=60)
    assert [(e.name, e.max_replicas) for e in plan.enforced_services] == [("vc", 4)]
    return plan.alert_state


def test_unchanged_spec_holds_the_cap_enforced_ahead() -> None:
    # 79.86 + 4 replicas x 60 s = 79.93: the capped rate alone no longer reaches 80 %; the maximum rate (10) does.
    plan = plan_budget(parse_budget_spec(SPEC), Decimal("79.86"), [svc(4)], enforced_ahead(), T1, horizon_s=60)
    assert [(e.name, e.max_replicas) for e in plan.enforced_services] == [("vc", 4)]


@pytest.mark.parametrize(("change", "spent", "service", "cap"), [
    ({"thresholds": [{**SPEC["thresholds"][0], "capReplicas": 2}, SPEC["thresholds"][1]]}, "79.86", svc(4), 2),
    # The service's own maxReplicas lowered to 3 (2 run): 79.96 + 3 x 60 s = 80.01 still reaches 80 %.
    ({}, "79.96", svc(2, max_replicas=3), 3),
])
def test_a_tightened_cap_is_held_at_its_new_target_not_lifted(change: dict[str, Any], spent: str,
                                                              service: ServiceState, cap: int) -> None:
    plan = plan_budget(parse_budget_spec({**SPEC, **change}), Decimal(spent), [service], enforced_ahead(), T1,
                       horizon_s=60)
    assert [(e.name, e.max_replicas) for e in plan.enforced_services] == [("vc", cap)]  # was [] (lifted)


def test_a_tightened_floor_holds_the_scale_down_at_the_new_floor() -> None:
    """90 % ScaleDown enforced ahead at floor 2, then floorReplicas lowered to 1: held at 1, 80 % with it."""
    ahead = plan_budget(parse_budget_spec(SPEC), Decimal("89.85"), [svc(10)], AlertState(), T0, horizon_s=60)
    assert [(e.action.value, e.max_replicas) for e in ahead.enforced_services] == [("ScaleDown", 2)]
    lowered = {**SPEC, "enforcement": {"floorReplicas": 1}}
    plan = plan_budget(parse_budget_spec(lowered), Decimal("89.86"), [svc(2)], ahead.alert_state, T1, horizon_s=60)
    assert [(e.action.value, e.max_replicas) for e in plan.enforced_services] == [("ScaleDown", 1)]
    assert plan.thresholds_enforced == (80, 90)


def test_a_tightened_weaker_threshold_is_not_taken_for_the_stronger_one() -> None:
    """Only 80 % (cap 4) in force; its cap lowered to 3: held at 3, and 90 % (ScaleDown to 2) is not enforced."""
    change = {"thresholds": [{**SPEC["thresholds"][0], "capReplicas": 3}, SPEC["thresholds"][1]]}
    plan = plan_budget(parse_budget_spec({**SPEC, **change}), Decimal("79.86"), [svc(4)], enforced_ahead(), T1,
                       horizon_s=60)
    assert [(e.action.value, e.max_replicas) for e in plan.enforced_services] == [("CapReplicas", 3)]
    assert plan.thresholds_enforced == (80,)
