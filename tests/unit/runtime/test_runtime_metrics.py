"""Names, label sets and per-request observations of the runtime's feature metrics (pure; no Triton)."""

from __future__ import annotations

import io

import numpy as np
import pytest
from PIL import Image

from modalscale.runtime.model import metrics as names
from modalscale.runtime.model.inputs import Modality, parse_request
from modalscale.runtime.model.settings import ModelSettings


def png(width: int, height: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (10, 20, 30)).save(buf, format="PNG")
    return buf.getvalue()


def observations(images: list[bytes], text: str | None, tokens: int) -> list[tuple[str, str, float]]:
    """As FeatureMetrics.accepted does: parse the request, then observe under its modality."""
    parsed = parse_request(np.array([images], dtype=object) if images else None,
                           None if text is None else np.array([[text.encode()]], dtype=object), ModelSettings())
    return names.request_observations(parsed.modality.value, [i.pixels for i in parsed.images],
                                      tokens if parsed.text is not None else None)


def test_modality_label_values_are_the_runtime_modalities() -> None:
    assert set(names.MODALITIES) == {m.value for m in Modality}
    for family, labels in names.FEATURE_MODALITIES.items():
        assert labels and set(labels) <= set(names.MODALITIES), family


def test_names_and_buckets_are_the_ones_the_autoscaler_and_dashboards_read() -> None:
    assert (names.REQUEST_IMAGE_PIXELS, names.REQUEST_IMAGES, names.REQUEST_TEXT_TOKENS,
            names.STAGE_COMPUTE_SECONDS) == ("modalscale_request_image_pixels", "modalscale_request_images",
                                             "modalscale_request_text_tokens", "modalscale_stage_compute_seconds")
    assert names.PIXEL_BUCKETS[0] == 4096 and names.PIXEL_BUCKETS[-1] == 40_000_000
    assert names.IMAGE_COUNT_BUCKETS[0] == 0  # text-only requests observe 0 images and land in le="0"
    for buckets in (names.PIXEL_BUCKETS, names.IMAGE_COUNT_BUCKETS, names.TOKEN_BUCKETS, names.SECONDS_BUCKETS):
        assert list(buckets) == sorted(set(buckets))


def test_image_request_observes_only_image_series() -> None:
    got = observations([png(300, 200), png(64, 48)], None, 0)
    assert got == [(names.REQUEST_IMAGES, "image", 2.0),
                   (names.REQUEST_IMAGE_PIXELS, "image", 60_000.0),
                   (names.REQUEST_IMAGE_PIXELS, "image", 3_072.0)]


def test_text_request_observes_zero_images_and_its_tokens_under_text() -> None:
    got = observations([], "a photo of a cat", 5)
    assert got == [(names.REQUEST_IMAGES, "text", 0.0), (names.REQUEST_TEXT_TOKENS, "text", 5.0)]


def test_image_and_text_request_observes_all_three_under_image_text() -> None:
    got = observations([png(100, 100)], "coffee in a cup", 4)
    assert got == [(names.REQUEST_IMAGES, "image_text", 1.0),
                   (names.REQUEST_IMAGE_PIXELS, "image_text", 10_000.0),
                   (names.REQUEST_TEXT_TOKENS, "image_text", 4.0)]


@pytest.mark.parametrize(("images", "text"), [([png(8, 8)], None), ([], "hello"), ([png(8, 8)], "hello")],
                         ids=["image", "text", "image_text"])
def test_every_observation_has_a_series_created_at_load(images: list[bytes], text: str | None) -> None:
    """FeatureMetrics creates one metric per (family, modality) of FEATURE_MODALITIES; each observation needs one."""
    for family, modality, _ in observations(images, text, 1):
        assert modality in names.FEATURE_MODALITIES[family], (family, modality)
