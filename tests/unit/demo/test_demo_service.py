"""The demo's InferenceService on the real node: what the operator makes of it (pure builders, no cluster)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from modalscale.api.inferenceservice import parse_isvc
from modalscale.demo.report import request_path_lines
from modalscale.demo.run import (
    FIRST_REPLICA_SCALING,
    GATEWAY_CPU,
    GATEWAY_REPLICAS,
    MAX_REAL_REPLICAS,
    REPLICA_CPU,
    Demo,
    DemoConfig,
    _replica_price,
    cache_line,
    cache_lookups,
    cold_start_line,
    distinct,
    kwok_banner,
    rates_query,
    served_queries,
    zipf_draw,
)
from modalscale.devenv.realnode import NODE_TYPE_LABEL, NODE_TYPE_REAL, node_reserve
from modalscale.operator.isvc.objects import build_deployment
from tests.factories import merge_patch


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


def _millicores(q: str) -> int:
    return int(q[:-1]) if q.endswith("m") else int(float(q) * 1000)


@pytest.mark.parametrize("real", [True, False])
def test_the_demo_says_its_gateway_setting_explicitly_and_its_rates_read_that_one_source(real: bool) -> None:
    body = _body(real)
    spec = parse_isvc(body)
    if not real:  # the fallback's replicas are fake pods: no gateway pod could reach its one local Triton
        assert body["spec"]["gateway"] == {"enabled": False} and spec.gateway.enabled is False
        return
    assert body["spec"]["gateway"]["enabled"] is True  # never the CRD's default by omission
    assert spec.gateway.enabled and spec.gateway.replicas == GATEWAY_REPLICAS == 2
    assert spec.gateway.cpu == GATEWAY_CPU
    # Three replicas and both gateway pods fit the real node of a 2-core machine (the CPU the kubelet keeps out).
    allocatable_m = 2000 - _millicores(node_reserve(2, 24 * 2**30)["kubeReserved"]["cpu"])
    assert allocatable_m == 1500
    used_m = MAX_REAL_REPLICAS * _millicores(REPLICA_CPU) + GATEWAY_REPLICAS * _millicores(GATEWAY_CPU)
    assert used_m <= allocatable_m, used_m


def test_the_real_demo_starts_at_zero_then_patches_to_one_fixed_replica_then_predictive() -> None:
    body = _body(real=True)
    cold = parse_isvc(body)
    assert cold.scaling.mode == "Predictive" and cold.scaling.min_replicas == 0  # a start from zero
    fixed = merge_patch(body, {"spec": {"scaling": FIRST_REPLICA_SCALING}})
    assert "scaleToZeroAfterSeconds" not in fixed["spec"]["scaling"]
    spec = parse_isvc(fixed)
    assert (spec.scaling.mode, spec.scaling.replicas, spec.scaling.min_replicas) == ("Fixed", 1, 1)
    demo = Demo(DemoConfig(), say=lambda _: None)
    try:
        demo.real = True
        scaling = dict(demo._scaling(), replicas=None)  # turn_predictive's patch
    finally:
        demo.close()
    predictive = merge_patch(fixed, {"spec": {"scaling": scaling, "model": {"costModelRef": {
        "name": "m", "key": "model.skops"}}}})
    spec = parse_isvc(predictive)
    assert spec.scaling.mode == "Predictive" and spec.scaling.min_replicas == 1
    assert spec.scaling.max_replicas == MAX_REAL_REPLICAS


def test_served_queries_count_each_replica_pod_and_the_gateway_choices_from_their_own_series() -> None:
    per_pod, picks = served_queries("demo", "vc", 900)
    assert per_pod.startswith("sum by (pod) (max_over_time(modalscale_requests_total{")
    assert 'component!~"gateway|image-encoder"' in per_pod and "[900s]" in per_pod and "min_over_time" in per_pod
    assert picks.startswith("sum by (policy) (max_over_time(modalscale_gateway_picks_total{")
    assert 'component="gateway"' in picks
    for q in (per_pod, picks):
        assert 'namespace="demo"' in q and 'inferenceservice="vc"' in q


def test_the_start_from_zero_line_says_what_happened() -> None:
    ok = {"latency_s": 17.46, "pod_time_to_ready_s": 16.8, "added_s": 0.66}
    assert "answered after 17.5 s" in cold_start_line(ok) and "added latency 0.66 s" in cold_start_line(ok)
    assert "FAILED: HTTPError: 503" in cold_start_line({"error": "HTTPError: 503"})
    assert "no answer" in cold_start_line({})
    lines = request_path_lines({"cold_start": ok, "served_by_pod": {"vc-b": 7, "vc-a": 5}, "gateway_picks": {}})
    assert lines[1].endswith("vc-a 5, vc-b 7") and "not read" in lines[2]


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


def test_the_story_sends_no_two_requests_with_the_same_image_bytes_and_the_embedding_cache_is_on() -> None:
    # The embedding cache is keyed on the image bytes: the demo's photographs repeat at a size (names cycle), so
    # without the salt a repeated one would be answered from the cache and cost less than the story assumes.
    from modalscale.demo.run import request_content
    from modalscale.runtime.workload import TraceRow, photo_names

    row = TraceRow(0.0, 1, 320, 240, 0)
    n = len(photo_names())
    plain = [request_content(row, i)[0] for i in (0, n)]
    assert plain[0] == plain[1]  # the same photograph at the same size: the same bytes
    salted = [request_content(row, i, b"run-salt")[0] for i in (0, n)]
    assert salted[0] != salted[1] and salted[0] is not None and salted[1] is not None
    assert plain[0] is not None and salted[0][0].startswith(plain[0][0])  # the same picture, bytes appended
    assert distinct(b"jpeg", b"s", 1) == b"jpeg" + b"s" + (1).to_bytes(8, "big")
    assert _body(True)["spec"]["runtime"]["embeddingCache"] is True


def test_the_cache_phase_draws_a_zipf_popularity_and_reads_each_pods_hits() -> None:
    draw = zipf_draw(6000, 8, 0.8, seed=0)
    counts = [draw.count(r) for r in range(8)]
    assert counts == sorted(counts, reverse=True) and set(draw) == set(range(8))
    # P(rank 1) / P(rank 2) = 2 ** 0.8 = 1.74
    assert 1.5 < counts[0] / counts[1] < 2.0, counts
    assert zipf_draw(60, 8, 0.8, seed=0) == zipf_draw(60, 8, 0.8, seed=0)
    with pytest.raises(ValueError, match="k >= 1"):
        zipf_draw(5, 0, 0.8, seed=0)
    metrics = {'modalscale_embedding_cache_lookups_total{model="image_encoder",result="hit"}': 40.0,
               'modalscale_embedding_cache_lookups_total{model="image_encoder",result="miss"}': 9.0,
               'modalscale_requests_total{modality="image"}': 49.0}
    assert cache_lookups(metrics) == (40.0, 9.0) and cache_lookups({}) == (0.0, 0.0)
    line = cache_line({"requests": 60, "answered": 60, "failed": 0, "images": 8, "alpha": 0.8, "distinct": 8,
                       "by_pod": {"vc-b": {"hit": 12.0, "miss": 3.0}, "vc-a": {"hit": 40.0, "miss": 5.0}}})
    assert line.startswith("52 hits of 60 image lookups on 60 requests") and "at most 52 hits" in line
    assert line.endswith("vc-a 40/45, vc-b 12/15")
    assert cache_line({}) == "not measured"
    assert cache_line({"error": "ConnectError: refused"}) == "not measured: ConnectError: refused"
    lines = request_path_lines({"cold_start": {}, "served_by_pod": {}, "gateway_picks": {}})
    assert "Embedding cache" in lines[3] and "not measured" in lines[3]
