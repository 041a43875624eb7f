"""spec.placement and the CPU limit of the Triton pods: where the replicas run and the slice each one gets."""

from __future__ import annotations

from typing import Any

import pytest

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import parse_isvc
from modalscale.operator.isvc.objects import build_deployment

REAL_NODE = {"nodeSelector": {"modalscale.io/node-type": "real"},
             "tolerations": [{"key": "modalscale.io/node-type", "operator": "Equal", "value": "real",
                              "effect": "NoSchedule"}]}


def make_isvc(**spec: Any) -> dict[str, Any]:
    return {"apiVersion": "modalscale.io/v1alpha1", "kind": "InferenceService",
            "metadata": {"name": "svc", "namespace": "ns", "uid": "u1"}, "spec": spec}


def pod_spec(body: dict[str, Any]) -> dict[str, Any]:
    return build_deployment(parse_isvc(body), 1, {})["spec"]["template"]["spec"]


def test_cpu_service_on_the_real_node_gets_its_selector_toleration_and_a_cpu_limit_equal_to_its_request() -> None:
    pod = pod_spec(make_isvc(resources={"cpu": "500m", "memory": "2Gi"}, placement=REAL_NODE))
    assert pod["nodeSelector"] == {"modalscale.io/node-type": "real"}
    assert pod["tolerations"] == REAL_NODE["tolerations"]
    resources = pod["containers"][0]["resources"]
    assert resources == {"requests": {"cpu": "500m", "memory": "2Gi"}, "limits": {"cpu": "500m", "memory": "2Gi"}}


def test_gpu_service_merges_the_gpu_product_into_the_users_placement_and_keeps_cpu_unlimited() -> None:
    pod = pod_spec(make_isvc(resources={"cpu": "4", "memory": "16Gi", "gpu": {"count": 1, "type": "nvidia-l4"}},
                             placement={"nodeSelector": {"zone": "a"},
                                        "tolerations": [{"key": "spot", "operator": "Exists"}]}))
    assert pod["nodeSelector"] == {"zone": "a", "nvidia.com/gpu.product": "nvidia-l4"}
    assert pod["tolerations"] == [{"key": "spot", "operator": "Exists"},
                                  {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    limits = pod["containers"][0]["resources"]["limits"]
    assert "cpu" not in limits and limits["nvidia.com/gpu"] == "1"


def test_no_placement_renders_no_selector_or_toleration_for_a_cpu_service() -> None:
    pod = pod_spec(make_isvc(resources={"cpu": "1", "memory": "1Gi"}))
    assert "nodeSelector" not in pod and "tolerations" not in pod


@pytest.mark.parametrize(("placement", "field"), [
    ({"nodeSelector": {"a": 1}}, "spec.placement.nodeSelector"),
    ({"tolerations": [{"key": "a", "tolerationSecond": 3}]}, "spec.placement.tolerations[0]"),
    ({"tolerations": "a"}, "spec.placement.tolerations[0]"),
], ids=["non-string-label", "unknown-toleration-key", "not-a-list"])
def test_bad_placement_names_the_field(placement: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidSpec) as err:
        parse_isvc(make_isvc(placement=placement))
    assert err.value.field == field
