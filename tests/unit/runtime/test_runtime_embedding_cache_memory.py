"""The embedding cache's memory is bounded by its capacity in images, not by the passes its entries came from.

An entry's features were ``result.features[j]``, a view of the whole pass's ``(n, 1280)`` array, so an entry kept its
pass's features of every image alive: a cache that had evicted all but one image of each pass (the images still hit,
the others evicted) held ``capacity x pass size x 5 KiB`` (a batch of 8 requests x 16 same-bucket images is a pass
of 128: 640 MiB for the default 1024 entries, against 5 MiB).
"""

from __future__ import annotations

import numpy as np

from modalscale.runtime.model.encoders import IMAGE_FEATURE_DIM
from modalscale.runtime.model.pipeline import MultimodalPipeline
from modalscale.runtime.model.settings import ModelSettings

from .test_runtime_pipeline import CountingEncoder, png, prep, tick_clock


def _owner(array: np.ndarray) -> np.ndarray:
    while isinstance(array.base, np.ndarray):
        array = array.base
    return array


def test_cached_features_do_not_keep_their_pass_alive() -> None:
    pipeline = MultimodalPipeline(ModelSettings(embedding_cache_entries=2), CountingEncoder(),  # type: ignore[arg-type]
                                  clock=tick_clock())
    images = [png(8, 8, value) for value in range(32)]  # one bucket: one pass of 32 images
    outputs = pipeline.run([prep(pipeline, images[:16], None), prep(pipeline, images[16:], None)])
    assert [o.cache_misses for o in outputs] == [16, 16]
    assert pipeline.cache is not None and len(pipeline.cache) == 2
    owners = {id(_owner(entry[0])): _owner(entry[0]) for entry in pipeline.cache._items.values()}
    retained = sum(owner.nbytes for owner in owners.values())
    assert retained == 2 * IMAGE_FEATURE_DIM * 4, f"2 cached images hold {retained} bytes of features"
    # the cached features are still the image's own (the stand-in encoder's feature: its mean normalised pixel)
    hit = pipeline.run([prep(pipeline, [images[31]], None)])[0]
    assert (hit.cache_hits, hit.cache_misses) == (1, 0)
    assert hit.embedding[0] == np.float32((31 - 127.0) / 128.0)
