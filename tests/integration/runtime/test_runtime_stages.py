"""Stage-disaggregated serving (issue 24) on real tritonservers: an ``image-encoder`` stage server, and a ``front``
stage server whose model calls it over KServe v2 gRPC, answer like the one-piece server (the session's
``triton_server``, the default config at FP32): equal embeddings (cosine >= 0.99999), the same IMAGE_CLASSES,
MODALITY and client errors. A second front in the same server points at an address where nothing listens: its image
requests fail with UNAVAILABLE (HTTP 503) naming that address, and its text-only requests are served.

Each server is started once for the module (the one-piece one once per session)."""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from modalscale.runtime.client import AsyncMultimodalClient, InferenceError, MultimodalClient, scrape_metrics
from modalscale.runtime.repo_config import PRESETS, RuntimeConfig, Stage, build_repository, served_model_name
from modalscale.runtime.server import TritonProcess, free_port, write_repository
from modalscale.runtime.workload import photo_at

ENCODER_CFG = RuntimeConfig(stage=Stage.IMAGE_ENCODER, cpu_cores=2.0, max_queue_delay_microseconds=100_000)
"""The pool: the default config's batching and embedding cache, FP32, with a 100 ms batching window: at the default
2 ms a fast pool finished each call before the front's next one arrived whenever the front was slowed (16 requests,
16 executions in a clean-clone run under extra load), so whether it batched was a matter of timing; with the window,
calls the front makes within 100 ms of each other share an execution whatever the machine's speed."""
BROKEN = "broken"
"""A second front, in the layout without router (one model, one instance: the cheapest to start), whose pool address
has no listener; the router's mapping of its error is unit-tested (``test_runtime_stages.py``)."""


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TritonProcess, TritonProcess, str]]:
    """``(encoder server, front server, the broken front's pool address)``."""
    old_path = os.environ.get("PATH", "")
    os.environ["PATH"] = str(Path(sys.executable).parent) + os.pathsep + old_path
    logs = tmp_path_factory.mktemp("stage-logs")
    try:
        encoder_repo = write_repository(build_repository(ENCODER_CFG), tmp_path_factory.mktemp("encoder-repo"))
        with TritonProcess(encoder_repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                           log_path=logs / "encoder.log", exit_timeout_s=5).start(ready_timeout_s=600) as encoder:
            dead = f"127.0.0.1:{free_port()}"
            front_repo = tmp_path_factory.mktemp("front-repo")
            write_repository(build_repository(RuntimeConfig(stage=Stage.FRONT, image_encoder_url=encoder.grpc_url,
                                                            cpu_cores=2.0)), front_repo)
            write_repository(build_repository(PRESETS["naive"].replace(
                model_name=BROKEN, instance_count=1, stage=Stage.FRONT, image_encoder_url=dead)), front_repo)
            with TritonProcess(front_repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                               log_path=logs / "front.log", exit_timeout_s=5).start(ready_timeout_s=600) as front:
                yield encoder, front, dead
    finally:
        os.environ["PATH"] = old_path


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


SQUARE = photo_at("chelsea", 384, 384, "PNG")
WIDE = photo_at("coffee", 320, 240, "JPEG")
TEXT = "a cat sitting next to a cup of coffee on a wooden table"


def test_staged_answers_equal_the_one_piece_server(servers: tuple[TritonProcess, TritonProcess, str],
                                                   triton_server: TritonProcess) -> None:
    _, front, _ = servers
    with MultimodalClient(front.http_url, "http") as staged, MultimodalClient(triton_server.http_url, "http") as whole:
        for images, text in (([SQUARE], None), ([SQUARE, WIDE], None), (None, TEXT), ([WIDE], TEXT),
                             ([WIDE, SQUARE], "two photos")):
            got = staged.infer(images=images, text=text)
            want = whole.infer(images=images, text=text)
            assert got.modality == want.modality
            assert got.image_classes.tolist() == want.image_classes.tolist()
            assert _cos(got.embedding, want.embedding) >= 0.99999, (len(images or []), text)
    with MultimodalClient(front.grpc_url, "grpc") as staged_grpc:
        assert staged_grpc.infer(images=[WIDE], text=TEXT).modality == "image_text"


