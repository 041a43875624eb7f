"""A KServe v2 inference request -> the per-request features the runtime exports (pure; no network, no decode).

Shapes and names: see :class:`RequestFeatures`. Every bad payload raises :class:`PayloadError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""Default body-size limit of :func:`features_from_http`, bytes (64 MiB)."""


@dataclass(frozen=True)
class InputNames:
    """Which inputs of the model carry images and text (``spec.model.inputs``); defaults = the built-in model."""

    images: str = "IMAGES"
    text: str = "TEXT"


@dataclass(frozen=True)
class RequestFeatures:
    """Features of one request, as the built-in runtime exports them (``modalscale.runtime.model.metrics``)."""

    modality: str
    """``image``, ``text`` or ``image_text`` (:data:`modalscale.runtime.model.metrics.MODALITIES`)."""
    image_pixels: tuple[int, ...]
    """``width * height`` per image in request order, pixels, from the encoded headers only."""
    text_tokens: int | None
    """Tokens of the text (:data:`TEXT_TOKENS_METHOD`); None = no text."""
    image_digests: tuple[bytes, ...]
    """BLAKE2b-128 (``hashlib.blake2b(digest_size=16)``) of each image's encoded bytes, the cache-affinity key."""


class PayloadError(ValueError):
    """The request cannot be served as sent; the gateway answers HTTP 400 / gRPC INVALID_ARGUMENT with ``str(e)``.

    Attributes:
        field: Where the fault is, e.g. ``body``, ``inputs[IMAGES].data[0]``,
            ``header Inference-Header-Content-Length``.
        reason: CamelCase, e.g. ``BodyTooLarge``, ``MalformedJson``, ``WrongDatatype``, ``MissingInput``,
            ``CorruptImageHeader``.
        fix: What the client should change.
    """

    def __init__(self, field: str, reason: str, problem: str, fix: str) -> None:
        super().__init__(f"{field}: {problem} ({reason}); {fix}")
        self.field = field
        self.reason = reason
        self.fix = fix


def features_from_http(body: bytes, headers: Mapping[str, str], inputs: InputNames = InputNames(),
                       max_body_bytes: int = DEFAULT_MAX_BODY_BYTES) -> RequestFeatures:
    """Features of a KServe v2 HTTP/REST infer request body (JSON, or the binary tensor extension)."""
    raise NotImplementedError


def features_from_grpc(message: bytes, inputs: InputNames = InputNames()) -> RequestFeatures:
    """Features of a serialized ``inference.ModelInferRequest``."""
    raise NotImplementedError
