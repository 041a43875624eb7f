"""The built-in model on a real tritonserver: every modality answers with the documented outputs, feature
metrics on /metrics equal what was sent in each modality class, and bad inputs get per-request errors while
others are served."""

from __future__ import annotations

import asyncio
import io

import numpy as np
import pytest
import tritonclient.http as triton_http
from PIL import Image
from tritonclient.utils import InferenceServerException

from modalscale.runtime.client import AsyncMultimodalClient, InferenceError, MultimodalClient, scrape_metrics
from modalscale.runtime.repo_config import EMBEDDING_DIM
from modalscale.runtime.server import TritonProcess
from modalscale.runtime.workload import photo_at, photo_bytes


def scrape(server: TritonProcess) -> dict[str, float]:
    return scrape_metrics(server.metrics_url)


def delta(before: dict[str, float], after: dict[str, float], key: str) -> float:
    """Increase of one sample between two scrapes (absent counts as 0)."""
    return after.get(key, 0.0) - before.get(key, 0.0)


CAT_CLASSES = {281, 282, 283, 284, 285, 287}  # tabby, tiger cat, Persian, Siamese, Egyptian cat, lynx
COFFEE_CLASSES = {504, 967, 968}  # coffee mug, espresso, cup


@pytest.fixture(scope="module")
def client(triton_server: TritonProcess) -> MultimodalClient:
    with MultimodalClient(triton_server.http_url, "http") as c:
        yield c


def _unit(vector: np.ndarray) -> None:
    assert vector.shape == (EMBEDDING_DIM,) and vector.dtype == np.float32
    assert np.linalg.norm(vector) == pytest.approx(1.0, abs=1e-4)


def test_server_and_model_are_ready(client: MultimodalClient) -> None:
    assert client.is_ready()


def test_image_only_request_classifies_the_cat(client: MultimodalClient) -> None:
    result = client.infer(images=[photo_bytes("chelsea")])
    _unit(result.embedding)
    assert result.modality == "image"
    assert result.image_classes.shape == (1,) and int(result.image_classes[0]) in CAT_CLASSES


def test_text_only_request(client: MultimodalClient) -> None:
    result = client.infer(text="a photo of a cat")
    _unit(result.embedding)
    assert result.modality == "text"
    assert result.image_classes.tolist() == [-1]


def test_image_and_text_request_differs_from_each_part(client: MultimodalClient) -> None:
    both = client.infer(images=[photo_bytes("coffee")], text="coffee in a cup")
    image = client.infer(images=[photo_bytes("coffee")])
    text = client.infer(text="coffee in a cup")
    _unit(both.embedding)
    assert both.modality == "image_text"
    assert int(both.image_classes[0]) in COFFEE_CLASSES
    # fused = normalize(normalize(img) + normalize(txt)): equals the normalised sum of the single-modality outputs
    expected = image.embedding + text.embedding
    np.testing.assert_allclose(both.embedding, expected / np.linalg.norm(expected), atol=1e-4)


def test_several_images_per_request_over_grpc(triton_server: TritonProcess) -> None:
    with MultimodalClient(triton_server.grpc_url, "grpc") as grpc_client:
        images = [photo_bytes("chelsea"), photo_bytes("coffee"), photo_at("astronaut", 200, 120)]
        result = grpc_client.infer(images=images, text="a dog on the grass")
    _unit(result.embedding)
    assert result.modality == "image_text"
    assert result.image_classes.shape == (3,)
    assert int(result.image_classes[0]) in CAT_CLASSES and int(result.image_classes[1]) in COFFEE_CLASSES


def test_same_request_gives_the_same_embedding(client: MultimodalClient) -> None:
    a = client.infer(images=[photo_at("china", 320, 240)], text="a house near the river")
    b = client.infer(images=[photo_at("china", 320, 240)], text="a house near the river")
    np.testing.assert_allclose(a.embedding, b.embedding, atol=1e-5)


