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


def _effect(calls: list[tuple[str, str, names.Labels, float]]) -> tuple[dict[tuple[str, names.Labels], float],
                                                                           dict[tuple[str, names.Labels], list[float]]]:
    """What Prometheus would read after the calls: counter totals and the multiset of observations per series."""
    counters: dict[tuple[str, names.Labels], float] = {}
    observed: dict[tuple[str, names.Labels], list[float]] = {}
    for op, name, label_set, value in calls:
        if op == "increment":
            counters[name, label_set] = counters.get((name, label_set), 0.0) + value
        else:
            observed.setdefault((name, label_set), []).append(value)
    return counters, {k: sorted(v) for k, v in observed.items()}


def _record(batch: names.MetricBatch, request: int) -> None:
    """Request ``request`` of a mixed batch: texts, one- and two-image requests, a rejected one, cache hits."""
    kind = request % 4
    if kind == 0:
        batch.accepted("text", [], 12)
        batch.computed("text", {"decode": 1e-5, "tokenize": 2e-4, "text_encoder": 0.02, "fusion": 1e-4}, 0, 0)
    elif kind == 1:
        batch.accepted("image", [640 * 480], None)
        batch.computed("image", {"decode": 0.004, "image_encoder": 0.03, "fusion": 1e-4}, 0, 1)
    elif kind == 2:
        batch.accepted("image_text", [224 * 224, 1600 * 1200], 40)
        batch.computed("image_text", {"decode": 0.01, "tokenize": 3e-4, "image_encoder": 0.05,
                                      "text_encoder": 0.03, "fusion": 1e-4}, 1, 1)
    else:
        batch.error("CorruptImage")


def test_a_batch_sends_one_increment_per_counter_series_and_the_same_totals_as_per_request_calls() -> None:
    batched = names.MetricBatch()
    per_request: list[tuple[str, str, names.Labels, float]] = []
    for r in range(8):
        _record(batched, r)
        alone = names.MetricBatch()
        _record(alone, r)
        per_request += alone.calls()
    assert _effect(batched.calls()) == _effect(per_request)
    increments = [c for c in batched.calls() if c[0] == "increment"]
    assert len(increments) == len({(c[1], c[2]) for c in increments})  # one call per series
    # 8 requests: requests_total x3 modalities, errors x1, cache hit + miss = 6 increments (per request: 14)
    assert len(increments) == 6
    assert sum(1 for c in per_request if c[0] == "increment") == 14
    assert len(batched) == len(batched.calls()) < len(per_request)
    counters, _ = _effect(batched.calls())
    assert counters[names.REQUESTS_TOTAL, names.labels(modality="text")] == 2
    assert counters[names.EMBEDDING_CACHE_LOOKUPS_TOTAL, names.labels(result="miss")] == 4
    assert counters[names.REQUEST_ERRORS_TOTAL, names.labels(reason="CorruptImage")] == 2


def test_a_single_request_sends_what_it_sent_before_and_zero_lookups_send_nothing() -> None:
    batch = names.MetricBatch()
    batch.accepted("text", [], 5)
    batch.computed("text", {"decode": 1e-5, "tokenize": 1e-4, "text_encoder": 0.01, "fusion": 1e-4}, 0, 0)
    calls = batch.calls()
    assert [(op, name) for op, name, _, _ in calls] == [
        ("increment", names.REQUESTS_TOTAL), ("observe", names.REQUEST_IMAGES), ("observe", names.REQUEST_TEXT_TOKENS),
        *[("observe", names.STAGE_COMPUTE_SECONDS)] * 4]
    assert calls[4][2] == names.labels(modality="text", stage="tokenize")
    batch.clear()
    assert batch.calls() == [] and len(batch) == 0


def test_metrics_batching_parameter_is_read_and_checked() -> None:
    def settings(value: str) -> ModelSettings:
        return ModelSettings.from_model_config({"parameters": {"metrics_batching": {"string_value": value}}})

    assert ModelSettings().metrics_batching == "execute"
    assert settings("request").metrics_batching == "request"
    assert set(names.METRICS_BATCHING) == {"execute", "request"}
    with pytest.raises(ValueError, match="metrics_batching"):
        settings("sometimes")
