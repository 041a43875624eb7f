"""The request gateway's objects on the real control plane (issue 19; KWOK nodes only, no real node: the gateway
pods are only marked Running there, so this checks objects, ownership, the Service switch and quiet reruns, not
the gateway program)."""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client

from modalscale.devenv.cluster import fake_node_placement
from modalscale.devenv.kube import wait_for
from tests.integration.operator.isvc_helpers import create, get, make_isvc, patch_spec, wait_condition


def _objects(api: Any, ns: str, name: str) -> dict[str, Any]:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    rbac, policy, net = client.RbacAuthorizationV1Api(api), client.PolicyV1Api(api), client.NetworkingV1Api(api)
    gw, rs = f"{name}-gateway", f"{name}-replicas"
    return {
        "Deployment/gateway": apps.read_namespaced_deployment(gw, ns),
        "Deployment/replicas": apps.read_namespaced_deployment(name, ns),
        "Service": core.read_namespaced_service(name, ns),
        "Service/replicas": core.read_namespaced_service(rs, ns),
        "ServiceAccount": core.read_namespaced_service_account(gw, ns),
        "Role": rbac.read_namespaced_role(gw, ns),
        "RoleBinding": rbac.read_namespaced_role_binding(gw, ns),
        "PodDisruptionBudget": policy.read_namespaced_pod_disruption_budget(gw, ns),
        "NetworkPolicy": net.read_namespaced_network_policy(rs, ns),
    }


def test_gateway_enabled_puts_owned_objects_in_front_of_the_replicas_and_reruns_write_nothing(
        api: Any, operator: Any, namespace: str) -> None:
    isvc = create(api, namespace, make_isvc("gw", gateway={"enabled": True}, placement=fake_node_placement()))
    wait_condition(api, namespace, "gw", "GatewayReady", "True", timeout_s=90)
    wait_condition(api, namespace, "gw", "Ready", "True", timeout_s=60)
    objs = _objects(api, namespace, "gw")
    for kind, obj in objs.items():
        (ref,) = obj.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid, ref.controller) == ("InferenceService", "gw", isvc["metadata"]["uid"],
                                                                 True), kind
    assert objs["Service"].spec.selector == {"modalscale.io/gateway": "gw"}
    assert objs["Service/replicas"].spec.selector == {"modalscale.io/inferenceservice": "gw"}
    assert objs["NetworkPolicy"].spec.pod_selector.match_labels == {"modalscale.io/inferenceservice": "gw"}
    assert objs["Deployment/gateway"].spec.template.spec.containers[0].command == ["modalscale", "gateway"]
    core = client.CoreV1Api(api)
    gateway_pods = core.list_namespaced_pod(namespace, label_selector="modalscale.io/gateway=gw").items
    replica_pods = core.list_namespaced_pod(namespace, label_selector="modalscale.io/inferenceservice=gw").items
    assert len(gateway_pods) == 2 and len(replica_pods) == 2
    assert not {p.metadata.name for p in gateway_pods} & {p.metadata.name for p in replica_pods}
    # status is the world the last reconcile saw: the second gateway pod's readiness reaches it on the next one
    status = wait_for(lambda: (s := get(api, namespace, "gw")["status"])["gateway"]["readyReplicas"] == 2 and s, 60,
                      "status.gateway.readyReplicas 2")
    assert status["url"] == f"http://gw.{namespace}.svc.cluster.local:8000"

    time.sleep(2 * 2.0)  # let the rollout settle

    def versions() -> list[str]:
        return [get(api, namespace, "gw")["metadata"]["resourceVersion"],
                *(o.metadata.resource_version for o in _objects(api, namespace, "gw").values())]

    def our_writes() -> int:
        return operator.log().count(f"namespace={namespace} ")

    before_versions, before_writes = versions(), our_writes()
    reconciles_before = operator.metric("modalscale_reconciles_total", result="ok")
    time.sleep(4 * 2.0)  # four resync periods
    assert operator.metric("modalscale_reconciles_total", result="ok") >= reconciles_before + 3
    assert our_writes() == before_writes
    assert versions() == before_versions

    # Turned off: the Service selects the replicas again and the gateway's objects are deleted.
    patch_spec(api, namespace, "gw", {"gateway": {"enabled": False}})
    apps = client.AppsV1Api(api)

    def switched_back() -> bool:
        svc = core.read_namespaced_service("gw", namespace)
        gone = not [d for d in apps.list_namespaced_deployment(namespace).items if d.metadata.name == "gw-gateway"]
        nps = client.NetworkingV1Api(api).list_namespaced_network_policy(namespace).items
        return svc.spec.selector == {"modalscale.io/inferenceservice": "gw"} and gone and not nps

    wait_for(switched_back, 60, "Service gw back on the replicas and the gateway's objects deleted")
    # The status write follows the deletes in the same pass (a read right after them once came 90 ms early).
    wait_for(lambda: "gateway" not in get(api, namespace, "gw")["status"], 30, "status.gateway removed")


