"""Issue 22, fault 1, on the real control plane: a pod scaled away between two evaluations is charged to when it
stopped (the operator's pod watch records its deletion), not up to the next evaluation that no longer lists it.

Real kube-apiserver + etcd + scheduler + KWOK fake nodes and the ``modalscale operator`` subprocess; the service is
the 8 x H100 replica of ``test_budget`` (about 84 USD/h) on a fake node of its own, so 30 s of one replica is
about 0.7 USD and the difference between the two ways of charging is about half a dollar, far above the ledger's
1e-9 USD.
"""

from __future__ import annotations

import datetime as dt
import time
from decimal import Decimal
from typing import Any

import pytest
from kubernetes import client

from modalscale.costmodel.ledger import parse_time
from modalscale.devenv.kube import wait_for

from .test_budget import (
    GPU_TYPE,
    GROUP,
    PRICE_USD_PER_REPLICA_HOUR,
    VERSION,
    custom,
    get_policy,
    ledger_spent,
    make_isvc,
    make_policy,
    running_pods,
    start_isvc,
)

INTERVAL_S = 30
"""evaluationIntervalSeconds of the policy: the pod is gone within seconds of the scale request, far inside it (60
until Dec 2026: half the test's time was waiting for E1)."""


@pytest.fixture(scope="module")
def h100_node(cluster: Any) -> list[str]:
    """A fake node with 64 H100s (the same one ``test_budget`` uses: only these services select its GPU label)."""
    return cluster.ensure_gpu_nodes(1, gpus_per_node=64, gpu_type=GPU_TYPE, cpu="1024", memory="16Ti",
                                    prefix="kwok-budget-h100-")


def pod_names(api: Any, ns: str, name: str) -> set[str]:
    """Every pod of the service still in the API (running or terminating)."""
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"modalscale.io/inferenceservice={name}")
    return {p.metadata.name for p in pods.items}


def stored(api: Any, ns: str) -> tuple[dt.datetime, Decimal]:
    """(``status.ledger.observedTime``, the ledger's spend) as stored now."""
    status = get_policy(api, ns, "budget").get("status") or {}
    return parse_time(status["ledger"]["observedTime"], "observedTime"), ledger_spent(status)


def usd(seconds: float) -> Decimal:
    return PRICE_USD_PER_REPLICA_HOUR * Decimal(str(seconds)) / 3600


def test_a_pod_scaled_away_between_evaluations_is_charged_to_its_deletion_not_to_the_next_evaluation(
        api: Any, operator: Any, namespace: str, h100_node: list[str]) -> None:
    ns = namespace
    start_isvc(api, ns, "two", replicas=2, max_replicas=2)
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", "1000", [{"percent": 100, "actions": ["Alert"]}], [], evaluationIntervalSeconds=INTERVAL_S))
    # E0: the first evaluation stores the ledger with both replicas in force.
    wait_for(lambda: ((get_policy(api, ns, "budget").get("status") or {}).get("ledger") or {}).get("observedTime"),
             60, "the first evaluation's ledger")
    t0, spent0 = stored(api, ns)
    before = pod_names(api, ns, "two")
    assert len(before) == 2
    # Right after E0, scale to one replica; the ReplicaSet deletes one pod and KWOK removes it within seconds,
    # long before E1 (INTERVAL_S later) lists the pods.
    asked = dt.datetime.now(dt.UTC)
    custom(api).patch_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "two",
                                               {"spec": {"scaling": {"replicas": 1}}})
    wait_for(lambda: len(pod_names(api, ns, "two") & before) == 1, 30, "one of the two pods gone from the API")
    vanished = dt.datetime.now(dt.UTC)
    assert vanished < t0 + dt.timedelta(seconds=INTERVAL_S - 10), "the pod must be gone well before E1"
    # E1: the first stored ledger after the pod was gone (the replica count changed, so the status is written).
    # Spend is linear in time, so an evaluation in between (none is expected) changes nothing measured here.
    wait_for(lambda: stored(api, ns)[0] >= vanished + dt.timedelta(seconds=1), INTERVAL_S + 60,
             "the first evaluation after the pod was gone")
    time.sleep(0.5)
    t1, spent1 = stored(api, ns)
    interval_s = (t1 - t0).total_seconds()
    charged = spent1 - spent0
    # The independent meter: the remaining pod ran [t0, t1); the deleted one stopped between the scale request
    # (its deletion cannot come earlier; the ledger's whole seconds floor t0 and t1) and the moment the test saw
    # it gone. 1 s of slack each way for the second-floored clocks.
    lower = usd(interval_s) + usd(max(0.0, (asked - t0).total_seconds() - 1))
    upper = usd(interval_s) + usd((vanished - t0).total_seconds() + 1)
    listing_only = usd(2 * interval_s)  # the deleted pod charged up to E1, as before the pod watch
    print(f"\nfigure: {interval_s:.0f} s between evaluations, pod gone {(vanished - t0).total_seconds():.1f} s after "
          f"E0: charged {charged:.6f} USD, meter [{lower:.6f}, {upper:.6f}], listing only {listing_only:.6f} USD")
    assert lower <= charged <= upper, (charged, lower, upper)
    assert charged < listing_only - usd(interval_s - (vanished - t0).total_seconds() - 2)


