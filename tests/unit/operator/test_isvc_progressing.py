"""``Progressing`` follows ``kubectl rollout status`` (found by a new-user trial, 7 Dec 2026): it said
``RolloutComplete`` while the Deployment's pods were Pending or a restart's new pod sat in ContainerCreating, and
called a template roll a scale-down. The Deployment statuses below are as the API returned them in that trial."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from modalscale.api import conditions as R
from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.operator.conditions import get
from modalscale.operator.isvc.plan import PlanConfig, plan_isvc, rollout_complete
from tests.unit.operator.test_isvc_plan import FILES, NOW, converge, make_isvc

ONE = {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 1}


def progressing(status: dict[str, Any], generation: int = 1, spec_replicas: int = 1) -> dict[str, Any]:
    """The InferenceService's Progressing over its Deployment with ``status`` (and ``generation``)."""
    body = make_isvc(scaling={**ONE, "replicas": spec_replicas, "maxReplicas": spec_replicas})
    obs, _ = converge(body)
    assert obs.deployment is not None and obs.deployment["spec"]["replicas"] == spec_replicas
    obs.deployment["metadata"]["generation"] = generation
    obs.deployment["status"] = copy.deepcopy(status)
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW)
    c = get(write_isvc_status(plan.status)["conditions"], R.PROGRESSING)
    assert c is not None
    return dict(c)


PENDING = {"observedGeneration": 1, "replicas": 1, "updatedReplicas": 1, "unavailableReplicas": 1, "conditions": [
    {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable",
     "message": "Deployment does not have minimum availability."},
    {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated",
     "message": 'ReplicaSet "vc-7d9f" is progressing.'}]}
RESTARTED = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 1,
             "availableReplicas": 1, "unavailableReplicas": 1, "conditions": [
                 {"type": "Available", "status": "True", "reason": "MinimumReplicasAvailable"},
                 {"type": "Progressing", "status": "True", "reason": "NewReplicaSetCreated",
                  "message": 'Created new replica set "vc-5c6b"'}]}


def test_a_pending_pod_is_not_a_complete_rollout() -> None:
    c = progressing(PENDING)
    assert (c["status"], c["reason"]) == ("True", R.ROLLING_OUT)
    assert "0 of 1 updated replica(s) are available" in c["message"]


def test_a_restart_whose_new_pod_is_creating_rolls_out_a_new_template_not_a_scale() -> None:
    c = progressing(RESTARTED, generation=2)
    assert (c["status"], c["reason"]) == ("True", R.ROLLING_OUT)
    assert "rolling out a new pod template: 1 old replica(s) are pending termination" in c["message"]
    assert "scaling" not in c["message"]


def test_a_spec_the_controller_has_not_observed_is_not_complete() -> None:
    c = progressing({**RESTARTED, "observedGeneration": 1, "replicas": 1, "updatedReplicas": 1}, generation=2)
    assert (c["status"], c["reason"]) == ("True", R.ROLLING_OUT)
    assert "observe generation 2" in c["message"]


def test_new_replicas_not_yet_updated_are_said_as_kubectl_says_them() -> None:
    st = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 1, "readyReplicas": 2, "availableReplicas": 2}
    c = progressing(st, generation=2, spec_replicas=2)
    assert (c["status"], c["reason"]) == ("True", R.ROLLING_OUT)
    assert "1 out of 2 new replica(s) have been updated" in c["message"]


def test_a_rollout_past_its_deadline_says_so() -> None:
    st = {**PENDING, "conditions": [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
                                     "message": 'ReplicaSet "vc-7d9f" has timed out progressing.'}]}
    c = progressing(st)
    assert (c["status"], c["reason"]) == ("False", R.DEPLOYMENT_PROGRESS_DEADLINE_EXCEEDED)
    assert "progress deadline (600 s)" in c["message"] and "timed out progressing" in c["message"]


def test_a_scale_down_is_said_as_a_scale() -> None:
    st = {"observedGeneration": 2, "replicas": 2, "updatedReplicas": 2, "readyReplicas": 2, "availableReplicas": 2}
    c = progressing(st, generation=2)
    assert (c["status"], c["reason"]) == ("True", R.ROLLING_OUT)
    assert c["message"].startswith("scaling from 2 to 1 replica(s)")


@pytest.mark.parametrize("status", [PENDING, RESTARTED])
def test_rollout_complete_agrees(status: dict[str, Any]) -> None:
    dep = {"metadata": {"generation": status["observedGeneration"]}, "spec": {"replicas": 1}, "status": status}
    assert not rollout_complete(dep)


def test_a_complete_rollout_is_complete_and_a_rerun_writes_nothing() -> None:
    st = {"observedGeneration": 2, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1}
    c = progressing(st, generation=2)
    assert (c["status"], c["reason"], c["message"]) == ("False", R.ROLLOUT_COMPLETE, "all 1 replica(s) updated")
    body = make_isvc(scaling=ONE)
    obs, _ = converge(body)
    assert plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW).writes == []
