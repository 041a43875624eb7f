"""The torch model outside Triton, with the real pretrained weights: INT8 keeps LayerNorm in float and stays
close to FP32; modality-aware grouping and naive padding give the same answers for the same items."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from modalscale.runtime.model.encoders import MultimodalEncoder
from modalscale.runtime.model.pipeline import MultimodalPipeline
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.repo_config import Precision
from modalscale.runtime.workload import photo_at, photo_bytes

PHOTOS = ["chelsea", "coffee", "astronaut", "rocket"]
TEXTS = ["a photo of a cat", "a cup of coffee on the table", "the man in a white suit", "a dog on the grass"]


@pytest.fixture(scope="module")
def fp32() -> MultimodalEncoder:
    torch.set_num_threads(1)
    return MultimodalEncoder(Precision.FP32)


@pytest.fixture(scope="module")
def int8() -> MultimodalEncoder:
    return MultimodalEncoder(Precision.INT8)


def _embed(encoder: MultimodalEncoder, aware: bool, requests: list[tuple[list[bytes], str | None]]) -> list:
    pipeline = MultimodalPipeline(ModelSettings(modality_aware_batching=aware, embedding_cache=False), encoder)
    prepared = [pipeline.prepare(np.array([images], dtype=object) if images else None,
                                 np.array([[text.encode()]], dtype=object) if text else None)
                for images, text in requests]
    return pipeline.run(prepared)


def test_int8_quantizes_linear_layers_and_keeps_layernorm_float(int8: MultimodalEncoder) -> None:
    modules = list(int8.text_model.modules())
    quantized = [m for m in modules if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert len(quantized) == 6 * 6 + 1  # 6 BERT layers x (q, k, v, attn out, intermediate, output) + pooler
    norms = [m for m in modules if isinstance(m, nn.LayerNorm)]
    assert norms and all(m.weight.dtype == torch.float32 for m in norms)
    assert isinstance(int8.image_model._fc, torch.ao.nn.quantized.dynamic.Linear)


def test_int8_embeddings_stay_close_to_fp32(fp32: MultimodalEncoder, int8: MultimodalEncoder) -> None:
    requests = [([photo_bytes(p)], t) for p, t in zip(PHOTOS, TEXTS, strict=True)] + [([], t) for t in TEXTS]
    reference = _embed(fp32, True, requests)
    quantized = _embed(int8, True, requests)
    cosines = [float(np.dot(a.embedding, b.embedding)) for a, b in zip(reference, quantized, strict=True)]
    print("INT8 vs FP32 cosines:", [round(c, 4) for c in cosines])
    assert min(cosines) > 0.93, cosines  # measured 0.947..0.986 on these 8 requests
    assert [r.image_classes.tolist() for r in reference] == [r.image_classes.tolist() for r in quantized]


def test_aware_grouping_matches_single_requests_and_naive_padding_stays_close(fp32: MultimodalEncoder) -> None:
    requests = [([photo_at("coffee", 320, 240)], "a cup of coffee"), ([photo_at("chelsea", 96, 64)], None),
                ([], "a photo of a cat on a red chair next to a cup of coffee"),
                ([photo_at("coffee", 320, 240), photo_at("astronaut", 64, 64)], "the man")]
    alone = [_embed(fp32, True, [r])[0] for r in requests]
    aware = _embed(fp32, True, requests)
    naive = _embed(fp32, False, requests)
    for a, b in zip(alone, aware, strict=True):
        np.testing.assert_allclose(a.embedding, b.embedding, atol=2e-5)
    cosines = [float(np.dot(a.embedding, b.embedding)) for a, b in zip(alone, naive, strict=True)]
    print("naive padding vs alone cosines:", [round(c, 4) for c in cosines])
    # zero padding leaks into the convolutions at the borders of small images; text padding is masked exactly
    assert cosines[2] > 0.9999
    assert min(cosines) > 0.8
