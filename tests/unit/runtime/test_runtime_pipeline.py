"""Batch bookkeeping of the pipeline (cache accounting, stage-time attribution, grouping) with a small
deterministic stand-in encoder; the real encoders are exercised in tests/integration/runtime."""

from __future__ import annotations

import io
import itertools

import numpy as np
import pytest
from PIL import Image

from modalscale.runtime.model.pipeline import EmbeddingCache, MultimodalPipeline
from modalscale.runtime.model.settings import ModelSettings


class CountingEncoder:
    """Image feature = mean pixel value (so padding is visible); text feature = token count."""

    def __init__(self) -> None:
        self.image_passes: list[tuple[int, ...]] = []
        self.text_passes: list[tuple[int, int]] = []

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def token_ids(self, text: str) -> list[int]:
        return [101] + [1000 + i for i, _ in enumerate(text.split())] + [102]

    def encode_images(self, batch: np.ndarray, valid_hw):
        from modalscale.runtime.model.encoders import ImageResult

        self.image_passes.append(batch.shape)
        feats = np.zeros((batch.shape[0], 1280), dtype=np.float32)
        feats[:, 0] = batch.mean(axis=(1, 2, 3))
        return ImageResult(features=feats, classes=np.arange(batch.shape[0], dtype=np.int32))

    def encode_texts(self, ids, pad_to: int) -> np.ndarray:
        self.text_passes.append((len(ids), pad_to))
        out = np.zeros((len(ids), 384), dtype=np.float32)
        out[:, 0] = [len(row) for row in ids]
        return out

    def fuse(self, image, image_present, text, text_present) -> np.ndarray:
        out = np.zeros((image.shape[0], 256), dtype=np.float32)
        out[:, 0] = image[:, 0] * image_present
        out[:, 1] = text[:, 0] * text_present
        return out


def png(width: int, height: int, value: int) -> bytes:
    buf = io.BytesIO()
    Image.new("RGB", (width, height), (value, value, value)).save(buf, format="PNG")
    return buf.getvalue()


def tick_clock(step_s: float = 0.5):
    counter = itertools.count()
    return lambda: next(counter) * step_s


def prep(pipeline: MultimodalPipeline, images: list[bytes] | None, text: str | None):
    return pipeline.prepare(None if images is None else np.array([images], dtype=object),
                            None if text is None else np.array([[text.encode()]], dtype=object))


def test_aware_batch_runs_one_pass_per_bucket_and_cache_counts_hits() -> None:
    encoder = CountingEncoder()
    pipeline = MultimodalPipeline(ModelSettings(), encoder, clock=tick_clock())  # type: ignore[arg-type]
    small, large = png(40, 40, 200), png(300, 200, 10)
    batch = [prep(pipeline, [small], None), prep(pipeline, [large, small], "two words"), prep(pipeline, None, "x")]
    outputs = pipeline.run(batch)
    assert sorted(encoder.image_passes) == sorted([(2, 3, 64, 64), (1, 3, 224, 320)])  # small twice, large once
    assert encoder.text_passes == [(2, 4)]  # both texts in the 16-token bucket, padded to the longer (4 ids)
    assert [o.modality for o in outputs] == ["image", "image_text", "text"]
    assert [(o.cache_hits, o.cache_misses) for o in outputs] == [(0, 1), (0, 2), (0, 0)]
    assert outputs[1].image_classes.shape == (2,) and outputs[2].image_classes.shape == (0,)
    again = pipeline.run([prep(pipeline, [small, large], None)])
    assert (again[0].cache_hits, again[0].cache_misses) == (2, 0)
    assert len(encoder.image_passes) == 2  # nothing re-encoded


def test_naive_batch_groups_images_by_bucket_and_leaves_the_small_image_alone() -> None:
    """Without modality-aware batching texts still share one padded pass, but images never do: the stand-in's
    feature (mean pixel, padding included) of a small image equals its value alone (padded to 224x320 it moved)."""
    encoder = CountingEncoder()
    settings = ModelSettings(modality_aware_batching=False, embedding_cache=False)
    pipeline = MultimodalPipeline(settings, encoder, clock=tick_clock())  # type: ignore[arg-type]
    alone = pipeline.run([prep(pipeline, [png(40, 40, 200)], "a")])[0].embedding
    mixed = pipeline.run([prep(pipeline, [png(40, 40, 200)], "a"), prep(pipeline, [png(300, 200, 10)], "b c d")])
    assert encoder.image_passes[-2:] == [(1, 3, 64, 64), (1, 3, 224, 320)]
    assert encoder.text_passes[-1] == (2, 5)  # both texts in one pass padded to the longer (5 ids)
    np.testing.assert_array_equal(mixed[0].embedding, alone)


