"""The InferenceService spec parsed once (``modalscale.api.inferenceservice``), by the CRD's rules.

Each place where the three old readers (``parse_isvc``, ``ScalingPolicy.from_spec``, ``RuntimeConfig.from_isvc_spec``)
disagreed has a test: the answer is the CRD's, and every consumer now gives the same one.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from modalscale.api.errors import InvalidSpec
from modalscale.api.inferenceservice import KNOWN_FIELDS, parse_isvc, parse_spec
from modalscale.autoscaler.policy import ScalingMode, ScalingPolicy
from modalscale.runtime.repo_config import RuntimeConfig

REPO = Path(__file__).resolve().parents[3]


def body(**spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": "vc", "namespace": "ml"}, "spec": spec}


def readers(spec: dict[str, Any]) -> list[tuple[str, Any]]:
    """What each consumer makes of ``spec``: its value, or the InvalidSpec field it refused."""
    out = []
    for name, read in (("parse_isvc", lambda: parse_isvc(body(**spec))),
                       ("ScalingPolicy", lambda: ScalingPolicy.from_spec(spec)),
                       ("RuntimeConfig", lambda: RuntimeConfig.from_isvc_spec(spec))):
        try:
            out.append((name, read()))
        except InvalidSpec as exc:
            out.append((name, exc.field))
    return out


@pytest.mark.parametrize(("spec", "field"), [
    # Fixed mode outside [min, max]: the CRD's CEL rule; parse_isvc used to accept it.
    ({"scaling": {"mode": "Fixed", "replicas": 12, "minReplicas": 1, "maxReplicas": 10}}, "spec.scaling.replicas"),
    # Unknown fields: the apiserver's strict field validation refuses them; only the runtime reader did.
    ({"runtime": {"maxBatchsize": 4}}, "spec.runtime.maxBatchsize"),
    ({"scaling": {"maxReplica": 4}}, "spec.scaling.maxReplica"),
    # A section that is not an object: the policy named it, parse_isvc crashed (AttributeError).
    ({"scaling": [1, 2]}, "spec.scaling"),
    # Enums and patterns of the CRD: parse_isvc accepted these.
    ({"runtime": {"precision": "FP8"}}, "spec.runtime.precision"),
    ({"model": {"name": "Bad Name"}}, "spec.model.name"),
    ({"pricing": {"tier": "Reserved"}}, "spec.pricing.tier"),
    ({"runtime": {"instanceCount": 32}}, "spec.runtime.instanceCount"),
    ({"runtime": {"maxBatchSize": 4, "dynamicBatching": {"preferredBatchSizes": [2, 8]}}},
     "spec.runtime.dynamicBatching.preferredBatchSizes"),
    ({"resources": {"cpu": "1Gi"}}, "spec.resources.cpu"),
    ({"resources": {"memory": "8GB"}}, "spec.resources.memory"),
    # No activator without the gateway: at 0 replicas Utilization/Predictive have no pod and no metric, so nothing
    # scales them up (the gateway, on by default, is the activator).
    ({"scaling": {"mode": "Utilization", "minReplicas": 0, "maxReplicas": 3}, "gateway": {"enabled": False}},
     "spec.scaling.minReplicas"),
    ({"scaling": {"minReplicas": 0}, "gateway": {"enabled": False}}, "spec.scaling.minReplicas"),
    # A replica with no CPU or memory is priced 0 USD and never counts against a budget.
    ({"resources": {"cpu": "0"}}, "spec.resources.cpu"),
    ({"resources": {"cpu": "0m"}}, "spec.resources.cpu"),
    ({"resources": {"cpu": "0.000"}}, "spec.resources.cpu"),
    ({"resources": {"cpu": 0}}, "spec.resources.cpu"),
    ({"resources": {"memory": "0"}}, "spec.resources.memory"),
    ({"resources": {"memory": "0Gi"}}, "spec.resources.memory"),
    ({"resources": {"memory": 0}}, "spec.resources.memory"),
    # Engine: the enum, and what the runtime cannot run (OpenVINO has no FP16 on CPU; a GPU replica runs torch).
    ({"runtime": {"engine": "tensorrt"}}, "spec.runtime.engine"),
    ({"runtime": {"engine": "OpenVINO"}}, "spec.runtime.engine"),
    ({"runtime": {"engine": "openvino", "precision": "FP16"}}, "spec.runtime.engine"),
    ({"runtime": {"engine": "openvino"}, "resources": {"gpu": {"count": 1, "type": "nvidia-l4"}}},
     "spec.runtime.engine"),
    # A GPU type without a count (count unset is 0): no GPU requested or selected, yet priced as if (user trial).
    ({"resources": {"gpu": {"type": "nvidia-a100"}}}, "spec.resources.gpu.count"),
], ids=["fixed-outside-bounds", "unknown-runtime-field", "unknown-scaling-field", "scaling-not-object",
        "precision-enum", "model-name-pattern", "tier-enum", "instance-count-range", "preferred-above-max",
        "cpu-pattern", "memory-pattern", "utilization-min-zero", "predictive-min-zero", "cpu-zero", "cpu-zero-milli",
        "cpu-zero-decimal", "cpu-zero-int", "memory-zero", "memory-zero-gi", "memory-zero-int", "engine-enum",
        "engine-enum-case", "openvino-fp16", "openvino-gpu", "gpu-type-without-count"])
def test_every_reader_refuses_what_the_crd_refuses_naming_the_same_field(spec: dict[str, Any], field: str) -> None:
    assert readers(spec) == [("parse_isvc", field), ("ScalingPolicy", field), ("RuntimeConfig", field)]


def test_engine_defaults_to_torch_and_takes_openvino_on_cpu_replicas() -> None:
    assert parse_spec({}).runtime.engine == "torch"
    assert parse_spec({"runtime": {"engine": None}}).runtime.engine == "torch"  # null = the default
    for precision in ("FP32", "BF16", "INT8"):
        spec = parse_spec({"runtime": {"engine": "openvino", "precision": precision},
                           "resources": {"gpu": {"count": 0}}})
        assert (spec.runtime.engine, spec.runtime.precision) == ("openvino", precision)
    # torch keeps every precision, GPUs included.
    gpu = parse_spec({"runtime": {"engine": "torch", "precision": "FP16"},
                      "resources": {"gpu": {"count": 1, "type": "nvidia-l4"}}})
    assert (gpu.runtime.engine, gpu.resources.gpu_count) == ("torch", 1)


@pytest.mark.parametrize(("spec", "fix"), [
    ({"runtime": {"engine": "tensorrt"}}, "use torch, openvino"),
    ({"runtime": {"engine": "openvino", "precision": "FP16"}}, "use precision FP32, BF16 or INT8 with openvino, or "
                                                              "engine torch"),
    ({"runtime": {"engine": "openvino"}, "resources": {"gpu": {"count": 2, "type": "nvidia-l4"}}},
     "use engine torch with GPUs, or gpu.count 0 with openvino"),
], ids=["enum", "fp16", "gpu"])
def test_engine_errors_name_the_fix(spec: dict[str, Any], fix: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        parse_spec(spec)
    assert info.value.field == "spec.runtime.engine" and fix in info.value.message


def test_engines_are_the_runtime_engine_values() -> None:
    from modalscale.api.inferenceservice import ENGINES
    from modalscale.runtime.repo_config import Engine

    assert ENGINES == tuple(e.value for e in Engine)


def test_fixed_mode_may_still_hold_zero_replicas() -> None:
    """Fixed mode says its own count (0 included): only the modes that need a replica's metrics refuse min 0."""
    (_, isvc), (_, policy), _ = readers({"scaling": {"mode": "Fixed", "replicas": 0, "minReplicas": 0}})
    assert (isvc.scaling.min_replicas, isvc.scaling.replicas, policy.replicas) == (0, 0, 0)
    assert parse_spec({"resources": {"cpu": "1m", "memory": "1Mi"}}).resources.cpu == "1m"


