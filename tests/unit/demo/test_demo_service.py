"""The demo's InferenceService on the real node: what the operator makes of it (pure builders, no cluster)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.demo.run import (
    DEMO_GATEWAY,
    MAX_REAL_REPLICAS,
    REPLICA_CPU,
    Demo,
    DemoConfig,
    _replica_price,
    kwok_banner,
    rates_query,
)
from modalscale.devenv.realnode import NODE_TYPE_LABEL, NODE_TYPE_REAL
from modalscale.operator.isvc.objects import build_deployment


def _body(real: bool) -> dict[str, Any]:
    demo = Demo(DemoConfig(), say=lambda _: None)
    try:
        demo.real = real
        demo.image_ref = "modalscale/runtime-cpu:0.1.0"
        body = copy.deepcopy(demo._isvc_body())
    finally:
        demo.close()
    body["metadata"].update({"namespace": "demo", "uid": "u-1", "generation": 1})
    return body


def test_real_replicas_run_the_cpu_image_on_the_real_node_with_a_fixed_cpu_slice() -> None:
    body = _body(real=True)
    dep = build_deployment(parse_isvc(body), 1, {"multimodal/config.pbtxt": ""})
    pod = dep["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["image"] == "modalscale/runtime-cpu:0.1.0"
    assert container["resources"]["limits"]["cpu"] == REPLICA_CPU == container["resources"]["requests"]["cpu"]
    assert "nvidia.com/gpu" not in container["resources"]["limits"]
    assert pod["nodeSelector"] == {NODE_TYPE_LABEL: NODE_TYPE_REAL}
    assert any(t["key"] == NODE_TYPE_LABEL and t["effect"] == "NoSchedule" for t in pod["tolerations"])
    assert body["spec"]["scaling"]["maxReplicas"] == MAX_REAL_REPLICAS == 3


def test_the_fallback_service_keeps_the_kwok_gpu_replicas() -> None:
    dep = build_deployment(parse_isvc(_body(real=False)), 1, {"multimodal/config.pbtxt": ""})
    pod = dep["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] in (1, "1")
    assert NODE_TYPE_LABEL not in (pod.get("nodeSelector") or {})


def test_prices_and_banner() -> None:
    assert 0 < _replica_price(real=True) < _replica_price(real=False)
    banner = kwok_banner("not root")
    assert "KWOK-ONLY FALLBACK" in banner and "not root" in banner and "NO capacity is measured" in banner


@pytest.mark.parametrize("real", [True, False])
def test_predictive_scaling_is_valid_for_both_modes(real: bool) -> None:
    demo = Demo(DemoConfig(), say=lambda _: None)
    try:
        demo.real = real
        scaling = demo._scaling()
    finally:
        demo.close()
    body = _body(real)
    body["spec"]["scaling"] = scaling
    body["spec"]["model"]["costModelRef"] = {"name": "m", "key": "model.skops"}
    spec = parse_isvc(body)
    assert spec.scaling.mode == "Predictive"


@pytest.mark.parametrize("real", [True, False])
def test_the_demo_says_its_gateway_setting_explicitly_and_its_rates_read_that_one_source(real: bool) -> None:
    body = _body(real)
    assert body["spec"]["gateway"] == {"enabled": DEMO_GATEWAY}  # never the CRD's default by omission
    assert parse_isvc(body).gateway.enabled is DEMO_GATEWAY
    # 3 replicas of 500m fill the 2-core machine's real node (1500m allocatable): no room for gateway pods.
    assert DEMO_GATEWAY is False and MAX_REAL_REPLICAS * 500 == 1500 and REPLICA_CPU == "500m"


def test_the_live_rates_count_each_request_once_from_the_source_the_autoscaler_reads() -> None:
    from modalscale.operator.autoscale.observe import build_queries

    direct, through = rates_query("demo", "vc", gateway=False), rates_query("demo", "vc", gateway=True)
    replicas = 'component!~"gateway|image-encoder"'
    assert replicas in direct and 'component="gateway"' not in direct
    assert 'component="gateway"' in through and replicas not in through
    for gateway, q in ((False, direct), (True, through)):
        # the same series selector as the autoscaler's arrivals (its "requests" query) for the same setting
        autoscaler = build_queries("demo", "vc", gateway=gateway)["requests"]
        source = 'component="gateway"' if gateway else replicas
        assert source in autoscaler and 'namespace="demo"' in q and 'inferenceservice="vc"' in q
        assert q.startswith("sum by (modality) (rate(modalscale_requests_total{")
