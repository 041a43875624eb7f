"""Engine openvino with the real pretrained weights: FP32 matches torch FP32 (the same modules converted, compiled
with an explicit f32 precision), INT8 (NNCF text encoder) stays within cosine 0.99 of torch FP32 on texts disjoint
from its calibration set, the INT8 image encoder does on images at or above its size threshold (and smaller images
get the FP32 encoder's features), the converted IR is cached and reused, and the ``fastest`` preset (engine
openvino, INT8 image encoder from 160 px) loads in a real tritonserver's Python backend and answers."""

from __future__ import annotations

import os
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

from modalscale.runtime.client import MultimodalClient
from modalscale.runtime.model import ov_engine
from modalscale.runtime.model.calibration import CALIBRATION_TEXTS
from modalscale.runtime.model.encoders import MultimodalEncoder
from modalscale.runtime.model.inputs import decode_image
from modalscale.runtime.model.pipeline import MultimodalPipeline
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import PRESETS, Engine, Precision, build_repository, model_parameters
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import fidelity_texts, photo_at, photo_bytes

SIZES = [(224, 224, "JPEG"), (640, 480, "PNG"), (1600, 1200, "JPEG"), (48, 300, "PNG"), (32, 32, "JPEG")]


@pytest.fixture(scope="module")
def ov_cache(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A private IR cache for this module (the conversions below run cold, then warm)."""
    path = tmp_path_factory.mktemp("openvino-cache")
    old = os.environ.get(ov_engine.CACHE_ENV)
    os.environ[ov_engine.CACHE_ENV] = str(path)
    try:
        yield path
    finally:
        if old is None:
            os.environ.pop(ov_engine.CACHE_ENV, None)
        else:
            os.environ[ov_engine.CACHE_ENV] = old


@pytest.fixture(scope="module")
def torch_fp32() -> MultimodalEncoder:
    torch.set_num_threads(1)
    return MultimodalEncoder(Precision.FP32)


@pytest.fixture(scope="module")
def ov_fp32(ov_cache: Path) -> MultimodalEncoder:
    return MultimodalEncoder(Precision.FP32, engine=Engine.OPENVINO, threads=1)


def _cos(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return (a * b).sum(-1) / np.linalg.norm(a, axis=-1) / np.linalg.norm(b, axis=-1)  # type: ignore[no-any-return]


def _embed(encoder: MultimodalEncoder, requests: list[tuple[list[bytes], str | None]]) -> list:
    pipeline = MultimodalPipeline(ModelSettings(embedding_cache=False, precision=encoder.precision), encoder)
    return [pipeline.run([pipeline.prepare(np.array([images], dtype=object) if images else None,
                                           np.array([[text.encode()]], dtype=object) if text else None)])[0]
            for images, text in requests]


def test_openvino_fp32_matches_torch_fp32(torch_fp32: MultimodalEncoder, ov_fp32: MultimodalEncoder) -> None:
    """Same features to float32 rounding: images of every size bucket (down to a 1x1 feature map) and texts."""
    requests: list[tuple[list[bytes], str | None]] = [
        ([photo_at(name, w, h, fmt)], None) for name in ("chelsea", "rocket") for w, h, fmt in SIZES]
    requests += [([], text) for text in fidelity_texts(8, seed=5, exclude=CALIBRATION_TEXTS)]
    requests += [([photo_bytes("coffee"), photo_at("astronaut", 300, 200, "JPEG")], "a cup of coffee")]
    ref, got = _embed(torch_fp32, requests), _embed(ov_fp32, requests)
    cos = _cos(np.stack([r.embedding for r in ref]), np.stack([g.embedding for g in got]))
    assert cos.min() > 0.9999, cos
    assert [r.image_classes.tolist() for r in ref] == [g.image_classes.tolist() for g in got]


def test_openvino_int8_text_stays_within_cosine_0_99(torch_fp32: MultimodalEncoder, ov_cache: Path) -> None:
    int8 = MultimodalEncoder(Precision.INT8, preload=("text",), engine=Engine.OPENVINO, threads=1)
    texts = fidelity_texts(40, seed=11, exclude=CALIBRATION_TEXTS)
    ids = [torch_fp32.token_ids(t) for t in texts]
    ref = np.concatenate([torch_fp32.encode_texts([i], len(i)) for i in ids])
    got = np.concatenate([int8.encode_texts([i], len(i)) for i in ids])
    cos = _cos(ref, got)
    assert cos.min() >= 0.99, sorted(cos)[:3]
    assert not np.array_equal(ref, got)  # it is quantized, not the float model
    # A padded batch gives each text what it gets alone (static activation scales): no dependence on neighbours.
    batch = int8.encode_texts(ids[:4], max(len(i) for i in ids[:4]))
    assert _cos(batch, got[:4]).min() > 0.9999


def test_openvino_int8_image_encoder_takes_only_images_at_or_above_the_threshold(
        torch_fp32: MultimodalEncoder, ov_fp32: MultimodalEncoder, ov_cache: Path) -> None:
    """Images whose bucket's shorter side reaches ``fastest``'s threshold are quantized (NNCF, calibrated on other
    photographs) and stay within cosine 0.99 of torch FP32; smaller ones get exactly the OpenVINO FP32 features; a
    mixed pass gives each image what it gets alone; the INT8 IR is cached under its scheme. On a CPU whose INT8
    kernels miss the bound at load (no VNNI: the AMD EPYC of 3 Dec 2026 read 0.97), the guard serves every image in
    FP32 instead: each image then gets exactly the FP32 features, and the encoder says why."""
    threshold = PRESETS["fastest"].image_int8_min_side_pixels
    assert threshold > 0
    int8 = MultimodalEncoder(Precision.INT8, preload=("image",), engine=Engine.OPENVINO, threads=1,
                             image_int8_min_side_pixels=threshold)
    assert any(p.name.startswith(f"efficientnet-lite0-{ov_engine.IMAGE_INT8_SCHEME}-") for p in ov_cache.glob("*.xml"))
    fallback = int8.image_int8_fallback
    print(f"\nINT8 image encoder on this CPU: {fallback or 'in use'}")
    settings = ModelSettings(embedding_cache=False)
    sizes = [(224, 224, "JPEG"), (640, 480, "PNG"), (1600, 1200, "JPEG"), (160, 128, "PNG"), (451, 300, "JPEG"),
             (300, 48, "PNG"), (32, 32, "JPEG"), (120, 90, "PNG")]
    above = below = 0
    for name in ("flower", "rocket"):
        for w, h, fmt in sizes:
            x = decode_image(photo_at(name, w, h, fmt), 0, settings).array[None]
            hw = [(int(x.shape[2]), int(x.shape[3]))]
            got, fp32 = int8.encode_images(x, hw).features, ov_fp32.encode_images(x, hw).features
            if min(hw[0]) >= threshold:
                above += 1
                assert float(_cos(got, torch_fp32.encode_images(x, hw).features)[0]) >= 0.99, (name, w, h)
                if fallback is None:
                    assert not np.array_equal(got, fp32)  # quantized, not the float encoder
                else:
                    np.testing.assert_array_equal(got, fp32)
            else:
                below += 1
                np.testing.assert_array_equal(got, fp32)
    assert above >= 8 and below >= 4
    # One padded pass with an image above and one below the threshold: each row as when encoded alone.
    batch = np.zeros((2, 3, 288, 384), dtype=np.float32)
    big = decode_image(photo_at("flower", 640, 480, "JPEG"), 0, settings).array
    small = decode_image(photo_at("rocket", 120, 90, "PNG"), 0, settings).array
    batch[0, :, :288, :384], batch[1, :, :96, :128] = big, small
    valid = [(288, 384), (96, 128)]
    both = int8.encode_images(batch, valid).features
    for i in range(2):
        np.testing.assert_allclose(both[i], int8.encode_images(batch[i:i + 1], valid[i:i + 1]).features[0],
                                   rtol=0, atol=1e-5)


def test_the_int8_image_guard_falls_back_to_fp32_below_its_bound_and_keeps_int8_above_it(
        ov_fp32: MultimodalEncoder, ov_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The load-time guard on this machine's real INT8 and FP32 image encoders: a bound above any cosine (1.01)
    always falls back, naming the measured cosine, and the encoder then serves images exactly as FP32; a bound of
    -1 keeps INT8 (quantized features, not FP32's)."""
    threshold = PRESETS["fastest"].image_int8_min_side_pixels
    x = decode_image(photo_at("flower", 640, 480, "JPEG"), 0, ModelSettings(embedding_cache=False)).array[None]
    hw = [(int(x.shape[2]), int(x.shape[3]))]
    fp32 = ov_fp32.encode_images(x, hw).features
    monkeypatch.setattr(ov_engine, "IMAGE_INT8_MIN_COSINE", 1.01)
    off = MultimodalEncoder(Precision.INT8, preload=("image",), engine=Engine.OPENVINO, threads=1,
                            image_int8_min_side_pixels=threshold)
    assert off.image_int8_fallback is not None and "< 1.01 on 19 calibration images" in off.image_int8_fallback
    np.testing.assert_array_equal(off.encode_images(x, hw).features, fp32)
    monkeypatch.setattr(ov_engine, "IMAGE_INT8_MIN_COSINE", -1.0)
    on = MultimodalEncoder(Precision.INT8, preload=("image",), engine=Engine.OPENVINO, threads=1,
                           image_int8_min_side_pixels=threshold)
    assert on.image_int8_fallback is None
    assert not np.array_equal(on.encode_images(x, hw).features, fp32)


def test_converted_ir_is_cached_and_reused(ov_cache: Path, ov_fp32: MultimodalEncoder,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """A second encoder reads the cached IR instead of converting again (start-up without conversion)."""
    cached = sorted(p.name for p in ov_cache.glob("*.xml"))
    assert any(n.startswith("efficientnet-lite0-fp32-") for n in cached)
    assert any(n.startswith("minilm-l6-fp32-") for n in cached)
    assert all((ov_cache / n).with_suffix(".bin").exists() for n in cached)
    import openvino as ov

    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("converted again although the IR is cached")

    monkeypatch.setattr(ov, "convert_model", no_conversion)
    again = MultimodalEncoder(Precision.FP32, engine=Engine.OPENVINO, threads=1)
    ids = again.token_ids("a photo of a cat")
    np.testing.assert_allclose(again.encode_texts([ids], len(ids)), ov_fp32.encode_texts([ids], len(ids)),
                               rtol=0, atol=1e-6)


def test_read_only_cache_is_read_and_left_untouched(ov_cache: Path, ov_fp32: MultimodalEncoder,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """IR baked into a read-only place is used (no conversion) and nothing is written there."""
    before = sorted(p.relative_to(ov_cache) for p in ov_cache.rglob("*"))
    monkeypatch.setattr(ov_engine, "_writable", lambda path: False)
    import openvino as ov

    def no_conversion(*args: object, **kwargs: object) -> None:
        raise AssertionError("converted although the IR is in the read-only cache")

    monkeypatch.setattr(ov, "convert_model", no_conversion)
    again = MultimodalEncoder(Precision.FP32, engine=Engine.OPENVINO, threads=1)
    ids = again.token_ids("a cup of coffee")
    np.testing.assert_allclose(again.encode_texts([ids], len(ids)), ov_fp32.encode_texts([ids], len(ids)),
                               rtol=0, atol=1e-6)
    assert sorted(p.relative_to(ov_cache) for p in ov_cache.rglob("*")) == before


def test_openvino_refuses_fp16_and_gpu() -> None:
    with pytest.raises(ValueError, match="FP16"):
        MultimodalEncoder(Precision.FP16, preload=(), engine=Engine.OPENVINO)
    with pytest.raises(ValueError, match="CPU only"):
        MultimodalEncoder(Precision.FP32, device="cuda:0", preload=(), engine=Engine.OPENVINO)


def test_fastest_preset_serves_in_tritonserver(tmp_path: Path, ov_cache: Path,
                                               torch_fp32: MultimodalEncoder) -> None:
    """The Python-backend stubs convert, quantize (NNCF) and compile on load, then answer every modality."""
    cfg = PRESETS["fastest"]
    assert cfg.engine is Engine.OPENVINO
    repo = tmp_path / "repo"
    write_repository(build_repository(cfg), repo)
    server = TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           exit_timeout_s=5, log_path=tmp_path / "tritonserver.log")
    server.start(ready_timeout_s=600)
    try:
        requests: list[tuple[list[bytes], str | None]] = [
            ([photo_bytes("chelsea")], None), ([], "a photo of a cat on a red chair"),
            ([photo_at("coffee", 640, 480, "JPEG")], "a cup of coffee"),
            ([photo_at("rocket", 96, 64, "PNG")], None),  # below the INT8 threshold: the FP32 image encoder
            ([photo_at("flower", 800, 600, "PNG")], "a flower")]
        ref = _embed(torch_fp32, requests)
        with MultimodalClient(server.http_url, "http", model_name=cfg.model_name) as client:
            for (images, text), expected in zip(requests, ref, strict=True):
                answer = client.infer(images=images or None, text=text)
                assert float(_cos(answer.embedding, expected.embedding)) >= 0.99
                classes = [c for c in answer.image_classes.tolist() if c >= 0]  # -1 pads a text-only answer
                assert classes == expected.image_classes.tolist()
            # fastest runs without modality-aware batching: a small image beside a large one in one request gets
            # the features it gets alone (one pass per bucket; padded to 288x384 the embedding moved). Reference:
            # the same model settings in this process, each image encoded alone, then averaged and fused.
            mixed = [photo_at("chelsea", 96, 64, "PNG"), photo_at("astronaut", 800, 600, "JPEG")]
            answer = client.infer(images=mixed, text=None)
        settings = ModelSettings.from_model_config({"parameters": {
            k: {"string_value": v} for k, v in model_parameters(cfg).items()}})
        assert not settings.modality_aware_batching and settings.image_int8_min_side_pixels > 0
        local = MultimodalEncoder(settings.precision, preload=("image",), engine=settings.engine, threads=1,
                                  image_int8_min_side_pixels=settings.image_int8_min_side_pixels)
        # the stubs ran the same load-time INT8 guard on the same CPU: its warning is in the log exactly when it
        # fell back here
        fell_back = "INT8 image encoder falls back to FP32" in (tmp_path / "tritonserver.log").read_text()
        assert fell_back == (local.image_int8_fallback is not None), local.image_int8_fallback
        # ... and on /metrics, where a user sees it (1 = every image FP32), for each model that loaded the guard
        exported = [float(line.rsplit(" ", 1)[1]) for line in httpx.get(server.metrics_url, timeout=10).text
                    .splitlines() if line.startswith("modalscale_image_int8_fallback{")]
        assert exported and set(exported) == {1.0 if fell_back else 0.0}, exported
        pipeline = MultimodalPipeline(replace(settings, embedding_cache=False), local)
        alone = [pipeline.run([pipeline.prepare(np.array([[m]], dtype=object), None)])[0] for m in mixed]
        present = np.array([True])
        feats = np.mean([local.encode_images(*_decoded(m, settings)).features[0] for m in mixed], axis=0)
        expected = local.fuse(feats[None].astype(np.float32), present, np.zeros((1, 384), np.float32), ~present)[0]
        assert float(_cos(answer.embedding, expected)) >= 0.99999
        assert answer.image_classes.tolist() == [int(a.image_classes[0]) for a in alone]
    finally:
        server.stop()


def _decoded(data: bytes, settings: ModelSettings) -> tuple[np.ndarray, list[tuple[int, int]]]:
    """One image as the model decodes it: ``(1, 3, h, w)`` and its valid size."""
    image = decode_image(data, 0, settings)
    return image.array[None], [image.bucket]
