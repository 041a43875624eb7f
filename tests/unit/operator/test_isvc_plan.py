"""The pure InferenceService planner: writes only on difference, one replica writer, truthful status."""

from __future__ import annotations

import copy
import datetime as dt
from dataclasses import replace
from typing import Any

import pytest

from modalscale.api import conditions as R
from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import parse_isvc
from modalscale.api.isvc_status import write_isvc_status
from modalscale.autoscaler.policy import Decision, Reason, ScalerState, ScalingMode
from modalscale.operator.conditions import get
from modalscale.operator.isvc.objects import REPLICAS_ANNOTATION
from modalscale.operator.isvc.plan import (
    IsvcObserved,
    ModelReferenceError,
    PlanConfig,
    is_derivative,
    plan_isvc,
)
from tests.factories import as_status, inference_service

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
FILES = {"multimodal/config.pbtxt": 'name: "multimodal"\n', "multimodal/1/model.py": "# model\n"}


def make_isvc(**spec: Any) -> dict[str, Any]:
    return inference_service("vc", "ml", uid="u-1", generation=1, **{
        "resources": {"cpu": "2", "memory": "8Gi", "gpu": {"count": 1, "type": "nvidia-l4"}},
        "scaling": {"mode": "Predictive", "minReplicas": 2, "maxReplicas": 6},
        # The direct Service: these tests are about the replicas' children (the gateway, on by default, has its
        # own: test_isvc_gateway_plan.py).
        "gateway": {"enabled": False}, **spec})


