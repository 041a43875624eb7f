"""Pure planning of how one Triton batch is run through the encoders.

Images: every layout runs one forward pass per exact resolution bucket (in order of first appearance), so an
image is never zero-padded to a larger neighbour: padding reaches the convolutions at the image's borders and
masked pooling cannot undo it, so an image's features would depend on what it was batched with (torch FP32: cosine
0.936 for a 96x64 photo beside an 800x600 one), and the padded pixels cost encoder CPU. Texts: naive batching
pads every text of the batch to the longest and runs one pass (the attention mask keeps the padding out: features
within cosine 0.99999 of the text alone); modality-aware batching runs one pass per token-length bucket, so short
texts do not pay for the padding of long ones. The GPU layout pads images to fixed square sides instead
(:func:`fixed_side`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

TEXT_LENGTH_BUCKETS = (16, 32, 64, 128, 256)
"""Token-length buckets (including [CLS] and [SEP]) for modality-aware text batching; 256 is MiniLM's limit."""


@dataclass(frozen=True)
class Group:
    """One forward pass: the items it takes and the shape every item is padded to."""

    indices: tuple[int, ...]
    """Positions in the input sequence, ascending."""
    pad_to: tuple[int, ...]
    """Image: ``(h, w)`` in pixels; text: ``(tokens,)``."""

    def padded_size(self) -> int:
        """Work units of this pass: items x product of ``pad_to`` (pixels or tokens)."""
        size = len(self.indices)
        for dim in self.pad_to:
            size *= dim
        return size


def plan_image_groups(shapes: Sequence[tuple[int, int]]) -> list[Group]:
    """Plan the image-encoder passes of a batch: one pass per distinct bucket, never padded.

    Every layout and ``modality_aware_batching`` setting uses this plan (see the module docstring for why); a batch
    whose images share one bucket is the single pass it always was.

    Args:
        shapes: ``(h, w)`` bucket of each image, in pixels.
    Returns:
        Groups covering every index exactly once, in order of first appearance of their shape, each with
        ``pad_to`` equal to its members' shape; ``[]`` for no images.
    """
    by_shape: dict[tuple[int, int], list[int]] = {}
    for i, (h, w) in enumerate(shapes):
        by_shape.setdefault((int(h), int(w)), []).append(i)
    return [Group(tuple(idx), shape) for shape, idx in by_shape.items()]


def text_bucket(tokens: int, buckets: Sequence[int] = TEXT_LENGTH_BUCKETS) -> int:
    """Smallest bucket >= ``tokens`` (the largest bucket when ``tokens`` exceeds all)."""
    return next((b for b in buckets if b >= tokens), buckets[-1])


def plan_text_groups(lengths: Sequence[int], modality_aware: bool,
                     buckets: Sequence[int] = TEXT_LENGTH_BUCKETS) -> list[Group]:
    """Plan the text-encoder passes of a batch.

    Args:
        lengths: Encoder sequence length of each text in tokens (with special tokens, <= ``buckets[-1]``).
        modality_aware: One pass per length bucket (ascending) padded to the longest member if True; else
            one pass padded to the longest text.
    Returns:
        Groups covering every index exactly once; ``[]`` for no texts.
    """
    if not lengths:
        return []
    if not modality_aware:
        return [Group(tuple(range(len(lengths))), (max(lengths),))]
    by_bucket: dict[int, list[int]] = {}
    for i, n in enumerate(lengths):
        by_bucket.setdefault(text_bucket(n, buckets), []).append(i)
    return [Group(tuple(idx), (max(lengths[i] for i in idx),)) for _, idx in sorted(by_bucket.items())]


def split_evenly(total_s: float, weights: Sequence[int]) -> list[float]:
    """Attribute a pass's ``total_s`` seconds to its members in proportion to ``weights`` (e.g. images).

    Returns:
        Shares summing to ``total_s`` (all zero if the weights sum to zero).
    """
    weight_sum = sum(weights)
    if weight_sum <= 0:
        return [0.0 for _ in weights]
    return [total_s * w / weight_sum for w in weights]


def route(image_count: int | None, text_present: bool) -> str | None:
    """Modality class of a request from what it carries (pure; content is validated by the target model).

    Args:
        image_count: Elements of IMAGES, None when the input is absent.
        text_present: TEXT input present (blank text is judged by the target model).
    Returns:
        ``image``, ``text``, ``image_text``, or None when the request has neither input.
    """
    if image_count is None and not text_present:
        return None
    if image_count and text_present:
        return "image_text"
    if image_count is not None and (image_count or not text_present):
        return "image"
    return "text"


def fixed_side(bucket_hw: tuple[int, int], sides: Sequence[int]) -> int:
    """The smallest fixed square size in ``sides`` (ascending, pixels) holding an image of resolution bucket
    ``(h, w)``; the GPU layout pads every image to it (``repo_config.gpu_image_sides``) for TensorRT-style static
    shapes, by design.

    An image's features there depend on the side chosen (its zero padding reaches the convolutions at its borders),
    and the side is a function of the image's own bucket only: not of its neighbours in the request or the encoder's
    dynamic batch (``test_runtime_encoder.py::test_fixed_side_padding_depends_on_the_side_not_on_neighbours``).

    Raises:
        ValueError: The bucket is larger than every side (the sides must end with the longest allowed side).
    """
    need = max(bucket_hw)
    for side in sides:
        if side >= need:
            return side
    raise ValueError(f"image bucket {bucket_hw} exceeds every fixed side {list(sides)}")
