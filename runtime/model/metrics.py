"""Names, help texts and bucket boundaries of the per-request feature metrics (pure; no Triton import).

Triton's Python backend (2.51) supports counters, gauges and histograms through ``pb_utils.MetricFamily``;
they appear on Triton's ``/metrics`` endpoint next to the standard ``nv_inference_*`` series. Every feature
histogram carries the request's ``modality``, so the operator's autoscaler (``autoscale.observe``) reads each
class's mean features instead of means pooled over the classes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

REQUESTS_TOTAL = "modalscale_requests_total"
"""Counter of accepted requests by ``modality`` (image, text, image_text): those that passed the model's validation,
counted whether they are then served or fail (an encoder failure, the image encoder pool not answering), in every
deployment shape; a request refused by the validation counts in :data:`REQUEST_ERRORS_TOTAL` only."""
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
IMAGE_INT8_FALLBACK = "modalscale_image_int8_fallback"
"""Gauge by ``model``, only where INT8 images were asked for (engine openvino, precision INT8,
``image_int8_min_side_pixels`` > 0, the image encoder loaded at start): 1 when the INT8 image encoder missed its
fidelity bound at load and every image is served by the FP32 encoder (the reason, with the measured cosine, is in
the model's log), 0 when INT8 serves the large images. Without it the fallback was visible only in that log."""

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
    IMAGE_INT8_FALLBACK: "1 when the INT8 image encoder fell back to FP32 at load (missed its fidelity bound), "
                         "0 when INT8 serves the large images; only where INT8 images were asked for.",
}


def request_observations(modality: str, image_pixels: Sequence[int | None], text_tokens: int | None
                         ) -> list[tuple[str, str, float]]:
    """The feature-histogram observations of one accepted request (pure).

    Args:
        modality: The request's class, one of :data:`MODALITIES`.
        image_pixels: ``width * height`` of each image as received, pixels (empty for text-only); None for an image
            whose size is unknown (a front's request whose image encoder pool failed or did not answer): it counts
            in the image count, with no pixel observation.
        text_tokens: WordPiece tokens of the text; None = no text.
    Returns:
        ``[(histogram name, modality label, value), ...]``: ``images`` once (the image count), ``pixels`` once per
        image of known size, ``tokens`` once when there is text; all labelled with ``modality``.
    """
    out = [(REQUEST_IMAGES, modality, float(len(image_pixels)))]
    out += [(REQUEST_IMAGE_PIXELS, modality, float(p)) for p in image_pixels if p is not None]
    if text_tokens is not None:
        out.append((REQUEST_TEXT_TOKENS, modality, float(text_tokens)))
    return out


Labels = tuple[tuple[str, str], ...]
"""A metric's label set as sorted ``(name, value)`` pairs (hashable)."""

METRICS_BATCHING = ("execute", "request")
"""Values of the model parameter ``metrics_batching``: ``execute`` (default) sends one metric call per counter
series per ``execute`` call; ``request`` sends each request's updates on their own, as before (kept so a benchmark
can measure the two side by side; not a CRD field)."""


def labels(**values: str) -> Labels:
    """``labels(modality="image")`` -> ``(("modality", "image"),)``: a hashable, ordered label set."""
    return tuple(sorted(values.items()))


class MetricBatch:
    """The metric updates of one ``execute`` call, collected in the model's process and sent together (pure).

    Each metric update of Triton's Python backend (``Metric.increment`` / ``observe``) is a synchronous IPC round
    trip from the stub to ``tritonserver`` (measured 18-29 us of server CPU per call on the 2-vCPU dev machine,
    ``benchmarks/runtime_capacity.py``'s notes). Counter increments of the same series are summed, so a batch of
    n requests sends one ``increment`` per (counter, label set) instead of one per request and series. Histogram
    observations cannot be merged (the backend has no weighted or multi-value ``observe``), so each stays one
    call. What Prometheus reads is unchanged: the same series with the same values after the call returns.
    """

    def __init__(self) -> None:
        self.increments: dict[tuple[str, Labels], float] = {}
        self.observations: list[tuple[str, Labels, float]] = []

    def increment(self, name: str, label_set: Labels, by: float = 1.0) -> None:
        """Add ``by`` to counter ``name`` with ``label_set`` (summed with earlier increments of the same series)."""
        if by:
            key = (name, label_set)
            self.increments[key] = self.increments.get(key, 0.0) + by

    def observe(self, name: str, label_set: Labels, value: float) -> None:
        """Record one observation of histogram ``name`` with ``label_set``."""
        self.observations.append((name, label_set, value))

    def error(self, reason: str) -> None:
        """One rejected request with ``reason`` (``modalscale_request_errors_total``)."""
        self.increment(REQUEST_ERRORS_TOTAL, labels(reason=reason))

    def accepted(self, modality: str, image_pixels: Sequence[int | None], text_tokens: int | None) -> None:
        """One accepted request (it passed the model's validation, whether or not it is then served):
        ``modalscale_requests_total`` and its feature observations (:func:`request_observations`), all under
        ``modality``."""
        self.increment(REQUESTS_TOTAL, labels(modality=modality))
        for name, label, value in request_observations(modality, image_pixels, text_tokens):
            self.observe(name, labels(modality=label), value)

    def computed(self, modality: str, stage_s: Mapping[str, float], hits: int, misses: int) -> None:
        """One finished request: its compute seconds per stage (``modalscale_stage_compute_seconds``) and its
        embedding-cache lookups (``modalscale_embedding_cache_lookups_total``)."""
        for stage, seconds in stage_s.items():
            self.observe(STAGE_COMPUTE_SECONDS, labels(modality=modality, stage=stage), seconds)
        self.increment(EMBEDDING_CACHE_LOOKUPS_TOTAL, labels(result="hit"), hits)
        self.increment(EMBEDDING_CACHE_LOOKUPS_TOTAL, labels(result="miss"), misses)

    def calls(self) -> list[tuple[str, str, Labels, float]]:
        """The metric calls to send, in a stable order: ``("increment" | "observe", name, labels, value)``;
        counters first (one per series), then every observation in the order recorded."""
        return ([("increment", name, label_set, by) for (name, label_set), by in self.increments.items()]
                + [("observe", name, label_set, value) for name, label_set, value in self.observations])

    def clear(self) -> None:
        """Forget everything recorded (after it was sent)."""
        self.increments.clear()
        self.observations.clear()

    def __len__(self) -> int:
        """Number of metric calls :meth:`calls` returns."""
        return len(self.increments) + len(self.observations)
