"""The children's watch caches against a real control plane (KWOK-only, a control plane of its own so that no other
operator acts): with a 300 s resync, a service turns Ready, a deleted Service comes back, a drifted Deployment is
restored and a Deployment stripped of the managed-by label is taken back, each within seconds: a child's change
reconciles its owner, not the resync. Idle, nothing is written."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from modalscale.devenv.cluster import LocalCluster, running_cluster
from modalscale.devenv.kube import wait_for
from modalscale.devenv.operator_process import OperatorProcess
from tests.integration.operator.isvc_helpers import condition, create, get, make_isvc

REPO = Path(__file__).resolve().parents[3]
RESYNC_S = 300.0
"""Far longer than any wait below: whatever is repaired here was repaired by a watch event."""


@pytest.fixture(scope="module")
def cache_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("cache-cluster"), crd_dir=REPO / "crds") as c:
        yield c


def test_children_changes_reach_the_owner_without_the_resync(cache_cluster: LocalCluster,
                                                             tmp_path: Path) -> None:
    api = cache_cluster.api_client()
    op = OperatorProcess(cache_cluster.kubeconfig, tmp_path / "operator.log", resync_s=RESYNC_S)
    try:
        op.wait_healthy()
        apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
        create(api, "default", make_isvc("cached"))

        def ready() -> bool:
            c = condition(get(api, "default", "cached"), "Ready")
            return bool(c and c["status"] == "True")

        wait_for(ready, 30, "Ready (pods turned Ready after the first reconcile: a pod event woke it)")

        core.delete_namespaced_service("cached", "default")
        wait_for(lambda: core.list_namespaced_service("default", field_selector="metadata.name=cached").items,
                 15, "Service recreated")

        apps.patch_namespaced_deployment("cached", "default", {"spec": {"template": {"spec": {"containers": [
            {"name": "triton", "image": "evil/triton:latest"}]}}}})
        wait_for(lambda: apps.read_namespaced_deployment("cached", "default")
                 .spec.template.spec.containers[0].image == "nvcr.io/nvidia/tritonserver:24.10-py3", 15,
                 "image restored")

        # Out of the label-filtered cache (its watch reports it deleted): the create answers 409 and is patched back.
        apps.patch_namespaced_deployment("cached", "default", {"metadata": {"labels": {
            "app.kubernetes.io/managed-by": None}}})
        wait_for(lambda: apps.read_namespaced_deployment("cached", "default").metadata.labels.get(
            "app.kubernetes.io/managed-by") == "modalscale-operator", 15, "managed-by label restored")

        time.sleep(3)  # the rollouts of the repairs settle
        writes = op.metric("modalscale_api_writes_total")
        time.sleep(10)
        assert op.metric("modalscale_api_writes_total") == writes, "idle writes"
    finally:
        op.stop()
        api.close()
