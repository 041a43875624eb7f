"""Issue 22, fault 1, on the real control plane: a pod scaled away between two evaluations is charged to when it
stopped (the operator's pod watch records its deletion), not up to the next evaluation that no longer lists it.

Real kube-apiserver + etcd + scheduler + KWOK fake nodes and the ``modalscale operator`` subprocess; the service is
the 8 x H100 replica of ``test_budget`` (about 84 USD/h) on a fake node of its own, so 60 s of one replica is
about 1.4 USD and the difference between the two ways of charging is a dollar, far above the ledger's 1e-9 USD.
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
    make_policy,
    start_isvc,
)

INTERVAL_S = 60


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
    # long before E1 (60 s later) lists the pods.
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
