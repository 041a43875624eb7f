"""Statuses as the operator writes them, made by the operator's own planners (no hand-written status dicts).

* :func:`scaled_isvc`: an InferenceService after two autoscaler decisions (1 -> 5 at 50 req/s, limited by
  maxStepReplicas 4; 5 -> 2 at 10 req/s ten minutes later): ``modalscale.autoscaler.policy.recommend`` with a
  constant 100 ms service-time model decides,
  ``operator.autoscale.plan.plan_autoscale`` writes ``status.autoscaler`` and ``operator.isvc.plan.plan_isvc``
  (the scale pass the autoscaler hands its decision to) writes ``scalingHistory`` and the conditions.
* :func:`staged_isvc`: a staged InferenceService (``spec.stages.imageEncoder``) after its first reconcile
  (``plan_isvc``: the pool at ``minReplicas`` 1) and one decision of the image encoder pool at 90 % utilization of
  its ready slots (``recommend`` with ``image_encoder_policy``, written by ``plan_image_encoder_autoscale``).
* :func:`evaluated_policy`: a BudgetPolicy after two evaluations of ``operator.budget.plan.plan_policy`` one hour
  apart (2 replicas at 0.600125239 USD/h each, packaged catalog: 1.20 USD spent of 2 USD, the 50 % CapReplicas
  threshold crossed, its Alert in the outbox for a Slack target).

The integration test patches the same statuses into a real apiserver, which validates them against the CRDs.
"""

from __future__ import annotations

import copy
import datetime as dt
from typing import Any

import numpy as np
from numpy.typing import NDArray

from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.autoscaler.features import FEATURES
from modalscale.autoscaler.metrics_reading import MetricsReading
from modalscale.autoscaler.policy import (
    Decision,
    ScalerState,
    ScalingMode,
    ScalingPolicy,
    WorkloadClass,
    image_encoder_policy,
    recommend,
)
from modalscale.costmodel.catalog import ReplicaResources, load_catalog, price_replica
from modalscale.operator.autoscale.plan import ServiceTimeModelStatus, plan_autoscale, plan_image_encoder_autoscale
from modalscale.operator.budget.plan import BudgetObserved, plan_policy
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from tests.factories import as_status, budget_policy, inference_service, merge_patch, observation

T0 = dt.datetime(2026, 11, 30, 10, 0, tzinfo=dt.UTC)
REPLICA_USD_PER_HOUR = price_replica(ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4"), "OnDemand",
                                     load_catalog())
"""One replica of :func:`isvc_body` (1 CPU, 2Gi, one nvidia-l4) at the packaged catalog's on-demand prices."""
FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\n', "multimodal/1/model.py": "# model\n"}


class ConstantModel:
    """Predicts the same service time for every request, ms."""

    def __init__(self, ms: float) -> None:
        self.ms = ms

    def predict(self, X: NDArray[np.float64]) -> NDArray[np.float64]:
        assert X.shape[1] == len(FEATURES)
        return np.full(X.shape[0], self.ms)


def isvc_body(name: str = "vc", ns: str = "ml") -> dict[str, Any]:
    return inference_service(name, ns, uid=f"u-{name}", generation=1,
                             scaling={"mode": "Predictive", "minReplicas": 1, "maxReplicas": 6})


def _deployment(dep: dict[str, Any], replicas: int) -> dict[str, Any]:
    """The Deployment as the apiserver returns it after the controller caught up with ``replicas``."""
    out = copy.deepcopy(dep)
    out["spec"]["replicas"] = replicas
    out["metadata"].setdefault("annotations", {})["modalscale.io/replicas"] = str(replicas)
    out["status"] = {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}
    return out


def _decide(status: dict[str, Any], rate_rps: float | None, current: int, state: ScalerState, now: dt.datetime,
            extra: dict[str, float] | None = None) -> tuple[Decision, dict[str, Any]]:
    """One autoscaler decision at ``rate_rps`` (None: Prometheus had no traffic series) and its status; ``extra``:
    the reading's extras (``MetricsReading.extra``)."""
    policy = ScalingPolicy(mode=ScalingMode.PREDICTIVE, min_replicas=1, max_replicas=6, target_p95_latency_ms=1000,
                           scale_down_stabilization_s=0, max_step_replicas=4, decision_interval_s=15)
    obs = observation(now, current, window_s=60.0, workload=None if rate_rps is None else (
        WorkloadClass(modality="text", rate_rps=rate_rps, mean_text_tokens=100, service_scv=1.0),))
    decision = recommend(obs, policy, state, ConstantModel(100.0), now)
    reading = MetricsReading(observed_at=now, workload=obs.workload,
                             busy_erlangs=None if rate_rps is None else rate_rps * 0.1, targets_up=current,
                             targets_total=current, extra=extra or {})
    loaded = ServiceTimeModelStatus(True, "ArtifactLoaded", "service-time model loaded")
    patch = plan_autoscale(as_status(status), decision, reading, loaded, generation=1, now=now).status_patch
    return decision, merge_patch(status, patch)


