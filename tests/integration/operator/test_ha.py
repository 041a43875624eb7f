"""High availability and crash safety, on a control plane of their own (so no other operator interferes)."""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from modalscale.devenv.cluster import LocalCluster, fake_node_placement, running_cluster
from modalscale.devenv.kube import wait_for
from modalscale.devenv.operator_process import OperatorProcess
from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION, condition, create, make_isvc

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def ha_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory.mktemp("ha-cluster"), crd_dir=REPO / "crds") as c:
        yield c


@pytest.fixture
def ha_api(ha_cluster: LocalCluster) -> Iterator[Any]:
    api = ha_cluster.api_client()
    yield api
    api.close()


def _ready(api: Any, ns: str, name: str) -> bool:
    try:
        obj = client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
    except client.exceptions.ApiException:
        return False
    c = condition(obj, "Ready")
    return bool(c and c["status"] == "True")


def _active(op: OperatorProcess) -> bool:
    """The operator's latest peering verdict in its log is "resumed"."""
    log = op.log()
    return log.rfind("Resuming operations after the pause") > log.rfind("Pausing operations in favour of")


def _wrote(op: OperatorProcess, name: str) -> bool:
    return f"namespace=default name={name}\n" in op.log() or f"namespace=default name={name} " in op.log()


def test_two_operators_only_one_acts_and_the_other_takes_over(ha_cluster: LocalCluster, ha_api: Any,
                                                              tmp_path: Path) -> None:
    a = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "a.log")
    b = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "b.log")
    try:
        a.wait_healthy()
        b.wait_healthy()
        # kopf peering: both start paused; only the replica that sees no live peer of higher priority
        # resumes (a lower one that had resumed first logs that it pauses in favour of the higher one).
        wait_for(lambda: [_active(a), _active(b)].count(True) == 1, 60, "exactly one active operator")
        time.sleep(3)
        assert [_active(a), _active(b)].count(True) == 1
        create(ha_api, "default", make_isvc("ha-one"))
        wait_for(lambda: _ready(ha_api, "default", "ha-one"), 60, "ha-one Ready")
        acted = [op for op in (a, b) if _wrote(op, "ha-one")]
        assert len(acted) == 1, "exactly one operator must act"
        active, standby = acted[0], (b if acted[0] is a else a)

        active.kill(signal.SIGKILL)
        create(ha_api, "default", make_isvc("ha-two"))
        # The standby resumes once the dead peer's record expires (peering lifetime 30 s).
        wait_for(lambda: _ready(ha_api, "default", "ha-two"), 120, "ha-two Ready after failover")
        assert _wrote(standby, "ha-two")
        deps = client.AppsV1Api(ha_api).list_namespaced_deployment("default").items
        assert sorted(d.metadata.name for d in deps) == ["ha-one", "ha-two"]
    finally:
        a.stop()
        b.stop()


def test_operator_killed_mid_reconcile_converges_without_duplicates(ha_cluster: LocalCluster, ha_api: Any,
                                                                   tmp_path: Path) -> None:
    core, apps = client.CoreV1Api(ha_api), client.AppsV1Api(ha_api)
    core.create_namespace({"metadata": {"name": "crash"}})
    first = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "first.log")
    second = None
    try:
        first.wait_healthy()
        names = [f"crash-{i}" for i in range(8)]
        for n in names:  # CPU-only, so that GPU capacity left by the other test cannot matter; placed on the fake
            # nodes on purpose (they take only GPU pods otherwise)
            create(ha_api, "crash", make_isvc(n, resources={"cpu": "500m", "memory": "1Gi"},
                                              placement=fake_node_placement()))
        # Kill as soon as the first child exists: the other reconciles are in flight or not started.
        wait_for(lambda: apps.list_namespaced_deployment("crash").items, 30, "a first Deployment")
        first.kill(signal.SIGKILL)
        # No wait for the killed peer's record to expire: a replica started later has the higher peering
        # priority (its start time), so it resumes at once over the dead one's record.
        second = OperatorProcess(ha_cluster.kubeconfig, tmp_path / "second.log")
        second.wait_healthy()
        wait_for(lambda: all(_ready(ha_api, "crash", n) for n in names), 120, "all Ready after restart")
        deps = apps.list_namespaced_deployment("crash").items
        assert sorted(d.metadata.name for d in deps) == sorted(names)
        for d in deps:
            assert d.metadata.generation == 1, f"{d.metadata.name} was rewritten"
            rs = [r for r in apps.list_namespaced_replica_set("crash").items
                  if r.metadata.owner_references[0].name == d.metadata.name]
            assert len(rs) == 1
        pods = core.list_namespaced_pod("crash").items
        assert len(pods) == 2 * len(names)
        assert len(core.list_namespaced_service("crash").items) == len(names)
        assert len([c for c in core.list_namespaced_config_map("crash").items
                    if c.metadata.name.endswith("-model-repo")]) == len(names)
    finally:
        first.stop()
        if second:
            second.stop()
