"""Pure generation of the Triton model repository from a RuntimeConfig / InferenceService spec."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from modalscale.api.errors import InvalidSpec
from modalscale.runtime.repo_config import (
    EMBEDDING_DIM,
    Precision,
    RuntimeConfig,
    build_repository,
    from_configmap_data,
    model_parameters,
    render_config_pbtxt,
    render_router_pbtxt,
    server_arguments,
    to_configmap_data,
)

EXAMPLES = Path(__file__).resolve().parents[3] / "crds" / "examples"


def test_from_empty_spec_takes_crd_defaults() -> None:
    cfg = RuntimeConfig.from_isvc_spec({})
    assert cfg == RuntimeConfig()
    assert (cfg.model_name, cfg.instance_count, cfg.intra_op_threads, cfg.max_batch_size) == ("multimodal", 1, 1, 8)
    assert cfg.max_queue_delay_microseconds == 2000
    assert cfg.modality_aware_batching is True and cfg.embedding_cache is True and cfg.response_cache is False
    assert cfg.precision is Precision.FP32 and cfg.instance_kind == "KIND_CPU"


def test_from_predictive_example_maps_camel_case_fields() -> None:
    spec = yaml.safe_load((EXAMPLES / "inferenceservice-predictive.yaml").read_text())["spec"]
    cfg = RuntimeConfig.from_isvc_spec(spec)
    assert cfg.instance_count == 2
    assert cfg.intra_op_threads == 1
    assert cfg.max_batch_size == 8
    assert cfg.preferred_batch_sizes == (4, 8)
    assert cfg.max_queue_delay_microseconds == 2000
    assert cfg.response_cache is True
    assert cfg.precision is Precision.INT8
    assert cfg.gpu_count == 1 and cfg.instance_kind == "KIND_GPU"


@pytest.mark.parametrize("example", sorted(p.name for p in EXAMPLES.glob("inferenceservice-*.yaml")))
def test_every_shipped_builtin_example_parses(example: str) -> None:
    spec = yaml.safe_load((EXAMPLES / example).read_text())["spec"]
    if spec.get("model", {}).get("source", "BuiltIn") != "BuiltIn":
        with pytest.raises(InvalidSpec, match="^spec.model.source:"):
            RuntimeConfig.from_isvc_spec(spec)
        return
    text = render_config_pbtxt(RuntimeConfig.from_isvc_spec(spec))
    assert text.startswith(f'name: "{spec.get("model", {}).get("name", "multimodal")}"')


@pytest.mark.parametrize(("spec", "field"), [
    ({"runtime": {"maxBatchSize": "8"}}, "spec.runtime.maxBatchSize"),
    ({"runtime": {"maxBatchSize": 257}}, "spec.runtime.maxBatchSize"),
    ({"runtime": {"instanceCount": 0}}, "spec.runtime.instanceCount"),
    ({"runtime": {"intraOpThreads": True}}, "spec.runtime.intraOpThreads"),
    ({"runtime": {"precision": "INT4"}}, "spec.runtime.precision"),
    ({"runtime": {"responseCache": "yes"}}, "spec.runtime.responseCache"),
    ({"runtime": {"maxBatchSze": 8}}, "spec.runtime.maxBatchSze"),
    ({"runtime": {"dynamicBatching": {"preferredBatchSizes": [8, 4]}}},
     "spec.runtime.dynamicBatching.preferredBatchSizes"),
    ({"runtime": {"maxBatchSize": 4, "dynamicBatching": {"preferredBatchSizes": [8]}}},
     "spec.runtime.dynamicBatching.preferredBatchSizes"),
    ({"runtime": {"dynamicBatching": {"maxQueueDelayMicroseconds": -1}}},
     "spec.runtime.dynamicBatching.maxQueueDelayMicroseconds"),
    ({"runtime": []}, "spec.runtime"),
    ({"model": {"source": "PVC", "pvc": {"claimName": "x"}}}, "spec.model.source"),
    ({"resources": {"gpu": {"count": 17}}}, "spec.resources.gpu.count"),
], ids=["string-int", "too-large", "zero-instances", "bool-as-int", "bad-precision", "string-bool", "typo",
        "descending", "above-max-batch", "negative-delay", "runtime-not-mapping", "not-builtin", "gpus"])
def test_invalid_spec_names_the_field(spec: dict, field: str) -> None:
    with pytest.raises(InvalidSpec) as info:
        RuntimeConfig.from_isvc_spec(spec)
    assert str(info.value).startswith(field + ":")


def test_config_is_frozen() -> None:
    cfg = RuntimeConfig()
    with pytest.raises(AttributeError):
        cfg.instance_count = 3  # type: ignore[misc]


def test_pbtxt_has_name_backend_batching_and_io() -> None:
    cfg = RuntimeConfig(model_name="mm", max_batch_size=16, preferred_batch_sizes=(4, 16),
                        max_queue_delay_microseconds=500, instance_count=3)
    text = render_config_pbtxt(cfg)
    assert 'name: "mm"\nbackend: "python"\nmax_batch_size: 16\n' in text
    assert "dynamic_batching {\n  preferred_batch_size: [ 4, 16 ]\n  max_queue_delay_microseconds: 500\n}" in text
    assert "instance_group [\n  {\n    count: 3\n    kind: KIND_CPU\n  }\n]" in text
    images = text[text.index('name: "IMAGES"'):text.index('name: "TEXT"')]
    assert "data_type: TYPE_STRING" in images and "dims: [ -1 ]" in images
    assert "optional: true" in images and "allow_ragged_batch: true" in images
    assert f'name: "EMBEDDING"\n    data_type: TYPE_FP32\n    dims: [ {EMBEDDING_DIM} ]' in text
    assert 'name: "MODALITY"\n    data_type: TYPE_STRING\n    dims: [ 1 ]' in text
    assert 'name: "IMAGE_CLASSES"\n    data_type: TYPE_INT32\n    dims: [ -1 ]' in text
    assert "response_cache" not in text


def test_unbatched_config_declares_the_leading_one_and_no_batcher() -> None:
    text = render_config_pbtxt(RuntimeConfig(max_batch_size=0))
    assert "max_batch_size: 0" in text
    assert "dynamic_batching" not in text and "allow_ragged_batch" not in text
    assert "dims: [ 1, -1 ]" in text and "dims: [ 1, 1 ]" in text and f"dims: [ 1, {EMBEDDING_DIM} ]" in text


def test_dynamic_batching_switched_off_keeps_max_batch_size() -> None:
    text = render_config_pbtxt(RuntimeConfig(dynamic_batching=False))
    assert "max_batch_size: 8" in text and "dynamic_batching" not in text


def test_response_cache_and_gpu_kind() -> None:
    cfg = RuntimeConfig(response_cache=True, gpu_count=2)
    text = render_config_pbtxt(cfg)
    assert "response_cache {\n  enable: true\n}" in text
    assert "kind: KIND_GPU" in text
    assert server_arguments(cfg) == ["--cache-config", "local,size=67108864"]
    assert server_arguments(RuntimeConfig()) == []


def test_parameters_carry_threads_precision_and_switches() -> None:
    cfg = RuntimeConfig(intra_op_threads=2, precision=Precision.BF16, modality_aware_batching=False,
                        embedding_cache=False)
    params = model_parameters(cfg)
    assert params["intra_op_threads"] == "2"
    assert params["precision"] == "BF16"
    assert params["modality_aware_batching"] == "false"
    assert params["embedding_cache"] == "false"
    text = render_config_pbtxt(cfg)
    assert 'parameters {\n  key: "precision"\n  value: { string_value: "BF16" }\n}' in text
    assert text.count("parameters {") == len(params)


def test_repository_without_router_has_config_and_model_py_importing_modalscale() -> None:
    cfg = RuntimeConfig(model_name="vision", modality_aware_batching=False)
    files = build_repository(cfg)
    assert set(files) == {"vision/config.pbtxt", "vision/1/model.py"}
    assert files["vision/config.pbtxt"] == render_config_pbtxt(cfg)
    model_py = files["vision/1/model.py"]
    assert "from modalscale.runtime.model.triton_model import TritonPythonModel" in model_py
    compile(model_py, "model.py", "exec")
    assert set(build_repository(RuntimeConfig(model_name="vision", max_batch_size=0))) == set(files)


def test_modality_aware_repository_routes_to_one_batched_model_per_modality() -> None:
    cfg = RuntimeConfig(model_name="vision", response_cache=True, max_batch_size=4)
    files = build_repository(cfg)
    assert set(files) == {f"{m}/{f}" for m in ("vision", "vision_image", "vision_text", "vision_image_text")
                          for f in ("config.pbtxt", "1/model.py")}
    router = files["vision/config.pbtxt"]
    assert router == render_router_pbtxt(cfg)
    assert "max_batch_size: 0" in router and "dims: [ 1, -1 ]" in router and "count: 8" in router
    assert "response_cache {\n  enable: true\n}" in router
    assert 'key: "route_image_text"\n  value: { string_value: "vision_image_text" }' in router
    assert "from modalscale.runtime.model.router import TritonPythonModel" in files["vision/1/model.py"]
    compile(files["vision/1/model.py"], "model.py", "exec")
    text_model = files["vision_text/config.pbtxt"]
    assert text_model == render_config_pbtxt(cfg.replace(model_name="vision_text", response_cache=False),
                                             preload=("text",))
    assert 'key: "preload"\n  value: { string_value: "text" }' in text_model
    assert "max_batch_size: 4" in text_model and "dynamic_batching" in text_model
    assert "response_cache" not in text_model


@pytest.mark.parametrize(("max_batch_size", "instances"), [(1, 2), (4, 8), (8, 16), (64, 16)])
def test_router_instances_bound(max_batch_size: int, instances: int) -> None:
    assert RuntimeConfig(max_batch_size=max_batch_size).router_instances == instances


def test_generation_is_deterministic() -> None:
    cfg = RuntimeConfig(preferred_batch_sizes=(2, 4), precision=Precision.INT8)
    assert build_repository(cfg) == build_repository(RuntimeConfig(preferred_batch_sizes=(2, 4),
                                                                    precision=Precision.INT8))


def test_configmap_data_round_trips_with_double_underscore_keys() -> None:
    files = build_repository(RuntimeConfig(model_name="vision"))
    data = to_configmap_data(files)
    assert "vision__1__model.py" in data and "vision_image_text__config.pbtxt" in data
    assert all("/" not in key for key in data)
    assert from_configmap_data(data) == files
    with pytest.raises(ValueError, match="must not contain"):
        to_configmap_data({"bad__name/config.pbtxt": ""})


def test_cli_flags_override_the_isvc_file(tmp_path: Path) -> None:
    import argparse

    from modalscale.runtime.cli import add_parser, config_from_args

    parser = argparse.ArgumentParser()
    add_parser(parser.add_subparsers())
    example = EXAMPLES / "inferenceservice-predictive.yaml"
    args = parser.parse_args(["runtime", "render", "--out", str(tmp_path), "--from-isvc", str(example),
                              "--precision", "BF16", "--no-response-cache", "--preferred-batch-sizes", "2,8"])
    cfg = config_from_args(args)
    assert cfg.precision is Precision.BF16 and cfg.response_cache is False
    assert cfg.preferred_batch_sizes == (2, 8)
    assert cfg.instance_count == 2 and cfg.gpu_count == 1  # from the file
    args = parser.parse_args(["runtime", "render", "--out", str(tmp_path), "--max-batch-size", "2",
                              "--preferred-batch-sizes", "4"])
    with pytest.raises(InvalidSpec, match="preferredBatchSizes"):
        config_from_args(args)