def gateway_pods(api: Any, ns: str, name: str) -> list[Any]:
    """The gateway pods of ``name`` bound to a node and running (KWOK runs them: nothing executes)."""
    pods = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector=f"modalscale.io/gateway={name}")
    return [p for p in pods.items if p.spec.node_name and p.status.phase == "Running" and p.status.start_time
            and not p.metadata.deletion_timestamp]


def test_the_gateway_pods_of_a_selected_service_are_in_its_spend_at_their_own_price(
        api: Any, operator: Any, namespace: str, h100_node: list[str]) -> None:
    """Issue 19: the gateway's pods are priced (CPU and memory requests at the catalog's on-demand prices) in the
    BudgetPolicy ledger and the InferenceService's ``costUSDPerHour``, each by its own start, not as replicas."""
    from modalscale.costmodel.catalog import ReplicaResources, load_catalog

    ns = namespace
    gateway_usd = load_catalog().price_replica(ReplicaResources.from_quantities("100m", "256Mi"), "OnDemand")
    body = make_isvc("gw", 1, 1)
    # Gateway on (2 pods, the defaults), placed like the replicas by the service's toleration of the fake GPU
    # nodes' taint (KWOK runs them there; without it the tainted local nodes leave them Pending).
    body["spec"]["gateway"] = {"enabled": True}
    body["spec"]["placement"] = {"tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                                                  "effect": "NoSchedule"}]}
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", body)
    wait_for(lambda: running_pods(api, ns, "gw") == 1 and len(gateway_pods(api, ns, "gw")) == 2, 90,
             "1 replica and 2 gateway pods running")
    custom(api).create_namespaced_custom_object(GROUP, VERSION, ns, "budgetpolicies", make_policy(
        "budget", "1000", [{"percent": 100, "actions": ["Alert"]}], [], evaluationIntervalSeconds=2))
    wait_for(lambda: ((get_policy(api, ns, "budget").get("status") or {}).get("ledger") or {}).get("observedTime"),
             60, "the first evaluation's ledger")
    # A stored ledger at least 10 s after the later gateway pod started (status is written on a change or every
    # 60 s, so sleeping a few evaluations is not enough: a run read a ledger 4 s after the start, 9.4e-6 USD).
    latest_start = max(p.status.start_time for p in gateway_pods(api, ns, "gw"))
    observed, spent = wait_for(lambda: (got := stored(api, ns))[0] >= latest_start + dt.timedelta(seconds=10)
                               and got, 90, "a stored ledger 10 s after the gateway pods started", interval_s=1.0)
    replicas = client.CoreV1Api(api).list_namespaced_pod(ns, label_selector="modalscale.io/inferenceservice=gw")
    gateways = gateway_pods(api, ns, "gw")
    assert len(replicas.items) == 1 and len(gateways) == 2  # nothing restarted meanwhile

    def ran_s(pod: Any) -> float:
        return max(0.0, (observed - pod.status.start_time).total_seconds())

    # The independent meter: each pod from its own startTime to the ledger's observedTime at its price.
    replica_usd = sum((usd(ran_s(p)) for p in replicas.items), Decimal(0))
    gateway_part = sum((gateway_usd * Decimal(str(ran_s(p))) / 3600 for p in gateways), Decimal(0))
    print(f"\nfigure: ledger {spent:.9f} USD; meter replicas {replica_usd:.9f} + gateway {gateway_part:.9f} USD "
          f"(2 pods x {gateway_usd} USD/h)")
    tolerance = Decimal("0.000001")
    assert gateway_part > 10 * tolerance  # >= 10 s of two gateway pods: a ledger without them fails the next line
    assert abs(spent - replica_usd - gateway_part) <= tolerance, (spent, replica_usd, gateway_part)
    # The InferenceService's rate: the replica and its 2 Ready gateway pods (4 decimals).
    want = f"{(PRICE_USD_PER_REPLICA_HOUR + 2 * gateway_usd).quantize(Decimal('0.0001'))}"
    wait_for(lambda: (custom(api).get_namespaced_custom_object(GROUP, VERSION, ns, "inferenceservices", "gw")
                      .get("status") or {}).get("costUSDPerHour") == want, 60, f"costUSDPerHour {want}")
