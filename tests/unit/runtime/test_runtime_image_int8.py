"""The INT8 image encoder of engine openvino, used only for images whose resolution bucket is large enough
(``image_int8_min_side_pixels``): which images it gets (pure routing), how the threshold travels from the CLI and the
presets through the generated config.pbtxt to the model's settings, its validation, and that a config without it
renders exactly as before. The real quantized encoder is in tests/integration/runtime/test_runtime_openvino.py."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from torch import nn

from modalscale.api.errors import InvalidSpec
from modalscale.runtime import cli
from modalscale.runtime.model import ov_engine
from modalscale.runtime.model.calibration import (
    CALIBRATION_IMAGE_PHOTOS,
    CALIBRATION_IMAGE_SIDES,
    calibration_image_crops,
)
from modalscale.runtime.model.encoders import MultimodalEncoder
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import (
    PRESETS,
    Engine,
    Precision,
    RuntimeConfig,
    build_repository,
    config_flags,
    config_summary,
    model_parameters,
)

OV_INT8 = PRESETS["naive"].replace(engine=Engine.OPENVINO, precision=Precision.INT8)


def _parameters(pbtxt: str) -> dict[str, str]:
    out = {}
    lines = pbtxt.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("  key: "):
            key = json.loads(line.split(":", 1)[1])
            out[key] = json.loads(lines[i + 1].split("string_value:", 1)[1].strip().rstrip("}").strip())
    return out


def test_routing_takes_the_bucket_shorter_side() -> None:
    buckets = [(32, 32), (96, 128), (128, 96), (128, 384), (384, 288), (160, 160)]
    assert ov_engine.int8_image_rows(buckets, 128) == [False, False, False, True, True, True]
    assert ov_engine.int8_image_rows(buckets, 160) == [False, False, False, False, True, True]
    assert ov_engine.int8_image_rows(buckets, 0) == [False] * 6  # 0 = off: every image FP32
    assert ov_engine.int8_image_rows([], 128) == []


class _Recorder:
    """A compiled encoder's stand-in: remembers the batches it got and returns a constant feature map."""

    def __init__(self, value: float) -> None:
        self.value = value
        self.batches: list[np.ndarray] = []

    def __call__(self, batch: np.ndarray) -> np.ndarray:
        self.batches.append(batch)
        n, _, h, w = batch.shape
        return np.full((n, 1280, -(-h // 32), -(-w // 32)), self.value, dtype=np.float32)


def test_encode_images_sends_each_row_to_its_encoder() -> None:
    """Rows at or above the threshold go to the INT8 encoder, the others to FP32, each image's result in its row."""
    encoder = MultimodalEncoder(Precision.INT8, preload=(), engine=Engine.OPENVINO, threads=1,
                                image_int8_min_side_pixels=128)
    head = nn.Linear(1280, 1000)
    with torch.no_grad():
        head.weight.zero_()
        head.bias.copy_(torch.arange(1000, dtype=torch.float32))
    encoder._image_model = nn.Module()
    encoder._image_model._fc = head
    fp32, int8 = _Recorder(1.0), _Recorder(2.0)
    encoder._ov_image, encoder._ov_image_int8 = fp32, int8
    batch = np.arange(4 * 3 * 128 * 160, dtype=np.float32).reshape(4, 3, 128, 160)
    valid = [(128, 160), (96, 96), (128, 128), (32, 160)]
    result = encoder.encode_images(batch, valid)
    np.testing.assert_array_equal(result.features[:, 0], [2.0, 1.0, 2.0, 1.0])
    assert len(int8.batches) == 1 and len(fp32.batches) == 1
    np.testing.assert_array_equal(int8.batches[0], batch[[0, 2]])
    np.testing.assert_array_equal(fp32.batches[0], batch[[1, 3]])
    # All rows on one side: one call, the other encoder untouched.
    encoder.encode_images(batch[:1], valid[:1])
    assert len(int8.batches) == 2 and len(fp32.batches) == 1


def test_threshold_is_off_by_default_and_torch_configs_render_as_before() -> None:
    for cfg in (RuntimeConfig(), PRESETS["naive"], PRESETS["default"], OV_INT8):
        assert cfg.image_int8_min_side_pixels == 0
        assert "image_int8_min_side_pixels" not in model_parameters(cfg)
        assert "image_int8_min_side_pixels" not in json.loads(config_summary(cfg))
        assert "--image-int8-min-side-pixels" not in config_flags(cfg)
    assert ModelSettings().image_int8_min_side_pixels == 0


def test_threshold_reaches_the_model_settings() -> None:
    cfg = OV_INT8.replace(image_int8_min_side_pixels=160)
    (pbtxt,) = [t for p, t in build_repository(cfg).items() if p.endswith("config.pbtxt")]
    params = _parameters(pbtxt)
    assert params["image_int8_min_side_pixels"] == "160"
    settings = ModelSettings.from_model_config({"parameters": {k: {"string_value": v} for k, v in params.items()}})
    assert settings.image_int8_min_side_pixels == 160
    assert json.loads(config_summary(cfg))["image_int8_min_side_pixels"] == 160


def test_every_encoder_model_of_a_batched_config_gets_the_threshold_and_the_gpu_layout_none() -> None:
    cfg = RuntimeConfig(engine=Engine.OPENVINO, precision=Precision.INT8, image_int8_min_side_pixels=128)
    configs = {p: _parameters(t) for p, t in build_repository(cfg).items() if p.endswith("config.pbtxt")}
    encoders = [p for p, params in configs.items() if params.get("preload")]
    assert encoders and all(configs[p]["image_int8_min_side_pixels"] == "128" for p in encoders)
    for path, text in build_repository(cfg.replace(gpu_count=1)).items():  # the GPU layout runs torch
        if path.endswith("config.pbtxt"):
            assert "image_int8_min_side_pixels" not in _parameters(text), path


@pytest.mark.parametrize("value", [-1, 385 * 1000, True, 1.5, "128"])
def test_bad_threshold_is_refused_naming_the_field(value: object) -> None:
    with pytest.raises(InvalidSpec) as err:
        OV_INT8.replace(image_int8_min_side_pixels=value)
    assert err.value.field == "image_int8_min_side_pixels"


@pytest.mark.parametrize("changes", [{"engine": Engine.TORCH}, {"precision": Precision.FP32},
                                     {"precision": Precision.BF16}])
def test_threshold_needs_engine_openvino_at_int8(changes: dict[str, object]) -> None:
    with pytest.raises(InvalidSpec) as err:
        OV_INT8.replace(image_int8_min_side_pixels=128, **changes)
    assert err.value.field == "image_int8_min_side_pixels"
    assert "--image-int8-min-side-pixels 0" in str(err.value)  # the fix is named


@pytest.mark.parametrize("raw", ["-5", "big", "1.5"])
def test_bad_threshold_parameter_is_named(raw: str) -> None:
    with pytest.raises(ValueError, match="parameter image_int8_min_side_pixels"):
        ModelSettings.from_model_config({"parameters": {"image_int8_min_side_pixels": {"string_value": raw}}})


def _parse(*argv: str) -> RuntimeConfig:
    import argparse

    parser = argparse.ArgumentParser(prog="modalscale")
    cli.add_parser(parser.add_subparsers(dest="command"))
    return cli.config_from_args(parser.parse_args(["runtime", "serve", *argv]))


def test_fastest_preset_routes_large_images_to_int8_and_the_flag_overrides_it() -> None:
    fastest = PRESETS["fastest"]
    assert fastest.image_int8_min_side_pixels > 0
    assert fastest.replace(image_int8_min_side_pixels=0) == _parse("--preset", "fastest",
                                                                   "--image-int8-min-side-pixels", "0")
    flags = config_flags(fastest)
    assert flags[flags.index("--image-int8-min-side-pixels") + 1] == str(fastest.image_int8_min_side_pixels)
    assert _parse(*flags) == fastest
    with pytest.raises(InvalidSpec, match="image_int8_min_side_pixels"):
        _parse("--preset", "fastest", "--engine", "torch")


def test_calibration_crops_are_fixed_and_disjoint_from_the_fidelity_photos() -> None:
    from modalscale.runtime.workload import photo_names

    crops = calibration_image_crops()
    assert crops == calibration_image_crops()  # the same list every time (and on every machine: no RNG state)
    assert len(crops) >= 60
    assert {c.photo for c in crops} == set(CALIBRATION_IMAGE_PHOTOS)
    assert not set(CALIBRATION_IMAGE_PHOTOS) & {f"{n}.png" for n in photo_names()} \
        and not set(CALIBRATION_IMAGE_PHOTOS) & {f"{n}.jpg" for n in photo_names()}
    assert {max(c.width, c.height) for c in crops} == set(CALIBRATION_IMAGE_SIDES)  # the INT8 path's sizes