def apiserver_view(created: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver returns for a created object: defaults filled, canonical quantities, status."""
    obj = copy.deepcopy(created)
    obj["metadata"]["generation"] = 1
    obj["metadata"]["resourceVersion"] = "1"
    if obj["kind"] == "Deployment":
        c = obj["spec"]["template"]["spec"]["containers"][0]
        c["imagePullPolicy"] = "IfNotPresent"
        c["terminationMessagePath"] = "/dev/termination-log"
        c["resources"]["requests"]["cpu"] = "2000m" if c["resources"]["requests"]["cpu"] == "2" else "1"
        obj["spec"]["progressDeadlineSeconds"] = 600
        r = obj["spec"]["replicas"]
        obj["status"] = {"observedGeneration": 1, "replicas": r, "readyReplicas": r, "updatedReplicas": r,
                         "availableReplicas": r}
    if obj["kind"] == "Service":
        obj["spec"]["clusterIP"] = "10.0.0.12"
        obj["spec"]["sessionAffinity"] = "None"
    return obj


def converge(body: dict[str, Any]) -> tuple[IsvcObserved, dict[str, Any]]:
    """Plan once from nothing, 'apply' the creates, and return the observed world afterwards."""
    spec = parse_isvc(body)
    first = plan_isvc(spec, IsvcObserved(), FILES, PlanConfig(), NOW)
    kinds = {w.kind: apiserver_view(w.body) for w in first.writes}
    obs = IsvcObserved(status=first.status, deployment=kinds["Deployment"], service=kinds["Service"],
                       configmap=kinds["ConfigMap"], poddisruptionbudget=kinds["PodDisruptionBudget"])
    return obs, first.status


def test_first_reconcile_creates_the_four_children_with_owner_references() -> None:
    plan = plan_isvc(parse_isvc(make_isvc()), IsvcObserved(), FILES, PlanConfig(), NOW)
    assert sorted((w.kind, w.action) for w in plan.writes) == [
        ("ConfigMap", "create"), ("Deployment", "create"), ("PodDisruptionBudget", "create"), ("Service", "create")]
    for w in plan.writes:
        (ref,) = w.body["metadata"]["ownerReferences"]
        assert ref["uid"] == "u-1" and ref["controller"] is True
        assert w.body["metadata"]["labels"]["app.kubernetes.io/instance"] == "vc"
    dep = next(w.body for w in plan.writes if w.kind == "Deployment")
    assert dep["spec"]["replicas"] == 2  # Predictive without an autoscaler decision holds minReplicas.
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "nvidia-l4"}
    (c,) = pod["containers"]
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "1"
    assert c["readinessProbe"]["exec"]["command"][-1] == "--model=multimodal"
    assert c["securityContext"]["readOnlyRootFilesystem"] is True
    assert dep["spec"]["strategy"]["rollingUpdate"] == {"maxSurge": 1, "maxUnavailable": 0}


@pytest.mark.parametrize("scaling", [{"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 1},
                                     {"mode": "Predictive", "minReplicas": 2, "maxReplicas": 6}],
                         ids=["one-replica", "predictive-2-6"])
@pytest.mark.parametrize("gateway", [False, True], ids=["direct", "gateway"])
def test_the_replicas_get_a_disruption_budget_that_evicts_one_at_a_time_and_never_blocks_a_drain(
        scaling: dict[str, Any], gateway: bool) -> None:
    """A drain (eviction API) takes one replica at a time, so 2 or more keep a Ready one (issue 21, scenario 1);
    ``maxUnavailable`` rather than ``minAvailable`` so that one replica is evicted too instead of blocking the
    drain forever, and a replica that is not Ready never blocks it."""
    plan = plan_isvc(parse_isvc(make_isvc(scaling=scaling, gateway={"enabled": gateway})), IsvcObserved(), FILES,
                     PlanConfig(), NOW)
    (pdb,) = [w for w in plan.writes if w.kind == "PodDisruptionBudget" and w.name == "vc"]
    assert pdb.action == "create"
    assert pdb.body["spec"] == {"maxUnavailable": 1, "unhealthyPodEvictionPolicy": "AlwaysAllow",
                                "selector": {"matchLabels": {"modalscale.io/inferenceservice": "vc"}}}
    (ref,) = pdb.body["metadata"]["ownerReferences"]
    assert ref["uid"] == "u-1" and ref["controller"] is True  # deleted with the InferenceService


def test_a_changed_disruption_budget_is_repaired_and_only_it_is_written() -> None:
    obs, _ = converge(make_isvc())
    assert obs.poddisruptionbudget is not None
    obs.poddisruptionbudget["spec"] = {"minAvailable": 2, "selector": {"matchLabels": {"app": "other"}}}
    (w,) = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW).writes
    assert (w.kind, w.action, w.name) == ("PodDisruptionBudget", "patch", "vc")
    assert w.body["spec"]["maxUnavailable"] == 1


def test_second_reconcile_with_nothing_changed_plans_zero_writes() -> None:
    obs, _ = converge(make_isvc())
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert plan.writes == []


def test_labels_and_annotations_added_by_others_are_left_alone() -> None:
    obs, _ = converge(make_isvc())
    obs.deployment["metadata"]["labels"]["team"] = "search"
    obs.deployment["metadata"]["annotations"]["deployment.kubernetes.io/revision"] = "3"
    obs.service["metadata"].setdefault("annotations", {})["prometheus.io/scrape"] = "true"
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert plan.writes == []


def test_edited_image_is_repaired_without_touching_replicas() -> None:
    obs, _ = converge(make_isvc())
    obs.deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "evil/image:latest"
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    (w,) = plan.writes
    assert (w.kind, w.action) == ("Deployment", "patch")
    assert w.body["spec"]["template"]["spec"]["containers"][0]["image"] == "nvcr.io/nvidia/tritonserver:24.10-py3"
    assert "replicas" not in w.body["spec"]


def test_changed_owned_label_is_repaired() -> None:
    obs, _ = converge(make_isvc())
    obs.service["metadata"]["labels"]["app.kubernetes.io/managed-by"] = "helm"
    (w,) = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW).writes
    assert (w.kind, w.body["metadata"]["labels"]["app.kubernetes.io/managed-by"]) == ("Service", "modalscale-operator")


def test_deleted_service_is_recreated() -> None:
    obs, _ = converge(make_isvc())
    obs.service = None
    (w,) = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW).writes
    assert (w.kind, w.action) == ("Service", "create")


def test_hand_scaled_deployment_is_restored_once_and_reported_as_conflict() -> None:
    obs, _ = converge(make_isvc())
    obs.deployment["spec"]["replicas"] = 5  # kubectl scale deployment vc --replicas=5
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    (w,) = plan.writes
    assert w.body["spec"]["replicas"] == 2
    assert w.body["metadata"]["annotations"][REPLICAS_ANNOTATION] == "2"
    c = get(write_isvc_status(plan.status)["conditions"], R.SCALING_CONFLICT)
    assert (c["status"], c["reason"]) == ("True", R.EXTERNAL_SCALE)
    assert ("Warning", R.EXTERNAL_SCALE) in [(t, r) for t, r, _ in plan.events]
    last = (plan.status.scaling_history or ())[-1]
    assert (last.from_replicas, last.to_replicas) == (5, 2)

    # Restored: the next pass writes nothing, and the condition stays True for the hold time only.
    obs.deployment["spec"]["replicas"] = 2
    obs.status = plan.status
    later = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(conflict_hold_s=60),
                      NOW + dt.timedelta(seconds=30))
    assert later.writes == []
    assert get(write_isvc_status(later.status)["conditions"], R.SCALING_CONFLICT)["status"] == "True"
    after = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(conflict_hold_s=60),
                      NOW + dt.timedelta(seconds=90))
    assert get(write_isvc_status(after.status)["conditions"], R.SCALING_CONFLICT)["status"] == "False"


def test_an_hpa_on_the_deployment_is_reported_and_never_fought() -> None:
    obs, _ = converge(make_isvc())
    obs.deployment["spec"]["replicas"] = 4
    obs.foreign_autoscalers = ["vc-hpa"]
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert plan.writes == []
    c = get(write_isvc_status(plan.status)["conditions"], R.SCALING_CONFLICT)
    assert (c["status"], c["reason"]) == ("True", R.FOREIGN_AUTOSCALER) and "vc-hpa" in c["message"]


def test_fixed_mode_writes_spec_replicas_and_other_modes_explain_kubectl_scale() -> None:
    obs, _ = converge(make_isvc())
    fixed = make_isvc(scaling={"mode": "Fixed", "replicas": 4, "minReplicas": 1, "maxReplicas": 6})
    (w,) = plan_isvc(parse_isvc(fixed), obs, FILES, PlanConfig(), NOW).writes
    assert w.body["spec"]["replicas"] == 4

    scaled = make_isvc(scaling={"mode": "Predictive", "replicas": 3, "minReplicas": 2, "maxReplicas": 6})
    plan = plan_isvc(parse_isvc(scaled), obs, FILES, PlanConfig(), NOW)
    assert plan.writes == []
    c = get(write_isvc_status(plan.status)["conditions"], R.SCALING_CONFLICT)
    assert (c["status"], c["reason"]) == ("True", R.SCALE_IGNORED_IN_MODE)
    assert "Fixed" in c["message"]


def test_ready_is_true_only_when_enough_replicas_are_ready_and_none_fail() -> None:
    obs, _ = converge(make_isvc())
    ready = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert get(write_isvc_status(ready.status)["conditions"], R.READY)["status"] == "True"
    assert (ready.status.ready_replicas, ready.status.desired_replicas) == (2, 2)

    obs.pods = [{"metadata": {"name": "vc-abc"}, "status": {"phase": "Pending", "conditions": [
        {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
         "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}}]
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    c = get(write_isvc_status(plan.status)["conditions"], R.READY)
    assert (c["status"], c["reason"]) == ("False", R.UNSCHEDULABLE)
    assert "Insufficient nvidia.com/gpu" in c["message"]
    assert ("Warning", R.UNSCHEDULABLE) in [(t, r) for t, r, _ in plan.events]

    obs.pods = [{"metadata": {"name": "vc-def"}, "status": {"phase": "Running", "containerStatuses": [
        {"name": "triton", "ready": False, "restartCount": 4,
         "state": {"waiting": {"reason": "CrashLoopBackOff", "message": "back-off 40s"}}}]}}]
    c = get(plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW).status.conditions, R.READY)
    assert (c["status"], c["reason"]) == ("False", R.CRASH_LOOP)


def test_pods_the_deployment_cannot_create_are_degraded_not_healthy() -> None:
    """Found by a new-user audit (6 Dec 2026): under a ResourceQuota of 0 GPUs (or an image with a leading space)
    the ReplicaSet logged FailedCreate and the Deployment said ReplicaFailure=True, while the InferenceService said
    Degraded=False Healthy "no failing pods" (there were none: none could be created)."""
    obs, _ = converge(make_isvc())
    obs.pods = []
    obs.deployment["status"]["conditions"] = [
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": 'pods "vc-7d9-x" is forbidden: exceeded quota: q, requested: requests.nvidia.com/gpu=1'}]
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    conditions = write_isvc_status(plan.status)["conditions"]
    for type_, status in ((R.DEGRADED, "True"), (R.READY, "False")):
        c = get(conditions, type_)
        assert (c["status"], c["reason"]) == (status, R.FAILED_CREATE)
        assert "Deployment vc cannot create pods: FailedCreate: pods" in c["message"] and "quota" in c["message"]
    assert ("Warning", R.FAILED_CREATE) in [(t, r) for t, r, _ in plan.events]


@pytest.mark.parametrize("waiting", ["ErrImageNeverPull", "ImagePullBackOff", "ErrImagePull", "InvalidImageName",
                                     "ImageInspectError", "ErrRegistryUnavailable"])
def test_a_pod_waiting_on_its_image_gives_its_real_reason_in_ready_false(waiting: str) -> None:
    # A real kubelet with imagePullPolicy IfNotPresent and the image not imported: the pod waits forever.
    obs, _ = converge(make_isvc())
    obs.pods = [{"metadata": {"name": "vc-img"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "triton", "ready": False, "restartCount": 0, "image": "modalscale/runtime-cpu:0.1.0",
         "state": {"waiting": {"reason": waiting,
                               "message": 'Container image "modalscale/runtime-cpu:0.1.0" is not present'}}}]}}]
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    c = get(write_isvc_status(plan.status)["conditions"], R.READY)
    assert (c["status"], c["reason"]) == ("False", R.IMAGE_PULL)
    assert f"pod vc-img container triton: {waiting}: Container image" in c["message"]
    assert ("Warning", R.IMAGE_PULL) in [(t, r) for t, r, _ in plan.events]


def test_a_pod_still_creating_its_container_is_not_a_problem() -> None:
    obs, _ = converge(make_isvc())
    obs.pods = [{"metadata": {"name": "vc-new"}, "status": {"phase": "Pending", "containerStatuses": [
        {"name": "triton", "ready": False, "state": {"waiting": {"reason": "ContainerCreating"}}}]}}]
    c = get(plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW).status.conditions, R.READY)
    assert c["reason"] not in (R.IMAGE_PULL, R.CRASH_LOOP)


def test_last_transition_time_moves_only_when_status_flips() -> None:
    obs, status = converge(make_isvc())
    first = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    obs.status = first.status
    second = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW + dt.timedelta(minutes=5))
    assert second.status == first.status
    assert second.events == []


def test_missing_model_configmap_is_refused_by_field() -> None:
    body = make_isvc(model={"source": "ConfigMap", "name": "cap", "configMap": {"name": "nope"}})
    with pytest.raises(ModelReferenceError) as info:
        plan_isvc(parse_isvc(body), IsvcObserved(user_configmap_keys=None), {}, PlanConfig(), NOW)
    assert info.value.field == "spec.model.configMap.name"


@pytest.mark.parametrize("spec,field", [
    ({"scaling": {"mode": "Fixed"}}, "spec.scaling.replicas"),
    ({"scaling": {"minReplicas": 4, "maxReplicas": 2}}, "spec.scaling.minReplicas"),
    ({"resources": {"gpu": {"count": 2}}}, "spec.resources.gpu.type"),
    ({"resources": {"cpu": "lots"}}, "spec.resources.cpu"),
], ids=["fixed-needs-replicas", "min-above-max", "gpu-type", "cpu-quantity"])
def test_invalid_spec_names_the_field(spec: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(make_isvc(**spec))
    assert info.value.field == field


def test_quantities_compare_by_value_in_drift_detection() -> None:
    assert is_derivative({"resources": {"requests": {"cpu": "2"}}}, {"resources": {"requests": {"cpu": "2000m"}}})
    assert not is_derivative({"resources": {"requests": {"cpu": "2"}}}, {"resources": {"requests": {"cpu": "1"}}})
    assert is_derivative({"containers": [{"name": "a", "image": "x"}]},
                         {"containers": [{"name": "sidecar"}, {"name": "a", "image": "x", "tty": False}]})


def test_budget_cap_is_the_tightest_annotation_and_is_applied_last_even_in_fixed_mode() -> None:
    from modalscale.api.annotations import budget_cap

    ann = {"budget.modalscale.io/cap-aaaaaaaaaa": '{"maxReplicas": 3, "policy": "a/p1", "action": "CapReplicas"}',
           "budget.modalscale.io/cap-bbbbbbbbbb": '{"maxReplicas": 1, "policy": "b/p2", "action": "ScaleDown"}',
           "budget.modalscale.io/cap-cccccccccc": "not json", "team": "x"}
    assert budget_cap(ann) == (1, "b/p2")
    assert budget_cap({}) == (None, None)

    obs, _ = converge(make_isvc(scaling={"mode": "Fixed", "replicas": 4, "minReplicas": 2, "maxReplicas": 6}))
    obs.budget_cap_replicas, obs.budget_cap_policy = 1, "b/p2"
    fixed = make_isvc(scaling={"mode": "Fixed", "replicas": 4, "minReplicas": 2, "maxReplicas": 6})
    plan = plan_isvc(parse_isvc(fixed), obs, FILES, PlanConfig(), NOW)
    (w,) = plan.writes
    assert w.body["spec"]["replicas"] == 1  # below minReplicas too: the budget cap is never exceeded
    c = get(write_isvc_status(plan.status)["conditions"], R.BUDGET_LIMITED)
    assert (c["status"], c["reason"]) == ("True", R.CAPPED_BY_BUDGET) and "b/p2" in c["message"]
    assert write_isvc_status(plan.status)["scalingHistory"][-1]["reason"] == R.CAPPED_BY_BUDGET


UNREADABLE_CAP = {"budget.modalscale.io/cap-cccccccccc": '{"maxReplicas": "two", "policy": "a/p1"}'}
READABLE_CAP = {"budget.modalscale.io/cap-aaaaaaaaaa":
                '{"maxReplicas": 2, "policy": "a/p1", "action": "CapReplicas"}'}


@pytest.mark.parametrize("recorded", [6, 1], ids=["scale-up", "scale-down"])
def test_an_unreadable_cap_annotation_holds_the_current_count_and_is_named_in_budget_limited(recorded: int) -> None:
    """A cap that cannot be read may be lower than the count (no scale-up past it) and is no reason to scale down:
    before, it was skipped and the record's 6 was written (fail open)."""
    from modalscale.operator.isvc.plan import observe_budget_cap

    body = make_isvc(scaling={"mode": "Predictive", "minReplicas": 1, "maxReplicas": 6})
    obs, _ = converge(body)
    obs.deployment["spec"]["replicas"] = 3  # type: ignore[index]
    obs.status = replace(obs.status, desired_replicas=recorded)
    observe_budget_cap(obs, UNREADABLE_CAP)
    assert (obs.budget_cap_replicas, obs.budget_cap_policy) == (None, None)
    (message,) = obs.budget_cap_unreadable
    assert "budget.modalscale.io/cap-cccccccccc" in message
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW)
    writes = [w for w in plan.writes if w.kind == "Deployment"]
    if recorded > 3:
        (w,) = writes
        assert w.body["spec"]["replicas"] == 3  # the current count, not the record's 6
    else:
        assert [w.body["spec"]["replicas"] for w in writes] == [1]  # a scale-down the record asks for still goes
    c = get(write_isvc_status(plan.status)["conditions"], R.BUDGET_LIMITED)
    assert (c["status"], c["reason"]) == ("True", R.BUDGET_CAP_UNREADABLE)
    assert "budget.modalscale.io/cap-cccccccccc" in c["message"] and "maxReplicas" in c["message"]


