"""Per-request features of a multimodal request, in one fixed order shared by training, the artifact and the policy.

Every consumer of the service-time model (profile fitting, the replica policy, the simulator) builds its input
matrix here, so the column order is defined once (``FEATURES``) and saved with the model artifact.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import cast

import numpy as np
from numpy.typing import ArrayLike, NDArray


class Modality(enum.StrEnum):
    """What a request carries: text only, images only, or both."""

    TEXT = "text"
    IMAGE = "image"
    IMAGE_TEXT = "image_text"


MODALITIES: tuple[Modality, ...] = (Modality.TEXT, Modality.IMAGE, Modality.IMAGE_TEXT)
"""Modalities in one-hot column order."""

FEATURES: tuple[str, ...] = (
    "image_pixels",
    "image_count",
    "text_tokens",
    "batch_size",
    "modality_text",
    "modality_image",
    "modality_image_text",
)
"""Column names of ``make_features`` output, in order. Saved with every model artifact.

- ``image_pixels``: pixels summed over all images of the request (width x height each).
- ``image_count``: number of images.
- ``text_tokens``: prompt text tokens.
- ``batch_size``: size of the server-side batch the request ran in (1 when unknown or unbatched).
- ``modality_*``: one-hot of :class:`Modality`.
"""


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One inference request as the service-time model sees it.

    Attributes:
        image_pixels: Pixels summed over all images (0 for text-only).
        image_count: Number of images (0 for text-only).
        text_tokens: Prompt text tokens.
        batch_size: Server-side batch the request ran in; 1 when unbatched or unknown.
    """

    image_pixels: int = 0
    image_count: int = 0
    text_tokens: int = 0
    batch_size: int = 1

    def __post_init__(self) -> None:
        if self.image_pixels < 0 or self.image_count < 0 or self.text_tokens < 0:
            raise ValueError(f"request counts must be >= 0, got {self!r}")
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {self.batch_size}")
        if (self.image_count == 0) != (self.image_pixels == 0):
            raise ValueError(f"image_count and image_pixels must be both zero or both positive, got {self!r}")

    @property
    def modality(self) -> Modality:
        """Modality implied by the counts (images and/or text)."""
        return modality_of(self.image_count, self.text_tokens)


def modality_of(image_count: int, text_tokens: int) -> Modality:
    """Classify one request: no images -> text; images without text -> image; both -> image_text."""
    if image_count <= 0:
        return Modality.TEXT
    return Modality.IMAGE if text_tokens <= 0 else Modality.IMAGE_TEXT


def modality_codes(image_count: ArrayLike, text_tokens: ArrayLike) -> NDArray[np.int64]:
    """Vectorised :func:`modality_of`: index into ``MODALITIES`` per request, shape ``(n,)``."""
    images = np.asarray(image_count)
    tokens = np.asarray(text_tokens)
    return np.where(images <= 0, 0, np.where(tokens <= 0, 1, 2)).astype(np.int64)


def features_from_columns(
    image_pixels: ArrayLike,
    image_count: ArrayLike,
    text_tokens: ArrayLike,
    batch_size: ArrayLike | None = None,
    modality: Iterable[str] | None = None,
) -> NDArray[np.float64]:
    """Build the feature matrix from column arrays (vectorised; the simulator and profile fitting use this).

    Args:
        image_pixels: Shape ``(n,)``, pixels summed over the request's images.
        image_count: Shape ``(n,)``, images per request.
        text_tokens: Shape ``(n,)``, text tokens per request.
        batch_size: Shape ``(n,)``; None means 1 for every request.
        modality: Optional ``(n,)`` modality names (``text|image|image_text``); None derives them from the counts.
            When given, each must agree with the counts.
    Returns:
        Array of shape ``(n, len(FEATURES))``, float64, columns in ``FEATURES`` order.
    Raises:
        ValueError: on mismatched lengths, negative counts, ``batch_size < 1``, an unknown modality name or a
            modality that contradicts the counts.
    """
    pixels = np.asarray(image_pixels, dtype=np.float64).reshape(-1)
    images = np.asarray(image_count, dtype=np.float64).reshape(-1)
    tokens = np.asarray(text_tokens, dtype=np.float64).reshape(-1)
    n = pixels.shape[0]
    batch = np.ones(n) if batch_size is None else np.asarray(batch_size, dtype=np.float64).reshape(-1)
    if not (images.shape[0] == tokens.shape[0] == batch.shape[0] == n):
        raise ValueError(
            f"feature columns differ in length: image_pixels={n}, image_count={images.shape[0]}, "
            f"text_tokens={tokens.shape[0]}, batch_size={batch.shape[0]}"
        )
    if n and (min(pixels.min(), images.min(), tokens.min()) < 0 or not np.isfinite(pixels + images + tokens).all()):
        raise ValueError("image_pixels, image_count and text_tokens must be finite and >= 0")
    if n and batch.min() < 1:
        raise ValueError("batch_size must be >= 1")
    codes = modality_codes(images, tokens)
    if modality is not None:
        names = [str(m) for m in modality]
        if len(names) != n:
            raise ValueError(f"modality has {len(names)} entries for {n} requests")
        index = {m.value: i for i, m in enumerate(MODALITIES)}
        unknown = sorted({m for m in names if m not in index})
        if unknown:
            raise ValueError(f"unknown modality {unknown}; expected one of {[m.value for m in MODALITIES]}")
        given = np.array([index[m] for m in names], dtype=np.int64)
        bad = np.flatnonzero(given != codes)
        if bad.size:
            i = int(bad[0])
            raise ValueError(
                f"row {i}: modality {names[i]!r} contradicts image_count={images[i]:g}, text_tokens={tokens[i]:g}"
            )
    onehot = np.zeros((n, len(MODALITIES)))
    onehot[np.arange(n), codes] = 1.0
    return np.column_stack([pixels, images, tokens, batch, onehot]).reshape(n, len(FEATURES))


def make_features(requests: Iterable[RequestRecord]) -> NDArray[np.float64]:
    """Feature matrix for requests (pure).

    Args:
        requests: Any iterable of :class:`RequestRecord`.
    Returns:
        Array of shape ``(n_requests, len(FEATURES))`` in ``FEATURES`` order; ``(0, len(FEATURES))`` when empty.
    """
    rows = list(requests)
    return features_from_columns(
        [r.image_pixels for r in rows],
        [r.image_count for r in rows],
        [r.text_tokens for r in rows],
        [r.batch_size for r in rows],
    )


def features_from_mapping(columns: Mapping[str, ArrayLike]) -> NDArray[np.float64]:
    """Feature matrix from a column mapping (a dict of arrays, a pandas DataFrame, a numpy structured array).

    Uses the profile CSV column names ``image_pixels``, ``image_count``, ``text_tokens`` and, when present,
    ``batch_size`` and ``modality``.

    Raises:
        ValueError: a required column is missing (named in the message) or a value is invalid.
    """
    names = _column_names(columns)
    missing = [c for c in ("image_pixels", "image_count", "text_tokens") if c not in names]
    if missing:
        raise ValueError(f"profile data lacks column(s) {missing}; have {sorted(names)}")
    return features_from_columns(
        columns["image_pixels"],
        columns["image_count"],
        columns["text_tokens"],
        columns["batch_size"] if "batch_size" in names else None,
        cast("Iterable[str]", columns["modality"]) if "modality" in names else None,  # str codes per row
    )


def _column_names(columns: Mapping[str, ArrayLike]) -> set[str]:
    dtype_names = getattr(getattr(columns, "dtype", None), "names", None)
    if dtype_names:
        return set(dtype_names)
    return {str(k) for k in columns.keys()}
