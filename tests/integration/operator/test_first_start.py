"""A newcomer's first start: only ``kubectl apply -f crds/``, then ``modalscale operator`` with peering on.

On a control plane of its own, so that the peering CRDs can be removed without disturbing the session's operator.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.client.rest import ApiException

from modalscale.devenv.cluster import LocalCluster, running_cluster
from modalscale.devenv.kube import wait_for
from modalscale.devenv.operator_process import OperatorProcess
from tests.integration.operator.isvc_helpers import GROUP, PLURAL, VERSION, kubectl

REPO = Path(__file__).resolve().parents[3]
PEERING_CRDS = ("clusterkopfpeerings.kopf.dev", "kopfpeerings.kopf.dev")


@pytest.fixture(scope="module")
def bare_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane with no CRD installed (the tests install them the way a newcomer does)."""
    with running_cluster(tmp_path_factory.mktemp("first-start-cluster"), nodes=1) as c:
        yield c


@pytest.fixture
def bare_api(bare_cluster: LocalCluster) -> Iterator[Any]:
    api = bare_cluster.api_client()
    yield api
    api.close()


def apply_crds_folder(cluster: LocalCluster) -> None:
    """Exactly what docs/operations.md (CRDs) tells a newcomer to run, then wait until every CRD is served."""
    kubectl(cluster, "apply", "-f", str(REPO / "crds"))
    kubectl(cluster, "wait", "--for=condition=Established", "--timeout=60s", "crd", "--all")


def crd_names(api: Any) -> set[str]:
    return {c.metadata.name for c in client.ApiextensionsV1Api(api).list_custom_resource_definition().items}


def test_operator_started_after_applying_only_the_crds_folder_reconciles_the_example(
        bare_cluster: LocalCluster, bare_api: Any, tmp_path: Path) -> None:
    apply_crds_folder(bare_cluster)
    assert set(PEERING_CRDS) <= crd_names(bare_api), "kubectl apply -f crds/ must install kopf's peering CRDs"
    example = yaml.safe_load((REPO / "crds/examples/inferenceservice-predictive.yaml").read_text())
    name, ns = example["metadata"]["name"], "default"
    custom = client.CustomObjectsApi(bare_api)
    custom.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, example)
    op = OperatorProcess(bare_cluster.kubeconfig, tmp_path / "operator.log")  # peering on: no MODALSCALE_STANDALONE
    try:
        op.wait_healthy(timeout_s=120)

        def reconciled() -> dict[str, Any] | None:
            obj = custom.get_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)
            if (obj.get("status") or {}).get("observedGeneration") != obj["metadata"]["generation"]:
                return None
            try:
                return client.AppsV1Api(bare_api).read_namespaced_deployment(name, ns).to_dict()
            except ApiException as exc:
                if exc.status == 404:
                    return None
                raise

        try:
            deployment = wait_for(reconciled, 180, f"InferenceService {ns}/{name} reconciled")
        except TimeoutError as exc:
            raise AssertionError(f"{exc}\noperator log:\n{op.log()[-4000:]}") from exc
        owners = [(o["kind"], o["name"]) for o in deployment["metadata"]["owner_references"] or []]
        assert owners == [("InferenceService", name)]
        assert op.proc.poll() is None, "the operator stopped"
        # Within the chart's grace period (30 s), so that its cleanup (queued Events) runs: its watch caches held it
        # 229-281 s after SIGTERM until 6 Dec 2026 (a new-user audit), and every test's stop fell back to SIGKILL.
        assert op.stop(grace_s=20), f"the operator did not exit within 20 s of SIGTERM:\n{op.log()[-3000:]}"
        assert "Activity 'register.<locals>.stop_caches' succeeded" in op.log()
    finally:
        op.stop()
        custom.delete_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, name)


@pytest.mark.parametrize("scope,missing", [("cluster-wide", "clusterkopfpeerings.kopf.dev"),
                                           ("namespaced", "kopfpeerings.kopf.dev")], ids=["cluster-wide", "namespaced"])
def test_a_missing_peering_crd_stops_start_up_naming_the_crd_and_both_fixes(
        bare_cluster: LocalCluster, bare_api: Any, tmp_path: Path, scope: str, missing: str) -> None:
    apply_crds_folder(bare_cluster)
    ext = client.ApiextensionsV1Api(bare_api)
    try:
        ext.delete_custom_resource_definition(missing)
    except ApiException as exc:
        if exc.status != 404:
            raise
    wait_for(lambda: missing not in crd_names(bare_api), 60, f"CRD {missing} deleted")
    env = {"MODALSCALE_NAMESPACES": "default"} if scope == "namespaced" else {}
    op = OperatorProcess(bare_cluster.kubeconfig, tmp_path / "operator.log", env)
    try:
        # Before: start-up failed every 60 s with a bare "(404) 404 page not found" and never ended.
        (returncode,) = wait_for(lambda: None if op.proc.poll() is None else (op.proc.returncode,), 180,
                                 "the operator to stop at start-up")
        log = op.log()
        assert returncode != 0, log[-3000:]
        assert f"{missing} is not installed" in log, log[-3000:]
        assert "kubectl apply -f crds/" in log and "MODALSCALE_STANDALONE=true" in log, log[-3000:]
        assert "Traceback" not in log, log[-3000:]
    finally:
        op.stop()
        apply_crds_folder(bare_cluster)


def test_an_operator_restarted_after_sigkill_outranks_its_dead_predecessors_record(
        bare_cluster: LocalCluster, bare_api: Any, tmp_path: Path) -> None:
    # A killed operator leaves its peering record alive for one lifetime (30 s), and kopf lets only the live peer
    # with the highest priority act. With random priorities the restarted one waited for that dead record whenever
    # it had drawn the lower number (2 of 5 restarts waited 29-30 s); ranked by start time it always outranks it.
    # Three kills: a random ranking would pass all three 1 time in 8.
    apply_crds_folder(bare_cluster)
    custom = client.CustomObjectsApi(bare_api)

    def records() -> dict[str, int]:
        try:
            obj = custom.get_cluster_custom_object("kopf.dev", "v1", "clusterkopfpeerings", "modalscale")
        except ApiException as exc:
            if exc.status == 404:
                return {}
            raise
        return {k: int(v["priority"]) for k, v in (obj.get("status") or {}).items() if v}

    previous: OperatorProcess | None = None
    try:
        for i in range(4):
            name = f"restart-{i}"
            body = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "InferenceService", "metadata": {"name": name},
                    "spec": {"resources": {"cpu": "100m", "memory": "256Mi"},
                             "scaling": {"mode": "Fixed", "replicas": 1, "minReplicas": 1, "maxReplicas": 1}}}
            custom.create_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, body)
            if previous is not None:
                previous.kill()  # SIGKILL: no chance to remove its peering record
            before = records()
            op = OperatorProcess(bare_cluster.kubeconfig, tmp_path / f"operator-{i}.log")
            previous = op
            new = wait_for(lambda: records().keys() - before.keys(), 120, f"operator {i}'s peering record")
            (mine,) = new
            assert all(records()[mine] > p for p in before.values()), (records(), mine)

            def reconciled(name: str = name) -> bool:
                obj = custom.get_namespaced_custom_object(GROUP, VERSION, "default", PLURAL, name)
                return (obj.get("status") or {}).get("observedGeneration") == obj["metadata"]["generation"]

            wait_for(reconciled, 180, f"{name} reconciled by operator {i}")
    finally:
        if previous is not None:
            previous.stop()