def test_a_readable_cap_below_the_count_still_applies_beside_an_unreadable_one() -> None:
    from modalscale.operator.isvc.plan import observe_budget_cap

    body = make_isvc(scaling={"mode": "Predictive", "minReplicas": 1, "maxReplicas": 6})
    obs, _ = converge(body)
    obs.deployment["spec"]["replicas"] = 3  # type: ignore[index]
    obs.status = replace(obs.status, desired_replicas=5)
    observe_budget_cap(obs, {**UNREADABLE_CAP, **READABLE_CAP})
    assert (obs.budget_cap_replicas, obs.budget_cap_policy) == (2, "a/p1")
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW)
    (w,) = [w for w in plan.writes if w.kind == "Deployment"]
    assert w.body["spec"]["replicas"] == 2
    c = get(write_isvc_status(plan.status)["conditions"], R.BUDGET_LIMITED)
    assert c["reason"] == R.BUDGET_CAP_UNREADABLE and "BudgetPolicy a/p1 caps replicas at 2" in c["message"]
    observe_budget_cap(obs, READABLE_CAP)  # the annotation rewritten: the readable cap alone, no hold
    assert (obs.budget_cap_replicas, obs.budget_cap_policy, obs.budget_cap_unreadable) == (2, "a/p1", ())
    observe_budget_cap(obs, {})
    assert (obs.budget_cap_replicas, obs.budget_cap_policy) == (None, None)