NAMES_REFUSED = [
    ("my.model.v2", "dots: not a DNS-1035 label"),
    ("1abc", "starts with a digit"),
    ("a" * 64, "64 characters: over the 63 of a Service name and a label value"),
    ("a" * 70, "70 characters"),
    ("Vision", "upper case"),
    ("vision-", "ends with a dash"),
    ("vision\n", "a trailing newline (Python's $ matched before it; found by an adversarial probe)"),
]


@pytest.mark.parametrize("name", [n for n, _ in NAMES_REFUSED], ids=[w for _, w in NAMES_REFUSED])
def test_a_name_that_cannot_be_a_service_name_or_label_value_is_refused_naming_metadata_name(name: str) -> None:
    """The name becomes the Service's (DNS-1035 label, <= 63) and the pods' label value (<= 63)."""
    with pytest.raises(InvalidSpec) as info:
        parse_isvc({"metadata": {"name": name, "namespace": "ml"}, "spec": {}})
    assert info.value.field == "metadata.name"
    assert "DNS-1035" in info.value.message and "63" in info.value.message and "rename" in info.value.message


@pytest.mark.parametrize("name", ["a", "vision-chat", "v2-model", "a" * 63])
def test_a_dns_1035_label_of_at_most_63_characters_is_a_good_name(name: str) -> None:
    # Without the gateway (its replicas' Service <name>-replicas needs 9 more: test_isvc_child_names.py).
    spec = {"gateway": {"enabled": False}}
    assert parse_isvc({"metadata": {"name": name, "namespace": "ml"}, "spec": spec}).name == name