def test_stage_seconds_split_evenly_over_the_items_of_a_pass() -> None:
    encoder = CountingEncoder()
    pipeline = MultimodalPipeline(ModelSettings(embedding_cache=False), encoder,  # type: ignore[arg-type]
                                  clock=tick_clock(1.0))
    batch = [prep(pipeline, [png(8, 8, 1)], None), prep(pipeline, [png(8, 8, 2)], None)]
    outputs = pipeline.run(batch)
    # one image pass of 2 items took 1 clock tick (1 s): 0.5 s each; fusion likewise
    assert [o.stage_s["image_encoder"] for o in outputs] == [0.5, 0.5]
    assert [o.stage_s["fusion"] for o in outputs] == [0.5, 0.5]
    assert all(o.stage_s["decode"] == 1.0 for o in outputs)


def test_embedding_cache_is_lru() -> None:
    cache = EmbeddingCache(capacity=2)
    entry = (np.zeros(1, dtype=np.float32), 0)
    cache.put(b"a", entry)
    cache.put(b"b", entry)
    assert cache.get(b"a") is entry  # a is now most recent
    cache.put(b"c", entry)
    assert cache.get(b"b") is None and cache.get(b"a") is entry and len(cache) == 2


def test_an_image_in_the_embedding_cache_is_not_decoded_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from modalscale.runtime.model import inputs

    decoded: list[int] = []
    real = inputs.decode_image

    def counting(data: bytes, index: int, settings: ModelSettings, *args, **kwargs):
        decoded.append(len(data))
        return real(data, index, settings, *args, **kwargs)

    monkeypatch.setattr(inputs, "decode_image", counting)
    encoder = CountingEncoder()
    pipeline = MultimodalPipeline(ModelSettings(), encoder, clock=tick_clock())  # type: ignore[arg-type]
    large, other = png(300, 200, 10), png(40, 40, 7)
    first = pipeline.run([prep(pipeline, [large], "a b")])[0]
    assert len(decoded) == 1
    again = prep(pipeline, [large, other], None)
    assert len(decoded) == 2  # only the image the cache does not hold was decoded
    hit = again.parsed.images[0]
    assert (hit.pixels, hit.width, hit.height) == (300 * 200, 300, 200)  # the feature metrics still see its size
    out = pipeline.run([again])[0]
    assert (out.cache_hits, out.cache_misses) == (1, 1)
    assert len(encoder.image_passes) == 2  # the cached image was not encoded again either
    no_cache = MultimodalPipeline(ModelSettings(embedding_cache=False), CountingEncoder(),  # type: ignore[arg-type]
                                  clock=tick_clock())
    no_cache.run([prep(no_cache, [large], None)])
    prep(no_cache, [large], None)
    assert len(decoded) == 4  # without the cache every request decodes
    assert first.image_classes.shape == (1,)


@pytest.mark.parametrize(("encoders", "image_passes", "text_passes"),
                         [(("image", "text"), 1, 1), (("image",), 1, 0), (("text",), 0, 1), ((), 0, 0)])
def test_warm_up_runs_the_loaded_encoders_once_and_leaves_the_cache_as_it_was(
        encoders: tuple[str, ...], image_passes: int, text_passes: int) -> None:
    encoder = CountingEncoder()
    pipeline = MultimodalPipeline(ModelSettings(), encoder, clock=tick_clock())  # type: ignore[arg-type]
    # One real request first: its image is in the cache, and the warm-up must neither evict nor add an entry.
    pipeline.run([pipeline.prepare(np.array([png(40, 30, 200)], dtype=object), None)])
    assert pipeline.cache is not None
    before = dict(pipeline.cache._items)
    encoder.image_passes.clear()

    seconds = pipeline.warm_up(encoders)

    assert len(encoder.image_passes) == image_passes
    assert len(encoder.text_passes) == text_passes
    assert seconds > 0 if encoders else seconds == 0.0
    assert pipeline.cache is not None and dict(pipeline.cache._items) == before
    out = pipeline.run([pipeline.prepare(np.array([png(40, 30, 200)], dtype=object), None)])
    assert (out[0].cache_hits, out[0].cache_misses) == (1, 0)


def test_warm_up_image_is_a_valid_jpeg_within_every_default_limit() -> None:
    from modalscale.runtime.model.pipeline import warm_up_jpeg

    data = warm_up_jpeg()
    with Image.open(io.BytesIO(data)) as image:
        assert (image.format, image.size) == ("JPEG", (64, 48))
    settings = ModelSettings()
    assert 64 <= settings.max_image_side_pixels and 64 * 48 <= settings.max_image_pixels


@pytest.mark.parametrize(("max_image_pixels", "max_text_bytes"), [(1, 1), (2000, 32), (3072, 45)])
def test_warm_up_fits_the_request_limits_a_model_is_configured_with(max_image_pixels: int,
                                                                    max_text_bytes: int) -> None:
    # A model whose limits are below the 64 x 48 JPEG or the text still loads: the warm-up's request is cut to fit.
    encoder = CountingEncoder()
    settings = ModelSettings(max_image_pixels=max_image_pixels, max_text_bytes=max_text_bytes)
    pipeline = MultimodalPipeline(settings, encoder, clock=tick_clock())  # type: ignore[arg-type]
    assert pipeline.warm_up() > 0
    assert len(encoder.image_passes) == 1 and len(encoder.text_passes) == 1