def test_a_new_service_under_an_unreadable_cap_starts_at_zero_and_is_not_ready() -> None:
    """An annotation that arrives with the manifest (a restore, a copied ``-o yaml``): the Deployment is made at 0
    and ``Ready=False``/``BudgetCapUnreadable`` says why, not ``Ready=True``/``ScaledToZero``."""
    from modalscale.operator.isvc.plan import observe_budget_cap

    body = make_isvc(scaling={"mode": "Fixed", "replicas": 3, "minReplicas": 1, "maxReplicas": 6})
    spec = parse_isvc(body)
    first_obs = IsvcObserved()
    observe_budget_cap(first_obs, UNREADABLE_CAP)
    first = plan_isvc(spec, first_obs, FILES, PlanConfig(), NOW)
    kinds = {w.kind: apiserver_view(w.body) for w in first.writes}
    assert kinds["Deployment"]["spec"]["replicas"] == 0
    obs = IsvcObserved(status=first.status, deployment=kinds["Deployment"], service=kinds["Service"],
                       configmap=kinds["ConfigMap"], poddisruptionbudget=kinds["PodDisruptionBudget"])
    observe_budget_cap(obs, UNREADABLE_CAP)
    plan = plan_isvc(spec, obs, FILES, PlanConfig(), NOW)
    ready = get(write_isvc_status(plan.status)["conditions"], R.READY)
    assert (ready["status"], ready["reason"]) == ("False", R.BUDGET_CAP_UNREADABLE), ready
    assert [w for w in plan.writes if w.kind == "Deployment"] == []
    observe_budget_cap(obs, {})  # deleted: the spec's 3
    (w,) = [w for w in plan_isvc(spec, obs, FILES, PlanConfig(), NOW).writes if w.kind == "Deployment"]
    assert w.body["spec"]["replicas"] == 3


