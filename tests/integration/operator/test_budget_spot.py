"""SwitchToSpot on the real control plane: a threshold crossing moves the low-priority service's pods onto Spot KWOK
nodes (label and taint ``karpenter.sh/capacity-type=spot``), the ledger prices them at Spot; then a Spot shortage
(the Spot node cordoned, a Spot pod reclaimed) leaves its replacement Pending and the service falls back to
on-demand, with status, condition and Event saying so.

Real parts: kube-apiserver + etcd + scheduler + KWOK nodes, the ``modalscale operator`` subprocess. KWOK only: the
nodes are fake GPU nodes of a GPU type only this test's services select (nvidia-a100-40gb), so no other test's
pods land on them and cordoning them touches nothing else.
"""

from __future__ import annotations

import datetime as dt
from decimal import Decimal
from typing import Any

import pytest
from kubernetes import client

from modalscale.api.annotations import SpotSwitch, spot_annotation_key
from modalscale.costmodel.catalog import ReplicaResources, load_catalog
from modalscale.devenv.kube import wait_for

from .test_budget import GROUP, VERSION, condition, custom, get_policy, make_policy, wait_policy_events

GPU_TYPE = "nvidia-a100-40gb"
RESOURCES = {"cpu": "64", "memory": "512Gi", "gpu": {"count": 8, "type": GPU_TYPE}}
_REPLICA = ReplicaResources.from_quantities("64", "512Gi", 8, GPU_TYPE)
ON_DEMAND_USD = load_catalog().price_replica(_REPLICA, "OnDemand")  # 27.663712 USD/h
SPOT_USD = load_catalog().price_replica(_REPLICA, "Spot")  # 10.060224 USD/h


@pytest.fixture(scope="module")
def a100_nodes(cluster: Any, api: Any) -> Any:
    """One on-demand and one Spot fake A100 node; the Spot node is uncordoned again afterwards."""
    on_demand = cluster.ensure_gpu_nodes(1, gpus_per_node=64, gpu_type=GPU_TYPE, cpu="1024", memory="16Ti",
                                         prefix="kwok-spot-test-od-")
    spot = cluster.ensure_gpu_nodes(1, gpus_per_node=64, gpu_type=GPU_TYPE, cpu="1024", memory="16Ti",
                                    prefix="kwok-spot-test-spot-", spot=True)
    yield on_demand[0], spot[0]
    client.CoreV1Api(api).patch_node(spot[0], {"spec": {"unschedulable": None}})


def make_isvc(name: str, replicas: int, priority: int) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name},
            "spec": {"resources": RESOURCES, "priority": priority, "gateway": {"enabled": False},  # the replicas only
                     "scaling": {"mode": "Fixed", "replicas": replicas, "minReplicas": 1, "maxReplicas": 4}}}


def pods_of(api: Any, ns: str, name: str) -> list[Any]:
    return client.CoreV1Api(api).list_namespaced_pod(
        ns, label_selector=f"modalscale.io/inferenceservice={name}").items


def running_on(api: Any, ns: str, name: str) -> list[str]:
    """Nodes of the service's running, not terminating pods, sorted."""
    return sorted(p.spec.node_name for p in pods_of(api, ns, name)
                  if p.spec.node_name and not p.metadata.deletion_timestamp and p.status.phase == "Running")


def settled_on(api: Any, ns: str, name: str, node: str, replicas: int) -> bool:
    """All pods of the service run on ``node`` (none pending, none terminating)."""
    pods = pods_of(api, ns, name)
    return len(pods) == replicas and running_on(api, ns, name) == [node] * replicas


def ledger_rate(api: Any, ns: str, policy: str, name: str) -> Decimal | None:
    status = get_policy(api, ns, policy).get("status") or {}
    entry = next((s for s in (status.get("ledger") or {}).get("services") or [] if s["name"] == name), None)
    return Decimal(entry["costUSDPerHour"]) if entry and "costUSDPerHour" in entry else None


