"""Triton Python-backend models of stage-disaggregated serving (issue 24), imported by the generated ``model.py`` of
``repo_config.build_image_encoder_repository`` and ``build_front_repository``; like ``triton_model`` only usable
inside the backend's stub.

* :class:`ImageEncoderStageModel` (stage ``image-encoder``, model ``image_encoder``): ``IMAGE`` ``[k, 1]`` encoded
  images per request -> ``FEATURES`` ``[k, 1280]`` FP32, ``CLASSES`` ``[k, 1]``, ``IMAGE_SIZE`` ``[k, 2]``; the
  one-piece model's validation, decoding, resolution buckets, embedding cache and encoder passes
  (``pipeline.MultimodalPipeline``), one pass per bucket over every request of Triton's dynamic batch, whichever
  front sent it. Its feature metrics carry ``modality="image"`` (what it sees of every request).
* :class:`FrontModel` (stage ``front``): the client-facing request interface (behind the router as
  ``<name>_<modality>``, or alone), ``staged.FrontPipeline`` with ``encoder_client.ImageEncoderClient``: the text
  encoder and the fusion head run here, the images in the pool, both at once. It never loads the image encoder.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import numpy as np
import torch
import triton_python_backend_utils as pb_utils  # type: ignore[import-not-found]

from modalscale.runtime.model import metrics as names
from modalscale.runtime.model.encoder_client import ImageEncoderClient
from modalscale.runtime.model.encoders import MultimodalEncoder
from modalscale.runtime.model.inputs import Modality
from modalscale.runtime.model.pipeline import MultimodalPipeline, Prepared
from modalscale.runtime.model.settings import ModelSettings
from modalscale.runtime.model.staged import CLIENT, UNAVAILABLE, EncoderFailure, FrontPipeline, FrontPrepared
from modalscale.runtime.model.triton_model import (
    FeatureMetrics,
    _classes_output,
    prepare_failure,
    server_failure,
)
from modalscale.runtime.repo_config import (
    CLASSES,
    ENCODER_IMAGE,
    ENCODER_IMAGE_SIZE,
    FEATURES,
    INPUT_IMAGES,
    INPUT_TEXT,
    OUTPUT_EMBEDDING,
    OUTPUT_IMAGE_CLASSES,
    OUTPUT_MODALITY,
)

LOG = logging.getLogger("modalscale.runtime.model.stages")


def _device(args: dict[str, str]) -> str:
    if args.get("model_instance_kind") == "GPU":
        return f"cuda:{args.get('model_instance_device_id', '0')}"
    return "cpu"


def _threads(settings: ModelSettings) -> None:
    torch.set_num_threads(settings.intra_op_threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:  # already set by an earlier parallel section in this process
        LOG.info("Kept inter-op threads: already initialised")


class ImageEncoderStageModel:
    """The image encoder pool's model (see the module docstring)."""

    def initialize(self, args: dict[str, str]) -> None:
        """Settings from the model config; only the image encoder is loaded."""
        config = json.loads(args["model_config"])
        self.settings = ModelSettings.from_model_config(config)
        _threads(self.settings)
        encoder = MultimodalEncoder(
            self.settings.precision, _device(args), ("image",), self.settings.int8_text, self.settings.image_bf16,
            self.settings.engine, self.settings.intra_op_threads, self.settings.image_int8_min_side_pixels)
        self.pipeline = MultimodalPipeline(self.settings, encoder)
        self.metrics = FeatureMetrics(str(args.get("model_name", config.get("name", ""))))
        self.metrics.report_image_int8(encoder, ("image",))

    def execute(self, requests: list[Any]) -> list[Any]:
        """Encode every request's images; a bad request gets its own error (``INVALID_ARG``), the rest are served."""
        self.metrics.inflight.increment(len(requests))
        batch = names.MetricBatch()
        try:
            return self._execute(requests, batch)
        finally:
            self.metrics.send(batch)
            self.metrics.inflight.increment(-len(requests))

    def _execute(self, requests: list[Any], batch: names.MetricBatch) -> list[Any]:
        image = Modality.IMAGE.value
        responses: list[Any] = [None] * len(requests)
        prepared: list[Prepared] = []
        rows: list[int] = []
        for i, request in enumerate(requests):
            tensor = pb_utils.get_input_tensor_by_name(request, ENCODER_IMAGE)
            try:
                # [k, 1] (the batch dimension counts images) -> one request's [1, k], as the client sent them
                prep = self.pipeline.prepare(None if tensor is None else tensor.as_numpy().reshape(1, -1), None)
            except Exception as exc:  # one request's fault fails that request only (400, 503 or 500: prepare_failure)
                responses[i] = prepare_failure(exc, batch, i, len(requests))
                continue
            batch.accepted(image, [im.pixels for im in prep.parsed.images], None)
            prepared.append(prep)
            rows.append(i)
        if not prepared:
            return responses
        try:
            entries, hits, misses = self.pipeline.image_entries(prepared)
        except Exception as exc:  # the pass's failure fails its requests, each answered, not the batch
            LOG.exception("Image encoder failed on a batch of %d requests", len(prepared))
            for i in rows:
                responses[i] = server_failure(exc, batch)
            return responses
        for j, i in enumerate(rows):
            slots = [e for e in entries[j] if e is not None]
            batch.computed(image, prepared[j].stage_s, hits[j], misses[j])
            responses[i] = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(FEATURES, np.stack([s[0] for s in slots]).astype(np.float32)),
                pb_utils.Tensor(CLASSES, np.array([[s[1]] for s in slots], dtype=np.int32)),
                pb_utils.Tensor(ENCODER_IMAGE_SIZE, np.array([[s[2], s[3]] for s in slots], dtype=np.int32)),
            ])
        return responses

    def finalize(self) -> None:
        """Drop the model and metric references."""
        self.pipeline = None  # type: ignore[assignment]
        self.metrics = None  # type: ignore[assignment]