def test_a_cap_that_becomes_unreadable_posts_an_event_though_budget_limited_stays_true() -> None:
    from modalscale.operator.isvc.plan import observe_budget_cap

    body = make_isvc(scaling={"mode": "Fixed", "replicas": 3, "minReplicas": 1, "maxReplicas": 6})
    obs, _ = converge(body)
    observe_budget_cap(obs, READABLE_CAP)
    capped = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW)
    assert get(write_isvc_status(capped.status)["conditions"], R.BUDGET_LIMITED)["reason"] == R.CAPPED_BY_BUDGET
    obs.status = capped.status
    observe_budget_cap(obs, UNREADABLE_CAP)  # the policy's own annotation edited by hand
    plan = plan_isvc(parse_isvc(body), obs, FILES, PlanConfig(), NOW)
    assert [(t, r) for t, r, _ in plan.events if r == R.BUDGET_CAP_UNREADABLE] == [("Warning", R.BUDGET_CAP_UNREADABLE)]


def test_cost_per_hour_counts_only_pods_holding_resources() -> None:
    from decimal import Decimal

    obs, _ = converge(make_isvc())
    obs.replica_usd_per_hour = Decimal("1.25")
    obs.pods = [
        {"metadata": {"name": "a"}, "spec": {"nodeName": "n0"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "b"}, "spec": {"nodeName": "n1"}, "status": {"phase": "Running"}},
        {"metadata": {"name": "c"}, "spec": {}, "status": {"phase": "Pending"}},  # not scheduled: no GPU held
        {"metadata": {"name": "d", "deletionTimestamp": "2026-11-30T11:00:00Z"}, "spec": {"nodeName": "n0"},
         "status": {"phase": "Running"}},
    ]
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert write_isvc_status(plan.status)["costUSDPerHour"] == "2.5000"
    obs.replica_usd_per_hour = None
    assert plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW).status.cost_usd_per_hour is None


