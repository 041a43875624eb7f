"""The GPU layout's repository (orchestrator + image and text encoder models) on a real tritonserver, with the
encoder instances switched from KIND_GPU to KIND_CPU: there is no GPU here, so this checks the models' logic (BLS
fan-out, fixed image sizes, encoder-level batching, fusion, errors and metrics), not GPU speed."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from modalscale.runtime.client import AsyncMultimodalClient, InferenceError, MultimodalClient, scrape_metrics
from modalscale.runtime.repo_config import PRESETS, Precision, RuntimeConfig, build_repository
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import photo_at, photo_bytes

GPU_CFG = RuntimeConfig(model_name="gpu", gpu_count=1, precision=Precision.FP32, embedding_cache=False,
                        cpu_cores=2.0)
"""FP32 so that its answers can be compared with the CPU layout's; the same repository a GPU pod gets, except the
instance kind."""


def on_cpu(files: dict[str, str]) -> dict[str, str]:
    """The GPU repository with its encoder instances on CPU (the only change)."""
    out = {}
    for path, text in files.items():
        if path.endswith("config.pbtxt"):
            assert text.count("kind: KIND_GPU\n    gpus: [ 0 ]") == ("_encoder/" in path)
            text = text.replace("kind: KIND_GPU\n    gpus: [ 0 ]", "kind: KIND_CPU")
        out[path] = text
    return out


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonProcess]:
    repo = tmp_path_factory.mktemp("gpu-layout-repo")
    write_repository(on_cpu(build_repository(GPU_CFG)), repo)
    write_repository(build_repository(PRESETS["naive"].replace(model_name="cpu")), repo)
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + old_path
    try:
        with TritonProcess(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           log_path=tmp_path_factory.mktemp("gpu-layout-log") / "tritonserver.log",
                           exit_timeout_s=5).start(ready_timeout_s=600) as proc:
            yield proc
    finally:
        os.environ["PATH"] = old_path


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def test_answers_match_the_cpu_layout(server: TritonProcess) -> None:
    square = photo_at("chelsea", 384, 384, "PNG")  # bucket 384x384 = the fixed size: no extra padding
    wide = photo_at("coffee", 320, 240, "JPEG")  # bucket 240x320, padded to 384x384 on the GPU layout
    text = "a cat sitting next to a cup of coffee on a wooden table"
    with MultimodalClient(server.http_url, "http", "gpu") as gpu, \
            MultimodalClient(server.http_url, "http", "cpu") as cpu:
        for images, txt, min_cos in (([], text, 0.99999), ([square], None, 0.9999), ([square], text, 0.9999),
                                     ([square, wide], None, 0.95), ([wide], text, 0.95)):
            got = gpu.infer(images=images or None, text=txt)
            want = cpu.infer(images=images or None, text=txt)
            assert got.modality == want.modality
            assert _cos(got.embedding, want.embedding) >= min_cos, (len(images), txt is not None)
            assert np.linalg.norm(got.embedding) == pytest.approx(1.0, abs=1e-4)
            assert got.image_classes.shape == want.image_classes.shape
        assert int(gpu.infer(images=[square]).image_classes[0]) == int(cpu.infer(images=[square]).image_classes[0])


def test_bad_requests_get_their_reason_and_metrics_count_per_modality(server: TritonProcess) -> None:
    before = scrape_metrics(server.metrics_url)
    with MultimodalClient(server.http_url, "http", "gpu") as gpu:
        with pytest.raises(InferenceError, match="CorruptImage"):
            gpu.infer(images=[b"not an image"])
        gpu.infer(images=[photo_bytes("astronaut")], text="an astronaut")
    after = scrape_metrics(server.metrics_url)

    def d(key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    assert d('modalscale_request_errors_total{reason="CorruptImage"}') == 1
    assert d('modalscale_requests_total{modality="image_text"}') == 1
    assert d('modalscale_stage_compute_seconds_count{modality="image_text",stage="image_encoder"}') == 1
    assert d('modalscale_stage_compute_seconds_count{modality="image_text",stage="text_encoder"}') == 1


def test_concurrent_requests_of_every_class_share_the_encoder_queues(server: TritonProcess) -> None:
    images = [photo_at(name, 256, 192, "JPEG") for name in ("rocket", "coffee", "chelsea", "astronaut")]
    before = scrape_metrics(server.metrics_url)

    async def send() -> list[str]:
        client = AsyncMultimodalClient(server.grpc_url, "grpc", "gpu", timeout_s=300)
        try:
            jobs = [client.infer(images=[images[i % 4]] if i % 3 else None,
                                 text=None if i % 3 == 1 else f"request number {i} about a photo")
                    for i in range(24)]
            return [r.modality for r in await asyncio.gather(*jobs)]
        finally:
            await client.close()

    modalities = asyncio.run(send())
    assert sorted(set(modalities)) == ["image", "image_text", "text"]
    after = scrape_metrics(server.metrics_url)
    for encoder, requests in (("gpu_text_encoder", 16), ("gpu_image_encoder", 16)):
        key = f'nv_inference_request_success{{model="{encoder}",version="1"}}'
        assert after.get(key, 0.0) - before.get(key, 0.0) == requests  # image+text requests used both encoders