class FrontModel:
    """A front's batched (or single) client-facing model (see the module docstring)."""

    def initialize(self, args: dict[str, str]) -> None:
        """Settings and the pool's address from the model config; the text encoder (if preloaded) and the fusion
        head.

        Raises:
            ValueError: The parameter ``image_encoder_url`` is missing (the model does not load).
        """
        config = json.loads(args["model_config"])
        self.settings = ModelSettings.from_model_config(config)
        if not self.settings.image_encoder_url:
            raise ValueError("parameter image_encoder_url: required by a front model (repo_config."
                             "build_front_repository sets it from RuntimeConfig.image_encoder_url)")
        _threads(self.settings)
        encoder = MultimodalEncoder(self.settings.precision, _device(args), self.settings.preload,
                                    self.settings.int8_text, self.settings.image_bf16, self.settings.engine,
                                    self.settings.intra_op_threads)
        self.client = ImageEncoderClient(self.settings.image_encoder_url, self.settings.image_encoder_model)
        self.front = FrontPipeline(self.settings, encoder, self.client.start)
        self.metrics = FeatureMetrics(str(args.get("model_name", config.get("name", ""))))

    def execute(self, requests: list[Any]) -> list[Any]:
        """Serve one batch: a response (or a per-request error) for every request, in order."""
        self.metrics.inflight.increment(len(requests))
        batch = names.MetricBatch()
        try:
            return self._execute(requests, batch)
        finally:
            self.metrics.send(batch)
            self.metrics.inflight.increment(-len(requests))

    def _execute(self, requests: list[Any], batch: names.MetricBatch) -> list[Any]:
        responses: list[Any] = [None] * len(requests)
        prepared: list[FrontPrepared] = []
        rows: list[int] = []
        for i, request in enumerate(requests):
            images = pb_utils.get_input_tensor_by_name(request, INPUT_IMAGES)
            text = pb_utils.get_input_tensor_by_name(request, INPUT_TEXT)
            try:
                prep = self.front.prepare(None if images is None else images.as_numpy(),
                                          None if text is None else text.as_numpy())
            except Exception as exc:  # one request's fault fails that request only (400, 503 or 500: prepare_failure)
                responses[i] = prepare_failure(exc, batch, i, len(requests))
                continue
            prepared.append(prep)
            rows.append(i)
        if not prepared:
            return responses
        try:
            outputs = self.front.run(prepared)
        except Exception as exc:  # the pass's failure fails its requests, each answered, not the batch
            LOG.exception("Front failed on a batch of %d requests", len(prepared))
            for i, prep in zip(rows, prepared, strict=True):
                _accepted_unserved(batch, prep)
                responses[i] = server_failure(exc, batch)
            return responses
        for i, prep, out in zip(rows, prepared, outputs, strict=True):
            if isinstance(out, EncoderFailure):
                if out.kind != CLIENT:  # the pool failed or did not answer: accepted, as one-piece counts it
                    _accepted_unserved(batch, prep)
                batch.error(out.reason)
                responses[i] = pb_utils.InferenceResponse(error=pb_utils.TritonError(out.message, _code(out)))
                continue
            batch.accepted(out.modality, out.image_pixels, out.text_tokens)
            batch.computed(out.modality, out.stage_s, 0, 0)
            responses[i] = pb_utils.InferenceResponse(output_tensors=[
                pb_utils.Tensor(OUTPUT_EMBEDDING, out.embedding.reshape(1, -1).astype(np.float32)),
                pb_utils.Tensor(OUTPUT_MODALITY, np.array([[out.modality.encode()]], dtype=np.object_)),
                pb_utils.Tensor(OUTPUT_IMAGE_CLASSES, _classes_output(out.image_classes)),
            ])
        return responses

    def finalize(self) -> None:
        """Close the pool's channels; drop the model and metric references."""
        self.client.close()
        self.front = None  # type: ignore[assignment]
        self.metrics = None  # type: ignore[assignment]


def _accepted_unserved(batch: names.MetricBatch, prep: FrontPrepared) -> None:
    """Count a request that passed the front's checks and then failed (``modalscale_requests_total`` counts what a
    model accepted, as the one-piece model does; a request whose image the pool refused, 400, was not accepted):
    its images and text tokens, no pixels (only the pool knows an image's size)."""
    batch.accepted(prep.modality, [None] * len(prep.images), prep.text_tokens)


def _code(failure: EncoderFailure) -> Any:
    """Triton's status for a failed image call: 400, 503 (``UNAVAILABLE``) or 500."""
    if failure.kind == CLIENT:
        return pb_utils.TritonError.INVALID_ARG
    if failure.kind == UNAVAILABLE:
        return pb_utils.TritonError.UNAVAILABLE
    return pb_utils.TritonError.INTERNAL