def test_an_explicit_null_takes_the_crd_default_in_every_reader() -> None:
    """The apiserver prunes nulls before defaulting; ScalingPolicy.from_spec used to fail on them."""
    spec = {"scaling": {"minReplicas": None, "maxReplicas": None, "mode": None},
            "runtime": {"instanceCount": None, "maxBatchSize": None}}
    (_, isvc), (_, policy), (_, runtime) = readers(spec)
    assert (isvc.scaling.min_replicas, isvc.scaling.max_replicas, isvc.scaling.mode) == (1, 10, "Predictive")
    assert (policy.min_replicas, policy.max_replicas, policy.slots_per_replica) == (1, 10, 1)
    assert (runtime.instance_count, runtime.max_batch_size) == (1, 8)


@pytest.mark.parametrize(("mode", "expected"), [
    ("Predictive", (90, 60, 32)),
    ("Utilization", (70, 300, 4)),
    ("Fixed", (70, 300, 4)),
    (None, (90, 60, 32)),  # the mode's own default, Predictive
])
def test_unset_utilization_target_scale_down_window_and_step_take_the_modes_defaults(
        mode: str | None, expected: tuple[int, int, int]) -> None:
    scaling: dict[str, Any] = {"mode": mode, "targetUtilizationPercent": None}  # a null reads as unset
    if mode == "Fixed":
        scaling["replicas"] = 2
    s = parse_spec({"scaling": scaling}).scaling
    assert (s.target_utilization_percent, s.scale_down_stabilization_s, s.max_step_replicas) == expected
    policy = ScalingPolicy.from_spec({"scaling": scaling})
    assert (policy.target_utilization_percent, policy.scale_down_stabilization_s, policy.max_step_replicas) == expected


@pytest.mark.parametrize("mode", ["Predictive", "Utilization"])
def test_a_set_utilization_target_scale_down_window_or_step_is_kept_whatever_the_mode(mode: str) -> None:
    s = parse_spec({"scaling": {"mode": mode, "targetUtilizationPercent": 55, "scaleDownStabilizationSeconds": 300,
                                "maxStepReplicas": 4}}).scaling
    assert (s.target_utilization_percent, s.scale_down_stabilization_s, s.max_step_replicas) == (55, 300, 4)
    s = parse_spec({"scaling": {"mode": mode, "scaleDownStabilizationSeconds": 0}}).scaling
    assert s.scale_down_stabilization_s == 0


