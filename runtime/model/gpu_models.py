"""Triton Python-backend models of the GPU layout (``repo_config.build_gpu_repository``), imported by its generated
``model.py`` files; like ``triton_model`` only usable inside the backend's stub.

* :class:`OrchestratorModel` (client-facing, CPU instances): validates, decodes and tokenizes each request (the
  CPU pipeline's ``prepare``, with the embedding cache), pads each image to a fixed square size, sends the images
  and the text to the encoder models by BLS, fuses the features (FP32, CPU) and answers; it exports the feature
  metrics and the in-flight gauge.
* :class:`ImageEncoderModel` and :class:`TextEncoderModel` (``KIND_GPU``, dynamic batching): every request that
  needs the encoder, whatever its modality class, waits in the same queue, and one execution runs one pass per
  fixed image size / text length bucket over all of its requests (encoder-level batching).
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]
from numpy.typing import NDArray

from modalscale.runtime.model import metrics as names
from modalscale.runtime.model.encoders import MultimodalEncoder
from modalscale.runtime.model.gpu_layout import encode_image_items, encode_text_rows, fuse_request, pad_images
from modalscale.runtime.model.pipeline import EmbeddingCache, MultimodalPipeline, Prepared
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.model.triton_model import (
    FeatureMetrics,
    ForwardedFailure,
    _classes_output,
    prepare_failure,
    server_error,
    server_failure,
)
from modalscale.runtime.repo_config import (
    CLASSES,
    FEATURES,
    INPUT_IMAGES,
    INPUT_TEXT,
    OUTPUT_EMBEDDING,
    OUTPUT_IMAGE_CLASSES,
    OUTPUT_MODALITY,
    PIXELS,
    TOKEN_IDS,
    VALID_HW,
)

LOG = logging.getLogger("modalscale.runtime.model.gpu")


def _device(args: dict[str, str]) -> str:
    if args.get("model_instance_kind") == "GPU":
        return f"cuda:{args.get('model_instance_device_id', '0')}"
    return "cpu"


def _inflight_gauge(model_name: str) -> tuple[Any, Any]:
    family = pb_utils.MetricFamily(name=names.INFLIGHT_REQUESTS, description=names.HELP[names.INFLIGHT_REQUESTS],
                                   kind=pb_utils.MetricFamily.GAUGE)
    return family, family.Metric(labels={"model": model_name})


class _EncoderModel:
    """Shared set-up of the two encoder models."""

    def initialize(self, args: dict[str, str]) -> None:
        """Read the settings, set torch threads, load this model's encoder on its device."""
        config = json.loads(args["model_config"])
        self.settings = ModelSettings.from_model_config(config)
        torch.set_num_threads(self.settings.intra_op_threads)
        self.encoder = MultimodalEncoder(self.settings.precision, _device(args), self.settings.preload)
        self.inflight_family, self.inflight = _inflight_gauge(str(args.get("model_name", config.get("name", ""))))

    def execute(self, requests: list[Any]) -> list[Any]:
        """Encode every request of the batch; a failed pass answers each of its requests with the one mapping
        (``triton_model.server_error``: ``OutOfMemory`` 503, else ``InternalError`` 500), which the orchestrator
        reads back from the message and counts (these models export no error counter)."""
        self.inflight.increment(len(requests))
        try:
            return self._encode(requests)
        except Exception as exc:  # raised out of execute, it failed the whole batch with Triton's unlabelled error
            LOG.exception("Encoder failed on a batch of %d requests", len(requests))
            return [pb_utils.InferenceResponse(error=server_error(exc)[1]) for _ in requests]
        finally:
            self.inflight.increment(-len(requests))

    def _encode(self, requests: list[Any]) -> list[Any]:
        raise NotImplementedError

    def finalize(self) -> None:
        """Drop the model."""
        self.encoder = None  # type: ignore[assignment]


class ImageEncoderModel(_EncoderModel):
    """``PIXELS`` FP16 ``[k, 3, S, S]`` (S one of the fixed sizes, zero-padded beyond ``VALID_HW`` ``[k, 2]``) ->
    ``FEATURES`` FP32 ``[k, 1280]`` and ``CLASSES`` INT32 ``[k, 1]``; one encoder pass per size over the batch."""

    def _encode(self, requests: list[Any]) -> list[Any]:
        feats, classes = encode_image_items(
            self.encoder, [pb_utils.get_input_tensor_by_name(r, PIXELS).as_numpy() for r in requests],
            [pb_utils.get_input_tensor_by_name(r, VALID_HW).as_numpy() for r in requests])
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(FEATURES, f), pb_utils.Tensor(CLASSES, c)])
                for f, c in zip(feats, classes, strict=True)]


class TextEncoderModel(_EncoderModel):
    """``TOKEN_IDS`` INT64 ``[1, L]`` ([CLS] ... [SEP]) -> ``FEATURES`` FP32 ``[1, 384]``; one pass per length
    bucket (``batching.TEXT_LENGTH_BUCKETS``) over the batch."""

    def _encode(self, requests: list[Any]) -> list[Any]:
        ids = [[int(t) for t in pb_utils.get_input_tensor_by_name(r, TOKEN_IDS).as_numpy().reshape(-1)]
               for r in requests]
        out = encode_text_rows(self.encoder, ids)
        return [pb_utils.InferenceResponse(output_tensors=[pb_utils.Tensor(FEATURES, out[i:i + 1])])
                for i in range(len(ids))]