def test_a_bad_image_gets_the_one_piece_error_through_the_front(servers: tuple[TritonProcess, TritonProcess, str],
                                                                triton_server: TritonProcess) -> None:
    _, front, _ = servers
    errors = []
    for server in (front, triton_server):
        with MultimodalClient(server.http_url, "http") as client, pytest.raises(InferenceError) as info:
            client.infer(images=[SQUARE, b"not an image"], text=TEXT)
        errors.append((info.value.status, str(info.value)))
    assert errors[0] == errors[1]
    assert errors[0][0] == "400" and str(errors[0][1]).startswith("CorruptImage: IMAGES[1]")


def test_metrics_of_both_stages(servers: tuple[TritonProcess, TritonProcess, str]) -> None:
    encoder, front, _ = servers
    before_front, before_encoder = scrape_metrics(front.metrics_url), scrape_metrics(encoder.metrics_url)
    with MultimodalClient(front.http_url, "http") as client:
        client.infer(images=[photo_at("rocket", 200, 100, "JPEG")], text=TEXT)
    after_front, after_encoder = scrape_metrics(front.metrics_url), scrape_metrics(encoder.metrics_url)

    def delta(after: dict[str, float], before: dict[str, float], key: str) -> float:
        return after.get(key, 0.0) - before.get(key, 0.0)

    for stage in ("decode", "tokenize", "image_encoder", "text_encoder", "fusion"):  # the front's view of each stage
        key = f'modalscale_stage_compute_seconds_count{{modality="image_text",stage="{stage}"}}'
        assert delta(after_front, before_front, key) == 1, stage
    assert delta(after_front, before_front, 'modalscale_request_image_pixels_sum{modality="image_text"}') == 20_000
    assert delta(after_encoder, before_encoder, 'modalscale_requests_total{modality="image"}') == 1
    for stage in ("decode", "image_encoder"):
        key = f'modalscale_stage_compute_seconds_count{{modality="image",stage="{stage}"}}'
        assert delta(after_encoder, before_encoder, key) == 1, stage
    assert delta(after_encoder, before_encoder, 'modalscale_request_image_pixels_sum{modality="image"}') == 20_000


def test_the_pool_batches_images_of_concurrent_requests(servers: tuple[TritonProcess, TritonProcess, str]) -> None:
    encoder, front, _ = servers
    photos = [photo_at(name, 256, 192, "JPEG") for name in ("rocket", "coffee", "chelsea", "astronaut")]
    before = scrape_metrics(encoder.metrics_url)

    async def send() -> list[str]:
        client = AsyncMultimodalClient(front.grpc_url, "grpc", timeout_s=300)
        try:
            # distinct bytes per request (a JPEG comment), so the pool's embedding cache does not answer them
            jobs = [client.infer(images=[photos[i % 4] + b"\xff\xfe" + bytes([i])],
                                 text=None if i % 2 else f"request {i}") for i in range(16)]
            return [r.modality for r in await asyncio.gather(*jobs)]
        finally:
            await client.close()

    assert sorted(set(asyncio.run(send()))) == ["image", "image_text"]
    after = scrape_metrics(encoder.metrics_url)
    key = 'nv_inference_{}{{model="image_encoder",version="1"}}'
    requests = after[key.format("request_success")] - before.get(key.format("request_success"), 0.0)
    executions = after[key.format("exec_count")] - before.get(key.format("exec_count"), 0.0)
    assert requests == 16
    assert executions < requests  # requests of both front models shared executions of the pool


def test_an_unreachable_pool_fails_image_requests_clearly_and_text_still_works(
        servers: tuple[TritonProcess, TritonProcess, str], triton_server: TritonProcess) -> None:
    _, front, dead = servers
    with MultimodalClient(front.http_url, "http", BROKEN) as broken, \
            MultimodalClient(triton_server.http_url, "http") as whole:
        with pytest.raises(InferenceError) as info:
            broken.infer(images=[SQUARE], text=TEXT)
        assert info.value.status == "503"
        assert str(info.value).startswith(f"ImageEncoderUnavailable: the image encoder pool at {dead} did not answer")
        text = broken.infer(text=TEXT)
        assert text.modality == "text" and _cos(text.embedding, whole.infer(text=TEXT).embedding) >= 0.99999
    with MultimodalClient(front.grpc_url, "grpc", BROKEN) as broken_grpc, pytest.raises(InferenceError) as info:
        broken_grpc.infer(images=[WIDE])
    assert info.value.status == "StatusCode.UNAVAILABLE" and dead in str(info.value)
    with MultimodalClient(front.grpc_url, "grpc") as working:  # the other front of the same server is unaffected
        assert working.infer(images=[WIDE]).modality == "image"
    assert served_model_name(ENCODER_CFG) == "image_encoder"