def test_a_crossing_moves_the_low_priority_service_to_spot_then_a_spot_shortage_falls_back(
        api: Any, operator: Any, namespace: str, a100_nodes: tuple[str, str]) -> None:
    ns, (od_node, spot_node) = namespace, a100_nodes
    node = client.CoreV1Api(api).read_node(spot_node)
    assert node.metadata.labels["karpenter.sh/capacity-type"] == "spot"

    def taints() -> list[tuple[str, str | None, str]]:
        return [(t.key, t.value, t.effect) for t in client.CoreV1Api(api).read_node(spot_node).spec.taints or []]

    # Just created, the node controller's node.kubernetes.io/not-ready taint is there until KWOK reports it Ready
    # (seen once on a loaded machine): wait for that, then only the fake GPU node's taint (every fake GPU node has it:
    # only GPU pods land there) and the Spot taint are left.
    wait_for(lambda: ("node.kubernetes.io/not-ready", None, "NoSchedule") not in taints(), 60, "the Spot node Ready")
    assert sorted(taints()) == [("karpenter.sh/capacity-type", "spot", "NoSchedule"),
                                ("nvidia.com/gpu", "present", "NoSchedule")]
    for name, replicas, priority in (("batch", 2, 10), ("search", 1, 500)):
        custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices",
                                                    make_isvc(name, replicas, priority))
    wait_for(lambda: settled_on(api, ns, "batch", od_node, 2) and settled_on(api, ns, "search", od_node, 1), 120,
             "batch and search running on the on-demand node")
    # 3 x 27.66 USD/h = 0.023 USD/s: 50 % of 0.40 USD in ~9 s.
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", "0.40", [{"percent": 50, "actions": ["Alert", "SwitchToSpot"], "spotMaxPriority": 50}], [],
        enforcement={"spotPendingTimeoutSeconds": 10}))

    # ---- the crossing: batch (priority 10) moves to the Spot node; search (500) stays on-demand
    wait_for(lambda: settled_on(api, ns, "batch", spot_node, 2), 120, "batch's pods all on the Spot node")
    isvc = custom(api).get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "batch")
    key = spot_annotation_key(ns, "budget")
    assert SpotSwitch.decode(key, isvc["metadata"]["annotations"][key]) == SpotSwitch(f"{ns}/budget", 50)
    wait_for(lambda: (c := condition(custom(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", "batch"), "BudgetLimited")) and c["reason"] == "MovedToSpot", 60,
        "batch's BudgetLimited=True/MovedToSpot")
    template = client.AppsV1Api(api).read_namespaced_deployment("batch", ns).spec.template.spec
    assert template.node_selector["karpenter.sh/capacity-type"] == "spot"
    assert any(t.key == "karpenter.sh/capacity-type" and t.value == "spot" for t in template.tolerations)
    assert running_on(api, ns, "search") == [od_node]
    # The ledger charges what runs on the Spot node at the Spot price (the node's label says so).
    wait_for(lambda: ledger_rate(api, ns, "budget", "batch") == 2 * SPOT_USD, 60, "batch priced at 2 x Spot")
    assert ledger_rate(api, ns, "budget", "search") == ON_DEMAND_USD
    status = get_policy(api, ns, "budget")["status"]
    assert [(s["name"], s["state"]) for s in status["spotServices"]] == [("batch", "Spot")]
    spot_cond = condition(get_policy(api, ns, "budget"), "SpotFallback")
    assert spot_cond and (spot_cond["status"], spot_cond["reason"]) == ("False", "SpotAvailable")

    # ---- a Spot shortage: no Spot node schedulable, one Spot pod reclaimed; its replacement stays Pending
    core = client.CoreV1Api(api)
    core.patch_node(spot_node, {"spec": {"unschedulable": True}})
    reclaimed = next(p.metadata.name for p in pods_of(api, ns, "batch") if p.spec.node_name == spot_node)
    t_reclaim = dt.datetime.now(dt.UTC)
    core.delete_namespaced_pod(reclaimed, ns, grace_period_seconds=0)
    wait_for(lambda: any(not p.spec.node_name for p in pods_of(api, ns, "batch")), 60, "a Pending Spot pod")

    policy = wait_for(lambda: (p := get_policy(api, ns, "budget")) and [
        s["state"] for s in (p.get("status") or {}).get("spotServices") or []] == ["OnDemandFallback"] and p,
        120, "batch fallen back to on-demand")
    wait_for(lambda: settled_on(api, ns, "batch", od_node, 2), 120, "batch's pods all back on the on-demand node")
    record = policy["status"]["spotServices"][0]
    fallback_after_s = (dt.datetime.fromisoformat(record["fallbackTime"].replace("Z", "+00:00")) - t_reclaim
                        ).total_seconds()
    assert fallback_after_s >= 10 - 1  # not before the timeout (the ledger's times are whole seconds)
    assert "stayed Pending" in record["message"]
    fell = condition(policy, "SpotFallback")
    assert fell and (fell["status"], fell["reason"]) == ("True", "SpotPendingTimeout")
    isvc = custom(api).get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "batch")
    assert key not in (isvc["metadata"].get("annotations") or {})
    wait_for(lambda: (c := condition(custom(api).get_namespaced_custom_object(
        GROUP, VERSION, ns, "inferenceservices", "batch"), "BudgetLimited")) and c["reason"] == "WithinBudget", 60,
        "batch's BudgetLimited=False/WithinBudget again")
    template = client.AppsV1Api(api).read_namespaced_deployment("batch", ns).spec.template.spec
    assert "karpenter.sh/capacity-type" not in (template.node_selector or {})
    assert not any(t.key == "karpenter.sh/capacity-type" for t in template.tolerations or [])
    wait_for(lambda: ledger_rate(api, ns, "budget", "batch") == 2 * ON_DEMAND_USD, 60,
             "batch priced at 2 x on-demand again")
    reasons = [e.get("reason") for e in wait_policy_events(api, ns, "budget", "SwitchedToSpot", "SpotPendingTimeout")]
    assert "SwitchedToSpot" in reasons and "SpotPendingTimeout" in reasons
    print(f"\nfigure: Spot pod reclaimed -> fallback recorded after {fallback_after_s:.1f} s "
          f"(spotPendingTimeoutSeconds 10, evaluation every 1 s; shared 2-core machine)")
