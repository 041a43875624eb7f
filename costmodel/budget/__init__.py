"""Budget governance: from spend, services and the alert history to a plan of state, alerts and enforcement.

Why a package: "decide pure, act thin". :func:`plan_budget` is a pure function of the BudgetPolicy spec, the spend
of the current period, the selected services as observed now and the de-duplication state read back from
status; it returns a :class:`BudgetPlan` that the operator applies (scale, alert, write status) without further
decisions. Each module is one part of that decision, in the order an evaluation runs it:

* (the typed ``BudgetPolicy.spec`` it reads is :mod:`modalscale.api.budgetpolicy`, beside the InferenceService's);
* ``state``: the inputs besides the spec (:class:`ServiceState`, priced by :func:`service_state`) and what earlier
  evaluations decided, read back from status (:class:`AlertState`);
* ``spend``: step 1, the spend to date and the burn rate, and step 2, the forecast;
* ``enforce``: step 3, the thresholds in force (one evaluation ahead of the crossing) and each service's cap;
* ``spot``: step 4, ``SwitchToSpot`` and the fallback to on-demand (:func:`plan_spot`);
* ``reject``: step 4b, per-tenant budgets at admission: the tenants' spend (:func:`tenant_spend`) and the
  (service, tenant) pairs ``Reject`` refuses (:func:`plan_rejections`);
* ``alerts``: step 5, the alerts to send, once each per period, and their text (:class:`BudgetAlert`);
* ``plan``: step 6, the state, and :func:`plan_budget`, which runs the steps and returns the :class:`BudgetPlan`.

The rules are in each module's docstring. The names below are the package's API; delivery of the alerts is
:mod:`modalscale.costmodel.outbox` (at least once) and :mod:`modalscale.notify` (platforms).
"""

from __future__ import annotations

from modalscale.costmodel.budget.alerts import (
    OPEN_ENDED_KINDS,
    AlertKind,
    BudgetAlert,
    FiringAlert,
    spend_anomaly_alert,
    spend_anomaly_over,
)
from modalscale.costmodel.budget.enforce import ENFORCEMENT_METHOD, EnforcementAction
from modalscale.costmodel.budget.plan import BudgetPlan, plan_budget, rates_after_enforcement
from modalscale.costmodel.budget.reject import (
    RejectPlan,
    TenantRejection,
    TenantSpend,
    plan_rejections,
    tenant_spend,
)
from modalscale.costmodel.budget.spend import FORECAST_METHOD
from modalscale.costmodel.budget.spot import plan_spot
from modalscale.costmodel.budget.state import (
    AlertState,
    BudgetState,
    EnforcedService,
    InvalidBudgetStatus,
    PolicyRef,
    ServiceState,
    SpotRecord,
    SpotState,
    ThresholdRecord,
    carried_over,
    service_state,
)

__all__ = [
    "AlertKind", "AlertState", "BudgetAlert", "BudgetPlan", "BudgetState", "ENFORCEMENT_METHOD", "EnforcedService",
    "EnforcementAction", "FORECAST_METHOD", "FiringAlert", "InvalidBudgetStatus", "OPEN_ENDED_KINDS", "PolicyRef",
    "ServiceState", "SpotRecord", "SpotState", "ThresholdRecord", "plan_budget", "plan_spot", "rates_after_enforcement",
    "RejectPlan", "TenantRejection", "TenantSpend", "plan_rejections",
    "tenant_spend",
    "carried_over", "service_state", "spend_anomaly_alert", "spend_anomaly_over",
]