class OrchestratorModel:
    """Client-facing model of the GPU layout (see the module docstring)."""

    def initialize(self, args: dict[str, str]) -> None:
        """Settings and routes from the model config; the tokenizer and the FP32 fusion head on CPU."""
        config = json.loads(args["model_config"])
        params = config.get("parameters", {})
        self.settings = ModelSettings.from_model_config(config)
        if not self.settings.image_bucket_sides:
            raise ValueError("parameter image_bucket_sides: required by the GPU layout's orchestrator")
        self.routes = {e: params[f"route_{e}"]["string_value"] for e in ("image_encoder", "text_encoder")}
        torch.set_num_threads(self.settings.intra_op_threads)
        self.pipeline = MultimodalPipeline(self.settings, MultimodalEncoder(preload=()))
        self.cache: EmbeddingCache | None = self.pipeline.cache
        self.metrics = FeatureMetrics(str(args.get("model_name", config.get("name", ""))))

    def execute(self, requests: list[Any]) -> list[Any]:
        """Answer each request (max_batch_size 0: Triton sends them one at a time per instance)."""
        self.metrics.inflight.increment(len(requests))
        batch = names.MetricBatch()
        try:
            return [self._one(request, batch, i, len(requests)) for i, request in enumerate(requests)]
        finally:
            self.metrics.send(batch)
            self.metrics.inflight.increment(-len(requests))

    def _one(self, request: Any, batch: names.MetricBatch, index: int, size: int) -> Any:
        images = pb_utils.get_input_tensor_by_name(request, INPUT_IMAGES)
        text = pb_utils.get_input_tensor_by_name(request, INPUT_TEXT)
        try:
            prep = self.pipeline.prepare(None if images is None else images.as_numpy(),
                                         None if text is None else text.as_numpy())
        except Exception as exc:  # the batched models' mapping: 400 naming the field, else this request's 503 or 500
            return prepare_failure(exc, batch, index, size)
        modality = prep.parsed.modality.value
        batch.accepted(modality, [image.pixels for image in prep.parsed.images],
                       prep.text_tokens if prep.parsed.text is not None else None)
        try:
            embedding, classes, hits, misses = self._encode(prep)
        except Exception as exc:  # an encoder's answer (ForwardedFailure), a failed BLS call, the fusion head
            LOG.exception("GPU layout failed on a request")
            return server_failure(exc, batch)
        batch.computed(modality, prep.stage_s, hits, misses)
        return pb_utils.InferenceResponse(output_tensors=[
            pb_utils.Tensor(OUTPUT_EMBEDDING, embedding.reshape(1, -1).astype(np.float32)),
            pb_utils.Tensor(OUTPUT_MODALITY, np.array([[modality.encode()]], dtype=np.object_)),
            pb_utils.Tensor(OUTPUT_IMAGE_CLASSES, _classes_output(classes)),
        ])

    def _call(self, encoder: str, tensors: list[Any], outputs: list[str]) -> list[NDArray[Any]]:
        answer = pb_utils.InferenceRequest(model_name=self.routes[encoder], inputs=tensors,
                                           requested_output_names=outputs).exec()
        if answer.has_error():  # its message only (BLS loses the code): server_error reads the reason back
            raise ForwardedFailure(self.routes[encoder], answer.error().message())
        return [pb_utils.get_output_tensor_by_name(answer, name).as_numpy() for name in outputs]

    def _encode(self, prep: Prepared) -> tuple[NDArray[np.float32], NDArray[np.int32], int, int]:
        """BLS calls for the images (one per fixed size) and the text, then the fusion head; stage seconds are
        added to ``prep.stage_s`` (encoder stages = the BLS call's wall time, queueing included)."""
        clock = time.perf_counter
        images = prep.parsed.images
        entries: list[tuple[Any, ...] | None] = []
        hits = misses = 0
        for image in images:
            cached = image.cached if image.cached is not None else (
                self.cache.get(image.digest) if self.cache is not None else None)
            hits += cached is not None and self.cache is not None
            misses += cached is None and self.cache is not None
            entries.append(cached)
        start = clock()
        batches = pad_images(images, [k for k, entry in enumerate(entries) if entry is None],
                             self.settings.image_bucket_sides)
        for b in batches:
            feats, classes = self._call("image_encoder", [pb_utils.Tensor(PIXELS, b.pixels),
                                                          pb_utils.Tensor(VALID_HW, b.valid_hw)], [FEATURES, CLASSES])
            for j, k in enumerate(b.members):
                entries[k] = (feats[j].copy(), int(classes[j, 0]), images[k].width, images[k].height)
                if self.cache is not None:
                    self.cache.put(images[k].digest, entries[k])  # type: ignore[arg-type]
        if batches:
            prep.stage_s["image_encoder"] = clock() - start
        text_feats = None
        if prep.token_ids is not None:
            start = clock()
            (text_feats,) = self._call("text_encoder", [pb_utils.Tensor(
                TOKEN_IDS, np.array([prep.token_ids], dtype=np.int64))], [FEATURES])
            prep.stage_s["text_encoder"] = clock() - start
        start = clock()
        done = [e for e in entries if e is not None]
        embedding = fuse_request(self.pipeline.encoder, [e[0] for e in done], text_feats)
        prep.stage_s["fusion"] = clock() - start
        return embedding, np.array([e[1] for e in done], dtype=np.int32), hits, misses

    def finalize(self) -> None:
        """Drop the model and metric references."""
        self.pipeline = None  # type: ignore[assignment]
        self.metrics = None  # type: ignore[assignment]
