"""One budget evaluation as the operator runs it, in one place: ledger, planner, rates in force.

Why a module: the BudgetPolicy planner (``modalscale.operator.budget.plan.plan_policy``) and the month benchmark
(``benchmarks/budget_month.py``) ran the same three steps each in their own copy; a change to one (the per-pod
ledger, the rates charged after a new cap) went unmeasured by the other. Both now call :func:`evaluate_budget`.

The steps (pure; the clock is ``now``):

1. ``ledger.advance``: charge ``[last observation, now)`` per service, each pod from its own start to its own
   stop when the pods are listed (``ServiceState.pods``), else the replicas in force for the whole interval;
   close the period when ``now`` is past its end.
2. ``budget.plan_budget``: state, alerts and enforcement from the spend so far.
3. ``ledger.with_rates_in_force`` with ``budget.rates_after_enforcement``: services capped now run at most their
   cap from now on (the caps are applied before the status that stores the ledger is written).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from modalscale.api.budgetpolicy import BudgetSpec
from modalscale.costmodel.budget import (
    AlertState,
    BudgetPlan,
    PolicyRef,
    ServiceState,
    TenantRejection,
    TenantSpend,
    carried_over,
    plan_budget,
    rates_after_enforcement,
)
from modalscale.costmodel.ledger import Ledger, LedgerAdvance, advance, with_rates_in_force


@dataclass(frozen=True)
class BudgetEvaluation:
    """The outcome of one evaluation.

    Attributes:
        advance: What the ledger charged up to ``now`` (spend, a closed period, unpriced intervals).
        plan: The planner's decision.
        ledger: The ledger to store: ``advance.ledger`` with the rates in force after this plan's enforcement.
    """

    advance: LedgerAdvance
    plan: BudgetPlan
    ledger: Ledger


def evaluate_budget(spec: BudgetSpec, ledger: Ledger, services: Sequence[ServiceState], alert_state: AlertState,
                    now: datetime, *, policy: PolicyRef = PolicyRef("", ""),
                    horizon_s: int | None = None, tenants: TenantSpend | None = None,
                    rejected: Sequence[TenantRejection] = (), listed_at: datetime | None = None) -> BudgetEvaluation:
    """Advance the ledger to ``now``, plan, and set the rates in force (see the module docstring).

    Args:
        spec: Parsed spec.
        ledger: As read back from status (``Ledger()`` the first time).
        services: Every selected service as observed now (with ``pods`` when listed).
        alert_state: As read back from status.
        now: Timezone-aware UTC instant of this evaluation.
        policy: For messages and alert labels.
        horizon_s: Passed to :func:`~modalscale.costmodel.budget.plan_budget` (None: the evaluation interval).
        tenants, rejected: Passed to ``plan_budget`` (a policy with ``spec.selector.tenants``: the tenants' spend,
            and ``status.rejectedTenants``).
        listed_at: When the pods were listed (``ledger.advance``'s; None: ``now``).
    Raises:
        ValueError: From ``advance`` or ``plan_budget`` (a naive ``now``, time going backwards).
    """
    result = advance(ledger, [s.observation() for s in services], now, spec.period, spec.time_zone,
                     listed_at=listed_at)
    # The stored period going on under a new spec.timeZone is this one (its caps are not new: rates_after_...).
    alert_state = carried_over(alert_state, spec.period, result.period_start, result.period_end, now)
    plan = plan_budget(spec, result, services, alert_state, now, policy=policy, horizon_s=horizon_s,
                       tenants=tenants, rejected=rejected)
    return BudgetEvaluation(result, plan,
                            with_rates_in_force(result.ledger, rates_after_enforcement(services, plan, alert_state)))


__all__ = ["BudgetEvaluation", "evaluate_budget"]
