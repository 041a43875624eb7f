"""Where pods land on the local cluster (issue 23): the fake GPU nodes are tainted ``nvidia.com/gpu=present:NoSchedule``
and the apiserver adds the toleration to pods that request ``nvidia.com/gpu`` (ExtendedResourceToleration), so a
plain ``helm install`` of the operator no longer shows Running on a KWOK node that runs nothing, while the
operator's GPU Deployments still schedule there. Checked here on the objects and flags the code generates; the
scheduling itself is checked on the real control plane by tests/integration/test_cluster.py and test_helm.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.capacity import SPOT_TAINT
from modalscale.api.inferenceservice import parse_isvc
from modalscale.devenv.cluster import (
    FAKE_GPU_TAINT,
    ClusterConfig,
    apiserver_args,
    fake_gpu_node,
    fake_node_placement,
    missing_taints,
    schedulable_fake_node,
)
from modalscale.devenv.realnode import REAL_NODE_TAINT, real_node_placement
from modalscale.operator.isvc.objects import build_deployment

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "modalscale"


def tolerates(tolerations: list[dict[str, Any]], taint: dict[str, Any]) -> bool:
    """Kubernetes' ``Toleration.ToleratesTaint`` (k8s.io/api/core/v1/toleration.go): an empty effect matches every
    effect, an empty key with ``Exists`` matches every taint, ``Exists`` ignores the value, ``Equal`` (the
    default operator) compares it."""
    for t in tolerations:
        if t.get("effect") and t["effect"] != taint["effect"]:
            continue
        if t.get("key") and t["key"] != taint["key"]:
            continue
        op = t.get("operator") or "Equal"
        if op == "Exists" or (op == "Equal" and (t.get("value") or "") == (taint.get("value") or "")):
            return True
    return False


def schedulable(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    """Taints and nodeSelector only (the checks this issue is about; resources are the scheduler's)."""
    labels = node["metadata"]["labels"]
    taints = [t for t in node["spec"].get("taints", []) if t["effect"] in ("NoSchedule", "NoExecute")]
    return (all(labels.get(k) == v for k, v in (pod.get("nodeSelector") or {}).items())
            and all(tolerates(pod.get("tolerations") or [], t) for t in taints))


def extended_resource_toleration(pod: dict[str, Any]) -> dict[str, Any]:
    """What the apiserver's ExtendedResourceToleration plugin does on pod create
    (plugin/pkg/admission/extendedresourcetoleration, v1.35.4): one ``{key: <resource>, operator: Exists,
    effect: NoSchedule}`` per extended resource a container requests (here: a name with a domain, not
    ``kubernetes.io/``; limits only are defaulted into requests before admission)."""
    names = set()
    for c in pod.get("containers", []):
        res = c.get("resources") or {}
        for name in {**(res.get("limits") or {}), **(res.get("requests") or {})}:
            if "/" in name and not name.startswith(("kubernetes.io/", "requests.")):
                names.add(name)
    tolerations = list(pod.get("tolerations") or [])
    for name in sorted(names):
        tol = {"key": name, "operator": "Exists", "effect": "NoSchedule"}
        if tol not in tolerations:
            tolerations.append(tol)
    return {**pod, "tolerations": tolerations}


REAL_NODE = {"metadata": {"labels": {"modalscale.io/node-type": "real"}}, "spec": {"taints": [REAL_NODE_TAINT]}}


def isvc_pod(**spec: Any) -> dict[str, Any]:
    body = {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns", "uid": "u1"}, "spec": spec}
    return extended_resource_toleration(build_deployment(parse_isvc(body), 1, {})["spec"]["template"]["spec"])


def chart_values(*files: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name in files:
        out.update(yaml.safe_load((CHART / name).read_text()))
    return out


def chart_pod(*files: str) -> dict[str, Any]:
    values = chart_values(*files)
    return {"nodeSelector": values["nodeSelector"], "tolerations": values["tolerations"],
            "containers": [{"name": "operator", "resources": values["resources"]}]}


def test_fake_gpu_nodes_are_tainted_like_gke_gpu_pools_and_keep_their_kwok_annotation_and_capacity() -> None:
    node = fake_gpu_node("kwok-gpu-0", gpus_per_node=8, gpu_type="nvidia-l4")
    assert FAKE_GPU_TAINT == {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert node["spec"]["taints"] == [FAKE_GPU_TAINT]
    assert node["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"  # what KWOK manages
    assert node["metadata"]["labels"]["nvidia.com/gpu.product"] == "nvidia-l4"
    assert node["status"]["allocatable"]["nvidia.com/gpu"] == "8"
    spot = fake_gpu_node("kwok-gpu-spot-0", spot=True)
    assert spot["spec"]["taints"] == [FAKE_GPU_TAINT, dict(SPOT_TAINT)]


def test_apiserver_enables_extended_resource_toleration_and_disables_only_the_service_account_plugin(
        tmp_path: Path) -> None:
    args = apiserver_args("/bin/kube-apiserver", ClusterConfig(etcd_client_port=1, apiserver_port=2), tmp_path,
                          "10.0.0.5")
    assert args[0] == "/bin/kube-apiserver"
    assert [a for a in args if "admission-plugins" in a] == [
        "--enable-admission-plugins=ExtendedResourceToleration", "--disable-admission-plugins=ServiceAccount"]
    assert "--advertise-address=10.0.0.5" in args and "--secure-port=2" in args


@pytest.mark.parametrize(("pod", "fake", "real"), [
    (chart_pod("values.yaml"), False, False),
    (chart_pod("values.yaml", "values-local.yaml"), False, True),
    (fake_node_placement(), True, False),
    (real_node_placement(), False, True),
    (isvc_pod(resources={"cpu": "1", "memory": "2Gi", "gpu": {"count": 1, "type": "nvidia-l4"}}), True, False),
    (isvc_pod(resources={"cpu": "1", "memory": "2Gi"}), False, False),
    (isvc_pod(resources={"cpu": "500m", "memory": "2Gi"}, placement=real_node_placement()), False, True),
    (isvc_pod(resources={"cpu": "500m", "memory": "2Gi"}, placement=fake_node_placement()), True, False),
    (extended_resource_toleration({"containers": [{"resources": {"limits": {"nvidia.com/gpu": "1"}}}]}), True,
     False),
], ids=["chart-defaults", "chart-local-values", "fake-node-placement", "real-node-placement", "gpu-isvc",
        "cpu-isvc-no-placement", "cpu-isvc-real-node", "cpu-isvc-fake-node-placement", "plain-gpu-pod"])
def test_only_gpu_pods_and_those_that_opt_in_land_on_the_fake_nodes(pod: dict[str, Any], fake: bool,
                                                                     real: bool) -> None:
    assert schedulable(pod, fake_gpu_node("kwok-gpu-0")) is fake
    assert schedulable(pod, REAL_NODE) is real
    assert not schedulable(pod, fake_gpu_node("kwok-gpu-spot-0", spot=True))  # Spot: only a SwitchToSpot service


def test_local_chart_values_are_the_real_node_placement_and_only_that() -> None:
    local = yaml.safe_load((CHART / "values-local.yaml").read_text())
    assert local == real_node_placement()
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())
    assert set(local) <= set(defaults)


def test_readme_installs_the_operator_chart_with_the_local_values_after_importing_its_image() -> None:
    readme = (REPO / "README.md").read_text()
    section = readme.split("## Install with Helm", 1)[1].split("\n## ", 1)[0]
    block = section.split("```bash", 1)[1].split("```", 1)[0].replace("\\\n", " ")
    lines = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    install = next(i for i, line in enumerate(lines) if line.startswith("helm install modalscale charts/modalscale "))
    assert "-f charts/modalscale/values-local.yaml" in lines[install]
    assert any(line.endswith("modalscale images import operator") for line in lines[:install])


@pytest.mark.parametrize(("existing", "added"), [
    ([], [FAKE_GPU_TAINT]),
    ([{**FAKE_GPU_TAINT, "timeAdded": None}], []),
    ([{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}], [FAKE_GPU_TAINT]),
    ([{**FAKE_GPU_TAINT, "effect": "NoExecute"}], [FAKE_GPU_TAINT]),
], ids=["none", "already-there", "other-taint-kept", "other-effect"])
def test_a_node_made_before_the_taint_gets_only_what_it_lacks(existing: list[dict[str, Any]],
                                                               added: list[dict[str, Any]]) -> None:
    assert missing_taints(existing, [FAKE_GPU_TAINT]) == added


def _node(ready: str | None, taints: list[str]) -> Any:
    from kubernetes import client

    conditions = [client.V1NodeCondition(type="Ready", status=ready)] if ready else None
    return client.V1Node(spec=client.V1NodeSpec(taints=[client.V1Taint(key=k, effect="NoSchedule") for k in taints]),
                         status=client.V1NodeStatus(conditions=conditions))


@pytest.mark.parametrize(("ready", "taints", "schedulable"), [
    ("True", [FAKE_GPU_TAINT["key"]], True),           # KWOK marked it Ready; our own GPU taint is tolerated
    (None, [], False),                                  # KWOK has not reported yet
    ("Unknown", [], False),
    ("True", ["node.kubernetes.io/not-ready"], False),  # Ready, but the node controller has not untainted it yet
    ("True", ["node.kubernetes.io/unreachable"], False),
])
def test_a_fake_node_is_schedulable_only_once_ready_and_untainted_by_the_node_controller(
        ready: str | None, taints: list[str], schedulable: bool) -> None:
    assert schedulable_fake_node(_node(ready, taints)) is schedulable
