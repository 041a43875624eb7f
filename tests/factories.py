"""Shared test factories: the InferenceService and BudgetPolicy bodies and the autoscaler ``Observation`` that tests
build, so that a spec change is one edit here (issue 23).

Overrides replace whole top-level ``spec`` members (``scaling={...}`` replaces the default ``scaling``), the way the
per-module helpers did with ``body["spec"].update(spec)``: a test states the whole member it is about, and no default
leaks into it. ``tests/unit/test_factories.py`` checks that every default body passes the api parsers.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

from modalscale.api.isvc_status import AutoscalerRecord, IsvcStatus, ScalerState, read_isvc_status, write_isvc_status
from modalscale.autoscaler.policy import Observation
from modalscale.costmodel.anomaly import AnomalyState
from modalscale.costmodel.budget import BudgetPlan, PolicyRef
from modalscale.costmodel.budget.status import BudgetStatus, budget_status_json, read_budget_status, status_of_plan
from modalscale.costmodel.ledger import Ledger, LedgerFormatError
from modalscale.costmodel.outbox import PendingAlert

API_VERSION = "modalscale.io/v1alpha1"

# The default InferenceService spec: one L4 GPU per replica, two Fixed replicas (1..6). No ``gateway`` member, so the
# CRD default applies (the gateway is on); a test about the replicas' direct Service passes gateway={"enabled": False}.
ISVC_RESOURCES: dict[str, Any] = {"cpu": "1", "memory": "2Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}
ISVC_SCALING: dict[str, Any] = {"mode": "Fixed", "replicas": 2, "minReplicas": 1, "maxReplicas": 6}

# The default BudgetPolicy spec: 2 USD a day; at 50 % alert and cap to 1 replica, at 100 % alert and scale down to the
# floor of 1; no forecast (its alerts would depend on the test's clock), evaluated every 60 s.
BUDGET_LIMIT: dict[str, Any] = {"amount": "2", "currency": "USD"}
BUDGET_THRESHOLDS: list[dict[str, Any]] = [
    {"percent": 50, "actions": ["Alert", "CapReplicas"], "capReplicas": 1},
    {"percent": 100, "actions": ["Alert", "ScaleDown"]},
]

# The default ``Observation.observed_at``: a fixed UTC instant, so that a test's result never depends on the wall clock.
OBSERVED_AT = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)


def _metadata(name: str, namespace: str | None, uid: str | None, generation: int | None,
              labels: dict[str, str] | None, annotations: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    for key, value in (("namespace", namespace), ("uid", uid), ("generation", generation), ("labels", labels),
                       ("annotations", annotations)):
        if value is not None:
            meta[key] = value
    return meta


def inference_service(name: str = "vc", namespace: str | None = None, *, uid: str | None = None,
                      generation: int | None = None, labels: dict[str, str] | None = None,
                      annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    """An InferenceService body (a dict as a manifest or the apiserver has it).

    Args:
        name: ``metadata.name``.
        namespace, uid, generation, labels, annotations: The ``metadata`` members; None = absent (a manifest to
            create has none of uid/generation; an object as read back, e.g. for ``parse_isvc``, passes them).
        spec: Top-level ``spec`` members, each replacing the default's whole member (module docstring). Defaults:
            ``resources`` = :data:`ISVC_RESOURCES`, ``scaling`` = :data:`ISVC_SCALING`; ``gateway`` absent, so the
            gateway is on as the CRD defaults it.

    Returns:
        A fresh dict (the defaults are deep-copied: a test may mutate them; members passed in are used as given).
    """
    body_spec: dict[str, Any] = {"resources": copy.deepcopy(ISVC_RESOURCES), "scaling": copy.deepcopy(ISVC_SCALING),
                                 **spec}
    return {"apiVersion": API_VERSION, "kind": "InferenceService",
            "metadata": _metadata(name, namespace, uid, generation, labels, annotations), "spec": body_spec}


def budget_policy(name: str = "daily", namespace: str | None = "ml", *, uid: str | None = None,
                  generation: int | None = None, **spec: Any) -> dict[str, Any]:
    """A BudgetPolicy body.

    Args:
        name, namespace, uid, generation: The ``metadata`` members; None = absent.
        spec: Top-level ``spec`` members, each replacing the default's whole member. Defaults: ``period`` Daily,
            ``limit`` = :data:`BUDGET_LIMIT` (2 USD), ``thresholds`` = :data:`BUDGET_THRESHOLDS`, ``enforcement``
            ``{"floorReplicas": 1}``, ``forecast`` disabled, ``evaluationIntervalSeconds`` 60.

    Returns:
        A fresh dict (the defaults deep-copied; members passed in used as given).
    """
    body_spec: dict[str, Any] = {"period": "Daily", "limit": copy.deepcopy(BUDGET_LIMIT),
                                 "thresholds": copy.deepcopy(BUDGET_THRESHOLDS), "enforcement": {"floorReplicas": 1},
                                 "forecast": {"enabled": False}, "evaluationIntervalSeconds": 60, **spec}
    return {"apiVersion": API_VERSION, "kind": "BudgetPolicy",
            "metadata": _metadata(name, namespace, uid, generation, None, None), "spec": body_spec}


def observation(observed_at: dt.datetime = OBSERVED_AT, current_replicas: int = 1, ready_replicas: int | None = None,
                **fields: Any) -> Observation:
    """An autoscaler :class:`~modalscale.autoscaler.policy.Observation`.

    Args:
        observed_at: Default :data:`OBSERVED_AT` (fixed, UTC).
        current_replicas: Replicas requested now; default 1.
        ready_replicas: Replicas serving now; None = ``current_replicas`` (all ready).
        fields: Any other ``Observation`` field; the class's own defaults otherwise (no workload = rates unknown,
            ``window_s`` 60).
    """
    ready = current_replicas if ready_replicas is None else ready_replicas
    return Observation(observed_at=observed_at, current_replicas=current_replicas, ready_replicas=ready, **fields)



def as_status(status: dict[str, Any] | None) -> IsvcStatus:
    """An InferenceService ``status`` dict (as stored) as the typed value the planners take."""
    return read_isvc_status({"status": status})


def stored_state(status: dict[str, Any] | None) -> ScalerState:
    """The autoscaler state a stored InferenceService ``status`` dict holds (fresh when none or malformed)."""
    return as_status(status).scaler_state


def state_json(state: ScalerState) -> dict[str, Any]:
    """``status.autoscaler.state`` as written for ``state``."""
    return dict(write_isvc_status(IsvcStatus(autoscaler=AutoscalerRecord(state=state)))["autoscaler"]["state"])


# ---------------------------------------------------------------------------------------- BudgetPolicy status
TEST_POLICY = PolicyRef("ml", "daily")


def read_budget(status: Any, policy: PolicyRef = TEST_POLICY) -> BudgetStatus:
    """A stored BudgetPolicy ``status`` dict read as the planner reads it (``problem`` names a field that does not
    parse)."""
    return read_budget_status({"status": status}, policy)


def plan_json(plan: BudgetPlan, ledger: Ledger | None = None) -> dict[str, Any]:
    """The status keys the cost model's plan owns (``periodStart`` .. ``forecast``; ``ledger`` when given), as
    written."""
    out = dict(budget_status_json(status_of_plan(plan, ledger, generation=0, outbox=(), anomaly_state=AnomalyState(),
                                                 conditions=[])))
    for key in ("observedGeneration", "pendingAlerts", "spendAnomalies", "conditions",
                *(() if ledger else ("ledger",))):
        out.pop(key, None)
    return out


def ledger_json(ledger: Ledger) -> dict[str, Any]:
    """``status.ledger`` as written for ``ledger``."""
    return dict(budget_status_json(BudgetStatus(ledger=ledger))["ledger"])


def read_ledger(ledger: Any, period_start: Any = None) -> Ledger:
    """``status.ledger`` (and ``status.periodStart``) read back; raises ``LedgerFormatError`` naming the field."""
    status = read_budget({"ledger": ledger, **({} if period_start is None else {"periodStart": period_start})})
    if status.ledger is None:
        raise LedgerFormatError(status.problem or "status.ledger")
    return status.ledger


def pending_json(entry: PendingAlert) -> dict[str, Any]:
    """One ``status.pendingAlerts`` item as written."""
    return dict(budget_status_json(BudgetStatus(outbox=(entry,)))["pendingAlerts"][0])


def anomalies_json(state: AnomalyState) -> list[dict[str, Any]]:
    """``status.spendAnomalies`` as written."""
    return [dict(i) for i in budget_status_json(BudgetStatus(anomaly_state=state))["spendAnomalies"]]


def merge_patch(target: Any, patch: Any) -> Any:
    """``patch`` applied to ``target`` as the apiserver applies a JSON merge patch (RFC 7386: null deletes)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out
