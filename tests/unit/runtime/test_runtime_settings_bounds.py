"""The model's integer parameters are bounded where they are read (``ModelSettings.from_model_config``).

``RuntimeConfig`` keeps every limit >= 1, but the Python model read any integer from its ``config.pbtxt`` (a hand-edited
repository, a benchmark's parameters): ``embedding_cache_entries: -1`` loaded (the warm-up runs without the cache) and
then every batch with an image the cache did not hold raised ``KeyError: 'dictionary is empty'`` out of
``EmbeddingCache.put``, outside the per-request error mapping, so Triton failed every request of the batch;
``max_image_pixels: 0`` made the warm-up halve its 1 x 1 JPEG forever (the model never became ready, no error);
``max_image_side_pixels: 0`` failed every image with ``InternalError`` (a 0 x 0 resize).
"""

from __future__ import annotations

import pytest

from modalscale.runtime.model.settings import ModelSettings

from .test_runtime_pipeline import CountingEncoder, png, prep, tick_clock

BOUNDED = ("intra_op_threads", "embedding_cache_entries", "max_images_per_request", "max_image_side_pixels",
           "max_image_pixels", "max_text_bytes")


@pytest.mark.parametrize("value", ["0", "-1"])
@pytest.mark.parametrize("name", BOUNDED)
def test_integer_parameters_below_one_are_refused_naming_the_parameter(name: str, value: str) -> None:
    with pytest.raises(ValueError, match=f"parameter {name}: expected an integer >= 1"):
        ModelSettings.from_model_config({"parameters": {name: {"string_value": value}}})


def test_a_negative_cache_size_would_fail_whole_batches() -> None:
    """Why the bound matters: with the settings the model used to accept, ``run`` raises ``KeyError`` (not the
    ``RuntimeError`` / ``ValueError`` the adapter maps to one ``InternalError`` per request)."""
    from modalscale.runtime.model.pipeline import MultimodalPipeline

    pipeline = MultimodalPipeline(ModelSettings(embedding_cache_entries=-1), CountingEncoder(),  # type: ignore[arg-type]
                                  clock=tick_clock())
    with pytest.raises(KeyError):
        pipeline.run([prep(pipeline, [png(8, 8, 1)], None)])
    assert ModelSettings.from_model_config(
        {"parameters": {n: {"string_value": "1"} for n in BOUNDED}}).embedding_cache_entries == 1
