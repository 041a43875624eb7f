"""The GPU layout's compute, apart from Triton: what its three Python-backend models (``gpu_models``) do to tensors.

``gpu_models`` only moves tensors between Triton and these functions, so the same code runs in a unit test on the
CPU, in ``benchmarks/gpu_encoders.py`` on a GPU without tritonserver, and inside the backend's stub.

* :func:`pad_images` (orchestrator, CPU): the images of one request that need encoding, zero-padded to their fixed
  square side (``batching.fixed_side``), FP16 pixels (the BLS tensor's type) with their valid ``(h, w)``.
* :func:`encode_image_items` (image encoder model): one encoder pass per side over the images of every request
  in the dynamic batch.
* :func:`encode_text_rows` (text encoder model): one pass per length bucket (``batching.TEXT_LENGTH_BUCKETS``).
* :func:`fuse_request` (orchestrator): mean image features and the text features through the fusion head.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import NDArray

from modalscale.runtime.model.batching import fixed_side, plan_text_groups
from modalscale.runtime.model.encoders import IMAGE_FEATURE_DIM, TEXT_FEATURE_DIM, MultimodalEncoder
from modalscale.runtime.model.inputs import DecodedImage


@dataclass(frozen=True)
class SideBatch:
    """The images of one request at one fixed side, as the orchestrator sends them to the image encoder."""

    side: int
    """Square side in pixels."""
    pixels: NDArray[np.float16]
    """(k, 3, side, side), normalised, zero beyond each image's valid size."""
    valid_hw: NDArray[np.int32]
    """(k, 2): each image's resolution bucket ``(h, w)`` in pixels."""
    members: tuple[int, ...]
    """Index of each row's image in the request."""


def pad_images(images: Sequence[DecodedImage], todo: Sequence[int], sides: Sequence[int]) -> list[SideBatch]:
    """Group the images ``todo`` (indices into ``images``, each decoded: ``array`` set) by fixed side.

    Args:
        images: A request's images.
        todo: The indices to encode (those the embedding cache did not hold).
        sides: The layout's fixed sides, ascending, in pixels (``repo_config.gpu_image_sides``).
    Returns:
        One :class:`SideBatch` per side in use, in order of first use.
    Raises:
        ValueError: An image's bucket exceeds every side, or an image in ``todo`` was not decoded.
    """
    by_side: dict[int, list[int]] = {}
    for k in todo:
        by_side.setdefault(fixed_side(images[k].bucket, sides), []).append(k)
    out = []
    for side, members in by_side.items():
        pixels = np.zeros((len(members), 3, side, side), np.float16)
        valid = np.zeros((len(members), 2), np.int32)
        for j, k in enumerate(members):
            h, w = images[k].bucket  # raises for an image not decoded (an embedding-cache hit)
            pixels[j, :, :h, :w] = images[k].array
            valid[j] = (h, w)
        out.append(SideBatch(side, pixels, valid, tuple(members)))
    return out


def encode_image_items(encoder: MultimodalEncoder, pixels: Sequence[NDArray[Any]],
                       valid_hw: Sequence[NDArray[Any]]
                       ) -> tuple[list[NDArray[np.float32]], list[NDArray[np.int32]]]:
    """The image encoder model's batch: every image of every request, one encoder pass per side.

    Args:
        pixels: Per request, (k, 3, S, S) pixels, float16 (as the orchestrator sends them) or float32; float16 is
            widened to float32 on the encoder's device (``MultimodalEncoder.encode_images``).
        valid_hw: Per request, (k, 2) valid ``(h, w)``.
    Returns:
        Per request, features float32 (k, 1280) and top-1 classes int32 (k, 1).
    """
    by_side: dict[int, list[tuple[int, int]]] = {}
    for r, p in enumerate(pixels):
        for k in range(p.shape[0]):
            by_side.setdefault(int(p.shape[-1]), []).append((r, k))
    feats = [np.zeros((p.shape[0], IMAGE_FEATURE_DIM), np.float32) for p in pixels]
    classes = [np.zeros((p.shape[0], 1), np.int32) for p in pixels]
    for members in by_side.values():
        batch = np.stack([pixels[r][k] for r, k in members])  # float16 stays float16 to the device
        result = encoder.encode_images(batch, [(int(valid_hw[r][k][0]), int(valid_hw[r][k][1]))
                                               for r, k in members])
        for j, (r, k) in enumerate(members):
            feats[r][k] = result.features[j]
            classes[r][k, 0] = result.classes[j]
    return feats, classes


def encode_text_rows(encoder: MultimodalEncoder, ids: Sequence[Sequence[int]]) -> NDArray[np.float32]:
    """The text encoder model's batch: one pass per length bucket (modality-aware grouping).

    Args:
        ids: Per request, token ids with [CLS] and [SEP].
    Returns:
        float32 (n, 384).
    """
    out = np.zeros((len(ids), TEXT_FEATURE_DIM), np.float32)
    for group in plan_text_groups([len(row) for row in ids], modality_aware=True):
        rows = list(group.indices)
        out[rows] = encoder.encode_texts([ids[i] for i in rows], group.pad_to[0])
    return out


def fuse_request(encoder: MultimodalEncoder, image_features: Sequence[NDArray[np.float32]],
                 text_features: NDArray[np.float32] | None) -> NDArray[np.float32]:
    """One request's embedding: the mean of its images' features and its text's, through the fusion head.

    Args:
        image_features: (1280,) per image of the request (none: no image).
        text_features: (1, 384) or None (no text).
    Returns:
        float32 (256,).
    """
    image = np.zeros((1, IMAGE_FEATURE_DIM), np.float32)
    if image_features:
        image[0] = np.stack(image_features).mean(axis=0)
    text = np.zeros((1, TEXT_FEATURE_DIM), np.float32) if text_features is None else text_features.astype(np.float32)
    fused: NDArray[np.float32] = encoder.fuse(image, np.array([bool(image_features)]), text,
                                              np.array([text_features is not None]))[0]
    return fused