def test_the_simulators_predictive_policy_is_what_an_unset_predictive_spec_ships() -> None:
    """The Pareto benchmark's figures are the product's defaults (issue 20: "the defaults are what ships")."""
    from modalscale.autoscaler.simulate import SimulationConfig

    config = SimulationConfig(target_p95_ms=2000.0, min_replicas=1, max_replicas=200)
    simulated = config.scaling_policy(ScalingMode.PREDICTIVE)
    shipped = ScalingPolicy.from_spec({"scaling": {"targetP95LatencyMilliseconds": 2000, "minReplicas": 1,
                                                   "maxReplicas": 200}})
    fields = ("mode", "min_replicas", "max_replicas", "target_p95_latency_ms", "target_utilization_percent",
              "tolerance_percent", "scale_up_stabilization_s", "scale_down_stabilization_s", "max_step_replicas",
              "decision_interval_s", "burst_aware", "forecaster")
    assert {f: getattr(simulated, f) for f in fields} == {f: getattr(shipped, f) for f in fields}


def test_the_policy_and_the_runtime_are_built_from_the_same_typed_pieces() -> None:
    spec = {"scaling": {"mode": "Utilization", "minReplicas": 2, "maxReplicas": 7, "targetP95LatencyMilliseconds": 250,
                        "decisionIntervalSeconds": 30},
            "runtime": {"instanceCount": 3, "maxBatchSize": 16, "precision": "INT8",
                        "dynamicBatching": {"preferredBatchSizes": [4, 8], "maxQueueDelayMicroseconds": 500}},
            "resources": {"gpu": {"count": 1, "type": "nvidia-l4"}}}
    s = parse_spec(spec)
    policy = ScalingPolicy.from_typed(s.scaling, s.runtime, default_service_scv=0.5)
    assert policy == ScalingPolicy.from_spec(spec, default_service_scv=0.5)
    assert (policy.mode.value, policy.min_replicas, policy.max_replicas, policy.target_p95_latency_ms,
            policy.decision_interval_s, policy.slots_per_replica) == ("Utilization", 2, 7, 250.0, 30.0, 3)
    runtime = RuntimeConfig.from_typed(s.model, s.runtime, s.resources)
    assert runtime == RuntimeConfig.from_isvc_spec(spec)
    assert (runtime.instance_count, runtime.max_batch_size, runtime.preferred_batch_sizes,
            runtime.max_queue_delay_microseconds, runtime.precision.value, runtime.gpu_count) == (
        3, 16, (4, 8), 500, "INT8", 1)


def test_the_runtime_generates_a_repository_only_for_the_built_in_model() -> None:
    with pytest.raises(InvalidSpec) as info:
        RuntimeConfig.from_isvc_spec({"model": {"source": "URI", "uri": "s3://b/m"}})
    assert info.value.field == "spec.model.source"


def test_the_known_fields_are_exactly_the_crd_schema() -> None:
    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    found: dict[str, frozenset[str]] = {}

    def walk(node: dict[str, Any], path: str) -> None:
        if node.get("type") == "object" and "properties" in node:
            found[path] = frozenset(node["properties"])
            for key, child in node["properties"].items():
                walk(child, f"{path}.{key}")

    walk(schema, "spec")
    assert found == KNOWN_FIELDS


