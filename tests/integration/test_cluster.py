"""The local control plane itself: scheduling against fake GPU capacity, idempotent up, clean down."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from modalscale.devenv.cluster import LocalCluster
from modalscale.devenv.kube import wait_for


def _gpu_deployment(name: str, replicas: int, gpus: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": replicas, "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    # No toleration: the apiserver's ExtendedResourceToleration adds the one of the fake GPU
                    # nodes' taint nvidia.com/gpu=present:NoSchedule, as GKE does.
                    "nodeSelector": {"nvidia.com/gpu.product": "nvidia-l4"},
                    "containers": [{"name": "main", "image": "example.invalid/triton:fake",
                                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}} if gpus else {}}],
                },
            },
        },
    }


def test_gpu_deployment_gets_ready_pods_on_kwok_nodes(api: Any) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment("default", _gpu_deployment("gpu-ok", replicas=2, gpus=1))
    try:
        wait_for(lambda: (apps.read_namespaced_deployment("gpu-ok", "default").status.ready_replicas or 0) == 2,
                 90, "2 ready replicas of gpu-ok")
        pods = core.list_namespaced_pod("default", label_selector="app=gpu-ok").items
        assert len(pods) == 2
        for pod in pods:
            assert pod.status.phase == "Running"
            assert pod.spec.node_name.startswith("kwok-gpu-")
            assert any((t.key, t.operator, t.effect) == ("nvidia.com/gpu", "Exists", "NoSchedule")
                       for t in pod.spec.tolerations or []), pod.spec.tolerations
    finally:
        apps.delete_namespaced_deployment("gpu-ok", "default")


def test_pod_without_gpu_or_placement_stays_pending_off_the_tainted_fake_gpu_nodes(api: Any) -> None:
    """Issue 23: a pod that asks for no GPU (the operator chart installed with its defaults) must not land on a
    KWOK node, where it would show Running and run nothing; with no real node placement it stays Pending."""
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    body = _gpu_deployment("no-gpu", replicas=1, gpus=0)
    del body["spec"]["template"]["spec"]["nodeSelector"]
    apps.create_namespaced_deployment("default", body)
    try:
        def unschedulable() -> Any:
            for pod in core.list_namespaced_pod("default", label_selector="app=no-gpu").items:
                for cond in pod.status.conditions or []:
                    if cond.type == "PodScheduled" and cond.status == "False":
                        return cond
            return None

        cond = wait_for(unschedulable, 60, "PodScheduled=False on no-gpu")
        assert cond.reason == "Unschedulable"
        assert "untolerated taint" in cond.message, cond.message  # v1.35: "node(s) had untolerated taint(s)"
        (pod,) = core.list_namespaced_pod("default", label_selector="app=no-gpu").items
        assert pod.spec.node_name is None and pod.status.phase == "Pending"
    finally:
        apps.delete_namespaced_deployment("no-gpu", "default")


def test_deployment_asking_for_more_gpus_than_exist_stays_pending_with_the_scheduler_reason(api: Any) -> None:
    apps, core = client.AppsV1Api(api), client.CoreV1Api(api)
    apps.create_namespaced_deployment("default", _gpu_deployment("gpu-too-many", replicas=1, gpus=64))
    try:
        def unschedulable() -> Any:
            for pod in core.list_namespaced_pod("default", label_selector="app=gpu-too-many").items:
                for cond in pod.status.conditions or []:
                    if cond.type == "PodScheduled" and cond.status == "False":
                        return cond
            return None

        cond = wait_for(unschedulable, 60, "PodScheduled=False on gpu-too-many")
        assert cond.reason == "Unschedulable"
        assert "Insufficient nvidia.com/gpu" in cond.message
        pods = core.list_namespaced_pod("default", label_selector="app=gpu-too-many").items
        assert [p.status.phase for p in pods] == ["Pending"]
    finally:
        apps.delete_namespaced_deployment("gpu-too-many", "default")


def _our_processes(workdir: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if str(workdir) in cmd and int(entry.name) != os.getpid():
            found.append(int(entry.name))
    return found


def test_cluster_up_twice_is_safe_and_down_leaves_nothing_running(tmp_path: Path, cluster: LocalCluster) -> None:
    second = LocalCluster(tmp_path / "second", log=lambda _m: None)
    try:
        second.up(nodes=1, real_node=False)  # the machine's one real node belongs to the session cluster
        first_pids = second.pids()
        assert all(first_pids.values()), first_pids
        second.up(nodes=1, real_node=False)
        assert second.pids() == first_pids
        assert second.status()["apiserverReady"] is True
        nodes = client.CoreV1Api(second.api_client()).list_node().items
        assert [n.metadata.name for n in nodes] == ["kwok-gpu-0"]
    finally:
        stopped = second.down()
    assert set(stopped) == {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"}
    assert _our_processes(tmp_path / "second") == []
    assert second.status()["apiserverReady"] is False
    assert second.down() == []


def test_a_cluster_without_fake_nodes_starts_kwok_only_when_fake_nodes_are_wanted(
        tmp_path: Path, cluster: LocalCluster) -> None:
    """Issue 23: the demo on a real node wants no fake node, so its cold start must not build or run KWOK; a later
    ``ensure_gpu_nodes`` (the KWOK-only fallback) starts it, and every ``up`` after that keeps it running."""
    lean = LocalCluster(tmp_path / "lean", log=lambda _m: None)
    try:
        lean.up(nodes=0, real_node=False)
        assert lean.pids()["kwok"] is None and not lean.runs_kwok
        assert "kwok" not in lean.status()["processes"]
        assert not (tmp_path / "lean" / "logs" / "kwok.log").exists()
        assert client.CoreV1Api(lean.api_client()).list_node().items == []

        assert lean.ensure_gpu_nodes(1) == ["kwok-gpu-0"]  # Ready within 60 s, or it raises
        kwok = lean.pids()["kwok"]
        assert kwok is not None and lean.runs_kwok
        lean.up(nodes=0, real_node=False)
        assert lean.pids()["kwok"] == kwok
    finally:
        stopped = lean.down()
    assert "kwok" in stopped
    assert _our_processes(tmp_path / "lean") == []


def test_down_stops_the_components_whose_pid_files_are_gone(tmp_path: Path, cluster: LocalCluster) -> None:
    """A run stopped mid-teardown (or a work dir half removed) left an apiserver, etcd, controller-manager,
    scheduler and KWOK running that ``down`` could not find: it went by pid files only."""
    lost = LocalCluster(tmp_path / "lost", log=lambda _m: None)
    try:
        lost.up(nodes=1, real_node=False)
        assert all(lost.pids().values())
        for pf in (tmp_path / "lost" / "pids").iterdir():
            pf.unlink()
    finally:
        stopped = lost.down()
    assert sorted(stopped) == sorted(["etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok"])
    assert _our_processes(tmp_path / "lost") == []


def test_the_session_cluster_takes_the_real_node_only_when_a_collected_test_needs_it(
        cluster: LocalCluster, request: pytest.FixtureRequest) -> None:
    """The machine has one real node: a session whose collected tests never ask for ``real_node_cluster`` leaves it
    free (run alone, this test is such a session); one that does asks for it as ``cluster up`` does by default."""
    needs = any("real_node_cluster" in item.fixturenames for item in request.session.items)
    st = cluster.real_node_status()
    if needs:
        assert st["reason"] != "off (no collected test needs the real node)", st
    else:
        assert st["enabled"] is False and st["reason"] == "off (no collected test needs the real node)", st
        assert not any(st["processes"].values()), st
        names = [n.metadata.name for n in client.CoreV1Api(cluster.api_client()).list_node().items]
        assert "real-node-0" not in names


@pytest.mark.parametrize("component", ["kube-apiserver", "etcd"])
def test_status_reports_each_component_running(cluster: LocalCluster, component: str) -> None:
    st = cluster.status()
    assert st["processes"][component] is not None
    assert st["apiserverReady"] is True
