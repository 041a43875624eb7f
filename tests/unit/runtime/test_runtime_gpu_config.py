"""The GPU layout's generated repository (spec.resources.gpu.count > 0): KIND_GPU encoder models with FP16, fixed
image sizes and encoder-level dynamic batching behind a CPU orchestrator (config generation only; no GPU here)."""

from __future__ import annotations

import pytest

from modalscale.runtime.model import encoders
from modalscale.runtime.model.batching import fixed_side
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import (
    GPU_ENCODER_MAX_BATCH,
    GPU_TEXT_ENCODER_MAX_BATCH,
    IMAGE_FEATURE_DIM,
    TEXT_FEATURE_DIM,
    Precision,
    RuntimeConfig,
    build_repository,
    gpu_image_sides,
    gpu_precision,
    render_gpu_encoder_pbtxt,
)

GPU = RuntimeConfig(gpu_count=2, precision=Precision.FP16, instance_count=1, max_queue_delay_microseconds=500)


def _params(pbtxt: str) -> dict[str, str]:
    out = {}
    for block in pbtxt.split("parameters {")[1:]:
        key = block.split('key: "', 1)[1].split('"', 1)[0]
        out[key] = block.split('string_value: "', 1)[1].split('"', 1)[0]
    return out


def test_gpu_count_selects_the_encoder_layout() -> None:
    files = build_repository(GPU)
    assert sorted(files) == ["multimodal/1/model.py", "multimodal/config.pbtxt",
                             "multimodal_image_encoder/1/model.py", "multimodal_image_encoder/config.pbtxt",
                             "multimodal_text_encoder/1/model.py", "multimodal_text_encoder/config.pbtxt"]
    assert "gpu_models import OrchestratorModel as TritonPythonModel" in files["multimodal/1/model.py"]
    assert "gpu_models import ImageEncoderModel as TritonPythonModel" in files["multimodal_image_encoder/1/model.py"]
    assert "gpu_models import TextEncoderModel as TritonPythonModel" in files["multimodal_text_encoder/1/model.py"]
    assert "KIND_GPU" not in "".join(build_repository(GPU.replace(gpu_count=0)).values())


@pytest.mark.parametrize("encoder", ["image_encoder", "text_encoder"])
def test_encoder_models_are_kind_gpu_fp16_with_dynamic_batching(encoder: str) -> None:
    text = build_repository(GPU)[f"multimodal_{encoder}/config.pbtxt"]
    assert text == render_gpu_encoder_pbtxt(GPU, encoder)
    assert f'name: "multimodal_{encoder}"' in text and 'backend: "python"' in text
    most = GPU_ENCODER_MAX_BATCH if encoder == "image_encoder" else GPU_TEXT_ENCODER_MAX_BATCH
    assert f"max_batch_size: {most}\n" in text and (GPU_ENCODER_MAX_BATCH, GPU_TEXT_ENCODER_MAX_BATCH) == (64, 128)
    assert "instance_group [\n  {\n    count: 1\n    kind: KIND_GPU\n    gpus: [ 0, 1 ]\n  }\n]" in text
    assert "dynamic_batching {\n  max_queue_delay_microseconds: 500\n}" in text
    assert "allow_ragged_batch: true" in text
    params = _params(text)
    assert params["precision"] == "FP16"
    assert params["preload"] == encoder.split("_")[0]


def test_encoder_tensors() -> None:
    image = render_gpu_encoder_pbtxt(GPU, "image_encoder")
    assert 'name: "PIXELS"\n    data_type: TYPE_FP16\n    dims: [ 3, -1, -1 ]' in image
    assert 'name: "VALID_HW"\n    data_type: TYPE_INT32\n    dims: [ 2 ]' in image
    assert f'name: "FEATURES"\n    data_type: TYPE_FP32\n    dims: [ {IMAGE_FEATURE_DIM} ]' in image
    text = render_gpu_encoder_pbtxt(GPU, "text_encoder")
    assert 'name: "TOKEN_IDS"\n    data_type: TYPE_INT64\n    dims: [ -1 ]' in text
    assert f'dims: [ {TEXT_FEATURE_DIM} ]' in text
    assert (IMAGE_FEATURE_DIM, TEXT_FEATURE_DIM) == (encoders.IMAGE_FEATURE_DIM, encoders.TEXT_FEATURE_DIM)
    with pytest.raises(ValueError, match="encoder must be one of"):
        render_gpu_encoder_pbtxt(GPU, "fusion")


def test_orchestrator_is_the_client_interface_on_cpu_with_fixed_image_sides_and_routes() -> None:
    text = build_repository(GPU.replace(cpu_cores=2.0))["multimodal/config.pbtxt"]
    assert "max_batch_size: 0" in text and "kind: KIND_CPU" in text and "KIND_GPU" not in text
    assert "count: 4\n" in text  # sized like the router: 2 per core
    assert 'name: "IMAGES"' in text and 'name: "EMBEDDING"' in text
    assert "dynamic_batching" not in text
    params = _params(text)
    assert params["image_bucket_sides"] == "128,256,384"
    assert params["route_image_encoder"] == "multimodal_image_encoder"
    assert params["route_text_encoder"] == "multimodal_text_encoder"
    assert params["preload"] == ""  # no encoder in the orchestrator
    settings = ModelSettings.from_model_config({"parameters": {k: {"string_value": v} for k, v in params.items()}})
    assert settings.image_bucket_sides == (128, 256, 384) and settings.preload == ()
    assert "response_cache" in build_repository(GPU.replace(response_cache=True))["multimodal/config.pbtxt"]


def test_precision_on_gpu_int8_becomes_fp16_others_stay() -> None:
    assert gpu_precision(GPU.replace(precision=Precision.INT8)) is Precision.FP16
    for p in (Precision.FP32, Precision.FP16, Precision.BF16):
        assert gpu_precision(GPU.replace(precision=p)) is p
    assert _params(render_gpu_encoder_pbtxt(GPU.replace(precision=Precision.INT8), "text_encoder"))["precision"] \
        == "FP16"


def test_fixed_image_sides_hold_every_resolution_bucket() -> None:
    assert gpu_image_sides(GPU) == (128, 256, 384)
    assert gpu_image_sides(GPU.replace(max_image_side_pixels=224)) == (128, 224)
    sides = gpu_image_sides(GPU)
    buckets = [(h, w) for h in range(32, 385, 32) for w in range(32, 385, 32)]
    assert {fixed_side(b, sides) for b in buckets} == set(sides)  # 144 buckets -> 3 shapes
    assert fixed_side((96, 160), sides) == 256 and fixed_side((128, 32), sides) == 128
    with pytest.raises(ValueError, match="exceeds"):
        fixed_side((416, 32), sides)
    with pytest.raises(ValueError, match="image_bucket_sides"):
        ModelSettings.from_model_config({"parameters": {"image_bucket_sides": {"string_value": "256,128"}}})