def test_every_example_manifest_parses() -> None:
    for path in sorted((REPO / "crds" / "examples").glob("inferenceservice-*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            if doc and doc.get("kind") == "InferenceService":
                assert parse_isvc(doc).name == doc["metadata"]["name"], path


@pytest.mark.parametrize(("spec", "field"), [
    ({"resources": {"cpu": "2\n"}}, "spec.resources.cpu"),
    ({"resources": {"memory": "8Gi\n"}}, "spec.resources.memory"),
    ({"resources": {"cpu": " 2"}}, "spec.resources.cpu"),
    ({"model": {"name": "abc\n"}}, "spec.model.name"),
], ids=["cpu", "memory", "cpu-leading-space", "model-name"])
def test_a_value_with_a_trailing_newline_or_padding_is_refused_as_the_crds_pattern_refuses_it(
        spec: dict[str, Any], field: str) -> None:
    """Found by an adversarial probe (6 Dec 2026): the parser's patterns ended in ``$``, which in Python matches
    before a trailing newline, so ``"2\n"`` was accepted (and kept) where the apiserver's RE2 pattern refuses it;
    ``modalscale cost diff`` reads local files with this parser and no apiserver."""
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(body(**spec))
    assert info.value.field == field


@pytest.mark.parametrize(("document", "field"), [
    ({"metadata": {"name": "svc", "generation": "abc"}, "spec": {}}, "metadata.generation"),
    ({"metadata": {"name": "svc", "generation": True}, "spec": {}}, "metadata.generation"),
    ({"metadata": {"name": "svc", "labels": ["team"]}, "spec": {}}, "metadata.labels"),
    ({"metadata": {"name": "svc", "labels": "team=a"}, "spec": {}}, "metadata.labels"),
    ({"metadata": {"name": "svc", "labels": [1, 2]}, "spec": {}}, "metadata.labels"),
    ({"metadata": {"name": "svc", "labels": {"team": 1}}, "spec": {}}, "metadata.labels"),
    ({"metadata": "x", "spec": {}}, "metadata"),
    (["not", "an", "object"], "(document)"),
], ids=["generation-text", "generation-bool", "labels-list", "labels-text", "labels-numbers", "label-value-number",
        "metadata-text", "document-list"])
def test_metadata_of_the_wrong_shape_is_refused_naming_its_field(document: Any, field: str) -> None:
    """Found by an adversarial probe (6 Dec 2026): ``modalscale cost diff`` blamed ``spec.resources`` for a bad
    ``metadata.generation`` or ``labels``, or raised ``TypeError`` / ``AttributeError`` (a manifest has no
    apiserver to check these shapes)."""
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(document)
    assert info.value.field == field


SUB_PATH_RULE = "!self.startsWith('/') && !self.matches('(^|/)[.][.](/|$)')"
"""The CRD's rule on ``spec.model.pvc.subPath``: the API server's own for a volume mount's ``subPath``."""


@pytest.mark.parametrize("sub_path", ["/models", "..", "../models", "repo/../../etc", "repo/.."])
def test_a_pvc_sub_path_a_volume_mount_cannot_take_is_refused_naming_the_field(sub_path: str) -> None:
    """The Deployment mounts the claim at ``subPath``; the API server refuses an absolute one or one with a ``..``
    element (``ValidateVolumeMounts``: "must be a relative path" / "must not contain '..'"). Admitted, the service
    was refused only when its Deployment was, as ``ChildRefused`` on field ``spec`` ("fix spec"), not on the field."""
    spec = {"model": {"source": "PVC", "pvc": {"claimName": "models", "subPath": sub_path}}}
    with pytest.raises(InvalidSpec) as err:
        parse_isvc(body(**spec))
    assert err.value.field == "spec.model.pvc.subPath"
    assert "relative" in str(err.value)
    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    pvc = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["model"]["properties"]["pvc"]
    assert SUB_PATH_RULE in [r["rule"] for r in pvc["properties"]["subPath"].get("x-kubernetes-validations", [])]


@pytest.mark.parametrize("sub_path", ["", "repo", "models/v3", "..repo", "repo..", "a/..b/c"])
def test_a_relative_pvc_sub_path_without_a_dotdot_element_is_a_good_one(sub_path: str) -> None:
    spec = {"model": {"source": "PVC", "pvc": {"claimName": "models", "subPath": sub_path}}}
    assert parse_isvc(body(**spec)).model.pvc_sub_path == sub_path


GPU_TYPE_NEEDS_COUNT_RULE = "!has(self.type) || (has(self.count) && self.count > 0)"
"""The CRD's rule on each ``resources.gpu`` object (``spec``'s and the image encoder pool's): a GPU type needs a
count of at least 1. It cannot be ``self.count > 0 || !has(self.type)`` on its own terms alone: ``count`` has the
schema ``default: 0``, so the apiserver fills an unset count in before the rule runs and ``has(self.count)`` is always
true there; the rule therefore refuses a type with count 0 whether the 0 was written or defaulted."""


def _gpu_schema(path: str) -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    node = version["schema"]["openAPIV3Schema"]
    for part in [*path.split("."), "gpu"]:
        node = node["properties"][part]
    return dict(node)


@pytest.mark.parametrize("path", ["spec.resources", "spec.stages.imageEncoder.resources"])
@pytest.mark.parametrize("gpu", [{"type": "nvidia-a100"}, {"type": "nvidia-a100", "count": None},
                                 {"type": "nvidia-a100", "count": 0}], ids=["count-unset", "count-null", "count-0"])
def test_a_gpu_type_without_a_count_is_refused_naming_the_count_and_the_fix(path: str, gpu: dict[str, Any]) -> None:
    """Found by a user trial (7 Dec 2026): ``gpu: {type: nvidia-a100}`` without ``count`` was admitted and meant no
    GPU (count defaults to 0): the pods got no GPU request and no GPU product selector, and ``modalscale cost diff``
    reported a saving. The CRD's rule checked only the other direction (a count needs a type). Refused now by the
    parser and by the CRD, naming the count and the fix."""
    spec: dict[str, Any] = {"resources": {"gpu": gpu}}
    if path != "spec.resources":
        spec = {"stages": {"imageEncoder": spec}}
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(body(**spec))
    assert info.value.field == f"{path}.gpu.count"
    assert "'nvidia-a100'" in info.value.message
    assert "count: 1" in info.value.message and "remove" in info.value.message
    schema = _gpu_schema(path)
    assert schema["properties"]["count"].get("default") == 0  # why the rule cannot tell unset from 0 (see the rule)
    (rule,) = [r for r in schema["x-kubernetes-validations"] if r["rule"] == GPU_TYPE_NEEDS_COUNT_RULE]
    assert rule["fieldPath"] == ".count" and "count: 1" in rule["message"] and "remove" in rule["message"]


@pytest.mark.parametrize("gpu", [{}, {"count": 0}, {"count": None}, {"count": 2, "type": "nvidia-a100"}])
def test_no_gpu_or_a_gpu_count_with_its_type_is_still_a_good_spec(gpu: dict[str, Any]) -> None:
    resources = parse_isvc(body(resources={"gpu": gpu})).resources
    assert (resources.gpu_count, resources.gpu_type) == (gpu.get("count") or 0, gpu.get("type"))


def _runtime_schema() -> dict[str, Any]:
    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    return dict(version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["runtime"])


RUNTIME_IMAGE_TAG_RULE = "!self.contains('@') && !self.matches(':[^/]*$')"
"""The CRD's rule on ``spec.runtime.image`` that says where a tag goes (its ``pattern`` refuses the rest)."""

WITH_TAG_OR_DIGEST = ["nvcr.io/nvidia/tritonserver:24.10-py3", "tritonserver:latest", "host:5000/triton:v1",
                      "nvcr.io/nvidia/tritonserver@sha256:" + "a" * 64, "host:5000"]


@pytest.mark.parametrize("image", WITH_TAG_OR_DIGEST)
def test_a_runtime_image_with_a_tag_or_digest_is_refused_saying_the_tag_goes_in_the_version(image: str) -> None:
    """Found by a user trial (7 Dec 2026): ``image: "nvcr.io/nvidia/tritonserver:24.10-py3"`` was admitted, and
    the Deployment got ``...:24.10-py3:24.10-py3`` (the container's image is ``<image>:<version>``), which no
    registry serves; the pods never started."""
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(body(runtime={"image": image}))
    assert info.value.field == "spec.runtime.image"
    assert "spec.runtime.version" in info.value.message and "nvcr.io/nvidia/tritonserver" in info.value.message
    if image == "host:5000":  # the grammar reads repository host, tag 5000; it may have been meant as a registry
        assert "host:5000/<repository>" in info.value.message
    image_schema = _runtime_schema()["properties"]["image"]
    (rule,) = [r for r in image_schema.get("x-kubernetes-validations", []) if r["rule"] == RUNTIME_IMAGE_TAG_RULE]
    assert "runtime.version" in rule["message"]
    assert re.fullmatch(image_schema["pattern"], image) is None


NOT_IMAGE_NAMES = ["my image", "Nvidia/Triton", "nvcr.io/nvidia/TritonServer", "/triton", "triton/",
                   "a//b", "triton\n", " triton", "host:port/triton", "a" * 256]


@pytest.mark.parametrize("image", NOT_IMAGE_NAMES)
def test_a_runtime_image_that_is_not_a_repository_name_is_refused_by_the_parser_and_the_crds_pattern(
        image: str) -> None:
    """``image: "my image"`` was admitted too (user trial, 7 Dec 2026): the kubelet cannot pull it."""
    with pytest.raises(InvalidSpec) as info:
        parse_isvc(body(runtime={"image": image}))
    assert info.value.field == "spec.runtime.image"
    assert "e.g. nvcr.io/nvidia/tritonserver" in info.value.message
    image_schema = _runtime_schema()["properties"]["image"]
    assert len(image) > image_schema["maxLength"] or re.fullmatch(image_schema["pattern"], image) is None


GOOD_IMAGE_NAMES = ["nvcr.io/nvidia/tritonserver", "host:5000/repo", "localhost:5000/team/triton", "triton",
                    "modalscale/runtime-cpu", "registry.example.com/a/b_c/d__e/f--g.h", "[::1]:5000/triton",
                    "Registry.Example.COM/ml/triton", "10.0.0.7:443/x", "a" * 255]


@pytest.mark.parametrize("image", GOOD_IMAGE_NAMES)
def test_a_repository_name_with_a_registry_and_port_is_a_good_runtime_image(image: str) -> None:
    isvc = parse_isvc(body(runtime={"image": image, "version": "24.10-py3"}))
    assert isvc.image == f"{image}:24.10-py3"
    image_schema = _runtime_schema()["properties"]["image"]
    assert re.fullmatch(image_schema["pattern"], image) and len(image) <= image_schema["maxLength"]
    assert not image_schema["default"] or re.fullmatch(image_schema["pattern"], image_schema["default"])


@pytest.mark.parametrize(("reference", "ok"), [
    ("registry.example.com/models/captioner:v3", True), ("host:5000/models/captioner", True),
    ("models/captioner@sha256:" + "0" * 64, True), ("models/captioner:v3@sha256:" + "0" * 64, True),
    ("my models:v3", False), ("models/captioner:v3:v4", False), ("models/captioner:", False),
    ("models/captioner@sha256:xyz", False), ("Models/Captioner:v3", False),
])
def test_a_model_image_reference_must_be_an_image_reference(reference: str, ok: bool) -> None:
    """The same kind of fault on ``spec.model.image.reference`` (a whole reference, tag and digest allowed): any
    string of 1-512 characters was admitted, and the image volume then failed to pull."""
    spec = {"model": {"source": "Image", "image": {"reference": reference}}}
    if ok:
        assert parse_isvc(body(**spec)).model.image_reference == reference
    else:
        with pytest.raises(InvalidSpec) as info:
            parse_isvc(body(**spec))
        assert info.value.field == "spec.model.image.reference" and "e.g." in info.value.message
    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["model"]
    assert bool(re.fullmatch(schema["properties"]["image"]["properties"]["reference"]["pattern"], reference)) is ok


def test_the_crds_image_patterns_are_the_parsers() -> None:
    from modalscale.api.inferenceservice import IMAGE_REFERENCE_PATTERN, IMAGE_REPOSITORY_PATTERN

    crd = yaml.safe_load((REPO / "crds" / "inferenceservices.modalscale.io.yaml").read_text())
    (version,) = crd["spec"]["versions"]
    spec = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert spec["runtime"]["properties"]["image"]["pattern"] == IMAGE_REPOSITORY_PATTERN
    assert spec["model"]["properties"]["image"]["properties"]["reference"]["pattern"] == IMAGE_REFERENCE_PATTERN
