"""Names, help texts and bucket boundaries of the per-request feature metrics (pure; no Triton import).

Triton's Python backend (2.51) supports counters, gauges and histograms through ``pb_utils.MetricFamily``;
they appear on Triton's ``/metrics`` endpoint next to the standard ``nv_inference_*`` series. Every feature
histogram carries the request's ``modality``, so the operator's autoscaler (``autoscale_observe``) reads each
class's mean features instead of means pooled over the classes.
"""

from __future__ import annotations

from collections.abc import Sequence

REQUESTS_TOTAL = "modalscale_requests_total"
"""Counter of successfully parsed requests by ``modality`` (image, text, image_text)."""
REQUEST_ERRORS_TOTAL = "modalscale_request_errors_total"
"""Counter of rejected requests by ``reason`` (CamelCase, e.g. CorruptImage, TooManyImages)."""
REQUEST_IMAGE_PIXELS = "modalscale_request_image_pixels"
"""Histogram of width x height of each received image, in pixels (before resizing), by ``modality``."""
REQUEST_IMAGES = "modalscale_request_images"
"""Histogram of images per request (text-only requests observe 0), by ``modality``."""
REQUEST_TEXT_TOKENS = "modalscale_request_text_tokens"
"""Histogram of MiniLM WordPiece tokens per text (without special tokens, before truncation to 256), by
``modality``."""
STAGE_COMPUTE_SECONDS = "modalscale_stage_compute_seconds"
"""Histogram of compute seconds per request by ``stage`` and ``modality``; a batched pass is split over its
requests in proportion to their items."""
EMBEDDING_CACHE_LOOKUPS_TOTAL = "modalscale_embedding_cache_lookups_total"
"""Counter of image-embedding cache lookups by ``result`` (hit, miss)."""
INFLIGHT_REQUESTS = "modalscale_inflight_requests"
"""Gauge of requests inside a model's ``execute`` by ``model`` (router and batched models). Triton's own
in-flight count (``nv_inference_pending_request_count``) covers only queued requests, not executing ones, so a
router waiting on a BLS call is invisible to Triton's shutdown; :mod:`modalscale.runtime.drain` reads both."""

STAGES = ("decode", "tokenize", "image_encoder", "text_encoder", "fusion")
"""Values of the ``stage`` label."""

MODALITIES = ("image", "text", "image_text")
"""Values of the ``modality`` label: the values of :class:`modalscale.runtime.model.inputs.Modality` (a unit
test keeps them equal; spelled out here so this module imports nothing)."""

FEATURE_MODALITIES: dict[str, tuple[str, ...]] = {
    REQUEST_IMAGE_PIXELS: ("image", "image_text"),
    REQUEST_IMAGES: MODALITIES,
    REQUEST_TEXT_TOKENS: ("text", "image_text"),
}
"""The ``modality`` values each feature histogram is exported with: the classes that can observe it (text-only
requests observe ``images`` = 0, so that histogram has all three). Every series is created when the model loads,
so Prometheus sees it from 0 before the first request."""

PIXEL_BUCKETS = (4_096.0, 16_384.0, 65_536.0, 262_144.0, 1_048_576.0, 4_194_304.0, 16_777_216.0, 40_000_000.0)
IMAGE_COUNT_BUCKETS = (0.0, 1.0, 2.0, 4.0, 8.0, 16.0)
TOKEN_BUCKETS = (8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0, 4096.0)
SECONDS_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

HELP = {
    REQUESTS_TOTAL: "Requests accepted by the modalscale model, by modality class.",
    REQUEST_ERRORS_TOTAL: "Requests rejected by the modalscale model, by reason.",
    REQUEST_IMAGE_PIXELS: "Pixels (width x height, as received) of each image, by modality class.",
    REQUEST_IMAGES: "Images per request, by modality class.",
    REQUEST_TEXT_TOKENS: "WordPiece tokens per request text (no special tokens, before truncation), by modality class.",
    STAGE_COMPUTE_SECONDS: "Compute seconds attributed to a request, by stage and modality class.",
    EMBEDDING_CACHE_LOOKUPS_TOTAL: "Image embedding cache lookups, by result.",
    INFLIGHT_REQUESTS: "Requests being executed by the model (queued requests are not counted here).",
}


def request_observations(modality: str, image_pixels: Sequence[int], text_tokens: int | None
                         ) -> list[tuple[str, str, float]]:
    """The feature-histogram observations of one accepted request (pure).

    Args:
        modality: The request's class, one of :data:`MODALITIES`.
        image_pixels: ``width * height`` of each image as received, pixels (empty for text-only).
        text_tokens: WordPiece tokens of the text; None = no text.
    Returns:
        ``[(histogram name, modality label, value), ...]``: ``images`` once (the image count), ``pixels`` once per
        image, ``tokens`` once when there is text; all labelled with ``modality``.
    """
    out = [(REQUEST_IMAGES, modality, float(len(image_pixels)))]
    out += [(REQUEST_IMAGE_PIXELS, modality, float(p)) for p in image_pixels]
    if text_tokens is not None:
        out.append((REQUEST_TEXT_TOKENS, modality, float(text_tokens)))
    return out