def test_an_activation_request_at_zero_replicas_starts_one_at_once(api: Any, operator: Any, namespace: str) -> None:
    import datetime as dt

    from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION

    create(api, namespace, make_isvc("cold", gateway={"enabled": True}, placement=fake_node_placement(),
                                     scaling={"mode": "Predictive", "minReplicas": 0, "maxReplicas": 3,
                                              "scaleToZeroAfterSeconds": 60, "decisionIntervalSeconds": 300}))
    wait_condition(api, namespace, "cold", "Ready", "True", "ScaledToZero", timeout_s=60)
    apps = client.AppsV1Api(api)
    assert apps.read_namespaced_deployment("cold", namespace).spec.replicas == 0
    requested = dt.datetime.now(dt.UTC).replace(microsecond=0)
    client.CustomObjectsApi(api).patch_namespaced_custom_object(
        GROUP, VERSION, namespace, PLURAL, "cold",
        {"metadata": {"annotations": {"modalscale.io/activation-requested-at": requested.isoformat()}}})
    started = time.monotonic()
    wait_for(lambda: apps.read_namespaced_deployment("cold", namespace).spec.replicas == 1, 20,
             "Deployment cold at 1 replica after the activation request")
    took_s = time.monotonic() - started
    assert took_s < 10, f"activation took {took_s:.1f} s: it must not wait for the 300 s decision interval"
    status = get(api, namespace, "cold")["status"]
    assert status["desiredReplicas"] == 1
    assert status["autoscaler"]["reason"] == "Activated"
    assert [(h["from"], h["to"], h["reason"]) for h in status["scalingHistory"]][-1] == (0, 1, "Activated")
    # Level-based: the reconcile timer (2 s) and the held request leave it at 1, not flapping back to 0.
    time.sleep(3.0)
    assert apps.read_namespaced_deployment("cold", namespace).spec.replicas == 1


def test_both_disruption_budgets_changed_to_min_available_are_repaired_and_pods_leave_a_lost_node_in_30_s(
        api: Any, operator: Any, namespace: str) -> None:
    """The real API server: it refuses a PodDisruptionBudget with both minAvailable and maxUnavailable, so the
    repair of one changed to minAvailable (and to another selector) must null the other field and replace the
    selector; and the DefaultTolerationSeconds plugin adds no 300 s toleration beside the operator's own 30 s."""
    create(api, namespace, make_isvc("pdb", gateway={"enabled": True}, placement=fake_node_placement()))
    wait_condition(api, namespace, "pdb", "GatewayReady", "True", timeout_s=90)
    policy, core = client.PolicyV1Api(api), client.CoreV1Api(api)
    selectors = {"pdb": {"modalscale.io/inferenceservice": "pdb"}, "pdb-gateway": {"modalscale.io/gateway": "pdb"}}
    for name, labels in selectors.items():
        policy.patch_namespaced_pod_disruption_budget(name, namespace, {"spec": {
            "maxUnavailable": None, "minAvailable": 1, "selector": {"matchLabels": {**labels, "tier": "x"}}}},
            _content_type="application/merge-patch+json")

    def repaired(name: str) -> bool:
        spec = policy.read_namespaced_pod_disruption_budget(name, namespace).spec
        return (spec.max_unavailable == 1 and spec.min_available is None
                and spec.selector.match_labels == selectors[name] and not spec.selector.match_expressions)

    for name in selectors:
        wait_for(lambda name=name: repaired(name), 60, f"PodDisruptionBudget {name} back to maxUnavailable: 1")
    for selector in ("modalscale.io/inferenceservice=pdb", "modalscale.io/gateway=pdb"):
        pods = core.list_namespaced_pod(namespace, label_selector=selector).items
        assert pods, selector
        for p in pods:
            lost = {t.key: t.toleration_seconds for t in p.spec.tolerations or []
                    if t.key in ("node.kubernetes.io/unreachable", "node.kubernetes.io/not-ready")}
            assert lost == {"node.kubernetes.io/unreachable": 30, "node.kubernetes.io/not-ready": 30}, p.metadata.name