def test_feature_metrics_equal_what_was_sent(triton_server: TritonProcess, client: MultimodalClient) -> None:
    before = scrape(triton_server)
    client.infer(images=[photo_at("rocket", 300, 200)])                                   # image, 60000 px
    client.infer(text="a photo of a cat")                                                 # text, 5 tokens
    client.infer(images=[photo_at("flower", 64, 48), photo_at("china", 100, 100)],
                 text="a dog on the grass")                                               # 3072 + 10000 px, 5 tok
    client.infer(images=[photo_at("flower", 64, 48)], text="coffee in a cup")             # 3072 px, 4 tokens
    after = scrape(triton_server)

    def d(key: str) -> float:
        return delta(before, after, key)

    assert d('modalscale_requests_total{modality="image"}') == 1
    assert d('modalscale_requests_total{modality="text"}') == 1
    assert d('modalscale_requests_total{modality="image_text"}') == 2
    # each request's features land in its own class's series, and only there
    assert d('modalscale_request_image_pixels_count{modality="image"}') == 1
    assert d('modalscale_request_image_pixels_sum{modality="image"}') == 60000
    assert d('modalscale_request_image_pixels_bucket{le="16384",modality="image"}') == 0
    assert d('modalscale_request_image_pixels_bucket{le="65536",modality="image"}') == 1
    assert d('modalscale_request_image_pixels_count{modality="image_text"}') == 3
    assert d('modalscale_request_image_pixels_sum{modality="image_text"}') == 3072 + 10000 + 3072
    assert d('modalscale_request_image_pixels_bucket{le="4096",modality="image_text"}') == 2
    assert d('modalscale_request_image_pixels_bucket{le="16384",modality="image_text"}') == 3
    assert d('modalscale_request_images_count{modality="image"}') == 1
    assert d('modalscale_request_images_sum{modality="image"}') == 1
    assert d('modalscale_request_images_count{modality="text"}') == 1
    assert d('modalscale_request_images_sum{modality="text"}') == 0
    assert d('modalscale_request_images_bucket{le="0",modality="text"}') == 1
    assert d('modalscale_request_images_count{modality="image_text"}') == 2
    assert d('modalscale_request_images_sum{modality="image_text"}') == 2 + 1
    assert d('modalscale_request_images_bucket{le="0",modality="image_text"}') == 0
    assert d('modalscale_request_text_tokens_count{modality="text"}') == 1
    assert d('modalscale_request_text_tokens_sum{modality="text"}') == 5
    assert d('modalscale_request_text_tokens_count{modality="image_text"}') == 2
    assert d('modalscale_request_text_tokens_sum{modality="image_text"}') == 5 + 4
    # series a class cannot observe are not exported, and no unlabelled (pooled) series is left
    for key in ('modalscale_request_image_pixels_count{modality="text"}',
                'modalscale_request_text_tokens_count{modality="image"}', "modalscale_request_image_pixels_count",
                "modalscale_request_images_count", "modalscale_request_text_tokens_count"):
        assert key not in after, key
    # every accepted request observes fusion once under its class; the text encoder runs for requests with text
    for modality, requests in (("image", 1), ("text", 1), ("image_text", 2)):
        assert d(f'modalscale_stage_compute_seconds_count{{modality="{modality}",stage="fusion"}}') == requests
    assert d('modalscale_stage_compute_seconds_count{modality="text",stage="text_encoder"}') == 1
    assert d('modalscale_stage_compute_seconds_count{modality="image_text",stage="text_encoder"}') == 2
    assert d('modalscale_stage_compute_seconds_count{modality="image",stage="text_encoder"}') == 0
    assert d('modalscale_stage_compute_seconds_sum{modality="image",stage="image_encoder"}') > 0
    assert d('modalscale_stage_compute_seconds_count{modality="text",stage="image_encoder"}') == 0
    # the second flower 64x48 is the same bytes as the first: served from the embedding cache
    assert d('modalscale_embedding_cache_lookups_total{result="hit"}') == 1
    assert d('modalscale_embedding_cache_lookups_total{result="miss"}') == 3
    # Triton's own series stay available next to ours, with latency quantiles as in the operator's pods
    assert d('nv_inference_request_success{model="multimodal",version="1"}') == 4
    assert d('nv_inference_request_summary_us_count{model="multimodal",version="1"}') == 4
    assert after['nv_inference_request_summary_us{model="multimodal",quantile="0.95",version="1"}'] > 0


def _png(image: Image.Image) -> bytes:
    buf = io.BytesIO()
    image.save(buf, format="PNG")
    return buf.getvalue()


def _huge_png() -> bytes:
    buf = io.BytesIO()
    Image.new("1", (20000, 20000), 1).save(buf, format="PNG", compress_level=1)
    return buf.getvalue()


def _zero_size_png() -> bytes:
    import struct
    import zlib

    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 0, 0, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(b"")) + chunk(b"IEND", b""))


def _palette_png_with_too_many_alphas() -> bytes:
    """A palette PNG whose tRNS has 300 alpha values (a palette holds at most 256): Pillow's RGB conversion raised a
    bare ValueError that failed every request of the batch; now CorruptImage for this request alone."""
    import struct
    import zlib

    image = Image.new("P", (37, 23), 1)
    image.putpalette([10, 20, 30] * 4)
    png = _png(image)
    at = png.index(b"IDAT") - 4
    body = b"\x80" * 300
    return png[:at] + struct.pack(">I", len(body)) + b"tRNS" + body + struct.pack(">I", zlib.crc32(b"tRNS" + body)) \
        + png[at:]