def _decision(replicas: int, reason: Reason = Reason.SCALE_UP_FOR_SLO,
              message: str = "p95 410 ms > 300 ms") -> Decision:
    return Decision(replicas, True, reason, message, {}, ScalerState(), ScalingMode.PREDICTIVE)


def test_an_autoscaler_decision_is_planned_directly_as_the_deployments_replicas_only() -> None:
    obs, _ = converge(make_isvc())
    obs.service, obs.configmap = None, None  # missing children are the full pass's business, not a scale pass's
    obs.deployment["spec"]["template"]["spec"]["containers"][0]["image"] = "someone/else:1"
    plan = plan_isvc(parse_isvc(make_isvc()), obs, None, PlanConfig(), NOW, decision=_decision(5))
    (w,) = plan.writes
    assert (w.kind, w.action) == ("Deployment", "patch")
    assert w.body == {"metadata": {"annotations": {REPLICAS_ANNOTATION: "5"}}, "spec": {"replicas": 5}}
    assert write_isvc_status(plan.status)["desiredReplicas"] == 5 and plan.status.cost_usd_per_hour is None
    (entry,) = write_isvc_status(plan.status)["scalingHistory"]
    assert (entry["from"], entry["to"], entry["reason"], entry["message"]) == (2, 5, "ScaleUpForSLO",
                                                                             "p95 410 ms > 300 ms")


