"""One model instance's request pipeline, independent of Triton: prepare each request, then run a batch.

``prepare`` validates, decodes and tokenizes one request (raising ``RequestError``); ``run`` encodes a list
of prepared requests together, grouped as ``batching`` plans, and returns one output per request with the
compute seconds attributed to it per stage.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import NDArray

from modalscale.runtime.model.batching import Group, plan_image_groups, plan_text_groups, split_evenly
from modalscale.runtime.model.encoders import IMAGE_FEATURE_DIM, TEXT_FEATURE_DIM, MultimodalEncoder
from modalscale.runtime.model.inputs import ParsedRequest, parse_request
from modalscale.runtime.model.settings import ModelSettings


@dataclass
class Prepared:
    """A validated request ready for the encoders."""

    parsed: ParsedRequest
    token_ids: list[int] | None
    """Encoder ids ([CLS] ... [SEP], truncated to 256) or None without text."""
    text_tokens: int
    """WordPiece tokens of the text without special tokens, before truncation (0 without text)."""
    stage_s: dict[str, float] = field(default_factory=dict)
    """Seconds per stage spent on this request so far."""


@dataclass(frozen=True)
class RequestOutput:
    """Outputs of one request."""

    embedding: NDArray[np.float32]
    """float32 (256,)."""
    modality: str
    image_classes: NDArray[np.int32]
    """int32 (n_images,)."""
    stage_s: dict[str, float]
    cache_hits: int
    cache_misses: int


class EmbeddingCache:
    """LRU cache of per-image ``(features, class, width, height)`` keyed by the SHA-256 of the encoded image bytes
    (width and height as received, for the feature metrics of a request whose image is not decoded again)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._items: OrderedDict[bytes, tuple[Any, ...]] = OrderedDict()

    def get(self, key: bytes) -> tuple[Any, ...] | None:
        """The cached entry (marked most recently used) or None."""
        value = self._items.get(key)
        if value is not None:
            self._items.move_to_end(key)
        return value

    def put(self, key: bytes, value: tuple[Any, ...]) -> None:
        """Insert, evicting the least recently used entry beyond ``capacity``."""
        self._items[key] = value
        self._items.move_to_end(key)
        while len(self._items) > self.capacity:
            self._items.popitem(last=False)

    def __len__(self) -> int:
        return len(self._items)