BAD_REQUESTS = {
    "corrupt-bytes": ({"images": [b"\xff\xd8\xff\xe0 this is not really a jpeg"]}, "CorruptImage"),
    "truncated-jpeg": ({"images": [photo_bytes("china")[:5000]]}, "CorruptImage"),
    "zero-size": ({"images": [_zero_size_png()]}, ("CorruptImage", "ImageTooSmall")),
    "palette-png-with-300-alphas": ({"images": [_palette_png_with_too_many_alphas()]}, "CorruptImage"),
    "huge-20000x20000": ({"images": [_huge_png()]}, "ImageTooLarge"),
    "non-utf8-text": ({"text": b"caf\xe9 \xff"}, "InvalidUtf8"),
    "empty-request": ({"images": []}, "EmptyRequest"),
    "blank-text": ({"text": "   "}, "EmptyRequest"),
    "too-many-images": ({"images": [photo_at("coffee", 32, 32)] * 17}, "TooManyImages"),
}


@pytest.mark.parametrize("case", sorted(BAD_REQUESTS))
def test_bad_input_gets_a_clear_per_request_error(triton_server: TritonProcess, client: MultimodalClient,
                                                 case: str) -> None:
    kwargs, reason = BAD_REQUESTS[case]
    reasons = reason if isinstance(reason, tuple) else (reason,)
    before = scrape(triton_server)
    with pytest.raises(InferenceError) as info:
        client.infer(**kwargs)
    assert info.value.status == "400"
    assert str(info.value).split(":")[0] in reasons
    after = scrape(triton_server)
    assert sum(delta(before, after, f'modalscale_request_errors_total{{reason="{r}"}}') for r in reasons) == 1
    assert client.infer(text="a photo of a cat").modality == "text"  # still serving


def test_grayscale_and_alpha_png_are_converted(client: MultimodalClient) -> None:
    gray = Image.open(io.BytesIO(photo_at("chelsea", 300, 200, "PNG"))).convert("L")
    rgba = Image.open(io.BytesIO(photo_at("chelsea", 300, 200, "PNG"))).convert("RGBA")
    rgba.putalpha(200)
    for data in (_png(gray), _png(rgba)):
        result = client.infer(images=[data])
        _unit(result.embedding)
        assert result.modality == "image"


def test_missing_and_unknown_inputs_are_rejected(triton_server: TritonProcess) -> None:
    raw = triton_http.InferenceServerClient(triton_server.http_url)
    before = scrape(triton_server)
    try:
        with pytest.raises(InferenceServerException) as info:
            raw.infer("multimodal", [])
        assert delta(before, scrape(triton_server), 'modalscale_request_errors_total{reason="MissingInput"}') == 1
        assert info.value.status() == "400"
        assert info.value.message().startswith("MissingInput: request has neither IMAGES nor TEXT")
        unknown = triton_http.InferInput("IMAGE", [1, 1], "BYTES")
        unknown.set_data_from_numpy(np.array([[b"x"]], dtype=object))
        with pytest.raises(InferenceServerException, match="unexpected inference input 'IMAGE'"):
            raw.infer("multimodal", [unknown])
    finally:
        raw.close()


def test_bad_requests_in_the_same_batch_do_not_fail_good_ones(triton_server: TritonProcess) -> None:
    async def run() -> list[object]:
        aclient = AsyncMultimodalClient(triton_server.grpc_url, "grpc")
        try:
            calls = []
            for i in range(6):
                if i == 5:  # failed the whole batch until decode_image refused it
                    calls.append(aclient.infer(images=[_palette_png_with_too_many_alphas()]))
                elif i % 2:
                    calls.append(aclient.infer(images=[b"garbage %d" % i]))
                else:
                    calls.append(aclient.infer(images=[photo_at("coffee", 160, 120)], text=f"cup {i}"))
            return await asyncio.gather(*calls, return_exceptions=True)
        finally:
            await aclient.close()

    before = scrape(triton_server)
    results = asyncio.run(run())
    after = scrape(triton_server)
    for i, result in enumerate(results):
        if i % 2:
            assert isinstance(result, InferenceError) and "CorruptImage" in str(result)
        else:
            assert not isinstance(result, Exception), result
            assert result.modality == "image_text"  # type: ignore[attr-defined]
    assert delta(before, after, 'modalscale_request_errors_total{reason="CorruptImage"}') == 3
