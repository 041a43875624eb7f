"""The gateway pods' failures in ``GatewayReady`` and ``Degraded`` (found by a new-user trial, 7 Dec 2026): both
gateway pods of the predictive example stayed Pending on the local KWOK cluster, or crash-looped on a bad variable,
while ``GatewayReady`` said only "0/2 gateway pod(s) ready" and ``Degraded`` said ``Healthy: no failing pods``. The
pods below are as the API returned them."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from modalscale.api import conditions as R
from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.operator.isvc.plan import IsvcObserved, PlanConfig, plan_isvc
from tests.unit.operator.test_isvc_gateway_plan import FILES, IMAGE, NOW, make_isvc, run

SCHEDULER = ("0/3 nodes are available: 1 node(s) had untolerated taint {modalscale.io/node-type: real}, 2 node(s) "
             "had untolerated taint {nvidia.com/gpu: present}. preemption: 0/3 nodes are available: 3 Preemption is "
             "not helpful for scheduling.")


def pending(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"modalscale.io/gateway": "vc"}},
            "status": {"phase": "Pending", "qosClass": "Burstable", "conditions": [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": SCHEDULER,
                 "lastProbeTime": None, "lastTransitionTime": "2026-12-07T17:02:11Z"}]}}


def crash_looping(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {"modalscale.io/gateway": "vc"}},
            "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "False"}], "containerStatuses": [
                {"name": "gateway", "ready": False, "restartCount": 5, "started": False,
                 "image": "modalscale/operator:0.1.0",
                 "state": {"waiting": {"reason": "CrashLoopBackOff", "message": (
                     f"back-off 2m40s restarting failed container=gateway pod={name}_ml(0f3c)")}},
                 "lastState": {"terminated": {"exitCode": 2, "reason": "Error", "message": (
                     "MODALSCALE_GATEWAY_MAX_INFLIGHT='ten' is not an integer"),
                     "startedAt": "2026-12-07T17:05:01Z", "finishedAt": "2026-12-07T17:05:02Z"}}}]}}


def gateway_down(pods: list[dict[str, Any]]) -> tuple[dict[str, dict[str, Any]], Any]:
    """The conditions of a pass over a running service whose gateway Deployment has no ready pod, and the plan."""
    body = make_isvc(gateway={"enabled": True})
    _, obs = run(body, gateway_ready=False)
    obs = copy.deepcopy(obs)
    obs.gateway_pods = pods
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(gateway_image=IMAGE), NOW)
    return {c["type"]: c for c in write_isvc_status(plan.status)["conditions"]}, plan


def test_pending_gateway_pods_say_unschedulable_with_the_schedulers_message_and_the_fix() -> None:
    conditions, plan = gateway_down([pending("vc-gateway-6b7c-a"), pending("vc-gateway-6b7c-b")])
    ready = conditions[R.GATEWAY_READY]
    assert (ready["status"], ready["reason"]) == ("False", R.UNSCHEDULABLE)
    assert "0/2 gateway pod(s) ready" in ready["message"]
    assert "gateway pod vc-gateway-6b7c-a cannot be scheduled: 0/3 nodes are available" in ready["message"]
    assert "spec.gateway.enabled: false" in ready["message"]  # the fix on a cluster of KWOK nodes
    assert len(ready["message"]) <= 1024
    degraded = conditions[R.DEGRADED]
    assert (degraded["status"], degraded["reason"]) == ("True", R.UNSCHEDULABLE)
    assert "2 of 2 gateway pod(s) failing" in degraded["message"] and "vc-gateway-6b7c-a" in degraded["message"]
    assert ("Warning", R.UNSCHEDULABLE) in [(t, r) for t, r, _ in plan.events]


def test_a_crash_looping_gateway_pod_says_its_last_exit_and_termination_message() -> None:
    conditions, _ = gateway_down([crash_looping("vc-gateway-6b7c-a")])
    for type_ in (R.GATEWAY_READY, R.DEGRADED):
        c = conditions[type_]
        assert c["reason"] == R.CRASH_LOOP, c
        assert "gateway pod vc-gateway-6b7c-a container gateway: CrashLoopBackOff" in c["message"]
        assert "last exit code 2 (Error): MODALSCALE_GATEWAY_MAX_INFLIGHT='ten' is not an integer" in c["message"]
    assert conditions[R.DEGRADED]["status"] == "True"


def test_a_failing_replica_comes_first_and_the_gateway_is_named_beside_it() -> None:
    body = make_isvc(gateway={"enabled": True})
    _, obs = run(body, gateway_ready=False)
    obs.pods = [{"metadata": {"name": "vc-7d9-x"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": "0/3 nodes: no GPU"}]}}]
    obs.gateway_pods = [crash_looping("vc-gateway-6b7c-a")]
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(gateway_image=IMAGE), NOW)
    degraded = {c["type"]: c for c in write_isvc_status(plan.status)["conditions"]}[R.DEGRADED]
    assert (degraded["status"], degraded["reason"]) == ("True", R.UNSCHEDULABLE)
    assert degraded["message"].startswith("pod vc-7d9-x cannot be scheduled: 0/3 nodes: no GPU")
    assert "1 of 1 gateway pod(s) failing: gateway pod vc-gateway-6b7c-a" in degraded["message"]


def test_a_ready_gateway_and_no_failing_pod_stay_healthy_and_a_rerun_writes_nothing() -> None:
    body = make_isvc(gateway={"enabled": True})
    plan, obs = run(body)
    plan, obs = run(body, obs)
    obs.gateway_pods = [{"metadata": {"name": "vc-gateway-6b7c-a"}, "status": {"phase": "Running"}}]
    again = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(gateway_image=IMAGE), NOW)
    conditions = {c["type"]: c for c in write_isvc_status(again.status)["conditions"]}
    assert conditions[R.DEGRADED]["reason"] == R.HEALTHY
    assert conditions[R.GATEWAY_READY]["status"] == "True"
    assert again.writes == [] and write_isvc_status(again.status, obs.status) == {}


def test_the_observed_world_has_the_gateway_pods() -> None:
    assert IsvcObserved().gateway_pods == []


def test_the_local_clusters_instructions_apply_the_predictive_example_with_the_direct_service() -> None:
    """docs/operations.md ("Run the operator locally") pipes the example through ``sed`` to turn the gateway off: its
    pods could never run on KWOK nodes. The same substitution, in Python, gives a valid spec without the gateway."""
    repo = Path(__file__).resolve().parents[3]
    docs = (repo / "docs" / "operations.md").read_text()
    line = next(x for x in docs.splitlines() if "inferenceservice-predictive.yaml | kubectl apply -f -" in x)
    assert line.startswith("sed 's/^spec:$/spec:\\n  gateway: {enabled: false}/' ")
    text = (repo / "crds" / "examples" / "inferenceservice-predictive.yaml").read_text()
    assert text.count("\nspec:\n") == 1 and "gateway" not in text  # the example itself keeps the default (on)
    body = yaml.safe_load(text.replace("\nspec:\n", "\nspec:\n  gateway: {enabled: false}\n"))
    body["metadata"].update(namespace="default", uid="u-1", generation=1)
    assert parse_isvc(body).gateway.enabled is False