def test_a_direct_decision_plans_what_the_same_decision_read_back_from_status_plans() -> None:
    obs, status = converge(make_isvc())
    spec = parse_isvc(make_isvc())
    recorded = as_status({**write_isvc_status(status), "desiredReplicas": 4,
                          "autoscaler": {"reason": "ScaleUpForSLO", "message": "p95 410 ms > 300 ms"}})
    via_status = plan_isvc(spec, IsvcObserved(**{**obs.__dict__, "status": recorded}), FILES, PlanConfig(), NOW)
    direct = plan_isvc(spec, IsvcObserved(**{**obs.__dict__, "status": recorded}), None, PlanConfig(), NOW,
                       decision=_decision(4))
    assert direct.writes == via_status.writes and direct.status == via_status.status
    assert direct.events == via_status.events


def test_cost_per_hour_includes_the_ready_gateway_pods_at_their_own_price() -> None:
    """Issue 19: a Kubecost user expects the gateway's pods in the service's spend (CPU and memory requests at the
    catalog's on-demand prices, ``IsvcObserved.gateway_usd_per_pod_hour``)."""
    from decimal import Decimal

    obs, _ = converge(make_isvc())
    obs.replica_usd_per_hour = Decimal("1.25")
    obs.gateway_usd_per_pod_hour = Decimal("0.00422035")
    obs.pods = [{"metadata": {"name": n}, "spec": {"nodeName": "n0"}, "status": {"phase": "Running"}}
                for n in ("a", "b")]
    obs.gateway_objects["Deployment"] = {  # one not ready yet
        "metadata": {"name": "vc-gateway", "ownerReferences": [{"uid": "u-1", "controller": True}]},
        "status": {"replicas": 3, "readyReplicas": 2}}
    plan = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert plan.status.cost_usd_per_hour == Decimal("2.5084")  # 2 x 1.25 + 2 x 0.00422035
    obs.gateway_objects["Deployment"] = None  # no gateway (disabled, or not created yet): replicas only
    replicas_only = plan_isvc(parse_isvc(make_isvc()), obs, FILES, PlanConfig(), NOW)
    assert replicas_only.status.cost_usd_per_hour == Decimal("2.5000")
