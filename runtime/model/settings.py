"""Model settings read from the ``parameters`` of the generated ``config.pbtxt`` (pure, no torch)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from modalscale.runtime.repo_config import MAX_IMAGE_PIXELS_BOUND, Engine, Precision


@dataclass(frozen=True)
class ModelSettings:
    """What the Python model needs to know about its configuration."""

    intra_op_threads: int = 1
    """torch intra-op threads of this instance."""
    precision: Precision = Precision.FP32
    """Encoder precision."""
    engine: Engine = Engine.TORCH
    """What runs the encoders (``repo_config.Engine``)."""
    modality_aware_batching: bool = True
    """Group a batch's texts into token-length buckets instead of padding to the longest (images are grouped by
    resolution bucket either way: ``batching.plan_image_groups``)."""
    embedding_cache: bool = True
    """Cache per-image features by SHA-256 of the encoded bytes."""
    embedding_cache_entries: int = 1024
    """Cache capacity in images."""
    max_images_per_request: int = 16
    """More images in one request are rejected."""
    max_image_side_pixels: int = 384
    """Longer side, in pixels, that images are scaled down to before encoding."""
    max_image_pixels: int = 40_000_000
    """Images declaring more pixels than this are rejected before decoding."""
    max_text_bytes: int = 16_384
    """Longer UTF-8 texts are rejected."""
    preload: tuple[str, ...] = ("image", "text")
    """Encoders loaded at start-up (the rest on first use)."""
    image_bf16: bool = False
    """Opt-in BF16 image convolutions with INT8 (``encoders.MultimodalEncoder.image_bf16``); like ``int8_text`` a
    model parameter for side-by-side runs, not generated from a RuntimeConfig."""
    image_int8_min_side_pixels: int = 0
    """Engine openvino at INT8: images whose resolution bucket's shorter side is at least this many pixels are encoded
    by the INT8 image encoder, the others by the FP32 one; 0 = every image FP32 (``RuntimeConfig`` field of the same
    name)."""
    int8_text: str = "smoothquant"
    """INT8 scheme of the text encoder (``encoders.INT8_TEXT_SCHEMES``); not generated from a RuntimeConfig, a
    benchmark sets ``dynamic`` to compare with the earlier scheme side by side."""

    warm_up: bool = True
    """Serve one synthetic request through the loaded encoders before the model reports ready
    (``pipeline.MultimodalPipeline.warm_up``); like ``metrics_batching`` a model parameter for side-by-side runs
    (``benchmarks/first_request.py`` sets ``false``), not generated from a RuntimeConfig."""

    image_bucket_sides: tuple[int, ...] = ()
    """Fixed square image sizes of the GPU layout's orchestrator (``repo_config.gpu_image_sides``); empty elsewhere."""
    metrics_batching: str = "execute"
    """``execute``: the feature metrics of one ``execute`` call are sent together (counters summed per series);
    ``request``: each request's on its own, as before (``metrics.METRICS_BATCHING``); not generated from a
    RuntimeConfig, a benchmark sets ``request`` to measure the two side by side."""
    image_encoder_url: str = ""
    """A front's model only (``repo_config.build_front_repository``): ``host:port`` of the image encoder pool's KServe
    v2 gRPC endpoint; empty elsewhere."""
    image_encoder_model: str = "image_encoder"
    """The model the front calls there (``repo_config.IMAGE_ENCODER_MODEL``)."""

    @classmethod
    def from_model_config(cls, model_config: Mapping[str, Any]) -> ModelSettings:
        """Read the parsed model config (Triton's ``args["model_config"]`` JSON) ``parameters`` block.

        Args:
            model_config: ``{"parameters": {key: {"string_value": "..."}}, ...}``; missing keys keep defaults.
        Raises:
            ValueError: A parameter cannot be parsed; the message names it.
        """
        raw = {k: v.get("string_value", "") for k, v in (model_config.get("parameters") or {}).items()}
        values: dict[str, Any] = {}
        for name, kind in (("intra_op_threads", int), ("embedding_cache_entries", int),
                           ("max_images_per_request", int), ("max_image_side_pixels", int),
                           ("max_image_pixels", int), ("max_text_bytes", int)):
            if name in raw:
                try:
                    values[name] = kind(raw[name])
                except ValueError:
                    raise ValueError(f"parameter {name}: expected an integer, got {raw[name]!r}") from None
                if values[name] < 1:  # RuntimeConfig's bound: 0 or less breaks at run time, not at load
                    raise ValueError(f"parameter {name}: expected an integer >= 1, got {raw[name]!r}")
        if values.get("max_image_pixels", 0) > MAX_IMAGE_PIXELS_BOUND:  # the image decoder's own limit
            raise ValueError(f"parameter max_image_pixels: expected at most {MAX_IMAGE_PIXELS_BOUND} (Pillow's "
                             f"decompression-bomb limit), got {raw['max_image_pixels']!r}")
        if "image_int8_min_side_pixels" in raw:
            text = raw["image_int8_min_side_pixels"]
            if not (text.isascii() and text.isdigit()):
                raise ValueError(f"parameter image_int8_min_side_pixels: expected an integer >= 0 (0 = off), got "
                                 f"{text!r}")
            values["image_int8_min_side_pixels"] = int(text)
        for name in ("modality_aware_batching", "embedding_cache", "image_bf16", "warm_up"):
            if name in raw:
                if raw[name] not in ("true", "false"):
                    raise ValueError(f"parameter {name}: expected true or false, got {raw[name]!r}")
                values[name] = raw[name] == "true"
        if "preload" in raw:
            values["preload"] = tuple(p for p in raw["preload"].split(",") if p)
            unknown = set(values["preload"]) - {"image", "text"}
            if unknown:
                raise ValueError(f"parameter preload: unknown encoders {sorted(unknown)}")
        if "int8_text" in raw:
            if raw["int8_text"] not in ("smoothquant", "dynamic"):
                raise ValueError(f"parameter int8_text: expected smoothquant or dynamic, got {raw['int8_text']!r}")
            values["int8_text"] = raw["int8_text"]
        if raw.get("image_bucket_sides"):
            try:
                sides = tuple(int(p) for p in raw["image_bucket_sides"].split(","))
            except ValueError:
                raise ValueError(f"parameter image_bucket_sides: expected comma-separated integers, "
                                 f"got {raw['image_bucket_sides']!r}") from None
            if list(sides) != sorted(set(sides)) or sides[0] < 1:
                raise ValueError(f"parameter image_bucket_sides: must be ascending and >= 1, got {list(sides)}")
            values["image_bucket_sides"] = sides
        if "metrics_batching" in raw:
            if raw["metrics_batching"] not in ("execute", "request"):
                raise ValueError(f"parameter metrics_batching: expected execute or request, "
                                 f"got {raw['metrics_batching']!r}")
            values["metrics_batching"] = raw["metrics_batching"]
        for name in ("image_encoder_url", "image_encoder_model"):
            if name in raw:
                values[name] = raw[name]
        if "engine" in raw:
            try:
                values["engine"] = Engine(raw["engine"])
            except ValueError:
                raise ValueError(f"parameter engine: expected one of {[e.value for e in Engine]}, "
                                 f"got {raw['engine']!r}") from None
        if "precision" in raw:
            try:
                values["precision"] = Precision(raw["precision"])
            except ValueError:
                raise ValueError(f"parameter precision: expected one of FP32, FP16, BF16, INT8, "
                                 f"got {raw['precision']!r}") from None
        return cls(**values)
