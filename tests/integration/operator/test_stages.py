"""The staged layout (issue 24, ``spec.stages``) against the real control plane (KWOK nodes): the image encoder pool's
Deployment, Service, ConfigMap, PodDisruptionBudget and NetworkPolicy owned by the InferenceService beside the front
pool's, the front pool addressed at the encoder Service's ClusterIP, status per stage, one ``kubectl get msvc`` row, a
rerun that writes nothing, and removing ``spec.stages`` taking the pool away after the front rolled back to one
piece; a BudgetPolicy cap over both pools taking the costlier stage down first."""

from __future__ import annotations

import subprocess
import time
from decimal import Decimal
from typing import Any

from kubernetes import client

from modalscale.devenv.kube import wait_for
from tests.integration.operator.isvc_helpers import (
    GROUP,
    PLURAL,
    VERSION,
    condition,
    create,
    get,
    make_isvc,
    wait_condition,
)

ENCODER = {"imageEncoder": {"minReplicas": 2, "maxReplicas": 4,
                            "resources": {"cpu": "2", "memory": "3Gi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                            "runtime": {"instanceCount": 2, "maxBatchSize": 32}}}


def _stage(obj: dict[str, Any], name: str) -> dict[str, Any] | None:
    return next((s for s in (obj.get("status") or {}).get("stages") or [] if s["name"] == name), None)


def test_a_staged_service_runs_its_encoder_pool_apart_and_removing_stages_takes_it_away(
        api: Any, operator: Any, namespace: str, cluster: Any) -> None:
    started = time.monotonic()
    isvc = create(api, namespace, make_isvc("st", stages=ENCODER))
    wait_condition(api, namespace, "st", "Ready", "True", timeout_s=90)
    wait_condition(api, namespace, "st", "ImageEncoderReady", "True")
    ready_s = time.monotonic() - started
    apps, core, policy = client.AppsV1Api(api), client.CoreV1Api(api), client.PolicyV1Api(api)
    networking = client.NetworkingV1Api(api)

    front, encoder = apps.read_namespaced_deployment("st", namespace), apps.read_namespaced_deployment(
        "st-image-encoder", namespace)
    enc_svc = core.read_namespaced_service("st-image-encoder", namespace)
    children = [front, encoder, core.read_namespaced_service("st", namespace), enc_svc,
                core.read_namespaced_config_map("st-model-repo", namespace),
                core.read_namespaced_config_map("st-image-encoder-model-repo", namespace),
                policy.read_namespaced_pod_disruption_budget("st-image-encoder", namespace),
                networking.read_namespaced_network_policy("st-image-encoder", namespace)]
    for obj in children:
        (ref,) = obj.metadata.owner_references
        uid = isvc["metadata"]["uid"]
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("InferenceService", "st", uid, True)
    for obj in (*children[1::2], children[-1]):
        assert obj.metadata.labels["modalscale.io/stage"] == "image-encoder", obj.metadata.name
    # Only the front pods reach the pool's gRPC port (the scraper its metrics port).
    serving = children[-1].spec.ingress[0]
    assert children[-1].spec.pod_selector.match_labels == {"modalscale.io/image-encoder": "st"}
    assert [p.port for p in serving.ports] == [8001]
    assert [f.pod_selector.match_labels for f in serving._from] == [{"modalscale.io/inferenceservice": "st"}]
    # The front pool calls the pool at its Service's ClusterIP (no cluster DNS on the local node).
    annotations = front.spec.template.metadata.annotations
    assert annotations["modalscale.io/image-encoder-address"] == f"{enc_svc.spec.cluster_ip}:8001"
    assert front.spec.template.metadata.labels["modalscale.io/stage"] == "front"
    (c,) = encoder.spec.template.spec.containers
    assert c.resources.requests == {"cpu": "2", "memory": "3Gi", "nvidia.com/gpu": "1"}
    assert c.readiness_probe._exec.command[-1] == "--model=image_encoder"
    pods = core.list_namespaced_pod(namespace, label_selector="modalscale.io/image-encoder=st").items
    assert len(pods) == 2 and all("modalscale.io/inferenceservice" not in p.metadata.labels for p in pods)
    assert len(core.list_namespaced_pod(namespace, label_selector="modalscale.io/inferenceservice=st").items) == 2

    status = get(api, namespace, "st")["status"]
    front_stage, encoder_stage = _stage({"status": status}, "front"), _stage({"status": status}, "image-encoder")
    assert front_stage is not None and (front_stage["replicas"], front_stage["readyReplicas"],
                                        front_stage["desiredReplicas"]) == (2, 2, 2)
    assert encoder_stage is not None and (encoder_stage["readyReplicas"], encoder_stage["desiredReplicas"],
                                          encoder_stage["reason"]) == (2, 2, "NotAutoscaled")
    assert encoder_stage["address"] == f"{enc_svc.spec.cluster_ip}:8001"

    from modalscale.devenv.binaries import ensure_binaries

    out = subprocess.run([str(ensure_binaries(lambda _m: None).kubectl), f"--kubeconfig={cluster.kubeconfig}",
                          "-n", namespace, "get", "msvc"], capture_output=True, text=True, check=True).stdout
    assert len(out.splitlines()) == 2 and out.splitlines()[1].split()[:3] == ["st", "True", "2"]

    # A rerun with nothing changed writes nothing (children, pool and status alike).
    time.sleep(2 * 2.0)  # let the rollouts' status flips settle

    def versions() -> list[str]:
        return [get(api, namespace, "st")["metadata"]["resourceVersion"],
                *(o.metadata.resource_version for o in (
                    apps.read_namespaced_deployment("st", namespace),
                    apps.read_namespaced_deployment("st-image-encoder", namespace),
                    core.read_namespaced_service("st-image-encoder", namespace),
                    core.read_namespaced_config_map("st-image-encoder-model-repo", namespace),
                    networking.read_namespaced_network_policy("st-image-encoder", namespace)))]

    before_versions, before_writes = versions(), operator.log().count(f"namespace={namespace} ")
    reconciles = operator.metric("modalscale_reconciles_total", result="ok")
    time.sleep(4 * 2.0)  # four resync periods
    assert operator.metric("modalscale_reconciles_total", result="ok") >= reconciles + 3
    assert operator.log().count(f"namespace={namespace} ") == before_writes
    assert versions() == before_versions

    # Removing spec.stages: the front rolls back to one piece first, then the pool and its objects go.
    removed = time.monotonic()
    client.CustomObjectsApi(api).patch_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, "st",
                                                                {"spec": {"stages": None}})

    def pool_gone() -> bool:
        left = [o for o in (
            apps.list_namespaced_deployment(namespace, field_selector="metadata.name=st-image-encoder").items,
            core.list_namespaced_service(namespace, field_selector="metadata.name=st-image-encoder").items,
            core.list_namespaced_config_map(
                namespace, field_selector="metadata.name=st-image-encoder-model-repo").items,
            policy.list_namespaced_pod_disruption_budget(
                namespace, field_selector="metadata.name=st-image-encoder").items,
            networking.list_namespaced_network_policy(
                namespace, field_selector="metadata.name=st-image-encoder").items) if o]
        return not left

    wait_for(pool_gone, 120, "the image encoder pool's objects deleted")
    gone_s = time.monotonic() - removed
    template = apps.read_namespaced_deployment("st", namespace).spec.template.metadata
    assert "modalscale.io/stage" not in (template.labels or {})
    assert "modalscale.io/image-encoder-address" not in (template.annotations or {})
    wait_for(lambda: "stages" not in (get(api, namespace, "st").get("status") or {}), 30, "status.stages removed")
    assert condition(get(api, namespace, "st"), "ImageEncoderReady") is None
    wait_condition(api, namespace, "st", "Ready", "True")
    print(f"staged service Ready in {ready_s:.1f} s; the pool gone {gone_s:.1f} s after stages were removed")


def test_a_staged_service_at_its_budget_cap_scales_the_costlier_stage_down_first(
        api: Any, operator: Any, namespace: str) -> None:
    """A BudgetPolicy's CapReplicas bounds both pools together. Front 3 (Fixed) + encoder pool 2 (its minReplicas)
    under capReplicas 4: the encoder replica costs more (2 CPU, 3Gi and an L4 against the front's 1 CPU, 2Gi and an
    L4), so the pool gives up a replica first (3 + 1); the larger-first rule would have cut the front (2 + 2).
    Deleting the policy lifts the cap: 3 + 2 again."""
    from modalscale.costmodel.catalog import ReplicaResources, load_catalog

    catalog = load_catalog()
    front_usd = catalog.price_replica(ReplicaResources.from_quantities("1", "2Gi", 1, "nvidia-l4"), "OnDemand")
    pool_usd = catalog.price_replica(ReplicaResources.from_quantities("2", "3Gi", 1, "nvidia-l4"), "OnDemand")
    assert pool_usd > front_usd
    create(api, namespace, make_isvc("cap", stages=ENCODER, scaling={"mode": "Fixed", "replicas": 3,
                                                                     "minReplicas": 1, "maxReplicas": 6}))
    wait_condition(api, namespace, "cap", "Ready", "True", timeout_s=90)
    apps, custom = client.AppsV1Api(api), client.CustomObjectsApi(api)

    def replicas() -> tuple[int, int]:
        return (apps.read_namespaced_deployment("cap", namespace).spec.replicas,
                apps.read_namespaced_deployment("cap-image-encoder", namespace).spec.replicas)

    assert replicas() == (3, 2)
    # ~4 USD/h burns 0.01 USD (10 % of 0.10) within the enforcement's look-ahead: enforced at the first evaluation.
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "budgetpolicies", {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "BudgetPolicy", "metadata": {"name": "budget"},
        "spec": {"period": "Daily", "limit": {"amount": "0.10", "currency": "USD"}, "forecast": {"enabled": False},
                 "evaluationIntervalSeconds": 1,
                 "thresholds": [{"percent": 10, "actions": ["CapReplicas"], "capReplicas": 4}]}})
    wait_for(lambda: replicas() == (3, 1), 60, "the encoder pool capped to 1, the front kept at 3",
             explain=lambda: f"replicas {replicas()}")

    def capped_status() -> dict[str, Any] | None:
        # The reconcile applies the Deployments, then kopf writes the status: wait for the status of that pass
        # (read at once, it could still be the previous pass's, a race seen once).
        status: dict[str, Any] = get(api, namespace, "cap").get("status") or {}
        encoder = _stage({"status": status}, "image-encoder")
        return status if encoder is not None and encoder.get("reason") == "CappedByBudget" else None

    status = wait_for(capped_status, 30, "status.stages naming the cap over the encoder pool",
                      explain=lambda: f"status {get(api, namespace, 'cap').get('status')}")
    front, encoder = _stage({"status": status}, "front"), _stage({"status": status}, "image-encoder")
    assert front is not None and (front["desiredReplicas"], front["reason"]) == (3, "FixedReplicas")
    assert encoder is not None and (encoder["desiredReplicas"], encoder["reason"]) == (1, "CappedByBudget")
    rule = (f"the image encoder pool ({format(pool_usd.quantize(Decimal('0.0001')).normalize(), 'f')} USD/h a "
            f"replica, the costlier; front pool {format(front_usd.quantize(Decimal('0.0001')).normalize(), 'f')}) "
            f"gives up replicas first, down to 1: front 3 + image encoder 1")
    assert encoder["message"] == f"capped at 4 replica(s) over both stages by BudgetPolicy {namespace}/budget: {rule}"
    budget = condition({"status": status}, "BudgetLimited")
    assert budget is not None and (budget["status"], budget["reason"]) == ("True", "CappedByBudget")
    assert budget["message"] == f"BudgetPolicy {namespace}/budget caps replicas at 4 over both stages: {rule}"

    def enforced() -> list[tuple[str, int]]:
        policy: Any = custom.get_namespaced_custom_object(GROUP, VERSION, namespace, "budgetpolicies", "budget")
        return [(e["name"], e["maxReplicas"]) for e in (policy.get("status") or {}).get("enforcedServices") or []]

    wait_for(lambda: enforced() == [("cap", 4)], 30, "the policy's status.enforcedServices naming the cap",
             explain=lambda: f"enforcedServices {enforced()}")

    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "budgetpolicies", "budget")
    wait_for(lambda: replicas() == (3, 2), 60, "both pools back after the policy was deleted",
             explain=lambda: f"replicas {replicas()}")
    wait_condition(api, namespace, "cap", "BudgetLimited", "False")