def scaled_isvc(name: str = "vc", ns: str = "ml") -> dict[str, Any]:
    """An InferenceService body with the status of two autoscaler decisions (see the module docstring)."""
    body = isvc_body(name, ns)
    spec = parse_isvc(body)
    first = plan_isvc(spec, IsvcObserved(), FILES, PlanConfig(), T0)
    dep = next(w.body for w in first.writes if w.kind == "Deployment")
    status, replicas = write_isvc_status(first.status), int(dep["spec"]["replicas"])
    state = ScalerState()
    for minutes, rate in ((1, 50.0), (11, 10.0)):
        now = T0 + dt.timedelta(minutes=minutes)
        decision, status = _decide(status, rate, replicas, state, now)
        state = decision.state
        obs = IsvcObserved(status=as_status(status), deployment=_deployment(dep, replicas),
                           pods=[_pod(name, i) for i in range(replicas)], replica_usd_per_hour=REPLICA_USD_PER_HOUR)
        plan = plan_isvc(spec, obs, None, PlanConfig(), now, decision=decision)
        status = merge_patch(status, write_isvc_status(plan.status, as_status(status)))
        replicas = plan.desired_replicas or replicas
    return {**body, "status": status}


def int8_isvc(fell_back: int, pods: int = 2, name: str = "vc", ns: str = "ml") -> dict[str, Any]:
    """An InferenceService body after one decision whose reading held the runtime's INT8 fallback gauge of
    ``pods`` pods, ``fell_back`` of them at 1 (``metrics_parse._int8_fallback``'s extras)."""
    body = isvc_body(name, ns)
    status = write_isvc_status(plan_isvc(parse_isvc(body), IsvcObserved(), FILES, PlanConfig(), T0).status)
    _, status = _decide(status, 10.0, pods, ScalerState(), T0 + dt.timedelta(minutes=1),
                        extra={"image_int8_fallback_pods": float(fell_back), "image_int8_pods": float(pods)})
    return {**body, "status": status}


def staged_isvc(name: str = "vc", ns: str = "ml") -> dict[str, Any]:
    """A staged InferenceService body after one image encoder pool decision (see the module docstring)."""
    body = inference_service(name, ns, uid=f"u-{name}", generation=1,
                             scaling={"mode": "Utilization", "minReplicas": 1, "maxReplicas": 6,
                                      "targetUtilizationPercent": 60},
                             stages={"imageEncoder": {"minReplicas": 1, "maxReplicas": 4}})
    spec = parse_isvc(body)
    assert spec.stages is not None
    status = write_isvc_status(plan_isvc(spec, IsvcObserved(), FILES, PlanConfig(), T0).status)
    now = T0 + dt.timedelta(minutes=1)
    policy = image_encoder_policy(spec.scaling, spec.stages.image_encoder)
    obs = observation(now, 1, utilization_ratio=0.9)
    decision = recommend(obs, policy, ScalerState(), None, now)
    reading = MetricsReading(observed_at=now, workload=None, busy_erlangs=0.9, targets_up=1, targets_total=1)
    plan = plan_image_encoder_autoscale(as_status(status), decision, reading, now=now, utilization_ratio=0.9)
    return {**body, "status": merge_patch(status, write_isvc_status(plan.status, plan.stored))}


def held_isvc() -> dict[str, Any]:
    """:func:`scaled_isvc` one minute after its last decision, when the metrics could not be read: the autoscaler
    holds (``valid: false``) and ``plan_autoscale`` writes only the block and ``MetricsAvailable``."""
    isvc = scaled_isvc()
    status = isvc["status"]
    _, status = _decide(status, None, int(status["desiredReplicas"]), ScalerState(), T0 + dt.timedelta(minutes=12))
    return {**isvc, "status": status}


def budget_body(name: str = "daily", ns: str = "ml") -> dict[str, Any]:
    return budget_policy(name, ns, uid=f"p-{name}", generation=1,
                         notifications=[{"name": "team-slack", "type": "Slack", "secretRef": {"name": "slack-hook"}}])


def _pod(isvc: str, i: int) -> dict[str, Any]:
    return {"metadata": {"name": f"{isvc}-{i}", "labels": {"modalscale.io/inferenceservice": isvc}},
            "spec": {"nodeName": "kwok-gpu-0"}, "status": {"phase": "Running"}}


def evaluated_policy(isvc: dict[str, Any] | None = None, name: str = "daily", hours: int = 1,
                     step: dt.timedelta = dt.timedelta(hours=1), **spec: Any) -> dict[str, Any]:
    """A BudgetPolicy body with the status of evaluations at ``T0`` and every ``step`` after it for ``hours`` steps
    (see the module docstring; the two pods keep running, so each hour adds 1.200250478 USD); ``spec`` overrides
    fields of :func:`budget_body`'s spec."""
    isvc = isvc or {**isvc_body(), "spec": {**isvc_body()["spec"],
                                            "scaling": {"mode": "Fixed", "replicas": 2, "minReplicas": 1,
                                                        "maxReplicas": 4}}}
    ns = isvc["metadata"]["namespace"]
    observed = BudgetObserved(isvcs=[isvc], pods={ns: [_pod(isvc["metadata"]["name"], i) for i in range(2)]})
    policy = budget_body(name, ns)
    policy["spec"].update(spec)
    for now in (T0 + step * h for h in range(hours + 1)):
        patch = plan_policy(policy, observed, load_catalog(), [], now).status_patch
        policy = {**policy, "status": merge_patch(policy.get("status") or {}, patch)}
    return policy