class MultimodalPipeline:
    """Prepare and run requests for one model instance.

    Args:
        settings: From the model config parameters.
        encoder: The torch model (loaded once per instance).
        clock: Monotonic seconds (injectable for tests).
    """

    def __init__(self, settings: ModelSettings, encoder: MultimodalEncoder,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.settings = settings
        self.encoder = encoder
        self.clock = clock
        self.cache = EmbeddingCache(settings.embedding_cache_entries) if settings.embedding_cache else None

    def _lookup(self, digest: bytes) -> tuple[Any, int, int] | None:
        """Embedding-cache lookup for ``parse_request``: ``(entry, width, height)`` or None."""
        entry = self.cache.get(digest) if self.cache is not None else None
        return None if entry is None else (entry, int(entry[2]), int(entry[3]))

    def prepare(self, images: NDArray[np.object_] | None, text: NDArray[np.object_] | None) -> Prepared:
        """Validate, decode and tokenize one request; an image the embedding cache holds is not decoded.

        Args:
            images: IMAGES tensor (object array of bytes) or None.
            text: TEXT tensor (object array, one bytes element) or None.
        Raises:
            RequestError: The request is invalid (see ``inputs.parse_request``).
        """
        start = self.clock()
        parsed = parse_request(images, text, self.settings, self._lookup if self.cache is not None else None)
        decoded = self.clock()
        token_ids, tokens = None, 0
        if parsed.text is not None:
            token_ids = self.encoder.token_ids(parsed.text)
            tokens = self.encoder.count_tokens(parsed.text)
        stage_s = {"decode": decoded - start}
        if parsed.text is not None:
            stage_s["tokenize"] = self.clock() - decoded
        return Prepared(parsed=parsed, token_ids=token_ids, text_tokens=tokens, stage_s=stage_s)

    def run(self, batch: Sequence[Prepared]) -> list[RequestOutput]:
        """Encode a batch of prepared requests.

        Returns:
            One output per request, in order.
        """
        n = len(batch)
        image_features = np.zeros((n, IMAGE_FEATURE_DIM), dtype=np.float32)
        image_present = np.zeros(n, dtype=bool)
        classes: list[NDArray[np.int32]] = []

        per_request, hits, misses = self.image_entries(batch)
        for r, slots in enumerate(per_request):
            if slots:
                feats = np.stack([s[0] for s in slots if s is not None])
                image_features[r] = feats.mean(axis=0)
                image_present[r] = True
            classes.append(np.array([s[1] for s in slots if s is not None], dtype=np.int32))

        text_features, text_present = encode_texts(
            self.encoder, [prep.token_ids for prep in batch], [prep.stage_s for prep in batch],
            self.settings.modality_aware_batching, self.clock)

        start = self.clock()
        embeddings = self.encoder.fuse(image_features, image_present, text_features, text_present)
        for prep, share in zip(batch, split_evenly(self.clock() - start, [1] * n), strict=True):
            _add(prep.stage_s, "fusion", share)
        return [RequestOutput(embedding=embeddings[r], modality=prep.parsed.modality.value,
                              image_classes=classes[r], stage_s=dict(prep.stage_s), cache_hits=hits[r],
                              cache_misses=misses[r])
                for r, prep in enumerate(batch)]

    def warm_up(self, encoders: Sequence[str] = ("image", "text")) -> float:
        """Serve one synthetic request through :meth:`prepare` and :meth:`run` and drop its output, so that a new
        replica's first real request does not pay the first-call costs (the image decoder's plugins, the tokenizer's
        tables, the encoders' first passes, allocator growth). The request holds a JPEG of a colour gradient (64 x
        48, halved until it is within ``max_image_pixels``) if ``encoders`` names ``image`` and a short ASCII text
        (cut to ``max_text_bytes``) if it names ``text`` (the encoders this instance loaded at start-up: a lazily
        loaded one stays unloaded); with neither, nothing runs. The embedding cache is left as it was; no metric
        counts it.

        Returns:
            The seconds it took (0.0 when nothing ran).
        Raises:
            RequestError, RuntimeError, ValueError: As :meth:`prepare` and :meth:`run`. The request is within every
            limit of ``settings``, so a failure is the encoders' own: the model fails to load rather than fail every
            real request.
        """
        width, height = 64, 48
        while width * height > self.settings.max_image_pixels:
            width, height = max(1, width // 2), max(1, height // 2)
        # Shaped as Triton hands them over: IMAGES [1, n], TEXT [1, 1].
        images = np.array([[warm_up_jpeg(width, height)]], dtype=np.object_) if "image" in encoders else None
        text = np.array([[WARM_UP_TEXT[:self.settings.max_text_bytes]]], dtype=np.object_) \
            if "text" in encoders else None
        if images is None and text is None:
            return 0.0
        start = self.clock()
        cache, self.cache = self.cache, None
        try:
            self.run([self.prepare(images, text)])
        finally:
            self.cache = cache
        return self.clock() - start

    def image_entries(self, batch: Sequence[Prepared]
                      ) -> tuple[list[list[tuple[Any, ...] | None]], list[int], list[int]]:
        """The image half of :meth:`run`: each image's embedding-cache entry ``(features (1280,) float32, class,
        width, height)``, from the cache or encoded in planned groups (one pass per resolution bucket,
        ``batching.plan_image_groups``; a pass's seconds go to its images' requests as ``image_encoder``).

        Returns:
            ``(entries per request per image, cache hits per request, cache misses per request)``; every entry is
            set (the ``None`` in the type is the slot before encoding).
        """
        n = len(batch)
        hits = [0] * n
        misses = [0] * n
        owners: list[tuple[int, int]] = []  # (request, image) of each image to encode
        per_request: list[list[tuple[Any, ...] | None]] = []
        for r, prep in enumerate(batch):
            slots: list[tuple[Any, ...] | None] = []
            for k, image in enumerate(prep.parsed.images):
                cached = image.cached  # looked up in prepare (the image was not decoded)
                if cached is None and self.cache is not None:
                    cached = self.cache.get(image.digest)
                if cached is None:
                    owners.append((r, k))
                    if self.cache is not None:
                        misses[r] += 1
                else:
                    hits[r] += 1
                slots.append(cached)
            per_request.append(slots)
        shapes = [batch[r].parsed.images[k].bucket for r, k in owners]
        for group in plan_image_groups(shapes):
            self._encode_image_group(batch, owners, group, per_request)
        return per_request, hits, misses

    def _encode_image_group(self, batch: Sequence[Prepared], owners: list[tuple[int, int]], group: Group,
                            per_request: list[list[tuple[Any, ...] | None]]) -> None:
        pad_h, pad_w = group.pad_to
        arrays = np.zeros((len(group.indices), 3, pad_h, pad_w), dtype=np.float32)
        valid: list[tuple[int, int]] = []
        for j, i in enumerate(group.indices):
            r, k = owners[i]
            image = batch[r].parsed.images[k]
            h, w = image.bucket
            arrays[j, :, :h, :w] = image.array
            valid.append((h, w))
        start = self.clock()
        result = self.encoder.encode_images(arrays, valid)
        elapsed = self.clock() - start
        for j, i in enumerate(group.indices):
            r, k = owners[i]
            image = batch[r].parsed.images[k]
            # a copy: a view would keep the whole pass's features alive as long as this entry
            entry = (result.features[j].copy(), int(result.classes[j]), image.width, image.height)
            per_request[r][k] = entry
            if self.cache is not None:
                self.cache.put(batch[r].parsed.images[k].digest, entry)
        for (r, _), share in zip((owners[i] for i in group.indices),
                                 split_evenly(elapsed, [1] * len(group.indices)), strict=True):
            _add(batch[r].stage_s, "image_encoder", share)


WARM_UP_TEXT = b"warm up the encoders before the first request"
"""The warm-up request's text (ASCII: any cut is valid UTF-8)."""


def warm_up_jpeg(width: int = 64, height: int = 48) -> bytes:
    """A ``width`` x ``height`` JPEG of a colour gradient (quality 90), made here: the warm-up's image."""
    import io

    from PIL import Image

    x = np.linspace(0, 255, width, dtype=np.float32)[None, :, None]
    y = np.linspace(0, 255, height, dtype=np.float32)[:, None, None]
    rgb = np.concatenate([np.broadcast_to(x, (height, width, 1)), np.broadcast_to(y, (height, width, 1)),
                          np.full((height, width, 1), 128.0, dtype=np.float32)], axis=2).astype(np.uint8)
    buf = io.BytesIO()
    Image.fromarray(rgb).save(buf, format="JPEG", quality=90)
    return buf.getvalue()


def encode_texts(encoder: MultimodalEncoder, token_ids: Sequence[list[int] | None],
                 stage_s: Sequence[dict[str, float]], modality_aware: bool, clock: Callable[[], float]
                 ) -> tuple[NDArray[np.float32], NDArray[np.bool_]]:
    """Encode the texts of a batch (rows with ``token_ids`` None have none), one pass per group of
    ``batching.plan_text_groups``; each pass's seconds are split evenly over its rows as ``text_encoder`` in
    ``stage_s``.

    Returns:
        ``(features float32 (n, 384), present bool (n,))``; rows without text are zeros.
    """
    n = len(token_ids)
    text_features = np.zeros((n, TEXT_FEATURE_DIM), dtype=np.float32)
    text_present = np.zeros(n, dtype=bool)
    text_rows = [r for r, ids in enumerate(token_ids) if ids is not None]
    lengths = [len(token_ids[r] or []) for r in text_rows]
    for group in plan_text_groups(lengths, modality_aware):
        rows = [text_rows[i] for i in group.indices]
        start = clock()
        feats = encoder.encode_texts([token_ids[r] or [] for r in rows], group.pad_to[0])
        shares = split_evenly(clock() - start, [1] * len(rows))
        for r, feat, share in zip(rows, feats, shares, strict=True):
            text_features[r] = feat
            text_present[r] = True
            _add(stage_s[r], "text_encoder", share)
    return text_features, text_present


def _add(stage_s: dict[str, float], stage: str, seconds: float) -> None:
    stage_s[stage] = stage_s.get(stage, 0.0) + seconds
